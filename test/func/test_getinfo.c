/* fi_getinfo negotiation of ntx through the public API. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_test.h"

/* Hints for ntx's RDM endpoints. */
static struct fi_info *base(void)
{
	struct fi_info *h = fi_allocinfo();

	h->fabric_attr->prov_name = strdup("ntx");
	h->ep_attr->type = FI_EP_RDM;
	return h;
}

static int try(struct fi_info *h, const char *node, const char *svc,
	       uint64_t flags, struct fi_info **out)
{
	struct fi_info *fi = NULL;
	int ret = fi_getinfo(T_VERSION, node, svc, flags, h, &fi);

	fi_freeinfo(h);
	if (out)
		*out = fi;
	else if (fi)
		fi_freeinfo(fi);
	return ret;
}

/* No endpoint type: the RDM entries first (applications take the first
 * entry), then MSG ones of the same domains, then DGRAM ones of the
 * datagram domain. */
Test(getinfo, no_hints_lists_the_shm_and_tcp_domains)
{
	struct fi_info *h = base(), *fi, *it;
	int shm = 0, tcp = 0, rdm = 0, msg = 0, dgram = 0;

	h->ep_attr->type = FI_EP_UNSPEC;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	for (it = fi; it; it = it->next) {
		cr_assert_str_eq(it->fabric_attr->prov_name, "ntx");
		if (it->ep_attr->type != FI_EP_RDM) {
			cr_assert_eq(it->ep_attr->type,
				     dgram ? FI_EP_DGRAM : it->ep_attr->type);
			msg += it->ep_attr->type == FI_EP_MSG;
			dgram += it->ep_attr->type == FI_EP_DGRAM;
			continue;
		}
		cr_assert_eq(msg + dgram, 0, "RDM entries come first");
		rdm++;
		cr_assert_eq(it->fabric_attr->api_version, FI_VERSION(1, 17));
		cr_assert_neq(it->fabric_attr->prov_version, 0);
		cr_assert_geq(it->tx_attr->inject_size, 4096);
		cr_assert_geq(it->ep_attr->max_msg_size, 1ull << 30);
		cr_assert_eq(it->domain_attr->cq_data_size, 8);
		shm += !strcmp(it->domain_attr->name, "shm");
		tcp += !strcmp(it->domain_attr->name, "tcp");
		if (!strcmp(it->domain_attr->name, "shm"))
			cr_assert_not(it->caps & FI_REMOTE_COMM);
	}
	cr_assert_eq(shm, 1);
	cr_assert_eq(tcp, 1);
	cr_assert_eq(msg, rdm, "one MSG entry per RDM one");
	cr_assert_geq(dgram, 1, "DGRAM on udp (and each <dev>-ud)");
	fi_freeinfo(fi);
}

/* FI_NTX_DOMAINS: exactly the domains named, in that order (udp, listed
 * otherwise only when the hints name it, included); unknown names and a
 * name given twice are skipped. */
Test(getinfo, fi_ntx_domains_chooses_and_orders_the_domains)
{
	static const char *want[] = { "udp", "shm", "tcp" };
	struct fi_info *fi, *it;
	size_t n = 0;

	setenv("FI_NTX_DOMAINS", "udp,shm,nosuchdomain,tcp,udp", 1);
	cr_assert_eq(try(base(), NULL, NULL, 0, &fi), 0);
	for (it = fi; it; it = it->next) {
		if (n && !strcmp(it->domain_attr->name, want[n - 1]))
			continue; /* more entries of one domain */
		cr_assert_lt(n, 3, "extra domain %s", it->domain_attr->name);
		cr_assert_str_eq(it->domain_attr->name, want[n]);
		n++;
	}
	cr_assert_eq(n, 3);
	fi_freeinfo(fi);
}

/* FI_NTX_MR_OFFERED=0: offered FI_MR_PROV_KEY, FI_MR_VIRT_ADDR and
 * FI_MR_ENDPOINT are not taken, so the key of a region is the one the
 * application asked for (what fabtests' fi_multi_mr writes to without
 * exchanging keys or binding the regions). */
Test(getinfo, fi_ntx_mr_offered_0_keeps_the_applications_keys)
{
	struct fi_info *h = base(), *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_mr *mr;
	static char buf[64];

	setenv("FI_NTX_MR_OFFERED", "0", 1);
	h->caps = FI_RMA;
	h->domain_attr->mr_mode = FI_MR_ENDPOINT | FI_MR_PROV_KEY |
				  FI_MR_VIRT_ADDR;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->domain_attr->mr_mode, 0);
	cr_assert_eq(fi_fabric(fi->fabric_attr, &fab, NULL), 0);
	cr_assert_eq(fi_domain(fab, fi, &dom, NULL), 0);
	cr_assert_eq(fi_mr_reg(dom, buf, sizeof(buf), FI_REMOTE_WRITE, 0, 1,
			       0, &mr, NULL), 0);
	cr_assert_eq(fi_mr_key(mr), 1);
	fi_close(&mr->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
}

Test(getinfo, capabilities)
{
	struct fi_info *h = base(), *fi;

	h->caps = FI_MSG | FI_TAGGED | FI_MULTI_RECV | FI_SOURCE;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->caps & (FI_RMA | FI_ATOMIC), 0, "not asked for");
	fi_freeinfo(fi);
	h = base();
	h->caps = FI_RMA | FI_RMA_EVENT;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->caps & (FI_RMA | FI_RMA_EVENT), FI_RMA | FI_RMA_EVENT);
	fi_freeinfo(fi);
	h = base();
	h->caps = FI_ATOMIC | FI_FENCE;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->caps & (FI_ATOMIC | FI_FENCE), FI_ATOMIC | FI_FENCE);
	fi_freeinfo(fi);
	h = base();
	h->caps = FI_RMA | FI_TRIGGER;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0, "triggered RMA offered");
	cr_assert(fi->caps & FI_TRIGGER);
	cr_assert(fi->tx_attr->caps & FI_TRIGGER);
	fi_freeinfo(fi);
	h = base();
	h->caps = FI_TAGGED | FI_REMOTE_COMM;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	/* tcp and the verbs devices reach other hosts, shm does not; udp
	 * is listed only when named (Open MPI spreads its local ranks over
	 * every domain of a provider): the verbs devices come first, then
	 * tcp */
	{
		bool tcp = false;

		for (struct fi_info *it = fi; it; it = it->next) {
			cr_assert_str_neq(it->domain_attr->name, "shm");
			cr_assert_str_neq(it->domain_attr->name, "udp",
					  "udp only when named");
			if (!strcmp(it->domain_attr->name, "tcp")) {
				tcp = true;
				cr_assert_null(it->next, "tcp is the last");
			}
		}
		cr_assert(tcp, "tcp is offered");
	}
	fi_freeinfo(fi);
	h = base();
	h->caps = FI_TAGGED | FI_REMOTE_COMM;
	h->domain_attr->name = strdup("udp");
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0, "udp when named");
	cr_assert_str_eq(fi->domain_attr->name, "udp");
	cr_assert_null(fi->next);
	fi_freeinfo(fi);
}

/* A primary cap asked for without its modifiers implies them all
 * (fi_getinfo(3)), in the entry's caps and its tx and rx caps: fabtests'
 * fi_rdm_rma_event binds its counter with the entry's FI_REMOTE_READ and
 * FI_REMOTE_WRITE, and got flags 0 (-FI_EINVAL) from FI_MSG | FI_RMA |
 * FI_RMA_EVENT. Modifiers asked for are all a cap gets. */
Test(getinfo, primary_caps_imply_their_modifiers)
{
	const uint64_t rma = FI_READ | FI_WRITE | FI_REMOTE_READ |
			     FI_REMOTE_WRITE;
	struct fi_cntr_attr ca = { .events = FI_CNTR_EVENTS_COMP };
	struct fi_info *h = base(), *fi, *it;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_cntr *cntr;
	struct fid_ep *ep;

	h->ep_attr->type = FI_EP_UNSPEC;
	h->caps = FI_MSG | FI_RMA | FI_RMA_EVENT;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	for (it = fi; it; it = it->next) {
		if (it->ep_attr->type == FI_EP_DGRAM)
			continue;
		cr_assert_eq(it->caps & (rma | FI_SEND | FI_RECV),
			     rma | FI_SEND | FI_RECV, "%s: caps %#llx",
			     it->domain_attr->name,
			     (unsigned long long)it->caps);
		cr_assert_eq(it->tx_attr->caps & (FI_READ | FI_WRITE | FI_SEND),
			     FI_READ | FI_WRITE | FI_SEND);
		cr_assert_eq(it->rx_attr->caps &
				     (FI_REMOTE_READ | FI_REMOTE_WRITE |
				      FI_RECV | FI_RMA_EVENT),
			     FI_REMOTE_READ | FI_REMOTE_WRITE | FI_RECV |
				     FI_RMA_EVENT);
	}
	fi_freeinfo(fi);
	h = base();
	h->caps = FI_MSG | FI_RECV | FI_ATOMIC | FI_READ;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->caps & (rma | FI_SEND | FI_RECV), FI_READ | FI_RECV,
		     "caps %#llx", (unsigned long long)fi->caps);
	fi_freeinfo(fi);

	/* what fabtests does with the entry */
	h = base();
	h->caps = FI_MSG | FI_RMA | FI_RMA_EVENT;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi_fabric(fi->fabric_attr, &fab, NULL), 0);
	cr_assert_eq(fi_domain(fab, fi, &dom, NULL), 0);
	cr_assert_eq(fi_endpoint(dom, fi, &ep, NULL), 0);
	cr_assert_eq(fi_cntr_open(dom, &ca, &cntr, NULL), 0);
	cr_assert_eq(fi_ep_bind(ep, &cntr->fid,
				fi->caps & (FI_REMOTE_READ | FI_REMOTE_WRITE)),
		     0);
	fi_close(&ep->fid);
	fi_close(&cntr->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
}

Test(getinfo, endpoint_and_domain_attributes)
{
	struct fi_info *h, *fi;

	h = base();
	/* a type past those ntx knows (libfabric 1.x's FI_EP_SOCK_STREAM;
	 * 2.x defines that name as FI_EP_UNSPEC) */
	h->ep_attr->type = (enum fi_ep_type)(FI_EP_RDM + 1);
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->ep_attr->type = FI_EP_DGRAM;
	h->domain_attr->name = strdup("shm");
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA,
		     "DGRAM only on a datagram domain");
	h = base();
	h->domain_attr->name = strdup("shm");
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_null(fi->next, "one domain asked for");
	fi_freeinfo(fi);
	h = base();
	h->domain_attr->name = strdup("nope");
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->fabric_attr->name = strdup("other");
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->addr_format = FI_SOCKADDR_IN6;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->addr_format = FI_SOCKADDR;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->addr_format, FI_SOCKADDR_IN);
	fi_freeinfo(fi);
	h = base();
	h->tx_attr->inject_size = 4096;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), 0);
	h = base();
	h->tx_attr->inject_size = 1 << 20;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->tx_attr->iov_limit = 1000;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	/* iovec limits: 4 unless the hints ask for up to 8 */
	h = base();
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->tx_attr->iov_limit, 4);
	cr_assert_eq(fi->tx_attr->rma_iov_limit, 4);
	cr_assert_eq(fi->rx_attr->iov_limit, 4);
	fi_freeinfo(fi);
	h = base();
	h->tx_attr->iov_limit = h->tx_attr->rma_iov_limit = 8;
	h->rx_attr->iov_limit = 6;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->tx_attr->iov_limit, 8);
	cr_assert_eq(fi->tx_attr->rma_iov_limit, 8);
	cr_assert_eq(fi->rx_attr->iov_limit, 6);
	fi_freeinfo(fi);
	h = base();
	h->rx_attr->iov_limit = 9;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->domain_attr->threading = FI_THREAD_DOMAIN;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->domain_attr->threading, FI_THREAD_DOMAIN);
	fi_freeinfo(fi);
	h = base();
	h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED |
				  FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->domain_attr->mr_mode & FI_MR_LOCAL, 0,
		     "ntx needs no local registration");
	fi_freeinfo(fi);
	h = base();
	h->domain_attr->data_progress = FI_PROGRESS_AUTO;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->domain_attr->data_progress, FI_PROGRESS_AUTO);
	cr_assert_eq(fi->domain_attr->control_progress, FI_PROGRESS_MANUAL);
	fi_freeinfo(fi);
	h = base();
	h->domain_attr->cq_data_size = 16;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	/* scalable endpoints (DESIGN §3): up to 16 contexts of each kind,
	 * RDM only */
	h = base();
	h->ep_attr->tx_ctx_cnt = 4;
	h->ep_attr->rx_ctx_cnt = 4;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_eq(fi->ep_attr->tx_ctx_cnt, 4);
	cr_assert_eq(fi->ep_attr->rx_ctx_cnt, 4);
	cr_assert_eq(fi->domain_attr->max_ep_tx_ctx, 16);
	cr_assert_eq(fi->domain_attr->max_ep_rx_ctx, 16);
	/* naming a receive context is the initiator's capability */
	cr_assert(fi->tx_attr->caps & FI_NAMED_RX_CTX);
	cr_assert_eq(fi->rx_attr->caps & FI_NAMED_RX_CTX, 0);
	fi_freeinfo(fi);
	h = base();
	h->ep_attr->tx_ctx_cnt = 17;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->ep_attr->type = FI_EP_MSG;
	h->ep_attr->rx_ctx_cnt = 2;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->ep_attr->type = FI_EP_MSG;
	h->caps |= FI_NAMED_RX_CTX;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
	h = base();
	h->domain_attr->max_ep_rx_ctx = 32;
	cr_assert_eq(try(h, NULL, NULL, 0, NULL), -FI_ENODATA);
}

Test(getinfo, node_and_service)
{
	struct fi_info *h = base(), *fi;

	h->domain_attr->name = strdup("shm");
	cr_assert_eq(try(h, "localhost", "31001", FI_SOURCE, &fi), 0);
	cr_assert_not_null(fi->src_addr);
	cr_assert_eq(fi->src_addrlen, T_NAMELEN);
	cr_assert_null(fi->dest_addr);
	fi_freeinfo(fi);
	h = base();
	h->domain_attr->name = strdup("shm");
	cr_assert_eq(try(h, "localhost", "31001", 0, &fi), 0);
	cr_assert_not_null(fi->dest_addr);
	fi_freeinfo(fi);
	h = base();
	cr_assert_neq(try(h, "fi_ntx://garbage", NULL, 0, NULL), 0);
	h = base();
	cr_assert_neq(try(h, NULL, "notanumber", 0, NULL), 0);
	h = base();
	h->domain_attr->name = strdup("shm");
	cr_assert_eq(try(h, "192.0.2.77", "5", 0, NULL), -FI_ENODATA,
		     "shm does not reach other hosts");
}

Test(getinfo, fi_info_lists_parameters)
{
	struct fi_param *params;
	int count, found = 0;

	cr_assert_eq(fi_getparams(&params, &count), 0);
	for (int i = 0; i < count; i++)
		found += !strncmp(params[i].name, "FI_NTX_", 7);
	fi_freeparams(params);
	cr_assert_geq(found, 8, "FI_NTX_* parameters are defined");
}

/* The version contract (DESIGN §2, API versions): fi_getinfo at API 1.9,
 * 1.18 and the core's own version finds ntx wherever the core takes the
 * version (a core older than the version refuses it before asking any
 * provider), and each entry carries the version it was asked for. */
Test(getinfo, old_and_new_api_versions_find_ntx)
{
	uint32_t core = fi_version();
	uint32_t want[] = { FI_VERSION(1, 9), FI_VERSION(1, 18), core };

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct fi_info *h = base(), *fi = NULL;
		int ret = fi_getinfo(want[i], NULL, NULL, 0, h, &fi);

		fi_freeinfo(h);
		if (FI_VERSION_LT(core, want[i])) {
			cr_assert_eq(ret, -FI_ENOSYS, "core %u.%u, API %u.%u",
				     FI_MAJOR(core), FI_MINOR(core),
				     FI_MAJOR(want[i]), FI_MINOR(want[i]));
			continue;
		}
		cr_assert_eq(ret, 0, "API %u.%u", FI_MAJOR(want[i]),
			     FI_MINOR(want[i]));
		cr_assert_str_eq(fi->fabric_attr->prov_name, "ntx");
		cr_assert_eq(fi->fabric_attr->api_version, want[i]);
		fi_freeinfo(fi);
	}
}

/* Capability bits ntx does not know are refused at every version:
 * libfabric 2.0 gave bits 45, 46 and 48 new meanings (FI_HMEM_HOST_ALLOC,
 * FI_HMEM_DEVICE_ONLY and FI_VARIABLE_MSG before; FI_TAGGED_DIRECTED_RECV,
 * FI_TAGGED_MULTI_RECV and FI_EXACT_DIRECTED_RECV after), and bit 44
 * (1.x's FI_XPU_TRIGGER) is reserved in 2.x. */
Test(getinfo, unknown_and_reused_capability_bits_are_refused)
{
	uint32_t ver[] = { FI_VERSION(1, 9), fi_version() };
	int bits[] = { 44, 45, 46, 48 };

	for (size_t v = 0; v < 2; v++)
		for (size_t b = 0; b < sizeof(bits) / sizeof(bits[0]); b++) {
			struct fi_info *h = base(), *fi = NULL;
			int ret;

			h->caps = FI_MSG | (1ULL << bits[b]);
			ret = fi_getinfo(ver[v], NULL, NULL, 0, h, &fi);
			fi_freeinfo(h);
			cr_assert_eq(ret, -FI_ENODATA, "bit %d at %u.%u",
				     bits[b], FI_MAJOR(ver[v]),
				     FI_MINOR(ver[v]));
		}
}

/* fi_cq_readerr writes the error entry as the caller's API version lays
 * it out: src_addr (API 1.20) not for a caller of 1.9, whose entry ends
 * before it. */
Test(getinfo, an_old_caller_gets_the_error_entry_of_its_version)
{
	struct fi_info *h = base(), *fi = NULL;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_cq *cq;
	struct fid_av *av;
	struct fid_ep *ep;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	union {
		struct fi_cq_err_entry e;
		unsigned char b[sizeof(struct fi_cq_err_entry) + 64];
	} u;
	size_t old = sizeof(struct fi_cq_err_entry);
	char buf[8];
	ssize_t n = -FI_EAGAIN;

#if FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION) >= FI_VERSION(1, 20)
	old = offsetof(struct fi_cq_err_entry, src_addr);
#endif
	h->caps = FI_MSG;
	h->domain_attr->name = strdup("shm");
	cr_assert_eq(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, h, &fi), 0);
	fi_freeinfo(h);
	cr_assert_eq(fi_fabric(fi->fabric_attr, &fab, NULL), 0);
	cr_assert_eq(fi_domain(fab, fi, &dom, NULL), 0);
	cr_assert_eq(fi_cq_open(dom, &ca, &cq, NULL), 0);
	cr_assert_eq(fi_av_open(dom, &aa, &av, NULL), 0);
	cr_assert_eq(fi_endpoint(dom, fi, &ep, NULL), 0);
	cr_assert_eq(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(ep, &av->fid, 0), 0);
	cr_assert_eq(fi_enable(ep), 0);
	cr_assert_eq(fi_recv(ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC,
			     buf), 0);
	cr_assert_eq(fi_cancel(&ep->fid, buf), 0);
	memset(&u, 0xa5, sizeof(u));
	u.e.err_data = NULL;
	u.e.err_data_size = 0;
	for (int i = 0; i < 100000 && n == -FI_EAGAIN; i++) {
		struct fi_cq_tagged_entry ce;

		n = fi_cq_read(cq, &ce, 1);
		/* through the ops table, as 1.x's fi_cq_readerr calls it
		 * (2.x's inline stores src_addr itself first) */
		if (n == -FI_EAVAIL)
			n = cq->ops->readerr(cq, &u.e, 0);
	}
	cr_assert_eq(n, 1);
	cr_assert_eq(u.e.err, FI_ECANCELED);
	cr_assert_eq(u.e.op_context, buf);
	for (size_t i = old; i < sizeof(u); i++)
		cr_assert_eq(u.b[i], 0xa5, "byte %zu of the entry written", i);
	fi_close(&ep->fid);
	fi_close(&av->fid);
	fi_close(&cq->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
}

/* Open MPI (4.1 and 5.0, common ofi) spreads a host's ranks over the
 * entries alike to the first one, as over NICs; alike includes holding
 * every cap of the first. Asked with caps that name no reach (btl ofi's
 * FI_MSG | FI_RMA | FI_ATOMIC), the network entries still say
 * FI_REMOTE_COMM, so the shm entry, which cannot reach another host, is
 * never alike to a network one listed first. */
Test(getinfo, shm_is_never_alike_to_a_network_domain_listed_first)
{
	struct fi_info *h = base(), *fi, *it;
	bool seen_shm = false;

	h->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	cr_assert_eq(try(h, NULL, NULL, 0, &fi), 0);
	cr_assert_neq(fi->caps & FI_REMOTE_COMM, 0, "%s",
		      fi->domain_attr->name);
	for (it = fi; it; it = it->next) {
		bool shm = !strcmp(it->domain_attr->name, "shm");

		cr_assert_neq(it->caps & FI_LOCAL_COMM, 0);
		cr_assert_eq(!!(it->caps & FI_REMOTE_COMM), !shm, "%s",
			     it->domain_attr->name);
		if (shm)
			cr_assert_neq(fi->caps & ~it->caps, 0,
				      "shm holds every cap of %s",
				      fi->domain_attr->name);
		seen_shm |= shm;
	}
	cr_assert(seen_shm);
	fi_freeinfo(fi);
}
