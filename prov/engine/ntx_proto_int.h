/*
 * What the protocol files (ntx_proto_{send,recv,rndv,stream,unexp}.c)
 * share among themselves: engine-internal, not part of ntx_engine.h.
 */
#ifndef NTX_PROTO_INT_H
#define NTX_PROTO_INT_H

#include "ntx/ntx_engine.h"

/* The largest packet payload this peer accepts: the back end's, or less
 * where peers may differ (a peer started with a smaller
 * FI_NTX_EAGER_MAX). DATA segments of a streamed rendezvous use all of
 * it (on tcp a segment is one frame). */
static inline size_t ntx_vc_seg_max(const struct ntx_vc *vc)
{
	size_t m = vc->ops->max_payload;

	if (vc->ops->conn_mtu && vc->conn) {
		size_t p = vc->ops->conn_mtu(vc->conn);

		if (p < m)
			m = p;
	}
	return m;
}

/* The ack a sender asked for (NTX_PF_ACK): delivery complete. */
static inline void ntx_send_ack(struct ntx_vc *vc,
				const struct ntx_wire_hdr *h)
{
	if (h->flags & NTX_PF_ACK) {
		struct ntx_wire_hdr a = { .op = NTX_OP_ACK, .sreq = h->sreq };

		ntx_vc_ctrl(vc, &a);
	}
}

/* ---- send side (ntx_proto_send.c) ---- */
/* One packet with header h of r's next bytes: 1 when it left, -FI_EAGAIN
 * when the ring has no room, 0 when it failed r. */
int ntx_tx_piece(struct ntx_req *r, const struct ntx_wire_hdr *h,
		 size_t end, size_t chunk);
void ntx_on_ack(struct ntx_vc *vc, const struct ntx_wire_hdr *h);

/* ---- receive side (ntx_proto_recv.c) ---- */
/* A receive filled over several packets (rendezvous, streamed) is done. */
void ntx_rx_done(struct ntx_req *r, struct ntx_vc *vc);
/* A child receive for the next slice of multi-receive buffer r. */
struct ntx_req *ntx_mrecv_child(struct ntx_ep *ep, struct ntx_req *r,
				const struct ntx_wire_hdr *h);
void ntx_mrecv_unref(struct ntx_req *r);
void ntx_unexp_deliver(struct ntx_req *r, struct ntx_unexp *u);
/* Our request a reply names, checked; NULL: vc failed. */
struct ntx_req *ntx_reply_req(struct ntx_vc *vc, uint64_t id,
			      enum ntx_req_state state);

/* ---- rendezvous (ntx_proto_rndv.c) ---- */
int ntx_tx_rts(struct ntx_req *r);
int ntx_tx_stream(struct ntx_req *r);
void ntx_rx_rndv(struct ntx_req *r, struct ntx_vc *vc,
		 const struct ntx_wire_hdr *h, const struct ntx_wire_iov *riov,
		 uint16_t niov);
void ntx_on_data(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		 const void *payload, size_t len);
void ntx_on_split(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		  const void *payload, size_t len);
void ntx_on_done(struct ntx_vc *vc, const struct ntx_wire_hdr *h);
void ntx_on_cts(struct ntx_vc *vc, const struct ntx_wire_hdr *h);
void ntx_on_fin(struct ntx_vc *vc, const struct ntx_wire_hdr *h);

/* ---- streamed messages (ntx_proto_stream.c) ---- */
/* An EAGER message of len bytes whose payload we hold whole (a message
 * to our own endpoint, ntx_tx_self): matched and delivered, or waiting
 * unexpected, as one from the ring would be. */
void ntx_msg_deliver_eager(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
			   const void *payload, size_t len);
int ntx_tx_smsg(struct ntx_req *r);
void ntx_on_shead(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		  const void *payload, size_t len);
void ntx_on_sdata(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		  const void *payload, size_t len);

/* ---- unexpected messages (ntx_proto_unexp.c) ---- */
/* An entry for a message no receive was posted for; NULL: over the
 * limits or out of memory (vc failed). */
struct ntx_unexp *ntx_unexp_take(struct ntx_vc *vc, size_t len,
				 size_t hold);
void ntx_unexp_free(struct ntx_unexp *u);

#endif /* NTX_PROTO_INT_H */
