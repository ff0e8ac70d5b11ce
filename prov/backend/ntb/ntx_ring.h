/*
 * Layout of an ntb window and the ring index math (DESIGN §4). A window is
 * a wire format: fixed-width fields, offsets not pointers, cache-line
 * aligned, checked with static_assert. Who writes what:
 *   - the window owner writes its header and resets slots it allocates;
 *   - a peer writes the entries of the ring in "its" slot (each entry is
 *     published by its sequence number, written last: the receiver polls
 *     the next entry itself, so a message costs it only the entry's cache
 *     lines), the consumer index of the ring the owner writes in the
 *     peer's window (slot.cons), the doorbell, and the connect cells.
 * Nobody reads peer memory on the fast path: each side polls only its own
 * window (the NTB rule: remote reads are expensive).
 */
#ifndef NTX_RING_H
#define NTX_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ntx/ntx.h"
#include "ntx/ntx_wire.h"

#define NTX_WIN_MAGIC 0x4e54584857494e31ull /* "NTXHWIN1" */
#define NTX_WIN_VERSION 1
#define NTX_WIN_CELLS 64

enum ntx_win_state { NTX_WIN_OPEN = 1, NTX_WIN_CLOSED = 2 };

struct ntx_win_hdr {
	/* line 0: written once by the owner before anyone maps the window */
	uint64_t magic;
	uint32_t version;
	uint32_t pid;
	uint64_t epoch;
	uint64_t size;
	uint32_t nslots;
	uint32_t ring_entries;
	uint32_t entry_size;
	uint32_t ep_id;
	uint64_t slot_off;
	/* line 1: owner */
	_Alignas(NTX_CACHELINE) _Atomic uint32_t state;
	_Atomic uint32_t waiters; /* owner about to sleep: wake it up */
	/* line 2: doorbell, incremented by peers after each batch */
	_Alignas(NTX_CACHELINE) _Atomic uint64_t bell;
	/* line 3: connect doorbell, incremented after a connect request or
	 * response, so that data traffic never scans the connect cells */
	_Alignas(NTX_CACHELINE) _Atomic uint64_t conn_bell;
};
_Static_assert(sizeof(struct ntx_win_hdr) == 4 * NTX_CACHELINE, "hdr");

enum ntx_cell_state { NTX_CELL_FREE = 0, NTX_CELL_BUSY = 1, NTX_CELL_POSTED = 2 };

/* A connect request written by a peer into the owner's window. */
struct ntx_win_cell {
	_Atomic uint32_t state;
	uint32_t slot; /* the requester's slot reserved for the owner */
	struct ntx_addr from;
	uint8_t pad[NTX_CACHELINE - 8 - sizeof(struct ntx_addr)];
};
_Static_assert(sizeof(struct ntx_win_cell) == NTX_CACHELINE, "cell");

struct ntx_win_slot {
	/* written by the peer: its slot for us + 1 (connect response) */
	_Atomic uint32_t resp;
	uint32_t pad0;
	uint64_t resp_epoch;
	/* reserved (a producer index; entries carry sequence numbers) */
	_Alignas(NTX_CACHELINE) _Atomic uint32_t prod;
	/* written by the peer: consumer index of our ring in its window */
	_Alignas(NTX_CACHELINE) _Atomic uint32_t cons;
	/* entries follow, entry_size bytes each */
	_Alignas(NTX_CACHELINE) uint8_t entries[];
};
_Static_assert(sizeof(struct ntx_win_slot) == 3 * NTX_CACHELINE, "slot");

/* One ring entry: payload length, sequence number and the engine header in
 * one cache line, then the payload. seq is the sender's running count of
 * entries on this connection plus one, stored last with release; 0 in a
 * fresh slot. */
struct ntx_win_entry {
	uint32_t len; /* payload bytes */
	_Atomic uint32_t seq;
	struct ntx_wire_hdr hdr;
	uint8_t payload[];
};
_Static_assert(sizeof(struct ntx_win_entry) == NTX_CACHELINE, "entry");

static inline size_t ntx_win_cells_off(void)
{
	return sizeof(struct ntx_win_hdr);
}

static inline size_t ntx_win_slot_size(uint32_t entries, uint32_t entry_size)
{
	return sizeof(struct ntx_win_slot) + (size_t)entries * entry_size;
}

/*
 * Ring indices run over [0, 2n) so that full (distance n) and empty
 * (distance 0) differ without a wasted entry. n is a power of two.
 */
static inline uint32_t ntx_ring_next(uint32_t idx, uint32_t n)
{
	return (idx + 1) & (2 * n - 1);
}

static inline uint32_t ntx_ring_used(uint32_t prod, uint32_t cons, uint32_t n)
{
	return (prod - cons) & (2 * n - 1);
}

static inline bool ntx_ring_full(uint32_t prod, uint32_t cons, uint32_t n)
{
	return ntx_ring_used(prod, cons, n) == n;
}

static inline uint32_t ntx_ring_entry(uint32_t idx, uint32_t n)
{
	return idx & (n - 1);
}

/* Indices read from a peer are usable only inside [0, 2n) with the
 * producer at most n entries ahead of the consumer. */
static inline bool ntx_ring_pair_valid(uint32_t prod, uint32_t cons,
				       uint32_t n)
{
	return prod < 2 * n && cons < 2 * n && ntx_ring_used(prod, cons, n) <= n;
}

#endif /* NTX_RING_H */
