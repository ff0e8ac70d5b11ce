/*
 * Wait sets (fi_wait_open): CQs, counters and EQs opened with wait_obj
 * FI_WAIT_SET share one epoll fd (FI_GETWAIT), which holds each member's
 * own wait fd (a CQ's or counter's FI_GETWAIT set: its signal and its
 * domain's endpoint fds; an EQ's signal). fi_wait asks each member, as
 * fi_trywait does (progress, arm, re-check), and sleeps on the set while
 * none has anything: a CQ with an entry or an error, an EQ with an event,
 * a counter whose success or error count changed since fi_wait last
 * reported it.
 */
#include "config.h"
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ntx/ntx.h"

struct ntx_wait_item {
	struct fid *fid;
	struct ntx_waitobj *w; /* the member's: its fd is in the set */
	uint64_t seen; /* counter: success + error count last reported */
};

struct ntx_wait {
	struct fid_wait wait;
	struct ntx_fabric *fabric;
	pthread_mutex_t lock; /* the members */
	struct ntx_waitobj wo; /* over the set's epoll fd, wo.epfd */
	struct ntx_wait_item *items;
	size_t n, cap;
};

static struct fi_ops ntx_wait_fi_ops;

static uint64_t ntx_wait_cntr_events(struct fid *fid)
{
	struct ntx_cntr *c = ntx_container_of(fid, struct ntx_cntr, cntr.fid);

	return atomic_load(&c->value) + atomic_load(&c->err);
}

/* Progresses and arms one member: true when it has something. */
static bool ntx_wait_item_ready(struct ntx_wait_item *it)
{
	uint64_t now;

	switch (it->fid->fclass) {
	case FI_CLASS_CQ:
		return ntx_cq_trywait(it->fid) == -FI_EAGAIN;
	case FI_CLASS_EQ:
		return ntx_eq_trywait(it->fid) == -FI_EAGAIN;
	default:
		ntx_cntr_trywait(it->fid);
		now = ntx_wait_cntr_events(it->fid);
		if (now == it->seen)
			return false;
		it->seen = now;
		return true;
	}
}

/* Asks every member (none skipped: each is armed before we sleep). */
static bool ntx_wait_any_ready(struct ntx_wait *ws)
{
	bool ready = false;

	pthread_mutex_lock(&ws->lock);
	for (size_t i = 0; i < ws->n; i++)
		ready |= ntx_wait_item_ready(&ws->items[i]);
	pthread_mutex_unlock(&ws->lock);
	return ready;
}

static bool ntx_wait_done(void *arg, ssize_t *ret)
{
	*ret = 0;
	return ntx_wait_any_ready(arg);
}

static int ntx_wait_wait(struct fid_wait *fw, int timeout)
{
	struct ntx_wait *ws = ntx_container_of(fw, struct ntx_wait, wait);
	const struct ntx_waitobj_call call = {
		ntx_wait_done, NULL, ws, -FI_ETIMEDOUT };

	return (int)ntx_waitobj_wait(&ws->wo, timeout, &call);
}

/* What a wait set sleeps on: its epoll set, where a member armed by
 * ntx_wait_any_ready writes its fd on anything new. */
static void ntx_wait_set_sleep(struct ntx_waitobj *w, int timeout_ms,
			   bool (*ready)(void *arg), void *arg)
{
	struct epoll_event ev;

	epoll_wait(w->epfd, &ev, 1, timeout_ms);
}

static int ntx_wait_set_fd(struct ntx_waitobj *w, int *fd)
{
	*fd = w->epfd;
	return 0;
}

static void ntx_wait_set_close(struct ntx_waitobj *w)
{
	close(w->epfd);
	w->epfd = -1;
}

static const struct ntx_waitobj_ops ntx_wait_set_ops = {
	.sleep = ntx_wait_set_sleep,
	.fd = ntx_wait_set_fd,
	.close = ntx_wait_set_close,
};

int ntx_wait_trywait(struct fid *fid)
{
	struct ntx_wait *ws = ntx_container_of(fid, struct ntx_wait, wait.fid);

	return ntx_wait_any_ready(ws) ? -FI_EAGAIN : 0;
}

int ntx_wait_attach(struct fid_wait *fw, struct fid *member,
		    struct ntx_waitobj *w)
{
	struct ntx_wait *ws = ntx_container_of(fw, struct ntx_wait, wait);
	struct epoll_event ev = { .events = EPOLLIN };
	struct ntx_wait_item *it;
	int fd, ret = 0;

	if (!fw || fw->fid.fclass != FI_CLASS_WAIT ||
	    fw->fid.ops != &ntx_wait_fi_ops) {
		NTX_WARN(FI_LOG_CORE, "wait_set is not an ntx wait set\n");
		return -FI_EINVAL;
	}
	pthread_mutex_lock(&ws->lock);
	if (ws->n == ws->cap) {
		size_t cap = ws->cap ? 2 * ws->cap : 8;

		it = realloc(ws->items, cap * sizeof(*it));
		ret = it ? 0 : -FI_ENOMEM;
		if (it) {
			ws->items = it;
			ws->cap = cap;
		}
	}
	if (!ret)
		ret = w->ops->fd(w, &fd);
	if (!ret && epoll_ctl(ws->wo.epfd, EPOLL_CTL_ADD, fd, &ev))
		ret = -FI_ENOMEM;
	if (!ret)
		ws->items[ws->n++] = (struct ntx_wait_item){
			member, w, member->fclass == FI_CLASS_CNTR
					? ntx_wait_cntr_events(member) : 0 };
	pthread_mutex_unlock(&ws->lock);
	if (ret)
		NTX_WARN(FI_LOG_CORE, "wait set: member not added: %s\n",
			 fi_strerror(-ret));
	return ret;
}

void ntx_wait_detach(struct fid_wait *fw, struct fid *member)
{
	struct ntx_wait *ws = ntx_container_of(fw, struct ntx_wait, wait);
	int fd;

	pthread_mutex_lock(&ws->lock);
	for (size_t i = 0; i < ws->n; i++) {
		struct ntx_waitobj *w = ws->items[i].w;

		if (ws->items[i].fid != member)
			continue;
		if (!w->ops->fd(w, &fd))
			epoll_ctl(ws->wo.epfd, EPOLL_CTL_DEL, fd, NULL);
		ws->items[i] = ws->items[--ws->n];
		break;
	}
	pthread_mutex_unlock(&ws->lock);
}

static int ntx_wait_close(struct fid *fid)
{
	struct ntx_wait *ws = ntx_container_of(fid, struct ntx_wait, wait.fid);

	if (ws->n) {
		NTX_WARN(FI_LOG_CORE, "wait set still has %zu members\n",
			 ws->n);
		return -FI_EBUSY;
	}
	ntx_waitobj_fini(&ws->wo, NULL);
	pthread_mutex_destroy(&ws->lock);
	ntx_ref_put(&ws->fabric->ref);
	free(ws->items);
	free(ws);
	return 0;
}

static int ntx_wait_control(struct fid *fid, int command, void *arg)
{
	struct ntx_wait *ws = ntx_container_of(fid, struct ntx_wait, wait.fid);

	/* a set always has its fd: no argument is a bad one here */
	if (command == FI_GETWAIT && !arg)
		return -FI_EINVAL;
	return ntx_waitobj_control(&ws->wo, command, arg);
}

static struct fi_ops ntx_wait_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_wait_close,
	.bind = ntx_no_bind,
	.control = ntx_wait_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_wait ntx_wait_ops = {
	.size = sizeof(struct fi_ops_wait),
	.wait = ntx_wait_wait,
};

int ntx_wait_open(struct fid_fabric *fabric, struct fi_wait_attr *attr,
		  struct fid_wait **out)
{
	struct ntx_fabric *fab = ntx_container_of(fabric, struct ntx_fabric,
						  fab);
	struct ntx_wait *ws;
	int ret;

	if (!attr || !out || attr->flags ||
	    (attr->wait_obj != FI_WAIT_UNSPEC && attr->wait_obj != FI_WAIT_FD)) {
		NTX_WARN(FI_LOG_CORE, "wait sets are FI_WAIT_FD (or UNSPEC), "
			 "without flags\n");
		return attr && attr->wait_obj == FI_WAIT_MUTEX_COND
			       ? -FI_ENOSYS : -FI_EINVAL;
	}
	ws = calloc(1, sizeof(*ws));
	if (!ws)
		return -FI_ENOMEM;
	ret = ntx_waitobj_init_fd(&ws->wo, &ntx_wait_set_ops,
				  epoll_create1(EPOLL_CLOEXEC));
	if (ret) {
		free(ws);
		return ret;
	}
	pthread_mutex_init(&ws->lock, NULL);
	ws->fabric = fab;
	ws->wait.fid.fclass = FI_CLASS_WAIT;
	ws->wait.fid.ops = &ntx_wait_fi_ops;
	ws->wait.ops = &ntx_wait_ops;
	ntx_ref_get(&fab->ref);
	*out = &ws->wait;
	return 0;
}
