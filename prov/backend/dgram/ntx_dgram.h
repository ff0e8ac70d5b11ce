/*
 * What the datagram back ends share (DESIGN §10): peer state keyed by
 * where datagrams come from, first contact and HELLO, the engine's
 * callbacks, keepalive probes, sessions failing and lingering, all on top
 * of the reliability module (ntx_rel.c). A transport (ntx_udp.c: UDP
 * sockets; verbs/ntx_ud.c: one UD QP) only moves datagrams: it fills in a
 * struct ntx_dg_xport and embeds struct ntx_dg_ep first in its endpoint.
 *
 * Not thread safe: the engine calls every op under the endpoint lock.
 */
#ifndef NTX_DGRAM_H
#define NTX_DGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_wire.h"
#include "ntx_rel.h"

#define NTX_DG_HDR sizeof(struct ntx_wire_hdr)
/* an engine packet, header included, is at most 64 KiB: rel cuts it into
 * datagrams of the transport's size */
#define NTX_DG_MAX_PAYLOAD (65536 - 64)

enum ntx_dg_state {
	NTX_DG_NEW,      /* just made: connect opens it, a stranger's first
			  * datagram makes it UNNAMED (ep->unnamed counts
			  * those only) */
	NTX_DG_UNNAMED,  /* first contact: waits for its HELLO */
	NTX_DG_OPEN,     /* named: carries its VC's packets */
	NTX_DG_DETACHED, /* named, its VC gone: the session is kept */
	NTX_DG_REFUSED,  /* its name was not believed: datagrams ignored */
	NTX_DG_FAILED,   /* the session failed (rel's failure) */
};

struct ntx_dg_ep;

/* One peer: a remote address, key (ip4, port). What 'port' holds is the
 * transport's: a UDP port (network order) or a UD QP number. */
struct ntx_dg_conn {
	struct ntx_be_conn base;
	struct ntx_dg_ep *ep;
	struct ntx_dg_conn *hnext; /* hash chain of ep->htab */
	struct ntx_list link;      /* ep->pend or ep->owed */
	struct ntx_rel_peer *rel;
	void *vc;
	void *priv;                /* the transport's (ud: address handle) */
	struct ntx_addr name;      /* the peer's name, once known */
	uint64_t deadline_ns;      /* UNNAMED, REFUSED: freed then */
	uint32_t ip4;              /* the key: where datagrams come from */
	uint32_t port;             /* ... and go */
	uint8_t state, on;
	uint8_t quiet;             /* probe ticks since it last sent */
	uint8_t suspect;           /* an ICMP error named it: 1 + probe ticks
				    * since, 0 when it sent after it */
	bool stranger;             /* made by first contact: counted */
	bool hashed;               /* in ep->htab (a failed one leaves it) */
};

/* What a transport does; every op is called under the endpoint lock. */
struct ntx_dg_xport {
	const char *name; /* in logs: "udp", "ud" */
	/* one datagram to c: hdr, then len bytes of payload; 0, or
	 * -FI_EAGAIN (rel offers it again later) */
	int (*emit)(struct ntx_dg_ep *ep, struct ntx_dg_conn *c,
		    const void *hdr, size_t hdr_len, const void *payload,
		    size_t len);
	/* after rel emitted what was due: send what emit batched */
	void (*flush)(struct ntx_dg_ep *ep, uint64_t now);
	/* the key of the endpoint a name gives; -FI_EADDRNOTAVAIL when it
	 * gives none */
	int (*peer_key)(const struct ntx_dg_ep *ep, const struct ntx_addr *name,
			uint32_t *ip4, uint32_t *port);
	/* reads arrivals into ntx_dg_on_dgram; *drained when none is left */
	int (*rx)(struct ntx_dg_ep *ep, uint64_t now, bool *drained);
	/* a peer is freed: release c->priv (optional) */
	void (*conn_fini)(struct ntx_dg_ep *ep, struct ntx_dg_conn *c);
};

/* which of the endpoint's lists a peer's 'link' is on */
enum { NTX_DG_ON_NONE, NTX_DG_ON_PEND, NTX_DG_ON_OWED };

struct ntx_dg_ep {
	struct ntx_be_ep base;
	const struct ntx_dg_xport *xp;
	struct ntx_be_cb cb;
	/* sleeping: an epoll set of the transport's fds and a timerfd armed
	 * at rel's next deadline (a retransmission or a delayed ACK wakes
	 * the sleeper) */
	int epfd, tfd;
	struct ntx_addr addr; /* the endpoint's whole name, sent in HELLOs */
	struct ntx_rel rel;
	bool rel_ready;
	struct ntx_dg_conn **htab;
	size_t hmask, nconns, unnamed, strangers;
	uint64_t unnamed_drops; /* datagrams of unnamed senders not taken */
	struct ntx_list pend; /* unnamed, refused, failed without a VC */
	struct ntx_list owed; /* connected, the engine not told yet */
	bool busy, closing, tx_due, in_rel;
	uint64_t busy_until_ns, next_ns; /* next_ns: rel's next deadline */
	uint64_t probe_ns; /* the next keepalive tick */
};

static inline struct ntx_dg_ep *ntx_dg_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_dg_ep, base);
}

/* The common part of an endpoint; ntx_dg_ep_fini undoes what there is of
 * it. ops: the transport's ops table (conns get it too). */
int ntx_dg_ep_init(struct ntx_dg_ep *ep, const struct ntx_be_ops *ops,
		   const struct ntx_dg_xport *xp, const struct ntx_be_cb *cb);
/* Adds a transport's fd to the wait set. */
int ntx_dg_watch(struct ntx_dg_ep *ep, int fd);
/* rel with datagrams of 'dgram' bytes (header included), 'window'
 * packets in flight per peer */
int ntx_dg_rel_init(struct ntx_dg_ep *ep, size_t dgram, uint32_t window);
/* Closing: lingers for data in flight, then frees every peer and rel. */
void ntx_dg_ep_fini(struct ntx_dg_ep *ep);

/* A datagram from (ip4, port); makes state for a new sender. */
void ntx_dg_on_dgram(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
		     const uint8_t *buf, size_t len, uint64_t now);
/* The peer at (ip4, port) is gone for good (ICMP said so): its VC fails. */
void ntx_dg_unreachable(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port);
/* Everything rel has due now leaves (not from inside a rel call). */
void ntx_dg_tx(struct ntx_dg_ep *ep, uint64_t now);
/* Connections the engine was not told of yet; how many. */
int ntx_dg_report(struct ntx_dg_ep *ep);
/* After reading arrivals: what the next poll must do. */
void ntx_dg_after_rx(struct ntx_dg_ep *ep, uint64_t now, int cnt,
		     bool drained);

/* ops both transports use as they are */
int ntx_dg_send(struct ntx_be_conn *conn, const void *hdr,
		const struct iovec *iov, size_t iovcnt, size_t len);
int ntx_dg_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
		   void *vc, struct ntx_be_conn **out);
void ntx_dg_disconnect(struct ntx_be_conn *conn);
void ntx_dg_check_peers(struct ntx_be_ep *be);
void ntx_dg_setname(struct ntx_be_ep *be, const struct ntx_addr *addr);
void ntx_dg_arm(struct ntx_be_ep *be);
void ntx_dg_disarm(struct ntx_be_ep *be);
int ntx_dg_wait_fd(struct ntx_be_ep *be);

#endif /* NTX_DGRAM_H */
