/*
 * Job files and job specs (see job_conf.h): the option table of a job file,
 * its conversion to a Dml__JobSpec, and the one check every spec passes,
 * whether it comes from a file, from dmlctl over the wire or from a test.
 *
 * Per-field rules live in small "why" functions shared by the option
 * table's validators (so a file gets "file:line: key: reason") and by
 * dml_job_spec_check (so a spec from the wire gets the same reason, with
 * the key and the table named). Numeric bounds are constants shared by both
 * for the same reason. Table kinds, initializers and optimizers are the
 * names of server/table.h, so a job cannot name one the servers lack; the
 * optimizer rules mirror what the servers' dml_optim_validate() refuses,
 * checked here on the float values the servers will hold.
 *
 * Must never: log, exit, or accept a spec that a server or worker would
 * refuse later; every string of a spec is bounded printable ASCII before it
 * can reach a log line or a table.
 */
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dml_error.h"
#include "frame.h"
#include "job_conf.h"
#include "table.h"
#include "util.h"

#define JOB_WIDTH_MAX 65536u           /* floats per key: the servers' limit */
#define JOB_KEYS_MAX 1000000000000000.0 /* dense keys: dml-server's [table] bound */
#define JOB_CAPACITY_MAX 1000000000000.0
#define JOB_PARTITIONS_MAX 1048576u    /* the scheduler keeps an owner per partition */
#define JOB_CLOCK_BATCH_MAX 4294967295ull /* what Assignment.batch_size can carry */
#define JOB_WORKER_IDS_MAX 65536u
#define JOB_TEXT_MAX 4095u             /* data, test_data: paths */
#define JOB_HIDDEN_MAX 255u
#define MAX_U32 4294967295.0

const char *const dml_rebalance_names[] = { "auto", "off", NULL };
const char *const dml_batch_split_names[] = { "auto", "equal", "rate", NULL };
/* What dml-worker's apps can hold in one batch: 1 GiB of floats. */
#define APP_BATCH_FLOATS_MAX (UINT64_C(1) << 28)
/* mlp: the widest layer, so that a weight row (inputs + bias) fits a key. */
#define MLP_UNITS_MAX 65535u

/* The apps that dml-worker of this build runs. */
static const char *const job_apps[] = { "lsq", "mlp", "sparse_lr", "mf", NULL };
static const char *const job_metrics[] = { "loss", "accuracy", "auc", "rmse", NULL };
/* The metrics a job wants as small as possible (targets are upper bounds). */
static const char *const job_metrics_lower[] = { "loss", "rmse", NULL };

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

/* ---- rules shared by the file's validators and the spec check -------- */

/* Writes the reason into err; returns DML_EINVAL. */
#define fail(err, errlen, ...) dml_fail(DML_EINVAL, err, errlen, __VA_ARGS__)

/* protobuf-c leaves unset strings as "", a hand-built message may hold NULL. */
static const char *str_or_empty(const char *s)
{
	return s ? s : "";
}

static int is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

static int name_why(const char *name, char *why, size_t whylen)
{
	size_t n = strlen(name);

	if (n == 0)
		return fail(why, whylen, "is empty");
	if (n > DML_JOB_NAME_MAX)
		return fail(why, whylen, "is %zu characters long, at most %d allowed", n,
			       DML_JOB_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		if (!is_name_char(name[i]))
			return fail(why, whylen, "'%s': only letters, digits, '_', '.' "
				       "and '-' are allowed", name);
	}
	return 0;
}

/* Bounded printable ASCII: these strings reach log lines and dmlctl tables. */
static int text_why(const char *s, size_t max, char *why, size_t whylen)
{
	size_t n = strlen(s);

	if (n > max)
		return fail(why, whylen, "is %zu bytes long, at most %zu allowed", n, max);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c > 0x7e)
			return fail(why, whylen, "holds a byte 0x%02x that is not "
				       "printable ASCII", c);
	}
	return 0;
}

static int name_in(const char *s, const char *const *names)
{
	for (size_t i = 0; names[i]; i++) {
		if (strcmp(s, names[i]) == 0)
			return 1;
	}
	return 0;
}

/* "a, b, c" into buf. */
static void names_join(const char *const *names, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; names[i] && n < len; i++) {
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", names[i]);

		if (w < 0)
			break;
		n += (size_t)w;
	}
}

static int metric_why(const char *m, char *why, size_t whylen)
{
	char list[64];

	if (!*m || name_in(m, job_metrics))
		return 0;
	names_join(job_metrics, list, sizeof(list));
	return fail(why, whylen, "'%s' is not one of %s (or empty)", m, list);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Node ids: none 0, none twice (checked on a sorted copy: the list may be
 * long when it comes over the wire). */
static int ids_why(const uint32_t *ids, size_t n, char *why, size_t whylen)
{
	uint32_t *s;
	int rc = 0;

	if (n > JOB_WORKER_IDS_MAX)
		return fail(why, whylen, "%zu ids, at most %u allowed", n,
			       JOB_WORKER_IDS_MAX);
	if (n == 0)
		return 0;
	s = dml_xmalloc(n * sizeof(*s));
	memcpy(s, ids, n * sizeof(*s));
	qsort(s, n, sizeof(*s), u32_cmp);
	if (s[0] == 0)
		rc = fail(why, whylen, "0 is not a node id");
	for (size_t i = 1; !rc && i < n; i++) {
		if (s[i] == s[i - 1])
			rc = fail(why, whylen, "%" PRIu32 " appears twice", s[i]);
	}
	free(s);
	return rc;
}

/*
 * "3, 7,12" into a new array of ids (*ids NULL for an empty list). Empty
 * items and anything but decimal u32 are refused; the ids themselves are
 * checked by ids_why().
 */
static int ids_parse(const char *text, uint32_t **ids, size_t *n, char *why,
		     size_t whylen)
{
	size_t cap = 1, k = 0;
	const char *p = text;
	uint32_t *v;

	*ids = NULL;
	*n = 0;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return 0;
	for (const char *c = text; *c; c++)
		cap += *c == ',';
	if (cap > JOB_WORKER_IDS_MAX)
		return fail(why, whylen, "%zu ids, at most %u allowed", cap,
			       JOB_WORKER_IDS_MAX);
	v = dml_xmalloc(cap * sizeof(*v));
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char item[32];
		uint64_t id;

		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 0 || len >= sizeof(item)) {
			free(v);
			return fail(why, whylen, "'%s' is not a comma list of node ids",
				       text);
		}
		memcpy(item, p, len);
		item[len] = '\0';
		if (dml_parse_u64(item, 0, UINT32_MAX, &id)) {
			free(v);
			return fail(why, whylen, "'%s' is not a node id", item);
		}
		v[k++] = (uint32_t)id;
		if (!end)
			break;
		p = end + 1;
	}
	*ids = v;
	*n = k;
	return 0;
}

/* In [0, 1): momentum and the adam decay rates. */
static int below_one_why(double v, char *why, size_t whylen)
{
	if (v >= 0 && v < 1)
		return 0;
	return fail(why, whylen, "%g is not in [0, 1)", v);
}

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

/* ---- the spec check ---------------------------------------------------- */

/* Finite, >= 0 and representable as the float a server will hold. */
static int float_ok(double v)
{
	return isfinite(v) && v >= 0 && v <= FLT_MAX;
}

/* > 0 once converted to float: what dml_optim_validate() asks. */
static int float_positive(double v)
{
	return float_ok(v) && (float)v > 0.0f;
}

static int check_table_optim(const Dml__TableSpec *t, char *err, size_t errlen)
{
	const char *opt = str_or_empty(t->optimizer);
	const struct {
		const char *key;
		double v;
		int below_one;     /* a decay rate: must stay under 1 */
	} nums[] = {
		{ "init_scale", t->init_scale, 0 }, { "lr", t->lr, 0 },
		{ "weight_decay", t->weight_decay, 0 }, { "momentum", t->momentum, 1 },
		{ "beta1", t->beta1, 1 }, { "beta2", t->beta2, 1 },
		{ "epsilon", t->epsilon, 0 }, { "lr_decay", t->lr_decay, 0 },
	};
	char why[128];

	for (size_t i = 0; i < DML_ARRAY_LEN(nums); i++) {
		if (!float_ok(nums[i].v))
			return fail(err, errlen, "table %" PRIu32 ": %s %g must be finite, "
				    ">= 0 and at most %g", t->id, nums[i].key, nums[i].v,
				    (double)FLT_MAX);
		if (nums[i].below_one && below_one_why(nums[i].v, why, sizeof(why)))
			return fail(err, errlen, "table %" PRIu32 ": %s %s", t->id,
				    nums[i].key, why);
	}
	if (strcmp(opt, "add") != 0 && !float_positive(t->lr))
		return fail(err, errlen, "table %" PRIu32 ": lr %g must be > 0 with "
			    "optimizer %s", t->id, t->lr, opt);
	if ((strcmp(opt, "adagrad") == 0 || strcmp(opt, "adam") == 0) &&
	    !float_positive(t->epsilon))
		return fail(err, errlen, "table %" PRIu32 ": epsilon %g must be > 0 with "
			    "optimizer %s", t->id, t->epsilon, opt);
	return 0;
}

static int check_table(const Dml__TableSpec *t, char *err, size_t errlen)
{
	char list[96];

	if (t->width < 1 || t->width > JOB_WIDTH_MAX)
		return fail(err, errlen, "table %" PRIu32 ": width %" PRIu32 " out of range "
			    "1..%u", t->id, t->width, JOB_WIDTH_MAX);
	if (t->dense && t->keys < 1)
		return fail(err, errlen, "table %" PRIu32 ": a dense table needs keys >= 1",
			    t->id);
	if (t->dense && (double)t->keys > JOB_KEYS_MAX)
		return fail(err, errlen, "table %" PRIu32 ": keys %" PRIu64 " out of range "
			    "1..%.0f", t->id, t->keys, JOB_KEYS_MAX);
	if (!t->dense && t->keys != 0)
		return fail(err, errlen, "table %" PRIu32 ": a sparse table has no key count "
			    "(keys %" PRIu64 ", must be 0)", t->id, t->keys);
	if ((double)t->capacity > JOB_CAPACITY_MAX)
		return fail(err, errlen, "table %" PRIu32 ": capacity %" PRIu64 " out of "
			    "range 0..%.0f", t->id, t->capacity, JOB_CAPACITY_MAX);
	if (!name_in(str_or_empty(t->init), dml_init_kind_names)) {
		names_join(dml_init_kind_names, list, sizeof(list));
		return fail(err, errlen, "table %" PRIu32 ": init '%s' is not one of %s",
			    t->id, str_or_empty(t->init), list);
	}
	if (!name_in(str_or_empty(t->optimizer), dml_optim_kind_names)) {
		names_join(dml_optim_kind_names, list, sizeof(list));
		return fail(err, errlen, "table %" PRIu32 ": optimizer '%s' is not one of %s",
			    t->id, str_or_empty(t->optimizer), list);
	}
	return check_table_optim(t, err, errlen);
}

static int check_tables(const Dml__JobSpec *s, char *err, size_t errlen)
{
	int rc;

	if (s->n_tables == 0)
		return fail(err, errlen, "no [table]: a job needs at least one table");
	if (s->n_tables > DML_JOB_TABLES_MAX)
		return fail(err, errlen, "%zu tables, at most %d allowed", s->n_tables,
			    DML_JOB_TABLES_MAX);
	for (size_t i = 0; i < s->n_tables; i++) {
		if (!s->tables || !s->tables[i])
			return fail(err, errlen, "table #%zu is missing", i + 1);
		for (size_t j = 0; j < i; j++) {
			if (s->tables[j]->id == s->tables[i]->id)
				return fail(err, errlen, "table %" PRIu32 " appears twice",
					    s->tables[i]->id);
		}
		rc = check_table(s->tables[i], err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

static const Dml__TableSpec *table_find(const Dml__JobSpec *s, uint32_t id)
{
	for (size_t i = 0; i < s->n_tables; i++) {
		if (s->tables[i]->id == id)
			return s->tables[i];
	}
	return NULL;
}

/*
 * A batch of the largest size a worker may be given, times width floats
 * per example, must fit what an app's batch may hold. app and what name
 * them in the message ("lsq", "dim").
 */
static int batch_fits(const Dml__JobSpec *s, const char *app, const char *what,
		      uint32_t width, char *err, size_t errlen)
{
	uint64_t most = dml_job_batch_max(s);
	char by_rate[160] = "";

	if (most > s->batch_size)
		snprintf(by_rate, sizeof(by_rate), " (x %d: the largest batch one worker is "
			 "given when batches follow rates or clock_batch is set; otherwise "
			 "batch_size)",
			 DML_BATCH_CAP_FACTOR);
	if (most > INT_MAX)
		return fail(err, errlen, "app %s: batch_size %" PRIu32 " out of range 1..%d%s",
			    app, s->batch_size, INT_MAX, by_rate);
	if (most * width > APP_BATCH_FLOATS_MAX)
		return fail(err, errlen, "app %s: batch_size %" PRIu32 " x %s %" PRIu32 " is "
			    "more than %" PRIu64 " floats a batch may hold%s", app,
			    s->batch_size, what, width, APP_BATCH_FLOATS_MAX, by_rate);
	return 0;
}

int dml_job_batch_by_rate(const Dml__JobSpec *s)
{
	if (s->batch_split == DML_BATCH_AUTO)
		return s->staleness >= 0;
	return s->batch_split == DML_BATCH_RATE;
}

uint64_t dml_job_batch_max(const Dml__JobSpec *s)
{
	int varies = dml_job_batch_by_rate(s) || s->clock_batch;

	return (uint64_t)s->batch_size * (varies ? DML_BATCH_CAP_FACTOR : 1);
}

uint64_t dml_job_clock_batch(const Dml__JobSpec *s, uint64_t nlive)
{
	uint64_t total = s->clock_batch ? s->clock_batch : (uint64_t)s->batch_size * nlive;

	/* every live worker takes at least one example */
	return total < nlive ? nlive : total;
}

/* What the lsq app of dml-worker needs (the rules of its own check in
 * worker/app_lsq.c): synthetic data, the loss metric, batches it can hold,
 * and w of dim features in dense table 0. */
static int check_app_lsq(const Dml__JobSpec *s, char *err, size_t errlen)
{
	const Dml__TableSpec *t = table_find(s, 0);

	if (strcmp(str_or_empty(s->data), "synthetic") != 0)
		return fail(err, errlen, "app lsq: data '%s' is not supported (only "
			    "synthetic)", str_or_empty(s->data));
	if (*str_or_empty(s->metric) && strcmp(s->metric, "loss") != 0)
		return fail(err, errlen, "app lsq: metric '%s' is not one it computes (loss)",
			    s->metric);
	if (s->dim < 1 || s->dim > INT_MAX)
		return fail(err, errlen, "app lsq: dim %" PRIu32 " out of range 1..%d", s->dim,
			    INT_MAX);
	if (batch_fits(s, "lsq", "dim", s->dim, err, errlen))
		return DML_EINVAL;
	if (s->examples < 1)
		return fail(err, errlen, "app lsq: synthetic data needs examples >= 1");
	if (!t || !t->dense || t->keys != s->dim || t->width != 1)
		return fail(err, errlen, "app lsq: needs table 0 dense with keys = dim "
			    "(%" PRIu32 ") and width 1", s->dim);
	return 0;
}

int dml_job_data_pair(const char *text, char *images, char *labels, size_t len, char *why,
		      size_t whylen)
{
	const char *comma = text ? strchr(text, ',') : NULL;
	const char *parts[2][2];

	if (!comma || strchr(comma + 1, ','))
		return fail(why, whylen, "'%s' is not IMAGES,LABELS (two IDX files, one "
			    "comma) or synthetic", text ? text : "");
	parts[0][0] = text;
	parts[0][1] = comma;
	parts[1][0] = comma + 1;
	parts[1][1] = comma + 1 + strlen(comma + 1);
	for (int i = 0; i < 2; i++) {
		const char *b = parts[i][0], *e = parts[i][1];
		char *out = i ? labels : images;

		while (b < e && (*b == ' ' || *b == '\t'))
			b++;
		while (e > b && (e[-1] == ' ' || e[-1] == '\t'))
			e--;
		if (b == e)
			return fail(why, whylen, "'%s': the %s file is missing", text,
				    i ? "labels" : "images");
		if ((size_t)(e - b) >= len)
			return fail(why, whylen, "'%s': a path is too long", text);
		memcpy(out, b, (size_t)(e - b));
		out[e - b] = '\0';
	}
	return 0;
}

/* Data an mlp reads: synthetic or an IDX pair ("" too, for test_data). */
static int mlp_data_why(const char *text, int may_be_empty, char *why, size_t whylen)
{
	char a[JOB_TEXT_MAX + 1], b[JOB_TEXT_MAX + 1];

	if ((may_be_empty && !*text) || strcmp(text, "synthetic") == 0)
		return 0;
	return dml_job_data_pair(text, a, b, sizeof(a), why, whylen);
}

int dml_job_mlp_layers(const Dml__JobSpec *s, uint32_t *sizes, size_t *n, char *err,
		       size_t errlen)
{
	const char *p = str_or_empty(s->hidden);
	const Dml__TableSpec *last;
	size_t k = 0;

	*n = 0;
	if (s->dim < 1 || s->dim > MLP_UNITS_MAX)
		return fail(err, errlen, "app mlp: dim %" PRIu32 " out of range 1..%u", s->dim,
			    MLP_UNITS_MAX);
	sizes[k++] = s->dim;
	while (*p == ' ')
		p++;
	while (*p) {
		char *end;
		unsigned long v;

		if (k > DML_MLP_HIDDEN_MAX)
			return fail(err, errlen, "app mlp: hidden '%s': more than %d layers",
				    s->hidden, DML_MLP_HIDDEN_MAX);
		if (*p < '0' || *p > '9')
			return fail(err, errlen, "app mlp: hidden '%s' is not a comma list of "
				    "layer sizes", s->hidden);
		v = strtoul(p, &end, 10);
		if (v < 1 || v > MLP_UNITS_MAX)
			return fail(err, errlen, "app mlp: hidden '%s': a layer of %lu units, "
				    "not in 1..%u", s->hidden, v, MLP_UNITS_MAX);
		sizes[k++] = (uint32_t)v;
		p = end;
		while (*p == ' ')
			p++;
		if (*p == ',') {
			p++;
			while (*p == ' ')
				p++;
			if (!*p)
				return fail(err, errlen, "app mlp: hidden '%s' ends with a "
					    "comma", s->hidden);
		} else if (*p) {
			return fail(err, errlen, "app mlp: hidden '%s' is not a comma list of "
				    "layer sizes", s->hidden);
		}
	}
	last = table_find(s, (uint32_t)(k - 1));
	if (!last || !last->dense || last->keys < 2 || last->keys > MLP_UNITS_MAX)
		return fail(err, errlen, "app mlp: table %zu (the output layer) must be "
			    "dense with keys = classes, 2..%u", k - 1, MLP_UNITS_MAX);
	sizes[k++] = (uint32_t)last->keys;
	*n = k;
	return 0;
}

/*
 * What the mlp app of dml-worker needs: IDX pairs or synthetic data, a
 * metric it computes, and table l holding layer l as keys = its units and
 * width = its inputs + 1 (weights, then the bias).
 */
static int check_app_mlp(const Dml__JobSpec *s, char *err, size_t errlen)
{
	uint32_t sizes[DML_MLP_HIDDEN_MAX + 2], widest = 0;
	const char *m = str_or_empty(s->metric);
	char why[160];
	size_t n;
	int rc;

	if (mlp_data_why(str_or_empty(s->data), 0, why, sizeof(why)))
		return fail(err, errlen, "app mlp: data %s", why);
	if (mlp_data_why(str_or_empty(s->test_data), 1, why, sizeof(why)))
		return fail(err, errlen, "app mlp: test_data %s", why);
	if (*m && strcmp(m, "accuracy") != 0 && strcmp(m, "loss") != 0)
		return fail(err, errlen, "app mlp: metric '%s' is not one it computes "
			    "(accuracy, loss)", m);
	if (strcmp(str_or_empty(s->data), "synthetic") == 0 && s->examples < 1)
		return fail(err, errlen, "app mlp: synthetic data needs examples >= 1");
	if ((rc = dml_job_mlp_layers(s, sizes, &n, err, errlen)) != 0)
		return rc;
	if (s->n_tables != n - 1)
		return fail(err, errlen, "app mlp: %zu layer%s need%s %zu table%s (ids 0..%zu), "
			    "the job has %zu", n - 1, n > 2 ? "s" : "", n > 2 ? "" : "s", n - 1,
			    n > 2 ? "s" : "", n - 2, s->n_tables);
	for (size_t l = 0; l + 1 < n; l++) {
		const Dml__TableSpec *t = table_find(s, (uint32_t)l);

		if (!t || !t->dense || t->keys != sizes[l + 1] || t->width != sizes[l] + 1)
			return fail(err, errlen, "app mlp: table %zu (layer %zu) must be dense "
				    "with keys = %" PRIu32 " (its units) and width = %" PRIu32
				    " (its %" PRIu32 " inputs + 1 for the bias)", l, l + 1,
				    sizes[l + 1], sizes[l] + 1, sizes[l]);
		widest = sizes[l + 1] > widest ? sizes[l + 1] : widest;
		widest = sizes[l] > widest ? sizes[l] : widest;
	}
	return batch_fits(s, "mlp", "the widest layer", widest, err, errlen);
}

/*
 * What the sparse_lr app of dml-worker needs: a libsvm file or synthetic
 * data, a metric it computes, and one sparse table 0 of width 1 (binary
 * logistic regression) or width = classes (a logistic unit per class, one
 * against the rest) holding hashed keys 0..dim-1 and the bias key dim.
 * Synthetic data is binary. Whether a file's labels fit the width is
 * known only once it is read (the app's create says so).
 */
static int check_app_sparse_lr(const Dml__JobSpec *s, char *err, size_t errlen)
{
	const Dml__TableSpec *t = table_find(s, 0);
	const char *m = str_or_empty(s->metric);
	int synth = strcmp(str_or_empty(s->data), "synthetic") == 0 ||
		    strcmp(str_or_empty(s->test_data), "synthetic") == 0;

	if (!*str_or_empty(s->data))
		return fail(err, errlen, "app sparse_lr: data is empty (a libsvm file or "
			    "synthetic)");
	if (*m && strcmp(m, "auc") != 0 && strcmp(m, "loss") != 0 &&
	    strcmp(m, "accuracy") != 0)
		return fail(err, errlen, "app sparse_lr: metric '%s' is not one it computes "
			    "(auc, loss, accuracy)", m);
	if (strcmp(str_or_empty(s->data), "synthetic") == 0 && s->examples < 1)
		return fail(err, errlen, "app sparse_lr: synthetic data needs examples >= 1");
	if (s->dim < 1)
		return fail(err, errlen, "app sparse_lr: dim must be at least 1 (the hashed "
			    "feature space)");
	if (s->n_tables != 1 || !t || t->dense)
		return fail(err, errlen, "app sparse_lr: needs exactly one table, id 0, sparse "
			    "(keys 0..dim: hashed features and the bias)");
	if (synth && t->width != 1)
		return fail(err, errlen, "app sparse_lr: synthetic data is binary: table 0 "
			    "needs width 1, not %" PRIu32, t->width);
	return batch_fits(s, "sparse_lr", "width", t->width, err, errlen);
}

/*
 * What the mf app of dml-worker needs: a ratings file or synthetic data,
 * a metric it computes, and two sparse tables of one width k, 0 for the
 * users' factors and 1 for the items', not both starting at zeros (their
 * gradients would stay zero: each side's is the other side's factors).
 */
static int check_app_mf(const Dml__JobSpec *s, char *err, size_t errlen)
{
	const Dml__TableSpec *u = table_find(s, 0), *v = table_find(s, 1);
	const char *m = str_or_empty(s->metric);

	if (!*str_or_empty(s->data))
		return fail(err, errlen, "app mf: data is empty (a ratings file or synthetic)");
	if (*m && strcmp(m, "rmse") != 0 && strcmp(m, "loss") != 0)
		return fail(err, errlen, "app mf: metric '%s' is not one it computes (rmse, "
			    "loss)", m);
	if (strcmp(str_or_empty(s->data), "synthetic") == 0 && s->examples < 1)
		return fail(err, errlen, "app mf: synthetic data needs examples >= 1");
	if (s->n_tables != 2 || !u || !v || u->dense || v->dense)
		return fail(err, errlen, "app mf: needs two sparse tables, id 0 (users) and "
			    "id 1 (items)");
	if (u->width != v->width)
		return fail(err, errlen, "app mf: tables 0 and 1 need one width (the factors "
			    "per id), not %" PRIu32 " and %" PRIu32, u->width, v->width);
	if (strcmp(str_or_empty(u->init), "zeros") == 0 &&
	    strcmp(str_or_empty(v->init), "zeros") == 0)
		return fail(err, errlen, "app mf: tables 0 and 1 both start at zeros, where "
			    "every gradient is zero: give them init = normal (scale 0.1, say)");
	return batch_fits(s, "mf", "width", u->width, err, errlen);
}

/* Metric with a target: a stop condition (the same test as jobs.c makes). */
static int metric_stops(const Dml__JobSpec *s)
{
	return *str_or_empty(s->metric) && s->target > 0;
}

static int check_job(const Dml__JobSpec *s, char *err, size_t errlen)
{
	const struct {
		const char *key, *s;
		size_t max;
	} texts[] = {
		{ "data", s->data, JOB_TEXT_MAX }, { "test_data", s->test_data, JOB_TEXT_MAX },
		{ "hidden", s->hidden, JOB_HIDDEN_MAX },
	};
	char why[160];

	if (name_why(str_or_empty(s->name), why, sizeof(why)))
		return fail(err, errlen, "name %s", why);
	if (!dml_job_app_known(s->app)) {
		names_join(job_apps, why, sizeof(why));
		return fail(err, errlen, "app '%.*s' is not an app of this build (%s)",
			    DML_JOB_NAME_MAX, str_or_empty(s->app), why);
	}
	for (size_t i = 0; i < DML_ARRAY_LEN(texts); i++) {
		if (text_why(str_or_empty(texts[i].s), texts[i].max, why, sizeof(why)))
			return fail(err, errlen, "%s %s", texts[i].key, why);
	}
	if (s->batch_size < 1)
		return fail(err, errlen, "batch_size must be at least 1");
	if (metric_why(str_or_empty(s->metric), why, sizeof(why)))
		return fail(err, errlen, "metric %s", why);
	if (!(isfinite(s->max_epochs) && s->max_epochs >= 0))
		return fail(err, errlen, "max_epochs %g must be finite and >= 0",
			    s->max_epochs);
	if (!(isfinite(s->target) && s->target >= 0))
		return fail(err, errlen, "target %g must be finite and >= 0", s->target);
	if (!(isfinite(s->min_rate) && s->min_rate >= 0))
		return fail(err, errlen, "min_rate %g must be finite and >= 0", s->min_rate);
	if (!(isfinite(s->rebalance_threshold) && s->rebalance_threshold >= 0))
		return fail(err, errlen, "rebalance_threshold %g must be finite and >= 0",
			    s->rebalance_threshold);
	if (s->rebalance > DML_REBALANCE_OFF || s->stale_scaling > DML_STALE_INVERSE ||
	    s->batch_split > DML_BATCH_RATE || s->bsp_step > DML_BSP_STEP_PUSH)
		return fail(err, errlen, "rebalance %u, stale_scaling %u, batch_split %u or "
			    "bsp_step %u is not one this build knows", s->rebalance,
			    s->stale_scaling, s->batch_split, s->bsp_step);
	if (s->clock_batch > JOB_CLOCK_BATCH_MAX)
		return fail(err, errlen, "clock_batch %" PRIu64 " out of range 0..%llu",
			    s->clock_batch, (unsigned long long)JOB_CLOCK_BATCH_MAX);
	if (s->target > 0 && !*str_or_empty(s->metric))
		return fail(err, errlen, "target %g needs a metric", s->target);
	if (s->max_clocks == 0 && s->max_epochs == 0 && !metric_stops(s))
		return fail(err, errlen, "no stop condition: set max_clocks, max_epochs, "
			    "or metric with a target");
	if (s->workers && s->n_worker_ids)
		return fail(err, errlen, "workers %" PRIu32 " and worker_ids both set",
			    s->workers);
	if (s->n_worker_ids && !s->worker_ids)
		return fail(err, errlen, "worker_ids missing");
	if (ids_why(s->worker_ids, s->n_worker_ids, why, sizeof(why)))
		return fail(err, errlen, "worker_ids: %s", why);
	if (s->partitions > JOB_PARTITIONS_MAX)
		return fail(err, errlen, "partitions %" PRIu32 " out of range 0..%u",
			    s->partitions, JOB_PARTITIONS_MAX);
	return 0;
}

int dml_metric_lower_is_better(const char *metric)
{
	return metric && name_in(metric, job_metrics_lower);
}

int dml_job_spec_check(const Dml__JobSpec *spec, char *err, size_t errlen)
{
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!spec)
		return fail(err, errlen, "no job spec");
	rc = check_job(spec, err, errlen);
	if (!rc)
		rc = check_tables(spec, err, errlen);
	if (!rc && strcmp(str_or_empty(spec->app), "lsq") == 0)
		rc = check_app_lsq(spec, err, errlen);
	if (!rc && strcmp(str_or_empty(spec->app), "mlp") == 0)
		rc = check_app_mlp(spec, err, errlen);
	if (!rc && strcmp(str_or_empty(spec->app), "sparse_lr") == 0)
		rc = check_app_sparse_lr(spec, err, errlen);
	if (!rc && strcmp(str_or_empty(spec->app), "mf") == 0)
		rc = check_app_mf(spec, err, errlen);
	return rc;
}

int dml_job_app_known(const char *app)
{
	return app && name_in(app, job_apps);
}

Dml__JobSpec *dml_job_spec_copy(const Dml__JobSpec *spec)
{
	Dml__JobSpec empty = DML__JOB_SPEC__INIT;
	Dml__JobSpec *copy;

	if (!spec)
		spec = &empty;
	copy = dml_msg_copy(&spec->base);
	/* Our own encoding always decodes: only memory can fail, and control
	 * structures treat that as fatal (util.h). */
	if (!copy)
		abort();
	return copy;
}

void dml_job_spec_free(Dml__JobSpec *spec)
{
	if (spec)
		dml__job_spec__free_unpacked(spec, NULL);
}

const char *dml_job_state_name(int state)
{
	static const char *const names[] = {
		[DML__JOB_STATE__PENDING] = "pending", [DML__JOB_STATE__RUNNING] = "running",
		[DML__JOB_STATE__PAUSED] = "paused", [DML__JOB_STATE__DONE] = "done",
		[DML__JOB_STATE__FAILED] = "failed", [DML__JOB_STATE__STOPPED] = "stopped",
	};

	if (state < 0 || (size_t)state >= DML_ARRAY_LEN(names) || !names[state])
		return "unknown";
	return names[state];
}
