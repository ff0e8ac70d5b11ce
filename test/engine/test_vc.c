/* Virtual connections (prov/engine/ntx_vc.c, DESIGN §3): the backlog of
 * a connecting VC, failure, restarted peers and simultaneous connects. */
#include "config.h"
#include <stdlib.h>

#include "ntx_et.h"

static void setup(void)
{
	et_open(3);
}

static void teardown(void)
{
	et_close();
}

TestSuite(vc, .init = setup, .fini = teardown, .timeout = 30);

/* sizes of eager (inline, one packet, the largest) and streamed
 * rendezvous messages (NTX_LOOP_MTU is the eager limit here) */
static const size_t sizes[] = { 8, 100, 3000, 16, NTX_LOOP_MTU, 5000 };
#define NMSG (sizeof(sizes) / sizeof(sizes[0]))

static uint8_t *msg_new(size_t len, int seed)
{
	uint8_t *b = malloc(len);

	cr_assert_not_null(b);
	for (size_t i = 0; i < len; i++)
		b[i] = (uint8_t)(seed * 31 + i * 7);
	return b;
}

/* Reads completions of 'at' until n of 'kind' (FI_SEND or FI_RECV)
 * arrived, in e if given; a completion of the other kind fails. */
static void wait_kind(int at, uint64_t kind, int n,
		      struct fi_cq_tagged_entry *e)
{
	struct fi_cq_tagged_entry one;
	int got = 0;

	for (int round = 0; got < n && round < 1000; round++) {
		while (got < n && et_cq_read(at, &one, NULL)) {
			cr_assert(one.flags & kind, "node %d: flags 0x%lx", at,
				  (unsigned long)one.flags);
			if (e)
				e[got] = one;
			got++;
		}
		if (got < n)
			et_progress(1);
	}
	cr_assert_eq(got, n, "node %d: %d of %d completions", at, got, n);
}

/* Sends NMSG messages from 'from' to 'to' (untagged) and posts as many
 * receives at 'to'; checks every byte after progress. */
static void exchange_check(int from, int to, int seed, bool progress_first)
{
	uint8_t *tx[NMSG], *rx[NMSG];
	struct fi_cq_tagged_entry e[NMSG];
	int ctx[NMSG];

	for (size_t i = 0; i < NMSG; i++) {
		tx[i] = msg_new(sizes[i], seed + (int)i);
		rx[i] = calloc(1, sizes[i]);
		cr_assert_eq(et_send(from, to, tx[i], sizes[i], 0, NULL, 0), 0);
	}
	if (progress_first)
		et_progress(1);
	for (size_t i = 0; i < NMSG; i++)
		cr_assert_eq(et_recv(to, FI_ADDR_UNSPEC, rx[i], sizes[i], 0, 0,
				     &ctx[i], 0), 0);
	wait_kind(to, FI_RECV, NMSG, e);
	wait_kind(from, FI_SEND, NMSG, NULL);
	for (size_t i = 0; i < NMSG; i++) {
		cr_assert_eq(memcmp(rx[i], tx[i], sizes[i]), 0,
			     "message %zu (%zu bytes) from %d to %d", i,
			     sizes[i], from, to);
		free(tx[i]);
		free(rx[i]);
	}
}

Test(vc, backlog_leaves_in_order_once_connected)
{
	struct ntx_vc *vc;
	uint8_t *tx[NMSG], *rx[NMSG];
	struct fi_cq_tagged_entry e[NMSG];
	int ctx[NMSG];

	for (size_t i = 0; i < NMSG; i++) {
		tx[i] = msg_new(sizes[i], (int)i);
		rx[i] = calloc(1, sizes[i]);
		cr_assert_eq(et_send(0, 1, tx[i], sizes[i], 0, NULL, 0), 0);
	}
	vc = et_vc_to(0, 1);
	cr_assert_not_null(vc);
	cr_assert_eq(vc->state, NTX_VC_CONNECTING);
	cr_assert(vc->busy);
	/* every message waits on the backlog, in order */
	{
		struct ntx_list *it;
		size_t k = 0;

		ntx_list_foreach(&vc->backlog, it) {
			struct ntx_req *r = ntx_container_of(it, struct ntx_req,
							     entry);
			cr_assert_eq(r->len, sizes[k++]);
		}
		cr_assert_eq(k, NMSG);
	}
	/* posted in order: message i can only land in receive i if the
	 * backlog left in order (all are untagged) */
	for (size_t i = 0; i < NMSG; i++)
		cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, rx[i], sizes[i], 0, 0,
				     &ctx[i], 0), 0);
	wait_kind(1, FI_RECV, NMSG, e);
	for (size_t i = 0; i < NMSG; i++) {
		cr_assert_eq(memcmp(rx[i], tx[i], sizes[i]), 0, "message %zu",
			     i);
		free(tx[i]);
		free(rx[i]);
	}
	cr_assert_eq(vc->state, NTX_VC_CONNECTED);
	wait_kind(0, FI_SEND, NMSG, NULL);
	cr_assert_eq(et[0].ep->tx_outstanding, 0);
}

Test(vc, failed_vc_completes_its_backlog_with_errors)
{
	struct fi_cq_err_entry err;
	struct fi_cq_tagged_entry e;
	uint8_t *b = msg_new(5000, 1);
	int ctx[3];

	ntx_loop_inject(et_be(1))->refuse_accept = true;
	cr_assert_eq(et_send(0, 1, b, 10, 0, &ctx[0], 0), 0);
	cr_assert_eq(et_send(0, 1, b, 5000, 0, &ctx[1], 0), 0);
	cr_assert_eq(et_send(0, 1, b, 100, 0, &ctx[2], 0), 0);
	et_progress(4);
	for (int i = 0; i < 3; i++) {
		cr_assert(et_cq_err(0, &err), "error completion %d", i);
		cr_assert_eq(err.op_context, &ctx[i]);
		cr_assert_eq(err.err, FI_ECONNRESET);
		cr_assert(err.flags & FI_SEND);
	}
	cr_assert_not(et_cq_err(0, &err));
	cr_assert_not(et_cq_read(0, &e, NULL));
	cr_assert_eq(et[0].ep->tx_outstanding, 0);
	/* reaped: neither the table nor the list keeps it */
	cr_assert_null(et_vc_to(0, 1));
	cr_assert(ntx_list_empty(&et[0].ep->vcs));
	free(b);
}

Test(vc, failed_vc_fails_its_pending_rendezvous)
{
	struct fi_cq_err_entry err;
	uint8_t *b = msg_new(7000, 2);
	int ctx;

	exchange_check(0, 1, 5, false);
	/* RTS sent, no receive posted: the send waits for the peer */
	cr_assert_eq(et_send(0, 1, b, 7000, 0, &ctx, 0), 0);
	et_progress(2);
	cr_assert_eq(et_vc_to(0, 1)->state, NTX_VC_CONNECTED);
	cr_assert(!ntx_list_empty(&et_vc_to(0, 1)->pending));
	ntx_loop_kill(ntx_loop_conn_of(et_be(0), et_vc_to(0, 1)),
		      -FI_ECONNRESET);
	et_progress(2);
	cr_assert(et_cq_err(0, &err));
	cr_assert_eq(err.op_context, &ctx);
	cr_assert_eq(err.err, FI_ECONNRESET);
	cr_assert_eq(et[0].ep->tx_outstanding, 0);
	/* other peers are not touched */
	exchange_check(0, 2, 9, false);
	free(b);
}

Test(vc, send_errors_fail_only_that_send)
{
	struct fi_cq_err_entry err;
	uint8_t b[64] = { 1 };
	int ctx;

	exchange_check(0, 1, 3, false);
	ntx_loop_inject(et_be(0))->send_eagain = 3;
	exchange_check(0, 1, 4, false); /* -FI_EAGAIN: waits, then leaves */
	ntx_loop_inject(et_be(0))->send_err = -FI_EIO;
	cr_assert_eq(et_send(0, 1, b, sizeof(b), 0, &ctx, 0), 0);
	cr_assert(et_cq_err(0, &err));
	cr_assert_eq(err.err, FI_EIO);
	cr_assert_eq(err.op_context, &ctx);
}

Test(vc, restarted_peer_gets_a_new_vc)
{
	struct ntx_addr old = et[1].ep->name, again = old;
	fi_addr_t old_addr = et[0].addr[1];
	struct ntx_vc *vc;
	uint8_t b[8] = { 0 };

	exchange_check(0, 1, 1, false);
	exchange_check(1, 0, 2, false);
	again.epoch = old.epoch + 1;
	et_reopen(1, &again); /* same pid and ep_id, a new epoch */
	cr_assert_neq(et[0].addr[1], old_addr);
	/* the restarted peer connects first: a VC of the new epoch */
	exchange_check(1, 0, 3, false);
	vc = et_vc_to(0, 1);
	cr_assert_not_null(vc, "the accepted VC serves the new slot");
	cr_assert_eq(vc->peer.epoch, again.epoch);
	exchange_check(0, 1, 4, false);
	cr_assert_eq(et_vc_to(0, 1), vc);
	cr_assert_eq(vc->peer.epoch, again.epoch);
	cr_assert_eq(vc->state, NTX_VC_CONNECTED);
	/* it is the one the peer opened: no second connection */
	cr_assert_eq(et_live_vcs(0), 1);
	cr_assert_eq(ntx_loop_open_conns(et_be(0)), 1);
	/* the old incarnation's slot reaches nobody */
	cr_assert_null(ntx_idtab_get(&et[0].ep->vc_tab, old_addr));
	cr_assert_eq(et_send(0, 1, b, 8, 0, NULL, 0), 0); /* new slot */
	{
		/* taken, and completed in error once: a caller that retried
		 * a refusal would retry forever */
		struct ntx_req *r = ntx_req_get(et[0].ep, NTX_REQ_SEND);
		struct fi_cq_err_entry err;
		int ctx;

		r->iov[0].iov_base = b;
		r->iov[0].iov_len = 8;
		r->iov_count = 1;
		r->len = 8;
		r->addr = old_addr;
		r->context = &ctx;
		cr_assert_eq(ntx_proto_send(et[0].ep, r), 0);
		cr_assert(et_cq_err(0, &err));
		cr_assert_eq(err.err, FI_EHOSTUNREACH);
		cr_assert_eq(err.op_context, &ctx);
		cr_assert_not(et_cq_err(0, &err), "one error, once");
		cr_assert_eq(et[0].ep->tx_outstanding, 0);
	}
}

static void simultaneous(int a, int b)
{
	/* both send before either polled: each has a VC CONNECTING with a
	 * backlog when the other's connection arrives */
	uint8_t *tx[2][NMSG], *rx[2][NMSG];
	struct fi_cq_tagged_entry e[2 * NMSG];
	struct fi_cq_err_entry err;
	int ctx[2][NMSG], ends[2] = { a, b }, dctx[2];
	uint64_t dv[2] = { 0, 0 }, v = 42;

	for (int s = 0; s < 2; s++) {
		for (size_t i = 0; i < NMSG; i++) {
			tx[s][i] = msg_new(sizes[i], 100 * s + (int)i);
			rx[s][i] = calloc(1, sizes[i]);
			cr_assert_eq(et_send(ends[s], ends[!s], tx[s][i],
					     sizes[i], 0, NULL, 0), 0);
		}
	}
	cr_assert_eq(et_vc_to(a, b)->state, NTX_VC_CONNECTING);
	cr_assert_eq(et_vc_to(b, a)->state, NTX_VC_CONNECTING);
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < NMSG; i++)
			cr_assert_eq(et_recv(ends[!s], FI_ADDR_UNSPEC,
					     rx[s][i], sizes[i], 0, 0,
					     &ctx[s][i], 0), 0);
	/* and one receive each directed at the other side, filled below */
	for (int s = 0; s < 2; s++)
		cr_assert_eq(et_recv(ends[s], et[ends[s]].addr[ends[!s]],
				     &dv[s], 8, 0, 0, &dctx[s], 0), 0);
	for (int s = 0; s < 2; s++) {
		/* receives and sends complete: each exactly once */
		et_cq_wait(ends[s], e, NULL, 2 * NMSG);
		cr_assert_not(et_cq_read(ends[s], e, NULL));
	}
	for (int s = 0; s < 2; s++)
		for (size_t i = 0; i < NMSG; i++) {
			cr_assert_eq(memcmp(rx[s][i], tx[s][i], sizes[i]), 0,
				     "%d -> %d message %zu", ends[s],
				     ends[!s], i);
			free(tx[s][i]);
			free(rx[s][i]);
		}
	et_progress(4);
	/* one VC per peer on each side, over one connection */
	for (int s = 0; s < 2; s++) {
		cr_assert_eq(et_live_vcs(ends[s]), 1, "node %d has %d VCs",
			     ends[s], et_live_vcs(ends[s]));
		cr_assert_eq(ntx_loop_open_conns(et_be(ends[s])), 1);
		cr_assert_eq(et_vc_to(ends[s], ends[!s])->state,
			     NTX_VC_CONNECTED);
	}
	cr_assert_eq(ntx_loop_conn_of(et_be(a), et_vc_to(a, b)) != NULL, 1);
	/* the spare end of the crossed connect failed, the peer did not:
	 * the receives directed at it are still posted */
	for (int s = 0; s < 2; s++) {
		cr_assert_not(et_cq_err(ends[s], &err), "node %d: error %d",
			      ends[s], err.err);
		cr_assert_eq(et_send(ends[!s], ends[s], &v, 8, 0, NULL, 0), 0);
		et_cq_wait(ends[s], e, NULL, 1);
		cr_assert_eq(e[0].op_context, &dctx[s]);
		cr_assert_eq(dv[s], 42);
		et_cq_wait(ends[!s], e, NULL, 1);
		cr_assert(e[0].flags & FI_SEND);
	}
	/* and it keeps working both ways */
	exchange_check(a, b, 7, true);
	exchange_check(b, a, 8, true);
}

Test(vc, simultaneous_connect)
{
	simultaneous(0, 1);
}

/* the other order of names: the other side keeps its connection */
Test(vc, simultaneous_connect_reversed)
{
	simultaneous(2, 0);
}
