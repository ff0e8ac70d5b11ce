/*
 * The AV table (DESIGN §3): fi_addr is the slot of a name; the engine
 * looks names up by slot and slots up by name (FI_SOURCE).
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_core.h"

const struct ntx_addr *ntx_av_get(struct ntx_av *av, fi_addr_t fi_addr)
{
	ntx_assert_mutex_locked(av->domain, &av->lock);
	if (fi_addr >= av->cap || !av->used[fi_addr])
		return NULL;
	return &av->addrs[fi_addr];
}

fi_addr_t ntx_av_reverse(struct ntx_av *av, const struct ntx_addr *a)
{
	ntx_assert_mutex_locked(av->domain, &av->lock);
	for (size_t i = 0; i < av->cap; i++)
		if (av->used[i] && ntx_addr_same_ep(&av->addrs[i], a) &&
		    av->addrs[i].epoch == a->epoch)
			return i;
	return FI_ADDR_NOTAVAIL;
}

static int ntx_av_grow(struct ntx_av *av)
{
	size_t cap = av->cap ? av->cap * 2 : 64;
	struct ntx_addr *addrs = realloc(av->addrs, cap * sizeof(*addrs));
	uint8_t *used;

	if (!addrs)
		return -FI_ENOMEM;
	av->addrs = addrs;
	used = realloc(av->used, cap);
	if (!used)
		return -FI_ENOMEM;
	memset(used + av->cap, 0, cap - av->cap);
	av->used = used;
	av->cap = cap;
	return 0;
}

int ntx_av_table_add(struct ntx_av *av, const struct ntx_addr *a,
		      fi_addr_t *out)
{
	size_t i;

	ntx_assert_mutex_locked(av->domain, &av->lock);
	for (i = av->count; i < av->cap && av->used[i]; i++)
		;
	if (i >= av->cap) {
		for (i = 0; i < av->cap && av->used[i]; i++)
			;
		if (i == av->cap && ntx_av_grow(av))
			return -FI_ENOMEM;
	}
	av->addrs[i] = *a;
	av->used[i] = 1;
	av->count = i + 1;
	*out = i;
	return 0;
}
