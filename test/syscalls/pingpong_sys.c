/*
 * A ping-pong of 8-byte tagged messages between two local processes on a
 * network domain (tcp by default), through the public libfabric API, for
 * counting system calls: run it under strace with two iteration counts.
 * Each process marks the loop with getppid() before it and getpgrp()
 * after it, so the count leaves out start-up (libfabric loads every
 * provider), the first round trip (which connects) and shutdown. Every
 * peer is on this host, so the traffic is all on the shm window and the
 * poll path must make no system call per message.
 * Usage: pingpong_sys ITERATIONS [DOMAIN]
 *        pingpong_sys idle READS [DOMAIN]: one process, READS fi_cq_read
 *        calls on a CQ that has nothing, between the same markers
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(x)                                                           \
	do {                                                               \
		int r_ = (int)(x);                                         \
		if (r_) {                                                  \
			fprintf(stderr, "%s:%d: %s = %d (%s)\n", __FILE__,  \
				__LINE__, #x, r_, fi_strerror(-r_));        \
			exit(1);                                           \
		}                                                          \
	} while (0)

struct side {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
	fi_addr_t peer;
};

static void open_side(struct side *s, const char *domain)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_cq_attr cqa = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr ava = { .type = FI_AV_TABLE };

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	hints->fabric_attr->prov_name = strdup("ntx");
	hints->domain_attr->name = strdup(domain);
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	hints->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	CHECK(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->fi));
	fi_freeinfo(hints);
	CHECK(fi_fabric(s->fi->fabric_attr, &s->fab, NULL));
	CHECK(fi_domain(s->fab, s->fi, &s->dom, NULL));
	CHECK(fi_endpoint(s->dom, s->fi, &s->ep, NULL));
	CHECK(fi_cq_open(s->dom, &cqa, &s->cq, NULL));
	CHECK(fi_av_open(s->dom, &ava, &s->av, NULL));
	CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_ep_bind(s->ep, &s->av->fid, 0));
	CHECK(fi_enable(s->ep));
}

static void close_side(struct side *s)
{
	fi_close(&s->ep->fid);
	fi_close(&s->av->fid);
	fi_close(&s->cq->fid);
	fi_close(&s->dom->fid);
	fi_close(&s->fab->fid);
	fi_freeinfo(s->fi);
}

static void xchg(struct side *s, int sock)
{
	char me[64], peer[64];
	size_t len = sizeof(me);

	CHECK(fi_getname(&s->ep->fid, me, &len));
	if (write(sock, me, len) != (ssize_t)len ||
	    read(sock, peer, len) != (ssize_t)len)
		exit(1);
	if (fi_av_insert(s->av, peer, 1, &s->peer, 0, NULL) != 1)
		exit(1);
}

static void wait_one(struct side *s)
{
	struct fi_cq_tagged_entry e;
	ssize_t n;

	while ((n = fi_cq_read(s->cq, &e, 1)) == -FI_EAGAIN)
		;
	if (n != 1) {
		fprintf(stderr, "fi_cq_read: %zd\n", n);
		exit(1);
	}
}

static void send_one(struct side *s, uint64_t *buf)
{
	ssize_t r;

	while ((r = fi_tinject(s->ep, buf, sizeof(*buf), s->peer, 1)) ==
	       -FI_EAGAIN)
		fi_cq_read(s->cq, NULL, 0);
	CHECK(r);
}

static void round_trip(struct side *s, long i, int first)
{
	uint64_t out = 0, in = 0;

	CHECK(fi_trecv(s->ep, &in, sizeof(in), NULL, s->peer, 1, 0, NULL));
	if (first) {
		out = (uint64_t)i;
		send_one(s, &out);
		wait_one(s);
	} else {
		wait_one(s);
		out = in;
		send_one(s, &out);
	}
	if (in != (uint64_t)i) {
		fprintf(stderr, "iteration %ld carried %lu\n", i,
			(unsigned long)in);
		exit(1);
	}
}

static void run(struct side *s, int sock, long iters, int first)
{
	xchg(s, sock);
	/*
	 * The first round trip connects: its system calls (and the polls of
	 * the tcp set-up while the peer is slow to answer, as on a loaded
	 * machine) are not per message, so it stays outside the markers.
	 */
	round_trip(s, 0, first);
	getppid(); /* marker: the loop starts */
	for (long i = 1; i <= iters; i++)
		round_trip(s, i, first);
	getpgrp(); /* marker: the loop ends */
}

/* Reads that find nothing: what FI_NTX_IDLE_YIELD acts on. */
static int idle(long reads, const char *domain)
{
	struct fi_cq_tagged_entry e;
	struct side s;

	open_side(&s, domain);
	getppid(); /* marker: the loop starts */
	for (long i = 0; i < reads; i++)
		if (fi_cq_read(s.cq, &e, 1) != -FI_EAGAIN)
			return 1;
	getpgrp(); /* marker: the loop ends */
	close_side(&s);
	printf("%ld empty reads on the %s domain\n", reads, domain);
	return 0;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 10000;
	const char *domain = argc > 2 ? argv[2] : "tcp";
	struct side s;
	int sv[2], st = 0;
	pid_t pid;

	if (argc > 2 && !strcmp(argv[1], "idle"))
		return idle(atol(argv[2]), argc > 3 ? argv[3] : "shm");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	open_side(&s, domain);
	run(&s, pid ? sv[0] : sv[1], iters, pid != 0);
	/* both sides are done before either closes its endpoint */
	if (write(pid ? sv[0] : sv[1], "x", 1) != 1 ||
	    read(pid ? sv[0] : sv[1], &st, 1) != 1)
		return 1;
	close_side(&s);
	if (!pid)
		return 0;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		return 1;
	printf("%ld round trips on the %s domain\n", iters, domain);
	return 0;
}
