/*
 * The provider object every layer logs under. The API fills in its entry
 * points (getinfo, fabric, cleanup) in fi_prov_ini.
 */
#include "config.h"

#include "ntx/ntx_base.h"

struct fi_provider ntx_prov = {
	.name = NTX_PROV_NAME,
	.version = NTX_PROV_VERSION,
	.fi_version = NTX_FI_VERSION,
};
