/*
 * The receiving side of the reliability module (DESIGN §10): untrusted
 * headers checked, packets put back in order (a bounded reorder buffer),
 * messages reassembled and delivered once, ACKs owed.
 */
#include <rdma/fi_errno.h>
#include <string.h>

#include "ntx_rel_int.h"

static int rel_drop(struct ntx_rel *rel, int why)
{
	rel->stats.drops[why]++;
	return -FI_EINVAL;
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
	ntx_rel_reasm_free(rel, p, c);
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
	ntx_rel_reasm_free(rel, p, c);
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
		ntx_rel_ooo_pkt_free(rel, pkt);
		p->flags |= PF_ACK_NOW; /* a hole filled: tell the sender */
	}
	if (p->ooo && !p->ooo_count)
		ntx_rel_ooo_free(rel, p);
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
	ntx_rel_peer_fail(rel, p, -FI_ECONNRESET);
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
	ntx_rel_on_ack(rel, p, &h, now_ns);
	if (h.flags & NTX_REL_F_DATA) {
		why = rel_on_data(rel, p, &h, b + NTX_REL_HDR_LEN, now_ns);
		if (why >= 0)
			return rel_drop(rel, why);
	}
	if (ntx_rel_peer_idle(p))
		ntx_list_remove(&p->active); /* its last packet was acked */
	else
		ntx_rel_peer_activate(rel, p);
	return 0;
}
