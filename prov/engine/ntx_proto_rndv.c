/*
 * The rendezvous protocol, both sides: an RTS, then a single-copy pull (or
 * split) and FIN, or CTS and DATA segments through the ring; bulk moves.
 */
#include "config.h"

#include "ntx/ntx_engine.h"
#include "ntx_proto_int.h"

int ntx_tx_rts(struct ntx_req *r)
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

int ntx_tx_stream(struct ntx_req *r)
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

void ntx_rx_rndv(struct ntx_req *r, struct ntx_vc *vc,
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

void ntx_on_data(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
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
void ntx_on_split(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		  const void *payload, size_t len)
{
	struct ntx_req *r = ntx_reply_req(vc, h->sreq, NTX_RS_RTS_SENT);
	struct ntx_wire_hdr done = { .op = NTX_OP_DONE, .rreq = h->rreq };
	struct ntx_wire_iov wiov[NTX_MAX_IOV];
	struct iovec local[NTX_MAX_IOV];
	size_t nl;
	int ret;

	if (!r)
		return;
	if (h->offset > r->len || h->msg_len > r->len - h->offset ||
	    !ntx_wire_iov_take(h, payload, len, wiov)) {
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
void ntx_on_done(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
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
void ntx_on_cts(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
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
void ntx_on_fin(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
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
