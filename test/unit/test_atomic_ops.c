/* Unit tests of ntx_atomic_ops.c against fi_atomic(3): the support table in
 * full, every supported operation against a reference written here, and
 * exact totals when threads update one element together. */
#include <complex.h>
#include <pthread.h>
#include <string.h>
#include <criterion/criterion.h>

#include "ntx/ntx_atomic.h"

typedef __int128 i128;
typedef unsigned __int128 u128;
typedef float _Complex fcplx;
typedef double _Complex dcplx;
typedef long double _Complex ldcplx;

#define NDT (FI_UINT128 + 1)
#define NEL 5 /* elements per run */
#define MAXSZ 32 /* long double complex */

static const char *const fn_names[] = { "base", "fetch", "compare" };

/* ---- the contract, written from the brief and fi_atomic(3) ---------------- */

static bool is_cplx(enum fi_datatype dt)
{
	return dt == FI_FLOAT_COMPLEX || dt == FI_DOUBLE_COMPLEX ||
	       dt == FI_LONG_DOUBLE_COMPLEX;
}

static bool is_int(enum fi_datatype dt)
{
	return dt <= FI_UINT64 || dt == FI_INT128 || dt == FI_UINT128;
}

static bool want_supported(enum ntx_atomic_fn fn, enum fi_datatype dt,
			   enum fi_op op)
{
	bool base = op <= FI_BXOR || op == FI_ATOMIC_WRITE;
	bool family = fn == NTX_AFN_BASE    ? base
		      : fn == NTX_AFN_FETCH ? base || op == FI_ATOMIC_READ
					    : op >= FI_CSWAP && op <= FI_MSWAP;

	if (!family)
		return false;
	switch (op) {
	case FI_MIN: case FI_MAX: case FI_CSWAP_LE: case FI_CSWAP_LT:
	case FI_CSWAP_GE: case FI_CSWAP_GT:
		return !is_cplx(dt);
	case FI_BOR: case FI_BAND: case FI_BXOR: case FI_MSWAP:
		return is_int(dt);
	default:
		return true;
	}
}

Test(atomic_ops, support_grid)
{
	int n = 0;

	for (int fn = 0; fn < 3; fn++)
		for (int dt = 0; dt < NDT; dt++)
			for (int op = 0; op < FI_ATOMIC_OP_LAST; op++) {
				bool got = ntx_atomic_supported(fn, dt, op);

				cr_expect_eq(got, want_supported(fn, dt, op),
					     "%s dt %d op %d", fn_names[fn], dt,
					     op);
				n += got;
			}
	/* ints 10 x (11 + 12 + 7), reals 3 x (8 + 9 + 6), complex 3 x (6 + 7 + 2) */
	cr_expect_eq(n, 414);
}

Test(atomic_ops, undefined_combinations)
{
	cr_expect_not(ntx_atomic_supported(NTX_AFN_BASE, FI_FLOAT, FI_BOR));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_BASE, FI_FLOAT_COMPLEX,
					   FI_MIN));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_COMPARE, FI_DOUBLE,
					   FI_MSWAP));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_COMPARE,
					   FI_DOUBLE_COMPLEX, FI_CSWAP_LT));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_BASE, FI_INT32,
					   FI_ATOMIC_READ));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, FI_INT32, FI_CSWAP));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, FI_VOID, FI_SUM));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, FI_INT32, 99));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, FI_INT32, FI_NOOP));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, FI_INT32,
					   (enum fi_op)FI_ATOMIC_OP_LAST));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, 99, FI_SUM));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, -1, FI_SUM));
	cr_expect_not(ntx_atomic_supported(NTX_AFN_FETCH, FI_INT32, -1));
	cr_expect_not(ntx_atomic_supported(3, FI_INT32, FI_SUM));
	/* and the ones the families do have */
	cr_expect(ntx_atomic_supported(NTX_AFN_FETCH, FI_INT32,
				       FI_ATOMIC_READ));
	cr_expect(ntx_atomic_supported(NTX_AFN_COMPARE, FI_UINT128, FI_MSWAP));
	cr_expect(ntx_atomic_supported(NTX_AFN_COMPARE, FI_LONG_DOUBLE,
				       FI_CSWAP_GT));
	cr_expect(ntx_atomic_supported(NTX_AFN_BASE, FI_LONG_DOUBLE_COMPLEX,
				       FI_LXOR));
}

Test(atomic_ops, sizes)
{
	static const size_t want[NDT] = {
		1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, sizeof(long double),
		sizeof(ldcplx), 16, 16,
	};

	for (int dt = 0; dt < NDT; dt++)
		cr_expect_eq(ntx_atomic_dt_size(dt), want[dt], "dt %d", dt);
	cr_expect_eq(ntx_atomic_dt_size(FI_VOID), 0);
	cr_expect_eq(ntx_atomic_dt_size(99), 0);
	cr_expect_eq(ntx_atomic_dt_size(-1), 0);
}

Test(atomic_ops, alignment)
{
	static const size_t align[NDT] = {
		1, 1, 2, 2, 4, 4, _Alignof(int64_t), _Alignof(uint64_t),
		_Alignof(float), _Alignof(double), _Alignof(fcplx),
		_Alignof(dcplx), _Alignof(long double), _Alignof(ldcplx),
		_Alignof(i128), _Alignof(u128),
	};

	for (int dt = 0; dt < NDT; dt++) {
		size_t a = align[dt];

		cr_expect(ntx_atomic_aligned(dt, 0x1000), "dt %d", dt);
		cr_expect(ntx_atomic_aligned(dt, 0x1000 + a), "dt %d", dt);
		if (a > 1) {
			cr_expect_not(ntx_atomic_aligned(dt, 0x1000 + a / 2),
				      "dt %d", dt);
			cr_expect_not(ntx_atomic_aligned(dt, 0x1001), "dt %d",
				      dt);
		}
	}
	cr_expect(ntx_atomic_aligned(FI_UINT8, 0x1003));
	cr_expect_not(ntx_atomic_aligned(FI_UINT32, 0x1002));
	cr_expect_not(ntx_atomic_aligned(FI_INT128, 0x1008));
	cr_expect(ntx_atomic_aligned(FI_FLOAT_COMPLEX, 0x1004)); /* 2 x 4 */
	cr_expect_not(ntx_atomic_aligned(FI_VOID, 0x1000));
	cr_expect_not(ntx_atomic_aligned(99, 0x1000));
}

/* ---- every supported operation against a reference -------------------------
 * Element i of target a, operand b and compare c is re + im*I (complex) or
 * re plus hi in the upper bits (integers) or hi/4 (reals), hi being the same
 * for a, b and c so that their order is that of re. The values make MIN,
 * MAX and every CSWAP take the branch for some elements and not for others,
 * put zeros in a and b for the logical ops, and a[3] = 0 + 3i is true. */

struct vals {
	double re[NEL], im[NEL];
};

static const struct vals va = { { 5, 2, 3, 0, 7 }, { 1, 0, 2, 3, 0 } };
static const struct vals vb = { { 3, 7, 1, 4, 0 }, { 0, 2, 0, 1, 0 } };
static const struct vals vc = { { 2, 2, 9, 0, 7 }, { 1, 1, 2, 3, 0 } };
static const int vhi[NEL] = { 1, 2, 3, 0, 0 };

#define REF_ALL                                                             \
	case FI_LOR:                                                        \
		return (a != 0) || (b != 0);                                \
	case FI_LAND:                                                       \
		return (a != 0) && (b != 0);                                \
	case FI_LXOR:                                                       \
		return (a != 0) != (b != 0);                                \
	case FI_ATOMIC_READ:                                                \
		return a;                                                   \
	case FI_ATOMIC_WRITE:                                               \
		return b;                                                   \
	case FI_CSWAP:                                                      \
		return c == a ? b : a;                                      \
	case FI_CSWAP_NE:                                                   \
		return c != a ? b : a;

#define REF_ORDER                                                           \
	case FI_MIN:                                                        \
		return b < a ? b : a;                                       \
	case FI_MAX:                                                        \
		return b > a ? b : a;                                       \
	case FI_CSWAP_LE:                                                   \
		return c <= a ? b : a;                                      \
	case FI_CSWAP_LT:                                                   \
		return c < a ? b : a;                                       \
	case FI_CSWAP_GE:                                                   \
		return c >= a ? b : a;                                      \
	case FI_CSWAP_GT:                                                   \
		return c > a ? b : a;

/* integers: sums and products wrap, computed unsigned (1u keeps narrow
 * types unsigned after promotion) */
#define TYPE_INT(name, T, UT)                                               \
	static T name##_val(double re, double im, int hi)                   \
	{                                                                   \
		return (T)((UT)(long long)re +                              \
			   ((UT)hi << (sizeof(T) * 8 - 3)));                \
	}                                                                   \
	static T name##_ref(enum fi_op op, T a, T b, T c)                   \
	{                                                                   \
		switch (op) {                                               \
			REF_ALL                                             \
			REF_ORDER                                           \
		case FI_SUM:                                                \
			return (T)(1u * (UT)a + (UT)b);                     \
		case FI_PROD:                                               \
			return (T)(1u * (UT)a * (UT)b);                     \
		case FI_BOR:                                                \
			return a | b;                                       \
		case FI_BAND:                                               \
			return a & b;                                       \
		case FI_BXOR:                                               \
			return a ^ b;                                       \
		case FI_MSWAP:                                              \
			return (b & c) | (a & ~c);                          \
		default:                                                    \
			cr_expect_fail("no reference for op %d", op);            \
			return 0;                                           \
		}                                                           \
	}                                                                   \
	TYPE_COMMON(name, T)

#define TYPE_REAL(name, T)                                                  \
	static T name##_val(double re, double im, int hi)                   \
	{                                                                   \
		return (T)re + (T)hi / 4;                                   \
	}                                                                   \
	static T name##_ref(enum fi_op op, T a, T b, T c)                   \
	{                                                                   \
		switch (op) {                                               \
			REF_ALL                                             \
			REF_ORDER                                           \
		case FI_SUM:                                                \
			return a + b;                                       \
		case FI_PROD:                                               \
			return a * b;                                       \
		default:                                                    \
			cr_expect_fail("no reference for op %d", op);            \
			return 0;                                           \
		}                                                           \
	}                                                                   \
	TYPE_COMMON(name, T)

#define TYPE_CPLX(name, T, RT)                                              \
	static T name##_val(double re, double im, int hi)                   \
	{                                                                   \
		return (RT)re + (RT)hi / 4 + (RT)im * I;                    \
	}                                                                   \
	static T name##_ref(enum fi_op op, T a, T b, T c)                   \
	{                                                                   \
		switch (op) {                                               \
			REF_ALL                                             \
		case FI_SUM:                                                \
			return a + b;                                       \
		case FI_PROD:                                               \
			return a * b;                                       \
		default:                                                    \
			cr_expect_fail("no reference for op %d", op);            \
			return 0;                                           \
		}                                                           \
	}                                                                   \
	TYPE_COMMON(name, T)

/* buffers are untyped and may be unaligned: memcpy in and out; equality
 * is by value (long double has padding bytes) */
#define TYPE_COMMON(name, T)                                                \
	static void name##_fill(void *p, const struct vals *v, int i)      \
	{                                                                   \
		T x = name##_val(v->re[i], v->im[i], vhi[i]);               \
		memcpy(p, &x, sizeof(T));                                   \
	}                                                                   \
	static void name##_step(enum fi_op op, const void *a, const void *b, \
				const void *c, void *out)                   \
	{                                                                   \
		T x, y, z, r;                                               \
		memcpy(&x, a, sizeof(T));                                   \
		memcpy(&y, b, sizeof(T));                                   \
		memcpy(&z, c, sizeof(T));                                   \
		r = name##_ref(op, x, y, z);                                \
		memcpy(out, &r, sizeof(T));                                 \
	}                                                                   \
	static bool name##_eq(const void *p, const void *q)                 \
	{                                                                   \
		T x, y;                                                     \
		memcpy(&x, p, sizeof(T));                                   \
		memcpy(&y, q, sizeof(T));                                   \
		return x == y;                                              \
	}

TYPE_INT(i8, int8_t, uint8_t)
TYPE_INT(u8, uint8_t, uint8_t)
TYPE_INT(i16, int16_t, uint16_t)
TYPE_INT(u16, uint16_t, uint16_t)
TYPE_INT(i32, int32_t, uint32_t)
TYPE_INT(u32, uint32_t, uint32_t)
TYPE_INT(i64, int64_t, uint64_t)
TYPE_INT(u64, uint64_t, uint64_t)
TYPE_INT(i128, i128, u128)
TYPE_INT(u128, u128, u128)
TYPE_REAL(flt, float)
TYPE_REAL(dbl, double)
TYPE_REAL(ldb, long double)
TYPE_CPLX(fcx, fcplx, float)
TYPE_CPLX(dcx, dcplx, double)
TYPE_CPLX(ldcx, ldcplx, long double)

struct tdesc {
	size_t size;
	void (*fill)(void *p, const struct vals *v, int i);
	void (*step)(enum fi_op op, const void *a, const void *b,
		     const void *c, void *out);
	bool (*eq)(const void *p, const void *q);
};

#define TD(name, type) { sizeof(type), name##_fill, name##_step, name##_eq }
static const struct tdesc types[NDT] = {
	[FI_INT8] = TD(i8, int8_t),	   [FI_UINT8] = TD(u8, uint8_t),
	[FI_INT16] = TD(i16, int16_t),	   [FI_UINT16] = TD(u16, uint16_t),
	[FI_INT32] = TD(i32, int32_t),	   [FI_UINT32] = TD(u32, uint32_t),
	[FI_INT64] = TD(i64, int64_t),	   [FI_UINT64] = TD(u64, uint64_t),
	[FI_FLOAT] = TD(flt, float),	   [FI_DOUBLE] = TD(dbl, double),
	[FI_FLOAT_COMPLEX] = TD(fcx, fcplx), [FI_DOUBLE_COMPLEX] = TD(dcx, dcplx),
	[FI_LONG_DOUBLE] = TD(ldb, long double),
	[FI_LONG_DOUBLE_COMPLEX] = TD(ldcx, ldcplx),
	[FI_INT128] = TD(i128, i128),	   [FI_UINT128] = TD(u128, u128),
};
#undef TD

/* One call on NEL elements; operand, compare and result sit one byte off
 * alignment, as in a packet. Element NEL of the target must stay as it is. */
static void run_one(enum ntx_atomic_fn fn, enum fi_datatype dt, enum fi_op op)
{
	const struct tdesc *t = &types[dt];
	size_t sz = t->size;
	_Alignas(64) uint8_t dst[(NEL + 1) * MAXSZ];
	uint8_t old[(NEL + 1) * MAXSZ], want[NEL * MAXSZ];
	uint8_t ob[NEL * MAXSZ + 1], cb[NEL * MAXSZ + 1], rb[NEL * MAXSZ + 1];
	uint8_t *o = ob + 1, *c = cb + 1, *r = rb + 1;

	for (int i = 0; i < NEL; i++) {
		t->fill(dst + i * sz, &va, i);
		t->fill(o + i * sz, &vb, i);
		t->fill(c + i * sz, &vc, i);
		t->step(op, dst + i * sz, o + i * sz, c + i * sz,
			want + i * sz);
	}
	t->fill(dst + NEL * sz, &vc, 2);
	memcpy(old, dst, (NEL + 1) * sz);
	memset(rb, 0xa5, sizeof(rb));
	ntx_atomic_exec(dt, op, dst, op == FI_ATOMIC_READ ? NULL : o,
			fn == NTX_AFN_COMPARE ? c : NULL,
			fn == NTX_AFN_BASE ? NULL : r, NEL);
	for (int i = 0; i < NEL; i++) {
		cr_expect(t->eq(dst + i * sz, want + i * sz),
			  "%s dt %d op %d element %d: target", fn_names[fn],
			  dt, op, i);
		if (fn != NTX_AFN_BASE)
			cr_expect(t->eq(r + i * sz, old + i * sz),
				  "%s dt %d op %d element %d: result",
				  fn_names[fn], dt, op, i);
	}
	cr_expect(!memcmp(dst + NEL * sz, old + NEL * sz, sz),
		  "%s dt %d op %d: wrote past count", fn_names[fn], dt, op);
}

Test(atomic_ops, every_supported_op)
{
	int n = 0;

	for (int fn = 0; fn < 3; fn++)
		for (int dt = 0; dt < NDT; dt++)
			for (int op = 0; op < FI_ATOMIC_OP_LAST; op++)
				if (ntx_atomic_supported(fn, dt, op)) {
					run_one(fn, dt, op);
					n++;
				}
	cr_expect_eq(n, 414);
}

/* The reference itself: the branches the values are meant to exercise. */
Test(atomic_ops, values_cover_both_branches)
{
	static const enum fi_op ops[] = { FI_MIN, FI_MAX, FI_CSWAP,
					  FI_CSWAP_NE, FI_CSWAP_LE,
					  FI_CSWAP_LT, FI_CSWAP_GE,
					  FI_CSWAP_GT };

	for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
		for (int dt = 0; dt < NDT; dt++) {
			int taken = 0;

			if (!ntx_atomic_supported(NTX_AFN_FETCH, dt, ops[k]) &&
			    !ntx_atomic_supported(NTX_AFN_COMPARE, dt, ops[k]))
				continue;
			for (int i = 0; i < NEL; i++) {
				uint8_t a[MAXSZ], b[MAXSZ], c[MAXSZ], w[MAXSZ];

				types[dt].fill(a, &va, i);
				types[dt].fill(b, &vb, i);
				types[dt].fill(c, &vc, i);
				types[dt].step(ops[k], a, b, c, w);
				taken += !types[dt].eq(w, a);
			}
			cr_expect(taken > 0 && taken < NEL, "dt %d op %d: %d",
				  dt, ops[k], taken);
		}
}

/* A misaligned float complex (4- but not 8-aligned) still computes. */
Test(atomic_ops, float_complex_on_4_byte_boundary)
{
	_Alignas(8) float buf[4] = { 0 };
	fcplx one = 1 + 2 * I, got, old = -1;

	memcpy(&buf[1], &one, sizeof(one));
	ntx_atomic_exec(FI_FLOAT_COMPLEX, FI_SUM, &buf[1], &one, NULL, &old, 1);
	memcpy(&got, &buf[1], sizeof(got));
	cr_expect(got == 2 + 4 * I);
	cr_expect(old == one);
}

/* ---- atomicity ----------------------------------------------------------- */

#define NTHR 4
#define NITER 100000

/* without it a thread may finish its loop before the next one starts */
static pthread_barrier_t start;

static void start_threads(pthread_t *th, void *(*fn)(void *), void *arg,
			  void *(*fn2)(void *), void *arg2)
{
	cr_assert_eq(pthread_barrier_init(&start, NULL, NTHR), 0);
	for (int i = 0; i < NTHR; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, i & 1 ? fn2 : fn,
					    i & 1 ? arg2 : arg), 0);
}

static void join_threads(pthread_t *th)
{
	for (int i = 0; i < NTHR; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&start);
}

struct sum_arg {
	enum fi_datatype dt;
	void *dst;
	const void *one;
};

static void *sum_thread(void *p)
{
	const struct sum_arg *a = p;
	uint8_t old[MAXSZ];

	pthread_barrier_wait(&start);
	/* half the calls fetch, so both forms race */
	for (int i = 0; i < NITER; i++)
		ntx_atomic_exec(a->dt, FI_SUM, a->dst, a->one, NULL,
				i & 1 ? old : NULL, 1);
	return NULL;
}

static void race_sum(enum fi_datatype dt, void *dst, const void *one)
{
	struct sum_arg arg = { dt, dst, one };
	pthread_t th[NTHR];

	start_threads(th, sum_thread, &arg, sum_thread, &arg);
	join_threads(th);
}

Test(atomic_ops, threads_sum_uint64)
{
	_Alignas(8) uint64_t v = 0, one = 1;

	race_sum(FI_UINT64, &v, &one);
	cr_expect_eq(v, (uint64_t)NTHR * NITER);
}

Test(atomic_ops, threads_sum_double)
{
	_Alignas(8) double v = 0, one = 1;

	race_sum(FI_DOUBLE, &v, &one);
	cr_expect_eq(v, (double)NTHR * NITER);
}

Test(atomic_ops, threads_sum_long_double)
{
	_Alignas(16) long double v = 0, one = 1;

	race_sum(FI_LONG_DOUBLE, &v, &one);
	cr_expect(v == (long double)NTHR * NITER);
}

Test(atomic_ops, threads_sum_int128)
{
	_Alignas(16) i128 v = (i128)1 << 100, one = 1;

	race_sum(FI_INT128, &v, &one);
	cr_expect(v == ((i128)1 << 100) + NTHR * NITER);
}

static void *cswap_thread(void *p)
{
	int32_t *v = p;

	pthread_barrier_wait(&start);
	for (int i = 0; i < NITER; i++) {
		int32_t cur, next, old;

		ntx_atomic_exec(FI_INT32, FI_ATOMIC_READ, v, NULL, NULL, &cur,
				1);
		for (;;) {
			next = cur + 1;
			ntx_atomic_exec(FI_INT32, FI_CSWAP, v, &next, &cur,
					&old, 1);
			if (old == cur)
				break;
			cur = old; /* lost the race: retry from what won */
		}
	}
	return NULL;
}

Test(atomic_ops, threads_cswap_increment_int32)
{
	_Alignas(4) int32_t v = 0;
	pthread_t th[NTHR];

	start_threads(th, cswap_thread, &v, cswap_thread, &v);
	join_threads(th);
	cr_expect_eq(v, NTHR * NITER);
}

/* fetch-and-add and the compare-and-swap loop (PROD by 1 is a no-op that
 * still writes) on one word: neither may lose the other's update */
static void *prod_thread(void *p)
{
	uint64_t one = 1;

	pthread_barrier_wait(&start);
	for (int i = 0; i < NITER; i++)
		ntx_atomic_exec(FI_UINT64, FI_PROD, p, &one, NULL, NULL, 1);
	return NULL;
}

Test(atomic_ops, threads_add_against_cas_loop)
{
	_Alignas(8) uint64_t v = 0, one = 1;
	struct sum_arg arg = { FI_UINT64, &v, &one };
	pthread_t th[NTHR];

	start_threads(th, sum_thread, &arg, prod_thread, &v);
	join_threads(th);
	cr_expect_eq(v, (uint64_t)NTHR / 2 * NITER);
}
