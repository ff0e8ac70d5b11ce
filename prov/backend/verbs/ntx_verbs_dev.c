/*
 * Devices of the verbs back end (DESIGN §5): every verbs device with an
 * active port 1 and an IPv4 address (rdma_cm needs one) is a domain, with
 * the limits read from the device.
 */
#include "config.h"
#include <stdio.h>
#include <string.h>

#include "ntx_verbs.h"

/* IPv4 address of a port from its RoCE GID table (v4-mapped entries). */
static uint32_t ntx_vb_port_ip4(struct ibv_context *ctx, uint8_t port,
				int gids)
{
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0,
					      0, 0, 0xff, 0xff };
	union ibv_gid gid;
	uint32_t ip;

	for (int i = 0; i < gids; i++) {
		if (ibv_query_gid(ctx, port, i, &gid))
			break;
		if (!memcmp(gid.raw, v4mapped, sizeof(v4mapped))) {
			memcpy(&ip, gid.raw + 12, sizeof(ip));
			return ip;
		}
	}
	return 0;
}

int ntx_verbs_devices(struct ntx_vb_devinfo *out, int max)
{
	struct ibv_device **list;
	int n = 0, cnt = 0;

	list = ibv_get_device_list(&cnt);
	if (!list)
		return 0;
	for (int i = 0; i < cnt && n < max; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		struct ibv_port_attr pa;
		struct ntx_vb_devinfo *d = &out[n];

		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da) || ibv_query_port(ctx, 1, &pa)) {
			ibv_close_device(ctx);
			continue;
		}
		memset(d, 0, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s",
			 ibv_get_device_name(list[i]));
		d->ip4 = ntx_vb_port_ip4(ctx, 1, pa.gid_tbl_len);
		d->active = pa.state == IBV_PORT_ACTIVE;
		d->max_cqe = (uint32_t)da.max_cqe;
		d->max_qp = (uint32_t)da.max_qp;
		d->max_qp_wr = (uint32_t)da.max_qp_wr;
		d->max_srq_wr = (uint32_t)da.max_srq_wr;
		d->max_sge = (uint32_t)da.max_sge;
		d->max_mr = (uint32_t)da.max_mr;
		d->max_cq = (uint32_t)da.max_cq;
		d->max_mr_size = da.max_mr_size;
		d->max_qp_rd_atom = (uint32_t)da.max_qp_rd_atom;
		d->atomic_cap = da.atomic_cap;
		d->mtu = 128u << pa.active_mtu;
		ibv_close_device(ctx);
		if (!d->active || !d->ip4) {
			NTX_INFO(FI_LOG_CORE, "verbs device %s skipped: %s\n",
				 d->name, d->active ? "no IPv4 address (rdma_cm "
				 "needs one)" : "port 1 is not active");
			continue;
		}
		n++;
	}
	ibv_free_device_list(list);
	return n;
}

int ntx_vb_dev_find(const char *dev, struct ntx_vb_devinfo *out)
{
	struct ntx_vb_devinfo d[16];
	int n = ntx_verbs_devices(d, 16);

	for (int i = 0; i < n; i++)
		if (!strcmp(d[i].name, dev)) {
			*out = d[i];
			return 0;
		}
	return -FI_ENODEV;
}

/* Each usable device is a domain, with the device's limits. */
int ntx_vb_domains(struct ntx_be_domain *out, int max)
{
	struct ntx_vb_devinfo v[16];
	int n = ntx_verbs_devices(v, max < 16 ? max : 16);

	for (int i = 0; i < n; i++) {
		_Static_assert(sizeof(out[i].name) == sizeof(v[i].name),
			       "device names");
		memset(&out[i], 0, sizeof(out[i]));
		memcpy(out[i].name, v[i].name, sizeof(out[i].name));
		out[i].ep_cnt = v[i].max_qp;
		out[i].cq_cnt = v[i].max_cq;
		out[i].mr_cnt = v[i].max_mr;
		/* sends wait in the engine, receives in its queues; the
		 * device bounds its own queues */
		out[i].tx_size = v[i].max_qp_wr;
		out[i].rx_size = v[i].max_srq_wr;
	}
	return n;
}
