/*
 * Passive endpoints (DESIGN §3, "MSG endpoints"): each owns an engine
 * endpoint that hears only connection requests, reports them as FI_CONNREQ
 * and holds them until fi_reject or the MSG endpoint (ntx_cm.c) answers.
 */
#include "config.h"
#include <netinet/in.h>
#include <stdlib.h>

#include "ntx/ntx.h"
#include "ntx_cm.h"

#define NTX_PEP_BACKLOG 128 /* unanswered requests a passive ep holds */

struct ntx_pep {
	struct fid_pep pep;
	struct ntx_fabric *fab;
	struct fi_info *info;
	struct fid_domain *dom;
	struct fid_ep *iep;   /* the engine endpoint that hears requests */
	struct fid_eq *eq;
	struct ntx_eq_src src;
	bool listening;
	uint32_t pending;     /* requests not yet answered (ntx_creq_lock) */
	struct ntx_list live; /* in ntx_peps (ntx_creq_lock) */
};

pthread_mutex_t ntx_creq_lock = PTHREAD_MUTEX_INITIALIZER;
struct ntx_list ntx_creqs = { &ntx_creqs, &ntx_creqs };
/* The open passive endpoints: an fi_info handle is looked up here before
 * it is used, never read (it may be a request already answered). */
static struct ntx_list ntx_peps = { &ntx_peps, &ntx_peps };

/* ntx_creq_lock held: the open passive endpoint of a handle, or NULL. */
static struct ntx_pep *ntx_pep_find(const struct fid *handle)
{
	struct ntx_list *it;

	ntx_list_foreach(&ntx_peps, it) {
		struct ntx_pep *q = ntx_container_of(it, struct ntx_pep, live);

		if (&q->pep.fid == handle)
			return q;
	}
	return NULL;
}

/* ntx_creq_lock held: the live request of a handle, or NULL. */
struct ntx_connreq *ntx_creq_find(const struct fid *handle)
{
	struct ntx_list *it;

	ntx_list_foreach(&ntx_creqs, it)
		if (&ntx_container_of(it, struct ntx_connreq, entry)->fid ==
		    handle)
			return ntx_container_of(it, struct ntx_connreq, entry);
	return NULL;
}

/* ntx_creq_lock held. */
void ntx_creq_free(struct ntx_connreq *c)
{
	ntx_list_remove(&c->entry);
	if (c->pep)
		c->pep->pending--;
	c->magic = 0;
	free(c);
}

/* ---- packets of a passive endpoint -------------------------------------- */

static int ntx_info_set_addr(void **dst, size_t *dstlen, const void *a,
			     size_t len)
{
	free(*dst);
	*dst = malloc(len);
	if (!*dst)
		return -FI_ENOMEM;
	memcpy(*dst, a, len);
	*dstlen = len;
	return 0;
}

/* The FI_CONNREQ event: the passive endpoint's fi_info, with the
 * client's name as dest_addr and the request as handle. With
 * FI_SOCKADDR_IN both are sockaddr_in, src_addr the passive endpoint's
 * address (the accepted endpoint's name). */
static struct fi_info *ntx_pep_req_info(struct ntx_pep *p,
					struct ntx_connreq *c)
{
	struct ntx_ep *iep = ntx_container_of(p->iep, struct ntx_ep, ep);
	struct fi_info *fi = fi_dupinfo(p->info);
	struct sockaddr_in dst, src;
	int ret;

	if (!fi)
		return NULL;
	if (!iep->domain->sockaddr) {
		ret = ntx_info_set_addr(&fi->dest_addr, &fi->dest_addrlen,
					&c->client, sizeof(c->client));
	} else {
		ret = ntx_addr_to_sin(&c->client, &dst) ||
		      ntx_addr_to_sin(&iep->name, &src) ? -FI_EINVAL : 0;
		if (!ret)
			ret = ntx_info_set_addr(&fi->dest_addr,
						&fi->dest_addrlen, &dst,
						sizeof(dst));
		if (!ret)
			ret = ntx_info_set_addr(&fi->src_addr, &fi->src_addrlen,
						&src, sizeof(src));
	}
	if (ret) {
		fi_freeinfo(fi);
		return NULL;
	}
	fi->handle = &c->fid;
	return fi;
}

/* A new request (ntx_creq_lock held), or NULL when it cannot be held:
 * not listening, the backlog full, no memory. */
static struct ntx_connreq *ntx_pep_req_new(struct ntx_pep *p,
					   struct ntx_vc *vc, uint64_t cid)
{
	struct ntx_connreq *c;

	if (!p->listening || !p->eq || p->pending >= NTX_PEP_BACKLOG)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->fid.fclass = FI_CLASS_CONNREQ;
	c->magic = NTX_CONNREQ_MAGIC;
	c->pep = p;
	c->client = vc->peer;
	c->cid = cid;
	ntx_list_insert_tail(&ntx_creqs, &c->entry);
	p->pending++;
	return c;
}

static void ntx_pep_packet(struct ntx_ep *ep, struct ntx_vc *vc,
			   const struct ntx_wire_hdr *h, const void *data,
			   size_t len)
{
	struct ntx_pep *p = ep->cm_ctx;
	struct ntx_connreq *c;
	struct fi_info *fi = NULL;

	if (h->status != NTX_CM_REQ) {
		NTX_WARN(FI_LOG_EP_CTRL, "pid %u: CM packet %d to a passive "
			 "endpoint: connection closed\n", vc->peer.pid,
			 h->status);
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
	pthread_mutex_lock(&ntx_creq_lock);
	c = ntx_pep_req_new(p, vc, h->sreq);
	if (c) {
		fi = ntx_pep_req_info(p, c);
		if (!fi)
			ntx_creq_free(c);
	}
	pthread_mutex_unlock(&ntx_creq_lock);
	if (!fi) {
		NTX_INFO(FI_LOG_EP_CTRL, "pid %u: connection request "
			 "refused\n", vc->peer.pid);
		ntx_vc_cm_send(vc, NTX_CM_REJECT, h->sreq, NULL, 0);
		return;
	}
	ntx_cm_event(p->eq, FI_CONNREQ, &p->pep.fid, fi, data, len);
}

/* A client whose connection to us ended (it closed, exited or was
 * refused) is no longer waiting: its unanswered requests leave the
 * backlog, or clients that ask and vanish would fill it for good. A
 * handle of one the application still holds is then refused
 * (fi_endpoint, fi_reject: -FI_EINVAL). */
static void ntx_pep_vc_failed(struct ntx_ep *ep, struct ntx_vc *vc)
{
	struct ntx_pep *p = ep->cm_ctx;
	struct ntx_list *it, *tmp;

	pthread_mutex_lock(&ntx_creq_lock);
	ntx_list_foreach_safe(&ntx_creqs, it, tmp) {
		struct ntx_connreq *c = ntx_container_of(it, struct ntx_connreq,
							 entry);

		if (c->pep == p && ntx_addr_same_ep(&c->client, &vc->peer))
			ntx_creq_free(c);
	}
	pthread_mutex_unlock(&ntx_creq_lock);
}

static const struct ntx_cm_hooks ntx_pep_hooks = {
	.packet = ntx_pep_packet,
	.vc_failed = ntx_pep_vc_failed,
};

/* ---- passive endpoints -------------------------------------------------- */

static int ntx_pep_close(struct fid *fid)
{
	struct ntx_pep *p = ntx_container_of(fid, struct ntx_pep, pep.fid);
	struct ntx_list *it, *tmp;

	if (p->eq)
		ntx_eq_src_del(p->eq, &p->src);
	pthread_mutex_lock(&ntx_creq_lock);
	ntx_list_remove(&p->live);
	ntx_list_foreach_safe(&ntx_creqs, it, tmp) {
		struct ntx_connreq *c = ntx_container_of(it, struct ntx_connreq,
							 entry);
		if (c->pep != p)
			continue;
		if (c->taken)
			c->pep = NULL; /* its endpoint answers it */
		else
			ntx_creq_free(c); /* nobody will */
	}
	pthread_mutex_unlock(&ntx_creq_lock);
	if (p->iep)
		fi_close(&p->iep->fid);
	fi_close(&p->dom->fid);
	fi_freeinfo(p->info);
	ntx_ref_put(&p->fab->ref);
	free(p);
	return 0;
}

static int ntx_pep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_pep *p = ntx_container_of(fid, struct ntx_pep, pep.fid);

	if (!bfid || bfid->fclass != FI_CLASS_EQ || p->eq || !p->iep)
		return -FI_EINVAL;
	p->eq = ntx_container_of(bfid, struct fid_eq, fid);
	p->src.ep = ntx_container_of(p->iep, struct ntx_ep, ep);
	p->src.passive = true;
	ntx_eq_src_add(p->eq, &p->src);
	return 0;
}

static int ntx_pep_listen(struct fid_pep *pep)
{
	struct ntx_pep *p = ntx_container_of(pep, struct ntx_pep, pep);

	if (!p->eq)
		return -FI_ENOEQ;
	if (!p->iep)
		return -FI_EOPBADSTATE;
	pthread_mutex_lock(&ntx_creq_lock);
	p->listening = true;
	pthread_mutex_unlock(&ntx_creq_lock);
	return 0;
}

static int ntx_pep_reject(struct fid_pep *pep, fid_t handle,
			  const void *param, size_t len)
{
	struct ntx_pep *p = ntx_container_of(pep, struct ntx_pep, pep);
	struct ntx_ep *iep = ntx_container_of(p->iep, struct ntx_ep, ep);
	struct ntx_connreq *c;
	struct ntx_addr client;
	struct ntx_vc *vc;
	uint64_t cid;

	if (!handle || !ntx_cm_data_ok(param, len))
		return -FI_EINVAL;
	pthread_mutex_lock(&ntx_creq_lock);
	c = ntx_creq_find(handle);
	if (!c || c->pep != p) {
		pthread_mutex_unlock(&ntx_creq_lock);
		return -FI_EINVAL;
	}
	client = c->client;
	cid = c->cid;
	ntx_creq_free(c);
	pthread_mutex_unlock(&ntx_creq_lock);
	/* over the client's connection to us; a client gone needs no answer */
	ntx_ep_lock(iep);
	vc = ntx_vc_by_name(iep, &client);
	if (vc)
		ntx_vc_cm_send(vc, NTX_CM_REJECT, cid, param, len);
	ntx_ep_unlock(iep);
	return 0;
}

static int ntx_pep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct ntx_pep *p = ntx_container_of(fid, struct ntx_pep, pep.fid);

	if (!p->iep)
		return -FI_EOPBADSTATE;
	return fi_getname(&p->iep->fid, addr, addrlen);
}

static int ntx_pep_open_iep(struct ntx_pep *p, struct fi_info *info,
			    struct fid_ep **iep);

/* fi_setname before fi_listen. An ntx name is made by the back end (only
 * the passive endpoint's own is taken); with FI_SOCKADDR_IN the passive
 * endpoint moves to the address and port given (fabtests'
 * fi_msg_sockets opens it without one, then names it). */
static int ntx_pep_setname(fid_t fid, void *addr, size_t addrlen)
{
	struct ntx_pep *p = ntx_container_of(fid, struct ntx_pep, pep.fid);
	struct ntx_ep *old;
	struct fi_info *ri;
	struct fid_ep *iep;
	int ret;

	if (!p->iep || p->listening)
		return -FI_EOPBADSTATE;
	old = ntx_container_of(p->iep, struct ntx_ep, ep);
	if (!old->domain->sockaddr)
		return fi_setname(&p->iep->fid, addr, addrlen);
	if (!addr || addrlen != sizeof(struct sockaddr_in) ||
	    ((const struct sockaddr_in *)addr)->sin_family != AF_INET)
		return -FI_EINVAL;
	ri = fi_dupinfo(p->info);
	if (!ri)
		return -FI_ENOMEM;
	ret = ntx_info_set_addr(&ri->src_addr, &ri->src_addrlen, addr,
				addrlen);
	if (!ret)
		ret = ntx_pep_open_iep(p, ri, &iep);
	if (ret) {
		fi_freeinfo(ri);
		return ret;
	}
	if (p->eq)
		ntx_eq_src_del(p->eq, &p->src);
	fi_close(&p->iep->fid);
	p->iep = iep;
	if (p->eq) {
		p->src.ep = ntx_container_of(iep, struct ntx_ep, ep);
		ntx_eq_src_add(p->eq, &p->src);
	}
	fi_freeinfo(p->info);
	p->info = ri;
	return 0;
}

/* fi_endpoint of a client whose fi_info's handle is a passive endpoint
 * not listening: the endpoint takes its name (as libfabric's tcp
 * provider takes the socket), which the passive endpoint gives up. */
int ntx_pep_take_name(struct fid *handle, struct ntx_addr *name)
{
	struct ntx_pep *p;
	struct ntx_ep *iep;
	int ret = 1;

	pthread_mutex_lock(&ntx_creq_lock);
	p = ntx_pep_find(handle);
	if (p && (!p->iep || p->listening)) {
		NTX_WARN(FI_LOG_EP_CTRL, "fi_info handle: a passive endpoint "
			 "that listens, or whose name was taken\n");
		ret = -FI_EOPBADSTATE;
	} else if (p) {
		iep = ntx_container_of(p->iep, struct ntx_ep, ep);
		*name = iep->name;
		ret = 0;
	}
	pthread_mutex_unlock(&ntx_creq_lock);
	if (ret)
		return ret;
	/* the application's own passive endpoint, which only it closes:
	 * closed outside the lock, which the engine endpoint's close may
	 * take */
	if (p->eq)
		ntx_eq_src_del(p->eq, &p->src);
	fi_close(&p->iep->fid);
	p->iep = NULL;
	return 0;
}

static struct fi_ops ntx_pep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_pep_close,
	.bind = ntx_pep_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_ep ntx_pep_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ntx_no_cancel,
	.getopt = ntx_msg_getopt,
	.setopt = ntx_no_setopt,
	.tx_ctx = ntx_no_tx_ctx,
	.rx_ctx = ntx_no_rx_ctx,
	.rx_size_left = ntx_no_rx_size_left,
	.tx_size_left = ntx_no_tx_size_left,
};

static struct fi_ops_cm ntx_pep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ntx_pep_setname,
	.getname = ntx_pep_getname,
	.getpeer = ntx_no_getpeer,
	.connect = ntx_no_connect,
	.listen = ntx_pep_listen,
	.accept = ntx_no_accept,
	.reject = ntx_pep_reject,
	.shutdown = ntx_no_shutdown,
	.join = ntx_no_join,
};

/* The engine endpoint of a passive endpoint: opened from its fi_info as
 * an RDM one (the service of src_addr is the passive endpoint's), in the
 * passive endpoint's domain, opened with the first. */
static int ntx_pep_open_iep(struct ntx_pep *p, struct fi_info *info,
			    struct fid_ep **iep)
{
	struct fi_info *ri = fi_dupinfo(info);
	struct ntx_ep *ep;
	int ret = 0;

	if (!ri)
		return -FI_ENOMEM;
	ri->ep_attr->type = FI_EP_RDM;
	if (!p->dom)
		ret = fi_domain(&p->fab->fab, ri, &p->dom, NULL);
	if (!ret)
		ret = fi_endpoint(p->dom, ri, iep, NULL);
	fi_freeinfo(ri);
	if (ret)
		return ret;
	ep = ntx_container_of(*iep, struct ntx_ep, ep);
	ntx_ep_lock(ep);
	ep->msg_peer = ep->msg_dest = FI_ADDR_NOTAVAIL;
	ep->cm_ctx = p;
	ep->cm = &ntx_pep_hooks;
	ntx_ep_unlock(ep);
	return 0;
}

int ntx_pep_open(struct fid_fabric *fabric, struct fi_info *info,
		 struct fid_pep **out, void *context)
{
	struct ntx_pep *p;
	int ret;

	if (!info || !out || !info->ep_attr ||
	    info->ep_attr->type != FI_EP_MSG || !info->domain_attr ||
	    !info->domain_attr->name) {
		NTX_WARN(FI_LOG_EP_CTRL, "fi_passive_ep needs a MSG fi_info "
			 "with a domain\n");
		return -FI_EINVAL;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -FI_ENOMEM;
	p->fab = ntx_container_of(fabric, struct ntx_fabric, fab);
	p->info = fi_dupinfo(info);
	ret = p->info ? ntx_pep_open_iep(p, info, &p->iep) : -FI_ENOMEM;
	if (ret) {
		if (p->dom)
			fi_close(&p->dom->fid);
		fi_freeinfo(p->info);
		free(p);
		return ret;
	}
	p->pep.fid.fclass = FI_CLASS_PEP;
	p->pep.fid.context = context;
	p->pep.fid.ops = &ntx_pep_fi_ops;
	p->pep.ops = &ntx_pep_ep_ops;
	p->pep.cm = &ntx_pep_cm_ops;
	ntx_ref_get(&p->fab->ref);
	pthread_mutex_lock(&ntx_creq_lock);
	ntx_list_insert_tail(&ntx_peps, &p->live);
	pthread_mutex_unlock(&ntx_creq_lock);
	*out = &p->pep;
	return 0;
}
