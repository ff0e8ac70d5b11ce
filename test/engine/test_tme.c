/* Tag matching (prov/engine/ntx_tme.c, DESIGN §3) through the engine:
 * posted receives against arriving messages, unexpected messages against
 * new receives, claims and cancel. */
#include "config.h"

#include "ntx_et.h"

static void setup(void)
{
	et_open(3);
}

static void teardown(void)
{
	et_close();
}

TestSuite(tme, .init = setup, .fini = teardown, .timeout = 30);

static int ctx[16];

/* A tagged 8-byte message whose payload names it. */
static void send_tagged(int from, int to, uint64_t tag, uint64_t v)
{
	static uint64_t bufs[64];
	static int k;
	uint64_t *b = &bufs[k++ % 64];

	*b = v;
	cr_assert_eq(et_send(from, to, b, sizeof(*b), tag, NULL, FI_TAGGED),
		     0);
}

Test(tme, exact_and_ignore_mask)
{
	uint64_t a = 0, b = 0;
	struct fi_cq_tagged_entry e[2];

	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &a, 8, 0x10, 0, &ctx[0],
			     FI_TAGGED), 0);
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &b, 8, 0x100, 0xff, &ctx[1],
			     FI_TAGGED), 0);
	send_tagged(0, 1, 0x1ab, 1); /* only the masked receive takes it */
	send_tagged(0, 1, 0x10, 2);
	et_cq_wait(1, e, NULL, 2);
	cr_assert_eq(e[0].op_context, &ctx[1]);
	cr_assert_eq(e[0].tag, 0x1ab);
	cr_assert_eq(b, 1);
	cr_assert_eq(e[1].op_context, &ctx[0]);
	cr_assert_eq(a, 2);
}

Test(tme, directed_and_unspec_sources)
{
	uint64_t d = 0, u = 0;
	struct fi_cq_tagged_entry e[2];
	fi_addr_t src[2];

	/* the directed receive is posted first: a message from another
	 * source passes it by */
	cr_assert_eq(et_recv(2, et[2].addr[0], &d, 8, 7, 0, &ctx[0],
			     FI_TAGGED), 0);
	cr_assert_eq(et_recv(2, FI_ADDR_UNSPEC, &u, 8, 7, 0, &ctx[1],
			     FI_TAGGED), 0);
	send_tagged(1, 2, 7, 11);
	et_cq_wait(2, e, src, 1);
	cr_assert_eq(e[0].op_context, &ctx[1]);
	cr_assert_eq(src[0], et[2].addr[1]);
	cr_assert_eq(u, 11);
	send_tagged(0, 2, 7, 22);
	et_cq_wait(2, e + 1, src + 1, 1);
	cr_assert_eq(e[1].op_context, &ctx[0]);
	cr_assert_eq(src[1], et[2].addr[0]);
	cr_assert_eq(d, 22);
}

/* Exact receives live in tag buckets, wildcard ones in a list: the
 * post sequence decides between them, either way round. */
Test(tme, post_order_between_exact_and_wildcard)
{
	uint64_t v[4] = { 0 };
	struct fi_cq_tagged_entry e[4];

	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v[0], 8, 0, ~0ull, &ctx[0],
			     FI_TAGGED), 0);
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v[1], 8, 5, 0, &ctx[1],
			     FI_TAGGED), 0);
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v[2], 8, 6, 0, &ctx[2],
			     FI_TAGGED), 0);
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v[3], 8, 0, ~0ull, &ctx[3],
			     FI_TAGGED), 0);
	send_tagged(0, 1, 5, 100); /* wildcard 0 is older than exact 1 */
	send_tagged(0, 1, 6, 200); /* exact 2 is older than wildcard 3 */
	send_tagged(0, 1, 5, 300); /* exact 1 (older than wildcard 3) */
	send_tagged(0, 1, 9, 400); /* only wildcard 3 is left */
	et_cq_wait(1, e, NULL, 4);
	cr_assert_eq(e[0].op_context, &ctx[0]);
	cr_assert_eq(e[1].op_context, &ctx[2]);
	cr_assert_eq(e[2].op_context, &ctx[1]);
	cr_assert_eq(e[3].op_context, &ctx[3]);
	cr_assert_eq(v[0], 100);
	cr_assert_eq(v[2], 200);
	cr_assert_eq(v[1], 300);
	cr_assert_eq(v[3], 400);
	cr_assert_eq(et[1].ep->tme.nexact, 0);
}

Test(tme, unexpected_in_arrival_order)
{
	uint64_t v[6] = { 0 };
	struct fi_cq_tagged_entry e[6];

	/* two peers interleave; same tag: arrival order decides */
	for (int i = 0; i < 3; i++) {
		send_tagged(0, 2, 42, 10 + i);
		et_progress(2);
		send_tagged(1, 2, 42, 20 + i);
		et_progress(2);
	}
	for (int i = 0; i < 6; i++)
		cr_assert_eq(et_recv(2, FI_ADDR_UNSPEC, &v[i], 8, 42, 0,
				     &ctx[i], FI_TAGGED), 0);
	et_cq_wait(2, e, NULL, 6);
	for (int i = 0; i < 6; i++)
		cr_assert_eq(v[i], (i % 2 ? 20 : 10) + i / 2, "message %d: %lu",
			     i, (unsigned long)v[i]);
	/* an exact receive on another tag never takes one of these */
	cr_assert_eq(et_recv(2, FI_ADDR_UNSPEC, &v[0], 8, 43, 0, &ctx[7],
			     FI_TAGGED), 0);
	cr_assert_eq(et_cq_read(2, e, NULL), 0);
}

Test(tme, peek_claim_then_receive)
{
	struct fi_context fc;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint64_t v = 0, w = 0;

	send_tagged(0, 1, 9, 77);
	et_progress(3);
	/* peek finds it without taking it; the claim reserves it */
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, NULL, 0, 9, 0, &fc,
			     FI_TAGGED | FI_PEEK | FI_CLAIM), 0);
	cr_assert(et_cq_read(1, &e, NULL));
	cr_assert_eq(e.op_context, &fc);
	cr_assert_eq(e.len, 8);
	/* a plain receive passes over the claimed message */
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &w, 8, 9, 0, &ctx[1],
			     FI_TAGGED), 0);
	cr_assert_eq(et_cq_read(1, &e, NULL), 0);
	/* the claiming receive takes it */
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v, 8, 9, 0, &fc,
			     FI_TAGGED | FI_CLAIM), 0);
	cr_assert(et_cq_read(1, &e, NULL));
	cr_assert_eq(e.op_context, &fc);
	cr_assert_eq(v, 77);
	cr_assert_eq(w, 0);
	/* a peek that finds nothing completes with FI_ENOMSG */
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, NULL, 0, 1234, 0, &ctx[2],
			     FI_TAGGED | FI_PEEK), 0);
	cr_assert(et_cq_err(1, &err));
	cr_assert_eq(err.err, FI_ENOMSG);
	/* a claim with nothing claimed fails */
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v, 8, 9, 0, &ctx[3],
			     FI_TAGGED | FI_CLAIM), -FI_ENOMSG);
}

Test(tme, cancel)
{
	uint64_t v = 0;
	struct fi_cq_tagged_entry e;
	struct ntx_req *r;

	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v, 8, 3, 0, &ctx[0],
			     FI_TAGGED), 0);
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, &v, 8, 0, 0, &ctx[1], 0), 0);
	cr_assert_eq(et[1].ep->tme.nexact, 1);
	r = ntx_tme_cancel(&et[1].ep->tme, &ctx[0]);
	cr_assert_not_null(r);
	cr_assert_eq(r->context, &ctx[0]);
	ntx_req_put(r);
	cr_assert_eq(et[1].ep->tme.nexact, 0);
	cr_assert_null(ntx_tme_cancel(&et[1].ep->tme, &ctx[0]));
	/* the message now waits unexpected instead */
	send_tagged(0, 1, 3, 5);
	et_progress(3);
	cr_assert_eq(et_cq_read(1, &e, NULL), 0);
	cr_assert_eq(v, 0);
	cr_assert(!ntx_list_empty(&et[1].ep->tme.unexp[1]));
	/* the untagged one is still posted and cancels too */
	r = ntx_tme_cancel(&et[1].ep->tme, &ctx[1]);
	cr_assert_not_null(r);
	ntx_req_put(r);
}
