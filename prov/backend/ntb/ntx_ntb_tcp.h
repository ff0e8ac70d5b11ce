/*
 * The tcp back end's state (DESIGN §4, "tcp"), shared by its files: the
 * endpoint and its ops (ntx_ntb_tcp.c), the frames in and out of a
 * connection (ntx_ntb_tcp_frame.c) and the proof of name (ntx_ntb_tcp_hs.c).
 */
#ifndef NTX_NTB_TCP_H
#define NTX_NTB_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx_tcp_wire.h"

enum ntx_tcp_state {
	NTX_TCP_CONNECTING,   /* ours: TCP connect under way, hello queued */
	NTX_TCP_WELCOME_WAIT, /* ours: hello sent, our name being proven */
	NTX_TCP_HELLO_WAIT,   /* accepted: no hello yet (or a PROVE) */
	NTX_TCP_VERIFY,       /* accepted: hello in, its name being proven */
	NTX_TCP_PROBE,        /* ours: carried a PROVE, waits for the close */
	NTX_TCP_OPEN,
	NTX_TCP_FAILED,
};

struct ntx_buf {
	uint8_t *data;
	size_t len, cap, off;
};

struct ntx_tcp_conn {
	struct ntx_be_conn head; /* first: what the engine holds */
	struct ntx_list entry;
	struct ntx_tcp_ep *be;
	void *vc;
	int fd;
	enum ntx_tcp_state state;
	struct ntx_buf in, out;
	uint64_t deadline_ns; /* until OPEN: when it fails */
	struct ntx_addr peer; /* ours: whom we dial; VERIFY: the claim */
	uint8_t nonce[NTX_TCP_NONCE]; /* VERIFY: what the claimant echoes */
	uint32_t peer_eager;  /* the peer's FI_NTX_TCP_EAGER_MAX, once OPEN */
	uint8_t misses;       /* VERIFY: echoes of other connections */
	bool proof_due;       /* VERIFY: its PROVE waits its address's turn */
	uint32_t src;         /* VERIFY: the address it comes from */
	bool probe;           /* carries a PROVE, never reaches the engine */
	bool broken;          /* a send failed: fails once read to the end */
};

struct ntx_tcp_ep {
	struct ntx_be_ep head; /* first: what the engine holds */
	struct ntx_be_cb cb;
	int lfd;
	int epfd; /* every socket, readable when anything arrives */
	struct ntx_addr addr; /* the endpoint's whole name, sent in hellos */
	struct ntx_list conns;
	struct ntx_fdwatch watch; /* news of epfd without a syscall */
	bool busy;    /* look at the sockets every poll */
	bool walk;    /* a connection is connecting, has bytes queued or
		       * failed before reaching the engine: walk the list */
	bool accept_off; /* FI_NTX_TCP_UNPROVEN_MAX reached: the listener is
			  * not watched (ntx_tcp_accept, check_peers) */
	uint64_t busy_until_ns; /* traffic keeps busy set until then */
	/* proofs per source address (hashed): tokens, refilled at
	 * FI_NTX_TCP_PROOF_RATE a second up to twice that */
	struct {
		uint64_t at_ns;
		uint32_t tokens;
	} proofs[64];
};

static inline struct ntx_tcp_conn *ntx_tcp_conn_of(struct ntx_be_conn *conn)
{
	return ntx_container_of(conn, struct ntx_tcp_conn, head);
}

static inline struct ntx_tcp_ep *ntx_tcp_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_tcp_ep, head);
}

/* ntx_ntb_tcp_frame.c: a connection's byte streams */
void ntx_tcp_fail(struct ntx_tcp_conn *c, int err);
void ntx_tcp_flush(struct ntx_tcp_conn *c);
int ntx_tcp_send(struct ntx_be_conn *conn, const void *hdr,
		 const struct iovec *iov, size_t iovcnt, size_t len);
int ntx_tcp_ctl(struct ntx_tcp_conn *c, uint16_t type, const void *p,
		uint32_t len);
int ntx_tcp_read(struct ntx_tcp_conn *c);

/* ntx_ntb_tcp_hs.c: the proof of name */
void ntx_tcp_prove_claim(struct ntx_tcp_conn *c, uint64_t now);
void ntx_tcp_on_frame(struct ntx_tcp_conn *c, const struct ntx_tcp_frame *f,
		      const uint8_t *p);

/* ntx_ntb_tcp.c: the endpoint */
int ntx_tcp_dial(struct ntx_tcp_ep *be, const struct ntx_addr *peer,
		 size_t timeout_ms, struct ntx_tcp_conn **out);

#endif /* NTX_NTB_TCP_H */
