/*
 * check_store's tests of the log: dense and sparse records round-trip
 * bit-exact and in order, across commits and reopenings; an uncommitted
 * batch is dropped; the dedupe state follows (worker, incarnation, seq); a
 * full map fails the commit and keeps what was committed; damaged records
 * (written with raw LMDB) stop the replay with their position; step and
 * weighted records, bad appends and the durability names.
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/check_store.h"
#include "proto/dml_error.h"
#include "store/store.h"
#include "test/tmpdir.h"
#include "proto/util.h"

/* The record layout store.c documents: offsets the damage tests poke at. */
enum { OFF_DENSE = 36, OFF_BEGIN = 37, OFF_END = 45, OFF_NKEYS = 53, OFF_WIDTH = 57,
       OFF_HDR = 61 };

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

/* The tests of this file, added to tc. */
void check_store_log_tests(TCase *tc)
{
	tcase_add_test(tc, test_round_trip_dense_and_sparse);
	tcase_add_test(tc, test_reopen_keeps_order_and_continues);
	tcase_add_test(tc, test_uncommitted_batch_dropped);
	tcase_add_test(tc, test_dedupe_each_incarnation_highest_seq);
	tcase_add_test(tc, test_dedupe_keeps_the_latest_written);
	tcase_add_test(tc, test_dedupe_bad_entry_refused);
	tcase_add_test(tc, test_map_full);
	tcase_add_test(tc, test_damaged_records_refused);
	tcase_add_test(tc, test_step_records);
	tcase_add_test(tc, test_weight_costs_four_bytes);
	tcase_add_test(tc, test_replay_stops_on_fn);
	tcase_add_test(tc, test_empty_commit_and_null_close);
	tcase_add_test(tc, test_bad_append_refused);
	tcase_add_test(tc, test_durability_names);
}
