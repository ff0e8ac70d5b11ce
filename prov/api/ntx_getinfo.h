/*
 * Inside fi_getinfo (prov/api only): what its two files share.
 * ntx_getinfo_attr.c lists the domains and builds each one's entry;
 * ntx_getinfo.c checks and narrows it against the hints.
 */
#ifndef NTX_GETINFO_H
#define NTX_GETINFO_H

#include "ntx/ntx.h"

#define NTX_EP_CAPS                                                        \
	(FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV |        \
	 FI_MULTI_RECV | FI_SOURCE | FI_SOURCE_ERR | FI_RMA | FI_ATOMIC |     \
	 FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE |             \
	 FI_RMA_EVENT | FI_FENCE | FI_TRIGGER | FI_NAMED_RX_CTX)

/* One fi_info per domain: shm reaches this host only; tcp and each verbs
 * device reach peers on this host through the shm window and remote peers
 * through their network. A verbs domain's limits come from its device
 * (0 = ntx's defaults). */
struct ntx_dom_desc {
	char name[64];
	uint64_t caps;
	bool net;
	bool datagram; /* FI_EP_DGRAM too */
	bool sep;      /* scalable endpoints (DESIGN §3) */
	uint32_t ep_cnt, cq_cnt, mr_cnt, tx_size, rx_size;
};
#define NTX_MAX_DOMS 18

/* FI_EP_DGRAM on the datagram domains (DESIGN §10): an RDM endpoint of
 * the domain that promises less, messages of up to one MTU-sized
 * datagram, no one-sided operations. ntx delivers them whole and in
 * order all the same. */
#define NTX_DGRAM_CAPS                                                     \
	(FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV |         \
	 FI_MULTI_RECV | FI_SOURCE | FI_SOURCE_ERR | FI_REMOTE_COMM |        \
	 FI_LOCAL_COMM)
#define NTX_DGRAM_MAX 1024

/* A MSG endpoint has one peer: no directed receives, no source. */
#define NTX_MSG_NO_CAPS (FI_DIRECTED_RECV | FI_SOURCE | FI_SOURCE_ERR)

/* The templates' endpoint and domain attributes: the limits hints are
 * checked against (ntx_tx_attr and ntx_rx_attr are in ntx.h). */
extern const struct fi_ep_attr ntx_ep_attr;
extern const struct fi_domain_attr ntx_domain_attr;

/* The domains fi_getinfo lists for an endpoint type, in its order, into
 * d (NTX_MAX_DOMS); want: the domain the hints name, or NULL. */
size_t ntx_doms(struct ntx_dom_desc *d, const char *want,
		enum fi_ep_type type);
/* A domain's RDM entry before hints, or NULL (no memory). */
struct fi_info *ntx_info_template(const struct ntx_dom_desc *d,
				  uint32_t version);
/* The template of an RDM entry made a MSG or DGRAM one. */
void ntx_info_type(struct fi_info *fi, enum fi_ep_type type);

#endif /* NTX_GETINFO_H */
