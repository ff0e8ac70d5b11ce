/*
 * Forged connection management (DESIGN §3, "MSG endpoints"): a stranger
 * that speaks ntx's tcp wire format sends NTX_OP_CM packets to MSG
 * endpoints on the tcp domain — an ACCEPT to a client whose request is
 * still unanswered, a SHUTDOWN to both ends of a live connection — with a
 * connection id of its own guess and from its own VC. The victim must
 * close the stranger's connection, report nothing on the EQ, and the
 * honest connection must go on: the real accept connects, data flows, the
 * real shutdown ends it.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_adv.h"
#include "ntx/ntx.h"
#include "ntx_tcp_wire.h"

#define CMA_WAIT_MS 20000

struct cma_ep {
	struct fi_info *fi;
	struct fid_domain *dom;
	struct fid_ep *ep;
	struct fid_cq *cq;
};

struct cma {
	struct fid_fabric *fab;
	struct fid_eq *eq;
	struct fid_pep *pep;
	struct fi_info *pfi;
	struct cma_ep cli, srv;
};

static struct fi_info *cma_hints(void)
{
	struct fi_info *h = t_hints(FI_MSG);

	free(h->domain_attr->name);
	h->domain_attr->name = strdup("tcp");
	h->ep_attr->type = FI_EP_MSG;
	return h;
}

static void cma_open_ep(struct cma *c, struct cma_ep *e, struct fi_info *fi)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA };

	e->fi = fi;
	cr_assert_eq(fi_domain(c->fab, fi, &e->dom, NULL), 0);
	cr_assert_eq(fi_endpoint(e->dom, fi, &e->ep, NULL), 0);
	cr_assert_eq(fi_cq_open(e->dom, &ca, &e->cq, NULL), 0);
	cr_assert_eq(fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(e->ep, &c->eq->fid, 0), 0);
	cr_assert_eq(fi_enable(e->ep), 0);
}

static void cma_close_ep(struct cma_ep *e)
{
	cr_assert_eq(fi_close(&e->ep->fid), 0);
	cr_assert_eq(fi_close(&e->cq->fid), 0);
	cr_assert_eq(fi_close(&e->dom->fid), 0);
	fi_freeinfo(e->fi);
}

/* The attacker: for each of two names it reads from sock, a connection
 * with a proved name of its own, one forged CM packet (stage, a guessed
 * id), then its verdict: 'k' when the victim closed the connection. */
static int adv_forge_cm(int sock)
{
	static const int32_t stage[2] = { NTX_CM_ACCEPT, NTX_CM_SHUTDOWN };

	for (int i = 0; i < 2; i++) {
		struct ntx_wire_hdr h = { .op = NTX_OP_CM, .status = stage[i],
					  .sreq = 0x5eed0000u + (unsigned)i };
		struct ntx_addr v;
		struct pollfd p;
		char verdict = 'x';
		int fd;

		CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
		fd = adv_connect(&v);
		CHK(fd >= 0);
		CHK(adv_frame(fd, NTX_TCP_ENTRY, &h, NULL, 0) == 0);
		/* then only the end of the stream: the victim closed it */
		p = (struct pollfd){ .fd = fd, .events = POLLIN };
		while (poll(&p, 1, CMA_WAIT_MS) == 1) {
			struct ntx_tcp_frame f;
			ssize_t n = read(fd, &f, sizeof(f));

			if (n == 0) {
				verdict = 'k';
				break;
			}
			if (n < 0)
				break;
		}
		close(fd);
		CHK(write(sock, &verdict, 1) == 1);
	}
	return 0;
}

/* Progresses the EQ and both CQs until the attacker's verdict arrives on
 * sock; nothing may show up meanwhile. The verdict. */
static char cma_serve(struct cma *c, int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
	struct fi_cq_data_entry ent;
	uint32_t ev;
	char verdict = 0;

	for (;;) {
		cr_assert_eq(fi_eq_read(c->eq, &ev, buf, sizeof(buf), 0),
			     -FI_EAGAIN, "an EQ event while attacked: %u", ev);
		if (c->cli.cq)
			cr_assert_eq(fi_cq_read(c->cli.cq, &ent, 1), -FI_EAGAIN);
		if (c->srv.cq)
			cr_assert_eq(fi_cq_read(c->srv.cq, &ent, 1), -FI_EAGAIN);
		if (poll(&p, 1, 1) == 1)
			break;
	}
	cr_assert_eq(read(sock, &verdict, 1), 1);
	return verdict;
}

static ssize_t cma_event(struct cma *c, uint32_t *ev, void *buf, size_t len)
{
	return fi_eq_sread(c->eq, ev, buf, len, CMA_WAIT_MS, 0);
}

/* One completion on e's CQ within CMA_WAIT_MS. */
static int cma_comp(struct cma_ep *e, struct fi_cq_data_entry *out)
{
	for (int i = 0; i < CMA_WAIT_MS; i++) {
		ssize_t n = fi_cq_read(e->cq, out, 1);

		if (n != -FI_EAGAIN)
			return (int)n;
		usleep(1000);
	}
	return -FI_ETIMEDOUT;
}

Test(adversary, forged_cm_packets_are_refused, .timeout = 120)
{
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_cq_data_entry ent;
	struct fi_info *h, *fi;
	char pname[T_NAMELEN], got[16] = "";
	struct ntx_addr name;
	size_t len = sizeof(pname);
	struct cma c;
	uint32_t ev;
	int sock, seen = 0;
	pid_t pid;

	memset(&c, 0, sizeof(c));
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	pid = t_fork(&sock, adv_forge_cm);
	h = cma_hints();
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &c.pfi), 0);
	fi_freeinfo(h);
	cr_assert_eq(fi_fabric(c.pfi->fabric_attr, &c.fab, NULL), 0);
	cr_assert_eq(fi_eq_open(c.fab, &ea, &c.eq, NULL), 0);
	cr_assert_eq(fi_passive_ep(c.fab, c.pfi, &c.pep, NULL), 0);
	cr_assert_eq(fi_pep_bind(c.pep, &c.eq->fid, 0), 0);
	cr_assert_eq(fi_listen(c.pep), 0);
	cr_assert_eq(fi_getname(&c.pep->fid, pname, &len), 0);
	h = cma_hints();
	h->dest_addr = malloc(T_NAMELEN);
	memcpy(h->dest_addr, pname, T_NAMELEN);
	h->dest_addrlen = T_NAMELEN;
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	fi_freeinfo(h);
	cma_open_ep(&c, &c.cli, fi);
	cr_assert_eq(fi_connect(c.cli.ep, fi->dest_addr, NULL, 0), 0);
	cr_assert_eq(cma_event(&c, &ev, buf, sizeof(buf)), (ssize_t)sizeof(*e));
	cr_assert_eq(ev, FI_CONNREQ);

	/* 1. a forged ACCEPT while the request is unanswered */
	len = sizeof(name);
	cr_assert_eq(fi_getname(&c.cli.ep->fid, &name, &len), 0);
	cr_assert_eq(t_sock_write(sock, &name, sizeof(name)), 0);
	cr_assert_eq(cma_serve(&c, sock), 'k',
		     "the forger's connection to the client stayed open");

	/* the real accept still connects both */
	cma_open_ep(&c, &c.srv, e->info);
	cr_assert_eq(fi_recv(c.srv.ep, got, sizeof(got), NULL, 0, NULL), 0);
	cr_assert_eq(fi_accept(c.srv.ep, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(cma_event(&c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e));
		cr_assert_eq(ev, FI_CONNECTED);
		seen |= e->fid == &c.cli.ep->fid ? 1 : 2;
	}
	cr_assert_eq(seen, 3);

	/* 2. a forged SHUTDOWN to the server endpoint of a live connection */
	len = sizeof(name);
	cr_assert_eq(fi_getname(&c.srv.ep->fid, &name, &len), 0);
	cr_assert_eq(t_sock_write(sock, &name, sizeof(name)), 0);
	cr_assert_eq(cma_serve(&c, sock), 'k',
		     "the forger's connection to the server stayed open");
	cr_assert_eq(t_join(pid), 0, "attacker failed");

	/* the connection goes on: data, then the real shutdown */
	cr_assert_eq(fi_send(c.cli.ep, "honest", 7, NULL, 0, NULL), 0);
	cr_assert_eq(cma_comp(&c.cli, &ent), 1);
	cr_assert_eq(cma_comp(&c.srv, &ent), 1);
	cr_assert_str_eq(got, "honest");
	cr_assert_eq(fi_shutdown(c.cli.ep, 0), 0);
	seen = 0;
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(cma_event(&c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e));
		cr_assert_eq(ev, FI_SHUTDOWN);
		seen |= e->fid == &c.cli.ep->fid ? 1 : 2;
	}
	cr_assert_eq(seen, 3);
	cma_close_ep(&c.cli);
	cma_close_ep(&c.srv);
	cr_assert_eq(fi_close(&c.pep->fid), 0);
	cr_assert_eq(fi_close(&c.eq->fid), 0);
	cr_assert_eq(fi_close(&c.fab->fid), 0);
	fi_freeinfo(c.pfi);
	close(sock);
}
