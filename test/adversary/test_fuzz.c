/* Issue #13: a bounded fuzzer of what a peer writes into a window (and,
 * at the end, of what a tcp peer sends in frames). A
 * victim endpoint keeps receiving while this process, as the same user,
 * maps its window through /proc and writes mutated ring entries (after a
 * real connection's first entry, with the sequence numbers the victim
 * expects, so that they get parsed), random connect cells, and random
 * control lines and ready bits. The victim must never crash (the
 * AddressSanitizer + UBSan build runs this too: scripts/asan.sh), must
 * answer every ping, and must still serve a new peer at the end.
 * NTX_FUZZ_SECONDS bounds the run (default 3), NTX_FUZZ_SEED repeats one. */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_adv.h"
#include "ntx/ntx.h"
#include "ntx_ring.h"

#define CAPS (FI_MSG | FI_TAGGED)
#define RBUF 65536
#define NRECV 4
#define FINAL_TAG 0xfeedull

uint64_t g_rng = 1;

uint64_t fuzz_start(const char *what)
{
	const char *sec = getenv("NTX_FUZZ_SECONDS");
	const char *seed = getenv("NTX_FUZZ_SEED");

	g_rng = seed ? strtoull(seed, NULL, 0)
		     : (uint64_t)time(NULL) * 2654435761u + (uint64_t)getpid();
	g_rng |= 1;
	cr_log_info("fuzz %s: seed 0x%llx (NTX_FUZZ_SEED repeats it)\n", what,
		    (unsigned long long)g_rng);
	fprintf(stderr, "fuzz %s: seed 0x%llx\n", what,
		(unsigned long long)g_rng);
	return t_ms() + 1000 * (uint64_t)(sec ? atoi(sec) : 3);
}

/* ---- the victim ---------------------------------------------------------- */

static uint8_t g_rbuf[NRECV][RBUF];

static int post(struct tctx *t, int i)
{
	if (i < NRECV / 2)
		return (int)fi_trecv(t->ep, g_rbuf[i], RBUF, NULL,
				     FI_ADDR_UNSPEC, 0, ~0ull, g_rbuf[i]);
	return (int)fi_recv(t->ep, g_rbuf[i], RBUF, NULL, FI_ADDR_UNSPEC,
			    g_rbuf[i]);
}

/* Reposts the receive a completion (or an error) named. */
static int repost(struct tctx *t, void *ctx)
{
	for (int i = 0; i < NRECV; i++)
		if (ctx == g_rbuf[i])
			return post(t, i);
	return 0; /* a send of ours, or nothing */
}

/* A job key for the next victim, or NULL (read in the forked victim). */
static const char *g_victim_key;

static int victim_open(struct tctx *t)
{
	struct fi_info *h = t_hints(CAPS);

	if (g_victim_key) {
		h->domain_attr->auth_key = (uint8_t *)strdup(g_victim_key);
		h->domain_attr->auth_key_size = strlen(g_victim_key);
	}
	return t_open_hints(t, h);
}

static int fuzz_victim(int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	uint64_t last_tag = 0;
	struct tctx t;
	size_t len = T_NAMELEN;
	char name[T_NAMELEN], cmd;

	CHK(victim_open(&t) == 0);
	CHK(fi_getname(&t.ep->fid, name, &len) == 0);
	CHK(t_sock_write(sock, name, sizeof(name)) == 0);
	for (int i = 0; i < NRECV; i++)
		CHK(post(&t, i) == 0);
	for (;;) {
		ssize_t r = fi_cq_read(t.cq, &e, 1);

		if (r == 1) {
			if (e.flags & FI_TAGGED)
				last_tag = e.tag;
			CHK(repost(&t, e.op_context) == 0);
		} else if (r == -FI_EAVAIL) {
			memset(&err, 0, sizeof(err));
			CHK(fi_cq_readerr(t.cq, &err, 0) == 1);
			CHK(repost(&t, err.op_context) == 0);
		}
		if (poll(&p, 1, 0) != 1)
			continue;
		CHK(read(sock, &cmd, 1) == 1);
		if (cmd == 'q')
			break;
		/* 'p': make progress (every ring drained), then answer */
		for (int i = 0; i < 64; i++)
			fi_cq_read(t.cq, NULL, 0);
		CHK(t_sock_write(sock, &last_tag, sizeof(last_tag)) == 0);
	}
	t_close(&t);
	return 0;
}

/* ---- the fuzzer ---------------------------------------------------------- */

struct fz {
	int sock;
	struct ntx_addr victim;
	uint8_t *base; /* the victim's window, mapped read-write */
	struct ntx_win_geom g;
	uint32_t max_payload;
	unsigned cases[3];
	unsigned lost; /* ring cases whose connection our junk had ended */
};

static uint64_t ping(struct fz *f)
{
	uint64_t tag = 0;

	cr_assert_eq(write(f->sock, "p", 1), 1);
	cr_assert_eq(t_sock_read(f->sock, &tag, sizeof(tag)), 0,
		     "the victim stopped answering");
	return tag;
}

static void map_victim(struct fz *f, pid_t pid)
{
	struct ntx_win_hdr h;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid,
		 f->victim.win_fd);
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "open %s", path);
	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ntx_win_geom_init(&f->g, h.nslots, h.ring_lines, h.bulk_size);
	f->max_payload = h.max_payload;
	f->base = mmap(NULL, f->g.size, PROT_READ | PROT_WRITE, MAP_SHARED,
		       fd, 0);
	cr_assert_neq(f->base, MAP_FAILED);
	close(fd);
}

static struct ntx_win_entry *entry_at(struct fz *f, uint32_t slot,
				      uint32_t pos)
{
	return (struct ntx_win_entry *)(f->base + f->g.ring_off +
					(size_t)slot * f->g.ring_size +
					(size_t)pos * NTX_CACHELINE);
}

/* A value where parsers go wrong: edges, lengths around the limits. */
static uint64_t edgy(struct fz *f)
{
	static const uint64_t v[] = { 0, 1, 2, 7, 8, 16, 17, 255, 4096,
				      65535, 65536, 0x7fffffff, 0x80000000,
				      UINT32_MAX, UINT64_MAX, 1ull << 62 };

	switch (rnd() % 4) {
	case 0:
		return v[rnd() % (sizeof(v) / sizeof(v[0]))];
	case 1:
		return f->max_payload + (rnd() % 3) - 1;
	case 2:
		return rnd() % 64;
	default:
		return rnd();
	}
}

/* A plausible header of a random op with one to three fields mutated. */
static void mutate_hdr(struct fz *f, struct ntx_wire_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->op = (uint8_t)(1 + rnd() % (NTX_OP_MAX + 1));
	h->flags = (uint8_t)(rnd() % 2 ? rnd() : rnd() & NTX_PF_ALL);
	h->niov = (uint16_t)(rnd() % 3);
	h->tag = rnd() % 4;
	h->msg_len = rnd() % 2 ? rnd() % 4096 : edgy(f);
	h->sreq = rnd() % 4;
	h->rreq = rnd() % 4;
	for (unsigned n = 1 + rnd() % 3; n; n--) {
		switch (rnd() % 8) {
		case 0: h->niov = (uint16_t)edgy(f); break;
		case 1: h->status = (int32_t)edgy(f); break;
		case 2: h->tag = edgy(f); break;
		case 3: h->cq_data = edgy(f); break;
		case 4: h->msg_len = edgy(f); break;
		case 5: h->sreq = edgy(f); break;
		case 6: h->rreq = edgy(f); break;
		default: h->offset = edgy(f); break;
		}
	}
}

/* A part at byte off of line e (struct ntx_win_half, or struct
 * ntx_win_quarter with NTX_WIN_SHORT): a kind that is mostly well formed
 * (a half where it does not fit too), mutated fields, then the sequence
 * number with release. Returns the byte after it, as its kind says. */
static uint32_t write_part(struct fz *f, struct ntx_win_entry *e,
			   uint32_t off, uint32_t seq)
{
	struct ntx_win_quarter *q = ntx_win_part(e, off);
	struct ntx_win_half *w = (struct ntx_win_half *)q;
	uint32_t kind = NTX_WIN_HALF | (uint32_t)(rnd() % 4) << 8 |
			(uint32_t)(rnd() % (NTX_WIN_HALF_MAX + 1));

	if (rnd() % 2 || off + sizeof(*w) > NTX_CACHELINE)
		kind |= NTX_WIN_SHORT;
	if (rnd() % 4 == 0)
		kind = rnd() % 2 ? (uint32_t)edgy(f) | NTX_WIN_HALF
				 : kind ^ (1u << (rnd() % 31));
	if (rnd() % 8 == 0) /* a half that would cross the line */
		kind &= ~NTX_WIN_SHORT;
	q->kind = kind;
	for (size_t i = 0; i < sizeof(q->bytes); i++)
		q->bytes[i] = (uint8_t)rnd();
	if (!(kind & NTX_WIN_SHORT) && off + sizeof(*w) <= NTX_CACHELINE) {
		w->tag = rnd() % 2 ? rnd() % 4 : edgy(f);
		w->data = edgy(f);
	}
	atomic_store_explicit(&q->seq, rnd() % 16 ? seq : (uint32_t)rnd(),
			      memory_order_release);
	return off + ntx_win_part_size(kind);
}

/* One entry at pos with sequence number *seq (advanced past it): payload,
 * header line, then the sequence number with release, as a sender writes
 * it; or one to four parts (half and quarter entries) in the line at
 * pos. Returns the next
 * position, or 0 when the ring has no room left for more. */
static uint32_t write_entry(struct fz *f, uint32_t slot, uint32_t pos,
			    uint32_t *seq)
{
	struct ntx_win_entry *e = entry_at(f, slot, pos);
	uint32_t len = rnd() % 4 ? (uint32_t)(rnd() % (f->max_payload + 1))
				 : (uint32_t)edgy(f);
	uint32_t lines = ntx_ring_lines(len);
	size_t room = (size_t)(f->g.ring_lines - pos - 1) * NTX_CACHELINE;

	if (rnd() % 4 == 0) { /* one to four parts in the line at pos */
		for (uint32_t o = NTX_WIN_PART; o < NTX_CACHELINE;
		     o += NTX_WIN_PART)
			atomic_store(&ntx_win_part(e, o)->seq, 0);
		for (uint32_t o = write_part(f, e, 0, (*seq)++);
		     o < NTX_CACHELINE && rnd() % 3; )
			o = write_part(f, e, o, (*seq)++);
		return pos + NTX_RING_ALIGN < f->g.ring_lines
			       ? pos + NTX_RING_ALIGN
			       : 0;
	}
	for (size_t i = 0; i < len && i < room; i++)
		e->payload[i] = (uint8_t)rnd();
	if (rnd() % 6 == 0 && f->g.bulk_size) {
		/* a bulk entry: a length around the segment's limit (or any),
		 * its payload junk in the slot's bulk area */
		uint8_t *b = f->base + f->g.bulk_off +
			     (size_t)slot * f->g.bulk_size;
		uint32_t seg = ntx_win_bulk_seg(f->g.bulk_size);

		len = rnd() % 4 ? (uint32_t)(rnd() % (seg + 2))
				: (uint32_t)edgy(f) & ~NTX_WIN_HALF;
		for (size_t i = 0; i < 4096; i++)
			b[rnd() % f->g.bulk_size] = (uint8_t)rnd();
		len |= NTX_WIN_BULK;
		lines = ntx_ring_lines(0);
	} else if (rnd() % 8 == 0) {
		len = NTX_WIN_SKIP;
	}
	e->len = len;
	mutate_hdr(f, &e->hdr);
	atomic_store_explicit(&e->seq, rnd() % 16 ? *seq : (uint32_t)rnd(),
			      memory_order_release);
	(*seq)++;
	if (len == NTX_WIN_SKIP || lines >= f->g.ring_lines - pos)
		return 0;
	return pos + lines;
}

/* The victim's slot of a new connection whose first entry (a tagged
 * send) carries tag, or UINT32_MAX. */
static uint32_t first_entry_slot(struct fz *f, uint64_t tag)
{
	uint32_t slot = UINT32_MAX;

	for (uint32_t s = 0; s < f->g.nslots; s++) {
		struct ntx_win_entry *e = entry_at(f, s, 0);
		uint64_t t = ntx_win_is_half(e->len) ? ntx_win_half(e, 0)->tag
						     : e->hdr.tag;

		if (atomic_load(&e->seq) == 1 && t == tag)
			slot = s;
	}
	return slot;
}

/* A real connection, then mutated entries after its first one. Junk of
 * an earlier case may end the connection under our feet (the victim
 * then zeroes its ring): such a case is counted and writes nothing. */
static void fuzz_ring(struct fz *f, unsigned ncase)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 1, tag = 0x100000ull + ncase;
	uint32_t slot, pos = NTX_RING_ALIGN, seq = 2;

	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_insert(&t, &f->victim, &peer), 0);
	cr_assert_eq(fi_tsend(t.ep, &v, 8, NULL, peer, tag, NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 10000), 1);
	slot = first_entry_slot(f, tag);
	if (slot == UINT32_MAX) {
		f->lost++;
		fprintf(stderr, "fuzz: case %u: our first entry is in no "
			"ring\n", ncase);
	}
	for (unsigned n = 1 + rnd() % 3; n && pos && slot != UINT32_MAX; n--)
		pos = write_entry(f, slot, pos, &seq);
	ping(f);
	t_close(&t);
}

/* Posts a connect request in the victim's window and rings its bell. */
static bool forge_cell(struct fz *f, uint32_t i, const struct ntx_addr *from,
		       uint32_t slot)
{
	struct ntx_win_hdr *h = (struct ntx_win_hdr *)f->base;
	struct ntx_win_cell *c =
		(struct ntx_win_cell *)(f->base + f->g.cells_off) + i;
	uint32_t expect = NTX_CELL_FREE;

	if (!atomic_compare_exchange_strong(&c->state, &expect,
					    NTX_CELL_BUSY))
		return false;
	c->slot = slot;
	c->from = *from;
	atomic_store_explicit(&c->state, NTX_CELL_POSTED, memory_order_release);
	atomic_fetch_add(&h->conn_bell, 1);
	return true;
}

/* A connect request nobody sent: a random or slightly wrong name. */
static void fuzz_cell(struct fz *f)
{
	struct ntx_addr from = f->victim;
	uint8_t *a = (uint8_t *)&from;
	uint32_t slot = rnd() % 2 ? (uint32_t)(rnd() % f->g.nslots)
				  : (uint32_t)edgy(f);

	for (unsigned n = rnd() % 4; n; n--)
		a[rnd() % sizeof(from)] = (uint8_t)rnd();
	if (rnd() % 4 == 0)
		for (size_t k = 0; k < sizeof(from); k++)
			a[k] = (uint8_t)rnd();
	if (forge_cell(f, (uint32_t)(rnd() % NTX_WIN_CELLS), &from, slot))
		ping(f);
}

/* Control lines and ready bits of slots that may be in use. */
static void fuzz_ctl(struct fz *f)
{
	struct ntx_win_hdr *h = (struct ntx_win_hdr *)f->base;
	uint32_t s = (uint32_t)(rnd() % f->g.nslots);
	struct ntx_win_ctl *c = (struct ntx_win_ctl *)(f->base + f->g.ctl_off) + s;
	_Atomic uint64_t *bits = (_Atomic uint64_t *)(f->base + f->g.bits_off);

	switch (rnd() % 3) {
	case 0:
		atomic_store(&c->resp, (uint32_t)edgy(f));
		break;
	case 1:
		atomic_store(&c->cons, (uint32_t)edgy(f));
		break;
	default:
		atomic_fetch_or(&bits[s / 64], rnd());
		break;
	}
	/* the connect bell's low half (connect work), its high half alone
	 * (a ready bit set: NTX_WIN_BITS_BELL) or any value */
	switch (rnd() % 3) {
	case 0:
		atomic_fetch_add(&h->conn_bell, 1);
		break;
	case 1:
		atomic_fetch_add(&h->conn_bell, NTX_WIN_BITS_BELL);
		break;
	default:
		atomic_fetch_add(&h->conn_bell, rnd());
		break;
	}
	ping(f);
}

/* A new peer still gets through when the fuzzing is over. */
static void still_serves(struct fz *f)
{
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 2;
	int tries = 0;

	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_insert(&t, &f->victim, &peer), 0);
	cr_assert_eq(fi_tsend(t.ep, &v, 8, NULL, peer, FINAL_TAG, NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 10000), 1);
	while (ping(f) != FINAL_TAG && ++tries < 1000)
		fi_cq_read(t.cq, NULL, 0);
	cr_assert_lt(tries, 1000, "a new peer's message never arrived");
	t_close(&t);
}

/* Forks the shm victim, reads its name and maps its window. */
static pid_t victim_start(struct fz *f)
{
	pid_t pid;

	setenv("NTX_TEST_DOMAIN", "shm", 1);
	pid = t_fork(&f->sock, fuzz_victim);
	cr_assert_gt(pid, 0);
	cr_assert_eq(t_sock_read(f->sock, &f->victim, sizeof(f->victim)), 0);
	map_victim(f, pid);
	return pid;
}

/* Tells the victim to end, checks that it ended well, unmaps its window. */
static void victim_end(struct fz *f, pid_t pid)
{
	cr_assert_eq(write(f->sock, "q", 1), 1);
	cr_assert_eq(t_join(pid), 0, "the victim failed");
	munmap(f->base, f->g.size);
}

static void fuzz_shm_run(void)
{
	uint64_t end = fuzz_start("shm");
	struct fz f = { 0 };
	unsigned n = 0;
	pid_t pid;

	pid = victim_start(&f);
	while (t_ms() < end) {
		unsigned k = (unsigned)(rnd() % 4);

		if (k < 2)
			fuzz_ring(&f, n);
		else if (k == 2)
			fuzz_cell(&f);
		else
			fuzz_ctl(&f);
		f.cases[k < 2 ? 0 : k - 1]++;
		n++;
	}
	still_serves(&f);
	cr_log_info("fuzz: %u cases (%u ring, %u cell, %u control), %u ring "
		    "cases found their connection ended\n", n, f.cases[0],
		    f.cases[1], f.cases[2], f.lost);
	cr_assert_leq(f.lost * 10, f.cases[0], "most ring cases reach a ring");
	victim_end(&f, pid);
}

Test(fuzz, shm_ring_entries_connect_cells_and_control_lines, .timeout = 240)
{
	fuzz_shm_run();
}

/* The same against a victim in a lockless domain (FI_THREAD_DOMAIN, as
 * Open MPI's MTL opens it): its tagged receives wait in the lean ring,
 * so the junk parts and eager headers reach the ring's own paths
 * (ntx_proto_on_small, ntx_rx_lean_eager, ntx_tme_lean_match). */
Test(fuzz, shm_ring_entries_against_a_lockless_victim, .timeout = 240)
{
	setenv("NTX_TEST_THREAD_DOMAIN", "1", 1);
	fuzz_shm_run();
	unsetenv("NTX_TEST_THREAD_DOMAIN");
}

/* Connect requests in the victim's own name, as it is and as if it had
 * restarted, naming the slot of a live connection: dropped, so that
 * connection goes on. (Taken, the first made the victim accept a
 * connection to itself, and the second ended that one, whose close wrote
 * "closed" into the named slot's control line.) */
Test(fuzz, a_connect_request_in_the_victims_own_name_ends_nothing,
     .timeout = 60)
{
	struct fz f = { 0 };
	struct ntx_addr restarted;
	struct ntx_win_ctl *ctl;
	struct tctx t;
	fi_addr_t peer;
	uint64_t v = 3, tag = 0x200000ull;
	uint32_t slot;
	int tries = 0;
	pid_t pid;

	pid = victim_start(&f);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(t_insert(&t, &f.victim, &peer), 0);
	cr_assert_eq(fi_tsend(t.ep, &v, 8, NULL, peer, tag, NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 10000), 1);
	slot = first_entry_slot(&f, tag);
	cr_assert_neq(slot, UINT32_MAX, "our first entry is in a ring");
	restarted = f.victim;
	restarted.epoch++;
	cr_assert(forge_cell(&f, 0, &f.victim, slot));
	ping(&f);
	cr_assert(forge_cell(&f, 1, &restarted, slot));
	ping(&f);
	ctl = (struct ntx_win_ctl *)(f.base + f.g.ctl_off) + slot;
	cr_assert_eq(atomic_load(&ctl->closed), 0, "our connection was ended");
	cr_assert_eq(fi_tsend(t.ep, &v, 8, NULL, peer, tag + 1, NULL), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, 10000), 1);
	while (ping(&f) != tag + 1 && ++tries < 1000)
		fi_cq_read(t.cq, NULL, 0);
	cr_assert_lt(tries, 1000, "our second message never arrived");
	t_close(&t);
	victim_end(&f, pid);
}

/* Connect requests in names made up around the victim's real window
 * (its pid, window fd and epoch, another endpoint number or service),
 * more of them than it has slots: refused, so a new peer still gets a
 * slot. (Taken, each held a slot for as long as the window lived, and
 * the fuzzer above ran the victim out of slots after a few minutes.) */
Test(fuzz, made_up_names_around_a_real_window_hold_no_slot, .timeout = 60)
{
	struct fz f = { 0 };
	pid_t pid;

	pid = victim_start(&f);
	for (uint32_t i = 0; i < f.g.nslots + 8; i++) {
		struct ntx_addr made_up = f.victim;

		if (i % 2)
			made_up.service = 1000 + i;
		else
			made_up.ep_id = (uint16_t)(f.victim.ep_id + 1 + i);
		cr_assert(forge_cell(&f, i % NTX_WIN_CELLS, &made_up,
				     i % f.g.nslots));
		ping(&f);
	}
	still_serves(&f);
	victim_end(&f, pid);
}

/* The victim's slot for our endpoint: the connect response it wrote
 * into our own window (ntx_win_ctl.resp, that slot + 1); and, in *closed,
 * whether it has since closed the connection. UINT32_MAX: no answer. */
static uint32_t our_slot_there(const struct ntx_addr *me, bool *closed)
{
	struct ntx_win_geom g;
	struct ntx_win_hdr h;
	uint32_t slot = UINT32_MAX;
	char path[64];
	uint8_t *base;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", me->win_fd);
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0, "open %s", path);
	cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
	ntx_win_geom_init(&g, h.nslots, h.ring_lines, h.bulk_size);
	base = mmap(NULL, g.size, PROT_READ, MAP_SHARED, fd, 0);
	cr_assert_neq(base, MAP_FAILED);
	close(fd);
	for (uint32_t s = 0; s < g.nslots; s++) {
		struct ntx_win_ctl *c = (struct ntx_win_ctl *)(base + g.ctl_off) + s;
		uint32_t r = atomic_load(&c->resp);

		if (r) {
			slot = r - 1;
			*closed = atomic_load(&c->closed) != 0;
		}
	}
	munmap(base, g.size);
	return slot;
}

/* A half entry from a peer that has not proved the job key: the keyed
 * victim's connection to it is still in the key exchange (NTX_VC_AUTH),
 * so the entry must end that connection, not complete a receive. Our
 * endpoint has no key and is never progressed after its send, so it
 * never answers the challenge; the half entry is written in its place. */
Test(fuzz, a_half_entry_before_the_key_proof_completes_nothing,
     .timeout = 60)
{
	struct fz f = { 0 };
	struct ntx_win_half *w;
	struct ntx_addr me;
	struct tctx t;
	fi_addr_t peer;
	size_t len = sizeof(me);
	uint64_t v = 1, tag = 0x300000ull;
	uint32_t slot;
	bool closed = false;
	pid_t pid;

	g_victim_key = "the job's key";
	pid = victim_start(&f);
	g_victim_key = NULL;
	cr_assert(f.victim.flags & NTX_ADDR_F_KEYED);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, &me, &len), 0);
	cr_assert_eq(t_insert(&t, &f.victim, &peer), 0);
	/* posts our connect request; the message waits for the key */
	cr_assert_eq(fi_tsend(t.ep, &v, 8, NULL, peer, tag, NULL), 0);
	ping(&f); /* the victim accepts and challenges us */
	slot = our_slot_there(&me, &closed);
	cr_assert_neq(slot, UINT32_MAX, "the victim answered our request");
	cr_assert_not(closed);
	w = ntx_win_half(entry_at(&f, slot, 0), 0);
	w->kind = NTX_WIN_HALF | (uint32_t)NTX_PF_TAGGED << 8 | 8;
	w->tag = tag + 1;
	memcpy(w->bytes, "evil8byt", 8);
	atomic_store_explicit(&w->seq, 1, memory_order_release);
	cr_assert_neq(ping(&f), tag + 1, "a receive took the half entry");
	cr_assert_neq(our_slot_there(&me, &closed), UINT32_MAX);
	cr_assert(closed, "the victim kept the connection");
	t_close(&t);
	victim_end(&f, pid);
}

/* ---- bulk areas ---------------------------------------------------------- */

#define BULK_MSG 200000 /* a streamed message: head and bulk segments */

/* Progress of 'peer' while waiting up to 20 s for one completion of t:
 * 1, -FI_EAVAIL (err filled) or -FI_ETIMEDOUT. */
static int wait_with(struct tctx *t, struct tctx *peer,
		     struct fi_cq_err_entry *err)
{
	uint64_t end = t_ms() + 20000;
	struct fi_cq_tagged_entry e;
	ssize_t r;

	do {
		r = fi_cq_read(t->cq, &e, 1);
		if (r == 1)
			return 1;
		if (r == -FI_EAVAIL) {
			memset(err, 0, sizeof(*err));
			return fi_cq_readerr(t->cq, err, 0) == 1 ? -FI_EAVAIL
								  : -FI_EIO;
		}
		fi_cq_read(peer->cq, NULL, 0); /* progress, nothing taken */
	} while (t_ms() < end);
	return -FI_ETIMEDOUT;
}

/* One tagged message of n bytes from s to r (s_r: r's address at s,
 * r_s: s's at r), received whole and intact, each side progressed while
 * the other waits; 'what' names it in a failure. */
static void exchange(struct tctx *s, fi_addr_t s_r, struct tctx *r,
		     fi_addr_t r_s, char *out, char *in, size_t n,
		     uint64_t tag, const char *what)
{
	struct fi_cq_err_entry err;

	memset(in, 0, n);
	t_fill(out, n, (unsigned)tag);
	cr_assert_eq(fi_trecv(r->ep, in, n, NULL, r_s, tag, 0, NULL), 0);
	cr_assert_eq(fi_tsend(s->ep, out, n, NULL, s_r, tag, NULL), 0);
	cr_assert_eq(wait_with(s, r, &err), 1, "%s: the send", what);
	cr_assert_eq(wait_with(r, s, &err), 1, "%s: the receive", what);
	cr_assert_eq(t_check(in, n, (unsigned)tag), 0, "%s: the data", what);
}

/* A receiver that writes a bulk consumer position beyond what the sender
 * wrote into the sender's window (ntx_win_ctl.bulk_cons, which only the
 * receiver writes): the sender's next streamed message to it ends that
 * connection with an error completion, not a write over bytes still
 * being read; its streamed messages to another peer still arrive intact.
 * All three endpoints in this process, the victim's window mapped
 * here. */
Test(fuzz, a_lying_bulk_consumer_position_ends_only_its_connection,
     .timeout = 120)
{
	char *out = malloc(BULK_MSG), *in = malloc(BULK_MSG);
	struct tctx v, a, h;
	struct ntx_addr vn, an, hn;
	struct fi_cq_err_entry err;
	struct fz f = { 0 };
	fi_addr_t va, vh, av, hv;
	size_t len;
	uint32_t slot = UINT32_MAX;

	cr_assert(out && in);
	cr_assert_eq(t_open(&v, CAPS), 0);
	cr_assert_eq(t_open(&a, CAPS), 0);
	cr_assert_eq(t_open(&h, CAPS), 0);
	len = sizeof(vn);
	cr_assert_eq(fi_getname(&v.ep->fid, &vn, &len), 0);
	len = sizeof(an);
	cr_assert_eq(fi_getname(&a.ep->fid, &an, &len), 0);
	len = sizeof(hn);
	cr_assert_eq(fi_getname(&h.ep->fid, &hn, &len), 0);
	cr_assert_eq(t_insert(&v, &an, &va), 0);
	cr_assert_eq(t_insert(&v, &hn, &vh), 0);
	cr_assert_eq(t_insert(&a, &vn, &av), 0);
	cr_assert_eq(t_insert(&h, &vn, &hv), 0);
	f.victim = vn;
	map_victim(&f, getpid());
	if (!f.g.bulk_size)
		cr_skip_test("the victim's window has no bulk areas");
	exchange(&v, va, &a, av, out, in, BULK_MSG, 1, "the honest message");
	/* the slot whose bulk_cons the receiver wrote: a's */
	for (uint32_t s = 0; s < f.g.nslots; s++) {
		struct ntx_win_ctl *c =
			(struct ntx_win_ctl *)(f.base + f.g.ctl_off) + s;

		if (atomic_load(&c->bulk_cons))
			slot = s;
	}
	cr_assert_neq(slot, UINT32_MAX, "a told how far it read");
	atomic_store(&((struct ntx_win_ctl *)(f.base + f.g.ctl_off) +
		       slot)->bulk_cons, UINT64_MAX);
	/* the next message needs more of the area than the last reading
	 * gave (it is larger than the area): the sender reads the lie */
	cr_assert_eq(fi_tsend(v.ep, out, BULK_MSG, NULL, va, 2, NULL), 0);
	cr_assert_eq(wait_with(&v, &a, &err), -FI_EAVAIL,
		     "the lie went unnoticed");
	cr_assert_neq(err.err, 0);
	/* another peer of the victim is served as before */
	exchange(&v, vh, &h, hv, out, in, BULK_MSG, 3, "the other peer's");
	/* the liar's endpoint reconnects for the next messages, small and
	 * streamed: its close of the old connection must neither make its
	 * new request look like a duplicate (never answered) nor, coming
	 * late, end the connection to the other peer that would have taken
	 * the old slot */
	exchange(&v, va, &a, av, out, in, 100, 4,
		 "a small message to the liar's endpoint after the failure");
	exchange(&v, va, &a, av, out, in, BULK_MSG, 5,
		 "a streamed message to the liar's endpoint after the failure");
	exchange(&v, vh, &h, hv, out, in, BULK_MSG, 6,
		 "the other peer's second");
	munmap(f.base, f.g.size);
	t_close(&h);
	t_close(&a);
	t_close(&v);
	free(out);
	free(in);
}

/* ---- tcp frames ---------------------------------------------------------- */

/* After a proved hello, frames of every type with mutated prefixes,
 * headers and payloads; a case ends when the victim closes the
 * connection or after a few frames. At the end a well-formed peer must
 * still read the victim's buffer. */
static int fuzz_tcp_attacker(int sock)
{
	const char *sec = getenv("NTX_FUZZ_SECONDS");
	uint64_t end = t_ms() + 1000 * (uint64_t)(sec ? atoi(sec) : 3);
	static uint8_t pay[NTX_TCP_MAX_PAYLOAD + 64];
	struct ntx_wire_hdr h = { .op = NTX_OP_READ, .tag = VKEY, .msg_len = 8,
				  .cq_data = 8, .flags = NTX_PF_LAST,
				  .sreq = 7 };
	struct fz f = { .max_payload = 8192 };
	struct linger reset = { .l_onoff = 1, .l_linger = 0 };
	struct ntx_addr v;
	char verdict = 'x';
	unsigned cases = 0;
	int fd, type;

	CHK(t_sock_read(sock, &v, sizeof(v)) == 0);
	while (t_ms() < end) {
		struct ntx_tcp_frame fr = { .magic = NTX_TCP_MAGIC };
		uint32_t len;

		CHK((fd = adv_connect(&v)) >= 0);
		for (unsigned n = 1 + rnd() % 4; n; n--) {
			fr.type = (uint16_t)(rnd() % 8 ? NTX_TCP_ENTRY
						      : rnd() % 8);
			mutate_hdr(&f, &fr.hdr);
			len = (uint32_t)(rnd() % 4 ? rnd() % 9000 : edgy(&f));
			fr.len = len;
			if (rnd() % 16 == 0)
				fr.magic = (uint16_t)rnd();
			for (uint32_t i = 0; i < len && i < sizeof(pay); i++)
				pay[i] = (uint8_t)rnd();
			if (send(fd, &fr, sizeof(fr), MSG_NOSIGNAL) !=
				    sizeof(fr) ||
			    send(fd, pay, len < sizeof(pay) ? len : sizeof(pay),
				 MSG_NOSIGNAL) < 0)
				break;
		}
		/* reset, not closed: a close would leave the connection in
		 * TIME_WAIT on our side for a minute, and at a thousand
		 * cases a second (under ASan) that ran this host out of
		 * ephemeral ports in 30 s, failing the tests after it too.
		 * The victim still reads all we sent: Linux delivers what
		 * is queued before it reports the reset. */
		CHK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset,
			       sizeof(reset)) == 0);
		close(fd);
		cases++;
	}
	/* a well-formed peer still gets its answer */
	CHK((fd = adv_connect(&v)) >= 0);
	CHK(adv_frame(fd, NTX_TCP_ENTRY, &h, NULL, 0) == 0);
	while ((type = adv_next(fd, &h)) == NTX_TCP_ENTRY &&
	       h.op != NTX_OP_RMA_RESP)
		;
	if (type == NTX_TCP_ENTRY && h.sreq == 7 && h.status == 0)
		verdict = 'k';
	close(fd);
	printf("fuzz: %u tcp cases\n", cases);
	CHK(write(sock, &verdict, 1) == 1);
	return 0;
}

Test(fuzz, tcp_frames_after_a_proved_hello, .timeout = 240)
{
	const char *seed = getenv("NTX_FUZZ_SEED");
	static char buf[VLEN];
	struct fid_mr *mr;
	struct tctx t;
	int sock, ncq = 0;
	pid_t pid;

	g_rng = seed ? strtoull(seed, NULL, 0)
		     : (uint64_t)time(NULL) * 2654435761u + 1;
	g_rng |= 1;
	cr_log_info("fuzz: tcp seed 0x%llx\n", (unsigned long long)g_rng);
	pid = t_fork(&sock, fuzz_tcp_attacker);
	cr_assert_eq(open_victim(&t, &mr, buf), 0);
	cr_assert_eq(send_name(&t, sock), 0);
	cr_assert_eq(victim_serve(&t, sock, &ncq), 'k',
		     "a well-formed peer got no answer after the fuzzing");
	cr_assert_eq(t_join(pid), 0, "the attacker failed");
	fi_close(&mr->fid);
	t_close(&t);
}
