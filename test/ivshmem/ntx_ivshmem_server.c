/*
 * A doorbell server for qemu's ivshmem device (ivshmem-doorbell), written
 * here because Debian ships no ivshmem-server. It owns one shared-memory
 * region and hands it, with one eventfd per interrupt vector and client,
 * to every client of its UNIX socket: qemu guests (the ivshmem PCI window)
 * and host processes alike, so all of them map the same pages and can
 * ring each other's doorbells. It speaks "The ivshmem Client-Server
 * Protocol" of qemu's docs/specs/ivshmem-spec: one-way, server to client,
 * each message an 8-byte little-endian signed number, some with one file
 * descriptor (SCM_RIGHTS).
 *
 * Single-threaded, one poll() loop, in the foreground. A client is never
 * waited for: every send is non-blocking, and a client whose socket does
 * not take a message is dropped as if it had disconnected.
 *
 * Usage: ntx_ivshmem_server -S SOCKET -l SIZE[K|M|G] [-n VECTORS]
 *        [-m SHM_PATH] [-p PIDFILE] [-v]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/*
 * A client's ID (its peer number, 0..65535) is not its slot: IDs are
 * handed out in turn, the next one after the last given that no client
 * holds, so that an ID comes back only after the other 65535 were given.
 * qemu's ivshmem device (seen with 7.2) frees a peer's eventfds when that
 * peer disconnects but keeps the pointer: an ID that connected, left,
 * connected again and left again makes every guest's qemu free them twice
 * and abort ("double free or corruption"). A host process that attaches
 * for a while, one after another, did exactly that with the lowest free
 * ID.
 */
#define MAX_CLIENTS 256
#define MAX_IDS 65536
#define MAX_VECTORS 64
/*
 * Asked for each connection (the kernel caps it at net.core.wmem_max and
 * doubles it): a new client's setup, 3 + (peers + 1) * VECTORS messages,
 * is queued whole before it reads any, at about 770 bytes a message. The
 * default (208 KiB) holds 278; 2 MiB holds over 5000 and bounds the
 * descriptors that a client that never reads keeps in flight.
 */
#define CLIENT_SNDBUF (2 << 20)

struct client {
	int sock;		/* -1: slot free */
	int id;			/* its peer ID */
	bool dead;		/* a send or a read failed: drop at next reap */
	bool announced;		/* the others were told that it connected */
	int efd[MAX_VECTORS];
};

static const char *prog = "ntx_ivshmem_server";
static struct client clients[MAX_CLIENTS];
static int nvec = 1;
static int shm_fd = -1;
static bool verbose;
static int reserve_fd = -1;
static int next_id;		/* the next ID to give, if free */

static void usage(void)
{
	fprintf(stderr,
		"usage: %s -S SOCKET_PATH -l SIZE[K|M|G] [-n VECTORS] "
		"[-m SHM_PATH] [-p PIDFILE] [-v]\n"
		"  -S  UNIX socket that clients connect to (a stale one is "
		"replaced)\n"
		"  -l  size of the shared memory (qemu wants a power of two)\n"
		"  -n  interrupt vectors per client, 1..%d (default 1)\n"
		"  -m  back the memory with this file (created, sized, kept "
		"on exit)\n"
		"      instead of an anonymous memfd, e.g. /dev/shm/NAME\n"
		"  -p  write the pid here once ready (removed on exit)\n"
		"  -v  log connects and disconnects to stderr\n",
		prog, MAX_VECTORS);
	exit(2);
}

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void logv(const char *fmt, ...)
{
	va_list ap;

	if (!verbose)
		return;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* "64M" -> 64 << 20; 0 when malformed, zero or too large for off_t */
static uint64_t parse_size(const char *s)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return 0;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	}
	if (*end || !v || v > ((uint64_t)INT64_MAX >> shift))
		return 0;
	return (uint64_t)v << shift;
}

/*
 * One message: val as 8 little-endian bytes, with fd when fd >= 0. Never
 * blocks: 0 only when the whole message went out.
 */
static int send_msg(int sock, int64_t val, int fd)
{
	union {
		struct cmsghdr hdr;
		char space[CMSG_SPACE(sizeof(int))];
	} ctl;
	unsigned char buf[8];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	uint64_t u = (uint64_t)val;
	ssize_t n;

	for (int i = 0; i < 8; i++)
		buf[i] = (unsigned char)(u >> (8 * i));
	if (fd >= 0) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.space;
		msg.msg_controllen = sizeof(ctl.space);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
	/* a short send would leave the stream out of step: same as failed */
	return n == (ssize_t)sizeof(buf) ? 0 : -1;
}

static bool live(int id)
{
	return clients[id].sock >= 0 && !clients[id].dead;
}

/* to the client in slot id; one that does not take it is marked for the
 * reap */
static void send_to(int id, int64_t val, int fd)
{
	struct client *c = &clients[id];

	if (!live(id))
		return;
	if (send_msg(c->sock, val, fd)) {
		logv("client %d: send failed (%s): dropping it", c->id,
		     errno == EAGAIN ? "its socket is full" : strerror(errno));
		c->dead = true;
	}
}

static void free_slot(int id)
{
	struct client *c = &clients[id];

	close(c->sock);
	for (int v = 0; v < nvec; v++)
		if (c->efd[v] >= 0)
			close(c->efd[v]);
	c->sock = -1;
	c->dead = false;
	c->announced = false;
}

/*
 * Drop every client marked dead and tell the others, whose sends may fail
 * in turn: repeat until none is left. One that was never announced goes
 * silently: nobody holds its eventfds.
 */
static void reap(void)
{
	bool again = true;

	while (again) {
		again = false;
		for (int id = 0; id < MAX_CLIENTS; id++) {
			bool tell;
			int gone;

			if (clients[id].sock < 0 || !clients[id].dead)
				continue;
			tell = clients[id].announced;
			gone = clients[id].id;
			free_slot(id);
			logv("client %d disconnected", gone);
			if (tell)
				for (int p = 0; p < MAX_CLIENTS; p++)
					send_to(p, gone, -1);
			again = true;
		}
	}
}

/* spec steps 1-5 to the client in slot id, all queued now: the client
 * reads them when it can */
static int setup(int id)
{
	send_to(id, 0, -1);		/* protocol version */
	send_to(id, clients[id].id, -1);
	send_to(id, -1, shm_fd);
	for (int p = 0; p < MAX_CLIENTS; p++) {
		if (p == id || !live(p))
			continue;
		for (int v = 0; v < nvec; v++)
			send_to(id, clients[p].id, clients[p].efd[v]);
	}
	for (int v = 0; v < nvec; v++)
		send_to(id, clients[id].id, clients[id].efd[v]);
	return clients[id].dead ? -1 : 0;
}

/* the eventfds of the client in slot id to every other one (connect
 * notification) */
static void announce(int id)
{
	clients[id].announced = true;
	for (int p = 0; p < MAX_CLIENTS; p++) {
		if (p == id)
			continue;
		for (int v = 0; v < nvec; v++)
			send_to(p, clients[id].id, clients[id].efd[v]);
	}
}

/* The next ID in turn that no client holds (fewer than MAX_CLIENTS hold
 * one, so there is one). */
static int take_id(void)
{
	for (;;) {
		int id = next_id;
		bool held = false;

		next_id = (next_id + 1) % MAX_IDS;
		for (int p = 0; p < MAX_CLIENTS && !held; p++)
			held = clients[p].sock >= 0 && clients[p].id == id;
		if (!held)
			return id;
	}
}

static void accept_client(int lfd)
{
	struct client *c;
	int s, id, sndbuf = CLIENT_SNDBUF;

	s = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (s < 0) {
		if ((errno == EMFILE || errno == ENFILE) && reserve_fd >= 0) {
			/* out of fds: take the connection off the backlog
			 * and close it, or poll would report it forever */
			close(reserve_fd);
			s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			if (s >= 0)
				close(s);
			reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
			logv("refused a client: out of file descriptors");
		}
		return;
	}
	for (id = 0; id < MAX_CLIENTS && clients[id].sock >= 0; id++)
		;
	if (id == MAX_CLIENTS) {
		logv("refused a client: %d connected", MAX_CLIENTS);
		close(s);
		return;
	}
	c = &clients[id];
	for (int v = 0; v < nvec; v++) {
		c->efd[v] = eventfd(0, EFD_CLOEXEC);
		if (c->efd[v] < 0) {
			logv("refused a client: eventfd: %s", strerror(errno));
			while (v--)
				close(c->efd[v]);
			close(s);
			return;
		}
	}
	/* best effort: the default may not hold a large setup */
	setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	c->id = take_id();	/* before sock: a free slot holds no ID */
	c->sock = s;
	c->dead = false;
	c->announced = false;
	if (setup(id)) {
		free_slot(id);
		return;
	}
	announce(id);
	logv("client %d connected", c->id);
	reap();
}

/* a client sends nothing meaningful: discard it, but notice EOF */
static void client_input(int id, short revents)
{
	char buf[4096];
	ssize_t n;

	if (revents & POLLIN) {
		n = read(clients[id].sock, buf, sizeof(buf));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			clients[id].dead = true;
	} else if (revents & (POLLHUP | POLLERR | POLLNVAL)) {
		clients[id].dead = true;
	}
}

static int open_shm(const char *path, uint64_t size)
{
	int fd;

	if (path) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			die("%s: %s", path, strerror(errno));
	} else {
		fd = memfd_create("ntx-ivshmem", MFD_CLOEXEC |
				  MFD_ALLOW_SEALING);
		if (fd < 0)
			die("memfd_create: %s", strerror(errno));
	}
	if (ftruncate(fd, (off_t)size))
		die("ftruncate %s to %llu: %s", path ? path : "memfd",
		    (unsigned long long)size, strerror(errno));
	/* no client may resize the memfd under the others (SIGBUS) */
	if (!path && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW |
			   F_SEAL_SEAL))
		die("sealing the memfd: %s", strerror(errno));
	return fd;
}

/*
 * Bind path, replacing a socket left by a server that is gone; a server
 * that still answers there keeps it.
 */
static int listen_at(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct stat st;
	int fd;

	if (strlen(path) >= sizeof(sun.sun_path))
		die("%s: socket path too long", path);
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	if (!lstat(path, &st)) {
		if (!S_ISSOCK(st.st_mode))
			die("%s exists and is not a socket", path);
		if (!connect(fd, (struct sockaddr *)&sun, sizeof(sun)))
			die("%s: a server is listening there", path);
		close(fd);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			die("socket: %s", strerror(errno));
		if (unlink(path) && errno != ENOENT)
			die("unlink %s: %s", path, strerror(errno));
	}
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)))
		die("bind %s: %s", path, strerror(errno));
	if (listen(fd, 64)) {
		unlink(path);
		die("listen %s: %s", path, strerror(errno));
	}
	if (fcntl(fd, F_SETFL, O_NONBLOCK)) {
		unlink(path);
		die("fcntl: %s", strerror(errno));
	}
	return fd;
}

/* written to a temporary name and renamed: whoever sees it sees the pid */
static int write_pidfile(const char *path)
{
	char tmp[4096];
	FILE *f;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -1;
	f = fopen(tmp, "we");
	if (!f)
		return -1;
	fprintf(f, "%ld\n", (long)getpid());
	if (fclose(f)) {
		unlink(tmp);
		return -1;
	}
	if (rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *sock_path = NULL, *shm_path = NULL, *pid_path = NULL;
	struct pollfd pfd[2 + MAX_CLIENTS];
	int slot[2 + MAX_CLIENTS];
	struct rlimit rl;
	uint64_t size = 0;
	sigset_t mask;
	int opt, sfd, lfd;

	while ((opt = getopt(argc, argv, "S:l:n:m:p:vh")) != -1) {
		switch (opt) {
		case 'S':
			sock_path = optarg;
			break;
		case 'l':
			size = parse_size(optarg);
			if (!size)
				die("-l %s: not a size (N, NK, NM or NG)",
				    optarg);
			break;
		case 'n': {
			char *end;
			long n = strtol(optarg, &end, 10);

			if (*end || end == optarg || n < 1 || n > MAX_VECTORS)
				die("-n %s: vectors are 1..%d", optarg,
				    MAX_VECTORS);
			nvec = (int)n;
			break;
		}
		case 'm':
			shm_path = optarg;
			break;
		case 'p':
			pid_path = optarg;
			break;
		case 'v':
			verbose = true;
			break;
		default:
			usage();
		}
	}
	if (!sock_path || !size || optind != argc)
		usage();
	if (size & (size - 1))
		fprintf(stderr, "%s: warning: %llu is not a power of two, "
			"which qemu's ivshmem needs\n", prog,
			(unsigned long long)size);

	/* up to MAX_CLIENTS * (1 + nvec) descriptors */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* blocked before anything exists, so a signal can't skip cleanup */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	if (sigprocmask(SIG_BLOCK, &mask, NULL))
		die("sigprocmask: %s", strerror(errno));
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		die("signalfd: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN);
	for (int id = 0; id < MAX_CLIENTS; id++)
		clients[id].sock = -1;

	shm_fd = open_shm(shm_path, size);
	reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	lfd = listen_at(sock_path);
	if (pid_path && write_pidfile(pid_path)) {
		unlink(sock_path);
		die("%s: %s", pid_path, strerror(errno));
	}
	logv("listening on %s: %llu bytes%s%s, %d vector%s, pid %ld",
	     sock_path, (unsigned long long)size, shm_path ? " at " : "",
	     shm_path ? shm_path : "", nvec, nvec > 1 ? "s" : "",
	     (long)getpid());

	for (;;) {
		int n = 0;

		pfd[n].fd = sfd;
		pfd[n++].events = POLLIN;
		pfd[n].fd = lfd;
		pfd[n++].events = POLLIN;
		for (int id = 0; id < MAX_CLIENTS; id++) {
			if (clients[id].sock < 0)
				continue;
			pfd[n].fd = clients[id].sock;
			pfd[n].events = POLLIN;
			slot[n++] = id;
		}
		if (poll(pfd, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		if (pfd[0].revents) {
			struct signalfd_siginfo si;

			if (read(sfd, &si, sizeof(si)) == sizeof(si)) {
				logv("signal %u: exiting", si.ssi_signo);
				break;
			}
		}
		/* the table does not change until the reap */
		for (int k = 2; k < n; k++)
			if (pfd[k].revents)
				client_input(slot[k], pfd[k].revents);
		reap();
		if (pfd[1].revents & POLLIN)
			accept_client(lfd);
	}

	for (int id = 0; id < MAX_CLIENTS; id++)
		if (clients[id].sock >= 0)
			free_slot(id);
	close(lfd);
	unlink(sock_path);
	if (pid_path)
		unlink(pid_path);
	close(shm_fd);
	return 0;
}
