/*
 * check_mlp.c - the cpu compute backend and the mlp app.
 *
 * Backend: every op of the cpu backend against a naive double-precision
 * reference on odd sizes (all transpose combinations of gemm, leading
 * dimensions wider than the columns, whose padding must stay untouched);
 * softmax_xent's loss, hits and gradient, in place too, and its refusal of
 * bad labels; the registry of backends.
 *
 * mlp: the pushed gradients against central finite differences of the
 * step's own loss (softmax regression and a net of two hidden layers), with
 * a recording io that serves fixed parameters and keeps what is pushed;
 * the same step through a backend that is not unified (staging buffers,
 * uploads, downloads); specs it refuses, each with its reason; IDX data
 * written here (losses and accuracy against a double-precision forward
 * pass, dim and label errors); partitions visited once per pass in a new,
 * seeded order; SGD on the pushed gradients learning the synthetic task;
 * io failures that leave nothing in flight; the profile job; and
 * Fashion-MNIST's test set when the Debian dataset package is installed.
 */
#define _GNU_SOURCE
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "app_test.h"
#include "backend.h"
#include "check_run.h"
#include "data_idx.h"
#include "dml_error.h"
#include "job_spec.h"
#include "tmpdir.h"

#define FASHION "/usr/share/datasets/fashion-mnist/"
#define TABLES (DML_MLP_HIDDEN_MAX + 1)
#define PAD 12345.0f

/* ---- helpers ------------------------------------------------------------- */

static uint64_t g_rng = 1;

/* Uniform in [lo, hi), from a fixed sequence (splitmix64). */
static float rnd(float lo, float hi)
{
	uint64_t z = (g_rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	z ^= z >> 31;
	return lo + (hi - lo) * (float)((double)(z >> 40) / 16777216.0);
}

static float *floats(size_t n)
{
	float *p = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(p);
	return p;
}

/* A cpu backend context on one thread (results do not depend on timing). */
static void *cpu_open(void)
{
	struct dml_backend_conf conf = { .threads = 1 };
	void *ctx = NULL;
	char err[128];

	ck_assert_int_eq(dml_backend_cpu.open(&conf, &ctx, err, sizeof(err)), 0);
	ck_assert_ptr_nonnull(ctx);
	ck_assert_str_eq(dml_backend_cpu.error(ctx), "");
	return ctx;
}

/*
 * An mlp job: sizes[0] = dim, then the hidden layers, then the classes (n
 * sizes); a table per layer as the app wants it; extra job lines after.
 */
static Dml__JobSpec *spec_make(const uint32_t *sizes, size_t n, const char *data,
			       const char *extra)
{
	char text[4096], hidden[128] = "";
	size_t len = 0, hl = 0;

	for (size_t l = 1; l + 1 < n; l++)
		hl += (size_t)snprintf(hidden + hl, sizeof(hidden) - hl, "%s%u", l > 1 ? "," : "",
				       sizes[l]);
	len += (size_t)snprintf(text, sizeof(text), "[job]\nname = t\napp = mlp\nmax_clocks = "
				"10\ndim = %u\ndata = %s\n%s%s%s%s", sizes[0], data,
				hl ? "hidden = " : "", hidden, hl ? "\n" : "", extra);
	for (size_t l = 0; l + 1 < n; l++)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "[table]\nid = %zu\n"
					"kind = dense\nkeys = %u\nwidth = %u\n", l, sizes[l + 1],
					sizes[l] + 1);
	ck_assert_uint_lt(len, sizeof(text));
	return app_test_spec(text);
}

/* ---- a recording io ------------------------------------------------------ */

/*
 * Pulls serve w[table]; pushes are kept in g[table] (and, with lr > 0,
 * applied as plain SGD). Handles are 1 + table for pulls, 101 + table for
 * pushes; the requests in flight are counted.
 */
struct tio {
	float *w[TABLES], *g[TABLES];
	size_t len[TABLES];
	size_t ntables;
	float lr;
	int pulls, pushes, in_flight;
	int fail_pull, fail_push, fail_wait;   /* a handle's table + 1, or 0 */
	const float *pushed_from[TABLES];
};

static void tio_init(struct tio *t, const struct dml_app *app, const void *state)
{
	const struct dml_app_table *tab;

	memset(t, 0, sizeof(*t));
	t->ntables = app->tables(state, &tab);
	ck_assert_uint_le(t->ntables, TABLES);
	for (size_t i = 0; i < t->ntables; i++) {
		ck_assert_uint_eq(tab[i].id, i);
		ck_assert(tab[i].dense);
		t->len[i] = (size_t)tab[i].keys * tab[i].width;
		t->w[i] = calloc(t->len[i], sizeof(float));
		t->g[i] = calloc(t->len[i], sizeof(float));
		ck_assert(t->w[i] && t->g[i]);
	}
}

static void tio_free(struct tio *t)
{
	for (size_t i = 0; i < t->ntables; i++) {
		free(t->w[i]);
		free(t->g[i]);
	}
}

/* The table's floats for keys [begin, end): the whole table, always here. */
static size_t tio_range(struct tio *t, uint32_t table, uint64_t begin, uint64_t end)
{
	ck_assert_uint_lt(table, t->ntables);
	ck_assert_uint_eq(begin, 0);
	ck_assert_uint_eq(t->len[table] % end, 0);
	return t->len[table];
}

static int tio_pull_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			  float *out, dml_handle_t *h)
{
	struct tio *t = arg;
	size_t n = tio_range(t, table, begin, end);

	if (t->fail_pull == (int)table + 1)
		return DML_ECONN;
	memcpy(out, t->w[table], n * sizeof(float));
	t->pulls++;
	t->in_flight++;
	*h = 1 + table;
	return 0;
}

static int tio_push_range(void *arg, uint32_t table, uint64_t begin, uint64_t end,
			  const float *vals, dml_handle_t *h)
{
	struct tio *t = arg;
	size_t n = tio_range(t, table, begin, end);

	if (t->fail_push == (int)table + 1)
		return DML_ETIMEDOUT;
	memcpy(t->g[table], vals, n * sizeof(float));
	for (size_t i = 0; t->lr > 0 && i < n; i++)
		t->w[table][i] -= t->lr * vals[i];
	t->pushed_from[table] = vals;
	t->pushes++;
	t->in_flight++;
	*h = 101 + table;
	return 0;
}

static int tio_pull(void *arg, uint32_t table, const uint64_t *keys, size_t n, float *out,
		    dml_handle_t *h)
{
	ck_abort_msg("the mlp pulls ranges only");
	return DML_EINVAL;
}

static int tio_push(void *arg, uint32_t table, const uint64_t *keys, size_t n,
		    const float *vals, dml_handle_t *h)
{
	ck_abort_msg("the mlp pushes ranges only");
	return DML_EINVAL;
}

static int tio_wait(void *arg, dml_handle_t h)
{
	struct tio *t = arg;

	ck_assert(h >= 1 && h <= 100 + TABLES);
	t->in_flight--;
	ck_assert_int_ge(t->in_flight, 0);
	return t->fail_wait && (int)h == t->fail_wait ? DML_ECONN : 0;
}

static const struct dml_app_io_ops tio_ops = {
	tio_pull_range, tio_push_range, tio_pull, tio_push, tio_wait
};

/*
 * One step that must succeed, leaving no pull in flight and at most its
 * pushes (one per table), then drained; its loss.
 */
static double step_ok(const struct dml_app *app, void *state, struct tio *t, size_t rows)
{
	struct dml_app_io io = { &tio_ops, t, 0 };
	struct dml_app_step st;
	char err[256] = "";

	ck_assert_msg(app->step(state, &io, &st, err, sizeof(err)) == 0, "step: %s", err);
	ck_assert_int_le(t->in_flight, (int)t->ntables);
	ck_assert_msg(app->drain(state, &io, err, sizeof(err)) == 0, "drain: %s", err);
	ck_assert_int_eq(t->in_flight, 0);
	ck_assert_uint_eq(st.examples, rows);
	return st.loss;
}

static double evaluate_ok(const struct dml_app *app, void *state, struct tio *t)
{
	struct dml_app_io io = { &tio_ops, t, 0 };
	char err[256] = "";
	double v = NAN;

	ck_assert_msg(app->evaluate(state, &io, &v, err, sizeof(err)) == 0, "evaluate: %s",
		      err);
	ck_assert_int_eq(t->in_flight, 0);
	return v;
}

/* ---- the backend: reference checks --------------------------------------- */

START_TEST(test_backend_registry)
{
	ck_assert_ptr_eq(dml_backend_find("cpu"), &dml_backend_cpu);
	ck_assert_ptr_null(dml_backend_find("tpu"));
	ck_assert_ptr_null(dml_backend_find(NULL));
	ck_assert_str_eq(dml_backend_names[0], "cpu");
	for (size_t i = 0; dml_backend_names[i]; i++)
		ck_assert_str_eq(dml_backend_find(dml_backend_names[i])->name,
				 dml_backend_names[i]);
	ck_assert(dml_backend_cpu.unified);
}
END_TEST

START_TEST(test_cpu_buffers)
{
	const struct dml_backend_ops *be = &dml_backend_cpu;
	void *ctx = cpu_open();
	float *dev, *host, *back;
	struct dml_backend_conf conf = { .threads = 0 };
	void *ctx2 = NULL;
	char err[64];

	ck_assert_int_eq(be->alloc(ctx, 1001, &dev), 0);
	ck_assert_int_eq(be->host_alloc(ctx, 1001, &host), 0);
	ck_assert_int_eq(be->host_alloc(ctx, 1001, &back), 0);
	ck_assert_uint_eq((uintptr_t)dev % 64, 0);
	ck_assert_uint_eq((uintptr_t)host % 64, 0);
	for (int i = 0; i < 1001; i++)
		host[i] = (float)i * 0.5f;
	ck_assert_int_eq(be->upload(ctx, dev, host, 1001), 0);
	ck_assert_int_eq(be->download(ctx, back, dev, 1001), 0);
	ck_assert_int_eq(be->sync(ctx), 0);
	ck_assert(memcmp(host, back, 1001 * sizeof(float)) == 0);
	be->free(ctx, dev);
	be->host_free(ctx, host);
	be->host_free(ctx, back);
	/* Zero floats is a valid buffer; absurd sizes are refused. */
	ck_assert_int_eq(be->alloc(ctx, 0, &dev), 0);
	ck_assert_ptr_nonnull(dev);
	be->free(ctx, dev);
	ck_assert_int_eq(be->alloc(ctx, SIZE_MAX / 2, &dev), DML_ENOMEM);
	ck_assert_ptr_null(dev);
	ck_assert(strstr(be->error(ctx), "alloc") != NULL);
	be->free(ctx, NULL);
	be->close(ctx);
	be->close(NULL);
	/* threads = 0 leaves OpenBLAS as it is. */
	ck_assert_int_eq(be->open(&conf, &ctx2, err, sizeof(err)), 0);
	be->close(ctx2);
}
END_TEST

/* c = alpha op(a) op(b) + beta c in double; a, b, c stored with lda, ldb, ldc. */
static void ref_gemm(int ta, int tb, size_t m, size_t n, size_t k, double alpha,
		     const float *a, size_t lda, const float *b, size_t ldb, double beta,
		     const float *c, size_t ldc, double *out, double *mag)
{
	for (size_t i = 0; i < m; i++) {
		for (size_t j = 0; j < n; j++) {
			double s = 0, s_abs = 0;

			for (size_t p = 0; p < k; p++) {
				double x = ta ? a[p * lda + i] : a[i * lda + p];
				double y = tb ? b[j * ldb + p] : b[p * ldb + j];

				s += x * y;
				s_abs += fabs(x * y);
			}
			out[i * n + j] = alpha * s + beta * c[i * ldc + j];
			mag[i * n + j] = fabs(alpha) * s_abs + fabs(beta * c[i * ldc + j]);
		}
	}
}

/* A rows x cols matrix with row stride ld: values, and PAD beyond cols. */
static float *matrix(size_t rows, size_t cols, size_t ld)
{
	float *x = floats(rows * ld);

	for (size_t r = 0; r < rows; r++)
		for (size_t j = 0; j < ld; j++)
			x[r * ld + j] = j < cols ? rnd(-1, 1) : PAD;
	return x;
}

static void assert_padding(const float *x, size_t rows, size_t cols, size_t ld)
{
	for (size_t r = 0; r < rows; r++)
		for (size_t j = cols; j < ld; j++)
			ck_assert_msg(x[r * ld + j] == PAD, "padding [%zu][%zu] written", r, j);
}

static void check_gemm(void *ctx, int ta, int tb, size_t m, size_t n, size_t k)
{
	size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
	size_t lda = ac + 3, ldb = bc + 1, ldc = n + 2;
	float *a = matrix(ar, ac, lda), *b = matrix(br, bc, ldb), *c = matrix(m, n, ldc);
	double *want = malloc(m * n * sizeof(double)), *mag = malloc(m * n * sizeof(double));

	ck_assert(want && mag);
	ref_gemm(ta, tb, m, n, k, 0.75, a, lda, b, ldb, -0.5, c, ldc, want, mag);
	ck_assert_int_eq(dml_backend_cpu.gemm(ctx, ta, tb, m, n, k, 0.75f, a, lda, b, ldb,
					      -0.5f, c, ldc), 0);
	for (size_t i = 0; i < m; i++)
		for (size_t j = 0; j < n; j++)
			ck_assert_msg(fabs(c[i * ldc + j] - want[i * n + j]) <=
				      1e-6 * (1 + mag[i * n + j]) * (double)(k + 1),
				      "gemm %d%d %zux%zux%zu [%zu][%zu]: %g, want %g", ta, tb, m,
				      n, k, i, j, c[i * ldc + j], want[i * n + j]);
	assert_padding(c, m, n, ldc);
	free(a);
	free(b);
	free(c);
	free(want);
	free(mag);
}

START_TEST(test_cpu_gemm)
{
	static const size_t sizes[][3] = {
		{ 7, 5, 3 }, { 13, 17, 11 }, { 1, 9, 1 }, { 9, 1, 7 }, { 33, 65, 129 },
	};
	void *ctx = cpu_open();

	for (size_t s = 0; s < DML_ARRAY_LEN(sizes); s++)
		for (int t = 0; t < 4; t++)
			check_gemm(ctx, t & 1, t >> 1, sizes[s][0], sizes[s][1], sizes[s][2]);
	dml_backend_cpu.close(ctx);
}
END_TEST

START_TEST(test_cpu_gemm_refuses)
{
	const struct dml_backend_ops *be = &dml_backend_cpu;
	void *ctx = cpu_open();
	float a[16] = { 0 }, b[16] = { 0 }, c[16] = { 0 };

	/* A leading dimension shorter than the stored rows. */
	ck_assert_int_eq(be->gemm(ctx, 0, 0, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2), DML_EINVAL);
	ck_assert_msg(strstr(be->error(ctx), "lda 2 for 3 columns") != NULL, "%s",
		      be->error(ctx));
	ck_assert_int_eq(be->gemm(ctx, 1, 0, 3, 2, 2, 1, a, 2, b, 2, 0, c, 2), DML_EINVAL);
	ck_assert_int_eq(be->gemm(ctx, 0, 1, 2, 3, 2, 1, a, 2, b, 1, 0, c, 3), DML_EINVAL);
	ck_assert(strstr(be->error(ctx), "ldb 1 for 2 columns") != NULL);
	ck_assert_int_eq(be->gemm(ctx, 0, 0, 2, 3, 2, 1, a, 2, b, 3, 0, c, 2), DML_EINVAL);
	ck_assert(strstr(be->error(ctx), "ldc 2 for 3 columns") != NULL);
	/* Sizes that do not fit cblas's int never reach it. */
	ck_assert_int_eq(be->gemm(ctx, 0, 0, (size_t)INT32_MAX + 1, 1, 1, 1, a, 1, b, 1, 0, c,
				  1), DML_EINVAL);
	ck_assert(strstr(be->error(ctx), "does not fit int") != NULL);
	ck_assert_int_eq(be->gemm(ctx, 0, 0, 1, 1, 1, 1, a, (size_t)INT32_MAX + 1, b, 1, 0, c,
				  1), DML_EINVAL);
	/* Nothing was written. */
	for (int i = 0; i < 16; i++)
		ck_assert(c[i] == 0);
	be->close(ctx);
}
END_TEST

START_TEST(test_cpu_bias_act)
{
	enum { ROWS = 5, COLS = 300, LDH = 303, STRIDE = 3 };  /* over one 256 block */
	void *ctx = cpu_open();
	float *bias = floats(COLS * STRIDE);

	for (size_t j = 0; j < COLS * STRIDE; j++)
		bias[j] = rnd(-1, 1);
	for (int relu = 0; relu < 2; relu++) {
		float *h = matrix(ROWS, COLS, LDH), *h0 = floats(ROWS * LDH);

		memcpy(h0, h, ROWS * LDH * sizeof(float));
		ck_assert_int_eq(dml_backend_cpu.bias_act(ctx, h, ROWS, COLS, LDH, bias, STRIDE,
							  relu), 0);
		for (size_t r = 0; r < ROWS; r++) {
			for (size_t j = 0; j < COLS; j++) {
				double want = (double)h0[r * LDH + j] + bias[j * STRIDE];

				if (relu && want < 0)
					want = 0;
				ck_assert(fabs(h[r * LDH + j] - want) < 1e-6);
			}
		}
		assert_padding(h, ROWS, COLS, LDH);
		free(h);
		free(h0);
	}
	free(bias);
	dml_backend_cpu.close(ctx);
}
END_TEST

START_TEST(test_cpu_relu_grad)
{
	enum { ROWS = 7, COLS = 37, LD = 40 };
	void *ctx = cpu_open();
	float *h = matrix(ROWS, COLS, LD), *dh = matrix(ROWS, COLS, LD);
	float *dh0 = floats(ROWS * LD);

	h[3] = 0;   /* exactly 0: blocked like a negative one */
	memcpy(dh0, dh, ROWS * LD * sizeof(float));
	ck_assert_int_eq(dml_backend_cpu.relu_grad(ctx, dh, h, ROWS, COLS, LD), 0);
	for (size_t i = 0; i < ROWS; i++)
		for (size_t j = 0; j < COLS; j++)
			ck_assert(dh[i * LD + j] == (h[i * LD + j] > 0 ? dh0[i * LD + j] : 0.0f));
	assert_padding(dh, ROWS, COLS, LD);
	free(h);
	free(dh);
	free(dh0);
	dml_backend_cpu.close(ctx);
}
END_TEST

START_TEST(test_cpu_col_sum)
{
	enum { ROWS = 9, COLS = 270, LD = 273, STRIDE = 2 };
	void *ctx = cpu_open();
	float *dh = matrix(ROWS, COLS, LD), *out = floats(COLS * STRIDE);

	for (size_t j = 0; j < COLS * STRIDE; j++)
		out[j] = PAD;
	ck_assert_int_eq(dml_backend_cpu.col_sum(ctx, dh, ROWS, COLS, LD, 0.5f, out, STRIDE),
			 0);
	for (size_t j = 0; j < COLS; j++) {
		double s = 0;

		for (size_t r = 0; r < ROWS; r++)
			s += dh[r * LD + j];
		ck_assert_msg(fabs(out[j * STRIDE] - 0.5 * s) < 1e-5, "column %zu", j);
		ck_assert(out[j * STRIDE + 1] == PAD);
	}
	/* Overwritten, not accumulated. */
	ck_assert_int_eq(dml_backend_cpu.col_sum(ctx, dh, 0, COLS, LD, 1, out, STRIDE), 0);
	for (size_t j = 0; j < COLS; j++)
		ck_assert(out[j * STRIDE] == 0);
	free(dh);
	free(out);
	dml_backend_cpu.close(ctx);
}
END_TEST

/* Loss, hits and scale * (softmax - onehot) of logits in double. */
static void ref_softmax(const float *z, const float *labels, size_t rows, size_t classes,
			double scale, double *loss, uint64_t *correct, double *d)
{
	*loss = 0;
	*correct = 0;
	for (size_t r = 0; r < rows; r++) {
		const float *x = z + r * classes;
		size_t y = (size_t)labels[r], top = 0;
		double s = 0;

		for (size_t j = 1; j < classes; j++)
			top = x[j] > x[top] ? j : top;
		for (size_t j = 0; j < classes; j++)
			s += exp((double)x[j] - x[top]);
		*loss += log(s) - ((double)x[y] - x[top]);
		*correct += top == y;
		for (size_t j = 0; j < classes; j++)
			d[r * classes + j] = scale * (exp((double)x[j] - x[top]) / s - (j == y));
	}
}

START_TEST(test_cpu_softmax_xent)
{
	enum { ROWS = 6, CLASSES = 7 };
	const struct dml_backend_ops *be = &dml_backend_cpu;
	void *ctx = cpu_open();
	float z[ROWS * CLASSES], labels[ROWS] = { 0, 6, 3, 3, 1, 5 }, d[ROWS * CLASSES];
	float bad[][ROWS] = {
		{ 0, 6, 3, 7, 1, 5 }, { 0, -1, 3, 3, 1, 5 }, { 0, 6, 2.5f, 3, 1, 5 },
		{ 0, 6, 3, 3, NAN, 5 },
	};
	double want_loss, want_d[ROWS * CLASSES], loss = 0.25;
	uint64_t want_correct, correct = 3;

	for (size_t i = 0; i < ROWS * CLASSES; i++)
		z[i] = rnd(-4, 4);
	/* Large logits (a naive exp overflows), a hit, and a tie that goes to
	 * the first largest. */
	for (size_t j = 0; j < CLASSES; j++)
		z[CLASSES + j] = 1000.0f + (float)j;
	z[2 * CLASSES + 3] = 9;
	z[3 * CLASSES + 2] = 9;
	z[3 * CLASSES + 3] = 9;
	ref_softmax(z, labels, ROWS, CLASSES, 0.125, &want_loss, &want_correct, want_d);
	ck_assert_uint_ge(want_correct, 2);
	ck_assert_int_eq(be->softmax_xent(ctx, z, labels, ROWS, CLASSES, 0.125f, d, &loss,
					  &correct), 0);
	/* Added to what was there. */
	ck_assert_msg(fabs(loss - 0.25 - want_loss) < 1e-5 * want_loss, "loss %g, want %g",
		      loss - 0.25, want_loss);
	ck_assert_uint_eq(correct, 3 + want_correct);
	for (size_t i = 0; i < ROWS * CLASSES; i++)
		ck_assert(fabs(d[i] - want_d[i]) < 1e-7);
	/* Without a gradient; and in place. */
	loss = 0;
	correct = 0;
	ck_assert_int_eq(be->softmax_xent(ctx, z, labels, ROWS, CLASSES, 1, NULL, &loss,
					  &correct), 0);
	ck_assert(fabs(loss - want_loss) < 1e-5 * want_loss);
	ck_assert_uint_eq(correct, want_correct);
	ck_assert_int_eq(be->softmax_xent(ctx, z, labels, ROWS, CLASSES, 0.125f, z, &loss,
					  &correct), 0);
	for (size_t i = 0; i < ROWS * CLASSES; i++)
		ck_assert(fabs(z[i] - want_d[i]) < 1e-7);
	/* A label that is not a class: refused, nothing added or written. */
	for (size_t b = 0; b < DML_ARRAY_LEN(bad); b++) {
		loss = 1;
		correct = 1;
		memcpy(d, z, sizeof(d));
		ck_assert_int_eq(be->softmax_xent(ctx, z, bad[b], ROWS, CLASSES, 1, d, &loss,
						  &correct), DML_EINVAL);
		ck_assert(loss == 1 && correct == 1);
		ck_assert(memcmp(d, z, sizeof(d)) == 0);
		ck_assert_msg(strstr(be->error(ctx), "is not a class of 0..6") != NULL, "%s",
			      be->error(ctx));
	}
	be->close(ctx);
}
END_TEST

/* ---- the mlp: gradients -------------------------------------------------- */

static void fill_params(struct tio *t, float scale)
{
	for (size_t i = 0; i < t->ntables; i++)
		for (size_t j = 0; j < t->len[i]; j++)
			t->w[i][j] = rnd(-scale, scale);
}

/*
 * A net of sizes on 16 synthetic examples with batch_size 16 (every step
 * sees them all), parameters drawn uniformly, and one step taken: its loss
 * and pushed gradients kept.
 */
struct one_step {
	Dml__JobSpec *spec;
	struct dml_app_env env;
	void *state;
	struct tio t;
	float *grad[TABLES];
	double loss;
};

static void one_step_open(struct one_step *o, const uint32_t *sizes, size_t n)
{
	o->spec = spec_make(sizes, n, "synthetic",
			    "batch_size = 16\nexamples = 16\nseed = 3\n");
	o->env = (struct dml_app_env){ "cpu", &dml_backend_cpu, cpu_open() };
	o->state = app_test_make(&dml_app_mlp, o->spec, &o->env);
	tio_init(&o->t, &dml_app_mlp, o->state);
	fill_params(&o->t, 1.0f);
	o->loss = step_ok(&dml_app_mlp, o->state, &o->t, 16);
	for (size_t i = 0; i < o->t.ntables; i++) {
		o->grad[i] = floats(o->t.len[i]);
		memcpy(o->grad[i], o->t.g[i], o->t.len[i] * sizeof(float));
	}
}

static void one_step_close(struct one_step *o)
{
	for (size_t i = 0; i < o->t.ntables; i++)
		free(o->grad[i]);
	tio_free(&o->t);
	dml_app_mlp.destroy(o->state);
	dml_backend_cpu.close(o->env.be_ctx);
	dml_job_spec_free(o->spec);
}

/*
 * Every pushed gradient of a net against central differences of the step's
 * loss. With examples = batch_size every step sees the whole data set, so
 * its loss is one function of the parameters.
 */
static void check_gradient(const uint32_t *sizes, size_t n)
{
	const struct dml_app *app = &dml_app_mlp;
	struct one_step o;
	struct tio *t = &o.t;
	double worst = 0;
	size_t checked = 0;

	one_step_open(&o, sizes, n);
	ck_assert(isfinite(o.loss) && o.loss > 0);
	ck_assert_int_eq(t->pulls, (int)t->ntables);
	ck_assert_int_eq(t->pushes, (int)t->ntables);
	/* The same parameters, the same loss, whatever the order of the rows. */
	ck_assert(fabs(step_ok(app, o.state, t, 16) - o.loss) < 1e-6);
	for (size_t i = 0; i < t->ntables; i++) {
		for (size_t j = 0; j < t->len[i]; j++) {
			/* 2^-9: small next to the curvature, large next to float noise
			 * in a loss of about 1 (1e-7 / 2e-3 = 5e-5). */
			const float eps = 1.0f / 512, w = t->w[i][j];
			float up = w + eps, down = w - eps;
			double lu, ld, fd, g = o.grad[i][j], rel;

			t->w[i][j] = up;
			lu = step_ok(app, o.state, t, 16);
			t->w[i][j] = down;
			ld = step_ok(app, o.state, t, 16);
			t->w[i][j] = w;
			fd = (lu - ld) / ((double)up - (double)down);
			rel = fabs(g - fd) / fmax(fabs(g) + fabs(fd), 2e-2);
			worst = fmax(worst, rel);
			ck_assert_msg(rel <= 1e-2, "table %zu [%zu]: gradient %g, differences %g",
				      i, j, g, fd);
			checked++;
		}
	}
	printf("check_mlp: %zu gradients of %s net, worst relative error %.2g\n", checked,
	       n > 2 ? "a hidden-layer" : "a softmax", worst);
	one_step_close(&o);
}

START_TEST(test_mlp_gradient_softmax)
{
	static const uint32_t sizes[] = { 5, 3 };

	check_gradient(sizes, 2);
}
END_TEST

START_TEST(test_mlp_gradient_hidden)
{
	static const uint32_t sizes[] = { 5, 4, 3, 3 };

	check_gradient(sizes, 4);
}
END_TEST

/*
 * A batch the scheduler gives (LB-BSP) pushes the summed gradient over
 * batch_size: with all 16 examples in every step, a batch of 48 sees each
 * three times and must push three times the gradient of a batch of 16, at
 * the same mean loss. Beyond 4 x batch_size a batch is refused.
 */
START_TEST(test_mlp_batch_split)
{
	static const uint32_t sizes[] = { 5, 4, 3 };
	const struct dml_app *app = &dml_app_mlp;
	struct one_step o;
	struct tio *t = &o.t;
	char err[256];

	one_step_open(&o, sizes, 3);
	ck_assert_int_eq(app->set_batch(o.state, 48, err, sizeof(err)), 0);
	ck_assert(fabs(step_ok(app, o.state, t, 48) - o.loss) < 1e-5);
	for (size_t i = 0; i < t->ntables; i++)
		for (size_t j = 0; j < t->len[i]; j++)
			ck_assert_msg(fabs(t->g[i][j] - 3 * o.grad[i][j]) <=
				      1e-5 * (1 + fabs(o.grad[i][j])), "table %zu [%zu]: %g, "
				      "not 3 x %g", i, j, t->g[i][j], o.grad[i][j]);
	ck_assert_int_eq(app->set_batch(o.state, 65, err, sizeof(err)), DML_EINVAL);
	ck_assert_msg(strstr(err, "outside 1..64") != NULL, "%s", err);
	one_step_close(&o);
}
END_TEST

/* ---- the mlp on a backend that is not unified ---------------------------- */

/*
 * The cpu backend dressed as a device with its own memory: device buffers
 * start as NaN (a missed upload shows), staging buffers are remembered (so
 * a test can tell that pushes come from them).
 */
static float *g_staging[64];
static size_t g_nstaging;

static int nan_alloc(void *ctx, size_t n, float **out)
{
	int rc = dml_backend_cpu.alloc(ctx, n, out);

	for (size_t i = 0; rc == 0 && i < n; i++)
		(*out)[i] = NAN;
	return rc;
}

static int staging_alloc(void *ctx, size_t n, float **out)
{
	int rc = dml_backend_cpu.alloc(ctx, n, out);

	if (rc == 0 && g_nstaging < DML_ARRAY_LEN(g_staging))
		g_staging[g_nstaging++] = *out;
	return rc;
}

static int is_staging(const float *p)
{
	for (size_t i = 0; i < g_nstaging; i++)
		if (g_staging[i] == p)
			return 1;
	return 0;
}

START_TEST(test_mlp_staged_backend)
{
	static const uint32_t sizes[] = { 6, 5, 4, 3 };
	const struct dml_app *app = &dml_app_mlp;
	Dml__JobSpec *spec = spec_make(sizes, 4, "synthetic",
				       "batch_size = 8\nexamples = 50\nseed = 9\n");
	struct dml_backend_ops staged = dml_backend_cpu;
	struct dml_app_env cpu = { "cpu", &dml_backend_cpu, cpu_open() };
	struct dml_app_env dev = { "staged", &staged, cpu_open() };
	void *a, *b;
	struct tio ta, tb;

	staged.unified = 0;
	staged.alloc = nan_alloc;
	staged.host_alloc = staging_alloc;
	a = app_test_make(&dml_app_mlp, spec, &cpu);
	b = app_test_make(&dml_app_mlp, spec, &dev);
	tio_init(&ta, app, a);
	tio_init(&tb, app, b);
	fill_params(&ta, 0.5f);
	for (size_t i = 0; i < ta.ntables; i++)
		memcpy(tb.w[i], ta.w[i], ta.len[i] * sizeof(float));
	/* Steps through a pass and a half: the same batches, losses, gradients. */
	ta.lr = tb.lr = 0.1f;
	for (int s = 0; s < 10; s++) {
		double la = step_ok(app, a, &ta, 8), lb = step_ok(app, b, &tb, 8);

		ck_assert_msg(fabs(la - lb) < 1e-6, "step %d: %g vs %g", s, la, lb);
		for (size_t i = 0; i < ta.ntables; i++) {
			ck_assert(is_staging(tb.pushed_from[i]));
			ck_assert(!is_staging(ta.pushed_from[i]));
			for (size_t j = 0; j < ta.len[i]; j++)
				ck_assert(fabs(ta.g[i][j] - tb.g[i][j]) < 1e-6);
		}
	}
	ck_assert(fabs(evaluate_ok(app, a, &ta) - evaluate_ok(app, b, &tb)) < 1e-12);
	tio_free(&ta);
	tio_free(&tb);
	app->destroy(a);
	app->destroy(b);
	dml_backend_cpu.close(cpu.be_ctx);
	dml_backend_cpu.close(dev.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- the mlp: specs it refuses ------------------------------------------- */

static void expect_refused(const Dml__JobSpec *spec, const struct dml_app_env *env,
			   int code, const char *why)
{
	app_test_refused(&dml_app_mlp, spec, env, code, why);
}

START_TEST(test_mlp_refuses_bad_specs)
{
	static const uint32_t sizes[] = { 5, 4, 3, 3 };
	Dml__JobSpec *spec = spec_make(sizes, 4, "synthetic", "batch_size = 16\n");
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	struct dml_app_env none = { "cpu", NULL, NULL };
	char *data = spec->data, *hidden = spec->hidden, *metric = spec->metric;
	char *test_data = spec->test_data;
	Dml__TableSpec *t2 = spec->tables[2];

	expect_refused(spec, NULL, DML_EINVAL, "no compute backend");
	expect_refused(spec, &none, DML_EINVAL, "no compute backend");
	/* The strings are borrowed for a call and the parser's put back. */
	spec->metric = (char *)"f1";
	expect_refused(spec, &env, DML_EINVAL, "metric 'f1' is not one of loss, accuracy");
	spec->metric = metric;
	spec->data = (char *)"mnist";
	expect_refused(spec, &env, DML_EINVAL, "data 'mnist' is not IMAGES,LABELS");
	spec->data = (char *)"a,b,c";
	expect_refused(spec, &env, DML_EINVAL, "data 'a,b,c' is not IMAGES,LABELS");
	spec->data = (char *)"images, ";
	expect_refused(spec, &env, DML_EINVAL, "the labels file is missing");
	spec->data = (char *)"no-such-images.idx,no-such-labels.idx";
	expect_refused(spec, &env, DML_EINVAL, "no-such-images.idx: ");
	spec->data = data;
	spec->examples = 0;
	expect_refused(spec, &env, DML_EINVAL, "synthetic data needs examples >= 1");
	spec->examples = 100;
	spec->test_data = (char *)"x";
	expect_refused(spec, &env, DML_EINVAL, "test_data 'x' is not IMAGES,LABELS");
	spec->test_data = test_data;
	spec->hidden = (char *)"4,x";
	expect_refused(spec, &env, DML_EINVAL, "hidden '4,x' is not a comma list");
	spec->hidden = (char *)"4,";
	expect_refused(spec, &env, DML_EINVAL, "hidden '4,' ends with a comma");
	spec->hidden = (char *)"0,3";
	expect_refused(spec, &env, DML_EINVAL, "a layer of 0 units");
	spec->hidden = (char *)"4,70000";
	expect_refused(spec, &env, DML_EINVAL, "a layer of 70000 units");
	spec->hidden = (char *)"1,1,1,1,1,1,1,1,1";
	expect_refused(spec, &env, DML_EINVAL, "more than 8 layers");
	/* One hidden layer: three tables are one too many. */
	spec->hidden = (char *)"4";
	expect_refused(spec, &env, DML_EINVAL, "2 layers need 2 tables (ids 0..1), the job has "
		       "3");
	spec->hidden = hidden;
	spec->tables[0]->width = 5;
	expect_refused(spec, &env, DML_EINVAL, "table 0 (layer 1) must be dense with keys = 4 "
		       "(its units) and width = 6 (its 5 inputs + 1 for the bias)");
	spec->tables[0]->width = 6;
	spec->tables[1]->dense = 0;
	expect_refused(spec, &env, DML_EINVAL, "table 1: a sparse table has no key count");
	spec->tables[1]->dense = 1;
	spec->tables[1]->keys = 4;
	expect_refused(spec, &env, DML_EINVAL, "table 1 (layer 2) must be dense with keys = 3");
	spec->tables[1]->keys = 3;
	spec->tables[2]->keys = 1;
	expect_refused(spec, &env, DML_EINVAL, "table 2 (the output layer) must be dense with "
		       "keys = classes, 2..65535");
	spec->tables[2]->keys = 3;
	spec->n_tables = 2;
	expect_refused(spec, &env, DML_EINVAL, "table 2 (the output layer)");
	spec->n_tables = 3;
	spec->tables[2] = NULL;
	expect_refused(spec, &env, DML_EINVAL, "table #3 is missing");
	spec->tables[2] = t2;
	spec->dim = 6;
	expect_refused(spec, &env, DML_EINVAL, "table 0 (layer 1) must be dense with keys = 4 "
		       "(its units) and width = 7");
	spec->dim = 70000;
	expect_refused(spec, &env, DML_EINVAL, "dim 70000 out of range");
	spec->dim = 5;
	spec->batch_size = (1u << 28) / 5 + 1;
	expect_refused(spec, &env, DML_EINVAL, "batch_size 53687092 x the widest layer 5");
	spec->batch_size = 0;
	expect_refused(spec, &env, DML_EINVAL, "batch_size must be at least 1");
	spec->batch_size = 16;
	{
		void *state = app_test_make(&dml_app_mlp, spec, &env);

		ck_assert_str_eq(dml_app_mlp.metric, "accuracy");
		ck_assert_uint_eq(dml_app_mlp.data_examples(state), 100);
		dml_app_mlp.destroy(state);
	}
	dml_app_mlp.destroy(NULL);
	dml_backend_cpu.close(env.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- IDX data -------------------------------------------------------------- */

/* Write an IDX file of unsigned bytes into the test folder; its path. */
static const char *write_idx(const char *name, uint32_t ndims, const uint32_t *dims,
			     const uint8_t *data)
{
	static char paths[16][DML_TEST_PATH_MAX];
	static int next;
	char *p = paths[next++ % 16];
	uint8_t head[4 + 4 * DML_IDX_MAX_DIMS];
	size_t n = 1;
	FILE *f;

	dml_test_tmpdir_path(p, sizeof(paths[0]), name);
	head[0] = head[1] = 0;
	head[2] = 0x08;
	head[3] = (uint8_t)ndims;
	for (uint32_t i = 0; i < ndims; i++) {
		head[4 + 4 * i] = (uint8_t)(dims[i] >> 24);
		head[5 + 4 * i] = (uint8_t)(dims[i] >> 16);
		head[6 + 4 * i] = (uint8_t)(dims[i] >> 8);
		head[7 + 4 * i] = (uint8_t)dims[i];
		n *= dims[i];
	}
	ck_assert_ptr_nonnull(f = fopen(p, "wb"));
	ck_assert_uint_eq(fwrite(head, 1, 4 + 4 * (size_t)ndims, f), 4 + 4 * (size_t)ndims);
	ck_assert_uint_eq(fwrite(data, 1, n, f), n);
	ck_assert_int_eq(fclose(f), 0);
	return p;
}

/* Mean loss and hits of an mlp in double: x rows x sizes[0], w per table. */
static void ref_mlp(const uint32_t *sizes, size_t n, float *const *w, const double *x,
		    const uint8_t *labels, size_t rows, double *loss, uint64_t *correct)
{
	double a[2][64];

	*loss = 0;
	*correct = 0;
	for (size_t r = 0; r < rows; r++) {
		const double *in = x + r * sizes[0];
		double *out = NULL, m, s = 0;
		size_t top = 0;

		for (size_t l = 0; l + 1 < n; l++) {
			out = a[l % 2];
			for (size_t o = 0; o < sizes[l + 1]; o++) {
				const float *row = w[l] + o * (sizes[l] + 1);
				double z = row[sizes[l]];

				for (size_t i = 0; i < sizes[l]; i++)
					z += row[i] * in[i];
				out[o] = l + 2 < n && z < 0 ? 0 : z;
			}
			in = out;
		}
		for (size_t c = 1; c < sizes[n - 1]; c++)
			top = out[c] > out[top] ? c : top;
		m = out[top];
		for (size_t c = 0; c < sizes[n - 1]; c++)
			s += exp(out[c] - m);
		*loss += log(s) - (out[labels[r]] - m);
		*correct += top == labels[r];
	}
	*loss /= (double)rows;
}

/* IDX records: loss and accuracy as a double forward pass has them. */
START_TEST(test_mlp_idx_data)
{
	enum { N = 12, DIM = 6 };
	static const uint32_t sizes[] = { DIM, 5, 3 };
	const struct dml_app *app = &dml_app_mlp;
	const uint32_t idims[] = { N, 2, 3 }, ldims[] = { N };
	uint8_t img[N * DIM], lab[N];
	double x[N * DIM], want_loss, got;
	uint64_t want_correct;
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	char data[9000], extra[9100];
	const char *ip, *lp;
	Dml__JobSpec *spec;
	struct tio t;
	void *state;

	for (size_t i = 0; i < N * DIM; i++) {
		img[i] = (uint8_t)(i * 37 % 256);
		x[i] = img[i] / 255.0;
	}
	for (size_t i = 0; i < N; i++)
		lab[i] = (uint8_t)(i % 3);
	ip = write_idx("img", 3, idims, img);
	lp = write_idx("lab", 1, ldims, lab);
	/* Spaces around the comma are not part of the paths. */
	snprintf(data, sizeof(data), "%s , %s", ip, lp);
	spec = spec_make(sizes, 3, data, "batch_size = 12\nseed = 5\n");
	state = app_test_make(&dml_app_mlp, spec, &env);
	ck_assert_uint_eq(app->data_examples(state), N);
	tio_init(&t, app, state);
	fill_params(&t, 1.0f);
	ref_mlp(sizes, 3, t.w, x, lab, N, &want_loss, &want_correct);
	/* A batch of every record: the loss is the data set's. */
	got = step_ok(app, state, &t, N);
	ck_assert_msg(fabs(got - want_loss) < 1e-5, "loss %g, want %g", got, want_loss);
	/* Evaluation: the first min(10000, N) training records. */
	got = evaluate_ok(app, state, &t);
	ck_assert_msg(fabs(got - (double)want_correct / N) < 1e-12, "accuracy %g, want %g", got,
		      (double)want_correct / N);
	tio_free(&t);
	app->destroy(state);
	dml_job_spec_free(spec);

	/* metric = loss, evaluated on test_data: the first 4 records alone. */
	{
		const uint32_t i4[] = { 4, 2, 3 }, l4[] = { 4 };
		const char *tip = write_idx("timg", 3, i4, img), *tlp = write_idx("tlab", 1, l4,
										  lab);

		snprintf(extra, sizeof(extra), "batch_size = 5\nmetric = loss\ntest_data = %s,%s\n",
			 tip, tlp);
		spec = spec_make(sizes, 3, data, extra);
		state = app_test_make(&dml_app_mlp, spec, &env);
		tio_init(&t, app, state);
		fill_params(&t, 1.0f);
		ref_mlp(sizes, 3, t.w, x, lab, 4, &want_loss, &want_correct);
		got = evaluate_ok(app, state, &t);
		ck_assert_msg(fabs(got - want_loss) < 1e-5, "loss %g, want %g", got, want_loss);
		ck_assert_uint_eq(app->data_examples(state), N);
		tio_free(&t);
		app->destroy(state);
		dml_job_spec_free(spec);
	}
	dml_backend_cpu.close(env.be_ctx);
}
END_TEST

START_TEST(test_mlp_idx_errors)
{
	enum { N = 8, DIM = 6 };
	static const uint32_t sizes[] = { DIM, 3 }, wrong[] = { 5, 3 };
	const uint32_t idims[] = { N, DIM }, ldims[] = { N }, short_dims[] = { N - 1 };
	uint8_t img[N * DIM] = { 0 }, lab[N] = { 0, 1, 2, 0, 1, 2, 0, 1 };
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	char data[9000], why[9100];
	const char *ip = write_idx("img", 2, idims, img), *lp = write_idx("lab", 1, ldims, lab);
	Dml__JobSpec *spec;

	snprintf(data, sizeof(data), "%s,%s", ip, lp);
	/* dim is not the records' size: the file and both numbers. */
	spec = spec_make(wrong, 2, data, "");
	snprintf(why, sizeof(why), "%s: records of 6 bytes, but dim is 5", ip);
	expect_refused(spec, &env, DML_EINVAL, why);
	dml_job_spec_free(spec);
	/* A label that is not a class (records count from 1). */
	lab[3] = 3;
	lp = write_idx("lab", 1, ldims, lab);
	spec = spec_make(sizes, 2, data, "");
	snprintf(why, sizeof(why), "%s: record 4: label 3 is not below classes 3", lp);
	expect_refused(spec, &env, DML_EINVAL, why);
	/* The same in test_data. */
	lab[3] = 0;
	write_idx("lab", 1, ldims, lab);
	lab[7] = 200;
	lp = write_idx("lab2", 1, ldims, lab);
	{
		char *saved = spec->test_data;
		char test[9000];

		snprintf(test, sizeof(test), "%s,%s", ip, lp);
		spec->test_data = test;
		snprintf(why, sizeof(why), "%s: record 8: label 200 is not below classes 3", lp);
		expect_refused(spec, &env, DML_EINVAL, why);
		/* The reader's own reasons pass through. */
		lp = write_idx("lab3", 1, short_dims, lab);
		snprintf(test, sizeof(test), "%s,%s", ip, lp);
		expect_refused(spec, &env, DML_EINVAL, lp);
		spec->test_data = saved;
	}
	dml_job_spec_free(spec);
	dml_backend_cpu.close(env.be_ctx);
}
END_TEST

/* ---- partitions and shuffling --------------------------------------------- */

/*
 * With dim 1, two classes, w = ((1, 0), (0, 0)) and every label 0, a record
 * of feature x has loss log(1 + e^-x): a step of batch 1 tells which record
 * it trained on. Record i's feature is 10 i / 255.
 */
static uint64_t record_of_loss(double loss)
{
	double x = -log(expm1(loss));

	return (uint64_t)llround(x * 25.5);
}

struct order_run {
	void *state;
	struct tio t;
};

static void order_start(struct order_run *o, const Dml__JobSpec *spec,
			const struct dml_app_env *env, const uint32_t *parts, size_t n)
{
	char err[256];

	ck_assert_int_eq(dml_app_mlp.create(spec, env, &o->state, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_app_mlp.set_partitions(o->state, parts, n, 5, err, sizeof(err)),
			 0);
	tio_init(&o->t, &dml_app_mlp, o->state);
	o->t.w[0][0] = 1;
}

static void order_next(struct order_run *o, uint64_t *rec, size_t n)
{
	for (size_t i = 0; i < n; i++)
		rec[i] = record_of_loss(step_ok(&dml_app_mlp, o->state, &o->t, 1));
}

static void order_stop(struct order_run *o)
{
	tio_free(&o->t);
	dml_app_mlp.destroy(o->state);
}

START_TEST(test_mlp_partitions_shuffled)
{
	enum { N = 20 };
	static const uint32_t sizes[] = { 1, 2 };
	const uint32_t idims[] = { N, 1 }, ldims[] = { N }, parts[] = { 3, 1, 3 };
	uint8_t img[N], lab[N] = { 0 };
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	char data[9000], err[256];
	Dml__JobSpec *spec, *spec2;
	struct order_run a, b, c;
	uint64_t pass1[8], pass2[8], again[16], other[8];
	struct dml_app_io io;
	struct dml_app_step st;

	for (size_t i = 0; i < N; i++)
		img[i] = (uint8_t)(10 * i);
	snprintf(data, sizeof(data), "%s,%s", write_idx("img", 2, idims, img),
		 write_idx("lab", 1, ldims, lab));
	spec = spec_make(sizes, 2, data, "batch_size = 1\nseed = 11\n");
	spec2 = spec_make(sizes, 2, data, "batch_size = 1\nseed = 12\n");
	/* Partitions 1 and 3 of 5: records 4..7 and 12..15. */
	order_start(&a, spec, &env, parts, 3);
	order_next(&a, pass1, 8);
	order_next(&a, pass2, 8);
	for (uint64_t r = 0; r < N; r++) {
		int in = (r >= 4 && r < 8) || (r >= 12 && r < 16), n1 = 0, n2 = 0;

		for (size_t i = 0; i < 8; i++) {
			n1 += pass1[i] == r;
			n2 += pass2[i] == r;
		}
		/* Each record of the partitions once per pass, no other. */
		ck_assert_msg(n1 == in && n2 == in, "record %" PRIu64 ": %d, %d times", r, n1,
			      n2);
	}
	/* A new order each pass, the same for the same seed, another for another. */
	ck_assert(memcmp(pass1, pass2, sizeof(pass1)) != 0);
	order_start(&b, spec, &env, parts, 3);
	order_next(&b, again, 16);
	ck_assert(memcmp(pass1, again, sizeof(pass1)) == 0);
	ck_assert(memcmp(pass2, again + 8, sizeof(pass2)) == 0);
	order_start(&c, spec2, &env, parts, 3);
	order_next(&c, other, 8);
	ck_assert(memcmp(pass1, other, sizeof(pass1)) != 0);

	/* A partition that does not exist: refused, the old ones stay. */
	{
		const uint32_t bad[] = { 1, 5 };

		ck_assert_int_eq(dml_app_mlp.set_partitions(a.state, bad, 2, 5, err, sizeof(err)),
				 DML_EINVAL);
		ck_assert_msg(strstr(err, "app mlp: partition 5 of 5 does not exist") != NULL,
			      "%s", err);
		order_next(&a, other, 8);
		for (size_t i = 0; i < 8; i++)
			ck_assert((other[i] >= 4 && other[i] < 8) ||
				  (other[i] >= 12 && other[i] < 16));
	}
	order_stop(&b);
	order_stop(&c);
	/* No partitions: the step still pulls (to keep pace) but trains nothing. */
	ck_assert_int_eq(dml_app_mlp.set_partitions(a.state, NULL, 0, 5, err, sizeof(err)), 0);
	a.t.pulls = a.t.pushes = 0;
	io = (struct dml_app_io){ &tio_ops, &a.t, 0 };
	ck_assert_int_eq(dml_app_mlp.step(a.state, &io, &st, err, sizeof(err)), 0);
	ck_assert_uint_eq(st.examples, 0);
	ck_assert(isnan(st.loss));
	ck_assert(a.t.pulls == 1 && a.t.pushes == 0 && a.t.in_flight == 0);
	order_stop(&a);
	dml_job_spec_free(spec);
	dml_job_spec_free(spec2);
	dml_backend_cpu.close(env.be_ctx);
}
END_TEST

/* ---- learning ---------------------------------------------------------------- */

/* SGD on the pushed gradients; the accuracy on the synthetic test set. */
static double train(const uint32_t *sizes, size_t n, float init, float lr, int steps,
		    double *first_loss, double *last_loss)
{
	const struct dml_app *app = &dml_app_mlp;
	Dml__JobSpec *spec = spec_make(sizes, n, "synthetic", "batch_size = 32\nexamples = "
				       "2000\nseed = 21\ntest_data = synthetic\n");
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	void *state = app_test_make(&dml_app_mlp, spec, &env);
	double acc, sum = 0;
	struct tio t;

	tio_init(&t, app, state);
	fill_params(&t, init);
	t.lr = lr;
	*first_loss = step_ok(app, state, &t, 32);
	for (int s = 1; s < steps; s++) {
		double l = step_ok(app, state, &t, 32);

		/* The mean of the last 20 steps: one batch is noisy. */
		if (s >= steps - 20)
			sum += l;
	}
	*last_loss = sum / 20;
	acc = evaluate_ok(app, state, &t);
	tio_free(&t);
	app->destroy(state);
	dml_backend_cpu.close(env.be_ctx);
	dml_job_spec_free(spec);
	return acc;
}

START_TEST(test_mlp_learns)
{
	static const uint32_t softmax[] = { 5, 3 }, hidden[] = { 5, 16, 3 };
	double first, last, acc, acc2;

	acc = train(softmax, 2, 0.0f, 0.5f, 400, &first, &last);
	/* Zero weights: every class equally likely. */
	ck_assert(fabs(first - log(3.0)) < 1e-6);
	ck_assert_msg(acc > 0.8 && last < 0.7 * first, "softmax: accuracy %g, loss %g -> %g",
		      acc, first, last);
	ck_assert(acc == train(softmax, 2, 0.0f, 0.5f, 400, &first, &last));
	acc2 = train(hidden, 3, 0.5f, 0.2f, 400, &first, &last);
	ck_assert_msg(acc2 > 0.8 && last < 0.7 * first, "mlp: accuracy %g, loss %g -> %g",
		      acc2, first, last);
	printf("check_mlp: synthetic accuracy %.3f (softmax), %.3f (hidden 16) after 400 "
	       "steps\n", acc, acc2);
}
END_TEST

/* ---- io failures ------------------------------------------------------------ */

static void expect_step_fails(struct tio *t, void *state, int code, const char *why)
{
	struct dml_app_io io = { &tio_ops, t, 0 };
	struct dml_app_step st;
	char err[256] = "";

	ck_assert_int_eq(dml_app_mlp.step(state, &io, &st, err, sizeof(err)), code);
	ck_assert_msg(strstr(err, why) != NULL, "expected '%s', got '%s'", why, err);
	ck_assert_uint_eq(st.examples, 0);
	/* No pull is left; pushes already issued are, until drained. */
	ck_assert_int_eq(dml_app_mlp.drain(state, &io, err, sizeof(err)), 0);
	ck_assert_int_eq(t->in_flight, 0);
}

START_TEST(test_mlp_io_failures)
{
	static const uint32_t sizes[] = { 5, 4, 3, 3 };
	Dml__JobSpec *spec = spec_make(sizes, 4, "synthetic", "batch_size = 4\n");
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	void *state = app_test_make(&dml_app_mlp, spec, &env);
	struct tio t;

	tio_init(&t, &dml_app_mlp, state);
	t.fail_pull = 3;
	expect_step_fails(&t, state, DML_ECONN, "pull of table 2");
	t.fail_pull = 0;
	t.fail_wait = 2;    /* the pull of table 1 */
	expect_step_fails(&t, state, DML_ECONN, "pull of table 1");
	/* A push's failure shows where it is waited for: at the next step,
	 * before that step writes the table's gradient again. */
	{
		struct dml_app_io io = { &tio_ops, &t, 0 };
		struct dml_app_step st;
		char err[256] = "";

		t.fail_wait = 102;  /* the push to table 1 */
		ck_assert_int_eq(dml_app_mlp.step(state, &io, &st, err, sizeof(err)), 0);
		ck_assert_int_eq(t.in_flight, 3);
		expect_step_fails(&t, state, DML_ECONN, "push to table 1");
		/* ... or at drain. */
		ck_assert_int_eq(dml_app_mlp.step(state, &io, &st, err, sizeof(err)), 0);
		ck_assert_int_eq(dml_app_mlp.drain(state, &io, err, sizeof(err)), DML_ECONN);
		ck_assert_msg(strstr(err, "push to table 1") != NULL, "%s", err);
		ck_assert_int_eq(t.in_flight, 0);
		t.fail_wait = 0;
	}
	t.fail_push = 1;    /* the last push */
	expect_step_fails(&t, state, DML_ETIMEDOUT, "push to table 0");
	t.fail_push = 0;
	step_ok(&dml_app_mlp, state, &t, 4);
	tio_free(&t);
	dml_app_mlp.destroy(state);
	dml_backend_cpu.close(env.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

/* ---- the profile job and Fashion-MNIST --------------------------------------- */

START_TEST(test_mlp_profile_job)
{
	const struct dml_app *app = &dml_app_mlp;
	Dml__JobSpec *spec = app_test_spec(app->profile_job);
	struct dml_app_env env = { "cpu", &dml_backend_cpu, cpu_open() };
	void *state = app_test_make(&dml_app_mlp, spec, &env);
	const struct dml_app_table *tab;
	struct tio t;

	ck_assert_str_eq(app->name, "mlp");
	ck_assert_uint_eq(app->default_eval_every, 100);
	ck_assert_uint_eq(app->tables(state, &tab), 2);
	ck_assert(tab[0].keys == 32 && tab[0].width == 65 && tab[1].keys == 4 &&
		  tab[1].width == 33);
	tio_init(&t, app, state);
	ck_assert(fabs(step_ok(app, state, &t, 64) - log(4.0)) < 1e-6);
	tio_free(&t);
	app->destroy(state);
	dml_backend_cpu.close(env.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

START_TEST(test_mlp_fashion_mnist)
{
	static const uint32_t sizes[] = { 784, 10 };
	const struct dml_app *app = &dml_app_mlp;
	struct dml_app_env env = { "cpu", &dml_backend_cpu, NULL };
	Dml__JobSpec *spec;
	struct tio t;
	void *state;

	if (access(FASHION "t10k-images-idx3-ubyte.gz", R_OK) != 0) {
		printf("check_mlp: Fashion-MNIST not installed, skipped\n");
		return;
	}
	env.be_ctx = cpu_open();
	spec = spec_make(sizes, 2, FASHION "t10k-images-idx3-ubyte.gz," FASHION
			 "t10k-labels-idx1-ubyte.gz", "");
	state = app_test_make(&dml_app_mlp, spec, &env);
	ck_assert_uint_eq(app->data_examples(state), 10000);
	/* Zero weights: class 0 everywhere, right on a tenth of the records. */
	tio_init(&t, app, state);
	ck_assert(fabs(evaluate_ok(app, state, &t) - 0.1) < 1e-12);
	ck_assert(fabs(step_ok(app, state, &t, 64) - log(10.0)) < 1e-6);
	tio_free(&t);
	app->destroy(state);
	dml_backend_cpu.close(env.be_ctx);
	dml_job_spec_free(spec);
}
END_TEST

static Suite *mlp_suite(void)
{
	Suite *s = suite_create("mlp");
	TCase *be = tcase_create("backend"), *app = tcase_create("app");

	tcase_add_test(be, test_backend_registry);
	tcase_add_test(be, test_cpu_buffers);
	tcase_add_test(be, test_cpu_gemm);
	tcase_add_test(be, test_cpu_gemm_refuses);
	tcase_add_test(be, test_cpu_bias_act);
	tcase_add_test(be, test_cpu_relu_grad);
	tcase_add_test(be, test_cpu_col_sum);
	tcase_add_test(be, test_cpu_softmax_xent);
	suite_add_tcase(s, be);
	dml_test_tmpdir_fixture(app, "check_mlp", 1);
	tcase_set_timeout(app, 60);
	tcase_add_test(app, test_mlp_gradient_softmax);
	tcase_add_test(app, test_mlp_gradient_hidden);
	tcase_add_test(app, test_mlp_batch_split);
	tcase_add_test(app, test_mlp_staged_backend);
	tcase_add_test(app, test_mlp_refuses_bad_specs);
	tcase_add_test(app, test_mlp_idx_data);
	tcase_add_test(app, test_mlp_idx_errors);
	tcase_add_test(app, test_mlp_partitions_shuffled);
	tcase_add_test(app, test_mlp_learns);
	tcase_add_test(app, test_mlp_io_failures);
	tcase_add_test(app, test_mlp_profile_job);
	tcase_add_test(app, test_mlp_fashion_mnist);
	suite_add_tcase(s, app);
	return s;
}

int main(void)
{
	return dml_check_run(mlp_suite());
}
