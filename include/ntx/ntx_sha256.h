/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the job-key proof
 * of the connect handshake (DESIGN §7). Small and dependency free: the
 * provider links no crypto library.
 */
#ifndef NTX_SHA256_H
#define NTX_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define NTX_SHA256_LEN 32
#define NTX_SHA256_BLOCK 64

struct ntx_sha256 {
	uint32_t h[8];
	uint64_t bytes; /* message bytes so far */
	uint8_t buf[NTX_SHA256_BLOCK];
	size_t nbuf;
};

void ntx_sha256_init(struct ntx_sha256 *s);
void ntx_sha256_update(struct ntx_sha256 *s, const void *data, size_t len);
void ntx_sha256_final(struct ntx_sha256 *s, uint8_t out[NTX_SHA256_LEN]);

struct ntx_hmac {
	struct ntx_sha256 inner, outer;
};

void ntx_hmac_init(struct ntx_hmac *m, const void *key, size_t len);
void ntx_hmac_update(struct ntx_hmac *m, const void *data, size_t len);
/* Writes the MAC and wipes the state (it holds key material). */
void ntx_hmac_final(struct ntx_hmac *m, uint8_t out[NTX_SHA256_LEN]);

/* Equal in time that does not depend on where the bytes differ. */
int ntx_mem_equal(const void *a, const void *b, size_t len);
/* Overwrites secrets in a way the compiler keeps. */
void ntx_wipe(void *p, size_t len);

#endif /* NTX_SHA256_H */
