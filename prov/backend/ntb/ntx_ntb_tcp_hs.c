/*
 * The tcp back end's proof of name (DESIGN §7, ntx_tcp_wire.h): an
 * accepted connection reaches the engine only once the name its hello
 * claims was proven (PROVE, ECHO, WELCOME), at a bounded rate per address.
 */
#include "config.h"
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "ntx/ntx_sha256.h"
#include "ntx_ntb_tcp.h"

/* Echoes that are not ours a VERIFY connection takes (a claimant with
 * several connections to us echoes on each) before it gives up. */
#define NTX_TCP_MAX_MISSES 8

/* ip (network order) is one of this host's: loopback, or an address of
 * one of its interfaces. */
static bool ntx_tcp_ip_is_local(uint32_t ip)
{
	struct ifaddrs *ifa, *it;
	bool local = false;

	if (ntx_ip4_loopback(ip))
		return true;
	if (getifaddrs(&ifa))
		return false;
	for (it = ifa; it && !local; it = it->ifa_next) {
		const struct sockaddr_in *sin = (const void *)it->ifa_addr;

		local = sin && sin->sin_family == AF_INET &&
			sin->sin_addr.s_addr == ip;
	}
	freeifaddrs(ifa);
	return local;
}

/* A connection may claim a name only on its own address (DESIGN §7):
 * the listener we dial to check a claim is then the claimant's, never a
 * third party's that a hello would have us connect and write to. A
 * name on loopback (or none) may be claimed from any address of this
 * host. */
static bool ntx_tcp_may_claim(int fd, const struct ntx_addr *from,
			      uint32_t *src)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	uint32_t claimed = from->ip4 ? from->ip4 : htonl(INADDR_LOOPBACK);

	if (getpeername(fd, (struct sockaddr *)&sin, &sl) ||
	    sin.sin_family != AF_INET)
		return false;
	*src = sin.sin_addr.s_addr;
	if (*src == claimed)
		return true;
	return ntx_ip4_loopback(claimed) && ntx_tcp_ip_is_local(*src);
}

/* A proof of a name from address src may go now: each costs a dial, so
 * one address gets FI_NTX_TCP_PROOF_RATE a second, in bursts of twice
 * that (hostile networks round two: proofs of one address are
 * rate-limited). Addresses that share a slot share its tokens. */
static bool ntx_tcp_proof_ok(struct ntx_tcp_ep *be, uint32_t src,
			     uint64_t now)
{
	uint64_t burst = 2 * (uint64_t)ntx_params.tcp_proof_rate;
	uint64_t step = 1000000000ull / ntx_params.tcp_proof_rate, add;
	size_t i = (size_t)((src * 0x9e3779b9u) >> 26);

	if (!be->proofs[i].at_ns) {
		be->proofs[i].at_ns = now;
		be->proofs[i].tokens = (uint32_t)burst;
	}
	add = (now - be->proofs[i].at_ns) / step;
	if (add) {
		be->proofs[i].tokens = (uint32_t)(be->proofs[i].tokens + add >
							  burst
						  ? burst
						  : be->proofs[i].tokens + add);
		be->proofs[i].at_ns += add * step;
	}
	if (!be->proofs[i].tokens)
		return false;
	be->proofs[i].tokens--;
	return true;
}

/* The claim's check: a PROVE to the claimed name's listener, when its
 * address's turn comes (ntx_tcp_proof_ok; else check_peers tries again
 * until FI_NTX_TCP_HELLO_MS). */
void ntx_tcp_prove_claim(struct ntx_tcp_conn *c, uint64_t now)
{
	struct ntx_tcp_prove pr;
	struct ntx_tcp_conn *probe;

	if (!ntx_tcp_proof_ok(c->be, c->src, now)) {
		if (!c->proof_due)
			NTX_WARN(FI_LOG_EP_CTRL, "names claimed from one address "
				 "come faster than %zu a second: pid %u waits "
				 "its turn\n", ntx_params.tcp_proof_rate,
				 c->peer.pid);
		c->proof_due = true;
		return;
	}
	c->proof_due = false;
	memcpy(pr.claimed, &c->peer, sizeof(pr.claimed));
	memcpy(pr.prover, &c->be->addr, sizeof(pr.prover));
	memcpy(pr.nonce, c->nonce, sizeof(pr.nonce));
	if (ntx_tcp_dial(c->be, &c->peer, ntx_params.tcp_hello_ms, &probe)) {
		NTX_WARN(FI_LOG_EP_CTRL, "closing a connection whose claimed "
			 "name (pid %u, port %u) has no listener we reach\n",
			 c->peer.pid, ntohs(c->peer.port));
		return ntx_tcp_fail(c, -FI_EACCES);
	}
	probe->probe = true;
	if (ntx_tcp_ctl(probe, NTX_TCP_PROVE, &pr, sizeof(pr))) {
		ntx_tcp_fail(probe, -FI_ENOMEM);
		return ntx_tcp_fail(c, -FI_ENOMEM);
	}
}

/* A hello: before the connection is bound to the name it claims, a
 * nonce goes to the listener that name names; its owner echoes it over
 * the connection it opened (DESIGN §7, proof of name). */
static void ntx_tcp_on_hello(struct ntx_tcp_conn *c, const uint8_t *p,
			     size_t len)
{
	struct ntx_addr from;
	uint32_t src = 0;

	if (len != sizeof(from))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	memcpy(&from, p, sizeof(from));
	if (!ntx_addr_valid(&from) || !from.port ||
	    getrandom(c->nonce, sizeof(c->nonce), 0) != sizeof(c->nonce))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	if (!ntx_tcp_may_claim(c->fd, &from, &src)) {
		struct in_addr a = { src }, b = { from.ip4 };
		char as[INET_ADDRSTRLEN] = "?", bs[INET_ADDRSTRLEN] = "?";

		inet_ntop(AF_INET, &a, as, sizeof(as));
		inet_ntop(AF_INET, &b, bs, sizeof(bs));
		NTX_WARN(FI_LOG_EP_CTRL, "closing a connection from %s that "
			 "claims a name on %s (pid %u)\n", as, bs, from.pid);
		return ntx_tcp_fail(c, -FI_EACCES);
	}
	c->peer = from;
	c->src = src;
	c->state = NTX_TCP_VERIFY;
	ntx_tcp_prove_claim(c, ntx_now_ns());
}

/* Someone we connected to asks whether the name of our hello is ours:
 * the nonce goes back over every connection of ours still waiting for
 * that listener's welcome (the one that is not its own is ignored
 * there). This connection has done its part. */
static void ntx_tcp_on_prove(struct ntx_tcp_conn *c, const uint8_t *p,
			     size_t len)
{
	uint32_t mine = (uint32_t)ntx_params.tcp_eager_max;
	struct ntx_tcp_params e = { .eager_max = mine };
	struct ntx_tcp_ep *be = c->be;
	struct ntx_addr claimed, prover;
	struct ntx_tcp_prove pr;
	struct ntx_list *it;

	ntx_tcp_fail(c, -FI_ECONNRESET); /* never reached the engine */
	if (len != sizeof(pr))
		return;
	memcpy(&pr, p, sizeof(pr));
	memcpy(&claimed, pr.claimed, sizeof(claimed));
	memcpy(&prover, pr.prover, sizeof(prover));
	if (!ntx_addr_same_ep(&claimed, &be->addr) ||
	    claimed.epoch != be->addr.epoch) {
		NTX_INFO(FI_LOG_EP_CTRL, "not vouching for a name that is not "
			 "ours (pid %u)\n", claimed.pid);
		return;
	}
	memcpy(e.nonce, pr.nonce, sizeof(e.nonce));
	ntx_list_foreach(&be->conns, it) {
		struct ntx_tcp_conn *o =
			ntx_container_of(it, struct ntx_tcp_conn, entry);

		if (o->state == NTX_TCP_WELCOME_WAIT &&
		    o->peer.port == prover.port)
			ntx_tcp_ctl(o, NTX_TCP_ECHO, &e, sizeof(e));
	}
}

/* The peer's FI_NTX_TCP_EAGER_MAX from its ECHO or WELCOME, within the
 * parameter's range; false (the connection failed) when it is not. */
static bool ntx_tcp_take_eager(struct ntx_tcp_conn *c, uint32_t v)
{
	if (v < 4096 || v > 65536) {
		NTX_WARN(FI_LOG_EP_CTRL, "peer pid %u says "
			 "FI_NTX_TCP_EAGER_MAX is %u: refused\n", c->peer.pid,
			 v);
		ntx_tcp_fail(c, -FI_EREMOTEIO);
		return false;
	}
	c->peer_eager = v;
	return true;
}

static void ntx_tcp_on_echo(struct ntx_tcp_conn *c, const uint8_t *p,
			    size_t len)
{
	uint32_t mine = (uint32_t)ntx_params.tcp_eager_max;
	struct ntx_tcp_params e, w = { .eager_max = mine };

	if (len != sizeof(e))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	memcpy(&e, p, sizeof(e));
	if (!ntx_mem_equal(e.nonce, c->nonce, sizeof(c->nonce))) {
		if (++c->misses > NTX_TCP_MAX_MISSES)
			ntx_tcp_fail(c, -FI_EACCES);
		return;
	}
	if (!ntx_tcp_take_eager(c, e.eager_max))
		return;
	c->state = NTX_TCP_OPEN;
	if (ntx_tcp_ctl(c, NTX_TCP_WELCOME, &w, sizeof(w)))
		return ntx_tcp_fail(c, -FI_ENOMEM);
	c->vc = c->be->cb.accept(c->be->cb.ctx, &c->head, &c->peer);
	if (!c->vc)
		c->state = NTX_TCP_FAILED;
}

static void ntx_tcp_on_welcome(struct ntx_tcp_conn *c, const uint8_t *p,
			       size_t len)
{
	struct ntx_tcp_params w;

	if (len != sizeof(w))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	memcpy(&w, p, sizeof(w));
	if (!ntx_tcp_take_eager(c, w.eager_max))
		return;
	c->state = NTX_TCP_OPEN;
	ntx_tcp_flush(c);
	c->be->cb.connected(c->vc);
}

void ntx_tcp_on_frame(struct ntx_tcp_conn *c,
		      const struct ntx_tcp_frame *f, const uint8_t *p)
{
	switch (c->state) {
	case NTX_TCP_OPEN:
		if (f->type != NTX_TCP_ENTRY)
			break;
		c->be->cb.recv(c->vc, &f->hdr, p, f->len);
		return;
	case NTX_TCP_HELLO_WAIT:
		if (f->type == NTX_TCP_HELLO)
			return ntx_tcp_on_hello(c, p, f->len);
		if (f->type == NTX_TCP_PROVE)
			return ntx_tcp_on_prove(c, p, f->len);
		break;
	case NTX_TCP_VERIFY:
		if (f->type != NTX_TCP_ECHO)
			break;
		return ntx_tcp_on_echo(c, p, f->len);
	case NTX_TCP_WELCOME_WAIT:
		if (f->type != NTX_TCP_WELCOME)
			break;
		return ntx_tcp_on_welcome(c, p, f->len);
	default:
		break;
	}
	ntx_tcp_fail(c, -FI_EREMOTEIO);
}
