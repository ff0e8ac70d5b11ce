/*
 * Inside the verbs back end: device discovery and the registration cache
 * of user buffers.
 */
#ifndef NTX_VERBS_H
#define NTX_VERBS_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ntx/ntx_backend.h"

/* One verbs device that can carry an ntx domain (active port 1 with an
 * IPv4 address for rdma_cm), with the limits read from it. */
struct ntx_vb_devinfo {
	char name[64];
	uint32_t ip4; /* network order */
	bool active;
	uint32_t max_cqe, max_qp, max_qp_wr, max_srq_wr, max_sge, max_mr;
	uint32_t max_cq, max_qp_rd_atom, mtu;
	uint64_t max_mr_size;
	int atomic_cap; /* enum ibv_atomic_cap */
};
int ntx_verbs_devices(struct ntx_vb_devinfo *out, int max);

/* Bulk work requests in flight at once (one bulk move, <= 8 remote
 * iovecs): sized into the QP send queue and the CQ. */
#define NTX_VB_BULK_MAX NTX_MAX_IOV

struct ntx_vb_cache;
struct ntx_vb_reg;

/* Registrations of user memory, reused while their translation holds: a
 * hit is checked against the page frames recorded at registration
 * (/proc/self/pagemap), so memory unmapped and mapped again at the same
 * address is registered anew. Where page frames cannot be read (no
 * CAP_SYS_ADMIN) nothing is kept: ntx_verbs_cache_get registers for one
 * use and keys are not given to peers. */
struct ntx_vb_cache *ntx_verbs_cache_open(struct ibv_pd *pd);
void ntx_verbs_cache_close(struct ntx_vb_cache *cache);
bool ntx_verbs_cache_keeps(const struct ntx_vb_cache *cache);
/* A registration covering [addr, addr + len) with at least 'access';
 * held until ntx_verbs_cache_put. NULL on failure. */
struct ntx_vb_reg *ntx_verbs_cache_get(struct ntx_vb_cache *cache,
				       const void *addr, size_t len,
				       int access);
void ntx_verbs_cache_put(struct ntx_vb_cache *cache, struct ntx_vb_reg *reg);
uint32_t ntx_verbs_reg_lkey(const struct ntx_vb_reg *reg);
uint32_t ntx_verbs_reg_rkey(const struct ntx_vb_reg *reg);
/* hits, misses and registrations dropped as stale (for logs and tests) */
void ntx_verbs_cache_stats(const struct ntx_vb_cache *cache, uint64_t *hits,
			   uint64_t *misses, uint64_t *stale);

#endif /* NTX_VERBS_H */
