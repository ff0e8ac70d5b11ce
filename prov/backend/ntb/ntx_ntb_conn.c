/*
 * ntb connections (DESIGN §4, connecting): slots of our window, connect
 * cells posted into the peer's window and the responses to them, the
 * connect bell, and a connection's end (closed by its peer, or failed).
 */
#include "config.h"
#include <stdlib.h>

#include "ntx_ntb_int.h"

/* May slot i be taken? A slot released before its peer closed its side
 * (be->unacked) is skipped until the peer's close shows in it: that peer
 * may not yet have seen our close, and whatever it still writes there
 * (an entry, a consumer position, its own close flag) would land on the
 * slot's next connection, and end or corrupt the connection of another
 * peer. Its close is the last thing it writes. With 'any', such a slot is
 * taken anyway: a peer that never closes (gone, or lying) cannot use up
 * our slots. */
static bool ntx_ntb_slot_free(struct ntx_shm_ep *be, uint32_t i, bool any)
{
	uint64_t bit = 1ull << (i % 64);

	if (be->slots[i])
		return false;
	if (!(be->unacked[i / 64] & bit))
		return true;
	/* acquire: the peer's last writes into the slot came before */
	if (!any && !atomic_load_explicit(&ntx_win_ctl(&be->win, i)->closed,
					  memory_order_acquire))
		return false;
	be->unacked[i / 64] &= ~bit;
	return true;
}

static int ntx_ntb_slot_alloc(struct ntx_shm_ep *be, struct ntx_shm_conn *c)
{
	struct ntx_win_ctl *ctl;
	uint32_t i, n = be->win.g.nslots;

	for (i = 0; i < n && !ntx_ntb_slot_free(be, i, false); i++)
		;
	if (i == n)
		for (i = 0; i < n && !ntx_ntb_slot_free(be, i, true); i++)
			;
	if (i == n) {
		NTX_WARN(FI_LOG_EP_CTRL, "all %u peer slots in use "
			 "(FI_NTX_MAX_PEERS)\n", n);
		return -FI_ENOSPC;
	}
	ctl = ntx_win_ctl(&be->win, i);
	atomic_store_explicit(&ctl->resp, 0, memory_order_relaxed);
	atomic_store_explicit(&ctl->closed, 0, memory_order_relaxed);
	atomic_store_explicit(&ctl->cons, 0, memory_order_relaxed);
	atomic_store_explicit(&ctl->bulk_cons, 0, memory_order_relaxed);
	memset(&ctl->want, 0, sizeof(ctl->want));
	/* a slot used before is zeroed again: a peer that had not yet seen
	 * its connection fail (a job-key refusal, a protocol error) may have
	 * written an entry after the release zeroed it. Fresh slots are zero
	 * (and cost no system call). */
	if (be->reused[i / 64] & (1ull << (i % 64)))
		be->wops->ring_zero(be, i);
	/* the reset is published by the release that follows (cell post or
	 * connect response) */
	be->slots[i] = c;
	if (i / 64 >= be->bit_words)
		be->bit_words = i / 64 + 1;
	c->my_slot = i;
	c->rx_ring = ntx_win_entry(&be->win, i, 0);
	c->rx_bulk = ntx_win_bulk(&be->win, i);
	return 0;
}

/* Gives a released slot's ring pages back, so idle slots cost no memory
 * and the next connection starts from a zeroed ring (no old header or
 * payload can match its sequence numbers). A slot whose peer has not
 * closed its side waits for that close (ntx_ntb_slot_free). */
static void ntx_ntb_slot_release(struct ntx_shm_ep *be, uint32_t slot)
{
	be->slots[slot] = NULL;
	be->reused[slot / 64] |= 1ull << (slot % 64);
	if (!atomic_load_explicit(&ntx_win_ctl(&be->win, slot)->closed,
				  memory_order_relaxed))
		be->unacked[slot / 64] |= 1ull << (slot % 64);
	be->wops->ring_zero(be, slot);
}

/* Where our ready bit lives in the peer's window, once we know our slot
 * there. */
static void ntx_ntb_peer_slot(struct ntx_shm_conn *c, uint32_t slot)
{
	c->peer_slot = slot;
	c->tx_ring = ntx_win_entry(&c->pwin, slot, 0);
	c->tx_bulk = ntx_win_bulk(&c->pwin, slot);
	c->peered = true;
	c->peer_bits = ntx_win_bits(&c->pwin) + slot / 64;
	c->peer_bit = 1ull << (slot % 64);
	c->light = c->pwin.flags & NTX_WIN_F_MEMBARRIER;
}

/* Our side of a connection we asked for is now connected (the peer's
 * response, or its crossing request): flag its ring in our own ready
 * bitmap, so that the next bitmap pass drains it whatever its sender saw.
 * The peer may have been connected, and sending, for a while: then
 *  - it set its bit while we were connecting: ntx_ntb_poll_bits found no
 *    connected ring behind it, marked it idle, and a ntx_ntb_bits_clear
 *    in the same poll (our connect bell load came before the peer's, the
 *    bitmap load after) took it back; the fence and drain there skip a
 *    ring that is not connected;
 *  - it found the bit still set (left by the slot's previous connection,
 *    or by itself) and set nothing, and the same clear took it back;
 *  - it saw bits_on off: turning the bitmap on fences it and drains the
 *    rings directly, but only the connected ones.
 * In each case its entries sit in the ring with the bit clear, and a
 * sender that goes quiet never sets it again: lost until it sends more.
 * Its entries are visible to our next drain in each case (the fences of
 * ntx_ntb_bits_clear and of turning the bitmap on, or the sender's own
 * seq_cst fetch_or read by our acquire load of the bitmap); the bit only
 * makes sure that drain happens. Relaxed: only we read it for draining,
 * later in this thread; a sender that sees it set and skips its own is
 * covered as for any set bit (ntx_ntb_bits_clear). A connection we
 * accept needs nothing: its peer learns its slot only from our response. */
static void ntx_ntb_conn_flag(struct ntx_shm_conn *c)
{
	atomic_fetch_or_explicit(ntx_win_bits(&c->be->win) + c->my_slot / 64,
				 1ull << (c->my_slot % 64),
				 memory_order_relaxed);
}

/* A connection we asked for is answered: the peer's slot for us. */
static void ntx_ntb_conn_up(struct ntx_shm_conn *c, uint32_t peer_slot)
{
	ntx_ntb_peer_slot(c, peer_slot);
	c->state = NTX_CONN_CONNECTED;
	ntx_ntb_quiet_off(c->be);
	ntx_list_remove(&c->centry);
	ntx_ntb_conn_flag(c);
}

static struct ntx_shm_conn *ntx_ntb_conn_new(struct ntx_shm_ep *be,
					     const struct ntx_addr *peer,
					    void *vc)
{
	struct ntx_shm_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->head.ops = be->head.ops;
	c->be = be;
	c->vc = vc;
	c->peer = *peer;
	ntx_list_init(&c->centry);
	if (be->wops->peer_get(c))
		goto free_c;
	if (ntx_ntb_slot_alloc(be, c))
		goto unwatch;
	ntx_list_insert_tail(&be->conns, &c->entry);
	be->nconns++;
	ntx_ntb_quiet_off(be);
	return c;
unwatch:
	be->wops->unwatch(c);
	be->wops->peer_put(c);
free_c:
	free(c);
	return NULL;
}

static void ntx_ntb_ring_conn_bell(struct ntx_shm_conn *c)
{
	/* release: cell or response written before the bell; the data bell
	 * that follows wakes a sleeping owner */
	atomic_fetch_add_explicit(&ntx_win_hdr(&c->pwin)->conn_bell, 1,
				  memory_order_seq_cst);
	if (atomic_load_explicit(&ntx_win_hdr(&c->pwin)->waiters,
				 memory_order_seq_cst))
		c->be->wops->wake(c);
}

/* Posts our connect request into a free cell of the peer's window. */
static int ntx_ntb_cell_post(struct ntx_shm_conn *c)
{
	struct ntx_win_cell *cell;
	uint32_t expect;

	for (uint32_t i = 0; i < NTX_WIN_CELLS; i++) {
		cell = ntx_win_cell(&c->pwin, i);
		expect = NTX_CELL_FREE;
		if (!atomic_compare_exchange_strong(&cell->state, &expect,
						    NTX_CELL_BUSY))
			continue;
		cell->slot = c->my_slot;
		cell->from = c->be->addr;
		/* release: slot reset and cell body before POSTED */
		atomic_store_explicit(&cell->state, NTX_CELL_POSTED,
				      memory_order_release);
		ntx_ntb_ring_conn_bell(c);
		c->cell_pending = false;
		return 0;
	}
	c->cell_pending = true;
	c->be->rescan = true;
	ntx_ntb_quiet_off(c->be);
	return -FI_EAGAIN;
}

/* Tells the peer which of our slots carries its ring to us. */
static void ntx_ntb_respond(struct ntx_shm_conn *c)
{
	struct ntx_win_ctl *ps = ntx_win_ctl(&c->pwin, c->peer_slot);

	ps->resp_epoch = c->be->addr.epoch;
	/* release: our slot reset is visible before the peer writes into it */
	atomic_store_explicit(&ps->resp, c->my_slot + 1, memory_order_release);
	ntx_ntb_ring_conn_bell(c);
}

void ntx_ntb_conn_fail(struct ntx_shm_conn *c, int err)
{
	if (c->state == NTX_CONN_FAILED)
		return;
	c->state = NTX_CONN_FAILED;
	ntx_ntb_quiet_off(c->be);
	if (c->be->hot == c)
		c->be->hot = NULL;
	ntx_list_remove(&c->centry);
	c->be->wops->unwatch(c);
	c->be->cb.failed(c->vc, err);
}

int ntx_ntb_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
		    void *vc, struct ntx_be_conn **conn)
{
	struct ntx_shm_conn *c = ntx_ntb_conn_new(ntx_shm_ep_of(be), peer, vc);

	if (!c)
		return -FI_EADDRNOTAVAIL;
	c->state = NTX_CONN_CONNECTING;
	/* published by the release of the cell post */
	ntx_win_ctl(&c->be->win, c->my_slot)->want = *peer;
	ntx_ntb_quiet_off(c->be);
	ntx_list_insert_tail(&c->be->connecting, &c->centry);
	ntx_ntb_cell_post(c);
	*conn = &c->head;
	return 0;
}

void ntx_ntb_conn_free(struct ntx_shm_conn *c)
{
	struct ntx_shm_ep *be = c->be;

	ntx_list_remove(&c->entry);
	ntx_list_remove(&c->centry);
	be->nconns--;
	ntx_ntb_quiet_off(be);
	if (be->hot == c)
		be->hot = NULL;
	if (c->bulk_dirty) /* the peer's slot release punches it */
		be->bulk_dirty--;
	if (c->peered) {
		/* release: our last entries before the flag; the peer drains
		 * them, then fails its side instead of waiting on us */
		atomic_store_explicit(&ntx_win_ctl(&c->pwin, c->peer_slot)->closed,
				      1, memory_order_release);
		ntx_ntb_ring_conn_bell(c);
	}
	if (c->state != NTX_CONN_FAILED) /* failing unwatched it */
		be->wops->unwatch(c);
	ntx_ntb_slot_release(be, c->my_slot);
	be->wops->peer_put(c);
	ntx_ntb_seal_free(c);
	free(c);
}

void ntx_ntb_disconnect(struct ntx_be_conn *conn)
{
	ntx_ntb_conn_free(ntx_shm_conn_of(conn));
}

static struct ntx_shm_conn *ntx_ntb_find(struct ntx_shm_ep *be,
					 const struct ntx_addr *a)
{
	struct ntx_list *it;

	ntx_list_foreach(&be->conns, it) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, entry);
		if (c->state != NTX_CONN_FAILED &&
		    ntx_addr_same_ep(&c->peer, a))
			return c;
	}
	return NULL;
}

/* The requester's window confirms it posted the cell: the slot it
 * names is one it reserved for us (ntx_win_ctl.want). A process of the
 * same user can post cells in any name; without this, one in an honest
 * peer's name made us answer into a slot of that peer's choosing and
 * take its later real request for a duplicate. */
static bool ntx_ntb_cell_confirmed(struct ntx_shm_conn *c, uint32_t slot)
{
	struct ntx_addr want;

	if (slot >= c->pwin.g.nslots)
		return false;
	memcpy(&want, &ntx_win_ctl(&c->pwin, slot)->want, sizeof(want));
	return ntx_addr_same_ep(&want, &c->be->addr);
}

/* A connected connection its peer closed (ntx_win_ctl.closed) ends: what
 * the peer wrote before is delivered, then it fails. True when it did. */
static bool ntx_ntb_end_if_closed(struct ntx_shm_conn *c)
{
	if (c->state != NTX_CONN_CONNECTED ||
	    !atomic_load_explicit(&ntx_win_ctl(&c->be->win, c->my_slot)->closed,
				  memory_order_acquire))
		return false;
	NTX_INFO(FI_LOG_EP_CTRL, "peer pid %u closed the connection\n",
		 c->peer.pid);
	ntx_ntb_conn_end(c);
	return true;
}

static void ntx_ntb_on_cell(struct ntx_shm_ep *be,
			    const struct ntx_win_cell *cell)
{
	struct ntx_shm_conn *c;
	const struct ntx_addr *from = &cell->from;

	if (!ntx_addr_valid(from) || !be->wops->peer_ok(be, from)) {
		NTX_WARN(FI_LOG_EP_CTRL, "dropping malformed connect request\n");
		return;
	}
	c = ntx_ntb_find(be, from);
	/* in our own name: only our own connect to ourselves (an endpoint
	 * sending to itself) names its slot here. A forged one would make
	 * us answer, and later close, in the control line of whichever of
	 * our slots it names, and so end that slot's connection. */
	if (ntx_addr_same_ep(from, &be->addr) &&
	    (from->epoch != be->addr.epoch || !c ||
	     c->state != NTX_CONN_CONNECTING || cell->slot != c->my_slot)) {
		NTX_WARN(FI_LOG_EP_CTRL, "dropping a connect request in our "
			 "own name\n");
		return;
	}
	/* the peer closed the connection we have with it, then asked for a
	 * new one: its close is visible (it wrote it before the cell), and
	 * the old connection ends here, or the request would be taken for a
	 * duplicate and never answered */
	if (c && ntx_ntb_end_if_closed(c))
		c = NULL; /* the engine disconnects the old one */
	if (c && c->peer.epoch != from->epoch) {
		NTX_INFO(FI_LOG_EP_CTRL, "peer pid %u restarted\n", from->pid);
		ntx_ntb_conn_fail(c, -FI_ECONNRESET);
		c = NULL; /* the engine disconnects the old one */
	}
	if (c && c->state == NTX_CONN_CONNECTING) {
		/* simultaneous connect: both requests name the same pair of
		 * slots, so either one completes the connection */
		if (!ntx_ntb_cell_confirmed(c, cell->slot)) {
			NTX_WARN(FI_LOG_EP_CTRL, "dropping a connect request "
				 "pid %u did not post\n", from->pid);
			return;
		}
		ntx_ntb_conn_up(c, cell->slot);
		ntx_ntb_respond(c);
		be->cb.connected(c->vc);
		return;
	}
	if (c) /* duplicate of a request already answered */
		return;
	c = ntx_ntb_conn_new(be, from, NULL);
	if (!c)
		return;
	if (!ntx_ntb_cell_confirmed(c, cell->slot)) {
		NTX_WARN(FI_LOG_EP_CTRL, "dropping a connect request pid %u "
			 "did not post\n", from->pid);
		ntx_ntb_conn_free(c);
		return;
	}
	ntx_ntb_peer_slot(c, cell->slot);
	c->state = NTX_CONN_CONNECTED;
	ntx_ntb_quiet_off(c->be);
	c->vc = be->cb.accept(be->cb.ctx, &c->head, from);
	if (!c->vc) {
		ntx_ntb_conn_free(c);
		return;
	}
	ntx_ntb_respond(c);
}

void ntx_ntb_poll_cells(struct ntx_shm_ep *be)
{
	struct ntx_win_cell *cell, copy;

	for (uint32_t i = 0; i < NTX_WIN_CELLS; i++) {
		cell = ntx_win_cell(&be->win, i);
		/* acquire: the cell body written before POSTED */
		if (atomic_load_explicit(&cell->state, memory_order_acquire) !=
		    NTX_CELL_POSTED)
			continue;
		memcpy(&copy.slot, &cell->slot, sizeof(copy.slot));
		memcpy(&copy.from, &cell->from, sizeof(copy.from));
		atomic_store_explicit(&cell->state, NTX_CELL_FREE,
				      memory_order_release);
		ntx_ntb_on_cell(be, &copy);
	}
}

void ntx_ntb_poll_connecting(struct ntx_shm_ep *be)
{
	struct ntx_list *it, *tmp;
	uint32_t r;

	ntx_list_foreach_safe(&be->connecting, it, tmp) {
		struct ntx_shm_conn *c =
			ntx_container_of(it, struct ntx_shm_conn, centry);
		if (c->cell_pending && ntx_ntb_cell_post(c))
			continue;
		/* acquire: the peer reset its slot before answering */
		r = atomic_load_explicit(&ntx_win_ctl(&be->win, c->my_slot)->resp,
					 memory_order_acquire);
		if (!r)
			continue;
		if (r > c->pwin.g.nslots) {
			ntx_ntb_conn_fail(c, -FI_EREMOTEIO);
			continue;
		}
		ntx_ntb_conn_up(c, r - 1);
		be->cb.connected(c->vc);
	}
}

/* A connection whose peer is gone, by closing it, its endpoint or
 * exiting: what it wrote before is delivered (the ring is in our window,
 * still mapped), then the connection fails. A receiver that acknowledges
 * a delivery-complete send and exits at once must not fail that send. */
void ntx_ntb_conn_end(struct ntx_shm_conn *c)
{
	while (c->state == NTX_CONN_CONNECTED && ntx_ntb_drain(c))
		;
	ntx_ntb_conn_fail(c, -FI_ECONNRESET);
}

/* Connections the peer closed. Runs on the connect bell. */
void ntx_ntb_poll_closed(struct ntx_shm_ep *be)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_ntb_end_if_closed(ntx_container_of(it, struct ntx_shm_conn,
						       entry));
}

/* Bulk moves (rendezvous, large RMA parts) by the window's single copy;
 * where it has none, the engine streams the bytes through the ring. */
ssize_t ntx_ntb_bulk_read(struct ntx_be_conn *conn,
			  const struct iovec *local, size_t nlocal,
			  const struct ntx_wire_iov *remote, size_t nremote)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);

	if (!c->be->wops->read)
		return -FI_EOPNOTSUPP;
	return c->be->wops->read(c, local, nlocal, remote, nremote);
}

ssize_t ntx_ntb_bulk_write(struct ntx_be_conn *conn,
			   const struct iovec *local, size_t nlocal,
			   const struct ntx_wire_iov *remote, size_t nremote)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);

	if (!c->be->wops->write)
		return -FI_EOPNOTSUPP;
	return c->be->wops->write(c, local, nlocal, remote, nremote);
}
