/*
 * dml-example-lsq - least-squares linear regression trained through libdml.
 *
 * The smallest complete dml program, and the API example of the README. Every
 * worker process generates the same synthetic problem from a seed
 * (X: N x D with standard normal entries, y = X w* + noise) and trains on
 * its own slice of the rows. Each iteration it
 *
 *   1. pulls all D weights        dml_pull_range + dml_wait
 *   2. computes the gradient of   0.5 * mean((X_b w - y_b)^2)  on a minibatch
 *   3. pushes the mean gradient   dml_push_range + dml_wait
 *   4. ends the iteration         dml_clock
 *
 * The servers own the update: their table's optimizer (sgd with its lr)
 * applies what is pushed, and they hold pulls back as the job's staleness
 * bound requires. The weights live in a dense table of D keys of width 1.
 *
 * It uses nothing but the public header dml.h. It prints the loss on its
 * slice every --report iterations and, at the end, "final loss: X" on a line
 * of its own; it exits 0 on success and 1 on any error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/dml.h"

#define NOISE_STDDEV 0.1
#define MAX_COUNT (1ull << 40) /* iterations, report interval */

struct lsq_opts {
	const char *servers;
	const char *secret;
	const char *cluster;
	uint32_t worker_id;
	uint32_t workers;
	uint32_t table;
	uint64_t rows;
	uint64_t dim;
	uint64_t iters;
	uint64_t batch;
	uint64_t report;
	uint64_t seed;
	double lr;
	int staleness_report;
};

/* This worker's slice of the data set, row-major. */
struct lsq_data {
	size_t rows;
	size_t dim;
	float *x;
	float *y;
};

/* splitmix64: a tiny, good, seedable generator; the same on every machine. */
static uint64_t rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Uniform in (0, 1): never 0, so the logarithm below is finite. */
static double rng_uniform(uint64_t *state)
{
	return ((double)(rng_next(state) >> 11) + 0.5) / 9007199254740992.0;
}

static double rng_normal(uint64_t *state)
{
	double u = rng_uniform(state), v = rng_uniform(state);

	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/*
 * Row r of the problem depends only on (seed, r), so every worker can make
 * just its own slice and all of them still agree on the whole data set.
 */
static void make_row(uint64_t seed, uint64_t r, const float *w_true, size_t dim,
		     float *x, float *y)
{
	uint64_t state = seed ^ (0xd1b54a32d192ed03ull * (r + 1));
	double dot = 0;
	size_t j;

	for (j = 0; j < dim; j++) {
		x[j] = (float)rng_normal(&state);
		dot += (double)x[j] * w_true[j];
	}
	*y = (float)(dot + NOISE_STDDEV * rng_normal(&state));
}

/* Rows [lo, hi) of N split as evenly as possible over `workers` workers. */
static int data_make(const struct lsq_opts *o, struct lsq_data *data)
{
	uint64_t lo = o->rows * (o->worker_id - 1) / o->workers;
	uint64_t hi = o->rows * o->worker_id / o->workers;
	uint64_t state = o->seed;
	float *w_true;
	size_t j, r;

	data->rows = (size_t)(hi - lo);
	data->dim = (size_t)o->dim;
	w_true = malloc(data->dim * sizeof(float));
	data->x = malloc(data->rows * data->dim * sizeof(float));
	data->y = malloc(data->rows * sizeof(float));
	if (!w_true || !data->x || !data->y) {
		free(w_true);
		return -1;
	}
	for (j = 0; j < data->dim; j++)
		w_true[j] = (float)rng_normal(&state);
	for (r = 0; r < data->rows; r++)
		make_row(o->seed, lo + r, w_true, data->dim, data->x + r * data->dim,
			 data->y + r);
	free(w_true);
	return 0;
}

static void data_free(struct lsq_data *data)
{
	free(data->x);
	free(data->y);
}

static double residual(const struct lsq_data *data, size_t r, const float *w)
{
	const float *x = data->x + r * data->dim;
	double dot = 0;
	size_t j;

	for (j = 0; j < data->dim; j++)
		dot += (double)x[j] * w[j];
	return dot - data->y[r];
}

/* 0.5 * mean((X w - y)^2) over the whole slice. */
static double slice_loss(const struct lsq_data *data, const float *w)
{
	double sum = 0, e;
	size_t r;

	for (r = 0; r < data->rows; r++) {
		e = residual(data, r, w);
		sum += e * e;
	}
	return data->rows ? 0.5 * sum / (double)data->rows : 0;
}

/* grad = scale * mean over a random minibatch of (x.w - y) x. */
static void minibatch_gradient(const struct lsq_data *data, const float *w,
			       size_t batch, double scale, uint64_t *rng, float *grad)
{
	const float *x;
	double e;
	size_t b, j, r;

	memset(grad, 0, data->dim * sizeof(float));
	for (b = 0; b < batch; b++) {
		r = (size_t)(rng_next(rng) % data->rows);
		x = data->x + r * data->dim;
		e = residual(data, r, w);
		for (j = 0; j < data->dim; j++)
			grad[j] += (float)(e * x[j]);
	}
	for (j = 0; j < data->dim; j++)
		grad[j] = (float)(grad[j] * scale / (double)batch);
}

static int fail(dml_t *d, const char *what, int rc)
{
	const char *detail = d ? dml_error_detail(d) : "";

	fprintf(stderr, "dml-example-lsq: %s: %s%s%s\n", what, dml_strerror(rc),
		*detail ? ": " : "", detail);
	return 1;
}

/* Pull every weight; the answer respects the job's staleness bound. */
static int pull_weights(dml_t *d, const struct lsq_opts *o, float *w, uint64_t *max_lag)
{
	dml_handle_t h;
	uint64_t clock, min_clock;
	int rc;

	rc = dml_pull_range(d, o->table, 0, o->dim, w, &h);
	if (rc == 0)
		rc = dml_wait(d, h);
	if (rc)
		return rc;
	clock = dml_current_clock(d);
	min_clock = dml_last_pull_min_clock(d);
	if (clock > min_clock && clock - min_clock > *max_lag)
		*max_lag = clock - min_clock;
	return 0;
}

static int check_table(dml_t *d, const struct lsq_opts *o)
{
	uint64_t keys;
	uint32_t width;
	int rc;

	rc = dml_table_width(d, o->table, &width);
	if (rc == 0)
		rc = dml_table_size(d, o->table, &keys);
	if (rc)
		return fail(d, "table", rc);
	if (width != 1 || keys != o->dim) {
		fprintf(stderr, "dml-example-lsq: table %" PRIu32 " has %" PRIu64
			" keys of width %" PRIu32 "; need %" PRIu64 " keys of width 1\n",
			o->table, keys, width, o->dim);
		return 1;
	}
	return 0;
}

static int train(dml_t *d, const struct lsq_opts *o, const struct lsq_data *data)
{
	float *w = calloc(data->dim, sizeof(float));
	float *grad = calloc(data->dim, sizeof(float));
	uint64_t rng = o->seed ^ (0x2545f4914f6cdd1dull * o->worker_id);
	uint64_t it, max_lag = 0;
	dml_handle_t h;
	int rc = 0, status = 1;

	if (!w || !grad) {
		fprintf(stderr, "dml-example-lsq: out of memory\n");
		goto out;
	}
	for (it = 0; it < o->iters; it++) {
		rc = pull_weights(d, o, w, &max_lag);
		if (rc) {
			status = fail(d, "pull", rc);
			goto out;
		}
		if (o->report && it % o->report == 0) {
			printf("iter %" PRIu64 " clock %" PRIu64 " loss %.6f", it,
			       dml_current_clock(d), slice_loss(data, w));
			if (o->staleness_report)
				printf(" min_clock %" PRIu64, dml_last_pull_min_clock(d));
			printf("\n");
			fflush(stdout);
		}
		minibatch_gradient(data, w, (size_t)o->batch, o->lr, &rng, grad);
		rc = dml_push_range(d, o->table, 0, o->dim, grad, &h);
		if (rc == 0)
			rc = dml_wait(d, h);
		if (rc == 0)
			rc = dml_clock(d);
		if (rc) {
			status = fail(d, "push", rc);
			goto out;
		}
	}
	rc = pull_weights(d, o, w, &max_lag);
	if (rc) {
		status = fail(d, "final pull", rc);
		goto out;
	}
	if (o->staleness_report)
		printf("staleness: largest lag behind the slowest worker %" PRIu64
		       " clocks\n", max_lag);
	printf("final loss: %.6f\n", slice_loss(data, w));
	status = 0;
out:
	free(w);
	free(grad);
	return status;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: dml-example-lsq --servers HOST:PORT,... --secret FILE "
		"--worker-id I [options]\n"
		"  --servers LIST     parameter servers, in shard order\n"
		"  --secret FILE      cluster secret (mode 0600)\n"
		"  --cluster NAME     cluster name (dml)\n"
		"  --worker-id I      this worker, 1..workers\n"
		"  --workers N        workers in the job; the data is split N ways (1)\n"
		"  --table ID         dense table of D keys, width 1 (0)\n"
		"  --rows N           rows of the whole data set (20000)\n"
		"  --dim D            features (50)\n"
		"  --iters N          iterations (200)\n"
		"  --batch B          minibatch size (32)\n"
		"  --lr X             scale on the pushed gradient (1: push the raw\n"
		"                     mean gradient; the servers' optimizer applies\n"
		"                     its lr)\n"
		"  --seed S           data set seed; same on every worker (1)\n"
		"  --report K         print the slice loss every K iterations\n"
		"                     (50, 0 = never)\n"
		"  --staleness-report also print how far behind the slowest\n"
		"                     worker was\n");
}

static int parse_u64(const char *name, const char *s, uint64_t min, uint64_t max,
		     uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (!*s || *s == '-' || *end || errno || v < min || v > max) {
		fprintf(stderr, "dml-example-lsq: --%s: want an integer in %" PRIu64
			"..%" PRIu64 ", got \"%s\"\n", name, min, max, s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_opts(int argc, char **argv, struct lsq_opts *o)
{
	static const struct option longopts[] = {
		{ "servers", required_argument, NULL, 's' },
		{ "secret", required_argument, NULL, 'k' },
		{ "cluster", required_argument, NULL, 'c' },
		{ "worker-id", required_argument, NULL, 'i' },
		{ "workers", required_argument, NULL, 'n' },
		{ "table", required_argument, NULL, 't' },
		{ "rows", required_argument, NULL, 'N' },
		{ "dim", required_argument, NULL, 'D' },
		{ "iters", required_argument, NULL, 'I' },
		{ "batch", required_argument, NULL, 'b' },
		{ "lr", required_argument, NULL, 'l' },
		{ "seed", required_argument, NULL, 'S' },
		{ "report", required_argument, NULL, 'r' },
		{ "staleness-report", no_argument, NULL, 'R' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	uint64_t v = 0;
	char *end;
	int c, rc = 0;

	*o = (struct lsq_opts){ .workers = 1, .rows = 20000, .dim = 50, .iters = 200,
				.batch = 32, .report = 50, .seed = 1, .lr = 1.0 };
	while (rc == 0 && (c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 's': o->servers = optarg; break;
		case 'k': o->secret = optarg; break;
		case 'c': o->cluster = optarg; break;
		case 'i':
			rc = parse_u64("worker-id", optarg, 1, 2147483648u, &v);
			o->worker_id = (uint32_t)v;
			break;
		case 'n':
			rc = parse_u64("workers", optarg, 1, 1u << 20, &v);
			o->workers = (uint32_t)v;
			break;
		case 't':
			rc = parse_u64("table", optarg, 0, UINT32_MAX, &v);
			o->table = (uint32_t)v;
			break;
		case 'N': rc = parse_u64("rows", optarg, 1, 1ull << 32, &o->rows); break;
		case 'D': rc = parse_u64("dim", optarg, 1, 1u << 24, &o->dim); break;
		case 'I': rc = parse_u64("iters", optarg, 0, MAX_COUNT, &o->iters); break;
		case 'b': rc = parse_u64("batch", optarg, 1, 1u << 24, &o->batch); break;
		case 'S': rc = parse_u64("seed", optarg, 0, UINT64_MAX, &o->seed); break;
		case 'r':
			rc = parse_u64("report", optarg, 0, MAX_COUNT, &o->report);
			break;
		case 'R': o->staleness_report = 1; break;
		case 'l':
			errno = 0;
			o->lr = strtod(optarg, &end);
			if (!*optarg || *end || errno || !isfinite(o->lr)) {
				fprintf(stderr, "dml-example-lsq: --lr: bad number "
						"\"%s\"\n", optarg);
				rc = -1;
			}
			break;
		case 'h': usage(stdout); exit(0);
		default: rc = -1; break;
		}
	}
	if (rc == 0 && (optind != argc || !o->servers || !o->secret || !o->worker_id)) {
		fprintf(stderr, "dml-example-lsq: --servers, --secret and --worker-id "
				"are required\n");
		rc = -1;
	}
	if (rc == 0 && o->worker_id > o->workers) {
		fprintf(stderr, "dml-example-lsq: --worker-id must be 1..--workers\n");
		rc = -1;
	}
	if (rc == 0 && o->rows / o->workers == 0) {
		fprintf(stderr, "dml-example-lsq: fewer rows than workers\n");
		rc = -1;
	}
	if (rc)
		usage(stderr);
	return rc;
}

/* Client options from the command line; the servers tell the rest. */
static int make_client_opts(const struct lsq_opts *o, dml_opts_t **out)
{
	char id[16];
	int rc;

	snprintf(id, sizeof(id), "%" PRIu32, o->worker_id);
	*out = NULL;
	rc = dml_opts_new(out);
	if (rc == 0)
		rc = dml_opts_set(*out, "servers", o->servers);
	if (rc == 0)
		rc = dml_opts_set(*out, "secret_file", o->secret);
	if (rc == 0 && o->cluster)
		rc = dml_opts_set(*out, "cluster", o->cluster);
	if (rc == 0)
		rc = dml_opts_set(*out, "worker_id", id);
	return rc;
}

int main(int argc, char **argv)
{
	struct lsq_opts o;
	struct lsq_data data = { 0 };
	dml_opts_t *opts = NULL;
	dml_t *d = NULL;
	int rc, status;

	if (parse_opts(argc, argv, &o) != 0)
		return 1;
	if (data_make(&o, &data) != 0) {
		fprintf(stderr, "dml-example-lsq: out of memory for the data set\n");
		data_free(&data);
		return 1;
	}
	rc = make_client_opts(&o, &opts);
	if (rc) {
		status = fail(NULL, "options", rc);
		goto out;
	}
	rc = dml_connect(opts, &d);
	if (rc) {
		status = fail(NULL, "connect", rc);
		goto out;
	}
	status = check_table(d, &o);
	if (status == 0)
		status = train(d, &o, &data);
out:
	if (d)
		dml_close(d);
	if (opts)
		dml_opts_free(opts);
	data_free(&data);
	return status;
}
