/* Issue #13 item 4: what one peer can make an endpoint hold is bounded
 * (unexpected messages here; remote CQ data at the end).
 * A sender that floods a receiver with messages nobody posted receives
 * for fails its own connection at FI_NTX_PEER_UNEXP_MAX (it reconnects
 * by itself and starts over), the receiver's memory stays within a few
 * times the limit however much was sent, and the pair goes on: a message
 * sent after the flood is received. Issue #36 finding 4: peers that each
 * stay within that limit but together pass the endpoint's budget,
 * FI_NTX_EP_UNEXP_MAX, fail their own connections, and a peer within its
 * share goes on. */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_adv.h"

#define CAPS (FI_MSG | FI_TAGGED)
#define MSG 8000
#define FLOOD 2000 /* 16 MB of unexpected messages */
#define LIMIT (1u << 20)
#define TAG_FLOOD 1
#define TAG_LAST 2

/* Reads completions (errors too) until n arrived or ms passed. */
static int drain_n(struct tctx *t, size_t *done, size_t n, int ms)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	int r;

	do {
		memset(&err, 0, sizeof(err));
		r = t_wait(t, &e, NULL, &err, ms > 0 ? ms : 0);
		if (r == 1 || r == -FI_EAVAIL)
			++*done;
	} while (*done < n && (r == 1 || r == -FI_EAVAIL));
	return *done == n ? 0 : -1;
}

/* Progresses up to a second for the receiver's word that TAG_LAST
 * arrived. */
static bool got_last(struct tctx *t, int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	char c;

	for (int i = 0; i < 1000; i++) {
		fi_cq_read(t->cq, NULL, 0);
		if (poll(&p, 1, 1) == 1)
			return read(sock, &c, 1) == 1 && c == 'g';
	}
	return false;
}

static int child_flooder(int sock)
{
	static char buf[MSG];
	struct tctx t;
	fi_addr_t peer;
	size_t posted = 0, done = 0;
	ssize_t r;

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	t_fill(buf, MSG, 5);
	for (int i = 0; i < FLOOD; i++) {
		while ((r = fi_tsend(t.ep, buf, MSG, NULL, peer, TAG_FLOOD,
				     NULL)) == -FI_EAGAIN)
			drain_n(&t, &done, posted, 0);
		if (!r)
			posted++;
	}
	CHK(drain_n(&t, &done, posted, 20000) == 0);
	CHK(t_sync(sock) == 0); /* the flood is over */
	CHK(t_sync(sock) == 0); /* the receiver asks for TAG_LAST */
	/* after the flood: a message the receiver asks for. One sent into
	 * a connection the receiver is closing is lost (an eager send
	 * completes once the socket took it), so it goes again until the
	 * receiver has one */
	for (int tries = 0; !got_last(&t, sock); tries++) {
		CHK(tries < 20);
		while ((r = fi_tsend(t.ep, buf, MSG, NULL, peer, TAG_LAST,
				     buf)) == -FI_EAGAIN)
			fi_cq_read(t.cq, NULL, 0);
		CHK(r == 0);
		r = t_wait(&t, NULL, NULL, NULL, 20000);
		CHK(r == 1 || r == -FI_EAVAIL);
	}
	t_close(&t);
	return 0;
}

static void flood(void)
{
	static char got[MSG];
	struct fi_cq_tagged_entry e;
	struct tctx t;
	fi_addr_t peer;
	long before, after;
	int sock;
	pid_t pid;

	cr_assert_eq(setenv("FI_NTX_PEER_UNEXP_MAX", "1048576", 1), 0);
	pid = t_fork(&sock, child_flooder);
	cr_assert_gt(pid, 0);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	before = adv_rss_kib();
	/* progress (no receive posted) until the flooder is done */
	cr_assert_eq(t_sync_progress(&t, sock, 60000), 0);
	after = adv_rss_kib();
	cr_assert_gt(before, 0);
	cr_log_info("limits: %d x %d bytes unexpected with a %u-byte limit: "
		    "RSS %ld -> %ld KiB\n", FLOOD, MSG, LIMIT, before, after);
	cr_assert_lt(after - before, 8 * 1024,
		     "RSS grew by %ld KiB for %d KiB of unexpected messages",
		     after - before, FLOOD * MSG / 1024);
	cr_assert_eq(fi_trecv(t.ep, got, MSG, NULL, FI_ADDR_UNSPEC, TAG_LAST,
			      0, got), 0);
	cr_assert_eq(t_sync(sock), 0);
	cr_assert_eq(t_wait(&t, &e, NULL, NULL, 20000), 1);
	cr_assert_eq(e.op_context, got);
	cr_assert_eq(e.len, MSG);
	cr_assert_eq(t_check(got, MSG, 5), 0);
	cr_assert_eq(write(sock, "g", 1), 1);
	cr_assert_eq(t_join(pid), 0, "flooder failed");
	t_close(&t);
}

Test(limits, unexpected_flood_fails_only_its_connection, .timeout = 120)
{
	flood();
}

Test(limits, unexpected_flood_fails_only_its_connection_tcp_path,
     .timeout = 120)
{
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", "tcp", 1);
	flood();
}

/* ---- many peers against one budget ---------------------------------------
 * NFLOOD peers flood 64 KiB tagged messages that match nothing over the
 * tcp path, each within FI_NTX_PEER_UNEXP_MAX, together far over
 * FI_NTX_EP_UNEXP_MAX; an honest peer sends messages that posted
 * receives take, and a few that wait unexpected, while they do. Each
 * peer posts a receive directed at the victim that nothing matches: its
 * connection failing fails that receive, the one sign of it a sender is
 * sure to get. */
#define NFLOOD 4
#define BIG 65536
#define BIG_N 512             /* 32 MiB a flooder */
#define BUDGET "8388608"      /* FI_NTX_EP_UNEXP_MAX of the test */
#define BUDGET_KIB 8192
#define PEER_MAX "67108864"   /* a flooder's 32 MiB is within it */
#define HONEST_N 8            /* taken by posted receives */
#define LATE_N 4              /* wait unexpected until the flood is over */
#define TAG_NEVER 3
#define TAG_HONEST 4
#define TAG_LATE 5

/* The sender's side: reads its CQ, counting the sends that completed
 * and noting the failure of the receive directed at the victim. */
static void reap_sends(struct tctx *t, void *never, size_t *done,
		       bool *failed)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	ssize_t r;

	while ((r = fi_cq_read(t->cq, &e, 1)) == 1 || r == -FI_EAVAIL) {
		if (r == 1) {
			++*done;
			continue;
		}
		memset(&err, 0, sizeof(err));
		if (fi_cq_readerr(t->cq, &err, 0) != 1)
			return;
		if (err.op_context == never)
			*failed = true;
		else
			++*done;
	}
}

/* One byte from sock, progressing meanwhile (30 s at most): what the
 * peer sent may still wait in its own buffers. 0 or -1. */
static int read_progress(struct tctx *t, int sock, char *c)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };

	for (uint64_t end = t_ms() + 30000; t_ms() < end;) {
		fi_cq_read(t->cq, NULL, 0);
		if (poll(&p, 1, 0) == 1)
			return read(sock, c, 1) == 1 ? 0 : -1;
	}
	return -1;
}

/* Opens the peer's endpoint and posts the receive that only a failure of
 * its connection to the victim completes. */
static int peer_open(struct tctx *t, int sock, fi_addr_t *victim,
		     uint64_t *never)
{
	if (t_open(t, CAPS | FI_DIRECTED_RECV) ||
	    t_xchg_name(t, sock, victim))
		return -1;
	return fi_trecv(t->ep, never, sizeof(*never), NULL, *victim,
			TAG_NEVER, 0, never) ? -1 : 0;
}

/* Floods, then says whether its connection failed: 'f' or 'k'. */
static int child_budget_flooder(int sock)
{
	static char buf[BIG];
	static uint64_t never;
	struct tctx t;
	fi_addr_t victim;
	size_t posted = 0, done = 0;
	bool failed = false;
	uint64_t end;
	ssize_t r;

	CHK(peer_open(&t, sock, &victim, &never) == 0);
	t_fill(buf, BIG, 9);
	for (int i = 0; i < BIG_N; i++) {
		while ((r = fi_tsend(t.ep, buf, BIG, NULL, victim, TAG_FLOOD,
				     NULL)) == -FI_EAGAIN)
			reap_sends(&t, &never, &done, &failed);
		if (!r)
			posted++;
	}
	for (end = t_ms() + 20000; (done < posted || !failed) && t_ms() < end;)
		reap_sends(&t, &never, &done, &failed);
	CHK(done == posted);
	CHK(write(sock, failed ? "f" : "k", 1) == 1);
	CHK(t_sync(sock) == 0); /* the victim is done */
	t_close(&t);
	return 0;
}

/* Sends HONEST_N and LATE_N messages, spaced out over the flood, then
 * says whether its connection is still up: 'u', or 'f'. */
static int child_budget_honest(int sock)
{
	static char buf[MSG];
	static uint64_t never;
	struct tctx t;
	fi_addr_t victim;
	size_t done = 0;
	bool failed = false;

	CHK(peer_open(&t, sock, &victim, &never) == 0);
	CHK(t_sync(sock) == 0); /* the victim's receives are posted */
	for (int i = 0; i < HONEST_N + LATE_N; i++) {
		usleep(20000);
		t_fill(buf, MSG, 100 + i);
		CHK(T_RETRY(&t, fi_tsend(t.ep, buf, MSG, NULL, victim,
					 i < HONEST_N ? TAG_HONEST : TAG_LATE,
					 NULL)) == 0);
		for (uint64_t end = t_ms() + 20000;
		     done < (size_t)i + 1 && t_ms() < end;)
			reap_sends(&t, &never, &done, &failed);
		CHK(done == (size_t)i + 1);
	}
	/* the victim has them all */
	CHK(t_sync_progress(&t, sock, 30000) == 0);
	reap_sends(&t, &never, &done, &failed);
	CHK(write(sock, failed ? "f" : "u", 1) == 1);
	t_close(&t);
	return 0;
}

/* The victim's side: the flooders' sockets, each one's word once it
 * came ('f' or 'k', 0 before), and how many have not said it yet. */
struct victim {
	struct tctx t;
	int sock[NFLOOD];
	char verdict[NFLOOD];
	int left;
};

/* Reads the words of the flooders that have said how they ended. */
static void hear_flooders(struct victim *v)
{
	struct pollfd p[NFLOOD];

	for (int f = 0; f < NFLOOD; f++)
		p[f] = (struct pollfd){ .fd = v->verdict[f] ? -1 : v->sock[f],
					.events = POLLIN };
	if (poll(p, NFLOOD, 0) <= 0)
		return;
	for (int f = 0; f < NFLOOD; f++)
		if (p[f].revents) {
			cr_assert_eq(read(v->sock[f], &v->verdict[f], 1), 1);
			v->left--;
		}
}

/* Progress until the n receives posted into got took their messages
 * (message i carries seed 100 + seed0 + i) and every flooder said how it
 * ended; 60 s at most. */
static void recv_honest(struct victim *v, char (*got)[MSG], int n,
			int seed0)
{
	struct fi_cq_tagged_entry e;
	int left = n;

	for (uint64_t end = t_ms() + 60000;
	     (left || v->left) && t_ms() < end;) {
		ssize_t r = fi_cq_read(v->t.cq, &e, 1);

		cr_assert(r == 1 || r == -FI_EAGAIN, "victim's CQ: %zd", r);
		if (r == 1) {
			int i = (int)((char (*)[MSG])e.op_context - got);

			cr_assert(i >= 0 && i < n);
			cr_assert_eq(e.len, MSG);
			cr_assert_eq(t_check(got[i], MSG, 100 + seed0 + i), 0,
				     "honest message %d", seed0 + i);
			left--;
		}
		hear_flooders(v);
	}
	cr_assert_eq(left, 0, "%d of the honest peer's messages never came",
		     left);
}

static void post_honest(struct victim *v, char (*got)[MSG], int n,
			uint64_t tag)
{
	for (int i = 0; i < n; i++)
		cr_assert_eq(fi_trecv(v->t.ep, got[i], MSG, NULL,
				      FI_ADDR_UNSPEC, tag, 0, got[i]), 0);
}

Test(limits, many_peers_within_their_limit_fail_past_the_endpoint_budget,
     .timeout = 180)
{
	static char got[HONEST_N + LATE_N][MSG];
	struct victim v = { .left = NFLOOD };
	pid_t pid[NFLOOD], hpid;
	int hsock;
	fi_addr_t peer;
	long before, peak;
	char up = 0;

	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", "tcp", 1);
	cr_assert_eq(setenv("FI_NTX_PEER_UNEXP_MAX", PEER_MAX, 1), 0);
	cr_assert_eq(setenv("FI_NTX_EP_UNEXP_MAX", BUDGET, 1), 0);
	for (int f = 0; f < NFLOOD; f++) {
		pid[f] = t_fork(&v.sock[f], child_budget_flooder);
		cr_assert_gt(pid[f], 0);
	}
	hpid = t_fork(&hsock, child_budget_honest);
	cr_assert_gt(hpid, 0);
	cr_assert_eq(t_open(&v.t, CAPS), 0);
	before = adv_rss_kib();
	for (int f = 0; f < NFLOOD; f++)
		cr_assert_eq(t_xchg_name(&v.t, v.sock[f], &peer), 0);
	cr_assert_eq(t_xchg_name(&v.t, hsock, &peer), 0);
	post_honest(&v, got, HONEST_N, TAG_HONEST);
	cr_assert_eq(t_sync(hsock), 0); /* the honest peer may send */
	recv_honest(&v, got, HONEST_N, 0);
	peak = adv_hwm_kib();
	cr_assert_eq(v.left, 0, "a flooder never said how it ended");
	post_honest(&v, got + HONEST_N, LATE_N, TAG_LATE);
	recv_honest(&v, got + HONEST_N, LATE_N, HONEST_N);
	cr_assert_eq(t_sync(hsock), 0);
	cr_assert_eq(read(hsock, &up, 1), 1);
	cr_log_info("limits: %d peers x %d x %d bytes unexpected, budget %s: "
		    "victim RSS %ld KiB, peak %ld KiB\n", NFLOOD, BIG_N, BIG,
		    BUDGET, before, peak);
	for (int f = 0; f < NFLOOD; f++)
		cr_assert_eq(v.verdict[f], 'f', "flooder %d: its connection "
			     "never failed ('%c')", f, v.verdict[f]);
	cr_assert_eq(up, 'u', "the honest peer's connection failed");
	cr_assert_lt(peak - before, 5 * BUDGET_KIB,
		     "the victim grew by %ld KiB for a budget of %d KiB",
		     peak - before, BUDGET_KIB);
	for (int f = 0; f < NFLOOD; f++) {
		cr_assert_eq(t_sync(v.sock[f]), 0);
		cr_assert_eq(t_join(pid[f]), 0, "flooder %d failed", f);
	}
	cr_assert_eq(t_join(hpid), 0, "the honest peer failed");
	t_close(&v.t);
}

/* A peer that holds most of the budget on its own, within its share
 * while it is the only one, and a newcomer whose messages pass the
 * budget while the newcomer is within its share: the largest holder
 * fails its connection (doomed, failed from the victim's progress), the
 * newcomer's messages wait and are received whole. */
#define HOG_N 120   /* 7.5 MiB of payload: within an 8 MiB budget alone */
#define NEW_N 16    /* 1 MiB: within half the budget, over what is left */
#define TAG_MARK 6

struct holder_cmd {
	int32_t n;    /* messages of BIG bytes, seeds 200 + i */
	uint32_t tag; /* theirs; then an 8-byte TAG_MARK */
};

/* Sends what the victim asks for, one at a time, then the mark; then,
 * told the state its connection should reach ('f' failed, 'u' up),
 * progresses until it does (20 s at most) and says which it is. */
static int child_holder(int sock)
{
	static char buf[BIG];
	static uint64_t never;
	struct holder_cmd c;
	struct tctx t;
	fi_addr_t victim;
	size_t done = 0;
	bool failed = false;
	char want;

	CHK(peer_open(&t, sock, &victim, &never) == 0);
	CHK(t_sock_read(sock, &c, sizeof(c)) == 0);
	for (int i = 0; i <= c.n; i++) {
		t_fill(buf, BIG, 200 + i);
		CHK(T_RETRY(&t, fi_tsend(t.ep, buf, i < c.n ? BIG : 8, NULL,
					 victim, i < c.n ? c.tag : TAG_MARK,
					 NULL)) == 0);
		for (uint64_t end = t_ms() + 20000;
		     done < (size_t)i + 1 && t_ms() < end;)
			reap_sends(&t, &never, &done, &failed);
		CHK(done == (size_t)i + 1);
	}
	CHK(read_progress(&t, sock, &want) == 0);
	for (uint64_t end = t_ms() + (want == 'f' ? 20000 : 500);
	     failed != (want == 'f') && t_ms() < end;)
		reap_sends(&t, &never, &done, &failed);
	CHK(write(sock, failed ? "f" : "u", 1) == 1);
	t_close(&t);
	return 0;
}

/* Tells the holder on sock what to send and waits for its mark. */
static void holder_send(struct tctx *t, int sock, int32_t n, uint32_t tag)
{
	struct holder_cmd c = { .n = n, .tag = tag };
	struct fi_cq_tagged_entry e;
	uint64_t mark;

	cr_assert_eq(fi_trecv(t->ep, &mark, sizeof(mark), NULL, FI_ADDR_UNSPEC,
			      TAG_MARK, 0, &mark), 0);
	cr_assert_eq(t_sock_write(sock, &c, sizeof(c)), 0);
	ssize_t r = t_wait(t, &e, NULL, NULL, 30000);
	cr_assert_eq(r, 1, "no mark after %d messages: %zd", n, r);
	cr_assert_eq(e.op_context, &mark);
}

/* How the holder on sock finds its connection, told what to expect;
 * progress meanwhile (30 s at most). */
static char holder_state(struct tctx *t, int sock, char want)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	char got = 0;

	cr_assert_eq(write(sock, &want, 1), 1);
	for (uint64_t end = t_ms() + 30000; t_ms() < end;) {
		cr_assert_eq(fi_cq_read(t->cq, NULL, 0), -FI_EAGAIN);
		if (poll(&p, 1, 0) == 1) {
			cr_assert_eq(read(sock, &got, 1), 1);
			break;
		}
	}
	return got;
}

Test(limits, the_largest_holder_gives_way_when_the_budget_is_full,
     .timeout = 120)
{
	static char got[NEW_N][BIG];
	struct fi_cq_tagged_entry e;
	int hog_sock, new_sock;
	pid_t hog, newcomer;
	fi_addr_t peer;
	struct tctx t;

	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", "tcp", 1);
	cr_assert_eq(setenv("FI_NTX_PEER_UNEXP_MAX", PEER_MAX, 1), 0);
	cr_assert_eq(setenv("FI_NTX_EP_UNEXP_MAX", BUDGET, 1), 0);
	hog = t_fork(&hog_sock, child_holder);
	newcomer = t_fork(&new_sock, child_holder);
	cr_assert(hog > 0 && newcomer > 0);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, hog_sock, &peer), 0);
	cr_assert_eq(t_xchg_name(&t, new_sock, &peer), 0);
	holder_send(&t, hog_sock, HOG_N, TAG_FLOOD);
	holder_send(&t, new_sock, NEW_N, TAG_LATE);
	for (int i = 0; i < NEW_N; i++)
		cr_assert_eq(fi_trecv(t.ep, got[i], BIG, NULL, FI_ADDR_UNSPEC,
				      TAG_LATE, 0, got[i]), 0);
	for (int i = 0; i < NEW_N; i++) {
		cr_assert_eq(t_wait(&t, &e, NULL, NULL, 20000), 1,
			     "the newcomer's message %d never came", i);
		cr_assert_eq(e.op_context, got[i]);
		cr_assert_eq(e.len, BIG);
		cr_assert_eq(t_check(got[i], BIG, 200 + i), 0);
	}
	cr_assert_eq(holder_state(&t, new_sock, 'u'), 'u',
		     "the newcomer's connection failed");
	cr_assert_eq(holder_state(&t, hog_sock, 'f'), 'f',
		     "the largest holder's connection stayed up");
	cr_assert_eq(t_join(hog), 0, "the largest holder failed");
	cr_assert_eq(t_join(newcomer), 0, "the newcomer failed");
	t_close(&t);
}

/* A writer that puts remote CQ data into a target that never reads its
 * CQ: past NTX_CQ_REMOTE_MAX unread entries its writes are refused (its
 * connection fails, again at each reconnect), so the CQ stops growing. */
#define CQ_MAX (1u << 20) /* NTX_CQ_REMOTE_MAX */
#define CQ_WRITES (CQ_MAX + CQ_MAX / 8)

struct cq_tgt {
	char name[T_NAMELEN];
	uint64_t key, addr;
};

static int child_cq_writer(int sock)
{
	struct cq_tgt tg;
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 1;
	ssize_t r;

	CHK(t_sock_read(sock, &tg, sizeof(tg)) == 0);
	CHK(t_open(&t, T_RMA_CAPS) == 0);
	CHK(t_insert(&t, tg.name, &peer) == 0);
	for (uint32_t i = 0; i < CQ_WRITES; i++) {
		while ((r = fi_inject_writedata(t.ep, &v, 8, i, peer, tg.addr,
						tg.key)) == -FI_EAGAIN)
			fi_cq_read(t.cq, NULL, 0);
		if (r) /* refused at once while reconnecting: go on */
			fi_cq_read(t.cq, NULL, 0);
	}
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

Test(limits, remote_cq_data_into_a_cq_nobody_reads_is_bounded,
     .timeout = 240)
{
	static uint64_t buf[8];
	static struct fi_cq_tagged_entry e[1024];
	struct pollfd p;
	struct fid_mr *mr;
	struct cq_tgt tg = { .key = 0 };
	struct tctx t;
	size_t len = sizeof(tg.name), n = 0;
	ssize_t r;
	int sock;
	char c;
	pid_t pid = t_fork(&sock, child_cq_writer);

	cr_assert_eq(t_open(&t, T_RMA_CAPS), 0);
	cr_assert_eq(fi_mr_reg(t.dom, buf, sizeof(buf), FI_REMOTE_WRITE, 0, 3,
			       0, &mr, NULL), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, tg.name, &len), 0);
	tg.key = fi_mr_key(mr);
	tg.addr = t.fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR
			  ? (uint64_t)(uintptr_t)buf : 0;
	cr_assert_eq(t_sock_write(sock, &tg, sizeof(tg)), 0);
	/* progress without reading a single entry until the writer is done */
	for (;;) {
		p = (struct pollfd){ .fd = sock, .events = POLLIN };
		fi_cq_read(t.cq, NULL, 0);
		if (poll(&p, 1, 0) == 1)
			break;
	}
	cr_assert_eq(read(sock, &c, 1), 1);
	cr_assert_eq(write(sock, &c, 1), 1);
	while ((r = fi_cq_read(t.cq, e, 1024)) > 0 || r == -FI_EAVAIL) {
		if (r > 0)
			n += (size_t)r;
		else
			fi_cq_readerr(t.cq, &(struct fi_cq_err_entry){ 0 }, 0);
	}
	cr_log_info("limits: %u writes with remote CQ data, nobody reading: "
		    "%zu CQ entries\n", CQ_WRITES, n);
	cr_assert_geq(n, CQ_MAX / 2, "the writes did not arrive");
	cr_assert_leq(n, CQ_MAX + 64, "the CQ grew past its bound");
	cr_assert_eq(t_join(pid), 0);
	fi_close(&mr->fid);
	t_close(&t);
}
