/*
 * Walks over iovec arrays: length, copies in and out, slices.
 */
#include "config.h"

#include "ntx/ntx_core.h"

size_t ntx_iov_len(const struct iovec *iov, size_t count)
{
	size_t len = 0;

	for (size_t i = 0; i < count; i++)
		len += iov[i].iov_len;
	return len;
}

/* Copies len bytes from src into the iovecs starting at byte off. */
size_t ntx_iov_copy_to(const struct iovec *iov, size_t count, size_t off,
		       const void *src, size_t len)
{
	const uint8_t *s = src;
	size_t done = 0;

	if (count == 1 && off + len <= iov[0].iov_len) { /* the common case */
		memcpy((uint8_t *)iov[0].iov_base + off, src, len);
		return len;
	}
	for (size_t i = 0; i < count && done < len; i++) {
		size_t m;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		m = iov[i].iov_len - off;
		if (m > len - done)
			m = len - done;
		memcpy((uint8_t *)iov[i].iov_base + off, s + done, m);
		done += m;
		off = 0;
	}
	return done;
}

size_t ntx_iov_copy_from(void *dst, const struct iovec *iov, size_t count,
			 size_t len)
{
	uint8_t *d = dst;
	size_t done = 0;

	for (size_t i = 0; i < count && done < len; i++) {
		size_t m = iov[i].iov_len < len - done ? iov[i].iov_len
						       : len - done;
		memcpy(d + done, iov[i].iov_base, m);
		done += m;
	}
	return done;
}

/* The bytes [off, off + len) of an iovec array, as an iovec array. */
size_t ntx_iov_slice(const struct iovec *iov, size_t iov_count, size_t off,
		     size_t len, struct iovec *out, size_t *count)
{
	size_t n = 0, got = 0;

	for (size_t i = 0; i < iov_count && got < len; i++) {
		size_t m;

		if (off >= iov[i].iov_len) {
			off -= iov[i].iov_len;
			continue;
		}
		m = iov[i].iov_len - off;
		if (m > len - got)
			m = len - got;
		out[n].iov_base = (uint8_t *)iov[i].iov_base + off;
		out[n].iov_len = m;
		n++;
		got += m;
		off = 0;
	}
	*count = n;
	return got;
}
