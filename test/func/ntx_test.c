/* Helpers of the functional tests (see ntx_test.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

static uint64_t t_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct fi_info *t_hints(uint64_t caps)
{
	struct fi_info *h = fi_allocinfo();

	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup(getenv("NTX_TEST_DOMAIN")
					      ? getenv("NTX_TEST_DOMAIN") : "shm");
	h->caps = caps;
	h->ep_attr->type = FI_EP_RDM;
	if (getenv("NTX_TEST_THREAD_DOMAIN"))
		h->domain_attr->threading = FI_THREAD_DOMAIN;
	return h;
}

int t_open_hints(struct tctx *t, struct fi_info *hints)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = FI_WAIT_NONE };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	int ret;

	memset(t, 0, sizeof(*t));
	ret = fi_getinfo(T_VERSION, NULL, NULL, 0, hints, &t->fi);
	fi_freeinfo(hints);
	if (ret)
		return ret;
	if ((ret = fi_fabric(t->fi->fabric_attr, &t->fab, NULL)) ||
	    (ret = fi_domain(t->fab, t->fi, &t->dom, NULL)) ||
	    (ret = fi_cq_open(t->dom, &ca, &t->cq, NULL)) ||
	    (ret = fi_av_open(t->dom, &aa, &t->av, NULL)) ||
	    (ret = fi_endpoint(t->dom, t->fi, &t->ep, NULL)) ||
	    (ret = fi_ep_bind(t->ep, &t->av->fid, 0)) ||
	    (ret = fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (ret = fi_enable(t->ep)))
		return ret;
	return 0;
}

int t_open(struct tctx *t, uint64_t caps)
{
	return t_open_hints(t, t_hints(caps));
}

void t_close(struct tctx *t)
{
	if (t->ep)
		fi_close(&t->ep->fid);
	if (t->av)
		fi_close(&t->av->fid);
	if (t->cq)
		fi_close(&t->cq->fid);
	if (t->cntr)
		fi_close(&t->cntr->fid);
	if (t->dom)
		fi_close(&t->dom->fid);
	if (t->fab)
		fi_close(&t->fab->fid);
	if (t->fi)
		fi_freeinfo(t->fi);
	memset(t, 0, sizeof(*t));
}

int t_insert(struct tctx *t, const void *name, fi_addr_t *addr)
{
	return fi_av_insert(t->av, name, 1, addr, 0, NULL) == 1 ? 0 : -FI_EINVAL;
}

int t_wait(struct tctx *t, struct fi_cq_tagged_entry *e, fi_addr_t *src,
	   struct fi_cq_err_entry *err, int timeout_ms)
{
	uint64_t end = t_ms() + (uint64_t)timeout_ms;
	struct fi_cq_tagged_entry tmp;
	fi_addr_t stmp;
	ssize_t n;

	do {
		n = fi_cq_readfrom(t->cq, e ? e : &tmp, 1, src ? src : &stmp);
		if (n == 1)
			return 1;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry etmp = { 0 };

			fi_cq_readerr(t->cq, err ? err : &etmp, 0);
			return -FI_EAVAIL;
		}
	} while (t_ms() < end);
	return -FI_ETIMEDOUT;
}

int t_drain(struct tctx *t, int timeout_ms)
{
	uint64_t end = t_ms() + (uint64_t)timeout_ms;
	struct fi_cq_tagged_entry e;
	int cnt = 0;

	do {
		if (fi_cq_read(t->cq, &e, 1) == 1)
			cnt++;
	} while (t_ms() < end);
	return cnt;
}

pid_t t_fork(int *sock, t_child_fn fn)
{
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		_exit(fn(sv[1]));
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

int t_join(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int t_xchg_name(struct tctx *t, int sock, fi_addr_t *peer)
{
	char mine[T_NAMELEN], theirs[T_NAMELEN];
	size_t len = sizeof(mine);

	if (fi_getname(&t->ep->fid, mine, &len) || len != T_NAMELEN)
		return -1;
	if (write(sock, mine, len) != (ssize_t)len ||
	    read(sock, theirs, len) != (ssize_t)len)
		return -1;
	return t_insert(t, theirs, peer);
}

int t_sync_progress(struct tctx *t, int sock, int timeout_ms)
{
	uint64_t end = t_ms() + (uint64_t)timeout_ms;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct fi_cq_tagged_entry e;
	char c = 's';

	if (write(sock, &c, 1) != 1)
		return -1;
	do {
		if (fi_cq_read(t->cq, &e, 1) == 1)
			return -2; /* nothing may complete meanwhile */
		if (poll(&p, 1, 0) == 1)
			return read(sock, &c, 1) == 1 ? 0 : -1;
	} while (t_ms() < end);
	return -FI_ETIMEDOUT;
}

int t_sync(int sock)
{
	char c = 's';

	return write(sock, &c, 1) == 1 && read(sock, &c, 1) == 1 ? 0 : -1;
}

void t_fill(void *buf, size_t len, unsigned seed)
{
	unsigned char *b = buf;

	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 9));
}

size_t t_check(const void *buf, size_t len, unsigned seed)
{
	const unsigned char *b = buf;
	size_t bad = 0;

	for (size_t i = 0; i < len; i++)
		bad += b[i] != (unsigned char)(seed * 131 + i * 7 + (i >> 9));
	return bad;
}
