/*
 * check_backend.c - compute backends (backend.h).
 *
 * Always: the registry (cpu is found by name, an unknown name is not, the
 * name list matches the build), the cuda backend's open() either works
 * or fails cleanly with DML_ENOTFOUND and a reason, and OpenBLAS's kernels:
 * this program starts the way dml-worker does (dml_blas_kernels_choose), so
 * on a CPU with AVX2 it must not compute on OpenBLAS's generic fallback.
 *
 * Parity, where the cuda backend is built and a device opens: every op run
 * on cpu and on cuda with the same random inputs, odd sizes, padded row
 * strides, both transposes of gemm, relu on and off, softmax_xent with and
 * without dlogits (also in place) and with bad labels; the refusals of bad
 * arguments; a device fault reported by sync; and one full step of the mlp
 * app on each backend from the same parameters, comparing the pushed
 * gradients, the loss and the accuracy. Results must agree to a relative
 * error of TOL (max |a - b| / max(1, max |a|)); each comparison prints one
 * "parity:" line with what it compared and the error. Without a device (or
 * without CUDA in the build) these tests print "SKIP: test: reason" and
 * pass.
 */
#include "config.h"

#include <cblas.h>
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app.h"
#include "app_test.h"
#include "backend.h"
#include "blas_kernels.h"
#include "check_run.h"
#include "dml_error.h"

#define TOL 1e-4
/* CUDA and cuBLAS start-up alone can take seconds. */
#define TEST_TIMEOUT_S 120
#define MAX_TABLES 4

/* ---- the two backends ------------------------------------------------------ */

struct side {
	const struct dml_backend_ops *be;
	void *ctx;
};

struct pair {
	struct side cpu, cuda;
};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stdout, flushed: the test runs in a child that may die. */
static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

/* The reason inside open()'s "cuda: no CUDA device (reason)", in place. */
static const char *skip_reason(char *err)
{
	static const char prefix[] = "cuda: no CUDA device (";
	size_t n = strlen(err);

	if (strncmp(err, prefix, sizeof(prefix) - 1) != 0 || n < sizeof(prefix) ||
	    err[n - 1] != ')')
		return err;
	err[n - 1] = 0;
	return err + sizeof(prefix) - 1;
}

/*
 * Open cpu and cuda for test, or say why not ("SKIP: ...") and return 0:
 * then the test passes without comparing anything.
 */
static int pair_open(const char *test, struct pair *p)
{
	struct dml_backend_conf conf = { 1, 0 };
	char err[256] = "";
	int rc;

	memset(p, 0, sizeof(*p));
	p->cuda.be = dml_backend_find("cuda");
	if (!p->cuda.be) {
		say("SKIP: %s: built without CUDA", test);
		return 0;
	}
	rc = p->cuda.be->open(&conf, &p->cuda.ctx, err, sizeof(err));
	if (rc == DML_ENOTFOUND) {
		ck_assert_ptr_null(p->cuda.ctx);
		say("SKIP: %s: no CUDA device (%s)", test, skip_reason(err));
		return 0;
	}
	/* A device that is there but does not open is a failure, not a skip. */
	ck_assert_msg(rc == 0, "cuda open: %s: %s", dml_strerror(rc), err);
	p->cpu.be = &dml_backend_cpu;
	ck_assert_msg(p->cpu.be->open(&conf, &p->cpu.ctx, err, sizeof(err)) == 0, "%s", err);
	return 1;
}

static void pair_close(struct pair *p)
{
	p->cuda.be->close(p->cuda.ctx);
	p->cpu.be->close(p->cpu.ctx);
}

#define ck_side(s, call)                                                          \
	do {                                                                      \
		int rc_ = (call);                                                 \
		ck_assert_msg(rc_ == 0, "%s: %s: %s (%s)", (s)->be->name, #call,  \
			      dml_strerror(rc_), (s)->be->error((s)->ctx));       \
	} while (0)

/* Device memory of s holding host[0..n), put there through pinned staging. */
static float *up(struct side *s, const float *host, size_t n)
{
	float *d, *stage;

	ck_side(s, s->be->alloc(s->ctx, n, &d));
	ck_side(s, s->be->host_alloc(s->ctx, n, &stage));
	if (n)
		memcpy(stage, host, n * sizeof(float));
	ck_side(s, s->be->upload(s->ctx, d, stage, n));
	ck_side(s, s->be->sync(s->ctx));
	s->be->host_free(s->ctx, stage);
	return d;
}

/* Copy n floats of d back to host, then free d. */
static void down(struct side *s, float *host, float *d, size_t n)
{
	float *stage;

	ck_side(s, s->be->host_alloc(s->ctx, n, &stage));
	ck_side(s, s->be->download(s->ctx, stage, d, n));
	ck_side(s, s->be->sync(s->ctx));
	if (n)
		memcpy(host, stage, n * sizeof(float));
	s->be->host_free(s->ctx, stage);
	s->be->free(s->ctx, d);
}

/* ---- data and comparison --------------------------------------------------- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float rnd(float lo, float hi)
{
	g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
	return lo + (hi - lo) * (float)((double)(g_rng >> 40) / 16777216.0);
}

/* A malloc'd array of n uniform values in [lo, hi). */
static float *rnd_array(size_t n, float lo, float hi)
{
	float *x = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(x);
	for (size_t i = 0; i < n; i++)
		x[i] = rnd(lo, hi);
	return x;
}

static float *dup_array(const float *x, size_t n)
{
	float *y = malloc((n ? n : 1) * sizeof(float));

	ck_assert_ptr_nonnull(y);
	if (n)
		memcpy(y, x, n * sizeof(float));
	return y;
}

/* max |ref - got| / max(1, max |ref|); a NaN on one side only is infinite. */
static double rel_err(const float *ref, const float *got, size_t n)
{
	double diff = 0, scale = 1;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)ref[i] - got[i]);

		if (isnan(ref[i]) || isnan(got[i]))
			d = isnan(ref[i]) && isnan(got[i]) ? 0 : INFINITY;
		diff = d > diff ? d : diff;
		scale = fabs(ref[i]) > scale ? fabs(ref[i]) : scale;
	}
	return diff / scale;
}

static void expect_close(const char *what, const float *cpu, const float *cuda, size_t n)
{
	double e = rel_err(cpu, cuda, n);

	say("parity: %s: %zu values, max error %.3g", what, n, e);
	ck_assert_msg(e <= TOL, "%s: cuda differs from cpu by %g (relative)", what, e);
}

/* ---- always: the registry and opening cuda --------------------------------- */

/* A CPU OpenBLAS recognised keeps its kernels; on its fallback, a CPU with
 * AVX2 gets better ones, and this process (started through
 * dml_blas_kernels_choose) runs on them. */
START_TEST(test_blas_kernels)
{
	const char *core = openblas_get_corename(), *want = getenv("OPENBLAS_CORETYPE");
	const char *better = dml_blas_kernels_for_cpu("Prescott");

	say("blas_kernels: OpenBLAS computes on its %s kernels (OPENBLAS_CORETYPE %s)\n",
	    core, want ? want : "unset");
	ck_assert_ptr_null(dml_blas_kernels_for_cpu(NULL));
	ck_assert_ptr_null(dml_blas_kernels_for_cpu("Haswell"));
	ck_assert_ptr_null(dml_blas_kernels_for_cpu("SkylakeX"));
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		ck_assert_ptr_nonnull(better);
	else
		ck_assert_ptr_null(better);
#endif
	/* An operator's own choice stands, whatever it is. */
	if (better && (!want || strcmp(want, better) == 0))
		ck_assert_str_ne(core, "Prescott");
}
END_TEST

START_TEST(test_registry)
{
	int cpu = 0, cuda = 0;

	ck_assert_ptr_eq(dml_backend_find("cpu"), &dml_backend_cpu);
	ck_assert_str_eq(dml_backend_cpu.name, "cpu");
	ck_assert(dml_backend_cpu.unified);
	ck_assert_ptr_null(dml_backend_find("tpu"));
	ck_assert_ptr_null(dml_backend_find(""));
	ck_assert_ptr_null(dml_backend_find("CPU"));
	for (size_t i = 0; dml_backend_names[i]; i++) {
		ck_assert_ptr_nonnull(dml_backend_find(dml_backend_names[i]));
		cpu += strcmp(dml_backend_names[i], "cpu") == 0;
		cuda += strcmp(dml_backend_names[i], "cuda") == 0;
	}
	ck_assert_int_eq(cpu, 1);
#ifdef HAVE_CUDA
	ck_assert_int_eq(cuda, 1);
	ck_assert_ptr_eq(dml_backend_find("cuda"), &dml_backend_cuda);
	ck_assert_str_eq(dml_backend_cuda.name, "cuda");
	ck_assert(!dml_backend_cuda.unified);
#else
	ck_assert_int_eq(cuda, 0);
	ck_assert_ptr_null(dml_backend_find("cuda"));
#endif
}
END_TEST

/* open() works, or says why not without crashing, hanging or leaving a ctx. */
START_TEST(test_cuda_open)
{
	const struct dml_backend_ops *be = dml_backend_find("cuda");
	struct dml_backend_conf conf = { 0, 0 };
	char err[256] = "";
	void *ctx = (void *)1;
	int rc;

	if (!be) {
		say("SKIP: cuda_open: built without CUDA");
		return;
	}
	rc = be->open(&conf, &ctx, err, sizeof(err));
	if (rc == 0) {
		ck_assert_ptr_nonnull(ctx);
		ck_assert_str_eq(be->error(ctx), "");
		be->close(ctx);
		say("cuda_open: device 0 opened");
	} else {
		ck_assert_int_eq(rc, DML_ENOTFOUND);
		ck_assert_ptr_null(ctx);
		ck_assert_msg(strstr(err, "cuda: no CUDA device (cudaGetDeviceCount: ") == err,
			      "%s", err);
		say("SKIP: cuda_open: no CUDA device (%s)", skip_reason(err));
	}
	/* A device that is not there, with or without any device. */
	for (int dev = -1; dev <= 1000; dev += 1001) {
		ctx = (void *)1;
		err[0] = 0;
		conf.device = dev;
		ck_assert_int_eq(be->open(&conf, &ctx, err, sizeof(err)), DML_ENOTFOUND);
		ck_assert_ptr_null(ctx);
		ck_assert_msg(strncmp(err, "cuda: no CUDA device", 20) == 0, "%s", err);
	}
	be->close(NULL);
}
END_TEST

/* ---- parity of each op ----------------------------------------------------- */

/* Buffers up and down, alloc and host_alloc of 0 floats, repeated syncs. */
START_TEST(test_copies)
{
	struct pair p;
	struct side *s = &p.cuda;
	const size_t n = 100003;
	float *x, *y, *d, *e;

	if (!pair_open("copies", &p))
		return;
	x = rnd_array(n, -10, 10);
	y = calloc(n, sizeof(float));
	ck_assert_ptr_nonnull(y);
	d = up(s, x, n);
	/* Device to device through the host, in order on the stream. */
	down(s, y, d, n);
	ck_assert(memcmp(x, y, n * sizeof(float)) == 0);
	ck_side(s, s->be->alloc(s->ctx, 0, &e));
	ck_assert_ptr_nonnull(e);
	s->be->free(s->ctx, e);
	ck_side(s, s->be->host_alloc(s->ctx, 0, &e));
	ck_assert_ptr_nonnull(e);
	s->be->host_free(s->ctx, e);
	s->be->free(s->ctx, NULL);
	s->be->host_free(s->ctx, NULL);
	ck_side(s, s->be->upload(s->ctx, NULL, NULL, 0));
	ck_side(s, s->be->sync(s->ctx));
	ck_side(s, s->be->sync(s->ctx));
	ck_assert_str_eq(s->be->error(s->ctx), "");
	say("parity: copies: %zu floats up and down, exact", n);
	free(x);
	free(y);
	pair_close(&p);
}
END_TEST

struct gemm_case {
	int ta, tb;
	size_t m, n, k, pad;
	float alpha, beta;
};

/* c (m x ldc, in and out) = gemm of a and b on s. */
static void gemm_on(struct side *s, const struct gemm_case *g, const float *a,
		    size_t lda, size_t na, const float *b, size_t ldb, size_t nb, float *c,
		    size_t ldc)
{
	float *da = up(s, a, na), *db = up(s, b, nb), *dc = up(s, c, g->m * ldc);

	ck_side(s, s->be->gemm(s->ctx, g->ta, g->tb, g->m, g->n, g->k, g->alpha, da, lda,
			       db, ldb, g->beta, dc, ldc));
	down(s, c, dc, g->m * ldc);
	s->be->free(s->ctx, da);
	s->be->free(s->ctx, db);
}

static void gemm_parity(struct pair *p, const struct gemm_case *g)
{
	/* As stored: a is m x k (k x m when transposed), b is k x n (n x k). */
	size_t ca = g->ta ? g->m : g->k, ra = g->ta ? g->k : g->m;
	size_t cb = g->tb ? g->k : g->n, rb = g->tb ? g->n : g->k;
	size_t lda = (ca ? ca : 1) + g->pad, ldb = (cb ? cb : 1) + g->pad;
	size_t ldc = g->n + g->pad, na = ra * lda, nb = rb * ldb, nc = g->m * ldc;
	float *a = rnd_array(na, -1, 1), *b = rnd_array(nb, -1, 1);
	float *c1 = rnd_array(nc, -1, 1), *c2 = dup_array(c1, nc);
	char what[160];

	gemm_on(&p->cpu, g, a, lda, na, b, ldb, nb, c1, ldc);
	gemm_on(&p->cuda, g, a, lda, na, b, ldb, nb, c2, ldc);
	snprintf(what, sizeof(what), "gemm ta %d tb %d m %zu n %zu k %zu lda %zu ldb %zu "
		 "ldc %zu alpha %g beta %g", g->ta, g->tb, g->m, g->n, g->k, lda, ldb, ldc,
		 (double)g->alpha, (double)g->beta);
	/* The whole of c: padding between rows must be left alone by both. */
	expect_close(what, c1, c2, nc);
	free(a);
	free(b);
	free(c1);
	free(c2);
}

START_TEST(test_gemm)
{
	static const struct gemm_case odd[] = {
		{ 0, 0, 37, 29, 53, 0, 1, 0 }, { 0, 0, 37, 29, 53, 3, 0.7f, -0.5f },
	};
	/* The shapes of the mlp: a batch times weight rows, and back. */
	static const struct gemm_case more[] = {
		{ 0, 1, 64, 32, 64, 1, 1, 0 },     /* forward: x w^T, ldb = in + 1 */
		{ 1, 0, 32, 64, 64, 1, 1, 0 },     /* dW = dh^T x */
		{ 0, 0, 64, 64, 32, 1, 1, 0 },     /* dx = dh w */
		{ 0, 0, 1, 1, 1, 0, 2, 1 },
		{ 1, 1, 129, 65, 257, 7, 1, 1 },
		{ 0, 0, 5, 7, 0, 2, 1, 0.5f },      /* k = 0: c = beta c */
		{ 1, 1, 5, 7, 0, 2, 1, 0 },
	};
	struct pair p;

	if (!pair_open("gemm", &p))
		return;
	for (int ta = 0; ta < 2; ta++) {
		for (int tb = 0; tb < 2; tb++) {
			for (size_t i = 0; i < DML_ARRAY_LEN(odd); i++) {
				struct gemm_case g = odd[i];

				g.ta = ta;
				g.tb = tb;
				gemm_parity(&p, &g);
			}
		}
	}
	for (size_t i = 0; i < DML_ARRAY_LEN(more); i++)
		gemm_parity(&p, &more[i]);
	pair_close(&p);
}
END_TEST

START_TEST(test_bias_act)
{
	const size_t rows = 37, cols = 29, ldh = 31, nh = rows * ldh;
	/* A plain bias vector, and the last column of weight rows (in = 53). */
	const size_t strides[] = { 1, 54 };
	struct pair p;

	if (!pair_open("bias_act", &p))
		return;
	for (size_t si = 0; si < DML_ARRAY_LEN(strides); si++) {
		for (int relu = 0; relu < 2; relu++) {
			size_t nb = (cols - 1) * strides[si] + 1;
			float *h1 = rnd_array(nh, -1, 1), *h2 = dup_array(h1, nh);
			float *bias = rnd_array(nb, -0.5f, 0.5f);
			float *d1 = up(&p.cpu, h1, nh), *d2 = up(&p.cuda, h2, nh);
			float *b1 = up(&p.cpu, bias, nb), *b2 = up(&p.cuda, bias, nb);
			char what[128];

			ck_side(&p.cpu, p.cpu.be->bias_act(p.cpu.ctx, d1, rows, cols, ldh, b1,
							   strides[si], relu));
			ck_side(&p.cuda, p.cuda.be->bias_act(p.cuda.ctx, d2, rows, cols, ldh,
							     b2, strides[si], relu));
			down(&p.cpu, h1, d1, nh);
			down(&p.cuda, h2, d2, nh);
			snprintf(what, sizeof(what), "bias_act rows %zu cols %zu ldh %zu "
				 "bias_stride %zu relu %d", rows, cols, ldh, strides[si], relu);
			expect_close(what, h1, h2, nh);
			p.cpu.be->free(p.cpu.ctx, b1);
			p.cuda.be->free(p.cuda.ctx, b2);
			free(h1);
			free(h2);
			free(bias);
		}
	}
	pair_close(&p);
}
END_TEST

START_TEST(test_relu_grad)
{
	const size_t rows = 37, cols = 29, ld = 33, n = rows * ld;
	float *h, *g1, *g2, *dh1, *dh2, *dg1, *dg2;
	struct pair p;

	if (!pair_open("relu_grad", &p))
		return;
	h = rnd_array(n, -1, 1);
	g1 = rnd_array(n, -2, 2);
	g2 = dup_array(g1, n);
	/* Exact zeros count as inactive. */
	for (size_t i = 0; i < n; i += 7)
		h[i] = 0.0f;
	dh1 = up(&p.cpu, h, n);
	dh2 = up(&p.cuda, h, n);
	dg1 = up(&p.cpu, g1, n);
	dg2 = up(&p.cuda, g2, n);
	ck_side(&p.cpu, p.cpu.be->relu_grad(p.cpu.ctx, dg1, dh1, rows, cols, ld));
	ck_side(&p.cuda, p.cuda.be->relu_grad(p.cuda.ctx, dg2, dh2, rows, cols, ld));
	down(&p.cpu, g1, dg1, n);
	down(&p.cuda, g2, dg2, n);
	expect_close("relu_grad rows 37 cols 29 ld 33", g1, g2, n);
	ck_assert(g1[0] == 0.0f);
	p.cpu.be->free(p.cpu.ctx, dh1);
	p.cuda.be->free(p.cuda.ctx, dh2);
	pair_close(&p);
	free(h);
	free(g1);
	free(g2);
}
END_TEST

START_TEST(test_col_sum)
{
	static const struct { size_t rows, cols, ld, out_stride; float alpha; } cases[] = {
		{ 67, 45, 50, 1, 0.25f }, { 67, 45, 45, 3, 1 }, { 1000, 33, 65, 65, -0.5f },
		{ 1, 5, 5, 1, 1 }, { 0, 9, 9, 2, 1 },
	};
	struct pair p;

	if (!pair_open("col_sum", &p))
		return;
	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		size_t rows = cases[i].rows, cols = cases[i].cols, ld = cases[i].ld;
		size_t st = cases[i].out_stride, nd = rows * ld, no = (cols - 1) * st + 1;
		float *dh = rnd_array(nd, -1, 1);
		/* Out starts as garbage: sums overwrite, and only every st-th. */
		float *o1 = rnd_array(no, 5, 6), *o2 = dup_array(o1, no);
		float *d1 = up(&p.cpu, dh, nd), *d2 = up(&p.cuda, dh, nd);
		float *e1 = up(&p.cpu, o1, no), *e2 = up(&p.cuda, o2, no);
		char what[128];

		ck_side(&p.cpu, p.cpu.be->col_sum(p.cpu.ctx, d1, rows, cols, ld,
						  cases[i].alpha, e1, st));
		ck_side(&p.cuda, p.cuda.be->col_sum(p.cuda.ctx, d2, rows, cols, ld,
						    cases[i].alpha, e2, st));
		down(&p.cpu, o1, e1, no);
		down(&p.cuda, o2, e2, no);
		snprintf(what, sizeof(what), "col_sum rows %zu cols %zu ld %zu out_stride %zu "
			 "alpha %g", rows, cols, ld, st, (double)cases[i].alpha);
		expect_close(what, o1, o2, no);
		if (!rows)
			ck_assert(o2[0] == 0.0f);
		p.cpu.be->free(p.cpu.ctx, d1);
		p.cuda.be->free(p.cuda.ctx, d2);
		free(dh);
		free(o1);
		free(o2);
	}
	pair_close(&p);
}
END_TEST

/* dlogits: none, a buffer of its own, or the logits themselves. */
enum { DL_NONE, DL_OWN, DL_IN_PLACE };

struct xent_out {
	int rc;
	double loss;
	uint64_t correct;
	float *dlogits;             /* rows * classes, malloc'd; NULL for DL_NONE */
	char err[256];
};

static void xent_on(struct side *s, const float *logits, const float *labels, size_t rows,
		    size_t classes, float scale, int dl, struct xent_out *o)
{
	size_t n = rows * classes;
	float *dz = up(s, logits, n), *dy = up(s, labels, rows), *dd = NULL;

	if (dl == DL_OWN)
		ck_side(s, s->be->alloc(s->ctx, n, &dd));
	else if (dl == DL_IN_PLACE)
		dd = dz;
	/* Adds to what is there: start from something other than 0. */
	o->loss = 5.0;
	o->correct = 3;
	o->rc = s->be->softmax_xent(s->ctx, dz, dy, rows, classes, scale, dd, &o->loss,
				    &o->correct);
	snprintf(o->err, sizeof(o->err), "%s", s->be->error(s->ctx));
	o->dlogits = NULL;
	if (dd) {
		o->dlogits = malloc((n ? n : 1) * sizeof(float));
		ck_assert_ptr_nonnull(o->dlogits);
		down(s, o->dlogits, dd, n);
	}
	if (dd != dz)
		s->be->free(s->ctx, dz);
	s->be->free(s->ctx, dy);
}

static void xent_parity(struct pair *p, size_t rows, size_t classes, float spread,
			const char *label)
{
	static const char *const dl_names[] = { "NULL", "own", "in place" };
	size_t n = rows * classes;
	float *z = rnd_array(n, -spread, spread), *y = malloc(rows * sizeof(float));
	const float scale = 1.0f / (float)rows;

	ck_assert_ptr_nonnull(y);
	for (size_t r = 0; r < rows; r++)
		y[r] = (float)(r * 7 % classes);
	/* A row of equal logits: the first is the largest, for both. */
	for (size_t j = 0; j < classes; j++)
		z[j] = 0.5f;
	for (int dl = DL_NONE; dl <= DL_IN_PLACE; dl++) {
		struct xent_out a, b;
		char what[160];
		float fa, fb;

		xent_on(&p->cpu, z, y, rows, classes, scale, dl, &a);
		xent_on(&p->cuda, z, y, rows, classes, scale, dl, &b);
		ck_assert_msg(a.rc == 0, "cpu: %s", a.err);
		ck_assert_msg(b.rc == 0, "cuda: %s", b.err);
		ck_assert_str_eq(b.err, "");
		fa = (float)a.loss;
		fb = (float)b.loss;
		snprintf(what, sizeof(what), "softmax_xent rows %zu classes %zu %s dlogits %s: "
			 "loss %.6f vs %.6f, correct %llu vs %llu", rows, classes, label,
			 dl_names[dl], a.loss, b.loss, (unsigned long long)a.correct,
			 (unsigned long long)b.correct);
		expect_close(what, &fa, &fb, 1);
		ck_assert_uint_eq(a.correct, b.correct);
		ck_assert_uint_ge(a.correct, 3 + (y[0] == 0.0f));
		if (dl != DL_NONE) {
			snprintf(what, sizeof(what), "softmax_xent rows %zu classes %zu %s "
				 "dlogits %s: dlogits", rows, classes, label, dl_names[dl]);
			expect_close(what, a.dlogits, b.dlogits, n);
		}
		free(a.dlogits);
		free(b.dlogits);
	}
	free(z);
	free(y);
}

START_TEST(test_softmax_xent)
{
	struct pair p;

	if (!pair_open("softmax_xent", &p))
		return;
	xent_parity(&p, 37, 10, 3, "logits in [-3, 3)");
	xent_parity(&p, 64, 4, 3, "logits in [-3, 3)");
	xent_parity(&p, 19, 100, 5, "logits in [-5, 5)");       /* more classes than a warp */
	xent_parity(&p, 5, 1, 3, "logits in [-3, 3)");
	xent_parity(&p, 300, 7, 1000, "logits in [-1000, 1000)"); /* needs the max shift */
	pair_close(&p);
}
END_TEST

/* A bad label: DML_EINVAL from both, the same message, nothing added. */
START_TEST(test_softmax_xent_bad_label)
{
	static const float bad[] = { 10, -1, 2.5f, NAN, 1e9f };
	struct pair p;

	if (!pair_open("softmax_xent_bad_label", &p))
		return;
	for (size_t i = 0; i < DML_ARRAY_LEN(bad); i++) {
		float z[6 * 10], y[6] = { 1, 2, 3, 4, 5, 6 };
		struct xent_out a, b;

		for (size_t j = 0; j < DML_ARRAY_LEN(z); j++)
			z[j] = rnd(-1, 1);
		y[4] = bad[i];
		xent_on(&p.cpu, z, y, 6, 10, 1, DL_NONE, &a);
		xent_on(&p.cuda, z, y, 6, 10, 1, DL_NONE, &b);
		ck_assert_int_eq(a.rc, DML_EINVAL);
		ck_assert_int_eq(b.rc, DML_EINVAL);
		ck_assert(b.loss == 5.0 && b.correct == 3);
		ck_assert_str_eq(a.err, b.err);
		say("parity: softmax_xent label %g of 10 classes: \"%s\" from both",
		    (double)bad[i], b.err);
	}
	pair_close(&p);
}
END_TEST

/* Arguments either backend refuses before touching memory: DML_EINVAL from both. */
START_TEST(test_bad_args)
{
	const size_t big = (size_t)INT_MAX + 1;
	struct pair p;

	if (!pair_open("bad_args", &p))
		return;
	for (int i = 0; i < 2; i++) {
		struct side *s = i ? &p.cuda : &p.cpu;
		void *x = s->ctx;
		const struct dml_backend_ops *be = s->be;
		double loss = 0;
		uint64_t correct = 0;

		ck_assert_int_eq(be->gemm(x, 0, 0, 4, 4, 4, 1, NULL, 3, NULL, 4, 0, NULL, 4),
				 DML_EINVAL);
		ck_assert_msg(strstr(be->error(x), "lda") != NULL, "%s", be->error(x));
		ck_assert_int_eq(be->gemm(x, 1, 0, 4, 4, 4, 1, NULL, 4, NULL, 4, 0, NULL, 3),
				 DML_EINVAL);
		ck_assert_msg(strstr(be->error(x), "ldc") != NULL, "%s", be->error(x));
		ck_assert_int_eq(be->gemm(x, 0, 0, big, 1, 1, 1, NULL, 1, NULL, 1, 0, NULL,
					  1), DML_EINVAL);
		ck_assert_int_eq(be->bias_act(x, NULL, 2, 5, 4, NULL, 1, 0), DML_EINVAL);
		ck_assert_int_eq(be->relu_grad(x, NULL, NULL, 2, 5, 4), DML_EINVAL);
		ck_assert_int_eq(be->col_sum(x, NULL, 2, 5, 4, 1, NULL, 1), DML_EINVAL);
		ck_assert_int_eq(be->softmax_xent(x, NULL, NULL, 3, 0, 1, NULL, &loss,
						  &correct), DML_EINVAL);
		/* Nothing to do is not an error, and touches no pointer. */
		ck_assert_int_eq(be->gemm(x, 0, 0, 0, 4, 4, 1, NULL, 4, NULL, 4, 0, NULL,
					  4), 0);
		ck_assert_int_eq(be->softmax_xent(x, NULL, NULL, 0, 4, 1, NULL, &loss,
						  &correct), 0);
		ck_assert(loss == 0 && correct == 0);
		ck_side(s, be->sync(x));
	}
	say("parity: bad arguments refused by both");
	pair_close(&p);
}
END_TEST

/* A kernel that faults on the device: sync reports it, close still works. */
START_TEST(test_cuda_fault)
{
	struct pair p;
	struct side *s = &p.cuda;
	int rc;

	/* The fault spoils the process's CUDA context for every later test. */
	if (getenv("CK_FORK") && strcmp(getenv("CK_FORK"), "no") == 0) {
		say("SKIP: cuda_fault: needs Check's fork mode");
		return;
	}
	if (!pair_open("cuda_fault", &p))
		return;
	/* Address 16 is never mapped: the kernel's first store faults. */
	ck_side(s, s->be->relu_grad(s->ctx, (float *)16, (const float *)16, 64, 64, 64));
	rc = s->be->sync(s->ctx);
	ck_assert_int_eq(rc, DML_EIO);
	/* "call: message"; the call may be the first one to see the fault. */
	ck_assert_msg(strncmp(s->be->error(s->ctx), "cuda", 4) == 0 &&
		      strstr(s->be->error(s->ctx), ": ") != NULL, "%s", s->be->error(s->ctx));
	say("cuda_fault: sync: %s", s->be->error(s->ctx));
	pair_close(&p);
}
END_TEST

/* ---- one mlp step on each backend ------------------------------------------ */

/* dim 64, one hidden layer of 32, 4 classes, batches of 64, synthetic data. */
struct mlp_spec {
	Dml__JobSpec job;
	Dml__TableSpec t[2];
	Dml__TableSpec *tp[2];
};

static void mlp_spec_init(struct mlp_spec *s)
{
	static const uint32_t keys[] = { 32, 4 }, width[] = { 64 + 1, 32 + 1 };

	dml__job_spec__init(&s->job);
	s->job.name = "parity";
	s->job.app = "mlp";
	s->job.data = "synthetic";
	s->job.examples = 1000;
	s->job.dim = 64;
	s->job.hidden = "32";
	s->job.batch_size = 64;
	s->job.seed = 17;
	/* A stop condition: the job check the app makes wants one. */
	s->job.max_clocks = 1;
	for (uint32_t i = 0; i < 2; i++) {
		dml__table_spec__init(&s->t[i]);
		s->t[i].id = i;
		s->t[i].dense = 1;
		s->t[i].keys = keys[i];
		s->t[i].width = width[i];
		s->t[i].init = "uniform";
		s->t[i].init_scale = 0.1;
		s->t[i].optimizer = "sgd";
		s->t[i].lr = 0.1;
		s->tp[i] = &s->t[i];
	}
	s->job.n_tables = 2;
	s->job.tables = s->tp;
}

struct mlp_result {
	struct dml_app_step step;
	double accuracy;
	float *grads[MAX_TABLES];
	size_t sizes[MAX_TABLES];
};

/* Make the app on s, one step and one evaluation from params; what came out. */
static void mlp_run(struct side *s, const struct mlp_spec *spec, float *const *params,
		    struct mlp_result *r)
{
	const struct dml_app *app = &dml_app_mlp;
	struct dml_app_env env = { s->be->name, s->be, s->ctx };
	struct app_test_io f;
	struct dml_app_io io;
	const uint32_t part = 0;
	char err[256] = "";
	void *state = NULL;

	memset(r, 0, sizeof(*r));
	ck_assert_msg(app->create(&spec->job, &env, &state, err, sizeof(err)) == 0, "%s: %s",
		      s->be->name, err);
	app_test_io_init(&f, app, state, &io);
	ck_assert_uint_eq(f.nt, 2);
	for (size_t i = 0; i < f.nt; i++) {
		ck_assert(f.t[i].id == spec->t[i].id && f.t[i].dense);
		ck_assert_uint_eq(f.t[i].keys, spec->t[i].keys);
		ck_assert_uint_eq(f.t[i].width, spec->t[i].width);
		r->sizes[i] = (size_t)f.t[i].keys * f.t[i].width;
		f.params[i] = params[i];
		f.grads[i] = r->grads[i] = calloc(r->sizes[i], sizeof(float));
		ck_assert_ptr_nonnull(r->grads[i]);
	}
	ck_assert_msg(app->set_partitions(state, &part, 1, 1, err, sizeof(err)) == 0, "%s",
		      err);
	ck_assert_msg(app->step(state, &io, &r->step, err, sizeof(err)) == 0, "%s: %s",
		      s->be->name, err);
	for (size_t i = 0; i < f.nt; i++)
		ck_assert_int_eq(f.table_pushes[i], 1);
	ck_assert_msg(app->evaluate(state, &io, &r->accuracy, err, sizeof(err)) == 0,
		      "%s: %s", s->be->name, err);
	app->destroy(state);
}

START_TEST(test_mlp_step)
{
	struct mlp_spec spec;
	struct mlp_result a, b;
	float *params[2];
	struct pair p;
	float la, lb;

	if (!pair_open("mlp_step", &p))
		return;
	mlp_spec_init(&spec);
	for (size_t i = 0; i < 2; i++)
		params[i] = rnd_array((size_t)spec.t[i].keys * spec.t[i].width, -0.3f, 0.3f);
	mlp_run(&p.cpu, &spec, params, &a);
	mlp_run(&p.cuda, &spec, params, &b);
	ck_assert_uint_eq(a.step.examples, 64);
	ck_assert_uint_eq(b.step.examples, 64);
	la = (float)a.step.loss;
	lb = (float)b.step.loss;
	ck_assert(isfinite(la) && la > 0);
	say("mlp_step: loss %.6f (cpu) %.6f (cuda), accuracy %.4f (cpu) %.4f (cuda)",
	    a.step.loss, b.step.loss, a.accuracy, b.accuracy);
	expect_close("mlp step loss", &la, &lb, 1);
	expect_close("mlp step table 0 gradient (32 x 65)", a.grads[0], b.grads[0],
		     a.sizes[0]);
	expect_close("mlp step table 1 gradient (4 x 33)", a.grads[1], b.grads[1],
		     a.sizes[1]);
	/* Accuracy over the first 1000 records: two near-ties may go either way. */
	ck_assert_msg(fabs(a.accuracy - b.accuracy) <= 2.0 / 1000, "accuracy %g vs %g",
		      a.accuracy, b.accuracy);
	for (size_t i = 0; i < 2; i++) {
		/* A gradient of all zeros would compare equal and prove nothing. */
		double norm = 0;

		for (size_t j = 0; j < a.sizes[i]; j++)
			norm += fabs(a.grads[i][j]);
		ck_assert_msg(norm > 1e-3, "table %zu: gradient is zero", i);
		free(a.grads[i]);
		free(b.grads[i]);
		free(params[i]);
	}
	pair_close(&p);
}
END_TEST

int main(int argc, char **argv)
{
	Suite *s;
	TCase *tc;

	(void)argc;
	dml_blas_kernels_choose(argv);
	s = suite_create("backend");
	tc = tcase_create("backend");
	tcase_set_timeout(tc, TEST_TIMEOUT_S);
	tcase_add_test(tc, test_registry);
	tcase_add_test(tc, test_blas_kernels);
	tcase_add_test(tc, test_cuda_open);
	tcase_add_test(tc, test_copies);
	tcase_add_test(tc, test_gemm);
	tcase_add_test(tc, test_bias_act);
	tcase_add_test(tc, test_relu_grad);
	tcase_add_test(tc, test_col_sum);
	tcase_add_test(tc, test_softmax_xent);
	tcase_add_test(tc, test_softmax_xent_bad_label);
	tcase_add_test(tc, test_bad_args);
	tcase_add_test(tc, test_mlp_step);
	tcase_add_test(tc, test_cuda_fault);
	suite_add_tcase(s, tc);
	return dml_check_run(s);
}
