/*
 * Scalable endpoints (DESIGN §3, "Scalable endpoints"): each context
 * index is an engine endpoint of its own, so threads on different
 * contexts share no lock; transmit and receive context i are two views
 * of engine endpoint i. The scalable endpoint's name lists them all.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

struct ntx_sep_ctx;

struct ntx_sep {
	/* the scalable endpoint's fid: its data calls reach 'idle', an
	 * engine endpoint never enabled, and fail with FI_EOPBADSTATE */
	struct ntx_alias a;
	struct ntx_ep idle;
	struct ntx_domain *domain;
	uint32_t n, tx_cnt, rx_cnt;
	struct ntx_ep *eps[NTX_SEP_CTX_MAX];
	struct ntx_addr names[NTX_SEP_CTX_MAX]; /* eps' names, in order */
	struct ntx_sep_ctx *tx[NTX_SEP_CTX_MAX], *rx[NTX_SEP_CTX_MAX];
	struct ntx_av *av;
	atomic_int ref; /* contexts open */
};

/* A transmit or receive context: its engine endpoint's data tables with
 * its own bindings (its direction only) and operation flags. */
struct ntx_sep_ctx {
	struct ntx_alias a;
	struct ntx_sep *sep;
	uint32_t index;
	bool tx;
	bool enabled;
};

static struct ntx_sep_ctx *ntx_sep_ctx_of(struct fid *fid)
{
	return ntx_container_of(fid, struct ntx_sep_ctx, a.ep.fid);
}

/* ---- contexts ------------------------------------------------------------- */

static int ntx_sep_ctx_close(struct fid *fid)
{
	struct ntx_sep_ctx *c = ntx_sep_ctx_of(fid);
	struct ntx_sep *sep = c->sep;

	ntx_ep_unbind_dir(c->a.real, c->tx);
	if (c->tx)
		sep->tx[c->index] = NULL;
	else
		sep->rx[c->index] = NULL;
	ntx_ref_put(&sep->ref);
	free(c);
	return 0;
}

/* The flags of fi_ep_bind a context of this direction takes. */
static bool ntx_sep_ctx_flags_ok(const struct ntx_sep_ctx *c, struct fid *bfid,
				 uint64_t flags)
{
	uint64_t cq = c->tx ? FI_TRANSMIT : FI_RECV;
	uint64_t cntr = c->tx ? (FI_SEND | FI_READ | FI_WRITE)
			      : (FI_RECV | FI_REMOTE_READ | FI_REMOTE_WRITE);

	if (bfid->fclass == FI_CLASS_CQ)
		return (flags & cq) &&
		       !(flags & ~(cq | FI_SELECTIVE_COMPLETION));
	if (bfid->fclass == FI_CLASS_CNTR)
		return flags && !(flags & ~cntr);
	return false;
}

static int ntx_sep_ctx_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_sep_ctx *c = ntx_sep_ctx_of(fid);

	if (!bfid)
		return -FI_EINVAL;
	if (c->enabled) {
		NTX_WARN(FI_LOG_EP_CTRL, "bind after fi_enable\n");
		return -FI_EOPBADSTATE;
	}
	if (!ntx_sep_ctx_flags_ok(c, bfid, flags)) {
		NTX_WARN(FI_LOG_EP_CTRL, "a %s context binds CQs and counters "
			 "of its direction only\n", c->tx ? "transmit"
							 : "receive");
		return -FI_EINVAL;
	}
	return ntx_ep_bind_obj(c->a.real, bfid, flags);
}

static int ntx_sep_ctx_control(struct fid *fid, int command, void *arg)
{
	struct ntx_sep_ctx *c = ntx_sep_ctx_of(fid);
	uint64_t *flags = arg;

	switch (command) {
	case FI_ENABLE:
		if (!c->sep->av) {
			NTX_WARN(FI_LOG_EP_CTRL, "fi_enable of a context "
				 "without an AV bound to its endpoint\n");
			return -FI_ENOAV;
		}
		c->enabled = true;
		c->a.real->enabled = true;
		ntx_ep_lock(c->a.real);
		ntx_ep_set_paths(c->a.real);
		ntx_ep_unlock(c->a.real);
		return 0;
	case FI_GETOPSFLAG:
	case FI_SETOPSFLAG:
		if (!flags)
			return -FI_EINVAL;
		if (command == FI_GETOPSFLAG)
			*flags = c->tx ? c->a.tx_op_flags : c->a.rx_op_flags;
		else if (c->tx)
			c->a.tx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
		else
			c->a.rx_op_flags = *flags & ~(FI_RECV | FI_TRANSMIT);
		return 0;
	default:
		return -FI_ENOSYS;
	}
}

static ssize_t ntx_sep_ctx_cancel(fid_t fid, void *context)
{
	struct ntx_sep_ctx *c = ntx_sep_ctx_of(fid);

	return c->tx ? -FI_ENOENT : ntx_ep_cancel(&c->a.real->ep.fid, context);
}

struct fi_ops ntx_sep_ctx_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_sep_ctx_close,
	.bind = ntx_sep_ctx_bind,
	.control = ntx_sep_ctx_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_ep ntx_sep_ctx_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ntx_sep_ctx_cancel,
	/* a context is an alias of its engine endpoint (a.real) */
	.getopt = ntx_alias_getopt,
	.setopt = ntx_alias_setopt,
	.tx_ctx = ntx_no_tx_ctx,
	.rx_ctx = ntx_no_rx_ctx,
	.rx_size_left = ntx_alias_rx_size_left,
	.tx_size_left = ntx_alias_tx_size_left,
};

static int ntx_sep_getname(fid_t fid, void *addr, size_t *addrlen);

static int ntx_sep_ctx_getname(fid_t fid, void *addr, size_t *addrlen)
{
	return ntx_sep_getname(&ntx_sep_ctx_of(fid)->sep->a.ep.fid, addr,
			       addrlen);
}

static struct fi_ops_cm ntx_sep_ctx_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ntx_no_setname,
	.getname = ntx_sep_ctx_getname,
	.getpeer = ntx_no_getpeer,
	.connect = ntx_no_connect,
	.listen = ntx_no_listen,
	.accept = ntx_no_accept,
	.reject = ntx_no_reject,
	.shutdown = ntx_no_shutdown,
	.join = ntx_no_join,
};

static int ntx_sep_ctx_open(struct ntx_sep *sep, bool tx, int index,
			    uint64_t op_flags, bool has_attr,
			    struct fid_ep **out, void *context)
{
	uint32_t cnt = tx ? sep->tx_cnt : sep->rx_cnt;
	struct ntx_sep_ctx **slot = tx ? sep->tx : sep->rx;
	struct ntx_sep_ctx *c;
	struct ntx_ep *ep;

	if (!out || index < 0 || (uint32_t)index >= cnt) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s context %d: the endpoint has "
			 "%u\n", tx ? "transmit" : "receive", index, cnt);
		return -FI_EINVAL;
	}
	if (slot[index]) {
		NTX_WARN(FI_LOG_EP_CTRL, "%s context %d is open already\n",
			 tx ? "transmit" : "receive", index);
		return -FI_EBUSY;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -FI_ENOMEM;
	ep = sep->eps[index];
	c->sep = sep;
	c->index = (uint32_t)index;
	c->tx = tx;
	c->a.real = ep;
	c->a.tx_op_flags = tx && has_attr ? op_flags : ep->tx_op_flags;
	c->a.rx_op_flags = !tx && has_attr ? op_flags : ep->rx_op_flags;
	c->a.ep.fid.fclass = tx ? FI_CLASS_TX_CTX : FI_CLASS_RX_CTX;
	c->a.ep.fid.context = context;
	c->a.ep.fid.ops = &ntx_sep_ctx_fi_ops;
	c->a.ep.ops = &ntx_sep_ctx_ep_ops;
	c->a.ep.cm = &ntx_sep_ctx_cm_ops;
	c->a.ep.msg = ep->ep.msg;
	c->a.ep.tagged = ep->ep.tagged;
	c->a.ep.rma = ep->ep.rma;
	c->a.ep.atomic = ep->ep.atomic;
	slot[index] = c;
	ntx_ref_get(&sep->ref);
	*out = &c->a.ep;
	return 0;
}

static int ntx_sep_tx_ctx(struct fid_ep *fep, int index, struct fi_tx_attr *attr,
			  struct fid_ep **out, void *context)
{
	struct ntx_sep *sep = ntx_container_of(fep, struct ntx_sep, a.ep);

	return ntx_sep_ctx_open(sep, true, index, attr ? attr->op_flags : 0,
				attr != NULL, out, context);
}

static int ntx_sep_rx_ctx(struct fid_ep *fep, int index, struct fi_rx_attr *attr,
			  struct fid_ep **out, void *context)
{
	struct ntx_sep *sep = ntx_container_of(fep, struct ntx_sep, a.ep);

	return ntx_sep_ctx_open(sep, false, index, attr ? attr->op_flags : 0,
				attr != NULL, out, context);
}

/* ---- the scalable endpoint ----------------------------------------------- */

static void ntx_sep_free(struct ntx_sep *sep)
{
	for (uint32_t i = 0; i < sep->n; i++)
		if (sep->eps[i])
			fi_close(&sep->eps[i]->ep.fid);
	if (sep->av)
		ntx_ref_put(&sep->av->ref);
	pthread_mutex_destroy(&sep->idle.lock);
	free(sep);
}

static int ntx_sep_close(struct fid *fid)
{
	struct ntx_sep *sep = ntx_container_of(fid, struct ntx_sep, a.ep.fid);

	if (atomic_load(&sep->ref)) {
		NTX_WARN(FI_LOG_EP_CTRL, "scalable endpoint still has open "
			 "contexts\n");
		return -FI_EBUSY;
	}
	ntx_sep_free(sep);
	return 0;
}

static int ntx_sep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_sep *sep = ntx_container_of(fid, struct ntx_sep, a.ep.fid);
	struct ntx_av *av;
	int ret;

	if (!bfid || bfid->fclass != FI_CLASS_AV || flags) {
		NTX_WARN(FI_LOG_EP_CTRL, "a scalable endpoint binds an AV; "
			 "CQs and counters bind to its contexts\n");
		return -FI_EINVAL;
	}
	av = ntx_container_of(bfid, struct ntx_av, av.fid);
	if (sep->av || av->domain != sep->domain)
		return -FI_EINVAL;
	for (uint32_t i = 0; i < sep->n; i++) {
		ret = ntx_ep_bind_obj(sep->eps[i], bfid, 0);
		if (ret)
			return ret; /* not reached: the endpoints are new */
	}
	sep->av = av;
	ntx_ref_get(&av->ref);
	return 0;
}

static int ntx_sep_control(struct fid *fid, int command, void *arg)
{
	struct ntx_sep *sep = ntx_container_of(fid, struct ntx_sep, a.ep.fid);

	if (command != FI_ENABLE)
		return -FI_ENOSYS;
	if (!sep->av) {
		NTX_WARN(FI_LOG_EP_CTRL, "fi_enable without an AV\n");
		return -FI_ENOAV;
	}
	return 0;
}

/* The list of the contexts' names (one name for one context), or with
 * a buffer too small for it -FI_ETOOSMALL and the size it needs. */
static int ntx_sep_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct ntx_sep *sep = ntx_container_of(fid, struct ntx_sep, a.ep.fid);
	struct ntx_addr names[NTX_SEP_CTX_MAX];
	size_t len = sep->n * sizeof(names[0]), want;

	if (!addrlen || (*addrlen && !addr))
		return -FI_EINVAL;
	memcpy(names, sep->names, len);
	ntx_addr_list_mark(names, sep->n);
	want = *addrlen;
	*addrlen = len;
	if (want < len)
		return -FI_ETOOSMALL;
	memcpy(addr, names, len);
	return 0;
}

static struct fi_ops ntx_sep_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_sep_close,
	.bind = ntx_sep_bind,
	.control = ntx_sep_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_ep ntx_sep_ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ntx_no_cancel,
	.getopt = ntx_no_getopt,
	.setopt = ntx_no_setopt,
	.tx_ctx = ntx_sep_tx_ctx,
	.rx_ctx = ntx_sep_rx_ctx,
	.rx_size_left = ntx_no_rx_size_left,
	.tx_size_left = ntx_no_tx_size_left,
};

static struct fi_ops_cm ntx_sep_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = ntx_no_setname,
	.getname = ntx_sep_getname,
	.getpeer = ntx_no_getpeer,
	.connect = ntx_no_connect,
	.listen = ntx_no_listen,
	.accept = ntx_no_accept,
	.reject = ntx_no_reject,
	.shutdown = ntx_no_shutdown,
	.join = ntx_no_join,
};

/* How many contexts of a kind fi_info asks for: 0 means 1. */
static int ntx_sep_cnt(size_t want, uint32_t *cnt)
{
	if (want == FI_SHARED_CONTEXT || want > NTX_SEP_CTX_MAX)
		return -FI_EINVAL;
	*cnt = want ? (uint32_t)want : 1;
	return 0;
}

static int ntx_sep_check(const struct ntx_domain *dom,
			 const struct fi_info *info, struct ntx_sep *sep)
{
	if (!info->ep_attr || (info->ep_attr->type != FI_EP_RDM &&
			       info->ep_attr->type != FI_EP_UNSPEC)) {
		NTX_WARN(FI_LOG_EP_CTRL, "scalable endpoints are FI_EP_RDM\n");
		return -FI_EINVAL;
	}
	if (!ntx_domain_sep_ok(dom)) {
		NTX_WARN(FI_LOG_EP_CTRL, "domain %s has no scalable endpoints "
			 "(FI_SOCKADDR_IN names or a datagram domain)\n",
			 dom->name);
		return -FI_EOPNOTSUPP;
	}
	if (ntx_sep_cnt(info->ep_attr->tx_ctx_cnt, &sep->tx_cnt) ||
	    ntx_sep_cnt(info->ep_attr->rx_ctx_cnt, &sep->rx_cnt)) {
		NTX_WARN(FI_LOG_EP_CTRL, "a scalable endpoint has 1 to %d "
			 "contexts of each kind\n", NTX_SEP_CTX_MAX);
		return -FI_EINVAL;
	}
	return 0;
}

/* Engine endpoint i: an RDM endpoint of one context of each kind; the
 * first takes the service asked for. */
static int ntx_sep_open_ep(struct ntx_sep *sep, struct fid_domain *domain,
			   const struct fi_info *info, uint32_t i)
{
	struct fi_info one = *info;
	struct fi_ep_attr ea = *info->ep_attr;
	struct fid_ep *fep;
	int ret;

	ea.type = FI_EP_RDM;
	ea.tx_ctx_cnt = ea.rx_ctx_cnt = 1;
	one.ep_attr = &ea;
	if (i) {
		one.src_addr = NULL;
		one.src_addrlen = 0;
	}
	ret = ntx_ep_open(domain, &one, &fep, NULL);
	if (ret)
		return ret;
	sep->eps[i] = ntx_container_of(fep, struct ntx_ep, ep);
	sep->names[i] = sep->eps[i]->name;
	return 0;
}

int ntx_sep_open(struct fid_domain *domain, struct fi_info *info,
		 struct fid_ep **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_sep *sep;
	int ret;

	if (!info || !out)
		return -FI_EINVAL;
	sep = calloc(1, sizeof(*sep));
	if (!sep)
		return -FI_ENOMEM;
	ret = ntx_sep_check(dom, info, sep);
	if (ret) {
		free(sep);
		return ret;
	}
	sep->domain = dom;
	ntx_ep_init(&sep->idle, dom, info);
	sep->n = sep->tx_cnt > sep->rx_cnt ? sep->tx_cnt : sep->rx_cnt;
	for (uint32_t i = 0; i < sep->n; i++) {
		ret = ntx_sep_open_ep(sep, domain, info, i);
		if (ret) {
			sep->n = i;
			ntx_sep_free(sep);
			return ret;
		}
	}
	for (uint32_t i = 0; i < sep->n; i++) {
		sep->eps[i]->sep_names = sep->names;
		sep->eps[i]->sep_n = sep->n;
	}
	sep->a.real = &sep->idle;
	sep->a.ep.fid.fclass = FI_CLASS_SEP;
	sep->a.ep.fid.context = context;
	sep->a.ep.fid.ops = &ntx_sep_fi_ops;
	sep->a.ep.ops = &ntx_sep_ep_ops;
	sep->a.ep.cm = &ntx_sep_cm_ops;
	sep->a.ep.msg = &ntx_msg_ops;
	sep->a.ep.tagged = &ntx_tagged_ops;
	sep->a.ep.rma = &ntx_rma_ops;
	sep->a.ep.atomic = &ntx_atomic_ops;
	*out = &sep->a.ep;
	return 0;
}

/* The domain of a scalable endpoint or of one of its contexts. */
struct ntx_domain *ntx_sep_domain(struct fid *fid)
{
	if (fid->fclass == FI_CLASS_SEP)
		return ntx_container_of(fid, struct ntx_sep, a.ep.fid)->domain;
	return ntx_sep_ctx_of(fid)->sep->domain;
}
