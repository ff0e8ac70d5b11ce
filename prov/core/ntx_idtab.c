/*
 * The growable id table (DESIGN §3): one pointer per small integer id,
 * grown by doubling. AV slots, MR key indexes, request ids and the VC of
 * an AV slot all live in one; a lookup is the inline ntx_idtab_get.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_core.h"

/* Room for slot i: the capacity doubles (from NTX_IDTAB_MIN) until it
 * holds i; the new slots are empty. */
static int ntx_idtab_grow(struct ntx_idtab *t, uint64_t i)
{
	uint64_t cap = t->cap ? t->cap : NTX_IDTAB_MIN;
	void **slot;

	if (i >= NTX_IDTAB_MAX)
		return -FI_ENOSPC;
	while (cap <= i)
		cap *= 2;
	if (cap > NTX_IDTAB_MAX)
		cap = NTX_IDTAB_MAX;
	slot = realloc(t->slot, cap * sizeof(*slot));
	if (!slot)
		return -FI_ENOMEM;
	memset(slot + t->cap, 0, (cap - t->cap) * sizeof(*slot));
	t->slot = slot;
	t->cap = (uint32_t)cap;
	return 0;
}

int ntx_idtab_set(struct ntx_idtab *t, uint64_t i, void *p)
{
	int ret;

	if (!p) {
		ntx_idtab_clear(t, i);
		return 0;
	}
	if (i >= t->cap && (ret = ntx_idtab_grow(t, i)))
		return ret;
	if (!t->slot[i])
		t->used++;
	t->slot[i] = p;
	return 0;
}

int ntx_idtab_alloc(struct ntx_idtab *t, void *p, uint32_t *id)
{
	uint32_t i = t->hint;
	int ret;

	assert(p);
	/* every slot below the hint is taken: start the search there */
	while (i < t->cap && t->slot[i])
		i++;
	ret = ntx_idtab_set(t, i, p);
	if (ret)
		return ret;
	t->hint = i + 1;
	*id = i;
	return 0;
}

void *ntx_idtab_clear(struct ntx_idtab *t, uint64_t i)
{
	void *p = ntx_idtab_get(t, i);

	if (!p)
		return NULL;
	t->slot[i] = NULL;
	t->used--;
	if (i < t->hint)
		t->hint = (uint32_t)i;
	return p;
}

void ntx_idtab_fini(struct ntx_idtab *t)
{
	free(t->slot);
	memset(t, 0, sizeof(*t));
}
