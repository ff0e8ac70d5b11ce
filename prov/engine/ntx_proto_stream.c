/*
 * Streamed messages, both sides: a head (SHEAD) and segments (SDATA)
 * through the ring, received into the matched receive or an entry waiting.
 */
#include "config.h"

#include "ntx/ntx_engine.h"
#include "ntx_proto_int.h"

/* A streamed message: its head, then its segments, each as soon as the
 * ring takes it. -FI_EAGAIN leaves the rest to the backlog, where no
 * later message passes it, so the receiver sees nothing of another
 * message between the head and the last segment. The message left
 * whole once its last byte is in the peer's window. */
int ntx_tx_smsg(struct ntx_req *r)
{
	/* longer than the eager size: a head of at most that (so never
	 * the whole message), then segments of up to the back end's
	 * streamed segment */
	size_t head = ntx_vc_mtu(r->vc);
	size_t chunk = r->vc->ops->stream_mtu && r->vc->conn
			       ? r->vc->ops->stream_mtu(r->vc->conn)
			       : head;
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
		ret = ntx_tx_piece(r, &h, r->len,
				   h.op == NTX_OP_SHEAD ? head : chunk);
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

void ntx_on_shead(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
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

void ntx_on_sdata(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
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
