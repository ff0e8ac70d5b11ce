/* The growable id table (prov/core/ntx_idtab.c, DESIGN §3). */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "config.h"
#include "ntx/ntx_core.h"

static int vals[4096];

Test(idtab, empty_table_gets_null)
{
	struct ntx_idtab t = { 0 };

	cr_assert_null(ntx_idtab_get(&t, 0));
	cr_assert_null(ntx_idtab_get(&t, UINT64_MAX));
	cr_assert_null(ntx_idtab_clear(&t, 3));
	cr_assert_eq(t.used, 0);
	ntx_idtab_fini(&t);
}

Test(idtab, alloc_takes_lowest_free_slot)
{
	struct ntx_idtab t = { 0 };
	uint32_t id;

	for (uint32_t i = 0; i < 10; i++) {
		cr_assert_eq(ntx_idtab_alloc(&t, &vals[i], &id), 0);
		cr_assert_eq(id, i);
	}
	cr_assert_eq(ntx_idtab_clear(&t, 7), &vals[7]);
	cr_assert_eq(ntx_idtab_clear(&t, 3), &vals[3]);
	cr_assert_null(ntx_idtab_clear(&t, 3), "cleared twice");
	cr_assert_eq(t.used, 8);
	cr_assert_eq(ntx_idtab_alloc(&t, &vals[100], &id), 0);
	cr_assert_eq(id, 3);
	cr_assert_eq(ntx_idtab_alloc(&t, &vals[101], &id), 0);
	cr_assert_eq(id, 7);
	cr_assert_eq(ntx_idtab_alloc(&t, &vals[102], &id), 0);
	cr_assert_eq(id, 10);
	cr_assert_eq(ntx_idtab_get(&t, 7), &vals[101]);
	ntx_idtab_fini(&t);
	cr_assert_null(t.slot);
	cr_assert_eq(t.cap, 0);
}

Test(idtab, growth_keeps_entries_and_zeroes_new_slots)
{
	struct ntx_idtab t = { 0 };
	uint32_t id;

	for (uint32_t i = 0; i < 1000; i++)
		cr_assert_eq(ntx_idtab_alloc(&t, &vals[i], &id), 0);
	cr_assert_geq(t.cap, 1000);
	cr_assert_eq(t.cap & (t.cap - 1), 0, "capacity doubles: %u", t.cap);
	for (uint32_t i = 0; i < 1000; i++)
		cr_assert_eq(ntx_idtab_get(&t, i), &vals[i]);
	for (uint32_t i = 1000; i < t.cap; i++)
		cr_assert_null(ntx_idtab_get(&t, i));
	ntx_idtab_fini(&t);
}

Test(idtab, set_far_index_grows_sparse)
{
	struct ntx_idtab t = { 0 };

	cr_assert_eq(ntx_idtab_set(&t, 5000, &vals[1]), 0);
	cr_assert_geq(t.cap, 5001);
	cr_assert_eq(t.used, 1);
	cr_assert_eq(ntx_idtab_get(&t, 5000), &vals[1]);
	for (uint32_t i = 0; i < 5000; i++)
		cr_assert_null(ntx_idtab_get(&t, i));
	/* replacing a pointer does not count it twice */
	cr_assert_eq(ntx_idtab_set(&t, 5000, &vals[2]), 0);
	cr_assert_eq(t.used, 1);
	/* setting NULL clears */
	cr_assert_eq(ntx_idtab_set(&t, 5000, NULL), 0);
	cr_assert_eq(t.used, 0);
	cr_assert_null(ntx_idtab_get(&t, 5000));
	ntx_idtab_fini(&t);
}

Test(idtab, ids_past_the_maximum_fail)
{
	struct ntx_idtab t = { 0 };

	cr_assert_eq(ntx_idtab_set(&t, NTX_IDTAB_MAX, &vals[0]), -FI_ENOSPC);
	cr_assert_eq(ntx_idtab_set(&t, FI_ADDR_NOTAVAIL, &vals[0]),
		     -FI_ENOSPC);
	cr_assert_eq(t.cap, 0, "a refused id allocates nothing");
	cr_assert_null(ntx_idtab_get(&t, FI_ADDR_UNSPEC));
	ntx_idtab_fini(&t);
}

Test(idtab, clear_lowers_the_hint_only)
{
	struct ntx_idtab t = { 0 };
	uint32_t id;

	for (uint32_t i = 0; i < 4; i++)
		ntx_idtab_alloc(&t, &vals[i], &id);
	/* a slot set directly above the hint is skipped by alloc */
	cr_assert_eq(ntx_idtab_set(&t, 4, &vals[4]), 0);
	cr_assert_eq(ntx_idtab_alloc(&t, &vals[5], &id), 0);
	cr_assert_eq(id, 5);
	ntx_idtab_clear(&t, 0);
	ntx_idtab_clear(&t, 2);
	cr_assert_eq(ntx_idtab_alloc(&t, &vals[6], &id), 0);
	cr_assert_eq(id, 0);
	cr_assert_eq(ntx_idtab_alloc(&t, &vals[7], &id), 0);
	cr_assert_eq(id, 2);
	ntx_idtab_fini(&t);
}
