/*
 * Protocols, the receive side: receives posted and matched, each packet
 * dispatched, the message path (an eager or half entry's message into the
 * receive it matches), truncation and multi-receive buffers.
 */
#include "config.h"

#include "ntx/ntx_engine.h"
#include "ntx_proto_int.h"

/* Where in a receive's buffers a message lands (its offset; the iovec
 * copy walks from there): the start, or for a multi-receive buffer the
 * first free byte. */
static size_t ntx_rx_target(const struct ntx_req *r, void **buf, size_t *room)
{
	size_t off = (r->flags & FI_MULTI_RECV) ? r->multi_used : 0;

	*buf = (void *)((uintptr_t)r->iov[0].iov_base + off);
	*room = r->len - off;
	return off;
}

/* Releases a multi-receive buffer once less than the minimum is left. */
static uint64_t ntx_mrecv_consume(struct ntx_req *r, size_t used)
{
	r->multi_used += used;
	if (r->multi_released || r->len - r->multi_used >= r->ep->min_multi_recv)
		return 0;
	r->multi_released = true;
	ntx_list_remove(&r->entry);
	return r->multi_children ? 0 : FI_MULTI_RECV;
}

static uint64_t ntx_rx_flags(const struct ntx_wire_hdr *h)
{
	return h->flags & NTX_PF_DATA ? FI_REMOTE_CQ_DATA : 0;
}

/* Delivers an eager message's bytes (in hand; pflags, tag and data as
 * its header gives them) from src, vc's address, into a matched
 * receive; h, when given, is the header whose sender may want an ack.
 * The ack goes before the completion: a receiver that sees its entry
 * and exits at once has acknowledged. Inline: the message path's case. */
static inline __attribute__((always_inline)) void
ntx_rx_fill(struct ntx_req *r, struct ntx_vc *vc, fi_addr_t src,
	    uint8_t pflags, uint64_t tag, uint64_t data, const void *payload,
	    size_t len, const struct ntx_wire_hdr *h)
{
	size_t room, off, n;
	uint64_t mflag = 0;
	void *buf;

	off = ntx_rx_target(r, &buf, &room);
	n = ntx_iov_copy_to(r->iov, r->iov_count, off, payload,
			    len < room ? len : room);
	if (h)
		ntx_send_ack(vc, h);
	if (r->flags & FI_MULTI_RECV)
		mflag = ntx_mrecv_consume(r, n);
	ntx_comp_rx(r, vc, n,
		    (pflags & NTX_PF_DATA ? FI_REMOTE_CQ_DATA : 0) | mflag,
		    tag, data, src, buf, len - n, &vc->peer);
	if (!(r->flags & FI_MULTI_RECV))
		ntx_req_put_lean(r->ep, r); /* posted, matched, filled: no
					     * tail */
	else if (mflag)
		ntx_req_put(r);
}

/* An eager message with its header: filled, acknowledged if the sender
 * asked, completed. */
static inline __attribute__((always_inline)) void
ntx_rx_eager(struct ntx_req *r, struct ntx_vc *vc, fi_addr_t src,
	     const struct ntx_wire_hdr *h, const void *payload, size_t len)
{
	ntx_rx_fill(r, vc, src, h->flags, h->tag, h->cq_data, payload, len,
		    h);
}

void ntx_rx_done(struct ntx_req *r, struct ntx_vc *vc)
{
	struct ntx_req *parent = r->multi_parent;
	uint64_t mflag = 0;
	void *buf = r->iov[0].iov_base;

	if (parent && parent->multi_children == 1 && parent->multi_released) {
		mflag = FI_MULTI_RECV;
		parent->multi_children = 0;
	}
	ntx_comp_rx(r, vc, r->want,
		    (r->hdr.flags & NTX_PF_DATA ? FI_REMOTE_CQ_DATA : 0) | mflag,
		    r->hdr.tag, r->hdr.cq_data, ntx_vc_fi_addr(vc), buf,
		    r->msg_len - r->want, &vc->peer);
	if (parent && mflag)
		ntx_req_put(parent);
	else if (parent)
		ntx_mrecv_unref(parent);
	ntx_req_put(r);
}

/* A rendezvous into a multi-receive buffer: a child receive owns the
 * next slice of it. NULL when there is no request to spare (the buffer's
 * owner gets the error). */
struct ntx_req *ntx_mrecv_child(struct ntx_ep *ep, struct ntx_req *r,
				const struct ntx_wire_hdr *h)
{
	struct ntx_req *c = ntx_req_get(ep, NTX_REQ_RECV);

	if (!c) {
		ntx_comp_rx_err(r, FI_ENOMEM, 0, h->msg_len, h->tag,
				h->cq_data);
		return NULL;
	}
	c->context = r->context;
	c->flags = r->flags & ~FI_MULTI_RECV;
	c->multi_parent = r;
	c->iov[0].iov_base = (uint8_t *)r->iov[0].iov_base + r->multi_used;
	c->iov[0].iov_len = r->len - r->multi_used;
	c->iov_count = 1;
	c->len = c->iov[0].iov_len;
	r->multi_children++;
	ntx_mrecv_consume(r, h->msg_len < c->len ? h->msg_len : c->len);
	return c;
}

/* The first len (at most 8) bytes of the word v holds as it was read
 * from memory, stored at dst: from the register, so that v needs no
 * stack slot and the caller no frame. */
static inline void ntx_store_word(void *dst, uint64_t v, size_t len)
{
	uint8_t *d = dst;

	if (len == sizeof(v)) {
		memcpy(d, &v, sizeof(v));
		return;
	}
	for (size_t i = 0; i < len; i++)
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		d[i] = (uint8_t)(v >> (8 * i));
#else
		d[i] = (uint8_t)(v >> (56 - 8 * i));
#endif
}

/* Hands an unexpected message to a receive that matched it. */
void ntx_unexp_deliver(struct ntx_req *r, struct ntx_unexp *u)
{
	if (u->hdr.op == NTX_OP_EAGER)
		ntx_rx_eager(r, u->vc, ntx_vc_fi_addr(u->vc), &u->hdr, u->data,
			     u->len);
	else
		ntx_rx_rndv(r, u->vc, &u->hdr, u->riov, u->niov);
	ntx_unexp_free(u);
}

int ntx_proto_recv_waiting(struct ntx_ep *ep, void *buf, size_t len,
			   fi_addr_t src, uint64_t tag, uint64_t ignore,
			   void *context, uint64_t flags)
{
	struct ntx_list *q = &ep->tme.unexp[1];
	struct ntx_unexp *u;
	fi_addr_t from;

	if (!ep->rx_fast || ntx_list_empty(q) ||
	    !ntx_comp_wanted(ep->rx_selective, flags))
		return 1;
	/* the first tagged message that came: the one to take if it
	 * matches (a waiting FI_CLAIM, an RTS, an ack asked for, or one
	 * that does not fit go the general way) */
	u = ntx_container_of(ntx_list_first(q), struct ntx_unexp, entry);
	from = u->vc->fi_addr;
	if (u->claim_ctx || u->hdr.op != NTX_OP_EAGER || u->len > len ||
	    (u->hdr.flags & NTX_PF_ACK) || from == FI_ADDR_NOTAVAIL ||
	    !ntx_tme_src_match(src, from) ||
	    !ntx_tme_tag_match(tag, ignore, u->hdr.tag))
		return 1;
	if (u->len <= sizeof(uint64_t)) { /* its data holds a word */
		uint64_t w;

		memcpy(&w, u->data, sizeof(w));
		ntx_store_word(buf, w, u->len);
	} else {
		memcpy(buf, u->data, u->len);
	}
	/* the application's call, not inside fi_cq_read */
	ntx_cq_push_api(ep->rx_cq, context,
			FI_RECV | FI_TAGGED | ntx_rx_flags(&u->hdr), u->len,
			buf, u->hdr.cq_data, u->hdr.tag, from);
	ntx_unexp_free(u);
	return 0;
}

/* Drops a reference the caller held on a multi-receive buffer; the last
 * one out of a released buffer reports the release. */
void ntx_mrecv_unref(struct ntx_req *r)
{
	struct ntx_ep *rep;

	if (--r->multi_children || !r->multi_released)
		return;
	/* a release with no data of its own carries only FI_MULTI_RECV */
	rep = r->ep->is_srx ? r->ep->srx_report : r->ep;
	if (rep && rep->rx_cq)
		ntx_cq_push(rep->rx_cq, r->context, FI_MULTI_RECV, 0,
			    (uint8_t *)r->iov[0].iov_base + r->multi_used, 0, 0,
			    FI_ADDR_NOTAVAIL);
	ntx_req_put(r);
}

static ssize_t ntx_recv_discard(struct ntx_req *r, struct ntx_unexp *u)
{
	struct ntx_wire_hdr fin = { .op = NTX_OP_FIN, .sreq = u->hdr.sreq };

	ntx_send_ack(u->vc, &u->hdr);
	if (u->hdr.op == NTX_OP_RTS)
		ntx_vc_ctrl(u->vc, &fin);
	ntx_comp_rx(r, u->vc, 0, 0, u->hdr.tag, u->hdr.cq_data,
		    ntx_vc_fi_addr(u->vc), NULL, 0, NULL);
	ntx_unexp_free(u);
	ntx_req_put(r);
	return 0;
}

static ssize_t ntx_proto_recv(struct ntx_ep *ep, struct ntx_req *r)
{
	bool tagged = r->flags & FI_TAGGED;
	void *claim = (r->flags & FI_CLAIM) ? r->context : NULL;
	struct ntx_unexp *u;

	if (r->flags & FI_MULTI_RECV) {
		/* posted first so that consumption can release it; the
		 * reference keeps it alive while unexpected messages land */
		ntx_tme_post(&ep->rx->tme, r);
		r->multi_children++;
		while (!r->multi_released &&
		       (u = ntx_tme_match_unexp(&ep->rx->tme, false, r->addr, 0, 0,
						NULL)))
			ntx_unexp_deliver(r, u);
		ntx_mrecv_unref(r);
		return 0;
	}
	u = ntx_tme_match_unexp(&ep->rx->tme, tagged, r->addr, r->tag,
				r->ignore, claim);
	if (u && (r->flags & FI_DISCARD))
		return ntx_recv_discard(r, u);
	if (u) {
		ntx_unexp_deliver(r, u);
		return 0;
	}
	if (claim) {
		ntx_req_put(r);
		return -FI_ENOMSG;
	}
	ntx_tme_post(&ep->rx->tme, r);
	return 0;
}

ssize_t ntx_proto_post_recv_any(struct ntx_ep *ep, const struct iovec *iov,
				size_t count, fi_addr_t src, uint64_t tag,
				uint64_t ignore, void *context,
				uint64_t flags)
{
	struct ntx_req *r = ntx_req_get_recv(ep, iov, count, src, tag, ignore,
					     context, flags);

	if (!r)
		return -FI_EAGAIN;
	return flags & FI_PEEK ? ntx_proto_peek(ep, r) : ntx_proto_recv(ep, r);
}

/* FI_PEEK, with FI_CLAIM to reserve what it finds for a later receive. */
ssize_t ntx_proto_peek(struct ntx_ep *ep, struct ntx_req *r)
{
	struct ntx_unexp *u = ntx_tme_match_unexp(&ep->rx->tme, true, r->addr,
						  r->tag, r->ignore, NULL);
	struct fi_context *fc = r->context;

	if (!u) {
		ntx_comp_rx_err(r, FI_ENOMSG, 0, 0, r->tag, 0);
		ntx_req_put(r);
		return 0;
	}
	if (r->flags & FI_DISCARD) {
		ntx_send_ack(u->vc, &u->hdr);
		ntx_comp_rx(r, u->vc, 0, 0, u->hdr.tag, u->hdr.cq_data,
			    ntx_vc_fi_addr(u->vc), NULL, 0, NULL);
		ntx_unexp_free(u);
	} else {
		if ((r->flags & FI_CLAIM) && fc)
			u->claim_ctx = fc;
		ntx_comp_rx(r, u->vc, u->hdr.msg_len, ntx_rx_flags(&u->hdr),
			    u->hdr.tag, u->hdr.cq_data, ntx_vc_fi_addr(u->vc),
			    NULL, 0, NULL);
	}
	ntx_req_put(r);
	return 0;
}

/* An EAGER or RTS packet as it arrived: an inline payload is in the
 * header (our private copy: its bytes are safe), an RTS's iovecs are
 * copied into riov, then checked against the length. false: malformed. */
static inline bool ntx_msg_parse(const struct ntx_wire_hdr *h,
				 const void **payload, size_t *len,
				 struct ntx_wire_iov *riov, uint16_t *niov)
{
	if (h->flags & NTX_PF_INLINE) {
		if (h->op != NTX_OP_EAGER || *len ||
		    h->msg_len > NTX_INLINE_MAX)
			return false;
		*payload = &h->rreq;
		*len = h->msg_len;
		return true;
	}
	if (h->op == NTX_OP_EAGER)
		return h->msg_len == *len;
	*niov = h->niov;
	return ntx_wire_iov_take(h, *payload, *len, riov);
}

/* A message no receive was posted for waits, within the peer's limit. */
static inline void ntx_msg_unexpected(struct ntx_vc *vc,
				      const struct ntx_wire_hdr *h,
				      const void *payload, size_t len,
				      const struct ntx_wire_iov *riov,
				      uint16_t niov)
{
	struct ntx_unexp *u = ntx_unexp_take(vc, len,
					     h->op == NTX_OP_EAGER ? len : 0);

	if (!u)
		return;
	u->hdr = *h;
	if (h->op == NTX_OP_EAGER) {
		if (len) /* an empty message may have no buffer */
			memcpy(u->data, payload, len);
		u->len = len;
	} else {
		memcpy(u->riov, riov, sizeof(riov[0]) * niov);
		u->niov = niov;
	}
	ntx_tme_add_unexp(&vc->ep->rx->tme, u);
}

/* A tagged receive whose completion is a plain CQ entry (ep->rx_fast)
 * filled with len bytes of a message: its entry. Inline: the message
 * path's. */
static inline __attribute__((always_inline)) void
ntx_rx_plain_done(struct ntx_ep *ep, void *ctx, uint8_t pflags, size_t len,
		  void *buf, uint64_t data, uint64_t tag, fi_addr_t src)
{
	ntx_cq_push(ep->rx_cq, ctx,
		    FI_RECV | FI_TAGGED |
			    (pflags & NTX_PF_DATA ? FI_REMOTE_CQ_DATA : 0),
		    len, buf, data, tag, src);
}

/* An eager tagged message that asks for no ack, while the lean ring
 * holds receives (so ep->rx is ep and its tagged queues are empty): the
 * ring's head, when it takes the message whole, is filled and completed
 * without a request. False when not (the caller matches as usual). */
static bool ntx_rx_lean_eager(struct ntx_ep *ep, const struct ntx_wire_hdr *h,
			      fi_addr_t src, const void *payload, size_t len)
{
	struct ntx_lean_recv *l = ntx_tme_lean_head(&ep->tme);
	void *buf = l->buf, *ctx = l->context;

	if (!ep->rx_fast || l->len < len || !ntx_tme_lean_takes(l, src, h->tag))
		return false;
	ntx_tme_lean_pop(&ep->tme);
	memcpy(buf, payload, len);
	ntx_rx_plain_done(ep, ctx, h->flags, len, buf, h->cq_data, h->tag, src);
	return true;
}

/* A parsed EAGER or RTS message (eager: known to be EAGER): into the
 * receive it matches, else waiting unexpected. Inline into both callers:
 * ntx_proto_on_packet's message path passes an eager message in the
 * header (no iovecs). */
static inline __attribute__((always_inline)) void
ntx_msg_deliver(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		const void *payload, size_t len,
		const struct ntx_wire_iov *riov, uint16_t niov, bool eager)
{
	struct ntx_ep *ep = vc->ep;
	fi_addr_t src = ntx_vc_fi_addr(vc);
	struct ntx_req *r;

	if ((h->flags & NTX_PF_TAGGED) && ntx_tme_lean_any(&ep->tme) &&
	    (eager || h->op == NTX_OP_EAGER) && !(h->flags & NTX_PF_ACK) &&
	    ntx_rx_lean_eager(ep, h, src, payload, len))
		return;
	r = ntx_tme_match_posted(&ep->rx->tme, h->flags & NTX_PF_TAGGED, src,
				 h->tag);
	if (!r) {
		ntx_msg_unexpected(vc, h, payload, len, riov, niov);
		return;
	}
	if (eager || h->op == NTX_OP_EAGER)
		ntx_rx_eager(r, vc, src, h, payload, len);
	else
		ntx_rx_rndv(r, vc, h, riov, niov);
}

void ntx_msg_deliver_eager(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			   const void *payload, size_t len)
{
	ntx_msg_deliver(vc, h, payload, len, NULL, 0, true);
}

static void ntx_on_msg(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		       const void *payload, size_t len)
{
	struct ntx_wire_iov riov[NTX_MAX_IOV];
	uint16_t niov = 0;

	if (!ntx_msg_parse(h, &payload, &len, riov, &niov)) {
		NTX_WARN(FI_LOG_EP_DATA, "malformed message from pid %u\n",
			 vc->peer.pid);
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_msg_deliver(vc, h, payload, len, riov, niov, false);
}

/* A reply naming one of our requests: it must exist, belong to this VC
 * and be in the state the reply answers. */
struct ntx_req *ntx_reply_req(struct ntx_vc *vc, uint64_t id,
			      enum ntx_req_state state)
{
	struct ntx_req *r = ntx_req_lookup(vc->ep, id);

	/* a receive posted to the shared receive context */
	if ((!r || r->vc != vc || r->state != state) && vc->ep->rx != vc->ep)
		r = ntx_req_lookup(vc->ep->rx, id);
	if (!r || r->vc != vc || r->state != state) {
		NTX_WARN(FI_LOG_EP_DATA, "reply for unknown request from pid "
			 "%u\n", vc->peer.pid);
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return NULL;
	}
	return r;
}

/* MSG and passive endpoints: connection management goes to the API
 * layer; other packets come only from the connected peer. 1 when the
 * packet was taken or refused. */
static int ntx_proto_cm_filter(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			       const void *payload, size_t len)
{
	struct ntx_ep *ep = vc->ep;

	if (h->op == NTX_OP_CM) {
		if (!ep->cm || h->flags || h->msg_len != len ||
		    len > NTX_CM_DATA_MAX) {
			NTX_WARN(FI_LOG_EP_CTRL, "pid %u: connection management"
				 " packet refused\n", vc->peer.pid);
			ntx_vc_fail(vc, -FI_EREMOTEIO);
			return 1;
		}
		ep->cm->packet(ep, vc, h, payload, len);
		return 1;
	}
	if (!ep->cm)
		return 0;
	if (ep->msg_peer != FI_ADDR_NOTAVAIL &&
	    ntx_vc_fi_addr(vc) == ep->msg_peer)
		return 0;
	NTX_WARN(FI_LOG_EP_DATA, "pid %u is not this MSG endpoint's peer: "
		 "connection closed\n", vc->peer.pid);
	ntx_vc_fail(vc, -FI_EREMOTEIO);
	return 1;
}

/* Every packet but the message path's case (ntx_proto_on_packet). */
static __attribute__((noinline)) void
ntx_proto_on_packet_any(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			const void *payload, size_t len)
{
	if (h->op == 0 || h->op >= NTX_OP_MAX || (h->flags & ~NTX_PF_ALL)) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	if ((h->op == NTX_OP_CM || vc->ep->cm) &&
	    ntx_proto_cm_filter(vc, h, payload, len))
		return;
	if (h->op == NTX_OP_NAMES) {
		ntx_vc_on_names(vc, h, payload, len);
		return;
	}
	if (h->op == NTX_OP_SHEAD || h->op == NTX_OP_SDATA) {
		if (h->flags & ~NTX_PF_ALL_MSG)
			ntx_vc_fail(vc, -FI_EREMOTEIO);
		else if (h->op == NTX_OP_SHEAD)
			ntx_on_shead(vc, h, payload, len);
		else
			ntx_on_sdata(vc, h, payload, len);
		return;
	}
	if (h->op >= NTX_OP_WRITE) {
		ntx_rma_on_packet(vc, h, payload, len);
		return;
	}
	if (h->flags & ~NTX_PF_ALL_MSG) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	switch (h->op) {
	case NTX_OP_EAGER:
	case NTX_OP_RTS:
		ntx_on_msg(vc, h, payload, len);
		break;
	case NTX_OP_DATA:
		ntx_on_data(vc, h, payload, len);
		break;
	case NTX_OP_SPLIT:
		ntx_on_split(vc, h, payload, len);
		break;
	case NTX_OP_DONE:
		ntx_on_done(vc, h);
		break;
	case NTX_OP_CTS:
		ntx_on_cts(vc, h);
		break;
	case NTX_OP_FIN:
		ntx_on_fin(vc, h);
		break;
	case NTX_OP_ACK:
		ntx_on_ack(vc, h);
		break;
	}
}

/* A packet from a peer. The message path's case first, in a frame of its
 * own: an eager message of at most NTX_INLINE_MAX bytes carried in the
 * header, no ack asked for, on an endpoint without connection management
 * (checked the same way ntx_msg_parse does; anything else, well formed or
 * not, takes the general path). */
static inline __attribute__((always_inline)) void
ntx_proto_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		    const void *payload, size_t len)
{
	if (vc->state == NTX_VC_ERROR)
		return;
	if (h->op != NTX_OP_EAGER || len || h->msg_len > NTX_INLINE_MAX ||
	    (h->flags & ~(NTX_PF_TAGGED | NTX_PF_DATA)) != NTX_PF_INLINE ||
	    vc->ep->cm) {
		ntx_proto_on_packet_any(vc, h, payload, len);
		return;
	}
	ntx_msg_deliver(vc, h, &h->rreq, h->msg_len, NULL, 0, true);
}

/* A packet from a back end (ntx_vc_callbacks.recv): nothing but the
 * job-key exchange before the peer proved it, then the protocols. The
 * back end hands us a private header (its contract), read in place; one
 * that is not aligned for its fields is copied first. */
void ntx_proto_on_recv(void *arg, const void *hdr, const void *payload,
		       size_t len)
{
	struct ntx_vc *vc = arg;
	const struct ntx_wire_hdr *h = hdr;
	struct ntx_wire_hdr copy;

	ntx_assert_ep_locked(vc->ep);
	if ((uintptr_t)hdr % _Alignof(struct ntx_wire_hdr)) {
		memcpy(&copy, hdr, sizeof(copy));
		h = &copy;
	}
	if (vc->state == NTX_VC_AUTH || h->op == NTX_OP_AUTH)
		ntx_auth_on_packet(vc, h, payload, len);
	else
		ntx_proto_on_packet(vc, h, payload, len);
}

/* A half entry's message on a proven VC that no receive takes: it waits
 * unexpected, its header built in its entry. */
static __attribute__((noinline)) void
ntx_proto_small_waits(struct ntx_vc *vc, uint8_t pflags, uint64_t tag,
		      uint64_t data, uint64_t bytes, size_t len)
{
	struct ntx_unexp *u = ntx_unexp_take(vc, len, len);

	if (!u)
		return;
	ntx_wire_hdr_inline(&u->hdr, pflags, tag, data, &bytes, len);
	ntx_store_word(u->data, bytes, len);
	u->len = len;
	ntx_tme_add_unexp(&vc->ep->rx->tme, u);
}

/* A half entry's message (ntx_be_cb.recv_small) in every case: on a
 * proven VC of an endpoint without connection management, straight
 * into the receive it matches (the back end checked pflags and len),
 * else unexpected; in any other state, the header ntx_proto_on_recv
 * would have been given, through it. */
static __attribute__((noinline)) void
ntx_proto_on_small_any(struct ntx_vc *vc, uint8_t pflags, uint64_t tag,
		       uint64_t data, uint64_t bytes, size_t len)
{
	struct ntx_ep *ep = vc->ep;
	bool proven = vc->state == NTX_VC_CONNECTED && !ep->cm;
	struct ntx_wire_hdr h;
	struct ntx_req *r;
	fi_addr_t src;

	if (len > sizeof(bytes)) /* not from a back end that keeps to it */
		len = sizeof(bytes);
	if (proven) {
		src = ntx_vc_fi_addr(vc);
		r = ntx_tme_match_posted(&ep->rx->tme, pflags & NTX_PF_TAGGED,
					 src, tag);
		if (r) {
			ntx_rx_fill(r, vc, src, pflags, tag, data, &bytes,
				    len, NULL);
			return;
		}
		ntx_proto_small_waits(vc, pflags, tag, data, bytes, len);
		return;
	}
	ntx_wire_hdr_inline(&h, pflags, tag, data, &bytes, len);
	ntx_proto_on_recv(vc, &h, NULL, 0);
}

/* A half entry's message that may take the message path's receive: a
 * tagged message of at most a word on a proven VC whose address is known,
 * to an endpoint whose receive completions are plain CQ entries and that
 * has no connection management (ntx_ep_set_paths). */
static inline bool ntx_small_plain(const struct ntx_vc *vc, uint8_t pflags,
				   size_t len)
{
	return (pflags & NTX_PF_TAGGED) && vc->ep->rx_fast &&
	       vc->state == NTX_VC_CONNECTED &&
	       vc->fi_addr != FI_ADDR_NOTAVAIL && len <= sizeof(uint64_t);
}

/* ntx_proto_on_small's case of an empty lean ring: a message that may
 * take the message path's receive (ntx_small_plain), with no exact
 * tagged receive hashed, fills the receive at the head of the tagged
 * queue when that is plain (ntx_req_set_recv), large enough and
 * matching; with no tagged receive posted it waits at once
 * (ntx_proto_small_waits). Anything else is ntx_proto_on_small_any. */
static __attribute__((noinline)) void
ntx_proto_on_small_req(struct ntx_vc *vc, uint8_t pflags, uint64_t tag,
		       uint64_t data, uint64_t bytes, size_t len)
{
	struct ntx_ep *ep = vc->ep;
	struct ntx_list *q = &ep->tme.posted[1];
	fi_addr_t src = vc->fi_addr;
	struct ntx_req *r;
	void *buf, *ctx;

	if (!ntx_small_plain(vc, pflags, len) || ep->tme.nexact)
		goto any;
	if (ntx_list_empty(q)) { /* no receive: it waits */
		ntx_proto_small_waits(vc, pflags, tag, data, bytes, len);
		return;
	}
	r = ntx_container_of(ntx_list_first(q), struct ntx_req, entry);
	if (!r->plain || r->len < len || !ntx_tme_src_match(r->addr, src) ||
	    !ntx_tme_tag_match(r->tag, r->ignore, tag))
		goto any;
	ntx_list_unlink(&r->entry); /* to the free stack below */
	buf = r->iov[0].iov_base;
	ntx_store_word(buf, bytes, len);
	ctx = r->context;
	ntx_req_put_lean(ep, r); /* posted, matched, filled: no tail (the
				  * queue is ep's: its requests are ep's) */
	ntx_rx_plain_done(ep, ctx, pflags, len, buf, data, tag, src);
	return;
any:
	ntx_proto_on_small_any(vc, pflags, tag, data, bytes, len);
}

/* A half entry's message: the message path's case here, in a function
 * that needs no frame of its own (every message of a window comes this
 * way): a tagged message on a proven VC whose address is known, an
 * endpoint whose receive completions are plain CQ entries and that has
 * no connection management, and the receive at the head of the lean
 * ring (struct ntx_tme; its tagged queues are empty then) large enough
 * and matching: the bytes stored from the register, the CQ entry
 * written. With the ring empty it is ntx_proto_on_small_req; anything
 * else is ntx_proto_on_small_any (whose match turns the ring into
 * requests first). */
void ntx_proto_on_small(void *arg, uint8_t pflags, uint64_t tag,
			uint64_t data, uint64_t bytes, size_t len)
{
	struct ntx_vc *vc = arg;
	struct ntx_ep *ep = vc->ep;
	struct ntx_tme *tme = &ep->tme;
	fi_addr_t src = vc->fi_addr;
	struct ntx_lean_recv *l;
	void *buf, *ctx;

	ntx_assert_ep_locked(ep);
	if (!ntx_tme_lean_any(tme)) {
		ntx_proto_on_small_req(vc, pflags, tag, data, bytes, len);
		return;
	}
	l = ntx_tme_lean_head(tme);
	if (!ntx_small_plain(vc, pflags, len) || l->len < len ||
	    !ntx_tme_lean_takes(l, src, tag)) {
		ntx_proto_on_small_any(vc, pflags, tag, data, bytes, len);
		return;
	}
	buf = l->buf;
	ctx = l->context;
	ntx_tme_lean_pop(tme);
	ntx_store_word(buf, bytes, len);
	ntx_rx_plain_done(ep, ctx, pflags, len, buf, data, tag, src);
}
