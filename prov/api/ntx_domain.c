/*
 * fid_domain: owns the engine lock, the MR key table and the list of
 * endpoints that progress polls.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_engine.h"

void ntx_domain_progress(struct ntx_domain *dom)
{
	struct ntx_list *it;

	if (dom->progress_busy)
		return;
	dom->progress_busy = true;
	ntx_list_foreach(&dom->eps, it)
		ntx_ep_progress(ntx_container_of(it, struct ntx_ep, dom_entry));
	dom->progress_busy = false;
}

static int ntx_domain_close(struct fid *fid)
{
	struct ntx_domain *dom = ntx_container_of(fid, struct ntx_domain,
						  dom.fid);

	if (atomic_load(&dom->ref)) {
		NTX_WARN(FI_LOG_DOMAIN, "domain still has open objects\n");
		return -FI_EBUSY;
	}
	pthread_mutex_destroy(&dom->lock);
	ntx_ref_put(&dom->fabric->ref);
	free(dom->mr_table);
	free(dom);
	return 0;
}

static int ntx_domain_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_domain *dom = ntx_container_of(fid, struct ntx_domain,
						  dom.fid);

	if (!bfid || bfid->fclass != FI_CLASS_EQ)
		return -FI_EINVAL;
	dom->eq = ntx_container_of(bfid, struct fid_eq, fid);
	return 0;
}

static struct fi_ops ntx_domain_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_domain_close,
	.bind = ntx_domain_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_domain ntx_domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = ntx_av_open,
	.cq_open = ntx_cq_open,
	.endpoint = ntx_ep_open,
	.scalable_ep = NTX_NOSYS,
	.cntr_open = ntx_cntr_open,
	.poll_open = NTX_NOSYS,
	.stx_ctx = NTX_NOSYS,
	.srx_ctx = NTX_NOSYS,
	.query_atomic = NTX_NOSYS,
	.query_collective = NTX_NOSYS,
	.endpoint2 = NTX_NOSYS,
};

static struct fi_ops_mr ntx_domain_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = ntx_mr_reg,
	.regv = ntx_mr_regv,
	.regattr = ntx_mr_regattr,
};

int ntx_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **out, void *context)
{
	struct ntx_fabric *fab = ntx_container_of(fabric, struct ntx_fabric,
						  fab);
	struct ntx_domain *dom;

	if (!info || !info->domain_attr) {
		NTX_WARN(FI_LOG_DOMAIN, "fi_domain needs an fi_info\n");
		return -FI_EINVAL;
	}
	if (info->domain_attr->name &&
	    strcmp(info->domain_attr->name, NTX_DOMAIN_SHM) &&
	    strcmp(info->domain_attr->name, NTX_DOMAIN_TCP)) {
		NTX_WARN(FI_LOG_DOMAIN, "unknown domain %s\n",
			 info->domain_attr->name);
		return -FI_EINVAL;
	}
	if (info->domain_attr->data_progress == FI_PROGRESS_AUTO ||
	    info->domain_attr->control_progress == FI_PROGRESS_AUTO) {
		NTX_WARN(FI_LOG_DOMAIN, "FI_PROGRESS_AUTO is not available\n");
		return -FI_ENOSYS;
	}
	dom = calloc(1, sizeof(*dom));
	if (!dom)
		return -FI_ENOMEM;
	pthread_mutex_init(&dom->lock, NULL);
	ntx_list_init(&dom->eps);
	dom->fabric = fab;
	dom->threading = info->domain_attr->threading;
	dom->net = info->domain_attr->name &&
		   !strcmp(info->domain_attr->name, NTX_DOMAIN_TCP);
	dom->mr_mode = (uint64_t)info->domain_attr->mr_mode;
	dom->mr_gen_seed = (uint32_t)ntx_random64();
	dom->dom.fid.fclass = FI_CLASS_DOMAIN;
	dom->dom.fid.context = context;
	dom->dom.fid.ops = &ntx_domain_fi_ops;
	dom->dom.ops = &ntx_domain_ops;
	dom->dom.mr = &ntx_domain_mr_ops;
	ntx_ref_get(&fab->ref);
	*out = &dom->dom;
	return 0;
}
