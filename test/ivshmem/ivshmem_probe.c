/*
 * ivshmem_probe: looks at qemu's ivshmem PCI device (vendor 0x1af4, device
 * 0x1110) from inside a guest, or at the file behind it on the host.
 *
 *   ivshmem_probe [list]
 *       the ivshmem devices in /sys/bus/pci/devices, one a line:
 *       PCIADDR bar2 BYTES (SIZE) bar0 BYTES memory on|off
 *       (exit 1 when there is none)
 *   ivshmem_probe write TARGET OFFSET STRING
 *       STRING and a NUL byte at OFFSET of the shared memory
 *   ivshmem_probe read TARGET OFFSET LEN [--wait-for STRING] [--timeout S]
 *       prints the LEN bytes at OFFSET (up to the first NUL; other bytes
 *       that do not print as \xNN); with --wait-for, first waits until
 *       they begin with STRING: the bytes are read again every 1 ms until
 *       S seconds (default 10, fractions allowed) have passed (exit 1)
 *   ivshmem_probe id PCIADDR
 *       the device's IVPosition register (BAR0 offset 8): its peer ID
 *   ivshmem_probe scribble TARGET MS
 *       random 8-byte words at random places of the shared memory, 4096
 *       every 100 us, for MS milliseconds: a hostile machine on the
 *       region (ntx's processes elsewhere must neither crash nor
 *       hang); prints "scribbling" once the first 4096 are written
 *   ivshmem_probe zero TARGET
 *       zeroes all of the shared memory (a region no one uses again, as
 *       a fresh one: after scribble, for the steps that follow)
 *
 * TARGET is a PCI address (0000:00:02.0, or 00:02.0 in domain 0), whose
 * BAR2 (the shared memory, sysfs resource2) is mapped, or --file PATH, a
 * file mapped instead (the host's side: the memory-backend-file that qemu
 * shares, e.g. in /dev/shm). Mapping a device's resources needs root.
 * When the device's memory decoding is off (no driver has enabled it),
 * the tool enables the device through sysfs first.
 * IVSHMEM_SYSFS replaces /sys/bus/pci/devices (for tests of the tool).
 * Exit status: 0 done, 1 no device or the wait timed out, 2 usage or a
 * system error.
 *
 * Built by test/ivshmem/run-ivshmem-tests.sh with cc (no library needed).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define IVSHMEM_VENDOR 0x1af4
#define IVSHMEM_DEVICE 0x1110
#define REG_IVPOSITION 8

static const char *sysfs_dir(void)
{
	const char *d = getenv("IVSHMEM_SYSFS");
	return d && *d ? d : "/sys/bus/pci/devices";
}

static int usage(void)
{
	fprintf(stderr,
		"usage: ivshmem_probe [list]\n"
		"       ivshmem_probe write TARGET OFFSET STRING\n"
		"       ivshmem_probe read TARGET OFFSET LEN [--wait-for STRING] [--timeout S]\n"
		"       ivshmem_probe id PCIADDR\n"
		"       ivshmem_probe scribble TARGET MS\n"
		"       ivshmem_probe zero TARGET\n"
		"TARGET: a PCI address (BAR2 of the device) or --file PATH\n");
	return 2;
}

/* the first line of a small sysfs file; false when it cannot be read */
static bool read_line(const char *dir, const char *name, char *buf, size_t len)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s/%s", sysfs_dir(), dir, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	bool ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	if (ok)
		buf[strcspn(buf, "\n")] = '\0';
	return ok;
}

static bool read_hex(const char *dir, const char *name, unsigned long *v)
{
	char buf[64], *end;
	if (!read_line(dir, name, buf, sizeof(buf)))
		return false;
	errno = 0;
	*v = strtoul(buf, &end, 16);
	return errno == 0 && end != buf;
}

static bool is_ivshmem(const char *dir)
{
	unsigned long vendor, device;
	return read_hex(dir, "vendor", &vendor) && read_hex(dir, "device", &device) &&
	       vendor == IVSHMEM_VENDOR && device == IVSHMEM_DEVICE;
}

/* the size of BAR n from the device's "resource" file (line n: start end flags) */
static uint64_t bar_size(const char *dir, int n)
{
	char path[4096], line[256];
	snprintf(path, sizeof(path), "%s/%s/resource", sysfs_dir(), dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	uint64_t size = 0;
	for (int i = 0; fgets(line, sizeof(line), f); i++) {
		if (i != n)
			continue;
		unsigned long long start, end;
		if (sscanf(line, "%llx %llx", &start, &end) == 2 && end > start)
			size = end - start + 1;
		break;
	}
	fclose(f);
	return size;
}

/* the PCI command register's memory-space bit, from the config file
 * (offset 4, little-endian); -1 when it cannot be read */
static int memory_decoding(const char *dir)
{
	char path[4096];
	unsigned char cfg[6];
	snprintf(path, sizeof(path), "%s/%s/config", sysfs_dir(), dir);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, cfg, sizeof(cfg), 0);
	close(fd);
	if (n != (ssize_t)sizeof(cfg))
		return -1;
	return (cfg[4] & 0x2) != 0;
}

static void human(uint64_t b, char *buf, size_t len)
{
	if (b >= (1ull << 30) && b % (1ull << 30) == 0)
		snprintf(buf, len, "%" PRIu64 " GiB", b >> 30);
	else if (b >= (1ull << 20) && b % (1ull << 20) == 0)
		snprintf(buf, len, "%" PRIu64 " MiB", b >> 20);
	else if (b >= 1024 && b % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 " KiB", b >> 10);
	else
		snprintf(buf, len, "%" PRIu64 " B", b);
}

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmd_list(void)
{
	DIR *d = opendir(sysfs_dir());
	if (!d) {
		fprintf(stderr, "ivshmem_probe: %s: %s\n", sysfs_dir(), strerror(errno));
		return 2;
	}
	/* readdir's order is the directory's: sort for a stable listing */
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || !is_ivshmem(e->d_name))
			continue;
		char **nn = realloc(names, (n + 1) * sizeof(*names));
		if (!nn || !(nn[n] = strdup(e->d_name))) {
			fprintf(stderr, "ivshmem_probe: out of memory\n");
			return 2;
		}
		names = nn;
		n++;
	}
	closedir(d);
	if (n > 1)
		qsort(names, n, sizeof(*names), cmp_names);
	for (size_t i = 0; i < n; i++) {
		uint64_t b2 = bar_size(names[i], 2), b0 = bar_size(names[i], 0);
		char h[32];
		human(b2, h, sizeof(h));
		int mem = memory_decoding(names[i]);
		printf("%s bar2 %" PRIu64 " (%s) bar0 %" PRIu64 " memory %s\n", names[i], b2,
		       h, b0, mem < 0 ? "?" : mem ? "on" : "off");
		free(names[i]);
	}
	free(names);
	if (n == 0) {
		fprintf(stderr, "ivshmem_probe: no ivshmem device (%04x:%04x) in %s\n",
			IVSHMEM_VENDOR, IVSHMEM_DEVICE, sysfs_dir());
		return 1;
	}
	return 0;
}

/* a mapped region: a device's BAR (sysfs resourceN) or a file */
struct region {
	volatile uint8_t *base;
	size_t size;
	bool is_file;
	char path[4096];
};

/* "00:02.0" is "0000:00:02.0" */
static void pci_name(const char *addr, char *buf, size_t len)
{
	const char *c = strchr(addr, ':');
	if (c && strchr(c + 1, ':'))
		snprintf(buf, len, "%s", addr);
	else
		snprintf(buf, len, "0000:%s", addr);
}

/* the device must be ours, with its memory decoding on (else its BARs
 * read as nothing): a device without a driver may have it off, and writing
 * 1 to sysfs "enable" turns it on */
static int check_device(const char *dev)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", sysfs_dir(), dev);
	struct stat st;
	if (stat(path, &st) != 0) {
		fprintf(stderr, "ivshmem_probe: %s: %s\n", path, strerror(errno));
		return 2;
	}
	if (!is_ivshmem(dev)) {
		fprintf(stderr, "ivshmem_probe: %s is not an ivshmem device (%04x:%04x)\n",
			dev, IVSHMEM_VENDOR, IVSHMEM_DEVICE);
		return 2;
	}
	if (memory_decoding(dev) == 0) {
		snprintf(path, sizeof(path), "%s/%s/enable", sysfs_dir(), dev);
		FILE *f = fopen(path, "w");
		bool ok = f && fputs("1", f) >= 0;
		if (f && fclose(f) != 0)
			ok = false;
		fprintf(stderr, "ivshmem_probe: %s: memory decoding was off; enabling the device: %s\n",
			dev, ok ? "done" : strerror(errno));
		if (memory_decoding(dev) != 1) {
			fprintf(stderr, "ivshmem_probe: %s: memory decoding still off\n", dev);
			return 2;
		}
	}
	return 0;
}

static int map_path(struct region *r, const char *path, bool is_file)
{
	snprintf(r->path, sizeof(r->path), "%s", path);
	r->is_file = is_file;
	/* O_SYNC on a sysfs resource asks for an uncached mapping */
	int fd = open(path, O_RDWR | (is_file ? 0 : O_SYNC));
	if (fd < 0) {
		fprintf(stderr, "ivshmem_probe: open %s: %s%s\n", path, strerror(errno),
			errno == EACCES || errno == EPERM ? " (mapping a PCI BAR needs root)" : "");
		return 2;
	}
	struct stat st;
	if (fstat(fd, &st) != 0 || st.st_size <= 0) {
		fprintf(stderr, "ivshmem_probe: %s: %s\n", path,
			st.st_size <= 0 ? "empty" : strerror(errno));
		close(fd);
		return 2;
	}
	r->size = (size_t)st.st_size;
	void *p = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int err = errno;
	close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, "ivshmem_probe: mmap %s (%zu bytes): %s\n", path, r->size,
			strerror(err));
		return 2;
	}
	r->base = p;
	return 0;
}

/* TARGET at argv[*i]: a PCI address or --file PATH; BAR bar of the device */
static int map_target(struct region *r, int argc, char **argv, int *i, int bar)
{
	if (*i >= argc)
		return usage();
	if (strcmp(argv[*i], "--file") == 0) {
		if (*i + 1 >= argc)
			return usage();
		*i += 2;
		return map_path(r, argv[*i - 1], true);
	}
	char dev[256], path[4096];
	pci_name(argv[(*i)++], dev, sizeof(dev));
	int rc = check_device(dev);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s/%s/resource%d", sysfs_dir(), dev, bar);
	return map_path(r, path, false);
}

static void unmap(struct region *r)
{
	munmap((void *)r->base, r->size);
}

static bool parse_u64(const char *s, uint64_t *v)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(s, &end, 0);
	if (errno || end == s || *end || s[0] == '-')
		return false;
	*v = x;
	return true;
}

static bool fits(const struct region *r, uint64_t off, uint64_t len)
{
	if (off > r->size || len > r->size - off) {
		fprintf(stderr, "ivshmem_probe: %" PRIu64 " bytes at %" PRIu64
				" do not fit in %s (%zu bytes)\n",
			len, off, r->path, r->size);
		return false;
	}
	return true;
}

static int cmd_write(int argc, char **argv)
{
	int i = 2;
	struct region r;
	int rc = map_target(&r, argc, argv, &i, 2);
	if (rc)
		return rc;
	uint64_t off;
	if (argc - i != 2 || !parse_u64(argv[i], &off)) {
		unmap(&r);
		return usage();
	}
	const char *s = argv[i + 1];
	size_t len = strlen(s);
	if (!fits(&r, off, (uint64_t)len + 1)) {
		unmap(&r);
		return 2;
	}
	/* byte by byte through a volatile pointer: each byte is a store to
	 * the BAR, none kept in a register or merged away */
	for (size_t k = 0; k < len; k++)
		r.base[off + k] = (uint8_t)s[k];
	r.base[off + len] = 0;
	__sync_synchronize();
	if (r.is_file && msync((void *)r.base, r.size, MS_SYNC) != 0)
		fprintf(stderr, "ivshmem_probe: msync %s: %s\n", r.path, strerror(errno));
	printf("wrote %zu bytes at %" PRIu64 " of %s\n", len + 1, off, r.path);
	unmap(&r);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* the bytes up to the first NUL, those that do not print as \xNN */
static void print_bytes(FILE *f, const uint8_t *b, size_t len)
{
	for (size_t k = 0; k < len && b[k]; k++) {
		if (b[k] >= 0x20 && b[k] < 0x7f && b[k] != '\\')
			fputc(b[k], f);
		else
			fprintf(f, "\\x%02x", b[k]);
	}
	fputc('\n', f);
}

static int cmd_read(int argc, char **argv)
{
	int i = 2;
	struct region r;
	int rc = map_target(&r, argc, argv, &i, 2);
	if (rc)
		return rc;
	uint64_t off, len;
	const char *want = NULL;
	double timeout = 10;
	if (argc - i < 2 || !parse_u64(argv[i], &off) || !parse_u64(argv[i + 1], &len))
		goto bad;
	for (i += 2; i < argc; i += 2) {
		if (i + 1 >= argc)
			goto bad;
		if (strcmp(argv[i], "--wait-for") == 0) {
			want = argv[i + 1];
		} else if (strcmp(argv[i], "--timeout") == 0) {
			char *end;
			timeout = strtod(argv[i + 1], &end);
			if (end == argv[i + 1] || *end || !(timeout >= 0))
				goto bad;
		} else {
			goto bad;
		}
	}
	if (len == 0 || len > (1u << 20) || (want && strlen(want) > len)) {
		fprintf(stderr, "ivshmem_probe: LEN must be 1..1048576 and hold the awaited string\n");
		unmap(&r);
		return 2;
	}
	if (!fits(&r, off, len)) {
		unmap(&r);
		return 2;
	}
	uint8_t *buf = malloc(len);
	if (!buf) {
		unmap(&r);
		return 2;
	}
	size_t wlen = want ? strlen(want) : 0;
	double start = now_s(), deadline = start + timeout;
	unsigned long reads = 0;
	bool seen;
	for (;;) {
		for (size_t k = 0; k < len; k++)
			buf[k] = r.base[off + k];
		reads++;
		seen = !want || memcmp(buf, want, wlen) == 0;
		if (seen || now_s() >= deadline)
			break;
		struct timespec ms = {0, 1000000};
		nanosleep(&ms, NULL);
	}
	if (seen) {
		print_bytes(stdout, buf, len);
		if (want)
			fprintf(stderr, "ivshmem_probe: found at %" PRIu64 " after %.3f s (%lu reads)\n",
				off, now_s() - start, reads);
		rc = 0;
	} else {
		fprintf(stderr, "ivshmem_probe: timed out after %.3f s (%lu reads) waiting for \"%s\" at %"
				PRIu64 " of %s; last seen: ",
			now_s() - start, reads, want, off, r.path);
		print_bytes(stderr, buf, len);
		rc = 1;
	}
	free(buf);
	unmap(&r);
	return rc;
bad:
	unmap(&r);
	return usage();
}

static int cmd_id(int argc, char **argv)
{
	if (argc != 3 || strcmp(argv[2], "--file") == 0)
		return usage();
	int i = 2;
	struct region r;
	int rc = map_target(&r, argc, argv, &i, 0);
	if (rc)
		return rc;
	if (!fits(&r, REG_IVPOSITION, 4)) {
		unmap(&r);
		return 2;
	}
	uint32_t id = *(volatile uint32_t *)(r.base + REG_IVPOSITION);
	printf("%" PRIu32 "\n", id);
	unmap(&r);
	return 0;
}

static int cmd_scribble(int argc, char **argv)
{
	uint64_t x = 88172645463325252ull, ms, n;
	bool said = false;
	struct region r;
	double end;
	int i = 2;
	int rc = map_target(&r, argc, argv, &i, 2);

	if (rc)
		return rc;
	if (argc - i != 1 || !parse_u64(argv[i], &ms) || r.size < 8) {
		unmap(&r);
		return usage();
	}
	n = r.size / 8;
	end = now_s() + (double)ms / 1000;
	while (now_s() < end) {
		for (int k = 0; k < 4096; k++) { /* xorshift64 */
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			((volatile uint64_t *)r.base)[x % n] =
				x * 0x9e3779b97f4a7c15ull;
		}
		if (!said) { /* the caller may start what it attacks */
			printf("scribbling\n");
			fflush(stdout);
			said = true;
		}
		usleep(100);
	}
	printf("scribbled over %zu bytes of %s for %" PRIu64 " ms\n", r.size,
	       r.path, ms);
	unmap(&r);
	return 0;
}

static int cmd_zero(int argc, char **argv)
{
	struct region r;
	int i = 2;
	int rc = map_target(&r, argc, argv, &i, 2);

	if (rc)
		return rc;
	if (argc != i) {
		unmap(&r);
		return usage();
	}
	for (size_t k = 0; k < r.size / 8; k++)
		((volatile uint64_t *)r.base)[k] = 0;
	__sync_synchronize();
	printf("zeroed %zu bytes of %s\n", r.size, r.path);
	unmap(&r);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || strcmp(argv[1], "list") == 0)
		return argc <= 2 ? cmd_list() : usage();
	if (strcmp(argv[1], "write") == 0)
		return cmd_write(argc, argv);
	if (strcmp(argv[1], "read") == 0)
		return cmd_read(argc, argv);
	if (strcmp(argv[1], "id") == 0)
		return cmd_id(argc, argv);
	if (strcmp(argv[1], "scribble") == 0)
		return cmd_scribble(argc, argv);
	if (strcmp(argv[1], "zero") == 0)
		return cmd_zero(argc, argv);
	return usage();
}
