/*
 * fi_msg(3) and fi_tagged(3) entry points: argument checks, then a request
 * handed to the engine under the endpoint lock.
 */
#include "config.h"

#include "ntx/ntx.h"


#define NTX_SEND_FLAGS                                                      \
	(FI_COMPLETION | FI_INJECT | FI_REMOTE_CQ_DATA | FI_INJECT_COMPLETE | \
	 FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MORE | FI_FENCE)
#define NTX_RECV_FLAGS                                                      \
	(FI_COMPLETION | FI_MULTI_RECV | FI_MORE | FI_PEEK | FI_CLAIM |       \
	 FI_DISCARD)


ssize_t ntx_msg_post_send(struct ntx_ep *ep, const struct iovec *iov,
			  size_t count, fi_addr_t dest, uint64_t tag,
			  uint64_t data, void *context, uint64_t flags)
{
	size_t len;
	ssize_t ret;

	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if ((flags & FI_TRIGGER) &&
	    !(flags & ~(NTX_SEND_FLAGS | FI_TAGGED | FI_TRIGGER)))
		return ntx_trig_send(ep, iov, count, dest, tag, data, context,
				     flags);
	if (count > NTX_MAX_IOV || (count && !iov) || (flags & ~(NTX_SEND_FLAGS | FI_TAGGED))) {
		NTX_WARN(FI_LOG_EP_DATA, "send: bad iov count or flags\n");
		return -FI_EINVAL;
	}
	len = ntx_iov_len(iov, count);
	if ((flags & FI_INJECT) && len > NTX_INJECT_MAX)
		return -FI_EMSGSIZE;
	ntx_ep_lock(ep);
	if (count <= 1 && len <= NTX_INLINE_MAX && !(flags & FI_INJECT)) {
		ret = ntx_proto_send_small(ep, count ? iov[0].iov_base : NULL,
					   len, dest, tag, data, context,
					   flags, false, false);
		if (ret <= 0) {
			ntx_ep_unlock(ep);
			return ret;
		}
	}
	if (ep->tx_outstanding >= ep->tx_limit) {
		ntx_ep_progress(ep);
		if (ep->tx_outstanding >= ep->tx_limit) {
			ntx_ep_unlock(ep);
			return -FI_EAGAIN;
		}
	}
	ret = ntx_proto_post_send(ep, iov, count, len, dest, tag, data,
				  context, flags);
	ntx_ep_unlock(ep);
	return ret;
}

/* The flags of a send without a request (inline or eager): FI_INJECT
 * (and any flag ntx_msg_post_send refuses) goes its way. */
static inline bool ntx_send_flags_ok(uint64_t flags)
{
	return !(flags & ~((NTX_SEND_FLAGS | FI_TAGGED) & ~FI_INJECT));
}

/* The small sends' paths: one whole test of the arguments. */
static inline bool ntx_send_small_ok(size_t len, uint64_t flags)
{
	return len <= NTX_INLINE_MAX && ntx_send_flags_ok(flags);
}

/* ntx_send_one where the endpoint may not send at once (locks, not
 * enabled, connection management) or the inline send did not take it:
 * the inline send under the endpoint's lock where that may still apply;
 * a larger message of at most NTX_INJECT_MAX bytes from an endpoint that
 * may send at once, one eager packet without a request
 * (ntx_proto_send_eager: Open MPI's 64-byte rate 0.77 -> 0.83 of vader's
 * in this machine's slow mode); else the general way, which queues the
 * message or reports why not. */
static __attribute__((noinline)) ssize_t
ntx_send_one_any(struct ntx_ep *ep, const void *buf, size_t len,
		 fi_addr_t dest, uint64_t tag, uint64_t data, void *context,
		 uint64_t flags)
{
	struct iovec iov = { (void *)buf, len };
	ssize_t ret;

	if (!ep->send_fast && ep->enabled && ntx_send_small_ok(len, flags)) {
		ntx_ep_lock(ep);
		ret = ntx_proto_send_small(ep, buf, len, dest, tag, data,
					   context, flags, false, false);
		ntx_ep_unlock(ep);
		if (ret <= 0)
			return ret;
	}
	/* (ntx_proto_send_eager tests the size against NTX_INJECT_MAX) */
	if (ep->send_fast && len > NTX_INLINE_MAX && ntx_send_flags_ok(flags)) {
		ret = ntx_proto_send_eager(ep, buf, len, dest, tag, data,
					   context, flags, true);
		if (ret <= 0)
			return ret;
	}
	return ntx_msg_post_send(ep, &iov, 1, dest, tag, data, context, flags);
}

/* fi_send, fi_senddata and their tagged forms: a small message to a
 * connected peer from an endpoint that may send at once (ep->send_fast)
 * goes straight to the engine's inline send (no iovec, no request, no
 * lock); anything else is ntx_send_one_any. */
static inline __attribute__((always_inline)) ssize_t
ntx_send_one(struct ntx_ep *ep, const void *buf, size_t len, fi_addr_t dest,
	     uint64_t tag, uint64_t data, void *context, uint64_t flags)
{
	ssize_t ret;

	if (ep->send_fast && ntx_send_small_ok(len, flags)) {
		ret = ntx_proto_send_small(ep, buf, len, dest, tag, data,
					   context, flags, false, true);
		if (ret <= 0)
			return ret;
	}
	return ntx_send_one_any(ep, buf, len, dest, tag, data, context, flags);
}

static inline __attribute__((always_inline)) ssize_t
ntx_post_recv(struct ntx_ep *ep, const struct iovec *iov, size_t count,
	      fi_addr_t src, uint64_t tag, uint64_t ignore, void *context,
	      uint64_t flags)
{
	ssize_t ret;

	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (count > NTX_MAX_IOV || (count && !iov) ||
	    (flags & ~(NTX_RECV_FLAGS | FI_TAGGED)) ||
	    ((flags & FI_MULTI_RECV) && (count != 1 || (flags & FI_TAGGED)))) {
		NTX_WARN(FI_LOG_EP_DATA, "recv: bad iov count or flags\n");
		return -FI_EINVAL;
	}
	if (!(ep->caps & FI_DIRECTED_RECV))
		src = FI_ADDR_UNSPEC;
	ntx_ep_lock(ep);
	ret = ntx_proto_post_recv(ep, iov, count, src, tag, ignore, context,
				  flags);
	ntx_ep_unlock(ep);
	return ret;
}

/* ---- fi_msg ------------------------------------------------------------------- */

static ssize_t ntx_recv(struct fid_ep *fep, void *buf, size_t len, void *desc,
			fi_addr_t src, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct iovec iov = { buf, len };

	return ntx_post_recv(ep, &iov, 1, src, 0, 0, context,
			     ntx_fep_rx_flags(fep));
}

static ssize_t ntx_recvv(struct fid_ep *fep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t src,
			 void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_post_recv(ep, iov, count, src, 0, 0, context,
			     ntx_fep_rx_flags(fep));
}

static ssize_t ntx_recvmsg(struct fid_ep *fep, const struct fi_msg *msg,
			   uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return ntx_post_recv(ntx_ep_of(fep), msg->msg_iov, msg->iov_count,
			     msg->addr, 0, 0, msg->context,
			     flags & ~(FI_PEEK | FI_CLAIM | FI_DISCARD));
}

static ssize_t ntx_send(struct fid_ep *fep, const void *buf, size_t len,
			void *desc, fi_addr_t dest, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_send_one(ep, buf, len, dest, 0, 0, context,
			    ntx_fep_tx_flags(fep) & ~FI_INJECT);
}

static ssize_t ntx_sendv(struct fid_ep *fep, const struct iovec *iov,
			 void **desc, size_t count, fi_addr_t dest,
			 void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_msg_post_send(ep, iov, count, dest, 0, 0, context,
				 ntx_fep_tx_flags(fep) & ~FI_INJECT);
}

static ssize_t ntx_sendmsg(struct fid_ep *fep, const struct fi_msg *msg,
			   uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return ntx_msg_post_send(ntx_ep_of(fep), msg->msg_iov, msg->iov_count,
				 msg->addr, 0, msg->data, msg->context, flags);
}

static ssize_t ntx_senddata(struct fid_ep *fep, const void *buf, size_t len,
			    void *desc, uint64_t data, fi_addr_t dest,
			    void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_send_one(ep, buf, len, dest, 0, data, context,
			    (ntx_fep_tx_flags(fep) & ~FI_INJECT) | FI_REMOTE_CQ_DATA);
}

/* ntx_do_inject where the endpoint may not send at once or the inline
 * send did not take it: the checks, then the inline send under the
 * endpoint's lock where that may still apply, else ntx_proto_inject. */
static __attribute__((noinline)) ssize_t
ntx_inject_any(struct ntx_ep *ep, const void *buf, size_t len,
	       fi_addr_t dest, uint64_t tag, uint64_t data, uint64_t flags)
{
	ssize_t ret = 1;

	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (len > NTX_INJECT_MAX)
		return -FI_EMSGSIZE;
	if (len && !buf)
		return -FI_EINVAL;
	ntx_ep_lock(ep);
	if (!ep->send_fast && len <= NTX_INLINE_MAX)
		ret = ntx_proto_send_small(ep, buf, len, dest, tag, data, NULL,
					   flags, true, false);
	if (ret > 0)
		ret = ntx_proto_inject(ep, buf, len, dest, tag, data, flags);
	ntx_ep_unlock(ep);
	return ret;
}

/* fi_inject and its forms: a small message to a connected peer from an
 * endpoint that may send at once takes the engine's inline send, the
 * rest ntx_inject_any. Inline into each. */
static inline __attribute__((always_inline)) ssize_t
ntx_do_inject(struct fid_ep *fep, const void *buf, size_t len,
	      fi_addr_t dest, uint64_t tag, uint64_t data, uint64_t flags)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	ssize_t ret;

	if (ep->send_fast && len <= NTX_INLINE_MAX && (buf || !len)) {
		ret = ntx_proto_send_small(ep, buf, len, dest, tag, data, NULL,
					   flags, true, true);
		if (ret <= 0)
			return ret;
	}
	return ntx_inject_any(ep, buf, len, dest, tag, data, flags);
}

static ssize_t ntx_inject(struct fid_ep *fep, const void *buf, size_t len,
			  fi_addr_t dest)
{
	return ntx_do_inject(fep, buf, len, dest, 0, 0, 0);
}

static ssize_t ntx_injectdata(struct fid_ep *fep, const void *buf, size_t len,
			      uint64_t data, fi_addr_t dest)
{
	return ntx_do_inject(fep, buf, len, dest, 0, data, FI_REMOTE_CQ_DATA);
}

struct fi_ops_msg ntx_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = ntx_recv,
	.recvv = ntx_recvv,
	.recvmsg = ntx_recvmsg,
	.send = ntx_send,
	.sendv = ntx_sendv,
	.sendmsg = ntx_sendmsg,
	.inject = ntx_inject,
	.senddata = ntx_senddata,
	.injectdata = ntx_injectdata,
};

/* ---- fi_tagged ------------------------------------------------------------ */

/* fi_trecv in every case. */
static __attribute__((noinline)) ssize_t
ntx_trecv_any(struct fid_ep *fep, void *buf, size_t len, void *desc,
	      fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	struct iovec iov = { buf, len };

	return ntx_post_recv(ep, &iov, 1, src, tag, ignore, context,
			     (ntx_fep_rx_flags(fep) & ~FI_MULTI_RECV) | FI_TAGGED);
}

/* fi_trecv with a tagged message waiting unexpected: taken at once when
 * it is the one (ntx_proto_recv_waiting), else ntx_trecv_any. */
static __attribute__((noinline)) ssize_t
ntx_trecv_waiting(struct fid_ep *fep, void *buf, size_t len, void *desc,
		  fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	if (!ntx_proto_recv_waiting(ep, buf, len,
				    ep->caps & FI_DIRECTED_RECV
					    ? src : FI_ADDR_UNSPEC,
				    tag, ignore, context,
				    ntx_fep_rx_flags(fep) | FI_TAGGED))
		return 0;
	return ntx_trecv_any(fep, buf, len, desc, src, tag, ignore, context);
}

/* fi_trecv's case of a receive that becomes a request (ntx_trecv's
 * tests passed but the lean ring's): filled and queued as
 * ntx_proto_post_recv would, from the registers; with no request at hand,
 * ntx_trecv_any. */
static __attribute__((noinline)) ssize_t
ntx_trecv_req(struct fid_ep *fep, void *buf, size_t len, void *desc,
	      fi_addr_t src, uint64_t tag, uint64_t ignore, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	uint64_t flags = (ntx_fep_rx_flags(fep) & ~FI_MULTI_RECV) | FI_TAGGED;
	struct ntx_req *r;

	if (!ep->req_free)
		return ntx_trecv_any(fep, buf, len, desc, src, tag, ignore,
				     context);
	if (!(ep->caps & FI_DIRECTED_RECV))
		src = FI_ADDR_UNSPEC;
	r = ntx_req_pop(ep);
	ntx_req_init_head(ep, r, NTX_REQ_RECV);
	r->iov[0].iov_base = buf;
	r->iov[0].iov_len = len;
	ntx_req_set_recv(ep, r, 1, len, src, tag, ignore, context, flags);
	ntx_tme_post(&ep->tme, r);
	return 0;
}

/* fi_trecv, the message path's case (every MPI_Irecv through the MTL) in
 * a function without a frame: an endpoint that may post at once
 * (ntx_ep_set_paths), valid op flags, no tagged message waiting
 * unexpected, no tagged receive that is a request, a completion that is
 * a plain CQ entry and room in the lean ring: the arguments go to the
 * ring (struct ntx_tme; seven stores instead of a request's twenty and
 * its links). A receive that has to be a request is ntx_trecv_req, one with
 * a tagged message waiting ntx_trecv_waiting, anything else
 * ntx_trecv_any, with the same arguments. */
static ssize_t ntx_trecv(struct fid_ep *fep, void *buf, size_t len, void *desc,
			 fi_addr_t src, uint64_t tag, uint64_t ignore,
			 void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);
	uint64_t flags = (ntx_fep_rx_flags(fep) & ~FI_MULTI_RECV) | FI_TAGGED;
	struct ntx_tme *tme = &ep->tme;
	struct ntx_lean_recv *l;

	if (!ep->post_fast || (flags & ~(NTX_RECV_FLAGS | FI_TAGGED)) ||
	    (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD)))
		return ntx_trecv_any(fep, buf, len, desc, src, tag, ignore,
				     context);
	if (!ntx_list_empty(&tme->unexp[1]))
		return ntx_trecv_waiting(fep, buf, len, desc, src, tag, ignore,
					 context);
	if (!ep->rx_fast || !ntx_list_empty(&tme->posted[1]) || tme->nexact ||
	    tme->lean_tail - tme->lean_head >= NTX_TME_LEAN ||
	    !ntx_comp_wanted(ep->rx_selective, flags))
		return ntx_trecv_req(fep, buf, len, desc, src, tag, ignore,
				     context);
	l = &tme->lean[tme->lean_tail++ & (NTX_TME_LEAN - 1)];
	l->buf = buf;
	l->len = len;
	l->src = ep->caps & FI_DIRECTED_RECV ? src : FI_ADDR_UNSPEC;
	l->tag = tag;
	l->ignore = ignore;
	l->context = context;
	l->flags = flags;
	return 0;
}

static ssize_t ntx_trecvv(struct fid_ep *fep, const struct iovec *iov,
			  void **desc, size_t count, fi_addr_t src,
			  uint64_t tag, uint64_t ignore, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_post_recv(ep, iov, count, src, tag, ignore, context,
			     (ntx_fep_rx_flags(fep) & ~FI_MULTI_RECV) | FI_TAGGED);
}

static ssize_t ntx_trecvmsg(struct fid_ep *fep, const struct fi_msg_tagged *msg,
			    uint64_t flags)
{
	if (!msg || (flags & FI_MULTI_RECV))
		return -FI_EINVAL;
	return ntx_post_recv(ntx_ep_of(fep), msg->msg_iov, msg->iov_count,
			     msg->addr, msg->tag, msg->ignore, msg->context,
			     flags | FI_TAGGED);
}

static ssize_t ntx_tsend(struct fid_ep *fep, const void *buf, size_t len,
			 void *desc, fi_addr_t dest, uint64_t tag,
			 void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_send_one(ep, buf, len, dest, tag, 0, context,
			    (ntx_fep_tx_flags(fep) & ~FI_INJECT) | FI_TAGGED);
}

static ssize_t ntx_tsendv(struct fid_ep *fep, const struct iovec *iov,
			  void **desc, size_t count, fi_addr_t dest,
			  uint64_t tag, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_msg_post_send(ep, iov, count, dest, tag, 0, context,
				 (ntx_fep_tx_flags(fep) & ~FI_INJECT) | FI_TAGGED);
}

static ssize_t ntx_tsendmsg(struct fid_ep *fep, const struct fi_msg_tagged *msg,
			    uint64_t flags)
{
	if (!msg)
		return -FI_EINVAL;
	return ntx_msg_post_send(ntx_ep_of(fep), msg->msg_iov, msg->iov_count,
				 msg->addr, msg->tag, msg->data, msg->context,
				 flags | FI_TAGGED);
}

static ssize_t ntx_tsenddata(struct fid_ep *fep, const void *buf, size_t len,
			     void *desc, uint64_t data, fi_addr_t dest,
			     uint64_t tag, void *context)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ntx_send_one(ep, buf, len, dest, tag, data, context,
			    (ntx_fep_tx_flags(fep) & ~FI_INJECT) | FI_TAGGED |
				    FI_REMOTE_CQ_DATA);
}

static ssize_t ntx_tinject(struct fid_ep *fep, const void *buf, size_t len,
			   fi_addr_t dest, uint64_t tag)
{
	return ntx_do_inject(fep, buf, len, dest, tag, 0, FI_TAGGED);
}

static ssize_t ntx_tinjectdata(struct fid_ep *fep, const void *buf, size_t len,
			       uint64_t data, fi_addr_t dest, uint64_t tag)
{
	return ntx_do_inject(fep, buf, len, dest, tag, data,
			     FI_TAGGED | FI_REMOTE_CQ_DATA);
}

struct fi_ops_tagged ntx_tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = ntx_trecv,
	.recvv = ntx_trecvv,
	.recvmsg = ntx_trecvmsg,
	.send = ntx_tsend,
	.sendv = ntx_tsendv,
	.sendmsg = ntx_tsendmsg,
	.inject = ntx_tinject,
	.senddata = ntx_tsenddata,
	.injectdata = ntx_tinjectdata,
};
