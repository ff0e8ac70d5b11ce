/*
 * One-sided operations (DESIGN §3 RMA/atomics, §6 keys). The initiator
 * issues a request one remote iovec ("part") at a time: ring-sized
 * segments, one single-copy descriptor for a large part, or one atomic
 * packet. The target validates key, whole range and access of every
 * packet before a byte moves, executes packets in arrival order (which
 * gives RAW/WAR/WAW ordering) and answers each one.
 */
#include "config.h"

#include "ntx/ntx_atomic.h"
#include "ntx/ntx_engine.h"

/* ---- initiator ------------------------------------------------------------ */

/* Where part i starts in the local buffers. */
static size_t ntx_rma_local_off(const struct ntx_req *r, size_t part)
{
	size_t off = 0;

	for (size_t i = 0; i < part; i++)
		off += r->riov[i].len;
	return off;
}

/* Large parts move by one single-copy operation of the target. */
static bool ntx_rma_use_cma(const struct ntx_req *r,
			    const struct fi_rma_iov *ri)
{
	const struct ntx_vc *vc = r->vc;

	return r->rma_op != NTX_OP_ATOMIC && !r->redo_pass && ntx_vc_bulk(vc) &&
	       ri->len > ntx_vc_mtu(vc);
}

static size_t ntx_rma_last_part(const struct ntx_req *r)
{
	if (r->redo_pass)
		return (size_t)(31 - __builtin_clz(r->redo_pass));
	return r->riov_count - 1;
}

static void ntx_rma_next_part(struct ntx_req *r)
{
	r->part_off = 0;
	do
		r->part++;
	while (r->redo_pass && r->part < r->riov_count &&
	       !(r->redo_pass & (1u << r->part)));
}

/* Bytes of the packet that goes next, and its payload. */
static size_t ntx_rma_payload(struct ntx_req *r, struct ntx_wire_hdr *h,
			      struct iovec *seg, size_t *nseg,
			      struct ntx_wire_iov *wiov, uint8_t *abuf,
			      size_t *plen)
{
	const struct fi_rma_iov *ri = &r->riov[r->part];
	size_t loff = ntx_rma_local_off(r, r->part);
	size_t left = ri->len - r->part_off, mtu = ntx_vc_mtu(r->vc), n = 0;

	*nseg = 0;
	*plen = 0;
	if (ntx_rma_use_cma(r, ri)) {
		struct iovec sl[NTX_MAX_IOV];
		size_t ns;

		h->op = r->rma_op == NTX_OP_WRITE ? NTX_OP_WRITE_CMA
						  : NTX_OP_READ_CMA;
		ntx_iov_slice(r->iov, r->iov_count, loff, ri->len, sl, &ns);
		/* a read: the target writes into our buffers */
		ntx_wire_iov_fill(r->vc, sl, ns, r->rma_op == NTX_OP_READ,
				  wiov);
		h->niov = (uint16_t)ns;
		seg[0].iov_base = wiov;
		seg[0].iov_len = ns * sizeof(*wiov);
		*nseg = 1;
		*plen = seg[0].iov_len;
		return ri->len;
	}
	if (r->rma_op == NTX_OP_WRITE) {
		n = left < mtu ? left : mtu;
		*plen = ntx_iov_slice(r->iov, r->iov_count, loff + r->part_off,
				      n, seg, nseg);
		return n;
	}
	if (r->rma_op == NTX_OP_READ) {
		/* the answer may have to wait in a bounce buffer */
		if (mtu > NTX_INJECT_MAX)
			mtu = NTX_INJECT_MAX;
		n = left < mtu ? left : mtu;
		h->cq_data = n;
		return n;
	}
	/* atomic: operands, then compare values, in one packet */
	h->niov = r->dt_op;
	if ((r->dt_op & 0xff) != FI_ATOMIC_READ) {
		ntx_iov_slice(r->iov, r->iov_count, loff, ri->len, seg, nseg);
		n = ntx_iov_copy_from(abuf, seg, *nseg, ri->len);
	}
	if (r->pkt_flags & NTX_PF_COMPARE) {
		ntx_iov_slice(r->ciov, r->ciov_count, loff, ri->len, seg, nseg);
		n += ntx_iov_copy_from(abuf + n, seg, *nseg, ri->len);
	}
	seg[0].iov_base = abuf;
	seg[0].iov_len = n;
	*nseg = n ? 1 : 0;
	*plen = n;
	return ri->len;
}

/* One packet of the current part: 0, -FI_EAGAIN (ring full) or an error. */
static int ntx_rma_tx_one(struct ntx_req *r)
{
	const struct fi_rma_iov *ri = &r->riov[r->part];
	struct ntx_wire_hdr h = {
		.op = r->rma_op,
		/* several parts: the CQ data goes last, in RMA_NOTIFY */
		.flags = r->pkt_flags & (r->riov_count > 1 ? ~NTX_PF_DATA : 0xff),
		.status = (int32_t)r->part,
		.tag = ri->key,
		.cq_data = r->data,
		.msg_len = ri->len,
		.sreq = r->id,
		.rreq = r->part_off,
		.offset = ri->addr,
	};
	struct iovec seg[NTX_MAX_IOV];
	struct ntx_wire_iov wiov[NTX_MAX_IOV];
	uint8_t abuf[2 * NTX_ATOMIC_MAX_BYTES];
	size_t nseg, plen, n;
	bool last;
	int ret;

	n = ntx_rma_payload(r, &h, seg, &nseg, wiov, abuf, &plen);
	last = r->part_off + n >= ri->len;
	if (last && r->part == ntx_rma_last_part(r))
		h.flags |= NTX_PF_LAST;
	ret = r->vc->ops->send(r->vc->conn, &h, seg, nseg, plen);
	if (ret)
		return ret;
	r->unacked++;
	if (last)
		ntx_rma_next_part(r);
	else
		r->part_off += n;
	return 0;
}

enum { /* rma_stage of a request of several remote iovecs */
	NTX_RMA_CHECK,    /* RMA_CHECK to send */
	NTX_RMA_CHECKING, /* waiting for its answer */
	NTX_RMA_DATA,     /* data packets */
	NTX_RMA_NOTIFY,   /* RMA_NOTIFY to send */
	NTX_RMA_DONE,
};

/* Every (addr, len, key) of the request, for the target to check whole */
static int ntx_rma_tx_check(struct ntx_req *r)
{
	struct ntx_wire_riov w[NTX_MAX_IOV];
	struct iovec iov = { w, r->riov_count * sizeof(w[0]) };
	struct ntx_wire_hdr h = {
		.op = NTX_OP_RMA_CHECK,
		.flags = r->pkt_flags & (NTX_PF_FETCH | NTX_PF_COMPARE),
		.niov = (uint16_t)r->riov_count,
		.status = r->rma_op,
		.sreq = r->id,
		.rreq = r->dt_op,
	};

	for (size_t i = 0; i < r->riov_count; i++) {
		w[i].addr = r->riov[i].addr;
		w[i].len = r->riov[i].len;
		w[i].key = r->riov[i].key;
	}
	return r->vc->ops->send(r->vc->conn, &h, &iov, 1, iov.iov_len);
}

static int ntx_rma_tx_notify(struct ntx_req *r)
{
	struct ntx_wire_hdr h = {
		.op = NTX_OP_RMA_NOTIFY,
		.flags = NTX_PF_DATA,
		.cq_data = r->data,
		.msg_len = r->len,
		.sreq = r->id,
	};

	return r->vc->ops->send(r->vc->conn, &h, NULL, 0, 0);
}

/* Every packet was answered: complete, resend the parts the target could
 * not move by single copy, or send the remote CQ data of several parts. */
static void ntx_rma_finish(struct ntx_req *r)
{
	if (r->redo && !r->rma_err) {
		r->redo_pass = r->redo;
		r->redo = 0;
		r->part = (size_t)__builtin_ctz(r->redo_pass);
		r->part_off = 0;
		ntx_vc_backlog(r->vc, r, true);
		return;
	}
	if (!r->rma_err && r->rma_stage == NTX_RMA_DATA &&
	    r->riov_count > 1 && (r->pkt_flags & NTX_PF_DATA)) {
		r->rma_stage = NTX_RMA_NOTIFY;
		ntx_vc_backlog(r->vc, r, true);
		return;
	}
	if (r->rma_err)
		ntx_proto_send_fail(r, -r->rma_err);
	else
		ntx_proto_send_done(r);
}

int ntx_rma_tx(struct ntx_req *r)
{
	int ret = 0;

	if (r->riov_count == 1 && r->rma_stage < NTX_RMA_DATA)
		r->rma_stage = NTX_RMA_DATA; /* one part: checked with it */
	if (r->rma_stage == NTX_RMA_CHECK) {
		ret = ntx_rma_tx_check(r);
		if (ret == -FI_EAGAIN)
			return ret;
		r->rma_stage = NTX_RMA_CHECKING;
		if (!ret) { /* data waits for the answer */
			r->unacked++;
			ntx_list_insert_tail(&r->vc->pending, &r->entry);
			return 0;
		}
	} else if (r->rma_stage == NTX_RMA_NOTIFY) {
		ret = ntx_rma_tx_notify(r);
		if (ret == -FI_EAGAIN)
			return ret;
		r->rma_stage = NTX_RMA_DONE;
		if (!ret)
			r->unacked++;
	}
	if (ret) {
		if (!r->rma_err)
			r->rma_err = -ret;
		r->part = r->riov_count;
	}
	while (r->rma_stage == NTX_RMA_DATA && r->part < r->riov_count) {
		ret = ntx_rma_tx_one(r);
		if (ret == -FI_EAGAIN)
			return ret;
		if (ret) { /* stop issuing; answers still owed come first */
			if (!r->rma_err)
				r->rma_err = -ret;
			r->part = r->riov_count;
		}
	}
	if (!r->unacked)
		ntx_rma_finish(r);
	else
		ntx_list_insert_tail(&r->vc->pending, &r->entry);
	return 0;
}

ssize_t ntx_rma_post(struct ntx_ep *ep, struct ntx_req *r)
{
	int ret = ntx_vc_get(ep, r->addr, &r->vc);

	if (ret && !ntx_vc_err_unreachable(ret))
		return ret;
	r->state = NTX_RS_RMA;
	ep->tx_outstanding++;
	if (ret) { /* an error completion, once (ntx_vc_err_unreachable) */
		ntx_proto_send_fail(r, ret);
		return 0;
	}
	if (r->vc->state == NTX_VC_CONNECTED &&
	    ntx_list_empty(&r->vc->backlog) && ntx_proto_tx(r) != -FI_EAGAIN)
		return 0;
	ntx_vc_queue(r->vc, r);
	return 0;
}

/* The answer to a request's key check (RMA_CHECK): its data moves next,
 * or none of it does. false: a malformed answer. */
static bool ntx_rma_on_check_resp(struct ntx_vc *vc, struct ntx_req *r,
				  const struct ntx_wire_hdr *h, size_t len)
{
	if (r->rma_stage != NTX_RMA_CHECKING || len)
		return false;
	r->unacked--;
	ntx_list_remove(&r->entry);
	if (h->status) { /* nothing of the request moves */
		r->rma_err = h->status > 0 && h->status < NTX_RMA_RETRY
				     ? h->status : FI_EIO;
		r->part = r->riov_count;
		r->rma_stage = NTX_RMA_DONE;
		if (!r->unacked)
			ntx_rma_finish(r);
		else
			ntx_list_insert_tail(&vc->pending, &r->entry);
		return true;
	}
	r->rma_stage = NTX_RMA_DATA;
	ntx_vc_backlog(vc, r, true);
	return true;
}

static void ntx_rma_on_resp(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			    const void *payload, size_t len)
{
	struct ntx_req *r = ntx_req_lookup(vc->ep, h->sreq);
	const struct fi_rma_iov *ri;
	size_t loff;

	if (!r || r->vc != vc || r->state != NTX_RS_RMA || !r->unacked)
		goto bad;
	if (h->niov == NTX_RMA_CHECK_PART) {
		if (!ntx_rma_on_check_resp(vc, r, h, len))
			goto bad;
		return;
	}
	if (h->niov >= r->riov_count)
		goto bad;
	ri = &r->riov[h->niov];
	loff = ntx_rma_local_off(r, h->niov);
	if (h->status == NTX_RMA_RETRY) {
		if (len)
			goto bad;
		NTX_INFO(FI_LOG_EP_DATA, "single copy not allowed; one-sided "
			 "data goes through the window\n");
		r->redo |= (uint8_t)(1u << h->niov);
		if (!vc->ops->bulk_keyed)
			vc->no_cma = true;
	} else if (h->status) {
		if (len)
			goto bad;
		if (!r->rma_err)
			r->rma_err = h->status > 0 && h->status < NTX_RMA_RETRY
					     ? h->status : FI_EIO;
	} else if (r->rma_op == NTX_OP_READ && len) {
		if (h->rreq > ri->len || len > ri->len - h->rreq)
			goto bad;
		ntx_iov_copy_to(r->iov, r->iov_count, loff + h->rreq, payload,
				len);
	} else if (r->rma_op == NTX_OP_ATOMIC &&
		   (r->pkt_flags & (NTX_PF_FETCH | NTX_PF_COMPARE))) {
		if (len != ri->len)
			goto bad;
		ntx_iov_copy_to(r->resiov, r->resiov_count, loff, payload, len);
	} else if (len) {
		goto bad;
	}
	if (--r->unacked || r->part < r->riov_count)
		return; /* more answers owed, or still issuing */
	ntx_list_remove(&r->entry);
	ntx_rma_finish(r);
	return;
bad:
	NTX_WARN(FI_LOG_EP_DATA, "malformed one-sided answer from pid %u\n",
		 vc->peer.pid);
	ntx_vc_fail(vc, -FI_EREMOTEIO);
}

/* ---- target -----------------------------------------------------------------
 * Each handler holds the domain's mr_lock from the key check until the
 * bytes moved: fi_close of the MR waits for it, so a closed MR's key
 * never reaches memory. */

static void ntx_rma_mr_lock(struct ntx_vc *vc)
{
	ntx_mutex_lock(vc->ep->domain, &vc->ep->domain->mr_lock);
}

static void ntx_rma_mr_unlock(struct ntx_vc *vc)
{
	ntx_mutex_unlock(vc->ep->domain, &vc->ep->domain->mr_lock);
}

/* err: 0, a negative FI_E* code, or NTX_RMA_RETRY */
/* Key guessing is bounded (DESIGN §7, "keys"): a connection that has
 * NTX_KEY_STRIKES remote accesses rejected in a row is failed; once the
 * endpoint has rejected NTX_KEY_BUDGET accesses from all its peers, the
 * first rejection fails a connection. Each new connection costs the
 * guesser a handshake. */
#define NTX_KEY_STRIKES 8
#define NTX_KEY_BUDGET 1024

/* Counts an answer of the target, once per request (sreq); true when the
 * VC must be failed. */
static bool ntx_rma_strike(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			   int err)
{
	struct ntx_ep *ep = vc->ep;

	if (err != -FI_EKEYREJECTED) {
		if (!err)
			vc->key_strikes = 0;
		return false;
	}
	/* every packet of a large request is checked: one strike each */
	if (vc->key_strikes && h->sreq == vc->strike_sreq)
		return false;
	vc->strike_sreq = h->sreq;
	ep->key_rejects++;
	if (++vc->key_strikes < NTX_KEY_STRIKES &&
	    ep->key_rejects <= NTX_KEY_BUDGET)
		return false;
	NTX_WARN(FI_LOG_EP_DATA, "pid %u: %u remote accesses rejected in a "
		 "row (%llu in all): connection closed\n", vc->peer.pid,
		 vc->key_strikes, (unsigned long long)ep->key_rejects);
	return true;
}

static void ntx_rma_answer(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			   int err, const struct iovec *iov, size_t iovcnt,
			   size_t len)
{
	struct ntx_wire_hdr a = {
		.op = NTX_OP_RMA_RESP,
		.niov = (uint16_t)h->status,
		.status = err == NTX_RMA_RETRY ? NTX_RMA_RETRY : -err,
		.sreq = h->sreq,
		.rreq = h->rreq,
	};

	bool strike = ntx_rma_strike(vc, h, err);

	if (ntx_vc_ctrl_data(vc, &a, iov, iovcnt, len))
		ntx_vc_fail(vc, -FI_ENOMEM); /* the initiator would hang */
	else if (strike)
		ntx_vc_fail(vc, -FI_EACCES);
}

/* A remote CQ data entry, unless the CQ already holds NTX_CQ_REMOTE_MAX
 * entries that nobody reads: then the peer's connection fails. */
static void ntx_rma_remote_data(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct ntx_cq *cq = vc->ep->rx_cq;

	if (!ntx_cq_room_for_peer(cq)) {
		if (!vc->doom)
			NTX_WARN(FI_LOG_CQ, "CQ full of entries nobody reads; "
				 "remote CQ data of pid %u refused\n",
				 vc->peer.pid);
		vc->doom = -FI_ENOSPC;
		vc->ep->reap = true;
		return;
	}
	ntx_cq_push(cq, NULL, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
		    h->msg_len, NULL, h->cq_data, 0, ntx_vc_fi_addr(vc));
}

/* The operation's last packet landed: counters and remote CQ data.
 * Called after the answer went to the back end: a target that sees its
 * counter or entry and exits at once has answered, so the initiator's
 * delivery-complete operation succeeds (the answer lost with the
 * process only when it waited in the backlog, the ring full). */
static void ntx_rma_target_event(struct ntx_vc *vc,
				 const struct ntx_wire_hdr *h,
				 struct ntx_mr *mr, uint64_t what)
{
	struct ntx_ep *ep = vc->ep;
	struct ntx_cntr *c = what == FI_REMOTE_WRITE ? ep->rwrite_cntr
						     : ep->rread_cntr;

	if (!(h->flags & NTX_PF_LAST))
		return;
	if (c)
		ntx_cntr_inc(c);
	if (mr->cntr && (mr->cntr_flags & what) && mr->cntr != c)
		ntx_cntr_inc(mr->cntr);
	if ((h->flags & NTX_PF_DATA) && what == FI_REMOTE_WRITE && ep->rx_cq)
		ntx_rma_remote_data(vc, h);
}

static void ntx_rma_on_write(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			     const void *payload, size_t len)
{
	struct iovec iov[NTX_MAX_IOV];
	struct ntx_mr *mr;
	size_t n;
	int ret;

	if (h->rreq > h->msg_len || len > h->msg_len - h->rreq) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_rma_mr_lock(vc);
	ret = ntx_mr_check(vc->ep->domain, h->tag, h->offset,
			   h->msg_len, FI_REMOTE_WRITE, iov, &n, &mr);
	if (!ret)
		ntx_iov_copy_to(iov, n, h->rreq, payload, len);
	ntx_rma_answer(vc, h, ret, NULL, 0, 0);
	if (!ret)
		ntx_rma_target_event(vc, h, mr, FI_REMOTE_WRITE);
	ntx_rma_mr_unlock(vc);
}

static void ntx_rma_on_read(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	struct iovec iov[NTX_MAX_IOV], seg[NTX_MAX_IOV];
	struct ntx_mr *mr;
	size_t n, ns;
	int ret;

	if (h->rreq > h->msg_len || h->cq_data > h->msg_len - h->rreq ||
	    h->cq_data > NTX_INJECT_MAX) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_rma_mr_lock(vc);
	ret = ntx_mr_check(vc->ep->domain, h->tag, h->offset,
			   h->msg_len, FI_REMOTE_READ, iov, &n, &mr);
	if (ret) {
		ntx_rma_mr_unlock(vc);
		ntx_rma_answer(vc, h, ret, NULL, 0, 0);
		return;
	}
	ntx_iov_slice(iov, n, h->rreq, h->cq_data, seg, &ns);
	/* the answer copies the bytes out of the MR: still locked */
	ntx_rma_answer(vc, h, 0, seg, ns, h->cq_data);
	ntx_rma_target_event(vc, h, mr, FI_REMOTE_READ);
	ntx_rma_mr_unlock(vc);
}

/* Large parts: the target copies with one process_vm_readv/writev, after
 * the check, under the mr_lock that fi_close of the MR also takes. */
static void ntx_rma_on_cma(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			   const void *payload, size_t len)
{
	bool write = h->op == NTX_OP_WRITE_CMA;
	struct ntx_wire_iov wiov[NTX_MAX_IOV];
	struct iovec iov[NTX_MAX_IOV];
	struct ntx_mr *mr;
	size_t n;
	int ret;

	if (h->rreq || !vc->ops->bulk_read || !vc->ops->bulk_write ||
	    !ntx_wire_iov_take(h, payload, len, wiov)) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	ntx_rma_mr_lock(vc);
	ret = ntx_mr_check(vc->ep->domain, h->tag, h->offset,
			   h->msg_len,
			   write ? FI_REMOTE_WRITE : FI_REMOTE_READ, iov, &n,
			   &mr);
	if (!ret) {
		/* a write pulls the initiator's data, a read pushes ours */
		ret = ntx_bulk_move(vc, !write, iov, n, wiov, h->niov, 0,
				    h->msg_len);
		if (ret == -FI_EOPNOTSUPP)
			ret = NTX_RMA_RETRY;
	}
	ntx_rma_answer(vc, h, ret, NULL, 0, 0);
	if (!ret)
		ntx_rma_target_event(vc, h, mr,
				     write ? FI_REMOTE_WRITE : FI_REMOTE_READ);
	ntx_rma_mr_unlock(vc);
}

/* The access an atomic needs: reads for fetches, writes unless it only
 * reads. */
static uint64_t ntx_rma_atomic_access(uint8_t flags, enum fi_op op)
{
	uint64_t access = op == FI_ATOMIC_READ ? FI_REMOTE_READ
					       : FI_REMOTE_WRITE;

	if (flags & (NTX_PF_FETCH | NTX_PF_COMPARE))
		access |= FI_REMOTE_READ;
	return access;
}

/* Checks an atomic's operation and target; runs it piece by piece (an MR
 * of several iovecs may split the range). */
static int ntx_rma_atomic_run(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			      const uint8_t *operand, const uint8_t *compare,
			      uint8_t *result, struct ntx_mr **mr)
{
	enum fi_datatype dt = (enum fi_datatype)(h->niov >> 8);
	enum fi_op op = (enum fi_op)(h->niov & 0xff);
	struct iovec iov[NTX_MAX_IOV];
	uint64_t access;
	size_t n, size = ntx_atomic_dt_size(dt), done = 0;
	int ret;

	access = ntx_rma_atomic_access(h->flags, op);
	ret = ntx_mr_check(vc->ep->domain, h->tag, h->offset,
			   h->msg_len, access, iov, &n, mr);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		if (iov[i].iov_len % size ||
		    !ntx_atomic_aligned(dt, (uintptr_t)iov[i].iov_base)) {
			NTX_WARN(FI_LOG_EP_DATA, "misaligned atomic at 0x%llx\n",
				 (unsigned long long)h->offset);
			return -FI_EINVAL;
		}
	}
	for (size_t i = 0; i < n; i++) {
		ntx_atomic_exec(dt, op, iov[i].iov_base,
				operand ? operand + done : NULL,
				compare ? compare + done : NULL,
				result ? result + done : NULL,
				iov[i].iov_len / size);
		done += iov[i].iov_len;
	}
	return 0;
}

static void ntx_rma_on_atomic(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			      const void *payload, size_t len)
{
	enum fi_datatype dt = (enum fi_datatype)(h->niov >> 8);
	enum fi_op op = (enum fi_op)(h->niov & 0xff);
	bool cmp = h->flags & NTX_PF_COMPARE;
	bool fetch = h->flags & (NTX_PF_FETCH | NTX_PF_COMPARE);
	enum ntx_atomic_fn fn = cmp ? NTX_AFN_COMPARE
			      : fetch ? NTX_AFN_FETCH : NTX_AFN_BASE;
	size_t size = ntx_atomic_dt_size(dt), want;
	uint8_t result[NTX_ATOMIC_MAX_BYTES];
	struct iovec riov = { result, h->msg_len };
	const uint8_t *operand = payload;
	struct ntx_mr *mr;
	int ret;

	if (!size || !ntx_atomic_supported(fn, dt, op)) {
		ntx_rma_answer(vc, h, -FI_EOPNOTSUPP, NULL, 0, 0);
		return;
	}
	want = (op == FI_ATOMIC_READ ? 0 : h->msg_len) + (cmp ? h->msg_len : 0);
	if (h->rreq || !h->msg_len || h->msg_len % size ||
	    h->msg_len > NTX_ATOMIC_MAX_BYTES || len != want) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	if (op == FI_ATOMIC_READ)
		operand = NULL;
	ntx_rma_mr_lock(vc);
	ret = ntx_rma_atomic_run(vc, h, operand,
				 cmp ? (const uint8_t *)payload + h->msg_len
				     : NULL,
				 fetch ? result : NULL, &mr);
	if (ret || !fetch)
		ntx_rma_answer(vc, h, ret, NULL, 0, 0);
	else
		ntx_rma_answer(vc, h, 0, &riov, 1, h->msg_len);
	if (!ret)
		ntx_rma_target_event(vc, h, mr,
				     op == FI_ATOMIC_READ ? FI_REMOTE_READ
							  : FI_REMOTE_WRITE);
	ntx_rma_mr_unlock(vc);
}

/* One part of a request of several, as its data packets will be checked
 * (atomics: operation, size and alignment too). mr_lock held. */
static int ntx_rma_check_part(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			      const struct ntx_wire_riov *w)
{
	enum fi_datatype dt = (enum fi_datatype)(h->rreq >> 8);
	enum fi_op op = (enum fi_op)(h->rreq & 0xff);
	struct iovec iov[NTX_MAX_IOV];
	struct ntx_mr *mr;
	size_t n, size;
	uint64_t access;
	int ret;

	ntx_assert_mutex_locked(vc->ep->domain, &vc->ep->domain->mr_lock);
	if (h->status == NTX_OP_WRITE)
		access = FI_REMOTE_WRITE;
	else if (h->status == NTX_OP_READ)
		access = FI_REMOTE_READ;
	else
		access = ntx_rma_atomic_access(h->flags, op);
	ret = ntx_mr_check(vc->ep->domain, w->key, w->addr, w->len,
			   access, iov, &n, &mr);
	if (ret || h->status != NTX_OP_ATOMIC)
		return ret;
	size = ntx_atomic_dt_size(dt);
	if (!size) /* a datatype the peer made up */
		return -FI_EOPNOTSUPP;
	for (size_t i = 0; i < n; i++)
		if (iov[i].iov_len % size ||
		    !ntx_atomic_aligned(dt, (uintptr_t)iov[i].iov_base))
			return -FI_EINVAL;
	return 0;
}

static void ntx_rma_on_check(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			     const void *payload, size_t len)
{
	struct ntx_wire_riov w[NTX_MAX_IOV];
	struct ntx_wire_hdr q = *h;
	int ret = 0;

	if (!h->niov || h->niov > NTX_MAX_IOV ||
	    len != h->niov * sizeof(w[0]) ||
	    (h->status != NTX_OP_WRITE && h->status != NTX_OP_READ &&
	     h->status != NTX_OP_ATOMIC)) {
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	memcpy(w, payload, len); /* copy, then validate */
	ntx_rma_mr_lock(vc);
	for (uint16_t i = 0; i < h->niov && !ret; i++)
		ret = ntx_rma_check_part(vc, h, &w[i]);
	ntx_rma_mr_unlock(vc);
	/* the remote CQ data of a checked write may follow (RMA_NOTIFY) */
	if (!ret && h->status == NTX_OP_WRITE && vc->notify_credit < UINT32_MAX)
		vc->notify_credit++;
	q.status = NTX_RMA_CHECK_PART; /* the answer names the check */
	ntx_rma_answer(vc, &q, ret, NULL, 0, 0);
}

/* The remote CQ data of a request of several parts, after all of them. */
static void ntx_rma_on_notify(struct ntx_vc *vc, const struct ntx_wire_hdr *h)
{
	ntx_rma_answer(vc, h, 0, NULL, 0, 0);
	if (vc->ep->rx_cq)
		ntx_rma_remote_data(vc, h);
}

void ntx_rma_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		       const void *payload, size_t len)
{
	switch (h->op) {
	case NTX_OP_WRITE:
		ntx_rma_on_write(vc, h, payload, len);
		break;
	case NTX_OP_READ:
		if (len) {
			ntx_vc_fail(vc, -FI_EREMOTEIO);
			return;
		}
		ntx_rma_on_read(vc, h);
		break;
	case NTX_OP_WRITE_CMA:
	case NTX_OP_READ_CMA:
		ntx_rma_on_cma(vc, h, payload, len);
		break;
	case NTX_OP_ATOMIC:
		ntx_rma_on_atomic(vc, h, payload, len);
		break;
	case NTX_OP_RMA_RESP:
		ntx_rma_on_resp(vc, h, payload, len);
		break;
	case NTX_OP_RMA_CHECK:
		ntx_rma_on_check(vc, h, payload, len);
		break;
	case NTX_OP_RMA_NOTIFY:
		/* only after a write whose keys passed RMA_CHECK: without a
		 * key nobody puts "remote write" entries into our CQ */
		if (len || !(h->flags & NTX_PF_DATA) || !vc->notify_credit) {
			NTX_WARN(FI_LOG_EP_DATA, "remote CQ data without a "
				 "checked write from pid %u\n", vc->peer.pid);
			ntx_vc_fail(vc, -FI_EREMOTEIO);
			return;
		}
		vc->notify_credit--;
		ntx_rma_on_notify(vc, h);
		break;
	default:
		ntx_vc_fail(vc, -FI_EREMOTEIO);
	}
}
