/* Wait sets through the public API: CQs, counters and EQs opened with
 * FI_WAIT_SET, fi_wait, fi_trywait and the FI_GETWAIT fd. */
#include <criterion/criterion.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

T_DEPRECATED_BEGIN /* the whole file tests wait sets */

#define WAIT_MS 20000

struct wctx {
	struct tctx t;
	struct fid_wait *ws;
	struct fid_eq *eq;
};

/* An endpoint whose CQ and receive counter are in one wait set, with an
 * EQ (FI_WRITE) in it too. */
static int w_open(struct wctx *w)
{
	struct fi_wait_attr wa = { .wait_obj = FI_WAIT_FD };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = FI_WAIT_SET };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP,
				   .wait_obj = FI_WAIT_SET };
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_SET, .flags = FI_WRITE };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct tctx *t = &w->t;
	struct fi_info *h = t_hints(FI_MSG);
	int ret;

	memset(w, 0, sizeof(*w));
	ret = fi_getinfo(T_VERSION, NULL, NULL, 0, h, &t->fi);
	fi_freeinfo(h);
	if (ret || (ret = fi_fabric(t->fi->fabric_attr, &t->fab, NULL)) ||
	    (ret = fi_wait_open(t->fab, &wa, &w->ws)))
		return ret;
	ca.wait_set = na.wait_set = ea.wait_set = w->ws;
	if ((ret = fi_domain(t->fab, t->fi, &t->dom, NULL)) ||
	    (ret = fi_cq_open(t->dom, &ca, &t->cq, NULL)) ||
	    (ret = fi_cntr_open(t->dom, &na, &t->cntr, NULL)) ||
	    (ret = fi_eq_open(t->fab, &ea, &w->eq, NULL)) ||
	    (ret = fi_av_open(t->dom, &aa, &t->av, NULL)) ||
	    (ret = fi_endpoint(t->dom, t->fi, &t->ep, NULL)) ||
	    (ret = fi_ep_bind(t->ep, &t->av->fid, 0)) ||
	    (ret = fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV)) ||
	    (ret = fi_ep_bind(t->ep, &t->cntr->fid, FI_RECV)))
		return ret;
	return fi_enable(t->ep);
}

static void w_close(struct wctx *w)
{
	struct fid_wait *ws = w->ws;

	if (w->eq)
		fi_close(&w->eq->fid);
	t_close(&w->t);
	if (ws)
		cr_assert_eq(fi_close(&ws->fid), 0, "the set is empty now");
}

static int child_send(int sock)
{
	struct tctx t;
	fi_addr_t peer;

	CHK(t_open(&t, FI_MSG) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(t_sync(sock) == 0); /* the parent waits from now on */
	CHK(fi_send(t.ep, "wake", 5, NULL, peer, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

/* fi_wait sleeps until a peer's message completes a receive: the CQ and
 * the receive counter then have something, and fi_wait says so again
 * only for what is new. */
Test(wait, fi_wait_wakes_on_a_peers_message)
{
	struct fi_cq_tagged_entry e;
	char buf[8] = "";
	struct wctx w;
	fi_addr_t peer;
	uint64_t t0;
	int sock;
	pid_t pid = t_fork(&sock, child_send);

	cr_assert_eq(w_open(&w), 0);
	cr_assert_eq(t_xchg_name(&w.t, sock, &peer), 0);
	cr_assert_eq(fi_recv(w.t.ep, buf, sizeof(buf), NULL, peer, NULL), 0);
	t0 = t_ms();
	cr_assert_eq(fi_wait(w.ws, 50), -FI_ETIMEDOUT);
	cr_assert_geq(t_ms() - t0, 50);
	cr_assert_eq(t_sync(sock), 0);
	cr_assert_eq(fi_wait(w.ws, WAIT_MS), 0);
	cr_assert_eq(fi_cq_read(w.t.cq, &e, 1), 1);
	cr_assert_str_eq(buf, "wake");
	cr_assert_eq(fi_cntr_read(w.t.cntr), 1);
	/* the counter's change was reported and the CQ is empty now */
	cr_assert_eq(fi_wait(w.ws, 0), -FI_ETIMEDOUT);
	cr_assert_eq(t_sync(sock), 0);
	w_close(&w);
	cr_assert_eq(t_join(pid), 0);
}

/* The FI_GETWAIT fd turns readable when an EQ of the set gets an event
 * after fi_trywait said the set was empty. */
Test(wait, getwait_fd_turns_readable_on_an_eq_event)
{
	struct fi_eq_entry ev = { .data = 7 };
	struct wctx w;
	struct pollfd p = { .events = POLLIN };
	struct fid *fids[1];
	uint32_t event;

	cr_assert_eq(w_open(&w), 0);
	fids[0] = &w.ws->fid;
	cr_assert_eq(fi_control(&w.ws->fid, FI_GETWAIT, &p.fd), 0);
	cr_assert_eq(fi_trywait(w.t.fab, fids, 1), 0);
	cr_assert_eq(poll(&p, 1, 0), 0, "nothing yet");
	cr_assert_eq(fi_eq_write(w.eq, FI_NOTIFY, &ev, sizeof(ev), 0),
		     sizeof(ev));
	cr_assert_eq(poll(&p, 1, WAIT_MS), 1);
	cr_assert_eq(fi_trywait(w.t.fab, fids, 1), -FI_EAGAIN);
	cr_assert_eq(fi_wait(w.ws, 0), 0);
	cr_assert_eq(fi_eq_read(w.eq, &event, &ev, sizeof(ev), 0),
		     sizeof(ev));
	cr_assert_eq(fi_wait(w.ws, 0), -FI_ETIMEDOUT);
	w_close(&w);
}

Test(wait, bad_wait_set_arguments_are_refused)
{
	struct fi_wait_attr wa = { .wait_obj = FI_WAIT_MUTEX_COND };
	struct fi_cq_attr ca = { .wait_obj = FI_WAIT_SET };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP,
				   .wait_obj = FI_WAIT_SET };
	struct fid_wait *bad;
	struct fid_cntr *c;
	struct fid_cq *cq;
	struct wctx w;

	cr_assert_eq(w_open(&w), 0);
	cr_assert_eq(fi_wait_open(w.t.fab, &wa, &bad), -FI_ENOSYS);
	wa.wait_obj = FI_WAIT_FD;
	wa.flags = 1;
	cr_assert_eq(fi_wait_open(w.t.fab, &wa, &bad), -FI_EINVAL);
	cr_assert_eq(fi_cq_open(w.t.dom, &ca, &cq, NULL), -FI_EINVAL,
		     "FI_WAIT_SET without a set");
	na.wait_set = (struct fid_wait *)w.t.cq; /* not a wait set */
	cr_assert_eq(fi_cntr_open(w.t.dom, &na, &c, NULL), -FI_EINVAL);
	cr_assert_eq(fi_close(&w.ws->fid), -FI_EBUSY, "members remain");
	w_close(&w);
}

static void *eq_write_late(void *arg)
{
	struct fi_eq_entry ev = { .data = 9 };

	usleep(100 * 1000); /* the reader is asleep in fi_eq_sread by now */
	if (fi_eq_write(arg, FI_NOTIFY, &ev, sizeof(ev), 0) != sizeof(ev))
		return arg;
	return NULL;
}

/* FI_WAIT_MUTEX_COND, as libfabric's own providers take it (fabtests'
 * complex set opens EQs with it): fi_eq_sread sleeps until another
 * thread writes an event; CQs and counters take it and FI_WAIT_YIELD
 * too, and their blocking calls time out. */
Test(wait, mutex_cond_eq_sread_is_woken_by_an_event)
{
	static const enum fi_wait_obj objs[] = { FI_WAIT_MUTEX_COND,
						 FI_WAIT_YIELD };
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_MUTEX_COND,
				 .flags = FI_WRITE };
	struct fi_eq_entry ev = { 0 };
	enum fi_wait_obj got;
	struct fid_eq *eq;
	struct tctx t;
	pthread_t th;
	uint32_t event;
	void *thret;
	uint64_t t0;

	cr_assert_eq(t_open(&t, FI_MSG), 0);
	cr_assert_eq(fi_eq_open(t.fab, &ea, &eq, NULL), 0);
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAITOBJ, &got), 0);
	cr_assert_eq(got, FI_WAIT_MUTEX_COND);
	cr_assert_eq(pthread_create(&th, NULL, eq_write_late, eq), 0);
	t0 = t_ms();
	cr_assert_eq(fi_eq_sread(eq, &event, &ev, sizeof(ev), WAIT_MS, 0),
		     sizeof(ev));
	cr_assert_geq(t_ms() - t0, 50, "it waited for the writer");
	cr_assert_eq(event, FI_NOTIFY);
	cr_assert_eq(ev.data, 9);
	cr_assert_eq(pthread_join(th, &thret), 0);
	cr_assert_null(thret);
	cr_assert_eq(fi_eq_sread(eq, &event, &ev, sizeof(ev), 10, 0),
		     -FI_EAGAIN);
	cr_assert_eq(fi_close(&eq->fid), 0);
	for (size_t i = 0; i < sizeof(objs) / sizeof(objs[0]); i++) {
		struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
					 .wait_obj = objs[i] };
		struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP,
					   .wait_obj = objs[i] };
		struct fi_cq_tagged_entry e;
		struct fid_cntr *c;
		struct fid_cq *cq;

		ea.wait_obj = objs[i];
		cr_assert_eq(fi_eq_open(t.fab, &ea, &eq, NULL), 0);
		cr_assert_eq(fi_cq_open(t.dom, &ca, &cq, NULL), 0);
		cr_assert_eq(fi_cntr_open(t.dom, &na, &c, NULL), 0);
		cr_assert_eq(fi_cq_sread(cq, &e, 1, NULL, 10), -FI_EAGAIN);
		cr_assert_eq(fi_cntr_wait(c, 1, 10), -FI_ETIMEDOUT);
		cr_assert_eq(fi_eq_sread(eq, &event, &ev, sizeof(ev), 10, 0),
			     -FI_EAGAIN);
		fi_close(&c->fid);
		fi_close(&cq->fid);
		fi_close(&eq->fid);
	}
	t_close(&t);
}
/* One wait kind through every blocking call and wait control: what each
 * answers with a timeout of 0 (one try, at once), FI_GETWAITOBJ
 * (FI_WAIT_UNSPEC is FD) and FI_GETWAIT (an fd for FD only). */
static void every_call_with(struct tctx *t, enum fi_wait_obj kind)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = kind };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP,
				   .wait_obj = kind };
	struct fi_eq_attr ea = { .wait_obj = kind, .flags = FI_WRITE };
	enum fi_wait_obj want = kind == FI_WAIT_UNSPEC ? FI_WAIT_FD : kind;
	int refused = kind == FI_WAIT_NONE ? -FI_EINVAL : -FI_EAGAIN;
	struct fi_cq_tagged_entry e;
	struct fi_eq_entry ev;
	enum fi_wait_obj got;
	struct fid *fids[3];
	struct fid_cntr *c;
	struct fid_cq *cq;
	struct fid_eq *eq;
	uint32_t event;
	uint64_t t0;
	int fd;

	cr_assert_eq(fi_cq_open(t->dom, &ca, &cq, NULL), 0);
	cr_assert_eq(fi_cntr_open(t->dom, &na, &c, NULL), 0);
	cr_assert_eq(fi_eq_open(t->fab, &ea, &eq, NULL), 0);
	fids[0] = &cq->fid, fids[1] = &c->fid, fids[2] = &eq->fid;
	t0 = t_ms();
	cr_assert_eq(fi_cq_sread(cq, &e, 1, NULL, 0), refused);
	cr_assert_eq(fi_cntr_wait(c, 1, 0), -FI_ETIMEDOUT);
	cr_assert_eq(fi_eq_sread(eq, &event, &ev, sizeof(ev), 0, 0), refused);
	cr_assert_lt(t_ms() - t0, 1000, "a timeout of 0 does not sleep");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(fi_control(fids[i], FI_GETWAITOBJ, &got), 0);
		cr_assert_eq(got, want, "kind %d, object %d", kind, i);
		cr_assert_eq(fi_control(fids[i], FI_GETWAITOBJ, NULL),
			     -FI_EINVAL);
		fd = -1;
		cr_assert_eq(fi_control(fids[i], FI_GETWAIT, &fd),
			     want == FI_WAIT_FD ? 0 : -FI_ENODATA);
		cr_assert((want == FI_WAIT_FD) == (fd >= 0));
		cr_assert_eq(fi_control(fids[i], FI_GETWAIT, NULL),
			     -FI_ENODATA);
	}
	if (kind != FI_WAIT_NONE) { /* fi_cq_signal ends the next sread */
		cr_assert_eq(fi_cq_signal(cq), 0);
		cr_assert_eq(fi_cq_sread(cq, &e, 1, NULL, -1), -FI_EAGAIN);
	}
	fi_close(&eq->fid);
	fi_close(&c->fid);
	fi_close(&cq->fid);
}

Test(wait, every_wait_kind_answers_alike_in_every_object)
{
	static const enum fi_wait_obj kinds[] = {
		FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_FD, FI_WAIT_YIELD,
		FI_WAIT_MUTEX_COND };
	struct fi_wait_attr wa = { .wait_obj = FI_WAIT_FD };
	struct fid_wait *ws;
	enum fi_wait_obj got;
	struct tctx t;
	int fd = -1;

	cr_assert_eq(t_open(&t, FI_MSG), 0);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		every_call_with(&t, kinds[i]);
	/* a wait set: always an fd; no argument is a bad argument */
	cr_assert_eq(fi_wait_open(t.fab, &wa, &ws), 0);
	cr_assert_eq(fi_wait(ws, 0), -FI_ETIMEDOUT);
	cr_assert_eq(fi_control(&ws->fid, FI_GETWAITOBJ, &got), 0);
	cr_assert_eq(got, FI_WAIT_FD);
	cr_assert_eq(fi_control(&ws->fid, FI_GETWAIT, &fd), 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fi_control(&ws->fid, FI_GETWAIT, NULL), -FI_EINVAL);
	cr_assert_eq(fi_close(&ws->fid), 0);
	t_close(&t);
}
T_DEPRECATED_END
