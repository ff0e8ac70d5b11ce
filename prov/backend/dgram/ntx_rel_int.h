/*
 * What the files of the reliability module (DESIGN §10) share, and no one
 * else: its flags, its buffers and their accounting, and the calls between
 * the peers (ntx_rel.c), sending (ntx_rel_tx.c) and receiving (ntx_rel_rx.c).
 */
#ifndef NTX_REL_INT_H
#define NTX_REL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ntx_rel.h"

#define PF_FAILED 0x01   /* failed: nothing more is sent or taken */
#define PF_ACK_NOW 0x02  /* a duplicate or a filled hole: ACK at once */
#define PF_RETX 0x04     /* retransmit the oldest unacknowledged packet */
#define PF_RECOVERY 0x08 /* retransmitted; recovery ends at p->recover */
#define PF_HOLD 0x10     /* the caller holds it: nothing leaves */

/* ntx.h has ntx_container_of; this module includes no provider header */
#define REL_OF(ptr, type, field) \
	((type *)(void *)((char *)(ptr) - offsetof(type, field)))

/* One queued message, copied; freed when every fragment is acknowledged. */
struct ntx_rel_msg {
	struct ntx_list qentry; /* peer->queue[prio] while fragments unsent */
	struct ntx_list entry;  /* peer->msgs */
	void *ctx;
	uint32_t id, len;
	uint16_t nfrag, next_frag, acked;
	uint8_t prio;
	uint8_t data[];
};

/* A packet in flight: slot seq % window of peer->win. */
struct ntx_rel_slot {
	struct ntx_rel_msg *msg; /* NULL: free */
	uint64_t sent_ns;        /* first transmission, for the RTT */
	uint64_t last_ns;        /* latest transmission */
	uint16_t frag;
	uint16_t tx_count;       /* transmissions; RTT sampled only at 1 */
};

/* A packet that arrived before its predecessors. */
struct ntx_rel_rxpkt {
	struct ntx_rel_hdr h;
	uint8_t data[];
};

/* A message being reassembled: at most one per peer and class, because
 * fragments are processed in sequence order and a sender finishes a
 * class's message before starting the next one. */
struct ntx_rel_reasm {
	uint32_t id, len, off;
	uint16_t nfrag, next;
	uint8_t data[];
};

/* ---- memory, counted so tests see an idle peer holds nothing ----------- */

static inline void *rel_alloc(struct ntx_rel *rel, size_t size)
{
	void *p = calloc(1, size);

	if (p)
		rel->mem += size;
	return p;
}

static inline void rel_free(struct ntx_rel *rel, void *p, size_t size)
{
	if (!p)
		return;
	rel->mem -= size;
	free(p);
}

static inline int32_t seq_diff(uint32_t a, uint32_t b)
{
	return (int32_t)(a - b);
}

static inline uint32_t rel_in_flight(const struct ntx_rel_peer *p)
{
	return p->tx_next - p->tx_una;
}

/* ntx_rel.c: what the peers hold, and their state */
void ntx_rel_msg_free(struct ntx_rel *rel, struct ntx_rel_peer *p,
		      struct ntx_rel_msg *m);
void ntx_rel_win_free(struct ntx_rel *rel, struct ntx_rel_peer *p);
void ntx_rel_ooo_pkt_free(struct ntx_rel *rel, struct ntx_rel_rxpkt *pkt);
void ntx_rel_ooo_free(struct ntx_rel *rel, struct ntx_rel_peer *p);
void ntx_rel_reasm_free(struct ntx_rel *rel, struct ntx_rel_peer *p, int c);
void ntx_rel_peer_activate(struct ntx_rel *rel, struct ntx_rel_peer *p);
void ntx_rel_peer_fail(struct ntx_rel *rel, struct ntx_rel_peer *p,
		       int err);

/* ntx_rel_tx.c: the ACK a datagram of the peer carries */
void ntx_rel_on_ack(struct ntx_rel *rel, struct ntx_rel_peer *p,
		    const struct ntx_rel_hdr *h, uint64_t now);

#endif /* NTX_REL_INT_H */
