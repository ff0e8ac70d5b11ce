/*
 * Surfaces of issue #36 besides connection management (that is
 * test_surfaces_cm.c): triggered operations fired by a peer's remote
 * writes, scalable endpoints' name lists, FI_SOCKADDR_IN names of odd
 * values, and a same-user process that posts connect cells in another
 * peer's name. Each asserts what DESIGN §7 promises: an error, never a
 * crash, a hang, a reordering or another peer's connection failing.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fi_trigger.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_adv.h"
#include "ntx/ntx.h"
#include "ntx_ring.h"

/* ---- triggered operations ----------------------------------------------- */

#define NTRIG 2000
#define TRIG_RECV 256 /* receives the peer keeps posted */

/* The peer: floods the victim with NTRIG remote writes (each one step of
 * the victim's counter), then takes the NTRIG messages they trigger, in
 * the order of their tags. */
static int trig_peer(int sock)
{
	static uint64_t rbuf[TRIG_RECV];
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint64_t x = 1, want = 0;
	struct tctx t;
	fi_addr_t v;

	CHK(t_open(&t, T_RMA_CAPS | FI_TAGGED) == 0);
	CHK(t_xchg_name(&t, sock, &v) == 0);
	for (int i = 0; i < TRIG_RECV; i++)
		CHK(fi_trecv(t.ep, &rbuf[i], 8, NULL, FI_ADDR_UNSPEC, 0, ~0ull,
			     &rbuf[i]) == 0);
	for (int i = 0; i < NTRIG; i++)
		CHK(T_RETRY(&t, fi_write(t.ep, &x, 8, NULL, v, 0, VKEY,
					 NULL)) == 0);
	for (uint64_t end = t_ms() + 60000; want < NTRIG && t_ms() < end;) {
		ssize_t r = fi_cq_read(t.cq, &e, 1);

		CHK(r != -FI_EAVAIL || (fi_cq_readerr(t.cq, &err, 0), 0));
		if (r != 1)
			continue;
		if (!(e.flags & FI_RECV))
			continue; /* a write */
		if (e.tag != want)
			fprintf(stderr, "trig: message %llu where %llu was due\n",
				(unsigned long long)e.tag,
				(unsigned long long)want);
		CHK(e.tag == want);
		want++;
		CHK(fi_trecv(t.ep, e.op_context, 8, NULL, FI_ADDR_UNSPEC, 0,
			     ~0ull, e.op_context) == 0);
	}
	CHK(want == NTRIG);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

/* NTRIG triggered sends wait for thresholds 1..NTRIG of the counter of
 * remote writes; a peer's flood of writes fires them all within a few
 * polls. Each fires once, in the order posted (the peer checks the
 * tags), and each completes. */
Test(surfaces, a_flood_of_remote_writes_fires_triggers_in_order,
     .timeout = 180)
{
	static struct fi_triggered_context tc[NTRIG];
	static uint64_t payload[NTRIG];
	static char mbuf[VLEN];
	struct fi_info *h = t_hints(T_RMA_CAPS | FI_TAGGED | FI_TRIGGER);
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	struct fid_mr *mr;
	struct fid_cntr *c;
	struct tctx t;
	fi_addr_t peer;
	int sock, sent = 0;
	pid_t pid;

	pid = t_fork(&sock, trig_peer);
	cr_assert_eq(t_open_cntrs(&t, h, T_CBIT(T_C_RWRITE)), 0);
	c = t.c[T_C_RWRITE];
	cr_assert_eq(fi_mr_reg(t.dom, mbuf, VLEN, FI_REMOTE_WRITE, 0, VKEY, 0,
			       &mr, NULL), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	for (int i = 0; i < NTRIG; i++) {
		struct iovec iov = { &payload[i], 8 };
		struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1,
					   .addr = peer, .tag = (uint64_t)i,
					   .context = &tc[i] };

		payload[i] = (uint64_t)i;
		tc[i].event_type = FI_TRIGGER_THRESHOLD;
		tc[i].trigger.threshold.cntr = c;
		tc[i].trigger.threshold.threshold = (uint64_t)i + 1;
		cr_assert_eq(fi_tsendmsg(t.ep, &m, FI_TRIGGER), 0);
	}
	for (uint64_t end = t_ms() + 120000; sent < NTRIG && t_ms() < end;) {
		ssize_t r = fi_cq_read(t.cq, &e, 1);

		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			fi_cq_readerr(t.cq, &err, 0);
			cr_assert_fail("triggered send failed: %s",
				       fi_strerror(err.err));
		}
		if (r == 1) {
			cr_assert_eq(e.op_context, &tc[sent],
				     "send %d completed where %d was due",
				     (int)((struct fi_triggered_context *)
						   e.op_context - tc), sent);
			sent++;
		}
	}
	cr_assert_eq(sent, NTRIG, "%d of %d triggered sends completed", sent,
		     NTRIG);
	cr_assert_eq(fi_cntr_read(c), NTRIG);
	cr_assert_eq(t_sync(sock), 0);
	cr_assert_eq(t_join(pid), 0, "the peer saw the messages out of order");
	fi_close(&mr->fid);
	t_close(&t);
}
