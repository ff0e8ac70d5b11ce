/* Issue #36: the bounded fuzzer of test_fuzz.c on two more network
 * surfaces. On the udp domain (DESIGN §10): mutated control datagrams
 * (INIT, COOKIE, ECHO), mutated rel datagrams of the attacker's own
 * proved session (header fields bent, truncated, oversized), and mutated
 * engine packets in valid rel messages from a named attacker. On MSG
 * endpoints (DESIGN §3): NTX_OP_CM packets of random stages, ids and
 * connection data at a passive endpoint and at both ends of a live
 * connection. The victim must not crash, an honest peer's traffic goes on
 * between the cases and after them, and nothing malformed is delivered.
 * NTX_FUZZ_SECONDS bounds each run (default 3), NTX_FUZZ_SEED repeats one.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_test_cm.h"
#include "ntx_adv.h"
#include "ntx_udp_adv.h"
#include "ntx/ntx.h"
#include "ntx/ntx_wire.h"
#include "ntx_dgram.h"
#include "ntx_rel.h"
#include "ntx_tcp_wire.h"

static uint64_t g_rng;

static uint64_t rnd(void)
{
	g_rng ^= g_rng << 13;
	g_rng ^= g_rng >> 7;
	g_rng ^= g_rng << 17;
	return g_rng;
}

/* The run's seed (NTX_FUZZ_SEED, else the clock), logged so that a
 * failure can be repeated; the run's end in ms of t_ms(). */
static uint64_t fuzz_start(const char *what)
{
	const char *sec = getenv("NTX_FUZZ_SECONDS");
	const char *seed = getenv("NTX_FUZZ_SEED");

	g_rng = seed ? strtoull(seed, NULL, 0)
		     : (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
	g_rng |= 1;
	cr_log_info("fuzz %s: seed 0x%llx (NTX_FUZZ_SEED repeats it)\n", what,
		    (unsigned long long)g_rng);
	fprintf(stderr, "fuzz %s: seed 0x%llx\n", what,
		(unsigned long long)g_rng);
	return t_ms() + 1000 * (uint64_t)(sec ? atoi(sec) : 3);
}

/* A value where parsers go wrong: edges and lengths around limits. */
static uint64_t edgy(void)
{
	static const uint64_t v[] = { 0, 1, 2, 7, 8, 16, 31, 32, 33, 255, 256,
				      257, 1400, 1472, 4096, 65471, 65472,
				      65535, 65536, 0x7fffffff, 0x80000000,
				      UINT32_MAX, UINT64_MAX, 1ull << 62 };

	switch (rnd() % 3) {
	case 0:
		return v[rnd() % (sizeof(v) / sizeof(v[0]))];
	case 1:
		return rnd() % 64;
	default:
		return rnd();
	}
}

static void fill_random(uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)rnd();
}

/* An engine header of a random op, plausible, with fields mutated. */
static void bend_wire_hdr(struct ntx_wire_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->op = (uint8_t)(rnd() % (NTX_OP_MAX + 2));
	h->flags = (uint8_t)(rnd() % 2 ? rnd() : rnd() & NTX_PF_ALL);
	h->niov = (uint16_t)(rnd() % 3);
	h->tag = rnd() % 4;
	h->msg_len = rnd() % 2 ? rnd() % 4096 : edgy();
	h->sreq = rnd() % 4;
	h->rreq = rnd() % 4;
	for (unsigned n = 1 + rnd() % 3; n; n--) {
		switch (rnd() % 8) {
		case 0: h->niov = (uint16_t)edgy(); break;
		case 1: h->status = (int32_t)edgy(); break;
		case 2: h->tag = edgy(); break;
		case 3: h->cq_data = edgy(); break;
		case 4: h->msg_len = edgy(); break;
		case 5: h->sreq = edgy(); break;
		case 6: h->rreq = edgy(); break;
		default: h->offset = edgy(); break;
		}
	}
}

/* ---- udp: the victim and the honest stream ------------------------------ */

#define UCAPS (FI_MSG | FI_TAGGED)
#define HTAG 0x600d000000000000ull /* the honest peer's tags */
#define ATAG 0xa77acc0000000000ull /* the attacker's whole messages */
#define AMAX 6000                  /* ... at most this long */
#define NATK 4                     /* receives for them */

struct fzu {
	struct tctx t;
	struct ntx_addr victim, honest;
	struct fid_ep *hep;
	fi_addr_t vaddr;
	uint8_t ain[NATK][AMAX + 64]; /* the attacker's messages land here */
	uint64_t hin, hval;           /* the honest message of this round */
	unsigned rounds, cases[3], atk_got;
};

static uint8_t atk_byte(uint32_t seed, uint32_t i)
{
	return (uint8_t)((seed * 2654435761u + i * 40503u) >> 13);
}

/* What the attacker's whole messages hold: their length and a pattern of
 * a seed, so that any message rel glued or cut wrongly shows. */
static void atk_payload(uint8_t *p, uint32_t len)
{
	uint32_t seed = (uint32_t)rnd();

	memcpy(p, &len, 4);
	memcpy(p + 4, &seed, 4);
	for (uint32_t i = 8; i < len; i++)
		p[i] = atk_byte(seed, i);
}

static bool atk_payload_ok(const uint8_t *p, size_t len)
{
	uint32_t l, seed;

	if (len < 8)
		return false;
	memcpy(&l, p, 4);
	memcpy(&seed, p + 4, 4);
	if (l != len)
		return false;
	for (uint32_t i = 8; i < len; i++)
		if (p[i] != atk_byte(seed, i))
			return false;
	return true;
}

static void post_atk(struct fzu *f, int i)
{
	cr_assert_eq(fi_trecv(f->t.ep, f->ain[i], sizeof(f->ain[i]), NULL,
			      FI_ADDR_UNSPEC, ATAG, 0, f->ain[i]), 0);
}

static int atk_slot(struct fzu *f, void *ctx)
{
	for (int i = 0; i < NATK; i++)
		if (ctx == f->ain[i])
			return i;
	return -1;
}

/* One honest message, after whatever the last case sent: the victim
 * reads its socket in order, so it has read the case's datagrams when
 * this one completes. Completions of the attacker's whole messages are
 * checked meanwhile: a message rel put together must be one it was
 * given, whole. */
static void honest_round(struct fzu *f)
{
	uint64_t tag = HTAG + f->rounds, out = rnd(), end = mono_ns() +
							 UDP_MS * 1000000ull;
	int sent = 0, got = 0;

	f->hin = 0;
	cr_assert_eq(fi_trecv(f->t.ep, &f->hin, 8, NULL, FI_ADDR_UNSPEC, tag,
			      0, &f->hin), 0);
	cr_assert_eq(fi_tsend(f->hep, &out, 8, NULL, f->vaddr, tag, &out), 0);
	while (!sent || !got) {
		struct fi_cq_tagged_entry e;
		struct fi_cq_err_entry err = { 0 };
		ssize_t n = fi_cq_read(f->t.cq, &e, 1);
		int k;

		if (n == -FI_EAVAIL) {
			cr_assert_eq(fi_cq_readerr(f->t.cq, &err, 0), 1);
			k = atk_slot(f, err.op_context);
			cr_assert_geq(k, 0, "round %u: an honest operation "
				      "failed: %s", f->rounds,
				      fi_strerror(err.err));
			post_atk(f, k);
			continue;
		}
		cr_assert_lt(mono_ns(), end, "round %u: the honest message "
			     "never came (sent %d)", f->rounds, sent);
		if (n != 1)
			continue;
		if (e.op_context == &out) {
			sent = 1;
		} else if (e.op_context == &f->hin) {
			cr_assert_eq(e.tag, tag);
			cr_assert_eq(f->hin, out, "round %u: the honest "
				     "message was changed", f->rounds);
			got = 1;
		} else {
			k = atk_slot(f, e.op_context);
			cr_assert_geq(k, 0, "a completion of nothing posted");
			cr_assert(atk_payload_ok(f->ain[k], e.len),
				  "the victim delivered a message of %zu bytes "
				  "the attacker never sent whole", e.len);
			f->atk_got++;
			post_atk(f, k);
		}
	}
	f->rounds++;
}

/* ---- udp: the attacker's cases ------------------------------------------ */

/* (a) Control datagrams: an INIT, an ECHO of a real cookie or a COOKIE,
 * with bytes flipped, the type changed, cut or grown, or all random. */
static void case_ctl(struct fzu *f)
{
	uint8_t ck[NTX_DG_CTL_LONG] = { 0 }, dg[200];
	struct ntx_addr name;
	struct atk a;
	uint32_t tag = (uint32_t)rnd() | 1;
	bool have_ck = false;

	atk_open(&a, &f->victim);
	atk_name(&a, &f->victim, &name);
	if (rnd() % 2) { /* a real cookie to mutate */
		struct pollfd p = { .fd = a.fd, .events = POLLIN };

		ctl_long(dg, NTX_DG_CTL_INIT, tag, NULL, &name);
		cr_assert_eq(sendto(a.fd, dg, NTX_DG_CTL_LONG, 0,
				    (struct sockaddr *)&a.to, sizeof(a.to)),
			     NTX_DG_CTL_LONG);
		have_ck = poll(&p, 1, 1000) == 1 &&
			  recv(a.fd, ck, sizeof(ck), 0) == NTX_DG_CTL_SHORT;
	}
	for (unsigned n = 1 + rnd() % 8; n; n--) {
		size_t len = NTX_DG_CTL_LONG;

		switch (rnd() % 3) {
		case 0:
			ctl_long(dg, NTX_DG_CTL_INIT, tag, NULL, &name);
			break;
		case 1:
			ctl_long(dg, NTX_DG_CTL_ECHO, tag, have_ck ? ck : NULL,
				 &name);
			break;
		default:
			memcpy(dg, ck, NTX_DG_CTL_SHORT);
			dg[0] = NTX_DG_CTL_COOKIE;
			len = NTX_DG_CTL_SHORT;
			break;
		}
		for (unsigned k = rnd() % 4; k; k--)
			dg[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
		if (rnd() % 4 == 0)
			dg[0] = (uint8_t)(0x80 | rnd());
		if (rnd() % 4 == 0)
			len = rnd() % 2 ? rnd() % len : len + rnd() % 100;
		if (rnd() % 8 == 0) {
			len = rnd() % sizeof(dg);
			fill_random(dg, len);
			dg[0] |= 0x80;
		}
		if (len > NTX_DG_CTL_LONG)
			fill_random(dg + NTX_DG_CTL_LONG,
				    len - NTX_DG_CTL_LONG);
		sendto(a.fd, dg, len, 0, (struct sockaddr *)&a.to,
		       sizeof(a.to));
	}
	atk_close(&a);
}

/* A rel header field bent: flipped bits, edges, off by a little. */
static uint32_t bend32(uint32_t v)
{
	switch (rnd() % 4) {
	case 0: return v ^ (1u << (rnd() % 32));
	case 1: return v + (uint32_t)(rnd() % 5) - 2;
	case 2: return (uint32_t)edgy();
	default: return (uint32_t)rnd();
	}
}

/* The mutator of case (b): most datagrams rel emits leave with one to
 * three header fields bent, cut, or grown, some after the real one. */
static void bend_rel(struct atk *a, uint8_t *dg, size_t *len, size_t max)
{
	struct ntx_rel_hdr h;

	if (rnd() % 4 == 0)
		return; /* a real one: the session advances */
	if (rnd() % 3 == 0) /* the real one first, the bent one after it */
		sendto(a->fd, dg, *len, 0, (struct sockaddr *)&a->to,
		       sizeof(a->to));
	ntx_rel_hdr_unpack(dg, &h);
	for (unsigned n = 1 + rnd() % 3; n; n--) {
		switch (rnd() % 11) {
		case 0: h.flags = (uint8_t)(rnd() % 2 ? rnd() : h.flags ^
					    (1u << (rnd() % 8))); break;
		case 1: h.plen = (uint16_t)bend32(h.plen); break;
		case 2: h.src_epoch = bend32(h.src_epoch); break;
		case 3: h.dst_epoch = bend32(h.dst_epoch); break;
		case 4: h.seq = bend32(h.seq); break;
		case 5: h.ack = bend32(h.ack); break;
		case 6: h.msg_id = bend32(h.msg_id); break;
		case 7: h.msg_len = bend32(h.msg_len); break;
		case 8: h.frag = (uint16_t)bend32(h.frag); break;
		case 9: h.nfrag = (uint16_t)bend32(h.nfrag); break;
		default: h.version = (uint8_t)rnd(); break;
		}
	}
	ntx_rel_hdr_pack(&h, dg);
	if (rnd() % 6 == 0) {
		*len = rnd() % *len;
	} else if (rnd() % 6 == 0) {
		size_t grown = *len + 1 + rnd() % (max - *len);

		fill_random(dg + *len, grown - *len);
		*len = grown;
		if (rnd() % 2) { /* plen that agrees with the growth */
			h.plen = (uint16_t)(grown - NTX_REL_HDR_LEN);
			ntx_rel_hdr_pack(&h, dg);
		}
	}
}

/* A proved and named attacker: handshake, then an honest HELLO. */
static void atk_named(struct fzu *f, struct atk *a)
{
	struct ntx_addr name;

	atk_open(a, &f->victim);
	atk_name(a, &f->victim, &name);
	atk_handshake(a, &name);
	atk_hello(a, &name, sizeof(name));
	atk_flush(a);
}

/* (b) Whole tagged messages of the attacker's own session, one to four
 * fragments each, in datagrams bent by bend_rel. */
static void case_rel(struct fzu *f)
{
	static uint8_t pay[AMAX];
	struct atk a;

	atk_named(f, &a);
	a.mutate = bend_rel;
	for (unsigned n = 1 + rnd() % 4; n; n--) {
		uint32_t len = 8 + (uint32_t)(rnd() % (AMAX - 8));
		struct ntx_wire_hdr h = { .op = NTX_OP_EAGER,
					  .flags = NTX_PF_TAGGED, .tag = ATAG,
					  .msg_len = len };
		struct iovec iov[2] = { { &h, sizeof(h) }, { pay, len } };

		atk_payload(pay, len);
		(void)ntx_rel_send(&a.rel, a.peer, NTX_REL_BULK, iov, 2, NULL);
	}
	atk_flush(&a);
	atk_close(&a);
}

/* (c) Engine packets with mutated headers and random payloads, in
 * valid rel messages of a named attacker. */
static void case_engine(struct fzu *f)
{
	static uint8_t pay[65536];
	struct atk a;

	atk_named(f, &a);
	for (unsigned n = 1 + rnd() % 4; n; n--) {
		struct ntx_wire_hdr h;
		size_t len = rnd() % 4 ? rnd() % 3000
				       : (size_t)(edgy() % sizeof(pay));
		struct iovec iov[2] = { { &h, sizeof(h) }, { pay, len } };

		bend_wire_hdr(&h);
		fill_random(pay, len);
		if (rnd() % 8 == 0) /* a header cut short */
			iov[0].iov_len = rnd() % sizeof(h);
		(void)ntx_rel_send(&a.rel, a.peer, NTX_REL_BULK, iov,
				   rnd() % 8 ? 2 : 1, NULL);
	}
	atk_flush(&a);
	atk_close(&a);
}

Test(fuzz_net, udp_control_rel_and_engine_datagrams, .timeout = 240)
{
	static struct fzu f;
	uint64_t end = fuzz_start("udp");

	memset(&f, 0, sizeof(f));
	udp_pair(&f.t, &f.victim, &f.honest, &f.hep, &f.vaddr);
	for (int i = 0; i < NATK; i++)
		post_atk(&f, i);
	honest_round(&f); /* the honest session exists first */
	while (t_ms() < end) {
		unsigned k = (unsigned)(rnd() % 3);

		if (k == 0)
			case_ctl(&f);
		else if (k == 1)
			case_rel(&f);
		else
			case_engine(&f);
		f.cases[k]++;
		honest_round(&f);
	}
	for (int i = 0; i < 4; i++)
		honest_round(&f);
	cr_log_info("fuzz udp: %u control, %u rel, %u engine cases; %u "
		    "honest messages, %u whole attacker messages delivered\n",
		    f.cases[0], f.cases[1], f.cases[2], f.rounds, f.atk_got);
	printf("fuzz udp: %u control, %u rel, %u engine cases; %u honest "
	       "messages, %u whole attacker messages delivered\n", f.cases[0],
	       f.cases[1], f.cases[2], f.rounds, f.atk_got);
	cr_assert_eq(fi_close(&f.hep->fid), 0);
	t_close(&f.t);
}
