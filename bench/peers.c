/*
 * How ntx scales with the number of local peers of an endpoint.
 *
 * Three measurements, each between two processes A and B forked by this
 * program (A pinned to cpu 0, B to cpu 1 by default; -a/-b change that),
 * with a fresh pair of processes for every run:
 *
 *   idle     For every K of the list, A opens a measured endpoint a0 and
 *            K extra endpoints, B opens b0 and K extra endpoints (one
 *            group per K, all in the same two processes). Every extra
 *            endpoint of B sends one 8 B message to its group's a0, every
 *            extra endpoint of A one to b0, and a0 sends one to b0, so a0
 *            and b0 each hold K+1 connected peers, K of them idle. Then an
 *            8 B ping-pong a0<->b0 is timed in every group, in blocks of
 *            IDLE_BLOCK round trips taken in turn from each group (so that
 *            this machine's changes of speed hit every K alike): median
 *            and min half round trip, the median of the means of batches
 *            of round trips (IDLE_BATCH), and their ratio to K = 0.
 *   connect  A opens a0, B opens N endpoints with a receive posted on each.
 *            A inserts the N names into its AV, sends one 8 B message to
 *            each and waits for all N send completions; B polls all its CQs
 *            until every endpoint received its message. Reported: A's time
 *            from the first send to the last send completion.
 *   mem      A opens a0, B opens b0 and K extra endpoints (a0 has K+1
 *            peers). After the connections are set up (one 8 B message from
 *            each B endpoint to a0), an all-to-all of 8 KiB messages: in each
 *            of -R rounds (default 256: every 64-entry ring is cycled through
 *            4 times) a0 sends one message to every B endpoint and every B
 *            endpoint one to a0. A's /proc/self/status and smaps_rollup are
 *            read after set-up and after the all-to-all; the growth per peer
 *            is (value(K) - value(K0)) / (K - K0), K0 the first -m value.
 *
 * Objects: each process opens one fabric and one domain; every endpoint has
 * a CQ of its own (FI_CQ_FORMAT_TAGGED, FI_WAIT_NONE); all endpoints of a
 * process share one AV (FI_AV_TABLE) that holds the names of all endpoints
 * of the other process, so fi_addr i is the other side's endpoint i.
 *
 * Progress is manual: an endpoint moves only when its CQ is read, and
 * connection set-up needs both sides to progress. Every wait (completions,
 * the socketpair carrying names and barriers) therefore polls all CQs of
 * the process. The one exception is the timed ping-pong loop, which reads
 * only a0's (b0's) CQ: the extra endpoints have nothing outstanding by then
 * (their set-up sends completed before the barrier), and polling them would
 * time this program's loop instead of ntx's cost of idle peers.
 *
 * Names (fi_getname blobs, at most 64 bytes; ntx's are 32) travel over a
 * socketpair created before fork. The benchmark's own data buffers are one
 * 8 KiB send and one 8 KiB receive buffer shared by all operations of a
 * process (message contents are not checked), so that the memory measured
 * does not grow with the number of peers because of this program.
 *
 * FI_NTX_MAX_PEERS bounds the peers of one endpoint (ring slots of its
 * window). Its default is read from the provider (fi_getparams, "default:"
 * in the help text; 256 in prov/core/ntx_param.c); when a run needs more and
 * the variable is not set, the children set it to the number needed and
 * the program says so.
 *
 * Usage: peers [options] [idle] [connect] [mem]   (default: all three)
 * Output: human-readable tables and "RESULT <name> <value> <unit>" lines.
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SMALL 8
#define BIG 8192
#define MAX_NAME 64
#define MAX_LIST 16
#define TAG_SETUP 1ULL
#define TAG_PP 2ULL
#define TAG_A2A 0x100000000ULL /* + round */

enum mode { M_IDLE, M_CONNECT, M_MEM, M_INFO };

static struct {
	const char *domain;
	int cpu_a, cpu_b;
	int reps, iters, warmup, rounds, timeout;
	int idle_k[MAX_LIST], n_idle;
	int conn_n[MAX_LIST], n_conn;
	int mem_k[MAX_LIST], n_mem;
	long max_peers; /* provider default, from fi_getparams */
} o = {
	.domain = "shm",
	.cpu_a = 0,
	.cpu_b = 1,
	.reps = 3,
	.iters = 20000,
	.warmup = 2000,
	.rounds = 256,
	.timeout = 300,
	.idle_k = { 0, 15, 63, 255 },
	.n_idle = 4,
	.conn_n = { 15, 63, 255 },
	.n_conn = 3,
	.mem_k = { 0, 255 },
	.n_mem = 2,
};

static const char *role = "peers";
static char sbuf[BIG] __attribute__((aligned(64)));
static char rbuf[BIG] __attribute__((aligned(64)));

/* ---- memory fields of process A ------------------------------------------ */

static const struct memf {
	const char *file, *key;
} memf[] = {
	{ "/proc/self/status", "VmRSS" },
	{ "/proc/self/status", "RssAnon" },
	{ "/proc/self/status", "RssShmem" },
	{ "/proc/self/smaps_rollup", "Pss" },
	{ "/proc/self/smaps_rollup", "Pss_Anon" },
	{ "/proc/self/smaps_rollup", "Pss_Shmem" },
	{ "/proc/self/status", "VmPTE" },
};
#define NMEMF ((int)(sizeof(memf) / sizeof(memf[0])))

/* What a child reports to the parent (A's numbers; B only says ok). */
struct result {
	int ok;
	double v[2 * NMEMF + 4];
	double idle[MAX_LIST][4]; /* per K: median, min, p99, batched */
	char text[160];
};

/* ---- helpers --------------------------------------------------------------- */

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "peers %s [pid %d]: ", role, (int)getpid());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	_exit(2);
}

static void __attribute__((noreturn)) die_fi(const char *what, long ret)
{
	die("%s: %s (%ld)", what, fi_strerror((int)-ret), ret);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Median of n values (sorts them). */
static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double min_of(const double *v, int n)
{
	double m = v[0];

	for (int i = 1; i < n; i++)
		if (v[i] < m)
			m = v[i];
	return m;
}

static void *xcalloc(size_t n, size_t sz)
{
	void *p = calloc(n ? n : 1, sz);

	if (!p)
		die("out of memory");
	return p;
}

/* Fills out[] in KiB, in the order of memf[]. */
static void read_mem(double *out)
{
	char line[256];

	for (int i = 0; i < NMEMF; i++)
		out[i] = -1;
	for (int f = 0; f < 2; f++) {
		const char *file = f ? "/proc/self/smaps_rollup"
				     : "/proc/self/status";
		FILE *fp = fopen(file, "r");

		if (!fp)
			die("open %s: %s", file, strerror(errno));
		while (fgets(line, sizeof(line), fp)) {
			char *colon = strchr(line, ':');

			if (!colon)
				continue;
			*colon = '\0';
			for (int i = 0; i < NMEMF; i++)
				if (!strcmp(memf[i].file, file) &&
				    !strcmp(memf[i].key, line))
					out[i] = strtod(colon + 1, NULL);
		}
		fclose(fp);
	}
	for (int i = 0; i < NMEMF; i++)
		if (out[i] < 0)
			die("%s has no %s", memf[i].file, memf[i].key);
}

/* ---- libfabric objects of one process ---------------------------------------- */

struct proc {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av; /* shared by all endpoints of the process */
	int nep;
	struct fid_ep **ep;
	struct fid_cq **cq; /* one per endpoint */
	uint64_t *rx, *tx;  /* completions seen per endpoint */
	size_t namelen;
	uint8_t *names; /* ours, nep x namelen */
	int npeer;
	fi_addr_t *peer; /* the other process's endpoints, in its order */
	int sock;
};

static struct fi_info *get_info(void)
{
	struct fi_info *h = fi_allocinfo(), *fi = NULL, *it, *pick = NULL;
	int ret;

	if (!h)
		die("fi_allocinfo failed");
	h->caps = FI_MSG | FI_TAGGED;
	h->mode = 0;
	h->ep_attr->type = FI_EP_RDM;
	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup(o.domain);
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
	h->domain_attr->control_progress = FI_PROGRESS_MANUAL;
	h->domain_attr->av_type = FI_AV_TABLE;
	ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), NULL,
			 NULL, 0, h, &fi);
	fi_freeinfo(h);
	if (ret)
		die_fi("fi_getinfo (provider ntx, domain shm/tcp; check "
		       "FI_PROVIDER_PATH)", ret);
	for (it = fi; it && !pick; it = it->next)
		if (!strcmp(it->fabric_attr->prov_name, "ntx") &&
		    !strcmp(it->domain_attr->name, o.domain))
			pick = it;
	if (!pick)
		die("fi_getinfo returned no ntx info for domain %s", o.domain);
	pick = fi_dupinfo(pick);
	fi_freeinfo(fi);
	if (!pick)
		die("fi_dupinfo failed");
	return pick;
}

static void proc_open(struct proc *p, int nep, int av_count)
{
	struct fi_av_attr aa = { .type = FI_AV_TABLE, .count = (size_t)av_count };
	uint8_t name[MAX_NAME];
	int ret;

	p->fi = get_info();
	if ((ret = fi_fabric(p->fi->fabric_attr, &p->fab, NULL)))
		die_fi("fi_fabric", ret);
	if ((ret = fi_domain(p->fab, p->fi, &p->dom, NULL)))
		die_fi("fi_domain", ret);
	if ((ret = fi_av_open(p->dom, &aa, &p->av, NULL)))
		die_fi("fi_av_open", ret);
	p->nep = nep;
	p->ep = xcalloc((size_t)nep, sizeof(*p->ep));
	p->cq = xcalloc((size_t)nep, sizeof(*p->cq));
	p->rx = xcalloc((size_t)nep, sizeof(*p->rx));
	p->tx = xcalloc((size_t)nep, sizeof(*p->tx));
	p->names = xcalloc((size_t)nep, MAX_NAME);
	for (int i = 0; i < nep; i++) {
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
					 .wait_obj = FI_WAIT_NONE };
		size_t len = sizeof(name);

		if ((ret = fi_cq_open(p->dom, &ca, &p->cq[i], NULL)))
			die("fi_cq_open (endpoint %d): %s (%d)", i,
			    fi_strerror(-ret), ret);
		if ((ret = fi_endpoint(p->dom, p->fi, &p->ep[i], NULL)))
			die("fi_endpoint (endpoint %d of %d): %s (%d)", i, nep,
			    fi_strerror(-ret), ret);
		if ((ret = fi_ep_bind(p->ep[i], &p->av->fid, 0)) ||
		    (ret = fi_ep_bind(p->ep[i], &p->cq[i]->fid,
				      FI_TRANSMIT | FI_RECV)))
			die_fi("fi_ep_bind", ret);
		if ((ret = fi_enable(p->ep[i])))
			die("fi_enable (endpoint %d): %s (%d)", i,
			    fi_strerror(-ret), ret);
		if ((ret = fi_getname(&p->ep[i]->fid, name, &len)))
			die_fi("fi_getname", ret);
		if (len > MAX_NAME || (i && len != p->namelen))
			die("fi_getname: unexpected name length %zu", len);
		p->namelen = len;
		memcpy(p->names + (size_t)i * len, name, len);
	}
}

static void proc_close(struct proc *p)
{
	int ret;

	for (int i = 0; i < p->nep; i++) {
		if ((ret = fi_close(&p->ep[i]->fid)))
			die("fi_close(endpoint %d): %s (%d)", i,
			    fi_strerror(-ret), ret);
		if ((ret = fi_close(&p->cq[i]->fid)))
			die("fi_close(cq %d): %s (%d)", i, fi_strerror(-ret),
			    ret);
	}
	if ((ret = fi_close(&p->av->fid)))
		die_fi("fi_close(av)", ret);
	if ((ret = fi_close(&p->dom->fid)))
		die_fi("fi_close(domain)", ret);
	if ((ret = fi_close(&p->fab->fid)))
		die_fi("fi_close(fabric)", ret);
	fi_freeinfo(p->fi);
}

/* Reads endpoint i's CQ once; counts send and receive completions. */
static void poll_cq(struct proc *p, int i)
{
	struct fi_cq_tagged_entry e[16];
	struct fi_cq_err_entry err;
	ssize_t n = fi_cq_read(p->cq[i], e, 16);

	if (n == -FI_EAGAIN)
		return;
	if (n == -FI_EAVAIL) {
		memset(&err, 0, sizeof(err));
		if (fi_cq_readerr(p->cq[i], &err, 0) < 0)
			die("endpoint %d: fi_cq_readerr failed", i);
		die("endpoint %d: %s completion error: %s (err %d, prov_errno "
		    "%d: %s)", i, err.flags & FI_SEND ? "send" :
		    err.flags & FI_RECV ? "receive" : "an", fi_strerror(err.err),
		    err.err, err.prov_errno,
		    fi_cq_strerror(p->cq[i], err.prov_errno, err.err_data,
				   NULL, 0));
	}
	if (n < 0)
		die("endpoint %d: fi_cq_read: %s (%zd)", i,
		    fi_strerror((int)-n), n);
	for (ssize_t k = 0; k < n; k++) {
		if (e[k].flags & FI_RECV)
			p->rx[i]++;
		else if (e[k].flags & FI_SEND)
			p->tx[i]++;
	}
}

static void progress_all(struct proc *p)
{
	for (int i = 0; i < p->nep; i++)
		poll_cq(p, i);
}

static void post_send(struct proc *p, int i, size_t len, fi_addr_t dst,
		      uint64_t tag)
{
	ssize_t ret;

	while ((ret = fi_tsend(p->ep[i], sbuf, len, NULL, dst, tag, NULL)) ==
	       -FI_EAGAIN)
		progress_all(p);
	if (ret)
		die("fi_tsend (endpoint %d to fi_addr %" PRIu64 "): %s (%zd)",
		    i, (uint64_t)dst, fi_strerror((int)-ret), ret);
}

static void post_recv(struct proc *p, int i, size_t len, uint64_t tag)
{
	ssize_t ret;

	while ((ret = fi_trecv(p->ep[i], rbuf, len, NULL, FI_ADDR_UNSPEC, tag,
			       0, NULL)) == -FI_EAGAIN)
		progress_all(p);
	if (ret)
		die("fi_trecv (endpoint %d): %s (%zd)", i,
		    fi_strerror((int)-ret), ret);
}

/* ---- the socketpair: names and barriers, waited for while progressing ------- */

static void sock_send(struct proc *p, const void *buf, size_t len)
{
	const char *c = buf;

	while (len) {
		ssize_t n = send(p->sock, c, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("send to the other process: %s", strerror(errno));
		c += n;
		len -= (size_t)n;
	}
}

static void sock_recv(struct proc *p, void *buf, size_t len)
{
	char *c = buf;

	while (len) {
		ssize_t n = recv(p->sock, c, len, MSG_DONTWAIT);

		if (n > 0) {
			c += n;
			len -= (size_t)n;
		} else if (n == 0) {
			die("the other process is gone (socket closed)");
		} else if (errno == EAGAIN || errno == EWOULDBLOCK ||
			   errno == EINTR) {
			progress_all(p);
		} else {
			die("recv from the other process: %s", strerror(errno));
		}
	}
}

static void barrier(struct proc *p)
{
	char c = 'b';

	sock_send(p, &c, 1);
	sock_recv(p, &c, 1);
}

/* Sends our names, receives the other side's and inserts them into the
 * AV; returns the seconds fi_av_insert took. */
static double exchange_names(struct proc *p)
{
	uint32_t hdr[2] = { (uint32_t)p->nep, (uint32_t)p->namelen }, in[2];
	uint8_t *buf;
	double t0, t1;
	int ret;

	sock_send(p, hdr, sizeof(hdr));
	sock_send(p, p->names, (size_t)p->nep * p->namelen);
	sock_recv(p, in, sizeof(in));
	if (in[1] != p->namelen || !in[0] || in[0] > 65536)
		die("bad name header from the other process (%u names of %u "
		    "bytes, ours are %zu)", in[0], in[1], p->namelen);
	buf = xcalloc(in[0], in[1]);
	sock_recv(p, buf, (size_t)in[0] * in[1]);
	p->npeer = (int)in[0];
	p->peer = xcalloc(in[0], sizeof(*p->peer));
	t0 = now();
	ret = fi_av_insert(p->av, buf, in[0], p->peer, 0, NULL);
	t1 = now();
	if (ret != (int)in[0])
		die("fi_av_insert of %u names: returned %d (%s)", in[0], ret,
		    ret < 0 ? fi_strerror(-ret) : "short");
	free(buf);
	return t1 - t0;
}

/* ---- the measurements, as run by A (is_a) and B --------------------------- */

/* Round trips timed together for the batched median: one clock reading
 * per batch, so the clock's own step (10 ns on some virtual machines, 5
 * ns of a half round trip) no longer rounds each sample. */
#define IDLE_BATCH 50
/* Round trips of one group in a row before the next group's turn (10
 * batches), each turn after IDLE_TURN_WARM untimed ones. */
#define IDLE_BLOCK (10 * IDLE_BATCH)
#define IDLE_TURN_WARM 20

/* One round trip on endpoint i, as A: a receive posted, the message
 * sent, both completions waited for. */
static void idle_rt(struct proc *p, int i, uint64_t *rx, uint64_t *tx)
{
	post_recv(p, i, SMALL, TAG_PP);
	post_send(p, i, SMALL, p->peer[i], TAG_PP);
	++*rx;
	++*tx;
	while (p->rx[i] < *rx || p->tx[i] < *tx)
		poll_cq(p, i);
}

/* B's side of n round trips on endpoint i: each answer sent after the
 * receive of the next message is posted. */
static void idle_serve(struct proc *p, int i, int n, uint64_t *rx,
		       uint64_t *tx)
{
	post_recv(p, i, SMALL, TAG_PP);
	for (int it = 0; it < n; it++) {
		++*rx;
		while (p->rx[i] < *rx)
			poll_cq(p, i);
		if (it + 1 < n)
			post_recv(p, i, SMALL, TAG_PP);
		post_send(p, i, SMALL, p->peer[i], TAG_PP);
		++*tx;
	}
}

static void run_idle(struct proc *p, bool is_a, struct result *r)
{
	int n = o.n_idle, base[MAX_LIST], nep = 0;
	int blocks = (o.iters + IDLE_BLOCK - 1) / IDLE_BLOCK;
	int per = blocks * IDLE_BLOCK, nb = per / IDLE_BATCH;
	uint64_t rx[MAX_LIST], tx[MAX_LIST];
	double *s[MAX_LIST], *bt[MAX_LIST];
	bool done;

	for (int g = 0; g < n; g++) {
		base[g] = nep;
		nep += o.idle_k[g] + 1;
	}
	proc_open(p, nep, nep);
	exchange_names(p);

	/* set-up, per group: its ep 0 receives one message from each extra
	 * endpoint of the other side (b0 also one from a0), each extra
	 * endpoint sends one to the other side's ep 0 */
	for (int g = 0; g < n; g++) {
		int b0 = base[g], k = o.idle_k[g];

		for (int j = 0; j < k + (is_a ? 0 : 1); j++)
			post_recv(p, b0, SMALL, TAG_SETUP);
		for (int i = 1; i <= k; i++)
			post_send(p, b0 + i, SMALL, p->peer[b0], TAG_SETUP);
		if (is_a)
			post_send(p, b0, SMALL, p->peer[b0], TAG_SETUP);
	}
	do {
		progress_all(p);
		done = true;
		for (int g = 0; done && g < n; g++) {
			int b0 = base[g], k = o.idle_k[g];

			done = p->rx[b0] >= (uint64_t)(k + (is_a ? 0 : 1)) &&
			       p->tx[b0] >= (is_a ? 1u : 0u);
			for (int i = 1; done && i <= k; i++)
				done = p->tx[b0 + i] >= 1;
		}
	} while (!done);
	barrier(p);

	for (int g = 0; g < n; g++) {
		rx[g] = p->rx[base[g]];
		tx[g] = p->tx[base[g]];
		s[g] = xcalloc((size_t)per, sizeof(double));
		bt[g] = xcalloc((size_t)nb, sizeof(double));
		if (!is_a)
			idle_serve(p, base[g], o.warmup, &rx[g], &tx[g]);
		for (int it = 0; is_a && it < o.warmup; it++)
			idle_rt(p, base[g], &rx[g], &tx[g]);
	}
	/* the groups take turns, each turn starting with the next group */
	for (int blk = 0; blk < blocks; blk++) {
		for (int j = 0; j < n; j++) {
			int g = (blk + j) % n, ep = base[g];
			double t0, t1, b0;

			if (!is_a) {
				idle_serve(p, ep, IDLE_TURN_WARM + IDLE_BLOCK,
					   &rx[g], &tx[g]);
				continue;
			}
			for (int it = 0; it < IDLE_TURN_WARM; it++)
				idle_rt(p, ep, &rx[g], &tx[g]);
			b0 = t0 = now();
			for (int it = 0; it < IDLE_BLOCK; it++) {
				int at = blk * IDLE_BLOCK + it;

				idle_rt(p, ep, &rx[g], &tx[g]);
				t1 = now();
				s[g][at] = (t1 - t0) / 2 * 1e6;
				t0 = t1;
				if ((it + 1) % IDLE_BATCH == 0) {
					bt[g][at / IDLE_BATCH] =
						(t1 - b0) / IDLE_BATCH / 2 *
						1e6;
					b0 = t1;
				}
			}
		}
	}
	for (int g = 0; g < n; g++) {
		if (is_a) {
			r->idle[g][3] = median(bt[g], nb);
			r->idle[g][1] = min_of(s[g], per);
			r->idle[g][0] = median(s[g], per); /* sorts s */
			r->idle[g][2] = s[g][(size_t)((double)per * 0.99)];
		}
		free(s[g]);
		free(bt[g]);
	}
	/* B's last sends complete */
	for (int g = 0; !is_a && g < n; g++)
		while (p->tx[base[g]] < tx[g])
			poll_cq(p, base[g]);
	barrier(p);
	proc_close(p);
}

static void run_connect(struct proc *p, bool is_a, int n, struct result *r)
{
	if (is_a) {
		struct rusage u0, u1;
		double t0, t1, t2;

		proc_open(p, 1, n);
		r->v[2] = exchange_names(p) * 1e3;
		getrusage(RUSAGE_SELF, &u0);
		t0 = now();
		for (int i = 0; i < n; i++)
			post_send(p, 0, SMALL, p->peer[i], TAG_SETUP);
		t1 = now();
		while (p->tx[0] < (uint64_t)n)
			poll_cq(p, 0);
		t2 = now();
		getrusage(RUSAGE_SELF, &u1);
		r->v[0] = (t2 - t0) * 1e3;
		r->v[1] = (t1 - t0) * 1e3;
		r->v[3] = (double)(u1.ru_minflt - u0.ru_minflt) / n;
	} else {
		int left;

		proc_open(p, n, 1);
		for (int i = 0; i < n; i++)
			post_recv(p, i, SMALL, TAG_SETUP);
		exchange_names(p); /* our names tell A we are ready */
		do {
			progress_all(p);
			left = 0;
			for (int i = 0; i < n; i++)
				left += p->rx[i] < 1;
		} while (left);
	}
	barrier(p);
	proc_close(p);
}

/*
 * Memory of A with K+1 peers. Shared pages and the counters: a ring page
 * of a memfd window mapped (and touched) by both processes counts fully in
 * each one's RSS (VmRSS, RssShmem) and half in each one's PSS (Pss,
 * Pss_Shmem): PSS divides a page by the number of processes mapping it.
 * a0 writes its entries into its slot of each peer's window and reads the
 * peers' entries from its own window, so with 8 KiB messages the RSS of A
 * grows by about two rings per peer and its PSS by about one.
 *
 * Rounds: each side keeps the receives of rounds r and r+1 posted while in
 * round r and posts round r+2's before it leaves round r. A message of
 * round r+2 is sent only by a side that has received the other's round r+1
 * message, which is sent after the receives for r+2 were posted, so no
 * message ever arrives unexpected (no buffering in the provider's heap).
 */
static void run_mem(struct proc *p, bool is_a, int k, struct result *r)
{
	int m = is_a ? k + 1 : 1; /* messages per endpoint and round */
	uint64_t *rx0, *tx0;
	bool done;

	if (is_a)
		proc_open(p, 1, k + 1);
	else
		proc_open(p, k + 1, 1);
	exchange_names(p);

	/* connection set-up: every B endpoint sends one message to a0 */
	if (is_a)
		for (int j = 0; j <= k; j++)
			post_recv(p, 0, SMALL, TAG_SETUP);
	else
		for (int i = 0; i <= k; i++)
			post_send(p, i, SMALL, p->peer[0], TAG_SETUP);
	do {
		progress_all(p);
		done = true;
		for (int i = 0; done && i < p->nep; i++)
			done = is_a ? p->rx[i] >= (uint64_t)k + 1 : p->tx[i] >= 1;
	} while (!done);
	barrier(p);
	if (is_a)
		read_mem(r->v);
	barrier(p);

	/* all-to-all, o.rounds rounds of 8 KiB messages */
	rx0 = xcalloc((size_t)p->nep, sizeof(*rx0));
	tx0 = xcalloc((size_t)p->nep, sizeof(*tx0));
	for (int i = 0; i < p->nep; i++) {
		rx0[i] = p->rx[i];
		tx0[i] = p->tx[i];
		for (int rd = 0; rd < 2 && rd < o.rounds; rd++)
			for (int j = 0; j < m; j++)
				post_recv(p, i, BIG, TAG_A2A + (uint64_t)rd);
	}
	for (int rd = 0; rd < o.rounds; rd++) {
		uint64_t want = (uint64_t)(rd + 1) * (uint64_t)m;

		for (int i = 0; i < p->nep; i++)
			for (int j = 0; j < m; j++)
				post_send(p, i, BIG, p->peer[is_a ? j : 0],
					  TAG_A2A + (uint64_t)rd);
		do {
			progress_all(p);
			done = true;
			for (int i = 0; done && i < p->nep; i++)
				done = p->rx[i] >= rx0[i] + want &&
				       p->tx[i] >= tx0[i] + want;
		} while (!done);
		if (rd + 2 < o.rounds)
			for (int i = 0; i < p->nep; i++)
				for (int j = 0; j < m; j++)
					post_recv(p, i, BIG,
						  TAG_A2A + (uint64_t)rd + 2);
	}
	barrier(p);
	if (is_a)
		read_mem(r->v + NMEMF);
	barrier(p);
	free(rx0);
	free(tx0);
	proc_close(p);
}

/* ---- processes ---------------------------------------------------------------- */

static void pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		die("sched_setaffinity(cpu %d): %s", cpu, strerror(errno));
}

/* The most peers one endpoint has in a run. */
static int peers_needed(enum mode m, int k)
{
	return m == M_CONNECT ? k : k + 1;
}

static void __attribute__((noreturn))
child(enum mode m, int k, bool is_a, int sock, int resfd)
{
	struct proc p = { .sock = sock };
	struct result r;
	char num[32];

	memset(&r, 0, sizeof(r));
	role = is_a ? "A" : "B";
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm((unsigned)o.timeout);
	pin(is_a ? o.cpu_a : o.cpu_b);
	if (o.max_peers > 0 && peers_needed(m, k) > o.max_peers &&
	    !getenv("FI_NTX_MAX_PEERS")) {
		snprintf(num, sizeof(num), "%d", peers_needed(m, k));
		setenv("FI_NTX_MAX_PEERS", num, 1);
	}
	switch (m) {
	case M_IDLE:
		run_idle(&p, is_a, &r);
		break;
	case M_CONNECT:
		run_connect(&p, is_a, k, &r);
		break;
	case M_MEM:
		run_mem(&p, is_a, k, &r);
		break;
	case M_INFO:
		break;
	}
	r.ok = 1;
	if (resfd >= 0 && write(resfd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		die("write result: %s", strerror(errno));
	_exit(0);
}

/* Describes how a child ended; true if it exited with status 0. */
static bool child_ok(int st, const char *who, pid_t pid)
{
	if (WIFEXITED(st) && !WEXITSTATUS(st))
		return true;
	if (WIFEXITED(st))
		fprintf(stderr, "peers: process %s (pid %d) exited with "
			"status %d\n", who, (int)pid, WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		fprintf(stderr, "peers: process %s (pid %d) killed by signal "
			"%d (%s)%s\n", who, (int)pid, WTERMSIG(st),
			strsignal(WTERMSIG(st)), WTERMSIG(st) == SIGALRM
			? ": timed out (-T)" : "");
	return false;
}

/* Forks A and B for one run; A's result in *res. Returns 0 on success. */
static int run_pair(enum mode m, int k, struct result *res)
{
	int sv[2], rp[2], st, left = 2, ok = 1;
	pid_t a, b, pid;
	ssize_t n;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) || pipe(rp))
		die("socketpair/pipe: %s", strerror(errno));
	fflush(NULL);
	a = fork();
	if (a < 0)
		die("fork: %s", strerror(errno));
	if (!a) {
		close(sv[1]);
		close(rp[0]);
		child(m, k, true, sv[0], rp[1]);
	}
	b = fork();
	if (b < 0) {
		kill(a, SIGKILL);
		die("fork: %s", strerror(errno));
	}
	if (!b) {
		close(sv[0]);
		close(rp[0]);
		close(rp[1]);
		child(m, k, false, sv[1], -1);
	}
	close(sv[0]);
	close(sv[1]);
	close(rp[1]);
	while (left) {
		pid = waitpid(-1, &st, 0);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid != a && pid != b)
			die("waitpid: %s", strerror(errno));
		left--;
		if (!child_ok(st, pid == a ? "A" : "B", pid)) {
			ok = 0;
			if (left) /* the other one cannot finish alone */
				kill(pid == a ? b : a, SIGKILL);
		}
	}
	memset(res, 0, sizeof(*res));
	n = read(rp[0], res, sizeof(*res));
	close(rp[0]);
	if (n != (ssize_t)sizeof(*res) || !res->ok)
		ok = 0;
	return ok ? 0 : -1;
}

/* Provider version and the default of FI_NTX_MAX_PEERS, from a child so
 * that the parent never initialises libfabric before it forks. */
static int probe(void)
{
	int rp[2], st;
	pid_t pid;
	struct result r;

	if (pipe(rp))
		die("pipe: %s", strerror(errno));
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (!pid) {
		struct fi_info *fi;
		struct fi_param *prm;
		int cnt;

		role = "probe";
		close(rp[0]);
		alarm((unsigned)o.timeout);
		memset(&r, 0, sizeof(r));
		fi = get_info();
		snprintf(r.text, sizeof(r.text), "ntx %u.%u, domain %s, "
			 "libfabric %u.%u", FI_MAJOR(fi->fabric_attr->prov_version),
			 FI_MINOR(fi->fabric_attr->prov_version),
			 fi->domain_attr->name, FI_MAJOR(fi_version()),
			 FI_MINOR(fi_version()));
		r.v[0] = -1;
		if (!fi_getparams(&prm, &cnt)) {
			for (int i = 0; i < cnt; i++) {
				const char *d;

				if (strcmp(prm[i].name, "FI_NTX_MAX_PEERS"))
					continue;
				d = prm[i].help_string ?
				    strstr(prm[i].help_string, "default: ") : NULL;
				if (d)
					r.v[0] = strtod(d + 9, NULL);
			}
			fi_freeparams(prm);
		}
		fi_freeinfo(fi);
		r.ok = 1;
		if (write(rp[1], &r, sizeof(r)) != (ssize_t)sizeof(r))
			die("write: %s", strerror(errno));
		_exit(0);
	}
	close(rp[1]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	memset(&r, 0, sizeof(r));
	if (read(rp[0], &r, sizeof(r)) != (ssize_t)sizeof(r) || !r.ok ||
	    !child_ok(st, "probe", pid)) {
		close(rp[0]);
		return -1;
	}
	close(rp[0]);
	o.max_peers = (long)r.v[0];
	printf("# provider: %s; FI_PROVIDER_PATH=%s\n", r.text,
	       getenv("FI_PROVIDER_PATH") ? getenv("FI_PROVIDER_PATH") : "");
	printf("# FI_NTX_MAX_PEERS: provider default %ld%s%s\n", o.max_peers,
	       getenv("FI_NTX_MAX_PEERS") ? ", set in the environment to " : "",
	       getenv("FI_NTX_MAX_PEERS") ? getenv("FI_NTX_MAX_PEERS") : "");
	printf("# cpus: A %d, B %d; runs per point: %d; fresh process pair "
	       "per run\n", o.cpu_a, o.cpu_b, o.reps);
	return 0;
}

/* Says whether FI_NTX_MAX_PEERS is set for the runs of a list. */
static void note_max_peers(enum mode m, const int *list, int n)
{
	int need = 0;

	for (int i = 0; i < n; i++)
		if (peers_needed(m, list[i]) > need)
			need = peers_needed(m, list[i]);
	if (getenv("FI_NTX_MAX_PEERS"))
		printf("# most peers of one endpoint: %d; FI_NTX_MAX_PEERS=%s "
		       "(environment)%s\n", need, getenv("FI_NTX_MAX_PEERS"),
		       atol(getenv("FI_NTX_MAX_PEERS")) < need
		       ? " IS TOO SMALL" : "");
	else if (o.max_peers > 0 && need > o.max_peers)
		printf("# most peers of one endpoint: %d > default %ld: runs "
		       "that need more set FI_NTX_MAX_PEERS to the number "
		       "needed\n", need, o.max_peers);
	else
		printf("# most peers of one endpoint: %d <= FI_NTX_MAX_PEERS "
		       "default %ld: not set\n", need, o.max_peers);
}

/* ---- the three reports ------------------------------------------------------ */

static int do_idle(void)
{
	double med[MAX_LIST][64], mn[MAX_LIST][64], p99[MAX_LIST][64];
	double bat[MAX_LIST][64], bm[MAX_LIST], mr[MAX_LIST], br[MAX_LIST];
	double m[MAX_LIST], lo[MAX_LIST], p[MAX_LIST], tmp[64];
	struct result r;
	int kmax = 0;

	printf("\n## idle peers (%s): 8 B ping-pong a0<->b0 with K idle peers "
	       "each, half round trip in us\n", o.domain);
	printf("# %d timed iterations after %d warm-up; median = median of "
	       "the runs' medians, min = lowest of all\n", o.iters, o.warmup);
	note_max_peers(M_IDLE, o.idle_k, o.n_idle);
	fflush(stdout);
	/* every run holds all K, taken in turns (run_idle) */
	for (int i = 0; i < o.n_idle; i++)
		if (o.idle_k[i] > kmax)
			kmax = o.idle_k[i];
	for (int rep = 0; rep < o.reps; rep++) {
		if (run_pair(M_IDLE, kmax, &r)) {
			fprintf(stderr, "peers: idle run %d failed\n", rep + 1);
			return -1;
		}
		for (int i = 0; i < o.n_idle; i++) {
			med[i][rep] = r.idle[i][0];
			mn[i][rep] = r.idle[i][1];
			p99[i][rep] = r.idle[i][2];
			bat[i][rep] = r.idle[i][3];
		}
	}
	for (int i = 0; i < o.n_idle; i++) {
		memcpy(tmp, med[i], sizeof(double) * (size_t)o.reps);
		m[i] = median(tmp, o.reps);
		lo[i] = min_of(mn[i], o.reps);
		memcpy(tmp, p99[i], sizeof(double) * (size_t)o.reps);
		p[i] = median(tmp, o.reps);
		memcpy(tmp, bat[i], sizeof(double) * (size_t)o.reps);
		bm[i] = median(tmp, o.reps);
		/* the ratios of a run's own K = 0 (taken in turns with it),
		 * their median over the runs */
		for (int rep = 0; rep < o.reps; rep++)
			tmp[rep] = med[i][rep] / med[0][rep];
		mr[i] = median(tmp, o.reps);
		for (int rep = 0; rep < o.reps; rep++)
			tmp[rep] = bat[0][rep] ? bat[i][rep] / bat[0][rep] : 0;
		br[i] = median(tmp, o.reps);
	}
	printf("# batched = median of the means of batches of %d round "
	       "trips (one clock reading a batch); med/K0 and bat/K0: median "
	       "over the runs of each run's ratio to its own K = 0\n",
	       IDLE_BATCH);
	printf("%5s %9s | %9s %9s %9s %9s | %9s %9s %9s | %s\n", "K",
	       "peers/ep", "median", "min", "p99", "batched", "med/K0",
	       "min/K0", "bat/K0", "medians of runs");
	for (int i = 0; i < o.n_idle; i++) {
		printf("%5d %9d | %9.3f %9.3f %9.3f %9.4f | %9.2f %9.2f %9.3f |",
		       o.idle_k[i], o.idle_k[i] + 1, m[i], lo[i], p[i], bm[i],
		       mr[i], lo[i] / lo[0], br[i]);
		for (int rep = 0; rep < o.reps; rep++)
			printf(" %.3f", med[i][rep]);
		printf("\n");
	}
	for (int i = 0; i < o.n_idle; i++) {
		int k = o.idle_k[i];

		printf("RESULT %s.idle.k%d.median %.3f us\n", o.domain, k, m[i]);
		printf("RESULT %s.idle.k%d.min %.3f us\n", o.domain, k, lo[i]);
		printf("RESULT %s.idle.k%d.p99 %.3f us\n", o.domain, k, p[i]);
		printf("RESULT %s.idle.k%d.median_ratio %.3f x\n", o.domain, k,
		       mr[i]);
		printf("RESULT %s.idle.k%d.min_ratio %.3f x\n", o.domain, k,
		       lo[i] / lo[0]);
		printf("RESULT %s.idle.k%d.batched %.4f us\n", o.domain, k,
		       bm[i]);
		printf("RESULT %s.idle.k%d.batched_ratio %.3f x\n", o.domain,
		       k, br[i]);
	}
	return 0;
}

static int do_connect(void)
{
	double tot[MAX_LIST][64], post[MAX_LIST][64], av[MAX_LIST][64];
	double flt[MAX_LIST][64], best, med, pm, am, fm;
	struct result r;

	printf("\n## connect time (%s): a0 sends 8 B to N fresh peers, time "
	       "from the first send to the last send completion\n", o.domain);
	note_max_peers(M_CONNECT, o.conn_n, o.n_conn);
	fflush(stdout);
	for (int rep = 0; rep < o.reps; rep++) {
		for (int i = 0; i < o.n_conn; i++) {
			if (run_pair(M_CONNECT, o.conn_n[i], &r)) {
				fprintf(stderr, "peers: connect N=%d run %d "
					"failed\n", o.conn_n[i], rep + 1);
				return -1;
			}
			tot[i][rep] = r.v[0];
			post[i][rep] = r.v[1];
			av[i][rep] = r.v[2];
			flt[i][rep] = r.v[3];
		}
	}
	printf("# post: first send to last fi_tsend return (connects are "
	       "started inside fi_tsend); flt/peer: A's minor page faults "
	       "from the first send to the last completion, per peer\n");
	printf("%5s | %9s %9s | %12s %12s | %9s %9s %9s | %s\n", "N",
	       "best ms", "median ms", "best us/peer", "med us/peer", "post ms",
	       "av ins ms", "flt/peer", "runs ms");
	for (int i = 0; i < o.n_conn; i++) {
		int n = o.conn_n[i];
		double tmp[64];

		best = min_of(tot[i], o.reps);
		memcpy(tmp, tot[i], sizeof(double) * (size_t)o.reps);
		med = median(tmp, o.reps);
		memcpy(tmp, post[i], sizeof(double) * (size_t)o.reps);
		pm = median(tmp, o.reps);
		memcpy(tmp, av[i], sizeof(double) * (size_t)o.reps);
		am = median(tmp, o.reps);
		memcpy(tmp, flt[i], sizeof(double) * (size_t)o.reps);
		fm = median(tmp, o.reps);
		printf("%5d | %9.3f %9.3f | %12.2f %12.2f | %9.3f %9.3f %9.1f |",
		       n, best, med, best * 1e3 / n, med * 1e3 / n, pm, am, fm);
		for (int rep = 0; rep < o.reps; rep++)
			printf(" %.3f", tot[i][rep]);
		printf("\n");
		printf("RESULT %s.connect.n%d.best %.3f ms\n", o.domain, n, best);
		printf("RESULT %s.connect.n%d.median %.3f ms\n", o.domain, n, med);
		printf("RESULT %s.connect.n%d.best_per_peer %.2f us\n", o.domain,
		       n, best * 1e3 / n);
		printf("RESULT %s.connect.n%d.median_per_peer %.2f us\n",
		       o.domain, n, med * 1e3 / n);
		printf("RESULT %s.connect.n%d.faults_per_peer %.1f count\n",
		       o.domain, n, fm);
	}
	return 0;
}

static int do_mem(void)
{
	static const char *phase[2] = { "conn", "a2a" };
	double v[MAX_LIST][2 * NMEMF][64], val[MAX_LIST][2 * NMEMF];
	struct result r;

	if (o.n_mem < 2) {
		fprintf(stderr, "peers: -m needs at least two values\n");
		return -1;
	}
	printf("\n## memory per peer (%s): process A, a0 with K+1 peers "
	       "(b0 and K more endpoints of B), KiB\n", o.domain);
	printf("# conn: after set-up (one 8 B message from each peer); a2a: "
	       "after %d rounds of 8 KiB all-to-all; median of %d runs\n",
	       o.rounds, o.reps);
	printf("# RSS counts a page shared with B in full, PSS half; the "
	       "per-peer growth is (value(K) - value(K=%d)) / (K - %d)\n", o.mem_k[0],
	       o.mem_k[0]);
	note_max_peers(M_MEM, o.mem_k, o.n_mem);
	fflush(stdout);
	for (int rep = 0; rep < o.reps; rep++) {
		for (int i = 0; i < o.n_mem; i++) {
			if (run_pair(M_MEM, o.mem_k[i], &r)) {
				fprintf(stderr, "peers: mem K=%d run %d "
					"failed\n", o.mem_k[i], rep + 1);
				return -1;
			}
			for (int f = 0; f < 2 * NMEMF; f++)
				v[i][f][rep] = r.v[f];
		}
	}
	for (int i = 0; i < o.n_mem; i++)
		for (int f = 0; f < 2 * NMEMF; f++)
			val[i][f] = median(v[i][f], o.reps);
	for (int ph = 0; ph < 2; ph++) {
		printf("%-10s %-5s", "field", phase[ph]);
		for (int i = 0; i < o.n_mem; i++) {
			char h[24];

			snprintf(h, sizeof(h), "K=%d", o.mem_k[i]);
			printf(" %10s", h);
		}
		for (int i = 1; i < o.n_mem; i++) {
			char h[24];

			snprintf(h, sizeof(h), "/peer K=%d", o.mem_k[i]);
			printf(" %11s", h);
		}
		printf("\n");
		for (int f = 0; f < NMEMF; f++) {
			int x = ph * NMEMF + f;

			printf("%-10s %-5s", memf[f].key, phase[ph]);
			for (int i = 0; i < o.n_mem; i++)
				printf(" %10.0f", val[i][x]);
			for (int i = 1; i < o.n_mem; i++)
				printf(" %11.1f", (val[i][x] - val[0][x]) /
				       (o.mem_k[i] - o.mem_k[0]));
			printf("\n");
		}
	}
	for (int ph = 0; ph < 2; ph++) {
		for (int f = 0; f < NMEMF; f++) {
			int x = ph * NMEMF + f;

			for (int i = 0; i < o.n_mem; i++)
				printf("RESULT %s.mem.%s.k%d.%s %.0f KiB\n",
				       o.domain, phase[ph], o.mem_k[i],
				       memf[f].key, val[i][x]);
			for (int i = 1; i < o.n_mem; i++)
				printf("RESULT %s.mem.%s.k%d.%s_per_peer %.1f "
				       "KiB\n", o.domain, phase[ph], o.mem_k[i],
				       memf[f].key, (val[i][x] - val[0][x]) /
				       (o.mem_k[i] - o.mem_k[0]));
		}
	}
	return 0;
}

/* ---- main ------------------------------------------------------------------- */

static int parse_list(const char *s, int *out)
{
	int n = 0;
	char *end;

	while (*s && n < MAX_LIST) {
		long v = strtol(s, &end, 10);

		if (end == s || v < 0 || v > 4095)
			return -1;
		out[n++] = (int)v;
		s = *end == ',' ? end + 1 : end;
		if (*end && *end != ',')
			return -1;
	}
	return n ? n : -1;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: peers [options] [idle] [connect] [mem]\n"
		"  -d DOMAIN  shm (default) or tcp\n"
		"  -r N       runs per point, fresh processes each (default 3)\n"
		"  -n N       timed ping-pong iterations (default 20000)\n"
		"  -w N       warm-up iterations (default 2000)\n"
		"  -R N       all-to-all rounds of the mem test (default 256)\n"
		"  -k LIST    idle peers K (default 0,15,63,255)\n"
		"  -c LIST    connect peers N (default 15,63,255)\n"
		"  -m LIST    mem peers K, first is the base (default 0,255)\n"
		"  -a CPU     cpu of process A (default 0, -1: not pinned)\n"
		"  -b CPU     cpu of process B (default 1, -1: not pinned)\n"
		"  -T SEC     time limit of each process (default 300)\n");
	exit(1);
}

int main(int argc, char **argv)
{
	bool want[3] = { false, false, false }, any = false;
	struct rlimit rl;
	int c, ret = 0;

	while ((c = getopt(argc, argv, "d:r:n:w:R:k:c:m:a:b:T:h")) != -1) {
		switch (c) {
		case 'd':
			o.domain = optarg;
			break;
		case 'r':
			o.reps = atoi(optarg);
			break;
		case 'n':
			o.iters = atoi(optarg);
			break;
		case 'w':
			o.warmup = atoi(optarg);
			break;
		case 'R':
			o.rounds = atoi(optarg);
			break;
		case 'k':
			if ((o.n_idle = parse_list(optarg, o.idle_k)) < 0)
				usage();
			break;
		case 'c':
			if ((o.n_conn = parse_list(optarg, o.conn_n)) < 0)
				usage();
			break;
		case 'm':
			if ((o.n_mem = parse_list(optarg, o.mem_k)) < 0)
				usage();
			break;
		case 'a':
			o.cpu_a = atoi(optarg);
			break;
		case 'b':
			o.cpu_b = atoi(optarg);
			break;
		case 'T':
			o.timeout = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (o.reps < 1 || o.reps > 64 || o.iters < 1 || o.warmup < 0 ||
	    o.rounds < 1 || o.timeout < 1)
		usage();
	for (int i = 0; i < o.n_conn; i++)
		if (!o.conn_n[i])
			usage();
	for (; optind < argc; optind++) {
		if (!strcmp(argv[optind], "idle"))
			want[M_IDLE] = true;
		else if (!strcmp(argv[optind], "connect"))
			want[M_CONNECT] = true;
		else if (!strcmp(argv[optind], "mem"))
			want[M_MEM] = true;
		else
			usage();
		any = true;
	}
	if (!any)
		want[M_IDLE] = want[M_CONNECT] = want[M_MEM] = true;
	/* each endpoint holds a few descriptors (window memfd, wake socket,
	 * and on tcp a listening socket and an epoll fd) */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (probe()) {
		fprintf(stderr, "peers: cannot open ntx domain %s\n", o.domain);
		return 1;
	}
	if (want[M_IDLE] && do_idle())
		ret = 1;
	if (want[M_CONNECT] && do_connect())
		ret = 1;
	if (want[M_MEM] && do_mem())
		ret = 1;
	return ret;
}
