/*
 * Layout of an ntb window and the ring math (DESIGN.md §4). A window is a
 * wire format: fixed-width fields, offsets not pointers, cache-line
 * aligned, checked with static_assert. Who writes what:
 *   - the window owner writes its header and resets the control lines of
 *     slots it allocates;
 *   - a peer writes the ring of "its" slot, its bit in the ready bitmap,
 *     the consumer position of the ring the owner writes in the peer's
 *     window (ctl.cons), and the connect cells.
 * Nobody reads peer memory on the fast path: each side polls only its own
 * window (the NTB rule: remote reads are expensive).
 *
 * A ring is a run of cache lines, a multiple of 2 * NTX_RING_ALIGN. An
 * entry takes one header line (length, sequence number, engine header)
 * and as many lines as its payload needs, and starts on a multiple of
 * NTX_RING_ALIGN lines; a small message writes one line, and a message
 * of at most 8 bytes half of one (struct ntx_win_half). Entries never
 * wrap: one that would cross the end is preceded by a skip entry that
 * covers the rest of the lap. The receiver looks for the next entry where
 * the last one ended; what it finds there from an earlier lap is an old
 * header, whose number is behind, or payload, whose sequence word the
 * receiver cleared when it consumed that entry (only the lines where an
 * entry can start: one in NTX_RING_ALIGN): never a match. (The sender
 * clearing the next line instead would put a second cache line on the
 * latency path of every message.) One block always stays free, so that
 * "position equals consumer" means empty.
 */
#ifndef NTX_RING_H
#define NTX_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ntx/ntx_base.h"
#include "ntx/ntx_wire.h"

#define NTX_WIN_MAGIC 0x4e54584857494e31ull /* "NTXHWIN1" */
#define NTX_WIN_VERSION 9 /* 3: half entries (struct ntx_win_half); 4: the
			    * owner's service in the header; 5: quarter
			    * entries (struct ntx_win_quarter); 6: the
			    * bitmap's count in conn_bell; 7: streamed
			    * messages (NTX_OP_SHEAD, NTX_OP_SDATA); 8: the
			    * peer a slot was reserved for (ntx_win_ctl.want);
			    * 9: bulk areas (NTX_WIN_BULK) */
#define NTX_WIN_BITS_BELL (1ull << 32) /* conn_bell's high half */
#define NTX_WIN_CELLS 64
#define NTX_WIN_PAGE 4096

enum ntx_win_state { NTX_WIN_OPEN = 1, NTX_WIN_CLOSED = 2 };

/* The owner fences its peers with membarrier(GLOBAL_EXPEDITED) before it
 * sleeps or turns the bitmap on: a registered sender then needs no fence
 * of its own between an entry and its reads of waiters and bits_on. */
#define NTX_WIN_F_MEMBARRIER 1u

struct ntx_win_hdr {
	/* line 0: written once by the owner before anyone maps the window */
	uint64_t magic;
	uint32_t version;
	uint32_t pid;
	uint64_t epoch;
	uint64_t size;
	uint32_t nslots;
	uint32_t ring_lines;
	uint32_t max_payload; /* largest entry payload the owner accepts */
	uint32_t ep_id;
	uint32_t flags;       /* NTX_WIN_F_* */
	uint32_t service;     /* the owner's service, 0 for none */
	/* random part of the owner's wake-up socket name: only processes
	 * that can map the window (same user) can name it, so no other
	 * user can take the name first */
	uint64_t wake_key;
	/* line 1: owner */
	_Alignas(NTX_CACHELINE) _Atomic uint32_t state;
	_Atomic uint32_t waiters; /* owner about to sleep: wake it up */
	_Atomic uint32_t bits_on; /* owner drains by the ready bitmap */
	/* bytes of each slot's bulk area (a multiple of NTX_WIN_PAGE, at
	 * most NTX_WIN_BULK_MAX; 0: none), written once with line 0 */
	uint32_t bulk_size;
	/* line 2: connect doorbell, incremented after a connect request or
	 * response, so that data traffic never scans the connect cells (its
	 * low half); NTX_WIN_BITS_BELL is added by a sender right after it
	 * set its ready bit (one it found clear), so that an owner's watch
	 * reads this word instead of every bitmap word (its high half) */
	_Alignas(NTX_CACHELINE) _Atomic uint64_t conn_bell;
	/* lines 3-: the ready bitmap, one bit per slot, set by a peer after
	 * it published entries; an owner with many peers drains only the
	 * rings whose bits it takes (ntx_win_bits) */
};
_Static_assert(sizeof(struct ntx_win_hdr) == 3 * NTX_CACHELINE,
	       "window header: geometry, owner and connect lines");

enum ntx_cell_state { NTX_CELL_FREE = 0, NTX_CELL_BUSY = 1, NTX_CELL_POSTED = 2 };

/* A connect request written by a peer into the owner's window. */
struct ntx_win_cell {
	_Atomic uint32_t state;
	uint32_t slot; /* the requester's slot reserved for the owner */
	struct ntx_addr from;
	uint8_t pad[NTX_CACHELINE - 8 - sizeof(struct ntx_addr)];
};
_Static_assert(sizeof(struct ntx_win_cell) == NTX_CACHELINE,
	       "a connect cell is one cache line");

/* The control lines of one slot; the ring itself lives apart, page
 * aligned, so that an idle slot costs no ring page. */
struct ntx_win_ctl {
	/* written by the peer: its slot for us + 1 (connect response) */
	_Atomic uint32_t resp;
	/* written by the peer: it closed this connection (after a
	 * protocol violation of ours, or fi_close); we drain and fail it */
	_Atomic uint32_t closed;
	uint64_t resp_epoch;
	/* written by the owner before it posts a connect request naming
	 * this slot: the peer asked (zero otherwise). The peer answers
	 * only a request its window confirms, so that a cell in the
	 * owner's name that the owner did not post is refused. */
	struct ntx_addr want;
	/* written by the peer: consumer position of our ring in its window */
	_Alignas(NTX_CACHELINE) _Atomic uint32_t cons;
	/* written by the peer: bytes of our bulk area in its window it is
	 * done with, free running (skipped ends of a lap included) */
	_Atomic uint64_t bulk_cons;
};
_Static_assert(sizeof(struct ntx_win_ctl) == 2 * NTX_CACHELINE,
	       "response and consumer position on lines of their own");

/* An entry's header line: payload length, sequence number and the engine
 * header; the payload follows in the next lines. seq is the sender's
 * running count of entries on this connection plus one, stored last with
 * release; 0 means "not yet". */
struct ntx_win_entry {
	uint32_t len; /* payload bytes, or NTX_WIN_SKIP */
	_Atomic uint32_t seq;
	struct ntx_wire_hdr hdr;
	uint8_t payload[];
};
_Static_assert(sizeof(struct ntx_win_entry) == NTX_CACHELINE,
	       "an entry header is one cache line");
#define NTX_WIN_SKIP UINT32_MAX /* the rest of the lap is unused */

/* Bulk entries. A whole entry whose length word is NTX_WIN_BULK | n
 * carries only its header line: its n payload bytes lie in the sender's
 * bulk area in the receiver's window (the slot's, beside its ring), at
 * the place both sides work out alike: right after the last bulk
 * payload (rounded up to a line), or at the area's start when n bytes do
 * not fit before its end. The receiver tells how far it is done with
 * the area in ntx_win_ctl.bulk_cons. Streamed messages' segments go this
 * way (n at most ntx_win_bulk_seg of the area), so that a segment can be
 * larger than a ring holds twice and several are in flight while the
 * ring stays small; the area's pages are given back when it goes unused
 * (DESIGN §4, "Bulk areas"). */
#define NTX_WIN_BULK 0x20000000u
#define NTX_WIN_BULK_MAX (4u << 20)
#define NTX_WIN_BULK_SEG_MAX 16384u

/* The largest payload of one bulk entry in an area of 'size' bytes: a
 * quarter of it, at most NTX_WIN_BULK_SEG_MAX, so that several segments
 * are in flight. */
static inline uint32_t ntx_win_bulk_seg(uint32_t size)
{
	uint32_t q = size / 4 & ~(uint32_t)(NTX_CACHELINE - 1);

	return q < NTX_WIN_BULK_SEG_MAX ? q : NTX_WIN_BULK_SEG_MAX;
}

/* Where the next bulk payload of len bytes lies in an area of 'size'
 * bytes (not 0) after pos bytes of it went by, skipped ends of laps
 * included: right after them, or at the area's start when it does not
 * fit before the end; *skip: the bytes of the lap left unused. The one
 * rule sender and receiver both follow. */
static inline uint32_t ntx_win_bulk_place(uint64_t pos, uint32_t size,
					  uint32_t len, uint32_t *skip)
{
	uint32_t off = (uint32_t)(pos % size);

	*skip = off + len > size ? size - off : 0;
	return *skip ? 0 : off;
}

/* A message of at most NTX_WIN_HALF_MAX bytes (tagged or not, with or
 * without CQ data, no ack asked for) in part of a header line, so that
 * two to four share a line: a half entry (struct ntx_win_half, 32 bytes)
 * or, when its tag and CQ data are those of the last half entry of the
 * same ring, a quarter entry (struct ntx_win_quarter, 16 bytes, which
 * carries neither). The first part starts a new entry on a line of its
 * own, and the sequence words of the parts after it are cleared with it;
 * a sender writes its next part right after its last one, in the same
 * line, when that was a part, nothing came after it and the part fits;
 * else a new line. The receiver, after a part, looks for the next number
 * right after it in that line (ntx_win_part) and at its position. kind is
 * NTX_WIN_HALF [| NTX_WIN_SHORT] | flags << 8 | bytes (NTX_PF_TAGGED,
 * NTX_PF_DATA; no other bit), which no length of a whole entry can be;
 * seq is where a whole entry has its own. */
struct ntx_win_half {
	uint32_t kind;
	_Atomic uint32_t seq;
	uint64_t tag;
	uint64_t data; /* remote CQ data */
	uint8_t bytes[8];
};
struct ntx_win_quarter {
	uint32_t kind; /* with NTX_WIN_SHORT */
	_Atomic uint32_t seq;
	uint8_t bytes[8];
};
_Static_assert(2 * sizeof(struct ntx_win_half) == NTX_CACHELINE &&
		       4 * sizeof(struct ntx_win_quarter) == NTX_CACHELINE,
	       "two half or four quarter entries fill a line");
#define NTX_WIN_HALF 0x80000000u
#define NTX_WIN_SHORT 0x40000000u
#define NTX_WIN_HALF_MAX 8
#define NTX_WIN_PART 16 /* bytes: parts start on multiples of this */

static inline bool ntx_win_is_half(uint32_t len)
{
	return len != NTX_WIN_SKIP && (len & NTX_WIN_HALF);
}

/* The bytes of a line a part of this kind takes. */
static inline uint32_t ntx_win_part_size(uint32_t kind)
{
	return kind & NTX_WIN_SHORT ? sizeof(struct ntx_win_quarter)
				    : sizeof(struct ntx_win_half);
}

/* Half h (0 or 1) of the header line e. */
static inline struct ntx_win_half *ntx_win_half(struct ntx_win_entry *e,
						int h)
{
	return (struct ntx_win_half *)e + h;
}

/* The part at byte off (a multiple of NTX_WIN_PART below a line) of the
 * header line e: its kind and number, and a quarter's bytes. */
static inline struct ntx_win_quarter *ntx_win_part(struct ntx_win_entry *e,
						   uint32_t off)
{
	return (struct ntx_win_quarter *)((uint8_t *)e + off);
}

/* Where each part of a window lies; computed the same way on both sides
 * from (nslots, ring_lines), so a peer's header is checked, not trusted. */
struct ntx_win_geom {
	uint32_t nslots, ring_lines, bulk_size;
	size_t bits_off, cells_off, ctl_off, ring_off, ring_size, bulk_off,
		size;
};

static inline size_t ntx_align(size_t v, size_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static inline void ntx_win_geom_init(struct ntx_win_geom *g, uint32_t nslots,
				     uint32_t ring_lines, uint32_t bulk_size)
{
	g->nslots = nslots;
	g->ring_lines = ring_lines;
	g->bulk_size = bulk_size;
	g->bits_off = sizeof(struct ntx_win_hdr);
	g->cells_off = g->bits_off +
		       ntx_align((nslots + 63) / 64 * 8, NTX_CACHELINE);
	g->ctl_off = g->cells_off + NTX_WIN_CELLS * sizeof(struct ntx_win_cell);
	g->ring_off = ntx_align(g->ctl_off + (size_t)nslots *
						  sizeof(struct ntx_win_ctl),
				NTX_WIN_PAGE);
	g->ring_size = (size_t)ring_lines * NTX_CACHELINE;
	g->bulk_off = ntx_align(g->ring_off + (size_t)nslots * g->ring_size,
				NTX_WIN_PAGE);
	g->size = g->bulk_off + (size_t)nslots * bulk_size;
}

/* ---- ring math: positions are line numbers in [0, n) ------------------ */

#define NTX_RING_ALIGN 4 /* lines: entries start on multiples of this */

/* Lines an entry with len payload bytes takes, up to the next start. */
static inline uint32_t ntx_ring_lines(uint32_t len)
{
	uint32_t l = 1 + (len + NTX_CACHELINE - 1) / NTX_CACHELINE;

	return (l + NTX_RING_ALIGN - 1) & ~(uint32_t)(NTX_RING_ALIGN - 1);
}

/* Lines written and not yet consumed. */
static inline uint32_t ntx_ring_used(uint32_t pos, uint32_t cons, uint32_t n)
{
	return pos >= cons ? pos - cons : pos + n - cons;
}

static inline uint32_t ntx_ring_advance(uint32_t pos, uint32_t k, uint32_t n)
{
	pos += k;
	return pos >= n ? pos - n : pos;
}

/* An entry of 'lines' at pos must start the next lap: it would cross the
 * end of the ring. */
static inline bool ntx_ring_wraps(uint32_t pos, uint32_t lines, uint32_t n)
{
	return pos + lines > n;
}

/* Lines an entry of 'lines' at pos takes: itself, and the skip before it
 * when it wraps. */
static inline uint32_t ntx_ring_need(uint32_t pos, uint32_t lines, uint32_t n)
{
	return ntx_ring_wraps(pos, lines, n) ? lines + n - pos : lines;
}

/* Lines a writer at pos may fill while the reader is at cons: all that
 * are not in use but one, which always stays free so that a full ring
 * never reads as an empty one. */
static inline uint32_t ntx_ring_free(uint32_t pos, uint32_t cons, uint32_t n)
{
	return n - 1 - ntx_ring_used(pos, cons, n);
}

/* Room for an entry of 'lines' at pos: the entry, the skip before it when
 * it wraps, and the line that always stays free. */
static inline bool ntx_ring_room(uint32_t pos, uint32_t cons, uint32_t lines,
				 uint32_t n)
{
	return ntx_ring_need(pos, lines, n) <= ntx_ring_free(pos, cons, n);
}

/* The largest payload one entry can carry in a ring of n lines (a
 * multiple of 2 * NTX_RING_ALIGN). The receiver publishes its consumer
 * position only every quarter ring, so a drained ring may look up to
 * n/4 - 1 lines full to the sender; an entry of L lines that must skip to
 * the next lap needs up to 2L - 3 free lines. So 2L - 3 <= n - n/4 + 1,
 * L <= 3n/8 + 2: larger entries could wait forever for room in a ring
 * the receiver has emptied. */
static inline uint32_t ntx_ring_max_payload(uint32_t n)
{
	uint32_t lines = (3 * n / 8 + 2) & ~(uint32_t)(NTX_RING_ALIGN - 1);

	return (lines - 1) * NTX_CACHELINE;
}

/* A ring length the math above holds for. */
static inline bool ntx_ring_lines_valid(uint32_t n)
{
	return n >= 4 * NTX_RING_ALIGN && n % (2 * NTX_RING_ALIGN) == 0;
}

#endif /* NTX_RING_H */
