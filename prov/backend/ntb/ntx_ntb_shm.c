/*
 * ntb back end over a shared-memory window (DESIGN §4): the endpoint's
 * open and close, its name, and the ops table the engine calls. The ring
 * protocol is in ntx_ntb_tx.c, ntx_ntb_rx.c and ntx_ntb_conn.c, the
 * window itself in ntx_ntb_win_shm.c, peers in ntx_ntb_peer.c and
 * services in ntx_ntb_svc.c; ntx_ntb_int.h holds what they share.
 */
#include "config.h"
#include <assert.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ntx_ntb_int.h"

static atomic_uint ntx_ntb_next_ep_id;

/* Our name before anything is made; the epoch tells this endpoint from
 * an earlier one that had the same pid and id (a restarted peer). */
void ntx_ntb_name_init(struct ntx_shm_ep *be, const struct ntx_addr *want)
{
	be->addr.magic = NTX_ADDR_MAGIC;
	be->addr.version = NTX_ADDR_VERSION;
	be->addr.host = ntx_host_id();
	be->addr.pid = (uint32_t)getpid();
	be->addr.ep_id = atomic_fetch_add(&ntx_ntb_next_ep_id, 1);
	be->addr.service = want ? want->service : 0;
	be->addr.epoch = ntx_random64();
}

/* The tables of our window's slots: the connection behind each, and the
 * bitmap words of idle ready bits, of slots released before and of those
 * released before their peer closed. */
int ntx_ntb_slots_alloc(struct ntx_shm_ep *be)
{
	size_t words = (be->win.g.nslots + 63) / 64;

	be->slots = calloc(be->win.g.nslots, sizeof(*be->slots));
	be->idle = calloc(words, sizeof(*be->idle));
	be->reused = calloc(words, sizeof(*be->reused));
	be->unacked = calloc(words, sizeof(*be->unacked));
	if (be->slots && be->idle && be->reused && be->unacked)
		return 0;
	ntx_ntb_slots_free(be);
	return -FI_ENOMEM;
}

void ntx_ntb_slots_free(struct ntx_shm_ep *be)
{
	free(be->slots);
	free(be->idle);
	free(be->reused);
	free(be->unacked);
}

/* A window provider has every callback the ring protocol calls; single
 * copy is optional, but both ways or neither. */
bool ntx_ntb_win_ops_valid(const struct ntx_ntb_win_ops *ops)
{
	return ops->create && ops->destroy && ops->map && ops->unmap &&
	       ops->peer_get && ops->unwatch && ops->peer_put &&
	       ops->wait_take && ops->ring_zero && ops->wake &&
	       ops->fence_peers && ops->peer_ok && ops->peer_dead &&
	       !ops->read == !ops->write;
}

struct ntx_shm_ep *ntx_ntb_ep_new(const struct ntx_be_ops *ops,
				  const struct ntx_ntb_win_ops *wops,
				  const struct ntx_be_cb *cb,
				  const struct ntx_addr *want)
{
	struct ntx_shm_ep *be = calloc(1, sizeof(*be));

	if (!be)
		return NULL;
	be->head.ops = ops;
	be->cb = *cb;
	ntx_list_init(&be->conns);
	ntx_list_init(&be->connecting);
	ntx_list_init(&be->watches);
	ntx_ntb_name_init(be, want);
	be->wops = wops;
	assert(ntx_ntb_win_ops_valid(be->wops));
	be->svc_fd = -1;
	be->epfd = -1;
	be->wake = -1;
	be->timer = -1;
	return be;
}

void ntx_ntb_ep_end(struct ntx_shm_ep *be)
{
	struct ntx_list *it, *tmp;

	/* release: peers that see CLOSED stop using their connections */
	atomic_store_explicit(&ntx_win_hdr(&be->win)->state, NTX_WIN_CLOSED,
			      memory_order_release);
	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_ntb_conn_free(ntx_container_of(it, struct ntx_shm_conn,
						   entry));
	be->wops->destroy(be);
}

void ntx_ntb_ep_free(struct ntx_shm_ep *be)
{
	if (be->timer >= 0)
		close(be->timer);
	close(be->epfd);
	close(be->wake);
	ntx_ntb_slots_free(be);
	free(be);
}

void ntx_ntb_hdr_fill(struct ntx_shm_ep *be, uint32_t flags, uint64_t wake_key)
{
	struct ntx_win_hdr *hdr = ntx_win_hdr(&be->win);

	hdr->magic = NTX_WIN_MAGIC;
	hdr->version = NTX_WIN_VERSION;
	hdr->pid = be->addr.pid;
	hdr->epoch = be->addr.epoch;
	hdr->size = be->win.g.size;
	hdr->nslots = be->win.g.nslots;
	hdr->ring_lines = be->win.g.ring_lines;
	hdr->max_payload = be->win.max_payload;
	hdr->bulk_size = be->win.g.bulk_size;
	hdr->ep_id = be->addr.ep_id;
	hdr->service = be->addr.service;
	hdr->flags = flags;
	hdr->wake_key = wake_key;
}

static int ntx_ntb_open(struct ntx_be_ep **out, const struct ntx_addr *want,
			const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_shm_ep *be = ntx_ntb_ep_new(&ntx_ntb_shm_ops,
					       &ntx_ntb_win_shm_ops, cb, want);
	int ret;

	(void)dev;
	if (!be)
		return -FI_ENOMEM;
	ret = ntx_ntb_wake_open(be);
	if (ret)
		goto free_be;
	ret = ntx_ntb_wait_open(be, EPOLLIN);
	if (ret)
		goto close_wake;
	if (be->addr.service) {
		ret = ntx_ntb_svc_claim(be);
		if (ret)
			goto close_wait;
	}
	ret = be->wops->create(be);
	if (ret)
		goto release_svc;
	be->addr.win_fd = be->fd;
	ret = ntx_ntb_slots_alloc(be);
	if (ret)
		goto unmap;
	*out = &be->head;
	return 0;
unmap:
	be->wops->destroy(be);
release_svc:
	ntx_ntb_svc_release(be);
close_wait:
	close(be->epfd);
close_wake:
	close(be->wake);
free_be:
	free(be);
	return ret;
}

static void ntx_ntb_close(struct ntx_be_ep *bep)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);

	ntx_ntb_shm_fini(); /* the registration is done by now: join it */
	ntx_ntb_ep_end(be);
	ntx_ntb_svc_release(be);
	ntx_ntb_ep_free(be);
}

static void ntx_ntb_getname(struct ntx_be_ep *bep, struct ntx_addr *addr)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	uint32_t ip4 = addr->ip4;
	uint16_t port = addr->port;

	*addr = be->addr;
	addr->ip4 = ip4;
	addr->port = port;
}

/* The engine's flags (a job key) travel in our connect cells. */
static void ntx_ntb_setname(struct ntx_be_ep *bep, const struct ntx_addr *addr)
{
	struct ntx_shm_ep *be = ntx_shm_ep_of(bep);
	be->addr.flags = addr->flags;
}

const struct ntx_be_ops ntx_ntb_shm_ops = {
	.name = "ntb-shm",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = 65536, /* bounded by FI_NTX_EAGER_MAX */
	.has_bulk = true,
	.streams = true,
	.open = ntx_ntb_open,
	.close = ntx_ntb_close,
	.getname = ntx_ntb_getname,
	.setname = ntx_ntb_setname,
	.connect = ntx_ntb_connect,
	.disconnect = ntx_ntb_disconnect,
	.conn_mtu = ntx_ntb_conn_mtu,
	.stream_mtu = ntx_ntb_stream_mtu,
	.self_idle = ntx_ntb_self_idle,
	.send = ntx_ntb_send,
	.send_inline = ntx_ntb_send_inline,
	.bulk_read = ntx_ntb_bulk_read,
	.bulk_write = ntx_ntb_bulk_write,
	.poll = ntx_ntb_poll,
	.check_peers = ntx_ntb_check_peers,
	.resolve = ntx_ntb_resolve,
	.arm = ntx_ntb_arm,
	.disarm = ntx_ntb_disarm,
	.wait_fd = ntx_ntb_wait_fd,
};

static struct ntx_be_desc ntx_ntb_shm_desc = {
	.name = "shm",
	.ops = &ntx_ntb_shm_ops,
	.local = true,
	.fini = ntx_ntb_shm_fini,
};
NTX_BE_REGISTER(ntx_ntb_shm_desc)
