/*
 * Shared contexts (DESIGN §3, "Shared contexts"): receives posted to a
 * shared receive context take messages that arrive at any endpoint bound
 * to it, eager and rendezvous, expected and unexpected; each completion
 * goes to the CQ of the endpoint the message arrived at. Endpoints bound
 * to a shared transmit context send as before.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_test.h"

#define BIG (256 * 1024)
#define WAIT 20000

struct rx2 {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct fid_ep *srx, *ep[2];
	struct fid_stx *stx;
	struct fid_cq *cq[2];
};

/* Two endpoints of one domain bound to one srx and one stx, each with
 * its own CQ. */
static void rx2_open(struct rx2 *r)
{
	struct fi_info *h = t_hints(FI_MSG | FI_TAGGED);
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };

	h->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	h->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
	memset(r, 0, sizeof(*r));
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &r->fi), 0);
	fi_freeinfo(h);
	cr_assert_eq(r->fi->ep_attr->rx_ctx_cnt, FI_SHARED_CONTEXT);
	cr_assert_eq(fi_fabric(r->fi->fabric_attr, &r->fab, NULL), 0);
	cr_assert_eq(fi_domain(r->fab, r->fi, &r->dom, NULL), 0);
	cr_assert_eq(fi_av_open(r->dom, &aa, &r->av, NULL), 0);
	cr_assert_eq(fi_srx_context(r->dom, r->fi->rx_attr, &r->srx, NULL), 0);
	cr_assert_eq(fi_stx_context(r->dom, r->fi->tx_attr, &r->stx, NULL), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(fi_endpoint(r->dom, r->fi, &r->ep[i], NULL), 0);
		cr_assert_eq(fi_cq_open(r->dom, &ca, &r->cq[i], NULL), 0);
		cr_assert_eq(fi_ep_bind(r->ep[i], &r->cq[i]->fid,
					FI_TRANSMIT | FI_RECV), 0);
		cr_assert_eq(fi_ep_bind(r->ep[i], &r->av->fid, 0), 0);
		cr_assert_eq(fi_ep_bind(r->ep[i], &r->srx->fid, 0), 0);
		cr_assert_eq(fi_ep_bind(r->ep[i], &r->srx->fid, 0), -FI_EINVAL,
			     "one srx per endpoint");
		cr_assert_eq(fi_ep_bind(r->ep[i], &r->stx->fid, 0), 0);
		cr_assert_eq(fi_enable(r->ep[i]), 0);
	}
	cr_assert_eq(fi_close(&r->srx->fid), -FI_EBUSY, "bound");
}

static void rx2_close(struct rx2 *r)
{
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(fi_close(&r->ep[i]->fid), 0);
		cr_assert_eq(fi_close(&r->cq[i]->fid), 0);
	}
	cr_assert_eq(fi_close(&r->srx->fid), 0);
	cr_assert_eq(fi_close(&r->stx->fid), 0);
	cr_assert_eq(fi_close(&r->av->fid), 0);
	cr_assert_eq(fi_close(&r->dom->fid), 0);
	cr_assert_eq(fi_close(&r->fab->fid), 0);
	fi_freeinfo(r->fi);
}

/* Progresses the sender and both receivers until the sender has n send
 * completions and the receivers n receive completions in all; counts
 * them per receiving CQ. */
static void pump(struct tctx *s, struct rx2 *r, int n, int got[2],
		 void *ctx_of[2][4])
{
	int sent = 0, recvd = 0;

	for (int spin = 0; (sent < n || recvd < n) && spin < 50000000; spin++) {
		struct fi_cq_tagged_entry e;

		if (fi_cq_read(s->cq, &e, 1) == 1)
			sent++;
		for (int i = 0; i < 2; i++)
			if (fi_cq_read(r->cq[i], &e, 1) == 1) {
				cr_assert(e.flags & FI_RECV);
				ctx_of[i][got[i]++ & 3] = e.op_context;
				recvd++;
			}
	}
	cr_assert_eq(sent, n);
	cr_assert_eq(recvd, n);
}

Test(ctx, a_shared_receive_context_serves_both_endpoints, .timeout = 60)
{
	struct rx2 r;
	struct tctx s;
	char name[2][T_NAMELEN];
	fi_addr_t to[2];
	uint8_t *sbuf[2], *rbuf[4];
	int got[2] = { 0, 0 };
	void *ctx_of[2][4] = { { 0 } };

	rx2_open(&r);
	cr_assert_eq(t_open(&s, FI_MSG | FI_TAGGED), 0);
	for (int i = 0; i < 2; i++) {
		size_t len = T_NAMELEN;

		cr_assert_eq(fi_getname(&r.ep[i]->fid, name[i], &len), 0);
		cr_assert_eq(t_insert(&s, name[i], &to[i]), 0);
		sbuf[i] = malloc(BIG);
		t_fill(sbuf[i], BIG, 10 + i);
	}
	for (int i = 0; i < 4; i++)
		rbuf[i] = calloc(1, BIG);
	/* expected: posted to the srx first, one eager and one rendezvous
	 * message to each endpoint */
	cr_assert_eq(fi_trecv(r.srx, rbuf[0], BIG, NULL, FI_ADDR_UNSPEC, 7, 0,
			      rbuf[0]), 0);
	cr_assert_eq(fi_trecv(r.srx, rbuf[1], BIG, NULL, FI_ADDR_UNSPEC, 8, 0,
			      rbuf[1]), 0);
	cr_assert_eq(fi_tsend(s.ep, sbuf[0], 100, NULL, to[0], 7, NULL), 0);
	cr_assert_eq(fi_tsend(s.ep, sbuf[1], BIG, NULL, to[1], 8, NULL), 0);
	pump(&s, &r, 2, got, ctx_of);
	cr_assert_eq(got[0], 1);
	cr_assert_eq(got[1], 1);
	cr_assert_eq(ctx_of[0][0], rbuf[0], "endpoint 0 reports its message");
	cr_assert_eq(ctx_of[1][0], rbuf[1]);
	cr_assert_eq(t_check(rbuf[0], 100, 10), 0);
	cr_assert_eq(t_check(rbuf[1], BIG, 11), 0);
	/* unexpected: sent first (the rendezvous one waits), then posted */
	cr_assert_eq(fi_tsend(s.ep, sbuf[1], BIG, NULL, to[0], 9, NULL), 0);
	cr_assert_eq(fi_tsend(s.ep, sbuf[0], 64, NULL, to[1], 10, NULL), 0);
	for (int i = 0; i < 1000; i++) {
		fi_cq_read(r.cq[0], NULL, 0);
		fi_cq_read(r.cq[1], NULL, 0);
		fi_cq_read(s.cq, NULL, 0);
	}
	cr_assert_eq(fi_trecv(r.srx, rbuf[2], BIG, NULL, FI_ADDR_UNSPEC, 9, 0,
			      rbuf[2]), 0);
	cr_assert_eq(fi_trecv(r.srx, rbuf[3], BIG, NULL, FI_ADDR_UNSPEC, 10, 0,
			      rbuf[3]), 0);
	pump(&s, &r, 2, got, ctx_of);
	cr_assert_eq(got[0], 2);
	cr_assert_eq(got[1], 2);
	cr_assert_eq(ctx_of[0][1], rbuf[2]);
	cr_assert_eq(ctx_of[1][1], rbuf[3]);
	cr_assert_eq(t_check(rbuf[2], BIG, 11), 0);
	cr_assert_eq(t_check(rbuf[3], 64, 10), 0);
	t_close(&s);
	rx2_close(&r);
	for (int i = 0; i < 4; i++)
		free(rbuf[i]);
	free(sbuf[0]);
	free(sbuf[1]);
}

/* An endpoint closed while the srx holds its peers' unexpected messages:
 * they go with it; the other endpoint and the srx go on. */
Test(ctx, closing_a_bound_endpoint_drops_its_unexpected_messages,
     .timeout = 60)
{
	struct rx2 r;
	struct tctx s;
	char name[T_NAMELEN];
	size_t len = sizeof(name);
	fi_addr_t to;
	uint64_t v = 42, w = 0;
	struct fi_cq_tagged_entry e;

	rx2_open(&r);
	cr_assert_eq(t_open(&s, FI_MSG | FI_TAGGED), 0);
	cr_assert_eq(fi_getname(&r.ep[0]->fid, name, &len), 0);
	cr_assert_eq(t_insert(&s, name, &to), 0);
	cr_assert_eq(fi_tsend(s.ep, &v, sizeof(v), NULL, to, 5, NULL), 0);
	/* both progress until the send is done; the message lands at
	 * endpoint 0 as unexpected */
	for (int spin = 0; fi_cq_read(s.cq, &e, 1) != 1; spin++) {
		cr_assert_lt(spin, 50000000, "the send never completed");
		cr_assert_eq(fi_cq_read(r.cq[0], &e, 1), -FI_EAGAIN);
	}
	for (int i = 0; i < 1000; i++)
		fi_cq_read(r.cq[0], NULL, 0);
	cr_assert_eq(fi_close(&r.ep[0]->fid), 0);
	cr_assert_eq(fi_close(&r.cq[0]->fid), 0);
	cr_assert_eq(fi_trecv(r.srx, &w, sizeof(w), NULL, FI_ADDR_UNSPEC, 5, 0,
			      &w), 0);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(fi_cq_read(r.cq[1], &e, 1), -FI_EAGAIN);
	cr_assert_eq(w, 0, "the closed endpoint's message is gone");
	cr_assert_eq(fi_cancel(&r.srx->fid, &w), 0);
	cr_assert_eq(fi_close(&r.ep[1]->fid), 0);
	cr_assert_eq(fi_close(&r.cq[1]->fid), 0);
	cr_assert_eq(fi_close(&r.srx->fid), 0);
	cr_assert_eq(fi_close(&r.stx->fid), 0);
	cr_assert_eq(fi_close(&r.av->fid), 0);
	cr_assert_eq(fi_close(&r.dom->fid), 0);
	cr_assert_eq(fi_close(&r.fab->fid), 0);
	fi_freeinfo(r.fi);
	t_close(&s);
}
