/*
 * The MR key table (DESIGN §6). Provider keys are [random:32 | index:32]:
 * the index finds the MR in the domain's table, the upper half is drawn
 * for every key, so a key of a closed MR misses its reused slot. Every
 * rejected remote access answers FI_EKEYREJECTED.
 */
#include "config.h"
#include <stdlib.h>

#include "ntx/ntx_core.h"

int ntx_mr_table_add(struct ntx_domain *dom, struct ntx_mr *mr)
{
	ntx_assert_mutex_locked(dom, &dom->mr_lock);
	return ntx_idtab_alloc(&dom->mr_table, mr, &mr->index);
}

void ntx_mr_table_del(struct ntx_domain *dom, struct ntx_mr *mr)
{
	if (ntx_idtab_get(&dom->mr_table, mr->index) == mr)
		ntx_idtab_clear(&dom->mr_table, mr->index);
}

struct ntx_mr *ntx_mr_table_at(struct ntx_domain *dom, uint32_t i)
{
	return ntx_idtab_get(&dom->mr_table, i);
}

bool ntx_mr_key_used(struct ntx_domain *dom, uint64_t key)
{
	for (uint32_t i = 0; i < dom->mr_table.cap; i++) {
		struct ntx_mr *mr = ntx_mr_table_at(dom, i);

		if (mr && mr->mr.key == key)
			return true;
	}
	return false;
}

/* Finds the live MR of a key: O(1) for provider keys, a scan of the
 * table for keys the application chose. */
static struct ntx_mr *ntx_mr_find(struct ntx_domain *dom, uint64_t key)
{
	struct ntx_mr *mr;

	if (dom->mr_mode & FI_MR_PROV_KEY) {
		uint32_t idx = (uint32_t)key;

		mr = ntx_mr_table_at(dom, idx);
		/* the generation half makes a stale key miss a reused slot */
		return mr && mr->mr.key == key ? mr : NULL;
	}
	for (uint32_t i = 0; i < dom->mr_table.cap; i++) {
		mr = ntx_mr_table_at(dom, i);
		if (mr && mr->mr.key == key)
			return mr;
	}
	return NULL;
}

int ntx_mr_check(struct ntx_domain *dom, uint64_t key, uint64_t addr,
		 uint64_t len, uint64_t access, struct iovec *iov,
		 size_t *niov, struct ntx_mr **out)
{
	struct ntx_mr *mr = ntx_mr_find(dom, key);
	uint64_t base, off;

	ntx_assert_mutex_locked(dom, &dom->mr_lock);
	if (!mr) {
		NTX_WARN(FI_LOG_MR, "remote access with unknown key 0x%llx\n",
			 (unsigned long long)key);
		return -FI_EKEYREJECTED;
	}
	base = dom->mr_mode & FI_MR_VIRT_ADDR
		       ? (uint64_t)(uintptr_t)(mr->iov_count ? mr->iov[0].iov_base
							     : NULL)
		       : mr->offset;
	off = addr - base;
	/* unsigned: an address below the base wraps far out of range */
	if (addr < base || off > mr->len || len > mr->len - off) {
		NTX_WARN(FI_LOG_MR, "remote access out of range: key 0x%llx "
			 "addr 0x%llx len %llu\n", (unsigned long long)key,
			 (unsigned long long)addr, (unsigned long long)len);
		return -FI_EKEYREJECTED;
	}
	if ((mr->access & access) != access) {
		NTX_WARN(FI_LOG_MR, "remote access not allowed by key 0x%llx\n",
			 (unsigned long long)key);
		return -FI_EKEYREJECTED;
	}
	ntx_iov_slice(mr->iov, mr->iov_count, off, len, iov, niov);
	*out = mr;
	return 0;
}
