/*
 * Completion queues: every format, read/readfrom/readerr/sread/sreadfrom,
 * FI_SOURCE addresses and FI_SOURCE_ERR names in err_data. Entries are
 * never dropped: the ring grows when full. Reads drive manual progress.
 */
#include "config.h"
#include <sched.h>
#include <stdlib.h>

#include "ntx/ntx.h"

/* fi_cq_read and fi_cq_readfrom: one body, inlined into each, so that
 * the poll loop of a CQ pays no call of its own but the step from the
 * API function (ntx_cq_rest) to it. */
static inline __attribute__((always_inline)) ssize_t
ntx_cq_do_read(struct fid_cq *fcq, void *buf, size_t count, fi_addr_t *src)
{
	struct ntx_cq *cq = ntx_container_of(fcq, struct ntx_cq, cq);
	ssize_t ret;

	if (count && !buf)
		return -FI_EINVAL;
	/* one thread at a time reads this CQ: what waits in its ring
	 * (the completions of sends, written when they were posted, and of
	 * receives that found their message waiting), else progress writes
	 * new completions straight into buf */
	if (cq->domain->ep_lockless && count && ntx_list_empty(&cq->errs)) {
		bool lane = cq->format == FI_CQ_FORMAT_TAGGED && !src;
		size_t n = 0, got;

		/* what waits in the ring answers a read without progress,
		 * but never two in a row: every other read progresses, so
		 * that a reader that always finds its own sends' completions
		 * still drives its receives (Open MPI's MTL reads until
		 * -FI_EAGAIN anyway) */
		if (cq->count) {
			if (!cq->ring_only) {
				cq->ring_only = true;
				return ntx_cq_ring_read(cq, buf, count, src);
			}
			n = (size_t)ntx_cq_ring_read(cq, buf, count, src);
			if (n == count)
				return (ssize_t)n;
		}
		cq->ring_only = false;

		if (lane) {
			cq->dtag = (struct fi_cq_tagged_entry *)buf + n;
			cq->dtag_left = count - n;
		} else {
			cq->direct = (uint8_t *)buf + n * cq->esz;
			cq->direct_src = src ? src + n : NULL;
			cq->direct_cap = count - n;
			cq->direct_n = 0;
		}
		if (!cq->scope.whole_domain)
			ntx_scope_progress_lockless(&cq->scope);
		else
			ntx_scope_progress(cq->domain, &cq->scope);
		if (lane) {
			got = count - n - cq->dtag_left;
			cq->dtag_left = 0;
		} else {
			got = cq->direct_n;
			cq->direct = NULL;
		}
		ntx_trig_run(cq->domain);
		cq->read_found = got != 0;
		n += got;
		if (n)
			return (ssize_t)n;
		return ntx_list_empty(&cq->errs) ? -FI_EAGAIN : -FI_EAVAIL;
	}
	/* the thread-hot path: only this CQ's endpoints */
	ntx_scope_progress(cq->domain, &cq->scope);
	ntx_trig_run(cq->domain);
	ntx_cmutex_lock(cq->domain, &cq->lock);
	ret = ntx_cq_ring_read(cq, buf, count, src);
	ntx_cmutex_unlock(cq->domain, &cq->lock);
	return ret;
}

/* The read right after one whose progress found completions, with
 * nothing waiting in the ring: Open MPI's MTL reads until -FI_EAGAIN, and
 * a full poll there (about 130 instructions on the message's path) would
 * most likely find nothing. It answers at once; the next read polls
 * (DESIGN §3, "Progress"). Blocking reads always poll. */
static inline bool ntx_cq_rest(struct ntx_cq *cq, const void *buf,
			       size_t count)
{
	if (!cq->read_found)
		return false;
	cq->read_found = false;
	return !cq->count && buf && count && ntx_list_empty(&cq->errs);
}

/* A read whose poll would find nothing, told without making it: one
 * thread at a time uses the CQ (ep_lockless), it serves one endpoint,
 * nothing waits in its ring, no triggered operation is pending, and the
 * endpoint's progress would only look at back ends with no news
 * (ntx_ep_quiet). An idle poll then costs a few loads instead of the
 * whole poll, and a message that comes is seen sooner (DESIGN §3,
 * "Progress"). */
static inline bool ntx_cq_quiet(struct ntx_cq *cq, const void *buf,
				size_t count)
{
	struct ntx_ep *ep;

	/* lockless first: elsewhere other threads write what follows */
	if (!cq->domain->ep_lockless)
		return false;
	ep = cq->scope.only;
	return ep && ntx_ep_watching(ep) && !cq->count && buf && count &&
	       ntx_list_empty(&cq->errs) &&
	       !atomic_load_explicit(&cq->domain->ntrig,
				     memory_order_relaxed) &&
	       ntx_ep_quiet(ep);
}

/* A read that found nothing. Where FI_NTX_IDLE_YIELD asks for it (more
 * ranks on the host than CPUs), every so many such reads of a thread
 * give its CPU to whoever waits for one: a peer that spins on the same
 * CPU waiting for our answer otherwise waits for our time slice to end,
 * and a job of many small exchanges crawls. */
static __attribute__((noinline, cold)) ssize_t ntx_cq_idle_yield(void)
{
	static __thread int idle;

	if (++idle >= ntx_params.idle_yield) {
		idle = 0;
		sched_yield();
	}
	return -FI_EAGAIN;
}

static inline ssize_t ntx_cq_none(ssize_t ret)
{
	if (__builtin_expect(ret == -FI_EAGAIN && ntx_params.idle_yield, 0))
		return ntx_cq_idle_yield();
	return ret;
}

/* The reads' bodies, apart: the answer at once then needs no frame. */
static __attribute__((noinline)) ssize_t
ntx_cq_readfrom_poll(struct fid_cq *fcq, void *buf, size_t count,
		     fi_addr_t *src)
{
	return ntx_cq_none(ntx_cq_do_read(fcq, buf, count, src));
}

static __attribute__((noinline)) ssize_t
ntx_cq_read_poll(struct fid_cq *fcq, void *buf, size_t count)
{
	return ntx_cq_none(ntx_cq_do_read(fcq, buf, count, NULL));
}

static ssize_t ntx_cq_readfrom(struct fid_cq *fcq, void *buf, size_t count,
			       fi_addr_t *src)
{
	struct ntx_cq *cq = ntx_container_of(fcq, struct ntx_cq, cq);

	if (ntx_cq_rest(cq, buf, count) || ntx_cq_quiet(cq, buf, count))
		return ntx_cq_none(-FI_EAGAIN);
	return ntx_cq_readfrom_poll(fcq, buf, count, src);
}

static ssize_t ntx_cq_read(struct fid_cq *fcq, void *buf, size_t count)
{
	struct ntx_cq *cq = ntx_container_of(fcq, struct ntx_cq, cq);

	if (ntx_cq_rest(cq, buf, count) || ntx_cq_quiet(cq, buf, count))
		return ntx_cq_none(-FI_EAGAIN);
	return ntx_cq_read_poll(fcq, buf, count);
}

/* The error entry as the caller's API version lays it out: src_addr
 * (API 1.20) is written only for callers that know the field. */
static size_t ntx_cq_err_size(uint32_t api)
{
#if NTX_API_HEADERS >= FI_VERSION(1, 20)
	if (FI_VERSION_LT(api, FI_VERSION(1, 20)))
		return offsetof(struct fi_cq_err_entry, src_addr);
#endif
	(void)api;
	return sizeof(struct fi_cq_err_entry);
}

static ssize_t ntx_cq_readerr(struct fid_cq *fcq, struct fi_cq_err_entry *buf,
			      uint64_t flags)
{
	struct ntx_cq *cq = ntx_container_of(fcq, struct ntx_cq, cq);
	uint32_t api = cq->domain->fabric->fab.api_version;
	struct ntx_cq_err *e;
	void *user_data;
	size_t user_size;

	if (!buf || flags)
		return -FI_EINVAL;
	ntx_cmutex_lock(cq->domain, &cq->lock);
	if (ntx_list_empty(&cq->errs)) {
		ntx_cmutex_unlock(cq->domain, &cq->lock);
		return -FI_EAGAIN;
	}
	e = ntx_container_of(ntx_list_first(&cq->errs), struct ntx_cq_err,
			     entry);
	ntx_list_remove(&e->entry);
	free(cq->last_err);
	cq->last_err = e; /* err_data stays valid until the next read */
	if (!cq->count && ntx_list_empty(&cq->errs))
		ntx_signal_drain(&cq->wait.sig);
	/* copied under the lock: another thread's readerr frees e */
	user_data = buf->err_data;
	user_size = buf->err_data_size;
	memcpy(buf, &e->e, ntx_cq_err_size(api));
	if (FI_VERSION_GE(api, FI_VERSION(1, 5)) && user_size &&
	    e->e.err_data) {
		size_t n = user_size < e->e.err_data_size ? user_size
							  : e->e.err_data_size;
		memcpy(user_data, e->e.err_data, n);
		buf->err_data = user_data;
		buf->err_data_size = n;
	}
	ntx_cmutex_unlock(cq->domain, &cq->lock);
	return 1;
}

bool ntx_cq_pending(struct ntx_cq *cq)
{
	bool pending;

	ntx_cmutex_lock(cq->domain, &cq->lock);
	pending = cq->count || !ntx_list_empty(&cq->errs);
	ntx_cmutex_unlock(cq->domain, &cq->lock);
	return pending;
}

static bool ntx_cq_ready(void *arg)
{
	struct ntx_cq *cq = arg;

	return ntx_cq_pending(cq) || atomic_load(&cq->signaled);
}

struct ntx_cq_sread {
	struct ntx_cq *cq;
	void *buf;
	size_t count;
	fi_addr_t *src;
};

/* One try of a blocking read, always with progress: it must not sleep
 * on an entry that only waits to be polled. fi_cq_signal ends it. */
static bool ntx_cq_sread_done(void *arg, ssize_t *ret)
{
	struct ntx_cq_sread *r = arg;

	*ret = ntx_cq_do_read(&r->cq->cq, r->buf, r->count, r->src);
	return *ret != -FI_EAGAIN ||
	       atomic_exchange(&r->cq->signaled, false);
}

static bool ntx_cq_sread_ready(void *arg)
{
	return ntx_cq_ready(((struct ntx_cq_sread *)arg)->cq);
}

/* Sleeps on the CQ's scope (ntx_waitobj_scope_ops): its back ends are
 * armed so that a peer's next doorbell also writes a wait fd. */
static ssize_t ntx_cq_sreadfrom(struct fid_cq *fcq, void *buf, size_t count,
				fi_addr_t *src, const void *cond, int timeout)
{
	struct ntx_cq *cq = ntx_container_of(fcq, struct ntx_cq, cq);
	struct ntx_cq_sread r = { cq, buf, count, src };
	const struct ntx_waitobj_call call = {
		ntx_cq_sread_done, ntx_cq_sread_ready, &r, -FI_EAGAIN };

	if (cq->wait.kind == FI_WAIT_NONE)
		return -FI_EINVAL;
	return ntx_waitobj_wait(&cq->wait, timeout, &call);
}

static ssize_t ntx_cq_sread(struct fid_cq *fcq, void *buf, size_t count,
			    const void *cond, int timeout)
{
	return ntx_cq_sreadfrom(fcq, buf, count, NULL, cond, timeout);
}

static int ntx_cq_signal(struct fid_cq *fcq)
{
	struct ntx_cq *cq = ntx_container_of(fcq, struct ntx_cq, cq);

	atomic_store(&cq->signaled, true);
	ntx_signal_raise(&cq->wait.sig);
	return 0;
}

int ntx_cq_trywait(struct fid *fid)
{
	struct ntx_cq *cq = ntx_container_of(fid, struct ntx_cq, cq.fid);

	return ntx_scope_trywait(cq->domain, &cq->scope, &cq->wait.sig,
				 ntx_cq_ready, cq);
}

static const char *ntx_cq_strerror(struct fid_cq *fcq, int prov_errno,
				   const void *err_data, char *buf, size_t len)
{
	return ntx_strerror(prov_errno, buf, len);
}

static int ntx_cq_close(struct fid *fid)
{
	struct ntx_cq *cq = ntx_container_of(fid, struct ntx_cq, cq.fid);
	struct ntx_list *it, *tmp;

	if (atomic_load(&cq->ref)) {
		NTX_WARN(FI_LOG_CQ, "CQ is still bound to an endpoint\n");
		return -FI_EBUSY;
	}
	ntx_list_foreach_safe(&cq->errs, it, tmp)
		free(ntx_container_of(it, struct ntx_cq_err, entry));
	free(cq->last_err);
	ntx_waitobj_fini(&cq->wait, &cq->cq.fid);
	ntx_ref_put(&cq->domain->ref);
	free(cq->ring);
	ntx_scope_fini(&cq->scope);
	pthread_mutex_destroy(&cq->lock);
	free(cq);
	return 0;
}

static int ntx_cq_control(struct fid *fid, int command, void *arg)
{
	struct ntx_cq *cq = ntx_container_of(fid, struct ntx_cq, cq.fid);

	return ntx_waitobj_control(&cq->wait, command, arg);
}

static struct fi_ops ntx_cq_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_cq_close,
	.bind = ntx_no_bind,
	.control = ntx_cq_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_cq ntx_cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = ntx_cq_read,
	.readfrom = ntx_cq_readfrom,
	.readerr = ntx_cq_readerr,
	.sread = ntx_cq_sread,
	.sreadfrom = ntx_cq_sreadfrom,
	.signal = ntx_cq_signal,
	.strerror = ntx_cq_strerror,
};

int ntx_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
		struct fid_cq **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_cq *cq;
	int ret;

	if (!attr || !out)
		return -FI_EINVAL;
	if (attr->format != FI_CQ_FORMAT_UNSPEC &&
	    !ntx_cq_entry_size(attr->format)) {
		NTX_WARN(FI_LOG_CQ, "CQ format %d not supported\n",
			 attr->format);
		return -FI_ENOSYS;
	}
	ret = ntx_waitobj_check(attr->wait_obj, attr->wait_set, FI_LOG_CQ,
				"CQ");
	if (ret)
		return ret;
	if (attr->wait_cond != FI_CQ_COND_NONE ||
	    (attr->flags & ~FI_AFFINITY)) {
		NTX_WARN(FI_LOG_CQ, "CQ wait condition/flags not supported\n");
		return -FI_ENOSYS;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return -FI_ENOMEM;
	cq->format = attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_CONTEXT
							 : attr->format;
	cq->esz = ntx_cq_entry_size(cq->format);
	cq->cap = attr->size ? attr->size : ntx_params.cq_size;
	cq->ring = calloc(cq->cap, sizeof(*cq->ring));
	ret = cq->ring ? ntx_waitobj_init(&cq->wait, &ntx_waitobj_scope_ops,
					  attr->wait_obj, dom, &cq->scope)
		       : -FI_ENOMEM;
	if (ret) {
		free(cq->ring);
		free(cq);
		return ret;
	}
	ntx_list_init(&cq->errs);
	pthread_mutex_init(&cq->lock, NULL);
	ntx_scope_init(&cq->scope);
	cq->domain = dom;
	cq->cq.fid.fclass = FI_CLASS_CQ;
	cq->cq.fid.context = context;
	cq->cq.fid.ops = &ntx_cq_fi_ops;
	cq->cq.ops = &ntx_cq_ops;
	ntx_ref_get(&dom->ref);
	ret = ntx_waitobj_join(&cq->wait, attr->wait_set, &cq->cq.fid);
	if (ret) {
		ntx_cq_close(&cq->cq.fid);
		return ret;
	}
	*out = &cq->cq;
	return 0;
}
