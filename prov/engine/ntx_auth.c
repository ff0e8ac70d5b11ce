/*
 * Job keys (DESIGN §7): when an endpoint has a key, every new VC starts
 * with a challenge and response on the VC itself, the same on every back
 * end. Each side sends a fresh nonce with its name (CHAL) and answers
 * the peer's with HMAC-SHA256(key, label, challenger nonce, responder
 * nonce, challenger name, responder name) (PROOF); the key never
 * travels. Until the peer's proof checks out nothing else from the VC is
 * taken, and our own sends wait on its backlog. A peer without the key
 * is refused (REFUSE, FI_EACCES): everything owed to it fails, other
 * peers go on. VCs where neither side has a key skip all of this.
 */
#include "config.h"
#include <stdlib.h>
#include <sys/random.h>

#include "ntx/ntx_engine.h"
#include "ntx/ntx_sha256.h"

static const char ntx_auth_label[] = "ntx job key proof v1";
static const char ntx_seal_label[] = "ntx job key seal v1";

static bool ntx_auth_needed(const struct ntx_vc *vc)
{
	return vc->ep->auth.len || (vc->peer.flags & NTX_ADDR_F_KEYED);
}

int ntx_auth_init(struct ntx_vc *vc)
{
	struct ntx_vc_auth *a;

	if (vc->auth || !ntx_auth_needed(vc))
		return 0;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -FI_ENOMEM;
	if (getrandom(a->mine, sizeof(a->mine), 0) != sizeof(a->mine)) {
		NTX_WARN(FI_LOG_EP_CTRL, "getrandom failed: no challenge\n");
		free(a);
		return -FI_EIO;
	}
	a->deadline_ns = ntx_now_ns() +
			 (uint64_t)ntx_params.auth_timeout_ms * 1000000;
	vc->auth = a;
	vc->ep->auth_vcs++;
	return 0;
}

void ntx_auth_free(struct ntx_vc *vc)
{
	if (!vc->auth)
		return;
	ntx_wipe(vc->auth, sizeof(*vc->auth));
	free(vc->auth);
	vc->auth = NULL;
	vc->ep->auth_vcs--;
}

/* A peer that connected and then says nothing must not hold what we
 * owe it forever. */
void ntx_auth_check(struct ntx_ep *ep, uint64_t now)
{
	struct ntx_list *it;

	ntx_list_foreach(&ep->vcs, it) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (!vc->auth || vc->state == NTX_VC_ERROR ||
		    now <= vc->auth->deadline_ns)
			continue;
		NTX_WARN(FI_LOG_EP_CTRL, "pid %u did not prove the job key in "
			 "%zu ms\n", vc->peer.pid, ntx_params.auth_timeout_ms);
		vc->auth->tx = 0;
		ntx_vc_fail(vc, -FI_ETIMEDOUT);
	}
}

/* The proof a responder gives to a challenger. */
static void ntx_auth_mac(const struct ntx_auth_key *k, const uint8_t *c_nonce,
			 const uint8_t *r_nonce, const struct ntx_addr *c_name,
			 const struct ntx_addr *r_name,
			 uint8_t mac[NTX_SHA256_LEN])
{
	struct ntx_hmac m;

	ntx_hmac_init(&m, k->key, k->len);
	ntx_hmac_update(&m, ntx_auth_label, sizeof(ntx_auth_label));
	ntx_hmac_update(&m, c_nonce, NTX_AUTH_NONCE);
	ntx_hmac_update(&m, r_nonce, NTX_AUTH_NONCE);
	ntx_hmac_update(&m, c_name, sizeof(*c_name));
	ntx_hmac_update(&m, r_name, sizeof(*r_name));
	ntx_hmac_final(&m, mac);
}

/* Our name sorts below the peer's: each side puts its own in the MACs of
 * a sealed connection. */
static bool ntx_auth_lower(const struct ntx_vc *vc)
{
	return memcmp(&vc->ep->name, &vc->auth->peer_name,
		      sizeof(vc->ep->name)) < 0;
}

/* Seals a direction of the VC where the back end's medium others can
 * write (ops->seal): the session key is HMAC-SHA256(key, label, both
 * nonces and both names, the lower name's first), the same on both sides
 * and new for every connection. 0, or an error for ntx_vc_fail. */
static int ntx_auth_seal(struct ntx_vc *vc, bool rx)
{
	struct ntx_vc_auth *a = vc->auth;
	bool lower = ntx_auth_lower(vc);
	uint8_t key[NTX_SHA256_LEN];
	struct ntx_hmac m;
	int ret;

	if (!vc->ops->seal)
		return 0;
	ntx_hmac_init(&m, vc->ep->auth.key, vc->ep->auth.len);
	ntx_hmac_update(&m, ntx_seal_label, sizeof(ntx_seal_label));
	ntx_hmac_update(&m, lower ? a->mine : a->theirs, NTX_AUTH_NONCE);
	ntx_hmac_update(&m, lower ? a->theirs : a->mine, NTX_AUTH_NONCE);
	ntx_hmac_update(&m, lower ? &vc->ep->name : &a->peer_name,
			sizeof(vc->ep->name));
	ntx_hmac_update(&m, lower ? &a->peer_name : &vc->ep->name,
			sizeof(vc->ep->name));
	ntx_hmac_final(&m, key);
	ret = vc->ops->seal(vc->conn, key, rx, lower);
	ntx_wipe(key, sizeof(key));
	return ret;
}

/* Fails the VC with FI_EACCES, telling the peer first (best effort). */
static void ntx_auth_refuse(struct ntx_vc *vc, const char *why)
{
	struct ntx_wire_hdr h = { .op = NTX_OP_AUTH,
				  .status = NTX_AUTH_REFUSE };

	NTX_WARN(FI_LOG_EP_CTRL, "refusing pid %u: %s\n", vc->peer.pid, why);
	if (vc->state == NTX_VC_AUTH || vc->state == NTX_VC_CONNECTED)
		vc->ops->send(vc->conn, &h, NULL, 0, 0);
	if (vc->auth)
		vc->auth->tx = 0;
	ntx_vc_fail(vc, -FI_EACCES);
}

void ntx_auth_begin(struct ntx_vc *vc)
{
	if (!vc->auth) {
		vc->state = NTX_VC_CONNECTED;
		return;
	}
	vc->state = NTX_VC_AUTH;
	/* without a key of our own we can only say no, at once */
	vc->auth->tx |= vc->ep->auth.len ? NTX_AUTH_TX_CHAL
					 : NTX_AUTH_TX_REFUSE;
	ntx_vc_mark_busy(vc);
}

/* One packet of the exchange: 0, or -FI_EAGAIN when the ring is full. */
static int ntx_auth_send(struct ntx_vc *vc, uint8_t what)
{
	struct ntx_vc_auth *a = vc->auth;
	struct ntx_wire_hdr h = { .op = NTX_OP_AUTH };
	struct ntx_wire_auth chal;
	uint8_t mac[NTX_SHA256_LEN];
	struct iovec iov;
	int ret;

	if (what == NTX_AUTH_TX_CHAL) {
		h.status = NTX_AUTH_CHAL;
		memcpy(chal.nonce, a->mine, sizeof(chal.nonce));
		memcpy(chal.name, &vc->ep->name, sizeof(chal.name));
		iov = (struct iovec){ &chal, sizeof(chal) };
	} else {
		h.status = NTX_AUTH_PROOF;
		ntx_auth_mac(&vc->ep->auth, a->theirs, a->mine, &a->peer_name,
			     &vc->ep->name, mac);
		iov = (struct iovec){ mac, sizeof(mac) };
	}
	ret = vc->ops->send(vc->conn, &h, &iov, 1, iov.iov_len);
	ntx_wipe(mac, sizeof(mac));
	if (ret == -FI_EAGAIN)
		return ret;
	/* what we send after our proof is sealed, where the medium asks */
	if (!ret && what == NTX_AUTH_TX_PROOF)
		ret = ntx_auth_seal(vc, false);
	if (ret) {
		ntx_vc_fail(vc, ret);
		return ret;
	}
	a->tx &= (uint8_t)~what;
	return 0;
}

void ntx_auth_pump(struct ntx_vc *vc)
{
	struct ntx_vc_auth *a = vc->auth;

	if (a->tx & NTX_AUTH_TX_REFUSE) {
		ntx_auth_refuse(vc, "it has a job key and this endpoint "
				"has none");
		return;
	}
	/* our challenge always leaves before our proof */
	if ((a->tx & NTX_AUTH_TX_CHAL) && ntx_auth_send(vc, NTX_AUTH_TX_CHAL))
		return;
	if ((a->tx & NTX_AUTH_TX_PROOF) && ntx_auth_send(vc, NTX_AUTH_TX_PROOF))
		return;
	if (a->proven && !a->tx && vc->state == NTX_VC_AUTH) {
		NTX_INFO(FI_LOG_EP_CTRL, "pid %u proved the job key\n",
			 vc->peer.pid);
		vc->state = NTX_VC_CONNECTED;
		ntx_auth_free(vc);
	}
}

static void ntx_auth_on_chal(struct ntx_vc *vc, const void *payload,
			     size_t len)
{
	struct ntx_vc_auth *a = vc->auth;
	struct ntx_wire_auth chal;
	struct ntx_addr name;

	if (!vc->ep->auth.len) {
		ntx_auth_refuse(vc, "it has a job key and this endpoint "
				"has none");
		return;
	}
	if (!a || a->have_theirs || len != sizeof(chal)) {
		ntx_auth_refuse(vc, "malformed job key challenge");
		return;
	}
	memcpy(&chal, payload, sizeof(chal));
	memcpy(&name, chal.name, sizeof(name));
	/* our own name back (a reflected challenge), or another endpoint
	 * than the one this VC reaches */
	if ((ntx_addr_same_ep(&name, &vc->ep->name) &&
	     name.epoch == vc->ep->name.epoch) ||
	    (vc->peer.pid && !ntx_addr_same_ep(&name, &vc->peer))) {
		ntx_auth_refuse(vc, "job key challenge names another "
				"endpoint");
		return;
	}
	memcpy(a->theirs, chal.nonce, sizeof(a->theirs));
	a->peer_name = name;
	a->have_theirs = true;
	a->tx |= NTX_AUTH_TX_PROOF;
	ntx_vc_mark_busy(vc);
	ntx_vc_pump(vc);
}

static void ntx_auth_on_proof(struct ntx_vc *vc, const void *payload,
			      size_t len)
{
	struct ntx_vc_auth *a = vc->auth;
	uint8_t want[NTX_SHA256_LEN];
	bool ok;
	int ret;

	if (!a || !a->have_theirs || a->proven || len != sizeof(want)) {
		ntx_auth_refuse(vc, "job key proof out of turn");
		return;
	}
	ntx_auth_mac(&vc->ep->auth, a->mine, a->theirs, &vc->ep->name,
		     &a->peer_name, want);
	ok = ntx_mem_equal(want, payload, sizeof(want));
	ntx_wipe(want, sizeof(want));
	if (!ok) {
		ntx_auth_refuse(vc, "its job key proof is wrong (another "
				"key)");
		return;
	}
	a->proven = true;
	/* what the peer sends after its proof is sealed, where the medium
	 * asks */
	ret = ntx_auth_seal(vc, true);
	if (ret) {
		ntx_vc_fail(vc, ret);
		return;
	}
	ntx_vc_pump(vc); /* CONNECTED once our proof left; then the backlog */
}

void ntx_auth_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			const void *payload, size_t len)
{
	if (vc->state == NTX_VC_ERROR)
		return;
	if (h->op != NTX_OP_AUTH) {
		ntx_auth_refuse(vc, "it sent data before proving the job "
				"key");
		return;
	}
	switch (h->status) {
	case NTX_AUTH_CHAL:
		ntx_auth_on_chal(vc, payload, len);
		return;
	case NTX_AUTH_PROOF:
		ntx_auth_on_proof(vc, payload, len);
		return;
	case NTX_AUTH_REFUSE:
		NTX_WARN(FI_LOG_EP_CTRL, "pid %u refused us: no job key or "
			 "another one\n", vc->peer.pid);
		if (vc->auth)
			vc->auth->tx = 0;
		ntx_vc_fail(vc, -FI_EACCES);
		return;
	default:
		NTX_WARN(FI_LOG_EP_CTRL, "malformed job key packet from pid "
			 "%u\n", vc->peer.pid);
		ntx_vc_fail(vc, -FI_EREMOTEIO);
		return;
	}
}
