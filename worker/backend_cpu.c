/*
 * The cpu compute backend (backend.h): matrix products on OpenBLAS, the
 * elementwise ops as plain loops over restrict pointers that gcc -O2
 * vectorises. The device is the host: buffers are 64-byte aligned malloc,
 * copies are memcpy, every call has finished when it returns (sync has
 * nothing to wait for), and `unified` lets apps skip staging.
 *
 * Must never: hand cblas a size or a leading dimension that does not fit
 * its int or that it would reject (every one is checked first and refused
 * with DML_EINVAL), print, or abort on a bad argument.
 */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend.h"
#include "proto/dml_error.h"
#include "proto/util.h"

#define ALIGN 64
/* Columns handled at once by the strided-bias ops: fits the stack, fills
 * vector registers many times over. */
#define BLOCK 256
/* Floats of an elementwise loop's unit of work (see add_row). */
#define VEC 16

struct cpu {
	char err[256];
};

/* Record the failure for error() and return rc. */
static int cpu_fail(void *ctx, int rc, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int cpu_fail(void *ctx, int rc, const char *fmt, ...)
{
	struct cpu *c = ctx;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, sizeof(c->err), fmt, ap);
	va_end(ap);
	return rc;
}

static int cpu_open(const struct dml_backend_conf *conf, void **ctx, char *err,
		    size_t errlen)
{
	struct cpu *c;

	*ctx = NULL;
	if (conf && conf->threads > INT_MAX)
		return dml_fail(DML_EINVAL, err, errlen, "cpu: %u threads is too many",
				conf->threads);
	if (!(c = calloc(1, sizeof(*c))))
		return dml_fail(DML_ENOMEM, err, errlen, "cpu: out of memory");
	if (conf && conf->threads > 0)
		openblas_set_num_threads((int)conf->threads);
	*ctx = c;
	return 0;
}

static void cpu_close(void *ctx)
{
	free(ctx);
}

static const char *cpu_error(void *ctx)
{
	return ((struct cpu *)ctx)->err;
}

static int cpu_alloc(void *ctx, size_t n, float **out)
{
	size_t bytes;

	*out = NULL;
	if (n > (SIZE_MAX - ALIGN) / sizeof(float))
		return cpu_fail(ctx, DML_ENOMEM, "alloc: %zu floats is too many", n);
	/* aligned_alloc wants a multiple of the alignment; never 0 bytes. */
	bytes = (n * sizeof(float) + ALIGN - 1) / ALIGN * ALIGN;
	if (!(*out = aligned_alloc(ALIGN, bytes ? bytes : ALIGN)))
		return cpu_fail(ctx, DML_ENOMEM, "alloc: out of memory for %zu floats", n);
	return 0;
}

static void cpu_free(void *ctx, float *buf)
{
	free(buf);
}

static int cpu_copy(void *ctx, float *dst, const float *src, size_t n)
{
	if (n)
		memcpy(dst, src, n * sizeof(float));
	return 0;
}

static int cpu_sync(void *ctx)
{
	return 0;
}

/* A stored matrix of cols columns with row stride ld, as cblas takes it. */
static int ld_ok(void *ctx, const char *what, size_t ld, size_t cols)
{
	if (ld > INT_MAX || ld < (cols ? cols : 1))
		return cpu_fail(ctx, DML_EINVAL, "gemm: %s %zu for %zu columns", what, ld,
				cols);
	return 0;
}

static int cpu_gemm(void *ctx, int trans_a, int trans_b, size_t m, size_t n, size_t k,
		    float alpha, const float *a, size_t lda, const float *b, size_t ldb,
		    float beta, float *c, size_t ldc)
{
	int rc;

	if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
		return cpu_fail(ctx, DML_EINVAL, "gemm: %zu x %zu x %zu does not fit int", m,
				n, k);
	if ((rc = ld_ok(ctx, "lda", lda, trans_a ? m : k)) != 0 ||
	    (rc = ld_ok(ctx, "ldb", ldb, trans_b ? k : n)) != 0 ||
	    (rc = ld_ok(ctx, "ldc", ldc, n)) != 0)
		return rc;
	if (m == 0 || n == 0)
		return 0;
	cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
		    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, alpha, a,
		    (int)lda, b, (int)ldb, beta, c, (int)ldc);
	return 0;
}

/*
 * The elementwise loops work in chunks of VEC: gcc -O2's cost model
 * vectorises a loop only when its trip count is known, as VEC is; the
 * scalar tail takes the rest.
 */
static void add_row(float *restrict h, const float *restrict b, size_t n)
{
	size_t j = 0;

	for (; j + VEC <= n; j += VEC)
		for (size_t k = j; k < j + VEC; k++)
			h[k] += b[k];
	for (; j < n; j++)
		h[j] += b[j];
}

static float relu(float v)
{
	return v > 0.0f ? v : 0.0f;
}

static void add_relu_row(float *restrict h, const float *restrict b, size_t n)
{
	size_t j = 0;

	for (; j + VEC <= n; j += VEC)
		for (size_t k = j; k < j + VEC; k++)
			h[k] = relu(h[k] + b[k]);
	for (; j < n; j++)
		h[j] = relu(h[j] + b[j]);
}

static int cpu_bias_act(void *ctx, float *h, size_t rows, size_t cols, size_t ldh,
			const float *bias, size_t bias_stride, int relu)
{
	float b[BLOCK];

	if (rows > 1 && ldh < cols)
		return cpu_fail(ctx, DML_EINVAL, "bias_act: ldh %zu for %zu columns", ldh,
				cols);
	/* The bias is gathered into a dense block once, so that the loop over
	 * rows runs on contiguous memory. */
	for (size_t j0 = 0; j0 < cols; j0 += BLOCK) {
		size_t nj = cols - j0 < BLOCK ? cols - j0 : BLOCK;

		for (size_t j = 0; j < nj; j++)
			b[j] = bias[(j0 + j) * bias_stride];
		for (size_t r = 0; r < rows; r++) {
			if (relu)
				add_relu_row(h + r * ldh + j0, b, nj);
			else
				add_row(h + r * ldh + j0, b, nj);
		}
	}
	return 0;
}

static void relu_grad_row(float *restrict dh, const float *restrict h, size_t n)
{
	size_t j = 0;

	for (; j + VEC <= n; j += VEC)
		for (size_t k = j; k < j + VEC; k++)
			dh[k] = h[k] > 0.0f ? dh[k] : 0.0f;
	for (; j < n; j++)
		dh[j] = h[j] > 0.0f ? dh[j] : 0.0f;
}

static int cpu_relu_grad(void *ctx, float *dh, const float *h, size_t rows, size_t cols,
			 size_t ld)
{
	if (rows > 1 && ld < cols)
		return cpu_fail(ctx, DML_EINVAL, "relu_grad: ld %zu for %zu columns", ld, cols);
	for (size_t r = 0; r < rows; r++)
		relu_grad_row(dh + r * ld, h + r * ld, cols);
	return 0;
}

static int cpu_col_sum(void *ctx, const float *dh, size_t rows, size_t cols, size_t ld,
		       float alpha, float *out, size_t out_stride)
{
	float acc[BLOCK];

	if (rows > 1 && ld < cols)
		return cpu_fail(ctx, DML_EINVAL, "col_sum: ld %zu for %zu columns", ld, cols);
	for (size_t j0 = 0; j0 < cols; j0 += BLOCK) {
		size_t nj = cols - j0 < BLOCK ? cols - j0 : BLOCK;

		memset(acc, 0, nj * sizeof(float));
		for (size_t r = 0; r < rows; r++)
			add_row(acc, dh + r * ld + j0, nj);
		for (size_t j = 0; j < nj; j++)
			out[(j0 + j) * out_stride] = alpha * acc[j];
	}
	return 0;
}

/* A label as a class index: an integer in [0, classes). */
static int label_ok(float l, size_t classes)
{
	return l >= 0.0f && (double)l < (double)classes && l == floorf(l);
}

/* Largest value of a row and where it first occurs. */
static float row_max(const float *x, size_t n, size_t *at)
{
	float m = x[0];

	*at = 0;
	for (size_t j = 1; j < n; j++) {
		if (x[j] > m) {
			m = x[j];
			*at = j;
		}
	}
	return m;
}

static int cpu_softmax_xent(void *ctx, const float *logits, const float *labels,
			    size_t rows, size_t classes, float scale, float *dlogits,
			    double *loss, uint64_t *correct)
{
	double sum = 0;
	uint64_t hits = 0;

	if (rows && classes == 0)
		return cpu_fail(ctx, DML_EINVAL, "softmax_xent: 0 classes");
	/* Every label first: an error adds nothing. */
	for (size_t r = 0; r < rows; r++)
		if (!label_ok(labels[r], classes))
			return cpu_fail(ctx, DML_EINVAL, "softmax_xent: row %zu: label %g is "
					"not a class of 0..%zu", r, (double)labels[r],
					classes - 1);
	for (size_t r = 0; r < rows; r++) {
		const float *z = logits + r * classes;
		size_t y = (size_t)labels[r], top;
		float m = row_max(z, classes, &top);
		double s = 0, logsum;

		for (size_t j = 0; j < classes; j++)
			s += expf(z[j] - m);
		logsum = log(s);
		sum += logsum - ((double)z[y] - m);
		hits += top == y;
		if (dlogits) {
			/* dlogits may be logits: z[j] is read before it is written. */
			float *d = dlogits + r * classes;
			float inv = (float)(scale / s);

			for (size_t j = 0; j < classes; j++)
				d[j] = expf(z[j] - m) * inv;
			d[y] -= scale;
		}
	}
	*loss += sum;
	*correct += hits;
	return 0;
}

const struct dml_backend_ops dml_backend_cpu = {
	.name = "cpu",
	.unified = 1,
	.open = cpu_open,
	.close = cpu_close,
	.error = cpu_error,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.host_alloc = cpu_alloc,
	.host_free = cpu_free,
	.upload = cpu_copy,
	.download = cpu_copy,
	.sync = cpu_sync,
	.gemm = cpu_gemm,
	.bias_act = cpu_bias_act,
	.relu_grad = cpu_relu_grad,
	.col_sum = cpu_col_sum,
	.softmax_xent = cpu_softmax_xent,
};
