/*
 * What peers' unexpected messages may make a receive context hold: one
 * peer at most FI_NTX_PEER_UNEXP_MAX bytes, all its live peers together
 * at most FI_NTX_EP_UNEXP_MAX; past that budget a peer over its fair
 * share fails its own connection and the others go on (DESIGN §7,
 * "Limits").
 */
#include "config.h"
#include <assert.h>

#include "ntx/ntx_engine.h"

/* The live peer whose unexpected messages hold the most at rx; NULL if
 * none holds any. A walk of the holders, on an overflow only. */
static struct ntx_vc *ntx_unexp_top(struct ntx_ep *rx)
{
	struct ntx_vc *top = NULL;
	struct ntx_list *it;

	ntx_list_foreach(&rx->unexp_vcs, it) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc,
						     unexp_entry);

		if (!top || vc->unexp_bytes > top->unexp_bytes)
			top = vc;
	}
	return top;
}

void ntx_unexp_off_budget(struct ntx_vc *vc)
{
	struct ntx_ep *rx = vc->ep->rx;

	if (vc->unexp_off_budget)
		return;
	vc->unexp_off_budget = true;
	if (!vc->unexp_bytes)
		return;
	rx->unexp_bytes -= vc->unexp_bytes;
	rx->unexp_peers--;
	ntx_list_remove(&vc->unexp_entry);
}

/* The budget would be passed by cost more bytes of vc: false when vc is
 * over its share of it (the budget over the live peers that hold some,
 * vc counted); otherwise the largest holder, over its share whenever vc
 * is within its own (the others hold more than the rest of the budget
 * between fewer peers), is doomed and leaves the budget, until cost
 * fits. It is failed from progress, not here: this is another peer's
 * packet, and our caller may hold its requests. Its unexpected messages
 * are dropped now, not kept for its failure: a back end may read a long
 * while before progress reaps it (a tcp read drains its socket), and
 * what it held must not add to what the others may hold. */
static bool ntx_unexp_over(struct ntx_vc *vc, size_t cost)
{
	struct ntx_ep *rx = vc->ep->rx;
	size_t max = ntx_params.ep_unexp_max;

	while (rx->unexp_bytes + cost > max) {
		uint32_t n = rx->unexp_peers + !vc->unexp_bytes;
		struct ntx_vc *top;

		if (vc->unexp_bytes + cost > max / n)
			return false;
		top = ntx_unexp_top(rx);
		if (!top || top == vc) /* cannot be, by the above */
			return false;
		NTX_WARN(FI_LOG_EP_DATA, "pid %u has %zu bytes of unexpected "
			 "messages waiting, over its share of "
			 "FI_NTX_EP_UNEXP_MAX among %u peers: connection "
			 "closed\n", top->peer.pid, top->unexp_bytes, n);
		if (!top->doom)
			top->doom = -FI_ENOSPC;
		top->ep->reap = true;
		ntx_unexp_off_budget(top);
		ntx_proto_unexp_drop(top);
	}
	return true;
}

bool ntx_unexp_admit(struct ntx_vc *vc, size_t cost)
{
	struct ntx_ep *rx = vc->ep->rx;

	if (vc->unexp_off_budget) { /* doomed by the budget, not failed yet */
		ntx_vc_fail(vc, vc->doom ? vc->doom : -FI_ENOSPC);
		return false;
	}
	if (vc->unexp_bytes + cost > ntx_params.peer_unexp_max) {
		NTX_WARN(FI_LOG_EP_DATA, "pid %u has %zu bytes of unexpected "
			 "messages waiting (FI_NTX_PEER_UNEXP_MAX): connection "
			 "closed\n", vc->peer.pid, vc->unexp_bytes);
		ntx_vc_fail(vc, -FI_ENOSPC);
		return false;
	}
	if (rx->unexp_bytes + cost > ntx_params.ep_unexp_max &&
	    !ntx_unexp_over(vc, cost)) {
		NTX_WARN(FI_LOG_EP_DATA, "pid %u has %zu bytes of unexpected "
			 "messages waiting, over its share of "
			 "FI_NTX_EP_UNEXP_MAX (%zu bytes held by %u peers): "
			 "connection closed\n", vc->peer.pid, vc->unexp_bytes,
			 rx->unexp_bytes, rx->unexp_peers);
		ntx_vc_fail(vc, -FI_ENOSPC);
		return false;
	}
	return true;
}

void ntx_unexp_charge(struct ntx_vc *vc, size_t cost)
{
	struct ntx_ep *rx = vc->ep->rx;

	assert(!vc->unexp_off_budget); /* ntx_unexp_admit refuses it */
	if (!vc->unexp_bytes) {
		ntx_list_insert_tail(&rx->unexp_vcs, &vc->unexp_entry);
		rx->unexp_peers++;
	}
	rx->unexp_bytes += cost;
	vc->unexp_bytes += cost;
}

void ntx_unexp_refund(struct ntx_vc *vc, size_t cost)
{
	struct ntx_ep *rx;

	vc->unexp_bytes -= cost;
	if (vc->unexp_off_budget) /* a zombie's endpoint may be closing */
		return;
	rx = vc->ep->rx;
	rx->unexp_bytes -= cost;
	if (!vc->unexp_bytes) {
		ntx_list_remove(&vc->unexp_entry);
		rx->unexp_peers--;
	}
}
