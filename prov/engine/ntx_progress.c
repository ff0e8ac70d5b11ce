/*
 * Progress of one endpoint: poll the back end (which runs the protocol
 * callbacks), resume backlogs, check the liveness of peers that owe us
 * something, and reap failed connections.
 */
#include "config.h"
#include <poll.h>
#include <stdlib.h>

#include "ntx/ntx_engine.h"

/* Peer liveness and back-end housekeeping, every FI_NTX_PEER_CHECK_MS. */
void ntx_ep_check_peers_now(struct ntx_ep *ep)
{
	uint64_t now = ntx_now_ns();

	if (now < ep->next_check_ns)
		return;
	ep->next_check_ns = now + (uint64_t)ntx_params.peer_check_ms * 1000000;
	if (ep->auth_vcs)
		ntx_auth_check(ep, now);
	for (int i = 0; i < NTX_BE_MAX; i++)
		if (ep->be[i].ops)
			ep->be[i].ops->check_peers(ep->be[i].be);
}

struct ntx_ep_be *ntx_ep_be_for(struct ntx_ep *ep, const struct ntx_addr *a)
{
	bool local = a->host == ntx_host_id();
	bool net = ep->be[NTX_BE_NET].ops && a->ip4 && a->port;

	/* FI_NTX_LOCAL_VIA_NETWORK sends same-host peers through the
	 * network where both sides have one; a peer of the shm domain has
	 * none and is still reached through the window */
	if (local && ep->be[NTX_BE_SHM].ops && !(ep->local_via_network && net))
		return &ep->be[NTX_BE_SHM];
	if (net)
		return &ep->be[NTX_BE_NET];
	return NULL;
}

void ntx_ep_arm_locked(struct ntx_ep *ep, bool arm)
{
	ntx_assert_ep_locked(ep);
	ep->net_skip = 0; /* the re-check after arming looks everywhere */
	for (int i = 0; i < NTX_BE_MAX; i++) {
		if (!ep->be[i].ops)
			continue;
		if (arm)
			ep->be[i].ops->arm(ep->be[i].be);
		else
			ep->be[i].ops->disarm(ep->be[i].be);
	}
}

void ntx_ep_arm(struct ntx_ep *ep, bool arm)
{
	ntx_ep_lock(ep);
	ep->armed = false; /* an explicit arm or disarm replaces trywait's */
	ntx_ep_arm_locked(ep, arm);
	ntx_ep_unlock(ep);
}

void ntx_ep_poll(struct ntx_ep *ep)
{
	ntx_ep_lock(ep);
	ntx_ep_progress(ep);
	ntx_ep_unlock(ep);
}

/* The VCs with a backlog: send what their rings take now. */
void ntx_ep_pump(struct ntx_ep *ep)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&ep->busy_vcs, it, tmp) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc,
						     busy_entry);

		ntx_vc_pump(vc);
		if (ntx_list_empty(&vc->backlog) && !ntx_auth_tx_pending(vc)) {
			vc->busy = false;
			ntx_list_remove(&vc->busy_entry);
		}
	}
}

/* Disconnects the VCs that failed. */
void ntx_ep_reap(struct ntx_ep *ep)
{
	struct ntx_list *it, *tmp;

	ep->reap = false;
	ntx_list_foreach_safe(&ep->vcs, it, tmp) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (vc->doom)
			ntx_vc_fail(vc, vc->doom);
		if (vc->state == NTX_VC_ERROR)
			ntx_vc_destroy(vc);
	}
}

void ntx_ep_progress(struct ntx_ep *ep)
{
	ntx_ep_progress_inline(ep);
}

/* ---- scopes: the endpoints of one CQ or counter ------------------------------ */

/* Returns which lock it took: an MR bind may widen the scope meanwhile */
static bool ntx_scope_lock(struct ntx_domain *d, struct ntx_scope *s)
{
	bool whole = s->whole_domain;

	if (whole)
		ntx_domain_lock(d);
	else
		ntx_cmutex_lock_rank(d, &s->lock, NTX_LOCK_SCOPE);
	return whole;
}

static void ntx_scope_unlock(struct ntx_domain *d, struct ntx_scope *s,
			     bool whole)
{
	if (whole)
		ntx_domain_unlock(d);
	else
		ntx_cmutex_unlock(d, &s->lock);
}

/* The scope's endpoints, or every endpoint of the domain, as an array
 * (no cap: an array the size of the scope); scope locked. *eps is
 * s->eps itself for a scope of its own, else an allocation the caller
 * frees with ntx_scope_eps_put. */
static size_t ntx_scope_eps(struct ntx_domain *d, struct ntx_scope *s,
			    bool whole, struct ntx_ep ***eps)
{
	struct ntx_list *it;
	size_t n = 0, cap = 0;

	if (whole)
		ntx_assert_domain_locked(d);
	else
		ntx_assert_cmutex_locked(d, &s->lock);
	if (!whole) {
		*eps = s->eps;
		return s->n;
	}
	ntx_list_foreach(&d->eps, it)
		cap++;
	*eps = cap ? malloc(cap * sizeof(**eps)) : NULL;
	if (!*eps)
		return 0;
	ntx_list_foreach(&d->eps, it)
		(*eps)[n++] = ntx_container_of(it, struct ntx_ep, dom_entry);
	return n;
}

static void ntx_scope_eps_put(struct ntx_scope *s, struct ntx_ep **eps)
{
	if (eps != s->eps)
		free(eps);
}

void ntx_scope_progress(struct ntx_domain *d, struct ntx_scope *s)
{
	struct ntx_list *it;
	bool whole;

	if (d->ep_lockless && !s->whole_domain) {
		ntx_scope_progress_lockless(s);
		return;
	}
	ntx_domain_note_poll(d);
	whole = ntx_scope_lock(d, s);
	if (whole) {
		ntx_list_foreach(&d->eps, it)
			ntx_ep_poll(ntx_container_of(it, struct ntx_ep,
						     dom_entry));
	} else {
		for (size_t i = 0; i < s->n; i++)
			ntx_ep_poll(s->eps[i]);
	}
	ntx_scope_unlock(d, s, whole);
}

void ntx_scope_sleep(struct ntx_domain *d, struct ntx_scope *s,
		     struct ntx_signal *sig, bool (*ready)(void *arg),
		     void *arg, int timeout_ms)
{
	struct ntx_ep **eps;
	struct pollfd *pfd = NULL;
	size_t n, nfd = 1;
	bool whole;

	atomic_fetch_add(&sig->sleepers, 1);
	whole = ntx_scope_lock(d, s);
	n = ntx_scope_eps(d, s, whole, &eps);
	for (size_t i = 0; i < n; i++)
		ntx_ep_arm(eps[i], true);
	/* re-check after arming: anything that arrived before a sender saw
	 * the arm is found here, anything after writes a wait fd */
	for (size_t i = 0; i < n; i++)
		ntx_ep_poll(eps[i]);
	if (ready(arg)) {
		nfd = 0;
	} else {
		pfd = calloc(1 + n * NTX_BE_MAX, sizeof(*pfd));
		for (size_t i = 0; pfd && i < n; i++)
			for (int b = 0; b < NTX_BE_MAX; b++)
				if (eps[i]->be[b].ops)
					pfd[nfd++].fd = eps[i]->be[b].ops->wait_fd(
						eps[i]->be[b].be);
	}
	ntx_scope_eps_put(s, eps);
	ntx_scope_unlock(d, s, whole);
	if (nfd && pfd) { /* without memory the caller polls again */
		pfd[0].fd = sig->fd;
		for (size_t i = 0; i < nfd; i++)
			pfd[i].events = POLLIN;
		poll(pfd, (nfds_t)nfd, timeout_ms);
	}
	free(pfd);
	whole = ntx_scope_lock(d, s);
	n = ntx_scope_eps(d, s, whole, &eps);
	for (size_t i = 0; i < n; i++)
		ntx_ep_arm(eps[i], false);
	ntx_scope_eps_put(s, eps);
	ntx_scope_unlock(d, s, whole);
	atomic_fetch_sub(&sig->sleepers, 1);
}

int ntx_scope_trywait(struct ntx_domain *d, struct ntx_scope *s,
		      struct ntx_signal *sig, bool (*ready)(void *arg),
		      void *arg)
{
	struct ntx_ep **eps;
	size_t n;
	bool whole;
	int ret = 0;

	ntx_signal_arm(sig);
	ntx_domain_note_poll(d);
	whole = ntx_scope_lock(d, s);
	n = ntx_scope_eps(d, s, whole, &eps);
	for (size_t i = 0; i < n; i++)
		ntx_ep_poll(eps[i]);
	/* arm, then re-check; the endpoint's next progress disarms */
	for (size_t i = 0; i < n; i++)
		ntx_ep_arm(eps[i], true);
	for (size_t i = 0; i < n; i++)
		ntx_ep_poll(eps[i]);
	for (size_t i = 0; i < n; i++) {
		ntx_ep_lock(eps[i]);
		eps[i]->armed = true;
		ntx_ep_unlock(eps[i]);
	}
	ntx_scope_eps_put(s, eps);
	if (ready(arg))
		ret = -FI_EAGAIN;
	else
		ntx_signal_drain(sig);
	ntx_scope_unlock(d, s, whole);
	return ret;
}
