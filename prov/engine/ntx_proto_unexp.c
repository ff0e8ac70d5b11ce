/*
 * Unexpected messages' entries and their pool, and what a failed peer
 * leaves: its requests in flight, receives only it fills, messages waiting.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_engine.h"
#include "ntx_proto_int.h"

/* Entries kept for reuse, and the largest buffer one keeps: a burst of
 * large unexpected messages (or a hostile peer's) is given back. */
#define NTX_UNEXP_POOL 256
#define NTX_UNEXP_KEEP_CAP 65536
/* Larger buffers kept apart, by their own count and bytes: a halo
 * exchange's large unexpected messages come again and again, and each
 * fresh allocation of one cost its page faults (a 256 KiB streamed halo
 * step at np 2 took 1.2 ms instead of 0.1) */
#define NTX_UNEXP_BIG_BYTES ((size_t)2 << 20)

/* A kept large buffer of at least len bytes (the smallest), or NULL. */
static uint8_t *ntx_unexp_big_take(struct ntx_ep *ep, size_t len,
				   size_t *cap)
{
	struct ntx_unexp_big *best = NULL;
	uint8_t *d;

	for (size_t i = 0; i < NTX_UNEXP_BIG; i++) {
		struct ntx_unexp_big *b = &ep->unexp_big[i];

		if (b->data && b->cap >= len && (!best || b->cap < best->cap))
			best = b;
	}
	if (!best)
		return NULL;
	d = best->data;
	*cap = best->cap;
	ep->unexp_big_bytes -= best->cap;
	best->data = NULL;
	best->cap = 0;
	return d;
}

/* Keeps a large buffer when there is room, else frees it. */
static void ntx_unexp_big_keep(struct ntx_ep *ep, uint8_t *data, size_t cap)
{
	for (size_t i = 0; i < NTX_UNEXP_BIG; i++) {
		struct ntx_unexp_big *b = &ep->unexp_big[i];

		if (!b->data && ep->unexp_big_bytes + cap <= NTX_UNEXP_BIG_BYTES) {
			b->data = data;
			b->cap = cap;
			ep->unexp_big_bytes += cap;
			return;
		}
	}
	free(data);
}

static struct ntx_unexp *ntx_unexp_get(struct ntx_ep *ep, size_t len)
{
	struct ntx_unexp *u = NULL;

	if (!ntx_list_empty(&ep->unexp_free)) {
		u = ntx_container_of(ntx_list_first(&ep->unexp_free),
				     struct ntx_unexp, entry);
		ntx_list_remove(&u->entry);
		ep->unexp_pooled--;
	} else if (!(u = calloc(1, sizeof(*u)))) {
		return NULL;
	}
	/* at least a word: a small message's bytes move as one */
	if (len < sizeof(uint64_t))
		len = sizeof(uint64_t);
	if (len > u->cap && len > NTX_UNEXP_KEEP_CAP) {
		size_t cap;
		uint8_t *d = ntx_unexp_big_take(ep, len, &cap);

		if (d) {
			free(u->data);
			u->data = d;
			u->cap = cap;
		}
	}
	if (len > u->cap) {
		uint8_t *d = realloc(u->data, len);

		if (!d) {
			ntx_list_insert_head(&ep->unexp_free, &u->entry);
			ep->unexp_pooled++;
			return NULL;
		}
		u->data = d;
		u->cap = len;
	}
	u->claim_ctx = NULL;
	u->len = 0;
	u->niov = 0;
	return u;
}

/* What an unexpected message counts against its peer's limit. */
static size_t ntx_unexp_cost(size_t len)
{
	return sizeof(struct ntx_unexp) + len;
}

void ntx_unexp_free(struct ntx_unexp *u)
{
	struct ntx_vc *vc = u->vc;
	struct ntx_ep *ep = vc->ep;

	ntx_tme_del_unexp(u);
	ntx_unexp_refund(vc, ntx_unexp_cost(u->cap));
	if (vc->keeps_unexp)
		ep->dead_unexp_bytes -= ntx_unexp_cost(u->cap);
	if (vc->zombie && !vc->unexp_bytes)
		free(vc);
	if (u->cap > NTX_UNEXP_KEEP_CAP) {
		ntx_unexp_big_keep(ep, u->data, u->cap);
		u->data = NULL;
		u->cap = 0;
	}
	if (ep->unexp_pooled >= NTX_UNEXP_POOL) {
		free(u->data);
		free(u);
		return;
	}
	/* kept for reuse: no allocation for unexpected messages once warm */
	ntx_list_insert_head(&ep->unexp_free, &u->entry);
	ep->unexp_pooled++;
}

/* At endpoint close: the unexpected messages still held and the pool of
 * their entries. */
void ntx_proto_unexp_fini(struct ntx_ep *ep)
{
	struct ntx_list *it, *tmp;

	/* through ntx_unexp_free first: the last message of a zombie VC
	 * frees it */
	for (int t = 0; t < 2; t++)
		ntx_list_foreach_safe(&ep->tme.unexp[t], it, tmp)
			ntx_unexp_free(ntx_container_of(it, struct ntx_unexp,
							entry));
	ntx_list_foreach_safe(&ep->unexp_free, it, tmp) {
		struct ntx_unexp *u = ntx_container_of(it, struct ntx_unexp,
						       entry);
		free(u->data);
		free(u);
	}
	for (size_t i = 0; i < NTX_UNEXP_BIG; i++)
		free(ep->unexp_big[i].data);
	ep->unexp_big_bytes = 0;
}

/* An entry for a message of vc that no receive was posted for, holding
 * 'hold' bytes, within the peer's limit and the receive context's
 * budget; NULL when it is over them or out of memory (vc failed). */
struct ntx_unexp *ntx_unexp_take(struct ntx_vc *vc, size_t len,
				 size_t hold)
{
	struct ntx_unexp *u;

	if (!ntx_unexp_admit(vc, ntx_unexp_cost(len)))
		return NULL;
	u = ntx_unexp_get(vc->ep, hold);
	if (!u) {
		NTX_WARN(FI_LOG_EP_DATA, "no memory for an unexpected message\n");
		ntx_vc_fail(vc, -FI_ENOMEM);
		return NULL;
	}
	u->vc = vc;
	ntx_unexp_charge(vc, ntx_unexp_cost(u->cap));
	/* off every queue until ntx_tme_add_unexp: freeing it is safe */
	ntx_list_init(&u->entry);
	ntx_list_init(&u->tag_entry);
	return u;
}

/* A failed peer's unexpected messages: its rendezvous data can no longer
 * be pulled, but an eager message is whole here and was sent (a peer
 * that exits right after its send completes is no rarer than one that
 * lingers): those stay receivable, up to FI_NTX_GONE_UNEXP_MAX bytes of
 * failed peers' messages per endpoint, so that peers that connect, fill
 * their allowance and go, again and again, cannot grow our memory. */
static void ntx_unexp_free_vc(struct ntx_vc *vc, bool rndv_only)
{
	struct ntx_list *it, *tmp;

	for (int t = 0; t < 2; t++)
		ntx_list_foreach_safe(&vc->ep->rx->tme.unexp[t], it, tmp) {
			struct ntx_unexp *u = ntx_container_of(it, struct ntx_unexp,
							       entry);
			if (u->vc == vc &&
			    (!rndv_only || u->hdr.op != NTX_OP_EAGER))
				ntx_unexp_free(u);
		}
}

static void ntx_proto_unexp_failed(struct ntx_vc *vc)
{
	struct ntx_ep *ep = vc->ep;
	bool keep;

	ntx_unexp_off_budget(vc); /* kept or not, no longer a live peer's */
	ntx_unexp_free_vc(vc, true);
	/* in a shared receive context they would outlive the endpoint */
	keep = vc->unexp_bytes && ep->rx == ep &&
	       ep->dead_unexp_bytes + vc->unexp_bytes <=
		       ntx_params.gone_unexp_max;
	if (keep) {
		vc->keeps_unexp = true;
		ep->dead_unexp_bytes += vc->unexp_bytes;
		return;
	}
	ntx_unexp_free_vc(vc, false);
}

void ntx_proto_unexp_drop(struct ntx_vc *vc)
{
	ntx_unexp_free_vc(vc, false);
}

/* Fails the posted receives of rx that only the peer at src could fill:
 * those directed at it, or (src FI_ADDR_UNSPEC: a MSG endpoint's one
 * peer) every one. A receive from any source of an RDM endpoint stays
 * posted: another peer may still send it a message; so does a
 * multi-receive buffer, which its messages in flight still use. */
void ntx_proto_fail_posted(struct ntx_ep *rx, fi_addr_t src, int err)
{
	struct ntx_tme *tme = &rx->tme;
	struct ntx_list *it, *tmp;

	ntx_tme_lean_check(tme);
	for (int q = 0; q < 2 + NTX_TME_BUCKETS; q++) {
		struct ntx_list *l = q < 2 ? &tme->posted[q]
					   : &tme->posted_tag[q - 2];

		if (q == 2 && !tme->nexact)
			break;
		ntx_list_foreach_safe(l, it, tmp) {
			struct ntx_req *r = ntx_container_of(it, struct ntx_req,
							     entry);

			if ((src != FI_ADDR_UNSPEC && r->addr != src) ||
			    (r->flags & FI_MULTI_RECV))
				continue;
			ntx_tme_unpost(tme, r);
			ntx_comp_rx_err(r, err, 0, 0, r->tag, 0);
			ntx_req_put(r);
		}
	}
}

void ntx_proto_vc_failed(struct ntx_vc *vc)
{
	struct ntx_list *lists[2] = { &vc->backlog, &vc->pending };
	struct ntx_list *it, *tmp;
	int err = vc->err ? -vc->err : FI_EIO;

	for (int i = 0; i < 2; i++) {
		ntx_list_foreach_safe(lists[i], it, tmp) {
			struct ntx_req *r = ntx_container_of(it, struct ntx_req,
							     entry);
			ntx_list_remove(&r->entry);
			if (r->kind == NTX_REQ_CTRL) {
				vc->ctrl_queued--;
				ntx_req_put(r);
			} else if (r->kind == NTX_REQ_SEND) {
				ntx_proto_send_fail(r, -err);
			} else {
				ntx_comp_rx_err(r, err, 0, 0, r->hdr.tag,
						r->hdr.cq_data);
				if (r->multi_parent)
					ntx_mrecv_unref(r->multi_parent);
				ntx_req_put(r);
			}
		}
	}
	/* a streamed message cut short: its receive failed above */
	if (vc->rx_stream_u)
		ntx_unexp_free(vc->rx_stream_u);
	vc->rx_stream = NULL;
	vc->rx_stream_u = NULL;
	vc->rx_stream_len = 0;
	ntx_proto_unexp_failed(vc);
	if (vc->ep->cm)
		vc->ep->cm->vc_failed(vc->ep, vc);
}
