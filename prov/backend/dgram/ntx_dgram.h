/*
 * What the datagram back ends share (DESIGN §10): peer state keyed by
 * where datagrams come from, first contact and HELLO, the engine's
 * callbacks, keepalive probes, sessions failing and lingering, all on top
 * of the reliability module (ntx_rel.h). A transport (ntx_udp.c: UDP
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

/* The handshake's control datagrams (ntx_dg_hs.c, DESIGN §10 Handshake):
 * the first byte has the high bit (rel's version is 1). */
enum {
	NTX_DG_CTL_INIT = 0x81,
	NTX_DG_CTL_COOKIE = 0x82,
	NTX_DG_CTL_ECHO = 0x83,
};

/* wire layout, little-endian fields */
#define NTX_DG_CTL_TAG_INIT 4
#define NTX_DG_CTL_TAG_RESP 8
#define NTX_DG_CTL_TS 12
#define NTX_DG_CTL_MAC 16
#define NTX_DG_CTL_NAME 32
#define NTX_DG_CTL_MAC_LEN 16
/* INIT and ECHO carry a name; a COOKIE is half an INIT, so an endpoint
 * never sends an unverified address more than it received from it */
#define NTX_DG_CTL_LONG (NTX_DG_CTL_NAME + (int)sizeof(struct ntx_addr))
#define NTX_DG_CTL_SHORT NTX_DG_CTL_NAME
_Static_assert(NTX_DG_CTL_LONG == 64, "control datagram layout");

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

/* The handshake of a peer we contacted first (ntx_dg_hs.c): INIT sent,
 * then ECHO sent; DONE once the peer's datagrams carry our tags (and
 * always for a peer that echoed our cookie). */
enum ntx_dg_hs { NTX_DG_HS_DONE, NTX_DG_HS_INIT, NTX_DG_HS_ECHO };

/* One peer: a remote address, key (ip4, port). What 'port' holds is the
 * transport's: a UDP port (network order) or a UD QP number. */
struct ntx_dg_conn {
	struct ntx_be_conn base;
	struct ntx_dg_ep *ep;
	struct ntx_dg_conn *hnext; /* hash chain of ep->htab */
	struct ntx_list link;      /* ep->pend or ep->owed */
	struct ntx_list hs_link;   /* ep->hsq while its handshake runs */
	struct ntx_rel_peer *rel;
	void *vc;
	void *priv;                /* the transport's (ud: address handle) */
	struct ntx_addr name;      /* the peer's name, once known */
	uint64_t deadline_ns;      /* UNNAMED, REFUSED: freed then */
	uint64_t hs_start_ns, hs_next_ns; /* the handshake: began, resend */
	uint32_t tag_mine, tag_peer; /* the session's rel epochs, 0: not yet */
	uint32_t ck_ts;            /* the peer's cookie, echoed until DONE */
	uint8_t ck_mac[16];
	uint8_t hs, hs_tries;
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
	uint64_t stray_drops;   /* data from addresses that proved nothing */
	/* the handshake: a secret for cookies and tags, the peers whose
	 * handshake runs and when one is resent next, a peer-less conn for
	 * stateless answers, and what it cost */
	uint8_t secret[32];
	struct ntx_list hsq;
	uint64_t hs_next_ns;
	struct ntx_dg_conn reply;
	uint64_t ctl_in, ctl_in_bytes, ctl_out, ctl_out_bytes, ctl_drops;
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
/* ICMP says the peer at (ip4, port) is unreachable: a hint, so the peer
 * is probed, and its VC fails only if it stays silent. */
void ntx_dg_unreachable(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port);
/* Everything rel has due now leaves (not from inside a rel call). */
void ntx_dg_tx(struct ntx_dg_ep *ep, uint64_t now);
/* Connections the engine was not told of yet; how many. */
int ntx_dg_report(struct ntx_dg_ep *ep);
/* After reading arrivals: what the next poll must do. */
void ntx_dg_after_rx(struct ntx_dg_ep *ep, uint64_t now, int cnt,
		     bool drained);

/* ntx_dg_hs.c: the handshake (DESIGN §10, Handshake) */
uint32_t ntx_dg_tag(const struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port);
/* INIT to a peer we contact first; its rel is held until the COOKIE */
void ntx_dg_hs_start(struct ntx_dg_conn *c, uint64_t now);
/* the peer proved both tags: its handshake ends */
void ntx_dg_hs_done(struct ntx_dg_conn *c);
/* INIT and ECHO resent when due; ep->hs_next_ns is the next time */
void ntx_dg_hs_tick(struct ntx_dg_ep *ep, uint64_t now);
/* true when buf was a control datagram (handled) */
bool ntx_dg_on_ctl(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
		   const uint8_t *buf, size_t len, uint64_t now);

/* ntx_dgram.c: the table of peers, keyed (ip4, port) */
struct ntx_dg_conn *ntx_dg_find(const struct ntx_dg_ep *ep, uint32_t ip4,
				uint32_t port);
struct ntx_dg_conn *ntx_dg_conn_new(struct ntx_dg_ep *ep, uint32_t ip4,
				    uint32_t port);
void ntx_dg_conn_free(struct ntx_dg_conn *c);
void ntx_dg_unhash(struct ntx_dg_conn *c);
/* puts c on ep->pend or ep->owed (NTX_DG_ON_*), or takes it off */
void ntx_dg_list(struct ntx_dg_conn *c, int on);
void ntx_dg_unlist(struct ntx_dg_conn *c);

/* ntx_dg_session.c: when ntx_dg_tx has work next (arm's timer) */
uint64_t ntx_dg_next_deadline(const struct ntx_dg_ep *ep);
/* ntx_dg_session.c, for the handshake */
bool ntx_dg_name_matches(const struct ntx_dg_ep *ep, uint32_t ip4,
			 uint32_t port, const struct ntx_addr *name);
/* (ip4, port) echoed our cookie for the session of tags (mine, peer) */
void ntx_dg_verified(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
		     const struct ntx_addr *name, uint32_t tag_mine,
		     uint32_t tag_peer);

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
