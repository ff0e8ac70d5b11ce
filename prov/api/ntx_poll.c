/*
 * Poll sets (fi_poll_open): CQs and counters of one domain checked in one
 * call. fi_poll progresses each member's endpoints, as reading it would,
 * and gives the context of every CQ that holds an entry or an error and
 * of every counter whose success or error count changed since the last
 * fi_poll that reported it (or since it joined the set). Members are held (their ref): a CQ or counter
 * in a set cannot close until fi_poll_del takes it out.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

struct ntx_poll_item {
	struct fid *fid;
	uint64_t seen; /* counter: success + error count last reported */
};

struct ntx_poll {
	struct fid_poll poll;
	struct ntx_domain *domain;
	pthread_mutex_t lock; /* the members */
	struct ntx_poll_item *items;
	size_t n, cap;
};

static atomic_int *ntx_poll_ref(struct fid *fid)
{
	if (fid->fclass == FI_CLASS_CQ)
		return &ntx_container_of(fid, struct ntx_cq, cq.fid)->ref;
	return &ntx_container_of(fid, struct ntx_cntr, cntr.fid)->ref;
}

static struct ntx_domain *ntx_poll_member_domain(struct fid *fid)
{
	if (fid->fclass == FI_CLASS_CQ)
		return ntx_container_of(fid, struct ntx_cq, cq.fid)->domain;
	return ntx_container_of(fid, struct ntx_cntr, cntr.fid)->domain;
}

static bool ntx_poll_cq_ready(struct ntx_cq *cq)
{
	ntx_scope_progress(cq->domain, &cq->scope);
	return ntx_cq_pending(cq);
}

static uint64_t ntx_poll_cntr_events(struct ntx_cntr *c)
{
	return atomic_load(&c->value) + atomic_load(&c->err);
}

/* Progress one member; true when it has something to report. */
static bool ntx_poll_item_ready(struct ntx_poll_item *it)
{
	struct ntx_cntr *c;
	uint64_t now;

	if (it->fid->fclass == FI_CLASS_CQ)
		return ntx_poll_cq_ready(ntx_container_of(it->fid,
							  struct ntx_cq,
							  cq.fid));
	c = ntx_container_of(it->fid, struct ntx_cntr, cntr.fid);
	ntx_scope_progress(c->domain, &c->scope);
	now = ntx_poll_cntr_events(c);
	if (now == it->seen)
		return false;
	it->seen = now;
	return true;
}

static int ntx_poll_poll(struct fid_poll *fp, void **context, int count)
{
	struct ntx_poll *ps = ntx_container_of(fp, struct ntx_poll, poll);
	int n = 0;

	if (count < 0 || (count && !context))
		return -FI_EINVAL;
	pthread_mutex_lock(&ps->lock);
	for (size_t i = 0; i < ps->n && n < count; i++)
		if (ntx_poll_item_ready(&ps->items[i]))
			context[n++] = ps->items[i].fid->context;
	pthread_mutex_unlock(&ps->lock);
	return n;
}

static int ntx_poll_add(struct fid_poll *fp, struct fid *fid, uint64_t flags)
{
	struct ntx_poll *ps = ntx_container_of(fp, struct ntx_poll, poll);
	int ret = 0;

	if (!fid || flags ||
	    (fid->fclass != FI_CLASS_CQ && fid->fclass != FI_CLASS_CNTR))
		return -FI_EINVAL;
	if (ntx_poll_member_domain(fid) != ps->domain)
		return -FI_EINVAL; /* progress is per domain */
	pthread_mutex_lock(&ps->lock);
	for (size_t i = 0; i < ps->n; i++)
		if (ps->items[i].fid == fid)
			ret = -FI_EALREADY;
	if (!ret && ps->n == ps->cap) {
		size_t cap = ps->cap ? 2 * ps->cap : 8;
		void *p = realloc(ps->items, cap * sizeof(*ps->items));

		if (p) {
			ps->items = p;
			ps->cap = cap;
		} else {
			ret = -FI_ENOMEM;
		}
	}
	if (!ret) {
		struct ntx_poll_item *it = &ps->items[ps->n++];

		/* a counter reports what changes once it is in the set */
		it->fid = fid;
		it->seen = fid->fclass == FI_CLASS_CNTR ?
			   ntx_poll_cntr_events(ntx_container_of(
				   fid, struct ntx_cntr, cntr.fid)) : 0;
		ntx_ref_get(ntx_poll_ref(fid));
	}
	pthread_mutex_unlock(&ps->lock);
	return ret;
}

static int ntx_poll_del(struct fid_poll *fp, struct fid *fid, uint64_t flags)
{
	struct ntx_poll *ps = ntx_container_of(fp, struct ntx_poll, poll);
	int ret = -FI_ENOENT;

	if (flags)
		return -FI_EINVAL;
	pthread_mutex_lock(&ps->lock);
	for (size_t i = 0; i < ps->n; i++) {
		if (ps->items[i].fid != fid)
			continue;
		ntx_ref_put(ntx_poll_ref(fid));
		ps->items[i] = ps->items[--ps->n];
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&ps->lock);
	return ret;
}

static int ntx_poll_close(struct fid *fid)
{
	struct ntx_poll *ps = ntx_container_of(fid, struct ntx_poll,
					       poll.fid);

	for (size_t i = 0; i < ps->n; i++)
		ntx_ref_put(ntx_poll_ref(ps->items[i].fid));
	ntx_ref_put(&ps->domain->ref);
	pthread_mutex_destroy(&ps->lock);
	free(ps->items);
	free(ps);
	return 0;
}

static struct fi_ops ntx_poll_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_poll_close,
	.bind = ntx_no_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_poll ntx_poll_ops = {
	.size = sizeof(struct fi_ops_poll),
	.poll = ntx_poll_poll,
	.poll_add = ntx_poll_add,
	.poll_del = ntx_poll_del,
};

int ntx_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr,
		  struct fid_poll **pollset)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_poll *ps;

	if (!pollset || (attr && attr->flags))
		return -FI_EINVAL;
	ps = calloc(1, sizeof(*ps));
	if (!ps)
		return -FI_ENOMEM;
	ps->poll.fid.fclass = FI_CLASS_POLL;
	ps->poll.fid.ops = &ntx_poll_fi_ops;
	ps->poll.ops = &ntx_poll_ops;
	ps->domain = dom;
	pthread_mutex_init(&ps->lock, NULL);
	ntx_ref_get(&dom->ref);
	*pollset = &ps->poll;
	return 0;
}
