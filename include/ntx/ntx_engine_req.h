/*
 * The engine's requests (ntx_req.c) and their completions (ntx_comp.c),
 * DESIGN §3: a part of ntx_engine.h, which includes it after the engine's
 * types.
 */
/* First the engine's types and the parts before this one, in order, even
 * when a file includes this header before ntx_engine.h. */
#include "ntx/ntx_engine.h"
#ifndef NTX_ENGINE_REQ_H
#define NTX_ENGINE_REQ_H

/* ---- requests (ntx_req.c) ---- */
/* Doubles an endpoint's pool of requests. */
int ntx_req_grow(struct ntx_ep *ep);
/* The tail of a request: from the first field after the iovecs up to
 * the bounce pointer (DESIGN §3, requests). */
#define NTX_REQ_TAIL_OFF offsetof(struct ntx_req, peer_req)
#define NTX_REQ_TAIL_LEN (offsetof(struct ntx_req, bounce) - NTX_REQ_TAIL_OFF)
#ifdef NTX_LOCK_CHECK
/* Checking builds: the tail of a pooled request is really zero. */
void ntx_req_assert_tail_clear(const struct ntx_req *r);
#else
#define ntx_req_assert_tail_clear(r) ((void)(r))
#endif
/* Takes a request off the endpoint's free stack, which is not empty.
 * Its ep is the pool's, set once (ntx_req_grow); the tail is clear, the
 * iovecs are valid up to their count. */
static inline struct ntx_req *ntx_req_pop(struct ntx_ep *ep)
{
	struct ntx_req *r = ntx_container_of(ep->req_free, struct ntx_req,
					     entry);

	ep->req_free = r->entry.next;
	ntx_req_assert_tail_clear(r);
	return r;
}
/* The head fields of a popped request that a receive's post
 * (ntx_req_set_recv, ntx_tme_post) does not set: cleared field by field
 * (a memset of the head compiles to a rep stos that costs more). Its id
 * took a new generation when it was freed (ntx_req_put_lean). */
static inline void ntx_req_init_head(struct ntx_ep *ep, struct ntx_req *r,
				     enum ntx_req_kind kind)
{
	r->kind = kind;
	r->vc = NULL;
	r->data = 0;
	r->silent = false;
	r->issued = false;
	r->rma_op = 0;
}
/* A request from the endpoint's pool, its head cleared. Inline: every
 * message takes one. */
static inline struct ntx_req *ntx_req_get(struct ntx_ep *ep,
					  enum ntx_req_kind kind)
{
	struct ntx_req *r;

	if (!ep->req_free && ntx_req_grow(ep))
		return NULL;
	r = ntx_req_pop(ep);
	ntx_list_init(&r->entry);
	ntx_req_init_head(ep, r, kind);
	r->state = NTX_RS_NEW;
	r->context = NULL;
	r->flags = 0;
	r->iov_count = 0;
	r->len = 0;
	r->tag = 0;
	r->ignore = 0;
	r->seq = 0;
	r->addr = FI_ADDR_UNSPEC;
	r->plain = false;
	return r;
}
void ntx_req_put(struct ntx_req *req);
/* ntx_req_put for a request whose tail (struct ntx_req) was never
 * written: an eager send or receive, the message path's case. */
static inline void ntx_req_put_lean(struct ntx_ep *ep, struct ntx_req *r)
{
	ntx_req_assert_tail_clear(r);
	/* late packets naming this id miss: a free request is NEW to
	 * ntx_req_lookup, and its next use has a new generation */
	r->id += 1ull << 32;
	r->state = NTX_RS_NEW;
	r->entry.next = ep->req_free;
	ep->req_free = &r->entry;
}
struct ntx_req *ntx_req_lookup(struct ntx_ep *ep, uint64_t id);
/* Frees every request of the endpoint's pool (at close). */
void ntx_req_fini(struct ntx_ep *ep);
/* A copy buffer for inject data and queued packets (NTX_BOUNCE_SIZE) */
int ntx_req_bounce(struct ntx_req *req);
/* The pool keeps the bounce buffers of at most NTX_BOUNCE_KEEP requests
 * (512 KiB at the default eager size): a burst of queued injects to
 * peers still connecting leaves no buffer per request behind.
 * ntx_req_put and the eager send's end call ntx_req_bounce_trim. */
#define NTX_BOUNCE_KEEP 64
void ntx_req_bounce_trim(struct ntx_req *req);
#define NTX_INJECT_MAX 4096
#define NTX_BOUNCE_SIZE                                                    \
	(ntx_params.eager_max > NTX_INJECT_MAX ? ntx_params.eager_max       \
					       : NTX_INJECT_MAX)

/* The endpoint whose CQ and counter report a receive: its own, or for a
 * receive posted to a shared receive context, the endpoint the message
 * arrived at (vc, else the request's), else the context's reporter. */
static inline struct ntx_ep *ntx_req_rx_ep(const struct ntx_req *r,
					   const struct ntx_vc *vc)
{
	if (!r->ep->is_srx)
		return r->ep;
	if (!vc)
		vc = r->vc;
	return vc ? vc->ep : r->ep->srx_report;
}

/* ---- completions (ntx_comp.c) ---- */
void ntx_comp_tx(struct ntx_req *req);
static inline uint64_t ntx_comp_kind(uint64_t op_flags)
{
	return op_flags & FI_TAGGED ? FI_TAGGED : FI_MSG;
}
static inline bool ntx_comp_wanted(bool selective, uint64_t op_flags)
{
	return !selective || (op_flags & FI_COMPLETION);
}
/* A send done without a request (ntx_proto_send_small; fast: see
 * there). Inline, like ntx_comp_rx: every message completes. */
static inline __attribute__((always_inline)) void
ntx_comp_send(struct ntx_ep *ep, void *context, uint64_t flags, bool fast)
{
	uint64_t f = FI_SEND | ntx_comp_kind(flags);

	if (ep->tx_cq && ntx_comp_wanted(ep->tx_selective, flags)) {
		if (fast)
			ntx_cq_push_api(ep->tx_cq, context, f, 0, NULL, 0, 0,
					FI_ADDR_NOTAVAIL);
		else
			ntx_cq_push(ep->tx_cq, context, f, 0, NULL, 0, 0,
				    FI_ADDR_NOTAVAIL);
	}
	if (ep->send_cntr)
		ntx_cntr_inc(ep->send_cntr);
}
void ntx_comp_tx_err(struct ntx_req *req, int err);
/* ntx_comp_rx's errors: truncated (olen), or FI_SOURCE_ERR's unknown
 * sender. */
void ntx_comp_rx_fault(struct ntx_ep *ep, struct ntx_req *req, uint64_t f,
		       size_t len, uint64_t tag, uint64_t data, fi_addr_t src,
		       void *buf, size_t olen, const struct ntx_addr *src_name);
/* Recomputed on every bind, unbind and fi_enable. rx_plain: the
 * endpoint's own receive queue (not a shared context, nor bound to one),
 * an rx CQ, no receive counter, no FI_MSG_PREFIX, no FI_SOURCE_ERR;
 * ntx_comp_rx then writes the entry (which FI_SELECTIVE_COMPLETION may
 * still leave out) after two tests instead of six. rx_fast, post_fast
 * and send_fast: the one-byte tests of ntx_proto_on_small, fi_trecv and
 * the small sends (ntx_send_one, ntx_do_inject). */
static inline void ntx_ep_set_paths(struct ntx_ep *ep)
{
	ep->rx_plain = !ep->is_srx && ep->rx == ep && ep->rx_cq &&
		       !ep->recv_cntr && !ep->msg_prefix &&
		       !(ep->caps & FI_SOURCE_ERR);
	ep->rx_fast = ep->rx_plain && !ep->cm;
	ep->post_fast = ep->enabled && ep->rx == ep && ep->domain->ep_lockless;
	ep->send_fast = ep->enabled && !ep->cm && ep->domain->ep_lockless;
}
/* A receive done with a message that came on vc. */
static inline __attribute__((always_inline)) void
ntx_comp_rx(struct ntx_req *req, struct ntx_vc *vc, size_t len,
	    uint64_t flags, uint64_t tag, uint64_t data, fi_addr_t src,
	    void *buf, size_t olen, const struct ntx_addr *src_name)
{
	struct ntx_ep *ep;
	uint64_t f = FI_RECV | ntx_comp_kind(req->flags) | flags;

	if (__builtin_expect(req->ep->rx_plain && !olen &&
			     ntx_comp_wanted(req->ep->rx_selective,
					     req->flags), 1)) {
		ntx_cq_push(req->ep->rx_cq, req->context, f, len, buf, data,
			    tag, src);
		return;
	}
	ep = ntx_req_rx_ep(req, vc);
	len += ep->msg_prefix; /* FI_MSG_PREFIX counts the prefix */
	if (olen || (src == FI_ADDR_NOTAVAIL && (ep->caps & FI_SOURCE_ERR) &&
		     (ep->caps & FI_SOURCE) && src_name)) {
		ntx_comp_rx_fault(ep, req, f, len, tag, data, src, buf, olen,
				  src_name);
		return;
	}
	if (ep->rx_cq && (ntx_comp_wanted(ep->rx_selective, req->flags) ||
			  (flags & FI_MULTI_RECV)))
		ntx_cq_push(ep->rx_cq, req->context, f, len, buf, data, tag,
			    src);
	if (ep->recv_cntr)
		ntx_cntr_inc(ep->recv_cntr);
}
void ntx_comp_rx_err(struct ntx_req *req, int err, size_t len, size_t olen,
		     uint64_t tag, uint64_t data);
/* one-sided: the initiator's completion (err positive or 0) */
void ntx_comp_rma(struct ntx_req *req, int err);

#endif /* NTX_ENGINE_REQ_H */
