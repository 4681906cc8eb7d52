/*
 * Job-wide checkpoints end to end: dml-sched, dml-servers with a [store]
 * and dml-workers as real processes, driven through dmlctl.
 *
 *   - periodic ones (checkpoint_every) and one on demand (`dmlctl
 *     checkpoint`) while an lsq job trains: listed by `dmlctl
 *     checkpoints`, the newest checkpoint_keep kept, one deleted; each
 *     server's store lists exactly the clocks the scheduler lists, with
 *     the rows of every table it held;
 *   - checkpoint_every_s: one a second, deleted when the next job starts;
 *   - a job whose servers keep no store: the checkpoint is refused with
 *     the reason, and the job trains on.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/cluster.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "test/json.h"
#include "store/store.h"
#include "proto/util.h"

/* `dmlctl --json checkpoints JOB`: the clocks listed into clocks[] (at most
 * 8), their ages into ages[] (may be NULL). */
static size_t listed_ages(struct cluster *c, const char *job, uint64_t clocks[8],
			  double ages[8])
{
	const char *args[] = { "checkpoints", job, NULL };
	struct jval doc;
	const struct jval *list;
	size_t n;

	ck_assert_int_eq(cluster_dmlctl_json(c, args, &doc), 0);
	list = json_get(&doc, "checkpoints");
	ck_assert(list && list->type == J_ARR);
	n = list->n;
	ck_assert_uint_le(n, 8);
	for (size_t i = 0; i < n; i++) {
		clocks[i] = (uint64_t)jnum(&list->items[i], "clock");
		if (ages)
			ages[i] = jnum(&list->items[i], "age_ms");
		ck_assert_msg(jnum(&list->items[i], "bytes") > 0, "checkpoint %zu has no bytes", i);
		ck_assert(i == 0 || clocks[i] > clocks[i - 1]);
	}
	json_free(&doc);
	return n;
}

/* The clocks job 1 lists. */
static size_t listed(struct cluster *c, uint64_t clocks[8])
{
	return listed_ages(c, "1", clocks, NULL);
}

/* Wait until the job lists at least n checkpoints. */
static void wait_listed(struct cluster *c, const char *job, size_t n)
{
	uint64_t clocks[8];

	for (int waited = 0; waited < CLUSTER_WAIT_MS; waited += CLUSTER_POLL_MS) {
		if (listed_ages(c, job, clocks, NULL) >= n)
			return;
		cluster_sleep_ms(CLUSTER_POLL_MS);
	}
	ck_abort_msg("fewer than %zu checkpoints listed in time", n);
}

static int count_rows(const struct dml_ckpt_rows *r, void *arg)
{
	*(uint64_t *)arg += r->n;
	return 0;
}

/* Server node's store lists clocks[0..n-1], each with rows. */
static void store_lists(struct cluster *c, uint32_t node, const uint64_t *clocks, size_t n)
{
	struct dml_store *st;
	struct dml_store_snap *sn;
	size_t got;
	char path[512], err[512];

	snprintf(path, sizeof(path), "%s/store-%u", dml_test_env_dir(c->env), node);
	ck_assert_msg(dml_store_open(path, 0, 1, node, &st, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(dml_store_snapshots(st, &sn, &got, err, sizeof(err)) == 0, "%s", err);
	if (got != n) {
		for (size_t i = 0; i < got; i++)
			fprintf(stderr, "server %u keeps clock %llu\n", node,
				(unsigned long long)sn[i].clock);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, "the scheduler lists clock %llu\n",
				(unsigned long long)clocks[i]);
	}
	ck_assert_msg(got == n, "server %u keeps %zu checkpoints, the scheduler lists %zu",
		      node, got, n);
	for (size_t i = 0; i < n; i++) {
		uint64_t rows = 0;

		ck_assert_uint_eq(sn[i].clock, clocks[i]);
		ck_assert_msg(dml_store_snapshot_each(st, clocks[i], count_rows, &rows, err,
						      sizeof(err)) == 0, "%s", err);
		ck_assert_msg(rows > 0, "server %u: checkpoint at clock %llu holds no rows",
			      node, (unsigned long long)clocks[i]);
	}
	free(sn);
	dml_store_close(st);
}

START_TEST(test_checkpoints_periodic_and_on_demand)
{
	static const char *const take[] = { "checkpoint", "1", NULL };
	static const char *const stop[] = { "stop", "1", NULL };
	struct dml_test_output out;
	struct cluster c;
	struct jval doc;
	uint64_t clocks[8], clock, bytes;
	char cstr[32], *job;
	size_t n;

	cluster_up_conf(&c, 2, 2, "[store]\npath = @DIR@/store-@NODE@\n");
	/* It runs until stopped: deletes are refused once a job ended. */
	job = cluster_write_lsq_job(&c, "ckpt.conf",
				    "[job]\nname = e2e-ckpt\napp = lsq\ndata = synthetic\n"
				    "staleness = 1\nbatch_size = 32\nmax_clocks = 1000000\n"
				    "examples = 6000\ndim = 64\nseed = 9\ncheckpoint_every = 100\n"
				    "checkpoint_keep = 3\n");
	ck_assert_uint_eq(cluster_submit(&c, job), 1);
	cluster_wait_job_clock(&c, "1", 50);
	wait_listed(&c, "1", 2);

	/* On demand: it waits for the checkpoint and names its clock. */
	ck_assert_int_eq(cluster_dmlctl_json(&c, take, &doc), 0);
	clock = (uint64_t)jnum(&doc, "clock");
	bytes = (uint64_t)jnum(&doc, "bytes");
	json_free(&doc);
	ck_assert_msg(clock > 0 && bytes >= 64 * sizeof(float), "clock %llu, %llu bytes",
		      (unsigned long long)clock, (unsigned long long)bytes);
	n = listed(&c, clocks);
	ck_assert_uint_le(n, 3);
	ck_assert_msg(clocks[n - 1] >= clock, "newest listed %llu, taken at %llu",
		      (unsigned long long)clocks[n - 1], (unsigned long long)clock);

	/* Deleted (the newest: two more must come before keep prunes it): no
	 * longer listed; a second delete says there is none. */
	snprintf(cstr, sizeof(cstr), "%llu", (unsigned long long)clocks[n - 1]);
	{
		const char *del[] = { "checkpoint", "1", "delete", cstr, NULL };
		uint64_t after[8];
		size_t m;

		ck_assert_int_eq(cluster_dmlctl_json(&c, del, &doc), 0);
		json_free(&doc);
		m = listed(&c, after);
		for (size_t i = 0; i < m; i++)
			ck_assert_uint_ne(after[i], clocks[n - 1]);
		ck_assert_int_eq(dml_test_dmlctl(c.env, c.port, NULL, del, &out), 0);
		ck_assert_int_eq(out.status, 1);
		ck_assert_msg(strstr(out.err, "no checkpoint at clock"), "stderr: %s", out.err);
		dml_test_output_free(&out);
	}

	/* Stopped (a round under way is abandoned and its parts deleted):
	 * what the scheduler lists is what the stores hold. */
	ck_assert_int_eq(cluster_dmlctl_json(&c, stop, &doc), 0);
	json_free(&doc);
	n = listed(&c, clocks);
	ck_assert_uint_ge(n, 1);
	ck_assert_uint_le(n, 3);
	printf("lsq, checkpoint_every 100, keep 3: on demand at clock %llu (%llu bytes); "
	       "%zu kept at the end, the newest at clock %llu\n", (unsigned long long)clock,
	       (unsigned long long)bytes, n, (unsigned long long)clocks[n - 1]);
	free(job);
	cluster_stop(&c);
	for (uint32_t node = 1; node <= 2; node++)
		store_lists(&c, node, clocks, n);
	cluster_free(&c);
}
END_TEST

/*
 * checkpoint_every_s: one every second of a job that makes clocks slowly;
 * the next job's start deletes them (its run empties the stores).
 */
START_TEST(test_checkpoints_every_seconds)
{
	static const char *const stop1[] = { "stop", "1", NULL };
	static const char *const stop2[] = { "stop", "2", NULL };
	struct cluster c;
	struct jval doc;
	uint64_t clocks[8];
	double ages[8];
	size_t n;
	char *job1, *job2;

	cluster_up_conf(&c, 1, 1, "[store]\npath = @DIR@/store-@NODE@\n");
	job1 = cluster_write_lsq_job(&c, "timed.conf",
				     "[job]\nname = e2e-timed\napp = lsq\ndata = synthetic\n"
				     "staleness = 0\nbatch_size = 16\nmax_clocks = 1000000\n"
				     "examples = 1000\ndim = 64\ncheckpoint_every_s = 1\n");
	job2 = cluster_write_lsq_job(&c, "next.conf",
				     "[job]\nname = e2e-next\napp = lsq\ndata = synthetic\n"
				     "staleness = 0\nbatch_size = 16\nmax_clocks = 1000000\n"
				     "examples = 1000\ndim = 64\n");
	ck_assert_uint_eq(cluster_submit(&c, job1), 1);
	ck_assert_uint_eq(cluster_submit(&c, job2), 2);
	wait_listed(&c, "1", 2);
	n = listed_ages(&c, "1", clocks, ages);
	ck_assert_msg(ages[n - 2] - ages[n - 1] >= 900, "checkpoints %.0f ms apart",
		      ages[n - 2] - ages[n - 1]);
	ck_assert_int_eq(cluster_dmlctl_json(&c, stop1, &doc), 0);
	json_free(&doc);
	cluster_wait_job_clock(&c, "2", 1);
	ck_assert_uint_eq(listed(&c, clocks), 0);
	cluster_job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "stopped");
	json_free(&doc);
	ck_assert_int_eq(cluster_dmlctl_json(&c, stop2, &doc), 0);
	json_free(&doc);
	printf("lsq, checkpoint_every_s 1: checkpoints at clocks %llu and %llu, %.0f ms apart; "
	       "gone once job 2 started\n", (unsigned long long)clocks[n - 2],
	       (unsigned long long)clocks[n - 1], ages[n - 2] - ages[n - 1]);
	free(job1);
	free(job2);
	cluster_down(&c);
}
END_TEST

START_TEST(test_checkpoint_refused_without_store)
{
	static const char *const take[] = { "checkpoint", "1", NULL };
	static const char *const stop[] = { "stop", "1", NULL };
	struct dml_test_output out;
	struct cluster c;
	struct jval doc;
	char *job;

	cluster_up(&c, 1, 1);
	job = cluster_write_lsq_job(&c, "nostore.conf",
				    "[job]\nname = e2e-nostore\napp = lsq\ndata = synthetic\n"
				    "staleness = 0\nbatch_size = 16\nmax_clocks = 1000000\n"
				    "examples = 1000\ndim = 64\n");
	ck_assert_uint_eq(cluster_submit(&c, job), 1);
	cluster_wait_job_clock(&c, "1", 20);
	ck_assert_int_eq(dml_test_dmlctl(c.env, c.port, NULL, take, &out), 0);
	ck_assert_int_eq(out.status, 1);
	ck_assert_msg(strstr(out.err, "keeps no store ([store] path)"), "stderr: %s", out.err);
	dml_test_output_free(&out);
	cluster_job_status(&c, "1", &doc);
	ck_assert_str_eq(jstr(&doc, "state"), "running");
	json_free(&doc);
	ck_assert_int_eq(cluster_dmlctl_json(&c, stop, &doc), 0);
	json_free(&doc);
	free(job);
	cluster_down(&c);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = {
		test_checkpoints_periodic_and_on_demand,
		test_checkpoints_every_seconds,
		test_checkpoint_refused_without_store,
	};

	return cluster_suite_run("checkpoints", tests, DML_ARRAY_LEN(tests));
}
