/* FI_THREAD_SAFE: several threads post to and poll one endpoint and one
 * CQ at once; every checksummed message arrives intact. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_test.h"

#define NTHREADS 4
#define NMSG 5000
#define WINDOW 16
#define MAXLEN 12000

struct op {
	int thread;
	bool recv;
	uint32_t idx;
	char buf[MAXLEN];
};

struct shared {
	struct tctx *t;
	fi_addr_t peer;
	atomic_int sent[NTHREADS], recvd[NTHREADS], bad;
};

static size_t msg_len(int th, uint32_t i)
{
	return (size_t)((th * 7919 + i * 104729) % MAXLEN) + 1;
}

static uint64_t msg_tag(int th, uint32_t i)
{
	return ((uint64_t)th << 32) | i;
}

/* Reads one completion, whoever owns it, and accounts for it. */
static void poll_one(struct shared *sh)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	struct op *o;

	if (fi_cq_read(sh->t->cq, &e, 1) != 1) {
		if (fi_cq_readerr(sh->t->cq, &err, 0) == 1)
			atomic_fetch_add(&sh->bad, 1);
		return;
	}
	o = e.op_context;
	if (!o->recv) {
		atomic_fetch_add(&sh->sent[o->thread], 1);
		free(o);
		return;
	}
	if (e.len != msg_len(o->thread, o->idx) || e.tag != msg_tag(o->thread, o->idx) ||
	    t_check(o->buf, e.len, o->thread * 100003 + o->idx))
		atomic_fetch_add(&sh->bad, 1);
	atomic_fetch_add(&sh->recvd[o->thread], 1);
	free(o);
}

struct targ {
	struct shared *sh;
	int th;
};

static void *worker(void *p)
{
	struct targ *a = p;
	struct shared *sh = a->sh;
	int th = a->th;
	uint32_t posted_r = 0, posted_s = 0;

	while (atomic_load(&sh->sent[th]) < NMSG ||
	       atomic_load(&sh->recvd[th]) < NMSG) {
		if (posted_r < NMSG &&
		    posted_r - (uint32_t)atomic_load(&sh->recvd[th]) < WINDOW) {
			struct op *o = calloc(1, sizeof(*o));

			o->thread = th;
			o->recv = true;
			o->idx = posted_r;
			if (fi_trecv(sh->t->ep, o->buf, MAXLEN, NULL, sh->peer,
				     msg_tag(th, posted_r), 0, o) == 0)
				posted_r++;
			else
				free(o);
		}
		if (posted_s < NMSG &&
		    posted_s - (uint32_t)atomic_load(&sh->sent[th]) < WINDOW) {
			struct op *o = calloc(1, sizeof(*o));
			size_t len = msg_len(th, posted_s);

			o->thread = th;
			o->idx = posted_s;
			t_fill(o->buf, len, th * 100003 + posted_s);
			if (fi_tsend(sh->t->ep, o->buf, len, NULL, sh->peer,
				     msg_tag(th, posted_s), o) == 0)
				posted_s++;
			else
				free(o);
		}
		poll_one(sh);
		if (atomic_load(&sh->bad))
			break;
	}
	return NULL;
}

/* Both processes run the same exchange. */
static int exchange(int sock)
{
	struct tctx t;
	struct shared sh = { .t = &t };
	struct targ a[NTHREADS];
	pthread_t tid[NTHREADS];
	struct fi_info *h = t_hints(FI_TAGGED | FI_DIRECTED_RECV);

	h->domain_attr->threading = FI_THREAD_SAFE;
	CHK(t_open_hints(&t, h) == 0);
	CHK(t_xchg_name(&t, sock, &sh.peer) == 0);
	for (int i = 0; i < NTHREADS; i++) {
		a[i] = (struct targ){ &sh, i };
		CHK(pthread_create(&tid[i], NULL, worker, &a[i]) == 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(tid[i], NULL);
	CHK(atomic_load(&sh.bad) == 0);
	for (int i = 0; i < NTHREADS; i++)
		CHK(sh.sent[i] == NMSG && sh.recvd[i] == NMSG);
	/* stay until the peer is done too: it may still need our progress */
	CHK(t_sync_progress(&t, sock, 30000) == 0);
	t_close(&t);
	return 0;
}

Test(threads, four_threads_share_one_endpoint_and_cq, .timeout = 120)
{
	int sock;
	pid_t pid = t_fork(&sock, exchange);

	cr_assert_eq(exchange(sock), 0, "parent side");
	cr_assert_eq(t_join(pid), 0, "child side");
}
