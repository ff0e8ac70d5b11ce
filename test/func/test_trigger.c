/* Triggered RMA (FI_TRIGGER) through an endpoint alias: the write waits
 * for its counter's threshold, then runs; bad triggers are refused. */
#include <criterion/criterion.h>
#include <rdma/fi_trigger.h>
#include <string.h>

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
	struct fid_ep *alias;
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
