/*
 * Bulk moves of the verbs back end (DESIGN §5): rendezvous pulls and large
 * RMA parts move with RDMA read and write between registered buffers. The
 * keys a peer needs come from expose, out of the registration cache
 * (ntx_verbs_cache.c); a move waits for its own completions and sets the
 * others aside for the next poll.
 */
#include "config.h"
#include <string.h>

#include "ntx_verbs.h"

#define NTX_VB_ACCESS_LOCAL IBV_ACCESS_LOCAL_WRITE
#define NTX_VB_ACCESS_READ (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
#define NTX_VB_ACCESS_WRITE (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

/* A peer may move [addr, addr + len) with this key while the
 * registration stays cached (see ntx_verbs.h). */
uint64_t ntx_vb_expose(struct ntx_be_conn *conn, void *addr, size_t len,
		       bool writable)
{
	struct ntx_vb_ep *be = ntx_vb_conn_of(conn)->be;
	struct ntx_vb_reg *reg;
	uint64_t key;

	if (!ntx_verbs_cache_keeps(be->cache) || !len)
		return NTX_KEY_NONE;
	reg = ntx_verbs_cache_get(be->cache, addr, len,
				  writable ? NTX_VB_ACCESS_WRITE
					   : NTX_VB_ACCESS_READ);
	if (!reg)
		return NTX_KEY_NONE;
	key = ntx_verbs_reg_rkey(reg);
	ntx_verbs_cache_put(be->cache, reg);
	return key;
}

/* Completions that arrive while a bulk move waits: run at the next poll,
 * outside the engine callback that started the move. */
static void ntx_vb_defer(struct ntx_vb_ep *be, const struct ibv_wc *wc)
{
	if (be->ndeferred < be->deferred_cap)
		be->deferred[be->ndeferred++] = *wc;
	else
		NTX_WARN(FI_LOG_EP_DATA, "deferred completions overflow\n");
}

static void ntx_vb_bulk_wc(struct ntx_vb_ep *be, const struct ibv_wc *wc)
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

/* Whether this move can be made with RDMA at all: an open connection,
 * iovec counts in bounds and a key for every remote iovec. */
static int ntx_vb_bulk_check(const struct ntx_vb_conn *c, size_t nlocal,
			     const struct ntx_wire_iov *remote, size_t nremote)
{
	if (c->state != NTX_VB_OPEN)
		return c->state == NTX_VB_FAILED ? -FI_ECONNRESET
						 : -FI_EOPNOTSUPP;
	if (nlocal > NTX_MAX_IOV || nremote > NTX_MAX_IOV)
		return -FI_EINVAL;
	for (size_t r = 0; r < nremote; r++)
		if (remote[r].key > UINT32_MAX)
			return -FI_EOPNOTSUPP; /* the peer gave no key */
	return 0;
}

/* Registers every local iovec (reg[i], until one fails): the lkeys of
 * the gather lists. */
static int ntx_vb_bulk_reg(struct ntx_vb_ep *be, const struct iovec *local,
			   size_t nlocal, struct ntx_vb_reg **reg)
{
	for (size_t i = 0; i < nlocal; i++) {
		reg[i] = ntx_verbs_cache_get(be->cache, local[i].iov_base,
					     local[i].iov_len,
					     NTX_VB_ACCESS_LOCAL);
		if (!reg[i])
			return -FI_EOPNOTSUPP;
	}
	return 0;
}

/* How far the work requests built so far reach into the local iovecs. */
struct ntx_vb_cursor {
	const struct iovec *iov;
	struct ntx_vb_reg *const *reg;
	size_t n, i, off;
};

/* The gather list of one work request: the next local bytes, at most
 * 'want' of them in at most 'max' entries. Returns the entries and the
 * bytes they cover in *got. */
static int ntx_vb_gather(struct ntx_vb_cursor *cur, size_t want,
			 struct ibv_sge *sge, int max, size_t *got)
{
	size_t need = want;
	int ns = 0;

	while (need && cur->i < cur->n && ns < max) {
		size_t m = cur->iov[cur->i].iov_len - cur->off;

		if (m > need)
			m = need;
		sge[ns].addr = (uintptr_t)cur->iov[cur->i].iov_base + cur->off;
		sge[ns].length = (uint32_t)m;
		sge[ns].lkey = ntx_verbs_reg_lkey(cur->reg[cur->i]);
		ns++;
		need -= m;
		cur->off += m;
		if (cur->off == cur->iov[cur->i].iov_len) {
			cur->i++;
			cur->off = 0;
		}
	}
	*got = want - need;
	return ns;
}

/* One RDMA read or write per remote iovec, chained, as far as the local
 * iovecs and the gather entries reach; returns how many, and the bytes
 * they move in *total. */
static uint32_t ntx_vb_bulk_wrs(struct ntx_vb_ep *be, bool write,
				struct ntx_vb_cursor *cur,
				const struct ntx_wire_iov *remote,
				size_t nremote, struct ibv_send_wr *wr,
				struct ibv_sge (*sge)[NTX_MAX_IOV],
				size_t *total)
{
	uint32_t nwr = 0;
	size_t got;

	for (size_t r = 0; r < nremote && cur->i < cur->n; r++) {
		memset(&wr[nwr], 0, sizeof(wr[nwr]));
		wr[nwr].num_sge = ntx_vb_gather(cur, remote[r].len, sge[nwr],
						(int)be->max_sge, &got);
		wr[nwr].wr_id = NTX_VB_WR_BULK | nwr;
		wr[nwr].sg_list = sge[nwr];
		wr[nwr].opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ;
		wr[nwr].send_flags = IBV_SEND_SIGNALED;
		wr[nwr].wr.rdma.remote_addr = remote[r].addr;
		wr[nwr].wr.rdma.rkey = (uint32_t)remote[r].key;
		if (nwr)
			wr[nwr - 1].next = &wr[nwr];
		*total += got;
		nwr++;
		if (got < remote[r].len)
			break; /* the rest in the next call */
	}
	return nwr;
}

/* Polls the CQ until the move's completions are in; the others that
 * come meanwhile are deferred. Returns the move's error, if any. */
static int ntx_vb_bulk_wait(struct ntx_vb_ep *be)
{
	struct ibv_wc wc;
	int n;

	while (be->bulk_wait) {
		n = ibv_poll_cq(be->cq, 1, &wc);
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
	return be->bulk_err;
}

/* One RDMA read or write per remote iovec, gathering from or scattering
 * to the local ones; waits for the completions (other completions that
 * arrive meanwhile are deferred to the next poll). Returns bytes moved. */
static ssize_t ntx_vb_bulk(struct ntx_vb_conn *c, bool write,
			   const struct iovec *local, size_t nlocal,
			   const struct ntx_wire_iov *remote, size_t nremote)
{
	struct ntx_vb_ep *be = c->be;
	struct ibv_send_wr wr[NTX_MAX_IOV], *bad;
	struct ibv_sge sge[NTX_MAX_IOV][NTX_MAX_IOV];
	struct ntx_vb_reg *reg[NTX_MAX_IOV] = { 0 };
	struct ntx_vb_cursor cur = { .iov = local, .reg = reg, .n = nlocal };
	size_t total = 0;
	uint32_t nwr;
	int ret;

	ret = ntx_vb_bulk_check(c, nlocal, remote, nremote);
	if (ret)
		return ret;
	ret = ntx_vb_bulk_reg(be, local, nlocal, reg);
	if (ret)
		goto put_regs;
	nwr = ntx_vb_bulk_wrs(be, write, &cur, remote, nremote, wr, sge,
			      &total);
	if (!nwr) {
		ret = -FI_EINVAL;
		goto put_regs;
	}
	be->bulk_err = 0;
	be->bulk_wait = nwr;
	if (ibv_post_send(c->id->qp, wr, &bad)) {
		be->bulk_wait = 0;
		ret = -FI_EOPNOTSUPP;
		goto put_regs;
	}
	ret = ntx_vb_bulk_wait(be);
	if (ret == -FI_EIO)
		ntx_vb_fail(c, -FI_ECONNRESET);
	else if (ret)
		ntx_vb_fail(c, -FI_EREMOTEIO);
put_regs:
	for (size_t i = 0; i < nlocal; i++)
		if (reg[i])
			ntx_verbs_cache_put(be->cache, reg[i]);
	return ret ? ret : (ssize_t)total;
}

ssize_t ntx_vb_bulk_read(struct ntx_be_conn *conn, const struct iovec *local,
			 size_t nlocal, const struct ntx_wire_iov *remote,
			 size_t nremote)
{
	return ntx_vb_bulk(ntx_vb_conn_of(conn), false, local, nlocal, remote,
			   nremote);
}

ssize_t ntx_vb_bulk_write(struct ntx_be_conn *conn, const struct iovec *local,
			  size_t nlocal, const struct ntx_wire_iov *remote,
			  size_t nremote)
{
	return ntx_vb_bulk(ntx_vb_conn_of(conn), true, local, nlocal, remote,
			   nremote);
}
