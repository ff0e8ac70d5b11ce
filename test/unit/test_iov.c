/* The iovec cursor and the walks built on it (prov/core/ntx_iov.c,
 * DESIGN §3): empty arrays, zero-length entries, offsets across entries,
 * slices at every boundary, lengths past the end. */
#include <criterion/criterion.h>

#include "config.h"
#include "ntx/ntx_core.h"

#define TOTAL 23
static uint8_t buf[TOTAL];
static uint8_t src[64];
/* lengths 0, 5, 0, 0, 1, 7, 0, 10: zero-length entries at the start, in
 * runs, and a one-byte entry */
static const size_t lens[] = { 0, 5, 0, 0, 1, 7, 0, 10 };
#define NIOV (sizeof(lens) / sizeof(lens[0]))
static struct iovec iov[NIOV];

static void setup(void)
{
	size_t off = 0;

	for (size_t i = 0; i < NIOV; i++) {
		iov[i].iov_base = buf + off;
		iov[i].iov_len = lens[i];
		off += lens[i];
	}
	cr_assert_eq(off, TOTAL);
	memset(buf, 0, sizeof(buf));
	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i + 1);
}

TestSuite(iov, .init = setup);

Test(iov, empty_array)
{
	struct ntx_iov_cur c;
	struct iovec chunk, out[2];
	size_t n = 9;

	ntx_iov_cur_init(&c, NULL, 0);
	cr_assert_eq(ntx_iov_cur_next(&c, 10, &chunk), 0);
	cr_assert_eq(ntx_iov_cur_skip(&c, 10), 0);
	cr_assert_eq(ntx_iov_cur_copy_in(&c, src, 10), 0);
	cr_assert_eq(ntx_iov_cur_slice(&c, 10, out, 2, &n), 0);
	cr_assert_eq(n, 0);
	cr_assert_eq(ntx_iov_len(NULL, 0), 0);
	cr_assert_eq(ntx_iov_copy_from(buf, NULL, 0, 5), 0);
	cr_assert_eq(ntx_iov_slice(NULL, 0, 0, 4, out, &n), 0);
	cr_assert_eq(n, 0);
}

Test(iov, only_zero_length_entries)
{
	struct iovec z[3] = { { buf, 0 }, { buf, 0 }, { buf, 0 } };
	struct ntx_iov_cur c;
	struct iovec chunk;

	ntx_iov_cur_init(&c, z, 3);
	cr_assert_eq(ntx_iov_cur_next(&c, 1, &chunk), 0);
	cr_assert_eq(c.idx, 3);
	cr_assert_eq(ntx_iov_copy_to(z, 3, 0, src, 4), 0);
}

Test(iov, chunks_skip_zero_length_entries)
{
	struct ntx_iov_cur c;
	struct iovec chunk;
	size_t want_idx[] = { 1, 4, 5, 7 }, k = 0, m;

	ntx_iov_cur_init(&c, iov, NIOV);
	while ((m = ntx_iov_cur_next(&c, SIZE_MAX, &chunk))) {
		cr_assert_lt(k, 4);
		cr_assert_eq(c.idx, want_idx[k], "chunk %zu from entry %zu",
			     k, c.idx);
		cr_assert_eq(chunk.iov_base, iov[c.idx].iov_base);
		cr_assert_eq(m, iov[c.idx].iov_len);
		k++;
	}
	cr_assert_eq(k, 4);
	/* max bounds a chunk; 0 asks for nothing */
	ntx_iov_cur_init(&c, iov, NIOV);
	cr_assert_eq(ntx_iov_cur_next(&c, 0, &chunk), 0);
	cr_assert_eq(ntx_iov_cur_next(&c, 3, &chunk), 3);
	cr_assert_eq(ntx_iov_cur_next(&c, 3, &chunk), 2);
	cr_assert_eq(chunk.iov_base, buf + 3);
}

/* Every (offset, length), with lengths reaching past the end: copy_to
 * writes exactly the bytes [off, min(off + len, TOTAL)) and
 * copy_from/slice see the same bytes. */
Test(iov, copies_at_every_offset_and_length)
{
	for (size_t off = 0; off <= TOTAL + 2; off++) {
		for (size_t len = 0; len <= TOTAL + 4; len++) {
			size_t end = off + len < TOTAL ? off + len : TOTAL;
			size_t want = off < TOTAL ? end - off : 0, n;
			uint8_t back[64];

			memset(buf, 0, sizeof(buf));
			n = ntx_iov_copy_to(iov, NIOV, off, src, len);
			cr_assert_eq(n, want, "off %zu len %zu: %zu", off, len,
				     n);
			for (size_t i = 0; i < TOTAL; i++) {
				uint8_t e = i >= off && i < off + want
						    ? src[i - off] : 0;
				cr_assert_eq(buf[i], e, "off %zu len %zu byte "
					     "%zu", off, len, i);
			}
			struct ntx_iov_cur c;

			ntx_iov_cur_init(&c, iov, NIOV);
			cr_assert_eq(ntx_iov_cur_skip(&c, off),
				     off < TOTAL ? off : TOTAL);
			memset(back, 0xee, sizeof(back));
			cr_assert_eq(ntx_iov_cur_copy_out(&c, back, len), want);
			cr_assert_eq(memcmp(back, src, want), 0);
			cr_assert_eq(back[want], 0xee, "copied past the end");
		}
	}
}

Test(iov, copy_from_stops_at_total)
{
	uint8_t out[40];

	for (size_t i = 0; i < TOTAL; i++)
		buf[i] = (uint8_t)(100 + i);
	memset(out, 0, sizeof(out));
	cr_assert_eq(ntx_iov_copy_from(out, iov, NIOV, 40), TOTAL);
	for (size_t i = 0; i < TOTAL; i++)
		cr_assert_eq(out[i], 100 + i);
	cr_assert_eq(out[TOTAL], 0);
}

Test(iov, slices_at_every_boundary)
{
	for (size_t off = 0; off <= TOTAL; off++) {
		for (size_t len = 0; len <= TOTAL + 1 - off; len++) {
			struct iovec out[NIOV];
			size_t n, got, sum = 0, want;
			uint8_t *p;

			want = off + len < TOTAL ? len : TOTAL - off;
			got = ntx_iov_slice(iov, NIOV, off, len, out, &n);
			cr_assert_eq(got, want, "off %zu len %zu", off, len);
			cr_assert_leq(n, 4, "only non-empty entries");
			p = buf + off;
			for (size_t i = 0; i < n; i++) {
				/* runs are adjacent here (one buffer) and
				 * none is empty */
				cr_assert_gt(out[i].iov_len, 0);
				cr_assert_eq(out[i].iov_base, p);
				p += out[i].iov_len;
				sum += out[i].iov_len;
			}
			cr_assert_eq(sum, want);
		}
	}
}

Test(iov, slice_bounded_by_out_entries)
{
	struct ntx_iov_cur c;
	struct iovec out[2];
	size_t n;

	ntx_iov_cur_init(&c, iov, NIOV);
	ntx_iov_cur_skip(&c, 2);
	/* 3 bytes of entry 1, the one byte of entry 4; entry 5 does not
	 * fit in out */
	cr_assert_eq(ntx_iov_cur_slice(&c, 20, out, 2, &n), 4);
	cr_assert_eq(n, 2);
	cr_assert_eq(out[0].iov_base, buf + 2);
	cr_assert_eq(out[1].iov_len, 1);
	/* the cursor stopped where the slice did */
	cr_assert_eq(ntx_iov_cur_slice(&c, 20, out, 2, &n), 17);
	cr_assert_eq(out[0].iov_base, buf + 6);
}

Test(iov, one_entry_fast_path)
{
	struct iovec one = { buf, 8 };

	cr_assert_eq(ntx_iov_copy_to(&one, 1, 3, src, 5), 5);
	cr_assert_eq(memcmp(buf + 3, src, 5), 0);
	/* past the entry: only what fits */
	memset(buf, 0, sizeof(buf));
	cr_assert_eq(ntx_iov_copy_to(&one, 1, 6, src, 5), 2);
	cr_assert_eq(buf[8], 0);
	cr_assert_eq(ntx_iov_copy_to(&one, 1, 9, src, 1), 0);
	/* an offset so large that off + len wraps */
	cr_assert_eq(ntx_iov_copy_to(&one, 1, SIZE_MAX, src, 2), 0);
}
