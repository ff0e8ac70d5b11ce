/*
 * The pci window (DESIGN §4, "The pci window"): the ring protocol of
 * ntx_ntb_{conn,rx,tx}.c in a slice of a region that several machines
 * share (ntx_ntb_region.c: an ivshmem device's BAR2, or a host's view of
 * the same memory). One domain per region; an endpoint's window is the
 * slice it claimed, its name the region's id (ip4) and the slice (port).
 * No single copy across machines: rendezvous data streams through the
 * rings. Liveness is the peer's heartbeat in the directory; the doorbell
 * the region's, where this machine can receive one, else a sleeping
 * endpoint polls every millisecond.
 */
#include "config.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ntx_ntb_int.h"

#define NTX_PCI_POLL_NS 1000000 /* a guest's sleep without a doorbell */

/* ---- our window ------------------------------------------------------------- */

/* The window header, from our name: the pci name's ip4 and port are the
 * region's, the rest the engine's (fi_setname makes it final). Senders
 * fence themselves (no membarrier across machines); the wake key is our
 * doorbell, the ivshmem peer ID. */
static void ntx_pci_hdr_write(struct ntx_shm_ep *be)
{
	ntx_ntb_hdr_fill(be, 0, ntx_rgn_bell_id(be->rgn));
}

/* The most slots (up to FI_NTX_MAX_PEERS) whose rings fit a slice. */
static int ntx_pci_geom(struct ntx_shm_ep *be)
{
	uint32_t lines = (uint32_t)(ntx_params.ring_size / NTX_CACHELINE);
	uint32_t n = (uint32_t)ntx_params.max_peers;

	be->win.max_payload = (uint32_t)ntx_params.eager_max;
	while (ntx_ring_max_payload(lines) < be->win.max_payload)
		lines += 2 * NTX_RING_ALIGN;
	for (; n; n--) {
		ntx_win_geom_init(&be->win.g, n, lines, 0);
		if (be->win.g.size <= NTX_RGN_SLICE)
			return 0;
	}
	NTX_WARN(FI_LOG_EP_CTRL, "a ring of %u bytes does not fit a %u-byte "
		 "slice\n", lines * NTX_CACHELINE, NTX_RGN_SLICE);
	return -FI_EINVAL;
}

static int ntx_pci_create(struct ntx_shm_ep *be)
{
	int ret = ntx_pci_geom(be);

	if (ret)
		return ret;
	ret = ntx_rgn_claim(be->rgn, &be->addr, &be->rgn_idx);
	if (ret)
		return ret;
	be->win.base = ntx_rgn_slice(be->rgn, be->rgn_idx);
	memset(be->win.base, 0, be->win.g.size);
	ntx_pci_hdr_write(be);
	be->fd = -1;
	be->addr.ip4 = ntx_rgn_id(be->rgn);
	be->addr.port = (uint16_t)(be->rgn_idx + 1);
	atomic_store_explicit(&ntx_win_hdr(&be->win)->state, NTX_WIN_OPEN,
			      memory_order_release);
	return 0;
}

static void ntx_pci_destroy(struct ntx_shm_ep *be)
{
	ntx_rgn_release(be->rgn, be->rgn_idx);
}

/* ---- peers ------------------------------------------------------------------ */

/* The slice the name points to, when its header names that very
 * endpoint and its geometry fits the slice. The header is copied before
 * it is checked: every machine attached can write it at any time. */
/* The name is of this region and points to one of its slices. */
static bool ntx_pci_in_region(const struct ntx_rgn *r, const struct ntx_addr *a)
{
	return a->ip4 == ntx_rgn_id(r) && a->port &&
	       (uint32_t)a->port - 1 < ntx_rgn_nents(r);
}

static int ntx_pci_map_rgn(struct ntx_rgn *r, const struct ntx_addr *peer,
			   struct ntx_win *w)
{
	uint32_t idx = (uint32_t)peer->port - 1;
	struct ntx_win_hdr h;
	struct ntx_rgn_ent e;
	uint8_t *base;

	if (!ntx_pci_in_region(r, peer))
		return -FI_EADDRNOTAVAIL;
	base = ntx_rgn_slice(r, idx);
	memcpy(&h, base, sizeof(h));
	memcpy(&e, ntx_rgn_ent(r, idx), sizeof(e));
	if (!(e.claim & 1) || e.host != peer->host ||
	    h.magic != NTX_WIN_MAGIC || h.version != NTX_WIN_VERSION ||
	    h.epoch != peer->epoch || h.pid != peer->pid ||
	    h.ep_id != peer->ep_id || h.service != peer->service ||
	    h.nslots == 0 || !ntx_ring_lines_valid(h.ring_lines) ||
	    h.max_payload < 4096 ||
	    h.max_payload > ntx_ring_max_payload(h.ring_lines) ||
	    h.size > NTX_RGN_SLICE || h.bulk_size) /* no bulk areas */
		return -FI_EADDRNOTAVAIL;
	ntx_win_geom_init(&w->g, h.nslots, h.ring_lines, 0);
	if (w->g.size != h.size)
		return -FI_EADDRNOTAVAIL;
	w->base = base;
	w->max_payload = h.max_payload;
	w->flags = 0; /* whatever it says: we fence */
	w->wake_key = h.wake_key;
	return 0;
}

/* The window interface's map has no endpoint: the region of the one pci
 * domain this process maps a window of at the time (ntx_pci_peer_get). */
static int ntx_pci_map(const struct ntx_addr *peer, int pidfd,
		       struct ntx_win *w)
{
	(void)peer;
	(void)pidfd;
	(void)w;
	return -FI_EOPNOTSUPP;
}

static void ntx_pci_unmap(struct ntx_win *w)
{
	(void)w; /* the region stays mapped */
}

static int ntx_pci_peer_get(struct ntx_shm_conn *c)
{
	struct ntx_shm_ep *be = c->be;
	int ret = ntx_pci_map_rgn(be->rgn, &c->peer, &c->pwin);

	if (ret) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s: no endpoint of that name in "
			 "slice %u\n", be->wops->name, (unsigned)c->peer.port);
		return ret;
	}
	c->pw = NULL;
	c->bell_id = (uint16_t)c->pwin.wake_key;
	ntx_rgn_look(be->rgn, (uint32_t)c->peer.port - 1, &c->seen);
	c->watch = NTX_WATCH_PROC; /* the timer checks its beat */
	if (!be->proc_watched++)
		ntx_ntb_timer_set(be, true);
	return 0;
}

static void ntx_pci_unwatch(struct ntx_shm_conn *c)
{
	if (c->watch == NTX_WATCH_PROC && !--c->be->proc_watched)
		ntx_ntb_timer_set(c->be, false);
	c->watch = NTX_WATCH_NONE;
}

static void ntx_pci_peer_put(struct ntx_shm_conn *c)
{
	(void)c;
}

static bool ntx_pci_peer_dead(struct ntx_shm_conn *c)
{
	return !ntx_rgn_alive(c->be->rgn, (uint32_t)c->peer.port - 1,
			      &c->seen);
}

static bool ntx_pci_peer_ok(const struct ntx_shm_ep *be,
			    const struct ntx_addr *a)
{
	return ntx_pci_in_region(be->rgn, a);
}

/* ---- waiting ------------------------------------------------------------------ */

/* Our doorbell (edge-triggered in the wait set: endpoints of a process
 * share the region's eventfd, and none may take another's wake-up) and
 * the timer. */
static void ntx_pci_wait_take(struct ntx_shm_ep *be, bool drain_wake)
{
	struct epoll_event ev[8];
	int n = epoll_wait(be->epfd, ev, 8, 0);

	(void)drain_wake;
	for (int i = 0; i < n; i++)
		if (ev[i].data.ptr == &be->timer)
			ntx_ntb_timer_tick(be);
}

/* A guest that cannot take a doorbell polls while it sleeps. */
static void ntx_pci_armed(struct ntx_shm_ep *be, bool on)
{
	struct itimerspec its = { 0 };

	if (ntx_rgn_bell_fd(be->rgn) >= 0)
		return;
	ntx_ntb_timer_set(be, on || be->proc_watched > 0); /* opens it */
	if (!on || be->timer < 0)
		return;
	its.it_interval.tv_nsec = NTX_PCI_POLL_NS;
	its.it_value = its.it_interval;
	timerfd_settime(be->timer, 0, &its, NULL);
}

static void ntx_pci_ring_zero(struct ntx_shm_ep *be, uint32_t slot)
{
	memset(be->win.base + be->win.g.ring_off +
		       (size_t)slot * be->win.g.ring_size,
	       0, be->win.g.ring_size);
}

static void ntx_pci_wake(struct ntx_shm_conn *c)
{
	ntx_rgn_ring(c->be->rgn, c->bell_id);
}

static void ntx_pci_fence_peers(void)
{
	atomic_thread_fence(memory_order_seq_cst);
}

const struct ntx_ntb_win_ops ntx_ntb_win_pci_ops = {
	.name = "pci",
	.create = ntx_pci_create,
	.destroy = ntx_pci_destroy,
	.map = ntx_pci_map,
	.unmap = ntx_pci_unmap,
	.peer_get = ntx_pci_peer_get,
	.unwatch = ntx_pci_unwatch,
	.peer_put = ntx_pci_peer_put,
	.wait_take = ntx_pci_wait_take,
	.ring_zero = ntx_pci_ring_zero,
	.wake = ntx_pci_wake,
	.fence_peers = ntx_pci_fence_peers,
	.peer_ok = ntx_pci_peer_ok,
	.peer_dead = ntx_pci_peer_dead,
	.armed = ntx_pci_armed,
};

/* ---- the endpoint ------------------------------------------------------------- */

/* The wait set: our doorbell, edge-triggered (or an eventfd nobody
 * writes, where there is none). */
static int ntx_pci_wait_open(struct ntx_shm_ep *be)
{
	int bell = ntx_rgn_bell_fd(be->rgn), ret;

	be->wake = bell >= 0 ? dup(bell)
			     : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (be->wake < 0)
		return -FI_ENOMEM;
	ret = ntx_ntb_wait_open(be, EPOLLIN | EPOLLET);
	if (ret)
		close(be->wake);
	return ret;
}

static int ntx_pci_open(struct ntx_be_ep **out, const struct ntx_addr *want,
			const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_shm_ep *be = ntx_ntb_ep_new(&ntx_ntb_pci_ops,
					       &ntx_ntb_win_pci_ops, cb, want);
	int ret = -FI_ENODEV;

	if (!be)
		return -FI_ENOMEM;
	be->rgn = dev ? ntx_rgn_get(dev) : NULL;
	if (!be->rgn)
		goto free_be;
	ret = ntx_pci_wait_open(be);
	if (ret)
		goto put_rgn;
	ret = be->wops->create(be);
	if (ret)
		goto close_wait;
	ret = ntx_ntb_slots_alloc(be);
	if (ret)
		goto destroy;
	*out = &be->head;
	return 0;
destroy:
	be->wops->destroy(be);
close_wait:
	close(be->epfd);
	close(be->wake);
put_rgn:
	ntx_rgn_put(be->rgn);
free_be:
	free(be);
	return ret;
}

static void ntx_pci_close(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	struct ntx_rgn *r = be->rgn;

	ntx_ntb_ep_end(be);
	ntx_ntb_ep_free(be);
	ntx_rgn_put(r);
}

/* Our part of the endpoint's name: the region and the slice. */
static void ntx_pci_getname(struct ntx_be_ep *bep, struct ntx_addr *addr)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);

	addr->ip4 = be->addr.ip4;
	addr->port = be->addr.port;
}

/* The engine's name is final: our window and entry say it, so that
 * peers that map the slice by it find this endpoint. */
static void ntx_pci_setname(struct ntx_be_ep *bep, const struct ntx_addr *addr)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	uint32_t ip4 = be->addr.ip4;
	uint16_t port = be->addr.port;

	be->addr = *addr;
	be->addr.ip4 = ip4;
	be->addr.port = port;
	ntx_pci_hdr_write(be);
	ntx_rgn_publish(be->rgn, be->rgn_idx, &be->addr);
}

/* A service names whoever holds it in the region's directory now. */
static int ntx_pci_resolve(struct ntx_addr *addr)
{
	if (!(addr->flags & NTX_ADDR_F_UNBOUND))
		return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
	return addr->service ? ntx_rgn_resolve(addr) : -FI_EADDRNOTAVAIL;
}

/* Sealed connections (ntx_ntb_seal.c): every machine attached writes the
 * whole region, so a connection the job-key exchange proved is sealed,
 * and its packets leave whole, with a MAC, and room for it. */
static size_t ntx_pci_conn_mtu(const struct ntx_be_conn *conn)
{
	return ntx_ntb_conn_mtu(conn) - NTX_SEAL_TAG;
}

static int ntx_pci_send(struct ntx_be_conn *conn, const void *hdr,
			const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);

	if (c->seal && c->seal->tx)
		return ntx_ntb_send_sealed(c, hdr, iov, iovcnt, len);
	return ntx_ntb_send(conn, hdr, iov, iovcnt, len);
}

static int ntx_pci_send_inline(struct ntx_be_conn *conn, uint8_t pflags,
			       uint64_t tag, uint64_t data, const void *buf,
			       size_t len)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);
	struct ntx_wire_hdr h;

	if (!c->seal || !c->seal->tx)
		return ntx_ntb_send_inline(conn, pflags, tag, data, buf, len);
	ntx_wire_hdr_inline(&h, pflags, tag, data, buf, len);
	return ntx_ntb_send_sealed(c, &h, NULL, 0, 0);
}

const struct ntx_be_ops ntx_ntb_pci_ops = {
	.name = "ntb-pci",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = 65536, /* bounded by FI_NTX_EAGER_MAX */
	.has_bulk = false,
	.streams = true,
	.open = ntx_pci_open,
	.close = ntx_pci_close,
	.getname = ntx_pci_getname,
	.setname = ntx_pci_setname,
	.connect = ntx_ntb_connect,
	.disconnect = ntx_ntb_disconnect,
	.conn_mtu = ntx_pci_conn_mtu,
	.send = ntx_pci_send,
	.send_inline = ntx_pci_send_inline,
	.poll = ntx_ntb_poll,
	.check_peers = ntx_ntb_check_peers,
	.resolve = ntx_pci_resolve,
	.seal = ntx_ntb_seal,
	.arm = ntx_ntb_arm,
	.disarm = ntx_ntb_disarm,
	.wait_fd = ntx_ntb_wait_fd,
};

/* One domain per region found: "ivshmem-host" with FI_NTX_IVSHMEM_SOCKET,
 * "ivshmem-<PCI address>" for each device in a guest. */
static int ntx_pci_domains(struct ntx_be_domain *out, int max)
{
	char names[8][64];
	int n = ntx_rgn_domains(names, max < 8 ? max : 8);

	for (int i = 0; i < n; i++) {
		memset(&out[i], 0, sizeof(out[i]));
		memcpy(out[i].name, names[i], sizeof(out[i].name));
	}
	return n;
}

static struct ntx_be_desc ntx_ntb_pci_desc = {
	.name = "pci",
	.ops = &ntx_ntb_pci_ops,
	.order = 5, /* before tcp: the region is the faster way between VMs */
	.domains = ntx_pci_domains,
};
NTX_BE_REGISTER(ntx_ntb_pci_desc)
