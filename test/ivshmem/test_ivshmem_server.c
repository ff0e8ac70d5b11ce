/*
 * make check: test/ivshmem/ntx_ivshmem_server against the client side of
 * qemu's ivshmem protocol (docs/specs/ivshmem-spec, "The ivshmem
 * Client-Server Protocol"), as a guest's ivshmem-doorbell device or a
 * host process would speak it. Starts the server itself, with its socket
 * in a private directory; every wait is a poll() bounded by TIMEOUT_MS,
 * never a sleep, so a loaded machine only makes it slower.
 *
 * Usage: test_ivshmem_server [SERVER]; without SERVER, $NTX_IVSHMEM_SERVER
 *        or ntx_ivshmem_server next to this program
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TIMEOUT_MS 10000
#define MAX_CLIENTS 256		/* the server's bound on clients */
#define MAX_IDS 65536		/* peer IDs: 0..65535, given in turn */
#define MAX_KEPT 256		/* a client keeps the fds of IDs below this */
#define MAX_VEC 2
#define SIZE1 (1 << 20)		/* phase 1: memfd, 1M, 2 vectors */
#define SIZE2 (64 << 10)	/* phase 2: -m file, 64K, 1 vector */
#define CHURN 8			/* clients connected at once while churning */

static char server[PATH_MAX];
static char dir[PATH_MAX], sock_path[PATH_MAX], pid_path[PATH_MAX];
static char shm_path[PATH_MAX], log_path[PATH_MAX];
static pid_t server_pid = -1;
static int chld_fd = -1;	/* signalfd for SIGCHLD */
static int checks;

struct cl {
	int sock;
	int id;
	int shm;
	int own[MAX_VEC];
	int peer[MAX_KEPT][MAX_VEC];	/* kept only when asked */
	int npeers;
	int peers[MAX_CLIENTS];		/* in the order the server sent them */
};

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void ok(const char *what)
{
	checks++;
	printf("ok %d - %s\n", checks, what);
	fflush(stdout);
}

/* atexit: a failed check leaves no server and no directory behind */
static void cleanup(void)
{
	char tmp[PATH_MAX + 8];

	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
		server_pid = -1;
	}
	if (!dir[0])
		return;
	unlink(sock_path);
	unlink(pid_path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", pid_path);
	unlink(tmp);
	unlink(shm_path);
	unlink(log_path);
	rmdir(dir);
}

static long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static int wait_in(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	long long end = now_ms() + ms;
	int r;

	do {
		r = poll(&p, 1, (int)(end - now_ms() > 0 ? end - now_ms() : 0));
	} while (r < 0 && errno == EINTR);
	return r > 0;
}

/*
 * One server message: 1 with *val (and *fd, or -1), 0 at EOF before any
 * byte, -1 when none came within ms. More than one fd fails the test.
 */
static int recv_msg(int sock, int64_t *val, int *fd, int ms)
{
	unsigned char buf[8];
	size_t got = 0;
	uint64_t u = 0;

	*fd = -1;
	while (got < sizeof(buf)) {
		union {
			struct cmsghdr hdr;
			char space[CMSG_SPACE(4 * sizeof(int))];
		} ctl;
		struct iovec iov = { buf + got, sizeof(buf) - got };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
				      .msg_control = ctl.space,
				      .msg_controllen = sizeof(ctl.space) };
		struct cmsghdr *c;
		ssize_t n;

		if (!wait_in(sock, ms))
			return -1;
		n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			fail("recvmsg: %s", strerror(errno));
		if (n == 0) {
			if (got || *fd >= 0)
				fail("EOF in the middle of a message");
			return 0;
		}
		if (msg.msg_flags & MSG_CTRUNC)
			fail("control data truncated: too many fds");
		for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET ||
			    c->cmsg_type != SCM_RIGHTS)
				fail("unexpected control message");
			if (c->cmsg_len != CMSG_LEN(sizeof(int)) || *fd >= 0)
				fail("more than one fd with a message");
			memcpy(fd, CMSG_DATA(c), sizeof(int));
		}
		got += (size_t)n;
	}
	for (int i = 0; i < 8; i++)
		u |= (uint64_t)buf[i] << (8 * i);
	*val = (int64_t)u;
	return 1;
}

/* the next message must be val, with an fd or without; returns the fd */
static int expect(int sock, int64_t val, bool with_fd, const char *what)
{
	int64_t v;
	int fd, r = recv_msg(sock, &v, &fd, TIMEOUT_MS);

	if (r < 0)
		fail("%s: nothing within %d ms", what, TIMEOUT_MS);
	if (r == 0)
		fail("%s: the server closed the connection", what);
	if (v != val)
		fail("%s: got %lld, expected %lld", what, (long long)v,
		     (long long)val);
	if (with_fd != (fd >= 0))
		fail("%s: %s fd", what, with_fd ? "without" : "with an");
	return fd;
}

static bool is_eventfd(int fd)
{
	char link[64], target[64];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = 0;
	return !strcmp(target, "anon_inode:[eventfd]");
}

static int connect_to(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = TIMEOUT_MS / 1000 };
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		fail("socket: %s", strerror(errno));
	/* bounds a connect that waits for the backlog */
	setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	strcpy(sun.sun_path, path);
	if (connect(s, (struct sockaddr *)&sun, sizeof(sun)))
		fail("connect %s: %s", path, strerror(errno));
	return s;
}

/*
 * Steps 1-5 of the protocol: version 0, the ID, -1 with the memory, each
 * peer's ID nvec times with fds, the own ID nvec times with fds. Peer fds
 * are kept in c->peer when keep, else closed.
 */
static void read_setup(struct cl *c, int nvec, off_t size, bool keep)
{
	struct stat st;
	int64_t v;
	int fd, nown = 0, cur = -1, ncur = 0;

	memset(c->peer, -1, sizeof(c->peer));
	c->npeers = 0;
	fd = expect(c->sock, 0, false, "protocol version");
	if (recv_msg(c->sock, &v, &fd, TIMEOUT_MS) != 1 || fd >= 0)
		fail("client ID: missing, or with an fd");
	if (v < 0 || v > 65535)
		fail("client ID %lld out of 0..65535", (long long)v);
	c->id = (int)v;
	c->shm = expect(c->sock, -1, true, "the shared memory");
	if (fstat(c->shm, &st) || st.st_size != size)
		fail("shared memory of %lld bytes, expected %lld",
		     (long long)st.st_size, (long long)size);
	while (nown < nvec) {
		if (recv_msg(c->sock, &v, &fd, TIMEOUT_MS) != 1)
			fail("client %d: setup cut short", c->id);
		if (fd < 0)
			fail("client %d: setup message %lld without fd",
			     c->id, (long long)v);
		if (!is_eventfd(fd))
			fail("client %d: fd for %lld is not an eventfd",
			     c->id, (long long)v);
		if (v == c->id) {
			if (ncur && ncur != nvec)
				fail("peer %d: %d fds, not %d", cur, ncur,
				     nvec);
			ncur = 0;
			c->own[nown++] = fd;
			continue;
		}
		if (nown)
			fail("peer %lld after the own vectors", (long long)v);
		if (v < 0 || v > 65535)
			fail("peer ID %lld out of range", (long long)v);
		if (v != cur) {
			if (ncur && ncur != nvec)
				fail("peer %d: %d fds, not %d", cur, ncur,
				     nvec);
			for (int i = 0; i < c->npeers; i++)
				if (c->peers[i] == v)
					fail("peer %lld announced twice",
					     (long long)v);
			cur = (int)v;
			ncur = 0;
			c->peers[c->npeers++] = cur;
		}
		if (ncur >= nvec)
			fail("peer %d: more than %d fds", cur, nvec);
		if (keep && cur < MAX_KEPT)
			c->peer[cur][ncur] = fd;
		else
			close(fd);
		ncur++;
	}
}

static void client_open(struct cl *c, int nvec, off_t size, bool keep)
{
	c->sock = connect_to(sock_path);
	read_setup(c, nvec, size, keep);
}

static void client_close(struct cl *c, int nvec)
{
	close(c->sock);
	if (c->shm >= 0)
		close(c->shm);
	for (int v = 0; v < nvec; v++)
		if (c->own[v] >= 0)
			close(c->own[v]);
	for (int p = 0; p < MAX_KEPT; p++)
		for (int v = 0; v < nvec; v++)
			if (c->peer[p][v] >= 0)
				close(c->peer[p][v]);
	c->sock = -1;
}

static void ring(int efd)
{
	uint64_t one = 1;

	if (write(efd, &one, sizeof(one)) != sizeof(one))
		fail("doorbell write: %s", strerror(errno));
}

/* efd must become readable and hold 1; other must stay quiet */
static void rung(int efd, int other, const char *what)
{
	uint64_t n;

	if (!wait_in(efd, TIMEOUT_MS))
		fail("%s: the eventfd stayed quiet", what);
	if (read(efd, &n, sizeof(n)) != sizeof(n) || n != 1)
		fail("%s: eventfd read", what);
	if (other >= 0 && wait_in(other, 0))
		fail("%s: another vector fired", what);
}

/*
 * What a reading client learns after its setup: the fds each peer has
 * announced (nvec when connected, 0 after its disconnect).
 */
struct watch {
	int nfd[MAX_IDS];
	int disconnects[MAX_IDS];
};

static void pump_one(struct cl *c, struct watch *w, int nvec)
{
	int64_t v;
	int fd, r = recv_msg(c->sock, &v, &fd, TIMEOUT_MS);

	if (r < 0)
		fail("client %d: no notification within %d ms", c->id,
		     TIMEOUT_MS);
	if (r == 0)
		fail("client %d: dropped by the server", c->id);
	if (v < 0 || v >= MAX_IDS || v == c->id)
		fail("client %d: notification about %lld", c->id,
		     (long long)v);
	if (fd >= 0) {
		if (w->nfd[v] >= nvec)
			fail("client %d: peer %lld connected twice", c->id,
			     (long long)v);
		if (!is_eventfd(fd))
			fail("client %d: not an eventfd", c->id);
		close(fd);
		w->nfd[v]++;
	} else {
		if (w->nfd[v] != nvec)
			fail("client %d: disconnect of %lld, which had %d "
			     "fds", c->id, (long long)v, w->nfd[v]);
		w->nfd[v] = 0;
		w->disconnects[v]++;
	}
}

/* read what c has queued, without waiting */
static void drain(struct cl *c, struct watch *w, int nvec)
{
	while (wait_in(c->sock, 0))
		pump_one(c, w, nvec);
}

/* log: the server's stderr goes there (NULL: ours) */
static void start_server(char *const args[], const char *log)
{
	long long end = now_ms() + TIMEOUT_MS;
	int in = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	sigset_t none;
	char buf[4096];
	FILE *f;
	long pid = 0;

	if (in < 0 || inotify_add_watch(in, dir, IN_CREATE | IN_MOVED_TO) < 0)
		fail("inotify: %s", strerror(errno));
	server_pid = fork();
	if (server_pid < 0)
		fail("fork: %s", strerror(errno));
	if (!server_pid) {
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (log) {
			int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

			if (fd < 0 || dup2(fd, 2) < 0)
				_exit(127);
		}
		execv(server, args);
		fprintf(stderr, "exec %s: %s\n", server, strerror(errno));
		_exit(127);
	}
	/* ready once the pidfile is there: the server writes it last */
	while (access(pid_path, F_OK)) {
		struct pollfd p[2] = { { .fd = in, .events = POLLIN },
				       { .fd = chld_fd, .events = POLLIN } };
		int st;

		if (waitpid(server_pid, &st, WNOHANG) == server_pid) {
			server_pid = -1;
			fail("the server exited at start (status %#x)", st);
		}
		if (now_ms() >= end)
			fail("the server was not ready within %d ms",
			     TIMEOUT_MS);
		if (poll(p, 2, (int)(end - now_ms())) < 0 && errno != EINTR)
			fail("poll: %s", strerror(errno));
		while (read(in, buf, sizeof(buf)) > 0)
			;
		if (p[1].revents) {
			struct signalfd_siginfo si;

			while (read(chld_fd, &si, sizeof(si)) > 0)
				;
		}
	}
	close(in);
	f = fopen(pid_path, "r");
	if (!f || fscanf(f, "%ld", &pid) != 1 || pid != server_pid)
		fail("pidfile %s does not hold the server's pid", pid_path);
	fclose(f);
}

/* SIGTERM: exit status 0, socket and pidfile gone */
static void stop_server(void)
{
	long long end = now_ms() + TIMEOUT_MS;
	struct signalfd_siginfo si;
	int st;

	if (kill(server_pid, SIGTERM))
		fail("kill: %s", strerror(errno));
	while (waitpid(server_pid, &st, WNOHANG) != server_pid) {
		if (now_ms() >= end)
			fail("the server ignored SIGTERM for %d ms",
			     TIMEOUT_MS);
		wait_in(chld_fd, (int)(end - now_ms()));
		while (read(chld_fd, &si, sizeof(si)) > 0)
			;
	}
	server_pid = -1;
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail("SIGTERM: the server ended with status %#x", st);
	if (!access(sock_path, F_OK))
		fail("SIGTERM: the socket is still there");
	if (!access(pid_path, F_OK))
		fail("SIGTERM: the pidfile is still there");
}

static void *map(int fd, size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		fail("mmap: %s", strerror(errno));
	return p;
}

/* writes through one mapping, reads through the other */
static void same_memory(unsigned char *w, unsigned char *r, size_t size,
			unsigned seed)
{
	size_t at[] = { 0, 1, 4095, 4096, size / 2, size - 2, size - 1 };
	size_t n = sizeof(at) / sizeof(at[0]);

	for (size_t i = 0; i < n; i++)
		w[at[i]] = (unsigned char)(seed + i * 37);
	for (size_t i = 0; i < n; i++)
		if (r[at[i]] != (unsigned char)(seed + i * 37))
			fail("byte %zu: wrote %u, read %u", at[i],
			     (unsigned char)(seed + i * 37), r[at[i]]);
}

/*
 * Batches of CHURN clients connect (each reads its setup), then close,
 * while b reads every notification, until b hears that gone was dropped.
 */
static void churn(struct cl *b, struct watch *wb, int gone)
{
	static struct cl x[CHURN];
	long long t0 = now_ms();
	int batches = 0;

	while (!wb->disconnects[gone]) {
		if (++batches > 20000)
			fail("client %d was never dropped", gone);
		for (int i = 0; i < CHURN; i++) {
			client_open(&x[i], 2, SIZE1, false);
			if (x[i].id == b->id || x[i].id >= MAX_IDS)
				fail("churn: ID %d", x[i].id);
		}
		for (int i = 0; i < CHURN; i++)
			while (wb->nfd[x[i].id] < 2)
				pump_one(b, wb, 2);
		for (int i = 0; i < CHURN; i++)
			client_close(&x[i], 2);
		for (int i = 0; i < CHURN; i++)
			while (wb->nfd[x[i].id])
				pump_one(b, wb, 2);
		drain(b, wb, 2);
	}
	printf("# client %d dropped after %d batches of %d clients, "
	       "%lld ms\n", gone, batches, CHURN, now_ms() - t0);
}

/* A and B, the doorbells, a disconnect, a client that never reads */
static void phase1(void)
{
	char *args[] = { server, "-S", sock_path, "-l", "1M", "-n", "2",
			 "-p", pid_path, NULL };
	static struct cl a, b, d;
	static struct watch wb;
	unsigned char *ma, *mb;
	char junk[16384];
	struct rlimit rl;
	int csock, cid;

	start_server(args, NULL);
	ok("server started (memfd, 1M, 2 vectors), pidfile holds its pid");

	client_open(&a, 2, SIZE1, true);
	if (a.id != 0 || a.npeers)
		fail("A: ID %d with %d peers, expected 0 and none", a.id,
		     a.npeers);
	client_open(&b, 2, SIZE1, true);
	if (b.id != 1 || b.npeers != 1 || b.peers[0] != 0)
		fail("B: ID %d with %d peers, expected 1 and peer 0", b.id,
		     b.npeers);
	ok("A: version 0, ID 0, 1M memory fd, its 2 eventfds");
	ok("B: version 0, ID 1, 1M memory fd, A's 2 eventfds, its own 2");

	/* A learns B by a connect notification */
	for (int v = 0; v < 2; v++) {
		a.peer[1][v] = expect(a.sock, 1, true, "A: B connected");
		if (!is_eventfd(a.peer[1][v]))
			fail("A: B's vector %d is not an eventfd", v);
	}
	ok("A: connect notification for B, 2 eventfds");

	ma = map(a.shm, SIZE1);
	mb = map(b.shm, SIZE1);
	same_memory(ma, mb, SIZE1, 11);
	same_memory(mb, ma, SIZE1, 97);
	munmap(ma, SIZE1);
	munmap(mb, SIZE1);
	ok("bytes written through A's mapping are read through B's");

	ring(a.peer[1][0]);
	rung(b.own[0], b.own[1], "A rings B's vector 0");
	ring(b.peer[0][1]);
	rung(a.own[1], a.own[0], "B rings A's vector 1");
	ok("A's doorbell on B's vector 0 wakes B's own eventfd 0 (and "
	   "B's on A's vector 1, A's own 1)");

	client_close(&a, 2);
	expect(b.sock, 0, false, "B: disconnect of A");
	ok("A closed: B got ID 0 without fd");

	/* the server reads and discards what a client writes */
	memset(junk, 'x', sizeof(junk));
	if (write(b.sock, junk, sizeof(junk)) != (ssize_t)sizeof(junk))
		fail("B: write to the server: %s", strerror(errno));

	/* C: connects, never reads; the server tells B */
	csock = connect_to(sock_path);
	cid = 2;		/* the next in turn: A's 0 is not given again */
	do
		pump_one(&b, &wb, 2);
	while (wb.nfd[cid] < 2);
	if (wb.nfd[0])
		fail("C took ID 0, A's");
	ok("C connected (ID 2, the next in turn: A's freed 0 is not given "
	   "again), never reads");

	/*
	 * Churn until C's socket is full and the server drops it: some 5000
	 * messages, 3600 fds in flight, which the kernel allows a user only
	 * below its RLIMIT_NOFILE (the server raises it to the hard limit).
	 */
	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_max < 8192) {
		printf("# skipped: C's drop (hard RLIMIT_NOFILE %llu < 8192 "
		       "fds in flight); C closes instead\n",
		       (unsigned long long)rl.rlim_max);
		close(csock);
		while (!wb.disconnects[cid])
			pump_one(&b, &wb, 2);
	} else {
		churn(&b, &wb, cid);
		ok("churning clients: C, which never reads, is dropped; B "
		   "told");
		/* C's stream ends: what was queued, then EOF */
		for (;;) {
			int64_t v;
			int fd, r = recv_msg(csock, &v, &fd, TIMEOUT_MS);

			if (r < 0)
				fail("C: no EOF after its drop");
			if (fd >= 0)
				close(fd);
			if (!r)
				break;
		}
		close(csock);
		ok("C's connection ends in EOF");
	}

	client_open(&d, 2, SIZE1, true);
	if (d.id <= cid || d.npeers != 1 || d.peers[0] != b.id)
		fail("D: ID %d with %d peers, expected one above C's %d, "
		     "and B", d.id, d.npeers, cid);
	while (wb.nfd[d.id] < 2)
		pump_one(&b, &wb, 2);
	ring(d.peer[b.id][0]);
	rung(b.own[0], b.own[1], "D rings B's vector 0");
	printf("# D: ID %d\n", d.id);
	ok("D served: an ID never given before, B as its one peer, B told, "
	   "D's doorbell reaches B");

	stop_server();
	if (recv_msg(b.sock, &(int64_t){0}, &(int){0}, TIMEOUT_MS) != 0)
		fail("B: no EOF after the server's exit");
	client_close(&b, 2);
	client_close(&d, 2);
	ok("SIGTERM: exit status 0, socket and pidfile removed");
}

static void log_has(const char *line)
{
	char buf[256];
	FILE *f = fopen(log_path, "r");
	bool found = false;

	if (!f)
		fail("%s: %s", log_path, strerror(errno));
	while (!found && fgets(buf, sizeof(buf), f))
		found = strstr(buf, line) != NULL;
	fclose(f);
	if (!found)
		fail("-v: no \"%s\" in the server's log", line);
}

/* -m: a file the host maps too; the bound on clients; IDs in turn */
static void phase2(void)
{
	char *args[] = { server, "-S", sock_path, "-l", "64K", "-n", "1",
			 "-m", shm_path, "-p", pid_path, "-v", NULL };
	static struct cl c[MAX_CLIENTS + 1];
	static struct watch w[MAX_CLIENTS];
	unsigned char *host, *mc;
	struct stat st;
	int hfd, extra;

	start_server(args, log_path);
	hfd = open(shm_path, O_RDWR | O_CLOEXEC);
	if (hfd < 0 || fstat(hfd, &st) || st.st_size != SIZE2)
		fail("-m %s: not a file of %d bytes", shm_path, SIZE2);
	client_open(&c[0], 1, SIZE2, false);
	host = map(hfd, SIZE2);
	mc = map(c[0].shm, SIZE2);
	same_memory(mc, host, SIZE2, 5);
	same_memory(host, mc, SIZE2, 201);
	munmap(mc, SIZE2);
	ok("-m: a host process maps the file and shares the clients' bytes");

	/* the server keeps its bound: all of them read, the extra is cut */
	for (int i = 1; i < MAX_CLIENTS; i++) {
		client_open(&c[i], 1, SIZE2, false);
		if (c[i].id != i || c[i].npeers != i)
			fail("client %d: ID %d with %d peers", i, c[i].id,
			     c[i].npeers);
		/* keeps the test within 1024 descriptors */
		close(c[i].shm);
		close(c[i].own[0]);
		c[i].shm = c[i].own[0] = -1;
		if (!(i % 16))
			for (int k = 0; k < i; k++)
				drain(&c[k], &w[k], 1);
	}
	for (int k = 0; k < MAX_CLIENTS; k++)
		drain(&c[k], &w[k], 1);
	extra = connect_to(sock_path);
	if (recv_msg(extra, &(int64_t){0}, &(int){0}, TIMEOUT_MS) != 0)
		fail("client %d: not refused", MAX_CLIENTS + 1);
	close(extra);
	ok("256 clients with IDs 0..255; the 257th is refused (EOF)");

	client_close(&c[5], 1);
	while (!w[0].disconnects[5])
		pump_one(&c[0], &w[0], 1);
	client_open(&c[5], 1, SIZE2, false);
	if (c[5].id != MAX_CLIENTS)
		fail("a new client got ID %d, not %d, the next in turn",
		     c[5].id, MAX_CLIENTS);
	ok("a freed ID (5) is not given again: the next client gets 256, "
	   "the next in turn");

	stop_server();
	for (int i = 0; i < MAX_CLIENTS; i++)
		client_close(&c[i], 1);
	if (access(shm_path, F_OK))
		fail("-m: the file is gone after exit");
	munmap(host, SIZE2);
	close(hfd);
	ok("SIGTERM with 256 clients: status 0; the -m file is kept");

	log_has("client 255 connected");
	log_has("refused a client: 256 connected");
	log_has("client 5 disconnected");
	ok("-v logged the connects, the refusal and the disconnect");
}

static void in_dir(char *buf, const char *name)
{
	if (snprintf(buf, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX)
		fail("%s: path too long", dir);
}

static void find_server(int argc, char **argv)
{
	const char *env = getenv("NTX_IVSHMEM_SERVER");
	char self[PATH_MAX];
	ssize_t n;
	char *slash;

	if (argc > 1) {
		snprintf(server, sizeof(server), "%s", argv[1]);
	} else if (env && *env) {
		snprintf(server, sizeof(server), "%s", env);
	} else {
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			fail("/proc/self/exe: %s", strerror(errno));
		self[n] = 0;
		slash = strrchr(self, '/');
		*slash = 0;
		if (snprintf(server, sizeof(server), "%s/ntx_ivshmem_server",
			     self) >= (int)sizeof(server))
			fail("%s: path too long", self);
	}
	if (access(server, X_OK))
		fail("%s: %s", server, strerror(errno));
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	sigset_t chld;

	find_server(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* the server's exit is seen by poll(), not by a sleep */
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	chld_fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (chld_fd < 0)
		fail("signalfd: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN);

	/* sun_path holds 108 bytes: a long TMPDIR falls back to /tmp */
	if (!tmp || strlen(tmp) > 60)
		tmp = "/tmp";
	snprintf(dir, sizeof(dir), "%s/ntx-ivsrv-XXXXXX", tmp);
	if (!mkdtemp(dir))
		fail("mkdtemp %s: %s", dir, strerror(errno));
	atexit(cleanup);
	in_dir(sock_path, "sock");
	in_dir(pid_path, "pid");
	in_dir(shm_path, "shm");
	in_dir(log_path, "log");

	phase1();
	phase2();
	printf("PASS: %d checks (%s)\n", checks, server);
	return 0;
}
