/*
 * RDM endpoints: open/bind/enable/close, options, names (fi_getname /
 * fi_setname) and fi_cancel. Each endpoint owns one back-end instance.
 */
#include "config.h"
#include <netinet/in.h>
#include <stdlib.h>

#include "ntx/ntx.h"
#include "ntx/ntx_sha256.h"

/* No progress reaches the endpoint once it left these lists. */
static void ntx_ep_leave_domain(struct ntx_ep *ep)
{
	struct ntx_domain *dom = ep->domain;

	ntx_domain_lock(dom);
	ntx_list_remove(&ep->dom_entry);
	if (ep->tx_cq)
		ntx_scope_del(dom, &ep->tx_cq->scope, ep);
	if (ep->rx_cq && ep->rx_cq != ep->tx_cq)
		ntx_scope_del(dom, &ep->rx_cq->scope, ep);
	for (int i = 0; i < NTX_EP_CNTRS; i++)
		if (*ntx_ep_cntr_slot(ep, i))
			ntx_scope_del(dom, &(*ntx_ep_cntr_slot(ep, i))->scope,
				      ep);
	ntx_domain_unlock(dom);
}

/* The references the endpoint's bindings hold. */
static void ntx_ep_put_bound(struct ntx_ep *ep)
{
	if (ep->av)
		ntx_ref_put(&ep->av->ref);
	ntx_ctx_unbind(ep);
	if (ep->tx_cq)
		ntx_ref_put(&ep->tx_cq->ref);
	if (ep->rx_cq && ep->rx_cq != ep->tx_cq)
		ntx_ref_put(&ep->rx_cq->ref);
	for (int i = 0; i < NTX_EP_CNTRS; i++)
		if (*ntx_ep_cntr_slot(ep, i))
			ntx_ref_put(&(*ntx_ep_cntr_slot(ep, i))->ref);
}

/* A scalable endpoint's context closes (DESIGN §3, "Scalable
 * endpoints"): its CQ and counters leave the engine endpoint (tx: the
 * transmit side's, else the receive side's), so that they can close
 * before the scalable endpoint does. Completions stop under the endpoint
 * lock; then the scopes let the endpoint go under the domain lock. */
void ntx_ep_unbind_dir(struct ntx_ep *ep, bool tx)
{
	static const int tx_cntrs[] = { 0, 2, 3 }, rx_cntrs[] = { 1, 4, 5 };
	const int *idx = tx ? tx_cntrs : rx_cntrs;
	struct ntx_domain *dom = ep->domain;
	struct ntx_cntr *c[3];
	struct ntx_cq *cq, *other;

	ntx_ep_lock(ep);
	cq = tx ? ep->tx_cq : ep->rx_cq;
	other = tx ? ep->rx_cq : ep->tx_cq;
	if (tx)
		ep->tx_cq = NULL;
	else
		ep->rx_cq = NULL;
	for (int i = 0; i < 3; i++) {
		c[i] = *ntx_ep_cntr_slot(ep, idx[i]);
		*ntx_ep_cntr_slot(ep, idx[i]) = NULL;
	}
	ntx_ep_set_paths(ep);
	ntx_ep_unlock(ep);
	ntx_domain_lock(dom);
	if (cq && cq != other)
		ntx_scope_del(dom, &cq->scope, ep);
	for (int i = 0; i < 3; i++) {
		bool kept = false;

		for (int j = 0; j < NTX_EP_CNTRS; j++)
			kept |= c[i] && *ntx_ep_cntr_slot(ep, j) == c[i];
		for (int j = 0; j < i; j++)
			kept |= c[j] == c[i];
		if (c[i] && !kept)
			ntx_scope_del(dom, &c[i]->scope, ep);
	}
	ntx_domain_unlock(dom);
	if (cq)
		ntx_ref_put(&cq->ref);
	for (int i = 0; i < 3; i++)
		if (c[i])
			ntx_ref_put(&c[i]->ref);
}

static int ntx_ep_close(struct fid *fid)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);
	struct ntx_domain *dom = ep->domain;
	void *msg = ntx_msg_ctx(ep);
	struct ntx_list *it, *tmp;

	if (atomic_load(&ep->ref)) {
		NTX_WARN(FI_LOG_EP_CTRL, "endpoint still has aliases\n");
		return -FI_EBUSY;
	}
	ntx_trig_purge(ep);
	ntx_msg_ep_closing(ep);
	ntx_ep_leave_domain(ep);
	ntx_ep_lock(ep);
	ntx_list_foreach_safe(&ep->vcs, it, tmp)
		ntx_vc_destroy(ntx_container_of(it, struct ntx_vc, entry));
	ntx_proto_unexp_fini(ep);
	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops)
			ep->be[i].ops->close(ep->be[i].be);
	ntx_ep_unlock(ep);
	pthread_mutex_destroy(&ep->lock);

	ntx_req_fini(ep);
	ntx_idtab_fini(&ep->vc_tab);
	ntx_ep_put_bound(ep);
	ntx_msg_ep_free(msg);
	ntx_ref_put(&dom->ref);
	ntx_wipe(&ep->auth, sizeof(ep->auth));
	free(ep);
	return 0;
}

static int ntx_ep_bind_cq(struct ntx_ep *ep, struct ntx_cq *cq, uint64_t flags)
{
	if (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION))
		return -FI_EINVAL;
	if (((flags & FI_TRANSMIT) && ep->tx_cq) ||
	    ((flags & FI_RECV) && ep->rx_cq))
		return -FI_EINVAL;
	if ((flags & (FI_TRANSMIT | FI_RECV)) &&
	    ntx_scope_add(ep->domain, &cq->scope, ep))
		return -FI_ENOMEM;
	if (flags & FI_TRANSMIT) {
		ep->tx_cq = cq;
		ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
	}
	if (flags & FI_RECV) {
		ep->rx_cq = cq;
		ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
	}
	if (flags & (FI_TRANSMIT | FI_RECV))
		ntx_ref_get(&cq->ref);
	return 0;
}

/* The counters an endpoint can bind, by fi_ep_bind flag. */
static const uint64_t ntx_ep_cntr_flags[NTX_EP_CNTRS] = {
	FI_SEND, FI_RECV, FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE,
};

static int ntx_ep_bind_cntr(struct ntx_ep *ep, struct ntx_cntr *c,
			    uint64_t flags)
{
	uint64_t all = 0;

	if (flags & FI_TRANSMIT) /* FI_TRANSMIT means sends here */
		flags = (flags & ~FI_TRANSMIT) | FI_SEND;
	for (int i = 0; i < NTX_EP_CNTRS; i++)
		all |= ntx_ep_cntr_flags[i];
	/* flags 0 would count nothing: refused, so that a counter nobody
	 * bumps fails here rather than hangs fi_cntr_wait */
	if (!flags || (flags & ~all) || c->domain != ep->domain) {
		NTX_WARN(FI_LOG_EP_CTRL, "fi_ep_bind: counter of another domain, "
			 "or flags %#llx name no event\n",
			 (unsigned long long)flags);
		return -FI_EINVAL;
	}
	for (int i = 0; i < NTX_EP_CNTRS; i++)
		if ((flags & ntx_ep_cntr_flags[i]) && *ntx_ep_cntr_slot(ep, i))
			return -FI_EINVAL;
	if (ntx_scope_add(ep->domain, &c->scope, ep))
		return -FI_ENOMEM;
	for (int i = 0; i < NTX_EP_CNTRS; i++) {
		if (!(flags & ntx_ep_cntr_flags[i]))
			continue;
		*ntx_ep_cntr_slot(ep, i) = c;
		ntx_ref_get(&c->ref); /* one reference per slot */
	}
	return 0;
}

static int ntx_ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);

	if (!bfid)
		return -FI_EINVAL;
	if (ep->enabled) {
		NTX_WARN(FI_LOG_EP_CTRL, "bind after fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	return ntx_ep_bind_obj(ep, bfid, flags);
}

/* A scalable endpoint's context binds after its sibling of the other
 * direction enabled the engine endpoint they share (DESIGN §3,
 * "Scalable endpoints"): its CQ or counter slots are its own. Every
 * bind recomputes the receive side's plain flag (ntx_ep_set_paths). */
static int ntx_ep_bind_one(struct ntx_ep *ep, struct fid *bfid,
			   uint64_t flags);

int ntx_ep_bind_obj(struct ntx_ep *ep, struct fid *bfid, uint64_t flags)
{
	int ret = ntx_ep_bind_one(ep, bfid, flags);

	ntx_ep_lock(ep);
	ntx_ep_set_paths(ep);
	ntx_ep_unlock(ep);
	return ret;
}

static int ntx_ep_bind_one(struct ntx_ep *ep, struct fid *bfid,
			   uint64_t flags)
{
	struct ntx_av *av;

	switch (bfid->fclass) {
	case FI_CLASS_AV:
		if (ep->av) /* a MSG endpoint's is its own */
			return -FI_EINVAL;
		av = ntx_container_of(bfid, struct ntx_av, av.fid);
		if (av->domain != ep->domain)
			return -FI_EINVAL;
		ep->av = av;
		ntx_ref_get(&av->ref);
		return 0;
	case FI_CLASS_CQ:
		return ntx_ep_bind_cq(ep, ntx_container_of(bfid, struct ntx_cq,
							   cq.fid), flags);
	case FI_CLASS_CNTR:
		return ntx_ep_bind_cntr(ep, ntx_container_of(bfid,
							     struct ntx_cntr,
							     cntr.fid), flags);
	case FI_CLASS_SRX_CTX:
	case FI_CLASS_STX_CTX:
		return ntx_ctx_bind(ep, bfid, flags);
	case FI_CLASS_EQ:
		if (ntx_msg_bind_eq(ep, ntx_container_of(bfid, struct fid_eq,
							 fid)))
			return -FI_EINVAL;
		ep->eq = ntx_container_of(bfid, struct fid_eq, fid);
		return 0;
	default:
		return -FI_EINVAL;
	}
}

static int ntx_ep_control(struct fid *fid, int command, void *arg)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);
	uint64_t *flags = arg;

	switch (command) {
	case FI_ENABLE:
		if (!ep->av) {
			NTX_WARN(FI_LOG_EP_CTRL, "fi_enable without an AV\n");
			return -FI_ENOAV;
		}
		if (!ep->tx_cq && !ep->rx_cq && !ntx_ep_has_cntr(ep)) {
			NTX_WARN(FI_LOG_EP_CTRL, "fi_enable without a CQ\n");
			return -FI_ENOCQ;
		}
		ep->enabled = true;
		ntx_ep_set_paths(ep);
		return 0;
	case FI_GETOPSFLAG:
		if (!flags)
			return -FI_EINVAL;
		if ((*flags & FI_TRANSMIT) && (*flags & FI_RECV))
			return -FI_EINVAL;
		*flags = (*flags & FI_RECV) ? ep->rx_op_flags : ep->tx_op_flags;
		return 0;
	case FI_SETOPSFLAG:
		if (!flags)
			return -FI_EINVAL;
		if (*flags & FI_RECV)
			ep->rx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
		else
			ep->tx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
		return 0;
	case FI_ALIAS:
		return ntx_ep_alias(ep, arg);
	default:
		return -FI_ENOSYS;
	}
}

ssize_t ntx_ep_cancel(fid_t fid, void *context)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);
	struct ntx_req *r;

	if (!context)
		return -FI_EINVAL;
	ntx_ep_lock(ep);
	r = ntx_tme_cancel(&ep->rx->tme, context);
	if (r) {
		ntx_comp_rx_err(r, FI_ECANCELED, 0, 0, r->tag, 0);
		ntx_req_put(r);
	}
	ntx_ep_unlock(ep);
	return r ? 0 : -FI_ENOENT;
}

static int ntx_ep_getopt(fid_t fid, int level, int optname, void *optval,
			 size_t *optlen)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);

	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	if (optname == FI_OPT_CM_DATA_SIZE && ntx_msg_ctx(ep))
		return ntx_msg_getopt(fid, level, optname, optval, optlen);
	if (optname != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!optval || !optlen || *optlen < sizeof(size_t))
		return -FI_EINVAL;
	*(size_t *)optval = ep->min_multi_recv;
	*optlen = sizeof(size_t);
	return 0;
}

static int ntx_ep_setopt(fid_t fid, int level, int optname, const void *optval,
			 size_t optlen)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);

	if (level != FI_OPT_ENDPOINT)
		return -FI_ENOPROTOOPT;
	if (optname != FI_OPT_MIN_MULTI_RECV)
		return -FI_ENOPROTOOPT;
	if (!optval || optlen != sizeof(size_t))
		return -FI_EINVAL;
	ep->min_multi_recv = *(const size_t *)optval;
	return 0;
}

static ssize_t ntx_ep_tx_size_left(struct fid_ep *fep)
{
	struct ntx_ep *ep = ntx_container_of(fep, struct ntx_ep, ep);

	return ep->tx_limit > ep->tx_outstanding
		       ? (ssize_t)(ep->tx_limit - ep->tx_outstanding) : 0;
}

static ssize_t ntx_ep_rx_size_left(struct fid_ep *fep)
{
	return (ssize_t)ntx_rx_attr.size;
}

/* The name combines every back end's part: the shm window first. */
static void ntx_ep_name(struct ntx_ep *ep, struct ntx_addr *a)
{
	memset(a, 0, sizeof(*a));
	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops)
			ep->be[i].ops->getname(ep->be[i].be, a);
	/* peers without a key learn from the name that they would fail */
	if (ep->auth.len)
		a->flags |= NTX_ADDR_F_KEYED;
}

static int ntx_ep_open_be(struct ntx_ep *ep, int i,
			  const struct ntx_be_ops *ops,
			  const struct ntx_addr *want)
{
	struct ntx_be_cb cb = ntx_vc_callbacks;
	int ret;

	assert(ntx_be_ops_is_valid(ops));
	cb.ctx = &ep->be[i];
	ep->be[i].ep = ep;
	ret = ops->open(&ep->be[i].be, want, &cb,
			i == NTX_BE_NET ? ep->domain->name : NULL);
	if (!ret)
		ep->be[i].ops = ops;
	return ret;
}

int ntx_ep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);
	struct sockaddr_in sin;
	struct ntx_addr a;
	const void *src = &a;
	size_t want, len = sizeof(a);

	if (!addrlen || (*addrlen && !addr))
		return -FI_EINVAL;
	ntx_ep_name(ep, &a);
	if (ep->domain->sockaddr) {
		if (ntx_addr_to_sin(&a, &sin))
			return -FI_EADDRNOTAVAIL;
		src = &sin;
		len = sizeof(sin);
	}
	want = *addrlen;
	*addrlen = len;
	if (want < len)
		return -FI_ETOOSMALL;
	memcpy(addr, src, len);
	return 0;
}

static int ntx_ep_setname(fid_t fid, void *addr, size_t addrlen)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);
	struct ntx_addr cur;

	struct sockaddr_in sin;

	if (ep->enabled)
		return -FI_EOPBADSTATE;
	/* an ntx name is made by the back end; only our own is accepted */
	ntx_ep_name(ep, &cur);
	if (ep->domain->sockaddr)
		return addr && addrlen == sizeof(sin) &&
		       !ntx_addr_to_sin(&cur, &sin) &&
		       !memcmp(addr, &sin, sizeof(sin)) ? 0 : -FI_EINVAL;
	if (!addr || addrlen != sizeof(struct ntx_addr) ||
	    !ntx_addr_valid(addr))
		return -FI_EINVAL;
	return ntx_addr_same_ep(&cur, addr) ? 0 : -FI_EINVAL;
}

static struct fi_ops ntx_ep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_ep_close,
	.bind = ntx_ep_bind,
	.control = ntx_ep_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_ep ntx_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ntx_ep_cancel,
	.getopt = ntx_ep_getopt,
	.setopt = ntx_ep_setopt,
	.tx_ctx = ntx_no_tx_ctx,
	.rx_ctx = ntx_no_rx_ctx,
	.rx_size_left = ntx_ep_rx_size_left,
	.tx_size_left = ntx_ep_tx_size_left,
};

static struct fi_ops_cm ntx_ep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ntx_ep_setname,
	.getname = ntx_ep_getname,
	.getpeer = ntx_no_getpeer,
	.connect = ntx_no_connect,
	.listen = ntx_no_listen,
	.accept = ntx_no_accept,
	.reject = ntx_no_reject,
	.shutdown = ntx_no_shutdown,
	.join = ntx_no_join,
};

/* The endpoint's attributes from fi_info and FI_NTX_*, and its empty
 * engine state. */
void ntx_ep_init(struct ntx_ep *ep, struct ntx_domain *dom,
		 const struct fi_info *info)
{
	ep->real = ep; /* fi calls through ep->ep act on it (ntx_ep_of) */
	ep->domain = dom;
	pthread_mutex_init(&ep->lock, NULL);
	ep->lockp = &ep->lock;
	ep->rx = ep;
	ep->caps = info->caps ? info->caps : (FI_MSG | FI_TAGGED);
	ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->tx_limit = info->tx_attr && info->tx_attr->size
			       ? info->tx_attr->size : ntx_tx_attr.size;
	ep->min_multi_recv = ntx_params.min_multi_recv;
	ep->cma_ok = ntx_params.shm_cma;
	ep->local_via_network = ntx_params.local_via_network;
	ntx_list_init(&ep->vcs);
	ntx_list_init(&ep->busy_vcs);
	ntx_list_init(&ep->unexp_free);
	ntx_list_init(&ep->unexp_vcs);
	ntx_tme_init(&ep->tme);
}

/* The shm window, and the domain's network back end if it has one. */
static int ntx_ep_open_bes(struct ntx_ep *ep, const struct ntx_addr *want)
{
	const struct ntx_be_ops *net_ops = ep->domain->net_ops;
	int ret;

	ret = ntx_ep_open_be(ep, NTX_BE_SHM, ntx_be_local()->ops, want);
	if (ret || !net_ops)
		return ret;
	ret = ntx_ep_open_be(ep, NTX_BE_NET, net_ops, want);
	if (ret)
		ep->be[NTX_BE_SHM].ops->close(ep->be[NTX_BE_SHM].be);
	return ret;
}

/* FI_SOCKADDR_IN (DESIGN §3, "Address formats"): an endpoint is named by
 * its service number, so one that asked for none draws a free one from
 * the ephemeral ports. */
static int ntx_ep_open_bes_sin(struct ntx_ep *ep, const struct ntx_addr *want)
{
	struct ntx_addr w;
	int ret = -FI_EADDRINUSE;

	if (!ep->domain->sockaddr || (want && want->service))
		return ntx_ep_open_bes(ep, want);
	w = *want;
	for (int i = 0; i < 64 && ret == -FI_EADDRINUSE; i++) {
		w.service = 49152 + (uint32_t)(ntx_random64() % 16384);
		ret = ntx_ep_open_bes(ep, &w);
	}
	return ret;
}

/* The name asked for: an ntx name, or with FI_SOCKADDR_IN an address and
 * a port (either may be 0: any). */
static int ntx_ep_want(const struct ntx_domain *dom, const struct fi_info *info,
		       struct ntx_addr *buf, const struct ntx_addr **want)
{
	const struct sockaddr_in *sin = info->src_addr;

	*want = NULL;
	if (dom->sockaddr) {
		memset(buf, 0, sizeof(*buf));
		*want = buf;
		if (!sin)
			return 0;
		if (info->src_addrlen < sizeof(*sin) ||
		    sin->sin_family != AF_INET) {
			NTX_WARN(FI_LOG_EP_CTRL, "src_addr is not AF_INET\n");
			return -FI_EINVAL;
		}
		buf->ip4 = sin->sin_addr.s_addr;
		buf->service = ntohs(sin->sin_port);
		return 0;
	}
	if (info->src_addr) {
		if (info->src_addrlen != sizeof(struct ntx_addr) ||
		    !ntx_addr_valid(info->src_addr))
			return -FI_EINVAL;
		*want = info->src_addr;
	}
	return 0;
}

/* Our whole name, given to the back ends that tell it to peers. */
static void ntx_ep_set_name(struct ntx_ep *ep)
{
	struct ntx_addr name;

	ntx_ep_name(ep, &name);
	ep->name = name;
	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops && ep->be[i].ops->setname)
			ep->be[i].ops->setname(ep->be[i].be, &name);
}

/* Domain progress and the FI_GETWAIT sets given out so far see the
 * endpoint from now on. */
static void ntx_ep_join_domain(struct ntx_ep *ep)
{
	struct ntx_domain *dom = ep->domain;

	ntx_domain_lock(dom);
	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops)
			ntx_domain_wait_set_add(dom,
				ep->be[i].ops->wait_fd(ep->be[i].be));
	ntx_list_insert_tail(&dom->eps, &ep->dom_entry);
	ntx_domain_unlock(dom);
}

static int ntx_ep_check_type(struct ntx_domain *dom,
			     const struct fi_info *info)
{
	enum fi_ep_type t;

	if (!info->ep_attr)
		return -FI_EINVAL;
	t = info->ep_attr->type;
	if (t != FI_EP_RDM && t != FI_EP_MSG && t != FI_EP_DGRAM &&
	    t != FI_EP_UNSPEC) {
		NTX_WARN(FI_LOG_EP_CTRL, "ntx endpoints are FI_EP_RDM, "
			 "FI_EP_MSG or FI_EP_DGRAM\n");
		return -FI_EINVAL;
	}
	/* a DGRAM endpoint is an RDM one of a datagram domain (its fi_info
	 * limits it) */
	if (t == FI_EP_DGRAM && !dom->net_ops) {
		NTX_WARN(FI_LOG_EP_CTRL, "FI_EP_DGRAM needs a datagram "
			 "domain\n");
		return -FI_EINVAL;
	}
	return 0;
}

int ntx_ep_open(struct fid_domain *domain, struct fi_info *info,
		struct fid_ep **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	const struct ntx_addr *want = NULL;
	struct ntx_addr want_sin, msg_want;
	struct ntx_ep *ep;
	bool msg, from_pep;
	int ret;

	if (!info || !out || ntx_ep_check_type(dom, info))
		return -FI_EINVAL;
	msg = info->ep_attr->type == FI_EP_MSG;
	ret = ntx_ep_want(dom, info, &want_sin, &want);
	if (ret)
		return ret;
	/* a handle that is one of our passive endpoints: its name, service
	 * and all (1: not one, e.g. a connection request) */
	ret = msg && info->handle ? ntx_pep_take_name(info->handle, &msg_want)
				  : 1;
	if (ret < 0)
		return ret;
	from_pep = !ret;
	if (from_pep) {
		if (dom->sockaddr) {
			memset(&want_sin, 0, sizeof(want_sin));
			want_sin.ip4 = msg_want.ip4;
			want_sin.service = msg_want.service;
			msg_want = want_sin;
		}
		want = &msg_want;
	} else if (msg && want) {
		msg_want = *want;
		ntx_msg_want(info, &msg_want);
		want = &msg_want;
	}
	ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -FI_ENOMEM;
	/* the endpoint's own job key overrides the domain's */
	ret = ntx_auth_key_set(&ep->auth, info->ep_attr->auth_key,
			       info->ep_attr->auth_key_size, &dom->auth);
	if (ret)
		goto free_ep;
	ntx_ep_init(ep, dom, info);
	ret = ntx_ep_open_bes_sin(ep, want);
	if (ret)
		goto destroy_lock;
	ntx_ep_set_name(ep);
	ep->ep.fid.fclass = FI_CLASS_EP;
	ep->ep.fid.context = context;
	ep->ep.fid.ops = &ntx_ep_fi_ops;
	ep->ep.ops = &ntx_ep_ops;
	ep->ep.cm = &ntx_ep_cm_ops;
	ep->ep.msg = &ntx_msg_ops;
	ep->ep.tagged = &ntx_tagged_ops;
	ep->ep.rma = &ntx_rma_ops;
	ep->ep.atomic = &ntx_atomic_ops;
	ntx_prefix_ep_init(ep, info);
	ntx_ref_get(&dom->ref);
	ntx_ep_join_domain(ep);
	if (msg) {
		ret = ntx_msg_ep_init(ep, info, from_pep);
		if (ret) {
			ntx_ep_close(&ep->ep.fid);
			return ret;
		}
	}
	*out = &ep->ep;
	return 0;
destroy_lock:
	pthread_mutex_destroy(&ep->lock);
	ntx_wipe(&ep->auth, sizeof(ep->auth));
free_ep:
	free(ep);
	return ret;
}
