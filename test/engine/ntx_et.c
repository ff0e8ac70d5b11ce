/* Engine test fixture: see ntx_et.h. */
#include "config.h"
#include <stdlib.h>

#include "ntx_et.h"

struct ntx_domain et_dom;
struct et_node et[ET_NODES];
static int et_n;

static void et_cq_init(struct ntx_cq *cq)
{
	cq->domain = &et_dom;
	cq->format = FI_CQ_FORMAT_TAGGED;
	cq->esz = ntx_cq_entry_size(cq->format);
	cq->wait.kind = FI_WAIT_NONE;
	cq->cap = 16; /* small: the ring grows in the tests */
	cq->ring = calloc(cq->cap, sizeof(*cq->ring));
	cr_assert_not_null(cq->ring);
	cr_assert_eq(ntx_signal_open(&cq->wait.sig), 0);
	ntx_list_init(&cq->errs);
	pthread_mutex_init(&cq->lock, NULL);
	ntx_scope_init(&cq->scope);
	cq->wait.epfd = -1;
}

/* What ntx_ep_open and fi_enable give an endpoint, for the engine. */
static struct ntx_ep *et_ep_new(struct et_node *n)
{
	struct ntx_ep *ep = calloc(1, sizeof(*ep));
	struct ntx_be_cb cb = ntx_vc_callbacks;

	cr_assert_not_null(ep);
	ep->domain = &et_dom;
	pthread_mutex_init(&ep->lock, NULL);
	ep->lockp = &ep->lock;
	ep->rx = ep;
	ep->caps = FI_MSG | FI_TAGGED | FI_DIRECTED_RECV | FI_SOURCE;
	ep->tx_limit = 1024;
	ep->min_multi_recv = 64;
	ntx_list_init(&ep->vcs);
	ntx_list_init(&ep->busy_vcs);
	ntx_list_init(&ep->unexp_free);
	ntx_list_init(&ep->unexp_vcs);
	ntx_tme_init(&ep->tme);
	ep->av = &n->av;
	ep->tx_cq = ep->rx_cq = &n->cq;
	cb.ctx = &ep->be[NTX_BE_SHM];
	ep->be[NTX_BE_SHM].ep = ep;
	cr_assert_eq(ntx_loop_ops.open(&ep->be[NTX_BE_SHM].be, NULL, &cb,
				       NULL), 0);
	ep->be[NTX_BE_SHM].ops = &ntx_loop_ops;
	ntx_loop_ops.getname(ep->be[NTX_BE_SHM].be, &ep->name);
	ep->enabled = true;
	ntx_ep_set_paths(ep);
	return ep;
}

/* The engine half of ntx_ep_close. */
static void et_ep_free(struct ntx_ep *ep)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&ep->vcs, it, tmp)
		ntx_vc_destroy(ntx_container_of(it, struct ntx_vc, entry));
	ntx_proto_unexp_fini(ep);
	ntx_loop_ops.close(ep->be[NTX_BE_SHM].be);
	ntx_req_fini(ep);
	ntx_idtab_fini(&ep->vc_tab);
	pthread_mutex_destroy(&ep->lock);
	free(ep);
}

static void et_av_insert_all(void)
{
	for (int i = 0; i < et_n; i++)
		for (int j = 0; j < et_n; j++)
			cr_assert_eq(ntx_av_table_add(&et[i].av, &et[j].ep->name,
						      &et[i].addr[j]), 0);
}

void et_open(int n)
{
	memset(&et_dom, 0, sizeof(et_dom));
	et_dom.lockless = et_dom.ep_lockless = true; /* one thread */
	pthread_mutex_init(&et_dom.lock, NULL);
	pthread_mutex_init(&et_dom.mr_lock, NULL);
	ntx_list_init(&et_dom.eps);
	et_dom.mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	et_n = n;
	for (int i = 0; i < n; i++) {
		memset(&et[i], 0, sizeof(et[i]));
		et[i].av.domain = &et_dom;
		et[i].av.type = FI_AV_TABLE;
		pthread_mutex_init(&et[i].av.lock, NULL);
		et_cq_init(&et[i].cq);
		et[i].ep = et_ep_new(&et[i]);
	}
	et_av_insert_all();
}

void et_reopen(int i, const struct ntx_addr *name)
{
	et_ep_free(et[i].ep);
	ntx_loop_next_name(name);
	et[i].ep = et_ep_new(&et[i]);
	for (int j = 0; j < et_n; j++) {
		cr_assert_eq(ntx_av_table_add(&et[j].av, &et[i].ep->name,
					      &et[j].addr[i]), 0);
		if (j != i)
			cr_assert_eq(ntx_av_table_add(&et[i].av,
						      &et[j].ep->name,
						      &et[i].addr[j]), 0);
	}
}

static void et_cq_free(struct ntx_cq *cq)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&cq->errs, it, tmp)
		free(ntx_container_of(it, struct ntx_cq_err, entry));
	free(cq->last_err);
	free(cq->ring);
	ntx_signal_close(&cq->wait.sig);
	ntx_scope_fini(&cq->scope);
	pthread_mutex_destroy(&cq->lock);
}

void et_close(void)
{
	for (int i = 0; i < et_n; i++)
		et_ep_free(et[i].ep);
	for (int i = 0; i < et_n; i++) {
		et_cq_free(&et[i].cq);
		ntx_av_table_fini(&et[i].av);
		pthread_mutex_destroy(&et[i].av.lock);
	}
	ntx_loop_reset();
	pthread_mutex_destroy(&et_dom.lock);
	pthread_mutex_destroy(&et_dom.mr_lock);
	ntx_idtab_fini(&et_dom.mr_table);
	et_n = 0;
}

struct ntx_be_ep *et_be(int i)
{
	return et[i].ep->be[NTX_BE_SHM].be;
}

void et_progress(int rounds)
{
	for (int r = 0; r < rounds; r++)
		for (int i = 0; i < et_n; i++)
			ntx_ep_progress(et[i].ep);
}

ssize_t et_sendv(int from, int to, const struct iovec *iov, size_t cnt,
		 uint64_t tag, void *ctx, uint64_t flags)
{
	return ntx_proto_post_send(et[from].ep, iov, cnt, ntx_iov_len(iov, cnt),
				   et[from].addr[to], tag, 0, ctx, flags);
}

ssize_t et_send(int from, int to, const void *buf, size_t len, uint64_t tag,
		void *ctx, uint64_t flags)
{
	struct iovec iov = { (void *)buf, len };

	return et_sendv(from, to, &iov, 1, tag, ctx, flags);
}

ssize_t et_recvv(int at, fi_addr_t src, const struct iovec *iov, size_t cnt,
		 uint64_t tag, uint64_t ignore, void *ctx, uint64_t flags)
{
	return ntx_proto_post_recv(et[at].ep, iov, cnt, src, tag, ignore, ctx,
				   flags);
}

ssize_t et_recv(int at, fi_addr_t src, void *buf, size_t len, uint64_t tag,
		uint64_t ignore, void *ctx, uint64_t flags)
{
	struct iovec iov = { buf, len };

	return et_recvv(at, src, &iov, 1, tag, ignore, ctx, flags);
}

int et_cq_read(int at, struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	ssize_t n = ntx_cq_ring_read(&et[at].cq, e, 1, src);

	return n == 1;
}

int et_cq_err(int at, struct fi_cq_err_entry *e)
{
	struct ntx_cq *cq = &et[at].cq;
	struct ntx_cq_err *ce;

	if (ntx_list_empty(&cq->errs))
		return 0;
	ce = ntx_container_of(ntx_list_first(&cq->errs), struct ntx_cq_err,
			      entry);
	ntx_list_remove(&ce->entry);
	*e = ce->e;
	e->err_data = NULL;
	free(ce);
	return 1;
}

void et_cq_wait(int at, struct fi_cq_tagged_entry *e, fi_addr_t *src, int n)
{
	int got = 0;

	for (int round = 0; got < n && round < 1000; round++) {
		while (got < n &&
		       et_cq_read(at, &e[got], src ? &src[got] : NULL))
			got++;
		if (got < n)
			et_progress(1);
	}
	cr_assert_eq(got, n, "node %d: %d of %d completions", at, got, n);
}

int et_live_vcs(int i)
{
	struct ntx_list *it;
	int n = 0;

	ntx_list_foreach(&et[i].ep->vcs, it)
		n += ntx_container_of(it, struct ntx_vc, entry)->state !=
		     NTX_VC_ERROR;
	return n;
}

struct ntx_vc *et_vc_to(int from, int to)
{
	return ntx_idtab_get(&et[from].ep->vc_tab, et[from].addr[to]);
}
