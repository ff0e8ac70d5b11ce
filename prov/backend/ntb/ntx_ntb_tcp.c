/*
 * ntb back end over TCP (DESIGN §4, "tcp"): the peer's receive ring is
 * emulated by one TCP connection per VC. Each frame is one ring entry
 * (length, engine header, payload) that the receiving side applies from
 * progress, validating the frame header first. No bulk moves: rendezvous
 * data travels as DATA entries.
 */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ntx/ntx_backend.h"
#include "ntx/ntx_fdwatch.h"
#include "ntx/ntx_wire.h"
#include "ntx_tcp_wire.h"

#define NTX_TCP_OUT_MAX (8u << 20) /* queued bytes before -FI_EAGAIN */

enum ntx_tcp_state { NTX_TCP_CONNECTING, NTX_TCP_HELLO_WAIT, NTX_TCP_OPEN,
		     NTX_TCP_FAILED };

struct ntx_buf {
	uint8_t *data;
	size_t len, cap, off;
};

struct ntx_be_conn {
	struct ntx_list entry;
	struct ntx_be_ep *be;
	void *vc;
	int fd;
	enum ntx_tcp_state state;
	struct ntx_buf in, out;
	uint64_t hello_by_ns; /* HELLO_WAIT: deadline of the hello */
};

struct ntx_be_ep {
	struct ntx_be_cb cb;
	int lfd;
	int epfd; /* every socket, readable when anything arrives */
	struct ntx_addr addr; /* the endpoint's whole name, sent in hellos */
	struct ntx_list conns;
	struct ntx_fdwatch watch; /* news of epfd without a syscall */
	bool busy; /* a connection has work in flight: look every poll */
};

static int ntx_buf_reserve(struct ntx_buf *b, size_t more)
{
	size_t need = b->len + more, cap = b->cap ? b->cap : 65536;
	uint8_t *d;

	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	need = b->len + more;
	if (need <= b->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	d = realloc(b->data, cap);
	if (!d)
		return -FI_ENOMEM;
	b->data = d;
	b->cap = cap;
	return 0;
}

static void ntx_tcp_fail(struct ntx_be_conn *c, int err)
{
	enum ntx_tcp_state old = c->state;

	if (old == NTX_TCP_FAILED)
		return;
	c->state = NTX_TCP_FAILED;
	if (c->vc && old != NTX_TCP_HELLO_WAIT)
		c->be->cb.failed(c->vc, err);
}

/* Writes queued bytes; the rest waits for the next progress call. */
static void ntx_tcp_flush(struct ntx_be_conn *c)
{
	ssize_t n;

	while (c->out.off < c->out.len) {
		n = send(c->fd, c->out.data + c->out.off, c->out.len - c->out.off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				ntx_tcp_fail(c, -FI_ECONNRESET);
			return;
		}
		c->out.off += (size_t)n;
	}
	c->out.off = c->out.len = 0;
}

static int ntx_tcp_queue(struct ntx_be_conn *c, const struct ntx_tcp_frame *f,
			 const struct iovec *iov, size_t iovcnt, size_t len)
{
	uint8_t *dst;

	if (ntx_buf_reserve(&c->out, sizeof(*f) + len))
		return -FI_ENOMEM;
	dst = c->out.data + c->out.len;
	memcpy(dst, f, sizeof(*f));
	dst += sizeof(*f);
	for (size_t i = 0; i < iovcnt && len; i++) {
		size_t m = iov[i].iov_len < len ? iov[i].iov_len : len;

		memcpy(dst, iov[i].iov_base, m);
		dst += m;
		len -= m;
	}
	c->out.len = (size_t)(dst - c->out.data);
	return 0;
}

static int ntx_tcp_send(struct ntx_be_conn *c, const void *hdr,
			const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct ntx_tcp_frame f = { .magic = NTX_TCP_MAGIC,
				   .type = NTX_TCP_ENTRY,
				   .len = (uint32_t)len };
	int ret;

	if (c->state == NTX_TCP_FAILED)
		return -FI_ECONNRESET;
	if (c->state != NTX_TCP_OPEN)
		return -FI_EAGAIN;
	if (len > NTX_TCP_MAX_PAYLOAD)
		return -FI_EMSGSIZE;
	if (c->out.len - c->out.off > NTX_TCP_OUT_MAX)
		return -FI_EAGAIN;
	memcpy(&f.hdr, hdr, sizeof(f.hdr));
	ret = ntx_tcp_queue(c, &f, iov, iovcnt, len);
	if (!ret)
		ntx_tcp_flush(c);
	if (c->out.off < c->out.len)
		c->be->busy = true; /* EPOLLOUT is not watched */
	return ret;
}

static struct ntx_be_conn *ntx_tcp_conn_new(struct ntx_be_ep *be, int fd)
{
	struct ntx_be_conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = { .events = EPOLLIN };
	int one = 1;

	if (!c)
		return NULL;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ev.data.ptr = c;
	epoll_ctl(be->epfd, EPOLL_CTL_ADD, fd, &ev);
	c->be = be;
	c->fd = fd;
	ntx_list_insert_tail(&be->conns, &c->entry);
	return c;
}

static void ntx_tcp_disconnect(struct ntx_be_conn *c)
{
	ntx_list_remove(&c->entry);
	close(c->fd);
	free(c->in.data);
	free(c->out.data);
	free(c);
}

static int ntx_tcp_connect(struct ntx_be_ep *be, const struct ntx_addr *peer,
			   void *vc, struct ntx_be_conn **conn)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = peer->ip4,
				   .sin_port = peer->port };
	struct ntx_tcp_frame hello = { .magic = NTX_TCP_MAGIC,
				       .type = NTX_TCP_HELLO,
				       .len = sizeof(struct ntx_addr) };
	struct iovec iov = { &be->addr, sizeof(be->addr) };
	struct ntx_be_conn *c;
	int fd;

	/* a peer on this host is reached over loopback */
	if (peer->host == ntx_host_id())
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -FI_ENOMEM;
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
	c->vc = vc;
	c->state = NTX_TCP_CONNECTING;
	be->busy = true;
	/* the hello leaves first once the connection is up */
	if (ntx_tcp_queue(c, &hello, &iov, 1, sizeof(be->addr))) {
		ntx_tcp_disconnect(c);
		return -FI_ENOMEM;
	}
	*conn = c;
	return 0;
}

static void ntx_tcp_on_frame(struct ntx_be_conn *c,
			     const struct ntx_tcp_frame *f, const uint8_t *p)
{
	struct ntx_addr from;

	if (f->type == NTX_TCP_HELLO && c->state == NTX_TCP_HELLO_WAIT &&
	    f->len == sizeof(from)) {
		memcpy(&from, p, sizeof(from));
		if (!ntx_addr_valid(&from)) {
			ntx_tcp_fail(c, -FI_EREMOTEIO);
			return;
		}
		c->state = NTX_TCP_OPEN;
		c->vc = c->be->cb.accept(c->be->cb.ctx, c, &from);
		if (!c->vc)
			c->state = NTX_TCP_FAILED;
		return;
	}
	if (f->type != NTX_TCP_ENTRY || c->state != NTX_TCP_OPEN) {
		ntx_tcp_fail(c, -FI_EREMOTEIO);
		return;
	}
	c->be->cb.recv(c->vc, &f->hdr, p, f->len);
}

/* Reads what the socket has and applies every whole frame. */
static int ntx_tcp_read(struct ntx_be_conn *c)
{
	struct ntx_tcp_frame f;
	int cnt = 0;
	ssize_t n;

	for (;;) {
		if (ntx_buf_reserve(&c->in, 65536)) {
			ntx_tcp_fail(c, -FI_ENOMEM);
			return cnt;
		}
		n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len,
			 MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			ntx_tcp_fail(c, -FI_ECONNRESET);
			return cnt;
		}
		if (n < 0)
			break;
		c->in.len += (size_t)n;
		while (c->in.len - c->in.off >= sizeof(f) &&
		       c->state != NTX_TCP_FAILED) {
			memcpy(&f, c->in.data + c->in.off, sizeof(f));
			if (f.magic != NTX_TCP_MAGIC ||
			    f.len > NTX_TCP_MAX_PAYLOAD) {
				NTX_WARN(FI_LOG_EP_DATA, "bad frame from peer\n");
				ntx_tcp_fail(c, -FI_EREMOTEIO);
				return cnt;
			}
			if (c->in.len - c->in.off < sizeof(f) + f.len)
				break;
			ntx_tcp_on_frame(c, &f, c->in.data + c->in.off +
						       sizeof(f));
			c->in.off += sizeof(f) + f.len;
			cnt++;
		}
		if (c->state == NTX_TCP_FAILED)
			return cnt;
	}
	return cnt;
}

static void ntx_tcp_accept(struct ntx_be_ep *be)
{
	struct ntx_be_conn *c;
	int fd;

	while ((fd = accept4(be->lfd, NULL, NULL,
			     SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		c = ntx_tcp_conn_new(be, fd);
		if (!c) {
			close(fd);
			continue;
		}
		c->state = NTX_TCP_HELLO_WAIT;
		c->hello_by_ns = ntx_now_ns() +
				 (uint64_t)ntx_params.tcp_hello_ms * 1000000;
	}
}

static void ntx_tcp_check_connect(struct ntx_be_conn *c)
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
	c->state = NTX_TCP_OPEN;
	ntx_tcp_flush(c);
	c->be->cb.connected(c->vc);
}

static int ntx_tcp_poll(struct ntx_be_ep *be)
{
	struct ntx_list *it, *tmp;
	int cnt = 0;
	bool busy = false;
	bool news = ntx_fdwatch_pending(&be->watch) &&
		    ntx_fdwatch_news(&be->watch);

	/* sockets cost a syscall each: look at them only when the epoll set
	 * has news or a connection has work in flight, so that a domain whose
	 * traffic is all on the shm window makes no syscall per poll */
	if (!be->busy && !news)
		return 0;
	ntx_tcp_accept(be);
	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_be_conn *c = ntx_container_of(it, struct ntx_be_conn,
							 entry);
		if (c->state == NTX_TCP_CONNECTING)
			ntx_tcp_check_connect(c);
		if (c->state == NTX_TCP_FAILED) {
			if (!c->vc)
				ntx_tcp_disconnect(c); /* never reached the engine */
			continue;
		}
		if (c->state == NTX_TCP_CONNECTING) {
			busy = true; /* EPOLLOUT is not watched */
			continue;
		}
		ntx_tcp_flush(c);
		cnt += ntx_tcp_read(c);
		busy |= c->out.off < c->out.len;
	}
	/* after traffic, look once more: the peer likely answers soon */
	be->busy = busy || cnt;
	ntx_fdwatch_rearm(&be->watch); /* every socket was drained */
	return cnt;
}

/* Connections that never said hello hold a socket and a buffer for
 * nobody: closed after FI_NTX_TCP_HELLO_MS (checked with the peers). */
static void ntx_tcp_check_peers(struct ntx_be_ep *be)
{
	struct ntx_list *it, *tmp;
	uint64_t now = ntx_now_ns();

	ntx_list_foreach_safe(&be->conns, it, tmp) {
		struct ntx_be_conn *c = ntx_container_of(it, struct ntx_be_conn,
							 entry);

		if (c->state == NTX_TCP_HELLO_WAIT && now > c->hello_by_ns) {
			NTX_WARN(FI_LOG_EP_CTRL, "closing a connection that "
				 "sent no hello in %zu ms\n",
				 ntx_params.tcp_hello_ms);
			ntx_tcp_disconnect(c); /* no VC knows it yet */
		}
	}
}

/* Sockets need no arming: the next poll must look at them, though. */
static void ntx_tcp_arm(struct ntx_be_ep *be)
{
	be->busy = true;
}

static void ntx_tcp_disarm(struct ntx_be_ep *be)
{
}

static int ntx_tcp_wait_fd(struct ntx_be_ep *be)
{
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
		    ntohl(sin->sin_addr.s_addr) >> 24 != 127) {
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
	struct ntx_be_ep *be = calloc(1, sizeof(*be));
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
	be->cb = *cb;
	ntx_list_init(&be->conns);
	if (want && want->ip4)
		be->addr.ip4 = want->ip4;
	else
		ntx_tcp_local_ip(&be->addr.ip4);
	sin.sin_addr.s_addr = htonl(INADDR_ANY);
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
	*out = be;
	return 0;
free_be:
	close(be->epfd);
	free(be);
	return -FI_EADDRINUSE;
}

static void ntx_tcp_close(struct ntx_be_ep *be)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&be->conns, it, tmp)
		ntx_tcp_disconnect(ntx_container_of(it, struct ntx_be_conn,
						    entry));
	close(be->lfd);
	ntx_fdwatch_close(&be->watch);
	close(be->epfd);
	free(be);
}

/* Adds our network part (address and port) to the endpoint's name. */
static void ntx_tcp_getname(struct ntx_be_ep *be, struct ntx_addr *addr)
{
	addr->ip4 = be->addr.ip4;
	addr->port = be->addr.port;
}

static void ntx_tcp_setname(struct ntx_be_ep *be, const struct ntx_addr *addr)
{
	be->addr = *addr;
}

static int ntx_tcp_resolve(struct ntx_addr *addr)
{
	return addr->ip4 && addr->port ? 0 : -FI_EADDRNOTAVAIL;
}

const struct ntx_be_ops ntx_ntb_tcp_ops = {
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
	.send = ntx_tcp_send,
	.poll = ntx_tcp_poll,
	.check_peers = ntx_tcp_check_peers,
	.resolve = ntx_tcp_resolve,
	.arm = ntx_tcp_arm,
	.disarm = ntx_tcp_disarm,
	.wait_fd = ntx_tcp_wait_fd,
};
