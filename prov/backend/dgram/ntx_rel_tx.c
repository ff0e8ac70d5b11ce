/*
 * The sending side of the reliability module (DESIGN §10): messages queued
 * per class, cut into the window, retransmitted on timeout or duplicate
 * ACKs, and freed once the peer's cumulative ACKs cover them.
 */
#include <rdma/fi_errno.h>
#include <string.h>

#include "ntx_rel_int.h"

#define REL_BACKOFF_MAX 20 /* shifts of the timeout, before the cap */

/* why PF_RETX is set, for the counters */
enum { RETX_RTO, RETX_FAST, RETX_PARTIAL };

static bool rel_queued(const struct ntx_rel_peer *p)
{
	return !ntx_list_empty(&p->queue[NTX_REL_PRIO]) ||
	       !ntx_list_empty(&p->queue[NTX_REL_BULK]);
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
	ntx_rel_peer_activate(rel, p);
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
		ntx_rel_peer_fail(rel, p, -FI_ETIMEDOUT);
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
	ntx_rel_msg_free(rel, p, m);
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
		ntx_rel_win_free(rel, p); /* idle again: no window held */
}

void ntx_rel_on_ack(struct ntx_rel *rel, struct ntx_rel_peer *p,
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
