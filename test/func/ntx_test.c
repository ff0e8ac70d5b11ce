/* Helpers of the functional tests (see ntx_test.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

uint64_t t_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct fi_info *t_hints(uint64_t caps)
{
	struct fi_info *h = fi_allocinfo();

	h->fabric_attr->prov_name = strdup("ntx");
	h->domain_attr->name = strdup(getenv("NTX_TEST_DOMAIN")
					      ? getenv("NTX_TEST_DOMAIN") : "shm");
	h->caps = caps;
	h->ep_attr->type = FI_EP_RDM;
	if (getenv("NTX_TEST_THREAD_DOMAIN"))
		h->domain_attr->threading = FI_THREAD_DOMAIN;
	return h;
}

static const uint64_t t_cntr_flags[T_NCNTR] = {
	FI_READ, FI_WRITE, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_SEND, FI_RECV
};

int t_open_cntrs(struct tctx *t, struct fi_info *hints, unsigned cntrs)
{
	return t_open_cq_wait(t, hints, cntrs, FI_WAIT_NONE);
}

int t_open_cq_wait(struct tctx *t, struct fi_info *hints, unsigned cntrs,
		   enum fi_wait_obj cq_wait)
{
	return t_open_with(t, hints, cntrs, cq_wait, NULL);
}

int t_open_with(struct tctx *t, struct fi_info *hints, unsigned cntrs,
		enum fi_wait_obj cq_wait, struct fi_av_attr *av)
{
	struct fi_cq_attr ca = { .format = FI_CQ_FORMAT_TAGGED,
				 .wait_obj = cq_wait };
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP,
				   .wait_obj = FI_WAIT_UNSPEC };
	struct fi_av_attr table = { .type = FI_AV_TABLE };
	struct fi_av_attr *aa = av ? av : &table;
	int ret;

	memset(t, 0, sizeof(*t));
	ret = fi_getinfo(T_VERSION, NULL, NULL, 0, hints, &t->fi);
	fi_freeinfo(hints);
	if (ret)
		return ret;
	if ((ret = fi_fabric(t->fi->fabric_attr, &t->fab, NULL)) ||
	    (ret = fi_domain(t->fab, t->fi, &t->dom, NULL)) ||
	    (ret = fi_cq_open(t->dom, &ca, &t->cq, NULL)) ||
	    (ret = fi_av_open(t->dom, aa, &t->av, NULL)) ||
	    (ret = fi_endpoint(t->dom, t->fi, &t->ep, NULL)) ||
	    (ret = fi_ep_bind(t->ep, &t->av->fid, 0)) ||
	    (ret = fi_ep_bind(t->ep, &t->cq->fid, FI_TRANSMIT | FI_RECV)))
		return ret;
	for (int i = 0; i < T_NCNTR; i++) {
		if (!(cntrs & T_CBIT(i)))
			continue;
		if ((ret = fi_cntr_open(t->dom, &na, &t->c[i], NULL)) ||
		    (ret = fi_ep_bind(t->ep, &t->c[i]->fid, t_cntr_flags[i])))
			return ret;
	}
	return fi_enable(t->ep);
}

int t_open_hints(struct tctx *t, struct fi_info *hints)
{
	return t_open_cntrs(t, hints, 0);
}

int t_open(struct tctx *t, uint64_t caps)
{
	return t_open_hints(t, t_hints(caps));
}

void t_close(struct tctx *t)
{
	if (t->ep)
		fi_close(&t->ep->fid);
	for (int i = 0; i < T_NCNTR; i++)
		if (t->c[i])
			fi_close(&t->c[i]->fid);
	if (t->av)
		fi_close(&t->av->fid);
	if (t->cq)
		fi_close(&t->cq->fid);
	if (t->cntr)
		fi_close(&t->cntr->fid);
	if (t->dom)
		fi_close(&t->dom->fid);
	if (t->fab)
		fi_close(&t->fab->fid);
	if (t->fi)
		fi_freeinfo(t->fi);
	memset(t, 0, sizeof(*t));
}

int t_insert(struct tctx *t, const void *name, fi_addr_t *addr)
{
	return fi_av_insert(t->av, name, 1, addr, 0, NULL) == 1 ? 0 : -FI_EINVAL;
}

int t_wait(struct tctx *t, struct fi_cq_tagged_entry *e, fi_addr_t *src,
	   struct fi_cq_err_entry *err, int timeout_ms)
{
	uint64_t end = t_ms() + (uint64_t)timeout_ms;
	struct fi_cq_tagged_entry tmp;
	fi_addr_t stmp;
	ssize_t n;

	do {
		n = fi_cq_readfrom(t->cq, e ? e : &tmp, 1, src ? src : &stmp);
		if (n == 1)
			return 1;
		if (n == -FI_EAVAIL) {
			struct fi_cq_err_entry etmp = { 0 };

			fi_cq_readerr(t->cq, err ? err : &etmp, 0);
			return -FI_EAVAIL;
		}
	} while (t_ms() < end);
	return -FI_ETIMEDOUT;
}

int t_drain(struct tctx *t, int timeout_ms)
{
	uint64_t end = t_ms() + (uint64_t)timeout_ms;
	struct fi_cq_tagged_entry e;
	int cnt = 0;

	do {
		if (fi_cq_read(t->cq, &e, 1) == 1)
			cnt++;
	} while (t_ms() < end);
	return cnt;
}

/* NTX_TEST_PEER_NETNS names a network namespace (test/hosts): the forked
 * peer enters it, so it is another host to ntx, reached over its network. */
static void t_peer_host(void)
{
	const char *ns = getenv("NTX_TEST_PEER_NETNS");
	int fd;

	if (!ns)
		return;
	fd = open(ns, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET)) {
		fprintf(stderr, "peer: cannot enter %s: %s\n", ns,
			strerror(errno));
		_exit(99);
	}
	close(fd);
}

pid_t t_fork(int *sock, t_child_fn fn)
{
	int sv[2];
	pid_t pid;

	if (getenv("NTX_TEST_PEER_REMOTE") || getenv("NTX_TEST_PEER_BACK"))
		return t_remote_fork(sock, fn);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		t_peer_host();
		_exit(fn(sv[1]));
	}
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

int t_join(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int t_xchg_name(struct tctx *t, int sock, fi_addr_t *peer)
{
	char mine[T_NAMELEN], theirs[T_NAMELEN];
	size_t len = sizeof(mine);

	if (fi_getname(&t->ep->fid, mine, &len) || len != T_NAMELEN)
		return -1;
	if (write(sock, mine, len) != (ssize_t)len ||
	    read(sock, theirs, len) != (ssize_t)len)
		return -1;
	return t_insert(t, theirs, peer);
}

int t_sync_progress(struct tctx *t, int sock, int timeout_ms)
{
	uint64_t end = t_ms() + (uint64_t)timeout_ms;
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct fi_cq_tagged_entry e;
	char c = 's';

	if (write(sock, &c, 1) != 1)
		return -1;
	do {
		if (fi_cq_read(t->cq, &e, 1) == 1)
			return -2; /* nothing may complete meanwhile */
		if (poll(&p, 1, 0) == 1)
			return read(sock, &c, 1) == 1 ? 0 : -1;
	} while (t_ms() < end);
	return -FI_ETIMEDOUT;
}

int t_sock_read(int sock, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(sock, (char *)buf + got, len - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "t_sock_read: %zd after %zu of %zu: %s\n",
				n, got, len, n ? strerror(errno) : "EOF");
			return -1;
		}
		got += (size_t)n;
	}
	return 0;
}

int t_sock_write(int sock, const void *buf, size_t len)
{
	size_t put = 0;

	while (put < len) {
		ssize_t n = write(sock, (const char *)buf + put, len - put);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "t_sock_write: %zd after %zu of %zu: %s\n",
				n, put, len, strerror(errno));
			return -1;
		}
		put += (size_t)n;
	}
	return 0;
}

bool t_local_via_network(void)
{
	const char *v = getenv("FI_NTX_LOCAL_VIA_NETWORK");

	return v && strcmp(v, "0");
}

int t_sync(int sock)
{
	char c = 's';

	return write(sock, &c, 1) == 1 && read(sock, &c, 1) == 1 ? 0 : -1;
}

void t_fill(void *buf, size_t len, unsigned seed)
{
	unsigned char *b = buf;

	for (size_t i = 0; i < len; i++)
		b[i] = (unsigned char)(seed * 131 + i * 7 + (i >> 9));
}

size_t t_check(const void *buf, size_t len, unsigned seed)
{
	const unsigned char *b = buf;
	size_t bad = 0;

	for (size_t i = 0; i < len; i++)
		bad += b[i] != (unsigned char)(seed * 131 + i * 7 + (i >> 9));
	return bad;
}

/* ---- one-sided tests: the target ------------------------------------------ */

#define T_GUARD 4096
#define T_GUARD_BYTE 0xee

struct t_tgt_cfg t_tgt = {
	.mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR,
	.caps = T_RMA_CAPS,
	.len = 1u << 20,
	.nmr = 1,
	.niov = 1,
	.access = { FI_REMOTE_READ | FI_REMOTE_WRITE,
		    FI_REMOTE_READ | FI_REMOTE_WRITE,
		    FI_REMOTE_READ | FI_REMOTE_WRITE,
		    FI_REMOTE_READ | FI_REMOTE_WRITE },
	.key = 0x100,
	.ini_cntrs = T_CBIT(T_C_READ) | T_CBIT(T_C_WRITE),
	.tgt_cntrs = T_CBIT(T_C_RREAD) | T_CBIT(T_C_RWRITE),
};

/* A region of target memory: niov pieces with guard bytes around each. */
struct t_region {
	uint8_t *mem;
	size_t total;
	int niov;
	struct iovec iov[8];
	struct fid_mr *mr;
};

static unsigned char t_pat(uint64_t seed, uint64_t i)
{
	return (unsigned char)(seed * 131 + i * 7 + (i >> 9));
}

struct fi_info *t_hints_mr(uint64_t caps, uint64_t mr_mode)
{
	struct fi_info *h = t_hints(caps);

	h->domain_attr->mr_mode = (int)mr_mode;
	/* the one-sided tests use up to 8 iovecs: more than fi_info's
	 * default (4), so they ask for them */
	h->tx_attr->iov_limit = h->tx_attr->rma_iov_limit = 8;
	h->rx_attr->iov_limit = 8;
	return h;
}

static int t_region_alloc(struct t_region *r, size_t len, int niov)
{
	size_t plen = len / (size_t)niov;
	size_t stride = ((plen + len % (size_t)niov + 4095) & ~(size_t)4095) +
			T_GUARD;
	uint8_t *p;

	r->niov = niov;
	r->total = T_GUARD + stride * (size_t)niov;
	r->mem = aligned_alloc(4096, r->total);
	if (!r->mem)
		return -1;
	memset(r->mem, T_GUARD_BYTE, r->total);
	p = r->mem + T_GUARD;
	for (int k = 0; k < niov; k++, p += stride) {
		r->iov[k].iov_base = p;
		r->iov[k].iov_len = k == niov - 1 ? len - plen * (size_t)k : plen;
	}
	return 0;
}

/* Pointer to byte off of the concatenation and how many follow it in the
 * same piece; 0 beyond the end. */
static size_t t_region_span(struct t_region *r, uint64_t off, uint8_t **p)
{
	for (int k = 0; k < r->niov; k++) {
		if (off < r->iov[k].iov_len) {
			*p = (uint8_t *)r->iov[k].iov_base + off;
			return r->iov[k].iov_len - off;
		}
		off -= r->iov[k].iov_len;
	}
	return 0;
}

/* Applies pattern (fill) or compares with it (returns differing bytes);
 * copy in/out when buf is given. */
static uint64_t t_region_walk(struct t_region *r, uint64_t off, uint64_t len,
			      int what, uint64_t seed, uint64_t base,
			      uint8_t *buf)
{
	uint64_t bad = 0, done = 0;

	while (done < len) {
		uint8_t *p;
		size_t n = t_region_span(r, off + done, &p);

		if (!n)
			return bad + (len - done); /* beyond the region */
		if (n > len - done)
			n = (size_t)(len - done);
		for (size_t i = 0; i < n; i++) {
			uint64_t idx = done + i;

			if (what == T_FILL)
				p[i] = t_pat(seed, base + idx);
			else if (what == T_CHECK)
				bad += p[i] != t_pat(seed, base + idx);
			else if (what == T_GET)
				buf[idx] = p[i];
			else
				p[i] = buf[idx];
		}
		done += n;
	}
	return bad;
}

static uint64_t t_region_guard_bad(struct t_region *r)
{
	uint64_t bad = 0;
	uint8_t *p = r->mem;

	for (int k = 0; k <= r->niov; k++) {
		uint8_t *end = k < r->niov ? r->iov[k].iov_base
					   : r->mem + r->total;

		for (; p < end; p++)
			bad += *p != T_GUARD_BYTE;
		if (k < r->niov)
			p = (uint8_t *)r->iov[k].iov_base + r->iov[k].iov_len;
	}
	return bad;
}

static int t_region_reg(struct tctx *t, struct t_region *r, int i,
			uint64_t key, struct fid_cntr *mc, uint64_t *addr)
{
	bool ev = mc && i == 0, defer = t_tgt.unbound && i == 0;
	uint64_t mode = t->fi->domain_attr->mr_mode;
	int ret;

	if (r->niov == 1)
		ret = fi_mr_reg(t->dom, r->iov[0].iov_base, r->iov[0].iov_len,
				t_tgt.access[i], t_tgt.offset, key,
				ev ? FI_RMA_EVENT : 0, &r->mr, NULL);
	else
		ret = fi_mr_regv(t->dom, r->iov, (size_t)r->niov,
				 t_tgt.access[i], t_tgt.offset, key,
				 ev ? FI_RMA_EVENT : 0, &r->mr, NULL);
	if (ret)
		return ret;
	if ((mode & FI_MR_ENDPOINT) && !defer &&
	    (ret = fi_mr_bind(r->mr, &t->ep->fid, 0)))
		return ret;
	if (ev && (ret = fi_mr_bind(r->mr, &mc->fid, FI_REMOTE_WRITE)))
		return ret;
	if (((mode & FI_MR_ENDPOINT) || ev) && !defer &&
	    (ret = fi_mr_enable(r->mr)))
		return ret;
	*addr = mode & FI_MR_VIRT_ADDR ? (uint64_t)(uintptr_t)r->iov[0].iov_base
				       : t_tgt.offset;
	return 0;
}

static void t_tgt_record(struct tctx *t, struct t_tgt_stat *st)
{
	struct fi_cq_tagged_entry e;
	ssize_t n = fi_cq_read(t->cq, &e, 1);

	if (n == 1) {
		if (st->ncq < T_TGT_NCQ)
			st->cq[st->ncq] = (struct t_tgt_cq){
				e.flags, e.len, e.data,
				(uint64_t)(uintptr_t)e.op_context };
		st->ncq++;
	} else if (n == -FI_EAVAIL) {
		struct fi_cq_err_entry err = { 0 };

		fi_cq_readerr(t->cq, &err, 0);
		st->ncqerr++;
	}
}

static uint64_t t_cntr_val(struct fid_cntr *c)
{
	return c ? fi_cntr_read(c) : 0;
}

static void t_tgt_fill_stat(struct tctx *t, struct fid_cntr *mc,
			    struct t_region *reg, struct t_tgt_stat *st)
{
	st->rread = t_cntr_val(t->c[T_C_RREAD]);
	st->rwrite = t_cntr_val(t->c[T_C_RWRITE]);
	st->recv = t_cntr_val(t->c[T_C_RECV]);
	st->mr_cntr = t_cntr_val(mc);
	st->guard_bad = 0;
	for (int i = 0; i < t_tgt.nmr; i++)
		st->guard_bad += t_region_guard_bad(&reg[i]);
}

/* Answers one command: -1 on T_QUIT, 0, or the failing line. */
static int t_tgt_cmd(struct tctx *t, int sock, struct t_region *reg,
		     struct fid_cntr *mc, struct t_tgt_stat *st)
{
	static uint64_t rbuf[1];
	struct t_cmd c;
	struct t_region *r;
	uint64_t v[2];
	int ret;

	if (t_sock_read(sock, &c, sizeof(c)))
		return -1; /* the initiator is gone (it failed): just leave */
	if (c.op == T_QUIT)
		return -1;
	CHK(c.mr < (uint32_t)t_tgt.nmr);
	r = &reg[c.mr];
	switch (c.op) {
	case T_STAT: {
		uint64_t end = t_ms() + T_WAIT_MS;

		do {
			t_tgt_record(t, st);
			t_tgt_fill_stat(t, mc, reg, st);
		} while ((st->rread < c.want_rread ||
			  st->rwrite < c.want_rwrite || st->ncq < c.want_cq) &&
			 t_ms() < end);
		CHK(t_sock_write(sock, st, sizeof(*st)) == 0);
		memset(st, 0, sizeof(*st));
		return 0;
	}
	case T_CHECK:
		v[0] = t_region_walk(r, c.off, c.len, T_CHECK, c.seed, c.base,
				     NULL);
		CHK(t_sock_write(sock, v, 8) == 0);
		return 0;
	case T_FILL:
		t_region_walk(r, c.off, c.len, T_FILL, c.seed, c.base, NULL);
		break;
	case T_GET:
	case T_PUT: {
		uint8_t *b = malloc(c.len ? c.len : 1);

		CHK(b);
		if (c.op == T_PUT)
			CHK(t_sock_read(sock, b, c.len) == 0);
		CHK(t_region_walk(r, c.off, c.len, c.op, 0, 0, b) == 0);
		if (c.op == T_GET)
			CHK(t_sock_write(sock, b, c.len) == 0);
		free(b);
		if (c.op == T_GET)
			return 0;
		break;
	}
	case T_CLOSE:
		CHK(r->mr && fi_close(&r->mr->fid) == 0);
		r->mr = NULL;
		break;
	case T_REG:
		CHK(!r->mr);
		CHK(t_region_reg(t, r, (int)c.mr, t_tgt.key + c.seed, mc,
				 &v[1]) == 0);
		v[0] = fi_mr_key(r->mr);
		CHK(t_sock_write(sock, v, 16) == 0);
		return 0;
	case T_BIND:
	case T_ENABLE:
		ret = c.op == T_BIND ? fi_mr_bind(r->mr, &t->ep->fid, 0)
				     : fi_mr_enable(r->mr);
		CHK(t_sock_write(sock, &ret, sizeof(ret)) == 0);
		return 0;
	case T_RECV:
		for (uint64_t i = 0; i < c.len; i++)
			CHK(fi_recv(t->ep, rbuf, 8, NULL, FI_ADDR_UNSPEC,
				    NULL) == 0);
		break;
	default:
		CHK(0);
	}
	CHK(write(sock, "a", 1) == 1);
	return 0;
}

/* The forked target: sets up, then drives progress (fi_cq_read) until a
 * command arrives on the socket. */
static int t_tgt_main(int sock)
{
	static struct t_region reg[T_TGT_MAXMR];
	struct fi_cntr_attr na = { .events = FI_CNTR_EVENTS_COMP,
				   .wait_obj = FI_WAIT_UNSPEC };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	struct t_tgt_info ti;
	struct t_tgt_stat st;
	struct fid_cntr *mc = NULL;
	struct tctx t;
	size_t len = T_NAMELEN;
	int ret;

	memset(&ti, 0, sizeof(ti));
	memset(&st, 0, sizeof(st));
	CHK(t_tgt.nmr >= 1 && t_tgt.nmr <= T_TGT_MAXMR);
	CHK(t_open_cntrs(&t, t_hints_mr(t_tgt.caps, t_tgt.mr_mode),
			 t_tgt.tgt_cntrs) == 0);
	if (t_tgt.mr_cntr)
		CHK(fi_cntr_open(t.dom, &na, &mc, NULL) == 0);
	for (int i = 0; i < t_tgt.nmr; i++) {
		CHK(t_region_alloc(&reg[i], t_tgt.len, t_tgt.niov) == 0);
		t_region_walk(&reg[i], 0, t_tgt.len, T_FILL, 100 + (unsigned)i,
			      0, NULL);
		CHK(t_region_reg(&t, &reg[i], i, t_tgt.key + (uint64_t)i, mc,
				 &ti.addr[i]) == 0);
		ti.key[i] = fi_mr_key(reg[i].mr);
	}
	CHK(fi_getname(&t.ep->fid, ti.name, &len) == 0);
	CHK(t_sock_write(sock, &ti, sizeof(ti)) == 0);
	for (;;) {
		t_tgt_record(&t, &st);
		if (poll(&p, 1, 0) != 1)
			continue;
		ret = t_tgt_cmd(&t, sock, reg, mc, &st);
		if (ret < 0)
			break;
		if (ret)
			return ret;
	}
	for (int i = 0; i < t_tgt.nmr; i++) {
		if (reg[i].mr)
			CHK(fi_close(&reg[i].mr->fid) == 0);
		free(reg[i].mem);
	}
	fi_close(&t.ep->fid);
	t.ep = NULL;
	if (mc)
		fi_close(&mc->fid);
	t_close(&t);
	return 0;
}

/* ---- one-sided tests: the initiator --------------------------------------- */

int t_ini_start(struct t_ini *in)
{
	int ret;

	memset(in, 0, sizeof(*in));
	in->pid = t_fork(&in->sock, t_tgt_main);
	if (in->pid <= 0)
		return -1;
	ret = t_open_cntrs(&in->t, t_hints_mr(t_tgt.caps, t_tgt.mr_mode),
			   t_tgt.ini_cntrs);
	if (ret)
		return ret;
	if (t_sock_read(in->sock, &in->ti, sizeof(in->ti)))
		return -2;
	return t_insert(&in->t, in->ti.name, &in->peer);
}

int t_ini_stop(struct t_ini *in)
{
	struct t_cmd c = { .op = T_QUIT };
	int ret;

	if (t_sock_write(in->sock, &c, sizeof(c)))
		return -1;
	ret = t_join(in->pid);
	close(in->sock);
	t_close(&in->t);
	return ret;
}

int t_ini_cmd(struct t_ini *in, const struct t_cmd *c, void *reply,
	      size_t rlen)
{
	char ack;

	if (t_sock_write(in->sock, c, sizeof(*c)))
		return -1;
	if (!reply)
		return read(in->sock, &ack, 1) == 1 && ack == 'a' ? 0 : -1;
	return t_sock_read(in->sock, reply, rlen);
}

uint64_t t_ini_check(struct t_ini *in, uint32_t mr, uint64_t off,
		     uint64_t len, unsigned seed, uint64_t base)
{
	struct t_cmd c = { .op = T_CHECK, .mr = mr, .off = off, .len = len,
			   .seed = seed, .base = base };
	uint64_t bad;

	return t_ini_cmd(in, &c, &bad, 8) ? UINT64_MAX : bad;
}

int t_ini_stat(struct t_ini *in, uint64_t want_rread, uint64_t want_rwrite,
	       uint64_t want_cq, struct t_tgt_stat *st)
{
	struct t_cmd c = { .op = T_STAT, .want_rread = want_rread,
			   .want_rwrite = want_rwrite, .want_cq = want_cq };

	return t_ini_cmd(in, &c, st, sizeof(*st));
}

int t_ini_done(struct t_ini *in, void *ctx, uint64_t *flags)
{
	struct fi_cq_tagged_entry e;
	struct fi_cq_err_entry err;
	int ret;

	memset(&err, 0, sizeof(err));
	ret = t_wait(&in->t, &e, NULL, &err, T_WAIT_MS);
	if (ret == -FI_EAVAIL) {
		if (flags)
			*flags = err.flags;
		return err.op_context == ctx && err.err > 0 ? err.err
							    : -FI_EOTHER;
	}
	if (ret != 1)
		return ret;
	if (flags)
		*flags = e.flags;
	return e.op_context == ctx ? 0 : -FI_EOTHER;
}

const char *t_dgram_domain(void)
{
	const char *d = getenv("NTX_TEST_DGRAM_DOMAIN");

	return d && *d ? d : "udp";
}

int t_free_service(char *svc, size_t n, int lo, int span)
{
	for (int k = 0; k < 100; k++) {
		int port = lo + (int)((getpid() + k * 7919) % span);
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons((uint16_t)port) };
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		bool free_now = fd >= 0 &&
				!bind(fd, (struct sockaddr *)&a, sizeof(a));

		if (fd >= 0)
			close(fd);
		if (free_now) {
			snprintf(svc, n, "%d", port);
			return 0;
		}
	}
	return -1;
}
