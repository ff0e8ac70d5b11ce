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
int ntx_req_grow(struct ntx_ep *ep)
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
		r->entry.next = ep->req_free;
		ep->req_free = &r->entry;
	}
	return 0;
}

static_assert(offsetof(struct ntx_req, iov) == 128,
	      "ntx_req_get sets every field of a request's head: a new one "
	      "needs its line there");

#ifdef NTX_LOCK_CHECK
void ntx_req_assert_tail_clear(const struct ntx_req *r)
{
	const uint8_t *p = (const uint8_t *)r + NTX_REQ_TAIL_OFF;

	for (size_t i = 0; i < NTX_REQ_TAIL_LEN; i++)
		assert(!p[i]);
}
#endif



void ntx_req_put(struct ntx_req *r)
{
	memset((uint8_t *)r + NTX_REQ_TAIL_OFF, 0, NTX_REQ_TAIL_LEN);
	ntx_req_bounce_trim(r);
	ntx_req_put_lean(r->ep, r);
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
	/* kept with the pooled request while the pool holds few */
	if (!r->bounce) {
		if (!(r->bounce = malloc(NTX_BOUNCE_SIZE)))
			return -FI_ENOMEM;
		r->ep->bounces++;
	}
	return 0;
}

void ntx_req_bounce_trim(struct ntx_req *r)
{
	if (r->bounce && r->ep->bounces > NTX_BOUNCE_KEEP) {
		free(r->bounce);
		r->bounce = NULL;
		r->ep->bounces--;
	}
}
