/*
 * Unit tests of the LMDB gradient log (store/store.h), each in a fresh
 * temporary folder that is the store's directory: dense and sparse records
 * round-trip bit-exact and in order, across commits and reopenings; an
 * uncommitted batch is dropped; the dedupe state follows (worker,
 * incarnation, seq); stores of another server or format, a garbage
 * data.mdb and a path that is no directory are refused with the path and
 * the reason; a full map fails the commit and keeps what was committed;
 * damaged records (written with raw LMDB) stop the replay with their
 * position.
 */
#include <check.h>
#include <inttypes.h>
#include <lmdb.h>
#include <math.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/check_run.h"
#include "store/ckpt_writer.h"
#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "test/tmpdir.h"
#include "proto/util.h"

#define MAP (1u << 20)

/* The record layout store.c documents: offsets the damage tests poke at. */
enum { OFF_DENSE = 36, OFF_BEGIN = 37, OFF_END = 45, OFF_NKEYS = 53, OFF_WIDTH = 57,
       OFF_HDR = 61 };

static const char *dir(void)
{
	return dml_test_tmpdir();
}

static struct dml_store *open_ok(uint32_t node, uint64_t map_size)
{
	struct dml_store *s = NULL;
	char err[512] = "x";

	ck_assert_msg(dml_store_open(dir(), map_size, 1, node, &s, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_str_eq(err, "");
	ck_assert_ptr_nonnull(s);
	return s;
}

static void commit_ok(struct dml_store *s)
{
	char err[512] = "x";

	ck_assert_msg(dml_store_commit(s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(dml_store_pending(s, NULL), 0);
}

/* ---- records -------------------------------------------------------------- */

static const uint64_t sparse_keys[] = { 0, 7, UINT64_MAX, 1ull << 40 };
static float values[64];

/* Floats whose bits must survive: -0, a denormal, a NaN with payload, inf. */
static void values_init(void)
{
	uint32_t bits[] = { 0x80000000u, 0x00000001u, 0x7fc12345u, 0x7f800000u };

	for (size_t i = 0; i < 64; i++)
		values[i] = (float)i * 0.5f - 3.0f;
	memcpy(values, bits, sizeof(bits));
}

/* A record that is dense for even n, sparse for odd n, its fields from n. */
static struct dml_log_rec rec_n(uint32_t n)
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

static void same_rec(const struct dml_log_rec *a, const struct dml_log_rec *b)
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

static void append_n(struct dml_store *s, uint32_t n)
{
	struct dml_log_rec r = rec_n(n);

	ck_assert_int_eq(dml_store_append(s, &r), 0);
}

/* Replay expects records first, first + 1, ... and counts them. */
struct expect {
	uint32_t first, seen, stop_at;
};

static int expect_fn(const struct dml_log_rec *r, void *arg)
{
	struct expect *e = arg;
	struct dml_log_rec want = rec_n(e->first + e->seen);

	same_rec(&want, r);
	e->seen++;
	return e->stop_at && e->seen == e->stop_at ? 7 : 0;
}

static void replay_expect(struct dml_store *s, uint32_t first, uint32_t count)
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

static void raw_put(const char *db, const void *key, size_t klen, const void *val, size_t vlen)
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
static size_t raw_get(const char *db, const void *key, size_t klen, void *buf, size_t cap)
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

static void lsn_key(uint8_t k[8], uint64_t lsn)
{
	for (int i = 7; i >= 0; i--, lsn >>= 8)
		k[i] = (uint8_t)lsn;
}

/* Entries in database db. */
static size_t raw_count(const char *db)
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

/* ---- tests ------------------------------------------------------------------ */

START_TEST(test_round_trip_dense_and_sparse)
{
	for (int nosync = 0; nosync <= 1; nosync++) {
		struct dml_store *s = NULL;
		char err[512];
		size_t bytes = 0;

		values_init();
		ck_assert_int_eq(dml_store_open(dir(), MAP, nosync, 1, &s, err, sizeof(err)), 0);
		append_n(s, 0);
		append_n(s, 1);
		/* 61-byte headers; dense: 5 keys x width 1; sparse: 4 keys x width 2. */
		ck_assert_uint_eq(dml_store_pending(s, &bytes), 2);
		ck_assert_uint_eq(bytes, (61 + 5 * 4) + (61 + 4 * 8 + 8 * 4));
		commit_ok(s);
		ck_assert_uint_eq(dml_store_pending(s, &bytes), 0);
		ck_assert_uint_eq(bytes, 0);
		replay_expect(s, 0, 2);
		dml_store_close(s);
		/* A new store: a data.mdb gone while the manifest names it is refused. */
		unlink(dml_test_tmpdir_path(err, sizeof(err), "data.mdb"));
		unlink(dml_test_tmpdir_path(err, sizeof(err), "lock.mdb"));
		unlink(dml_test_tmpdir_path(err, sizeof(err), "manifest"));
	}
}
END_TEST

START_TEST(test_reopen_keeps_order_and_continues)
{
	struct dml_store *s;
	uint32_t n = 0;

	values_init();
	s = open_ok(1, MAP);
	for (int batch = 1; batch <= 3; batch++) {
		for (int i = 0; i < batch; i++)
			append_n(s, n++);
		commit_ok(s);
	}
	dml_store_close(s);
	s = open_ok(1, MAP);
	replay_expect(s, 0, 6);
	append_n(s, n++);
	commit_ok(s);
	dml_store_close(s);
	s = open_ok(1, MAP);
	replay_expect(s, 0, 7);
	dml_store_close(s);
}
END_TEST

START_TEST(test_uncommitted_batch_dropped)
{
	struct dml_store *s;

	values_init();
	s = open_ok(1, MAP);
	append_n(s, 0);
	commit_ok(s);
	append_n(s, 1);
	append_n(s, 2);
	ck_assert_uint_eq(dml_store_pending(s, NULL), 2);
	dml_store_close(s);
	s = open_ok(1, MAP);
	ck_assert_uint_eq(dml_store_pending(s, NULL), 0);
	replay_expect(s, 0, 1);
	/* The next commit takes the dropped records' places in the order. */
	append_n(s, 1);
	commit_ok(s);
	replay_expect(s, 0, 2);
	dml_store_close(s);
}
END_TEST

struct seen_dedupe {
	uint32_t worker[8];
	uint64_t incarnation[8], seq[8];
	int n, stop_at;
};

static int dedupe_fn(uint32_t worker, uint64_t incarnation, uint64_t seq, void *arg)
{
	struct seen_dedupe *d = arg;

	ck_assert_int_lt(d->n, 8);
	d->worker[d->n] = worker;
	d->incarnation[d->n] = incarnation;
	d->seq[d->n] = seq;
	d->n++;
	return d->n == d->stop_at ? 9 : 0;
}

static void push(struct dml_store *s, uint32_t worker, uint64_t incarnation, uint64_t seq)
{
	struct dml_log_rec r = rec_n(0);

	r.worker = worker;
	r.incarnation = incarnation;
	r.seq = seq;
	ck_assert_int_eq(dml_store_append(s, &r), 0);
}

static void dedupe_expect(struct dml_store *s)
{
	static const uint64_t want[5][3] = {
		{ 2, 5, 10 }, { 256, 1, 9 }, { 256, 2, 1 }, { 70000, 1, 5 }, { 70000, 2, 0 },
	};
	struct seen_dedupe d = { .n = 0 };
	char err[512] = "x";

	ck_assert_msg(dml_store_dedupe_each(s, dedupe_fn, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(d.n, 5);
	/* (worker, incarnation) order, both big-endian in the key. */
	for (int i = 0; i < 5; i++) {
		ck_assert_uint_eq(d.worker[i], want[i][0]);
		ck_assert_uint_eq(d.incarnation[i], want[i][1]);
		ck_assert_uint_eq(d.seq[i], want[i][2]);
	}
}

/* Every incarnation keeps its own highest seq, whatever the numbers' order:
 * a restarted worker's process may draw a lower one. */
START_TEST(test_dedupe_each_incarnation_highest_seq)
{
	struct dml_store *s;
	struct seen_dedupe d = { .stop_at = 2 };
	char err[512];

	values_init();
	s = open_ok(1, MAP);
	push(s, 256, 1, 1);
	push(s, 256, 1, 3);
	push(s, 256, 1, 2);             /* lower seq: the entry keeps 3 */
	commit_ok(s);
	push(s, 2, 5, 10);
	push(s, 256, 2, 1);             /* a new incarnation: an entry of its own */
	commit_ok(s);
	push(s, 256, 1, 9);             /* the old one again: its entry rises */
	push(s, 70000, 1, 5);
	push(s, 70000, 2, 0);           /* a restart inside one batch */
	commit_ok(s);
	dedupe_expect(s);
	ck_assert_int_eq(dml_store_dedupe_each(s, dedupe_fn, &d, err, sizeof(err)), 9);
	ck_assert_int_eq(d.n, 2);
	dml_store_close(s);
	s = open_ok(1, MAP);
	dedupe_expect(s);
	dml_store_close(s);
}
END_TEST

/* A worker's incarnations beyond STORE_DEDUPE_KEEP: the ones written
 * longest ago go, not the numerically lowest. */
START_TEST(test_dedupe_keeps_the_latest_written)
{
	static const uint64_t order[10] = { 50, 900, 10, 800, 20, 700, 30, 600, 40, 500 };
	struct seen_dedupe d = { .n = 0 };
	struct dml_store *s;
	char err[512];

	values_init();
	s = open_ok(1, MAP);
	for (int i = 0; i < 10; i++) {
		push(s, 7, order[i], (uint64_t)i + 1);
		commit_ok(s);
	}
	ck_assert_msg(dml_store_dedupe_each(s, dedupe_fn, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(d.n, STORE_DEDUPE_KEEP);
	for (int i = 0; i < d.n; i++) {
		ck_assert_uint_eq(d.worker[i], 7);
		/* 50 and 900 were written first. */
		ck_assert_uint_ne(d.incarnation[i], 50);
		ck_assert_uint_ne(d.incarnation[i], 900);
	}
	dml_store_close(s);
}
END_TEST

START_TEST(test_dedupe_bad_entry_refused)
{
	struct dml_store *s = open_ok(1, MAP);
	struct seen_dedupe d = { .n = 0 };
	/* Worker 42, incarnation 1; a value a byte short (its checksum right). */
	uint8_t key[12] = { 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 1 }, val[15] = { 0 };
	char err[512];

	dml_store_close(s);
	raw_put("dedupe", key, sizeof(key), val, sizeof(val));
	s = open_ok(1, MAP);
	ck_assert_int_eq(dml_store_dedupe_each(s, dedupe_fn, &d, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strstr(err, "dedupe entry for worker 42") && strstr(err, dir()), "%s", err);
	ck_assert_int_eq(d.n, 0);
	dml_store_close(s);
}
END_TEST

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
	open_refused(1, DML_ECONF, "store format 1, this build reads 4", NULL);
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

START_TEST(test_map_full)
{
	struct dml_store *s;
	struct dml_log_rec r;
	static float big[500];
	char err[512] = "";
	uint32_t committed = 0;
	int rc = 0;

	values_init();
	s = open_ok(1, 32 * 4096);
	while (committed < 200) {
		r = rec_n(0);
		r.end = r.begin + 500;
		r.values = big;
		ck_assert_int_eq(dml_store_append(s, &r), 0);
		rc = dml_store_commit(s, err, sizeof(err));
		if (rc)
			break;
		committed++;
	}
	ck_assert_int_eq(rc, DML_EFULL);
	ck_assert_uint_ge(committed, 1);
	ck_assert_msg(strstr(err, dir()) && strstr(err, "map is full (map_size 128K)") &&
		      strstr(err, "raise [store] map_size"), "%s", err);
	/* The batch is kept, the log holds what was committed before. */
	ck_assert_uint_eq(dml_store_pending(s, NULL), 1);
	ck_assert_uint_eq(dml_store_log_count(s), committed);
	dml_store_close(s);
	/* A larger map takes more. */
	s = open_ok(1, 4 * MAP);
	ck_assert_uint_eq(dml_store_log_count(s), committed);
	ck_assert_int_eq(dml_store_append(s, &r), 0);
	commit_ok(s);
	ck_assert_uint_eq(dml_store_log_count(s), committed + 1);
	dml_store_close(s);
}
END_TEST

static int count_fn(const struct dml_log_rec *r, void *arg)
{
	(void)r;
	(*(int *)arg)++;
	return 0;
}

/* Record 2 of 3 replaced by bytes (len), replay stops there. */
static void damaged_record(const uint8_t *bytes, size_t len, const char *why)
{
	struct dml_store *s;
	uint8_t key[8];
	char err[512] = "";
	int calls = 0;

	lsn_key(key, 2);
	raw_put("log", key, sizeof(key), bytes, len);
	s = open_ok(1, MAP);
	ck_assert_int_eq(dml_store_replay(s, count_fn, &calls, err, sizeof(err)), DML_ECONF);
	ck_assert_int_eq(calls, 1);
	ck_assert_msg(strstr(err, dir()) && strstr(err, "log record 2: ") && strstr(err, why),
		      "%s (want %s)", err, why);
	dml_store_close(s);
}

static void poke32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static void poke64(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, 8);
}

START_TEST(test_damaged_records_refused)
{
	struct dml_store *s;
	uint8_t key[8], good[512], bad[512];
	size_t len;

	values_init();
	s = open_ok(1, MAP);
	for (uint32_t n = 0; n < 3; n++)
		append_n(s, n);
	commit_ok(s);
	dml_store_close(s);
	lsn_key(key, 2);
	len = raw_get("log", key, sizeof(key), good, sizeof(good) - 1);

	damaged_record(good, 10, "shorter than a header");
	damaged_record(good, len - 1, "its header says");
	damaged_record(good, len + 1, "its header says");
	memcpy(bad, good, len);
	poke32(bad + OFF_WIDTH, 0);
	damaged_record(bad, len, "width 0");
	memcpy(bad, good, len);
	bad[OFF_DENSE] = 4;
	damaged_record(bad, len, "flags 4");
	memcpy(bad, good, len);          /* record 2 (n = 1) is sparse */
	poke32(bad + OFF_NKEYS, UINT32_MAX);
	damaged_record(bad, len, "its header says");
	poke32(bad + OFF_WIDTH, UINT32_MAX);
	damaged_record(bad, len, "value count overflows");
	memcpy(bad, good, len);
	bad[OFF_DENSE] = 1;
	poke32(bad + OFF_NKEYS, 0);
	poke64(bad + OFF_BEGIN, 5);
	poke64(bad + OFF_END, 4);
	damaged_record(bad, len, "begin > end");
	poke64(bad + OFF_BEGIN, 0);
	poke64(bad + OFF_END, UINT64_MAX);
	damaged_record(bad, len, "overflows");
	poke64(bad + OFF_END, 0);
	poke32(bad + OFF_NKEYS, 3);
	damaged_record(bad, len, "dense record with keys");

	/* A weight after the header: none there, not a positive finite
	 * number, or on rows (which are put back, not pushed). */
	memcpy(bad, good, len);
	bad[OFF_DENSE] |= 8;
	damaged_record(bad, OFF_HDR + 2, "shorter than a weighted header");
	memcpy(bad + OFF_HDR + 4, good + OFF_HDR, len - OFF_HDR);
	{
		const float weights[] = { NAN, -1.0f, 0.0f, INFINITY };
		const char *const why[] = { "weight nan", "weight -1", "weight 0", "weight inf" };

		for (size_t i = 0; i < DML_ARRAY_LEN(weights); i++) {
			memcpy(bad + OFF_HDR, &weights[i], sizeof(float));
			damaged_record(bad, len + 4, why[i]);
		}
	}
	bad[OFF_DENSE] |= 2;
	damaged_record(bad, len + 4, "flags 10");
}
END_TEST

/* A step record: what it is, the only form it may take, no worker sequence. */
static struct dml_log_rec step_rec(uint64_t clock)
{
	struct dml_log_rec r = {
		.job = 3, .clock = clock, .dense = 1, .width = 1, .values = values, .step = 1,
	};

	return r;
}

static int steps_fn(const struct dml_log_rec *r, void *arg)
{
	struct dml_log_rec want = step_rec(40);
	int *n = arg;

	same_rec(&want, r);
	ck_assert_uint_eq(r->end, r->begin);
	(*n)++;
	return 0;
}

START_TEST(test_step_records)
{
	struct dml_store *s;
	struct dml_log_rec r;
	struct seen_dedupe d = { .n = 0 };
	uint8_t key[8], good[256], bad[256];
	char err[512] = "x";
	size_t len;
	int n = 0;

	values_init();
	s = open_ok(1, MAP);
	r = step_rec(40);
	ck_assert_int_eq(dml_store_append(s, &r), 0);
	/* rows, a push's sequence, a range, keys, deferred: not a step */
	r.rows = 1;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = step_rec(40);
	r.seq = 7;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = step_rec(40);
	r.end = 2;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = step_rec(40);
	r.dense = 0;
	r.nkeys = 1;
	r.keys = sparse_keys;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = step_rec(40);
	r.deferred = 1;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	commit_ok(s);
	ck_assert_msg(dml_store_replay(s, steps_fn, &n, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(n, 1);
	ck_assert_msg(dml_store_dedupe_each(s, dedupe_fn, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(d.n, 0);
	dml_store_close(s);

	/* On disk: a step flag with a range, with rows, or on a sparse record. */
	lsn_key(key, 1);
	len = raw_get("log", key, sizeof(key), good, sizeof(good) - 1);
	memcpy(bad, good, len);
	poke64(bad + OFF_END, 1);
	damaged_record(bad, len, "flags 33");
	memcpy(bad, good, len);
	bad[OFF_DENSE] |= 2;
	damaged_record(bad, len, "flags 35");
	memcpy(bad, good, len);
	bad[OFF_DENSE] = 32;
	damaged_record(bad, len, "flags 32");
	/* deferred rows are not a push either */
	memcpy(bad, good, len);
	bad[OFF_DENSE] = 1 | 2 | 16;
	damaged_record(bad, len, "flags 19");
}
END_TEST

/* A weight other than 1 costs a record 4 bytes; weight 1 costs nothing. */
START_TEST(test_weight_costs_four_bytes)
{
	struct dml_store *s;
	struct dml_log_rec r;
	size_t plain, weighted;

	values_init();
	s = open_ok(1, MAP);
	r = rec_n(0);
	ck_assert_int_eq(dml_store_append(s, &r), 0);
	dml_store_pending(s, &plain);
	r.weight = 1.0f;
	ck_assert_int_eq(dml_store_append(s, &r), 0);
	dml_store_pending(s, &weighted);
	ck_assert_uint_eq(weighted, 2 * plain);
	r.weight = 1.5f;
	ck_assert_int_eq(dml_store_append(s, &r), 0);
	dml_store_pending(s, &weighted);
	ck_assert_uint_eq(weighted, 3 * plain + 4);
	r.weight = -1.5f;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r.weight = NAN;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	commit_ok(s);
	dml_store_close(s);
}
END_TEST

START_TEST(test_replay_stops_on_fn)
{
	struct dml_store *s;
	struct expect e = { .stop_at = 2 };
	char err[512];

	values_init();
	s = open_ok(1, MAP);
	for (uint32_t n = 0; n < 4; n++)
		append_n(s, n);
	commit_ok(s);
	ck_assert_int_eq(dml_store_replay(s, expect_fn, &e, err, sizeof(err)), 7);
	ck_assert_uint_eq(e.seen, 2);
	dml_store_close(s);
}
END_TEST

START_TEST(test_empty_commit_and_null_close)
{
	struct dml_store *s = open_ok(1, MAP);
	size_t bytes = 1;
	int calls = 0;
	char err[512];

	ck_assert_uint_eq(dml_store_pending(s, &bytes), 0);
	ck_assert_uint_eq(bytes, 0);
	commit_ok(s);
	ck_assert_uint_eq(dml_store_log_count(s), 0);
	ck_assert_int_eq(dml_store_replay(s, count_fn, &calls, err, sizeof(err)), 0);
	ck_assert_int_eq(calls, 0);
	dml_store_close(s);
	dml_store_close(NULL);
}
END_TEST

START_TEST(test_bad_append_refused)
{
	struct dml_store *s;
	struct dml_log_rec r;

	values_init();
	s = open_ok(1, MAP);
	r = rec_n(0);
	r.width = 0;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = rec_n(0);
	r.begin = r.end + 1;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = rec_n(0);
	r.values = NULL;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = rec_n(1);
	r.keys = NULL;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	r = rec_n(0);
	r.end = UINT64_MAX;
	r.begin = 0;
	ck_assert_int_eq(dml_store_append(s, &r), DML_EINVAL);
	ck_assert_int_eq(dml_store_append(NULL, &r), DML_EINVAL);
	ck_assert_uint_eq(dml_store_pending(s, NULL), 0);
	/* Empty ones are fine, and their values pointer is never NULL. */
	r = rec_n(0);
	r.end = r.begin;
	r.values = NULL;
	ck_assert_int_eq(dml_store_append(s, &r), 0);
	commit_ok(s);
	dml_store_close(s);
}
END_TEST

START_TEST(test_durability_names)
{
	ck_assert_str_eq(dml_durability_names[DML_DURABILITY_SYNC], "sync");
	ck_assert_str_eq(dml_durability_names[DML_DURABILITY_BATCH], "batch");
	ck_assert_str_eq(dml_durability_names[DML_DURABILITY_NONE], "none");
	ck_assert_ptr_null(dml_durability_names[3]);
}
END_TEST

/* ---- checkpoints -------------------------------------------------------------- */

struct ck_seen {
	int chunks;
	uint64_t rows;
	int dense_ok, sparse_ok;
};

static int ck_fn(const struct dml_ckpt_rows *r, void *arg)
{
	struct ck_seen *c = arg;

	c->chunks++;
	c->rows += r->n;
	if (r->dense && r->table == 1 && r->begin == 10 && r->n == 5 && r->row_floats == 2 &&
	    memcmp(r->rows, values, 10 * sizeof(float)) == 0)
		c->dense_ok = 1;
	if (!r->dense && r->table == 2 && r->n == 4 && r->row_floats == 3 &&
	    memcmp(r->keys, sparse_keys, sizeof(sparse_keys)) == 0 &&
	    memcmp(r->rows, values, 12 * sizeof(float)) == 0)
		c->sparse_ok = 1;
	return 0;
}

/* A checkpoint of two chunks (a dense and a sparse one) as info says. */
static void checkpoint_rows(struct dml_store *s, const struct dml_ckpt_info *info, int commit)
{
	struct dml_ckpt_rows d = { 1, 1, 10, NULL, 5, 2, values };
	struct dml_ckpt_rows sp = { 2, 0, 0, sparse_keys, 4, 3, values };
	char err[512];

	ck_assert_msg(dml_store_checkpoint_begin(s, info, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(dml_store_checkpoint_add(s, &d, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(dml_store_checkpoint_add(s, &sp, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(dml_store_checkpoint_bytes(s), 2 * 25 + 5 * 2 * 4 + 4 * 8 + 4 * 3 * 4);
	ck_assert_msg(dml_store_checkpoint_end(s, commit, err, sizeof(err)) == 0, "%s", err);
}

/* dml_store_base_map gives the bytes of want. */
static void base_map_is(struct dml_store *s, const char *want)
{
	void *m;
	size_t n;

	ck_assert_int_eq(dml_store_base_map(s, &m, &n), 0);
	ck_assert(n == strlen(want) && memcmp(m, want, n) == 0);
	free(m);
}

/* Unlisted, map version 7, next clock 12, holding the whole log. */
static void checkpoint_two_chunks(struct dml_store *s, int commit)
{
	struct dml_ckpt_info info = { 7, 12, dml_store_log_last(s), 0, 0, "m7", 2 };

	checkpoint_rows(s, &info, commit);
}

START_TEST(test_checkpoint_empties_log_and_reads_back)
{
	struct dml_store *s;
	struct ck_seen c = { 0 };
	char err[512];

	values_init();
	s = open_ok(1, 0);
	for (uint32_t n = 0; n < 3; n++)
		append_n(s, n);
	/* Not with a batch waiting: its pushes would be in neither. */
	commit_ok(s);
	ck_assert_uint_eq(dml_store_log_count(s), 3);
	/* Abandoned: nothing changes. */
	checkpoint_two_chunks(s, 0);
	ck_assert_uint_eq(dml_store_log_count(s), 3);
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.chunks, 0);
	ck_assert_uint_eq(dml_store_checkpoint_version(s), 0);
	/* Committed: the rows are there, the log is empty; and after a reopen. */
	checkpoint_two_chunks(s, 1);
	ck_assert_uint_eq(dml_store_log_count(s), 0);
	ck_assert_uint_eq(dml_store_checkpoint_version(s), 7);
	/* The checkpoint's map, not the log's first. */
	base_map_is(s, "m7");
	ck_assert_uint_eq(dml_store_checkpoint_next_clock(s), 12);
	dml_store_close(s);
	s = open_ok(1, 0);
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), 0);
	ck_assert(c.chunks == 2 && c.rows == 9 && c.dense_ok && c.sparse_ok);
	/* A later one replaces it. */
	checkpoint_two_chunks(s, 1);
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.chunks, 2);
	/* A new run drops it. */
	ck_assert_int_eq(dml_store_start_run(s, 42, 1, "m1", 2, err, sizeof(err)), 0);
	ck_assert_uint_eq(dml_store_run(s), 42);
	ck_assert_uint_eq(dml_store_log_version(s), 1);
	/* No checkpoint of the run: the map the log began at. */
	base_map_is(s, "m1");
	ck_assert_uint_eq(dml_store_checkpoint_version(s), 0);
	ck_assert_uint_eq(dml_store_checkpoint_next_clock(s), 0);
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.chunks, 0);
	dml_store_close(s);
}
END_TEST

START_TEST(test_damaged_checkpoint_refused)
{
	struct dml_store *s;
	struct ck_seen c = { 0 };
	uint8_t key[16], bad[30];
	char err[512];

	values_init();
	s = open_ok(1, 0);
	checkpoint_two_chunks(s, 1);
	dml_store_close(s);
	/* Chunk 2 of checkpoint 1 claims more rows than it carries. */
	lsn_key(key, 1);
	lsn_key(key + 8, 2);
	memset(bad, 0, sizeof(bad));
	bad[13] = 9;
	bad[21] = 1;
	raw_put("ckpt/ckpt", key, sizeof(key), bad, sizeof(bad));
	s = open_ok(1, 0);
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strstr(err, "checkpoint chunk 2") != NULL, "%s", err);
	dml_store_close(s);
}
END_TEST

/* A checkpoint of two chunks listed under clock, keeping keep. */
static void checkpoint_listed(struct dml_store *s, uint64_t clock, uint32_t keep)
{
	struct dml_ckpt_info info = { 3, 0, dml_store_log_last(s), clock, keep, NULL, 0 };

	checkpoint_rows(s, &info, 1);
}

/* The clocks listed, oldest first, as "10 20 30". */
static void listed_expect(struct dml_store *s, const char *want)
{
	struct dml_store_snap *sn;
	char got[128] = "", err[512];
	size_t n, len = 0;

	ck_assert_msg(dml_store_snapshots(s, &sn, &n, err, sizeof(err)) == 0, "%s", err);
	for (size_t i = 0; i < n; i++) {
		len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%" PRIu64, i ? " " : "",
					sn[i].clock);
		ck_assert_uint_eq(sn[i].version, 3);
		ck_assert_uint_eq(sn[i].bytes, 2 * 25 + 5 * 2 * 4 + 4 * 8 + 4 * 3 * 4);
		ck_assert_uint_gt(sn[i].unix_ms, 0);
	}
	free(sn);
	ck_assert_str_eq(got, want);
}

static void listed_reads_back_newest(struct dml_store *s)
{
	struct ck_seen c = { 0 };
	char err[512];

	ck_assert_msg(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert(c.chunks == 2 && c.dense_ok && c.sparse_ok);
}

static void listed_reads_back(struct dml_store *s, uint64_t clock)
{
	struct ck_seen c = { 0 };
	char err[512];

	ck_assert_msg(dml_store_snapshot_each(s, clock, ck_fn, &c, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert(c.chunks == 2 && c.dense_ok && c.sparse_ok);
}

/*
 * Checkpoints listed under clocks: the newest keep stay, older ones and
 * unlisted ones that are not the newest are deleted with their chunks,
 * and the newest stays loadable when its listing is deleted.
 */
START_TEST(test_listed_checkpoints_keep_the_newest)
{
	struct dml_store *s;
	struct ck_seen c = { 0 };
	char err[512];

	values_init();
	s = open_ok(1, 0);
	for (uint64_t clock = 10; clock <= 40; clock += 10)
		checkpoint_listed(s, clock, 3);
	listed_expect(s, "20 30 40");
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 3 * 2);
	ck_assert_uint_eq(dml_store_checkpoint_next_clock(s), 40);
	listed_reads_back(s, 20);
	ck_assert_int_eq(dml_store_snapshot_each(s, 10, ck_fn, &c, err, sizeof(err)),
			 DML_ENOTFOUND);
	ck_assert_msg(strstr(err, "no checkpoint at clock 10") != NULL, "%s", err);
	/* An unlisted one (the log grew) is the newest; the next replaces it. */
	checkpoint_two_chunks(s, 1);
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 4 * 2);
	checkpoint_two_chunks(s, 1);
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 4 * 2);
	listed_expect(s, "20 30 40");
	/* The same clock again replaces its listing. */
	checkpoint_listed(s, 40, 3);
	listed_expect(s, "20 30 40");
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 3 * 2);
	/* Deleted: gone, but the newest stays for a restart. */
	ck_assert_int_eq(dml_store_snapshot_drop(s, 30, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_store_snapshot_drop(s, 40, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_store_snapshot_drop(s, 40, err, sizeof(err)), DML_ENOTFOUND);
	ck_assert_msg(strstr(err, "no checkpoint at clock 40") != NULL, "%s", err);
	listed_expect(s, "20");
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 2 * 2);
	dml_store_close(s);
	s = open_ok(1, 0);
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), 0);
	ck_assert(c.chunks == 2 && c.dense_ok && c.sparse_ok);
	listed_reads_back(s, 20);
	/* A smaller keep prunes at the next one; a new run drops them all. */
	checkpoint_listed(s, 50, 1);
	listed_expect(s, "50");
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 2);
	ck_assert_int_eq(dml_store_start_run(s, 43, 2, NULL, 0, err, sizeof(err)), 0);
	listed_expect(s, "");
	ck_assert_uint_eq(raw_count("ckpt/ckpt"), 0);
	dml_store_close(s);
}
END_TEST

/*
 * A checkpoint holds the log records up to its lsn: they leave the log,
 * a replay starts after them, and records logged after a reopen (with
 * the log empty) come after them too.
 */
START_TEST(test_checkpoint_holds_records_up_to_its_lsn)
{
	struct dml_store *s;
	struct dml_ckpt_info info = { 1, 0, 2, 0, 0, NULL, 0 };

	values_init();
	s = open_ok(1, 0);
	for (uint32_t n = 0; n < 3; n++)
		append_n(s, n);
	commit_ok(s);
	ck_assert_uint_eq(dml_store_log_last(s), 3);
	checkpoint_rows(s, &info, 1);
	replay_expect(s, 2, 1);
	dml_store_close(s);
	s = open_ok(1, 0);
	replay_expect(s, 2, 1);
	info.lsn = dml_store_log_last(s);
	checkpoint_rows(s, &info, 1);
	replay_expect(s, 0, 0);
	dml_store_close(s);
	s = open_ok(1, 0);
	ck_assert_uint_eq(dml_store_log_last(s), 3);
	append_n(s, 7);
	commit_ok(s);
	replay_expect(s, 7, 1);
	dml_store_close(s);
}
END_TEST

/* Checkpoints of another run than the log's (a new run's start cut short) are dropped. */
START_TEST(test_checkpoints_of_another_run_dropped)
{
	struct dml_store *s;
	struct ck_seen c = { 0 };
	uint8_t run[8] = { 5 };
	char err[512];

	values_init();
	s = open_ok(1, 0);
	checkpoint_listed(s, 10, 3);
	listed_expect(s, "10");
	/* What start_run does first, the manifest of the new run; then the
	 * log's part, and a crash before the checkpoints' (no close). */
	ck_assert_int_eq(store_manifest_write(s, &(struct store_manifest){ .id = s->mf.id,
					      .run = 5 }, err, sizeof(err)), 0);
	s->mf_ok = 0;
	dml_store_close(s);
	raw_put("meta", "run", 3, run, sizeof(run));
	s = open_ok(1, 0);
	ck_assert_uint_eq(dml_store_run(s), 5);
	listed_expect(s, "");
	ck_assert_int_eq(dml_store_checkpoint_each(s, ck_fn, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(c.chunks, 0);
	ck_assert_uint_eq(dml_store_checkpoint_version(s), 0);
	dml_store_close(s);
}
END_TEST

/* Wait for the writer's next result. */
static void writer_result(struct dml_ckpt_writer *w, struct dml_ckpt_result *r)
{
	struct pollfd p = { .fd = dml_ckpt_writer_fd(w), .events = POLLIN };

	while (!dml_ckpt_writer_result(w, r))
		ck_assert_int_eq(poll(&p, 1, 10000), 1);
}

/* The writer thread: writes and deletes in the order given, results by fd. */
START_TEST(test_writer_thread)
{
	struct dml_store *s;
	struct dml_ckpt_writer *w;
	struct dml_ckpt_snapshot *sn;
	struct dml_ckpt_result r;
	struct dml_ckpt_info info = { 3, 0, 0, 10, 2, NULL, 0 };
	float *rows = malloc(10 * sizeof(float));
	uint64_t *keys = malloc(sizeof(sparse_keys));
	float *srows = malloc(12 * sizeof(float));

	values_init();
	memcpy(rows, values, 10 * sizeof(float));
	memcpy(keys, sparse_keys, sizeof(sparse_keys));
	memcpy(srows, values, 12 * sizeof(float));
	s = open_ok(1, 0);
	ck_assert_int_eq(dml_ckpt_writer_start(s, &w), 0);
	sn = dml_ckpt_snapshot_new();
	dml_ckpt_snapshot_keep(sn, rows);
	dml_ckpt_snapshot_keep(sn, keys);
	dml_ckpt_snapshot_keep(sn, srows);
	dml_ckpt_snapshot_add(sn, &(struct dml_ckpt_rows){ 1, 1, 10, NULL, 5, 2, rows });
	dml_ckpt_snapshot_add(sn, &(struct dml_ckpt_rows){ 2, 0, 0, keys, 4, 3, srows });
	ck_assert_uint_eq(dml_ckpt_snapshot_rows(sn), 9);
	dml_ckpt_writer_write(w, sn, &info, 77);
	dml_ckpt_writer_drop(w, 99, 78);
	dml_ckpt_writer_drop(w, 10, 79);
	writer_result(w, &r);
	ck_assert(!r.drop && r.tag == 77 && r.clock == 10 && r.rc == 0 && r.rows == 9);
	ck_assert_uint_eq(r.bytes, 2 * 25 + 5 * 2 * 4 + 4 * 8 + 4 * 3 * 4);
	writer_result(w, &r);
	ck_assert(r.drop && r.tag == 78 && r.rc == DML_ENOTFOUND);
	ck_assert_msg(strstr(r.err, "no checkpoint at clock 99"), "%s", r.err);
	writer_result(w, &r);
	ck_assert(r.drop && r.tag == 79 && r.rc == 0);
	dml_ckpt_writer_drain(w);
	ck_assert_uint_eq(dml_ckpt_writer_writes(w), 0);
	ck_assert_int_eq(dml_ckpt_writer_result(w, &r), 0);
	listed_expect(s, "");
	/* The newest stays loadable though no clock lists it. */
	listed_reads_back_newest(s);
	dml_ckpt_writer_stop(w);
	dml_store_close(s);
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

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("store");

	dml_test_tmpdir_fixture(tc, "check_store", 1);
	tcase_add_test(tc, test_round_trip_dense_and_sparse);
	tcase_add_test(tc, test_checkpoint_empties_log_and_reads_back);
	tcase_add_test(tc, test_second_open_refused);
	tcase_add_test(tc, test_damaged_checkpoint_refused);
	tcase_add_test(tc, test_listed_checkpoints_keep_the_newest);
	tcase_add_test(tc, test_checkpoint_holds_records_up_to_its_lsn);
	tcase_add_test(tc, test_checkpoints_of_another_run_dropped);
	tcase_add_test(tc, test_writer_thread);
	tcase_add_test(tc, test_reopen_keeps_order_and_continues);
	tcase_add_test(tc, test_uncommitted_batch_dropped);
	tcase_add_test(tc, test_dedupe_each_incarnation_highest_seq);
	tcase_add_test(tc, test_dedupe_keeps_the_latest_written);
	tcase_add_test(tc, test_dedupe_bad_entry_refused);
	tcase_add_test(tc, test_other_server_refused);
	tcase_add_test(tc, test_other_format_refused);
	tcase_add_test(tc, test_garbage_file_refused);
	tcase_add_test(tc, test_garbage_checkpoint_file_refused);
	tcase_add_test(tc, test_path_not_a_directory);
	tcase_add_test(tc, test_creates_directory);
	tcase_add_test(tc, test_map_full);
	tcase_add_test(tc, test_damaged_records_refused);
	tcase_add_test(tc, test_weight_costs_four_bytes);
	tcase_add_test(tc, test_step_records);
	tcase_add_test(tc, test_replay_stops_on_fn);
	tcase_add_test(tc, test_empty_commit_and_null_close);
	tcase_add_test(tc, test_bad_append_refused);
	tcase_add_test(tc, test_durability_names);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(store_suite());
}
