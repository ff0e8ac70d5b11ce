/*
 * fid_fabric: the root object; opens domains, EQs and wait sets.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx.h"

static int ntx_fabric_close(struct fid *fid)
{
	struct ntx_fabric *fab = ntx_container_of(fid, struct ntx_fabric,
						  fab.fid);

	if (atomic_load(&fab->ref)) {
		NTX_WARN(FI_LOG_FABRIC, "fabric still has open objects\n");
		return -FI_EBUSY;
	}
	free(fab);
	return 0;
}

static int ntx_fabric_trywait(struct fid_fabric *fabric, struct fid **fids,
			      int count)
{
	int ret;

	for (int i = 0; i < count; i++) {
		switch (fids[i]->fclass) {
		case FI_CLASS_CQ:
			ret = ntx_cq_trywait(fids[i]);
			break;
		case FI_CLASS_EQ:
			ret = ntx_eq_trywait(fids[i]);
			break;
		case FI_CLASS_CNTR:
			ret = ntx_cntr_trywait(fids[i]);
			break;
		case FI_CLASS_WAIT:
			ret = ntx_wait_trywait(fids[i]);
			break;
		default:
			return -FI_EINVAL;
		}
		if (ret)
			return ret;
	}
	return 0;
}

static struct fi_ops ntx_fabric_fi_ops = {
	.size = sizeof(struct fi_ops),
	.close = ntx_fabric_close,
	.bind = ntx_no_bind,
	.control = ntx_no_control,
	.ops_open = ntx_no_ops_open,
	.tostr = ntx_no_tostr,
	.ops_set = ntx_no_ops_set,
};

struct fi_ops_fabric ntx_fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = ntx_domain_open,
	.passive_ep = ntx_pep_open,
	.eq_open = ntx_eq_open,
	.wait_open = ntx_wait_open,
	.trywait = ntx_fabric_trywait,
	.domain2 = ntx_no_domain2,
};

int ntx_fabric_open(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
		    void *context)
{
	struct ntx_fabric *fab;

	if (attr && attr->name && strcmp(attr->name, NTX_FABRIC_NAME)) {
		NTX_WARN(FI_LOG_FABRIC, "unknown fabric %s\n", attr->name);
		return -FI_ENODATA;
	}
	fab = calloc(1, sizeof(*fab));
	if (!fab)
		return -FI_ENOMEM;
	fab->fab.fid.fclass = FI_CLASS_FABRIC;
	fab->fab.fid.context = context;
	fab->fab.fid.ops = &ntx_fabric_fi_ops;
	fab->fab.ops = &ntx_fabric_ops;
	*fabric = &fab->fab;
	return 0;
}
