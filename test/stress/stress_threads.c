/*
 * Stress of the threading levels: two processes, each with THREADS threads
 * that post tagged sends and receives and poll completions; every message
 * is checksummed. Default mode, FI_THREAD_SAFE: all threads share one
 * endpoint and one CQ. Mode "percq", FI_THREAD_COMPLETION: each thread has
 * its own endpoint and CQ in one shared domain (the thread-hot case: the
 * threads share no lock in ntx). Built normally and with ThreadSanitizer
 * by scripts/tsan.sh. Usage: stress_threads [messages [percq]] (messages
 * per thread and direction, default 100000). Exit 0 on success.
 */
#include <pthread.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define WINDOW 16
#define MAXLEN 2048

struct op {
	int thread;
	bool recv;
	uint32_t idx;
	unsigned char buf[MAXLEN];
};

static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_ep *eps[THREADS];
static struct fid_av *av;
static struct fid_cq *cqs[THREADS];
static fi_addr_t peers[THREADS];
static bool percq;
static uint32_t nmsg = 100000;
static atomic_uint sent[THREADS], recvd[THREADS];
static atomic_int bad;

static size_t msg_len(int th, uint32_t i)
{
	return ((size_t)th * 7919 + (size_t)i * 104729) % MAXLEN + 1;
}

static uint64_t msg_tag(int th, uint32_t i)
{
	return ((uint64_t)th << 32) | i;
}

static unsigned char pat(int th, uint32_t i, size_t k)
{
	return (unsigned char)(th * 31 + i * 7 + k * 13);
}

static void poll_one(struct fid_cq *cq)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	struct op *o;
	size_t len;

	if (fi_cq_read(cq, &e, 1) != 1) {
		if (fi_cq_readerr(cq, &err, 0) == 1) {
			fprintf(stderr, "error completion: %s\n",
				fi_strerror(err.err));
			atomic_fetch_add(&bad, 1);
		}
		return;
	}
	o = e.op_context;
	if (o->recv) {
		len = msg_len(o->thread, o->idx);
		if (e.len != len || e.tag != msg_tag(o->thread, o->idx))
			atomic_fetch_add(&bad, 1);
		for (size_t k = 0; k < len; k++)
			if (o->buf[k] != pat(o->thread, o->idx, k)) {
				atomic_fetch_add(&bad, 1);
				break;
			}
		atomic_fetch_add(&recvd[o->thread], 1);
	} else {
		atomic_fetch_add(&sent[o->thread], 1);
	}
	free(o);
}

static void *worker(void *arg)
{
	int th = (int)(intptr_t)arg;
	struct fid_ep *ep = eps[th];
	fi_addr_t peer = peers[th];
	uint32_t nr = 0, ns = 0;

	while ((atomic_load(&sent[th]) < nmsg || atomic_load(&recvd[th]) < nmsg) &&
	       !atomic_load(&bad)) {
		if (nr < nmsg && nr - atomic_load(&recvd[th]) < WINDOW) {
			struct op *o = calloc(1, sizeof(*o));

			o->thread = th;
			o->recv = true;
			o->idx = nr;
			if (fi_trecv(ep, o->buf, MAXLEN, NULL, peer,
				     msg_tag(th, nr), 0, o) == 0)
				nr++;
			else
				free(o);
		}
		if (ns < nmsg && ns - atomic_load(&sent[th]) < WINDOW) {
			struct op *o = calloc(1, sizeof(*o));
			size_t len = msg_len(th, ns);

			o->thread = th;
			o->idx = ns;
			for (size_t k = 0; k < len; k++)
				o->buf[k] = pat(th, ns, k);
			if (fi_tsend(ep, o->buf, len, NULL, peer,
				     msg_tag(th, ns), o) == 0)
				ns++;
			else
				free(o);
		}
		poll_one(cqs[th]);
	}
	return NULL;
}

static int side(int sock)
{
	struct fi_info *h = fi_allocinfo(), *fi;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	char name[THREADS][64], theirs[THREADS][64], c = 'x';
	size_t len = sizeof(name[0]);
	int neps = percq ? THREADS : 1;
	pthread_t tid[THREADS];

	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup("shm");
	h->caps = FI_TAGGED | FI_DIRECTED_RECV;
	h->domain_attr->threading = percq ? FI_THREAD_COMPLETION
					  : FI_THREAD_SAFE;
	if (fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &fi) ||
	    fi_fabric(fi->fabric_attr, &fab, NULL) ||
	    fi_domain(fab, fi, &dom, NULL) || fi_av_open(dom, &aa, &av, NULL))
		return 2;
	for (int i = 0; i < neps; i++) {
		len = sizeof(name[i]);
		if (fi_cq_open(dom, &ca, &cqs[i], NULL) ||
		    fi_endpoint(dom, fi, &eps[i], NULL) ||
		    fi_ep_bind(eps[i], &av->fid, 0) ||
		    fi_ep_bind(eps[i], &cqs[i]->fid, FI_TRANSMIT | FI_RECV) ||
		    fi_enable(eps[i]) || fi_getname(&eps[i]->fid, name[i], &len))
			return 2;
	}
	if (write(sock, name, sizeof(name)) != (ssize_t)sizeof(name) ||
	    read(sock, theirs, sizeof(theirs)) != (ssize_t)sizeof(theirs))
		return 3;
	for (int i = 0; i < neps; i++)
		if (fi_av_insert(av, theirs[i], 1, &peers[i], 0, NULL) != 1)
			return 3;
	for (int i = neps; i < THREADS; i++) { /* all share the one */
		eps[i] = eps[0];
		cqs[i] = cqs[0];
		peers[i] = peers[0];
	}
	for (int i = 0; i < THREADS; i++)
		pthread_create(&tid[i], NULL, worker, (void *)(intptr_t)i);
	for (int i = 0; i < THREADS; i++)
		pthread_join(tid[i], NULL);
	/* keep progressing until the peer is done too */
	if (write(sock, &c, 1) != 1)
		return 4;
	for (;;) {
		struct fi_cq_tagged_entry e;
		char d;

		for (int i = 0; i < neps; i++)
			fi_cq_read(cqs[i], &e, 1);
		if (recv(sock, &d, 1, MSG_DONTWAIT) == 1)
			break;
	}
	for (int i = 0; i < neps; i++) {
		fi_close(&eps[i]->fid);
		fi_close(&cqs[i]->fid);
	}
	fi_close(&av->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
	fi_freeinfo(h);
	return atomic_load(&bad) ? 1 : 0;
}

int main(int argc, char **argv)
{
	int sv[2], st, ret;
	pid_t pid;

	if (argc > 1)
		nmsg = (uint32_t)strtoul(argv[1], NULL, 10);
	percq = argc > 2 && !strcmp(argv[2], "percq");
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	pid = fork();
	if (pid == 0)
		_exit(side(sv[1]));
	ret = side(sv[0]);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		ret = ret ? ret : 10;
	printf("stress_threads: %d threads x %u messages per direction, %s: "
	       "%s\n", THREADS, nmsg,
	       percq ? "one endpoint and CQ each (FI_THREAD_COMPLETION)"
		     : "one shared endpoint and CQ (FI_THREAD_SAFE)",
	       ret ? "FAIL" : "PASS");
	return ret;
}
