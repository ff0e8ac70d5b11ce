/* Unit tests of the reliability protocol (ntx_rel*.c, DESIGN §10): two
 * struct ntx_rel, A and B, joined by a simulated link that loses,
 * duplicates and reorders datagrams as a fixed-seed PRNG decides. Time is
 * simulated: nothing sleeps. */
#include <criterion/criterion.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_rel.h"

#define MTU 1440
#define BASE_NS 10000u /* one-way delay of the link */
#define LOG_MAX 20000

/* one datagram on the link */
struct dg {
	uint64_t t, order;
	int to;
	size_t len;
	uint8_t buf[];
};

/* an emitted datagram, for tests that look at the order */
struct ev {
	uint64_t t;
	int from;
	struct ntx_rel_hdr h;
};

/* what one side sends: message i has len[i] bytes, of class cls[i] */
struct work {
	uint32_t n, next;
	uint32_t *len;
	uint8_t *cls;
};

struct sim;

struct side {
	struct sim *sim;
	int id;
	struct ntx_rel rel;
	struct ntx_rel_peer *peer;
	struct work work;       /* what this side sends */
	uint32_t rx_ptr[2];     /* next of the peer's messages, per class */
	uint32_t delivered;
	uint32_t order[64];     /* peer's message indexes in delivery order */
	uint64_t data_out, acks_out;
	int failed, failed_err, dropped;
	uint8_t *scratch;
};

struct sim {
	struct side s[2];
	uint64_t now, rng, order;
	uint32_t loss_ppm, dup_ppm, jitter_ns;
	bool cut;            /* the link drops everything */
	uint32_t refuse_every; /* emit says -FI_EAGAIN every n-th call */
	uint64_t emit_calls, refused;
	int64_t drop_data_n; /* drop A's n-th first transmission, -1 none */
	uint64_t a_data_seen;
	uint64_t lost_data, lost;
	struct dg **q;
	size_t nq, qcap;
	struct ev *log;
	size_t nlog;
};

static uint64_t rnd(struct sim *s)
{
	uint64_t x = s->rng; /* xorshift64 */

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return s->rng = x;
}

static bool chance(struct sim *s, uint32_t ppm)
{
	return ppm && rnd(s) % 1000000 < ppm;
}

static uint8_t pattern(int from, int cls, uint32_t idx, size_t i)
{
	return (uint8_t)(i * 131 + (i >> 8) * 7 + idx * 29 + cls * 59 +
			 from * 17 + 1);
}

static void link_put(struct sim *s, int to, const void *hdr, size_t hlen,
		     const void *pl, size_t len)
{
	struct dg *d = malloc(sizeof(*d) + hlen + len);

	cr_assert(d);
	d->t = s->now + BASE_NS + (s->jitter_ns ? rnd(s) % s->jitter_ns : 0);
	d->order = s->order++;
	d->to = to;
	d->len = hlen + len;
	memcpy(d->buf, hdr, hlen);
	if (len)
		memcpy(d->buf + hlen, pl, len);
	if (s->nq == s->qcap) {
		s->qcap = s->qcap ? 2 * s->qcap : 256;
		s->q = realloc(s->q, s->qcap * sizeof(*s->q));
		cr_assert(s->q);
	}
	s->q[s->nq++] = d;
}

/* ops->emit: log it, then lose, duplicate or delay it */
static int sim_emit(void *arg, struct ntx_rel_peer *peer, const void *hdr,
		    size_t hlen, const void *pl, size_t len)
{
	struct side *sd = arg;
	struct sim *s = sd->sim;
	struct ntx_rel_hdr h;
	bool data, first;

	cr_assert_eq(hlen, NTX_REL_HDR_LEN);
	if (s->refuse_every && ++s->emit_calls % s->refuse_every == 0) {
		s->refused++; /* a full socket: nothing left */
		return -FI_EAGAIN;
	}
	ntx_rel_hdr_unpack(hdr, &h);
	cr_assert_eq(h.plen, len);
	data = h.flags & NTX_REL_F_DATA;
	sd->data_out += data;
	sd->acks_out += !data;
	if (s->log && s->nlog < LOG_MAX)
		s->log[s->nlog++] = (struct ev){ s->now, sd->id, h };
	/* A's n-th new packet: seq n, first time sent */
	first = data && sd->id == 0 && h.seq == s->a_data_seen;
	if (first)
		s->a_data_seen++;
	if (s->cut || chance(s, s->loss_ppm) ||
	    (first && (int64_t)h.seq == s->drop_data_n)) {
		s->lost++;
		s->lost_data += data;
		return 0;
	}
	link_put(s, !sd->id, hdr, hlen, pl, len);
	if (chance(s, s->dup_ppm))
		link_put(s, !sd->id, hdr, hlen, pl, len);
	return 0;
}

/* ops->deliver: the peer's next message of this class, byte-exact */
static void sim_deliver(void *arg, struct ntx_rel_peer *peer, int c,
			const void *msg, size_t len)
{
	struct side *sd = arg;
	struct work *w = &sd->sim->s[!sd->id].work;
	uint32_t i = sd->rx_ptr[c];
	const uint8_t *b = msg;

	while (i < w->n && w->cls[i] != c)
		i++;
	cr_assert_lt(i, w->next, "side %d: class %d message beyond those sent",
		     sd->id, c);
	cr_assert_eq(len, w->len[i], "side %d: message %u: %zu bytes, not %u",
		     sd->id, i, len, w->len[i]);
	for (size_t k = 0; k < len; k++)
		if (b[k] != pattern(!sd->id, c, i, k))
			cr_assert_fail("side %d: message %u byte %zu differs",
				       sd->id, i, k);
	if (sd->delivered < 64)
		sd->order[sd->delivered] = i;
	sd->delivered++;
	sd->rx_ptr[c] = i + 1;
}

static void sim_failed(void *arg, struct ntx_rel_peer *peer, int err)
{
	struct side *sd = arg;

	sd->failed++;
	sd->failed_err = err;
}

static void sim_dropped(void *arg, struct ntx_rel_peer *peer, void *ctx)
{
	((struct side *)arg)->dropped++;
}

static const struct ntx_rel_ops sim_ops = {
	.emit = sim_emit, .deliver = sim_deliver,
	.failed = sim_failed, .dropped = sim_dropped
};

static void cfg_test(struct ntx_rel_cfg *cfg, int id)
{
	ntx_rel_cfg_default(cfg);
	cfg->mtu = MTU;
	cfg->epoch = 100 + id;
}

static struct sim *sim_new(uint64_t seed, const struct ntx_rel_cfg *base)
{
	struct sim *s = calloc(1, sizeof(*s));

	cr_assert(s);
	s->rng = seed * 0x9e3779b97f4a7c15ull + 1;
	s->drop_data_n = -1;
	for (int i = 0; i < 2; i++) {
		struct side *sd = &s->s[i];
		struct ntx_rel_cfg cfg;

		cfg_test(&cfg, i);
		if (base) {
			cfg = *base;
			cfg.epoch = 100 + i;
		}
		sd->sim = s;
		sd->id = i;
		cr_assert_eq(ntx_rel_init(&sd->rel, &cfg, &sim_ops, sd), 0);
		cr_assert_eq(ntx_rel_peer_new(&sd->rel, NULL, &sd->peer), 0);
		sd->scratch = malloc(cfg.max_msg);
		cr_assert(sd->scratch);
	}
	return s;
}

static void sim_free(struct sim *s)
{
	for (int i = 0; i < 2; i++) {
		ntx_rel_fini(&s->s[i].rel);
		cr_assert_eq(s->s[i].rel.mem, 0, "fini frees everything");
		free(s->s[i].scratch);
		free(s->s[i].work.len);
		free(s->s[i].work.cls);
	}
	for (size_t i = 0; i < s->nq; i++)
		free(s->q[i]);
	free(s->q);
	free(s->log);
	free(s);
}

static void work_add(struct side *sd, uint32_t len, int cls)
{
	struct work *w = &sd->work;

	w->len = realloc(w->len, (w->n + 1) * sizeof(*w->len));
	w->cls = realloc(w->cls, (w->n + 1) * sizeof(*w->cls));
	cr_assert(w->len && w->cls);
	w->len[w->n] = len;
	w->cls[w->n++] = (uint8_t)cls;
}

/* queue the side's messages until its queue is full */
static void sim_feed(struct side *sd)
{
	struct work *w = &sd->work;

	while (w->next < w->n) {
		uint32_t i = w->next, len = w->len[i];
		struct iovec iov[2];
		int ret;

		for (uint32_t k = 0; k < len; k++)
			sd->scratch[k] = pattern(sd->id, w->cls[i], i, k);
		/* two iovecs: the copy gathers */
		iov[0] = (struct iovec){ sd->scratch, len / 3 };
		iov[1] = (struct iovec){ sd->scratch + len / 3, len - len / 3 };
		ret = ntx_rel_send(&sd->rel, sd->peer, w->cls[i], iov, 2, sd);
		if (ret == -FI_EAGAIN)
			return;
		cr_assert_eq(ret, 0, "send: %d", ret);
		w->next++;
	}
}

/* deliver every datagram due now, oldest first; true if any */
static bool sim_deliver_due(struct sim *s)
{
	bool any = false;

	for (;;) {
		size_t best = s->nq;
		struct dg *d;

		for (size_t i = 0; i < s->nq; i++)
			if (s->q[i]->t <= s->now &&
			    (best == s->nq || s->q[i]->t < s->q[best]->t ||
			     (s->q[i]->t == s->q[best]->t &&
			      s->q[i]->order < s->q[best]->order)))
				best = i;
		if (best == s->nq)
			return any;
		d = s->q[best];
		s->q[best] = s->q[--s->nq];
		ntx_rel_on_datagram(&s->s[d->to].rel, s->s[d->to].peer, d->buf,
				    d->len, s->now);
		free(d);
		any = true;
	}
}

static uint64_t sim_next(const struct sim *s)
{
	uint64_t next = UINT64_MAX;

	for (size_t i = 0; i < s->nq; i++)
		if (s->q[i]->t < next)
			next = s->q[i]->t;
	for (int i = 0; i < 2; i++) {
		uint64_t d = ntx_rel_next_deadline(&s->s[i].rel);

		if (d < next)
			next = d;
	}
	return next;
}

/* one round: feed, poll both, deliver or advance the clock; false when
 * nothing will ever happen again or the next event is past limit */
static bool sim_step(struct sim *s, uint64_t limit)
{
	uint64_t next;

	for (int i = 0; i < 2; i++) {
		int ret;

		sim_feed(&s->s[i]);
		ret = ntx_rel_poll_tx(&s->s[i].rel, s->now);
		cr_assert(ret >= 0 || (ret == -FI_EAGAIN && s->refuse_every),
			  "poll_tx: %d", ret);
	}
	if (sim_deliver_due(s))
		return true;
	next = sim_next(s);
	if (next == UINT64_MAX || next > limit)
		return false;
	s->now = next > s->now ? next : s->now + 1;
	return true;
}

static bool sim_done(const struct sim *s)
{
	for (int i = 0; i < 2; i++) {
		const struct side *sd = &s->s[i];

		if (sd->work.next < sd->work.n ||
		    s->s[!i].delivered < sd->work.n ||
		    !ntx_rel_peer_idle(sd->peer))
			return false;
	}
	return s->nq == 0;
}

/* run until every message of both sides arrived and both are idle */
static void sim_run(struct sim *s)
{
	const uint64_t limit = 3600ull * 1000000000ull; /* simulated */

	while (!sim_done(s))
		cr_assert(sim_step(s, limit), "stuck at %llu ns",
			  (unsigned long long)s->now);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(s->s[!i].delivered, s->s[i].work.n,
			     "exactly once: every message, none twice");
		cr_assert_eq(s->s[i].failed, 0);
		cr_assert_eq(s->s[i].rel.mem, sizeof(struct ntx_rel_peer),
			     "side %d holds %zu bytes once idle", i,
			     s->s[i].rel.mem);
		cr_assert_eq(s->s[i].rel.stats.reasm_bufs, 0);
	}
}

static const uint32_t mixed[] = { 0, 1, MTU - 1, MTU, MTU + 1, 65536,
				  1u << 20 };
#define NMIXED (sizeof(mixed) / sizeof(mixed[0]))

Test(rel, clean_link_mixed_sizes_arrive_once_in_order)
{
	struct sim *s = sim_new(1, NULL);

	for (int r = 0; r < 3; r++)
		for (size_t i = 0; i < NMIXED; i++) {
			work_add(&s->s[0], mixed[i], NTX_REL_BULK);
			work_add(&s->s[1], mixed[NMIXED - 1 - i], NTX_REL_BULK);
		}
	sim_run(s);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(s->s[i].rel.stats.tx_retrans, 0,
			     "a clean link needs no retransmission");
		cr_assert_eq(s->s[i].rel.stats.rx_dup, 0);
		cr_assert_eq(s->s[i].rel.stats.delivered, 3 * NMIXED);
	}
	sim_free(s);
}

/* A sends mixed sizes and a run of small messages, B answers with small
 * and medium ones; both classes are used, so order is checked per class. */
static void work_mixed(struct sim *s)
{
	for (size_t i = 0; i < NMIXED; i++)
		work_add(&s->s[0], mixed[i], NTX_REL_BULK);
	for (uint32_t i = 0; i < 300; i++) {
		work_add(&s->s[0], (i * 37) % 3000, i % 5 ? NTX_REL_BULK :
							    NTX_REL_PRIO);
		work_add(&s->s[1], (i * 53) % 200, i % 3 ? NTX_REL_BULK :
							   NTX_REL_PRIO);
	}
	work_add(&s->s[1], 65536, NTX_REL_BULK);
}

struct lossy {
	const char *name;
	uint32_t loss_ppm, dup_ppm, jitter_ns;
	double max_ratio; /* retransmissions per lost data datagram */
};

struct tally {
	uint64_t data, lost, retx, rto, fast, partial;
};

static void tally_add(struct tally *t, const struct sim *s)
{
	for (int i = 0; i < 2; i++) {
		const struct ntx_rel_stats *st = &s->s[i].rel.stats;

		t->data += st->tx_data;
		t->retx += st->tx_retrans;
		t->rto += st->tx_rto;
		t->fast += st->tx_fast;
		t->partial += st->tx_partial;
	}
	t->lost += s->lost_data;
}

/* every seed: all delivered exactly once in order (sim_run), and the
 * retransmissions stay bounded by the losses */
static void run_lossy(const struct lossy *l)
{
	static const uint64_t seeds[] = { 7, 1234, 99991, 31337 };
	struct tally all = { 0 };

	for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
		struct sim *s = sim_new(seeds[k], NULL);
		struct tally one = { 0 };

		s->loss_ppm = l->loss_ppm;
		s->dup_ppm = l->dup_ppm;
		s->jitter_ns = l->jitter_ns;
		work_mixed(s);
		sim_run(s);
		tally_add(&one, s);
		tally_add(&all, s);
		if (l->loss_ppm)
			cr_assert_gt(one.lost, 0, "the seed lost nothing");
		/* a bound per seed: each loss costs a few resends at most;
		 * reordering may cost up to 1% of the packets sent */
		cr_assert_leq(one.retx, l->max_ratio * one.lost +
				 (l->jitter_ns ? one.data / 100 : 0),
			      "%s seed %llu: %llu retransmissions for %llu "
			      "lost", l->name, (unsigned long long)seeds[k],
			      (unsigned long long)one.retx,
			      (unsigned long long)one.lost);
		sim_free(s);
	}
	fprintf(stderr, "rel %-9s data %llu lost %llu retx %llu (rto %llu "
		"fast %llu partial %llu) retx/lost %.2f\n", l->name,
		(unsigned long long)all.data, (unsigned long long)all.lost,
		(unsigned long long)all.retx, (unsigned long long)all.rto,
		(unsigned long long)all.fast, (unsigned long long)all.partial,
		all.lost ? (double)all.retx / all.lost : 0.0);
}

Test(rel, loss_1_percent)
{
	run_lossy(&(struct lossy){ "loss 1%", 10000, 0, 0, 2.0 });
}

Test(rel, loss_5_percent)
{
	run_lossy(&(struct lossy){ "loss 5%", 50000, 0, 0, 2.0 });
}

Test(rel, loss_20_percent)
{
	/* a retransmission is lost at 20% too */
	run_lossy(&(struct lossy){ "loss 20%", 200000, 0, 0, 2.0 });
}

Test(rel, duplication)
{
	/* nothing lost: no retransmission at all, duplicates dropped */
	run_lossy(&(struct lossy){ "dup 10%", 0, 100000, 0, 0.0 });
}

Test(rel, reordering)
{
	/* jitter of 3x the link delay reorders most bursts */
	run_lossy(&(struct lossy){ "reorder", 0, 0, 3 * BASE_NS, 0.0 });
}

Test(rel, loss_duplication_and_reordering)
{
	run_lossy(&(struct lossy){ "all", 50000, 50000, 3 * BASE_NS, 2.0 });
}

/* the first emission by side from of packet seq, at or after index from_i
 * of the log; -1 if none */
static long log_find(const struct sim *s, int from, uint32_t seq,
		     size_t from_i)
{
	for (size_t i = from_i; i < s->nlog; i++)
		if (s->log[i].from == from &&
		    (s->log[i].h.flags & NTX_REL_F_DATA) &&
		    s->log[i].h.seq == seq)
			return (long)i;
	return -1;
}

Test(rel, one_loss_is_resent_after_three_duplicate_acks_before_the_rto)
{
	struct sim *s = sim_new(5, NULL);
	long first, again;

	s->log = calloc(LOG_MAX, sizeof(*s->log));
	s->drop_data_n = 1; /* A's second packet, first transmission */
	work_add(&s->s[0], 20 * MTU, NTX_REL_BULK);
	sim_run(s);
	first = log_find(s, 0, 1, 0);
	again = log_find(s, 0, 1, (size_t)first + 1);
	cr_assert_geq(first, 0);
	cr_assert_geq(again, 0, "seq 1 was never resent");
	cr_assert_lt(s->log[again].t - s->log[first].t,
		     s->s[0].rel.cfg.rto_init_ns,
		     "resent after %llu ns: the timer, not the duplicate ACKs",
		     (unsigned long long)(s->log[again].t - s->log[first].t));
	cr_assert_eq(s->s[0].rel.stats.tx_fast, 1);
	cr_assert_eq(s->s[0].rel.stats.tx_rto, 0);
	cr_assert_eq(s->s[0].rel.stats.tx_retrans, 1, "only the lost one");
	cr_assert_geq(s->s[1].rel.stats.rx_ooo, 3);
	fprintf(stderr, "rel fast retransmit after %llu ns (rto %llu ns)\n",
		(unsigned long long)(s->log[again].t - s->log[first].t),
		(unsigned long long)s->s[0].rel.cfg.rto_init_ns);
	sim_free(s);
}

Test(rel, a_cut_link_backs_off_to_the_cap_then_fails_the_peer_once)
{
	struct sim *s = sim_new(6, NULL);
	const struct ntx_rel_cfg *cfg = &s->s[0].rel.cfg;
	uint64_t prev_t = 0, prev_gap = 0, sends = 0, capped = 0;
	struct iovec iov = { "x", 1 };
	long i = -1;

	s->log = calloc(LOG_MAX, sizeof(*s->log));
	s->cut = true;
	work_add(&s->s[0], 3 * MTU, NTX_REL_BULK); /* in flight */
	work_add(&s->s[0], 100, NTX_REL_PRIO);     /* in flight */
	for (int k = 0; k < 3; k++)                /* queued behind */
		work_add(&s->s[0], 70000, NTX_REL_BULK);
	s->s[0].rel.cfg.window = 4; /* so some of them stay queued */
	while (sim_step(s, 3 * cfg->dead_ns))
		;
	/* the transmissions of seq 0: each gap twice the last, to the cap */
	while ((i = log_find(s, 0, 0, (size_t)(i + 1))) >= 0) {
		uint64_t t = s->log[i].t;

		if (sends >= 1) {
			uint64_t gap = t - prev_t;

			cr_assert_leq(gap, cfg->rto_max_ns);
			if (prev_gap && prev_gap < cfg->rto_max_ns / 2)
				cr_assert_eq(gap, 2 * prev_gap,
					     "gap %llu after %llu",
					     (unsigned long long)gap,
					     (unsigned long long)prev_gap);
			if (gap == cfg->rto_max_ns)
				capped++;
			prev_gap = gap;
		}
		prev_t = t;
		sends++;
	}
	cr_assert_eq(s->log[log_find(s, 0, 0, 0) + 0].t, 0);
	cr_assert_gt(capped, 5, "the timeout reached the cap and stayed");
	cr_assert_eq(s->s[0].failed, 1, "failed exactly once");
	cr_assert_eq(s->s[0].failed_err, -FI_ETIMEDOUT);
	cr_assert_eq(s->s[0].dropped, 5, "every message reported");
	cr_assert_eq(s->s[0].work.next, 5);
	/* failed at the limit, counted from the last progress (t = 0) */
	cr_assert_geq(s->now, cfg->dead_ns);
	cr_assert_leq(prev_t, cfg->dead_ns);
	cr_assert_eq(ntx_rel_send(&s->s[0].rel, s->s[0].peer, NTX_REL_BULK,
				  &iov, 1, NULL), -FI_ETIMEDOUT);
	cr_assert_eq(ntx_rel_poll_tx(&s->s[0].rel, s->now + cfg->dead_ns), 0,
		     "nothing more is sent to a failed peer");
	cr_assert_eq(s->s[0].rel.mem, sizeof(struct ntx_rel_peer));
	cr_assert_eq(ntx_rel_next_deadline(&s->s[0].rel), UINT64_MAX);
	fprintf(stderr, "rel cut link: %llu transmissions of seq 0 in %llu "
		"ns, failed at %llu ns\n", (unsigned long long)sends,
		(unsigned long long)prev_t, (unsigned long long)s->now);
	sim_free(s);
}

Test(rel, acks_ride_on_data_both_ways)
{
	struct sim *s = sim_new(8, NULL);
	uint64_t data = 0, acks = 0;

	for (uint32_t i = 0; i < 400; i++) {
		work_add(&s->s[0], 100 + (i * 97) % 6000, NTX_REL_BULK);
		work_add(&s->s[1], 100 + (i * 61) % 6000, NTX_REL_BULK);
	}
	sim_run(s);
	for (int i = 0; i < 2; i++) {
		data += s->s[i].data_out;
		acks += s->s[i].acks_out;
	}
	fprintf(stderr, "rel both ways: %llu data, %llu pure ACK datagrams "
		"(%.3f)\n", (unsigned long long)data,
		(unsigned long long)acks, (double)acks / data);
	cr_assert_lt(acks * 20, data, "%llu pure ACKs for %llu data",
		     (unsigned long long)acks, (unsigned long long)data);
	sim_free(s);
}

Test(rel, a_lone_packet_is_acked_within_the_delayed_ack_time)
{
	struct sim *s = sim_new(9, NULL);
	long d, a = -1;

	s->log = calloc(LOG_MAX, sizeof(*s->log));
	work_add(&s->s[0], 1, NTX_REL_BULK);
	sim_run(s);
	d = log_find(s, 0, 0, 0);
	cr_assert_geq(d, 0);
	for (size_t i = 0; i < s->nlog; i++)
		if (s->log[i].from == 1 && !(s->log[i].h.flags &
					     NTX_REL_F_DATA)) {
			a = (long)i;
			break;
		}
	cr_assert_geq(a, 0, "B never acknowledged");
	cr_assert_eq(s->log[a].h.ack, 1);
	/* arrival at t + BASE_NS; the ACK waits, but no longer than delack */
	cr_assert_leq(s->log[a].t - (s->log[d].t + BASE_NS),
		      s->s[1].rel.cfg.delack_ns);
	cr_assert_gt(s->log[a].t, s->log[d].t + BASE_NS, "delayed, not at once");
	cr_assert_eq(s->s[1].acks_out, 1, "one ACK");
	cr_assert_eq(s->s[0].rel.stats.tx_retrans, 0);
	sim_free(s);
}

Test(rel, a_priority_message_overtakes_queued_bulk_fragments)
{
	struct sim *s = sim_new(10, NULL);
	struct side *a = &s->s[0];
	long prio = -1, late_bulk = -1;
	uint32_t win = a->rel.cfg.window;

	s->log = calloc(LOG_MAX, sizeof(*s->log));
	work_add(a, 200 * MTU, NTX_REL_BULK);
	sim_feed(a);
	cr_assert_eq(ntx_rel_poll_tx(&a->rel, 0), (int)win, "a full window");
	work_add(a, 64, NTX_REL_PRIO); /* queued after the bulk message */
	sim_run(s);
	for (size_t i = 0; i < s->nlog; i++) {
		const struct ev *e = &s->log[i];

		if (e->from || !(e->h.flags & NTX_REL_F_DATA))
			continue;
		if ((e->h.flags & NTX_REL_F_PRIO) && prio < 0)
			prio = (long)i;
		if (!(e->h.flags & NTX_REL_F_PRIO) && e->h.frag >= win &&
		    late_bulk < 0)
			late_bulk = (long)i;
	}
	cr_assert_geq(prio, 0);
	cr_assert_geq(late_bulk, 0);
	cr_assert_lt(prio, late_bulk,
		     "the priority message left at %ld, after bulk at %ld",
		     prio, late_bulk);
	cr_assert_eq(s->log[prio].h.seq, win, "the first free seq");
	cr_assert_eq(s->s[1].order[0], 1, "delivered before the bulk one");
	cr_assert_eq(s->s[1].order[1], 0);
	sim_free(s);
}

Test(rel, an_idle_peer_is_small_and_holds_nothing)
{
	struct sim *s = sim_new(11, NULL);

	/* DESIGN §10: a peer costs at most 256 bytes until it has traffic;
	 * the window, reorder and reassembly buffers come and go with it */
	cr_assert_leq(sizeof(struct ntx_rel_peer), 256);
	cr_assert_eq(s->s[0].rel.mem, sizeof(struct ntx_rel_peer));
	s->loss_ppm = 50000;
	s->jitter_ns = 2 * BASE_NS;
	work_mixed(s);
	sim_run(s); /* checks mem == sizeof(peer) on both sides once idle */
	for (int i = 0; i < 2; i++) {
		cr_assert(ntx_rel_peer_idle(s->s[i].peer));
		cr_assert_eq(ntx_rel_next_deadline(&s->s[i].rel), UINT64_MAX);
		cr_assert(ntx_list_empty(&s->s[i].rel.active));
		cr_assert_gt(s->s[i].rel.stats.reasm_max, 0);
	}
	fprintf(stderr, "rel sizeof(struct ntx_rel_peer) = %zu\n",
		sizeof(struct ntx_rel_peer));
	sim_free(s);
}

/* ---- hostile input: one ntx_rel fed datagrams built by hand ----------- */

struct victim {
	struct ntx_rel rel;
	struct ntx_rel_peer *peer;
	uint32_t delivered, last_len, emitted, failed, failed_err;
	uint8_t last[4096];
};

static int victim_emit(void *arg, struct ntx_rel_peer *peer, const void *hdr,
		       size_t hlen, const void *pl, size_t len)
{
	((struct victim *)arg)->emitted++;
	return 0;
}

static void victim_deliver(void *arg, struct ntx_rel_peer *peer, int c,
			   const void *msg, size_t len)
{
	struct victim *v = arg;

	v->delivered++;
	v->last_len = (uint32_t)len;
	memcpy(v->last, msg, len < sizeof(v->last) ? len : sizeof(v->last));
}

static void victim_failed(void *arg, struct ntx_rel_peer *peer, int err)
{
	struct victim *v = arg;

	v->failed++;
	v->failed_err = (uint32_t)err;
}

static const struct ntx_rel_ops victim_ops = {
	.emit = victim_emit, .deliver = victim_deliver,
	.failed = victim_failed
};

static struct victim *victim_new(void)
{
	struct victim *v = calloc(1, sizeof(*v));
	struct ntx_rel_cfg cfg;

	cr_assert(v);
	cfg_test(&cfg, 1);
	cr_assert_eq(ntx_rel_init(&v->rel, &cfg, &victim_ops, v), 0);
	cr_assert_eq(ntx_rel_peer_new(&v->rel, NULL, &v->peer), 0);
	return v;
}

static void victim_free(struct victim *v)
{
	ntx_rel_fini(&v->rel);
	cr_assert_eq(v->rel.mem, 0);
	free(v);
}

/* a data header from A (epoch 100) as an honest peer would send it */
static struct ntx_rel_hdr hdr_data(uint32_t seq, uint32_t id, uint32_t len,
				   uint16_t frag, uint16_t nfrag,
				   uint16_t plen)
{
	return (struct ntx_rel_hdr){ .version = NTX_REL_VERSION,
				     .flags = NTX_REL_F_DATA, .plen = plen,
				     .src_epoch = 100, .seq = seq,
				     .msg_id = id, .msg_len = len,
				     .frag = frag, .nfrag = nfrag };
}

/* send h with body bytes after it (body may disagree with h.plen) */
static int poke(struct victim *v, struct ntx_rel_hdr h, size_t body)
{
	static uint8_t buf[NTX_REL_HDR_LEN + 70000];

	cr_assert_leq(body, sizeof(buf) - NTX_REL_HDR_LEN);
	ntx_rel_hdr_pack(&h, buf);
	for (size_t i = 0; i < body; i++)
		buf[NTX_REL_HDR_LEN + i] = (uint8_t)(h.seq + h.frag + i);
	return ntx_rel_on_datagram(&v->rel, v->peer, buf,
				   NTX_REL_HDR_LEN + body, 0);
}

/* poke, and check it was dropped for why */
static void poke_bad(struct victim *v, struct ntx_rel_hdr h, size_t body,
		     int why, const char *what)
{
	uint64_t before = v->rel.stats.drops[why];

	cr_assert_eq(poke(v, h, body), -FI_EINVAL, "%s: taken", what);
	cr_assert_eq(v->rel.stats.drops[why], before + 1,
		     "%s: not counted as reason %d", what, why);
}

Test(rel, malformed_datagrams_are_dropped_and_counted)
{
	struct victim *v = victim_new();
	struct ntx_rel_hdr h = hdr_data(0, 0, 10, 0, 1, 10);
	uint8_t junk[NTX_REL_HDR_LEN] = { 1 };
	uint32_t win = v->rel.cfg.window, mtu = v->rel.cfg.mtu;

	cr_assert_eq(ntx_rel_on_datagram(&v->rel, v->peer, junk, 0, 0),
		     -FI_EINVAL);
	cr_assert_eq(ntx_rel_on_datagram(&v->rel, v->peer, junk, 31, 0),
		     -FI_EINVAL);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_SHORT], 2);
	h.version = 2;
	poke_bad(v, h, 10, NTX_REL_DROP_VERSION, "version 2");
	h = hdr_data(0, 0, 10, 0, 1, 10);
	h.flags |= 0x80;
	poke_bad(v, h, 10, NTX_REL_DROP_VERSION, "unknown flag");
	h = hdr_data(0, 0, 100, 0, 1, 100);
	poke_bad(v, h, 50, NTX_REL_DROP_LEN, "plen beyond the datagram");
	poke_bad(v, h, 120, NTX_REL_DROP_LEN, "datagram beyond plen");
	h = hdr_data(0, 0, mtu + 1, 0, 1, (uint16_t)(mtu + 1));
	poke_bad(v, h, mtu + 1, NTX_REL_DROP_LEN, "plen > mtu");
	h = hdr_data(0, 0, 10, 0, 1, 20);
	poke_bad(v, h, 20, NTX_REL_DROP_LEN, "plen > msg_len");
	h = hdr_data(0, 0, 10, 0, 0, 10);
	poke_bad(v, h, 10, NTX_REL_DROP_FRAG, "nfrag 0");
	h = hdr_data(0, 0, 3000, 3, 3, 10);
	poke_bad(v, h, 10, NTX_REL_DROP_FRAG, "frag == nfrag");
	h = hdr_data(0, 0, 3000, 9, 3, 10);
	poke_bad(v, h, 10, NTX_REL_DROP_FRAG, "frag > nfrag");
	h = hdr_data(0, 0, v->rel.cfg.max_msg + 1, 0, 60000, 10);
	poke_bad(v, h, 10, NTX_REL_DROP_MSGLEN, "msg_len > max_msg");
	h = hdr_data(win, 0, 10, 0, 1, 10);
	poke_bad(v, h, 10, NTX_REL_DROP_WINDOW, "seq = window");
	h = hdr_data(1000000000, 0, 10, 0, 1, 10);
	poke_bad(v, h, 10, NTX_REL_DROP_WINDOW, "seq far ahead");
	h = hdr_data(0, 0, 10, 0, 1, 10);
	h.ack = 5;
	poke_bad(v, h, 10, NTX_REL_DROP_ACK, "acks packets never sent");
	h = hdr_data(0, 0, 10, 0, 1, 10);
	h.src_epoch = 0;
	poke_bad(v, h, 10, NTX_REL_DROP_EPOCH, "epoch 0");
	h = hdr_data(0, 0, 10, 0, 1, 10);
	h.dst_epoch = 555;
	poke_bad(v, h, 10, NTX_REL_DROP_EPOCH, "for another session of ours");
	h = (struct ntx_rel_hdr){ .version = 1, .plen = 4, .src_epoch = 100 };
	poke_bad(v, h, 4, NTX_REL_DROP_LEN, "an ACK with a payload");
	cr_assert_eq(v->delivered, 0);
	cr_assert_eq(v->peer->rx_next, 0, "nothing was taken");
	/* and the peer still works */
	cr_assert_eq(poke(v, hdr_data(0, 0, 10, 0, 1, 10), 10), 0);
	cr_assert_eq(v->delivered, 1);
	cr_assert_eq(poke(v, hdr_data(0, 0, 10, 0, 1, 10), 10), 0);
	cr_assert_eq(v->delivered, 1, "a duplicate is not delivered again");
	cr_assert_eq(v->rel.stats.rx_dup, 1);
	victim_free(v);
}

Test(rel, fragments_that_do_not_continue_their_message_are_dropped)
{
	struct victim *v = victim_new();
	uint32_t seq = 0;

	/* frag 0 twice (overlap): the partial message goes with it */
	cr_assert_eq(poke(v, hdr_data(seq++, 1, 300, 0, 3, 100), 100), 0);
	poke(v, hdr_data(seq++, 1, 300, 0, 3, 100), 100);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_REASM], 1);
	cr_assert_eq(v->rel.stats.reasm_bufs, 0, "the partial one is freed");
	/* frag 1 with no frag 0 */
	poke(v, hdr_data(seq++, 1, 300, 1, 3, 100), 100);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_REASM], 2);
	/* frag 2 after frag 0: a gap inside the message */
	poke(v, hdr_data(seq++, 2, 300, 0, 3, 100), 100);
	poke(v, hdr_data(seq++, 2, 300, 2, 3, 100), 100);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_REASM], 3);
	/* more bytes than msg_len */
	poke(v, hdr_data(seq++, 3, 200, 0, 2, 100), 100);
	poke(v, hdr_data(seq++, 3, 200, 1, 2, 150), 150);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_REASM], 4);
	/* fewer bytes than msg_len */
	poke(v, hdr_data(seq++, 4, 200, 0, 2, 100), 100);
	poke(v, hdr_data(seq++, 4, 200, 1, 2, 50), 50);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_REASM], 5);
	/* another message id in the middle, an empty middle fragment, a
	 * lone fragment shorter than its message */
	poke(v, hdr_data(seq++, 5, 200, 0, 2, 100), 100);
	poke(v, hdr_data(seq++, 6, 200, 1, 2, 100), 100);
	poke(v, hdr_data(seq++, 7, 200, 0, 2, 0), 0);
	poke(v, hdr_data(seq++, 8, 20, 0, 1, 10), 10);
	cr_assert_eq(v->rel.stats.drops[NTX_REL_DROP_REASM], 8);
	cr_assert_eq(v->delivered, 0);
	cr_assert_eq(v->peer->rx_next, seq, "the sequence moved on");
	/* an honest message still goes through, byte-exact */
	cr_assert_eq(poke(v, hdr_data(seq, 9, 250, 0, 2, 200), 200), 0);
	cr_assert_eq(poke(v, hdr_data(seq + 1, 9, 250, 1, 2, 50), 50), 0);
	cr_assert_eq(v->delivered, 1);
	cr_assert_eq(v->last_len, 250);
	for (uint32_t i = 0; i < 250; i++)
		cr_assert_eq(v->last[i], (uint8_t)(i < 200 ? seq + i :
					 seq + 1 + 1 + i - 200));
	cr_assert_eq(v->rel.stats.reasm_bufs, 0);
	victim_free(v);
}

/* what a peer can make us hold (DESIGN §10 Bounds): the reorder buffer
 * (window packets of at most mtu bytes) and one reassembly buffer per
 * class of at most max_msg bytes, beyond what we send ourselves */
static size_t victim_bound(const struct victim *v, size_t own)
{
	const struct ntx_rel_cfg *c = &v->rel.cfg;

	return own + c->window * (sizeof(void *) + 64 + c->mtu) +
	       NTX_REL_CLASSES * (64 + (size_t)c->max_msg);
}

Test(rel, a_flood_of_message_ids_and_future_packets_stays_bounded)
{
	struct victim *v = victim_new();
	size_t bound = victim_bound(v, sizeof(struct ntx_rel_peer));
	uint32_t max = v->rel.cfg.max_msg, win = v->rel.cfg.window, seq;

	/* each a first fragment of a new largest message, both classes */
	for (seq = 0; seq < 1000; seq++) {
		struct ntx_rel_hdr h = hdr_data(seq, seq, max, 0, 60000, 100);

		if (seq & 1)
			h.flags |= NTX_REL_F_PRIO;
		poke(v, h, 100);
		cr_assert_leq(v->rel.stats.reasm_bufs, NTX_REL_CLASSES);
		cr_assert_leq(v->rel.mem, bound);
	}
	cr_assert_leq(v->rel.stats.reasm_max, NTX_REL_CLASSES);
	/* a first fragment over a partial one: both go, the next starts */
	cr_assert_geq(v->rel.stats.drops[NTX_REL_DROP_REASM], 498);
	/* packets past a hole that is never filled: the window holds them */
	for (uint32_t i = 0; i < 20000; i++) {
		uint32_t s = seq + 1 + (i * 7919u) % (2 * win);

		poke(v, hdr_data(s, s, 1000, 0, 1, 1000), 1000);
		cr_assert_leq(v->peer->ooo_count, win - 1);
		cr_assert_leq(v->rel.mem, bound);
	}
	cr_assert_gt(v->rel.stats.drops[NTX_REL_DROP_WINDOW], 0);
	cr_assert_eq(v->peer->ooo_count, win - 1);
	/* the hole filled: everything held comes out in order */
	cr_assert_eq(poke(v, hdr_data(seq, seq, 10, 0, 1, 10), 10), 0);
	cr_assert_eq(v->peer->rx_next, seq + win);
	cr_assert_eq(v->delivered, win);
	cr_assert_eq(v->peer->ooo_count, 0);
	victim_free(v);
}

/* DESIGN §10 Bounds: the reorder buffers of all peers together stay
 * within cfg.ooo_mem_max, past the NTX_REL_OOO_MIN packets each peer may
 * always hold. Eight peers each send a hole and then a full window: the
 * packets not held are dropped unacknowledged (DROP_BUDGET), so when the
 * holes fill and the senders resend them, every message arrives once. */
Test(rel, reorder_buffers_across_peers_stay_within_the_budget)
{
	enum { NPEER = 8, BODY = 1000 };
	static uint8_t buf[NTX_REL_HDR_LEN + BODY];
	struct victim *v = calloc(1, sizeof(*v));
	struct ntx_rel_peer *p[NPEER];
	struct ntx_rel_cfg cfg;
	uint32_t win;
	size_t most = 0;

	cr_assert(v);
	cfg_test(&cfg, 1);
	cfg.ooo_mem_max = 64 * 1024;
	cr_assert_eq(ntx_rel_init(&v->rel, &cfg, &victim_ops, v), 0);
	win = v->rel.cfg.window;
	for (int i = 0; i < NPEER; i++)
		cr_assert_eq(ntx_rel_peer_new(&v->rel, NULL, &p[i]), 0);
	/* every packet but seq 0, to every peer */
	for (uint32_t seq = 1; seq < win; seq++) {
		for (int i = 0; i < NPEER; i++) {
			struct ntx_rel_hdr h = hdr_data(seq, seq, BODY, 0, 1,
							BODY);

			ntx_rel_hdr_pack(&h, buf);
			ntx_rel_on_datagram(&v->rel, p[i], buf, sizeof(buf),
					    0);
			if (v->rel.ooo_mem > most)
				most = v->rel.ooo_mem;
		}
	}
	for (int i = 0; i < NPEER; i++)
		cr_assert_geq(p[i]->ooo_count, NTX_REL_OOO_MIN);
	cr_assert_gt(v->rel.stats.drops[NTX_REL_DROP_BUDGET], 0);
	/* the bound, and what each peer may hold past it: its minimum and
	 * its pointer array */
	cr_assert_leq(most, cfg.ooo_mem_max + NPEER * (NTX_REL_OOO_MIN *
			   (BODY + 64) + win * sizeof(void *)));
	/* the holes fill, then the senders resend what was not held, in
	 * order: each message arrives once */
	for (int i = 0; i < NPEER; i++) {
		for (uint32_t seq = 0; seq < win; seq++) {
			struct ntx_rel_hdr h = hdr_data(seq, seq, BODY, 0, 1,
							BODY);

			if (seq < p[i]->rx_next)
				continue;
			ntx_rel_hdr_pack(&h, buf);
			ntx_rel_on_datagram(&v->rel, p[i], buf, sizeof(buf),
					    0);
		}
		cr_assert_eq(p[i]->rx_next, win, "peer %d", i);
	}
	cr_assert_eq(v->delivered, NPEER * win);
	cr_assert_eq(v->rel.ooo_mem, 0);
	printf("rel: %d peers, reorder budget %llu: at most %zu bytes held\n",
	       NPEER, (unsigned long long)cfg.ooo_mem_max, most);
	victim_free(v);
}

/* random datagrams, half of them built around a plausible header: near
 * the window, fragments of up to 3, lengths mostly consistent */
static size_t fuzz_one(uint64_t *rng, const struct victim *v, uint8_t *buf)
{
	struct sim r = { .rng = *rng };
	size_t len = rnd(&r) % (NTX_REL_HDR_LEN + 1600);
	const struct ntx_rel_peer *p = v->peer;

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)rnd(&r);
	if (rnd(&r) & 1 && len >= NTX_REL_HDR_LEN) {
		/* one draw per statement: the order is the same everywhere */
		uint16_t nfrag = (uint16_t)(1 + rnd(&r) % 3);
		uint16_t plen = (uint16_t)(len - NTX_REL_HDR_LEN);
		uint32_t seq = p->rx_next + (uint32_t)(rnd(&r) % 24) - 4;
		uint32_t id = (uint32_t)(rnd(&r) % 3);
		uint16_t past = rnd(&r) % 8 == 0; /* frag == nfrag at times */
		uint16_t frag = (uint16_t)(rnd(&r) % (nfrag + past));
		struct ntx_rel_hdr h = hdr_data(seq, id, plen * nfrag, frag,
						nfrag, plen);

		if (rnd(&r) % 4 == 0)
			h.msg_len += (uint32_t)(rnd(&r) % 64);
		h.flags = (uint8_t)(rnd(&r) % 8);
		h.flags |= rnd(&r) % 8 ? NTX_REL_F_DATA : 0;
		/* mostly acknowledging what is in flight, or one more */
		h.ack = p->tx_una +
			(uint32_t)(rnd(&r) % (p->tx_next - p->tx_una + 2));
		if (rnd(&r) % 256 == 0)
			h.src_epoch = 101; /* never our peer's: restart */
		ntx_rel_hdr_pack(&h, buf);
	}
	*rng = r.rng;
	return len;
}

Test(rel, fuzz_random_datagrams)
{
	struct victim *v = victim_new();
	static uint8_t buf[NTX_REL_HDR_LEN + 1600], msg[3000];
	struct iovec iov = { msg, sizeof(msg) };
	uint64_t rng = 0x5eed, taken = 0;
	size_t bound;

	/* B has data in flight, so ACK fields mean something */
	for (int i = 0; i < 4; i++)
		cr_assert_eq(ntx_rel_send(&v->rel, v->peer, i & 1, &iov, 1,
					  NULL), 0);
	cr_assert_gt(ntx_rel_poll_tx(&v->rel, 0), 0);
	bound = victim_bound(v, v->rel.mem);
	for (uint32_t i = 0; i < 100000; i++) {
		size_t len = fuzz_one(&rng, v, buf);

		if (ntx_rel_peer_error(v->peer)) {
			/* a restart was seen: start over with a new peer */
			ntx_rel_peer_free(&v->rel, v->peer);
			cr_assert_eq(ntx_rel_peer_new(&v->rel, NULL, &v->peer),
				     0);
		}
		taken += ntx_rel_on_datagram(&v->rel, v->peer, buf, len,
					     i * 1000ull) == 0;
		cr_assert_leq(v->rel.mem, bound);
		cr_assert_leq(v->rel.stats.reasm_bufs, NTX_REL_CLASSES);
		cr_assert_geq(ntx_rel_poll_tx(&v->rel, i * 1000ull), 0);
	}
	cr_assert_gt(taken, 10000, "the fuzzer reaches past the checks");
	cr_assert_gt(v->delivered, 100, "and into reassembly");
	cr_assert_gt(v->failed, 0, "and sees restarts");
	fprintf(stderr, "rel fuzz: %llu of 100000 taken, %u delivered, "
		"%u restarts\n", (unsigned long long)taken, v->delivered,
		v->failed);
	victim_free(v);
}

Test(rel, a_restarted_peer_fails_the_session_once)
{
	struct victim *v = victim_new();
	struct ntx_rel_hdr h = hdr_data(0, 0, 10, 0, 1, 10);

	cr_assert_eq(poke(v, h, 10), 0);
	h = hdr_data(0, 0, 10, 0, 1, 10);
	h.src_epoch = 200; /* the same address, a new process */
	poke_bad(v, h, 10, NTX_REL_DROP_EPOCH, "a new epoch");
	cr_assert_eq(v->failed, 1);
	cr_assert_eq((int)v->failed_err, -FI_ECONNRESET);
	poke_bad(v, h, 10, NTX_REL_DROP_FAILED, "after the failure");
	cr_assert_eq(v->failed, 1, "once");
	cr_assert_eq(v->delivered, 1);
	/* a new session with the restarted peer; the old one's late
	 * datagrams are refused, not taken for another restart */
	ntx_rel_peer_reset(&v->rel, v->peer);
	cr_assert_eq(v->rel.mem, sizeof(struct ntx_rel_peer));
	poke_bad(v, hdr_data(1, 1, 10, 0, 1, 10), 10, NTX_REL_DROP_EPOCH,
		 "from the old session");
	cr_assert_eq(poke(v, h, 10), 0);
	cr_assert_eq(v->delivered, 2);
	poke_bad(v, hdr_data(1, 1, 10, 0, 1, 10), 10, NTX_REL_DROP_EPOCH,
		 "from the old session, later");
	cr_assert_eq(v->failed, 1);
	victim_free(v);
}

Test(rel, bad_configurations_are_refused)
{
	struct ntx_rel rel;
	struct ntx_rel_cfg cfg;

	cfg_test(&cfg, 0);
	cfg.window = 1;
	cr_assert_eq(ntx_rel_init(&rel, &cfg, &victim_ops, NULL), -FI_EINVAL);
	cfg_test(&cfg, 0);
	cfg.max_msg = cfg.mtu * 65536u;
	cr_assert_eq(ntx_rel_init(&rel, &cfg, &victim_ops, NULL), -FI_EINVAL);
	cfg_test(&cfg, 0);
	cfg.delack_ns = cfg.rto_min_ns;
	cr_assert_eq(ntx_rel_init(&rel, &cfg, &victim_ops, NULL), -FI_EINVAL);
	cfg_test(&cfg, 0);
	cfg.epoch = 0;
	cr_assert_eq(ntx_rel_init(&rel, &cfg, &victim_ops, NULL), -FI_EINVAL);
	cfg_test(&cfg, 0);
	cr_assert_eq(ntx_rel_init(&rel, &cfg, &victim_ops, NULL), 0);
	ntx_rel_fini(&rel);
}

Test(rel, send_checks_length_and_bounds_the_queue)
{
	struct victim *v = victim_new();
	static uint8_t big[1 << 16];
	struct iovec iov = { big, sizeof(big) };
	struct iovec huge[2] = { { big, 1 }, { big, SIZE_MAX } };
	uint32_t n = 0;
	int ret;

	cr_assert_eq(ntx_rel_send(&v->rel, v->peer, 2, &iov, 1, NULL),
		     -FI_EINVAL);
	cr_assert_eq(ntx_rel_send(&v->rel, v->peer, 0, huge, 2, NULL),
		     -FI_EINVAL);
	while ((ret = ntx_rel_send(&v->rel, v->peer, NTX_REL_BULK, &iov, 1,
				   NULL)) == 0)
		n++;
	cr_assert_eq(ret, -FI_EAGAIN);
	cr_assert_eq(n, v->rel.cfg.queue_bytes / sizeof(big));
	/* the priority class has its own room */
	cr_assert_eq(ntx_rel_send(&v->rel, v->peer, NTX_REL_PRIO, &iov, 1,
				  NULL), 0);
	victim_free(v);
}

Test(rel, a_full_socket_delays_datagrams_but_loses_none)
{
	struct sim *s = sim_new(12, NULL);

	s->refuse_every = 3;
	s->loss_ppm = 20000;
	s->jitter_ns = BASE_NS;
	work_mixed(s);
	sim_run(s); /* all delivered once, in order, both sides idle */
	cr_assert_gt(s->refused, 100);
	sim_free(s);
}

Test(rel, idle_peers_cost_only_their_struct)
{
	struct victim *v = victim_new();
	struct ntx_rel_peer *p;
	struct iovec iov = { "abc", 3 };
	uint8_t ack[NTX_REL_HDR_LEN];

	for (int i = 0; i < 1000; i++)
		cr_assert_eq(ntx_rel_peer_new(&v->rel, NULL, &p), 0);
	cr_assert_eq(v->rel.mem, 1001 * sizeof(struct ntx_rel_peer));
	cr_assert_eq(ntx_rel_next_deadline(&v->rel), UINT64_MAX,
		     "no idle peer is active");
	/* one message out and its ACK back: the window comes and goes */
	cr_assert_eq(ntx_rel_send(&v->rel, p, NTX_REL_BULK, &iov, 1, NULL), 0);
	cr_assert_eq(ntx_rel_poll_tx(&v->rel, 0), 1);
	cr_assert_gt(v->rel.mem, 1001 * sizeof(struct ntx_rel_peer));
	ntx_rel_hdr_pack(&(struct ntx_rel_hdr){ .version = NTX_REL_VERSION,
						.src_epoch = 100,
						.dst_epoch = 101, .ack = 1 },
			 ack);
	cr_assert_eq(ntx_rel_on_datagram(&v->rel, p, ack, sizeof(ack), 1000),
		     0);
	cr_assert(ntx_rel_peer_idle(p));
	cr_assert_eq(v->rel.mem, 1001 * sizeof(struct ntx_rel_peer));
	victim_free(v);
}
