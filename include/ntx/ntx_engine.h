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

/* ---- requests (ntx_req.c) ---- */
/* Doubles an endpoint's pool of requests. */
int ntx_req_grow(struct ntx_ep *ep);
/* The tail of a request: from the first field after the iovecs up to
 * the bounce pointer (DESIGN §3, requests). */
#define NTX_REQ_TAIL_OFF offsetof(struct ntx_req, peer_req)
#define NTX_REQ_TAIL_LEN (offsetof(struct ntx_req, bounce) - NTX_REQ_TAIL_OFF)
#ifdef NTX_LOCK_CHECK
/* Checking builds: the tail of a pooled request is really zero. */
void ntx_req_assert_tail_clear(const struct ntx_req *r);
#else
#define ntx_req_assert_tail_clear(r) ((void)(r))
#endif
/* Takes a request off the endpoint's free stack, which is not empty.
 * Its ep is the pool's, set once (ntx_req_grow); the tail is clear, the
 * iovecs are valid up to their count. */
static inline struct ntx_req *ntx_req_pop(struct ntx_ep *ep)
{
	struct ntx_req *r = ntx_container_of(ep->req_free, struct ntx_req,
					     entry);

	ep->req_free = r->entry.next;
	ntx_req_assert_tail_clear(r);
	return r;
}
/* The head fields of a popped request that a receive's post
 * (ntx_req_set_recv, ntx_tme_post) does not set: cleared field by field
 * (a memset of the head compiles to a rep stos that costs more). Its id
 * took a new generation when it was freed (ntx_req_put_lean). */
static inline void ntx_req_init_head(struct ntx_ep *ep, struct ntx_req *r,
				     enum ntx_req_kind kind)
{
	r->kind = kind;
	r->vc = NULL;
	r->data = 0;
	r->silent = false;
	r->issued = false;
	r->rma_op = 0;
}
/* A request from the endpoint's pool, its head cleared. Inline: every
 * message takes one. */
static inline struct ntx_req *ntx_req_get(struct ntx_ep *ep,
					  enum ntx_req_kind kind)
{
	struct ntx_req *r;

	if (!ep->req_free && ntx_req_grow(ep))
		return NULL;
	r = ntx_req_pop(ep);
	ntx_list_init(&r->entry);
	ntx_req_init_head(ep, r, kind);
	r->state = NTX_RS_NEW;
	r->context = NULL;
	r->flags = 0;
	r->iov_count = 0;
	r->len = 0;
	r->tag = 0;
	r->ignore = 0;
	r->seq = 0;
	r->addr = FI_ADDR_UNSPEC;
	r->plain = false;
	return r;
}
void ntx_req_put(struct ntx_req *req);
/* ntx_req_put for a request whose tail (struct ntx_req) was never
 * written: an eager send or receive, the message path's case. */
static inline void ntx_req_put_lean(struct ntx_ep *ep, struct ntx_req *r)
{
	ntx_req_assert_tail_clear(r);
	/* late packets naming this id miss: a free request is NEW to
	 * ntx_req_lookup, and its next use has a new generation */
	r->id += 1ull << 32;
	r->state = NTX_RS_NEW;
	r->entry.next = ep->req_free;
	ep->req_free = &r->entry;
}
struct ntx_req *ntx_req_lookup(struct ntx_ep *ep, uint64_t id);
/* Frees every request of the endpoint's pool (at close). */
void ntx_req_fini(struct ntx_ep *ep);
/* A copy buffer for inject data and queued packets (NTX_BOUNCE_SIZE) */
int ntx_req_bounce(struct ntx_req *req);
/* The pool keeps the bounce buffers of at most NTX_BOUNCE_KEEP requests
 * (512 KiB at the default eager size): a burst of queued injects to
 * peers still connecting leaves no buffer per request behind.
 * ntx_req_put and the eager send's end call ntx_req_bounce_trim. */
#define NTX_BOUNCE_KEEP 64
void ntx_req_bounce_trim(struct ntx_req *req);
#define NTX_INJECT_MAX 4096
#define NTX_BOUNCE_SIZE                                                    \
	(ntx_params.eager_max > NTX_INJECT_MAX ? ntx_params.eager_max       \
					       : NTX_INJECT_MAX)

/* The endpoint whose CQ and counter report a receive: its own, or for a
 * receive posted to a shared receive context, the endpoint the message
 * arrived at (vc, else the request's), else the context's reporter. */
static inline struct ntx_ep *ntx_req_rx_ep(const struct ntx_req *r,
					   const struct ntx_vc *vc)
{
	if (!r->ep->is_srx)
		return r->ep;
	if (!vc)
		vc = r->vc;
	return vc ? vc->ep : r->ep->srx_report;
}

/* ---- completions (ntx_comp.c) ---- */
void ntx_comp_tx(struct ntx_req *req);
static inline uint64_t ntx_comp_kind(uint64_t op_flags)
{
	return op_flags & FI_TAGGED ? FI_TAGGED : FI_MSG;
}
static inline bool ntx_comp_wanted(bool selective, uint64_t op_flags)
{
	return !selective || (op_flags & FI_COMPLETION);
}
/* A send done without a request (ntx_proto_send_small; fast: see
 * there). Inline, like ntx_comp_rx: every message completes. */
static inline __attribute__((always_inline)) void
ntx_comp_send(struct ntx_ep *ep, void *context, uint64_t flags, bool fast)
{
	uint64_t f = FI_SEND | ntx_comp_kind(flags);

	if (ep->tx_cq && ntx_comp_wanted(ep->tx_selective, flags)) {
		if (fast)
			ntx_cq_push_api(ep->tx_cq, context, f, 0, NULL, 0, 0,
					FI_ADDR_NOTAVAIL);
		else
			ntx_cq_push(ep->tx_cq, context, f, 0, NULL, 0, 0,
				    FI_ADDR_NOTAVAIL);
	}
	if (ep->send_cntr)
		ntx_cntr_inc(ep->send_cntr);
}
void ntx_comp_tx_err(struct ntx_req *req, int err);
/* ntx_comp_rx's errors: truncated (olen), or FI_SOURCE_ERR's unknown
 * sender. */
void ntx_comp_rx_fault(struct ntx_ep *ep, struct ntx_req *req, uint64_t f,
		       size_t len, uint64_t tag, uint64_t data, fi_addr_t src,
		       void *buf, size_t olen, const struct ntx_addr *src_name);
/* Recomputed on every bind, unbind and fi_enable. rx_plain: the
 * endpoint's own receive queue (not a shared context, nor bound to one),
 * an rx CQ, no receive counter, no FI_MSG_PREFIX, no FI_SOURCE_ERR;
 * ntx_comp_rx then writes the entry (which FI_SELECTIVE_COMPLETION may
 * still leave out) after two tests instead of six. rx_fast, post_fast
 * and send_fast: the one-byte tests of ntx_proto_on_small, fi_trecv and
 * the small sends (ntx_send_one, ntx_do_inject). */
static inline void ntx_ep_set_paths(struct ntx_ep *ep)
{
	ep->rx_plain = !ep->is_srx && ep->rx == ep && ep->rx_cq &&
		       !ep->recv_cntr && !ep->msg_prefix &&
		       !(ep->caps & FI_SOURCE_ERR);
	ep->rx_fast = ep->rx_plain && !ep->cm;
	ep->post_fast = ep->enabled && ep->rx == ep && ep->domain->ep_lockless;
	ep->send_fast = ep->enabled && !ep->cm && ep->domain->ep_lockless;
}
/* A receive done with a message that came on vc. */
static inline __attribute__((always_inline)) void
ntx_comp_rx(struct ntx_req *req, struct ntx_vc *vc, size_t len,
	    uint64_t flags, uint64_t tag, uint64_t data, fi_addr_t src,
	    void *buf, size_t olen, const struct ntx_addr *src_name)
{
	struct ntx_ep *ep;
	uint64_t f = FI_RECV | ntx_comp_kind(req->flags) | flags;

	if (__builtin_expect(req->ep->rx_plain && !olen &&
			     ntx_comp_wanted(req->ep->rx_selective,
					     req->flags), 1)) {
		ntx_cq_push(req->ep->rx_cq, req->context, f, len, buf, data,
			    tag, src);
		return;
	}
	ep = ntx_req_rx_ep(req, vc);
	len += ep->msg_prefix; /* FI_MSG_PREFIX counts the prefix */
	if (olen || (src == FI_ADDR_NOTAVAIL && (ep->caps & FI_SOURCE_ERR) &&
		     (ep->caps & FI_SOURCE) && src_name)) {
		ntx_comp_rx_fault(ep, req, f, len, tag, data, src, buf, olen,
				  src_name);
		return;
	}
	if (ep->rx_cq && (ntx_comp_wanted(ep->rx_selective, req->flags) ||
			  (flags & FI_MULTI_RECV)))
		ntx_cq_push(ep->rx_cq, req->context, f, len, buf, data, tag,
			    src);
	if (ep->recv_cntr)
		ntx_cntr_inc(ep->recv_cntr);
}
void ntx_comp_rx_err(struct ntx_req *req, int err, size_t len, size_t olen,
		     uint64_t tag, uint64_t data);
/* one-sided: the initiator's completion (err positive or 0) */
void ntx_comp_rma(struct ntx_req *req, int err);

/* ---- virtual connections (ntx_vc.c) ---- */
/* The VC of an AV address as it is. */
int ntx_vc_get_slot(struct ntx_ep *ep, fi_addr_t addr, struct ntx_vc **vc);
void ntx_vc_on_names(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		     const void *payload, size_t len);
/* A live VC with the endpoint of this name, or NULL. */
struct ntx_vc *ntx_vc_by_name(struct ntx_ep *ep, const struct ntx_addr *a);
/* An NTX_OP_CM packet (stage NTX_CM_*) with len <= NTX_CM_DATA_MAX
 * bytes of connection data. */
int ntx_vc_cm_send(struct ntx_vc *vc, uint32_t stage, uint64_t cid,
		   const void *data, size_t len);
fi_addr_t ntx_vc_fi_addr_lookup(struct ntx_vc *vc);
/* The VC table key of an operation's address (DESIGN §3, "Scalable
 * endpoints"): the AV slot; where the AV has rx_ctx_bits, the slot and
 * below it the receive context fi_rx_addr put in the high bits.
 * FI_ADDR_NOTAVAIL for a context or slot out of range. */
static inline bool ntx_vc_ctx_keys(const struct ntx_ep *ep)
{
	return ep->av && ep->av->rx_ctx_bits;
}

static inline fi_addr_t ntx_vc_key_of(const struct ntx_ep *ep, fi_addr_t slot,
				      uint64_t ctx)
{
	if (!ntx_vc_ctx_keys(ep))
		return ctx ? FI_ADDR_NOTAVAIL : slot;
	if (ctx >= NTX_SEP_CTX_MAX ||
	    slot >= (NTX_IDTAB_MAX >> NTX_SEP_CTX_SHIFT))
		return FI_ADDR_NOTAVAIL;
	return slot << NTX_SEP_CTX_SHIFT | ctx;
}

static inline fi_addr_t ntx_vc_key(const struct ntx_ep *ep, fi_addr_t addr)
{
	int bits;

	if (!ntx_vc_ctx_keys(ep) || addr == FI_ADDR_NOTAVAIL)
		return addr;
	bits = ep->av->rx_ctx_bits;
	return ntx_vc_key_of(ep, addr & (~0ull >> bits), addr >> (64 - bits));
}
/* The peer's AV address (FI_ADDR_NOTAVAIL if it is not in the AV). */
static inline fi_addr_t ntx_vc_fi_addr(struct ntx_vc *vc)
{
	if (vc->fi_addr != FI_ADDR_NOTAVAIL) /* known: every message */
		return vc->fi_addr;
	return ntx_vc_fi_addr_lookup(vc);
}
/* The VC of an operation's address (a MSG endpoint's: its peer's).
 * Inline: every send looks up a VC it has. */
static inline int ntx_vc_get(struct ntx_ep *ep, fi_addr_t addr,
			     struct ntx_vc **out)
{
	struct ntx_vc *vc;

	if (ep->cm) {
		if (ep->msg_dest == FI_ADDR_NOTAVAIL)
			return -FI_ENOTCONN;
		addr = ep->msg_dest;
	}
	addr = ntx_vc_key(ep, addr);
	vc = ntx_idtab_get(&ep->vc_tab, addr);
	if (vc && vc->state != NTX_VC_ERROR) {
		*out = vc;
		return 0;
	}
	return ntx_vc_get_slot(ep, addr, out);
}
/* What ntx_vc_get answers for a peer that cannot be reached now (no back
 * end of the domain reaches it, its connection was refused at once, its
 * service has no endpoint): an operation to it completes in error
 * instead of being refused at the call, which callers retry (fi_msg(3):
 * only -FI_EAGAIN asks for that). */
static inline bool ntx_vc_err_unreachable(int err)
{
	return err == -FI_EHOSTUNREACH || err == -FI_ECONNREFUSED ||
	       err == -FI_EADDRNOTAVAIL || err == -FI_ENETUNREACH;
}
void ntx_vc_fail(struct ntx_vc *vc, int err);
void ntx_vc_destroy(struct ntx_vc *vc);
void ntx_vc_queue(struct ntx_vc *vc, struct ntx_req *req);
/* Puts req on the backlog (at its head: to be resumed first). */
void ntx_vc_backlog(struct ntx_vc *vc, struct ntx_req *req, bool head);
void ntx_vc_pump(struct ntx_vc *vc);
int ntx_vc_ctrl(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr);
/* The same with a payload, copied if the packet has to wait. */
int ntx_vc_ctrl_data(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr,
		     const struct iovec *iov, size_t iovcnt, size_t len);
extern const struct ntx_be_cb ntx_vc_callbacks;
/* Puts the VC on the endpoint's list of VCs that progress pumps. */
void ntx_vc_mark_busy(struct ntx_vc *vc);

/* ---- job keys (ntx_auth.c, DESIGN §7) ---- */
/* The exchange is needed when we or the peer (its name says) have a key:
 * sets up vc->auth (0 when not needed, or -FI_ENOMEM). */
int ntx_auth_init(struct ntx_vc *vc);
/* The back end connected: the VC enters NTX_VC_AUTH if it needs it. */
void ntx_auth_begin(struct ntx_vc *vc);
/* Sends what the exchange owes; the VC becomes CONNECTED once both
 * proofs passed. */
void ntx_auth_pump(struct ntx_vc *vc);
/* An NTX_OP_AUTH packet, or any packet before the VC was proven. */
void ntx_auth_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			const void *payload, size_t len);
void ntx_auth_free(struct ntx_vc *vc);
/* Fails the VCs whose exchange outlived FI_NTX_AUTH_TIMEOUT_MS. */
void ntx_auth_check(struct ntx_ep *ep, uint64_t now);
/* Packets of the exchange still to send (progress keeps pumping). */
static inline bool ntx_auth_tx_pending(const struct ntx_vc *vc)
{
	return vc->auth && vc->auth->tx;
}

/* ---- tag matching (ntx_tme.c) ---- */
void ntx_tme_init(struct ntx_tme *tme);
struct ntx_unexp *ntx_tme_find_unexp(struct ntx_tme *tme, bool tagged,
				     fi_addr_t src, uint64_t tag,
				     uint64_t ignore, void *claim_ctx);
/* The unexpected message a receive takes, or NULL. Inline: every
 * unexpected message is on unexp[tagged], so the common case of a receive
 * posted before its message costs one load and no call. */
static inline struct ntx_unexp *ntx_tme_match_unexp(struct ntx_tme *tme,
						    bool tagged,
						    fi_addr_t src,
						    uint64_t tag,
						    uint64_t ignore,
						    void *claim_ctx)
{
	if (ntx_list_empty(&tme->unexp[tagged]))
		return NULL;
	return ntx_tme_find_unexp(tme, tagged, src, tag, ignore, claim_ctx);
}
/* A tag's bucket of posted_tag and unexp_tag. */
static inline size_t ntx_tme_bucket(uint64_t tag)
{
	tag ^= tag >> 29;
	tag *= 0xbf58476d1ce4e5b9ull;
	tag ^= tag >> 32;
	return (size_t)(tag & (NTX_TME_BUCKETS - 1));
}
/* A tagged receive with no ignore bits: hashed by its tag. */
static inline bool ntx_tme_exact(const struct ntx_req *req)
{
	return (req->flags & FI_TAGGED) && !req->ignore;
}
/* The lean ring's receives become requests on the queues, in order (a
 * receive no request can be had for fails with FI_ENOMEM); the ring is
 * empty after. tme is an endpoint's own (ntx_ep.tme). */
void ntx_tme_lean_flush(struct ntx_tme *tme);
/* The lean ring holds receives. */
static inline bool ntx_tme_lean_any(const struct ntx_tme *tme)
{
	return tme->lean_head != tme->lean_tail;
}
/* The receive at the head of a lean ring that holds one. */
static inline struct ntx_lean_recv *ntx_tme_lean_head(struct ntx_tme *tme)
{
	return &tme->lean[tme->lean_head & (NTX_TME_LEAN - 1)];
}
/* The head was taken: the next one is the head. Both ends go back to 0
 * when the ring empties, so that a ring read as fast as it fills stays
 * in its first lines. */
static inline void ntx_tme_lean_pop(struct ntx_tme *tme)
{
	if (++tme->lean_head == tme->lean_tail)
		tme->lean_head = tme->lean_tail = 0;
}
/* Before anything else looks at or joins the tagged queues. */
static inline void ntx_tme_lean_check(struct ntx_tme *tme)
{
	if (ntx_tme_lean_any(tme))
		ntx_tme_lean_flush(tme);
}
/* A tagged message's match while the lean ring holds receives: the
 * ring's head, as a request taken off it (the others stay), when it takes
 * the message; else NULL, the ring turned into requests on the queues
 * first (ntx_tme_lean_flush), where the caller looks. */
struct ntx_req *ntx_tme_lean_match(struct ntx_tme *tme, fi_addr_t src,
				   uint64_t tag);
/* ntx_tme_post where the lean ring is empty. */
static inline void ntx_tme_queue(struct ntx_tme *tme, struct ntx_req *req)
{
	req->state = NTX_RS_POSTED;
	req->seq = ++tme->seq;
	if (ntx_tme_exact(req)) {
		tme->nexact++;
		ntx_list_insert_tail(&tme->posted_tag[ntx_tme_bucket(req->tag)],
				     &req->entry);
	} else
		ntx_list_insert_tail(&tme->posted[!!(req->flags & FI_TAGGED)],
				     &req->entry);
}
/* Queues a receive in post order. Inline: every receive is posted. */
static inline void ntx_tme_post(struct ntx_tme *tme, struct ntx_req *req)
{
	if (req->flags & FI_TAGGED)
		ntx_tme_lean_check(tme);
	ntx_tme_queue(tme, req);
}
/* Takes a posted receive off its queue (once). */
static inline void ntx_tme_unpost(struct ntx_tme *tme, struct ntx_req *req)
{
	ntx_list_remove(&req->entry);
	if (ntx_tme_exact(req))
		tme->nexact--;
}
static inline bool ntx_tme_tag_match(uint64_t want, uint64_t ignore,
				     uint64_t tag)
{
	return ((want ^ tag) & ~ignore) == 0;
}
static inline bool ntx_tme_src_match(fi_addr_t want, fi_addr_t src)
{
	return want == FI_ADDR_UNSPEC || want == src;
}
/* The lean receive l takes a tagged message from src with this tag. */
static inline bool ntx_tme_lean_takes(const struct ntx_lean_recv *l,
				      fi_addr_t src, uint64_t tag)
{
	return ntx_tme_src_match(l->src, src) &&
	       ntx_tme_tag_match(l->tag, l->ignore, tag);
}
static inline struct ntx_req *ntx_tme_first(struct ntx_list *q, bool tagged,
					    fi_addr_t src, uint64_t tag)
{
	struct ntx_list *it;

	ntx_list_foreach(q, it) {
		struct ntx_req *r = ntx_container_of(it, struct ntx_req, entry);

		if (ntx_tme_src_match(r->addr, src) &&
		    (!tagged || ntx_tme_tag_match(r->tag, r->ignore, tag)))
			return r;
	}
	return NULL;
}
/* Finds and dequeues the receive that takes this message (a multi-receive
 * buffer stays posted while it has room). Inline: every message. */
static inline struct ntx_req *ntx_tme_match_posted(struct ntx_tme *tme,
						   bool tagged, fi_addr_t src,
						   uint64_t tag)
{
	struct ntx_req *r;

	if (tagged && ntx_tme_lean_any(tme)) {
		r = ntx_tme_lean_match(tme, src, tag);
		if (r)
			return r;
	}
	r = ntx_tme_first(&tme->posted[tagged], tagged, src, tag);

	if (tagged && tme->nexact) {
		struct ntx_req *e = ntx_tme_first(
			&tme->posted_tag[ntx_tme_bucket(tag)], true, src, tag);

		if (e && (!r || e->seq < r->seq))
			r = e;
	}
	if (r && !(r->flags & FI_MULTI_RECV))
		ntx_tme_unpost(tme, r);
	return r;
}
void ntx_tme_add_unexp(struct ntx_tme *tme, struct ntx_unexp *u);
void ntx_tme_del_unexp(struct ntx_unexp *u);
struct ntx_req *ntx_tme_cancel(struct ntx_tme *tme, void *context);

/* ---- protocols (ntx_proto_send.c, ntx_proto_recv.c, ntx_proto_rndv.c,
 * ntx_proto_stream.c, ntx_proto_unexp.c) ---- */
ssize_t ntx_proto_send(struct ntx_ep *ep, struct ntx_req *req);
ssize_t ntx_proto_peek(struct ntx_ep *ep, struct ntx_req *req);
/* A send (len: the iovecs' bytes) or a receive (FI_PEEK: a peek) from its
 * arguments, in a request of the pool; endpoint lock held, arguments
 * checked. -FI_EAGAIN when no request can be had. */
ssize_t ntx_proto_post_send(struct ntx_ep *ep, const struct iovec *iov,
			    size_t count, size_t len, fi_addr_t dest,
			    uint64_t tag, uint64_t data, void *context,
			    uint64_t flags);
/* A receive's fields but its iovecs. */
static inline void ntx_req_set_recv(struct ntx_ep *ep, struct ntx_req *r,
				    size_t count, size_t len, fi_addr_t src,
				    uint64_t tag, uint64_t ignore,
				    void *context, uint64_t flags)
{
	r->iov_count = count;
	r->len = len;
	r->addr = src;
	r->tag = tag;
	r->ignore = ignore;
	r->context = context;
	r->flags = flags;
	r->plain = count == 1 && !(flags & FI_MULTI_RECV) &&
		   ntx_comp_wanted(ep->rx_selective, flags);
}
/* A receive request from the caller's arguments (the API checked them). */
static inline struct ntx_req *ntx_req_get_recv(struct ntx_ep *ep,
					       const struct iovec *iov,
					       size_t count, fi_addr_t src,
					       uint64_t tag, uint64_t ignore,
					       void *context, uint64_t flags)
{
	struct ntx_req *r = ntx_req_get(ep, NTX_REQ_RECV);

	if (!r)
		return NULL;
	if (count == 1) { /* no call to memcpy for the common case */
		void *base = iov[0].iov_base;
		size_t len = iov[0].iov_len;

		/* two loads, not one: fi_recv's iovec was just stored a
		 * field at a time, and a wider load across both stores
		 * cannot be forwarded from the store buffer (a stall of
		 * about a dozen cycles, the largest cost of fi_trecv) */
		__asm__("" : "+r"(base), "+r"(len));
		r->iov[0].iov_base = base;
		r->iov[0].iov_len = len;
	} else {
		memcpy(r->iov, iov, count * sizeof(*iov));
	}
	ntx_req_set_recv(ep, r, count, ntx_iov_len(iov, count), src, tag,
			 ignore, context, flags);
	return r;
}
/* ntx_proto_post_recv in every case: peeks, claims, multi-receive
 * buffers, unexpected messages waiting. */
/* fi_trecv's case of a tagged eager message that waits at the head of
 * the unexpected queue and that this receive takes (MPI's receive posted
 * after its message came): delivered at once, without a request, when
 * it fits the one buffer and the endpoint's receive completions are plain
 * CQ entries (ep->rx_fast) the receive asks for. 1 when this does not
 * apply (the caller takes the general path), else 0. Lockless domains
 * (ep->post_fast), arguments checked. */
int ntx_proto_recv_waiting(struct ntx_ep *ep, void *buf, size_t len,
			   fi_addr_t src, uint64_t tag, uint64_t ignore,
			   void *context, uint64_t flags);
ssize_t ntx_proto_post_recv_any(struct ntx_ep *ep, const struct iovec *iov,
				size_t count, fi_addr_t src, uint64_t tag,
				uint64_t ignore, void *context,
				uint64_t flags);
/* A receive (the API checked the arguments and holds the endpoint
 * lock). Inline: with no unexpected message waiting, a plain receive is
 * a request posted in order. -FI_EAGAIN when the pool cannot grow. */
static inline __attribute__((always_inline)) ssize_t
ntx_proto_post_recv(struct ntx_ep *ep, const struct iovec *iov, size_t count,
		    fi_addr_t src, uint64_t tag, uint64_t ignore, void *context,
		    uint64_t flags)
{
	struct ntx_tme *tme = &ep->rx->tme;
	struct ntx_req *r;

	if ((flags & (FI_PEEK | FI_CLAIM | FI_MULTI_RECV)) ||
	    !ntx_list_empty(&tme->unexp[!!(flags & FI_TAGGED)]))
		return ntx_proto_post_recv_any(ep, iov, count, src, tag,
					       ignore, context, flags);
	r = ntx_req_get_recv(ep, iov, count, src, tag, ignore, context,
			     flags);
	if (!r)
		return -FI_EAGAIN;
	ntx_tme_post(tme, r);
	return 0;
}
ssize_t ntx_proto_inject(struct ntx_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest, uint64_t tag, uint64_t data,
			 uint64_t flags);
/* The wire flags of a message's op flags. */
static inline uint8_t ntx_pkt_flags(uint64_t op_flags)
{
	return (op_flags & FI_TAGGED ? NTX_PF_TAGGED : 0) |
	       (op_flags & FI_REMOTE_CQ_DATA ? NTX_PF_DATA : 0);
}
/* An eager message of at most NTX_INLINE_MAX bytes in the header to a
 * connected VC: written in place where the back end can (send_inline),
 * else built here and sent. As ops->send. */
static inline __attribute__((always_inline)) int
ntx_vc_send_inline(struct ntx_vc *vc, uint8_t pflags, uint64_t tag,
		   uint64_t data, const void *buf, size_t len)
{
	struct ntx_wire_hdr h;

	if (vc->ops->send_inline)
		return vc->ops->send_inline(vc->conn, pflags, tag, data, buf,
					    len);
	ntx_wire_hdr_inline(&h, pflags, tag, data, buf, len);
	return vc->ops->send(vc->conn, &h, NULL, 0, 0);
}
/* The VC of a send made without a request (fast: see
 * ntx_proto_send_small). */
static inline struct ntx_vc *ntx_vc_direct(struct ntx_ep *ep, fi_addr_t dest,
					   bool fast)
{
	return ntx_idtab_get(&ep->vc_tab, !fast && ep->cm
						  ? ep->msg_dest
						  : ntx_vc_key(ep, dest));
}
/* vc takes a send without a request now: it is connected, nothing is
 * queued on it to go first, and no flag asks for a request (anything
 * else needs one, or order behind queued work). */
static inline bool ntx_vc_direct_ok(const struct ntx_vc *vc, uint64_t flags)
{
	return vc && vc->state == NTX_VC_CONNECTED &&
	       ntx_list_empty(&vc->backlog) &&
	       !(flags & (FI_DELIVERY_COMPLETE | FI_FENCE));
}
/* The message-rate path: a send of at most NTX_INLINE_MAX bytes to a
 * connected peer with nothing queued, written into the header and
 * completed at once, without a request (inject: fi_inject's, which
 * counts but never writes a CQ entry). fast: the application's own call
 * on an endpoint that may send at once (ep->send_fast: no connection
 * management, a lockless domain, so not inside fi_cq_read either). 1
 * when it does not apply (the caller takes the general path), else 0 or
 * a negative error. Inline: fi_tsenddata's and fi_tinjectdata's own
 * path. */
static inline __attribute__((always_inline)) int
ntx_proto_send_small(struct ntx_ep *ep, const void *buf, size_t len,
		     fi_addr_t dest, uint64_t tag, uint64_t data, void *context,
		     uint64_t flags, bool inject, bool fast)
{
	struct ntx_vc *vc = ntx_vc_direct(ep, dest, fast);

	if (len > NTX_INLINE_MAX || !ntx_vc_direct_ok(vc, flags))
		return 1;
	/* a send whose completion waits for the back end's word that the
	 * peer took it needs a request to wait in (ops->acks_eager) */
	if (!inject && vc->ops->acks_eager && ntx_params.acked_sends)
		return 1;
	if (ntx_vc_send_inline(vc, ntx_pkt_flags(flags), tag, data, buf, len))
		return 1; /* full or failed: the general path queues or
			   * reports it */
	if (!inject)
		ntx_comp_send(ep, context, flags, fast);
	else if (ep->send_cntr)
		ntx_cntr_inc(ep->send_cntr);
	return 0;
}
/* ntx_proto_send_small's case of a message of more than NTX_INLINE_MAX
 * and at most NTX_INJECT_MAX bytes in one buffer: one eager packet
 * straight from the buffer (the back end copies it before it returns, as
 * for fi_inject), completed at once, without a request. 1 when it does
 * not apply (not connected, work queued, FI_DELIVERY_COMPLETE or
 * FI_FENCE, no room or any error: the general path queues or reports
 * it), else 0. */
int ntx_proto_send_eager(struct ntx_ep *ep, const void *buf, size_t len,
			 fi_addr_t dest, uint64_t tag, uint64_t data,
			 void *context, uint64_t flags, bool fast);
/* Sends what req still has to send; 0 when done, -FI_EAGAIN to retry */
int ntx_proto_tx(struct ntx_req *req);
/* A packet from a back end: the ntx_be_cb recv callback of every VC. */
void ntx_proto_on_recv(void *vc, const void *hdr, const void *payload,
		       size_t len);
/* A half entry's message: the ntx_be_cb recv_small callback. */
void ntx_proto_on_small(void *vc, uint8_t pflags, uint64_t tag,
			uint64_t data, uint64_t bytes, size_t len);
void ntx_proto_vc_failed(struct ntx_vc *vc);
/* Fails rx's posted receives from src (FI_ADDR_UNSPEC: all) with err. */
void ntx_proto_fail_posted(struct ntx_ep *rx, fi_addr_t src, int err);
/* Frees the unexpected messages and their pool (endpoint close). */
void ntx_proto_unexp_fini(struct ntx_ep *ep);
/* Frees the unexpected messages of vc waiting in its receive context. */
void ntx_proto_unexp_drop(struct ntx_vc *vc);
/* The budget of unexpected messages (ntx_unexp_budget.c), under the
 * receive context's lock. admit: cost more bytes of vc may wait, within
 * the peer's limit and the budget, which may doom the largest holder;
 * false: vc failed. charge and refund count an entry's cost in vc and,
 * while vc is live, in its receive context. off_budget: vc failed, what
 * it holds leaves the budget and it may hold no more. */
bool ntx_unexp_admit(struct ntx_vc *vc, size_t cost);
void ntx_unexp_charge(struct ntx_vc *vc, size_t cost);
void ntx_unexp_refund(struct ntx_vc *vc, size_t cost);
void ntx_unexp_off_budget(struct ntx_vc *vc);
/* Largest payload of one packet on this VC's back end. */
size_t ntx_vc_mtu(const struct ntx_vc *vc);
/* Single-copy move of [off, off + len) between our iovecs and a peer's. */
int ntx_bulk_move(struct ntx_vc *vc, bool write, const struct iovec *local,
		  size_t nlocal, const struct ntx_wire_iov *remote,
		  size_t nremote, size_t off, size_t len);
/* A peer's buffers as its packet lists them (h->niov entries, the
 * payload): taken whole only when 1 to NTX_MAX_IOV entries fill the
 * payload exactly; copied, then their lengths must add up to
 * h->msg_len (checked on our copy, which the peer cannot change). */
static inline bool ntx_wire_iov_take(const struct ntx_wire_hdr *h,
				     const void *payload, size_t len,
				     struct ntx_wire_iov *w)
{
	uint64_t sum = 0;

	if (!h->niov || h->niov > NTX_MAX_IOV || len != h->niov * sizeof(*w))
		return false;
	memcpy(w, payload, len);
	for (uint16_t i = 0; i < h->niov; i++)
		sum += w[i].len;
	return sum == h->msg_len;
}
/* Our buffers as the peer's bulk moves will see them (with the back
 * end's keys; 'writable' when the peer is to write them). */
void ntx_wire_iov_fill(struct ntx_vc *vc, const struct iovec *iov, size_t n,
		       bool writable, struct ntx_wire_iov *w);
/* Bulk moves on this VC: a back end that has them, and single copy not
 * turned off for the shm window (FI_NTX_SHM_CMA) nor refused by this peer
 * (a peer that cannot or will not move by CMA costs only itself) */
static inline bool ntx_vc_bulk(const struct ntx_vc *vc)
{
	return vc->ops->bulk_read && vc->ops->bulk_write &&
	       (vc->ops->bulk_keyed || (vc->ep->cma_ok && !vc->no_cma));
}
/* A send request is done or failed (err negative) */
void ntx_proto_send_done(struct ntx_req *r);
void ntx_proto_send_fail(struct ntx_req *r, int err);

/* ---- one-sided (ntx_rma_proto.c) ---- */
#define NTX_ATOMIC_MAX_BYTES 2048 /* operands of one remote iovec */
ssize_t ntx_rma_post(struct ntx_ep *ep, struct ntx_req *req);
/* A request with room in the transmit queue, or NULL; endpoint lock held */
struct ntx_req *ntx_rma_req_get(struct ntx_ep *ep);
int ntx_rma_tx(struct ntx_req *req);
void ntx_rma_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr,
		       const void *payload, size_t len);

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
