/*
 * Readiness of a file descriptor (a back end's epoll set, a socket, an
 * rdma_cm channel) learned without a system call on the poll path
 * (DESIGN §3, "No system call on the poll path"): one watcher thread per
 * process sleeps in epoll_wait on every watched fd (EPOLLONESHOT) and, when
 * one becomes readable, stores 1 into that watch's news word, which the
 * poller reads from memory. Where the watcher cannot run, a time gate
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
	int fd;                 /* the watched fd */
	int32_t slot;           /* in the watcher's table; -1: time gate */
	uint32_t gen;           /* the slot's generation when taken */
	_Atomic uint32_t *news; /* the slot's news word (never freed) */
	bool armed;             /* the fd is enabled in the watcher's set */
	uint64_t next_ns;       /* time gate */
};

/* Watches fd (never fails: falls back to the time gate). */
void ntx_fdwatch_open(struct ntx_fdwatch *w, int fd);
/* Stops watching; call before closing fd. */
void ntx_fdwatch_close(struct ntx_fdwatch *w);
/* Consumes the news; true when fd may be readable. The caller then
 * drains fd (until EAGAIN) and calls ntx_fdwatch_rearm. */
bool ntx_fdwatch_news(struct ntx_fdwatch *w);
/* Watches again after news (a no-op while the fd is enabled). */
void ntx_fdwatch_rearm(struct ntx_fdwatch *w);
/* Ends the watcher thread (the provider's cleanup, before libfabric
 * unloads us); watches left open fall back to the time gate. */
void ntx_fdwatch_fini(void);
/* Cheap test for the poll path: is there any news? */
static inline bool ntx_fdwatch_pending(const struct ntx_fdwatch *w)
{
	if (w->slot < 0)
		return true; /* ntx_fdwatch_news applies the time gate */
	return atomic_load_explicit(w->news, memory_order_relaxed) != 0;
}

#endif /* NTX_FDWATCH_H */
