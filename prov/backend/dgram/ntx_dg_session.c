/*
 * A datagram peer's session (DESIGN §10, "The udp back end"): datagrams
 * in and out through rel, the state an ECHO makes and a HELLO names, and
 * rel's callbacks that hand the engine its packets, ACKs and failure.
 */
#include "config.h"
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <string.h>

#include "ntx_dgram.h"

/* peers heard from that have not named themselves yet, and how long one
 * may take to do it (its HELLO is retransmitted like any message) */
#define NTX_DG_UNNAMED_MAX 1024
#define NTX_DG_HELLO_NS (10ull * 1000000000)
/* after traffic the device is read every poll for this long (tcp's rule) */
#define NTX_DG_BUSY_NS 2000000u

/* A peer whose name is not believed: its datagrams are ignored until
 * NTX_DG_HELLO_NS passed (the sender's data then times out there). */
static void ntx_dg_refuse(struct ntx_dg_conn *c, const char *why)
{
	struct in_addr in = { .s_addr = c->ip4 };

	NTX_WARN(FI_LOG_EP_CTRL, "%s: ignoring %s, port/qpn %" PRIu32 ": %s\n",
		 c->ep->xp->name, inet_ntoa(in), c->port, why);
	if (c->state == NTX_DG_UNNAMED)
		c->ep->unnamed--;
	c->state = NTX_DG_REFUSED;
	c->deadline_ns = ntx_now_ns() + NTX_DG_HELLO_NS;
	ntx_dg_list(c, NTX_DG_ON_PEND);
}

/* An ICMP port unreachable quoting a peer's address is a hint, never a
 * failure by itself: anyone can send one, quoting any ports, and the
 * kernel does not check who did. The peer is probed now (an empty
 * priority message when nothing is in flight, which it acknowledges);
 * one that sends nothing for NTX_DG_SUSPECT_TICKS ticks after it fails
 * with -FI_ECONNREFUSED (ntx_dg_probe), one that answers clears it. */
void ntx_dg_unreachable(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port)
{
	struct ntx_dg_conn *c = ntx_dg_find(ep, ip4, port);

	if (!c || c->state != NTX_DG_OPEN || !c->vc || ep->closing ||
	    c->suspect)
		return;
	NTX_INFO(FI_LOG_EP_CTRL, "%s: ICMP says peer pid %u is unreachable: "
		 "probing it\n", ep->xp->name, c->name.pid);
	c->suspect = 1;
	if (ntx_rel_peer_idle(c->rel) && !ep->in_rel &&
	    !ntx_rel_send(&ep->rel, c->rel, NTX_REL_PRIO, NULL, 0, NULL))
		ep->tx_due = true;
}

/* ---- datagrams out --------------------------------------------------------- */

/* rel's emit: a failed (unreachable) peer's datagrams go nowhere. */
static int ntx_dg_emit(void *arg, struct ntx_rel_peer *peer, const void *hdr,
		       size_t hdr_len, const void *payload, size_t len)
{
	struct ntx_dg_ep *ep = arg;
	struct ntx_dg_conn *c = ntx_rel_peer_ctx(peer);

	if (c->state == NTX_DG_FAILED)
		return 0; /* rel does not know, nothing leaves */
	return ep->xp->emit(ep, c, hdr, hdr_len, payload, len);
}

/* rel's next deadline, or a handshake's resend if sooner */
uint64_t ntx_dg_next_deadline(const struct ntx_dg_ep *ep)
{
	uint64_t d = ntx_rel_next_deadline(&ep->rel);

	return ep->hs_next_ns < d ? ep->hs_next_ns : d;
}

void ntx_dg_tx(struct ntx_dg_ep *ep, uint64_t now)
{
	if (ep->in_rel)
		return; /* rel is not reentrant: a send there marks work due */
	if (!ep->tx_due && now < ep->next_ns)
		return;
	ep->in_rel = true;
	ntx_rel_poll_tx(&ep->rel, now);
	ep->in_rel = false;
	if (now >= ep->hs_next_ns)
		ntx_dg_hs_tick(ep, now);
	ep->xp->flush(ep, now);
	ep->tx_due = false;
	ep->next_ns = ntx_dg_next_deadline(ep);
	if (!ep->next_ns)
		ep->busy = true; /* the device was full: try again next poll */
}

/* ---- rel's callbacks ------------------------------------------------------ */

/* A name is believed only for the address its datagram came from; a
 * same-host sender reaching us over loopback shows 127.x, so there the
 * host part of the name must be ours instead (DESIGN §10, first contact). */
bool ntx_dg_name_matches(const struct ntx_dg_ep *ep, uint32_t ip4,
			 uint32_t port, const struct ntx_addr *name)
{
	uint32_t nip4, nport;

	if (ep->xp->peer_key(ep, name, &nip4, &nport) || nport != port)
		return false;
	if (nip4 == ip4)
		return true;
	return ntx_ip4_loopback(ip4) && name->host == ntx_host_id();
}

/* The first message of a peer's session: its name, the one its ECHO
 * proved. A peer we connected to ourselves (or that connected to us at
 * the same time) is named already, and its HELLO says nothing new. */
static void ntx_dg_on_hello(struct ntx_dg_conn *c, const void *msg,
			    size_t len)
{
	struct ntx_dg_ep *ep = c->ep;
	struct ntx_addr name;

	if (!len || c->state != NTX_DG_UNNAMED)
		return; /* a keepalive, or a peer named already */
	if (len != sizeof(name))
		return ntx_dg_refuse(c, "malformed hello");
	memcpy(&name, msg, sizeof(name));
	if (memcmp(&name, &c->name, sizeof(name)))
		return ntx_dg_refuse(c, "its hello is not the name it proved");
	c->name = name;
	c->state = NTX_DG_OPEN;
	ep->unnamed--;
	ntx_dg_unlist(c);
	if (ep->closing)
		return (void)(c->state = NTX_DG_DETACHED);
	c->vc = ep->cb.accept(ep->cb.ctx, &c->base, &name);
	if (!c->vc)
		ntx_dg_refuse(c, "the engine refused it");
}

static void ntx_dg_deliver(void *arg, struct ntx_rel_peer *peer, int prio,
			   const void *msg, size_t len)
{
	struct ntx_dg_ep *ep = arg;
	struct ntx_dg_conn *c = ntx_rel_peer_ctx(peer);

	if (prio == NTX_REL_PRIO)
		return ntx_dg_on_hello(c, msg, len);
	if (c->state == NTX_DG_UNNAMED)
		return ntx_dg_refuse(c, "data before its name");
	/* a detached peer's packets have no VC to go to */
	if (c->state != NTX_DG_OPEN || !c->vc || ep->closing)
		return;
	if (len < NTX_DG_HDR) {
		NTX_WARN(FI_LOG_EP_DATA, "%s: a packet shorter than its "
			 "header from pid %u\n", ep->xp->name, c->name.pid);
		return;
	}
	ep->cb.recv(c->vc, msg, (const uint8_t *)msg + NTX_DG_HDR,
		    len - NTX_DG_HDR);
}

/* The engine completes what the VC owes with errors; a peer without a VC
 * is freed by check_peers (never from inside rel). */
static void ntx_dg_failed(void *arg, struct ntx_rel_peer *peer, int err)
{
	struct ntx_dg_ep *ep = arg;
	struct ntx_dg_conn *c = ntx_rel_peer_ctx(peer);
	bool told = c->state == NTX_DG_OPEN && c->vc && !ep->closing;

	NTX_INFO(FI_LOG_EP_CTRL, "%s: peer pid %u failed: %s\n", ep->xp->name,
		 c->name.pid, fi_strerror(-err));
	if (c->state == NTX_DG_UNNAMED)
		ep->unnamed--;
	c->state = NTX_DG_FAILED;
	ntx_list_remove(&c->hs_link); /* no more ECHOs */
	if (told)
		ep->cb.failed(c->vc, err);
	else
		ntx_dg_list(c, NTX_DG_ON_PEND);
}

/* An eager message the engine waits for (ops->acks_eager) reached the
 * peer: the engine hears it as the peer's NTX_OP_ACK of its request. A
 * peer whose VC failed or went has had its contexts forgotten or fails
 * nothing more (the engine completed those requests itself). */
static void ntx_dg_acked(void *arg, struct ntx_rel_peer *peer, void *ctx)
{
	struct ntx_dg_ep *ep = arg;
	struct ntx_dg_conn *c = ntx_rel_peer_ctx(peer);
	struct ntx_wire_hdr h = { .op = NTX_OP_ACK,
				  .sreq = (uint64_t)(uintptr_t)ctx };

	if (c->state != NTX_DG_OPEN || !c->vc || ep->closing)
		return;
	ep->cb.recv(c->vc, &h, NULL, 0);
}

/* A failed VC completes its requests itself. */
static void ntx_dg_dropped(void *arg, struct ntx_rel_peer *peer, void *ctx)
{
	(void)arg;
	(void)peer;
	(void)ctx;
}

/* ---- datagrams in --------------------------------------------------------- */

/* State for a sender that echoed our cookie, within the bounds: at most
 * NTX_DG_UNNAMED_MAX unnamed at a time, FI_NTX_UDP_MAX_PEERS in all
 * (DESIGN §10, bounds). */
static struct ntx_dg_conn *ntx_dg_stranger(struct ntx_dg_ep *ep, uint32_t ip4,
					   uint32_t port)
{
	struct ntx_dg_conn *c;

	if (ep->unnamed >= NTX_DG_UNNAMED_MAX ||
	    ep->strangers >= ntx_params.udp_max_peers) {
		NTX_DBG(FI_LOG_EP_DATA, "%s: new sender dropped (bounds)\n",
			ep->xp->name);
		return NULL;
	}
	c = ntx_dg_conn_new(ep, ip4, port);
	if (!c)
		return NULL;
	c->state = NTX_DG_UNNAMED;
	c->stranger = true;
	c->deadline_ns = ntx_now_ns() + NTX_DG_HELLO_NS;
	ep->unnamed++;
	ep->strangers++;
	ntx_dg_list(c, NTX_DG_ON_PEND);
	return c;
}

/* A sender that proved its address but has not named itself in rel may
 * make us hold nothing but its HELLO (hostile networks round two, finding 3: 1024
 * such senders made an endpoint hold 407 MB of reorder and reassembly
 * buffers). rel gets from it only a pure ACK or the datagram it takes
 * next in order, whole and of the priority class (a HELLO is one
 * datagram); anything else is dropped before rel buffers it, and a real
 * peer resends it once named. */
static bool ntx_dg_unnamed_may(const struct ntx_dg_conn *c, const uint8_t *buf,
			       size_t len)
{
	struct ntx_rel_hdr h;

	if (len < NTX_REL_HDR_LEN)
		return true; /* rel counts it and drops it */
	ntx_rel_hdr_unpack(buf, &h);
	if (!(h.flags & NTX_REL_F_DATA))
		return true;
	return (h.flags & NTX_REL_F_PRIO) && h.nfrag == 1 && h.frag == 0 &&
	       h.seq == c->rel->rx_next;
}

/* A failed session takes nothing more: whoever proves the address next
 * starts a new one (a restarted peer). */
static struct ntx_dg_conn *ntx_dg_live(struct ntx_dg_ep *ep, uint32_t ip4,
				       uint32_t port)
{
	struct ntx_dg_conn *c = ntx_dg_find(ep, ip4, port);

	if (c && c->state == NTX_DG_FAILED) {
		if (c->vc)
			ntx_dg_unhash(c);
		else
			ntx_dg_conn_free(c);
		c = NULL;
	}
	return c;
}

/* A new session of a peer we have one with: proved by its ECHO, so the
 * old one ended (the peer restarted, or another process has its
 * address). */
static void ntx_dg_restarted(struct ntx_dg_conn *c)
{
	struct ntx_dg_ep *ep = c->ep;

	NTX_INFO(FI_LOG_EP_CTRL, "%s: peer pid %u started a new session\n",
		 ep->xp->name, c->name.pid);
	if (c->state != NTX_DG_OPEN || !c->vc) {
		ntx_dg_conn_free(c);
		return;
	}
	c->state = NTX_DG_FAILED;
	ntx_list_remove(&c->hs_link);
	ntx_dg_unhash(c);
	ep->cb.failed(c->vc, -FI_ECONNRESET);
}

void ntx_dg_verified(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
		     const struct ntx_addr *name, uint32_t tag_mine,
		     uint32_t tag_peer)
{
	struct ntx_dg_conn *c = ntx_dg_live(ep, ip4, port);

	if (c && c->state == NTX_DG_REFUSED)
		return;
	/* our own INIT waits for its COOKIE, or this is the ECHO of a
	 * simultaneous open, or a duplicate: one session either way */
	if (c && (!c->tag_peer || c->tag_peer == tag_peer)) {
		c->tag_peer = tag_peer;
		ntx_dg_hs_done(c);
		return;
	}
	if (c)
		ntx_dg_restarted(c);
	c = ntx_dg_stranger(ep, ip4, port);
	if (!c)
		return;
	c->name = *name;
	c->tag_mine = tag_mine;
	c->tag_peer = tag_peer;
	ntx_rel_peer_set_epochs(c->rel, tag_mine, tag_peer);
}

/* Only a peer that proved its address (the handshake) has state; data
 * from any other is dropped unanswered: an unverified address makes us
 * hold nothing and send nothing but a COOKIE (DESIGN §10, Handshake). */
void ntx_dg_on_dgram(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
		     const uint8_t *buf, size_t len, uint64_t now)
{
	struct ntx_dg_conn *c;

	if (ntx_dg_on_ctl(ep, ip4, port, buf, len, now))
		return;
	c = ntx_dg_live(ep, ip4, port);
	if (!c) {
		ep->stray_drops++;
		return;
	}
	if (c->state == NTX_DG_REFUSED)
		return;
	if (c->state == NTX_DG_UNNAMED && !ntx_dg_unnamed_may(c, buf, len)) {
		ep->unnamed_drops++;
		return;
	}
	ep->in_rel = true;
	/* rel checked and counted it (stats.drops): a line at debug level
	 * only, the data path's. Only a datagram rel took, which carried
	 * the session's tags, says the peer lives. */
	if (ntx_rel_on_datagram(&ep->rel, c->rel, buf, len, now)) {
		NTX_DBG(FI_LOG_EP_DATA, "%s: a datagram of %zu bytes from pid "
			"%u dropped\n", ep->xp->name, len, c->name.pid);
	} else {
		c->quiet = 0;
		c->suspect = 0;
		if (c->hs == NTX_DG_HS_ECHO)
			ntx_dg_hs_done(c);
	}
	ep->in_rel = false;
	ep->tx_due = true; /* ACKs may be owed */
}

/* connect reports connected from the next poll: the engine stores the
 * connection only when connect returns. */
int ntx_dg_report(struct ntx_dg_ep *ep)
{
	int cnt = 0;

	while (!ntx_list_empty(&ep->owed)) {
		struct ntx_dg_conn *c = ntx_container_of(
			ntx_list_first(&ep->owed), struct ntx_dg_conn, link);

		ntx_dg_unlist(c);
		cnt++;
		if (c->state == NTX_DG_OPEN && c->vc)
			ep->cb.connected(c->vc);
	}
	return cnt;
}

/* After traffic the device is read every poll for NTX_DG_BUSY_NS; the
 * transport stops reading (and waits for readiness) only when drained. */
void ntx_dg_after_rx(struct ntx_dg_ep *ep, uint64_t now, int cnt,
		     bool drained)
{
	ntx_dg_tx(ep, now);
	if (cnt)
		ep->busy_until_ns = now + NTX_DG_BUSY_NS;
	ep->busy = !drained || now < ep->busy_until_ns || !ep->next_ns;
}

/* rel's configuration: peers failing after FI_NTX_UDP_TIMEOUT_MS without
 * progress, a random session number (a restarted endpoint is a new
 * session). */
int ntx_dg_rel_init(struct ntx_dg_ep *ep, size_t dgram, uint32_t window)
{
	static const struct ntx_rel_ops ops = {
		.emit = ntx_dg_emit,
		.deliver = ntx_dg_deliver,
		.failed = ntx_dg_failed,
		.dropped = ntx_dg_dropped,
		.acked = ntx_dg_acked,
	};
	struct ntx_rel_cfg cfg;
	int ret;

	ntx_rel_cfg_default(&cfg);
	cfg.mtu = (uint32_t)(dgram - NTX_REL_HDR_LEN);
	cfg.window = window;
	cfg.max_msg = 65536;
	cfg.epoch = (uint32_t)ntx_random64() | 1;
	cfg.set_epochs = true; /* each peer's from its handshake */
	cfg.dead_ns = (uint64_t)ntx_params.udp_timeout_ms * 1000000;
	/* the reorder buffers of all peers: the endpoint's budget */
	cfg.ooo_mem_max = ntx_params.ep_unexp_max;
	ret = ntx_rel_init(&ep->rel, &cfg, &ops, ep);
	ep->rel_ready = !ret;
	return ret;
}
