/*
 * ntb back end over a shared-memory window (DESIGN §4). Each endpoint owns
 * one memfd window (never a name in /dev/shm, so nothing outlives the
 * process); peers of the same user map it through /proc/PID/fd/FD. Per
 * connection there is one receive ring in each side's window; a side writes
 * only the ring in the peer's window and reads only its own window.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <linux/membarrier.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ntx/ntx_backend.h"
#include "ntx_ring.h"

enum ntx_conn_state { NTX_CONN_CONNECTING, NTX_CONN_CONNECTED, NTX_CONN_FAILED };
/* how a peer's liveness is watched (see "liveness" below) */
enum ntx_watch { NTX_WATCH_NONE, NTX_WATCH_PIDFD, NTX_WATCH_PROC };

/* A mapped window: ours or a peer's. Geometry is copied and validated once
 * at map time; the peer can change its header later, we never re-read it. */
struct ntx_win {
	uint8_t *base;
	struct ntx_win_geom g; /* g.ring_lines: lines of each ring */
	uint32_t max_payload; /* largest entry payload the owner accepts */
	uint32_t flags;       /* NTX_WIN_F_* of the owner */
	uint64_t wake_key;    /* the owner's wake socket name (ntx_win_hdr) */
};

/* A peer process, shared by all endpoints of this process (see
 * "liveness"); found by its pid until it is found dead. */
struct ntx_ntb_proc {
	struct ntx_list entry; /* ntx_ntb_peers.procs while it is current */
	uint32_t pid;
	int pidfd;        /* -1: watched through /proc */
	uint64_t start;   /* without a pidfd: its start time */
	uint32_t refs;    /* its mapped windows */
	atomic_bool dead; /* its pidfd said it exited */
};

/* A peer window, mapped once for all endpoints of this process and found
 * by its owner's pid, window fd and epoch. */
struct ntx_ntb_pwin {
	struct ntx_list entry; /* a bucket of ntx_ntb_peers.wins */
	struct ntx_win win;
	uint32_t pid;
	int32_t win_fd;
	uint32_t epoch;
	uint32_t service;
	uint16_t ep_id;
	struct ntx_ntb_proc *proc; /* its owner; NULL: this process */
	uint32_t refs;             /* connections */
};

/* An endpoint's registration of a peer process's pidfd in its wait set,
 * made by its first connection to that process. */
struct ntx_shm_watch {
	struct ntx_list entry; /* ntx_shm_ep.watches */
	struct ntx_ntb_proc *proc;
	uint32_t conns;
};

struct ntx_shm_conn {
	struct ntx_be_conn head; /* first: what the engine holds */
	struct ntx_list entry; /* ntx_shm_ep.conns */
	struct ntx_shm_ep *be;
	void *vc;
	struct ntx_addr peer;
	enum ntx_conn_state state;
	bool cell_pending; /* connect request still to be posted */
	uint32_t my_slot;  /* our slot: the peer's ring to us */
	uint32_t peer_slot; /* the peer's slot: our ring to it */
	struct ntx_win pwin; /* a copy of pw->win, at hand */
	uint32_t tx_pos;  /* next line we write in the ring in pwin */
	uint32_t tx_seq;  /* entries we wrote, free running */
	/* right after our last entry in its line, when that was a part
	 * (struct ntx_win_half) that did not end the line and nothing
	 * followed it: where the next part goes if it fits */
	struct ntx_win_quarter *tx_next;
	/* the tag and CQ data of our last half entry: a part with the same
	 * is a quarter entry */
	uint64_t tx_last_tag, tx_last_data;
	/* lines we may still write before the peer's consumer position
	 * has to be read again: all but one of the lines it had not yet
	 * given back when we last read it, less what we wrote since */
	uint32_t tx_free;
	struct ntx_win_entry *tx_ring; /* line 0 of our ring in pwin */
	struct ntx_win_entry *rx_ring; /* line 0 of the ring in my_slot */
	uint32_t rx_pos;  /* next line we read in the ring in my_slot */
	uint32_t rx_seq;  /* entries we consumed, free running */
	/* right after the last entry we consumed in its line, when it was
	 * a part that did not end the line: where the next may be */
	struct ntx_win_quarter *rx_next;
	/* the tag and CQ data of the last half entry we consumed: a
	 * quarter entry's */
	uint64_t rx_last_tag, rx_last_data;
	/* lines to consume before rx_pos is written to the peer again
	 * (every quarter ring; 0 at first: the first drain writes it) */
	int32_t rx_pub_left;
	_Atomic uint64_t *peer_bits; /* our ready bit's word in pwin */
	uint64_t peer_bit;
	bool light; /* the peer fences its senders with membarrier */
	enum ntx_watch watch;
	struct ntx_shm_watch *wreg; /* NTX_WATCH_PIDFD: its registration */
	uint64_t start; /* NTX_WATCH_PROC: the peer's start time */
	bool peered; /* peer_slot is known: we can tell the peer we close */
	/* set-up only: off the lines the data path reads */
	struct ntx_ntb_pwin *pw; /* the peer's window, shared */
	struct ntx_list centry; /* ntx_shm_ep.connecting, while connecting */
};

struct ntx_shm_ep {
	struct ntx_be_ep head; /* first: what the engine holds */
	struct ntx_be_cb cb;
	struct ntx_win win;
	int fd;
	int svc_fd; /* listening socket that claims our service, or -1 */
	char *svc_path; /* its file, when not an abstract name (or NULL) */
	struct ntx_addr addr;
	struct ntx_shm_conn **slots; /* local slot -> connection */
	struct ntx_list conns;
	int wake;   /* datagram socket peers write to when we sleep */
	/* our wait fd: an epoll set of wake, the peers' pidfds and timer */
	int epfd;
	int timer;  /* timerfd: ticks while a peer is watched by /proc (-1
		     * until one is) */
	uint32_t proc_watched; /* peers without a pidfd */
	bool check; /* a peer may have died: check before the next poll */
	bool armed;
	uint64_t conn_bell_seen;
	/* polls in a row that found nothing since the watch went off: it is
	 * built at NTX_NTB_QUIET_AFTER (ntx_ntb_quiet_on), so that a short
	 * wait, the common one between two messages, does not pay for it */
	uint32_t empty_polls;
	uint32_t nconns;
	bool rescan; /* connect work left over: poll even without a bell */
	bool bits_on; /* we drain by the ready bitmap (hdr->bits_on) */
	uint64_t *idle; /* ready bits whose rings were empty last time */
	uint32_t bit_words; /* ready bit words of the slots ever taken */
	uint64_t *reused; /* slots released before: zeroed again at reuse */
	uint64_t bits_clear_ns; /* next ntx_ntb_bits_clear pass */
	uint32_t polls;
	/* with the bitmap: the connected ring the last pass found ready
	 * alone, looked at first by the next polls (ntx_ntb_poll), so that
	 * a peer that keeps talking costs what it costs with few peers;
	 * hot_runs of its drains in a row, at most NTX_NTB_HOT_RUNS before a
	 * pass over the bitmap */
	struct ntx_shm_conn *hot;
	uint32_t hot_runs;
	/* set-up and tear-down only: off the lines the data path reads */
	struct ntx_list connecting; /* connections we asked for, unanswered */
	struct ntx_list watches; /* peer processes whose pidfd is in epfd */
};

/* Anything changed that the watch of the last quiet poll does not see:
 * the next progress polls (struct ntx_be_watch). */
static inline void ntx_ntb_quiet_off(struct ntx_shm_ep *be)
{
	be->head.watch.on = false;
	be->empty_polls = 0;
}

static inline struct ntx_shm_conn *ntx_shm_conn_of(struct ntx_be_conn *conn)
{
	return ntx_container_of(conn, struct ntx_shm_conn, head);
}

static inline struct ntx_shm_ep *ntx_shm_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_shm_ep, head);
}

/* the ops table sets the heads' ops at creation */
static const struct ntx_be_ops ntx_ntb_shm_ops;

#define NTX_NTB_DIRECT_POLL 4 /* peers polled without the ready bitmap */
#define NTX_NTB_DRAIN_MAX 64  /* entries one ring yields per poll */
#define NTX_NTB_BITS_CLEAR_NS 10000000ull /* idle ready bits kept 10 ms */
#define NTX_NTB_HOT_RUNS 16 /* drains of the hot ring in a row, at most */
/* Empty polls in a row before the watch is built: after the second, the
 * MPI 8-byte allreduce and alltoall at np 2 read about 1.0 of vader's;
 * after the third 0.97 (the watch is built in fewer of their short waits)
 * with the same latency; after the fourth 0.95, but the ping-pong's
 * latency 5 % worse. */
#define NTX_NTB_QUIET_AFTER 3

static atomic_uint ntx_ntb_next_ep_id;

/* membarrier(GLOBAL_EXPEDITED): an owner that issues one fences every
 * process registered for it. ntx_ntb_mb_query: 1 this kernel has it, -1
 * not. ntx_ntb_mb_registered: this process is registered, so owners that
 * fence their peers fence our sends too. Registering waits for an RCU
 * grace period in a multi-threaded process (about 10 ms here), so it runs
 * in a thread of its own and our sends fence themselves until it is
 * done. */
static atomic_int ntx_ntb_mb_query;
static atomic_bool ntx_ntb_mb_registered;
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
static void ntx_ntb_shm_fini(void)
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

static void ntx_ntb_svc_drain(struct ntx_shm_ep *be);
static void ntx_ntb_check_peers(struct ntx_be_ep *bep);

static inline struct ntx_win_hdr *ntx_win_hdr(const struct ntx_win *w)
{
	return (struct ntx_win_hdr *)w->base;
}

static inline struct ntx_win_cell *ntx_win_cell(const struct ntx_win *w,
						 uint32_t i)
{
	return (struct ntx_win_cell *)(w->base + w->g.cells_off) + i;
}

static inline struct ntx_win_ctl *ntx_win_ctl(const struct ntx_win *w,
					       uint32_t slot)
{
	return (struct ntx_win_ctl *)(w->base + w->g.ctl_off) + slot;
}

static inline _Atomic uint64_t *ntx_win_bits(const struct ntx_win *w)
{
	return (_Atomic uint64_t *)(w->base + w->g.bits_off);
}

/* The entry at line pos of a slot's ring. */
static inline struct ntx_win_entry *ntx_win_entry(const struct ntx_win *w,
						   uint32_t slot, uint32_t pos)
{
	return (struct ntx_win_entry *)(w->base + w->g.ring_off +
					(size_t)slot * w->g.ring_size +
					(size_t)pos * NTX_CACHELINE);
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
	ntx_win_geom_init(&be->win.g, (uint32_t)ntx_params.max_peers, lines);
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
	hdr->magic = NTX_WIN_MAGIC;
	hdr->version = NTX_WIN_VERSION;
	hdr->pid = (uint32_t)getpid();
	hdr->epoch = be->addr.epoch;
	hdr->size = be->win.g.size;
	hdr->nslots = be->win.g.nslots;
	hdr->ring_lines = be->win.g.ring_lines;
	hdr->max_payload = be->win.max_payload;
	hdr->ep_id = be->addr.ep_id;
	hdr->service = be->addr.service;
	hdr->flags = ntx_ntb_membarrier_init() ? NTX_WIN_F_MEMBARRIER : 0;
	hdr->wake_key = be->win.wake_key;

	/* release: the header is complete before anyone can see OPEN */
	atomic_store_explicit(&hdr->state, NTX_WIN_OPEN, memory_order_release);
	return 0;

close_fd:
	close(be->fd);
	return -FI_ENOMEM;
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
	    h->max_payload > ntx_ring_max_payload(h->ring_lines))
		return false;
	ntx_win_geom_init(&g, h->nslots, h->ring_lines);
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
	ntx_win_geom_init(&w->g, hdr.nslots, hdr.ring_lines);
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
	ntx_win_geom_init(&most, NTX_WIN_SLOTS_MAX, NTX_WIN_RING_LINES_MAX);
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

/* ---- liveness (DESIGN §4) ---------------------------------------------------
 * A peer process is watched through one pidfd, whatever the number of our
 * endpoints and connections that reach it (ntx_ntb_proc). Each endpoint
 * with a connection to it has that pidfd once in the epoll set that is its
 * wait fd (ntx_shm_watch), so a waiter sleeping on it (fi_cq_sread,
 * fi_cntr_wait, an FI_GETWAIT fd) wakes when the peer exits: a pidfd is
 * readable from the exit on, while the peer is still an unreaped zombie,
 * and it cannot name a reused pid. Where pidfd_open fails (old kernel,
 * seccomp) the peer's /proc/PID/stat is read instead, and a timer in the
 * same set bounds every sleep to FI_NTX_PEER_CHECK_MS so that reading
 * happens. */

static int ntx_ntb_pidfd_open(pid_t pid)
{
#ifdef __NR_pidfd_open
	if (ntx_params.peer_pidfd) /* glibc before 2.36 has no wrapper */
		return (int)syscall(__NR_pidfd_open, pid, 0);
#endif
	errno = ENOSYS;
	return -1;
}

/* A process that runs (not a zombie), with its start time (field 22 of
 * /proc/PID/stat: a reused pid has another one). */
static bool ntx_ntb_proc_alive(pid_t pid, uint64_t *start)
{
	char path[64], buf[512], *p, state;
	unsigned long long t;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may hold anything */
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
			 "%*u %*u %*d %*d %*d %*d %*d %*d %llu", &state,
			 &t) != 2)
		return false;
	*start = t;
	return state != 'Z' && state != 'X' && state != 'x';
}

/* The peer processes and windows this process knows, shared by all its
 * endpoints; the lock is taken only to connect and to disconnect. */
#define NTX_NTB_WIN_BUCKETS 64
static struct {
	pthread_mutex_t lock;
	bool init;
	struct ntx_list procs;
	struct ntx_list wins[NTX_NTB_WIN_BUCKETS];
} ntx_ntb_peers = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void ntx_ntb_peers_init(void)
{
	if (ntx_ntb_peers.init)
		return;
	ntx_list_init(&ntx_ntb_peers.procs);
	for (int i = 0; i < NTX_NTB_WIN_BUCKETS; i++)
		ntx_list_init(&ntx_ntb_peers.wins[i]);
	ntx_ntb_peers.init = true;
}

/* A known process still is the one its entry watches: a pid can be
 * reused once the process is gone, and then its pidfd is readable (or,
 * without one, the start time differs). */
static bool ntx_ntb_proc_current(struct ntx_ntb_proc *p)
{
	struct pollfd pfd = { .fd = p->pidfd, .events = POLLIN };
	uint64_t start;

	if (atomic_load(&p->dead))
		return false;
	if (p->pidfd < 0)
		return ntx_ntb_proc_alive((pid_t)p->pid, &start) &&
		       start == p->start;
	if (poll(&pfd, 1, 0) == 0)
		return true;
	atomic_store(&p->dead, true);
	return false;
}

/* A new entry for a peer process, opened before its window is mapped:
 * had its pid been reused in between, the new process would have no such
 * window and the map would fail, so what we watch is the window's owner. */
static struct ntx_ntb_proc *ntx_ntb_proc_open(uint32_t pid)
{
	struct ntx_ntb_proc *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->pid = pid;
	p->pidfd = ntx_ntb_pidfd_open((pid_t)pid);
	if (p->pidfd < 0) {
		NTX_INFO(FI_LOG_EP_CTRL, "no pidfd for peer pid %u (%s): "
			 "checked through /proc every %d ms\n", pid,
			 strerror(errno), ntx_params.peer_check_ms);
		if (!ntx_ntb_proc_alive((pid_t)pid, &p->start)) {
			free(p);
			return NULL; /* the window map would fail too */
		}
	}
	ntx_list_insert_tail(&ntx_ntb_peers.procs, &p->entry);
	return p;
}

/* The entry of a peer process, with a reference (lock held); *known: it
 * was there before. A known entry with a pidfd is not checked here: the
 * window is taken from the pidfd's process (ntx_ntb_win_open), which
 * fails if it is gone, and then ntx_ntb_pwin_map checks it. */
static struct ntx_ntb_proc *ntx_ntb_proc_get(uint32_t pid, bool *known)
{
	struct ntx_ntb_proc *p = NULL;
	struct ntx_list *it;

	ntx_list_foreach(&ntx_ntb_peers.procs, it) {
		p = ntx_container_of(it, struct ntx_ntb_proc, entry);
		if (p->pid == pid)
			break;
		p = NULL;
	}
	/* found dead: its holders keep it, new windows get a new one */
	if (p && (atomic_load(&p->dead) ||
		  (p->pidfd < 0 && !ntx_ntb_proc_current(p)))) {
		ntx_list_remove(&p->entry);
		p = NULL;
	}
	*known = p != NULL;
	if (!p)
		p = ntx_ntb_proc_open(pid);
	if (p)
		p->refs++;
	return p;
}

static void ntx_ntb_proc_put(struct ntx_ntb_proc *p)
{
	if (!p || --p->refs)
		return;
	ntx_list_remove(&p->entry); /* a no-op when it was found dead */
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p);
}

static struct ntx_list *ntx_ntb_win_bucket(const struct ntx_addr *peer)
{
	uint64_t h = ((uint64_t)peer->pid << 32 | (uint32_t)peer->win_fd) ^
		     peer->epoch;

	h *= 0x9e3779b97f4a7c15ull;
	return &ntx_ntb_peers.wins[h >> 58]; /* 64 buckets */
}

/* The mapped window of this peer, if this process has it (lock held). */
static struct ntx_ntb_pwin *ntx_ntb_pwin_find(const struct ntx_addr *peer)
{
	struct ntx_list *b = ntx_ntb_win_bucket(peer), *it;

	ntx_list_foreach(b, it) {
		struct ntx_ntb_pwin *pw =
			ntx_container_of(it, struct ntx_ntb_pwin, entry);

		if (pw->pid == peer->pid && pw->win_fd == peer->win_fd &&
		    pw->epoch == peer->epoch && pw->ep_id == peer->ep_id &&
		    pw->service == peer->service)
			return pw;
	}
	return NULL;
}

/* Maps a peer window this process does not have yet (lock held). */
static int ntx_ntb_pwin_map(const struct ntx_addr *peer, uint32_t self,
			    struct ntx_ntb_pwin **out)
{
	struct ntx_ntb_pwin *pw = calloc(1, sizeof(*pw));
	bool known = false;
	int ret = -FI_ENOMEM;

	if (!pw)
		return ret;
	for (int tries = 0; tries < 2; tries++) {
		if (peer->pid != self) { /* our own windows die with us */
			pw->proc = ntx_ntb_proc_get(peer->pid, &known);
			ret = -FI_EADDRNOTAVAIL;
			if (!pw->proc)
				goto free_pw;
		}
		ret = ntx_ntb_win_map(peer, pw->proc ? pw->proc->pidfd : -1,
				      &pw->win);
		/* a known process that is gone: its pid may be the peer's
		 * now, under a new entry */
		if (!ret || !known || ntx_ntb_proc_current(pw->proc))
			break;
		ntx_ntb_proc_put(pw->proc);
		pw->proc = NULL;
	}
	if (ret)
		goto put_proc;
	pw->pid = peer->pid;
	pw->win_fd = peer->win_fd;
	pw->epoch = peer->epoch;
	pw->ep_id = peer->ep_id;
	pw->service = peer->service;
	pw->refs = 1;
	ntx_list_insert_tail(ntx_ntb_win_bucket(peer), &pw->entry);
	*out = pw;
	return 0;
put_proc:
	ntx_ntb_proc_put(pw->proc);
free_pw:
	free(pw);
	return ret;
}

/* The window of a peer, mapped once for all our endpoints; a window this
 * process has already is taken as it was checked, unless its owner closed
 * it or died (a name that would not connect either if mapped anew). */
static int ntx_ntb_pwin_get(const struct ntx_addr *peer, uint32_t self,
			    struct ntx_ntb_pwin **out)
{
	struct ntx_ntb_pwin *pw;
	int ret = 0;

	if (peer->host != ntx_host_id() || peer->win_fd < 0) {
		NTX_WARN(FI_LOG_EP_CTRL, "peer is not on this host\n");
		return -FI_EHOSTUNREACH;
	}
	pthread_mutex_lock(&ntx_ntb_peers.lock);
	ntx_ntb_peers_init();
	pw = ntx_ntb_pwin_find(peer);
	if (!pw) {
		ret = ntx_ntb_pwin_map(peer, self, out);
	} else if ((pw->proc && atomic_load(&pw->proc->dead)) ||
		   atomic_load_explicit(&ntx_win_hdr(&pw->win)->state,
					memory_order_acquire) != NTX_WIN_OPEN) {
		ret = -FI_EADDRNOTAVAIL;
	} else {
		pw->refs++;
		*out = pw;
	}
	pthread_mutex_unlock(&ntx_ntb_peers.lock);
	return ret;
}

static void ntx_ntb_pwin_put(struct ntx_ntb_pwin *pw)
{
	pthread_mutex_lock(&ntx_ntb_peers.lock);
	if (!--pw->refs) {
		ntx_list_remove(&pw->entry);
		munmap(pw->win.base, pw->win.g.size);
		ntx_ntb_proc_put(pw->proc);
		free(pw);
	}
	pthread_mutex_unlock(&ntx_ntb_peers.lock);
}

/* The wait set's timer, made the first time a peer is watched through
 * /proc (no fd spent where every peer has a pidfd). */
static int ntx_ntb_timer_open(struct ntx_shm_ep *be)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &be->timer };

	if (be->timer >= 0)
		return 0;
	be->timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (be->timer >= 0 &&
	    !epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->timer, &ev))
		return 0;
	NTX_WARN(FI_LOG_EP_CTRL, "peer check timer: %s; blocking waits may "
		 "miss dead peers\n", strerror(errno));
	if (be->timer >= 0)
		close(be->timer);
	be->timer = -1;
	return -1;
}

/* The fallback's bound on sleeping: a periodic timer in the wait set while
 * some peer is watched through /proc only. */
static void ntx_ntb_timer_set(struct ntx_shm_ep *be, bool on)
{
	long ms = ntx_params.peer_check_ms;
	struct itimerspec its = { 0 };

	if (on && ntx_ntb_timer_open(be))
		return;
	if (on) {
		its.it_interval.tv_sec = ms / 1000;
		its.it_interval.tv_nsec = (ms % 1000) * 1000000;
		its.it_value = its.it_interval;
	}
	if (be->timer >= 0 && timerfd_settime(be->timer, 0, &its, NULL))
		NTX_WARN(FI_LOG_EP_CTRL, "timerfd_settime: %s\n",
			 strerror(errno));
}

/* The endpoint's registration of a peer process's pidfd, made by its
 * first connection to that process; NULL when it cannot be made. */
static struct ntx_shm_watch *ntx_ntb_watch_get(struct ntx_shm_ep *be,
					       struct ntx_ntb_proc *p)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = p };
	struct ntx_shm_watch *w;
	struct ntx_list *it;

	ntx_list_foreach(&be->watches, it) {
		w = ntx_container_of(it, struct ntx_shm_watch, entry);
		if (w->proc == p) {
			w->conns++;
			return w;
		}
	}
	w = calloc(1, sizeof(*w));
	if (!w || epoll_ctl(be->epfd, EPOLL_CTL_ADD, p->pidfd, &ev)) {
		NTX_INFO(FI_LOG_EP_CTRL, "watching pid %u: %s; checked "
			 "through /proc every %d ms\n", p->pid,
			 w ? strerror(errno) : "no memory",
			 ntx_params.peer_check_ms);
		free(w);
		return NULL;
	}
	w->proc = p;
	w->conns = 1;
	ntx_list_insert_tail(&be->watches, &w->entry);
	return w;
}

/* Watches the owner of a connection's window, through its pidfd in our
 * wait set or through /proc. */
static void ntx_ntb_watch(struct ntx_shm_conn *c)
{
	struct ntx_ntb_proc *p = c->pw->proc;
	struct ntx_shm_ep *be = c->be;

	c->watch = NTX_WATCH_NONE;
	if (!p)
		return; /* our own endpoint: it dies with us (no fd spent) */
	if (p->pidfd >= 0) {
		c->wreg = ntx_ntb_watch_get(be, p);
		if (c->wreg) {
			c->watch = NTX_WATCH_PIDFD;
			return;
		}
	}
	c->watch = NTX_WATCH_PROC;
	if (!ntx_ntb_proc_alive((pid_t)p->pid, &c->start) ||
	    (p->pidfd < 0 && c->start != p->start))
		c->start = 0; /* gone: the next check fails the connection */
	if (!be->proc_watched++)
		ntx_ntb_timer_set(be, true);
}

/* Once per connection: at its failure or its end. */
static void ntx_ntb_unwatch(struct ntx_shm_conn *c)
{
	struct ntx_shm_ep *be = c->be;
	struct ntx_shm_watch *w = c->wreg;

	if (c->watch == NTX_WATCH_PIDFD && !--w->conns) {
		/* a dead peer's pidfd stays readable: out of the wait set */
		epoll_ctl(be->epfd, EPOLL_CTL_DEL, w->proc->pidfd, NULL);
		ntx_list_remove(&w->entry);
		free(w);
	} else if (c->watch == NTX_WATCH_PROC && !--be->proc_watched) {
		ntx_ntb_timer_set(be, false);
	}
	c->wreg = NULL;
	c->watch = NTX_WATCH_NONE;
}

/* The peer exited, or (without a pidfd) /proc says so. */
static bool ntx_ntb_peer_dead(struct ntx_shm_conn *c)
{
	uint64_t start;

	if (c->watch == NTX_WATCH_PIDFD)
		return atomic_load(&c->pw->proc->dead);
	if (c->watch != NTX_WATCH_PROC)
		return false;
	return !ntx_ntb_proc_alive((pid_t)c->peer.pid, &start) ||
	       start != c->start;
}

static void ntx_ntb_event(struct ntx_shm_ep *be, void *what, bool drain_wake)
{
	uint64_t ticks;
	char buf[64];

	if (what == &be->wake) {
		while (drain_wake &&
		       recv(be->wake, buf, sizeof(buf), MSG_DONTWAIT) > 0)
			;
	} else if (what == &be->timer) {
		if (read(be->timer, &ticks, sizeof(ticks)) < 0 &&
		    errno != EAGAIN)
			NTX_DBG(FI_LOG_EP_CTRL, "timerfd: %s\n",
				strerror(errno));
		be->check = true;
		ntx_ntb_quiet_off(be);
	} else { /* a peer process's pidfd: it exited */
		atomic_store(&((struct ntx_ntb_proc *)what)->dead, true);
		be->check = true;
		ntx_ntb_quiet_off(be);
	}
}

/* Takes what the wait set holds without blocking: peers' exits and timer
 * ticks ask for a check. Wake-ups are drained only by disarm: a re-check
 * after arming that drained one could lose a sender's wake-up. Events
 * beyond the first 64 stay pending (level-triggered) for the next call. */
static void ntx_ntb_events(struct ntx_shm_ep *be, bool drain_wake)
{
	struct epoll_event ev[64];
	int n = epoll_wait(be->epfd, ev, 64, 0);

	for (int i = 0; i < n; i++)
		ntx_ntb_event(be, ev[i].data.ptr, drain_wake);
}

/* The wait set, with our wake socket. */
static int ntx_ntb_wait_open(struct ntx_shm_ep *be)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &be->wake };

	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (be->epfd >= 0 && !epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->wake, &ev))
		return 0;
	NTX_WARN(FI_LOG_EP_CTRL, "wait set: %s\n", strerror(errno));
	if (be->epfd >= 0)
		close(be->epfd);
	return -FI_ENOMEM;
}

/* ---- connections --------------------------------------------------------- */

static void ntx_ntb_ring_zero(struct ntx_shm_ep *be, uint32_t slot);

static int ntx_ntb_slot_alloc(struct ntx_shm_ep *be, struct ntx_shm_conn *c)
{
	struct ntx_win_ctl *ctl;

	for (uint32_t i = 0; i < be->win.g.nslots; i++) {
		if (be->slots[i])
			continue;
		ctl = ntx_win_ctl(&be->win, i);
		atomic_store_explicit(&ctl->resp, 0, memory_order_relaxed);
		atomic_store_explicit(&ctl->closed, 0, memory_order_relaxed);
		atomic_store_explicit(&ctl->cons, 0, memory_order_relaxed);
		/* a slot used before is zeroed again: a peer that had not yet
		 * seen its connection fail (a job-key refusal, a protocol
		 * error) may have written an entry after the release zeroed
		 * it. Fresh slots are zero (and cost no system call). */
		if (be->reused[i / 64] & (1ull << (i % 64)))
			ntx_ntb_ring_zero(be, i);
		/* the reset is published by the release that follows (cell
		 * post or connect response) */
		be->slots[i] = c;
		if (i / 64 >= be->bit_words)
			be->bit_words = i / 64 + 1;
		c->my_slot = i;
		c->rx_ring = ntx_win_entry(&be->win, i, 0);
		return 0;
	}
	NTX_WARN(FI_LOG_EP_CTRL, "all %u peer slots in use (FI_NTX_MAX_PEERS)\n",
		 be->win.g.nslots);
	return -FI_ENOSPC;
}

/* Gives a released slot's ring pages back, so idle slots cost no memory
 * and the next connection starts from a zeroed ring (no old header or
 * payload can match its sequence numbers). */
static void ntx_ntb_slot_release(struct ntx_shm_ep *be, uint32_t slot)
{
	be->slots[slot] = NULL;
	be->reused[slot / 64] |= 1ull << (slot % 64);
	ntx_ntb_ring_zero(be, slot);
}

static void ntx_ntb_ring_zero(struct ntx_shm_ep *be, uint32_t slot)
{
	size_t off = be->win.g.ring_off + (size_t)slot * be->win.g.ring_size;

	if (fallocate(be->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		      (off_t)off, (off_t)be->win.g.ring_size)) {
		NTX_DBG(FI_LOG_EP_CTRL, "punch ring: %s\n", strerror(errno));
		memset(be->win.base + off, 0, be->win.g.ring_size);
	}
}

/* Where our ready bit lives in the peer's window, once we know our slot
 * there. */
static void ntx_ntb_peer_slot(struct ntx_shm_conn *c, uint32_t slot)
{
	c->peer_slot = slot;
	c->tx_ring = ntx_win_entry(&c->pwin, slot, 0);
	c->peered = true;
	c->peer_bits = ntx_win_bits(&c->pwin) + slot / 64;
	c->peer_bit = 1ull << (slot % 64);
	c->light = c->pwin.flags & NTX_WIN_F_MEMBARRIER;
}

/* Our side of a connection we asked for is now connected (the peer's
 * response, or its crossing request): flag its ring in our own ready
 * bitmap, so that the next bitmap pass drains it whatever its sender saw.
 * The peer may have been connected, and sending, for a while: then
 *  - it set its bit while we were connecting: ntx_ntb_poll_bits found no
 *    connected ring behind it, marked it idle, and a ntx_ntb_bits_clear
 *    in the same poll (our connect bell load came before the peer's, the
 *    bitmap load after) took it back; the fence and drain there skip a
 *    ring that is not connected;
 *  - it found the bit still set (left by the slot's previous connection,
 *    or by itself) and set nothing, and the same clear took it back;
 *  - it saw bits_on off: turning the bitmap on fences it and drains the
 *    rings directly, but only the connected ones.
 * In each case its entries sit in the ring with the bit clear, and a
 * sender that goes quiet never sets it again: lost until it sends more.
 * Its entries are visible to our next drain in each case (the fences of
 * ntx_ntb_bits_clear and of turning the bitmap on, or the sender's own
 * seq_cst fetch_or read by our acquire load of the bitmap); the bit only
 * makes sure that drain happens. Relaxed: only we read it for draining,
 * later in this thread; a sender that sees it set and skips its own is
 * covered as for any set bit (ntx_ntb_bits_clear). A connection we
 * accept needs nothing: its peer learns its slot only from our response. */
static void ntx_ntb_conn_flag(struct ntx_shm_conn *c)
{
	atomic_fetch_or_explicit(ntx_win_bits(&c->be->win) + c->my_slot / 64,
				 1ull << (c->my_slot % 64),
				 memory_order_relaxed);
}

/* A connection we asked for is answered: the peer's slot for us. */
static void ntx_ntb_conn_up(struct ntx_shm_conn *c, uint32_t peer_slot)
{
	ntx_ntb_peer_slot(c, peer_slot);
	c->state = NTX_CONN_CONNECTED;
	ntx_ntb_quiet_off(c->be);
	ntx_list_remove(&c->centry);
	ntx_ntb_conn_flag(c);
}

static struct ntx_shm_conn *ntx_ntb_conn_new(struct ntx_shm_ep *be,
					     const struct ntx_addr *peer,
					    void *vc)
{
	struct ntx_shm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->head.ops = &ntx_ntb_shm_ops;
	c->be = be;
	c->vc = vc;
	c->peer = *peer;
	ntx_list_init(&c->centry);
	if (ntx_ntb_pwin_get(peer, be->addr.pid, &c->pw))
		goto free_c;
	c->pwin = c->pw->win;
	ntx_ntb_watch(c);
	if (ntx_ntb_slot_alloc(be, c))
		goto unwatch;
	ntx_list_insert_tail(&be->conns, &c->entry);
	be->nconns++;
	ntx_ntb_quiet_off(be);
	return c;
unwatch:
	ntx_ntb_unwatch(c);
	ntx_ntb_pwin_put(c->pw);
free_c:
	free(c);
	return NULL;
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

/* Our ready bit in the peer's bitmap, found clear: set, then the
 * bitmap's count in the connect bell raised for a peer that watches
 * (ntx_ntb_quiet_on). seq_cst: the entry before the bit, the bit before
 * the bell. Out of line: once per busy spell of the ring. */
static __attribute__((noinline)) void
ntx_ntb_set_bit(struct ntx_shm_conn *c, struct ntx_win_hdr *ph)
{
	atomic_fetch_or_explicit(c->peer_bits, c->peer_bit,
				 memory_order_seq_cst);
	atomic_fetch_add_explicit(&ph->conn_bell, NTX_WIN_BITS_BELL,
				  memory_order_seq_cst);
}

/* After an entry: marks our ring ready in the peer's bitmap when the peer
 * drains by bitmap, and wakes the peer if it sleeps. */
static inline __attribute__((always_inline)) void
ntx_ntb_ring_bell_conn(struct ntx_shm_conn *c)
{
	struct ntx_win_hdr *ph = ntx_win_hdr(&c->pwin);

	/* the entry must be visible before we read bits_on and waiters, or
	 * the owner could switch to the bitmap or fall asleep without seeing
	 * it. A light sender leaves that fence to the owner's membarrier
	 * (ntx_ntb_fence_peers): a fence here would wait for the entry's
	 * lines to leave our store buffer, the largest cost of a message. */
	if (!c->light || !atomic_load_explicit(&ntx_ntb_mb_registered,
					       memory_order_relaxed))
		atomic_thread_fence(memory_order_seq_cst);
	else /* the compiler must not move the loads below above the entry */
		atomic_signal_fence(memory_order_seq_cst);
	/* a bit still set means the owner will look at our ring (see
	 * ntx_ntb_bits_clear for the one that is being taken back) */
	if (atomic_load_explicit(&ph->bits_on, memory_order_relaxed) &&
	    !(atomic_load_explicit(c->peer_bits, memory_order_relaxed) &
	      c->peer_bit))
		ntx_ntb_set_bit(c, ph);
	if (atomic_load_explicit(&ph->waiters, memory_order_relaxed))
		ntx_ntb_wake(c);
}

static void ntx_ntb_ring_conn_bell(struct ntx_shm_conn *c)
{
	/* release: cell or response written before the bell; the data bell
	 * that follows wakes a sleeping owner */
	atomic_fetch_add_explicit(&ntx_win_hdr(&c->pwin)->conn_bell, 1,
				  memory_order_seq_cst);
	if (atomic_load_explicit(&ntx_win_hdr(&c->pwin)->waiters,
				 memory_order_seq_cst))
		ntx_ntb_wake(c);
}

/* Posts our connect request into a free cell of the peer's window. */
static int ntx_ntb_cell_post(struct ntx_shm_conn *c)
{
	struct ntx_win_cell *cell;
	uint32_t expect;

	for (uint32_t i = 0; i < NTX_WIN_CELLS; i++) {
		cell = ntx_win_cell(&c->pwin, i);
		expect = NTX_CELL_FREE;
		if (!atomic_compare_exchange_strong(&cell->state, &expect,
						    NTX_CELL_BUSY))
			continue;
		cell->slot = c->my_slot;
		cell->from = c->be->addr;
		/* release: slot reset and cell body before POSTED */
		atomic_store_explicit(&cell->state, NTX_CELL_POSTED,
				      memory_order_release);
		ntx_ntb_ring_conn_bell(c);
		c->cell_pending = false;
		return 0;
	}
	c->cell_pending = true;
	c->be->rescan = true;
	ntx_ntb_quiet_off(c->be);
	return -FI_EAGAIN;
}

/* Tells the peer which of our slots carries its ring to us. */
static void ntx_ntb_respond(struct ntx_shm_conn *c)
{
	struct ntx_win_ctl *ps = ntx_win_ctl(&c->pwin, c->peer_slot);

	ps->resp_epoch = c->be->addr.epoch;
	/* release: our slot reset is visible before the peer writes into it */
	atomic_store_explicit(&ps->resp, c->my_slot + 1, memory_order_release);
	ntx_ntb_ring_conn_bell(c);
}

static void ntx_ntb_conn_fail(struct ntx_shm_conn *c, int err)
{
	if (c->state == NTX_CONN_FAILED)
		return;
	c->state = NTX_CONN_FAILED;
	ntx_ntb_quiet_off(c->be);
	if (c->be->hot == c)
		c->be->hot = NULL;
	ntx_list_remove(&c->centry);
	ntx_ntb_unwatch(c);
	c->be->cb.failed(c->vc, err);
}

static int ntx_ntb_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
			   void *vc, struct ntx_be_conn **conn)
{
	struct ntx_shm_conn *c = ntx_ntb_conn_new(ntx_shm_ep_of(be), peer, vc);

	if (!c)
		return -FI_EADDRNOTAVAIL;
	c->state = NTX_CONN_CONNECTING;
	ntx_ntb_quiet_off(c->be);
	ntx_list_insert_tail(&c->be->connecting, &c->centry);
	ntx_ntb_cell_post(c);
	*conn = &c->head;
	return 0;
}

static void ntx_ntb_conn_free(struct ntx_shm_conn *c)
{
	struct ntx_shm_ep *be = c->be;

	ntx_list_remove(&c->entry);
	ntx_list_remove(&c->centry);
	be->nconns--;
	ntx_ntb_quiet_off(be);
	if (be->hot == c)
		be->hot = NULL;
	if (c->peered) {
		/* release: our last entries before the flag; the peer drains
		 * them, then fails its side instead of waiting on us */
		atomic_store_explicit(&ntx_win_ctl(&c->pwin, c->peer_slot)->closed,
				      1, memory_order_release);
		ntx_ntb_ring_conn_bell(c);
	}
	if (c->state != NTX_CONN_FAILED) /* failing unwatched it */
		ntx_ntb_unwatch(c);
	ntx_ntb_slot_release(be, c->my_slot);
	ntx_ntb_pwin_put(c->pw);
	free(c);
}

static void ntx_ntb_disconnect(struct ntx_be_conn *conn)
{
	ntx_ntb_conn_free(ntx_shm_conn_of(conn));
}

static struct ntx_shm_conn *ntx_ntb_find(struct ntx_shm_ep *be,
					 const struct ntx_addr *a)
{
	struct ntx_list *it;

	ntx_list_foreach(&be->conns, it) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (c->state != NTX_CONN_FAILED &&
		    ntx_addr_same_ep(&c->peer, a))
			return c;
	}
	return NULL;
}

static void ntx_ntb_on_cell(struct ntx_shm_ep *be,
			    const struct ntx_win_cell *cell)
{
	struct ntx_shm_conn *c;
	const struct ntx_addr *from = &cell->from;

	if (!ntx_addr_valid(from) || from->host != be->addr.host) {
		NTX_WARN(FI_LOG_EP_CTRL, "dropping malformed connect request\n");
		return;
	}
	c = ntx_ntb_find(be, from);
	/* in our own name: only our own connect to ourselves (an endpoint
	 * sending to itself) names its slot here. A forged one would make
	 * us answer, and later close, in the control line of whichever of
	 * our slots it names, and so end that slot's connection. */
	if (ntx_addr_same_ep(from, &be->addr) &&
	    (from->epoch != be->addr.epoch || !c ||
	     c->state != NTX_CONN_CONNECTING || cell->slot != c->my_slot)) {
		NTX_WARN(FI_LOG_EP_CTRL, "dropping a connect request in our "
			 "own name\n");
		return;
	}
	if (c && c->peer.epoch != from->epoch) {
		NTX_INFO(FI_LOG_EP_CTRL, "peer pid %u restarted\n", from->pid);
		ntx_ntb_conn_fail(c, -FI_ECONNRESET);
		c = NULL; /* the engine disconnects the old one */
	}
	if (c && c->state == NTX_CONN_CONNECTING) {
		/* simultaneous connect: both requests name the same pair of
		 * slots, so either one completes the connection */
		if (cell->slot >= c->pwin.g.nslots)
			return ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
		ntx_ntb_conn_up(c, cell->slot);
		ntx_ntb_respond(c);
		be->cb.connected(c->vc);
		return;
	}
	if (c) /* duplicate of a request already answered */
		return;
	c = ntx_ntb_conn_new(be, from, NULL);
	if (!c)
		return;
	if (cell->slot >= c->pwin.g.nslots) {
		ntx_ntb_conn_free(c);
		return;
	}
	ntx_ntb_peer_slot(c, cell->slot);
	c->state = NTX_CONN_CONNECTED;
	ntx_ntb_quiet_off(c->be);
	c->vc = be->cb.accept(be->cb.ctx, &c->head, from);
	if (!c->vc) {
		ntx_ntb_conn_free(c);
		return;
	}
	ntx_ntb_respond(c);
}

static void ntx_ntb_poll_cells(struct ntx_shm_ep *be)
{
	struct ntx_win_cell *cell, copy;

	for (uint32_t i = 0; i < NTX_WIN_CELLS; i++) {
		cell = ntx_win_cell(&be->win, i);
		/* acquire: the cell body written before POSTED */
		if (atomic_load_explicit(&cell->state, memory_order_acquire) !=
		    NTX_CELL_POSTED)
			continue;
		memcpy(&copy.slot, &cell->slot, sizeof(copy.slot));
		memcpy(&copy.from, &cell->from, sizeof(copy.from));
		atomic_store_explicit(&cell->state, NTX_CELL_FREE,
				      memory_order_release);
		ntx_ntb_on_cell(be, &copy);
	}
}

static void ntx_ntb_poll_connecting(struct ntx_shm_ep *be)
{
	struct ntx_list *it, *tmp;
	uint32_t r;

	ntx_list_foreach_safe(&be->connecting, it, tmp) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, centry);
		if (c->cell_pending && ntx_ntb_cell_post(c))
			continue;
		/* acquire: the peer reset its slot before answering */
		r = atomic_load_explicit(&ntx_win_ctl(&be->win, c->my_slot)->resp,
					 memory_order_acquire);
		if (!r)
			continue;
		if (r > c->pwin.g.nslots) {
			ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
			continue;
		}
		ntx_ntb_conn_up(c, r - 1);
		be->cb.connected(c->vc);
	}
}

static int ntx_ntb_drain(struct ntx_shm_conn *c);

/* A connection whose peer is gone, by closing it, its endpoint or
 * exiting: what it wrote before is delivered (the ring is in our window,
 * still mapped), then the connection fails. A receiver that acknowledges
 * a delivery-complete send and exits at once must not fail that send. */
static void ntx_ntb_conn_end(struct ntx_shm_conn *c)
{
	while (c->state == NTX_CONN_CONNECTED && ntx_ntb_drain(c))
		;
	ntx_ntb_conn_fail(c, -FI_ECONNRESET);
}

/* Connections the peer closed (ntx_win_ctl.closed): what it wrote before
 * is delivered, then the connection fails. Runs on the connect bell. */
static void ntx_ntb_poll_closed(struct ntx_shm_ep *be)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (c->state != NTX_CONN_CONNECTED ||
		    !atomic_load_explicit(&ntx_win_ctl(&be->win,
						       c->my_slot)->closed,
					  memory_order_acquire))
			continue;
		NTX_INFO(FI_LOG_EP_CTRL, "peer pid %u closed the connection\n",
			 c->peer.pid);
		ntx_ntb_conn_end(c);
	}
}

/* Tells the peer how far we consumed, every quarter ring (as soon as a
 * whole entry completes one, else after the drain): the sender
 * re-reads it only when the ring looks full, and at most n/4 - 1 lines are
 * ever unpublished, so it never stalls. Inline: every drain asks. */
static inline __attribute__((always_inline)) void
ntx_ntb_publish_cons(struct ntx_shm_conn *c)
{
	if (c->rx_pub_left > 0)
		return;
	/* release: we are done reading the lines before the peer may
	 * overwrite them */
	atomic_store_explicit(&ntx_win_ctl(&c->pwin, c->peer_slot)->cons,
			      c->rx_pos, memory_order_release);
	c->rx_pub_left = (int32_t)(c->be->win.g.ring_lines / 4);
}

/* A consumed entry's payload lines where a later entry can start must
 * never read as a header when the ring comes round: clear their sequence
 * words. Old header lines need nothing, their numbers are behind.
 * Ordered before the peer may reuse the lines by the release of our
 * consumer position. */
static void ntx_ntb_clear_payload(struct ntx_win_entry *e, uint32_t lines)
{
	for (uint32_t k = NTX_RING_ALIGN; k < lines; k += NTX_RING_ALIGN)
		atomic_store_explicit(&((struct ntx_win_entry *)
					((uint8_t *)e + (size_t)k *
					 NTX_CACHELINE))->seq, 0,
				      memory_order_relaxed);
}

/* The line at our position in the peer's ring. */
static inline struct ntx_win_entry *ntx_ntb_rx_entry(
	const struct ntx_shm_conn *c)
{
	return (struct ntx_win_entry *)((uint8_t *)c->rx_ring +
					(size_t)c->rx_pos * NTX_CACHELINE);
}

/* Asks for the line k lines past entry e, for a read: past the ring's
 * end it names lines outside the ring, which a prefetch may (it never
 * faults), and costs no test of the wrap on every entry. */
static inline void ntx_ntb_rx_prefetch(const struct ntx_win_entry *e,
				       uint32_t k)
{
	__builtin_prefetch((const uint8_t *)e + (size_t)k * NTX_CACHELINE);
}

/* The next entry is the part right after the last one, in its line.
 * Acquire, as below. */
static inline bool ntx_ntb_rx_pair_ready(const struct ntx_shm_conn *c)
{
	return c->rx_next &&
	       atomic_load_explicit(&c->rx_next->seq, memory_order_acquire) ==
		       c->rx_seq + 1;
}

/* The next entry is at our position. Acquire: its body was written
 * before its number; any other number (stale or garbage) means not yet. */
static inline bool ntx_ntb_rx_line_ready(const struct ntx_shm_conn *c)
{
	return atomic_load_explicit(&ntx_ntb_rx_entry(c)->seq,
				    memory_order_acquire) == c->rx_seq + 1;
}

/* The next entry is there, at our position or right after the last part
 * in its line. Inline,
 * so that polling an idle ring costs a load or two and no call. */
static inline bool ntx_ntb_rx_ready(const struct ntx_shm_conn *c)
{
	return ntx_ntb_rx_pair_ready(c) || ntx_ntb_rx_line_ready(c);
}

/* An entry no sender of ours writes: the connection fails. */
static void ntx_ntb_bad_entry(struct ntx_shm_conn *c)
{
	NTX_WARN(FI_LOG_EP_DATA, "peer pid %u sent a bad entry\n",
		 c->peer.pid);
	ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
}

/* The part q, whose kind the caller read once: its fields copied out
 * once (the peer can still write them), checked, and handed on as the
 * eager message it stands for; a quarter's tag and CQ data are those of
 * the last half. The next part is looked for right after it. False when
 * it failed the connection. */
static inline __attribute__((always_inline)) bool
ntx_ntb_rx_part(struct ntx_shm_conn *c, struct ntx_win_quarter *q,
		uint32_t kind, bool first)
{
	const struct ntx_win_half *w = (const struct ntx_win_half *)q;
	uint32_t len = kind & 0xff;
	uint8_t flags = (uint8_t)(kind >> 8), *next;
	uint64_t bytes, tag, data;

	if ((kind & ~(NTX_WIN_HALF | NTX_WIN_SHORT |
		      (NTX_PF_TAGGED | NTX_PF_DATA) << 8 | 0xffu)) ||
	    len > NTX_WIN_HALF_MAX)
		goto bad;
	if (kind & NTX_WIN_SHORT) {
		next = (uint8_t *)(q + 1);
		memcpy(&bytes, q->bytes, sizeof(bytes));
		tag = c->rx_last_tag;
		data = c->rx_last_data;
	} else {
		/* a half fits where it starts at most half a line in (first:
		 * at the start; else lines are aligned: the offset in the
		 * line is the address's) */
		if (!first &&
		    (uintptr_t)q % NTX_CACHELINE > NTX_CACHELINE / 2)
			goto bad;
		next = (uint8_t *)(w + 1);
		memcpy(&bytes, w->bytes, sizeof(bytes));
		c->rx_last_tag = tag = w->tag;
		c->rx_last_data = data = w->data;
	}
	c->rx_next = (uintptr_t)next % NTX_CACHELINE
			     ? (struct ntx_win_quarter *)next
			     : NULL;
	c->be->cb.recv_small(c->vc, flags, tag, data, bytes, len);
	return true;
bad:
	ntx_ntb_bad_entry(c);
	return false;
}

/* Drains the peer's ring in our window; returns entries handled, at most
 * NTX_NTB_DRAIN_MAX, so one busy peer cannot hold the poll. Inline into
 * the poll of few peers (ntx_ntb_poll_from), out of line elsewhere. */
static inline __attribute__((always_inline)) int
ntx_ntb_drain_inline(struct ntx_shm_conn *c, bool ready)
{
	struct ntx_shm_ep *be = c->be;
	struct ntx_win_entry *e;
	struct ntx_wire_hdr hdr;
	uint32_t len, lines, n = be->win.g.ring_lines, seq0 = c->rx_seq;
	int cnt = 0;

	ntx_ntb_quiet_off(be); /* its position moves */
	while (c->state == NTX_CONN_CONNECTED && cnt < NTX_NTB_DRAIN_MAX) {
		/* the sender's next entry after a part is right after it
		 * or at our position: the part first, as it was only
		 * written if nothing was written after the last */
		if (ntx_ntb_rx_pair_ready(c)) {
			c->rx_seq++;
			ready = false;
			if (!ntx_ntb_rx_part(c, c->rx_next, c->rx_next->kind,
					     false))
				return cnt;
			cnt++;
			continue;
		}
		/* ready: the caller saw the first entry there (at our
		 * position: a part in the last line would have been taken
		 * above) */
		if (!ready && !ntx_ntb_rx_line_ready(c))
			break;
		ready = false;
		e = ntx_ntb_rx_entry(c);
		c->rx_seq++;
		c->rx_next = NULL;
		len = e->len;
		if (len == NTX_WIN_SKIP) { /* the rest of the lap is unused */
			c->rx_pub_left -= (int32_t)(n - c->rx_pos);
			c->rx_pos = 0;
			continue;
		}
		if (ntx_win_is_half(len)) { /* a part: len is its kind */
			c->rx_pos = ntx_ring_advance(c->rx_pos, NTX_RING_ALIGN,
						     n);
			c->rx_pub_left -= NTX_RING_ALIGN;
			ntx_ntb_rx_prefetch(e, 3 * NTX_RING_ALIGN);
			if (!ntx_ntb_rx_part(c, ntx_win_part(e, 0), len, true))
				return cnt;
			cnt++;
			continue;
		}
		lines = ntx_ring_lines(len);
		if (len > be->win.max_payload || c->rx_pos + lines > n) {
			ntx_ntb_bad_entry(c);
			return cnt;
		}
		ntx_wire_hdr_load(&hdr, &e->hdr);
		c->rx_pos = ntx_ring_advance(c->rx_pos, lines, n);
		c->rx_pub_left -= (int32_t)lines;
		/* ask for the line two small entries past the next one
		 * while the engine handles this entry: a sender ahead of us
		 * has written it, and its miss then overlaps (8-byte windows
		 * 43.4 -> 38.6 ns a message); the next entry's own line may
		 * still be in the sender's store buffer. A read prefetch
		 * changes nothing the sender could see. */
		ntx_ntb_rx_prefetch(e, lines + 2 * NTX_RING_ALIGN);
		be->cb.recv(c->vc, &hdr, e->payload, len);
		ntx_ntb_clear_payload(e, lines);
		cnt++;
		/* a quarter ring consumed: told now, not after the drain, so
		 * a sender streaming a message (NTX_OP_SDATA) writes its next
		 * segment while we copy out this one */
		if (c->rx_pub_left <= 0 && c->state == NTX_CONN_CONNECTED)
			ntx_ntb_publish_cons(c);
	}
	/* nothing consumed, nothing new to tell */
	if (c->rx_seq != seq0 && c->state == NTX_CONN_CONNECTED)
		ntx_ntb_publish_cons(c);
	return cnt;
}

static int ntx_ntb_drain(struct ntx_shm_conn *c)
{
	return ntx_ntb_drain_inline(c, false);
}

/* About to sleep: from now on senders write our eventfd. The caller then
 * polls once more before it blocks. */
static void ntx_ntb_arm(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	be->armed = true;
	atomic_store_explicit(&ntx_win_hdr(&be->win)->waiters, 1,
			      memory_order_seq_cst);
	/* every sender either sees us armed or our re-check sees its entry */
	ntx_ntb_fence_peers();
	be->rescan = true;
	ntx_ntb_quiet_off(be);
}

/* Awake: drains the wake-ups and notes which peers died meanwhile (the
 * next poll fails them). */
static void ntx_ntb_disarm(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	if (!be->armed)
		return;
	be->armed = false;
	atomic_store_explicit(&ntx_win_hdr(&be->win)->waiters, 0,
			      memory_order_relaxed);
	ntx_ntb_events(be, true);
}

static int ntx_ntb_wait_fd(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	return be->epfd;
}

/* The connected peer behind a ready bit, or NULL. */
static struct ntx_shm_conn *ntx_ntb_slot_conn(struct ntx_shm_ep *be,
					      uint32_t w, uint64_t bit)
{
	uint32_t slot = w * 64 + (uint32_t)__builtin_ctzll(bit);
	struct ntx_shm_conn *c = slot < be->win.g.nslots ? be->slots[slot]
							: NULL;

	return c && c->state == NTX_CONN_CONNECTED ? c : NULL;
}

/* Drains the rings whose ready bits are set, from bit word w on, whose
 * bits still to take are b; one cache line per 512 slots whatever the
 * number of peers. A bit stays set while its ring is busy, so a busy
 * sender only reads it (no store, no fence, no cache line moving per
 * message); rings found empty are remembered in 'idle' and their bits
 * taken back by ntx_ntb_bits_clear. */
static __attribute__((noinline)) int
ntx_ntb_poll_bits(struct ntx_shm_ep *be, uint32_t w, uint64_t b)
{
	_Atomic uint64_t *bits = ntx_win_bits(&be->win);
	uint32_t words = be->bit_words;
	struct ntx_shm_conn *c;
	int cnt = 0, got;

	for (;;) {
		for (; b; b &= b - 1) {
			c = ntx_ntb_slot_conn(be, w, b & -b);
			got = c ? ntx_ntb_drain(c) : 0;
			if (got)
				be->idle[w] &= ~(b & -b);
			else
				be->idle[w] |= b & -b;
			cnt += got;
		}
		if (++w >= words)
			return cnt;
		/* acquire: pairs with the senders' fetch_or after their
		 * entries */
		b = atomic_load_explicit(&bits[w], memory_order_acquire);
	}
}

/* Takes back the bits of rings that stayed empty since the last pass,
 * every NTX_NTB_BITS_CLEAR_NS at most. A sender that still saw its bit
 * set may have skipped setting it for an entry we have not seen: the
 * fence on every peer after clearing makes such entries visible, and the
 * last drain below finds them; later entries find the bit clear and set
 * it again. */
static int ntx_ntb_bits_clear(struct ntx_shm_ep *be)
{
	_Atomic uint64_t *bits = ntx_win_bits(&be->win);
	uint32_t words = (be->win.g.nslots + 63) / 64;
	uint64_t now = ntx_now_ns(), m;
	bool any = false;
	int cnt = 0, got;

	if (now < be->bits_clear_ns)
		return 0;
	be->bits_clear_ns = now + NTX_NTB_BITS_CLEAR_NS;
	for (uint32_t w = 0; w < words; w++) {
		if (!be->idle[w])
			continue;
		/* seq_cst: the clear before the fence and the drain below */
		atomic_fetch_and_explicit(&bits[w], ~be->idle[w],
					  memory_order_seq_cst);
		any = true;
	}
	if (!any)
		return 0;
	ntx_ntb_quiet_off(be); /* the words the watch keeps change */
	ntx_ntb_fence_peers();
	for (uint32_t w = 0; w < words; w++) {
		for (m = be->idle[w]; m; m &= m - 1) {
			struct ntx_shm_conn *c =
				ntx_ntb_slot_conn(be, w, m & -m);

			if (!c)
				continue;
			got = ntx_ntb_drain(c);
			cnt += got;
			if (got) /* busy again: make sure its bit is set */
				atomic_fetch_or_explicit(&bits[w], m & -m,
							 memory_order_relaxed);
		}
		be->idle[w] = 0;
	}
	return cnt;
}

/* Drains the ready rings of be's connections from 'it' on (a ring whose
 * drain fails its connection takes it off the list: the next is taken
 * first); ready: the caller saw the first one's next entry there. */
static __attribute__((noinline)) int ntx_ntb_poll_from(struct ntx_shm_ep *be,
							struct ntx_list *it,
							bool ready)
{
	struct ntx_list *tmp;
	int cnt = 0;

	for (tmp = it->next; it != &be->conns; it = tmp, tmp = it->next) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (ready || (c->state == NTX_CONN_CONNECTED &&
			      ntx_ntb_rx_ready(c)))
			cnt += ntx_ntb_drain_inline(c, ready);
		ready = false;
	}
	return cnt;
}

/* Adds the words c's next entry comes in to the watch: the part right
 * after the last one in its line, when that was a part that did not end
 * it, and the line at our position. False when they do not fit. */
static bool ntx_ntb_watch_ring(struct ntx_be_watch *w,
			       const struct ntx_shm_conn *c)
{
	if (w->n + (c->rx_next ? 2 : 1) > NTX_BE_WATCH_MAX)
		return false;
	if (c->rx_next) {
		w->word[w->n] = &c->rx_next->seq;
		w->busy[w->n++] = c->rx_seq + 1;
	}
	w->word[w->n] = &ntx_ntb_rx_entry(c)->seq;
	w->busy[w->n++] = c->rx_seq + 1;
	return true;
}

/* After NTX_NTB_QUIET_AFTER polls in a row that found nothing, with
 * nothing new on the connect bell: the words the next poll would read,
 * for the engine's ntx_be_quiet. With few peers, each connection's ring.
 * With the ready bitmap, the rings of the bits set now (a sender whose
 * bit is set writes no bit); a sender that finds its bit clear sets it,
 * then adds NTX_WIN_BITS_BELL to the connect bell, which the watch reads
 * instead of the bitmap. The bell's value kept (conn_bell_seen) was read
 * by the poll, before the bitmap here: a bit seen clear is set later, and
 * its ring of the bell comes after that value (acquire: a value that
 * counts a sender's ring makes its bit visible to the reads after it).
 * On only if none of those rings has an entry now. No watch when the
 * rings do not fit. */
static __attribute__((noinline)) void ntx_ntb_quiet_on(struct ntx_shm_ep *be)
{
	struct ntx_be_watch *w = &be->head.watch;
	struct ntx_shm_conn *c;
	struct ntx_list *it;

	w->n = 0;
	if (!be->bits_on) {
		ntx_list_foreach(&be->conns, it) {
			c = ntx_container_of(it, struct ntx_shm_conn, entry);
			if (c->state != NTX_CONN_CONNECTED ||
			    !ntx_ntb_watch_ring(w, c))
				return;
		}
	} else {
		_Atomic uint64_t *bits = ntx_win_bits(&be->win);

		/* a set bit of a slot with no connected peer is skipped by
		 * the poll too; its connecting turns the watch off */
		for (uint32_t i = 0; i < be->bit_words; i++) {
			/* acquire: as ntx_ntb_poll_bits */
			uint64_t b = atomic_load_explicit(&bits[i],
							  memory_order_acquire);

			for (; b; b &= b - 1) {
				c = ntx_ntb_slot_conn(be, i, b & -b);
				if (c && !ntx_ntb_watch_ring(w, c))
					return;
			}
		}
	}
	w->bell = &ntx_win_hdr(&be->win)->conn_bell;
	w->bell_seen = be->conn_bell_seen;
	w->on = true;
	/* an entry came since the poll: the next poll takes it */
	w->on = ntx_be_quiet(&be->head);
}

/* A poll by the ready bitmap found nothing: the watch is built after
 * NTX_NTB_QUIET_AFTER such polls in a row; one made while it is on (the
 * engine's rare work) keeps it only while its words are unchanged. */
static inline void ntx_ntb_bits_found_nothing(struct ntx_shm_ep *be)
{
	if (!be->head.watch.on) {
		if (++be->empty_polls >= NTX_NTB_QUIET_AFTER)
			ntx_ntb_quiet_on(be);
	} else if (!ntx_be_quiet(&be->head)) {
		ntx_ntb_quiet_off(be);
	}
}

/* ntx_ntb_poll whenever there is more to do than read each ring's next
 * header line. */
static __attribute__((noinline)) int ntx_ntb_poll_any(struct ntx_shm_ep *be)
{
	uint64_t bell;
	int cnt = 0;

	if (be->check) { /* a peer died while we slept */
		ntx_ntb_quiet_off(be);
		ntx_ntb_check_peers(&be->head);
	}
	bell = atomic_load_explicit(&ntx_win_hdr(&be->win)->conn_bell,
				    memory_order_acquire);
	/* its low half moved: connect work; the high half alone: a ring
	 * newly flagged in the bitmap, which the pass below drains */
	if (bell != be->conn_bell_seen) {
		ntx_ntb_quiet_off(be);
		if ((uint32_t)bell != (uint32_t)be->conn_bell_seen)
			be->rescan = true;
		be->conn_bell_seen = bell;
	}
	if (be->rescan) {
		ntx_ntb_quiet_off(be);
		be->rescan = false;
		ntx_ntb_poll_cells(be);
		ntx_ntb_poll_connecting(be);
		ntx_ntb_poll_closed(be);
	}
	/* With many peers, drain only the rings whose ready bits are set,
	 * so an idle peer costs nothing. With few, read each ring's next
	 * header line directly: the bitmap line then stays in the senders'
	 * caches and a message costs the receiver only its ring lines. */
	if ((be->nconns > NTX_NTB_DIRECT_POLL) != be->bits_on) {
		ntx_ntb_quiet_off(be);
		be->bits_on = !be->bits_on;
		atomic_store_explicit(&ntx_win_hdr(&be->win)->bits_on,
				      be->bits_on, memory_order_seq_cst);
		/* from here every sender sets its bit; entries of those that
		 * did not are found by the direct pass below */
		if (be->bits_on)
			ntx_ntb_fence_peers();
	} else if (be->bits_on) {
		cnt += ntx_ntb_poll_bits(
			be, 0,
			atomic_load_explicit(&ntx_win_bits(&be->win)[0],
					     memory_order_acquire));
		/* the clock is read on one poll in 256: off the fast path */
		if (!(++be->polls & 255))
			cnt += ntx_ntb_bits_clear(be);
		if (!cnt) /* (a drain turned the watch off) */
			ntx_ntb_bits_found_nothing(be);
		return cnt;
	}
	return cnt + ntx_ntb_poll_from(be, be->conns.next, false);
}

/* The one ring the bitmap pass found ready, drained (its entry seen). */
static __attribute__((noinline)) int
ntx_ntb_drain_bit(struct ntx_shm_ep *be, struct ntx_shm_conn *c, uint32_t w,
		  uint64_t bit)
{
	int got = ntx_ntb_drain_inline(c, true);

	if (got)
		be->idle[w] &= ~bit;
	/* (a drain that failed its connection left it cold) */
	if (c->state == NTX_CONN_CONNECTED)
		be->hot = c;
	return got;
}

/* The hot ring, its next entry seen, drained ahead of the bitmap. */
static __attribute__((noinline)) int
ntx_ntb_drain_hot(struct ntx_shm_ep *be, struct ntx_shm_conn *c)
{
	uint32_t slot = c->my_slot;

	be->hot_runs++;
	be->idle[slot / 64] &= ~(1ull << (slot % 64));
	return ntx_ntb_drain_inline(c, true);
}

/* The poll with the ready bitmap when nothing else is due: its words
 * read and, for each bit set, its ring's next header line, with no call
 * and no frame; one ready ring is drained out of line, two or more by
 * the whole pass from the first, and the bitmap's upkeep (1 poll in 256)
 * is ntx_ntb_poll_any's. */
static inline int ntx_ntb_poll_bits_quick(struct ntx_shm_ep *be)
{
	_Atomic uint64_t *bits = ntx_win_bits(&be->win);
	uint32_t words = be->bit_words, fw = 0;
	struct ntx_shm_conn *c, *first = NULL;
	uint64_t b, fm = 0;

	be->hot_runs = 0;
	if (!((be->polls + 1) & 255)) /* counted there */
		return ntx_ntb_poll_any(be);
	be->polls++;
	for (uint32_t w = 0; w < words; w++) {
		/* acquire: as ntx_ntb_poll_bits */
		b = atomic_load_explicit(&bits[w], memory_order_acquire);
		if (!b)
			continue;
		for (uint64_t m = b; m; m &= m - 1) {
			c = ntx_ntb_slot_conn(be, w, m & -m);
			if (!c || !ntx_ntb_rx_ready(c))
				continue;
			if (first)
				return ntx_ntb_poll_bits(be, fw, fm);
			first = c;
			fw = w;
			fm = m;
		}
		be->idle[w] |= b; /* the drained one's bit is taken out */
	}
	if (first)
		return ntx_ntb_drain_bit(be, first, fw, fm & -fm);
	ntx_ntb_bits_found_nothing(be);
	return 0;
}

/* The common poll, a few loads with no call and no frame: nothing new
 * on the connect bell, few peers (no bitmap), and each ring's next header
 * line read directly; the first ready ring and any other case go out of
 * line. With many peers, the same by the ready bitmap. */
static int ntx_ntb_poll(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	struct ntx_list *it;

	if (be->check || be->rescan ||
	    (be->nconns > NTX_NTB_DIRECT_POLL) != be->bits_on ||
	    atomic_load_explicit(&ntx_win_hdr(&be->win)->conn_bell,
				 memory_order_acquire) != be->conn_bell_seen)
		return ntx_ntb_poll_any(be);
	if (be->bits_on) {
		struct ntx_shm_conn *c = be->hot;

		if (c && be->hot_runs < NTX_NTB_HOT_RUNS && ntx_ntb_rx_ready(c))
			return ntx_ntb_drain_hot(be, c);
		return ntx_ntb_poll_bits_quick(be);
	}
	ntx_list_foreach(&be->conns, it) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (c->state == NTX_CONN_CONNECTED && ntx_ntb_rx_ready(c))
			return ntx_ntb_poll_from(be, it, true);
	}
	if (!be->head.watch.on && ++be->empty_polls >= NTX_NTB_QUIET_AFTER)
		ntx_ntb_quiet_on(be);
	return 0;
}

/* The line at our position in our ring in the peer's window. */
static inline struct ntx_win_entry *ntx_ntb_tx_entry(
	const struct ntx_shm_conn *c)
{
	return (struct ntx_win_entry *)((uint8_t *)c->tx_ring +
					(size_t)c->tx_pos * NTX_CACHELINE);
}

/* The entry at tx_pos, taking 'lines', is written: publish it. */
static inline __attribute__((always_inline)) void
ntx_ntb_commit(struct ntx_shm_conn *c, struct ntx_win_entry *e,
	       uint32_t lines)
{
	c->tx_pos = ntx_ring_advance(c->tx_pos, lines, c->pwin.g.ring_lines);
	c->tx_free -= lines;
	c->tx_next = NULL;
	/* release: the entry's body before its number */
	atomic_store_explicit(&e->seq, ++c->tx_seq, memory_order_release);
	/* ask for the next entry's line now: the next send then finds it
	 * here instead of waiting for the peer's cache to give it up while
	 * its stores fill the store buffer (8-byte windows 45 -> 39 ns a
	 * message). A read prefetch: one for writing (prefetchw) would take
	 * the line from a receiver that is polling it, and cost a ping-pong
	 * 10 to 20 % */
	__builtin_prefetch(ntx_ntb_tx_entry(c));
}

/* Writes one entry (or a skip) at tx_pos: payload, then the cleared
 * header line after it, then the sequence number. Inline: every message
 * writes one. */
static inline __attribute__((always_inline)) void
ntx_ntb_put(struct ntx_shm_conn *c, uint32_t lines, uint32_t len,
	    const void *hdr, const struct iovec *iov, size_t iovcnt)
{
	struct ntx_win_entry *e = ntx_ntb_tx_entry(c);
	uint8_t *dst = e->payload;

	e->len = len;
	if (hdr)
		memcpy(&e->hdr, hdr, sizeof(e->hdr));
	for (size_t i = 0; i < iovcnt && len; i++) {
		size_t m = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(dst, iov[i].iov_base, m);
		dst += m;
		len -= (uint32_t)m;
	}
	ntx_ntb_commit(c, e, lines);
}

/* The peer's FI_NTX_EAGER_MAX, from its window header (checked at map). */
static size_t ntx_ntb_conn_mtu(const struct ntx_be_conn *conn)
{
	const struct ntx_shm_conn *c =
		ntx_container_of(conn, const struct ntx_shm_conn, head);

	return c->pwin.max_payload;
}

/* Room for an entry of 'lines' at tx_pos, and the skip that has to
 * come first when it would cross the end: 0, -FI_EAGAIN when the ring is
 * full, or the connection's error. The peer's consumer position is read
 * only when what we know of it (tx_free) is not enough. Inline: every
 * message asks. */
static inline __attribute__((always_inline)) int
ntx_ntb_reserve(struct ntx_shm_conn *c, uint32_t lines)
{
	uint32_t cons, n = c->pwin.g.ring_lines;
	uint32_t need = ntx_ring_need(c->tx_pos, lines, n);

	if (c->state != NTX_CONN_CONNECTED)
		return c->state == NTX_CONN_FAILED ? -FI_ECONNRESET : -FI_EAGAIN;
	if (need > c->tx_free) {
		/* acquire: the peer finished reading lines up to cons */
		cons = atomic_load_explicit(&ntx_win_ctl(&c->be->win,
							 c->my_slot)->cons,
					    memory_order_acquire);
		if (cons >= n) {
			ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
			return -FI_ECONNRESET;
		}
		c->tx_free = ntx_ring_free(c->tx_pos, cons, n);
		if (need > c->tx_free)
			return -FI_EAGAIN;
	}
	if (need > lines)
		ntx_ntb_put(c, n - c->tx_pos, NTX_WIN_SKIP, NULL, NULL, 0);
	return 0;
}

static int ntx_ntb_send(struct ntx_be_conn *conn, const void *hdr,
			const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);
	uint32_t lines;
	int ret;

	if (len > c->pwin.max_payload)
		return -FI_EMSGSIZE;
	lines = ntx_ring_lines((uint32_t)len);
	ret = ntx_ntb_reserve(c, lines);
	if (ret)
		return ret;
	ntx_ntb_put(c, lines, (uint32_t)len, hdr, iov, iovcnt);
	ntx_ntb_ring_bell_conn(c);
	return 0;
}

/* A quarter entry's body at q, all but its number; right after it. */
static inline uint8_t *ntx_ntb_quarter_put(struct ntx_win_quarter *q,
					   uint32_t kind, uint64_t bytes)
{
	q->kind = kind | NTX_WIN_SHORT;
	memcpy(q->bytes, &bytes, sizeof(bytes));
	return (uint8_t *)(q + 1);
}

/* A half entry's body at w, all but its number, which becomes our last
 * half; right after it. */
static inline uint8_t *ntx_ntb_half_put(struct ntx_shm_conn *c,
					struct ntx_win_half *w, uint32_t kind,
					uint64_t tag, uint64_t data,
					uint64_t bytes)
{
	w->kind = kind;
	w->tag = tag;
	w->data = data;
	memcpy(w->bytes, &bytes, sizeof(bytes));
	c->tx_last_tag = tag;
	c->tx_last_data = data;
	return (uint8_t *)(w + 1);
}

/* A part's body, all but its number, at q: a quarter entry when tag and
 * data are those of our last half entry, else a half entry; right after
 * it. */
static inline uint8_t *ntx_ntb_part_put(struct ntx_shm_conn *c,
					struct ntx_win_quarter *q,
					uint8_t pflags, uint64_t tag,
					uint64_t data, const void *buf,
					size_t len)
{
	uint64_t bytes = ntx_word_of(buf, len);
	uint32_t kind = NTX_WIN_HALF | (uint32_t)pflags << 8 | (uint32_t)len;

	if (tag == c->tx_last_tag && data == c->tx_last_data)
		return ntx_ntb_quarter_put(q, kind, bytes);
	return ntx_ntb_half_put(c, (struct ntx_win_half *)q, kind, tag, data,
				bytes);
}

/* A message of at most NTX_WIN_HALF_MAX bytes as the first part of a new
 * entry (struct ntx_win_half), or a larger one of at most NTX_INLINE_MAX
 * in the header of a whole entry: ntx_ntb_send_inline's case that
 * reserves room, with the frame that takes. */
static __attribute__((noinline)) int
ntx_ntb_send_entry(struct ntx_shm_conn *c, uint8_t pflags, uint64_t tag,
		   uint64_t data, const void *buf, size_t len)
{
	uint32_t lines = ntx_ring_lines(0);
	struct ntx_win_entry *e;
	uint8_t *next;
	int ret;

	if (len <= NTX_WIN_HALF_MAX) {
		ret = ntx_ntb_reserve(c, NTX_RING_ALIGN);
		if (ret)
			return ret;
		e = ntx_ntb_tx_entry(c);
		next = ntx_ntb_part_put(c, ntx_win_part(e, 0), pflags, tag,
					data, buf, len);
		/* no number of an earlier lap may read as the next one
		 * where a later part can start (after a quarter, 16 on);
		 * ordered before the first part's by its release */
		if (next == (uint8_t *)ntx_win_part(e, 16))
			atomic_store_explicit(&ntx_win_part(e, 16)->seq, 0,
					      memory_order_relaxed);
		atomic_store_explicit(&ntx_win_part(e, 32)->seq, 0,
				      memory_order_relaxed);
		atomic_store_explicit(&ntx_win_part(e, 48)->seq, 0,
				      memory_order_relaxed);
		ntx_ntb_commit(c, e, NTX_RING_ALIGN);
		c->tx_next = (struct ntx_win_quarter *)next;
		ntx_ntb_ring_bell_conn(c);
		return 0;
	}
	ret = ntx_ntb_reserve(c, lines);
	if (ret)
		return ret;
	e = ntx_ntb_tx_entry(c);
	e->len = 0;
	ntx_wire_hdr_inline(&e->hdr, pflags, tag, data, buf, len);
	ntx_ntb_commit(c, e, lines);
	ntx_ntb_ring_bell_conn(c);
	return 0;
}

/* The message-rate path's packet, written straight into the entry: a
 * header built on the stack and then copied would be read back with
 * wider loads than it was stored with, which the store buffer cannot
 * forward (a stall of about a dozen cycles, the largest single cost of a
 * small send when measured). A message of at most NTX_WIN_HALF_MAX bytes
 * goes right after our last entry in its line when that was a part and
 * it fits, here, in a function without a frame; two 8-byte messages then
 * cost the receiver one line from our cache instead of two (MPI 8-byte
 * rate 5 to 7 % higher), and four when they repeat their tag and CQ data
 * (quarter entries). Anything else is ntx_ntb_send_entry. */
static int ntx_ntb_send_inline(struct ntx_be_conn *conn, uint8_t pflags,
			       uint64_t tag, uint64_t data, const void *buf,
			       size_t len)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);
	struct ntx_win_quarter *q = c->tx_next;
	uint32_t kind = NTX_WIN_HALF | (uint32_t)pflags << 8 | (uint32_t)len;
	uint8_t *next;

	if (len > NTX_WIN_HALF_MAX || !q || c->state != NTX_CONN_CONNECTED)
		return ntx_ntb_send_entry(c, pflags, tag, data, buf, len);
	if (tag == c->tx_last_tag && data == c->tx_last_data) {
		next = ntx_ntb_quarter_put(q, kind, ntx_word_of(buf, len));
	} else {
		/* a half fits where it starts at most half a line in (lines
		 * are aligned: the offset in the line is the address's) */
		if ((uintptr_t)q % NTX_CACHELINE > NTX_CACHELINE / 2)
			return ntx_ntb_send_entry(c, pflags, tag, data, buf,
						  len);
		next = ntx_ntb_half_put(c, (struct ntx_win_half *)q, kind, tag,
					data, ntx_word_of(buf, len));
	}
	c->tx_next = (uintptr_t)next % NTX_CACHELINE
			     ? (struct ntx_win_quarter *)next
			     : NULL;
	/* release: the part's body before its number */
	atomic_store_explicit(&q->seq, ++c->tx_seq, memory_order_release);
	ntx_ntb_ring_bell_conn(c);
	return 0;
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

static ssize_t ntx_ntb_bulk_read(struct ntx_be_conn *conn,
				 const struct iovec *local, size_t nlocal,
				 const struct ntx_wire_iov *remote,
				 size_t nremote)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);
	struct iovec r[NTX_MAX_IOV];

	return ntx_ntb_cma_result(c, process_vm_readv((pid_t)c->peer.pid,
						      local, nlocal, r,
						      ntx_ntb_remote(remote,
								     nremote, r),
						      0),
				  "process_vm_readv");
}

static ssize_t ntx_ntb_bulk_write(struct ntx_be_conn *conn,
				  const struct iovec *local, size_t nlocal,
				  const struct ntx_wire_iov *remote,
				  size_t nremote)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);
	struct iovec r[NTX_MAX_IOV];

	return ntx_ntb_cma_result(c, process_vm_writev((pid_t)c->peer.pid,
						       local, nlocal, r,
						       ntx_ntb_remote(remote,
								      nremote, r),
						       0),
				  "process_vm_writev");
}

static void ntx_ntb_check_peers(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	struct ntx_list *it, *tmp;

	ntx_ntb_svc_drain(be);
	ntx_ntb_events(be, false);
	be->check = false;
	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		struct ntx_win_hdr *ph = ntx_win_hdr(&c->pwin);

		if (c->state == NTX_CONN_FAILED)
			continue;
		if (ntx_ntb_peer_dead(c)) {
			NTX_INFO(FI_LOG_EP_CTRL, "peer pid %u is gone\n",
				 c->peer.pid);
			ntx_ntb_conn_end(c);
		} else if (atomic_load_explicit(&ph->state,
						memory_order_acquire) !=
			   NTX_WIN_OPEN) {
			NTX_INFO(FI_LOG_EP_CTRL, "peer pid %u closed its "
				 "endpoint\n", c->peer.pid);
			ntx_ntb_conn_end(c);
		}
	}
}

/* ---- services: a numeric name for an endpoint on this host ------------
 * The owner holds a listening abstract unix socket "ntx-UID-SERVICE" (gone
 * with the process, so nothing to clean up). A peer learns the owner's pid
 * from SO_PEERCRED of a connection to it, then finds the window memfd,
 * named after the service, among that process's fds. */

static socklen_t ntx_svc_sockaddr(uint32_t service, struct sockaddr_un *sun)
{
	int n;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
		     "ntx-%u-%u", getuid(), service);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

/* Abstract names belong to nobody: another user may bind ours first.
 * Then the service lives in a directory only we can enter instead, the
 * first of these that is ours, mode 0700: $XDG_RUNTIME_DIR/ntx,
 * ${TMPDIR:-/tmp}/ntx-UID (which another user may have made first), and
 * $HOME/.ntx-HOSTNAME (which nobody else can make; the host's name keeps
 * hosts that share a home directory apart). 0 when candidate i is not
 * set or not ours; only a claimant (make) creates the directory. */
#define NTX_SVC_DIRS 3
static socklen_t ntx_svc_path(uint32_t service, struct sockaddr_un *sun,
			      int i, bool make)
{
	const char *run = getenv("XDG_RUNTIME_DIR"), *tmp = getenv("TMPDIR");
	const char *home = getenv("HOME");
	char dir[96], host[33] = "";
	struct stat st;
	int n;

	if (!tmp || !*tmp || strlen(tmp) >= 48)
		tmp = "/tmp";
	if (i == 0 && run && *run && strlen(run) < 64)
		snprintf(dir, sizeof(dir), "%s/ntx", run);
	else if (i == 1)
		snprintf(dir, sizeof(dir), "%s/ntx-%u", tmp, getuid());
	else if (i == 2 && home && *home && strlen(home) < 48) {
		gethostname(host, sizeof(host) - 1);
		snprintf(dir, sizeof(dir), "%s/.ntx-%s", home, host);
	} else
		return 0;
	if (make && mkdir(dir, 0700) && errno != EEXIST)
		return 0;
	if (lstat(dir, &st))
		return 0;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
	    (st.st_mode & 077)) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s is not a private directory\n",
			 dir);
		return 0;
	}
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path, sizeof(sun->sun_path), "%s/svc-%u", dir,
		     service);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

/* The pid of the process listening at sun, if it is one of ours. */
static int ntx_svc_owner(const struct sockaddr_un *sun, socklen_t len,
			 pid_t *pid, uid_t *uid)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	int fd, ret = -FI_EADDRNOTAVAIL;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -FI_ENOMEM;
	if (!connect(fd, (const struct sockaddr *)sun, len) &&
	    !getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen)) {
		*pid = cred.pid;
		*uid = cred.uid;
		ret = 0;
	}
	close(fd);
	return ret;
}

static int ntx_svc_listen(struct ntx_shm_ep *be, const struct sockaddr_un *sun,
			  socklen_t len)
{
	be->svc_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    0);
	if (be->svc_fd < 0)
		return -FI_ENOMEM;
	if (!bind(be->svc_fd, (const struct sockaddr *)sun, len) &&
	    !listen(be->svc_fd, 128))
		return 0;
	close(be->svc_fd);
	be->svc_fd = -1;
	return -FI_EADDRINUSE;
}

static int ntx_ntb_svc_pid(uint32_t service, pid_t *pid);

/* The service's file in our private directory: no live process of ours
 * listens in any of them (ntx_ntb_svc_pid), so a file there is left from
 * a process that died, and is replaced. */
static int ntx_svc_claim_path(struct ntx_shm_ep *be)
{
	struct sockaddr_un sun;
	socklen_t len;
	pid_t pid;

	if (!ntx_ntb_svc_pid(be->addr.service, &pid))
		return -FI_EADDRINUSE; /* a live owner has it */
	for (int i = 0; i < NTX_SVC_DIRS; i++) {
		len = ntx_svc_path(be->addr.service, &sun, i, true);
		if (!len)
			continue;
		unlink(sun.sun_path);
		if (ntx_svc_listen(be, &sun, len))
			return -FI_EADDRINUSE;
		be->svc_path = strdup(sun.sun_path);
		return 0;
	}
	return -FI_EADDRINUSE;
}

static int ntx_ntb_svc_claim(struct ntx_shm_ep *be)
{
	struct sockaddr_un sun;
	socklen_t len = ntx_svc_sockaddr(be->addr.service, &sun);
	pid_t pid;
	uid_t uid;

	if (!ntx_svc_listen(be, &sun, len))
		return 0;
	if (!ntx_svc_owner(&sun, len, &pid, &uid) && uid != getuid()) {
		NTX_WARN(FI_LOG_EP_CTRL, "service %u: its name is held by uid "
			 "%u; listening in a private directory instead\n",
			 be->addr.service, (unsigned)uid);
		if (!ntx_svc_claim_path(be))
			return 0;
	}
	NTX_WARN(FI_LOG_EP_CTRL, "service %u is in use\n", be->addr.service);
	return -FI_EADDRINUSE;
}

/* Drops the connections peers made to learn our pid. */
static void ntx_ntb_svc_drain(struct ntx_shm_ep *be)
{
	int fd;

	if (be->svc_fd < 0)
		return;
	while ((fd = accept4(be->svc_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0)
		close(fd);
}

/* The owner of a service: at its abstract name if one of ours holds it,
 * else in our private directory (ntx_svc_path). */
static int ntx_ntb_svc_pid(uint32_t service, pid_t *pid)
{
	struct sockaddr_un sun;
	socklen_t len = ntx_svc_sockaddr(service, &sun);
	uid_t uid;

	if (!ntx_svc_owner(&sun, len, pid, &uid) && uid == getuid())
		return 0;
	for (int i = 0; i < NTX_SVC_DIRS; i++) {
		len = ntx_svc_path(service, &sun, i, false);
		if (len && !ntx_svc_owner(&sun, len, pid, &uid) &&
		    uid == getuid())
			return 0;
	}
	return -FI_EADDRNOTAVAIL;
}

static int ntx_ntb_svc_fd(pid_t pid, uint32_t service)
{
	char dir[64], path[64 + 256], link[128], want[64];
	struct dirent *d;
	DIR *dp;
	int found = -1;
	ssize_t n;

	snprintf(want, sizeof(want), "/memfd:ntx-svc-%u-%u ", getuid(),
		 service);
	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	dp = opendir(dir);
	if (!dp)
		return -1;
	while (found < 0 && (d = readdir(dp))) {
		snprintf(path, sizeof(path), "%s/%s", dir, d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strncmp(link, want, strlen(want)))
			found = atoi(d->d_name);
	}
	closedir(dp);
	return found;
}

/* Completes a name that has only a service (from fi_getinfo or
 * fi_av_insertsvc) with the pid, window and epoch of its owner. */
static int ntx_ntb_resolve(struct ntx_addr *a)
{
	struct ntx_win_hdr hdr;
	char path[64];
	pid_t pid;
	int fd, wfd, ret;

	if (!(a->flags & NTX_ADDR_F_UNBOUND))
		return 0;
	if (!a->service || a->host != ntx_host_id())
		return -FI_EADDRNOTAVAIL;
	ret = ntx_ntb_svc_pid(a->service, &pid);
	if (ret)
		return ret;
	wfd = ntx_ntb_svc_fd(pid, a->service);
	if (wfd < 0)
		return -FI_EADDRNOTAVAIL;
	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, wfd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -FI_EADDRNOTAVAIL;
	ret = pread(fd, &hdr, sizeof(hdr), 0) == sizeof(hdr) &&
	      hdr.magic == NTX_WIN_MAGIC && hdr.pid == (uint32_t)pid
		      ? 0 : -FI_EADDRNOTAVAIL;
	close(fd);
	if (ret)
		return ret;
	a->pid = (uint32_t)pid;
	a->win_fd = wfd;
	a->ep_id = hdr.ep_id;
	a->epoch = hdr.epoch;
	a->flags &= (uint16_t)~NTX_ADDR_F_UNBOUND;
	return 0;
}

static int ntx_ntb_wake_open(struct ntx_shm_ep *be)
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

/* Our name before anything is made; the epoch tells this endpoint from
 * an earlier one that had the same pid and id (a restarted peer). */
static void ntx_ntb_name_init(struct ntx_shm_ep *be,
			      const struct ntx_addr *want)
{
	be->addr.magic = NTX_ADDR_MAGIC;
	be->addr.version = NTX_ADDR_VERSION;
	be->addr.host = ntx_host_id();
	be->addr.pid = (uint32_t)getpid();
	be->addr.ep_id = atomic_fetch_add(&ntx_ntb_next_ep_id, 1);
	be->addr.service = want ? want->service : 0;
	be->addr.epoch = ntx_random64();
}

/* The tables of our window's slots: the connection behind each, and the
 * bitmap words of idle ready bits and of slots released before. */
static int ntx_ntb_slots_alloc(struct ntx_shm_ep *be)
{
	size_t words = (be->win.g.nslots + 63) / 64;

	be->slots = calloc(be->win.g.nslots, sizeof(*be->slots));
	be->idle = calloc(words, sizeof(*be->idle));
	be->reused = calloc(words, sizeof(*be->reused));
	if (be->slots && be->idle && be->reused)
		return 0;
	free(be->slots);
	free(be->idle);
	free(be->reused);
	return -FI_ENOMEM;
}

/* Gives our service number up: its socket, and its file if it has one. */
static void ntx_ntb_svc_release(struct ntx_shm_ep *be)
{
	if (be->svc_fd >= 0)
		close(be->svc_fd);
	if (be->svc_path) {
		unlink(be->svc_path);
		free(be->svc_path);
	}
}

static int ntx_ntb_open(struct ntx_be_ep **out, const struct ntx_addr *want,
			const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_shm_ep *be = calloc(1, sizeof(*be));
	int ret;

	(void)dev;
	if (!be)
		return -FI_ENOMEM;
	be->head.ops = &ntx_ntb_shm_ops;
	be->cb = *cb;
	ntx_list_init(&be->conns);
	ntx_list_init(&be->connecting);
	ntx_list_init(&be->watches);
	ntx_ntb_name_init(be, want);
	be->svc_fd = -1;
	be->epfd = -1;
	be->timer = -1;
	ret = ntx_ntb_wake_open(be);
	if (ret)
		goto free_be;
	ret = ntx_ntb_wait_open(be);
	if (ret)
		goto close_wake;
	if (be->addr.service) {
		ret = ntx_ntb_svc_claim(be);
		if (ret)
			goto close_wait;
	}
	ret = ntx_ntb_win_create(be);
	if (ret)
		goto release_svc;
	be->addr.win_fd = be->fd;
	ret = ntx_ntb_slots_alloc(be);
	if (ret)
		goto unmap;
	*out = &be->head;
	return 0;
unmap:
	munmap(be->win.base, be->win.g.size);
	close(be->fd);
release_svc:
	ntx_ntb_svc_release(be);
close_wait:
	close(be->epfd);
close_wake:
	close(be->wake);
free_be:
	free(be);
	return ret;
}

static void ntx_ntb_close(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	struct ntx_list *it, *tmp;

	ntx_ntb_shm_fini(); /* the registration is done by now: join it */

	/* release: peers that see CLOSED stop using their connections */
	atomic_store_explicit(&ntx_win_hdr(&be->win)->state, NTX_WIN_CLOSED,
			      memory_order_release);
	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_ntb_conn_free(ntx_container_of(it, struct ntx_shm_conn,
						   entry));
	munmap(be->win.base, be->win.g.size);
	close(be->fd);
	ntx_ntb_svc_release(be);
	if (be->timer >= 0)
		close(be->timer);
	close(be->epfd);
	close(be->wake);
	free(be->slots);
	free(be->idle);
	free(be->reused);
	free(be);
}

static void ntx_ntb_getname(struct ntx_be_ep *bep, struct ntx_addr *addr)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	uint32_t ip4 = addr->ip4;
	uint16_t port = addr->port;

	*addr = be->addr;
	addr->ip4 = ip4;
	addr->port = port;
}

/* The engine's flags (a job key) travel in our connect cells. */
static void ntx_ntb_setname(struct ntx_be_ep *bep, const struct ntx_addr *addr)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	be->addr.flags = addr->flags;
}

static const struct ntx_be_ops ntx_ntb_shm_ops = {
	.name = "ntb-shm",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = 65536, /* bounded by FI_NTX_EAGER_MAX */
	.has_bulk = true,
	.streams = true,
	.open = ntx_ntb_open,
	.close = ntx_ntb_close,
	.getname = ntx_ntb_getname,
	.setname = ntx_ntb_setname,
	.connect = ntx_ntb_connect,
	.disconnect = ntx_ntb_disconnect,
	.conn_mtu = ntx_ntb_conn_mtu,
	.send = ntx_ntb_send,
	.send_inline = ntx_ntb_send_inline,
	.bulk_read = ntx_ntb_bulk_read,
	.bulk_write = ntx_ntb_bulk_write,
	.poll = ntx_ntb_poll,
	.check_peers = ntx_ntb_check_peers,
	.resolve = ntx_ntb_resolve,
	.arm = ntx_ntb_arm,
	.disarm = ntx_ntb_disarm,
	.wait_fd = ntx_ntb_wait_fd,
};

static struct ntx_be_desc ntx_ntb_shm_desc = {
	.name = "shm",
	.ops = &ntx_ntb_shm_ops,
	.local = true,
	.fini = ntx_ntb_shm_fini,
};
NTX_BE_REGISTER(ntx_ntb_shm_desc)
