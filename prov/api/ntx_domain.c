/*
 * fid_domain: owns the domain lock, the MR key table and the list of
 * endpoints that progress polls.
 */
#include "config.h"
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>

#include "ntx/ntx.h"
#include "ntx/ntx_sha256.h"

static int ntx_domain_close(struct fid *fid)
{
	struct ntx_domain *dom = ntx_container_of(fid, struct ntx_domain,
						  dom.fid);

	if (atomic_load(&dom->ref)) {
		NTX_WARN(FI_LOG_DOMAIN, "domain still has open objects\n");
		return -FI_EBUSY;
	}
	ntx_auto_stop(dom);
	pthread_mutex_destroy(&dom->lock);
	pthread_mutex_destroy(&dom->mr_lock);
	pthread_mutex_destroy(&dom->trig_lock);
	ntx_ref_put(&dom->fabric->ref);
	ntx_idtab_fini(&dom->mr_table);
	ntx_wipe(&dom->auth, sizeof(dom->auth));
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
	.scalable_ep = ntx_sep_open,
	.cntr_open = ntx_cntr_open,
	.poll_open = ntx_poll_open,
	.stx_ctx = ntx_stx_open,
	.srx_ctx = ntx_srx_open,
	.query_atomic = ntx_query_atomic,
	.query_collective = ntx_no_query_collective,
	.endpoint2 = ntx_no_endpoint2,
};

static struct fi_ops_mr ntx_domain_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = ntx_mr_reg,
	.regv = ntx_mr_regv,
	.regattr = ntx_mr_regattr,
};

int ntx_domain_net(const char *name, const struct ntx_be_ops **ops)
{
	const struct ntx_be_desc *d;

	*ops = NULL;
	if (!name || !strcmp(name, NTX_DOMAIN_SHM))
		return 0;
	d = ntx_be_for_domain(name);
	if (!d)
		return -FI_EINVAL;
	*ops = d->ops;
	return 0;
}

/* The job key: fi_info's, else FI_NTX_AUTH_KEY (DESIGN §7). */
static int ntx_domain_auth_key(struct ntx_domain *dom,
			       const struct fi_domain_attr *attr)
{
	struct ntx_auth_key dflt;
	int ret;

	ntx_auth_key_default(&dflt);
	ret = ntx_auth_key_set(&dom->auth, attr->auth_key, attr->auth_key_size,
			       &dflt);
	ntx_wipe(&dflt, sizeof(dflt));
	return ret;
}

/* FI_MR_ENDPOINT, never offered, is dropped if an entry carries it:
 * keys are the domain's (DESIGN §6). */
static uint64_t ntx_domain_mr_mode(uint64_t mode)
{
	if (mode == NTX_MR_BASIC) /* the old enum: a whole mode */
		return FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	if (mode == NTX_MR_SCALABLE)
		return 0;
	return mode & ~(uint64_t)FI_MR_ENDPOINT;
}

/* The locks the threading mode lets the domain skip (DESIGN §3, locks);
 * a helper thread is one more thread, so it keeps them all. */
static void ntx_domain_pick_locks(struct ntx_domain *dom)
{
	dom->lockless = dom->threading == FI_THREAD_DOMAIN &&
			!dom->auto_progress;
	/* FI_THREAD_COMPLETION: everything sharing a CQ or counter is
	 * serialized by the application, and different ones share no
	 * endpoint; only domain-wide objects (MRs, AVs) keep their locks */
	dom->ep_lockless = dom->lockless ||
			   (dom->threading == FI_THREAD_COMPLETION &&
			    !dom->auto_progress);
}

/* FI_PROGRESS_AUTO, or a back end whose peers need our progress (udp's
 * retransmissions: a sender whose sends completed may stop calling in,
 * DESIGN §10): the domain gets the helper thread. */
static bool ntx_domain_wants_helper(const struct fi_domain_attr *attr,
				    const struct ntx_be_ops *net_ops)
{
	return attr->data_progress == FI_PROGRESS_AUTO ||
	       attr->control_progress == FI_PROGRESS_AUTO ||
	       (net_ops && net_ops->needs_progress);
}

int ntx_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **out, void *context)
{
	struct ntx_fabric *fab = ntx_container_of(fabric, struct ntx_fabric,
						  fab);
	const struct ntx_be_ops *net_ops;
	struct ntx_domain *dom;
	int ret;

	if (!info || !info->domain_attr) {
		NTX_WARN(FI_LOG_DOMAIN, "fi_domain needs an fi_info\n");
		return -FI_EINVAL;
	}
	if (ntx_domain_net(info->domain_attr->name, &net_ops)) {
		NTX_WARN(FI_LOG_DOMAIN, "unknown domain %s\n",
			 info->domain_attr->name);
		return -FI_EINVAL;
	}
	dom = calloc(1, sizeof(*dom));
	if (!dom)
		return -FI_ENOMEM;
	ret = ntx_domain_auth_key(dom, info->domain_attr);
	if (ret)
		goto free_dom;
	dom->net_ops = net_ops;
	snprintf(dom->name, sizeof(dom->name), "%s",
		 info->domain_attr->name ? info->domain_attr->name
					 : NTX_DOMAIN_SHM);
	pthread_mutex_init(&dom->lock, NULL);
	pthread_mutex_init(&dom->mr_lock, NULL);
	pthread_mutex_init(&dom->trig_lock, NULL);
	ntx_list_init(&dom->trig);
	ntx_list_init(&dom->eps);
	dom->fabric = fab;
	dom->threading = info->domain_attr->threading;
	dom->mr_mode = ntx_domain_mr_mode((uint64_t)info->domain_attr->mr_mode);
	dom->sockaddr = info->addr_format == FI_SOCKADDR_IN ||
			info->addr_format == FI_SOCKADDR;
	dom->dom.fid.fclass = FI_CLASS_DOMAIN;
	dom->dom.fid.context = context;
	dom->dom.fid.ops = &ntx_domain_fi_ops;
	dom->dom.ops = &ntx_domain_ops;
	dom->dom.mr = &ntx_domain_mr_ops;
	if (ntx_domain_wants_helper(info->domain_attr, net_ops)) {
		ret = ntx_auto_start(dom);
		if (ret)
			goto destroy_locks;
	}
	ntx_domain_pick_locks(dom);
	NTX_INFO(FI_LOG_DOMAIN, "domain %s: %s, %s progress, %s\n",
		 info->domain_attr->name ? info->domain_attr->name : "?",
		 fi_tostr(&dom->threading, FI_TYPE_THREADING),
		 dom->auto_progress ? "auto" : "manual",
		 dom->ep_lockless ? "no endpoint locks" : "endpoint locks");
	ntx_ref_get(&fab->ref);
	*out = &dom->dom;
	return 0;
destroy_locks:
	pthread_mutex_destroy(&dom->lock);
	pthread_mutex_destroy(&dom->mr_lock);
	pthread_mutex_destroy(&dom->trig_lock);
	ntx_wipe(&dom->auth, sizeof(dom->auth));
free_dom:
	free(dom);
	return ret;
}
