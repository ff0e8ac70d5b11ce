/*
 * The message path of one process, without a second core: endpoint a
 * sends windows of 64 tagged 8-byte messages (fi_tsenddata, CQ data 1:
 * the MTL sends its rank) to endpoint b of the same domain, whose receives (fi_trecv with an ignore mask and
 * a source, as Open MPI's ofi MTL posts them) were posted first; each
 * side reads its completions up to 100 at a time until -FI_EAGAIN, and
 * binds its CQ with
 * FI_SELECTIVE_COMPLETION and FI_COMPLETION in its op flags, as the MTL
 * does. No
 * other core takes part, so the time and the instruction count are the
 * provider's work alone (bench/msgpath.sh runs it under callgrind for
 * instructions per message, which do not drift with the machine).
 *
 * Usage: msgpath WINDOWS [message|empty|pingpong] [PEERS]
 *   prints "msgpath: X ns per message" after 100 warm-up windows; with
 *   "empty", after the warm-up it times WINDOWS*64 fi_cq_read calls on
 *   b's CQ with nothing to read instead (the cost of an empty poll);
 *   with "pingpong", WINDOWS*32 round trips of an 8-byte fi_tinjectdata
 *   each way, each side's receive posted before the send it answers
 *   and its completion read before it answers (as MPI_Send and
 *   MPI_Recv do through the MTL): the work on a ping-pong's path.
 *   PEERS (default 0) more endpoints first send one message each to a
 *   and to b and then stay idle (MSGPATH_SIZE in the environment: the
 *   windows' messages have that many bytes, at most 4096, instead of 8): the same path with that many idle
 *   peers connected (more than 4 puts the shm back end in its ready
 *   bitmap mode).
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
#include <time.h>

#define WINDOW 64
#define MSG_MAX 4096 /* MSGPATH_SIZE: bytes of a window's messages */
#define READ_MAX 100 /* the MTL's ofi_progress_event_count */
#define TAG 0x1234
#define IGNORE 0x0300000000000000ull /* like the MTL's sync-send bits */

struct side {
	struct fid_ep *ep;
	struct fid_cq *cq;
	fi_addr_t peer;
	long got; /* completions read and not yet counted off */
	char name[256];
};

static struct fid_domain *dom;
static struct fid_av *av;
static struct side a, b, idle;
static size_t msg_size = 8;

static void check(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "msgpath: %s: %s\n", what, fi_strerror(-ret));
		exit(1);
	}
}

static void side_open(struct fi_info *fi, struct side *s)
{
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED,
				      .size = 4096 };
	size_t len = sizeof(s->name);

	check(fi_endpoint(dom, fi, &s->ep, NULL), "fi_endpoint");
	check(fi_cq_open(dom, &cq_attr, &s->cq, NULL), "fi_cq_open");
	/* selective, as the MTL binds it: its receives and sends ask for
	 * their completions (FI_COMPLETION in the op flags), injects
	 * complete nothing */
	check(fi_ep_bind(s->ep, &s->cq->fid,
			 FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION),
	      "fi_ep_bind cq");
	check(fi_ep_bind(s->ep, &av->fid, 0), "fi_ep_bind av");
	check(fi_enable(s->ep), "fi_enable");
	check(fi_getname(&s->ep->fid, s->name, &len), "fi_getname");
}

/* One progress of s as the MTL's: reads of s's CQ until -FI_EAGAIN;
 * completions counted in s->got. */
static void poke(struct side *s)
{
	struct fi_cq_tagged_entry wc[READ_MAX];
	ssize_t n;

	while ((n = fi_cq_read(s->cq, wc, READ_MAX)) > 0)
		s->got += n;
	if (n != -FI_EAGAIN)
		check((int)n, "fi_cq_read");
}

/* Reads until n completions of s were seen; the other side is polled
 * only when s has nothing (its connection set-up needs it). */
static void drain(struct side *s, long n)
{
	while (s->got < n) {
		long before = s->got;

		poke(s);
		if (s->got == before)
			poke(s == &a ? &b : &a);
	}
	s->got -= n;
}

static void window(char *sbuf, char *rbuf)
{
	static struct fi_context ctx[WINDOW];

	for (int i = 0; i < WINDOW; i++)
		while (fi_trecv(b.ep, rbuf, msg_size, NULL, b.peer, TAG, IGNORE,
				&ctx[i]) == -FI_EAGAIN)
			poke(&b);
	for (int i = 0; i < WINDOW; i++)
		while (fi_tsenddata(a.ep, sbuf, msg_size, NULL, 1, a.peer, TAG,
				    &ctx[i]) == -FI_EAGAIN) {
			poke(&a);
			poke(&b);
		}
	drain(&a, WINDOW);
	drain(&b, WINDOW);
}

/* One round trip: a to b and back, each receive posted first. */
static void round_trip(char *sbuf, char *rbuf)
{
	static struct fi_context ctx[2];

	while (fi_trecv(b.ep, rbuf, 8, NULL, b.peer, TAG, IGNORE,
			&ctx[0]) == -FI_EAGAIN)
		poke(&b);
	while (fi_trecv(a.ep, rbuf, 8, NULL, a.peer, TAG, IGNORE,
			&ctx[1]) == -FI_EAGAIN)
		poke(&a);
	while (fi_tinjectdata(a.ep, sbuf, 8, 1, a.peer, TAG) == -FI_EAGAIN)
		poke(&a);
	drain(&b, 1);
	while (fi_tinjectdata(b.ep, sbuf, 8, 2, b.peer, TAG) == -FI_EAGAIN)
		poke(&b);
	drain(&a, 1);
}

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

/* k endpoints that each send one message to a and to b, received there
 * from any source, then idle; then 20 ms of polls (and at least 4000
 * rounds), so that a and b take back the ready bits of those idle rings
 * as they would in a run. */
static void idle_peers(struct fi_info *fi, int k, char *sbuf, char *rbuf)
{
	static struct fi_context ctx[2];
	struct fi_cq_attr cq_attr = { .format = FI_CQ_FORMAT_TAGGED };
	struct fid_ep *ep;
	fi_addr_t to[2];
	double end;

	check(fi_cq_open(dom, &cq_attr, &idle.cq, NULL), "fi_cq_open");
	for (int i = 0; i < k; i++) {
		check(fi_endpoint(dom, fi, &ep, NULL), "fi_endpoint");
		check(fi_ep_bind(ep, &idle.cq->fid,
				 FI_TRANSMIT | FI_RECV |
					 FI_SELECTIVE_COMPLETION),
		      "fi_ep_bind cq");
		check(fi_ep_bind(ep, &av->fid, 0), "fi_ep_bind av");
		check(fi_enable(ep), "fi_enable");
		if (fi_av_insert(av, a.name, 1, &to[0], 0, NULL) != 1 ||
		    fi_av_insert(av, b.name, 1, &to[1], 0, NULL) != 1)
			check(-FI_EINVAL, "fi_av_insert");
		check(fi_trecv(a.ep, rbuf, 8, NULL, FI_ADDR_UNSPEC, TAG + 1, 0,
			       &ctx[0]), "fi_trecv");
		check(fi_trecv(b.ep, rbuf, 8, NULL, FI_ADDR_UNSPEC, TAG + 1, 0,
			       &ctx[1]), "fi_trecv");
		for (int j = 0; j < 2; j++)
			while (fi_tinject(ep, sbuf, 8, to[j], TAG + 1) ==
			       -FI_EAGAIN)
				poke(&idle);
		while (a.got < 1 || b.got < 1) {
			poke(&idle);
			poke(&a);
			poke(&b);
		}
		a.got--;
		b.got--;
	}
	/* at least 4000 rounds: under valgrind the same work each run */
	end = now_ns() + 20e6;
	for (int i = 0; i < 4000 || now_ns() < end; i++) {
		poke(&idle);
		poke(&a);
		poke(&b);
	}
}

int main(int argc, char **argv)
{
	struct fi_info *hints, *fi;
	struct fid_fabric *fab;
	struct fi_av_attr av_attr = { .type = FI_AV_TABLE };
	static char sbuf[MSG_MAX], rbuf[MSG_MAX];
	long nwin, w;
	const char *mode = argc > 2 ? argv[2] : "message", *what;
	double t0;

	if (getenv("MSGPATH_SIZE"))
		msg_size = strtoul(getenv("MSGPATH_SIZE"), NULL, 0);
	if (msg_size > MSG_MAX) {
		fprintf(stderr, "msgpath: MSGPATH_SIZE at most %d\n", MSG_MAX);
		return 1;
	}
	if (argc < 2 || (nwin = atol(argv[1])) < 1 ||
	    (strcmp(mode, "message") && strcmp(mode, "empty") &&
	     strcmp(mode, "pingpong"))) {
		fprintf(stderr,
			"usage: %s WINDOWS [message|empty|pingpong] [PEERS]\n",
			argv[0]);
		return 2;
	}
	hints = fi_allocinfo();
	hints->caps = FI_TAGGED | FI_DIRECTED_RECV;
	hints->mode = FI_CONTEXT;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->domain_attr->av_type = FI_AV_TABLE;
	hints->tx_attr->op_flags = FI_COMPLETION;
	hints->rx_attr->op_flags = FI_COMPLETION;
	hints->fabric_attr->prov_name = strdup("ntx");
	check(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &fi),
	      "fi_getinfo");
	check(fi_fabric(fi->fabric_attr, &fab, NULL), "fi_fabric");
	check(fi_domain(fab, fi, &dom, NULL), "fi_domain");
	check(fi_av_open(dom, &av_attr, &av, NULL), "fi_av_open");
	side_open(fi, &a);
	side_open(fi, &b);
	if (fi_av_insert(av, b.name, 1, &a.peer, 0, NULL) != 1 ||
	    fi_av_insert(av, a.name, 1, &b.peer, 0, NULL) != 1)
		check(-FI_EINVAL, "fi_av_insert");
	if (argc > 3 && atoi(argv[3]) > 0)
		idle_peers(fi, atoi(argv[3]), sbuf, rbuf);
	for (w = 0; w < 100; w++) /* connects, warms the pools */
		window(sbuf, rbuf);
	t0 = now_ns();
	if (!strcmp(mode, "empty")) {
		for (w = 0; w < nwin * WINDOW; w++)
			poke(&b);
		if (b.got)
			check(-FI_EOTHER, "an empty CQ returned a completion");
		what = "empty fi_cq_read";
	} else if (!strcmp(mode, "pingpong")) {
		for (w = 0; w < nwin * WINDOW / 2; w++)
			round_trip(sbuf, rbuf);
		what = "message";
	} else {
		for (w = 0; w < nwin; w++)
			window(sbuf, rbuf);
		what = "message";
	}
	printf("msgpath: %.2f ns per %s (domain %s)\n",
	       (now_ns() - t0) / nwin / WINDOW, what, fi->domain_attr->name);
	fi_close(&a.ep->fid);
	fi_close(&b.ep->fid);
	fi_close(&a.cq->fid);
	fi_close(&b.cq->fid);
	fi_close(&av->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
	fi_freeinfo(hints);
	return 0;
}
