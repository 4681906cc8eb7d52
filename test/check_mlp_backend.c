/*
 * check_mlp_backend.c - check_mlp's tests of the cpu compute backend:
 * every op against a naive double-precision reference on odd sizes (all
 * transpose combinations of gemm, leading dimensions wider than the
 * columns, whose padding must stay untouched); softmax_xent's loss, hits
 * and gradient, in place too, and its refusal of bad labels; the registry
 * of backends.
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

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/backend.h"
#include "test/check_mlp.h"
#include "test/check_run.h"
#include "worker/data_idx.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "test/tmpdir.h"

#define PAD 12345.0f
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

void check_mlp_backend_tests(TCase *tc)
{
	tcase_add_test(tc, test_backend_registry);
	tcase_add_test(tc, test_cpu_buffers);
	tcase_add_test(tc, test_cpu_gemm);
	tcase_add_test(tc, test_cpu_gemm_refuses);
	tcase_add_test(tc, test_cpu_bias_act);
	tcase_add_test(tc, test_cpu_relu_grad);
	tcase_add_test(tc, test_cpu_col_sum);
	tcase_add_test(tc, test_cpu_softmax_xent);
}
