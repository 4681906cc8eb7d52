/*
 * Unit tests of the LMDB gradient log (store/store.h), each in a fresh
 * temporary folder that is the store's directory. This file: the helpers
 * the suite's files share (check_store.h) and the refusals at open: stores
 * of another server or format, a garbage data.mdb and a path that is no
 * directory are refused with the path and the reason, and a second open
 * until the first closes. The log's records and dedupe state are
 * check_store_log.c's, the checkpoints check_store_ckpt.c's.
 */
#include <check.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/check_run.h"
#include "test/check_store.h"
#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "test/tmpdir.h"
#include "proto/util.h"

const char *dir(void)
{
	return dml_test_tmpdir();
}

struct dml_store *open_ok(uint32_t node, uint64_t map_size)
{
	struct dml_store *s = NULL;
	char err[512] = "x";

	ck_assert_msg(dml_store_open(dir(), map_size, 1, node, &s, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_str_eq(err, "");
	ck_assert_ptr_nonnull(s);
	return s;
}

void commit_ok(struct dml_store *s)
{
	char err[512] = "x";

	ck_assert_msg(dml_store_commit(s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(dml_store_pending(s, NULL), 0);
}

/* ---- records -------------------------------------------------------------- */

const uint64_t sparse_keys[4] = { 0, 7, UINT64_MAX, 1ull << 40 };
float values[64];

/* Floats whose bits must survive: -0, a denormal, a NaN with payload, inf. */
void values_init(void)
{
	uint32_t bits[] = { 0x80000000u, 0x00000001u, 0x7fc12345u, 0x7f800000u };

	for (size_t i = 0; i < 64; i++)
		values[i] = (float)i * 0.5f - 3.0f;
	memcpy(values, bits, sizeof(bits));
}

/* A record that is dense for even n, sparse for odd n, its fields from n. */
struct dml_log_rec rec_n(uint32_t n)
{
	struct dml_log_rec r = {
		.job = n + 100, .table = n % 3, .worker = n % 2 + 1,
		.incarnation = 1, .seq = n, .clock = n * 10,
		.width = n % 3 + 1, .values = values, .rows = n % 4 == 3,
	};

	if (n % 2 == 0) {
		r.dense = 1;
		r.begin = n;
		r.end = n + 5;
	} else {
		r.nkeys = 4;
		r.keys = sparse_keys;
	}
	/* Rows that moved in: a map version instead of the worker's incarnation. */
	if (n % 8 == 7) {
		r.moved = 1;
		r.version = n + 1000;
		r.incarnation = 0;
		r.seq = 0;
		r.begin = n;
		r.end = n + 9;
	}
	/* Some pushes weigh other than 1 (Meta.weight); some wait for their
	 * clock's BSP step. */
	if (n % 5 == 4 && !r.rows)
		r.weight = 0.25f * (float)(n % 7 + 1);
	if (n % 6 == 2 && !r.rows)
		r.deferred = 1;
	return r;
}

/* A record's weight as replay gives it: 0 for 1. */
static float weight_of(const struct dml_log_rec *r)
{
	return r->weight == 1.0f ? 0.0f : r->weight;
}

void same_rec(const struct dml_log_rec *a, const struct dml_log_rec *b)
{
	uint64_t count = a->dense ? a->end - a->begin : a->nkeys;

	ck_assert_uint_eq(a->job, b->job);
	ck_assert_uint_eq(a->table, b->table);
	ck_assert_uint_eq(a->worker, b->worker);
	ck_assert_uint_eq(a->incarnation, b->incarnation);
	ck_assert_uint_eq(a->seq, b->seq);
	ck_assert_uint_eq(a->clock, b->clock);
	ck_assert_int_eq(!!a->dense, !!b->dense);
	ck_assert_int_eq(!!a->rows, !!b->rows);
	ck_assert_int_eq(!!a->moved, !!b->moved);
	ck_assert_uint_eq(a->version, b->version);
	ck_assert_uint_eq(a->width, b->width);
	ck_assert_float_eq(weight_of(a), weight_of(b));
	ck_assert_int_eq(!!a->deferred, !!b->deferred);
	ck_assert_int_eq(!!a->step, !!b->step);
	if (a->dense || a->moved) {
		ck_assert_uint_eq(a->begin, b->begin);
		ck_assert_uint_eq(a->end, b->end);
	}
	if (!a->dense) {
		ck_assert_uint_eq(a->nkeys, b->nkeys);
		ck_assert(!memcmp(a->keys, b->keys, a->nkeys * sizeof(uint64_t)));
	}
	ck_assert_ptr_nonnull(b->values);
	ck_assert(!memcmp(a->values, b->values, count * a->width * sizeof(float)));
}

void append_n(struct dml_store *s, uint32_t n)
{
	struct dml_log_rec r = rec_n(n);

	ck_assert_int_eq(dml_store_append(s, &r), 0);
}

int expect_fn(const struct dml_log_rec *r, void *arg)
{
	struct expect *e = arg;
	struct dml_log_rec want = rec_n(e->first + e->seen);

	same_rec(&want, r);
	e->seen++;
	return e->stop_at && e->seen == e->stop_at ? 7 : 0;
}

void replay_expect(struct dml_store *s, uint32_t first, uint32_t count)
{
	struct expect e = { .first = first };
	char err[512] = "x";

	ck_assert_msg(dml_store_replay(s, expect_fn, &e, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(e.seen, count);
	ck_assert_uint_eq(dml_store_log_count(s), count);
}

/* ---- raw LMDB, to write what the store never would -------------------------- */

/* db in the log's environment; "ckpt/NAME" in the checkpoints'. */
static MDB_env *raw_open(MDB_txn **txn, MDB_dbi *dbi, const char *db)
{
	MDB_env *env;
	char path[4096];
	int ck = strncmp(db, "ckpt/", 5) == 0;

	snprintf(path, sizeof(path), "%s%s", dir(), ck ? "/ckpt" : "");
	if (ck)
		db += 5;
	ck_assert_int_eq(mdb_env_create(&env), 0);
	ck_assert_int_eq(mdb_env_set_maxdbs(env, 4), 0);
	ck_assert_int_eq(mdb_env_open(env, path, 0, 0600), 0);
	ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, txn), 0);
	ck_assert_int_eq(mdb_dbi_open(*txn, db, 0, dbi), 0);
	return env;
}

void raw_put(const char *db, const void *key, size_t klen, const void *val, size_t vlen)
{
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_env *env = raw_open(&txn, &dbi, db);
	uint8_t *sealed = malloc(vlen + STORE_SUM);
	MDB_val k = { klen, (void *)key }, v = { vlen + STORE_SUM, sealed };

	/* With its checksum: what the store's decoders make of it is the test. */
	ck_assert_ptr_nonnull(sealed);
	memcpy(sealed, val, vlen);
	store_sum_seal(&k, sealed, vlen);
	ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
	free(sealed);
	ck_assert_int_eq(mdb_txn_commit(txn), 0);
	mdb_env_close(env);
}

/* Copy the value under key into buf (cap bytes), its checksum checked and left out; its size. */
size_t raw_get(const char *db, const void *key, size_t klen, void *buf, size_t cap)
{
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_env *env = raw_open(&txn, &dbi, db);
	MDB_val k = { klen, (void *)key }, v;

	ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
	ck_assert_int_eq(store_sum_check(&k, &v), 0);
	ck_assert_uint_le(v.mv_size, cap);
	memcpy(buf, v.mv_data, v.mv_size);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return v.mv_size;
}

void lsn_key(uint8_t k[8], uint64_t lsn)
{
	for (int i = 7; i >= 0; i--, lsn >>= 8)
		k[i] = (uint8_t)lsn;
}

/* Entries in database db. */
size_t raw_count(const char *db)
{
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_env *env = raw_open(&txn, &dbi, db);
	MDB_stat st;

	ck_assert_int_eq(mdb_stat(txn, dbi, &st), 0);
	mdb_txn_abort(txn);
	mdb_env_close(env);
	return st.ms_entries;
}

static void open_refused(uint32_t node, int code, const char *want1, const char *want2)
{
	struct dml_store *s = (struct dml_store *)1;
	char err[512] = "";
	int rc = dml_store_open(dir(), MAP, 1, node, &s, err, sizeof(err));

	ck_assert_int_eq(rc, code);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, dir()) != NULL, "%s", err);
	ck_assert_msg(strstr(err, want1) != NULL, "%s", err);
	if (want2)
		ck_assert_msg(strstr(err, want2) != NULL, "%s", err);
}

/* ---- refusals at open ------------------------------------------------------ */

START_TEST(test_other_server_refused)
{
	struct dml_store *s;

	values_init();
	s = open_ok(3, MAP);
	append_n(s, 0);
	commit_ok(s);
	dml_store_close(s);
	open_refused(4, DML_ECONF, "the store of server 3, this is server 4",
		     "another server's data directory?");
	s = open_ok(3, MAP);
	replay_expect(s, 0, 1);
	dml_store_close(s);
}
END_TEST

START_TEST(test_other_format_refused)
{
	uint8_t one[4] = { 1, 0, 0, 0 };

	dml_store_close(open_ok(1, MAP));
	raw_put("meta", "format", 6, one, sizeof(one));
	open_refused(1, DML_ECONF, "store format 1, this build reads 5", NULL);
	raw_put("meta", "format", 6, one, 3);
	open_refused(1, DML_ECONF, "meta \"format\" of 3 bytes", NULL);
}
END_TEST

START_TEST(test_garbage_file_refused)
{
	static const size_t sizes[] = { 1, 100, 4096, 8192, 65536 };
	uint8_t *junk = malloc(65536);
	char p[DML_TEST_PATH_MAX];

	ck_assert_ptr_nonnull(junk);
	srand(12345);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct dml_store *s = (struct dml_store *)1;
		char err[512] = "";
		int rc;

		for (size_t j = 0; j < sizes[i]; j++)
			junk[j] = (uint8_t)rand();
		unlink(dml_test_tmpdir_path(p, sizeof(p), "lock.mdb"));
		dml_test_tmpdir_write("data.mdb", junk, sizes[i], 0);
		rc = dml_store_open(dir(), MAP, 1, 1, &s, err, sizeof(err));
		ck_assert_msg(rc == DML_ECONF || rc == DML_EIO, "size %zu: %d %s", sizes[i], rc,
			      err);
		ck_assert_ptr_null(s);
		ck_assert_msg(strstr(err, dir()) != NULL, "%s", err);
		ck_assert_msg(rc != DML_ECONF || strstr(err, "data.mdb") != NULL, "%s", err);
	}
	free(junk);
}
END_TEST

/* A damaged checkpoints' file: refused, naming it; the log's file is not blamed. */
START_TEST(test_garbage_checkpoint_file_refused)
{
	struct dml_store *s;
	uint8_t junk[8192];
	char p[DML_TEST_PATH_MAX], err[512] = "";
	FILE *f;
	int rc;

	s = open_ok(1, 0);
	dml_store_close(s);
	for (size_t j = 0; j < sizeof(junk); j++)
		junk[j] = (uint8_t)(j * 131 + 7);
	dml_test_tmpdir_path(p, sizeof(p), "ckpt/data.mdb");
	f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(junk, 1, sizeof(junk), f), sizeof(junk));
	fclose(f);
	rc = dml_store_open(dir(), MAP, 1, 1, &s, err, sizeof(err));
	ck_assert_msg(rc == DML_ECONF, "%d %s", rc, err);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, "/ckpt/data.mdb: damaged"), "%s", err);
}
END_TEST

START_TEST(test_path_not_a_directory)
{
	struct dml_store *s = (struct dml_store *)1;
	char p[DML_TEST_PATH_MAX], err[DML_TEST_PATH_MAX + 64];
	const char *file = dml_test_tmpdir_write("f", "x", 1, 0);

	ck_assert_int_eq(dml_store_open(file, MAP, 1, 1, &s, err, sizeof(err)), DML_EIO);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, file) && strstr(err, "not a directory"), "%s", err);
	/* No parent: mkdir's reason. */
	dml_test_tmpdir_path(p, sizeof(p), "no/such");
	ck_assert_int_eq(dml_store_open(p, MAP, 1, 1, &s, err, sizeof(err)), DML_EIO);
	ck_assert_msg(strstr(err, p) != NULL, "%s", err);
	ck_assert_int_eq(dml_store_open(NULL, MAP, 1, 1, &s, err, sizeof(err)), DML_EINVAL);
}
END_TEST

START_TEST(test_creates_directory)
{
	static const char *const made[] = { "data.mdb", "lock.mdb", "owner", "manifest",
					    "ckpt/data.mdb", "ckpt/lock.mdb", "ckpt" };
	struct dml_store *s = NULL;
	char sub[DML_TEST_PATH_MAX], p[DML_TEST_PATH_MAX + 16], err[512];
	struct stat st;

	dml_test_tmpdir_path(sub, sizeof(sub), "sub");
	ck_assert_msg(dml_store_open(sub, MAP, 1, 1, &s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(stat(sub, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0700);
	dml_store_close(s);
	/* What it made, the checkpoints' environment included, and no more. */
	for (size_t i = 0; i < DML_ARRAY_LEN(made); i++) {
		snprintf(p, sizeof(p), "%s/%s", sub, made[i]);
		ck_assert_msg(unlink(p) == 0 || (!strcmp(made[i], "ckpt") && rmdir(p) == 0),
			      "%s", p);
	}
	ck_assert_int_eq(rmdir(sub), 0);
}
END_TEST

/* One process at a time: a second open is refused until the first closes. */
START_TEST(test_second_open_refused)
{
	struct dml_store *s = open_ok(1, 0), *t = (struct dml_store *)1;
	char err[512] = "";

	ck_assert_int_eq(dml_store_open(dir(), 0, 1, 1, &t, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(err, "in use by another process") != NULL &&
		      strncmp(err, dir(), strlen(dir())) == 0, "%s", err);
	dml_store_close(s);
	s = open_ok(1, 0);
	dml_store_close(s);
}
END_TEST

/* The tests of this file, added to tc. */
static void open_tests(TCase *tc)
{
	tcase_add_test(tc, test_other_server_refused);
	tcase_add_test(tc, test_other_format_refused);
	tcase_add_test(tc, test_garbage_file_refused);
	tcase_add_test(tc, test_garbage_checkpoint_file_refused);
	tcase_add_test(tc, test_path_not_a_directory);
	tcase_add_test(tc, test_creates_directory);
	tcase_add_test(tc, test_second_open_refused);
}

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("store");

	dml_test_tmpdir_fixture(tc, "check_store", 1);
	check_store_log_tests(tc);
	check_store_ckpt_tests(tc);
	open_tests(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(store_suite());
}
