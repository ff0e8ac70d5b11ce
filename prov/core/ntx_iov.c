/*
 * Walks over iovec arrays (DESIGN §3): one cursor (an entry and an offset
 * in it) that every copy and slice moves, so that the rules about
 * zero-length entries, offsets past an entry and lengths past the end
 * live in one place: ntx_iov_cur_next.
 */
#include "config.h"

#include "ntx/ntx_core.h"


void ntx_iov_cur_init(struct ntx_iov_cur *c, const struct iovec *iov,
		      size_t count)
{
	c->iov = iov;
	c->count = count;
	c->idx = 0;
	c->off = 0;
}

size_t ntx_iov_cur_next(struct ntx_iov_cur *c, size_t max,
			struct iovec *chunk)
{
	size_t m;

	/* an entry used up (or empty) is left only when more is asked for,
	 * so after a call c->idx is the entry the chunk came from */
	while (c->idx < c->count && c->off >= c->iov[c->idx].iov_len) {
		c->idx++;
		c->off = 0;
	}
	if (c->idx == c->count || !max)
		return 0;
	m = c->iov[c->idx].iov_len - c->off;
	if (m > max)
		m = max;
	/* integer arithmetic: a peer's buffers (ntx_wire_iov_view) may name
	 * any address, and a pointer sum that wraps is undefined */
	chunk->iov_base = (void *)((uintptr_t)c->iov[c->idx].iov_base +
				   c->off);
	chunk->iov_len = m;
	c->off += m;
	return m;
}

size_t ntx_iov_cur_skip(struct ntx_iov_cur *c, size_t len)
{
	struct iovec chunk;
	size_t done = 0, m;

	while (done < len && (m = ntx_iov_cur_next(c, len - done, &chunk)))
		done += m;
	return done;
}

size_t ntx_iov_cur_copy_in(struct ntx_iov_cur *c, const void *src,
			   size_t len)
{
	const uint8_t *s = src;
	struct iovec chunk;
	size_t done = 0, m;

	while (done < len && (m = ntx_iov_cur_next(c, len - done, &chunk))) {
		memcpy(chunk.iov_base, s + done, m);
		done += m;
	}
	return done;
}

size_t ntx_iov_cur_copy_out(struct ntx_iov_cur *c, void *dst, size_t len)
{
	uint8_t *d = dst;
	struct iovec chunk;
	size_t done = 0, m;

	while (done < len && (m = ntx_iov_cur_next(c, len - done, &chunk))) {
		memcpy(d + done, chunk.iov_base, m);
		done += m;
	}
	return done;
}

size_t ntx_iov_cur_slice(struct ntx_iov_cur *c, size_t len,
			 struct iovec *out, size_t max_out, size_t *count)
{
	size_t n = 0, got = 0, m;

	while (got < len && n < max_out &&
	       (m = ntx_iov_cur_next(c, len - got, &out[n]))) {
		got += m;
		n++;
	}
	*count = n;
	return got;
}

/* Copies len bytes from src into the iovecs starting at byte off. */
size_t ntx_iov_copy_to_walk(const struct iovec *iov, size_t count,
			    size_t off, const void *src, size_t len)
{
	struct ntx_iov_cur c;

	ntx_iov_cur_init(&c, iov, count);
	if (ntx_iov_cur_skip(&c, off) < off)
		return 0;
	return ntx_iov_cur_copy_in(&c, src, len);
}

size_t ntx_iov_copy_from(void *dst, const struct iovec *iov, size_t count,
			 size_t len)
{
	struct ntx_iov_cur c;

	ntx_iov_cur_init(&c, iov, count);
	return ntx_iov_cur_copy_out(&c, dst, len);
}

/* The bytes [off, off + len) of an iovec array, as an iovec array (of at
 * most iov_count entries: a slice never has more than its source). */
size_t ntx_iov_slice(const struct iovec *iov, size_t iov_count, size_t off,
		     size_t len, struct iovec *out, size_t *count)
{
	struct ntx_iov_cur c;

	ntx_iov_cur_init(&c, iov, iov_count);
	if (ntx_iov_cur_skip(&c, off) < off) {
		*count = 0;
		return 0;
	}
	return ntx_iov_cur_slice(&c, len, out, iov_count, count);
}
