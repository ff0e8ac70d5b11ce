/*
 * Readiness without a system call on the poll path (ntx_fdwatch.h,
 * DESIGN §3 "No system call on the poll path").
 *
 * Each watch is an io_uring ring holding one one-shot IORING_OP_POLL_ADD
 * on the fd. The kernel completes a poll as task work of the task that
 * queued it. Had the application's thread queued it, that work would come
 * like a signal: a blocking system call of the application (a read under
 * SO_RCVTIMEO) failed with EINTR when an ntx socket became readable. So
 * one arming thread per process queues every poll; the application's
 * threads only read the rings' memory. The ring is made with
 * IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG (Linux 5.19): the
 * arming thread is not woken for the task work, and the kernel raises
 * IORING_SQ_TASKRUN in the ring at once, from the wake-up itself. The
 * poller takes that flag, or a completion already posted, as news,
 * whether or not the arming thread runs: no scheduling stands between a
 * packet and the poller seeing it.
 *
 * After the owner drained the fd it asks for a re-arm; the arming thread
 * runs its task work (which posts the old completion and clears the flag),
 * consumes the completions, queues a new poll and says so (armed_seq).
 * Until then the owner looks at the fd every NTX_FDWATCH_GATE_NS. One-shot,
 * not multishot: at most one completion is outstanding, so the ring can
 * never overflow. Raw system calls: no liburing.
 */
#include "config.h"
#include <errno.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ntx/ntx_base.h"
#include "ntx/ntx_fdwatch.h"

#define NTX_FDWATCH_ENTRIES 2

/* Linux 5.19's ABI, for older kernel headers (an older kernel refuses the
 * flags with EINVAL: time gate) */
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8)
#endif
#ifndef IORING_SETUP_TASKRUN_FLAG
#define IORING_SETUP_TASKRUN_FLAG (1U << 9)
#endif
#ifndef IORING_SQ_TASKRUN
#define IORING_SQ_TASKRUN (1U << 2)
#endif
_Static_assert(IORING_SQ_TASKRUN == 1u << 2, "ntx_fdwatch_pending's bit");

/* The arming thread and its list of watches to (re-)arm. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool started, stop, broken; /* broken: no thread (failed, forked) */
	pthread_t thread;
	struct ntx_fdwatch *head, *tail;
} ntx_fdw = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

static int ntx_uring_enter(int fd, unsigned submit, unsigned flags)
{
	return (int)syscall(__NR_io_uring_enter, fd, submit, 0, flags, NULL,
			    0);
}

static void ntx_fdwatch_unmap(struct ntx_fdwatch *w)
{
	if (w->sqe_map && w->sqe_map != MAP_FAILED)
		munmap(w->sqe_map, w->sqe_len);
	if (w->sq_map && w->sq_map != MAP_FAILED)
		munmap(w->sq_map, w->sq_len);
	w->sq_map = w->sqe_map = NULL;
}

/* The arming thread, lock held: the old completion posted and consumed, a
 * new poll queued. */
static int ntx_fdwatch_arm(struct ntx_fdwatch *w)
{
	struct io_uring_sqe *sqe = w->sqe_map;
	uint32_t tail;

	/* task work of the last poll, if not run yet on our way back from
	 * an earlier system call: its completion is posted now */
	if (ntx_uring_enter(w->ring_fd, 0, IORING_ENTER_GETEVENTS) < 0)
		return -1;
	/* release: we are done with the completions (their results do not
	 * matter: the owner looks at the fd either way) */
	atomic_store_explicit(w->cq_head,
			      atomic_load_explicit(w->cq_tail,
						   memory_order_acquire),
			      memory_order_release);
	tail = atomic_load_explicit(w->sq_tail, memory_order_relaxed);
	memset(sqe, 0, sizeof(*sqe));
	sqe->opcode = IORING_OP_POLL_ADD;
	sqe->fd = w->fd;
	sqe->poll32_events = POLLIN;
	w->sq_array[tail & w->sq_mask] = 0;
	/* release: the sqe is written before the kernel can see the tail */
	atomic_store_explicit(w->sq_tail, tail + 1, memory_order_release);
	if (ntx_uring_enter(w->ring_fd, 1, 0) != 1)
		return -1;
	return 0;
}

static void *ntx_fdwatch_thread(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ntx_fdw.lock);
	for (;;) {
		struct ntx_fdwatch *w = ntx_fdw.head;

		if (ntx_fdw.stop)
			break;
		if (!w) {
			pthread_cond_wait(&ntx_fdw.cond, &ntx_fdw.lock);
			continue;
		}
		ntx_fdw.head = w->next;
		if (!ntx_fdw.head)
			ntx_fdw.tail = NULL;
		w->queued = false;
		if (ntx_fdwatch_arm(w)) {
			NTX_INFO(FI_LOG_CORE, "io_uring poll: %s (time gate)\n",
				 strerror(errno));
			atomic_store_explicit(&w->failed, true,
					      memory_order_relaxed);
		}
		/* release: the poll is queued (or failed) before the owner
		 * reads the ring again */
		atomic_store_explicit(&w->armed_seq, w->seq,
				      memory_order_release);
	}
	pthread_mutex_unlock(&ntx_fdw.lock);
	return NULL;
}

/* A forked child has no arming thread: its watches keep waiting for one,
 * which is the time gate. */
static void ntx_fdwatch_atfork_child(void)
{
	pthread_mutex_init(&ntx_fdw.lock, NULL);
	pthread_cond_init(&ntx_fdw.cond, NULL);
	ntx_fdw.started = false;
	ntx_fdw.broken = true;
	ntx_fdw.head = ntx_fdw.tail = NULL;
}

/* Lock held: the arming thread, started at the first watch. */
static int ntx_fdwatch_start(void)
{
	sigset_t all, old;
	int ret;

	if (ntx_fdw.started)
		return 0;
	if (ntx_fdw.broken)
		return -1;
	/* the application's signals go to its own threads */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&ntx_fdw.thread, NULL, ntx_fdwatch_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		NTX_INFO(FI_LOG_CORE, "no io_uring arming thread (%s): time "
			 "gate\n", strerror(ret));
		ntx_fdw.broken = true;
		return -1;
	}
	pthread_atfork(NULL, NULL, ntx_fdwatch_atfork_child);
	ntx_fdw.started = true;
	return 0;
}

/* Asks the arming thread to (re-)arm w; until it has, the owner uses the
 * time gate. */
static void ntx_fdwatch_ask(struct ntx_fdwatch *w)
{
	w->waiting = true;
	w->seq++;
	w->next_ns = 0;
	pthread_mutex_lock(&ntx_fdw.lock);
	if (!w->queued && ntx_fdw.started) {
		w->queued = true;
		w->next = NULL;
		if (ntx_fdw.tail)
			ntx_fdw.tail->next = w;
		else
			ntx_fdw.head = w;
		ntx_fdw.tail = w;
		pthread_cond_signal(&ntx_fdw.cond);
	}
	pthread_mutex_unlock(&ntx_fdw.lock);
}

static int ntx_fdwatch_setup(struct ntx_fdwatch *w)
{
	struct io_uring_params p;
	uint8_t *sq;
	size_t cq_len;
	int started;

	pthread_mutex_lock(&ntx_fdw.lock);
	started = ntx_fdwatch_start();
	pthread_mutex_unlock(&ntx_fdw.lock);
	if (started)
		return -1;
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
	w->ring_fd = (int)syscall(__NR_io_uring_setup, NTX_FDWATCH_ENTRIES, &p);
	if (w->ring_fd < 0) {
		NTX_INFO(FI_LOG_CORE, "io_uring with COOP_TASKRUN unavailable "
			 "(%s): sockets are looked at every %u us\n",
			 strerror(errno), NTX_FDWATCH_GATE_NS / 1000);
		return -1;
	}
	if (!(p.features & IORING_FEAT_SINGLE_MMAP))
		return -1; /* kernels before 5.4: not worth a second layout */
	w->sq_len = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
	cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (cq_len > w->sq_len)
		w->sq_len = cq_len;
	w->sq_map = mmap(NULL, w->sq_len, PROT_READ | PROT_WRITE,
			 MAP_SHARED | MAP_POPULATE, w->ring_fd, IORING_OFF_SQ_RING);
	w->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
	w->sqe_map = mmap(NULL, w->sqe_len, PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_POPULATE, w->ring_fd, IORING_OFF_SQES);
	if (w->sq_map == MAP_FAILED || w->sqe_map == MAP_FAILED)
		return -1;
	sq = w->sq_map;
	w->sq_tail = (_Atomic uint32_t *)(sq + p.sq_off.tail);
	w->sq_flags = (_Atomic uint32_t *)(sq + p.sq_off.flags);
	w->sq_mask = *(uint32_t *)(sq + p.sq_off.ring_mask);
	w->sq_array = (uint32_t *)(sq + p.sq_off.array);
	w->cq_head = (_Atomic uint32_t *)(sq + p.cq_off.head);
	w->cq_tail = (_Atomic uint32_t *)(sq + p.cq_off.tail);
	ntx_fdwatch_ask(w); /* the first poll */
	return 0;
}

void ntx_fdwatch_open(struct ntx_fdwatch *w, int fd)
{
	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->ring_fd = -1;
	if (ntx_fdwatch_setup(w)) {
		ntx_fdwatch_unmap(w);
		if (w->ring_fd >= 0)
			close(w->ring_fd);
		w->ring_fd = -1;
		w->waiting = false;
	}
}

void ntx_fdwatch_close(struct ntx_fdwatch *w)
{
	if (w->ring_fd < 0) /* never opened, or on the time gate */
		return;
	/* out of the arming thread's list; it touches w only with the
	 * lock held */
	pthread_mutex_lock(&ntx_fdw.lock);
	if (w->queued) {
		struct ntx_fdwatch **pp = &ntx_fdw.head, *prev = NULL;

		while (*pp && *pp != w) {
			prev = *pp;
			pp = &(*pp)->next;
		}
		if (*pp) {
			*pp = w->next;
			if (ntx_fdw.tail == w)
				ntx_fdw.tail = prev;
		}
		w->queued = false;
	}
	pthread_mutex_unlock(&ntx_fdw.lock);
	ntx_fdwatch_unmap(w);
	close(w->ring_fd); /* cancels the poll */
	w->ring_fd = -1;
	w->waiting = false;
}

static bool ntx_fdwatch_gate(struct ntx_fdwatch *w)
{
	uint64_t now = ntx_now_ns();

	if (now < w->next_ns)
		return false;
	w->next_ns = now + NTX_FDWATCH_GATE_NS;
	return true;
}

bool ntx_fdwatch_news(struct ntx_fdwatch *w)
{
	if (w->ring_fd < 0)
		return ntx_fdwatch_gate(w);
	if (w->waiting) {
		/* acquire: pairs with the arming thread's release */
		if (atomic_load_explicit(&w->armed_seq, memory_order_acquire) !=
		    w->seq)
			return ntx_fdwatch_gate(w);
		w->waiting = false;
		if (atomic_load_explicit(&w->failed, memory_order_relaxed)) {
			ntx_fdwatch_close(w); /* from now on the time gate */
			w->next_ns = 0;
			return true;
		}
		/* armed after the owner's last look at the fd: whatever came
		 * in between raised the flag or posted a completion */
	}
	if (!ntx_fdwatch_pending(w))
		return false;
	w->taken = true;
	return true;
}

void ntx_fdwatch_rearm(struct ntx_fdwatch *w)
{
	if (w->ring_fd < 0 || !w->taken)
		return;
	w->taken = false;
	ntx_fdwatch_ask(w);
}

void ntx_fdwatch_fini(void)
{
	pthread_mutex_lock(&ntx_fdw.lock);
	if (!ntx_fdw.started) {
		pthread_mutex_unlock(&ntx_fdw.lock);
		return;
	}
	ntx_fdw.stop = true;
	ntx_fdw.started = false;
	ntx_fdw.broken = true;
	pthread_cond_signal(&ntx_fdw.cond);
	pthread_mutex_unlock(&ntx_fdw.lock);
	pthread_join(ntx_fdw.thread, NULL);
}
