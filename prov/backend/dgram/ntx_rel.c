/*
 * The reliability protocol of the datagram back ends (DESIGN §10), after
 * the design of Open MPI's usnic BTL: per-peer sequence numbers, a sliding
 * window, cumulative ACKs piggy-backed on traffic the other way, delayed
 * ACKs, retransmission on timeout (exponential back-off) and on duplicate
 * ACKs, and a receive reorder buffer. Pure: the caller passes the time and
 * moves the datagrams.
 */
#include <assert.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_rel.h"

#define PF_FAILED 0x01   /* failed: nothing more is sent or taken */
#define PF_ACK_NOW 0x02  /* a duplicate or a filled hole: ACK at once */
#define PF_RETX 0x04     /* retransmit the oldest unacknowledged packet */
#define PF_RECOVERY 0x08 /* retransmitted; recovery ends at p->recover */
#define PF_HOLD 0x10     /* the caller holds it: nothing leaves */

#define REL_BACKOFF_MAX 20 /* shifts of the timeout, before the cap */

/* why PF_RETX is set, for the counters */
enum { RETX_RTO, RETX_FAST, RETX_PARTIAL };

/* ntx.h has ntx_container_of; this module includes no provider header */
#define REL_OF(ptr, type, field) \
	((type *)(void *)((char *)(ptr) - offsetof(type, field)))

/* the idle footprint promised in DESIGN §10 */
static_assert(sizeof(struct ntx_rel_peer) <= 256, "idle peer over 256 B");

/* One queued message, copied; freed when every fragment is acknowledged. */
struct ntx_rel_msg {
	struct ntx_list qentry; /* peer->queue[prio] while fragments unsent */
	struct ntx_list entry;  /* peer->msgs */
	void *ctx;
	uint32_t id, len;
	uint16_t nfrag, next_frag, acked;
	uint8_t prio;
	uint8_t data[];
};

/* A packet in flight: slot seq % window of peer->win. */
struct ntx_rel_slot {
	struct ntx_rel_msg *msg; /* NULL: free */
	uint64_t sent_ns;        /* first transmission, for the RTT */
	uint64_t last_ns;        /* latest transmission */
	uint16_t frag;
	uint16_t tx_count;       /* transmissions; RTT sampled only at 1 */
};

/* A packet that arrived before its predecessors. */
struct ntx_rel_rxpkt {
	struct ntx_rel_hdr h;
	uint8_t data[];
};

/* A message being reassembled: at most one per peer and class, because
 * fragments are processed in sequence order and a sender finishes a
 * class's message before starting the next one. */
struct ntx_rel_reasm {
	uint32_t id, len, off;
	uint16_t nfrag, next;
	uint8_t data[];
};

/* ---- wire header ------------------------------------------------------ */

enum {
	OFF_VERSION = 0, OFF_FLAGS = 1, OFF_PLEN = 2, OFF_SRC = 4,
	OFF_DST = 8, OFF_SEQ = 12, OFF_ACK = 16, OFF_MSG_ID = 20,
	OFF_MSG_LEN = 24, OFF_FRAG = 28, OFF_NFRAG = 30
};
static_assert(OFF_NFRAG + 2 == NTX_REL_HDR_LEN, "header layout");

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return get16(p) | (uint32_t)get16(p + 2) << 16;
}

void ntx_rel_hdr_pack(const struct ntx_rel_hdr *h, uint8_t *out)
{
	out[OFF_VERSION] = h->version;
	out[OFF_FLAGS] = h->flags;
	put16(out + OFF_PLEN, h->plen);
	put32(out + OFF_SRC, h->src_epoch);
	put32(out + OFF_DST, h->dst_epoch);
	put32(out + OFF_SEQ, h->seq);
	put32(out + OFF_ACK, h->ack);
	put32(out + OFF_MSG_ID, h->msg_id);
	put32(out + OFF_MSG_LEN, h->msg_len);
	put16(out + OFF_FRAG, h->frag);
	put16(out + OFF_NFRAG, h->nfrag);
}

void ntx_rel_hdr_unpack(const uint8_t *in, struct ntx_rel_hdr *h)
{
	h->version = in[OFF_VERSION];
	h->flags = in[OFF_FLAGS];
	h->plen = get16(in + OFF_PLEN);
	h->src_epoch = get32(in + OFF_SRC);
	h->dst_epoch = get32(in + OFF_DST);
	h->seq = get32(in + OFF_SEQ);
	h->ack = get32(in + OFF_ACK);
	h->msg_id = get32(in + OFF_MSG_ID);
	h->msg_len = get32(in + OFF_MSG_LEN);
	h->frag = get16(in + OFF_FRAG);
	h->nfrag = get16(in + OFF_NFRAG);
}

/* ---- memory, counted so tests see an idle peer holds nothing ----------- */

static void *rel_alloc(struct ntx_rel *rel, size_t size)
{
	void *p = calloc(1, size);

	if (p)
		rel->mem += size;
	return p;
}

static void rel_free(struct ntx_rel *rel, void *p, size_t size)
{
	if (!p)
		return;
	rel->mem -= size;
	free(p);
}

static int32_t seq_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

static uint32_t rel_in_flight(const struct ntx_rel_peer *p)
{
	return p->tx_next - p->tx_una;
}

static bool rel_queued(const struct ntx_rel_peer *p)
{
	return !ntx_list_empty(&p->queue[NTX_REL_PRIO]) ||
	       !ntx_list_empty(&p->queue[NTX_REL_BULK]);
}

static int rel_drop(struct ntx_rel *rel, int why)
{
	rel->stats.drops[why]++;
	return -FI_EINVAL;
}

/* ---- configuration ---------------------------------------------------- */

void ntx_rel_cfg_default(struct ntx_rel_cfg *cfg)
{
	*cfg = (struct ntx_rel_cfg){
		.mtu = 1440, /* 1500 - IPv4 20 - UDP 8 - our 32 */
		.window = 64,
		.max_msg = 4u << 20,
		.queue_msgs = 256,
		.queue_bytes = 8u << 20,
		.ack_every = 16,
		.dupack = 3,
		.epoch = 1,
		.delack_ns = 100000,      /* 100 us */
		.rto_init_ns = 5000000,   /* 5 ms */
		.rto_min_ns = 250000,     /* 250 us */
		.rto_max_ns = 1000000000, /* 1 s */
		.dead_ns = 20000000000ull /* 20 s */
	};
}

static bool rel_cfg_valid(const struct ntx_rel_cfg *c)
{
	return c->mtu >= 16 && c->mtu <= 65000 && c->window >= 2 &&
	       c->window <= 1024 && c->max_msg >= 1 &&
	       c->max_msg <= (uint64_t)c->mtu * UINT16_MAX &&
	       c->queue_msgs >= 1 && c->queue_msgs <= UINT16_MAX &&
	       c->queue_bytes >= 1 && c->ack_every >= 1 &&
	       c->ack_every <= UINT16_MAX && c->dupack >= 1 &&
	       c->dupack <= 64 && c->epoch != 0 && c->rto_min_ns >= 1 &&
	       c->rto_min_ns <= c->rto_init_ns &&
	       c->rto_init_ns <= c->rto_max_ns && c->dead_ns >= 1 &&
	       /* an ACK held back must not make the sender time out */
	       c->delack_ns < c->rto_min_ns;
}

int ntx_rel_init(struct ntx_rel *rel, const struct ntx_rel_cfg *cfg,
		 const struct ntx_rel_ops *ops, void *arg)
{
	if (!rel_cfg_valid(cfg) || !ops->emit || !ops->deliver)
		return -FI_EINVAL;
	memset(rel, 0, sizeof(*rel));
	rel->cfg = *cfg;
	rel->ops = *ops;
	rel->arg = arg;
	ntx_list_init(&rel->peers);
	ntx_list_init(&rel->active);
	return 0;
}

void ntx_rel_fini(struct ntx_rel *rel)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&rel->peers, it, tmp)
		ntx_rel_peer_free(rel, REL_OF(it, struct ntx_rel_peer, entry));
}

/* ---- peers ------------------------------------------------------------ */

/* a fresh session's state; p->entry is the caller's */
static void rel_peer_init(struct ntx_rel *rel, struct ntx_rel_peer *p,
			  void *ctx, uint32_t dead_epoch, uint32_t my_epoch)
{
	struct ntx_list entry = p->entry;

	memset(p, 0, sizeof(*p));
	p->entry = entry;
	ntx_list_init(&p->active);
	ntx_list_init(&p->queue[NTX_REL_BULK]);
	ntx_list_init(&p->queue[NTX_REL_PRIO]);
	ntx_list_init(&p->msgs);
	p->ctx = ctx;
	p->rto = rel->cfg.rto_init_ns;
	p->dead_epoch = dead_epoch;
	p->my_epoch = my_epoch;
}

int ntx_rel_peer_new(struct ntx_rel *rel, void *ctx,
		     struct ntx_rel_peer **out)
{
	struct ntx_rel_peer *p = rel_alloc(rel, sizeof(*p));

	if (!p)
		return -FI_ENOMEM;
	rel_peer_init(rel, p, ctx, 0, rel->cfg.epoch);
	ntx_list_insert_tail(&rel->peers, &p->entry);
	*out = p;
	return 0;
}

static void rel_msg_free(struct ntx_rel *rel, struct ntx_rel_peer *p,
			 struct ntx_rel_msg *m)
{
	ntx_list_remove(&m->entry);
	ntx_list_remove(&m->qentry); /* no-op once every fragment left */
	p->queued_msgs[m->prio]--;
	p->queued_bytes[m->prio] -= m->len;
	rel_free(rel, m, sizeof(*m) + m->len);
}

static void rel_win_free(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	rel_free(rel, p->win, rel->cfg.window * sizeof(*p->win));
	p->win = NULL;
}

static void rel_ooo_pkt_free(struct ntx_rel *rel, struct ntx_rel_rxpkt *pkt)
{
	rel->ooo_mem -= sizeof(*pkt) + pkt->h.plen;
	rel_free(rel, pkt, sizeof(*pkt) + pkt->h.plen);
}

static void rel_ooo_free(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	if (!p->ooo)
		return;
	for (uint32_t i = 0; i < rel->cfg.window; i++)
		if (p->ooo[i])
			rel_ooo_pkt_free(rel, p->ooo[i]);
	rel->ooo_mem -= rel->cfg.window * sizeof(*p->ooo);
	rel_free(rel, p->ooo, rel->cfg.window * sizeof(*p->ooo));
	p->ooo = NULL;
	p->ooo_count = 0;
}

static void rel_reasm_free(struct ntx_rel *rel, struct ntx_rel_peer *p, int c)
{
	struct ntx_rel_reasm *r = p->reasm[c];

	if (!r)
		return;
	rel->stats.reasm_bufs--;
	rel_free(rel, r, sizeof(*r) + r->len);
	p->reasm[c] = NULL;
}

/* Free every buffer of the peer; with report, hand each message's ctx to
 * ops->dropped so the caller completes it with an error. */
static void rel_peer_release(struct ntx_rel *rel, struct ntx_rel_peer *p,
			     bool report)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&p->msgs, it, tmp) {
		struct ntx_rel_msg *m = REL_OF(it, struct ntx_rel_msg, entry);
		void *ctx = m->ctx;

		rel_msg_free(rel, p, m);
		if (report && rel->ops.dropped)
			rel->ops.dropped(rel->arg, p, ctx);
	}
	rel_win_free(rel, p);
	rel_ooo_free(rel, p);
	rel_reasm_free(rel, p, NTX_REL_BULK);
	rel_reasm_free(rel, p, NTX_REL_PRIO);
	p->tx_una = p->tx_next;
	p->ack_owed = 0;
	p->gap_acks = 0;
}

void ntx_rel_peer_free(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	ntx_list_remove(&p->active);
	ntx_list_remove(&p->entry);
	rel_peer_release(rel, p, false);
	rel_free(rel, p, sizeof(*p));
}

void ntx_rel_peer_reset(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	ntx_list_remove(&p->active);
	rel_peer_release(rel, p, false);
	/* still on rel->peers; the old session stays refused */
	rel_peer_init(rel, p, p->ctx, p->dead_epoch, p->my_epoch);
}

bool ntx_rel_peer_idle(const struct ntx_rel_peer *p)
{
	return !rel_in_flight(p) && ntx_list_empty(&p->msgs) && !p->win &&
	       !p->ooo && !p->reasm[NTX_REL_BULK] &&
	       !p->reasm[NTX_REL_PRIO] && !p->ack_owed && !p->gap_acks &&
	       !(p->flags & (PF_ACK_NOW | PF_RETX));
}

static void rel_peer_activate(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	if (ntx_list_empty(&p->active) && !(p->flags & (PF_FAILED | PF_HOLD)))
		ntx_list_insert_tail(&rel->active, &p->active);
}

void ntx_rel_peer_set_epochs(struct ntx_rel_peer *p, uint32_t mine,
			     uint32_t theirs)
{
	p->my_epoch = mine;
	p->peer_epoch = theirs;
}

void ntx_rel_peer_forget(struct ntx_rel_peer *p)
{
	struct ntx_list *it;

	ntx_list_foreach(&p->msgs, it)
		REL_OF(it, struct ntx_rel_msg, entry)->ctx = NULL;
}

void ntx_rel_peer_hold(struct ntx_rel *rel, struct ntx_rel_peer *p, bool hold)
{
	if (p->flags & PF_FAILED)
		return;
	if (hold) {
		p->flags |= PF_HOLD;
		ntx_list_remove(&p->active);
		return;
	}
	p->flags &= ~PF_HOLD;
	if (!ntx_rel_peer_idle(p))
		rel_peer_activate(rel, p);
}

/* Once: the caller hears of the failure, then of every message dropped;
 * the peer sends and accepts nothing more (DESIGN §10 Failure). */
static void rel_peer_fail(struct ntx_rel *rel, struct ntx_rel_peer *p,
			  int err)
{
	if (p->flags & PF_FAILED)
		return;
	p->flags = PF_FAILED;
	p->err = err;
	ntx_list_remove(&p->active);
	rel->stats.failed++;
	if (rel->ops.failed)
		rel->ops.failed(rel->arg, p, err);
	rel_peer_release(rel, p, true);
}

/* ---- sending ---------------------------------------------------------- */

int ntx_rel_send(struct ntx_rel *rel, struct ntx_rel_peer *p, int prio,
		 const struct iovec *iov, size_t iovcnt, void *ctx)
{
	const struct ntx_rel_cfg *cfg = &rel->cfg;
	struct ntx_rel_msg *m;
	uint64_t len = 0;
	size_t off = 0;

	if (p->flags & PF_FAILED)
		return p->err;
	if (prio != NTX_REL_BULK && prio != NTX_REL_PRIO)
		return -FI_EINVAL;
	for (size_t i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > cfg->max_msg)
			return -FI_EINVAL;
		len += iov[i].iov_len;
	}
	if (len > cfg->max_msg)
		return -FI_EINVAL;
	/* bounded per class, but an empty queue takes any message */
	if (p->queued_msgs[prio] &&
	    (p->queued_msgs[prio] >= cfg->queue_msgs ||
	     p->queued_bytes[prio] + len > cfg->queue_bytes))
		return -FI_EAGAIN;
	m = rel_alloc(rel, sizeof(*m) + len);
	if (!m)
		return -FI_ENOMEM;
	for (size_t i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len)
			memcpy(m->data + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	m->ctx = ctx;
	m->len = (uint32_t)len;
	m->nfrag = len ? (uint16_t)((len + cfg->mtu - 1) / cfg->mtu) : 1;
	m->prio = (uint8_t)prio;
	m->id = p->msg_id[prio]++;
	ntx_list_insert_tail(&p->queue[prio], &m->qentry);
	ntx_list_insert_tail(&p->msgs, &m->entry);
	p->queued_msgs[prio]++;
	p->queued_bytes[prio] += (uint32_t)len;
	rel_peer_activate(rel, p);
	return 0;
}

/* ---- output ----------------------------------------------------------- */

static uint64_t rel_rto_cur(const struct ntx_rel *rel,
			    const struct ntx_rel_peer *p)
{
	uint64_t t = p->rto << p->backoff;

	return t < rel->cfg.rto_max_ns ? t : rel->cfg.rto_max_ns;
}

/* Every datagram carries our cumulative ACK; GAP marks it a duplicate
 * ACK (we hold packets past a hole) for the peer's fast retransmit. */
static void rel_hdr_base(const struct ntx_rel *rel,
			 const struct ntx_rel_peer *p, struct ntx_rel_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->version = NTX_REL_VERSION;
	h->src_epoch = p->my_epoch;
	h->dst_epoch = p->peer_epoch;
	h->seq = p->tx_next;
	h->ack = p->rx_next;
	if (p->gap_acks)
		h->flags |= NTX_REL_F_GAP;
}

static int rel_emit(struct ntx_rel *rel, struct ntx_rel_peer *p,
		    const struct ntx_rel_hdr *h, const void *payload)
{
	uint8_t wire[NTX_REL_HDR_LEN];
	int ret;

	ntx_rel_hdr_pack(h, wire);
	ret = rel->ops.emit(rel->arg, p, wire, sizeof(wire), payload, h->plen);
	if (ret)
		return ret;
	/* it carried our ACK: nothing owed any more */
	p->ack_owed = 0;
	p->flags &= ~PF_ACK_NOW;
	if (h->flags & NTX_REL_F_GAP)
		p->gap_acks--;
	return 0;
}

static int rel_emit_frag(struct ntx_rel *rel, struct ntx_rel_peer *p,
			 uint32_t seq, const struct ntx_rel_msg *m, uint16_t frag)
{
	uint32_t off = (uint32_t)frag * rel->cfg.mtu;
	uint32_t plen = m->len - off;
	struct ntx_rel_hdr h;

	if (plen > rel->cfg.mtu)
		plen = rel->cfg.mtu;
	rel_hdr_base(rel, p, &h);
	h.flags |= NTX_REL_F_DATA | (m->prio ? NTX_REL_F_PRIO : 0);
	h.plen = (uint16_t)plen;
	h.seq = seq;
	h.msg_id = m->id;
	h.msg_len = m->len;
	h.frag = frag;
	h.nfrag = m->nfrag;
	return rel_emit(rel, p, &h, m->data + off);
}

/* New fragments while sequence numbers are free: priority class first,
 * so a small message never waits behind queued bulk fragments. */
static int rel_fill_window(struct ntx_rel *rel, struct ntx_rel_peer *p,
			   uint64_t now)
{
	int n = 0, ret;

	while (rel_in_flight(p) < rel->cfg.window && rel_queued(p)) {
		struct ntx_list *q = &p->queue[NTX_REL_PRIO];
		struct ntx_rel_msg *m;
		struct ntx_rel_slot *s;

		if (ntx_list_empty(q))
			q = &p->queue[NTX_REL_BULK];
		m = REL_OF(ntx_list_first(q), struct ntx_rel_msg, qentry);
		if (!p->win) {
			p->win = rel_alloc(rel,
					   rel->cfg.window * sizeof(*p->win));
			if (!p->win)
				return -FI_ENOMEM;
		}
		ret = rel_emit_frag(rel, p, p->tx_next, m, m->next_frag);
		if (ret)
			return ret;
		if (!rel_in_flight(p)) {
			p->rto_deadline = now + rel_rto_cur(rel, p);
			p->progress_ns = now; /* the dead clock starts now */
		}
		s = &p->win[p->tx_next % rel->cfg.window];
		*s = (struct ntx_rel_slot){ .msg = m, .sent_ns = now,
					    .last_ns = now,
					    .frag = m->next_frag,
					    .tx_count = 1 };
		p->tx_next++;
		if (++m->next_frag == m->nfrag)
			ntx_list_remove(&m->qentry);
		rel->stats.tx_data++;
		n++;
	}
	return n;
}

static int rel_retransmit(struct ntx_rel *rel, struct ntx_rel_peer *p,
			  uint64_t now)
{
	struct ntx_rel_slot *s = &p->win[p->tx_una % rel->cfg.window];
	int ret = rel_emit_frag(rel, p, p->tx_una, s->msg, s->frag);

	if (ret)
		return ret;
	if (s->tx_count < UINT16_MAX)
		s->tx_count++;
	s->last_ns = now;
	p->flags &= ~PF_RETX;
	p->rto_deadline = now + rel_rto_cur(rel, p);
	rel->stats.tx_retrans++;
	if (p->retx_why == RETX_FAST)
		rel->stats.tx_fast++;
	else if (p->retx_why == RETX_PARTIAL)
		rel->stats.tx_partial++;
	else
		rel->stats.tx_rto++;
	return 1;
}

/* The dead limit, then the retransmit timer. True when the peer failed. */
static bool rel_timers(struct ntx_rel *rel, struct ntx_rel_peer *p,
		       uint64_t now)
{
	if (!rel_in_flight(p))
		return false;
	if (now >= p->progress_ns + rel->cfg.dead_ns) {
		rel_peer_fail(rel, p, -FI_ETIMEDOUT);
		return true;
	}
	if (now < p->rto_deadline)
		return false;
	/* back off: double the timeout up to the cap */
	if (p->backoff < REL_BACKOFF_MAX &&
	    (p->rto << p->backoff) < rel->cfg.rto_max_ns)
		p->backoff++;
	p->flags |= PF_RETX | PF_RECOVERY;
	p->retx_why = RETX_RTO;
	p->retx_at = now;
	p->recover = p->tx_next;
	p->dupacks = 0;
	return false;
}

static bool rel_ack_due(const struct ntx_rel *rel,
			const struct ntx_rel_peer *p, uint64_t now)
{
	return p->gap_acks || (p->flags & PF_ACK_NOW) ||
	       (p->ack_owed && (p->ack_owed >= rel->cfg.ack_every ||
				now >= p->ack_deadline));
}

static int rel_peer_poll(struct ntx_rel *rel, struct ntx_rel_peer *p,
			 uint64_t now)
{
	int n = 0, ret;

	if (rel_timers(rel, p, now))
		return 0;
	if ((p->flags & PF_RETX) && now >= p->retx_at) {
		ret = rel_retransmit(rel, p, now);
		if (ret < 0)
			return ret;
		n += ret;
	}
	ret = rel_fill_window(rel, p, now);
	if (ret < 0)
		return ret;
	n += ret;
	/* whatever is still owed goes as pure ACKs */
	while (rel_ack_due(rel, p, now)) {
		struct ntx_rel_hdr h;

		rel_hdr_base(rel, p, &h);
		ret = rel_emit(rel, p, &h, NULL);
		if (ret)
			return ret;
		rel->stats.tx_ack++;
		n++;
	}
	return n;
}

int ntx_rel_poll_tx(struct ntx_rel *rel, uint64_t now_ns)
{
	struct ntx_list *it, *tmp;
	int n = 0, ret;

	ntx_list_foreach_safe(&rel->active, it, tmp) {
		struct ntx_rel_peer *p = REL_OF(it, struct ntx_rel_peer,
						active);

		ret = rel_peer_poll(rel, p, now_ns);
		if (ret < 0)
			return ret;
		n += ret;
		if (ntx_rel_peer_idle(p))
			ntx_list_remove(&p->active);
	}
	return n;
}

static uint64_t rel_peer_deadline(const struct ntx_rel *rel,
				  const struct ntx_rel_peer *p)
{
	uint64_t d = UINT64_MAX;

	if (p->gap_acks || (p->flags & PF_ACK_NOW) ||
	    p->ack_owed >= rel->cfg.ack_every ||
	    (rel_in_flight(p) < rel->cfg.window && rel_queued(p)))
		return 0;
	if (p->ack_owed)
		d = p->ack_deadline;
	if ((p->flags & PF_RETX) && p->retx_at < d)
		d = p->retx_at;
	if (rel_in_flight(p)) {
		if (p->rto_deadline < d)
			d = p->rto_deadline;
		if (p->progress_ns + rel->cfg.dead_ns < d)
			d = p->progress_ns + rel->cfg.dead_ns;
	}
	return d;
}

uint64_t ntx_rel_next_deadline(const struct ntx_rel *rel)
{
	const struct ntx_list *it;
	uint64_t best = UINT64_MAX;

	ntx_list_foreach(&rel->active, it) {
		uint64_t d = rel_peer_deadline(
			rel, REL_OF(it, struct ntx_rel_peer, active));

		if (d < best)
			best = d;
	}
	return best;
}

/* ---- input: acknowledgements ------------------------------------------ */

/* Jacobson/Karels; only packets sent once are sampled (Karn). */
static void rel_rtt_sample(struct ntx_rel *rel, struct ntx_rel_peer *p,
			   uint64_t rtt)
{
	uint64_t rto;

	if (!rtt)
		rtt = 1;
	if (!p->srtt) {
		p->srtt = rtt;
		p->rttvar = rtt / 2;
	} else {
		uint64_t err = rtt > p->srtt ? rtt - p->srtt : p->srtt - rtt;

		p->rttvar = (3 * p->rttvar + err) / 4;
		p->srtt = (7 * p->srtt + rtt) / 8;
	}
	rto = p->srtt + 4 * p->rttvar;
	if (rto < rel->cfg.rto_min_ns)
		rto = rel->cfg.rto_min_ns;
	if (rto > rel->cfg.rto_max_ns)
		rto = rel->cfg.rto_max_ns;
	p->rto = rto;
}

static void rel_slot_release(struct ntx_rel *rel, struct ntx_rel_peer *p,
			     struct ntx_rel_slot *s)
{
	struct ntx_rel_msg *m = s->msg;

	s->msg = NULL;
	if (++m->acked < m->nfrag)
		return;
	if (m->ctx && rel->ops.acked)
		rel->ops.acked(rel->arg, p, m->ctx);
	rel_msg_free(rel, p, m);
}

/* Retransmit the oldest packet once it is overdue: a quarter of an RTT
 * after its ACK was expected, so a packet merely overtaken by later ones
 * (reordering) is not sent twice (DESIGN §10 Retransmission). */
static void rel_retx_later(struct ntx_rel *rel, struct ntx_rel_peer *p,
			   int why)
{
	const struct ntx_rel_slot *s = &p->win[p->tx_una % rel->cfg.window];

	p->flags |= PF_RETX;
	p->retx_why = (uint8_t)why;
	p->retx_at = s->last_ns + p->srtt + p->srtt / 4 + 2 * p->rttvar;
}

/* The peer took every packet before ack: free them, restart the timer. */
static void rel_ack_advance(struct ntx_rel *rel, struct ntx_rel_peer *p,
			    uint32_t ack, uint64_t now)
{
	struct ntx_rel_slot *last = &p->win[(ack - 1) % rel->cfg.window];

	if (last->tx_count == 1)
		rel_rtt_sample(rel, p, now - last->sent_ns);
	while (p->tx_una != ack) {
		rel_slot_release(rel, p, &p->win[p->tx_una % rel->cfg.window]);
		p->tx_una++;
	}
	p->dupacks = 0;
	p->backoff = 0;
	p->progress_ns = now;
	/* a retransmission not yet sent may be moot now */
	p->flags &= ~PF_RETX;
	if (p->flags & PF_RECOVERY) {
		if (seq_diff(ack, p->recover) >= 0)
			p->flags &= ~PF_RECOVERY;
		else /* partial ACK: the next hole was lost too, or late */
			rel_retx_later(rel, p, RETX_PARTIAL);
	}
	if (rel_in_flight(p)) {
		p->rto_deadline = now + rel_rto_cur(rel, p);
		return;
	}
	p->flags &= ~(PF_RETX | PF_RECOVERY);
	if (!rel_queued(p))
		rel_win_free(rel, p); /* idle again: no window held */
}

static void rel_on_ack(struct ntx_rel *rel, struct ntx_rel_peer *p,
		       const struct ntx_rel_hdr *h, uint64_t now)
{
	int32_t d = seq_diff(h->ack, p->tx_una);

	if (d > 0) {
		rel_ack_advance(rel, p, h->ack, now);
		return;
	}
	/* a duplicate ACK: the peer holds packets past our oldest one */
	if (d == 0 && rel_in_flight(p) && (h->flags & NTX_REL_F_GAP) &&
	    !(p->flags & PF_RECOVERY) && ++p->dupacks == rel->cfg.dupack) {
		p->flags |= PF_RECOVERY;
		p->recover = p->tx_next;
		rel_retx_later(rel, p, RETX_FAST);
	}
}

/* ---- input: data ------------------------------------------------------ */

static void rel_deliver(struct ntx_rel *rel, struct ntx_rel_peer *p, int c,
			const void *msg, size_t len)
{
	rel->stats.delivered++;
	rel->ops.deliver(rel->arg, p, c, msg, len);
}

/* A fragment that does not continue its class's message: an honest
 * sender never sends one, so the partial message is lost with it. */
static void rel_reasm_bad(struct ntx_rel *rel, struct ntx_rel_peer *p, int c)
{
	rel_drop(rel, NTX_REL_DROP_REASM);
	rel_reasm_free(rel, p, c);
}

static struct ntx_rel_reasm *rel_reasm_start(struct ntx_rel *rel,
					     struct ntx_rel_peer *p, int c,
					     const struct ntx_rel_hdr *h)
{
	struct ntx_rel_reasm *r;

	/* msg_len <= max_msg (checked): one buffer per class and peer */
	r = rel_alloc(rel, sizeof(*r) + h->msg_len);
	if (!r) {
		rel_drop(rel, NTX_REL_DROP_NOMEM);
		return NULL;
	}
	r->id = h->msg_id;
	r->len = h->msg_len;
	r->nfrag = h->nfrag;
	p->reasm[c] = r;
	if (++rel->stats.reasm_bufs > rel->stats.reasm_max)
		rel->stats.reasm_max = rel->stats.reasm_bufs;
	return r;
}

/* Fragments come here in sequence order (DESIGN §10 Fragmentation). */
static void rel_reasm(struct ntx_rel *rel, struct ntx_rel_peer *p,
		      const struct ntx_rel_hdr *h, const uint8_t *payload)
{
	int c = h->flags & NTX_REL_F_PRIO ? NTX_REL_PRIO : NTX_REL_BULK;
	struct ntx_rel_reasm *r = p->reasm[c];
	bool last = h->frag + 1 == h->nfrag;

	if (h->frag == 0 && r) {
		rel_reasm_bad(rel, p, c); /* a new message before the last */
		return;
	}
	if (h->nfrag == 1) {
		if (h->plen != h->msg_len)
			rel_drop(rel, NTX_REL_DROP_REASM);
		else
			rel_deliver(rel, p, c, payload, h->plen);
		return;
	}
	if (h->frag == 0 && !(r = rel_reasm_start(rel, p, c, h)))
		return;
	if (!r || r->id != h->msg_id || r->len != h->msg_len ||
	    r->nfrag != h->nfrag || r->next != h->frag ||
	    h->plen > r->len - r->off || (!last && !h->plen) ||
	    (last && r->off + h->plen != r->len)) {
		rel_reasm_bad(rel, p, c);
		return;
	}
	memcpy(r->data + r->off, payload, h->plen);
	r->off += h->plen;
	if (++r->next < r->nfrag)
		return;
	rel_deliver(rel, p, c, r->data, r->len);
	rel_reasm_free(rel, p, c);
}

static void rel_rx_in_order(struct ntx_rel *rel, struct ntx_rel_peer *p,
			    const struct ntx_rel_hdr *h,
			    const uint8_t *payload, uint64_t now)
{
	p->rx_next++;
	rel->stats.rx_data++;
	if (!p->ack_owed)
		p->ack_deadline = now + rel->cfg.delack_ns;
	if (p->ack_owed < UINT16_MAX)
		p->ack_owed++;
	rel_reasm(rel, p, h, payload);
}

/* A packet past a hole, kept (bounded by the window) until the hole is
 * filled; each one asks for a duplicate ACK. */
static int rel_hold(struct ntx_rel *rel, struct ntx_rel_peer *p,
		    const struct ntx_rel_hdr *h, const uint8_t *payload)
{
	uint32_t i = h->seq % rel->cfg.window;
	struct ntx_rel_rxpkt *pkt;
	size_t need = sizeof(*pkt) + h->plen +
		      (p->ooo ? 0 : rel->cfg.window * sizeof(*p->ooo));

	/* across peers the reorder buffers are bounded, but each peer may
	 * hold a few: dropping one costs a retransmission, never data */
	if (rel->cfg.ooo_mem_max && p->ooo_count >= NTX_REL_OOO_MIN &&
	    rel->ooo_mem + need > rel->cfg.ooo_mem_max)
		return NTX_REL_DROP_BUDGET;
	if (!p->ooo) {
		p->ooo = rel_alloc(rel, rel->cfg.window * sizeof(*p->ooo));
		if (!p->ooo)
			return NTX_REL_DROP_NOMEM;
		rel->ooo_mem += rel->cfg.window * sizeof(*p->ooo);
	}
	if (p->gap_acks <= rel->cfg.dupack)
		p->gap_acks++;
	if (p->ooo[i]) {
		rel->stats.rx_dup++;
		return -1;
	}
	pkt = rel_alloc(rel, sizeof(*pkt) + h->plen);
	if (!pkt)
		return NTX_REL_DROP_NOMEM;
	rel->ooo_mem += sizeof(*pkt) + h->plen;
	pkt->h = *h;
	memcpy(pkt->data, payload, h->plen);
	p->ooo[i] = pkt;
	p->ooo_count++;
	rel->stats.rx_ooo++;
	return -1;
}

/* -1 when taken (or a duplicate), else why it was dropped */
static int rel_on_data(struct ntx_rel *rel, struct ntx_rel_peer *p,
		       const struct ntx_rel_hdr *h, const uint8_t *payload,
		       uint64_t now)
{
	int32_t d = seq_diff(h->seq, p->rx_next);
	struct ntx_rel_rxpkt *pkt;

	if (d < 0) {
		/* delivered already: our ACK was lost, send it again */
		rel->stats.rx_dup++;
		p->flags |= PF_ACK_NOW;
		return -1;
	}
	if (d > 0)
		return rel_hold(rel, p, h, payload);
	rel_rx_in_order(rel, p, h, payload, now);
	while (p->ooo && (pkt = p->ooo[p->rx_next % rel->cfg.window])) {
		p->ooo[p->rx_next % rel->cfg.window] = NULL;
		p->ooo_count--;
		rel_rx_in_order(rel, p, &pkt->h, pkt->data, now);
		rel_ooo_pkt_free(rel, pkt);
		p->flags |= PF_ACK_NOW; /* a hole filled: tell the sender */
	}
	if (p->ooo && !p->ooo_count)
		rel_ooo_free(rel, p);
	return -1;
}

/* ---- input: checks of untrusted headers ------------------------------- */

/* -1 when the header is consistent with itself and the datagram */
static int rel_check(const struct ntx_rel *rel, const struct ntx_rel_hdr *h,
		     size_t len)
{
	if (h->version != NTX_REL_VERSION || (h->flags & ~NTX_REL_F_ALL))
		return NTX_REL_DROP_VERSION;
	if (h->plen != len - NTX_REL_HDR_LEN || h->plen > rel->cfg.mtu)
		return NTX_REL_DROP_LEN;
	if (!h->src_epoch)
		return NTX_REL_DROP_EPOCH;
	if (!(h->flags & NTX_REL_F_DATA))
		return h->flags & NTX_REL_F_PRIO ? NTX_REL_DROP_VERSION :
		       h->plen ? NTX_REL_DROP_LEN : -1;
	if (!h->nfrag || h->frag >= h->nfrag)
		return NTX_REL_DROP_FRAG;
	if (h->msg_len > rel->cfg.max_msg)
		return NTX_REL_DROP_MSGLEN;
	if (h->plen > h->msg_len)
		return NTX_REL_DROP_LEN;
	return -1;
}

/* Sessions (DESIGN §10 Epochs): a new src_epoch is a restarted peer.
 * The first epoch is learned only once the datagram is taken. */
static int rel_check_epoch(struct ntx_rel *rel, struct ntx_rel_peer *p,
			   const struct ntx_rel_hdr *h)
{
	if (rel->cfg.set_epochs)
		return h->dst_epoch == p->my_epoch &&
		       h->src_epoch == p->peer_epoch ? -1 : NTX_REL_DROP_EPOCH;
	if (h->dst_epoch && h->dst_epoch != p->my_epoch)
		return NTX_REL_DROP_EPOCH; /* for our previous incarnation */
	if (h->src_epoch == p->dead_epoch)
		return NTX_REL_DROP_EPOCH; /* from the peer's failed session */
	if (!p->peer_epoch || h->src_epoch == p->peer_epoch)
		return -1;
	p->dead_epoch = p->peer_epoch;
	rel_peer_fail(rel, p, -FI_ECONNRESET);
	return NTX_REL_DROP_EPOCH;
}

int ntx_rel_on_datagram(struct ntx_rel *rel, struct ntx_rel_peer *p,
			const void *buf, size_t len, uint64_t now_ns)
{
	const uint8_t *b = buf;
	struct ntx_rel_hdr h;
	int why;

	if (p->flags & PF_FAILED)
		return rel_drop(rel, NTX_REL_DROP_FAILED);
	if (len < NTX_REL_HDR_LEN)
		return rel_drop(rel, NTX_REL_DROP_SHORT);
	ntx_rel_hdr_unpack(b, &h);
	why = rel_check(rel, &h, len);
	if (why < 0)
		why = rel_check_epoch(rel, p, &h);
	if (why < 0 && seq_diff(h.ack, p->tx_next) > 0)
		why = NTX_REL_DROP_ACK;
	if (why < 0 && (h.flags & NTX_REL_F_DATA) &&
	    seq_diff(h.seq, p->rx_next) >= (int32_t)rel->cfg.window)
		why = NTX_REL_DROP_WINDOW;
	if (why >= 0)
		return rel_drop(rel, why);
	p->peer_epoch = h.src_epoch;
	rel_on_ack(rel, p, &h, now_ns);
	if (h.flags & NTX_REL_F_DATA) {
		why = rel_on_data(rel, p, &h, b + NTX_REL_HDR_LEN, now_ns);
		if (why >= 0)
			return rel_drop(rel, why);
	}
	if (ntx_rel_peer_idle(p))
		ntx_list_remove(&p->active); /* its last packet was acked */
	else
		rel_peer_activate(rel, p);
	return 0;
}
