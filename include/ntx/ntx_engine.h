/*
 * The back-end-independent engine (DESIGN §3): endpoints, virtual
 * connections (vc), the tag-matching engine (tme), requests (req) and the
 * eager/rendezvous protocols (proto). It talks to back ends only through
 * struct ntx_be_ops.
 */
#ifndef NTX_ENGINE_H
#define NTX_ENGINE_H

#include "ntx/ntx_core.h"
#include "ntx/ntx_backend.h"
#include "ntx/ntx_wire.h"

enum ntx_vc_state {
	NTX_VC_CONNECTING,
	NTX_VC_AUTH,      /* connected; the job-key exchange runs (§7) */
	NTX_VC_CONNECTED,
	NTX_VC_ERROR,
};

/* The job-key exchange of one VC (ntx_auth.c). */
struct ntx_vc_auth {
	uint8_t mine[NTX_AUTH_NONCE];   /* our challenge */
	uint8_t theirs[NTX_AUTH_NONCE]; /* the peer's challenge */
	struct ntx_addr peer_name;      /* as the peer's challenge gave it */
	uint8_t tx;       /* NTX_AUTH_TX_*: packets still to send */
	bool have_theirs; /* the peer's challenge arrived */
	bool proven;      /* the peer's proof checked out */
	uint64_t deadline_ns; /* FI_NTX_AUTH_TIMEOUT_MS after the VC began */
};
#define NTX_AUTH_TX_CHAL 1
#define NTX_AUTH_TX_PROOF 2
#define NTX_AUTH_TX_REFUSE 4

struct ntx_vc {
	struct ntx_list entry; /* ntx_ep.vcs */
	struct ntx_ep *ep;
	const struct ntx_be_ops *ops; /* the back end that carries it */
	struct ntx_be_conn *conn;
	struct ntx_addr peer;
	fi_addr_t fi_addr; /* AV slot of the peer, FI_ADDR_NOTAVAIL if none */
	fi_addr_t key;     /* where it is in ep->vc_tab (ntx_vc_key), or
			    * FI_ADDR_NOTAVAIL */
	enum ntx_vc_state state;
	int err;
	struct ntx_list backlog; /* reqs waiting for the ring, in order */
	struct ntx_list busy_entry; /* ntx_ep.busy_vcs while backlog has any */
	bool busy;
	struct ntx_list pending; /* reqs waiting for the peer (FIN/ACK/DATA) */
	uint32_t issued; /* reqs started and not complete: FI_FENCE waits */
	uint32_t notify_credit; /* writes checked by RMA_CHECK: RMA_NOTIFY */
	uint32_t key_strikes; /* rejected remote accesses since the last
			       * accepted one (ntx_rma_strike) */
	uint64_t strike_sreq; /* the request of the last strike */
	bool no_cma; /* single copy with this peer failed: use the window */
	/* what this peer holds of ours (limits of DESIGN §7, "limits") */
	uint32_t ctrl_queued; /* answers waiting for room in its ring */
	int doom;             /* fail it (this error) at the next reap */
	size_t unexp_bytes;   /* its unexpected messages, with headers */
	/* on ep->rx->unexp_vcs while it holds some and they count in the
	 * receive context's budget (ntx_unexp_budget.c); off_budget once it
	 * failed or was doomed by the budget: what it holds is no longer
	 * counted there, and it may hold no more */
	struct ntx_list unexp_entry;
	bool unexp_off_budget;
	/* failed with eager unexpected messages that stay receivable: they
	 * count in ep->dead_unexp_bytes, and ntx_vc_destroy leaves the VC
	 * (a zombie, off every list) to the last of them */
	bool keeps_unexp;
	bool zombie;
	struct ntx_vc_auth *auth; /* job-key exchange; NULL when neither
				   * side has a key */
	/* the streamed message coming in (NTX_OP_SHEAD to its last
	 * NTX_OP_SDATA): into a receive it matched (on vc->pending), or
	 * into an unexpected entry not yet queued; rx_stream_got bytes of
	 * rx_stream_len came */
	struct ntx_req *rx_stream;
	struct ntx_unexp *rx_stream_u;
	size_t rx_stream_got, rx_stream_len;
};

enum ntx_req_kind { NTX_REQ_SEND, NTX_REQ_RECV, NTX_REQ_CTRL };

enum ntx_req_state {
	NTX_RS_NEW,
	NTX_RS_POSTED,    /* recv: in a tme posted queue */
	NTX_RS_RTS_SENT,  /* send: waiting for CTS or FIN */
	NTX_RS_STREAM,    /* send: DATA segments going out */
	NTX_RS_WAIT_ACK,  /* send: delivery-complete ack */
	NTX_RS_RNDV_DATA, /* recv: DATA segments coming in */
	NTX_RS_RNDV_SPLIT, /* recv: waiting for the sender's part (DONE) */
	NTX_RS_RMA,       /* one-sided: issuing packets or waiting answers */
	NTX_RS_SEND_STREAM, /* send: a streamed message's packets going out */
	NTX_RS_RX_STREAM, /* recv: a streamed message's segments coming in */
};

struct ntx_req {
	/* the head: what every request uses, cleared by ntx_req_get (an
	 * eager message touches these three cache lines and no others) */
	struct ntx_list entry; /* backlog, pending, posted or free list */
	enum ntx_req_kind kind;
	enum ntx_req_state state;
	struct ntx_ep *ep;
	struct ntx_vc *vc;
	void *context;
	uint64_t flags; /* op flags: FI_COMPLETION, FI_TAGGED, ... */
	uint64_t id;    /* index | generation, carried on the wire */
	size_t iov_count;
	size_t len;
	uint64_t tag, ignore, data;
	uint64_t seq;   /* recv: post order, across the tme's queues */
	fi_addr_t addr; /* send: destination; recv: source or UNSPEC */
	bool silent;    /* fi_inject: counters only, never a CQ entry */
	bool issued;    /* counted in vc->issued */
	uint8_t rma_op; /* NTX_OP_WRITE, NTX_OP_READ, NTX_OP_ATOMIC; 0 = msg */
	/* recv: one buffer, not FI_MULTI_RECV, its completion wanted
	 * (ntx_req_set_recv): a message may take it whole at once */
	bool plain;
	/* valid up to iov_count (one-sided: the local data, atomics: the
	 * operands); not cleared */
	struct iovec iov[NTX_MAX_IOV];
	/* the tail: zero whenever the request is on the free list, so that
	 * ntx_req_get need not clear it; ntx_req_put clears it,
	 * ntx_req_put_lean skips that for a request that never wrote it */
	/* rendezvous */
	uint64_t peer_req;
	size_t done;     /* bytes sent (stream) or received (rndv data) */
	size_t want;     /* bytes the stream or rndv receive moves */
	size_t msg_len;  /* recv: the sender's length */
	int split_err;   /* recv: result of our part of a split transfer */
	/* multi-receive: buffer bookkeeping and child receives */
	struct ntx_req *multi_parent; /* a child: the buffer it came from */
	size_t multi_used;       /* bytes of the buffer handed out */
	uint32_t multi_children; /* references: children in flight */
	bool multi_released;     /* off the posted queue (below the
				  * minimum left) */
	/* copy of inject data or a queued control header */
	struct ntx_wire_hdr hdr;
	/* one-sided: riov = remote parts (len in bytes); issued part by
	 * part, each packet answered */
	uint8_t pkt_flags;
	uint64_t cq_flags;
	size_t riov_count;
	size_t part, part_off; /* issue position */
	uint32_t unacked;      /* packets without an answer yet */
	uint8_t redo, redo_pass; /* parts to resend without single copy */
	uint8_t rma_stage;     /* several parts: 0 check, 1 data, 2 notify */
	int rma_err;           /* first error an answer reported (positive) */
	uint16_t dt_op;        /* atomics: datatype << 8 | op */
	size_t dt_size;
	size_t ciov_count;
	size_t resiov_count;
	/* neither cleared: the bounce buffer stays with the pooled request;
	 * each array is valid up to its count */
	uint8_t *bounce;
	struct fi_rma_iov riov[NTX_MAX_IOV];
	struct iovec ciov[NTX_MAX_IOV];   /* compare values */
	struct iovec resiov[NTX_MAX_IOV]; /* fetched values */
};

/* large unexpected-message buffers an endpoint keeps (ntx_proto_unexp.c) */
#define NTX_UNEXP_BIG 4

/* An arrived message nobody had posted a receive for. */
struct ntx_unexp {
	struct ntx_list entry;     /* arrival order, tagged or untagged */
	struct ntx_list tag_entry; /* tagged: arrival order within a bucket */
	struct ntx_vc *vc;
	struct ntx_wire_hdr hdr;
	size_t len;   /* eager payload bytes held in data */
	size_t cap;   /* bytes allocated at data */
	uint8_t *data;
	struct ntx_wire_iov riov[NTX_MAX_IOV]; /* RTS */
	uint16_t niov;
	void *claim_ctx; /* FI_CLAIM: reserved for this context */
};

#define NTX_TME_BUCKETS 256

/* A tagged receive fi_trecv posted on the message path (one buffer, its
 * completion a plain CQ entry, a lockless endpoint with no request on
 * its tagged queues): its arguments in the lean ring of struct ntx_tme
 * instead of a request. One cache line. */
struct ntx_lean_recv {
	void *buf;
	size_t len;
	fi_addr_t src;
	uint64_t tag;
	uint64_t ignore;
	void *context;
	uint64_t flags;
	uint64_t pad;
};
#define NTX_TME_LEAN 256 /* entries of the lean ring, a power of two */

/* Exact tagged receives (no ignore bits) and tagged unexpected messages
 * are also hashed by tag, so the common MPI case walks one short bucket;
 * post sequence numbers keep the order against wildcard receives.
 * Before all of that, the lean ring: [lean_head, lean_tail) are tagged
 * receives in post order, kept while no tagged receive is a request (the
 * tagged queues are empty). A small or eager message that the ring's
 * head takes whole fills it without a request (ntx_proto_on_small,
 * ntx_rx_lean_eager); any other tagged message's match takes the head as
 * a request when it matches (ntx_tme_lean_match); anything else that
 * posts a tagged receive, matches, cancels or fails one first turns the
 * ring's receives into requests (ntx_tme_lean_flush), so that the queues
 * alone hold them again, in order (DESIGN §3, "TME"). */
struct ntx_tme {
	/* what every post and match reads, on one cache line */
	struct ntx_list posted[2]; /* [0] untagged, [1] tagged with ignore */
	struct ntx_list unexp[2];
	uint64_t seq;
	size_t nexact; /* receives in posted_tag */
	uint32_t lean_head, lean_tail; /* running; both 0 when empty */
	struct ntx_list posted_tag[NTX_TME_BUCKETS];
	struct ntx_list unexp_tag[NTX_TME_BUCKETS];
	struct ntx_lean_recv lean[NTX_TME_LEAN];
};

/* One back-end instance of an endpoint (callback context of its conns). */
struct ntx_ep_be {
	struct ntx_ep *ep;
	const struct ntx_be_ops *ops;
	struct ntx_be_ep *be;
};

/* FI_EP_MSG endpoints and passive endpoints (DESIGN §3, "MSG
 * endpoints"): the API layer's connection management, called under the
 * endpoint lock. */
struct ntx_cm_hooks {
	/* an NTX_OP_CM packet; len == h->msg_len <= NTX_CM_DATA_MAX */
	void (*packet)(struct ntx_ep *ep, struct ntx_vc *vc,
		       const struct ntx_wire_hdr *h, const void *data,
		       size_t len);
	/* a VC failed or is being closed */
	void (*vc_failed)(struct ntx_ep *ep, struct ntx_vc *vc);
};

/* the shm window, and the domain's network back end (tcp or verbs) */
enum { NTX_BE_SHM, NTX_BE_NET, NTX_BE_MAX };

/* The head of every fid_ep ntx hands out: an endpoint (real is itself),
 * an alias, a scalable endpoint or one of its contexts (real is the
 * endpoint they act on); the operation calls take the endpoint and the
 * default flags from it without asking which kind of fid they were
 * given. */
#define NTX_FEP_FIELDS                                                      \
	struct fid_ep ep;                                                  \
	struct ntx_ep *real;                                               \
	uint64_t tx_op_flags, rx_op_flags
struct ntx_fep {
	NTX_FEP_FIELDS;
};
/* The first member of each: the head as a whole, or its fields by name. */
#define NTX_FEP_HEAD                                                        \
	union {                                                            \
		struct ntx_fep fep;                                        \
		struct {                                                   \
			NTX_FEP_FIELDS;                                    \
		};                                                         \
	}

struct ntx_ep {
	NTX_FEP_HEAD;
	struct ntx_domain *domain;
	pthread_mutex_t lock; /* engine state below (see ntx_domain) */
	/* the lock taken: lock, or that of the shared receive context the
	 * endpoint is bound to (its engine state is touched by every
	 * endpoint bound to it) */
	pthread_mutex_t *lockp;
	/* where receives are matched: this endpoint, or its shared receive
	 * context (DESIGN §3, "Shared contexts"); an srx's is itself */
	struct ntx_ep *rx;
	bool is_srx;
	/* every receive completion of this endpoint is one entry in its
	 * own rx CQ and nothing else (ntx_ep_set_paths) */
	bool rx_plain;
	/* rx_plain, and no connection management: ntx_proto_on_small may
	 * complete a tagged message at once */
	bool rx_fast;
	/* enabled, its own receive queue, a domain without endpoint locks:
	 * fi_trecv may post at once (ntx_ep_set_paths) */
	bool post_fast;
	/* enabled, a domain without endpoint locks, no connection
	 * management: fi_tsenddata and its kin may send at once
	 * (ntx_ep_set_paths) */
	bool send_fast;
	/* an srx: the bound endpoint that reports what no receiving
	 * endpoint does (a cancel, a multi-receive buffer's release) */
	struct ntx_ep *srx_report;
	struct fid *stx; /* the shared transmit context bound, if any */
	size_t msg_prefix; /* FI_MSG_PREFIX: receive lengths count it */
	bool progress_busy;   /* recursion guard */
	bool armed;           /* fi_trywait armed it: next progress disarms */
	atomic_int ref;
	struct ntx_list dom_entry;
	uint64_t caps;
	bool enabled;
	struct ntx_av *av;
	struct ntx_cq *tx_cq, *rx_cq;
	bool tx_selective, rx_selective;
	struct ntx_cntr *send_cntr, *recv_cntr;
	struct ntx_cntr *read_cntr, *write_cntr, *rread_cntr, *rwrite_cntr;
	struct fid_eq *eq;
	struct ntx_ep_be be[NTX_BE_MAX]; /* ops NULL when not opened */
	bool local_via_network;
	struct ntx_list vcs;
	struct ntx_list busy_vcs; /* VCs with a backlog: progress pumps only
				   * these, however many peers are idle */
	struct ntx_idtab vc_tab; /* struct ntx_vc *, by ntx_vc_key */
	/* a scalable endpoint's context (DESIGN §3, "Scalable endpoints"):
	 * every context's name, told to each peer that connects */
	const struct ntx_addr *sep_names;
	uint32_t sep_n;
	struct ntx_list unexp_free; /* ntx_unexp pool */
	uint32_t unexp_pooled;      /* entries in unexp_free */
	/* buffers above NTX_UNEXP_KEEP_CAP kept for the next unexpected
	 * messages that large (streamed messages that came before their
	 * receive, a halo exchange's), at most NTX_UNEXP_BIG of them and
	 * NTX_UNEXP_BIG_BYTES in all (ntx_proto_unexp.c) */
	struct ntx_unexp_big {
		uint8_t *data;
		size_t cap;
	} unexp_big[NTX_UNEXP_BIG];
	size_t unexp_big_bytes;
	size_t dead_unexp_bytes;    /* unexpected messages of failed peers
				     * kept (at most FI_NTX_GONE_UNEXP_MAX) */
	/* a receive context's budget (this endpoint's when it is its own
	 * ep->rx, where its unexpected lists are): the bytes its live peers'
	 * unexpected messages hold, at most FI_NTX_EP_UNEXP_MAX, as the sum
	 * of their vc->unexp_bytes, and those peers (ntx_unexp_budget.c) */
	size_t unexp_bytes;
	uint32_t unexp_peers;
	struct ntx_list unexp_vcs; /* ntx_vc.unexp_entry */
	struct ntx_idtab reqtab; /* id -> struct ntx_req *, for the wire */
	/* the free requests: a stack linked through entry.next (NULL:
	 * empty), two stores to push or pop one */
	struct ntx_list *req_free;
	uint32_t bounces; /* pooled requests holding a bounce buffer */
	size_t tx_outstanding, tx_limit;
	size_t min_multi_recv;
	bool cma_ok;
	uint64_t key_rejects; /* remote accesses rejected, every peer */
	uint64_t next_check_ns;
	uint32_t progress_calls;
	uint32_t net_skip; /* polls left before the idle network back end's
			    * next look (ntx_ep_poll_be) */
	bool reap; /* failed VCs to disconnect */
	struct ntx_auth_key auth; /* job key (len 0: none) */
	uint32_t auth_vcs;        /* VCs whose job-key exchange runs */
	struct ntx_addr name;     /* our whole name, as peers see it */
	/* MSG and passive endpoints: cm set; packets other than NTX_OP_CM
	 * come only from msg_peer, and every operation goes to msg_dest
	 * (FI_ADDR_NOTAVAIL: not connected, or shut down) */
	const struct ntx_cm_hooks *cm;
	void *cm_ctx;
	fi_addr_t msg_peer, msg_dest;
	/* last: its tag buckets are most of the endpoint's bytes, and the
	 * fields above that progress reads stay on a few cache lines */
	struct ntx_tme tme;
};
_Static_assert(offsetof(struct ntx_ep, real) ==
		       offsetof(struct ntx_ep, fep.real) &&
	       offsetof(struct ntx_ep, rx_op_flags) ==
		       offsetof(struct ntx_ep, fep.rx_op_flags),
	       "an endpoint's head read as struct ntx_fep (ntx_ep_of)");

/* Counter slots of an endpoint, in fi_ep_bind flag order: send, recv,
 * read, write, remote read, remote write. */
#define NTX_EP_CNTRS 6
static inline struct ntx_cntr **ntx_ep_cntr_slot(struct ntx_ep *ep, int i)
{
	struct ntx_cntr **slots[NTX_EP_CNTRS] = {
		&ep->send_cntr, &ep->recv_cntr, &ep->read_cntr, &ep->write_cntr, &ep->rread_cntr,
		&ep->rwrite_cntr,
	};
	return slots[i];
}
static inline bool ntx_ep_has_cntr(struct ntx_ep *ep)
{
	for (int i = 0; i < NTX_EP_CNTRS; i++)
		if (*ntx_ep_cntr_slot(ep, i))
			return true;
	return false;
}

static inline void ntx_ep_lock(struct ntx_ep *ep)
{
	ntx_cmutex_lock_rank(ep->domain, ep->lockp, NTX_LOCK_EP);
}
static inline void ntx_ep_unlock(struct ntx_ep *ep)
{
	ntx_cmutex_unlock(ep->domain, ep->lockp);
}
/* "Endpoint lock held" (DESIGN §3, locks) */
#define ntx_assert_ep_locked(ep)                                            \
	ntx_assert_cmutex_locked((ep)->domain, (ep)->lockp)
/* Makes arrivals write the back ends' wait fds (or stops it); takes the
 * endpoint lock. */
void ntx_ep_arm(struct ntx_ep *ep, bool arm);

/* The engine's parts, in this order: each needs the types above and the
 * parts before it. */
#include "ntx/ntx_engine_req.h"   /* requests, completions */
#include "ntx/ntx_engine_vc.h"    /* virtual connections, job keys */
#include "ntx/ntx_engine_proto.h" /* tag matching, protocols, one-sided */

/* The back end that reaches a peer: the shm window on this host, else the
 * network one. */
struct ntx_ep_be *ntx_ep_be_for(struct ntx_ep *ep, const struct ntx_addr *a);

/* ---- domain progress (ntx_dom_progress.c) and the helper thread
 * (ntx_auto.c) ---- */

/* Domain lock held: progress of every endpoint (unlike a CQ's, which
 * holds its scope's lock). */
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
/* progress of a CQ's or counter's endpoints (ntx_progress.c) */
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

/* ---- progress (ntx_progress.c) ---- */
/* The rare parts of an endpoint's progress, out of line. */
void ntx_ep_check_peers_now(struct ntx_ep *ep);
void ntx_ep_arm_locked(struct ntx_ep *ep, bool arm);
void ntx_ep_pump(struct ntx_ep *ep);
void ntx_ep_reap(struct ntx_ep *ep);

static inline void ntx_ep_check_peers(struct ntx_ep *ep)
{
	/* the clock is read on one progress call in 64: off the fast path */
	if (!(++ep->progress_calls & 63))
		ntx_ep_check_peers_now(ep);
}

/* Next to the shm window, the network back end of an endpoint whose
 * last look found nothing is looked at on one progress call in
 * NTX_NET_IDLE_POLLS: with every peer on this host its poll is pure
 * overhead on each shm message (an indirect call, the socket watch), and a
 * frame that arrives meanwhile waits a few hundred nanoseconds at most,
 * nothing next to a network's latency. A look that finds work keeps it
 * polled on every call. */
#define NTX_NET_IDLE_POLLS 8

static inline __attribute__((always_inline)) void
ntx_ep_poll_be(struct ntx_ep *ep)
{
	struct ntx_ep_be *shm = &ep->be[NTX_BE_SHM], *net = &ep->be[NTX_BE_NET];

	if (shm->ops)
		shm->ops->poll(shm->be);
	if (!net->ops)
		return;
	if (shm->ops && ep->net_skip) {
		ep->net_skip--;
		return;
	}
	ep->net_skip = net->ops->poll(net->be) ? 0 : NTX_NET_IDLE_POLLS - 1;
}

/* An endpoint's progress: what every call runs is inline, so that a
 * CQ's scope progresses its endpoints without a call per endpoint; the
 * rare work (disarming, backlogs, liveness, failed VCs) is out of line. */
static inline __attribute__((always_inline)) void
ntx_ep_progress_inline(struct ntx_ep *ep)
{
	ntx_assert_ep_locked(ep);
	if (ep->progress_busy) /* a completion callback calling back in */
		return;
	ep->progress_busy = true;
	if (ep->armed) { /* awake again after fi_trywait */
		ep->armed = false;
		ntx_ep_arm_locked(ep, false);
	}
	ntx_ep_poll_be(ep);
	if (!ntx_list_empty(&ep->busy_vcs))
		ntx_ep_pump(ep);
	ntx_ep_check_peers(ep);
	if (ep->reap)
		ntx_ep_reap(ep);
	ep->progress_busy = false;
}

/* The endpoint's shm back end keeps a watch (ntx_be_quiet may say): the
 * test that fails first, right after a message, as a few loads. */
static inline bool ntx_ep_watching(const struct ntx_ep *ep)
{
	return ep->be[NTX_BE_SHM].ops && ep->be[NTX_BE_SHM].be->watch.on;
}

/* An endpoint that is watching (ntx_ep_watching, the caller's first
 * test): its progress now would only look at back ends that have no
 * news (ntx_be_quiet): no rare work, no look at the network back end
 * due, no liveness check due. Then it counts as a progress call, as if
 * it had run (DESIGN §3, "Progress"). Lockless domains. */
static inline bool ntx_ep_quiet(struct ntx_ep *ep)
{
	struct ntx_ep_be *shm = &ep->be[NTX_BE_SHM], *net = &ep->be[NTX_BE_NET];

	if (ep->progress_busy ||
	    ep->armed || ep->reap || !ntx_list_empty(&ep->busy_vcs) ||
	    !((ep->progress_calls + 1) & 63) ||
	    (net->ops && !ep->net_skip) || !ntx_be_quiet(shm->be))
		return false;
	ep->progress_calls++;
	if (net->ops)
		ep->net_skip--;
	return true;
}

/* A scope's progress where one thread at a time uses the CQ or counter
 * and its endpoints and no helper thread exists (ep_lockless, not the
 * whole domain): no lock, no note for the helper. Inline: fi_cq_read's
 * poll loop runs it on every call. */
static inline __attribute__((always_inline)) void
ntx_scope_progress_lockless(struct ntx_scope *s)
{
	for (size_t i = 0; i < s->n; i++)
		ntx_ep_progress_inline(s->eps[i]);
}
/* Endpoint lock held. */
void ntx_ep_progress(struct ntx_ep *ep);
/* The same, taking the endpoint lock. */
void ntx_ep_poll(struct ntx_ep *ep);


#endif /* NTX_ENGINE_H */
