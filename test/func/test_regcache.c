/*
 * Buffers unmapped and mapped again at the same address between transfers
 * carry their new bytes: a back end that caches registrations (verbs) must
 * never move the old pages. Runs on the default domain (NTX_TEST_DOMAIN;
 * the rxe tier runs it on rxe0 with FI_NTX_LOCAL_VIA_NETWORK=1).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ntx_test.h"

#define LEN (1u << 20) /* rendezvous and bulk RMA on every back end */
#define ROUNDS 4
#define WAIT_MS 20000

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

/* Fresh anonymous pages at 'at' (anywhere the first time). */
static void *remap(void *at)
{
	void *p;

	if (at)
		munmap(at, LEN);
	p = mmap(at, LEN, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | (at ? MAP_FIXED_NOREPLACE : 0),
		 -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/* Receives ROUNDS messages, each into new pages at the same address. */
static int child_recv_remapped(int sock)
{
	struct tctx t;
	struct fi_cq_tagged_entry e;
	fi_addr_t peer;
	uint8_t *buf = NULL, *at = NULL;

	CHK(t_open(&t, FI_MSG | FI_TAGGED) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	for (unsigned k = 0; k < ROUNDS; k++) {
		buf = remap(at);
		CHK(buf && (!at || buf == at));
		at = buf;
		memset(buf, 0xee, LEN);
		CHK(fi_trecv(t.ep, buf, LEN, NULL, peer, k, 0, NULL) == 0);
		CHK(t_wait(&t, &e, NULL, NULL, WAIT_MS) == 1);
		CHK(e.len == LEN && e.tag == k);
		CHK(t_check(buf, LEN, 40 + k) == 0);
		CHK(t_sync(sock) == 0);
	}
	munmap(buf, LEN);
	t_close(&t);
	return 0;
}

Test(regcache, message_buffers_remapped_at_the_same_address, .timeout = 120)
{
	struct tctx t;
	struct fi_cq_tagged_entry e;
	fi_addr_t peer;
	uint8_t *buf = NULL, *at = NULL;
	int sock;
	pid_t pid = t_fork(&sock, child_recv_remapped);

	cr_assert_eq(t_open(&t, FI_MSG | FI_TAGGED), 0);
	cr_assert_eq(t_xchg_name(&t, sock, &peer), 0);
	for (unsigned k = 0; k < ROUNDS; k++) {
		buf = remap(at);
		cr_assert(buf && (!at || buf == at), "mapped again at %p", at);
		at = buf;
		t_fill(buf, LEN, 40 + k);
		cr_assert_eq(fi_tsend(t.ep, buf, LEN, NULL, peer, k, NULL), 0);
		cr_assert_eq(t_wait(&t, &e, NULL, NULL, WAIT_MS), 1,
			     "send %u", k);
		cr_assert_eq(t_sync_progress(&t, sock, WAIT_MS), 0);
	}
	munmap(buf, LEN);
	cr_assert_eq(t_join(pid), 0, "receiver failed (line & 0x7f)");
	t_close(&t);
}

static void done_ok(struct t_ini *in, void *ctx, const char *what)
{
	uint64_t fl = 0;

	cr_assert_eq(t_ini_done(in, ctx, &fl), 0, "%s", what);
}

Test(regcache, rma_local_buffers_remapped_at_the_same_address,
     .timeout = 120)
{
	struct t_ini in;
	uint8_t *buf = NULL, *at = NULL, *want = malloc(LEN);
	struct t_cmd get = { .op = T_GET, .mr = 0, .off = 0, .len = LEN };

	cr_assert(want);
	t_tgt.len = LEN;
	cr_assert_eq(t_ini_start(&in), 0, "target and initiator set up");
	for (unsigned k = 0; k < ROUNDS; k++) {
		struct t_cmd fill = { .op = T_FILL, .mr = 0, .off = 0,
				      .len = LEN, .seed = 60 + k };

		/* write from new pages: the target gets their bytes */
		buf = remap(at);
		cr_assert(buf && (!at || buf == at), "mapped again at %p", at);
		at = buf;
		t_fill(buf, LEN, 50 + k);
		cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, buf, LEN, NULL,
						     in.peer, in.ti.addr[0],
						     in.ti.key[0], buf)), 0);
		done_ok(&in, buf, "write");
		cr_assert_eq(t_ini_cmd(&in, &get, want, LEN), 0);
		cr_assert_eq(t_check(want, LEN, 50 + k), 0, "round %u", k);

		/* read into new pages: they get the target's bytes */
		cr_assert_eq(t_ini_cmd(&in, &fill, NULL, 0), 0);
		cr_assert_eq(t_ini_cmd(&in, &get, want, LEN), 0);
		buf = remap(at);
		cr_assert(buf == at);
		memset(buf, 0xee, LEN);
		cr_assert_eq(T_RETRY(&in.t, fi_read(in.t.ep, buf, LEN, NULL,
						    in.peer, in.ti.addr[0],
						    in.ti.key[0], buf)), 0);
		done_ok(&in, buf, "read");
		cr_assert_eq(memcmp(buf, want, LEN), 0, "round %u", k);
	}
	munmap(buf, LEN);
	free(want);
	cr_assert_eq(t_ini_stop(&in), 0, "target failed");
}
