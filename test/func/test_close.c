/* Delivery at close: a receiver that closes its endpoint, or exits
 * without closing it, right after its final receive completed. The
 * sender asked for FI_DELIVERY_COMPLETE, and the data was delivered: its
 * completion must be a success, never the reset of the connection that
 * follows. Each kind of final receive (eager, streamed, rendezvous,
 * inject, tagged, RMA write with remote CQ data) is repeated
 * NTX_CLOSE_REPS times (30 by default: a race of 1 in 10 hides from 30
 * runs 4 times in 100) for each way of going, on shm, tcp and udp. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ntx_test.h"

#define CAPS                                                           \
	(FI_MSG | FI_TAGGED | FI_RMA | FI_WRITE | FI_REMOTE_WRITE)
#define MR_MODE (FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)
#define WAIT_MS 30000
#define TAG 7
#define CQ_DATA 0xda7aull

enum kind {
	K_EAGER, K_STREAM, K_RNDV, K_INJECT, K_TAGGED, K_RMA_DATA, K_N
};
enum how { H_CLOSE, H_EXIT, H_N };

static const char *const kind_name[K_N] = {
	"eager", "streamed", "rendezvous", "inject", "tagged", "rma-data"
};
static const char *const how_name[H_N] = { "closes", "exits" };
/* streamed: above the eager size, within FI_NTX_SHM_STREAM_MAX (a head,
 * then segments through the bulk area; elsewhere the size's usual path) */
static const size_t kind_len[K_N] = { 1024, 200000, 1 << 20, 64, 4096, 65536 };

/* what the child receives and how it goes; set before each fork */
static enum kind g_kind;
static enum how g_how;

static struct fi_info *close_hints(void)
{
	return t_hints_mr(CAPS, MR_MODE);
}

/* The receiver: learns the sender, posts its one receive (or registers
 * the region the sender writes), says it is ready, waits for the
 * completion and checks it, then closes everything or exits at once. */
static int child_receives_then_goes(int sock)
{
	size_t len = kind_len[g_kind];
	uint8_t *buf = calloc(1, len);
	struct fi_cq_tagged_entry e;
	struct fid_mr *mr = NULL;
	struct tctx t;
	fi_addr_t peer;
	int ret;

	CHK(buf);
	CHK(t_open_hints(&t, close_hints()) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	switch (g_kind) {
	case K_RMA_DATA: {
		uint64_t info[2];

		CHK(fi_mr_reg(t.dom, buf, len, FI_REMOTE_WRITE, 0, 0, 0, &mr,
			      NULL) == 0);
		info[0] = fi_mr_key(mr);
		info[1] = (uint64_t)(uintptr_t)buf;
		CHK(t_sock_write(sock, info, sizeof(info)) == 0);
		break;
	}
	case K_TAGGED:
		CHK(fi_trecv(t.ep, buf, len, NULL, peer, TAG, 0, buf) == 0);
		break;
	default:
		CHK(fi_recv(t.ep, buf, len, NULL, peer, buf) == 0);
		break;
	}
	CHK(write(sock, "r", 1) == 1);
	ret = t_wait(&t, &e, NULL, NULL, WAIT_MS);
	CHK(ret == 1);
	CHK(e.len == len || g_kind == K_RMA_DATA);
	CHK(t_check(buf, len, (unsigned)g_kind) == 0);
	if (g_kind == K_RMA_DATA)
		CHK((e.flags & FI_REMOTE_CQ_DATA) && e.data == CQ_DATA);
	else
		CHK(e.op_context == buf);
	if (g_how == H_EXIT)
		_exit(0); /* no close: the process is gone */
	if (mr)
		fi_close(&mr->fid);
	t_close(&t);
	free(buf);
	return 0;
}

/* Forks the receivers on request, one at a time: forked before the test
 * opens anything, so that no receiver is a copy of a process whose
 * libfabric objects and threads were live (a lock held by one of them at
 * the fork stays held in the child). Each request is a byte 'a' + kind *
 * H_N + how; the answer is the receiver's exit code, one byte. */
static int child_spawner(int sock)
{
	char c;

	while (read(sock, &c, 1) == 1 && c >= 'a' && c < 'a' + K_N * H_N) {
		pid_t p;
		int st;
		uint8_t code;

		g_kind = (enum kind)((c - 'a') / H_N);
		g_how = (enum how)((c - 'a') % H_N);
		p = fork();
		CHK(p >= 0);
		if (p == 0)
			_exit(child_receives_then_goes(sock));
		CHK(waitpid(p, &st, 0) == p);
		code = WIFEXITED(st) ? (uint8_t)WEXITSTATUS(st)
				     : (uint8_t)(128 + WTERMSIG(st));
		CHK(write(sock, &code, 1) == 1);
	}
	return 0;
}

/* The sender's one operation, with FI_DELIVERY_COMPLETE. */
static ssize_t send_final(struct tctx *t, fi_addr_t peer, void *buf,
			  size_t len, const uint64_t *rinfo, void *ctx)
{
	struct iovec iov = { buf, len };
	uint64_t f = FI_DELIVERY_COMPLETE | FI_COMPLETION;
	struct fi_msg msg = { .msg_iov = &iov, .iov_count = 1, .addr = peer,
			      .context = ctx };

	switch (g_kind) {
	case K_TAGGED: {
		struct fi_msg_tagged tm = { .msg_iov = &iov, .iov_count = 1,
					    .addr = peer, .tag = TAG,
					    .context = ctx };

		return fi_tsendmsg(t->ep, &tm, f);
	}
	case K_RMA_DATA: {
		struct fi_rma_iov riov = { rinfo[1], len, rinfo[0] };
		struct fi_msg_rma rm = { .msg_iov = &iov, .iov_count = 1,
					 .addr = peer, .rma_iov = &riov,
					 .rma_iov_count = 1, .context = ctx,
					 .data = CQ_DATA };

		return fi_writemsg(t->ep, &rm, f | FI_REMOTE_CQ_DATA);
	}
	case K_INJECT:
		return fi_sendmsg(t->ep, &msg, f | FI_INJECT);
	default:
		return fi_sendmsg(t->ep, &msg, f);
	}
}

static void close_after_final_receive(const char *domain)
{
	const char *r = getenv("NTX_CLOSE_REPS");
	int reps = r ? atoi(r) : 30, runs = 0, sock;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint8_t *buf = malloc(1 << 20);
	struct tctx t;
	uint64_t t0 = t_ms();
	pid_t spawner;

	cr_assert_not_null(buf);
	setenv("NTX_TEST_DOMAIN", domain, 1);
	spawner = t_fork(&sock, child_spawner);
	cr_assert_gt(spawner, 0);
	cr_assert_eq(t_open_hints(&t, close_hints()), 0);
	for (int k = 0; k < K_N; k++) {
		for (int h = 0; h < H_N; h++) {
			for (int i = 0; i < reps; i++, runs++) {
				uint64_t rinfo[2] = { 0, 0 };
				char c = (char)('a' + k * H_N + h);
				uint8_t code;
				fi_addr_t peer;
				int ret;

				g_kind = (enum kind)k;
				t_fill(buf, kind_len[k], (unsigned)k);
				cr_assert_eq(write(sock, &c, 1), 1);
				cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
				if (k == K_RMA_DATA)
					cr_assert_eq(t_sock_read(sock, rinfo,
								 sizeof(rinfo)),
						     0);
				cr_assert_eq(read(sock, &c, 1), 1);
				cr_assert_eq(send_final(&t, peer, buf,
							kind_len[k], rinfo,
							&t),
					     0);
				ret = t_wait(&t, &e, NULL, &err, WAIT_MS);
				cr_assert_eq(ret, 1,
					     "%s: %s final receive, receiver %s"
					     ", run %d: %s (%d)",
					     domain, kind_name[k], how_name[h],
					     i, ret == -FI_EAVAIL
						 ? fi_strerror(err.err)
						 : "no completion",
					     ret);
				cr_assert_eq(e.op_context, &t);
				cr_assert_eq(read(sock, &code, 1), 1);
				cr_assert_eq(code, 0,
					     "%s: %s, receiver %s, run %d: "
					     "the receiver failed at line %u",
					     domain, kind_name[k], how_name[h],
					     i, code);
			}
		}
	}
	/* the receivers' resets wrote nothing more, not even an error */
	for (uint64_t end = t_ms() + 200; t_ms() < end;)
		cr_assert_eq(fi_cq_read(t.cq, &e, 1), -FI_EAGAIN);
	cr_assert_eq(write(sock, "q", 1), 1);
	cr_assert_eq(t_join(spawner), 0);
	close(sock);
	t_close(&t);
	free(buf);
	printf("close: %s: %d final receives (%d kinds x %d ways x %d), "
	       "every send a success, %llu ms\n",
	       domain, runs, K_N, H_N, reps,
	       (unsigned long long)(t_ms() - t0));
}

Test(close, delivered_data_stays_delivered_shm, .timeout = 600)
{
	close_after_final_receive("shm");
}

Test(close, delivered_data_stays_delivered_tcp, .timeout = 600)
{
	close_after_final_receive("tcp");
}

Test(close, delivered_data_stays_delivered_udp, .timeout = 600)
{
	close_after_final_receive("udp");
}
