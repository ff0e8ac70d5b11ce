/*
 * ntb back end over TCP (DESIGN §4, "tcp"): the peer's receive ring is
 * emulated by one TCP connection per VC. Each frame is one ring entry
 * (length, engine header, payload) that the receiving side applies from
 * progress, validating the frame header first. No bulk moves: rendezvous
 * data travels as DATA entries. A connection reaches the engine only once
 * the connecting side proved the name its hello claims (ntx_tcp_wire.h).
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx/ntx_sha256.h"
#include "ntx/ntx_wire.h"
#include "ntx_tcp_wire.h"

#define NTX_TCP_OUT_MAX (8u << 20) /* queued bytes before -FI_EAGAIN */

enum ntx_tcp_state {
	NTX_TCP_CONNECTING,   /* ours: TCP connect under way, hello queued */
	NTX_TCP_WELCOME_WAIT, /* ours: hello sent, our name being proven */
	NTX_TCP_HELLO_WAIT,   /* accepted: no hello yet (or a PROVE) */
	NTX_TCP_VERIFY,       /* accepted: hello in, its name being proven */
	NTX_TCP_PROBE,        /* ours: carried a PROVE, waits for the close */
	NTX_TCP_OPEN,
	NTX_TCP_FAILED,
};

/* Echoes that are not ours a VERIFY connection takes (a claimant with
 * several connections to us echoes on each) before it gives up. */
#define NTX_TCP_MAX_MISSES 8

struct ntx_buf {
	uint8_t *data;
	size_t len, cap, off;
};

struct ntx_tcp_conn {
	struct ntx_be_conn head; /* first: what the engine holds */
	struct ntx_list entry;
	struct ntx_tcp_ep *be;
	void *vc;
	int fd;
	enum ntx_tcp_state state;
	struct ntx_buf in, out;
	uint64_t deadline_ns; /* until OPEN: when it fails */
	struct ntx_addr peer; /* ours: whom we dial; VERIFY: the claim */
	uint8_t nonce[NTX_TCP_NONCE]; /* VERIFY: what the claimant echoes */
	uint32_t peer_eager;  /* the peer's FI_NTX_TCP_EAGER_MAX, once OPEN */
	uint8_t misses;       /* VERIFY: echoes of other connections */
	bool proof_due;       /* VERIFY: its PROVE waits its address's turn */
	uint32_t src;         /* VERIFY: the address it comes from */
	bool probe;           /* carries a PROVE, never reaches the engine */
	bool broken;          /* a send failed: fails once read to the end */
};

struct ntx_tcp_ep {
	struct ntx_be_ep head; /* first: what the engine holds */
	struct ntx_be_cb cb;
	int lfd;
	int epfd; /* every socket, readable when anything arrives */
	struct ntx_addr addr; /* the endpoint's whole name, sent in hellos */
	struct ntx_list conns;
	struct ntx_fdwatch watch; /* news of epfd without a syscall */
	bool busy;    /* look at the sockets every poll */
	bool walk;    /* a connection is connecting, has bytes queued or
		       * failed before reaching the engine: walk the list */
	bool accept_off; /* FI_NTX_TCP_UNPROVEN_MAX reached: the listener is
			  * not watched (ntx_tcp_accept, check_peers) */
	uint64_t busy_until_ns; /* traffic keeps busy set until then */
	/* proofs per source address (hashed): tokens, refilled at
	 * FI_NTX_TCP_PROOF_RATE a second up to twice that */
	struct {
		uint64_t at_ns;
		uint32_t tokens;
	} proofs[64];
};

static inline struct ntx_tcp_conn *ntx_tcp_conn_of(struct ntx_be_conn *conn)
{
	return ntx_container_of(conn, struct ntx_tcp_conn, head);
}

static inline struct ntx_tcp_ep *ntx_tcp_ep_of(struct ntx_be_ep *be)
{
	return ntx_container_of(be, struct ntx_tcp_ep, head);
}

/* the ops table sets the heads' ops at creation */
static const struct ntx_be_ops ntx_ntb_tcp_ops;

/* After traffic, the sockets are looked at every poll (one epoll_wait)
 * for this long; then readiness comes from the io_uring watch again. A
 * ping-pong across hosts stays on the direct path; an idle domain makes
 * no system call per poll. */
#define NTX_TCP_BUSY_NS 2000000u

/* Room a read asks for: a partial frame (at most the largest less one
 * byte) and one read fit in 128 KiB, the receive buffer's size. */
#define NTX_TCP_READ                                                       \
	(131072 - sizeof(struct ntx_tcp_frame) - NTX_TCP_MAX_PAYLOAD + 1)

static int ntx_buf_reserve(struct ntx_buf *b, size_t more)
{
	size_t need = b->len + more, cap = b->cap ? b->cap : 65536;
	uint8_t *d;

	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	need = b->len + more;
	if (need <= b->cap)
		return 0;
	/* a partial frame at the end: move it to the front rather than
	 * grow (a peer streaming bytes must not grow the buffer) */
	if (b->off && need - b->off <= b->cap) {
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		return 0;
	}
	while (cap < need)
		cap *= 2;
	d = realloc(b->data, cap);
	if (!d)
		return -FI_ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

static void ntx_tcp_fail(struct ntx_tcp_conn *c, int err)
{
	enum ntx_tcp_state old = c->state;

	if (old == NTX_TCP_FAILED)
		return;
	c->state = NTX_TCP_FAILED;
	c->be->walk = true; /* one that never reached the engine is freed */
	/* its socket, at its end, stays readable until it is closed: out of
	 * the set now, or 32 such would fill every epoll_wait of the poll
	 * (a peer that reset 100 connections hung the victim's progress) */
	epoll_ctl(c->be->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	if (c->vc && old != NTX_TCP_HELLO_WAIT)
		c->be->cb.failed(c->vc, err);
}

/* A send found the connection broken (the peer reset or closed it):
 * what the peer sent before may still wait in the socket, such as the
 * last message of a peer that exited as soon as its send completed. The
 * connection fails when the next poll has read the socket to its end
 * (ntx_tcp_read), not here, in the middle of a send. Meanwhile a send is
 * taken and dropped, as bytes in the socket's buffer would be (queued,
 * the answers to a stream of the peer's last frames would pile up); what
 * waits for an answer fails with the connection. */
static void ntx_tcp_broken(struct ntx_tcp_conn *c)
{
	c->broken = true;
	c->be->busy = true;
}

/* Writes queued bytes; the rest waits for the next progress call. */
static void ntx_tcp_flush(struct ntx_tcp_conn *c)
{
	ssize_t n;

	if (c->broken) { /* dropped (ntx_tcp_broken) */
		c->out.off = c->out.len = 0;
		return;
	}
	while (c->out.off < c->out.len) {
		n = send(c->fd, c->out.data + c->out.off, c->out.len - c->out.off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				ntx_tcp_broken(c);
			return;
		}
		c->out.off += (size_t)n;
	}
	c->out.off = c->out.len = 0;
}

/* The frame's prefix and the first len bytes of iov, as one iovec
 * array v (NTX_MAX_IOV + 1 entries); returns its count. */
static size_t ntx_tcp_frame_iov(const struct ntx_tcp_frame *f,
				const struct iovec *iov, size_t iovcnt,
				size_t len, struct iovec *v)
{
	size_t n = 1;

	v[0] = (struct iovec){ (void *)f, sizeof(*f) };
	for (size_t i = 0; i < iovcnt && len && n < NTX_MAX_IOV + 1; i++) {
		size_t m = iov[i].iov_len < len ? iov[i].iov_len : len;

		v[n++] = (struct iovec){ iov[i].iov_base, m };
		len -= m;
	}
	return n;
}

/* Queues the bytes of v from 'skip' on: a whole frame, or what a direct
 * send left of one. */
static int ntx_tcp_queue_rest(struct ntx_tcp_conn *c, const struct iovec *v,
			      size_t n, size_t skip)
{
	size_t total = 0;
	uint8_t *dst;

	for (size_t i = 0; i < n; i++)
		total += v[i].iov_len;
	if (ntx_buf_reserve(&c->out, total - skip))
		return -FI_ENOMEM;
	dst = c->out.data + c->out.len;
	for (size_t i = 0; i < n; i++) {
		size_t m = v[i].iov_len;

		if (skip >= m) {
			skip -= m;
			continue;
		}
		memcpy(dst, (uint8_t *)v[i].iov_base + skip, m - skip);
		dst += m - skip;
		skip = 0;
	}
	c->out.len = (size_t)(dst - c->out.data);
	return 0;
}

static int ntx_tcp_queue(struct ntx_tcp_conn *c, const struct ntx_tcp_frame *f,
			 const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct iovec v[NTX_MAX_IOV + 1];

	return ntx_tcp_queue_rest(c, v, ntx_tcp_frame_iov(f, iov, iovcnt, len,
							  v), 0);
}

/* Nothing queued: the frame leaves straight from the caller's buffers
 * (sendmsg, no copy); only what the socket does not take is queued. */
static int ntx_tcp_send_direct(struct ntx_tcp_conn *c,
			       const struct ntx_tcp_frame *f,
			       const struct iovec *iov, size_t iovcnt,
			       size_t len)
{
	struct iovec v[NTX_MAX_IOV + 1];
	struct msghdr mh = { .msg_iov = v };
	ssize_t sent;

	mh.msg_iovlen = ntx_tcp_frame_iov(f, iov, iovcnt, len, v);
	sent = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (sent < 0) {
		if (errno != EAGAIN && errno != EINTR) {
			ntx_tcp_broken(c);
			return 0;
		}
		sent = 0;
	}
	return ntx_tcp_queue_rest(c, v, mh.msg_iovlen, (size_t)sent);
}

static int ntx_tcp_send(struct ntx_be_conn *conn, const void *hdr,
			const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_tcp_conn *c = ntx_tcp_conn_of(conn);
	struct ntx_tcp_frame f = { .magic = NTX_TCP_MAGIC,
				   .type = NTX_TCP_ENTRY,
				   .len = (uint32_t)len };
	int ret;

	if (c->state == NTX_TCP_FAILED)
		return -FI_ECONNRESET;
	if (c->state != NTX_TCP_OPEN)
		return -FI_EAGAIN;
	if (c->broken)
		return 0; /* dropped (ntx_tcp_broken) */
	if (len > NTX_TCP_MAX_PAYLOAD || iovcnt > NTX_MAX_IOV)
		return -FI_EMSGSIZE;
	if (c->out.len - c->out.off > NTX_TCP_OUT_MAX)
		return -FI_EAGAIN;
	memcpy(&f.hdr, hdr, sizeof(f.hdr));
	if (c->out.off == c->out.len) {
		ret = ntx_tcp_send_direct(c, &f, iov, iovcnt, len);
	} else {
		ret = ntx_tcp_queue(c, &f, iov, iovcnt, len);
		if (!ret)
			ntx_tcp_flush(c);
	}
	if (c->out.off < c->out.len)
		c->be->busy = c->be->walk = true; /* EPOLLOUT is not watched */
	return ret;
}

/* Every connection: no Nagle delay (frames are whole messages); a peer
 * whose host vanished without a FIN is found by keepalive probes while
 * idle and by the user time-out while data waits for its acknowledgement
 * (FI_NTX_TCP_TIMEOUT_MS either way). Buffer sizes stay with the
 * kernel's autotuning on purpose: SO_SNDBUF/SO_RCVBUF would turn it off
 * and are capped lower (net.core.rmem_max) than autotuning goes
 * (DESIGN §4, "tcp"). */
static void ntx_tcp_sockopts(int fd)
{
	unsigned int tmo = (unsigned int)ntx_params.tcp_timeout_ms;
	int one = 1, idle = (int)(tmo / 2000) ? (int)(tmo / 2000) : 1;
	int intvl = 1, cnt = 3;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &tmo, sizeof(tmo));
}

static struct ntx_tcp_conn *ntx_tcp_conn_new(struct ntx_tcp_ep *be, int fd)
{
	struct ntx_tcp_conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN };

	if (!c)
		return NULL;
	ntx_tcp_sockopts(fd);
	ev.data.ptr = c;
	epoll_ctl(be->epfd, EPOLL_CTL_ADD, fd, &ev);
	c->head.ops = &ntx_ntb_tcp_ops;
	c->be = be;
	c->fd = fd;
	ntx_list_insert_tail(&be->conns, &c->entry);
	return c;
}

static void ntx_tcp_conn_free(struct ntx_tcp_conn *c)
{
	ntx_list_remove(&c->entry);
	close(c->fd);
	free(c->in.data);
	free(c->out.data);
	free(c);
}

static void ntx_tcp_disconnect(struct ntx_be_conn *conn)
{
	ntx_tcp_conn_free(ntx_tcp_conn_of(conn));
}

/* A frame of the connection set-up (hello, proof of name), queued
 * behind whatever waits and sent when the socket takes it. */
static int ntx_tcp_ctl(struct ntx_tcp_conn *c, uint16_t type, const void *p,
		       uint32_t len)
{
	struct ntx_tcp_frame f = { .magic = NTX_TCP_MAGIC, .type = type,
				   .len = len };
	struct iovec iov = { (void *)p, len };
	int ret = ntx_tcp_queue(c, &f, &iov, 1, len);

	if (!ret && c->state != NTX_TCP_CONNECTING)
		ntx_tcp_flush(c);
	c->be->busy = c->be->walk = true;
	return ret;
}

/* A new outgoing connection to the listener a name names, CONNECTING
 * until timeout_ms. */
static int ntx_tcp_dial(struct ntx_tcp_ep *be, const struct ntx_addr *peer,
			size_t timeout_ms, struct ntx_tcp_conn **out)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = peer->ip4,
				   .sin_port = peer->port };
	struct ntx_tcp_conn *c;
	int fd;

	/* the address the peer listens on; loopback when it gave none */
	if (!peer->ip4)
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -FI_ENOMEM;
	/* from the address our name claims, which the peer checks
	 * (ntx_tcp_may_claim); the kernel picks where that fails */
	if (!ntx_ip4_loopback(be->addr.ip4)) {
		struct sockaddr_in me = { .sin_family = AF_INET,
					  .sin_addr.s_addr = be->addr.ip4 };
		int one = 1;

		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one,
			   sizeof(one));
		(void)bind(fd, (struct sockaddr *)&me, sizeof(me));
	}
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) &&
	    errno != EINPROGRESS) {
		NTX_WARN(FI_LOG_EP_CTRL, "connect to %s:%u: %s\n",
			 inet_ntoa(sin.sin_addr), ntohs(sin.sin_port),
			 strerror(errno));
		close(fd);
		return -FI_ECONNREFUSED;
	}
	c = ntx_tcp_conn_new(be, fd);
	if (!c) {
		close(fd);
		return -FI_ENOMEM;
	}
	c->peer = *peer;
	c->state = NTX_TCP_CONNECTING;
	c->deadline_ns = ntx_now_ns() + (uint64_t)timeout_ms * 1000000;
	be->busy = be->walk = true;
	*out = c;
	return 0;
}

static int ntx_tcp_connect(struct ntx_be_ep *bep, const struct ntx_addr *peer,
			   void *vc, struct ntx_be_conn **conn)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	struct ntx_tcp_conn *c;
	int ret = ntx_tcp_dial(be, peer, ntx_params.tcp_timeout_ms, &c);

	if (ret)
		return ret;
	c->vc = vc;
	/* the hello leaves first once the connection is up */
	if (ntx_tcp_ctl(c, NTX_TCP_HELLO, &be->addr, sizeof(be->addr))) {
		ntx_tcp_conn_free(c);
		return -FI_ENOMEM;
	}
	*conn = &c->head;
	return 0;
}

/* ip (network order) is one of this host's: loopback, or an address of
 * one of its interfaces. */
static bool ntx_tcp_ip_is_local(uint32_t ip)
{
	struct ifaddrs *ifa, *it;
	bool local = false;

	if (ntx_ip4_loopback(ip))
		return true;
	if (getifaddrs(&ifa))
		return false;
	for (it = ifa; it && !local; it = it->ifa_next) {
		const struct sockaddr_in *sin = (const void *)it->ifa_addr;

		local = sin && sin->sin_family == AF_INET &&
			sin->sin_addr.s_addr == ip;
	}
	freeifaddrs(ifa);
	return local;
}

/* A connection may claim a name only on its own address (DESIGN §7):
 * the listener we dial to check a claim is then the claimant's, never a
 * third party's that a hello would have us connect and write to. A
 * name on loopback (or none) may be claimed from any address of this
 * host. */
static bool ntx_tcp_may_claim(int fd, const struct ntx_addr *from,
			      uint32_t *src)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	uint32_t claimed = from->ip4 ? from->ip4 : htonl(INADDR_LOOPBACK);

	if (getpeername(fd, (struct sockaddr *)&sin, &sl) ||
	    sin.sin_family != AF_INET)
		return false;
	*src = sin.sin_addr.s_addr;
	if (*src == claimed)
		return true;
	return ntx_ip4_loopback(claimed) && ntx_tcp_ip_is_local(*src);
}

/* A proof of a name from address src may go now: each costs a dial, so
 * one address gets FI_NTX_TCP_PROOF_RATE a second, in bursts of twice
 * that (hostile networks round two: proofs of one address are
 * rate-limited). Addresses that share a slot share its tokens. */
static bool ntx_tcp_proof_ok(struct ntx_tcp_ep *be, uint32_t src,
			     uint64_t now)
{
	uint64_t burst = 2 * (uint64_t)ntx_params.tcp_proof_rate;
	uint64_t step = 1000000000ull / ntx_params.tcp_proof_rate, add;
	size_t i = (size_t)((src * 0x9e3779b9u) >> 26);

	if (!be->proofs[i].at_ns) {
		be->proofs[i].at_ns = now;
		be->proofs[i].tokens = (uint32_t)burst;
	}
	add = (now - be->proofs[i].at_ns) / step;
	if (add) {
		be->proofs[i].tokens = (uint32_t)(be->proofs[i].tokens + add >
							  burst
						  ? burst
						  : be->proofs[i].tokens + add);
		be->proofs[i].at_ns += add * step;
	}
	if (!be->proofs[i].tokens)
		return false;
	be->proofs[i].tokens--;
	return true;
}

/* The claim's check: a PROVE to the claimed name's listener, when its
 * address's turn comes (ntx_tcp_proof_ok; else check_peers tries again
 * until FI_NTX_TCP_HELLO_MS). */
static void ntx_tcp_prove_claim(struct ntx_tcp_conn *c, uint64_t now)
{
	struct ntx_tcp_prove pr;
	struct ntx_tcp_conn *probe;

	if (!ntx_tcp_proof_ok(c->be, c->src, now)) {
		if (!c->proof_due)
			NTX_WARN(FI_LOG_EP_CTRL, "names claimed from one address "
				 "come faster than %zu a second: pid %u waits "
				 "its turn\n", ntx_params.tcp_proof_rate,
				 c->peer.pid);
		c->proof_due = true;
		return;
	}
	c->proof_due = false;
	memcpy(pr.claimed, &c->peer, sizeof(pr.claimed));
	memcpy(pr.prover, &c->be->addr, sizeof(pr.prover));
	memcpy(pr.nonce, c->nonce, sizeof(pr.nonce));
	if (ntx_tcp_dial(c->be, &c->peer, ntx_params.tcp_hello_ms, &probe)) {
		NTX_WARN(FI_LOG_EP_CTRL, "closing a connection whose claimed "
			 "name (pid %u, port %u) has no listener we reach\n",
			 c->peer.pid, ntohs(c->peer.port));
		return ntx_tcp_fail(c, -FI_EACCES);
	}
	probe->probe = true;
	if (ntx_tcp_ctl(probe, NTX_TCP_PROVE, &pr, sizeof(pr))) {
		ntx_tcp_fail(probe, -FI_ENOMEM);
		return ntx_tcp_fail(c, -FI_ENOMEM);
	}
}

/* A hello: before the connection is bound to the name it claims, a
 * nonce goes to the listener that name names; its owner echoes it over
 * the connection it opened (DESIGN §7, proof of name). */
static void ntx_tcp_on_hello(struct ntx_tcp_conn *c, const uint8_t *p,
			     size_t len)
{
	struct ntx_addr from;
	uint32_t src = 0;

	if (len != sizeof(from))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	memcpy(&from, p, sizeof(from));
	if (!ntx_addr_valid(&from) || !from.port ||
	    getrandom(c->nonce, sizeof(c->nonce), 0) != sizeof(c->nonce))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	if (!ntx_tcp_may_claim(c->fd, &from, &src)) {
		struct in_addr a = { src }, b = { from.ip4 };
		char as[INET_ADDRSTRLEN] = "?", bs[INET_ADDRSTRLEN] = "?";

		inet_ntop(AF_INET, &a, as, sizeof(as));
		inet_ntop(AF_INET, &b, bs, sizeof(bs));
		NTX_WARN(FI_LOG_EP_CTRL, "closing a connection from %s that "
			 "claims a name on %s (pid %u)\n", as, bs, from.pid);
		return ntx_tcp_fail(c, -FI_EACCES);
	}
	c->peer = from;
	c->src = src;
	c->state = NTX_TCP_VERIFY;
	ntx_tcp_prove_claim(c, ntx_now_ns());
}

/* Someone we connected to asks whether the name of our hello is ours:
 * the nonce goes back over every connection of ours still waiting for
 * that listener's welcome (the one that is not its own is ignored
 * there). This connection has done its part. */
static void ntx_tcp_on_prove(struct ntx_tcp_conn *c, const uint8_t *p,
			     size_t len)
{
	uint32_t mine = (uint32_t)ntx_params.tcp_eager_max;
	struct ntx_tcp_params e = { .eager_max = mine };
	struct ntx_tcp_ep *be = c->be;
	struct ntx_addr claimed, prover;
	struct ntx_tcp_prove pr;
	struct ntx_list *it;

	ntx_tcp_fail(c, -FI_ECONNRESET); /* never reached the engine */
	if (len != sizeof(pr))
		return;
	memcpy(&pr, p, sizeof(pr));
	memcpy(&claimed, pr.claimed, sizeof(claimed));
	memcpy(&prover, pr.prover, sizeof(prover));
	if (!ntx_addr_same_ep(&claimed, &be->addr) ||
	    claimed.epoch != be->addr.epoch) {
		NTX_INFO(FI_LOG_EP_CTRL, "not vouching for a name that is not "
			 "ours (pid %u)\n", claimed.pid);
		return;
	}
	memcpy(e.nonce, pr.nonce, sizeof(e.nonce));
	ntx_list_foreach(&be->conns, it) {
		struct ntx_tcp_conn *o =
			ntx_container_of(it, struct ntx_tcp_conn, entry);

		if (o->state == NTX_TCP_WELCOME_WAIT &&
		    o->peer.port == prover.port)
			ntx_tcp_ctl(o, NTX_TCP_ECHO, &e, sizeof(e));
	}
}

/* The peer's FI_NTX_TCP_EAGER_MAX from its ECHO or WELCOME, within the
 * parameter's range; false (the connection failed) when it is not. */
static bool ntx_tcp_take_eager(struct ntx_tcp_conn *c, uint32_t v)
{
	if (v < 4096 || v > 65536) {
		NTX_WARN(FI_LOG_EP_CTRL, "peer pid %u says "
			 "FI_NTX_TCP_EAGER_MAX is %u: refused\n", c->peer.pid,
			 v);
		ntx_tcp_fail(c, -FI_EREMOTEIO);
		return false;
	}
	c->peer_eager = v;
	return true;
}

static void ntx_tcp_on_echo(struct ntx_tcp_conn *c, const uint8_t *p,
			    size_t len)
{
	uint32_t mine = (uint32_t)ntx_params.tcp_eager_max;
	struct ntx_tcp_params e, w = { .eager_max = mine };

	if (len != sizeof(e))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	memcpy(&e, p, sizeof(e));
	if (!ntx_mem_equal(e.nonce, c->nonce, sizeof(c->nonce))) {
		if (++c->misses > NTX_TCP_MAX_MISSES)
			ntx_tcp_fail(c, -FI_EACCES);
		return;
	}
	if (!ntx_tcp_take_eager(c, e.eager_max))
		return;
	c->state = NTX_TCP_OPEN;
	if (ntx_tcp_ctl(c, NTX_TCP_WELCOME, &w, sizeof(w)))
		return ntx_tcp_fail(c, -FI_ENOMEM);
	c->vc = c->be->cb.accept(c->be->cb.ctx, &c->head, &c->peer);
	if (!c->vc)
		c->state = NTX_TCP_FAILED;
}

static void ntx_tcp_on_welcome(struct ntx_tcp_conn *c, const uint8_t *p,
			       size_t len)
{
	struct ntx_tcp_params w;

	if (len != sizeof(w))
		return ntx_tcp_fail(c, -FI_EREMOTEIO);
	memcpy(&w, p, sizeof(w));
	if (!ntx_tcp_take_eager(c, w.eager_max))
		return;
	c->state = NTX_TCP_OPEN;
	ntx_tcp_flush(c);
	c->be->cb.connected(c->vc);
}

static void ntx_tcp_on_frame(struct ntx_tcp_conn *c,
			     const struct ntx_tcp_frame *f, const uint8_t *p)
{
	switch (c->state) {
	case NTX_TCP_OPEN:
		if (f->type != NTX_TCP_ENTRY)
			break;
		c->be->cb.recv(c->vc, &f->hdr, p, f->len);
		return;
	case NTX_TCP_HELLO_WAIT:
		if (f->type == NTX_TCP_HELLO)
			return ntx_tcp_on_hello(c, p, f->len);
		if (f->type == NTX_TCP_PROVE)
			return ntx_tcp_on_prove(c, p, f->len);
		break;
	case NTX_TCP_VERIFY:
		if (f->type != NTX_TCP_ECHO)
			break;
		return ntx_tcp_on_echo(c, p, f->len);
	case NTX_TCP_WELCOME_WAIT:
		if (f->type != NTX_TCP_WELCOME)
			break;
		return ntx_tcp_on_welcome(c, p, f->len);
	default:
		break;
	}
	ntx_tcp_fail(c, -FI_EREMOTEIO);
}

/* Applies every whole frame in the receive buffer. */
static int ntx_tcp_apply(struct ntx_tcp_conn *c)
{
	struct ntx_tcp_frame f;
	int cnt = 0;

	while (c->in.len - c->in.off >= sizeof(f) &&
	       c->state != NTX_TCP_FAILED) {
		memcpy(&f, c->in.data + c->in.off, sizeof(f));
		if (f.magic != NTX_TCP_MAGIC || f.len > NTX_TCP_MAX_PAYLOAD) {
			NTX_WARN(FI_LOG_EP_DATA, "bad frame from peer\n");
			ntx_tcp_fail(c, -FI_EREMOTEIO);
			break;
		}
		if (c->in.len - c->in.off < sizeof(f) + f.len)
			break;
		ntx_tcp_on_frame(c, &f, c->in.data + c->in.off + sizeof(f));
		c->in.off += sizeof(f) + f.len;
		cnt++;
	}
	return cnt;
}

/* Reads what the socket has and applies every whole frame. A read that
 * leaves room in the buffer drained the socket: epoll (level triggered)
 * reports anything that arrives later. */
static int ntx_tcp_read(struct ntx_tcp_conn *c)
{
	int cnt = 0;
	size_t room;
	ssize_t n;

	do {
		if (ntx_buf_reserve(&c->in, NTX_TCP_READ)) {
			ntx_tcp_fail(c, -FI_ENOMEM);
			return cnt;
		}
		room = c->in.cap - c->in.len;
		n = recv(c->fd, c->in.data + c->in.len, room, MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EINTR) && !c->broken)
			break;
		if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
			ntx_tcp_fail(c, -FI_ECONNRESET); /* read to its end */
			return cnt;
		}
		if (n <= 0 && !c->vc) {
			/* a probe or a claim that was not proven: closing is
			 * how these end */
			NTX_DBG(FI_LOG_EP_DATA, "tcp set-up connection closed\n");
			ntx_tcp_fail(c, -FI_ECONNRESET);
			return cnt;
		}
		if (n <= 0) {
			NTX_WARN(FI_LOG_EP_DATA, "tcp connection lost: %s\n",
				 n ? strerror(errno) : "closed by the peer");
			ntx_tcp_fail(c, n < 0 && errno == ETIMEDOUT
						? -FI_ETIMEDOUT : -FI_ECONNRESET);
			return cnt;
		}
		c->in.len += (size_t)n;
		cnt += ntx_tcp_apply(c);
	} while ((size_t)n == room && c->state != NTX_TCP_FAILED);
	return cnt;
}

/* Accepted connections that have proved no name yet. */
static size_t ntx_tcp_unproven(struct ntx_tcp_ep *be)
{
	struct ntx_list *it;
	size_t n = 0;

	ntx_list_foreach(&be->conns, it) {
		const struct ntx_tcp_conn *c =
			ntx_container_of(it, struct ntx_tcp_conn, entry);

		n += c->state == NTX_TCP_HELLO_WAIT ||
		     c->state == NTX_TCP_VERIFY;
	}
	return n;
}

/* Watches the listener or stops watching it. */
static void ntx_tcp_listen_arm(struct ntx_tcp_ep *be, bool on)
{
	struct epoll_event ev = { .events = on ? EPOLLIN : 0 };

	epoll_ctl(be->epfd, EPOLL_CTL_MOD, be->lfd, &ev);
	be->accept_off = !on;
}

/* Takes what the listener has, up to FI_NTX_TCP_UNPROVEN_MAX unproven
 * connections at once (hostile networks round two, finding 5: each held
 * a socket and buffers for FI_NTX_TCP_HELLO_MS, with no bound on how
 * many). At the bound the listener is not watched, and further connects
 * wait in the kernel's queue (then its SYN back-off) until check_peers
 * sees room again: a peer that proves its name in time is taken later,
 * none is refused. */
static void ntx_tcp_accept(struct ntx_tcp_ep *be)
{
	size_t n = ntx_tcp_unproven(be);
	struct ntx_tcp_conn *c;
	int fd;

	while (n < ntx_params.tcp_unproven_max &&
	       (fd = accept4(be->lfd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		c = ntx_tcp_conn_new(be, fd);
		if (!c) {
			close(fd);
			continue;
		}
		c->state = NTX_TCP_HELLO_WAIT;
		c->deadline_ns = ntx_now_ns() +
				 (uint64_t)ntx_params.tcp_hello_ms * 1000000;
		n++;
	}
	if (n >= ntx_params.tcp_unproven_max && !be->accept_off) {
		NTX_WARN(FI_LOG_EP_CTRL, "%zu connections have proved no name:"
			 " no more are accepted until some are proven or "
			 "closed\n", n);
		ntx_tcp_listen_arm(be, false);
	}
}

static void ntx_tcp_check_connect(struct ntx_tcp_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getpeername(c->fd, (struct sockaddr *)&ss, &sl)) {
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err && err != EINPROGRESS && err != EALREADY)
			ntx_tcp_fail(c, -FI_ECONNREFUSED);
		return;
	}
	/* the engine hears of it once the peer welcomed us */
	c->state = c->probe ? NTX_TCP_PROBE : NTX_TCP_WELCOME_WAIT;
	ntx_tcp_flush(c);
}

/* Connections that need a look without being readable: connecting ones
 * (EPOLLOUT is not watched), those with queued bytes, failed ones the
 * engine never saw. Returns true while some still need it. */
static bool ntx_tcp_walk(struct ntx_tcp_ep *be)
{
	struct ntx_list *it, *tmp;
	bool again = false;

	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_tcp_conn *c =
			ntx_container_of(it, struct ntx_tcp_conn, entry);
		if (c->state == NTX_TCP_CONNECTING)
			ntx_tcp_check_connect(c);
		if (c->state == NTX_TCP_FAILED) {
			if (!c->vc)
				ntx_tcp_conn_free(c); /* never reached the engine */
			continue;
		}
		if (c->state == NTX_TCP_CONNECTING) {
			again = true;
			continue;
		}
		ntx_tcp_flush(c);
		again |= c->out.off < c->out.len;
	}
	return again;
}

/* One epoll_wait says which sockets have something: the listener (no
 * pointer) or a connection. */
static int ntx_tcp_poll_ready(struct ntx_tcp_ep *be)
{
	struct epoll_event ev[32];
	int n, cnt = 0, rounds = 0;

	/* a few rounds at most: what is left stays ready for the next poll
	 * (busy is set then) */
	do {
		n = epoll_wait(be->epfd, ev, 32, 0);
		for (int i = 0; i < n; i++) {
			struct ntx_tcp_conn *c = ev[i].data.ptr;

			if (!c)
				ntx_tcp_accept(be);
			else if (c->state != NTX_TCP_CONNECTING &&
				 c->state != NTX_TCP_FAILED)
				cnt += ntx_tcp_read(c);
		}
	} while (n == 32 && ++rounds < 4);
	if (n == 32)
		be->busy = true;
	return cnt;
}

static int ntx_tcp_poll(struct ntx_be_ep *bep)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	uint64_t now;
	int cnt;

	if (!be->busy && !(ntx_fdwatch_pending(&be->watch) &&
			   ntx_fdwatch_news(&be->watch)))
		return 0;
	cnt = ntx_tcp_poll_ready(be);
	if (be->walk)
		be->walk = ntx_tcp_walk(be);
	now = ntx_now_ns();
	if (cnt || be->walk)
		be->busy_until_ns = now + NTX_TCP_BUSY_NS;
	be->busy = now < be->busy_until_ns;
	if (!be->busy)
		ntx_fdwatch_rearm(&be->watch); /* every socket was drained */
	return cnt;
}

/* Connections that never said hello or never proved the name they
 * claim hold a socket and a buffer for nobody: closed after
 * FI_NTX_TCP_HELLO_MS, and so are probes nobody closed. A connect that
 * has not been welcomed in FI_NTX_TCP_TIMEOUT_MS fails (checked with
 * the peers). */
static void ntx_tcp_check_peers(struct ntx_be_ep *bep)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	struct ntx_list *it, *tmp;
	uint64_t now = ntx_now_ns();

	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_tcp_conn *c =
			ntx_container_of(it, struct ntx_tcp_conn, entry);

		if (c->state == NTX_TCP_VERIFY && c->proof_due &&
		    now <= c->deadline_ns)
			ntx_tcp_prove_claim(c, now);
		if (c->state == NTX_TCP_OPEN || c->state == NTX_TCP_FAILED ||
		    now <= c->deadline_ns)
			continue;
		if (c->state == NTX_TCP_HELLO_WAIT ||
		    c->state == NTX_TCP_VERIFY) {
			NTX_WARN(FI_LOG_EP_CTRL, "closing a connection that "
				 "%s in %zu ms\n", c->state == NTX_TCP_VERIFY
				 ? "did not prove the name it claims"
				 : "sent no hello", ntx_params.tcp_hello_ms);
			ntx_tcp_conn_free(c); /* no VC knows it yet */
		} else if (c->probe) {
			ntx_tcp_conn_free(c);
		} else {
			NTX_WARN(FI_LOG_EP_CTRL, "connect timed out after %zu "
				 "ms\n", ntx_params.tcp_timeout_ms);
			ntx_tcp_fail(c, -FI_ETIMEDOUT);
		}
	}
	if (be->accept_off &&
	    ntx_tcp_unproven(be) < ntx_params.tcp_unproven_max) {
		ntx_tcp_listen_arm(be, true);
		ntx_tcp_accept(be);
		be->busy = true;
	}
}

/* Sockets need no arming: the next poll must look at them, though. */
static void ntx_tcp_arm(struct ntx_be_ep *bep)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	be->busy = be->walk = true;
}

static void ntx_tcp_disarm(struct ntx_be_ep *be)
{
}

static int ntx_tcp_wait_fd(struct ntx_be_ep *bep)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	return be->epfd;
}

static ssize_t ntx_tcp_local_ip(uint32_t *ip)
{
	struct ifaddrs *ifa, *it;

	*ip = htonl(INADDR_LOOPBACK);
	if (getifaddrs(&ifa))
		return 0;
	for (it = ifa; it; it = it->ifa_next) {
		struct sockaddr_in *sin = (void *)it->ifa_addr;

		if (sin && sin->sin_family == AF_INET &&
		    !ntx_ip4_loopback(sin->sin_addr.s_addr)) {
			*ip = sin->sin_addr.s_addr;
			break;
		}
	}
	freeifaddrs(ifa);
	return 0;
}

static int ntx_tcp_open(struct ntx_be_ep **out, const struct ntx_addr *want,
			const struct ntx_be_cb *cb, const char *dev)
{
	struct ntx_tcp_ep *be = calloc(1, sizeof(*be));
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sin);
	int one = 1;

	struct epoll_event ev = { .events = EPOLLIN };

	(void)dev;
	if (!be)
		return -FI_ENOMEM;
	be->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (be->epfd < 0) {
		free(be);
		return -FI_ENOMEM;
	}
	be->head.ops = &ntx_ntb_tcp_ops;
	be->cb = *cb;
	ntx_list_init(&be->conns);
	if (want && want->ip4)
		be->addr.ip4 = want->ip4;
	else
		ntx_tcp_local_ip(&be->addr.ip4);
	/* a named address is the only one we listen on */
	sin.sin_addr.s_addr = want && want->ip4 ? want->ip4 : htonl(INADDR_ANY);
	sin.sin_port = want ? htons((uint16_t)want->service) : 0;
	be->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (be->lfd < 0)
		goto free_be;
	setsockopt(be->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(be->lfd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(be->lfd, 512) ||
	    getsockname(be->lfd, (struct sockaddr *)&sin, &sl)) {
		NTX_WARN(FI_LOG_EP_CTRL, "tcp listen: %s\n", strerror(errno));
		close(be->lfd);
		goto free_be;
	}
	be->addr.port = sin.sin_port;
	epoll_ctl(be->epfd, EPOLL_CTL_ADD, be->lfd, &ev);
	ntx_fdwatch_open(&be->watch, be->epfd);
	*out = &be->head;
	return 0;
free_be:
	close(be->epfd);
	free(be);
	return -FI_EADDRINUSE;
}

static void ntx_tcp_close(struct ntx_be_ep *bep)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_tcp_conn_free(ntx_container_of(it, struct ntx_tcp_conn,
						   entry));
	close(be->lfd);
	ntx_fdwatch_close(&be->watch);
	close(be->epfd);
	free(be);
}

/* Adds our network part (address and port) to the endpoint's name. */
static void ntx_tcp_getname(struct ntx_be_ep *bep, struct ntx_addr *addr)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	addr->ip4 = be->addr.ip4;
	addr->port = be->addr.port;
}

static void ntx_tcp_setname(struct ntx_be_ep *bep, const struct ntx_addr *addr)
{
	struct ntx_tcp_ep *be = ntx_tcp_ep_of(bep);
	be->addr = *addr;
}

/* The peer's FI_NTX_TCP_EAGER_MAX, from the welcome or its echo. */
static size_t ntx_tcp_conn_eager(const struct ntx_be_conn *conn)
{
	const struct ntx_tcp_conn *c =
		ntx_container_of(conn, const struct ntx_tcp_conn, head);

	return c->peer_eager;
}

/* Messages up to the smaller of both sides' FI_NTX_TCP_EAGER_MAX go in
 * one frame: the receiver reads any frame whole, so only the sender's
 * copy when the socket is full (NTX_TCP_OUT_MAX) and the receiver's
 * unexpected copy (FI_NTX_PEER_UNEXP_MAX) depend on it. */
static size_t ntx_tcp_conn_msg_eager(const struct ntx_be_conn *conn)
{
	size_t peer = ntx_tcp_conn_eager(conn), mine = ntx_params.tcp_eager_max;

	return peer < mine ? peer : mine;
}

static int ntx_tcp_resolve(struct ntx_addr *addr)
{
	return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
}

static const struct ntx_be_ops ntx_ntb_tcp_ops = {
	.name = "ntb-tcp",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = NTX_TCP_MAX_PAYLOAD,
	.has_bulk = false,
	.open = ntx_tcp_open,
	.close = ntx_tcp_close,
	.getname = ntx_tcp_getname,
	.setname = ntx_tcp_setname,
	.connect = ntx_tcp_connect,
	.disconnect = ntx_tcp_disconnect,
	.conn_eager = ntx_tcp_conn_eager,
	.conn_msg_eager = ntx_tcp_conn_msg_eager,
	.send = ntx_tcp_send,
	.poll = ntx_tcp_poll,
	.check_peers = ntx_tcp_check_peers,
	.resolve = ntx_tcp_resolve,
	.arm = ntx_tcp_arm,
	.disarm = ntx_tcp_disarm,
	.wait_fd = ntx_tcp_wait_fd,
};

/* One domain: "tcp" (NTX_DOMAIN_TCP). */
static int ntx_ntb_tcp_domains(struct ntx_be_domain *out, int max)
{
	if (max < 1)
		return 0;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", NTX_DOMAIN_TCP);
	return 1;
}

static struct ntx_be_desc ntx_ntb_tcp_desc = {
	.name = "tcp",
	.ops = &ntx_ntb_tcp_ops,
	.order = 20,
	.domains = ntx_ntb_tcp_domains,
};
NTX_BE_REGISTER(ntx_ntb_tcp_desc)
