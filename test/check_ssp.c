/*
 * Unit tests of the staleness rules in server/ssp.c: when a pull may be
 * answered, who is in the clock set, and the push sequence reset.
 */
#include <check.h>
#include <stdlib.h>

#include "test/check_run.h"
#include "server/ssp.h"

START_TEST(bsp_waits_for_everyone)
{
	struct dml_ssp s;
	struct dml_ssp_worker *a, *b;

	dml_ssp_init(&s, 0, 2);
	a = dml_ssp_join(&s, 1, 100);
	ck_assert(dml_ssp_ready(&s, 0));
	dml_ssp_set_clock(&s, a, 1);
	/* Only one of two expected workers joined: clock 1 must wait. */
	ck_assert(!dml_ssp_ready(&s, 1));
	b = dml_ssp_join(&s, 2, 200);
	a = dml_ssp_find(&s, 1);
	ck_assert_uint_eq(b->clock, 0);
	ck_assert(!dml_ssp_ready(&s, 1));
	dml_ssp_set_clock(&s, b, 1);
	ck_assert(dml_ssp_ready(&s, 1));
	ck_assert(!dml_ssp_ready(&s, 2));
	ck_assert_uint_eq(dml_ssp_min_clock(&s), 1);
	dml_ssp_destroy(&s);
}
END_TEST

START_TEST(ssp_bound_and_clocks_only_advance)
{
	struct dml_ssp s;
	struct dml_ssp_worker *a;

	dml_ssp_init(&s, 2, 1);
	a = dml_ssp_join(&s, 1, 1);
	dml_ssp_join(&s, 2, 1);
	a = dml_ssp_find(&s, 1);
	dml_ssp_set_clock(&s, a, 5);
	ck_assert(dml_ssp_ready(&s, 2));
	ck_assert(!dml_ssp_ready(&s, 3));
	dml_ssp_set_clock(&s, dml_ssp_find(&s, 2), 1);
	ck_assert(dml_ssp_ready(&s, 3));
	dml_ssp_set_clock(&s, dml_ssp_find(&s, 2), 0);
	ck_assert_uint_eq(dml_ssp_find(&s, 2)->clock, 1);
	dml_ssp_destroy(&s);
}
END_TEST

START_TEST(async_never_waits)
{
	struct dml_ssp s;

	dml_ssp_init(&s, -1, 5);
	dml_ssp_join(&s, 1, 1);
	ck_assert(dml_ssp_ready(&s, 1000000));
	dml_ssp_destroy(&s);
}
END_TEST

START_TEST(dead_and_leaving_workers_release_the_others)
{
	struct dml_ssp s;
	struct dml_ssp_worker *w;

	dml_ssp_init(&s, 0, 2);
	dml_ssp_join(&s, 1, 1);
	dml_ssp_join(&s, 2, 1);
	dml_ssp_set_clock(&s, dml_ssp_find(&s, 1), 3);
	ck_assert(!dml_ssp_ready(&s, 3));
	ck_assert_uint_eq(dml_ssp_max_clock(&s), 3);
	w = dml_ssp_find(&s, 2);
	dml_ssp_disconnect(&s, w, 1000);
	ck_assert_int_eq(dml_ssp_reap(&s, 1500, 1000), 0);
	ck_assert(!dml_ssp_ready(&s, 3));
	ck_assert_int_eq(dml_ssp_reap(&s, 2000, 1000), 1);
	ck_assert(dml_ssp_ready(&s, 3));
	/* It comes back: rejoins at the slowest live clock, not at 0. */
	w = dml_ssp_join(&s, 2, 1);
	ck_assert_uint_eq(w->clock, 3);
	ck_assert(dml_ssp_ready(&s, 3));
	dml_ssp_leave(&s, dml_ssp_find(&s, 1));
	ck_assert_uint_eq(dml_ssp_min_clock(&s), 3);
	/* Only live workers count: worker 1 left, worker 2 is at 3. */
	dml_ssp_set_clock(&s, dml_ssp_find(&s, 1), 9);
	ck_assert_uint_eq(dml_ssp_max_clock(&s), 3);
	dml_ssp_destroy(&s);
}
END_TEST

START_TEST(new_incarnation_resets_push_sequence)
{
	struct dml_ssp s;
	struct dml_ssp_worker *w;

	dml_ssp_init(&s, -1, 0);
	w = dml_ssp_join(&s, 9, 111);
	w->last_seq = 42;
	dml_ssp_disconnect(&s, w, 0);
	w = dml_ssp_join(&s, 9, 111);
	ck_assert_uint_eq(w->last_seq, 42);
	dml_ssp_disconnect(&s, w, 0);
	w = dml_ssp_join(&s, 9, 222);
	ck_assert_uint_eq(w->last_seq, 0);
	dml_ssp_destroy(&s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ssp");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, bsp_waits_for_everyone);
	tcase_add_test(tc, ssp_bound_and_clocks_only_advance);
	tcase_add_test(tc, async_never_waits);
	tcase_add_test(tc, dead_and_leaving_workers_release_the_others);
	tcase_add_test(tc, new_incarnation_resets_push_sequence);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
