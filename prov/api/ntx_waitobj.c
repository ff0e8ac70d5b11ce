/*
 * Wait objects (DESIGN §3, "Wait objects"): the one deadline-and-sleep loop
 * of fi_cq_sread, fi_cntr_wait, fi_eq_sread and fi_wait, FI_GETWAIT and
 * FI_GETWAITOBJ, and what a CQ or counter sleeps on. An object's own ops
 * say what it sleeps on; the loop never names a kind of object.
 */
#include "config.h"
#include <sched.h>

#include "ntx/ntx.h"

int ntx_waitobj_check(enum fi_wait_obj kind, const struct fid_wait *set,
		      enum fi_log_subsys sub, const char *what)
{
	switch (kind) {
	case FI_WAIT_NONE: case FI_WAIT_UNSPEC: case FI_WAIT_FD:
	case FI_WAIT_YIELD: case FI_WAIT_SET:
	/* FI_WAIT_MUTEX_COND: blocking calls sleep as with FI_WAIT_FD;
	 * ntx has no mutex and condition for FI_GETWAIT to give */
	case FI_WAIT_MUTEX_COND:
		break;
	default:
		NTX_WARN(sub, "%s wait object %d not supported\n", what, kind);
		return -FI_ENOSYS;
	}
	if (kind == FI_WAIT_SET && !set) {
		NTX_WARN(sub, "FI_WAIT_SET without a wait_set\n");
		return -FI_EINVAL;
	}
	return 0;
}

int ntx_waitobj_init(struct ntx_waitobj *w, const struct ntx_waitobj_ops *ops,
		     enum fi_wait_obj kind, struct ntx_domain *domain,
		     struct ntx_scope *scope)
{
	w->kind = kind == FI_WAIT_UNSPEC ? FI_WAIT_FD : kind;
	w->epfd = -1;
	w->wait_set = NULL;
	w->ops = ops;
	w->domain = domain;
	w->scope = scope;
	return ntx_signal_open(&w->sig);
}

int ntx_waitobj_init_fd(struct ntx_waitobj *w,
			const struct ntx_waitobj_ops *ops, int fd)
{
	if (fd < 0)
		return -FI_ENOMEM;
	w->kind = FI_WAIT_FD;
	w->sig.fd = -1;
	w->epfd = fd;
	w->wait_set = NULL;
	w->ops = ops;
	w->domain = NULL;
	w->scope = NULL;
	return 0;
}

int ntx_waitobj_join(struct ntx_waitobj *w, struct fid_wait *set,
		     struct fid *member)
{
	int ret;

	if (w->kind != FI_WAIT_SET)
		return 0;
	ret = ntx_wait_attach(set, member, w);
	if (!ret)
		w->wait_set = set;
	return ret;
}

void ntx_waitobj_fini(struct ntx_waitobj *w, struct fid *member)
{
	if (w->wait_set)
		ntx_wait_detach(w->wait_set, member);
	if (w->ops->close)
		w->ops->close(w);
	ntx_signal_close(&w->sig);
}

/* Milliseconds to the deadline, rounded up: -1 without one, 0 once it
 * has passed. */
static int ntx_waitobj_left(uint64_t end, int timeout_ms)
{
	uint64_t now;

	if (timeout_ms < 0)
		return -1;
	now = ntx_now_ns();
	if (now >= end)
		return 0;
	return (int)((end - now + 999999) / 1000000);
}

ssize_t ntx_waitobj_wait(struct ntx_waitobj *w, int timeout_ms,
			 const struct ntx_waitobj_call *c)
{
	uint64_t end = ntx_now_ns() +
		       (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
	ssize_t ret;
	int left;

	for (;;) {
		if (c->done(c->arg, &ret))
			return ret;
		left = ntx_waitobj_left(end, timeout_ms);
		if (!left)
			return c->expired;
		w->ops->sleep(w, left, c->ready, c->arg);
	}
}

int ntx_waitobj_control(struct ntx_waitobj *w, int command, void *arg)
{
	int fd, ret;

	switch (command) {
	case FI_GETWAIT:
		if (w->kind != FI_WAIT_FD || !arg)
			return -FI_ENODATA;
		ret = w->ops->fd(w, &fd);
		if (!ret)
			*(int *)arg = fd;
		return ret;
	case FI_GETWAITOBJ:
		if (!arg)
			return -FI_EINVAL;
		*(enum fi_wait_obj *)arg = w->kind;
		return 0;
	default:
		return -FI_ENOSYS;
	}
}

int ntx_waitobj_signal_fd(struct ntx_waitobj *w, int *fd)
{
	ntx_signal_arm(&w->sig);
	*fd = w->sig.fd;
	return 0;
}

/* Blocks without spinning (FI_WAIT_YIELD yields instead, as does
 * FI_WAIT_NONE, which has nothing to sleep on): the scope's back ends
 * are armed so that a peer's next doorbell also writes a wait fd. */
static void ntx_waitobj_scope_sleep(struct ntx_waitobj *w, int timeout_ms,
				    bool (*ready)(void *arg), void *arg)
{
	if (w->kind == FI_WAIT_YIELD || w->kind == FI_WAIT_NONE)
		sched_yield();
	else
		ntx_scope_sleep(w->domain, w->scope, &w->sig, ready, arg,
				timeout_ms);
}

/* The signal and every back end's wait fd of the domain, in one epoll
 * set that endpoints opened later join (ntx_domain_wait_set). */
static int ntx_waitobj_scope_fd(struct ntx_waitobj *w, int *fd)
{
	int ret = ntx_domain_wait_set(w->domain, &w->sig, &w->epfd);

	*fd = w->epfd;
	return ret;
}

static void ntx_waitobj_scope_close(struct ntx_waitobj *w)
{
	ntx_domain_wait_set_close(w->domain, w->epfd);
	w->epfd = -1;
}

const struct ntx_waitobj_ops ntx_waitobj_scope_ops = {
	.sleep = ntx_waitobj_scope_sleep,
	.fd = ntx_waitobj_scope_fd,
	.close = ntx_waitobj_scope_close,
};
