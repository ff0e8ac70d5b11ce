/*
 * Domain progress: every endpoint of a domain, its arming for sleep and
 * the wait sets that FI_GETWAIT gives out (DESIGN §3, progress).
 */
#include "config.h"
#include <sys/epoll.h>
#include <unistd.h>

#include "ntx/ntx_engine.h"

/* Domain lock held. */
void ntx_domain_poll(struct ntx_domain *dom)
{
	struct ntx_list *it;

	ntx_assert_domain_locked(dom);
	if (dom->progress_busy)
		return;
	dom->progress_busy = true;
	ntx_list_foreach(&dom->eps, it)
		ntx_ep_poll(ntx_container_of(it, struct ntx_ep, dom_entry));
	dom->progress_busy = false;
}

void ntx_domain_note_poll(struct ntx_domain *dom)
{
	if (dom->auto_progress) /* the helper stays away while we poll */
		atomic_store_explicit(&dom->app_poll_ns, ntx_now_ns(),
				      memory_order_relaxed);
}

/* Domain lock held. */
void ntx_domain_progress(struct ntx_domain *dom)
{
	ntx_assert_domain_locked(dom);
	ntx_domain_note_poll(dom);
	ntx_domain_poll(dom);
}

/* Domain lock held: the endpoint list. */
void ntx_domain_arm(struct ntx_domain *dom, bool arm)
{
	struct ntx_list *it;

	ntx_assert_domain_locked(dom);
	ntx_list_foreach(&dom->eps, it) {
		ntx_ep_arm(ntx_container_of(it, struct ntx_ep, dom_entry), arm);
	}
}

/* Domain lock held: the endpoint list. */
int ntx_domain_wait_fds(struct ntx_domain *dom, int *fds, int max)
{
	struct ntx_list *it;
	int n = 0;

	ntx_assert_domain_locked(dom);
	ntx_list_foreach(&dom->eps, it) {
		struct ntx_ep *ep = ntx_container_of(it, struct ntx_ep,
						     dom_entry);
		for (int i = 0; i < NTX_BE_MAX && n < max; i++)
			if (ep->be[i].ops)
				fds[n++] = ep->be[i].ops->wait_fd(ep->be[i].be);
	}
	return n;
}

int ntx_domain_wait_set(struct ntx_domain *dom, struct ntx_signal *sig,
			int *epfd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fds[64], n, ret = 0;

	ntx_domain_lock(dom);
	if (*epfd >= 0)
		goto unlock;
	if (dom->nwait_sets == 16 ||
	    (*epfd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
		*epfd = -1;
		ret = -FI_ENOMEM;
		goto unlock;
	}
	ntx_signal_arm(sig);
	epoll_ctl(*epfd, EPOLL_CTL_ADD, sig->fd, &ev);
	n = ntx_domain_wait_fds(dom, fds, 64);
	for (int i = 0; i < n; i++)
		epoll_ctl(*epfd, EPOLL_CTL_ADD, fds[i], &ev);
	dom->wait_sets[dom->nwait_sets++] = *epfd;
unlock:
	ntx_domain_unlock(dom);
	return ret;
}

/* Domain lock held: the wait sets. */
void ntx_domain_wait_set_add(struct ntx_domain *dom, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN };

	ntx_assert_domain_locked(dom);
	for (int i = 0; i < dom->nwait_sets; i++)
		epoll_ctl(dom->wait_sets[i], EPOLL_CTL_ADD, fd, &ev);
}

void ntx_domain_wait_set_close(struct ntx_domain *dom, int epfd)
{
	if (epfd < 0)
		return;
	ntx_domain_lock(dom);
	for (int i = 0; i < dom->nwait_sets; i++)
		if (dom->wait_sets[i] == epfd)
			dom->wait_sets[i] = dom->wait_sets[--dom->nwait_sets];
	ntx_domain_unlock(dom);
	close(epfd);
}
