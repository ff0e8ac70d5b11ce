/*
 * Hostile peers on the tcp domain: a forked process that speaks ntx's
 * wire format itself (tcp frames, engine headers) and sends what a
 * correct peer never would. The victim, an ordinary endpoint in the test
 * process, must stay up, answer with errors, and write nothing into its
 * CQ that the peer had no right to cause.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx/ntx.h"
#include "ntx_tcp_wire.h"

#define VKEY 7
#define VLEN 4096
#define ADV_MS 10000

/* ---- the attacker's side ------------------------------------------------ */

static int adv_write(int fd, const void *buf, size_t len)
{
	return t_sock_write(fd, buf, len);
}

static int adv_frame(int fd, uint16_t type, const struct ntx_wire_hdr *h,
		     const void *payload, uint32_t len)
{
	struct ntx_tcp_frame f = { .magic = NTX_TCP_MAGIC, .type = type,
				   .len = len };

	if (h)
		f.hdr = *h;
	return adv_write(fd, &f, sizeof(f)) || (len &&
						adv_write(fd, payload, len));
}

/* The next ENTRY frame's header (its payload skipped); -1 at EOF or after
 * ADV_MS. */
static int adv_next(int fd, struct ntx_wire_hdr *h)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct ntx_tcp_frame f;
	static char skip[NTX_TCP_MAX_PAYLOAD];

	if (poll(&p, 1, ADV_MS) != 1 || t_sock_read(fd, &f, sizeof(f)) ||
	    f.magic != NTX_TCP_MAGIC || f.len > sizeof(skip) ||
	    (f.len && t_sock_read(fd, skip, f.len)))
		return -1;
	*h = f.hdr;
	return f.type;
}

/* A name that no endpoint owns, on no host of ours. */
static struct ntx_addr adv_name(uint16_t port)
{
	struct ntx_addr a;

	memset(&a, 0, sizeof(a));
	a.magic = NTX_ADDR_MAGIC;
	a.version = NTX_ADDR_VERSION;
	a.host = NTX_HOST_UNKNOWN;
	a.pid = (uint32_t)getpid();
	a.win_fd = -1;
	a.epoch = 0x5eed;
	a.ep_id = 77;
	a.ip4 = htonl(INADDR_LOOPBACK);
	a.port = port;
	return a;
}

/* Connects to the victim and says hello with a made-up name. */
static int adv_connect(const struct ntx_addr *victim)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				   .sin_port = victim->port };
	struct ntx_addr me = adv_name(0);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    adv_frame(fd, NTX_TCP_HELLO, NULL, &me, sizeof(me))) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* ---- the victim's side ------------------------------------------------- */

static int open_victim(struct tctx *t, struct fid_mr **mr, void *buf)
{
	struct fi_info *h = t_hints(T_RMA_CAPS | FI_TAGGED);

	free(h->domain_attr->name);
	h->domain_attr->name = strdup("tcp");
	if (t_open_hints(t, h))
		return -1;
	return fi_mr_reg(t->dom, buf, VLEN, FI_REMOTE_WRITE | FI_REMOTE_READ,
			 0, VKEY, 0, mr, NULL);
}

/* Drives progress until the attacker reports (one byte: its verdict),
 * counting every completion that shows up meanwhile. */
static int victim_serve(struct tctx *t, int sock, int *ncq)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	char verdict = 0;

	for (;;) {
		ssize_t n = fi_cq_read(t->cq, &e, 1);

		if (n == 1)
			(*ncq)++;
		else if (n == -FI_EAVAIL && fi_cq_readerr(t->cq, &err, 0) == 1)
			(*ncq)++;
		if (poll(&p, 1, 0) == 1)
			break;
	}
	if (read(sock, &verdict, 1) != 1)
		return -1;
	return verdict;
}

static int send_name(struct tctx *t, int sock)
{
	char name[T_NAMELEN];
	size_t len = sizeof(name);

	return fi_getname(&t->ep->fid, name, &len) ||
	       t_sock_write(sock, name, sizeof(name));
}

/* 1. RMA_NOTIFY without a checked write: no "remote write, CQ data"
 * entry appears, the connection is failed (closed). */
static int adv_notify(int sock)
{
	struct ntx_addr v;
	struct ntx_wire_hdr h = { .op = NTX_OP_RMA_NOTIFY,
				  .flags = NTX_PF_DATA,
				  .cq_data = 0xbad, .msg_len = 8 };
	char verdict = 'x';
	int fd;

	CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
	fd = adv_connect(&v);
	CHK(fd >= 0);
	CHK(adv_frame(fd, NTX_TCP_ENTRY, &h, NULL, 0) == 0);
	/* the victim closes the connection once it failed it */
	if (adv_next(fd, &h) == -1)
		verdict = 'k';
	close(fd);
	CHK(write(sock, &verdict, 1) == 1);
	return 0;
}

/* The victim serves an attacker that connects to it; returns the number
 * of completions the victim saw. */
static int victim_attacked(t_child_fn attack, const char *why)
{
	static char buf[VLEN];
	struct tctx t;
	struct fid_mr *mr;
	int sock, ncq = 0;
	pid_t pid = t_fork(&sock, attack);

	cr_assert_eq(open_victim(&t, &mr, buf), 0);
	cr_assert_eq(send_name(&t, sock), 0);
	cr_assert_eq(victim_serve(&t, sock, &ncq), 'k', "%s", why);
	cr_assert_eq(t_join(pid), 0);
	fi_close(&mr->fid);
	t_close(&t);
	return ncq;
}

Test(adversary, remote_cq_data_needs_a_checked_write, .timeout = 60)
{
	cr_assert_eq(victim_attacked(adv_notify, "the forged notify's "
				     "connection stayed open"), 0,
		     "a forged remote CQ data entry appeared");
}

/* 2. An atomic RMA_CHECK with a valid key and a datatype that does not
 * exist: answered with an error, no crash. */
static int adv_check_dt(int sock)
{
	struct ntx_addr v;
	struct ntx_wire_riov w = { .addr = 0, .len = 8, .key = VKEY };
	struct ntx_wire_hdr h = { .op = NTX_OP_RMA_CHECK, .niov = 1,
				  .status = NTX_OP_ATOMIC, .sreq = 42,
				  .rreq = (200u << 8) | FI_SUM };
	char verdict = 'x';
	int fd, type;

	CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
	fd = adv_connect(&v);
	CHK(fd >= 0);
	CHK(adv_frame(fd, NTX_TCP_ENTRY, &h, &w, sizeof(w)) == 0);
	while ((type = adv_next(fd, &h)) == NTX_TCP_ENTRY &&
	       h.op != NTX_OP_RMA_RESP)
		;
	if (type == NTX_TCP_ENTRY && h.sreq == 42 && h.status > 0)
		verdict = 'k';
	close(fd);
	CHK(write(sock, &verdict, 1) == 1);
	return 0;
}

Test(adversary, atomic_check_with_unknown_datatype_is_refused, .timeout = 60)
{
	victim_attacked(adv_check_dt, "no error answer to the bad datatype");
}

/* 3. A connection that never says hello is closed after
 * FI_NTX_TCP_HELLO_MS, instead of holding a socket forever. */
static int adv_silent(int sock)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct pollfd p;
	struct ntx_addr v;
	char verdict = 'x', c;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
	sin.sin_port = v.port;
	CHK(fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	/* closed by the victim: readable, and a read says end of file */
	if (poll(&p, 1, ADV_MS) == 1 && read(fd, &c, 1) == 0)
		verdict = 'k';
	close(fd);
	CHK(write(sock, &verdict, 1) == 1);
	return 0;
}

Test(adversary, a_connection_without_hello_is_closed, .timeout = 60)
{
	setenv("FI_NTX_TCP_HELLO_MS", "1000", 1); /* default 30 s */
	victim_attacked(adv_silent, "the silent connection stayed open");
}

/* 4. A receiver that answers a rendezvous RTS over tcp with SPLIT (a
 * single-copy write the tcp back end cannot make): refused with DONE and
 * an error, no call through a missing op. */
static int adv_split(int sock)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	struct ntx_wire_iov w = { .addr = 0x10000, .len = 4096, .key = 0 };
	struct ntx_wire_hdr h;
	struct ntx_addr me;
	char verdict = 'x';
	int lfd = socket(AF_INET, SOCK_STREAM, 0), fd, type;

	CHK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == 0);
	CHK(listen(lfd, 4) == 0);
	CHK(getsockname(lfd, (struct sockaddr *)&sin, &sl) == 0);
	me = adv_name(sin.sin_port);
	CHK(t_sock_write(sock, &me, sizeof(me)) == 0);
	fd = accept(lfd, NULL, NULL);
	CHK(fd >= 0);
	CHK(adv_next(fd, &h) == NTX_TCP_HELLO);
	while ((type = adv_next(fd, &h)) == NTX_TCP_ENTRY &&
	       h.op != NTX_OP_RTS)
		;
	CHK(type == NTX_TCP_ENTRY);
	h = (struct ntx_wire_hdr){ .op = NTX_OP_SPLIT, .niov = 1,
				   .sreq = h.sreq, .rreq = 1, .offset = 0,
				   .msg_len = w.len };
	CHK(adv_frame(fd, NTX_TCP_ENTRY, &h, &w, sizeof(w)) == 0);
	while ((type = adv_next(fd, &h)) == NTX_TCP_ENTRY &&
	       h.op != NTX_OP_DONE)
		;
	if (type == NTX_TCP_ENTRY && h.status != 0)
		verdict = 'k';
	close(fd);
	close(lfd);
	CHK(write(sock, &verdict, 1) == 1);
	return 0;
}

Test(adversary, split_over_tcp_is_refused, .timeout = 60)
{
	static char buf[VLEN], big[1 << 17];
	struct ntx_addr peer;
	struct tctx t;
	struct fid_mr *mr;
	fi_addr_t dst;
	int sock, ncq = 0;
	pid_t pid = t_fork(&sock, adv_split);

	cr_assert_eq(open_victim(&t, &mr, buf), 0);
	cr_assert_eq(t_sock_read(sock, &peer, sizeof(peer)), 0);
	cr_assert_eq(t_insert(&t, &peer, &dst), 0);
	cr_assert_eq(fi_tsend(t.ep, big, sizeof(big), NULL, dst, 3, big), 0);
	cr_assert_eq(victim_serve(&t, sock, &ncq), 'k',
		     "no refusal of the split");
	cr_assert_eq(t_join(pid), 0);
	fi_close(&mr->fid);
	t_close(&t);
}

/* 8. A same-user process that opens a window through /proc cannot change
 * its size (memfd seals): no SIGBUS in the owner or its peers. */
static int adv_truncate(int sock)
{
	struct ntx_addr v;
	char path[64], verdict = 'x';
	int fd, seals;

	CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
	snprintf(path, sizeof(path), "/proc/%u/fd/%d", v.pid, v.win_fd);
	fd = open(path, O_RDWR);
	CHK(fd >= 0);
	seals = fcntl(fd, F_GET_SEALS);
	if (seals >= 0 && (seals & F_SEAL_SHRINK) && (seals & F_SEAL_GROW) &&
	    ftruncate(fd, 4096) < 0 && errno == EPERM &&
	    ftruncate(fd, 1 << 30) < 0 && errno == EPERM)
		verdict = 'k';
	close(fd);
	CHK(write(sock, &verdict, 1) == 1);
	return 0;
}

Test(adversary, a_window_cannot_be_resized, .timeout = 60)
{
	struct ntx_addr a;
	size_t len = sizeof(a);
	struct tctx t;
	char verdict = 0;
	int sock;
	pid_t pid;

	setenv("NTX_TEST_DOMAIN", "shm", 1);
	cr_assert_eq(t_open(&t, FI_MSG), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, &a, &len), 0);
	cr_assert_geq(a.win_fd, 0, "the shm domain names its window");
	pid = t_fork(&sock, adv_truncate);
	cr_assert_gt(pid, 0);
	cr_assert_eq(t_sock_write(sock, &a, sizeof(a)), 0);
	cr_assert_eq(t_sock_read(sock, &verdict, 1), 0);
	cr_assert_eq(verdict, 'k', "the window could be resized");
	cr_assert_eq(t_join(pid), 0);
	t_close(&t);
}

/* 9. Another Unix user binds the abstract name of our service first:
 * the endpoint still opens (in a private directory instead, with a
 * warning) and a peer of ours reaches it by the service number. The
 * wake-up names carry a random part from the window, so they cannot be
 * taken first. Needs root, to be another user. */
static char g_svc9[16];

static int adv_squatter(int sock)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len;
	uid_t victim;
	int fd, n;
	char c;

	CHK(t_sock_read(sock, &victim, sizeof(victim)) == 0);
	CHK(setgid(65534) == 0 && setuid(65534) == 0);
	n = snprintf(sun.sun_path + 1, sizeof(sun.sun_path) - 1, "ntx-%u-%s",
		     victim, g_svc9);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHK(fd >= 0 && bind(fd, (struct sockaddr *)&sun, len) == 0 &&
	    listen(fd, 1) == 0);
	CHK(write(sock, "b", 1) == 1);
	while (read(sock, &c, 1) == 1) /* until the test is over */
		;
	close(fd);
	return 0;
}

static int adv_service_client(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 99;
	char c;

	CHK(read(sock, &c, 1) == 1); /* the service is open */
	CHK(t_open(&t, FI_MSG) == 0);
	CHK(fi_av_insertsvc(t.av, "localhost", g_svc9, &peer, 0, NULL) == 1);
	CHK(fi_send(t.ep, &v, 8, NULL, peer, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, 10000) == 1);
	t_close(&t);
	return 0;
}

Test(adversary, a_service_name_taken_by_another_user, .timeout = 60)
{
	struct fi_info *h, *fi;
	struct tctx t = { 0 };
	uid_t me = getuid();
	int sq, cl;
	pid_t squatter, client;
	uint64_t v = 0;
	char c;

	if (geteuid() != 0)
		cr_skip_test("needs root to act as another user");
	setenv("NTX_TEST_DOMAIN", "shm", 1);
	snprintf(g_svc9, sizeof(g_svc9), "%d", 41000 + getpid() % 9000);
	squatter = t_fork(&sq, adv_squatter);
	client = t_fork(&cl, adv_service_client);
	cr_assert_eq(t_sock_write(sq, &me, sizeof(me)), 0);
	cr_assert_eq(read(sq, &c, 1), 1, "the squatter has the name");
	h = t_hints(FI_MSG);
	cr_assert_eq(fi_getinfo(T_VERSION, "localhost", g_svc9, FI_SOURCE, h,
				&fi), 0);
	fi_freeinfo(h);
	cr_assert_eq(t_open_hints(&t, fi_dupinfo(fi)), 0,
		     "the endpoint opens although its name is taken");
	fi_freeinfo(fi);
	cr_assert_eq(fi_recv(t.ep, &v, 8, NULL, FI_ADDR_UNSPEC, NULL), 0);
	cr_assert_eq(write(cl, "g", 1), 1);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 10000), 1,
		     "a peer reaches the service");
	cr_assert_eq(v, 99);
	cr_assert_eq(t_join(client), 0);
	close(sq);
	cr_assert_eq(t_join(squatter), 0);
	t_close(&t);
}

/* 11. Single copy that one peer refuses (a non-dumpable or dying peer,
 * or ptrace rules) is turned off for that peer only. This process is the
 * receiver: its process_vm_readv calls go through the wrapper below (the
 * test binary exports it, so the provider's calls land here), which
 * refuses the first sender and counts the calls for the second. */
static pid_t g_refused;
static atomic_int g_cma_calls[2];
static pid_t g_cma_pid[2];

ssize_t process_vm_readv(pid_t pid, const struct iovec *l, unsigned long nl,
			 const struct iovec *r, unsigned long nr,
			 unsigned long flags)
{
	for (int i = 0; i < 2; i++)
		if (pid && pid == g_cma_pid[i])
			atomic_fetch_add(&g_cma_calls[i], 1);
	if (pid && pid == g_refused) {
		errno = EPERM;
		return -1;
	}
	return syscall(SYS_process_vm_readv, pid, l, nl, r, nr, flags);
}

#define CMA_BIG (1 << 20)

static int cma_sender(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	char *buf = malloc(CMA_BIG), c;

	CHK(buf && t_open(&t, FI_MSG) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(read(sock, &c, 1) == 1); /* our turn */
	t_fill(buf, CMA_BIG, 11);
	CHK(fi_send(t.ep, buf, CMA_BIG, NULL, peer, buf) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, 20000) == 1);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	free(buf);
	return 0;
}

Test(adversary, single_copy_refused_by_one_peer_stays_on_for_others,
     .timeout = 60)
{
	char *buf = malloc(CMA_BIG);
	fi_addr_t peer[2];
	struct tctx t;
	int sock[2];
	pid_t pid[2];

	setenv("NTX_TEST_DOMAIN", "shm", 1);
	setenv("FI_NTX_SHM_SPLIT_MIN", "0", 1); /* only the receiver copies */
	for (int i = 0; i < 2; i++) {
		pid[i] = t_fork(&sock[i], cma_sender);
		cr_assert_gt(pid[i], 0);
		g_cma_pid[i] = pid[i];
	}
	g_refused = pid[0];
	cr_assert_eq(t_open(&t, FI_MSG), 0);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(t_xchg_name(&t, sock[i], &peer[i]), 0);
		memset(buf, 0, CMA_BIG);
		cr_assert_eq(fi_recv(t.ep, buf, CMA_BIG, NULL, peer[i], buf), 0);
		cr_assert_eq(write(sock[i], "g", 1), 1);
		cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 20000), 1);
		cr_assert_eq(t_check(buf, CMA_BIG, 11), 0, "sender %d", i);
		cr_assert_eq(t_sync(sock[i]), 0);
	}
	cr_assert_gt(atomic_load(&g_cma_calls[0]), 0, "single copy was tried "
		     "with the first sender");
	cr_assert_gt(atomic_load(&g_cma_calls[1]), 0, "after the first sender "
		     "refused it, single copy was off for the second one too");
	for (int i = 0; i < 2; i++)
		cr_assert_eq(t_join(pid[i]), 0);
	t_close(&t);
	free(buf);
}
