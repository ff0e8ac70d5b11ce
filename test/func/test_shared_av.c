/* Shared AVs through the public API: a named AV created by one process
 * and opened FI_READ by another, and a hostile creator's region. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ntx_test.h"

#define WAIT_MS 20000

static char g_name[64];

/* t_open with an AV of the given name and flags; *map gets map_addr. */
static int open_named(struct tctx *t, uint64_t flags, fi_addr_t **map)
{
	struct fi_av_attr aa = { .type = FI_AV_TABLE, .name = g_name,
				 .flags = flags };
	int ret = t_open_with(t, t_hints(FI_MSG | FI_SHARED_AV), 0,
			      FI_WAIT_NONE, &aa);

	if (!ret && !(t->fi->domain_attr->caps & FI_SHARED_AV))
		return -FI_ENODATA;
	*map = aa.map_addr;
	return ret;
}

static int child_reader(int sock)
{
	char name[T_NAMELEN], buf[T_NAMELEN];
	size_t len = sizeof(buf);
	struct tctx t;
	fi_addr_t *map, fa;

	CHK(t_sync(sock) == 0); /* the creator has inserted */
	CHK(open_named(&t, FI_READ, &map) == 0);
	CHK(map && map[0] == 0 && map[1] == 1);
	CHK(t_sock_read(sock, name, sizeof(name)) == 0);
	CHK(fi_av_lookup(t.av, map[1], buf, &len) == 0);
	CHK(len == T_NAMELEN && !memcmp(buf, name, len));
	CHK(fi_av_lookup(t.av, 7, buf, &len) == -FI_ENOENT);
	CHK(fi_av_insert(t.av, name, 1, &fa, 0, NULL) == -FI_EOPBADSTATE);
	CHK(fi_av_remove(t.av, &fa, 1, 0) == -FI_EOPBADSTATE);
	CHK(fi_send(t.ep, "hi", 3, NULL, map[1], NULL) == 0);
	CHK(t_wait(&t, NULL, NULL, NULL, WAIT_MS) == 1);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

/* The creator inserts two names (the second its own endpoint's); the
 * reader finds both by map_addr and sends to the second. */
Test(shared_av, reader_process_sends_by_the_creators_fi_addr)
{
	char name[T_NAMELEN], buf[8] = "";
	size_t len = sizeof(name);
	struct tctx t, t2;
	fi_addr_t *map, *map2, fa[2];
	int sock;
	pid_t pid;

	snprintf(g_name, sizeof(g_name), "ntx-test-%d", (int)getpid());
	pid = t_fork(&sock, child_reader);
	cr_assert_eq(open_named(&t, 0, &map), 0);
	cr_assert_not_null(map);
	cr_assert_eq(open_named(&t2, 0, &map2), -FI_EADDRINUSE,
		     "a second creator of the same name");
	t_close(&t2);
	cr_assert_eq(fi_getname(&t.ep->fid, name, &len), 0);
	cr_assert_eq(fi_av_insert(t.av, name, 1, &fa[0], 0, NULL), 1);
	cr_assert_eq(fi_av_insert(t.av, name, 1, &fa[1], 0, NULL), 1);
	cr_assert(map[0] == fa[0] && map[1] == fa[1]);
	cr_assert_eq(fi_recv(t.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC,
			     NULL), 0);
	cr_assert_eq(t_sync(sock), 0);
	cr_assert_eq(t_sock_write(sock, name, sizeof(name)), 0);
	cr_assert_eq(t_wait(&t, NULL, NULL, NULL, WAIT_MS), 1);
	cr_assert_str_eq(buf, "hi");
	cr_assert_eq(t_sync(sock), 0);
	t_close(&t);
	cr_assert_eq(t_join(pid), 0);
}

/* ---- a hostile creator: the region's layout as ntx_av_shared.c has it */
#define HDR 64
#define ENT 48

/* Claims the name as ntx would and returns a memfd of len bytes. */
static int fake_creator(int *sock, size_t len, bool seal)
{
	char tag[128];
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int n, fd;

	n = snprintf(tag, sizeof(tag), "ntx-av-%u-%s", (unsigned)getuid(),
		     g_name);
	memcpy(sun.sun_path + 1, tag, (size_t)n);
	*sock = socket(AF_UNIX, SOCK_STREAM, 0);
	cr_assert_eq(bind(*sock, (struct sockaddr *)&sun,
			  (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
				      1 + n)), 0);
	cr_assert_eq(listen(*sock, 8), 0);
	fd = memfd_create(tag, MFD_ALLOW_SEALING);
	cr_assert_eq(ftruncate(fd, (off_t)len), 0);
	if (seal)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK |
				   F_SEAL_GROW), 0);
	return fd;
}

static void fill_region(int fd, uint32_t magic, uint32_t cap,
			const void *ent0)
{
	uint8_t *m = mmap(NULL, HDR + 64 + ENT, PROT_READ | PROT_WRITE,
			  MAP_SHARED, fd, 0);
	uint32_t hdr[4] = { magic, 1, cap, 0 };

	cr_assert_neq(m, MAP_FAILED);
	memcpy(m, hdr, sizeof(hdr));
	memcpy(m + HDR + 64, ent0, ENT);
	munmap(m, HDR + 64 + ENT);
}

static int reader_open(void)
{
	fi_addr_t *map;
	struct tctx t;
	int ret = open_named(&t, FI_READ, &map);

	t_close(&t);
	return ret;
}

Test(shared_av, hostile_creator_regions_are_refused)
{
	uint8_t ent[ENT] = { 2, 0, 0, 0, 1 }; /* seq 2, used, a junk name */
	char buf[T_NAMELEN];
	size_t len = sizeof(buf);
	fi_addr_t *map;
	struct tctx t;
	int sock, fd;

	memset(ent + 16, 0xa5, T_NAMELEN);
	snprintf(g_name, sizeof(g_name), "ntx-hostile-%d", (int)getpid());
	cr_assert_eq(reader_open(), -FI_ENOENT, "nobody holds the name");
	fd = fake_creator(&sock, HDR + 64 + ENT, false);
	fill_region(fd, 0x5641584e, 1, ent);
	cr_assert_eq(reader_open(), -FI_EINVAL, "unsealed: may shrink");
	close(fd);
	close(sock);
	fd = fake_creator(&sock, HDR + 64 + ENT, true);
	fill_region(fd, 0x5641584e, 1000, ent);
	cr_assert_eq(reader_open(), -FI_EINVAL, "cap past the region");
	fill_region(fd, 0xdead, 1, ent);
	cr_assert_eq(reader_open(), -FI_EINVAL, "bad magic");
	fill_region(fd, 0x5641584e, 1, ent);
	cr_assert_eq(open_named(&t, FI_READ, &map), 0);
	cr_assert_eq(fi_av_lookup(t.av, 0, buf, &len), -FI_ENOENT,
		     "a junk name is not used");
	cr_assert_lt(fi_send(t.ep, "x", 1, NULL, 0, NULL), 0);
	cr_assert_eq(fi_av_lookup(t.av, 1, buf, &len), -FI_ENOENT,
		     "past cap");
	t_close(&t);
	close(fd);
	close(sock);
}
