/*
 * 8-byte ping-pong between two processes on ntx's shm domain, once with
 * FI_PROGRESS_MANUAL and once with FI_PROGRESS_AUTO, to show what the
 * helper thread costs a polling application (latency and CPU per wall
 * second of the measuring process). Usage: progress_pingpong [iterations]
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
#include <sys/resource.h>
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

static double wall(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void)
{
	struct rusage r;

	getrusage(RUSAGE_SELF, &r);
	return r.ru_utime.tv_sec + r.ru_stime.tv_sec +
	       (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what, int ret)
{
	fprintf(stderr, "%s: %s\n", what, fi_strerror(-ret));
	exit(1);
}

static void open_ep(struct ctx *c, enum fi_progress progress)
{
	struct fi_info *h = fi_allocinfo(), *fi;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_CONTEXT };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	int ret;

	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup("shm");
	h->caps = FI_MSG;
	h->domain_attr->data_progress = progress;
	h->domain_attr->control_progress = progress;
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

static void run(enum fi_progress progress, int iters)
{
	int sv[2], warm = 1000;
	char name[64], peer_name[64], sbuf[8] = { 0 }, rbuf[8];
	size_t len = sizeof(name);
	struct ctx c;
	fi_addr_t peer;
	double t0 = 0, c0 = 0, t, u;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		exit(1);
	fflush(stdout); /* or the child prints it again */
	pid = fork();
	open_ep(&c, progress);
	fi_getname(&c.ep->fid, name, &len);
	if (write(sv[!pid], name, len) != (ssize_t)len ||
	    read(sv[!pid], peer_name, len) != (ssize_t)len)
		exit(1);
	fi_av_insert(c.av, peer_name, 1, &peer, 0, NULL);
	for (int i = 0; i < iters + warm; i++) {
		if (pid && i == warm) {
			t0 = wall();
			c0 = cpu();
		}
		fi_recv(c.ep, rbuf, sizeof(rbuf), NULL, peer, NULL);
		if (pid) {
			fi_send(c.ep, sbuf, sizeof(sbuf), NULL, peer, NULL);
			wait_one(&c);
			wait_one(&c);
		} else {
			wait_one(&c);
			fi_send(c.ep, sbuf, sizeof(sbuf), NULL, peer, NULL);
			wait_one(&c);
		}
	}
	if (!pid) {
		char done;

		/* keep the endpoint until the measuring side has finished */
		if (read(sv[1], &done, 1) < 0)
			exit(1);
		exit(0);
	}
	t = wall() - t0;
	u = cpu() - c0;
	printf("%-6s 8 B latency %.3f us, cpu/wall %.2f\n",
	       progress == FI_PROGRESS_AUTO ? "auto" : "manual",
	       t / iters / 2 * 1e6, u / t);
	if (write(sv[0], "d", 1) != 1)
		exit(1);
	waitpid(pid, NULL, 0);
	fi_close(&c.ep->fid);
	fi_close(&c.av->fid);
	fi_close(&c.cq->fid);
	fi_close(&c.dom->fid);
	fi_close(&c.fab->fid);
	close(sv[0]);
	close(sv[1]);
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 200000;

	run(FI_PROGRESS_MANUAL, iters);
	run(FI_PROGRESS_AUTO, iters);
	return 0;
}
