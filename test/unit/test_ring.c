/* Unit tests of the ring math and window layout (ntx_ring.h). */
#include <criterion/criterion.h>
#include <stddef.h>

#include "ntx_ring.h"

/* A model sender and receiver: every entry written is read back in order,
 * in place, never overlapping a line the receiver has not consumed. */
Test(ring, entries_of_every_size_go_round_without_overlap)
{
	const uint32_t n = 96;
	uint32_t owner[96]; /* which entry a line belongs to, 0 = free */
	uint32_t pos = 0, cons = 0, seq = 0, rseq = 0, rpos = 0;
	uint32_t sizes[] = { 0, 8, 64, 65, 700, 2000, 2200 };
	uint32_t inflight[64][2], head = 0, tail = 0; /* (pos, lines) */

	memset(owner, 0, sizeof(owner));
	for (uint32_t i = 0; i < 5000; i++) {
		uint32_t len = sizes[i % 7], lines = ntx_ring_lines(len);

		cr_assert_leq(len, ntx_ring_max_payload(n));
		while (!ntx_ring_room(pos, cons, lines, n)) {
			/* the receiver consumes the oldest entry */
			cr_assert_neq(head, tail, "no room in an empty ring");
			uint32_t p = inflight[tail % 64][0],
				 l = inflight[tail % 64][1];
			tail++;
			/* in order, after a skip from rpos to line 0 */
			cr_assert(p == rpos ||
				  (p == 0 && ntx_ring_wraps(rpos, l, n)),
				  "entry at %u read at %u", p, rpos);
			for (uint32_t k = 0; k < l; k++)
				owner[p + k] = 0;
			rpos = cons = ntx_ring_advance(p, l, n);
			rseq++;
		}
		if (ntx_ring_wraps(pos, lines, n))
			pos = 0; /* skip: the receiver follows it to line 0 */
		cr_assert_leq(pos + lines, n, "an entry never wraps");
		cr_assert_eq(pos % NTX_RING_ALIGN, 0, "entries start on a block");
		for (uint32_t k = 0; k < lines; k++) {
			cr_assert_eq(owner[pos + k], 0, "line %u still in use",
				     pos + k);
			owner[pos + k] = ++seq;
		}
		/* the line after the entry is free: never all n lines used */
		cr_assert_eq(owner[ntx_ring_advance(pos, lines, n)], 0);
		inflight[head % 64][0] = pos;
		inflight[head % 64][1] = lines;
		head++;
		pos = ntx_ring_advance(pos, lines, n);
	}
	cr_assert_gt(rseq, 1000);
}

Test(ring, positions_and_room)
{
	const uint32_t A = NTX_RING_ALIGN;

	cr_assert_eq(ntx_ring_lines(0), A, "a header alone takes a block");
	cr_assert_eq(ntx_ring_lines(16), A);
	cr_assert_eq(ntx_ring_lines((A - 1) * 64), A);
	cr_assert_eq(ntx_ring_lines((A - 1) * 64 + 1), 2 * A);
	cr_assert_eq(ntx_ring_used(8, 8, 32), 0, "equal means empty");
	cr_assert_eq(ntx_ring_used(4, 28, 32), 8, "wrapped distance");
	cr_assert_eq(ntx_ring_advance(28, 8, 32), 4);
	cr_assert(ntx_ring_room(0, 0, 28, 32), "all but one block fit");
	cr_assert_not(ntx_ring_room(0, 0, 32, 32), "one block stays free");
	cr_assert(ntx_ring_wraps(24, 12, 32));
	cr_assert_not(ntx_ring_room(24, 8, 12, 32),
		      "a skip of 8 and an entry of 12 need 21 of 16 free lines");
	cr_assert(ntx_ring_room(24, 24, 12, 32));
	cr_assert(ntx_ring_lines_valid(384));
	cr_assert_not(ntx_ring_lines_valid(36), "not whole blocks of 8");
	/* the largest entry fits an empty ring wherever it starts */
	for (uint32_t p = 0; p < 32; p += A)
		cr_assert(ntx_ring_room(p, p,
					ntx_ring_lines(ntx_ring_max_payload(32)),
					32), "at %u", p);
}

Test(ring, shared_layouts_are_cache_line_multiples)
{
	struct ntx_win_geom g;

	cr_assert_eq(sizeof(struct ntx_win_hdr) % NTX_CACHELINE, 0);
	cr_assert_eq(sizeof(struct ntx_win_cell), NTX_CACHELINE);
	cr_assert_eq(sizeof(struct ntx_win_ctl), 2 * NTX_CACHELINE);
	cr_assert_eq(offsetof(struct ntx_win_ctl, cons) % NTX_CACHELINE, 0);
	cr_assert_eq(sizeof(struct ntx_win_entry), NTX_CACHELINE);
	ntx_win_geom_init(&g, 256, 384, 0);
	cr_assert_eq(g.bits_off % NTX_CACHELINE, 0);
	cr_assert_eq(g.cells_off % NTX_CACHELINE, 0);
	cr_assert_geq(g.cells_off - g.bits_off, 256 / 8, "a bit per slot");
	cr_assert_eq(g.ctl_off % NTX_CACHELINE, 0);
	cr_assert_eq(g.ring_off % NTX_WIN_PAGE, 0, "rings are page aligned");
	cr_assert_eq(g.ring_size, 24576);
	cr_assert_eq(g.size, g.ring_off + 256 * g.ring_size);
	/* bulk areas after the rings, page aligned, one per slot */
	ntx_win_geom_init(&g, 256, 392, 131072);
	cr_assert_eq(g.bulk_off % NTX_WIN_PAGE, 0);
	cr_assert_geq(g.bulk_off, g.ring_off + 256 * g.ring_size);
	cr_assert_eq(g.size, g.bulk_off + 256 * 131072ul);
	cr_assert_eq(ntx_win_bulk_seg(131072), 16384);
	cr_assert_eq(ntx_win_bulk_seg(8192), 2048);
	cr_assert_eq(ntx_win_bulk_seg(0), 0);
	cr_assert_eq(offsetof(struct ntx_win_ctl, bulk_cons) / NTX_CACHELINE,
		     offsetof(struct ntx_win_ctl, cons) / NTX_CACHELINE,
		     "both consumer positions on one line");
}

/* Where a bulk payload lies: right after what went by, or at the start
 * when it would cross the end, the rest of that lap counted as skipped. */
Test(ring, bulk_payloads_follow_each_other_and_never_cross_the_end)
{
	const uint32_t size = 131072;
	uint32_t skip;

	cr_assert_eq(ntx_win_bulk_place(0, size, 16384, &skip), 0);
	cr_assert_eq(skip, 0);
	cr_assert_eq(ntx_win_bulk_place(112 << 10, size, 16384, &skip),
		     112 << 10);
	cr_assert_eq(skip, 0, "it ends right at the area's end");
	cr_assert_eq(ntx_win_bulk_place(120 << 10, size, 16384, &skip), 0);
	cr_assert_eq(skip, 8192, "the lap's last 8 KiB stay unused");
	cr_assert_eq(ntx_win_bulk_place(3 * (uint64_t)size + 64, size, 100,
					&skip), 64);
	cr_assert_eq(skip, 0, "free running over laps");
}

/* The receiver only ever finds its next sequence number in a header the
 * sender wrote for it. A model of one ring: the sender fills payload lines
 * with data that looks like sequence numbers, the receiver clears the
 * payload lines it consumed, and the two interleave in a fixed
 * pseudo-random order. Wherever the receiver probes, a payload line must
 * read 0, and a match must be a real header. */
enum { LINE_HDR = 1, LINE_PAY = 2 };

Test(ring, stale_payload_never_reads_as_the_next_header)
{
	const uint32_t n = 40;
	uint32_t word[40], kind[40], span[40];
	uint32_t pos = 0, seq = 0;             /* sender */
	uint32_t rpos = 0, rseq = 0, cons = 0; /* receiver */
	uint32_t sizes[] = { 0, 100, 300, 64, 1000, 8 }, rnd = 12345;

	memset(word, 0, sizeof(word));
	memset(kind, 0, sizeof(kind));
	while (rseq < 5000) {
		rnd = rnd * 1103515245u + 12345u;
		if ((rnd >> 16) & 1) { /* the sender writes one entry */
			uint32_t len = sizes[(rnd >> 20) % 6],
				 lines = ntx_ring_lines(len);

			if (!ntx_ring_room(pos, cons, lines, n))
				continue;
			if (ntx_ring_wraps(pos, lines, n)) {
				word[pos] = ++seq;
				kind[pos] = LINE_HDR;
				span[pos] = 0; /* skip: to line 0 */
				pos = 0;
			}
			for (uint32_t k = 1; k < lines; k++) {
				word[pos + k] = seq + k; /* looks like a header */
				kind[pos + k] = LINE_PAY;
			}
			word[pos] = ++seq;
			kind[pos] = LINE_HDR;
			span[pos] = lines;
			pos = ntx_ring_advance(pos, lines, n);
			continue;
		}
		/* the receiver probes its next line */
		cr_assert(kind[rpos] != LINE_PAY || word[rpos] == 0,
			  "line %u: uncleared payload where a header is due",
			  rpos);
		if (word[rpos] != rseq + 1)
			continue;
		cr_assert_eq(kind[rpos], LINE_HDR);
		rseq++;
		if (!span[rpos]) {
			rpos = 0;
		} else {
			/* only where an entry can start */
			for (uint32_t k = NTX_RING_ALIGN; k < span[rpos];
			     k += NTX_RING_ALIGN)
				word[rpos + k] = 0;
			rpos = ntx_ring_advance(rpos, span[rpos], n);
		}
		cons = rpos;
	}
	cr_assert_eq(rseq, 5000);
}

/* The receiver publishes its consumer position every quarter ring, so a
 * ring it has drained can look up to n/4 - 1 lines full: the largest
 * entry must still find room from every position, or its sender would
 * wait forever (the skip to the next lap included). */
Test(ring, the_largest_entry_fits_a_drained_ring_from_every_position)
{
	for (uint32_t n = 4 * NTX_RING_ALIGN; n <= 4096; n += 2 * NTX_RING_ALIGN) {
		uint32_t lines = ntx_ring_lines(ntx_ring_max_payload(n));

		cr_assert_leq(lines, n / 2, "n %u", n);
		for (uint32_t p = 0; p < n; p += NTX_RING_ALIGN)
			for (uint32_t u = 0; u < n / 4; u++)
				cr_assert(ntx_ring_room(p, (p + n - u) % n,
							lines, n),
					  "n %u: %u lines at %u, consumer %u "
					  "lines behind", n, lines, p, u);
	}
}
