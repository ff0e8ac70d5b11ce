/* A sender SIGKILLed in the middle of a rendezvous: the receiver, asleep
 * in a blocking wait (fi_cq_sread, fi_cntr_wait, or poll(2) on the
 * FI_GETWAIT fd after fi_trywait), wakes and gets an error completion for
 * the receive within 2 s, also while the dead sender is an unreaped
 * zombie, and also where peers are watched through /proc instead of
 * pidfds. The time from the SIGKILL to the error is measured and printed.
 * Several endpoints connected to one peer process share one pidfd and one
 * map of its window, and all their connections fail when it dies. */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

#define CAPS (FI_MSG | FI_TAGGED)
/* a split rendezvous (above FI_NTX_SHM_SPLIT_MIN): the receiver reads
 * half and waits for the sender to write the other half, which a sender
 * that stopped progressing never does */
#define BIG (1 << 20)
#define BOUND_MS 2000
#define WATCHDOG_S 10
#define RX_CTX ((void *)0xbad)

enum mode { M_SREAD, M_CNTR, M_FD };

static const char *mode_name[] = { "fi_cq_sread", "fi_cntr_wait",
				   "FI_GETWAIT fd" };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Connects, starts a rendezvous send, says so, and stops progressing. */
static int child_sender(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 7;
	char *buf = malloc(BIG), c;

	CHK(buf && t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	/* once this completed the connection is up: the RTS below goes
	 * straight into the receiver's ring */
	CHK(fi_send(t.ep, &v, 8, NULL, peer, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, 10000) == 1);
	t_fill(buf, BIG, 3);
	CHK(fi_send(t.ep, buf, BIG, NULL, peer, NULL) == 0);
	CHK(write(sock, "r", 1) == 1);
	CHK(read(sock, &c, 1) == 1); /* no progress from here: killed */
	return 0;
}

/* The killer thread, which is also the watchdog of the blocking wait. */
struct killer {
	pid_t victim;
	pid_t waiter; /* tid of the thread that blocks */
	bool reap;    /* reap the victim at once (else it stays a zombie) */
	struct tctx *t;
	uint64_t kill_ns;
	atomic_bool fired; /* the watchdog woke the waiter */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done; /* the waiter returned */
};

/* The waiter is blocked in the system call a wait sleeps in (read from
 * /proc/self/task/TID/syscall: its number, "running", or -1). */
static bool waiter_asleep(pid_t tid)
{
	char path[64], buf[64] = "";
	long nr;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	f = fopen(path, "r");
	if (!f)
		return true; /* cannot tell: kill now, the bound still holds */
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	nr = strtol(buf, NULL, 10);
	return
#ifdef SYS_poll
		nr == SYS_poll ||
#endif
#ifdef SYS_epoll_wait
		nr == SYS_epoll_wait ||
#endif
		nr == SYS_ppoll || nr == SYS_epoll_pwait;
}

static bool killer_done(struct killer *k)
{
	bool d;

	pthread_mutex_lock(&k->lock);
	d = k->done;
	pthread_mutex_unlock(&k->lock);
	return d;
}

/* Wakes a waiter that missed the death, so the test fails instead of
 * hanging: a signaled CQ returns -FI_EAGAIN, a counter that reached its
 * threshold returns 0, and the fd loop sees 'fired'. */
static void killer_watchdog(struct killer *k)
{
	struct timespec ts;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += WATCHDOG_S;
	pthread_mutex_lock(&k->lock);
	while (!k->done && ret != ETIMEDOUT)
		ret = pthread_cond_timedwait(&k->cond, &k->lock, &ts);
	pthread_mutex_unlock(&k->lock);
	if (ret != ETIMEDOUT)
		return;
	atomic_store(&k->fired, true);
	fi_cq_signal(k->t->cq);
	if (k->t->c[T_C_RECV])
		fi_cntr_add(k->t->c[T_C_RECV], 1000);
}

static void *killer_main(void *arg)
{
	struct killer *k = arg;
	siginfo_t si;

	while (!waiter_asleep(k->waiter) && !killer_done(k))
		sched_yield();
	k->kill_ns = now_ns();
	kill(k->victim, SIGKILL);
	if (k->reap)
		waitpid(k->victim, NULL, 0);
	else /* a zombie from here on (WNOWAIT leaves it unreaped) */
		waitid(P_PID, (id_t)k->victim, &si, WEXITED | WNOWAIT);
	killer_watchdog(k);
	return NULL;
}

static ssize_t wait_fd(struct tctx *t, struct killer *k, int fd)
{
	struct fi_cq_tagged_entry e;
	struct fid *fids[1] = { &t->cq->fid };
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t ret;

	for (;;) {
		ret = fi_cq_read(t->cq, &e, 1);
		if (ret != -FI_EAGAIN || atomic_load(&k->fired))
			return ret;
		if (fi_trywait(t->fab, fids, 1) == 0)
			poll(&p, 1, -1);
	}
}

static ssize_t wait_mode(enum mode m, struct tctx *t, struct killer *k,
			 int fd)
{
	struct fi_cq_tagged_entry e;
	uint64_t got;

	switch (m) {
	case M_SREAD:
		return fi_cq_sread(t->cq, &e, 1, NULL, -1);
	case M_CNTR:
		got = fi_cntr_read(t->c[T_C_RECV]);
		return fi_cntr_wait(t->c[T_C_RECV], got + 1, -1);
	default:
		return wait_fd(t, k, fd);
	}
}

static void open_receiver(enum mode m, struct tctx *t, int *fd)
{
	if (m == M_CNTR) {
		cr_assert_eq(t_open_cntrs(t, t_hints(CAPS), T_CBIT(T_C_RECV)),
			     0);
		return;
	}
	cr_assert_eq(t_open_cq_wait(t, t_hints(CAPS), 0, FI_WAIT_FD), 0);
	if (m == M_FD)
		cr_assert_eq(fi_control(&t->cq->fid, FI_GETWAIT, fd), 0);
}

/* The receive's error entry: the dead peer's reset (or I/O error). */
static void check_error(enum mode m, struct tctx *t, ssize_t ret)
{
	struct fi_cq_err_entry err = { 0 };

	cr_assert_eq(ret, -FI_EAVAIL, "%s: an error, not %zd",
		     mode_name[m], ret);
	if (m == M_CNTR)
		cr_assert_eq(fi_cntr_readerr(t->c[T_C_RECV]), 1);
	cr_assert_eq(fi_cq_readerr(t->cq, &err, 0), 1);
	cr_assert_eq(err.op_context, RX_CTX);
	cr_assert(err.flags & FI_RECV);
	cr_assert(err.err == FI_ECONNRESET || err.err == FI_EIO,
		  "error %d", err.err);
}

static void run(enum mode m, bool zombie, const char *what)
{
	struct tctx t;
	struct killer k = { .reap = !zombie, .t = &t,
			    .lock = PTHREAD_MUTEX_INITIALIZER,
			    .cond = PTHREAD_COND_INITIALIZER };
	fi_addr_t peer;
	uint64_t v = 0, err_ns;
	char *buf = malloc(BIG), c;
	int sock, fd = -1;
	pthread_t th;
	siginfo_t si = { 0 };
	ssize_t ret;

	/* pidfds watch peers of the shm window; a peer reached through a
	 * network back end is failed by its connection breaking */
	if (t_local_via_network())
		cr_skip_test("the peer is not on the shm window");
	k.victim = t_fork(&sock, child_sender);
	cr_assert_gt(k.victim, 0);
	open_receiver(m, &t, &fd);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	cr_assert_eq(fi_recv(t.ep, &v, 8, NULL, peer, NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 10000), 1);
	cr_assert_eq(fi_recv(t.ep, buf, BIG, NULL, peer, RX_CTX), 0);
	cr_assert_eq(read(sock, &c, 1), 1, "the RTS is in our ring");

	k.waiter = (pid_t)syscall(SYS_gettid);
	cr_assert_eq(pthread_create(&th, NULL, killer_main, &k), 0);
	ret = wait_mode(m, &t, &k, fd);
	err_ns = now_ns();
	pthread_mutex_lock(&k.lock);
	k.done = true;
	pthread_cond_signal(&k.cond);
	pthread_mutex_unlock(&k.lock);
	pthread_join(th, NULL);

	check_error(m, &t, ret);
	fprintf(stderr, "death: %s%s: %.1f ms from SIGKILL to the error "
		"completion\n", what, zombie ? " (zombie)" : "",
		(double)(err_ns - k.kill_ns) / 1e6);
	cr_assert_lt(err_ns - k.kill_ns, BOUND_MS * 1000000ull,
		     "%s: the error came %.1f ms after the SIGKILL", what,
		     (double)(err_ns - k.kill_ns) / 1e6);
	if (zombie) { /* still unreaped while we got the error */
		cr_assert_eq(waitid(P_PID, (id_t)k.victim, &si,
				    WEXITED | WNOHANG | WNOWAIT), 0);
		cr_assert_eq(si.si_pid, k.victim);
		cr_assert_eq(t_join(k.victim), 128 + SIGKILL);
	}
	close(sock);
	t_close(&t);
	free(buf);
}

Test(death, cq_sread_wakes_on_a_killed_sender, .timeout = 30)
{
	run(M_SREAD, false, mode_name[M_SREAD]);
}

Test(death, cntr_wait_wakes_on_a_killed_sender, .timeout = 30)
{
	run(M_CNTR, false, mode_name[M_CNTR]);
}

Test(death, wait_fd_wakes_on_a_killed_sender, .timeout = 30)
{
	run(M_FD, false, mode_name[M_FD]);
}

Test(death, cq_sread_wakes_on_a_zombie_sender, .timeout = 30)
{
	run(M_SREAD, true, mode_name[M_SREAD]);
}

/* Where pidfd_open fails: /proc is read and waits wake every
 * FI_NTX_PEER_CHECK_MS; a zombie counts as dead there too. */
Test(death, without_pidfd_a_zombie_sender_is_noticed, .timeout = 30)
{
	setenv("FI_NTX_PEER_PIDFD", "0", 1); /* before the provider loads */
	run(M_SREAD, true, "fi_cq_sread without pidfd");
}

Test(death, without_pidfd_wait_fd_wakes, .timeout = 30)
{
	setenv("FI_NTX_PEER_PIDFD", "0", 1);
	run(M_FD, false, "FI_GETWAIT fd without pidfd");
}

/* ---- a message from a peer that is gone ------------------------------------ */

/* Sends one tagged message, waits for its completion, closes and exits. */
static int child_sends_and_exits(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 0x5e4d;

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(fi_tsend(t.ep, &v, 8, NULL, peer, 5, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, 10000) == 1);
	t_close(&t);
	return 0;
}

/* The sender's eager message completed at the sender, which then exited
 * before the receive was posted: the receive still gets it, after the
 * receiver learned of the exit (its own send to the gone peer failed). */
static void message_outlives_its_sender(const char *domain)
{
	struct fi_cq_err_entry err;
	struct fi_cq_tagged_entry e;
	uint64_t in = 0, out = 1;
	fi_addr_t peer;
	struct tctx t;
	int sock, ret;
	pid_t pid;

	if (domain)
		setenv("NTX_TEST_DOMAIN", domain, 1);
	pid = t_fork(&sock, child_sends_and_exits);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	/* the child's send needs our progress (connection set-up) */
	for (uint64_t end = now_ns() + 10000000000ull;;) {
		int st;

		(void)fi_cq_read(t.cq, &e, 0);
		if (waitpid(pid, &st, WNOHANG) == pid) {
			cr_assert(WIFEXITED(st) && !WEXITSTATUS(st),
				  "child failed");
			break;
		}
		cr_assert_lt(now_ns(), end, "the child never exited");
	}
	/* sends to the gone peer until one fails, at the call (the
	 * connection is known dead) or in its completion: a tcp send can
	 * still complete while the peer's reset is on its way */
	for (int n = 0;; n++) {
		cr_assert_lt(n, 1000, "sends to the gone peer kept completing");
		ret = (int)fi_tsend(t.ep, &out, 8, NULL, peer, 9, NULL);
		if (ret)
			break;
		do
			ret = t_wait(&t, &e, NULL, &err, 10000);
		while (ret == 1 && !(e.flags & FI_SEND));
		if (ret != 1)
			break;
	}
	cr_assert(ret == -FI_EAVAIL || ret < 0, "no error: %d", ret);
	cr_assert_eq(fi_trecv(t.ep, &in, 8, NULL, FI_ADDR_UNSPEC, 5, 0,
			      &in), 0);
	cr_assert_eq(t_wait(&t, &e, NULL, NULL, 10000), 1);
	cr_assert_eq(e.op_context, &in);
	cr_assert_eq(in, 0x5e4d);
	close(sock);
	t_close(&t);
}

Test(death, a_message_outlives_its_sender_shm, .timeout = 30)
{
	message_outlives_its_sender("shm");
}

Test(death, a_message_outlives_its_sender_tcp, .timeout = 30)
{
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	message_outlives_its_sender("tcp");
}

/* Two receives directed to a sender that sends one message and exits:
 * the first gets the message, the second fails with the connection. The
 * CQ gives the message before the error, as it happened (a reader that
 * waits for its messages must not see the flush first). */
static void message_before_the_flush(const char *domain)
{
	struct fi_cq_err_entry err = { 0 };
	struct fi_cq_tagged_entry e;
	uint64_t in[2] = { 0, 0 };
	fi_addr_t peer;
	struct tctx t;
	ssize_t ret;
	int sock, st;
	pid_t pid;

	if (domain)
		setenv("NTX_TEST_DOMAIN", domain, 1);
	pid = t_fork(&sock, child_sends_and_exits);
	cr_assert_eq(t_open(&t, CAPS | FI_DIRECTED_RECV), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(fi_trecv(t.ep, &in[i], 8, NULL, peer, 5, 0,
				      &in[i]), 0);
	/* progress, reading nothing (the child's send needs it), until the
	 * child is gone; then 2 s more, in which the exit fails the second
	 * receive (a dead local peer is seen at once): both completions wait
	 * when the CQ is first read. On a slow machine the error may come
	 * later; the order asserted holds either way. */
	for (uint64_t end = now_ns() + 20000000000ull;;) {
		(void)fi_cq_read(t.cq, &e, 0);
		if (waitpid(pid, &st, WNOHANG) == pid)
			break;
		cr_assert_lt(now_ns(), end, "the child never exited");
	}
	cr_assert(WIFEXITED(st) && !WEXITSTATUS(st), "child failed");
	for (uint64_t end = now_ns() + 2000000000ull; now_ns() < end;)
		(void)fi_cq_read(t.cq, &e, 0);
	do
		ret = fi_cq_read(t.cq, &e, 1);
	while (ret == -FI_EAGAIN);
	cr_assert_eq(ret, 1, "the message first: %zd", ret);
	cr_assert_eq(e.op_context, &in[0]);
	cr_assert_eq(in[0], 0x5e4d);
	do
		ret = fi_cq_read(t.cq, &e, 1);
	while (ret == -FI_EAGAIN);
	cr_assert_eq(ret, -FI_EAVAIL);
	cr_assert_eq(fi_cq_readerr(t.cq, &err, 0), 1);
	cr_assert_eq(err.op_context, &in[1]);
	close(sock);
	t_close(&t);
}

Test(death, a_message_is_read_before_the_flush_of_its_connection_shm,
     .timeout = 40)
{
	message_before_the_flush("shm");
}

Test(death, a_message_is_read_before_the_flush_of_its_connection_tcp,
     .timeout = 40)
{
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	message_before_the_flush("tcp");
}

/* ---- one watch per peer process ------------------------------------------
 * Several endpoints of this process connected to one endpoint of a peer
 * process: the peer is watched through one pidfd and its window mapped
 * once, whatever the number of connections, and its death still fails
 * every one of them. */
#define NSHARE 3

/* Takes NSHARE connections, says so, and stops progressing. */
static int child_shared(int sock)
{
	struct tctx t;
	fi_addr_t peer[NSHARE];
	uint64_t v[NSHARE];
	char c;

	CHK(t_open(&t, CAPS) == 0);
	for (int i = 0; i < NSHARE; i++) {
		CHK(t_xchg_name(&t, sock, &peer[i]) == 0);
		CHK(fi_recv(t.ep, &v[i], 8, NULL, FI_ADDR_UNSPEC, NULL) == 0);
	}
	for (int i = 0; i < NSHARE; i++)
		CHK(t_wait(&t, NULL, NULL, NULL, 10000) == 1);
	CHK(write(sock, "r", 1) == 1);
	CHK(read(sock, &c, 1) == 1); /* no progress from here: killed */
	return 0;
}

/* Our pidfds, and our maps of the memfd named after pid. */
static void count_watch(pid_t pid, int *pidfds, int *maps)
{
	char path[64], link[64], line[512], name[32];
	FILE *f;

	*pidfds = *maps = 0;
	for (int fd = 0; fd < 4096; fd++) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		*pidfds += !strcmp(link, "anon_inode:[pidfd]");
	}
	snprintf(name, sizeof(name), "ntx-ep-%d ", (int)pid);
	f = fopen("/proc/self/maps", "r");
	cr_assert(f);
	while (fgets(line, sizeof(line), f))
		*maps += strstr(line, name) != NULL;
	fclose(f);
}

/* How many of the endpoints' sends (one each, RX_CTX) failed within
 * BOUND_MS, taken in order. */
static int sends_failed(struct tctx *t, int n)
{
	uint64_t end = now_ns() + BOUND_MS * 1000000ull;
	int failed = 0;

	while (failed < n && now_ns() < end) {
		struct fi_cq_err_entry err = { 0 };

		if (fi_cq_read(t[failed].cq, NULL, 0) != -FI_EAVAIL)
			continue;
		cr_assert_eq(fi_cq_readerr(t[failed].cq, &err, 0), 1);
		cr_assert_eq(err.op_context, RX_CTX);
		cr_assert(err.err == FI_ECONNRESET || err.err == FI_EIO,
			  "error %d", err.err);
		failed++;
	}
	return failed;
}

static void run_shared(bool pidfd)
{
	static struct tctx t[NSHARE];
	fi_addr_t peer[NSHARE];
	uint64_t v = 7;
	char *buf = malloc(BIG), c;
	int sock, pidfds, maps, failed;
	pid_t pid;

	if (t_local_via_network())
		cr_skip_test("the peer is not on the shm window");
	pid = t_fork(&sock, child_shared);
	cr_assert(pid > 0 && buf);
	for (int i = 0; i < NSHARE; i++) {
		cr_assert_eq(t_open(&t[i], CAPS), 0);
		cr_assert_eq(t_xchg_name(&t[i], sock, &peer[i]), 0);
		cr_assert_eq(fi_send(t[i].ep, &v, 8, NULL, peer[i], NULL), 0);
	}
	for (int i = 0; i < NSHARE; i++)
		cr_assert_eq(t_wait(&t[i], NULL, NULL, NULL, 10000), 1);
	cr_assert_eq(read(sock, &c, 1), 1, "the peer took all connections");
	count_watch(pid, &pidfds, &maps);
	cr_assert_eq(pidfds, pidfd, "%d pidfds for one peer process", pidfds);
	cr_assert_eq(maps, 1, "its window mapped %d times", maps);

	/* a rendezvous the dead peer never answers, on every connection */
	for (int i = 0; i < NSHARE; i++)
		cr_assert_eq(fi_send(t[i].ep, buf, BIG, NULL, peer[i],
				     RX_CTX), 0);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(t_join(pid), 128 + SIGKILL);
	failed = sends_failed(t, NSHARE);
	cr_assert_eq(failed, NSHARE, "%d of %d connections failed in %d ms",
		     failed, NSHARE, BOUND_MS);
	close(sock);
	for (int i = 0; i < NSHARE; i++)
		t_close(&t[i]);
	free(buf);
}

Test(death, one_pidfd_and_one_map_per_peer_process, .timeout = 30)
{
	run_shared(true);
}

Test(death, without_pidfd_one_map_per_peer_process, .timeout = 30)
{
	setenv("FI_NTX_PEER_PIDFD", "0", 1);
	run_shared(false);
}
