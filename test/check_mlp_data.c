/*
 * check_mlp_data.c - check_mlp's tests of the mlp on data: IDX files
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

#include "worker/app.h"
#include "test/app_test.h"
#include "worker/backend.h"
#include "test/check_mlp.h"
#include "test/check_run.h"
#include "worker/data_idx.h"
#include "proto/dml_error.h"
#include "proto/job_spec.h"
#include "test/tmpdir.h"

#define FASHION "/usr/share/datasets/fashion-mnist/"
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

void check_mlp_data_tests(TCase *tc)
{
	tcase_add_test(tc, test_mlp_idx_data);
	tcase_add_test(tc, test_mlp_idx_errors);
	tcase_add_test(tc, test_mlp_partitions_shuffled);
	tcase_add_test(tc, test_mlp_learns);
	tcase_add_test(tc, test_mlp_io_failures);
	tcase_add_test(tc, test_mlp_profile_job);
	tcase_add_test(tc, test_mlp_fashion_mnist);
}
