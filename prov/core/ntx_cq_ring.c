/*
 * The CQ ring (DESIGN §3, completions): the entries progress pushes and
 * fi_cq_read takes, in the application's format, and the error list. The
 * ring grows when full; entries are never dropped.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_core.h"

size_t ntx_cq_entry_size(enum fi_cq_format f)
{
	switch (f) {
	case FI_CQ_FORMAT_CONTEXT: return sizeof(struct fi_cq_entry);
	case FI_CQ_FORMAT_MSG: return sizeof(struct fi_cq_msg_entry);
	case FI_CQ_FORMAT_DATA: return sizeof(struct fi_cq_data_entry);
	case FI_CQ_FORMAT_TAGGED: return sizeof(struct fi_cq_tagged_entry);
	default: return 0;
	}
}

static int ntx_cq_grow(struct ntx_cq *cq)
{
	size_t cap = cq->cap * 2;
	struct ntx_cq_ent *ring = malloc(cap * sizeof(*ring));

	if (!ring)
		return -FI_ENOMEM;
	for (size_t i = 0; i < cq->count; i++)
		ring[i] = cq->ring[(cq->head + i) % cq->cap];
	free(cq->ring);
	cq->ring = ring;
	cq->cap = cap;
	cq->head = 0;
	return 0;
}

bool ntx_cq_room_for_peer(struct ntx_cq *cq)
{
	bool room;

	ntx_cmutex_lock(cq->domain, &cq->lock);
	room = cq->count < NTX_CQ_REMOTE_MAX;
	ntx_cmutex_unlock(cq->domain, &cq->lock);
	return room;
}

int ntx_cq_push_ring(struct ntx_cq *cq, void *ctx, uint64_t flags,
		     size_t len, void *buf, uint64_t data, uint64_t tag,
		     fi_addr_t src)
{
	ntx_cmutex_lock(cq->domain, &cq->lock);
	if (cq->count == cq->cap && ntx_cq_grow(cq)) {
		ntx_cmutex_unlock(cq->domain, &cq->lock);
		NTX_WARN(FI_LOG_CQ, "no memory to grow the CQ\n");
		return -FI_ENOMEM;
	}
	ntx_cq_append(cq, ctx, flags, len, buf, data, tag, src);
	ntx_cmutex_unlock(cq->domain, &cq->lock);
	return 0;
}

int ntx_cq_push_err(struct ntx_cq *cq, void *ctx, uint64_t flags, size_t len,
		    void *buf, uint64_t data, uint64_t tag, size_t olen,
		    int err, fi_addr_t src, const struct ntx_addr *err_addr)
{
	struct ntx_cq_err *e = calloc(1, sizeof(*e));

	if (!e) {
		NTX_WARN(FI_LOG_CQ, "no memory for an error completion\n");
		return -FI_ENOMEM;
	}
	e->e.op_context = ctx;
	e->e.flags = flags;
	e->e.len = len;
	e->e.buf = buf;
	e->e.data = data;
	e->e.tag = tag;
	e->e.olen = olen;
	e->e.err = err;
	e->e.prov_errno = err;
	e->src = src;
	if (err_addr) {
		e->err_addr = *err_addr;
		e->e.err_data = &e->err_addr;
		e->e.err_data_size = sizeof(e->err_addr);
	}
	ntx_cmutex_lock(cq->domain, &cq->lock);
	ntx_list_insert_tail(&cq->errs, &e->entry);
	ntx_signal_raise(&cq->wait.sig);
	ntx_cmutex_unlock(cq->domain, &cq->lock);
	return 0;
}
