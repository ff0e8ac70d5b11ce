/*
 * The peers of a datagram back end (DESIGN §10, "The udp back end"; the ud
 * domain, §10 "The ud back end"): one state per remote address, made on
 * first contact, named by its HELLO (the first message of its session),
 * handed to the engine; the engine's packets go through the reliability
 * module (ntx_rel.h) and its datagrams through the transport's ops.
 * Here: the table of peers, the engine's ops on them and the endpoint's
 * life; their datagrams and rel's callbacks are in ntx_dg_session.c.
 */
#include "config.h"
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ntx/ntx_sha256.h"
#include "ntx_dgram.h"

/* close waits this long for data still in flight (like verbs' linger) */
#define NTX_DG_LINGER_NS (2ull * 1000000000)
/* a peer silent for NTX_DG_PROBE_QUIET ticks of NTX_DG_PROBE_TICK_NS
 * with nothing in flight gets an empty message (a keepalive): one that
 * died while we wait for its answer is then noticed (ICMP, or rel's
 * timeout), as tcp's keepalive does */
#define NTX_DG_PROBE_TICK_NS 1000000000ull
#define NTX_DG_PROBE_QUIET 3
/* a peer an ICMP error named that stays silent this many ticks fails */
#define NTX_DG_SUSPECT_TICKS 3

static inline struct ntx_dg_conn *ntx_dg_conn_of(struct ntx_be_conn *c)
{
	return ntx_container_of(c, struct ntx_dg_conn, base);
}

/* ---- peers: a hash of remote addresses ---------------------------------- */

static size_t ntx_dg_hash(const struct ntx_dg_ep *ep, uint32_t ip4,
			  uint32_t port)
{
	uint64_t k = ((uint64_t)ip4 << 32 | port) * 0x9e3779b97f4a7c15ull;

	return (size_t)(k >> 32) & ep->hmask;
}

struct ntx_dg_conn *ntx_dg_find(const struct ntx_dg_ep *ep, uint32_t ip4,
				uint32_t port)
{
	struct ntx_dg_conn *c = ep->htab[ntx_dg_hash(ep, ip4, port)];

	while (c && (c->ip4 != ip4 || c->port != port))
		c = c->hnext;
	return c;
}

/* Doubles the buckets once there are more peers than buckets. */
static int ntx_dg_grow(struct ntx_dg_ep *ep)
{
	size_t old = ep->hmask + 1;
	struct ntx_dg_conn **o = ep->htab, **n = calloc(old * 2, sizeof(*n));

	if (!n)
		return -FI_ENOMEM;
	ep->htab = n;
	ep->hmask = old * 2 - 1;
	for (size_t i = 0; i < old; i++) {
		while (o[i]) {
			struct ntx_dg_conn *c = o[i];
			size_t h = ntx_dg_hash(ep, c->ip4, c->port);

			o[i] = c->hnext;
			c->hnext = n[h];
			n[h] = c;
		}
	}
	free(o);
	return 0;
}

void ntx_dg_unlist(struct ntx_dg_conn *c)
{
	if (c->on != NTX_DG_ON_NONE)
		ntx_list_remove(&c->link);
	c->on = NTX_DG_ON_NONE;
}

void ntx_dg_list(struct ntx_dg_conn *c, int on)
{
	ntx_dg_unlist(c);
	ntx_list_insert_tail(on == NTX_DG_ON_PEND ? &c->ep->pend
						  : &c->ep->owed, &c->link);
	c->on = (uint8_t)on;
}

struct ntx_dg_conn *ntx_dg_conn_new(struct ntx_dg_ep *ep,
				    uint32_t ip4, uint32_t port)
{
	struct ntx_dg_conn *c;
	size_t h;

	if (ep->nconns > ep->hmask && ntx_dg_grow(ep))
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (ntx_rel_peer_new(&ep->rel, c, &c->rel)) {
		free(c);
		return NULL;
	}
	c->base.ops = ep->base.ops;
	c->ep = ep;
	ntx_list_init(&c->hs_link);
	c->ip4 = ip4;
	c->port = port;
	h = ntx_dg_hash(ep, ip4, port);
	c->hnext = ep->htab[h];
	ep->htab[h] = c;
	c->hashed = true;
	ep->nconns++;
	return c;
}

/* A failed peer whose VC the engine has not reaped yet leaves the hash:
 * its address is free for a new session (a restarted peer, a reconnect)
 * while the old VC still holds it. */
void ntx_dg_unhash(struct ntx_dg_conn *c)
{
	struct ntx_dg_ep *ep = c->ep;
	struct ntx_dg_conn **pp = &ep->htab[ntx_dg_hash(ep, c->ip4, c->port)];

	while (*pp != c)
		pp = &(*pp)->hnext;
	*pp = c->hnext;
	c->hashed = false;
}

/* Never from inside a rel call: rel may still hold the peer. */
void ntx_dg_conn_free(struct ntx_dg_conn *c)
{
	struct ntx_dg_ep *ep = c->ep;

	if (c->hashed)
		ntx_dg_unhash(c);
	ntx_dg_unlist(c);
	ntx_list_remove(&c->hs_link);
	if (c->state == NTX_DG_UNNAMED)
		ep->unnamed--;
	if (c->stranger)
		ep->strangers--;
	ep->nconns--;
	if (ep->xp->conn_fini)
		ep->xp->conn_fini(ep, c);
	ntx_rel_peer_free(&ep->rel, c->rel);
	free(c);
}

/* ---- the ops ---------------------------------------------------------------- */

/* The context of an engine packet the engine waits to hear acknowledged:
 * an eager message with a request id (a request's id is never 0; one
 * the engine waits for nothing of carries 0) not sent delivery-complete
 * (the peer's engine acks that one). */
static void *ntx_dg_ack_ctx(const void *hdr)
{
	const struct ntx_wire_hdr *h = hdr;

	if (h->op != NTX_OP_EAGER || (h->flags & NTX_PF_ACK))
		return NULL;
	return (void *)(uintptr_t)h->sreq;
}

int ntx_dg_send(struct ntx_be_conn *conn, const void *hdr,
		const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_dg_conn *c = ntx_dg_conn_of(conn);
	struct ntx_dg_ep *ep = c->ep;
	struct iovec v[NTX_MAX_IOV + 1];
	size_t n = 1;
	int ret;

	if (c->state == NTX_DG_FAILED)
		return ntx_rel_peer_error(c->rel) ? ntx_rel_peer_error(c->rel)
						  : -FI_ECONNRESET;
	if (len > NTX_DG_MAX_PAYLOAD || iovcnt > NTX_MAX_IOV)
		return -FI_EMSGSIZE;
	v[0] = (struct iovec){ (void *)hdr, NTX_DG_HDR };
	for (size_t i = 0; i < iovcnt && len; i++) {
		size_t m = iov[i].iov_len < len ? iov[i].iov_len : len;

		v[n++] = (struct iovec){ iov[i].iov_base, m };
		len -= m;
	}
	/* one class for every engine packet: the engine needs a VC's
	 * packets in order (DESIGN §10, classes); an eager message's
	 * request id rides as the context rel hands back when it is
	 * acknowledged (ntx_dg_acked) */
	ret = ntx_rel_send(&ep->rel, c->rel, NTX_REL_BULK, v, n,
			   ntx_dg_ack_ctx(hdr));
	if (ret)
		return ret;
	/* it leaves now: a ping-pong does not wait for the next poll */
	ep->tx_due = true;
	ntx_dg_tx(ep, ntx_now_ns());
	ep->busy = true;
	return 0;
}

/* A new peer we start a session with: our HELLO first in its queue,
 * which waits for the handshake. */
static struct ntx_dg_conn *ntx_dg_conn_hello(struct ntx_dg_ep *ep,
					     uint32_t ip4, uint32_t port)
{
	struct iovec hello = { &ep->addr, sizeof(ep->addr) };
	struct ntx_dg_conn *c = ntx_dg_conn_new(ep, ip4, port);

	if (c && ntx_rel_send(&ep->rel, c->rel, NTX_REL_PRIO, &hello, 1,
			      NULL)) {
		ntx_dg_conn_free(c);
		return NULL;
	}
	if (c)
		ntx_dg_hs_start(c, ntx_now_ns());
	return c;
}

/* No round trip: the peer's state now, our HELLO first in its queue. An
 * address we already hold state for is adopted: a sender that contacted
 * us, or a peer whose VC went away (its session goes on). */
int ntx_dg_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
		   void *vc, struct ntx_be_conn **out)
{
	struct ntx_dg_ep *ep = ntx_dg_ep_of(be);
	struct ntx_dg_conn *c;
	uint32_t ip4, port;

	if (ep->xp->peer_key(ep, peer, &ip4, &port))
		return -FI_EADDRNOTAVAIL;
	c = ntx_dg_find(ep, ip4, port);
	if (c && c->state == NTX_DG_FAILED && c->vc) {
		ntx_dg_unhash(c);
		c = NULL;
	}
	if (c && (c->state == NTX_DG_REFUSED || c->state == NTX_DG_FAILED)) {
		ntx_dg_conn_free(c);
		c = NULL;
	}
	/* kept state of another endpoint that had this address (it exited,
	 * and a new process took its port): its session is over, and
	 * adopting it would send the new peer the old session's tags */
	if (c && !c->vc && c->name.magic && !ntx_addr_same_ep(&c->name, peer)) {
		ntx_dg_conn_free(c);
		c = NULL;
	}
	if (c && c->vc) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: a second connection to one "
			 "address is not supported\n", ep->xp->name);
		return -FI_EADDRINUSE;
	}
	if (!c) {
		c = ntx_dg_conn_hello(ep, ip4, port);
		if (!c)
			return -FI_ENOMEM;
		c->name = *peer;
	}
	if (c->state == NTX_DG_UNNAMED)
		ep->unnamed--;
	c->state = NTX_DG_OPEN;
	c->vc = vc;
	ntx_dg_list(c, NTX_DG_ON_OWED);
	ep->tx_due = ep->busy = true;
	*out = &c->base;
	return 0;
}

/* The engine's VC is gone. A failed session is freed; a live one is kept
 * (detached) so that the peer, whose VC may live on, is not confused by a
 * new session from the same address. */
void ntx_dg_disconnect(struct ntx_be_conn *conn)
{
	struct ntx_dg_conn *c = ntx_dg_conn_of(conn);

	c->vc = NULL;
	ntx_rel_peer_forget(c->rel); /* the VC's requests are gone */
	/* a session that never began (no COOKIE yet) is not kept */
	if (c->state == NTX_DG_FAILED || c->hs == NTX_DG_HS_INIT) {
		ntx_dg_conn_free(c);
		return;
	}
	ntx_dg_unlist(c);
	c->state = NTX_DG_DETACHED;
}

/* Once a tick: an empty priority message to each peer with a VC that
 * has been silent NTX_DG_PROBE_QUIET ticks and owes nothing. */
static void ntx_dg_probe(struct ntx_dg_ep *ep, uint64_t now)
{
	bool sent = false;

	if (now < ep->probe_ns)
		return;
	ep->probe_ns = now + NTX_DG_PROBE_TICK_NS;
	for (size_t i = 0; i <= ep->hmask; i++) {
		for (struct ntx_dg_conn *c = ep->htab[i]; c; c = c->hnext) {
			if (c->state != NTX_DG_OPEN || !c->vc)
				continue;
			if (c->suspect && ++c->suspect > NTX_DG_SUSPECT_TICKS) {
				NTX_INFO(FI_LOG_EP_CTRL, "%s: peer pid %u "
					 "unreachable\n", ep->xp->name,
					 c->name.pid);
				c->state = NTX_DG_FAILED;
				ep->cb.failed(c->vc, -FI_ECONNREFUSED);
				continue;
			}
			if (++c->quiet < NTX_DG_PROBE_QUIET)
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
		ntx_dg_tx(ep, now);
	}
}

/* A peer that never answered our INIT fails as one that never answers
 * data does, after FI_NTX_UDP_TIMEOUT_MS. */
static void ntx_dg_hs_expire(struct ntx_dg_ep *ep, uint64_t now)
{
	uint64_t limit = (uint64_t)ntx_params.udp_timeout_ms * 1000000;
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&ep->hsq, it, tmp) {
		struct ntx_dg_conn *c = ntx_container_of(it, struct ntx_dg_conn,
							 hs_link);

		if (c->hs != NTX_DG_HS_INIT || now - c->hs_start_ns < limit)
			continue;
		NTX_INFO(FI_LOG_EP_CTRL, "%s: no answer to our INIT\n",
			 ep->xp->name);
		ntx_list_remove(&c->hs_link);
		c->state = NTX_DG_FAILED;
		if (c->vc)
			ep->cb.failed(c->vc, -FI_ETIMEDOUT);
		else
			ntx_dg_conn_free(c);
	}
}

/* Frees peers that failed without a VC, never named themselves or were
 * refused, once their time is up. */
void ntx_dg_check_peers(struct ntx_be_ep *be)
{
	struct ntx_dg_ep *ep = ntx_dg_ep_of(be);
	struct ntx_list *it, *tmp;
	uint64_t now = ntx_now_ns();

	ntx_dg_probe(ep, now);
	ntx_dg_hs_expire(ep, now);
	ntx_list_foreach_safe(&ep->pend, it, tmp) {
		struct ntx_dg_conn *c = ntx_container_of(it, struct ntx_dg_conn,
							 link);

		if (c->state == NTX_DG_FAILED || now > c->deadline_ns) {
			if (c->state == NTX_DG_UNNAMED)
				NTX_INFO(FI_LOG_EP_CTRL, "%s: a sender that "
					 "never named itself forgotten\n",
					 ep->xp->name);
			ntx_dg_conn_free(c);
		}
	}
}

void ntx_dg_setname(struct ntx_be_ep *be, const struct ntx_addr *addr)
{
	ntx_dg_ep_of(be)->addr = *addr;
}

/* Sleeping: the timerfd goes off at rel's next deadline. */
void ntx_dg_arm(struct ntx_be_ep *be)
{
	struct ntx_dg_ep *ep = ntx_dg_ep_of(be);
	uint64_t d = ntx_dg_next_deadline(ep);
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };

	if (d != UINT64_MAX) {
		d = d ? d : 1; /* absolute 0 would disarm: 1 ns is past */
		its.it_value.tv_sec = (time_t)(d / 1000000000);
		its.it_value.tv_nsec = (long)(d % 1000000000);
	}
	timerfd_settime(ep->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	ep->busy = true; /* the re-check after arming reads the device */
}

void ntx_dg_disarm(struct ntx_be_ep *be)
{
	struct ntx_dg_ep *ep = ntx_dg_ep_of(be);
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	uint64_t expirations;

	timerfd_settime(ep->tfd, 0, &its, NULL);
	/* an expiry not read keeps the epoll set readable */
	if (read(ep->tfd, &expirations, sizeof(expirations)) < 0)
		(void)expirations;
	ep->busy = true;
}

int ntx_dg_wait_fd(struct ntx_be_ep *be)
{
	return ntx_dg_ep_of(be)->epfd;
}

/* ---- the endpoint ----------------------------------------------------------- */

int ntx_dg_watch(struct ntx_dg_ep *ep, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	return epoll_ctl(ep->epfd, EPOLL_CTL_ADD, fd, &ev) ? -FI_ENOMEM : 0;
}

int ntx_dg_ep_init(struct ntx_dg_ep *ep, const struct ntx_be_ops *ops,
		   const struct ntx_dg_xport *xp, const struct ntx_be_cb *cb)
{
	ep->base.ops = ops;
	ep->xp = xp;
	ep->cb = *cb;
	ep->next_ns = UINT64_MAX;
	ntx_list_init(&ep->pend);
	ntx_list_init(&ep->owed);
	ntx_list_init(&ep->hsq);
	ep->hs_next_ns = UINT64_MAX;
	for (size_t i = 0; i < sizeof(ep->secret); i += 8) {
		uint64_t r = ntx_random64();

		memcpy(ep->secret + i, &r, 8);
	}
	ep->reply.base.ops = ops;
	ep->reply.ep = ep;
	ntx_list_init(&ep->reply.hs_link);
	ep->epfd = epoll_create1(EPOLL_CLOEXEC);
	ep->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ep->htab = calloc(64, sizeof(*ep->htab));
	ep->hmask = 63;
	if (ep->epfd < 0 || ep->tfd < 0 || !ep->htab)
		return -FI_ENOMEM;
	return ntx_dg_watch(ep, ep->tfd);
}

/* Data still in flight gets up to NTX_DG_LINGER_NS to be acknowledged
 * (the engine completed those sends when rel took them); nothing is
 * delivered to the engine meanwhile. */
static void ntx_dg_linger(struct ntx_dg_ep *ep)
{
	uint64_t now = ntx_now_ns(), end = now + NTX_DG_LINGER_NS;
	struct epoll_event ev;
	bool drained;

	ep->closing = true;
	ep->tx_due = true;
	ntx_dg_tx(ep, now);
	while (!ntx_list_empty(&ep->rel.active) && now < end) {
		epoll_wait(ep->epfd, &ev, 1, 1);
		now = ntx_now_ns();
		ep->xp->rx(ep, now, &drained);
		ntx_dg_tx(ep, now);
	}
}

/* What the session cost, for FI_LOG_LEVEL=info (tuning, DESIGN §10). */
static void ntx_dg_log_stats(const struct ntx_dg_ep *ep)
{
	const struct ntx_rel_stats *st = &ep->rel.stats;

	NTX_INFO(FI_LOG_EP_DATA, "%s: %" PRIu64 " datagrams of data sent, %"
		 PRIu64 " resent (%" PRIu64 " on timeout, %" PRIu64 " fast), %"
		 PRIu64 " pure ACKs; %" PRIu64 " taken, %" PRIu64
		 " duplicates, %" PRIu64 " out of order, %" PRIu64
		 " from unnamed senders and %" PRIu64 " from unproved "
		 "addresses dropped; handshake: %" PRIu64 " datagrams (%"
		 PRIu64 " bytes) in, %" PRIu64 " (%" PRIu64 " bytes) out, %"
		 PRIu64 " refused\n", ep->xp->name,
		 st->tx_data, st->tx_retrans, st->tx_rto, st->tx_fast,
		 st->tx_ack, st->rx_data, st->rx_dup, st->rx_ooo,
		 ep->unnamed_drops, ep->stray_drops, ep->ctl_in,
		 ep->ctl_in_bytes, ep->ctl_out, ep->ctl_out_bytes,
		 ep->ctl_drops);
}

void ntx_dg_ep_fini(struct ntx_dg_ep *ep)
{
	if (ep->rel_ready) {
		ntx_dg_linger(ep);
		ntx_dg_log_stats(ep);
	}
	for (size_t i = 0; ep->htab && i <= ep->hmask; i++)
		while (ep->htab[i])
			ntx_dg_conn_free(ep->htab[i]);
	if (ep->xp && ep->xp->conn_fini)
		ep->xp->conn_fini(ep, &ep->reply);
	ntx_wipe(ep->secret, sizeof(ep->secret));
	if (ep->rel_ready)
		ntx_rel_fini(&ep->rel);
	ep->rel_ready = false;
	free(ep->htab);
	ep->htab = NULL;
	if (ep->tfd >= 0)
		close(ep->tfd);
	if (ep->epfd >= 0)
		close(ep->epfd);
	ep->tfd = ep->epfd = -1;
}
