/*
 * The sparse_lr app (app.h): logistic regression on sparse, hashed
 * features, the model of click prediction. Feature id f of a record goes
 * to key hash(f) mod dim of sparse table 0 (a 64-bit mix keyed by the job
 * seed, so every worker hashes alike), and key dim is the bias, which
 * every record has with value 1. Table 0 has width 1 for binary labels, or
 * width = classes for one-vs-rest: a logistic unit per class, each trained
 * on "is it this class".
 *
 * Data is a libsvm file (data_libsvm.h) or synthetic clicks
 * (data_synth_clicks.h: record i of the job seed, made when needed; the
 * test set, test_data = synthetic, is records 2^62 + i of the same hidden
 * model). A worker trains on its partitions (record ranges), visiting them
 * in a new order each pass, as the mlp does.
 *
 * A step takes the next batch of records, hashes their features, sorts and
 * dedupes the keys and pulls only those; then the mean log-loss, its
 * gradient per pulled key, and a push of it by the same keys, left in
 * flight (the next step waits for it before it writes the gradient again,
 * drain before the end). Evaluation pulls each chunk's keys and scores it:
 * AUC (dml_auc, the mean over classes for one-vs-rest), mean log-loss or
 * accuracy.
 *
 * Must never: pull more keys than its batch has, touch the keys or values
 * of a push in flight, keep a pull in flight when it returns, or abort on a
 * spec or a file (every size is checked, every allocation may fail).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "worker/app_base.h"
#include "worker/app_util.h"
#include "worker/data_libsvm.h"
#include "worker/data_synth_clicks.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/walk.h"

#define DEFAULT_EVAL_EVERY 100
#define SYNTH_TEST_BASE (UINT64_C(1) << 62)
/* Records scored at a time in evaluation. */
#define EVAL_CHUNK 1000
/* The most scores (records x classes) an evaluation keeps: 512 MiB of doubles. */
#define EVAL_FLOATS_MAX (UINT64_C(1) << 26)

#define STREAM_HASH UINT64_C(0x452821e638d01377)
#define STREAM_SHUFFLE UINT64_C(0xbe5466cf34e90c6c)

enum metric { METRIC_AUC, METRIC_LOSS, METRIC_ACCURACY };

/* Records: a libsvm file in memory, or synthetic clicks made when read. */
struct dataset {
	struct dml_app_data d;    /* synthetic: record i is generator record d.base + i */
	struct dml_libsvm file;   /* file.offsets != NULL */
};

/* One record: pointers into the file, or into the app's scratch. */
struct record {
	const uint64_t *ids;
	const float *vals;
	size_t nnz;
	float label;
};

/*
 * A batch (or an evaluation chunk) of rows: their entries as (key, value)
 * with the bias last in each row, the sorted unique keys and the index of
 * each entry's key among them, the pulled rows and the labels.
 */
struct batch {
	size_t rows, nent, nkeys;
	size_t *row_end;          /* rows: entries of rows 0..r */
	uint64_t *ekey;           /* entries */
	float *eval;
	uint32_t *eidx;
	uint64_t *keys;           /* unique keys (room for every entry and one) */
	float *w;                 /* nkeys x width: their pulled rows */
	float *y;                 /* rows labels */
	double *z;                /* rows x width logits */
	/* Elements each array above has room for, in its order. */
	size_t cap[8];
};

struct slr {
	struct dml_app_base base; /* walks the records it trains on */
	uint64_t seed, hkey;
	uint32_t dim, width, classes;
	enum metric metric;
	struct dml_app_table table;
	struct dml_clicks clicks; /* synthetic data */
	int have_clicks;
	struct dataset train, test;
	struct batch b;
	/* The push of the last step, in flight while pushing != 0. */
	uint64_t *pkeys;
	float *g;
	size_t pkcap, gcap;
	dml_handle_t pushing;
	uint64_t rid[DML_CLICKS_MAX_NNZ];
	float rval[DML_CLICKS_MAX_NNZ];
};

/* err = "app sparse_lr: " and the reason; returns rc. */
#define fail(err, errlen, rc, ...) dml_app_fail(err, errlen, rc, "sparse_lr", __VA_ARGS__)

/* ---- records ------------------------------------------------------------- */

/* The key of feature id: a keyed 64-bit mix, reduced to the hashed space. */
static uint64_t feature_key(const struct slr *a, uint64_t id)
{
	return dml_rng_mix64(id ^ a->hkey) % a->dim;
}

static void record_get(struct slr *a, const struct dataset *d, uint64_t i, struct record *r)
{
	if (d->file.offsets) {
		uint64_t b = d->file.offsets[i];

		r->ids = d->file.ids + b;
		r->vals = d->file.vals + b;
		r->nnz = (size_t)(d->file.offsets[i + 1] - b);
		r->label = d->file.labels[i];
		return;
	}
	dml_clicks_record(&a->clicks, d->d.base + i, a->rid, a->rval, &r->nnz, &r->label);
	r->ids = a->rid;
	r->vals = a->rval;
}

/* ---- batches ------------------------------------------------------------- */

static void batch_free(struct batch *b)
{
	free(b->row_end);
	free(b->ekey);
	free(b->eval);
	free(b->eidx);
	free(b->keys);
	free(b->w);
	free(b->y);
	free(b->z);
	memset(b, 0, sizeof(*b));
}

/* Room for rows rows of entries entries in all (the bias included). */
static int batch_reserve(struct slr *a, struct batch *b, size_t rows, size_t entries)
{
	/* Unique keys: at most one per entry, and at most dim + 1. */
	size_t w = a->width, kmax = entries < (size_t)a->dim + 1 ? entries : (size_t)a->dim + 1;
	struct {
		void **p;
		size_t n, size;
	} arr[8] = {
		{ (void **)&b->row_end, rows, sizeof(*b->row_end) },
		{ (void **)&b->ekey, entries, sizeof(*b->ekey) },
		{ (void **)&b->eval, entries, sizeof(*b->eval) },
		{ (void **)&b->eidx, entries, sizeof(*b->eidx) },
		{ (void **)&b->keys, entries, sizeof(*b->keys) },
		{ (void **)&b->w, kmax * w, sizeof(*b->w) },
		{ (void **)&b->y, rows, sizeof(*b->y) },
		{ (void **)&b->z, rows * w, sizeof(*b->z) },
	};

	/* Entries are indexed by uint32_t; widths are at most 65536. */
	if (entries > UINT32_MAX || rows > SIZE_MAX / w || entries > SIZE_MAX / w)
		return DML_ENOMEM;
	for (size_t i = 0; i < 8; i++)
		if (dml_app_reserve(arr[i].p, &b->cap[i], arr[i].n, arr[i].size) != 0)
			return DML_ENOMEM;
	return 0;
}

/*
 * Rows for records recs[0..rows-1] of d: hash their features, append the
 * bias to each, sort and dedupe the keys (the bias key always among them,
 * so that a worker without data still pulls), index each entry's key.
 */
static int batch_build(void *state, const struct dml_app_data *data, const uint64_t *recs,
		       size_t rows, char *err, size_t errlen)
{
	struct slr *a = state;
	const struct dataset *d = (const struct dataset *)data;
	struct batch *b = &a->b;
	struct record r;
	size_t entries = 1;

	for (size_t k = 0; k < rows; k++) {
		if (d->file.offsets)
			entries += (size_t)(d->file.offsets[recs[k] + 1] -
					    d->file.offsets[recs[k]]) + 1;
		else
			entries += DML_CLICKS_MAX_NNZ + 1;
	}
	if (batch_reserve(a, b, rows, entries) != 0)
		return fail(err, errlen, DML_ENOMEM, "out of memory for a batch of %zu rows "
			    "and %zu entries", rows, entries);
	b->rows = rows;
	b->nent = 0;
	for (size_t k = 0; k < rows; k++) {
		record_get(a, d, recs[k], &r);
		for (size_t j = 0; j < r.nnz; j++) {
			b->ekey[b->nent] = feature_key(a, r.ids[j]);
			b->eval[b->nent++] = r.vals[j];
		}
		b->ekey[b->nent] = a->dim;
		b->eval[b->nent++] = 1.0f;
		b->row_end[k] = b->nent;
		b->y[k] = r.label;
	}
	memcpy(b->keys, b->ekey, b->nent * sizeof(*b->keys));
	b->keys[b->nent] = a->dim;
	b->nkeys = dml_keys_unique(b->keys, b->nent + 1);
	for (size_t e = 0; e < b->nent; e++)
		b->eidx[e] = dml_keys_index(b->keys, b->nkeys, b->ekey[e]);
	return 0;
}

/* Pull the batch's keys into b->w and wait. */
static int batch_pull(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	struct slr *a = state;
	dml_handle_t h = 0;
	int rc = io->ops->pull(io->arg, 0, a->b.keys, a->b.nkeys, a->b.w, &h);

	if (!rc)
		rc = dml_app_wait(io, h);
	if (rc)
		snprintf(err, errlen, "pull of table 0 (%zu keys): %s", a->b.nkeys,
			 dml_strerror(rc));
	return rc;
}

/*
 * The logits of every row: z[k][c] = sum over its entries of w[key][c] x.
 * Returns 0: backward_push sums the loss.
 */
static double batch_forward(void *state)
{
	struct slr *a = state;
	struct batch *b = &a->b;
	size_t e = 0, w = a->width;

	for (size_t k = 0; k < b->rows; k++) {
		double *z = b->z + k * w;

		for (size_t c = 0; c < w; c++)
			z[c] = 0;
		for (; e < b->row_end[k]; e++) {
			const float *row = b->w + (size_t)b->eidx[e] * w;

			for (size_t c = 0; c < w; c++)
				z[c] += (double)row[c] * b->eval[e];
		}
	}
	return 0;
}

/* Unit c's target for label y: y itself (binary) or "is it class c". */
static double target(const struct slr *a, float y, size_t c)
{
	return a->width == 1 ? (double)y : (double)((size_t)y == c);
}

/* log(1 + e^z) without overflow. */
static double softplus(double z)
{
	return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z));
}

/* Log-loss of logit z against t: softplus(z) - t z. */
static double log_loss(double z, double t)
{
	return softplus(z) - t * z;
}

static double sigmoid(double z)
{
	return z >= 0 ? 1.0 / (1.0 + exp(-z)) : exp(z) / (1.0 + exp(z));
}

/* ---- the spec ------------------------------------------------------------ */

static const struct dml_app_base_ops slr_ops;

static void slr_destroy(void *state)
{
	struct slr *a = state;

	if (!a)
		return;
	dml_libsvm_free(&a->train.file);
	dml_libsvm_free(&a->test.file);
	dml_walk_clear(&a->base.walk);
	if (a->have_clicks)
		dml_clicks_free(&a->clicks);
	batch_free(&a->b);
	free(a->pkeys);
	free(a->g);
	free(a);
}

/* A file's labels against the table's width; why says what is wrong. */
static int labels_check(const struct slr *a, const struct dataset *d, const char *name,
			char *why, size_t whylen)
{
	if (a->width == 1 && d->file.classes > 2)
		return dml_fail(DML_EINVAL, why, whylen, "%s: labels go up to %" PRIu32 ", but table "
			    "0 has width 1 (binary); give it width %" PRIu32 " for one-vs-rest",
			    name, d->file.classes - 1, d->file.classes);
	if (a->width > 1 && d->file.classes > a->width)
		return dml_fail(DML_EINVAL, why, whylen, "%s: label %" PRIu32 " is not below "
			    "classes %" PRIu32 " (table 0's width)", name,
			    d->file.classes - 1, a->width);
	return 0;
}

/* A libsvm file into d, its labels checked. */
static int libsvm_load(void *state, struct dml_app_data *d, const char *path, char *why,
		       size_t whylen)
{
	struct dataset *ds = (struct dataset *)d;
	int rc = dml_libsvm_load(path, &ds->file, why, whylen);

	if (rc)
		return rc;
	d->n = ds->file.count;
	return labels_check(state, ds, path, why, whylen);
}

static int slr_data(struct slr *a, const Dml__JobSpec *spec, char *err, size_t errlen)
{
	const char *test = spec->test_data ? spec->test_data : "";
	const char *data = spec->data ? spec->data : "";
	int rc;

	/* The spec's strings are only borrowed for create: nothing keeps them. */
	if (strcmp(data, "synthetic") == 0 || strcmp(test, "synthetic") == 0) {
		if ((rc = dml_clicks_init(&a->clicks, a->seed, 0)) != 0)
			return fail(err, errlen, rc, "synthetic data: %s", dml_strerror(rc));
		a->have_clicks = 1;
	}
	a->base.train = &a->train.d;
	a->base.test = &a->test.d;
	if ((rc = dml_app_base_data(&a->base, spec, SYNTH_TEST_BASE, err, errlen)) != 0)
		return rc;
	if (a->base.eval_n > EVAL_FLOATS_MAX / a->width)
		return fail(err, errlen, DML_EINVAL, "%s: %" PRIu64 " records x %" PRIu32
			    " classes are more scores than an evaluation keeps (%" PRIu64 ")",
			    test[0] ? test : data, a->base.eval_n, a->width, EVAL_FLOATS_MAX);
	return 0;
}

static int slr_create(const Dml__JobSpec *spec, const struct dml_app_env *env, void **state,
		      char *err, size_t errlen)
{
	struct dml_app_base *b;
	const char *m;
	struct slr *a;
	int rc;

	*state = NULL;
	rc = dml_app_base_new("sparse_lr", &slr_ops, spec, sizeof(*a), STREAM_SHUFFLE, &b,
			      err, errlen);
	if (rc)
		return rc;
	a = (struct slr *)b;
	a->seed = spec->seed;
	a->hkey = dml_rng_mix64(spec->seed ^ STREAM_HASH);
	a->dim = spec->dim;
	a->width = spec->tables[0]->width;
	m = spec->metric ? spec->metric : "";
	a->metric = strcmp(m, "loss") == 0 ? METRIC_LOSS :
		    strcmp(m, "accuracy") == 0 ? METRIC_ACCURACY : METRIC_AUC;
	a->table = (struct dml_app_table){ .id = 0, .dense = 0, .width = a->width, .keys = 0 };
	if ((rc = slr_data(a, spec, err, errlen)) != 0) {
		slr_destroy(a);
		return rc;
	}
	*state = a;
	return 0;
}

static size_t slr_tables(const void *state, const struct dml_app_table **out)
{
	*out = &((const struct slr *)state)->table;
	return 1;
}

/* ---- steps --------------------------------------------------------------- */

/* Wait for the push of the last step, if still in flight. */
static int push_land(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	struct slr *a = state;
	dml_handle_t h = a->pushing;
	int rc;

	if (!h)
		return 0;
	a->pushing = 0;
	if ((rc = dml_app_wait(io, h)) != 0)
		snprintf(err, errlen, "push to table 0: %s", dml_strerror(rc));
	return rc;
}

/*
 * The gradient of the batch's summed log-loss / norm per pulled key into the push
 * buffers (the last push landed), and its push, left in flight. *loss:
 * the batch's summed log-loss.
 */
static int backward_push(void *state, struct dml_app_io *io, double *loss, char *err,
			 size_t errlen)
{
	struct slr *a = state;
	struct batch *b = &a->b;
	size_t w = a->width, e = 0;
	double inv = 1.0 / (double)a->base.norm;
	int rc;

	if (dml_app_reserve((void **)&a->pkeys, &a->pkcap, b->nkeys, sizeof(*a->pkeys)) != 0 ||
	    dml_app_reserve((void **)&a->g, &a->gcap, b->nkeys * w, sizeof(*a->g)) != 0)
		return fail(err, errlen, DML_ENOMEM, "out of memory for a gradient of %zu keys",
			    b->nkeys);
	memcpy(a->pkeys, b->keys, b->nkeys * sizeof(*a->pkeys));
	memset(a->g, 0, b->nkeys * w * sizeof(*a->g));
	*loss = 0;
	for (size_t k = 0; k < b->rows; k++) {
		/* The logits become their gradient in place. */
		double *z = b->z + k * w;

		for (size_t c = 0; c < w; c++) {
			double t = target(a, b->y[k], c);

			*loss += log_loss(z[c], t);
			z[c] = (sigmoid(z[c]) - t) * inv;
		}
		for (; e < b->row_end[k]; e++) {
			float *g = a->g + (size_t)b->eidx[e] * w;

			for (size_t c = 0; c < w; c++)
				g[c] += (float)(z[c] * b->eval[e]);
		}
	}
	rc = io->ops->push(io->arg, 0, a->pkeys, b->nkeys, a->g, &a->pushing);
	if (rc) {
		a->pushing = 0;
		snprintf(err, errlen, "push to table 0: %s", dml_strerror(rc));
	}
	return rc;
}

/* The metric of n records' logits (n x width) and labels. */
static double metric_of(const struct slr *a, const double *z, const float *y, size_t n,
			float *col, float *lab)
{
	size_t w = a->width, right = 0, classes = 0;
	double sum = 0;

	if (a->metric == METRIC_LOSS) {
		for (size_t i = 0; i < n; i++)
			for (size_t c = 0; c < w; c++)
				sum += log_loss(z[i * w + c], target(a, y[i], c));
		return sum / (double)n;
	}
	if (a->metric == METRIC_ACCURACY) {
		for (size_t i = 0; i < n; i++) {
			size_t best = 0;

			for (size_t c = 1; c < w; c++)
				best = z[i * w + c] > z[i * w + best] ? c : best;
			if (w == 1)
				best = z[i] >= 0;
			right += (float)best == y[i];
		}
		return (double)right / (double)n;
	}
	/* AUC, one class at a time; classes without positives or negatives in
	 * the set have none and do not count. */
	for (size_t c = 0; c < w; c++) {
		double auc;

		for (size_t i = 0; i < n; i++) {
			col[i] = (float)z[i * w + c];
			lab[i] = (float)target(a, y[i], c);
		}
		auc = dml_auc(col, lab, n);
		if (!isnan(auc)) {
			sum += auc;
			classes++;
		}
	}
	return classes ? sum / (double)classes : NAN;
}

static int slr_evaluate(void *state, struct dml_app_io *io, double *value, char *err,
			size_t errlen)
{
	struct slr *a = state;
	size_t n = (size_t)a->base.eval_n, w = a->width;
	double *z = malloc((n ? n : 1) * w * sizeof(*z));
	float *y = malloc((n ? n : 1) * sizeof(*y));
	float *col = malloc((n ? n : 1) * sizeof(*col));
	float *lab = malloc((n ? n : 1) * sizeof(*lab));
	uint64_t recs[EVAL_CHUNK];
	int rc = 0;

	if (!z || !y || !col || !lab)
		rc = fail(err, errlen, DML_ENOMEM, "out of memory for %zu scores", n * w);
	for (size_t pos = 0; pos < n && !rc; pos += EVAL_CHUNK) {
		size_t rows = n - pos < EVAL_CHUNK ? n - pos : EVAL_CHUNK;

		for (size_t k = 0; k < rows; k++)
			recs[k] = pos + k;
		if ((rc = batch_build(a, a->base.eval, recs, rows, err, errlen)) != 0 ||
		    (rc = batch_pull(a, io, err, errlen)) != 0)
			break;
		batch_forward(a);
		memcpy(z + pos * w, a->b.z, rows * w * sizeof(*z));
		memcpy(y + pos, a->b.y, rows * sizeof(*y));
	}
	if (!rc)
		*value = n ? metric_of(a, z, y, n, col, lab) : NAN;
	free(z);
	free(y);
	free(col);
	free(lab);
	return rc;
}

static const struct dml_app_base_ops slr_ops = {
	.load = libsvm_load,
	.build = batch_build,
	.pull = batch_pull,
	.forward = batch_forward,
	.land = push_land,
	.backward_push = backward_push,
};

const struct dml_app dml_app_sparse_lr = {
	.name = "sparse_lr",
	.metric = "auc",
	.default_eval_every = DEFAULT_EVAL_EVERY,
	.profile_job = "[job]\nname = profile\napp = sparse_lr\ndata = synthetic\n"
		       "examples = 2000\nmax_clocks = 1\ndim = 65536\nbatch_size = 256\n"
		       "[table]\nid = 0\nkind = sparse\nwidth = 1\noptimizer = adagrad\n"
		       "lr = 0.1\n",
	.create = slr_create,
	.tables = slr_tables,
	.set_partitions = dml_app_base_set_partitions,
	.walk = dml_app_base_walk,
	.set_batch = dml_app_base_set_batch,
	.step = dml_app_base_step,
	.evaluate = slr_evaluate,
	.drain = dml_app_base_drain,
	.data_examples = dml_app_base_data_examples,
	.destroy = slr_destroy,
};
