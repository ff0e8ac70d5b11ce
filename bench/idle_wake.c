/*
 * What a quiet poll path costs a peer's first message (DESIGN §3, "No
 * system call on the poll path"): an 8-byte ping-pong between two
 * processes through ntx's tcp back end (the tcp domain with
 * FI_NTX_LOCAL_VIA_NETWORK=1), both sides polling their CQ all the time.
 * Back to back, the sockets are read with epoll_wait on every poll; after
 * GAP_MS of silence (longer than the back end's 2 ms busy window) both
 * sides only read the fd watcher's news, so each message's wait includes
 * the watcher's wake-up. Prints the median and 99th percentile round trip
 * of each, and the difference of the medians: what the quiet path adds.
 * Usage: idle_wake [round trips] [gap ms]
 */
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct ctx {
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_av *av;
	struct fid_cq *cq;
};

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void die(const char *what, int ret)
{
	fprintf(stderr, "%s: %s\n", what, fi_strerror(-ret));
	exit(1);
}

static void open_ep(struct ctx *c)
{
	struct fi_info *h = fi_allocinfo(), *fi;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	int ret;

	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup("tcp");
	h->caps = FI_MSG;
	if ((ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &fi)))
		die("fi_getinfo", ret);
	if ((ret = fi_fabric(fi->fabric_attr, &c->fab, NULL)) ||
	    (ret = fi_domain(c->fab, fi, &c->dom, NULL)) ||
	    (ret = fi_cq_open(c->dom, &ca, &c->cq, NULL)) ||
	    (ret = fi_av_open(c->dom, &aa, &c->av, NULL)) ||
	    (ret = fi_endpoint(c->dom, fi, &c->ep, NULL)) ||
	    (ret = fi_ep_bind(c->ep, &c->av->fid, 0)) ||
	    (ret = fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (ret = fi_enable(c->ep)))
		die("open", ret);
	fi_freeinfo(fi);
	fi_freeinfo(h);
}

static void wait_one(struct ctx *c)
{
	struct fi_cq_entry e;
	ssize_t ret;

	while ((ret = fi_cq_read(c->cq, &e, 1)) == -FI_EAGAIN)
		;
	if (ret != 1)
		die("fi_cq_read", (int)ret);
}

/* Polls the CQ (nothing may arrive) for gap_us. */
static void idle(struct ctx *c, double gap_us)
{
	struct fi_cq_entry e;
	double end = now_us() + gap_us;

	while (now_us() < end)
		if (fi_cq_read(c->cq, &e, 1) != -FI_EAGAIN)
			die("unexpected completion", -FI_EOTHER);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Round trips with gap_us of polling before each; median and p99 in
 * med[0], med[1] (client side only). */
static void run(struct ctx *c, fi_addr_t peer, int client, int n,
		double gap_us, double *out)
{
	char sbuf[8] = { 0 }, rbuf[8];
	double *rtt = calloc((size_t)n, sizeof(*rtt));

	for (int i = 0; i < n; i++) {
		fi_recv(c->ep, rbuf, sizeof(rbuf), NULL, peer, NULL);
		if (client) {
			double t0;

			idle(c, gap_us);
			t0 = now_us();
			fi_send(c->ep, sbuf, sizeof(sbuf), NULL, peer, NULL);
			wait_one(c);
			wait_one(c);
			rtt[i] = now_us() - t0;
		} else {
			wait_one(c);
			fi_send(c->ep, sbuf, sizeof(sbuf), NULL, peer, NULL);
			wait_one(c);
		}
	}
	if (client) {
		qsort(rtt, (size_t)n, sizeof(*rtt), cmp);
		out[0] = rtt[n / 2];
		out[1] = rtt[n * 99 / 100];
	}
	free(rtt);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 300;
	double gap = (argc > 2 ? atof(argv[2]) : 5) * 1000, busy[2], quiet[2];
	char name[64], peer_name[64];
	size_t len = sizeof(name);
	struct ctx c;
	fi_addr_t peer;
	int sv[2];
	pid_t pid;

	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	if (n < 10 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid = fork();
	open_ep(&c);
	fi_getname(&c.ep->fid, name, &len);
	if (write(sv[!pid], name, len) != (ssize_t)len ||
	    read(sv[!pid], peer_name, len) != (ssize_t)len)
		return 1;
	fi_av_insert(c.av, peer_name, 1, &peer, 0, NULL);
	run(&c, peer, pid != 0, n, 0, busy);
	run(&c, peer, pid != 0, n, gap, quiet);
	if (!pid) {
		char done;

		if (read(sv[1], &done, 1) < 0)
			return 1;
		return 0;
	}
	printf("tcp back end, 8 B round trip: back to back median %.1f us "
	       "p99 %.1f; after %.0f ms quiet median %.1f us p99 %.1f; the "
	       "quiet path adds %.1f us per round trip (two wake-ups)\n",
	       busy[0], busy[1], gap / 1000, quiet[0], quiet[1],
	       quiet[0] - busy[0]);
	if (write(sv[0], "d", 1) != 1)
		return 1;
	waitpid(pid, NULL, 0);
	fi_close(&c.ep->fid);
	fi_close(&c.av->fid);
	fi_close(&c.cq->fid);
	fi_close(&c.dom->fid);
	fi_close(&c.fab->fid);
	return 0;
}
