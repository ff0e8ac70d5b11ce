/*
 * prov/core (DESIGN §2): the state of the domain and of the completion
 * objects the engine fills (signals, scopes, CQ rings, counters), the AV
 * table and the MR key table. Core calls nothing above it; the engine
 * and the API call into it.
 */
#ifndef NTX_CORE_H
#define NTX_CORE_H

#include "ntx/ntx_base.h"

/* ---- id table (ntx_idtab.c, DESIGN §3) -------------------------------------
 * A pointer per small integer id, for tables looked up on the data path
 * (a request per arriving packet): a lookup is a bounds check and a
 * load. Empty slots are NULL; the table doubles as ids grow, up to
 * NTX_IDTAB_MAX slots. A zeroed struct is an empty table. */
#define NTX_IDTAB_MIN 64u
#define NTX_IDTAB_MAX (1u << 28) /* 2 GiB of slots: ids past it fail */
struct ntx_idtab {
	void **slot;
	uint32_t cap;  /* slots allocated */
	uint32_t used; /* slots holding a pointer */
	uint32_t hint; /* no empty slot below it (ntx_idtab_alloc) */
};
static inline void *ntx_idtab_get(const struct ntx_idtab *t, uint64_t id)
{
	return id < t->cap ? t->slot[id] : NULL;
}
/* Puts p at id, growing the table (p NULL: clears). -FI_ENOSPC past
 * NTX_IDTAB_MAX, -FI_ENOMEM. */
int ntx_idtab_set(struct ntx_idtab *t, uint64_t id, void *p);
/* Puts p (not NULL) in the lowest empty slot and gives its id. */
int ntx_idtab_alloc(struct ntx_idtab *t, void *p, uint32_t *id);
/* Empties a slot; returns what it held (NULL if nothing). */
void *ntx_idtab_clear(struct ntx_idtab *t, uint64_t id);
/* Frees the slots (not what they point to); the table is empty again. */
void ntx_idtab_fini(struct ntx_idtab *t);

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
void ntx_signal_drain_slow(struct ntx_signal *s);
/* Empties the eventfd after the news was taken; no syscall unless
 * somebody can have written it. */
static inline void ntx_signal_drain(struct ntx_signal *s)
{
	if (atomic_load_explicit(&s->armed, memory_order_relaxed) ||
	    atomic_load_explicit(&s->sleepers, memory_order_relaxed))
		ntx_signal_drain_slow(s);
}
/* Waits until readable or timeout (ms, -1 = forever); 0, -FI_EAGAIN */
int ntx_signal_wait(struct ntx_signal *s, int timeout_ms);

/* ---- wait object: how a CQ, counter, EQ or wait set blocks --------------
 * The state fi_cq_sread, fi_cntr_wait, fi_eq_sread, fi_wait and
 * FI_GETWAIT share; the code is the API's (prov/api/ntx_waitobj.c), the
 * struct is here because the objects that embed it are. ops says what
 * the object sleeps on (struct ntx_waitobj_ops in ntx.h). */
struct ntx_waitobj_ops;
struct ntx_domain;
struct ntx_scope;
struct ntx_waitobj {
	enum fi_wait_obj kind;     /* as opened; FI_WAIT_UNSPEC is FD */
	struct ntx_signal sig;     /* readable while the object has news */
	int epfd;                  /* the FI_GETWAIT fd, -1 until asked for */
	struct fid_wait *wait_set; /* FI_WAIT_SET: the set it is in */
	const struct ntx_waitobj_ops *ops;
	/* a CQ's or counter's: the endpoints whose back ends wake it */
	struct ntx_domain *domain;
	struct ntx_scope *scope;
};

/* ---- domain ------------------------------------------------------------- */
struct ntx_fabric;
struct ntx_be_ops;
struct ntx_mr;
struct ntx_ep;
struct ntx_cq;
struct ntx_cntr;

struct ntx_domain {
	struct fid_domain dom;
	struct ntx_fabric *fabric;
	atomic_int ref;
	/* Locks, in the order they nest (DESIGN §3, locks; enum
	 * ntx_lock_rank): lock (endpoint list, wait sets, domain-wide
	 * progress) > a completion object's scope lock (its endpoint list
	 * and progress) > an endpoint's lock (its engine state) > mr_lock
	 * (held from a target's key check until the bytes moved, completions
	 * written under it) > the leaves: an AV's lock, a CQ's lock. Threads
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
	bool sockaddr; /* names are FI_SOCKADDR_IN (ntx_addr_to_sin) */
	/* triggered operations waiting for their counter (ntx_trigger.c):
	 * trig_lock is a leaf, taken with no other lock held */
	pthread_mutex_t trig_lock;
	struct ntx_list trig;
	atomic_uint ntrig;
	struct fid_eq *eq;
	struct ntx_auth_key auth; /* job key of the domain's endpoints */
	/* MR table (struct ntx_mr *): key = [random:32 | index:32] (§6) */
	struct ntx_idtab mr_table;
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

/* Lock contracts (DESIGN §3, locks). A function whose comment says "X
 * lock held" asserts it: lock-checking builds (configure
 * --enable-lock-check, NTX_LOCK_CHECK; the ASan build and the unit tests
 * use it) keep, per thread, the locks of the domain's objects that the
 * ntx_*_lock helpers below took, with their rank, and assert that a thread
 * takes locks in rising rank only. A lock the threading mode skips is
 * never taken and its contract holds trivially. Other builds compile none
 * of it: the bookkeeping would cost every lock on the message path. */
enum ntx_lock_rank {
	NTX_LOCK_DOMAIN = 1, /* ntx_domain.lock */
	NTX_LOCK_SCOPE,      /* a CQ's or counter's ntx_scope.lock */
	NTX_LOCK_EP,         /* ntx_ep.lock */
	NTX_LOCK_MR,         /* ntx_domain.mr_lock */
	NTX_LOCK_LEAF,       /* a CQ's or an AV's lock: nothing nests in */
};
#ifdef NTX_LOCK_CHECK
void ntx_lock_note_take(const pthread_mutex_t *m, enum ntx_lock_rank rank);
void ntx_lock_note_drop(const pthread_mutex_t *m);
bool ntx_lock_held(const pthread_mutex_t *m);
/* domain lock, and the other locks that only a lockless domain skips */
#define ntx_assert_domain_locked(d)                                         \
	assert((d)->lockless || ntx_lock_held(&(d)->lock))
#define ntx_assert_mutex_locked(d, m)                                       \
	assert((d)->lockless || ntx_lock_held(m))
/* endpoint, scope and CQ locks, which ep_lockless domains skip */
#define ntx_assert_cmutex_locked(d, m)                                      \
	assert((d)->ep_lockless || ntx_lock_held(m))
#else
#define ntx_lock_note_take(m, rank) ((void)0)
#define ntx_lock_note_drop(m) ((void)0)
#define ntx_assert_domain_locked(d) ((void)(d))
#define ntx_assert_mutex_locked(d, m) ((void)(d), (void)(m))
#define ntx_assert_cmutex_locked(d, m) ((void)(d), (void)(m))
#endif

/* The rank is checked before the lock is taken: a wrong order asserts
 * instead of deadlocking once in a while. */
static inline void ntx_lock_take(pthread_mutex_t *m, enum ntx_lock_rank rank)
{
	ntx_lock_note_take(m, rank);
	pthread_mutex_lock(m);
}
static inline void ntx_lock_drop(pthread_mutex_t *m)
{
	ntx_lock_note_drop(m);
	pthread_mutex_unlock(m);
}

/* FI_THREAD_DOMAIN: the application serializes every call on the domain,
 * so without a progress thread the lock guards nothing. */
static inline void ntx_domain_lock(struct ntx_domain *d)
{
	if (!d->lockless)
		ntx_lock_take(&d->lock, NTX_LOCK_DOMAIN);
}
static inline void ntx_domain_unlock(struct ntx_domain *d)
{
	if (!d->lockless)
		ntx_lock_drop(&d->lock);
}
/* Locks of endpoints, scopes and CQ rings: the application serializes
 * them itself with FI_THREAD_COMPLETION. */
static inline void ntx_cmutex_lock_rank(const struct ntx_domain *d,
					pthread_mutex_t *m,
					enum ntx_lock_rank rank)
{
	if (!d->ep_lockless)
		ntx_lock_take(m, rank);
}
/* a CQ's lock */
static inline void ntx_cmutex_lock(const struct ntx_domain *d,
				   pthread_mutex_t *m)
{
	ntx_cmutex_lock_rank(d, m, NTX_LOCK_LEAF);
}
static inline void ntx_cmutex_unlock(const struct ntx_domain *d,
				     pthread_mutex_t *m)
{
	if (!d->ep_lockless)
		ntx_lock_drop(m);
}
/* The endpoints a completion object (CQ or counter) progresses, sleeps
 * and arms for: the thread-hot path. whole_domain: a counter bound to an
 * MR counts traffic of any endpoint. */
struct ntx_scope {
	pthread_mutex_t lock; /* the list, and progress through it */
	struct ntx_ep **eps;
	size_t n;
	bool whole_domain;
	/* the one endpoint of a scope of one that is not the whole
	 * domain, else NULL: a CQ's read that may skip an idle poll
	 * (ntx_cq_quiet) looks at it */
	struct ntx_ep *only;
};
void ntx_scope_init(struct ntx_scope *s);
void ntx_scope_fini(struct ntx_scope *s);
int ntx_scope_add(struct ntx_domain *d, struct ntx_scope *s,
		  struct ntx_ep *ep);
void ntx_scope_del(struct ntx_domain *d, struct ntx_scope *s,
		   struct ntx_ep *ep);
/* Any other lock of the domain's objects, skipped like the domain's:
 * mr_lock and an AV's lock. */
static inline void ntx_mutex_lock(const struct ntx_domain *d,
				  pthread_mutex_t *m)
{
	if (!d->lockless)
		ntx_lock_take(m, m == &d->mr_lock ? NTX_LOCK_MR
						  : NTX_LOCK_LEAF);
}
static inline void ntx_mutex_unlock(const struct ntx_domain *d,
				    pthread_mutex_t *m)
{
	if (!d->lockless)
		ntx_lock_drop(m);
}


/* ---- AV ------------------------------------------------------------------- */
/* ---- named memfds and shared AVs (ntx_named.c, ntx_av_shared.c) --------- */
#define NTX_NAMED_MAX 64 /* bytes of a shared AV's name: [A-Za-z0-9._-] */
bool ntx_named_valid(const char *name);
/* Claims "ntx-KIND-UID-NAME" and makes its memfd: -FI_EADDRINUSE when
 * another process holds the name. */
int ntx_named_create(const char *kind, const char *name, int *sock,
		     int *memfd);
/* Accepts and drops the connections finders made to learn our pid. */
void ntx_named_drain(int sock);
/* Opens, read-only, the memfd another process of ours created under the
 * name: -FI_ENOENT, -FI_EACCES. */
int ntx_named_find(const char *kind, const char *name, int *memfd);

#define NTX_AVS_MAX (1u << 20) /* entries of a shared AV */
#define NTX_AVS_DEFAULT 1024 /* ... when fi_av_attr.count is 0 */
struct ntx_av_shared {
	uint8_t *map; /* NULL: the AV is not shared */
	size_t len;
	uint32_t cap; /* slots (fi_addr 0..cap-1) */
	int sock;     /* writer: the name's socket */
	int fd;       /* writer: the memfd */
	bool writer;
};
int ntx_av_shared_create(struct ntx_av_shared *s, const char *name,
			 uint32_t cap);
int ntx_av_shared_open(struct ntx_av_shared *s, const char *name);
void ntx_av_shared_close(struct ntx_av_shared *s);
/* The slots in insertion order (fi_av_attr.map_addr). */
fi_addr_t *ntx_av_shared_order(const struct ntx_av_shared *s);
/* Writer: publishes slot's name (-FI_ENOSPC past cap) or clears it. */
int ntx_av_shared_put(struct ntx_av_shared *s, uint32_t slot,
		      const struct ntx_addr *a);
void ntx_av_shared_clear(struct ntx_av_shared *s, uint32_t slot);
/* Reader: a checked copy of slot's name: -FI_ENOENT when empty,
 * -FI_EINVAL when not a valid name, -FI_EAGAIN when always torn. */
int ntx_av_shared_get(const struct ntx_av_shared *s, uint64_t slot,
		      struct ntx_addr *out);

struct ntx_av {
	struct fid_av av;
	struct ntx_domain *domain;
	atomic_int ref;
	enum fi_av_type type;
	bool read_only; /* opened FI_READ: a shared AV another process fills */
	/* a MSG endpoint's private AV: ntx names even in a domain whose
	 * names are FI_SOCKADDR_IN (the CM converts at the API) */
	bool ntx_names;
	struct ntx_av_shared shared; /* named AVs */
	struct fid_eq *eq;
	pthread_mutex_t lock; /* entries: endpoints look up under it */
	struct ntx_idtab addrs; /* struct ntx_addr *, by fi_addr (slot) */
	/* scalable endpoints (DESIGN §3, "Scalable endpoints"): bits of
	 * fi_addr naming a receive context, and the entries that name
	 * several contexts (struct ntx_av_list *, by slot) */
	int rx_ctx_bits;
	struct ntx_idtab lists;
};
#define NTX_AV_RX_CTX_BITS_MAX 16

/* A scalable endpoint's entry: its contexts' names, names[0] the same
 * as the slot's name. */
struct ntx_av_list {
	uint32_t n;
	struct ntx_addr names[];
};
/* Returns the address stored at fi_addr, or NULL when the slot is empty. */
const struct ntx_addr *ntx_av_get(struct ntx_av *av, fi_addr_t fi_addr);
/* The name of receive context ctx of the entry at slot (0: the slot's
 * own); NULL when the slot is empty or has no such context. */
const struct ntx_addr *ntx_av_get_ctx(struct ntx_av *av, fi_addr_t slot,
				      uint32_t ctx);
/* How many contexts the entry at slot names (1 for a plain name). */
uint32_t ntx_av_ctx_count(struct ntx_av *av, fi_addr_t slot);
/* The slot naming a, and which of its contexts a is (AV lock held). */
fi_addr_t ntx_av_reverse(struct ntx_av *av, const struct ntx_addr *a,
			 uint32_t *ctx);
/* Makes the entry at slot, whose own name is names[0], the list of n
 * names (AV lock held): a peer told us its contexts (AV lock held). */
int ntx_av_table_set_list(struct ntx_av *av, fi_addr_t slot,
			  const struct ntx_addr *names, uint32_t n);
/* Stores a name in a free slot (AV lock held); -FI_ENOMEM. */
int ntx_av_table_add(struct ntx_av *av, const struct ntx_addr *a,
		     fi_addr_t *out);
/* Empties a slot (AV lock held); -FI_EINVAL if it was empty. */
int ntx_av_table_del(struct ntx_av *av, fi_addr_t fi_addr);
/* Frees every name of the table. */
void ntx_av_table_fini(struct ntx_av *av);

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
	struct ntx_waitobj wait; /* sread, FI_GETWAIT, its signal */
	struct ntx_cq_ent *ring;
	size_t cap, head, count;
	struct ntx_list errs;
	struct ntx_cq_err *last_err; /* freed on the next read */
	atomic_bool signaled; /* fi_cq_signal: wake one sread */
	bool source_err;
	pthread_mutex_t lock;  /* ring and errors (a leaf lock) */
	struct ntx_scope scope; /* endpoints bound to the CQ */
	/* fi_cq_read's own buffer while its progress runs and the ring is
	 * has room: completions are written once, straight into it (only
	 * where one thread at a time uses the CQ: ep_lockless domains) */
	uint8_t *direct;
	fi_addr_t *direct_src;
	size_t direct_cap, direct_n, esz;
	/* the same for the tagged format without sources (MPI's): the next
	 * entry of buf and how many more fit, so that a completion costs a
	 * test and its stores (direct NULL then; dtag_left 0 otherwise) */
	struct fi_cq_tagged_entry *dtag;
	size_t dtag_left;
	/* the last fi_cq_read's progress found completions: the next one,
	 * a reader's "anything more?" (Open MPI's MTL reads until
	 * -FI_EAGAIN), answers at once when the ring is empty; the one
	 * after it progresses again (ntx_cq_rest; ep_lockless domains) */
	bool read_found;
	/* the last read answered from the ring alone, without progress:
	 * the next one progresses (ntx_cq_do_read) */
	bool ring_only;
};
/* Bytes of one entry in a CQ format (0: not a format ntx offers). */
size_t ntx_cq_entry_size(enum fi_cq_format f);
/* Entries a CQ may hold before peers' remote CQ data is refused (the
 * peer's connection fails): a peer cannot grow it without bound. */
#define NTX_CQ_REMOTE_MAX (1u << 20)
/* Room for one more entry that a peer caused (takes the CQ's lock). */
bool ntx_cq_room_for_peer(struct ntx_cq *cq);
/* A completion in the application's format, wherever it goes. */
static inline void ntx_cq_put(const struct ntx_cq *cq, void *dst, void *ctx,
			      uint64_t flags, size_t len, void *buf,
			      uint64_t data, uint64_t tag)
{
	struct fi_cq_tagged_entry *e = dst;

	if (cq->format == FI_CQ_FORMAT_TAGGED) { /* MPI's: one test */
		*e = (struct fi_cq_tagged_entry){ .op_context = ctx,
						  .flags = flags, .len = len,
						  .buf = buf, .data = data,
						  .tag = tag };
		return;
	}
	e->op_context = ctx;
	if (cq->format == FI_CQ_FORMAT_CONTEXT)
		return;
	e->flags = flags;
	e->len = len;
	if (cq->format == FI_CQ_FORMAT_MSG)
		return;
	e->buf = buf;
	e->data = data;
	if (cq->format == FI_CQ_FORMAT_DATA)
		return;
	e->tag = tag;
}
/* Up to count entries into buf (and their sources into src); CQ lock
 * held. The ring's entries come before a waiting error entry: -FI_EAVAIL
 * once the ring is empty and an error waits, -FI_EAGAIN when both are
 * empty. A connection that ends flushes its unmatched receives with
 * errors, and the messages it delivered before are read first (fabtests'
 * fi_shared_ctx -e msg read a flushed receive's error before its four
 * delivered messages). Inline: fi_cq_read takes send completions from
 * the ring. */
static inline ssize_t ntx_cq_ring_read(struct ntx_cq *cq, void *buf,
				       size_t count, fi_addr_t *src)
{
	size_t esz = cq->esz, n;

	ntx_assert_cmutex_locked(cq->domain, &cq->lock);
	if (!cq->count && !ntx_list_empty(&cq->errs))
		return -FI_EAVAIL;
	if (cq->format == FI_CQ_FORMAT_TAGGED && !src) { /* MPI's */
		struct fi_cq_tagged_entry *t = buf;
		size_t head = cq->head;

		n = count < cq->count ? count : cq->count;
		for (size_t i = 0; i < n; i++) {
			t[i] = cq->ring[head].e;
			if (++head == cq->cap)
				head = 0;
		}
		cq->head = head;
		cq->count -= n;
	} else {
		for (n = 0; n < count && cq->count; n++) {
			struct ntx_cq_ent *e = &cq->ring[cq->head];

			ntx_cq_put(cq, (uint8_t *)buf + n * esz,
				   e->e.op_context, e->e.flags, e->e.len,
				   e->e.buf, e->e.data, e->e.tag);
			if (src)
				src[n] = e->src;
			if (++cq->head == cq->cap)
				cq->head = 0;
			cq->count--;
		}
	}
	/* an empty ring starts again at its first entry: a CQ read as fast
	 * as it fills keeps writing the same few lines, which stay in the
	 * cache, instead of walking the whole ring */
	if (!cq->count) {
		cq->head = 0;
		if (ntx_list_empty(&cq->errs))
			ntx_signal_drain(&cq->wait.sig);
	}
	return n ? (ssize_t)n : -FI_EAGAIN;
}
/* Appends an entry to a ring with room (CQ lock held, or none needed);
 * the first entry tells a waiter. No division on the data path:
 * head + count < 2 * cap. */
static inline void ntx_cq_append(struct ntx_cq *cq, void *ctx, uint64_t flags,
				 size_t len, void *buf, uint64_t data,
				 uint64_t tag, fi_addr_t src)
{
	size_t i = cq->head + cq->count;
	struct ntx_cq_ent *e = &cq->ring[i < cq->cap ? i : i - cq->cap];

	e->e.op_context = ctx;
	e->e.flags = flags;
	e->e.len = len;
	e->e.buf = buf;
	e->e.data = data;
	e->e.tag = tag;
	e->src = src;
	if (cq->count++ == 0)
		ntx_signal_raise(&cq->wait.sig);
}
/* ntx_cq_push when the entry goes to the ring (takes the CQ's lock). */
int ntx_cq_push_ring(struct ntx_cq *cq, void *ctx, uint64_t flags,
		     size_t len, void *buf, uint64_t data, uint64_t tag,
		     fi_addr_t src);
/* Called from progress. Inline: while the reader is in fi_cq_read on
 * this thread and its buffer has room, the entry goes straight to the
 * application's buffer, else (lockless domains) to the ring, with no
 * call. */
static inline __attribute__((always_inline)) int
ntx_cq_push(struct ntx_cq *cq, void *ctx, uint64_t flags, size_t len,
	    void *buf, uint64_t data, uint64_t tag, fi_addr_t src)
{
	if (cq->dtag_left) {
		struct fi_cq_tagged_entry *t = cq->dtag;

		*t = (struct fi_cq_tagged_entry){ .op_context = ctx,
						  .flags = flags, .len = len,
						  .buf = buf, .data = data,
						  .tag = tag };
		cq->dtag = t + 1;
		cq->dtag_left--;
		return 0;
	}
	if (!cq->direct || cq->direct_n >= cq->direct_cap) {
		/* no lock to take and room in the ring: append here */
		if (!cq->domain->ep_lockless || cq->count == cq->cap)
			return ntx_cq_push_ring(cq, ctx, flags, len, buf, data,
						tag, src);
		ntx_cq_append(cq, ctx, flags, len, buf, data, tag, src);
		return 0;
	}
	ntx_cq_put(cq, cq->direct + cq->direct_n * cq->esz, ctx, flags, len,
		   buf, data, tag);
	if (cq->direct_src)
		cq->direct_src[cq->direct_n] = src;
	cq->direct_n++;
	return 0;
}
/* ntx_cq_push of a completion the application's own call makes at once
 * (a small send) in a lockless domain: one thread at a time uses the CQ
 * (ep_lockless), and it is not inside fi_cq_read, so there is no reader's
 * buffer to look at: to the ring. */
static inline __attribute__((always_inline)) int
ntx_cq_push_api(struct ntx_cq *cq, void *ctx, uint64_t flags, size_t len,
		void *buf, uint64_t data, uint64_t tag, fi_addr_t src)
{
	if (cq->count == cq->cap)
		return ntx_cq_push_ring(cq, ctx, flags, len, buf, data, tag,
					src);
	ntx_cq_append(cq, ctx, flags, len, buf, data, tag, src);
	return 0;
}
int ntx_cq_push_err(struct ntx_cq *cq, void *ctx, uint64_t flags, size_t len,
		    void *buf, uint64_t data, uint64_t tag, size_t olen,
		    int err, fi_addr_t src, const struct ntx_addr *err_addr);

/* ---- counter ------------------------------------------------------------- */
struct ntx_cntr {
	struct fid_cntr cntr;
	struct ntx_domain *domain;
	atomic_int ref;
	atomic_uint_fast64_t value, err;
	struct ntx_waitobj wait; /* fi_cntr_wait, FI_GETWAIT, its signal */
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
	struct ntx_cntr *cntr; /* FI_RMA_EVENT: bumped by remote access */
	uint64_t cntr_flags;   /* FI_REMOTE_READ and/or FI_REMOTE_WRITE */
};
/* The MR that a peer's key names, through any endpoint of the domain,
 * checked before any byte moves (DESIGN §6): live, generation, range and
 * access. Gives the region's iovecs for [addr, addr + len).
 * -FI_EKEYREJECTED, -FI_EFAULT or -FI_EACCES. Hold mr_lock until the
 * bytes moved. */
int ntx_mr_check(struct ntx_domain *dom, uint64_t key, uint64_t addr,
		 uint64_t len, uint64_t access, struct iovec *iov,
		 size_t *niov, struct ntx_mr **mr);
/* Puts an MR in a free slot of the domain's table (mr_lock held). */
int ntx_mr_table_add(struct ntx_domain *dom, struct ntx_mr *mr);
/* Takes it out again (mr_lock held). */
void ntx_mr_table_del(struct ntx_domain *dom, struct ntx_mr *mr);
/* The MR in slot i, or NULL (mr_lock held). */
struct ntx_mr *ntx_mr_table_at(struct ntx_domain *dom, uint32_t i);
/* An application-chosen key some live MR already has. */
bool ntx_mr_key_used(struct ntx_domain *dom, uint64_t key);

/* ---- iovec arrays (ntx_iov.c, DESIGN §3) ---- */
static inline size_t ntx_iov_len(const struct iovec *iov, size_t count)
{
	size_t len = 0;

	for (size_t i = 0; i < count; i++)
		len += iov[i].iov_len;
	return len;
}
/* A position inside an iovec array: byte off of entry idx. Zero-length
 * entries are stepped over; every operation stops at the array's end and
 * says how many bytes it covered. */
struct ntx_iov_cur {
	const struct iovec *iov;
	size_t count;
	size_t idx;
	size_t off;
};
void ntx_iov_cur_init(struct ntx_iov_cur *c, const struct iovec *iov,
		      size_t count);
/* The next contiguous run of at most max bytes at the position, which
 * moves past it; its length (0 at the end). c->idx is then the entry
 * the run lies in. */
size_t ntx_iov_cur_next(struct ntx_iov_cur *c, size_t max,
			struct iovec *chunk);
size_t ntx_iov_cur_skip(struct ntx_iov_cur *c, size_t len);
/* Copies into the iovecs at the position (copy_in) or out of them. */
size_t ntx_iov_cur_copy_in(struct ntx_iov_cur *c, const void *src,
			   size_t len);
size_t ntx_iov_cur_copy_out(struct ntx_iov_cur *c, void *dst, size_t len);
/* The next len bytes as at most max_out iovecs (count of them). */
size_t ntx_iov_cur_slice(struct ntx_iov_cur *c, size_t len,
			 struct iovec *out, size_t max_out, size_t *count);
size_t ntx_iov_copy_to_walk(const struct iovec *iov, size_t count,
			    size_t off, const void *src, size_t len);
/* Copies len bytes into the iovecs from offset off; returns the bytes
 * copied. Inline for the message path's case: one buffer, one copy. */
static inline size_t ntx_iov_copy_to(const struct iovec *iov, size_t count,
				     size_t off, const void *src, size_t len)
{
	if (count == 1 && off <= iov[0].iov_len &&
	    len <= iov[0].iov_len - off) {
		if (len <= 16)
			ntx_copy16((uint8_t *)iov[0].iov_base + off, src, len);
		else
			memcpy((uint8_t *)iov[0].iov_base + off, src, len);
		return len;
	}
	return ntx_iov_copy_to_walk(iov, count, off, src, len);
}
size_t ntx_iov_copy_from(void *dst, const struct iovec *iov, size_t count,
			 size_t len);
/* The bytes [off, off + len) of an iovec array, as an iovec array. */
size_t ntx_iov_slice(const struct iovec *iov, size_t iov_count, size_t off,
		     size_t len, struct iovec *out, size_t *count);
#endif /* NTX_CORE_H */
