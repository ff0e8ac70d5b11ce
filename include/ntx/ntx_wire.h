/*
 * The engine's packet header: the wire format of every protocol message
 * (eager, rendezvous RTS/CTS/DATA/FIN, acks). Fixed width; every field is
 * checked by the receiver before use (DESIGN §7).
 */
#ifndef NTX_WIRE_H
#define NTX_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ntx/ntx_base.h"

enum ntx_op {
	NTX_OP_EAGER = 1, /* whole message in the payload */
	NTX_OP_RTS,       /* rendezvous: payload = sender's iovecs */
	NTX_OP_CTS,       /* receiver asks for DATA (no single copy) */
	NTX_OP_DATA,      /* a segment of a rendezvous message */
	NTX_OP_FIN,       /* receiver pulled the data; sender completes */
	NTX_OP_ACK,       /* delivery complete of an eager message */
	NTX_OP_SPLIT,     /* receiver asks the sender to write a part */
	NTX_OP_DONE,      /* sender wrote its part of a split message */
	/* one-sided (DESIGN §3 RMA/atomics): the target validates the key,
	 * the whole range and the access of every request packet before a
	 * byte moves, and answers each one */
	NTX_OP_WRITE,     /* payload = a segment of the data */
	NTX_OP_WRITE_CMA, /* payload = initiator's iovecs: target pulls */
	NTX_OP_READ,      /* target answers with RMA_RESP + data */
	NTX_OP_READ_CMA,  /* payload = initiator's iovecs: target pushes */
	NTX_OP_ATOMIC,    /* payload = operands [+ compare values] */
	NTX_OP_RMA_RESP,  /* status; READ: data; ATOMIC fetch: old values */
	NTX_OP_RMA_CHECK, /* several remote iovecs: all checked first */
	NTX_OP_RMA_NOTIFY, /* several remote iovecs: remote CQ data, total */
	/* job keys (DESIGN §7): status = NTX_AUTH_*; before a VC is
	 * proven, nothing else from it is accepted */
	NTX_OP_AUTH,
	/* FI_EP_MSG connection management (DESIGN §3, "MSG endpoints"):
	 * status = NTX_CM_*, sreq = the connection's id, msg_len = bytes
	 * of connection data in the payload */
	NTX_OP_CM,
	/* a scalable endpoint's context tells a peer its contexts' names
	 * (DESIGN §3, "Scalable endpoints"): msg_len = how many, payload =
	 * the names, list bits cleared */
	NTX_OP_NAMES,
	/* a streamed message (FI_NTX_SHM_STREAM_MAX): its head, as an EAGER
	 * header with msg_len the whole length and the first bytes in the
	 * payload, then its segments (offset = bytes before this one), each
	 * packet written as soon as the ring has room and nothing of another
	 * message between them; no rendezvous round trip */
	NTX_OP_SHEAD,
	NTX_OP_SDATA,
	NTX_OP_MAX
};

#define NTX_PF_TAGGED 0x01  /* tagged message */
#define NTX_PF_DATA 0x02    /* cq_data is valid */
#define NTX_PF_ACK 0x04     /* sender wants NTX_OP_ACK (delivery complete) */
#define NTX_PF_INLINE 0x08  /* EAGER: payload (<= 16 bytes) in rreq/offset */
#define NTX_PF_LAST 0x10    /* RMA/atomic: last packet of the operation */
#define NTX_PF_FETCH 0x20   /* ATOMIC: return the old values */
#define NTX_PF_COMPARE 0x40 /* ATOMIC: compare values follow operands */
#define NTX_PF_ALL 0x7f
#define NTX_PF_ALL_MSG 0x0f
#define NTX_INLINE_MAX 16

struct ntx_wire_hdr {
	uint8_t op;
	uint8_t flags;
	uint16_t niov;     /* RTS: iovecs in the payload */
	int32_t status;    /* FIN: 0 or a positive FI_E* code */
	uint64_t tag;
	uint64_t cq_data;
	uint64_t msg_len;  /* whole message; CTS: bytes the receiver wants */
	uint64_t sreq;     /* sender's request id */
	uint64_t rreq;     /* receiver's request id */
	uint64_t offset;   /* DATA: where the segment goes */
};
/* One-sided packets use the same fields:
 *   tag     = the target's MR key
 *   offset  = remote address of this remote iovec (part) of the request
 *   msg_len = bytes of the part (ATOMIC: elements)
 *   rreq    = offset of this segment within the part
 *   cq_data = WRITE*: remote CQ data; READ: bytes of the segment
 *   status  = index of the part
 *   niov    = *_CMA: initiator iovecs in the payload; ATOMIC: dt << 8 | op
 * RMA_RESP echoes sreq and rreq, carries the part index in niov and 0 or
 * an FI_E* code in status.
 * The target checks [offset, offset + msg_len) whole, for every segment,
 * so that a request that is out of range moves no byte at all. */
#define NTX_RMA_RETRY 0x7fff /* RMA_RESP status: no single copy, resend */
/* A request of several remote iovecs is checked whole before any of its
 * data moves: RMA_CHECK carries every (addr, len, key) (niov of them, the
 * request's op in status, an atomic's dt << 8 | op in rreq) and is
 * answered with niov = NTX_RMA_CHECK_PART. Its remote CQ data then
 * travels last in RMA_NOTIFY (msg_len = bytes of the whole request). */
#define NTX_RMA_CHECK_PART 0xffff

/* Writes every field of an eager message of at most NTX_INLINE_MAX bytes
 * carried in the header (NTX_PF_INLINE; pflags: NTX_PF_TAGGED,
 * NTX_PF_DATA): the bytes go to rreq and offset, the rest of those is
 * zero. A back end with a ring writes it in place (send_inline). */
static inline void ntx_wire_hdr_inline(struct ntx_wire_hdr *h, uint8_t pflags,
				       uint64_t tag, uint64_t data,
				       const void *buf, size_t len)
{
	h->op = NTX_OP_EAGER;
	h->flags = NTX_PF_INLINE | pflags;
	h->niov = 0;
	h->status = 0;
	h->tag = tag;
	h->cq_data = data;
	h->msg_len = len;
	h->sreq = 0;
	h->rreq = 0;
	h->offset = 0;
	/* rreq and offset as one 16-byte field, from the header's base */
	ntx_copy16((uint8_t *)h + offsetof(struct ntx_wire_hdr, rreq), buf,
		   len);
}

/* Copies a header out of memory a peer can write, in the pieces the
 * engine then reads it in (the first word; tag and cq_data; msg_len and
 * sreq; rreq and offset): a load that spans two stores cannot be
 * forwarded from the store buffer and waits for both to reach the cache. */
static inline void ntx_wire_hdr_load(struct ntx_wire_hdr *d,
				     const struct ntx_wire_hdr *s)
{
	memcpy(d, s, 8);
	memcpy(&d->tag, &s->tag, 16);
	memcpy(&d->msg_len, &s->msg_len, 16);
	memcpy(&d->rreq, &s->rreq, 16);
}

/* NTX_OP_AUTH stages (in status) */
#define NTX_AUTH_CHAL 1   /* payload: struct ntx_wire_auth */
#define NTX_AUTH_PROOF 2  /* payload: HMAC-SHA256, 32 bytes */
#define NTX_AUTH_REFUSE 3 /* no key, or the peer's proof failed */
#define NTX_AUTH_NONCE 16

/* A challenge: a fresh nonce and the sender's whole name, both covered
 * by the answer's MAC. */
struct ntx_wire_auth {
	uint8_t nonce[NTX_AUTH_NONCE];
	uint8_t name[32]; /* struct ntx_addr */
};

/* NTX_OP_CM stages */
#define NTX_CM_REQ 1      /* client -> passive endpoint: connect */
#define NTX_CM_ACCEPT 2   /* server endpoint -> client */
#define NTX_CM_REJECT 3   /* passive endpoint -> client */
#define NTX_CM_ESTAB 4    /* client -> server endpoint: both connected */
#define NTX_CM_SHUTDOWN 5 /* either side: the connection ends */
#define NTX_CM_DATA_MAX 256 /* connection data (FI_OPT_CM_DATA_SIZE) */

struct ntx_wire_riov {
	uint64_t addr;
	uint64_t len;
	uint64_t key;
};
/* 56 bytes: with the back end's 8-byte entry prefix, one cache line */
_Static_assert(sizeof(struct ntx_wire_hdr) == 56, "wire header size");

/* A buffer a peer may move single copy: key from the back end's expose
 * (0 where the back end needs none). */
struct ntx_wire_iov {
	uint64_t addr;
	uint64_t len;
	uint64_t key;
};
#define NTX_KEY_NONE UINT64_MAX /* no single copy of this buffer */

/* A peer's buffers as iovecs (addresses in its memory, keys dropped), for
 * the iovec cursor (DESIGN §3) and process_vm_readv. */
static inline size_t ntx_wire_iov_view(const struct ntx_wire_iov *w,
				       size_t n, struct iovec *iov)
{
	for (size_t i = 0; i < n; i++) {
		iov[i].iov_base = (void *)(uintptr_t)w[i].addr;
		iov[i].iov_len = w[i].len;
	}
	return n;
}

#endif /* NTX_WIRE_H */
