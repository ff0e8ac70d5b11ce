/*
 * Event queues: a FIFO of events (and error events) with its own lock, an
 * eventfd for FI_WAIT_FD, and read/readerr/write/sread per fi_eq(3).
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

#define NTX_EQ_POLL_MS 1

struct ntx_eq_ev {
	struct ntx_list entry;
	uint32_t event;
	bool is_err;
	struct fi_eq_err_entry err;
	size_t len;
	uint8_t data[];
};

struct ntx_eq {
	struct fid_eq eq;
	struct ntx_fabric *fabric;
	pthread_mutex_t src_lock; /* sources; taken before endpoint locks */
	struct ntx_list sources;  /* struct ntx_eq_src: progressed on reads */
	pthread_mutex_t lock;
	struct ntx_list events;
	struct ntx_list reqs;     /* FI_CONNREQ events not yet queued */
	struct ntx_eq_ev *last_err;
	struct ntx_waitobj wait; /* sread, FI_GETWAIT, its signal */
};

/* eq->lock held: nothing to read, nor a request to queue. */
static bool ntx_eq_idle(struct ntx_eq *eq)
{
	return ntx_list_empty(&eq->events) && ntx_list_empty(&eq->reqs);
}

/* A connection request waits on eq->reqs for ntx_eq_progress, which
 * queues it only after polling the EQ's other endpoints (held). */
static void ntx_eq_queue(struct ntx_eq *eq, struct ntx_eq_ev *ev, bool held)
{
	pthread_mutex_lock(&eq->lock);
	ntx_list_insert_tail(held ? &eq->reqs : &eq->events, &ev->entry);
	ntx_signal_raise(&eq->wait.sig);
	pthread_mutex_unlock(&eq->lock);
}

static int ntx_eq_push(struct ntx_eq *eq, uint32_t event, const void *buf,
		       size_t len, int err, void *context, bool held)
{
	struct ntx_eq_ev *ev = calloc(1, sizeof(*ev) + len);

	if (!ev)
		return -FI_ENOMEM;
	ev->event = event;
	ev->len = len;
	if (len)
		memcpy(ev->data, buf, len);
	if (err) {
		ev->is_err = true;
		ev->err.context = context;
		ev->err.err = err;
		ev->err.prov_errno = err;
		if (buf && len >= sizeof(struct fi_eq_entry)) {
			ev->err.fid = ((const struct fi_eq_entry *)buf)->fid;
			ev->err.data = ((const struct fi_eq_entry *)buf)->data;
		}
	}
	ntx_eq_queue(eq, ev, held);
	return 0;
}

/* The provider's events; its connection requests are held (see
 * ntx_eq_progress), an application's fi_eq_write is not. */
int ntx_eq_report(struct fid_eq *feq, uint32_t event, const void *buf,
		  size_t len, int err, void *context)
{
	return ntx_eq_push(ntx_container_of(feq, struct ntx_eq, eq), event, buf,
			   len, err, context, event == FI_CONNREQ && !err);
}

int ntx_eq_report_err(struct fid_eq *feq, fid_t fid, int err,
		      const void *data, size_t len)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);
	struct ntx_eq_ev *ev = calloc(1, sizeof(*ev) + len);

	if (!ev)
		return -FI_ENOMEM;
	ev->is_err = true;
	ev->err.fid = fid;
	ev->err.context = fid ? fid->context : NULL;
	ev->err.err = err;
	ev->err.prov_errno = err;
	if (len) {
		memcpy(ev->data, data, len);
		ev->err.err_data = ev->data; /* valid until the next readerr */
		ev->err.err_data_size = len;
	}
	ntx_eq_queue(eq, ev, false);
	return 0;
}

void ntx_eq_src_add(struct fid_eq *feq, struct ntx_eq_src *src)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);

	pthread_mutex_lock(&eq->src_lock);
	ntx_list_insert_tail(&eq->sources, &src->entry);
	pthread_mutex_unlock(&eq->src_lock);
	ntx_signal_raise(&eq->wait.sig); /* a sleeping sread starts polling it */
}

void ntx_eq_src_del(struct fid_eq *feq, struct ntx_eq_src *src)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);

	pthread_mutex_lock(&eq->src_lock);
	ntx_list_remove(&src->entry);
	pthread_mutex_unlock(&eq->src_lock);
}

static bool ntx_eq_has_sources(struct ntx_eq *eq)
{
	bool any;

	pthread_mutex_lock(&eq->src_lock);
	any = !ntx_list_empty(&eq->sources);
	pthread_mutex_unlock(&eq->src_lock);
	return any;
}

/* Polls the sources that are (passive) or are not passive endpoints. */
static void ntx_eq_poll(struct ntx_eq *eq, bool passive)
{
	struct ntx_list *it;

	ntx_list_foreach(&eq->sources, it) {
		struct ntx_eq_src *src = ntx_container_of(it,
							  struct ntx_eq_src,
							  entry);
		if (src->passive == passive)
			ntx_ep_poll(src->ep);
	}
}

/* Manual control progress: reading the EQ progresses the endpoints whose
 * connection events it carries. A connection request is queued only
 * after the EQ's other endpoints were polled since it arrived, so that it
 * follows every event its sender caused before sending it: a client that
 * sent ESTAB on one connection, saw FI_CONNECTED and asked for the next
 * (fabtests' fi_multi_ep -e msg) is heard FI_CONNECTED first, as the
 * server of rdma_cm hears it. The ESTAB and the request ride different
 * VCs, and the request alone may be seen first (the passive endpoint was
 * polled first, or by another thread); the ESTAB, written before, shows
 * on the poll after. Passive endpoints are polled first, so that a
 * request seen now is queued now. */
static void ntx_eq_progress(struct ntx_eq *eq)
{
	struct ntx_list reqs;

	pthread_mutex_lock(&eq->src_lock);
	ntx_eq_poll(eq, true);
	ntx_list_init(&reqs);
	pthread_mutex_lock(&eq->lock);
	ntx_list_splice_tail(&reqs, &eq->reqs);
	pthread_mutex_unlock(&eq->lock);
	ntx_eq_poll(eq, false);
	pthread_mutex_lock(&eq->lock);
	ntx_list_splice_tail(&eq->events, &reqs);
	pthread_mutex_unlock(&eq->lock);
	pthread_mutex_unlock(&eq->src_lock);
}

static ssize_t ntx_eq_read(struct fid_eq *feq, uint32_t *event, void *buf,
			   size_t len, uint64_t flags)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);
	struct ntx_eq_ev *ev;
	ssize_t ret;

	if ((flags & ~FI_PEEK) || (len && !buf))
		return -FI_EINVAL;
	ntx_eq_progress(eq);
	pthread_mutex_lock(&eq->lock);
	if (ntx_list_empty(&eq->events)) {
		ret = -FI_EAGAIN;
		goto unlock;
	}
	ev = ntx_container_of(ntx_list_first(&eq->events), struct ntx_eq_ev,
			      entry);
	if (ev->is_err) {
		ret = -FI_EAVAIL;
		goto unlock;
	}
	if (len < ev->len) {
		ret = -FI_ETOOSMALL;
		goto unlock;
	}
	if (event)
		*event = ev->event;
	memcpy(buf, ev->data, ev->len);
	ret = (ssize_t)ev->len;
	if (!(flags & FI_PEEK)) {
		ntx_list_remove(&ev->entry);
		free(ev);
		if (ntx_eq_idle(eq))
			ntx_signal_drain(&eq->wait.sig);
	}
unlock:
	pthread_mutex_unlock(&eq->lock);
	return ret;
}

/* An application that passes a buffer gets the error data copied into
 * it; otherwise err_data points at the event's (fi_eq(3)). */
static void ntx_eq_copy_err(struct fi_eq_err_entry *buf,
			    const struct fi_eq_err_entry *e)
{
	void *user = buf->err_data;
	size_t room = buf->err_data_size;

	*buf = *e;
	if (user && room) {
		buf->err_data = user;
		buf->err_data_size = e->err_data_size < room ? e->err_data_size
							     : room;
		if (buf->err_data_size)
			memcpy(user, e->err_data, buf->err_data_size);
	}
}

static ssize_t ntx_eq_readerr(struct fid_eq *feq, struct fi_eq_err_entry *buf,
			      uint64_t flags)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);
	struct ntx_eq_ev *ev;
	ssize_t ret = -FI_EAGAIN;

	if (!buf || (flags & ~FI_PEEK))
		return -FI_EINVAL;
	pthread_mutex_lock(&eq->lock);
	if (ntx_list_empty(&eq->events))
		goto unlock;
	ev = ntx_container_of(ntx_list_first(&eq->events), struct ntx_eq_ev,
			      entry);
	if (!ev->is_err)
		goto unlock;
	ntx_eq_copy_err(buf, &ev->err);
	ret = sizeof(*buf);
	if (!(flags & FI_PEEK)) {
		ntx_list_remove(&ev->entry);
		free(eq->last_err);
		eq->last_err = ev;
		if (ntx_eq_idle(eq))
			ntx_signal_drain(&eq->wait.sig);
	}
unlock:
	pthread_mutex_unlock(&eq->lock);
	return ret;
}

static ssize_t ntx_eq_write(struct fid_eq *feq, uint32_t event,
			    const void *buf, size_t len, uint64_t flags)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);
	int ret;

	if ((len && !buf) || (flags & ~FI_PEEK))
		return -FI_EINVAL;
	ret = ntx_eq_push(eq, event, buf, len, 0, NULL, false);
	return ret ? ret : (ssize_t)len;
}

struct ntx_eq_sread {
	struct fid_eq *feq;
	uint32_t *event;
	void *buf;
	size_t len;
	uint64_t flags;
};

static bool ntx_eq_sread_done(void *arg, ssize_t *ret)
{
	struct ntx_eq_sread *r = arg;

	*ret = ntx_eq_read(r->feq, r->event, r->buf, r->len, r->flags);
	return *ret != -FI_EAGAIN;
}

static ssize_t ntx_eq_sread(struct fid_eq *feq, uint32_t *event, void *buf,
			    size_t len, int timeout, uint64_t flags)
{
	struct ntx_eq *eq = ntx_container_of(feq, struct ntx_eq, eq);
	struct ntx_eq_sread r = { feq, event, buf, len, flags };
	const struct ntx_waitobj_call call = {
		ntx_eq_sread_done, NULL, &r, -FI_EAGAIN };

	if (eq->wait.kind == FI_WAIT_NONE)
		return -FI_EINVAL;
	return ntx_waitobj_wait(&eq->wait, timeout, &call);
}

/* What an EQ sleeps on: its signal, whatever its wait object (its
 * FI_WAIT_YIELD sleeps too). With endpoints to progress it looks again
 * every millisecond. */
static void ntx_eq_sleep(struct ntx_waitobj *w, int timeout_ms,
			 bool (*ready)(void *arg), void *arg)
{
	struct ntx_eq *eq = ntx_container_of(w, struct ntx_eq, wait);

	if (ntx_eq_has_sources(eq) &&
	    (timeout_ms < 0 || timeout_ms > NTX_EQ_POLL_MS))
		timeout_ms = NTX_EQ_POLL_MS;
	ntx_signal_wait(&w->sig, timeout_ms);
}

static const struct ntx_waitobj_ops ntx_eq_wait_ops = {
	.sleep = ntx_eq_sleep,
	.fd = ntx_waitobj_signal_fd,
};

int ntx_eq_trywait(struct fid *fid)
{
	struct ntx_eq *eq = ntx_container_of(fid, struct ntx_eq, eq.fid);
	int ret = 0;

	pthread_mutex_lock(&eq->lock);
	if (!ntx_eq_idle(eq))
		ret = -FI_EAGAIN;
	else
		ntx_signal_drain(&eq->wait.sig);
	pthread_mutex_unlock(&eq->lock);
	return ret;
}

static const char *ntx_eq_strerror(struct fid_eq *feq, int prov_errno,
				   const void *err_data, char *buf, size_t len)
{
	return ntx_strerror(prov_errno, buf, len);
}

static int ntx_eq_close(struct fid *fid)
{
	struct ntx_eq *eq = ntx_container_of(fid, struct ntx_eq, eq.fid);
	struct ntx_list *it, *tmp;

	if (ntx_eq_has_sources(eq)) {
		NTX_WARN(FI_LOG_EQ, "EQ still bound to a MSG or passive "
			 "endpoint\n");
		return -FI_EBUSY;
	}
	ntx_list_splice_tail(&eq->events, &eq->reqs);
	ntx_list_foreach_safe(&eq->events, it, tmp)
		free(ntx_container_of(it, struct ntx_eq_ev, entry));
	free(eq->last_err);
	ntx_waitobj_fini(&eq->wait, &eq->eq.fid);
	pthread_mutex_destroy(&eq->lock);
	pthread_mutex_destroy(&eq->src_lock);
	ntx_ref_put(&eq->fabric->ref);
	free(eq);
	return 0;
}

static int ntx_eq_control(struct fid *fid, int command, void *arg)
{
	struct ntx_eq *eq = ntx_container_of(fid, struct ntx_eq, eq.fid);

	return ntx_waitobj_control(&eq->wait, command, arg);
}

static struct fi_ops ntx_eq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_eq_close,
	.bind = ntx_no_bind,
	.control = ntx_eq_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_eq ntx_eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = ntx_eq_read,
	.readerr = ntx_eq_readerr,
	.write = ntx_eq_write,
	.sread = ntx_eq_sread,
	.strerror = ntx_eq_strerror,
};

int ntx_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
		struct fid_eq **out, void *context)
{
	struct ntx_fabric *fab = ntx_container_of(fabric, struct ntx_fabric,
						  fab);
	struct ntx_eq *eq;
	int ret;

	if (!attr || !out)
		return -FI_EINVAL;
	ret = ntx_waitobj_check(attr->wait_obj, attr->wait_set, FI_LOG_EQ,
				"EQ");
	if (ret)
		return ret;
	if (attr->flags & ~FI_WRITE) {
		NTX_WARN(FI_LOG_EQ, "EQ flags not supported\n");
		return -FI_ENOSYS;
	}
	eq = calloc(1, sizeof(*eq));
	if (!eq)
		return -FI_ENOMEM;
	if (ntx_waitobj_init(&eq->wait, &ntx_eq_wait_ops, attr->wait_obj,
			     NULL, NULL)) {
		free(eq);
		return -FI_ENOMEM;
	}
	ntx_signal_arm(&eq->wait.sig); /* EQs are off the data path */
	pthread_mutex_init(&eq->lock, NULL);
	pthread_mutex_init(&eq->src_lock, NULL);
	ntx_list_init(&eq->events);
	ntx_list_init(&eq->reqs);
	ntx_list_init(&eq->sources);
	eq->fabric = fab;
	eq->eq.fid.fclass = FI_CLASS_EQ;
	eq->eq.fid.context = context;
	eq->eq.fid.ops = &ntx_eq_fi_ops;
	eq->eq.ops = &ntx_eq_ops;
	ntx_ref_get(&fab->ref);
	ret = ntx_waitobj_join(&eq->wait, attr->wait_set, &eq->eq.fid);
	if (ret) {
		ntx_eq_close(&eq->eq.fid);
		return ret;
	}
	*out = &eq->eq;
	return 0;
}
