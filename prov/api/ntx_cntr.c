/*
 * Counters: success and error counts, add/set, and wait with a timeout.
 * Reading a counter drives manual progress.
 */
#include "config.h"
#include <sched.h>
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
	ntx_signal_raise(&c->sig);
	return 0;
}

static int ntx_cntr_set(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_store(&c->value, v);
	ntx_signal_raise(&c->sig);
	return 0;
}

static int ntx_cntr_adderr(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_fetch_add(&c->err, v);
	ntx_signal_raise(&c->sig);
	return 0;
}

static int ntx_cntr_seterr(struct fid_cntr *fc, uint64_t v)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);

	atomic_store(&c->err, v);
	ntx_signal_raise(&c->sig);
	return 0;
}

struct ntx_cntr_cond {
	struct ntx_cntr *c;
	uint64_t threshold, err0;
};

static bool ntx_cntr_ready(void *arg)
{
	struct ntx_cntr_cond *k = arg;

	return atomic_load(&k->c->value) >= k->threshold ||
	       atomic_load(&k->c->err) != k->err0;
}

static int ntx_cntr_wait(struct fid_cntr *fc, uint64_t threshold, int timeout)
{
	struct ntx_cntr *c = ntx_container_of(fc, struct ntx_cntr, cntr);
	uint64_t end = ntx_now_ns() + (uint64_t)(timeout < 0 ? 0 : timeout) *
						 1000000ull;
	uint64_t err0 = atomic_load(&c->err);

	struct ntx_cntr_cond cond = { c, threshold, err0 };

	for (;;) {
		uint64_t now;

		ntx_cntr_progress(c);
		if (atomic_load(&c->value) >= threshold)
			return 0;
		if (atomic_load(&c->err) != err0)
			return -FI_EAVAIL;
		now = ntx_now_ns();
		if (timeout >= 0 && now >= end)
			return -FI_ETIMEDOUT;
		/* without a wait object (FI_WAIT_NONE) there is nothing
		 * to sleep on: poll, yielding the CPU in between */
		if (c->wait_obj == FI_WAIT_YIELD || c->wait_obj == FI_WAIT_NONE)
			sched_yield();
		else
			ntx_scope_sleep(c->domain, &c->scope, &c->sig,
					ntx_cntr_ready,
					 &cond, timeout < 0 ? -1 :
					 (int)((end - now + 999999) / 1000000));
	}
}

static bool ntx_cntr_never(void *arg)
{
	return false; /* fi_trywait has no threshold to compare with */
}

int ntx_cntr_trywait(struct fid *fid)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);

	return ntx_scope_trywait(c->domain, &c->scope, &c->sig,
				 ntx_cntr_never, c);
}

static int ntx_cntr_close(struct fid *fid)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);

	if (atomic_load(&c->ref)) {
		NTX_WARN(FI_LOG_CNTR, "counter is still bound\n");
		return -FI_EBUSY;
	}
	if (c->wait_set)
		ntx_wait_detach(c->wait_set, &c->cntr.fid);
	ntx_domain_wait_set_close(c->domain, c->epfd);
	ntx_signal_close(&c->sig);
	ntx_scope_fini(&c->scope);
	ntx_ref_put(&c->domain->ref);
	free(c);
	return 0;
}

static int ntx_cntr_control(struct fid *fid, int command, void *arg)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);
	int ret;

	switch (command) {
	case FI_GETWAIT:
		if (c->wait_obj != FI_WAIT_FD || !arg)
			return -FI_ENODATA;
		ret = ntx_domain_wait_set(c->domain, &c->sig, &c->epfd);
		if (!ret)
			*(int *)arg = c->epfd;
		return ret;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*(enum fi_wait_obj *)arg = c->wait_obj;
		return 0;
	default:
		return -FI_ENOSYS;
	}
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

	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->events != FI_CNTR_EVENTS_COMP || attr->flags) {
		NTX_WARN(FI_LOG_CNTR, "counter attributes not supported\n");
		return -FI_ENOSYS;
	}
	switch (attr->wait_obj) {
	case FI_WAIT_NONE: case FI_WAIT_UNSPEC: case FI_WAIT_FD:
	case FI_WAIT_YIELD: case FI_WAIT_SET:
	/* FI_WAIT_MUTEX_COND: blocking calls sleep as with FI_WAIT_FD;
	 * ntx has no mutex and condition for FI_GETWAIT to give */
	case FI_WAIT_MUTEX_COND:
		break;
	default:
		NTX_WARN(FI_LOG_CNTR, "counter wait object %d not supported\n",
			 attr->wait_obj);
		return -FI_ENOSYS;
	}
	if (attr->wait_obj == FI_WAIT_SET && !attr->wait_set) {
		NTX_WARN(FI_LOG_CNTR, "FI_WAIT_SET without a wait_set\n");
		return -FI_EINVAL;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	if (ntx_signal_open(&c->sig)) {
		free(c);
		return -FI_ENOMEM;
	}
	c->wait_obj = attr->wait_obj == FI_WAIT_UNSPEC ? FI_WAIT_FD
						       : attr->wait_obj;
	c->domain = dom;
	c->epfd = -1;
	ntx_scope_init(&c->scope);
	c->cntr.fid.fclass = FI_CLASS_CNTR;
	c->cntr.fid.context = context;
	c->cntr.fid.ops = &ntx_cntr_fi_ops;
	c->cntr.ops = &ntx_cntr_ops;
	ntx_ref_get(&dom->ref);
	if (c->wait_obj == FI_WAIT_SET) {
		int ret = ntx_wait_attach(attr->wait_set, &c->cntr.fid);

		if (ret) {
			ntx_cntr_close(&c->cntr.fid);
			return ret;
		}
		c->wait_set = attr->wait_set;
	}
	*out = &c->cntr;
	return 0;
}
