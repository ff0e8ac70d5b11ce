/* Unit tests of endpoint names: validation and the printable form. */
#include <arpa/inet.h>
#include <criterion/criterion.h>

#include "ntx/ntx.h"

struct fi_provider ntx_prov; /* ntx_addr.c logs nothing, but links */

static struct ntx_addr sample(void)
{
	struct ntx_addr a = {
		.magic = NTX_ADDR_MAGIC, .version = NTX_ADDR_VERSION,
		.host = 0x1234abcd, .pid = 4242, .win_fd = 17,
		.ep_id = 3, .service = 9228, .epoch = 0xcafebeef,
	};

	a.ip4 = htonl(0x7f000001);
	a.port = htons(9228);
	return a;
}

Test(addr, string_round_trip)
{
	struct ntx_addr a = sample(), b;
	char s[NTX_ADDR_STRLEN];

	cr_assert_gt(ntx_addr_to_str(&a, s, sizeof(s)), 0);
	cr_assert(!strncmp(s, "fi_ntx://", 9), "%s", s);
	cr_assert_eq(ntx_addr_from_str(s, &b), 0, "%s", s);
	cr_assert(!memcmp(&a, &b, sizeof(a)), "round trip of %s", s);
}

Test(addr, malformed_strings_are_rejected)
{
	struct ntx_addr b;
	const char *bad[] = {
		"", "fi_ntx://", "fi_ntx://zz/1:2:3:4/5/1.2.3.4:5",
		"fi_ntx://00000001/1:2:3:4/5/1.2.3.4:5 trailing",
		"fi_ntx://00000001/1:2:3:4/5/1.2.3.4:70000",
		"fi_ntx://00000001/1:2:70000:4/5/1.2.3.4:5",
		"fi_ntx://00000000/1:2:3:4/5/1.2.3.4:5",
		"fi_ntx://0000000000000001/1:2:3:4/5/1.2.3.4:5",
		"fi_sockaddr_in://127.0.0.1:1",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(ntx_addr_from_str(bad[i], &b), -FI_EINVAL, "%s",
			     bad[i]);
}

Test(addr, validation)
{
	struct ntx_addr a = sample();

	cr_assert(ntx_addr_valid(&a));
	a.magic ^= 1;
	cr_assert_not(ntx_addr_valid(&a), "bad magic");
	a = sample();
	a.version = 99;
	cr_assert_not(ntx_addr_valid(&a), "bad version");
	a = sample();
	a.flags = 0x08;
	cr_assert_not(ntx_addr_valid(&a), "unknown flag");
	a = sample();
	a.flags = NTX_ADDR_F_QPN_MASK; /* a ud name's QP number bits */
	cr_assert(ntx_addr_valid(&a), "QP number bits");
	a = sample();
	a.host = 0;
	cr_assert_not(ntx_addr_valid(&a), "no host");
}

Test(addr, same_endpoint_ignores_the_epoch)
{
	struct ntx_addr a = sample(), b = sample();

	b.epoch++;
	cr_assert(ntx_addr_same_ep(&a, &b));
	b.ep_id++;
	cr_assert_not(ntx_addr_same_ep(&a, &b));
}
