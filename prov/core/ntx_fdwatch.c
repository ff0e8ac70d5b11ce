/*
 * Readiness without a system call on the poll path (ntx_fdwatch.h,
 * DESIGN §3 "No system call on the poll path").
 *
 * One watcher thread per process sleeps in epoll_wait on a set holding
 * every watched fd, each with EPOLLIN | EPOLLONESHOT. When an fd becomes
 * readable the watcher stores 1 into the watch's news word; the poller
 * reads that word from memory. The fd then stays disabled in the set until
 * the poller has drained it and re-arms it (one epoll_ctl), so a busy fd
 * wakes the watcher at most once per drain.
 *
 * Why a thread and not an io_uring poll: the kernel completes an io_uring
 * poll as task work of the thread that queued it, which it delivers like a
 * signal, and a blocking system call of that thread (the application's
 * own, a read under SO_RCVTIMEO) then fails with EINTR. The watcher's
 * sleep is its own; no application thread is ever interrupted.
 *
 * The news words live in slots that are never freed (chunks of
 * NTX_FDWATCH_CHUNK), so a poller's pointer stays valid. Each slot has a
 * generation, carried in the epoll event's data with the slot's index; the
 * watcher writes news only while holding the lock and only when the
 * generation still matches, and closing a watch bumps the generation under
 * that lock, so an event the watcher took before the close never lands on
 * a slot given to another fd.
 */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ntx/ntx_base.h"
#include "ntx/ntx_fdwatch.h"

#define NTX_FDWATCH_CHUNK 256u
#define NTX_FDWATCH_CHUNKS 1024u /* 262144 watches */
#define NTX_FDWATCH_EVENTS 64

struct ntx_fdwatch_slot {
	_Atomic uint32_t news;
	uint32_t gen;
	int32_t next_free; /* -1: end of the free list */
	bool used;
};

static struct {
	pthread_mutex_t lock;
	int epfd;       /* the watcher's set; -1 before the first watch */
	int stop_fd;    /* eventfd in the set: wakes the watcher to end */
	bool started;   /* the watcher thread runs */
	bool broken;    /* no watcher (failed, or a forked child): time gate */
	pthread_t thread;
	struct ntx_fdwatch_slot *chunks[NTX_FDWATCH_CHUNKS];
	uint32_t nslots;
	int32_t free_head;
} ntx_fdw = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.epfd = -1,
	.stop_fd = -1,
	.free_head = -1,
};

#define NTX_FDWATCH_STOP UINT64_MAX /* event data of stop_fd */

static struct ntx_fdwatch_slot *ntx_fdwatch_slot(uint32_t i)
{
	return &ntx_fdw.chunks[i / NTX_FDWATCH_CHUNK][i % NTX_FDWATCH_CHUNK];
}

static uint64_t ntx_fdwatch_data(const struct ntx_fdwatch *w)
{
	return (uint64_t)w->gen << 32 | (uint32_t)w->slot;
}

static void *ntx_fdwatch_thread(void *arg)
{
	struct epoll_event ev[NTX_FDWATCH_EVENTS];

	(void)arg;
	for (;;) {
		int n = epoll_wait(ntx_fdw.epfd, ev, NTX_FDWATCH_EVENTS, -1);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			NTX_WARN(FI_LOG_CORE, "fd watcher: epoll_wait: %s\n",
				 strerror(errno));
			return NULL; /* pollers keep their last news */
		}
		pthread_mutex_lock(&ntx_fdw.lock);
		for (int i = 0; i < n; i++) {
			uint64_t d = ev[i].data.u64;
			uint32_t idx = (uint32_t)d, gen = (uint32_t)(d >> 32);
			struct ntx_fdwatch_slot *s;

			if (d == NTX_FDWATCH_STOP) {
				pthread_mutex_unlock(&ntx_fdw.lock);
				return NULL;
			}
			if (idx >= ntx_fdw.nslots)
				continue;
			s = ntx_fdwatch_slot(idx);
			/* release: whatever made the fd readable happened
			 * before the poller sees the news */
			if (s->used && s->gen == gen)
				atomic_store_explicit(&s->news, 1,
						      memory_order_release);
		}
		pthread_mutex_unlock(&ntx_fdw.lock);
	}
}

/* A forked child has the parent's set (shared with the parent: it must not
 * change it) and no watcher: its watches read news once and fall back to
 * the time gate. */
static void ntx_fdwatch_atfork_child(void)
{
	pthread_mutex_init(&ntx_fdw.lock, NULL);
	ntx_fdw.broken = true;
	ntx_fdw.started = false;
	for (uint32_t i = 0; i < ntx_fdw.nslots; i++)
		atomic_store_explicit(&ntx_fdwatch_slot(i)->news, 1,
				      memory_order_relaxed);
}

/* Under the lock: the set and the watcher, made at the first watch. */
static int ntx_fdwatch_start(void)
{
	struct epoll_event ev = { .events = EPOLLIN,
				  .data.u64 = NTX_FDWATCH_STOP };
	sigset_t all, old;
	int ret;

	if (ntx_fdw.started)
		return 0;
	if (ntx_fdw.broken)
		return -1;
	ntx_fdw.epfd = epoll_create1(EPOLL_CLOEXEC);
	ntx_fdw.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ntx_fdw.epfd < 0 || ntx_fdw.stop_fd < 0 ||
	    epoll_ctl(ntx_fdw.epfd, EPOLL_CTL_ADD, ntx_fdw.stop_fd, &ev))
		goto fail;
	/* the application's signals go to its own threads */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&ntx_fdw.thread, NULL, ntx_fdwatch_thread, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		errno = ret;
		goto fail;
	}
	pthread_atfork(NULL, NULL, ntx_fdwatch_atfork_child);
	ntx_fdw.started = true;
	return 0;
fail:
	NTX_INFO(FI_LOG_CORE, "no fd watcher (%s): sockets are looked at "
		 "every %u us\n", strerror(errno), NTX_FDWATCH_GATE_NS / 1000);
	if (ntx_fdw.epfd >= 0)
		close(ntx_fdw.epfd);
	if (ntx_fdw.stop_fd >= 0)
		close(ntx_fdw.stop_fd);
	ntx_fdw.epfd = ntx_fdw.stop_fd = -1;
	ntx_fdw.broken = true;
	return -1;
}

/* Under the lock: a free slot, or -1. */
static int32_t ntx_fdwatch_slot_get(void)
{
	int32_t i = ntx_fdw.free_head;

	if (i < 0) {
		uint32_t c = ntx_fdw.nslots / NTX_FDWATCH_CHUNK;

		if (c >= NTX_FDWATCH_CHUNKS)
			return -1;
		ntx_fdw.chunks[c] = calloc(NTX_FDWATCH_CHUNK,
					   sizeof(*ntx_fdw.chunks[c]));
		if (!ntx_fdw.chunks[c])
			return -1;
		for (uint32_t k = NTX_FDWATCH_CHUNK; k-- > 0;) {
			ntx_fdw.chunks[c][k].next_free = ntx_fdw.free_head;
			ntx_fdw.free_head = (int32_t)(ntx_fdw.nslots + k);
		}
		ntx_fdw.nslots += NTX_FDWATCH_CHUNK;
		i = ntx_fdw.free_head;
	}
	ntx_fdw.free_head = ntx_fdwatch_slot((uint32_t)i)->next_free;
	return i;
}

void ntx_fdwatch_open(struct ntx_fdwatch *w, int fd)
{
	struct ntx_fdwatch_slot *s;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT };

	memset(w, 0, sizeof(*w));
	w->fd = fd;
	w->slot = -1;
	pthread_mutex_lock(&ntx_fdw.lock);
	if (ntx_fdwatch_start() || (w->slot = ntx_fdwatch_slot_get()) < 0)
		goto out;
	s = ntx_fdwatch_slot((uint32_t)w->slot);
	s->gen++;
	s->used = true;
	atomic_store_explicit(&s->news, 0, memory_order_relaxed);
	w->gen = s->gen;
	w->news = &s->news;
	ev.data.u64 = ntx_fdwatch_data(w);
	if (epoll_ctl(ntx_fdw.epfd, EPOLL_CTL_ADD, fd, &ev)) {
		NTX_INFO(FI_LOG_CORE, "fd watcher: epoll_ctl: %s (time "
			 "gate)\n", strerror(errno));
		s->used = false;
		s->next_free = ntx_fdw.free_head;
		ntx_fdw.free_head = w->slot;
		w->slot = -1;
		w->news = NULL;
		goto out;
	}
	w->armed = true;
out:
	pthread_mutex_unlock(&ntx_fdw.lock);
}

void ntx_fdwatch_close(struct ntx_fdwatch *w)
{
	struct ntx_fdwatch_slot *s;

	if (w->slot < 0)
		return;
	pthread_mutex_lock(&ntx_fdw.lock);
	s = ntx_fdwatch_slot((uint32_t)w->slot);
	if (!ntx_fdw.broken)
		epoll_ctl(ntx_fdw.epfd, EPOLL_CTL_DEL, w->fd, NULL);
	s->gen++; /* an event taken before the DEL is ignored */
	s->used = false;
	s->next_free = ntx_fdw.free_head;
	ntx_fdw.free_head = w->slot;
	pthread_mutex_unlock(&ntx_fdw.lock);
	w->slot = -1;
	w->news = NULL;
	w->armed = false;
}

bool ntx_fdwatch_news(struct ntx_fdwatch *w)
{
	if (w->slot < 0) {
		uint64_t now = ntx_now_ns();

		if (now < w->next_ns)
			return false;
		w->next_ns = now + NTX_FDWATCH_GATE_NS;
		return true;
	}
	/* acquire: pairs with the watcher's release */
	if (!atomic_load_explicit(w->news, memory_order_acquire))
		return false;
	atomic_store_explicit(w->news, 0, memory_order_relaxed);
	w->armed = false;
	return true;
}

void ntx_fdwatch_rearm(struct ntx_fdwatch *w)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT };

	if (w->slot < 0 || w->armed)
		return;
	ev.data.u64 = ntx_fdwatch_data(w);
	/* a forked child's set is the parent's: time gate from now on */
	if (__atomic_load_n(&ntx_fdw.broken, __ATOMIC_RELAXED) ||
	    epoll_ctl(ntx_fdw.epfd, EPOLL_CTL_MOD, w->fd, &ev)) {
		if (!ntx_fdw.broken)
			NTX_INFO(FI_LOG_CORE, "fd watcher: epoll_ctl: %s (time "
				 "gate)\n", strerror(errno));
		ntx_fdwatch_close(w);
		w->next_ns = 0;
		return;
	}
	w->armed = true;
}

void ntx_fdwatch_fini(void)
{
	uint64_t one = 1;

	pthread_mutex_lock(&ntx_fdw.lock);
	if (!ntx_fdw.started) {
		pthread_mutex_unlock(&ntx_fdw.lock);
		return;
	}
	ntx_fdw.started = false;
	ntx_fdw.broken = true; /* no watcher any more */
	pthread_mutex_unlock(&ntx_fdw.lock);
	if (write(ntx_fdw.stop_fd, &one, sizeof(one)) == sizeof(one))
		pthread_join(ntx_fdw.thread, NULL);
	close(ntx_fdw.epfd);
	close(ntx_fdw.stop_fd);
	ntx_fdw.epfd = ntx_fdw.stop_fd = -1;
}
