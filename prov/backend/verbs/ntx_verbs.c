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
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx/ntx_wire.h"
#include "ntx_verbs.h"

#define NTX_VB_SLOT 8192 /* bytes of one eager buffer: header + payload */
#define NTX_VB_HDR sizeof(struct ntx_wire_hdr)
#define NTX_VB_MAX_PAYLOAD (NTX_VB_SLOT - NTX_VB_HDR)
#define NTX_VB_CM_TIMEOUT_MS 5000
/* how long closing waits for sends still in flight: two resends (the ack
 * time-out is ~1.07 s) of a peer that is alive but slow */
#define NTX_VB_LINGER_MS 3000
#define NTX_VB_POLL_BATCH 32
#define NTX_VB_WR_RECV (1ull << 63)
#define NTX_VB_WR_BULK (1ull << 62)

enum ntx_vb_state {
	NTX_VB_RESOLVING, /* active: address, then route */
	NTX_VB_CONNECTING,
	NTX_VB_OPEN,
	NTX_VB_FAILED,
};

struct ntx_be_conn {
	struct ntx_list entry;     /* ntx_be_ep.conns */
	struct ntx_list qpn_entry; /* ntx_be_ep.qpn_hash */
	struct ntx_be_ep *be;
	void *vc;
	struct rdma_cm_id *id;
	uint32_t qpn;
	uint32_t inflight;         /* sends posted, not completed */
	bool has_qp;
	bool lingering;            /* the engine let go; sends still in flight */
	enum ntx_vb_state state;
	uint32_t peer_eager; /* the peer's FI_NTX_EAGER_MAX (0: not said) */
};

/* rdma_cm private data of a connect request and of its accept (at most
 * 56 bytes in the TCP port space): our name and what the peer must know
 * of our parameters. */
struct ntx_vb_priv {
	struct ntx_addr name;
	uint32_t eager_max;
	uint32_t pad;
};

#define NTX_VB_QPN_BUCKETS 256

struct ntx_be_ep {
	struct ntx_be_cb cb;
	struct rdma_event_channel *ech;
	struct rdma_cm_id *listen;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	struct ibv_srq *srq;
	uint8_t *rxbuf, *txbuf;
	struct ibv_mr *rxmr, *txmr;
	uint32_t nrx, ntx;      /* eager buffers, send slots */
	uint32_t *txfree;       /* free send slots (a stack) */
	uint32_t ntxfree;
	uint16_t *txgen;        /* slot generation: stale completions */
	struct ntx_be_conn **txowner;
	uint32_t max_inline;
	uint32_t max_sge;       /* gather entries of one bulk work request */
	uint32_t rd_atom;       /* RDMA reads in flight per QP */
	int epfd;
	struct ntx_addr addr;   /* the endpoint's whole name */
	struct ntx_vb_priv priv; /* private data of our requests, accepts */
	struct ntx_list conns;
	struct ntx_list qpn_hash[NTX_VB_QPN_BUCKETS];
	uint32_t cm_pending;    /* connections still being set up */
	uint32_t nlinger;       /* lingering connections */
	struct ntx_fdwatch cm_watch; /* news of ech without a syscall */
	bool armed;             /* the CQ may have a notification queued */
	struct ntx_vb_cache *cache; /* registrations of user buffers */
	/* the bulk move in flight waits for its completions; others that
	 * arrive meanwhile wait in 'deferred' for the next poll */
	uint32_t bulk_wait;
	int bulk_err;
	struct ibv_wc *deferred, *deferred_spare;
	uint32_t ndeferred, deferred_cap;
};

/* ---- device discovery ----------------------------------------------------- */

/* IPv4 address of a port from its RoCE GID table (v4-mapped entries). */
static uint32_t ntx_vb_port_ip4(struct ibv_context *ctx, uint8_t port,
				int gids)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0,
					      0, 0, 0xff, 0xff };
	union ibv_gid gid;
	uint32_t ip;

	for (int i = 0; i < gids; i++) {
		if (ibv_query_gid(ctx, port, i, &gid))
			break;
		if (!memcmp(gid.raw, v4mapped, sizeof(v4mapped))) {
			memcpy(&ip, gid.raw + 12, sizeof(ip));
			return ip;
		}
	}
	return 0;
}

int ntx_verbs_devices(struct ntx_vb_devinfo *out, int max)
{
	struct ibv_device **list;
	int n = 0, cnt = 0;

	list = ibv_get_device_list(&cnt);
	if (!list)
		return 0;
	for (int i = 0; i < cnt && n < max; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		struct ibv_port_attr pa;
		struct ntx_vb_devinfo *d = &out[n];

		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa)) {
			ibv_close_device(ctx);
			continue;
		}
		memset(d, 0, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s",
			 ibv_get_device_name(list[i]));
		d->ip4 = ntx_vb_port_ip4(ctx, 1, pa.gid_tbl_len);
		d->active = pa.state == IBV_PORT_ACTIVE;
		d->max_cqe = (uint32_t)da.max_cqe;
		d->max_qp = (uint32_t)da.max_qp;
		d->max_qp_wr = (uint32_t)da.max_qp_wr;
		d->max_srq_wr = (uint32_t)da.max_srq_wr;
		d->max_sge = (uint32_t)da.max_sge;
		d->max_mr = (uint32_t)da.max_mr;
		d->max_cq = (uint32_t)da.max_cq;
		d->max_mr_size = da.max_mr_size;
		d->max_qp_rd_atom = (uint32_t)da.max_qp_rd_atom;
		d->atomic_cap = da.atomic_cap;
		d->mtu = 128u << pa.active_mtu;
		ibv_close_device(ctx);
		if (!d->active || !d->ip4) {
			NTX_INFO(FI_LOG_CORE, "verbs device %s skipped: %s\n",
				 d->name, d->active ? "no IPv4 address (rdma_cm "
				 "needs one)" : "port 1 is not active");
			continue;
		}
		n++;
	}
	ibv_free_device_list(list);
	return n;
}

static int ntx_vb_dev_find(const char *dev, struct ntx_vb_devinfo *out)
{
	struct ntx_vb_devinfo d[16];
	int n = ntx_verbs_devices(d, 16);

	for (int i = 0; i < n; i++)
		if (!strcmp(d[i].name, dev)) {
			*out = d[i];
			return 0;
		}
	return -FI_ENODEV;
}

/* ---- connections ------------------------------------------------------------ */

static struct ntx_list *ntx_vb_bucket(struct ntx_be_ep *be, uint32_t qpn)
{
	return &be->qpn_hash[(qpn ^ (qpn >> 8)) % NTX_VB_QPN_BUCKETS];
}

static struct ntx_be_conn *ntx_vb_by_qpn(struct ntx_be_ep *be, uint32_t qpn)
{
	struct ntx_list *b = ntx_vb_bucket(be, qpn), *it;

	ntx_list_foreach(b, it) {
		struct ntx_be_conn *c = ntx_container_of(it, struct ntx_be_conn,
							 qpn_entry);
		if (c->qpn == qpn)
			return c;
	}
	return NULL;
}

static void ntx_vb_fail(struct ntx_be_conn *c, int err)
{
	enum ntx_vb_state old = c->state;

	if (old == NTX_VB_FAILED)
		return;
	if (old != NTX_VB_OPEN && c->be->cm_pending)
		c->be->cm_pending--;
	c->state = NTX_VB_FAILED;
	if (c->vc)
		c->be->cb.failed(c->vc, err);
}

static struct ntx_be_conn *ntx_vb_conn_new(struct ntx_be_ep *be)
{
	struct ntx_be_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->be = be;
	ntx_list_init(&c->qpn_entry);
	ntx_list_insert_tail(&be->conns, &c->entry);
	return c;
}

static int ntx_vb_create_qp(struct ntx_be_conn *c)
{
	struct ntx_be_ep *be = c->be;
	uint8_t ack_timeout = 18;
	struct ibv_qp_init_attr qa = {
		.send_cq = be->cq,
		.recv_cq = be->cq,
		.srq = be->srq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = be->ntx + NTX_VB_BULK_MAX,
			 .max_send_sge = be->max_sge,
			 .max_inline_data = be->max_inline },
	};

	if (rdma_create_qp(c->id, be->pd, &qa)) {
		/* not every device takes the inline size we asked for */
		qa.cap.max_inline_data = 0;
		if (rdma_create_qp(c->id, be->pd, &qa)) {
			NTX_WARN(FI_LOG_EP_CTRL, "rdma_create_qp: %s\n",
				 strerror(errno));
			return -FI_ENOMEM;
		}
		be->max_inline = 0;
	}
	if (qa.cap.max_inline_data < be->max_inline)
		be->max_inline = qa.cap.max_inline_data;
	c->has_qp = true;
	c->qpn = c->id->qp->qp_num;
	/* 4.096 us * 2^18 = 1.07 s before a packet is resent: emulated
	 * devices on a busy host answer late; dead peers show up through
	 * rdma_cm's DISCONNECTED well before the retries run out */
	rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
			&ack_timeout, sizeof(ack_timeout));
	ntx_list_insert_tail(ntx_vb_bucket(be, c->qpn), &c->qpn_entry);
	return 0;
}

static void ntx_vb_conn_param(struct ntx_be_ep *be,
			      struct rdma_conn_param *p)
{
	memset(p, 0, sizeof(*p));
	be->priv.name = be->addr;
	be->priv.eager_max = (uint32_t)ntx_params.eager_max;
	p->private_data = &be->priv;
	p->private_data_len = sizeof(be->priv);
	p->responder_resources = (uint8_t)be->rd_atom;
	p->initiator_depth = (uint8_t)be->rd_atom;
	p->retry_count = 7;
	p->rnr_retry_count = 7; /* an empty SRQ waits for its refill */
}

/* Send slots still owned by a connection come back, and completions that
 * may still name them are ignored (their generation changes). */
static void ntx_vb_reclaim(struct ntx_be_conn *c)
{
	struct ntx_be_ep *be = c->be;

	for (uint32_t i = 0; i < be->ntx; i++)
		if (be->txowner[i] == c) {
			be->txowner[i] = NULL;
			be->txgen[i]++;
			be->txfree[be->ntxfree++] = i;
		}
	c->inflight = 0;
}

static void ntx_vb_destroy(struct ntx_be_conn *c)
{
	struct ntx_be_ep *be = c->be;

	if (c->lingering)
		be->nlinger--;
	if (c->state != NTX_VB_OPEN && c->state != NTX_VB_FAILED &&
	    be->cm_pending)
		be->cm_pending--;
	if (c->id) {
		if (c->state == NTX_VB_OPEN)
			rdma_disconnect(c->id);
		if (c->has_qp)
			rdma_destroy_qp(c->id);
		c->id->context = NULL;
		rdma_destroy_id(c->id);
	}
	ntx_vb_reclaim(c);
	ntx_list_remove(&c->qpn_entry);
	ntx_list_remove(&c->entry);
	free(c);
}

/* The engine is done with c. The engine reported the sends it posted
 * here complete, yet the device may not have sent them: a QP destroyed
 * now (rdma_disconnect moves it to the error state) would flush them
 * unsent, and the peer would wait forever for the last message, say a
 * "fin" (fi_pingpong across two hosts hung so at exit). So c lingers
 * until its sends complete: ntx_vb_on_send_wc destroys it then, or
 * ntx_vb_close after waiting at most NTX_VB_LINGER_MS. */
static void ntx_vb_disconnect(struct ntx_be_conn *c)
{
	if (c->state == NTX_VB_OPEN && c->inflight && !c->lingering) {
		c->vc = NULL; /* what still arrives is dropped */
		c->lingering = true;
		c->be->nlinger++;
		return;
	}
	ntx_vb_destroy(c);
}

static int ntx_vb_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
			  void *vc, struct ntx_be_conn **conn)
{
	struct sockaddr_in src = { .sin_family = AF_INET,
				   .sin_addr.s_addr = be->addr.ip4 };
	struct sockaddr_in dst = { .sin_family = AF_INET,
				   .sin_addr.s_addr = peer->ip4,
				   .sin_port = peer->port };
	struct ntx_be_conn *c;

	/* a peer on this host named by loopback is reached on our device */
	if (peer->host == ntx_host_id() &&
	    (ntohl(peer->ip4) >> 24 == 127 || !peer->ip4))
		dst.sin_addr.s_addr = be->addr.ip4;
	c = ntx_vb_conn_new(be);
	if (!c)
		return -FI_ENOMEM;
	c->vc = vc;
	c->state = NTX_VB_RESOLVING;
	if (rdma_create_id(be->ech, &c->id, c, RDMA_PS_TCP)) {
		c->id = NULL;
		ntx_vb_destroy(c);
		return -FI_ENOMEM;
	}
	if (rdma_resolve_addr(c->id, (struct sockaddr *)&src,
			      (struct sockaddr *)&dst, NTX_VB_CM_TIMEOUT_MS)) {
		NTX_WARN(FI_LOG_EP_CTRL, "rdma_resolve_addr %s:%u: %s\n",
			 inet_ntoa(dst.sin_addr), ntohs(dst.sin_port),
			 strerror(errno));
		ntx_vb_destroy(c);
		return -FI_EHOSTUNREACH;
	}
	be->cm_pending++;
	*conn = c;
	return 0;
}

/* The eager size a peer's private data gives: 0 when it gives none,
 * -1 when it is outside FI_NTX_EAGER_MAX's range. */
static int64_t ntx_vb_peer_eager(const struct rdma_conn_param *p)
{
	struct ntx_vb_priv v;

	if (!p->private_data || p->private_data_len < sizeof(v))
		return 0;
	memcpy(&v, p->private_data, sizeof(v));
	if (v.eager_max < 4096 || v.eager_max > 65536) {
		NTX_WARN(FI_LOG_EP_CTRL, "peer pid %u says FI_NTX_EAGER_MAX is "
			 "%u: refused\n", v.name.pid, v.eager_max);
		return -1;
	}
	return v.eager_max;
}

/* A peer's connection request: its name is the private data. */
static void ntx_vb_on_request(struct ntx_be_ep *be, struct rdma_cm_id *id,
			      const struct rdma_conn_param *p)
{
	int64_t eager = ntx_vb_peer_eager(p);
	struct rdma_conn_param ours;
	struct ntx_addr from;
	struct ntx_be_conn *c;

	if (!p->private_data || p->private_data_len < sizeof(from)) {
		NTX_WARN(FI_LOG_EP_CTRL, "connection request without a name\n");
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	memcpy(&from, p->private_data, sizeof(from));
	if (!ntx_addr_valid(&from) || eager < 0) {
		NTX_WARN(FI_LOG_EP_CTRL, "connection request with a bad name\n");
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	c = ntx_vb_conn_new(be);
	if (!c) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	c->id = id;
	c->peer_eager = (uint32_t)eager;
	id->context = c;
	if (ntx_vb_create_qp(c)) {
		rdma_reject(id, NULL, 0);
		ntx_vb_destroy(c);
		return;
	}
	/* the QP is ready to send once rdma_accept returns; the engine only
	 * answers what the peer sent, which it can do from then on */
	c->state = NTX_VB_OPEN;
	ntx_vb_conn_param(be, &ours);
	if (rdma_accept(id, &ours)) {
		NTX_WARN(FI_LOG_EP_CTRL, "rdma_accept: %s\n", strerror(errno));
		ntx_vb_destroy(c);
		return;
	}
	c->vc = be->cb.accept(be->cb.ctx, c, &from);
	if (!c->vc)
		c->state = NTX_VB_FAILED;
}

static int ntx_vb_poll_cq(struct ntx_be_ep *be);

static int ntx_vb_cm_events(struct ntx_be_ep *be)
{
	struct rdma_cm_event *ev;
	int cnt = 0;

	while (!rdma_get_cm_event(be->ech, &ev)) {
		struct rdma_cm_event e = *ev;
		struct ntx_be_conn *c = e.id->context;
		struct rdma_conn_param ours;
		int64_t eager = 0;

		cnt++;
		if (e.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			/* the private data lives until the ack */
			ntx_vb_on_request(be, e.id, &e.param.conn);
			rdma_ack_cm_event(ev);
			continue;
		}
		/* the accept's private data lives until the ack, too */
		if (e.event == RDMA_CM_EVENT_ESTABLISHED)
			eager = ntx_vb_peer_eager(&e.param.conn);
		rdma_ack_cm_event(ev);
		if (!c || e.id == be->listen)
			continue;
		switch (e.event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (rdma_resolve_route(c->id, NTX_VB_CM_TIMEOUT_MS))
				ntx_vb_fail(c, -FI_EHOSTUNREACH);
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			ntx_vb_conn_param(be, &ours);
			if (ntx_vb_create_qp(c) || rdma_connect(c->id, &ours))
				ntx_vb_fail(c, -FI_ECONNREFUSED);
			else
				c->state = NTX_VB_CONNECTING;
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			if (c->state != NTX_VB_CONNECTING)
				break;
			if (eager < 0) {
				ntx_vb_fail(c, -FI_EREMOTEIO);
				break;
			}
			be->cm_pending--;
			c->state = NTX_VB_OPEN;
			c->peer_eager = (uint32_t)eager;
			be->cb.connected(c->vc);
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
		case RDMA_CM_EVENT_REJECTED:
		case RDMA_CM_EVENT_CONNECT_ERROR:
			NTX_INFO(FI_LOG_EP_CTRL, "connection failed: %s\n",
				 rdma_event_str(e.event));
			ntx_vb_fail(c, -FI_ECONNREFUSED);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			if (c->lingering) { /* nobody to send to any more */
				ntx_vb_destroy(c);
				break;
			}
			/* the peer's last messages completed on its side
			 * before it disconnected, so they are in our CQ: they
			 * go to the engine before the connection fails (its
			 * arrivals are dropped then) */
			if (c->state == NTX_VB_OPEN)
				ntx_vb_poll_cq(be);
			ntx_vb_fail(c, -FI_ECONNRESET);
			break;
		default:
			break;
		}
	}
	return cnt;
}

/* ---- packets ----------------------------------------------------------------- */

static int ntx_vb_post_recv(struct ntx_be_ep *be, const uint32_t *idx,
			    uint32_t n)
{
	struct ibv_recv_wr wr[NTX_VB_POLL_BATCH], *bad;
	struct ibv_sge sge[NTX_VB_POLL_BATCH];

	for (uint32_t i = 0; i < n; i++) {
		sge[i].addr = (uintptr_t)(be->rxbuf + (size_t)idx[i] * NTX_VB_SLOT);
		sge[i].length = NTX_VB_SLOT;
		sge[i].lkey = be->rxmr->lkey;
		wr[i].wr_id = NTX_VB_WR_RECV | idx[i];
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
	}
	if (n && ibv_post_srq_recv(be->srq, wr, &bad)) {
		NTX_WARN(FI_LOG_EP_DATA, "ibv_post_srq_recv failed\n");
		return -FI_EIO;
	}
	return 0;
}

static int ntx_vb_send(struct ntx_be_conn *c, const void *hdr,
		       const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_be_ep *be = c->be;
	struct ibv_send_wr wr = { 0 }, *bad;
	struct ibv_sge sge;
	uint32_t slot;
	uint8_t *dst;
	size_t left = len;

	if (c->state == NTX_VB_FAILED)
		return -FI_ECONNRESET;
	if (c->state != NTX_VB_OPEN || !be->ntxfree)
		return -FI_EAGAIN;
	if (len > NTX_VB_MAX_PAYLOAD)
		return -FI_EMSGSIZE;
	slot = be->txfree[--be->ntxfree];
	dst = be->txbuf + (size_t)slot * NTX_VB_SLOT;
	memcpy(dst, hdr, NTX_VB_HDR);
	dst += NTX_VB_HDR;
	for (size_t i = 0; i < iovcnt && left; i++) {
		size_t m = iov[i].iov_len < left ? iov[i].iov_len : left;

		memcpy(dst, iov[i].iov_base, m);
		dst += m;
		left -= m;
	}
	sge.addr = (uintptr_t)(be->txbuf + (size_t)slot * NTX_VB_SLOT);
	sge.length = (uint32_t)(NTX_VB_HDR + len);
	sge.lkey = be->txmr->lkey;
	wr.wr_id = (uint64_t)be->txgen[slot] << 32 | slot;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (sge.length <= be->max_inline)
		wr.send_flags |= IBV_SEND_INLINE;
	if (ibv_post_send(c->id->qp, &wr, &bad)) {
		be->txfree[be->ntxfree++] = slot;
		return -FI_EAGAIN;
	}
	be->txowner[slot] = c;
	c->inflight++;
	return 0;
}

static void ntx_vb_on_send_wc(struct ntx_be_ep *be, const struct ibv_wc *wc)
{
	uint32_t slot = (uint32_t)wc->wr_id;
	uint16_t gen = (uint16_t)(wc->wr_id >> 32);
	struct ntx_be_conn *c;

	if (slot >= be->ntx || be->txgen[slot] != gen || !be->txowner[slot])
		return; /* its connection is gone and the slot reused */
	c = be->txowner[slot];
	be->txowner[slot] = NULL;
	be->txfree[be->ntxfree++] = slot;
	c->inflight--;
	if (wc->status != IBV_WC_SUCCESS) {
		NTX_INFO(FI_LOG_EP_DATA, "send to a peer failed: %s\n",
			 ibv_wc_status_str(wc->status));
		ntx_vb_fail(c, -FI_ECONNRESET);
	}
	if (c->lingering && (!c->inflight || c->state == NTX_VB_FAILED))
		ntx_vb_destroy(c); /* its last send is out */
}

/* Handles n completions in order: sends free their slots, arrivals go to
 * the engine and their buffers back to the SRQ. */
static int ntx_vb_handle(struct ntx_be_ep *be, const struct ibv_wc *wc, int n)
{
	uint32_t repost[NTX_VB_POLL_BATCH];
	uint32_t nrepost = 0;
	int cnt = 0;

	for (int i = 0; i < n; i++) {
		const struct ibv_wc *w = &wc[i];
		struct ntx_be_conn *c;
		uint32_t idx;
		uint8_t *buf;

		if (w->wr_id & NTX_VB_WR_BULK)
			continue; /* of a move that gave up waiting */
		if (!(w->wr_id & NTX_VB_WR_RECV)) {
			ntx_vb_on_send_wc(be, w);
			continue;
		}
		idx = (uint32_t)w->wr_id;
		if (idx >= be->nrx)
			continue;
		if (nrepost == NTX_VB_POLL_BATCH) {
			ntx_vb_post_recv(be, repost, nrepost);
			nrepost = 0;
		}
		repost[nrepost++] = idx;
		if (w->status != IBV_WC_SUCCESS)
			continue; /* flushed: the buffer goes back */
		buf = be->rxbuf + (size_t)idx * NTX_VB_SLOT;
		c = ntx_vb_by_qpn(be, w->qp_num);
		if (!c || !c->vc || c->state != NTX_VB_OPEN)
			continue; /* a connection already gone */
		if (w->byte_len < NTX_VB_HDR || w->byte_len > NTX_VB_SLOT) {
			NTX_WARN(FI_LOG_EP_DATA, "malformed packet\n");
			ntx_vb_fail(c, -FI_EREMOTEIO);
			continue;
		}
		cnt++;
		/* the buffer stays ours until the callback returns */
		be->cb.recv(c->vc, buf, buf + NTX_VB_HDR,
			    w->byte_len - NTX_VB_HDR);
	}
	ntx_vb_post_recv(be, repost, nrepost);
	return cnt;
}

static int ntx_vb_poll_cq(struct ntx_be_ep *be)
{
	struct ibv_wc wc[NTX_VB_POLL_BATCH];
	int n, cnt = 0;

	/* completions a bulk move set aside are older than what the CQ
	 * holds: they go first, and the CQ waits while there are any */
	while (be->ndeferred) {
		struct ibv_wc *d = be->deferred;
		uint32_t nd = be->ndeferred;

		be->deferred = be->deferred_spare;
		be->deferred_spare = d;
		be->ndeferred = 0;
		for (uint32_t i = 0; i < nd; i += NTX_VB_POLL_BATCH)
			cnt += ntx_vb_handle(be, d + i,
					     (int)(nd - i < NTX_VB_POLL_BATCH
						   ? nd - i : NTX_VB_POLL_BATCH));
	}
	while (!be->ndeferred &&
	       (n = ibv_poll_cq(be->cq, NTX_VB_POLL_BATCH, wc)) > 0) {
		cnt += ntx_vb_handle(be, wc, n);
		if (n < NTX_VB_POLL_BATCH)
			break;
	}
	return cnt;
}

static int ntx_vb_poll(struct ntx_be_ep *be)
{
	/* the event channel costs a syscall: read it only when it has news
	 * or a connection is being set up */
	if ((ntx_fdwatch_pending(&be->cm_watch) &&
	     ntx_fdwatch_news(&be->cm_watch)) || be->cm_pending) {
		ntx_vb_cm_events(be);
		ntx_fdwatch_rearm(&be->cm_watch); /* drained */
	}
	if (be->armed) {
		struct ibv_cq *cq;
		void *ctx;

		while (!ibv_get_cq_event(be->cch, &cq, &ctx))
			ibv_ack_cq_events(cq, 1);
	}
	return ntx_vb_poll_cq(be);
}

static void ntx_vb_check_peers(struct ntx_be_ep *be)
{
	/* RC reports dead peers itself: retry exhaustion, DISCONNECTED */
	ntx_vb_cm_events(be);
}

/* The next completion writes the channel; connection events always do.
 * Whoever sleeps re-checks with poll first. */
static void ntx_vb_arm(struct ntx_be_ep *be)
{
	be->armed = true;
	ibv_req_notify_cq(be->cq, 0);
}

static void ntx_vb_disarm(struct ntx_be_ep *be)
{
	(void)be;
}

static int ntx_vb_wait_fd(struct ntx_be_ep *be)
{
	return be->epfd;
}

/* ---- instance ------------------------------------------------------------------ */

static int ntx_vb_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) ? -FI_EIO : 0;
}

static int ntx_vb_bufs(struct ntx_be_ep *be)
{
	size_t rx = (size_t)be->nrx * NTX_VB_SLOT, tx = (size_t)be->ntx * NTX_VB_SLOT;
	uint32_t idx[NTX_VB_POLL_BATCH];

	if (posix_memalign((void **)&be->rxbuf, 4096, rx) ||
	    posix_memalign((void **)&be->txbuf, 4096, tx))
		return -FI_ENOMEM;
	be->rxmr = ibv_reg_mr(be->pd, be->rxbuf, rx, IBV_ACCESS_LOCAL_WRITE);
	be->txmr = ibv_reg_mr(be->pd, be->txbuf, tx, 0);
	be->txfree = calloc(be->ntx, sizeof(*be->txfree));
	be->txgen = calloc(be->ntx, sizeof(*be->txgen));
	be->txowner = calloc(be->ntx, sizeof(*be->txowner));
	if (!be->rxmr || !be->txmr || !be->txfree || !be->txgen ||
	    !be->txowner)
		return -FI_ENOMEM;
	for (uint32_t i = 0; i < be->ntx; i++)
		be->txfree[be->ntxfree++] = be->ntx - 1 - i;
	for (uint32_t i = 0; i < be->nrx; i += NTX_VB_POLL_BATCH) {
		uint32_t n = 0;

		while (n < NTX_VB_POLL_BATCH && i + n < be->nrx) {
			idx[n] = i + n;
			n++;
		}
		if (ntx_vb_post_recv(be, idx, n))
			return -FI_EIO;
	}
	return 0;
}

/* Closing: the sends of lingering connections complete, or the time is
 * up; arrivals are dropped (nobody takes them any more). */
static void ntx_vb_linger(struct ntx_be_ep *be)
{
	uint64_t end = ntx_now_ns() + NTX_VB_LINGER_MS * 1000000ull;
	struct ibv_wc wc[NTX_VB_POLL_BATCH];
	int n;

	for (uint32_t i = 0; i < be->ndeferred; i++) /* set aside by a move */
		if (!(be->deferred[i].wr_id & (NTX_VB_WR_RECV | NTX_VB_WR_BULK)))
			ntx_vb_on_send_wc(be, &be->deferred[i]);
	be->ndeferred = 0;
	while (be->nlinger && ntx_now_ns() < end) {
		n = ibv_poll_cq(be->cq, NTX_VB_POLL_BATCH, wc);
		if (n < 0)
			break;
		for (int i = 0; i < n; i++)
			if (!(wc[i].wr_id & (NTX_VB_WR_RECV | NTX_VB_WR_BULK)))
				ntx_vb_on_send_wc(be, &wc[i]);
	}
	if (be->nlinger)
		NTX_WARN(FI_LOG_EP_CTRL, "closing: %u connections still had "
			 "sends in flight after %d ms\n", be->nlinger,
			 NTX_VB_LINGER_MS);
}

static void ntx_vb_close(struct ntx_be_ep *be)
{
	struct ntx_list *it, *tmp;

	if (be->cq)
		ntx_vb_linger(be);
	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_vb_destroy(ntx_container_of(it, struct ntx_be_conn, entry));
	ntx_verbs_cache_close(be->cache);
	if (be->srq)
		ibv_destroy_srq(be->srq);
	if (be->cq)
		ibv_destroy_cq(be->cq);
	if (be->cch)
		ibv_destroy_comp_channel(be->cch);
	if (be->rxmr)
		ibv_dereg_mr(be->rxmr);
	if (be->txmr)
		ibv_dereg_mr(be->txmr);
	if (be->pd)
		ibv_dealloc_pd(be->pd);
	if (be->listen)
		rdma_destroy_id(be->listen);
	ntx_fdwatch_close(&be->cm_watch);
	if (be->ech)
		rdma_destroy_event_channel(be->ech);
	if (be->epfd >= 0)
		close(be->epfd);
	free(be->rxbuf);
	free(be->txbuf);
	free(be->txfree);
	free(be->txgen);
	free(be->txowner);
	free(be->deferred);
	free(be->deferred_spare);
	free(be);
}

static pid_t ntx_vb_rdmacm_pid; /* the process that initialized rdma_cm */

static int ntx_vb_open(struct ntx_be_ep **out, const struct ntx_addr *want,
		       const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_be_ep *be = calloc(1, sizeof(*be));
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct epoll_event ev = { .events = EPOLLIN };
	struct ntx_vb_devinfo d;
	uint32_t cqe;
	int ret;

	if (!be)
		return -FI_ENOMEM;
	be->epfd = -1;
	be->cb = *cb;
	ntx_list_init(&be->conns);
	for (int i = 0; i < NTX_VB_QPN_BUCKETS; i++)
		ntx_list_init(&be->qpn_hash[i]);
	ret = dev ? ntx_vb_dev_find(dev, &d) : -FI_ENODEV;
	if (ret) {
		NTX_WARN(FI_LOG_DOMAIN, "verbs device %s is not usable\n",
			 dev ? dev : "(none)");
		goto fail;
	}
	/* limits read from the device */
	be->nrx = d.max_srq_wr < 512 ? d.max_srq_wr : 512;
	be->ntx = d.max_qp_wr < 256 ? d.max_qp_wr : 256;
	be->rd_atom = d.max_qp_rd_atom < 16 ? d.max_qp_rd_atom : 16;
	be->max_inline = 256;
	be->max_sge = d.max_sge < NTX_MAX_IOV ? d.max_sge : NTX_MAX_IOV;
	if (!be->max_sge)
		be->max_sge = 1;
	cqe = be->nrx + be->ntx + NTX_VB_BULK_MAX;
	if (cqe > d.max_cqe) {
		ret = -FI_ENOMEM;
		NTX_WARN(FI_LOG_DOMAIN, "%s: CQ of %u entries is too small\n",
			 dev, d.max_cqe);
		goto fail;
	}
	/* librdmacm keeps the devices it opened for the whole process: in a
	 * child forked after that they cannot be used (the kernel refuses
	 * another process's device files) */
	if (ntx_vb_rdmacm_pid && ntx_vb_rdmacm_pid != getpid()) {
		NTX_WARN(FI_LOG_DOMAIN, "%s: this process was forked after its "
			 "parent used the device; open verbs endpoints before "
			 "fork or in a fresh process\n", dev);
		ret = -FI_ENODEV;
		goto fail;
	}
	ntx_vb_rdmacm_pid = getpid();
	ret = -FI_ENOMEM;
	be->ech = rdma_create_event_channel();
	if (!be->ech || ntx_vb_nonblock(be->ech->fd))
		goto fail;
	ntx_fdwatch_open(&be->cm_watch, be->ech->fd);
	if (rdma_create_id(be->ech, &be->listen, NULL, RDMA_PS_TCP)) {
		be->listen = NULL;
		goto fail;
	}
	sin.sin_addr.s_addr = d.ip4;
	sin.sin_port = want ? htons((uint16_t)want->service) : 0;
	if (rdma_bind_addr(be->listen, (struct sockaddr *)&sin) ||
	    rdma_listen(be->listen, 512)) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: rdma_cm listen: %s\n", dev,
			 strerror(errno));
		ret = -FI_EADDRINUSE;
		goto fail;
	}
	be->ctx = be->listen->verbs;
	if (!be->ctx || strcmp(ibv_get_device_name(be->ctx->device), dev)) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: its address is on another "
			 "device\n", dev);
		ret = -FI_ENODEV;
		goto fail;
	}
	be->pd = ibv_alloc_pd(be->ctx);
	be->cch = be->pd ? ibv_create_comp_channel(be->ctx) : NULL;
	if (!be->cch || ntx_vb_nonblock(be->cch->fd))
		goto fail;
	be->cq = ibv_create_cq(be->ctx, (int)cqe, be, be->cch, 0);
	if (!be->cq)
		goto fail;
	{
		struct ibv_srq_init_attr sa = {
			.attr = { .max_wr = be->nrx, .max_sge = 1 },
		};

		be->srq = ibv_create_srq(be->pd, &sa);
	}
	if (!be->srq || ntx_vb_bufs(be))
		goto fail;
	be->deferred_cap = cqe;
	be->deferred = calloc(cqe, sizeof(*be->deferred));
	be->deferred_spare = calloc(cqe, sizeof(*be->deferred));
	if (!be->deferred || !be->deferred_spare)
		goto fail;
	be->cache = ntx_verbs_cache_open(be->pd);
	if (!be->cache)
		goto fail;
	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (be->epfd < 0 ||
	    epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->cch->fd, &ev) ||
	    epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->ech->fd, &ev))
		goto fail;
	be->addr.ip4 = d.ip4;
	be->addr.port = rdma_get_src_port(be->listen);
	NTX_INFO(FI_LOG_DOMAIN, "%s: max_cqe %u max_qp_wr %u max_srq_wr %u "
		 "max_sge %u max_qp_rd_atom %u atomic_cap %d (atomics run in "
		 "ntx's target progress, not the device's)\n", dev, d.max_cqe,
		 d.max_qp_wr, d.max_srq_wr, d.max_sge, d.max_qp_rd_atom,
		 d.atomic_cap);
	NTX_INFO(FI_LOG_DOMAIN, "%s: %u eager buffers, %u send slots, inline "
		 "%u, port %u\n", dev, be->nrx, be->ntx, be->max_inline,
		 ntohs(be->addr.port));
	*out = be;
	return 0;
fail:
	ntx_vb_close(be);
	return ret;
}

static void ntx_vb_getname(struct ntx_be_ep *be, struct ntx_addr *addr)
{
	addr->ip4 = be->addr.ip4;
	addr->port = be->addr.port;
}

static void ntx_vb_setname(struct ntx_be_ep *be, const struct ntx_addr *addr)
{
	be->addr = *addr;
}

/* The peer's FI_NTX_EAGER_MAX, from its private data. */
static size_t ntx_vb_conn_eager(const struct ntx_be_conn *c)
{
	return c->peer_eager;
}

static int ntx_vb_resolve(struct ntx_addr *addr)
{
	return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
}

/* ---- bulk moves: RDMA read/write of registered memory ------------------------ */

#define NTX_VB_ACCESS_LOCAL IBV_ACCESS_LOCAL_WRITE
#define NTX_VB_ACCESS_READ (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
#define NTX_VB_ACCESS_WRITE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

/* A peer may move [addr, addr + len) with this key while the
 * registration stays cached (see ntx_verbs.h). */
static uint64_t ntx_vb_expose(struct ntx_be_conn *c, void *addr, size_t len,
			      bool writable)
{
	struct ntx_vb_reg *reg;
	uint64_t key;

	if (!ntx_verbs_cache_keeps(c->be->cache) || !len)
		return NTX_KEY_NONE;
	reg = ntx_verbs_cache_get(c->be->cache, addr, len,
				  writable ? NTX_VB_ACCESS_WRITE
					   : NTX_VB_ACCESS_READ);
	if (!reg)
		return NTX_KEY_NONE;
	key = ntx_verbs_reg_rkey(reg);
	ntx_verbs_cache_put(c->be->cache, reg);
	return key;
}

/* Completions that arrive while a bulk move waits: run at the next poll,
 * outside the engine callback that started the move. */
static void ntx_vb_defer(struct ntx_be_ep *be, const struct ibv_wc *wc)
{
	if (be->ndeferred < be->deferred_cap)
		be->deferred[be->ndeferred++] = *wc;
	else
		NTX_WARN(FI_LOG_EP_DATA, "deferred completions overflow\n");
}

static void ntx_vb_bulk_wc(struct ntx_be_ep *be, const struct ibv_wc *wc)
{
	if (be->bulk_wait)
		be->bulk_wait--;
	if (wc->status == IBV_WC_SUCCESS || be->bulk_err)
		return;
	NTX_INFO(FI_LOG_EP_DATA, "RDMA %s failed: %s\n",
		 wc->opcode == IBV_WC_RDMA_READ ? "read" : "write",
		 ibv_wc_status_str(wc->status));
	/* a key the peer no longer honours: the engine resends the bytes
	 * in packets (the QP is broken either way: the VC fails) */
	be->bulk_err = wc->status == IBV_WC_REM_ACCESS_ERR ? -FI_EOPNOTSUPP
							   : -FI_EIO;
}

/* One RDMA read or write per remote iovec, gathering from or scattering
 * to the local ones; waits for the completions (other completions that
 * arrive meanwhile are deferred to the next poll). Returns bytes moved. */
static ssize_t ntx_vb_bulk(struct ntx_be_conn *c, bool write,
			   const struct iovec *local, size_t nlocal,
			   const struct ntx_wire_iov *remote, size_t nremote)
{
	struct ntx_be_ep *be = c->be;
	struct ibv_send_wr wr[NTX_MAX_IOV], *bad;
	struct ibv_sge sge[NTX_MAX_IOV][NTX_MAX_IOV];
	struct ntx_vb_reg *reg[NTX_MAX_IOV] = { 0 };
	size_t li = 0, loff = 0, total = 0;
	uint32_t nwr = 0;
	int ret = 0;

	if (c->state != NTX_VB_OPEN)
		return c->state == NTX_VB_FAILED ? -FI_ECONNRESET
						 : -FI_EOPNOTSUPP;
	if (nlocal > NTX_MAX_IOV || nremote > NTX_MAX_IOV)
		return -FI_EINVAL;
	for (size_t r = 0; r < nremote; r++)
		if (remote[r].key > UINT32_MAX)
			return -FI_EOPNOTSUPP; /* the peer gave no key */
	for (size_t i = 0; i < nlocal; i++) {
		reg[i] = ntx_verbs_cache_get(be->cache, local[i].iov_base,
					     local[i].iov_len,
					     NTX_VB_ACCESS_LOCAL);
		if (!reg[i]) {
			ret = -FI_EOPNOTSUPP;
			goto out;
		}
	}
	for (size_t r = 0; r < nremote && li < nlocal; r++) {
		size_t need = remote[r].len;
		int ns = 0;

		while (need && li < nlocal && ns < (int)be->max_sge) {
			size_t m = local[li].iov_len - loff;

			if (m > need)
				m = need;
			sge[nwr][ns].addr = (uintptr_t)local[li].iov_base + loff;
			sge[nwr][ns].length = (uint32_t)m;
			sge[nwr][ns].lkey = ntx_verbs_reg_lkey(reg[li]);
			ns++;
			need -= m;
			loff += m;
			if (loff == local[li].iov_len) {
				li++;
				loff = 0;
			}
		}
		memset(&wr[nwr], 0, sizeof(wr[nwr]));
		wr[nwr].wr_id = NTX_VB_WR_BULK | nwr;
		wr[nwr].sg_list = sge[nwr];
		wr[nwr].num_sge = ns;
		wr[nwr].opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
		wr[nwr].send_flags = IBV_SEND_SIGNALED;
		wr[nwr].wr.rdma.remote_addr = remote[r].addr;
		wr[nwr].wr.rdma.rkey = (uint32_t)remote[r].key;
		if (nwr)
			wr[nwr - 1].next = &wr[nwr];
		total += remote[r].len - need;
		nwr++;
		if (need)
			break; /* the rest in the next call */
	}
	if (!nwr) {
		ret = -FI_EINVAL;
		goto out;
	}
	be->bulk_err = 0;
	be->bulk_wait = nwr;
	if (ibv_post_send(c->id->qp, wr, &bad)) {
		be->bulk_wait = 0;
		ret = -FI_EOPNOTSUPP;
		goto out;
	}
	while (be->bulk_wait) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(be->cq, 1, &wc);

		if (n < 0) {
			be->bulk_err = -FI_EIO;
			break;
		}
		if (n == 0)
			continue;
		if (wc.wr_id & NTX_VB_WR_BULK)
			ntx_vb_bulk_wc(be, &wc);
		else
			ntx_vb_defer(be, &wc);
	}
	ret = be->bulk_err;
	if (ret == -FI_EIO)
		ntx_vb_fail(c, -FI_ECONNRESET);
	else if (ret)
		ntx_vb_fail(c, -FI_EREMOTEIO);
out:
	for (size_t i = 0; i < nlocal; i++)
		if (reg[i])
			ntx_verbs_cache_put(be->cache, reg[i]);
	return ret ? ret : (ssize_t)total;
}

static ssize_t ntx_vb_bulk_read(struct ntx_be_conn *c,
				const struct iovec *local, size_t nlocal,
				const struct ntx_wire_iov *remote,
				size_t nremote)
{
	return ntx_vb_bulk(c, false, local, nlocal, remote, nremote);
}

static ssize_t ntx_vb_bulk_write(struct ntx_be_conn *c,
				 const struct iovec *local, size_t nlocal,
				 const struct ntx_wire_iov *remote,
				 size_t nremote)
{
	return ntx_vb_bulk(c, true, local, nlocal, remote, nremote);
}

static const struct ntx_be_ops ntx_verbs_ops = {
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

/* Each usable device is a domain, with the device's limits. */
static int ntx_vb_domains(struct ntx_be_domain *out, int max)
{
	struct ntx_vb_devinfo v[16];
	int n = ntx_verbs_devices(v, max < 16 ? max : 16);

	for (int i = 0; i < n; i++) {
		_Static_assert(sizeof(out[i].name) == sizeof(v[i].name),
			       "device names");
		memset(&out[i], 0, sizeof(out[i]));
		memcpy(out[i].name, v[i].name, sizeof(out[i].name));
		out[i].ep_cnt = v[i].max_qp;
		out[i].cq_cnt = v[i].max_cq;
		out[i].mr_cnt = v[i].max_mr;
		/* sends wait in the engine, receives in its queues; the
		 * device bounds its own queues */
		out[i].tx_size = v[i].max_qp_wr;
		out[i].rx_size = v[i].max_srq_wr;
	}
	return n;
}

static struct ntx_be_desc ntx_verbs_desc = {
	.name = "verbs",
	.ops = &ntx_verbs_ops,
	.order = 10,
	.domains = ntx_vb_domains,
};
NTX_BE_REGISTER(ntx_verbs_desc)
