/*
 * The ntb back end's peers (DESIGN §4, liveness): one entry per peer
 * process (its pidfd, or /proc where there is none) and one map per peer
 * window, shared by all endpoints of this process; each endpoint's wait
 * set (wake socket, the pidfds of its peers, a timer) and its periodic
 * check of its connections' peers.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ntx_ntb_int.h"

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

/* Maps a peer window this process does not have yet, with the window
 * provider wops (lock held). */
static int ntx_ntb_pwin_map(const struct ntx_ntb_win_ops *wops,
			    const struct ntx_addr *peer, uint32_t self,
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
		ret = wops->map(peer, pw->proc ? pw->proc->pidfd : -1,
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
	pw->wops = wops;
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
static int ntx_ntb_pwin_get(const struct ntx_ntb_win_ops *wops,
			    const struct ntx_addr *peer, uint32_t self,
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
		ret = ntx_ntb_pwin_map(wops, peer, self, out);
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
		pw->wops->unmap(&pw->win);
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
void ntx_ntb_timer_set(struct ntx_shm_ep *be, bool on)
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
void ntx_ntb_unwatch(struct ntx_shm_conn *c)
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

/* The window of c's peer, mapped once for all our endpoints, and the
 * watch of its owner: the window interface's peer_get. */
int ntx_ntb_peer_get(struct ntx_shm_conn *c)
{
	int ret = ntx_ntb_pwin_get(c->be->wops, &c->peer, c->be->addr.pid,
				   &c->pw);

	if (ret)
		return ret;
	c->pwin = c->pw->win;
	ntx_ntb_watch(c);
	return 0;
}

/* c's reference to its peer's window, given back (its watch ended
 * before: ntx_ntb_unwatch). */
void ntx_ntb_peer_put(struct ntx_shm_conn *c)
{
	ntx_ntb_pwin_put(c->pw);
}

/* The peer exited, or (without a pidfd) /proc says so. */
bool ntx_ntb_peer_dead(struct ntx_shm_conn *c)
{
	uint64_t start;

	if (c->watch == NTX_WATCH_PIDFD)
		return atomic_load(&c->pw->proc->dead);
	if (c->watch != NTX_WATCH_PROC)
		return false;
	return !ntx_ntb_proc_alive((pid_t)c->peer.pid, &start) ||
	       start != c->start;
}

void ntx_ntb_timer_tick(struct ntx_shm_ep *be)
{
	uint64_t ticks;

	if (read(be->timer, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
		NTX_DBG(FI_LOG_EP_CTRL, "timerfd: %s\n", strerror(errno));
	be->check = true;
	ntx_ntb_quiet_off(be);
}

static void ntx_ntb_event(struct ntx_shm_ep *be, void *what, bool drain_wake)
{
	char buf[64];

	if (what == &be->wake) {
		while (drain_wake &&
		       recv(be->wake, buf, sizeof(buf), MSG_DONTWAIT) > 0)
			;
	} else if (what == &be->timer) {
		ntx_ntb_timer_tick(be);
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
void ntx_ntb_events(struct ntx_shm_ep *be, bool drain_wake)
{
	struct epoll_event ev[64];
	int n = epoll_wait(be->epfd, ev, 64, 0);

	for (int i = 0; i < n; i++)
		ntx_ntb_event(be, ev[i].data.ptr, drain_wake);
}

/* The wait set, with our wake fd (events: EPOLLIN, with EPOLLET where
 * it is shared and nobody reads it). */
int ntx_ntb_wait_open(struct ntx_shm_ep *be, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.ptr = &be->wake };

	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (be->epfd >= 0 && !epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->wake, &ev))
		return 0;
	NTX_WARN(FI_LOG_EP_CTRL, "wait set: %s\n", strerror(errno));
	if (be->epfd >= 0)
		close(be->epfd);
	return -FI_ENOMEM;
}

void ntx_ntb_check_peers(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	struct ntx_list *it, *tmp;

	ntx_ntb_svc_drain(be);
	be->wops->wait_take(be, false);
	be->check = false;
	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		struct ntx_win_hdr *ph = ntx_win_hdr(&c->pwin);

		if (c->state == NTX_CONN_FAILED)
			continue;
		if (be->wops->peer_dead(c)) {
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
