/*
 * Tests of the click-like synthetic data (worker/data_synth_clicks.h) and of
 * `dml-bench gen-clicks`, which writes it as libsvm text: records are the
 * same every time, have the promised shape, Zipf-skewed ids and a sane label
 * rate, the hidden model's AUC is in the band the data was tuned for, and
 * the files gen-clicks writes (plain and gzipped) read back as the same
 * records through the libsvm reader.
 *
 * Must never: take more than a few seconds, or write outside its private
 * temporary folder.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "worker/app_util.h"
#include "worker/data_libsvm.h"
#include "worker/data_synth_clicks.h"
#include "proto/dml_error.h"
#include "test/tmpdir.h"

#define SEED 42

struct rec {
	uint64_t ids[DML_CLICKS_MAX_NNZ];
	float vals[DML_CLICKS_MAX_NNZ];
	size_t nnz;
	float label;
};

static void rec_make(const struct dml_clicks *g, uint64_t i, struct rec *r)
{
	memset(r, 0, sizeof(*r));
	dml_clicks_record(g, i, r->ids, r->vals, &r->nnz, &r->label);
}

static void gen_init(struct dml_clicks *g)
{
	ck_assert_int_eq(dml_clicks_init(g, SEED, 0), 0);
}

START_TEST(test_deterministic)
{
	struct dml_clicks g, h;
	struct rec a, b;
	int differ = 0;

	gen_init(&g);
	gen_init(&h);
	for (uint64_t i = 0; i < 1000; i++) {
		rec_make(&g, i * 7919, &a);
		rec_make(&h, i * 7919, &b);
		ck_assert(memcmp(&a, &b, sizeof(a)) == 0);
	}
	rec_make(&g, 1, &b);
	differ = memcmp(&a, &b, sizeof(a)) != 0;
	ck_assert(differ);
	dml_clicks_free(&g);
	/* Another seed is other data. */
	ck_assert_int_eq(dml_clicks_init(&g, SEED + 1, 0), 0);
	rec_make(&g, 1, &a);
	ck_assert(memcmp(&a, &b, sizeof(a)) != 0);
	dml_clicks_free(&g);
	dml_clicks_free(&h);
}
END_TEST

START_TEST(test_shape)
{
	struct dml_clicks g;
	struct rec r;
	size_t lo = SIZE_MAX, hi = 0;

	gen_init(&g);
	for (uint64_t i = 0; i < 20000; i++) {
		rec_make(&g, i, &r);
		ck_assert_uint_ge(r.nnz, g.min_nnz);
		ck_assert_uint_le(r.nnz, g.max_nnz);
		lo = r.nnz < lo ? r.nnz : lo;
		hi = r.nnz > hi ? r.nnz : hi;
		ck_assert(r.label == 0.0f || r.label == 1.0f);
		for (size_t j = 0; j < r.nnz; j++) {
			ck_assert(r.vals[j] == 1.0f);
			ck_assert_uint_lt(r.ids[j], (uint64_t)1 << g.id_bits);
			if (j)
				ck_assert_uint_lt(r.ids[j - 1], r.ids[j]);
		}
	}
	/* Both ends of the range occur. */
	ck_assert_uint_eq(lo, g.min_nnz);
	ck_assert_uint_eq(hi, g.max_nnz);
	dml_clicks_free(&g);
	ck_assert_int_eq(dml_clicks_init(&g, SEED, 10), DML_EINVAL);
	ck_assert_int_eq(dml_clicks_init(NULL, SEED, 0), DML_EINVAL);
}
END_TEST

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

START_TEST(test_zipf_skew)
{
	enum { N = 100000 };
	struct dml_clicks g;
	struct rec r;
	uint64_t *all = malloc((size_t)N * DML_CLICKS_MAX_NNZ * sizeof(*all));
	uint64_t *counts, top = 0, top_id = 0, small = 0;
	size_t n = 0, nd = 0;

	ck_assert_ptr_nonnull(all);
	gen_init(&g);
	for (uint64_t i = 0; i < N; i++) {
		rec_make(&g, i, &r);
		memcpy(all + n, r.ids, r.nnz * sizeof(*all));
		n += r.nnz;
	}
	qsort(all, n, sizeof(*all), cmp_u64);
	counts = malloc(n * sizeof(*counts));
	ck_assert_ptr_nonnull(counts);
	for (size_t i = 0, j; i < n; i = j) {
		for (j = i; j < n && all[j] == all[i]; j++)
			;
		counts[nd++] = j - i;
		if (j - i > top) {
			top = j - i;
			top_id = all[i];
		}
		if (all[i] < 1000)
			small += j - i;
	}
	qsort(counts, nd, sizeof(*counts), cmp_u64);
	/* Rank 1 has about 12 % of all draws (s = 1.1, 2^22 ids): in most records. */
	ck_assert_uint_gt(top, N / 2);
	ck_assert_uint_gt(top, 1000 * counts[nd / 2]);
	/* Frequent ids are scrambled: the top one is not a small number, and
	 * the first thousand ids are not where the mass is. */
	ck_assert_uint_gt(top_id, 1000);
	ck_assert_uint_lt(small, n / 100);
	free(counts);
	free(all);
	dml_clicks_free(&g);
}
END_TEST

START_TEST(test_labels_and_auc)
{
	enum { N = 20000 };
	struct dml_clicks g;
	struct rec r;
	float *s = malloc(N * sizeof(*s)), *l = malloc(N * sizeof(*l));
	double pos = 0, auc;

	ck_assert(s && l);
	gen_init(&g);
	for (uint64_t i = 0; i < N; i++) {
		rec_make(&g, i, &r);
		s[i] = (float)dml_clicks_true_score(&g, r.ids, r.vals, r.nnz);
		l[i] = r.label;
		pos += r.label;
	}
	ck_assert_double_gt(pos / N, 0.15);
	ck_assert_double_lt(pos / N, 0.35);
	auc = dml_auc(s, l, N);
	ck_assert_double_gt(auc, 0.75);
	ck_assert_double_lt(auc, 0.82);
	/* The score is the bias plus the weights of the record's ids. */
	ck_assert_double_eq_tol(dml_clicks_true_score(&g, r.ids, r.vals, 0), g.bias, 1e-12);
	ck_assert_double_eq_tol(dml_clicks_true_score(&g, r.ids, r.vals, 1),
				g.bias + dml_clicks_true_weight(&g, r.ids[0]), 1e-12);
	free(s);
	free(l);
	dml_clicks_free(&g);
}
END_TEST

/* Run dml-bench gen-clicks with args; its exit status. */
static int gen_clicks_run(const char *args)
{
	const char *dir = getenv("DML_BUILDDIR");
	char cmd[2 * DML_TEST_PATH_MAX];
	int st;

	snprintf(cmd, sizeof(cmd), "'%s/tools/dml-bench' gen-clicks %s >/dev/null 2>&1",
		 dir ? dir : ".", args);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The file at path holds records base + 0..n-1 of seed SEED. */
static void file_check(const char *path, uint64_t base, uint64_t n)
{
	struct dml_libsvm d;
	struct dml_clicks g;
	struct rec r;
	char err[256] = "";
	int rc = dml_libsvm_load(path, &d, err, sizeof(err));

	ck_assert_msg(rc == 0, "%s", err);
	ck_assert_uint_eq(d.count, n);
	ck_assert_uint_eq(d.classes, 2);
	gen_init(&g);
	for (uint64_t i = 0; i < n; i++) {
		rec_make(&g, base + i, &r);
		ck_assert(d.labels[i] == r.label);
		ck_assert_uint_eq(d.offsets[i + 1] - d.offsets[i], r.nnz);
		for (size_t j = 0; j < r.nnz; j++) {
			ck_assert_uint_eq(d.ids[d.offsets[i] + j], r.ids[j]);
			ck_assert(d.vals[d.offsets[i] + j] == 1.0f);
		}
	}
	dml_clicks_free(&g);
	dml_libsvm_free(&d);
}

START_TEST(test_gen_clicks_parses)
{
	char train[DML_TEST_PATH_MAX], test[DML_TEST_PATH_MAX], args[3 * DML_TEST_PATH_MAX];
	FILE *f;
	char line[2048];

	dml_test_tmpdir_path(train, sizeof(train), "train.svm");
	dml_test_tmpdir_path(test, sizeof(test), "test.svm.gz");
	snprintf(args, sizeof(args), "--examples 500 --seed %d --out '%s' --test 200 "
		 "--test-out '%s'", SEED, train, test);
	ck_assert_int_eq(gen_clicks_run(args), 0);
	/* Lines are "LABEL ID:1 ID:1 ...". */
	f = fopen(train, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	ck_assert(line[0] == '0' || line[0] == '1');
	ck_assert(line[1] == ' ');
	ck_assert_ptr_nonnull(strstr(line, ":1 "));
	fclose(f);
	file_check(train, 0, 500);
	file_check(test, DML_CLICKS_TEST_BASE, 200);
	/* Bad usage is refused and leaves nothing behind. */
	snprintf(args, sizeof(args), "--examples 0 --out '%s.x'", train);
	ck_assert_int_eq(gen_clicks_run(args), 2);
	snprintf(args, sizeof(args), "%s.x", train);
	ck_assert_ptr_null(fopen(args, "r"));
}
END_TEST

static Suite *clicks_suite(void)
{
	Suite *s = suite_create("clicks");
	TCase *tc = tcase_create("generator");
	TCase *tg = tcase_create("gen-clicks");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_shape);
	tcase_add_test(tc, test_zipf_skew);
	tcase_add_test(tc, test_labels_and_auc);
	suite_add_tcase(s, tc);
	tcase_set_timeout(tg, 30);
	dml_test_tmpdir_fixture(tg, "check_clicks", 1);
	tcase_add_test(tg, test_gen_clicks_parses);
	suite_add_tcase(s, tg);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(clicks_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
