/*
 * Optimizer kernels (see optim.h): the inner loops of every push a server
 * applies, so they are written for the compiler's vectoriser. Each kernel
 * takes restrict pointers (parameters, state and gradient never overlap) and
 * runs twice: over the longest prefix whose length is a multiple of
 * OPTIM_BLOCK, then over the short remainder. gcc -O2 uses the "very cheap"
 * vectoriser cost model, which only takes loops whose trip count is a known
 * multiple of the vector length; the prefix loop is such a loop for SSE, AVX
 * and AVX-512 alike. (The square root in ADAGRAD and ADAM vectorises only
 * where errno is not set by maths functions, i.e. with -fno-math-errno.)
 *
 * Denormal numbers are flushed to zero while a push is applied (the SSE
 * control word's FTZ and DAZ bits, restored after): the decaying state of
 * momentum and adam (m *= beta1 each step) drifts through the denormal
 * range for weights whose gradient is mostly zero (an image's border
 * pixels), and on x86 every denormal operand costs a microcode assist, a
 * hundred times a normal one: half of an mlp step's time on Fashion-MNIST.
 * Values below FLT_MIN (1.2e-38) change no update; add is left exact.
 *
 * Nothing here allocates, logs or checks arguments beyond what
 * dml_optim_validate() does for a conf: the table validated everything.
 */
#include <math.h>
#include <stdint.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "proto/dml_error.h"
#include "proto/vector_clones.h"
#include "store/optim.h"

#define OPTIM_BLOCK ((size_t)16)

/* Constants of an application, computed once per row or run, not per value. */
struct optim_k {
	float lr, wd, mu, eps;
	float b1, b2;      /* adam: decay rates, to the push's weight */
	float a1, a2;      /* adam: 1 - b1, 1 - b2 */
	float weight;      /* adam, adagrad: steps the push counts as */
	float inv_w;       /* adam, adagrad: 1 / weight, for the mean gradient */
	float step_size;   /* adam: weight * lr / (1 - beta1^t) */
	float inv_c2;      /* adam: 1 / (1 - beta2^t) */
};

static inline void kernel_add(float *restrict w, const float *restrict g, size_t n)
{
	for (size_t i = 0; i < n; i++)
		w[i] += g[i];
}

static inline void kernel_sgd(const struct optim_k *k, float *restrict w,
			      const float *restrict g, size_t n)
{
	const float lr = k->lr, wd = k->wd;

	for (size_t i = 0; i < n; i++)
		w[i] -= lr * (g[i] + wd * w[i]);
}

static inline void kernel_momentum(const struct optim_k *k, float *restrict w,
				   float *restrict v, const float *restrict g, size_t n)
{
	const float lr = k->lr, wd = k->wd, mu = k->mu;

	for (size_t i = 0; i < n; i++) {
		float vi = mu * v[i] + g[i] + wd * w[i];

		v[i] = vi;
		w[i] -= lr * vi;
	}
}

static inline void kernel_adagrad(const struct optim_k *k, float *restrict w,
				  float *restrict h, const float *restrict g, size_t n)
{
	const float lr = k->lr * k->weight, wd = k->wd, eps = k->eps;
	const float weight = k->weight, inv_w = k->inv_w;

	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * inv_w + wd * w[i];
		float hi = h[i] + weight * gi * gi;

		h[i] = hi;
		w[i] -= lr * gi / (sqrtf(hi) + eps);
	}
}

static inline void kernel_adam(const struct optim_k *k, float *restrict w,
			       float *restrict m, float *restrict v,
			       const float *restrict g, size_t n)
{
	const float wd = k->wd, eps = k->eps, b1 = k->b1, b2 = k->b2;
	const float a1 = k->a1, a2 = k->a2, inv_w = k->inv_w;
	const float step_size = k->step_size, inv_c2 = k->inv_c2;

	for (size_t i = 0; i < n; i++) {
		float gi = g[i] * inv_w + wd * w[i];
		float mi = b1 * m[i] + a1 * gi;
		float vi = b2 * v[i] + a2 * gi * gi;

		m[i] = mi;
		v[i] = vi;
		w[i] -= step_size * mi / (sqrtf(vi * inv_c2) + eps);
	}
}

size_t dml_optim_state_floats(const struct dml_optim_conf *c)
{
	switch (c->kind) {
	case DML_OPT_MOMENTUM:
	case DML_OPT_ADAGRAD:
		return 1;
	case DML_OPT_ADAM:
		return 2;
	default:
		return 0;
	}
}

int dml_optim_uses_step(const struct dml_optim_conf *c)
{
	return c->kind == DML_OPT_ADAM || (c->kind != DML_OPT_ADD && c->lr_decay > 0.0f);
}

/* The learning rate of a row's t-th update (t >= 1). */
static double decayed_lr(const struct dml_optim_conf *c, uint32_t t)
{
	return (double)c->lr / (1.0 + (double)c->lr_decay * (double)(t - 1));
}

/* Constants of a row's t-th update. Bias corrections in double: 1 - beta^t
 * loses most of its digits in float for beta close to 1 and small t. */
static void step_constants(const struct dml_optim_conf *c, uint32_t t, struct optim_k *k)
{
	double lr = decayed_lr(c, t);

	k->lr = (float)lr;
	if (c->kind == DML_OPT_ADAM) {
		double c1 = 1.0 - pow((double)c->beta1, (double)t);
		double c2 = 1.0 - pow((double)c->beta2, (double)t);

		k->step_size = (float)(lr / c1) * k->weight;
		k->inv_c2 = (float)(1.0 / c2);
	}
}

/* Constants of a run of applications. With a step counter (ADAM, a decaying
 * lr) they depend on the row's step; rows applied together mostly share it,
 * so the last ones are kept. */
struct optim_run {
	struct optim_k k;
	uint32_t t;        /* step the constants are for; 0: none yet */
};

/* A decay rate over weight steps, and one minus it, each to float precision
 * (1 - beta^weight in float would lose most digits for a small weight). */
static void decay_to(float beta, float weight, float *b, float *a)
{
	double l = (double)weight * log((double)beta);

	*b = (float)exp(l);
	*a = (float)-expm1(l);
}

static void run_init(const struct dml_optim_conf *c, float weight, struct optim_run *run)
{
	run->k = (struct optim_k){
		.lr = c->lr, .wd = c->weight_decay, .mu = c->momentum, .eps = c->eps,
		.b1 = c->beta1, .b2 = c->beta2, .a1 = 1.0f - c->beta1, .a2 = 1.0f - c->beta2,
		.weight = 1.0f, .inv_w = 1.0f,
	};
	/* Weight 1 keeps the plain formulas bit for bit (beta 0 has no log). */
	if (weight != 1.0f && (c->kind == DML_OPT_ADAM || c->kind == DML_OPT_ADAGRAD)) {
		run->k.weight = weight;
		run->k.inv_w = 1.0f / weight;
		if (c->kind == DML_OPT_ADAM) {
			if (c->beta1 > 0.0f)
				decay_to(c->beta1, weight, &run->k.b1, &run->k.a1);
			if (c->beta2 > 0.0f)
				decay_to(c->beta2, weight, &run->k.b2, &run->k.a2);
		}
	}
	/* The first row computes the bias-corrected step; until then (no step
	 * counter in use) adam's step is lr scaled the same way. */
	run->k.step_size = c->lr * run->k.weight;
	run->t = 0;
}

/* Count a row's update and make the constants of its step. */
static void step_advance(const struct dml_optim_conf *c, struct optim_run *run,
			 uint32_t *step)
{
	if (*step < UINT32_MAX)
		(*step)++;
	if (*step != run->t) {
		step_constants(c, *step, &run->k);
		run->t = *step;
	}
}

/* One application; inlined into both entry points so that the loop over
 * rows keeps its constants in registers. */
static inline __attribute__((always_inline)) void
apply_one(const struct dml_optim_conf *c, struct optim_run *run, float *w,
	  float *state, uint32_t *step, const float *g, size_t n)
{
	const struct optim_k *k = &run->k;
	size_t m = n & ~(OPTIM_BLOCK - 1); /* vectorised prefix; the rest is scalar */

	/* The step is counted in each case rather than once before the switch:
	 * that form stops gcc 12 from vectorising the kernels in apply_rows. */
	switch (c->kind) {
	case DML_OPT_ADD:
		kernel_add(w, g, m);
		kernel_add(w + m, g + m, n - m);
		break;
	case DML_OPT_SGD:
		if (step && dml_optim_uses_step(c))
			step_advance(c, run, step);
		kernel_sgd(k, w, g, m);
		kernel_sgd(k, w + m, g + m, n - m);
		break;
	case DML_OPT_MOMENTUM:
		if (step && dml_optim_uses_step(c))
			step_advance(c, run, step);
		kernel_momentum(k, w, state, g, m);
		kernel_momentum(k, w + m, state + m, g + m, n - m);
		break;
	case DML_OPT_ADAGRAD:
		if (step && dml_optim_uses_step(c))
			step_advance(c, run, step);
		kernel_adagrad(k, w, state, g, m);
		kernel_adagrad(k, w + m, state + m, g + m, n - m);
		break;
	case DML_OPT_ADAM:
		if (step && dml_optim_uses_step(c))
			step_advance(c, run, step);
		kernel_adam(k, w, state, state + n, g, m);
		kernel_adam(k, w + m, state + m, state + n + m, g + m, n - m);
		break;
	}
}

/*
 * Flush denormals to zero from here to denormals_restore(saved), for every
 * optimizer but add: its sums stay exact (counters, the exactness tests).
 */
static unsigned denormals_flush(const struct dml_optim_conf *c)
{
#if defined(__SSE__)
	unsigned saved = _mm_getcsr();

	if (c->kind == DML_OPT_ADD)
		return saved;

	/* FTZ (bit 15): denormal results become 0; DAZ (bit 6): denormal
	 * operands are read as 0. */
	_mm_setcsr(saved | 0x8040u);
	return saved;
#else
	(void)c;
	return 0;
#endif
}

static void denormals_restore(unsigned saved)
{
#if defined(__SSE__)
	_mm_setcsr(saved);
#else
	(void)saved;
#endif
}

DML_VECTOR_CLONES
void dml_optim_apply_weighted(const struct dml_optim_conf *c, float *w, float *state,
			      uint32_t *step, const float *g, size_t n, float weight)
{
	struct optim_run run;
	unsigned csr = denormals_flush(c);

	run_init(c, weight, &run);
	apply_one(c, &run, w, state, step, g, n);
	denormals_restore(csr);
}

void dml_optim_apply(const struct dml_optim_conf *c, float *w, float *state,
		     uint32_t *step, const float *g, size_t n)
{
	dml_optim_apply_weighted(c, w, state, step, g, n, 1.0f);
}

DML_VECTOR_CLONES
void dml_optim_apply_rows(const struct dml_optim_conf *c, float *values, float *state,
			  uint32_t *steps, size_t width, const uint64_t *rows, size_t n,
			  const float *g, float weight)
{
	const size_t sw = width * dml_optim_state_floats(c);
	struct optim_run run;
	unsigned csr;

	/* Scalar rows (sparse features, counters) are the common sparse case:
	 * one value per key leaves no loop to amortise the general path. */
	if (width == 1 && c->kind == DML_OPT_ADD) {
		for (size_t i = 0; i < n; i++)
			values[rows[i]] += g[i];
		return;
	}
	if (width == 1 && c->kind == DML_OPT_SGD && !steps) {
		const float lr = c->lr, wd = c->weight_decay;

		for (size_t i = 0; i < n; i++) {
			float *w = &values[rows[i]];

			*w -= lr * (g[i] + wd * *w);
		}
		return;
	}
	csr = denormals_flush(c);
	run_init(c, weight, &run);
	for (size_t i = 0; i < n; i++, g += width) {
		uint64_t r = rows[i];

		apply_one(c, &run, values + r * width, state ? state + r * sw : NULL,
			  steps ? steps + r : NULL, g, width);
	}
	denormals_restore(csr);
}
