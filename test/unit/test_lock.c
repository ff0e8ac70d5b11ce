/* Unit tests of the lock contracts (DESIGN §3, locks): the helpers of
 * ntx_core.h record what a thread holds, a broken contract or a lock taken
 * out of rank asserts, and a lockless domain holds everything trivially.
 * test_unit builds ntx_lock.c with NTX_LOCK_CHECK (test/Makefile.inc). */
#include <criterion/criterion.h>
#include <signal.h>

#include "ntx/ntx_core.h"

#ifdef NTX_LOCK_CHECK
static struct ntx_domain dom;
static pthread_mutex_t scope_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cq_lock = PTHREAD_MUTEX_INITIALIZER;

static void setup(void)
{
	memset(&dom, 0, sizeof(dom));
	pthread_mutex_init(&dom.lock, NULL);
	pthread_mutex_init(&dom.mr_lock, NULL);
}

TestSuite(lock, .init = setup);

Test(lock, held_while_taken_in_rank)
{
	cr_assert(!ntx_lock_held(&dom.lock));
	ntx_domain_lock(&dom);
	ntx_cmutex_lock_rank(&dom, &scope_lock, NTX_LOCK_SCOPE);
	ntx_mutex_lock(&dom, &dom.mr_lock);
	ntx_cmutex_lock(&dom, &cq_lock);
	cr_assert(ntx_lock_held(&dom.lock));
	cr_assert(ntx_lock_held(&dom.mr_lock));
	ntx_assert_domain_locked(&dom);
	ntx_assert_cmutex_locked(&dom, &cq_lock);
	/* dropped out of order: the record follows */
	ntx_domain_unlock(&dom);
	cr_assert(!ntx_lock_held(&dom.lock));
	cr_assert(ntx_lock_held(&scope_lock));
	ntx_cmutex_unlock(&dom, &cq_lock);
	ntx_mutex_unlock(&dom, &dom.mr_lock);
	ntx_cmutex_unlock(&dom, &scope_lock);
	cr_assert(!ntx_lock_held(&scope_lock));
}

Test(lock, skipped_locks_hold_trivially)
{
	dom.lockless = dom.ep_lockless = true;
	ntx_domain_lock(&dom);
	cr_assert(!ntx_lock_held(&dom.lock), "a lockless domain takes none");
	ntx_assert_domain_locked(&dom);
	ntx_assert_mutex_locked(&dom, &dom.mr_lock);
	ntx_domain_unlock(&dom);
	/* FI_THREAD_COMPLETION: only endpoint, scope and CQ locks skipped */
	dom.lockless = false;
	ntx_assert_cmutex_locked(&dom, &cq_lock);
}

Test(lock, broken_contract_asserts, .signal = SIGABRT)
{
	ntx_assert_domain_locked(&dom);
}

Test(lock, out_of_rank_asserts, .signal = SIGABRT)
{
	ntx_mutex_lock(&dom, &dom.mr_lock);
	ntx_domain_lock(&dom); /* the domain lock under mr_lock */
}

Test(lock, two_leaves_assert, .signal = SIGABRT)
{
	static pthread_mutex_t av_lock = PTHREAD_MUTEX_INITIALIZER;

	ntx_cmutex_lock(&dom, &cq_lock);
	ntx_mutex_lock(&dom, &av_lock);
}
#endif /* NTX_LOCK_CHECK */
