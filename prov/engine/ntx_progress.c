/*
 * Progress of one endpoint: poll the back end (which runs the protocol
 * callbacks), resume backlogs, check the liveness of peers that owe us
 * something, and reap failed connections.
 */
#include "config.h"

#include "ntx/ntx_engine.h"

/* Peer liveness and back-end housekeeping, every FI_NTX_PEER_CHECK_MS. */
static void ntx_ep_check_peers(struct ntx_ep *ep)
{
	uint64_t now;

	/* the clock is read on one progress call in 64: off the fast path */
	if (++ep->progress_calls & 63)
		return;
	now = ntx_now_ns();
	if (now < ep->next_check_ns)
		return;
	ep->next_check_ns = now + (uint64_t)ntx_params.peer_check_ms * 1000000;
	ep->be_ops->check_peers(ep->be);
}

void ntx_ep_progress(struct ntx_ep *ep)
{
	struct ntx_list *it, *tmp;

	ep->be_ops->poll(ep->be);
	ntx_list_foreach_safe(&ep->vcs, it, tmp) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (!ntx_list_empty(&vc->backlog))
			ntx_vc_pump(vc);
	}
	ntx_ep_check_peers(ep);
	if (!ep->reap)
		return;
	ep->reap = false;
	ntx_list_foreach_safe(&ep->vcs, it, tmp) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (vc->state == NTX_VC_ERROR)
			ntx_vc_destroy(vc);
	}
}
