/*
 * Job keys (FI_AUTH_KEY, DESIGN §7): peers prove they hold the same key
 * before any operation; a peer with another key or none completes
 * nothing, and both sides keep working with the peers they share a key
 * with. Run on the shm window and on the tcp path.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ntx_test.h"

#define CAPS (FI_MSG | FI_TAGGED | FI_DIRECTED_RECV)
#define AUTH_MS 10000
#define BIG 20000 /* above the eager size: rendezvous */
#define TAG_DENIED 1
#define TAG_OK 2

static void set_key(uint8_t **key, size_t *size, const char *k)
{
	if (!k)
		return;
	*key = (uint8_t *)strdup(k);
	*size = strlen(k);
}

/* An endpoint whose domain key and endpoint key are given (NULL: none,
 * so FI_NTX_AUTH_KEY or no key at all). */
static int open_keyed(struct tctx *t, const char *dom_key, const char *ep_key)
{
	struct fi_info *h = t_hints(CAPS);

	set_key(&h->domain_attr->auth_key, &h->domain_attr->auth_key_size,
		dom_key);
	set_key(&h->ep_attr->auth_key, &h->ep_attr->auth_key_size, ep_key);
	return t_open_hints(t, h);
}

static void use_tcp(void)
{
	setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
	setenv("NTX_TEST_DOMAIN", "tcp", 1);
}

/* Names of n endpoints each way over the socket. */
static int xchg_names(struct tctx *t, int n, int sock, char theirs[][T_NAMELEN])
{
	char mine[T_NAMELEN];

	for (int i = 0; i < n; i++) {
		size_t len = sizeof(mine);

		if (fi_getname(&t[i].ep->fid, mine, &len) ||
		    t_sock_write(sock, mine, sizeof(mine)))
			return -1;
	}
	for (int i = 0; i < n; i++)
		if (t_sock_read(sock, theirs[i], T_NAMELEN))
			return -1;
	return 0;
}

/* Each side posts a receive from the peer and sends to it; with keys
 * that do not match, the connection fails with FI_EACCES: the send
 * completes with it, and the receive directed at the peer fails too
 * (nothing from it can ever arrive), in either order. Returns 0 or the
 * failing line; rctx is the receive. */
static int denied(struct tctx *t, fi_addr_t peer, void *rctx)
{
	static char rbuf[64];
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err = { 0 };
	bool sent = false, recvd = false;
	int ret;

	CHK(fi_trecv(t->ep, rbuf, sizeof(rbuf), NULL, peer, TAG_DENIED, 0,
		     rctx) == 0);
	CHK(fi_tsend(t->ep, "secret!", 8, NULL, peer, TAG_DENIED,
		     (void *)0x5e) == 0);
	for (int i = 0; i < 2; i++) {
		ret = t_wait(t, &e, NULL, &err, AUTH_MS);
		if (ret == 1)
			fprintf(stderr, "completion %p went through\n",
				e.op_context);
		CHK(ret == -FI_EAVAIL);
		if (err.op_context == (void *)0x5e) {
			CHK(!sent && (err.flags & FI_SEND));
			CHK(err.err == FI_EACCES);
			sent = true;
		} else {
			/* with the error of the last connection to the peer
			 * that failed: where both sides connected at once,
			 * the one the peer closed may fail last, with its
			 * own error (such as FI_ECONNRESET) */
			CHK(err.op_context == rctx && !recvd &&
			    (err.flags & FI_RECV));
			if (err.err != FI_EACCES)
				fprintf(stderr, "the receive failed with %d\n",
					err.err);
			CHK(err.err != 0);
			recvd = true;
		}
	}
	return 0;
}

/* The receive denied() posted failed there: nothing is left to cancel,
 * and nothing else completes. */
static int never_received(struct tctx *t, void *rctx)
{
	CHK(fi_cancel(&t->ep->fid, rctx) == -FI_ENOENT);
	CHK(t_drain(t, 20) == 0);
	return 0;
}

/* One message of len bytes with matching keys, sent or received. */
static int xfer(struct tctx *t, bool send, fi_addr_t peer, size_t len)
{
	static char buf[BIG];
	struct fi_cq_tagged_entry e;

	if (send) {
		t_fill(buf, len, 7);
		CHK(fi_tsend(t->ep, buf, len, NULL, peer, TAG_OK, NULL) == 0);
		CHK(t_wait(t, &e, NULL, NULL, AUTH_MS) == 1);
		CHK(e.flags & FI_SEND);
		return 0;
	}
	memset(buf, 0, len);
	CHK(fi_trecv(t->ep, buf, len, NULL, peer, TAG_OK, 0, NULL) == 0);
	CHK(t_wait(t, &e, NULL, NULL, AUTH_MS) == 1);
	CHK(e.len == len && t_check(buf, len, 7) == 0);
	return 0;
}

/* ---- matching keys ------------------------------------------------------ */

/* role 0 (test process) takes its key from the hints, role 1 (child)
 * from FI_NTX_AUTH_KEY: both name the same job. */
static int same_key(int role, int sock)
{
	struct tctx t;
	fi_addr_t peer;
	int ret;

	if (role)
		setenv("FI_NTX_AUTH_KEY", "job-1234", 1);
	CHK(open_keyed(&t, role ? NULL : "job-1234", NULL) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	/* eager and rendezvous, each way */
	for (int i = 0; i < 4; i++) {
		ret = xfer(&t, (i & 1) == role, peer, i < 2 ? 8 : BIG);
		if (ret)
			return ret;
	}
	t_close(&t);
	return 0;
}

/* Both roles of a two-process test: the child plays role 1, this
 * process role 0; each returns 0 or its failing line. */
static int (*g_roles)(int role, int sock);

static int child_role(int sock)
{
	return g_roles(1, sock);
}

static void run_roles(int (*fn)(int role, int sock))
{
	int sock;
	pid_t pid;

	g_roles = fn;
	pid = t_fork(&sock, child_role);
	cr_assert_eq(fn(0, sock), 0, "test process failed");
	cr_assert_eq(t_join(pid), 0, "child failed");
}

Test(auth, same_key_works_shm, .timeout = 60)
{
	run_roles(same_key);
}

Test(auth, same_key_works_tcp, .timeout = 60)
{
	use_tcp();
	run_roles(same_key);
}

/* ---- different keys ------------------------------------------------------
 * Each side opens e[0] with its own key and e[1] with the other side's
 * (ep_attr overrides the domain's): e[0] and the peer's e[0] complete
 * nothing between them; each e[0] still works with the peer's e[1]. */
static int diff_keys(int role, int sock)
{
	const char *mine = role ? "key-bravo" : "key-alpha";
	const char *other = role ? "key-alpha" : "key-bravo";
	char names[2][T_NAMELEN];
	struct tctx e[2];
	fi_addr_t p0, p1, q0;
	int ret;

	CHK(open_keyed(&e[0], mine, NULL) == 0);
	CHK(open_keyed(&e[1], mine, other) == 0);
	CHK(xchg_names(e, 2, sock, names) == 0);
	CHK(t_insert(&e[0], names[0], &p0) == 0);
	CHK(t_insert(&e[0], names[1], &p1) == 0);
	CHK(t_insert(&e[1], names[0], &q0) == 0);
	ret = denied(&e[0], p0, (void *)0x7ec);
	if (ret)
		return ret;
	/* the peer may still be connecting: its refusal needs our progress */
	CHK(t_sync_progress(&e[0], sock, AUTH_MS) == 0);
	/* role 0's e[0] with role 1's e[1], then the other way round */
	for (int i = 0; i < 4; i++) {
		bool e0 = (i < 2) == (role == 0);
		bool send = (i & 1) == role;

		ret = xfer(e0 ? &e[0] : &e[1], send, e0 ? p1 : q0,
			   i & 1 ? BIG : 8);
		if (ret)
			return ret;
	}
	ret = never_received(&e[0], (void *)0x7ec);
	if (ret)
		return ret;
	t_close(&e[1]);
	t_close(&e[0]);
	return 0;
}

Test(auth, different_keys_complete_nothing_shm, .timeout = 60)
{
	run_roles(diff_keys);
}

Test(auth, different_keys_complete_nothing_tcp, .timeout = 60)
{
	use_tcp();
	run_roles(diff_keys);
}

/* ---- a key against none ------------------------------------------------- */

static int key_vs_none(int role, int sock)
{
	struct tctx t;
	fi_addr_t peer;
	int ret;

	if (role) /* the child has the key; the test process has none */
		setenv("FI_NTX_AUTH_KEY", "job-1234", 1);
	CHK(open_keyed(&t, NULL, NULL) == 0);
	CHK(t_xchg_name(&t, sock, &peer) == 0);
	ret = denied(&t, peer, (void *)0x7ec);
	if (ret)
		return ret;
	CHK(t_sync_progress(&t, sock, AUTH_MS) == 0);
	ret = never_received(&t, (void *)0x7ec);
	t_close(&t);
	return ret;
}

Test(auth, peer_without_the_key_completes_nothing_shm, .timeout = 60)
{
	run_roles(key_vs_none);
}

Test(auth, peer_without_the_key_completes_nothing_tcp, .timeout = 60)
{
	use_tcp();
	run_roles(key_vs_none);
}

/* ---- fi_getinfo --------------------------------------------------------- */

Test(auth, getinfo_takes_keys_and_reports_their_size)
{
	struct fi_info *h = t_hints(CAPS), *fi;
	uint8_t big[300];

	set_key(&h->domain_attr->auth_key, &h->domain_attr->auth_key_size,
		"dom-key");
	set_key(&h->ep_attr->auth_key, &h->ep_attr->auth_key_size, "ep");
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	cr_assert_eq(fi->domain_attr->auth_key_size, 7);
	cr_assert(!memcmp(fi->domain_attr->auth_key, "dom-key", 7));
	cr_assert_eq(fi->ep_attr->auth_key_size, 2);
	cr_assert(!memcmp(fi->ep_attr->auth_key, "ep", 2));
	fi_freeinfo(fi);
	/* longer than NTX_AUTH_KEY_MAX (256): no match */
	free(h->domain_attr->auth_key);
	memset(big, 'k', sizeof(big));
	h->domain_attr->auth_key = malloc(sizeof(big));
	memcpy(h->domain_attr->auth_key, big, sizeof(big));
	h->domain_attr->auth_key_size = sizeof(big);
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), -FI_ENODATA);
	fi_freeinfo(h);
}

Test(auth, getinfo_reports_the_size_of_the_default_key)
{
	struct fi_info *fi;

	setenv("FI_NTX_AUTH_KEY", "twelve bytes", 1); /* before it loads */
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, t_hints(CAPS), &fi),
		     0);
	cr_assert_eq(fi->domain_attr->auth_key_size, 12);
	cr_assert_null(fi->domain_attr->auth_key, "the key itself is not "
			"given out");
	fi_freeinfo(fi);
}
