/*
 * Protocols, the send side: eager, streamed or rendezvous as a message's
 * size and its peer decide; fi_inject and the sends made without a request.
 */
#include "config.h"

#include "ntx/ntx_engine.h"
#include "ntx_proto_int.h"

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

/* The EAGER header of r's whole message (no request id). */
static inline struct ntx_wire_hdr ntx_eager_hdr(const struct ntx_req *r)
{
	return (struct ntx_wire_hdr){
		.op = NTX_OP_EAGER,
		.flags = ntx_pkt_flags(r->flags),
		.tag = r->tag,
		.cq_data = r->data,
		.msg_len = r->len,
	};
}

static int ntx_tx_eager(struct ntx_req *r)
{
	struct ntx_wire_hdr h = ntx_eager_hdr(r);
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
	if (wait)
		h.sreq = r->id;
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

/* One packet with header h of r's next bytes (from r->done, at most
 * chunk, up to end): 1 when it left (r->done moved on), -FI_EAGAIN when
 * the ring has no room, 0 when it failed r (completed with the error). */
int ntx_tx_piece(struct ntx_req *r, const struct ntx_wire_hdr *h,
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

/* A message of at least NTX_SELF_MIN bytes to our own endpoint, from
 * one buffer, that waits for no acknowledgement, when everything we sent
 * ourselves before it has been taken (the back end's self_idle): it can
 * skip the ring. Then the ring's two copies (ours in, ours out) are one,
 * straight into the receive it matches (a 3-D halo at np 2 sends four of
 * its six faces to itself, at np 1 all six). Smaller messages keep the
 * ring's path, whose cost is not in the copies. */
#define NTX_SELF_MIN 2048

static bool ntx_tx_self_ok(const struct ntx_req *r)
{
	const struct ntx_vc *vc = r->vc;

	return r->len >= NTX_SELF_MIN && r->iov_count == 1 &&
	       vc->peer.pid == vc->ep->name.pid && vc->ops->self_idle &&
	       !(r->flags & (FI_DELIVERY_COMPLETE | FI_INJECT)) &&
	       !vc->rx_stream_len && vc->ops->self_idle(vc->conn);
}

/* A message the stream would take that goes better by rendezvous: one
 * from FI_NTX_SHM_SPLIT_MIN with more queued behind it to another
 * process, where single copy works. The stream's two copies give the
 * lower latency to a message alone, but a window of them in flight moves
 * faster by single copy, each pulled (and half pushed) as its receive
 * matches while the sender goes on (Open MPI's 64-message window of
 * 256 KiB: 19.0 GB/s streamed, 32.4 by rendezvous, vader's 23.6). */
static bool ntx_tx_rndv_better(const struct ntx_req *r)
{
	const struct ntx_vc *vc = r->vc;

	/* (two or more: the backlog's first has one after it) */
	return ntx_params.shm_split_min && r->len >= ntx_params.shm_split_min &&
	       vc->backlog.next->next != &vc->backlog &&
	       vc->peer.pid != vc->ep->name.pid &&
	       ntx_vc_bulk(vc);
}

/* The message delivered as the ring would have (matched, else
 * unexpected), then complete. */
static int ntx_tx_self(struct ntx_req *r)
{
	struct ntx_wire_hdr h = ntx_eager_hdr(r);

	ntx_msg_deliver_eager(r->vc, &h, r->iov[0].iov_base, r->len);
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
		return ntx_tx_self_ok(r) ? ntx_tx_self(r) : ntx_tx_eager(r);
	if (r->len <= ntx_vc_stream_max(r->vc) && !ntx_tx_rndv_better(r))
		return ntx_tx_self_ok(r) ? ntx_tx_self(r) : ntx_tx_smsg(r);
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

/* Sender: a delivery-complete send arrived. */
void ntx_on_ack(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct ntx_req *r = ntx_reply_req(vc, h->sreq, NTX_RS_WAIT_ACK);

	if (!r)
		return;
	ntx_list_remove(&r->entry);
	ntx_proto_send_done(r);
}
