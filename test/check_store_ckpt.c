/*
 * check_store's tests of the checkpoints: a checkpoint empties the log and
 * reads back, damaged chunks are refused, the listed checkpoints keep the
 * newest, a checkpoint holds the records up to its lsn, those of another
 * run are dropped, and the writer thread writes and drops them.
 */
#include <check.h>
#include <inttypes.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_store.h"
#include "store/ckpt_writer.h"
#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "test/tmpdir.h"

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
	ck_assert_uint_eq(dml_store_checkpoint_bytes(s), 2 * 32 + 5 * 2 * 4 + 4 * 8 + 4 * 3 * 4);
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
		ck_assert_uint_eq(sn[i].bytes, 2 * 32 + 5 * 2 * 4 + 4 * 8 + 4 * 3 * 4);
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
	ck_assert_uint_eq(r.bytes, 2 * 32 + 5 * 2 * 4 + 4 * 8 + 4 * 3 * 4);
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

/* The tests of this file, added to tc. */
void check_store_ckpt_tests(TCase *tc)
{
	tcase_add_test(tc, test_checkpoint_empties_log_and_reads_back);
	tcase_add_test(tc, test_damaged_checkpoint_refused);
	tcase_add_test(tc, test_listed_checkpoints_keep_the_newest);
	tcase_add_test(tc, test_checkpoint_holds_records_up_to_its_lsn);
	tcase_add_test(tc, test_checkpoints_of_another_run_dropped);
	tcase_add_test(tc, test_writer_thread);
}
