/*
 * Registration cache of the verbs back end (DESIGN §5): user buffers that
 * rendezvous and RMA move by RDMA are registered once and reused. A
 * registration pins the pages it saw; memory unmapped and mapped again at
 * the same address has other pages, so every hit compares the page frames
 * of the range (from /proc/self/pagemap) with the ones recorded when it was
 * registered, and registers anew when they differ. Memory freed to malloc
 * and handed out again keeps its pages: the registration is still right.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "ntx/ntx_list.h"
#include "ntx_verbs.h"

#define NTX_VB_CACHE_MAX 256           /* registrations kept */
#define NTX_VB_CACHE_BYTES (1ull << 30) /* bytes pinned by them */
#define NTX_PM_PRESENT (1ull << 63)
#define NTX_PM_PFN ((1ull << 55) - 1)

struct ntx_vb_reg {
	struct ntx_list entry; /* cache list, most recently used first */
	uintptr_t start, end;  /* page aligned */
	int access;
	struct ibv_mr *mr;
	uint64_t *pfn;         /* page frames at registration */
	uint32_t refs;
	bool cached;
};

struct ntx_vb_cache {
	struct ibv_pd *pd;
	int pagemap;  /* -1: page frames unreadable, nothing kept */
	size_t page;
	struct ntx_list regs;
	uint32_t count;
	uint64_t bytes;
	uint64_t hits, misses, stale;
};

/* Page frames of [start, end), or false when a page is not present. */
static bool ntx_vb_frames(struct ntx_vb_cache *c, uintptr_t start,
			  uintptr_t end, uint64_t *pfn)
{
	size_t n = (end - start) / c->page;
	off_t off = (off_t)(start / c->page * sizeof(uint64_t));
	size_t want = n * sizeof(uint64_t);
	ssize_t got = pread(c->pagemap, pfn, want, off);

	if (got != (ssize_t)want)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (!(pfn[i] & NTX_PM_PRESENT))
			return false;
		pfn[i] &= NTX_PM_PFN;
	}
	return true;
}

/* The registration's pages are still the ones mapped at its addresses. */
static bool ntx_vb_reg_current(struct ntx_vb_cache *c, struct ntx_vb_reg *r)
{
	size_t n = (r->end - r->start) / c->page;
	uint64_t stack[64], *now = n <= 64 ? stack : malloc(n * sizeof(*now));
	bool same;

	if (!now)
		return false;
	same = ntx_vb_frames(c, r->start, r->end, now) &&
	       !memcmp(now, r->pfn, n * sizeof(*now));
	if (now != stack)
		free(now);
	return same;
}

struct ntx_vb_cache *ntx_verbs_cache_open(struct ibv_pd *pd)
{
	struct ntx_vb_cache *c = calloc(1, sizeof(*c));
	volatile uint64_t probe = 1;
	uint64_t pfn;

	if (!c)
		return NULL;
	c->pd = pd;
	c->page = (size_t)sysconf(_SC_PAGESIZE);
	ntx_list_init(&c->regs);
	c->pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (c->pagemap >= 0) {
		/* page frame numbers read as 0 without CAP_SYS_ADMIN */
		uintptr_t a = (uintptr_t)&probe & ~(uintptr_t)(c->page - 1);

		if (!ntx_vb_frames(c, a, a + c->page, &pfn) || !pfn) {
			close(c->pagemap);
			c->pagemap = -1;
		}
	}
	if (c->pagemap < 0)
		NTX_INFO(FI_LOG_MR, "page frames are not readable: user "
			 "buffers are registered per use and large transfers "
			 "go through eager buffers\n");
	return c;
}

static void ntx_vb_reg_free(struct ntx_vb_cache *c, struct ntx_vb_reg *r)
{
	if (r->cached) {
		ntx_list_remove(&r->entry);
		c->count--;
		c->bytes -= r->end - r->start;
		r->cached = false;
	}
	if (r->refs)
		return; /* the last put frees it */
	ibv_dereg_mr(r->mr);
	free(r->pfn);
	free(r);
}

void ntx_verbs_cache_close(struct ntx_vb_cache *c)
{
	struct ntx_list *it, *tmp;

	if (!c)
		return;
	ntx_list_foreach_safe(&c->regs, it, tmp)
		ntx_vb_reg_free(c, ntx_container_of(it, struct ntx_vb_reg,
						    entry));
	if (c->pagemap >= 0)
		close(c->pagemap);
	NTX_INFO(FI_LOG_MR, "registration cache: %llu hits, %llu misses, "
		 "%llu stale\n", (unsigned long long)c->hits,
		 (unsigned long long)c->misses, (unsigned long long)c->stale);
	free(c);
}

bool ntx_verbs_cache_keeps(const struct ntx_vb_cache *c)
{
	return c->pagemap >= 0;
}

/* Drops least recently used registrations nobody holds until the cache
 * is within its bounds. */
static void ntx_vb_evict(struct ntx_vb_cache *c)
{
	struct ntx_list *it = c->regs.prev;

	while ((c->count > NTX_VB_CACHE_MAX || c->bytes > NTX_VB_CACHE_BYTES) &&
	       it != &c->regs) {
		struct ntx_vb_reg *r = ntx_container_of(it, struct ntx_vb_reg,
							entry);
		it = it->prev;
		if (!r->refs)
			ntx_vb_reg_free(c, r);
	}
}

static struct ntx_vb_reg *ntx_vb_register(struct ntx_vb_cache *c,
					  uintptr_t start, uintptr_t end,
					  int access)
{
	struct ntx_vb_reg *r = calloc(1, sizeof(*r));
	size_t n = (end - start) / c->page;

	if (!r)
		return NULL;
	r->start = start;
	r->end = end;
	r->access = access;
	r->mr = ibv_reg_mr(c->pd, (void *)start, end - start, access);
	if (!r->mr) {
		NTX_WARN(FI_LOG_MR, "ibv_reg_mr of %zu bytes: %s\n",
			 (size_t)(end - start), strerror(errno));
		free(r);
		return NULL;
	}
	if (c->pagemap < 0)
		return r; /* one use only */
	/* registration pinned the pages: record which ones they are */
	r->pfn = malloc(n * sizeof(*r->pfn));
	if (!r->pfn || !ntx_vb_frames(c, start, end, r->pfn)) {
		free(r->pfn);
		r->pfn = NULL;
		return r; /* cannot be checked later: not kept */
	}
	r->cached = true;
	ntx_list_insert_head(&c->regs, &r->entry);
	c->count++;
	c->bytes += end - start;
	return r;
}

struct ntx_vb_reg *ntx_verbs_cache_get(struct ntx_vb_cache *c,
				       const void *addr, size_t len,
				       int access)
{
	uintptr_t start = (uintptr_t)addr & ~(uintptr_t)(c->page - 1);
	uintptr_t end = ((uintptr_t)addr + (len ? len : 1) + c->page - 1) &
			~(uintptr_t)(c->page - 1);
	struct ntx_list *it, *tmp;
	struct ntx_vb_reg *r;

	ntx_list_foreach_safe(&c->regs, it, tmp) {
		r = ntx_container_of(it, struct ntx_vb_reg, entry);
		if (r->start > start || r->end < end ||
		    (r->access & access) != access)
			continue;
		if (!ntx_vb_reg_current(c, r)) {
			c->stale++;
			NTX_DBG(FI_LOG_MR, "registration of %p is stale\n",
				(void *)r->start);
			ntx_vb_reg_free(c, r);
			continue;
		}
		c->hits++;
		ntx_list_remove(&r->entry);
		ntx_list_insert_head(&c->regs, &r->entry);
		r->refs++;
		return r;
	}
	c->misses++;
	r = ntx_vb_register(c, start, end, access);
	if (!r)
		return NULL;
	r->refs++;
	ntx_vb_evict(c);
	return r;
}

void ntx_verbs_cache_put(struct ntx_vb_cache *c, struct ntx_vb_reg *r)
{
	if (--r->refs)
		return;
	if (!r->cached) {
		ibv_dereg_mr(r->mr);
		free(r->pfn);
		free(r);
		return;
	}
	ntx_vb_evict(c);
}

uint32_t ntx_verbs_reg_lkey(const struct ntx_vb_reg *r)
{
	return r->mr->lkey;
}

uint32_t ntx_verbs_reg_rkey(const struct ntx_vb_reg *r)
{
	return r->mr->rkey;
}

void ntx_verbs_cache_stats(const struct ntx_vb_cache *c, uint64_t *hits,
			   uint64_t *misses, uint64_t *stale)
{
	*hits = c->hits;
	*misses = c->misses;
	*stale = c->stale;
}
