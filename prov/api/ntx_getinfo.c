/*
 * fi_getinfo: the negotiation of an application's hints against the
 * entries ntx offers (ntx_getinfo_attr.c), as fi_getinfo(3) specifies:
 * each hint checked, the entry narrowed to it, node and service resolved.
 */
#include "config.h"
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ntx/ntx.h"
#include "ntx_getinfo.h"

/* The operation flags hints may ask for on each side. */
#define NTX_TX_OP_FLAGS                                                    \
	(FI_INJECT | FI_COMPLETION | FI_INJECT_COMPLETE |                  \
	 FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE)
#define NTX_RX_OP_FLAGS (FI_COMPLETION | FI_MULTI_RECV)

/* -FI_ENODATA with a log line saying which hint could not be met. */
#define NTX_NOMATCH(...)                                       \
	do {                                                   \
		NTX_INFO(FI_LOG_CORE, __VA_ARGS__);            \
		return -FI_ENODATA;                            \
	} while (0)

static int ntx_check_caps(uint64_t want, uint64_t have, const char *what)
{
	if (want & ~have)
		NTX_NOMATCH("%s 0x%llx not supported\n", what,
			    (unsigned long long)(want & ~have));
	return 0;
}

static int ntx_check_tx(const struct fi_tx_attr *h, uint64_t caps)
{
	if (!h)
		return 0;
	/* applications often copy all caps into tx_attr: accept ours */
	if (ntx_check_caps(h->caps, NTX_EP_CAPS, "tx caps"))
		return -FI_ENODATA;
	if (h->op_flags & ~NTX_TX_OP_FLAGS)
		NTX_NOMATCH("tx op_flags not supported\n");
	if (h->msg_order & ~ntx_tx_attr.msg_order)
		NTX_NOMATCH("tx msg_order not supported\n");
	if (h->comp_order & ~(NTX_ORDER_NONE))
		NTX_NOMATCH("tx comp_order not supported\n");
	if (h->inject_size > ntx_tx_attr.inject_size)
		NTX_NOMATCH("inject_size %zu too large\n", h->inject_size);
	if (h->iov_limit > NTX_MAX_IOV)
		NTX_NOMATCH("tx iov_limit too large\n");
	if (h->rma_iov_limit > NTX_MAX_IOV)
		NTX_NOMATCH("rma_iov_limit too large\n");
	return 0;
}

static int ntx_check_rx(const struct fi_rx_attr *h)
{
	if (!h)
		return 0;
	if (ntx_check_caps(h->caps, NTX_EP_CAPS, "rx caps"))
		return -FI_ENODATA;
	if (h->op_flags & ~NTX_RX_OP_FLAGS)
		NTX_NOMATCH("rx op_flags not supported\n");
	if (h->msg_order & ~ntx_rx_attr.msg_order)
		NTX_NOMATCH("rx msg_order not supported\n");
	if (h->comp_order & ~(NTX_ORDER_NONE))
		NTX_NOMATCH("rx comp_order not supported\n");
	if (h->iov_limit > NTX_MAX_IOV)
		NTX_NOMATCH("rx iov_limit too large\n");
	return 0;
}

/* A job key in hints: none, or 1 to NTX_AUTH_KEY_MAX bytes. A size
 * without a key asks only for a provider that takes keys. */
static bool ntx_auth_key_ok(const uint8_t *key, size_t len)
{
	return len <= NTX_AUTH_KEY_MAX && (!key || len);
}

static int ntx_check_ep(const struct fi_ep_attr *h)
{
	if (!h)
		return 0;
	if (h->type != FI_EP_UNSPEC && h->type != FI_EP_RDM &&
	    h->type != FI_EP_MSG && h->type != FI_EP_DGRAM)
		NTX_NOMATCH("ep type %d not supported\n", h->type);
	if (h->protocol != FI_PROTO_UNSPEC)
		NTX_NOMATCH("protocol %u not supported\n", h->protocol);
	if (h->max_msg_size > ntx_ep_attr.max_msg_size)
		NTX_NOMATCH("max_msg_size too large\n");
	if (h->msg_prefix_size > NTX_MSG_PREFIX)
		NTX_NOMATCH("msg_prefix_size %zu too large\n",
			    h->msg_prefix_size);
	if (h->max_order_raw_size > ntx_ep_attr.max_order_raw_size ||
	    h->max_order_war_size > ntx_ep_attr.max_order_war_size ||
	    h->max_order_waw_size > ntx_ep_attr.max_order_waw_size)
		NTX_NOMATCH("RMA ordering sizes too large\n");
	if ((h->tx_ctx_cnt > NTX_SEP_CTX_MAX &&
	     h->tx_ctx_cnt != FI_SHARED_CONTEXT) ||
	    (h->rx_ctx_cnt > NTX_SEP_CTX_MAX &&
	     h->rx_ctx_cnt != FI_SHARED_CONTEXT))
		NTX_NOMATCH("scalable endpoints have at most %d contexts\n",
			    NTX_SEP_CTX_MAX);
	if (!ntx_auth_key_ok(h->auth_key, h->auth_key_size))
		NTX_NOMATCH("ep auth_key of %zu bytes (1 to %d)\n",
			    h->auth_key_size, NTX_AUTH_KEY_MAX);
	return 0;
}

static int ntx_check_progress(enum fi_progress p, const char *what)
{
	if (p != FI_PROGRESS_UNSPEC && p != FI_PROGRESS_MANUAL &&
	    p != FI_PROGRESS_AUTO)
		NTX_NOMATCH("%s progress %d not supported\n", what, p);
	return 0;
}

static int ntx_check_domain(const struct fi_domain_attr *h, uint32_t version,
			    const struct ntx_dom_desc *d)
{
	if (!h)
		return 0;
	if (h->name && strcmp(h->name, d->name))
		NTX_NOMATCH("domain %s is not %s\n", h->name, d->name);
	if (ntx_check_progress(h->control_progress, "control") ||
	    ntx_check_progress(h->data_progress, "data"))
		return -FI_ENODATA;
	if (h->av_type != FI_AV_UNSPEC && h->av_type != FI_AV_MAP &&
	    h->av_type != FI_AV_TABLE)
		NTX_NOMATCH("av_type %d not supported\n", h->av_type);
	/* mr_mode bits are what the application can cope with; ntx needs
	 * none of them, so any set is fine (FI_MR_BASIC/SCALABLE included) */
	if (h->mr_key_size > ntx_domain_attr.mr_key_size)
		NTX_NOMATCH("mr_key_size too large\n");
	if (h->cq_data_size > ntx_domain_attr.cq_data_size)
		NTX_NOMATCH("cq_data_size too large\n");
	if (h->max_ep_tx_ctx > NTX_SEP_CTX_MAX ||
	    h->max_ep_rx_ctx > NTX_SEP_CTX_MAX ||
	    h->max_ep_stx_ctx > 1 || h->max_ep_srx_ctx > 1)
		NTX_NOMATCH("endpoint contexts beyond what ntx has\n");
	if (h->mr_iov_limit > ntx_domain_attr.mr_iov_limit)
		NTX_NOMATCH("mr_iov_limit too large\n");
	if (h->caps & ~d->caps)
		NTX_NOMATCH("domain caps not supported by %s\n", d->name);
	if (!ntx_auth_key_ok(h->auth_key, h->auth_key_size))
		NTX_NOMATCH("domain auth_key of %zu bytes (1 to %d)\n",
			    h->auth_key_size, NTX_AUTH_KEY_MAX);
	if (h->tclass != FI_TC_UNSPEC && h->tclass != FI_TC_BEST_EFFORT)
		NTX_NOMATCH("traffic class not supported\n");
	return 0;
}

static int ntx_check_hints(uint32_t version, const struct fi_info *h,
			   const struct ntx_dom_desc *d)
{
	if (!h)
		return 0;
	if (ntx_check_caps(h->caps, NTX_EP_CAPS | d->caps, "caps"))
		return -FI_ENODATA;
	if (h->addr_format != FI_FORMAT_UNSPEC)
		NTX_NOMATCH("addr_format %u not supported\n", h->addr_format);
	if (h->fabric_attr) {
		if (h->fabric_attr->name &&
		    strcmp(h->fabric_attr->name, NTX_FABRIC_NAME))
			NTX_NOMATCH("fabric %s not found\n",
				    h->fabric_attr->name);
	}
	if ((h->src_addr && h->src_addrlen != sizeof(struct ntx_addr)) ||
	    (h->dest_addr && h->dest_addrlen != sizeof(struct ntx_addr)))
		NTX_NOMATCH("address length does not match ntx names\n");
	if (ntx_check_ep(h->ep_attr) || ntx_check_domain(h->domain_attr, version, d) ||
	    ntx_check_tx(h->tx_attr, h->caps) || ntx_check_rx(h->rx_attr))
		return -FI_ENODATA;
	return 0;
}

/* A node is served by the shm domain if it names this host. */
static bool ntx_node_is_local(const char *node)
{
	char host[256];
	struct addrinfo *ai, *it;
	bool local = false;

	if (!strcmp(node, "localhost"))
		return true;
	if (!gethostname(host, sizeof(host)) && !strcmp(node, host))
		return true;
	if (getaddrinfo(node, NULL, NULL, &ai))
		return false;
	for (it = ai; it && !local; it = it->ai_next) {
		if (it->ai_family == AF_INET) {
			struct sockaddr_in *sin = (void *)it->ai_addr;
			local = (ntohl(sin->sin_addr.s_addr) >> 24) == 127;
		} else if (it->ai_family == AF_INET6) {
			struct sockaddr_in6 *sin6 = (void *)it->ai_addr;
			local = IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr);
		}
	}
	freeaddrinfo(ai);
	return local;
}

/* Turns node/service into a name: an fi_ntx:// string, or a local host
 * with a numeric service (resolved to the endpoint bound to it). */
/* IPv4 address of a node name, in network order (0 if none). */
static uint32_t ntx_node_ip4(const char *node)
{
	struct addrinfo hints = { .ai_family = AF_INET }, *ai;
	uint32_t ip = 0;

	if (!getaddrinfo(node, NULL, &hints, &ai)) {
		ip = ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr;
		freeaddrinfo(ai);
	}
	return ip;
}

static int ntx_resolve(const char *node, const char *service,
		       const struct ntx_dom_desc *d, struct ntx_addr *a)
{
	unsigned long svc = 0;
	bool local = true;
	char *end;

	if (node && !strncmp(node, "fi_ntx://", 9)) {
		if (ntx_addr_from_str(node, a))
			NTX_NOMATCH("malformed ntx name %s\n", node);
		return 0;
	}
	if (node && !ntx_node_is_local(node)) {
		if (!d->net)
			NTX_NOMATCH("node %s is not this host\n", node);
		local = false;
	}
	if (service) {
		svc = strtoul(service, &end, 10);
		if (*service == '\0' || *end != '\0' || svc == 0 ||
		    svc > UINT32_MAX)
			NTX_NOMATCH("service %s is not a number\n", service);
	}
	memset(a, 0, sizeof(*a));
	a->magic = NTX_ADDR_MAGIC;
	a->version = NTX_ADDR_VERSION;
	a->flags = NTX_ADDR_F_UNBOUND;
	a->host = local ? ntx_host_id() : NTX_HOST_UNKNOWN;
	a->service = (uint32_t)svc;
	a->win_fd = -1;
	if (d->net && svc <= 65535) {
		a->ip4 = node ? ntx_node_ip4(node) : htonl(INADDR_LOOPBACK);
		a->port = htons((uint16_t)svc);
	}
	if (!local && !a->ip4)
		NTX_NOMATCH("node %s has no IPv4 address\n", node);
	return 0;
}

static int ntx_set_addr(void **dst, size_t *dstlen, const struct ntx_addr *a)
{
	*dst = malloc(sizeof(*a));
	if (!*dst)
		return -FI_ENOMEM;
	memcpy(*dst, a, sizeof(*a));
	*dstlen = sizeof(*a);
	return 0;
}

/* Shared contexts asked for are what the entry offers (fi_ep_bind of an
 * fi_stx_context / fi_srx_context). */
static void ntx_apply_ctx(struct fi_info *fi, const struct fi_ep_attr *h)
{
	if (h && h->tx_ctx_cnt == FI_SHARED_CONTEXT)
		fi->ep_attr->tx_ctx_cnt = FI_SHARED_CONTEXT;
	if (h && h->rx_ctx_cnt == FI_SHARED_CONTEXT)
		fi->ep_attr->rx_ctx_cnt = FI_SHARED_CONTEXT;
}

/* FI_MSG_PREFIX, when the application says it supports it: ntx then
 * takes it (ntx_prefix.c), so that code written for prefix mode runs. */
static void ntx_apply_prefix(struct fi_info *fi, const struct fi_info *h)
{
	uint64_t mode;

	if (!h)
		return;
	mode = h->mode | (h->tx_attr ? h->tx_attr->mode : 0) |
	       (h->rx_attr ? h->rx_attr->mode : 0);
	if (!(mode & FI_MSG_PREFIX))
		return;
	fi->mode |= FI_MSG_PREFIX;
	fi->tx_attr->mode |= FI_MSG_PREFIX;
	fi->rx_attr->mode |= FI_MSG_PREFIX;
	fi->ep_attr->msg_prefix_size = NTX_MSG_PREFIX;
}

#define NTX_RMA_MODS (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)

/* Caps asked for with the modifiers they imply: a primary cap asked for
 * without any of its modifiers has them all (fi_getinfo(3)), and
 * applications look for them in the entry (fabtests binds its RMA
 * counter with the entry's FI_REMOTE_WRITE and FI_REMOTE_READ). */
static uint64_t ntx_caps_implied(uint64_t caps)
{
	if ((caps & (FI_RMA | FI_ATOMIC)) && !(caps & NTX_RMA_MODS))
		caps |= NTX_RMA_MODS;
	if ((caps & (FI_MSG | FI_TAGGED)) && !(caps & (FI_SEND | FI_RECV)))
		caps |= FI_SEND | FI_RECV;
	return caps;
}

/* Narrows the template to what the hints asked for. */
static void ntx_apply_hints(struct fi_info *fi, const struct fi_info *h,
			   uint32_t version)
{
	if (!h)
		return;
	if (h->caps) {
		/* a domain's reach is said whatever the hints ask (secondary
		 * caps a provider may report unasked): Open MPI spreads its
		 * local ranks only over entries whose caps hold the first
		 * entry's, so shm (no FI_REMOTE_COMM) is never taken for a
		 * network domain (DESIGN §2, Registry) */
		uint64_t reach = fi->caps & (FI_LOCAL_COMM | FI_REMOTE_COMM);

		fi->caps = (ntx_caps_implied(h->caps) & fi->caps) | reach;
		if (!(fi->caps & (FI_MSG | FI_TAGGED)))
			fi->caps |= h->caps & (FI_MSG | FI_TAGGED);
		fi->tx_attr->caps &= fi->caps | FI_SEND;
		fi->rx_attr->caps &= fi->caps | FI_RECV;
	}
	if (h->domain_attr) {
		const struct fi_domain_attr *d = h->domain_attr;

		if (d->threading != FI_THREAD_UNSPEC)
			fi->domain_attr->threading = d->threading;
		if (d->av_type != FI_AV_UNSPEC)
			fi->domain_attr->av_type = d->av_type;
		if (d->control_progress != FI_PROGRESS_UNSPEC)
			fi->domain_attr->control_progress = d->control_progress;
		if (d->data_progress != FI_PROGRESS_UNSPEC)
			fi->domain_attr->data_progress = d->data_progress;
		if (d->resource_mgmt != FI_RM_UNSPEC)
			fi->domain_attr->resource_mgmt = d->resource_mgmt;
		/* ntx needs no mr_mode bit; it honours the ones that change
		 * key and address use when the application offers them.
		 * FI_MR_ENDPOINT is never taken: keys are the domain's, valid
		 * through each of its endpoints, as applications that open
		 * several endpoints expect (DESIGN §6) */
		/* the old enum values name whole modes and come back as
		 * they are: FI_MR_BASIC (provider keys, virtual addresses)
		 * and FI_MR_SCALABLE (user keys, offsets) */
		if (d->mr_mode == NTX_MR_BASIC || d->mr_mode == NTX_MR_SCALABLE)
			fi->domain_attr->mr_mode = d->mr_mode;
		else if (FI_VERSION_GE(version, FI_VERSION(1, 5)))
			fi->domain_attr->mr_mode = ntx_params.mr_offered ?
				d->mr_mode & (FI_MR_PROV_KEY |
					      FI_MR_VIRT_ADDR) : 0;
		else
			fi->domain_attr->mr_mode = NTX_MR_SCALABLE;
	} else if (!FI_VERSION_GE(version, FI_VERSION(1, 5))) {
		fi->domain_attr->mr_mode = NTX_MR_SCALABLE;
	}
	/* iovec limits: NTX_IOV_DEFAULT unless the hints ask for more */
	if (h->tx_attr) {
		if (h->tx_attr->iov_limit > fi->tx_attr->iov_limit)
			fi->tx_attr->iov_limit = h->tx_attr->iov_limit;
		if (h->tx_attr->rma_iov_limit > fi->tx_attr->rma_iov_limit)
			fi->tx_attr->rma_iov_limit = h->tx_attr->rma_iov_limit;
		if (h->tx_attr->op_flags)
			fi->tx_attr->op_flags = h->tx_attr->op_flags;
		if (h->tx_attr->msg_order)
			fi->tx_attr->msg_order = h->tx_attr->msg_order;
	}
	if (h->rx_attr) {
		if (h->rx_attr->iov_limit > fi->rx_attr->iov_limit)
			fi->rx_attr->iov_limit = h->rx_attr->iov_limit;
		if (h->rx_attr->op_flags)
			fi->rx_attr->op_flags = h->rx_attr->op_flags;
		if (h->rx_attr->msg_order)
			fi->rx_attr->msg_order = h->rx_attr->msg_order;
	}
	fi->mode = 0;
}

/* A key of the hints goes into the entry (fi_domain and fi_endpoint
 * take it from there); otherwise the entry says how long
 * FI_NTX_AUTH_KEY's is, never what it is. */
static int ntx_copy_key(uint8_t **key, size_t *size, const uint8_t *hkey,
			size_t hsize)
{
	if (!hkey) {
		*key = NULL;
		*size = 0;
		return 0;
	}
	*key = malloc(hsize);
	if (!*key)
		return -FI_ENOMEM;
	memcpy(*key, hkey, hsize);
	*size = hsize;
	return 0;
}

static int ntx_apply_keys(struct fi_info *fi, const struct fi_info *h)
{
	struct fi_domain_attr *d = fi->domain_attr;
	int ret = 0;

	if (h && h->domain_attr && h->domain_attr->auth_key)
		ret = ntx_copy_key(&d->auth_key, &d->auth_key_size,
				   h->domain_attr->auth_key,
				   h->domain_attr->auth_key_size);
	else if (ntx_params.auth_key)
		d->auth_key_size = strnlen(ntx_params.auth_key,
					   NTX_AUTH_KEY_MAX);
	if (!ret && h && h->ep_attr && h->ep_attr->auth_key)
		ret = ntx_copy_key(&fi->ep_attr->auth_key,
				   &fi->ep_attr->auth_key_size,
				   h->ep_attr->auth_key,
				   h->ep_attr->auth_key_size);
	return ret;
}

/* The flag libfabric's utility providers (ofi_rxm) add when they ask
 * the core providers for entries to layer over (OFI_CORE_PROV_ONLY in
 * libfabric's ofi.h). */
#define NTX_GETINFO_FOR_UTIL (1ULL << 59)

/* What the hints ask of a MSG or DGRAM endpoint that it has not. */
static int ntx_check_type(const struct fi_info *hints, enum fi_ep_type type)
{
	if (!hints)
		return 0;
	if (type == FI_EP_MSG && (hints->caps & NTX_MSG_NO_CAPS))
		NTX_NOMATCH("MSG endpoints: caps 0x%llx not supported\n",
			    (unsigned long long)(hints->caps &
						 NTX_MSG_NO_CAPS));
	if (type == FI_EP_DGRAM && (hints->caps & ~NTX_DGRAM_CAPS))
		NTX_NOMATCH("DGRAM endpoints: caps 0x%llx not supported\n",
			    (unsigned long long)(hints->caps &
						 ~NTX_DGRAM_CAPS));
	if (type == FI_EP_DGRAM && hints->ep_attr &&
	    hints->ep_attr->max_msg_size > NTX_DGRAM_MAX)
		NTX_NOMATCH("DGRAM max_msg_size too large\n");
	return 0;
}

/* Scalable endpoints (DESIGN §3): RDM entries of domains whose names can
 * list contexts, with ntx names. */
static bool ntx_info_sep(const struct ntx_dom_desc *d, enum fi_ep_type type,
			 const struct fi_info *hints)
{
	return d->sep && type == FI_EP_RDM &&
	       !(hints && (hints->addr_format == FI_SOCKADDR_IN ||
			   hints->addr_format == FI_SOCKADDR));
}

static bool ntx_ctx_cnt_many(size_t cnt)
{
	return cnt > 1 && cnt != FI_SHARED_CONTEXT;
}

static int ntx_check_sep(const struct fi_info *hints,
			 const struct ntx_dom_desc *d, enum fi_ep_type type)
{
	const struct fi_ep_attr *e = hints ? hints->ep_attr : NULL;
	const struct fi_domain_attr *da = hints ? hints->domain_attr : NULL;

	if (ntx_info_sep(d, type, hints))
		return 0;
	if ((hints && (hints->caps & FI_NAMED_RX_CTX)) ||
	    (e && (ntx_ctx_cnt_many(e->tx_ctx_cnt) ||
		   ntx_ctx_cnt_many(e->rx_ctx_cnt))) ||
	    (da && (da->max_ep_tx_ctx > 1 || da->max_ep_rx_ctx > 1)))
		NTX_NOMATCH("scalable endpoints are RDM ones, with ntx "
			    "names, not on %s\n", d->name);
	return 0;
}

/* Contexts an RDM entry offers, and those the hints ask for. */
static void ntx_apply_sep(struct fi_info *fi, const struct fi_info *hints,
			  const struct ntx_dom_desc *d, enum fi_ep_type type)
{
	const struct fi_ep_attr *e = hints ? hints->ep_attr : NULL;

	if (!ntx_info_sep(d, type, hints)) {
		fi->caps &= ~FI_NAMED_RX_CTX;
		fi->rx_attr->caps &= ~FI_NAMED_RX_CTX;
		fi->tx_attr->caps &= ~FI_NAMED_RX_CTX;
		return;
	}
	fi->domain_attr->max_ep_tx_ctx = NTX_SEP_CTX_MAX;
	fi->domain_attr->max_ep_rx_ctx = NTX_SEP_CTX_MAX;
	if (e && ntx_ctx_cnt_many(e->tx_ctx_cnt))
		fi->ep_attr->tx_ctx_cnt = e->tx_ctx_cnt;
	if (e && ntx_ctx_cnt_many(e->rx_ctx_cnt))
		fi->ep_attr->rx_ctx_cnt = e->rx_ctx_cnt;
}


static int ntx_getinfo_dom_sin(uint32_t version, const char *node,
			       const char *service, uint64_t flags,
			       const struct fi_info *hints,
			       const struct ntx_dom_desc *d,
			       enum fi_ep_type type, struct fi_info **info);

static int ntx_getinfo_dom(uint32_t version, const char *node,
			   const char *service, uint64_t flags,
			   const struct fi_info *hints,
			   const struct ntx_dom_desc *d,
			   enum fi_ep_type type, struct fi_info **info)
{
	struct ntx_addr addr;
	struct fi_info *fi;
	int ret;

	if (hints && (hints->addr_format == FI_SOCKADDR_IN ||
		      hints->addr_format == FI_SOCKADDR))
		return ntx_getinfo_dom_sin(version, node, service, flags,
					   hints, d, type, info);
	ret = ntx_check_hints(version, hints, d);
	if (!ret)
		ret = ntx_check_type(hints, type);
	if (!ret)
		ret = ntx_check_sep(hints, d, type);
	if (ret)
		return ret;
	if (hints && hints->src_addr && !ntx_addr_valid(hints->src_addr))
		NTX_NOMATCH("src_addr is not an ntx name\n");
	if (hints && hints->dest_addr && !ntx_addr_valid(hints->dest_addr))
		NTX_NOMATCH("dest_addr is not an ntx name\n");
	if (node || service) {
		ret = ntx_resolve(node, service, d, &addr);
		if (ret)
			return ret;
	}
	fi = ntx_info_template(d, version);
	if (!fi)
		return -FI_ENOMEM;
	ntx_info_type(fi, type);
	ntx_apply_hints(fi, hints, version);
	ntx_apply_ctx(fi, hints ? hints->ep_attr : NULL);
	ntx_apply_sep(fi, hints, d, type);
	ntx_apply_prefix(fi, hints);
	ret = ntx_apply_keys(fi, hints);
	if (ret) {
		fi_freeinfo(fi);
		return ret;
	}

	if ((node || service) && (flags & FI_SOURCE)) {
		/* no node: listen on every address, not only loopback */
		if (!node)
			addr.ip4 = 0;
		ret = ntx_set_addr(&fi->src_addr, &fi->src_addrlen, &addr);
	}
	else if (node || service)
		ret = ntx_set_addr(&fi->dest_addr, &fi->dest_addrlen, &addr);
	if (!ret && hints && hints->src_addr && !fi->src_addr)
		ret = ntx_set_addr(&fi->src_addr, &fi->src_addrlen,
				   hints->src_addr);
	if (!ret && hints && hints->dest_addr && !fi->dest_addr)
		ret = ntx_set_addr(&fi->dest_addr, &fi->dest_addrlen,
				   hints->dest_addr);
	if (!ret && !fi->src_addr) {
		/* the name an endpoint opened from this entry will have,
		 * with its process-specific parts still unset */
		ntx_resolve(NULL, NULL, d, &addr);
		addr.ip4 = 0;
		addr.port = 0;
		ret = ntx_set_addr(&fi->src_addr, &fi->src_addrlen, &addr);
	}
	if (ret) {
		fi_freeinfo(fi);
		return ret;
	}
	/* a client's passive endpoint, whose name its endpoint takes */
	fi->handle = hints ? hints->handle : NULL;
	*info = fi;
	return 0;
}

/* ---- FI_SOCKADDR_IN names (DESIGN §3, "Address formats") ---------------- */

/* The domains whose endpoints can be named by an IPv4 address and a
 * service number: shm, tcp and udp (a verbs or ud endpoint takes no
 * service). */
static bool ntx_dom_takes_sockaddr(const struct ntx_dom_desc *d)
{
	return !d->net || !strcmp(d->name, "tcp") || !strcmp(d->name, "udp");
}

/* A hint's address in FI_SOCKADDR(_IN) as an ntx name with only IP and
 * service (either may be 0: a source that takes any). */
static int ntx_sin_in(const void *addr, size_t len, struct ntx_addr *a)
{
	const struct sockaddr_in *sin = addr;

	if (len < sizeof(*sin) || sin->sin_family != AF_INET)
		NTX_NOMATCH("address is not AF_INET\n");
	memset(a, 0, sizeof(*a));
	a->magic = NTX_ADDR_MAGIC;
	a->version = NTX_ADDR_VERSION;
	a->flags = NTX_ADDR_F_UNBOUND;
	a->win_fd = -1;
	a->ip4 = sin->sin_addr.s_addr;
	a->port = sin->sin_port;
	a->service = ntohs(sin->sin_port);
	a->host = !a->ip4 || ntx_ip4_is_local(a->ip4) ? ntx_host_id()
						       : NTX_HOST_UNKNOWN;
	return 0;
}

/* An entry's address, ours, rewritten as a struct sockaddr_in: a
 * destination on this host without an IPv4 address (shm) is loopback, a
 * source without one takes any. */
static int ntx_sin_out(void **addr, size_t *len, bool src)
{
	const struct ntx_addr *a = *addr;
	struct sockaddr_in *sin;

	if (!a)
		return 0;
	if (a->service > 65535)
		NTX_NOMATCH("service %u is not a port\n", a->service);
	sin = calloc(1, sizeof(*sin));
	if (!sin)
		return -FI_ENOMEM;
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)a->service);
	sin->sin_addr.s_addr = a->ip4;
	if (!a->ip4 && !src && a->host == ntx_host_id())
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	free(*addr);
	*addr = sin;
	*len = sizeof(*sin);
	return 0;
}

/* Hints asking for FI_SOCKADDR(_IN): the same entry made from hints with
 * our names, its addresses then rewritten. */
static int ntx_getinfo_dom_sin(uint32_t version, const char *node,
			       const char *service, uint64_t flags,
			       const struct fi_info *hints,
			       const struct ntx_dom_desc *d,
			       enum fi_ep_type type, struct fi_info **info)
{
	struct fi_info h = *hints, *fi;
	struct ntx_addr src, dst;
	int ret;

	if (!ntx_dom_takes_sockaddr(d))
		NTX_NOMATCH("domain %s has no FI_SOCKADDR_IN names\n", d->name);
	if ((hints->src_addr && ntx_sin_in(hints->src_addr,
					   hints->src_addrlen, &src)) ||
	    (hints->dest_addr && ntx_sin_in(hints->dest_addr,
					    hints->dest_addrlen, &dst)))
		return -FI_ENODATA;
	h.addr_format = FI_FORMAT_UNSPEC;
	h.src_addr = hints->src_addr ? &src : NULL;
	h.dest_addr = hints->dest_addr ? &dst : NULL;
	h.src_addrlen = h.dest_addrlen = sizeof(struct ntx_addr);
	ret = ntx_getinfo_dom(version, node, service, flags, &h, d, type, &fi);
	if (ret)
		return ret;
	fi->addr_format = FI_SOCKADDR_IN;
	ret = ntx_sin_out(&fi->src_addr, &fi->src_addrlen, true);
	if (!ret)
		ret = ntx_sin_out(&fi->dest_addr, &fi->dest_addrlen, false);
	if (ret) {
		fi_freeinfo(fi);
		return ret;
	}
	*info = fi;
	return 0;
}

int ntx_getinfo(uint32_t version, const char *node, const char *service,
		uint64_t flags, const struct fi_info *hints,
		struct fi_info **info)
{
	struct fi_info *head = NULL, **tail = &head, *fi;
	const char *dname = hints && hints->domain_attr
				    ? hints->domain_attr->name : NULL;
	struct ntx_dom_desc doms[NTX_MAX_DOMS];
	size_t ndoms;
	enum fi_ep_type want = hints && hints->ep_attr ? hints->ep_attr->type
						       : FI_EP_UNSPEC;
	/* RDM entries first: applications that ask for no type take the
	 * first entry */
	enum fi_ep_type types[3] = { FI_EP_RDM, FI_EP_MSG, FI_EP_DGRAM };
	/* utility providers layer over MSG (ofi_rxm) and DGRAM (ofi_rxd) */
	int ntypes = (flags & NTX_GETINFO_FOR_UTIL) && !ntx_params.rxm ? 1 : 3;
	int ret = -FI_ENODATA;

	flags &= ~NTX_GETINFO_FOR_UTIL;
	for (int t = 0; t < ntypes && ret != -FI_ENOMEM; t++) {
		if (want != FI_EP_UNSPEC && want != types[t])
			continue;
		ndoms = ntx_doms(doms, dname, types[t]);
		for (size_t i = 0; i < ndoms; i++) {
			ret = ntx_getinfo_dom(version, node, service, flags,
					      hints, &doms[i], types[t], &fi);
			if (ret == -FI_ENOMEM)
				break;
			if (ret)
				continue;
			*tail = fi;
			tail = &fi->next;
		}
	}
	if (!head) {
		return ret == -FI_ENOMEM ? ret : -FI_ENODATA;
	}
	if (ret == -FI_ENOMEM) {
		fi_freeinfo(head);
		return ret;
	}
	*info = head;
	return 0;
}
