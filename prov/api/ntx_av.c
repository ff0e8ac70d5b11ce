/*
 * Address vectors (FI_AV_MAP and FI_AV_TABLE alike: fi_addr is the slot
 * index). Inserts are validated; with an EQ bound they complete
 * asynchronously with an FI_AV_COMPLETE event.
 */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>

#include "ntx/ntx.h"

static int ntx_av_finish(struct ntx_av *av, int done, void *context)
{
	struct fi_eq_entry ev = { &av->av.fid, context, (uint64_t)done };

	if (!av->eq)
		return done;
	ntx_eq_report(av->eq, FI_AV_COMPLETE, &ev, sizeof(ev), 0, NULL);
	return 0;
}

static int ntx_av_insert(struct fid_av *fav, const void *addr, size_t count,
			 fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	const struct ntx_addr *a = addr;
	int *errs = (flags & FI_SYNC_ERR) ? context : NULL;
	int done = 0, ret;
	fi_addr_t fa;

	if ((count && !addr) || (flags & ~(FI_MORE | FI_SYNC_ERR)) ||
	    (errs && av->eq))
		return -FI_EINVAL;
	ntx_mutex_lock(av->domain, &av->lock);
	for (size_t i = 0; i < count; i++) {
		ret = ntx_addr_valid(&a[i]) ? ntx_av_table_add(av, &a[i], &fa)
					    : -FI_EINVAL;
		if (ret) {
			NTX_WARN(FI_LOG_AV, "av insert %zu: %s\n", i,
				 fi_strerror(-ret));
			fa = FI_ADDR_NOTAVAIL;
			if (av->eq)
				ntx_eq_report(av->eq, FI_AV_COMPLETE, NULL, 0,
					      -ret, context);
		} else {
			done++;
		}
		if (fi_addr)
			fi_addr[i] = fa;
		if (errs)
			errs[i] = -ret;
	}
	ntx_mutex_unlock(av->domain, &av->lock);
	return ntx_av_finish(av, done, context);
}

static int ntx_av_insertsvc(struct fid_av *fav, const char *node,
			    const char *service, fi_addr_t *fi_addr,
			    uint64_t flags, void *context)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	struct fi_domain_attr da = { .name = av->domain->name };
	struct fi_info hints = { .domain_attr = &da };
	struct fi_info *info = NULL;
	int ret;

	if (!node && !service)
		return -FI_EINVAL;
	ret = ntx_getinfo(NTX_FI_VERSION, node, service, 0, &hints, &info);
	if (ret) {
		if (fi_addr)
			*fi_addr = FI_ADDR_NOTAVAIL;
		if (av->eq) {
			ntx_eq_report(av->eq, FI_AV_COMPLETE, NULL, 0, -ret,
				      context);
			return ntx_av_finish(av, 0, context);
		}
		return 0;
	}
	ret = ntx_av_insert(fav, info->dest_addr, 1, fi_addr, flags, context);
	fi_freeinfo(info);
	return ret;
}

static int ntx_av_insertsym(struct fid_av *fav, const char *node,
			    size_t nodecnt, const char *service, size_t svccnt,
			    fi_addr_t *fi_addr, uint64_t flags, void *context)
{
	return -FI_ENOSYS;
}

static int ntx_av_remove(struct fid_av *fav, fi_addr_t *fi_addr, size_t count,
			 uint64_t flags)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	int ret = 0;

	if (flags || (count && !fi_addr))
		return -FI_EINVAL;
	ntx_mutex_lock(av->domain, &av->lock);
	for (size_t i = 0; i < count; i++) {
		if (ntx_av_table_del(av, fi_addr[i]))
			ret = -FI_EINVAL;
	}
	ntx_mutex_unlock(av->domain, &av->lock);
	return ret;
}

static int ntx_av_lookup(struct fid_av *fav, fi_addr_t fi_addr, void *addr,
			 size_t *addrlen)
{
	struct ntx_av *av = ntx_container_of(fav, struct ntx_av, av);
	const struct ntx_addr *a;
	struct ntx_addr copy;

	if (!addrlen || (*addrlen && !addr))
		return -FI_EINVAL;
	ntx_mutex_lock(av->domain, &av->lock);
	a = ntx_av_get(av, fi_addr);
	if (a)
		copy = *a;
	ntx_mutex_unlock(av->domain, &av->lock);
	if (!a)
		return -FI_ENOENT;
	memcpy(addr, &copy, *addrlen < sizeof(copy) ? *addrlen : sizeof(copy));
	*addrlen = sizeof(copy);
	return 0;
}

static const char *ntx_av_straddr(struct fid_av *fav, const void *addr,
				  char *buf, size_t *len)
{
	char tmp[NTX_ADDR_STRLEN];
	int n;

	if (!addr || !len)
		return NULL;
	n = ntx_addr_to_str(addr, tmp, sizeof(tmp));
	if (buf && *len)
		snprintf(buf, *len, "%s", tmp);
	*len = (size_t)n + 1;
	return buf;
}

static int ntx_av_close(struct fid *fid)
{
	struct ntx_av *av = ntx_container_of(fid, struct ntx_av, av.fid);

	if (atomic_load(&av->ref)) {
		NTX_WARN(FI_LOG_AV, "AV is still bound to an endpoint\n");
		return -FI_EBUSY;
	}
	ntx_ref_put(&av->domain->ref);
	ntx_av_table_fini(av);
	pthread_mutex_destroy(&av->lock);
	free(av);
	return 0;
}

static int ntx_av_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct ntx_av *av = ntx_container_of(fid, struct ntx_av, av.fid);

	if (!bfid || bfid->fclass != FI_CLASS_EQ || flags)
		return -FI_EINVAL;
	av->eq = ntx_container_of(bfid, struct fid_eq, fid);
	return 0;
}

static struct fi_ops ntx_av_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_av_close,
	.bind = ntx_av_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

static struct fi_ops_av ntx_av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = ntx_av_insert,
	.insertsvc = ntx_av_insertsvc,
	.insertsym = ntx_av_insertsym,
	.remove = ntx_av_remove,
	.lookup = ntx_av_lookup,
	.straddr = ntx_av_straddr,
	.av_set = ntx_no_av_set,
};

int ntx_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
		struct fid_av **out, void *context)
{
	struct ntx_domain *dom = ntx_container_of(domain, struct ntx_domain,
						  dom);
	struct ntx_av *av;

	if (!attr || !out)
		return -FI_EINVAL;
	if ((attr->type != FI_AV_UNSPEC && attr->type != FI_AV_MAP &&
	     attr->type != FI_AV_TABLE) || attr->name || attr->rx_ctx_bits ||
	    (attr->flags & ~(FI_EVENT | FI_SYMMETRIC))) {
		NTX_WARN(FI_LOG_AV, "unsupported AV attributes\n");
		return -FI_EINVAL;
	}
	av = calloc(1, sizeof(*av));
	if (!av)
		return -FI_ENOMEM;
	av->type = attr->type == FI_AV_UNSPEC ? FI_AV_MAP : attr->type;
	av->domain = dom;
	pthread_mutex_init(&av->lock, NULL);
	av->av.fid.fclass = FI_CLASS_AV;
	av->av.fid.context = context;
	av->av.fid.ops = &ntx_av_fi_ops;
	av->av.ops = &ntx_av_ops;
	ntx_ref_get(&dom->ref);
	*out = &av->av;
	return 0;
}
