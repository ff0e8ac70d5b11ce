/*
 * The engine's tag matching (ntx_tme.c) and its protocols: messages
 * (ntx_proto_*.c) and one-sided (ntx_rma_proto.c), DESIGN §3: a part of
 * ntx_engine.h, which includes it after the requests and the virtual
 * connections (ntx_engine_req.h, ntx_engine_vc.h).
 */
/* First the engine's types and the parts before this one, in order, even
 * when a file includes this header before ntx_engine.h. */
#include "ntx/ntx_engine.h"
#ifndef NTX_ENGINE_PROTO_H
#define NTX_ENGINE_PROTO_H

/* ---- tag matching (ntx_tme.c) ---- */
void ntx_tme_init(struct ntx_tme *tme);
struct ntx_unexp *ntx_tme_find_unexp(struct ntx_tme *tme, bool tagged,
				     fi_addr_t src, uint64_t tag,
				     uint64_t ignore, void *claim_ctx);
/* The unexpected message a receive takes, or NULL. Inline: every
 * unexpected message is on unexp[tagged], so the common case of a receive
 * posted before its message costs one load and no call. */
static inline struct ntx_unexp *ntx_tme_match_unexp(struct ntx_tme *tme,
						    bool tagged,
						    fi_addr_t src,
						    uint64_t tag,
						    uint64_t ignore,
						    void *claim_ctx)
{
	if (ntx_list_empty(&tme->unexp[tagged]))
		return NULL;
	return ntx_tme_find_unexp(tme, tagged, src, tag, ignore, claim_ctx);
}
/* A tag's bucket of posted_tag and unexp_tag. */
static inline size_t ntx_tme_bucket(uint64_t tag)
{
	tag ^= tag >> 29;
	tag *= 0xbf58476d1ce4e5b9ull;
	tag ^= tag >> 32;
	return (size_t)(tag & (NTX_TME_BUCKETS - 1));
}
/* A tagged receive with no ignore bits: hashed by its tag. */
static inline bool ntx_tme_exact(const struct ntx_req *req)
{
	return (req->flags & FI_TAGGED) && !req->ignore;
}
/* The lean ring's receives become requests on the queues, in order (a
 * receive no request can be had for fails with FI_ENOMEM); the ring is
 * empty after. tme is an endpoint's own (ntx_ep.tme). */
void ntx_tme_lean_flush(struct ntx_tme *tme);
/* The lean ring holds receives. */
static inline bool ntx_tme_lean_any(const struct ntx_tme *tme)
{
	return tme->lean_head != tme->lean_tail;
}
/* The receive at the head of a lean ring that holds one. */
static inline struct ntx_lean_recv *ntx_tme_lean_head(struct ntx_tme *tme)
{
	return &tme->lean[tme->lean_head & (NTX_TME_LEAN - 1)];
}
/* The head was taken: the next one is the head. Both ends go back to 0
 * when the ring empties, so that a ring read as fast as it fills stays
 * in its first lines. */
static inline void ntx_tme_lean_pop(struct ntx_tme *tme)
{
	if (++tme->lean_head == tme->lean_tail)
		tme->lean_head = tme->lean_tail = 0;
}
/* Before anything else looks at or joins the tagged queues. */
static inline void ntx_tme_lean_check(struct ntx_tme *tme)
{
	if (ntx_tme_lean_any(tme))
		ntx_tme_lean_flush(tme);
}
/* A tagged message's match while the lean ring holds receives: the
 * ring's head, as a request taken off it (the others stay), when it takes
 * the message; else NULL, the ring turned into requests on the queues
 * first (ntx_tme_lean_flush), where the caller looks. */
struct ntx_req *ntx_tme_lean_match(struct ntx_tme *tme, fi_addr_t src,
				   uint64_t tag);
/* ntx_tme_post where the lean ring is empty. */
static inline void ntx_tme_queue(struct ntx_tme *tme, struct ntx_req *req)
{
	req->state = NTX_RS_POSTED;
	req->seq = ++tme->seq;
	if (ntx_tme_exact(req)) {
		tme->nexact++;
		ntx_list_insert_tail(&tme->posted_tag[ntx_tme_bucket(req->tag)],
				     &req->entry);
	} else
		ntx_list_insert_tail(&tme->posted[!!(req->flags & FI_TAGGED)],
				     &req->entry);
}
/* Queues a receive in post order. Inline: every receive is posted. */
static inline void ntx_tme_post(struct ntx_tme *tme, struct ntx_req *req)
{
	if (req->flags & FI_TAGGED)
		ntx_tme_lean_check(tme);
	ntx_tme_queue(tme, req);
}
/* Takes a posted receive off its queue (once). */
static inline void ntx_tme_unpost(struct ntx_tme *tme, struct ntx_req *req)
{
	ntx_list_remove(&req->entry);
	if (ntx_tme_exact(req))
		tme->nexact--;
}
static inline bool ntx_tme_tag_match(uint64_t want, uint64_t ignore,
				     uint64_t tag)
{
	return ((want ^ tag) & ~ignore) == 0;
}
static inline bool ntx_tme_src_match(fi_addr_t want, fi_addr_t src)
{
	return want == FI_ADDR_UNSPEC || want == src;
}
/* The lean receive l takes a tagged message from src with this tag. */
static inline bool ntx_tme_lean_takes(const struct ntx_lean_recv *l,
				      fi_addr_t src, uint64_t tag)
{
	return ntx_tme_src_match(l->src, src) &&
	       ntx_tme_tag_match(l->tag, l->ignore, tag);
}
static inline struct ntx_req *ntx_tme_first(struct ntx_list *q, bool tagged,
					    fi_addr_t src, uint64_t tag)
{
	struct ntx_list *it;

	ntx_list_foreach(q, it) {
		struct ntx_req *r = ntx_container_of(it, struct ntx_req, entry);

		if (ntx_tme_src_match(r->addr, src) &&
		    (!tagged || ntx_tme_tag_match(r->tag, r->ignore, tag)))
			return r;
	}
	return NULL;
}
/* Finds and dequeues the receive that takes this message (a multi-receive
 * buffer stays posted while it has room). Inline: every message. */
static inline struct ntx_req *ntx_tme_match_posted(struct ntx_tme *tme,
						   bool tagged, fi_addr_t src,
						   uint64_t tag)
{
	struct ntx_req *r;

	if (tagged && ntx_tme_lean_any(tme)) {
		r = ntx_tme_lean_match(tme, src, tag);
		if (r)
			return r;
	}
	r = ntx_tme_first(&tme->posted[tagged], tagged, src, tag);

	if (tagged && tme->nexact) {
		struct ntx_req *e = ntx_tme_first(
			&tme->posted_tag[ntx_tme_bucket(tag)], true, src, tag);

		if (e && (!r || e->seq < r->seq))
			r = e;
	}
	if (r && !(r->flags & FI_MULTI_RECV))
		ntx_tme_unpost(tme, r);
	return r;
}
void ntx_tme_add_unexp(struct ntx_tme *tme, struct ntx_unexp *u);
void ntx_tme_del_unexp(struct ntx_unexp *u);
struct ntx_req *ntx_tme_cancel(struct ntx_tme *tme, void *context);

/* ---- protocols (ntx_proto_send.c, ntx_proto_recv.c, ntx_proto_rndv.c,
 * ntx_proto_stream.c, ntx_proto_unexp.c) ---- */
ssize_t ntx_proto_send(struct ntx_ep *ep, struct ntx_req *req);
ssize_t ntx_proto_peek(struct ntx_ep *ep, struct ntx_req *req);
/* A send (len: the iovecs' bytes) or a receive (FI_PEEK: a peek) from its
 * arguments, in a request of the pool; endpoint lock held, arguments
 * checked. -FI_EAGAIN when no request can be had. */
ssize_t ntx_proto_post_send(struct ntx_ep *ep, const struct iovec *iov,
			    size_t count, size_t len, fi_addr_t dest,
			    uint64_t tag, uint64_t data, void *context,
			    uint64_t flags);
/* A receive's fields but its iovecs. */
static inline void ntx_req_set_recv(struct ntx_ep *ep, struct ntx_req *r,
				    size_t count, size_t len, fi_addr_t src,
				    uint64_t tag, uint64_t ignore,
				    void *context, uint64_t flags)
{
	r->iov_count = count;
	r->len = len;
	r->addr = src;
	r->tag = tag;
	r->ignore = ignore;
	r->context = context;
	r->flags = flags;
	r->plain = count == 1 && !(flags & FI_MULTI_RECV) &&
		   ntx_comp_wanted(ep->rx_selective, flags);
}
/* A receive request from the caller's arguments (the API checked them). */
static inline struct ntx_req *ntx_req_get_recv(struct ntx_ep *ep,
					       const struct iovec *iov,
					       size_t count, fi_addr_t src,
					       uint64_t tag, uint64_t ignore,
					       void *context, uint64_t flags)
{
	struct ntx_req *r = ntx_req_get(ep, NTX_REQ_RECV);

	if (!r)
		return NULL;
	if (count == 1) { /* no call to memcpy for the common case */
		void *base = iov[0].iov_base;
		size_t len = iov[0].iov_len;

		/* two loads, not one: fi_recv's iovec was just stored a
		 * field at a time, and a wider load across both stores
		 * cannot be forwarded from the store buffer (a stall of
		 * about a dozen cycles, the largest cost of fi_trecv) */
		__asm__("" : "+r"(base), "+r"(len));
		r->iov[0].iov_base = base;
		r->iov[0].iov_len = len;
	} else {
		memcpy(r->iov, iov, count * sizeof(*iov));
	}
	ntx_req_set_recv(ep, r, count, ntx_iov_len(iov, count), src, tag,
			 ignore, context, flags);
	return r;
}
/* ntx_proto_post_recv in every case: peeks, claims, multi-receive
 * buffers, unexpected messages waiting. */
/* fi_trecv's case of a tagged eager message that waits at the head of
 * the unexpected queue and that this receive takes (MPI's receive posted
 * after its message came): delivered at once, without a request, when
 * it fits the one buffer and the endpoint's receive completions are plain
 * CQ entries (ep->rx_fast) the receive asks for. 1 when this does not
 * apply (the caller takes the general path), else 0. Lockless domains
 * (ep->post_fast), arguments checked. */
int ntx_proto_recv_waiting(struct ntx_ep *ep, void *buf, size_t len,
			   fi_addr_t src, uint64_t tag, uint64_t ignore,
			   void *context, uint64_t flags);
ssize_t ntx_proto_post_recv_any(struct ntx_ep *ep, const struct iovec *iov,
				size_t count, fi_addr_t src, uint64_t tag,
				uint64_t ignore, void *context,
				uint64_t flags);
/* A receive (the API checked the arguments and holds the endpoint
 * lock). Inline: with no unexpected message waiting, a plain receive is
 * a request posted in order. -FI_EAGAIN when the pool cannot grow. */
static inline __attribute__((always_inline)) ssize_t
ntx_proto_post_recv(struct ntx_ep *ep, const struct iovec *iov, size_t count,
		    fi_addr_t src, uint64_t tag, uint64_t ignore, void *context,
		    uint64_t flags)
{
	struct ntx_tme *tme = &ep->rx->tme;
	struct ntx_req *r;

	if ((flags & (FI_PEEK | FI_CLAIM | FI_MULTI_RECV)) ||
	    !ntx_list_empty(&tme->unexp[!!(flags & FI_TAGGED)]))
		return ntx_proto_post_recv_any(ep, iov, count, src, tag,
					       ignore, context, flags);
	r = ntx_req_get_recv(ep, iov, count, src, tag, ignore, context,
			     flags);
	if (!r)
		return -FI_EAGAIN;
	ntx_tme_post(tme, r);
	return 0;
}
ssize_t ntx_proto_inject(struct ntx_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest, uint64_t tag, uint64_t data,
			 uint64_t flags);
/* The wire flags of a message's op flags. */
static inline uint8_t ntx_pkt_flags(uint64_t op_flags)
{
	return (op_flags & FI_TAGGED ? NTX_PF_TAGGED : 0) |
	       (op_flags & FI_REMOTE_CQ_DATA ? NTX_PF_DATA : 0);
}
/* An eager message of at most NTX_INLINE_MAX bytes in the header to a
 * connected VC: written in place where the back end can (send_inline),
 * else built here and sent. As ops->send. */
static inline __attribute__((always_inline)) int
ntx_vc_send_inline(struct ntx_vc *vc, uint8_t pflags, uint64_t tag,
		   uint64_t data, const void *buf, size_t len)
{
	struct ntx_wire_hdr h;

	if (vc->ops->send_inline)
		return vc->ops->send_inline(vc->conn, pflags, tag, data, buf,
					    len);
	ntx_wire_hdr_inline(&h, pflags, tag, data, buf, len);
	return vc->ops->send(vc->conn, &h, NULL, 0, 0);
}
/* The VC of a send made without a request (fast: see
 * ntx_proto_send_small). */
static inline struct ntx_vc *ntx_vc_direct(struct ntx_ep *ep, fi_addr_t dest,
					   bool fast)
{
	return ntx_idtab_get(&ep->vc_tab, !fast && ep->cm
						  ? ep->msg_dest
						  : ntx_vc_key(ep, dest));
}
/* vc takes a send without a request now: it is connected, nothing is
 * queued on it to go first, and no flag asks for a request (anything
 * else needs one, or order behind queued work). */
static inline bool ntx_vc_direct_ok(const struct ntx_vc *vc, uint64_t flags)
{
	return vc && vc->state == NTX_VC_CONNECTED &&
	       ntx_list_empty(&vc->backlog) &&
	       !(flags & (FI_DELIVERY_COMPLETE | FI_FENCE));
}
/* The message-rate path: a send of at most NTX_INLINE_MAX bytes to a
 * connected peer with nothing queued, written into the header and
 * completed at once, without a request (inject: fi_inject's, which
 * counts but never writes a CQ entry). fast: the application's own call
 * on an endpoint that may send at once (ep->send_fast: no connection
 * management, a lockless domain, so not inside fi_cq_read either). 1
 * when it does not apply (the caller takes the general path), else 0 or
 * a negative error. Inline: fi_tsenddata's and fi_tinjectdata's own
 * path. */
static inline __attribute__((always_inline)) int
ntx_proto_send_small(struct ntx_ep *ep, const void *buf, size_t len,
		     fi_addr_t dest, uint64_t tag, uint64_t data, void *context,
		     uint64_t flags, bool inject, bool fast)
{
	struct ntx_vc *vc = ntx_vc_direct(ep, dest, fast);

	if (len > NTX_INLINE_MAX || !ntx_vc_direct_ok(vc, flags))
		return 1;
	/* a send whose completion waits for the back end's word that the
	 * peer took it needs a request to wait in (ops->acks_eager) */
	if (!inject && vc->ops->acks_eager && ntx_params.acked_sends)
		return 1;
	if (ntx_vc_send_inline(vc, ntx_pkt_flags(flags), tag, data, buf, len))
		return 1; /* full or failed: the general path queues or
			   * reports it */
	if (!inject)
		ntx_comp_send(ep, context, flags, fast);
	else if (ep->send_cntr)
		ntx_cntr_inc(ep->send_cntr);
	return 0;
}
/* ntx_proto_send_small's case of a message of more than NTX_INLINE_MAX
 * and at most NTX_INJECT_MAX bytes in one buffer: one eager packet
 * straight from the buffer (the back end copies it before it returns, as
 * for fi_inject), completed at once, without a request. 1 when it does
 * not apply (not connected, work queued, FI_DELIVERY_COMPLETE or
 * FI_FENCE, no room or any error: the general path queues or reports
 * it), else 0. */
int ntx_proto_send_eager(struct ntx_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest, uint64_t tag, uint64_t data,
			 void *context, uint64_t flags, bool fast);
/* Sends what req still has to send; 0 when done, -FI_EAGAIN to retry */
int ntx_proto_tx(struct ntx_req *req);
/* A packet from a back end: the ntx_be_cb recv callback of every VC. */
void ntx_proto_on_recv(void *vc, const void *hdr, const void *payload,
		       size_t len);
/* A half entry's message: the ntx_be_cb recv_small callback. */
void ntx_proto_on_small(void *vc, uint8_t pflags, uint64_t tag,
			uint64_t data, uint64_t bytes, size_t len);
void ntx_proto_vc_failed(struct ntx_vc *vc);
/* Fails rx's posted receives from src (FI_ADDR_UNSPEC: all) with err. */
void ntx_proto_fail_posted(struct ntx_ep *rx, fi_addr_t src, int err);
/* Frees the unexpected messages and their pool (endpoint close). */
void ntx_proto_unexp_fini(struct ntx_ep *ep);
/* Frees the unexpected messages of vc waiting in its receive context. */
void ntx_proto_unexp_drop(struct ntx_vc *vc);
/* The budget of unexpected messages (ntx_unexp_budget.c), under the
 * receive context's lock. admit: cost more bytes of vc may wait, within
 * the peer's limit and the budget, which may doom the largest holder;
 * false: vc failed. charge and refund count an entry's cost in vc and,
 * while vc is live, in its receive context. off_budget: vc failed, what
 * it holds leaves the budget and it may hold no more. */
bool ntx_unexp_admit(struct ntx_vc *vc, size_t cost);
void ntx_unexp_charge(struct ntx_vc *vc, size_t cost);
void ntx_unexp_refund(struct ntx_vc *vc, size_t cost);
void ntx_unexp_off_budget(struct ntx_vc *vc);
/* Largest payload of one packet on this VC's back end. */
size_t ntx_vc_mtu(const struct ntx_vc *vc);
/* Single-copy move of [off, off + len) between our iovecs and a peer's. */
int ntx_bulk_move(struct ntx_vc *vc, bool write, const struct iovec *local,
		  size_t nlocal, const struct ntx_wire_iov *remote,
		  size_t nremote, size_t off, size_t len);
/* A peer's buffers as its packet lists them (h->niov entries, the
 * payload): taken whole only when 1 to NTX_MAX_IOV entries fill the
 * payload exactly; copied, then their lengths must add up to
 * h->msg_len (checked on our copy, which the peer cannot change). */
static inline bool ntx_wire_iov_take(const struct ntx_wire_hdr *h,
				     const void *payload, size_t len,
				     struct ntx_wire_iov *w)
{
	uint64_t sum = 0;

	if (!h->niov || h->niov > NTX_MAX_IOV || len != h->niov * sizeof(*w))
		return false;
	memcpy(w, payload, len);
	for (uint16_t i = 0; i < h->niov; i++)
		sum += w[i].len;
	return sum == h->msg_len;
}
/* Our buffers as the peer's bulk moves will see them (with the back
 * end's keys; 'writable' when the peer is to write them). */
void ntx_wire_iov_fill(struct ntx_vc *vc, const struct iovec *iov, size_t n,
		       bool writable, struct ntx_wire_iov *w);
/* Bulk moves on this VC: a back end that has them, and single copy not
 * turned off for the shm window (FI_NTX_SHM_CMA) nor refused by this peer
 * (a peer that cannot or will not move by CMA costs only itself) */
static inline bool ntx_vc_bulk(const struct ntx_vc *vc)
{
	return vc->ops->bulk_read && vc->ops->bulk_write &&
	       (vc->ops->bulk_keyed || (vc->ep->cma_ok && !vc->no_cma));
}
/* A send request is done or failed (err negative) */
void ntx_proto_send_done(struct ntx_req *r);
void ntx_proto_send_fail(struct ntx_req *r, int err);

/* ---- one-sided (ntx_rma_proto.c) ---- */
#define NTX_ATOMIC_MAX_BYTES 2048 /* operands of one remote iovec */
ssize_t ntx_rma_post(struct ntx_ep *ep, struct ntx_req *req);
/* A request with room in the transmit queue, or NULL; endpoint lock held */
struct ntx_req *ntx_rma_req_get(struct ntx_ep *ep);
int ntx_rma_tx(struct ntx_req *req);
void ntx_rma_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr,
		       const void *payload, size_t len);

#endif /* NTX_ENGINE_PROTO_H */
