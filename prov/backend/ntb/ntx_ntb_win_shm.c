/*
 * The shm window (DESIGN §4): how a window is obtained and what only a
 * window in this kernel's memory offers. Our window is a sealed memfd;
 * a peer's is mapped from a copy of its owner's descriptor (pidfd_getfd,
 * else /proc/PID/fd). Also here: membarrier fences on every sender, the
 * wake socket that is the sleeping owner's doorbell, and single copy
 * with process_vm_readv/writev.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <linux/membarrier.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ntx_ntb_int.h"

/* membarrier(GLOBAL_EXPEDITED): an owner that issues one fences every
 * process registered for it. ntx_ntb_mb_query: 1 this kernel has it, -1
 * not. ntx_ntb_mb_registered: this process is registered, so owners that
 * fence their peers fence our sends too. Registering waits for an RCU
 * grace period in a multi-threaded process (about 10 ms here), so it runs
 * in a thread of its own and our sends fence themselves until it is
 * done. */
static atomic_int ntx_ntb_mb_query;
atomic_bool ntx_ntb_mb_registered;
static pthread_once_t ntx_ntb_mb_once = PTHREAD_ONCE_INIT;
static pthread_t ntx_ntb_mb_thread;
static bool ntx_ntb_mb_joinable; /* joined before the provider unloads */

static void *ntx_ntb_mb_register(void *arg)
{
	(void)arg;
	if (syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
		    0, 0))
		NTX_INFO(FI_LOG_EP_CTRL, "membarrier registration: %s\n",
			 strerror(errno));
	else
		atomic_store(&ntx_ntb_mb_registered, true);
	return NULL;
}

/* A forked child has a new mm that is not registered, and no thread. */
static void ntx_ntb_mb_atfork_child(void)
{
	atomic_store(&ntx_ntb_mb_registered, false);
	ntx_ntb_mb_joinable = false;
	ntx_ntb_mb_once = (pthread_once_t)PTHREAD_ONCE_INIT;
}

static void ntx_ntb_mb_start(void)
{
	static bool atfork;

	long q = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
	sigset_t all, old;

	if (q <= 0 || !(q & MEMBARRIER_CMD_GLOBAL_EXPEDITED)) {
		NTX_INFO(FI_LOG_EP_CTRL, "no membarrier: senders fence each "
			 "message\n");
		atomic_store(&ntx_ntb_mb_query, -1);
		return;
	}
	atomic_store(&ntx_ntb_mb_query, 1);
	if (!atfork)
		atfork = !pthread_atfork(NULL, NULL, ntx_ntb_mb_atfork_child);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* no signal of the app's */
	ntx_ntb_mb_joinable = !pthread_create(&ntx_ntb_mb_thread, NULL,
					      ntx_ntb_mb_register, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ntx_ntb_mb_joinable)
		ntx_ntb_mb_register(NULL);
}

/* The registration thread runs our code: it must be done before the
 * provider is unloaded (fi_fini at exit); joined at the first endpoint
 * close, or then. */
void ntx_ntb_shm_fini(void)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

	pthread_mutex_lock(&lock); /* endpoints may close on several threads */
	if (ntx_ntb_mb_joinable) {
		pthread_join(ntx_ntb_mb_thread, NULL);
		ntx_ntb_mb_joinable = false;
	}
	pthread_mutex_unlock(&lock);
}

/* This kernel has membarrier(GLOBAL_EXPEDITED); starts our registration. */
static bool ntx_ntb_membarrier_init(void)
{
	pthread_once(&ntx_ntb_mb_once, ntx_ntb_mb_start);
	return atomic_load(&ntx_ntb_mb_query) > 0;
}

/* A full fence on every peer that may be sending to us (see
 * NTX_WIN_F_MEMBARRIER), and on ourselves. */
static void ntx_ntb_fence_peers(void)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&ntx_ntb_mb_query) > 0 &&
	    syscall(__NR_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0))
		NTX_WARN(FI_LOG_EP_CTRL, "membarrier: %s\n", strerror(errno));
}

/* ---- our window ----------------------------------------------------------- */

/* The most slots and ring lines a peer's window header may give. */
#define NTX_WIN_SLOTS_MAX 4096
#define NTX_WIN_RING_LINES_MAX (1u << 16)

/* A window's size can never change once it is mapped. */
#define NTX_WIN_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* The pages of our window the first connections touch (header, cells,
 * the control lines of the first slots: two pages), made now rather than
 * by a page fault in our connect path (a peer's first touch then only
 * maps a page that exists). */
static void ntx_ntb_win_prefault(const struct ntx_win *w)
{
#ifdef MADV_POPULATE_WRITE
	size_t len = 2 * NTX_WIN_PAGE;

	if (madvise(w->base, len < w->g.size ? len : w->g.size,
		    MADV_POPULATE_WRITE))
		NTX_DBG(FI_LOG_EP_CTRL, "prefault window: %s\n",
			strerror(errno));
#else
	(void)w;
#endif
}

static int ntx_ntb_win_create(struct ntx_shm_ep *be)
{
	uint32_t lines = (uint32_t)(ntx_params.ring_size / NTX_CACHELINE);
	struct ntx_win_hdr *hdr;
	char name[64];

	be->win.max_payload = (uint32_t)ntx_params.eager_max;
	while (ntx_ring_max_payload(lines) < be->win.max_payload)
		lines += 2 * NTX_RING_ALIGN;
	if (lines * NTX_CACHELINE != ntx_params.ring_size)
		NTX_INFO(FI_LOG_EP_CTRL, "FI_NTX_RING_SIZE raised to %u bytes "
			 "for FI_NTX_EAGER_MAX\n", lines * NTX_CACHELINE);
	ntx_win_geom_init(&be->win.g, (uint32_t)ntx_params.max_peers, lines,
			  (uint32_t)ntx_params.shm_bulk_size);
	if (be->addr.service)
		snprintf(name, sizeof(name), "ntx-svc-%u-%u", getuid(),
			 be->addr.service);
	else
		snprintf(name, sizeof(name), "ntx-ep-%d", getpid());
	/* memfd: owner-only, no name in /dev/shm, gone with the last map;
	 * sealed at its size below, so that nobody (a same-user process
	 * through /proc included) can shrink it under its mappings */
	be->fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (be->fd < 0) {
		NTX_WARN(FI_LOG_EP_CTRL, "memfd_create: %s\n", strerror(errno));
		return -FI_ENOMEM;
	}
	fchmod(be->fd, 0600);
	if (ftruncate(be->fd, (off_t)be->win.g.size) ||
	    fcntl(be->fd, F_ADD_SEALS, NTX_WIN_SEALS)) {
		NTX_WARN(FI_LOG_EP_CTRL, "size and seal the window: %s\n",
			 strerror(errno));
		goto close_fd;
	}
	be->win.base = mmap(NULL, be->win.g.size, PROT_READ | PROT_WRITE,
			    MAP_SHARED, be->fd, 0);
	if (be->win.base == MAP_FAILED) {
		NTX_WARN(FI_LOG_EP_CTRL, "mmap window: %s\n", strerror(errno));
		goto close_fd;
	}
	ntx_ntb_win_prefault(&be->win);
	hdr = ntx_win_hdr(&be->win);
	ntx_ntb_hdr_fill(be, ntx_ntb_membarrier_init() ? NTX_WIN_F_MEMBARRIER
						    : 0,
			 be->win.wake_key);

	/* release: the header is complete before anyone can see OPEN */
	atomic_store_explicit(&hdr->state, NTX_WIN_OPEN, memory_order_release);
	return 0;

close_fd:
	close(be->fd);
	return -FI_ENOMEM;
}

/* Our window unmapped and its memfd closed: gone once no peer maps it. */
static void ntx_ntb_win_destroy(struct ntx_shm_ep *be)
{
	munmap(be->win.base, be->win.g.size);
	close(be->fd);
}

/* ---- peer windows ----------------------------------------------------------- */

/* The header must name the very endpoint the name does (pid, epoch, ep_id
 * and service): else a connect request could name a real window under
 * made-up names, and each would hold one of our slots for as long as that
 * window lives. */
static bool ntx_win_hdr_valid(const struct ntx_win_hdr *h, size_t fsize,
			      const struct ntx_addr *peer)
{
	struct ntx_win_geom g;

	if (h->magic != NTX_WIN_MAGIC || h->version != NTX_WIN_VERSION ||
	    h->epoch != peer->epoch || h->pid != peer->pid ||
	    h->ep_id != peer->ep_id || h->service != peer->service ||
	    h->nslots == 0 || h->nslots > NTX_WIN_SLOTS_MAX ||
	    !ntx_ring_lines_valid(h->ring_lines) ||
	    h->ring_lines > NTX_WIN_RING_LINES_MAX ||
	    h->max_payload < 4096 || /* FI_NTX_EAGER_MAX's least */
	    h->max_payload > ntx_ring_max_payload(h->ring_lines) ||
	    h->bulk_size % NTX_WIN_PAGE || h->bulk_size > NTX_WIN_BULK_MAX)
		return false;
	ntx_win_geom_init(&g, h->nslots, h->ring_lines, h->bulk_size);
	return g.size == h->size && g.size <= fsize;
}

/* Checks a mapped peer window and takes its geometry. The header is
 * copied before it is checked: the owner may write it at any time. */
static int ntx_ntb_win_take(const struct ntx_addr *peer, struct ntx_win *w,
			    void *base, size_t size)
{
	struct ntx_win_hdr hdr;

	memcpy(&hdr, base, sizeof(hdr));
	/* the map is exactly the window: its size is the one we unmap */
	if (!ntx_win_hdr_valid(&hdr, size, peer) || hdr.size != size)
		return -FI_EADDRNOTAVAIL;
	ntx_win_geom_init(&w->g, hdr.nslots, hdr.ring_lines, hdr.bulk_size);
	w->base = base;
	w->max_payload = hdr.max_payload;
	w->flags = hdr.flags;
	w->wake_key = hdr.wake_key;
	return 0;
}

/* pidfd_getfd works here until it fails with EPERM (ptrace rules such as
 * Yama's ptrace_scope 1 forbid it) or ENOSYS: /proc only from then on. */
static atomic_bool ntx_ntb_getfd_off;

/* The file at path opened by pid: where the pidfd of the process we
 * watch is still not readable after the open, the pid was that process's
 * when we opened. -1 with errno ESRCH when it is gone. */
static int ntx_ntb_win_open_path(int pidfd, const char *path)
{
	struct pollfd pfd = { .fd = pidfd, .events = POLLIN };
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0 || pidfd < 0 || poll(&pfd, 1, 0) == 0)
		return fd;
	close(fd);
	errno = ESRCH;
	return -1;
}

/* Our descriptor of a peer's window: a copy of the owner's, taken through
 * the pidfd of the process we watch (no path walk in /proc, and from that
 * very process: it fails once the process is gone, whoever has its pid
 * now), or where that is not allowed the file opened through
 * /proc/PID/fd/FD. -1 with errno ENOENT when the owner has no such fd,
 * ESRCH when the watched process is gone. */
static int ntx_ntb_win_open(const struct ntx_addr *peer, int pidfd,
			    const char *path)
{
#ifdef __NR_pidfd_getfd
	int fd;

	if (pidfd >= 0 && !atomic_load_explicit(&ntx_ntb_getfd_off,
						 memory_order_relaxed)) {
		fd = (int)syscall(__NR_pidfd_getfd, pidfd, peer->win_fd, 0);
		if (fd >= 0) /* close-on-exec, as pidfd_getfd sets it */
			return fd;
		if (errno == EBADF) {
			errno = ENOENT;
			return -1;
		}
		if (errno == ESRCH)
			return -1;
		if (errno == EPERM || errno == ENOSYS) {
			NTX_INFO(FI_LOG_EP_CTRL, "pidfd_getfd: %s: peer "
				 "windows are opened through /proc\n",
				 strerror(errno));
			atomic_store(&ntx_ntb_getfd_off, true);
		}
	}
#else
	(void)peer;
#endif
	return ntx_ntb_win_open_path(pidfd, path);
}

/* Maps the window of a peer: take a descriptor of it, check the seals,
 * map the whole file, check the header in the map (five system calls). */
static int ntx_ntb_win_map(const struct ntx_addr *peer, int pidfd,
			   struct ntx_win *w)
{
	struct stat st;
	char path[64];
	struct ntx_win_geom most;
	void *base;
	int fd, seals, ret = -FI_EADDRNOTAVAIL;

	snprintf(path, sizeof(path), "/proc/%u/fd/%d", peer->pid, peer->win_fd);
	fd = ntx_ntb_win_open(peer, pidfd, path);
	if (fd < 0) {
		NTX_WARN(FI_LOG_EP_CTRL, "open peer window %s: %s\n", path,
			 strerror(errno));
		return errno == ENOENT || errno == ESRCH ? -FI_EADDRNOTAVAIL
							 : -FI_EACCES;
	}
	/* a window its owner could still shrink would SIGBUS us: sealed
	 * before it is mapped, its size below is final */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & NTX_WIN_SEALS) != NTX_WIN_SEALS) {
		NTX_WARN(FI_LOG_EP_CTRL, "peer window %s is not sealed\n", path);
		ret = -FI_EINVAL;
		goto close_fd;
	}
	/* no larger than the largest window a valid header describes */
	ntx_win_geom_init(&most, NTX_WIN_SLOTS_MAX, NTX_WIN_RING_LINES_MAX,
			  NTX_WIN_BULK_MAX);
	if (fstat(fd, &st) || (size_t)st.st_size < sizeof(struct ntx_win_hdr) ||
	    (size_t)st.st_size > most.size)
		goto close_fd;
	base = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, 0);
	if (base == MAP_FAILED) {
		NTX_WARN(FI_LOG_EP_CTRL, "mmap peer window: %s\n",
			 strerror(errno));
		ret = -FI_ENOMEM;
		goto close_fd;
	}
	ret = ntx_ntb_win_take(peer, w, base, (size_t)st.st_size);
	if (ret) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s is not the window of that peer\n",
			 path);
		munmap(base, (size_t)st.st_size);
	}
close_fd:
	close(fd);
	return ret;
}

/* A peer window's map, ended with its last connection in this process. */
static void ntx_ntb_win_unmap(struct ntx_win *w)
{
	munmap(w->base, w->g.size);
}

/* Zero pages for [off, off + len) of our window: punched out of the
 * memfd, else written. */
static void ntx_ntb_win_punch(struct ntx_shm_ep *be, size_t off, size_t len)
{
	if (len && fallocate(be->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			     (off_t)off, (off_t)len)) {
		NTX_DBG(FI_LOG_EP_CTRL, "punch window pages: %s\n",
			strerror(errno));
		memset(be->win.base + off, 0, len);
	}
}

/* A slot's ring and bulk area, zero and taking no memory. */
static void ntx_ntb_ring_zero(struct ntx_shm_ep *be, uint32_t slot)
{
	const struct ntx_win_geom *g = &be->win.g;

	ntx_ntb_win_punch(be, g->ring_off + (size_t)slot * g->ring_size,
			  g->ring_size);
	ntx_ntb_win_punch(be, g->bulk_off + (size_t)slot * g->bulk_size,
			  g->bulk_size);
}

/* Our bulk area in a peer's window punched out of its memfd through our
 * map of it (MADV_REMOVE): the pages go back to the kernel, and the next
 * write faults in zero pages. */
static void ntx_ntb_bulk_release(struct ntx_shm_conn *c)
{
	if (madvise(c->tx_bulk, c->pwin.g.bulk_size, MADV_REMOVE))
		NTX_DBG(FI_LOG_EP_DATA, "give back a bulk area: %s\n",
			strerror(errno));
}

/* The wake socket of an endpoint: an abstract unix datagram name, gone
 * with the process (an eventfd cannot be reopened through /proc). Its
 * random part is in the window header (ntx_win_hdr.wake_key). */
static socklen_t ntx_wake_sockaddr(uint32_t pid, uint32_t ep_id, uint64_t key,
				   struct sockaddr_un *sun)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
		     "ntx-wake-%u-%u-%u-%016llx", getuid(), pid, ep_id,
		     (unsigned long long)key);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Wakes a peer that armed its window before sleeping. */
static void ntx_ntb_wake(struct ntx_shm_conn *c)
{
	struct sockaddr_un sun;
	socklen_t len = ntx_wake_sockaddr(c->peer.pid, c->peer.ep_id,
					  c->pwin.wake_key, &sun);
	char one = 1;

	if (sendto(c->be->wake, &one, 1, MSG_DONTWAIT, (struct sockaddr *)&sun,
		   len) < 0 && errno != EAGAIN)
		NTX_DBG(FI_LOG_EP_DATA, "wake pid %u: %s\n", c->peer.pid,
			strerror(errno));
}

int ntx_ntb_wake_open(struct ntx_shm_ep *be)
{
	struct sockaddr_un sun;
	socklen_t len;

	be->wake = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (be->wake < 0)
		return -FI_ENOMEM;
	/* a taken name (by chance, 2^-64) is drawn again */
	for (int i = 0; i < 4; i++) {
		be->win.wake_key = ntx_random64();
		len = ntx_wake_sockaddr(be->addr.pid, be->addr.ep_id,
					be->win.wake_key, &sun);
		if (!bind(be->wake, (struct sockaddr *)&sun, len))
			return 0;
	}
	NTX_WARN(FI_LOG_EP_CTRL, "wake socket: %s\n", strerror(errno));
	close(be->wake);
	return -FI_EADDRINUSE;
}

/* Maps a failed process_vm_readv/writev to an engine error: EFAULT is a
 * bad address; anything else (EPERM under ptrace restrictions, ENOSYS)
 * means single copy is not allowed and the engine falls back. */
static ssize_t ntx_ntb_cma_result(const struct ntx_shm_conn *c, ssize_t n,
				  const char *what)
{
	int err = errno;

	if (n >= 0)
		return n;
	NTX_INFO(FI_LOG_EP_DATA, "%s with pid %u: %s\n", what, c->peer.pid,
		 strerror(err));
	return err == EFAULT ? -FI_EFAULT : -FI_EOPNOTSUPP;
}

/* The peer's buffers as iovecs (the window needs no keys). */
static size_t ntx_ntb_remote(const struct ntx_wire_iov *w, size_t n,
			     struct iovec *iov)
{
	return ntx_wire_iov_view(w, n, iov);
}

static ssize_t ntx_ntb_cma_read(struct ntx_shm_conn *c,
				const struct iovec *local, size_t nlocal,
				const struct ntx_wire_iov *remote,
				size_t nremote)
{
	struct iovec r[NTX_MAX_IOV];

	return ntx_ntb_cma_result(c, process_vm_readv((pid_t)c->peer.pid,
						      local, nlocal, r,
						      ntx_ntb_remote(remote,
								     nremote, r),
						      0),
				  "process_vm_readv");
}

static ssize_t ntx_ntb_cma_write(struct ntx_shm_conn *c,
				 const struct iovec *local, size_t nlocal,
				 const struct ntx_wire_iov *remote,
				 size_t nremote)
{
	struct iovec r[NTX_MAX_IOV];

	return ntx_ntb_cma_result(c, process_vm_writev((pid_t)c->peer.pid,
						       local, nlocal, r,
						       ntx_ntb_remote(remote,
								      nremote, r),
						       0),
				  "process_vm_writev");
}

/* Connect requests come from this host only. */
static bool ntx_ntb_shm_peer_ok(const struct ntx_shm_ep *be,
				const struct ntx_addr *a)
{
	return a->host == be->addr.host;
}

const struct ntx_ntb_win_ops ntx_ntb_win_shm_ops = {
	.name = "shm",
	.create = ntx_ntb_win_create,
	.destroy = ntx_ntb_win_destroy,
	.map = ntx_ntb_win_map,
	.unmap = ntx_ntb_win_unmap,
	.peer_get = ntx_ntb_peer_get,
	.unwatch = ntx_ntb_unwatch,
	.peer_put = ntx_ntb_peer_put,
	.wait_take = ntx_ntb_events,
	.ring_zero = ntx_ntb_ring_zero,
	.bulk_release = ntx_ntb_bulk_release,
	.wake = ntx_ntb_wake,
	.fence_peers = ntx_ntb_fence_peers,
	.peer_ok = ntx_ntb_shm_peer_ok,
	.peer_dead = ntx_ntb_peer_dead,
	.read = ntx_ntb_cma_read,
	.write = ntx_ntb_cma_write,
};
