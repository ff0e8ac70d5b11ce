/*
 * Packets of the verbs back end (DESIGN §5): one SRQ of pre-posted eager
 * buffers, registered send slots (inline where the device allows), one CQ
 * and one completion channel per instance, the completion and rdma_cm
 * channels behind one epoll fd for sleeping. Every send is signaled and
 * the slots bound the CQ, so it can never overrun.
 */
#include "config.h"
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ntx_verbs.h"

static int ntx_vb_post_recv(struct ntx_vb_ep *be, const uint32_t *idx,
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

int ntx_vb_send(struct ntx_be_conn *conn, const void *hdr,
		const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_vb_conn *c = ntx_vb_conn_of(conn);
	struct ntx_vb_ep *be = c->be;
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

void ntx_vb_on_send_wc(struct ntx_vb_ep *be, const struct ibv_wc *wc)
{
	uint32_t slot = (uint32_t)wc->wr_id;
	uint16_t gen = (uint16_t)(wc->wr_id >> 32);
	struct ntx_vb_conn *c;

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
static int ntx_vb_handle(struct ntx_vb_ep *be, const struct ibv_wc *wc, int n)
{
	uint32_t repost[NTX_VB_POLL_BATCH];
	uint32_t nrepost = 0;
	int cnt = 0;

	for (int i = 0; i < n; i++) {
		const struct ibv_wc *w = &wc[i];
		struct ntx_vb_conn *c;
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

int ntx_vb_poll_cq(struct ntx_vb_ep *be)
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

int ntx_vb_poll(struct ntx_be_ep *bep)
{
	struct ntx_vb_ep *be = ntx_vb_ep_of(bep);

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

/* The next completion writes the channel; connection events always do.
 * Whoever sleeps re-checks with poll first. */
void ntx_vb_arm(struct ntx_be_ep *bep)
{
	struct ntx_vb_ep *be = ntx_vb_ep_of(bep);

	be->armed = true;
	ibv_req_notify_cq(be->cq, 0);
}

void ntx_vb_disarm(struct ntx_be_ep *be)
{
	(void)be;
}

int ntx_vb_wait_fd(struct ntx_be_ep *be)
{
	return ntx_vb_ep_of(be)->epfd;
}

/* The eager buffers, all posted to the SRQ, and the send slots, all
 * free; both registered once for the instance's life. */
static int ntx_vb_bufs(struct ntx_vb_ep *be)
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

/* Send slots still owned by a connection come back, and completions that
 * may still name them are ignored (their generation changes). */
void ntx_vb_reclaim(struct ntx_vb_conn *c)
{
	struct ntx_vb_ep *be = c->be;

	for (uint32_t i = 0; i < be->ntx; i++)
		if (be->txowner[i] == c) {
			be->txowner[i] = NULL;
			be->txgen[i]++;
			be->txfree[be->ntxfree++] = i;
		}
	c->inflight = 0;
}

int ntx_vb_pkt_open(struct ntx_vb_ep *be, uint32_t cqe)
{
	struct ibv_srq_init_attr sa = {
		.attr = { .max_wr = be->nrx, .max_sge = 1 },
	};

	be->cch = ibv_create_comp_channel(be->ctx);
	if (!be->cch || ntx_vb_nonblock(be->cch->fd))
		return -FI_ENOMEM;
	be->cq = ibv_create_cq(be->ctx, (int)cqe, be, be->cch, 0);
	if (!be->cq)
		return -FI_ENOMEM;
	be->srq = ibv_create_srq(be->pd, &sa);
	if (!be->srq || ntx_vb_bufs(be))
		return -FI_ENOMEM;
	/* a bulk move sets completions aside: at most a CQ's worth */
	be->deferred_cap = cqe;
	be->deferred = calloc(cqe, sizeof(*be->deferred));
	be->deferred_spare = calloc(cqe, sizeof(*be->deferred));
	if (!be->deferred || !be->deferred_spare)
		return -FI_ENOMEM;
	return 0;
}

void ntx_vb_pkt_close(struct ntx_vb_ep *be)
{
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
	free(be->rxbuf);
	free(be->txbuf);
	free(be->txfree);
	free(be->txgen);
	free(be->txowner);
	free(be->deferred);
	free(be->deferred_spare);
}

int ntx_vb_wait_open(struct ntx_vb_ep *be)
{
	struct epoll_event ev = { .events = EPOLLIN };

	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (be->epfd < 0 ||
	    epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->cch->fd, &ev) ||
	    epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->ech->fd, &ev))
		return -FI_ENOMEM;
	return 0;
}
