/*
 * The mlp app (app.h): softmax regression (hidden = "") or a multilayer
 * perceptron with ReLU hidden layers, trained on cross-entropy. Layer l is
 * dense table l: a row per output unit holding its in_l weights and then
 * its bias, so a layer's weights travel as one pull_range and its gradient
 * as one push_range, laid out alike.
 *
 * Data is an IDX image/label pair (bytes scaled to [0, 1] by x / 255) or
 * synthetic: record i's features are uniform in [0, 1) from (seed, stream,
 * i) and its label is the argmax of a random linear teacher (classes x dim,
 * from seed, applied to the features centred on 0), so any worker makes any
 * record and the task is learnable. A worker trains on its partitions
 * (record ranges), visiting them in a new order each pass: a keyed
 * permutation of positions (a Feistel network with cycle walking), which
 * needs no memory whatever the number of records.
 *
 * A step overlaps communication with computation: all layers' pulls are
 * issued first, the batch is assembled while they travel, and each layer's
 * forward pass starts as soon as its own weights arrived; on the way back
 * each layer's gradient is pushed as soon as it is known, while the
 * gradient of the layer below is computed. All arithmetic goes through the
 * backend of the env (backend.h), so this code runs on the cpu and on a GPU
 * alike; on a unified backend pulls land straight in the device buffers.
 *
 * Must never: abort or allocate without bound on a spec (sizes are checked
 * against the limits below first), keep a pull or push in flight when it
 * returns, or do model arithmetic other than through the backend.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "worker/app_util.h"
#include "worker/data_idx.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "worker/walk.h"

#define DEFAULT_EVAL_EVERY 100
/* test_data = "": evaluate on the first min(EVAL_TRAIN_MAX, N) records. */
#define EVAL_TRAIN_MAX 10000
/* test_data = synthetic: this many records of their own stream. */
#define SYNTH_TEST_EXAMPLES 2000
/* Rows evaluated at a time (at least batch_size). */
#define EVAL_CHUNK 1000
/* Largest batch_size * widest layer (floats) a step may need: 1 GiB. */
#define BATCH_FLOATS_MAX (UINT64_C(1) << 28)
/* Synthetic records are made once and kept when they fit this. */
#define CACHE_BYTES (UINT64_C(256) << 20)
#define LAYERS_MAX (DML_MLP_HIDDEN_MAX + 1)
/* Longest data path, as the job file allows (with its NUL). */
#define PATH_LEN 4096

/* Keys of the synthetic streams: the training set and its own test set. */
#define STREAM_TRAIN UINT64_C(0x243f6a8885a308d3)
#define STREAM_TEST UINT64_C(0x13198a2e03707344)
#define STREAM_TEACHER UINT64_C(0xa4093822299f31d0)
#define STREAM_SHUFFLE UINT64_C(0x082efa98ec4e6c89)

/* Records: an IDX pair in memory, or synthetic (cached when it fits). */
struct dataset {
	uint64_t n;
	struct dml_idx img, lab;  /* IDX: img.data != NULL */
	uint64_t stream;          /* synthetic */
	float *cx;                /* synthetic, cached: n x dim */
	uint16_t *cy;             /* synthetic, cached: n labels */
};

/* Device buffers of layer l, with host staging (the same when unified). */
struct layer {
	uint32_t in, out;
	float *w, *g;             /* out x (in + 1): the table's rows */
	float *hw, *hg;
	float *h;                 /* rows_cap x out: the output (logits for the last) */
	float *d;                 /* batch x out: d loss / d h; the last layer's is h */
};

struct mlp {
	const struct dml_backend_ops *be;
	void *ctx;
	uint64_t seed;
	uint32_t dim, classes;
	uint32_t batch;           /* examples per step */
	uint32_t norm;            /* the spec's batch_size: gradients are sums / norm */
	uint32_t batch_cap;       /* the largest batch it may be given (d holds it) */
	size_t rows_cap;          /* rows the x and h buffers hold */
	size_t nlayers;
	struct layer layers[LAYERS_MAX];
	struct dml_app_table tables[LAYERS_MAX];
	int metric_loss;
	float *teacher;           /* synthetic: classes x dim */
	struct dataset train, test;
	const struct dataset *eval;
	uint64_t eval_n;          /* evaluate on records 0..eval_n-1 of eval */
	struct dml_walk walk;     /* the records it trains on */
	/* Pushes of the last step still in flight, by layer (0: none). */
	dml_handle_t pushing[LAYERS_MAX];
	float *x, *y;             /* device: rows_cap x dim features, labels */
	float *hx, *hy;
};

/* err = "app mlp: " and the reason; returns rc. */
#define fail(err, errlen, rc, ...) dml_app_fail(err, errlen, rc, "mlp", __VA_ARGS__)

/* ---- random numbers and the synthetic data --------------------------------- */

static void teacher_make(uint64_t seed, uint32_t classes, uint32_t dim, float *t)
{
	uint64_t state = seed ^ STREAM_TEACHER;

	for (size_t i = 0; i < (size_t)classes * dim; i++)
		t[i] = (float)dml_rng_normal(&state);
}

/* 24 random bits as a float in [0, 1), exactly. */
static float unit24(uint64_t bits)
{
	return (float)(bits & 0xffffff) * (1.0f / 16777216.0f);
}

/* Record i of a synthetic stream: dim features into x, the label into *y. */
static void synth_record(const struct mlp *a, uint64_t stream, uint64_t i, float *x,
			 uint32_t *y)
{
	uint64_t state = a->seed ^ stream ^ (UINT64_C(0xd1b54a32d192ed03) * (i + 1));
	float best = -INFINITY;
	uint32_t j;

	/* Two features per draw: making data must not cost more than using it. */
	for (j = 0; j + 1 < a->dim; j += 2) {
		uint64_t b = dml_rng_next(&state);

		x[j] = unit24(b);
		x[j + 1] = unit24(b >> 32);
	}
	if (j < a->dim)
		x[j] = unit24(dml_rng_next(&state));
	*y = 0;
	for (uint32_t c = 0; c < a->classes; c++) {
		const float *t = a->teacher + (size_t)c * a->dim;
		float s = 0;

		for (j = 0; j < a->dim; j++)
			s += t[j] * (x[j] - 0.5f);
		if (s > best) {
			best = s;
			*y = c;
		}
	}
}

/* In chunks of 16, a trip count gcc -O2 vectorises; the tail one by one. */
static void bytes_to_floats(float *restrict x, const uint8_t *restrict b, size_t n)
{
	size_t j = 0;

	for (; j + 16 <= n; j += 16)
		for (size_t k = j; k < j + 16; k++)
			x[k] = (float)b[k] / 255.0f;
	for (; j < n; j++)
		x[j] = (float)b[j] / 255.0f;
}

/* Record i of d: features into x (dim floats), its label into *y. */
static void data_record(const struct mlp *a, const struct dataset *d, uint64_t i, float *x,
			float *y)
{
	uint32_t label;

	if (d->img.data) {
		bytes_to_floats(x, d->img.data + i * a->dim, a->dim);
		*y = (float)d->lab.data[i];
	} else if (d->cx) {
		memcpy(x, d->cx + i * a->dim, (size_t)a->dim * sizeof(float));
		*y = (float)d->cy[i];
	} else {
		synth_record(a, d->stream, i, x, &label);
		*y = (float)label;
	}
}

static void dataset_clear(struct dataset *d)
{
	dml_idx_free(&d->img);
	dml_idx_free(&d->lab);
	free(d->cx);
	free(d->cy);
	memset(d, 0, sizeof(*d));
}

/* n records of a synthetic stream, made now if they fit CACHE_BYTES. */
static void dataset_synthetic(const struct mlp *a, struct dataset *d, uint64_t stream,
			      uint64_t n)
{
	uint32_t label;

	d->n = n;
	d->stream = stream;
	if (n > CACHE_BYTES / ((uint64_t)a->dim * sizeof(float) + sizeof(uint16_t)))
		return;
	d->cx = malloc((size_t)n * a->dim * sizeof(float));
	d->cy = malloc((size_t)n * sizeof(uint16_t));
	/* No room after all: make records as they are needed. */
	if (!d->cx || !d->cy) {
		free(d->cx);
		free(d->cy);
		d->cx = NULL;
		d->cy = NULL;
		return;
	}
	for (uint64_t i = 0; i < n; i++) {
		synth_record(a, stream, i, d->cx + i * a->dim, &label);
		d->cy[i] = (uint16_t)label;
	}
}

/* Load an IDX pair ("IMAGES,LABELS") and check it against dim and classes. */
static int dataset_load(const struct mlp *a, struct dataset *d, const char *key,
			const char *text, char *err, size_t errlen)
{
	char images[PATH_LEN], labels[PATH_LEN], why[PATH_LEN + 200];
	int rc;

	if (dml_job_data_pair(text, images, labels, sizeof(images), why, sizeof(why)))
		return fail(err, errlen, DML_EINVAL, "%s %s", key, why);
	rc = dml_idx_load_pair(images, labels, &d->img, &d->lab, why, sizeof(why));
	if (rc)
		return fail(err, errlen, rc == DML_ENOMEM ? DML_ENOMEM : DML_EINVAL, "%s", why);
	d->n = d->img.count;
	if (d->img.record_size != a->dim)
		return fail(err, errlen, DML_EINVAL, "%s: records of %" PRIu64 " bytes, but "
			    "dim is %" PRIu32, images, d->img.record_size, a->dim);
	for (uint64_t i = 0; i < d->n; i++)
		if (d->lab.data[i] >= a->classes)
			return fail(err, errlen, DML_EINVAL, "%s: record %" PRIu64 ": label %u "
				    "is not below classes %" PRIu32, labels, i + 1,
				    (unsigned)d->lab.data[i], a->classes);
	return 0;
}

/* The records of a data text: synthetic or an IDX pair. */
static int dataset_open(struct mlp *a, struct dataset *d, const char *key, const char *text,
			uint64_t stream, uint64_t synthetic_n, char *err, size_t errlen)
{
	if (strcmp(text, "synthetic") == 0) {
		dataset_synthetic(a, d, stream, synthetic_n);
		return 0;
	}
	return dataset_load(a, d, key, text, err, errlen);
}

/* ---- the worker's records, shuffled each pass ------------------------------ */

/* ---- the backend ----------------------------------------------------------- */

/* rc of a backend call, with what the backend said in err. */
static int be_fail(const struct mlp *a, int rc, char *err, size_t errlen)
{
	if (rc)
		snprintf(err, errlen, "backend %s: %s (%s)", a->be->name,
			 a->be->error(a->ctx), dml_strerror(rc));
	return rc;
}

/* Host staging -> device, unless they are one (unified). */
static int stage_up(const struct mlp *a, float *dev, const float *host, size_t n)
{
	return a->be->unified ? 0 : a->be->upload(a->ctx, dev, host, n);
}

/* A device buffer and its staging buffer (the same one when unified). */
static int buf_alloc(const struct mlp *a, size_t n, float **dev, float **host)
{
	int rc = a->be->alloc(a->ctx, n, dev);

	if (rc || !host)
		return rc;
	if (a->be->unified) {
		*host = *dev;
		return 0;
	}
	return a->be->host_alloc(a->ctx, n, host);
}

static void buf_free(const struct mlp *a, float *dev, float *host)
{
	if (host && host != dev)
		a->be->host_free(a->ctx, host);
	a->be->free(a->ctx, dev);
}

static size_t layer_floats(const struct layer *y)
{
	return (size_t)y->out * (y->in + 1);
}

/* Gradient of the loss with respect to layer l's output. */
static float *delta(const struct mlp *a, size_t l)
{
	return l + 1 == a->nlayers ? a->layers[l].h : a->layers[l].d;
}

/* The input of layer l: the features or the layer below's output. */
static const float *layer_input(const struct mlp *a, size_t l)
{
	return l ? a->layers[l - 1].h : a->x;
}

/* h = act(input W^T + b) for rows rows; ReLU except on the last layer. */
static int layer_forward(const struct mlp *a, size_t l, size_t rows)
{
	const struct layer *y = &a->layers[l];
	int rc;

	rc = a->be->gemm(a->ctx, 0, 1, rows, y->out, y->in, 1.0f, layer_input(a, l), y->in,
			 y->w, (size_t)y->in + 1, 0.0f, y->h, y->out);
	if (!rc)
		rc = a->be->bias_act(a->ctx, y->h, rows, y->out, y->out, y->w + y->in,
				     (size_t)y->in + 1, l + 1 < a->nlayers);
	return rc;
}

/* Layer l's table gradient into hg, laid out like its rows, ready to push. */
static int layer_gradient(const struct mlp *a, size_t l, size_t rows)
{
	const struct layer *y = &a->layers[l];
	const float *d = delta(a, l);
	int rc;

	rc = a->be->gemm(a->ctx, 1, 0, y->out, y->in, rows, 1.0f, d, y->out,
			 layer_input(a, l), y->in, 0.0f, y->g, (size_t)y->in + 1);
	if (!rc)
		rc = a->be->col_sum(a->ctx, d, rows, y->out, y->out, 1.0f, y->g + y->in,
				    (size_t)y->in + 1);
	if (!rc && !a->be->unified)
		rc = a->be->download(a->ctx, y->hg, y->g, layer_floats(y));
	if (!rc)
		rc = a->be->sync(a->ctx);
	return rc;
}

/* The gradient of the layer below's output, through its ReLU. */
static int layer_backward(const struct mlp *a, size_t l, size_t rows)
{
	const struct layer *y = &a->layers[l];
	float *below = a->layers[l - 1].d;
	int rc;

	rc = a->be->gemm(a->ctx, 0, 0, rows, y->in, y->out, 1.0f, delta(a, l), y->out, y->w,
			 (size_t)y->in + 1, 0.0f, below, y->in);
	if (!rc)
		rc = a->be->relu_grad(a->ctx, below, a->layers[l - 1].h, rows, y->in, y->in);
	return rc;
}

/* ---- the spec -------------------------------------------------------------- */

/*
 * The layer sizes (sizes[0] = dim ... sizes[*n-1] = classes). The rules of
 * an mlp spec live in the job check (proto/job_spec_check.c, check_app_mlp), which the
 * scheduler made already; made again here for specs that did not come
 * through it.
 */
static int mlp_check(const Dml__JobSpec *spec, const struct dml_app_env *env,
		     uint32_t *sizes, size_t *n, char *err, size_t errlen)
{
	int rc;

	if (!env || !env->be || !env->be_ctx)
		return fail(err, errlen, DML_EINVAL, "no compute backend in the env");
	if ((rc = dml_app_spec_check("mlp", spec, err, errlen)) != 0)
		return rc;
	return dml_job_mlp_layers(spec, sizes, n, err, errlen);
}

static void mlp_destroy(void *state)
{
	struct mlp *a = state;

	if (!a)
		return;
	for (size_t l = 0; l < a->nlayers; l++) {
		struct layer *y = &a->layers[l];

		buf_free(a, y->w, y->hw);
		buf_free(a, y->g, y->hg);
		buf_free(a, y->h, NULL);
		buf_free(a, y->d, NULL);
	}
	buf_free(a, a->x, a->hx);
	buf_free(a, a->y, a->hy);
	dataset_clear(&a->train);
	dataset_clear(&a->test);
	dml_walk_clear(&a->walk);
	free(a->teacher);
	free(a);
}

/* The device buffers of every layer and of a batch. */
static int mlp_buffers(struct mlp *a)
{
	int rc = buf_alloc(a, a->rows_cap * a->dim, &a->x, &a->hx);

	if (!rc)
		rc = buf_alloc(a, a->rows_cap, &a->y, &a->hy);
	for (size_t l = 0; l < a->nlayers && !rc; l++) {
		struct layer *y = &a->layers[l];

		rc = buf_alloc(a, layer_floats(y), &y->w, &y->hw);
		if (!rc)
			rc = buf_alloc(a, layer_floats(y), &y->g, &y->hg);
		if (!rc)
			rc = buf_alloc(a, a->rows_cap * y->out, &y->h, NULL);
		if (!rc && l + 1 < a->nlayers)
			rc = buf_alloc(a, (size_t)a->batch_cap * y->out, &y->d, NULL);
	}
	return rc;
}

/* The training and evaluation records of the spec. */
static int mlp_data(struct mlp *a, const Dml__JobSpec *spec, char *err, size_t errlen)
{
	const char *test = spec->test_data ? spec->test_data : "";
	const char *data = spec->data ? spec->data : "";
	int rc;

	if (strcmp(data, "synthetic") == 0 || strcmp(test, "synthetic") == 0) {
		a->teacher = malloc((size_t)a->classes * a->dim * sizeof(float));
		if (!a->teacher)
			return fail(err, errlen, DML_ENOMEM, "out of memory for the teacher");
		teacher_make(a->seed, a->classes, a->dim, a->teacher);
	}
	rc = dataset_open(a, &a->train, "data", data, STREAM_TRAIN, spec->examples, err,
			  errlen);
	if (rc)
		return rc;
	a->eval = &a->train;
	a->eval_n = a->train.n < EVAL_TRAIN_MAX ? a->train.n : EVAL_TRAIN_MAX;
	if (!test[0])
		return 0;
	rc = dataset_open(a, &a->test, "test_data", test, STREAM_TEST, SYNTH_TEST_EXAMPLES,
			  err, errlen);
	a->eval = &a->test;
	a->eval_n = a->test.n;
	return rc;
}

static int mlp_create(const Dml__JobSpec *spec, const struct dml_app_env *env, void **state,
		      char *err, size_t errlen)
{
	uint32_t sizes[LAYERS_MAX + 1], widest = 0;
	struct mlp *a;
	size_t n;
	int rc;

	*state = NULL;
	if (!spec)
		return fail(err, errlen, DML_EINVAL, "no job spec");
	if ((rc = mlp_check(spec, env, sizes, &n, err, errlen)) != 0)
		return rc;
	a = dml_xcalloc(1, sizeof(*a));
	a->be = env->be;
	a->ctx = env->be_ctx;
	a->seed = spec->seed;
	a->walk.key = spec->seed ^ STREAM_SHUFFLE;
	a->dim = sizes[0];
	a->classes = sizes[n - 1];
	a->batch = a->norm = spec->batch_size;
	/* Sized once for the largest batch a rate split may give: the
	 * device buffers then never move while pushes are in flight. */
	a->batch_cap = (uint32_t)dml_job_batch_max(spec);
	a->nlayers = n - 1;
	a->metric_loss = spec->metric && strcmp(spec->metric, "loss") == 0;
	for (size_t l = 0; l < a->nlayers; l++) {
		a->layers[l].in = sizes[l];
		a->layers[l].out = sizes[l + 1];
		a->tables[l] = (struct dml_app_table){ .id = (uint32_t)l, .dense = 1,
						       .width = sizes[l] + 1,
						       .keys = sizes[l + 1] };
	}
	for (size_t l = 0; l < n; l++)
		widest = sizes[l] > widest ? sizes[l] : widest;
	/* Evaluation goes in chunks larger than a batch where they fit. */
	a->rows_cap = BATCH_FLOATS_MAX / widest < EVAL_CHUNK ? BATCH_FLOATS_MAX / widest :
							      EVAL_CHUNK;
	a->rows_cap = a->rows_cap > a->batch_cap ? a->rows_cap : a->batch_cap;
	if ((rc = mlp_data(a, spec, err, errlen)) != 0) {
		mlp_destroy(a);
		return rc;
	}
	if (mlp_buffers(a) != 0) {
		mlp_destroy(a);
		return fail(err, errlen, DML_ENOMEM, "out of %s memory for the layers and a "
			    "batch of %" PRIu32, env->be->name, a->batch_cap);
	}
	*state = a;
	return 0;
}

static size_t mlp_tables(const void *state, const struct dml_app_table **out)
{
	const struct mlp *a = state;

	*out = a->tables;
	return a->nlayers;
}

static int mlp_set_partitions(void *state, const uint32_t *parts, size_t n,
			      uint32_t num_partitions, char *err, size_t errlen)
{
	struct mlp *a = state;

	return dml_walk_set(&a->walk, "mlp", a->train.n, parts, n, num_partitions, err,
			    errlen);
}

static struct dml_walk *mlp_walk(void *state)
{
	return &((struct mlp *)state)->walk;
}

/* ---- steps ----------------------------------------------------------------- */

static int io_fail(char *err, size_t errlen, int rc, const char *what, size_t l)
{
	snprintf(err, errlen, "%s table %zu: %s", what, l, dml_strerror(rc));
	return rc;
}

/* Issue every layer's pull; on failure, wait for those already issued. */
static int pulls_issue(const struct mlp *a, struct dml_app_io *io, dml_handle_t *h,
		       char *err, size_t errlen)
{
	for (size_t l = 0; l < a->nlayers; l++) {
		const struct layer *y = &a->layers[l];
		int rc = io->ops->pull_range(io->arg, (uint32_t)l, 0, y->out, y->hw, &h[l]);

		if (rc) {
			for (size_t k = 0; k < l; k++)
				dml_app_wait(io, h[k]);
			return io_fail(err, errlen, rc, "pull of", l);
		}
	}
	return 0;
}

/*
 * Wait for every layer's pull; as each lands, move it to the device and
 * (rows > 0) run the layer forward. Returns the first failure, having
 * waited for all of them still.
 */
static int pulls_land(const struct mlp *a, struct dml_app_io *io, const dml_handle_t *h,
		      size_t rows, int rc, char *err, size_t errlen)
{
	for (size_t l = 0; l < a->nlayers; l++) {
		const struct layer *y = &a->layers[l];
		int r = dml_app_wait(io, h[l]);

		if (rc)
			continue;
		if (r) {
			rc = io_fail(err, errlen, r, "pull of", l);
			continue;
		}
		rc = stage_up(a, y->w, y->hw, layer_floats(y));
		if (!rc && rows)
			rc = layer_forward(a, l, rows);
		be_fail(a, rc, err, errlen);
	}
	return rc;
}

/* The batch's rows of features and labels from staging to the device. */
static int batch_up(const struct mlp *a, size_t rows)
{
	int rc = stage_up(a, a->x, a->hx, rows * a->dim);

	return rc ? rc : stage_up(a, a->y, a->hy, rows);
}

/* rows training records into the batch buffers, on their way to the device. */
static int batch_fill(struct mlp *a, size_t rows, char *err, size_t errlen)
{
	const uint64_t *recs = dml_walk_batch(&a->walk, rows);

	if (!recs)
		return fail(err, errlen, DML_ENOMEM, "out of memory for a batch");
	for (size_t k = 0; k < rows; k++)
		data_record(a, &a->train, recs[k], a->hx + k * a->dim, &a->hy[k]);
	dml_walk_advance(&a->walk);
	return be_fail(a, batch_up(a, rows), err, errlen);
}

/* From the logits' gradient down: push each layer's gradient, waited for. */
/*
 * Wait for layer l's push of an earlier step, if still in flight: its
 * gradient buffers are about to be written again.
 */
static int push_land(struct mlp *a, struct dml_app_io *io, size_t l, char *err,
		     size_t errlen)
{
	dml_handle_t h = a->pushing[l];
	int rc;

	if (!h)
		return 0;
	a->pushing[l] = 0;
	if ((rc = dml_app_wait(io, h)) != 0)
		return io_fail(err, errlen, rc, "push to", l);
	return 0;
}

/*
 * From the last layer down: its gradient, its push (left in flight: the
 * next step or drain waits for it), and while the push travels, the
 * gradient of its input.
 */
static int backward(struct mlp *a, struct dml_app_io *io, size_t rows, char *err,
		    size_t errlen)
{
	int rc;

	for (size_t l = a->nlayers; l-- > 0;) {
		const struct layer *y = &a->layers[l];

		if ((rc = push_land(a, io, l, err, errlen)) != 0 ||
		    (rc = be_fail(a, layer_gradient(a, l, rows), err, errlen)) != 0)
			return rc;
		rc = io->ops->push_range(io->arg, (uint32_t)l, 0, y->out, y->hg,
					 &a->pushing[l]);
		if (rc) {
			a->pushing[l] = 0;
			return io_fail(err, errlen, rc, "push to", l);
		}
		if (l > 0 && (rc = be_fail(a, layer_backward(a, l, rows), err, errlen)) != 0)
			return rc;
	}
	return 0;
}

static int mlp_drain(void *state, struct dml_app_io *io, char *err, size_t errlen)
{
	struct mlp *a = state;
	int rc = 0;

	for (size_t l = 0; l < a->nlayers; l++) {
		int r = push_land(a, io, l, err, rc ? 0 : errlen);

		rc = rc ? rc : r;
	}
	return rc;
}

static int mlp_step(void *state, struct dml_app_io *io, struct dml_app_step *out, char *err,
		    size_t errlen)
{
	struct mlp *a = state;
	size_t rows = a->walk.total ? a->batch : 0;
	dml_handle_t pulls[LAYERS_MAX];
	double loss = 0;
	uint64_t correct = 0;
	int rc;

	out->examples = 0;
	out->loss = NAN;
	/* Even without data, pull: it keeps this worker within the staleness
	 * bound instead of racing through its clocks. */
	if ((rc = pulls_issue(a, io, pulls, err, errlen)) != 0)
		return rc;
	if (rows)
		rc = batch_fill(a, rows, err, errlen);
	rc = pulls_land(a, io, pulls, rows, rc, err, errlen);
	if (rc || !rows)
		return rc;
	rc = a->be->softmax_xent(a->ctx, a->layers[a->nlayers - 1].h, a->y, rows, a->classes,
				 1.0f / (float)a->norm, a->layers[a->nlayers - 1].h, &loss,
				 &correct);
	if ((rc = be_fail(a, rc, err, errlen)) != 0)
		return rc;
	if ((rc = backward(a, io, rows, err, errlen)) != 0)
		return rc;
	out->examples = rows;
	out->loss = loss / (double)rows;
	return 0;
}

/* Its buffers hold batch_cap rows from the start: nothing to grow. */
static int mlp_set_batch(void *state, uint32_t batch, char *err, size_t errlen)
{
	struct mlp *a = state;

	if (batch < 1 || batch > a->batch_cap)
		return fail(err, errlen, DML_EINVAL, "a batch of %" PRIu32 " examples is "
			    "outside 1..%" PRIu32, batch, a->batch_cap);
	a->batch = batch;
	return 0;
}

static int mlp_evaluate(void *state, struct dml_app_io *io, double *value, char *err,
			size_t errlen)
{
	struct mlp *a = state;
	dml_handle_t pulls[LAYERS_MAX];
	double loss = 0;
	uint64_t correct = 0;
	int rc;

	if ((rc = pulls_issue(a, io, pulls, err, errlen)) != 0 ||
	    (rc = pulls_land(a, io, pulls, 0, 0, err, errlen)) != 0)
		return rc;
	for (uint64_t pos = 0; pos < a->eval_n && !rc; pos += a->rows_cap) {
		size_t rows = (size_t)(a->eval_n - pos < a->rows_cap ? a->eval_n - pos :
				       a->rows_cap);

		for (size_t k = 0; k < rows; k++)
			data_record(a, a->eval, pos + k, a->hx + k * a->dim, &a->hy[k]);
		rc = batch_up(a, rows);
		for (size_t l = 0; l < a->nlayers && !rc; l++)
			rc = layer_forward(a, l, rows);
		if (!rc)
			rc = a->be->softmax_xent(a->ctx, a->layers[a->nlayers - 1].h, a->y, rows,
						 a->classes, 0.0f, NULL, &loss, &correct);
	}
	if ((rc = be_fail(a, rc, err, errlen)) != 0)
		return rc;
	*value = a->metric_loss ? loss / (double)a->eval_n :
				  (double)correct / (double)a->eval_n;
	return 0;
}

static uint64_t mlp_data_examples(const void *state)
{
	return ((const struct mlp *)state)->train.n;
}

const struct dml_app dml_app_mlp = {
	.name = "mlp",
	.metric = "accuracy",
	.default_eval_every = DEFAULT_EVAL_EVERY,
	.profile_job = "[job]\nname = profile\napp = mlp\ndata = synthetic\nexamples = 2000\n"
		       "max_clocks = 1\ndim = 64\nhidden = 32\nbatch_size = 64\n"
		       "[table]\nid = 0\nkind = dense\nkeys = 32\nwidth = 65\n"
		       "[table]\nid = 1\nkind = dense\nkeys = 4\nwidth = 33\n",
	.create = mlp_create,
	.tables = mlp_tables,
	.set_partitions = mlp_set_partitions,
	.walk = mlp_walk,
	.set_batch = mlp_set_batch,
	.step = mlp_step,
	.evaluate = mlp_evaluate,
	.drain = mlp_drain,
	.data_examples = mlp_data_examples,
	.destroy = mlp_destroy,
};
