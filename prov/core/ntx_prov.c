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

/* One call site's budget of warning lines (NTX_WARN): true when this line
 * is written, with *dropped the lines of that site left out before it.
 * Threads may race at a second's turn; the worst they do is write or
 * leave out a line more, never block. */
bool ntx_log_rate_ok(struct ntx_log_rate *r, uint32_t *dropped)
{
	struct timespec ts;
	uint64_t now, was;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now = (uint64_t)ts.tv_sec;
	was = __atomic_load_n(&r->second, __ATOMIC_RELAXED);
	if (was != now &&
	    __atomic_compare_exchange_n(&r->second, &was, now, false,
					__ATOMIC_RELAXED, __ATOMIC_RELAXED))
		__atomic_store_n(&r->count, 0, __ATOMIC_RELAXED);
	if (!ntx_params.log_rate ||
	    __atomic_fetch_add(&r->count, 1, __ATOMIC_RELAXED) <
		    ntx_params.log_rate) {
		*dropped = __atomic_exchange_n(&r->dropped, 0, __ATOMIC_RELAXED);
		return true;
	}
	__atomic_fetch_add(&r->dropped, 1, __ATOMIC_RELAXED);
	return false;
}
