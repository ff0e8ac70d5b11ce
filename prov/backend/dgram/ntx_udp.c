/*
 * The udp back end (DESIGN §10, "The udp back end"): one UDP socket per
 * endpoint, no connection per peer. The reliability module (ntx_rel*.c)
 * numbers, acknowledges, retransmits, cuts and reassembles the engine's
 * packets; ntx_dgram.c and ntx_dg_session.c keep one peer state per
 * remote address (first contact, HELLO, probes); this file moves the
 * datagrams (recvmmsg and sendmmsg batches, UDP GSO) and reads ICMP's
 * errors.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <linux/errqueue.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx/ntx_wire.h"
#include "ntx_dgram.h"


#define NTX_UDP_BATCH 64 /* datagrams per recvmmsg or sendmmsg */
/* a GSO send: at most this many bytes (one IP packet's worth) */
#define NTX_UDP_GSO_MAX 65000
/* after a retransmission, datagrams leave one by one for this long: a
 * run lost whole (a burst) costs many round trips of recovery */
#define NTX_UDP_GSO_BACKOFF_NS 100000000u
#define NTX_UDP_RX_ROUNDS 4 /* batches one poll takes before returning */
#define NTX_UDP_SOCKBUF (4 << 20)

struct ntx_udp_ep {
	struct ntx_dg_ep dg; /* first: the peers, rel, the wait set */
	int fd;
	struct ntx_fdwatch watch;
	size_t dgram; /* bytes of a datagram's UDP payload, at most */
	unsigned tx_n;
	uint8_t *tx_buf, *rx_buf;
	struct mmsghdr tx_msg[NTX_UDP_BATCH], rx_msg[NTX_UDP_BATCH];
	struct iovec tx_iov[NTX_UDP_BATCH], rx_iov[NTX_UDP_BATCH];
	struct sockaddr_in tx_sin[NTX_UDP_BATCH], rx_sin[NTX_UDP_BATCH];
	/* the batch as GSO sends: runs of datagrams to one peer */
	bool gso;
	uint64_t gso_off_until_ns, retrans_seen;
	struct mmsghdr gso_msg[NTX_UDP_BATCH];
	struct iovec gso_iov[NTX_UDP_BATCH];
	union {
		char buf[CMSG_SPACE(sizeof(uint16_t))];
		struct cmsghdr align;
	} gso_cm[NTX_UDP_BATCH];
};

static const struct ntx_be_ops ntx_udp_ops;

static inline struct ntx_udp_ep *ntx_udp_of(struct ntx_dg_ep *dg)
{
	return ntx_container_of(dg, struct ntx_udp_ep, dg);
}

/* ---- datagrams out --------------------------------------------------------- */

/* The socket's error queue (IP_RECVERR): what ICMP said of our sends. */
static void ntx_udp_errqueue(struct ntx_udp_ep *ep)
{
	union {
		char buf[256];
		struct cmsghdr align;
	} cb;
	struct sockaddr_in to;
	uint8_t b[64];
	struct iovec iov = { b, sizeof(b) };

	for (;;) { /* until empty: EPOLLERR stays up while it is not */
		struct msghdr mh = { .msg_name = &to, .msg_namelen = sizeof(to),
				     .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = cb.buf,
				     .msg_controllen = sizeof(cb.buf) };
		struct cmsghdr *cm;

		if (recvmsg(ep->fd, &mh, MSG_ERRQUEUE | MSG_DONTWAIT) < 0)
			return;
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
			struct sock_extended_err e;

			if (cm->cmsg_level != IPPROTO_IP ||
			    cm->cmsg_type != IP_RECVERR)
				continue;
			memcpy(&e, CMSG_DATA(cm), sizeof(e));
			if (e.ee_origin == SO_EE_ORIGIN_ICMP &&
			    e.ee_type == 3 && e.ee_code == 3) /* port */
				ntx_dg_unreachable(&ep->dg, to.sin_addr.s_addr,
						   to.sin_port);
		}
	}
}

/* Datagram j continues the GSO run that starts at i: same peer, the
 * ones before it full size (the kernel cuts at every gso_size bytes;
 * slots are ep->dgram apart, so full datagrams are contiguous). */
static bool ntx_udp_gso_continues(const struct ntx_udp_ep *ep, unsigned i,
				  unsigned j, size_t total)
{
	return ep->tx_iov[j - 1].iov_len == ep->dgram &&
	       ep->tx_sin[j].sin_addr.s_addr == ep->tx_sin[i].sin_addr.s_addr &&
	       ep->tx_sin[j].sin_port == ep->tx_sin[i].sin_port &&
	       total + ep->tx_iov[j].iov_len <= NTX_UDP_GSO_MAX;
}

/* The batch as sends of runs (UDP_SEGMENT: one system call and one trip
 * down the stack per run, DESIGN §10 Poll); how many sends. */
static unsigned ntx_udp_gso_runs(struct ntx_udp_ep *ep)
{
	unsigned n = 0, i = 0, j;

	while (i < ep->tx_n) {
		struct msghdr *mh = &ep->gso_msg[n].msg_hdr;
		size_t total = ep->tx_iov[i].iov_len;

		for (j = i + 1; j < ep->tx_n &&
		     ntx_udp_gso_continues(ep, i, j, total); j++)
			total += ep->tx_iov[j].iov_len;
		ep->gso_iov[n] = (struct iovec){ ep->tx_iov[i].iov_base, total };
		*mh = (struct msghdr){ .msg_name = &ep->tx_sin[i],
				       .msg_namelen = sizeof(ep->tx_sin[i]),
				       .msg_iov = &ep->gso_iov[n],
				       .msg_iovlen = 1 };
		if (j - i > 1) {
			struct cmsghdr *cm = (struct cmsghdr *)ep->gso_cm[n].buf;
			uint16_t seg = (uint16_t)ep->dgram;

			mh->msg_control = cm;
			mh->msg_controllen = CMSG_SPACE(sizeof(seg));
			cm->cmsg_level = SOL_UDP;
			cm->cmsg_type = UDP_SEGMENT;
			cm->cmsg_len = CMSG_LEN(sizeof(seg));
			memcpy(CMSG_DATA(cm), &seg, sizeof(seg));
		}
		n++;
		i = j;
	}
	return n;
}

/* Sends the batch. What the socket does not take is lost as on the wire
 * (rel resends it); -FI_EAGAIN then, so that rel stops for this poll. A
 * datagram the kernel refuses (a firewall's EPERM) is a loss too. */
static bool ntx_udp_icmp_errno(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH ||
	       err == ENETUNREACH || err == EHOSTDOWN;
}

static int ntx_udp_flush(struct ntx_udp_ep *ep)
{
	bool gso = ep->gso && ep->tx_n > 1 &&
		   (!ep->gso_off_until_ns || ntx_now_ns() >= ep->gso_off_until_ns);
	struct mmsghdr *msg = gso ? ep->gso_msg : ep->tx_msg;
	unsigned off = 0, cnt = gso ? ntx_udp_gso_runs(ep) : ep->tx_n;
	int n, icmp = 0;

	while (off < cnt) {
		n = sendmmsg(ep->fd, msg + off, cnt - off, MSG_DONTWAIT);
		if (n > 0) {
			off += (unsigned)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == ENOBUFS)) {
			ep->tx_n = 0;
			return -FI_EAGAIN;
		}
		/* an ICMP error of an earlier send, reported on this one:
		 * read it (it says whom), then send this one again */
		if (n < 0 && ntx_udp_icmp_errno(errno) && icmp++ < 8) {
			ntx_udp_errqueue(ep);
			continue;
		}
		if (n < 0 && gso && (errno == EIO || errno == EINVAL)) {
			/* a device without UDP segmentation: one by one */
			NTX_INFO(FI_LOG_EP_DATA, "udp: no GSO (%s)\n",
				 strerror(errno));
			ep->gso = false;
			return ntx_udp_flush(ep);
		}
		off++;
	}
	ep->tx_n = 0;
	return 0;
}

/* The transport's emit: the datagram is copied into the batch, which
 * leaves when full and at the end of the rel call (ntx_udp_xflush). */
static int ntx_udp_emit(struct ntx_dg_ep *dg, struct ntx_dg_conn *c,
			const void *hdr, size_t hdr_len, const void *payload,
			size_t len)
{
	struct ntx_udp_ep *ep = ntx_udp_of(dg);
	uint8_t *buf;
	unsigned i;

	if (ep->tx_n == NTX_UDP_BATCH && ntx_udp_flush(ep))
		return -FI_EAGAIN;
	i = ep->tx_n++;
	buf = ep->tx_buf + (size_t)i * ep->dgram;
	memcpy(buf, hdr, hdr_len);
	if (len)
		memcpy(buf + hdr_len, payload, len);
	ep->tx_iov[i].iov_len = hdr_len + len;
	ep->tx_sin[i].sin_addr.s_addr = c->ip4;
	ep->tx_sin[i].sin_port = (uint16_t)c->port;
	return 0;
}

/* After rel's poll: a retransmission turns GSO off for a while, then the
 * batch leaves. */
static void ntx_udp_xflush(struct ntx_dg_ep *dg, uint64_t now)
{
	struct ntx_udp_ep *ep = ntx_udp_of(dg);

	if (dg->rel.stats.tx_retrans != ep->retrans_seen) {
		ep->retrans_seen = dg->rel.stats.tx_retrans;
		ep->gso_off_until_ns = now + NTX_UDP_GSO_BACKOFF_NS;
	}
	ntx_udp_flush(ep);
}

/* ---- datagrams in --------------------------------------------------------- */

/* Up to NTX_UDP_RX_ROUNDS batches; *drained when the socket is empty. */
static int ntx_udp_rx(struct ntx_dg_ep *dg, uint64_t now, bool *drained)
{
	struct ntx_udp_ep *ep = ntx_udp_of(dg);
	int n, cnt = 0;

	*drained = false;
	for (int r = 0; r < NTX_UDP_RX_ROUNDS; r++) {
		for (int i = 0; i < NTX_UDP_BATCH; i++)
			ep->rx_msg[i].msg_hdr.msg_namelen = sizeof(ep->rx_sin[i]);
		n = recvmmsg(ep->fd, ep->rx_msg, NTX_UDP_BATCH, MSG_DONTWAIT,
			     NULL);
		if (n < 0 && errno != EAGAIN && errno != EINTR) {
			ntx_udp_errqueue(ep); /* the error was ICMP's */
			continue;
		}
		if (n <= 0) {
			*drained = n == 0 || errno == EAGAIN;
			break;
		}
		for (int i = 0; i < n; i++)
			ntx_dg_on_dgram(dg, ep->rx_sin[i].sin_addr.s_addr,
					ep->rx_sin[i].sin_port, ep->rx_buf +
					(size_t)i * ep->dgram,
					ep->rx_msg[i].msg_len, now);
		cnt += n;
		if (n < NTX_UDP_BATCH) {
			*drained = true;
			break;
		}
	}
	return cnt;
}

/* An idle poll makes no system call: the socket is read when the
 * io_uring watch says it may be readable (or every poll for a while after
 * traffic), and rel's timers cost a clock read only while a peer has work
 * (DESIGN §3, "No system call on the poll path"). */
static int ntx_udp_poll(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_of(ntx_dg_ep_of(be));
	struct ntx_dg_ep *dg = &ep->dg;
	int cnt = ntx_list_empty(&dg->owed) ? 0 : ntx_dg_report(dg);
	bool drained;
	uint64_t now;

	if (!dg->busy && !(ntx_fdwatch_pending(&ep->watch) &&
			   ntx_fdwatch_news(&ep->watch))) {
		if (dg->next_ns != UINT64_MAX &&
		    (now = ntx_now_ns()) >= dg->next_ns)
			ntx_dg_tx(dg, now);
		return cnt;
	}
	now = ntx_now_ns();
	cnt += ntx_udp_rx(dg, now, &drained);
	ntx_dg_after_rx(dg, now, cnt, drained);
	if (!dg->busy)
		ntx_fdwatch_rearm(&ep->watch); /* the socket was drained */
	return cnt;
}

/* ---- the endpoint ------------------------------------------------------------ */

/* Our IPv4 address for the name: the first that is not loopback. */
static uint32_t ntx_udp_local_ip(void)
{
	struct ifaddrs *ifa, *it;
	uint32_t ip = htonl(INADDR_LOOPBACK);

	if (getifaddrs(&ifa))
		return ip;
	for (it = ifa; it; it = it->ifa_next) {
		struct sockaddr_in *sin = (void *)it->ifa_addr;

		if (sin && sin->sin_family == AF_INET &&
		    !ntx_ip4_loopback(sin->sin_addr.s_addr)) {
			ip = sin->sin_addr.s_addr;
			break;
		}
	}
	freeifaddrs(ifa);
	return ip;
}

/* Bursts of fragments need room: larger buffers than the default, as
 * far as the system lets (FORCE works for root only). Oversized datagrams
 * (FI_NTX_UDP_MTU above the path's) are fragmented by IP, not refused.
 * A dead peer's port unreachable is seen (ntx_udp_errqueue). */
static void ntx_udp_sockopts(int fd)
{
	int sz = NTX_UDP_SOCKBUF, pmtu = IP_PMTUDISC_DONT, one = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof(pmtu));
	/* ICMP errors of unconnected sends are reported only with it */
	setsockopt(fd, IPPROTO_IP, IP_RECVERR, &one, sizeof(one));
}

/* The socket, bound to the name's address when one was asked for (else
 * every address) and to its service number as port (else any). */
static int ntx_udp_socket(struct ntx_udp_ep *ep, const struct ntx_addr *want)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);

	ep->dg.addr.ip4 = want && want->ip4 ? want->ip4 : ntx_udp_local_ip();
	sin.sin_addr.s_addr = want && want->ip4 ? want->ip4
						: htonl(INADDR_ANY);
	sin.sin_port = want && want->service <= 65535
			       ? htons((uint16_t)want->service) : 0;
	ep->fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (ep->fd < 0)
		return -FI_ENOMEM;
	if (bind(ep->fd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    getsockname(ep->fd, (struct sockaddr *)&sin, &sl)) {
		NTX_WARN(FI_LOG_EP_CTRL, "udp bind: %s\n", strerror(errno));
		close(ep->fd);
		ep->fd = -1;
		return -FI_EADDRINUSE;
	}
	ep->dg.addr.port = sin.sin_port;
	ntx_udp_sockopts(ep->fd);
	return 0;
}

/* The batches' headers point at fixed slots once; only lengths and
 * addresses change per datagram. */
static int ntx_udp_batches(struct ntx_udp_ep *ep)
{
	ep->tx_buf = malloc(NTX_UDP_BATCH * ep->dgram);
	ep->rx_buf = malloc(NTX_UDP_BATCH * ep->dgram);
	if (!ep->tx_buf || !ep->rx_buf)
		return -FI_ENOMEM;
	for (int i = 0; i < NTX_UDP_BATCH; i++) {
		ep->tx_iov[i].iov_base = ep->tx_buf + (size_t)i * ep->dgram;
		ep->tx_sin[i].sin_family = AF_INET;
		ep->tx_msg[i].msg_hdr = (struct msghdr){
			.msg_name = &ep->tx_sin[i],
			.msg_namelen = sizeof(ep->tx_sin[i]),
			.msg_iov = &ep->tx_iov[i], .msg_iovlen = 1 };
		ep->rx_iov[i] = (struct iovec){
			ep->rx_buf + (size_t)i * ep->dgram, ep->dgram };
		ep->rx_msg[i].msg_hdr = (struct msghdr){
			.msg_name = &ep->rx_sin[i],
			.msg_namelen = sizeof(ep->rx_sin[i]),
			.msg_iov = &ep->rx_iov[i], .msg_iovlen = 1 };
	}
	return 0;
}

static void ntx_udp_free(struct ntx_udp_ep *ep)
{
	ntx_dg_ep_fini(&ep->dg);
	if (ep->fd >= 0)
		close(ep->fd);
	free(ep->tx_buf);
	free(ep->rx_buf);
	free(ep);
}

static const struct ntx_dg_xport ntx_udp_xport;

static int ntx_udp_open(struct ntx_be_ep **out, const struct ntx_addr *want,
			const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_udp_ep *ep = calloc(1, sizeof(*ep));
	int ret = -FI_ENOMEM;

	(void)dev;
	if (!ep)
		return -FI_ENOMEM;
	ep->fd = -1;
	ep->dgram = ntx_params.udp_mtu;
	ep->gso = ntx_params.udp_gso;
	if (ntx_dg_ep_init(&ep->dg, &ntx_udp_ops, &ntx_udp_xport, cb) ||
	    ntx_udp_batches(ep))
		goto fail;
	ret = ntx_udp_socket(ep, want);
	if (ret)
		goto fail;
	ret = -FI_ENOMEM;
	if (ntx_dg_watch(&ep->dg, ep->fd) ||
	    ntx_dg_rel_init(&ep->dg, ep->dgram, 256))
		goto fail;
	ntx_fdwatch_open(&ep->watch, ep->dg.epfd);
	*out = &ep->dg.base;
	return 0;
fail:
	ntx_udp_free(ep);
	return ret;
}

static void ntx_udp_close(struct ntx_be_ep *be)
{
	struct ntx_udp_ep *ep = ntx_udp_of(ntx_dg_ep_of(be));

	ntx_dg_ep_fini(&ep->dg); /* lingers: the watch is still needed */
	ntx_fdwatch_close(&ep->watch);
	ntx_udp_free(ep);
}

/* Adds our network part (address and port) to the endpoint's name. */
static void ntx_udp_getname(struct ntx_be_ep *be, struct ntx_addr *addr)
{
	struct ntx_dg_ep *dg = ntx_dg_ep_of(be);

	addr->ip4 = dg->addr.ip4;
	addr->port = dg->addr.port;
}

/* A name carrying a service number reached us with its port already
 * (ntx_getinfo.c): nothing to look up. */
static int ntx_udp_resolve(struct ntx_addr *addr)
{
	return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
}

/* A peer is its address and UDP port; a name without an address is a
 * peer on this host (loopback). */
static int ntx_udp_peer_key(const struct ntx_dg_ep *dg,
			    const struct ntx_addr *name, uint32_t *ip4,
			    uint32_t *port)
{
	uint32_t h = ntohl(name->ip4);

	(void)dg;
	/* one peer per name: a broadcast or multicast address would take
	 * our datagrams and answer none, and our sends would complete */
	if (!name->port || h == INADDR_BROADCAST || IN_MULTICAST(h) ||
	    (h && !(h >> 24)))
		return -FI_EADDRNOTAVAIL;
	*ip4 = name->ip4 ? name->ip4 : htonl(INADDR_LOOPBACK);
	*port = name->port;
	return 0;
}

static const struct ntx_dg_xport ntx_udp_xport = {
	.name = "udp",
	.emit = ntx_udp_emit,
	.flush = ntx_udp_xflush,
	.peer_key = ntx_udp_peer_key,
	.rx = ntx_udp_rx,
};

static const struct ntx_be_ops ntx_udp_ops = {
	.name = "udp",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = NTX_DG_MAX_PAYLOAD,
	.has_bulk = false,
	/* an eager send completes when rel took it: its retransmissions
	 * must go on while the application waits elsewhere */
	.needs_progress = true,
	.acks_eager = true,
	.open = ntx_udp_open,
	.close = ntx_udp_close,
	.getname = ntx_udp_getname,
	.setname = ntx_dg_setname,
	.connect = ntx_dg_connect,
	.disconnect = ntx_dg_disconnect,
	.send = ntx_dg_send,
	.poll = ntx_udp_poll,
	.check_peers = ntx_dg_check_peers,
	.resolve = ntx_udp_resolve,
	.arm = ntx_dg_arm,
	.disarm = ntx_dg_disarm,
	.wait_fd = ntx_dg_wait_fd,
};

/* One domain: "udp" (NTX_DOMAIN_UDP), listed after tcp, before shm. */
static int ntx_udp_domains(struct ntx_be_domain *out, int max)
{
	if (max < 1)
		return 0;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", NTX_DOMAIN_UDP);
	return 1;
}

static struct ntx_be_desc ntx_udp_desc = {
	.name = "udp",
	.ops = &ntx_udp_ops,
	.order = 30,
	.named_only = true, /* DESIGN §10: fi_getinfo lists it when named */
	.datagram = true,
	.domains = ntx_udp_domains,
};
NTX_BE_REGISTER(ntx_udp_desc)
