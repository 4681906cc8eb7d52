/*
 * Unit tests of the rating-triplet reader: one small data set written to a
 * temporary folder as MovieLens' u.data (tabs, timestamps), as
 * ratings.csv (a header, commas with and without spaces) and with spaces
 * (comments, blank lines, CRLF, a last line without a newline), each plain
 * and gzipped, all loading to the same values and statistics; every error
 * with its "path: record N: reason"; gzip streams cut short or failing
 * their check; and a fuzz loop of truncated, byte-flipped and
 * token-inserted files (plain and gzipped) whose every load must either
 * fail cleanly with a message naming the file or give consistent ratings
 * (run it under ASan).
 */
#include <check.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_run.h"
#include "worker/data_triplets.h"
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

/* Ratings as the header promises: finite, within min..max, mean right. */
static void check_ratings(const struct dml_triplets *d)
{
	double sum = 0;

	ck_assert_uint_ge(d->count, 1);
	ck_assert_ptr_nonnull(d->users);
	ck_assert_ptr_nonnull(d->items);
	ck_assert_ptr_nonnull(d->ratings);
	ck_assert(d->min <= d->max);
	for (uint64_t r = 0; r < d->count; r++) {
		ck_assert(isfinite(d->ratings[r]));
		ck_assert(d->ratings[r] >= d->min && d->ratings[r] <= d->max);
		sum += d->ratings[r];
	}
	ck_assert(isfinite(d->mean));
	ck_assert(fabs(d->mean - sum / (double)d->count) <= 1e-9 * (1 + fabs(d->mean)));
	ck_assert(d->mean >= (double)d->min - 1e-6 * (1 + fabs(d->mean)) &&
		  d->mean <= (double)d->max + 1e-6 * (1 + fabs(d->mean)));
}

/* The same four ratings in the three styles the reader takes. */
static const char tabs[] =
	"# MovieLens u.data: user item rating timestamp\n"
	"1\t10\t4.5\t881250949\n"
	"\n"
	"2\t20\t-1.5\t881250950\r\n"
	"3\t0\t0.5\t0\n"
	"18446744073709551615\t7\t5\t-1";
static const char csv[] =
	"userId,movieId,rating,timestamp\n"
	"1,10,4.5,964982703\n"
	"2 , 20,\t-1.5 ,964982704\n"
	"# a comment after the header\n"
	"3,0,0.5,1\r\n"
	"18446744073709551615,7,5e0,964982705\n";
static const char spaces[] =
	"\n"
	"  # an indented comment\n"
	"1 10 4.5\n"
	"2 20 -1.5\n"
	" \t \n"
	"3   0  .5\n"
	"18446744073709551615 7 5.0\n";

static void check_four(const struct dml_triplets *d)
{
	static const uint64_t users[] = { 1, 2, 3, UINT64_MAX }, items[] = { 10, 20, 0, 7 };
	static const float ratings[] = { 4.5f, -1.5f, 0.5f, 5.0f };

	check_ratings(d);
	ck_assert_uint_eq(d->count, 4);
	for (int r = 0; r < 4; r++) {
		ck_assert_uint_eq(d->users[r], users[r]);
		ck_assert_uint_eq(d->items[r], items[r]);
		ck_assert(d->ratings[r] == ratings[r]);
	}
	ck_assert(d->mean == 2.125);
	ck_assert(d->min == -1.5f);
	ck_assert(d->max == 5.0f);
}

START_TEST(test_styles_plain_and_gzip)
{
	static const char *const texts[] = { tabs, csv, spaces };
	char name[32];

	for (int s = 0; s < 3; s++) {
		for (int gz = 0; gz <= 1; gz++) {
			struct dml_triplets d;
			char err[256] = "x";

			snprintf(name, sizeof(name), "s%d%s", s, gz ? ".gz" : "");
			ck_assert_int_eq(dml_triplets_load(write_text(name, texts[s], gz), &d, err,
							   sizeof(err)), 0);
			ck_assert_str_eq(err, "");
			check_four(&d);
			dml_triplets_free(&d);
			ck_assert_ptr_null(d.users);
			ck_assert_ptr_null(d.ratings);
			ck_assert_uint_eq(d.count, 0);
		}
	}
	dml_triplets_free(NULL);
}
END_TEST

START_TEST(test_header_and_separators)
{
	struct dml_triplets d;
	char err[256];

	/* The header may follow comments and blank lines. */
	ck_assert_int_eq(dml_triplets_load(write_text("h", "# c\n\nuser item rating\n5 6 7\n", 0),
					   &d, err, sizeof(err)), 0);
	ck_assert_uint_eq(d.count, 1);
	ck_assert(d.users[0] == 5 && d.items[0] == 6 && d.ratings[0] == 7.0f);
	ck_assert(d.mean == 7.0 && d.min == 7.0f && d.max == 7.0f);
	dml_triplets_free(&d);
	/* Blanks and one comma mix freely; one line without a newline. */
	ck_assert_int_eq(dml_triplets_load(write_text("m", "1 ,2\t3\n4\t, 5 ,6, 7", 1), &d, err,
					   sizeof(err)), 0);
	ck_assert_uint_eq(d.count, 2);
	ck_assert(d.users[1] == 4 && d.items[1] == 5 && d.ratings[1] == 6.0f);
	check_ratings(&d);
	dml_triplets_free(&d);
	/* Timestamps may be negative, down to INT64_MIN. */
	ck_assert_int_eq(dml_triplets_load(write_text("t", "1 2 3 -9223372036854775808\n"
						      "1 2 4 9223372036854775807\n", 0),
					   &d, err, sizeof(err)), 0);
	ck_assert_uint_eq(d.count, 2);
	ck_assert(d.mean == 3.5 && d.min == 3.0f && d.max == 4.0f);
	dml_triplets_free(&d);
}
END_TEST

/* Expect the load of path to fail with code and err "<path>: <msg>". */
static void expect_error(const char *path, int code, const char *msg)
{
	struct dml_triplets d;
	char err[512], want[4600];

	memset(&d, 0xa5, sizeof(d));
	ck_assert_int_eq(dml_triplets_load(path, &d, err, sizeof(err)), code);
	snprintf(want, sizeof(want), "%s: %s", path, msg);
	ck_assert_str_eq(err, want);
	ck_assert_ptr_null(d.users);
	ck_assert_ptr_null(d.items);
	ck_assert_ptr_null(d.ratings);
	ck_assert_uint_eq(d.count, 0);
}

START_TEST(test_errors)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		{ "1 2\n", "record 1: expected USER ITEM RATING [TIMESTAMP], got 2 fields" },
		{ "1 2 3\n7\n", "record 2: expected USER ITEM RATING [TIMESTAMP], got 1 field" },
		{ "1 2 3 4 5\n", "record 1: expected USER ITEM RATING [TIMESTAMP], got 5 fields" },
		{ "1,2,3,4,\n", "record 1: expected USER ITEM RATING [TIMESTAMP], got 5 fields" },
		{ "1 2 3\nx1 2 3\n", "record 2: user id 'x1' is not a decimal integer" },
		{ "# c\n1 2 3\n\nuser item rating\n",
		  "record 4: user id 'user' is not a decimal integer" },
		{ "1 -2 3\n", "record 1: item id '-2' is not a decimal integer" },
		{ "1 2.0 3\n", "record 1: item id '2.0' is not a decimal integer" },
		{ "18446744073709551616 2 3\n",
		  "record 1: user id '18446744073709551616' is over 18446744073709551615" },
		{ "1 2 3\n1 1234567890123456789012345678901234567890123 3\n",
		  "record 2: item id '1234567890123456789012345678901234567890' is over "
		  "18446744073709551615" },
		{ "1 2 x\n", "record 1: rating 'x' is not a number" },
		{ "1 2 3x\n", "record 1: rating '3x' is not a number" },
		{ "1 2 nan\n", "record 1: rating 'nan' is not a finite number" },
		{ "1 2 -inf\n", "record 1: rating '-inf' is not a finite number" },
		{ "\n\n1 2 1e400\n", "record 3: rating '1e400' is not a finite number" },
		{ "1 2 1e39\n", "record 1: rating '1e39' is beyond what a float holds" },
		{ "1 2 3 t\n", "record 1: timestamp 't' is not a decimal integer" },
		{ "1 2 3 1.5\n", "record 1: timestamp '1.5' is not a decimal integer" },
		{ "1 2 3 -\n", "record 1: timestamp '-' is not a decimal integer" },
		/* Only whole lines are comments. */
		{ "1 2 3 #c\n", "record 1: timestamp '#c' is not a decimal integer" },
		{ "1 2 3 # c\n", "record 1: expected USER ITEM RATING [TIMESTAMP], got 5 fields" },
		{ "1 2 3 9223372036854775808\n",
		  "record 1: timestamp '9223372036854775808' is beyond a 64-bit integer" },
		{ "1 2 3 -9223372036854775809\n",
		  "record 1: timestamp '-9223372036854775809' is beyond a 64-bit integer" },
		{ "1,,3\n", "record 1: item id is empty" },
		{ "1,2,3,\n", "record 1: timestamp is empty" },
		{ ",1,2,3\n", "record 1: user id is empty" },
		{ "1,2, ,4\n", "record 1: rating is empty" },
		/* A number first is never taken for a header, even "nan". */
		{ "1.5 2 3\n", "record 1: user id '1.5' is not a decimal integer" },
		{ "nan,2,3\n", "record 1: user id 'nan' is not a decimal integer" },
		{ "", "no ratings" },
		{ "# only a comment\n\n  \n", "no ratings" },
		{ "userId,movieId,rating,timestamp\n", "no ratings" },
	};
	char name[32];

	for (int gz = 0; gz <= 1; gz++) {
		for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			snprintf(name, sizeof(name), "e%zu%s", i, gz ? ".gz" : "");
			expect_error(write_text(name, cases[i].text, gz), DML_ECONF,
				     cases[i].msg);
		}
	}
	/* A NUL byte inside a field. */
	expect_error(dml_test_tmpdir_write("nul", "1 2 3\n1 2\0 3\n", 13, 0), DML_ECONF,
		     "record 2: item id '2' is not a decimal integer");
	expect_error(path_of("missing"), DML_EIO, "cannot open: No such file or directory");
	{
		struct dml_triplets d;
		char err[64];

		ck_assert_int_eq(dml_triplets_load(NULL, &d, err, sizeof(err)), DML_EINVAL);
		ck_assert_str_eq(err, "(null): no file or no result given");
		ck_assert_int_eq(dml_triplets_load(path_of("x"), NULL, err, sizeof(err)),
				 DML_EINVAL);
		/* No room for the message is fine too. */
		ck_assert_int_eq(dml_triplets_load(path_of("missing"), &d, NULL, 0), DML_EIO);
		ck_assert_int_eq(dml_triplets_load(path_of("missing"), &d, err, 1), DML_EIO);
		ck_assert_str_eq(err, "");
	}
}
END_TEST

START_TEST(test_long_line)
{
	size_t max = (size_t)1 << 20, n = max + 10;
	char *buf = malloc(n + 16);

	ck_assert_ptr_nonnull(buf);
	/* Exactly the limit is fine: "1 2 3" and blanks. */
	memcpy(buf, "0 1 2\n1 2 3", 11);
	memset(buf + 11, ' ', max - 5);
	buf[6 + max] = '\n';
	{
		struct dml_triplets d;
		char err[256];

		ck_assert_int_eq(dml_triplets_load(dml_test_tmpdir_write("max", buf, 7 + max, 0),
						   &d, err, sizeof(err)), 0);
		ck_assert_uint_eq(d.count, 2);
		dml_triplets_free(&d);
	}
	memset(buf + 11, ' ', n - 11);
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
	struct dml_triplets d;
	char err[512];

	ck_assert_int_eq(dml_triplets_load(path, &d, err, sizeof(err)), DML_ECONF);
	ck_assert_msg(strncmp(err, path, strlen(path)) == 0 &&
		      strncmp(err + strlen(path), ": record ", 9) == 0 && strstr(err, why),
		      "%s", err);
	ck_assert_ptr_null(d.users);
}

START_TEST(test_gzip_damage)
{
	static char text[20000], gz[20000], cut[20000];
	size_t n = 0, glen;

	for (int r = 0; n + 64 < sizeof(text) && r < 600; r++)
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%d\t%d\t%d.5\t%d\n", r % 97,
				      r * 7 % 1000, r % 5, 880000000 + r * 13);
	glen = dml_test_read_file(dml_test_tmpdir_write("whole.gz", text, n, 1), gz, sizeof(gz));
	ck_assert_uint_lt(glen, sizeof(gz));
	/* Cut: the stream ends without its trailer. */
	memcpy(cut, gz, glen);
	expect_gzip_error(dml_test_tmpdir_write("cut.gz", cut, glen / 2, 0),
			  "gzip stream cut short");
	expect_gzip_error(dml_test_tmpdir_write("cut4.gz", cut, glen - 4, 0),
			  "gzip stream cut short");
	/* The trailer's CRC of the data does not match. */
	cut[glen - 6] ^= 0x55;
	expect_gzip_error(dml_test_tmpdir_write("crc.gz", cut, glen, 0), "gzip: ");
}
END_TEST

/* A valid file of many ratings in every style, the fuzz loop's seed. */
static size_t make_corpus(char *buf, size_t cap, uint64_t *rng)
{
	static const char *const seps[] = { "\t", " ", ",", ", ", " ,\t" };
	size_t n = (size_t)snprintf(buf, cap, "userId,movieId,rating,timestamp\n");

	for (int r = 0; r < 80; r++) {
		const char *s;

		*rng = *rng * 6364136223846793005ULL + 1442695040888963407ULL;
		s = seps[(*rng >> 60) % 5];
		n += (size_t)snprintf(buf + n, cap - n, "%" PRIu64 "%s%" PRIu64 "%s%g",
				      (*rng >> 40) % 1000, s, (*rng >> 20) % 5000, s,
				      (double)((*rng >> 50) % 11) / 2.0);
		if (r % 3)
			n += (size_t)snprintf(buf + n, cap - n, "%s%d", s, 964980000 + r);
		n += (size_t)snprintf(buf + n, cap - n, r % 13 ? "\n" : "\n# c\n\n");
		ck_assert_uint_lt(n, cap);
	}
	return n;
}

/* Load p: success must give consistent ratings, failure a clean refusal. */
static int fuzz_load(const char *p)
{
	struct dml_triplets d;
	char err[256];
	int rc = dml_triplets_load(p, &d, err, sizeof(err));

	if (rc == 0) {
		check_ratings(&d);
		dml_triplets_free(&d);
		return 0;
	}
	ck_assert_msg(rc == DML_ECONF || rc == DML_ENOMEM, "rc %d: %s", rc, err);
	ck_assert_msg(err[0] && strncmp(err, p, strlen(p)) == 0, "%s", err);
	ck_assert_ptr_null(d.users);
	ck_assert_ptr_null(d.items);
	ck_assert_ptr_null(d.ratings);
	return rc;
}

START_TEST(test_fuzz)
{
	static const char *const tokens[] = {
		"1e400", "-1e39", "99999999999999999999999", "18446744073709551616", "nan",
		"0x1p200", "1e-400", "-", ",", ",,", "#", "\n", "\t", " ", "inf", "-1",
		"9223372036854775808", "userId", "\r\n", "\0",
	};
	static char src[65536];
	uint64_t rng = 11;
	size_t len = make_corpus(src, sizeof(src), &rng);
	int ok = 0, bad = 0;

	dml_test_fuzz_file(src, len, tokens, sizeof(tokens) / sizeof(tokens[0]), 3000, rng,
			   fuzz_load, &ok, &bad);
	/* Both outcomes happened: the loop explored more than one path. */
	ck_assert_int_gt(ok, 100);
	ck_assert_int_gt(bad, 100);
	printf("check_triplets: fuzz: %d loaded, %d refused\n", ok, bad);
}
END_TEST

static Suite *triplets_suite(void)
{
	Suite *s = suite_create("triplets");
	TCase *tc = tcase_create("reader");

	dml_test_tmpdir_fixture(tc, "check_triplets", 1);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_styles_plain_and_gzip);
	tcase_add_test(tc, test_header_and_separators);
	tcase_add_test(tc, test_errors);
	tcase_add_test(tc, test_long_line);
	tcase_add_test(tc, test_gzip_damage);
	tcase_add_test(tc, test_fuzz);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(triplets_suite());
}
