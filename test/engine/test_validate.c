/* Packet validation (DESIGN §7): every protocol message of ntx_wire.h,
 * malformed (a bad length, an unknown request id, an iovec count out of
 * range, a payload shorter than the header says), handed to the engine
 * through the loopback back end's recv callback. Each row says what the
 * code intends: the VC fails, or the packet is refused or answered and
 * the VC stays. Either way nothing crashes (scripts/asan.sh runs this
 * program too) and the endpoint's other VCs keep working. */
#include "config.h"
#include <stdlib.h>

#include "ntx_et.h"

TestSuite(validate, .timeout = 60);

/* request ids filled in at run time */
#define ID_BOGUS 0x00000001234567ffull /* no such slot */
#define ID_SEND (~1ull) /* node 1's send waiting in RTS_SENT */
#define ID_RECV (~2ull) /* node 1's receive waiting for DATA */

enum vsetup { S_NONE, S_SEND, S_RECV };

struct vcase {
	const char *what;
	uint8_t op, flags;
	uint16_t niov;
	int32_t status;
	uint64_t msg_len, sreq, rreq, offset, cq_data;
	uint16_t piov;     /* payload: piov wire iovecs of 'each' bytes */
	uint64_t each;
	int len_adj;       /* ... plus this many bytes (negative: fewer) */
	size_t raw;        /* payload bytes when piov is 0 */
	enum vsetup setup;
	bool fails;        /* the VC fails (else it stays) */
};

#define DT_SUM (((uint16_t)FI_INT32 << 8) | FI_SUM)

static const struct vcase cases[] = {
	{ "op 0", .op = 0, .fails = true },
	{ "op past the last", .op = NTX_OP_MAX, .fails = true },
	{ "unknown flag", .op = NTX_OP_EAGER, .flags = 0x80, .fails = true },
	/* EAGER */
	{ "eager: length", .op = NTX_OP_EAGER, .msg_len = 10, .raw = 11,
	  .fails = true },
	{ "eager: id", .op = NTX_OP_EAGER, .msg_len = 10, .raw = 10,
	  .sreq = ID_BOGUS },
	{ "eager: niov", .op = NTX_OP_EAGER, .msg_len = 10, .raw = 10,
	  .niov = 9 },
	{ "eager: truncated", .op = NTX_OP_EAGER, .msg_len = 100, .raw = 10,
	  .fails = true },
	{ "eager inline: payload", .op = NTX_OP_EAGER, .flags = NTX_PF_INLINE,
	  .msg_len = 4, .raw = 4, .fails = true },
	{ "eager inline: length", .op = NTX_OP_EAGER, .flags = NTX_PF_INLINE,
	  .msg_len = NTX_INLINE_MAX + 1, .fails = true },
	/* the message path's first check (ntx_proto_on_packet) takes the
	 * first; the others must reach the general path's verdict */
	{ "eager inline: in range", .op = NTX_OP_EAGER,
	  .flags = NTX_PF_INLINE | NTX_PF_TAGGED | NTX_PF_DATA,
	  .msg_len = NTX_INLINE_MAX },
	{ "eager inline: ack asked", .op = NTX_OP_EAGER,
	  .flags = NTX_PF_INLINE | NTX_PF_ACK, .msg_len = 4 },
	{ "eager inline: unknown flag", .op = NTX_OP_EAGER,
	  .flags = NTX_PF_INLINE | 0x80, .msg_len = 4, .fails = true },
	/* RTS */
	{ "rts: length", .op = NTX_OP_RTS, .niov = 2, .piov = 2, .each = 100,
	  .msg_len = 200, .len_adj = 1, .fails = true },
	{ "rts: id", .op = NTX_OP_RTS, .niov = 1, .piov = 1, .each = 5000,
	  .msg_len = 5000, .sreq = ID_BOGUS },
	{ "rts: niov 9", .op = NTX_OP_RTS, .niov = 9, .piov = 9, .each = 10,
	  .msg_len = 90, .fails = true },
	{ "rts: niov 0", .op = NTX_OP_RTS, .msg_len = 0, .fails = true },
	{ "rts: truncated", .op = NTX_OP_RTS, .niov = 2, .piov = 2,
	  .each = 100, .msg_len = 200, .len_adj = -8, .fails = true },
	{ "rts: sum", .op = NTX_OP_RTS, .niov = 2, .piov = 2, .each = 100,
	  .msg_len = 300, .fails = true },
	/* CTS */
	{ "cts: id", .op = NTX_OP_CTS, .sreq = ID_BOGUS, .msg_len = 10,
	  .fails = true },
	{ "cts: length", .op = NTX_OP_CTS, .sreq = ID_SEND,
	  .msg_len = 1u << 30, .setup = S_SEND, .fails = true },
	{ "cts: in range", .op = NTX_OP_CTS, .sreq = ID_SEND, .msg_len = 100,
	  .setup = S_SEND },
	/* DATA */
	{ "data: id", .op = NTX_OP_DATA, .rreq = ID_BOGUS, .raw = 10,
	  .fails = true },
	{ "data: offset", .op = NTX_OP_DATA, .rreq = ID_RECV, .offset = 1,
	  .raw = 10, .setup = S_RECV, .fails = true },
	{ "data: length", .op = NTX_OP_DATA, .rreq = ID_RECV, .raw = 101,
	  .setup = S_RECV, .fails = true },
	{ "data: in range", .op = NTX_OP_DATA, .rreq = ID_RECV, .raw = 10,
	  .setup = S_RECV },
	/* FIN, ACK */
	{ "fin: id", .op = NTX_OP_FIN, .sreq = ID_BOGUS, .fails = true },
	{ "fin: error status", .op = NTX_OP_FIN, .sreq = ID_SEND, .status = 5,
	  .setup = S_SEND },
	{ "ack: id", .op = NTX_OP_ACK, .sreq = ID_BOGUS, .fails = true },
	{ "ack: state", .op = NTX_OP_ACK, .sreq = ID_SEND, .setup = S_SEND,
	  .fails = true },
	/* SPLIT, DONE */
	{ "split: id", .op = NTX_OP_SPLIT, .sreq = ID_BOGUS, .niov = 1,
	  .piov = 1, .each = 10, .msg_len = 10, .fails = true },
	{ "split: niov", .op = NTX_OP_SPLIT, .sreq = ID_SEND, .niov = 9,
	  .piov = 9, .each = 10, .msg_len = 90, .setup = S_SEND,
	  .fails = true },
	{ "split: truncated", .op = NTX_OP_SPLIT, .sreq = ID_SEND, .niov = 1,
	  .piov = 1, .each = 10, .msg_len = 10, .len_adj = -1,
	  .setup = S_SEND, .fails = true },
	{ "split: range", .op = NTX_OP_SPLIT, .sreq = ID_SEND, .niov = 1,
	  .piov = 1, .each = 10, .msg_len = 10, .offset = 1u << 20,
	  .setup = S_SEND, .fails = true },
	{ "split: no bulk moves", .op = NTX_OP_SPLIT, .sreq = ID_SEND,
	  .niov = 1, .piov = 1, .each = 10, .msg_len = 10, .setup = S_SEND },
	{ "done: id", .op = NTX_OP_DONE, .rreq = ID_BOGUS, .fails = true },
	{ "done: state", .op = NTX_OP_DONE, .rreq = ID_RECV, .setup = S_RECV,
	  .fails = true },
	/* SHEAD, SDATA (a streamed message) */
	{ "shead: whole in the head", .op = NTX_OP_SHEAD, .msg_len = 10,
	  .raw = 10, .fails = true },
	{ "shead: empty", .op = NTX_OP_SHEAD, .msg_len = 10, .fails = true },
	{ "shead: inline", .op = NTX_OP_SHEAD, .flags = NTX_PF_INLINE,
	  .msg_len = 100, .raw = 10, .fails = true },
	{ "shead: offset", .op = NTX_OP_SHEAD, .msg_len = 100, .raw = 10,
	  .offset = 1, .fails = true },
	{ "shead: too long", .op = NTX_OP_SHEAD, .raw = 10,
	  .msg_len = NTX_STREAM_LIMIT + 1, .fails = true },
	{ "shead: in range", .op = NTX_OP_SHEAD, .flags = NTX_PF_TAGGED,
	  .msg_len = 100, .raw = 10 },
	{ "sdata: no message open", .op = NTX_OP_SDATA, .raw = 10,
	  .fails = true },
	{ "sdata: flags", .op = NTX_OP_SDATA, .flags = NTX_PF_TAGGED,
	  .raw = 10, .fails = true },
	/* one-sided: no MR is registered, keys are rejected and answered */
	{ "write: length", .op = NTX_OP_WRITE, .msg_len = 8, .raw = 9,
	  .fails = true },
	{ "write: id", .op = NTX_OP_WRITE, .msg_len = 8, .raw = 8,
	  .sreq = ID_BOGUS },
	{ "write: niov", .op = NTX_OP_WRITE, .msg_len = 8, .raw = 8,
	  .niov = 9 },
	{ "write: truncated", .op = NTX_OP_WRITE, .msg_len = 8, .rreq = 9,
	  .fails = true },
	{ "write_cma: no bulk moves", .op = NTX_OP_WRITE_CMA, .niov = 1,
	  .piov = 1, .each = 8, .msg_len = 8, .fails = true },
	{ "write_cma: niov", .op = NTX_OP_WRITE_CMA, .niov = 9, .piov = 9,
	  .each = 8, .msg_len = 72, .fails = true },
	{ "read_cma: truncated", .op = NTX_OP_READ_CMA, .niov = 1, .piov = 1,
	  .each = 8, .msg_len = 8, .len_adj = -4, .fails = true },
	{ "read: length", .op = NTX_OP_READ, .msg_len = 8, .cq_data = 8,
	  .raw = 4, .fails = true },
	{ "read: segment", .op = NTX_OP_READ, .msg_len = 8192,
	  .cq_data = 8192, .fails = true },
	{ "read: id", .op = NTX_OP_READ, .msg_len = 8, .cq_data = 8,
	  .sreq = ID_BOGUS },
	{ "read: niov", .op = NTX_OP_READ, .msg_len = 8, .cq_data = 8,
	  .niov = 9 },
	{ "atomic: id", .op = NTX_OP_ATOMIC, .niov = DT_SUM, .msg_len = 8,
	  .raw = 8, .sreq = ID_BOGUS },
	{ "atomic: length", .op = NTX_OP_ATOMIC, .niov = DT_SUM, .msg_len = 8,
	  .raw = 9, .fails = true },
	{ "atomic: truncated", .op = NTX_OP_ATOMIC, .niov = DT_SUM,
	  .msg_len = 8, .raw = 4, .fails = true },
	{ "atomic: element size", .op = NTX_OP_ATOMIC, .niov = DT_SUM,
	  .msg_len = 6, .raw = 6, .fails = true },
	{ "atomic: too large", .op = NTX_OP_ATOMIC, .niov = DT_SUM,
	  .msg_len = NTX_ATOMIC_MAX_BYTES + 4,
	  .raw = NTX_ATOMIC_MAX_BYTES + 4, .fails = true },
	{ "atomic: datatype", .op = NTX_OP_ATOMIC, .niov = 0xff00 | FI_SUM,
	  .msg_len = 8, .raw = 8 },
	{ "rma_resp: id", .op = NTX_OP_RMA_RESP, .sreq = ID_BOGUS,
	  .fails = true },
	{ "rma_resp: send request", .op = NTX_OP_RMA_RESP, .sreq = ID_SEND,
	  .raw = 10, .setup = S_SEND, .fails = true },
	{ "rma_check: id", .op = NTX_OP_RMA_CHECK, .status = NTX_OP_WRITE,
	  .niov = 1, .piov = 1, .each = 8, .sreq = ID_BOGUS },
	{ "rma_check: niov 0", .op = NTX_OP_RMA_CHECK, .status = NTX_OP_WRITE,
	  .fails = true },
	{ "rma_check: niov 9", .op = NTX_OP_RMA_CHECK, .status = NTX_OP_WRITE,
	  .niov = 9, .piov = 9, .each = 8, .fails = true },
	{ "rma_check: truncated", .op = NTX_OP_RMA_CHECK,
	  .status = NTX_OP_WRITE, .niov = 2, .piov = 2, .each = 8,
	  .len_adj = -1, .fails = true },
	{ "rma_check: op", .op = NTX_OP_RMA_CHECK, .status = 99, .niov = 1,
	  .piov = 1, .each = 8, .fails = true },
	{ "rma_notify: unchecked", .op = NTX_OP_RMA_NOTIFY,
	  .flags = NTX_PF_DATA, .msg_len = 8, .fails = true },
	{ "rma_notify: length", .op = NTX_OP_RMA_NOTIFY, .flags = NTX_PF_DATA,
	  .raw = 4, .fails = true },
	/* a job-key exchange on a keyless connected VC */
	{ "auth: challenge", .op = NTX_OP_AUTH, .status = NTX_AUTH_CHAL,
	  .raw = sizeof(struct ntx_wire_auth), .fails = true },
	{ "auth: proof", .op = NTX_OP_AUTH, .status = NTX_AUTH_PROOF,
	  .raw = 32, .fails = true },
	{ "auth: stage", .op = NTX_OP_AUTH, .status = 9, .fails = true },
	{ "auth: truncated", .op = NTX_OP_AUTH, .status = NTX_AUTH_CHAL,
	  .raw = 7, .fails = true },
	/* connection management to an RDM endpoint, or malformed */
	{ "cm: to an RDM endpoint", .op = NTX_OP_CM, .status = NTX_CM_REQ,
	  .fails = true },
	{ "cm: flags", .op = NTX_OP_CM, .flags = NTX_PF_TAGGED,
	  .status = NTX_CM_ACCEPT, .fails = true },
	{ "cm: data length", .op = NTX_OP_CM, .status = NTX_CM_ACCEPT,
	  .msg_len = 8, .raw = 4, .fails = true },
	{ "cm: too much data", .op = NTX_OP_CM, .status = NTX_CM_REQ,
	  .msg_len = NTX_CM_DATA_MAX + 1, .raw = NTX_CM_DATA_MAX + 1,
	  .fails = true },
	/* a scalable peer's contexts (DESIGN §3, "Scalable endpoints") */
	{ "names: one", .op = NTX_OP_NAMES, .msg_len = 1, .raw = 32,
	  .fails = true },
	{ "names: too many", .op = NTX_OP_NAMES, .msg_len = NTX_SEP_CTX_MAX + 1,
	  .raw = 32 * (NTX_SEP_CTX_MAX + 1), .fails = true },
	{ "names: length", .op = NTX_OP_NAMES, .msg_len = 2, .raw = 63,
	  .fails = true },
	{ "names: flags", .op = NTX_OP_NAMES, .flags = NTX_PF_TAGGED,
	  .msg_len = 2, .raw = 64, .fails = true },
	{ "names: not names", .op = NTX_OP_NAMES, .msg_len = 2, .raw = 64,
	  .fails = true },
};

#define TAG_LIVE 0xc0ffeeull

/* A tagged message from one node to another gets through. */
static void live(int from, int to)
{
	uint64_t v = 0xabcd0000ull + (uint64_t)from, got = 0;
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	int ctx, seen = 0;

	cr_assert_eq(et_recv(to, et[to].addr[from], &got, 8, TAG_LIVE, 0, &ctx,
			     FI_TAGGED), 0);
	cr_assert_eq(et_send(from, to, &v, 8, TAG_LIVE, NULL, FI_TAGGED), 0);
	for (int r = 0; r < 50 && !seen; r++) {
		et_progress(1);
		/* errors of the case's own requests are not looked at */
		while (et_cq_err(to, &err))
			;
		while (et_cq_read(to, &e, NULL))
			seen |= e.op_context == &ctx;
	}
	cr_assert(seen, "%d -> %d: no message (vc %p state %d)", from, to,
		  (void *)et_vc_to(from, to),
		  et_vc_to(from, to) ? (int)et_vc_to(from, to)->state : -1);
	cr_assert_eq(got, v);
}

static struct ntx_req *pending_in(struct ntx_vc *vc, enum ntx_req_state st)
{
	struct ntx_list *it;

	ntx_list_foreach(&vc->pending, it) {
		struct ntx_req *r = ntx_container_of(it, struct ntx_req, entry);

		if (r->state == st)
			return r;
	}
	return NULL;
}

static uint8_t big[5000], rbuf[5000];

/* node 1 gets a request in the state the row needs; its id */
static uint64_t setup_req(enum vsetup s, struct ntx_vc *vc,
			  struct ntx_be_conn *conn)
{
	struct ntx_wire_iov w = { (uintptr_t)big, 100, 0 };
	struct ntx_wire_hdr rts = { .op = NTX_OP_RTS, .flags = NTX_PF_TAGGED,
				    .niov = 1, .tag = 78, .msg_len = 100,
				    .sreq = 1 };
	struct ntx_req *r;

	if (s == S_SEND) {
		/* RTS to node 0, which posts no receive: it waits */
		cr_assert_eq(et_send(1, 0, big, sizeof(big), 77, NULL,
				     FI_TAGGED), 0);
		et_progress(2);
		r = pending_in(vc, NTX_RS_RTS_SENT);
	} else {
		/* node 0's RTS, as if sent; our CTS goes nowhere */
		cr_assert_eq(et_recv(1, FI_ADDR_UNSPEC, rbuf, sizeof(rbuf), 78,
				     0, NULL, FI_TAGGED), 0);
		ntx_loop_inject(et_be(1))->drop_sends = true;
		ntx_loop_deliver(conn, &rts, &w, sizeof(w));
		ntx_loop_inject(et_be(1))->drop_sends = false;
		r = pending_in(vc, NTX_RS_RNDV_DATA);
	}
	cr_assert_not_null(r, "setup %d", s);
	return r->id;
}

static uint64_t id_of(uint64_t v, uint64_t req)
{
	return v == ID_SEND || v == ID_RECV ? req : v;
}

static void run_case(const struct vcase *c)
{
	uint8_t payload[16 * sizeof(struct ntx_wire_iov) + 4096] = { 0 };
	struct ntx_wire_iov *w = (struct ntx_wire_iov *)payload;
	struct ntx_wire_hdr h = {
		.op = c->op, .flags = c->flags, .niov = c->niov,
		.status = c->status, .msg_len = c->msg_len,
		.offset = c->offset, .cq_data = c->cq_data,
	};
	struct ntx_be_conn *conn;
	struct ntx_vc *vc;
	uint64_t req = 0;
	size_t len;

	et_open(3);
	live(0, 1); /* node 1 accepts both */
	live(2, 1);
	vc = et_vc_to(1, 0);
	cr_assert_not_null(vc);
	conn = ntx_loop_conn_of(et_be(1), vc);
	cr_assert_not_null(conn);
	if (c->setup != S_NONE)
		req = setup_req(c->setup, vc, conn);
	h.sreq = id_of(c->sreq, req);
	h.rreq = id_of(c->rreq, req);
	for (uint16_t i = 0; i < c->piov; i++) {
		w[i].addr = (uintptr_t)big;
		w[i].len = c->each;
		w[i].key = ID_BOGUS;
	}
	len = c->piov ? (size_t)((int)(c->piov * sizeof(*w)) + c->len_adj)
		      : c->raw;
	cr_assert_leq(len, sizeof(payload));
	/* what node 1 answers goes nowhere: node 0 is not the peer that
	 * sent this packet, and would fail its side of the VC */
	ntx_loop_inject(et_be(1))->drop_sends = true;
	ntx_loop_deliver(conn, &h, payload, len);
	et_progress(3);
	ntx_loop_inject(et_be(1))->drop_sends = false;
	vc = et_vc_to(1, 0);
	if (c->fails) {
		cr_assert(!vc || vc->state == NTX_VC_ERROR,
			  "%s: the VC should have failed", c->what);
	} else {
		cr_assert(vc && vc->state == NTX_VC_CONNECTED,
			  "%s: the VC should have stayed", c->what);
		live(0, 1);
		live(1, 0);
	}
	live(2, 1); /* the other peer is not touched */
	live(1, 2);
	et_close();
}

Test(validate, every_op_malformed)
{
	bool seen[NTX_OP_MAX + 1] = { false };

	const char *only = getenv("NTX_VALIDATE_CASE"); /* one row, by name */

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		seen[cases[i].op] = true;
		if (only && strcmp(only, cases[i].what))
			continue;
		cr_log_info("case %s", cases[i].what);
		run_case(&cases[i]);
	}
	/* a new op code needs its rows */
	for (int op = NTX_OP_EAGER; op < NTX_OP_MAX; op++)
		cr_assert(seen[op], "op %d has no row", op);
}
