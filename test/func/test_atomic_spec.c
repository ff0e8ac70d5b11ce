/*
 * Atomics through the public API, checked against the ntx atomic spec with
 * a reference computed here (independent of the provider's code): which
 * (function, datatype, op) are valid, every valid one executed remotely
 * with values on both sides of each branch, synchronous errors, the max
 * count, and atomicity with two initiators hammering one word.
 */
#include <complex.h>
#include <criterion/criterion.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ntx_test.h"

enum afn { F_BASE, F_FETCH, F_CMP };
static const char *fn_name[] = { "atomic", "fetch_atomic", "compare_atomic" };

#define NDT (FI_UINT128 + 1)
#define NVAL 7
#define SLOT 256 /* NVAL elements of 32 bytes at most */

/* Element e: target value, operand, compare. Together they take and miss
 * the branch of MIN, MAX and every CSWAP, signed and unsigned, and feed
 * the logical ops zeros. */
static const int64_t tv[NVAL] = { 5, 2, -6, 6, 0, 7, 0 };
static const int64_t ov[NVAL] = { 3, 3, 3, 3, 3, 0, 0 };
static const int64_t cv[NVAL] = { 5, 4, 1, 1, 0, 2, 0 };

static void use_path(const char *path)
{
	/* a network domain, with local peers forced through it */
	if (strcmp(path, "shm")) {
		setenv("FI_NTX_LOCAL_VIA_NETWORK", "1", 1);
		setenv("NTX_TEST_DOMAIN", path, 1);
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

/* ---- the spec's table and a reference ------------------------------------ */

static bool is_int(int dt)
{
	return dt <= FI_UINT64 || dt == FI_INT128 || dt == FI_UINT128;
}

static bool is_cplx(int dt)
{
	return dt == FI_FLOAT_COMPLEX || dt == FI_DOUBLE_COMPLEX ||
	       dt == FI_LONG_DOUBLE_COMPLEX;
}

static bool spec_supported(int fn, int dt, int op)
{
	if (dt < 0 || dt >= NDT)
		return false;
	switch (op) {
	case FI_MIN:
	case FI_MAX:
		return fn != F_CMP && !is_cplx(dt);
	case FI_SUM:
	case FI_PROD:
	case FI_LOR:
	case FI_LAND:
	case FI_LXOR:
	case FI_ATOMIC_WRITE:
		return fn != F_CMP;
	case FI_BOR:
	case FI_BAND:
	case FI_BXOR:
		return fn != F_CMP && is_int(dt);
	case FI_ATOMIC_READ:
		return fn == F_FETCH;
	case FI_CSWAP:
	case FI_CSWAP_NE:
		return fn == F_CMP;
	case FI_CSWAP_LE:
	case FI_CSWAP_LT:
	case FI_CSWAP_GE:
	case FI_CSWAP_GT:
		return fn == F_CMP && !is_cplx(dt);
	case FI_MSWAP:
		return fn == F_CMP && is_int(dt);
	default:
		return false;
	}
}

static size_t dt_size(int dt)
{
	switch (dt) {
	case FI_INT8: case FI_UINT8: return 1;
	case FI_INT16: case FI_UINT16: return 2;
	case FI_INT32: case FI_UINT32: case FI_FLOAT: return 4;
	case FI_INT64: case FI_UINT64: case FI_DOUBLE:
	case FI_FLOAT_COMPLEX: return 8;
	case FI_DOUBLE_COMPLEX: return 16;
	case FI_LONG_DOUBLE: return sizeof(long double);
	case FI_LONG_DOUBLE_COMPLEX: return sizeof(long double complex);
	case FI_INT128: case FI_UINT128: return 16;
	default: return 0;
	}
}

typedef unsigned __int128 u128;
typedef __int128 s128;

/* The value v in datatype dt; 128-bit values use both halves. */
static void set_val(int dt, void *p, int64_t v)
{
	memset(p, 0, dt_size(dt));
	switch (dt) {
#define SET(e, type)                                                          \
	case e: {                                                             \
		type x = (type)v;                                             \
		memcpy(p, &x, sizeof(x));                                     \
		break;                                                        \
	}
	SET(FI_INT8, int8_t) SET(FI_UINT8, uint8_t) SET(FI_INT16, int16_t)
	SET(FI_UINT16, uint16_t) SET(FI_INT32, int32_t)
	SET(FI_UINT32, uint32_t) SET(FI_INT64, int64_t)
	SET(FI_UINT64, uint64_t) SET(FI_FLOAT, float) SET(FI_DOUBLE, double)
	SET(FI_LONG_DOUBLE, long double)
	SET(FI_FLOAT_COMPLEX, float complex)
	SET(FI_DOUBLE_COMPLEX, double complex)
	SET(FI_LONG_DOUBLE_COMPLEX, long double complex)
#undef SET
	case FI_INT128:
	case FI_UINT128: {
		u128 x = (u128)(s128)v * (((u128)1 << 64) | 1);

		memcpy(p, &x, 16);
		break;
	}
	}
	if (is_cplx(dt)) { /* v + 2vi */
		if (dt == FI_FLOAT_COMPLEX) {
			float complex x = (float)v + 2.0f * (float)v * I;
			memcpy(p, &x, sizeof(x));
		} else if (dt == FI_DOUBLE_COMPLEX) {
			double complex x = (double)v + 2.0 * (double)v * I;
			memcpy(p, &x, sizeof(x));
		} else {
			long double complex x =
				(long double)v + 2.0L * (long double)v * I;
			memcpy(p, &x, sizeof(x));
		}
	}
}

#define REF_OPS_COMMON(T)                                                     \
	case FI_SUM: r = t + o; break;                                        \
	case FI_PROD: r = t * o; break;                                       \
	case FI_LOR: r = (T)((t != 0) || (o != 0)); break;                    \
	case FI_LAND: r = (T)((t != 0) && (o != 0)); break;                   \
	case FI_LXOR: r = (T)((t != 0) != (o != 0)); break;                   \
	case FI_ATOMIC_READ: r = t; break;                                    \
	case FI_ATOMIC_WRITE: r = o; break;                                   \
	case FI_CSWAP: r = c == t ? o : t; break;                             \
	case FI_CSWAP_NE: r = c != t ? o : t; break;

#define REF_OPS_ORDER                                                         \
	case FI_MIN: r = o < t ? o : t; break;                                \
	case FI_MAX: r = o > t ? o : t; break;                                \
	case FI_CSWAP_LE: r = c <= t ? o : t; break;                          \
	case FI_CSWAP_LT: r = c < t ? o : t; break;                           \
	case FI_CSWAP_GE: r = c >= t ? o : t; break;                          \
	case FI_CSWAP_GT: r = c > t ? o : t; break;

/* Integers: arithmetic in the unsigned twin (wraps, no overflow UB). */
#define REF_INT(name, T, UT)                                                  \
	static void name(int op, void *tp, const void *op_, const void *cp)   \
	{                                                                     \
		T t, o, c, r = 0;                                             \
		memcpy(&t, tp, sizeof(t));                                    \
		memcpy(&o, op_, sizeof(o));                                   \
		memcpy(&c, cp, sizeof(c));                                    \
		switch (op) {                                                 \
		REF_OPS_ORDER                                                 \
		case FI_SUM: r = (T)((UT)t + (UT)o); break;                   \
		case FI_PROD: r = (T)((UT)t * (UT)o); break;                  \
		case FI_LOR: r = (T)((t != 0) || (o != 0)); break;            \
		case FI_LAND: r = (T)((t != 0) && (o != 0)); break;           \
		case FI_LXOR: r = (T)((t != 0) != (o != 0)); break;           \
		case FI_BOR: r = t | o; break;                                \
		case FI_BAND: r = t & o; break;                               \
		case FI_BXOR: r = t ^ o; break;                               \
		case FI_ATOMIC_READ: r = t; break;                            \
		case FI_ATOMIC_WRITE: r = o; break;                           \
		case FI_CSWAP: r = c == t ? o : t; break;                     \
		case FI_CSWAP_NE: r = c != t ? o : t; break;                  \
		case FI_MSWAP: r = (T)((o & c) | (t & ~c)); break;            \
		}                                                             \
		memcpy(tp, &r, sizeof(r));                                    \
	}

#define REF_REAL(name, T)                                                     \
	static void name(int op, void *tp, const void *op_, const void *cp)   \
	{                                                                     \
		T t, o, c, r = 0;                                             \
		memcpy(&t, tp, sizeof(t));                                    \
		memcpy(&o, op_, sizeof(o));                                   \
		memcpy(&c, cp, sizeof(c));                                    \
		switch (op) {                                                 \
		REF_OPS_ORDER                                                 \
		REF_OPS_COMMON(T)                                             \
		}                                                             \
		memcpy(tp, &r, sizeof(r));                                    \
	}

#define REF_CPLX(name, T)                                                     \
	static void name(int op, void *tp, const void *op_, const void *cp)   \
	{                                                                     \
		T t, o, c, r = 0;                                             \
		memcpy(&t, tp, sizeof(t));                                    \
		memcpy(&o, op_, sizeof(o));                                   \
		memcpy(&c, cp, sizeof(c));                                    \
		switch (op) {                                                 \
		REF_OPS_COMMON(T)                                             \
		}                                                             \
		memcpy(tp, &r, sizeof(r));                                    \
	}

REF_INT(ref_i8, int8_t, uint8_t)
REF_INT(ref_u8, uint8_t, uint8_t)
REF_INT(ref_i16, int16_t, uint16_t)
REF_INT(ref_u16, uint16_t, uint16_t)
REF_INT(ref_i32, int32_t, uint32_t)
REF_INT(ref_u32, uint32_t, uint32_t)
REF_INT(ref_i64, int64_t, uint64_t)
REF_INT(ref_u64, uint64_t, uint64_t)
REF_INT(ref_i128, s128, u128)
REF_INT(ref_u128, u128, u128)
REF_REAL(ref_flt, float)
REF_REAL(ref_dbl, double)
REF_REAL(ref_ldbl, long double)
REF_CPLX(ref_cflt, float complex)
REF_CPLX(ref_cdbl, double complex)
REF_CPLX(ref_cldbl, long double complex)

/* *t = t op o (compare c) as the spec defines it. */
static void ref(int dt, int op, void *t, const void *o, const void *c)
{
	static void (*const fn[NDT])(int, void *, const void *,
				     const void *) = {
		[FI_INT8] = ref_i8,	    [FI_UINT8] = ref_u8,
		[FI_INT16] = ref_i16,	    [FI_UINT16] = ref_u16,
		[FI_INT32] = ref_i32,	    [FI_UINT32] = ref_u32,
		[FI_INT64] = ref_i64,	    [FI_UINT64] = ref_u64,
		[FI_FLOAT] = ref_flt,	    [FI_DOUBLE] = ref_dbl,
		[FI_FLOAT_COMPLEX] = ref_cflt, [FI_DOUBLE_COMPLEX] = ref_cdbl,
		[FI_LONG_DOUBLE] = ref_ldbl,
		[FI_LONG_DOUBLE_COMPLEX] = ref_cldbl,
		[FI_INT128] = ref_i128,	    [FI_UINT128] = ref_u128,
	};

	fn[dt](op, t, o, c);
}

/* Equal as values: long double has padding bytes. */
static bool val_eq(int dt, const void *a, const void *b)
{
	if (dt == FI_LONG_DOUBLE) {
		long double x, y;

		memcpy(&x, a, sizeof(x));
		memcpy(&y, b, sizeof(y));
		return x == y;
	}
	if (dt == FI_LONG_DOUBLE_COMPLEX) {
		long double complex x, y;

		memcpy(&x, a, sizeof(x));
		memcpy(&y, b, sizeof(y));
		return x == y;
	}
	return !memcmp(a, b, dt_size(dt));
}

static double val_dbl(int dt, const void *p)
{
	switch (dt) {
#define GET(e, type)                                                          \
	case e: {                                                             \
		type x;                                                       \
		memcpy(&x, p, sizeof(x));                                     \
		return (double)x;                                             \
	}
	GET(FI_INT8, int8_t) GET(FI_UINT8, uint8_t) GET(FI_INT16, int16_t)
	GET(FI_UINT16, uint16_t) GET(FI_INT32, int32_t)
	GET(FI_UINT32, uint32_t) GET(FI_INT64, int64_t)
	GET(FI_UINT64, uint64_t) GET(FI_FLOAT, float) GET(FI_DOUBLE, double)
	GET(FI_LONG_DOUBLE, long double) GET(FI_INT128, s128)
	GET(FI_UINT128, u128)
#undef GET
	case FI_FLOAT_COMPLEX: {
		float complex x;
		memcpy(&x, p, sizeof(x));
		return (double)crealf(x);
	}
	case FI_DOUBLE_COMPLEX: {
		double complex x;
		memcpy(&x, p, sizeof(x));
		return creal(x);
	}
	case FI_LONG_DOUBLE_COMPLEX: {
		long double complex x;
		memcpy(&x, p, sizeof(x));
		return (double)creall(x);
	}
	}
	return 0;
}

static int valid(struct fid_ep *ep, int fn, int dt, int op, size_t *cnt)
{
	return fn == F_BASE ? fi_atomicvalid(ep, dt, op, cnt)
	       : fn == F_FETCH ? fi_fetch_atomicvalid(ep, dt, op, cnt)
			       : fi_compare_atomicvalid(ep, dt, op, cnt);
}

/* ---- valid / query ------------------------------------------------------- */

Test(atomic_spec, valid_and_query_follow_the_table, .timeout = 30)
{
	static const uint64_t qflags[3] = { 0, FI_FETCH_ATOMIC,
					    FI_COMPARE_ATOMIC };
	struct tctx t;
	int n = 0;

	cr_assert_eq(t_open_hints(&t, t_hints_mr(T_RMA_CAPS, FI_MR_PROV_KEY)),
		     0);
	for (int fn = 0; fn < 3; fn++)
		for (int dt = 0; dt < NDT; dt++)
			for (int op = 0; op < FI_ATOMIC_OP_LAST; op++) {
				struct fi_atomic_attr attr = { 0, 0 };
				size_t cnt = 0;
				int v = valid(t.ep, fn, dt, op, &cnt);
				int q = fi_query_atomic(t.dom, dt, op, &attr,
							qflags[fn]);
				bool want = spec_supported(fn, dt, op);

				cr_assert_eq(v, want ? 0 : -FI_EOPNOTSUPP,
					     "fi_%svalid dt %d op %d: %d",
					     fn_name[fn], dt, op, v);
				cr_assert_eq(q, v, "fi_query_atomic %s dt %d "
					     "op %d: %d", fn_name[fn], dt,
					     op, q);
				if (!want)
					continue;
				n++;
				cr_assert_geq(cnt, 1);
				cr_assert_eq(attr.size, dt_size(dt),
					     "attr.size of dt %d", dt);
				cr_assert_eq(attr.count, cnt,
					     "attr.count of %s dt %d op %d",
					     fn_name[fn], dt, op);
			}
	/* base 152 (MIN/MAX 13 types, 6 ops on all 16, 3 bitwise on 10),
	 * fetch 152 + ATOMIC_READ 16, compare 32 + 4 x 13 + MSWAP 10 */
	cr_assert_eq(n, 414, "combinations in the table: %d", n);
	t_close(&t);
}

/* ---- every valid combination remotely ------------------------------------ */

struct acase {
	int fn, dt, op;
	size_t cnt; /* fi_*atomicvalid's */
};

static size_t all_cases(struct fid_ep *ep, struct acase *c)
{
	size_t n = 0;

	for (int fn = 0; fn < 3; fn++)
		for (int dt = 0; dt < NDT; dt++)
			for (int op = 0; op < FI_ATOMIC_OP_LAST; op++) {
				size_t cnt = 0;

				if (!spec_supported(fn, dt, op))
					continue;
				cr_assert_eq(valid(ep, fn, dt, op, &cnt), 0);
				c[n++] = (struct acase){ fn, dt, op, cnt };
			}
	return n;
}

/* Posts one atomic of k elements in one of the API's forms. */
static ssize_t post_form(struct t_ini *in, const struct acase *c, int form,
			 void *opnd, void *cmp, void *res, size_t k,
			 uint64_t ra, void *ctx)
{
	size_t sz = dt_size(c->dt), k1 = k / 2;
	uint8_t *o = opnd, *cm = cmp, *r = res;
	/* v and msg forms: the local sides in two iocs */
	struct fi_ioc oi[2] = { { o, k1 }, { o + k1 * sz, k - k1 } };
	struct fi_ioc ci[2] = { { cm, k1 }, { cm + k1 * sz, k - k1 } };
	struct fi_ioc ri[2] = { { r, k1 }, { r + k1 * sz, k - k1 } };
	struct fi_ioc *op2 = k1 ? oi : oi + 1, *cm2 = k1 ? ci : ci + 1;
	struct fi_ioc *r2 = k1 ? ri : ri + 1;
	size_t n2 = k1 ? 2 : 1;
	struct fi_rma_ioc rio = { ra, k, in->ti.key[0] };
	struct fi_msg_atomic m = { .msg_iov = op2, .iov_count = n2,
				   .addr = in->peer, .rma_iov = &rio,
				   .rma_iov_count = 1, .datatype = c->dt,
				   .op = c->op, .context = ctx };
	struct fid_ep *ep = in->t.ep;
	uint64_t key = in->ti.key[0];

	switch (c->fn * 4 + form) {
	case F_BASE * 4 + 0:
		return fi_atomic(ep, o, k, NULL, in->peer, ra, key, c->dt,
				 c->op, ctx);
	case F_BASE * 4 + 1:
		return fi_atomicv(ep, op2, NULL, n2, in->peer, ra, key, c->dt,
				  c->op, ctx);
	case F_BASE * 4 + 2:
		return fi_atomicmsg(ep, &m, FI_COMPLETION);
	case F_BASE * 4 + 3:
		return fi_inject_atomic(ep, o, k, in->peer, ra, key, c->dt,
					c->op);
	case F_FETCH * 4 + 0:
		return fi_fetch_atomic(ep, o, k, NULL, r, NULL, in->peer, ra,
				       key, c->dt, c->op, ctx);
	case F_FETCH * 4 + 1:
		return fi_fetch_atomicv(ep, op2, NULL, n2, r2, NULL, n2,
					in->peer, ra, key, c->dt, c->op, ctx);
	case F_FETCH * 4 + 2:
		return fi_fetch_atomicmsg(ep, &m, r2, NULL, n2, FI_COMPLETION);
	case F_CMP * 4 + 0:
		return fi_compare_atomic(ep, o, k, NULL, cm, NULL, r, NULL,
					 in->peer, ra, key, c->dt, c->op, ctx);
	case F_CMP * 4 + 1:
		return fi_compare_atomicv(ep, op2, NULL, n2, cm2, NULL, n2, r2,
					  NULL, n2, in->peer, ra, key, c->dt,
					  c->op, ctx);
	case F_CMP * 4 + 2:
		return fi_compare_atomicmsg(ep, &m, cm2, NULL, n2, r2, NULL, n2,
					    FI_COMPLETION);
	}
	return -FI_ENOSYS;
}

static const char *form_name(int fn, int form)
{
	static const char *names[] = { "", "v", "msg", "inject" };

	(void)fn;
	return names[form];
}

static void every_op_test(const char *path)
{
	static struct acase cases[3 * NDT * FI_ATOMIC_OP_LAST];
	static uint8_t init[3 * NDT * FI_ATOMIC_OP_LAST * SLOT];
	static uint8_t want[3 * NDT * FI_ATOMIC_OP_LAST * SLOT];
	static uint8_t got[3 * NDT * FI_ATOMIC_OP_LAST * SLOT];
	_Alignas(64) uint8_t opnd[SLOT], cmp[SLOT], res[SLOT];
	struct t_ini in;
	struct t_tgt_stat st;
	size_t n, bad = 0;
	uint64_t wexp = 0, rexp = 0;

	use_path(path);
	start(&in);
	n = all_cases(in.t.ep, cases);
	cr_assert_leq(4096 + n * SLOT, t_tgt.len);
	/* initial values go in over the socket, not through RMA */
	for (size_t i = 0; i < n; i++)
		for (int e = 0; e < NVAL; e++)
			set_val(cases[i].dt,
				init + i * SLOT + (size_t)e * dt_size(cases[i].dt),
				tv[e]);
	{
		struct t_cmd p = { .op = T_PUT, .off = 4096, .len = n * SLOT };

		cr_assert_eq(t_sock_write(in.sock, &p, sizeof(p)), 0);
		cr_assert_eq(t_sock_write(in.sock, init, n * SLOT), 0);
		cr_assert_eq(t_sock_read(in.sock, opnd, 1), 0);
	}
	memcpy(want, init, n * SLOT);
	for (size_t i = 0; i < n; i++) {
		const struct acase *c = &cases[i];
		size_t sz = dt_size(c->dt);
		int form = (int)(i % (c->fn == F_BASE ? 4 : 3));
		size_t per = c->cnt < NVAL ? c->cnt : NVAL;

		for (int e = 0; e < NVAL; e++) {
			set_val(c->dt, opnd + (size_t)e * sz, ov[e]);
			set_val(c->dt, cmp + (size_t)e * sz, cv[e]);
		}
		memset(res, 0xcc, sizeof(res));
		if (form == 3 && per * sz > in.t.fi->tx_attr->inject_size)
			form = 0;
		for (size_t e0 = 0; e0 < NVAL; e0 += per) {
			size_t k = NVAL - e0 < per ? NVAL - e0 : per;
			uint64_t ra = in.ti.addr[0] + 4096 + i * SLOT + e0 * sz;
			ssize_t r;
			uint64_t fl = 0;

			while ((r = post_form(&in, c, form, opnd + e0 * sz,
					      cmp + e0 * sz, res + e0 * sz, k,
					      ra, (void *)c)) == -FI_EAGAIN)
				fi_cq_read(in.t.cq, NULL, 0);
			cr_assert_eq(r, 0, "fi_%s%s dt %d op %d count %zu: %zd",
				     fn_name[c->fn], form_name(c->fn, form),
				     c->dt, c->op, k, r);
			*(c->fn == F_BASE ? &wexp : &rexp) += 1;
			if (form == 3) {
				/* no completion: done when counted */
				cr_assert_eq(fi_cntr_wait(in.t.c[T_C_WRITE], wexp,
							  T_WAIT_MS), 0,
					     "fi_inject_atomic dt %d op %d "
					     "counted", c->dt, c->op);
				continue;
			}
			r = t_ini_done(&in, (void *)c, &fl);
			cr_assert_eq(r, 0, "fi_%s%s dt %d op %d: completion %zd",
				     fn_name[c->fn], form_name(c->fn, form),
				     c->dt, c->op, r);
			cr_assert_eq(fl, FI_ATOMIC | (c->fn == F_BASE ? FI_WRITE
								      : FI_READ),
				     "fi_%s completion flags %#llx",
				     fn_name[c->fn], (unsigned long long)fl);
		}
		for (int e = 0; e < NVAL; e++) {
			uint8_t *w = want + i * SLOT + (size_t)e * sz;
			uint8_t old[32];

			memcpy(old, w, sz);
			ref(c->dt, c->op, w, opnd + (size_t)e * sz,
			    cmp + (size_t)e * sz);
			if (c->fn != F_BASE &&
			    !val_eq(c->dt, res + (size_t)e * sz, old)) {
				bad++;
				fprintf(stderr,
					"fi_%s%s dt %d op %d elem %d: fetched "
					"%g, want old value %g\n",
					fn_name[c->fn], form_name(c->fn, form),
					c->dt, c->op, e,
					val_dbl(c->dt, res + (size_t)e * sz),
					val_dbl(c->dt, old));
			}
		}
	}
	cr_assert_eq(fi_cntr_wait(in.t.c[T_C_WRITE], wexp, T_WAIT_MS), 0);
	cr_assert_eq(fi_cntr_wait(in.t.c[T_C_READ], rexp, T_WAIT_MS), 0);
	cr_assert_eq(fi_cntr_read(in.t.c[T_C_WRITE]), wexp,
		     "write counter: base atomics");
	cr_assert_eq(fi_cntr_read(in.t.c[T_C_READ]), rexp,
		     "read counter: fetch and compare atomics");
	cr_assert_eq(fi_cq_read(in.t.cq, got, 1), -FI_EAGAIN,
		     "no completion for fi_inject_atomic");
	cr_assert_eq(t_ini_stat(&in, 0, 0, 0, &st), 0);
	{
		struct t_cmd g = { .op = T_GET, .off = 4096, .len = n * SLOT };

		cr_assert_eq(t_ini_cmd(&in, &g, got, n * SLOT), 0);
	}
	for (size_t i = 0; i < n; i++) {
		const struct acase *c = &cases[i];
		size_t sz = dt_size(c->dt);

		for (int e = 0; e < NVAL; e++) {
			size_t at = i * SLOT + (size_t)e * sz;

			if (val_eq(c->dt, got + at, want + at))
				continue;
			bad++;
			fprintf(stderr,
				"fi_%s dt %d op %d elem %d (t %lld o %lld c "
				"%lld): target holds %g, want %g\n",
				fn_name[c->fn], c->dt, c->op, e,
				(long long)tv[e], (long long)ov[e],
				(long long)cv[e], val_dbl(c->dt, got + at),
				val_dbl(c->dt, want + at));
		}
		/* nothing beyond the elements */
		for (size_t b = (size_t)NVAL * sz; b < SLOT; b++)
			if (got[i * SLOT + b] != init[i * SLOT + b]) {
				bad++;
				fprintf(stderr, "fi_%s dt %d op %d: byte %zu "
					"past the elements changed\n",
					fn_name[c->fn], c->dt, c->op, b);
				break;
			}
	}
	cr_assert_eq(bad, 0, "%zu wrong results (listed on stderr)", bad);
	cr_assert_eq(st.guard_bad, 0);
	stop(&in);
}

Test(atomic_spec, every_valid_op_remotely_shm, .timeout = 120)
{
	every_op_test("shm");
}

Test(atomic_spec, every_valid_op_remotely_tcp, .timeout = 120)
{
	every_op_test("tcp");
}

Test(atomic_spec, every_valid_op_remotely_udp, .timeout = 120)
{
	every_op_test("udp");
}

/* ---- the largest count --------------------------------------------------- */

static void max_count(struct t_ini *in, int dt, int fn)
{
	struct acase c = { fn, dt, FI_SUM, 0 };
	size_t sz = dt_size(dt), cnt, k;
	uint8_t *opnd, *res, *init, *got;
	uint64_t fl;
	ssize_t r;

	cr_assert_eq(valid(in->t.ep, fn, dt, FI_SUM, &cnt), 0);
	cr_assert_leq(cnt * sz, 1u << 16, "count %zu", cnt);
	k = cnt;
	opnd = malloc(k * sz);
	res = malloc(k * sz);
	init = malloc(k * sz);
	got = malloc(k * sz);
	for (size_t e = 0; e < k; e++) {
		set_val(dt, init + e * sz, (int64_t)(e % 100) - 50);
		set_val(dt, opnd + e * sz, (int64_t)(e % 7) + 1);
	}
	{
		struct t_cmd p = { .op = T_PUT, .off = 8192, .len = k * sz };
		char ack;

		cr_assert_eq(t_sock_write(in->sock, &p, sizeof(p)), 0);
		cr_assert_eq(t_sock_write(in->sock, init, k * sz), 0);
		cr_assert_eq(t_sock_read(in->sock, &ack, 1), 0);
	}
	memset(res, 0xcc, k * sz);
	while ((r = post_form(in, &c, 0, opnd, NULL, res, k,
			      in->ti.addr[0] + 8192, &c)) == -FI_EAGAIN)
		fi_cq_read(in->t.cq, NULL, 0);
	cr_assert_eq(r, 0, "fi_%s of the max count %zu", fn_name[fn], k);
	cr_assert_eq(t_ini_done(in, &c, &fl), 0);
	{
		struct t_cmd g = { .op = T_GET, .off = 8192, .len = k * sz };

		cr_assert_eq(t_ini_cmd(in, &g, got, k * sz), 0);
	}
	for (size_t e = 0; e < k; e++) {
		uint8_t w[32];

		memcpy(w, init + e * sz, sz);
		if (fn == F_FETCH)
			cr_assert(val_eq(dt, res + e * sz, w),
				  "dt %d elem %zu of %zu fetched", dt, e, k);
		ref(dt, FI_SUM, w, opnd + e * sz, opnd + e * sz);
		cr_assert(val_eq(dt, got + e * sz, w),
			  "dt %d elem %zu of %zu at the target", dt, e, k);
	}
	free(opnd);
	free(res);
	free(init);
	free(got);
}

Test(atomic_spec, max_count_elements, .timeout = 60)
{
	struct t_ini in;

	start(&in);
	max_count(&in, FI_UINT64, F_BASE);
	max_count(&in, FI_INT8, F_FETCH);
	max_count(&in, FI_LONG_DOUBLE_COMPLEX, F_FETCH);
	max_count(&in, FI_INT128, F_BASE);
	stop(&in);
}

/* ---- synchronous errors -------------------------------------------------- */

Test(atomic_spec, unsupported_and_too_many_fail_at_the_call, .timeout = 60)
{
	static _Alignas(64) uint8_t a[1 << 17], b[1 << 17], r[1 << 17];
	struct t_ini in;
	int n = 0;
	uint64_t one = 1, fl;

	start(&in);
	for (int fn = 0; fn < 3; fn++)
		for (int dt = 0; dt < NDT; dt++)
			for (int op = 0; op < FI_ATOMIC_OP_LAST; op++) {
				struct acase c = { fn, dt, op, 1 };
				ssize_t ret;

				if (spec_supported(fn, dt, op))
					continue;
				ret = post_form(&in, &c, 0, a, b, r, 1,
						in.ti.addr[0], &c);
				cr_assert_eq(ret, -FI_EOPNOTSUPP,
					     "fi_%s dt %d op %d: %zd",
					     fn_name[fn], dt, op, ret);
				n++;
			}
	cr_assert_gt(n, 0);
	for (int fn = 0; fn < 3; fn++) {
		static const int dts[] = { FI_INT8, FI_UINT64, FI_DOUBLE,
					   FI_LONG_DOUBLE_COMPLEX };

		for (size_t i = 0; i < 4; i++) {
			struct acase c = { fn, dts[i],
					   fn == F_CMP ? FI_CSWAP : FI_SUM, 0 };
			size_t cnt;

			cr_assert_eq(valid(in.t.ep, fn, c.dt, c.op, &cnt), 0);
			cr_assert_lt((cnt + 1) * dt_size(c.dt), sizeof(a));
			for (int form = 0; form < 3; form++)
				cr_assert_eq(post_form(&in, &c, form, a, b, r,
						       cnt + 1, in.ti.addr[0],
						       &c),
					     -FI_EINVAL,
					     "fi_%s%s dt %d with count %zu > %zu",
					     fn_name[fn], form_name(fn, form),
					     c.dt, cnt + 1, cnt);
		}
	}
	/* nothing was sent: the next completion is a good atomic's */
	cr_assert_eq(fi_atomic(in.t.ep, &one, 1, NULL, in.peer, in.ti.addr[0],
			       in.ti.key[0], FI_UINT64, FI_SUM, &one), 0);
	cr_assert_eq(t_ini_done(&in, &one, &fl), 0);
	cr_assert_eq(fl, FI_ATOMIC | FI_WRITE);
	cr_assert_eq(fi_cq_read(in.t.cq, r, 1), -FI_EAGAIN);
	cr_assert_eq(fi_cntr_readerr(in.t.c[T_C_WRITE]), 0);
	cr_assert_eq(fi_cntr_readerr(in.t.c[T_C_READ]), 0);
	cr_assert_eq(fi_cntr_read(in.t.c[T_C_WRITE]), 1);
	stop(&in);
}

/* ---- atomicity ----------------------------------------------------------- */

#define NADD 10000
#define START 1000
/* an initiator stops early after this long: a loaded emulated machine
 * (the soft-RoCE guest under TCG) makes a round trip take milliseconds,
 * and what the test proves does not depend on how many there are */
#define ADD_MS 60000

static struct t_tgt_info g_ti;

/* What an initiator reports: how many fetch-adds it did, and what each
 * fetched. */
struct adds {
	uint64_t n;
	uint64_t got[NADD];
};

/* An initiator: up to NADD fetch-adds of 1 (ADD_MS at most), each waited
 * for; sends back what it fetched. */
static int child_adder(int sock)
{
	static struct adds a;
	uint64_t *got = a.got, end;
	struct tctx t;
	fi_addr_t peer;
	uint64_t one = 1;

	CHK(t_sock_read(sock, &g_ti, sizeof(g_ti)) == 0);
	CHK(t_open_hints(&t, t_hints_mr(T_RMA_CAPS, t_tgt.mr_mode)) == 0);
	CHK(t_insert(&t, g_ti.name, &peer) == 0);
	CHK(t_sync(sock) == 0); /* both are ready: start together */
	end = t_ms() + ADD_MS;
	for (int i = 0; i < NADD && (i < 100 || t_ms() < end); i++) {
		struct fi_cq_tagged_entry e;

		CHK(T_RETRY(&t, fi_fetch_atomic(t.ep, &one, 1, NULL, &got[i],
						NULL, peer, g_ti.addr[0],
						g_ti.key[0], FI_UINT64, FI_SUM,
						&got[i])) == 0);
		CHK(t_wait(&t, &e, NULL, NULL, T_WAIT_MS) == 1);
		CHK(e.op_context == &got[i]);
		CHK(e.flags == (FI_ATOMIC | FI_READ));
		CHK(i == 0 || got[i] > got[i - 1]);
		a.n = (uint64_t)i + 1;
	}
	CHK(t_sock_write(sock, &a, sizeof(a.n) + a.n * sizeof(*got)) == 0);
	t_close(&t);
	return 0;
}

/* Whether an initiator's whole report is in: its count, then as many
 * values. */
static bool adds_in(const struct adds *a, size_t have)
{
	return have >= sizeof(a->n) && a->n <= NADD &&
	       have == sizeof(a->n) + a->n * sizeof(a->got[0]);
}

static void atomicity_test(const char *path)
{
	static struct adds got[2];
	static uint8_t seen[2 * NADD];
	static _Alignas(64) uint64_t word[8];
	struct tctx t;
	struct fid_mr *mr;
	struct pollfd p[2];
	size_t have[2] = { 0, 0 }, len = T_NAMELEN;
	pid_t pid[2];
	int sock[2];

	use_path(path);
	word[0] = START;
	word[1] = 0x5555;
	/* the initiators are forked before the target opens anything: a
	 * verbs device opened by a parent is not usable in its children */
	for (int i = 0; i < 2; i++) {
		pid[i] = t_fork(&sock[i], child_adder);
		cr_assert_gt(pid[i], 0);
		p[i] = (struct pollfd){ .fd = sock[i], .events = POLLIN };
	}
	cr_assert_eq(t_open_hints(&t, t_hints_mr(T_RMA_CAPS, t_tgt.mr_mode)),
		     0);
	cr_assert_eq(fi_mr_reg(t.dom, word, 8, FI_REMOTE_READ | FI_REMOTE_WRITE,
			       0, 0, 0, &mr, NULL), 0);
	memset(&g_ti, 0, sizeof(g_ti));
	g_ti.key[0] = fi_mr_key(mr);
	g_ti.addr[0] = (uintptr_t)word;
	cr_assert_eq(fi_getname(&t.ep->fid, g_ti.name, &len), 0);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(t_sock_write(sock[i], &g_ti, sizeof(g_ti)), 0);
	/* release both once both are set up, then serve until both report */
	for (int i = 0; i < 2; i++) {
		char ch;

		while (poll(&p[i], 1, 0) != 1)
			fi_cq_read(t.cq, NULL, 0);
		cr_assert_eq(read(sock[i], &ch, 1), 1);
	}
	for (int i = 0; i < 2; i++)
		cr_assert_eq(write(sock[i], "g", 1), 1);
	for (unsigned n = 1; !adds_in(&got[0], have[0]) ||
			     !adds_in(&got[1], have[1]); n++) {
		fi_cq_read(t.cq, NULL, 0);
		/* the sockets every 64 polls: two system calls a poll made
		 * the target, not the protocol, the limit (under qemu's TCG
		 * the test took minutes) */
		if (n % 64)
			continue;
		for (int i = 0; i < 2; i++) {
			ssize_t r;

			if (adds_in(&got[i], have[i]) || poll(&p[i], 1, 0) != 1)
				continue;
			r = read(sock[i], (char *)&got[i] + have[i],
				 sizeof(got[i]) - have[i]);
			cr_assert_gt(r, 0, "initiator %d died", i);
			have[i] += (size_t)r;
		}
	}
	for (int i = 0; i < 2; i++)
		cr_assert_eq(t_join(pid[i]), 0, "initiator %d failed", i);
	cr_assert_eq(word[0], START + got[0].n + got[1].n, "no update lost");
	cr_assert_eq(word[1], 0x5555, "the next word untouched");
	for (int i = 0; i < 2; i++)
		for (uint64_t k = 0; k < got[i].n; k++) {
			uint64_t v = got[i].got[k];

			cr_assert(v >= START && v < START + got[0].n + got[1].n,
				  "fetched %llu", (unsigned long long)v);
			cr_assert_eq(seen[v - START]++, 0,
				     "value %llu fetched twice",
				     (unsigned long long)v);
		}
	printf("atomic_spec: %s: %llu and %llu fetch-adds, none lost\n", path,
	       (unsigned long long)got[0].n, (unsigned long long)got[1].n);
	fi_close(&mr->fid);
	t_close(&t);
}

Test(atomic_spec, two_initiators_fetch_add_one_word_shm, .timeout = 180)
{
	atomicity_test("shm");
}

Test(atomic_spec, two_initiators_fetch_add_one_word_tcp, .timeout = 180)
{
	atomicity_test("tcp");
}

Test(atomic_spec, two_initiators_fetch_add_one_word_udp, .timeout = 180)
{
	atomicity_test("udp");
}
