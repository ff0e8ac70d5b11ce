/*
 * The reliability protocol of the datagram back ends (DESIGN §10): engine
 * packets of any length up to a maximum are cut into datagrams, numbered,
 * acknowledged cumulatively, retransmitted and reassembled, and delivered
 * once and in order. Pure: no sockets, no clock (the caller passes the
 * time), no libfabric calls. Datagrams leave through ops->emit and arrive
 * through ntx_rel_on_datagram; a back end moves them.
 *
 * Not thread safe: the caller serializes all calls on one struct ntx_rel.
 * Callbacks must not free the peer they are given nor destroy the
 * ntx_rel; they may call ntx_rel_send.
 */
#ifndef NTX_REL_H
#define NTX_REL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ntx/ntx_list.h"

/* The datagram header, little-endian on the wire, 32 bytes (DESIGN §10). */
#define NTX_REL_HDR_LEN 32
#define NTX_REL_VERSION 1

#define NTX_REL_F_DATA 0x01 /* carries a fragment: seq and msg fields valid */
#define NTX_REL_F_PRIO 0x02 /* DATA: the fragment is of the priority class */
#define NTX_REL_F_GAP 0x04  /* the sender holds packets beyond ack: dup ACK */
#define NTX_REL_F_ALL 0x07

struct ntx_rel_hdr {
	uint8_t version;
	uint8_t flags;
	uint16_t plen;      /* payload bytes after the header */
	uint32_t src_epoch; /* the sender's session, never 0 */
	uint32_t dst_epoch; /* the receiver's session as known, 0 = not yet */
	uint32_t seq;       /* DATA: packet sequence number */
	uint32_t ack;       /* cumulative: every seq before this one arrived */
	uint32_t msg_id;    /* DATA: per peer and class, for reassembly */
	uint32_t msg_len;   /* DATA: whole message */
	uint16_t frag;      /* DATA: index of this fragment */
	uint16_t nfrag;     /* DATA: fragments of the message */
};

void ntx_rel_hdr_pack(const struct ntx_rel_hdr *h, uint8_t *out);
void ntx_rel_hdr_unpack(const uint8_t *in, struct ntx_rel_hdr *h);

/* Message classes: the priority queue is drained before the bulk queue.
 * Messages are delivered in order within a class; a priority message may
 * overtake a bulk message queued before it. */
enum { NTX_REL_BULK = 0, NTX_REL_PRIO = 1, NTX_REL_CLASSES = 2 };

/* Why a datagram was dropped (counted in stats.drops). */
enum ntx_rel_drop {
	NTX_REL_DROP_SHORT,    /* shorter than the header */
	NTX_REL_DROP_VERSION,  /* unknown version or flag bits */
	NTX_REL_DROP_LEN,      /* plen disagrees with the datagram, > mtu */
	NTX_REL_DROP_FRAG,     /* nfrag 0, frag >= nfrag */
	NTX_REL_DROP_MSGLEN,   /* msg_len > max_msg */
	NTX_REL_DROP_EPOCH,    /* addressed to or from an old session */
	NTX_REL_DROP_WINDOW,   /* seq beyond the receive window */
	NTX_REL_DROP_ACK,      /* acknowledges packets never sent */
	NTX_REL_DROP_REASM,    /* fragment does not continue its message */
	NTX_REL_DROP_NOMEM,    /* no memory to hold it */
	NTX_REL_DROP_FAILED,   /* the peer failed */
	NTX_REL_DROP_BUDGET,   /* out of order, and cfg.ooo_mem_max is held */
	NTX_REL_DROP_MAX
};

struct ntx_rel_peer;

struct ntx_rel_ops {
	/* put one datagram on the wire: hdr (NTX_REL_HDR_LEN bytes), then
	 * len bytes of payload; 0, or -FI_EAGAIN to stop this poll (the
	 * datagram counts as not sent and is offered again) */
	int (*emit)(void *arg, struct ntx_rel_peer *peer, const void *hdr,
		    size_t hdr_len, const void *payload, size_t len);
	/* a whole message, once, in order within its class */
	void (*deliver)(void *arg, struct ntx_rel_peer *peer, int prio,
			const void *msg, size_t len);
	/* the peer failed (-FI_ETIMEDOUT, -FI_ECONNRESET): called once */
	void (*failed)(void *arg, struct ntx_rel_peer *peer, int err);
	/* after failed: each message not wholly acknowledged, with the ctx
	 * given to ntx_rel_send (may be NULL) */
	void (*dropped)(void *arg, struct ntx_rel_peer *peer, void *ctx);
	/* optional: a message with a ctx is wholly acknowledged */
	void (*acked)(void *arg, struct ntx_rel_peer *peer, void *ctx);
};

struct ntx_rel_cfg {
	uint32_t mtu;         /* payload bytes per datagram (<= 65000) */
	uint32_t window;      /* packets in flight per peer (2..1024) */
	uint32_t max_msg;     /* largest message (<= mtu * 65535) */
	uint32_t queue_msgs;  /* messages queued per peer and class */
	uint32_t queue_bytes; /* bytes queued per peer and class */
	uint32_t ack_every;   /* ACK at once after this many new packets */
	uint32_t dupack;      /* duplicate ACKs that trigger a retransmit */
	uint32_t epoch;       /* our session, != 0 */
	/* the caller sets both epochs of each peer after a handshake
	 * (ntx_rel_peer_set_epochs): a datagram with any other pair is
	 * dropped, never taken for a restart (DESIGN §10 Epochs) */
	bool set_epochs;
	uint64_t delack_ns;   /* longest an arrival waits for its ACK */
	uint64_t rto_init_ns; /* retransmit timeout before an RTT sample */
	uint64_t rto_min_ns;
	uint64_t rto_max_ns;  /* back-off cap */
	uint64_t dead_ns;     /* no progress with data in flight: failed */
	/* bytes of out-of-order packets held across all peers, 0: no bound;
	 * each peer may still hold NTX_REL_OOO_MIN (DESIGN §10 Bounds) */
	uint64_t ooo_mem_max;
};

#define NTX_REL_OOO_MIN 16

struct ntx_rel_stats {
	uint64_t tx_data;    /* first transmissions */
	uint64_t tx_retrans; /* retransmissions, all causes */
	uint64_t tx_rto;     /* ... of which after a timeout */
	uint64_t tx_fast;    /* ... after dupack duplicate ACKs */
	uint64_t tx_partial; /* ... after a partial ACK in recovery */
	uint64_t tx_ack;     /* pure ACK datagrams */
	uint64_t rx_data;    /* data datagrams accepted */
	uint64_t rx_dup;     /* duplicates dropped (and re-ACKed) */
	uint64_t rx_ooo;     /* held in the reorder buffer */
	uint64_t delivered;  /* messages */
	uint64_t failed;     /* peers */
	uint64_t reasm_bufs; /* reassembly buffers held now */
	uint64_t reasm_max;  /* ... at most */
	uint64_t drops[NTX_REL_DROP_MAX];
};

/* Per-peer state: small when idle (no window, no buffers; DESIGN §10).
 * Fields are private to the module (ntx_rel*.c, ntx_rel_int.h). */
struct ntx_rel_slot;
struct ntx_rel_rxpkt;
struct ntx_rel_reasm;

struct ntx_rel_peer {
	struct ntx_list entry;  /* rel->peers */
	struct ntx_list active; /* rel->active while it has work */
	struct ntx_list queue[NTX_REL_CLASSES]; /* fragments still unsent */
	struct ntx_list msgs;   /* every message not wholly acknowledged */
	void *ctx;              /* the caller's */
	struct ntx_rel_slot *win;    /* window slots, only while in flight */
	struct ntx_rel_rxpkt **ooo;  /* reorder buffer, only while holding */
	struct ntx_rel_reasm *reasm[NTX_REL_CLASSES];
	uint64_t rto_deadline, ack_deadline, progress_ns, retx_at;
	uint64_t srtt, rttvar, rto;
	uint32_t tx_next, tx_una, recover, rx_next;
	uint32_t msg_id[NTX_REL_CLASSES];
	uint32_t peer_epoch, dead_epoch;
	uint32_t my_epoch;      /* ours towards this peer (cfg.epoch) */
	uint32_t queued_bytes[NTX_REL_CLASSES];
	uint16_t queued_msgs[NTX_REL_CLASSES];
	uint16_t ooo_count, ack_owed;
	uint8_t backoff, dupacks, gap_acks, flags, retx_why;
	int err;
};

struct ntx_rel {
	struct ntx_rel_cfg cfg;
	struct ntx_rel_ops ops;
	void *arg;
	struct ntx_list peers;
	struct ntx_list active;
	size_t mem; /* bytes allocated by the module now */
	size_t ooo_mem; /* ... of which reorder buffers */
	struct ntx_rel_stats stats;
};

void ntx_rel_cfg_default(struct ntx_rel_cfg *cfg);
int ntx_rel_init(struct ntx_rel *rel, const struct ntx_rel_cfg *cfg,
		 const struct ntx_rel_ops *ops, void *arg);
/* frees every peer, without callbacks */
void ntx_rel_fini(struct ntx_rel *rel);

/* a peer on first contact (first send, or a datagram from a new source) */
int ntx_rel_peer_new(struct ntx_rel *rel, void *ctx,
		     struct ntx_rel_peer **out);
/* frees it and its queued messages, without callbacks */
void ntx_rel_peer_free(struct ntx_rel *rel, struct ntx_rel_peer *peer);
/* A peer that failed with -FI_ECONNRESET (it restarted) starts a new
 * session: state cleared, queued messages discarded without callbacks,
 * the old session's datagrams still refused. */
void ntx_rel_peer_reset(struct ntx_rel *rel, struct ntx_rel_peer *peer);
static inline void *ntx_rel_peer_ctx(const struct ntx_rel_peer *peer)
{
	return peer->ctx;
}
/* 0, or the error it failed with */
static inline int ntx_rel_peer_error(const struct ntx_rel_peer *peer)
{
	return peer->err;
}
/* With cfg.set_epochs: the pair of epochs the handshake agreed, ours
 * first; the peer's datagrams must carry both. */
void ntx_rel_peer_set_epochs(struct ntx_rel_peer *peer, uint32_t mine,
			     uint32_t theirs);
/* A held peer sends nothing (its messages queue) until released; it
 * owes nothing then either, so it has no deadline. */
void ntx_rel_peer_hold(struct ntx_rel *rel, struct ntx_rel_peer *peer,
		       bool hold);
/* The ctx of every message not wholly acknowledged is forgotten:
 * acked and dropped get NULL for them. */
void ntx_rel_peer_forget(struct ntx_rel_peer *peer);
/* nothing queued, in flight, buffered or owed */
bool ntx_rel_peer_idle(const struct ntx_rel_peer *peer);

/* Queue a message (copied: the iov is free on return). -FI_EAGAIN when
 * the peer's queue for this class is full, -FI_EINVAL above max_msg, the
 * peer's error once failed. */
int ntx_rel_send(struct ntx_rel *rel, struct ntx_rel_peer *peer, int prio,
		 const struct iovec *iov, size_t iovcnt, void *ctx);

/* Emit every datagram due at now_ns (new fragments, retransmits, ACKs) and
 * fail dead peers. The number emitted, or -FI_EAGAIN if emit refused. */
int ntx_rel_poll_tx(struct ntx_rel *rel, uint64_t now_ns);

/* A datagram from peer. 0, or -FI_EINVAL when dropped (counted). */
int ntx_rel_on_datagram(struct ntx_rel *rel, struct ntx_rel_peer *peer,
			const void *buf, size_t len, uint64_t now_ns);

/* When ntx_rel_poll_tx has work next: 0 = now, UINT64_MAX = never. */
uint64_t ntx_rel_next_deadline(const struct ntx_rel *rel);

#endif /* NTX_REL_H */
