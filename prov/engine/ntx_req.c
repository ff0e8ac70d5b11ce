/*
 * Requests: a pool per endpoint (no malloc once warm) and the id table that
 * lets a peer name a request on the wire without ever handing it a pointer.
 */
#include "config.h"
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>

#include "ntx/ntx_engine.h"

/* Doubles the pool (256 requests at first); slots never empty again,
 * so the requests' ids are 0 .. used - 1. */
static int ntx_reqtab_grow(struct ntx_ep *ep)
{
	uint32_t n = ep->reqtab.used ? ep->reqtab.used : 256;

	for (uint32_t k = 0; k < n; k++) {
		struct ntx_req *r = calloc(1, sizeof(*r));
		uint32_t i;

		if (!r)
			return -FI_ENOMEM;
		if (ntx_idtab_alloc(&ep->reqtab, r, &i)) {
			free(r);
			return -FI_ENOMEM;
		}
		r->id = i; /* generation bits added on every use */
		r->ep = ep;
		ntx_list_insert_tail(&ep->req_free, &r->entry);
	}
	return 0;
}

static_assert(offsetof(struct ntx_req, iov) == 128,
	      "ntx_req_get sets every field of a request's head: a new one "
	      "needs its line there");

/* The tail of a request: from the first field after the iovecs up to
 * the bounce pointer (DESIGN §3, requests). */
#define NTX_REQ_TAIL_OFF offsetof(struct ntx_req, peer_req)
#define NTX_REQ_TAIL_LEN (offsetof(struct ntx_req, bounce) - NTX_REQ_TAIL_OFF)

#ifdef NTX_LOCK_CHECK
/* Checking builds: the tail of a pooled request is really zero. */
static void ntx_req_assert_tail_clear(const struct ntx_req *r)
{
	const uint8_t *p = (const uint8_t *)r + NTX_REQ_TAIL_OFF;

	for (size_t i = 0; i < NTX_REQ_TAIL_LEN; i++)
		assert(!p[i]);
}
#else
#define ntx_req_assert_tail_clear(r) ((void)(r))
#endif

struct ntx_req *ntx_req_get(struct ntx_ep *ep, enum ntx_req_kind kind)
{
	struct ntx_req *r;
	uint64_t idx;

	if (ntx_list_empty(&ep->req_free) && ntx_reqtab_grow(ep))
		return NULL;
	r = ntx_container_of(ntx_list_first(&ep->req_free), struct ntx_req,
			     entry);
	ntx_list_remove(&r->entry);
	idx = r->id & 0xffffffffu;
	/* the head only, field by field (a memset of it compiles to a rep
	 * stos that costs more than the stores); the tail is clear on the
	 * free list, the iovecs are valid up to their count */
	ntx_list_init(&r->entry);
	r->kind = kind;
	r->state = NTX_RS_NEW;
	r->ep = ep;
	r->vc = NULL;
	r->context = NULL;
	r->flags = 0;
	r->id = idx | ((uint64_t)++ep->req_gen << 32);
	r->iov_count = 0;
	r->len = 0;
	r->tag = 0;
	r->ignore = 0;
	r->data = 0;
	r->seq = 0;
	r->addr = FI_ADDR_UNSPEC;
	r->silent = false;
	r->issued = false;
	r->rma_op = 0;
	ntx_req_assert_tail_clear(r);
	return r;
}

void ntx_req_put_lean(struct ntx_req *r)
{
	ntx_req_assert_tail_clear(r);
	/* a new generation makes late packets naming this id miss */
	r->id = (r->id & 0xffffffffu);
	r->state = NTX_RS_NEW;
	ntx_list_insert_head(&r->ep->req_free, &r->entry);
}

void ntx_req_put(struct ntx_req *r)
{
	memset((uint8_t *)r + NTX_REQ_TAIL_OFF, 0, NTX_REQ_TAIL_LEN);
	ntx_req_put_lean(r);
}

struct ntx_req *ntx_req_lookup(struct ntx_ep *ep, uint64_t id)
{
	struct ntx_req *r = ntx_idtab_get(&ep->reqtab, (uint32_t)id);

	return (r && r->id == id && r->state != NTX_RS_NEW) ? r : NULL;
}

void ntx_req_fini(struct ntx_ep *ep)
{
	for (uint32_t i = 0; i < ep->reqtab.cap; i++) {
		struct ntx_req *r = ntx_idtab_get(&ep->reqtab, i);

		if (r) {
			free(r->bounce);
			free(r);
		}
	}
	ntx_idtab_fini(&ep->reqtab);
}

int ntx_req_bounce(struct ntx_req *r)
{
	/* kept with the pooled request: allocated once per slot */
	if (!r->bounce && !(r->bounce = malloc(NTX_BOUNCE_SIZE)))
		return -FI_ENOMEM;
	return 0;
}
