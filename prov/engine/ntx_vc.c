/*
 * Virtual connections: one per (endpoint, peer), created lazily on the
 * first operation or when a peer connects. Operations posted while
 * connecting wait on the VC's backlog and leave in order; a failed VC
 * completes everything outstanding with an error.
 */
#include "config.h"
#include <assert.h>
#include <stdlib.h>

#include "ntx/ntx_engine.h"

static struct ntx_vc *ntx_vc_new(struct ntx_ep *ep, const struct ntx_addr *peer)
{
	struct ntx_vc *vc = calloc(1, sizeof(*vc));

	if (!vc)
		return NULL;
	vc->ep = ep;
	vc->peer = *peer;
	vc->fi_addr = FI_ADDR_NOTAVAIL;
	vc->key = FI_ADDR_NOTAVAIL;
	ntx_list_init(&vc->backlog);
	ntx_list_init(&vc->pending);
	ntx_list_init(&vc->unexp_entry);
	ntx_list_insert_tail(&ep->vcs, &vc->entry);
	return vc;
}

static int ntx_vc_tab_set(struct ntx_ep *ep, fi_addr_t addr, struct ntx_vc *vc)
{
	return ntx_idtab_set(&ep->vc_tab, addr, vc);
}

static struct ntx_vc *ntx_vc_find(struct ntx_ep *ep, const struct ntx_addr *a)
{
	struct ntx_list *it;

	ntx_list_foreach(&ep->vcs, it) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (vc->state != NTX_VC_ERROR &&
		    ntx_addr_same_ep(&vc->peer, a) &&
		    vc->peer.epoch == a->epoch)
			return vc;
	}
	return NULL;
}

/* The peer's name from the AV (looked up again when it names a service
 * whose endpoint failed), and the back end that reaches it. The key
 * names a slot and, with rx_ctx_bits, one of its receive contexts:
 * -FI_ENOENT when the slot holds fewer. */
static int ntx_vc_peer(struct ntx_ep *ep, fi_addr_t key, struct ntx_addr *out,
		       struct ntx_ep_be **be_out)
{
	struct ntx_av *av = ep->av;
	bool keys = ntx_vc_ctx_keys(ep);
	fi_addr_t slot = keys ? key >> NTX_SEP_CTX_SHIFT : key;
	uint32_t ctx = keys ? (uint32_t)(key & (NTX_SEP_CTX_MAX - 1)) : 0;
	struct ntx_addr *peer;
	struct ntx_ep_be *be;
	int ret = 0;

	if (!av)
		return -FI_EINVAL;
	ntx_mutex_lock(ep->domain, &av->lock);
	peer = (struct ntx_addr *)ntx_av_get_ctx(av, slot, ctx);
	if (!peer) {
		ret = ctx && ntx_av_get(av, slot) ? -FI_ENOENT : -FI_EINVAL;
		if (ret == -FI_EINVAL)
			NTX_WARN(FI_LOG_EP_DATA, "fi_addr %llu is not in the "
				 "AV\n", (unsigned long long)slot);
		goto unlock;
	}
	/* the endpoint behind a service failed: whoever holds the service
	 * now (a restarted peer, a new epoch) gets a new VC */
	if (peer->flags & NTX_ADDR_F_SERVICE)
		peer->flags |= NTX_ADDR_F_UNBOUND;
	be = ntx_ep_be_for(ep, peer);
	if (!be) {
		NTX_WARN(FI_LOG_EP_DATA, "no back end reaches fi_addr %llu\n",
			 (unsigned long long)slot);
		ret = -FI_EHOSTUNREACH;
		goto unlock;
	}
	if (peer->flags & NTX_ADDR_F_UNBOUND) {
		if (be->ops->resolve(peer)) {
			NTX_WARN(FI_LOG_EP_DATA, "no endpoint has service %u\n",
				 peer->service);
			ret = -FI_EADDRNOTAVAIL;
			goto unlock;
		}
		peer->flags |= NTX_ADDR_F_SERVICE;
	}
	*out = *peer;
	*be_out = be;
unlock:
	ntx_mutex_unlock(ep->domain, &av->lock);
	return ret;
}

/* Tells a new VC's peer every context of our scalable endpoint (DESIGN
 * §3, "Scalable endpoints"), ahead of anything else we send on it. */
static void ntx_vc_send_names(struct ntx_vc *vc)
{
	struct ntx_ep *ep = vc->ep;
	struct ntx_wire_hdr h = { .op = NTX_OP_NAMES, .msg_len = ep->sep_n };
	struct iovec iov = { (void *)ep->sep_names,
			     ep->sep_n * sizeof(ep->sep_names[0]) };

	if (ep->sep_n > 1 && ntx_vc_ctrl_data(vc, &h, &iov, 1, iov.iov_len))
		NTX_WARN(FI_LOG_EP_CTRL, "pid %u: could not tell it our "
			 "contexts\n", vc->peer.pid);
}

/* A receive context the entry does not list: a name given by service
 * may still learn its contexts from its endpoint (NTX_OP_NAMES, sent
 * when a VC to it starts), so its first context is connected and the
 * caller tries again; a name given whole has no such context. */
static int ntx_vc_ctx_unknown(struct ntx_ep *ep, fi_addr_t key)
{
	fi_addr_t slot = key >> NTX_SEP_CTX_SHIFT;
	const struct ntx_addr *a;
	struct ntx_vc *vc0;
	bool by_service;

	ntx_mutex_lock(ep->domain, &ep->av->lock);
	a = ntx_av_get(ep->av, slot);
	by_service = a && (a->flags & (NTX_ADDR_F_UNBOUND |
				       NTX_ADDR_F_SERVICE));
	ntx_mutex_unlock(ep->domain, &ep->av->lock);
	if (!by_service) {
		NTX_WARN(FI_LOG_EP_DATA, "fi_addr %llu has no receive context "
			 "%u\n", (unsigned long long)slot,
			 (unsigned)(key & (NTX_SEP_CTX_MAX - 1)));
		return -FI_EINVAL;
	}
	/* its failure shows on the operations that reach it */
	(void)ntx_vc_get_slot(ep, slot << NTX_SEP_CTX_SHIFT, &vc0);
	return -FI_EAGAIN;
}

/* The VC reaches the first of a scalable peer's names: the same
 * endpoint, or the holder of the service the VC was resolved from (a tcp
 * peer is known by its address until then). */
static bool ntx_vc_names_first(const struct ntx_vc *vc,
			       const struct ntx_addr *first)
{
	if (ntx_addr_same_ep(first, &vc->peer) &&
	    first->epoch == vc->peer.epoch)
		return true;
	return (vc->peer.flags & NTX_ADDR_F_SERVICE) && vc->peer.service &&
	       first->service == vc->peer.service;
}

/* NTX_OP_NAMES: a scalable peer's contexts (DESIGN §3, "Scalable
 * endpoints"), sent by the peer's contexts when a VC starts. Checked
 * whole (a count in range, valid names of one process); kept when the
 * VC is the one to the first of them and the AV entry of its peer names
 * that alone. */
void ntx_vc_on_names(struct ntx_vc *vc, const struct ntx_wire_hdr *h,
		     const void *payload, size_t len)
{
	struct ntx_addr names[NTX_SEP_CTX_MAX];
	struct ntx_av *av = vc->ep->av;
	uint64_t n = h->msg_len;
	fi_addr_t slot;

	if (h->flags || n < 2 || n > NTX_SEP_CTX_MAX ||
	    len != n * sizeof(names[0]))
		goto refuse;
	memcpy(names, payload, len);
	for (uint64_t i = 0; i < n; i++) {
		if (!ntx_addr_valid(&names[i]) ||
		    (names[i].flags & NTX_ADDR_F_UNBOUND) ||
		    names[i].host != names[0].host ||
		    names[i].pid != names[0].pid)
			goto refuse;
	}
	if (!av || av->read_only || av->shared.map ||
	    !ntx_vc_names_first(vc, &names[0]))
		return; /* a context's VC other than the first: nothing new */
	slot = ntx_vc_fi_addr(vc);
	if (slot == FI_ADDR_NOTAVAIL)
		return;
	ntx_mutex_lock(vc->ep->domain, &av->lock);
	if (ntx_av_ctx_count(av, slot) == 1)
		ntx_av_table_set_list(av, slot, names, (uint32_t)n);
	ntx_mutex_unlock(vc->ep->domain, &av->lock);
	return;
refuse:
	NTX_WARN(FI_LOG_EP_CTRL, "pid %u: its list of contexts is refused\n",
		 vc->peer.pid);
	ntx_vc_fail(vc, -FI_EREMOTEIO);
}

/* The VC for an operation's key (ntx_vc_key), connecting it if needed.
 * O(1) once known. */
int ntx_vc_get_slot(struct ntx_ep *ep, fi_addr_t addr, struct ntx_vc **out)
{
	struct ntx_addr peer;
	struct ntx_vc *vc = ntx_idtab_get(&ep->vc_tab, addr);
	struct ntx_ep_be *be = NULL;
	bool fresh = false;
	int ret;

	if (vc && vc->state != NTX_VC_ERROR) {
		*out = vc;
		return 0;
	}
	if (addr == FI_ADDR_NOTAVAIL)
		return -FI_EINVAL;
	ret = ntx_vc_peer(ep, addr, &peer, &be);
	if (ret == -FI_ENOENT)
		return ntx_vc_ctx_unknown(ep, addr);
	if (ret)
		return ret;
	vc = ntx_vc_find(ep, &peer);
	if (!vc) {
		vc = ntx_vc_new(ep, &peer);
		if (!vc)
			return -FI_ENOMEM;
		vc->state = NTX_VC_CONNECTING;
		vc->ops = be->ops;
		ret = ntx_auth_init(vc);
		if (!ret)
			ret = be->ops->connect(be->be, &peer, vc, &vc->conn);
		if (ret) {
			ntx_auth_free(vc);
			ntx_list_remove(&vc->entry);
			free(vc);
			return ret;
		}
		fresh = true;
	}
	vc->fi_addr = ntx_vc_ctx_keys(ep) ? addr >> NTX_SEP_CTX_SHIFT : addr;
	vc->key = addr;
	ret = ntx_vc_tab_set(ep, addr, vc);
	if (ret)
		return ret;
	if (fresh)
		ntx_vc_send_names(vc);
	*out = vc;
	return 0;
}


struct ntx_vc *ntx_vc_by_name(struct ntx_ep *ep, const struct ntx_addr *a)
{
	return ntx_vc_find(ep, a);
}

int ntx_vc_cm_send(struct ntx_vc *vc, uint32_t stage, uint64_t cid,
		   const void *data, size_t len)
{
	struct ntx_wire_hdr h = {
		.op = NTX_OP_CM,
		.status = (int32_t)stage,
		.sreq = cid,
		.msg_len = len,
	};
	struct iovec iov = { (void *)data, len };

	if (len > NTX_CM_DATA_MAX || (len && !data))
		return -FI_EINVAL;
	return ntx_vc_ctrl_data(vc, &h, &iov, len ? 1 : 0, len);
}

fi_addr_t ntx_vc_fi_addr_lookup(struct ntx_vc *vc)
{
	if (vc->fi_addr == FI_ADDR_NOTAVAIL && vc->ep->av) {
		struct ntx_ep *ep = vc->ep;
		fi_addr_t a, key;
		uint32_t ctx;

		ntx_mutex_lock(ep->domain, &ep->av->lock);
		a = ntx_av_reverse(ep->av, &vc->peer, &ctx);
		ntx_mutex_unlock(ep->domain, &ep->av->lock);

		/* any context of a scalable peer reports its one fi_addr */
		vc->fi_addr = a;
		key = a == FI_ADDR_NOTAVAIL ? a : ntx_vc_key_of(ep, a, ctx);
		/* a VC we connected ourselves keeps carrying our sends, so
		 * that they stay in order */
		if (key != FI_ADDR_NOTAVAIL && vc->state != NTX_VC_ERROR) {
			struct ntx_vc *old = ntx_idtab_get(&ep->vc_tab, key);

			if (!old || old->state == NTX_VC_ERROR) {
				ntx_vc_tab_set(ep, key, vc);
				vc->key = key;
			}
		}
	}
	return vc->fi_addr;
}

void ntx_vc_mark_busy(struct ntx_vc *vc)
{
	if (!vc->busy) {
		vc->busy = true;
		ntx_list_insert_tail(&vc->ep->busy_vcs, &vc->busy_entry);
	}
}

void ntx_vc_backlog(struct ntx_vc *vc, struct ntx_req *req, bool head)
{
	if (head)
		ntx_list_insert_head(&vc->backlog, &req->entry);
	else
		ntx_list_insert_tail(&vc->backlog, &req->entry);
	ntx_vc_mark_busy(vc);
}

void ntx_vc_queue(struct ntx_vc *vc, struct ntx_req *req)
{
	ntx_vc_backlog(vc, req, false);
}

/* Sends backlogged requests in order until the ring is full (after the
 * job-key exchange, which may still owe packets). */
void ntx_vc_pump(struct ntx_vc *vc)
{
	if (vc->state == NTX_VC_AUTH)
		ntx_auth_pump(vc);
	while (vc->state == NTX_VC_CONNECTED && !ntx_list_empty(&vc->backlog)) {
		struct ntx_req *r = ntx_container_of(ntx_list_first(&vc->backlog),
						     struct ntx_req, entry);
		ntx_list_remove(&r->entry);
		if (ntx_proto_tx(r) == -FI_EAGAIN) {
			ntx_list_insert_head(&vc->backlog, &r->entry);
			return;
		}
	}
}

/* Answers queued for a peer whose ring is full: a peer that sends
 * requests and never reads the answers fails its own connection here
 * instead of growing our memory (DESIGN §7, "limits"). */
#define NTX_VC_CTRL_MAX 4096

/* A control packet (CTS, FIN, ACK, one-sided answers) now, or a copy
 * queued behind the backlog if the ring is full. */
int ntx_vc_ctrl_data(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr,
		     const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_req *r;
	int ret;

	if (vc->state == NTX_VC_ERROR)
		return vc->err;
	if (vc->state == NTX_VC_CONNECTED && ntx_list_empty(&vc->backlog)) {
		ret = vc->ops->send(vc->conn, hdr, iov, iovcnt, len);
		if (ret != -FI_EAGAIN)
			return ret;
	}
	if (vc->ctrl_queued >= NTX_VC_CTRL_MAX) {
		/* failed from progress: the caller may still hold requests
		 * of this VC */
		if (!vc->doom)
			NTX_WARN(FI_LOG_EP_DATA, "pid %u reads none of its %u "
				 "queued answers: connection closed\n",
				 vc->peer.pid, vc->ctrl_queued);
		vc->doom = -FI_ENOSPC;
		vc->ep->reap = true;
		return -FI_ENOSPC;
	}
	r = ntx_req_get(vc->ep, NTX_REQ_CTRL);
	if (!r)
		return -FI_ENOMEM;
	if (len && (len > NTX_BOUNCE_SIZE || ntx_req_bounce(r))) {
		ntx_req_put(r);
		return -FI_ENOMEM;
	}
	ntx_iov_copy_from(r->bounce, iov, iovcnt, len);
	r->len = len;
	r->vc = vc;
	r->hdr = *hdr;
	vc->ctrl_queued++;
	ntx_vc_queue(vc, r);
	return 0;
}

int ntx_vc_ctrl(struct ntx_vc *vc, const struct ntx_wire_hdr *hdr)
{
	return ntx_vc_ctrl_data(vc, hdr, NULL, 0, 0);
}

/* The peer at addr can no longer reach this endpoint's receives once vc
 * failed: vc was its last VC that is not failed (a crossed connect's
 * spare end fails while the kept one lives), and the receives are the
 * endpoint's own (a shared receive context is fed by other endpoints'
 * VCs too; a MSG endpoint flushes its receives itself). */
static bool ntx_vc_last_to(struct ntx_vc *vc, fi_addr_t addr)
{
	struct ntx_ep *ep = vc->ep;
	struct ntx_list *it;

	if (addr == FI_ADDR_NOTAVAIL || ep->cm || ep->rx != ep)
		return false;
	ntx_list_foreach(&ep->vcs, it) {
		struct ntx_vc *o = ntx_container_of(it, struct ntx_vc, entry);

		if (o != vc && o->state != NTX_VC_ERROR &&
		    ntx_vc_fi_addr(o) == addr)
			return false;
	}
	return true;
}

void ntx_vc_fail(struct ntx_vc *vc, int err)
{
	fi_addr_t addr;

	if (vc->state == NTX_VC_ERROR)
		return;
	NTX_INFO(FI_LOG_EP_CTRL, "connection to pid %u failed: %s\n",
		 vc->peer.pid, fi_strerror(-err));
	vc->state = NTX_VC_ERROR;
	vc->err = err;
	ntx_proto_vc_failed(vc);
	addr = ntx_vc_fi_addr(vc);
	if (ntx_vc_last_to(vc, addr))
		ntx_proto_fail_posted(vc->ep, addr, -err);
	vc->ep->reap = true;
}

void ntx_vc_destroy(struct ntx_vc *vc)
{
	struct ntx_ep *ep = vc->ep;

	if (vc->state != NTX_VC_ERROR) {
		vc->state = NTX_VC_ERROR;
		vc->err = -FI_ECANCELED;
		ntx_proto_vc_failed(vc);
	}
	if (vc->key != FI_ADDR_NOTAVAIL &&
	    ntx_idtab_get(&ep->vc_tab, vc->key) == vc)
		ntx_idtab_clear(&ep->vc_tab, vc->key);
	if (vc->conn)
		vc->ops->disconnect(vc->conn);
	if (vc->busy)
		ntx_list_remove(&vc->busy_entry);
	ntx_list_remove(&vc->entry);
	ntx_auth_free(vc);
	vc->conn = NULL;
	/* failed: nothing it holds counts in the receive context's budget */
	assert(vc->unexp_off_budget || !vc->unexp_bytes);
	if (vc->keeps_unexp && vc->unexp_bytes) {
		vc->zombie = true; /* freed with its last message */
		return;
	}
	free(vc);
}

/* ---- simultaneous connects (DESIGN §3) ------------------------------------ */

/* An order of endpoint names both sides compute alike. */
static int ntx_vc_name_cmp(const struct ntx_addr *a, const struct ntx_addr *b)
{
	uint64_t ka = (uint64_t)a->host << 32 | a->pid;
	uint64_t kb = (uint64_t)b->host << 32 | b->pid;

	if (ka == kb) {
		ka = (uint64_t)a->ep_id << 32 | a->epoch;
		kb = (uint64_t)b->ep_id << 32 | b->epoch;
	}
	return ka < kb ? -1 : ka > kb;
}

/* Our own VC to the peer of 'acc' that still waits for its connection. */
static struct ntx_vc *ntx_vc_connecting(struct ntx_vc *acc)
{
	struct ntx_list *it;

	ntx_list_foreach(&acc->ep->vcs, it) {
		struct ntx_vc *vc = ntx_container_of(it, struct ntx_vc, entry);

		if (vc != acc && vc->state == NTX_VC_CONNECTING &&
		    vc->conn != acc->conn &&
		    ntx_addr_same_ep(&vc->peer, &acc->peer) &&
		    vc->peer.epoch == acc->peer.epoch)
			return vc;
	}
	return NULL;
}

/* The peer's connection crossed ours, which is still connecting. Both
 * sides keep the connection started by the endpoint whose name orders
 * first: the other side moves its backlog (nothing of it has left yet)
 * onto the accepted VC and lets its own connection go, from progress
 * (not inside the back end's poll); the peer's side of it then fails
 * owing nothing. An endpoint that connects to itself (a network back
 * end) accepts its own connection: the two VCs are that connection's
 * two ends, and both stay. */
static void ntx_vc_crossed(struct ntx_vc *acc)
{
	struct ntx_vc *mine = ntx_vc_connecting(acc);
	struct ntx_ep *ep = acc->ep;

	if (!mine || ntx_vc_name_cmp(&ep->name, &acc->peer) <= 0)
		return;
	while (!ntx_list_empty(&mine->backlog)) {
		struct ntx_req *r = ntx_container_of(ntx_list_first(&mine->backlog),
						     struct ntx_req, entry);

		ntx_list_remove(&r->entry);
		r->vc = acc;
		ntx_vc_backlog(acc, r, false);
	}
	acc->ctrl_queued += mine->ctrl_queued;
	mine->ctrl_queued = 0;
	acc->fi_addr = mine->fi_addr;
	if (mine->key != FI_ADDR_NOTAVAIL &&
	    ntx_idtab_get(&ep->vc_tab, mine->key) == mine) {
		ntx_idtab_set(&ep->vc_tab, mine->key, acc);
		acc->key = mine->key;
	}
	mine->state = NTX_VC_ERROR; /* owes nothing: reaped quietly */
	mine->err = -FI_ECANCELED;
	ep->reap = true;
}

/* ---- back-end callbacks ------------------------------------------------- */

static void *ntx_vc_accept(void *ctx, struct ntx_be_conn *conn,
			   const struct ntx_addr *peer)
{
	struct ntx_ep_be *be = ctx;
	struct ntx_vc *vc;

	ntx_assert_ep_locked(be->ep);
	vc = ntx_vc_new(be->ep, peer);
	if (!vc)
		return NULL;
	vc->ops = be->ops;
	vc->conn = conn;
	if (ntx_auth_init(vc)) {
		ntx_list_remove(&vc->entry);
		free(vc);
		return NULL;
	}
	ntx_auth_begin(vc); /* CONNECTED, or AUTH when a key is involved */
	ntx_vc_send_names(vc);
	ntx_vc_crossed(vc);
	ntx_vc_fi_addr(vc);
	return vc;
}

static void ntx_vc_connected(void *arg)
{
	struct ntx_vc *vc = arg;

	ntx_assert_ep_locked(vc->ep);
	/* a VC given up meanwhile (a crossed connect) stays down */
	if (vc->state != NTX_VC_CONNECTING)
		return;
	ntx_auth_begin(vc);
	ntx_vc_pump(vc);
}

static void ntx_vc_failed(void *arg, int err)
{
	ntx_assert_ep_locked(((struct ntx_vc *)arg)->ep);
	ntx_vc_fail(arg, err);
}

const struct ntx_be_cb ntx_vc_callbacks = {
	.accept = ntx_vc_accept,
	.connected = ntx_vc_connected,
	.recv = ntx_proto_on_recv,
	.recv_small = ntx_proto_on_small,
	.failed = ntx_vc_failed,
};
