/* Unit tests of SHA-256 (FIPS 180-2 vectors) and HMAC-SHA256 (RFC 4231
 * test cases 1-4, 6, 7). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ntx/ntx_sha256.h"

static void hex(const uint8_t *d, char *out)
{
	for (int i = 0; i < NTX_SHA256_LEN; i++)
		sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha(const void *msg, size_t len, const char *want)
{
	struct ntx_sha256 s;
	uint8_t d[NTX_SHA256_LEN];
	char got[2 * NTX_SHA256_LEN + 1];

	ntx_sha256_init(&s);
	ntx_sha256_update(&s, msg, len);
	ntx_sha256_final(&s, d);
	hex(d, got);
	cr_assert_str_eq(got, want, "sha256 of %zu bytes", len);
}

Test(sha256, fips_180_2_vectors)
{
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char *million = malloc(1000000);

	check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb924"
			 "27ae41e4649b934ca495991b7852b855");
	check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223"
			    "b00361a396177a9cb410ff61f20015ad");
	check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039"
				    "a33ce45964ff2167f6ecedd419db06c1");
	cr_assert_not_null(million);
	memset(million, 'a', 1000000);
	check_sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67"
				    "f1809a48a497200e046d39ccc7112cd0");
	free(million);
}

Test(sha256, pieces_of_any_size_give_the_same_digest)
{
	uint8_t msg[300], a[NTX_SHA256_LEN], b[NTX_SHA256_LEN];
	struct ntx_sha256 s;

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7);
	ntx_sha256_init(&s);
	ntx_sha256_update(&s, msg, sizeof(msg));
	ntx_sha256_final(&s, a);
	for (size_t step = 1; step < 70; step += 3) {
		ntx_sha256_init(&s);
		for (size_t off = 0; off < sizeof(msg); off += step)
			ntx_sha256_update(&s, msg + off, off + step > sizeof(msg)
						  ? sizeof(msg) - off : step);
		ntx_sha256_final(&s, b);
		cr_assert(!memcmp(a, b, sizeof(a)), "pieces of %zu", step);
	}
}

static void check_hmac(const void *key, size_t klen, const void *msg,
		       size_t mlen, const char *want)
{
	struct ntx_hmac m;
	uint8_t d[NTX_SHA256_LEN];
	char got[2 * NTX_SHA256_LEN + 1];

	ntx_hmac_init(&m, key, klen);
	ntx_hmac_update(&m, msg, mlen);
	ntx_hmac_final(&m, d);
	hex(d, got);
	cr_assert_str_eq(got, want, "hmac with a key of %zu bytes", klen);
}

Test(sha256, rfc_4231_hmac_vectors)
{
	uint8_t k[131], d[50];
	const char *t6 = "Test Using Larger Than Block-Size Key - Hash Key First";
	const char *t7 = "This is a test using a larger than block-size key and "
			 "a larger than block-size data. The key needs to be "
			 "hashed before being used by the HMAC algorithm.";

	memset(k, 0x0b, 20);
	check_hmac(k, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b"
					 "881dc200c9833da726e9376c2e32cff7");
	check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
		   "5bdcc146bf60754e6a042426089575c7"
		   "5a003f089d2739839dec58b964ec3843");
	memset(k, 0xaa, 20);
	memset(d, 0xdd, 50);
	check_hmac(k, 20, d, 50, "773ea91e36800e46854db8ebd09181a7"
				 "2959098b3ef8c122d9635514ced565fe");
	for (int i = 0; i < 25; i++)
		k[i] = (uint8_t)(i + 1);
	memset(d, 0xcd, 50);
	check_hmac(k, 25, d, 50, "82558a389a443c0ea4cc819899f2083a"
				 "85f0faa3e578f8077a2e3ff46729665b");
	memset(k, 0xaa, 131);
	check_hmac(k, 131, t6, strlen(t6), "60e431591ee0b67f0d8a26aacbf5b77f"
					   "8e0bc6213728c5140546040f0ee37f54");
	check_hmac(k, 131, t7, strlen(t7), "9b09ffa71b942fcb27635fbcd5b0e944"
					   "bfdc63644f0713938a7f51535c3a35e2");
}

Test(sha256, mem_equal_sees_any_difference)
{
	uint8_t a[32] = { 0 }, b[32] = { 0 };

	cr_assert(ntx_mem_equal(a, b, sizeof(a)));
	for (size_t i = 0; i < sizeof(a); i++) {
		b[i] = 0x40;
		cr_assert(!ntx_mem_equal(a, b, sizeof(a)), "byte %zu", i);
		b[i] = 0;
	}
}
