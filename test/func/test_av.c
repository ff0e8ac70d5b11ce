/* Address vectors through the public API: FI_SOCKADDR_IN names,
 * fi_av_insertsym, fi_av_straddr and bad addresses. */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_test.h"

#define WAIT_MS 20000

static const char *g_dom;

/* Hints asking for FI_SOCKADDR_IN names in domain g_dom. */
static struct fi_info *sin_hints(void)
{
	struct fi_info *h = t_hints(FI_MSG | FI_SOURCE);

	free(h->domain_attr->name);
	h->domain_attr->name = strdup(g_dom);
	h->addr_format = FI_SOCKADDR_IN;
	return h;
}

/* Our sockaddr_in over the socket, the peer's into the AV. */
static int sin_xchg(struct tctx *t, int sock, fi_addr_t *peer)
{
	struct sockaddr_in mine, theirs;
	size_t len = sizeof(mine);

	if (t->fi->addr_format != FI_SOCKADDR_IN ||
	    fi_getname(&t->ep->fid, &mine, &len) || len != sizeof(mine) ||
	    mine.sin_family != AF_INET || !mine.sin_port ||
	    !mine.sin_addr.s_addr)
		return -1;
	if (t_sock_write(sock, &mine, len) || t_sock_read(sock, &theirs, len))
		return -1;
	return t_insert(t, &theirs, peer);
}

static int child_sin_echo(int sock)
{
	struct tctx t;
	struct fi_cq_tagged_entry e;
	fi_addr_t peer, src;
	char buf[64] = "";

	CHK(t_open_hints(&t, sin_hints()) == 0);
	CHK(sin_xchg(&t, sock, &peer) == 0);
	CHK(fi_recv(t.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, NULL) == 0);
	CHK(t_wait(&t, &e, &src, NULL, WAIT_MS) == 1);
	CHK(!strcmp(buf, "ping") && src == peer);
	CHK(fi_send(t.ep, "pong", 5, NULL, peer, NULL) == 0);
	CHK(t_wait(&t, &e, NULL, NULL, WAIT_MS) == 1);
	CHK(t_sync(sock) == 0);
	t_close(&t);
	return 0;
}

/* A message each way between endpoints that know each other only by
 * IPv4 address and port; the receiver names the sender (FI_SOURCE). */
static void sin_ping_pong(const char *dom)
{
	struct tctx t;
	struct fi_cq_tagged_entry e;
	fi_addr_t peer, src;
	char buf[64] = "";
	int sock;
	pid_t pid;

	g_dom = dom;
	pid = t_fork(&sock, child_sin_echo);
	cr_assert_eq(t_open_hints(&t, sin_hints()), 0);
	cr_assert_eq(sin_xchg(&t, sock, &peer), 0);
	cr_assert_eq(fi_recv(t.ep, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC,
			     NULL), 0);
	cr_assert_eq(fi_send(t.ep, "ping", 5, NULL, peer, NULL), 0);
	for (int n = 0; n < 2; n++) {
		cr_assert_eq(t_wait(&t, &e, &src, NULL, WAIT_MS), 1);
		if (e.flags & FI_RECV)
			cr_assert_eq(src, peer);
	}
	cr_assert_str_eq(buf, "pong");
	cr_assert_eq(t_sync(sock), 0);
	t_close(&t);
	cr_assert_eq(t_join(pid), 0);
}

Test(av, sockaddr_in_names_shm)
{
	sin_ping_pong("shm");
}

Test(av, sockaddr_in_names_tcp)
{
	sin_ping_pong("tcp");
}

/* An AV of the sockaddr domain, alone (no endpoint needed). */
T_DEPRECATED_BEGIN
static void sin_av(struct tctx *t, enum fi_av_type type, struct fid_eq **eq)
{
	struct fi_av_attr aa = { .type = type,
				 .flags = eq ? FI_EVENT : 0 };
	struct fi_eq_attr ea = { .wait_obj = FI_WAIT_UNSPEC };
	int ret;

	g_dom = "shm";
	memset(t, 0, sizeof(*t));
	ret = fi_getinfo(T_VERSION, "127.0.0.1", NULL, FI_SOURCE,
			 sin_hints(), &t->fi);
	cr_assert_eq(ret, 0);
	cr_assert_eq(t->fi->addr_format, FI_SOCKADDR_IN);
	cr_assert_eq(t->fi->src_addrlen, sizeof(struct sockaddr_in));
	cr_assert_eq(fi_fabric(t->fi->fabric_attr, &t->fab, NULL), 0);
	cr_assert_eq(fi_domain(t->fab, t->fi, &t->dom, NULL), 0);
	cr_assert_eq(fi_av_open(t->dom, &aa, &t->av, NULL), 0);
	if (eq) {
		cr_assert_eq(fi_eq_open(t->fab, &ea, eq, NULL), 0);
		cr_assert_eq(fi_av_bind(t->av, &(*eq)->fid, 0), 0);
	}
}

T_DEPRECATED_END

static struct sockaddr_in sin_of(const char *ip, uint16_t port)
{
	struct sockaddr_in s = { .sin_family = AF_INET,
				 .sin_port = htons(port) };

	inet_pton(AF_INET, ip, &s.sin_addr);
	return s;
}

Test(av, bad_sockaddr_is_refused_good_one_kept)
{
	struct sockaddr_in in[3] = { sin_of("127.0.0.1", 9), { 0 },
				     sin_of("127.0.0.1", 0) };
	struct sockaddr_in out;
	size_t len = sizeof(out);
	fi_addr_t fa[3];
	struct tctx t;

	in[1].sin_family = AF_INET6;
	sin_av(&t, FI_AV_TABLE, NULL);
	cr_assert_eq(fi_av_insert(t.av, in, 3, fa, 0, NULL), 1);
	cr_assert_eq(fa[0], 0);
	cr_assert_eq(fa[1], FI_ADDR_NOTAVAIL);
	cr_assert_eq(fa[2], FI_ADDR_NOTAVAIL);
	cr_assert_eq(fi_av_lookup(t.av, fa[0], &out, &len), 0);
	cr_assert_eq(len, sizeof(out));
	cr_assert_eq(memcmp(&out, &in[0], sizeof(out)), 0);
	cr_assert_eq(fi_av_lookup(t.av, 1, &out, &len), -FI_ENOENT);
	t_close(&t);
}

Test(av, bad_address_in_an_async_insert_is_an_error_event)
{
	struct sockaddr_in in[2] = { { 0 }, sin_of("127.0.0.1", 9) };
	struct fi_eq_err_entry err = { 0 };
	struct fi_eq_entry ev;
	struct fid_eq *eq;
	fi_addr_t fa[2];
	uint32_t event;
	struct tctx t;
	int ctx;

	sin_av(&t, FI_AV_MAP, &eq);
	cr_assert_eq(fi_av_insert(t.av, in, 2, fa, 0, &ctx), 0);
	cr_assert_eq(fi_eq_sread(eq, &event, &ev, sizeof(ev), 1000, 0),
		     -FI_EAVAIL);
	cr_assert_eq(fi_eq_readerr(eq, &err, 0), sizeof(err));
	cr_assert_eq(err.fid, &t.av->fid);
	cr_assert_eq(err.context, &ctx);
	cr_assert_eq(err.data, 0); /* the index of the bad address */
	cr_assert_gt(err.err, 0);
	cr_assert_eq(fi_eq_sread(eq, &event, &ev, sizeof(ev), 1000, 0),
		     sizeof(ev));
	cr_assert_eq(event, FI_AV_COMPLETE);
	cr_assert_eq(ev.data, 1);
	cr_assert_eq(fa[0], FI_ADDR_NOTAVAIL);
	cr_assert_neq(fa[1], FI_ADDR_NOTAVAIL);
	fi_close(&t.av->fid);
	t.av = NULL;
	fi_close(&eq->fid);
	t_close(&t);
}

Test(av, insertsym_expands_nodes_and_services)
{
	static const char *ip[] = { "127.0.0.9", "127.0.0.10" };
	fi_addr_t fa[6];
	struct sockaddr_in out;
	size_t len;
	struct tctx t;
	char str[64];

	sin_av(&t, FI_AV_TABLE, NULL);
	cr_assert_eq(fi_av_insertsym(t.av, "127.0.0.9", 2, "7000", 3, fa, 0,
				     NULL), 6);
	for (int i = 0; i < 6; i++) {
		struct sockaddr_in want = sin_of(ip[i / 3], 7000 + i % 3);

		len = sizeof(out);
		cr_assert_eq(fi_av_lookup(t.av, fa[i], &out, &len), 0);
		cr_assert_eq(memcmp(&out, &want, sizeof(out)), 0, "entry %d", i);
	}
	len = sizeof(str);
	cr_assert_not_null(fi_av_straddr(t.av, &out, str, &len));
	cr_assert_str_eq(str, "fi_sockaddr_in://127.0.0.10:7002");
	cr_assert_eq(len, strlen(str) + 1);
	cr_assert_eq(fi_av_insertsym(t.av, "127.0.0.1", 1, "x", 1, fa, 0,
				     NULL), -FI_EINVAL);
	cr_assert_eq(fi_av_insertsym(t.av, "127.0.0.1", 1, "65535", 2, fa, 0,
				     NULL), -FI_EINVAL);
	cr_assert_eq(fi_av_insertsym(t.av, "127.0.0.1", 0, "1", 1, fa, 0,
				     NULL), -FI_EINVAL);
	t_close(&t);
}

/* fi_getinfo's node/service in FI_SOCKADDR_IN: a destination on this
 * host is its address and port, a source without a node takes any. */
Test(av, getinfo_gives_sockaddr_in_addresses)
{
	struct sockaddr_in want = sin_of("127.0.0.1", 7200);
	const struct sockaddr_in *sin;
	struct fi_info *fi;

	g_dom = "shm";
	cr_assert_eq(fi_getinfo(T_VERSION, "127.0.0.1", "7200", 0, sin_hints(),
				&fi), 0);
	cr_assert_eq(fi->addr_format, FI_SOCKADDR_IN);
	cr_assert_eq(fi->dest_addrlen, sizeof(want));
	cr_assert_eq(memcmp(fi->dest_addr, &want, sizeof(want)), 0);
	fi_freeinfo(fi);
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, "7200", FI_SOURCE,
				sin_hints(), &fi), 0);
	sin = fi->src_addr;
	cr_assert_eq(fi->src_addrlen, sizeof(*sin));
	cr_assert(sin->sin_family == AF_INET && !sin->sin_addr.s_addr &&
		  sin->sin_port == htons(7200));
	fi_freeinfo(fi);
	g_dom = "verbs0";
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, sin_hints(), &fi),
		     -FI_ENODATA, "no such domain, nor sockaddr names there");
}

Test(av, insertsvc_resolves_like_getinfo)
{
	struct sockaddr_in out, want = sin_of("127.0.0.1", 7100);
	size_t len = sizeof(out);
	fi_addr_t fa;
	struct tctx t;

	sin_av(&t, FI_AV_TABLE, NULL);
	cr_assert_eq(fi_av_insertsvc(t.av, "127.0.0.1", "7100", &fa, 0, NULL),
		     1);
	cr_assert_eq(fi_av_lookup(t.av, fa, &out, &len), 0);
	cr_assert_eq(memcmp(&out, &want, sizeof(out)), 0);
	cr_assert_eq(fi_av_insertsvc(t.av, "127.0.0.1", "port", &fa, 0, NULL),
		     0);
	cr_assert_eq(fa, FI_ADDR_NOTAVAIL);
	cr_assert_eq(fi_av_insertsvc(t.av, NULL, NULL, &fa, 0, NULL),
		     -FI_EINVAL);
	t_close(&t);
}
