/*
 * A tcp connection's byte streams (DESIGN §4, "tcp"): frames out, sent
 * from the caller's buffers or queued behind what waits, frames in, read
 * into a buffer and applied whole, and how a connection breaks and fails.
 */
#include "config.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "ntx_ntb_tcp.h"

#define NTX_TCP_OUT_MAX (8u << 20) /* queued bytes before -FI_EAGAIN */

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

void ntx_tcp_fail(struct ntx_tcp_conn *c, int err)
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
void ntx_tcp_flush(struct ntx_tcp_conn *c)
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

int ntx_tcp_send(struct ntx_be_conn *conn, const void *hdr,
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

/* A frame of the connection set-up (hello, proof of name), queued
 * behind whatever waits and sent when the socket takes it. */
int ntx_tcp_ctl(struct ntx_tcp_conn *c, uint16_t type, const void *p,
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
int ntx_tcp_read(struct ntx_tcp_conn *c)
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
