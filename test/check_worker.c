/*
 * check_worker.c - dml-worker: the lsq app, the profile, the configuration
 * (this file), and the daemon against a scheduler (check_worker_daemon.c).
 *
 * Unit: the lsq gradient against finite differences of its loss; synthetic
 * examples that depend on (seed, i) alone; partitions as record ranges,
 * through dml_partition_range and through the app's own steps; specs
 * the app refuses, with reasons; conf/worker.conf (via $DML_SRCDIR) parsed
 * with every option documented, and bad values refused; the example job
 * conf/jobs/lsq.conf accepted by the app; profile figures.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/listener.h>

#include "worker/app.h"
#include "test/app_test.h"
#include "shard/assign.h"
#include "proto/auth.h"
#include "test/check_run.h"
#include "test/check_worker.h"
#include "proto/conf.h"
#include "proto/conn.h"
#include "worker/cpu_limit.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "proto/job_spec.h"
#include "test/json.h"
#include "proto/listen.h"
#include "worker/profile.h"
#include "proto/util.h"
#include "worker/walk.h"
#include "worker/worker_conf.h"

#define TEST_TIMEOUT_S 60

const char *const lsq_job =
	"[job]\nname = t\napp = lsq\nmax_clocks = 10\nbatch_size = 8\nexamples = 100\n"
	"dim = 5\nseed = 42\n[table]\nid = 0\nkind = dense\nkeys = 5\n";

/* ---- unit tests ------------------------------------------------------------ */

START_TEST(test_lsq_gradient)
{
	enum { ROWS = 16, DIM = 7 };
	float x[ROWS * DIM], y[ROWS], w[DIM], g[DIM], r[ROWS], wp[DIM];
	uint64_t state = 12345;
	double loss, direct = 0;

	for (size_t i = 0; i < ROWS * DIM; i++)
		x[i] = (float)((double)((state = state * 6364136223846793005ull + 1) >> 40) /
			       16777216.0 - 0.5);
	for (size_t i = 0; i < ROWS; i++)
		y[i] = (float)i * 0.1f - 0.7f;
	for (size_t j = 0; j < DIM; j++)
		w[j] = (float)j * 0.2f - 0.5f;
	loss = dml_lsq_loss_grad(x, y, ROWS, DIM, w, g, r);
	for (size_t i = 0; i < ROWS; i++) {
		double d = -y[i];

		for (size_t j = 0; j < DIM; j++)
			d += (double)x[i * DIM + j] * w[j];
		direct += d * d / ROWS;
	}
	ck_assert_msg(fabs(loss - direct) < 1e-5 * (1 + direct), "loss %g, direct %g", loss,
		      direct);
	/* The loss is quadratic in w: central differences are exact up to rounding. */
	for (size_t j = 0; j < DIM; j++) {
		const float eps = 0.01f;
		double up, down, fd;

		memcpy(wp, w, sizeof(w));
		wp[j] = w[j] + eps;
		up = dml_lsq_loss_grad(x, y, ROWS, DIM, wp, NULL, r);
		wp[j] = w[j] - eps;
		down = dml_lsq_loss_grad(x, y, ROWS, DIM, wp, NULL, r);
		fd = (up - down) / (2.0 * eps);
		ck_assert_msg(fabs(fd - g[j]) < 1e-3 * (1 + fabs(fd)), "d/dw%zu: grad %g, "
			      "finite differences %g", j, (double)g[j], fd);
	}
	ck_assert(isnan(dml_lsq_loss_grad(x, y, 0, DIM, w, g, r)));
}
END_TEST

START_TEST(test_lsq_data_deterministic)
{
	enum { DIM = 9 };
	float wt[DIM], wt2[DIM], a[DIM], b[DIM], ya, yb;
	double dot = 0;

	dml_lsq_true_weights(7, DIM, wt);
	dml_lsq_true_weights(7, DIM, wt2);
	ck_assert(memcmp(wt, wt2, sizeof(wt)) == 0);
	dml_lsq_true_weights(8, DIM, wt2);
	ck_assert(memcmp(wt, wt2, sizeof(wt)) != 0);

	dml_lsq_example(7, 123456789, wt, DIM, a, &ya);
	/* Other examples in between change nothing: only (seed, i) counts. */
	dml_lsq_example(7, 5, wt, DIM, b, &yb);
	dml_lsq_example(7, 123456789, wt, DIM, b, &yb);
	ck_assert(memcmp(a, b, sizeof(a)) == 0 && ya == yb);
	dml_lsq_example(7, 123456790, wt, DIM, b, &yb);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	dml_lsq_example(8, 123456789, wt, DIM, b, &yb);
	ck_assert(memcmp(a, b, sizeof(a)) != 0);
	/* The label is x . w_true plus small noise; features are bounded. */
	for (size_t j = 0; j < DIM; j++) {
		ck_assert(fabsf(a[j]) <= 1.7321f);
		dot += (double)a[j] * wt[j];
	}
	ck_assert_msg(fabs(ya - dot) < 1.0, "label %g, x.w %g", (double)ya, dot);
}
END_TEST

START_TEST(test_partition_ranges)
{
	static const uint64_t ns[] = { 0, 1, 7, 100, 10000, 1ull << 40, UINT64_MAX };
	static const uint32_t ps[] = { 1, 3, 8, 64, 1000 };

	for (size_t i = 0; i < DML_ARRAY_LEN(ns); i++) {
		for (size_t k = 0; k < DML_ARRAY_LEN(ps); k++) {
			uint64_t next = 0, b, e, lo = UINT64_MAX, hi = 0;

			for (uint32_t p = 0; p < ps[k]; p++) {
				dml_partition_range(ns[i], ps[k], p, &b, &e);
				ck_assert_msg(b == next && e >= b, "n %llu, %u parts: part %u "
					      "is [%llu, %llu)", (unsigned long long)ns[i],
					      ps[k], p, (unsigned long long)b,
					      (unsigned long long)e);
				next = e;
				lo = e - b < lo ? e - b : lo;
				hi = e - b > hi ? e - b : hi;
			}
			ck_assert(next == ns[i]);
			ck_assert(hi - lo <= 1);
		}
	}
}
END_TEST

/* Take rows records of w (one batch), counting each in seen. */
static void walk_take(struct dml_walk *w, size_t rows, unsigned *seen)
{
	const uint64_t *r = dml_walk_batch(w, rows);

	ck_assert_ptr_nonnull(r);
	for (size_t k = 0; k < rows; k++)
		seen[r[k]]++;
	dml_walk_advance(w);
}

/*
 * A partition walked part way by one worker and on by another: the two
 * take every record of the pass once. Each pass has an order of its own;
 * a partition let go of and held again goes on from the furthest position
 * known.
 */
START_TEST(test_walk_hands_partitions_on)
{
	const uint32_t all[] = { 0, 1, 2, 3 }, keep[] = { 0, 1 }, moved[] = { 2, 3 };
	struct dml_walk a = { .key = 7 }, b = { .key = 7 }, one = { .key = 7 };
	unsigned seen[103] = { 0 }, first[26];
	uint64_t taken[4], at[2], sum = 0, left = 0;
	uint32_t parts[4];
	char err[128];

	/* 103 records in partitions of 25, 26, 26 and 26 */
	ck_assert_int_eq(dml_walk_set(&a, "t", 103, all, 4, 4, err, sizeof(err)), 0);
	ck_assert_uint_eq(a.total, 103);
	for (int i = 0; i < 3; i++)
		walk_take(&a, 10, seen);
	/* a batch not advanced over is not taken */
	ck_assert_ptr_nonnull(dml_walk_batch(&a, 10));
	ck_assert_uint_eq(dml_walk_held(&a), 4);
	dml_walk_positions(&a, parts, taken);
	for (size_t i = 0; i < 4; i++) {
		ck_assert_uint_eq(parts[i], i);
		/* the partitions go at one pace */
		ck_assert(taken[i] == 7 || taken[i] == 8);
		sum += taken[i];
	}
	ck_assert_uint_eq(sum, 30);
	/* a keeps 0 and 1; b takes 2 and 3 on from where a stopped */
	ck_assert_int_eq(dml_walk_set(&a, "t", 103, keep, 2, 4, err, sizeof(err)), 0);
	at[0] = dml_walk_taken(&a, 2);
	at[1] = dml_walk_taken(&a, 3);
	ck_assert_uint_eq(at[0], taken[2]);
	ck_assert_int_eq(dml_walk_note(&b, moved, at, 2), 0);
	ck_assert_int_eq(dml_walk_set(&b, "t", 103, moved, 2, 4, err, sizeof(err)), 0);
	ck_assert_uint_eq(b.total, 52);
	walk_take(&a, 51 - taken[0] - taken[1], seen);
	walk_take(&b, 52 - at[0] - at[1], seen);
	for (size_t r = 0; r < 103; r++)
		left += seen[r] != 1;
	ck_assert_msg(left == 0, "%" PRIu64 " records not taken exactly once", left);
	/* a holds 2 and 3 again, told where b got to (and an older 3) */
	ck_assert_int_eq(dml_walk_note(&a, moved, (const uint64_t[]){ 26, 0 }, 2), 0);
	ck_assert_uint_eq(dml_walk_taken(&a, 2), 26);
	ck_assert_uint_eq(dml_walk_taken(&a, 3), at[1]);
	/* a partition that does not exist is refused, and nothing changes */
	ck_assert_int_eq(dml_walk_set(&a, "t", 103, (const uint32_t[]){ 1, 4 }, 2, 4, err,
				      sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "app t: partition 4 of 4 does not exist") != NULL, "%s", err);
	ck_assert_uint_eq(dml_walk_held(&a), 2);
	/* two passes of one partition: the second in another order */
	ck_assert_int_eq(dml_walk_set(&one, "t", 103, moved, 1, 4, err, sizeof(err)), 0);
	memcpy(first, dml_walk_batch(&one, 26), sizeof(first));
	dml_walk_advance(&one);
	ck_assert(memcmp(first, dml_walk_batch(&one, 26), sizeof(first)) != 0);
	dml_walk_clear(&a);
	dml_walk_clear(&b);
	dml_walk_clear(&one);
}
END_TEST

/*
 * Steps go through the worker's records: those of its partitions, each
 * once a pass, both partitions at the same pace.
 */
START_TEST(test_lsq_steps_follow_partitions)
{
	Dml__JobSpec *spec = app_test_spec(lsq_job);
	struct dml_app_env env = { .backend = "cpu" };
	const struct dml_app *app = &dml_app_lsq;
	float w[5] = { 0.5f, -1, 0.25f, 2, 0 }, pushed[5] = { 0 };
	struct app_test_io rec;
	struct dml_app_io io;
	struct dml_app_step st;
	const struct dml_app_table *t;
	const uint32_t parts[] = { 9, 2, 9 };   /* of 10: records 20..29 and 90..99 */
	float wt[5], x[8 * 5], y[8], g[5], r[8];
	unsigned seen[100] = { 0 };
	char err[256];
	void *state;
	double value;

	ck_assert_int_eq(app->create(spec, &env, &state, err, sizeof(err)), 0);
	ck_assert_int_eq(app->tables(state, &t), 1);
	ck_assert(t[0].id == 0 && t[0].dense && t[0].width == 1 && t[0].keys == 5);
	app_test_io_init(&rec, app, state, &io);
	rec.params[0] = w;
	rec.grads[0] = pushed;
	ck_assert_uint_eq(app->data_examples(state), 100);
	ck_assert_int_eq(app->set_partitions(state, parts, 3, 10, err, sizeof(err)), 0);
	dml_lsq_true_weights(42, 5, wt);
	/* Three batches of 8 from 20 records: the third begins the next pass. */
	for (size_t s = 0; s < 3; s++) {
		const uint64_t *recs;
		unsigned low = 0;
		double loss;

		ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), 0);
		recs = app->walk(state)->batch;
		for (size_t k = 0; k < 8; k++) {
			ck_assert((recs[k] >= 20 && recs[k] < 30) || recs[k] >= 90);
			low += recs[k] < 30;
			if (s < 2 || k < 4)
				ck_assert_uint_eq(seen[recs[k]]++, 0);
			dml_lsq_example(42, recs[k], wt, 5, x + k * 5, &y[k]);
		}
		ck_assert_uint_eq(low, 4);
		loss = dml_lsq_loss_grad(x, y, 8, 5, w, g, r);
		ck_assert_uint_eq(st.examples, 8);
		ck_assert_msg(fabs(st.loss - loss) < 1e-6 * (1 + loss), "batch %zu: loss %g, "
			      "expected %g", s, st.loss, loss);
		ck_assert(memcmp(pushed, g, sizeof(g)) == 0);
	}
	ck_assert_int_eq(rec.pulls, 3);
	ck_assert_int_eq(rec.pushes, 3);
	ck_assert_uint_gt(io.wait_ns, 0);

	/* Evaluation: MSE over the first min(2000, N) = 100 examples. */
	{
		float ex[100 * 5], ey[100], er[100];

		for (uint64_t i = 0; i < 100; i++)
			dml_lsq_example(42, i, wt, 5, ex + i * 5, &ey[i]);
		ck_assert_int_eq(app->evaluate(state, &io, &value, err, sizeof(err)), 0);
		ck_assert(fabs(value - dml_lsq_loss_grad(ex, ey, 100, 5, w, NULL, er)) <
			  1e-5);
	}

	/* A partition that does not exist is refused; the old ones stay. */
	{
		const uint32_t bad[] = { 1, 10 };

		ck_assert_int_eq(app->set_partitions(state, bad, 2, 10, err, sizeof(err)),
				 DML_EINVAL);
		ck_assert_msg(strstr(err, "app lsq: partition 10 of 10") != NULL, "%s", err);
		ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), 0);
		ck_assert_uint_eq(st.examples, 8);
	}
	/* No partitions: the step still pulls (to keep pace) but trains nothing. */
	ck_assert_int_eq(app->set_partitions(state, NULL, 0, 10, err, sizeof(err)), 0);
	rec.pulls = rec.pushes = 0;
	ck_assert_int_eq(app->step(state, &io, &st, err, sizeof(err)), 0);
	ck_assert_uint_eq(st.examples, 0);
	ck_assert(isnan(st.loss));
	ck_assert(rec.pulls == 1 && rec.pushes == 0);
	app->destroy(state);
	dml_job_spec_free(spec);
}
END_TEST

/* create() refuses what lsq cannot run, saying why. */
static void expect_refused(Dml__JobSpec *spec, const char *backend, const char *why)
{
	struct dml_app_env env = { .backend = backend };
	char err[256] = "";
	void *state = (void *)1;

	ck_assert_int_eq(dml_app_lsq.create(spec, &env, &state, err, sizeof(err)), DML_EINVAL);
	ck_assert(state == NULL);
	ck_assert_msg(strncmp(err, "app lsq: ", 9) == 0 && strstr(err, why) != NULL,
		      "expected '%s', got '%s'", why, err);
}

START_TEST(test_lsq_refuses_bad_specs)
{
	Dml__JobSpec *spec = app_test_spec(lsq_job);

	expect_refused(spec, "cuda", "backend 'cuda'");
	spec->tables[0]->width = 2;
	expect_refused(spec, "cpu", "table 0 dense with keys = dim (5) and width 1");
	spec->tables[0]->width = 1;
	spec->dim = 6;
	expect_refused(spec, "cpu", "keys = dim (6)");
	spec->dim = 100;
	spec->tables[0]->keys = 100;
	spec->batch_size = 100000000;
	expect_refused(spec, "cpu", "batch_size 100000000 x dim 100");
	spec->dim = 5;
	spec->tables[0]->keys = 5;
	spec->batch_size = 8;
	/* The scheduler refuses these too; a worker checks for itself. The
	 * strings are borrowed for the call and the parser's put back. */
	{
		char *metric = spec->metric, *data = spec->data;

		spec->metric = (char *)"accuracy";
		expect_refused(spec, "cpu", "metric 'accuracy'");
		spec->metric = metric;
		spec->data = (char *)"mnist";
		expect_refused(spec, "cpu", "data 'mnist'");
		spec->data = data;
	}
	dml_job_spec_free(spec);
}
END_TEST

static const char *srcdir(void)
{
	const char *d = getenv("DML_SRCDIR");

	return d ? d : ".";
}

/* Whether text has a "key = ..." line inside its [section]. */
static int conf_documents(const char *text, const char *section, const char *key)
{
	char head[80], line[128];
	const char *start, *end, *hit;

	snprintf(head, sizeof(head), "\n[%s]\n", section);
	snprintf(line, sizeof(line), "\n%s =", key);
	if (!(start = strstr(text, head)))
		return 0;
	start += strlen(head) - 1;
	end = strstr(start, "\n[");
	for (hit = strstr(start, line); hit; hit = strstr(hit + 1, line))
		if (hit[strlen(line)] == ' ' || hit[strlen(line)] == '\n')
			return !end || hit < end;
	return 0;
}

START_TEST(test_conf_example)
{
	struct dml_worker_conf c;
	char path[4096], err[512], *text;

	snprintf(path, sizeof(path), "%s/conf/worker.conf", srcdir());
	memset(&c, 0, sizeof(c));
	ck_assert_msg(dml_conf_load(&dml_worker_conf_schema, path, &c, err, sizeof(err)) == 0,
		      "%s", err);
	ck_assert_uint_eq(c.node_id, 1);
	ck_assert_str_eq(c.scheduler, "127.0.0.1:7000");
	ck_assert_str_eq(c.cluster, "dml");
	ck_assert_str_eq(c.zone, "");
	ck_assert_str_eq(dml_backend_names[c.backend], "cpu");
	ck_assert_uint_eq(c.threads, 1);
	ck_assert_uint_eq(c.spin_us, 50);
	ck_assert_int_eq(c.profile, 1);
	ck_assert_str_eq(c.metrics_listen, "");
	ck_assert_uint_eq(c.max_meta, 64 * 1024);
	ck_assert_uint_eq(c.max_payload, 256u << 20);
	ck_assert_uint_eq(c.handshake_timeout_ms, 5000);
	dml_conf_free(&dml_worker_conf_schema, &c);

	/* Every option is documented with its default, in its section. */
	ck_assert_int_eq(dml_test_file_read(path, &text), 0);
	for (size_t i = 0; i < dml_worker_conf_schema.noptions; i++) {
		const struct dml_conf_option *o = &dml_worker_conf_schema.options[i];

		ck_assert_msg(conf_documents(text, o->section, o->key),
			      "conf/worker.conf lacks [%s] %s", o->section, o->key);
	}
	free(text);
}
END_TEST

/* The example job is one this worker runs. */
START_TEST(test_example_job_runs_here)
{
	struct dml_app_env env = { .backend = "cpu" };
	Dml__JobSpec *spec = NULL;
	char path[4096], err[512];
	void *state;

	snprintf(path, sizeof(path), "%s/conf/jobs/lsq.conf", srcdir());
	ck_assert_msg(dml_job_file_load(path, &spec, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(spec->app, dml_app_lsq.name);
	ck_assert_msg(dml_app_lsq.create(spec, &env, &state, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_uint_eq(dml_app_lsq.data_examples(state), spec->examples);
	dml_app_lsq.destroy(state);
	dml_job_spec_free(spec);
}
END_TEST

/* Parsing text must fail with a message naming `why`. */
static void expect_conf_error(const char *text, const char *why)
{
	struct dml_worker_conf c;
	char err[512];
	int rc;

	memset(&c, 0, sizeof(c));
	rc = dml_conf_parse_string(&dml_worker_conf_schema, "w.conf", text, &c, err,
				   sizeof(err));
	dml_conf_free(&dml_worker_conf_schema, &c);
	ck_assert_msg(rc == DML_ECONF && strstr(err, why) != NULL, "'%s': rc %d, '%s'", why,
		      rc, err);
}

START_TEST(test_conf_errors)
{
#define BASE "[worker]\nnode_id = 3\nscheduler = 10.0.0.1:7000\nsecret_file = s\n"
	struct dml_worker_conf c;
	char err[512];

	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(dml_conf_parse_string(&dml_worker_conf_schema, "w.conf",
					       BASE "zone = eu-west.rack-3\nthreads = 4\n"
					       "profile = no\n", &c, err, sizeof(err)), 0);
	ck_assert_str_eq(c.zone, "eu-west.rack-3");
	ck_assert_uint_eq(c.threads, 4);
	ck_assert_int_eq(c.profile, 0);
	dml_conf_free(&dml_worker_conf_schema, &c);

	expect_conf_error("[worker]\nscheduler = 10.0.0.1:7000\nsecret_file = s\n", "node_id");
	expect_conf_error("[worker]\nnode_id = 3\nsecret_file = s\n", "scheduler");
	expect_conf_error("[worker]\nnode_id = 3\nscheduler = 10.0.0.1:7000\n", "secret_file");
	expect_conf_error("[worker]\nnode_id = 3\nscheduler = 10.0.0.1:0\nsecret_file = s\n",
			  "w.conf:3");
	expect_conf_error(BASE "threads = 0\n", "w.conf:5");
	expect_conf_error(BASE "backend = tpu\n", "w.conf:5");
	expect_conf_error(BASE "zone = rack 1\n", "zone");
	expect_conf_error(BASE "metrics_listen = nowhere\n", "w.conf:5");
	expect_conf_error(BASE "metrics_port_file = m.port\n", "metrics_port_file needs "
			  "metrics_listen");
	expect_conf_error(BASE "frobnicate = 1\n", "w.conf:5");
#undef BASE
}
END_TEST

START_TEST(test_profile_figures)
{
	struct dml_app_env env = { .backend = "cpu" };
	struct dml_profile p;
	char err[256];
	double rate;

	dml_profile_measure(&dml_app_lsq, &env, 1, &p);
	ck_assert_str_eq(p.device, "cpu");
	ck_assert_uint_gt(p.cores, 0);
	ck_assert_uint_gt(p.memory_bytes, 0);
	ck_assert_msg(p.gflops > 0 && isfinite(p.gflops), "gflops %g", p.gflops);
	ck_assert_msg(p.examples_per_s > 0 && isfinite(p.examples_per_s), "examples/s %g",
		      p.examples_per_s);
	dml_profile_measure(&dml_app_lsq, &env, 0, &p);
	ck_assert(p.gflops == 0 && p.examples_per_s == 0 && p.cores > 0);
	/* An app whose step cannot run says why. */
	env.backend = "cuda";
	ck_assert_int_eq(dml_profile_app(&dml_app_lsq, &env, 0.01, &rate, err, sizeof(err)),
			 DML_EINVAL);
	ck_assert(rate == 0 && strstr(err, "backend 'cuda'") != NULL);
}
END_TEST

static Suite *worker_suite(void)
{
	Suite *s = suite_create("worker");
	TCase *unit = tcase_create("unit"), *daemon = tcase_create("daemon");

	tcase_add_test(unit, test_lsq_gradient);
	tcase_add_test(unit, test_lsq_data_deterministic);
	tcase_add_test(unit, test_partition_ranges);
	tcase_add_test(unit, test_lsq_steps_follow_partitions);
	tcase_add_test(unit, test_walk_hands_partitions_on);
	tcase_add_test(unit, test_lsq_refuses_bad_specs);
	tcase_add_test(unit, test_conf_example);
	tcase_add_test(unit, test_example_job_runs_here);
	tcase_add_test(unit, test_conf_errors);
	tcase_add_test(unit, test_profile_figures);
	check_worker_daemon_tests(unit, daemon);
	suite_add_tcase(s, unit);
	tcase_set_timeout(daemon, TEST_TIMEOUT_S);
	suite_add_tcase(s, daemon);
	return s;
}

int main(void)
{
	return dml_check_run(worker_suite());
}