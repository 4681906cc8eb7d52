/*
 * The one check every job spec passes (see job_spec.h), whether it comes
 * from a file, from dmlctl over the wire or from a test, with the rules of
 * each app and the batch arithmetic the check and the workers share.
 *
 * Numeric bounds are constants shared with the file's option table
 * (job_spec_internal.h). Table kinds, initializers and optimizers are the
 * names of proto/table_spec.h, so a job cannot name one the servers lack; the
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "proto/job_spec_internal.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* What dml-worker's apps can hold in one batch: 1 GiB of floats. */
#define APP_BATCH_FLOATS_MAX (UINT64_C(1) << 28)
/* mlp: the widest layer, so that a weight row (inputs + bias) fits a key. */
#define MLP_UNITS_MAX 65535u

/* The metrics a job wants as small as possible (targets are upper bounds). */
static const char *const job_metrics_lower[] = { "loss", "rmse", NULL };

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
	for (int cross = 0; cross <= 1; cross++) {
		struct dml_link_codecs codecs;

		if (dml_table_spec_codecs(t, cross, &codecs, err, errlen) != 0)
			return DML_EINVAL;
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

/* Metric with a target: a stop condition (the same test as sched/job_state.c makes). */
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
