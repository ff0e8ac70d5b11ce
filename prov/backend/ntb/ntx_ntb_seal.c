/*
 * Sealed connections of the ntb back end (DESIGN §4, "Sealed
 * connections"): where every machine attached can write the window (the
 * pci window), a job key must also keep one that is not part of a
 * connection from writing entries into it. Once the job-key exchange
 * proved the peer, it hands each direction a session key
 * (ops->seal); from then on the sender puts a MAC after each entry and
 * the receiver copies the entry out, checks it and hands the engine the
 * copy. The sending and the receiving are in ntx_ntb_tx.c and
 * ntx_ntb_rx.c; the MAC and the state are here.
 */
#include "config.h"
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_ntb_int.h"
#include "ntx/ntx_sha256.h"

/* HMAC-SHA256(key, side, seq, len, the engine header when there is one,
 * the first len bytes of iov when it has any), cut to NTX_SEAL_TAG. */
void ntx_ntb_seal_mac(const struct ntx_ntb_seal *s, uint8_t side,
		      uint32_t seq, uint32_t len, const void *hdr,
		      const struct iovec *iov, size_t iovcnt,
		      uint8_t tag[NTX_SEAL_TAG])
{
	size_t left = len == NTX_WIN_SKIP ? 0 : len;
	uint8_t pre[9], mac[NTX_SHA256_LEN];
	uint32_t v;
	struct ntx_hmac m;

	pre[0] = side;
	v = htole32(seq);
	memcpy(pre + 1, &v, 4);
	v = htole32(len);
	memcpy(pre + 5, &v, 4);
	ntx_hmac_init(&m, s->key, sizeof(s->key));
	ntx_hmac_update(&m, pre, sizeof(pre));
	if (hdr)
		ntx_hmac_update(&m, hdr, sizeof(struct ntx_wire_hdr));
	for (size_t i = 0; i < iovcnt && left; i++) {
		size_t n = iov[i].iov_len < left ? iov[i].iov_len : left;

		ntx_hmac_update(&m, iov[i].iov_base, n);
		left -= n;
	}
	ntx_hmac_final(&m, mac);
	memcpy(tag, mac, NTX_SEAL_TAG);
	ntx_wipe(mac, sizeof(mac));
}

/* ops->seal of the pci window. Both directions get the same key (the
 * exchange derives one per connection); the MACs of each name their
 * sender's side. */
int ntx_ntb_seal(struct ntx_be_conn *conn, const uint8_t key[32], bool rx,
		 bool lower)
{
	struct ntx_shm_conn *c = ntx_shm_conn_of(conn);
	struct ntx_ntb_seal *s = c->seal;

	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -FI_ENOMEM;
		memcpy(s->key, key, sizeof(s->key));
		c->seal = s;
	} else if (!ntx_mem_equal(s->key, key, sizeof(s->key))) {
		return -FI_EINVAL;
	}
	if (rx) {
		if (!s->buf) {
			s->buf = malloc(sizeof(struct ntx_wire_hdr) +
					c->be->win.max_payload);
			if (!s->buf)
				return -FI_ENOMEM;
		}
		s->rx_side = lower ? 1 : 0;
		s->rx = true;
	} else {
		s->tx_side = lower ? 0 : 1;
		s->tx = true;
		c->tx_next = NULL; /* no part follows: whole entries only */
	}
	return 0;
}

void ntx_ntb_seal_free(struct ntx_shm_conn *c)
{
	if (!c->seal)
		return;
	free(c->seal->buf);
	ntx_wipe(c->seal, sizeof(*c->seal));
	free(c->seal);
	c->seal = NULL;
}
