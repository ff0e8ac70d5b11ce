/*
 * Provider entry point: libfabric finds fi_prov_ini with dlsym; it reads
 * the parameters and gives the provider object its entry points.
 */
#include "config.h"
#include "ntx/ntx.h"

FI_EXT_INI
{
	/* never an API newer than the core that loads us implements */
	if (FI_VERSION_LT(fi_version(), ntx_prov.fi_version))
		ntx_prov.fi_version = fi_version();
	ntx_params_init();
	ntx_prov.getinfo = ntx_getinfo;
	ntx_prov.fabric = ntx_fabric_open;
	ntx_prov.cleanup = ntx_be_fini_all;
	return &ntx_prov;
}
