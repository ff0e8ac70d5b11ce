/*
 * fid_domain: owns the engine lock, the MR key table and the list of
 * endpoints that progress polls.
 */
#include "config.h"
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>

#include "ntx/ntx_engine.h"
#include "ntx/ntx_sha256.h"

/* Domain lock held. */
void ntx_domain_poll(struct ntx_domain *dom)
{
	struct ntx_list *it;

	if (dom->progress_busy)
		return;
	dom->progress_busy = true;
	ntx_list_foreach(&dom->eps, it)
		ntx_ep_poll(ntx_container_of(it, struct ntx_ep, dom_entry));
	dom->progress_busy = false;
}

void ntx_domain_note_poll(struct ntx_domain *dom)
{
	if (dom->auto_progress) /* the helper stays away while we poll */
		atomic_store_explicit(&dom->app_poll_ns, ntx_now_ns(),
				      memory_order_relaxed);
}

/* Domain lock held. */
void ntx_domain_progress(struct ntx_domain *dom)
{
	ntx_domain_note_poll(dom);
	ntx_domain_poll(dom);
}

void ntx_domain_arm(struct ntx_domain *dom, bool arm)
{
	struct ntx_list *it;

	ntx_list_foreach(&dom->eps, it) {
		ntx_ep_arm(ntx_container_of(it, struct ntx_ep, dom_entry), arm);
	}
}

int ntx_domain_wait_fds(struct ntx_domain *dom, int *fds, int max)
{
	struct ntx_list *it;
	int n = 0;

	ntx_list_foreach(&dom->eps, it) {
		struct ntx_ep *ep = ntx_container_of(it, struct ntx_ep,
						     dom_entry);
		for (int i = 0; i < NTX_BE_MAX && n < max; i++)
			if (ep->be[i].ops)
				fds[n++] = ep->be[i].ops->wait_fd(ep->be[i].be);
	}
	return n;
}

int ntx_domain_wait_set(struct ntx_domain *dom, struct ntx_signal *sig,
			int *epfd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fds[64], n, ret = 0;

	ntx_domain_lock(dom);
	if (*epfd >= 0)
		goto unlock;
	if (dom->nwait_sets == 16 ||
	    (*epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		*epfd = -1;
		ret = -FI_ENOMEM;
		goto unlock;
	}
	ntx_signal_arm(sig);
	epoll_ctl(*epfd, EPOLL_CTL_ADD, sig->fd, &ev);
	n = ntx_domain_wait_fds(dom, fds, 64);
	for (int i = 0; i < n; i++)
		epoll_ctl(*epfd, EPOLL_CTL_ADD, fds[i], &ev);
	dom->wait_sets[dom->nwait_sets++] = *epfd;
unlock:
	ntx_domain_unlock(dom);
	return ret;
}

void ntx_domain_wait_set_add(struct ntx_domain *dom, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	for (int i = 0; i < dom->nwait_sets; i++)
		epoll_ctl(dom->wait_sets[i], EPOLL_CTL_ADD, fd, &ev);
}

void ntx_domain_wait_set_close(struct ntx_domain *dom, int epfd)
{
	if (epfd < 0)
		return;
	ntx_domain_lock(dom);
	for (int i = 0; i < dom->nwait_sets; i++)
		if (dom->wait_sets[i] == epfd)
			dom->wait_sets[i] = dom->wait_sets[--dom->nwait_sets];
	ntx_domain_unlock(dom);
	close(epfd);
}

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
	ntx_ref_put(&dom->fabric->ref);
	free(dom->mr_table);
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
	.scalable_ep = NTX_NOSYS,
	.cntr_open = ntx_cntr_open,
	.poll_open = NTX_NOSYS,
	.stx_ctx = NTX_NOSYS,
	.srx_ctx = NTX_NOSYS,
	.query_atomic = ntx_query_atomic,
	.query_collective = NTX_NOSYS,
	.endpoint2 = NTX_NOSYS,
};

static struct fi_ops_mr ntx_domain_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = ntx_mr_reg,
	.regv = ntx_mr_regv,
	.regattr = ntx_mr_regattr,
};

int ntx_domain_net(const char *name, const struct ntx_be_ops **ops)
{
	*ops = NULL;
	if (!name || !strcmp(name, NTX_DOMAIN_SHM))
		return 0;
	if (!strcmp(name, NTX_DOMAIN_TCP)) {
		*ops = &ntx_ntb_tcp_ops;
		return 0;
	}
#ifdef NTX_HAVE_VERBS
	{
		struct ntx_vb_devinfo d[16];
		int n = ntx_verbs_devices(d, 16);

		for (int i = 0; i < n; i++)
			if (!strcmp(name, d[i].name)) {
				*ops = &ntx_verbs_ops;
				return 0;
			}
	}
#endif
	return -FI_EINVAL;
}

int ntx_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **out, void *context)
{
	struct ntx_fabric *fab = ntx_container_of(fabric, struct ntx_fabric,
						  fab);
	const struct ntx_be_ops *net_ops;
	struct ntx_auth_key dflt;
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
	/* the job key: fi_info's, else FI_NTX_AUTH_KEY (DESIGN §7) */
	ntx_auth_key_default(&dflt);
	ret = ntx_auth_key_set(&dom->auth, info->domain_attr->auth_key,
			       info->domain_attr->auth_key_size, &dflt);
	ntx_wipe(&dflt, sizeof(dflt));
	if (ret) {
		free(dom);
		return ret;
	}
	dom->net_ops = net_ops;
	snprintf(dom->name, sizeof(dom->name), "%s",
		 info->domain_attr->name ? info->domain_attr->name
					 : NTX_DOMAIN_SHM);
	pthread_mutex_init(&dom->lock, NULL);
	pthread_mutex_init(&dom->mr_lock, NULL);
	ntx_list_init(&dom->eps);
	dom->fabric = fab;
	dom->threading = info->domain_attr->threading;
	dom->mr_mode = (uint64_t)info->domain_attr->mr_mode;
	if (dom->mr_mode == FI_MR_BASIC) /* the old enum: a whole mode */
		dom->mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	else if (dom->mr_mode == FI_MR_SCALABLE)
		dom->mr_mode = 0;
	dom->dom.fid.fclass = FI_CLASS_DOMAIN;
	dom->dom.fid.context = context;
	dom->dom.fid.ops = &ntx_domain_fi_ops;
	dom->dom.ops = &ntx_domain_ops;
	dom->dom.mr = &ntx_domain_mr_ops;
	if (info->domain_attr->data_progress == FI_PROGRESS_AUTO ||
	    info->domain_attr->control_progress == FI_PROGRESS_AUTO) {
		ret = ntx_auto_start(dom);
		if (ret) {
			ntx_wipe(&dom->auth, sizeof(dom->auth));
			pthread_mutex_destroy(&dom->lock);
			pthread_mutex_destroy(&dom->mr_lock);
			free(dom);
			return ret;
		}
	}
	dom->lockless = dom->threading == FI_THREAD_DOMAIN &&
			!dom->auto_progress;
	/* FI_THREAD_COMPLETION: everything sharing a CQ or counter is
	 * serialized by the application, and different ones share no
	 * endpoint; only domain-wide objects (MRs, AVs) keep their locks */
	dom->ep_lockless = dom->lockless ||
			   (dom->threading == FI_THREAD_COMPLETION &&
			    !dom->auto_progress);
	NTX_INFO(FI_LOG_DOMAIN, "domain %s: %s, %s progress, %s\n",
		 info->domain_attr->name ? info->domain_attr->name : "?",
		 fi_tostr(&dom->threading, FI_TYPE_THREADING),
		 dom->auto_progress ? "auto" : "manual",
		 dom->ep_lockless ? "no endpoint locks" : "endpoint locks");
	ntx_ref_get(&fab->ref);
	*out = &dom->dom;
	return 0;
}
