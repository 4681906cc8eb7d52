/*
 * Unit tests for tools/curve_svg.c, the SVG line chart writer behind
 * `dmlctl submit --wait --curve`: the document is well formed (every tag
 * closed, in order; every '&' an entity), each series draws exactly its
 * plottable points, NaN and infinities break the line and never reach a
 * coordinate, ticks fall on round steps with their labels, an empty chart
 * is still a chart, text is escaped, the legend holds each series' last
 * value, bad charts are refused, and writing goes through FILE.tmp: a
 * missing directory is an error with the path, not a crash or a stray file.
 *
 * Files only under a mkdtemp directory; no sockets.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test/check_run.h"
#include "tools/curve_svg.h"
#include "proto/dml_error.h"

#define MAX_DEPTH 32

/* The chart as one string (malloc'ed); asserts that printing succeeded. */
static char *render(const struct dml_curve *c)
{
	char *doc = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&doc, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(dml_curve_svg_print(f, c), 0);
	ck_assert_int_eq(fclose(f), 0);
	return doc;
}

/* The length of the tag name starting at p. */
static size_t name_len(const char *p)
{
	size_t n = 0;

	while (p[n] && p[n] != ' ' && p[n] != '>' && p[n] != '/' && p[n] != '\n')
		n++;
	return n;
}

/*
 * XML-ish well-formedness: one <?xml?> prolog, then tags that nest and
 * close in order under one <svg> root, attribute values quoted, and every
 * '&' in text or attributes the start of one of the five entities.
 */
static void assert_well_formed(const char *doc)
{
	static const char *const entities[] = {
		"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"
	};
	const char *stack[MAX_DEPTH];
	size_t lens[MAX_DEPTH], depth = 0, roots = 0;
	const char *p = doc;

	ck_assert_msg(strncmp(doc, "<?xml ", 6) == 0, "no prolog: %.40s", doc);
	p = strstr(doc, "?>");
	ck_assert_ptr_nonnull(p);
	p += 2;
	for (; *p; p++) {
		if (*p == '&') {
			int ok = 0;

			for (size_t i = 0; i < sizeof(entities) / sizeof(*entities); i++)
				ok |= strncmp(p, entities[i], strlen(entities[i])) == 0;
			ck_assert_msg(ok, "bare '&' at: %.30s", p);
			continue;
		}
		ck_assert_msg(*p != '>', "stray '>' at: %.30s", p);
		if (*p != '<')
			continue;
		if (p[1] == '/') {
			size_t n = name_len(p + 2);

			ck_assert_msg(depth > 0, "closing tag without an open one: %.30s", p);
			depth--;
			ck_assert_msg(n == lens[depth] && strncmp(p + 2, stack[depth], n) == 0,
				      "</%.*s> closes <%.*s>", (int)n, p + 2, (int)lens[depth],
				      stack[depth]);
			p = strchr(p, '>');
			ck_assert_ptr_nonnull(p);
			continue;
		}
		{
			const char *name = p + 1;
			size_t n = name_len(name);
			int quoted = 0;

			ck_assert_msg(n > 0, "empty tag at: %.30s", p);
			if (depth == 0) {
				ck_assert_msg(n == 3 && strncmp(name, "svg", 3) == 0,
					      "root is not <svg>: %.30s", p);
				roots++;
			}
			for (p = name + n; *p && (quoted || *p != '>'); p++) {
				if (*p == '"')
					quoted = !quoted;
				ck_assert_msg(*p != '<', "'<' inside a tag: %.30s", p);
			}
			ck_assert_msg(*p == '>', "unterminated tag <%.*s", (int)n, name);
			if (p[-1] == '/')
				continue;
			ck_assert_int_lt(depth, MAX_DEPTH);
			stack[depth] = name;
			lens[depth++] = n;
		}
	}
	ck_assert_msg(depth == 0, "%zu tags left open", depth);
	ck_assert_uint_eq(roots, 1);
}

/* The <g> of series idx, as its own string (malloc'ed). */
static char *series_group(const char *doc, size_t idx)
{
	char want[64];
	const char *start, *end;
	char *g;

	snprintf(want, sizeof(want), "<g class=\"series\" id=\"s%zu\"", idx);
	start = strstr(doc, want);
	ck_assert_msg(start != NULL, "no %s", want);
	end = strstr(start, "</g>");
	ck_assert_ptr_nonnull(end);
	g = strndup(start, (size_t)(end - start));
	ck_assert_ptr_nonnull(g);
	return g;
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
		n++;
	return n;
}

/* Points drawn by series idx: polyline vertices plus lone dots. */
static size_t drawn_points(const char *doc, size_t idx, size_t *lines, size_t *dots)
{
	char *g = series_group(doc, idx);
	size_t pts = 0;

	*lines = count(g, "<polyline");
	*dots = count(g, "<circle");
	for (const char *p = g; (p = strstr(p, "points=\"")) != NULL;) {
		p += 8;
		for (; *p && *p != '"'; p++)
			pts += *p == ',';
	}
	free(g);
	return pts + *dots;
}

/* Whether "<text ...>label</text>" is in the document. */
static int has_text(const char *doc, const char *label)
{
	char want[128];

	snprintf(want, sizeof(want), ">%s</text>", label);
	return strstr(doc, want) != NULL;
}

static void assert_no_nan(const char *doc)
{
	ck_assert_msg(!strstr(doc, "nan") && !strstr(doc, "inf") && !strstr(doc, "NAN") &&
		      !strstr(doc, "INF"), "a non-finite number was printed:\n%s", doc);
}

START_TEST(test_two_axes_well_formed)
{
	struct dml_curve_series s[2] = { { .name = "loss", .axis = DML_CURVE_LEFT },
					 { .name = "accuracy", .axis = DML_CURVE_RIGHT } };
	struct dml_curve c = { .title = "job 3: mnist (mlp)" };
	size_t lines, dots;
	char *doc;

	for (int i = 0; i < 5; i++) {
		dml_curve_series_add(&s[0], i, 2.0 / (i + 1));
		dml_curve_series_add(&s[1], i, 0.5 + 0.1 * i);
	}
	c.x.label = "epoch";
	c.y[0].label = "training loss";
	c.y[1].label = "accuracy";
	c.y[1].fixed = 1;
	c.y[1].max = 1;
	c.series = s;
	c.nseries = 2;
	doc = render(&c);
	assert_well_formed(doc);
	assert_no_nan(doc);
	ck_assert_uint_eq(drawn_points(doc, 0, &lines, &dots), 5);
	ck_assert_uint_eq(lines, 1);
	ck_assert_uint_eq(drawn_points(doc, 1, &lines, &dots), 5);
	ck_assert_msg(strstr(doc, ">job 3: mnist (mlp)</text>"), "no title");
	ck_assert(strstr(doc, "class=\"axis-y0\"") && strstr(doc, "class=\"axis-y1\""));
	/* x 0..4 at step 1; loss 0.4..2 at step 0.5; accuracy held at 0..1. */
	for (int i = 0; i <= 4; i++) {
		char lab[8];

		snprintf(lab, sizeof(lab), "%d", i);
		ck_assert_msg(has_text(doc, lab), "no x tick %s", lab);
	}
	ck_assert(has_text(doc, "0.0") && has_text(doc, "0.5") && has_text(doc, "2.0"));
	ck_assert(has_text(doc, "0.2") && has_text(doc, "1.0"));
	ck_assert(has_text(doc, "epoch") && has_text(doc, "training loss"));
	/* The legend gives the last values. */
	ck_assert_msg(strstr(doc, ">loss 0.4</text>"), "legend:\n%s", doc);
	ck_assert_msg(strstr(doc, ">accuracy 0.9</text>"), "legend:\n%s", doc);
	free(doc);
	dml_curve_series_destroy(&s[0]);
	dml_curve_series_destroy(&s[1]);
}
END_TEST

START_TEST(test_nan_points_skipped)
{
	struct dml_curve_series s = { .name = "loss" };
	struct dml_curve c = { .series = &s, .nseries = 1 };
	const double y[] = { 1, 2, NAN, 3, 4, 5, INFINITY, 6, NAN, NAN };
	size_t lines, dots;
	char *doc;

	for (size_t i = 0; i < sizeof(y) / sizeof(*y); i++)
		dml_curve_series_add(&s, (double)i, y[i]);
	dml_curve_series_add(&s, NAN, 7);
	doc = render(&c);
	assert_well_formed(doc);
	assert_no_nan(doc);
	/* Runs {1,2} {3,4,5} {6}: two lines and a dot, 6 points in all. */
	ck_assert_uint_eq(drawn_points(doc, 0, &lines, &dots), 6);
	ck_assert_uint_eq(lines, 2);
	ck_assert_uint_eq(dots, 1);
	/* The last plottable value, not the trailing NaNs, is in the legend. */
	ck_assert_msg(strstr(doc, ">loss 6</text>"), "legend:\n%s", doc);
	/* No series on the right: no right axis. */
	ck_assert_ptr_null(strstr(doc, "axis-y1"));
	free(doc);
	dml_curve_series_destroy(&s);
}
END_TEST

START_TEST(test_empty_chart)
{
	struct dml_curve_series s[2] = { { .name = "loss" },
					 { .name = "accuracy", .axis = DML_CURVE_RIGHT } };
	struct dml_curve none = { 0 }, empty = { .series = s, .nseries = 2 };
	size_t lines, dots;
	char *doc;

	doc = render(&none);
	assert_well_formed(doc);
	assert_no_nan(doc);
	ck_assert(strstr(doc, ">no data</text>") != NULL);
	ck_assert(has_text(doc, "0.0") && has_text(doc, "1.0"));
	free(doc);

	dml_curve_series_add(&s[1], NAN, NAN);
	doc = render(&empty);
	assert_well_formed(doc);
	assert_no_nan(doc);
	ck_assert(strstr(doc, ">no data</text>") != NULL);
	ck_assert_uint_eq(drawn_points(doc, 0, &lines, &dots), 0);
	ck_assert_uint_eq(drawn_points(doc, 1, &lines, &dots), 0);
	ck_assert(strstr(doc, ">loss (no data)</text>") != NULL);
	free(doc);
	dml_curve_series_destroy(&s[1]);
}
END_TEST

START_TEST(test_one_value_and_big_numbers)
{
	struct dml_curve_series s = { .name = "flat" }, big = { .name = "big" };
	struct dml_curve c = { .series = &s, .nseries = 1 };
	size_t lines, dots;
	char *doc;

	/* One value on both axes: a span is made around it, no division by 0. */
	dml_curve_series_add(&s, 5, 3);
	dml_curve_series_add(&s, 5, 3);
	doc = render(&c);
	assert_well_formed(doc);
	assert_no_nan(doc);
	ck_assert_uint_eq(drawn_points(doc, 0, &lines, &dots), 2);
	free(doc);

	/* Examples on x: 0..12345 at step 2000, in whole numbers. */
	for (int i = 0; i <= 10; i++)
		dml_curve_series_add(&big, 12345.0 * i / 10, 1e-3 * i);
	c.series = &big;
	doc = render(&c);
	assert_well_formed(doc);
	ck_assert(has_text(doc, "0") && has_text(doc, "2000") && has_text(doc, "14000"));
	ck_assert(has_text(doc, "0.000") && has_text(doc, "0.010"));
	ck_assert_uint_eq(drawn_points(doc, 0, &lines, &dots), 11);
	free(doc);
	dml_curve_series_destroy(&s);
	dml_curve_series_destroy(&big);
	/* destroy leaves an empty series that can be used again. */
	ck_assert_uint_eq(big.n, 0);
	dml_curve_series_add(&big, 1, 1);
	ck_assert_uint_eq(big.n, 1);
	dml_curve_series_destroy(&big);
}
END_TEST

START_TEST(test_many_points)
{
	struct dml_curve_series s = { .name = "loss" };
	struct dml_curve c = { .series = &s, .nseries = 1 };
	size_t lines, dots;
	char *doc;

	for (int i = 0; i < 5000; i++)
		dml_curve_series_add(&s, i, exp(-i / 1000.0));
	ck_assert_uint_eq(s.n, 5000);
	ck_assert(s.x[4999] == 4999 && s.y[0] == 1);
	doc = render(&c);
	assert_well_formed(doc);
	ck_assert_uint_eq(drawn_points(doc, 0, &lines, &dots), 5000);
	free(doc);
	dml_curve_series_destroy(&s);
}
END_TEST

START_TEST(test_text_escaped)
{
	struct dml_curve_series s = { .name = "a<b>&\"c\"" };
	struct dml_curve c = { .title = "x & y <z> 'q'\n\x01\xc3\xa9", .series = &s,
			       .nseries = 1 };
	char *doc;

	c.x.label = "</text><script>";
	dml_curve_series_add(&s, 0, 1);
	dml_curve_series_add(&s, 1, 2);
	doc = render(&c);
	assert_well_formed(doc);
	/* The newline, the control character and both bytes of U+00E9. */
	ck_assert_msg(strstr(doc, ">x &amp; y &lt;z&gt; &apos;q&apos;\?\?\?\?</text>"),
		      "%s", doc);
	ck_assert(strstr(doc, ">&lt;/text&gt;&lt;script&gt;</text>") != NULL);
	ck_assert(strstr(doc, ">a&lt;b&gt;&amp;&quot;c&quot; 2</text>") != NULL);
	ck_assert_ptr_null(strstr(doc, "<script"));
	free(doc);
	dml_curve_series_destroy(&s);
}
END_TEST

START_TEST(test_bad_charts_refused)
{
	struct dml_curve_series s = { .name = "x", .axis = 2 };
	struct dml_curve c = { .series = &s, .nseries = 1 };
	char *doc = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&doc, &len);

	ck_assert_int_eq(dml_curve_svg_print(f, &c), DML_EINVAL);
	s.axis = -1;
	ck_assert_int_eq(dml_curve_svg_print(f, &c), DML_EINVAL);
	s.axis = DML_CURVE_LEFT;
	c.width = 10;
	ck_assert_int_eq(dml_curve_svg_print(f, &c), DML_EINVAL);
	c.width = 0;
	c.height = 100000;
	ck_assert_int_eq(dml_curve_svg_print(f, &c), DML_EINVAL);
	c.height = 0;
	c.series = NULL;
	ck_assert_int_eq(dml_curve_svg_print(f, &c), DML_EINVAL);
	ck_assert_int_eq(dml_curve_svg_print(f, NULL), DML_EINVAL);
	ck_assert_int_eq(dml_curve_svg_print(NULL, &c), DML_EINVAL);
	fclose(f);
	/* Nothing was written for a refused chart. */
	ck_assert_uint_eq(len, 0);
	free(doc);
}
END_TEST

static char *make_dir(void)
{
	const char *base = getenv("TMPDIR");
	char *dir = NULL;

	if (!base || !*base)
		base = P_tmpdir;
	ck_assert_int_gt(asprintf(&dir, "%s/check_curve.XXXXXX", base), 0);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	return dir;
}

START_TEST(test_write_file)
{
	struct dml_curve_series s = { .name = "loss" };
	struct dml_curve c = { .title = "t", .series = &s, .nseries = 1 };
	char *dir = make_dir(), *path = NULL, *tmp = NULL, err[256], buf[64];
	struct stat sb;
	FILE *f;

	ck_assert_int_gt(asprintf(&path, "%s/curve.svg", dir), 0);
	ck_assert_int_gt(asprintf(&tmp, "%s.tmp", path), 0);
	/* An old file is replaced whole. */
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("old", f);
	fclose(f);
	dml_curve_series_add(&s, 0, 1);
	dml_curve_series_add(&s, 1, 0.5);
	ck_assert_int_eq(dml_curve_svg_write(path, &c, err, sizeof(err)), 0);
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_gt(sb.st_size, 200);
	ck_assert_int_eq(stat(tmp, &sb), -1);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
	fclose(f);
	ck_assert_msg(strncmp(buf, "<?xml", 5) == 0, "%s", buf);
	unlink(path);
	rmdir(dir);
	free(path);
	free(tmp);
	free(dir);
	dml_curve_series_destroy(&s);
}
END_TEST

START_TEST(test_write_missing_dir)
{
	struct dml_curve_series s = { .name = "loss" };
	struct dml_curve c = { .series = &s, .nseries = 1 };
	char *dir = make_dir(), *path = NULL, err[256];

	ck_assert_int_gt(asprintf(&path, "%s/no/such/dir/curve.svg", dir), 0);
	dml_curve_series_add(&s, 0, 1);
	err[0] = '\0';
	ck_assert_int_eq(dml_curve_svg_write(path, &c, err, sizeof(err)), DML_EIO);
	ck_assert_msg(strstr(err, dir) && strstr(err, strerror(ENOENT)), "err: %s", err);
	ck_assert_int_eq(dml_curve_svg_write("", &c, err, sizeof(err)), DML_EINVAL);
	/* A chart that cannot be drawn leaves no file and no temporary one. */
	s.axis = 7;
	free(path);
	ck_assert_int_gt(asprintf(&path, "%s/bad.svg", dir), 0);
	ck_assert_int_eq(dml_curve_svg_write(path, &c, err, sizeof(err)), DML_EINVAL);
	ck_assert_int_eq(access(path, F_OK), -1);
	ck_assert_int_eq(rmdir(dir), 0);
	free(path);
	free(dir);
	dml_curve_series_destroy(&s);
}
END_TEST

static Suite *curve_suite(void)
{
	Suite *s = suite_create("curve_svg");
	TCase *tc = tcase_create("chart");

	tcase_add_test(tc, test_two_axes_well_formed);
	tcase_add_test(tc, test_nan_points_skipped);
	tcase_add_test(tc, test_empty_chart);
	tcase_add_test(tc, test_one_value_and_big_numbers);
	tcase_add_test(tc, test_many_points);
	tcase_add_test(tc, test_text_escaped);
	tcase_add_test(tc, test_bad_charts_refused);
	suite_add_tcase(s, tc);
	tc = tcase_create("file");
	tcase_add_test(tc, test_write_file);
	tcase_add_test(tc, test_write_missing_dir);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(curve_suite());
}
