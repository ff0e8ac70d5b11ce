/*
 * Inside the verbs back end (DESIGN §5): its types and what its files
 * share. ntx_verbs.c opens and closes an instance and holds the ops table
 * and its registration; ntx_verbs_dev.c finds the devices (the domains);
 * ntx_verbs_cm.c sets connections up and takes them down over rdma_cm;
 * ntx_verbs_pkt.c moves packets (SRQ, send slots, the CQ, sleeping);
 * ntx_verbs_bulk.c moves bulk data with RDMA read and write;
 * ntx_verbs_cache.c keeps the registrations of user buffers.
 */
#ifndef NTX_VERBS_H
#define NTX_VERBS_H

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx/ntx_wire.h"

#define NTX_VB_SLOT 8192 /* bytes of one eager buffer: header + payload */
#define NTX_VB_HDR sizeof(struct ntx_wire_hdr)
#define NTX_VB_MAX_PAYLOAD (NTX_VB_SLOT - NTX_VB_HDR)
#define NTX_VB_POLL_BATCH 32
/* what a work request's wr_id says it is; send slots carry neither bit */
#define NTX_VB_WR_RECV (1ull << 63)
#define NTX_VB_WR_BULK (1ull << 62)

/* Bulk work requests in flight at once (one bulk move, <= 8 remote
 * iovecs): sized into the QP send queue and the CQ. */
#define NTX_VB_BULK_MAX NTX_MAX_IOV

enum ntx_vb_state {
	NTX_VB_RESOLVING, /* active: address, then route */
	NTX_VB_CONNECTING,
	NTX_VB_OPEN,
	NTX_VB_FAILED,
};

struct ntx_vb_ep;

/* One RC QP: the connection of a VC. */
struct ntx_vb_conn {
	struct ntx_be_conn head;   /* first: what the engine holds */
	struct ntx_list entry;     /* ntx_vb_ep.conns */
	struct ntx_list qpn_entry; /* ntx_vb_ep.qpn_hash */
	struct ntx_vb_ep *be;
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

/* One back-end instance: an endpoint's device resources. */
struct ntx_vb_ep {
	struct ntx_be_ep head;  /* first: what the engine holds */
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
	struct ntx_vb_conn **txowner;
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

static inline struct ntx_vb_conn *ntx_vb_conn_of(struct ntx_be_conn *conn)
{
	return ntx_container_of(conn, struct ntx_vb_conn, head);
}

static inline struct ntx_vb_ep *ntx_vb_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_vb_ep, head);
}

static inline int ntx_vb_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) ? -FI_EIO : 0;
}

/* the ops table (ntx_verbs.c), which the heads' ops point to */
extern const struct ntx_be_ops ntx_verbs_ops;

/* ---- devices (ntx_verbs_dev.c) ------------------------------------------- */

/* One verbs device that can carry an ntx domain (active port 1 with an
 * IPv4 address for rdma_cm), with the limits read from it. */
struct ntx_vb_devinfo {
	char name[64];
	uint32_t ip4; /* network order */
	bool active;
	uint32_t max_cqe, max_qp, max_qp_wr, max_srq_wr, max_sge, max_mr;
	uint32_t max_cq, max_qp_rd_atom, mtu;
	uint64_t max_mr_size;
	int atomic_cap; /* enum ibv_atomic_cap */
};
int ntx_verbs_devices(struct ntx_vb_devinfo *out, int max);
/* The usable device of that name: 0, or -FI_ENODEV. */
int ntx_vb_dev_find(const char *dev, struct ntx_vb_devinfo *out);
/* Each usable device as a domain (ntx_be_desc.domains). */
int ntx_vb_domains(struct ntx_be_domain *out, int max);

/* ---- connections (ntx_verbs_cm.c) ---------------------------------------- */

/* The event channel and the listening id on the device's address (the
 * service of 'want', if any); sets be->ctx to the device rdma_cm opened. */
int ntx_vb_cm_listen(struct ntx_vb_ep *be, const struct ntx_vb_devinfo *d,
		     const struct ntx_addr *want);
void ntx_vb_cm_close(struct ntx_vb_ep *be);
/* Runs the connection events; returns how many there were. */
int ntx_vb_cm_events(struct ntx_vb_ep *be);
struct ntx_vb_conn *ntx_vb_by_qpn(struct ntx_vb_ep *be, uint32_t qpn);
void ntx_vb_fail(struct ntx_vb_conn *c, int err);
void ntx_vb_destroy(struct ntx_vb_conn *c);
/* Closing: waits (boundedly) for the sends of lingering connections. */
void ntx_vb_linger(struct ntx_vb_ep *be);
int ntx_vb_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
		   void *vc, struct ntx_be_conn **conn);
void ntx_vb_disconnect(struct ntx_be_conn *conn);
size_t ntx_vb_conn_eager(const struct ntx_be_conn *conn);
void ntx_vb_check_peers(struct ntx_be_ep *be);

/* ---- packets (ntx_verbs_pkt.c) ------------------------------------------- */

/* The completion channel, CQ (cqe entries), SRQ, eager buffers and send
 * slots; ntx_vb_pkt_close frees what there is of them. */
int ntx_vb_pkt_open(struct ntx_vb_ep *be, uint32_t cqe);
void ntx_vb_pkt_close(struct ntx_vb_ep *be);
/* The wait fd: an epoll set of the completion and rdma_cm channels. */
int ntx_vb_wait_open(struct ntx_vb_ep *be);
/* Gives back the send slots of a connection that goes away. */
void ntx_vb_reclaim(struct ntx_vb_conn *c);
void ntx_vb_on_send_wc(struct ntx_vb_ep *be, const struct ibv_wc *wc);
int ntx_vb_poll_cq(struct ntx_vb_ep *be);
int ntx_vb_send(struct ntx_be_conn *conn, const void *hdr,
		const struct iovec *iov, size_t iovcnt, size_t len);
int ntx_vb_poll(struct ntx_be_ep *be);
void ntx_vb_arm(struct ntx_be_ep *be);
void ntx_vb_disarm(struct ntx_be_ep *be);
int ntx_vb_wait_fd(struct ntx_be_ep *be);

/* ---- bulk moves (ntx_verbs_bulk.c) --------------------------------------- */

uint64_t ntx_vb_expose(struct ntx_be_conn *conn, void *addr, size_t len,
		       bool writable);
ssize_t ntx_vb_bulk_read(struct ntx_be_conn *conn, const struct iovec *local,
			 size_t nlocal, const struct ntx_wire_iov *remote,
			 size_t nremote);
ssize_t ntx_vb_bulk_write(struct ntx_be_conn *conn, const struct iovec *local,
			  size_t nlocal, const struct ntx_wire_iov *remote,
			  size_t nremote);

/* ---- registration cache (ntx_verbs_cache.c) ------------------------------ */

struct ntx_vb_cache;
struct ntx_vb_reg;

/* Registrations of user memory, reused while their translation holds: a
 * hit is checked against the page frames recorded at registration
 * (/proc/self/pagemap), so memory unmapped and mapped again at the same
 * address is registered anew. Where page frames cannot be read (no
 * CAP_SYS_ADMIN) nothing is kept: ntx_verbs_cache_get registers for one
 * use and keys are not given to peers. */
struct ntx_vb_cache *ntx_verbs_cache_open(struct ibv_pd *pd);
void ntx_verbs_cache_close(struct ntx_vb_cache *cache);
bool ntx_verbs_cache_keeps(const struct ntx_vb_cache *cache);
/* A registration covering [addr, addr + len) with at least 'access';
 * held until ntx_verbs_cache_put. NULL on failure. */
struct ntx_vb_reg *ntx_verbs_cache_get(struct ntx_vb_cache *cache,
				       const void *addr, size_t len,
				       int access);
void ntx_verbs_cache_put(struct ntx_vb_cache *cache, struct ntx_vb_reg *reg);
uint32_t ntx_verbs_reg_lkey(const struct ntx_vb_reg *reg);
uint32_t ntx_verbs_reg_rkey(const struct ntx_vb_reg *reg);
/* hits, misses and registrations dropped as stale (for logs and tests) */
void ntx_verbs_cache_stats(const struct ntx_vb_cache *cache, uint64_t *hits,
			   uint64_t *misses, uint64_t *stale);

#endif /* NTX_VERBS_H */
