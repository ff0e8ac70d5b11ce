/*
 * Memory registration. Provider keys are [random:32 | index:32]: the
 * index finds the MR in the domain's table, the upper half is drawn from
 * getrandom for every key, so no key tells anything about another and a
 * key of a closed MR misses its reused slot (DESIGN §6). Every rejected
 * remote access (unknown key, range, access) answers FI_EKEYREJECTED, so
 * the answer does not say which half of a guess was right.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

#define NTX_MR_ACCESS                                                      \
	(FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |        \
	 FI_REMOTE_WRITE | FI_COLLECTIVE)

static int ntx_mr_close(struct fid *fid)
{
	struct ntx_mr *mr = ntx_container_of(fid, struct ntx_mr, mr.fid);
	struct ntx_domain *dom = mr->domain;

	ntx_mutex_lock(dom, &dom->mr_lock);
	ntx_mr_table_del(dom, mr);
	ntx_mutex_unlock(dom, &dom->mr_lock);
	if (mr->cntr)
		ntx_ref_put(&mr->cntr->ref);
	ntx_ref_put(&dom->ref);
	free(mr->iov);
	free(mr);
	return 0;
}

/* FI_RMA_EVENT: the counter remote accesses bump. An endpoint of the
 * domain is taken and changes nothing: keys are the domain's, valid
 * through each of its endpoints (ntx never takes FI_MR_ENDPOINT, DESIGN
 * §6), and code written for that mode binds anyway. */
static int ntx_mr_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_mr *mr = ntx_container_of(fid, struct ntx_mr, mr.fid);
	struct ntx_domain *dom = mr->domain;
	struct ntx_cntr *c;
	int ret = 0;

	if (!bfid)
		return -FI_EINVAL;
	ntx_mutex_lock(dom, &dom->mr_lock);
	if (bfid->fclass == FI_CLASS_EP || bfid->fclass == FI_CLASS_SEP ||
	    bfid->fclass == FI_CLASS_TX_CTX || bfid->fclass == FI_CLASS_RX_CTX) {
		struct ntx_domain *ed =
			bfid->fclass == FI_CLASS_EP
				? ntx_container_of(bfid, struct ntx_ep,
						   ep.fid)->domain
				: ntx_sep_domain(bfid);

		if (flags || ed != dom)
			ret = -FI_EINVAL;
	} else if (bfid->fclass == FI_CLASS_CNTR) {
		c = ntx_container_of(bfid, struct ntx_cntr, cntr.fid);
		if (mr->cntr || c->domain != dom ||
		    !(flags & (FI_REMOTE_READ | FI_REMOTE_WRITE)) ||
		    (flags & ~(FI_REMOTE_READ | FI_REMOTE_WRITE))) {
			ret = -FI_EINVAL;
		} else {
			mr->cntr = c;
			mr->cntr_flags = flags;
			ntx_ref_get(&c->ref);
			/* any endpoint's traffic can hit the MR: waits on
			 * the counter progress the whole domain */
			c->scope.whole_domain = true;
			c->scope.only = NULL;
		}
	} else {
		ret = -FI_EINVAL;
	}
	ntx_mutex_unlock(dom, &dom->mr_lock);
	if (ret)
		NTX_WARN(FI_LOG_MR, "fi_mr_bind: bad object or flags\n");
	return ret;
}

static int ntx_mr_control(struct fid *fid, int command, void *arg)
{
	/* a region is live from fi_mr_reg on: enabling it changes nothing */
	return command == FI_ENABLE ? 0 : -FI_ENOSYS;
}

static struct fi_ops ntx_mr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_mr_close,
	.bind = ntx_mr_bind,
	.control = ntx_mr_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

int ntx_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
		   uint64_t flags, struct fid_mr **out)
{
	struct ntx_domain *dom;
	struct ntx_mr *mr;
	int ret;

	if (!fid || fid->fclass != FI_CLASS_DOMAIN || !attr || !out)
		return -FI_EINVAL;
	dom = ntx_container_of(fid, struct ntx_domain, dom.fid);
	if (attr->iov_count > NTX_MAX_IOV || (attr->iov_count && !attr->mr_iov) ||
	    (attr->access & ~NTX_MR_ACCESS) || (flags & ~FI_RMA_EVENT) ||
	    attr->iface != FI_HMEM_SYSTEM) {
		NTX_WARN(FI_LOG_MR, "fi_mr_reg: unsupported arguments\n");
		return -FI_EINVAL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -FI_ENOMEM;
	mr->iov = calloc(attr->iov_count ? attr->iov_count : 1,
			 sizeof(*mr->iov));
	if (!mr->iov) {
		free(mr);
		return -FI_ENOMEM;
	}
	memcpy(mr->iov, attr->mr_iov, attr->iov_count * sizeof(*mr->iov));
	mr->iov_count = attr->iov_count;
	mr->len = ntx_iov_len(mr->iov, mr->iov_count);
	mr->access = attr->access;
	mr->offset = attr->offset;
	mr->domain = dom;
	mr->mr.fid.fclass = FI_CLASS_MR;
	mr->mr.fid.context = attr->context;
	mr->mr.fid.ops = &ntx_mr_fi_ops;
	mr->mr.mem_desc = mr;

	ntx_mutex_lock(dom, &dom->mr_lock);
	if (!(dom->mr_mode & FI_MR_PROV_KEY) &&
	    ntx_mr_key_used(dom, attr->requested_key)) {
		ret = -FI_ENOKEY;
		goto unlock;
	}
	ret = ntx_mr_table_add(dom, mr);
	if (ret)
		goto unlock;
	if (dom->mr_mode & FI_MR_PROV_KEY)
		mr->mr.key = (ntx_random64() & ~0xffffffffull) | mr->index;
	else
		mr->mr.key = attr->requested_key;
	ntx_mutex_unlock(dom, &dom->mr_lock);
	ntx_ref_get(&dom->ref);
	*out = &mr->mr;
	return 0;
unlock:
	ntx_mutex_unlock(dom, &dom->mr_lock);
	free(mr->iov);
	free(mr);
	return ret;
}

int ntx_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		uint64_t access, uint64_t offset, uint64_t requested_key,
		uint64_t flags, struct fid_mr **mr, void *context)
{
	struct fi_mr_attr attr = {
		.mr_iov = iov,
		.iov_count = count,
		.access = access,
		.offset = offset,
		.requested_key = requested_key,
		.context = context,
	};

	return ntx_mr_regattr(fid, &attr, flags, mr);
}

int ntx_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
	       uint64_t offset, uint64_t requested_key, uint64_t flags,
	       struct fid_mr **mr, void *context)
{
	struct iovec iov = { (void *)buf, len };

	return ntx_mr_regv(fid, &iov, 1, access, offset, requested_key, flags,
			   mr, context);
}
