/*
 * A back end for engine tests (DESIGN §8): struct ntx_be_ops in memory.
 * A connect queues an accept at the peer; the peer's poll runs the
 * engine's accept callback and queues "connected" back. A send copies
 * the packet into the peer's queue, which the peer's poll hands to the
 * engine's recv callback. No bulk moves: rendezvous streams DATA. Every
 * connection is its own (like tcp): two endpoints that connect to each
 * other at once hold two connections until the engine drops one.
 */
#ifndef NTX_LOOP_BE_H
#define NTX_LOOP_BE_H

#include "ntx/ntx_backend.h"

#define NTX_LOOP_MTU 2048 /* payload bytes per packet */

extern const struct ntx_be_ops ntx_loop_ops;

/* Failure injection of one loop endpoint. */
struct ntx_loop_inject {
	int send_err;        /* every send fails with it (0: none) */
	unsigned send_eagain; /* that many sends return -FI_EAGAIN */
	bool refuse_accept;  /* incoming connections are closed at once */
	bool drop_connected; /* never report our connects as connected */
	bool drop_sends;     /* sends succeed and go nowhere */
};

struct ntx_be_conn;
struct ntx_be_ep;

struct ntx_loop_inject *ntx_loop_inject(struct ntx_be_ep *be);
/* Opens the endpoint under a name given by the test (a restarted peer
 * keeps pid and ep_id, with a new epoch); NULL: the back end picks. */
void ntx_loop_next_name(const struct ntx_addr *name);
/* The connection of 'be' whose engine VC is vc (NULL if none). */
struct ntx_be_conn *ntx_loop_conn_of(struct ntx_be_ep *be, void *vc);
/* Hands the engine a packet as if the peer of conn had sent it: the
 * recv callback runs now, with a private copy of hdr and payload. */
void ntx_loop_deliver(struct ntx_be_conn *conn, const void *hdr,
		      const void *payload, size_t len);
/* The peer of conn dies: conn's VC learns it at the next poll. */
void ntx_loop_kill(struct ntx_be_conn *conn, int err);
/* Connections that still carry packets (neither side closed). */
int ntx_loop_open_conns(struct ntx_be_ep *be);
/* Frees every connection and queued packet (end of a test). */
void ntx_loop_reset(void);

#endif
