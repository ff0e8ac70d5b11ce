/*
 * verbs back end (DESIGN §5): one RC QP per VC, connected with rdma_cm
 * (the request carries the endpoint's name as private data); one SRQ of
 * pre-posted eager buffers, one CQ, one completion channel and the rdma_cm
 * event channel per back-end instance, the two channels behind one epoll
 * fd for sleeping. Packets are copied into registered send slots (inline
 * where the device allows); every send is signaled and the slots bound the
 * CQ, so it can never overrun. Peers on this host are reached through the
 * shm window by the engine; this back end sees remote peers, or local
 * ones with FI_NTX_LOCAL_VIA_NETWORK=1.
 *
 * This file opens and closes an instance and holds the ops table and its
 * registration; ntx_verbs.h says where the rest lives.
 */
#include "config.h"
#include <arpa/inet.h>
#include <stdlib.h>
#include <unistd.h>

#include "ntx_verbs.h"

/* The instance's sizes, from the device's limits; *cqe: the entries of a
 * CQ that can never overrun (every receive, send and bulk move). */
static int ntx_vb_size(struct ntx_vb_ep *be, const struct ntx_vb_devinfo *d,
		       uint32_t *cqe)
{
	be->nrx = d->max_srq_wr < 512 ? d->max_srq_wr : 512;
	be->ntx = d->max_qp_wr < 256 ? d->max_qp_wr : 256;
	be->rd_atom = d->max_qp_rd_atom < 16 ? d->max_qp_rd_atom : 16;
	be->max_inline = 256;
	be->max_sge = d->max_sge < NTX_MAX_IOV ? d->max_sge : NTX_MAX_IOV;
	if (!be->max_sge)
		be->max_sge = 1;
	*cqe = be->nrx + be->ntx + NTX_VB_BULK_MAX;
	if (*cqe > d->max_cqe) {
		NTX_WARN(FI_LOG_DOMAIN, "%s: CQ of %u entries is too small\n",
			 d->name, d->max_cqe);
		return -FI_ENOMEM;
	}
	return 0;
}

static void ntx_vb_log_open(const struct ntx_vb_ep *be,
			    const struct ntx_vb_devinfo *d)
{
	NTX_INFO(FI_LOG_DOMAIN, "%s: max_cqe %u max_qp_wr %u max_srq_wr %u "
		 "max_sge %u max_qp_rd_atom %u atomic_cap %d (atomics run in "
		 "ntx's target progress, not the device's)\n", d->name,
		 d->max_cqe, d->max_qp_wr, d->max_srq_wr, d->max_sge,
		 d->max_qp_rd_atom, d->atomic_cap);
	NTX_INFO(FI_LOG_DOMAIN, "%s: %u eager buffers, %u send slots, inline "
		 "%u, port %u\n", d->name, be->nrx, be->ntx, be->max_inline,
		 ntohs(be->addr.port));
}

/* Frees what there is of an instance: closing, or an open that failed
 * part way. The QPs go before the CQ, SRQ and PD they use. */
static void ntx_vb_ep_free(struct ntx_vb_ep *be)
{
	struct ntx_list *it, *tmp;

	if (be->cq)
		ntx_vb_linger(be);
	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_vb_destroy(ntx_container_of(it, struct ntx_vb_conn, entry));
	ntx_verbs_cache_close(be->cache);
	ntx_vb_pkt_close(be);
	if (be->pd)
		ibv_dealloc_pd(be->pd);
	ntx_vb_cm_close(be);
	if (be->epfd >= 0)
		close(be->epfd);
	free(be);
}

static void ntx_vb_close(struct ntx_be_ep *be)
{
	ntx_vb_ep_free(ntx_vb_ep_of(be));
}

/* Device resources in the order they need each other: rdma_cm finds the
 * device the address is on, its PD holds the buffers and the QPs. */
static int ntx_vb_ep_setup(struct ntx_vb_ep *be,
			   const struct ntx_vb_devinfo *d,
			   const struct ntx_addr *want)
{
	uint32_t cqe;
	int ret;

	ret = ntx_vb_size(be, d, &cqe);
	if (ret)
		return ret;
	ret = ntx_vb_cm_listen(be, d, want);
	if (ret)
		return ret;
	be->pd = ibv_alloc_pd(be->ctx);
	if (!be->pd)
		return -FI_ENOMEM;
	ret = ntx_vb_pkt_open(be, cqe);
	if (ret)
		return ret;
	be->cache = ntx_verbs_cache_open(be->pd);
	if (!be->cache)
		return -FI_ENOMEM;
	return ntx_vb_wait_open(be);
}

static int ntx_vb_open(struct ntx_be_ep **out, const struct ntx_addr *want,
		       const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_vb_ep *be = calloc(1, sizeof(*be));
	struct ntx_vb_devinfo d;
	int ret;

	if (!be)
		return -FI_ENOMEM;
	be->head.ops = &ntx_verbs_ops;
	be->epfd = -1;
	be->cb = *cb;
	ntx_list_init(&be->conns);
	for (int i = 0; i < NTX_VB_QPN_BUCKETS; i++)
		ntx_list_init(&be->qpn_hash[i]);
	ret = dev ? ntx_vb_dev_find(dev, &d) : -FI_ENODEV;
	if (ret) {
		NTX_WARN(FI_LOG_DOMAIN, "verbs device %s is not usable\n",
			 dev ? dev : "(none)");
		goto free_be;
	}
	ret = ntx_vb_ep_setup(be, &d, want);
	if (ret)
		goto free_be;
	be->addr.ip4 = d.ip4;
	be->addr.port = rdma_get_src_port(be->listen);
	ntx_vb_log_open(be, &d);
	*out = &be->head;
	return 0;
free_be:
	ntx_vb_ep_free(be);
	return ret;
}

static void ntx_vb_getname(struct ntx_be_ep *be, struct ntx_addr *addr)
{
	addr->ip4 = ntx_vb_ep_of(be)->addr.ip4;
	addr->port = ntx_vb_ep_of(be)->addr.port;
}

static void ntx_vb_setname(struct ntx_be_ep *be, const struct ntx_addr *addr)
{
	ntx_vb_ep_of(be)->addr = *addr;
}

static int ntx_vb_resolve(struct ntx_addr *addr)
{
	return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
}

const struct ntx_be_ops ntx_verbs_ops = {
	.name = "verbs",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = NTX_VB_MAX_PAYLOAD,
	.has_bulk = true,
	.bulk_keyed = true,
	.open = ntx_vb_open,
	.close = ntx_vb_close,
	.getname = ntx_vb_getname,
	.setname = ntx_vb_setname,
	.connect = ntx_vb_connect,
	.conn_eager = ntx_vb_conn_eager,
	.disconnect = ntx_vb_disconnect,
	.send = ntx_vb_send,
	.bulk_read = ntx_vb_bulk_read,
	.bulk_write = ntx_vb_bulk_write,
	.expose = ntx_vb_expose,
	.poll = ntx_vb_poll,
	.check_peers = ntx_vb_check_peers,
	.resolve = ntx_vb_resolve,
	.arm = ntx_vb_arm,
	.disarm = ntx_vb_disarm,
	.wait_fd = ntx_vb_wait_fd,
};

static struct ntx_be_desc ntx_verbs_desc = {
	.name = "verbs",
	.ops = &ntx_verbs_ops,
	.order = 10,
	.domains = ntx_vb_domains,
};
NTX_BE_REGISTER(ntx_verbs_desc)
