/*
 * The AV table (DESIGN §3): fi_addr is the slot of a name in an id table;
 * the engine looks names up by slot and slots up by name (FI_SOURCE).
 * Each name is allocated on its own, so a pointer to one stays valid
 * while the table grows.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_core.h"

/* A reader of a shared AV copies a name from the creator's region the
 * first time it is looked up (checked: the creator is another process);
 * later changes of that slot there are not seen (DESIGN §3). */
static const struct ntx_addr *ntx_av_fetch(struct ntx_av *av,
					   fi_addr_t fi_addr)
{
	struct ntx_addr *copy;
	int ret;

	copy = malloc(sizeof(*copy));
	if (!copy)
		return NULL;
	ret = ntx_av_shared_get(&av->shared, fi_addr, copy);
	if (!ret)
		ret = ntx_idtab_set(&av->addrs, (uint32_t)fi_addr, copy);
	if (ret) {
		if (ret == -FI_EINVAL)
			NTX_WARN(FI_LOG_AV, "shared AV slot %llu holds no "
				 "valid name\n", (unsigned long long)fi_addr);
		free(copy);
		return NULL;
	}
	return copy;
}

const struct ntx_addr *ntx_av_get(struct ntx_av *av, fi_addr_t fi_addr)
{
	const struct ntx_addr *a;

	ntx_assert_mutex_locked(av->domain, &av->lock);
	a = ntx_idtab_get(&av->addrs, fi_addr);
	if (!a && av->read_only)
		a = ntx_av_fetch(av, fi_addr);
	return a;
}

/* Entry s names the endpoint a: the same incarnation, or an entry not
 * resolved yet (a service number: FI_SOCKADDR_IN, fi_av_insertsvc) that
 * a's service and host or IPv4 address fit. */
static bool ntx_av_names(const struct ntx_addr *s, const struct ntx_addr *a)
{
	if (!(s->flags & NTX_ADDR_F_UNBOUND))
		return ntx_addr_same_ep(s, a) && s->epoch == a->epoch;
	return s->service && s->service == a->service &&
	       (s->host == a->host ||
		(s->host == NTX_HOST_UNKNOWN && s->ip4 == a->ip4));
}

const struct ntx_addr *ntx_av_get_ctx(struct ntx_av *av, fi_addr_t slot,
				      uint32_t ctx)
{
	const struct ntx_av_list *l;

	if (!ctx)
		return ntx_av_get(av, slot);
	l = ntx_idtab_get(&av->lists, slot);
	return l && ctx < l->n ? &l->names[ctx] : NULL;
}

uint32_t ntx_av_ctx_count(struct ntx_av *av, fi_addr_t slot)
{
	const struct ntx_av_list *l = ntx_idtab_get(&av->lists, slot);

	return l ? l->n : 1;
}

/* Plain entries and scalable endpoints' first names are looked at before
 * other contexts' names: a peer that lists another's name among its
 * contexts cannot take that one's messages for its own (DESIGN §3,
 * "Scalable endpoints"). */
fi_addr_t ntx_av_reverse(struct ntx_av *av, const struct ntx_addr *a,
			 uint32_t *ctx)
{
	ntx_assert_mutex_locked(av->domain, &av->lock);
	*ctx = 0;
	for (uint32_t i = 0; i < av->addrs.cap; i++) {
		const struct ntx_addr *s = ntx_idtab_get(&av->addrs, i);

		if (s && ntx_av_names(s, a))
			return i;
	}
	for (uint32_t i = 0; i < av->lists.cap; i++) {
		const struct ntx_av_list *l = ntx_idtab_get(&av->lists, i);

		for (uint32_t c = 1; l && c < l->n; c++) {
			if (ntx_av_names(&l->names[c], a)) {
				*ctx = c;
				return i;
			}
		}
	}
	return FI_ADDR_NOTAVAIL;
}

int ntx_av_table_set_list(struct ntx_av *av, fi_addr_t slot,
			  const struct ntx_addr *names, uint32_t n)
{
	struct ntx_av_list *l;
	int ret;

	ntx_assert_mutex_locked(av->domain, &av->lock);
	if (n < 2 || n > NTX_SEP_CTX_MAX || !ntx_idtab_get(&av->addrs, slot))
		return -FI_EINVAL;
	l = malloc(sizeof(*l) + n * sizeof(l->names[0]));
	if (!l)
		return -FI_ENOMEM;
	l->n = n;
	memcpy(l->names, names, n * sizeof(l->names[0]));
	free(ntx_idtab_clear(&av->lists, slot));
	ret = ntx_idtab_set(&av->lists, (uint32_t)slot, l);
	if (ret)
		free(l);
	return ret;
}

int ntx_av_table_add(struct ntx_av *av, const struct ntx_addr *a,
		      fi_addr_t *out)
{
	struct ntx_addr *copy = malloc(sizeof(*copy));
	uint32_t i;
	int ret;

	ntx_assert_mutex_locked(av->domain, &av->lock);
	if (!copy)
		return -FI_ENOMEM;
	*copy = *a;
	ret = ntx_idtab_alloc(&av->addrs, copy, &i);
	if (ret) {
		free(copy);
		return ret;
	}
	*out = i;
	return 0;
}

int ntx_av_table_del(struct ntx_av *av, fi_addr_t fi_addr)
{
	struct ntx_addr *a = ntx_idtab_clear(&av->addrs, fi_addr);

	if (!a)
		return -FI_EINVAL;
	free(a);
	free(ntx_idtab_clear(&av->lists, fi_addr));
	return 0;
}

void ntx_av_table_fini(struct ntx_av *av)
{
	for (uint32_t i = 0; i < av->addrs.cap; i++)
		free(ntx_idtab_get(&av->addrs, i));
	ntx_idtab_fini(&av->addrs);
	for (uint32_t i = 0; i < av->lists.cap; i++)
		free(ntx_idtab_get(&av->lists, i));
	ntx_idtab_fini(&av->lists);
}
