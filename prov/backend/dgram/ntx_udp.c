/*
 * The udp back end (DESIGN §10, "The udp back end"): one UDP socket per
 * endpoint, no connection per peer. The reliability module (ntx_rel.c)
 * numbers, acknowledges, retransmits, cuts and reassembles the engine's
 * packets; this file moves its datagrams (recvmmsg/sendmmsg batches) and
 * keeps one peer state per remote address. There is no set-up round trip:
 * connect makes the state and reports connected at once; a datagram from
 * an unknown address makes state on first contact, and the engine hears of
 * the sender only once its HELLO (the first message of its session) names
 * the address the datagram came from.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <linux/errqueue.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx/ntx_wire.h"
#include "ntx_rel.h"


#define NTX_UDP_HDR sizeof(struct ntx_wire_hdr)
/* an engine packet, header included, is at most 64 KiB: rel cuts it into
 * datagrams of FI_NTX_UDP_MTU bytes */
#define NTX_UDP_MAX_PAYLOAD (65536 - 64)
#define NTX_UDP_BATCH 64 /* datagrams per recvmmsg or sendmmsg */
/* a GSO send: at most this many bytes (one IP packet's worth) */
#define NTX_UDP_GSO_MAX 65000
/* after a retransmission, datagrams leave one by one for this long: a
 * run lost whole (a burst) costs many round trips of recovery */
#define NTX_UDP_GSO_BACKOFF_NS 100000000u
#define NTX_UDP_RX_ROUNDS 4 /* batches one poll takes before returning */
/* peers heard from that have not named themselves yet, and how long one
 * may take to do it (its HELLO is retransmitted like any message) */
#define NTX_UDP_UNNAMED_MAX 1024
#define NTX_UDP_HELLO_NS (10ull * 1000000000)
/* close waits this long for data still in flight (like verbs' linger) */
#define NTX_UDP_LINGER_NS (2ull * 1000000000)
/* a peer silent for NTX_UDP_PROBE_QUIET ticks of NTX_UDP_PROBE_TICK_NS
 * with nothing in flight gets an empty message (a keepalive): one that
 * died while we wait for its answer is then noticed (ICMP, or rel's
 * timeout), as tcp's keepalive does */
#define NTX_UDP_PROBE_TICK_NS 1000000000ull
#define NTX_UDP_PROBE_QUIET 3
/* after traffic the socket is read every poll for this long (tcp's rule) */
#define NTX_UDP_BUSY_NS 2000000u
#define NTX_UDP_SOCKBUF (4 << 20)

enum ntx_udp_state {
	NTX_UDP_NEW,      /* just made: connect opens it, a stranger's
			   * first datagram makes it UNNAMED (ep->unnamed
			   * counts those only) */
	NTX_UDP_UNNAMED,  /* first contact: waits for its HELLO */
	NTX_UDP_OPEN,     /* named: carries its VC's packets */
	NTX_UDP_DETACHED, /* named, its VC gone: the session is kept */
	NTX_UDP_REFUSED,  /* its name was not believed: datagrams ignored */
	NTX_UDP_FAILED,   /* the session failed (rel's failure) */
};

/* which of the endpoint's lists a peer's 'link' is on */
enum { NTX_UDP_ON_NONE, NTX_UDP_ON_PEND, NTX_UDP_ON_OWED };

struct ntx_udp_ep;

struct ntx_udp_conn {
	struct ntx_be_conn base;
	struct ntx_udp_ep *ep;
	struct ntx_udp_conn *hnext; /* hash chain of ep->htab */
	struct ntx_list link;       /* ep->pend or ep->owed */
	struct ntx_rel_peer *rel;
	void *vc;
	struct ntx_addr name;       /* the peer's name, once known */
	uint64_t deadline_ns;       /* UNNAMED, REFUSED: freed then */
	uint32_t ip4;               /* the key: where datagrams come from */
	uint16_t port;              /* ... and go, network order */
	uint8_t state, on;
	uint8_t quiet;              /* probe ticks since it last sent */
	bool stranger;              /* made by first contact: counted */
	bool hashed;                /* in ep->htab (a failed one leaves it) */
};

struct ntx_udp_ep {
	struct ntx_be_ep base;
	struct ntx_be_cb cb;
	int fd, epfd, tfd;
	struct ntx_addr addr; /* the endpoint's whole name, sent in HELLOs */
	struct ntx_rel rel;
	struct ntx_udp_conn **htab;
	size_t hmask, nconns, unnamed, strangers;
	struct ntx_list pend; /* unnamed, refused, failed without a VC */
	struct ntx_list owed; /* connected, the engine not told yet */
	struct ntx_fdwatch watch;
	bool busy, closing, tx_due, in_rel;
	uint64_t busy_until_ns, next_ns; /* next_ns: rel's next deadline */
	uint64_t probe_ns; /* the next keepalive tick */
	size_t dgram; /* bytes of a datagram's UDP payload, at most */
	unsigned tx_n;
	uint8_t *tx_buf, *rx_buf;
	struct mmsghdr tx_msg[NTX_UDP_BATCH], rx_msg[NTX_UDP_BATCH];
	struct iovec tx_iov[NTX_UDP_BATCH], rx_iov[NTX_UDP_BATCH];
	struct sockaddr_in tx_sin[NTX_UDP_BATCH], rx_sin[NTX_UDP_BATCH];
	/* the batch as GSO sends: runs of datagrams to one peer */
	bool gso;
	uint64_t gso_off_until_ns, retrans_seen;
	struct mmsghdr gso_msg[NTX_UDP_BATCH];
	struct iovec gso_iov[NTX_UDP_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} gso_cm[NTX_UDP_BATCH];
};

static const struct ntx_be_ops ntx_udp_ops;

static inline struct ntx_udp_ep *ntx_udp_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_udp_ep, base);
}

static inline struct ntx_udp_conn *ntx_udp_conn_of(struct ntx_be_conn *c)
{
	return ntx_container_of(c, struct ntx_udp_conn, base);
}

/* ---- peers: a hash of remote addresses ---------------------------------- */

static size_t ntx_udp_hash(const struct ntx_udp_ep *ep, uint32_t ip4,
			   uint16_t port)
{
	uint64_t k = ((uint64_t)ip4 << 16 | port) * 0x9e3779b97f4a7c15ull;

	return (size_t)(k >> 32) & ep->hmask;
}

static struct ntx_udp_conn *ntx_udp_find(const struct ntx_udp_ep *ep,
					 uint32_t ip4, uint16_t port)
{
	struct ntx_udp_conn *c = ep->htab[ntx_udp_hash(ep, ip4, port)];

	while (c && (c->ip4 != ip4 || c->port != port))
		c = c->hnext;
	return c;
}

/* Doubles the buckets once there are more peers than buckets. */
static int ntx_udp_grow(struct ntx_udp_ep *ep)
{
	size_t old = ep->hmask + 1;
	struct ntx_udp_conn **o = ep->htab, **n = calloc(old * 2, sizeof(*n));

	if (!n)
		return -FI_ENOMEM;
	ep->htab = n;
	ep->hmask = old * 2 - 1;
	for (size_t i = 0; i < old; i++) {
		while (o[i]) {
			struct ntx_udp_conn *c = o[i];
			size_t h = ntx_udp_hash(ep, c->ip4, c->port);

			o[i] = c->hnext;
			c->hnext = n[h];
			n[h] = c;
		}
	}
	free(o);
	return 0;
}

static void ntx_udp_unlist(struct ntx_udp_conn *c)
{
	if (c->on != NTX_UDP_ON_NONE)
		ntx_list_remove(&c->link);
	c->on = NTX_UDP_ON_NONE;
}

static void ntx_udp_list(struct ntx_udp_conn *c, int on)
{
	ntx_udp_unlist(c);
	ntx_list_insert_tail(on == NTX_UDP_ON_PEND ? &c->ep->pend
						   : &c->ep->owed, &c->link);
	c->on = (uint8_t)on;
}

static struct ntx_udp_conn *ntx_udp_conn_new(struct ntx_udp_ep *ep,
					     uint32_t ip4, uint16_t port)
{
	struct ntx_udp_conn *c;
	size_t h;

	if (ep->nconns > ep->hmask && ntx_udp_grow(ep))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (ntx_rel_peer_new(&ep->rel, c, &c->rel)) {
		free(c);
		return NULL;
	}
	c->base.ops = &ntx_udp_ops;
	c->ep = ep;
	c->ip4 = ip4;
	c->port = port;
	h = ntx_udp_hash(ep, ip4, port);
	c->hnext = ep->htab[h];
	ep->htab[h] = c;
	c->hashed = true;
	ep->nconns++;
	return c;
}

/* A failed peer whose VC the engine has not reaped yet leaves the hash:
 * its address is free for a new session (a restarted peer, a reconnect)
 * while the old VC still holds it. */
static void ntx_udp_unhash(struct ntx_udp_conn *c)
{
	struct ntx_udp_ep *ep = c->ep;
	struct ntx_udp_conn **pp = &ep->htab[ntx_udp_hash(ep, c->ip4, c->port)];

	while (*pp != c)
		pp = &(*pp)->hnext;
	*pp = c->hnext;
	c->hashed = false;
}

/* Never from inside a rel call: rel may still hold the peer. */
static void ntx_udp_conn_free(struct ntx_udp_conn *c)
{
	struct ntx_udp_ep *ep = c->ep;

	if (c->hashed)
		ntx_udp_unhash(c);
	ntx_udp_unlist(c);
	if (c->state == NTX_UDP_UNNAMED)
		ep->unnamed--;
	if (c->stranger)
		ep->strangers--;
	ep->nconns--;
	ntx_rel_peer_free(&ep->rel, c->rel);
	free(c);
}

/* A peer whose name is not believed: its datagrams are ignored until
 * NTX_UDP_HELLO_NS passed (the sender's data then times out there). */
static void ntx_udp_refuse(struct ntx_udp_conn *c, const char *why)
{
	struct in_addr in = { .s_addr = c->ip4 };

	NTX_WARN(FI_LOG_EP_CTRL, "udp: ignoring %s:%u: %s\n", inet_ntoa(in),
		 ntohs(c->port), why);
	if (c->state == NTX_UDP_UNNAMED)
		c->ep->unnamed--;
	c->state = NTX_UDP_REFUSED;
	c->deadline_ns = ntx_now_ns() + NTX_UDP_HELLO_NS;
	ntx_udp_list(c, NTX_UDP_ON_PEND);
}

/* ---- datagrams out --------------------------------------------------------- */

/* ICMP port unreachable for a peer's address: its socket is gone (the
 * process died or closed the endpoint). The session fails at once, as a
 * tcp connection does on a reset, rather than after
 * FI_NTX_UDP_TIMEOUT_MS of silence. rel is not told: the engine reaps the
 * VC and disconnect frees the peer. */
static void ntx_udp_unreachable(struct ntx_udp_ep *ep,
				const struct sockaddr_in *to)
{
	struct ntx_udp_conn *c = ntx_udp_find(ep, to->sin_addr.s_addr,
					      to->sin_port);

	if (!c || c->state != NTX_UDP_OPEN || !c->vc || ep->closing)
		return;
	NTX_INFO(FI_LOG_EP_CTRL, "udp: peer pid %u unreachable\n",
		 c->name.pid);
	c->state = NTX_UDP_FAILED;
	ep->cb.failed(c->vc, -FI_ECONNREFUSED);
}

/* The socket's error queue (IP_RECVERR): what ICMP said of our sends. */
static void ntx_udp_errqueue(struct ntx_udp_ep *ep)
{
	union {
		char buf[256];
		struct cmsghdr align;
	} cb;
	struct sockaddr_in to;
	uint8_t b[64];
	struct iovec iov = { b, sizeof(b) };

	for (;;) { /* until empty: EPOLLERR stays up while it is not */
		struct msghdr mh = { .msg_name = &to, .msg_namelen = sizeof(to),
				     .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = cb.buf,
				     .msg_controllen = sizeof(cb.buf) };
		struct cmsghdr *cm;

		if (recvmsg(ep->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			struct sock_extended_err e;

			if (cm->cmsg_level != IPPROTO_IP ||
			    cm->cmsg_type != IP_RECVERR)
				continue;
			memcpy(&e, CMSG_DATA(cm), sizeof(e));
			if (e.ee_origin == SO_EE_ORIGIN_ICMP &&
			    e.ee_type == 3 && e.ee_code == 3) /* port */
				ntx_udp_unreachable(ep, &to);
		}
	}
}

/* Datagram j continues the GSO run that starts at i: same peer, the
 * ones before it full size (the kernel cuts at every gso_size bytes;
 * slots are ep->dgram apart, so full datagrams are contiguous). */
static bool ntx_udp_gso_continues(const struct ntx_udp_ep *ep, unsigned i,
				  unsigned j, size_t total)
{
	return ep->tx_iov[j - 1].iov_len == ep->dgram &&
	       ep->tx_sin[j].sin_addr.s_addr == ep->tx_sin[i].sin_addr.s_addr &&
	       ep->tx_sin[j].sin_port == ep->tx_sin[i].sin_port &&
	       total + ep->tx_iov[j].iov_len <= NTX_UDP_GSO_MAX;
}

/* The batch as sends of runs (UDP_SEGMENT: one system call and one trip
 * down the stack per run, DESIGN §10 Poll); how many sends. */
static unsigned ntx_udp_gso_runs(struct ntx_udp_ep *ep)
{
	unsigned n = 0, i = 0, j;

	while (i < ep->tx_n) {
		struct msghdr *mh = &ep->gso_msg[n].msg_hdr;
		size_t total = ep->tx_iov[i].iov_len;

		for (j = i + 1; j < ep->tx_n &&
		     ntx_udp_gso_continues(ep, i, j, total); j++)
			total += ep->tx_iov[j].iov_len;
		ep->gso_iov[n] = (struct iovec){ ep->tx_iov[i].iov_base, total };
		*mh = (struct msghdr){ .msg_name = &ep->tx_sin[i],
				       .msg_namelen = sizeof(ep->tx_sin[i]),
				       .msg_iov = &ep->gso_iov[n],
				       .msg_iovlen = 1 };
		if (j - i > 1) {
			struct cmsghdr *cm = (struct cmsghdr *)ep->gso_cm[n].buf;
			uint16_t seg = (uint16_t)ep->dgram;

			mh->msg_control = cm;
			mh->msg_controllen = CMSG_SPACE(sizeof(seg));
			cm->cmsg_level = SOL_UDP;
			cm->cmsg_type = UDP_SEGMENT;
			cm->cmsg_len = CMSG_LEN(sizeof(seg));
			memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
		}
		n++;
		i = j;
	}
	return n;
}

/* Sends the batch. What the socket does not take is lost as on the wire
 * (rel resends it); -FI_EAGAIN then, so that rel stops for this poll. A
 * datagram the kernel refuses (a firewall's EPERM) is a loss too. */
static bool ntx_udp_icmp_errno(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH ||
	       err == ENETUNREACH || err == EHOSTDOWN;
}

static int ntx_udp_flush(struct ntx_udp_ep *ep)
{
	bool gso = ep->gso && ep->tx_n > 1 &&
		   (!ep->gso_off_until_ns || ntx_now_ns() >= ep->gso_off_until_ns);
	struct mmsghdr *msg = gso ? ep->gso_msg : ep->tx_msg;
	unsigned off = 0, cnt = gso ? ntx_udp_gso_runs(ep) : ep->tx_n;
	int n, icmp = 0;

	while (off < cnt) {
		n = sendmmsg(ep->fd, msg + off, cnt - off, MSG_DONTWAIT);
		if (n > 0) {
			off += (unsigned)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
			ep->tx_n = 0;
			return -FI_EAGAIN;
		}
		/* an ICMP error of an earlier send, reported on this one:
		 * read it (it says whom), then send this one again */
		if (n < 0 && ntx_udp_icmp_errno(errno) && icmp++ < 8) {
			ntx_udp_errqueue(ep);
			continue;
		}
		if (n < 0 && gso && (errno == EIO || errno == EINVAL)) {
			/* a device without UDP segmentation: one by one */
			NTX_INFO(FI_LOG_EP_DATA, "udp: no GSO (%s)\n",
				 strerror(errno));
			ep->gso = false;
			return ntx_udp_flush(ep);
		}
		off++;
	}
	ep->tx_n = 0;
	return 0;
}

/* rel's emit: the datagram is copied into the batch, which leaves when
 * full and at the end of the rel call (ntx_udp_tx). */
static int ntx_udp_emit(void *arg, struct ntx_rel_peer *peer, const void *hdr,
			size_t hdr_len, const void *payload, size_t len)
{
	struct ntx_udp_ep *ep = arg;
	struct ntx_udp_conn *c = ntx_rel_peer_ctx(peer);
	uint8_t *buf;
	unsigned i;

	if (c->state == NTX_UDP_FAILED)
		return 0; /* unreachable: rel does not know, nothing leaves */
	if (ep->tx_n == NTX_UDP_BATCH && ntx_udp_flush(ep))
		return -FI_EAGAIN;
	i = ep->tx_n++;
	buf = ep->tx_buf + (size_t)i * ep->dgram;
	memcpy(buf, hdr, hdr_len);
	if (len)
		memcpy(buf + hdr_len, payload, len);
	ep->tx_iov[i].iov_len = hdr_len + len;
	ep->tx_sin[i].sin_addr.s_addr = c->ip4;
	ep->tx_sin[i].sin_port = c->port;
	return 0;
}

/* Everything rel has due now leaves, in batches. Not from inside a rel
 * call (rel is not reentrant): a send there only marks the work due. */
static void ntx_udp_tx(struct ntx_udp_ep *ep, uint64_t now)
{
	if (ep->in_rel)
		return;
	if (!ep->tx_due && now < ep->next_ns)
		return;
	ep->in_rel = true;
	ntx_rel_poll_tx(&ep->rel, now);
	ep->in_rel = false;
	if (ep->rel.stats.tx_retrans != ep->retrans_seen) {
		ep->retrans_seen = ep->rel.stats.tx_retrans;
		ep->gso_off_until_ns = now + NTX_UDP_GSO_BACKOFF_NS;
	}
	ntx_udp_flush(ep);
	ep->tx_due = false;
	ep->next_ns = ntx_rel_next_deadline(&ep->rel);
	if (!ep->next_ns)
		ep->busy = true; /* the socket was full: try again next poll */
}

/* ---- rel's callbacks ------------------------------------------------------ */

/* A name is believed only for the address its datagram came from; a
 * same-host sender reaching us over loopback shows 127.x, so there the
 * host part of the name must be ours instead (DESIGN §10, first contact). */
static bool ntx_udp_name_matches(const struct ntx_udp_conn *c,
				 const struct ntx_addr *name)
{
	if (name->port != c->port)
		return false;
	if (name->ip4 == c->ip4)
		return true;
	return ntohl(c->ip4) >> 24 == 127 && name->host == ntx_host_id();
}

/* The first message of a peer's session: its name. A peer we connected
 * to ourselves (or that connected to us at the same time) is named
 * already, and its HELLO says nothing new. */
static void ntx_udp_on_hello(struct ntx_udp_conn *c, const void *msg,
			     size_t len)
{
	struct ntx_udp_ep *ep = c->ep;
	struct ntx_addr name;

	if (!len || c->state != NTX_UDP_UNNAMED)
		return; /* a keepalive, or a peer named already */
	if (len != sizeof(name))
		return ntx_udp_refuse(c, "malformed hello");
	memcpy(&name, msg, sizeof(name));
	if (!ntx_addr_valid(&name) || !ntx_udp_name_matches(c, &name))
		return ntx_udp_refuse(c, "its name is not its address");
	c->name = name;
	c->state = NTX_UDP_OPEN;
	ep->unnamed--;
	ntx_udp_unlist(c);
	if (ep->closing)
		return (void)(c->state = NTX_UDP_DETACHED);
	c->vc = ep->cb.accept(ep->cb.ctx, &c->base, &name);
	if (!c->vc)
		ntx_udp_refuse(c, "the engine refused it");
}

static void ntx_udp_deliver(void *arg, struct ntx_rel_peer *peer, int prio,
			    const void *msg, size_t len)
{
	struct ntx_udp_ep *ep = arg;
	struct ntx_udp_conn *c = ntx_rel_peer_ctx(peer);

	if (prio == NTX_REL_PRIO)
		return ntx_udp_on_hello(c, msg, len);
	if (c->state == NTX_UDP_UNNAMED)
		return ntx_udp_refuse(c, "data before its name");
	/* a detached peer's packets have no VC to go to */
	if (c->state != NTX_UDP_OPEN || !c->vc || ep->closing)
		return;
	if (len < NTX_UDP_HDR) {
		NTX_WARN(FI_LOG_EP_DATA, "udp: a packet shorter than its "
			 "header from pid %u\n", c->name.pid);
		return;
	}
	ep->cb.recv(c->vc, msg, (const uint8_t *)msg + NTX_UDP_HDR,
		    len - NTX_UDP_HDR);
}

/* The engine completes what the VC owes with errors; a peer without a VC
 * is freed by check_peers (never from inside rel). */
static void ntx_udp_failed(void *arg, struct ntx_rel_peer *peer, int err)
{
	struct ntx_udp_ep *ep = arg;
	struct ntx_udp_conn *c = ntx_rel_peer_ctx(peer);
	bool told = c->state == NTX_UDP_OPEN && c->vc && !ep->closing;

	NTX_INFO(FI_LOG_EP_CTRL, "udp: peer pid %u failed: %s\n", c->name.pid,
		 fi_strerror(-err));
	if (c->state == NTX_UDP_UNNAMED)
		ep->unnamed--;
	c->state = NTX_UDP_FAILED;
	if (told)
		ep->cb.failed(c->vc, err);
	else
		ntx_udp_list(c, NTX_UDP_ON_PEND);
}

/* Messages the engine handed us carry no context: a failed VC completes
 * its requests itself. */
static void ntx_udp_dropped(void *arg, struct ntx_rel_peer *peer, void *ctx)
{
	(void)arg;
	(void)peer;
	(void)ctx;
}

/* ---- datagrams in --------------------------------------------------------- */

/* State for a sender we do not know, within the bounds: at most
 * NTX_UDP_UNNAMED_MAX unnamed at a time, FI_NTX_UDP_MAX_PEERS in all
 * (DESIGN §10, bounds). Only a data datagram makes one: an ACK from an
 * unknown address is noise. */
static struct ntx_udp_conn *ntx_udp_stranger(struct ntx_udp_ep *ep,
					     const struct sockaddr_in *sin,
					     const uint8_t *buf, size_t len)
{
	struct ntx_udp_conn *c;

	if (ep->closing || len < NTX_REL_HDR_LEN || !(buf[1] & NTX_REL_F_DATA))
		return NULL;
	if (ep->unnamed >= NTX_UDP_UNNAMED_MAX ||
	    ep->strangers >= ntx_params.udp_max_peers) {
		NTX_DBG(FI_LOG_EP_DATA, "udp: new sender dropped (bounds)\n");
		return NULL;
	}
	c = ntx_udp_conn_new(ep, sin->sin_addr.s_addr, sin->sin_port);
	if (!c)
		return NULL;
	c->state = NTX_UDP_UNNAMED;
	c->stranger = true;
	c->deadline_ns = ntx_now_ns() + NTX_UDP_HELLO_NS;
	ep->unnamed++;
	ep->strangers++;
	ntx_udp_list(c, NTX_UDP_ON_PEND);
	return c;
}

static void ntx_udp_on_dgram(struct ntx_udp_ep *ep,
			     const struct sockaddr_in *sin, const uint8_t *buf,
			     size_t len, uint64_t now)
{
	struct ntx_udp_conn *c = ntx_udp_find(ep, sin->sin_addr.s_addr,
					      sin->sin_port);

	/* a failed session takes nothing more: whoever sends from its
	 * address now starts a new one (a restarted peer) */
	if (c && c->state == NTX_UDP_FAILED) {
		if (c->vc)
			ntx_udp_unhash(c);
		else
			ntx_udp_conn_free(c);
		c = NULL;
	}
	if (!c)
		c = ntx_udp_stranger(ep, sin, buf, len);
	if (!c || c->state == NTX_UDP_REFUSED)
		return;
	c->quiet = 0;
	ep->in_rel = true;
	ntx_rel_on_datagram(&ep->rel, c->rel, buf, len, now);
	ep->in_rel = false;
}

/* Up to NTX_UDP_RX_ROUNDS batches; *drained when the socket is empty. */
static int ntx_udp_rx(struct ntx_udp_ep *ep, uint64_t now, bool *drained)
{
	int n, cnt = 0;

	*drained = false;
	for (int r = 0; r < NTX_UDP_RX_ROUNDS; r++) {
		for (int i = 0; i < NTX_UDP_BATCH; i++)
			ep->rx_msg[i].msg_hdr.msg_namelen = sizeof(ep->rx_sin[i]);
		n = recvmmsg(ep->fd, ep->rx_msg, NTX_UDP_BATCH, MSG_DONTWAIT,
			     NULL);
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			ntx_udp_errqueue(ep); /* the error was ICMP's */
			continue;
		}
		if (n <= 0) {
			*drained = n == 0 || errno == EAGAIN;
			break;
		}
		for (int i = 0; i < n; i++)
			ntx_udp_on_dgram(ep, &ep->rx_sin[i], ep->rx_buf +
					 (size_t)i * ep->dgram,
					 ep->rx_msg[i].msg_len, now);
		cnt += n;
		ep->tx_due = true; /* ACKs may be owed */
		if (n < NTX_UDP_BATCH) {
			*drained = true;
			break;
		}
	}
	return cnt;
}

/* connect reports connected from the next poll: the engine stores the
 * connection only when connect returns. */
static int ntx_udp_report(struct ntx_udp_ep *ep)
{
	int cnt = 0;

	while (!ntx_list_empty(&ep->owed)) {
		struct ntx_udp_conn *c = ntx_container_of(
			ntx_list_first(&ep->owed), struct ntx_udp_conn, link);

		ntx_udp_unlist(c);
		cnt++;
		if (c->state == NTX_UDP_OPEN && c->vc)
			ep->cb.connected(c->vc);
	}
	return cnt;
}

/* An idle poll makes no system call: the socket is read when the
 * io_uring watch says it may be readable (or every poll for a while after
 * traffic), and rel's timers cost a clock read only while a peer has work
 * (DESIGN §3, "No system call on the poll path"). */
static int ntx_udp_poll(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);
	int cnt = ntx_list_empty(&ep->owed) ? 0 : ntx_udp_report(ep);
	bool drained;
	uint64_t now;

	if (!ep->busy && !(ntx_fdwatch_pending(&ep->watch) &&
			   ntx_fdwatch_news(&ep->watch))) {
		if (ep->next_ns != UINT64_MAX &&
		    (now = ntx_now_ns()) >= ep->next_ns)
			ntx_udp_tx(ep, now);
		return cnt;
	}
	now = ntx_now_ns();
	cnt += ntx_udp_rx(ep, now, &drained);
	ntx_udp_tx(ep, now);
	if (cnt)
		ep->busy_until_ns = now + NTX_UDP_BUSY_NS;
	ep->busy = !drained || now < ep->busy_until_ns || !ep->next_ns;
	if (!ep->busy)
		ntx_fdwatch_rearm(&ep->watch); /* the socket was drained */
	return cnt;
}

/* ---- the ops ---------------------------------------------------------------- */

static int ntx_udp_send(struct ntx_be_conn *conn, const void *hdr,
			const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_udp_conn *c = ntx_udp_conn_of(conn);
	struct ntx_udp_ep *ep = c->ep;
	struct iovec v[NTX_MAX_IOV + 1];
	size_t n = 1;
	int ret;

	if (c->state == NTX_UDP_FAILED)
		return ntx_rel_peer_error(c->rel) ? ntx_rel_peer_error(c->rel)
						  : -FI_ECONNRESET;
	if (len > NTX_UDP_MAX_PAYLOAD || iovcnt > NTX_MAX_IOV)
		return -FI_EMSGSIZE;
	v[0] = (struct iovec){ (void *)hdr, NTX_UDP_HDR };
	for (size_t i = 0; i < iovcnt && len; i++) {
		size_t m = iov[i].iov_len < len ? iov[i].iov_len : len;

		v[n++] = (struct iovec){ iov[i].iov_base, m };
		len -= m;
	}
	/* one class for every engine packet: the engine needs a VC's
	 * packets in order (DESIGN §10, classes) */
	ret = ntx_rel_send(&ep->rel, c->rel, NTX_REL_BULK, v, n, NULL);
	if (ret)
		return ret;
	/* it leaves now: a ping-pong does not wait for the next poll */
	ep->tx_due = true;
	ntx_udp_tx(ep, ntx_now_ns());
	ep->busy = true;
	return 0;
}

/* No round trip: the peer's state now, our HELLO first in its queue. An
 * address we already hold state for is adopted: a sender that contacted
 * us, or a peer whose VC went away (its session goes on). */
static int ntx_udp_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
			   void *vc, struct ntx_be_conn **out)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);
	uint32_t ip4 = peer->ip4 ? peer->ip4 : htonl(INADDR_LOOPBACK);
	struct ntx_udp_conn *c = ntx_udp_find(ep, ip4, peer->port);
	struct iovec hello = { &ep->addr, sizeof(ep->addr) };

	if (c && c->state == NTX_UDP_FAILED && c->vc) {
		ntx_udp_unhash(c);
		c = NULL;
	}
	if (c && (c->state == NTX_UDP_REFUSED || c->state == NTX_UDP_FAILED)) {
		ntx_udp_conn_free(c);
		c = NULL;
	}
	if (c && c->vc) {
		NTX_WARN(FI_LOG_EP_CTRL, "udp: a second connection to port %u "
			 "of one address is not supported\n", ntohs(peer->port));
		return -FI_EADDRINUSE;
	}
	if (!c) {
		c = ntx_udp_conn_new(ep, ip4, peer->port);
		if (!c)
			return -FI_ENOMEM;
		if (ntx_rel_send(&ep->rel, c->rel, NTX_REL_PRIO, &hello, 1,
				 NULL)) {
			ntx_udp_conn_free(c);
			return -FI_ENOMEM;
		}
		c->name = *peer;
	}
	if (c->state == NTX_UDP_UNNAMED)
		ep->unnamed--;
	c->state = NTX_UDP_OPEN;
	c->vc = vc;
	ntx_udp_list(c, NTX_UDP_ON_OWED);
	ep->tx_due = ep->busy = true;
	*out = &c->base;
	return 0;
}

/* The engine's VC is gone. A failed session is freed; a live one is kept
 * (detached) so that the peer, whose VC may live on, is not confused by a
 * new session from the same address. */
static void ntx_udp_disconnect(struct ntx_be_conn *conn)
{
	struct ntx_udp_conn *c = ntx_udp_conn_of(conn);

	c->vc = NULL;
	if (c->state == NTX_UDP_FAILED) {
		ntx_udp_conn_free(c);
		return;
	}
	ntx_udp_unlist(c);
	c->state = NTX_UDP_DETACHED;
}

/* Once a tick: an empty priority message to each peer with a VC that
 * has been silent NTX_UDP_PROBE_QUIET ticks and owes nothing. */
static void ntx_udp_probe(struct ntx_udp_ep *ep, uint64_t now)
{
	bool sent = false;

	if (now < ep->probe_ns)
		return;
	ep->probe_ns = now + NTX_UDP_PROBE_TICK_NS;
	for (size_t i = 0; i <= ep->hmask; i++) {
		for (struct ntx_udp_conn *c = ep->htab[i]; c; c = c->hnext) {
			if (c->state != NTX_UDP_OPEN || !c->vc ||
			    ++c->quiet < NTX_UDP_PROBE_QUIET)
				continue;
			c->quiet = 0;
			if (ntx_rel_peer_idle(c->rel) &&
			    !ntx_rel_send(&ep->rel, c->rel, NTX_REL_PRIO, NULL, 0,
					  NULL))
				sent = true;
		}
	}
	if (sent) {
		ep->tx_due = true;
		ntx_udp_tx(ep, now);
	}
}

/* Frees peers that failed without a VC, never named themselves or were
 * refused, once their time is up. */
static void ntx_udp_check_peers(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);
	struct ntx_list *it, *tmp;
	uint64_t now = ntx_now_ns();

	ntx_udp_probe(ep, now);
	ntx_list_foreach_safe(&ep->pend, it, tmp) {
		struct ntx_udp_conn *c = ntx_container_of(it, struct ntx_udp_conn,
							  link);

		if (c->state == NTX_UDP_FAILED || now > c->deadline_ns) {
			if (c->state == NTX_UDP_UNNAMED)
				NTX_INFO(FI_LOG_EP_CTRL, "udp: a sender that "
					 "never named itself forgotten\n");
			ntx_udp_conn_free(c);
		}
	}
}

/* Sleeping: the epoll set holds the socket and a timerfd, armed at rel's
 * next deadline (a retransmission or a delayed ACK wakes the sleeper). */
static void ntx_udp_arm(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);
	uint64_t d = ntx_rel_next_deadline(&ep->rel);
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };

	if (d != UINT64_MAX) {
		d = d ? d : 1; /* absolute 0 would disarm: 1 ns is past */
		its.it_value.tv_sec = (time_t)(d / 1000000000);
		its.it_value.tv_nsec = (long)(d % 1000000000);
	}
	timerfd_settime(ep->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	ep->busy = true; /* the re-check after arming reads the socket */
}

static void ntx_udp_disarm(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	uint64_t expirations;

	timerfd_settime(ep->tfd, 0, &its, NULL);
	/* an expiry not read keeps the epoll set readable */
	if (read(ep->tfd, &expirations, sizeof(expirations)) < 0)
		(void)expirations;
	ep->busy = true;
}

static int ntx_udp_wait_fd(struct ntx_be_ep *be)
{
	return ntx_udp_ep_of(be)->epfd;
}

/* Our IPv4 address for the name: the first that is not loopback. */
static uint32_t ntx_udp_local_ip(void)
{
	struct ifaddrs *ifa, *it;
	uint32_t ip = htonl(INADDR_LOOPBACK);

	if (getifaddrs(&ifa))
		return ip;
	for (it = ifa; it; it = it->ifa_next) {
		struct sockaddr_in *sin = (void *)it->ifa_addr;

		if (sin && sin->sin_family == AF_INET &&
		    ntohl(sin->sin_addr.s_addr) >> 24 != 127) {
			ip = sin->sin_addr.s_addr;
			break;
		}
	}
	freeifaddrs(ifa);
	return ip;
}

/* Bursts of fragments need room: larger buffers than the default, as
 * far as the system lets (FORCE works for root only). Oversized datagrams
 * (FI_NTX_UDP_MTU above the path's) are fragmented by IP, not refused.
 * A dead peer's port unreachable is seen (ntx_udp_errqueue). */
static void ntx_udp_sockopts(int fd)
{
	int sz = NTX_UDP_SOCKBUF, pmtu = IP_PMTUDISC_DONT, one = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	/* ICMP errors of unconnected sends are reported only with it */
	setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
}

/* The socket, bound to the name's address when one was asked for (else
 * every address) and to its service number as port (else any). */
static int ntx_udp_socket(struct ntx_udp_ep *ep, const struct ntx_addr *want)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);

	ep->addr.ip4 = want && want->ip4 ? want->ip4 : ntx_udp_local_ip();
	sin.sin_addr.s_addr = want && want->ip4 ? want->ip4
						: htonl(INADDR_ANY);
	sin.sin_port = want && want->service <= 65535
			       ? htons((uint16_t)want->service) : 0;
	ep->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ep->fd < 0)
		return -FI_ENOMEM;
	if (bind(ep->fd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    getsockname(ep->fd, (struct sockaddr *)&sin, &sl)) {
		NTX_WARN(FI_LOG_EP_CTRL, "udp bind: %s\n", strerror(errno));
		close(ep->fd);
		ep->fd = -1;
		return -FI_EADDRINUSE;
	}
	ep->addr.port = sin.sin_port;
	ntx_udp_sockopts(ep->fd);
	return 0;
}

/* The batches' headers point at fixed slots once; only lengths and
 * addresses change per datagram. */
static int ntx_udp_batches(struct ntx_udp_ep *ep)
{
	ep->tx_buf = malloc(NTX_UDP_BATCH * ep->dgram);
	ep->rx_buf = malloc(NTX_UDP_BATCH * ep->dgram);
	if (!ep->tx_buf || !ep->rx_buf)
		return -FI_ENOMEM;
	for (int i = 0; i < NTX_UDP_BATCH; i++) {
		ep->tx_iov[i].iov_base = ep->tx_buf + (size_t)i * ep->dgram;
		ep->tx_sin[i].sin_family = AF_INET;
		ep->tx_msg[i].msg_hdr = (struct msghdr){
			.msg_name = &ep->tx_sin[i],
			.msg_namelen = sizeof(ep->tx_sin[i]),
			.msg_iov = &ep->tx_iov[i], .msg_iovlen = 1 };
		ep->rx_iov[i] = (struct iovec){
			ep->rx_buf + (size_t)i * ep->dgram, ep->dgram };
		ep->rx_msg[i].msg_hdr = (struct msghdr){
			.msg_name = &ep->rx_sin[i],
			.msg_namelen = sizeof(ep->rx_sin[i]),
			.msg_iov = &ep->rx_iov[i], .msg_iovlen = 1 };
	}
	return 0;
}

/* rel's configuration from the parameters: datagrams of FI_NTX_UDP_MTU
 * bytes, peers failing after FI_NTX_UDP_TIMEOUT_MS without progress, a
 * random session number (a restarted endpoint is a new session). */
static int ntx_udp_rel_init(struct ntx_udp_ep *ep)
{
	static const struct ntx_rel_ops ops = {
		.emit = ntx_udp_emit,
		.deliver = ntx_udp_deliver,
		.failed = ntx_udp_failed,
		.dropped = ntx_udp_dropped,
	};
	struct ntx_rel_cfg cfg;

	ntx_rel_cfg_default(&cfg);
	cfg.mtu = (uint32_t)(ep->dgram - NTX_REL_HDR_LEN);
	cfg.window = 256;
	cfg.max_msg = 65536;
	cfg.epoch = (uint32_t)ntx_random64() | 1;
	cfg.dead_ns = (uint64_t)ntx_params.udp_timeout_ms * 1000000;
	return ntx_rel_init(&ep->rel, &cfg, &ops, ep);
}

static void ntx_udp_free(struct ntx_udp_ep *ep)
{
	if (ep->fd >= 0)
		close(ep->fd);
	if (ep->tfd >= 0)
		close(ep->tfd);
	if (ep->epfd >= 0)
		close(ep->epfd);
	free(ep->tx_buf);
	free(ep->rx_buf);
	free(ep->htab);
	free(ep);
}

static int ntx_udp_open(struct ntx_be_ep **out, const struct ntx_addr *want,
			const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_udp_ep *ep = calloc(1, sizeof(*ep));
	struct epoll_event ev = { .events = EPOLLIN };
	int ret = -FI_ENOMEM;

	(void)dev;
	if (!ep)
		return -FI_ENOMEM;
	ep->fd = ep->tfd = -1;
	ep->base.ops = &ntx_udp_ops;
	ep->cb = *cb;
	ep->dgram = ntx_params.udp_mtu;
	ep->gso = ntx_params.udp_gso;
	ep->next_ns = UINT64_MAX;
	ntx_list_init(&ep->pend);
	ntx_list_init(&ep->owed);
	ep->epfd = epoll_create1(EPOLL_CLOEXEC);
	ep->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ep->htab = calloc(64, sizeof(*ep->htab));
	ep->hmask = 63;
	if (ep->epfd < 0 || ep->tfd < 0 || !ep->htab || ntx_udp_batches(ep))
		goto fail;
	ret = ntx_udp_socket(ep, want);
	if (ret)
		goto fail;
	if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->fd, &ev) ||
	    epoll_ctl(ep->epfd, EPOLL_CTL_ADD, ep->tfd, &ev) ||
	    ntx_udp_rel_init(ep)) {
		ret = -FI_ENOMEM;
		goto fail;
	}
	ntx_fdwatch_open(&ep->watch, ep->epfd);
	*out = &ep->base;
	return 0;
fail:
	ntx_udp_free(ep);
	return ret;
}

/* Data still in flight gets up to NTX_UDP_LINGER_NS to be acknowledged
 * (the engine completed those sends when rel took them); nothing is
 * delivered to the engine meanwhile. */
static void ntx_udp_linger(struct ntx_udp_ep *ep)
{
	uint64_t now = ntx_now_ns(), end = now + NTX_UDP_LINGER_NS;
	struct epoll_event ev;
	bool drained;

	ep->closing = true;
	ep->tx_due = true;
	ntx_udp_tx(ep, now);
	while (!ntx_list_empty(&ep->rel.active) && now < end) {
		epoll_wait(ep->epfd, &ev, 1, 1);
		now = ntx_now_ns();
		ntx_udp_rx(ep, now, &drained);
		ntx_udp_tx(ep, now);
	}
}

/* What the session cost, for FI_LOG_LEVEL=info (tuning, DESIGN §10). */
static void ntx_udp_log_stats(const struct ntx_udp_ep *ep)
{
	const struct ntx_rel_stats *st = &ep->rel.stats;

	NTX_INFO(FI_LOG_EP_DATA, "udp: %" PRIu64 " datagrams of data sent, %"
		 PRIu64 " resent (%" PRIu64 " on timeout, %" PRIu64 " fast), %"
		 PRIu64 " pure ACKs; %" PRIu64 " taken, %" PRIu64
		 " duplicates, %" PRIu64 " out of order\n", st->tx_data,
		 st->tx_retrans, st->tx_rto, st->tx_fast, st->tx_ack,
		 st->rx_data, st->rx_dup, st->rx_ooo);
}

static void ntx_udp_close(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);

	ntx_udp_linger(ep);
	ntx_udp_log_stats(ep);
	for (size_t i = 0; i <= ep->hmask; i++)
		while (ep->htab[i])
			ntx_udp_conn_free(ep->htab[i]);
	ntx_rel_fini(&ep->rel);
	ntx_fdwatch_close(&ep->watch);
	ntx_udp_free(ep);
}

/* Adds our network part (address and port) to the endpoint's name. */
static void ntx_udp_getname(struct ntx_be_ep *be, struct ntx_addr *addr)
{
	struct ntx_udp_ep *ep = ntx_udp_ep_of(be);

	addr->ip4 = ep->addr.ip4;
	addr->port = ep->addr.port;
}

static void ntx_udp_setname(struct ntx_be_ep *be, const struct ntx_addr *addr)
{
	ntx_udp_ep_of(be)->addr = *addr;
}

/* A name carrying a service number reached us with its port already
 * (ntx_getinfo.c): nothing to look up. */
static int ntx_udp_resolve(struct ntx_addr *addr)
{
	return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
}

static const struct ntx_be_ops ntx_udp_ops = {
	.name = "udp",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = NTX_UDP_MAX_PAYLOAD,
	.has_bulk = false,
	/* an eager send completes when rel took it: its retransmissions
	 * must go on while the application waits elsewhere */
	.needs_progress = true,
	.open = ntx_udp_open,
	.close = ntx_udp_close,
	.getname = ntx_udp_getname,
	.setname = ntx_udp_setname,
	.connect = ntx_udp_connect,
	.disconnect = ntx_udp_disconnect,
	.send = ntx_udp_send,
	.poll = ntx_udp_poll,
	.check_peers = ntx_udp_check_peers,
	.resolve = ntx_udp_resolve,
	.arm = ntx_udp_arm,
	.disarm = ntx_udp_disarm,
	.wait_fd = ntx_udp_wait_fd,
};

/* One domain: "udp" (NTX_DOMAIN_UDP), listed after tcp, before shm. */
static int ntx_udp_domains(struct ntx_be_domain *out, int max)
{
	if (max < 1)
		return 0;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", NTX_DOMAIN_UDP);
	return 1;
}

static struct ntx_be_desc ntx_udp_desc = {
	.name = "udp",
	.ops = &ntx_udp_ops,
	.order = 30,
	.named_only = true, /* DESIGN §10: fi_getinfo lists it when named */
	.domains = ntx_udp_domains,
};
NTX_BE_REGISTER(ntx_udp_desc)
