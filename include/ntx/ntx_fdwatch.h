/*
 * Readiness of a file descriptor (a back end's epoll set, a socket, an
 * rdma_cm channel) learned without a system call on the poll path and
 * without interrupting the application (DESIGN §3, "No system call on the
 * poll path"): an io_uring poll on the fd, queued by ntx's own arming
 * thread, so that the kernel's task work goes to that thread; the ring's
 * IORING_SQ_TASKRUN flag and its completion queue, both in our memory,
 * say that the fd became readable. Where io_uring is not allowed, a time
 * gate (NTX_FDWATCH_GATE_NS) says when to look instead.
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
	void *sq_map, *sqe_map;
	size_t sq_len, sqe_len;
	_Atomic uint32_t *sq_tail, *sq_flags;
	uint32_t *sq_array, sq_mask;
	_Atomic uint32_t *cq_head, *cq_tail;
	bool taken;   /* the news was taken: the owner drains, then re-arms */
	bool waiting; /* the arming thread has not re-armed yet */
	uint32_t seq;                /* re-arms asked */
	_Atomic uint32_t armed_seq;  /* re-arms done by the arming thread */
	_Atomic bool failed;         /* the arming thread could not arm */
	bool queued;                 /* in the arming thread's list */
	struct ntx_fdwatch *next;    /* that list */
	uint64_t next_ns; /* time gate */
};

/* Watches fd (never fails: falls back to the time gate). */
void ntx_fdwatch_open(struct ntx_fdwatch *w, int fd);
/* Stops watching; call before closing fd. */
void ntx_fdwatch_close(struct ntx_fdwatch *w);
/* Consumes the news; true when fd may be readable. The caller then
 * drains fd (until EAGAIN) and calls ntx_fdwatch_rearm. */
bool ntx_fdwatch_news(struct ntx_fdwatch *w);
/* Watches again after news (a no-op while a watch is queued). */
void ntx_fdwatch_rearm(struct ntx_fdwatch *w);
/* Ends the arming thread (the provider's cleanup, before libfabric
 * unloads us); watches left open fall back to the time gate. */
void ntx_fdwatch_fini(void);
/* Cheap test for the poll path: is there any news? */
static inline bool ntx_fdwatch_pending(const struct ntx_fdwatch *w)
{
	if (w->ring_fd < 0 || w->waiting)
		return true; /* ntx_fdwatch_news applies the time gate */
	/* IORING_SQ_TASKRUN (1 << 2): the poll's completion is pending as
	 * the arming thread's task work; or it was posted already */
	return (atomic_load_explicit(w->sq_flags, memory_order_relaxed) &
		(1u << 2)) ||
	       atomic_load_explicit(w->cq_tail, memory_order_relaxed) !=
		       atomic_load_explicit(w->cq_head, memory_order_relaxed);
}

#endif /* NTX_FDWATCH_H */
