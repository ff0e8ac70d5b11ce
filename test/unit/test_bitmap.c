/* A model of the ready bitmap protocol (ntx_ntb_shm.c, DESIGN.md §4): one
 * owner that polls (connect bell, bitmap on or off, poll_bits, bits_clear)
 * and one peer that accepted the owner's connect request and sends at
 * once, plus, when the bitmap starts off, a fifth peer whose request turns
 * it on. Every interleaving of their shared accesses is explored. The
 * owner's membarrier (bits_clear, turning the bitmap on) and the senders'
 * fences make the accesses that matter sequentially consistent, so the
 * model is SC: it checks the protocol's logic, not the fences. A run is
 * lost when, after the peer sent its entries and went quiet, three more
 * owner polls (each taking bits back) do not drain them. */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define ENTRIES 2     /* the peer's entries */
#define POLLS 3       /* owner polls started while the peer is active */
#define TAIL_POLLS 3  /* owner polls once everybody is quiet */

struct m {
	/* shared */
	int bell;          /* conn_bell */
	bool resp;         /* the peer's connect response */
	bool cell5;        /* the fifth peer's connect request */
	bool hdr_bits_on;  /* hdr->bits_on */
	bool bit;          /* the peer's ready bit in the owner's window */
	int written;       /* entries in the ring */
	/* owner */
	int opc, polls;
	int bell_seen;
	bool connected, nconns_big, bits_on, idle, clear_now, got;
	int consumed;
	/* the peer */
	int ppc, sent;
	bool r_on, r_bit;
	/* the fifth peer */
	int fpc;
};

static bool fix;    /* the owner flags the ring when its side connects */
static long runs, lost, states;

/* States already explored (the interleavings meet again and again). */
#define SEEN_BITS 21
static uint64_t seen[1u << SEEN_BITS];

static uint64_t key(const struct m *s)
{
	uint64_t k = 0;
	int f[] = { s->bell, s->resp, s->cell5, s->hdr_bits_on, s->bit,
		    s->written, s->opc, s->polls, s->bell_seen, s->connected,
		    s->nconns_big, s->bits_on, s->idle, s->clear_now, s->got,
		    s->consumed, s->ppc, s->sent, s->r_on, s->r_bit, s->fpc };

	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++)
		k = k * 11 + (uint64_t)f[i]; /* every field is below 11 */
	return k + 1; /* 0 marks a free cell */
}

/* True the first time s is seen. */
static bool first_visit(const struct m *s)
{
	uint64_t k = key(s), h = k * 0x9e3779b97f4a7c15ull;

	for (uint32_t i = (uint32_t)(h >> (64 - SEEN_BITS));;
	     i = (i + 1) & ((1u << SEEN_BITS) - 1)) {
		if (seen[i] == k)
			return false;
		if (!seen[i]) {
			seen[i] = k;
			states++;
			cr_assert_lt(states, 1l << (SEEN_BITS - 1),
				     "state table too small");
			return true;
		}
	}
}

/* The owner's poll, one shared access per step; returns false at the
 * end of the poll. */
static bool owner_step(struct m *s)
{
	switch (s->opc) {
	case 0: /* conn_bell */
		s->opc = s->bell != s->bell_seen ? 1 : 3;
		s->bell_seen = s->bell;
		return true;
	case 1: /* poll_cells: the fifth peer's request */
		if (s->cell5)
			s->nconns_big = true;
		s->opc = 2;
		return true;
	case 2: /* poll_connecting: the peer's response */
		s->opc = 3;
		if (s->resp && !s->connected) {
			s->connected = true;
			if (fix)
				s->bit = true; /* ntx_ntb_conn_flag */
		}
		return true;
	case 3: /* turning the bitmap on or off, then a direct pass */
		if (s->nconns_big != s->bits_on) {
			s->bits_on = s->nconns_big;
			s->hdr_bits_on = s->bits_on; /* + membarrier */
			s->opc = 9;
		} else {
			s->opc = s->bits_on ? 4 : 9;
		}
		return true;
	case 4: /* poll_bits: load the bitmap */
		s->opc = s->bit ? 5 : 6;
		return true;
	case 5: /* poll_bits: drain a flagged ring (a connected one) */
		s->got = s->connected && s->written > s->consumed;
		if (s->connected)
			s->consumed = s->written;
		s->idle = !s->got;
		s->opc = 6;
		return true;
	case 6: /* bits_clear, when due in this poll: take idle bits back */
		if (!s->clear_now || !s->idle)
			break;
		s->bit = false; /* + membarrier */
		s->opc = 7;
		return true;
	case 7: /* bits_clear: drain the rings taken back (connected ones) */
		s->got = s->connected && s->written > s->consumed;
		if (s->connected)
			s->consumed = s->written;
		s->idle = false;
		if (!s->got)
			break;
		s->opc = 8;
		return true;
	case 8: /* busy again: its bit set back */
		s->bit = true;
		break;
	case 9: /* direct pass: every connected ring */
		if (s->connected)
			s->consumed = s->written;
		break;
	}
	s->opc = 0;
	return false;
}

/* The peer: connected by our request, answers, then sends (the bell of
 * ntx_ntb_ring_bell_conn after each entry). */
static bool peer_step(struct m *s)
{
	switch (s->ppc) {
	case 0: s->resp = true; s->ppc = 1; return true;
	case 1: s->bell++; s->ppc = 2; return true;
	case 2: s->written++; s->sent++; s->ppc = 3; return true;
	case 3: s->r_on = s->hdr_bits_on; s->ppc = 4; return true;
	case 4: s->r_bit = s->bit; s->ppc = 5; return true;
	case 5:
		if (s->r_on && !s->r_bit)
			s->bit = true;
		s->ppc = s->sent < ENTRIES ? 2 : 6;
		return true;
	}
	return false; /* done, and quiet */
}

static bool fifth_step(struct m *s)
{
	switch (s->fpc) {
	case 0: s->cell5 = true; s->fpc = 1; return true;
	case 1: s->bell++; s->fpc = 2; return true;
	}
	return false;
}

static void tail(struct m s)
{
	while (peer_step(&s) || fifth_step(&s))
		;
	if (s.opc) /* finish the poll under way */
		while (owner_step(&s))
			;
	for (int i = 0; i < TAIL_POLLS; i++) {
		s.clear_now = true;
		while (owner_step(&s))
			;
	}
	runs++;
	if (s.consumed != s.written)
		lost++;
}

static void explore(struct m s)
{
	bool any = false;

	if (!first_visit(&s))
		return;
	if (s.ppc < 6) {
		struct m t = s;

		if (peer_step(&t)) {
			explore(t);
			any = true;
		}
	}
	if (s.fpc < 2) {
		struct m t = s;

		if (fifth_step(&t)) {
			explore(t);
			any = true;
		}
	}
	/* the owner: a new poll (bits_clear due in it or not), or the next
	 * step of the one under way */
	if (s.opc || s.polls < POLLS) {
		for (int c = 0; c < (s.opc ? 1 : 2); c++) {
			struct m t = s;

			if (!t.opc) {
				t.polls++;
				t.clear_now = c;
			}
			owner_step(&t);
			explore(t);
		}
		any = true;
	}
	if (!any || s.ppc == 6)
		tail(s);
}

static void model(bool with_fix)
{
	fix = with_fix;
	runs = lost = states = 0;
	memset(seen, 0, sizeof(seen));
	/* bitmap already on (more than four peers), or off with a fifth
	 * peer on its way; a bit left set by the slot's previous connection
	 * or not; the ring marked idle before or not */
	for (int on = 0; on < 2; on++)
		for (int bit = 0; bit < 2; bit++)
			for (int idle = 0; idle < 2; idle++) {
				struct m s;

				memset(&s, 0, sizeof(s));
				s.bits_on = s.hdr_bits_on = s.nconns_big = on;
				s.fpc = on ? 2 : 0; /* no fifth peer needed */
				s.bit = bit;
				s.idle = idle;
				explore(s);
			}
}

Test(bitmap, a_ring_connected_late_loses_entries_without_its_flag)
{
	model(false);
	cr_assert_gt(states, 1000);
	cr_assert_gt(lost, 0, "the model should find the hole the flag closes");
}

Test(bitmap, every_entry_is_drained_in_every_interleaving)
{
	model(true);
	cr_assert_gt(states, 1000);
	cr_assert_eq(lost, 0, "%ld of %ld end states lose an entry (%ld "
		     "states)", lost, runs, states);
}
