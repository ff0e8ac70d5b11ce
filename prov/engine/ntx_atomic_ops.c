/*
 * The operations of fi_atomic(3) on local memory. Types of up to 8 bytes
 * are updated with one atomic instruction where the CPU has it and a
 * compare-and-swap loop on their bit pattern otherwise, wider
 * ones (128-bit integers, long double, double and long double complex)
 * under a striped lock, so every element update is atomic against every
 * other one in the process, whichever endpoint or thread runs it.
 */
#include "config.h"
#include <assert.h>
#include <complex.h>
#include <pthread.h>
#include <string.h>

#include "ntx/ntx_atomic.h"

typedef float _Complex ntx_fcplx;
typedef double _Complex ntx_dcplx;
typedef long double _Complex ntx_ldcplx;
typedef __int128 ntx_i128;
typedef unsigned __int128 ntx_u128;

/* ---- what is defined where ------------------------------------------------ */

enum ntx_dt_class { NTX_DT_NONE, NTX_DT_INT, NTX_DT_FLOAT, NTX_DT_COMPLEX };

struct ntx_dt_desc {
	uint8_t size, align, cls;
};

static const struct ntx_dt_desc ntx_dts[] = {
	[FI_INT8] = { 1, 1, NTX_DT_INT },
	[FI_UINT8] = { 1, 1, NTX_DT_INT },
	[FI_INT16] = { 2, 2, NTX_DT_INT },
	[FI_UINT16] = { 2, 2, NTX_DT_INT },
	[FI_INT32] = { 4, 4, NTX_DT_INT },
	[FI_UINT32] = { 4, 4, NTX_DT_INT },
	[FI_INT64] = { 8, 8, NTX_DT_INT },
	[FI_UINT64] = { 8, 8, NTX_DT_INT },
	[FI_FLOAT] = { sizeof(float), _Alignof(float), NTX_DT_FLOAT },
	[FI_DOUBLE] = { sizeof(double), _Alignof(double), NTX_DT_FLOAT },
	[FI_FLOAT_COMPLEX] = { sizeof(ntx_fcplx), _Alignof(ntx_fcplx),
			       NTX_DT_COMPLEX },
	[FI_DOUBLE_COMPLEX] = { sizeof(ntx_dcplx), _Alignof(ntx_dcplx),
				NTX_DT_COMPLEX },
	[FI_LONG_DOUBLE] = { sizeof(long double), _Alignof(long double),
			     NTX_DT_FLOAT },
	[FI_LONG_DOUBLE_COMPLEX] = { sizeof(ntx_ldcplx), _Alignof(ntx_ldcplx),
				     NTX_DT_COMPLEX },
	[FI_INT128] = { 16, _Alignof(ntx_i128), NTX_DT_INT },
	[FI_UINT128] = { 16, _Alignof(ntx_u128), NTX_DT_INT },
};
#define NTX_NDT (sizeof(ntx_dts) / sizeof(ntx_dts[0]))

static const struct ntx_dt_desc *ntx_dt(enum fi_datatype dt)
{
	if ((unsigned)dt >= NTX_NDT || !ntx_dts[dt].size)
		return NULL;
	return &ntx_dts[dt];
}

size_t ntx_atomic_dt_size(enum fi_datatype dt)
{
	const struct ntx_dt_desc *d = ntx_dt(dt);

	return d ? d->size : 0;
}

bool ntx_atomic_aligned(enum fi_datatype dt, uint64_t addr)
{
	const struct ntx_dt_desc *d = ntx_dt(dt);

	return d && addr % d->align == 0;
}

bool ntx_atomic_supported(enum ntx_atomic_fn fn, enum fi_datatype dt,
			  enum fi_op op)
{
	const struct ntx_dt_desc *d = ntx_dt(dt);
	bool in_family;

	if (!d || (unsigned)op >= FI_ATOMIC_OP_LAST)
		return false;
	switch (fn) {
	case NTX_AFN_BASE:
		in_family = op <= FI_BXOR || op == FI_ATOMIC_WRITE;
		break;
	case NTX_AFN_FETCH:
		in_family = op <= FI_ATOMIC_WRITE;
		break;
	case NTX_AFN_COMPARE:
		in_family = op >= FI_CSWAP;
		break;
	default:
		return false;
	}
	if (!in_family)
		return false;
	switch (op) {
	case FI_MIN:
	case FI_MAX:
	case FI_CSWAP_LE:
	case FI_CSWAP_LT:
	case FI_CSWAP_GE:
	case FI_CSWAP_GT:
		return d->cls != NTX_DT_COMPLEX; /* complex has no order */
	case FI_BOR:
	case FI_BAND:
	case FI_BXOR:
	case FI_MSWAP:
		return d->cls == NTX_DT_INT;
	default:
		return true;
	}
}

/* ---- the operations, per type ----------------------------------------------
 * ntx_apply_X(op, a = target value, b = operand, c = compare, &new)
 * returns whether the target is written (a failed compare, a MIN that is
 * not taken and a read leave it alone). */

#define NTX_CASES_ALL                                                       \
	case FI_SUM:                                                        \
		*out = a + b;                                               \
		return true;                                                \
	case FI_PROD:                                                       \
		*out = a * b;                                               \
		return true;                                                \
	case FI_LOR:                                                        \
		*out = (a != 0) || (b != 0);                                \
		return true;                                                \
	case FI_LAND:                                                       \
		*out = (a != 0) && (b != 0);                                \
		return true;                                                \
	case FI_LXOR:                                                       \
		*out = (a != 0) != (b != 0);                                \
		return true;                                                \
	case FI_ATOMIC_WRITE:                                               \
		*out = b;                                                   \
		return true;                                                \
	case FI_CSWAP:                                                      \
		*out = b;                                                   \
		return c == a;                                              \
	case FI_CSWAP_NE:                                                   \
		*out = b;                                                   \
		return c != a;

#define NTX_CASES_ORDER                                                     \
	case FI_MIN:                                                        \
		*out = b;                                                   \
		return b < a;                                               \
	case FI_MAX:                                                        \
		*out = b;                                                   \
		return b > a;                                               \
	case FI_CSWAP_LE:                                                   \
		*out = b;                                                   \
		return c <= a;                                              \
	case FI_CSWAP_LT:                                                   \
		*out = b;                                                   \
		return c < a;                                               \
	case FI_CSWAP_GE:                                                   \
		*out = b;                                                   \
		return c >= a;                                              \
	case FI_CSWAP_GT:                                                   \
		*out = b;                                                   \
		return c > a;

#define NTX_CASES_BITS                                                      \
	case FI_BOR:                                                        \
		*out = a | b;                                               \
		return true;                                                \
	case FI_BAND:                                                       \
		*out = a & b;                                               \
		return true;                                                \
	case FI_BXOR:                                                       \
		*out = a ^ b;                                               \
		return true;                                                \
	case FI_MSWAP:                                                      \
		*out = (b & c) | (a & ~c);                                  \
		return true;

/* Integers add and multiply in their unsigned type (wrap-around, never
 * UB; "* 1u" keeps types narrower than int unsigned after promotion) and
 * compare in their own. */
#define NTX_APPLY_INT(name, T, UT)                                          \
	static bool ntx_apply_bits_##name(enum fi_op op, UT a, UT b, UT c, \
					  UT *out)                          \
	{                                                                   \
		switch (op) {                                               \
			NTX_CASES_BITS                                      \
		case FI_SUM:                                                \
			*out = (UT)(a + 0u + b);                            \
			return true;                                        \
		default: /* FI_PROD */                                      \
			*out = (UT)(a * 1u * b);                            \
			return true;                                        \
		}                                                           \
	}                                                                   \
	static bool ntx_apply_##name(enum fi_op op, T a, T b, T c, T *out) \
	{                                                                   \
		UT r;                                                       \
		switch (op) {                                               \
		case FI_SUM:                                                \
		case FI_PROD:                                               \
		case FI_BOR:                                                \
		case FI_BAND:                                               \
		case FI_BXOR:                                               \
		case FI_MSWAP:                                              \
			ntx_apply_bits_##name(op, (UT)a, (UT)b, (UT)c, &r); \
			*out = (T)r;                                        \
			return true;                                        \
			NTX_CASES_ORDER                                     \
		default:                                                    \
			return ntx_apply_common_##name(op, a, b, c, out);   \
		}                                                           \
	}

#define NTX_APPLY_COMMON(name, T)                                           \
	static bool ntx_apply_common_##name(enum fi_op op, T a, T b, T c,  \
					    T *out)                         \
	{                                                                   \
		switch (op) {                                               \
			NTX_CASES_ALL                                       \
		default:                                                    \
			return false; /* FI_ATOMIC_READ */                  \
		}                                                           \
	}

#define NTX_APPLY_FLOAT(name, T)                                            \
	static bool ntx_apply_##name(enum fi_op op, T a, T b, T c, T *out) \
	{                                                                   \
		switch (op) {                                               \
			NTX_CASES_ALL                                       \
			NTX_CASES_ORDER                                     \
		default:                                                    \
			return false;                                       \
		}                                                           \
	}

#define NTX_APPLY_COMPLEX(name, T)                                          \
	static bool ntx_apply_##name(enum fi_op op, T a, T b, T c, T *out) \
	{                                                                   \
		switch (op) {                                               \
			NTX_CASES_ALL                                       \
		default:                                                    \
			return false;                                       \
		}                                                           \
	}

/* ---- atomicity ---------------------------------------------------------------- */

#define NTX_STRIPES 64
static pthread_mutex_t ntx_stripes[NTX_STRIPES] = {
	[0 ... NTX_STRIPES - 1] = PTHREAD_MUTEX_INITIALIZER
};

static pthread_mutex_t *ntx_stripe(const void *p)
{
	return &ntx_stripes[((uintptr_t)p >> 4) % NTX_STRIPES];
}

/* Under the element's stripe lock. */
#define NTX_EXEC_LOCKED(name, T)                                            \
	static void ntx_exec_locked_##name(enum fi_op op, void *dst,      \
					   const void *o, const void *c,   \
					   void *res)                      \
	{                                                                   \
		pthread_mutex_t *l = ntx_stripe(dst);                       \
		T a, b = 0, cv = 0, n;                                      \
		if (o)                                                      \
			memcpy(&b, o, sizeof(T));                           \
		if (c)                                                      \
			memcpy(&cv, c, sizeof(T));                          \
		pthread_mutex_lock(l);                                      \
		memcpy(&a, dst, sizeof(T));                                 \
		if (ntx_apply_##name(op, a, b, cv, &n))                     \
			memcpy(dst, &n, sizeof(T));                         \
		pthread_mutex_unlock(l);                                    \
		if (res)                                                    \
			memcpy(res, &a, sizeof(T));                         \
	}

/* One instruction where the hardware has it: load for a read, exchange
 * for a write and, on integers, fetch-and-add/or/and/xor (two's complement
 * makes one add right for signed and unsigned). Returns false when the op
 * needs the compare-and-swap loop. */
#define NTX_FAST(U)                                                         \
	static bool ntx_fast_##U(enum fi_op op, U *p, U b, U *old,         \
				 bool is_int)                               \
	{                                                                   \
		if (!is_int && op != FI_ATOMIC_READ &&                      \
		    op != FI_ATOMIC_WRITE)                                  \
			return false;                                       \
		switch (op) {                                               \
		case FI_ATOMIC_READ:                                        \
			*old = __atomic_load_n(p, __ATOMIC_ACQUIRE);        \
			return true;                                        \
		case FI_ATOMIC_WRITE:                                       \
			*old = __atomic_exchange_n(p, b, __ATOMIC_ACQ_REL); \
			return true;                                        \
		case FI_SUM:                                                \
			*old = __atomic_fetch_add(p, b, __ATOMIC_ACQ_REL);  \
			return true;                                        \
		case FI_BOR:                                                \
			*old = __atomic_fetch_or(p, b, __ATOMIC_ACQ_REL);   \
			return true;                                        \
		case FI_BAND:                                               \
			*old = __atomic_fetch_and(p, b, __ATOMIC_ACQ_REL);  \
			return true;                                        \
		case FI_BXOR:                                               \
			*old = __atomic_fetch_xor(p, b, __ATOMIC_ACQ_REL);  \
			return true;                                        \
		default:                                                    \
			return false;                                       \
		}                                                           \
	}

NTX_FAST(uint8_t)
NTX_FAST(uint16_t)
NTX_FAST(uint32_t)
NTX_FAST(uint64_t)

/* Otherwise a compare-and-swap loop on the bit pattern (U, of T's size);
 * an element not aligned for U (float complex is 4-aligned) takes the
 * lock instead: one address always takes the same path. */
#define NTX_EXEC_CAS(name, T, U, is_int)                                    \
	NTX_EXEC_LOCKED(name, T)                                            \
	static_assert(sizeof(T) == sizeof(U), "bit pattern of " #T);       \
	static void ntx_exec_##name(enum fi_op op, void *dst, const void *o, \
				    const void *c, void *res)              \
	{                                                                   \
		T a, b, cv = 0, n;                                          \
		U ob, nb, bb = 0;                                           \
		if ((uintptr_t)dst % sizeof(U)) {                           \
			ntx_exec_locked_##name(op, dst, o, c, res);         \
			return;                                             \
		}                                                           \
		if (o)                                                      \
			memcpy(&bb, o, sizeof(U));                          \
		if (ntx_fast_##U(op, dst, bb, &ob, is_int))                 \
			goto done;                                          \
		memcpy(&b, &bb, sizeof(T));                                 \
		if (c)                                                      \
			memcpy(&cv, c, sizeof(T));                          \
		ob = __atomic_load_n((U *)dst, __ATOMIC_ACQUIRE);           \
		do {                                                        \
			memcpy(&a, &ob, sizeof(T));                         \
			if (!ntx_apply_##name(op, a, b, cv, &n))            \
				break; /* nothing to write */               \
			memcpy(&nb, &n, sizeof(T));                         \
		} while (!__atomic_compare_exchange_n((U *)dst, &ob, nb,    \
						      false,                \
						      __ATOMIC_ACQ_REL,     \
						      __ATOMIC_ACQUIRE));   \
	done: /* ob is what dst held before, in every case */               \
		if (res)                                                    \
			memcpy(res, &ob, sizeof(U));                        \
	}

#define NTX_INT(name, T, UT)                                                \
	NTX_APPLY_COMMON(name, T)                                           \
	NTX_APPLY_INT(name, T, UT)                                          \
	NTX_EXEC_CAS(name, T, UT, true)

NTX_INT(i8, int8_t, uint8_t)
NTX_INT(u8, uint8_t, uint8_t)
NTX_INT(i16, int16_t, uint16_t)
NTX_INT(u16, uint16_t, uint16_t)
NTX_INT(i32, int32_t, uint32_t)
NTX_INT(u32, uint32_t, uint32_t)
NTX_INT(i64, int64_t, uint64_t)
NTX_INT(u64, uint64_t, uint64_t)
NTX_APPLY_FLOAT(flt, float)
NTX_EXEC_CAS(flt, float, uint32_t, false)
NTX_APPLY_FLOAT(dbl, double)
NTX_EXEC_CAS(dbl, double, uint64_t, false)
NTX_APPLY_COMPLEX(fcx, ntx_fcplx)
NTX_EXEC_CAS(fcx, ntx_fcplx, uint64_t, false)
NTX_APPLY_COMPLEX(dcx, ntx_dcplx)
NTX_EXEC_LOCKED(dcx, ntx_dcplx)
NTX_APPLY_FLOAT(ldb, long double)
NTX_EXEC_LOCKED(ldb, long double)
NTX_APPLY_COMPLEX(ldcx, ntx_ldcplx)
NTX_EXEC_LOCKED(ldcx, ntx_ldcplx)
NTX_APPLY_COMMON(i128, ntx_i128)
NTX_APPLY_INT(i128, ntx_i128, ntx_u128)
NTX_EXEC_LOCKED(i128, ntx_i128)
NTX_APPLY_COMMON(u128, ntx_u128)
NTX_APPLY_INT(u128, ntx_u128, ntx_u128)
NTX_EXEC_LOCKED(u128, ntx_u128)

typedef void (*ntx_exec_fn)(enum fi_op op, void *dst, const void *o,
			    const void *c, void *res);

static const ntx_exec_fn ntx_exec_fns[NTX_NDT] = {
	[FI_INT8] = ntx_exec_i8,
	[FI_UINT8] = ntx_exec_u8,
	[FI_INT16] = ntx_exec_i16,
	[FI_UINT16] = ntx_exec_u16,
	[FI_INT32] = ntx_exec_i32,
	[FI_UINT32] = ntx_exec_u32,
	[FI_INT64] = ntx_exec_i64,
	[FI_UINT64] = ntx_exec_u64,
	[FI_FLOAT] = ntx_exec_flt,
	[FI_DOUBLE] = ntx_exec_dbl,
	[FI_FLOAT_COMPLEX] = ntx_exec_fcx,
	[FI_DOUBLE_COMPLEX] = ntx_exec_locked_dcx,
	[FI_LONG_DOUBLE] = ntx_exec_locked_ldb,
	[FI_LONG_DOUBLE_COMPLEX] = ntx_exec_locked_ldcx,
	[FI_INT128] = ntx_exec_locked_i128,
	[FI_UINT128] = ntx_exec_locked_u128,
};

void ntx_atomic_exec(enum fi_datatype dt, enum fi_op op, void *dst,
		     const void *operand, const void *compare, void *result,
		     size_t count)
{
	size_t size = ntx_atomic_dt_size(dt);
	ntx_exec_fn fn;

	/* the caller checked the op against the call's family */
	assert(ntx_atomic_supported(NTX_AFN_FETCH, dt, op) ||
	       ntx_atomic_supported(NTX_AFN_COMPARE, dt, op));
	fn = ntx_exec_fns[dt];

	for (size_t i = 0, off = 0; i < count; i++, off += size)
		fn(op, (uint8_t *)dst + off,
		   operand ? (const uint8_t *)operand + off : NULL,
		   compare ? (const uint8_t *)compare + off : NULL,
		   result ? (uint8_t *)result + off : NULL);
}
