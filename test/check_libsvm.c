/*
 * Unit tests of the libsvm reader: small plain and gzipped files written to
 * a temporary folder (comments, empty lines, CRLF, unsorted and repeated
 * ids, -1/+1, 0/1 and class labels, a last line without a newline), every
 * error with its "path: record N: reason", gzip streams cut short or
 * failing their check, and a fuzz loop of truncated, byte-flipped and
 * number-inflated files (plain and gzipped) whose every load must either
 * fail with DML_ECONF and a message naming the file or give well-formed
 * rows (run it under ASan).
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "test/check_run.h"
#include "worker/data_libsvm.h"
#include "proto/dml_error.h"
#include "test/fuzz.h"
#include "test/tmpdir.h"

static const char *path_of(const char *name)
{
	static char p[DML_TEST_PATH_MAX];

	return dml_test_tmpdir_path(p, sizeof(p), name);
}

static const char *write_text(const char *name, const char *text, int gz)
{
	return dml_test_tmpdir_write(name, text, strlen(text), gz);
}

/* Rows as the header promises: offsets rising, ids increasing in a row. */
static void check_rows(const struct dml_libsvm *d)
{
	uint64_t longest = 0;

	ck_assert_uint_ge(d->count, 1);
	ck_assert_uint_ge(d->classes, 2);
	ck_assert_uint_eq(d->offsets[0], 0);
	for (uint64_t r = 0; r < d->count; r++) {
		uint64_t b = d->offsets[r], e = d->offsets[r + 1];

		ck_assert_uint_le(b, e);
		longest = e - b > longest ? e - b : longest;
		ck_assert(d->labels[r] >= 0 && d->labels[r] < (float)d->classes);
		ck_assert(d->labels[r] == floorf(d->labels[r]));
		for (uint64_t k = b; k < e; k++) {
			ck_assert(isfinite(d->vals[k]));
			if (k > b)
				ck_assert_uint_gt(d->ids[k], d->ids[k - 1]);
		}
	}
	ck_assert_uint_eq(longest, d->max_nnz);
}

static const char good[] =
	"# a comment line\n"
	"+1 3:0.5 1:2 3:0.25 # ids out of order, 3 twice\n"
	"\n"
	"-1\r\n"
	"   \t\n"
	"-1 18446744073709551615:-1.5e3 0:1e-3\n"
	"1 7:4";

START_TEST(test_parse_plain_and_gzip)
{
	for (int gz = 0; gz <= 1; gz++) {
		struct dml_libsvm d;
		char err[256] = "x";

		ck_assert_int_eq(dml_libsvm_load(write_text(gz ? "g.gz" : "g", good, gz), &d,
						 err, sizeof(err)), 0);
		ck_assert_str_eq(err, "");
		check_rows(&d);
		ck_assert_uint_eq(d.count, 4);
		ck_assert_uint_eq(d.classes, 2);
		ck_assert_uint_eq(d.max_nnz, 2);
		ck_assert(d.labels[0] == 1 && d.labels[1] == 0 && d.labels[2] == 0 &&
			  d.labels[3] == 1);
		ck_assert(d.offsets[1] == 2 && d.offsets[2] == 2 && d.offsets[3] == 4 &&
			  d.offsets[4] == 5);
		/* Sorted, and 3's two values summed. */
		ck_assert(d.ids[0] == 1 && d.vals[0] == 2.0f);
		ck_assert(d.ids[1] == 3 && d.vals[1] == 0.75f);
		ck_assert(d.ids[2] == 0 && d.vals[2] == 1e-3f);
		ck_assert(d.ids[3] == UINT64_MAX && d.vals[3] == -1500.0f);
		ck_assert(d.ids[4] == 7 && d.vals[4] == 4.0f);
		dml_libsvm_free(&d);
		ck_assert_ptr_null(d.offsets);
		ck_assert_uint_eq(d.count, 0);
	}
	dml_libsvm_free(NULL);
}
END_TEST

START_TEST(test_labels)
{
	struct dml_libsvm d;
	char err[256];

	ck_assert_int_eq(dml_libsvm_load(write_text("c", "0 1:1\n4 2:1\n2\n1.0 3:1\n", 0), &d,
					 err, sizeof(err)), 0);
	ck_assert_uint_eq(d.classes, 5);
	ck_assert(d.labels[0] == 0 && d.labels[1] == 4 && d.labels[2] == 2 &&
		  d.labels[3] == 1);
	check_rows(&d);
	dml_libsvm_free(&d);
	ck_assert_int_eq(dml_libsvm_load(write_text("b", "0\n0\n1 5:1\n", 1), &d, err,
					 sizeof(err)), 0);
	ck_assert_uint_eq(d.classes, 2);
	ck_assert_uint_eq(d.count, 3);
	dml_libsvm_free(&d);
}
END_TEST

/* Expect the load of path to fail with code and err "<path>: <msg>". */
static void expect_error(const char *path, int code, const char *msg)
{
	struct dml_libsvm d;
	char err[512], want[4600];

	memset(&d, 0xa5, sizeof(d));
	ck_assert_int_eq(dml_libsvm_load(path, &d, err, sizeof(err)), code);
	snprintf(want, sizeof(want), "%s: %s", path, msg);
	ck_assert_str_eq(err, want);
	ck_assert_ptr_null(d.offsets);
	ck_assert_ptr_null(d.ids);
	ck_assert_uint_eq(d.count, 0);
}

START_TEST(test_errors)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		{ "1 3:x\n", "record 1: bad pair '3:x' (VAL is not a number)" },
		{ "1 1:1\n1 3\n", "record 2: bad pair '3' (not IDX:VAL)" },
		{ "1 1: 2\n", "record 1: bad pair '1:' (VAL is not a number)" },
		{ "1 :2\n", "record 1: bad pair ':2' (IDX is not a decimal uint64)" },
		{ "1 -3:2\n", "record 1: bad pair '-3:2' (IDX is not a decimal uint64)" },
		{ "1 18446744073709551616:1\n",
		  "record 1: bad pair '18446744073709551616:1' (IDX is not a decimal uint64)" },
		{ "abc 1:2\n", "record 1: bad label 'abc' (-1/+1, or a class 0..65535)" },
		{ "1.5 1:2\n", "record 1: bad label '1.5' (-1/+1, or a class 0..65535)" },
		{ "-2 1:2\n", "record 1: bad label '-2' (-1/+1, or a class 0..65535)" },
		{ "65536\n", "record 1: bad label '65536' (-1/+1, or a class 0..65535)" },
		{ "nan\n", "record 1: bad label 'nan' (-1/+1, or a class 0..65535)" },
		{ "\n\n+1 1:1e39\n", "record 3: value of '1:1e39' is not a finite float" },
		{ "1 1:nan\n", "record 1: value of '1:nan' is not a finite float" },
		{ "1 1:inf\n", "record 1: value of '1:inf' is not a finite float" },
		{ "1 1:1e400\n", "record 1: value of '1:1e400' is not a finite float" },
		{ "1 1:3e38 1:3e38\n",
		  "record 1: the values of id 1 sum to more than a float holds" },
		{ "-1 1:1\n0 2:1\n", "record 2: label 0 in a file of -1/+1 labels" },
		{ "-1 1:1\n# c\n3 2:1\n", "record 3: label 3 in a file of -1/+1 labels" },
		{ "2 1:1\n-1 1:1\n", "record 2: label -1 in a file of class labels" },
		{ "0 1:1\n-1 1:1\n", "record 2: label -1 in a file of 0/1 labels" },
		{ "", "no records" },
		{ "# only a comment\n\n  \n", "no records" },
	};
	char name[32];

	for (int gz = 0; gz <= 1; gz++) {
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			snprintf(name, sizeof(name), "e%zu%s", i, gz ? ".gz" : "");
			expect_error(write_text(name, cases[i].text, gz), DML_ECONF,
				     cases[i].msg);
		}
	}
	/* A NUL byte inside a pair. */
	expect_error(dml_test_tmpdir_write("nul", "1 1:1\0 2:1\n", 11, 0), DML_ECONF,
		     "record 1: bad pair '1:1' (VAL is not a number)");
	expect_error(path_of("missing"), DML_EIO, "cannot open: No such file or directory");
	{
		struct dml_libsvm d;
		char err[64];

		ck_assert_int_eq(dml_libsvm_load(NULL, &d, err, sizeof(err)), DML_EINVAL);
		ck_assert_int_eq(dml_libsvm_load(path_of("x"), NULL, err, sizeof(err)),
				 DML_EINVAL);
	}
}
END_TEST

START_TEST(test_long_line)
{
	size_t n = DML_LIBSVM_LINE_MAX + 10;
	char *buf = malloc(n + 16);

	ck_assert_ptr_nonnull(buf);
	/* Exactly the limit is fine: "1" and spaces. */
	memcpy(buf, "0 1:1\n1", 7);
	memset(buf + 7, ' ', DML_LIBSVM_LINE_MAX - 1);
	buf[6 + DML_LIBSVM_LINE_MAX] = '\n';
	{
		struct dml_libsvm d;
		char err[256];

		ck_assert_int_eq(dml_libsvm_load(dml_test_tmpdir_write("max", buf, 7 + DML_LIBSVM_LINE_MAX,
							    0), &d, err, sizeof(err)), 0);
		ck_assert_uint_eq(d.count, 2);
		dml_libsvm_free(&d);
	}
	memset(buf + 7, ' ', n - 7);
	buf[n] = '\n';
	expect_error(dml_test_tmpdir_write("long", buf, n + 1, 0), DML_ECONF,
		     "record 2: line over 1048576 bytes");
	expect_error(dml_test_tmpdir_write("long.gz", buf, n + 1, 1), DML_ECONF,
		     "record 2: line over 1048576 bytes");
	free(buf);
}
END_TEST

/* Load path, expecting DML_ECONF and err "<path>: record N: <...why...>". */
static void expect_gzip_error(const char *path, const char *why)
{
	struct dml_libsvm d;
	char err[512];

	ck_assert_int_eq(dml_libsvm_load(path, &d, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strncmp(err, path, strlen(path)) == 0 &&
		      strncmp(err + strlen(path), ": record ", 9) == 0 && strstr(err, why),
		      "%s", err);
	ck_assert_ptr_null(d.offsets);
}

START_TEST(test_gzip_damage)
{
	static char text[20000], gz[20000], cut[20000];
	size_t n = 0, glen;

	for (int r = 0; n + 64 < sizeof(text) && r < 400; r++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%d %d:%d.5 %d:1\n", r % 2,
				      r * 7 % 1000, r, r * 13 % 997 + 1000);
	glen = dml_test_read_file(dml_test_tmpdir_write("whole.gz", text, n, 1), gz, sizeof(gz));
	ck_assert_uint_lt(glen, sizeof(gz));
	/* Cut: the stream ends without its trailer. */
	memcpy(cut, gz, glen);
	expect_gzip_error(dml_test_tmpdir_write("cut.gz", cut, glen / 2, 0), "gzip stream cut short");
	expect_gzip_error(dml_test_tmpdir_write("cut4.gz", cut, glen - 4, 0), "gzip stream cut short");
	/* The trailer's CRC of the data does not match. */
	cut[glen - 6] ^= 0x55;
	expect_gzip_error(dml_test_tmpdir_write("crc.gz", cut, glen, 0), "gzip: ");
}
END_TEST

/* A valid file of many records, the fuzz loop's seed. */
static size_t make_corpus(char *buf, size_t cap, uint64_t *rng)
{
	size_t n = 0;

	for (int r = 0; r < 60; r++) {
		n += (size_t)snprintf(buf + n, cap - n, "%s", r % 2 ? "+1" : "-1");
		for (int k = 0; k < r % 7; k++) {
			*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
			n += (size_t)snprintf(buf + n, cap - n, " %" PRIu64 ":%g",
					      (*rng >> 40) % 1000, (double)(*rng >> 50) / 7.0);
		}
		n += (size_t)snprintf(buf + n, cap - n, r % 11 ? "\n" : " # c\n");
		ck_assert_uint_lt(n, cap);
	}
	return n;
}

/* Load p: success must give well-formed rows, failure a clean DML_ECONF. */
static int fuzz_load(const char *p)
{
	struct dml_libsvm d;
	char err[256];
	int rc = dml_libsvm_load(p, &d, err, sizeof(err));

	if (rc == 0) {
		check_rows(&d);
		dml_libsvm_free(&d);
		return 0;
	}
	ck_assert_msg(rc == DML_ECONF, "rc %d: %s", rc, err);
	ck_assert_msg(strncmp(err, p, strlen(p)) == 0, "%s", err);
	ck_assert_ptr_null(d.offsets);
	return rc;
}

START_TEST(test_fuzz)
{
	static const char *const huge[] = {
		"1e400", "-1e39", "99999999999999999999999", "18446744073709551616", "nan",
		"0x1p200", "1e-400", "340282356779733661637539395458142568448", ":", "::",
		"-", "4294967296", "65535", "-1",
	};
	static char src[65536];
	uint64_t rng = 7;
	size_t len = make_corpus(src, sizeof(src), &rng);
	int ok = 0, bad = 0;

	dml_test_fuzz_file(src, len, huge, sizeof(huge) / sizeof(huge[0]), 1500, rng,
			   fuzz_load, &ok, &bad);
	/* Both outcomes happened: the loop explored more than one path. */
	ck_assert_int_gt(ok, 50);
	ck_assert_int_gt(bad, 50);
	printf("check_libsvm: fuzz: %d loaded, %d refused\n", ok, bad);
}
END_TEST

static Suite *libsvm_suite(void)
{
	Suite *s = suite_create("libsvm");
	TCase *tc = tcase_create("reader");

	dml_test_tmpdir_fixture(tc, "check_libsvm", 1);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_parse_plain_and_gzip);
	tcase_add_test(tc, test_labels);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_long_line);
	tcase_add_test(tc, test_gzip_damage);
	tcase_add_test(tc, test_fuzz);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(libsvm_suite());
}
