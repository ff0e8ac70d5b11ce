/*
 * The bottom header of every layer (DESIGN §2): logging, container_of,
 * parameters, endpoint names, job keys, time, randomness and lists. It
 * names nothing above prov/core.
 */
#ifndef NTX_BASE_H
#define NTX_BASE_H

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_log.h>
#include <rdma/providers/fi_prov.h>

#include "ntx/ntx_list.h"

#define NTX_PROV_NAME "ntx"
#define NTX_PROV_VERSION FI_VERSION(0, 1)
/* The newest libfabric API whose semantics ntx implements (DESIGN §2,
 * API versions). ntx reports it as its fi_version, capped by the headers
 * it was built against (NTX_FI_VERSION) and, when libfabric loads it, by
 * the core's fi_version() (fi_prov_ini). */
#define NTX_API_NEWEST FI_VERSION(2, 1)
#define NTX_API_HEADERS FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)
#define NTX_FI_VERSION                                                    \
	(NTX_API_HEADERS < NTX_API_NEWEST ? NTX_API_HEADERS : NTX_API_NEWEST)
/* Values libfabric 2.x deprecates that callers of older API versions
 * still pass: mr_mode FI_MR_BASIC and FI_MR_SCALABLE (whole modes before
 * API 1.5) and comp_order FI_ORDER_NONE. */
#define NTX_MR_BASIC (1 << 0)
#define NTX_MR_SCALABLE (1 << 1)
#define NTX_ORDER_NONE 0ULL
#define NTX_FABRIC_NAME "ntx"
#define NTX_DOMAIN_SHM "shm"
#define NTX_DOMAIN_TCP "tcp"
#define NTX_DOMAIN_UDP "udp"

#define NTX_CACHELINE 64

#define ntx_container_of(ptr, type, field) \
	((type *)((char *)(ptr) - offsetof(type, field)))

extern struct fi_provider ntx_prov;

/* Warnings are rate-limited per call site (ntx_log_rate_ok): at most
 * FI_NTX_LOG_RATE (NTX_LOG_BURST) lines a second from each, then one
 * line that counts what was left out. A peer that sends the same bad packet, or an application
 * that retries the same refused call, a million times a second writes a
 * few lines, not a million. */
#define NTX_LOG_BURST 5
struct ntx_log_rate {
	uint64_t second;  /* the second the count is for */
	uint32_t count;	  /* lines asked for in that second */
	uint32_t dropped; /* lines left out since the last one written */
};
bool ntx_log_rate_ok(struct ntx_log_rate *r, uint32_t *dropped);

#define NTX_WARN(subsys, ...)                                              \
	do {                                                               \
		static struct ntx_log_rate ntx_rl_;                        \
		uint32_t ntx_dropped_;                                     \
		if (fi_log_enabled(&ntx_prov, FI_LOG_WARN, subsys) &&      \
		    ntx_log_rate_ok(&ntx_rl_, &ntx_dropped_)) {            \
			if (ntx_dropped_)                                  \
				FI_WARN(&ntx_prov, subsys,                 \
					"%u more lines like the next were " \
					"left out\n", ntx_dropped_);       \
			FI_WARN(&ntx_prov, subsys, __VA_ARGS__);           \
		}                                                          \
	} while (0)
#define NTX_INFO(subsys, ...) FI_INFO(&ntx_prov, subsys, __VA_ARGS__)
#define NTX_DBG(subsys, ...) FI_DBG(&ntx_prov, subsys, __VA_ARGS__)

/* ---- parameters (defined and read in ntx_param.c only) ------------------- */
/* The longest streamed message (NTX_OP_SHEAD) a receiver takes, and so
 * FI_NTX_SHM_STREAM_MAX's most. */
#define NTX_STREAM_LIMIT ((size_t)4 << 20)

struct ntx_params {
	size_t eager_max;      /* largest message sent inline in ring entries */
	size_t ring_size;      /* bytes per receive ring (multiple of 64) */
	size_t max_peers;      /* ring slots per endpoint window */
	int shm_cma;           /* single-copy bulk moves with process_vm_readv */
	size_t shm_split_min;  /* rendezvous size from which both sides copy */
	size_t shm_stream_max; /* largest message streamed through the ring
				* without a rendezvous (0: none) */
	size_t shm_bulk_size;  /* bytes of each slot's bulk area (0: none) */
	size_t shm_bulk_idle_ms; /* unused that long: its pages given back */
	int peer_check_ms;     /* period of the liveness check of peers */
	int peer_pidfd;        /* watch local peers with pidfds (0: /proc) */
	size_t tcp_hello_ms;   /* an accepted tcp connection's hello time */
	size_t tcp_timeout_ms; /* tcp: unacknowledged data, silence, connect */
	size_t tcp_eager_max;  /* tcp: largest message sent in one frame */
	size_t tcp_unproven_max; /* tcp: accepted, not yet proven, at once */
	size_t tcp_proof_rate;   /* tcp: proofs a second per source address */
	size_t udp_mtu;        /* udp: bytes of a datagram's UDP payload */
	size_t udp_timeout_ms; /* udp: data unacknowledged this long fails */
	size_t udp_max_peers;  /* udp: peers unknown senders may create */
	int udp_gso;           /* udp: send runs of datagrams with UDP GSO */
	int acked_sends;       /* udp, ud: eager sends complete at the ACK */
	int local_via_network; /* same-host peers through the network too */
	size_t progress_idle_us; /* auto progress: helper waits this long */
	int idle_yield;          /* empty CQ reads between sched_yield calls
				  * (0: never) */
	char *domains;           /* FI_NTX_DOMAINS: what getinfo lists */
	char *ivshmem_socket;    /* an ivshmem server's socket: the
				  * "ivshmem-host" domain */
	int rxm;                 /* MSG entries for utility providers */
	int mr_offered;          /* take the mr_mode bits the hints offer */
	char *progress_cpus;     /* auto progress: cpuset of the helper */
	size_t cq_size;        /* default CQ depth */
	size_t min_multi_recv; /* default FI_OPT_MIN_MULTI_RECV */
	size_t peer_unexp_max; /* unexpected bytes one peer may hold */
	size_t ep_unexp_max;   /* ... all live peers of a receive context */
	size_t gone_unexp_max; /* ... peers that are gone, per endpoint */
	char *auth_key;        /* FI_NTX_AUTH_KEY: the default job key */
	size_t auth_timeout_ms; /* a job-key exchange not done by then fails */
	size_t log_rate;        /* NTX_WARN lines a second per call site */
};
extern struct ntx_params ntx_params;
void ntx_params_init(void);

/* ---- endpoint names (wire format: fixed width, no pointers) ------------- */
#define NTX_ADDR_MAGIC 0x4e58u /* "NX" */
#define NTX_ADDR_VERSION 1
#define NTX_ADDR_STRLEN 96

/* 32 bytes: applications (fabtests' fi_rdm_stress among them) keep names
 * in 32-byte buffers. */
struct ntx_addr {
	uint16_t magic;
	uint8_t version;
	uint8_t flags;    /* NTX_ADDR_F_* */
	uint32_t host;    /* host identity: hash of the boot id */
	uint32_t pid;     /* process holding the window */
	int32_t win_fd;   /* fd of the window memfd in that process */
	uint32_t service; /* service number when one was given, else 0 */
	uint32_t epoch;   /* endpoint incarnation, random */
	uint32_t ip4;     /* network back end: IPv4 address, network order */
	uint16_t ep_id;   /* endpoint number within the process */
	uint16_t port;    /* network back end: TCP port, network order */
};
_Static_assert(sizeof(struct ntx_addr) == 32, "ntx_addr is a wire format");

#define NTX_ADDR_F_UNBOUND 1 /* name from fi_getinfo, no window yet */
#define NTX_ADDR_F_SERVICE 2 /* resolved from a service: look it up again
			      * when its endpoint fails (a restart) */
#define NTX_ADDR_F_KEYED 4   /* the endpoint has a job key: a peer without
			      * one fails at connect (DESIGN §7) */
/* The ud domains' names (DESIGN §10, "The ud back end"): port holds bits
 * 0-15 of the endpoint's UD QP number (network order), these flag bits
 * bits 16-19; QP numbers from 2^20 on do not fit (the endpoint fails).
 * Flag bit 0x08 stays free. */
#define NTX_ADDR_F_QPN_SHIFT 4
#define NTX_ADDR_F_QPN_MASK 0xf0
/* A scalable endpoint's name (DESIGN §3, "Scalable endpoints") is the
 * list of its contexts' names, each with this flag; bits 4-7 hold the
 * count minus 1 in the first name, the name's index in the others. Only
 * fi_getname and fi_av_insert see it: the names endpoints and AVs keep
 * have it cleared (no ud domain offers scalable endpoints). */
#define NTX_ADDR_F_SEP 0x08
#define NTX_SEP_CTX_MAX 16 /* contexts of a scalable endpoint */
#define NTX_SEP_CTX_SHIFT 4 /* log2 of NTX_SEP_CTX_MAX */
#define NTX_HOST_UNKNOWN 2   /* a remote node known only by IP and port */

uint32_t ntx_host_id(void);
bool ntx_addr_valid(const struct ntx_addr *a);
bool ntx_addr_same_ep(const struct ntx_addr *a, const struct ntx_addr *b);
/* A scalable endpoint's name list (NTX_ADDR_F_SEP): how many names the
 * one at 'first' says follow it, 1 for a plain name. */
size_t ntx_addr_list_count(const struct ntx_addr *first);
/* Checks a list of n names read from an application or a peer and copies
 * it without the list bits: each valid, flagged, numbered in order, all
 * of one process. -FI_EINVAL otherwise. */
int ntx_addr_list_parse(const struct ntx_addr *in, size_t n,
			struct ntx_addr *out);
/* Writes the list bits into n names (n <= NTX_SEP_CTX_MAX). */
void ntx_addr_list_mark(struct ntx_addr *names, size_t n);
int ntx_addr_to_str(const struct ntx_addr *a, char *buf, size_t len);
int ntx_addr_from_str(const char *s, struct ntx_addr *a);
/* FI_SOCKADDR_IN names (DESIGN §3, "Address formats"): an endpoint is
 * its IPv4 address and its service number as port. From one: an
 * unbound name resolved at the first send, as fi_getinfo's node/service;
 * -FI_EINVAL for another family, address 0 or port 0. */
struct sockaddr_in;
int ntx_addr_from_sin(const struct sockaddr_in *sin, struct ntx_addr *a);
/* To one: -FI_EINVAL for a name whose service is not a port (0 or above
 * 65535). An endpoint with no IPv4 address (shm) is 127.0.0.1. */
int ntx_addr_to_sin(const struct ntx_addr *a, struct sockaddr_in *sin);
/* An IPv4 address (network order) of this host: loopback or one of its
 * interfaces'. */
bool ntx_ip4_is_local(uint32_t ip4);
uint64_t ntx_random64(void);

/* ---- job keys (FI_AUTH_KEY, DESIGN §7) ------------------------------------ */
#define NTX_AUTH_KEY_MAX 256 /* bytes */
struct ntx_auth_key {
	size_t len; /* 0: no key */
	uint8_t key[NTX_AUTH_KEY_MAX];
};
/* The key of an object: the attribute's if it has one, else 'dflt';
 * -FI_EINVAL for a malformed one. */
int ntx_auth_key_set(struct ntx_auth_key *k, const void *key, size_t len,
		     const struct ntx_auth_key *dflt);
/* FI_NTX_AUTH_KEY (no key when unset). */
void ntx_auth_key_default(struct ntx_auth_key *k);

/* ---- small helpers --------------------------------------------------------- */
/* A counter of users so that close can return -FI_EBUSY. */
static inline void ntx_ref_get(atomic_int *r) { atomic_fetch_add(r, 1); }
static inline void ntx_ref_put(atomic_int *r) { atomic_fetch_sub(r, 1); }

#define NTX_MAX_IOV 8
/* what fi_info's iov limits say unless the hints ask for up to
 * NTX_MAX_IOV (DESIGN §2): the other core providers' figure, and the one
 * fabtests' ubertest can count (its weighted iovecs of 6 pieces for 16
 * bytes add up to 17) */
#define NTX_IOV_DEFAULT 4

static inline uint64_t ntx_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A copy of at most 16 bytes, inline: memcpy of a length known only at
 * run time is a call into libc, which costs more than an 8-byte message
 * (DESIGN §3, protocols: payloads of at most 16 bytes ride in the
 * header). Two overlapping moves of 8, 4 or 1 bytes; the buffers do not
 * overlap. */
static inline void ntx_copy16(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;

	assert(len <= 16);
	if (len >= 8) {
		uint64_t a, b;

		memcpy(&a, s, 8);
		memcpy(&b, s + len - 8, 8);
		memcpy(d, &a, 8);
		memcpy(d + len - 8, &b, 8);
	} else if (len >= 4) {
		uint32_t a, b;

		memcpy(&a, s, 4);
		memcpy(&b, s + len - 4, 4);
		memcpy(d, &a, 4);
		memcpy(d + len - 4, &b, 4);
	} else if (len) {
		d[0] = s[0];
		d[len / 2] = s[len / 2];
		d[len - 1] = s[len - 1];
	}
}

/* Up to 8 bytes as a word, in memory order (what memcpy of len bytes
 * into a zeroed word makes), without a call for a length known only at
 * run time; 8 bytes, the common case, are one load. */
static inline uint64_t ntx_word_of(const void *src, size_t len)
{
	uint8_t t[8] = { 0 };
	uint64_t v;

	assert(len <= 8);
	if (len == 8) {
		memcpy(&v, src, 8);
		return v;
	}
	ntx_copy16(t, src, len & 7);
	memcpy(&v, t, 8);
	return v;
}

#endif /* NTX_BASE_H */
