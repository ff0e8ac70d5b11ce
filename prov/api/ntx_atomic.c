/*
 * fi_atomic(3) entry points and the valid/query calls. Operands travel to
 * the target, whose progress engine runs the operation (ntx_atomic_ops.c)
 * after checking key, range, access and alignment.
 */
#include "config.h"

#include "ntx/ntx_atomic.h"
#include "ntx/ntx.h"

#define NTX_ATOMIC_FLAGS                                                    \
	(FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE |                   \
	 FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE | FI_MORE | FI_FENCE |  \
	 FI_COMMIT_COMPLETE | FI_TRIGGER)


static int ntx_atomic_valid(enum ntx_atomic_fn fn, enum fi_datatype dt,
			    enum fi_op op, size_t *count)
{
	size_t size = ntx_atomic_dt_size(dt);

	if (!size || !ntx_atomic_supported(fn, dt, op))
		return -FI_EOPNOTSUPP;
	if (count)
		*count = NTX_ATOMIC_MAX_BYTES / size;
	return 0;
}

/* fi_ioc arrays as byte iovecs; the element total in *elems. */
static int ntx_ioc_to_iov(const struct fi_ioc *ioc, size_t count, size_t size,
			  struct iovec *iov, size_t *elems)
{
	*elems = 0;
	if (count > NTX_MAX_IOV || (count && !ioc))
		return -FI_EINVAL;
	for (size_t i = 0; i < count; i++) {
		iov[i].iov_base = ioc[i].addr;
		iov[i].iov_len = ioc[i].count * size;
		*elems += ioc[i].count;
	}
	return 0;
}

/* One atomic request: operands (iov), compare values and results as byte
 * iovecs, one remote iovec per packet. */
struct ntx_atomic_args {
	enum ntx_atomic_fn fn;
	const struct fi_msg_atomic *msg;
	const struct fi_ioc *cmp;
	size_t cmp_count;
	struct fi_ioc *res;
	size_t res_count;
	uint64_t flags;
	bool silent;
};

static int ntx_atomic_fill(struct ntx_req *r, const struct ntx_atomic_args *a,
			   size_t size)
{
	const struct fi_msg_atomic *m = a->msg;
	size_t elems = 0, n, want = 0;

	for (size_t i = 0; i < m->rma_iov_count; i++) {
		if (!m->rma_iov[i].count ||
		    m->rma_iov[i].count * size > NTX_ATOMIC_MAX_BYTES)
			return -FI_EINVAL;
		r->riov[i].addr = m->rma_iov[i].addr;
		r->riov[i].len = m->rma_iov[i].count * size;
		r->riov[i].key = m->rma_iov[i].key;
		want += m->rma_iov[i].count;
	}
	r->riov_count = m->rma_iov_count;
	if (m->op != FI_ATOMIC_READ) {
		if (ntx_ioc_to_iov(m->msg_iov, m->iov_count, size, r->iov,
				   &elems) || elems != want)
			return -FI_EINVAL;
		r->iov_count = m->iov_count;
	}
	if (a->fn == NTX_AFN_COMPARE) {
		if (ntx_ioc_to_iov(a->cmp, a->cmp_count, size, r->ciov, &n) ||
		    n != want)
			return -FI_EINVAL;
		r->ciov_count = a->cmp_count;
	}
	if (a->fn != NTX_AFN_BASE) {
		if (ntx_ioc_to_iov(a->res, a->res_count, size, r->resiov, &n) ||
		    n != want)
			return -FI_EINVAL;
		r->resiov_count = a->res_count;
	}
	r->len = want * size;
	return 0;
}

/* An operation, counts and flags that ntx offers: 0 or -FI_E*. */
static int ntx_atomic_check_args(const struct ntx_ep *ep,
				 const struct ntx_atomic_args *a)
{
	const struct fi_msg_atomic *m = a->msg;

	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (ntx_atomic_valid(a->fn, m->datatype, m->op, NULL)) {
		NTX_WARN(FI_LOG_EP_DATA, "atomic op %d on datatype %d is not "
			 "supported\n", m->op, m->datatype);
		return -FI_EOPNOTSUPP;
	}
	if (!m->rma_iov || !m->rma_iov_count ||
	    m->rma_iov_count > NTX_MAX_IOV || (a->flags & ~NTX_ATOMIC_FLAGS) ||
	    ((a->flags & FI_INJECT) && a->fn != NTX_AFN_BASE)) {
		NTX_WARN(FI_LOG_EP_DATA, "atomic: bad iov counts or flags\n");
		return -FI_EINVAL;
	}
	return 0;
}

/* FI_INJECT: the caller may reuse its operands as soon as we return, so
 * they move into the request's bounce buffer. */
static int ntx_atomic_bounce(struct ntx_req *r)
{
	if (r->len > NTX_INJECT_MAX)
		return -FI_EMSGSIZE;
	if (ntx_req_bounce(r))
		return -FI_EAGAIN;
	ntx_iov_copy_from(r->bounce, r->iov, r->iov_count, r->len);
	r->iov[0].iov_base = r->bounce;
	r->iov[0].iov_len = r->len;
	r->iov_count = 1;
	return 0;
}

static ssize_t ntx_atomic_start(struct ntx_ep *ep,
				const struct ntx_atomic_args *a)
{
	const struct fi_msg_atomic *m = a->msg;
	size_t size = ntx_atomic_dt_size(m->datatype);
	struct ntx_req *r;
	ssize_t ret;

	ret = ntx_atomic_check_args(ep, a);
	if (ret)
		return ret;
	if (a->flags & FI_TRIGGER)
		return ntx_trig_atomic(ep, a->fn, m, a->cmp, a->cmp_count,
				       a->res, a->res_count, a->flags);
	ntx_ep_lock(ep);
	r = ntx_rma_req_get(ep);
	if (!r) {
		ntx_ep_unlock(ep);
		return -FI_EAGAIN;
	}
	ret = ntx_atomic_fill(r, a, size);
	if (!ret && (a->flags & FI_INJECT))
		ret = ntx_atomic_bounce(r);
	if (ret) {
		if (ret == -FI_EINVAL)
			NTX_WARN(FI_LOG_EP_DATA, "atomic: counts do not match "
				 "or exceed fi_atomicvalid's\n");
		ntx_req_put(r);
		ntx_ep_unlock(ep);
		return ret;
	}
	r->addr = m->addr;
	r->context = m->context;
	r->flags = a->flags;
	r->silent = a->silent;
	r->rma_op = NTX_OP_ATOMIC;
	r->dt_size = size;
	r->dt_op = (uint16_t)(m->datatype << 8 | m->op);
	r->pkt_flags = a->fn == NTX_AFN_COMPARE ? NTX_PF_COMPARE
		       : a->fn == NTX_AFN_FETCH ? NTX_PF_FETCH : 0;
	r->cq_flags = FI_ATOMIC | (a->fn == NTX_AFN_BASE ? FI_WRITE : FI_READ);
	ret = ntx_rma_post(ep, r);
	if (ret)
		ntx_req_put(r);
	ntx_ep_unlock(ep);
	return ret;
}

ssize_t ntx_atomic_post(struct ntx_ep *ep, int fn,
			const struct fi_msg_atomic *m,
			const struct fi_ioc *cmp, size_t cmp_count,
			struct fi_ioc *res, size_t res_count, uint64_t flags)
{
	struct ntx_atomic_args a = {
		.fn = (enum ntx_atomic_fn)fn, .msg = m, .cmp = cmp,
		.cmp_count = cmp_count, .res = res, .res_count = res_count,
		.flags = flags,
	};

	return ntx_atomic_start(ep, &a);
}

/* The plain calls build the message the msg calls take. */
static ssize_t ntx_atomic_call(struct fid_ep *fep, enum ntx_atomic_fn fn,
			       const struct fi_ioc *iov, size_t count,
			       const struct fi_ioc *cmp, size_t cmp_count,
			       struct fi_ioc *res, size_t res_count,
			       fi_addr_t dest, uint64_t addr, uint64_t key,
			       enum fi_datatype dt, enum fi_op op,
			       void *context, uint64_t flags, bool silent)
{
	size_t elems = 0;
	struct fi_rma_ioc rma;
	struct fi_msg_atomic msg = {
		.msg_iov = iov,
		.iov_count = count,
		.addr = dest,
		.rma_iov = &rma,
		.rma_iov_count = 1,
		.datatype = dt,
		.op = op,
		.context = context,
	};
	struct ntx_atomic_args a = {
		.fn = fn, .msg = &msg, .cmp = cmp, .cmp_count = cmp_count,
		.res = res, .res_count = res_count, .flags = flags,
		.silent = silent,
	};

	/* FI_ATOMIC_READ ignores the operands: the result sets the count */
	if (op == FI_ATOMIC_READ && res)
		for (size_t i = 0; i < res_count; i++)
			elems += res[i].count;
	else if (iov)
		for (size_t i = 0; i < count && i < NTX_MAX_IOV; i++)
			elems += iov[i].count;
	rma.addr = addr;
	rma.count = elems;
	rma.key = key;
	return ntx_atomic_start(ntx_ep_of(fep), &a);
}

static uint64_t ntx_atomic_op_flags(struct fid_ep *fep)
{
	return ntx_fep_tx_flags(fep) & NTX_ATOMIC_FLAGS & ~FI_INJECT;
}

static ssize_t ntx_atomic_write(struct fid_ep *fep, const void *buf,
				size_t count, void *desc, fi_addr_t dest,
				uint64_t addr, uint64_t key,
				enum fi_datatype dt, enum fi_op op,
				void *context)
{
	struct fi_ioc ioc = { (void *)buf, count };

	return ntx_atomic_call(fep, NTX_AFN_BASE, &ioc, 1, NULL, 0, NULL, 0,
			       dest, addr, key, dt, op, context,
			       ntx_atomic_op_flags(fep), false);
}

static ssize_t ntx_atomic_writev(struct fid_ep *fep, const struct fi_ioc *iov,
				 void **desc, size_t count, fi_addr_t dest,
				 uint64_t addr, uint64_t key,
				 enum fi_datatype dt, enum fi_op op,
				 void *context)
{
	return ntx_atomic_call(fep, NTX_AFN_BASE, iov, count, NULL, 0, NULL, 0,
			       dest, addr, key, dt, op, context,
			       ntx_atomic_op_flags(fep), false);
}

static ssize_t ntx_atomic_writemsg(struct fid_ep *fep,
				   const struct fi_msg_atomic *msg,
				   uint64_t flags)
{
	struct ntx_atomic_args a = { .fn = NTX_AFN_BASE, .msg = msg,
				     .flags = flags };

	if (!msg)
		return -FI_EINVAL;
	return ntx_atomic_start(ntx_ep_of(fep), &a);
}

static ssize_t ntx_atomic_inject(struct fid_ep *fep, const void *buf,
				 size_t count, fi_addr_t dest, uint64_t addr,
				 uint64_t key, enum fi_datatype dt,
				 enum fi_op op)
{
	struct fi_ioc ioc = { (void *)buf, count };

	return ntx_atomic_call(fep, NTX_AFN_BASE, &ioc, 1, NULL, 0, NULL, 0,
			       dest, addr, key, dt, op, NULL, FI_INJECT, true);
}

static ssize_t ntx_atomic_readwrite(struct fid_ep *fep, const void *buf,
				    size_t count, void *desc, void *result,
				    void *result_desc, fi_addr_t dest,
				    uint64_t addr, uint64_t key,
				    enum fi_datatype dt, enum fi_op op,
				    void *context)
{
	struct fi_ioc ioc = { (void *)buf, count }, res = { result, count };

	return ntx_atomic_call(fep, NTX_AFN_FETCH, &ioc, 1, NULL, 0, &res, 1,
			       dest, addr, key, dt, op, context,
			       ntx_atomic_op_flags(fep), false);
}

static ssize_t ntx_atomic_readwritev(struct fid_ep *fep,
				     const struct fi_ioc *iov, void **desc,
				     size_t count, struct fi_ioc *resultv,
				     void **result_desc, size_t result_count,
				     fi_addr_t dest, uint64_t addr,
				     uint64_t key, enum fi_datatype dt,
				     enum fi_op op, void *context)
{
	return ntx_atomic_call(fep, NTX_AFN_FETCH, iov, count, NULL, 0,
			       resultv, result_count, dest, addr, key, dt, op,
			       context, ntx_atomic_op_flags(fep), false);
}

static ssize_t ntx_atomic_readwritemsg(struct fid_ep *fep,
				       const struct fi_msg_atomic *msg,
				       struct fi_ioc *resultv,
				       void **result_desc,
				       size_t result_count, uint64_t flags)
{
	struct ntx_atomic_args a = { .fn = NTX_AFN_FETCH, .msg = msg,
				     .res = resultv,
				     .res_count = result_count,
				     .flags = flags };

	if (!msg)
		return -FI_EINVAL;
	return ntx_atomic_start(ntx_ep_of(fep), &a);
}

static ssize_t ntx_atomic_compwrite(struct fid_ep *fep, const void *buf,
				    size_t count, void *desc,
				    const void *compare, void *compare_desc,
				    void *result, void *result_desc,
				    fi_addr_t dest, uint64_t addr,
				    uint64_t key, enum fi_datatype dt,
				    enum fi_op op, void *context)
{
	struct fi_ioc ioc = { (void *)buf, count };
	struct fi_ioc cmp = { (void *)compare, count }, res = { result, count };

	return ntx_atomic_call(fep, NTX_AFN_COMPARE, &ioc, 1, &cmp, 1, &res, 1,
			       dest, addr, key, dt, op, context,
			       ntx_atomic_op_flags(fep), false);
}

static ssize_t ntx_atomic_compwritev(struct fid_ep *fep,
				     const struct fi_ioc *iov, void **desc,
				     size_t count,
				     const struct fi_ioc *comparev,
				     void **compare_desc,
				     size_t compare_count,
				     struct fi_ioc *resultv,
				     void **result_desc, size_t result_count,
				     fi_addr_t dest, uint64_t addr,
				     uint64_t key, enum fi_datatype dt,
				     enum fi_op op, void *context)
{
	return ntx_atomic_call(fep, NTX_AFN_COMPARE, iov, count, comparev,
			       compare_count, resultv, result_count, dest,
			       addr, key, dt, op, context,
			       ntx_atomic_op_flags(fep), false);
}

static ssize_t ntx_atomic_compwritemsg(struct fid_ep *fep,
				       const struct fi_msg_atomic *msg,
				       const struct fi_ioc *comparev,
				       void **compare_desc,
				       size_t compare_count,
				       struct fi_ioc *resultv,
				       void **result_desc,
				       size_t result_count, uint64_t flags)
{
	struct ntx_atomic_args a = { .fn = NTX_AFN_COMPARE, .msg = msg,
				     .cmp = comparev,
				     .cmp_count = compare_count,
				     .res = resultv,
				     .res_count = result_count,
				     .flags = flags };

	if (!msg)
		return -FI_EINVAL;
	return ntx_atomic_start(ntx_ep_of(fep), &a);
}

static int ntx_atomic_writevalid(struct fid_ep *fep, enum fi_datatype dt,
				 enum fi_op op, size_t *count)
{
	return ntx_atomic_valid(NTX_AFN_BASE, dt, op, count);
}

static int ntx_atomic_readwritevalid(struct fid_ep *fep, enum fi_datatype dt,
				     enum fi_op op, size_t *count)
{
	return ntx_atomic_valid(NTX_AFN_FETCH, dt, op, count);
}

static int ntx_atomic_compwritevalid(struct fid_ep *fep, enum fi_datatype dt,
				     enum fi_op op, size_t *count)
{
	return ntx_atomic_valid(NTX_AFN_COMPARE, dt, op, count);
}

int ntx_query_atomic(struct fid_domain *domain, enum fi_datatype dt,
		     enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags)
{
	enum ntx_atomic_fn fn = NTX_AFN_BASE;
	size_t count;
	int ret;

	if (!attr || (flags & ~(FI_FETCH_ATOMIC | FI_COMPARE_ATOMIC)) ||
	    ((flags & FI_FETCH_ATOMIC) && (flags & FI_COMPARE_ATOMIC)))
		return -FI_EINVAL;
	if (flags & FI_FETCH_ATOMIC)
		fn = NTX_AFN_FETCH;
	else if (flags & FI_COMPARE_ATOMIC)
		fn = NTX_AFN_COMPARE;
	ret = ntx_atomic_valid(fn, dt, op, &count);
	if (ret)
		return ret;
	attr->size = ntx_atomic_dt_size(dt);
	attr->count = count;
	return 0;
}

struct fi_ops_atomic ntx_atomic_ops = {
	.size = sizeof(struct fi_ops_atomic),
	.write = ntx_atomic_write,
	.writev = ntx_atomic_writev,
	.writemsg = ntx_atomic_writemsg,
	.inject = ntx_atomic_inject,
	.readwrite = ntx_atomic_readwrite,
	.readwritev = ntx_atomic_readwritev,
	.readwritemsg = ntx_atomic_readwritemsg,
	.compwrite = ntx_atomic_compwrite,
	.compwritev = ntx_atomic_compwritev,
	.compwritemsg = ntx_atomic_compwritemsg,
	.writevalid = ntx_atomic_writevalid,
	.readwritevalid = ntx_atomic_readwritevalid,
	.compwritevalid = ntx_atomic_compwritevalid,
};
