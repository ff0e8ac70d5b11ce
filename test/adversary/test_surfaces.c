/*
 * Surfaces of issue #36 besides connection management (that is
 * test_surfaces_cm.c): triggered operations fired by a peer's remote
 * writes, scalable endpoints' name lists, FI_SOCKADDR_IN names of odd
 * values, and a same-user process that posts connect cells in another
 * peer's name. Each asserts what DESIGN §7 promises: an error, never a
 * crash, a hang, a reordering or another peer's connection failing.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <rdma/fi_trigger.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_adv.h"
#include "ntx/ntx.h"
#include "ntx_ring.h"

/* ---- triggered operations ----------------------------------------------- */

#define NTRIG 2000
#define TRIG_RECV 256 /* receives the peer keeps posted */

/* The peer: floods the victim with NTRIG remote writes (each one step of
 * the victim's counter), then takes the NTRIG messages they trigger, in
 * the order of their tags. */
static int trig_peer(int sock)
{
	static uint64_t rbuf[TRIG_RECV];
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint64_t x = 1, want = 0;
	struct tctx t;
	fi_addr_t v;

	CHK(t_open(&t, T_RMA_CAPS | FI_TAGGED) == 0);
	CHK(t_xchg_name(&t, sock, &v) == 0);
	for (int i = 0; i < TRIG_RECV; i++)
		CHK(fi_trecv(t.ep, &rbuf[i], 8, NULL, FI_ADDR_UNSPEC, 0, ~0ull,
			     &rbuf[i]) == 0);
	for (int i = 0; i < NTRIG; i++)
		CHK(T_RETRY(&t, fi_write(t.ep, &x, 8, NULL, v, 0, VKEY,
					 NULL)) == 0);
	for (uint64_t end = t_ms() + 60000; want < NTRIG && t_ms() < end;) {
		ssize_t r = fi_cq_read(t.cq, &e, 1);

		CHK(r != -FI_EAVAIL || (fi_cq_readerr(t.cq, &err, 0), 0));
		if (r != 1)
			continue;
		if (!(e.flags & FI_RECV))
			continue; /* a write */
		if (e.tag != want)
			fprintf(stderr, "trig: message %llu where %llu was due\n",
				(unsigned long long)e.tag,
				(unsigned long long)want);
		CHK(e.tag == want);
		want++;
		CHK(fi_trecv(t.ep, e.op_context, 8, NULL, FI_ADDR_UNSPEC, 0,
			     ~0ull, e.op_context) == 0);
	}
	CHK(want == NTRIG);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

/* NTRIG triggered sends wait for thresholds 1..NTRIG of the counter of
 * remote writes; a peer's flood of writes fires them all within a few
 * polls. Each fires once, in the order posted (the peer checks the
 * tags), and each completes. */
Test(surfaces, a_flood_of_remote_writes_fires_triggers_in_order,
     .timeout = 180)
{
	static struct fi_triggered_context tc[NTRIG];
	static uint64_t payload[NTRIG];
	static char mbuf[VLEN];
	struct fi_info *h = t_hints(T_RMA_CAPS | FI_TAGGED | FI_TRIGGER);
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	struct fid_mr *mr;
	struct fid_cntr *c;
	struct tctx t;
	fi_addr_t peer;
	int sock, sent = 0;
	pid_t pid;

	pid = t_fork(&sock, trig_peer);
	cr_assert_eq(t_open_cntrs(&t, h, T_CBIT(T_C_RWRITE)), 0);
	c = t.c[T_C_RWRITE];
	cr_assert_eq(fi_mr_reg(t.dom, mbuf, VLEN, FI_REMOTE_WRITE, 0, VKEY, 0,
			       &mr, NULL), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	for (int i = 0; i < NTRIG; i++) {
		struct iovec iov = { &payload[i], 8 };
		struct fi_msg_tagged m = { .msg_iov = &iov, .iov_count = 1,
					   .addr = peer, .tag = (uint64_t)i,
					   .context = &tc[i] };

		payload[i] = (uint64_t)i;
		tc[i].event_type = FI_TRIGGER_THRESHOLD;
		tc[i].trigger.threshold.cntr = c;
		tc[i].trigger.threshold.threshold = (uint64_t)i + 1;
		cr_assert_eq(fi_tsendmsg(t.ep, &m, FI_TRIGGER), 0);
	}
	for (uint64_t end = t_ms() + 120000; sent < NTRIG && t_ms() < end;) {
		ssize_t r = fi_cq_read(t.cq, &e, 1);

		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			fi_cq_readerr(t.cq, &err, 0);
			cr_assert_fail("triggered send failed: %s",
				       fi_strerror(err.err));
		}
		if (r == 1) {
			cr_assert_eq(e.op_context, &tc[sent],
				     "send %d completed where %d was due",
				     (int)((struct fi_triggered_context *)
						   e.op_context - tc), sent);
			sent++;
		}
	}
	cr_assert_eq(sent, NTRIG, "%d of %d triggered sends completed", sent,
		     NTRIG);
	cr_assert_eq(fi_cntr_read(c), NTRIG);
	cr_assert_eq(t_sync(sock), 0);
	cr_assert_eq(t_join(pid), 0, "the peer saw the messages out of order");
	fi_close(&mr->fid);
	t_close(&t);
}

/* ---- connect cells in a third peer's name (shm) ------------------------
 * A process of the same user can map any window it finds (DESIGN §7) and
 * write any line of it; it can also ptrace every process of the user, so
 * nothing stops it from reading or corrupting an application outright.
 * What it must not get by writing a connect cell is an effect on a
 * connection between two honest peers: here the impostor (this process,
 * acting on the victim V's window only) posts a cell in the name of the
 * honest peer H (H's pid, window fd, epoch) naming a slot of H's of its
 * choice, before H connects and again while H and V talk. H and V must
 * keep exchanging messages both ways. */

#define ECHO_TAG 0x1000ull

/* V: answers each tagged message from H with its tag + 1; 'q' ends. */
static int echo_victim(int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	static uint64_t in[4], out[4];
	char hname[T_NAMELEN], cmd;
	size_t len = T_NAMELEN;
	struct tctx t;
	fi_addr_t h;

	CHK(t_open(&t, FI_MSG | FI_TAGGED) == 0);
	CHK(fi_getname(&t.ep->fid, hname, &len) == 0);
	CHK(t_sock_write(sock, hname, sizeof(hname)) == 0);
	CHK(t_sock_read(sock, hname, sizeof(hname)) == 0);
	CHK(t_insert(&t, hname, &h) == 0);
	for (int i = 0; i < 4; i++)
		CHK(fi_trecv(t.ep, &in[i], 8, NULL, FI_ADDR_UNSPEC, 0, ~0ull,
			     &in[i]) == 0);
	for (;;) {
		ssize_t r = fi_cq_read(t.cq, &e, 1);

		if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			fi_cq_readerr(t.cq, &err, 0);
			fprintf(stderr, "victim: error %d\n", err.err);
			CHK(0);
		}
		if (r == 1 && (e.flags & FI_RECV)) {
			int i = (int)((uint64_t *)e.op_context - in);

			out[i] = e.tag + 1;
			CHK(T_RETRY(&t, fi_tsend(t.ep, &out[i], 8, NULL, h,
						 e.tag + 1, NULL)) == 0);
			CHK(fi_trecv(t.ep, &in[i], 8, NULL, FI_ADDR_UNSPEC, 0,
				     ~0ull, &in[i]) == 0);
		}
		if (poll(&p, 1, 0) != 1)
			continue;
		CHK(read(sock, &cmd, 1) == 1);
		if (cmd == 'q')
			break;
	}
	t_close(&t);
	return 0;
}

/* V's window, mapped read-write through /proc as its user may. */
static uint8_t *map_window(const struct ntx_addr *v, pid_t pid,
			   struct ntx_win_geom *g)
{
	struct ntx_win_hdr h;
	char path[64];
	uint8_t *base;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, v->win_fd);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "open %s", path);
	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ntx_win_geom_init(g, h.nslots, h.ring_lines, h.bulk_size);
	base = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(base, MAP_FAILED);
	close(fd);
	return base;
}

/* A connect cell in V's window in the name from, naming slot. */
static void post_cell(uint8_t *base, const struct ntx_win_geom *g,
		      const struct ntx_addr *from, uint32_t slot)
{
	struct ntx_win_hdr *h = (struct ntx_win_hdr *)base;

	for (uint32_t i = 0; i < NTX_WIN_CELLS; i++) {
		struct ntx_win_cell *c =
			(struct ntx_win_cell *)(base + g->cells_off) + i;
		uint32_t expect = NTX_CELL_FREE;

		if (!atomic_compare_exchange_strong(&c->state, &expect,
						    NTX_CELL_BUSY))
			continue;
		c->slot = slot;
		c->from = *from;
		atomic_store_explicit(&c->state, NTX_CELL_POSTED,
				      memory_order_release);
		atomic_fetch_add(&h->conn_bell, 1);
		return;
	}
	cr_assert_fail("no free connect cell in the victim's window");
}

/* H sends tag to V and waits for V's answer tag + 1. */
static void echo(struct tctx *h, fi_addr_t v, uint64_t tag)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint64_t out = tag, in = 0;
	int got = 0, rc;

	cr_assert_eq(fi_trecv(h->ep, &in, 8, NULL, FI_ADDR_UNSPEC, tag + 1, 0,
			      &in), 0);
	cr_assert_eq(fi_tsend(h->ep, &out, 8, NULL, v, tag, &out), 0);
	while (got < 2) {
		memset(&err, 0, sizeof(err));
		rc = t_wait(h, &e, NULL, &err, 10000);
		cr_assert_eq(rc, 1, "H and V stopped talking at tag %#llx: %s",
			     (unsigned long long)tag,
			     rc == -FI_EAVAIL ? fi_strerror(err.err)
					      : "timed out");
		got++;
	}
	cr_assert_eq(in, tag + 1);
}

Test(surfaces, a_connect_cell_in_a_third_peers_name_is_contained,
     .timeout = 120)
{
	struct ntx_win_geom g;
	struct ntx_addr vname, hname;
	size_t len = sizeof(hname);
	struct tctx h;
	fi_addr_t v;
	uint8_t *base;
	int sock;
	pid_t pid;

	pid = t_fork(&sock, echo_victim);
	cr_assert_eq(t_sock_read(sock, &vname, sizeof(vname)), 0);
	cr_assert_eq(t_open(&h, FI_MSG | FI_TAGGED), 0);
	cr_assert_eq(fi_getname(&h.ep->fid, &hname, &len), 0);
	cr_assert_eq(t_sock_write(sock, &hname, sizeof(hname)), 0);
	cr_assert_eq(t_insert(&h, &vname, &v), 0);
	base = map_window(&vname, pid, &g);

	/* before H ever connects: its name, slots 0 (the one H's first
	 * connection takes) and 7 */
	post_cell(base, &g, &hname, 0);
	post_cell(base, &g, &hname, 7);
	usleep(100 * 1000);
	for (uint64_t i = 0; i < 4; i++)
		echo(&h, v, ECHO_TAG + 16 * i);
	/* while they talk: again, and a slot out of range */
	post_cell(base, &g, &hname, 3);
	post_cell(base, &g, &hname, g.nslots + 5);
	for (uint64_t i = 4; i < 8; i++)
		echo(&h, v, ECHO_TAG + 16 * i);
	munmap(base, g.size);
	cr_assert_eq(write(sock, "q", 1), 1);
	cr_assert_eq(t_join(pid), 0, "the victim failed");
	t_close(&h);
}

/* ---- FI_SOCKADDR_IN names of odd values --------------------------------- */

/* On shm, tcp and udp: each odd sockaddr_in is refused at insert
 * (FI_ADDR_NOTAVAIL) or taken and a send to it completes in error within
 * the wait, never hangs or crashes; the endpoint then still talks to an
 * honest address (its own). */
static void sin_odd_on(const char *dom)
{
	struct fi_info *h = t_hints(FI_MSG | FI_TAGGED);
	struct sockaddr_in odd[6], me;
	size_t len = sizeof(me);
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint64_t v = 1, in = 0;
	fi_addr_t a;
	struct tctx t;
	int n = 0;

	free(h->domain_attr->name);
	h->domain_attr->name = strdup(dom);
	h->addr_format = FI_SOCKADDR_IN;
	cr_assert_eq(t_open_hints(&t, h), 0, "%s with FI_SOCKADDR_IN", dom);
	cr_assert_eq(fi_getname(&t.ep->fid, &me, &len), 0);
	cr_assert_eq(len, sizeof(me));
	for (int i = 0; i < 6; i++) {
		odd[i] = (struct sockaddr_in){ .sin_family = AF_INET,
					       .sin_port = htons(1) };
		odd[i].sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	odd[0].sin_port = 0;                            /* port 0 */
	odd[1].sin_addr.s_addr = htonl(INADDR_ANY);      /* 0.0.0.0 */
	odd[2].sin_addr.s_addr = htonl(INADDR_BROADCAST);
	odd[3].sin_port = htons(9);                      /* nobody there */
	odd[4].sin_family = AF_INET6;                    /* another family */
	odd[5].sin_addr.s_addr = inet_addr("224.0.0.1"); /* multicast */
	for (int i = 0; i < 6; i++) {
		int r;

		r = fi_av_insert(t.av, &odd[i], 1, &a, 0, NULL);

		if (r != 1 || a == FI_ADDR_NOTAVAIL) {
			n++;
			continue;
		}
		r = (int)fi_tsend(t.ep, &v, 8, NULL, a, 1, &odd[i]);
		if (r) { /* refused at once: an answer, not a hang */
			cr_assert_neq(r, -FI_EAGAIN, "%s: address %d", dom, i);
			n++;
			continue;
		}
		memset(&err, 0, sizeof(err));
		r = t_wait(&t, &e, NULL, &err, 15000);
		cr_assert_eq(r, -FI_EAVAIL, "%s: a send to odd address %d "
			     "%s", dom, i, r == 1 ? "succeeded" : "hung");
		cr_assert_eq(err.op_context, &odd[i]);
		n++;
	}
	cr_assert_eq(n, 6);
	/* a short name to fi_setname is refused too */
	cr_assert_neq(fi_setname(&t.ep->fid, &me, 4), 0);
	/* and the endpoint still works */
	cr_assert_eq(fi_av_insert(t.av, &me, 1, &a, 0, NULL), 1);
	cr_assert_eq(fi_trecv(t.ep, &in, 8, NULL, FI_ADDR_UNSPEC, 2, 0, &in),
		     0);
	cr_assert_eq(fi_tsend(t.ep, &v, 8, NULL, a, 2, &v), 0);
	for (int got = 0; got < 2; got++)
		cr_assert_eq(t_wait(&t, &e, NULL, &err, 10000), 1,
			     "%s: a send to itself after the odd ones", dom);
	cr_assert_eq(in, 1);
	t_close(&t);
}

Test(surfaces, odd_sockaddr_in_names_fail_cleanly, .timeout = 180)
{
	sin_odd_on("shm");
	sin_odd_on("tcp");
	sin_odd_on("udp");
}
