/*
 * ntb back end over TCP (DESIGN §4, "tcp"): the peer's receive ring is
 * emulated by one TCP connection per VC. Each frame is one ring entry
 * (length, engine header, payload) that the receiving side applies from
 * progress, validating the frame header first. No bulk moves: rendezvous
 * data travels as DATA entries. A connection reaches the engine only once
 * the connecting side proved the name its hello claims (ntx_tcp_wire.h).
 * Here: the endpoint, its listener and its connections' sockets, and the
 * ops table; a connection's frames are in ntx_ntb_tcp_frame.c, the proof
 * of name in ntx_ntb_tcp_hs.c.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ntx/ntx_wire.h"
#include "ntx_ntb_tcp.h"

/* the ops table sets the heads' ops at creation */
static const struct ntx_be_ops ntx_ntb_tcp_ops;

/* After traffic, the sockets are looked at every poll (one epoll_wait)
 * for this long; then readiness comes from the io_uring watch again. A
 * ping-pong across hosts stays on the direct path; an idle domain makes
 * no system call per poll. */
#define NTX_TCP_BUSY_NS 2000000u

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

/* A new outgoing connection to the listener a name names, CONNECTING
 * until timeout_ms. */
int ntx_tcp_dial(struct ntx_tcp_ep *be, const struct ntx_addr *peer,
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
