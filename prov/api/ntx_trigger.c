/*
 * Endpoint aliases (fi_ep_alias) and triggered operations (FI_TRIGGER):
 * an RMA read or write, a send (tagged or not) or an atomic whose context
 * is a struct fi_triggered_context of type FI_TRIGGER_THRESHOLD waits in
 * its domain's list, its arguments copied, until its counter reaches the
 * threshold, then is posted as if just called (DESIGN §3, "Triggered
 * operations"). The list is looked at by the API's progress
 * calls (reading or waiting on a CQ or counter), with no lock held.
 */
#include "config.h"
#include <rdma/fi_atomic.h>
#include <rdma/fi_trigger.h>
#include <stdlib.h>

#include "ntx/ntx.h"

enum ntx_trig_kind { NTX_TRIG_RMA, NTX_TRIG_SEND, NTX_TRIG_ATOMIC };

struct ntx_trig {
	struct ntx_list entry;
	struct ntx_ep *ep;
	struct ntx_cntr *cntr;
	uint64_t threshold;
	enum ntx_trig_kind kind;
	uint8_t op;  /* RMA: NTX_OP_READ or _WRITE; ATOMIC: the function */
	size_t count, rcount;
	struct iovec iov[NTX_MAX_IOV];
	struct fi_rma_iov riov[NTX_MAX_IOV];
	fi_addr_t dest;
	uint64_t tag, data, flags;
	void *context;
	/* ATOMIC: the message and its arrays */
	struct fi_msg_atomic amsg;
	struct fi_ioc ioc[NTX_MAX_IOV], cmp[NTX_MAX_IOV], res[NTX_MAX_IOV];
	struct fi_rma_ioc rioc[NTX_MAX_IOV];
	size_t cmp_count, res_count;
};

/* The counter of a threshold trigger, if it is one of the domain's. */
static struct ntx_cntr *ntx_trig_cntr(struct ntx_ep *ep, void *context)
{
	struct fi_triggered_context *tc = context;
	struct fid_cntr *fc;
	struct ntx_cntr *c;

	if (!tc || tc->event_type != FI_TRIGGER_THRESHOLD)
		return NULL;
	fc = tc->trigger.threshold.cntr;
	if (!fc || fc->fid.fclass != FI_CLASS_CNTR)
		return NULL;
	c = ntx_container_of(fc, struct ntx_cntr, cntr);
	return c->domain == ep->domain ? c : NULL;
}

/* A trigger for the threshold context (its counter checked by the
 * caller), or NULL. */
static struct ntx_trig *ntx_trig_new(struct ntx_ep *ep, struct ntx_cntr *c,
				     enum ntx_trig_kind kind, void *context,
				     uint64_t flags)
{
	struct ntx_trig *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ep = ep;
	t->cntr = c;
	t->kind = kind;
	t->threshold = ((struct fi_triggered_context *)context)
			       ->trigger.threshold.threshold;
	t->context = context;
	t->flags = flags & ~FI_TRIGGER;
	return t;
}

/* Into the domain's list; posted at once if the threshold is reached. */
static ssize_t ntx_trig_queue(struct ntx_trig *t)
{
	struct ntx_domain *dom = t->ep->domain;

	ntx_ref_get(&t->cntr->ref); /* the counter outlives its triggers */
	pthread_mutex_lock(&dom->trig_lock);
	ntx_list_insert_tail(&dom->trig, &t->entry);
	atomic_fetch_add(&dom->ntrig, 1);
	pthread_mutex_unlock(&dom->trig_lock);
	ntx_trig_run(dom);
	return 0;
}

ssize_t ntx_trig_rma(struct ntx_ep *ep, uint8_t op, const struct iovec *iov,
		     size_t count, const struct fi_rma_iov *riov,
		     size_t rcount, fi_addr_t dest, uint64_t data,
		     void *context, uint64_t flags)
{
	struct ntx_cntr *c = ntx_trig_cntr(ep, context);
	struct ntx_trig *t;

	if (!c || (flags & FI_INJECT) || count > NTX_MAX_IOV ||
	    (count && !iov) || !rcount || rcount > NTX_MAX_IOV || !riov) {
		NTX_WARN(FI_LOG_EP_DATA, "triggered rma: needs a threshold "
			 "context on a counter of the domain, no FI_INJECT, "
			 "1 to %d iovecs\n", NTX_MAX_IOV);
		return -FI_EINVAL;
	}
	t = ntx_trig_new(ep, c, NTX_TRIG_RMA, context, flags);
	if (!t)
		return -FI_ENOMEM;
	t->op = op;
	t->count = count;
	t->rcount = rcount;
	t->dest = dest;
	t->data = data;
	if (count)
		memcpy(t->iov, iov, count * sizeof(*iov));
	memcpy(t->riov, riov, rcount * sizeof(*riov));
	return ntx_trig_queue(t);
}

ssize_t ntx_trig_send(struct ntx_ep *ep, const struct iovec *iov,
		      size_t count, fi_addr_t dest, uint64_t tag,
		      uint64_t data, void *context, uint64_t flags)
{
	struct ntx_cntr *c = ntx_trig_cntr(ep, context);
	struct ntx_trig *t;

	if (!c || (flags & FI_INJECT) || count > NTX_MAX_IOV ||
	    (count && !iov)) {
		NTX_WARN(FI_LOG_EP_DATA, "triggered send: needs a threshold "
			 "context on a counter of the domain, no FI_INJECT, "
			 "at most %d iovecs\n", NTX_MAX_IOV);
		return -FI_EINVAL;
	}
	t = ntx_trig_new(ep, c, NTX_TRIG_SEND, context, flags);
	if (!t)
		return -FI_ENOMEM;
	t->count = count;
	t->dest = dest;
	t->tag = tag;
	t->data = data;
	if (count)
		memcpy(t->iov, iov, count * sizeof(*iov));
	return ntx_trig_queue(t);
}

ssize_t ntx_trig_atomic(struct ntx_ep *ep, int fn,
			const struct fi_msg_atomic *m,
			const struct fi_ioc *cmp, size_t cmp_count,
			const struct fi_ioc *res, size_t res_count,
			uint64_t flags)
{
	struct ntx_cntr *c = ntx_trig_cntr(ep, m->context);
	struct ntx_trig *t;

	/* the operation and the counts were checked by the caller */
	if (!c || (flags & FI_INJECT) || m->iov_count > NTX_MAX_IOV ||
	    (m->iov_count && !m->msg_iov) || cmp_count > NTX_MAX_IOV ||
	    (cmp_count && !cmp) || res_count > NTX_MAX_IOV ||
	    (res_count && !res)) {
		NTX_WARN(FI_LOG_EP_DATA, "triggered atomic: needs a threshold "
			 "context on a counter of the domain, no FI_INJECT, "
			 "at most %d iovecs\n", NTX_MAX_IOV);
		return -FI_EINVAL;
	}
	t = ntx_trig_new(ep, c, NTX_TRIG_ATOMIC, m->context, flags);
	if (!t)
		return -FI_ENOMEM;
	t->op = (uint8_t)fn;
	t->amsg = *m;
	t->amsg.desc = NULL;
	if (m->iov_count)
		memcpy(t->ioc, m->msg_iov, m->iov_count * sizeof(*t->ioc));
	memcpy(t->rioc, m->rma_iov, m->rma_iov_count * sizeof(*t->rioc));
	t->amsg.msg_iov = m->iov_count ? t->ioc : NULL;
	t->amsg.rma_iov = t->rioc;
	if (cmp_count) /* memcpy takes no NULL, even for 0 bytes */
		memcpy(t->cmp, cmp, cmp_count * sizeof(*cmp));
	if (res_count)
		memcpy(t->res, res, res_count * sizeof(*res));
	t->cmp_count = cmp_count;
	t->res_count = res_count;
	return ntx_trig_queue(t);
}

/* The deferred call, made now. */
static ssize_t ntx_trig_post(struct ntx_trig *t)
{
	switch (t->kind) {
	case NTX_TRIG_SEND:
		return ntx_msg_post_send(t->ep, t->iov, t->count, t->dest,
					 t->tag, t->data, t->context,
					 t->flags);
	case NTX_TRIG_ATOMIC:
		return ntx_atomic_post(t->ep, t->op, &t->amsg,
				       t->cmp_count ? t->cmp : NULL,
				       t->cmp_count,
				       t->res_count ? t->res : NULL,
				       t->res_count, t->flags);
	default:
		return ntx_rma_start(t->ep, t->op, t->iov, t->count, t->riov,
				     t->rcount, t->dest, t->data, t->context,
				     t->flags, false);
	}
}

static void ntx_trig_free(struct ntx_domain *dom, struct ntx_trig *t)
{
	atomic_fetch_sub(&dom->ntrig, 1);
	ntx_ref_put(&t->cntr->ref);
	free(t);
}

/* Takes the first trigger whose counter reached its threshold. */
static struct ntx_trig *ntx_trig_take(struct ntx_domain *dom)
{
	struct ntx_trig *t = NULL;
	struct ntx_list *it;

	pthread_mutex_lock(&dom->trig_lock);
	ntx_list_foreach(&dom->trig, it) {
		struct ntx_trig *c = ntx_container_of(it, struct ntx_trig,
						      entry);

		if (atomic_load(&c->cntr->value) >= c->threshold) {
			ntx_list_remove(&c->entry);
			t = c;
			break;
		}
	}
	pthread_mutex_unlock(&dom->trig_lock);
	return t;
}

void ntx_trig_run_slow(struct ntx_domain *dom)
{
	struct ntx_list again;
	struct ntx_trig *t;
	ssize_t ret;

	ntx_list_init(&again);
	while ((t = ntx_trig_take(dom))) {
		ret = ntx_trig_post(t);
		if (ret == -FI_EAGAIN) { /* no room now: the next call */
			ntx_list_insert_tail(&again, &t->entry);
			continue;
		}
		if (ret)
			NTX_WARN(FI_LOG_EP_DATA, "triggered operation not posted: "
				 "%s\n", fi_strerror((int)-ret));
		ntx_trig_free(dom, t);
	}
	pthread_mutex_lock(&dom->trig_lock);
	while (!ntx_list_empty(&again)) {
		struct ntx_list *it = ntx_list_first(&again);

		ntx_list_remove(it);
		ntx_list_insert_tail(&dom->trig, it);
	}
	pthread_mutex_unlock(&dom->trig_lock);
}

void ntx_trig_purge(struct ntx_ep *ep)
{
	struct ntx_domain *dom = ep->domain;
	struct ntx_list *it, *tmp;

	pthread_mutex_lock(&dom->trig_lock);
	ntx_list_foreach_safe(&dom->trig, it, tmp) {
		struct ntx_trig *t = ntx_container_of(it, struct ntx_trig,
						      entry);

		if (t->ep != ep)
			continue;
		ntx_list_remove(&t->entry);
		ntx_trig_free(dom, t);
	}
	pthread_mutex_unlock(&dom->trig_lock);
}

/* ---- aliases --------------------------------------------------------------- */

static int ntx_alias_close(struct fid *fid)
{
	struct ntx_alias *a = ntx_container_of(fid, struct ntx_alias, ep.fid);

	ntx_ref_put(&a->real->ref);
	free(a);
	return 0;
}

static int ntx_alias_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	NTX_WARN(FI_LOG_EP_CTRL, "an alias shares its endpoint's bindings\n");
	return -FI_EINVAL;
}

static int ntx_alias_control(struct fid *fid, int command, void *arg)
{
	struct ntx_alias *a = ntx_container_of(fid, struct ntx_alias, ep.fid);
	uint64_t *flags = arg;

	if (command != FI_GETOPSFLAG && command != FI_SETOPSFLAG)
		return -FI_ENOSYS;
	if (!flags || ((*flags & FI_TRANSMIT) && (*flags & FI_RECV)))
		return -FI_EINVAL;
	if (command == FI_GETOPSFLAG)
		*flags = (*flags & FI_RECV) ? a->rx_op_flags : a->tx_op_flags;
	else if (*flags & FI_RECV)
		a->rx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
	else
		a->tx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
	return 0;
}

/* What takes a fid on the endpoint's tables goes to the endpoint. */
static ssize_t ntx_alias_cancel(fid_t fid, void *context)
{
	struct ntx_alias *a = ntx_container_of(fid, struct ntx_alias, ep.fid);

	return fi_cancel(&a->real->ep.fid, context);
}

int ntx_alias_getopt(fid_t fid, int level, int name, void *val,
			    size_t *len)
{
	struct ntx_alias *a = ntx_container_of(fid, struct ntx_alias, ep.fid);

	return fi_getopt(&a->real->ep.fid, level, name, val, len);
}

int ntx_alias_setopt(fid_t fid, int level, int name, const void *val,
			    size_t len)
{
	struct ntx_alias *a = ntx_container_of(fid, struct ntx_alias, ep.fid);

	return fi_setopt(&a->real->ep.fid, level, name, val, len);
}

ssize_t ntx_alias_rx_size_left(struct fid_ep *fep)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ep->ep.ops->rx_size_left(&ep->ep);
}

ssize_t ntx_alias_tx_size_left(struct fid_ep *fep)
{
	struct ntx_ep *ep = ntx_ep_of(fep);

	return ep->ep.ops->tx_size_left(&ep->ep);
}

static int ntx_alias_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct ntx_alias *a = ntx_container_of(fid, struct ntx_alias, ep.fid);

	return fi_getname(&a->real->ep.fid, addr, addrlen);
}

static int ntx_alias_setname(fid_t fid, void *addr, size_t addrlen)
{
	return -FI_EOPBADSTATE; /* an alias has its endpoint's name */
}

static struct fi_ops_ep ntx_alias_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ntx_alias_cancel,
	.getopt = ntx_alias_getopt,
	.setopt = ntx_alias_setopt,
	.tx_ctx = ntx_no_tx_ctx,
	.rx_ctx = ntx_no_rx_ctx,
	.rx_size_left = ntx_alias_rx_size_left,
	.tx_size_left = ntx_alias_tx_size_left,
};

static struct fi_ops_cm ntx_alias_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ntx_alias_setname,
	.getname = ntx_alias_getname,
	.getpeer = ntx_no_getpeer,
	.connect = ntx_no_connect,
	.listen = ntx_no_listen,
	.accept = ntx_no_accept,
	.reject = ntx_no_reject,
	.shutdown = ntx_no_shutdown,
	.join = ntx_no_join,
};

struct fi_ops ntx_alias_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_alias_close,
	.bind = ntx_alias_bind,
	.control = ntx_alias_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

int ntx_ep_alias(struct ntx_ep *ep, struct fi_alias *alias)
{
	uint64_t dir;
	struct ntx_alias *a;

	if (!alias || !alias->fid)
		return -FI_EINVAL;
	dir = alias->flags & (FI_TRANSMIT | FI_RECV);
	if (!dir || dir == (FI_TRANSMIT | FI_RECV)) {
		NTX_WARN(FI_LOG_EP_CTRL, "fi_ep_alias: FI_TRANSMIT or "
			 "FI_RECV\n");
		return -FI_EINVAL;
	}
	a = calloc(1, sizeof(*a));
	if (!a)
		return -FI_ENOMEM;
	a->ep = ep->ep; /* the endpoint's op tables, resolved to it */
	a->ep.fid.ops = &ntx_alias_fi_ops;
	a->ep.ops = &ntx_alias_ep_ops;
	a->ep.cm = &ntx_alias_cm_ops;
	a->real = ep;
	a->tx_op_flags = ep->tx_op_flags;
	a->rx_op_flags = ep->rx_op_flags;
	if (dir == FI_TRANSMIT)
		a->tx_op_flags = alias->flags & ~dir;
	else
		a->rx_op_flags = alias->flags & ~dir;
	ntx_ref_get(&ep->ref); /* the endpoint closes after its aliases */
	*alias->fid = &a->ep.fid;
	return 0;
}
