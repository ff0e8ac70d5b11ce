/*
 * Hostile senders on the udp domain (DESIGN §10): a UDP socket in this
 * process speaks the datagram protocol itself (the real ntx_rel module
 * numbers its datagrams, so that they pass every check but the one under
 * test) and lies about who it is. The victim endpoint must refuse it and
 * deliver nothing it sent, while an honest peer's message that follows on
 * the same socket queue still arrives: the victim reads its datagrams in
 * order, so the honest message completing first proves the attacker's
 * were read and refused, with no waiting for an absence.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"
#include "ntx/ntx.h"
#include "ntx/ntx_wire.h"
#include "ntx_rel.h"

#define CAPS (FI_MSG | FI_TAGGED)
#define UDP_MS 10000

struct atk {
	int fd;
	struct sockaddr_in to; /* the victim */
	struct ntx_rel rel;
	struct ntx_rel_peer *peer;
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int atk_emit(void *arg, struct ntx_rel_peer *peer, const void *hdr,
		    size_t hdr_len, const void *payload, size_t len)
{
	struct atk *a = arg;
	struct iovec iov[2] = { { (void *)hdr, hdr_len },
				{ (void *)payload, len } };
	struct msghdr m = { .msg_name = &a->to, .msg_namelen = sizeof(a->to),
			    .msg_iov = iov, .msg_iovlen = 2 };

	(void)peer;
	return sendmsg(a->fd, &m, 0) < 0 ? -FI_EAGAIN : 0;
}

static void atk_deliver(void *arg, struct ntx_rel_peer *peer, int prio,
			const void *msg, size_t len)
{
	(void)arg, (void)peer, (void)prio, (void)msg, (void)len;
}

static void atk_failed(void *arg, struct ntx_rel_peer *peer, int err)
{
	(void)arg, (void)peer, (void)err;
}

static void atk_dropped(void *arg, struct ntx_rel_peer *peer, void *ctx)
{
	(void)arg, (void)peer, (void)ctx;
}

static void atk_open(struct atk *a, const struct ntx_addr *victim)
{
	static const struct ntx_rel_ops ops = { atk_emit, atk_deliver,
						atk_failed, atk_dropped };
	struct sockaddr_in any = { .sin_family = AF_INET };
	struct ntx_rel_cfg cfg;

	a->fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert_geq(a->fd, 0);
	cr_assert_eq(bind(a->fd, (struct sockaddr *)&any, sizeof(any)), 0);
	memset(&a->to, 0, sizeof(a->to));
	a->to.sin_family = AF_INET;
	a->to.sin_addr.s_addr = victim->ip4 ? victim->ip4
					    : htonl(INADDR_LOOPBACK);
	a->to.sin_port = victim->port;
	ntx_rel_cfg_default(&cfg);
	cfg.mtu = 1400;
	cfg.max_msg = 65536;
	cfg.epoch = 0x5eed0001;
	cr_assert_eq(ntx_rel_init(&a->rel, &cfg, &ops, a), 0);
	cr_assert_eq(ntx_rel_peer_new(&a->rel, NULL, &a->peer), 0);
}

/* Sends everything queued: every datagram leaves at once (fresh window). */
static void atk_flush(struct atk *a)
{
	cr_assert_geq(ntx_rel_poll_tx(&a->rel, mono_ns()), 0);
}

static void atk_close(struct atk *a)
{
	ntx_rel_fini(&a->rel);
	close(a->fd);
}

/* An eager tagged message of 8 bytes, as the engine sends it. */
static void atk_eager(struct atk *a, uint64_t value)
{
	struct ntx_wire_hdr h = { .op = NTX_OP_EAGER, .msg_len = 8 };
	struct iovec iov[2] = { { &h, sizeof(h) }, { &value, 8 } };

	cr_assert_eq(ntx_rel_send(&a->rel, a->peer, NTX_REL_BULK, iov, 2,
				  NULL), 0);
}

static void atk_hello(struct atk *a, const void *name, size_t len)
{
	struct iovec iov = { (void *)name, len };

	cr_assert_eq(ntx_rel_send(&a->rel, a->peer, NTX_REL_PRIO, &iov, 1,
				  NULL), 0);
}

enum lie { LIE_OTHER_NAME, LIE_SHORT_HELLO, LIE_NO_HELLO, LIE_BAD_NAME };

/* The victim (t.ep) and an honest endpoint of the same domain; the
 * attacker sends its lie and an eager message, then the honest endpoint
 * sends one: the victim's first receive must be the honest one. */
static void refused(enum lie lie)
{
	struct ntx_addr victim, honest;
	uint64_t in[2] = { 0, 0 }, mine = 0x600d, got = 0;
	size_t len = sizeof(victim);
	struct fid_ep *hep;
	fi_addr_t vaddr;
	struct tctx t;
	struct atk a;

	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", "udp", 1);
	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, &victim, &len), 0);
	cr_assert_eq(fi_endpoint(t.dom, t.fi, &hep, NULL), 0);
	cr_assert_eq(fi_ep_bind(hep, &t.cq->fid, FI_TRANSMIT | FI_RECV), 0);
	cr_assert_eq(fi_ep_bind(hep, &t.av->fid, 0), 0);
	cr_assert_eq(fi_enable(hep), 0);
	len = sizeof(honest);
	cr_assert_eq(fi_getname(&hep->fid, &honest, &len), 0);
	cr_assert_eq(t_insert(&t, &victim, &vaddr), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(fi_recv(t.ep, &in[i], 8, NULL, FI_ADDR_UNSPEC,
				     &in[i]), 0);

	atk_open(&a, &victim);
	if (lie == LIE_OTHER_NAME) {
		atk_hello(&a, &honest, sizeof(honest)); /* not its port */
	} else if (lie == LIE_SHORT_HELLO) {
		atk_hello(&a, &honest, 16);
	} else if (lie == LIE_BAD_NAME) {
		struct ntx_addr bad = honest;

		bad.magic ^= 0xffff;
		atk_hello(&a, &bad, sizeof(bad));
	}
	atk_eager(&a, 0xbad);
	atk_flush(&a);

	cr_assert_eq(fi_send(hep, &mine, 8, NULL, vaddr, NULL), 0);
	for (uint64_t end = mono_ns() + UDP_MS * 1000000ull; !got;) {
		struct fi_cq_tagged_entry e;

		if (fi_cq_read(t.cq, &e, 1) == 1 && (e.flags & FI_RECV))
			got = *(uint64_t *)e.op_context;
		cr_assert_lt(mono_ns(), end, "the honest message never came");
	}
	cr_assert_eq(got, mine, "the victim took the attacker's message "
		     "(%#llx) first", (unsigned long long)got);
	cr_assert_eq(in[0], mine);
	atk_close(&a);
	cr_assert_eq(fi_close(&hep->fid), 0);
	t_close(&t);
}

Test(udp_adv, a_hello_with_another_endpoints_name_is_refused, .timeout = 60)
{
	refused(LIE_OTHER_NAME);
}

Test(udp_adv, a_short_hello_is_refused, .timeout = 60)
{
	refused(LIE_SHORT_HELLO);
}

Test(udp_adv, a_hello_that_is_no_name_is_refused, .timeout = 60)
{
	refused(LIE_BAD_NAME);
}

Test(udp_adv, data_before_any_hello_is_refused, .timeout = 60)
{
	refused(LIE_NO_HELLO);
}
