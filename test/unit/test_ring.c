/* Unit tests of the ring index math and window layout (ntx_ring.h). */
#include <criterion/criterion.h>
#include <stddef.h>

#include "ntx_ring.h"

Test(ring, empty_and_full_differ_without_a_wasted_entry)
{
	uint32_t n = 8, prod = 0, cons = 0;

	cr_assert_eq(ntx_ring_used(prod, cons, n), 0);
	for (uint32_t i = 0; i < n; i++) {
		cr_assert_not(ntx_ring_full(prod, cons, n), "full after %u", i);
		prod = ntx_ring_next(prod, n);
	}
	cr_assert(ntx_ring_full(prod, cons, n));
	cr_assert_eq(ntx_ring_used(prod, cons, n), n);
	cr_assert_neq(prod, cons, "full must not look empty");
}

Test(ring, indices_wrap_over_twice_the_capacity)
{
	uint32_t n = 4, idx = 0;

	for (uint32_t i = 0; i < 2 * n; i++)
		idx = ntx_ring_next(idx, n);
	cr_assert_eq(idx, 0);
	cr_assert_eq(ntx_ring_entry(5, n), 1);
	cr_assert_eq(ntx_ring_used(1, 7, n), 2, "wrapped distance");
}

Test(ring, peer_indices_are_validated)
{
	uint32_t n = 16;

	cr_assert(ntx_ring_pair_valid(3, 0, n));
	cr_assert(ntx_ring_pair_valid(16, 0, n));
	cr_assert_not(ntx_ring_pair_valid(17, 0, n), "more than n ahead");
	cr_assert_not(ntx_ring_pair_valid(32, 0, n), "outside [0, 2n)");
	cr_assert_not(ntx_ring_pair_valid(0, 40, n), "consumer outside");
	cr_assert(ntx_ring_pair_valid(2, 30, n), "wrapped producer");
}

Test(ring, shared_layouts_are_cache_line_multiples)
{
	cr_assert_eq(sizeof(struct ntx_win_hdr) % NTX_CACHELINE, 0);
	cr_assert_eq(sizeof(struct ntx_win_cell), NTX_CACHELINE);
	cr_assert_eq(sizeof(struct ntx_win_slot) % NTX_CACHELINE, 0);
	cr_assert_eq(offsetof(struct ntx_win_slot, prod) % NTX_CACHELINE, 0);
	cr_assert_eq(offsetof(struct ntx_win_slot, cons) % NTX_CACHELINE, 0);
	cr_assert_neq(offsetof(struct ntx_win_slot, prod),
		      offsetof(struct ntx_win_slot, cons),
		      "producer and consumer indices share a line");
	cr_assert_eq(sizeof(struct ntx_win_entry), NTX_CACHELINE);
	cr_assert_eq(ntx_win_slot_size(64, 8256) % NTX_CACHELINE, 0);
}
