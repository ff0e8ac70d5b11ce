/*
 * Counters: success and error counts, add/set, and wait with a timeout.
 * Reading a counter drives manual progress.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

static void ntx_cntr_progress(struct ntx_cntr *c)
{
	ntx_scope_progress(c->domain, &c->scope);
	ntx_trig_run(c->domain);
}

static uint64_t ntx_cntr_read(struct fid_cntr *fc)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	ntx_cntr_progress(c);
	return atomic_load(&c->value);
}

static uint64_t ntx_cntr_readerr(struct fid_cntr *fc)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	ntx_cntr_progress(c);
	return atomic_load(&c->err);
}

static int ntx_cntr_add(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_fetch_add(&c->value, v);
	ntx_signal_raise(&c->wait.sig);
	return 0;
}

static int ntx_cntr_set(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_store(&c->value, v);
	ntx_signal_raise(&c->wait.sig);
	return 0;
}

static int ntx_cntr_adderr(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_fetch_add(&c->err, v);
	ntx_signal_raise(&c->wait.sig);
	return 0;
}

static int ntx_cntr_seterr(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_store(&c->err, v);
	ntx_signal_raise(&c->wait.sig);
	return 0;
}

struct ntx_cntr_cond {
	struct ntx_cntr *c;
	uint64_t threshold, err0;
};

/* The threshold reached (0) or an error counted since the wait began
 * (-FI_EAVAIL); checked after progress, and again once armed. */
static bool ntx_cntr_ready_ret(struct ntx_cntr_cond *k, ssize_t *ret)
{
	if (atomic_load(&k->c->value) >= k->threshold)
		*ret = 0;
	else if (atomic_load(&k->c->err) != k->err0)
		*ret = -FI_EAVAIL;
	else
		return false;
	return true;
}

static bool ntx_cntr_ready(void *arg)
{
	ssize_t ret;

	return ntx_cntr_ready_ret(arg, &ret);
}

static bool ntx_cntr_wait_done(void *arg, ssize_t *ret)
{
	struct ntx_cntr_cond *k = arg;

	ntx_cntr_progress(k->c);
	return ntx_cntr_ready_ret(k, ret);
}

/* Sleeps on the counter's scope (ntx_waitobj_scope_ops); without a wait
 * object (FI_WAIT_NONE) there is nothing to sleep on, and it polls,
 * yielding the CPU in between. */
static int ntx_cntr_wait(struct fid_cntr *fc, uint64_t threshold, int timeout)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);
	struct ntx_cntr_cond cond = { c, threshold, atomic_load(&c->err) };
	const struct ntx_waitobj_call call = {
		ntx_cntr_wait_done, ntx_cntr_ready, &cond, -FI_ETIMEDOUT };

	return (int)ntx_waitobj_wait(&c->wait, timeout, &call);
}

static bool ntx_cntr_never(void *arg)
{
	return false; /* fi_trywait has no threshold to compare with */
}

int ntx_cntr_trywait(struct fid *fid)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);

	return ntx_scope_trywait(c->domain, &c->scope, &c->wait.sig,
				 ntx_cntr_never, c);
}

static int ntx_cntr_close(struct fid *fid)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);

	if (atomic_load(&c->ref)) {
		NTX_WARN(FI_LOG_CNTR, "counter is still bound\n");
		return -FI_EBUSY;
	}
	ntx_waitobj_fini(&c->wait, &c->cntr.fid);
	ntx_scope_fini(&c->scope);
	ntx_ref_put(&c->domain->ref);
	free(c);
	return 0;
}

static int ntx_cntr_control(struct fid *fid, int command, void *arg)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);

	return ntx_waitobj_control(&c->wait, command, arg);
}

static struct fi_ops ntx_cntr_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_cntr_close,
	.bind = ntx_no_bind,
	.control = ntx_cntr_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_cntr ntx_cntr_ops = {
	.size = sizeof(struct fi_ops_cntr),
	.read = ntx_cntr_read,
	.readerr = ntx_cntr_readerr,
	.add = ntx_cntr_add,
	.set = ntx_cntr_set,
	.wait = ntx_cntr_wait,
	.adderr = ntx_cntr_adderr,
	.seterr = ntx_cntr_seterr,
};

int ntx_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
		  struct fid_cntr **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_cntr *c;
	int ret;

	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->events != FI_CNTR_EVENTS_COMP || attr->flags) {
		NTX_WARN(FI_LOG_CNTR, "counter attributes not supported\n");
		return -FI_ENOSYS;
	}
	ret = ntx_waitobj_check(attr->wait_obj, attr->wait_set, FI_LOG_CNTR,
				"counter");
	if (ret)
		return ret;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	if (ntx_waitobj_init(&c->wait, &ntx_waitobj_scope_ops, attr->wait_obj,
			     dom, &c->scope)) {
		free(c);
		return -FI_ENOMEM;
	}
	c->domain = dom;
	ntx_scope_init(&c->scope);
	c->cntr.fid.fclass = FI_CLASS_CNTR;
	c->cntr.fid.context = context;
	c->cntr.fid.ops = &ntx_cntr_fi_ops;
	c->cntr.ops = &ntx_cntr_ops;
	ntx_ref_get(&dom->ref);
	ret = ntx_waitobj_join(&c->wait, attr->wait_set, &c->cntr.fid);
	if (ret) {
		ntx_cntr_close(&c->cntr.fid);
		return ret;
	}
	*out = &c->cntr;
	return 0;
}
