/*
 * Connection management of MSG endpoints under attack (issue #36, DESIGN
 * §7): a flood of connects a passive endpoint's application never
 * answers, a client that vanishes after its request, and connection data
 * of bad sizes, from the API and in forged CM packets whose length lies.
 * The passive endpoint must stay bounded and keep serving honest clients.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ntx_test_cm.h"
#include "ntx_adv.h"
#include "ntx/ntx.h"
#include "ntx_tcp_wire.h"

#define FLOOD 2000 /* connects in all */
#define HOLD 200   /* of them held open together, past the backlog (128) */
#define FD_BOUND 16
#ifdef __SANITIZE_ADDRESS__
/* AddressSanitizer keeps freed memory in quarantine (256 MB by default):
 * the 2000 connections' buffers stay resident though freed (58 MB seen) */
#define RSS_BOUND_KIB (256 * 1024)
#else
#define RSS_BOUND_KIB (32 * 1024)
#endif

/* The domain of the flood and half-open tests (set before the fork). */
static const char *g_dom;

static int cms_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	while (d && readdir(d))
		n++;
	if (d)
		closedir(d);
	return n;
}

/* A client of the passive endpoint named on sock: fabric, EQ, domain. */
struct cms_cli {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_eq *eq;
	struct fid_cq *cq; /* one for all its endpoints */
};

static int cms_cli_open(struct cms_cli *k, int sock)
{
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA };
	struct fi_info *h = cm_hints(g_dom);
	char pname[T_NAMELEN];

	CHK(t_sock_read(sock, pname, sizeof(pname)) == 0);
	h->dest_addr = malloc(T_NAMELEN);
	memcpy(h->dest_addr, pname, T_NAMELEN);
	h->dest_addrlen = T_NAMELEN;
	CHK(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &k->fi) == 0);
	fi_freeinfo(h);
	CHK(fi_fabric(k->fi->fabric_attr, &k->fab, NULL) == 0);
	CHK(fi_eq_open(k->fab, &ea, &k->eq, NULL) == 0);
	CHK(fi_domain(k->fab, k->fi, &k->dom, NULL) == 0);
	CHK(fi_cq_open(k->dom, &ca, &k->cq, NULL) == 0);
	return 0;
}

/* An endpoint of the client that asks to connect. */
static int cms_cli_connect(struct cms_cli *k, struct fid_ep **ep)
{
	CHK(fi_endpoint(k->dom, k->fi, ep, NULL) == 0);
	CHK(fi_ep_bind(*ep, &k->eq->fid, 0) == 0);
	CHK(fi_ep_bind(*ep, &k->cq->fid, FI_TRANSMIT | FI_RECV) == 0);
	CHK(fi_enable(*ep) == 0);
	CHK(fi_connect(*ep, k->fi->dest_addr, NULL, 0) == 0);
	return 0;
}

/* Reads the client's EQ for up to ms: FI_ECONNREFUSED errors seen. */
static int cms_cli_refusals(struct cms_cli *k, int want, int ms)
{
	struct fi_eq_err_entry err;
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
	uint64_t end = t_ms() + (uint64_t)ms;
	uint32_t ev;
	int n = 0;

	while (n < want && t_ms() < end) {
		ssize_t r = fi_eq_read(k->eq, &ev, buf, sizeof(buf), 0);

		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			if (fi_eq_readerr(k->eq, &err, 0) > 0 &&
			    err.err == FI_ECONNREFUSED)
				n++;
		}
	}
	return n;
}

static void cms_cli_close(struct cms_cli *k)
{
	fi_close(&k->cq->fid);
	fi_close(&k->dom->fid);
	fi_close(&k->eq->fid);
	fi_close(&k->fab->fid);
	fi_freeinfo(k->fi);
}

/* The flood: HOLD endpoints connect and stay (the backlog fills, the
 * rest are refused), then all close; then the rest of FLOOD connect and
 * close at once, one after the other. 'd' when done. */
static int cms_flood(int sock)
{
	static struct fid_ep *ep[HOLD];
	struct cms_cli k;
	int refused;

	CHK(cms_cli_open(&k, sock) == 0);
	for (int i = 0; i < HOLD; i++)
		CHK(cms_cli_connect(&k, &ep[i]) == 0);
	refused = cms_cli_refusals(&k, HOLD - 128, 20000);
	CHK(refused == HOLD - 128);
	for (int i = 0; i < HOLD; i++)
		CHK(fi_close(&ep[i]->fid) == 0);
	for (int i = HOLD; i < FLOOD; i++) {
		CHK(cms_cli_connect(&k, &ep[0]) == 0);
		/* a little progress, so that most requests leave */
		fi_eq_read(k.eq, NULL, NULL, 0, 0);
		CHK(fi_close(&ep[0]->fid) == 0);
	}
	cms_cli_close(&k);
	CHK(write(sock, "d", 1) == 1);
	return 0;
}

/* One read of the EQ: 1 for an FI_CONNREQ, whose fi_info is freed and
 * never answered; 0 otherwise. */
static int cms_ignore_once(struct cm *c)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_eq_err_entry err;
	uint32_t ev;
	ssize_t r = fi_eq_read(c->eq, &ev, buf, sizeof(buf), 0);

	if (r >= (ssize_t)sizeof(*e) && ev == FI_CONNREQ) {
		fi_freeinfo(e->info);
		return 1;
	}
	if (r == -FI_EAVAIL)
		fi_eq_readerr(c->eq, &err, 0);
	return 0;
}

/* Reads the EQ while the attacker runs, until its byte on sock: the
 * FI_CONNREQ events seen. */
static int cms_ignore(struct cm *c, int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	int n = 0;

	while (poll(&p, 1, 0) != 1)
		n += cms_ignore_once(c);
	return n;
}

/* Honest: a client connects, the server hears its FI_CONNREQ (others may
 * still be queued), accepts, and both sides connect. */
static void cms_honest(struct cm *c, const char *dom)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (void *)buf;
	char me[T_NAMELEN];
	size_t len = sizeof(me);
	uint32_t ev;
	int seen = 0;

	cm_client(c, dom);
	cr_assert_eq(fi_getname(&c->cli.ep->fid, me, &len), 0);
	cr_assert_eq(fi_connect(c->cli.ep, c->cli.fi->dest_addr, NULL, 0), 0);
	for (;;) {
		cr_assert_geq(cm_event(c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e),
			      "the honest client's request got no event");
		cr_assert_eq(ev, FI_CONNREQ);
		if (e->info->dest_addrlen == len &&
		    !memcmp(e->info->dest_addr, me, len))
			break;
		fi_freeinfo(e->info);
	}
	cm_open_ep(c, &c->srv, e->info);
	cr_assert_eq(fi_accept(c->srv.ep, NULL, 0), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_geq(cm_event(c, &ev, buf, sizeof(buf)),
			      (ssize_t)sizeof(*e));
		cr_assert_eq(ev, FI_CONNECTED);
		seen |= e->fid == &c->cli.ep->fid ? 1 : 2;
	}
	cr_assert_eq(seen, 3);
}

static void cms_flood_on(const char *dom)
{
	long rss0, rss1;
	int sock, fds0, fds1, nreq;
	struct cm c;
	pid_t pid;

	g_dom = dom;
	cm_domain(dom);
	pid = t_fork(&sock, cms_flood);
	cm_listen(&c, dom);
	cr_assert_eq(t_sock_write(sock, c.pname, sizeof(c.pname)), 0);
	fds0 = cms_fds();
	rss0 = adv_rss_kib();
	nreq = cms_ignore(&c, sock);
	cr_assert_eq(t_join(pid), 0, "the flooding client failed");
	/* the closed clients' connections end */
	for (uint64_t end = t_ms() + 500; t_ms() < end;)
		cms_ignore_once(&c);
	fds1 = cms_fds();
	rss1 = adv_rss_kib();
	fprintf(stderr, "surfaces: %s: %d connects, %d FI_CONNREQ never "
		"answered: fds %d -> %d, VmRSS %ld -> %ld KiB\n", dom, FLOOD,
		nreq, fds0, fds1, rss0, rss1);
	cr_assert_geq(nreq, 128);
	cr_assert_leq(fds1 - fds0, FD_BOUND, "fds %d -> %d", fds0, fds1);
	cr_assert_lt(rss1 - rss0, RSS_BOUND_KIB, "VmRSS %ld -> %ld KiB", rss0,
		     rss1);
	cms_honest(&c, dom);
	cm_close(&c);
	close(sock);
}

Test(surfaces, a_connect_flood_nobody_answers_stays_bounded_tcp,
     .timeout = 300)
{
	cms_flood_on("tcp");
}

Test(surfaces, a_connect_flood_nobody_answers_stays_bounded_shm,
     .timeout = 300)
{
	cms_flood_on("shm");
}

/* A client that asks and is then killed: it waits on sock for its end. */
static int cms_vanish(int sock)
{
	struct cms_cli k;
	struct fid_ep *ep;
	char b;

	CHK(cms_cli_open(&k, sock) == 0);
	CHK(cms_cli_connect(&k, &ep) == 0);
	for (;;) { /* progress until SIGKILL */
		fi_eq_read(k.eq, NULL, NULL, 0, 0);
		if (read(sock, &b, 0) < 0)
			break;
	}
	return 1;
}

/* The server's side of a request whose client is gone: fi_endpoint or
 * fi_accept refuses it, or the accepted endpoint hears FI_SHUTDOWN (an
 * error event does too); never FI_CONNECTED, never nothing. */
static void cms_accept_dead(struct cm *c, struct fi_info *info)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_DATA };
	struct fi_eq_err_entry err;
	struct cm_ep *s = &c->srv;
	uint32_t ev;
	ssize_t r;

	s->fi = info;
	cr_assert_eq(fi_domain(c->fab, info, &s->dom, NULL), 0);
	if (fi_endpoint(s->dom, info, &s->ep, NULL))
		return; /* refused: the request is gone */
	cr_assert_eq(fi_cq_open(s->dom, &ca, &s->cq, NULL), 0);
	cr_assert_eq(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(s->ep, &c->eq->fid, 0), 0);
	cr_assert_eq(fi_enable(s->ep), 0);
	if (fi_accept(s->ep, NULL, 0))
		return;
	r = cm_event(c, &ev, buf, sizeof(buf));
	if (r == -FI_EAVAIL) {
		cr_assert_gt(fi_eq_readerr(c->eq, &err, 0), 0);
		cr_assert_eq(err.fid, &s->ep->fid);
		return;
	}
	cr_assert_geq(r, (ssize_t)sizeof(*e), "accepting a dead client hangs");
	cr_assert_eq(ev, FI_SHUTDOWN, "event %u for a dead client", ev);
	cr_assert_eq(e->fid, &s->ep->fid);
}

static void cms_half_open_on(const char *dom, bool settle)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 256];
	struct fi_eq_cm_entry *e = (void *)buf;
	struct cm c;
	uint32_t ev;
	int sock, status;
	pid_t pid;

	g_dom = dom;
	cm_domain(dom);
	pid = t_fork(&sock, cms_vanish);
	cm_listen(&c, dom);
	cr_assert_eq(t_sock_write(sock, c.pname, sizeof(c.pname)), 0);
	cr_assert_geq(cm_event(&c, &ev, buf, sizeof(buf)), (ssize_t)sizeof(*e));
	cr_assert_eq(ev, FI_CONNREQ);
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	close(sock);
	/* with settle, the passive endpoint sees the client's end first */
	for (uint64_t end = t_ms() + (settle ? 300 : 0); t_ms() < end;)
		cr_assert_eq(cms_ignore_once(&c), 0);
	cms_accept_dead(&c, e->info);
	cm_close_ep(&c.srv);
	cms_honest(&c, dom);
	cm_close(&c);
}

Test(surfaces, a_client_gone_after_its_request_ends_the_accept_tcp,
     .timeout = 120)
{
	cms_half_open_on("tcp", false);
	cms_half_open_on("tcp", true);
}

Test(surfaces, a_client_gone_after_its_request_ends_the_accept_shm,
     .timeout = 120)
{
	cms_half_open_on("shm", false);
	cms_half_open_on("shm", true);
}

/* Forged requests whose connection data is too long or whose length
 * field lies, each on a connection of its own with a proved name:
 * 'k' for each the passive endpoint closed. */
static int cms_forge_len(int sock)
{
	static const uint32_t lie[][2] = { /* msg_len, payload bytes */
		{ NTX_CM_DATA_MAX + 1, NTX_CM_DATA_MAX + 1 },
		{ 8, 16 },
		{ 16, 8 },
		{ 1u << 20, 0 },
		{ UINT32_MAX, NTX_CM_DATA_MAX },
	};
	static uint8_t data[NTX_CM_DATA_MAX + 1];
	struct ntx_addr v;

	CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
	for (size_t i = 0; i < sizeof(lie) / sizeof(lie[0]); i++) {
		struct ntx_wire_hdr h = { .op = NTX_OP_CM,
					  .status = NTX_CM_REQ,
					  .sreq = 0xfeed + i,
					  .msg_len = lie[i][0] };
		char verdict = 'x';
		int fd = adv_connect(&v);

		CHK(fd >= 0);
		CHK(adv_frame(fd, NTX_TCP_ENTRY, &h, data, lie[i][1]) == 0);
		if (adv_next(fd, &h) == -1)
			verdict = 'k';
		close(fd);
		CHK(write(sock, &verdict, 1) == 1);
	}
	CHK(write(sock, "d", 1) == 1);
	return 0;
}

/* Connection data over FI_OPT_CM_DATA_SIZE (256 bytes, fi_ntx(7)) from
 * the API is -FI_EINVAL and changes nothing; forged requests with bad
 * lengths close the forger's connection and reach no EQ; 256 bytes
 * each way still go through. */
Test(surfaces, connection_data_of_bad_sizes_is_refused, .timeout = 120)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + 512];
	struct fi_eq_cm_entry *e = (void *)buf;
	uint8_t big[NTX_CM_DATA_MAX + 1], got[NTX_CM_DATA_MAX];
	struct pollfd p;
	size_t max = 0, len = sizeof(max);
	char v = 0;
	struct cm c;
	uint32_t ev;
	int sock, closed = 0;
	ssize_t r;
	pid_t pid;

	memset(big, 0xab, sizeof(big));
	g_dom = "tcp";
	cm_domain("tcp");
	pid = t_fork(&sock, cms_forge_len);
	cm_listen(&c, "tcp");
	cr_assert_eq(t_sock_write(sock, c.pname, sizeof(c.pname)), 0);
	p = (struct pollfd){ .fd = sock, .events = POLLIN };
	for (;;) {
		r = fi_eq_read(c.eq, &ev, buf, sizeof(buf), 0);
		cr_assert_eq(r, -FI_EAGAIN, "an EQ event from a forger: %u", ev);
		if (poll(&p, 1, 1) != 1)
			continue;
		cr_assert_eq(read(sock, &v, 1), 1);
		if (v == 'd')
			break;
		closed += v == 'k';
	}
	cr_assert_eq(t_join(pid), 0, "the forger failed");
	cr_assert_eq(closed, 5, "%d of 5 forged connections closed", closed);

	cm_client(&c, "tcp");
	cr_assert_eq(fi_getopt(&c.cli.ep->fid, FI_OPT_ENDPOINT,
			       FI_OPT_CM_DATA_SIZE, &max, &len), 0);
	cr_assert_eq(max, NTX_CM_DATA_MAX);
	cr_assert_eq(fi_connect(c.cli.ep, c.cli.fi->dest_addr, big,
				sizeof(big)), -FI_EINVAL);
	cr_assert_eq(fi_connect(c.cli.ep, c.cli.fi->dest_addr, NULL, 8),
		     -FI_EINVAL);
	cr_assert_eq(fi_connect(c.cli.ep, c.cli.fi->dest_addr, big,
				NTX_CM_DATA_MAX), 0);
	r = cm_event(&c, &ev, buf, sizeof(buf));
	cr_assert_eq(r, (ssize_t)(sizeof(*e) + NTX_CM_DATA_MAX));
	cr_assert_eq(ev, FI_CONNREQ);
	cr_assert_eq(memcmp(e->data, big, NTX_CM_DATA_MAX), 0);
	cr_assert_eq(fi_reject(c.pep, e->info->handle, big, sizeof(big)),
		     -FI_EINVAL);
	cm_open_ep(&c, &c.srv, e->info);
	cr_assert_eq(fi_accept(c.srv.ep, big, sizeof(big)), -FI_EINVAL);
	memset(big, 0xcd, sizeof(big));
	cr_assert_eq(fi_accept(c.srv.ep, big, NTX_CM_DATA_MAX), 0);
	for (int i = 0; i < 2; i++) {
		r = cm_event(&c, &ev, buf, sizeof(buf));
		cr_assert_geq(r, (ssize_t)sizeof(*e));
		cr_assert_eq(ev, FI_CONNECTED);
		if (e->fid != &c.cli.ep->fid)
			continue;
		cr_assert_eq(r, (ssize_t)(sizeof(*e) + NTX_CM_DATA_MAX));
		memcpy(got, e->data, sizeof(got));
		cr_assert_eq(memcmp(got, big, sizeof(got)), 0);
	}
	cm_close(&c);
	close(sock);
}
