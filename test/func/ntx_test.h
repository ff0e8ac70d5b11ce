/*
 * Helpers of the functional tests: a whole RDM endpoint through the public
 * libfabric API, bounded waits for completions, and two-process tests
 * (fork, then each process opens its own objects; names travel over a
 * socketpair).
 */
#ifndef NTX_TEST_H
#define NTX_TEST_H

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_atomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define T_VERSION FI_VERSION(1, 17)
/* libfabric 2.x deprecates wait sets, poll sets and AVs bound to an EQ;
 * ntx keeps them for applications of older API versions, and the tests
 * of them use them on purpose. */
#define T_DEPRECATED_BEGIN                       \
	_Pragma("GCC diagnostic push")           \
	_Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")
#define T_DEPRECATED_END _Pragma("GCC diagnostic pop")
#define T_NAMELEN 32

struct tctx {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_cntr *cntr;
	struct fid_cntr *c[6]; /* T_C_*: opened and bound by t_open_cntrs */
};

/* Counters t_open_cntrs binds to the endpoint, one per kind of event. */
enum { T_C_READ, T_C_WRITE, T_C_RREAD, T_C_RWRITE, T_C_SEND, T_C_RECV,
       T_NCNTR };
#define T_CBIT(c) (1u << (c))

/* Hints that select ntx; caller may change them before t_open_hints. */
struct fi_info *t_hints(uint64_t caps);
int t_open(struct tctx *t, uint64_t caps);
int t_open_hints(struct tctx *t, struct fi_info *hints);
/* t_open_hints, with a counter (FI_WAIT_UNSPEC) bound for each T_CBIT
 * in cntrs before fi_enable. */
int t_open_cntrs(struct tctx *t, struct fi_info *hints, unsigned cntrs);
/* The same with a CQ that blocking reads can wait on (cq_wait). */
int t_open_cq_wait(struct tctx *t, struct fi_info *hints, unsigned cntrs,
		   enum fi_wait_obj cq_wait);
/* t_open_cq_wait with the caller's AV attributes (NULL: an FI_AV_TABLE);
 * av->map_addr is set as fi_av_open leaves it */
int t_open_with(struct tctx *t, struct fi_info *hints, unsigned cntrs,
		enum fi_wait_obj cq_wait, struct fi_av_attr *av);
void t_close(struct tctx *t);
int t_insert(struct tctx *t, const void *name, fi_addr_t *addr);

/* Waits up to timeout_ms for one completion: 1 success, -FI_EAVAIL with
 * *err filled, -FI_ETIMEDOUT. */
int t_wait(struct tctx *t, struct fi_cq_tagged_entry *e, fi_addr_t *src,
	   struct fi_cq_err_entry *err, int timeout_ms);
/* Polls for timeout_ms and returns how many completions appeared. */
int t_drain(struct tctx *t, int timeout_ms);

/* Two processes: the child runs fn(sock) and exits with its result
 * (0 = pass, otherwise the failing line). */
typedef int (*t_child_fn)(int sock);
pid_t t_fork(int *sock, t_child_fn fn);
int t_join(pid_t pid);
/* The peer on another host: in another network namespace
 * (NTX_TEST_PEER_NETNS, test/hosts) or on another machine
 * (NTX_TEST_PEER_REMOTE, test/rxe two hosts; ntx_test_remote.c, where
 * t_fork hands over to t_remote_fork). */
bool t_peer_elsewhere(void);
/* Peers on this host go through the network back end, not the shm window
 * (FI_NTX_LOCAL_VIA_NETWORK set and not 0, as in the rxe guest). */
bool t_local_via_network(void);
pid_t t_remote_fork(int *sock, t_child_fn fn);
int t_xchg_name(struct tctx *t, int sock, fi_addr_t *peer);
/* The datagram domain of the tests written for udp: NTX_TEST_DGRAM_DOMAIN
 * (a verbs device's ud domain, "rxe0-ud"), else "udp". */
const char *t_dgram_domain(void);
int t_sync(int sock); /* one byte each way */
/* The same while driving progress; fails if a completion shows up. */
int t_sync_progress(struct tctx *t, int sock, int timeout_ms);

/* Milliseconds of CLOCK_MONOTONIC. */
uint64_t t_ms(void);

/* A service number in [lo, lo + span) whose TCP port nobody holds now
 * (a number picked blindly can be another suite's ephemeral port while
 * the suites run in parallel); 0, or -1 when none is free. */
int t_free_service(char *svc, size_t n, int lo, int span);

/* Whole transfers on a stream socket. */
int t_sock_read(int sock, void *buf, size_t len);
int t_sock_write(int sock, const void *buf, size_t len);

void t_fill(void *buf, size_t len, unsigned seed);
size_t t_check(const void *buf, size_t len, unsigned seed);

/* ---- one-sided tests ------------------------------------------------------
 * A forked target serves its registered memory while driving progress and
 * answers commands on the socket; the initiator (the test process) opens
 * an endpoint with the same hints and learns the target's name, keys and
 * remote addresses. */
#define T_RMA_CAPS                                                        \
	(FI_MSG | FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | \
	 FI_REMOTE_WRITE | FI_RMA_EVENT | FI_FENCE)
#define T_TGT_MAXMR 4
#define T_TGT_NCQ 16
#define T_WAIT_MS 20000

/* What the target sets up; set it before t_ini_start (fork copies it). */
struct t_tgt_cfg {
	uint64_t mr_mode;   /* hints of both sides */
	uint64_t caps;      /* hints of both sides */
	size_t len;         /* bytes of each region */
	int nmr;            /* regions */
	int niov;           /* each region in niov separate pieces (regv) */
	uint64_t access[T_TGT_MAXMR];
	uint64_t offset;    /* fi_mr_reg's offset argument */
	uint64_t key;       /* requested key of region i: key + i */
	bool mr_cntr;       /* region 0: FI_RMA_EVENT, counter on remote writes */
	bool unbound;       /* region 0 neither bound nor enabled (T_BIND/T_ENABLE) */
	unsigned ini_cntrs, tgt_cntrs; /* T_CBITs */
};
extern struct t_tgt_cfg t_tgt;

struct t_tgt_info {
	char name[T_NAMELEN];
	uint64_t key[T_TGT_MAXMR];
	uint64_t addr[T_TGT_MAXMR]; /* remote address of the region's byte 0 */
};

struct t_tgt_cq {
	uint64_t flags, len, data, ctx;
};

struct t_tgt_stat {
	uint64_t rread, rwrite, recv, mr_cntr; /* target counters */
	uint64_t ncq, ncqerr;  /* target CQ entries since the last T_STAT */
	struct t_tgt_cq cq[T_TGT_NCQ];
	uint64_t guard_bad;    /* bytes changed outside the pieces */
};

enum t_op {
	T_QUIT,
	T_STAT,   /* waits (bounded) for the want_* counts, replies t_tgt_stat */
	T_CHECK,  /* replies uint64 count of bytes != pattern(seed, base + i) */
	T_FILL,   /* region[off + i] = pattern(seed, base + i); ack */
	T_GET,    /* replies len bytes */
	T_PUT,    /* len bytes follow; ack */
	T_CLOSE,  /* fi_close of the region's MR; ack */
	T_REG,    /* registers it again with key + seed; replies key, addr */
	T_BIND,   /* fi_mr_bind to the endpoint; replies int */
	T_ENABLE, /* fi_mr_enable; replies int */
	T_RECV,   /* posts len 8-byte receives; ack */
};

struct t_cmd {
	uint32_t op, mr;
	uint64_t off, len, seed, base;
	uint64_t want_rread, want_rwrite, want_cq;
};

struct t_ini {
	struct tctx t;
	struct t_tgt_info ti;
	fi_addr_t peer;
	int sock;
	pid_t pid;
};

struct fi_info *t_hints_mr(uint64_t caps, uint64_t mr_mode);
/* Forks the target and opens the initiator: 0 or a negative code. */
int t_ini_start(struct t_ini *in);
/* Stops the target: its exit status (0 = it passed). */
int t_ini_stop(struct t_ini *in);
/* Sends a command and reads rlen bytes of reply: 0 or -1. */
int t_ini_cmd(struct t_ini *in, const struct t_cmd *c, void *reply,
	      size_t rlen);
/* Bytes of region mr in [off, off + len) that differ from the pattern. */
uint64_t t_ini_check(struct t_ini *in, uint32_t mr, uint64_t off,
		     uint64_t len, unsigned seed, uint64_t base);
int t_ini_stat(struct t_ini *in, uint64_t want_rread, uint64_t want_rwrite,
	       uint64_t want_cq, struct t_tgt_stat *st);
/* One completion of the operation ctx: 0 (flags in *flags), its positive
 * error code, -FI_ETIMEDOUT, or -FI_EOTHER when another operation
 * completed. */
int t_ini_done(struct t_ini *in, void *ctx, uint64_t *flags);

/* Posts, driving progress while the provider says -FI_EAGAIN. */
#define T_RETRY(t, call)                                                  \
	({                                                                \
		ssize_t r_;                                               \
		while ((r_ = (call)) == -FI_EAGAIN)                       \
			fi_cq_read((t)->cq, NULL, 0);                     \
		r_;                                                       \
	})

/* In a child: fail with the line number. */
#define CHK(cond)                                                        \
	do {                                                             \
		if (!(cond)) {                                           \
			fprintf(stderr, "child %s:%d: %s\n", __FILE__,   \
				__LINE__, #cond);                        \
			return __LINE__ & 0x7f ? __LINE__ & 0x7f : 1;    \
		}                                                        \
	} while (0)

#endif
