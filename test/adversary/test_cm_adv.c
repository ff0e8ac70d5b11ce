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

#include "ntx_test_cm.h"
#include "ntx_adv.h"
#include "ntx/ntx.h"
#include "ntx_tcp_wire.h"

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
		while (poll(&p, 1, CM_WAIT_MS) == 1) {
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
static char cma_serve(struct cm *c, int sock)
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

Test(adversary, forged_cm_packets_are_refused, .timeout = 120)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_cq_data_entry ent;
	char got[16] = "";
	struct ntx_addr name;
	size_t len;
	struct cm c;
	uint32_t ev;
	int sock, seen = 0;
	pid_t pid;

	pid = t_fork(&sock, adv_forge_cm);
	cm_listen(&c, "tcp"); /* local peers through tcp (cm_domain) */
	cm_client(&c, "tcp");
	cr_assert_eq(fi_connect(c.cli.ep, c.cli.fi->dest_addr, NULL, 0), 0);
	cr_assert_eq(cm_event(&c, &ev, buf, sizeof(buf)), (ssize_t)sizeof(*e));
	cr_assert_eq(ev, FI_CONNREQ);

	/* 1. a forged ACCEPT while the request is unanswered */
	len = sizeof(name);
	cr_assert_eq(fi_getname(&c.cli.ep->fid, &name, &len), 0);
	cr_assert_eq(t_sock_write(sock, &name, sizeof(name)), 0);
	cr_assert_eq(cma_serve(&c, sock), 'k',
		     "the forger's connection to the client stayed open");

	/* the real accept still connects both */
	cm_open_ep(&c, &c.srv, e->info);
	cr_assert_eq(fi_recv(c.srv.ep, got, sizeof(got), NULL, 0, NULL), 0);
	cr_assert_eq(fi_accept(c.srv.ep, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(cm_event(&c, &ev, buf, sizeof(buf)),
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
	cr_assert_eq(cm_comp(&c.cli, &ent), 1);
	cr_assert_eq(cm_comp(&c.srv, &ent), 1);
	cr_assert_str_eq(got, "honest");
	cr_assert_eq(fi_shutdown(c.cli.ep, 0), 0);
	seen = 0;
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(cm_event(&c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e));
		cr_assert_eq(ev, FI_SHUTDOWN);
		seen |= e->fid == &c.cli.ep->fid ? 1 : 2;
	}
	cr_assert_eq(seen, 3);
	cm_close(&c);
	close(sock);
}
