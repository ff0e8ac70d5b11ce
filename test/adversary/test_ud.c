/*
 * A hostile sender on a ud domain (DESIGN §10, "The ud back end",
 * untrusted arrivals): a raw UD QP of our own sends a ntx endpoint
 * datagrams no correct peer sends (empty, short, bad headers, random
 * bytes, a HELLO with a name that is not its address); the endpoint drops
 * them and still exchanges messages with a correct peer. Runs where
 * NTX_TEST_UD_DOMAIN names a ud domain ("rxe0-ud": test/rxe), else skips.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_rel.h"
#include "ntx_test.h"
#include "ntx/ntx_base.h"

#define CAPS (FI_MSG | FI_TAGGED)
#define WAIT_MS 10000
#define QKEY 0x4e545855u /* ntx_ud.c's */

struct raw_ud {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	uint8_t buf[4096];
	uint32_t dst_qpn;
};

static const char *ud_domain(void)
{
	const char *d = getenv("NTX_TEST_UD_DOMAIN");

	return d && *d ? d : NULL;
}

static struct ibv_context *raw_open_dev(const char *dom)
{
	size_t n = strlen(dom) - 3; /* "-ud" */
	struct ibv_context *ctx = NULL;
	struct ibv_device **list;
	int cnt = 0;

	list = ibv_get_device_list(&cnt);
	for (int i = 0; list && i < cnt && !ctx; i++)
		if (strlen(ibv_get_device_name(list[i])) == n &&
		    !strncmp(ibv_get_device_name(list[i]), dom, n))
			ctx = ibv_open_device(list[i]);
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

/* Our GID entry for the victim's IPv4 address, RoCE v2. */
static int raw_gid(struct ibv_context *ctx, uint32_t ip4)
{
	for (uint32_t i = 0; i < 16; i++) {
		struct ibv_gid_entry e;

		if (!ibv_query_gid_ex(ctx, 1, i, &e, 0) &&
		    e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    !memcmp(e.gid.raw + 12, &ip4, 4) && e.gid.raw[10] == 0xff)
			return (int)i;
	}
	return -1;
}

static void raw_qp_ready(struct raw_ud *r)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = QKEY };

	cr_assert_eq(ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_QKEY), 0);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTR };
	cr_assert_eq(ibv_modify_qp(r->qp, &a, IBV_QP_STATE), 0);
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .sq_psn = 1 };
	cr_assert_eq(ibv_modify_qp(r->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
}

/* A UD QP aimed at the endpoint named 'victim' (its address and QP
 * number as ntx_ud.c writes them). */
static void raw_open(struct raw_ud *r, const char *dom,
		     const struct ntx_addr *victim)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_UD,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1,
				  .grh.hop_limit = 64 };
	int gid;

	r->ctx = raw_open_dev(dom);
	cr_assert_not_null(r->ctx, "no device for %s", dom);
	r->pd = ibv_alloc_pd(r->ctx);
	r->cq = ibv_create_cq(r->ctx, 16, NULL, NULL, 0);
	cr_assert(r->pd && r->cq);
	qa.send_cq = qa.recv_cq = r->cq;
	r->qp = ibv_create_qp(r->pd, &qa);
	r->mr = ibv_reg_mr(r->pd, r->buf, sizeof(r->buf), 0);
	cr_assert(r->qp && r->mr);
	raw_qp_ready(r);
	gid = raw_gid(r->ctx, victim->ip4);
	cr_assert_geq(gid, 0, "no RoCE v2 GID for the victim's address");
	aa.grh.sgid_index = (uint8_t)gid;
	aa.grh.dgid.raw[10] = aa.grh.dgid.raw[11] = 0xff;
	memcpy(aa.grh.dgid.raw + 12, &victim->ip4, 4);
	r->ah = ibv_create_ah(r->pd, &aa);
	cr_assert_not_null(r->ah);
	r->dst_qpn = ntohs(victim->port) |
		     (uint32_t)((victim->flags & NTX_ADDR_F_QPN_MASK) >>
				NTX_ADDR_F_QPN_SHIFT) << 16;
}

/* One datagram of the first len bytes of r->buf, sent and completed. */
static void raw_send(struct raw_ud *r, size_t len)
{
	struct ibv_sge sge = { (uintptr_t)r->buf, (uint32_t)len, r->mr->lkey };
	struct ibv_send_wr wr = {
		.sg_list = &sge, .num_sge = len ? 1 : 0,
		.opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
		.wr.ud = { .ah = r->ah, .remote_qpn = r->dst_qpn,
			   .remote_qkey = QKEY } }, *bad;
	struct ibv_wc wc;
	int n;

	cr_assert_eq(ibv_post_send(r->qp, &wr, &bad), 0);
	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0)
		;
	cr_assert_eq(n, 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "%s",
		     ibv_wc_status_str(wc.status));
}

static void raw_close(struct raw_ud *r)
{
	ibv_destroy_ah(r->ah);
	ibv_destroy_qp(r->qp);
	ibv_dereg_mr(r->mr);
	ibv_destroy_cq(r->cq);
	ibv_dealloc_pd(r->pd);
	ibv_close_device(r->ctx);
}

/* A rel header (valid or not, as h says) and then len payload bytes. */
static void raw_send_rel(struct raw_ud *r, const struct ntx_rel_hdr *h,
			 const void *payload, size_t len)
{
	ntx_rel_hdr_pack(h, r->buf);
	memcpy(r->buf + NTX_REL_HDR_LEN, payload, len);
	raw_send(r, NTX_REL_HDR_LEN + len);
}

/* Everything a correct peer never sends. */
static void raw_garbage(struct raw_ud *r, const struct ntx_addr *victim)
{
	struct ntx_rel_hdr h = { .version = NTX_REL_VERSION,
				 .flags = NTX_REL_F_DATA | NTX_REL_F_PRIO,
				 .plen = sizeof(*victim), .src_epoch = 77,
				 .msg_len = sizeof(*victim), .nfrag = 1 };
	struct ntx_rel_hdr bad = h;

	raw_send(r, 0);
	raw_send(r, 1);
	raw_send(r, NTX_REL_HDR_LEN - 1);
	bad.version = 99;
	raw_send_rel(r, &bad, victim, sizeof(*victim));
	bad = h;
	bad.plen = 4000; /* more than the datagram */
	raw_send_rel(r, &bad, victim, sizeof(*victim));
	bad = h;
	bad.frag = 3; /* beyond nfrag */
	raw_send_rel(r, &bad, victim, sizeof(*victim));
	srandom(1);
	for (int i = 0; i < 200; i++) {
		for (size_t j = 0; j < sizeof(r->buf); j++)
			r->buf[j] = (uint8_t)random();
		raw_send(r, 1 + (size_t)random() % 1024);
	}
	/* a HELLO naming the victim itself: not the sender's address */
	raw_send_rel(r, &h, victim, sizeof(*victim));
}

/* The correct peer: a message once the garbage was sent, and its answer. */
static int child_good_peer(int sock)
{
	struct tctx t;
	struct fi_cq_tagged_entry e;
	fi_addr_t peer;
	uint64_t v = 42, back = 0;

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(t_sync(sock) == 0); /* the garbage has been sent */
	CHK(fi_recv(t.ep, &back, sizeof(back), NULL, peer, NULL) == 0);
	CHK(fi_send(t.ep, &v, sizeof(v), NULL, peer, NULL) == 0);
	CHK(t_wait(&t, &e, NULL, NULL, WAIT_MS) == 1);
	CHK(t_wait(&t, &e, NULL, NULL, WAIT_MS) == 1);
	CHK(back == 43);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

Test(ud, garbage_datagrams_are_dropped_and_the_endpoint_lives_on,
     .timeout = 120)
{
	const char *dom = ud_domain();
	struct ntx_addr me;
	struct fi_cq_tagged_entry e;
	struct raw_ud raw = { 0 };
	struct tctx t;
	size_t len = sizeof(me);
	uint64_t v = 0, answer = 43;
	fi_addr_t peer;
	int sock;
	pid_t pid;

	if (!dom)
		cr_skip_test("NTX_TEST_UD_DOMAIN names no ud domain");
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", dom, 1);
	pid = t_fork(&sock, child_good_peer);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, &me, &len), 0);
	raw_open(&raw, dom, &me);
	raw_garbage(&raw, &me);
	/* the endpoint reads all of it: nothing completes */
	cr_assert_eq(t_drain(&t, 500), 0);
	cr_assert_eq(t_sync(sock), 0);
	cr_assert_eq(fi_recv(t.ep, &v, sizeof(v), NULL, peer, NULL), 0);
	cr_assert_eq(t_wait(&t, &e, NULL, NULL, WAIT_MS), 1);
	cr_assert_eq(v, 42);
	cr_assert_eq(fi_send(t.ep, &answer, sizeof(answer), NULL, peer, NULL),
		     0);
	cr_assert_eq(t_wait(&t, &e, NULL, NULL, WAIT_MS), 1);
	cr_assert_eq(t_sync_progress(&t, sock, WAIT_MS), 0);
	cr_assert_eq(t_join(pid), 0, "the correct peer failed");
	raw_close(&raw);
	t_close(&t);
}
