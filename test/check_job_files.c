/*
 * Unit tests of job files (proto/job_file.c): parsing a full file and
 * every class of bad one, loading from disk, the example conf/jobs/lsq.conf.
 */
#include <check.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shard/assign.h"
#include "test/check_jobs.h"
#include "proto/dml_error.h"
#include "sched/handover.h"
#include "proto/job_spec.h"
#include "proto/table_spec.h"
#include "sched/jobs.h"
#include "store/table.h"
#include "proto/util.h"

/* ---- job files --------------------------------------------------------- */

/* Every key set, none to its default. */
static const char full_file[] =
	"# every key\n"
	"[job]\n"
	"name = full_Job.1-a\n"
	"app = lsq\n"
	"data = synthetic\n"
	"test_data = held-out\n"
	"staleness = -1\n"
	"batch_size = 32\n"
	"max_clocks = 500\n"
	"max_epochs = 2.5\n"
	"metric = loss\n"
	"target = 0.25\n"
	"workers = 0\n"
	"worker_ids = 3, 7,12\n"
	"partitions = 48\n"
	"examples = 5000\n"
	"dim = 16\n"
	"hidden = 512,256\n"
	"eval_every = 5\n"
	"dead_after_ms = 4000\n"
	"min_rate = 12.5\n"
	"seed = 99\n"
	"stale_scaling = inverse\n"
	"clock_batch = 96\n"
	"bsp_step = push\n"
	"allow_nonfinite = true\n"
	"[table]\n"
	"id = 0\n"
	"kind = dense\n"
	"width = 1\n"
	"keys = 16\n"
	"capacity = 0\n"
	"init = normal\n"
	"init_scale = 0.5\n"
	"seed = 7\n"
	"optimizer = adam\n"
	"lr = 0.002\n"
	"weight_decay = 0.0001\n"
	"momentum = 0.5\n"
	"beta1 = 0.8\n"
	"beta2 = 0.99\n"
	"epsilon = 1e-6\n"
	"[table]\n"
	"id = 5\n"
	"kind = sparse\n"
	"width = 8\n"
	"capacity = 100000\n"
	"init = uniform\n"
	"optimizer = adagrad\n";

int parse(const char *text, Dml__JobSpec **spec, char *err)
{
	err[0] = '\0';
	return dml_job_file_parse_string("t.conf", text, spec, err, ERRLEN);
}

/* The file is refused with DML_ECONF and an error containing want. */
void assert_bad(const char *text, const char *want)
{
	Dml__JobSpec *spec = (Dml__JobSpec *)1;
	char err[ERRLEN];
	int rc = parse(text, &spec, err);

	ck_assert_msg(rc == DML_ECONF, "rc %d for\n%s", rc, text);
	ck_assert_ptr_null(spec);
	ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
}

START_TEST(full_file_lands_in_the_spec)
{
	Dml__JobSpec *s = NULL;
	const Dml__TableSpec *t;
	char err[ERRLEN];

	ck_assert_msg(parse(full_file, &s, err) == 0, "%s", err);
	ck_assert_str_eq(s->name, "full_Job.1-a");
	ck_assert_str_eq(s->app, "lsq");
	ck_assert_str_eq(s->data, "synthetic");
	ck_assert_str_eq(s->test_data, "held-out");
	ck_assert_int_eq(s->staleness, -1);
	ck_assert_uint_eq(s->batch_size, 32);
	ck_assert_uint_eq(s->max_clocks, 500);
	ck_assert_double_eq(s->max_epochs, 2.5);
	ck_assert_str_eq(s->metric, "loss");
	ck_assert_double_eq(s->target, 0.25);
	ck_assert_uint_eq(s->workers, 0);
	ck_assert_uint_eq(s->n_worker_ids, 3);
	ck_assert_uint_eq(s->worker_ids[0], 3);
	ck_assert_uint_eq(s->worker_ids[1], 7);
	ck_assert_uint_eq(s->worker_ids[2], 12);
	ck_assert_uint_eq(s->partitions, 48);
	ck_assert_uint_eq(s->examples, 5000);
	ck_assert_uint_eq(s->dim, 16);
	ck_assert_str_eq(s->hidden, "512,256");
	ck_assert_uint_eq(s->eval_every, 5);
	ck_assert_uint_eq(s->dead_after_ms, 4000);
	ck_assert_double_eq(s->min_rate, 12.5);
	ck_assert_uint_eq(s->seed, 99);
	ck_assert_uint_eq(s->stale_scaling, DML_STALE_INVERSE);
	ck_assert_uint_eq(s->clock_batch, 96);
	ck_assert_uint_eq(s->bsp_step, DML_BSP_STEP_PUSH);
	ck_assert(s->allow_nonfinite);
	ck_assert_uint_eq(s->n_tables, 2);
	t = s->tables[0];
	ck_assert_uint_eq(t->id, 0);
	ck_assert(t->dense);
	ck_assert_uint_eq(t->width, 1);
	ck_assert_uint_eq(t->keys, 16);
	ck_assert_uint_eq(t->capacity, 0);
	ck_assert_str_eq(t->init, "normal");
	ck_assert_double_eq(t->init_scale, 0.5);
	ck_assert_uint_eq(t->seed, 7);
	ck_assert_str_eq(t->optimizer, "adam");
	ck_assert_double_eq(t->lr, 0.002);
	ck_assert_double_eq(t->weight_decay, 0.0001);
	ck_assert_double_eq(t->momentum, 0.5);
	ck_assert_double_eq(t->beta1, 0.8);
	ck_assert_double_eq(t->beta2, 0.99);
	ck_assert_double_eq(t->epsilon, 1e-6);
	t = s->tables[1];
	ck_assert_uint_eq(t->id, 5);
	ck_assert(!t->dense);
	ck_assert_uint_eq(t->width, 8);
	ck_assert_uint_eq(t->keys, 0);
	ck_assert_uint_eq(t->capacity, 100000);
	ck_assert_str_eq(t->init, "uniform");
	ck_assert_str_eq(t->optimizer, "adagrad");
	ck_assert_int_eq(dml_job_spec_check(s, err, sizeof(err)), 0);
	dml_job_spec_free(s);
}
END_TEST

START_TEST(defaults_fill_what_a_file_leaves_out)
{
	Dml__JobSpec *s = NULL;
	const Dml__TableSpec *t;
	char err[ERRLEN];

	ck_assert_msg(parse(MIN_JOB MIN_TABLE, &s, err) == 0, "%s", err);
	ck_assert_str_eq(s->data, "synthetic");
	ck_assert_str_eq(s->test_data, "");
	ck_assert_int_eq(s->staleness, 1);
	ck_assert_uint_eq(s->batch_size, 64);
	ck_assert_str_eq(s->metric, "");
	ck_assert_uint_eq(s->n_worker_ids, 0);
	ck_assert_uint_eq(s->examples, 10000);
	ck_assert_uint_eq(s->seed, 1);
	ck_assert_uint_eq(s->stale_scaling, DML_STALE_OFF);
	ck_assert_uint_eq(s->clock_batch, 0);
	ck_assert_uint_eq(s->bsp_step, DML_BSP_STEP_CLOCK);
	ck_assert(!s->allow_nonfinite);
	t = s->tables[0];
	ck_assert(t->dense);
	ck_assert_uint_eq(t->width, 1);
	ck_assert_str_eq(t->init, "zeros");
	ck_assert_double_eq(t->init_scale, 0.01);
	ck_assert_str_eq(t->optimizer, "sgd");
	ck_assert_double_eq(t->lr, 0.01);
	ck_assert_double_eq(t->momentum, 0.9);
	ck_assert_double_eq(t->beta2, 0.999);
	ck_assert_double_eq(t->epsilon, 1e-8);
	ck_assert_str_eq(t->codec, "none");
	ck_assert_str_eq(t->codec_cross_zone, "fp16");
	ck_assert_str_eq(t->pull_codec, "none");
	ck_assert_str_eq(t->pull_codec_cross_zone, "fp16");
	dml_job_spec_free(s);
}
END_TEST

/* The codec keys land in the spec and give each link class its codecs;
 * a spec from the wire that leaves them empty gets the same defaults. */
START_TEST(codec_keys)
{
	Dml__JobSpec *s = NULL;
	Dml__TableSpec bare = DML__TABLE_SPEC__INIT;
	struct dml_link_codecs lc;
	char err[ERRLEN];

	ck_assert_msg(parse(MIN_JOB MIN_TABLE "codec = bf16\ncodec_cross_zone = topk:0.01\n"
			    "pull_codec = int8\npull_codec_cross_zone = none\n", &s, err) == 0,
		      "%s", err);
	ck_assert_int_eq(dml_table_spec_codecs(s->tables[0], 0, &lc, err, ERRLEN), 0);
	ck_assert_int_eq(lc.push.kind, DML_CODEC_BF16);
	ck_assert_int_eq(lc.pull.kind, DML_CODEC_INT8);
	ck_assert_int_eq(dml_table_spec_codecs(s->tables[0], 1, &lc, err, ERRLEN), 0);
	ck_assert_int_eq(lc.push.kind, DML_CODEC_TOPK);
	ck_assert_float_eq(lc.push.topk_fraction, 0.01f);
	ck_assert_int_eq(lc.pull.kind, DML_CODEC_NONE);
	dml_job_spec_free(s);
	ck_assert_int_eq(dml_table_spec_codecs(&bare, 0, &lc, err, ERRLEN), 0);
	ck_assert(lc.push.kind == DML_CODEC_NONE && lc.pull.kind == DML_CODEC_NONE);
	ck_assert_int_eq(dml_table_spec_codecs(&bare, 1, &lc, err, ERRLEN), 0);
	ck_assert(lc.push.kind == DML_CODEC_FP16 && lc.pull.kind == DML_CODEC_FP16);
	/* topk pulls: across zones only (a zone aggregator's delta pulls). */
	bare.pull_codec_cross_zone = "topk:0.5";
	ck_assert_int_eq(dml_table_spec_codecs(&bare, 1, &lc, err, ERRLEN), 0);
	ck_assert_int_eq(lc.pull.kind, DML_CODEC_TOPK);
	bare.pull_codec = "topk:0.5";
	ck_assert_int_eq(dml_table_spec_codecs(&bare, 0, &lc, err, ERRLEN), DML_EINVAL);
	ck_assert_msg(strstr(err, "table 0: pull_codec: topk drops values"), "%s", err);
}
END_TEST

START_TEST(bad_files_say_where_and_why)
{
	/* file:line for what one line holds */
	assert_bad(MIN_JOB "colour = red\n" MIN_TABLE,
		   "t.conf:6: unknown key 'colour' in [job]");
	assert_bad(MIN_JOB "batch_size = many\n" MIN_TABLE, "t.conf:6: batch_size:");
	assert_bad(MIN_JOB "batch_size = 0\n" MIN_TABLE, "t.conf:6: batch_size:");
	assert_bad("[job]\nname = a b\n", "t.conf:2: name: 'a b': only letters");
	assert_bad("[job]\nname = "
		   "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcd\n",
		   "t.conf:2: name: is 64 characters long");
	assert_bad("[job]\nname = j\napp = sgd-net\n", "t.conf:3: app: 'sgd-net' is not an "
		   "app of this build (lsq, mlp, sparse_lr, mf)");
	assert_bad(MIN_JOB "metric = f1\n" MIN_TABLE, "t.conf:6: metric: 'f1' is not one of");
	assert_bad(MIN_JOB "worker_ids = 1,,2\n" MIN_TABLE, "t.conf:6: worker_ids:");
	assert_bad(MIN_JOB "worker_ids = 1, x\n" MIN_TABLE, "t.conf:6: worker_ids: 'x' is "
		   "not a node id");
	assert_bad(MIN_JOB "worker_ids = 4, 0\n" MIN_TABLE, "t.conf:6: worker_ids: 0 is not");
	assert_bad(MIN_JOB "worker_ids = 4, 9, 4\n" MIN_TABLE, "t.conf:6: worker_ids: 4 appears "
		   "twice");
	assert_bad(MIN_JOB MIN_TABLE "init = gaussian\n", "t.conf:9: init: 'gaussian' is not "
		   "one of zeros, uniform, normal");
	assert_bad(MIN_JOB MIN_TABLE "optimizer = lion\n", "t.conf:9: optimizer:");
	assert_bad(MIN_JOB MIN_TABLE "width = 0\n", "t.conf:9: width:");
	assert_bad(MIN_JOB MIN_TABLE "beta1 = 1\n", "t.conf:9: beta1: 1 is not in [0, 1)");
	assert_bad(MIN_JOB MIN_TABLE "lr = -0.1\n", "t.conf:9: lr:");
	assert_bad(MIN_JOB MIN_TABLE "[tables]\n", "t.conf:9: unknown section [tables]");
	assert_bad(MIN_JOB MIN_TABLE "codec = zip\n", "t.conf:9: codec: codec 'zip' is none of "
		   "none, fp16, bf16, int8, topk:FRACTION");
	assert_bad(MIN_JOB MIN_TABLE "codec_cross_zone = topk:0\n", "t.conf:9: codec_cross_zone:");
	assert_bad(MIN_JOB MIN_TABLE "pull_codec = topk:0.5\n", "t.conf:9: pull_codec: topk "
		   "drops values");
	/* required keys and rules across keys: the file and the reason */
	assert_bad("[job]\napp = lsq\nmax_clocks = 1\n" MIN_TABLE,
		   "t.conf: missing required key 'name' in [job]");
	assert_bad(MIN_JOB "[table]\nkeys = 4\n", "missing required key 'id'");
	assert_bad("[job]\nname = j\napp = lsq\ndim = 4\n" MIN_TABLE,
		   "t.conf: no stop condition");
	assert_bad("[job]\nname = j\napp = lsq\ndim = 4\nmetric = loss\n" MIN_TABLE,
		   "t.conf: no stop condition");
	assert_bad(MIN_JOB "target = 0.1\n" MIN_TABLE, "t.conf: target 0.1 needs a metric");
	assert_bad(MIN_JOB MIN_TABLE MIN_TABLE, "t.conf: table 0 appears twice");
	assert_bad(MIN_JOB MIN_TABLE "[table]\nid = 1\n", "t.conf: table 1: a dense table "
		   "needs keys >= 1");
	assert_bad(MIN_JOB MIN_TABLE "[table]\nid = 1\nkind = sparse\nkeys = 9\n",
		   "t.conf: table 1: a sparse table has no key count");
	assert_bad(MIN_JOB "workers = 2\nworker_ids = 1, 2\n" MIN_TABLE,
		   "t.conf: workers 2 and worker_ids both set");
	assert_bad(MIN_JOB "[table]\nid = 0\nkeys = 5\n", "t.conf: app lsq: needs table 0 "
		   "dense with keys = dim (4)");
	assert_bad(MIN_JOB "[table]\nid = 0\nkeys = 4\nwidth = 2\n", "app lsq: needs table 0");
	assert_bad(MIN_JOB "[table]\nid = 1\nkeys = 4\n", "app lsq: needs table 0");
	assert_bad(MIN_JOB "data = /srv/x.csv\n" MIN_TABLE, "app lsq: data '/srv/x.csv'");
	assert_bad(MIN_JOB "examples = 0\n" MIN_TABLE, "app lsq: synthetic data needs examples");
	assert_bad(MIN_JOB MIN_TABLE "lr = 0\n", "t.conf: table 0: lr 0 must be > 0 with "
		   "optimizer sgd");
	assert_bad(MIN_JOB, "t.conf: no [table]");
}
END_TEST

START_TEST(files_load_from_disk)
{
	const char *tmp = getenv("TMPDIR");
	char dir[200], path[256], err[ERRLEN];
	Dml__JobSpec *s = NULL;
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/check_jobs.XXXXXX", tmp && *tmp ? tmp : P_tmpdir);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/job.conf", dir);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(full_file, f);
	fclose(f);
	ck_assert_msg(dml_job_file_load(path, &s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(s->name, "full_Job.1-a");
	dml_job_spec_free(s);

	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("[job]\nname = j\nbogus = 1\n", f);
	fclose(f);
	s = NULL;
	ck_assert_int_eq(dml_job_file_load(path, &s, err, sizeof(err)), DML_ECONF);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, "job.conf:3: unknown key 'bogus'") != NULL, "%s", err);
	unlink(path);

	ck_assert_int_eq(dml_job_file_load(path, &s, err, sizeof(err)), DML_EIO);
	ck_assert_ptr_null(s);
	ck_assert_msg(strstr(err, path) == err && strstr(err, "No such file"), "%s", err);
	rmdir(dir);
}
END_TEST

START_TEST(example_lsq_conf_parses)
{
	const char *src = getenv("DML_SRCDIR");
	char path[4096], err[ERRLEN];
	Dml__JobSpec *s = NULL;

	snprintf(path, sizeof(path), "%s/conf/jobs/lsq.conf", src ? src : ".");
	ck_assert_msg(dml_job_file_load(path, &s, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(s->app, "lsq");
	ck_assert_str_eq(s->data, "synthetic");
	ck_assert_uint_eq(s->workers, 0);
	ck_assert_uint_eq(s->max_clocks, 300);
	ck_assert_int_eq(s->staleness, 1);
	ck_assert_uint_eq(s->examples, 20000);
	ck_assert_uint_eq(s->dim, 64);
	ck_assert_uint_eq(s->batch_size, 64);
	ck_assert_uint_eq(s->n_tables, 1);
	ck_assert(s->tables[0]->dense);
	ck_assert_uint_eq(s->tables[0]->keys, 64);
	ck_assert_uint_eq(s->tables[0]->width, 1);
	ck_assert_str_eq(s->tables[0]->optimizer, "sgd");
	ck_assert_double_eq(s->tables[0]->lr, 0.05);
	dml_job_spec_free(s);
}
END_TEST

/* This file's tests, into tc. */
void check_jobs_add_files(TCase *tc)
{
	tcase_add_test(tc, full_file_lands_in_the_spec);
	tcase_add_test(tc, defaults_fill_what_a_file_leaves_out);
	tcase_add_test(tc, codec_keys);
	tcase_add_test(tc, bad_files_say_where_and_why);
	tcase_add_test(tc, files_load_from_disk);
	tcase_add_test(tc, example_lsq_conf_parses);
}
