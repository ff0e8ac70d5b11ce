/*
 * FI_MSG_PREFIX mode (fi_getinfo(3)): offered to an application that
 * says it supports it. Each send and receive buffer then starts with
 * NTX_MSG_PREFIX bytes that ntx leaves alone (it needs no header space
 * of its own); these entry points step over them and hand the rest to
 * the ordinary ones, and a receive's completion counts them in its
 * length (ntx_comp_rx adds ep->msg_prefix). Multi-receive buffers are
 * refused in this mode.
 */
#include "config.h"

#include "ntx/ntx.h"

/* The iovecs without the prefix: the first one must hold it whole. */
static int ntx_prefix_iov(const struct iovec *in, size_t count,
			  struct iovec *out)
{
	if (!count || !in || count > NTX_MAX_IOV ||
	    in[0].iov_len < NTX_MSG_PREFIX) {
		NTX_WARN(FI_LOG_EP_DATA, "FI_MSG_PREFIX: a buffer without "
			 "its %d-byte prefix\n", NTX_MSG_PREFIX);
		return -FI_EINVAL;
	}
	memcpy(out, in, count * sizeof(*in));
	out[0].iov_base = (uint8_t *)in[0].iov_base + NTX_MSG_PREFIX;
	out[0].iov_len -= NTX_MSG_PREFIX;
	return 0;
}

/* One buffer without its prefix; -FI_EINVAL when too short. */
static int ntx_prefix_buf(const void **buf, size_t *len)
{
	struct iovec in = { (void *)*buf, *len }, out;
	int ret = ntx_prefix_iov(&in, 1, &out);

	*buf = out.iov_base;
	*len = out.iov_len;
	return ret;
}

/* ---- fi_msg --------------------------------------------------------------- */

static ssize_t ntx_p_recv(struct fid_ep *fep, void *buf, size_t len,
			  void *desc, fi_addr_t src, void *context)
{
	const void *b = buf;

	if (ntx_prefix_buf(&b, &len))
		return -FI_EINVAL;
	return ntx_msg_ops.recv(fep, (void *)b, len, desc, src, context);
}

static ssize_t ntx_p_recvv(struct fid_ep *fep, const struct iovec *iov,
			   void **desc, size_t count, fi_addr_t src,
			   void *context)
{
	struct iovec v[NTX_MAX_IOV];

	if (ntx_prefix_iov(iov, count, v))
		return -FI_EINVAL;
	return ntx_msg_ops.recvv(fep, v, desc, count, src, context);
}

static ssize_t ntx_p_recvmsg(struct fid_ep *fep, const struct fi_msg *msg,
			     uint64_t flags)
{
	struct iovec v[NTX_MAX_IOV];
	struct fi_msg m;

	if (!msg || (flags & FI_MULTI_RECV) ||
	    ntx_prefix_iov(msg->msg_iov, msg->iov_count, v))
		return -FI_EINVAL;
	m = *msg;
	m.msg_iov = v;
	return ntx_msg_ops.recvmsg(fep, &m, flags);
}

static ssize_t ntx_p_send(struct fid_ep *fep, const void *buf, size_t len,
			  void *desc, fi_addr_t dest, void *context)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_msg_ops.send(fep, buf, len, desc, dest, context);
}

static ssize_t ntx_p_sendv(struct fid_ep *fep, const struct iovec *iov,
			   void **desc, size_t count, fi_addr_t dest,
			   void *context)
{
	struct iovec v[NTX_MAX_IOV];

	if (ntx_prefix_iov(iov, count, v))
		return -FI_EINVAL;
	return ntx_msg_ops.sendv(fep, v, desc, count, dest, context);
}

static ssize_t ntx_p_sendmsg(struct fid_ep *fep, const struct fi_msg *msg,
			     uint64_t flags)
{
	struct iovec v[NTX_MAX_IOV];
	struct fi_msg m;

	if (!msg || ntx_prefix_iov(msg->msg_iov, msg->iov_count, v))
		return -FI_EINVAL;
	m = *msg;
	m.msg_iov = v;
	return ntx_msg_ops.sendmsg(fep, &m, flags);
}

static ssize_t ntx_p_senddata(struct fid_ep *fep, const void *buf, size_t len,
			      void *desc, uint64_t data, fi_addr_t dest,
			      void *context)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_msg_ops.senddata(fep, buf, len, desc, data, dest, context);
}

static ssize_t ntx_p_inject(struct fid_ep *fep, const void *buf, size_t len,
			    fi_addr_t dest)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_msg_ops.inject(fep, buf, len, dest);
}

static ssize_t ntx_p_injectdata(struct fid_ep *fep, const void *buf,
				size_t len, uint64_t data, fi_addr_t dest)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_msg_ops.injectdata(fep, buf, len, data, dest);
}

struct fi_ops_msg ntx_msg_prefix_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = ntx_p_recv,
	.recvv = ntx_p_recvv,
	.recvmsg = ntx_p_recvmsg,
	.send = ntx_p_send,
	.sendv = ntx_p_sendv,
	.sendmsg = ntx_p_sendmsg,
	.inject = ntx_p_inject,
	.senddata = ntx_p_senddata,
	.injectdata = ntx_p_injectdata,
};

/* ---- fi_tagged ------------------------------------------------------------ */

static ssize_t ntx_p_trecv(struct fid_ep *fep, void *buf, size_t len,
			   void *desc, fi_addr_t src, uint64_t tag,
			   uint64_t ignore, void *context)
{
	const void *b = buf;

	if (ntx_prefix_buf(&b, &len))
		return -FI_EINVAL;
	return ntx_tagged_ops.recv(fep, (void *)b, len, desc, src, tag,
				   ignore, context);
}

static ssize_t ntx_p_trecvv(struct fid_ep *fep, const struct iovec *iov,
			    void **desc, size_t count, fi_addr_t src,
			    uint64_t tag, uint64_t ignore, void *context)
{
	struct iovec v[NTX_MAX_IOV];

	if (ntx_prefix_iov(iov, count, v))
		return -FI_EINVAL;
	return ntx_tagged_ops.recvv(fep, v, desc, count, src, tag, ignore,
				    context);
}

static ssize_t ntx_p_trecvmsg(struct fid_ep *fep,
			      const struct fi_msg_tagged *msg, uint64_t flags)
{
	struct iovec v[NTX_MAX_IOV];
	struct fi_msg_tagged m;

	if (!msg || ntx_prefix_iov(msg->msg_iov, msg->iov_count, v))
		return -FI_EINVAL;
	m = *msg;
	m.msg_iov = v;
	return ntx_tagged_ops.recvmsg(fep, &m, flags);
}

static ssize_t ntx_p_tsend(struct fid_ep *fep, const void *buf, size_t len,
			   void *desc, fi_addr_t dest, uint64_t tag,
			   void *context)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_tagged_ops.send(fep, buf, len, desc, dest, tag, context);
}

static ssize_t ntx_p_tsendv(struct fid_ep *fep, const struct iovec *iov,
			    void **desc, size_t count, fi_addr_t dest,
			    uint64_t tag, void *context)
{
	struct iovec v[NTX_MAX_IOV];

	if (ntx_prefix_iov(iov, count, v))
		return -FI_EINVAL;
	return ntx_tagged_ops.sendv(fep, v, desc, count, dest, tag, context);
}

static ssize_t ntx_p_tsendmsg(struct fid_ep *fep,
			      const struct fi_msg_tagged *msg, uint64_t flags)
{
	struct iovec v[NTX_MAX_IOV];
	struct fi_msg_tagged m;

	if (!msg || ntx_prefix_iov(msg->msg_iov, msg->iov_count, v))
		return -FI_EINVAL;
	m = *msg;
	m.msg_iov = v;
	return ntx_tagged_ops.sendmsg(fep, &m, flags);
}

static ssize_t ntx_p_tsenddata(struct fid_ep *fep, const void *buf,
			       size_t len, void *desc, uint64_t data,
			       fi_addr_t dest, uint64_t tag, void *context)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_tagged_ops.senddata(fep, buf, len, desc, data, dest, tag,
				       context);
}

static ssize_t ntx_p_tinject(struct fid_ep *fep, const void *buf, size_t len,
			     fi_addr_t dest, uint64_t tag)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_tagged_ops.inject(fep, buf, len, dest, tag);
}

static ssize_t ntx_p_tinjectdata(struct fid_ep *fep, const void *buf,
				 size_t len, uint64_t data, fi_addr_t dest,
				 uint64_t tag)
{
	if (ntx_prefix_buf(&buf, &len))
		return -FI_EINVAL;
	return ntx_tagged_ops.injectdata(fep, buf, len, data, dest, tag);
}

struct fi_ops_tagged ntx_tagged_prefix_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = ntx_p_trecv,
	.recvv = ntx_p_trecvv,
	.recvmsg = ntx_p_trecvmsg,
	.send = ntx_p_tsend,
	.sendv = ntx_p_tsendv,
	.sendmsg = ntx_p_tsendmsg,
	.inject = ntx_p_tinject,
	.senddata = ntx_p_tsenddata,
	.injectdata = ntx_p_tinjectdata,
};

/* An endpoint opened from an entry with FI_MSG_PREFIX uses these. */
void ntx_prefix_ep_init(struct ntx_ep *ep, const struct fi_info *info)
{
	uint64_t mode = info->mode |
			(info->tx_attr ? info->tx_attr->mode : 0) |
			(info->rx_attr ? info->rx_attr->mode : 0);

	if (!(mode & FI_MSG_PREFIX))
		return;
	ep->msg_prefix = NTX_MSG_PREFIX;
	ep->ep.msg = &ntx_msg_prefix_ops;
	ep->ep.tagged = &ntx_tagged_prefix_ops;
}
