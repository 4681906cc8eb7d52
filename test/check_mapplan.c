/*
 * Unit tests of shard map plans (shard/mapplan.h): weighted splits of dense
 * and sparse tables over servers in node id order, and the check that a map
 * from the wire covers a job's tables exactly, on listed servers only.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "shard/mapplan.h"
#include "shard/shardmap.h"

#define HALF_HASH (DML_SHARD_HASH_SPACE / 2)

/* A spec with up to 4 tables, on the stack: kinds[i] 'd' dense, 's' sparse. */
struct spec_buf {
	Dml__JobSpec spec;
	Dml__TableSpec tables[4];
	Dml__TableSpec *ptrs[4];
};

static void spec_init(struct spec_buf *b, const char *kinds, const uint64_t *keys)
{
	dml__job_spec__init(&b->spec);
	for (size_t i = 0; kinds[i]; i++) {
		dml__table_spec__init(&b->tables[i]);
		b->tables[i].id = (uint32_t)i;
		b->tables[i].dense = kinds[i] == 'd';
		b->tables[i].width = 1;
		b->tables[i].keys = kinds[i] == 'd' ? keys[i] : 0;
		b->ptrs[i] = &b->tables[i];
		b->spec.n_tables = i + 1;
	}
	b->spec.tables = b->ptrs;
}

/* The range of `table` held by `server`, or NULL; asserts there is at most one. */
static const Dml__ShardRange *range_of(const Dml__ShardMap *m, uint32_t table,
				       uint32_t server)
{
	const Dml__ShardRange *found = NULL;

	for (size_t i = 0; i < m->n_ranges; i++) {
		if (m->ranges[i]->table != table || m->ranges[i]->server != server)
			continue;
		ck_assert_ptr_null(found);
		found = m->ranges[i];
	}
	return found;
}

static void assert_range(const Dml__ShardMap *m, uint32_t table, uint32_t server,
			 uint64_t begin, uint64_t end)
{
	const Dml__ShardRange *r = range_of(m, table, server);

	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->begin, begin);
	ck_assert_uint_eq(r->end, end);
}

static void assert_valid(const Dml__ShardMap *m, const Dml__JobSpec *spec)
{
	char err[160] = "";

	ck_assert_msg(dml_mapplan_check(m, spec, err, sizeof(err)) == 0, "check: %s", err);
}

START_TEST(equal_weights_split_evenly)
{
	struct spec_buf b;
	const uint64_t keys[] = { 100, 0 };
	const struct dml_mapplan_server srv[] = {
		{ 7, "127.0.0.1:7002", 1 }, { 3, "127.0.0.1:7001", 1 },
	};
	Dml__ShardMap *m;

	spec_init(&b, "ds", keys);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 4, 1, srv, 2, &m), 0);
	ck_assert_uint_eq(m->job, 4);
	ck_assert_uint_eq(m->version, 1);
	/* Servers in ascending node id, addresses copied. */
	ck_assert_uint_eq(m->n_servers, 2);
	ck_assert_uint_eq(m->servers[0]->node_id, 3);
	ck_assert_str_eq(m->servers[0]->address, "127.0.0.1:7001");
	ck_assert_ptr_ne(m->servers[0]->address, srv[1].address);
	ck_assert_uint_eq(m->servers[1]->node_id, 7);
	ck_assert_uint_eq(m->n_ranges, 4);
	assert_range(m, 0, 3, 0, 50);
	assert_range(m, 0, 7, 50, 100);
	assert_range(m, 1, 3, 0, HALF_HASH);
	assert_range(m, 1, 7, HALF_HASH, DML_SHARD_HASH_SPACE);
	/* Grouped by table, ascending begin. */
	ck_assert_uint_eq(m->ranges[0]->table, 0);
	ck_assert_uint_eq(m->ranges[1]->begin, 50);
	ck_assert_uint_eq(m->ranges[2]->table, 1);
	assert_valid(m, &b.spec);
	dml_mapplan_free(m);
}
END_TEST

START_TEST(weights_one_to_three)
{
	struct spec_buf b;
	const uint64_t keys[] = { 400, 0 };
	const struct dml_mapplan_server srv[] = {
		{ 5, "10.0.0.5:7001", 3 }, { 2, "10.0.0.2:7001", 1 },
	};
	Dml__ShardMap *m;

	spec_init(&b, "ds", keys);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 9, srv, 2, &m), 0);
	assert_range(m, 0, 2, 0, 100);
	assert_range(m, 0, 5, 100, 400);
	assert_range(m, 1, 2, 0, DML_SHARD_HASH_SPACE / 4);
	assert_range(m, 1, 5, DML_SHARD_HASH_SPACE / 4, DML_SHARD_HASH_SPACE);
	assert_valid(m, &b.spec);
	dml_mapplan_free(m);
}
END_TEST

START_TEST(one_server_holds_everything)
{
	struct spec_buf b;
	const uint64_t keys[] = { 0, 64, 1 };
	const struct dml_mapplan_server srv[] = { { 1, "h:1", 0.25 } };
	Dml__ShardMap *m;

	spec_init(&b, "sdd", keys);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 2, 1, srv, 1, &m), 0);
	ck_assert_uint_eq(m->n_servers, 1);
	ck_assert_uint_eq(m->n_ranges, 3);
	assert_range(m, 0, 1, 0, DML_SHARD_HASH_SPACE);
	assert_range(m, 1, 1, 0, 64);
	assert_range(m, 2, 1, 0, 1);
	assert_valid(m, &b.spec);
	dml_mapplan_free(m);
}
END_TEST

START_TEST(small_table_leaves_servers_out)
{
	struct spec_buf b;
	const uint64_t keys[] = { 2 };
	const struct dml_mapplan_server srv[] = {
		{ 1, "h:1", 1 }, { 2, "h:2", 1 }, { 3, "h:3", 1 },
	};
	Dml__ShardMap *m;
	size_t total = 0;

	spec_init(&b, "d", keys);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 2, 1, srv, 3, &m), 0);
	ck_assert_uint_eq(m->n_servers, 3);
	ck_assert_uint_eq(m->n_ranges, 2);
	for (size_t i = 0; i < m->n_ranges; i++)
		total += m->ranges[i]->end - m->ranges[i]->begin;
	ck_assert_uint_eq(total, 2);
	assert_valid(m, &b.spec);
	dml_mapplan_free(m);
}
END_TEST

START_TEST(build_refuses_bad_input)
{
	struct spec_buf b, dup, zero;
	const uint64_t keys[] = { 10, 10 }, nokeys[] = { 0 };
	struct dml_mapplan_server srv[] = { { 1, "h:1", 1 }, { 2, "h:2", 1 } };
	Dml__ShardMap *m = (Dml__ShardMap *)&b; /* must be reset to NULL */

	spec_init(&b, "dd", keys);
	spec_init(&dup, "dd", keys);
	dup.tables[1].id = 0;
	spec_init(&zero, "d", nokeys);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 0, &m), DML_EINVAL);
	ck_assert_ptr_null(m);
	ck_assert_int_eq(dml_mapplan_build(NULL, 1, 1, srv, 2, &m), DML_EINVAL);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, NULL, 2, &m), DML_EINVAL);
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, NULL), DML_EINVAL);
	ck_assert_int_eq(dml_mapplan_build(&dup.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	ck_assert_int_eq(dml_mapplan_build(&zero.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	b.spec.n_tables = 0;
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	b.spec.n_tables = 2;
	srv[1].weight = 0;
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	srv[1].weight = NAN;
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	srv[1].weight = INFINITY;
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	srv[1].weight = 1;
	srv[1].node_id = 1;
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	srv[1].node_id = 0;
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	srv[1].node_id = 2;
	srv[1].address = "";
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), DML_EINVAL);
	ck_assert_ptr_null(m);
	srv[1].address = "h:2";
	ck_assert_int_eq(dml_mapplan_build(&b.spec, 1, 1, srv, 2, &m), 0);
	ck_assert_ptr_nonnull(m);
	dml_mapplan_free(m);
	dml_mapplan_free(NULL);
}
END_TEST

/* A valid two-server map of a dense (100 keys) and a sparse table, for
 * the check to be fed broken copies of. */
static Dml__ShardMap *two_server_map(struct spec_buf *b)
{
	static const uint64_t keys[] = { 100, 0 };
	static const struct dml_mapplan_server srv[] = { { 1, "h:1", 1 }, { 2, "h:2", 1 } };
	Dml__ShardMap *m;

	spec_init(b, "ds", keys);
	ck_assert_int_eq(dml_mapplan_build(&b->spec, 1, 1, srv, 2, &m), 0);
	assert_valid(m, &b->spec);
	return m;
}

static void assert_refused(const Dml__ShardMap *m, const Dml__JobSpec *spec,
			   const char *needle)
{
	char err[160] = "";

	ck_assert_int_eq(dml_mapplan_check(m, spec, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strstr(err, needle) != NULL, "'%s' does not say '%s'", err, needle);
}

START_TEST(check_refuses_gap_and_overlap)
{
	struct spec_buf b;
	Dml__ShardMap *m = two_server_map(&b);
	Dml__ShardRange *r = (Dml__ShardRange *)range_of(m, 0, 1);

	r->end = 40;
	assert_refused(m, &b.spec, "table 0: gap at 40");
	r->end = 60;
	assert_refused(m, &b.spec, "table 0: overlap at 60");
	r->end = 50;
	r->begin = 1;
	assert_refused(m, &b.spec, "table 0: gap at 0");
	r->begin = 0;
	r = (Dml__ShardRange *)range_of(m, 1, 2);
	r->end = DML_SHARD_HASH_SPACE - 1;
	assert_refused(m, &b.spec, "table 1: keys 4294967295..4294967296 held by no server");
	r->end = DML_SHARD_HASH_SPACE + 1;
	assert_refused(m, &b.spec, "outside");
	r->end = r->begin;
	assert_refused(m, &b.spec, "empty");
	r->end = DML_SHARD_HASH_SPACE;
	assert_valid(m, &b.spec);
	dml_mapplan_free(m);
}
END_TEST

START_TEST(check_refuses_unknown_server)
{
	struct spec_buf b;
	Dml__ShardMap *m = two_server_map(&b);

	((Dml__ShardRange *)range_of(m, 0, 2))->server = 9;
	assert_refused(m, &b.spec, "range on server 9, which the map does not list");
	((Dml__ShardRange *)range_of(m, 0, 9))->server = 2;
	m->servers[1]->node_id = 1;
	assert_refused(m, &b.spec, "listed twice");
	m->servers[1]->node_id = 2;
	free(m->servers[1]->address);
	m->servers[1]->address = strdup("no-port");
	assert_refused(m, &b.spec, "server 2: address is not host:port");
	dml_mapplan_free(m);
}
END_TEST

START_TEST(check_refuses_missing_and_foreign_tables)
{
	struct spec_buf b, more;
	const uint64_t keys[] = { 100, 0, 5 };
	Dml__ShardMap *m = two_server_map(&b);

	/* The job has a third table the map does not cover. */
	spec_init(&more, "dsd", keys);
	assert_refused(m, &more.spec, "table 2 has no range");
	/* The map covers a table the job does not have. */
	b.spec.n_tables = 1;
	assert_refused(m, &b.spec, "range for table 1, which the job does not have");
	b.spec.n_tables = 2;
	b.tables[1].id = 0;
	assert_refused(m, &b.spec, "twice");
	b.tables[1].id = 1;
	ck_assert_int_eq(dml_mapplan_check(NULL, &b.spec, NULL, 0), DML_EINVAL);
	ck_assert_int_eq(dml_mapplan_check(m, NULL, NULL, 0), DML_EINVAL);
	/* No room for a reason is fine. */
	ck_assert_int_eq(dml_mapplan_check(m, &more.spec, NULL, 0), DML_ECONF);
	dml_mapplan_free(m);
}
END_TEST

/* The check holds for what build makes, over many shapes and weights. */
START_TEST(built_maps_always_pass_check)
{
	struct spec_buf b;
	const uint64_t keys[] = { 1, 0, 1000003, 0 };
	struct dml_mapplan_server srv[9];
	char addr[9][16];
	Dml__ShardMap *m;

	spec_init(&b, "dsds", keys);
	for (uint32_t n = 1; n <= 9; n++) {
		for (uint32_t j = 0; j < n; j++) {
			snprintf(addr[j], sizeof(addr[j]), "h:%u", 7000 + j);
			srv[j].node_id = 100 - 7 * j;
			srv[j].address = addr[j];
			srv[j].weight = 1.0 + (double)((j * 37) % 11);
		}
		ck_assert_int_eq(dml_mapplan_build(&b.spec, 3, n, srv, n, &m), 0);
		ck_assert_uint_eq(m->n_servers, n);
		for (uint32_t j = 1; j < n; j++)
			ck_assert_uint_lt(m->servers[j - 1]->node_id, m->servers[j]->node_id);
		assert_valid(m, &b.spec);
		dml_mapplan_free(m);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("mapplan");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, equal_weights_split_evenly);
	tcase_add_test(tc, weights_one_to_three);
	tcase_add_test(tc, one_server_holds_everything);
	tcase_add_test(tc, small_table_leaves_servers_out);
	tcase_add_test(tc, build_refuses_bad_input);
	tcase_add_test(tc, check_refuses_gap_and_overlap);
	tcase_add_test(tc, check_refuses_unknown_server);
	tcase_add_test(tc, check_refuses_missing_and_foreign_tables);
	tcase_add_test(tc, built_maps_always_pass_check);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
