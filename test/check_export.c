/*
 * `dmlctl export JOB FILE` against a real cluster: dml-sched, two
 * dml-servers that take their tables from it and a dml-worker, as processes
 * on 127.0.0.1. An lsq job trains, is paused, and is exported:
 *
 *   - the model file reads back (worker/model_file.h) with the job's spec
 *     and table 0 of dim keys x width 1, values trained away from their
 *     zeros, equal to what a control client pulls from the servers itself;
 *   - --json says the same as one object;
 *   - a job that does not exist, a pending job, a job stopped before it
 *     started, a file in a missing directory and bad usage are refused with
 *     their reasons, and no file is left behind;
 *   - an ended job is still exported (its servers keep its tables), until
 *     another job starts: then export says the tables are gone.
 *
 * And a sparse_lr job, whose sparse table only the servers can list: on
 * servers whose max_payload is too small for one reply of their rows (so
 * export asks again for halves of their hash ranges), the model holds
 * distinct keys whose rows equal what a control client pulls for those
 * keys, as many as the job touched, and `dml-worker --eval` of it gives
 * the job's own last AUC.
 */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test/cluster.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "test/harness.h"
#include "test/json.h"
#include "worker/model_file.h"
#include "proto/util.h"

#define WAIT_MS CLUSTER_WAIT_MS
#define POLL_MS CLUSTER_POLL_MS
#define DIM 1000

/* dmlctl ARGS... (NULL-terminated); the output is the caller's to free. */
static void dmlctl(struct cluster *c, const char *const *args,
		   struct dml_test_output *out)
{
	ck_assert_int_eq(dml_test_dmlctl(c->env, c->port, NULL, args, out), 0);
}

/* dmlctl ARGS... that must succeed; stdout parsed as JSON when doc is given. */
static void dmlctl_ok(struct cluster *c, const char *const *args, struct jval *doc)
{
	struct dml_test_output out;

	dmlctl(c, args, &out);
	ck_assert_msg(out.status == 0, "dmlctl %s %s: status %d\nstdout: %s\nstderr: %s",
		      args[0], args[1] ? args[1] : "", out.status, out.out, out.err);
	if (doc)
		ck_assert_msg(json_parse(out.out, doc) == 0, "not JSON: %s", out.out);
	dml_test_output_free(&out);
}

/* `dmlctl --json status JOB`: its state, and its clock in *clock. */
static char *job_state(struct cluster *c, const char *job, double *clock)
{
	const char *args[] = { "--json", "status", job, NULL };
	struct jval doc;
	char *state;

	dmlctl_ok(c, args, &doc);
	state = dml_xstrdup(jstr(&doc, "state"));
	if (clock)
		*clock = jnum(&doc, "clock");
	json_free(&doc);
	return state;
}

/* Wait until the job is in state want (and at least at clock min_clock). */
static void wait_job(struct cluster *c, const char *job, const char *want,
		     double min_clock)
{
	for (int waited = 0; waited < WAIT_MS; waited += POLL_MS) {
		double clock;
		char *state = job_state(c, job, &clock);
		int ok = strcmp(state, want) == 0 && clock >= min_clock;

		free(state);
		if (ok)
			return;
		cluster_sleep_ms(POLL_MS);
	}
	ck_abort_msg("job %s never got %s at clock %g", job, want, min_clock);
}

/* The scheduler says paused at once; the worker stops at the end of its
 * step: wait until the clock stays put, so that nothing trains any more. */
static void wait_settled(struct cluster *c, const char *job)
{
	double was = -1;

	for (int waited = 0; waited < WAIT_MS; waited += 3 * POLL_MS) {
		double clock;

		free(job_state(c, job, &clock));
		if (clock == was)
			return;
		was = clock;
		cluster_sleep_ms(3 * POLL_MS);
	}
	ck_abort_msg("job %s kept moving while paused", job);
}

/* Write an lsq job file (extra: more [table] sections) and submit it. At
 * lr 0.05 its 1000 weights diverge within some 500 clocks, and the servers
 * refuse the NaN pushes that follow (the job fails): a slow run would. */
static void submit(struct cluster *c, const char *name, const char *extra)
{
	char *text, *path, *file;
	const char *args[] = { "submit", NULL, NULL };

	ck_assert_int_gt(asprintf(&text,
		"[job]\nname = %s\napp = lsq\ndata = synthetic\nstaleness = 0\n"
		"batch_size = 32\nmax_clocks = 1000000\nexamples = 2000\ndim = %d\nseed = 3\n"
		"[table]\nid = 0\nkind = dense\nwidth = 1\nkeys = %d\noptimizer = sgd\n"
		"lr = 0.01\n%s", name, DIM, DIM, extra), 0);
	ck_assert_int_gt(asprintf(&file, "%s.conf", name), 0);
	ck_assert_int_eq(dml_test_env_write(c->env, file, text, 0644, &path), 0);
	free(file);
	args[1] = path;
	dmlctl_ok(c, args, NULL);
	free(path);
	free(text);
}

/* The model file path `name` in the environment's directory (malloc'ed). */
static char *model_path(struct cluster *c, const char *name)
{
	char *p;

	ck_assert_int_gt(asprintf(&p, "%s/%s", dml_test_env_dir(c->env), name), 0);
	return p;
}

/* `dmlctl export JOB FILE` that must fail with status want_status, saying
 * want on stderr and leaving no FILE. */
static void export_fails(struct cluster *c, const char *job, const char *file,
			 int want_status, const char *want)
{
	const char *args[] = { "export", job, file, NULL };
	struct dml_test_output out;

	dmlctl(c, file ? args : (const char *[]){ "export", job, NULL }, &out);
	ck_assert_msg(out.status == want_status && strstr(out.err, want),
		      "export %s: status %d (want %d), stderr '%s' lacks '%s'", job,
		      out.status, want_status, out.err, want);
	ck_assert_msg(out.out[0] == '\0', "stdout: %s", out.out);
	if (file)
		ck_assert_int_eq(access(file, F_OK), -1);
	dml_test_output_free(&out);
}

/* A control client of job 1, through the cluster's scheduler. */
static dml_t *control_client(struct cluster *c)
{
	char port[32];
	dml_opts_t *o;
	dml_t *d;

	snprintf(port, sizeof(port), "127.0.0.1:%u", c->port);
	ck_assert_int_eq(dml_opts_new(&o), 0);
	ck_assert_int_eq(dml_opts_set(o, "scheduler", port), 0);
	ck_assert_int_eq(dml_opts_set(o, "secret_file", dml_test_env_secret(c->env)), 0);
	ck_assert_int_eq(dml_opts_set(o, "role", "control"), 0);
	ck_assert_int_eq(dml_opts_set(o, "job", "1"), 0);
	ck_assert_int_eq(dml_connect(o, &d), 0);
	dml_opts_free(o);
	return d;
}

/* Table 0 of job 1 as a control client pulls it from the servers itself. */
static float *pull_direct(struct cluster *c)
{
	float *vals = dml_xcalloc(DIM, sizeof(float));
	dml_t *d = control_client(c);
	dml_handle_t h;

	ck_assert_int_eq(dml_pull_range(d, 0, 0, DIM, vals, &h), 0);
	ck_assert_int_eq(dml_wait(d, h), 0);
	dml_close(d);
	return vals;
}

/* The model in path is job 1's lsq model with exactly the values want. */
static void check_model(const char *path, const float *want)
{
	struct dml_model m;
	char err[256];
	size_t nonzero = 0;

	ck_assert_msg(dml_model_read(path, &m, err, sizeof(err)) == 0, "%s", err);
	ck_assert_ptr_nonnull(m.spec);
	ck_assert_str_eq(m.spec->app, "lsq");
	ck_assert_str_eq(m.spec->name, "exp-lsq");
	ck_assert_uint_eq(m.spec->dim, DIM);
	ck_assert_uint_eq(m.ntables, 1);
	ck_assert_uint_eq(m.tables[0].id, 0);
	ck_assert_uint_eq(m.tables[0].width, 1);
	ck_assert_int_eq(m.tables[0].dense, 1);
	ck_assert_uint_eq(m.tables[0].rows, DIM);
	for (size_t i = 0; i < DIM; i++) {
		ck_assert_msg(isfinite(m.tables[0].values[i]), "value %zu is %g", i,
			      m.tables[0].values[i]);
		nonzero += m.tables[0].values[i] != 0;
	}
	/* Initialised to zeros: training moved most of them. */
	ck_assert_msg(nonzero > DIM / 2, "only %zu of %d values trained", nonzero, DIM);
	ck_assert_msg(memcmp(m.tables[0].values, want, DIM * sizeof(float)) == 0,
		      "the model differs from what the servers hold");
	dml_model_free(&m);
}

START_TEST(test_export)
{
	struct cluster c;
	struct dml_test_output out;
	struct jval doc;
	char *model, *model2, *missing, want[256], *state;
	float *direct;

	cluster_up(&c, 2, 1);
	submit(&c, "exp-lsq", "");
	wait_job(&c, "1", "running", 30);
	{
		const char *args[] = { "pause", "1", NULL };

		dmlctl_ok(&c, args, NULL);
	}
	wait_job(&c, "1", "paused", 0);
	wait_settled(&c, "1");

	/* Pending jobs while job 1 holds the cluster: one with a sparse table,
	 * one that simply has not started. */
	submit(&c, "exp-sparse", "[table]\nid = 1\nkind = sparse\nwidth = 4\nkeys = 0\n"
		   "optimizer = sgd\nlr = 0.1\n");
	submit(&c, "exp-pending", "");
	model = model_path(&c, "job.model");
	export_fails(&c, "2", model, 1, "job 2 has not started");
	export_fails(&c, "3", model, 1, "job 3 has not started");
	{
		const char *args[] = { "stop", "3", NULL };

		dmlctl_ok(&c, args, NULL);
		args[1] = "2";
		dmlctl_ok(&c, args, NULL);
	}
	export_fails(&c, "3", model, 1, "before its tables were made");
	export_fails(&c, "7", model, 1, "no job 7");
	export_fails(&c, "1", NULL, 2, "dmlctl export JOB FILE");
	export_fails(&c, "x", model, 2, "'x' is not a job id");
	missing = model_path(&c, "no/such/dir/job.model");
	export_fails(&c, "1", missing, 1, "no/such/dir/job.model");

	/* The paused job. */
	{
		const char *args[] = { "export", "1", model, NULL };

		dmlctl(&c, args, &out);
		snprintf(want, sizeof(want), "exported job 1 (lsq, 1 table, %d floats) to %s\n",
			 DIM, model);
		ck_assert_msg(out.status == 0 && strcmp(out.out, want) == 0,
			      "status %d\nstdout: %s\nstderr: %s", out.status, out.out, out.err);
		dml_test_output_free(&out);
	}
	direct = pull_direct(&c);
	check_model(model, direct);
	model2 = model_path(&c, "job-json.model");
	{
		const char *args[] = { "--json", "export", "1", model2, NULL };

		dmlctl_ok(&c, args, &doc);
		ck_assert(jnum(&doc, "job") == 1 && jnum(&doc, "tables") == 1 &&
			  jnum(&doc, "floats") == DIM);
		ck_assert_str_eq(jstr(&doc, "app"), "lsq");
		ck_assert_str_eq(jstr(&doc, "file"), model2);
		json_free(&doc);
	}
	check_model(model2, direct);

	/* Ended: the servers still hold its tables. */
	{
		const char *args[] = { "stop", "1", NULL };

		dmlctl_ok(&c, args, NULL);
	}
	state = job_state(&c, "1", NULL);
	ck_assert_str_eq(state, "stopped");
	free(state);
	unlink(model2);
	{
		const char *args[] = { "export", "1", model2, NULL };

		dmlctl_ok(&c, args, NULL);
	}
	check_model(model2, direct);

	/* Until the next job replaces them. */
	submit(&c, "exp-next", "");
	wait_job(&c, "4", "running", 2);
	unlink(model2);
	export_fails(&c, "1", model2, 1, "no longer hold its tables");
	{
		const char *args[] = { "stop", "4", NULL };

		dmlctl_ok(&c, args, NULL);
	}
	unlink(model);
	free(direct);
	free(model);
	free(model2);
	free(missing);
	cluster_down(&c);
}
END_TEST

/* Rows of sparse table 0 of job 1 for keys, as a control client pulls them. */
static float *pull_keys(struct cluster *c, const uint64_t *keys, size_t n)
{
	float *vals = dml_xcalloc(n ? n : 1, sizeof(float));
	dml_t *d = control_client(c);
	dml_handle_t h;

	for (size_t i = 0; i < n; i += 1000) {
		size_t k = n - i < 1000 ? n - i : 1000;

		ck_assert_int_eq(dml_pull(d, 0, keys + i, k, vals + i, &h), 0);
		ck_assert_int_eq(dml_wait(d, h), 0);
	}
	dml_close(d);
	return vals;
}

static int key_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

START_TEST(test_export_sparse)
{
	static const char job[] =
		"[job]\nname = exp-clicks\napp = sparse_lr\ndata = synthetic\n"
		"examples = 20000\ntest_data = synthetic\ndim = 65536\nstaleness = 0\n"
		"batch_size = 64\nmax_clocks = 300\nmetric = auc\nseed = 4\n"
		"[table]\nid = 0\nkind = sparse\nwidth = 1\noptimizer = adagrad\nlr = 0.05\n";
	struct cluster c;
	struct dml_test_output out;
	struct dml_model m;
	char *model, *path, *bin, err[256];
	uint64_t *sorted;
	double auc;
	float *direct;

	/* 64 KiB holds about 5,000 rows of 12 bytes: fewer than a server has. */
	cluster_up_conf(&c, 2, 1, "[limits]\nmax_payload = 64K\n");
	ck_assert_int_eq(dml_test_env_write(c.env, "clicks.conf", job, 0644, &path), 0);
	{
		const char *args[] = { "submit", "--wait", path, NULL };

		dmlctl_ok(&c, args, NULL);
	}
	{
		const char *args[] = { "status", "1", NULL };
		struct jval doc;

		ck_assert_int_eq(cluster_dmlctl_json(&c, args, &doc), 0);
		ck_assert_str_eq(jstr(&doc, "state"), "done");
		auc = jnum(&doc, "metric");
		json_free(&doc);
	}
	model = model_path(&c, "clicks.model");
	{
		const char *args[] = { "export", "1", model, NULL };

		dmlctl_ok(&c, args, NULL);
	}
	ck_assert_msg(dml_model_read(model, &m, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(m.spec->app, "sparse_lr");
	ck_assert(m.ntables == 1 && !m.tables[0].dense && m.tables[0].width == 1);
	/* About 25 features a record over 20,000 records, hashed into 65,536 keys
	 * (and the bias): most keys were touched, none twice. */
	ck_assert_msg(m.tables[0].rows > 20000 && m.tables[0].rows <= 65537, "%llu rows",
		      (unsigned long long)m.tables[0].rows);
	sorted = dml_xcalloc(m.tables[0].rows, sizeof(uint64_t));
	memcpy(sorted, m.tables[0].keys, m.tables[0].rows * sizeof(uint64_t));
	qsort(sorted, m.tables[0].rows, sizeof(uint64_t), key_cmp);
	for (size_t i = 1; i < m.tables[0].rows; i++)
		ck_assert_uint_gt(sorted[i], sorted[i - 1]);
	ck_assert_uint_eq(sorted[m.tables[0].rows - 1], 65536);
	direct = pull_keys(&c, m.tables[0].keys, m.tables[0].rows);
	ck_assert_msg(memcmp(direct, m.tables[0].values, m.tables[0].rows * sizeof(float)) == 0,
		      "the model differs from what the servers hold");
	/* Scored again without the cluster: the job's last evaluation. */
	dml_test_bin("worker/dml-worker", &bin);
	{
		char line[256];
		char *argv[] = { bin, (char *)"--eval", model, (char *)"synthetic", NULL };

		ck_assert_int_eq(dml_test_run(c.env, argv, WAIT_MS, &out), 0);
		ck_assert_msg(out.status == 0, "dml-worker --eval: %s", out.err);
		snprintf(line, sizeof(line), "auc %.4f (model %s, data synthetic)\n", auc, model);
		ck_assert_str_eq(out.out, line);
		dml_test_output_free(&out);
	}
	free(bin);
	free(direct);
	free(sorted);
	dml_model_free(&m);
	free(model);
	free(path);
	cluster_down(&c);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { test_export, test_export_sparse };

	return cluster_suite_run("export", tests, DML_ARRAY_LEN(tests));
}
