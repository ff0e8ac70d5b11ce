/* Issue #36: the bounded fuzzer on shared-AV regions (DESIGN §3 "Shared
 * AVs", prov/core/ntx_av_shared.c). This process, as a hostile creator of
 * the same user, claims a name first and backs it with garbage (random
 * bytes, a valid-looking header with absurd counts, a size that does not
 * fit, no seals), or writes garbage into a live region an honest AV of its
 * own publishes. A victim process opens each FI_READ, looks up slots and
 * reads map_addr: it must fail cleanly or go on, never crash or hang, and
 * at the end still send through an honest shared AV.
 * NTX_FUZZ_SECONDS bounds the run (default 3), NTX_FUZZ_SEED repeats it.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx_adv.h"

#define FAV_CAPS (FI_MSG | FI_SHARED_AV)
#define FAV_MS 10000
/* the region's layout as ntx_av_shared.c has it (a wire format) */
#define AVS_MAGIC 0x5641584eu
#define AVS_HDR 64
#define AVS_ENT 48
#define AVS_MAX (1u << 20)


static size_t avs_len(uint64_t cap)
{
	return AVS_HDR + ((cap * 8 + 63) & ~(uint64_t)63) + cap * AVS_ENT;
}

/* Endpoint, CQ and an AV of the given name and flags; *map = map_addr. */
static int fav_open(struct tctx *t, const char *name, uint64_t flags,
		    fi_addr_t **map)
{
	struct fi_av_attr aa = { .type = FI_AV_TABLE, .name = (char *)name,
				 .flags = flags, .count = 8 };
	int ret = t_open_with(t, t_hints(FAV_CAPS), 0, FI_WAIT_NONE, &aa);

	if (!ret)
		*map = aa.map_addr;
	return ret;
}

/* ---- the victim ---------------------------------------------------------- */

/* Looks up slots of an open read-only AV: the first of map_addr (a
 * region has room for one at least), small ones, edges. */
static int fav_lookups(struct fid_av *av, const fi_addr_t *map, int rounds)
{
	static const fi_addr_t edge[] = { 0, 1, 7, 8, 1023, 1024, AVS_MAX - 1,
					  AVS_MAX, UINT32_MAX, FI_ADDR_NOTAVAIL };
	int found = 0;

	for (int r = 0; r < rounds; r++) {
		fi_addr_t a = r == 0 && map ? map[0]
			    : r % 2 ? edge[(unsigned)r / 2 % 10]
				    : (fi_addr_t)(r % 16);
		char name[T_NAMELEN], str[128];
		size_t len = sizeof(name), slen = sizeof(str);
		int ret = fi_av_lookup(av, a, name, &len);

		if (ret && ret != -FI_ENOENT && ret != -FI_EINVAL &&
		    ret != -FI_EAGAIN)
			return -1;
		if (!ret) {
			found++;
			fi_av_straddr(av, name, str, &slen);
		}
	}
	return found;
}

/* Commands on sock: 'o' and a name: open it FI_READ and look up (answer:
 * the open's code, then what the lookups found, or -1 when a lookup
 * failed in a way it may not); 'l': look up again while the creator
 * scribbles; 'c': close it; 'h' and a name: send through the honest AV
 * of that name to its slot 0; 'q': end. */
static int fav_victim(int sock)
{
	struct tctx t = { 0 };
	fi_addr_t *map = NULL;
	char cmd, name[64];
	int32_t ret[2];
	bool open = false;

	for (;;) {
		CHK(t_sock_read(sock, &cmd, 1) == 0);
		if (cmd == 'q')
			break;
		if (cmd == 'o' || cmd == 'h') {
			CHK(t_sock_read(sock, name, sizeof(name)) == 0);
			ret[0] = fav_open(&t, name, FI_READ, &map);
			open = ret[0] == 0;
			ret[1] = open ? fav_lookups(t.av, map, 24) : 0;
			if (open && cmd == 'h') {
				CHK(fi_send(t.ep, "hi", 3, NULL, map[0],
					    NULL) == 0);
				CHK(t_wait(&t, NULL, NULL, NULL, FAV_MS) == 1);
			}
		} else if (cmd == 'l') {
			ret[0] = 0;
			ret[1] = open ? fav_lookups(t.av, map, 256) : 0;
		} else { /* 'c' */
			t_close(&t);
			memset(&t, 0, sizeof(t));
			open = false;
			ret[0] = ret[1] = 0;
		}
		CHK(t_sock_write(sock, ret, sizeof(ret)) == 0);
	}
	if (open)
		t_close(&t);
	return 0;
}

/* ---- the hostile creator --------------------------------------------------- */

struct fav {
	int sock; /* to the victim */
	unsigned n, opened, refused;
};

/* A command to the victim and its answer, within FAV_MS: a victim that
 * hangs or dies fails the run here. */
static void fav_ask(struct fav *f, char cmd, const char *name, int32_t *ret)
{
	struct pollfd p = { .fd = f->sock, .events = POLLIN };
	char buf[64] = "";

	cr_assert_eq(write(f->sock, &cmd, 1), 1);
	if (name) {
		snprintf(buf, sizeof(buf), "%s", name);
		cr_assert_eq(t_sock_write(f->sock, buf, sizeof(buf)), 0);
	}
	cr_assert_eq(poll(&p, 1, FAV_MS), 1, "case %u: the victim hangs in "
		     "'%c'", f->n, cmd);
	cr_assert_eq(t_sock_read(f->sock, ret, 2 * sizeof(*ret)), 0,
		     "case %u: the victim died in '%c'", f->n, cmd);
	cr_assert_geq(ret[1], 0, "case %u: a lookup failed with an "
		      "unexpected code", f->n);
}

/* Claims name as ntx does (the abstract socket) and backs it with a
 * memfd of len bytes, sealed or not. */
static int fav_claim(const char *name, size_t len, bool seal, int *sock)
{
	char tag[128];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int n = snprintf(tag, sizeof(tag), "ntx-av-%u-%s", (unsigned)getuid(),
			 name), fd;

	memcpy(sun.sun_path + 1, tag, (size_t)n);
	*sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	cr_assert_eq(bind(*sock, (struct sockaddr *)&sun,
			  (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
				      1 + n)), 0);
	cr_assert_eq(listen(*sock, 8), 0);
	fd = memfd_create(tag, MFD_ALLOW_SEALING | MFD_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK |
				   F_SEAL_GROW), 0);
	return fd;
}

/* A capacity where checks go wrong. */
static uint32_t fav_cap(void)
{
	static const uint32_t v[] = { 0, 1, 2, 8, 1024, AVS_MAX - 1, AVS_MAX,
				      AVS_MAX + 1, 0x7fffffff, UINT32_MAX };

	return rnd() % 2 ? v[rnd() % 10] : (uint32_t)(rnd() % 64);
}

/* Bytes of a region the creator writes: random, or a header (right or
 * bent) with a random count, then entries whose seq is even or odd,
 * used or not, with names of random bytes. */
static void fav_fill(uint8_t *m, size_t len, uint32_t cap)
{
	uint32_t hdr[4] = { AVS_MAGIC, 1, cap, 0 };
	uint64_t count = rnd() % 2 ? rnd() % 16 : rnd();

	for (size_t i = 0; i < len; i++)
		m[i] = (uint8_t)rnd();
	if (rnd() % 4 == 0 || len < AVS_HDR)
		return;
	if (rnd() % 4 == 0)
		hdr[rnd() % 4] ^= 1u << (rnd() % 32);
	memcpy(m, hdr, sizeof(hdr));
	memcpy(m + 16, &count, 8);
	for (size_t off = AVS_HDR + ((size_t)cap * 8 + 63) / 64 * 64;
	     cap <= AVS_MAX && off + AVS_ENT <= len; off += AVS_ENT) {
		uint32_t seq = (uint32_t)(rnd() % 8), used = rnd() % 4 != 0;

		memcpy(m + off, &seq, 4);
		memcpy(m + off + 4, &used, 4);
	}
}

/* A region of garbage in a name nobody else holds: sizes that fit its
 * header's capacity or not, sealed or not. */
static void fav_case_fake(struct fav *f)
{
	char name[64];
	uint32_t cap = fav_cap();
	size_t len;
	uint8_t *m;
	int32_t ret[2];
	int sock, fd;

	snprintf(name, sizeof(name), "fzav-%d-%u", (int)getpid(), f->n);
	switch (rnd() % 4) {
	case 0: len = rnd() % 256; break;
	case 1: len = cap <= AVS_MAX ? avs_len(cap) : rnd() % 65536; break;
	case 2: len = cap <= AVS_MAX ? avs_len(cap) - 1 - rnd() % 64
				     : rnd() % 65536; break;
	default: len = rnd() % (2 * avs_len(64)); break;
	}
	if (len > avs_len(AVS_MAX) + 4096)
		len = avs_len(AVS_MAX) + 4096;
	fd = fav_claim(name, len, rnd() % 8 != 0, &sock);
	if (len) {
		m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		cr_assert_neq(m, MAP_FAILED);
		fav_fill(m, len < 65536 ? len : 65536, cap);
		munmap(m, len);
	}
	fav_ask(f, 'o', name, ret);
	if (ret[0] == 0) {
		f->opened++;
		fav_ask(f, 'c', NULL, ret);
	} else {
		f->refused++;
	}
	close(fd);
	close(sock);
}

/* Our own memfd of the AV named tag, opened again read-write. */
static int fav_own_memfd(const char *name)
{
	char want[160], path[300], link[200];
	struct dirent *d;
	DIR *dp = opendir("/proc/self/fd");
	int fd = -1;

	snprintf(want, sizeof(want), "/memfd:ntx-av-%u-%s (deleted)",
		 (unsigned)getuid(), name);
	cr_assert_not_null(dp);
	while (fd < 0 && (d = readdir(dp))) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", d->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (!strcmp(link, want))
			fd = open(path, O_RDWR | O_CLOEXEC);
	}
	closedir(dp);
	cr_assert_geq(fd, 0, "no memfd of the AV %s", name);
	return fd;
}

/* A live region: an honest AV of ours publishes names, the victim opens
 * it, then we scribble on it (header, order, entries, any bytes) between
 * the victim's rounds of lookups. */
static void fav_case_live(struct fav *f, const void *ep_name)
{
	char name[64];
	struct tctx t;
	fi_addr_t *map, fa;
	size_t len;
	uint8_t *m;
	int32_t ret[2];
	int fd;

	snprintf(name, sizeof(name), "fzlive-%d-%u", (int)getpid(), f->n);
	cr_assert_eq(fav_open(&t, name, 0, &map), 0);
	for (unsigned i = 1 + rnd() % 4; i; i--)
		cr_assert_eq(fi_av_insert(t.av, ep_name, 1, &fa, 0, NULL), 1);
	fd = fav_own_memfd(name);
	len = (size_t)lseek(fd, 0, SEEK_END);
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(m, MAP_FAILED);
	fav_ask(f, 'o', name, ret);
	cr_assert_eq(ret[0], 0, "an honest region was refused");
	f->opened++;
	for (unsigned r = 1 + rnd() % 4; r; r--) {
		for (unsigned k = 1 + rnd() % 16; k; k--) {
			size_t off = rnd() % 2 ? rnd() % (AVS_HDR + 64 + 4 * AVS_ENT)
					       : rnd() % len;

			if (rnd() % 2)
				m[off % len] = (uint8_t)rnd();
			else if (off + 8 <= len)
				memset(m + off, rnd() % 2 ? 0xff : 0, 8);
		}
		fav_ask(f, 'l', NULL, ret);
	}
	fav_ask(f, 'c', NULL, ret);
	munmap(m, len);
	close(fd);
	t_close(&t);
}

Test(fuzz_av, hostile_and_scribbled_shared_av_regions, .timeout = 240)
{
	uint64_t end;
	char ep_name[T_NAMELEN], name[64], buf[8] = "";
	size_t len = sizeof(ep_name);
	struct fav f = { 0 };
	struct tctx t;
	fi_addr_t *map, fa;
	int32_t ret[2];
	pid_t pid;

	end = fuzz_start("av");
	setenv("NTX_TEST_DOMAIN", "shm", 1);
	pid = t_fork(&f.sock, fav_victim);
	cr_assert_gt(pid, 0);
	/* the honest endpoint: its AV, named, holds its own name */
	snprintf(name, sizeof(name), "fzhonest-%d", (int)getpid());
	cr_assert_eq(fav_open(&t, name, 0, &map), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, ep_name, &len), 0);
	cr_assert_eq(fi_av_insert(t.av, ep_name, 1, &fa, 0, NULL), 1);
	while (t_ms() < end) {
		if (rnd() % 4)
			fav_case_fake(&f);
		else
			fav_case_live(&f, ep_name);
		f.n++;
	}
	/* the victim still sends through an honest shared AV */
	cr_assert_eq(fi_recv(t.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC,
			     NULL), 0);
	cr_assert_eq(write(f.sock, "h", 1), 1);
	cr_assert_eq(t_sock_write(f.sock, name, sizeof(name)), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, FAV_MS), 1,
		     "the victim's message never came");
	cr_assert_str_eq(buf, "hi");
	cr_assert_eq(t_sock_read(f.sock, ret, sizeof(ret)), 0);
	cr_assert_eq(ret[0], 0);
	cr_assert_eq(write(f.sock, "q", 1), 1);
	cr_assert_eq(t_join(pid), 0, "the victim failed");
	cr_log_info("fuzz av: %u cases, %u regions opened, %u refused\n", f.n,
		    f.opened, f.refused);
	printf("fuzz av: %u cases, %u regions opened, %u refused\n", f.n,
	       f.opened, f.refused);
	t_close(&t);
}
