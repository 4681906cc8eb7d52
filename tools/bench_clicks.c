/*
 * dml-bench gen-clicks: the click-like records of data_synth_clicks.h as a
 * libsvm file ("LABEL ID:1 ID:1 ...", labels 0/1, ids increasing), records
 * 0..N-1 of the seed, and optionally a test file of records
 * DML_CLICKS_TEST_BASE + 0..N2-1 (the same hidden model, records the
 * training file does not hold). It prints the true model's AUC on each file
 * and the records and bytes written per second.
 *
 * It must never leave a partial file under the name asked for: it writes
 * NAME.tmp and renames it when complete, and removes it on failure.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "worker/app_util.h"
#include "tools/bench.h"
#include "tools/bench_clicks.h"
#include "tools/bench_opt.h"
#include "tools/bench_util.h"
#include "worker/data_synth_clicks.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

/* Text buffered before each write: a few hundred records. */
#define CLICKS_BUF (256u << 10)
/* Bytes one record's line may take: label, and per feature 20 digits ":1 ". */
#define CLICKS_LINE_MAX (8 + DML_CLICKS_MAX_NNZ * 24)
/* The most records one file may hold (its scores are kept for the AUC). */
#define CLICKS_MAX_EXAMPLES ((uint64_t)1 << 32)

struct clicks_opts {
	uint64_t examples, test, seed, vocab;
	const char *out, *test_out;
	int verbose;
};

static void clicks_examples_help(char *buf, size_t len)
{
	snprintf(buf, len, "training records (1..%" PRIu64 ")", CLICKS_MAX_EXAMPLES);
}

static void clicks_vocab_help(char *buf, size_t len)
{
	snprintf(buf, len, "distinct feature ids (default %" PRIu64 ", the app's)",
		 DML_CLICKS_VOCAB);
}

#define C_FIELD(f) offsetof(struct clicks_opts, f)

static const struct bench_opt clicks_opt_rows[] = {
	{ .name = "examples", .arg = "N", .parse = bench_opt_u64, .offset = C_FIELD(examples),
	  .min = 1, .max = CLICKS_MAX_EXAMPLES, .help_fmt = clicks_examples_help },
	{ .name = "out", .arg = "FILE", .parse = bench_opt_string, .offset = C_FIELD(out),
	  .help = "where to write them" },
	{ .name = "seed", .arg = "S", .parse = bench_opt_u64, .offset = C_FIELD(seed),
	  .max = UINT64_MAX, .want = "an integer >= 0",
	  .help = "generator seed (default 1); the sparse_lr job's seed" },
	{ .name = "vocab", .arg = "V", .parse = bench_opt_u64, .offset = C_FIELD(vocab),
	  .min = 4 * DML_CLICKS_MAX_NNZ_DEFAULT, .max = (uint64_t)1 << 40,
	  .want = "160 to 2^40", .help_fmt = clicks_vocab_help },
	{ .name = "test", .arg = "N2", .parse = bench_opt_u64, .offset = C_FIELD(test),
	  .min = 1, .max = CLICKS_MAX_EXAMPLES,
	  .help = "also write N2 test records (same hidden model)" },
	{ .name = "test-out", .arg = "FILE2", .parse = bench_opt_string,
	  .offset = C_FIELD(test_out), .help = "... here (required with --test)" },
	BENCH_OPT_VERBOSE(C_FIELD(verbose), "more log output"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table clicks_table = {
	"gen-clicks", clicks_opt_rows, DML_ARRAY_LEN(clicks_opt_rows), 21
};

void bench_gen_clicks_usage(FILE *out)
{
	fprintf(out,
		"usage: dml-bench gen-clicks --examples N --out FILE [options]\n"
		"  Write N click-like records (Zipf feature ids, binary features, labels\n"
		"  from a hidden logistic model) as libsvm text, gzipped when FILE ends\n"
		"  in .gz; print the hidden model's AUC on them and the rate.\n");
	bench_opts_help(&clicks_table, out);
}

/* Returns 0, or the exit status to end with (0 after --help). */
static int clicks_opts_parse(int argc, char **argv, struct clicks_opts *o, int *help)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->seed = 1;
	o->vocab = DML_CLICKS_VOCAB;
	rc = bench_opts_parse(&clicks_table, argc, argv, o, help);
	if (rc || *help)
		return rc;
	if (!o->examples || !o->out) {
		dml_err("gen-clicks: --examples and --out are required "
			"(see dml-bench gen-clicks --help)");
		return BENCH_EXIT_USAGE;
	}
	if (!o->test != !o->test_out) {
		dml_err("gen-clicks: --test and --test-out go together");
		return BENCH_EXIT_USAGE;
	}
	return 0;
}

/* ---- the writer ------------------------------------------------------ */

/* A plain or gzip file behind one buffer. */
struct clicks_file {
	const char *path;
	char tmp[PATH_MAX];
	FILE *f;
	gzFile gz;
	char *buf;
	size_t n;
	uint64_t bytes;           /* text bytes, before compression */
};

static int clicks_is_gz(const char *path)
{
	size_t n = strlen(path);

	return n >= 3 && strcmp(path + n - 3, ".gz") == 0;
}

static int clicks_file_open(struct clicks_file *w, const char *path)
{
	memset(w, 0, sizeof(*w));
	w->path = path;
	if (snprintf(w->tmp, sizeof(w->tmp), "%s.tmp", path) >= (int)sizeof(w->tmp)) {
		dml_err("%s: name too long", path);
		return DML_EINVAL;
	}
	/* Level 1: writing at the generator's pace matters more than size. */
	if (clicks_is_gz(path))
		w->gz = gzopen(w->tmp, "wb1");
	else
		w->f = fopen(w->tmp, "wb");
	if (!w->gz && !w->f) {
		dml_err("%s: %s", w->tmp, strerror(errno));
		return DML_EIO;
	}
	w->buf = dml_xmalloc(CLICKS_BUF);
	return 0;
}

static int clicks_file_flush(struct clicks_file *w)
{
	int ok;

	if (w->n == 0)
		return 0;
	if (w->gz)
		ok = gzwrite(w->gz, w->buf, (unsigned)w->n) == (int)w->n;
	else
		ok = fwrite(w->buf, 1, w->n, w->f) == w->n;
	w->bytes += w->n;
	w->n = 0;
	if (!ok) {
		dml_err("%s: write failed: %s", w->tmp, strerror(errno));
		return DML_EIO;
	}
	return 0;
}

/* Close; on success rename into place, else (or when !ok) remove. */
static int clicks_file_close(struct clicks_file *w, int rc)
{
	if (rc == 0)
		rc = clicks_file_flush(w);
	if (w->gz && gzclose(w->gz) != Z_OK && rc == 0) {
		dml_err("%s: close failed", w->tmp);
		rc = DML_EIO;
	}
	if (w->f && fclose(w->f) != 0 && rc == 0) {
		dml_err("%s: %s", w->tmp, strerror(errno));
		rc = DML_EIO;
	}
	if (rc == 0 && rename(w->tmp, w->path) != 0) {
		dml_err("%s: %s", w->path, strerror(errno));
		rc = DML_EIO;
	}
	if (rc && (w->gz || w->f))
		unlink(w->tmp);
	free(w->buf);
	w->buf = NULL;
	w->gz = NULL;
	w->f = NULL;
	return rc;
}

/* Decimal digits of v at p; returns the end. */
static char *clicks_put_u64(char *p, uint64_t v)
{
	char tmp[20];
	size_t n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n)
		*p++ = tmp[--n];
	return p;
}

/*
 * Write records base + 0..n-1 to path; their true scores and labels go to
 * scores and labels (n each) for the AUC.
 */
static int clicks_write(const struct dml_clicks *g, uint64_t base, uint64_t n,
			const char *path, float *scores, float *labels, uint64_t *bytes)
{
	struct clicks_file w;
	uint64_t ids[DML_CLICKS_MAX_NNZ];
	float vals[DML_CLICKS_MAX_NNZ];
	int rc = clicks_file_open(&w, path);

	for (uint64_t i = 0; rc == 0 && i < n; i++) {
		size_t nnz;
		char *p;

		if ((i & 0xffff) == 0 && bench_interrupted()) {
			rc = DML_ECLOSED;
			break;
		}
		dml_clicks_record(g, base + i, ids, vals, &nnz, &labels[i]);
		scores[i] = (float)dml_clicks_true_score(g, ids, vals, nnz);
		if (CLICKS_BUF - w.n < CLICKS_LINE_MAX)
			rc = clicks_file_flush(&w);
		p = w.buf + w.n;
		*p++ = labels[i] > 0.5f ? '1' : '0';
		for (size_t j = 0; j < nnz; j++) {
			*p++ = ' ';
			p = clicks_put_u64(p, ids[j]);
			memcpy(p, ":1", 2);
			p += 2;
		}
		*p++ = '\n';
		w.n = (size_t)(p - w.buf);
	}
	*bytes = w.bytes + w.n;
	return clicks_file_close(&w, rc);
}

/* Write one file and print its line of figures. */
static int clicks_emit(const struct dml_clicks *g, const char *what, uint64_t base,
		       uint64_t n, const char *path)
{
	float *scores = malloc(n * sizeof(*scores)), *labels = malloc(n * sizeof(*labels));
	uint64_t bytes = 0, t0 = dml_now_ns();
	double secs, pos = 0;
	int rc;

	if (!scores || !labels) {
		free(scores);
		free(labels);
		dml_err("gen-clicks: out of memory for %" PRIu64 " records", n);
		return DML_ENOMEM;
	}
	rc = clicks_write(g, base, n, path, scores, labels, &bytes);
	secs = (double)(dml_now_ns() - t0) / 1e9;
	if (rc == 0) {
		for (uint64_t i = 0; i < n; i++)
			pos += labels[i];
		printf("%s: %s: %" PRIu64 " records, positive rate %.4f, true-model AUC "
		       "%.4f; %.2f s, %.0f records/s, %.1f MB/s of text\n", what, path, n,
		       pos / (double)n, dml_auc(scores, labels, n), secs,
		       (double)n / secs, (double)bytes / secs / 1e6);
		fflush(stdout);
	}
	free(scores);
	free(labels);
	return rc;
}

int bench_gen_clicks_main(int argc, char **argv)
{
	struct clicks_opts o;
	struct dml_clicks g;
	int help, rc;

	rc = clicks_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_gen_clicks_usage, o.verbose))
		return rc;
	rc = dml_clicks_init(&g, o.seed, o.vocab);
	if (rc) {
		dml_err("gen-clicks: generator: %s", dml_strerror(rc));
		return bench_exit_status(rc);
	}
	printf("gen-clicks: seed %" PRIu64 ", vocabulary %" PRIu64 ", Zipf s %.2f, "
	       "%" PRIu32 "..%" PRIu32 " features per record\n", o.seed, g.vocab, g.zipf_s,
	       g.min_nnz, g.max_nnz);
	rc = clicks_emit(&g, "train", 0, o.examples, o.out);
	if (rc == 0 && o.test)
		rc = clicks_emit(&g, "test", DML_CLICKS_TEST_BASE, o.test, o.test_out);
	dml_clicks_free(&g);
	return bench_exit_status(rc);
}
