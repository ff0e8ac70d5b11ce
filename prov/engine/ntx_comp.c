/*
 * Completion of requests: CQ entries (honouring FI_SELECTIVE_COMPLETION and
 * FI_SOURCE_ERR) and counters. Errors are always reported.
 */
#include "config.h"

#include "ntx/ntx_engine.h"


void ntx_comp_tx(struct ntx_req *req)
{
	struct ntx_ep *ep = req->ep;

	if (req->silent) {
		if (ep->send_cntr)
			ntx_cntr_inc(ep->send_cntr);
		return;
	}
	ntx_comp_send(ep, req->context, req->flags, false);
}

void ntx_comp_tx_err(struct ntx_req *req, int err)
{
	struct ntx_ep *ep = req->ep;

	if (ep->tx_cq)
		ntx_cq_push_err(ep->tx_cq, req->context,
				FI_SEND | ntx_comp_kind(req->flags), 0, NULL, 0,
				req->tag, 0, err, FI_ADDR_NOTAVAIL, NULL);
	if (ep->send_cntr)
		ntx_cntr_inc_err(ep->send_cntr);
}

void ntx_comp_rx_fault(struct ntx_ep *ep, struct ntx_req *req, uint64_t f,
		       size_t len, uint64_t tag, uint64_t data, fi_addr_t src,
		       void *buf, size_t olen, const struct ntx_addr *src_name)
{
	if (olen) {
		if (ep->rx_cq)
			ntx_cq_push_err(ep->rx_cq, req->context, f, len, buf,
					data, tag, olen, FI_ETRUNC, src, NULL);
		if (ep->recv_cntr)
			ntx_cntr_inc_err(ep->recv_cntr);
		return;
	}
	if (ep->rx_cq)
		ntx_cq_push_err(ep->rx_cq, req->context, f, len, buf, data,
				tag, 0, FI_EADDRNOTAVAIL, src, src_name);
	if (ep->recv_cntr)
		ntx_cntr_inc_err(ep->recv_cntr);
}

void ntx_comp_rx_err(struct ntx_req *req, int err, size_t len, size_t olen,
		     uint64_t tag, uint64_t data)
{
	struct ntx_ep *ep = ntx_req_rx_ep(req, NULL);

	if (!ep) /* an srx no endpoint is bound to any more */
		return;
	if (ep->rx_cq)
		ntx_cq_push_err(ep->rx_cq, req->context,
				FI_RECV | ntx_comp_kind(req->flags), len, NULL, data,
				tag, olen, err, FI_ADDR_NOTAVAIL, NULL);
	if (ep->recv_cntr)
		ntx_cntr_inc_err(ep->recv_cntr);
}

/* One-sided: FI_RMA or FI_ATOMIC with FI_READ/FI_WRITE; the read or write
 * counter. fi_inject_* ops (silent) report only errors. */
void ntx_comp_rma(struct ntx_req *req, int err)
{
	struct ntx_ep *ep = req->ep;
	struct ntx_cntr *c = req->cq_flags & FI_READ ? ep->read_cntr
						     : ep->write_cntr;

	if (err) {
		if (ep->tx_cq)
			ntx_cq_push_err(ep->tx_cq, req->context, req->cq_flags,
					0, NULL, 0, 0, 0, err,
					FI_ADDR_NOTAVAIL, NULL);
		if (c)
			ntx_cntr_inc_err(c);
		return;
	}
	if (ep->tx_cq && !req->silent &&
	    ntx_comp_wanted(ep->tx_selective, req->flags))
		ntx_cq_push(ep->tx_cq, req->context, req->cq_flags, 0, NULL, 0,
			    0, FI_ADDR_NOTAVAIL);
	if (c)
		ntx_cntr_inc(c);
}
