/*
 * Requests: a pool per endpoint (no malloc once warm) and the id table that
 * lets a peer name a request on the wire without ever handing it a pointer.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_engine.h"

static int ntx_reqtab_grow(struct ntx_ep *ep)
{
	uint32_t cap = ep->reqtab_cap ? ep->reqtab_cap * 2 : 256;
	struct ntx_req **tab = realloc(ep->reqtab, cap * sizeof(*tab));

	if (!tab)
		return -FI_ENOMEM;
	ep->reqtab = tab;
	for (uint32_t i = ep->reqtab_cap; i < cap; i++) {
		struct ntx_req *r = calloc(1, sizeof(*r));

		if (!r)
			return -FI_ENOMEM;
		r->id = i; /* generation bits added on every use */
		r->ep = ep;
		tab[i] = r;
		ep->reqtab_cap = i + 1;
		ntx_list_insert_tail(&ep->req_free, &r->entry);
	}
	return 0;
}

struct ntx_req *ntx_req_get(struct ntx_ep *ep, enum ntx_req_kind kind)
{
	struct ntx_req *r;
	uint64_t idx;
	uint8_t *bounce;

	if (ntx_list_empty(&ep->req_free) && ntx_reqtab_grow(ep))
		return NULL;
	r = ntx_container_of(ntx_list_first(&ep->req_free), struct ntx_req,
			     entry);
	ntx_list_remove(&r->entry);
	idx = r->id & 0xffffffffu;
	bounce = r->bounce;
	memset(r, 0, offsetof(struct ntx_req, iov));
	ntx_list_init(&r->entry);
	r->bounce = bounce;
	r->ep = ep;
	r->kind = kind;
	r->id = idx | ((uint64_t)++ep->req_gen << 32);
	r->addr = FI_ADDR_UNSPEC;
	return r;
}

void ntx_req_put(struct ntx_req *r)
{
	/* a new generation makes late packets naming this id miss */
	r->id = (r->id & 0xffffffffu);
	r->state = NTX_RS_NEW;
	ntx_list_insert_head(&r->ep->req_free, &r->entry);
}

struct ntx_req *ntx_req_lookup(struct ntx_ep *ep, uint64_t id)
{
	uint32_t idx = (uint32_t)id;
	struct ntx_req *r;

	if (idx >= ep->reqtab_cap)
		return NULL;
	r = ep->reqtab[idx];
	return (r->id == id && r->state != NTX_RS_NEW) ? r : NULL;
}

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

int ntx_req_bounce(struct ntx_req *r)
{
	/* kept with the pooled request: allocated once per slot */
	if (!r->bounce && !(r->bounce = malloc(NTX_BOUNCE_SIZE)))
		return -FI_ENOMEM;
	return 0;
}
