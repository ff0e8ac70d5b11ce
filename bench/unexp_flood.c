/*
 * What unexpected messages from many peers make an endpoint hold (issue
 * #36, finding 4): PEERS processes each send MSGS tagged messages of 64
 * KiB that match no receive to one victim endpoint, which only drives
 * progress; the victim prints its resident memory before and its peak
 * (VmHWM) after. The domain is NTX_DOMAIN (default "tcp": run with
 * FI_NTX_LOCAL_VIA_NETWORK=1); FI_NTX_EP_UNEXP_MAX and
 * FI_NTX_PEER_UNEXP_MAX apply as set.
 *
 *   cc -O2 -o unexp_flood bench/unexp_flood.c $(pkg-config --cflags \
 *      --libs libfabric)
 *   FI_PROVIDER_PATH=.libs FI_NTX_LOCAL_VIA_NETWORK=1 ./unexp_flood [peers [msgs]]
 */
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_tagged.h>
#include <rdma/fi_errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG 65536
#define MAXPEERS 64

struct node {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	char name[64];
};

#define DIE(what) do { perror(what); exit(1); } while (0)
#define FI(call)                                                       \
	do {                                                           \
		int r_ = (int)(call);                                  \
		if (r_) {                                              \
			fprintf(stderr, "%s: %s\n", #call,             \
				fi_strerror(-r_));                     \
			exit(1);                                       \
		}                                                      \
	} while (0)

static void node_open(struct node *n)
{
	struct fi_info *h = fi_allocinfo();
	struct fi_cq_attr cq = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr av = { .type = FI_AV_TABLE };
	const char *dom = getenv("NTX_DOMAIN");
	size_t len = sizeof(n->name);

	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup(dom ? dom : "tcp");
	h->caps = FI_TAGGED;
	h->ep_attr->type = FI_EP_RDM;
	FI(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &n->fi));
	fi_freeinfo(h);
	FI(fi_fabric(n->fi->fabric_attr, &n->fab, NULL));
	FI(fi_domain(n->fab, n->fi, &n->dom, NULL));
	FI(fi_cq_open(n->dom, &cq, &n->cq, NULL));
	FI(fi_av_open(n->dom, &av, &n->av, NULL));
	FI(fi_endpoint(n->dom, n->fi, &n->ep, NULL));
	FI(fi_ep_bind(n->ep, &n->cq->fid, FI_TRANSMIT | FI_RECV));
	FI(fi_ep_bind(n->ep, &n->av->fid, 0));
	FI(fi_enable(n->ep));
	FI(fi_getname(&n->ep->fid, n->name, &len));
}

/* Reads every completion there is, errors too; how many. */
static size_t reap(struct node *n)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	size_t k = 0;
	ssize_t r;

	while ((r = fi_cq_read(n->cq, &e, 1)) == 1 || r == -FI_EAVAIL) {
		if (r == -FI_EAVAIL && fi_cq_readerr(n->cq, &err, 0) != 1)
			break;
		k++;
	}
	return k;
}

static int flooder(int sock, long msgs)
{
	static char buf[MSG];
	struct node n;
	char victim[64];
	fi_addr_t to;
	size_t posted = 0, done = 0;
	ssize_t r;

	node_open(&n);
	if (read(sock, victim, sizeof(victim)) != sizeof(victim))
		DIE("read");
	if (fi_av_insert(n.av, victim, 1, &to, 0, NULL) != 1)
		DIE("fi_av_insert");
	for (long i = 0; i < msgs; i++) {
		while ((r = fi_tsend(n.ep, buf, MSG, NULL, to, 1, NULL)) ==
		       -FI_EAGAIN)
			done += reap(&n);
		posted += !r; /* refused at once while reconnecting: go on */
	}
	while (done < posted)
		done += reap(&n);
	if (write(sock, "d", 1) != 1 || read(sock, buf, 1) != 1)
		DIE("sync");
	return 0;
}

static long status_kib(const char *fmt)
{
	char line[256];
	long kib = -1;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, fmt, &kib) == 1)
			break;
	if (f)
		fclose(f);
	return kib;
}

int main(int argc, char **argv)
{
	int peers = argc > 1 ? atoi(argv[1]) : 4;
	long msgs = argc > 2 ? atol(argv[2]) : 8192;
	struct pollfd p[MAXPEERS];
	int sock[MAXPEERS], left;
	pid_t pid[MAXPEERS];
	struct node v;
	long rss;

	if (peers < 1 || peers > MAXPEERS)
		return 2;
	for (int i = 0; i < peers; i++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			DIE("socketpair");
		pid[i] = fork();
		if (pid[i] == 0) {
			close(sv[0]);
			_exit(flooder(sv[1], msgs));
		}
		close(sv[1]);
		sock[i] = sv[0];
	}
	node_open(&v);
	rss = status_kib("VmRSS: %ld");
	for (int i = 0; i < peers; i++)
		if (write(sock[i], v.name, sizeof(v.name)) != sizeof(v.name))
			DIE("write");
	for (int i = 0; i < peers; i++)
		p[i] = (struct pollfd){ .fd = sock[i], .events = POLLIN };
	for (left = peers; left;) {
		reap(&v);
		if (poll(p, peers, 0) <= 0)
			continue;
		for (int i = 0; i < peers; i++)
			if (p[i].revents) {
				p[i].fd = -1;
				left--;
			}
	}
	printf("%d peers x %ld x %d bytes unexpected: victim VmRSS %ld KiB "
	       "before, VmHWM %ld KiB after (+%ld MiB)\n", peers, msgs, MSG,
	       rss, status_kib("VmHWM: %ld"),
	       (status_kib("VmHWM: %ld") - rss) / 1024);
	for (int i = 0; i < peers; i++) {
		if (write(sock[i], "q", 1) != 1)
			DIE("write");
		waitpid(pid[i], NULL, 0);
	}
	return 0;
}
