/*
 * FI_EP_MSG (DESIGN §3, "MSG endpoints"): a MSG endpoint's connect /
 * accept / shutdown exchange and the CM packets it takes. It rides the
 * engine's VCs as NTX_OP_CM packets: a MSG endpoint is an engine endpoint
 * whose private AV holds its peer. Every CM packet is checked against the
 * state it may arrive in and the id of the connection; anything else fails
 * its VC. Passive endpoints and their requests: ntx_pep.c.
 */
#include "config.h"
#include <netinet/in.h>
#include <stdlib.h>

#include "ntx/ntx.h"
#include "ntx_cm.h"

enum ntx_msg_state {
	NTX_MSG_IDLE,
	NTX_MSG_CONNECTING, /* client: REQ sent */
	NTX_MSG_ACCEPTING,  /* server: ACCEPT sent, ESTAB awaited */
	NTX_MSG_CONNECTED,
	NTX_MSG_DOWN,       /* shut down, refused or failed */
};

/* The connection state of one MSG endpoint (ep->cm_ctx). */
struct ntx_msg {
	struct ntx_ep *ep;
	struct fid_av *av;     /* private: the passive ep asked, the peer */
	enum ntx_msg_state state;
	uint64_t cid;          /* the connection's id, the client's choice */
	fi_addr_t pep_addr;    /* client: the passive endpoint asked */
	struct ntx_addr client; /* server: from the connection request */
	bool from_req;         /* server: opened from a connection request */
	/* server, FI_SOCKADDR_IN: fi_getname gives the passive endpoint's
	 * address, as an accepted TCP socket does */
	bool pep_named;
	struct sockaddr_in pep_sin;
	bool closing;
	bool shut_local;       /* our fi_shutdown ended it */
	bool shut_reported;    /* FI_SHUTDOWN is on the EQ */
	struct ntx_eq_src src; /* on ep->eq once bound */
	struct fid_eq *eq;
};

static const struct ntx_cm_hooks ntx_msg_hooks;

static struct ntx_msg *ntx_msg_of(struct ntx_ep *ep)
{
	return ep->cm == &ntx_msg_hooks ? ep->cm_ctx : NULL;
}

/* ---- events ------------------------------------------------------------- */

void ntx_cm_event(struct fid_eq *eq, uint32_t event, fid_t fid,
		  struct fi_info *info, const void *data, size_t len)
{
	uint8_t buf[sizeof(struct fi_eq_cm_entry) + NTX_CM_DATA_MAX];
	struct fi_eq_cm_entry *e = (void *)buf;

	e->fid = fid;
	e->info = info;
	if (len)
		memcpy(e->data, data, len);
	if (ntx_eq_report(eq, event, buf, sizeof(*e) + len, 0, NULL)) {
		NTX_WARN(FI_LOG_EP_CTRL, "CM event %u lost: no memory\n",
			 event);
		fi_freeinfo(info);
	}
}

/* The connection is over: our fi_shutdown, the peer's, its failure.
 * Each endpoint of a connection that was up hears FI_SHUTDOWN once,
 * whichever side ended it (as rdma_cm's disconnect does). */
static void ntx_msg_down(struct ntx_msg *m, int err)
{
	bool was_up = m->state == NTX_MSG_CONNECTED ||
		      m->state == NTX_MSG_ACCEPTING || m->shut_local;

	m->state = NTX_MSG_DOWN;
	m->ep->msg_dest = FI_ADDR_NOTAVAIL; /* sends: -FI_ENOTCONN */
	/* nothing can arrive any more: posted receives are flushed with
	 * err, as a broken connection's receive queue is (a shared
	 * receive context stays: other connections feed it) */
	if (m->ep->rx == m->ep)
		ntx_proto_fail_posted(m->ep, FI_ADDR_UNSPEC, err);
	if (was_up && !m->shut_reported && m->eq) {
		m->shut_reported = true;
		ntx_cm_event(m->eq, FI_SHUTDOWN, &m->ep->ep.fid, NULL, NULL,
			     0);
	}
}

/* ---- packets of a MSG endpoint ------------------------------------------ */

/* Client: the server's endpoint accepted; its VC is the connection. */
static int ntx_msg_on_accept(struct ntx_msg *m, struct ntx_vc *vc,
			     const void *data, size_t len)
{
	fi_addr_t a;
	int ret;

	ret = fi_av_insert(m->av, &vc->peer, 1, &a, 0, NULL);
	if (ret != 1)
		return ret < 0 ? ret : -FI_EINVAL;
	m->ep->msg_peer = m->ep->msg_dest = a;
	m->state = NTX_MSG_CONNECTED;
	ret = ntx_vc_cm_send(vc, NTX_CM_ESTAB, m->cid, NULL, 0);
	if (ret)
		return ret;
	ntx_cm_event(m->eq, FI_CONNECTED, &m->ep->ep.fid, NULL, data, len);
	return 0;
}

static void ntx_msg_packet(struct ntx_ep *ep, struct ntx_vc *vc,
			   const struct ntx_wire_hdr *h, const void *data,
			   size_t len)
{
	struct ntx_msg *m = ep->cm_ctx;
	bool mine = h->sreq == m->cid;
	bool from_peer = ep->msg_peer != FI_ADDR_NOTAVAIL &&
			 ntx_vc_fi_addr(vc) == ep->msg_peer;
	int ret = -FI_EREMOTEIO;

	if (h->status == NTX_CM_ACCEPT && mine &&
	    m->state == NTX_MSG_CONNECTING) {
		ret = ntx_msg_on_accept(m, vc, data, len);
	} else if (h->status == NTX_CM_REJECT && mine &&
		   m->state == NTX_MSG_CONNECTING &&
		   ntx_vc_fi_addr(vc) == m->pep_addr) {
		m->state = NTX_MSG_DOWN;
		ret = ntx_eq_report_err(m->eq, &ep->ep.fid, FI_ECONNREFUSED,
					data, len);
	} else if (h->status == NTX_CM_ESTAB && mine && from_peer &&
		   m->state == NTX_MSG_ACCEPTING) {
		m->state = NTX_MSG_CONNECTED;
		ntx_cm_event(m->eq, FI_CONNECTED, &ep->ep.fid, NULL, NULL, 0);
		ret = 0;
	} else if (h->status == NTX_CM_SHUTDOWN && mine && from_peer &&
		   m->state != NTX_MSG_CONNECTING) {
		ntx_msg_down(m, FI_ECANCELED);
		ret = 0;
	}
	if (ret) {
		NTX_WARN(FI_LOG_EP_CTRL, "pid %u: CM packet %d out of place: "
			 "connection closed\n", vc->peer.pid, h->status);
		ntx_vc_fail(vc, ret == -FI_EREMOTEIO ? ret : -FI_EIO);
	}
}

static void ntx_msg_vc_failed(struct ntx_ep *ep, struct ntx_vc *vc)
{
	struct ntx_msg *m = ep->cm_ctx;
	fi_addr_t a;

	if (m->closing || m->state == NTX_MSG_IDLE ||
	    (m->state == NTX_MSG_DOWN && !m->shut_local))
		return;
	a = ntx_vc_fi_addr(vc);
	if (m->state == NTX_MSG_CONNECTING && a == m->pep_addr) {
		/* the passive endpoint's side went away unanswered */
		m->state = NTX_MSG_DOWN;
		ntx_eq_report_err(m->eq, &ep->ep.fid, FI_ECONNREFUSED, NULL,
				  0);
	} else if (a != FI_ADDR_NOTAVAIL && a == ep->msg_peer) {
		ntx_msg_down(m, vc->err ? -vc->err : FI_ECANCELED);
	}
}

static const struct ntx_cm_hooks ntx_msg_hooks = {
	.packet = ntx_msg_packet,
	.vc_failed = ntx_msg_vc_failed,
};

/* ---- MSG endpoint operations -------------------------------------------- */

static struct ntx_msg *ntx_msg_fid(struct fid_ep *fep)
{
	return ntx_msg_of(ntx_container_of(fep, struct ntx_ep, ep));
}

int ntx_cm_data_ok(const void *param, size_t len)
{
	if (len > NTX_CM_DATA_MAX || (len && !param)) {
		NTX_WARN(FI_LOG_EP_CTRL, "connection data of %zu bytes (at "
			 "most %d)\n", len, NTX_CM_DATA_MAX);
		return 0;
	}
	return 1;
}

static int ntx_msg_connect(struct fid_ep *fep, const void *addr,
			   const void *param, size_t len)
{
	struct ntx_msg *m = ntx_msg_fid(fep);
	struct ntx_ep *ep = m->ep;
	struct ntx_addr name;
	struct ntx_vc *vc;
	int ret;

	if (!addr || !ntx_cm_data_ok(param, len))
		return -FI_EINVAL;
	if (ep->domain->sockaddr) {
		if (ntx_addr_from_sin(addr, &name))
			return -FI_EINVAL;
		addr = &name;
	} else if (!ntx_addr_valid(addr)) {
		return -FI_EINVAL;
	}
	if (!m->eq)
		return -FI_ENOEQ;
	ntx_ep_lock(ep);
	if (m->state != NTX_MSG_IDLE || m->from_req) {
		ret = -FI_EOPBADSTATE;
		goto unlock;
	}
	ret = fi_av_insert(m->av, addr, 1, &m->pep_addr, 0, NULL);
	if (ret != 1) {
		ret = ret < 0 ? ret : -FI_EINVAL;
		goto unlock;
	}
	m->cid = ntx_random64();
	ret = ntx_vc_get_slot(ep, m->pep_addr, &vc);
	if (!ret)
		ret = ntx_vc_cm_send(vc, NTX_CM_REQ, m->cid, param, len);
	if (!ret)
		m->state = NTX_MSG_CONNECTING;
unlock:
	ntx_ep_unlock(ep);
	return ret;
}

/* The request an accepting endpoint came from is answered: gone from
 * the list (0), or -FI_EINVAL when it was rejected meanwhile. */
static int ntx_msg_take_req(struct ntx_msg *m)
{
	struct ntx_list *it;
	int ret = -FI_EINVAL;

	pthread_mutex_lock(&ntx_creq_lock);
	ntx_list_foreach(&ntx_creqs, it) {
		struct ntx_connreq *c = ntx_container_of(it, struct ntx_connreq,
							 entry);

		if (c->cid == m->cid && ntx_addr_same_ep(&c->client,
							 &m->client)) {
			ntx_creq_free(c);
			ret = 0;
			break;
		}
	}
	pthread_mutex_unlock(&ntx_creq_lock);
	return ret;
}

static int ntx_msg_accept(struct fid_ep *fep, const void *param, size_t len)
{
	struct ntx_msg *m = ntx_msg_fid(fep);
	struct ntx_ep *ep = m->ep;
	struct ntx_vc *vc;
	fi_addr_t a;
	int ret;

	if (!ntx_cm_data_ok(param, len))
		return -FI_EINVAL;
	if (!m->eq)
		return -FI_ENOEQ;
	if (!m->from_req || m->state != NTX_MSG_IDLE)
		return -FI_EOPBADSTATE;
	ret = ntx_msg_take_req(m);
	if (ret)
		return ret;
	ntx_ep_lock(ep);
	ret = fi_av_insert(m->av, &m->client, 1, &a, 0, NULL);
	if (ret != 1) {
		ret = ret < 0 ? ret : -FI_EINVAL;
		goto unlock;
	}
	ep->msg_peer = ep->msg_dest = a;
	ret = ntx_vc_get_slot(ep, a, &vc);
	if (!ret)
		ret = ntx_vc_cm_send(vc, NTX_CM_ACCEPT, m->cid, param, len);
	m->state = ret ? NTX_MSG_DOWN : NTX_MSG_ACCEPTING;
unlock:
	ntx_ep_unlock(ep);
	return ret;
}

static int ntx_msg_shutdown(struct fid_ep *fep, uint64_t flags)
{
	struct ntx_msg *m = ntx_msg_fid(fep);
	struct ntx_ep *ep = m->ep;
	struct ntx_vc *vc;
	int ret = 0;

	if (flags)
		return -FI_EINVAL;
	ntx_ep_lock(ep);
	if (m->state == NTX_MSG_CONNECTED || m->state == NTX_MSG_ACCEPTING) {
		if (!ntx_vc_get_slot(ep, ep->msg_peer, &vc))
			ntx_vc_cm_send(vc, NTX_CM_SHUTDOWN, m->cid, NULL, 0);
		m->shut_local = true;
		ntx_msg_down(m, FI_ECANCELED);
	} else if (m->state != NTX_MSG_DOWN) {
		ret = -FI_ENOTCONN;
	}
	ntx_ep_unlock(ep);
	return ret;
}

/* A name in the domain's format: copied whole, or -FI_ETOOSMALL with
 * the size needed. */
static int ntx_msg_name_out(const void *src, size_t len, void *addr,
			    size_t *addrlen)
{
	size_t room = *addrlen;

	*addrlen = len;
	if (room < len)
		return -FI_ETOOSMALL;
	memcpy(addr, src, len);
	return 0;
}

static int ntx_msg_getpeer(struct fid_ep *fep, void *addr, size_t *addrlen)
{
	struct ntx_msg *m = ntx_msg_fid(fep);
	struct sockaddr_in sin;
	struct ntx_addr peer;
	size_t len = sizeof(peer);
	fi_addr_t at = m->ep->msg_peer;
	int ret;

	if (!addrlen || (*addrlen && !addr))
		return -FI_EINVAL;
	if (at == FI_ADDR_NOTAVAIL)
		return -FI_ENOTCONN;
	/* FI_SOCKADDR_IN: a client's peer is the address it connected to,
	 * as a TCP socket's is, not the accepting endpoint's own port */
	if (m->ep->domain->sockaddr && m->pep_addr != FI_ADDR_NOTAVAIL)
		at = m->pep_addr;
	/* the private AV holds ntx names */
	ret = fi_av_lookup(m->av, at, &peer, &len);
	if (ret)
		return ret;
	if (!m->ep->domain->sockaddr)
		return ntx_msg_name_out(&peer, sizeof(peer), addr, addrlen);
	if (ntx_addr_to_sin(&peer, &sin))
		return -FI_EADDRNOTAVAIL;
	return ntx_msg_name_out(&sin, sizeof(sin), addr, addrlen);
}

static int ntx_msg_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct ntx_ep *ep = ntx_container_of(fid, struct ntx_ep, ep.fid);
	struct ntx_msg *m = ntx_msg_of(ep);

	if (!m || !m->pep_named)
		return ntx_ep_getname(fid, addr, addrlen);
	if (!addrlen || (*addrlen && !addr))
		return -FI_EINVAL;
	return ntx_msg_name_out(&m->pep_sin, sizeof(m->pep_sin), addr,
				addrlen);
}

struct fi_ops_cm ntx_msg_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ntx_no_setname,
	.getname = ntx_msg_getname,
	.getpeer = ntx_msg_getpeer,
	.connect = ntx_msg_connect,
	.listen = ntx_no_listen,
	.accept = ntx_msg_accept,
	.reject = ntx_no_reject,
	.shutdown = ntx_msg_shutdown,
	.join = ntx_no_join,
};

/* ---- MSG endpoint set-up (ntx_ep.c) ------------------------------------- */

/* The name a MSG endpoint asks its back ends for: a server's fi_info
 * carries the passive endpoint's, whose service is taken. */
void ntx_msg_want(const struct fi_info *info, struct ntx_addr *want)
{
	want->service = 0;
	if (info->handle)
		want->port = 0;
	want->flags &= ~NTX_ADDR_F_SERVICE;
}

int ntx_msg_ep_init(struct ntx_ep *ep, const struct fi_info *info,
		    bool from_pep)
{
	struct fi_av_attr attr = { .type = FI_AV_TABLE, .count = 2 };
	struct ntx_connreq *c;
	struct ntx_msg *m;
	int ret;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -FI_ENOMEM;
	m->ep = ep;
	m->pep_addr = FI_ADDR_NOTAVAIL;
	/* a client's handle is the passive endpoint whose name it took
	 * (from_pep: ntx_pep_take_name); any other is a request, looked up,
	 * never read */
	if (info->handle && !from_pep) {
		pthread_mutex_lock(&ntx_creq_lock);
		c = ntx_creq_find(info->handle);
		if (c && c->magic == NTX_CONNREQ_MAGIC) {
			c->taken = true;
			m->cid = c->cid;
			m->client = c->client;
			m->from_req = true;
		}
		pthread_mutex_unlock(&ntx_creq_lock);
		if (!m->from_req) {
			NTX_WARN(FI_LOG_EP_CTRL, "fi_info handle is not a "
				 "pending connection request\n");
			free(m);
			return -FI_EINVAL;
		}
		if (ep->domain->sockaddr && info->src_addr &&
		    info->src_addrlen == sizeof(m->pep_sin)) {
			memcpy(&m->pep_sin, info->src_addr, sizeof(m->pep_sin));
			m->pep_named = true;
		}
	}
	ret = ntx_av_open(&ep->domain->dom, &attr, &m->av, NULL);
	if (ret) {
		free(m);
		return ret;
	}
	ep->av = ntx_container_of(m->av, struct ntx_av, av);
	ep->av->ntx_names = true;
	ntx_ref_get(&ep->av->ref);
	ep->caps &= ~(FI_DIRECTED_RECV | FI_SOURCE | FI_SOURCE_ERR);
	ep->msg_peer = ep->msg_dest = FI_ADDR_NOTAVAIL;
	ep->cm_ctx = m;
	ep->cm = &ntx_msg_hooks;
	ep->ep.cm = &ntx_msg_cm_ops;
	return 0;
}

/* fi_ep_bind of an EQ: reading it progresses the endpoint. */
int ntx_msg_bind_eq(struct ntx_ep *ep, struct fid_eq *eq)
{
	struct ntx_msg *m = ntx_msg_of(ep);

	if (!m)
		return 0;
	if (m->eq)
		return -FI_EINVAL;
	m->eq = eq;
	m->src.ep = ep;
	ntx_eq_src_add(eq, &m->src);
	return 0;
}

/* Before the engine endpoint closes: no events from its VCs' end. */
void ntx_msg_ep_closing(struct ntx_ep *ep)
{
	struct ntx_msg *m = ntx_msg_of(ep);

	if (!m)
		return;
	if (m->eq)
		ntx_eq_src_del(m->eq, &m->src);
	if (m->from_req && m->state == NTX_MSG_IDLE)
		ntx_msg_take_req(m); /* never accepted: gone with it */
	ntx_ep_lock(ep);
	m->closing = true;
	ntx_ep_unlock(ep);
}

void *ntx_msg_ctx(struct ntx_ep *ep)
{
	return ntx_msg_of(ep);
}

/* After it closed (its reference on the private AV dropped). */
void ntx_msg_ep_free(void *ctx)
{
	struct ntx_msg *m = ctx;

	if (!m)
		return;
	fi_close(&m->av->fid);
	free(m);
}

/* FI_OPT_CM_DATA_SIZE of a passive or MSG endpoint. */
int ntx_msg_getopt(fid_t fid, int level, int optname, void *optval,
		   size_t *optlen)
{
	if (level != FI_OPT_ENDPOINT || optname != FI_OPT_CM_DATA_SIZE)
		return -FI_ENOPROTOOPT;
	if (!optval || !optlen || *optlen < sizeof(size_t))
		return -FI_EINVAL;
	*(size_t *)optval = NTX_CM_DATA_MAX;
	*optlen = sizeof(size_t);
	return 0;
}
