/*
 * Job files (see job_spec.h): the option table of a job file and its
 * conversion to a Dml__JobSpec. The file's validators use the rules of
 * job_spec.c, and its cross-field pass is the whole spec check
 * (job_spec_check.c), so a file and a spec from the wire pass one test.
 *
 * Must never: log, exit, or hand out a spec that failed the check.
 */
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conf.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "proto/job_spec_internal.h"
#include "proto/table_spec.h"
#include "proto/util.h"

#define MAX_U32 4294967295.0

/* ---- the file's schema ----------------------------------------------- */

struct job_file_table {
	uint32_t id;
	int kind;                  /* index into dml_table_kind_names */
	uint32_t width;
	uint64_t keys, capacity;
	int init;                  /* index into dml_init_kind_names */
	double init_scale;
	uint64_t seed;
	int optimizer;             /* index into dml_optim_kind_names */
	double lr, weight_decay, momentum, beta1, beta2, epsilon, lr_decay;
	char *codec, *codec_cross_zone, *pull_codec, *pull_codec_cross_zone;
};

struct job_file {
	char *name, *app, *data, *test_data, *metric, *worker_ids, *hidden;
	int64_t staleness;
	uint32_t batch_size;
	uint64_t max_clocks;
	double max_epochs, target;
	uint32_t workers, partitions;
	uint64_t examples, users, items;
	uint32_t dim, eval_every, dead_after_ms;
	double min_rate;
	uint64_t seed;
	uint64_t checkpoint_every;
	uint32_t checkpoint_every_s;
	uint32_t checkpoint_keep;
	int stale_scaling;         /* index into dml_stale_scaling_names */
	int rebalance;             /* index into dml_rebalance_names */
	double rebalance_threshold;
	uint32_t rebalance_hold_ms;
	int batch_split;           /* index into dml_batch_split_names */
	int bsp_step;              /* index into dml_bsp_step_names */
	int allow_nonfinite;
	uint64_t clock_batch;
	struct job_file_table *tables;
	size_t ntables;
};

/* ---- the option table -------------------------------------------------- */

static int validate_name(const void *field, char *why, size_t whylen)
{
	return name_why(*(const char *const *)field, why, whylen);
}

static int validate_app(const void *field, char *why, size_t whylen)
{
	const char *app = *(const char *const *)field;
	char list[64];

	if (dml_job_app_known(app))
		return 0;
	names_join(job_apps, list, sizeof(list));
	return fail(why, whylen, "'%s' is not an app of this build (%s)", app, list);
}

static int validate_metric(const void *field, char *why, size_t whylen)
{
	return metric_why(*(const char *const *)field, why, whylen);
}

static int validate_text(const void *field, char *why, size_t whylen)
{
	return text_why(*(const char *const *)field, JOB_TEXT_MAX, why, whylen);
}

static int validate_hidden(const void *field, char *why, size_t whylen)
{
	return text_why(*(const char *const *)field, JOB_HIDDEN_MAX, why, whylen);
}

static int validate_ids(const void *field, char *why, size_t whylen)
{
	uint32_t *ids;
	size_t n;
	int rc;

	rc = ids_parse(*(const char *const *)field, &ids, &n, why, whylen);
	if (!rc)
		rc = ids_why(ids, n, why, whylen);
	free(ids);
	return rc;
}

static int validate_below_one(const void *field, char *why, size_t whylen)
{
	return below_one_why(*(const double *)field, why, whylen);
}

#define J(field) offsetof(struct job_file, field)
#define T(field) offsetof(struct job_file_table, field)

static const struct dml_conf_section job_sections[] = {
	{ "job", 0, 0, 0, 0, "what to train, on what, and when to stop" },
	{ "table", 1, sizeof(struct job_file_table), offsetof(struct job_file, tables),
	  offsetof(struct job_file, ntables), "one parameter table (repeat the section)" },
};

static const struct dml_conf_option job_options[] = {
	{ "job", "name", DML_CONF_STRING, J(name), NULL, 0, 0, NULL, validate_name,
	  "job name: 1 to 63 letters, digits, '_', '.' and '-'" },
	{ "job", "app", DML_CONF_STRING, J(app), NULL, 0, 0, NULL, validate_app,
	  "training app the workers run (this build: lsq, mlp, sparse_lr, mf)" },
	{ "job", "data", DML_CONF_STRING, J(data), "synthetic", 0, 0, NULL, validate_text,
	  "training data: synthetic, or mlp: IMAGES,LABELS (IDX files), sparse_lr: a "
	  "libsvm file, mf: a file of USER ITEM RATING lines" },
	{ "job", "test_data", DML_CONF_STRING, J(test_data), "", 0, 0, NULL, validate_text,
	  "evaluation data, empty for none (mlp: IMAGES,LABELS; sparse_lr: a libsvm "
	  "file or synthetic; mf: a ratings file or synthetic; lsq: unused)" },
	{ "job", "staleness", DML_CONF_I64, J(staleness), "1", 0, 0, NULL, NULL,
	  "staleness bound s: 0 = BSP, s > 0 = SSP, negative = asynchronous" },
	{ "job", "batch_size", DML_CONF_U32, J(batch_size), "64", 1, MAX_U32, NULL, NULL,
	  "examples per worker per clock" },
	{ "job", "max_clocks", DML_CONF_U64, J(max_clocks), "0", 0, 0, NULL, NULL,
	  "stop once every worker reached this clock (0: no)" },
	{ "job", "max_epochs", DML_CONF_DOUBLE, J(max_epochs), "0", 0, DBL_MAX, NULL, NULL,
	  "stop after this many passes over the data (0: no)" },
	{ "job", "metric", DML_CONF_STRING, J(metric), "", 0, 0, NULL, validate_metric,
	  "evaluation metric: empty, loss or rmse (lower is better), accuracy or auc" },
	{ "job", "target", DML_CONF_DOUBLE, J(target), "0", 0, DBL_MAX, NULL, NULL,
	  "with metric: stop once the metric reaches it (0: no)" },
	{ "job", "workers", DML_CONF_U32, J(workers), "0", 0, MAX_U32, NULL, NULL,
	  "workers to run on: 0 = every alive worker, N = exactly N" },
	{ "job", "worker_ids", DML_CONF_STRING, J(worker_ids), "", 0, 0, NULL, validate_ids,
	  "comma list of the node ids to run on (then workers must be 0)" },
	{ "job", "partitions", DML_CONF_U32, J(partitions), "0", 0, JOB_PARTITIONS_MAX, NULL,
	  NULL, "data partitions spread over the workers (0: 8 per worker)" },
	{ "job", "examples", DML_CONF_U64, J(examples), "10000", 0, 0, NULL, NULL,
	  "synthetic data: number of examples" },
	{ "job", "users", DML_CONF_U64, J(users), "1000", 1, MAX_U32, NULL, NULL,
	  "mf, synthetic data: users (ids 0..users-1)" },
	{ "job", "items", DML_CONF_U64, J(items), "1000", 1, MAX_U32, NULL, NULL,
	  "mf, synthetic data: items (ids 0..items-1)" },
	{ "job", "dim", DML_CONF_U32, J(dim), "64", 0, MAX_U32, NULL, NULL,
	  "input features (lsq, mlp); sparse_lr: hashed feature space (keys 0..dim)" },
	{ "job", "hidden", DML_CONF_STRING, J(hidden), "", 0, 0, NULL, validate_hidden,
	  "mlp: hidden layer sizes, e.g. 512,256 (empty: softmax regression)" },
	{ "job", "eval_every", DML_CONF_U32, J(eval_every), "0", 0, MAX_U32, NULL, NULL,
	  "evaluate every N clocks (0: the app's default)" },
	{ "job", "dead_after_ms", DML_CONF_U32, J(dead_after_ms), "0", 0, MAX_U32, NULL, NULL,
	  "servers drop a silent worker's clock after this (0: server default)" },
	{ "job", "min_rate", DML_CONF_DOUBLE, J(min_rate), "0", 0, DBL_MAX, NULL, NULL,
	  "asynchronous jobs: a worker below this many examples/s, or silent, for "
	  "rebalance_hold_ms is set aside (its partitions to the others) and tries "
	  "again 4 holds later (0: never)" },
	{ "job", "seed", DML_CONF_U64, J(seed), "1", 0, 0, NULL, NULL,
	  "data shuffling and synthetic data" },
	{ "job", "stale_scaling", DML_CONF_ENUM, J(stale_scaling), "off", 0, 0,
	  dml_stale_scaling_names, NULL,
	  "inverse: a push tau clocks behind the newest worker's is applied times "
	  "1 / (1 + tau) (DynSGD); off: as it is" },
	{ "job", "rebalance", DML_CONF_ENUM, J(rebalance), "auto", 0, 0, dml_rebalance_names,
	  NULL, "auto: split the partitions anew by the workers' measured rates when the "
	  "load drifts (below); off: only when workers come or go, or by dmlctl "
	  "rebalance" },
	{ "job", "rebalance_threshold", DML_CONF_DOUBLE, J(rebalance_threshold), "0.25", 0.01,
	  100, NULL, NULL, "load deviation (0.25: some worker holds 25% more or less "
	  "than its rate calls for) that counts as drift" },
	{ "job", "rebalance_hold_ms", DML_CONF_U32, J(rebalance_hold_ms), "5000", 1, MAX_U32,
	  NULL, NULL, "how long a drift must last before the partitions move" },
	{ "job", "batch_split", DML_CONF_ENUM, J(batch_split), "auto", 0, 0,
	  dml_batch_split_names, NULL, "rate: each clock's batch_size x workers examples "
	  "split by the workers' measured speeds, so a slow worker takes a smaller batch "
	  "(LB-BSP); equal: batch_size each; auto: rate under BSP and SSP, equal when "
	  "asynchronous" },
	{ "job", "clock_batch", DML_CONF_U64, J(clock_batch), "0", 0, JOB_CLOCK_BATCH_MAX, NULL,
	  NULL, "examples of one clock over all live workers, split as batch_split says "
	  "(at most 4 x batch_size a worker), so that the job's arithmetic does not "
	  "change with the number of workers; pushes still weigh batch / batch_size "
	  "(0: batch_size a worker)" },
	{ "job", "bsp_step", DML_CONF_ENUM, J(bsp_step), "clock", 0, 0, dml_bsp_step_names,
	  NULL, "under BSP (staleness 0): clock: the servers sum a clock's pushes to a "
	  "dense table and apply them as one optimizer step once every worker ended the "
	  "clock; push: each push is a step of its own as it arrives" },
	{ "job", "allow_nonfinite", DML_CONF_BOOL, J(allow_nonfinite), "false", 0, 0, NULL,
	  NULL, "the servers apply pushes holding NaN or infinite values (false: they refuse "
	  "them with an error naming the table)" },
	{ "job", "checkpoint_every", DML_CONF_U64, J(checkpoint_every), "0", 0, 0, NULL, NULL,
	  "a job-wide checkpoint every N clocks (0: only on `dmlctl checkpoint`)" },
	{ "job", "checkpoint_every_s", DML_CONF_U32, J(checkpoint_every_s), "0", 0, 604800, NULL,
	  NULL, "a job-wide checkpoint every N seconds (0: none)" },
	{ "job", "checkpoint_keep", DML_CONF_U32, J(checkpoint_keep), "3", 1, 1000, NULL, NULL,
	  "job-wide checkpoints kept, the newest" },

	{ "table", "id", DML_CONF_U32, T(id), NULL, 0, MAX_U32, NULL, NULL, "table id" },
	{ "table", "kind", DML_CONF_ENUM, T(kind), "dense", 0, 0, dml_table_kind_names, NULL,
	  "dense (keys 0..keys-1) or sparse (any uint64 key)" },
	{ "table", "width", DML_CONF_U32, T(width), "1", 1, JOB_WIDTH_MAX, NULL, NULL,
	  "floats per key" },
	{ "table", "keys", DML_CONF_U64, T(keys), "0", 0, JOB_KEYS_MAX, NULL, NULL,
	  "dense: keys in the whole table (required); sparse: 0" },
	{ "table", "capacity", DML_CONF_U64, T(capacity), "0", 0, JOB_CAPACITY_MAX, NULL, NULL,
	  "sparse: expected rows over all servers" },
	{ "table", "init", DML_CONF_ENUM, T(init), "zeros", 0, 0, dml_init_kind_names, NULL,
	  "initial values: zeros, uniform [-s, s] or normal(0, s)" },
	{ "table", "init_scale", DML_CONF_DOUBLE, T(init_scale), "0.01", 0, FLT_MAX, NULL,
	  NULL, "s of the initializer" },
	{ "table", "seed", DML_CONF_U64, T(seed), "1", 0, 0, NULL, NULL,
	  "initializer seed; values depend only on (seed, key)" },
	{ "table", "optimizer", DML_CONF_ENUM, T(optimizer), "sgd", 0, 0, dml_optim_kind_names,
	  NULL, "server-side optimizer applied to pushed gradients" },
	{ "table", "lr", DML_CONF_DOUBLE, T(lr), "0.01", 0, FLT_MAX, NULL, NULL,
	  "learning rate (> 0 except for add)" },
	{ "table", "weight_decay", DML_CONF_DOUBLE, T(weight_decay), "0", 0, FLT_MAX, NULL,
	  NULL, "L2 penalty added to the gradient" },
	{ "table", "momentum", DML_CONF_DOUBLE, T(momentum), "0.9", 0, 0, NULL,
	  validate_below_one, "momentum coefficient, in [0, 1)" },
	{ "table", "beta1", DML_CONF_DOUBLE, T(beta1), "0.9", 0, 0, NULL, validate_below_one,
	  "adam first-moment decay, in [0, 1)" },
	{ "table", "beta2", DML_CONF_DOUBLE, T(beta2), "0.999", 0, 0, NULL, validate_below_one,
	  "adam second-moment decay, in [0, 1)" },
	{ "table", "lr_decay", DML_CONF_DOUBLE, T(lr_decay), "0", 0, FLT_MAX, NULL, NULL,
	  "inverse-time decay: a row's t-th update uses lr / (1 + lr_decay (t - 1))" },
	{ "table", "epsilon", DML_CONF_DOUBLE, T(epsilon), "1e-8", 0, FLT_MAX, NULL, NULL,
	  "adagrad/adam denominator guard (> 0 for those)" },
	{ "table", "codec", DML_CONF_STRING, T(codec), "none", 0, 0, NULL,
	  dml_conf_check_codec, "how pushes travel from a worker to a server of its own "
	  "zone: none, fp16, bf16, int8, topk:FRACTION or topk16:FRACTION (the lossy ones "
	  "with error feedback)" },
	{ "table", "codec_cross_zone", DML_CONF_STRING, T(codec_cross_zone), "fp16", 0, 0, NULL,
	  dml_conf_check_codec, "how pushes travel to a server of another zone (as codec)" },
	{ "table", "pull_codec", DML_CONF_STRING, T(pull_codec), "none", 0, 0, NULL,
	  dml_conf_check_pull_codec, "how pull replies travel from a server of the worker's "
	  "own zone: none, fp16, bf16 or int8" },
	{ "table", "pull_codec_cross_zone", DML_CONF_STRING, T(pull_codec_cross_zone), "fp16",
	  0, 0, NULL, dml_conf_check_codec, "how pull replies travel from a server of "
	  "another zone (as pull_codec; or topk:FRACTION, topk16:FRACTION: a zone "
	  "aggregator's delta pulls, fp16 for a worker pulling straight)" },
};

/* ---- file to spec ------------------------------------------------------ */

/* A spec that borrows the file's strings; arrays are its own. */
struct job_view {
	Dml__JobSpec spec;
	Dml__TableSpec *tables;
	Dml__TableSpec **table_ptrs;
	uint32_t *ids;
};

static void job_view_release(struct job_view *v)
{
	free(v->tables);
	free(v->table_ptrs);
	free(v->ids);
}

static void job_view_table(const struct job_file_table *ft, Dml__TableSpec *t)
{
	dml__table_spec__init(t);
	t->id = ft->id;
	t->dense = ft->kind == DML_TABLE_DENSE;
	t->width = ft->width;
	t->keys = ft->keys;
	t->capacity = ft->capacity;
	t->init = (char *)dml_init_kind_names[ft->init];
	t->init_scale = ft->init_scale;
	t->seed = ft->seed;
	t->optimizer = (char *)dml_optim_kind_names[ft->optimizer];
	t->lr = ft->lr;
	t->weight_decay = ft->weight_decay;
	t->momentum = ft->momentum;
	t->beta1 = ft->beta1;
	t->beta2 = ft->beta2;
	t->epsilon = ft->epsilon;
	t->lr_decay = ft->lr_decay;
	t->codec = ft->codec;
	t->codec_cross_zone = ft->codec_cross_zone;
	t->pull_codec = ft->pull_codec;
	t->pull_codec_cross_zone = ft->pull_codec_cross_zone;
}

/* Fills v from a parsed file; release it with job_view_release() either way. */
static int job_view_build(const struct job_file *f, struct job_view *v, char *why,
			  size_t whylen)
{
	Dml__JobSpec *s = &v->spec;
	size_t nids;
	int rc;

	memset(v, 0, sizeof(*v));
	dml__job_spec__init(s);
	rc = ids_parse(str_or_empty(f->worker_ids), &v->ids, &nids, why, whylen);
	if (rc)
		return rc;
	s->name = f->name;
	s->app = f->app;
	s->data = f->data;
	s->test_data = f->test_data;
	s->staleness = f->staleness;
	s->batch_size = f->batch_size;
	s->max_clocks = f->max_clocks;
	s->max_epochs = f->max_epochs;
	s->target = f->target;
	s->metric = f->metric;
	s->workers = f->workers;
	s->n_worker_ids = nids;
	s->worker_ids = v->ids;
	s->partitions = f->partitions;
	s->examples = f->examples;
	s->users = f->users;
	s->items = f->items;
	s->checkpoint_every = f->checkpoint_every;
	s->checkpoint_every_s = f->checkpoint_every_s;
	s->checkpoint_keep = f->checkpoint_keep;
	s->dim = f->dim;
	s->hidden = f->hidden;
	s->eval_every = f->eval_every;
	s->dead_after_ms = f->dead_after_ms;
	s->min_rate = f->min_rate;
	s->seed = f->seed;
	s->stale_scaling = (uint32_t)f->stale_scaling;
	s->rebalance = (uint32_t)f->rebalance;
	s->rebalance_threshold = f->rebalance_threshold;
	s->rebalance_hold_ms = f->rebalance_hold_ms;
	s->batch_split = (uint32_t)f->batch_split;
	s->bsp_step = (uint32_t)f->bsp_step;
	s->allow_nonfinite = f->allow_nonfinite != 0;
	s->clock_batch = f->clock_batch;
	if (f->ntables) {
		v->tables = dml_xcalloc(f->ntables, sizeof(*v->tables));
		v->table_ptrs = dml_xcalloc(f->ntables, sizeof(*v->table_ptrs));
		for (size_t i = 0; i < f->ntables; i++) {
			job_view_table(&f->tables[i], &v->tables[i]);
			v->table_ptrs[i] = &v->tables[i];
		}
	}
	s->n_tables = f->ntables;
	s->tables = v->table_ptrs;
	return 0;
}

/* The schema's cross-field pass: the whole spec check on the file's view. */
static int job_file_check(void *root, char *err, size_t errlen)
{
	struct job_view v;
	int rc;

	rc = job_view_build(root, &v, err, errlen);
	if (!rc)
		rc = dml_job_spec_check(&v.spec, err, errlen);
	job_view_release(&v);
	return rc ? DML_ECONF : 0;
}

const struct dml_conf_schema dml_job_conf_schema = {
	"job file", job_sections, DML_ARRAY_LEN(job_sections), job_options,
	DML_ARRAY_LEN(job_options), job_file_check
};

/* After a parse (text or file) that returned rc: the spec, or the error. */
static int job_file_finish(int rc, struct job_file *f, const char *name,
			   Dml__JobSpec **out, char *err, size_t errlen)
{
	struct job_view v;

	if (!rc) {
		rc = job_view_build(f, &v, err, errlen);
		if (!rc)
			*out = dml_job_spec_copy(&v.spec);
		else
			snprintf(err, errlen, "%s: bad worker_ids", name);
		job_view_release(&v);
		if (rc)
			rc = DML_ECONF;
	}
	dml_conf_free(&dml_job_conf_schema, f);
	return rc;
}

int dml_job_file_load(const char *path, Dml__JobSpec **out, char *err, size_t errlen)
{
	struct job_file f = { 0 };

	if (!out)
		return DML_EINVAL;
	*out = NULL;
	if (!path)
		return fail(err, errlen, "no job file");
	return job_file_finish(dml_conf_load(&dml_job_conf_schema, path, &f, err, errlen),
			       &f, path ? path : "(job)", out, err, errlen);
}

int dml_job_file_parse_string(const char *name, const char *text, Dml__JobSpec **out,
			      char *err, size_t errlen)
{
	struct job_file f = { 0 };

	if (!out)
		return DML_EINVAL;
	*out = NULL;
	return job_file_finish(dml_conf_parse_string(&dml_job_conf_schema, name, text, &f,
						     err, errlen),
			       &f, name ? name : "(job)", out, err, errlen);
}
