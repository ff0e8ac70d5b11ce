/* Many peers on one endpoint: past four peers the receiver drains only
 * the rings its senders flag in the window's ready bitmap, and takes back
 * the flags of rings that went quiet. Every message must still arrive,
 * once and in order per sender, across quiet spells. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

#define NPEER 12
#define ROUNDS 6
#define BURST 40
#define QUIET_MS 25 /* longer than the 10 ms after which flags are taken back */
#define CAPS (FI_MSG | FI_TAGGED | FI_SOURCE)

/* Message k of sender p: its sequence number, and p, in the first 16
 * bytes; every other message is 1 KiB, so entries take several lines. */
static size_t msg_len(unsigned k)
{
	return k % 2 ? 1024 : 16;
}

static int child_senders(int sock)
{
	static struct tctx t[NPEER];
	/* a buffer per message: a send owns it until it completes */
	static uint64_t buf[NPEER][ROUNDS * BURST][128];
	char name[T_NAMELEN];
	fi_addr_t peer[NPEER];

	CHK(read(sock, name, sizeof(name)) == (ssize_t)sizeof(name));
	for (int p = 0; p < NPEER; p++) {
		size_t len = sizeof(name);
		char mine[T_NAMELEN];

		CHK(t_open(&t[p], CAPS) == 0);
		CHK(t_insert(&t[p], name, &peer[p]) == 0);
		CHK(fi_getname(&t[p].ep->fid, mine, &len) == 0);
		CHK(write(sock, mine, len) == (ssize_t)len);
	}
	for (unsigned r = 0; r < ROUNDS; r++) {
		uint64_t end;

		for (unsigned i = 0; i < BURST; i++) {
			for (int p = 0; p < NPEER; p++) {
				unsigned k = r * BURST + i;

				buf[p][k][0] = k;
				buf[p][k][1] = (uint64_t)p;
				CHK(T_RETRY(&t[p], fi_tsend(t[p].ep, buf[p][k],
							    msg_len(k), NULL,
							    peer[p], 7, NULL)) ==
				    0);
				CHK(t_drain(&t[p], 0) >= 0);
			}
		}
		/* a quiet spell, still making progress */
		end = t_ms() + QUIET_MS;
		while (t_ms() < end)
			for (int p = 0; p < NPEER; p++)
				fi_cq_read(t[p].cq, NULL, 0);
	}
	/* The receiver answers each sender once everything arrived. With
	 * manual progress a sender's messages still queued behind a full
	 * ring (the engine's backlog) move only while that sender's own CQ
	 * is read: waiting on one endpoint at a time would leave the others'
	 * queues unsent, the receiver would wait for them and answer nobody.
	 * So every endpoint is progressed until all the answers are in. */
	static uint64_t got[NPEER];
	unsigned answered = 0;
	uint64_t end = t_ms() + T_WAIT_MS;

	for (int p = 0; p < NPEER; p++) {
		got[p] = UINT64_MAX;
		CHK(fi_trecv(t[p].ep, &got[p], sizeof(got[p]), NULL, peer[p],
			     9, 0, &got[p]) == 0);
	}
	while (answered < NPEER) {
		CHK(t_ms() < end);
		for (int p = 0; p < NPEER; p++) {
			struct fi_cq_tagged_entry e;
			ssize_t n = fi_cq_read(t[p].cq, &e, 1);

			CHK(n == 1 || n == -FI_EAGAIN);
			if (n == 1 && e.op_context == &got[p]) {
				CHK(got[p] == (uint64_t)p);
				answered++;
			}
		}
	}
	for (int p = 0; p < NPEER; p++)
		t_close(&t[p]);
	return 0;
}

Test(peers, many_senders_with_quiet_spells_lose_nothing, .timeout = 60)
{
	struct tctx t;
	char name[T_NAMELEN];
	size_t len = sizeof(name);
	fi_addr_t peer[NPEER];
	unsigned next[NPEER] = { 0 };
	uint64_t buf[128];
	int sock;
	pid_t pid = t_fork(&sock, child_senders);

	cr_assert_eq(t_open(&t, CAPS), 0);
	cr_assert_eq(fi_getname(&t.ep->fid, name, &len), 0);
	cr_assert_eq(write(sock, name, len), (ssize_t)len);
	for (int p = 0; p < NPEER; p++) {
		cr_assert_eq(read(sock, name, sizeof(name)),
			     (ssize_t)sizeof(name));
		cr_assert_eq(t_insert(&t, name, &peer[p]), 0);
	}
	for (unsigned n = 0; n < NPEER * ROUNDS * BURST; n++) {
		struct fi_cq_tagged_entry e;
		fi_addr_t src;
		int p;

		cr_assert_eq(fi_trecv(t.ep, buf, sizeof(buf), NULL,
				      FI_ADDR_UNSPEC, 7, 0, buf), 0);
		cr_assert_eq(t_wait(&t, &e, &src, NULL, T_WAIT_MS), 1,
			     "message %u of %u never came", n,
			     NPEER * ROUNDS * BURST);
		p = (int)buf[1];
		cr_assert(p >= 0 && p < NPEER && src == peer[p],
			  "message from an unknown sender");
		cr_assert_eq(buf[0], next[p], "sender %d: got %lu, want %u", p,
			     (unsigned long)buf[0], next[p]);
		cr_assert_eq(e.len, msg_len(next[p]));
		next[p]++;
	}
	for (int p = 0; p < NPEER; p++) {
		uint64_t v = (uint64_t)p;

		cr_assert_eq(T_RETRY(&t, fi_tsend(t.ep, &v, sizeof(v), NULL,
						  peer[p], 9, NULL)), 0);
		cr_assert_eq(t_wait(&t, NULL, NULL, NULL, T_WAIT_MS), 1);
	}
	cr_assert_eq(t_join(pid), 0);
	t_close(&t);
}

/* One CQ, one counter and 300 endpoints bound to them (no cap on the
 * endpoints a CQ progresses): a message to each endpoint completes, on
 * the receiving CQ and on the counter, whichever endpoint it went to.
 * Two senders of their own share the 300 peers (FI_NTX_MAX_PEERS). The
 * scopes are the engine's, the same on every domain: this runs on shm,
 * where 300 endpoints cost no device resources (a soft-RoCE guest has
 * not the memory for 300 SRQs). */
#define NEP 300
#define NSEND 2

Test(peers, three_hundred_endpoints_on_one_cq, .timeout = 120)
{
	static struct fid_ep *ep[NEP];
	static fi_addr_t dst[NSEND][NEP];
	static uint64_t in[NEP];
	struct fi_info *hints = t_hints(FI_MSG | FI_TAGGED), *fi;
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP };
	struct fi_av_attr aa = { .type = FI_AV_TABLE };
	struct fid_fabric *fab;
	struct fid_domain *dom;
	struct fid_cq *cq;
	struct fid_cntr *cntr;
	struct fid_av *av;
	struct tctx s[NSEND];
	int got = 0;

	free(hints->domain_attr->name);
	hints->domain_attr->name = strdup("shm");
	cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, hints, &fi), 0);
	cr_assert_eq(fi_fabric(fi->fabric_attr, &fab, NULL), 0);
	cr_assert_eq(fi_domain(fab, fi, &dom, NULL), 0);
	cr_assert_eq(fi_cq_open(dom, &ca, &cq, NULL), 0);
	cr_assert_eq(fi_cntr_open(dom, &na, &cntr, NULL), 0);
	cr_assert_eq(fi_av_open(dom, &aa, &av, NULL), 0);
	for (int i = 0; i < NSEND; i++) {
		struct fi_info *h = t_hints(FI_MSG | FI_TAGGED);

		free(h->domain_attr->name);
		h->domain_attr->name = strdup("shm");
		cr_assert_eq(t_open_hints(&s[i], h), 0);
	}
	for (int e = 0; e < NEP; e++) {
		char name[T_NAMELEN];
		size_t len = sizeof(name);

		cr_assert_eq(fi_endpoint(dom, fi, &ep[e], NULL), 0,
			     "endpoint %d", e);
		cr_assert_eq(fi_ep_bind(ep[e], &cq->fid, FI_TRANSMIT | FI_RECV),
			     0);
		cr_assert_eq(fi_ep_bind(ep[e], &cntr->fid, FI_RECV), 0);
		cr_assert_eq(fi_ep_bind(ep[e], &av->fid, 0), 0);
		cr_assert_eq(fi_enable(ep[e]), 0);
		cr_assert_eq(fi_trecv(ep[e], &in[e], sizeof(in[e]), NULL,
				      FI_ADDR_UNSPEC, 5, 0, &in[e]), 0);
		cr_assert_eq(fi_getname(&ep[e]->fid, name, &len), 0);
		cr_assert_eq(t_insert(&s[e % NSEND], name,
				      &dst[e % NSEND][e]), 0);
	}
	for (int e = 0; e < NEP; e++) {
		uint64_t v = (uint64_t)e + 1000;
		struct tctx *t = &s[e % NSEND];

		cr_assert_eq(T_RETRY(t, fi_tinject(t->ep, &v, sizeof(v),
						   dst[e % NSEND][e], 5)), 0);
	}
	for (uint64_t end = 0; got < NEP && end < 60000000; end++) {
		struct fi_cq_tagged_entry c;

		for (int i = 0; i < NSEND; i++)
			fi_cq_read(s[i].cq, NULL, 0);
		if (fi_cq_read(cq, &c, 1) == 1) {
			uint64_t *p = c.op_context;

			cr_assert(p >= in && p < in + NEP);
			cr_assert_eq(*p, (uint64_t)(p - in) + 1000,
				     "endpoint %d got another's message",
				     (int)(p - in));
			got++;
		}
	}
	cr_assert_eq(got, NEP, "%d of %d endpoints completed", got, NEP);
	cr_assert_eq(fi_cntr_read(cntr), NEP);
	for (int e = 0; e < NEP; e++)
		cr_assert_eq(fi_close(&ep[e]->fid), 0);
	for (int i = 0; i < NSEND; i++)
		t_close(&s[i]);
	fi_close(&av->fid);
	fi_close(&cntr->fid);
	fi_close(&cq->fid);
	fi_close(&dom->fid);
	fi_close(&fab->fid);
	fi_freeinfo(fi);
	fi_freeinfo(hints);
}

/* Past four peers the receiver looks first at the ring it last found
 * ready alone (the hot ring) and passes over the bitmap only every
 * NTX_NTB_HOT_RUNS (16) drains of it: a peer whose ring never empties
 * must not keep another's message out. One process: the busy sender
 * tops its ring up between the receiver's reads (one drain of at most 64
 * entries each), so the hot ring is never empty when the receiver
 * polls. The quiet peer's one message must come
 * before 4096 more of the busy peer's (about 17 drains of 64 with the
 * limit; never without it). */
#define NQUIET 5
#define HOT_POSTED 256
#define HOT_BOUND 4096

static void open_shm(struct tctx *t)
{
	struct fi_info *h = t_hints(FI_MSG | FI_TAGGED);

	free(h->domain_attr->name);
	h->domain_attr->name = strdup("shm");
	cr_assert_eq(t_open_hints(t, h), 0);
}

/* The busy sender: its completions read (its progress moves what waits
 * into its ring as room frees), and sends added until the ring and the
 * engine's queue hold 2048. */
static void hot_top_up(struct tctx *h, fi_addr_t to, uint64_t *sent,
		       uint64_t *done)
{
	static uint64_t v = 1;
	struct fi_cq_tagged_entry e[64];
	ssize_t n;

	while ((n = fi_cq_read(h->cq, e, 64)) > 0)
		*done += (uint64_t)n;
	cr_assert(n == -FI_EAGAIN, "busy sender: %zd", n);
	while (*sent - *done < 2048) {
		n = fi_tsend(h->ep, &v, sizeof(v), NULL, to, 1, NULL);
		if (n == -FI_EAGAIN)
			break;
		cr_assert_eq(n, 0);
		(*sent)++;
	}
}

/* One read of the receiver's completions (one poll, one drain of at most
 * 64 entries); the busy peer's receives posted again. True when the
 * quiet peer's came. */
static bool recv_some(struct tctx *r, uint64_t *qin, uint64_t *hot_got)
{
	struct fi_cq_tagged_entry e[64];
	ssize_t n = fi_cq_read(r->cq, e, 64);
	bool came = false;

	cr_assert(n > 0 || n == -FI_EAGAIN, "receiver: %zd", n);
	for (ssize_t i = 0; i < n; i++) {
		if (e[i].op_context == qin) {
			came = true;
			continue;
		}
		(*hot_got)++;
		cr_assert_eq(fi_trecv(r->ep, e[i].op_context, sizeof(uint64_t),
				      NULL, FI_ADDR_UNSPEC, 1, 0,
				      e[i].op_context), 0);
	}
	return came;
}

Test(peers, a_busy_peer_does_not_starve_the_others, .timeout = 60)
{
	static uint64_t hin[HOT_POSTED];
	struct tctx r, h, q[NQUIET];
	fi_addr_t to_r[NQUIET + 1];
	char name[T_NAMELEN];
	size_t len = sizeof(name);
	uint64_t one = 7, qin = 0, sent = 0, done = 0, hot_got = 0, at;
	struct fi_cq_tagged_entry e;
	bool came = false;
	ssize_t n;

	open_shm(&r);
	open_shm(&h);
	cr_assert_eq(fi_getname(&r.ep->fid, name, &len), 0);
	cr_assert_eq(t_insert(&h, name, &to_r[NQUIET]), 0);
	for (int i = 0; i < NQUIET; i++) {
		open_shm(&q[i]);
		cr_assert_eq(t_insert(&q[i], name, &to_r[i]), 0);
	}
	/* every peer connects with one message (tag 3): six peers, so the
	 * receiver drains by its bitmap; the busy sender's comes last and
	 * alone, which makes its ring the hot one */
	for (int i = 0; i <= NQUIET; i++) {
		struct tctx *t = i < NQUIET ? &q[i] : &h;
		unsigned polls = 0;

		cr_assert_eq(fi_trecv(r.ep, hin, sizeof(hin[0]), NULL,
				      FI_ADDR_UNSPEC, 3, 0, NULL), 0);
		cr_assert_eq(T_RETRY(t, fi_tinject(t->ep, &one, sizeof(one),
						   to_r[i], 3)), 0);
		while ((n = fi_cq_read(r.cq, &e, 1)) == -FI_EAGAIN &&
		       ++polls < 10000000)
			fi_cq_read(t->cq, NULL, 0);
		cr_assert_eq(n, 1, "set-up message %d", i);
	}
	for (int i = 0; i < HOT_POSTED; i++)
		cr_assert_eq(fi_trecv(r.ep, &hin[i], sizeof(hin[0]), NULL,
				      FI_ADDR_UNSPEC, 1, 0, &hin[i]), 0);
	cr_assert_eq(fi_trecv(r.ep, &qin, sizeof(qin), NULL, FI_ADDR_UNSPEC,
			      2, 0, &qin), 0);
	/* the busy peer's ring full and draining before the quiet peer
	 * sends */
	while (hot_got < HOT_POSTED) {
		hot_top_up(&h, to_r[NQUIET], &sent, &done);
		cr_assert(!recv_some(&r, &qin, &hot_got));
	}
	cr_assert_eq(fi_tinject(q[0].ep, &one, sizeof(one), to_r[0], 2), 0);
	at = hot_got;
	while (!came && hot_got - at < HOT_BOUND) {
		hot_top_up(&h, to_r[NQUIET], &sent, &done);
		came = recv_some(&r, &qin, &hot_got);
	}
	cr_assert(came, "the quiet peer's message did not come while %lu of "
		  "the busy peer's did", (unsigned long)(hot_got - at));
	cr_assert_eq(qin, one);
	for (int i = 0; i < NQUIET; i++)
		t_close(&q[i]);
	t_close(&h);
	t_close(&r);
}
