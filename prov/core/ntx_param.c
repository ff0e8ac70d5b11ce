/*
 * Every FI_NTX_* tunable, defined (fi_param_define, listed by fi_info -e)
 * and read in this one place. man/fi_ntx.7.md documents each of them.
 */
#include "config.h"
#include <stdlib.h>
#include <unistd.h>

#include "ntx/ntx_base.h"

struct ntx_params ntx_params = {
	.eager_max = 8192,
	.ring_size = 24576,
	.max_peers = 256,
	.shm_cma = 1,
	.shm_split_min = 65536,
	.shm_stream_max = 262144,
	.shm_bulk_size = 131072,
	.shm_bulk_idle_ms = 100,
	.peer_check_ms = 200,
	.mr_offered = 1,
	.peer_pidfd = 1,
	.tcp_hello_ms = 30000,
	.tcp_timeout_ms = 15000,
	.tcp_eager_max = 65536,
	.tcp_unproven_max = 1024,
	.tcp_proof_rate = 128,
	.udp_mtu = 1472, /* an Ethernet frame: 1500 - IPv4 20 - UDP 8 */
	.udp_timeout_ms = 20000,
	.udp_max_peers = 65536,
	.udp_gso = 1,
	.cq_size = 1024,
	.min_multi_recv = 64,
	.peer_unexp_max = (size_t)1 << 30, /* an MPI rank may hold a lot */
	.ep_unexp_max = (size_t)1 << 30,
	.gone_unexp_max = 1u << 20,
	.progress_idle_us = 10000,
	.idle_yield = -1,
	.progress_cpus = NULL,
	.auth_timeout_ms = 30000,
	.log_rate = NTX_LOG_BURST,
};

static void ntx_param_size(const char *name, const char *help, size_t *val,
			   size_t lo, size_t hi)
{
	size_t v;

	fi_param_define(&ntx_prov, name, FI_PARAM_SIZE_T, "%s (default: %zu)",
			help, *val);
	if (fi_param_get_size_t(&ntx_prov, name, &v) != FI_SUCCESS)
		return;
	if (v < lo || v > hi) {
		NTX_WARN(FI_LOG_CORE, "FI_NTX_%s=%zu is outside [%zu, %zu]; "
			 "keeping %zu\n", name, v, lo, hi, *val);
		return;
	}
	*val = v;
}

static void ntx_param_int(const char *name, const char *help, int *val,
			  enum fi_param_type type)
{
	int v;

	fi_param_define(&ntx_prov, name, type, "%s (default: %d)", help, *val);
	if (fi_param_get(&ntx_prov, name, &v) == FI_SUCCESS)
		*val = v;
}

/* The definitions run in the order fi_info -e lists them: grouped by what
 * they tune, each group a function. */

/* messages and the shm window */
static void ntx_params_init_window(void)
{
	ntx_param_size("eager_max",
		       "largest message in bytes copied inline into the "
		       "peer's ring; larger ones use rendezvous",
		       &ntx_params.eager_max, 4096, 65536);
	ntx_param_size("ring_size",
		       "bytes of each per-peer receive ring in the shm window "
		       "(blocks of 512 bytes, at least twice FI_NTX_EAGER_MAX "
		       "plus two lines)",
		       &ntx_params.ring_size, 1024, 1u << 22);
	/* whole blocks of 8 lines (the ring math of ntx_ring.h) */
	ntx_params.ring_size &= ~(size_t)(8 * NTX_CACHELINE - 1);
	/* the shm back end raises it until an entry of eager_max bytes
	 * always finds room (ntx_ring_max_payload in ntx_ring.h) */
	ntx_param_size("max_peers",
		       "peers one endpoint can exchange messages with "
		       "(ring slots in its window)",
		       &ntx_params.max_peers, 2, 4096);
	ntx_param_int("shm_cma",
		      "move rendezvous data with process_vm_readv (single copy);"
		      " 0 pipelines it through the window",
		      &ntx_params.shm_cma, FI_PARAM_BOOL);
	ntx_param_size("shm_split_min",
		       "rendezvous size in bytes from which the sender writes "
		       "half of the message while the receiver reads the other "
		       "half (0: never)",
		       &ntx_params.shm_split_min, 0, SIZE_MAX);
	ntx_param_size("shm_stream_max",
		       "largest message in bytes above FI_NTX_EAGER_MAX that "
		       "the sender streams at once, a head in the peer's ring "
		       "and segments in its bulk area (the receiver copies "
		       "each piece out as the next is written) instead of a "
		       "rendezvous (0: never)",
		       &ntx_params.shm_stream_max, 0, NTX_STREAM_LIMIT);
	ntx_param_size("shm_bulk_size",
		       "bytes of the bulk area each peer's slot of the shm "
		       "window has beside its ring, where the segments of "
		       "streamed messages go (pages, at most 4 MiB; 0: none, "
		       "segments go through the ring)",
		       &ntx_params.shm_bulk_size, 0, NTX_STREAM_LIMIT);
	ntx_params.shm_bulk_size &= ~(size_t)4095;
	ntx_param_size("shm_bulk_idle_ms",
		       "milliseconds a bulk area stays unused before its "
		       "sender gives its pages back",
		       &ntx_params.shm_bulk_idle_ms, 1, 3600000);
}

/* how a dead peer is noticed */
static void ntx_params_init_peers(void)
{
	ntx_param_int("peer_check_ms",
		      "milliseconds between liveness checks of peers with "
		      "outstanding operations (a local peer's exit is seen at "
		      "once through its pidfd; without pidfds also the longest "
		      "a blocking wait sleeps)",
		      &ntx_params.peer_check_ms, FI_PARAM_INT);
	if (ntx_params.peer_check_ms < 1)
		ntx_params.peer_check_ms = 1;
	ntx_param_int("peer_pidfd",
		      "shm: watch each peer process with a pidfd, so a waiter "
		      "wakes at once when one dies; 0 reads /proc/PID/stat and "
		      "wakes waiters every FI_NTX_PEER_CHECK_MS instead (what "
		      "is done where pidfd_open fails)",
		      &ntx_params.peer_pidfd, FI_PARAM_BOOL);
}

static void ntx_params_init_tcp(void)
{
	ntx_param_size("tcp_hello_ms",
		       "tcp: milliseconds an accepted connection may take to "
		       "say hello before it is closed",
		       &ntx_params.tcp_hello_ms, 100, 3600000);
	ntx_param_size("tcp_timeout_ms",
		       "tcp: milliseconds a connection may go without an "
		       "acknowledgement of its data or keepalive probes (a peer "
		       "whose host vanished), or take to connect, before it "
		       "fails with error completions",
		       &ntx_params.tcp_timeout_ms, 1000, 3600000);
	ntx_param_size("tcp_eager_max",
		       "tcp: largest message in bytes sent eagerly in one "
		       "frame (the smaller of both sides'); "
		       "larger ones use rendezvous",
		       &ntx_params.tcp_eager_max, 4096, 65536);
	ntx_param_size("tcp_unproven_max",
		       "tcp: accepted connections an endpoint holds before they "
		       "proved a name; more wait in the kernel's queue of the "
		       "listener until some are proven or closed",
		       &ntx_params.tcp_unproven_max, 1, 1000000);
	ntx_param_size("tcp_proof_rate",
		       "tcp: names an endpoint checks a second for connections "
		       "from one address (each check dials the claimed name's "
		       "listener), in bursts of twice as many; a hello beyond "
		       "waits its turn",
		       &ntx_params.tcp_proof_rate, 1, 1000000);
}

static void ntx_params_init_udp(void)
{
	ntx_param_size("udp_mtu",
		       "udp: bytes of UDP payload per datagram (the path MTU "
		       "less 28 bytes of IPv4 and UDP headers); engine packets "
		       "are cut into datagrams of this size",
		       &ntx_params.udp_mtu, 576, 65000);
	ntx_param_size("udp_timeout_ms",
		       "udp: milliseconds a peer may acknowledge nothing of "
		       "the data sent to it before it fails with error "
		       "completions",
		       &ntx_params.udp_timeout_ms, 100, 3600000);
	ntx_param_size("udp_max_peers",
		       "udp: peers an endpoint keeps state for that were not "
		       "connected to by this process (first contact); "
		       "datagrams of further new senders are dropped",
		       &ntx_params.udp_max_peers, 1, 1u << 24);
	ntx_param_int("udp_gso",
		      "udp: send runs of datagrams to one peer as one UDP GSO "
		      "send (UDP_SEGMENT), cut by the kernel; 0 sends each "
		      "datagram on its own",
		      &ntx_params.udp_gso, FI_PARAM_BOOL);
	ntx_param_int("acked_sends",
		      "udp and ud: 1 completes an eager send only once the peer "
		      "acknowledged it, so that a send to a peer that dies "
		      "completes in error; 0 completes it when ntx took it",
		      &ntx_params.acked_sends, FI_PARAM_BOOL);
}

/* what fi_getinfo offers, and which back end reaches a local peer */
static void ntx_params_init_offer(void)
{
	fi_param_define(&ntx_prov, "domains", FI_PARAM_STRING,
			"comma-separated domain names fi_getinfo lists, in "
			"this order (e.g. \"udp\" or \"rxe0,shm\"; a domain "
			"listed only when named, such as udp, may be named "
			"here); an application or MPI that takes the first "
			"entry or every entry then uses these (default: every "
			"network domain, then shm)");
	fi_param_get_str(&ntx_prov, "domains", &ntx_params.domains);
	fi_param_define(&ntx_prov, "ivshmem_socket", FI_PARAM_STRING,
			"the UNIX socket of an ivshmem server: a host process "
			"attaches to the region qemu guests share through it, "
			"as domain \"ivshmem-host\" (guests find their ivshmem "
			"PCI devices themselves) (default: none)");
	fi_param_get_str(&ntx_prov, "ivshmem_socket",
			 &ntx_params.ivshmem_socket);
	ntx_param_int("rxm",
		      "show ntx's FI_EP_MSG entries to libfabric's utility "
		      "providers, so that ofi_rxm layers \"ntx;ofi_rxm\" RDM "
		      "entries over them (off by default: libfabric lists "
		      "those before ntx's own RDM entries, and applications "
		      "that ask for provider ntx take the first one)",
		      &ntx_params.rxm, FI_PARAM_BOOL);
	ntx_param_int("mr_offered",
		      "take the FI_MR_PROV_KEY and FI_MR_VIRT_ADDR bits the "
		      "hints' mr_mode offers (random keys a peer cannot "
		      "guess); 0 takes neither, so that keys are the "
		      "application's requested keys and remote addresses "
		      "offsets (what fabtests' fi_multi_mr assumes)",
		      &ntx_params.mr_offered, FI_PARAM_BOOL);
	ntx_param_int("local_via_network",
		      "tcp and udp domains: reach peers on this host through the network "
		      "back end instead of the shm window (for tests)",
		      &ntx_params.local_via_network, FI_PARAM_BOOL);
}

/* The ranks the MPI launcher says run on this host (Open MPI, MPICH's
 * hydra), 0 where none says. */
static long ntx_local_ranks(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_LOCAL_SIZE",
					    "MPI_LOCALNRANKS" };
	const char *v;

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if ((v = getenv(vars[i])) && *v)
			return strtol(v, NULL, 10);
	return 0;
}

/* FI_PROGRESS_AUTO's helper thread, and polling on a crowded host */
static void ntx_params_init_progress(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	ntx_param_int("idle_yield",
		      "fi_cq_read calls that find nothing after which the "
		      "calling thread gives its CPU away (sched_yield), so "
		      "that a peer process waiting for that CPU runs sooner; "
		      "0: never; -1: 64 where the MPI launcher says more ranks "
		      "run on this host than it has CPUs online "
		      "(OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), else never",
		      &ntx_params.idle_yield, FI_PARAM_INT);
	if (ntx_params.idle_yield < 0)
		ntx_params.idle_yield = cpus > 0 && ntx_local_ranks() > cpus
					? 64 : 0;

	ntx_param_size("progress_idle_us",
		       "FI_PROGRESS_AUTO: microseconds without an application "
		       "call into ntx before the helper thread progresses",
		       &ntx_params.progress_idle_us, 1, 10000000);
	fi_param_define(&ntx_prov, "progress_cpus", FI_PARAM_STRING,
			"FI_PROGRESS_AUTO: cpuset (hwloc list syntax, e.g. "
			"\"2\" or \"0-3\") for the helper threads (default: a "
			"core other than the one of the thread opening the "
			"domain)");
	fi_param_get_str(&ntx_prov, "progress_cpus", &ntx_params.progress_cpus);
}

/* the job key (DESIGN §7) */
static void ntx_params_init_auth(void)
{
	/* the key itself is never logged */
	fi_param_define(&ntx_prov, "auth_key", FI_PARAM_STRING,
			"job key: peers must prove that they hold the same "
			"key before any operation (challenge and response; "
			"the key never travels); fi_info's domain_attr or "
			"ep_attr auth_key overrides it (default: none)");
	fi_param_get_str(&ntx_prov, "auth_key", &ntx_params.auth_key);
	ntx_param_size("auth_timeout_ms",
		       "milliseconds a peer may take to prove the job key once "
		       "connected before everything owed to it fails "
		       "(FI_ETIMEDOUT)",
		       &ntx_params.auth_timeout_ms, 100, 3600000);
}

/* depths and limits of queues */
static void ntx_params_init_queues(void)
{
	ntx_param_size("cq_size", "default completion queue depth",
		       &ntx_params.cq_size, 1, 1 << 24);
	ntx_param_size("peer_unexp_max",
		       "bytes of unexpected messages (payload plus about 330 "
		       "bytes per message) one peer may have waiting at an "
		       "endpoint; a peer that sends more fails its own "
		       "connection",
		       &ntx_params.peer_unexp_max, 1u << 20, SIZE_MAX);
	ntx_param_size("ep_unexp_max",
		       "bytes of unexpected messages (as counted for "
		       "FI_NTX_PEER_UNEXP_MAX) all live peers together may "
		       "have waiting at a receive context (an endpoint, a "
		       "shared receive context, a scalable endpoint's context); "
		       "past it the peer holding more than its share fails "
		       "its own connection",
		       &ntx_params.ep_unexp_max, 1u << 20, SIZE_MAX);
	ntx_param_size("gone_unexp_max",
		       "bytes of unexpected eager messages (as counted for "
		       "FI_NTX_PEER_UNEXP_MAX) of peers whose connection ended "
		       "that an endpoint keeps for receives posted later; a "
		       "peer whose messages do not fit has them dropped",
		       &ntx_params.gone_unexp_max, 0, SIZE_MAX);
	ntx_param_size("min_multi_recv",
		       "default FI_OPT_MIN_MULTI_RECV of an endpoint",
		       &ntx_params.min_multi_recv, 0, SIZE_MAX);
}

void ntx_params_init(void)
{
	ntx_params_init_window();
	ntx_params_init_peers();
	ntx_params_init_tcp();
	ntx_params_init_udp();
	ntx_params_init_offer();
	ntx_params_init_progress();
	ntx_params_init_auth();
	ntx_params_init_queues();
	ntx_param_size("log_rate",
		       "warning lines a second from each place in ntx that "
		       "writes one, after which one line counts those left out"
		       " (0: no limit)",
		       &ntx_params.log_rate, 0, 1000000);
}

int ntx_auth_key_set(struct ntx_auth_key *k, const void *key, size_t len,
		     const struct ntx_auth_key *dflt)
{
	/* a size without a key is what fi_getinfo reported of the default */
	if (!key) {
		*k = *dflt;
		return 0;
	}
	if (!len || len > NTX_AUTH_KEY_MAX) {
		NTX_WARN(FI_LOG_CORE, "auth_key of %zu bytes: give 1 to %d "
			 "bytes\n", len, NTX_AUTH_KEY_MAX);
		return -FI_EINVAL;
	}
	memcpy(k->key, key, len);
	k->len = len;
	return 0;
}

void ntx_auth_key_default(struct ntx_auth_key *k)
{
	const char *s = ntx_params.auth_key;

	memset(k, 0, sizeof(*k));
	if (!s || !*s)
		return;
	k->len = strlen(s);
	if (k->len > NTX_AUTH_KEY_MAX) {
		NTX_WARN(FI_LOG_CORE, "FI_NTX_AUTH_KEY is longer than %d "
			 "bytes; using its first %d\n", NTX_AUTH_KEY_MAX,
			 NTX_AUTH_KEY_MAX);
		k->len = NTX_AUTH_KEY_MAX;
	}
	memcpy(k->key, s, k->len);
}
