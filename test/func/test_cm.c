/*
 * FI_EP_MSG endpoints (DESIGN §3, "MSG endpoints"): a passive endpoint,
 * connect / accept / reject / shutdown with connection data on the EQ,
 * and data both ways, on the shm window and through the network back
 * ends (tcp, udp: local peers through the network).
 */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test_cm.h"

#define CM_BIG (256 * 1024) /* rendezvous, not eager */

/* Connects the client with data, accepts with data: both see
 * FI_CONNECTED for their own endpoint, the client with the server's
 * data. The server posted a receive of rbuf first. */
static void cm_connect(struct cm *c, const char *domain, void *rbuf,
		       size_t rlen)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64];
	struct fi_eq_cm_entry *e = (void *)buf;
	bool cli = false, srv = false;
	uint32_t ev;
	ssize_t n;

	cm_client(c, domain);
	cr_assert_eq(fi_connect(c->cli.ep, c->cli.fi->dest_addr, "hello", 6), 0);
	n = cm_event(c, &ev, buf, sizeof(buf));
	cr_assert_eq(n, (ssize_t)sizeof(*e) + 6, "CONNREQ: %zd", n);
	cr_assert_eq(ev, FI_CONNREQ);
	cr_assert_eq(e->fid, &c->pep->fid);
	cr_assert_str_eq((char *)e->data, "hello");
	cr_assert_not_null(e->info->handle);
	cm_open_ep(c, &c->srv, e->info);
	if (rbuf)
		cr_assert_eq(fi_recv(c->srv.ep, rbuf, rlen, NULL, 0, rbuf), 0);
	cr_assert_eq(fi_accept(c->srv.ep, "welcome", 8), 0);
	cr_assert_eq(fi_accept(c->srv.ep, NULL, 0), -FI_EOPBADSTATE);
	for (int i = 0; i < 2; i++) {
		n = cm_event(c, &ev, buf, sizeof(buf));
		cr_assert_geq(n, (ssize_t)sizeof(*e), "CONNECTED: %zd", n);
		cr_assert_eq(ev, FI_CONNECTED);
		if (e->fid == &c->cli.ep->fid) {
			cr_assert_eq(n, (ssize_t)sizeof(*e) + 8);
			cr_assert_str_eq((char *)e->data, "welcome");
			cli = true;
		} else {
			cr_assert_eq(e->fid, &c->srv.ep->fid);
			srv = true;
		}
	}
	cr_assert(cli && srv);
}

/* Sends len bytes from a to b (b's receive already posted when rbuf is
 * NULL here) and checks them. */
static void cm_xfer(struct cm_ep *a, struct cm_ep *b, size_t len,
		    unsigned seed, bool posted, void *rbuf)
{
	uint8_t *s = malloc(len), *r = posted ? rbuf : malloc(len);
	struct fi_cq_data_entry ent;

	t_fill(s, len, seed);
	if (!posted)
		cr_assert_eq(fi_recv(b->ep, r, len, NULL, 0, r), 0);
	cr_assert_eq(fi_send(a->ep, s, len, NULL, FI_ADDR_UNSPEC, s), 0);
	/* a rendezvous send completes once the receiver pulled it: both
	 * make progress */
	for (int done = 0; done != 3;) {
		struct fi_cq_data_entry ea;

		if (fi_cq_read(a->cq, &ea, 1) == 1) {
			cr_assert_eq(ea.op_context, s);
			done |= 1;
		}
		if (fi_cq_read(b->cq, &ent, 1) == 1) {
			cr_assert_eq(ent.op_context, r);
			done |= 2;
		}
	}
	cr_assert_eq(ent.len, len);
	cr_assert_eq(t_check(r, len, seed), 0, "data of %zu bytes", len);
	free(s);
	if (!posted)
		free(r);
}

static void cm_whole(const char *domain)
{
	struct cm c;
	uint8_t first[64], peer[T_NAMELEN], cname[T_NAMELEN];
	struct fi_eq_cm_entry e;
	size_t len = sizeof(peer), clen = sizeof(cname);
	uint32_t ev;

	cm_listen(&c, domain);
	cm_connect(&c, domain, first, sizeof(first));
	cm_xfer(&c.cli, &c.srv, sizeof(first), 1, true, first);
	cm_xfer(&c.srv, &c.cli, 8, 2, false, NULL);
	cm_xfer(&c.cli, &c.srv, CM_BIG, 3, false, NULL);
	cm_xfer(&c.srv, &c.cli, CM_BIG, 4, false, NULL);
	cr_assert_eq(fi_getpeer(c.srv.ep, peer, &len), 0);
	cr_assert_eq(fi_getname(&c.cli.ep->fid, cname, &clen), 0);
	cr_assert(!memcmp(peer, cname, T_NAMELEN), "server's peer: client");
	/* the client ends it: each endpoint hears FI_SHUTDOWN once, also
	 * when the server shuts down too */
	cr_assert_eq(fi_shutdown(c.cli.ep, 0), 0);
	for (int i = 0, cli = 0, srv = 0; i < 2; i++) {
		cr_assert_eq(cm_event(&c, &ev, &e, sizeof(e)), (ssize_t)sizeof(e));
		cr_assert_eq(ev, FI_SHUTDOWN);
		cli += e.fid == &c.cli.ep->fid;
		srv += e.fid == &c.srv.ep->fid;
		cr_assert(cli <= 1 && srv <= 1, "one each");
		if (srv)
			cr_assert_eq(fi_shutdown(c.srv.ep, 0), 0);
	}
	cr_assert_eq(fi_eq_read(c.eq, &ev, &e, sizeof(e), 0), -FI_EAGAIN);
	cr_assert_eq(fi_send(c.cli.ep, "x", 1, NULL, 0, NULL), -FI_ENOTCONN);
	cm_close(&c);
}

Test(cm, connect_accept_data_shutdown_shm, .timeout = 60)
{
	cm_whole("shm");
}

Test(cm, connect_accept_data_shutdown_tcp, .timeout = 60)
{
	cm_whole("tcp");
}

Test(cm, connect_accept_data_shutdown_udp, .timeout = 60)
{
	cm_whole("udp");
}

Test(cm, a_rejected_client_gets_the_data_of_the_refusal, .timeout = 60)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 64], ed[16];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_eq_err_entry err = { .err_data = ed,
				       .err_data_size = sizeof(ed) };
	struct fid_ep *ep;
	struct cm c;
	uint32_t ev;

	cm_listen(&c, "shm");
	cm_client(&c, "shm");
	cr_assert_eq(fi_connect(c.cli.ep, c.cli.fi->dest_addr, NULL, 0), 0);
	cr_assert_eq(cm_event(&c, &ev, buf, sizeof(buf)), (ssize_t)sizeof(*e));
	cr_assert_eq(ev, FI_CONNREQ);
	cr_assert_eq(fi_reject(c.pep, e->info->handle, "no", 3), 0);
	cr_assert_eq(fi_reject(c.pep, e->info->handle, NULL, 0), -FI_EINVAL,
		     "a request is answered once");
	cr_assert_eq(fi_domain(c.fab, e->info, &c.srv.dom, NULL), 0);
	cr_assert_eq(fi_endpoint(c.srv.dom, e->info, &ep, NULL), -FI_EINVAL,
		     "an endpoint of a rejected request");
	fi_freeinfo(e->info);
	cr_assert_eq(cm_event(&c, &ev, buf, sizeof(buf)), -FI_EAVAIL);
	cr_assert_eq(fi_eq_readerr(c.eq, &err, 0), (ssize_t)sizeof(err));
	cr_assert_eq(err.err, FI_ECONNREFUSED);
	cr_assert_eq(err.fid, &c.cli.ep->fid);
	cr_assert_eq(err.err_data_size, 3);
	cr_assert_str_eq((char *)ed, "no");
	cr_assert_eq(fi_send(c.cli.ep, "x", 1, NULL, 0, NULL), -FI_ENOTCONN);
	cm_close(&c);
}

/* ... and the client's posted receive, which nothing can fill any more,
 * is flushed with an error completion (a broken connection's receive
 * queue), not left waiting */
Test(cm, the_peer_closing_its_endpoint_is_a_shutdown, .timeout = 60)
{
	struct fi_eq_cm_entry e;
	struct cm c;
	uint32_t ev;
	uint8_t rbuf[64];
	struct fi_cq_data_entry ent;
	int ret;

	cm_listen(&c, "tcp");
	cm_connect(&c, "tcp", NULL, 0);
	cr_assert_eq(fi_recv(c.cli.ep, rbuf, sizeof(rbuf), NULL, 0, rbuf), 0);
	cr_assert_eq(fi_cq_read(c.cli.cq, &ent, 1), -FI_EAGAIN);
	cm_close_ep(&c.srv);
	cr_assert_eq(cm_event(&c, &ev, &e, sizeof(e)), (ssize_t)sizeof(e));
	cr_assert_eq(ev, FI_SHUTDOWN);
	cr_assert_eq(e.fid, &c.cli.ep->fid);
	ret = cm_comp(&c.cli, NULL);
	cr_assert(ret == -FI_ECANCELED || ret == -FI_ECONNRESET, "flushed: %d",
		  ret);
	cr_assert_eq(fi_cancel(&c.cli.ep->fid, rbuf), -FI_ENOENT);
	cm_close(&c);
}

Test(cm, a_stranger_cannot_send_to_a_connected_endpoint, .timeout = 60)
{
	uint8_t got[64], name[T_NAMELEN];
	size_t len = sizeof(name);
	struct fi_cq_data_entry ent;
	struct tctx s;
	fi_addr_t a;
	struct cm c;

	cm_listen(&c, "shm");
	cm_connect(&c, "shm", got, sizeof(got));
	/* an RDM endpoint that learnt the server endpoint's name */
	cr_assert_eq(fi_getname(&c.srv.ep->fid, name, &len), 0);
	cr_assert_eq(t_open(&s, FI_MSG), 0);
	cr_assert_eq(t_insert(&s, name, &a), 0);
	cr_assert_eq(fi_send(s.ep, "forged", 7, NULL, a, NULL), 0);
	/* both progress until the forged send is done with (it left, or
	 * its connection was closed); the server's receive stays posted */
	for (int i = 0; i < CM_WAIT_MS; i++) {
		struct fi_cq_tagged_entry se;
		ssize_t n = fi_cq_read(s.cq, &se, 1);

		if (n == -FI_EAVAIL || n == 1)
			break;
		cr_assert_eq(fi_cq_read(c.srv.cq, &ent, 1), -FI_EAGAIN,
			     "nothing from the stranger");
		usleep(1000);
	}
	for (int i = 0; i < 100; i++)
		cr_assert_eq(fi_cq_read(c.srv.cq, &ent, 1), -FI_EAGAIN,
			     "nothing from the stranger");
	/* the peer's message is the first the receive gets */
	cr_assert_eq(fi_send(c.cli.ep, "honest", 7, NULL, 0, NULL), 0);
	cr_assert_eq(cm_comp(&c.cli, NULL), 1);
	cr_assert_eq(cm_comp(&c.srv, &ent), 1);
	cr_assert_str_eq((char *)got, "honest");
	t_close(&s);
	cm_close(&c);
}

Test(cm, fabtests_style_service_names_the_passive_endpoint, .timeout = 60)
{
	struct fi_info *h = cm_hints("shm"), *fi;
	char svc[16];
	struct cm c;

	/* the server asks for its service with FI_SOURCE, the client
	 * names node and service */
	cr_assert_eq(t_free_service(svc, sizeof(svc), 20000, 12000), 0);
	memset(&c, 0, sizeof(c));
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, svc, FI_SOURCE, h, &c.pfi), 0);
	cr_assert_eq(fi_fabric(c.pfi->fabric_attr, &c.fab, NULL), 0);
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	cr_assert_eq(fi_eq_open(c.fab, &ea, &c.eq, NULL), 0);
	cr_assert_eq(fi_passive_ep(c.fab, c.pfi, &c.pep, NULL), 0);
	cr_assert_eq(fi_pep_bind(c.pep, &c.eq->fid, 0), 0);
	cr_assert_eq(fi_listen(c.pep), 0);
	cr_assert_eq(fi_getinfo(T_VERSION, "localhost", svc, 0, h, &fi), 0);
	fi_freeinfo(h);
	cm_open_ep(&c, &c.cli, fi);
	cr_assert_eq(fi_connect(c.cli.ep, fi->dest_addr, NULL, 0), 0);
	struct fi_eq_cm_entry e;
	uint32_t ev;
	cr_assert_eq(cm_event(&c, &ev, &e, sizeof(e)), (ssize_t)sizeof(e));
	cr_assert_eq(ev, FI_CONNREQ);
	cm_open_ep(&c, &c.srv, e.info);
	cr_assert_eq(fi_accept(c.srv.ep, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(cm_event(&c, &ev, &e, sizeof(e)), (ssize_t)sizeof(e));
		cr_assert_eq(ev, FI_CONNECTED);
	}
	cm_xfer(&c.cli, &c.srv, 100, 5, false, NULL);
	cm_close(&c);
}

/* A passive endpoint as fabtests' fi_msg_sockets opens it: FI_SOCKADDR_IN
 * hints, fi_getinfo of the node with FI_SOURCE, fi_passive_ep without a
 * source address, then fi_setname to 127.0.0.1:svc; fi_getname gives
 * that address back. */
static struct fid_pep *sin_pep(struct cm *c, struct fi_info *h,
			       const char *svc, struct sockaddr_in *name)
{
	struct sockaddr_in got = { 0 };
	size_t len = sizeof(got);
	struct fi_info *fi;
	struct fid_pep *pep;
	void *src;

	cr_assert_eq(fi_getinfo(T_VERSION, "127.0.0.1", NULL, FI_SOURCE, h,
				&fi), 0);
	cr_assert_eq(fi->addr_format, FI_SOCKADDR_IN);
	cr_assert_eq(fi->src_addrlen, sizeof(struct sockaddr_in));
	if (!c->fab)
		cr_assert_eq(fi_fabric(fi->fabric_attr, &c->fab, NULL), 0);
	src = fi->src_addr;
	fi->src_addr = NULL;
	fi->src_addrlen = 0;
	cr_assert_eq(fi_passive_ep(c->fab, fi, &pep, NULL), 0);
	fi->src_addr = src;
	fi->src_addrlen = sizeof(struct sockaddr_in);
	memset(name, 0, sizeof(*name));
	name->sin_family = AF_INET;
	name->sin_port = htons((uint16_t)atoi(svc));
	name->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(fi_setname(&pep->fid, name, sizeof(*name)), 0);
	cr_assert_eq(fi_getname(&pep->fid, &got, &len), 0);
	cr_assert_eq(len, sizeof(got));
	cr_assert(!memcmp(&got, name, sizeof(got)), "port %u",
		  ntohs(got.sin_port));
	fi_freeinfo(fi);
	return pep;
}

static void sin_is(struct fid *fid, const struct sockaddr_in *want,
		   bool peer, const char *what)
{
	struct sockaddr_in got = { 0 };
	size_t len = sizeof(got);

	cr_assert_eq(peer ? fi_getpeer((struct fid_ep *)fid, &got, &len)
			  : fi_getname(fid, &got, &len), 0, "%s", what);
	cr_assert_eq(len, sizeof(got), "%s", what);
	cr_assert(!memcmp(&got, want, sizeof(got)), "%s: port %u, want %u",
		  what, ntohs(got.sin_port), ntohs(want->sin_port));
}

/* fabtests' fi_msg_sockets, which found no entry (MSG endpoints had ntx
 * names only): FI_SOCKADDR_IN names on both sides; the client's endpoint
 * takes the name of a passive endpoint given as the hints' handle; the
 * accepted endpoint is named by the passive endpoint it came through,
 * and the client's peer is the address it connected to, as with TCP
 * sockets. */
static void cm_sockaddr_in(const char *domain)
{
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_info *h = cm_hints(domain), *fi;
	struct sockaddr_in srv, cli;
	struct fi_eq_cm_entry e;
	struct fid_pep *cpep;
	char ssvc[16], csvc[16];
	struct cm c;
	uint32_t ev;

	memset(&c, 0, sizeof(c));
	h->addr_format = FI_SOCKADDR_IN;
	cr_assert_eq(t_free_service(ssvc, sizeof(ssvc), 20000, 6000), 0);
	cr_assert_eq(t_free_service(csvc, sizeof(csvc), 26000, 6000), 0);
	c.pep = sin_pep(&c, h, ssvc, &srv);
	cr_assert_eq(fi_eq_open(c.fab, &ea, &c.eq, NULL), 0);
	cr_assert_eq(fi_pep_bind(c.pep, &c.eq->fid, 0), 0);
	cr_assert_eq(fi_listen(c.pep), 0);
	cr_assert_eq(fi_setname(&c.pep->fid, &srv, sizeof(srv)),
		     -FI_EOPBADSTATE, "listening");

	cpep = sin_pep(&c, h, csvc, &cli);
	h->handle = &cpep->fid;
	cr_assert_eq(fi_getinfo(T_VERSION, "127.0.0.1", ssvc, 0, h, &fi), 0);
	h->handle = NULL;
	fi_freeinfo(h);
	cr_assert_eq(fi->handle, &cpep->fid);
	cr_assert_eq(fi->dest_addrlen, sizeof(srv));
	cr_assert(!memcmp(fi->dest_addr, &srv, sizeof(srv)));
	cm_open_ep(&c, &c.cli, fi);
	cr_assert_eq(fi_close(&cpep->fid), 0);
	sin_is(&c.cli.ep->fid, &cli, false, "client, the name it took");
	cr_assert_eq(fi_connect(c.cli.ep, fi->dest_addr, NULL, 0), 0);
	cr_assert_eq(cm_event(&c, &ev, &e, sizeof(e)), (ssize_t)sizeof(e));
	cr_assert_eq(ev, FI_CONNREQ);
	cr_assert_eq(e.info->addr_format, FI_SOCKADDR_IN);
	cr_assert(!memcmp(e.info->dest_addr, &cli, sizeof(cli)),
		  "the request comes from the client's name");
	cm_open_ep(&c, &c.srv, e.info);
	cr_assert_eq(fi_accept(c.srv.ep, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(cm_event(&c, &ev, &e, sizeof(e)),
			     (ssize_t)sizeof(e));
		cr_assert_eq(ev, FI_CONNECTED);
	}
	sin_is(&c.srv.ep->fid, &srv, false, "server, the passive endpoint's");
	sin_is(&c.cli.ep->fid, &cli, false, "client, connected");
	sin_is(&c.srv.ep->fid, &cli, true, "server's peer");
	sin_is(&c.cli.ep->fid, &srv, true, "client's peer");
	cm_xfer(&c.cli, &c.srv, 100, 6, false, NULL);
	cm_xfer(&c.srv, &c.cli, CM_BIG, 7, false, NULL);
	cm_close(&c);
}

Test(cm, msg_endpoints_named_by_sockaddr_in_tcp, .timeout = 60)
{
	cm_sockaddr_in("tcp");
}

Test(cm, msg_endpoints_named_by_sockaddr_in_shm, .timeout = 60)
{
	cm_sockaddr_in("shm");
}

Test(cm, getinfo_lists_msg_entries_without_per_peer_caps)
{
	struct fi_info *h = cm_hints("shm"), *fi;

	h->caps = FI_MSG | FI_DIRECTED_RECV;
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), -FI_ENODATA,
		     "a MSG endpoint has one peer");
	h->caps = FI_MSG | FI_RMA;
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	for (struct fi_info *i = fi; i; i = i->next) {
		cr_assert_eq(i->ep_attr->type, FI_EP_MSG);
		cr_assert_eq(i->caps & (FI_DIRECTED_RECV | FI_SOURCE), 0);
	}
	fi_freeinfo(fi);
	fi_freeinfo(h);
}

/* A passive endpoint nobody answers holds at most 128 requests: of 130
 * clients, 128 are announced and 2 refused at once, and the requests
 * are gone with the passive endpoint. */
Test(cm, a_passive_endpoint_holds_a_bounded_backlog, .timeout = 120)
{
	enum { N = 130 };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA };
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 16];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_eq_err_entry err = { 0 };
	struct fi_info *h = cm_hints("shm"), *fi;
	struct fid_domain *dom;
	struct fid_ep *ep[N];
	struct fid_cq *cq;
	int reqs = 0, refused = 0;
	uint32_t ev;
	struct cm c;

	cm_listen(&c, "shm");
	h->dest_addr = malloc(T_NAMELEN);
	memcpy(h->dest_addr, c.pname, T_NAMELEN);
	h->dest_addrlen = T_NAMELEN;
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	fi_freeinfo(h);
	cr_assert_eq(fi_domain(c.fab, fi, &dom, NULL), 0);
	cr_assert_eq(fi_cq_open(dom, &ca, &cq, NULL), 0);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(fi_endpoint(dom, fi, &ep[i], NULL), 0);
		cr_assert_eq(fi_ep_bind(ep[i], &cq->fid, FI_TRANSMIT | FI_RECV), 0);
		cr_assert_eq(fi_ep_bind(ep[i], &c.eq->fid, 0), 0);
		cr_assert_eq(fi_enable(ep[i]), 0);
		cr_assert_eq(fi_connect(ep[i], fi->dest_addr, NULL, 0), 0);
	}
	while (reqs + refused < N) {
		ssize_t n = cm_event(&c, &ev, buf, sizeof(buf));

		if (n == -FI_EAVAIL) {
			cr_assert_eq(fi_eq_readerr(c.eq, &err, 0), (ssize_t)sizeof(err));
			cr_assert_eq(err.err, FI_ECONNREFUSED);
			refused++;
			continue;
		}
		cr_assert_eq(n, (ssize_t)sizeof(*e), "event %zd", n);
		cr_assert_eq(ev, FI_CONNREQ);
		fi_freeinfo(e->info);
		reqs++;
	}
	cr_assert_eq(reqs, 128);
	cr_assert_eq(refused, N - 128);
	for (int i = 0; i < N; i++)
		cr_assert_eq(fi_close(&ep[i]->fid), 0);
	cr_assert_eq(fi_close(&cq->fid), 0);
	cr_assert_eq(fi_close(&dom->fid), 0);
	fi_freeinfo(fi);
	cm_close(&c);
}
