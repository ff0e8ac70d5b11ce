/*
 * Protocols: eager (whole message in one packet), rendezvous (RTS, then a
 * single-copy pull and FIN, or CTS and DATA segments through the ring when
 * single copy is not allowed), delivery-complete acks, and the receive side
 * of each with truncation and multi-receive buffers.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_engine.h"

static void ntx_mrecv_unref(struct ntx_req *r);

/* The largest packet payload this peer accepts: the back end's, or less
 * where peers may differ (a peer started with a smaller
 * FI_NTX_EAGER_MAX). DATA segments of a streamed rendezvous use all of
 * it (on tcp a segment is one frame). */
static size_t ntx_vc_seg_max(const struct ntx_vc *vc)
{
	size_t m = vc->ops->max_payload;

	if (vc->ops->conn_mtu && vc->conn) {
		size_t p = vc->ops->conn_mtu(vc->conn);

		if (p < m)
			m = p;
	}
	return m;
}

/* The largest message sent eagerly to this peer: the smaller of both
 * sides' FI_NTX_EAGER_MAX, agreed at connect (a peer's answers to our
 * packets are bounded by its own). */
size_t ntx_vc_mtu(const struct ntx_vc *vc)
{
	size_t m = ntx_vc_seg_max(vc);

	if (vc->ops->conn_eager && vc->conn) {
		size_t e = vc->ops->conn_eager(vc->conn);

		if (e && e < m)
			m = e;
	}
	return ntx_params.eager_max < m ? ntx_params.eager_max : m;
}

/* The largest message sent eagerly to this peer: the back end's agreed
 * size where it has one (tcp: a frame costs the same whatever it holds,
 * and a rendezvous two more crossings of the network), else
 * ntx_vc_mtu. Packets other than messages keep ntx_vc_mtu: an RMA
 * answer may have to wait in a copy of NTX_BOUNCE_SIZE. */
static size_t ntx_vc_eager(const struct ntx_vc *vc)
{
	size_t m, e;

	if (!vc->ops->conn_msg_eager || !vc->conn)
		return ntx_vc_mtu(vc);
	m = ntx_vc_seg_max(vc);
	e = vc->ops->conn_msg_eager(vc->conn);
	return e < m ? e : m;
}

/* ---- send side ------------------------------------------------------------ */

void ntx_proto_send_done(struct ntx_req *r)
{
	r->ep->tx_outstanding--;
	if (r->issued)
		r->vc->issued--;
	if (r->rma_op)
		ntx_comp_rma(r, 0);
	else
		ntx_comp_tx(r);
	ntx_req_put(r);
}

/* err is a negative FI_E* code */
void ntx_proto_send_fail(struct ntx_req *r, int err)
{
	r->ep->tx_outstanding--;
	if (r->issued)
		r->vc->issued--;
	if (r->rma_op)
		ntx_comp_rma(r, -err);
	else
		ntx_comp_tx_err(r, -err);
	ntx_req_put(r);
}

static int ntx_tx_eager(struct ntx_req *r)
{
	struct ntx_wire_hdr h = {
		.op = NTX_OP_EAGER,
		.flags = ntx_pkt_flags(r->flags),
		.tag = r->tag,
		.cq_data = r->data,
		.msg_len = r->len,
		.sreq = r->id,
	};
	struct iovec biov = { r->bounce, r->len };
	bool ack = r->flags & FI_DELIVERY_COMPLETE;
	/* delivery complete, or a back end that tells when the peer took
	 * the message (ops->acks_eager; fi_inject's requests complete at
	 * once, as its direct path does): complete at the ACK. A message
	 * that waits for none carries no request id, which tells the back
	 * end to report nothing of it. */
	bool wait = ack || (r->vc->ops->acks_eager &&
			    ntx_params.acked_sends && !r->silent);
	int ret;

	if (ack)
		h.flags |= NTX_PF_ACK;
	if (!wait)
		h.sreq = 0;
	if (r->len <= NTX_INLINE_MAX) {
		/* a small payload rides in the header's cache line */
		h.flags |= NTX_PF_INLINE;
		if (r->flags & FI_INJECT)
			memcpy(&h.rreq, r->bounce, r->len);
		else
			ntx_iov_copy_from(&h.rreq, r->iov, r->iov_count, r->len);
		ret = r->vc->ops->send(r->vc->conn, &h, NULL, 0, 0);
	} else if (r->flags & FI_INJECT) {
		ret = r->vc->ops->send(r->vc->conn, &h, &biov, 1, r->len);
	} else {
		ret = r->vc->ops->send(r->vc->conn, &h, r->iov, r->iov_count,
				       r->len);
	}
	if (ret == -FI_EAGAIN)
		return ret;
	if (ret) {
		ntx_proto_send_fail(r, ret);
		return 0;
	}
	if (wait) {
		r->state = NTX_RS_WAIT_ACK;
		ntx_list_insert_tail(&r->vc->pending, &r->entry);
		return 0;
	}
	/* ntx_proto_send_done for a message that left whole: its request
	 * never wrote its tail */
	r->ep->tx_outstanding--;
	if (r->issued)
		r->vc->issued--;
	ntx_comp_tx(r);
	ntx_req_bounce_trim(r);
	ntx_req_put_lean(r->ep, r);
	return 0;
}

static int ntx_tx_rts(struct ntx_req *r)
{
	struct ntx_wire_iov wiov[NTX_MAX_IOV];
	struct ntx_wire_hdr h = {
		.op = NTX_OP_RTS,
		.flags = ntx_pkt_flags(r->flags),
		.niov = (uint16_t)r->iov_count,
		.tag = r->tag,
		.cq_data = r->data,
		.msg_len = r->len,
		.sreq = r->id,
	};
	struct iovec piov;
	int ret;

	ntx_wire_iov_fill(r->vc, r->iov, r->iov_count, false, wiov);
	piov.iov_base = wiov;
	piov.iov_len = r->iov_count * sizeof(wiov[0]);
	ret = r->vc->ops->send(r->vc->conn, &h, &piov, 1, piov.iov_len);
	if (ret == -FI_EAGAIN)
		return ret;
	if (ret) {
		ntx_proto_send_fail(r, ret);
		return 0;
	}
	r->state = NTX_RS_RTS_SENT;
	ntx_list_insert_tail(&r->vc->pending, &r->entry);
	return 0;
}

/* One packet with header h of r's next bytes (from r->done, at most
 * chunk, up to end): 1 when it left (r->done moved on), -FI_EAGAIN when
 * the ring has no room, 0 when it failed r (completed with the error). */
static int ntx_tx_piece(struct ntx_req *r, const struct ntx_wire_hdr *h,
			size_t end, size_t chunk)
{
	struct iovec seg[NTX_MAX_IOV];
	size_t nseg, len = end - r->done < chunk ? end - r->done : chunk;
	int ret;

	len = ntx_iov_slice(r->iov, r->iov_count, r->done, len, seg, &nseg);
	ret = r->vc->ops->send(r->vc->conn, h, seg, nseg, len);
	if (ret == -FI_EAGAIN)
		return ret;
	if (ret) {
		ntx_proto_send_fail(r, ret);
		return 0;
	}
	r->done += len;
	return 1;
}

static int ntx_tx_stream(struct ntx_req *r)
{
	size_t chunk = ntx_vc_seg_max(r->vc);
	int ret;

	while (r->done < r->want) {
		struct ntx_wire_hdr h = {
			.op = NTX_OP_DATA,
			.sreq = r->id,
			.rreq = r->peer_req,
			.offset = r->done,
		};

		ret = ntx_tx_piece(r, &h, r->want, chunk);
		if (ret <= 0)
			return ret;
	}
	/* the receiver answers the last segment with FIN: delivery
	 * complete, and the buffer is ours again */
	r->state = NTX_RS_RTS_SENT;
	ntx_list_insert_tail(&r->vc->pending, &r->entry);
	return 0;
}

/* The largest message streamed to this peer (NTX_OP_SHEAD): the
 * back end's choice, else none. To an endpoint of our own process every
 * message the receiver takes streamed: a single copy there is a system
 * call on our own memory that one thread makes for both sides (32 KiB
 * cost 4 us of CPU, 64 KiB split 9 us, against 0.3 us streamed), and
 * the ring's two copies are plain memcpy from and into our cache. */
static inline size_t ntx_vc_stream_max(const struct ntx_vc *vc)
{
	if (!vc->ops->streams || !ntx_params.shm_stream_max)
		return 0;
	return vc->peer.pid == vc->ep->name.pid ? NTX_STREAM_LIMIT
						: ntx_params.shm_stream_max;
}

/* A streamed message: its head, then its segments, each as soon as the
 * ring takes it. -FI_EAGAIN leaves the rest to the backlog, where no
 * later message passes it, so the receiver sees nothing of another
 * message between the head and the last segment. The message left
 * whole once its last byte is in the peer's window. */
static int ntx_tx_smsg(struct ntx_req *r)
{
	/* longer than this (the eager size): a head and segments */
	size_t chunk = ntx_vc_mtu(r->vc);
	bool ack = r->flags & FI_DELIVERY_COMPLETE;
	int ret;

	while (r->done < r->len) {
		struct ntx_wire_hdr h = {
			.op = NTX_OP_SDATA,
			.sreq = r->id,
			.offset = r->done,
		};

		if (r->state != NTX_RS_SEND_STREAM) {
			h.op = NTX_OP_SHEAD;
			h.flags = ntx_pkt_flags(r->flags) |
				  (ack ? NTX_PF_ACK : 0);
			h.tag = r->tag;
			h.cq_data = r->data;
			h.msg_len = r->len;
		}
		ret = ntx_tx_piece(r, &h, r->len, chunk);
		if (ret <= 0)
			return ret;
		r->state = NTX_RS_SEND_STREAM;
	}
	if (ack) {
		r->state = NTX_RS_WAIT_ACK;
		ntx_list_insert_tail(&r->vc->pending, &r->entry);
		return 0;
	}
	ntx_proto_send_done(r);
	return 0;
}

int ntx_proto_tx(struct ntx_req *r)
{
	struct iovec biov = { r->bounce, r->len };
	int ret;

	if (r->kind == NTX_REQ_CTRL) {
		ret = r->vc->ops->send(r->vc->conn, &r->hdr, &biov,
				       r->len ? 1 : 0, r->len);
		if (ret == -FI_EAGAIN)
			return ret;
		r->vc->ctrl_queued--;
		ntx_req_put(r);
		return 0;
	}
	if (!r->issued) {
		/* FI_FENCE: wait until everything before it completed */
		if ((r->flags & FI_FENCE) && r->vc->issued)
			return -FI_EAGAIN;
		r->issued = true;
		r->vc->issued++;
	}
	if (r->rma_op)
		return ntx_rma_tx(r);
	if (r->state == NTX_RS_STREAM)
		return ntx_tx_stream(r);
	if (r->state == NTX_RS_SEND_STREAM)
		return ntx_tx_smsg(r);
	if (r->len <= ntx_vc_eager(r->vc))
		return ntx_tx_eager(r);
	if (r->len <= ntx_vc_stream_max(r->vc))
		return ntx_tx_smsg(r);
	return ntx_tx_rts(r);
}

ssize_t ntx_proto_send(struct ntx_ep *ep, struct ntx_req *r)
{
	int ret;

	if (r->flags & FI_INJECT) {
		/* the caller may reuse its buffer as soon as we return */
		if (ntx_req_bounce(r))
			return -FI_EAGAIN;
		ntx_iov_copy_from(r->bounce, r->iov, r->iov_count, r->len);
	}

	ret = ntx_vc_get(ep, r->addr, &r->vc);
	if (ret && !ntx_vc_err_unreachable(ret))
		return ret;
	ep->tx_outstanding++;
	if (ret) { /* an error completion, once */
		ntx_proto_send_fail(r, ret);
		return 0;
	}
	if (r->vc->state == NTX_VC_CONNECTED && ntx_list_empty(&r->vc->backlog) &&
	    ntx_proto_tx(r) != -FI_EAGAIN)
		return 0;
	ntx_vc_queue(r->vc, r);
	return 0;
}

/* One eager packet of len bytes (at most NTX_INJECT_MAX) from buf that
 * asks for no ack, written by vc's back end at once, which copies the
 * payload before it returns (in the header when it fits): the back end's
 * answer, -FI_EAGAIN when it has no room. For sends without a request
 * (fi_inject, ntx_proto_send_eager). */
static inline __attribute__((always_inline)) int
ntx_vc_send_eager(struct ntx_vc *vc, const void *buf, size_t len,
		  uint64_t tag, uint64_t data, uint64_t flags)
{
	struct ntx_wire_hdr h = {
		.op = NTX_OP_EAGER,
		.flags = ntx_pkt_flags(flags),
		.tag = tag,
		.cq_data = data,
		.msg_len = len,
	};
	struct iovec iov = { (void *)buf, len };

	if (len <= NTX_INLINE_MAX)
		return ntx_vc_send_inline(vc, h.flags, tag, data, buf, len);
	return vc->ops->send(vc->conn, &h, &iov, 1, len);
}

int ntx_proto_send_eager(struct ntx_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest, uint64_t tag, uint64_t data,
			 void *context, uint64_t flags, bool fast)
{
	struct ntx_vc *vc = ntx_vc_direct(ep, dest, fast);

	if (len > NTX_INJECT_MAX || !ntx_vc_direct_ok(vc, flags) ||
	    (vc->ops->acks_eager && ntx_params.acked_sends) ||
	    ntx_vc_send_eager(vc, buf, len, tag, data, flags))
		return 1;
	ntx_comp_send(ep, context, flags, fast);
	return 0;
}

/* fi_inject: straight into the ring when it has room, else a copy waits
 * on the backlog. No completion is ever written. */
ssize_t ntx_proto_inject(struct ntx_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest, uint64_t tag, uint64_t data,
			 uint64_t flags)
{
	struct ntx_vc *vc;
	struct ntx_req *r;
	int ret;

	ret = ntx_vc_get(ep, dest, &vc);
	if (ret)
		return ret;
	if (vc->state == NTX_VC_CONNECTED && ntx_list_empty(&vc->backlog)) {
		ret = ntx_vc_send_eager(vc, buf, len, tag, data, flags);
		if (ret != -FI_EAGAIN) {
			if (!ret && ep->send_cntr)
				ntx_cntr_inc(ep->send_cntr);
			return ret;
		}
	}
	if (ep->tx_outstanding >= ep->tx_limit)
		return -FI_EAGAIN;
	r = ntx_req_get(ep, NTX_REQ_SEND);
	if (!r)
		return -FI_EAGAIN;
	if (ntx_req_bounce(r)) {
		ntx_req_put(r);
		return -FI_EAGAIN;
	}
	memcpy(r->bounce, buf, len);
	r->len = len;
	r->tag = tag;
	r->data = data;
	r->flags = (flags | FI_INJECT) & ~FI_DELIVERY_COMPLETE;
	r->silent = true;
	r->addr = dest;
	r->vc = vc;
	ep->tx_outstanding++;
	ntx_vc_queue(vc, r);
	return 0;
}

/* ---- receive side ---------------------------------------------------------- */

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

static void ntx_send_ack(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	if (h->flags & NTX_PF_ACK) {
		struct ntx_wire_hdr a = { .op = NTX_OP_ACK, .sreq = h->sreq };

		ntx_vc_ctrl(vc, &a);
	}
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

static void ntx_rx_done(struct ntx_req *r, struct ntx_vc *vc)
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

void ntx_wire_iov_fill(struct ntx_vc *vc, const struct iovec *iov, size_t n,
		       bool writable, struct ntx_wire_iov *w)
{
	for (size_t i = 0; i < n; i++) {
		w[i].addr = (uintptr_t)iov[i].iov_base;
		w[i].len = iov[i].iov_len;
		w[i].key = vc->ops->expose && ntx_vc_bulk(vc)
				   ? vc->ops->expose(vc->conn, iov[i].iov_base,
						     iov[i].iov_len, writable)
				   : 0;
	}
}

/* The next len bytes of a peer's buffers w at cursor c (over their
 * ntx_wire_iov_view), keys kept: each run takes the key of the entry it
 * lies in. */
static size_t ntx_wire_slice(struct ntx_iov_cur *c,
			     const struct ntx_wire_iov *w, size_t len,
			     struct ntx_wire_iov *out, size_t *count)
{
	struct iovec chunk;
	size_t k = 0, got = 0, m;

	while (got < len && k < NTX_MAX_IOV &&
	       (m = ntx_iov_cur_next(c, len - got, &chunk))) {
		out[k].addr = (uintptr_t)chunk.iov_base;
		out[k].len = m;
		out[k].key = w[c->idx].key;
		k++;
		got += m;
	}
	*count = k;
	return got;
}

/* Moves bytes [off, off + len) between our iovecs and the peer's with the
 * back end's single-copy bulk operations, resuming partial transfers. */
int ntx_bulk_move(struct ntx_vc *vc, bool write, const struct iovec *local,
		  size_t nlocal, const struct ntx_wire_iov *remote,
		  size_t nremote, size_t off, size_t len)
{
	const struct ntx_be_ops *ops = vc->ops;
	struct iovec lsl[NTX_MAX_IOV], rview[NTX_MAX_IOV];
	struct ntx_wire_iov rsl[NTX_MAX_IOV];
	struct ntx_iov_cur lc, rc, l, r;
	size_t nl, nr;
	ssize_t n;

	/* a peer may ask for a move this back end cannot make (a SPLIT
	 * over tcp): refused, never a call through a missing op */
	if (!(write ? ops->bulk_write : ops->bulk_read))
		return -FI_EOPNOTSUPP;
	if (nremote > NTX_MAX_IOV)
		return -FI_EINVAL;
	ntx_iov_cur_init(&lc, local, nlocal);
	ntx_iov_cur_init(&rc, rview, ntx_wire_iov_view(remote, nremote, rview));
	ntx_iov_cur_skip(&lc, off);
	ntx_iov_cur_skip(&rc, off);
	while (len) {
		/* slice from copies: a partial move resumes where it ended */
		l = lc;
		r = rc;
		ntx_iov_cur_slice(&l, len, lsl, NTX_MAX_IOV, &nl);
		ntx_wire_slice(&r, remote, len, rsl, &nr);
		n = write ? ops->bulk_write(vc->conn, lsl, nl, rsl, nr)
			  : ops->bulk_read(vc->conn, lsl, nl, rsl, nr);
		if (n <= 0 || (size_t)n > len)
			return n < 0 ? (int)n : -FI_EIO;
		len -= (size_t)n;
		ntx_iov_cur_skip(&lc, (size_t)n);
		ntx_iov_cur_skip(&rc, (size_t)n);
	}
	return 0;
}

/* Pulls bytes [off, off + len) of a rendezvous message (single copy). */
static int ntx_rx_pull(struct ntx_req *r, struct ntx_vc *vc,
		       const struct ntx_wire_iov *riov, uint16_t niov,
		       size_t off, size_t len)
{
	return ntx_bulk_move(vc, false, r->iov, r->iov_count, riov, niov,
			     off, len);
}

/* Splits a large single-copy transfer: the sender writes the second half
 * into our buffer while we read the first, so both cores copy. Returns
 * false when the message is not split. */
static bool ntx_rx_split(struct ntx_req *r, struct ntx_vc *vc,
			 const struct ntx_wire_hdr *h,
			 const struct ntx_wire_iov *riov, uint16_t niov)
{
	struct ntx_wire_hdr sp = { .op = NTX_OP_SPLIT, .sreq = h->sreq,
				   .rreq = r->id };
	struct ntx_wire_iov wiov[NTX_MAX_IOV];
	struct iovec seg[NTX_MAX_IOV];
	struct iovec piov = { wiov, 0 };
	struct ntx_wire_hdr fin = { .op = NTX_OP_FIN, .sreq = h->sreq };
	size_t split, nseg;
	int ret;

	/* (an RDMA device copies alone: nothing to share) */
	if (!ntx_params.shm_split_min || r->want < ntx_params.shm_split_min ||
	    !vc->ops->bulk_write || vc->ops->bulk_keyed)
		return false;
	split = (r->want / 2) & ~(size_t)4095;
	sp.offset = split;
	sp.msg_len = r->want - split;
	ntx_iov_slice(r->iov, r->iov_count, split, r->want - split, seg, &nseg);
	ntx_wire_iov_fill(vc, seg, nseg, true, wiov);
	sp.niov = (uint16_t)nseg;
	piov.iov_len = nseg * sizeof(wiov[0]);
	if (vc->ops->send(vc->conn, &sp, &piov, 1, piov.iov_len))
		return false; /* ring full: do it all ourselves */
	ret = ntx_rx_pull(r, vc, riov, niov, 0, split);
	fin.status = ret ? -ret : 0;
	ntx_vc_ctrl(vc, &fin);
	r->state = NTX_RS_RNDV_SPLIT;
	r->split_err = ret;
	ntx_list_insert_tail(&vc->pending, &r->entry);
	return true;
}

/* A rendezvous into a multi-receive buffer: a child receive owns the
 * next slice of it. NULL when there is no request to spare (the buffer's
 * owner gets the error). */
static struct ntx_req *ntx_mrecv_child(struct ntx_ep *ep, struct ntx_req *r,
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

static void ntx_rx_rndv(struct ntx_req *r, struct ntx_vc *vc,
			const struct ntx_wire_hdr *h,
			const struct ntx_wire_iov *riov, uint16_t niov)
{
	struct ntx_wire_hdr reply = { .sreq = h->sreq };
	size_t room;
	int ret;

	if (r->flags & FI_MULTI_RECV) {
		r = ntx_mrecv_child(vc->ep, r, h);
		if (!r)
			return;
	}
	room = r->len;
	r->vc = vc;
	r->hdr = *h;
	r->msg_len = h->msg_len;
	r->want = h->msg_len < room ? h->msg_len : room;
	if (ntx_vc_bulk(vc)) {
		if (ntx_rx_split(r, vc, h, riov, niov))
			return;
		ret = ntx_rx_pull(r, vc, riov, niov, 0, r->want);
		if (ret != -FI_EOPNOTSUPP) {
			reply.op = NTX_OP_FIN;
			reply.status = ret ? -ret : 0;
			ntx_vc_ctrl(vc, &reply);
			if (ret)
				ntx_comp_rx_err(r, -ret, 0, 0, h->tag,
						h->cq_data);
			else
				ntx_rx_done(r, vc);
			return;
		}
		NTX_INFO(FI_LOG_EP_DATA, "single copy not allowed; pipelining "
			 "rendezvous through the window\n");
		if (!vc->ops->bulk_keyed)
			vc->no_cma = true;
	}
	if (!r->want) { /* nothing fits: the sender is done */
		reply.op = NTX_OP_FIN;
		ntx_vc_ctrl(vc, &reply);
		ntx_rx_done(r, vc);
		return;
	}
	reply.op = NTX_OP_CTS;
	reply.rreq = r->id;
	reply.msg_len = r->want;
	r->state = NTX_RS_RNDV_DATA;
	r->done = 0;
	ntx_list_insert_tail(&vc->pending, &r->entry);
	ntx_vc_ctrl(vc, &reply);
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

/* Entries kept for reuse, and the largest buffer one keeps: a burst of
 * large unexpected messages (or a hostile peer's) is given back. */
#define NTX_UNEXP_POOL 256
#define NTX_UNEXP_KEEP_CAP 65536

static void ntx_unexp_free(struct ntx_unexp *u)
{
	struct ntx_vc *vc = u->vc;
	struct ntx_ep *ep = vc->ep;

	ntx_tme_del_unexp(u);
	ntx_unexp_refund(vc, ntx_unexp_cost(u->cap));
	if (vc->keeps_unexp)
		ep->dead_unexp_bytes -= ntx_unexp_cost(u->cap);
	if (vc->zombie && !vc->unexp_bytes)
		free(vc);
	if (ep->unexp_pooled >= NTX_UNEXP_POOL) {
		free(u->data);
		free(u);
		return;
	}
	if (u->cap > NTX_UNEXP_KEEP_CAP) {
		free(u->data);
		u->data = NULL;
		u->cap = 0;
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
}

/* Hands an unexpected message to a receive that matched it. */
static void ntx_unexp_deliver(struct ntx_req *r, struct ntx_unexp *u)
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
static void ntx_mrecv_unref(struct ntx_req *r)
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

/* FI_PEEK, with FI_CLAIM to reserve what it finds for a later receive. */
/* A send or receive from the caller's arguments: a request from the pool,
 * filled and handed to the protocol (the API checked the arguments and
 * holds the endpoint lock). -FI_EAGAIN when the pool cannot grow. */
ssize_t ntx_proto_post_send(struct ntx_ep *ep, const struct iovec *iov,
			    size_t count, size_t len, fi_addr_t dest,
			    uint64_t tag, uint64_t data, void *context,
			    uint64_t flags)
{
	struct ntx_req *r = ntx_req_get(ep, NTX_REQ_SEND);
	ssize_t ret;

	if (!r)
		return -FI_EAGAIN;
	memcpy(r->iov, iov, count * sizeof(*iov));
	r->iov_count = count;
	r->len = len;
	r->addr = dest;
	r->tag = tag;
	r->data = data;
	r->context = context;
	r->flags = flags;
	ret = ntx_proto_send(ep, r);
	if (ret)
		ntx_req_put(r);
	return ret;
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
	uint64_t sum = 0;

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
	if (*niov == 0 || *niov > NTX_MAX_IOV ||
	    *len != *niov * sizeof(riov[0]))
		return false;
	memcpy(riov, *payload, *len); /* copy, then validate */
	for (uint16_t i = 0; i < *niov; i++)
		sum += riov[i].len;
	return sum == h->msg_len;
}

/* An entry for a message of vc that no receive was posted for, holding
 * 'hold' bytes, within the peer's limit and the receive context's
 * budget; NULL when it is over them or out of memory (vc failed). */
static struct ntx_unexp *ntx_unexp_take(struct ntx_vc *vc, size_t len,
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
static struct ntx_req *ntx_reply_req(struct ntx_vc *vc, uint64_t id,
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

static void ntx_on_data(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			const void *payload, size_t len)
{
	struct ntx_req *r = ntx_reply_req(vc, h->rreq, NTX_RS_RNDV_DATA);

	if (!r)
		return;
	if (h->offset != r->done ||
	    len > r->want - r->done) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_iov_copy_to(r->iov, r->iov_count, h->offset, payload, len);
	r->done += len;
	if (r->done == r->want) {
		struct ntx_wire_hdr fin = { .op = NTX_OP_FIN,
					    .sreq = r->hdr.sreq };

		ntx_list_remove(&r->entry);
		ntx_vc_ctrl(vc, &fin);
		ntx_rx_done(r, vc);
	}
}

/* Sender: write our share of a split rendezvous into the receiver. */
static void ntx_on_split(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			 const void *payload, size_t len)
{
	struct ntx_req *r = ntx_reply_req(vc, h->sreq, NTX_RS_RTS_SENT);
	struct ntx_wire_hdr done = { .op = NTX_OP_DONE, .rreq = h->rreq };
	struct ntx_wire_iov wiov[NTX_MAX_IOV];
	struct iovec local[NTX_MAX_IOV];
	uint64_t sum = 0;
	size_t nl;
	int ret;

	if (!r)
		return;
	if (!h->niov || h->niov > NTX_MAX_IOV ||
	    len != h->niov * sizeof(wiov[0]) || h->offset > r->len ||
	    h->msg_len > r->len - h->offset) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	memcpy(wiov, payload, len); /* copy, then validate */
	for (uint16_t i = 0; i < h->niov; i++)
		sum += wiov[i].len;
	if (sum != h->msg_len) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_iov_slice(r->iov, r->iov_count, h->offset, h->msg_len, local, &nl);
	ret = ntx_bulk_move(vc, true, local, nl, wiov, h->niov, 0,
			    h->msg_len);
	done.status = ret ? -ret : 0;
	ntx_vc_ctrl(vc, &done);
}

/* Receiver: the sender wrote its share; the message is complete. */
static void ntx_on_done(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct ntx_req *r = ntx_reply_req(vc, h->rreq, NTX_RS_RNDV_SPLIT);
	int ret;

	if (!r)
		return;
	ntx_list_remove(&r->entry);
	ret = r->split_err ? r->split_err : -h->status;
	if (!ret) {
		ntx_rx_done(r, vc);
		return;
	}
	NTX_WARN(FI_LOG_EP_DATA, "split rendezvous failed: %s\n",
		 fi_strerror(-ret));
	ntx_comp_rx_err(r, -ret, 0, 0, r->hdr.tag, r->hdr.cq_data);
	if (r->multi_parent)
		ntx_mrecv_unref(r->multi_parent);
	ntx_req_put(r);
}

/* Sender: the receiver is ready for a stream of DATA packets. */
static inline void ntx_on_cts(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct ntx_req *r = ntx_reply_req(vc, h->sreq, NTX_RS_RTS_SENT);

	if (!r)
		return;
	if (h->msg_len > r->len) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_list_remove(&r->entry);
	r->state = NTX_RS_STREAM;
	r->peer_req = h->rreq;
	r->want = h->msg_len;
	r->done = 0;
	ntx_vc_queue(vc, r);
	ntx_vc_pump(vc);
}

/* Sender: the receiver has the whole message (or failed to take it). */
static inline void ntx_on_fin(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct ntx_req *r = ntx_reply_req(vc, h->sreq, NTX_RS_RTS_SENT);

	if (!r)
		return;
	ntx_list_remove(&r->entry);
	if (h->status)
		ntx_proto_send_fail(r, -(h->status > 0 ? h->status : FI_EIO));
	else
		ntx_proto_send_done(r);
}

/* Sender: a delivery-complete send arrived. */
static inline void ntx_on_ack(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct ntx_req *r = ntx_reply_req(vc, h->sreq, NTX_RS_WAIT_ACK);

	if (!r)
		return;
	ntx_list_remove(&r->entry);
	ntx_proto_send_done(r);
}

/* ---- streamed messages: the receive side ----------------------------------
 * The head is matched as it arrives, as an eager message would be: the
 * receive it matches takes each segment straight into its buffer. With
 * none, the segments gather in an unexpected entry that is matched again
 * when the last one came (a receive posted meanwhile takes it), then
 * waits like an eager message. The sender's order is the ring's: the
 * segments follow their head with nothing of another message between.
 */

/* The next len bytes of the streamed message coming in on vc. */
static void ntx_rx_stream_put(struct ntx_vc *vc, const void *payload,
			      size_t len)
{
	struct ntx_req *r = vc->rx_stream;
	size_t off = vc->rx_stream_got;

	if (r && off < r->want)
		ntx_iov_copy_to(r->iov, r->iov_count, off, payload,
				len < r->want - off ? len : r->want - off);
	else if (vc->rx_stream_u)
		memcpy(vc->rx_stream_u->data + off, payload, len);
	vc->rx_stream_got += len;
}

/* The streamed message's last segment came. */
static void ntx_rx_stream_end(struct ntx_vc *vc)
{
	struct ntx_req *r = vc->rx_stream;
	struct ntx_unexp *u = vc->rx_stream_u;

	vc->rx_stream = NULL;
	vc->rx_stream_u = NULL;
	vc->rx_stream_len = 0;
	if (r) {
		ntx_list_remove(&r->entry);
		ntx_send_ack(vc, &r->hdr);
		ntx_rx_done(r, vc);
		return;
	}
	if (!u) /* no request to take it (its receive got the error) */
		return;
	u->len = u->hdr.msg_len;
	r = ntx_tme_match_posted(&vc->ep->rx->tme,
				 u->hdr.flags & NTX_PF_TAGGED,
				 ntx_vc_fi_addr(vc), u->hdr.tag);
	if (r)
		ntx_unexp_deliver(r, u);
	else
		ntx_tme_add_unexp(&vc->ep->rx->tme, u);
}

static void ntx_on_shead(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			 const void *payload, size_t len)
{
	struct ntx_ep *ep = vc->ep;
	struct ntx_req *r;
	struct ntx_unexp *u;

	if (vc->rx_stream_len || (h->flags & NTX_PF_INLINE) || h->offset ||
	    !len || len >= h->msg_len || h->msg_len > NTX_STREAM_LIMIT) {
		NTX_WARN(FI_LOG_EP_DATA, "malformed streamed message from "
			 "pid %u\n", vc->peer.pid);
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	r = ntx_tme_match_posted(&ep->rx->tme, h->flags & NTX_PF_TAGGED,
				 ntx_vc_fi_addr(vc), h->tag);
	if (!r) {
		u = ntx_unexp_take(vc, h->msg_len, h->msg_len);
		if (!u)
			return; /* vc failed */
		u->hdr = *h;
		u->hdr.op = NTX_OP_EAGER; /* whole, it is one */
		vc->rx_stream_u = u;
	} else {
		if (r->flags & FI_MULTI_RECV)
			r = ntx_mrecv_child(ep, r, h); /* NULL: dropped */
		if (r) {
			r->vc = vc;
			r->hdr = *h;
			r->msg_len = h->msg_len;
			r->want = h->msg_len < r->len ? h->msg_len : r->len;
			r->state = NTX_RS_RX_STREAM;
			/* failed with the VC if it fails first */
			ntx_list_insert_tail(&vc->pending, &r->entry);
			vc->rx_stream = r;
		}
	}
	vc->rx_stream_len = h->msg_len;
	vc->rx_stream_got = 0;
	ntx_rx_stream_put(vc, payload, len);
}

static void ntx_on_sdata(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			 const void *payload, size_t len)
{
	if (!vc->rx_stream_len || h->flags || h->offset != vc->rx_stream_got ||
	    !len || len > vc->rx_stream_len - vc->rx_stream_got) {
		NTX_WARN(FI_LOG_EP_DATA, "stray segment of a streamed message "
			 "from pid %u\n", vc->peer.pid);
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_rx_stream_put(vc, payload, len);
	if (vc->rx_stream_got == vc->rx_stream_len)
		ntx_rx_stream_end(vc);
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
