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
#include <signal.h>
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

/* ---- MSG endpoints: connection management packets ---------------------- */

#define CM_EVBUF (sizeof(struct fi_eq_cm_entry) + 2 * NTX_CM_DATA_MAX)

/* Connection data sizes where checks go wrong: none, one byte, around
 * the limit, far beyond it. */
static uint32_t cm_data_len(void)
{
	static const uint32_t v[] = { 0, 1, NTX_CM_DATA_MAX - 1,
				      NTX_CM_DATA_MAX, NTX_CM_DATA_MAX + 1,
				      4096, 65536 };

	return rnd() % 2 ? v[rnd() % (sizeof(v) / sizeof(v[0]))]
			 : (uint32_t)(rnd() % (2 * NTX_CM_DATA_MAX));
}

/* The attacker: reads the names of the passive endpoint and both ends
 * of the live connection, then until the time is up connects to one of
 * them with a proved name of its own and sends one to four NTX_OP_CM
 * packets (any stage, a guessed id, connection data of any size, the
 * header's length agreeing or not, some flags), now and then another
 * packet in their place; then says 'k'. */
static int cm_attacker(int sock)
{
	static uint8_t data[65536];
	struct ntx_addr v[3];
	struct linger reset = { .l_onoff = 1, .l_linger = 0 };
	uint64_t seed, end;
	unsigned cases = 0, reqs = 0;
	int held[16];
	char done = 'k';

	memset(held, 0xff, sizeof(held));

	CHK(t_sock_read(sock, &seed, sizeof(seed)) == 0);
	CHK(t_sock_read(sock, &end, sizeof(end)) == 0);
	CHK(t_sock_read(sock, v, sizeof(v)) == 0);
	g_rng = seed;
	signal(SIGPIPE, SIG_IGN); /* a frame to a connection the victim closed */
	while (t_ms() < end) {
		unsigned target = rnd() % 2 ? 0 : 1 + rnd() % 2;
		int fd = adv_connect(&v[target]);

		CHK(fd >= 0);
		for (unsigned n = 1 + rnd() % 4, first = 1; n; n--, first = 0) {
			uint32_t len = cm_data_len();
			struct ntx_wire_hdr h = {
				.op = NTX_OP_CM,
				.status = (int32_t)(rnd() % 4 ? 1 + rnd() % 5
							      : edgy()),
				.sreq = rnd() % 2 ? rnd() : rnd() % 4,
				.msg_len = rnd() % 8 ? len : edgy(),
			};

			if (rnd() % 8 == 0)
				h.flags = (uint8_t)rnd();
			if (rnd() % 8 == 0)
				bend_wire_hdr(&h);
			fill_random(data, len);
			reqs += target == 0 && first && h.op == NTX_OP_CM &&
				h.status == NTX_CM_REQ && !h.flags &&
				h.msg_len == len && len <= NTX_CM_DATA_MAX;
			if (adv_frame(fd, NTX_TCP_ENTRY, &h, data, len))
				break; /* the victim closed it */
		}
		/* reset, not closed: no TIME_WAIT (test_fuzz.c); one that
		 * asked for a connection is held a while, so the victim
		 * answers it */
		CHK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset,
			       sizeof(reset)) == 0);
		if (target == 0) {
			if (held[cases % 16] >= 0)
				close(held[cases % 16]);
			held[cases % 16] = fd;
		} else {
			close(fd);
		}
		cases++;
	}
	for (int i = 0; i < 16; i++)
		if (held[i] >= 0)
			close(held[i]);
	fprintf(stderr, "fuzz cm: %u attacker connections, %u of them "
		"opened by a well-formed request\n", cases, reqs);
	CHK(write(sock, &done, 1) == 1);
	return 0;
}

/* The EQ: a connection request may come (a REQ is what asks for one),
 * with at most NTX_CM_DATA_MAX bytes of data, and is rejected; nothing
 * else may show. The requests seen. */
static unsigned cm_reject_requests(struct cm *c)
{
	uint8_t buf[CM_EVBUF];
	struct fi_eq_cm_entry *e = (void *)buf;
	unsigned seen = 0;
	uint32_t ev;
	ssize_t n;

	while ((n = fi_eq_read(c->eq, &ev, buf, sizeof(buf), 0)) != -FI_EAGAIN) {
		cr_assert_geq(n, (ssize_t)sizeof(*e), "an EQ error while "
			      "attacked: %zd", n);
		cr_assert_eq(ev, FI_CONNREQ, "an event %u while attacked", ev);
		cr_assert_leq((size_t)n - sizeof(*e), NTX_CM_DATA_MAX,
			      "a request with %zu bytes of data",
			      (size_t)n - sizeof(*e));
		cr_assert_eq(e->fid, &c->pep->fid);
		fi_reject(c->pep, e->info->handle, NULL, 0);
		fi_freeinfo(e->info);
		seen++;
	}
	return seen;
}

/* One message each way over the live connection. */
static void cm_pingpong(struct cm *c, struct cm_ep *a, struct cm_ep *b,
			unsigned i)
{
	uint64_t out = 0xc0ffee00ull + i, in = 0, back = 0;
	struct fi_cq_data_entry ent;

	cr_assert_eq(fi_recv(b->ep, &in, 8, NULL, 0, NULL), 0);
	cr_assert_eq(fi_recv(a->ep, &back, 8, NULL, 0, NULL), 0);
	cr_assert_eq(fi_send(a->ep, &out, 8, NULL, 0, NULL), 0);
	cr_assert_eq(cm_comp(a, &ent), 1, "ping %u not sent", i);
	cr_assert_eq(cm_comp(b, &ent), 1, "ping %u not received", i);
	cr_assert_eq(in, out);
	cr_assert_eq(fi_send(b->ep, &in, 8, NULL, 0, NULL), 0);
	cr_assert_eq(cm_comp(b, &ent), 1, "pong %u not sent", i);
	cr_assert_eq(cm_comp(a, &ent), 1, "pong %u not received", i);
	cr_assert_eq(back, out);
	(void)c;
}

/* A client of the passive endpoint: fi_connect, the request (others of
 * the attacker's rejected meanwhile), fi_accept by a new server
 * endpoint, connected both. */
static void cm_connect_honest(struct cm *c, struct cm_ep *cli,
			      struct cm_ep *srv)
{
	uint8_t buf[CM_EVBUF];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_info *h = cm_hints("tcp"), *fi;
	char name[T_NAMELEN], hello[] = "hi";
	size_t len = sizeof(name);
	int seen = 0;
	uint32_t ev;

	h->dest_addr = malloc(T_NAMELEN);
	memcpy(h->dest_addr, c->pname, T_NAMELEN);
	h->dest_addrlen = T_NAMELEN;
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	fi_freeinfo(h);
	cm_open_ep(c, cli, fi);
	cr_assert_eq(fi_getname(&cli->ep->fid, name, &len), 0);
	cr_assert_eq(fi_connect(cli->ep, cli->fi->dest_addr, hello,
				sizeof(hello)), 0);
	for (;;) {
		cr_assert_geq(cm_event(c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e), "no request came");
		cr_assert_eq(ev, FI_CONNREQ);
		if (e->info->dest_addrlen == T_NAMELEN &&
		    !memcmp(e->info->dest_addr, name, T_NAMELEN))
			break;
		fi_reject(c->pep, e->info->handle, NULL, 0);
		fi_freeinfo(e->info);
	}
	cr_assert_str_eq((char *)e->data, hello);
	cm_open_ep(c, srv, e->info);
	cr_assert_eq(fi_accept(srv->ep, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(cm_event(c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e));
		cr_assert_eq(ev, FI_CONNECTED);
		seen |= e->fid == &cli->ep->fid ? 1 : 2;
	}
	cr_assert_eq(seen, 3);
}

/* The victim: a passive endpoint and a live connection on the tcp
 * domain, both ends in this process; the attacker (a child) fuzzes all
 * three while the connection carries a ping-pong. Then a new client
 * connects and is accepted, and both connections carry data and end
 * with an honest shutdown. */
Test(fuzz_net, cm_packets_at_a_passive_and_a_connected_endpoint,
     .timeout = 240)
{
	uint64_t end = fuzz_start("cm"), seed;
	struct pollfd p = { .events = POLLIN };
	struct ntx_addr names[3];
	struct cm_ep cli2 = { 0 }, srv2 = { 0 };
	unsigned pings = 0, reqs = 0;
	struct cm c;
	size_t len;
	char done = 0;
	int sock;
	pid_t pid;

	cm_listen(&c, "tcp");
	cm_connect_honest(&c, &c.cli, &c.srv);
	memcpy(&names[0], c.pname, sizeof(names[0]));
	len = sizeof(names[1]);
	cr_assert_eq(fi_getname(&c.cli.ep->fid, &names[1], &len), 0);
	len = sizeof(names[2]);
	cr_assert_eq(fi_getname(&c.srv.ep->fid, &names[2], &len), 0);
	seed = rnd();
	pid = t_fork(&sock, cm_attacker);
	cr_assert_eq(t_sock_write(sock, &seed, sizeof(seed)), 0);
	cr_assert_eq(t_sock_write(sock, &end, sizeof(end)), 0);
	cr_assert_eq(t_sock_write(sock, names, sizeof(names)), 0);
	p.fd = sock;
	while (poll(&p, 1, 0) == 0) {
		reqs += cm_reject_requests(&c);
		/* progress for the attacker's connections to both ends */
		fi_cq_read(c.cli.cq, NULL, 0);
		fi_cq_read(c.srv.cq, NULL, 0);
		if (pings++ % 64 == 0)
			cm_pingpong(&c, &c.cli, &c.srv, pings);
		cr_assert_lt(t_ms(), end + 60000, "the attacker hangs");
	}
	cr_assert_eq(read(sock, &done, 1), 1);
	cr_assert_eq(done, 'k');
	cr_assert_eq(t_join(pid), 0, "the attacker failed");
	close(sock);
	reqs += cm_reject_requests(&c);

	cm_connect_honest(&c, &cli2, &srv2);
	cm_pingpong(&c, &cli2, &srv2, 1);
	cm_pingpong(&c, &c.cli, &c.srv, 2);
	cr_assert_eq(fi_shutdown(cli2.ep, 0), 0);
	cr_assert_eq(fi_shutdown(c.cli.ep, 0), 0);
	for (int i = 0; i < 4; i++) {
		uint8_t buf[CM_EVBUF];
		uint32_t ev;

		cr_assert_geq(cm_event(&c, &ev, buf, sizeof(buf)), 0);
		cr_assert_eq(ev, FI_SHUTDOWN);
	}
	cr_log_info("fuzz cm: %u victim loops, %u requests rejected\n", pings,
		    reqs);
	printf("fuzz cm: %u victim loops, %u requests rejected\n", pings,
	       reqs);
	cm_close_ep(&cli2);
	cm_close_ep(&srv2);
	cm_close(&c);
}
