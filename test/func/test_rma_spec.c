/*
 * RMA through the public API, checked against the ntx one-sided spec
 * (not against the implementation): every size on each path, 8 iovecs,
 * remote CQ data and injects, counters, MR modes and keys, the bad-input
 * table and FI_FENCE. The target is the forked server of ntx_test.c.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ntx_test.h"

#define MIB (1u << 20)
/* the mr_mode bits ntx takes when offered (FI_MR_ENDPOINT never: keys
 * are the domain's) */
#define MR_MODES (FI_MR_PROV_KEY | FI_MR_VIRT_ADDR)

/* "shm" (default), "nocma" (shm without single copy) or "tcp" (the tcp
 * domain with local peers forced through the network); before the
 * provider loads. */
static void use_path(const char *path)
{
	if (!strcmp(path, "nocma"))
		setenv("FI_NTX_SHM_CMA", "0", 1);
	if (!strcmp(path, "tcp")) {
		setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
		setenv("NTX_TEST_DOMAIN", "tcp", 1);
	}
}

static void start(struct t_ini *in)
{
	cr_assert_eq(t_ini_start(in), 0, "target and initiator set up");
}

static void stop(struct t_ini *in)
{
	int st = t_ini_stop(in);

	cr_assert_eq(st, 0, "target failed (exit %d = its line & 0x7f)", st);
}

static struct fid_cntr *cntr(struct t_ini *in, int c)
{
	return in->t.c[c];
}

static void done_ok(struct t_ini *in, void *ctx, uint64_t flags,
		    const char *what)
{
	uint64_t fl = 0;
	int ret = t_ini_done(in, ctx, &fl);

	cr_assert_eq(ret, 0, "%s: completion: got %d (%s)", what, ret,
		     fi_strerror(ret < 0 ? -ret : ret));
	cr_assert_eq(fl, flags, "%s: completion flags %#llx, want %#llx", what,
		     (unsigned long long)fl, (unsigned long long)flags);
}

static void tgt_stat(struct t_ini *in, uint64_t rread, uint64_t rwrite,
		 uint64_t cq, struct t_tgt_stat *st)
{
	cr_assert_eq(t_ini_stat(in, rread, rwrite, cq, st), 0);
}

static void fill_tgt(struct t_ini *in, uint32_t mr, uint64_t off,
		     uint64_t len, unsigned seed, uint64_t base)
{
	struct t_cmd c = { .op = T_FILL, .mr = mr, .off = off, .len = len,
			   .seed = seed, .base = base };

	cr_assert_eq(t_ini_cmd(in, &c, NULL, 0), 0);
}

/* Region mr still holds what the target put there at the start. */
static uint64_t untouched(struct t_ini *in, uint32_t mr, uint64_t off,
			  uint64_t len)
{
	return t_ini_check(in, mr, off, len, 100 + mr, off);
}

/* The error count reaches want (bounded wait): an error completion may
 * be read a moment before its counter moves. */
static uint64_t wait_err(struct fid_cntr *c, uint64_t want)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		fi_cntr_read(c); /* drives progress */
		if (fi_cntr_readerr(c) >= want)
			break;
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000 < T_WAIT_MS);
	return fi_cntr_readerr(c);
}

static uint64_t wait_cntr(struct fid_cntr *c, uint64_t want)
{
	fi_cntr_wait(c, want, T_WAIT_MS);
	return fi_cntr_read(c);
}

/* ---- getinfo ------------------------------------------------------------- */

Test(rma_spec, getinfo_caps_order_and_limits, .timeout = 30)
{
	static const char *doms[] = { "shm", "tcp" };
	uint64_t order = FI_ORDER_RAW | FI_ORDER_WAR | FI_ORDER_WAW |
			 FI_ORDER_SAW | FI_ORDER_SAS;

	for (int i = 0; i < 2; i++) {
		struct fi_info *h = t_hints_mr(T_RMA_CAPS, FI_MR_PROV_KEY), *fi;

		free(h->domain_attr->name);
		h->domain_attr->name = strdup(doms[i]);
		h->tx_attr->msg_order = order;
		cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0,
			     "domain %s", doms[i]);
		cr_assert_eq(fi->caps & T_RMA_CAPS, T_RMA_CAPS, "%s", doms[i]);
		cr_assert_eq(fi->tx_attr->msg_order & order, order,
			     "%s: msg_order %#llx", doms[i],
			     (unsigned long long)fi->tx_attr->msg_order);
		cr_assert_geq(fi->tx_attr->rma_iov_limit, 8, "%s", doms[i]);
		cr_assert_geq(fi->tx_attr->iov_limit, 8, "%s", doms[i]);
		cr_assert_str_eq(fi->domain_attr->name, doms[i]);
		fi_freeinfo(fi);
		fi_freeinfo(h);
	}
}

Test(rma_spec, getinfo_mr_mode_is_what_was_offered_and_useful, .timeout = 30)
{
	static const uint64_t offered[] = {
		0,
		FI_MR_PROV_KEY,
		FI_MR_VIRT_ADDR,
		FI_MR_ENDPOINT,
		FI_MR_PROV_KEY | FI_MR_VIRT_ADDR,
		FI_MR_LOCAL | FI_MR_ALLOCATED,
		FI_MR_VIRT_ADDR | FI_MR_LOCAL | FI_MR_RAW,
		FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | FI_MR_ENDPOINT |
			FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_RAW |
			FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT,
	};

	for (size_t i = 0; i < sizeof(offered) / sizeof(offered[0]); i++) {
		struct fi_info *h = t_hints_mr(T_RMA_CAPS, offered[i]), *fi;

		cr_assert_eq(fi_getinfo(T_VERSION, NULL, NULL, 0, h, &fi), 0,
			     "offered %#llx", (unsigned long long)offered[i]);
		for (struct fi_info *f = fi; f; f = f->next)
			cr_assert_eq((uint64_t)f->domain_attr->mr_mode,
				     offered[i] & MR_MODES,
				     "offered %#llx got %#llx",
				     (unsigned long long)offered[i],
				     (unsigned long long)f->domain_attr->mr_mode);
		fi_freeinfo(fi);
		fi_freeinfo(h);
	}
}

/* ---- every size ---------------------------------------------------------- */

static const size_t sizes[] = { 1,     7,      64,       4095,
				4096,  4097,   65535,    65536,
				262145, MIB + 3, 4 * MIB, 16 * MIB };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void post_write(struct t_ini *in, int form, void *buf, size_t len,
		       uint64_t ra, uint64_t key, void *ctx, uint64_t flags)
{
	struct iovec iov = { buf, len };
	struct fi_rma_iov riov = { ra, len, key };
	struct fi_msg_rma m = { .msg_iov = &iov, .iov_count = 1,
				.addr = in->peer, .rma_iov = &riov,
				.rma_iov_count = 1, .context = ctx };
	ssize_t r;

	if (form == 0)
		r = T_RETRY(&in->t, fi_write(in->t.ep, buf, len, NULL, in->peer,
					     ra, key, ctx));
	else if (form == 1)
		r = T_RETRY(&in->t, fi_writev(in->t.ep, &iov, NULL, 1, in->peer,
					      ra, key, ctx));
	else
		r = T_RETRY(&in->t, fi_writemsg(in->t.ep, &m,
						FI_COMPLETION | flags));
	cr_assert_eq(r, 0, "write form %d of %zu bytes posted", form, len);
}

static void post_read(struct t_ini *in, int form, void *buf, size_t len,
		      uint64_t ra, uint64_t key, void *ctx, uint64_t flags)
{
	struct iovec iov = { buf, len };
	struct fi_rma_iov riov = { ra, len, key };
	struct fi_msg_rma m = { .msg_iov = &iov, .iov_count = 1,
				.addr = in->peer, .rma_iov = &riov,
				.rma_iov_count = 1, .context = ctx };
	ssize_t r;

	if (form == 0)
		r = T_RETRY(&in->t, fi_read(in->t.ep, buf, len, NULL, in->peer,
					    ra, key, ctx));
	else if (form == 1)
		r = T_RETRY(&in->t, fi_readv(in->t.ep, &iov, NULL, 1, in->peer,
					     ra, key, ctx));
	else
		r = T_RETRY(&in->t, fi_readmsg(in->t.ep, &m,
					       FI_COMPLETION | flags));
	cr_assert_eq(r, 0, "read form %d of %zu bytes posted", form, len);
}

static void sizes_test(const char *path)
{
	struct t_ini in;
	uint8_t *src = malloc(16 * MIB), *dst = malloc(16 * MIB + 1);
	uint64_t n = 0;
	struct t_tgt_stat st;
	uint8_t z = 0x5a;

	cr_assert(src && dst);
	use_path(path);
	t_tgt.len = 16 * MIB + 8192;
	t_tgt.mr_cntr = true;
	start(&in);
	for (size_t i = 0; i < NSIZES; i++) {
		size_t len = sizes[i];
		uint64_t off = 4096 - 1 - i, ra = in.ti.addr[0] + off;
		unsigned seed = 20 + (unsigned)i;
		int form = (int)(i % 3);

		/* the initial pattern around the target range */
		fill_tgt(&in, 0, off - 64, len + 128, 100, off - 64);
		t_fill(src, len, seed);
		post_write(&in, form, src, len, ra, in.ti.key[0], src,
			   form == 2 ? FI_DELIVERY_COMPLETE : 0);
		done_ok(&in, src, FI_RMA | FI_WRITE, "write");
		if (form == 2)
			cr_assert_eq(t_ini_check(&in, 0, off, len, seed, 0), 0,
				     "FI_DELIVERY_COMPLETE: %zu bytes in target "
				     "memory at completion", len);
		memset(dst, 0xa5, len + 1);
		post_read(&in, 2 - form, dst, len, ra, in.ti.key[0], dst, 0);
		done_ok(&in, dst, FI_RMA | FI_READ, "read");
		cr_assert_eq(t_check(dst, len, seed), 0, "read back %zu bytes",
			     len);
		cr_assert_eq(dst[len], 0xa5, "read of %zu wrote past it", len);
		cr_assert_eq(t_ini_check(&in, 0, off, len, seed, 0), 0,
			     "%zu bytes in target memory", len);
		cr_assert_eq(t_ini_check(&in, 0, off - 64, 64, 100, off - 64),
			     0, "bytes before a write of %zu unchanged", len);
		cr_assert_eq(t_ini_check(&in, 0, off + len, 64, 100,
					 off + len),
			     0, "bytes after a write of %zu unchanged", len);
		n++;
	}
	tgt_stat(&in, n, n, 0, &st);
	cr_assert_eq(st.rwrite, n, "target remote-write counter");
	cr_assert_eq(st.rread, n, "target remote-read counter");
	cr_assert_eq(st.mr_cntr, n, "FI_RMA_EVENT counter bound to the MR");
	cr_assert_eq(st.ncq, 0, "plain writes and reads: no target CQ entry");
	cr_assert_eq(st.ncqerr, 0);
	cr_assert_eq(st.guard_bad, 0, "target memory outside the MR intact");
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_WRITE)), n);
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_READ)), n);
	cr_assert_eq(fi_cntr_readerr(cntr(&in, T_C_WRITE)), 0);
	cr_assert_eq(fi_cntr_readerr(cntr(&in, T_C_READ)), 0);
	/* 0 bytes: completes, moves nothing */
	post_write(&in, 0, &z, 0, in.ti.addr[0] + 5, in.ti.key[0], &z, 0);
	done_ok(&in, &z, FI_RMA | FI_WRITE, "0-byte write");
	post_read(&in, 0, &z, 0, in.ti.addr[0] + 5, in.ti.key[0], &z, 0);
	done_ok(&in, &z, FI_RMA | FI_READ, "0-byte read");
	cr_assert_eq(z, 0x5a, "0-byte read moved a byte");
	stop(&in);
	free(src);
	free(dst);
}

Test(rma_spec, sizes_shm, .timeout = 180)
{
	sizes_test("shm");
}

Test(rma_spec, sizes_shm_without_cma, .timeout = 180)
{
	sizes_test("nocma");
}

Test(rma_spec, sizes_tcp, .timeout = 180)
{
	sizes_test("tcp");
}

/* ---- 8 local and 8 remote iovecs ----------------------------------------- */

/* Splits total into 8 nonzero pieces by weights. */
static void split8(size_t total, const unsigned *w, size_t *len)
{
	unsigned sum = 0;
	size_t done = 0;

	for (int k = 0; k < 8; k++)
		sum += w[k];
	for (int k = 0; k < 7; k++) {
		len[k] = total * w[k] / sum;
		done += len[k];
	}
	len[7] = total - done;
}

static void iov_test(const char *path, size_t total)
{
	static const unsigned wl[8] = { 1, 7, 2, 9, 3, 5, 4, 1 };
	static const unsigned wr[8] = { 5, 1, 3, 2, 8, 1, 6, 2 };
	static const unsigned wb[8] = { 2, 2, 9, 1, 1, 4, 3, 6 };
	size_t ll[8], rl[8], bl[8], pos;
	uint64_t roff[8], rpos[8];
	uint8_t *s = malloc(total), *back = malloc(total), *lb[8], *bb[8];
	struct iovec iov[8];
	struct fi_rma_iov riov[8];
	struct fi_msg_rma m = { .msg_iov = iov, .iov_count = 8,
				.rma_iov = riov, .rma_iov_count = 8 };
	struct t_ini in;
	struct t_tgt_stat st;

	use_path(path);
	t_tgt.len = total + 9 * 4096;
	start(&in);
	cr_assert_geq(in.t.fi->tx_attr->rma_iov_limit, 8);
	cr_assert_geq(in.t.fi->tx_attr->iov_limit, 8);
	t_fill(s, total, 7);
	split8(total, wl, ll);
	split8(total, wr, rl);
	split8(total, wb, bl);
	pos = 0;
	for (int k = 0; k < 8; k++) {
		lb[k] = malloc(ll[k]);
		memcpy(lb[k], s + pos, ll[k]);
		iov[k] = (struct iovec){ lb[k], ll[k] };
		pos += ll[k];
	}
	/* remote pieces out of order, with gaps of odd sizes between them */
	pos = 0;
	for (int k = 0; k < 8; k++) {
		rpos[k] = pos;
		pos += rl[k];
	}
	{
		uint64_t at = 1001;
		static const int order[8] = { 3, 0, 7, 5, 1, 6, 2, 4 };

		for (int j = 0; j < 8; j++) {
			int k = order[j];

			roff[k] = at;
			at += rl[k] + 1000 + (uint64_t)j * 7;
		}
		cr_assert_leq(at, t_tgt.len);
	}
	for (int k = 0; k < 8; k++)
		riov[k] = (struct fi_rma_iov){ in.ti.addr[0] + roff[k], rl[k],
					       in.ti.key[0] };
	m.addr = in.peer;
	m.context = s;
	cr_assert_eq(T_RETRY(&in.t, fi_writemsg(in.t.ep, &m, FI_COMPLETION |
						FI_DELIVERY_COMPLETE)), 0);
	done_ok(&in, s, FI_RMA | FI_WRITE, "writemsg of 8 x 8 iovecs");
	for (int k = 0; k < 8; k++) {
		cr_assert_eq(t_ini_check(&in, 0, roff[k], rl[k], 7, rpos[k]), 0,
			     "remote piece %d (%zu bytes)", k, rl[k]);
		cr_assert_eq(untouched(&in, 0, roff[k] + rl[k], 1000), 0,
			     "gap after remote piece %d unchanged", k);
	}
	cr_assert_eq(untouched(&in, 0, 0, 1001), 0);
	/* read the same remote pieces into a third split */
	pos = 0;
	for (int k = 0; k < 8; k++) {
		bb[k] = malloc(bl[k]);
		memset(bb[k], 0, bl[k]);
		iov[k] = (struct iovec){ bb[k], bl[k] };
	}
	m.context = back;
	cr_assert_eq(T_RETRY(&in.t, fi_readmsg(in.t.ep, &m, FI_COMPLETION)), 0);
	done_ok(&in, back, FI_RMA | FI_READ, "readmsg of 8 x 8 iovecs");
	for (int k = 0; k < 8; k++) {
		memcpy(back + pos, bb[k], bl[k]);
		pos += bl[k];
	}
	cr_assert_eq(t_check(back, total, 7), 0, "read back through 8 iovecs");
	/* writev/readv: 8 local iovecs, one remote range */
	t_fill(s, total, 8);
	pos = 0;
	for (int k = 0; k < 8; k++) {
		memcpy(lb[k], s + pos, ll[k]);
		iov[k] = (struct iovec){ lb[k], ll[k] };
		pos += ll[k];
	}
	cr_assert_eq(T_RETRY(&in.t, fi_writev(in.t.ep, iov, NULL, 8, in.peer,
					      in.ti.addr[0] + 3, in.ti.key[0],
					      iov)), 0);
	done_ok(&in, iov, FI_RMA | FI_WRITE, "writev of 8 iovecs");
	for (int k = 0; k < 8; k++) {
		memset(bb[k], 0, bl[k]);
		iov[k] = (struct iovec){ bb[k], bl[k] };
	}
	cr_assert_eq(T_RETRY(&in.t, fi_readv(in.t.ep, iov, NULL, 8, in.peer,
					     in.ti.addr[0] + 3, in.ti.key[0],
					     bb)), 0);
	done_ok(&in, bb, FI_RMA | FI_READ, "readv of 8 iovecs");
	pos = 0;
	for (int k = 0; k < 8; k++) {
		memcpy(back + pos, bb[k], bl[k]);
		pos += bl[k];
	}
	cr_assert_eq(t_check(back, total, 8), 0, "readv back");
	cr_assert_eq(t_ini_check(&in, 0, 3, total, 8, 0), 0);
	tgt_stat(&in, 2, 2, 0, &st);
	cr_assert_eq(st.rwrite, 2, "one counted remote write per writemsg");
	cr_assert_eq(st.rread, 2);
	cr_assert_eq(st.guard_bad, 0);
	stop(&in);
	for (int k = 0; k < 8; k++) {
		free(lb[k]);
		free(bb[k]);
	}
	free(s);
	free(back);
}

Test(rma_spec, iov8_small_shm, .timeout = 60)
{
	iov_test("shm", 1000);
}

Test(rma_spec, iov8_large_shm, .timeout = 60)
{
	iov_test("shm", 3 * MIB + 5);
}

Test(rma_spec, iov8_large_shm_without_cma, .timeout = 60)
{
	iov_test("nocma", 3 * MIB + 5);
}

Test(rma_spec, iov8_small_tcp, .timeout = 60)
{
	iov_test("tcp", 1000);
}

Test(rma_spec, iov8_large_tcp, .timeout = 60)
{
	iov_test("tcp", 3 * MIB + 5);
}

/* ---- remote CQ data, injects --------------------------------------------- */

static void cq_data_test(const char *path)
{
	uint8_t a[16], b[24], c[8], d[40], e1[300], e2[700];
	struct iovec iov[2] = { { e1, 300 }, { e2, 700 } };
	struct fi_rma_iov riov[2];
	struct fi_msg_rma m = { .msg_iov = iov, .iov_count = 2, .rma_iov = riov,
				.rma_iov_count = 2, .context = e1 };
	uint64_t mask, dat[3];
	uint64_t want_len[3] = { 24, 40, 1000 };
	bool seen[3] = { false };
	struct t_ini in;
	struct t_tgt_stat st;
	struct fi_cq_tagged_entry e;
	void *ctx[3] = { a, b, e1 };
	bool got[3] = { false };

	use_path(path);
	start(&in);
	cr_assert_geq(in.t.fi->domain_attr->cq_data_size, 4);
	mask = in.t.fi->domain_attr->cq_data_size >= 8
		       ? UINT64_MAX
		       : (1ull << (8 * in.t.fi->domain_attr->cq_data_size)) - 1;
	dat[0] = 0xd1d1d1d1a1a1a1a1ull & mask;
	dat[1] = 0xd2d2d2d2b2b2b2b2ull & mask;
	dat[2] = 0xd3d3d3d3c3c3c3c3ull & mask;
	t_fill(a, 16, 1);
	t_fill(b, 24, 2);
	t_fill(c, 8, 3);
	t_fill(d, 40, 4);
	t_fill(e1, 300, 5);
	t_fill(e2, 700, 6);
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, a, 16, NULL, in.peer,
					     in.ti.addr[0], in.ti.key[0], a)),
		     0);
	cr_assert_eq(T_RETRY(&in.t, fi_writedata(in.t.ep, b, 24, NULL, dat[0],
						 in.peer, in.ti.addr[0] + 100,
						 in.ti.key[0], b)), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_inject_write(in.t.ep, c, 8, in.peer,
						    in.ti.addr[0] + 200,
						    in.ti.key[0])), 0);
	memset(c, 0, 8); /* an inject's buffer is ours again at once */
	cr_assert_eq(T_RETRY(&in.t, fi_inject_writedata(in.t.ep, d, 40, dat[1],
							in.peer,
							in.ti.addr[0] + 300,
							in.ti.key[0])), 0);
	memset(d, 0, 40);
	riov[0] = (struct fi_rma_iov){ in.ti.addr[0] + 400, 500, in.ti.key[0] };
	riov[1] = (struct fi_rma_iov){ in.ti.addr[0] + 2000, 500,
				       in.ti.key[0] };
	m.addr = in.peer;
	m.data = dat[2];
	cr_assert_eq(T_RETRY(&in.t, fi_writemsg(in.t.ep, &m, FI_COMPLETION |
						FI_REMOTE_CQ_DATA)), 0);
	/* three completions (any order), none for the injects */
	for (int i = 0; i < 3; i++) {
		int k;

		cr_assert_eq(t_wait(&in.t, &e, NULL, NULL, T_WAIT_MS), 1,
			     "completion %d of 3", i);
		for (k = 0; k < 3 && e.op_context != ctx[k]; k++)
			;
		cr_assert_lt(k, 3, "completion of an inject or unknown op");
		cr_assert(!got[k], "op %d completed twice", k);
		got[k] = true;
		cr_assert_eq(e.flags, FI_RMA | FI_WRITE);
	}
	cr_assert_eq(fi_cntr_wait(cntr(&in, T_C_WRITE), 5, T_WAIT_MS), 0,
		     "injects count on the write counter: %llu (err %llu)",
		     (unsigned long long)fi_cntr_read(cntr(&in, T_C_WRITE)),
		     (unsigned long long)fi_cntr_readerr(cntr(&in, T_C_WRITE)));
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_WRITE)), 5);
	cr_assert_eq(fi_cq_read(in.t.cq, &e, 1), -FI_EAGAIN,
		     "injects write no initiator CQ entry");
	tgt_stat(&in, 0, 5, 3, &st);
	cr_assert_eq(st.rwrite, 5);
	cr_assert_eq(st.ncqerr, 0);
	cr_assert_eq(st.ncq, 3, "one target CQ entry per write with data, "
				"none for plain writes (got %llu)",
		     (unsigned long long)st.ncq);
	for (int i = 0; i < 3; i++) {
		int k;

		cr_assert_eq(st.cq[i].flags,
			     FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
			     "target entry %d flags %#llx", i,
			     (unsigned long long)st.cq[i].flags);
		cr_assert_eq(st.cq[i].ctx, 0, "target entry op_context NULL");
		for (k = 0; k < 3 && (st.cq[i].data & mask) != dat[k]; k++)
			;
		cr_assert_lt(k, 3, "target entry data %#llx unknown",
			     (unsigned long long)st.cq[i].data);
		cr_assert(!seen[k]);
		seen[k] = true;
		cr_expect_eq(st.cq[i].len, want_len[k],
			     "target entry with data %#llx: len %llu, want "
			     "the bytes written, %llu",
			     (unsigned long long)st.cq[i].data,
			     (unsigned long long)st.cq[i].len,
			     (unsigned long long)want_len[k]);
	}
	cr_assert_eq(t_ini_check(&in, 0, 0, 16, 1, 0), 0);
	cr_assert_eq(t_ini_check(&in, 0, 100, 24, 2, 0), 0);
	cr_assert_eq(t_ini_check(&in, 0, 200, 8, 3, 0), 0, "inject_write");
	cr_assert_eq(t_ini_check(&in, 0, 300, 40, 4, 0), 0,
		     "inject_writedata");
	cr_assert_eq(t_ini_check(&in, 0, 400, 300, 5, 0), 0);
	{
		uint8_t cat[1000];

		t_fill(cat, 300, 5);
		t_fill(cat + 300, 700, 6);
		/* remote piece 1 holds bytes 500..999 of the concatenation */
		cr_assert_eq(t_ini_check(&in, 0, 700, 200, 6, 0), 0);
		{
			struct t_cmd g = { .op = T_GET, .off = 2000, .len = 500 };
			uint8_t got2[500];

			cr_assert_eq(t_ini_cmd(&in, &g, got2, 500), 0);
			cr_assert_eq(memcmp(got2, cat + 500, 500), 0,
				     "second remote iovec of writemsg");
		}
	}
	stop(&in);
}

Test(rma_spec, cq_data_and_injects_shm, .timeout = 60)
{
	cq_data_test("shm");
}

Test(rma_spec, cq_data_and_injects_tcp, .timeout = 60)
{
	cq_data_test("tcp");
}

/* ---- counters ------------------------------------------------------------ */

Test(rma_spec, counter_calls, .timeout = 30)
{
	struct tctx t;
	struct fid_cntr *c;

	cr_assert_eq(t_open_cntrs(&t, t_hints_mr(T_RMA_CAPS, FI_MR_PROV_KEY),
				  T_CBIT(T_C_WRITE)), 0);
	c = t.c[T_C_WRITE];
	cr_assert_eq(fi_cntr_read(c), 0);
	cr_assert_eq(fi_cntr_readerr(c), 0);
	cr_assert_eq(fi_cntr_add(c, 5), 0);
	cr_assert_eq(fi_cntr_read(c), 5);
	cr_assert_eq(fi_cntr_set(c, 2), 0);
	cr_assert_eq(fi_cntr_read(c), 2);
	cr_assert_eq(fi_cntr_adderr(c, 3), 0);
	cr_assert_eq(fi_cntr_adderr(c, 4), 0);
	cr_assert_eq(fi_cntr_readerr(c), 7);
	cr_assert_eq(fi_cntr_read(c), 2, "errors leave the count alone");
	cr_assert_eq(fi_cntr_seterr(c, 1), 0);
	cr_assert_eq(fi_cntr_readerr(c), 1);
	cr_assert_eq(fi_cntr_wait(c, 2, 1000), 0, "threshold reached");
	cr_assert_eq(fi_cntr_wait(c, 3, 50), -FI_ETIMEDOUT);
	cr_assert_eq(fi_cntr_read(c), 2);
	cr_assert_eq(fi_cntr_readerr(c), 1, "a timeout leaves errors alone");
	t_close(&t);
}

Test(rma_spec, counters_of_every_kind, .timeout = 60)
{
	struct t_ini in;
	struct t_tgt_stat st;
	uint64_t w[8], r[4], one = 1, res[2], dummy = 0, word64;
	struct iovec iov = { &w[1], 8 };
	struct fi_ioc ioc = { &one, 1 };
	struct t_cmd rc = { .op = T_RECV, .len = 2 };
	char msg[8] = "ping";
	int ncomp = 0;

	t_tgt.nmr = 2;
	t_tgt.mr_cntr = true;
	t_tgt.ini_cntrs |= T_CBIT(T_C_SEND);
	t_tgt.tgt_cntrs |= T_CBIT(T_C_RECV);
	start(&in);
	for (int i = 0; i < 8; i++)
		w[i] = 0x1000 + (uint64_t)i;
	/* region 0 (counts on the MR's counter): 3 writes, 3 base atomics */
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, &w[0], 8, NULL, in.peer,
					     in.ti.addr[0], in.ti.key[0],
					     &w[0])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_writev(in.t.ep, &iov, NULL, 1, in.peer,
					      in.ti.addr[0] + 8, in.ti.key[0],
					      &w[1])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_inject_write(in.t.ep, &w[2], 8, in.peer,
						    in.ti.addr[0] + 16,
						    in.ti.key[0])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_atomic(in.t.ep, &one, 1, NULL, in.peer,
					      in.ti.addr[0] + 64, in.ti.key[0],
					      FI_UINT64, FI_SUM, &w[3])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_atomicv(in.t.ep, &ioc, NULL, 1, in.peer,
					       in.ti.addr[0] + 64, in.ti.key[0],
					       FI_UINT64, FI_SUM, &w[4])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_inject_atomic(in.t.ep, &one, 1, in.peer,
						     in.ti.addr[0] + 64,
						     in.ti.key[0], FI_UINT64,
						     FI_SUM)), 0);
	/* region 1 (no MR counter): 2 writes */
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, &w[5], 8, NULL, in.peer,
					     in.ti.addr[1], in.ti.key[1],
					     &w[5])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, &w[6], 8, NULL, in.peer,
					     in.ti.addr[1] + 8, in.ti.key[1],
					     &w[6])), 0);
	/* 2 reads, 2 atomic reads */
	cr_assert_eq(T_RETRY(&in.t, fi_read(in.t.ep, &r[0], 8, NULL, in.peer,
					    in.ti.addr[0] + 128, in.ti.key[0],
					    &r[0])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_read(in.t.ep, &r[1], 8, NULL, in.peer,
					    in.ti.addr[1] + 128, in.ti.key[1],
					    &r[1])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_fetch_atomic(in.t.ep, &dummy, 1, NULL,
						    &res[0], NULL, in.peer,
						    in.ti.addr[0] + 256,
						    in.ti.key[0], FI_UINT64,
						    FI_ATOMIC_READ, &r[2])), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_fetch_atomic(in.t.ep, &dummy, 1, NULL,
						    &res[1], NULL, in.peer,
						    in.ti.addr[1] + 256,
						    in.ti.key[1], FI_UINT64,
						    FI_ATOMIC_READ, &r[3])), 0);
	/* 2 messages */
	cr_assert_eq(t_ini_cmd(&in, &rc, NULL, 0), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_send(in.t.ep, msg, 8, NULL, in.peer,
					    msg)), 0);
	cr_assert_eq(T_RETRY(&in.t, fi_send(in.t.ep, msg, 8, NULL, in.peer,
					    msg + 1)), 0);
	for (; ncomp < 12; ncomp++) {
		struct fi_cq_tagged_entry e;

		cr_assert_eq(t_wait(&in.t, &e, NULL, NULL, T_WAIT_MS), 1,
			     "completion %d of 12", ncomp);
	}
	cr_assert_eq(fi_cntr_wait(cntr(&in, T_C_WRITE), 8, T_WAIT_MS), 0);
	cr_assert_eq(fi_cntr_wait(cntr(&in, T_C_READ), 4, T_WAIT_MS), 0);
	cr_assert_eq(fi_cntr_wait(cntr(&in, T_C_SEND), 2, T_WAIT_MS), 0);
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_WRITE)), 8,
		     "5 writes and 3 base atomics");
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_READ)), 4,
		     "2 reads and 2 fetching atomics");
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_SEND)), 2);
	cr_assert_eq(fi_cntr_wait(cntr(&in, T_C_WRITE), 9, 50), -FI_ETIMEDOUT);
	tgt_stat(&in, 4, 8, 2, &st);
	cr_assert_eq(st.rwrite, 8, "remote writes: 5 RMA + 3 atomics");
	cr_assert_eq(st.rread, 4, "remote reads: 2 RMA + 2 FI_ATOMIC_READ");
	cr_assert_eq(st.mr_cntr, 6, "region 0's counter: its 6 writes only");
	cr_assert_eq(st.ncq, 2, "target CQ: the 2 receives, nothing for RMA");
	cr_assert(st.cq[0].flags & FI_RECV);
	cr_assert(st.cq[1].flags & FI_RECV);
	cr_assert_eq(st.recv, 2, "target FI_RECV counter");
	{
		uint64_t v;
		struct t_cmd g = { .op = T_GET, .off = 64, .len = 8 };
		uint8_t b[8];

		/* the initial pattern of region 0 at byte 64, plus 3 */
		for (int i = 0; i < 8; i++)
			b[i] = (uint8_t)(100 * 131 + (64 + i) * 7 +
					 ((64 + i) >> 9));
		memcpy(&word64, b, 8);
		cr_assert_eq(t_ini_cmd(&in, &g, &v, 8), 0);
		cr_assert_eq(v, word64 + 3, "3 base SUMs of 1");
	}
	/* failures count as errors, not as completions */
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, &w[7], 8, NULL, in.peer,
					     in.ti.addr[0],
					     in.ti.key[0] ^ 0x7700000000ull,
					     &w[7])), 0);
	cr_assert_eq(t_ini_done(&in, &w[7], NULL), FI_EKEYREJECTED);
	cr_assert_eq(T_RETRY(&in.t, fi_read(in.t.ep, &r[0], 8, NULL, in.peer,
					    in.ti.addr[0],
					    in.ti.key[0] ^ 0x7700000000ull,
					    &r[0])), 0);
	cr_assert_eq(t_ini_done(&in, &r[0], NULL), FI_EKEYREJECTED);
	cr_assert_eq(wait_err(cntr(&in, T_C_WRITE), 1), 1);
	cr_assert_eq(wait_err(cntr(&in, T_C_READ), 1), 1);
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_WRITE)), 8);
	cr_assert_eq(fi_cntr_read(cntr(&in, T_C_READ)), 4);
	tgt_stat(&in, 0, 0, 0, &st);
	cr_assert_eq(st.rwrite, 8, "a rejected write is not executed");
	cr_assert_eq(st.rread, 4);
	cr_assert_eq(st.mr_cntr, 6);
	/* a fetching atomic that modifies memory is a remote write (whether
	 * it also counts as a remote read, the spec leaves open) */
	cr_assert_eq(T_RETRY(&in.t, fi_fetch_atomic(in.t.ep, &one, 1, NULL,
						    &res[0], NULL, in.peer,
						    in.ti.addr[0] + 64,
						    in.ti.key[0], FI_UINT64,
						    FI_SUM, &res[0])), 0);
	cr_assert_eq(t_ini_done(&in, &res[0], NULL), 0);
	cr_assert_eq(res[0], word64 + 3, "fetched: the initial word + 3");
	cr_assert_eq(wait_cntr(cntr(&in, T_C_READ), 5), 5,
		     "a fetching atomic counts on the initiator's read counter");
	tgt_stat(&in, 0, 9, 0, &st);
	cr_assert_eq(st.rwrite, 9, "fetch-add: a remote write");
	cr_assert_eq(st.mr_cntr, 7, "fetch-add: a remote write into the MR");
	stop(&in);
}

/* ---- MR modes ------------------------------------------------------------ */

static void mode_test(uint64_t mode, int niov)
{
	const size_t len = 256 * 1024;
	uint64_t b1 = niov > 1 ? len / (size_t)niov : len / 2, fl;
	struct {
		uint64_t off;
		size_t n;
	} wr[3] = { { 0, 10 }, { b1 - 100, 300 }, { len - 50, 50 } };
	uint8_t buf[300], back[300], bad[8] = { 0 };
	struct t_ini in;
	struct t_tgt_stat st;

	t_tgt.mr_mode = mode;
	t_tgt.niov = niov;
	t_tgt.len = len;
	t_tgt.key = 0x4242;
	t_tgt.offset = mode & FI_MR_VIRT_ADDR ? 0 : 0x5000;
	start(&in);
	cr_assert_eq((uint64_t)in.t.fi->domain_attr->mr_mode, mode & MR_MODES,
		     "the mode asked for, FI_MR_ENDPOINT left out");
	if (!(mode & FI_MR_PROV_KEY))
		cr_assert_eq(in.ti.key[0], 0x4242, "requested key is the key");
	for (int i = 0; i < 3; i++) {
		uint64_t ra = in.ti.addr[0] + wr[i].off;

		t_fill(buf, wr[i].n, 40 + (unsigned)i);
		post_write(&in, i, buf, wr[i].n, ra, in.ti.key[0], buf, 0);
		done_ok(&in, buf, FI_RMA | FI_WRITE, "write");
		memset(back, 0, sizeof(back));
		post_read(&in, i, back, wr[i].n, ra, in.ti.key[0], back, 0);
		done_ok(&in, back, FI_RMA | FI_READ, "read");
		cr_assert_eq(memcmp(buf, back, wr[i].n), 0, "read back %d", i);
		cr_assert_eq(t_ini_check(&in, 0, wr[i].off, wr[i].n,
					 40 + (unsigned)i, 0), 0,
			     "write %d at region byte %llu", i,
			     (unsigned long long)wr[i].off);
	}
	cr_assert_eq(untouched(&in, 0, 10, b1 - 110), 0);
	cr_assert_eq(untouched(&in, 0, b1 + 200, len - 50 - b1 - 200), 0);
	/* one byte before the region */
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, bad, 8, NULL, in.peer,
					     in.ti.addr[0] - 1, in.ti.key[0],
					     bad)), 0);
	cr_assert_eq(t_ini_done(&in, bad, &fl), FI_EKEYREJECTED,
		     "address before the region");
	cr_assert_eq(untouched(&in, 0, 10, b1 - 110), 0);
	tgt_stat(&in, 3, 3, 0, &st);
	cr_assert_eq(st.guard_bad, 0, "nothing outside the region's pieces");
	stop(&in);
}

Test(rma_spec, mr_mode_none, .timeout = 60)
{
	mode_test(0, 1);
}

Test(rma_spec, mr_mode_none_regv3, .timeout = 60)
{
	mode_test(0, 3);
}

Test(rma_spec, mr_mode_prov_key_regv3, .timeout = 60)
{
	mode_test(FI_MR_PROV_KEY, 3);
}

Test(rma_spec, mr_mode_virt_addr_regv3, .timeout = 60)
{
	mode_test(FI_MR_VIRT_ADDR, 3);
}

Test(rma_spec, mr_mode_prov_key_virt_addr, .timeout = 60)
{
	mode_test(FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 1);
}

Test(rma_spec, mr_mode_prov_key_virt_addr_regv8, .timeout = 60)
{
	mode_test(FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 8);
}

Test(rma_spec, mr_mode_endpoint_offered_all, .timeout = 60)
{
	mode_test(FI_MR_ENDPOINT | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 1);
}

Test(rma_spec, mr_mode_endpoint_offered_user_key_offsets_regv3,
     .timeout = 60)
{
	mode_test(FI_MR_ENDPOINT, 3);
}

Test(rma_spec, mr_mode_tcp_user_key_offsets, .timeout = 60)
{
	use_path("tcp");
	mode_test(0, 3);
}

Test(rma_spec, user_key_in_use_is_refused, .timeout = 30)
{
	struct tctx t;
	struct fid_mr *a, *b, *c;
	static char buf[256];

	cr_assert_eq(t_open_hints(&t, t_hints_mr(T_RMA_CAPS, 0)), 0);
	cr_assert_eq(fi_mr_reg(t.dom, buf, 64, FI_REMOTE_WRITE, 0, 7, 0, &a,
			       NULL), 0);
	cr_assert_eq(fi_mr_key(a), 7);
	cr_assert_eq(fi_mr_reg(t.dom, buf + 64, 64, FI_REMOTE_READ, 0, 7, 0,
			       &b, NULL), -FI_ENOKEY, "key 7 is in use");
	cr_assert_eq(fi_mr_reg(t.dom, buf + 64, 64, FI_REMOTE_READ, 0, 8, 0,
			       &b, NULL), 0);
	cr_assert_eq(fi_mr_key(b), 8);
	cr_assert_eq(fi_close(&a->fid), 0);
	cr_assert_eq(fi_mr_reg(t.dom, buf + 128, 64, FI_REMOTE_READ, 0, 7, 0,
			       &c, NULL), 0, "key 7 is free again");
	cr_assert_eq(fi_mr_key(c), 7);
	fi_close(&b->fid);
	fi_close(&c->fid);
	t_close(&t);
}

Test(rma_spec, provider_keys_are_distinct, .timeout = 30)
{
	struct tctx t;
	struct fid_mr *mr[16];
	static char buf[16][64];

	cr_assert_eq(t_open_hints(&t, t_hints_mr(T_RMA_CAPS, FI_MR_PROV_KEY)),
		     0);
	for (int i = 0; i < 16; i++) {
		cr_assert_eq(fi_mr_reg(t.dom, buf[i], 64, FI_REMOTE_WRITE, 0, 7,
				       0, &mr[i], NULL), 0,
			     "requested keys are ignored with FI_MR_PROV_KEY");
		for (int j = 0; j < i; j++)
			cr_assert_neq(fi_mr_key(mr[i]), fi_mr_key(mr[j]));
	}
	for (int i = 0; i < 16; i++)
		fi_close(&mr[i]->fid);
	t_close(&t);
}

/* FI_MR_ENDPOINT offered is not taken: a region is live from fi_mr_reg
 * on, and fi_mr_bind to the endpoint and fi_mr_enable, which code
 * written for that mode calls, change nothing. */
Test(rma_spec, mr_endpoint_offered_regions_need_no_binding, .timeout = 60)
{
	struct t_ini in;
	struct t_cmd bind = { .op = T_BIND }, en = { .op = T_ENABLE };
	uint64_t v = 0x0123456789abcdefull, w = ~v, got = 0;
	int ret;

	t_tgt.mr_mode = FI_MR_ENDPOINT | FI_MR_VIRT_ADDR;
	t_tgt.unbound = true;
	t_tgt.key = 0x77;
	start(&in);
	cr_assert_eq(in.t.fi->domain_attr->mr_mode, FI_MR_VIRT_ADDR);
	cr_assert_eq(in.ti.key[0], 0x77);
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, &v, 8, NULL, in.peer,
					     in.ti.addr[0], 0x77, &v)), 0);
	cr_assert_eq(t_ini_done(&in, &v, NULL), 0, "neither bound nor enabled");
	cr_assert_eq(t_ini_cmd(&in, &bind, &ret, sizeof(ret)), 0);
	cr_assert_eq(ret, 0, "fi_mr_bind to the endpoint");
	cr_assert_eq(t_ini_cmd(&in, &en, &ret, sizeof(ret)), 0);
	cr_assert_eq(ret, 0, "fi_mr_enable");
	cr_assert_eq(T_RETRY(&in.t, fi_write(in.t.ep, &w, 8, NULL, in.peer,
					     in.ti.addr[0], 0x77, &w)), 0);
	cr_assert_eq(t_ini_done(&in, &w, NULL), 0, "bound and enabled");
	cr_assert_eq(T_RETRY(&in.t, fi_read(in.t.ep, &got, 8, NULL, in.peer,
					    in.ti.addr[0], 0x77, &got)), 0);
	cr_assert_eq(t_ini_done(&in, &got, NULL), 0);
	cr_assert_eq(got, w);
	cr_assert_eq(wait_cntr(cntr(&in, T_C_WRITE), 2), 2);
	cr_assert_eq(wait_cntr(cntr(&in, T_C_READ), 1), 1);
	cr_assert_eq(fi_cntr_readerr(cntr(&in, T_C_WRITE)), 0);
	stop(&in);
}

/* ---- bad input ----------------------------------------------------------- */

enum kind { K_WRITE, K_READ, K_WRITE2, K_ATOMIC, K_FETCH, K_COMPARE };

struct bad {
	const char *what;
	enum kind k;
	uint32_t mr;
	int64_t off;     /* from the region's byte 0; <0 before, >=len beyond */
	uint64_t len;    /* bytes, or atomic elements */
	bool end;        /* off counts back from the region's end */
	uint64_t key_xor;
	enum fi_datatype dt;
	int err;
};

#define RLEN (1u << 20)
#define KX 0x5a5a00000000ull

static const struct bad bad_cases[] = {
	{ "unknown key, write", K_WRITE, 0, 0, 8, 0, KX, 0, FI_EKEYREJECTED },
	{ "unknown key, large write", K_WRITE, 0, 0, 512 * 1024, 0, KX, 0,
	  FI_EKEYREJECTED },
	{ "unknown key, read", K_READ, 0, 0, 64, 0, KX, 0, FI_EKEYREJECTED },
	{ "unknown key, large read", K_READ, 0, 0, 512 * 1024, 0, KX, 0,
	  FI_EKEYREJECTED },
	{ "unknown key, atomic", K_ATOMIC, 0, 0, 1, 0, KX, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "unknown key, fetch", K_FETCH, 0, 0, 1, 0, KX, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "write starts before", K_WRITE, 0, -8, 16, 0, 0, 0, FI_EKEYREJECTED },
	{ "read starts before", K_READ, 0, -1, 1, 0, 0, 0, FI_EKEYREJECTED },
	{ "write ends beyond", K_WRITE, 0, -4, 8, 1, 0, 0, FI_EKEYREJECTED },
	{ "large write ends beyond", K_WRITE, 0, -4096, 256 * 1024, 1, 0, 0,
	  FI_EKEYREJECTED },
	{ "write starts at the end", K_WRITE, 0, 0, 1, 1, 0, 0, FI_EKEYREJECTED },
	{ "write far beyond", K_WRITE, 0, 1ll << 40, 8, 0, 0, 0, FI_EKEYREJECTED },
	{ "read ends beyond", K_READ, 0, -1, 2, 1, 0, 0, FI_EKEYREJECTED },
	{ "large read ends beyond", K_READ, 0, -100, 256 * 1024, 1, 0, 0,
	  FI_EKEYREJECTED },
	{ "second remote iovec beyond", K_WRITE2, 0, -10, 20, 1, 0, 0,
	  FI_EKEYREJECTED },
	{ "write into read-only MR", K_WRITE, 1, 0, 8, 0, 0, 0, FI_EKEYREJECTED },
	{ "large write into read-only MR", K_WRITE, 1, 0, 256 * 1024, 0, 0, 0,
	  FI_EKEYREJECTED },
	{ "read from write-only MR", K_READ, 2, 0, 8, 0, 0, 0, FI_EKEYREJECTED },
	{ "large read from write-only MR", K_READ, 2, 0, 256 * 1024, 0, 0, 0,
	  FI_EKEYREJECTED },
	{ "atomic into read-only MR", K_ATOMIC, 1, 0, 1, 0, 0, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "fetch from write-only MR", K_FETCH, 2, 0, 1, 0, 0, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "compare into read-only MR", K_COMPARE, 1, 0, 1, 0, 0, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "compare on write-only MR", K_COMPARE, 2, 0, 1, 0, 0, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "misaligned uint64 atomic", K_ATOMIC, 0, 3, 1, 0, 0, FI_UINT64,
	  FI_EINVAL },
	{ "misaligned uint32 fetch", K_FETCH, 0, 2, 1, 0, 0, FI_UINT32,
	  FI_EINVAL },
	{ "misaligned int16 compare", K_COMPARE, 0, 1, 1, 0, 0, FI_INT16,
	  FI_EINVAL },
	{ "misaligned double atomic", K_ATOMIC, 0, 4, 1, 0, 0, FI_DOUBLE,
	  FI_EINVAL },
	{ "atomic count*size past the end", K_ATOMIC, 0, -8, 2, 1, 0,
	  FI_UINT64, FI_EKEYREJECTED },
	{ "fetch count*size past the end", K_FETCH, 0, -16, 5, 1, 0,
	  FI_UINT32, FI_EKEYREJECTED },
	{ "compare at the end", K_COMPARE, 0, 0, 1, 1, 0, FI_UINT64,
	  FI_EKEYREJECTED },
	{ "atomic before the start", K_ATOMIC, 0, -8, 1, 0, 0, FI_UINT64,
	  FI_EKEYREJECTED },
};

static uint8_t bad_buf[512 * 1024];

static bool is_read_side(enum kind k)
{
	return k == K_READ || k == K_FETCH || k == K_COMPARE;
}

static void post_bad(struct t_ini *in, const struct bad *b, uint64_t key,
		     uint64_t ra, void *ctx)
{
	static uint64_t opnd[8] = { 1, 1, 1, 1, 1, 1, 1, 1 }, cmp[8], res[8];
	ssize_t r = 0;

	switch (b->k) {
	case K_WRITE:
		r = T_RETRY(&in->t, fi_write(in->t.ep, bad_buf, b->len, NULL,
					     in->peer, ra, key, ctx));
		break;
	case K_READ:
		r = T_RETRY(&in->t, fi_read(in->t.ep, bad_buf, b->len, NULL,
					    in->peer, ra, key, ctx));
		break;
	case K_WRITE2: {
		/* a valid first remote piece, then the bad one */
		struct iovec iov = { bad_buf, 64 + b->len };
		struct fi_rma_iov riov[2] = {
			{ ra - (uint64_t)(RLEN / 2), 64, key }, { ra, b->len, key }
		};
		struct fi_msg_rma m = { .msg_iov = &iov, .iov_count = 1,
					.addr = in->peer, .rma_iov = riov,
					.rma_iov_count = 2, .context = ctx };

		r = T_RETRY(&in->t, fi_writemsg(in->t.ep, &m, FI_COMPLETION));
		break;
	}
	case K_ATOMIC:
		r = T_RETRY(&in->t, fi_atomic(in->t.ep, opnd, b->len, NULL,
					      in->peer, ra, key, b->dt, FI_SUM,
					      ctx));
		break;
	case K_FETCH:
		r = T_RETRY(&in->t, fi_fetch_atomic(in->t.ep, opnd, b->len,
						    NULL, res, NULL, in->peer,
						    ra, key, b->dt, FI_SUM,
						    ctx));
		break;
	case K_COMPARE:
		r = T_RETRY(&in->t, fi_compare_atomic(in->t.ep, opnd, b->len,
						      NULL, cmp, NULL, res,
						      NULL, in->peer, ra, key,
						      b->dt, FI_CSWAP, ctx));
		break;
	}
	cr_assert_eq(r, 0, "%s: posted", b->what);
}

/* A good write (and read back) through region 3: the pair still works. */
static void still_works(struct t_ini *in, unsigned seed, const char *after)
{
	uint8_t v[64], back[64];

	t_fill(v, 64, seed);
	post_write(in, 0, v, 64, in->ti.addr[3] + 64, in->ti.key[3], v, 0);
	done_ok(in, v, FI_RMA | FI_WRITE, after);
	post_read(in, 0, back, 64, in->ti.addr[3] + 64, in->ti.key[3], back, 0);
	done_ok(in, back, FI_RMA | FI_READ, after);
	cr_assert_eq(memcmp(v, back, 64), 0, "after %s", after);
}

static void expect_bad(struct t_ini *in, const struct bad *b, uint64_t key,
		       uint64_t ra)
{
	int c = is_read_side(b->k) ? T_C_READ : T_C_WRITE;
	uint64_t errs = fi_cntr_readerr(cntr(in, c));
	uint64_t oks = fi_cntr_read(cntr(in, c));
	int ret;

	post_bad(in, b, key, ra, (void *)b);
	ret = t_ini_done(in, (void *)b, NULL);
	cr_assert_eq(ret, b->err, "%s: got %d (%s), want %d (%s)", b->what,
		     ret, fi_strerror(ret < 0 ? -ret : ret), b->err,
		     fi_strerror(b->err));
	cr_assert_eq(wait_err(cntr(in, c), errs + 1), errs + 1,
		     "%s: the initiator's error counter", b->what);
	cr_assert_eq(fi_cntr_read(cntr(in, c)), oks,
		     "%s: counted as a success", b->what);
	for (uint32_t mr = 0; mr < 3; mr++) {
		uint64_t n = untouched(in, mr, 0, RLEN);

		/* expect, not assert: report it, repair, go on with the table */
		if (n && b->k == K_WRITE2)
			cr_expect_eq(n, 0, "%s: region %u: %llu bytes changed; "
				     "the valid first piece (64 bytes at %u) "
				     "%s", b->what, mr, (unsigned long long)n,
				     RLEN / 2 - 10,
				     untouched(in, mr, RLEN / 2 - 10, 64)
					     ? "was written" : "is intact");
		else
			cr_expect_eq(n, 0, "%s: region %u: %llu bytes changed",
				     b->what, mr, (unsigned long long)n);
		if (n)
			fill_tgt(in, mr, 0, RLEN, 100 + mr, 0);
	}
}

static void bad_input_test(const char *path, uint64_t mode)
{
	struct t_ini in;
	struct t_tgt_stat st;
	uint64_t old;
	unsigned seed = 60;

	use_path(path);
	t_tgt.mr_mode = mode;
	t_tgt.nmr = 4;
	t_tgt.len = RLEN;
	t_tgt.offset = mode & FI_MR_VIRT_ADDR ? 0 : 0x10000;
	t_tgt.access[1] = FI_REMOTE_READ;
	t_tgt.access[2] = FI_REMOTE_WRITE;
	start(&in);
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad *b = &bad_cases[i];
		uint64_t key = in.ti.key[b->mr] ^ b->key_xor;
		uint64_t ra = in.ti.addr[b->mr] + (uint64_t)b->off +
			      (b->end ? RLEN : 0);

		for (int k = 0; k < 4 && b->key_xor; k++)
			cr_assert_neq(key, in.ti.key[k], "bad key is live");
		expect_bad(&in, b, key, ra);
		still_works(&in, seed++, b->what);
	}
	tgt_stat(&in, 0, 0, 0, &st);
	cr_assert_eq(st.guard_bad, 0);
	/* a closed MR's key, then its slot reused */
	{
		static const struct bad closed = { "key of a closed MR", K_WRITE,
						   0, 0, 8, 0, 0, 0,
						   FI_EKEYREJECTED };
		static const struct bad closed_rd = { "key of a closed MR, read",
						      K_READ, 0, 0, 8, 0, 0, 0,
						      FI_EKEYREJECTED };
		static const struct bad reused = {
			"key of a closed MR after a new registration", K_WRITE,
			0, 0, 8, 0, 0, 0, FI_EKEYREJECTED
		};
		static const struct bad reused_at = {
			"old key, atomic, after a new registration", K_ATOMIC,
			0, 0, 1, 0, 0, FI_UINT64, FI_EKEYREJECTED
		};
		struct t_cmd cl = { .op = T_CLOSE }, rg = { .op = T_REG,
							   .seed = 9 };
		uint64_t kv[2];

		cr_assert_eq(t_ini_cmd(&in, &cl, NULL, 0), 0);
		old = in.ti.key[0];
		expect_bad(&in, &closed, old, in.ti.addr[0]);
		expect_bad(&in, &closed_rd, old, in.ti.addr[0]);
		cr_assert_eq(t_ini_cmd(&in, &rg, kv, 16), 0);
		cr_assert_neq(kv[0], old, "the new MR has a new key");
		cr_assert_eq(kv[1], in.ti.addr[0]);
		expect_bad(&in, &reused, old, in.ti.addr[0]);
		expect_bad(&in, &reused_at, old, in.ti.addr[0]);
		still_works(&in, seed++, "reused slot");
		/* the new key reaches the new MR */
		{
			uint64_t v = 0xfeedull, back = 0;

			post_write(&in, 0, &v, 8, in.ti.addr[0] + 8, kv[0], &v,
				   0);
			done_ok(&in, &v, FI_RMA | FI_WRITE, "new key");
			post_read(&in, 0, &back, 8, in.ti.addr[0] + 8, kv[0],
				  &back, 0);
			done_ok(&in, &back, FI_RMA | FI_READ, "new key");
			cr_assert_eq(back, v);
		}
	}
	stop(&in);
}

Test(rma_spec, bad_input_shm, .timeout = 120)
{
	bad_input_test("shm", FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
}

Test(rma_spec, bad_input_shm_without_cma, .timeout = 120)
{
	bad_input_test("nocma", FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
}

Test(rma_spec, bad_input_tcp, .timeout = 120)
{
	bad_input_test("tcp", FI_MR_PROV_KEY | FI_MR_VIRT_ADDR);
}

Test(rma_spec, bad_input_user_keys_offsets, .timeout = 120)
{
	bad_input_test("shm", 0);
}

/* ---- FI_FENCE ------------------------------------------------------------ */

static void fence_test(const char *path)
{
	static const size_t fsz[] = { 8, 4096, 65537, MIB, 4 * MIB };
	uint8_t *src = malloc(4 * MIB), *dst = malloc(4 * MIB);
	struct t_ini in;

	use_path(path);
	t_tgt.len = 4 * MIB + 4096;
	start(&in);
	for (int rep = 0; rep < 4; rep++)
		for (size_t i = 0; i < sizeof(fsz) / sizeof(fsz[0]); i++) {
			unsigned seed = 70 + (unsigned)(rep * 8 + (int)i);
			bool w = false, r = false;

			t_fill(src, fsz[i], seed);
			memset(dst, 0, fsz[i]);
			post_write(&in, 2, src, fsz[i], in.ti.addr[0] + 64,
				   in.ti.key[0], src, 0);
			/* no wait: the fence orders them */
			post_read(&in, 2, dst, fsz[i], in.ti.addr[0] + 64,
				  in.ti.key[0], dst, FI_FENCE);
			for (int k = 0; k < 2; k++) {
				struct fi_cq_tagged_entry e;

				cr_assert_eq(t_wait(&in.t, &e, NULL, NULL,
						    T_WAIT_MS), 1);
				w |= e.op_context == src;
				r |= e.op_context == dst;
			}
			cr_assert(w && r);
			cr_assert_eq(t_check(dst, fsz[i], seed), 0,
				     "fenced read sees the write of %zu bytes",
				     fsz[i]);
		}
	stop(&in);
	free(src);
	free(dst);
}

Test(rma_spec, fence_write_then_read_shm, .timeout = 120)
{
	fence_test("shm");
}

Test(rma_spec, fence_write_then_read_tcp, .timeout = 120)
{
	fence_test("tcp");
}
