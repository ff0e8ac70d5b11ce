/* Triggered RMA (FI_TRIGGER) through an endpoint alias: the write waits
 * for its counter's threshold, then runs; bad triggers are refused. */
#include <criterion/criterion.h>
#include <rdma/fi_trigger.h>
#include <string.h>
#include <unistd.h>

#include "ntx_test.h"

#define WAIT_MS 20000

static void get(struct t_ini *in, uint64_t off, void *buf, size_t len)
{
	struct t_cmd g = { .op = T_GET, .off = off, .len = len };

	cr_assert_eq(t_ini_cmd(in, &g, buf, len), 0);
}

Test(trigger, write_waits_for_its_counter_threshold)
{
	struct fi_triggered_context tc = { .event_type =
						   FI_TRIGGER_THRESHOLD };
	char first[32] = "first write", second[32] = "triggered write";
	char before[32], now[32];
	struct fid_ep *alias = NULL;
	struct fid_cntr *c;
	struct t_ini in;
	uint64_t fl;
	int done = 0;

	t_tgt.caps = T_RMA_CAPS | FI_TRIGGER;
	t_tgt.ini_cntrs = T_CBIT(T_C_WRITE);
	cr_assert_eq(t_ini_start(&in), 0);
	c = in.t.c[T_C_WRITE];
	cr_assert(in.t.fi->caps & FI_TRIGGER);
	cr_assert_eq(fi_ep_alias(in.t.ep, &alias, FI_TRANSMIT | FI_TRIGGER),
		     0);
	tc.trigger.threshold.cntr = c;
	tc.trigger.threshold.threshold = 1;
	get(&in, 64, before, sizeof(before));
	cr_assert_eq(fi_write(alias, second, sizeof(second), NULL, in.peer,
			      in.ti.addr[0] + 64, in.ti.key[0], &tc), 0);
	/* progress runs, the counter stays 0: nothing may move */
	cr_assert_eq(fi_cntr_wait(c, 1, 50), -FI_ETIMEDOUT);
	get(&in, 64, now, sizeof(now));
	cr_assert_eq(memcmp(now, before, sizeof(now)), 0, "deferred");
	cr_assert_eq(fi_close(&in.t.ep->fid), -FI_EBUSY, "alias open");
	cr_assert_eq(fi_write(in.t.ep, first, sizeof(first), NULL, in.peer,
			      in.ti.addr[0], in.ti.key[0], first), 0);
	cr_assert_eq(fi_cntr_wait(c, 2, WAIT_MS), 0);
	while (done < 2) {
		void *ctx = done ? (void *)&tc : (void *)first;

		cr_assert_eq(t_ini_done(&in, ctx, &fl), 0, "completion %d",
			     done);
		done++;
	}
	get(&in, 64, now, sizeof(now));
	cr_assert_str_eq(now, second);
	get(&in, 0, now, sizeof(now));
	cr_assert_str_eq(now, first);
	cr_assert_eq(fi_close(&alias->fid), 0);
	cr_assert_eq(t_ini_stop(&in), 0);
}

Test(trigger, bad_triggers_are_refused)
{
	struct fi_triggered_context tc = { .event_type = 77 };
	struct fi_msg_rma msg;
	struct fi_rma_iov riov;
	struct iovec iov;
	struct t_ini in;
	char buf[8] = "x";

	t_tgt.caps = T_RMA_CAPS | FI_TRIGGER;
	t_tgt.ini_cntrs = T_CBIT(T_C_WRITE);
	cr_assert_eq(t_ini_start(&in), 0);
	iov = (struct iovec){ buf, sizeof(buf) };
	riov = (struct fi_rma_iov){ in.ti.addr[0], sizeof(buf),
				    in.ti.key[0] };
	msg = (struct fi_msg_rma){ .msg_iov = &iov, .iov_count = 1,
				   .addr = in.peer, .rma_iov = &riov,
				   .rma_iov_count = 1, .context = &tc };
	cr_assert_eq(fi_writemsg(in.t.ep, &msg, FI_TRIGGER), -FI_EINVAL,
		     "unknown trigger type");
	tc.event_type = FI_TRIGGER_THRESHOLD;
	tc.trigger.threshold.cntr = NULL;
	cr_assert_eq(fi_writemsg(in.t.ep, &msg, FI_TRIGGER), -FI_EINVAL,
		     "no counter");
	msg.context = NULL;
	cr_assert_eq(fi_writemsg(in.t.ep, &msg, FI_TRIGGER), -FI_EINVAL,
		     "no triggered context");
	tc.trigger.threshold.cntr = in.t.c[T_C_WRITE];
	msg.context = &tc;
	cr_assert_eq(fi_writemsg(in.t.ep, &msg, FI_TRIGGER | FI_INJECT),
		     -FI_EINVAL, "inject cannot wait");
	cr_assert_eq(t_ini_stop(&in), 0);
}

/* Polls both endpoints' CQs until a completes something (its context in
 * *ctx) or b receives (1 in *got); -1 after WAIT_MS. */
static int trig_poll(struct tctx *a, struct tctx *b, void **ctx, int *got)
{
	struct fi_cq_tagged_entry e;

	for (int i = 0; i < WAIT_MS; i++) {
		if (fi_cq_read(a->cq, &e, 1) == 1) {
			*ctx = e.op_context;
			return 0;
		}
		if (fi_cq_read(b->cq, &e, 1) == 1) {
			*got = 1;
			return 0;
		}
		usleep(1000);
	}
	return -1;
}

/* A triggered tagged send and a triggered atomic (FI_SUM) wait for their
 * counter (one of the domain's, raised by fi_cntr_add) to reach their
 * thresholds, 1 and 2, and then run in that order. */
Test(trigger, a_send_and_an_atomic_wait_for_their_thresholds)
{
	struct fi_triggered_context t1 = { .event_type = FI_TRIGGER_THRESHOLD },
				    t2 = { .event_type = FI_TRIGGER_THRESHOLD };
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP };
	uint64_t caps = FI_TAGGED | FI_ATOMIC | FI_WRITE | FI_REMOTE_WRITE |
			FI_TRIGGER;
	char msg[16] = "triggered", rbuf[16] = "";
	uint64_t v = 5, add = 1, raddr;
	struct fi_msg_tagged tm;
	struct fi_msg_atomic am;
	struct fi_rma_ioc rioc;
	struct fi_ioc ioc;
	struct iovec iov;
	struct tctx a, b;
	struct fid_cntr *c;
	struct fid_mr *mr;
	char name[T_NAMELEN];
	size_t len = sizeof(name);
	fi_addr_t peer;
	void *ctx = NULL;
	int got = 0;

	cr_assert_eq(t_open(&a, caps), 0);
	cr_assert_eq(t_open(&b, caps), 0);
	cr_assert(a.fi->caps & FI_TRIGGER);
	cr_assert_eq(fi_cntr_open(a.dom, &ca, &c, NULL), 0);
	cr_assert_eq(fi_mr_reg(b.dom, &v, sizeof(v), FI_REMOTE_WRITE, 0, 0, 0,
			       &mr, NULL), 0);
	raddr = (b.fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
			? (uint64_t)(uintptr_t)&v : 0;
	cr_assert_eq(fi_getname(&b.ep->fid, name, &len), 0);
	cr_assert_eq(t_insert(&a, name, &peer), 0);
	cr_assert_eq(fi_trecv(b.ep, rbuf, sizeof(rbuf), NULL, FI_ADDR_UNSPEC,
			      7, 0, rbuf), 0);

	t1.trigger.threshold.cntr = c;
	t1.trigger.threshold.threshold = 1;
	t2.trigger.threshold.cntr = c;
	t2.trigger.threshold.threshold = 2;
	iov = (struct iovec){ msg, sizeof(msg) };
	tm = (struct fi_msg_tagged){ .msg_iov = &iov, .iov_count = 1,
				     .addr = peer, .tag = 7, .context = &t1 };
	cr_assert_eq(fi_tsendmsg(a.ep, &tm, FI_TRIGGER | FI_INJECT),
		     -FI_EINVAL, "inject cannot wait");
	tm.context = NULL;
	cr_assert_eq(fi_tsendmsg(a.ep, &tm, FI_TRIGGER), -FI_EINVAL,
		     "no triggered context");
	tm.context = &t1;
	cr_assert_eq(fi_tsendmsg(a.ep, &tm, FI_TRIGGER), 0);
	ioc = (struct fi_ioc){ &add, 1 };
	rioc = (struct fi_rma_ioc){ raddr, 1, fi_mr_key(mr) };
	am = (struct fi_msg_atomic){ .msg_iov = &ioc, .iov_count = 1,
				     .addr = peer, .rma_iov = &rioc,
				     .rma_iov_count = 1,
				     .datatype = FI_UINT64, .op = FI_SUM,
				     .context = &t2 };
	cr_assert_eq(fi_atomicmsg(a.ep, &am, FI_TRIGGER), 0);
	add = 10; /* buffers are read when the trigger fires, not before */

	/* progress, the counter at 0: nothing moves */
	cr_assert_eq(t_drain(&b, 50), 0);
	cr_assert_eq(t_drain(&a, 50), 0);
	cr_assert_eq(v, 5);

	cr_assert_eq(fi_cntr_add(c, 1), 0);
	while (!got || !ctx)
		cr_assert_eq(trig_poll(&a, &b, &ctx, &got), 0, "the send");
	cr_assert_eq(ctx, &t1);
	cr_assert_str_eq(rbuf, "triggered");
	cr_assert_eq(t_drain(&a, 50), 0, "the atomic still waits");
	cr_assert_eq(v, 5);

	cr_assert_eq(fi_cntr_add(c, 1), 0);
	ctx = NULL;
	while (!ctx)
		cr_assert_eq(trig_poll(&a, &b, &ctx, &got), 0, "the atomic");
	cr_assert_eq(ctx, &t2);
	cr_assert_eq(v, 15, "5 + 10: %llu", (unsigned long long)v);
	cr_assert_eq(fi_close(&mr->fid), 0);
	cr_assert_eq(fi_close(&c->fid), 0);
	t_close(&a);
	t_close(&b);
}
