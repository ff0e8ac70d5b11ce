/*
 * Execution of fi_atomic(3) operations on local memory: which operation is
 * defined for which datatype, and running it element by element, atomic
 * against every other call in the process. The target side of the atomic
 * protocol calls it after checking key, range and access.
 */
#ifndef NTX_ATOMIC_H
#define NTX_ATOMIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fi_atomic.h>

/* the three families of fi_atomic calls */
enum ntx_atomic_fn { NTX_AFN_BASE, NTX_AFN_FETCH, NTX_AFN_COMPARE };

/* Bytes of one element, 0 for a datatype ntx does not know. */
size_t ntx_atomic_dt_size(enum fi_datatype dt);
/* Whether op is defined for dt in the given family. */
bool ntx_atomic_supported(enum ntx_atomic_fn fn, enum fi_datatype dt,
			  enum fi_op op);
/* Natural alignment of dt at addr. */
bool ntx_atomic_aligned(enum fi_datatype dt, uint64_t addr);
/* Runs op on count elements at dst (aligned, supported). operand: count
 * elements (NULL for FI_ATOMIC_READ); compare: the compare values, or the
 * mask of FI_MSWAP; result, when not NULL, receives the values dst held
 * before. operand, compare and result may be unaligned. */
void ntx_atomic_exec(enum fi_datatype dt, enum fi_op op, void *dst,
		     const void *operand, const void *compare, void *result,
		     size_t count);

#endif /* NTX_ATOMIC_H */
