/*
 * The engine's virtual connections (ntx_vc.c) and their job-key exchange
 * (ntx_auth.c), DESIGN §3 and §7: a part of ntx_engine.h, which includes
 * it after the requests (ntx_engine_req.h).
 */
/* First the engine's types and the parts before this one, in order, even
 * when a file includes this header before ntx_engine.h. */
#include "ntx/ntx_engine.h"
#ifndef NTX_ENGINE_VC_H
#define NTX_ENGINE_VC_H

/* ---- virtual connections (ntx_vc.c) ---- */
/* The VC of an AV address as it is. */
int ntx_vc_get_slot(struct ntx_ep *ep, fi_addr_t addr, struct ntx_vc **vc);
void ntx_vc_on_names(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		     const void *payload, size_t len);
/* A live VC with the endpoint of this name, or NULL. */
struct ntx_vc *ntx_vc_by_name(struct ntx_ep *ep, const struct ntx_addr *a);
/* An NTX_OP_CM packet (stage NTX_CM_*) with len <= NTX_CM_DATA_MAX
 * bytes of connection data. */
int ntx_vc_cm_send(struct ntx_vc *vc, uint32_t stage, uint64_t cid,
		   const void *data, size_t len);
fi_addr_t ntx_vc_fi_addr_lookup(struct ntx_vc *vc);
/* The VC table key of an operation's address (DESIGN §3, "Scalable
 * endpoints"): the AV slot; where the AV has rx_ctx_bits, the slot and
 * below it the receive context fi_rx_addr put in the high bits.
 * FI_ADDR_NOTAVAIL for a context or slot out of range. */
static inline bool ntx_vc_ctx_keys(const struct ntx_ep *ep)
{
	return ep->av && ep->av->rx_ctx_bits;
}

static inline fi_addr_t ntx_vc_key_of(const struct ntx_ep *ep, fi_addr_t slot,
				      uint64_t ctx)
{
	if (!ntx_vc_ctx_keys(ep))
		return ctx ? FI_ADDR_NOTAVAIL : slot;
	if (ctx >= NTX_SEP_CTX_MAX ||
	    slot >= (NTX_IDTAB_MAX >> NTX_SEP_CTX_SHIFT))
		return FI_ADDR_NOTAVAIL;
	return slot << NTX_SEP_CTX_SHIFT | ctx;
}

static inline fi_addr_t ntx_vc_key(const struct ntx_ep *ep, fi_addr_t addr)
{
	int bits;

	if (!ntx_vc_ctx_keys(ep) || addr == FI_ADDR_NOTAVAIL)
		return addr;
	bits = ep->av->rx_ctx_bits;
	return ntx_vc_key_of(ep, addr & (~0ull >> bits), addr >> (64 - bits));
}
/* The peer's AV address (FI_ADDR_NOTAVAIL if it is not in the AV). */
static inline fi_addr_t ntx_vc_fi_addr(struct ntx_vc *vc)
{
	if (vc->fi_addr != FI_ADDR_NOTAVAIL) /* known: every message */
		return vc->fi_addr;
	return ntx_vc_fi_addr_lookup(vc);
}
/* The VC of an operation's address (a MSG endpoint's: its peer's).
 * Inline: every send looks up a VC it has. */
static inline int ntx_vc_get(struct ntx_ep *ep, fi_addr_t addr,
			     struct ntx_vc **out)
{
	struct ntx_vc *vc;

	if (ep->cm) {
		if (ep->msg_dest == FI_ADDR_NOTAVAIL)
			return -FI_ENOTCONN;
		addr = ep->msg_dest;
	}
	addr = ntx_vc_key(ep, addr);
	vc = ntx_idtab_get(&ep->vc_tab, addr);
	if (vc && vc->state != NTX_VC_ERROR) {
		*out = vc;
		return 0;
	}
	return ntx_vc_get_slot(ep, addr, out);
}
/* What ntx_vc_get answers for a peer that cannot be reached now (no back
 * end of the domain reaches it, its connection was refused at once, its
 * service has no endpoint): an operation to it completes in error
 * instead of being refused at the call, which callers retry (fi_msg(3):
 * only -FI_EAGAIN asks for that). */
static inline bool ntx_vc_err_unreachable(int err)
{
	return err == -FI_EHOSTUNREACH || err == -FI_ECONNREFUSED ||
	       err == -FI_EADDRNOTAVAIL || err == -FI_ENETUNREACH;
}
void ntx_vc_fail(struct ntx_vc *vc, int err);
void ntx_vc_destroy(struct ntx_vc *vc);
void ntx_vc_queue(struct ntx_vc *vc, struct ntx_req *req);
/* Puts req on the backlog (at its head: to be resumed first). */
void ntx_vc_backlog(struct ntx_vc *vc, struct ntx_req *req, bool head);
void ntx_vc_pump(struct ntx_vc *vc);
int ntx_vc_ctrl(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr);
/* The same with a payload, copied if the packet has to wait. */
int ntx_vc_ctrl_data(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr,
		     const struct iovec *iov, size_t iovcnt, size_t len);
extern const struct ntx_be_cb ntx_vc_callbacks;
/* Puts the VC on the endpoint's list of VCs that progress pumps. */
void ntx_vc_mark_busy(struct ntx_vc *vc);

/* ---- job keys (ntx_auth.c, DESIGN §7) ---- */
/* The exchange is needed when we or the peer (its name says) have a key:
 * sets up vc->auth (0 when not needed, or -FI_ENOMEM). */
int ntx_auth_init(struct ntx_vc *vc);
/* The back end connected: the VC enters NTX_VC_AUTH if it needs it. */
void ntx_auth_begin(struct ntx_vc *vc);
/* Sends what the exchange owes; the VC becomes CONNECTED once both
 * proofs passed. */
void ntx_auth_pump(struct ntx_vc *vc);
/* An NTX_OP_AUTH packet, or any packet before the VC was proven. */
void ntx_auth_on_packet(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			const void *payload, size_t len);
void ntx_auth_free(struct ntx_vc *vc);
/* Fails the VCs whose exchange outlived FI_NTX_AUTH_TIMEOUT_MS. */
void ntx_auth_check(struct ntx_ep *ep, uint64_t now);
/* Packets of the exchange still to send (progress keeps pumping). */
static inline bool ntx_auth_tx_pending(const struct ntx_vc *vc)
{
	return vc->auth && vc->auth->tx;
}

#endif /* NTX_ENGINE_VC_H */
