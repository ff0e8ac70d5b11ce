/*
 * The pci window on a host (DESIGN §4, "The pci window"): processes of
 * this host attach to one region through our ivshmem server
 * (test/ivshmem/ntx_ivshmem_server, started here) as domain
 * "ivshmem-host", and reach each other through it
 * (FI_NTX_LOCAL_VIA_NETWORK=1: same-host peers through the domain, as
 * peers in other machines). A killed peer's operations fail, within 2 s
 * by design (its beat stands still for 1.5 s), and its slice is taken
 * over by the next endpoint that finds the region full; a process that
 * writes garbage all over the region crashes and hangs nobody.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

#define CAPS (FI_MSG | FI_TAGGED)
#define WAIT_MS 20000
#define BIG (1 << 20)

static pid_t g_server;
static char g_dir[64], g_mem[96];

/* Our server on a region of size bytes (a file in /dev/shm, which the
 * garbage writer maps too; without "ntx" in its name, as
 * msg::dead_peer_fails_outstanding_operations counts those); the
 * endpoints of this test and its children take the domain
 * "ivshmem-host" through it. */
static void pci_start(const char *size)
{
	const char *bin = getenv("NTX_IVSHMEM_SERVER");
	char sock[128], pidf[128];
	uint64_t end;

	if (!bin || access(bin, X_OK))
		cr_skip_test("no server (NTX_IVSHMEM_SERVER)");
	if (t_peer_elsewhere())
		cr_skip_test("the region is this host's");
	strcpy(g_dir, "/tmp/ntx-pci-XXXXXX");
	cr_assert_not_null(mkdtemp(g_dir));
	snprintf(sock, sizeof(sock), "%s/sock", g_dir);
	snprintf(pidf, sizeof(pidf), "%s/pid", g_dir);
	snprintf(g_mem, sizeof(g_mem), "/dev/shm/region-pci-test-%d", getpid());
	g_server = fork();
	cr_assert(g_server >= 0);
	if (!g_server) {
		execl(bin, bin, "-S", sock, "-l", size, "-n", "1", "-m", g_mem,
		      "-p", pidf, (char *)NULL);
		_exit(127);
	}
	/* ready once its pidfile exists (written after it listens) */
	for (end = t_ms() + 20000; access(pidf, F_OK) && t_ms() < end;)
		usleep(1000);
	cr_assert_eq(access(pidf, F_OK), 0, "the server started");
	setenv("FI_NTX_IVSHMEM_SOCKET", sock, 1);
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", "ivshmem-host", 1);
}

static void pci_stop(void)
{
	char path[128];
	int st;

	if (g_server <= 0)
		return;
	kill(g_server, SIGTERM);
	waitpid(g_server, &st, 0);
	unlink(g_mem);
	snprintf(path, sizeof(path), "%s/pid", g_dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/sock", g_dir);
	unlink(path);
	rmdir(g_dir);
}

/* ---- a killed peer, and its slice -------------------------------------- */

/* Takes one message, says so, and waits to be killed. */
static int child_take_one(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 0;
	char c = 'k';

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(fi_recv(t.ep, &v, sizeof(v), NULL, FI_ADDR_UNSPEC, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1);
	CHK(v == 42);
	CHK(write(sock, &c, 1) == 1);
	for (;;)
		t_drain(&t, 1000); /* killed in here */
	return 0;
}

/* One message each way with the parent, then exits. */
static int child_echo(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 0;

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(fi_recv(t.ep, &v, sizeof(v), NULL, FI_ADDR_UNSPEC, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1);
	v++;
	CHK(fi_send(t.ep, &v, sizeof(v), NULL, peer, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1);
	CHK(t_sync_progress(&t, sock, WAIT_MS) == 0);
	t_close(&t);
	return 0;
}

static void echo_with(struct tctx *t, int sock, fi_addr_t peer, uint64_t v)
{
	uint64_t back = 0;

	cr_assert_eq(fi_recv(t->ep, &back, sizeof(back), NULL, FI_ADDR_UNSPEC,
			     NULL), 0);
	cr_assert_eq(fi_send(t->ep, &v, sizeof(v), NULL, peer, NULL), 0);
	cr_assert_eq(t_wait(t, NULL, NULL, NULL, WAIT_MS), 1);
	cr_assert_eq(t_wait(t, NULL, NULL, NULL, WAIT_MS), 1);
	cr_assert_eq(back, v + 1);
	cr_assert_eq(t_sync_progress(t, sock, WAIT_MS), 0);
}

/* A region of three slices: ours, the killed peer's and one more. After
 * the kill, a send to the dead peer fails; then two new endpoints attach:
 * one takes the free slice, the other the dead peer's once its beat is
 * stale. */
Test(pci, a_killed_peer_fails_and_its_slice_is_taken_over, .timeout = 120,
     .fini = pci_stop)
{
	struct fi_cq_err_entry err;
	struct tctx t;
	fi_addr_t peer, p2, p3;
	uint64_t v = 42, t0, ms;
	char *big, c;
	int sock, s2, s3, ret;
	pid_t pid, c2, c3;

	pci_start("8M");
	pid = t_fork(&sock, child_take_one);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	cr_assert_eq(fi_send(t.ep, &v, sizeof(v), NULL, peer, NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, WAIT_MS), 1);
	cr_assert_eq(read(sock, &c, 1), 1);
	kill(pid, SIGKILL);
	t_join(pid);
	t0 = t_ms();
	big = calloc(1, BIG);
	cr_assert_eq(fi_send(t.ep, big, BIG, NULL, peer, (void *)0xd1), 0);
	ret = t_wait(&t, NULL, NULL, &err, WAIT_MS);
	ms = t_ms() - t0;
	fprintf(stderr, "pci: %llu ms from SIGKILL to the error completion\n",
		(unsigned long long)ms);
	cr_assert_eq(ret, -FI_EAVAIL);
	cr_assert_eq(err.op_context, (void *)0xd1);
	/* the bound the design gives is 2 s; a loaded machine may wake us
	 * later, which this test does not take for a failure */
	cr_assert_lt(ms, 10000, "the error came within 10 s");
	free(big);
	c2 = t_fork(&s2, child_echo);
	cr_assert_eq(t_xchg_name(&t, s2, &p2), 0);
	echo_with(&t, s2, p2, 100);
	c3 = t_fork(&s3, child_echo);
	cr_assert_eq(t_xchg_name(&t, s3, &p3), 0);
	echo_with(&t, s3, p3, 200);
	cr_assert_eq(t_join(c2), 0);
	cr_assert_eq(t_join(c3), 0);
	t_close(&t);
}

/* ---- garbage ------------------------------------------------------------ */

#define ROUNDS 400

/* ROUNDS messages of growing sizes sent and as many taken; any error
 * ends the loop (what matters is that every call returns), and so does
 * the time NTX_PCI_EXCHANGE_MS (default none) after it began: a slow
 * emulated machine under garbage still ends in time. How many rounds
 * went through. */
static int exchange(struct tctx *t, fi_addr_t peer, char *buf, char *in)
{
	const char *lim = getenv("NTX_PCI_EXCHANGE_MS");
	uint64_t end = lim ? t_ms() + strtoull(lim, NULL, 10) : UINT64_MAX;
	int ok = 0;

	for (int i = 0; i < ROUNDS && t_ms() < end; i++) {
		size_t len = (size_t)8 << (i % 18);
		int r;

		if (fi_recv(t->ep, in, len, NULL, FI_ADDR_UNSPEC, NULL) ||
		    T_RETRY(t, fi_send(t->ep, buf, len, NULL, peer, NULL)))
			break;
		r = t_wait(t, NULL, NULL, NULL, 3000);
		if (r == 1)
			r = t_wait(t, NULL, NULL, NULL, 3000);
		if (r != 1)
			break;
		ok++;
	}
	return ok;
}

/* The parent's partner: exits 0 after the exchange whatever it got. */
static int child_victim(int sock)
{
	const char *go = getenv("NTX_PCI_GARBAGE_GO");
	uint64_t end;
	struct tctx t;
	fi_addr_t peer;
	char *buf = malloc(BIG), *in = malloc(BIG);
	int ok;

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	if (go) /* the writer in another machine starts first */
		for (end = t_ms() + 120000; access(go, F_OK) && t_ms() < end;)
			usleep(10000);
	ok = exchange(&t, peer, buf, in);
	fprintf(stderr, "pci: a victim exchanged %d of %d messages\n", ok,
		ROUNDS);
	free(buf);
	free(in);
	return 0;
}

/* Writes random words at random places of the region for ms. */
static void scribble(int ms)
{
	int fd = open(g_mem, O_RDWR);
	struct stat st;
	uint64_t *w, x = 88172645463325252ull, end = t_ms() + (uint64_t)ms;
	size_t n;

	if (fd < 0 || fstat(fd, &st))
		_exit(2);
	w = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	if (w == MAP_FAILED)
		_exit(3);
	n = (size_t)st.st_size / 8;
	while (t_ms() < end) {
		for (int i = 0; i < 4096; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			w[x % n] = x * 0x9e3779b97f4a7c15ull;
		}
		usleep(100);
	}
	_exit(0);
}

/* Two processes talk through the region while a third writes garbage
 * all over it: directory, window headers, rings, control lines. Neither
 * may crash or block for good; what they exchange may fail. */
Test(pci, garbage_all_over_the_region_crashes_and_hangs_nobody,
     .timeout = 240, .fini = pci_stop)
{
	struct tctx t;
	fi_addr_t peer;
	char *buf = malloc(BIG), *in = malloc(BIG);
	pid_t pid, writer;
	int sock, ok;

	pci_start("16M");
	pid = t_fork(&sock, child_victim);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	writer = fork();
	cr_assert(writer >= 0);
	if (!writer)
		scribble(5000);
	ok = exchange(&t, peer, buf, in);
	fprintf(stderr, "pci: the parent exchanged %d of %d messages\n", ok,
		ROUNDS);
	cr_assert_eq(t_join(writer), 0);
	cr_assert_eq(t_join(pid), 0, "the other victim ended normally");
	t_close(&t);
	free(buf);
	free(in);
}

/* The same with the garbage writer in another machine: a guest on the
 * region's other side (test/ivshmem/jobs/ntx.sh, step garbage). Run only
 * there: NTX_TEST_DOMAIN names the guest's ivshmem domain,
 * NTX_PCI_GARBAGE_OPEN is the file this test creates once both
 * endpoints are open (the writer starts then: before, attaching may
 * fail, which proves nothing), NTX_PCI_GARBAGE_GO the file the writer's
 * guest creates once it writes. */
Test(pci, garbage_from_another_machine_crashes_and_hangs_nobody,
     .timeout = 600)
{
	const char *dom = getenv("NTX_TEST_DOMAIN");
	const char *open_f = getenv("NTX_PCI_GARBAGE_OPEN");
	const char *go = getenv("NTX_PCI_GARBAGE_GO");
	char *buf = malloc(BIG), *in = malloc(BIG);
	struct tctx t;
	fi_addr_t peer;
	uint64_t end;
	pid_t pid;
	int sock, ok, fd;

	if (!open_f || !go || !dom || strncmp(dom, "ivshmem-", 8))
		cr_skip_test("no garbage writer in another machine");
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	pid = t_fork(&sock, child_victim);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	/* the child's name came after its endpoint opened */
	fd = open(open_f, O_WRONLY | O_CREAT, 0644);
	cr_assert_geq(fd, 0);
	close(fd);
	for (end = t_ms() + 120000; access(go, F_OK) && t_ms() < end;)
		usleep(10000);
	cr_assert_eq(access(go, F_OK), 0, "the other machine writes");
	ok = exchange(&t, peer, buf, in);
	fprintf(stderr, "pci: the parent exchanged %d of %d messages\n", ok,
		ROUNDS);
	cr_assert_eq(t_join(pid), 0, "the other victim ended normally");
	t_close(&t);
	free(buf);
	free(in);
}

/* ---- a message rewritten in flight -------------------------------------- */

/* What the child sends, and what the forger makes of it in the region:
 * the same length, so the entry stays well formed. */
static const char g_true[] = "AUTHENTIC message from the child 0123456789";
static const char g_forged[] = "FORGED!!! message from the child 0123456789";

/* Sends one message to warm the connection up (with a key: the exchange
 * and the sealing), then, once the parent says so, the marked one; says
 * when it is in the parent's ring, and exits once the parent is done. */
static int child_marked(int sock)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t warm = 7;
	char c;

	CHK(t_open(&t, CAPS) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	CHK(fi_send(t.ep, &warm, sizeof(warm), NULL, peer, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1);
	CHK(t_sock_read(sock, &c, 1) == 0);
	CHK(fi_send(t.ep, g_true, sizeof(g_true), NULL, peer, NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1); /* in the ring */
	CHK(write(sock, "s", 1) == 1);
	CHK(t_sock_read(sock, &c, 1) == 0);
	t_close(&t);
	return 0;
}

/* Replaces each copy of g_true in the region with g_forged: what any
 * machine attached can do. How many it replaced. */
static int forge_in_region(void)
{
	int fd = open(g_mem, O_RDWR), n = 0;
	struct stat st;
	char *m, *p, *end;

	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &st), 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
		 fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	close(fd);
	for (p = m, end = m + st.st_size - sizeof(g_true); p <= end; p++)
		if (!memcmp(p, g_true, sizeof(g_true))) {
			memcpy(p, g_forged, sizeof(g_forged));
			n++;
		}
	munmap(m, (size_t)st.st_size);
	return n;
}

/* The child's marked message lands in our ring while we make no
 * progress; we rewrite it there, then take it. True when what we took
 * is the rewritten message. */
static bool rewritten_in_flight(const char *key)
{
	struct fi_cq_err_entry err;
	struct tctx t;
	fi_addr_t peer;
	uint64_t warm = 0;
	char in[sizeof(g_true)] = { 0 }, c;
	int sock, ret, n;
	pid_t pid;

	pci_start("8M");
	if (key)
		setenv("FI_NTX_AUTH_KEY", key, 1);
	pid = t_fork(&sock, child_marked);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	cr_assert_eq(fi_recv(t.ep, &warm, sizeof(warm), NULL, FI_ADDR_UNSPEC,
			     NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, WAIT_MS), 1);
	cr_assert_eq(warm, 7);
	cr_assert_eq(write(sock, "g", 1), 1);
	cr_assert_eq(t_sock_read(sock, &c, 1), 0); /* in our ring */
	n = forge_in_region();
	cr_assert_geq(n, 1, "the child's message is in the region");
	cr_assert_eq(fi_recv(t.ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, NULL),
		     0);
	ret = t_wait(&t, NULL, NULL, &err, 2000);
	fprintf(stderr, "pci, %s: %d copies rewritten; the receive: %s\n",
		key ? "a job key" : "no job key", n,
		ret == 1 ? (memcmp(in, g_forged, sizeof(in)) ? "the true message"
							       : "the rewritten one")
			 : ret == -FI_EAVAIL ? "an error" : "nothing");
	cr_assert_eq(write(sock, "d", 1), 1);
	cr_assert_eq(t_join(pid), 0);
	t_close(&t);
	if (key)
		unsetenv("FI_NTX_AUTH_KEY");
	return ret == 1 && !memcmp(in, g_forged, sizeof(in));
}

/* Without a job key the region's members are trusted: a message
 * rewritten in the ring is taken as it was rewritten (the test can see
 * a forgery; the man page says so). */
Test(pci, without_a_job_key_a_rewritten_message_is_taken, .timeout = 120,
     .fini = pci_stop)
{
	cr_assert(rewritten_in_flight(NULL), "the rewritten message was taken");
}

/* With one, the connection is sealed: the rewritten entry fails its MAC,
 * the connection fails, and nothing forged completes. */
Test(pci, with_a_job_key_a_rewritten_message_is_never_taken, .timeout = 120,
     .fini = pci_stop)
{
	cr_assert_not(rewritten_in_flight("job-pci-seal"),
		      "a message another machine rewrote completed");
}

/* A sealed connection carries what an open one does: every size, from a
 * word to streamed megabytes, both ways, with skips at the ends of the
 * rings (ROUNDS messages each way, all of them checked taken). */
Test(pci, with_a_job_key_every_size_goes_through_sealed, .timeout = 240,
     .fini = pci_stop)
{
	struct tctx t;
	fi_addr_t peer;
	char *buf = malloc(BIG), *in = malloc(BIG);
	pid_t pid;
	int sock, ok;

	pci_start("16M");
	setenv("FI_NTX_AUTH_KEY", "job-pci-sizes", 1);
	pid = t_fork(&sock, child_victim);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	t_fill(buf, BIG, 3);
	ok = exchange(&t, peer, buf, in);
	fprintf(stderr, "pci, sealed: %d of %d messages\n", ok, ROUNDS);
	cr_assert_eq(ok, ROUNDS);
	cr_assert_eq(t_join(pid), 0);
	t_close(&t);
	unsetenv("FI_NTX_AUTH_KEY");
	free(buf);
	free(in);
}
