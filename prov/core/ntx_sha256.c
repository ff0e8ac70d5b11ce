/*
 * SHA-256 and HMAC-SHA256 (see ntx_sha256.h). Written from FIPS 180-4
 * §6.2 and RFC 2104; checked against the FIPS and RFC 4231 vectors in
 * test/unit/test_sha256.c.
 */
#include "config.h"
#include <string.h>

#include "ntx/ntx_sha256.h"

static const uint32_t ntx_sha256_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static inline uint32_t ntx_ror(uint32_t x, unsigned n)
{
	return (x >> n) | (x << (32 - n));
}

static inline uint32_t ntx_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* One 64-byte block into the state (FIPS 180-4 §6.2.2). */
static void ntx_sha256_block(uint32_t h[8], const uint8_t *p)
{
	uint32_t w[64], v[8];

	for (int i = 0; i < 16; i++)
		w[i] = ntx_be32(p + 4 * i);
	for (int i = 16; i < 64; i++) {
		uint32_t s0 = ntx_ror(w[i - 15], 7) ^ ntx_ror(w[i - 15], 18) ^
			      (w[i - 15] >> 3);
		uint32_t s1 = ntx_ror(w[i - 2], 17) ^ ntx_ror(w[i - 2], 19) ^
			      (w[i - 2] >> 10);

		w[i] = w[i - 16] + s0 + w[i - 7] + s1;
	}
	memcpy(v, h, sizeof(v));
	for (int i = 0; i < 64; i++) {
		/* v = a b c d e f g h */
		uint32_t e = v[4], a = v[0];
		uint32_t t1 = v[7] + (ntx_ror(e, 6) ^ ntx_ror(e, 11) ^
				      ntx_ror(e, 25)) +
			      ((e & v[5]) ^ (~e & v[6])) + ntx_sha256_k[i] + w[i];
		uint32_t t2 = (ntx_ror(a, 2) ^ ntx_ror(a, 13) ^ ntx_ror(a, 22)) +
			      ((a & v[1]) ^ (a & v[2]) ^ (v[1] & v[2]));

		memmove(v + 1, v, 7 * sizeof(v[0]));
		v[4] += t1;
		v[0] = t1 + t2;
	}
	for (int i = 0; i < 8; i++)
		h[i] += v[i];
}

void ntx_sha256_init(struct ntx_sha256 *s)
{
	static const uint32_t iv[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(s->h, iv, sizeof(iv));
	s->bytes = 0;
	s->nbuf = 0;
}

void ntx_sha256_update(struct ntx_sha256 *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	s->bytes += len;
	while (len) {
		size_t n = NTX_SHA256_BLOCK - s->nbuf;

		if (n > len)
			n = len;
		memcpy(s->buf + s->nbuf, p, n);
		s->nbuf += n;
		p += n;
		len -= n;
		if (s->nbuf == NTX_SHA256_BLOCK) {
			ntx_sha256_block(s->h, s->buf);
			s->nbuf = 0;
		}
	}
}

void ntx_sha256_final(struct ntx_sha256 *s, uint8_t out[NTX_SHA256_LEN])
{
	uint64_t bits = s->bytes * 8;
	uint8_t pad = 0x80, zero = 0, len[8];

	for (int i = 0; i < 8; i++)
		len[i] = (uint8_t)(bits >> (56 - 8 * i));
	/* 0x80, zeros up to 56 mod 64, then the length in bits */
	ntx_sha256_update(s, &pad, 1);
	while (s->nbuf != NTX_SHA256_BLOCK - 8)
		ntx_sha256_update(s, &zero, 1);
	ntx_sha256_update(s, len, sizeof(len));
	for (int i = 0; i < 8; i++) {
		out[4 * i] = (uint8_t)(s->h[i] >> 24);
		out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
		out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
		out[4 * i + 3] = (uint8_t)s->h[i];
	}
}

void ntx_hmac_init(struct ntx_hmac *m, const void *key, size_t len)
{
	uint8_t k[NTX_SHA256_BLOCK] = { 0 }, pad[NTX_SHA256_BLOCK];

	/* a key longer than a block is replaced by its hash (RFC 2104) */
	if (len > NTX_SHA256_BLOCK) {
		ntx_sha256_init(&m->inner);
		ntx_sha256_update(&m->inner, key, len);
		ntx_sha256_final(&m->inner, k);
	} else if (len) {
		memcpy(k, key, len);
	}
	for (int i = 0; i < NTX_SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x36;
	ntx_sha256_init(&m->inner);
	ntx_sha256_update(&m->inner, pad, sizeof(pad));
	for (int i = 0; i < NTX_SHA256_BLOCK; i++)
		pad[i] = k[i] ^ 0x5c;
	ntx_sha256_init(&m->outer);
	ntx_sha256_update(&m->outer, pad, sizeof(pad));
	ntx_wipe(k, sizeof(k));
	ntx_wipe(pad, sizeof(pad));
}

void ntx_hmac_update(struct ntx_hmac *m, const void *data, size_t len)
{
	ntx_sha256_update(&m->inner, data, len);
}

void ntx_hmac_final(struct ntx_hmac *m, uint8_t out[NTX_SHA256_LEN])
{
	uint8_t ih[NTX_SHA256_LEN];

	ntx_sha256_final(&m->inner, ih);
	ntx_sha256_update(&m->outer, ih, sizeof(ih));
	ntx_sha256_final(&m->outer, out);
	ntx_wipe(ih, sizeof(ih));
	ntx_wipe(m, sizeof(*m));
}

int ntx_mem_equal(const void *a, const void *b, size_t len)
{
	const volatile uint8_t *x = a, *y = b;
	uint8_t d = 0;

	for (size_t i = 0; i < len; i++)
		d |= x[i] ^ y[i];
	return d == 0;
}

void ntx_wipe(void *p, size_t len)
{
	volatile uint8_t *v = p;

	while (len--)
		*v++ = 0;
}
