/*
 * The loopback back end of test/engine (see ntx_loop_be.h). Endpoints
 * live in one process and find each other by name; events wait in the
 * receiving endpoint's queue until its poll.
 */
#include "config.h"
#include <stdlib.h>
#include <unistd.h>

#include "ntx/ntx_core.h"
#include "ntx_loop_be.h"

enum loop_ev_kind { LOOP_ACCEPT, LOOP_CONNECTED, LOOP_PKT, LOOP_FAILED };

struct loop_ev {
	struct ntx_list entry;
	enum loop_ev_kind kind;
	struct loop_conn *conn; /* the receiving side's end */
	uint8_t hdr[sizeof(struct ntx_wire_hdr)];
	uint8_t *payload;
	size_t len;
	int err;
};

/* The back end's own types embed the interface's heads (ntx_backend.h). */
struct loop_conn {
	struct ntx_be_conn head;
	struct ntx_list all;     /* every connection, freed by reset */
	struct loop_ep *be;    /* the endpoint this end belongs to */
	struct loop_conn *peer;
	void *vc;                /* the engine's VC of this end */
	bool open;               /* packets may flow */
	bool closed;             /* the engine let go of this end */
};

struct loop_ep {
	struct ntx_be_ep head;
	struct ntx_list entry; /* loop_eps */
	struct ntx_be_cb cb;
	struct ntx_addr name;
	struct ntx_list events;
	struct ntx_loop_inject inj;
};

static inline struct loop_ep *loop_ep_of(struct ntx_be_ep *h)
{
	return ntx_container_of(h, struct loop_ep, head);
}

static inline struct loop_conn *loop_conn_of(struct ntx_be_conn *h)
{
	return ntx_container_of(h, struct loop_conn, head);
}

static struct ntx_list loop_eps = { &loop_eps, &loop_eps };
static struct ntx_list loop_conns = { &loop_conns, &loop_conns };
static uint16_t loop_next_id = 1;
static struct ntx_addr loop_name;
static bool loop_name_set;

static void loop_push(struct loop_ep *be, enum loop_ev_kind kind,
		      struct loop_conn *conn, int err)
{
	struct loop_ev *e = calloc(1, sizeof(*e));

	assert(e);
	e->kind = kind;
	e->conn = conn;
	e->err = err;
	ntx_list_insert_tail(&be->events, &e->entry);
}

static struct loop_ep *loop_find(const struct ntx_addr *a)
{
	struct ntx_list *it;

	ntx_list_foreach(&loop_eps, it) {
		struct loop_ep *be = ntx_container_of(it, struct loop_ep,
							entry);

		if (ntx_addr_same_ep(&be->name, a) &&
		    be->name.epoch == a->epoch)
			return be;
	}
	return NULL;
}

void ntx_loop_next_name(const struct ntx_addr *name)
{
	loop_name_set = name != NULL;
	if (name)
		loop_name = *name;
}

static int loop_open(struct ntx_be_ep **out, const struct ntx_addr *want,
		     const struct ntx_be_cb *cb, const char *dev)
{
	struct loop_ep *be = calloc(1, sizeof(*be));

	(void)want;
	(void)dev;
	if (!be)
		return -FI_ENOMEM;
	be->head.ops = &ntx_loop_ops;
	be->cb = *cb;
	ntx_list_init(&be->events);
	if (loop_name_set) {
		be->name = loop_name;
		loop_name_set = false;
	} else {
		be->name.magic = NTX_ADDR_MAGIC;
		be->name.version = NTX_ADDR_VERSION;
		be->name.host = ntx_host_id();
		be->name.pid = (uint32_t)getpid();
		be->name.win_fd = 3;
		be->name.ep_id = loop_next_id++;
		be->name.epoch = (uint32_t)ntx_random64() | 1;
	}
	ntx_list_insert_tail(&loop_eps, &be->entry);
	*out = &be->head;
	return 0;
}

static void loop_close(struct ntx_be_ep *hb)
{
	struct loop_ep *be = loop_ep_of(hb);
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&loop_conns, it, tmp) {
		struct loop_conn *c = ntx_container_of(it, struct loop_conn,
							 all);
		if (c->be == be && !c->closed) {
			c->closed = true;
			if (c->peer && !c->peer->closed)
				loop_push(c->peer->be, LOOP_FAILED, c->peer,
					  -FI_ECONNRESET);
		}
	}
	ntx_list_foreach_safe(&be->events, it, tmp) {
		struct loop_ev *e = ntx_container_of(it, struct loop_ev, entry);

		free(e->payload);
		free(e);
	}
	ntx_list_remove(&be->entry);
	free(be);
}

static void loop_getname(struct ntx_be_ep *hb, struct ntx_addr *a)
{
	struct loop_ep *be = loop_ep_of(hb);
	*a = be->name;
}

static struct loop_conn *loop_conn_new(struct loop_ep *be, void *vc)
{
	struct loop_conn *c = calloc(1, sizeof(*c));

	assert(c);
	c->head.ops = &ntx_loop_ops;
	c->be = be;
	c->vc = vc;
	ntx_list_insert_tail(&loop_conns, &c->all);
	return c;
}

static int loop_connect(struct ntx_be_ep *hb, const struct ntx_addr *peer,
			void *vc, struct ntx_be_conn **out)
{
	struct loop_ep *be = loop_ep_of(hb);
	struct loop_ep *to = loop_find(peer);
	struct loop_conn *c, *rc;

	if (!to)
		return -FI_EHOSTUNREACH;
	c = loop_conn_new(be, vc);
	rc = loop_conn_new(to, NULL);
	c->peer = rc;
	rc->peer = c;
	loop_push(to, LOOP_ACCEPT, rc, 0);
	*out = &c->head;
	return 0;
}

static void loop_disconnect(struct ntx_be_conn *hc)
{
	struct loop_conn *c = loop_conn_of(hc);
	c->closed = true;
	c->open = false;
	if (c->peer && !c->peer->closed)
		loop_push(c->peer->be, LOOP_FAILED, c->peer, -FI_ECONNRESET);
}

static int loop_send(struct ntx_be_conn *hc, const void *hdr,
		     const struct iovec *iov, size_t iovcnt, size_t len)
{
	struct loop_conn *c = loop_conn_of(hc);
	struct loop_ep *be = c->be;
	struct loop_ev *e;

	if (be->inj.send_err)
		return be->inj.send_err;
	if (be->inj.send_eagain) {
		be->inj.send_eagain--;
		return -FI_EAGAIN;
	}
	assert(c->open && !c->closed);
	assert(len <= NTX_LOOP_MTU);
	if (!c->peer || c->peer->closed || be->inj.drop_sends)
		return 0; /* lost, as on a wire whose far end is gone */
	e = calloc(1, sizeof(*e));
	assert(e);
	e->kind = LOOP_PKT;
	e->conn = c->peer;
	memcpy(e->hdr, hdr, sizeof(e->hdr));
	e->len = len;
	e->payload = malloc(len ? len : 1);
	assert(e->payload);
	assert(ntx_iov_copy_from(e->payload, iov, iovcnt, len) == len);
	ntx_list_insert_tail(&c->peer->be->events, &e->entry);
	return 0;
}

/* One event at the receiving endpoint; false when it was dropped. */
static bool loop_event(struct loop_ep *be, struct loop_ev *e)
{
	struct loop_conn *c = e->conn;

	if (c->closed || (e->kind != LOOP_ACCEPT && !c->vc))
		return false; /* the engine let go of it, or never had it */
	switch (e->kind) {
	case LOOP_ACCEPT:
		if (c->peer->closed) {
			c->closed = true; /* never handed to the engine */
			return false;
		}
		c->vc = be->inj.refuse_accept
				? NULL
				: be->cb.accept(be->cb.ctx, &c->head, &c->peer->be->name);
		if (!c->vc) {
			loop_disconnect(&c->head);
			return true;
		}
		c->open = true;
		if (!c->peer->be->inj.drop_connected)
			loop_push(c->peer->be, LOOP_CONNECTED, c->peer, 0);
		return true;
	case LOOP_CONNECTED:
		c->open = true;
		be->cb.connected(c->vc);
		return true;
	case LOOP_PKT:
		be->cb.recv(c->vc, e->hdr, e->payload, e->len);
		return true;
	case LOOP_FAILED:
		c->open = false;
		be->cb.failed(c->vc, e->err);
		return true;
	}
	return false;
}

static int loop_poll(struct ntx_be_ep *hb)
{
	struct loop_ep *be = loop_ep_of(hb);
	int n = 0;

	/* one at a time off the head: callbacks may queue more, or close
	 * this endpoint's connections */
	while (!ntx_list_empty(&be->events)) {
		struct loop_ev *e = ntx_container_of(ntx_list_first(&be->events),
						     struct loop_ev, entry);

		ntx_list_remove(&e->entry);
		n += loop_event(be, e);
		free(e->payload);
		free(e);
	}
	return n;
}

static void loop_nop(struct ntx_be_ep *be)
{
	(void)be;
}

static int loop_resolve(struct ntx_addr *a)
{
	(void)a;
	return -FI_ENOSYS;
}

static int loop_wait_fd(struct ntx_be_ep *be)
{
	(void)be;
	return -1;
}

const struct ntx_be_ops ntx_loop_ops = {
	.name = "loop",
	.hdr_size = sizeof(struct ntx_wire_hdr),
	.max_payload = NTX_LOOP_MTU,
	.open = loop_open,
	.close = loop_close,
	.getname = loop_getname,
	.connect = loop_connect,
	.disconnect = loop_disconnect,
	.send = loop_send,
	.poll = loop_poll,
	.check_peers = loop_nop,
	.resolve = loop_resolve,
	.arm = loop_nop,
	.disarm = loop_nop,
	.wait_fd = loop_wait_fd,
};

struct ntx_loop_inject *ntx_loop_inject(struct ntx_be_ep *hb)
{
	struct loop_ep *be = loop_ep_of(hb);
	return &be->inj;
}

struct ntx_be_conn *ntx_loop_conn_of(struct ntx_be_ep *hb, void *vc)
{
	struct loop_ep *be = loop_ep_of(hb);
	struct ntx_list *it;

	ntx_list_foreach(&loop_conns, it) {
		struct loop_conn *c = ntx_container_of(it, struct loop_conn,
							 all);
		if (c->be == be && c->vc == vc && !c->closed)
			return &c->head;
	}
	return NULL;
}

void ntx_loop_deliver(struct ntx_be_conn *hc, const void *hdr,
		      const void *payload, size_t len)
{
	struct loop_conn *c = loop_conn_of(hc);
	uint8_t h[sizeof(struct ntx_wire_hdr)];
	uint8_t *p = malloc(len ? len : 1);

	/* private copies, as a real back end hands over */
	assert(p);
	memcpy(h, hdr, sizeof(h));
	if (len)
		memcpy(p, payload, len);
	c->be->cb.recv(c->vc, h, p, len);
	free(p);
}

void ntx_loop_kill(struct ntx_be_conn *hc, int err)
{
	struct loop_conn *c = loop_conn_of(hc);
	loop_push(c->be, LOOP_FAILED, c, err);
	if (c->peer)
		c->peer->closed = true;
}

int ntx_loop_open_conns(struct ntx_be_ep *hb)
{
	struct loop_ep *be = loop_ep_of(hb);
	struct ntx_list *it;
	int n = 0;

	ntx_list_foreach(&loop_conns, it) {
		struct loop_conn *c = ntx_container_of(it, struct loop_conn,
							 all);
		n += c->be == be && !c->closed && c->peer && !c->peer->closed;
	}
	return n;
}

void ntx_loop_reset(void)
{
	struct ntx_list *it, *tmp;

	ntx_list_foreach_safe(&loop_conns, it, tmp) {
		ntx_list_remove(it);
		free(ntx_container_of(it, struct loop_conn, all));
	}
}
