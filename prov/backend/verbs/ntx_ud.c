/*
 * The ud back end (DESIGN §10, "The ud back end"): the udp domain's
 * protocol over a verbs device's unreliable datagrams. One UD QP, one CQ
 * and one completion channel per endpoint; no connection and no set-up
 * round trip per peer. ntx_dgram.c and ntx_dg_session.c keep the peers,
 * ntx_rel*.c the reliability; this file moves datagrams: a pool of
 * registered receive buffers (each with room for the 40-byte GRH), send
 * slots posted in batches, one address handle per peer made on first
 * use. Each verbs device with a RoCE port is one extra domain,
 * "<dev>-ud", listed only when named.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../dgram/ntx_dgram.h"
#include "ntx_verbs.h"

#define NTX_UD_SUFFIX "-ud"
#define NTX_UD_GRH 40     /* what precedes each arrival in its buffer */
#define NTX_UD_QKEY 0x4e545855u /* "NTXU": other UD traffic is not ours */
#define NTX_UD_NRX 256    /* receive buffers per endpoint */
#define NTX_UD_NTX 128    /* send slots per endpoint */
#define NTX_UD_BATCH 32   /* completions per poll, sends per post */
#define NTX_UD_RX_ROUNDS 4
#define NTX_UD_WINDOW 128 /* datagrams in flight per peer: below NTX_UD_NRX */
#define NTX_UD_INLINE 256
#define NTX_UD_WR_RECV (1ull << 63)
#define NTX_UD_QPN_MAX (1u << (16 + 8 - NTX_ADDR_F_QPN_SHIFT))
_Static_assert(NTX_UD_WINDOW < NTX_UD_NRX,
	       "one sender's window must not overrun the receive buffers");
_Static_assert(NTX_UD_NRX % NTX_UD_BATCH == 0,
	       "receive buffers are posted in whole batches");

/* An address handle the device may still use: destroyed once every send
 * posted before it was let go has completed. */
struct ntx_ud_grave {
	struct ntx_ud_grave *next;
	struct ibv_ah *ah;
};

struct ntx_ud_ep {
	struct ntx_dg_ep dg; /* first: the peers, rel, the wait set */
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cch;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *rxmr, *txmr;
	uint8_t *rxbuf, *txbuf;
	size_t dgram;       /* bytes of a datagram: the port's active MTU */
	size_t slot;        /* bytes of a receive buffer: GRH + dgram */
	uint32_t ip4;       /* the device's address (its RoCE v2 GID) */
	uint8_t gid_index;
	uint32_t max_inline;
	uint32_t txfree[NTX_UD_NTX], ntxfree;
	/* sends emit collected, posted by the flush with one call */
	struct ibv_send_wr wr[NTX_UD_BATCH];
	struct ibv_sge sge[NTX_UD_BATCH];
	uint32_t nwr;
	struct ntx_ud_grave *graves;
	bool armed; /* the CQ may have a notification queued */
	uint64_t bad; /* datagrams dropped here (malformed, no GRH) */
};

static const struct ntx_be_ops ntx_ud_ops;

static inline struct ntx_ud_ep *ntx_ud_of(struct ntx_dg_ep *dg)
{
	return ntx_container_of(dg, struct ntx_ud_ep, dg);
}

/* The QP number a name carries (DESIGN §10: port and flag bits). */
static uint32_t ntx_ud_name_qpn(const struct ntx_addr *a)
{
	return ntohs(a->port) |
	       (uint32_t)((a->flags & NTX_ADDR_F_QPN_MASK) >>
			  NTX_ADDR_F_QPN_SHIFT) << 16;
}

/* ---- datagrams out --------------------------------------------------------- */

/* The peer's address handle: its RoCE v2 GID is its IPv4 address. */
static struct ibv_ah *ntx_ud_ah(struct ntx_ud_ep *ep, struct ntx_dg_conn *c)
{
	struct ibv_ah_attr aa = {
		.is_global = 1,
		.port_num = 1,
		.grh = { .sgid_index = ep->gid_index, .hop_limit = 64 },
	};

	if (c->priv)
		return c->priv;
	aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
	memcpy(aa.grh.dgid.raw + 12, &c->ip4, sizeof(c->ip4));
	c->priv = ibv_create_ah(ep->pd, &aa);
	if (!c->priv)
		NTX_WARN(FI_LOG_EP_DATA, "ud: ibv_create_ah for %s: %s\n",
			 inet_ntoa((struct in_addr){ c->ip4 }), strerror(errno));
	return c->priv;
}

/* Posts the batch; a refused post frees its slots (the datagrams are lost
 * as on the wire: rel resends them). */
static void ntx_ud_post(struct ntx_ud_ep *ep)
{
	struct ibv_send_wr *bad = NULL;

	if (!ep->nwr)
		return;
	ep->wr[ep->nwr - 1].next = NULL;
	if (ibv_post_send(ep->qp, ep->wr, &bad)) {
		NTX_DBG(FI_LOG_EP_DATA, "ud: ibv_post_send: %s\n",
			strerror(errno));
		for (; bad; bad = bad->next)
			ep->txfree[ep->ntxfree++] = (uint32_t)bad->wr_id;
	}
	ep->nwr = 0;
}

static int ntx_ud_emit(struct ntx_dg_ep *dg, struct ntx_dg_conn *c,
		       const void *hdr, size_t hdr_len, const void *payload,
		       size_t len)
{
	struct ntx_ud_ep *ep = ntx_ud_of(dg);
	struct ibv_ah *ah = ntx_ud_ah(ep, c);
	struct ibv_send_wr *wr = &ep->wr[ep->nwr];
	uint32_t slot;
	uint8_t *buf;

	if (!ah)
		return 0; /* lost: rel gives up on the peer in time */
	if (ep->nwr == NTX_UD_BATCH)
		ntx_ud_post(ep);
	if (!ep->ntxfree)
		return -FI_EAGAIN; /* the next poll's completions free slots */
	wr = &ep->wr[ep->nwr];
	slot = ep->txfree[--ep->ntxfree];
	buf = ep->txbuf + (size_t)slot * ep->dgram;
	memcpy(buf, hdr, hdr_len);
	if (len)
		memcpy(buf + hdr_len, payload, len);
	ep->sge[ep->nwr] = (struct ibv_sge){ (uintptr_t)buf,
					     (uint32_t)(hdr_len + len),
					     ep->txmr->lkey };
	*wr = (struct ibv_send_wr){
		.wr_id = slot, .sg_list = &ep->sge[ep->nwr], .num_sge = 1,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = ah, .remote_qpn = c->port,
			   .remote_qkey = NTX_UD_QKEY } };
	if (hdr_len + len <= ep->max_inline)
		wr->send_flags |= IBV_SEND_INLINE;
	if (ep->nwr)
		ep->wr[ep->nwr - 1].next = wr;
	ep->nwr++;
	return 0;
}

static void ntx_ud_flush(struct ntx_dg_ep *dg, uint64_t now)
{
	(void)now;
	ntx_ud_post(ntx_ud_of(dg));
}

/* A peer is freed: its address handle goes now, or once the sends that
 * may use it are complete. */
static void ntx_ud_conn_fini(struct ntx_dg_ep *dg, struct ntx_dg_conn *c)
{
	struct ntx_ud_ep *ep = ntx_ud_of(dg);
	struct ntx_ud_grave *g;

	if (!c->priv)
		return;
	ntx_ud_post(ep);
	if (ep->ntxfree == NTX_UD_NTX || !(g = malloc(sizeof(*g)))) {
		ibv_destroy_ah(c->priv);
	} else {
		g->ah = c->priv;
		g->next = ep->graves;
		ep->graves = g;
	}
	c->priv = NULL;
}

static void ntx_ud_bury(struct ntx_ud_ep *ep)
{
	while (ep->graves) {
		struct ntx_ud_grave *g = ep->graves;

		ep->graves = g->next;
		ibv_destroy_ah(g->ah);
		free(g);
	}
}

/* ---- datagrams in --------------------------------------------------------- */

static void ntx_ud_post_recv(struct ntx_ud_ep *ep, const uint32_t *idx,
			     uint32_t n)
{
	struct ibv_recv_wr wr[NTX_UD_BATCH], *bad;
	struct ibv_sge sge[NTX_UD_BATCH];

	for (uint32_t i = 0; i < n; i++) {
		sge[i] = (struct ibv_sge){
			(uintptr_t)(ep->rxbuf + (size_t)idx[i] * ep->slot),
			(uint32_t)ep->slot, ep->rxmr->lkey };
		wr[i] = (struct ibv_recv_wr){ .wr_id = NTX_UD_WR_RECV | idx[i],
					      .sg_list = &sge[i], .num_sge = 1,
					      .next = i + 1 < n ? &wr[i + 1]
								: NULL };
	}
	if (n && ibv_post_recv(ep->qp, wr, &bad))
		NTX_WARN(FI_LOG_EP_DATA, "ud: ibv_post_recv failed\n");
}

/* The sender's IPv4 address from what precedes the datagram: an IPv6
 * GRH with a v4-mapped source GID, or (RoCE v2 over IPv4) the IPv4
 * header in the GRH's last 20 bytes. 0 when it is neither. */
static uint32_t ntx_ud_src_ip4(const uint8_t *grh)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0,
					      0, 0, 0xff, 0xff };
	uint32_t ip = 0;

	if (grh[0] >> 4 == 6 && !memcmp(grh + 8, v4mapped, sizeof(v4mapped)))
		memcpy(&ip, grh + 20, sizeof(ip));
	else if (grh[20] >> 4 == 4)
		memcpy(&ip, grh + 20 + 12, sizeof(ip));
	return ip;
}

/* One arrival, from the wire: checked before anything reads it. */
static void ntx_ud_on_recv(struct ntx_ud_ep *ep, const struct ibv_wc *w,
			   uint64_t now)
{
	const uint8_t *buf = ep->rxbuf + (size_t)(uint32_t)w->wr_id * ep->slot;
	uint32_t ip4;

	if (w->status != IBV_WC_SUCCESS)
		return; /* flushed, or the device dropped it */
	if (!(w->wc_flags & IBV_WC_GRH) || w->byte_len < NTX_UD_GRH ||
	    w->byte_len > ep->slot || !(ip4 = ntx_ud_src_ip4(buf)) ||
	    !w->src_qp) {
		if (!ep->bad++)
			NTX_WARN(FI_LOG_EP_DATA, "ud: a malformed datagram "
				 "(%u bytes, qpn %u) dropped\n", w->byte_len,
				 w->src_qp);
		return;
	}
	ntx_dg_on_dgram(&ep->dg, ip4, w->src_qp & 0xffffff,
			buf + NTX_UD_GRH, w->byte_len - NTX_UD_GRH, now);
}

/* A send the device failed is a lost datagram (rel resends it); a UD QP
 * whose send queue stopped on an error (SQE) is moved back to RTS. */
static void ntx_ud_on_send_err(struct ntx_ud_ep *ep, const struct ibv_wc *w)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS };

	if (w->status == IBV_WC_WR_FLUSH_ERR)
		return;
	NTX_WARN(FI_LOG_EP_DATA, "ud: a send failed: %s\n",
		 ibv_wc_status_str(w->status));
	if (ibv_modify_qp(ep->qp, &a, IBV_QP_STATE))
		NTX_DBG(FI_LOG_EP_DATA, "ud: QP back to RTS: %s\n",
			strerror(errno));
}

/* Completions in order: sends free their slots, arrivals go to the peers
 * and their buffers back to the QP. How many arrivals. */
static int ntx_ud_handle(struct ntx_ud_ep *ep, const struct ibv_wc *wc,
			 int n, uint64_t now)
{
	uint32_t repost[NTX_UD_BATCH], nrepost = 0;
	int cnt = 0;

	for (int i = 0; i < n; i++) {
		uint32_t idx = (uint32_t)wc[i].wr_id;

		if (!(wc[i].wr_id & NTX_UD_WR_RECV)) {
			if (idx < NTX_UD_NTX)
				ep->txfree[ep->ntxfree++] = idx;
			if (wc[i].status != IBV_WC_SUCCESS)
				ntx_ud_on_send_err(ep, &wc[i]);
			continue;
		}
		if (idx >= NTX_UD_NRX)
			continue;
		ntx_ud_on_recv(ep, &wc[i], now);
		repost[nrepost++] = idx;
		cnt++;
	}
	ntx_ud_post_recv(ep, repost, nrepost);
	if (ep->graves && ep->ntxfree == NTX_UD_NTX)
		ntx_ud_bury(ep);
	return cnt;
}

/* Up to NTX_UD_RX_ROUNDS batches; *drained when the CQ is empty. */
static int ntx_ud_rx(struct ntx_dg_ep *dg, uint64_t now, bool *drained)
{
	struct ntx_ud_ep *ep = ntx_ud_of(dg);
	struct ibv_wc wc[NTX_UD_BATCH];
	int n = 0, cnt = 0;

	for (int r = 0; r < NTX_UD_RX_ROUNDS; r++) {
		n = ibv_poll_cq(ep->cq, NTX_UD_BATCH, wc);
		if (n <= 0)
			break;
		cnt += ntx_ud_handle(ep, wc, n, now);
		if (n < NTX_UD_BATCH)
			break;
	}
	*drained = n < NTX_UD_BATCH;
	return cnt;
}

/* Polling the CQ makes no system call; rel's timers cost a clock read
 * only while the CQ is busy or a peer has work. */
static int ntx_ud_poll(struct ntx_be_ep *be)
{
	struct ntx_ud_ep *ep = ntx_ud_of(ntx_dg_ep_of(be));
	struct ntx_dg_ep *dg = &ep->dg;
	int cnt = ntx_list_empty(&dg->owed) ? 0 : ntx_dg_report(dg);
	struct ibv_wc wc[NTX_UD_BATCH];
	bool drained = true;
	uint64_t now;
	int n, got;

	if (ep->armed) {
		struct ibv_cq *cq;
		void *ctx;

		while (!ibv_get_cq_event(ep->cch, &cq, &ctx))
			ibv_ack_cq_events(cq, 1);
		ep->armed = false;
	}
	n = ibv_poll_cq(ep->cq, NTX_UD_BATCH, wc);
	if (n <= 0 && !dg->busy) {
		if (dg->next_ns != UINT64_MAX &&
		    (now = ntx_now_ns()) >= dg->next_ns)
			ntx_dg_tx(dg, now);
		return cnt;
	}
	now = ntx_now_ns();
	got = n > 0 ? ntx_ud_handle(ep, wc, n, now) : 0;
	if (n == NTX_UD_BATCH)
		got += ntx_ud_rx(dg, now, &drained);
	ntx_dg_after_rx(dg, now, got, drained);
	return cnt + got;
}

/* The next completion writes the channel; rel's next deadline the
 * timerfd. Whoever sleeps re-checks with poll first. */
static void ntx_ud_arm(struct ntx_be_ep *be)
{
	struct ntx_ud_ep *ep = ntx_ud_of(ntx_dg_ep_of(be));

	ep->armed = true;
	ibv_req_notify_cq(ep->cq, 0);
	ntx_dg_arm(be);
}

/* ---- the endpoint ------------------------------------------------------------ */

/* The GID table entry of our IPv4 address, RoCE v2 preferred (rxe lists
 * each address as v1 and v2). */
static int ntx_ud_gid_index(struct ntx_ud_ep *ep, int gids)
{
	int found = -1;

	for (int i = 0; i < gids; i++) {
		struct ibv_gid_entry e;
		uint32_t ip;

		if (ibv_query_gid_ex(ep->ctx, 1, (uint32_t)i, &e, 0))
			continue;
		memcpy(&ip, e.gid.raw + 12, sizeof(ip));
		if (e.gid.raw[10] != 0xff || e.gid.raw[11] != 0xff ||
		    ip != ep->ip4)
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2)
			return i;
		found = i;
	}
	return found;
}

/* The device of a "<dev>-ud" domain, its address and MTU; RoCE only (a
 * name has no room for an InfiniBand LID). */
static int ntx_ud_device(struct ntx_ud_ep *ep, const char *dom)
{
	struct ntx_vb_devinfo d;
	struct ibv_device **list = NULL;
	struct ibv_port_attr pa;
	char name[64];
	size_t n = dom ? strlen(dom) : 0;
	int cnt = 0, gid;

	if (n <= strlen(NTX_UD_SUFFIX) || n >= sizeof(name))
		return -FI_ENODEV;
	memcpy(name, dom, n - strlen(NTX_UD_SUFFIX));
	name[n - strlen(NTX_UD_SUFFIX)] = '\0';
	if (ntx_vb_dev_find(name, &d) || !(list = ibv_get_device_list(&cnt)))
		return -FI_ENODEV;
	for (int i = 0; i < cnt && !ep->ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ep->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ep->ctx || ibv_query_port(ep->ctx, 1, &pa) ||
	    pa.link_layer != IBV_LINK_LAYER_ETHERNET)
		return -FI_ENODEV;
	ep->ip4 = d.ip4;
	ep->dgram = d.mtu;
	ep->slot = NTX_UD_GRH + ep->dgram;
	gid = ntx_ud_gid_index(ep, pa.gid_tbl_len);
	if (gid < 0 || ep->dgram <= NTX_REL_HDR_LEN + 64)
		return -FI_ENODEV;
	ep->gid_index = (uint8_t)gid;
	return 0;
}

/* The QP through INIT, RTR and RTS: a UD QP needs no peer to get there. */
static int ntx_ud_qp_ready(struct ntx_ud_ep *ep)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0,
				 .port_num = 1, .qkey = NTX_UD_QKEY };

	if (ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			  IBV_QP_PORT | IBV_QP_QKEY))
		return -FI_EIO;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	if (ibv_modify_qp(ep->qp, &a, IBV_QP_STATE))
		return -FI_EIO;
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS,
				  .sq_psn = (uint32_t)ntx_random64() & 0xffffff };
	return ibv_modify_qp(ep->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) ? -FI_EIO
									: 0;
}

/* One UD QP whose number fits a name (below NTX_UD_QPN_MAX, low 16 bits
 * not 0: a port of 0 means "no network part"); one more try otherwise. */
static int ntx_ud_qp(struct ntx_ud_ep *ep)
{
	struct ibv_qp_init_attr qa = {
		.send_cq = ep->cq, .recv_cq = ep->cq, .qp_type = IBV_QPT_UD,
		.sq_sig_all = 1,
		.cap = { .max_send_wr = NTX_UD_NTX, .max_recv_wr = NTX_UD_NRX,
			 .max_send_sge = 1, .max_recv_sge = 1,
			 .max_inline_data = NTX_UD_INLINE },
	};

	for (int tries = 0; tries < 2; tries++) {
		ep->qp = ibv_create_qp(ep->pd, &qa);
		if (!ep->qp) { /* not every device takes our inline size */
			qa.cap.max_inline_data = 0;
			ep->qp = ibv_create_qp(ep->pd, &qa);
		}
		if (!ep->qp) {
			NTX_WARN(FI_LOG_EP_CTRL, "ud: ibv_create_qp: %s\n",
				 strerror(errno));
			return -FI_ENOMEM;
		}
		if (ep->qp->qp_num < NTX_UD_QPN_MAX && (ep->qp->qp_num & 0xffff))
			break;
		NTX_WARN(FI_LOG_EP_CTRL, "ud: QP number %u does not fit a "
			 "name\n", ep->qp->qp_num);
		ibv_destroy_qp(ep->qp);
		ep->qp = NULL;
	}
	if (!ep->qp)
		return -FI_EADDRNOTAVAIL;
	ep->max_inline = qa.cap.max_inline_data;
	return ntx_ud_qp_ready(ep);
}

/* The receive buffers, all posted, and the send slots, all free; both
 * registered once for the endpoint's life. */
static int ntx_ud_bufs(struct ntx_ud_ep *ep)
{
	size_t rx = NTX_UD_NRX * ep->slot, tx = NTX_UD_NTX * ep->dgram;
	uint32_t idx[NTX_UD_BATCH];

	if (posix_memalign((void **)&ep->rxbuf, 4096, rx) ||
	    posix_memalign((void **)&ep->txbuf, 4096, tx))
		return -FI_ENOMEM;
	ep->rxmr = ibv_reg_mr(ep->pd, ep->rxbuf, rx, IBV_ACCESS_LOCAL_WRITE);
	ep->txmr = ibv_reg_mr(ep->pd, ep->txbuf, tx, 0);
	if (!ep->rxmr || !ep->txmr)
		return -FI_ENOMEM;
	for (uint32_t i = 0; i < NTX_UD_NTX; i++)
		ep->txfree[ep->ntxfree++] = NTX_UD_NTX - 1 - i;
	for (uint32_t i = 0; i < NTX_UD_NRX; i += NTX_UD_BATCH) {
		for (uint32_t j = 0; j < NTX_UD_BATCH; j++)
			idx[j] = i + j;
		ntx_ud_post_recv(ep, idx, NTX_UD_BATCH);
	}
	return 0;
}

static int ntx_ud_setup(struct ntx_ud_ep *ep, const char *dom)
{
	int ret = ntx_ud_device(ep, dom);

	if (ret) {
		NTX_WARN(FI_LOG_DOMAIN, "%s: no usable RoCE device\n",
			 dom ? dom : "(none)");
		return ret;
	}
	ep->pd = ibv_alloc_pd(ep->ctx);
	ep->cch = ibv_create_comp_channel(ep->ctx);
	if (!ep->pd || !ep->cch || ntx_vb_nonblock(ep->cch->fd))
		return -FI_ENOMEM;
	ep->cq = ibv_create_cq(ep->ctx, NTX_UD_NRX + NTX_UD_NTX, ep, ep->cch,
			       0);
	if (!ep->cq)
		return -FI_ENOMEM;
	ret = ntx_ud_qp(ep);
	if (ret)
		return ret;
	ret = ntx_ud_bufs(ep);
	if (ret)
		return ret;
	return ntx_dg_watch(&ep->dg, ep->cch->fd);
}

/* Frees what there is of an endpoint: closing, or an open that failed
 * part way. The peers (and their address handles) go before the QP. */
static void ntx_ud_free(struct ntx_ud_ep *ep)
{
	ntx_dg_ep_fini(&ep->dg);
	if (ep->qp)
		ibv_destroy_qp(ep->qp);
	ep->qp = NULL;
	ntx_ud_bury(ep);
	if (ep->cq)
		ibv_destroy_cq(ep->cq);
	if (ep->cch)
		ibv_destroy_comp_channel(ep->cch);
	if (ep->rxmr)
		ibv_dereg_mr(ep->rxmr);
	if (ep->txmr)
		ibv_dereg_mr(ep->txmr);
	if (ep->pd)
		ibv_dealloc_pd(ep->pd);
	if (ep->ctx)
		ibv_close_device(ep->ctx);
	free(ep->rxbuf);
	free(ep->txbuf);
	free(ep);
}

static const struct ntx_dg_xport ntx_ud_xport;

/* A UD QP cannot take a service number: 'want' gives none of our name. */
static int ntx_ud_open(struct ntx_be_ep **out, const struct ntx_addr *want,
		       const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_ud_ep *ep = calloc(1, sizeof(*ep));
	int ret;

	(void)want;
	if (!ep)
		return -FI_ENOMEM;
	ret = ntx_dg_ep_init(&ep->dg, &ntx_ud_ops, &ntx_ud_xport, cb);
	if (!ret)
		ret = ntx_ud_setup(ep, dev);
	if (!ret)
		ret = ntx_dg_rel_init(&ep->dg, ep->dgram, NTX_UD_WINDOW);
	if (ret) {
		ntx_ud_free(ep);
		return ret;
	}
	NTX_INFO(FI_LOG_DOMAIN, "%s: qpn %u, datagrams of %zu bytes, gid "
		 "index %u, inline %u\n", dev, ep->qp->qp_num, ep->dgram,
		 ep->gid_index, ep->max_inline);
	*out = &ep->dg.base;
	return 0;
}

static void ntx_ud_close(struct ntx_be_ep *be)
{
	ntx_ud_free(ntx_ud_of(ntx_dg_ep_of(be)));
}

/* Our network part: the device's address and the QP number (DESIGN §10,
 * "The ud back end": port and flag bits). */
static void ntx_ud_getname(struct ntx_be_ep *be, struct ntx_addr *addr)
{
	struct ntx_ud_ep *ep = ntx_ud_of(ntx_dg_ep_of(be));
	uint32_t qpn = ep->qp->qp_num;

	addr->ip4 = ep->ip4;
	addr->port = htons((uint16_t)qpn);
	addr->flags = (uint8_t)((addr->flags & ~NTX_ADDR_F_QPN_MASK) |
				(qpn >> 16) << NTX_ADDR_F_QPN_SHIFT);
}

/* A service number names no QP: only a whole name reaches a ud peer. */
static int ntx_ud_resolve(struct ntx_addr *addr)
{
	(void)addr;
	return -FI_EADDRNOTAVAIL;
}

/* A peer is its device's address and its QP number; one on this host
 * named by loopback is on our device. */
static int ntx_ud_peer_key(const struct ntx_dg_ep *dg,
			   const struct ntx_addr *name, uint32_t *ip4,
			   uint32_t *port)
{
	const struct ntx_ud_ep *ep = ntx_container_of(dg, struct ntx_ud_ep, dg);

	if (!name->port)
		return -FI_EADDRNOTAVAIL;
	*ip4 = name->ip4;
	if (name->host == ntx_host_id() &&
	    (!name->ip4 || ntx_ip4_loopback(name->ip4)))
		*ip4 = ep->ip4;
	*port = ntx_ud_name_qpn(name);
	return *ip4 ? 0 : -FI_EADDRNOTAVAIL;
}

static const struct ntx_dg_xport ntx_ud_xport = {
	.name = "ud",
	.emit = ntx_ud_emit,
	.flush = ntx_ud_flush,
	.peer_key = ntx_ud_peer_key,
	.rx = ntx_ud_rx,
	.conn_fini = ntx_ud_conn_fini,
};

static const struct ntx_be_ops ntx_ud_ops = {
	.name = "ud",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.names_use_flags = true, /* the QP number's high bits */
	.max_payload = NTX_DG_MAX_PAYLOAD,
	.has_bulk = false,
	/* an eager send completes when rel took it: its retransmissions
	 * must go on while the application waits elsewhere */
	.needs_progress = true,
	.acks_eager = true,
	.open = ntx_ud_open,
	.close = ntx_ud_close,
	.getname = ntx_ud_getname,
	.setname = ntx_dg_setname,
	.connect = ntx_dg_connect,
	.disconnect = ntx_dg_disconnect,
	.send = ntx_dg_send,
	.poll = ntx_ud_poll,
	.check_peers = ntx_dg_check_peers,
	.resolve = ntx_ud_resolve,
	.arm = ntx_ud_arm,
	.disarm = ntx_dg_disarm,
	.wait_fd = ntx_dg_wait_fd,
};

/* "<dev>-ud" for each verbs device, with the device's limits. */
static int ntx_ud_domains(struct ntx_be_domain *out, int max)
{
	int n = ntx_vb_domains(out, max);

	for (int i = 0; i < n; i++) {
		char dev[sizeof(out[i].name)];

		memcpy(dev, out[i].name, sizeof(dev));
		snprintf(out[i].name, sizeof(out[i].name), "%.*s%s",
			 (int)(sizeof(dev) - sizeof(NTX_UD_SUFFIX)), dev,
			 NTX_UD_SUFFIX);
	}
	return n;
}

static struct ntx_be_desc ntx_ud_desc = {
	.name = "ud",
	.ops = &ntx_ud_ops,
	.order = 20, /* after the verbs devices; listed only when named */
	.named_only = true, /* DESIGN §10: as udp */
	.datagram = true,
	.domains = ntx_ud_domains,
};
NTX_BE_REGISTER(ntx_ud_desc)
