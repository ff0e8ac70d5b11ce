/*
 * The back-end interface (DESIGN §2): one ops table per back end. The engine
 * sees connections and packets; a back end knows nothing of tags, AVs or
 * CQs. Capability numbers let the protocols pick thresholds.
 */
#ifndef NTX_BACKEND_H
#define NTX_BACKEND_H

#include <arpa/inet.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "ntx/ntx_base.h"
#include "ntx/ntx_wire.h"

/* ip (IPv4, network order) is a loopback address, 127.0.0.0/8. */
static inline bool ntx_ip4_loopback(uint32_t ip)
{
	return ntohl(ip) >> 24 == 127;
}

struct ntx_be_ops;

/* The common heads of a back end's objects: one instance per endpoint and
 * one connection per VC. Each back end embeds the head as the first
 * member of its own type (struct ntx_shm_ep, struct ntx_tcp_conn, ...)
 * and gets back to that type with ntx_container_of; one name means one
 * layout, whichever back end made the object. The back end sets ops when
 * it creates the object, to its own table; the engine only passes the
 * pointers back to that table's ops, and may check conn->ops == vc->ops. */
/* What a back end's poll would look at, left by its last poll that found
 * nothing, so that the engine can tell a poll that would find nothing
 * without making it (ntx_be_quiet; DESIGN §3, "Progress"): words of the
 * back end's own memory that change when something arrives (word[i]
 * reads busy[i] then), and a doorbell, a counter that moves when
 * something arrives elsewhere (new connections, rings newly flagged in a
 * bitmap of ready rings: bell no longer reads bell_seen). Not on: no
 * watch, poll. The back end turns it off whenever its state changes
 * other than by a poll that found nothing. */
#define NTX_BE_WATCH_MAX 4
struct ntx_be_watch {
	bool on;
	uint32_t n;
	uint32_t busy[NTX_BE_WATCH_MAX];
	const _Atomic uint32_t *word[NTX_BE_WATCH_MAX];
	const _Atomic uint64_t *bell;
	uint64_t bell_seen;
};

struct ntx_be_ep {
	const struct ntx_be_ops *ops;
	struct ntx_be_watch watch; /* zero (no watch) unless it keeps one */
};

/* Nothing arrived that the back end's last poll did not see: a poll now
 * would find nothing. Loads only (relaxed: nothing is read on their
 * word; the poll that follows a change reads with acquire). */
static inline bool ntx_be_quiet(const struct ntx_be_ep *be)
{
	const struct ntx_be_watch *w = &be->watch;

	if (!w->on || atomic_load_explicit(w->bell, memory_order_relaxed) !=
			      w->bell_seen)
		return false;
	for (uint32_t i = 0; i < w->n; i++)
		if (atomic_load_explicit(w->word[i], memory_order_relaxed) ==
		    w->busy[i])
			return false;
	return true;
}

struct ntx_be_conn {
	const struct ntx_be_ops *ops;
};

/* Engine callbacks, run with the endpoint lock held (the engine asserts
 * it): from ops->poll, or from any op the engine calls under that lock. */
struct ntx_be_cb {
	void *ctx;
	/* a peer connected to us; returns the engine's VC (or NULL to
	 * refuse). */
	void *(*accept)(void *ctx, struct ntx_be_conn *conn,
			const struct ntx_addr *peer);
	/* a connection we started is ready to carry packets */
	void (*connected)(void *vc);
	/* one packet: hdr and payload point into a private copy or into
	 * memory only we write; valid until the callback returns */
	void (*recv)(void *vc, const void *hdr, const void *payload,
		     size_t len);
	/* a message of at most 8 bytes that asks for no ack, as a ring's
	 * half entry carries it (pflags: NTX_PF_TAGGED, NTX_PF_DATA; the
	 * bytes in the low len bytes of 'bytes'): the same as recv of the
	 * header ntx_wire_hdr_inline builds, without building it */
	void (*recv_small)(void *vc, uint8_t pflags, uint64_t tag,
			   uint64_t data, uint64_t bytes, size_t len);
	/* the peer died, closed or broke the protocol: fail the VC */
	void (*failed)(void *vc, int err);
};

struct ntx_be_ops {
	const char *name;
	size_t hdr_size;    /* bytes of engine header per packet */
	size_t max_payload; /* payload bytes per packet */
	bool has_bulk;      /* bulk_read works (single copy) */
	/* its peers need our progress while the application is away (the
	 * back end retransmits and acknowledges itself): the domain runs
	 * the progress helper whatever progress the application asked */
	bool needs_progress;
	/* bulk moves need the peer's keys from expose (RDMA); without
	 * them the engine moves the bytes in packets */
	bool bulk_keyed;
	/* its names carry bits of their own in the name's flags (the ud
	 * QP number): no scalable endpoints, whose name lists use them */
	bool names_use_flags;
	/* messages up to FI_NTX_SHM_STREAM_MAX are streamed (NTX_OP_SHEAD
	 * and NTX_OP_SDATA: the receiver copies each packet out while the
	 * sender writes the next) instead of a rendezvous */
	bool streams;
	/* it can say when the peer took an eager message, by handing the
	 * engine an NTX_OP_ACK of the packet's sreq (the datagram back
	 * ends: when rel's acknowledgement covers it); with
	 * FI_NTX_ACKED_SENDS=1 the engine completes such a send only then,
	 * so that a send to a peer that died completes in error */
	bool acks_eager;

	/* 'dev' names the device of a network back end (NULL otherwise) */
	int (*open)(struct ntx_be_ep **be, const struct ntx_addr *want,
		    const struct ntx_be_cb *cb, const char *dev);
	void (*close)(struct ntx_be_ep *be);
	/* fills in this instance's part of the endpoint's name */
	void (*getname)(struct ntx_be_ep *be, struct ntx_addr *addr);
	/* tells the instance the endpoint's whole name (optional) */
	void (*setname)(struct ntx_be_ep *be, const struct ntx_addr *addr);
	/* starts a connection; 'vc' is handed back in callbacks */
	int (*connect)(struct ntx_be_ep *be, const struct ntx_addr *peer,
		       void *vc, struct ntx_be_conn **conn);
	void (*disconnect)(struct ntx_be_conn *conn);
	/* the largest payload this peer accepts in one packet, when peers
	 * may differ (optional: max_payload otherwise) */
	size_t (*conn_mtu)(const struct ntx_be_conn *conn);
	/* the largest segment of a streamed message (NTX_OP_SHEAD,
	 * NTX_OP_SDATA) this peer takes, where it may exceed conn_mtu (the
	 * shm window's bulk areas; optional: the eager size otherwise) */
	size_t (*stream_mtu)(const struct ntx_be_conn *conn);
	/* a connection of an endpoint to itself on which everything sent
	 * has been taken by the receiving side (optional: never) */
	bool (*self_idle)(struct ntx_be_conn *conn);
	/* the peer's eager size (FI_NTX_EAGER_MAX; tcp: its own
	 * FI_NTX_TCP_EAGER_MAX), learnt at connect, where it does not bound
	 * conn_mtu (optional; 0: not known) */
	size_t (*conn_eager)(const struct ntx_be_conn *conn);
	/* the largest message sent eagerly on this connection, where the
	 * back end agrees a size of its own with the peer at connect (tcp:
	 * both sides' FI_NTX_TCP_EAGER_MAX; optional: the engine's
	 * FI_NTX_EAGER_MAX bound otherwise) */
	size_t (*conn_msg_eager)(const struct ntx_be_conn *conn);
	/* one packet; -FI_EAGAIN when the peer's ring is full */
	int (*send)(struct ntx_be_conn *conn, const void *hdr,
		    const struct iovec *iov, size_t iovcnt, size_t len);
	/* an eager message of at most NTX_INLINE_MAX bytes in the header
	 * (ntx_wire_hdr_inline), written where it goes rather than built
	 * and copied (optional: send otherwise); as send */
	int (*send_inline)(struct ntx_be_conn *conn, uint8_t pflags,
			   uint64_t tag, uint64_t data, const void *buf,
			   size_t len);
	/* single-copy pull of a peer's memory into ours; returns bytes
	 * moved, -FI_EOPNOTSUPP when this move cannot be single copy (the
	 * engine then moves the bytes in packets) */
	ssize_t (*bulk_read)(struct ntx_be_conn *conn, const struct iovec *local,
			     size_t nlocal, const struct ntx_wire_iov *remote,
			     size_t nremote);
	/* single-copy push of our memory into a peer's (optional) */
	ssize_t (*bulk_write)(struct ntx_be_conn *conn,
			      const struct iovec *local, size_t nlocal,
			      const struct ntx_wire_iov *remote, size_t nremote);
	/* the key a peer's bulk move of [addr, addr + len) needs, which
	 * lets the peer read it (or write it with 'writable'); optional:
	 * keys are 0 without it. NTX_KEY_NONE when it cannot be given. */
	uint64_t (*expose)(struct ntx_be_conn *conn, void *addr, size_t len,
			   bool writable);
	/* runs callbacks; returns how many events it handled */
	int (*poll)(struct ntx_be_ep *be);
	/* checks peers of busy connections for death; housekeeping */
	void (*check_peers)(struct ntx_be_ep *be);
	/* fills in a name that carries only a service number */
	int (*resolve)(struct ntx_addr *addr);
	/* sleeping: arm makes arrivals wake wait_fd (arm, re-check, then
	 * block); disarm after waking */
	void (*arm)(struct ntx_be_ep *be);
	void (*disarm)(struct ntx_be_ep *be);
	int (*wait_fd)(struct ntx_be_ep *be);
	/* seals one direction of a connection whose medium others can
	 * write (the pci window: every machine attached writes the whole
	 * region), once the job-key exchange proved the peer (ntx_auth.c):
	 * from then on each packet carries a MAC under key, a session key
	 * the exchange derived, and a packet whose MAC fails fails the
	 * connection. rx: the peer's packets after the one just taken (its
	 * proof); else ours after the one just sent (our proof). lower: our
	 * name sorts below the peer's (the side each MAC names). 0, or an
	 * error that fails the VC. Optional: media only the two sides can
	 * write leave it out */
	int (*seal)(struct ntx_be_conn *conn, const uint8_t key[32], bool rx,
		    bool lower);
};

/* Every required op is present. */
static inline bool ntx_be_ops_is_valid(const struct ntx_be_ops *ops)
{
	return ops->open && ops->close && ops->getname && ops->connect &&
	       ops->disconnect && ops->send && ops->poll && ops->check_peers && ops->resolve && ops->arm && ops->disarm &&
	       ops->wait_fd &&
	       ops->hdr_size && ops->max_payload;
}

/* ---- the registry (prov/core/ntx_be_registry.c) ----------------------------
 * Back ends register themselves when the provider loads (NTX_BE_REGISTER);
 * the API finds them here by domain name and never names one. */

/* A domain a network back end serves, with its device's limits (0: ntx's
 * defaults). */
struct ntx_be_domain {
	char name[64];
	bool named_only; /* listed only when the application names it */
	bool datagram;   /* also offers FI_EP_DGRAM endpoints */
	uint32_t ep_cnt, cq_cnt, mr_cnt, tx_size, rx_size;
};

struct ntx_be_desc {
	const char *name;
	const struct ntx_be_ops *ops;
	bool local;  /* the same-host window every domain has (shm) */
	int order;   /* fi_getinfo lists lower orders first */
	/* fi_getinfo lists its domains only when the hints name one: an
	 * application that takes any network domain (Open MPI spreads its
	 * local ranks over every domain of a provider as over NICs) must not
	 * land on one its peers do not use */
	bool named_only;
	/* a datagram back end: fi_getinfo also offers FI_EP_DGRAM on its
	 * domains (DESIGN §10), whether named or not */
	bool datagram;
	/* the domains a network back end serves now; how many it wrote */
	int (*domains)(struct ntx_be_domain *out, int max);
	void (*fini)(void); /* before the provider unloads (optional) */
	struct ntx_be_desc *next; /* the registry's list */
};

void ntx_be_register(struct ntx_be_desc *d);
/* The same-host back end (NULL if none registered). */
const struct ntx_be_desc *ntx_be_local(void);
/* The network back end serving a domain name, or NULL. */
const struct ntx_be_desc *ntx_be_for_domain(const char *name);
/* Every network domain, in registry order; how many it wrote. */
int ntx_be_domains(struct ntx_be_domain *out, int max);
/* Runs every back end's fini. */
void ntx_be_fini_all(void);

#define NTX_BE_REGISTER(desc)                                              \
	__attribute__((constructor)) static void ntx_be_register_##desc(void) \
	{                                                                  \
		ntx_be_register(&desc);                                    \
	}

#endif /* NTX_BACKEND_H */
