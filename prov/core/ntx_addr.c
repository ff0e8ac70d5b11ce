/*
 * Endpoint names: host identity, validation and the printable form
 * "fi_ntx://HOST/PID:FD:EP:SERVICE/EPOCH" used by fi_av_straddr.
 */
#include "config.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ntx/ntx_base.h"

static uint64_t ntx_fnv1a(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static _Atomic uint32_t ntx_host_id_cached;

/* A forked child may enter other namespaces (setns, unshare) before it
 * opens anything: it works its identity out again. */
static void ntx_host_id_atfork_child(void)
{
	atomic_store(&ntx_host_id_cached, 0);
}

static void ntx_host_id_register_atfork(void)
{
	pthread_atfork(NULL, NULL, ntx_host_id_atfork_child);
}

/* Where a peer's window can be reached: the same kernel (boot id) and the
 * same network namespace (the abstract sockets of services and wake-ups),
 * pid namespace (/proc/PID/fd of the window, process_vm_readv) and user
 * namespace (ptrace rights for single copy). Two containers on one kernel
 * get different identities and reach each other through the network
 * (DESIGN §4, "locality"). */
uint32_t ntx_host_id(void)
{
	static const char *const ns[] = { "net", "pid", "user" };
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	_Atomic uint32_t *id = &ntx_host_id_cached;
	char buf[160] = "";
	size_t len = 0;
	ssize_t n = 0;
	uint64_t h;
	int fd;

	if (*id)
		return *id;
	pthread_once(&once, ntx_host_id_register_atfork);
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, buf, 64);
		close(fd);
	}
	if (n <= 0)
		n = gethostname(buf, 64) ? 0 : (ssize_t)strlen(buf);
	len = (size_t)n;
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		char path[32];
		struct stat st;

		snprintf(path, sizeof(path), "/proc/self/ns/%s", ns[i]);
		if (!stat(path, &st))
			len += (size_t)snprintf(buf + len, sizeof(buf) - len,
						":%llx", (unsigned long long)
						st.st_ino);
	}
	h = ntx_fnv1a(buf, len);
	/* odd: never 0 (invalid) nor NTX_HOST_UNKNOWN */
	*id = (uint32_t)(h ^ (h >> 32)) | 1;
	return *id;
}

uint64_t ntx_random64(void)
{
	uint64_t v;

	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = ntx_now_ns() * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	return v;
}

bool ntx_addr_valid(const struct ntx_addr *a)
{
	return a->magic == NTX_ADDR_MAGIC && a->version == NTX_ADDR_VERSION &&
	       a->host != 0 &&
	       (a->flags & ~(NTX_ADDR_F_UNBOUND | NTX_ADDR_F_SERVICE |
			     NTX_ADDR_F_KEYED | NTX_ADDR_F_QPN_MASK)) == 0;
}

bool ntx_addr_same_ep(const struct ntx_addr *a, const struct ntx_addr *b)
{
	return a->host == b->host && a->pid == b->pid &&
	       a->ep_id == b->ep_id && a->service == b->service;
}

size_t ntx_addr_list_count(const struct ntx_addr *first)
{
	if (!(first->flags & NTX_ADDR_F_SEP))
		return 1;
	return (size_t)((first->flags & NTX_ADDR_F_QPN_MASK) >>
			NTX_ADDR_F_QPN_SHIFT) + 1;
}

int ntx_addr_list_parse(const struct ntx_addr *in, size_t n,
			struct ntx_addr *out)
{
	const uint8_t bits = NTX_ADDR_F_SEP | NTX_ADDR_F_QPN_MASK;

	if (!n || n > NTX_SEP_CTX_MAX || ntx_addr_list_count(&in[0]) != n)
		return -FI_EINVAL;
	for (size_t i = 0; i < n; i++) {
		struct ntx_addr a = in[i];
		size_t want = i ? i : n - 1;

		if (n > 1 && (!(a.flags & NTX_ADDR_F_SEP) ||
			      (size_t)((a.flags & NTX_ADDR_F_QPN_MASK) >>
				       NTX_ADDR_F_QPN_SHIFT) != want))
			return -FI_EINVAL;
		if (n > 1)
			a.flags &= (uint8_t)~bits;
		if (!ntx_addr_valid(&a) ||
		    (n > 1 && (a.flags & NTX_ADDR_F_UNBOUND)) ||
		    (i && (a.host != out[0].host || a.pid != out[0].pid)))
			return -FI_EINVAL;
		out[i] = a;
	}
	return 0;
}

void ntx_addr_list_mark(struct ntx_addr *names, size_t n)
{
	for (size_t i = 0; i < n && n > 1; i++)
		names[i].flags |= (uint8_t)(NTX_ADDR_F_SEP |
			((i ? i : n - 1) << NTX_ADDR_F_QPN_SHIFT));
}

int ntx_addr_to_str(const struct ntx_addr *a, char *buf, size_t len)
{
	struct in_addr in = { .s_addr = a->ip4 };
	char ip[INET_ADDRSTRLEN] = "0.0.0.0";

	inet_ntop(AF_INET, &in, ip, sizeof(ip));
	return snprintf(buf, len, "fi_ntx://%08" PRIx32 "/%u:%d:%u:%u/%08"
			PRIx32 "/%s:%u", a->host, a->pid, a->win_fd,
			(unsigned)a->ep_id, a->service, a->epoch, ip,
			ntohs(a->port));
}

int ntx_addr_from_str(const char *s, struct ntx_addr *a)
{
	struct ntx_addr t = { .magic = NTX_ADDR_MAGIC,
			      .version = NTX_ADDR_VERSION };
	char ip[INET_ADDRSTRLEN + 1];
	unsigned port, ep_id;
	struct in_addr in;
	int used = 0;

	if (sscanf(s, "fi_ntx://%8" SCNx32 "/%u:%d:%u:%u/%8" SCNx32
		   "/%16[0-9.]:%u%n", &t.host, &t.pid, &t.win_fd, &ep_id,
		   &t.service, &t.epoch, ip, &port, &used) != 8 ||
	    s[used] != '\0' || port > 65535 || ep_id > 65535 ||
	    !inet_pton(AF_INET, ip, &in))
		return -FI_EINVAL;
	t.ep_id = (uint16_t)ep_id;
	if (!ntx_addr_valid(&t))
		return -FI_EINVAL;
	t.ip4 = in.s_addr;
	t.port = htons((uint16_t)port);
	*a = t;
	return 0;
}

bool ntx_ip4_is_local(uint32_t ip4)
{
	struct ifaddrs *ifs, *it;
	bool local = (ntohl(ip4) >> 24) == 127;

	if (local || getifaddrs(&ifs))
		return local;
	for (it = ifs; it && !local; it = it->ifa_next)
		local = it->ifa_addr && it->ifa_addr->sa_family == AF_INET &&
			((struct sockaddr_in *)it->ifa_addr)->sin_addr.s_addr
				== ip4;
	freeifaddrs(ifs);
	return local;
}

int ntx_addr_from_sin(const struct sockaddr_in *sin, struct ntx_addr *a)
{
	struct ntx_addr t = { .magic = NTX_ADDR_MAGIC,
			      .version = NTX_ADDR_VERSION,
			      .flags = NTX_ADDR_F_UNBOUND, .win_fd = -1 };

	if (sin->sin_family != AF_INET || !sin->sin_addr.s_addr ||
	    !sin->sin_port)
		return -FI_EINVAL;
	t.ip4 = sin->sin_addr.s_addr;
	t.port = sin->sin_port;
	t.service = ntohs(sin->sin_port);
	t.host = ntx_ip4_is_local(t.ip4) ? ntx_host_id() : NTX_HOST_UNKNOWN;
	*a = t;
	return 0;
}

int ntx_addr_to_sin(const struct ntx_addr *a, struct sockaddr_in *sin)
{
	if (!a->service || a->service > 65535)
		return -FI_EINVAL;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)a->service);
	sin->sin_addr.s_addr = a->ip4 ? a->ip4 : htonl(INADDR_LOOPBACK);
	return 0;
}
