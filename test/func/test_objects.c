/* Object life cycle and error codes through the public API. */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ntx_test.h"

Test(objects, close_in_use_is_busy)
{
	struct tctx t;

	cr_assert_eq(t_open(&t, FI_MSG | FI_TAGGED), 0);
	cr_assert_eq(fi_close(&t.dom->fid), -FI_EBUSY);
	cr_assert_eq(fi_close(&t.fab->fid), -FI_EBUSY);
	cr_assert_eq(fi_close(&t.cq->fid), -FI_EBUSY, "CQ bound to an ep");
	cr_assert_eq(fi_close(&t.av->fid), -FI_EBUSY, "AV bound to an ep");
	cr_assert_eq(fi_close(&t.ep->fid), 0);
	t.ep = NULL;
	t_close(&t);
}

Test(objects, enable_needs_an_av_and_binds_are_checked)
{
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_cq *cq;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_MSG };

	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, t_hints(FI_MSG), &fi), 0);
	cr_assert_eq(fi_fabric(fi->fabric_attr, &fab, NULL), 0);
	cr_assert_eq(fi_domain(fab, fi, &dom, NULL), 0);
	cr_assert_eq(fi_endpoint(dom, fi, &ep, NULL), 0);
	cr_assert_eq(fi_cq_open(dom, &ca, &cq, NULL), 0);
	cr_assert_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT), -FI_EINVAL,
		     "second transmit CQ");
	cr_assert_eq(fi_enable(ep), -FI_ENOAV);
	cr_assert_eq(fi_send(ep, "x", 1, NULL, 0, NULL), -FI_EOPBADSTATE);
	cr_assert_eq(fi_close(&ep->fid), 0);
	cr_assert_eq(fi_close(&cq->fid), 0);
	cr_assert_eq(fi_close(&dom->fid), 0);
	cr_assert_eq(fi_close(&fab->fid), 0);
	fi_freeinfo(fi);
}

Test(objects, av_insert_lookup_remove_straddr)
{
	struct tctx a, b;
	char name[T_NAMELEN], back[T_NAMELEN], str[128], junk[T_NAMELEN];
	size_t len = sizeof(name), slen = sizeof(str);
	fi_addr_t fa, fj;

	cr_assert_eq(t_open(&a, FI_MSG), 0);
	cr_assert_eq(t_open(&b, FI_MSG), 0);
	cr_assert_eq(fi_getname(&b.ep->fid, name, &len), 0);
	cr_assert_eq(len, T_NAMELEN);
	cr_assert_eq(fi_av_insert(a.av, name, 1, &fa, 0, NULL), 1);
	len = 4;
	cr_assert_eq(fi_av_lookup(a.av, fa, back, &len), 0);
	cr_assert_eq(len, T_NAMELEN, "full size reported for a small buffer");
	len = sizeof(back);
	cr_assert_eq(fi_av_lookup(a.av, fa, back, &len), 0);
	cr_assert(!memcmp(name, back, T_NAMELEN));
	fi_av_straddr(a.av, name, str, &slen);
	cr_assert(!strncmp(str, "fi_ntx://", 9), "%s", str);
	memset(junk, 0x5a, sizeof(junk));
	cr_assert_eq(fi_av_insert(a.av, junk, 1, &fj, 0, NULL), 0);
	cr_assert_eq(fj, FI_ADDR_NOTAVAIL);
	cr_assert_eq(fi_av_insert(a.av, name, 1, &fj, 0xdead, NULL), -FI_EINVAL);
	cr_assert_eq(fi_av_remove(a.av, &fa, 1, 0), 0);
	len = sizeof(back);
	cr_assert_eq(fi_av_lookup(a.av, fa, back, &len), -FI_ENOENT);
	len = 10;
	cr_assert_eq(fi_getname(&b.ep->fid, name, &len), -FI_ETOOSMALL);
	cr_assert_eq(len, T_NAMELEN);
	t_close(&a);
	t_close(&b);
}

T_DEPRECATED_BEGIN
Test(objects, av_map_and_async_insert_on_an_eq)
{
	struct tctx a;
	struct fid_av *av;
	struct fid_eq *eq;
	struct fi_av_attr aa = { .type = FI_AV_MAP };
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_eq_entry ev;
	char name[T_NAMELEN];
	size_t len = sizeof(name);
	uint32_t event;
	fi_addr_t fa[2];

	cr_assert_eq(t_open(&a, FI_MSG), 0);
	cr_assert_eq(fi_getname(&a.ep->fid, name, &len), 0);
	cr_assert_eq(fi_eq_open(a.fab, &ea, &eq, NULL), 0);
	cr_assert_eq(fi_av_open(a.dom, &aa, &av, NULL), 0);
	cr_assert_eq(fi_av_bind(av, &eq->fid, 0), 0);
	char two[2 * T_NAMELEN];
	memcpy(two, name, T_NAMELEN);
	memcpy(two + T_NAMELEN, name, T_NAMELEN);
	cr_assert_eq(fi_av_insert(av, two, 2, fa, 0, (void *)0x77), 0);
	cr_assert_eq(fi_eq_read(eq, &event, &ev, sizeof(ev), 0), sizeof(ev));
	cr_assert_eq(event, FI_AV_COMPLETE);
	cr_assert_eq(ev.data, 2);
	cr_assert_eq(ev.context, (void *)0x77);
	cr_assert_eq(fi_close(&av->fid), 0);
	cr_assert_eq(fi_close(&eq->fid), 0);
	t_close(&a);
}

T_DEPRECATED_END

Test(objects, eq_read_write_sread_and_fd)
{
	struct tctx a;
	struct fid_eq *eq;
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_FD };
	struct fi_eq_entry in = { .data = 42 }, out;
	uint32_t event;
	int fd;

	cr_assert_eq(t_open(&a, FI_MSG), 0);
	cr_assert_eq(fi_eq_open(a.fab, &ea, &eq, NULL), 0);
	cr_assert_eq(fi_eq_sread(eq, &event, &out, sizeof(out), 10, 0),
		     -FI_EAGAIN);
	cr_assert_eq(fi_control(&eq->fid, FI_GETWAIT, &fd), 0);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	cr_assert_eq(poll(&p, 1, 0), 0, "nothing yet");
	cr_assert_eq(fi_eq_write(eq, FI_NOTIFY, &in, sizeof(in), 0),
		     sizeof(in));
	cr_assert_eq(poll(&p, 1, 1000), 1, "fd readable after a write");
	cr_assert_eq(fi_eq_read(eq, &event, &out, 4, 0), -FI_ETOOSMALL);
	cr_assert_eq(fi_eq_read(eq, &event, &out, sizeof(out), FI_PEEK),
		     sizeof(out));
	cr_assert_eq(fi_eq_sread(eq, &event, &out, sizeof(out), 1000, 0),
		     sizeof(out));
	cr_assert_eq(event, FI_NOTIFY);
	cr_assert_eq(out.data, 42);
	cr_assert_eq(fi_eq_read(eq, &event, &out, sizeof(out), 0), -FI_EAGAIN);
	cr_assert_eq(fi_close(&eq->fid), 0);
	t_close(&a);
}

Test(objects, cq_formats_and_empty_reads)
{
	struct tctx a;
	enum fi_cq_format f[] = { FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG,
				  FI_CQ_FORMAT_DATA, FI_CQ_FORMAT_TAGGED };
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;

	cr_assert_eq(t_open(&a, FI_MSG), 0);
	for (size_t i = 0; i < 4; i++) {
		struct fi_cq_attr ca = { .format = f[i],
					 .wait_obj = FI_WAIT_UNSPEC };
		struct fid_cq *cq;
		int fd;

		cr_assert_eq(fi_cq_open(a.dom, &ca, &cq, NULL), 0);
		cr_assert_eq(fi_cq_read(cq, &e, 1), -FI_EAGAIN);
		cr_assert_eq(fi_cq_sread(cq, &e, 1, NULL, 10), -FI_EAGAIN);
		cr_assert_eq(fi_cq_readerr(cq, &err, 0), -FI_EAGAIN);
		cr_assert_eq(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
		cr_assert_eq(fi_close(&cq->fid), 0);
	}
	struct fi_cq_attr bad = { .format = 99 };
	struct fid_cq *cq;
	cr_assert_neq(fi_cq_open(a.dom, &bad, &cq, NULL), 0);
	t_close(&a);
}

Test(objects, counters)
{
	struct tctx a;
	struct fid_cntr *c;
	struct fi_cntr_attr attr = { .events = FI_CNTR_EVENTS_COMP,
				     .wait_obj = FI_WAIT_UNSPEC };

	cr_assert_eq(t_open(&a, FI_MSG), 0);
	cr_assert_eq(fi_cntr_open(a.dom, &attr, &c, NULL), 0);
	cr_assert_eq(fi_cntr_read(c), 0);
	cr_assert_eq(fi_cntr_add(c, 5), 0);
	cr_assert_eq(fi_cntr_read(c), 5);
	cr_assert_eq(fi_cntr_set(c, 2), 0);
	cr_assert_eq(fi_cntr_read(c), 2);
	cr_assert_eq(fi_cntr_adderr(c, 3), 0);
	cr_assert_eq(fi_cntr_readerr(c), 3);
	cr_assert_eq(fi_cntr_seterr(c, 0), 0);
	cr_assert_eq(fi_cntr_readerr(c), 0);
	cr_assert_eq(fi_cntr_wait(c, 2, 100), 0);
	cr_assert_eq(fi_cntr_wait(c, 3, 10), -FI_ETIMEDOUT);
	cr_assert_eq(fi_close(&c->fid), 0);
	t_close(&a);
}

Test(objects, memory_registration_and_keys)
{
	struct tctx a;
	struct fid_mr *m1, *m2;
	char buf[4096];
	struct iovec iov[2] = { { buf, 1024 }, { buf + 2048, 1024 } };

	cr_assert_eq(t_open(&a, FI_MSG), 0);
	cr_assert_eq(fi_mr_reg(a.dom, buf, sizeof(buf), FI_SEND | FI_RECV, 0,
			       7, 0, &m1, NULL), 0);
	cr_assert_eq(fi_mr_key(m1), 7);
	cr_assert_not_null(fi_mr_desc(m1));
	cr_assert_eq(fi_mr_reg(a.dom, buf, 10, FI_SEND, 0, 7, 0, &m2, NULL),
		     -FI_ENOKEY, "duplicate requested key");
	cr_assert_eq(fi_mr_regv(a.dom, iov, 2, FI_RECV, 0, 8, 0, &m2, NULL), 0);
	cr_assert_eq(fi_close(&m2->fid), 0);
	cr_assert_eq(fi_mr_reg(a.dom, buf, 10, 1ull << 40, 0, 9, 0, &m2, NULL),
		     -FI_EINVAL, "unknown access bit");
	cr_assert_eq(fi_close(&m1->fid), 0);
	t_close(&a);
}

Test(objects, options_and_bad_arguments)
{
	struct tctx a;
	size_t v = 4096, len = sizeof(v);
	struct iovec iov[100];
	struct fi_msg msg = { .msg_iov = iov, .iov_count = 100,
			      .addr = FI_ADDR_UNSPEC };

	cr_assert_eq(t_open(&a, FI_MSG | FI_MULTI_RECV), 0);
	cr_assert_eq(fi_setopt(&a.ep->fid, FI_OPT_ENDPOINT,
			       FI_OPT_MIN_MULTI_RECV, &v, sizeof(v)), 0);
	v = 0;
	cr_assert_eq(fi_getopt(&a.ep->fid, FI_OPT_ENDPOINT,
			       FI_OPT_MIN_MULTI_RECV, &v, &len), 0);
	cr_assert_eq(v, 4096);
	cr_assert_eq(fi_getopt(&a.ep->fid, FI_OPT_ENDPOINT, 12345, &v, &len),
		     -FI_ENOPROTOOPT);
	memset(iov, 0, sizeof(iov));
	cr_assert_eq(fi_recvmsg(a.ep, &msg, 0), -FI_EINVAL, "100 iovecs");
	cr_assert_eq(fi_send(a.ep, "x", 1, NULL, 12345, NULL), -FI_EINVAL,
		     "address not in the AV");
	cr_assert_eq(fi_inject(a.ep, iov, 5000, 0), -FI_EMSGSIZE);
	cr_assert_eq(fi_cancel(&a.ep->fid, (void *)0x1), -FI_ENOENT);
	t_close(&a);
}

/* fi_poll over a CQ and a counter: nothing before traffic; after a
 * message, the CQ's context until it is read and the counter's context
 * once per change; members are held until fi_poll_del. */
T_DEPRECATED_BEGIN
Test(objects, poll_set_of_a_cq_and_a_counter)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_cntr_attr cna = { .events = FI_CNTR_EVENTS_COMP };
	struct fi_poll_attr pa = { 0 };
	struct fi_cq_tagged_entry e;
	struct fid_cq *cq2, *other;
	struct fid_cntr *cntr;
	struct fid_poll *ps;
	struct fid_ep *ep2;
	struct fid_domain *dom2;
	char name[T_NAMELEN];
	size_t len = sizeof(name);
	fi_addr_t to;
	void *ctx[4];
	uint64_t v = 42, in = 0;
	int cq_ctx, cntr_ctx, n = 0;
	bool seen_cq = false, seen_cntr = false;
	struct tctx t;

	cr_assert_eq(t_open(&t, FI_MSG | FI_TAGGED), 0);
	cr_assert_eq(fi_cq_open(t.dom, &ca, &cq2, &cq_ctx), 0);
	cr_assert_eq(fi_cntr_open(t.dom, &cna, &cntr, &cntr_ctx), 0);
	cr_assert_eq(fi_endpoint(t.dom, t.fi, &ep2, NULL), 0);
	cr_assert_eq(fi_ep_bind(ep2, &cq2->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(ep2, &cntr->fid, FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(ep2, &t.av->fid, 0), 0);
	cr_assert_eq(fi_enable(ep2), 0);
	cr_assert_eq(fi_getname(&ep2->fid, name, &len), 0);
	cr_assert_eq(t_insert(&t, name, &to), 0);

	cr_assert_eq(fi_poll_open(t.dom, &pa, &ps), 0);
	cr_assert_eq(fi_poll_add(ps, &cq2->fid, 0), 0);
	cr_assert_eq(fi_poll_add(ps, &cntr->fid, 0), 0);
	cr_assert_eq(fi_poll_add(ps, &cq2->fid, 0), -FI_EALREADY);
	cr_assert_eq(fi_poll_add(ps, &t.av->fid, 0), -FI_EINVAL);
	cr_assert_eq(fi_domain(t.fab, t.fi, &dom2, NULL), 0);
	cr_assert_eq(fi_cq_open(dom2, &ca, &other, NULL), 0);
	cr_assert_eq(fi_poll_add(ps, &other->fid, 0), -FI_EINVAL,
		     "a CQ of another domain");
	cr_assert_eq(fi_poll(ps, ctx, 4), 0, "events before any traffic");

	cr_assert_eq(fi_recv(ep2, &in, sizeof(in), NULL, FI_ADDR_UNSPEC,
			     NULL), 0);
	cr_assert_eq(fi_send(t.ep, &v, sizeof(v), NULL, to, NULL), 0);
	/* progress is fi_poll's own: the CQ's and the counter's contexts
	 * come back once the message has arrived (in one call, or the
	 * counter's in one and the CQ's in the next, when the message came
	 * while fi_poll looked from one to the other) */
	for (time_t end = time(NULL) + 20;
	     !(seen_cq && seen_cntr) && time(NULL) < end;) {
		n = fi_poll(ps, ctx, 4);
		cr_assert_geq(n, 0);
		for (int i = 0; i < n; i++) {
			cr_assert(ctx[i] == &cq_ctx || ctx[i] == &cntr_ctx);
			seen_cq |= ctx[i] == &cq_ctx;
			seen_cntr |= ctx[i] == &cntr_ctx;
		}
		(void)fi_cq_read(t.cq, &e, 1); /* the sender's side */
	}
	cr_assert(seen_cq && seen_cntr, "cq %d counter %d", seen_cq,
		  seen_cntr);
	cr_assert_eq(in, v);
	n = fi_poll(ps, ctx, 4);
	cr_assert_eq(n, 1, "the CQ until read, the counter once");
	cr_assert_eq(ctx[0], &cq_ctx);
	cr_assert_eq(fi_cq_read(cq2, &e, 1), 1);
	cr_assert_eq(fi_poll(ps, ctx, 4), 0);

	cr_assert_eq(fi_close(&ps->fid), 0); /* releases its members */
	cr_assert_eq(fi_poll_open(t.dom, &pa, &ps), 0);
	cr_assert_eq(fi_poll_add(ps, &cq2->fid, 0), 0);
	cr_assert_eq(fi_close(&ep2->fid), 0);
	cr_assert_eq(fi_close(&cq2->fid), -FI_EBUSY, "a member of a set");
	cr_assert_eq(fi_poll_del(ps, &cq2->fid, 0), 0);
	cr_assert_eq(fi_poll_del(ps, &cq2->fid, 0), -FI_ENOENT);
	cr_assert_eq(fi_close(&cq2->fid), 0);
	cr_assert_eq(fi_close(&cntr->fid), 0);
	cr_assert_eq(fi_close(&ps->fid), 0);
	cr_assert_eq(fi_close(&other->fid), 0);
	cr_assert_eq(fi_close(&dom2->fid), 0);
	t_close(&t);
}
T_DEPRECATED_END
