/*
 * fi_getinfo, the entries ntx offers: each domain it lists and the
 * attributes of its entry before any hints narrow them. Only what works is
 * advertised; ntx_getinfo.c matches an application's hints against this.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"
#include "ntx/ntx_backend.h"
#include "ntx_getinfo.h"

/* receive-side and transmit-side only capabilities */
#define NTX_RX_ONLY_CAPS                                                   \
	(FI_RECV | FI_DIRECTED_RECV | FI_MULTI_RECV | FI_SOURCE |           \
	 FI_SOURCE_ERR | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RMA_EVENT)
#define NTX_TX_ONLY_CAPS \
	(FI_SEND | FI_READ | FI_WRITE | FI_FENCE | FI_NAMED_RX_CTX)
#define NTX_DOMAIN_CAPS (FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV)
#define NTX_CAPS (NTX_EP_CAPS | NTX_DOMAIN_CAPS)

/* Every domain ntx has: the network back ends' in registry order (verbs
 * devices, tcp, then the named-only ones such as udp), then shm. */
static size_t ntx_doms_all(struct ntx_dom_desc *d, bool *named_only)
{
	struct ntx_be_domain v[NTX_MAX_DOMS - 1];
	int nv = ntx_be_domains(v, NTX_MAX_DOMS - 1);
	size_t n = 0;

	memset(d, 0, NTX_MAX_DOMS * sizeof(*d));
	for (int i = 0; i < nv; i++, n++) {
		memcpy(d[n].name, v[i].name, sizeof(d[n].name));
		d[n].net = true;
		d[n].caps = FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV;
		d[n].ep_cnt = v[i].ep_cnt;
		d[n].cq_cnt = v[i].cq_cnt;
		d[n].mr_cnt = v[i].mr_cnt;
		d[n].tx_size = v[i].tx_size;
		d[n].rx_size = v[i].rx_size;
		d[n].datagram = v[i].datagram;
		d[n].sep = !ntx_be_for_domain(v[i].name) ||
			   !ntx_be_for_domain(v[i].name)->ops->names_use_flags;
		named_only[n] = v[i].named_only;
	}
	strcpy(d[n].name, NTX_DOMAIN_SHM);
	d[n].caps = FI_LOCAL_COMM | FI_SHARED_AV;
	d[n].sep = true;
	named_only[n] = false;
	return n + 1;
}

/* FI_NTX_DOMAINS: the domains it names, in its order (a name twice or
 * unknown is skipped). */
static size_t ntx_doms_named(struct ntx_dom_desc *d,
			     const struct ntx_dom_desc *all, size_t nall,
			     const char *list)
{
	bool taken[NTX_MAX_DOMS] = { false };
	size_t n = 0;

	while (*list) {
		size_t len = strcspn(list, ",");
		bool found = false;

		for (size_t i = 0; i < nall; i++) {
			if (strlen(all[i].name) != len ||
			    strncmp(all[i].name, list, len))
				continue;
			found = true;
			if (!taken[i])
				d[n++] = all[i];
			taken[i] = true;
		}
		if (!found && len)
			NTX_INFO(FI_LOG_CORE, "FI_NTX_DOMAINS: no domain "
				 "%.*s\n", (int)len, list);
		list += len + (list[len] == ',');
	}
	return n;
}

/* Domains that reach every peer come first: applications (MPICH's
 * ch4:ofi) take the first entry and copy its capabilities, and shm
 * cannot reach another host. FI_NTX_DOMAINS chooses and orders them;
 * without it every network domain (a named-only one, such as udp, only
 * when the hints name it), then shm. */
size_t ntx_doms(struct ntx_dom_desc *d, const char *want,
		enum fi_ep_type type)
{
	struct ntx_dom_desc all[NTX_MAX_DOMS];
	bool named_only[NTX_MAX_DOMS];
	size_t nall = ntx_doms_all(all, named_only), n = 0;

	memset(d, 0, NTX_MAX_DOMS * sizeof(*d));
	if (type == FI_EP_DGRAM) { /* the datagram domains, named or not */
		for (size_t i = 0; i < nall; i++)
			if (all[i].datagram)
				d[n++] = all[i];
		return n;
	}
	if (ntx_params.domains && *ntx_params.domains)
		return ntx_doms_named(d, all, nall, ntx_params.domains);
	for (size_t i = 0; i < nall; i++)
		if (!named_only[i] || (want && !strcmp(want, all[i].name)))
			d[n++] = all[i];
	return n;
}

/* The target runs one-sided packets in arrival order and places eager
 * and rendezvous data in match order; rendezvous data is pulled after
 * later packets may have run, so RAS and WAS are not offered. */
#define NTX_MSG_ORDER                                                      \
	(FI_ORDER_SAS | FI_ORDER_RAR | FI_ORDER_RAW | FI_ORDER_WAR |        \
	 FI_ORDER_WAW | FI_ORDER_SAR | FI_ORDER_SAW | FI_ORDER_RMA_RAR |     \
	 FI_ORDER_RMA_RAW | FI_ORDER_RMA_WAR | FI_ORDER_RMA_WAW |            \
	 FI_ORDER_ATOMIC_RAR | FI_ORDER_ATOMIC_RAW | FI_ORDER_ATOMIC_WAR |   \
	 FI_ORDER_ATOMIC_WAW)
#define NTX_INJECT_SIZE 4096
#define NTX_MAX_MSG_SIZE (1ull << 32)

const struct fi_tx_attr ntx_tx_attr = {
	.caps = NTX_EP_CAPS & ~NTX_RX_ONLY_CAPS,
	.op_flags = 0,
	.msg_order = NTX_MSG_ORDER,
	.comp_order = NTX_ORDER_NONE,
	.inject_size = NTX_INJECT_SIZE,
	.size = 1024,
	.iov_limit = NTX_IOV_DEFAULT,
	.rma_iov_limit = NTX_IOV_DEFAULT,
};

const struct fi_rx_attr ntx_rx_attr = {
	.caps = NTX_EP_CAPS & ~NTX_TX_ONLY_CAPS,
	.op_flags = 0,
	.msg_order = NTX_MSG_ORDER,
	.comp_order = NTX_ORDER_NONE,
	.total_buffered_recv = 0,
	.size = 1024,
	.iov_limit = NTX_IOV_DEFAULT,
};

const struct fi_ep_attr ntx_ep_attr = {
	.type = FI_EP_RDM,
	.protocol = FI_PROTO_UNSPEC,
	.protocol_version = 1,
	.max_msg_size = NTX_MAX_MSG_SIZE,
	.msg_prefix_size = 0,
	/* data is placed in order for any size (see NTX_MSG_ORDER) */
	.max_order_raw_size = NTX_MAX_MSG_SIZE,
	.max_order_war_size = NTX_MAX_MSG_SIZE,
	.max_order_waw_size = NTX_MAX_MSG_SIZE,
	.mem_tag_format = ~0ULL, /* all 64 tag bits match */
	.tx_ctx_cnt = 1,
	.rx_ctx_cnt = 1,
};

const struct fi_domain_attr ntx_domain_attr = {
	.threading = FI_THREAD_SAFE,
	.control_progress = FI_PROGRESS_MANUAL,
	.data_progress = FI_PROGRESS_MANUAL,
	.resource_mgmt = FI_RM_ENABLED,
	.av_type = FI_AV_UNSPEC,
	.mr_mode = 0,
	.mr_key_size = sizeof(uint64_t),
	.cq_data_size = sizeof(uint64_t),
	.cq_cnt = 1024,
	.ep_cnt = 1024,
	.tx_ctx_cnt = 1024,
	.rx_ctx_cnt = 1024,
	.max_ep_tx_ctx = 1,
	.max_ep_rx_ctx = 1,
	.max_ep_stx_ctx = 1,
	.max_ep_srx_ctx = 1,
	.cntr_cnt = 1024,
	.mr_iov_limit = NTX_MAX_IOV,
	.caps = NTX_DOMAIN_CAPS,
	.mode = 0,
	.max_err_data = sizeof(struct ntx_addr),
	.mr_cnt = 65536,
};

static const struct fi_fabric_attr ntx_fabric_attr = {
	.prov_version = NTX_PROV_VERSION,
};

struct fi_info *ntx_info_template(const struct ntx_dom_desc *d,
				  uint32_t version)
{
	struct fi_info *fi = fi_allocinfo();

	if (!fi)
		return NULL;
	fi->caps = NTX_EP_CAPS | d->caps;
	fi->mode = 0;
	fi->addr_format = FI_FORMAT_UNSPEC;
	*fi->tx_attr = ntx_tx_attr;
	*fi->rx_attr = ntx_rx_attr;
	*fi->ep_attr = ntx_ep_attr;
	*fi->domain_attr = ntx_domain_attr;
	*fi->fabric_attr = ntx_fabric_attr;
	fi->domain_attr->caps = d->caps;
	fi->domain_attr->name = strdup(d->name);
	if (d->ep_cnt && d->ep_cnt < fi->domain_attr->ep_cnt)
		fi->domain_attr->ep_cnt = fi->domain_attr->tx_ctx_cnt =
			fi->domain_attr->rx_ctx_cnt = d->ep_cnt;
	if (d->cq_cnt && d->cq_cnt < fi->domain_attr->cq_cnt)
		fi->domain_attr->cq_cnt = d->cq_cnt;
	if (d->mr_cnt && d->mr_cnt < fi->domain_attr->mr_cnt)
		fi->domain_attr->mr_cnt = d->mr_cnt;
	if (d->tx_size && d->tx_size < fi->tx_attr->size)
		fi->tx_attr->size = d->tx_size;
	if (d->rx_size && d->rx_size < fi->rx_attr->size)
		fi->rx_attr->size = d->rx_size;
	fi->fabric_attr->name = strdup(NTX_FABRIC_NAME);
	fi->fabric_attr->prov_name = NULL; /* filled in by libfabric */
	fi->fabric_attr->api_version = version;
	fi->nic = NULL;
	if (!fi->domain_attr->name || !fi->fabric_attr->name) {
		fi_freeinfo(fi);
		return NULL;
	}
	return fi;
}

/* The template of an RDM entry made a MSG or DGRAM one. */
void ntx_info_type(struct fi_info *fi, enum fi_ep_type type)
{
	fi->ep_attr->type = type;
	if (type == FI_EP_MSG) {
		fi->caps &= ~NTX_MSG_NO_CAPS;
		fi->rx_attr->caps &= ~NTX_MSG_NO_CAPS;
	} else if (type == FI_EP_DGRAM) {
		fi->ep_attr->max_msg_size = NTX_DGRAM_MAX;
		fi->ep_attr->max_order_raw_size = 0;
		fi->ep_attr->max_order_war_size = 0;
		fi->ep_attr->max_order_waw_size = 0;
		fi->caps &= NTX_DGRAM_CAPS;
		fi->tx_attr->caps &= NTX_DGRAM_CAPS;
		fi->rx_attr->caps &= NTX_DGRAM_CAPS;
		fi->tx_attr->inject_size = NTX_DGRAM_MAX;
		fi->tx_attr->msg_order = fi->rx_attr->msg_order = FI_ORDER_SAS;
	}
}
