/*
 * ntx provider-wide definitions: the provider object, parameters, logging,
 * endpoint names and the libfabric API objects (DESIGN §2, top layer).
 * Engine classes live in ntx_engine.h, back ends behind ntx_backend.h.
 */
#ifndef NTX_H
#define NTX_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include "ntx/ntx_list.h"

#define NTX_PROV_NAME "ntx"
#define NTX_PROV_VERSION FI_VERSION(0, 1)
#define NTX_FI_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define NTX_FABRIC_NAME "ntx"
#define NTX_DOMAIN_SHM "shm"
#define NTX_DOMAIN_TCP "tcp"

#define NTX_CACHELINE 64

#define ntx_container_of(ptr, type, field) \
	((type *)((char *)(ptr) - offsetof(type, field)))

extern struct fi_provider ntx_prov;

#define NTX_WARN(subsys, ...) FI_WARN(&ntx_prov, subsys, __VA_ARGS__)
#define NTX_INFO(subsys, ...) FI_INFO(&ntx_prov, subsys, __VA_ARGS__)
#define NTX_DBG(subsys, ...) FI_DBG(&ntx_prov, subsys, __VA_ARGS__)

/* ---- parameters (defined and read in ntx_param.c only) ------------------- */
struct ntx_params {
	size_t eager_max;      /* largest message sent inline in ring entries */
	size_t ring_size;      /* bytes per receive ring (multiple of 64) */
	size_t max_peers;      /* ring slots per endpoint window */
	int shm_cma;           /* single-copy bulk moves with process_vm_readv */
	size_t shm_split_min;  /* rendezvous size from which both sides copy */
	int peer_check_ms;     /* period of the liveness check of peers */
	int peer_pidfd;        /* watch local peers with pidfds (0: /proc) */
	size_t tcp_hello_ms;   /* an accepted tcp connection's hello time */
	size_t tcp_timeout_ms; /* tcp: unacknowledged data, silence, connect */
	int local_via_network; /* same-host peers through the network too */
	size_t progress_idle_us; /* auto progress: helper waits this long */
	char *progress_cpus;     /* auto progress: cpuset of the helper */
	size_t cq_size;        /* default CQ depth */
	size_t min_multi_recv; /* default FI_OPT_MIN_MULTI_RECV */
	size_t peer_unexp_max; /* unexpected bytes one peer may hold */
	char *auth_key;        /* FI_NTX_AUTH_KEY: the default job key */
	size_t auth_timeout_ms; /* a job-key exchange not done by then fails */
};
extern struct ntx_params ntx_params;
void ntx_params_init(void);

/* ---- endpoint names (wire format: fixed width, no pointers) ------------- */
#define NTX_ADDR_MAGIC 0x4e58u /* "NX" */
#define NTX_ADDR_VERSION 1
#define NTX_ADDR_STRLEN 96

/* 32 bytes: applications (fabtests' fi_rdm_stress among them) keep names
 * in 32-byte buffers. */
struct ntx_addr {
	uint16_t magic;
	uint8_t version;
	uint8_t flags;    /* NTX_ADDR_F_* */
	uint32_t host;    /* host identity: hash of the boot id */
	uint32_t pid;     /* process holding the window */
	int32_t win_fd;   /* fd of the window memfd in that process */
	uint32_t service; /* service number when one was given, else 0 */
	uint32_t epoch;   /* endpoint incarnation, random */
	uint32_t ip4;     /* network back end: IPv4 address, network order */
	uint16_t ep_id;   /* endpoint number within the process */
	uint16_t port;    /* network back end: TCP port, network order */
};
_Static_assert(sizeof(struct ntx_addr) == 32, "ntx_addr is a wire format");

#define NTX_ADDR_F_UNBOUND 1 /* name from fi_getinfo, no window yet */
#define NTX_ADDR_F_SERVICE 2 /* resolved from a service: look it up again
			      * when its endpoint fails (a restart) */
#define NTX_ADDR_F_KEYED 4   /* the endpoint has a job key: a peer without
			      * one fails at connect (DESIGN §7) */
#define NTX_HOST_UNKNOWN 2   /* a remote node known only by IP and port */

uint32_t ntx_host_id(void);
bool ntx_addr_valid(const struct ntx_addr *a);
bool ntx_addr_same_ep(const struct ntx_addr *a, const struct ntx_addr *b);
int ntx_addr_to_str(const struct ntx_addr *a, char *buf, size_t len);
int ntx_addr_from_str(const char *s, struct ntx_addr *a);
uint64_t ntx_random64(void);

/* ---- job keys (FI_AUTH_KEY, DESIGN §7) ------------------------------------ */
#define NTX_AUTH_KEY_MAX 256 /* bytes */
struct ntx_auth_key {
	size_t len; /* 0: no key */
	uint8_t key[NTX_AUTH_KEY_MAX];
};
/* The key of an object: the attribute's if it has one, else 'dflt';
 * -FI_EINVAL for a malformed one. */
int ntx_auth_key_set(struct ntx_auth_key *k, const void *key, size_t len,
		     const struct ntx_auth_key *dflt);
/* FI_NTX_AUTH_KEY (no key when unset). */
void ntx_auth_key_default(struct ntx_auth_key *k);

/* ---- getinfo --------------------------------------------------------------- */
int ntx_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints, struct fi_info **info);
extern const struct fi_tx_attr ntx_tx_attr;
extern const struct fi_rx_attr ntx_rx_attr;

/* ---- common object helpers --------------------------------------------- */
struct ntx_fabric {
	struct fid_fabric fab;
	atomic_int ref;
};

struct ntx_wait;

/* A counter of users so that close can return -FI_EBUSY. */
static inline void ntx_ref_get(atomic_int *r) { atomic_fetch_add(r, 1); }
static inline void ntx_ref_put(atomic_int *r) { atomic_fetch_sub(r, 1); }

/* ---- signal: an eventfd that becomes readable when an object has news --- */
struct ntx_signal {
	int fd;
	atomic_bool armed;    /* an fd user exists: every raise writes */
	atomic_int sleepers; /* threads blocked on fd right now */
};
int ntx_signal_open(struct ntx_signal *s);
void ntx_signal_close(struct ntx_signal *s);
void ntx_signal_raise_slow(struct ntx_signal *s);
/* No syscall on the data path unless somebody can be waiting. */
static inline void ntx_signal_raise(struct ntx_signal *s)
{
	if (atomic_load_explicit(&s->armed, memory_order_relaxed) ||
	    atomic_load_explicit(&s->sleepers, memory_order_seq_cst))
		ntx_signal_raise_slow(s);
}
static inline void ntx_signal_arm(struct ntx_signal *s)
{
	atomic_store(&s->armed, true);
}
void ntx_signal_drain(struct ntx_signal *s);
/* Waits until readable or timeout (ms, -1 = forever); 0, -FI_EAGAIN */
int ntx_signal_wait(struct ntx_signal *s, int timeout_ms);

/* ---- domain ------------------------------------------------------------- */
struct ntx_mr;
struct ntx_ep;
struct ntx_cq;
struct ntx_cntr;

struct ntx_domain {
	struct fid_domain dom;
	struct ntx_fabric *fabric;
	atomic_int ref;
	/* Locks, in the order they nest: lock (endpoint list, wait sets,
	 * domain-wide progress) > a completion object's scope lock (its
	 * endpoint list and progress) > an endpoint's lock (its engine
	 * state) > the leaves: mr_lock, an AV's lock, a CQ's lock. Threads
	 * polling different CQs share none of them (thread-hot CQs). */
	pthread_mutex_t lock;
	pthread_mutex_t mr_lock; /* MR table; held across check and copy */
	bool lockless;        /* FI_THREAD_DOMAIN without a helper thread */
	bool ep_lockless;     /* ... or FI_THREAD_COMPLETION: no endpoint,
			       * scope or CQ lock */
	struct ntx_list eps;  /* ntx_ep.dom_entry, polled by progress */
	enum fi_threading threading;
	/* the domain's name (shm, tcp or a verbs device) and the back end
	 * that reaches remote peers (NULL for shm) */
	char name[64];
	const struct ntx_be_ops *net_ops;
	uint64_t mr_mode;
	struct fid_eq *eq;
	struct ntx_auth_key auth; /* job key of the domain's endpoints */
	/* MR table: key = [random:32 | index:32] (DESIGN §6) */
	struct ntx_mr **mr_table;
	uint32_t mr_cap;
	bool progress_busy; /* recursion guard */
	int wait_sets[16];  /* epoll fds given out by FI_GETWAIT */
	int nwait_sets;
	/* FI_PROGRESS_AUTO: a helper thread progresses when the application
	 * has not for FI_NTX_PROGRESS_IDLE_US */
	bool auto_progress;
	pthread_t auto_tid;
	int auto_stop_fd;
	int auto_avoid_cpu; /* where the opening thread ran */
	_Atomic uint64_t app_poll_ns;
};

/* The network back end of a domain name: 0 and *ops NULL for shm,
 * -FI_EINVAL for a name ntx does not serve. */
struct ntx_be_ops;
int ntx_domain_net(const char *name, const struct ntx_be_ops **ops);

/* Domain lock held: progress of every endpoint. */
void ntx_domain_progress(struct ntx_domain *dom);
/* Before a completion object's own progress: keeps the helper thread
 * away. */
void ntx_domain_note_poll(struct ntx_domain *dom);
void ntx_domain_poll(struct ntx_domain *dom); /* progress, staying armed */
int ntx_auto_start(struct ntx_domain *dom);
void ntx_auto_stop(struct ntx_domain *dom);
/* Adds the wait fds of every back end of the domain to an epoll set. */
int ntx_domain_wait_fds(struct ntx_domain *dom, int *fds, int max);
void ntx_domain_arm(struct ntx_domain *dom, bool arm);
/* FI_GETWAIT: an epoll fd with the object's signal and every back end's
 * wait fd (endpoints opened later join it); closed by the caller. */
int ntx_domain_wait_set(struct ntx_domain *dom, struct ntx_signal *sig,
			int *epfd);
void ntx_domain_wait_set_close(struct ntx_domain *dom, int epfd);
void ntx_domain_wait_set_add(struct ntx_domain *dom, int fd);
/* FI_THREAD_DOMAIN: the application serializes every call on the domain,
 * so without a progress thread the lock guards nothing. */
static inline void ntx_domain_lock(struct ntx_domain *d)
{
	if (!d->lockless)
		pthread_mutex_lock(&d->lock);
}
static inline void ntx_domain_unlock(struct ntx_domain *d)
{
	if (!d->lockless)
		pthread_mutex_unlock(&d->lock);
}
/* Locks of endpoints, scopes and CQ rings: the application serializes
 * them itself with FI_THREAD_COMPLETION. */
static inline void ntx_cmutex_lock(const struct ntx_domain *d,
				   pthread_mutex_t *m)
{
	if (!d->ep_lockless)
		pthread_mutex_lock(m);
}
static inline void ntx_cmutex_unlock(const struct ntx_domain *d,
				     pthread_mutex_t *m)
{
	if (!d->ep_lockless)
		pthread_mutex_unlock(m);
}
/* The endpoints a completion object (CQ or counter) progresses, sleeps
 * and arms for: the thread-hot path. whole_domain: a counter bound to an
 * MR counts traffic of any endpoint. */
struct ntx_scope {
	pthread_mutex_t lock; /* the list, and progress through it */
	struct ntx_ep **eps;
	size_t n;
	bool whole_domain;
};
void ntx_scope_init(struct ntx_scope *s);
void ntx_scope_fini(struct ntx_scope *s);
int ntx_scope_add(struct ntx_domain *d, struct ntx_scope *s,
		  struct ntx_ep *ep);
void ntx_scope_del(struct ntx_domain *d, struct ntx_scope *s,
		   struct ntx_ep *ep);
void ntx_scope_progress(struct ntx_domain *d, struct ntx_scope *s);
/* Blocks until an endpoint of the scope or the signal has news, or
 * timeout_ms passes; ready() is checked after arming. */
void ntx_scope_sleep(struct ntx_domain *d, struct ntx_scope *s,
		     struct ntx_signal *sig, bool (*ready)(void *arg),
		     void *arg, int timeout_ms);
/* fi_trywait: progress, arm, re-check with ready(); 0 or -FI_EAGAIN */
int ntx_scope_trywait(struct ntx_domain *d, struct ntx_scope *s,
		      struct ntx_signal *sig, bool (*ready)(void *arg),
		      void *arg);
/* Any other lock of the domain's objects, skipped like the domain's. */
static inline void ntx_mutex_lock(const struct ntx_domain *d,
				  pthread_mutex_t *m)
{
	if (!d->lockless)
		pthread_mutex_lock(m);
}
static inline void ntx_mutex_unlock(const struct ntx_domain *d,
				    pthread_mutex_t *m)
{
	if (!d->lockless)
		pthread_mutex_unlock(m);
}

int ntx_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
		    void *context);
int ntx_domain_open(struct fid_fabric *fabric, struct fi_info *info,
		    struct fid_domain **dom, void *context);
int ntx_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		struct fid_av **av, void *context);
int ntx_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **cq, void *context);
int ntx_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **eq, void *context);
int ntx_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		  struct fid_cntr **cntr, void *context);
int ntx_ep_open(struct fid_domain *domain, struct fi_info *info,
		struct fid_ep **ep, void *context);
int ntx_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access,
	       uint64_t offset, uint64_t requested_key, uint64_t flags,
	       struct fid_mr **mr, void *context);
int ntx_mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
		uint64_t access, uint64_t offset, uint64_t requested_key,
		uint64_t flags, struct fid_mr **mr, void *context);
int ntx_mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
		   uint64_t flags, struct fid_mr **mr);
int ntx_query_atomic(struct fid_domain *domain, enum fi_datatype datatype,
		     enum fi_op op, struct fi_atomic_attr *attr,
		     uint64_t flags);

/* ---- AV ------------------------------------------------------------------- */
struct ntx_av {
	struct fid_av av;
	struct ntx_domain *domain;
	atomic_int ref;
	enum fi_av_type type;
	struct fid_eq *eq;
	pthread_mutex_t lock; /* entries: endpoints look up under it */
	struct ntx_addr *addrs; /* indexed by fi_addr (slot) */
	uint8_t *used;
	size_t count, cap;
};
/* Returns the address stored at fi_addr, or NULL when the slot is empty. */
const struct ntx_addr *ntx_av_get(struct ntx_av *av, fi_addr_t fi_addr);
fi_addr_t ntx_av_reverse(struct ntx_av *av, const struct ntx_addr *a);

/* ---- EQ ------------------------------------------------------------------- */
struct ntx_eq;
int ntx_eq_report(struct fid_eq *eq, uint32_t event, const void *buf,
		  size_t len, int err, void *context);
/* fi_trywait for one object: -FI_EAGAIN when it has something to read. */
int ntx_cq_trywait(struct fid *fid);
int ntx_eq_trywait(struct fid *fid);
int ntx_cntr_trywait(struct fid *fid);

/* ---- CQ ------------------------------------------------------------------- */
struct ntx_cq_ent {
	struct fi_cq_tagged_entry e;
	fi_addr_t src;
};

struct ntx_cq_err {
	struct ntx_list entry;
	struct fi_cq_err_entry e;
	fi_addr_t src;
	struct ntx_addr err_addr; /* FI_SOURCE_ERR: sender's name */
};

struct ntx_cq {
	struct fid_cq cq;
	struct ntx_domain *domain;
	atomic_int ref;
	enum fi_cq_format format;
	enum fi_wait_obj wait_obj;
	struct ntx_signal sig;
	struct ntx_cq_ent *ring;
	size_t cap, head, count;
	struct ntx_list errs;
	struct ntx_cq_err *last_err; /* freed on the next read */
	atomic_bool signaled; /* fi_cq_signal: wake one sread */
	int epfd;             /* FI_GETWAIT set, -1 until asked for */
	bool source_err;
	pthread_mutex_t lock;  /* ring and errors (a leaf lock) */
	struct ntx_scope scope; /* endpoints bound to the CQ */
	/* fi_cq_read's own buffer while its progress runs and the ring is
	 * empty: completions are written once, straight into it (only where
	 * one thread at a time uses the CQ: ep_lockless domains) */
	uint8_t *direct;
	fi_addr_t *direct_src;
	size_t direct_cap, direct_n, esz;
};
/* Entries a CQ may hold before peers' remote CQ data is refused (the
 * peer's connection fails): a peer cannot grow it without bound. */
#define NTX_CQ_REMOTE_MAX (1u << 20)
/* Room for one more entry that a peer caused (takes the CQ's lock). */
bool ntx_cq_room_for_peer(struct ntx_cq *cq);
/* Called from progress: takes the CQ's own lock. */
int ntx_cq_push(struct ntx_cq *cq, void *ctx, uint64_t flags, size_t len,
		void *buf, uint64_t data, uint64_t tag, fi_addr_t src);
int ntx_cq_push_err(struct ntx_cq *cq, void *ctx, uint64_t flags, size_t len,
		    void *buf, uint64_t data, uint64_t tag, size_t olen,
		    int err, fi_addr_t src, const struct ntx_addr *err_addr);

/* ---- counter ------------------------------------------------------------- */
struct ntx_cntr {
	struct fid_cntr cntr;
	struct ntx_domain *domain;
	atomic_int ref;
	atomic_uint_fast64_t value, err;
	enum fi_wait_obj wait_obj;
	struct ntx_signal sig;
	int epfd; /* FI_GETWAIT set, -1 until asked for */
	struct ntx_scope scope; /* endpoints bound to the counter */
};
void ntx_cntr_inc(struct ntx_cntr *c);
void ntx_cntr_inc_err(struct ntx_cntr *c);

/* ---- MR --------------------------------------------------------------------- */
struct ntx_mr {
	struct fid_mr mr;
	struct ntx_domain *domain;
	uint64_t access;
	uint64_t offset;
	struct iovec *iov;
	size_t iov_count;
	size_t len;            /* bytes of the region, all iovecs */
	uint32_t index;
	struct ntx_ep *ep;     /* FI_MR_ENDPOINT: the bound endpoint */
	bool enabled;          /* FI_MR_ENDPOINT: fi_mr_enable was called */
	struct ntx_cntr *cntr; /* FI_RMA_EVENT: bumped by remote access */
	uint64_t cntr_flags;   /* FI_REMOTE_READ and/or FI_REMOTE_WRITE */
};
/* The MR that a peer's key names, checked before any byte moves (DESIGN
 * §6): live, generation, endpoint binding, range and access. Gives the
 * region's iovecs for [addr, addr + len). -FI_EKEYREJECTED, -FI_EFAULT
 * or -FI_EACCES. Hold mr_lock until the bytes moved. */
int ntx_mr_check(struct ntx_domain *dom, const struct ntx_ep *ep,
		 uint64_t key, uint64_t addr, uint64_t len, uint64_t access,
		 struct iovec *iov, size_t *niov, struct ntx_mr **mr);

#define NTX_MAX_IOV 8

/* ---- stubs (ntx_stub.c) ---------------------------------------------------- */
/* Fills any op of any table: the ABI returns its -FI_ENOSYS in rax. */
ssize_t ntx_nosys(void);
const char *ntx_strerror(int prov_errno, char *buf, size_t len);
#define NTX_NOSYS ((void *)ntx_nosys)
int ntx_no_bind(struct fid *fid, struct fid *bfid, uint64_t flags);
int ntx_no_control(struct fid *fid, int command, void *arg);
int ntx_no_ops_open(struct fid *fid, const char *name, uint64_t flags,
		    void **ops, void *context);
int ntx_no_tostr(const struct fid *fid, char *buf, size_t len);
int ntx_no_ops_set(struct fid *fid, const char *name, uint64_t flags,
		   void *ops, void *context);
extern struct fi_ops_fabric ntx_fabric_ops;

static inline uint64_t ntx_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* NTX_H */
