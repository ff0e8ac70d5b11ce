/*
 * The udp attacker of test_udp_adv.c, shared with the udp part of
 * test_fuzz_net.c: a UDP socket whose datagrams the real ntx_rel module
 * numbers, a handshake done by hand, and a victim endpoint with an honest
 * endpoint beside it on the udp domain (DESIGN §10).
 */
#ifndef NTX_UDP_ADV_H
#define NTX_UDP_ADV_H

#include <netinet/in.h>

#include "ntx_test.h"
#include "ntx/ntx.h"
#include "ntx_rel.h"

#define UDP_MS 10000
#define NTX_ATK_DG_MAX 9000 /* a datagram the attacker builds, bent or not */

struct atk {
	int fd;
	struct sockaddr_in to; /* the victim */
	struct ntx_rel rel;
	struct ntx_rel_peer *peer;
	int raw;               /* >= 0: datagrams leave spoofed, from ... */
	struct sockaddr_in as; /* ... this address */
	/* when set, each datagram rel emits goes through it first: it may
	 * change the len bytes at dg (up to max) and len */
	void (*mutate)(struct atk *a, uint8_t *dg, size_t *len, size_t max);
	void *arg; /* the mutator's */
};

uint64_t mono_ns(void);
uint32_t ip_of(const struct ntx_addr *a);
/* a socket of its own aimed at the victim, an ntx_rel and one rel peer */
void atk_open(struct atk *a, const struct ntx_addr *victim);
/* sends what rel has queued */
void atk_flush(struct atk *a);
void atk_close(struct atk *a);
/* a name for the attacker's own socket that passes every check */
void atk_name(const struct atk *a, const struct ntx_addr *victim,
	      struct ntx_addr *name);
/* an INIT or ECHO control datagram (NTX_DG_CTL_LONG bytes) */
void ctl_long(uint8_t *ctl, int type, uint32_t tag_init,
	      const uint8_t *cookie, const struct ntx_addr *name);
/* INIT, COOKIE, ECHO from the attacker's own address, a new initiator tag
 * each time; rel's epochs set to the session's */
void atk_handshake(struct atk *a, const struct ntx_addr *name);
void atk_eager(struct atk *a, uint64_t value);
void atk_hello(struct atk *a, const void *name, size_t len);
/* the victim (t->ep) and an honest endpoint (*hep) of one udp domain that
 * talk udp to each other; *vaddr is the victim in their AV */
void udp_pair(struct tctx *t, struct ntx_addr *victim,
	      struct ntx_addr *honest, struct fid_ep **hep, fi_addr_t *vaddr);

#endif /* NTX_UDP_ADV_H */
