/* The iovec cursor through the engine (DESIGN §3): eager and streamed
 * rendezvous messages between multi-iovec buffers whose boundaries do
 * not line up with each other nor with the DATA segments, byte-exact,
 * and nothing written outside the buffers. */
#include "config.h"
#include <stdlib.h>

#include "ntx_et.h"

static void setup(void)
{
	et_open(2);
}

static void teardown(void)
{
	et_close();
}

TestSuite(eiov, .init = setup, .fini = teardown, .timeout = 30);

#define GUARD 0xa5
#define GAP 3 /* guard bytes between the entries of one arena */

struct arena {
	uint8_t *mem;
	size_t size;
	struct iovec iov[NTX_MAX_IOV];
	size_t n, len;
};

/* iovecs of the given lengths in one guarded allocation */
static void arena_init(struct arena *a, const size_t *lens, size_t n)
{
	size_t off = GAP;

	a->size = GAP;
	for (size_t i = 0; i < n; i++)
		a->size += lens[i] + GAP;
	a->mem = malloc(a->size);
	cr_assert_not_null(a->mem);
	memset(a->mem, GUARD, a->size);
	a->n = n;
	a->len = 0;
	for (size_t i = 0; i < n; i++) {
		a->iov[i].iov_base = a->mem + off;
		a->iov[i].iov_len = lens[i];
		off += lens[i] + GAP;
		a->len += lens[i];
	}
}

static void arena_fill(struct arena *a, int seed)
{
	size_t k = 0;

	for (size_t i = 0; i < a->n; i++)
		for (size_t j = 0; j < a->iov[i].iov_len; j++, k++)
			((uint8_t *)a->iov[i].iov_base)[j] =
				(uint8_t)(seed + k * 13 + k / 251);
}

/* Bytes of the message, in order, compared with what the receive got;
 * the first 'got' bytes of the receive's iovecs hold the message and the
 * rest (and every guard) are untouched. */
static void arena_check(struct arena *tx, struct arena *rx, size_t got)
{
	uint8_t *want = malloc(tx->len + 1), *have = malloc(rx->len + 1);
	size_t off = GAP;

	ntx_iov_copy_from(want, tx->iov, tx->n, tx->len);
	ntx_iov_copy_from(have, rx->iov, rx->n, rx->len);
	for (size_t k = 0; k < got; k++)
		cr_assert_eq(have[k], want[k], "byte %zu of %zu", k, got);
	for (size_t k = got; k < rx->len; k++)
		cr_assert_eq(have[k], GUARD, "byte %zu written past %zu", k,
			     got);
	for (size_t i = 0; i < rx->n; i++) {
		for (size_t g = 0; g < GAP; g++)
			cr_assert_eq(rx->mem[off - GAP + g], GUARD,
				     "guard before entry %zu", i);
		off += rx->iov[i].iov_len + GAP;
	}
	cr_assert_eq(rx->mem[rx->size - 1], GUARD);
	free(want);
	free(have);
}

static void move(const size_t *tl, size_t tn, const size_t *rl, size_t rn,
		 bool recv_first)
{
	struct arena tx, rx;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	size_t got;
	int ctx;

	arena_init(&tx, tl, tn);
	arena_init(&rx, rl, rn);
	arena_fill(&tx, (int)(tn * 7 + rn));
	got = tx.len < rx.len ? tx.len : rx.len;
	if (recv_first)
		cr_assert_eq(et_recvv(1, FI_ADDR_UNSPEC, rx.iov, rx.n, 0, 0,
				      &ctx, 0), 0);
	cr_assert_eq(et_sendv(0, 1, tx.iov, tx.n, 0, NULL, 0), 0);
	et_progress(2);
	if (!recv_first)
		cr_assert_eq(et_recvv(1, FI_ADDR_UNSPEC, rx.iov, rx.n, 0, 0,
				      &ctx, 0), 0);
	for (int r = 0; r < 200 && !et[1].cq.count &&
			ntx_list_empty(&et[1].cq.errs); r++)
		et_progress(1);
	if (got < tx.len) { /* truncated: an error completion */
		cr_assert(et_cq_err(1, &err));
		cr_assert_eq(err.err, FI_ETRUNC);
		cr_assert_eq(err.olen, tx.len - got);
	} else {
		cr_assert(et_cq_read(1, &e, NULL));
		cr_assert_eq(e.op_context, &ctx);
		cr_assert_eq(e.len, tx.len);
	}
	arena_check(&tx, &rx, got);
	free(tx.mem);
	free(rx.mem);
}

/* eager: at most NTX_LOOP_MTU bytes */
static const size_t e_tx[] = { 3, 0, 1000, 17, 1, 600 };
static const size_t e_rx[] = { 1, 513, 0, 7, 1099, 1 };

Test(eiov, eager_into_odd_iovecs)
{
	move(e_tx, 6, e_rx, 6, true);
	move(e_tx, 6, e_rx, 6, false); /* through the unexpected copy */
}

Test(eiov, eager_one_iovec_both_ways)
{
	static const size_t one[] = { 1621 };

	move(one, 1, e_rx, 6, true);
	move(e_tx, 6, one, 1, true);
}

Test(eiov, eager_truncated)
{
	static const size_t small[] = { 5, 0, 900 };

	move(e_tx, 6, small, 3, true);
}

/* rendezvous: DATA segments of NTX_LOOP_MTU cross the entries */
static const size_t r_tx[] = { 4097, 1, 0, 3, 5899, 2047, 2049, 11 };
static const size_t r_rx[] = { 1, 2048, 2047, 4099, 0, 3, 6000, 1910 };

Test(eiov, rendezvous_streamed_into_odd_iovecs)
{
	move(r_tx, 8, r_rx, 8, true);
	move(r_tx, 8, r_rx, 8, false);
}

Test(eiov, rendezvous_truncated)
{
	static const size_t small[] = { 2048, 1, 2049, 5 };

	move(r_tx, 8, small, 4, true);
}

Test(eiov, multi_recv_places_messages_back_to_back)
{
	static uint8_t buf[300], m[3][100];
	static const size_t lens[3] = { 100, 50, 90 };
	struct fi_cq_tagged_entry e[3];
	int ctx;

	memset(buf, GUARD, sizeof(buf));
	for (int i = 0; i < 3; i++)
		memset(m[i], i + 1, sizeof(m[i]));
	cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, buf, sizeof(buf), 0, 0, &ctx,
			     FI_MULTI_RECV), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(et_send(0, 1, m[i], lens[i], 0, NULL, 0), 0);
	et_progress(3);
	for (int i = 0; i < 3; i++)
		cr_assert(et_cq_read(1, &e[i], NULL), "completion %d", i);
	cr_assert_eq(e[0].buf, buf);
	cr_assert_eq(e[1].buf, buf + 100);
	cr_assert_eq(e[2].buf, buf + 150);
	/* 60 bytes left, under min_multi_recv (64): released */
	cr_assert_not(e[1].flags & FI_MULTI_RECV);
	cr_assert(e[2].flags & FI_MULTI_RECV);
	for (size_t k = 0; k < 300; k++)
		cr_assert_eq(buf[k], k < 100 ? 1 : k < 150 ? 2 : k < 240 ? 3
							       : GUARD,
			     "byte %zu", k);
}
