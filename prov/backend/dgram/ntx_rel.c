/*
 * The reliability protocol of the datagram back ends (DESIGN §10), after
 * the design of Open MPI's usnic BTL: per-peer sequence numbers, a sliding
 * window, cumulative ACKs piggy-backed on traffic the other way, delayed
 * ACKs, retransmission on timeout (exponential back-off) and on duplicate
 * ACKs, and a receive reorder buffer. Pure: the caller passes the time and
 * moves the datagrams.
 *
 * This file: the wire header, the configuration and the peers (their
 * sessions, buffers and failure); sending is in ntx_rel_tx.c, receiving
 * in ntx_rel_rx.c.
 */
#include <assert.h>
#include <rdma/fi_errno.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_rel_int.h"

/* the idle footprint promised in DESIGN §10 */
static_assert(sizeof(struct ntx_rel_peer) <= 256, "idle peer over 256 B");

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

void ntx_rel_msg_free(struct ntx_rel *rel, struct ntx_rel_peer *p,
		      struct ntx_rel_msg *m)
{
	ntx_list_remove(&m->entry);
	ntx_list_remove(&m->qentry); /* no-op once every fragment left */
	p->queued_msgs[m->prio]--;
	p->queued_bytes[m->prio] -= m->len;
	rel_free(rel, m, sizeof(*m) + m->len);
}

void ntx_rel_win_free(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	rel_free(rel, p->win, rel->cfg.window * sizeof(*p->win));
	p->win = NULL;
}

void ntx_rel_ooo_pkt_free(struct ntx_rel *rel, struct ntx_rel_rxpkt *pkt)
{
	rel->ooo_mem -= sizeof(*pkt) + pkt->h.plen;
	rel_free(rel, pkt, sizeof(*pkt) + pkt->h.plen);
}

void ntx_rel_ooo_free(struct ntx_rel *rel, struct ntx_rel_peer *p)
{
	if (!p->ooo)
		return;
	for (uint32_t i = 0; i < rel->cfg.window; i++)
		if (p->ooo[i])
			ntx_rel_ooo_pkt_free(rel, p->ooo[i]);
	rel->ooo_mem -= rel->cfg.window * sizeof(*p->ooo);
	rel_free(rel, p->ooo, rel->cfg.window * sizeof(*p->ooo));
	p->ooo = NULL;
	p->ooo_count = 0;
}

void ntx_rel_reasm_free(struct ntx_rel *rel, struct ntx_rel_peer *p, int c)
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

		ntx_rel_msg_free(rel, p, m);
		if (report && rel->ops.dropped)
			rel->ops.dropped(rel->arg, p, ctx);
	}
	ntx_rel_win_free(rel, p);
	ntx_rel_ooo_free(rel, p);
	ntx_rel_reasm_free(rel, p, NTX_REL_BULK);
	ntx_rel_reasm_free(rel, p, NTX_REL_PRIO);
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

void ntx_rel_peer_activate(struct ntx_rel *rel, struct ntx_rel_peer *p)
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
		ntx_rel_peer_activate(rel, p);
}

/* Once: the caller hears of the failure, then of every message dropped;
 * the peer sends and accepts nothing more (DESIGN §10 Failure). */
void ntx_rel_peer_fail(struct ntx_rel *rel, struct ntx_rel_peer *p,
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
