/*
 * The peer of a two-process test on another machine (test/rxe, two hosts).
 *
 * NTX_TEST_PEER_REMOTE=IP:PORT names a service there (test/rxe/jobs/
 * func-peer.sh behind nc) that runs this same test with
 * NTX_TEST_PEER_BACK=IP:PORT:K. The test runs there as it does here up to
 * its K-th t_fork, so whatever the test set up before forking (globals,
 * environment, the target's configuration) is set up there too. That
 * t_fork connects back twice: the socket the child function uses, then
 * one for the child's exit status. Here t_fork returns the first and the
 * pid of a local waiter that exits with that status; killing the waiter
 * kills the remote child. The forks before the K-th one are stand-ins
 * there (a process that exits at once, /dev/null for its socket).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ntx_test.h"

/* bounds each step of meeting the peer: there a test_func starts, under
 * emulation, and runs the test up to its fork */
#define T_REMOTE_MS 60000

bool t_peer_elsewhere(void)
{
	return getenv("NTX_TEST_PEER_NETNS") || getenv("NTX_TEST_PEER_REMOTE");
}

/* "IP:PORT", or "IP:PORT:K" when k is wanted */
static int t_parse(const char *s, struct sockaddr_in *sa, unsigned *k)
{
	char ip[INET_ADDRSTRLEN];
	unsigned port = 0, kk = 0;
	int n;

	memset(sa, 0, sizeof(*sa));
	n = sscanf(s, "%15[0-9.]:%u:%u", ip, &port, &kk);
	if (n < (k ? 3 : 2) || !port || port > 65535 ||
	    inet_pton(AF_INET, ip, &sa->sin_addr) != 1)
		return -1;
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)port);
	if (k)
		*k = kk;
	return 0;
}

/* Which t_fork of the running test this is. */
static unsigned t_fork_index(void)
{
	static const void *test;
	static unsigned n;

	if (test != criterion_current_test) {
		test = criterion_current_test;
		n = 0;
	}
	return n++;
}

static int t_connect(const struct sockaddr_in *sa)
{
	struct timeval tv = { .tv_sec = T_REMOTE_MS / 1000 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	/* SO_SNDTIMEO bounds connect(); the socket is blocking after */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa))) {
		fprintf(stderr, "remote peer: connect %s:%u: %s\n",
			inet_ntoa(sa->sin_addr), ntohs(sa->sin_port),
			strerror(errno));
		close(fd);
		return -1;
	}
	tv.tv_sec = 0;
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

/* The next connection on lfd, which must say tag first. */
static int t_accept_tagged(int lfd, char tag)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	char c = 0;
	int fd;

	if (poll(&p, 1, T_REMOTE_MS) != 1) {
		fprintf(stderr, "remote peer: it did not connect back within "
			"%d s (see its log there)\n", T_REMOTE_MS / 1000);
		return -1;
	}
	fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -1;
	p.fd = fd;
	if (poll(&p, 1, T_REMOTE_MS) != 1 || read(fd, &c, 1) != 1 ||
	    c != tag) {
		fprintf(stderr, "remote peer: a connection back said %#x, not "
			"'%c'\n", c, tag);
		close(fd);
		return -1;
	}
	return fd;
}

/* Here: asks the service there to run this test up to its k-th t_fork
 * and to connect back; returns the socket that waits for that, or -1. */
static int t_remote_ask(const char *where, unsigned k)
{
	struct sockaddr_in sa, me;
	socklen_t len = sizeof(me);
	char req[512];
	int fd, lfd, n;

	if (t_parse(where, &sa, NULL)) {
		fprintf(stderr, "NTX_TEST_PEER_REMOTE=%s: not IP:PORT\n", where);
		return -1;
	}
	fd = t_connect(&sa);
	if (fd < 0)
		return -1;
	/* listen on the address the service sees us from */
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0 || getsockname(fd, (struct sockaddr *)&me, &len))
		goto fail;
	me.sin_port = 0;
	len = sizeof(me);
	if (bind(lfd, (struct sockaddr *)&me, sizeof(me)) || listen(lfd, 4) ||
	    getsockname(lfd, (struct sockaddr *)&me, &len))
		goto fail;
	n = snprintf(req, sizeof(req), "%u %s %u %s/%s\n", k,
		     inet_ntoa(me.sin_addr), ntohs(me.sin_port),
		     criterion_current_suite->name, criterion_current_test->name);
	if (n >= (int)sizeof(req) || t_sock_write(fd, req, (size_t)n))
		goto fail;
	close(fd);
	return lfd;
fail:
	fprintf(stderr, "remote peer: asking %s failed: %s\n", where,
		strerror(errno));
	if (lfd >= 0)
		close(lfd);
	close(fd);
	return -1;
}

/* Here, in the waiter: exits with the remote child's status. */
_Noreturn static void t_remote_waiter(int st)
{
	static const char lost[] = "remote peer: lost before it reported\n";
	int32_t status;
	size_t got = 0;

	/* only the status socket stays open here: the test closing the
	 * child's socket must be seen there */
	if (st != 3 && dup2(st, 3) != 3)
		_exit(98);
	close_range(4, ~0u, 0);
	while (got < sizeof(status)) {
		ssize_t r = read(3, (char *)&status + got, sizeof(status) - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			(void)!write(2, lost, sizeof(lost) - 1);
			_exit(98);
		}
		got += (size_t)r;
	}
	_exit(status & 0xff);
}

static pid_t t_remote_here(const char *where, int *sock)
{
	int lfd = t_remote_ask(where, t_fork_index());
	int data, st;
	pid_t pid;

	if (lfd < 0)
		return -1;
	data = t_accept_tagged(lfd, 'd');
	st = data < 0 ? -1 : t_accept_tagged(lfd, 's');
	close(lfd);
	if (st < 0) {
		if (data >= 0)
			close(data);
		return -1;
	}
	pid = fork();
	if (pid == 0)
		t_remote_waiter(st);
	close(st);
	if (pid < 0) {
		close(data);
		return -1;
	}
	*sock = data;
	return pid;
}

/* There: waits for the child, or kills it when the status socket ends
 * (the waiter here was killed, or the test here is gone), reports its
 * status and ends the test process. */
_Noreturn static void t_remote_report(pid_t pid, int st)
{
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	struct pollfd p[2] = { { .fd = st, .events = POLLIN },
			       { .fd = pfd, .events = POLLIN } };
	int32_t status;
	int ws = 0;

	if (pfd >= 0) {
		while (poll(p, 2, -1) < 0 && errno == EINTR)
			;
		if (!(p[1].revents & POLLIN))
			kill(pid, SIGKILL);
	}
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
	if (send(st, &status, sizeof(status), MSG_NOSIGNAL) != sizeof(status))
		fprintf(stderr, "remote peer: status not sent: %s\n",
			strerror(errno));
	_exit(0);
}

static pid_t t_remote_there(const char *back, int *sock, t_child_fn fn)
{
	unsigned i = t_fork_index(), k;
	struct sockaddr_in sa;
	int data, st;
	pid_t pid;

	if (t_parse(back, &sa, &k)) {
		fprintf(stderr, "NTX_TEST_PEER_BACK=%s: not IP:PORT:K\n", back);
		_exit(97);
	}
	if (i < k) { /* a stand-in: the test goes on to the K-th fork */
		*sock = open("/dev/null", O_RDWR | O_CLOEXEC);
		pid = fork();
		if (pid == 0)
			_exit(0);
		return pid;
	}
	data = t_connect(&sa);
	if (data < 0 || t_sock_write(data, "d", 1))
		_exit(96);
	st = t_connect(&sa);
	if (st < 0 || t_sock_write(st, "s", 1))
		_exit(96);
	pid = fork();
	if (pid == 0) {
		close(st);
		_exit(fn(data));
	}
	close(data);
	if (pid < 0)
		_exit(95);
	t_remote_report(pid, st);
}

pid_t t_remote_fork(int *sock, t_child_fn fn)
{
	const char *back = getenv("NTX_TEST_PEER_BACK");

	if (back)
		return t_remote_there(back, sock, fn);
	return t_remote_here(getenv("NTX_TEST_PEER_REMOTE"), sock);
}
