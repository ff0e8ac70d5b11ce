/*
 * Lock contracts in debug builds (DESIGN §3, locks): each thread keeps the
 * locks of the domain's objects it holds, taken through the ntx_*_lock
 * helpers of ntx_core.h, so that "X lock held" can be asserted, and
 * their ranks, so that a lock taken out of order asserts. Lock-checking
 * builds only (NTX_LOCK_CHECK, configure --enable-lock-check).
 */
#include "config.h"

#include "ntx/ntx_core.h"

#ifdef NTX_LOCK_CHECK
/* The deepest nesting is the domain or a scope lock, an endpoint's, the
 * MR table's and a CQ's: room to spare. */
#define NTX_LOCKS_HELD_MAX 16

static _Thread_local struct {
	const pthread_mutex_t *m[NTX_LOCKS_HELD_MAX];
	enum ntx_lock_rank rank[NTX_LOCKS_HELD_MAX];
	unsigned n;
} ntx_held;

bool ntx_lock_held(const pthread_mutex_t *m)
{
	for (unsigned i = 0; i < ntx_held.n; i++)
		if (ntx_held.m[i] == m)
			return true;
	return false;
}

/* Every lock held ranks below the one taken: the order of DESIGN §3
 * (which also catches a thread taking a lock it holds). */
void ntx_lock_note_take(const pthread_mutex_t *m, enum ntx_lock_rank rank)
{
	for (unsigned i = 0; i < ntx_held.n; i++)
		assert(ntx_held.rank[i] < rank);
	assert(ntx_held.n < NTX_LOCKS_HELD_MAX);
	ntx_held.m[ntx_held.n] = m;
	ntx_held.rank[ntx_held.n++] = rank;
}

/* Locks need not be dropped in the order they were taken. */
void ntx_lock_note_drop(const pthread_mutex_t *m)
{
	for (unsigned i = ntx_held.n; i-- > 0;) {
		if (ntx_held.m[i] == m) {
			ntx_held.n--;
			ntx_held.m[i] = ntx_held.m[ntx_held.n];
			ntx_held.rank[i] = ntx_held.rank[ntx_held.n];
			return;
		}
	}
	assert(!"dropping a lock this thread does not hold");
}
#endif /* NTX_LOCK_CHECK */
