/*
 * Provider entry point: the fi_provider object that libfabric finds with
 * dlsym("fi_prov_ini") and the process-wide set-up it needs.
 */
#include "config.h"
#include "ntx/ntx.h"
#include "ntx/ntx_backend.h"

static void ntx_cleanup(void)
{
	ntx_ntb_shm_fini();
}

struct fi_provider ntx_prov = {
	.name = NTX_PROV_NAME,
	.version = NTX_PROV_VERSION,
	.fi_version = NTX_FI_VERSION,
	.getinfo = ntx_getinfo,
	.fabric = ntx_fabric_open,
	.cleanup = ntx_cleanup,
};

FI_EXT_INI
{
	ntx_params_init();
	return &ntx_prov;
}
