/*
 * check_backend_ops.c - check_backend's parity tests, where the cuda
 * backend is built and a device opens: every op run on cpu and on cuda
 * with the same random inputs, odd sizes, padded row strides, both
 * transposes of gemm, relu on and off, softmax_xent with and without
 * dlogits (also in place) and with bad labels; the refusals of bad
 * arguments. Without a device these tests print "SKIP: test: reason" and
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

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/backend.h"
#include "worker/blas_kernels.h"
#include "test/check_backend.h"
#include "test/check_run.h"
#include "proto/dml_error.h"

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

void check_backend_ops_tests(TCase *tc)
{
	tcase_add_test(tc, test_copies);
	tcase_add_test(tc, test_gemm);
	tcase_add_test(tc, test_bias_act);
	tcase_add_test(tc, test_relu_grad);
	tcase_add_test(tc, test_col_sum);
	tcase_add_test(tc, test_softmax_xent);
	tcase_add_test(tc, test_softmax_xent_bad_label);
	tcase_add_test(tc, test_bad_args);
}
