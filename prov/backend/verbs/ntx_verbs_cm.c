/*
 * Connections of the verbs back end (DESIGN §5): one RC QP per VC, set up
 * over rdma_cm. A connect request carries our name and FI_NTX_EAGER_MAX
 * as private data, its accept the acceptor's FI_NTX_EAGER_MAX. A
 * connection the engine lets go lingers until its posted sends complete.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_verbs.h"

#define NTX_VB_CM_TIMEOUT_MS 5000
/* how long closing waits for sends still in flight: two resends (the ack
 * time-out is ~1.07 s) of a peer that is alive but slow */
#define NTX_VB_LINGER_MS 3000

static struct ntx_list *ntx_vb_bucket(struct ntx_vb_ep *be, uint32_t qpn)
{
	return &be->qpn_hash[(qpn ^ (qpn >> 8)) % NTX_VB_QPN_BUCKETS];
}

struct ntx_vb_conn *ntx_vb_by_qpn(struct ntx_vb_ep *be, uint32_t qpn)
{
	struct ntx_list *b = ntx_vb_bucket(be, qpn), *it;

	ntx_list_foreach(b, it) {
		struct ntx_vb_conn *c =
			ntx_container_of(it, struct ntx_vb_conn, qpn_entry);
		if (c->qpn == qpn)
			return c;
	}
	return NULL;
}

void ntx_vb_fail(struct ntx_vb_conn *c, int err)
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

static struct ntx_vb_conn *ntx_vb_conn_new(struct ntx_vb_ep *be)
{
	struct ntx_vb_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->head.ops = &ntx_verbs_ops;
	c->be = be;
	ntx_list_init(&c->qpn_entry);
	ntx_list_insert_tail(&be->conns, &c->entry);
	return c;
}

static int ntx_vb_create_qp(struct ntx_vb_conn *c)
{
	struct ntx_vb_ep *be = c->be;
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

static void ntx_vb_conn_param(struct ntx_vb_ep *be,
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

void ntx_vb_destroy(struct ntx_vb_conn *c)
{
	struct ntx_vb_ep *be = c->be;

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
 * closing after waiting at most NTX_VB_LINGER_MS (ntx_vb_linger). */
void ntx_vb_disconnect(struct ntx_be_conn *conn)
{
	struct ntx_vb_conn *c = ntx_vb_conn_of(conn);

	if (c->state == NTX_VB_OPEN && c->inflight && !c->lingering) {
		c->vc = NULL; /* what still arrives is dropped */
		c->lingering = true;
		c->be->nlinger++;
		return;
	}
	ntx_vb_destroy(c);
}

int ntx_vb_connect(struct ntx_be_ep *bep, const struct ntx_addr *peer,
		   void *vc, struct ntx_be_conn **conn)
{
	struct ntx_vb_ep *be = ntx_vb_ep_of(bep);
	struct sockaddr_in src = { .sin_family = AF_INET,
				   .sin_addr.s_addr = be->addr.ip4 };
	struct sockaddr_in dst = { .sin_family = AF_INET,
				   .sin_addr.s_addr = peer->ip4,
				   .sin_port = peer->port };
	struct ntx_vb_conn *c;

	/* a peer on this host named by loopback is reached on our device */
	if (peer->host == ntx_host_id() &&
	    (ntx_ip4_loopback(peer->ip4) || !peer->ip4))
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
	*conn = &c->head;
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

/* Turns a connection request down; the id was never ours. */
static void ntx_vb_refuse(struct rdma_cm_id *id)
{
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
}

/* A request may claim only a name on the address it comes from (as on
 * tcp, DESIGN §7): a name on loopback, or none, only from our own
 * device's address, which is where ntx_vb_connect sends a same-host
 * peer's request from. */
static bool ntx_vb_may_claim(const struct ntx_vb_ep *be, struct rdma_cm_id *id,
			     const struct ntx_addr *from)
{
	const struct sockaddr *sa = rdma_get_peer_addr(id);
	const struct sockaddr_in6 *s6 = (const void *)sa;
	uint32_t src;

	if (sa && sa->sa_family == AF_INET)
		src = ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
	else if (sa && sa->sa_family == AF_INET6 &&
		 IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr))
		memcpy(&src, &s6->sin6_addr.s6_addr[12], sizeof(src));
	else
		return false;
	if (from->ip4 && !ntx_ip4_loopback(from->ip4))
		return src == from->ip4;
	return src == be->addr.ip4;
}

/* A peer's connection request: its name is the private data. */
static void ntx_vb_on_request(struct ntx_vb_ep *be, struct rdma_cm_id *id,
			      const struct rdma_conn_param *p)
{
	int64_t eager = ntx_vb_peer_eager(p);
	struct rdma_conn_param ours;
	struct ntx_addr from;
	struct ntx_vb_conn *c;

	if (!p->private_data || p->private_data_len < sizeof(from)) {
		NTX_WARN(FI_LOG_EP_CTRL, "connection request without a name\n");
		ntx_vb_refuse(id);
		return;
	}
	memcpy(&from, p->private_data, sizeof(from));
	if (!ntx_addr_valid(&from) || eager < 0) {
		NTX_WARN(FI_LOG_EP_CTRL, "connection request with a bad name\n");
		ntx_vb_refuse(id);
		return;
	}
	if (!ntx_vb_may_claim(be, id, &from)) {
		NTX_WARN(FI_LOG_EP_CTRL, "connection request that claims a "
			 "name on another address (pid %u)\n", from.pid);
		ntx_vb_refuse(id);
		return;
	}
	c = ntx_vb_conn_new(be);
	if (!c) {
		ntx_vb_refuse(id);
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
	c->vc = be->cb.accept(be->cb.ctx, &c->head, &from);
	if (!c->vc)
		c->state = NTX_VB_FAILED;
}

/* Closing: the sends of lingering connections complete, or the time is
 * up; arrivals are dropped (nobody takes them any more). */
void ntx_vb_linger(struct ntx_vb_ep *be)
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

/* Our connect ran its course: address, route, then the QP and the
 * request; the peer's accept (ESTABLISHED) opens it. */
static void ntx_vb_on_route(struct ntx_vb_conn *c)
{
	struct rdma_conn_param ours;

	ntx_vb_conn_param(c->be, &ours);
	if (ntx_vb_create_qp(c) || rdma_connect(c->id, &ours))
		ntx_vb_fail(c, -FI_ECONNREFUSED);
	else
		c->state = NTX_VB_CONNECTING;
}

static void ntx_vb_on_established(struct ntx_vb_conn *c, int64_t eager)
{
	if (c->state != NTX_VB_CONNECTING)
		return;
	if (eager < 0) {
		ntx_vb_fail(c, -FI_EREMOTEIO);
		return;
	}
	c->be->cm_pending--;
	c->state = NTX_VB_OPEN;
	c->peer_eager = (uint32_t)eager;
	c->be->cb.connected(c->vc);
}

static void ntx_vb_on_disconnected(struct ntx_vb_conn *c)
{
	if (c->lingering) { /* nobody to send to any more */
		ntx_vb_destroy(c);
		return;
	}
	/* the peer's last messages completed on its side before it
	 * disconnected, so they are in our CQ: they go to the engine before
	 * the connection fails (its arrivals are dropped then) */
	if (c->state == NTX_VB_OPEN)
		ntx_vb_poll_cq(c->be);
	ntx_vb_fail(c, -FI_ECONNRESET);
}

/* An event of one of our connections, after its ack; 'eager' is what an
 * accept's private data said (ESTABLISHED only). */
static void ntx_vb_on_event(struct ntx_vb_conn *c,
			    enum rdma_cm_event_type event, int64_t eager)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(c->id, NTX_VB_CM_TIMEOUT_MS))
			ntx_vb_fail(c, -FI_EHOSTUNREACH);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		ntx_vb_on_route(c);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		ntx_vb_on_established(c, eager);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		NTX_INFO(FI_LOG_EP_CTRL, "connection failed: %s\n",
			 rdma_event_str(event));
		ntx_vb_fail(c, -FI_ECONNREFUSED);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ntx_vb_on_disconnected(c);
		break;
	default:
		break;
	}
}

int ntx_vb_cm_events(struct ntx_vb_ep *be)
{
	struct rdma_cm_event *ev;
	int cnt = 0;

	while (!rdma_get_cm_event(be->ech, &ev)) {
		struct rdma_cm_event e = *ev;
		struct ntx_vb_conn *c = e.id->context;
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
		if (c && e.id != be->listen)
			ntx_vb_on_event(c, e.event, eager);
	}
	return cnt;
}

void ntx_vb_check_peers(struct ntx_be_ep *be)
{
	/* RC reports dead peers itself: retry exhaustion, DISCONNECTED */
	ntx_vb_cm_events(ntx_vb_ep_of(be));
}

/* The peer's FI_NTX_EAGER_MAX, from its private data. */
size_t ntx_vb_conn_eager(const struct ntx_be_conn *conn)
{
	const struct ntx_vb_conn *c =
		ntx_container_of(conn, const struct ntx_vb_conn, head);

	return c->peer_eager;
}

static pid_t ntx_vb_rdmacm_pid; /* the process that initialized rdma_cm */

/* librdmacm keeps the devices it opened for the whole process: in a child
 * forked after that they cannot be used (the kernel refuses another
 * process's device files). */
static int ntx_vb_cm_fork_check(const char *dev)
{
	if (ntx_vb_rdmacm_pid && ntx_vb_rdmacm_pid != getpid()) {
		NTX_WARN(FI_LOG_DOMAIN, "%s: this process was forked after its "
			 "parent used the device; open verbs endpoints before "
			 "fork or in a fresh process\n", dev);
		return -FI_ENODEV;
	}
	ntx_vb_rdmacm_pid = getpid();
	return 0;
}

int ntx_vb_cm_listen(struct ntx_vb_ep *be, const struct ntx_vb_devinfo *d,
		     const struct ntx_addr *want)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = d->ip4 };

	if (ntx_vb_cm_fork_check(d->name))
		return -FI_ENODEV;
	be->ech = rdma_create_event_channel();
	if (!be->ech || ntx_vb_nonblock(be->ech->fd))
		return -FI_ENOMEM;
	ntx_fdwatch_open(&be->cm_watch, be->ech->fd);
	if (rdma_create_id(be->ech, &be->listen, NULL, RDMA_PS_TCP)) {
		be->listen = NULL;
		return -FI_ENOMEM;
	}
	sin.sin_port = want ? htons((uint16_t)want->service) : 0;
	if (rdma_bind_addr(be->listen, (struct sockaddr *)&sin) ||
	    rdma_listen(be->listen, 512)) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: rdma_cm listen: %s\n", d->name,
			 strerror(errno));
		return -FI_EADDRINUSE;
	}
	be->ctx = be->listen->verbs;
	if (!be->ctx ||
	    strcmp(ibv_get_device_name(be->ctx->device), d->name)) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: its address is on another "
			 "device\n", d->name);
		return -FI_ENODEV;
	}
	return 0;
}

void ntx_vb_cm_close(struct ntx_vb_ep *be)
{
	if (be->listen)
		rdma_destroy_id(be->listen);
	ntx_fdwatch_close(&be->cm_watch);
	if (be->ech)
		rdma_destroy_event_channel(be->ech);
}
