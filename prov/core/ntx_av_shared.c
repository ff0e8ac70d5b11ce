/*
 * Shared AVs (fi_av_attr.name, DESIGN §3 "Shared AVs"): the creating
 * process publishes each name it inserts into a sealed memfd, by slot (its
 * fi_addr), and appends the slot to a list in insertion order, which
 * fi_av_open hands out as map_addr. Readers (FI_READ) map it read-only and
 * copy, check, then use what they find: the writer is another process.
 */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ntx/ntx_core.h"

#define NTX_AVS_MAGIC 0x5641584eu /* "NXAV" */
#define NTX_AVS_VERSION 1
#define NTX_AVS_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* The region: this header, then fi_addr_t order[cap] (map_addr; padded
 * to a line), then struct ntx_avs_ent ent[cap]. Wire format. */
struct ntx_avs_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t cap;
	uint32_t pad;
	_Atomic uint64_t count; /* slots published in order[] */
	uint8_t pad2[40];
};
_Static_assert(sizeof(struct ntx_avs_hdr) == 64,
	       "shared AV header is one cache line (a wire format)");

/* One slot. seq is odd while the writer changes it (a seqlock: a reader
 * keeps a copy only if seq was even and unchanged around it). */
struct ntx_avs_ent {
	_Atomic uint32_t seq;
	uint32_t used;
	uint8_t pad[8];
	struct ntx_addr name;
};
_Static_assert(sizeof(struct ntx_avs_ent) == 48,
	       "shared AV entry: seq, used and a 32-byte name (wire format)");

static size_t ntx_avs_order_len(uint32_t cap)
{
	return ((size_t)cap * sizeof(fi_addr_t) + 63) & ~(size_t)63;
}

static size_t ntx_avs_len(uint32_t cap)
{
	return sizeof(struct ntx_avs_hdr) + ntx_avs_order_len(cap) +
	       (size_t)cap * sizeof(struct ntx_avs_ent);
}

static struct ntx_avs_hdr *ntx_avs_hdr(const struct ntx_av_shared *s)
{
	return (struct ntx_avs_hdr *)s->map;
}

fi_addr_t *ntx_av_shared_order(const struct ntx_av_shared *s)
{
	return (fi_addr_t *)(s->map + sizeof(struct ntx_avs_hdr));
}

static struct ntx_avs_ent *ntx_avs_ent(const struct ntx_av_shared *s,
				       uint32_t slot)
{
	return (struct ntx_avs_ent *)(s->map + sizeof(struct ntx_avs_hdr) +
				      ntx_avs_order_len(s->cap)) + slot;
}

/* Sizes and seals the memfd, maps it and writes the header. */
static int ntx_avs_init(struct ntx_av_shared *s, int fd, uint32_t cap)
{
	struct ntx_avs_hdr *h;

	s->len = ntx_avs_len(cap);
	if (ftruncate(fd, (off_t)s->len) ||
	    fcntl(fd, F_ADD_SEALS, NTX_AVS_SEALS))
		return -FI_ENOMEM;
	s->map = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (s->map == MAP_FAILED)
		return -FI_ENOMEM;
	s->cap = cap;
	h = ntx_avs_hdr(s);
	h->cap = cap;
	h->version = NTX_AVS_VERSION;
	/* release: a reader that sees the magic sees the rest */
	atomic_store_explicit((_Atomic uint32_t *)&h->magic, NTX_AVS_MAGIC,
			      memory_order_release);
	return 0;
}

int ntx_av_shared_create(struct ntx_av_shared *s, const char *name,
			 uint32_t cap)
{
	int fd, ret;

	if (!cap || cap > NTX_AVS_MAX)
		return -FI_EINVAL;
	ret = ntx_named_create("av", name, &s->sock, &fd);
	if (ret)
		return ret;
	ret = ntx_avs_init(s, fd, cap);
	if (ret) {
		close(fd);
		close(s->sock);
		return ret;
	}
	s->fd = fd; /* kept open: finders look for it among our fds */
	s->writer = true;
	return 0;
}

/* A reader's checks of the creator's region before it maps it. */
static int ntx_avs_check_fd(int fd, size_t *len)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) !=
				 (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    fstat(fd, &st) || st.st_size < (off_t)sizeof(struct ntx_avs_hdr) ||
	    (size_t)st.st_size > ntx_avs_len(NTX_AVS_MAX))
		return -FI_EINVAL;
	*len = (size_t)st.st_size;
	return 0;
}

int ntx_av_shared_open(struct ntx_av_shared *s, const char *name)
{
	const struct ntx_avs_hdr *h;
	int fd, ret;
	uint32_t cap;

	ret = ntx_named_find("av", name, &fd);
	if (ret)
		return ret;
	ret = ntx_avs_check_fd(fd, &s->len);
	if (!ret) {
		s->map = mmap(NULL, s->len, PROT_READ, MAP_SHARED, fd, 0);
		ret = s->map == MAP_FAILED ? -FI_ENOMEM : 0;
	}
	close(fd);
	if (ret)
		return ret;
	h = (const struct ntx_avs_hdr *)s->map;
	cap = h->cap;
	if (atomic_load_explicit((_Atomic uint32_t *)&h->magic,
				 memory_order_acquire) != NTX_AVS_MAGIC ||
	    h->version != NTX_AVS_VERSION || !cap || cap > NTX_AVS_MAX ||
	    ntx_avs_len(cap) != s->len) {
		munmap(s->map, s->len);
		return -FI_EINVAL;
	}
	s->cap = cap;
	s->sock = s->fd = -1;
	s->writer = false;
	return 0;
}

void ntx_av_shared_close(struct ntx_av_shared *s)
{
	if (!s->map)
		return;
	munmap(s->map, s->len);
	if (s->sock >= 0)
		close(s->sock);
	if (s->fd >= 0)
		close(s->fd);
	s->map = NULL;
}

/* Writer: slot changes under the seqlock (AV lock held: one writer). */
static void ntx_avs_write(struct ntx_av_shared *s, uint32_t slot,
			  const struct ntx_addr *a)
{
	struct ntx_avs_ent *e = ntx_avs_ent(s, slot);
	uint32_t seq = atomic_load_explicit(&e->seq, memory_order_relaxed);

	atomic_store_explicit(&e->seq, seq + 1, memory_order_relaxed);
	/* release fence: the odd seq is visible before the body changes */
	atomic_thread_fence(memory_order_release);
	e->used = a != NULL;
	if (a)
		e->name = *a;
	/* release: the body is visible before the even seq */
	atomic_store_explicit(&e->seq, seq + 2, memory_order_release);
}

int ntx_av_shared_put(struct ntx_av_shared *s, uint32_t slot,
		      const struct ntx_addr *a)
{
	struct ntx_avs_hdr *h = ntx_avs_hdr(s);
	uint64_t n = atomic_load_explicit(&h->count, memory_order_relaxed);

	if (slot >= s->cap)
		return -FI_ENOSPC;
	ntx_avs_write(s, slot, a);
	if (n < s->cap) {
		ntx_av_shared_order(s)[n] = slot;
		/* release: order[n] is visible before the count says so */
		atomic_store_explicit(&h->count, n + 1, memory_order_release);
	}
	ntx_named_drain(s->sock);
	return 0;
}

void ntx_av_shared_clear(struct ntx_av_shared *s, uint32_t slot)
{
	if (slot < s->cap)
		ntx_avs_write(s, slot, NULL);
}

int ntx_av_shared_get(const struct ntx_av_shared *s, uint64_t slot,
		      struct ntx_addr *out)
{
	const struct ntx_avs_ent *e;
	struct ntx_addr copy;
	uint32_t s1, used;

	if (slot >= s->cap)
		return -FI_ENOENT;
	e = ntx_avs_ent(s, (uint32_t)slot);
	for (int tries = 0; tries < 64; tries++) {
		/* acquire: the body read below is at least this new */
		s1 = atomic_load_explicit((_Atomic uint32_t *)&e->seq,
					  memory_order_acquire);
		used = *(volatile const uint32_t *)&e->used;
		memcpy(&copy, (const void *)&e->name, sizeof(copy));
		/* acquire fence: the body was read before seq is read again */
		atomic_thread_fence(memory_order_acquire);
		if (!(s1 & 1) && s1 == atomic_load_explicit(
				(_Atomic uint32_t *)&e->seq,
				memory_order_relaxed))
			break;
		used = 2; /* torn: try again */
	}
	if (used != 1)
		return used ? -FI_EAGAIN : -FI_ENOENT;
	if (!ntx_addr_valid(&copy))
		return -FI_EINVAL;
	*out = copy;
	return 0;
}
