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
	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops)
			ep->be[i].ops->check_peers(ep->be[i].be);
}

struct ntx_ep_be *ntx_ep_be_for(struct ntx_ep *ep, const struct ntx_addr *a)
{
	bool local = a->host == ntx_host_id();
	bool net = ep->be[NTX_BE_TCP].ops && a->ip4 && a->port;

	/* FI_NTX_LOCAL_VIA_NETWORK sends same-host peers through the
	 * network where both sides have one; a peer of the shm domain has
	 * none and is still reached through the window */
	if (local && ep->be[NTX_BE_SHM].ops && !(ep->local_via_network && net))
		return &ep->be[NTX_BE_SHM];
	if (net)
		return &ep->be[NTX_BE_TCP];
	return NULL;
}

void ntx_ep_poll(struct ntx_ep *ep)
{
	ntx_ep_lock(ep);
	ntx_ep_progress(ep);
	ntx_ep_unlock(ep);
}

void ntx_ep_progress(struct ntx_ep *ep)
{
	struct ntx_list *it, *tmp;

	if (ep->progress_busy) /* a completion callback calling back in */
		return;
	ep->progress_busy = true;

	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops)
			ep->be[i].ops->poll(ep->be[i].be);
	ntx_list_foreach_safe(&ep->vcs, it, tmp) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (!ntx_list_empty(&vc->backlog))
			ntx_vc_pump(vc);
	}
	ntx_ep_check_peers(ep);
	if (ep->reap) {
		ep->reap = false;
		ntx_list_foreach_safe(&ep->vcs, it, tmp) {
			struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc,
							     entry);

			if (vc->state == NTX_VC_ERROR)
				ntx_vc_destroy(vc);
		}
	}
	ep->progress_busy = false;
}
