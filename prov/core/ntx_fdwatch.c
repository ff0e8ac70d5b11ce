/*
 * Readiness without a system call (ntx_fdwatch.h): one one-shot
 * IORING_OP_POLL_ADD on the watched fd; when the fd is readable the kernel
 * appends a completion to a ring mapped in our memory. Only re-arming the
 * poll, after the owner drained the fd, enters the kernel. One-shot, not
 * multishot: at most one completion is ever outstanding, so the ring can
 * never overflow (a multishot poll ends silently when it does). Raw system
 * calls: no liburing.
 */
#include "config.h"
#include <errno.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ntx/ntx_base.h"
#include "ntx/ntx_fdwatch.h"

#define NTX_FDWATCH_ENTRIES 8

static void ntx_fdwatch_unmap(struct ntx_fdwatch *w)
{
	if (w->sqe_map && w->sqe_map != MAP_FAILED)
		munmap(w->sqe_map, w->sqe_len);
	if (w->cq_map && w->cq_map != MAP_FAILED && w->cq_map != w->sq_map)
		munmap(w->cq_map, w->cq_len);
	if (w->sq_map && w->sq_map != MAP_FAILED)
		munmap(w->sq_map, w->sq_len);
	w->sq_map = w->cq_map = w->sqe_map = NULL;
}

/* Queues the one-shot poll and enters the kernel once to submit it. */
static int ntx_fdwatch_arm(struct ntx_fdwatch *w)
{
	struct io_uring_sqe *sqe = w->sqe_map;
	uint32_t tail = atomic_load_explicit(w->sq_tail, memory_order_relaxed);

	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_POLL_ADD;
	sqe->fd = w->fd;
	sqe->poll32_events = POLLIN;
	w->sq_array[tail & w->sq_mask] = 0;
	/* release: the sqe is written before the kernel can see the tail */
	atomic_store_explicit(w->sq_tail, tail + 1, memory_order_release);
	if (syscall(__NR_io_uring_enter, w->ring_fd, 1, 0, 0, NULL, 0) != 1) {
		NTX_INFO(FI_LOG_CORE, "io_uring poll: %s\n", strerror(errno));
		return -1;
	}
	w->armed = true;
	return 0;
}

static int ntx_fdwatch_setup(struct ntx_fdwatch *w)
{
	struct io_uring_params p;
	uint8_t *sq, *cq;

	memset(&p, 0, sizeof(p));
	w->ring_fd = (int)syscall(__NR_io_uring_setup, NTX_FDWATCH_ENTRIES, &p);
	if (w->ring_fd < 0) {
		NTX_INFO(FI_LOG_CORE, "io_uring unavailable (%s): sockets are "
			 "looked at every %u us\n", strerror(errno),
			 NTX_FDWATCH_GATE_NS / 1000);
		return -1;
	}
	if (!(p.features & IORING_FEAT_SINGLE_MMAP))
		return -1; /* kernels before 5.4: not worth a second layout */
	w->sq_len = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
	w->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (w->cq_len > w->sq_len)
		w->sq_len = w->cq_len;
	w->sq_map = mmap(NULL, w->sq_len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_POPULATE, w->ring_fd, IORING_OFF_SQ_RING);
	w->cq_map = w->sq_map;
	w->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
	w->sqe_map = mmap(NULL, w->sqe_len, PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_POPULATE, w->ring_fd, IORING_OFF_SQES);
	if (w->sq_map == MAP_FAILED || w->sqe_map == MAP_FAILED)
		return -1;
	sq = w->sq_map;
	cq = w->cq_map;
	w->sq_tail = (_Atomic uint32_t *)(sq + p.sq_off.tail);
	w->sq_mask = *(uint32_t *)(sq + p.sq_off.ring_mask);
	w->sq_array = (uint32_t *)(sq + p.sq_off.array);
	w->cq_head = (_Atomic uint32_t *)(cq + p.cq_off.head);
	w->cq_tail = (_Atomic uint32_t *)(cq + p.cq_off.tail);
	w->cq_mask = *(uint32_t *)(cq + p.cq_off.ring_mask);
	w->cqes = cq + p.cq_off.cqes;
	return ntx_fdwatch_arm(w);
}

void ntx_fdwatch_open(struct ntx_fdwatch *w, int fd)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	if (ntx_fdwatch_setup(w)) {
		ntx_fdwatch_unmap(w);
		if (w->ring_fd >= 0)
			close(w->ring_fd);
		w->ring_fd = -1;
	}
}

void ntx_fdwatch_close(struct ntx_fdwatch *w)
{
	if (!w->sq_map) /* never opened, or on the time gate */
		return;
	ntx_fdwatch_unmap(w);
	close(w->ring_fd); /* cancels the poll */
	w->ring_fd = -1;
}

bool ntx_fdwatch_news(struct ntx_fdwatch *w)
{
	uint32_t head, tail;

	if (w->ring_fd < 0) {
		uint64_t now = ntx_now_ns();

		if (now < w->next_ns)
			return false;
		w->next_ns = now + NTX_FDWATCH_GATE_NS;
		return true;
	}
	head = atomic_load_explicit(w->cq_head, memory_order_relaxed);
	/* acquire: pairs with the kernel's release of the completion */
	tail = atomic_load_explicit(w->cq_tail, memory_order_acquire);
	if (head == tail)
		return false;
	/* release: we are done with the completion (its result does not
	 * matter: the owner looks at the fd either way) */
	atomic_store_explicit(w->cq_head, tail, memory_order_release);
	w->armed = false;
	return true;
}

void ntx_fdwatch_rearm(struct ntx_fdwatch *w)
{
	if (w->ring_fd < 0 || w->armed)
		return;
	if (ntx_fdwatch_arm(w)) {
		ntx_fdwatch_close(w); /* from now on the time gate */
		w->next_ns = 0;
	}
}
