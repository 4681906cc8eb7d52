/*
 * Unit tests of the spec check on hand-built specs (proto/job_spec_check.c):
 * each rule, the edges it accepts, the app rules (mlp, sparse_lr, mf) with
 * their example files, copies and state names.
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
#include "sched/jobs.h"
#include "store/table.h"
#include "proto/util.h"

/* ---- hand-built specs -------------------------------------------------- */

void spec_init(struct spec_buf *b)
{
	memset(b, 0, sizeof(*b));
	dml__job_spec__init(&b->s);
	b->s.name = "hand";
	b->s.app = "lsq";
	b->s.data = "synthetic";
	b->s.batch_size = 8;
	/* Partitions follow examples/s; batch_split_follows_speed
	 * tests the split of batches by compute rate. */
	b->s.batch_split = DML_BATCH_EQUAL;
	b->s.max_clocks = 100;
	b->s.examples = 1000;
	b->s.dim = 4;
	b->s.seed = 1;
	for (size_t i = 0; i < 3; i++) {
		dml__table_spec__init(&b->t[i]);
		b->t[i].id = (uint32_t)i;
		b->t[i].dense = 1;
		b->t[i].width = 1;
		b->t[i].keys = 4;
		b->t[i].init = "zeros";
		b->t[i].optimizer = "sgd";
		b->t[i].lr = 0.1;
		b->t[i].momentum = 0.9;
		b->t[i].beta1 = 0.9;
		b->t[i].beta2 = 0.999;
		b->t[i].epsilon = 1e-8;
		b->tp[i] = &b->t[i];
	}
	b->s.tables = b->tp;
	b->s.n_tables = 1;
	b->s.worker_ids = b->ids;
}

/* Breaks a valid spec in one way (case i) and says what the check must
 * answer. */
static const char *spec_break(struct spec_buf *b, int i)
{
	Dml__JobSpec *s = &b->s;
	Dml__TableSpec *t2 = &b->t[2];

	s->n_tables = 3;   /* tables 0, 1, 2 */
	switch (i) {
	case 0: s->name = ""; return "name is empty";
	case 1: s->name = "no/slash"; return "name 'no/slash': only letters";
	case 2: s->name = NULL; return "name is empty";
	case 3: s->app = "cnn"; return "app 'cnn' is not an app of this build";
	case 4: s->batch_size = 0; return "batch_size must be at least 1";
	case 5: s->max_clocks = 0; return "no stop condition";
	case 6: s->metric = "f1"; return "metric 'f1' is not one of loss, accuracy, auc";
	case 7: s->max_epochs = NAN; return "max_epochs nan must be finite";
	case 8: s->max_epochs = -1; return "max_epochs -1 must be finite";
	case 9: s->metric = "loss"; s->target = INFINITY; return "target inf must be finite";
	case 10: s->workers = 2; s->n_worker_ids = 1; b->ids[0] = 3;
		return "workers 2 and worker_ids both set";
	case 11: s->n_worker_ids = 2; b->ids[0] = 3; b->ids[1] = 0;
		return "worker_ids: 0 is not a node id";
	case 12: s->n_worker_ids = 3; b->ids[0] = 3; b->ids[1] = 5; b->ids[2] = 3;
		return "worker_ids: 3 appears twice";
	case 13: s->n_tables = 0; return "no [table]";
	case 14: t2->id = 1; return "table 1 appears twice";
	case 15: t2->width = 0; return "table 2: width 0 out of range 1..65536";
	case 16: t2->width = 65537; return "table 2: width 65537 out of range";
	case 17: t2->keys = 0; return "table 2: a dense table needs keys >= 1";
	case 18: t2->dense = 0; return "table 2: a sparse table has no key count";
	case 19: t2->init = "ones"; return "table 2: init 'ones' is not one of";
	case 20: t2->optimizer = "rmsprop"; return "table 2: optimizer 'rmsprop' is not";
	case 21: t2->lr = -0.5; return "table 2: lr -0.5 must be finite, >= 0";
	case 22: t2->weight_decay = NAN; return "table 2: weight_decay nan must be finite";
	case 23: t2->init_scale = 1e300; return "table 2: init_scale 1e+300 must be";
	case 24: t2->beta1 = 1; return "table 2: beta1 1 is not in [0, 1)";
	case 25: t2->beta2 = 1.5; return "table 2: beta2 1.5 is not in [0, 1)";
	case 26: t2->momentum = 1; return "table 2: momentum 1 is not in [0, 1)";
	case 27: t2->epsilon = -1; return "table 2: epsilon -1 must be finite";
	case 28: t2->optimizer = "adam"; t2->epsilon = 0;
		return "table 2: epsilon 0 must be > 0 with optimizer adam";
	case 29: t2->lr = 1e-50; return "table 2: lr 1e-50 must be > 0 with optimizer sgd";
	case 30: s->dim = 0; return "app lsq: dim 0 out of range 1..2147483647";
	case 31: b->t[0].keys = 5; return "app lsq: needs table 0";
	case 32: s->examples = 0; return "app lsq: synthetic data needs examples >= 1";
	case 33: s->min_rate = -1; return "min_rate -1 must be finite";
	case 34: s->partitions = 2000000; return "partitions 2000000 out of range";
	case 35: s->hidden = "a\tb"; return "hidden holds a byte 0x09";
	case 36: s->tables[1] = NULL; return "table #2 is missing";
	case 37: s->metric = "accuracy"; s->max_clocks = 0; s->target = 0.9;
		return "app lsq: metric 'accuracy' is not one it computes (loss)";
	case 38: s->batch_size = 1u << 20; s->dim = 1024; b->t[0].keys = 1024;
		return "app lsq: batch_size 1048576 x dim 1024 is more than 268435456 floats";
	case 39: s->batch_size = 0x80000000u;
		return "app lsq: batch_size 2147483648 out of range";
	default: return NULL;
	}
}

#define SPEC_BREAKS 40

/*
 * mlp jobs: the example files parse, the layer list comes out of dim,
 * hidden and the last table, and each mlp rule is refused with its reason.
 */
static Dml__JobSpec *mlp_example(const char *name)
{
	const char *src = getenv("DML_SRCDIR");
	char path[4096], err[ERRLEN];
	Dml__JobSpec *s = NULL;

	snprintf(path, sizeof(path), "%s/conf/jobs/%s", src ? src : ".", name);
	ck_assert_msg(dml_job_file_load(path, &s, err, sizeof(err)) == 0, "%s", err);
	return s;
}

START_TEST(example_mlp_confs_parse)
{
	Dml__JobSpec *s = mlp_example("mlp.conf");
	uint32_t sizes[DML_MLP_HIDDEN_MAX + 2];
	char err[ERRLEN], img[256], lab[256];
	size_t n;

	ck_assert_str_eq(s->app, "mlp");
	ck_assert_int_eq(dml_job_mlp_layers(s, sizes, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(sizes[0], 784);
	ck_assert_uint_eq(sizes[1], 256);
	ck_assert_uint_eq(sizes[2], 10);
	ck_assert_int_eq(dml_job_data_pair(s->data, img, lab, sizeof(img), err, sizeof(err)),
			 0);
	ck_assert(strstr(img, "train-images-idx3-ubyte") != NULL);
	ck_assert(strstr(lab, "train-labels-idx1-ubyte") != NULL);
	ck_assert(img[strlen(img) - 1] != ' ' && lab[0] == '/');
	dml_job_spec_free(s);
	s = mlp_example("softmax.conf");
	ck_assert_int_eq(dml_job_mlp_layers(s, sizes, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(sizes[1], 10);
	dml_job_spec_free(s);
}
END_TEST

/* The mlp example with one rule broken; returns what the error must say. */
static const char *mlp_break(Dml__JobSpec *s, int i)
{
	switch (i) {
	case 0: s->hidden = "256,"; return "hidden '256,' ends with a comma";
	case 1: s->hidden = "256;3"; return "is not a comma list of layer sizes";
	case 2: s->hidden = "0"; return "a layer of 0 units, not in 1..65535";
	case 3: s->hidden = "1,1,1,1,1,1,1,1,1"; return "more than 8 layers";
	case 4: s->hidden = "128"; return "table 0 (layer 1) must be dense with keys = 128";
	case 5: s->hidden = ""; return "1 layer needs 1 table (ids 0..0), the job has 2";
	case 6: s->dim = 70000; return "dim 70000 out of range 1..65535";
	case 7: s->tables[1]->width = 256;
		return "table 1 (layer 2) must be dense with keys = 10 (its units) and "
		       "width = 257 (its 256 inputs + 1 for the bias)";
	case 8: s->data = "a.gz"; return "data 'a.gz' is not IMAGES,LABELS";
	case 9: s->data = "a.gz, "; return "the labels file is missing";
	case 10: s->test_data = "x,y,z"; return "test_data 'x,y,z' is not IMAGES,LABELS";
	case 11: s->metric = "auc"; return "app mlp: metric 'auc' is not one it computes";
	case 12: s->data = "synthetic"; s->examples = 0;
		return "synthetic data needs examples >= 1";
	case 13: s->batch_size = 1u << 20; return "batch_size 1048576 x the widest layer";
	case 14: s->n_tables = 1; return "table 1 (the output layer) must be dense";
	case 15: s->tables[1]->keys = 1; s->tables[1]->width = 257;
		return "must be dense with keys = classes, 2..65535";
	default: return NULL;
	}
}

#define MLP_BREAKS 16

START_TEST(mlp_spec_rules)
{
	Dml__JobSpec *s = mlp_example("mlp.conf");
	/* Broken on a shallow copy: string literals never reach the spec's free. */
	Dml__JobSpec v = *s;
	char err[ERRLEN];
	const char *want = mlp_break(&v, _i);

	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(dml_job_spec_check(&v, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, want) != NULL, "case %d: error '%s' lacks '%s'", _i, err,
		      want);
	dml_job_spec_free(s);
}
END_TEST

/*
 * sparse_lr jobs: the example file parses and passes, the metrics and data
 * it takes pass, and each of its rules is refused with its reason.
 */
START_TEST(example_sparse_lr_conf_parses)
{
	static const char *const ok_metrics[] = { "auc", "loss", "accuracy", "" };
	Dml__JobSpec *s = mlp_example("sparse_lr.conf");
	Dml__JobSpec v = *s;
	char err[ERRLEN];

	ck_assert_str_eq(s->app, "sparse_lr");
	ck_assert_str_eq(s->metric, "auc");
	ck_assert_uint_eq(s->dim, 1u << 20);
	ck_assert_uint_eq(s->n_tables, 1);
	ck_assert(!s->tables[0]->dense && s->tables[0]->width == 1);
	ck_assert_str_eq(s->tables[0]->optimizer, "adagrad");
	for (size_t i = 0; i < 4; i++) {
		v.metric = (char *)ok_metrics[i];
		ck_assert_msg(dml_job_spec_check(&v, err, sizeof(err)) == 0, "%s", err);
	}
	/* A file of classes: one logistic unit per class. */
	v.data = "/srv/train.svm.gz";
	v.test_data = "";
	s->tables[0]->width = 7;
	ck_assert_msg(dml_job_spec_check(&v, err, sizeof(err)) == 0, "%s", err);
	/* auc is higher-is-better, lsq and mlp do not compute it. */
	v.app = "lsq";
	v.data = "synthetic";
	v.metric = "auc";
	ck_assert_int_eq(dml_job_spec_check(&v, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "app lsq: metric 'auc' is not one it computes") != NULL, "%s",
		      err);
	dml_job_spec_free(s);
}
END_TEST

/* The sparse_lr example with one rule broken; what the error must say. */
static const char *sparse_lr_break(Dml__JobSpec *s, int i)
{
	Dml__TableSpec *t = s->tables[0];

	switch (i) {
	case 0: s->data = ""; return "app sparse_lr: data is empty (a libsvm file or synthetic)";
	case 1: s->examples = 0; return "app sparse_lr: synthetic data needs examples >= 1";
	case 2: s->dim = 0; return "app sparse_lr: dim must be at least 1";
	case 3: t->dense = 1; t->keys = 5;
		return "app sparse_lr: needs exactly one table, id 0, sparse";
	case 4: t->id = 3; return "app sparse_lr: needs exactly one table, id 0, sparse";
	case 5: t->width = 2;
		return "app sparse_lr: synthetic data is binary: table 0 needs width 1, not 2";
	case 6: s->data = "a.svm"; t->width = 2;
		return "app sparse_lr: synthetic data is binary: table 0 needs width 1";
	case 7: s->data = "a.svm"; s->test_data = ""; t->width = 2; s->batch_size = 1u << 28;
		return "app sparse_lr: batch_size 268435456 x width 2 is more than";
	case 8: s->metric = "f1"; return "metric 'f1' is not one of loss, accuracy, auc, rmse";
	default: return NULL;
	}
}

#define SPARSE_LR_BREAKS 9

START_TEST(sparse_lr_spec_rules)
{
	Dml__JobSpec *s = mlp_example("sparse_lr.conf");
	/* Broken on shallow copies: string literals never reach the spec's free. */
	Dml__JobSpec v = *s;
	Dml__TableSpec t = *s->tables[0], *tp = &t;
	char err[ERRLEN];
	const char *want;

	v.tables = &tp;
	want = sparse_lr_break(&v, _i);
	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(dml_job_spec_check(&v, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, want) != NULL, "case %d: error '%s' lacks '%s'", _i, err,
		      want);
	dml_job_spec_free(s);
}
END_TEST

/*
 * mf jobs: the example file parses and passes with the synthetic data's
 * users and items, and rmse is a ceiling, as loss is.
 */
START_TEST(example_mf_conf_parses)
{
	Dml__JobSpec *s = mlp_example("mf.conf");
	Dml__JobSpec v = *s;
	char err[ERRLEN];

	ck_assert_str_eq(s->app, "mf");
	ck_assert_str_eq(s->metric, "rmse");
	ck_assert(s->users == 1000 && s->items == 1000 && s->n_tables == 2);
	ck_assert(s->tables[0]->width == 16 && s->tables[1]->width == 16);
	ck_assert(dml_metric_lower_is_better("rmse") && dml_metric_lower_is_better("loss"));
	ck_assert(!dml_metric_lower_is_better("auc") && !dml_metric_lower_is_better("accuracy"));
	ck_assert(!dml_metric_lower_is_better(NULL));
	v.metric = "loss";
	ck_assert_msg(dml_job_spec_check(&v, err, sizeof(err)) == 0, "%s", err);
	v.metric = "accuracy";
	ck_assert_int_eq(dml_job_spec_check(&v, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "app mf: metric 'accuracy' is not one it computes") != NULL,
		      "%s", err);
	v.metric = "rmse";
	v.app = "mlp";
	ck_assert_int_eq(dml_job_spec_check(&v, err, sizeof(err)), DML_EINVAL);
	dml_job_spec_free(s);
	assert_bad(MIN_JOB "users = 0\n" MIN_TABLE, "t.conf:6: users:");
}
END_TEST

START_TEST(spec_check_catches_each_rule)
{
	struct spec_buf b;
	char err[ERRLEN];
	const char *want;

	spec_init(&b);
	b.s.n_tables = 3;
	ck_assert_msg(dml_job_spec_check(&b.s, err, sizeof(err)) == 0, "%s", err);
	spec_init(&b);
	want = spec_break(&b, _i);
	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(dml_job_spec_check(&b.s, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, want) != NULL, "case %d: error '%s' lacks '%s'", _i, err,
		      want);
}
END_TEST

START_TEST(spec_check_accepts_edges)
{
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	ck_assert_int_eq(dml_job_spec_check(NULL, err, sizeof(err)), DML_EINVAL);
	/* each stop condition alone is enough */
	b.s.max_clocks = 0;
	b.s.max_epochs = 0.5;
	ck_assert_msg(dml_job_spec_check(&b.s, err, sizeof(err)) == 0, "%s", err);
	b.s.max_epochs = 0;
	b.s.metric = "loss";
	b.s.target = 0.01;
	ck_assert_msg(dml_job_spec_check(&b.s, err, sizeof(err)) == 0, "%s", err);
	/* staleness is free; worker_ids alone; add needs no lr; sparse table */
	b.s.staleness = -7;
	b.s.n_worker_ids = 2;
	b.ids[0] = 9;
	b.ids[1] = 2;
	b.t[1].id = 64;
	b.t[1].dense = 0;
	b.t[1].keys = 0;
	b.t[1].width = 65536;
	b.t[1].optimizer = "add";
	b.t[1].lr = 0;
	b.s.n_tables = 2;
	ck_assert_msg(dml_job_spec_check(&b.s, err, sizeof(err)) == 0, "%s", err);
	ck_assert(dml_job_app_known("lsq"));
	ck_assert(!dml_job_app_known("LSQ"));
	ck_assert(!dml_job_app_known(NULL));
}
END_TEST

START_TEST(too_many_tables_are_refused)
{
	Dml__TableSpec t[DML_JOB_TABLES_MAX + 1], *tp[DML_JOB_TABLES_MAX + 1];
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	for (size_t i = 0; i <= DML_JOB_TABLES_MAX; i++) {
		t[i] = b.t[0];
		t[i].id = (uint32_t)i;
		tp[i] = &t[i];
	}
	b.s.tables = tp;
	b.s.n_tables = DML_JOB_TABLES_MAX;
	ck_assert_msg(dml_job_spec_check(&b.s, err, sizeof(err)) == 0, "%s", err);
	b.s.n_tables = DML_JOB_TABLES_MAX + 1;
	ck_assert_int_eq(dml_job_spec_check(&b.s, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "65 tables, at most 64") != NULL, "%s", err);
}
END_TEST

START_TEST(copy_is_deep_and_free_takes_null)
{
	struct spec_buf b;
	Dml__JobSpec *c, *e;
	uint8_t x[512], y[512];
	size_t n;

	spec_init(&b);
	b.s.n_worker_ids = 2;
	b.ids[0] = 4;
	b.ids[1] = 6;
	c = dml_job_spec_copy(&b.s);
	ck_assert_ptr_nonnull(c);
	n = dml__job_spec__get_packed_size(&b.s);
	ck_assert_uint_le(n, sizeof(x));
	ck_assert_uint_eq(dml__job_spec__get_packed_size(c), n);
	dml__job_spec__pack(&b.s, x);
	dml__job_spec__pack(c, y);
	ck_assert_mem_eq(x, y, n);
	ck_assert_ptr_ne(c->name, b.s.name);
	ck_assert_ptr_ne(c->tables[0], b.s.tables[0]);
	b.ids[0] = 99;
	ck_assert_uint_eq(c->worker_ids[0], 4);
	dml_job_spec_free(c);
	dml_job_spec_free(NULL);
	e = dml_job_spec_copy(NULL);
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(e->name, "");
	dml_job_spec_free(e);
}
END_TEST

START_TEST(state_names)
{
	ck_assert_str_eq(dml_job_state_name(DML__JOB_STATE__PENDING), "pending");
	ck_assert_str_eq(dml_job_state_name(DML__JOB_STATE__RUNNING), "running");
	ck_assert_str_eq(dml_job_state_name(DML__JOB_STATE__PAUSED), "paused");
	ck_assert_str_eq(dml_job_state_name(DML__JOB_STATE__DONE), "done");
	ck_assert_str_eq(dml_job_state_name(DML__JOB_STATE__FAILED), "failed");
	ck_assert_str_eq(dml_job_state_name(DML__JOB_STATE__STOPPED), "stopped");
	ck_assert_str_eq(dml_job_state_name(0), "unknown");
	ck_assert_str_eq(dml_job_state_name(7), "unknown");
	ck_assert_str_eq(dml_job_state_name(-1), "unknown");
}
END_TEST

/* This file's tests, into tc. */
void check_jobs_add_specs(TCase *tc)
{
	tcase_add_test(tc, example_mlp_confs_parse);
	tcase_add_loop_test(tc, mlp_spec_rules, 0, MLP_BREAKS);
	tcase_add_test(tc, example_sparse_lr_conf_parses);
	tcase_add_loop_test(tc, sparse_lr_spec_rules, 0, SPARSE_LR_BREAKS);
	tcase_add_test(tc, example_mf_conf_parses);
	tcase_add_loop_test(tc, spec_check_catches_each_rule, 0, SPEC_BREAKS);
	tcase_add_test(tc, spec_check_accepts_edges);
	tcase_add_test(tc, too_many_tables_are_refused);
	tcase_add_test(tc, copy_is_deep_and_free_takes_null);
	tcase_add_test(tc, state_names);
}
