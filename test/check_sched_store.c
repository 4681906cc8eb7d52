/*
 * Unit tests of dml-sched's store (store/sched_store.h), each in a fresh
 * temporary folder: records round-trip in key order across reopenings,
 * only committed changes survive a close, a full map fails the commit and
 * keeps what was committed before, and neither daemon opens the other's
 * store, nor a second process the same one.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "store/sched_store.h"
#include "store/store.h"
#include "test/tmpdir.h"

#define MAP (1u << 20)

static struct dml_store *open_ok(uint64_t map_size)
{
	struct dml_store *s = NULL;
	char err[512] = "x";

	ck_assert_msg(dml_sched_store_open(dml_test_tmpdir(), map_size, &s, err,
					   sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(err, "");
	return s;
}

static void put_ok(struct dml_store *s, enum dml_sched_db db, uint64_t key, const char *val)
{
	char err[512] = "x";

	ck_assert_msg(dml_sched_store_put(s, db, key, val, strlen(val), err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert(dml_sched_store_dirty(s));
}

static void commit_ok(struct dml_store *s)
{
	char err[512] = "x";

	ck_assert_msg(dml_sched_store_commit(s, err, sizeof(err)) == 0, "%s", err);
	ck_assert(!dml_sched_store_dirty(s));
}

/* Every record of db as "key=value;" in the order the walk gives. */
struct seen {
	char text[512];
	size_t len;
};

static int see(uint64_t key, const void *val, size_t len, void *arg)
{
	struct seen *s = arg;

	s->len += (size_t)snprintf(s->text + s->len, sizeof(s->text) - s->len, "%llu=%.*s;",
				   (unsigned long long)key, (int)len, (const char *)val);
	return 0;
}

static void expect(struct dml_store *s, enum dml_sched_db db, const char *want)
{
	struct seen seen = { "", 0 };
	char err[512] = "x";

	ck_assert_msg(dml_sched_store_each(s, db, see, &seen, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_str_eq(seen.text, want);
}

START_TEST(test_round_trip_in_key_order)
{
	struct dml_store *s = open_ok(MAP);

	put_ok(s, DML_SCHED_DB_JOBS, 2, "two");
	put_ok(s, DML_SCHED_DB_JOBS, 1, "one");
	put_ok(s, DML_SCHED_DB_NODES, (2ull << 32) | 7, "server 7");
	put_ok(s, DML_SCHED_DB_NODES, (1ull << 32) | 9, "worker 9");
	commit_ok(s);
	put_ok(s, DML_SCHED_DB_JOBS, 1, "one again");
	commit_ok(s);
	dml_store_close(s);
	s = open_ok(MAP);
	expect(s, DML_SCHED_DB_JOBS, "1=one again;2=two;");
	expect(s, DML_SCHED_DB_NODES, "4294967305=worker 9;8589934599=server 7;");
	dml_store_close(s);
}
END_TEST

START_TEST(test_uncommitted_dropped)
{
	struct dml_store *s = open_ok(MAP);

	put_ok(s, DML_SCHED_DB_JOBS, 1, "kept");
	commit_ok(s);
	put_ok(s, DML_SCHED_DB_JOBS, 1, "lost");
	put_ok(s, DML_SCHED_DB_JOBS, 2, "lost too");
	dml_store_close(s);
	s = open_ok(MAP);
	expect(s, DML_SCHED_DB_JOBS, "1=kept;");
	/* An empty commit is fine. */
	commit_ok(s);
	dml_store_close(s);
}
END_TEST

START_TEST(test_map_full)
{
	struct dml_store *s = open_ok(MAP);
	char *big = malloc(64 << 10), err[512] = "";
	int rc = 0;

	ck_assert_ptr_nonnull(big);
	memset(big, 'x', 64 << 10);
	put_ok(s, DML_SCHED_DB_JOBS, 1, "kept");
	commit_ok(s);
	for (uint64_t k = 2; k < 64 && rc == 0; k++)
		rc = dml_sched_store_put(s, DML_SCHED_DB_JOBS, k, big, 64 << 10, err,
					 sizeof(err));
	if (rc == 0)
		rc = dml_sched_store_commit(s, err, sizeof(err));
	ck_assert_int_eq(rc, DML_EFULL);
	ck_assert_msg(strstr(err, "the map is full") && strstr(err, "raise [store] map_size"),
		      "%s", err);
	ck_assert(!dml_sched_store_dirty(s));
	dml_store_close(s);
	s = open_ok(MAP);
	expect(s, DML_SCHED_DB_JOBS, "1=kept;");
	dml_store_close(s);
	free(big);
}
END_TEST

/* Neither daemon takes the other's directory for its own. */
START_TEST(test_other_kind_refused)
{
	struct dml_store *s = open_ok(MAP), *t = NULL;
	char err[512] = "";

	dml_store_close(s);
	ck_assert_int_eq(dml_store_open(dml_test_tmpdir(), MAP, 1, 1, &t, err, sizeof(err)),
			 DML_ECONF);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, "holds a scheduler's state, not a server's gradient log"),
		      "%s", err);
	/* Refused, it was left as it was. */
	s = open_ok(MAP);
	dml_store_close(s);
}
END_TEST

START_TEST(test_server_store_refused)
{
	struct dml_store *s = NULL;
	char err[512] = "";

	ck_assert_int_eq(dml_store_open(dml_test_tmpdir(), MAP, 1, 3, &s, err, sizeof(err)), 0);
	dml_store_close(s);
	s = NULL;
	ck_assert_int_eq(dml_sched_store_open(dml_test_tmpdir(), MAP, &s, err, sizeof(err)),
			 DML_ECONF);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, "holds a server's gradient log, not a scheduler's state"),
		      "%s", err);
	ck_assert_int_eq(dml_store_open(dml_test_tmpdir(), MAP, 1, 3, &s, err, sizeof(err)), 0);
	dml_store_close(s);
}
END_TEST

START_TEST(test_second_open_refused)
{
	struct dml_store *s = open_ok(MAP), *t = NULL;
	char err[512] = "";

	ck_assert_int_eq(dml_sched_store_open(dml_test_tmpdir(), MAP, &t, err, sizeof(err)),
			 DML_ECONF);
	ck_assert_msg(strstr(err, "in use by another process"), "%s", err);
	dml_store_close(s);
}
END_TEST

START_TEST(test_bad_calls_refused)
{
	struct dml_store *s = NULL;
	char err[512] = "";

	ck_assert_int_eq(dml_sched_store_put(NULL, DML_SCHED_DB_JOBS, 1, "x", 1, err,
					     sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_store_open(dml_test_tmpdir(), MAP, 1, 3, &s, err, sizeof(err)), 0);
	/* A server's store is no scheduler's, whatever the call. */
	ck_assert_int_eq(dml_sched_store_put(s, DML_SCHED_DB_JOBS, 1, "x", 1, err,
					     sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_sched_store_each(s, DML_SCHED_DB_NODES, see, NULL, err,
					      sizeof(err)), DML_EINVAL);
	dml_store_close(s);
	ck_assert_int_eq(dml_sched_store_open("", MAP, &s, err, sizeof(err)), DML_EINVAL);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sched_store");
	TCase *tc = tcase_create("sched_store");

	dml_test_tmpdir_fixture(tc, "check_sched_store", 1);
	tcase_add_test(tc, test_round_trip_in_key_order);
	tcase_add_test(tc, test_uncommitted_dropped);
	tcase_add_test(tc, test_map_full);
	tcase_add_test(tc, test_other_kind_refused);
	tcase_add_test(tc, test_server_store_refused);
	tcase_add_test(tc, test_second_open_refused);
	tcase_add_test(tc, test_bad_calls_refused);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
