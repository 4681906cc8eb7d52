/*
 * Unit tests of job files and specs (sched/job_conf.c) and of the
 * scheduler's job table (sched/jobs.c) with a fake clock: parsing a full
 * file and every class of bad one, the spec check on hand-built specs, the
 * example conf/jobs/lsq.conf, and the job state machine (start, losing and
 * regaining workers, stop conditions, operators, assignments, status).
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

#include "assign.h"
#include "check_run.h"
#include "dml_error.h"
#include "frame.h"
#include "handover.h"
#include "job_conf.h"
#include "jobs.h"
#include "table.h"
#include "util.h"

#define ERRLEN 512

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

/* The smallest valid lsq job; tests append lines to break it. */
#define MIN_JOB "[job]\nname = j\napp = lsq\nmax_clocks = 10\ndim = 4\n"
#define MIN_TABLE "[table]\nid = 0\nkeys = 4\n"

static int parse(const char *text, Dml__JobSpec **spec, char *err)
{
	err[0] = '\0';
	return dml_job_file_parse_string("t.conf", text, spec, err, ERRLEN);
}

/* The file is refused with DML_ECONF and an error containing want. */
static void assert_bad(const char *text, const char *want)
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
	dml_job_spec_free(s);
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

/* ---- hand-built specs -------------------------------------------------- */

/* A valid lsq spec with room for tables and ids; strings are literals. */
struct spec_buf {
	Dml__JobSpec s;
	Dml__TableSpec t[3];
	Dml__TableSpec *tp[3];
	uint32_t ids[4];
};

static void spec_init(struct spec_buf *b)
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

/* ---- the job table ----------------------------------------------------- */

/* A table holding one submitted job of spec b (ids and tables as set). */
static struct dml_jobs *jobs_with(struct spec_buf *b, uint64_t now, struct dml_job **job)
{
	struct dml_jobs *jobs;
	char err[ERRLEN];
	uint32_t id = 0;

	ck_assert_int_eq(dml_jobs_new(&jobs), 0);
	ck_assert_msg(dml_jobs_submit(jobs, &b->s, now, &id, err, sizeof(err)) == 0, "%s",
		      err);
	*job = dml_jobs_find(jobs, id);
	ck_assert_ptr_nonnull(*job);
	return jobs;
}

/* Starts job on workers 1..n, all at the given rate. */
static void start_equal(struct dml_job *job, size_t n, double rate, uint64_t now)
{
	struct dml_job_candidate c[16];

	ck_assert_uint_le(n, 16);
	for (size_t i = 0; i < n; i++) {
		c[i].node_id = (uint32_t)(i + 1);
		c[i].rate = rate;
	}
	ck_assert_int_eq(dml_jobs_start(job, c, n, now), 0);
}

static uint64_t npart_of(struct dml_job *job, uint32_t id)
{
	struct dml_job_worker *w = dml_job_worker(job, id);

	ck_assert_ptr_nonnull(w);
	return w->npart;
}

static const char *last_event(const struct dml_job *job)
{
	ck_assert_uint_gt(job->nevents, 0);
	return job->events[(job->nevents - 1) % DML_JOB_EVENTS];
}

/* Every partition has an owner among the live workers, and npart agrees. */
static void assert_owners_consistent(const struct dml_job *job)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < job->nworkers; i++) {
		uint64_t k = 0;

		for (uint64_t p = 0; p < job->num_partitions; p++)
			k += job->owner[p] == i;
		ck_assert_uint_eq(k, job->workers[i].npart);
		if (!job->workers[i].live)
			ck_assert_uint_eq(k, 0);
		sum += k;
	}
	ck_assert_uint_eq(sum, job->num_partitions);
}

/*
 * Worker id's report p, sent as a worker that took its latest assignment
 * sends it: it lets go of every partition it is not given (the scheduler
 * takes that only from the worker walking one). Returns what
 * dml_jobs_progress returns.
 */
static int progress_sent(struct dml_job *job, uint32_t id, Dml__Progress *p, uint64_t now)
{
	uint32_t *rel = calloc(job->num_partitions + 1, sizeof(*rel));
	uint64_t *pos = calloc(job->num_partitions + 1, sizeof(*pos));
	int rc;

	ck_assert(rel && pos);
	for (uint32_t q = 0; job->owner && q < job->num_partitions; q++)
		if (job->owner[q] != id - 1)
			rel[p->n_released++] = q;
	p->released = rel;
	p->released_positions = pos;
	p->n_released_positions = p->n_released;
	rc = dml_jobs_progress(job, id, p, now);
	free(rel);
	free(pos);
	return rc;
}

static void report(struct dml_job *job, uint32_t id, uint64_t clock, uint64_t examples,
		   double rate, uint64_t now, int expect)
{
	Dml__Progress p = DML__PROGRESS__INIT;

	p.job = job->id;
	p.clock = clock;
	p.examples = examples;
	p.examples_per_s = rate;
	p.loss = NAN;
	ck_assert_int_eq(progress_sent(job, id, &p, now), expect);
}

/*
 * Worker id applies its assignment as of now, and reports where the
 * partitions it walks stand (900 + p) and which of those it had before
 * (had[p] == id - 1, an owner array of npart) it let go of, at 1000 + p.
 * Returns what dml_jobs_progress returns.
 */
static int let_go(struct dml_job *job, uint32_t id, const uint32_t *had, uint32_t npart,
		  uint64_t now)
{
	const struct dml_job_worker *w = dml_job_worker(job, id);
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	Dml__Progress p = DML__PROGRESS__INIT;
	uint32_t rel[64];
	uint64_t relpos[64], pos[64];
	size_t n = 0;
	int rc;

	ck_assert_ptr_nonnull(w);
	ck_assert_uint_le(npart, 64);
	dml_job_assignment(job, id, &a);
	for (uint32_t q = 0; q < npart; q++) {
		int kept = 0;

		for (size_t k = 0; k < a.n_partitions; k++)
			kept |= a.partitions[k] == q;
		if (had[q] == id - 1 && !kept) {
			rel[n] = q;
			relpos[n++] = 1000 + q;
		}
	}
	for (size_t k = 0; k < a.n_partitions; k++)
		pos[k] = 900 + a.partitions[k];
	p.job = job->id;
	p.clock = w->clock;
	p.examples = w->examples;
	p.loss = NAN;
	p.partitions = a.partitions;
	p.n_partitions = p.n_positions = a.n_partitions;
	p.positions = pos;
	p.released = rel;
	p.released_positions = relpos;
	p.n_released = p.n_released_positions = n;
	rc = dml_jobs_progress(job, id, &p, now);
	dml_job_assignment_clear(&a);
	return rc;
}

/* Is partition q listed for worker id, and at which position (else -1)? */
static int64_t listed_at(struct dml_job *job, uint32_t id, uint32_t q)
{
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	int64_t at = -1;

	dml_job_assignment(job, id, &a);
	ck_assert_uint_eq(a.n_positions, a.n_partitions);
	for (size_t k = 0; k < a.n_partitions; k++)
		if (a.partitions[k] == q)
			at = (int64_t)a.positions[k];
	dml_job_assignment_clear(&a);
	return at;
}

START_TEST(submit_makes_a_pending_job)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];
	uint32_t id = 0;

	spec_init(&b);
	jobs = jobs_with(&b, 500, &job);
	ck_assert_uint_eq(job->id, 1);
	ck_assert_int_eq(job->state, DML__JOB_STATE__PENDING);
	ck_assert_str_eq(job->reason, "waiting to start");
	ck_assert_str_eq(job->spec->name, "hand");
	ck_assert_ptr_ne(job->spec, &b.s);
	ck_assert_uint_eq(job->submitted_ms, 500);
	ck_assert_uint_eq(job->assignment_version, 0);
	ck_assert_uint_eq(dml_jobs_count(jobs), 1);
	ck_assert_ptr_eq(dml_jobs_at(jobs, 0), job);
	ck_assert_ptr_null(dml_jobs_at(jobs, 1));
	ck_assert_ptr_null(dml_jobs_find(jobs, 2));
	ck_assert_ptr_null(dml_jobs_find(jobs, 0));
	ck_assert_ptr_null(dml_jobs_active(jobs));
	ck_assert_ptr_eq(dml_jobs_next(jobs), job);
	ck_assert(!dml_job_finished(job));
	b.s.batch_size = 0;
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 600, &id, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "batch_size") != NULL, "%s", err);
	ck_assert_uint_eq(dml_jobs_count(jobs), 1);
	b.s.batch_size = 8;
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 600, &id, err, sizeof(err)), 0);
	ck_assert_uint_eq(id, 2);
	dml_jobs_set_reason(job, "installing tables on 2 servers", 700);
	ck_assert_str_eq(job->reason, "installing tables on 2 servers");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(start_waits_for_its_workers)
{
	struct dml_job_candidate c[3] = { { 4, 10 }, { 2, 10 }, { 9, 10 } };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 0, 10), DML_ESTATE);
	ck_assert_str_eq(job->reason, "waiting for a worker, none alive");
	ck_assert_int_eq(job->state, DML__JOB_STATE__PENDING);
	dml_jobs_free(jobs);

	b.s.workers = 3;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 1, 10), DML_ESTATE);
	ck_assert_str_eq(job->reason, "waiting for 3 workers, 1 alive");
	ck_assert_int_eq(job->state, DML__JOB_STATE__PENDING);
	ck_assert_uint_eq(job->nworkers, 0);
	ck_assert_int_eq(dml_jobs_start(job, c, 3, 20), 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_int_eq(dml_jobs_start(job, c, 3, 30), DML_EINVAL);
	dml_jobs_free(jobs);

	b.s.workers = 0;
	b.s.n_worker_ids = 3;
	b.ids[0] = 9;
	b.ids[1] = 7;
	b.ids[2] = 4;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 3, 10), DML_ESTATE);
	ck_assert_str_eq(job->reason, "waiting for worker 7 (2 of 3 alive)");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(workers_n_takes_the_lowest_ids_and_ids_take_exactly_those)
{
	struct dml_job_candidate c[4] = { { 9, 1 }, { 5, 1 }, { 3, 1 }, { 7, 1 } };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.workers = 2;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 4, 10), 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_uint_eq(job->workers[0].node_id, 3);
	ck_assert_uint_eq(job->workers[1].node_id, 5);
	ck_assert_uint_eq(job->num_partitions, 16);
	dml_jobs_free(jobs);

	b.s.workers = 0;
	b.s.n_worker_ids = 2;
	b.ids[0] = 9;
	b.ids[1] = 5;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 4, 10), 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_uint_eq(job->workers[0].node_id, 5);
	ck_assert_uint_eq(job->workers[1].node_id, 9);
	ck_assert_ptr_null(dml_job_worker(job, 3));
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(start_splits_partitions_by_rate)
{
	/* unsorted, one duplicate, one id 0: ignored */
	struct dml_job_candidate c[5] = { { 3, 100 }, { 1, 100 }, { 2, 200 }, { 0, 50 },
					  { 2, 200 } };
	struct dml_job_candidate d[3] = { { 1, 0 }, { 2, NAN }, { 3, 2 } };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, c, 5, 1000), 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_uint_eq(job->assignment_version, 1);
	ck_assert_uint_eq(job->started_ms, 1000);
	ck_assert_uint_eq(job->nworkers, 3);
	ck_assert_uint_eq(job->num_partitions, 24);
	ck_assert_uint_eq(npart_of(job, 1), 6);
	ck_assert_uint_eq(npart_of(job, 2), 12);
	ck_assert_uint_eq(npart_of(job, 3), 6);
	assert_owners_consistent(job);
	/* a fresh plan: one contiguous block each, in id order */
	for (uint64_t p = 0; p < 24; p++)
		ck_assert_uint_eq(job->owner[p], p < 6 ? 0 : p < 18 ? 1 : 2);
	ck_assert_str_eq(job->reason, "running on 3 workers");
	ck_assert_str_eq(last_event(job),
			 "started on workers 1, 2, 3 (24 partitions: 6, 12, 6)");
	ck_assert_str_eq(job->workers[1].reason, "started with 12 partitions");
	dml_jobs_free(jobs);

	/* unknown or bad rates count as 1; partitions from the spec */
	b.s.partitions = 100;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_start(job, d, 3, 1000), 0);
	ck_assert_uint_eq(job->num_partitions, 100);
	ck_assert_uint_eq(npart_of(job, 1), 25);
	ck_assert_uint_eq(npart_of(job, 2), 25);
	ck_assert_uint_eq(npart_of(job, 3), 50);
	ck_assert_double_eq(dml_job_worker(job, 2)->rate, 1);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_lost_worker_gives_only_its_partitions)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint32_t before[24];
	int rc;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 50, 0);
	memcpy(before, job->owner, sizeof(before));
	rc = dml_jobs_worker_lost(job, 1, "no heartbeat for 812 ms", 100);
	ck_assert_int_eq(rc, 1);
	ck_assert_uint_eq(job->assignment_version, 2);
	ck_assert(!dml_job_worker(job, 1)->live);
	ck_assert_uint_eq(npart_of(job, 1), 0);
	ck_assert_uint_eq(npart_of(job, 2), 12);
	ck_assert_uint_eq(npart_of(job, 3), 12);
	for (size_t p = 0; p < 24; p++) {
		if (before[p] != 0)
			ck_assert_uint_eq(job->owner[p], before[p]);
		else
			ck_assert(job->owner[p] == 1 || job->owner[p] == 2);
	}
	assert_owners_consistent(job);
	ck_assert_str_eq(last_event(job), "worker 1 lost (no heartbeat for 812 ms): its 8 "
			 "partitions to workers 2, 3");
	ck_assert_str_eq(dml_job_worker(job, 1)->reason, "lost (no heartbeat for 812 ms)");
	ck_assert_str_eq(dml_job_worker(job, 2)->reason, "gained 4 partitions (worker 1 lost)");
	ck_assert_str_eq(job->reason, "running on 2 workers");
	/* not a live worker of the job: nothing changes */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "again", 200), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 42, "stranger", 200), 0);
	ck_assert_uint_eq(job->assignment_version, 2);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(all_lost_leaves_partitions_unowned_until_one_rejoins)
{
	struct dml_job_candidate c = { 2, 10 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	report(job, 1, 30, 240, 10, 50, 0);
	report(job, 2, 25, 200, 10, 50, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "left", 100), 1);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, NULL, 100), 1);
	for (uint64_t p = 0; p < job->num_partitions; p++)
		ck_assert_uint_eq(job->owner[p], DML_ASSIGN_NONE);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(job->reason, "no live worker: 16 partitions wait unowned");
	ck_assert_str_eq(last_event(job), "worker 2 lost: no live worker, 16 partitions wait "
			 "unowned");
	/* the job stands where the furthest worker got */
	ck_assert_uint_eq(dml_job_clock(job), 30);
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 200), 1);
	ck_assert_uint_eq(npart_of(job, 2), 16);
	ck_assert_uint_eq(dml_job_worker(job, 2)->clock, 30);
	assert_owners_consistent(job);
	ck_assert_str_eq(job->reason, "running on 1 worker");
	dml_jobs_free(jobs);
}
END_TEST

/*
 * A partition that moves goes on from where the worker walking it stopped:
 * from a lost worker's last report at once, from a live one once it let
 * go of it (never while it still walks it), or after the hold from its
 * last report when it says nothing.
 */
START_TEST(a_moved_partition_goes_on_where_its_walker_stopped)
{
	struct dml_job_candidate c = { 3, 10 };
	uint32_t before[24], from1 = UINT32_MAX, from2 = UINT32_MAX;
	double lo = INFINITY, hi = 0;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	Dml__JobStatus *st;
	uint64_t version;

	spec_init(&b);
	b.s.rebalance_hold_ms = 1000;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	for (uint32_t q = 0; q < 24; q++)
		ck_assert_int_eq(listed_at(job, job->owner[q] + 1, q), 0);
	/* each walks its partitions to 900 + p and says so */
	memcpy(before, job->owner, sizeof(before));
	for (uint32_t id = 1; id <= 3; id++)
		ck_assert_int_eq(let_go(job, id, before, 24, 10), 0);
	st = dml_job_status(job, 10);
	for (uint32_t q = 0; q < 24; q++) {
		uint64_t begin, end;

		dml_partition_range(1000, 24, q, &begin, &end);
		lo = fmin(lo, (900.0 + q) / (double)(end - begin));
		hi = fmax(hi, (900.0 + q) / (double)(end - begin));
	}
	ck_assert_double_eq_tol(st->epochs_min, lo, 1e-9);
	ck_assert_double_eq_tol(st->epochs_max, hi, 1e-9);
	dml_job_status_free(st);
	/* a lost worker's partitions go on at once, from its last report */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "left", 20), 1);
	for (uint32_t q = 0; q < 24; q++)
		if (before[q] == 2)
			ck_assert_int_eq(listed_at(job, job->owner[q] + 1, q), 900 + q);
	/* it rejoins: what it takes back waits for the workers walking it */
	memcpy(before, job->owner, sizeof(before));
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 30), 1);
	for (uint32_t q = 0; q < 24; q++) {
		if (job->owner[q] != 2)
			continue;
		ck_assert_int_eq(listed_at(job, 3, q), -1);
		ck_assert_int_eq(listed_at(job, before[q] + 1, q), -1);
		*(before[q] == 0 ? &from1 : &from2) = q;
	}
	ck_assert_uint_ne(from1, UINT32_MAX);
	ck_assert_uint_ne(from2, UINT32_MAX);
	/* worker 1 lets go: its share goes on from where it stopped */
	version = job->assignment_version;
	ck_assert_int_eq(let_go(job, 1, before, 24, 40), 1);
	ck_assert_uint_eq(job->assignment_version, version + 1);
	ck_assert_int_eq(listed_at(job, 3, from1), 1000 + from1);
	ck_assert_int_eq(listed_at(job, 3, from2), -1);
	/* a report from behind does not move a partition back */
	ck_assert_int_eq(let_go(job, 3, before, 24, 45), 0);
	ck_assert_int_eq(listed_at(job, 3, from1), 1000 + from1);
	/* worker 2 says nothing: after the hold its share goes on regardless */
	ck_assert_int_eq(let_go(job, 1, before, 24, 1000), 0);
	ck_assert_int_eq(listed_at(job, 3, from2), -1);
	ck_assert_int_eq(let_go(job, 1, before, 24, 1030), 1);
	ck_assert_int_eq(listed_at(job, 3, from2), 900 + from2);
	ck_assert_ptr_nonnull(strstr(last_event(job), "partitions handed on without their "
				     "worker letting go of them within 1000 ms"));
	/* and its late letting go changes nothing */
	version = job->assignment_version;
	ck_assert_int_eq(let_go(job, 2, before, 24, 1040), 0);
	ck_assert_int_eq(listed_at(job, 3, from2), 900 + from2);
	ck_assert_uint_eq(job->assignment_version, version);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * A worker's link: the bytes its steps moved over its own communication
 * (waits less what the servers held its pulls for others), averaged once
 * it communicated 0.05 s since the last measure; a restarted worker's
 * counts start over.
 */
START_TEST(the_link_is_bytes_over_own_communication)
{
	static const struct { uint64_t bytes; double wait, held, want; } r[] = {
		{ 0, 0, 0, 0 },                    /* the first marks */
		{ 1000000, 0.6, 0.1, 2e6 },        /* 1 MB in 0.5 s */
		{ 1001000, 0.61, 0.1, 2e6 },       /* 0.01 s: too little to tell */
		{ 3040000, 1.41, 0.4, 0.3 * 4e6 + 0.7 * 2e6 }, /* 2.04 MB in 0.51 s */
		{ 500, 0.2, 0, 0.3 * 4e6 + 0.7 * 2e6 }, /* restarted: marks again */
	};
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	Dml__JobStatus *st;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	p.job = job->id;
	p.loss = NAN;
	for (size_t k = 0; k < DML_ARRAY_LEN(r); k++) {
		p.bytes = r[k].bytes;
		p.wait_s = r[k].wait;
		p.held_s = r[k].held;
		p.clock = k;
		ck_assert_int_ge(dml_jobs_progress(job, 1, &p, 10 + k), 0);
		ck_assert_double_eq_tol(dml_job_worker(job, 1)->link_bps, r[k].want, 1e-3);
	}
	ck_assert_double_eq(dml_job_worker(job, 2)->link_bps, 0);
	st = dml_job_status(job, 20);
	ck_assert_double_eq_tol(st->workers[0]->link_bps, r[4].want, 1e-3);
	dml_job_status_free(st);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * A job of more than 64 workers looks at its load (drift, first measures,
 * stalls) at most every 50 ms, not at each report: a look costs
 * O(workers log workers).
 */
START_TEST(a_large_job_looks_at_its_load_at_most_every_50_ms)
{
	struct dml_job_candidate c[100];
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	for (uint32_t i = 0; i < 100; i++) {
		c[i].node_id = i + 1;
		c[i].rate = 10;
	}
	ck_assert_int_eq(dml_jobs_start(job, c, 100, 0), 0);
	ck_assert_uint_eq(job->assignment_version, 1);
	/* worker 1 looks at t = 1000; the others measure in the same ms: the
	 * split their first measures call for waits for the next look */
	for (uint32_t id = 1; id <= 100; id++)
		report(job, id, 1, 0, id <= 50 ? 300 : 100, 1000, 0);
	report(job, 1, 2, 0, 300, 1049, 0);
	ck_assert_uint_eq(job->assignment_version, 1);
	report(job, 1, 2, 0, 300, 1050, 1);
	ck_assert_uint_eq(job->assignment_version, 2);
	ck_assert_str_eq(last_event(job), "split by the workers' first measured rates (load "
			 "deviation 50%)");
	dml_jobs_free(jobs);
}
END_TEST

/*
 * Each partition waits for its walker from the plan that made it wait: a
 * later plan's waits are not cut short by an earlier one's hold.
 */
START_TEST(a_partition_waits_its_own_hold)
{
	const bool live[2] = { true, true };
	uint32_t owner[4] = { 0, 0, 1, 1 };
	struct dml_handover h;

	dml_handover_init(&h, 4);
	dml_handover_plan(&h, owner, live, 2, 0);
	ck_assert_uint_eq(h.waiting, 0);
	owner[0] = 1;
	dml_handover_plan(&h, owner, live, 2, 100);
	ck_assert_uint_eq(h.waiting, 1);
	owner[2] = 0;
	dml_handover_plan(&h, owner, live, 2, 900);
	ck_assert_uint_eq(h.waiting, 2);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1099, 1000), 0);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1100, 1000), 1);
	ck_assert_uint_eq(h.holder[0], 1);
	ck_assert_uint_eq(h.holder[2], 1);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1899, 1000), 0);
	ck_assert_uint_eq(dml_handover_expire(&h, owner, 1900, 1000), 1);
	ck_assert_uint_eq(h.holder[2], 0);
	ck_assert_uint_eq(h.waiting, 0);
	dml_handover_free(&h);
}
END_TEST

START_TEST(a_rejoining_worker_starts_at_the_job_clock)
{
	struct dml_job_candidate c = { 3, 10 };
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint32_t before[24];
	size_t moved = 0;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	report(job, 1, 40, 100, 10, 50, 0);
	report(job, 2, 45, 100, 10, 50, 0);
	report(job, 3, 50, 100, 10, 50, 0);
	ck_assert_uint_eq(dml_job_clock(job), 40);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "connection closed", 60), 1);
	memcpy(before, job->owner, sizeof(before));
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 70), 1);
	/* it takes 8 back from the others, nothing else moves */
	for (size_t p = 0; p < 24; p++)
		moved += job->owner[p] != before[p];
	ck_assert_uint_eq(moved, 8);
	ck_assert_uint_eq(job->assignment_version, 3);
	ck_assert(dml_job_worker(job, 3)->live);
	ck_assert_uint_eq(npart_of(job, 3), 8);
	ck_assert_uint_eq(npart_of(job, 1), 8);
	ck_assert_str_eq(last_event(job), "worker 3 rejoined at clock 40: 8 partitions");
	ck_assert_str_eq(dml_job_worker(job, 3)->reason,
			 "rejoined at clock 40 with 8 partitions");
	assert_owners_consistent(job);
	/* its 8 are listed for it once the two walking them let go */
	dml_job_assignment(job, 3, &a);
	ck_assert_uint_eq(a.start_clock, 40);
	ck_assert_uint_eq(a.n_partitions, 0);
	dml_job_assignment_clear(&a);
	ck_assert_int_eq(let_go(job, 1, before, 24, 75), 1);
	ck_assert_int_eq(let_go(job, 2, before, 24, 75), 1);
	dml_job_assignment(job, 3, &a);
	ck_assert_uint_eq(a.n_partitions, 8);
	dml_job_assignment_clear(&a);
	/* already taking part: not wanted again */
	ck_assert_int_eq(dml_jobs_worker_available(job, &c, 80), 0);
	ck_assert_uint_eq(job->assignment_version, 5);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(new_workers_are_recruited_when_the_spec_allows)
{
	struct dml_job_candidate nine = { 9, 10 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	/* workers = 0: everyone alive takes part */
	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 5), 0); /* pending */
	start_equal(job, 3, 10, 0);
	report(job, 1, 12, 0, 0, 10, 0);
	report(job, 2, 12, 0, 0, 10, 0);
	report(job, 3, 14, 0, 0, 10, 0);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 20), 1);
	ck_assert_uint_eq(job->nworkers, 4);
	ck_assert_uint_eq(npart_of(job, 9), 6);
	ck_assert_uint_eq(npart_of(job, 1), 6);
	ck_assert_uint_eq(dml_job_worker(job, 9)->clock, 12);
	ck_assert_str_eq(last_event(job), "worker 9 joined at clock 12: 6 partitions");
	ck_assert_str_eq(dml_job_worker(job, 1)->reason,
			 "gave up 2 partitions (worker 9 joined)");
	assert_owners_consistent(job);
	dml_jobs_free(jobs);

	/* worker_ids: only those */
	b.s.n_worker_ids = 2;
	b.ids[0] = 1;
	b.ids[1] = 2;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 20), 0);
	ck_assert_uint_eq(job->nworkers, 2);
	ck_assert_uint_eq(job->assignment_version, 1);
	dml_jobs_free(jobs);

	/* workers = 2: only to make up for a lost one */
	b.s.n_worker_ids = 0;
	b.s.workers = 2;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 20), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "left", 30), 1);
	ck_assert_int_eq(dml_jobs_worker_available(job, &nine, 40), 1);
	ck_assert_uint_eq(npart_of(job, 9), 8);
	ck_assert_uint_eq(npart_of(job, 2), 8);
	assert_owners_consistent(job);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(every_worker_at_max_clocks_is_done)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.max_clocks = 200;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	report(job, 1, 200, 10, 5, 100, 0);
	report(job, 2, 150, 10, 5, 100, 0);
	report(job, 3, 199, 10, 5, 100, 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	report(job, 3, 201, 10, 5, 110, 0);
	report(job, 2, 200, 10, 5, 130, 1);
	ck_assert_int_eq(job->state, DML__JOB_STATE__DONE);
	ck_assert(dml_job_finished(job));
	ck_assert_uint_eq(job->finished_ms, 130);
	ck_assert_str_eq(job->reason, "every worker reached 200 clocks");
	ck_assert_str_eq(last_event(job), "done: every worker reached 200 clocks");
	ck_assert_ptr_null(dml_jobs_active(jobs));
	/* later reports change no state; strangers are not found */
	report(job, 1, 202, 10, 5, 140, 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__DONE);
	report(job, 77, 1, 1, 1, 140, DML_ENOTFOUND);
	ck_assert_int_eq(dml_jobs_progress(job, 1, NULL, 150), DML_EINVAL);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_lost_straggler_does_not_hold_a_finished_job)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.max_clocks = 200;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	report(job, 1, 200, 10, 5, 100, 0);
	report(job, 2, 120, 10, 5, 100, 0);
	report(job, 3, 200, 10, 5, 100, 0);
	/* 1 and 3 are done and report no more; 2 dies */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "no heartbeat for 900 ms", 150), 1);
	ck_assert_int_eq(job->state, DML__JOB_STATE__DONE);
	ck_assert_uint_eq(job->finished_ms, 150);
	ck_assert_str_eq(last_event(job), "done: every worker reached 200 clocks");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(workers_that_finished_make_it_done)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.max_clocks = 0;
	b.s.max_epochs = 1000;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	p.finished = 1;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 10), 0);
	ck_assert_int_eq(dml_jobs_progress(job, 2, &p, 10), 1);
	ck_assert_str_eq(job->reason, "every worker finished");
	dml_jobs_free(jobs);
}
END_TEST

/* A job with metric m and target t; reports of metric values in order, the
 * last making it done. */
static void check_metric_target(const char *m, double t, const double *v, size_t n)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.max_clocks = 0;
	b.s.metric = "loss";
	b.s.target = t;
	jobs = jobs_with(&b, 0, &job);
	/* lsq, the one app of this build, computes no accuracy and its specs
	 * with one are refused: the direction of other metrics is checked on the
	 * job's own copy of the spec (protobuf-c's, every string malloc'ed) */
	free(job->spec->metric);
	job->spec->metric = strdup(m);
	ck_assert_ptr_nonnull(job->spec->metric);
	start_equal(job, 2, 10, 0);
	p.loss = NAN;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 5), 0); /* no metric yet */
	p.has_metric = 1;
	for (size_t i = 0; i < n; i++) {
		p.metric = v[i];
		ck_assert_int_eq(dml_jobs_progress(job, 1 + (uint32_t)(i % 2), &p, 10 + i),
				 i + 1 == n);
	}
	ck_assert_int_eq(job->state, DML__JOB_STATE__DONE);
	ck_assert(job->has_metric);
	ck_assert_double_eq(job->metric, v[n - 1]);
	ck_assert_msg(strncmp(job->reason, m, strlen(m)) == 0 &&
		      strstr(job->reason, " reached target ") != NULL, "%s", job->reason);
	dml_jobs_free(jobs);
}

START_TEST(a_metric_reaching_its_target_is_done)
{
	/* loss: lower is better; NaN is no evaluation */
	check_metric_target("loss", 0.5, (double[]){ 2.0, NAN, 0.51, 0.5 }, 4);
	check_metric_target("loss", 0.5, (double[]){ 0.7, 0.1 }, 2);
	/* accuracy: higher is better */
	check_metric_target("accuracy", 0.9, (double[]){ 0.1, 0.89, 0.95 }, 3);
}
END_TEST

START_TEST(max_epochs_counts_examples_of_all_workers)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.max_clocks = 0;
	b.s.max_epochs = 2;
	b.s.examples = 999;   /* the reports' data_examples wins */
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);
	p.loss = NAN;
	p.data_examples = 1000;
	p.examples = 500;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 10), 0);
	ck_assert_int_eq(dml_jobs_progress(job, 2, &p, 10), 0);
	ck_assert_int_eq(dml_jobs_progress(job, 3, &p, 10), 0);
	ck_assert_uint_eq(job->data_examples, 1000);
	/* a restarted worker counts from 0 again: its work so far still counts */
	p.examples = 200;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 20), 0);
	ck_assert_uint_eq(dml_job_worker(job, 1)->examples, 700);
	p.examples = 600;
	ck_assert_int_eq(dml_jobs_progress(job, 2, &p, 20), 0);
	p.examples = 599;   /* 700 + 600 + 599 = 1899 */
	ck_assert_int_eq(dml_jobs_progress(job, 3, &p, 20), 0);
	p.examples = 700;   /* 2000 */
	ck_assert_int_eq(dml_jobs_progress(job, 3, &p, 30), 1);
	ck_assert_int_eq(job->state, DML__JOB_STATE__DONE);
	ck_assert_str_eq(job->reason, "2 epochs (2000 examples of 1000)");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_worker_error_fails_the_job)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	p.error = "out of memory\n";
	ck_assert_int_eq(dml_jobs_progress(job, 2, &p, 40), 1);
	ck_assert_int_eq(job->state, DML__JOB_STATE__FAILED);
	ck_assert_str_eq(job->reason, "worker 2: out of memory?");
	ck_assert_str_eq(last_event(job), "failed: worker 2: out of memory?");
	/* finished: neither a second failure nor an operator moves it */
	dml_jobs_fail(job, "every worker died", 50);
	ck_assert_str_eq(job->reason, "worker 2: out of memory?");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 60, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is failed");
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "left", 70), 0);
	dml_jobs_free(jobs);

	/* dml_jobs_fail on a running job */
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	dml_jobs_fail(job, "every server died", 80);
	ck_assert_int_eq(job->state, DML__JOB_STATE__FAILED);
	ck_assert_str_eq(job->reason, "every server died");
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(report_numbers_are_clamped_and_rates_smoothed)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_job_worker *w;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 50, 0);
	p.examples_per_s = -5;
	p.loss = -1;
	p.compute_s = NAN;
	p.wait_s = INFINITY;
	p.has_metric = 1;
	p.metric = -3;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 10), 0);
	w = dml_job_worker(job, 1);
	ck_assert_double_eq(w->examples_per_s, 0);
	ck_assert_double_eq(w->loss, 0);
	ck_assert_double_eq(w->compute_s, 0);
	ck_assert_double_eq(w->wait_s, DBL_MAX);
	ck_assert_double_eq(job->metric, 0);
	ck_assert_uint_eq(w->last_report_ms, 10);
	ck_assert_double_eq(w->rate, 50);   /* no positive report yet */
	p.examples_per_s = 100;
	p.loss = 2.5;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 20), 0);
	ck_assert_double_eq(w->rate, 100);
	p.examples_per_s = 200;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 30), 0);
	ck_assert_double_eq_tol(w->rate, 130, 1e-9);
	p.examples_per_s = 0;   /* idle: the average keeps */
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 40), 0);
	ck_assert_double_eq_tol(w->rate, 130, 1e-9);
	/* one worker's reports alone never move partitions: worker 2 has
	 * measured no rate, so there is no drift to measure */
	ck_assert_uint_eq(job->assignment_version, 1);
	ck_assert_uint_eq(npart_of(job, 1), 8);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(the_next_reassignment_uses_measured_rates)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	b.s.rebalance = DML_REBALANCE_OFF;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 3, 10, 0);   /* 8 each */
	report(job, 1, 1, 0, 300, 10, 0);
	report(job, 2, 1, 0, 100, 10, 0);
	report(job, 3, 1, 0, 100, 10, 0);
	ck_assert_uint_eq(npart_of(job, 1), 8);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "left", 20), 1);
	ck_assert_uint_eq(npart_of(job, 1), 18);
	ck_assert_uint_eq(npart_of(job, 2), 6);
	assert_owners_consistent(job);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * rebalance = auto: the first split follows the workers' profiles (10
 * examples/s each: 8 partitions each); once both measured their rates in
 * this job (300 and 100 examples/s), the partitions move to 12 and 4 at
 * once. Then the same rates call for no more moves, and a worker that
 * slows down later gives its partitions away only once the drift has
 * lasted the hold time (5 s by default).
 */
START_TEST(a_lasting_drift_rebalances)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);   /* 8 each */
	report(job, 1, 1, 0, 300, 1000, 0);
	report(job, 2, 1, 0, 100, 1000, 1);   /* both measured */
	ck_assert_uint_eq(job->assignment_version, 2);
	ck_assert_uint_eq(npart_of(job, 1), 12);
	ck_assert_uint_eq(npart_of(job, 2), 4);
	ck_assert_str_eq(last_event(job), "split by the workers' first measured rates (load "
			 "deviation 50%)");
	ck_assert_str_eq(dml_job_worker(job, 1)->reason,
			 "gained 4 partitions (first measures)");
	assert_owners_consistent(job);
	/* worker 2 lets go of the 4 at its next report: listed for worker 1 now */
	report(job, 2, 2, 0, 100, 1100, 1);
	ck_assert_uint_eq(job->assignment_version, 3);
	report(job, 1, 3, 0, 300, 60000, 0);
	report(job, 2, 3, 0, 100, 60000, 0);
	ck_assert_uint_eq(job->assignment_version, 3);

	/* Worker 2 slows down: 5 s later its partitions go to worker 1. */
	for (int i = 0; i < 8; i++)
		report(job, 2, 4, 0, 10, 61000, 0);
	report(job, 1, 4, 0, 300, 65999, 0);
	ck_assert_uint_eq(job->assignment_version, 3);
	report(job, 1, 5, 0, 300, 66000, 1);
	ck_assert_uint_eq(job->assignment_version, 4);
	ck_assert_uint_eq(npart_of(job, 2), 1);
	ck_assert_msg(strstr(last_event(job), "rebalanced by the workers' rates (load "
			     "deviation") != NULL, "%s", last_event(job));
	assert_owners_consistent(job);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * min_rate (asynchronous jobs): a worker below it for the hold time is set
 * aside as stalled,
 * its partitions to the others, though it stays a member; four holds
 * later it takes the share its last rate calls for again, and a worker
 * silent for the hold time is set aside too. A BSP job leaves it alone.
 */
START_TEST(a_stalled_worker_is_set_aside_and_tries_again)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint64_t t = 1000, n2;
	char want[160];

	spec_init(&b);
	b.s.staleness = -1;
	b.s.rebalance = DML_REBALANCE_OFF;
	b.s.rebalance_hold_ms = 1000;
	b.s.min_rate = 50;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);   /* 8 each */
	report(job, 1, 1, 0, 300, t, 0);
	report(job, 2, 1, 0, 100, t, 0);
	/* worker 2 slows down: its average falls under 50 at the third report */
	report(job, 2, 2, 0, 10, t + 10, 0);
	report(job, 2, 3, 0, 10, t + 20, 0);
	ck_assert(dml_job_worker(job, 2)->rate > 50);
	report(job, 2, 4, 0, 10, t + 30, 0);
	ck_assert(dml_job_worker(job, 2)->rate < 50);
	report(job, 1, 2, 0, 300, t + 999, 0);
	report(job, 2, 5, 0, 10, t + 1000, 0);
	report(job, 1, 2, 0, 300, t + 1029, 0);
	ck_assert_uint_eq(npart_of(job, 2), 8);
	report(job, 1, 3, 0, 300, t + 1030, 1);
	ck_assert_uint_eq(npart_of(job, 2), 0);
	ck_assert_uint_eq(npart_of(job, 1), 16);
	ck_assert(dml_job_worker(job, 2)->live);
	ck_assert_str_eq(last_event(job), "worker 2 stalled (below min_rate): its 8 "
			 "partitions to worker 1");
	assert_owners_consistent(job);
	/* it lets go of nothing: a hold later they go on regardless */
	report(job, 1, 4, 0, 300, t + 2029, 0);
	report(job, 1, 4, 0, 300, t + 2030, 1);
	ck_assert_str_eq(last_event(job), "8 partitions handed on without their worker "
			 "letting go of them within 1000 ms (it may walk them again)");
	/* four holds later it tries again, with the share its last rate calls for */
	for (uint64_t at = t + 2500; at < t + 5029; at += 500)
		report(job, 1, 4, 0, 300, at, 0);
	report(job, 1, 4, 0, 300, t + 5029, 0);
	report(job, 1, 5, 0, 300, t + 5030, 1);
	n2 = npart_of(job, 2);
	ck_assert_uint_ge(n2, 1);
	snprintf(want, sizeof(want), "worker 2 takes a share again after a stall: %" PRIu64
		 " partitions", n2);
	ck_assert_str_eq(last_event(job), want);
	/* worker 1 lets go of that share; worker 2 says nothing for a hold: set
	 * aside again */
	report(job, 1, 6, 0, 300, t + 5500, 1);
	report(job, 1, 6, 0, 300, t + 6029, 0);
	report(job, 1, 7, 0, 300, t + 6030, 1);
	ck_assert_uint_eq(npart_of(job, 2), 0);
	snprintf(want, sizeof(want), "worker 2 stalled (no report): its %" PRIu64
		 " partitions to worker 1", n2);
	ck_assert_str_eq(last_event(job), want);
	assert_owners_consistent(job);
	dml_jobs_free(jobs);

	/* BSP: a silent worker holds the others back; nothing is set aside */
	b.s.staleness = 0;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	report(job, 1, 1, 0, 10, t, 0);
	report(job, 2, 1, 0, 10, t, 0);
	report(job, 1, 2, 0, 10, t + 5000, 0);
	ck_assert_uint_eq(npart_of(job, 2), 8);
	dml_jobs_free(jobs);
}
END_TEST

/* A report at clock with compute_s seconds of work so far (expect -1: any
 * result). */
static void report_work(struct dml_job *job, uint32_t id, uint64_t clock, double compute_s,
			uint64_t now, int expect)
{
	Dml__Progress p = DML__PROGRESS__INIT;

	p.job = job->id;
	p.clock = clock;
	p.examples = clock * 10;
	p.examples_per_s = 100;
	p.compute_s = compute_s;
	p.loss = NAN;
	if (expect < 0)
		(void)progress_sent(job, id, &p, now);
	else
		ck_assert_int_eq(progress_sent(job, id, &p, now), expect);
}

/*
 * BSP/SSP: a server names the worker its pulls wait for (STRAGGLER). A wait
 * shorter than the hold, or than 10 of the worker's own clocks, is
 * slowness; a longer one sets it aside, its partitions to the others,
 * though it stays a member. Named again it is still set aside (the
 * servers must drop it again); four holds later it takes a share only
 * once it has reported since. Never a worker with no clock yet (it may be
 * loading its data), one not in the job, or in an asynchronous job.
 */
START_TEST(a_straggler_named_by_a_server_is_set_aside)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint64_t t = 1000, n2;
	char want[160];

	spec_init(&b);
	b.s.staleness = 0;
	b.s.rebalance = DML_REBALANCE_OFF;
	b.s.rebalance_hold_ms = 1000;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);   /* 8 each */
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 2, 0, 5000, t), 0);
	report_work(job, 1, 10, 1.0, t, 0);
	report_work(job, 2, 10, 2.0, t, 0);   /* 200 ms a clock: 2000 ms is its limit */
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 2, 10, 999, t + 1), 0);
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 2, 10, 1999, t + 1), 0);
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 9, 10, 5000, t + 1), 0);
	ck_assert_uint_eq(npart_of(job, 2), 8);
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 2, 10, 2000, t + 2), 1);
	ck_assert_uint_eq(npart_of(job, 2), 0);
	ck_assert_uint_eq(npart_of(job, 1), 16);
	ck_assert(dml_job_worker(job, 2)->live);
	ck_assert_str_eq(last_event(job), "worker 2 stalled (held the others): its 8 "
			 "partitions to worker 1");
	ck_assert_str_eq(dml_job_worker(job, 2)->reason, "stalled (held the others at clock "
			 "10 for 2000 ms)");
	assert_owners_consistent(job);
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 2, 10, 1000, t + 3), 1);
	/* four holds on, silent: it gets nothing (worker 1 takes on its
	 * partitions a hold after they were handed on) */
	report_work(job, 1, 20, 2.0, t + 4002, -1);
	report_work(job, 1, 30, 3.0, t + 5002, 0);
	ck_assert_uint_eq(npart_of(job, 2), 0);
	/* it makes clocks again */
	report_work(job, 2, 11, 2.1, t + 5003, 1);
	n2 = npart_of(job, 2);
	ck_assert_uint_ge(n2, 1);
	snprintf(want, sizeof(want), "worker 2 takes a share again after a stall: %" PRIu64
		 " partitions", n2);
	ck_assert_str_eq(last_event(job), want);
	dml_jobs_free(jobs);

	/* asynchronous: nobody waits for its clock */
	b.s.staleness = -1;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	report_work(job, 2, 10, 2.0, t, 0);
	ck_assert_int_eq(dml_jobs_worker_straggles(job, 2, 10, 60000, t + 1), 0);
	ck_assert_uint_eq(npart_of(job, 2), 8);
	dml_jobs_free(jobs);
}
END_TEST

/* rebalance = off: drifts never move partitions; dmlctl rebalance does, at once. */
START_TEST(rebalance_off_and_by_operator)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	b.s.rebalance = DML_REBALANCE_OFF;
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_control(jobs, job->id, DML__JOB_ACTION__REBALANCE, 0, err,
					  sizeof(err)), DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is pending");
	start_equal(job, 2, 10, 0);
	report(job, 1, 1, 0, 300, 1000, 0);
	report(job, 2, 1, 0, 100, 1000, 0);
	report(job, 1, 2, 0, 300, 100000, 0);
	report(job, 2, 2, 0, 100, 100000, 0);
	ck_assert_uint_eq(job->assignment_version, 1);
	ck_assert_int_eq(dml_jobs_control(jobs, job->id, DML__JOB_ACTION__REBALANCE, 100001,
					  err, sizeof(err)), 0);
	ck_assert_uint_eq(job->assignment_version, 2);
	ck_assert_uint_eq(npart_of(job, 1), 12);
	ck_assert_str_eq(last_event(job), "rebalanced by operator (load deviation 50%)");
	assert_owners_consistent(job);
	ck_assert_int_eq(dml_jobs_control(jobs, 9, DML__JOB_ACTION__REBALANCE, 0, err,
					  sizeof(err)), DML_ENOTFOUND);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(operators_pause_resume_and_stop)
{
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 5, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is pending");
	start_equal(job, 2, 10, 10);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 20, err, sizeof(err)),
			 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__PAUSED);
	ck_assert_str_eq(job->reason, "paused by operator");
	ck_assert_str_eq(last_event(job), "paused by operator");
	ck_assert_ptr_eq(dml_jobs_active(jobs), job);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 25, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is paused");
	/* a paused job still loses and regains workers */
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "left", 26), 1);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__RESUME, 30, err,
					  sizeof(err)), 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(job->reason, "running on 1 worker");
	ck_assert_str_eq(last_event(job), "resumed by operator");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__RESUME, 35, err,
					  sizeof(err)), DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is running");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 40, err, sizeof(err)),
			 0);
	ck_assert_int_eq(job->state, DML__JOB_STATE__STOPPED);
	ck_assert_str_eq(job->reason, "stopped by operator");
	ck_assert_uint_eq(job->finished_ms, 40);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 45, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is stopped");
	ck_assert_int_eq(dml_jobs_control(jobs, 7, DML__JOB_ACTION__STOP, 50, err, sizeof(err)),
			 DML_ENOTFOUND);
	ck_assert_str_eq(err, "no job 7");
	ck_assert_int_eq(dml_jobs_control(jobs, 1, 9, 50, err, sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__ACTION_NONE, 50, err,
					  sizeof(err)), DML_EINVAL);
	dml_jobs_free(jobs);

	/* a done job cannot be stopped; a pending one can */
	b.s.max_clocks = 1;
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 1, 10, 0);
	report(job, 1, 1, 0, 0, 5, 1);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 10, err, sizeof(err)),
			 DML_ESTATE);
	ck_assert_str_eq(err, "job 1 is done");
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 20, &(uint32_t){ 0 }, err, sizeof(err)),
			 0);
	ck_assert_int_eq(dml_jobs_control(jobs, 2, DML__JOB_ACTION__STOP, 30, err, sizeof(err)),
			 0);
	ck_assert_int_eq(dml_jobs_find(jobs, 2)->state, DML__JOB_STATE__STOPPED);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(one_job_is_active_at_a_time)
{
	struct dml_jobs *jobs;
	struct dml_job *one, *two;
	struct spec_buf b;
	char err[ERRLEN];
	uint32_t id;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &one);
	ck_assert_int_eq(dml_jobs_submit(jobs, &b.s, 10, &id, err, sizeof(err)), 0);
	two = dml_jobs_find(jobs, id);
	ck_assert_ptr_eq(dml_jobs_next(jobs), one);
	start_equal(one, 2, 10, 20);
	ck_assert_ptr_eq(dml_jobs_active(jobs), one);
	ck_assert_ptr_null(dml_jobs_next(jobs));
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 30, err, sizeof(err)),
			 0);
	ck_assert_ptr_null(dml_jobs_next(jobs));
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 40, err, sizeof(err)),
			 0);
	ck_assert_ptr_null(dml_jobs_active(jobs));
	ck_assert_ptr_eq(dml_jobs_next(jobs), two);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(assignments_list_each_workers_partitions)
{
	Dml__Assignment a = DML__ASSIGNMENT__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	char err[ERRLEN];
	uint64_t seen = 0;

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	dml_job_assignment(job, 1, &a);
	ck_assert_ptr_null(a.partitions);
	ck_assert_int_eq(a.state, DML__JOB_STATE__PENDING);
	ck_assert_uint_eq(a.n_partitions, 0);
	start_equal(job, 3, 10, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "left", 10), 1);
	for (uint32_t id = 1; id <= 3; id++) {
		dml__assignment__init(&a);
		dml_job_assignment(job, id, &a);
		ck_assert_uint_eq(a.job, 1);
		ck_assert_uint_eq(a.version, 2);
		ck_assert_int_eq(a.state, DML__JOB_STATE__RUNNING);
		ck_assert_uint_eq(a.num_partitions, 24);
		ck_assert_uint_eq(a.n_partitions, id == 2 ? 0 : 12);
		ck_assert_uint_eq(a.n_positions, a.n_partitions);
		for (size_t k = 0; k < a.n_partitions; k++) {
			ck_assert_uint_lt(a.partitions[k], 24);
			ck_assert_uint_eq(job->owner[a.partitions[k]], id - 1);
			if (k)
				ck_assert_uint_gt(a.partitions[k], a.partitions[k - 1]);
			seen++;
		}
		dml_job_assignment_clear(&a);
	}
	ck_assert_uint_eq(seen, 24);
	dml__assignment__init(&a);
	dml_job_assignment(job, 55, &a);
	ck_assert_ptr_null(a.partitions);
	ck_assert_uint_eq(a.n_partitions, 0);
	ck_assert_int_eq(a.state, DML__JOB_STATE__RUNNING);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 40, err, sizeof(err)),
			 0);
	dml_job_assignment(job, 1, &a);
	ck_assert_int_eq(a.state, DML__JOB_STATE__STOPPED);
	dml_job_assignment_clear(&a);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(status_reports_the_whole_job)
{
	Dml__Progress p = DML__PROGRESS__INIT;
	struct dml_jobs *jobs;
	struct dml_job *job;
	Dml__JobStatus *st;
	struct spec_buf b;
	char err[ERRLEN];

	spec_init(&b);
	b.s.max_clocks = 1000;
	jobs = jobs_with(&b, 500, &job);
	start_equal(job, 3, 10, 1000);
	p.clock = 7;
	p.examples = 70;
	p.examples_per_s = 20;
	p.loss = 1.0;
	p.compute_s = 1.5;
	p.wait_s = 0.5;
	p.cpu_s = 2.5;
	p.cores = 0.6;
	ck_assert_int_eq(dml_jobs_progress(job, 1, &p, 1500), 0);
	p.clock = 9;
	p.loss = 3.0;
	ck_assert_int_eq(dml_jobs_progress(job, 2, &p, 1500), 0);
	p.clock = 5;
	p.loss = NAN;   /* worker 3: no loss yet */
	ck_assert_int_eq(dml_jobs_progress(job, 3, &p, 1500), 0);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__PAUSE, 3000, err,
					  sizeof(err)), 0);
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__RESUME, 4000, err,
					  sizeof(err)), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "left", 4500), 1);
	st = dml_job_status(job, 6000);
	ck_assert_ptr_nonnull(st);
	ck_assert_uint_eq(st->id, 1);
	ck_assert_str_eq(st->name, "hand");
	ck_assert_int_eq(st->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(st->reason, "running on 2 workers");
	ck_assert_ptr_nonnull(st->spec);
	ck_assert_uint_eq(st->spec->max_clocks, 1000);
	ck_assert_uint_eq(st->clock, 7);
	ck_assert_uint_eq(st->examples, 210);
	ck_assert_double_eq(st->examples_per_s, 40);
	ck_assert_double_eq(st->loss, 2.0);
	ck_assert(!st->has_metric);
	ck_assert_uint_eq(st->age_ms, 5500);
	ck_assert_uint_eq(st->run_ms, 2000 + 2000);
	ck_assert_uint_eq(st->assignment_version, 2);
	ck_assert_uint_eq(st->shard_map_version, 0);
	ck_assert_uint_eq(st->n_workers, 3);
	ck_assert_uint_eq(st->workers[0]->worker, 1);
	ck_assert_int_eq(st->workers[0]->state, DML__NODE_STATE__ALIVE);
	ck_assert_uint_eq(st->workers[0]->clock, 7);
	ck_assert_uint_eq(st->workers[0]->examples, 70);
	ck_assert_double_eq(st->workers[0]->examples_per_s, 20);
	ck_assert_double_eq(st->workers[0]->loss, 1.0);
	ck_assert_double_eq(st->workers[0]->compute_s, 1.5);
	ck_assert_double_eq(st->workers[0]->wait_s, 0.5);
	ck_assert_double_eq(st->workers[0]->cpu_s, 2.5);
	ck_assert_double_eq(st->workers[0]->cores, 0.6);
	ck_assert_uint_eq(st->workers[0]->partitions, 12);
	ck_assert_str_eq(st->workers[0]->reason, "gained 4 partitions (worker 3 lost)");
	ck_assert_uint_eq(st->workers[2]->worker, 3);
	ck_assert_int_eq(st->workers[2]->state, DML__NODE_STATE__DEAD);
	ck_assert_uint_eq(st->workers[2]->partitions, 0);
	ck_assert_str_eq(st->workers[2]->reason, "lost (left)");
	ck_assert_uint_eq(st->n_events, 5);
	ck_assert_str_eq(st->events[0], "submitted");
	ck_assert_str_eq(st->events[1], "started on workers 1, 2, 3 (24 partitions: 8, 8, 8)");
	ck_assert_str_eq(st->events[2], "paused by operator");
	ck_assert_str_eq(st->events[3], "resumed by operator");
	ck_assert_str_eq(st->events[4], "worker 3 lost (left): its 8 partitions to workers "
			 "1, 2");
	dml_job_status_free(st);

	/* stopped: run_ms no longer grows */
	ck_assert_int_eq(dml_jobs_control(jobs, 1, DML__JOB_ACTION__STOP, 7000, err,
					  sizeof(err)), 0);
	st = dml_job_status(job, 9000);
	ck_assert_uint_eq(st->run_ms, 2000 + 3000);
	ck_assert_uint_eq(st->age_ms, 8500);
	dml_job_status_free(st);
	dml_job_status_free(NULL);
	ck_assert_ptr_null(dml_job_status(NULL, 0));
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(events_keep_the_newest_in_order)
{
	struct dml_job_candidate c = { 2, 10 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	Dml__JobStatus *st;
	struct spec_buf b;
	char want[64];

	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	start_equal(job, 2, 10, 0);
	/* 2 events so far, then 20 more: lost / rejoined, 10 times */
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(dml_jobs_worker_lost(job, 2, "left", 10), 1);
		ck_assert_int_eq(dml_jobs_worker_available(job, &c, 20), 1);
	}
	ck_assert_uint_eq(job->nevents, 22);
	st = dml_job_status(job, 30);
	ck_assert_uint_eq(st->n_events, DML_JOB_EVENTS);
	for (size_t k = 0; k < st->n_events; k++) {
		snprintf(want, sizeof(want), k % 2 ? "worker 2 rejoined" : "worker 2 lost");
		ck_assert_msg(strncmp(st->events[k], want, strlen(want)) == 0, "%zu: %s", k,
			      st->events[k]);
	}
	ck_assert_str_eq(st->events[DML_JOB_EVENTS - 1], last_event(job));
	ck_assert_uint_eq(job->assignment_version, 21);
	dml_job_status_free(st);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_thousand_workers_start_quickly)
{
	enum { N = 1000 };
	struct dml_job_candidate *c = calloc(N, sizeof(*c));
	struct dml_job_candidate back = { 500, 3 };
	Dml__JobStatus *st;
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint64_t sum = 0;
	clock_t t0;
	double secs;

	ck_assert_ptr_nonnull(c);
	for (size_t i = 0; i < N; i++) {
		c[i].node_id = (uint32_t)(N - i);   /* reverse order */
		c[i].rate = 1 + (double)(i % 4);
	}
	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	t0 = clock();
	ck_assert_int_eq(dml_jobs_start(job, c, N, 0), 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 500, "no heartbeat for 900 ms", 10), 1);
	ck_assert_int_eq(dml_jobs_worker_available(job, &back, 20), 1);
	st = dml_job_status(job, 30);
	secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
	ck_assert_msg(secs < 2.0, "took %.3f s", secs);
	ck_assert_uint_eq(job->nworkers, N);
	ck_assert_uint_eq(job->num_partitions, 8 * N);
	for (size_t i = 0; i < N; i++)
		sum += job->workers[i].npart;
	ck_assert_uint_eq(sum, 8 * N);
	assert_owners_consistent(job);
	ck_assert_uint_eq(st->n_workers, N);
	ck_assert_uint_le(strlen(st->events[1]), DML_JOB_REASON_MAX);
	ck_assert_msg(strstr(st->events[1], "started on workers 1, 2, 3") == st->events[1] &&
		      strstr(st->events[1], "more"), "%s", st->events[1]);
	dml_job_status_free(st);
	dml_jobs_free(jobs);
	free(c);
}
END_TEST

/* The record through its wire encoding, as the scheduler's store keeps it. */
static Dml__JobRecord *record_round_trip(const struct dml_job *job, uint64_t now)
{
	Dml__JobRecord *r = dml_job_record(job, now), *back;

	back = dml_msg_copy(&r->base);
	ck_assert_ptr_nonnull(back);
	dml_job_record_free(r);
	return back;
}

static void restore_ok(struct dml_jobs *jobs, const Dml__JobRecord *r, uint64_t now)
{
	char err[ERRLEN] = "";

	ck_assert_msg(dml_jobs_restore(jobs, r, now, err, sizeof(err)) == 0, "%s", err);
}

/*
 * A running job (a worker lost, reports in) and a pending one, saved and
 * restored into a new table at another time: the same state, owners,
 * figures and events, and both tables go on alike: a report adds only
 * what is new, a loss moves the same partitions, a new job gets id 3.
 */
/* Job-wide checkpoints: listed once each, the newest keep, deleted,
 * saved with the job, and forgotten when another job starts. */
START_TEST(checkpoints_are_listed_kept_and_restored)
{
	struct dml_jobs *jobs, *back;
	struct dml_job *job, *b;
	struct spec_buf sb;
	Dml__JobRecord *r;
	Dml__JobStatus *st;

	spec_init(&sb);
	sb.s.checkpoint_keep = 2;
	jobs = jobs_with(&sb, 1000, &job);
	ck_assert_uint_eq(dml_job_checkpoint_keep(job), 2);
	dml_jobs_checkpoint_done(job, 100, 10, 3000);
	dml_jobs_checkpoint_done(job, 200, 20, 4000);
	dml_jobs_checkpoint_done(job, 200, 99, 4500);
	ck_assert_str_eq(last_event(job), "checkpoint at clock 200 (0.0 MB)");
	dml_jobs_checkpoint_done(job, 300, 30, 5000);
	ck_assert_uint_eq(job->nckpts, 2);
	ck_assert_uint_eq(job->ckpts[0].clock, 200);
	ck_assert_uint_eq(job->ckpts[0].bytes, 20);
	ck_assert_uint_eq(job->ckpts[1].clock, 300);
	st = dml_job_status(job, 6000);
	ck_assert_uint_eq(st->n_checkpoints, 2);
	ck_assert_uint_eq(st->checkpoints[1]->age_ms, 1000);
	dml_job_status_free(st);

	ck_assert_int_eq(dml_jobs_checkpoint_drop(job, 200), 0);
	ck_assert_str_eq(last_event(job), "checkpoint at clock 200 deleted");
	ck_assert_int_eq(dml_jobs_checkpoint_drop(job, 200), DML_ENOTFOUND);
	ck_assert_uint_eq(job->nckpts, 1);

	r = record_round_trip(job, 7000);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r, 100000);
	b = dml_jobs_find(back, 1);
	ck_assert_uint_eq(b->nckpts, 1);
	ck_assert_uint_eq(b->ckpts[0].clock, 300);
	ck_assert_uint_eq(b->ckpts[0].bytes, 30);
	ck_assert_uint_eq(b->ckpts[0].done_ms, 100000 - 2000);
	dml_jobs_checkpoints_clear(b, 2);
	ck_assert_uint_eq(b->nckpts, 0);
	ck_assert_str_eq(last_event(b), "checkpoints deleted: job 2 started on its servers");
	dml__job_record__free_unpacked(r, NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

/* A report of a worker's examples and compute seconds so far (BSP: the
 * same examples/s for everyone, the pace of the job); expect -1: 0 or 1. */
static void report_compute(struct dml_job *job, uint32_t id, uint64_t clock,
			   uint64_t examples, double compute_s, uint64_t now, int expect)
{
	Dml__Progress p = DML__PROGRESS__INIT;

	p.job = job->id;
	p.clock = clock;
	p.examples = examples;
	p.examples_per_s = 100;
	p.compute_s = compute_s;
	p.loss = NAN;
	if (expect >= 0)
		ck_assert_int_eq(progress_sent(job, id, &p, now), expect);
	else
		ck_assert_int_ge(progress_sent(job, id, &p, now), 0);
}

static uint32_t batch_of(struct dml_job *job, uint32_t id)
{
	struct dml_job_worker *w = dml_job_worker(job, id);
	Dml__Assignment a = DML__ASSIGNMENT__INIT;

	ck_assert_ptr_nonnull(w);
	dml_job_assignment(job, id, &a);
	dml_job_assignment_clear(&a);
	ck_assert_uint_eq(a.batch_size, w->batch);
	return w->batch;
}

/*
 * Three workers computing their batches at the given speeds, a clock a
 * second: each reports its examples and compute seconds so far.
 */
struct lb_sim {
	struct dml_job *job;
	uint64_t now, clock, examples[3];
	double compute[3];
	uint64_t last_move_ms;
};

/* Runs clocks until `moves` reassignments happened or `clocks` ran out;
 * returns the reassignments seen. */
/* The three workers' partition counts and batches. */
static void lb_shares(struct dml_job *job, uint64_t out[6])
{
	for (uint32_t id = 1; id <= 3; id++) {
		out[id - 1] = npart_of(job, id);
		out[id + 2] = batch_of(job, id);
	}
}

static unsigned lb_run(struct lb_sim *m, const double speed[3], unsigned clocks,
		       unsigned moves)
{
	unsigned seen = 0;

	for (unsigned c = 0; c < clocks && seen < moves; c++) {
		m->now += 1000;
		m->clock++;
		for (uint32_t id = 1; id <= 3; id++) {
			uint64_t before[6], after[6];
			uint32_t batch = batch_of(m->job, id);

			lb_shares(m->job, before);
			m->examples[id - 1] += batch;
			m->compute[id - 1] += batch / speed[id - 1];
			report_compute(m->job, id, m->clock, m->examples[id - 1],
				       m->compute[id - 1], m->now, -1);
			lb_shares(m->job, after);
			/* a partition handed on at its walker's letting go is no move */
			if (memcmp(before, after, sizeof(before)) == 0)
				continue;
			seen++;
			m->last_move_ms = m->now;
			assert_owners_consistent(m->job);
		}
	}
	return seen;
}

/*
 * A batch that would move back the way it last moved goes half way (a
 * worker under a CPU quota measures faster on a smaller batch): worker 3
 * went 64 -> 21; when its speed doubles, the move to 39 is halved to 30,
 * and the next move on up, the same way, goes whole.
 */
START_TEST(batch_moving_back_goes_half_way)
{
	static const double slow[3] = { 640, 640, 160 }, faster[3] = { 640, 640, 330 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf sb;
	struct lb_sim m = { 0 };
	uint32_t half;

	spec_init(&sb);
	sb.s.batch_split = DML_BATCH_RATE;
	sb.s.batch_size = 64;
	sb.s.rebalance_threshold = 0.1;
	sb.s.rebalance_hold_ms = 10000;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	m.job = job;
	ck_assert_uint_eq(lb_run(&m, slow, 5, 1), 1);
	ck_assert_uint_eq(batch_of(job, 3), 21);
	ck_assert_uint_eq(lb_run(&m, faster, 60, 1), 1);
	half = batch_of(job, 3);
	ck_assert_msg(half >= 28 && half <= 32, "worker 3's batch %u, not about 30", half);
	ck_assert_uint_eq(batch_of(job, 1) + batch_of(job, 2) + half, 192);
	ck_assert_uint_eq(lb_run(&m, faster, 60, 1), 1);
	ck_assert_msg(batch_of(job, 3) > half + 4 && batch_of(job, 3) <= 40,
		      "worker 3's batch %u after %u", batch_of(job, 3), half);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * LB-BSP: under BSP (batch_split = auto) a worker 4 x slower at computing
 * than two others, all at the same examples/s (the pace of the job), gets a
 * smaller batch and fewer partitions as soon as every worker measured its
 * speed: 192 examples a clock split 86 / 85 / 21, and 27 partitions
 * following the batches 12 / 12 / 3. Then nothing moves while the speeds
 * hold. The split survives a scheduler restart.
 * Asynchronous jobs keep batch_size for everyone.
 */
START_TEST(batch_split_follows_speed)
{
	static const double speed[3] = { 640, 640, 160 };
	struct dml_jobs *jobs, *back;
	struct dml_job *job, *b;
	struct spec_buf sb;
	Dml__JobRecord *r;
	struct lb_sim m = { 0 };
	uint64_t now;

	spec_init(&sb);
	sb.s.batch_split = DML_BATCH_AUTO;
	sb.s.batch_size = 64;
	sb.s.partitions = 27;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	for (uint32_t id = 1; id <= 3; id++)
		ck_assert_uint_eq(batch_of(job, id), 64);
	m.job = job;
	ck_assert_uint_eq(lb_run(&m, speed, 60, 99), 1);
	/* at once when every worker measured its speed, at clock 1 */
	ck_assert_uint_eq(m.last_move_ms, 1000);
	now = m.now;
	ck_assert_double_eq_tol(dml_job_worker(job, 3)->speed, 160, 1e-6);
	ck_assert_uint_eq(batch_of(job, 1), 86);
	ck_assert_uint_eq(batch_of(job, 2), 85);
	ck_assert_uint_eq(batch_of(job, 3), 21);
	ck_assert_uint_eq(npart_of(job, 1), 12);
	ck_assert_uint_eq(npart_of(job, 3), 3);

	r = record_round_trip(job, now);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r, now + 1000);
	b = dml_jobs_find(back, 1);
	for (uint32_t id = 1; id <= 3; id++) {
		ck_assert_uint_eq(batch_of(b, id), batch_of(job, id));
		ck_assert_double_eq(dml_job_worker(b, id)->speed,
				    dml_job_worker(job, id)->speed);
	}
	dml_job_record_free(r);
	dml_jobs_free(back);
	dml_jobs_free(jobs);

	/* Asynchronous: partitions follow examples/s, batches stay equal. */
	sb.s.staleness = -1;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 2, 10, 0);
	report(job, 1, 1, 64, 300, 1000, 0);
	report(job, 2, 1, 64, 100, 1000, 1);
	ck_assert_uint_eq(npart_of(job, 1), 20);
	ck_assert_uint_eq(batch_of(job, 1), 64);
	ck_assert_uint_eq(batch_of(job, 2), 64);
	dml_jobs_free(jobs);
}
END_TEST

/*
 * clock_batch: a clock is that many examples over the live workers whatever
 * their number. Split equally, 96 is 32 each over three workers and 48
 * each once one is lost; split by speed, the total stays 96 too.
 */
START_TEST(clock_batch_holds_whatever_the_workers)
{
	static const double speed[3] = { 640, 640, 160 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf sb;
	struct lb_sim m = { 0 };

	spec_init(&sb);
	sb.s.staleness = 0;
	sb.s.batch_size = 16;
	sb.s.clock_batch = 96;
	sb.s.partitions = 12;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	for (uint32_t id = 1; id <= 3; id++)
		ck_assert_uint_eq(batch_of(job, id), 32);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "gone", 100), 1);
	ck_assert_uint_eq(batch_of(job, 1), 48);
	ck_assert_uint_eq(batch_of(job, 2), 48);
	dml_jobs_free(jobs);

	sb.s.batch_split = DML_BATCH_RATE;
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 10, 0);
	m.job = job;
	ck_assert_uint_ge(lb_run(&m, speed, 60, 99), 1);
	ck_assert_uint_eq(batch_of(job, 1) + batch_of(job, 2) + batch_of(job, 3), 96);
	ck_assert_uint_gt(batch_of(job, 1), 3 * batch_of(job, 3));
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "gone", m.now + 1), 1);
	ck_assert_uint_eq(batch_of(job, 1) + batch_of(job, 2), 96);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(a_saved_job_comes_back_as_it_was)
{
	struct dml_jobs *jobs, *back;
	struct dml_job *job, *pending, *b;
	struct spec_buf sb;
	Dml__JobRecord *r[2];
	char err[ERRLEN];
	uint32_t id;

	spec_init(&sb);
	jobs = jobs_with(&sb, 1000, &job);
	ck_assert_int_eq(dml_jobs_submit(jobs, &sb.s, 1500, &id, err, sizeof(err)), 0);
	pending = dml_jobs_find(jobs, id);
	start_equal(job, 3, 50, 2000);
	report(job, 2, 40, 400, 90, 3000, 0);
	report(job, 3, 41, 420, 30, 3000, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "no heartbeat for 900 ms", 4000), 1);
	r[0] = record_round_trip(job, 5000);
	r[1] = record_round_trip(pending, 5000);
	ck_assert_int_eq(dml_jobs_new(&back), 0);
	restore_ok(back, r[0], 100000);
	restore_ok(back, r[1], 100000);
	ck_assert_uint_eq(dml_jobs_count(back), 2);
	b = dml_jobs_find(back, 1);
	ck_assert_int_eq(b->state, DML__JOB_STATE__RUNNING);
	ck_assert_str_eq(b->reason, job->reason);
	ck_assert_str_eq(b->spec->name, "hand");
	ck_assert_uint_eq(b->assignment_version, job->assignment_version);
	ck_assert_uint_eq(b->num_partitions, job->num_partitions);
	ck_assert_uint_eq(b->nworkers, 3);
	ck_assert_mem_eq(b->owner, job->owner, job->num_partitions * sizeof(*job->owner));
	for (size_t i = 0; i < 3; i++) {
		ck_assert_uint_eq(b->workers[i].node_id, job->workers[i].node_id);
		ck_assert_int_eq(b->workers[i].live, job->workers[i].live);
		ck_assert_uint_eq(b->workers[i].npart, job->workers[i].npart);
		ck_assert_uint_eq(b->workers[i].examples, job->workers[i].examples);
		ck_assert_double_eq(b->workers[i].rate, job->workers[i].rate);
		ck_assert_str_eq(b->workers[i].reason, job->workers[i].reason);
	}
	assert_owners_consistent(b);
	ck_assert_uint_eq(b->nevents, job->nevents);
	ck_assert_str_eq(last_event(b), last_event(job));
	ck_assert_uint_eq(b->run_ms, 3000);
	ck_assert_uint_eq(b->submitted_ms, 100000 - 4000);
	ck_assert_int_eq(dml_jobs_find(back, 2)->state, DML__JOB_STATE__PENDING);
	ck_assert_ptr_null(dml_jobs_find(back, 2)->owner);

	/* Both go on alike. */
	report(job, 2, 80, 900, 90, 6000, 0);
	report(b, 2, 80, 900, 90, 101000, 0);
	ck_assert_uint_eq(b->workers[1].examples, 900);
	ck_assert_uint_eq(b->workers[1].examples, job->workers[1].examples);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 3, "gone", 7000), 1);
	ck_assert_int_eq(dml_jobs_worker_lost(b, 3, "gone", 102000), 1);
	ck_assert_mem_eq(b->owner, job->owner, job->num_partitions * sizeof(*job->owner));
	ck_assert_int_eq(dml_jobs_submit(back, &sb.s, 103000, &id, err, sizeof(err)), 0);
	ck_assert_uint_eq(id, 3);
	dml__job_record__free_unpacked(r[0], NULL);
	dml__job_record__free_unpacked(r[1], NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

/* A record restore cannot trust is refused with what is wrong, and the
 * table stays as it was. */
START_TEST(bad_records_are_refused)
{
	struct dml_jobs *jobs, *back;
	struct dml_job *job;
	struct spec_buf sb;
	Dml__JobRecord *r;
	char err[ERRLEN];
	uint32_t keep;
	size_t keep_n;

	spec_init(&sb);
	jobs = jobs_with(&sb, 0, &job);
	start_equal(job, 3, 50, 0);
	ck_assert_int_eq(dml_jobs_worker_lost(job, 1, "gone", 10), 1);
	r = record_round_trip(job, 100);
	ck_assert_int_eq(dml_jobs_new(&back), 0);

	r->status->id = 2;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "job 2 where job 1 was due"), "%s", err);
	r->status->id = 1;

	keep = r->owner[0];
	r->owner[0] = 1;       /* worker 1 is lost */
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "not a live member"), "%s", err);
	r->owner[0] = keep;

	keep_n = r->n_rate;
	r->n_rate = 2;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "per-worker lists"), "%s", err);
	r->n_rate = keep_n;

	keep_n = r->n_owner;
	r->n_owner = 5;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "partition owners"), "%s", err);
	r->n_owner = keep_n;

	r->status->state = 42;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	r->status->state = DML__JOB_STATE__RUNNING;

	r->status->spec->batch_size = 0;
	ck_assert_int_ne(dml_jobs_restore(back, r, 0, err, sizeof(err)), 0);
	r->status->spec->batch_size = 8;

	r->status->workers[2]->worker = r->status->workers[1]->worker;
	ck_assert_int_eq(dml_jobs_restore(back, r, 0, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "twice"), "%s", err);
	r->status->workers[2]->worker = 3;

	ck_assert_uint_eq(dml_jobs_count(back), 0);
	restore_ok(back, r, 0);
	ck_assert_uint_eq(dml_jobs_count(back), 1);
	dml__job_record__free_unpacked(r, NULL);
	dml_jobs_free(back);
	dml_jobs_free(jobs);
}
END_TEST

START_TEST(bad_arguments_are_refused)
{
	struct dml_job_candidate c = { 1, 1 };
	struct dml_jobs *jobs;
	struct dml_job *job;
	struct spec_buf b;
	uint32_t id;

	ck_assert_int_eq(dml_jobs_new(NULL), DML_EINVAL);
	spec_init(&b);
	jobs = jobs_with(&b, 0, &job);
	ck_assert_int_eq(dml_jobs_submit(jobs, NULL, 0, &id, NULL, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_submit(NULL, &b.s, 0, &id, NULL, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_start(NULL, &c, 1, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_start(job, NULL, 1, 0), DML_EINVAL);
	ck_assert_int_eq(dml_jobs_worker_lost(NULL, 1, "x", 0), 0);
	ck_assert_int_eq(dml_jobs_worker_available(job, NULL, 0), 0);
	ck_assert_ptr_null(dml_job_worker(NULL, 1));
	ck_assert_uint_eq(dml_job_clock(job), 0);
	ck_assert_uint_eq(dml_jobs_count(NULL), 0);
	dml_jobs_fail(NULL, "x", 0);
	dml_jobs_set_reason(NULL, "x", 0);
	dml_jobs_free(NULL);
	dml_jobs_free(jobs);
}
END_TEST

static Suite *jobs_suite(void)
{
	Suite *s = suite_create("jobs");
	TCase *files = tcase_create("files");
	TCase *table = tcase_create("table");

	tcase_add_test(files, full_file_lands_in_the_spec);
	tcase_add_test(files, defaults_fill_what_a_file_leaves_out);
	tcase_add_test(files, bad_files_say_where_and_why);
	tcase_add_test(files, files_load_from_disk);
	tcase_add_test(files, example_lsq_conf_parses);
	tcase_add_test(files, example_mlp_confs_parse);
	tcase_add_loop_test(files, mlp_spec_rules, 0, MLP_BREAKS);
	tcase_add_test(files, example_sparse_lr_conf_parses);
	tcase_add_loop_test(files, sparse_lr_spec_rules, 0, SPARSE_LR_BREAKS);
	tcase_add_test(files, example_mf_conf_parses);
	tcase_add_loop_test(files, spec_check_catches_each_rule, 0, SPEC_BREAKS);
	tcase_add_test(files, spec_check_accepts_edges);
	tcase_add_test(files, too_many_tables_are_refused);
	tcase_add_test(files, copy_is_deep_and_free_takes_null);
	tcase_add_test(files, state_names);
	suite_add_tcase(s, files);

	tcase_add_test(table, submit_makes_a_pending_job);
	tcase_add_test(table, start_waits_for_its_workers);
	tcase_add_test(table, workers_n_takes_the_lowest_ids_and_ids_take_exactly_those);
	tcase_add_test(table, start_splits_partitions_by_rate);
	tcase_add_test(table, a_lost_worker_gives_only_its_partitions);
	tcase_add_test(table, all_lost_leaves_partitions_unowned_until_one_rejoins);
	tcase_add_test(table, a_rejoining_worker_starts_at_the_job_clock);
	tcase_add_test(table, a_moved_partition_goes_on_where_its_walker_stopped);
	tcase_add_test(table, a_partition_waits_its_own_hold);
	tcase_add_test(table, the_link_is_bytes_over_own_communication);
	tcase_add_test(table, a_large_job_looks_at_its_load_at_most_every_50_ms);
	tcase_add_test(table, new_workers_are_recruited_when_the_spec_allows);
	tcase_add_test(table, every_worker_at_max_clocks_is_done);
	tcase_add_test(table, a_lost_straggler_does_not_hold_a_finished_job);
	tcase_add_test(table, workers_that_finished_make_it_done);
	tcase_add_test(table, a_metric_reaching_its_target_is_done);
	tcase_add_test(table, max_epochs_counts_examples_of_all_workers);
	tcase_add_test(table, a_worker_error_fails_the_job);
	tcase_add_test(table, report_numbers_are_clamped_and_rates_smoothed);
	tcase_add_test(table, the_next_reassignment_uses_measured_rates);
	tcase_add_test(table, a_lasting_drift_rebalances);
	tcase_add_test(table, rebalance_off_and_by_operator);
	tcase_add_test(table, a_stalled_worker_is_set_aside_and_tries_again);
	tcase_add_test(table, a_straggler_named_by_a_server_is_set_aside);
	tcase_add_test(table, batch_split_follows_speed);
	tcase_add_test(table, clock_batch_holds_whatever_the_workers);
	tcase_add_test(table, batch_moving_back_goes_half_way);
	tcase_add_test(table, operators_pause_resume_and_stop);
	tcase_add_test(table, one_job_is_active_at_a_time);
	tcase_add_test(table, assignments_list_each_workers_partitions);
	tcase_add_test(table, status_reports_the_whole_job);
	tcase_add_test(table, events_keep_the_newest_in_order);
	tcase_add_test(table, a_thousand_workers_start_quickly);
	tcase_add_test(table, bad_arguments_are_refused);
	tcase_add_test(table, a_saved_job_comes_back_as_it_was);
	tcase_add_test(table, checkpoints_are_listed_kept_and_restored);
	tcase_add_test(table, bad_records_are_refused);
	suite_add_tcase(s, table);
	return s;
}

int main(void)
{
	return dml_check_run(jobs_suite());
}
