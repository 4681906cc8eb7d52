/*
 * dml-bench codec: the gradient codecs (proto/codec.h) against memcpy in the
 * same run. For each --sizes tensor of random normal floats (default 1 MiB
 * and 16 MiB), memcpy of the tensor and each codec's encode (with a
 * residual, as a push with error feedback does; none without) and decode,
 * timed call by call in three rounds taking turns for --seconds each in
 * all, the median call shown as GB/s of float input and as a ratio to
 * memcpy's; then the top-k selection (an encode with topk:0.01) on
 * 1,000,000 values in ms, and PASS or FAIL for the issue's target: fp16
 * encode at least half as fast as memcpy.
 *
 * Must never: call a ratio good that was not measured in this run, or time
 * a decode of bytes that do not decode.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app_util.h"
#include "proto/codec.h"
#include "tools/bench.h"
#include "tools/bench_codec.h"
#include "tools/bench_opt.h"
#include "tools/bench_util.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

#define CODEC_DEFAULT_SIZES "1M,16M"
#define CODEC_DEFAULT_SECONDS 0.3
#define CODEC_ROUNDS 3      /* turns each measurement's time is split into */
#define CODEC_MIN_CALLS 3   /* a turn times at least this many calls */
#define CODEC_SELECT_N 1000000
#define CODEC_SELECT "topk:0.01"
#define CODEC_TARGET "fp16" /* the issue's: its encode >= 0.5 x memcpy */
#define CODEC_TARGET_X 0.5

static const char *const codec_bench_names[] = { "none", "fp16", "bf16", "int8",
						 CODEC_SELECT, "topk16:0.01" };
#define CODEC_N DML_ARRAY_LEN(codec_bench_names)

struct codec_opts {
	struct bench_list sizes;
	double seconds;
	int csv, verbose;
};

#define C_FIELD(f) offsetof(struct codec_opts, f)

static const struct bench_opt codec_opt_rows[] = {
	{ .name = "sizes", .arg = "LIST", .parse = bench_opt_sizes, .offset = C_FIELD(sizes),
	  .min = 4, .max = 1u << 30, .want = "multiples of 4 bytes up to 1G, e.g. 1M,16M",
	  .help = "tensor sizes in bytes, K/M/G suffixes (default " CODEC_DEFAULT_SIZES ")" },
	{ .name = "seconds", .arg = "X", .parse = bench_opt_double, .offset = C_FIELD(seconds),
	  .min = 0.001, .max = 3600,
	  .help = "time of each measurement (default " BENCH_STR(CODEC_DEFAULT_SECONDS) ")" },
	{ .name = "csv", .parse = bench_opt_flag, .offset = C_FIELD(csv),
	  .help = "one CSV row a measurement; other lines start with #" },
	BENCH_OPT_VERBOSE(C_FIELD(verbose), "log informational messages; twice: debug"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table codec_table = {
	"codec", codec_opt_rows, DML_ARRAY_LEN(codec_opt_rows), 20
};

void bench_codec_usage(FILE *out)
{
	fprintf(out,
		"dml-bench codec [options]: each codec's encode and decode (none, fp16,\n"
		"bf16, int8, " CODEC_SELECT ", topk16:0.01) in GB/s of float input on\n"
		"tensors of random normal floats, against memcpy of the same tensors in\n"
		"the same run; the lossy codecs encode with a residual (error feedback). Each\n"
		"measurement times calls in %d turns, the median call counts. Then the\n"
		"top-k selection (an encode with " CODEC_SELECT ") on %d values in ms.\n"
		"\n", CODEC_ROUNDS, CODEC_SELECT_N);
	bench_opts_help(&codec_table, out);
	fprintf(out,
		"\n"
		"Target (the issue's): " CODEC_TARGET " encode >= %.2f x memcpy, shown for\n"
		"each size. Exit status: 0 when it ran (even if the target failed), 1 on\n"
		"an error, 2 on bad usage.\n", CODEC_TARGET_X);
}

static int codec_opts_parse(int argc, char **argv, struct codec_opts *o, int *help)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->seconds = CODEC_DEFAULT_SECONDS;
	rc = bench_opts_parse(&codec_table, argc, argv, o, help);
	if (rc == 0 && !*help && o->sizes.n == 0)
		rc = bench_opt_sizes("codec", &codec_opt_rows[0], CODEC_DEFAULT_SIZES, o);
	return rc;
}

/* ---- measuring ------------------------------------------------------- */

enum codec_op { OP_MEMCPY, OP_ENCODE, OP_DECODE };

/* One tensor and the buffers every measurement on it uses. */
struct codec_work {
	size_t n;
	float *x, *copy, *residual, *out;
	uint8_t *enc;
	size_t cap, len;
};

static void codec_work_free(struct codec_work *w)
{
	free(w->x);
	free(w->copy);
	free(w->residual);
	free(w->out);
	free(w->enc);
	memset(w, 0, sizeof(*w));
}

/* Buffers for n values, x random normal; DML_ENOMEM when they do not fit. */
static int codec_work_init(struct codec_work *w, size_t n, const struct dml_codec *codecs)
{
	uint64_t rng = 0xc0dec + n;

	memset(w, 0, sizeof(*w));
	w->n = n;
	for (size_t i = 0; i < CODEC_N; i++) {
		size_t b = dml_codec_bound(&codecs[i], n);

		if (b == 0 && n > 0)
			return DML_ENOMEM;
		w->cap = b > w->cap ? b : w->cap;
	}
	w->x = malloc(n * sizeof(float));
	w->copy = malloc(n * sizeof(float));
	w->residual = calloc(n, sizeof(float));
	w->out = malloc(n * sizeof(float));
	w->enc = malloc(w->cap);
	if (!w->x || !w->copy || !w->residual || !w->out || !w->enc) {
		codec_work_free(w);
		return DML_ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		w->x[i] = (float)dml_rng_normal(&rng);
	return 0;
}

static int codec_call(struct codec_work *w, const struct dml_codec *c, enum codec_op op)
{
	switch (op) {
	case OP_MEMCPY:
		memcpy(w->copy, w->x, w->n * sizeof(float));
		return 0;
	case OP_ENCODE:
		return dml_codec_encode(c, w->x, w->n, dml_codec_lossy(c) ? w->residual : NULL,
					w->enc, w->cap, &w->len);
	case OP_DECODE:
		return dml_codec_decode(c, w->enc, w->len, w->n, w->out);
	}
	return DML_EINVAL;
}

/* Time calls of op for `seconds` (at least CODEC_MIN_CALLS), one sample a
 * call into lat. A decode decodes what one encode just wrote. */
static int codec_time(struct codec_work *w, const struct dml_codec *c, enum codec_op op,
		      double seconds, struct bench_lat *lat)
{
	uint64_t end, t = 0;
	int rc = 0;

	if (op == OP_ENCODE)
		memset(w->residual, 0, w->n * sizeof(float));
	if (op == OP_DECODE && (rc = codec_call(w, c, OP_ENCODE)) != 0)
		return rc;
	end = dml_now_ns() + (uint64_t)(seconds * 1e9);
	for (unsigned calls = 0; rc == 0 && (calls < CODEC_MIN_CALLS || t < end); calls++) {
		t = dml_now_ns();
		rc = codec_call(w, c, op);
		bench_lat_add(lat, dml_now_ns() - t);
		t = dml_now_ns();
		if (bench_interrupted())
			rc = DML_ECLOSED;
	}
	return rc;
}

/* ---- the report ------------------------------------------------------ */

/* What one size measured: memcpy, then each codec's encode and decode. */
struct codec_row {
	struct bench_lat lat;
	double us; /* the median call */
};

struct codec_size {
	size_t bytes;
	struct codec_row memcpy_row, encode[CODEC_N], decode[CODEC_N];
	size_t encoded[CODEC_N];
};

static void codec_size_label(size_t bytes, char *buf, size_t len)
{
	if (bytes % (1u << 20) == 0)
		snprintf(buf, len, "%zu MiB", bytes >> 20);
	else if (bytes % (1u << 10) == 0)
		snprintf(buf, len, "%zu KiB", bytes >> 10);
	else
		snprintf(buf, len, "%zu B", bytes);
}

static double codec_gbps(size_t bytes, double us)
{
	return us > 0 ? (double)bytes / (us * 1e3) : 0;
}

static void codec_print_op(const struct codec_opts *o, const struct codec_size *s,
			   const char *codec, const char *op, const struct codec_row *r,
			   size_t encoded)
{
	double x = r->us > 0 ? s->memcpy_row.us / r->us : 0;

	if (o->csv)
		printf("%zu,%s,%s,%.3f,%.3f,%.3f,%zu\n", s->bytes, codec, op, r->us,
		       codec_gbps(s->bytes, r->us), x, encoded);
	else
		printf("  %8.2f GB/s %5.2f x", codec_gbps(s->bytes, r->us), x);
}

static void codec_print_size(const struct codec_opts *o, const struct codec_size *s)
{
	char label[32];

	codec_size_label(s->bytes, label, sizeof(label));
	if (o->csv) {
		codec_print_op(o, s, "memcpy", "copy", &s->memcpy_row, s->bytes);
		for (size_t i = 0; i < CODEC_N; i++) {
			codec_print_op(o, s, codec_bench_names[i], "encode", &s->encode[i],
				       s->encoded[i]);
			codec_print_op(o, s, codec_bench_names[i], "decode", &s->decode[i],
				       s->encoded[i]);
		}
		return;
	}
	printf("%-8s %-11s %8.2f GB/s (%zu calls)\n", label, "memcpy",
	       codec_gbps(s->bytes, s->memcpy_row.us), s->memcpy_row.lat.n);
	for (size_t i = 0; i < CODEC_N; i++) {
		printf("%-8s %-11s %6.3f", label, codec_bench_names[i],
		       (double)s->encoded[i] / (double)s->bytes);
		codec_print_op(o, s, codec_bench_names[i], "encode", &s->encode[i], 0);
		codec_print_op(o, s, codec_bench_names[i], "decode", &s->decode[i], 0);
		putchar('\n');
	}
}

static void codec_print_target(const struct codec_opts *o, const struct codec_size *s)
{
	char label[32];

	for (size_t i = 0; i < CODEC_N; i++) {
		double x;

		if (strcmp(codec_bench_names[i], CODEC_TARGET) != 0)
			continue;
		x = s->encode[i].us > 0 ? s->memcpy_row.us / s->encode[i].us : 0;
		codec_size_label(s->bytes, label, sizeof(label));
		printf("%s%s " CODEC_TARGET " encode %s: %.2f x memcpy (target >= %.2f x)\n",
		       o->csv ? "# " : "", x >= CODEC_TARGET_X ? "PASS" : "FAIL", label, x,
		       CODEC_TARGET_X);
	}
}

/* ---- the run --------------------------------------------------------- */

static void codec_size_free(struct codec_size *s)
{
	bench_lat_destroy(&s->memcpy_row.lat);
	for (size_t i = 0; i < CODEC_N; i++) {
		bench_lat_destroy(&s->encode[i].lat);
		bench_lat_destroy(&s->decode[i].lat);
	}
}

/* Every measurement of one size, in CODEC_ROUNDS turns. */
static int codec_measure(const struct codec_opts *o, const struct dml_codec *codecs,
			 struct codec_size *s)
{
	double turn = o->seconds / CODEC_ROUNDS;
	struct codec_work w;
	int rc;

	if ((rc = codec_work_init(&w, s->bytes / sizeof(float), codecs)) != 0) {
		dml_err("codec: no memory for tensors of %zu bytes", s->bytes);
		return rc;
	}
	for (unsigned r = 0; r < CODEC_ROUNDS && rc == 0; r++) {
		rc = codec_time(&w, NULL, OP_MEMCPY, turn, &s->memcpy_row.lat);
		for (size_t i = 0; i < CODEC_N && rc == 0; i++) {
			rc = codec_time(&w, &codecs[i], OP_ENCODE, turn, &s->encode[i].lat);
			s->encoded[i] = w.len;
			if (rc == 0)
				rc = codec_time(&w, &codecs[i], OP_DECODE, turn, &s->decode[i].lat);
			if (rc && rc != DML_ECLOSED)
				dml_err("codec: %s on %zu bytes: %s", codec_bench_names[i], s->bytes,
					dml_strerror(rc));
		}
	}
	s->memcpy_row.us = bench_lat_quantile_us(&s->memcpy_row.lat, 0.5);
	for (size_t i = 0; i < CODEC_N; i++) {
		s->encode[i].us = bench_lat_quantile_us(&s->encode[i].lat, 0.5);
		s->decode[i].us = bench_lat_quantile_us(&s->decode[i].lat, 0.5);
	}
	codec_work_free(&w);
	return rc;
}

/* The top-k selection: encodes with CODEC_SELECT of CODEC_SELECT_N values. */
static int codec_select(const struct codec_opts *o, const struct dml_codec *codecs)
{
	struct bench_lat lat;
	struct codec_work w;
	const struct dml_codec *c = &codecs[CODEC_N - 1]; /* CODEC_SELECT, last */
	double us;
	int rc;

	if ((rc = codec_work_init(&w, CODEC_SELECT_N, codecs)) != 0) {
		dml_err("codec: no memory for %d values", CODEC_SELECT_N);
		return rc;
	}
	bench_lat_init(&lat);
	rc = codec_time(&w, c, OP_ENCODE, o->seconds, &lat);
	us = bench_lat_quantile_us(&lat, 0.5);
	if (rc == 0 && o->csv)
		printf("%zu,%s,select,%.3f,%.3f,,%zu\n", w.n * sizeof(float), CODEC_SELECT, us,
		       codec_gbps(w.n * sizeof(float), us), w.len);
	else if (rc == 0)
		printf("top-k selection (%s) of %d values: %.2f ms, the median of %zu calls\n",
		       CODEC_SELECT, CODEC_SELECT_N, us / 1e3, lat.n);
	bench_lat_destroy(&lat);
	codec_work_free(&w);
	return rc;
}

static int codec_run(const struct codec_opts *o)
{
	struct dml_codec codecs[CODEC_N];
	struct codec_size *sizes = dml_xcalloc(o->sizes.n, sizeof(*sizes));
	char err[128];
	int rc = 0;

	for (size_t i = 0; i < o->sizes.n; i++) {
		bench_lat_init(&sizes[i].memcpy_row.lat);
		for (size_t j = 0; j < CODEC_N; j++) {
			bench_lat_init(&sizes[i].encode[j].lat);
			bench_lat_init(&sizes[i].decode[j].lat);
		}
	}

	for (size_t i = 0; i < CODEC_N; i++)
		if (dml_codec_parse(codec_bench_names[i], &codecs[i], err, sizeof(err)) != 0) {
			dml_err("codec: %s: %s", codec_bench_names[i], err);
			free(sizes);
			return DML_EINVAL;
		}
	printf("%sdml-bench codec: %.2f s a measurement in %d turns, the median call;\n"
	       "%sGB/s of float input (1 GB = 1e9 bytes), x: against memcpy\n",
	       o->csv ? "# " : "", o->seconds, CODEC_ROUNDS, o->csv ? "# " : "");
	if (o->csv)
		printf("bytes,codec,op,median_us,gbps,x_memcpy,encoded_bytes\n");
	else
		printf("%-8s %-11s %6s  %19s  %19s\n", "size", "codec", "ratio", "encode",
		       "decode");
	for (size_t i = 0; i < o->sizes.n && rc == 0; i++) {
		sizes[i].bytes = (size_t)o->sizes.v[i];
		rc = codec_measure(o, codecs, &sizes[i]);
		if (rc == 0)
			codec_print_size(o, &sizes[i]);
	}
	if (rc == 0)
		rc = codec_select(o, codecs);
	for (size_t i = 0; i < o->sizes.n; i++) {
		if (rc == 0)
			codec_print_target(o, &sizes[i]);
		codec_size_free(&sizes[i]);
	}
	free(sizes);
	return rc;
}

int bench_codec_main(int argc, char **argv)
{
	struct codec_opts o;
	int help, rc;

	rc = codec_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_codec_usage, o.verbose))
		return rc;
	return bench_exit_status(codec_run(&o));
}
