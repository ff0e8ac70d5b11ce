/*
 * Provider entry point: libfabric finds fi_prov_ini with dlsym; it reads
 * the parameters and gives the provider object its entry points.
 */
#include "config.h"
#include "ntx/ntx.h"

FI_EXT_INI
{
	ntx_params_init();
	ntx_prov.getinfo = ntx_getinfo;
	ntx_prov.fabric = ntx_fabric_open;
	ntx_prov.cleanup = ntx_be_fini_all;
	return &ntx_prov;
}
