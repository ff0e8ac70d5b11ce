/*
 * Scalable endpoints (DESIGN §3, "Scalable endpoints"): two of them with
 * four contexts each in one domain; every transmit context sends to every
 * receive context through fi_rx_addr, eager and rendezvous, untagged and
 * tagged, and the receiver sees the sender's one fi_addr; RMA to a
 * context; bad receive contexts and malformed name lists are refused;
 * contexts close before their endpoint.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

#define NCTX 4
#define BITS 3 /* room for receive context indexes the entry lacks */
#define BIG (256 * 1024)
#define WAIT_MS 20000

struct side {
	struct fid_ep *sep, *tx[NCTX], *rx[NCTX];
	struct fid_cq *txcq[NCTX], *rxcq[NCTX];
	fi_addr_t addr; /* in the shared AV */
};

struct pair {
	struct fi_info *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_av *av;
	struct side s[2];
};

static void use_path(const char *path)
{
	/* a network domain, with local peers forced through it */
	if (strcmp(path, "shm")) {
		setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
		setenv("NTX_TEST_DOMAIN", path, 1);
	}
}

static void side_open(struct pair *p, struct side *s)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };

	cr_assert_eq(fi_scalable_ep(p->dom, p->fi, &s->sep, NULL), 0);
	cr_assert_eq(fi_scalable_ep_bind(s->sep, &p->av->fid, 0), 0);
	for (int i = 0; i < NCTX; i++) {
		cr_assert_eq(fi_tx_context(s->sep, i, NULL, &s->tx[i], NULL), 0);
		cr_assert_eq(fi_rx_context(s->sep, i, NULL, &s->rx[i], NULL), 0);
		cr_assert_eq(fi_cq_open(p->dom, &ca, &s->txcq[i], NULL), 0);
		cr_assert_eq(fi_cq_open(p->dom, &ca, &s->rxcq[i], NULL), 0);
		cr_assert_eq(fi_ep_bind(s->rx[i], &s->txcq[i]->fid, FI_TRANSMIT),
			     -FI_EINVAL, "a receive context binds FI_RECV");
		cr_assert_eq(fi_ep_bind(s->tx[i], &s->txcq[i]->fid, FI_TRANSMIT),
			     0);
		cr_assert_eq(fi_enable(s->tx[i]), 0);
		cr_assert_eq(fi_ep_bind(s->rx[i], &s->rxcq[i]->fid, FI_RECV), 0);
		cr_assert_eq(fi_enable(s->rx[i]), 0);
	}
	cr_assert_eq(fi_enable(s->sep), 0);
}

/* The name list of a scalable endpoint: asked for its size first. */
static size_t side_name(struct side *s, void *buf, size_t cap)
{
	size_t len = 0;

	cr_assert_eq(fi_getname(&s->sep->fid, NULL, &len), -FI_ETOOSMALL);
	cr_assert_eq(len, NCTX * T_NAMELEN, "one name per context");
	cr_assert_leq(len, cap);
	cr_assert_eq(fi_getname(&s->sep->fid, buf, &len), 0);
	return len;
}

static void pair_open(struct pair *p, const char *path, uint64_t caps)
{
	struct fi_info *h;
	struct fi_av_attr aa = { .type = FI_AV_TABLE, .rx_ctx_bits = BITS };
	uint8_t name[NCTX * T_NAMELEN];

	use_path(path);
	h = t_hints(caps | FI_MSG | FI_TAGGED | FI_NAMED_RX_CTX | FI_SOURCE);
	h->ep_attr->tx_ctx_cnt = NCTX;
	h->ep_attr->rx_ctx_cnt = NCTX;
	memset(p, 0, sizeof(*p));
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &p->fi), 0);
	fi_freeinfo(h);
	cr_assert_eq(p->fi->ep_attr->tx_ctx_cnt, NCTX);
	cr_assert_geq(p->fi->domain_attr->max_ep_rx_ctx, NCTX);
	cr_assert(p->fi->caps & FI_NAMED_RX_CTX);
	cr_assert_eq(fi_fabric(p->fi->fabric_attr, &p->fab, NULL), 0);
	cr_assert_eq(fi_domain(p->fab, p->fi, &p->dom, NULL), 0);
	cr_assert_eq(fi_av_open(p->dom, &aa, &p->av, NULL), 0);
	for (int k = 0; k < 2; k++)
		side_open(p, &p->s[k]);
	for (int k = 0; k < 2; k++) {
		side_name(&p->s[k], name, sizeof(name));
		cr_assert_eq(fi_av_insert(p->av, name, 1, &p->s[k].addr, 0,
					  NULL), 1);
	}
}

static void side_close(struct side *s)
{
	cr_assert_eq(fi_close(&s->sep->fid), -FI_EBUSY, "contexts open");
	for (int i = 0; i < NCTX; i++) {
		cr_assert_eq(fi_close(&s->tx[i]->fid), 0);
		cr_assert_eq(fi_close(&s->rx[i]->fid), 0);
		/* a closed context let its CQ go */
		cr_assert_eq(fi_close(&s->txcq[i]->fid), 0);
		cr_assert_eq(fi_close(&s->rxcq[i]->fid), 0);
	}
	cr_assert_eq(fi_close(&s->sep->fid), 0);
}

static void pair_close(struct pair *p)
{
	for (int k = 0; k < 2; k++)
		side_close(&p->s[k]);
	cr_assert_eq(fi_close(&p->av->fid), 0);
	cr_assert_eq(fi_close(&p->dom->fid), 0);
	cr_assert_eq(fi_close(&p->fab->fid), 0);
	fi_freeinfo(p->fi);
}

/* Reads CQs of both sides until 'cq' has one completion (the others are
 * read only for progress; they must have none). */
static void wait_one(struct pair *p, struct fid_cq *cq,
		     struct fi_cq_tagged_entry *e, fi_addr_t *src)
{
	uint64_t end = t_ms() + WAIT_MS;

	for (;;) {
		ssize_t n = fi_cq_readfrom(cq, e, 1, src);

		if (n == 1)
			return;
		cr_assert_eq(n, -FI_EAGAIN, "completion error %zd", n);
		for (int k = 0; k < 2; k++)
			for (int i = 0; i < NCTX; i++) {
				fi_cq_read(p->s[k].txcq[i], NULL, 0);
				fi_cq_read(p->s[k].rxcq[i], NULL, 0);
			}
		cr_assert_lt(t_ms(), end, "no completion in time");
	}
}

/* Every transmit context of side 0 to every receive context of side 1,
 * then back, each message with its own pattern. */
static void all_pairs(struct pair *p, size_t len, bool tagged)
{
	char *sbuf = malloc(len), *rbuf = malloc(len);

	for (int k = 0; k < 2; k++) {
		struct side *a = &p->s[k], *b = &p->s[!k];

		for (int i = 0; i < NCTX; i++) {
			for (int j = 0; j < NCTX; j++) {
				unsigned seed = (unsigned)(k * 100 + i * 10 + j);
				fi_addr_t dst = fi_rx_addr(b->addr, j, BITS);
				struct fi_cq_tagged_entry e;
				fi_addr_t src = FI_ADDR_NOTAVAIL;
				ssize_t r;

				t_fill(sbuf, len, seed);
				memset(rbuf, 0, len);
				r = tagged ? fi_trecv(b->rx[j], rbuf, len, NULL,
						      FI_ADDR_UNSPEC, seed, 0,
						      rbuf)
					   : fi_recv(b->rx[j], rbuf, len, NULL,
						     FI_ADDR_UNSPEC, rbuf);
				cr_assert_eq(r, 0);
				do {
					r = tagged ? fi_tsend(a->tx[i], sbuf,
							      len, NULL, dst,
							      seed, sbuf)
						   : fi_send(a->tx[i], sbuf, len,
							     NULL, dst, sbuf);
					if (r == -FI_EAGAIN)
						fi_cq_read(a->txcq[i], NULL, 0);
				} while (r == -FI_EAGAIN);
				cr_assert_eq(r, 0, "send %d->%d: %zd", i, j, r);
				wait_one(p, b->rxcq[j], &e, &src);
				cr_assert_eq(e.op_context, rbuf);
				cr_assert_eq(e.len, len);
				cr_assert_eq(src, a->addr, "FI_SOURCE: the "
					     "sender's fi_addr, whichever "
					     "context sent");
				cr_assert_eq(t_check(rbuf, len, seed), 0,
					     "data %d->%d", i, j);
				wait_one(p, a->txcq[i], &e, NULL);
				cr_assert_eq(e.op_context, sbuf);
			}
		}
	}
	free(sbuf);
	free(rbuf);
}

static void msg_all(const char *path)
{
	struct pair p;

	pair_open(&p, path, 0);
	all_pairs(&p, 64, false);
	all_pairs(&p, 64, true);
	all_pairs(&p, BIG, false);
	all_pairs(&p, BIG, true);
	pair_close(&p);
}

Test(sep, every_context_to_every_context_shm, .timeout = 120)
{
	msg_all("shm");
}

Test(sep, every_context_to_every_context_tcp, .timeout = 120)
{
	msg_all("tcp");
}

Test(sep, every_context_to_every_context_udp, .timeout = 120)
{
	msg_all(t_dgram_domain());
}

/* A receive context the entry does not have is refused, never looked up
 * past the list; one that exists works. */
Test(sep, a_bad_receive_context_is_refused, .timeout = 60)
{
	struct pair p;
	char buf[8] = "sep";

	pair_open(&p, "shm", 0);
	cr_assert_eq(fi_send(p.s[0].tx[0], buf, sizeof(buf), NULL,
			     fi_rx_addr(p.s[1].addr, NCTX, BITS), NULL),
		     -FI_EINVAL);
	cr_assert_eq(fi_send(p.s[0].tx[0], buf, sizeof(buf), NULL,
			     fi_rx_addr(p.s[1].addr, 7, BITS), NULL),
		     -FI_EINVAL);
	cr_assert_eq(fi_send(p.s[0].tx[0], buf, sizeof(buf), NULL,
			     fi_rx_addr(p.s[1].addr + 5, 1, BITS), NULL),
		     -FI_EINVAL, "no such entry");
	/* the scalable endpoint itself carries no data */
	cr_assert_neq(fi_send(p.s[0].sep, buf, sizeof(buf), NULL,
			      p.s[1].addr, NULL), 0);
	cr_assert_eq(fi_tx_context(p.s[0].sep, NCTX, NULL, &p.s[0].tx[0],
				   NULL), -FI_EINVAL);
	cr_assert_eq(fi_rx_context(p.s[0].sep, 1, NULL, &p.s[0].tx[0],
				   NULL), -FI_EBUSY, "open already");
	pair_close(&p);
}

/* Name lists that do not hold together are refused whole. */
Test(sep, malformed_name_lists_are_refused, .timeout = 60)
{
	struct pair p;
	uint8_t good[NCTX * T_NAMELEN];
	/* room past the list: a count that says more reads zeros, which
	 * are no names */
	uint8_t bad[16 * T_NAMELEN];
	fi_addr_t fa;

	pair_open(&p, "shm", 0);
	side_name(&p.s[1], good, sizeof(good));

	/* a count larger than the names that follow */
	memset(bad, 0, sizeof(bad));
	memcpy(bad, good, sizeof(good));
	bad[3] = (uint8_t)((bad[3] & 0x0f) | (7u << 4)); /* 8 names */
	cr_assert_eq(fi_av_insert(p.av, bad, 1, &fa, 0, NULL), 0);
	cr_assert_eq(fa, FI_ADDR_NOTAVAIL);

	/* a name out of its place */
	memcpy(bad, good, sizeof(good));
	memcpy(bad + T_NAMELEN, good + 2 * T_NAMELEN, T_NAMELEN);
	cr_assert_eq(fi_av_insert(p.av, bad, 1, &fa, 0, NULL), 0);

	/* a name of another process */
	memcpy(bad, good, sizeof(good));
	bad[2 * T_NAMELEN + 8] ^= 1; /* pid */
	cr_assert_eq(fi_av_insert(p.av, bad, 1, &fa, 0, NULL), 0);

	/* truncated: the last name is gone */
	memset(bad, 0, sizeof(bad));
	memcpy(bad, good, sizeof(good) - T_NAMELEN);
	cr_assert_eq(fi_av_insert(p.av, bad, 1, &fa, 0, NULL), 0);

	/* the good one still goes in, and fi_av_lookup gives it back */
	cr_assert_eq(fi_av_insert(p.av, good, 1, &fa, 0, NULL), 1);
	{
		uint8_t back[NCTX * T_NAMELEN];
		size_t len = sizeof(back);

		cr_assert_eq(fi_av_lookup(p.av, fa, back, &len), 0);
		cr_assert_eq(len, sizeof(good));
		cr_assert_eq(memcmp(back, good, len), 0);
	}
	pair_close(&p);
}

/* RMA to a context: the domain's keys are valid at every context. */
Test(sep, rma_write_and_read_to_a_context, .timeout = 60)
{
	struct pair p;
	const size_t len = BIG;
	char *target = calloc(1, len), *src = malloc(len), *back = malloc(len);
	struct fid_mr *mr;
	struct fi_cq_tagged_entry e;
	uint64_t key, base;

	pair_open(&p, "shm", FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ |
				    FI_REMOTE_WRITE);
	cr_assert_eq(fi_mr_reg(p.dom, target, len,
			       FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr,
			       NULL), 0);
	key = fi_mr_key(mr);
	base = p.fi->domain_attr->mr_mode & FI_MR_VIRT_ADDR
		       ? (uint64_t)(uintptr_t)target : 0;
	t_fill(src, len, 77);
	cr_assert_eq(fi_write(p.s[0].tx[1], src, len, NULL,
			      fi_rx_addr(p.s[1].addr, 2, BITS), base, key,
			      src), 0);
	wait_one(&p, p.s[0].txcq[1], &e, NULL);
	cr_assert_eq(e.op_context, src);
	cr_assert_eq(t_check(target, len, 77), 0);
	cr_assert_eq(fi_read(p.s[0].tx[3], back, len, NULL,
			     fi_rx_addr(p.s[1].addr, 3, BITS), base, key,
			     back), 0);
	wait_one(&p, p.s[0].txcq[3], &e, NULL);
	cr_assert_eq(t_check(back, len, 77), 0);
	cr_assert_eq(fi_close(&mr->fid), 0);
	pair_close(&p);
	free(target);
	free(src);
	free(back);
}

/* One context of each kind: the name is a plain one. */
Test(sep, one_context_has_a_plain_name, .timeout = 30)
{
	struct fi_info *h = t_hints(FI_MSG | FI_NAMED_RX_CTX), *fi;
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_ep *sep;
	uint8_t name[T_NAMELEN];
	size_t len = sizeof(name);

	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0);
	fi_freeinfo(h);
	cr_assert_eq(fi_fabric(fi->fabric_attr, &fab, NULL), 0);
	cr_assert_eq(fi_domain(fab, fi, &dom, NULL), 0);
	fi->ep_attr->tx_ctx_cnt = 17;
	cr_assert_eq(fi_scalable_ep(dom, fi, &sep, NULL), -FI_EINVAL);
	fi->ep_attr->tx_ctx_cnt = 1;
	fi->ep_attr->rx_ctx_cnt = 1;
	cr_assert_eq(fi_scalable_ep(dom, fi, &sep, NULL), 0);
	cr_assert_eq(fi_getname(&sep->fid, name, &len), 0);
	cr_assert_eq(len, T_NAMELEN);
	cr_assert_eq(name[3] & 0x08, 0, "no list flag");
	cr_assert_eq(fi_close(&sep->fid), 0);
	cr_assert_eq(fi_close(&dom->fid), 0);
	cr_assert_eq(fi_close(&fab->fid), 0);
	fi_freeinfo(fi);
}

/* Progresses every context of both sides once. */
static void progress_all(struct pair *p)
{
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < NCTX; i++) {
			fi_cq_read(p->s[k].txcq[i], NULL, 0);
			fi_cq_read(p->s[k].rxcq[i], NULL, 0);
		}
}

/* A name given by service (fi_getinfo's node and service, as fabtests'
 * fi_scalable_ep sends to fi->dest_addr) knows the first context only;
 * the peer's first packet tells the others, and sends to them go through
 * once it arrived (-FI_EAGAIN until then). */
static void by_service(const char *path)
{
	struct fi_av_attr aa = { .type = FI_AV_TABLE, .rx_ctx_bits = BITS };
	struct fi_info *h, *src, *dst;
	struct fi_cq_tagged_entry e;
	uint8_t name[NCTX * T_NAMELEN];
	char svc[16], sbuf[64], rbuf[64];
	fi_addr_t peer, from;
	struct pair p;
	ssize_t r;

	use_path(path);
	cr_assert_eq(t_free_service(svc, sizeof(svc), 40000, 20000), 0);
	h = t_hints(FI_MSG | FI_NAMED_RX_CTX | FI_SOURCE);
	h->ep_attr->tx_ctx_cnt = NCTX;
	h->ep_attr->rx_ctx_cnt = NCTX;
	memset(&p, 0, sizeof(p));
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, svc, FI_SOURCE, h, &src), 0);
	cr_assert_eq(fi_getinfo(T_VERSION, "127.0.0.1", svc, 0, h, &dst), 0);
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &p.fi), 0);
	fi_freeinfo(h);
	cr_assert_not_null(dst->dest_addr);
	cr_assert_eq(fi_fabric(p.fi->fabric_attr, &p.fab, NULL), 0);
	cr_assert_eq(fi_domain(p.fab, p.fi, &p.dom, NULL), 0);
	cr_assert_eq(fi_av_open(p.dom, &aa, &p.av, NULL), 0);
	side_open(&p, &p.s[0]);
	/* side 1 holds the service */
	{
		struct fi_info *keep = p.fi;

		p.fi = src;
		side_open(&p, &p.s[1]);
		p.fi = keep;
	}
	side_name(&p.s[0], name, sizeof(name));
	cr_assert_eq(fi_av_insert(p.av, name, 1, &p.s[0].addr, 0, NULL), 1);
	cr_assert_eq(fi_av_insert(p.av, dst->dest_addr, 1, &peer, 0, NULL), 1);
	p.s[1].addr = peer;

	for (int j = 0; j < NCTX; j++) {
		int j2 = (j + 1) % NCTX; /* the first context last */
		uint64_t end = t_ms() + WAIT_MS;

		t_fill(sbuf, sizeof(sbuf), (unsigned)j2);
		cr_assert_eq(fi_recv(p.s[1].rx[j2], rbuf, sizeof(rbuf), NULL,
				     FI_ADDR_UNSPEC, rbuf), 0);
		while ((r = fi_send(p.s[0].tx[1], sbuf, sizeof(sbuf), NULL,
				    fi_rx_addr(peer, j2, BITS), sbuf)) ==
		       -FI_EAGAIN) {
			progress_all(&p);
			cr_assert_lt(t_ms(), end, "contexts never learnt");
		}
		cr_assert_eq(r, 0, "send to context %d: %zd", j2, r);
		wait_one(&p, p.s[1].rxcq[j2], &e, &from);
		cr_assert_eq(t_check(rbuf, sizeof(rbuf), (unsigned)j2), 0);
		cr_assert_eq(from, p.s[0].addr);
		wait_one(&p, p.s[0].txcq[1], &e, NULL);
	}
	/* the entry now lists every context */
	{
		uint8_t back[NCTX * T_NAMELEN];
		size_t len = sizeof(back);

		cr_assert_eq(fi_av_lookup(p.av, peer, back, &len), 0);
		cr_assert_eq(len, sizeof(back));
	}
	fi_freeinfo(src);
	fi_freeinfo(dst);
	pair_close(&p);
}

Test(sep, a_name_by_service_learns_the_contexts_shm, .timeout = 60)
{
	by_service("shm");
}

Test(sep, a_name_by_service_learns_the_contexts_tcp, .timeout = 60)
{
	by_service("tcp");
}
