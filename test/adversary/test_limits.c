/* Issue #13 item 4: what one peer can make an endpoint hold is bounded
 * (unexpected messages here; remote CQ data at the end).
 * A sender that floods a receiver with messages nobody posted receives
 * for fails its own connection at FI_NTX_PEER_UNEXP_MAX (it reconnects
 * by itself and starts over), the receiver's memory stays within a few
 * times the limit however much was sent, and the pair goes on: a message
 * sent after the flood is received. */
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
