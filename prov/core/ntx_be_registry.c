/*
 * The back-end registry (DESIGN §2): back ends add themselves when the
 * provider loads; the API asks for one by domain name. Core keeps the
 * list and calls back ends only through the pointers they registered.
 */
#include "config.h"

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"

/* Filled by constructors before fi_prov_ini runs, read-only after. */
static struct ntx_be_desc *ntx_be_list;

/* Keeps the list sorted by order (stable for equal orders). */
void ntx_be_register(struct ntx_be_desc *d)
{
	struct ntx_be_desc **p = &ntx_be_list;

	while (*p && (*p)->order <= d->order)
		p = &(*p)->next;
	d->next = *p;
	*p = d;
}

const struct ntx_be_desc *ntx_be_local(void)
{
	for (struct ntx_be_desc *d = ntx_be_list; d; d = d->next)
		if (d->local)
			return d;
	return NULL;
}

const struct ntx_be_desc *ntx_be_for_domain(const char *name)
{
	struct ntx_be_domain doms[16];

	for (struct ntx_be_desc *d = ntx_be_list; d; d = d->next) {
		int n = d->domains ? d->domains(doms, 16) : 0;

		for (int i = 0; i < n; i++)
			if (!strcmp(doms[i].name, name))
				return d;
	}
	return NULL;
}

int ntx_be_domains(struct ntx_be_domain *out, int max)
{
	int n = 0;

	for (struct ntx_be_desc *d = ntx_be_list; d && n < max; d = d->next) {
		int got = d->domains ? d->domains(out + n, max - n) : 0;

		for (int i = 0; i < got; i++) {
			out[n + i].named_only = d->named_only;
			out[n + i].datagram = d->datagram;
		}
		n += got;
	}
	return n;
}

void ntx_be_fini_all(void)
{
	for (struct ntx_be_desc *d = ntx_be_list; d; d = d->next)
		if (d->fini)
			d->fini();
	ntx_fdwatch_fini();
}
