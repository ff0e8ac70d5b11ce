/*
 * Readiness of a file descriptor (a back end's epoll set) learned without
 * a system call on the poll path: the kernel posts an io_uring completion
 * when the fd becomes readable, and the poller looks at the completion
 * ring in its own memory. Where io_uring is not allowed, a time gate
 * (NTX_FDWATCH_GATE_NS) says when to look instead.
 */
#ifndef NTX_FDWATCH_H
#define NTX_FDWATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* fallback: the longest a remote peer's first packet waits to be seen */
#define NTX_FDWATCH_GATE_NS 20000u

struct ntx_fdwatch {
	int ring_fd; /* -1: no io_uring, time gate */
	int fd;      /* the watched fd */
	void *sq_map, *cq_map, *sqe_map;
	size_t sq_len, cq_len, sqe_len;
	_Atomic uint32_t *sq_tail;
	uint32_t *sq_array, sq_mask;
	_Atomic uint32_t *cq_head, *cq_tail;
	uint32_t cq_mask;
	void *cqes;
	bool armed;       /* a poll is queued in the kernel */
	uint64_t next_ns; /* time gate */
};

/* Watches fd (never fails: falls back to the time gate). */
void ntx_fdwatch_open(struct ntx_fdwatch *w, int fd);
void ntx_fdwatch_close(struct ntx_fdwatch *w);
/* Consumes the news; true when fd may be readable. The caller then
 * drains fd (until EAGAIN) and calls ntx_fdwatch_rearm. */
bool ntx_fdwatch_news(struct ntx_fdwatch *w);
/* Watches again after news (a no-op while a watch is queued). */
void ntx_fdwatch_rearm(struct ntx_fdwatch *w);
/* Cheap test for the poll path: is there any news? */
static inline bool ntx_fdwatch_pending(const struct ntx_fdwatch *w)
{
	if (w->ring_fd < 0)
		return true; /* ntx_fdwatch_news applies the time gate */
	/* acquire: pairs with the kernel's release of the completion */
	return atomic_load_explicit(w->cq_tail, memory_order_acquire) !=
	       atomic_load_explicit(w->cq_head, memory_order_relaxed);
}

#endif /* NTX_FDWATCH_H */
