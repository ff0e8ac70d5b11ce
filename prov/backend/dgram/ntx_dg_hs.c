/*
 * First contact on the datagram back ends (DESIGN §10, "Handshake"): an
 * address proves it can receive what we send it before we take anything
 * from it, as SCTP's and QUIC's handshakes do. The initiator sends INIT
 * (its tag and its name); the responder answers with a COOKIE that binds
 * the source address, the name and both tags under a secret of its
 * endpoint, and keeps no state; only an ECHO of a valid cookie makes
 * state there. Both tags are then the rel epochs of the session, which
 * every datagram must carry: an off-path sender cannot guess them.
 *
 * A tag is a function of the endpoint's secret and the peer's address,
 * so that both sides of a simultaneous open agree without state, and a
 * restarted peer (a new secret) shows a new tag.
 */
#include "config.h"
#include <string.h>

#include "ntx/ntx_sha256.h"
#include "ntx_dgram.h"

/* a cookie is good this long after it was made (responder's clock) */
#define NTX_DG_COOKIE_S 60
/* INIT and ECHO are resent after 20 ms, doubling up to a second */
#define NTX_DG_HS_RTO_NS 20000000ull
#define NTX_DG_HS_RTO_MAX_NS 1000000000ull

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void ntx_dg_mac_addr(struct ntx_hmac *m, const char *label,
			    const struct ntx_dg_ep *ep, uint32_t ip4,
			    uint32_t port)
{
	ntx_hmac_init(m, ep->secret, sizeof(ep->secret));
	ntx_hmac_update(m, label, strlen(label) + 1);
	ntx_hmac_update(m, &ip4, sizeof(ip4));
	ntx_hmac_update(m, &port, sizeof(port));
}

uint32_t ntx_dg_tag(const struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port)
{
	uint8_t out[NTX_SHA256_LEN];
	struct ntx_hmac m;
	uint32_t tag;

	ntx_dg_mac_addr(&m, "ntx dgram tag", ep, ip4, port);
	ntx_hmac_final(&m, out);
	tag = get32(out);
	return tag ? tag : 1; /* 0 is "not known" */
}

/* The cookie's MAC: address, both tags, when, and the name it claims. */
static void ntx_dg_cookie_mac(const struct ntx_dg_ep *ep, uint32_t ip4,
			      uint32_t port, const uint8_t *ctl,
			      uint8_t mac[NTX_DG_CTL_MAC_LEN])
{
	uint8_t out[NTX_SHA256_LEN];
	struct ntx_hmac m;

	ntx_dg_mac_addr(&m, "ntx dgram cookie", ep, ip4, port);
	ntx_hmac_update(&m, ctl + NTX_DG_CTL_TAG_INIT, 12); /* tags, ts */
	ntx_hmac_update(&m, ctl + NTX_DG_CTL_NAME, sizeof(struct ntx_addr));
	ntx_hmac_final(&m, out);
	memcpy(mac, out, NTX_DG_CTL_MAC_LEN);
}

static uint32_t ntx_dg_clock_s(uint64_t now)
{
	return (uint32_t)(now / 1000000000ull);
}

static void ntx_dg_ctl_send(struct ntx_dg_ep *ep, struct ntx_dg_conn *c,
			    const uint8_t *ctl, size_t len)
{
	/* a refused one is lost as on the wire: INIT and ECHO are resent,
	 * and a COOKIE is made again for the next INIT */
	if (!ep->xp->emit(ep, c, ctl, len, NULL, 0)) {
		ep->ctl_out++;
		ep->ctl_out_bytes += len;
	}
	ep->tx_due = true;
}

/* ---- initiator ---------------------------------------------------------- */

static uint64_t ntx_dg_hs_rto(const struct ntx_dg_conn *c)
{
	uint64_t t = NTX_DG_HS_RTO_NS << (c->hs_tries < 6 ? c->hs_tries : 6);

	return t < NTX_DG_HS_RTO_MAX_NS ? t : NTX_DG_HS_RTO_MAX_NS;
}

static void ntx_dg_hs_emit(struct ntx_dg_conn *c, uint64_t now)
{
	struct ntx_dg_ep *ep = c->ep;
	uint8_t ctl[NTX_DG_CTL_LONG] = { 0 };

	if (c->hs == NTX_DG_HS_INIT) {
		ctl[0] = NTX_DG_CTL_INIT;
	} else {
		ctl[0] = NTX_DG_CTL_ECHO;
		put32(ctl + NTX_DG_CTL_TAG_RESP, c->tag_peer);
		put32(ctl + NTX_DG_CTL_TS, c->ck_ts);
		memcpy(ctl + NTX_DG_CTL_MAC, c->ck_mac, NTX_DG_CTL_MAC_LEN);
	}
	put32(ctl + NTX_DG_CTL_TAG_INIT, c->tag_mine);
	memcpy(ctl + NTX_DG_CTL_NAME, &ep->addr, sizeof(ep->addr));
	ntx_dg_ctl_send(ep, c, ctl, sizeof(ctl));
	c->hs_next_ns = now + ntx_dg_hs_rto(c);
	c->hs_tries++;
	if (c->hs_next_ns < ep->hs_next_ns)
		ep->hs_next_ns = c->hs_next_ns;
}

void ntx_dg_hs_start(struct ntx_dg_conn *c, uint64_t now)
{
	struct ntx_dg_ep *ep = c->ep;

	c->tag_mine = ntx_dg_tag(ep, c->ip4, c->port);
	c->hs = NTX_DG_HS_INIT;
	c->hs_tries = 0;
	c->hs_start_ns = now;
	ntx_rel_peer_hold(&ep->rel, c->rel, true);
	ntx_list_insert_tail(&ep->hsq, &c->hs_link);
	ntx_dg_hs_emit(c, now);
}

void ntx_dg_hs_done(struct ntx_dg_conn *c)
{
	if (c->hs == NTX_DG_HS_DONE)
		return;
	c->hs = NTX_DG_HS_DONE;
	ntx_list_remove(&c->hs_link);
	ntx_rel_peer_set_epochs(c->rel, c->tag_mine, c->tag_peer);
	ntx_rel_peer_hold(&c->ep->rel, c->rel, false);
	c->ep->tx_due = true;
}

/* Resends what is due; the next time one is. */
void ntx_dg_hs_tick(struct ntx_dg_ep *ep, uint64_t now)
{
	struct ntx_list *it;

	ep->hs_next_ns = UINT64_MAX;
	ntx_list_foreach(&ep->hsq, it) {
		struct ntx_dg_conn *c = ntx_container_of(it, struct ntx_dg_conn,
							 hs_link);

		if (c->hs_next_ns <= now)
			ntx_dg_hs_emit(c, now);
		else if (c->hs_next_ns < ep->hs_next_ns)
			ep->hs_next_ns = c->hs_next_ns;
	}
}

/* A COOKIE for our INIT: the peer's tag; our ECHO goes now and the
 * session's data right behind it. A cookie we did not ask for (a spoofed
 * INIT of ours drew it) is dropped. */
static void ntx_dg_on_cookie(struct ntx_dg_ep *ep, struct ntx_dg_conn *c,
			     const uint8_t *ctl, uint64_t now)
{
	uint32_t tag = get32(ctl + NTX_DG_CTL_TAG_RESP);

	if (!c || c->hs != NTX_DG_HS_INIT || !tag ||
	    get32(ctl + NTX_DG_CTL_TAG_INIT) != c->tag_mine) {
		ep->ctl_drops++;
		return;
	}
	c->tag_peer = tag;
	c->ck_ts = get32(ctl + NTX_DG_CTL_TS);
	memcpy(c->ck_mac, ctl + NTX_DG_CTL_MAC, NTX_DG_CTL_MAC_LEN);
	c->hs = NTX_DG_HS_ECHO;
	c->hs_tries = 0;
	c->quiet = c->suspect = 0;
	ntx_rel_peer_set_epochs(c->rel, c->tag_mine, c->tag_peer);
	ntx_rel_peer_hold(&ep->rel, c->rel, false);
	ntx_dg_hs_emit(c, now);
}

/* ---- responder: no state before a valid ECHO ------------------------------- */

static bool ntx_dg_ctl_name(const struct ntx_dg_ep *ep, uint32_t ip4,
			    uint32_t port, const uint8_t *ctl,
			    struct ntx_addr *name)
{
	memcpy(name, ctl + NTX_DG_CTL_NAME, sizeof(*name));
	return ntx_addr_valid(name) && ntx_dg_name_matches(ep, ip4, port, name);
}

static void ntx_dg_on_init(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
			   const uint8_t *init, uint64_t now)
{
	struct ntx_dg_conn *reply = &ep->reply;
	uint8_t ctl[NTX_DG_CTL_LONG] = { NTX_DG_CTL_COOKIE };
	struct ntx_addr name;

	if (!get32(init + NTX_DG_CTL_TAG_INIT) ||
	    !ntx_dg_ctl_name(ep, ip4, port, init, &name)) {
		ep->ctl_drops++;
		NTX_WARN(FI_LOG_EP_CTRL, "%s: an INIT whose name is not its "
			 "address, ignored\n", ep->xp->name);
		return;
	}
	memcpy(ctl + NTX_DG_CTL_TAG_INIT, init + NTX_DG_CTL_TAG_INIT, 4);
	put32(ctl + NTX_DG_CTL_TAG_RESP, ntx_dg_tag(ep, ip4, port));
	put32(ctl + NTX_DG_CTL_TS, ntx_dg_clock_s(now));
	memcpy(ctl + NTX_DG_CTL_NAME, &name, sizeof(name));
	ntx_dg_cookie_mac(ep, ip4, port, ctl, ctl + NTX_DG_CTL_MAC);
	if (reply->ip4 != ip4 || reply->port != port) {
		if (ep->xp->conn_fini)
			ep->xp->conn_fini(ep, reply);
		reply->ip4 = ip4;
		reply->port = port;
	}
	ntx_dg_ctl_send(ep, reply, ctl, NTX_DG_CTL_SHORT);
}

static void ntx_dg_on_echo(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
			   const uint8_t *echo, uint64_t now)
{
	uint8_t ctl[NTX_DG_CTL_LONG], mac[NTX_DG_CTL_MAC_LEN];
	uint32_t ts = get32(echo + NTX_DG_CTL_TS), clk = ntx_dg_clock_s(now);
	struct ntx_addr name;

	memcpy(ctl, echo, sizeof(ctl));
	ntx_dg_cookie_mac(ep, ip4, port, ctl, mac);
	if (!ntx_mem_equal(mac, echo + NTX_DG_CTL_MAC, NTX_DG_CTL_MAC_LEN) ||
	    ts > clk || clk - ts > NTX_DG_COOKIE_S ||
	    !ntx_dg_ctl_name(ep, ip4, port, echo, &name)) {
		ep->ctl_drops++;
		NTX_WARN(FI_LOG_EP_CTRL, "%s: an ECHO without a valid cookie, "
			 "ignored\n", ep->xp->name);
		return;
	}
	ntx_dg_verified(ep, ip4, port, &name, get32(echo + NTX_DG_CTL_TAG_RESP),
			get32(echo + NTX_DG_CTL_TAG_INIT));
}

bool ntx_dg_on_ctl(struct ntx_dg_ep *ep, uint32_t ip4, uint32_t port,
		   const uint8_t *buf, size_t len, uint64_t now)
{
	if (!len || !(buf[0] & 0x80))
		return false;
	ep->ctl_in++;
	ep->ctl_in_bytes += len;
	if (ep->closing)
		return true;
	if (buf[0] == NTX_DG_CTL_INIT && len == NTX_DG_CTL_LONG)
		ntx_dg_on_init(ep, ip4, port, buf, now);
	else if (buf[0] == NTX_DG_CTL_ECHO && len == NTX_DG_CTL_LONG)
		ntx_dg_on_echo(ep, ip4, port, buf, now);
	else if (buf[0] == NTX_DG_CTL_COOKIE && len == NTX_DG_CTL_SHORT)
		ntx_dg_on_cookie(ep, ntx_dg_find(ep, ip4, port), buf, now);
	else
		ep->ctl_drops++;
	return true;
}
