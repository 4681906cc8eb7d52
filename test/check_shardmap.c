/*
 * Unit tests of shard maps: even splits, assembly from server reports,
 * coverage checks and routing.
 */
#include <check.h>
#include <stdlib.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "shard/shardmap.h"

START_TEST(even_split_covers_space_and_balances)
{
	uint64_t spaces[] = { 1, 7, 100, 1000003, DML_SHARD_HASH_SPACE };

	for (size_t s = 0; s < sizeof(spaces) / sizeof(spaces[0]); s++) {
		for (uint32_t n = 1; n <= 9; n++) {
			uint64_t next = 0, b, e, min = UINT64_MAX, max = 0;

			if (spaces[s] < n)
				continue;
			for (uint32_t i = 0; i < n; i++) {
				dml_shard_even_range(spaces[s], i, n, &b, &e);
				ck_assert_uint_eq(b, next);
				ck_assert_uint_gt(e, b);
				if (e - b < min)
					min = e - b;
				if (e - b > max)
					max = e - b;
				next = e;
			}
			ck_assert_uint_eq(next, spaces[s]);
			ck_assert_uint_le(max - min, 1);
		}
	}
}
END_TEST

static void add_even(struct dml_shard_map *m, uint32_t n, uint32_t table, int dense,
		     uint64_t keys)
{
	char err[128];

	for (uint32_t i = 0; i < n; i++) {
		uint64_t b, e;

		dml_shard_even_range(dense ? keys : DML_SHARD_HASH_SPACE, i, n, &b, &e);
		ck_assert_int_eq(dml_shard_map_add(m, n - 1 - i, table, dense, 4, dense ? keys : 0,
						   b, e, err, sizeof(err)), 0);
	}
}

START_TEST(route_dense_and_sparse)
{
	struct dml_shard_map m;
	const struct dml_shard_table *t;
	char err[128];
	uint32_t hits[3] = { 0 };

	dml_shard_map_init(&m, 3);
	add_even(&m, 3, 7, 1, 100);
	add_even(&m, 3, 8, 0, 0);
	ck_assert_int_eq(dml_shard_map_finish(&m, err, sizeof(err)), 0);
	t = dml_shard_map_table(&m, 7);
	ck_assert_ptr_nonnull(t);
	/* Reported in reverse order: sorting puts keys 0..33 on server 2. */
	ck_assert_uint_eq(dml_shard_route(t, 0)->server, 2);
	ck_assert_uint_eq(dml_shard_route(t, 33)->server, 2);
	ck_assert_uint_eq(dml_shard_route(t, 34)->server, 1);
	ck_assert_uint_eq(dml_shard_route(t, 99)->server, 0);
	ck_assert_ptr_null(dml_shard_route(t, 100));
	/* Sequential sparse ids spread over all servers. */
	t = dml_shard_map_table(&m, 8);
	for (uint64_t k = 0; k < 30000; k++)
		hits[dml_shard_route(t, k)->server]++;
	for (int i = 0; i < 3; i++)
		ck_assert_uint_gt(hits[i], 9000);
	ck_assert_ptr_null(dml_shard_map_table(&m, 9));
	dml_shard_map_destroy(&m);
}
END_TEST

START_TEST(gaps_overlaps_and_disagreement_rejected)
{
	struct dml_shard_map m;
	char err[128];

	dml_shard_map_init(&m, 2);
	ck_assert_int_eq(dml_shard_map_add(&m, 0, 1, 1, 1, 10, 0, 4, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_add(&m, 1, 1, 1, 1, 10, 5, 10, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_finish(&m, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(err, "gap"));
	dml_shard_map_destroy(&m);

	dml_shard_map_init(&m, 2);
	ck_assert_int_eq(dml_shard_map_add(&m, 0, 1, 1, 1, 10, 0, 6, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_add(&m, 1, 1, 1, 1, 10, 5, 10, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_finish(&m, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(err, "overlap"));
	dml_shard_map_destroy(&m);

	dml_shard_map_init(&m, 2);
	ck_assert_int_eq(dml_shard_map_add(&m, 0, 1, 1, 1, 10, 0, 5, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_finish(&m, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_nonnull(strstr(err, "held by no server"));
	dml_shard_map_destroy(&m);

	dml_shard_map_init(&m, 2);
	ck_assert_int_eq(dml_shard_map_add(&m, 0, 1, 1, 1, 10, 0, 5, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_add(&m, 1, 1, 1, 2, 10, 5, 10, err, sizeof(err)),
			 DML_ECONF);
	ck_assert_int_eq(dml_shard_map_add(&m, 1, 1, 0, 1, 10, 5, 10, err, sizeof(err)),
			 DML_ECONF);
	ck_assert_int_eq(dml_shard_map_add(&m, 2, 1, 1, 1, 10, 5, 10, err, sizeof(err)),
			 DML_EINVAL);
	ck_assert_int_eq(dml_shard_map_add(&m, 1, 1, 1, 1, 10, 5, 5, err, sizeof(err)),
			 DML_EINVAL);
	dml_shard_map_destroy(&m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("shardmap");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, even_split_covers_space_and_balances);
	tcase_add_test(tc, route_dense_and_sparse);
	tcase_add_test(tc, gaps_overlaps_and_disagreement_rejected);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
