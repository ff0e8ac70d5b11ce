/*
 * Requests: a pool per endpoint (no malloc once warm) and the id table that
 * lets a peer name a request on the wire without ever handing it a pointer.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_engine.h"

static int ntx_reqtab_grow(struct ntx_ep *ep)
{
	uint32_t cap = ep->reqtab_cap ? ep->reqtab_cap * 2 : 256;
	struct ntx_req **tab = realloc(ep->reqtab, cap * sizeof(*tab));

	if (!tab)
		return -FI_ENOMEM;
	ep->reqtab = tab;
	for (uint32_t i = ep->reqtab_cap; i < cap; i++) {
		struct ntx_req *r = calloc(1, sizeof(*r));

		if (!r)
			return -FI_ENOMEM;
		r->id = i; /* generation bits added on every use */
		r->ep = ep;
		tab[i] = r;
		ep->reqtab_cap = i + 1;
		ntx_list_insert_tail(&ep->req_free, &r->entry);
	}
	return 0;
}

struct ntx_req *ntx_req_get(struct ntx_ep *ep, enum ntx_req_kind kind)
{
	struct ntx_req *r;
	uint64_t idx;
	uint8_t *bounce;

	if (ntx_list_empty(&ep->req_free) && ntx_reqtab_grow(ep))
		return NULL;
	r = ntx_container_of(ntx_list_first(&ep->req_free), struct ntx_req,
			     entry);
	ntx_list_remove(&r->entry);
	idx = r->id & 0xffffffffu;
	bounce = r->bounce;
	memset(r, 0, offsetof(struct ntx_req, iov));
	ntx_list_init(&r->entry);
	r->bounce = bounce;
	r->ep = ep;
	r->kind = kind;
	r->id = idx | ((uint64_t)++ep->req_gen << 32);
	r->addr = FI_ADDR_UNSPEC;
	return r;
}

void ntx_req_put(struct ntx_req *r)
{
	/* a new generation makes late packets naming this id miss */
	r->id = (r->id & 0xffffffffu);
	r->state = NTX_RS_NEW;
	ntx_list_insert_head(&r->ep->req_free, &r->entry);
}

struct ntx_req *ntx_req_lookup(struct ntx_ep *ep, uint64_t id)
{
	uint32_t idx = (uint32_t)id;
	struct ntx_req *r;

	if (idx >= ep->reqtab_cap)
		return NULL;
	r = ep->reqtab[idx];
	return (r->id == id && r->state != NTX_RS_NEW) ? r : NULL;
}

int ntx_req_bounce(struct ntx_req *r)
{
	/* kept with the pooled request: allocated once per slot */
	if (!r->bounce && !(r->bounce = malloc(NTX_BOUNCE_SIZE)))
		return -FI_ENOMEM;
	return 0;
}
