/*
 * Shared contexts (DESIGN §3, "Shared contexts"). A shared receive
 * context is an engine endpoint without back ends: receives posted to it
 * wait in its tag matching, and every endpoint bound to it matches what
 * arrives there and takes its lock, so the context's state is touched
 * under one lock. A completion goes to the CQ of the endpoint the message
 * arrived at. A shared transmit context is a token: each endpoint bound
 * to it keeps sending through its own queues, which is what fi_endpoint(3)
 * asks of operations posted to it (order per endpoint, completions to the
 * endpoint's CQ).
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

struct ntx_stx {
	struct fid_stx stx;
	struct ntx_domain *domain;
	atomic_int ref; /* endpoints bound */
};

/* ---- shared receive contexts -------------------------------------------- */

static int ntx_srx_close(struct fid *fid)
{
	struct ntx_ep *srx = ntx_container_of(fid, struct ntx_ep, ep.fid);

	if (atomic_load(&srx->ref)) {
		NTX_WARN(FI_LOG_EP_CTRL, "shared receive context still bound\n");
		return -FI_EBUSY;
	}
	ntx_proto_unexp_fini(srx);
	ntx_req_fini(srx);
	ntx_idtab_fini(&srx->vc_tab);
	pthread_mutex_destroy(&srx->lock);
	ntx_ref_put(&srx->domain->ref);
	free(srx);
	return 0;
}

static int ntx_srx_control(struct fid *fid, int command, void *arg)
{
	struct ntx_ep *srx = ntx_container_of(fid, struct ntx_ep, ep.fid);
	uint64_t *flags = arg;

	if (command != FI_GETOPSFLAG && command != FI_SETOPSFLAG)
		return -FI_ENOSYS;
	if (!flags)
		return -FI_EINVAL;
	if (command == FI_GETOPSFLAG)
		*flags = srx->rx_op_flags;
	else
		srx->rx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
	return 0;
}

static struct fi_ops ntx_srx_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_srx_close,
	.bind = ntx_no_bind,
	.control = ntx_srx_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_ep ntx_srx_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ntx_ep_cancel,
	.getopt = ntx_no_getopt,
	.setopt = ntx_no_setopt,
	.tx_ctx = ntx_no_tx_ctx,
	.rx_ctx = ntx_no_rx_ctx,
	.rx_size_left = ntx_no_rx_size_left,
	.tx_size_left = ntx_no_tx_size_left,
};

int ntx_srx_open(struct fid_domain *domain, struct fi_rx_attr *attr,
		 struct fid_ep **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct fi_rx_attr rx = attr ? *attr : ntx_rx_attr;
	struct fi_info info = { .caps = FI_MSG | FI_TAGGED | FI_RECV |
					FI_MULTI_RECV | FI_DIRECTED_RECV,
				.rx_attr = &rx };
	struct ntx_ep *srx;

	if (!out)
		return -FI_EINVAL;
	if (rx.caps & ~ntx_rx_attr.caps) {
		NTX_WARN(FI_LOG_EP_CTRL, "shared receive context caps "
			 "0x%llx not supported\n", (unsigned long long)rx.caps);
		return -FI_EINVAL;
	}
	srx = calloc(1, sizeof(*srx));
	if (!srx)
		return -FI_ENOMEM;
	ntx_ep_init(srx, dom, &info);
	srx->is_srx = true;
	srx->enabled = true; /* receives may be posted at once */
	ntx_ep_set_paths(srx);
	srx->ep.fid.fclass = FI_CLASS_SRX_CTX;
	srx->ep.fid.context = context;
	srx->ep.fid.ops = &ntx_srx_fi_ops;
	srx->ep.ops = &ntx_srx_ep_ops;
	srx->ep.cm = NULL;
	srx->ep.msg = &ntx_msg_ops;
	srx->ep.tagged = &ntx_tagged_ops;
	ntx_prefix_ep_init(srx, &info);
	ntx_ref_get(&dom->ref);
	*out = &srx->ep;
	return 0;
}

/* ---- shared transmit contexts ------------------------------------------- */

static int ntx_stx_close(struct fid *fid)
{
	struct ntx_stx *stx = ntx_container_of(fid, struct ntx_stx, stx.fid);

	if (atomic_load(&stx->ref)) {
		NTX_WARN(FI_LOG_EP_CTRL, "shared transmit context still "
			 "bound\n");
		return -FI_EBUSY;
	}
	ntx_ref_put(&stx->domain->ref);
	free(stx);
	return 0;
}

static struct fi_ops ntx_stx_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_stx_close,
	.bind = ntx_no_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

int ntx_stx_open(struct fid_domain *domain, struct fi_tx_attr *attr,
		 struct fid_stx **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_stx *stx;

	if (!out)
		return -FI_EINVAL;
	if (attr && (attr->caps & ~ntx_tx_attr.caps)) {
		NTX_WARN(FI_LOG_EP_CTRL, "shared transmit context caps "
			 "0x%llx not supported\n",
			 (unsigned long long)attr->caps);
		return -FI_EINVAL;
	}
	stx = calloc(1, sizeof(*stx));
	if (!stx)
		return -FI_ENOMEM;
	stx->domain = dom;
	stx->stx.fid.fclass = FI_CLASS_STX_CTX;
	stx->stx.fid.context = context;
	stx->stx.fid.ops = &ntx_stx_fi_ops;
	ntx_ref_get(&dom->ref);
	*out = &stx->stx;
	return 0;
}

/* ---- binding ------------------------------------------------------------ */

int ntx_ctx_bind(struct ntx_ep *ep, struct fid *ctx, uint64_t flags)
{
	if (flags)
		return -FI_EINVAL;
	if (ctx->fclass == FI_CLASS_STX_CTX) {
		struct ntx_stx *stx = ntx_container_of(ctx, struct ntx_stx,
						       stx.fid);

		if (ep->stx || stx->domain != ep->domain)
			return -FI_EINVAL;
		ep->stx = ctx;
		ntx_ref_get(&stx->ref);
		return 0;
	} else {
		struct ntx_ep *srx = ntx_container_of(ctx, struct ntx_ep,
						      ep.fid);

		if (ep->rx != ep || !srx->is_srx || srx->domain != ep->domain)
			return -FI_EINVAL;
		/* nothing of ours ran yet: from now on the context's lock
		 * and tag matching are ours */
		ep->rx = srx;
		ep->lockp = srx->lockp;
		ntx_ref_get(&srx->ref);
		ntx_ep_lock(ep);
		srx->srx_report = ep;
		ntx_ep_unlock(ep);
		return 0;
	}
}

void ntx_ctx_unbind(struct ntx_ep *ep)
{
	struct ntx_ep *srx = ep->rx;

	if (ep->stx)
		ntx_ref_put(&ntx_container_of(ep->stx, struct ntx_stx,
					      stx.fid)->ref);
	if (srx == ep)
		return;
	ntx_ep_lock(srx);
	if (srx->srx_report == ep)
		srx->srx_report = NULL;
	ntx_ep_unlock(srx);
	ntx_ref_put(&srx->ref);
}
