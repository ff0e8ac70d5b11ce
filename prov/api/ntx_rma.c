/*
 * fi_rma(3) entry points: argument checks, then a one-sided request handed
 * to the engine under the endpoint lock. The target checks keys; here only
 * what the application got wrong locally is refused.
 */
#include "config.h"

#include "ntx/ntx.h"

#define NTX_RMA_FLAGS                                                       \
	(FI_COMPLETION | FI_INJECT | FI_REMOTE_CQ_DATA | FI_INJECT_COMPLETE | \
	 FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MORE | FI_FENCE |   \
	 FI_COMMIT_COMPLETE | FI_TRIGGER)


/* A request from the pool with room in the transmit queue, or NULL
 * (-FI_EAGAIN for the caller). Endpoint lock held. */
struct ntx_req *ntx_rma_req_get(struct ntx_ep *ep)
{
	ntx_assert_ep_locked(ep);
	if (ep->tx_outstanding >= ep->tx_limit) {
		ntx_ep_progress(ep);
		if (ep->tx_outstanding >= ep->tx_limit)
			return NULL;
	}
	return ntx_req_get(ep, NTX_REQ_SEND);
}

ssize_t ntx_rma_start(struct ntx_ep *ep, uint8_t op, const struct iovec *iov,
		      size_t count, const struct fi_rma_iov *riov,
		      size_t rcount, fi_addr_t dest, uint64_t data,
		      void *context, uint64_t flags, bool silent)
{
	struct ntx_req *r;
	size_t len, rlen = 0;
	ssize_t ret;

	if (flags & FI_TRIGGER)
		return ntx_trig_rma(ep, op, iov, count, riov, rcount, dest,
				    data, context, flags);
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (count > NTX_MAX_IOV || (count && !iov) || !rcount ||
	    rcount > NTX_MAX_IOV || !riov || (flags & ~NTX_RMA_FLAGS) ||
	    (op == NTX_OP_READ && (flags & (FI_INJECT | FI_REMOTE_CQ_DATA)))) {
		NTX_WARN(FI_LOG_EP_DATA, "rma: bad iov counts or flags\n");
		return -FI_EINVAL;
	}
	len = ntx_iov_len(iov, count);
	for (size_t i = 0; i < rcount; i++)
		rlen += riov[i].len;
	if (len != rlen) {
		NTX_WARN(FI_LOG_EP_DATA, "rma: local and remote lengths "
			 "differ\n");
		return -FI_EINVAL;
	}
	if ((flags & FI_INJECT) && len > NTX_INJECT_MAX)
		return -FI_EMSGSIZE;
	ntx_ep_lock(ep);
	r = ntx_rma_req_get(ep);
	if (!r || ((flags & FI_INJECT) && ntx_req_bounce(r))) {
		if (r)
			ntx_req_put(r);
		ntx_ep_unlock(ep);
		return -FI_EAGAIN;
	}
	if (flags & FI_INJECT) {
		/* the caller may reuse its buffer as soon as we return */
		ntx_iov_copy_from(r->bounce, iov, count, len);
		r->iov[0].iov_base = r->bounce;
		r->iov[0].iov_len = len;
		r->iov_count = 1;
	} else {
		memcpy(r->iov, iov, count * sizeof(*iov));
		r->iov_count = count;
	}
	memcpy(r->riov, riov, rcount * sizeof(*riov));
	r->riov_count = rcount;
	r->len = len;
	r->addr = dest;
	r->data = data;
	r->context = context;
	r->flags = flags;
	r->silent = silent;
	r->rma_op = op;
	r->pkt_flags = flags & FI_REMOTE_CQ_DATA ? NTX_PF_DATA : 0;
	r->cq_flags = FI_RMA | (op == NTX_OP_READ ? FI_READ : FI_WRITE);
	ret = ntx_rma_post(ep, r);
	if (ret)
		ntx_req_put(r);
	ntx_ep_unlock(ep);
	return ret;
}

static ssize_t ntx_read(struct fid_ep *fep, void *buf, size_t len, void *desc,
			fi_addr_t src, uint64_t addr, uint64_t key,
			void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct iovec iov = { buf, len };
	struct fi_rma_iov riov = { addr, len, key };

	return ntx_rma_start(ep, NTX_OP_READ, &iov, 1, &riov, 1, src, 0,
			     context, ntx_fep_tx_flags(fep) & NTX_RMA_FLAGS & ~FI_INJECT, false);
}

static ssize_t ntx_readv(struct fid_ep *fep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t src,
			 uint64_t addr, uint64_t key, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct fi_rma_iov riov = { addr, ntx_iov_len(iov, count), key };

	return ntx_rma_start(ep, NTX_OP_READ, iov, count, &riov, 1, src, 0,
			     context, ntx_fep_tx_flags(fep) & NTX_RMA_FLAGS & ~FI_INJECT, false);
}

static ssize_t ntx_readmsg(struct fid_ep *fep, const struct fi_msg_rma *msg,
			   uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return ntx_rma_start(ntx_ep_of(fep), NTX_OP_READ, msg->msg_iov,
			     msg->iov_count, msg->rma_iov, msg->rma_iov_count,
			     msg->addr, 0, msg->context, flags, false);
}

static ssize_t ntx_write(struct fid_ep *fep, const void *buf, size_t len,
			 void *desc, fi_addr_t dest, uint64_t addr,
			 uint64_t key, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct iovec iov = { (void *)buf, len };
	struct fi_rma_iov riov = { addr, len, key };

	return ntx_rma_start(ep, NTX_OP_WRITE, &iov, 1, &riov, 1, dest, 0,
			     context, ntx_fep_tx_flags(fep) & NTX_RMA_FLAGS, false);
}

static ssize_t ntx_writev(struct fid_ep *fep, const struct iovec *iov,
			  void **desc, size_t count, fi_addr_t dest,
			  uint64_t addr, uint64_t key, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct fi_rma_iov riov = { addr, ntx_iov_len(iov, count), key };

	return ntx_rma_start(ep, NTX_OP_WRITE, iov, count, &riov, 1, dest, 0,
			     context, ntx_fep_tx_flags(fep) & NTX_RMA_FLAGS, false);
}

static ssize_t ntx_writemsg(struct fid_ep *fep, const struct fi_msg_rma *msg,
			    uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return ntx_rma_start(ntx_ep_of(fep), NTX_OP_WRITE, msg->msg_iov,
			     msg->iov_count, msg->rma_iov, msg->rma_iov_count,
			     msg->addr, msg->data, msg->context, flags, false);
}

static ssize_t ntx_inject_write(struct fid_ep *fep, const void *buf,
				size_t len, fi_addr_t dest, uint64_t addr,
				uint64_t key)
{
	struct iovec iov = { (void *)buf, len };
	struct fi_rma_iov riov = { addr, len, key };

	return ntx_rma_start(ntx_ep_of(fep), NTX_OP_WRITE, &iov, 1, &riov, 1,
			     dest, 0, NULL, FI_INJECT, true);
}

static ssize_t ntx_writedata(struct fid_ep *fep, const void *buf, size_t len,
			     void *desc, uint64_t data, fi_addr_t dest,
			     uint64_t addr, uint64_t key, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct iovec iov = { (void *)buf, len };
	struct fi_rma_iov riov = { addr, len, key };

	return ntx_rma_start(ep, NTX_OP_WRITE, &iov, 1, &riov, 1, dest, data,
			     context,
			     (ntx_fep_tx_flags(fep) & NTX_RMA_FLAGS) | FI_REMOTE_CQ_DATA,
			     false);
}

static ssize_t ntx_inject_writedata(struct fid_ep *fep, const void *buf,
				    size_t len, uint64_t data,
				    fi_addr_t dest, uint64_t addr,
				    uint64_t key)
{
	struct iovec iov = { (void *)buf, len };
	struct fi_rma_iov riov = { addr, len, key };

	return ntx_rma_start(ntx_ep_of(fep), NTX_OP_WRITE, &iov, 1, &riov, 1,
			     dest, data, NULL, FI_INJECT | FI_REMOTE_CQ_DATA,
			     true);
}

struct fi_ops_rma ntx_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.read = ntx_read,
	.readv = ntx_readv,
	.readmsg = ntx_readmsg,
	.write = ntx_write,
	.writev = ntx_writev,
	.writemsg = ntx_writemsg,
	.inject = ntx_inject_write,
	.writedata = ntx_writedata,
	.injectdata = ntx_inject_writedata,
};
