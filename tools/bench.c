/*
 * dml-bench: benchmarks that print figures. `dml-bench pushpull` starts one
 * real dml-server in a private temporary directory, drives it through libdml
 * with dense and sparse pushes and pulls from 1..N connections (one thread
 * and one dml_t each) at several windows of requests in flight, measures the
 * same traffic over raw loopback TCP (bench_raw.c) in the same run, prints
 * one row per configuration and checks the targets of the issue.
 *
 * It must never leave a server running: errors, SIGINT and SIGTERM stop the
 * server and remove its directory (unless --keep), and should dml-bench be
 * killed outright the kernel stops the server. Its exit status says whether
 * it ran, not whether a target was met.
 *
 * This file also holds the statistics and the windowed driver that
 * bench_raw.c shares (see bench.h), so both paths are timed by one code.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_assign.h"
#include "bench_clicks.h"
#include "bench_hetero.h"
#include "bench_recovery.h"
#include "bench_server.h"
#include "bench_sparse.h"
#include "bench_train.h"
#include "bench_util.h"
#include "blas_kernels.h"
#include "dml.h"
#include "log.h"
#include "store.h"
#include "util.h"

#define BENCH_MAX_LIST 16
#define BENCH_MAX_CONNS 64
#define BENCH_MAX_WINDOW 4096
#define BENCH_MAX_SIZE (256ull << 20)
#define BENCH_SPARSE_KEYS 1000
/* Pre-generated key sets per connection and sparse table, used round robin. */
#define BENCH_KEY_BATCHES 256
#define BENCH_ACK_BYTES 8
/* A slow measurement may run this many times --seconds to count enough. */
#define BENCH_MAX_STRETCH 10
#define BENCH_DENSE_TABLE0 1 /* dense table of the i-th --sizes entry: 1 + i */

/* The sparse tables: width, key universe (log2) and table id. */
static const struct bench_sparse {
	uint32_t width;
	unsigned universe_log2;
	uint32_t table;
} bench_sparse[] = {
	{ 1, 20, 1001 },
	{ 64, 16, 1002 },
};
#define BENCH_NSPARSE DML_ARRAY_LEN(bench_sparse)

static uint64_t bench_sparse_max_width(void)
{
	uint64_t w = 0;

	for (size_t i = 0; i < BENCH_NSPARSE; i++)
		w = bench_sparse[i].width > w ? bench_sparse[i].width : w;
	return w;
}

/* ---- statistics ------------------------------------------------------ */

void bench_lat_init(struct bench_lat *l)
{
	memset(l, 0, sizeof(*l));
}

void bench_lat_destroy(struct bench_lat *l)
{
	free(l->ns);
	bench_lat_init(l);
}

void bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 4096;
		l->ns = dml_xrealloc(l->ns, l->cap * sizeof(*l->ns));
	}
	l->ns[l->n++] = ns;
}

void bench_lat_append(struct bench_lat *dst, const struct bench_lat *src)
{
	for (size_t i = 0; i < src->n; i++)
		bench_lat_add(dst, src->ns[i]);
}

static int bench_u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

double bench_lat_quantile_us(struct bench_lat *l, double q)
{
	size_t rank;

	if (l->n == 0)
		return 0;
	qsort(l->ns, l->n, sizeof(*l->ns), bench_u64_cmp);
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	/* Nearest rank: the smallest sample with at least q of them at or below. */
	rank = (size_t)(q * (double)l->n + 0.999999);
	if (rank == 0)
		rank = 1;
	if (rank > l->n)
		rank = l->n;
	return (double)l->ns[rank - 1] / 1e3;
}

/* ---- the windowed driver --------------------------------------------- */

/*
 * The counted window all threads of one measurement share. It closes at
 * end_ns unless fewer than min_done requests were counted by then: a slow
 * configuration (16 MiB x 32 in flight) may complete nothing in --seconds,
 * so its window is pushed back, step by step, up to cap_ns.
 */
struct bench_window {
	uint64_t begin_ns;
	_Atomic uint64_t end_ns;
	uint64_t step_ns, cap_ns;
	_Atomic uint64_t done;
	uint64_t min_done;
};

/* When the counted window closes, as seen at `now`. */
static uint64_t bench_window_end(struct bench_window *w, uint64_t now)
{
	uint64_t end = atomic_load(&w->end_ns), later;

	if (now < end || end >= w->cap_ns || atomic_load(&w->done) >= w->min_done)
		return end;
	later = now + w->step_ns < w->cap_ns ? now + w->step_ns : w->cap_ns;
	/* On a race the other thread's extension stands and lands in end. */
	if (atomic_compare_exchange_strong(&w->end_ns, &end, later))
		end = later;
	return end;
}

struct bench_thread {
	const struct bench_driver *drv;
	unsigned window;
	struct bench_window *counted;
	uint64_t done;
	struct bench_lat lat;
	int rc;
	int started;
	pthread_t tid;
};

static int bench_thread_loop(struct bench_thread *t)
{
	const struct bench_driver *d = t->drv;
	struct bench_window *w = t->counted;
	uint64_t *sent = dml_xcalloc(t->window, sizeof(*sent));
	unsigned head = 0, inflight = 0;
	int rc = 0;

	for (;;) {
		uint64_t now = dml_now_ns();

		if (inflight < t->window && now < bench_window_end(w, now) &&
		    !bench_interrupted()) {
			unsigned slot = (head + inflight) % t->window;

			sent[slot] = now;
			rc = d->submit(d->ctx, slot);
			if (rc)
				break;
			inflight++;
			continue;
		}
		if (inflight == 0)
			break;
		rc = d->complete(d->ctx, head);
		if (rc)
			break;
		now = dml_now_ns();
		if (now >= w->begin_ns && now < atomic_load(&w->end_ns)) {
			t->done++;
			atomic_fetch_add(&w->done, 1);
			bench_lat_add(&t->lat, now - sent[head]);
		}
		head = (head + 1) % t->window;
		inflight--;
	}
	free(sent);
	return rc;
}

static void *bench_thread_main(void *arg)
{
	struct bench_thread *t = arg;

	t->rc = bench_thread_loop(t);
	return NULL;
}

static uint64_t bench_seconds_ns(double s)
{
	return (uint64_t)(s * 1e9);
}

static void bench_window_init(struct bench_window *w, const struct bench_plan *plan,
			      uint64_t min_done)
{
	uint64_t len = bench_seconds_ns(plan->seconds);

	/* Starting the threads is part of the warm-up. */
	w->begin_ns = dml_now_ns() + bench_seconds_ns(plan->warmup_s);
	atomic_init(&w->end_ns, w->begin_ns + len);
	w->step_ns = len / 10 + 1;
	w->cap_ns = w->begin_ns + BENCH_MAX_STRETCH * len;
	atomic_init(&w->done, 0);
	w->min_done = min_done;
}

int bench_run_drivers(const struct bench_driver *drivers, unsigned conns,
		      unsigned window, const struct bench_plan *plan,
		      uint64_t value_bytes, struct bench_result *res)
{
	struct bench_window counted;
	struct bench_thread *th;
	struct bench_lat all;
	uint64_t end, stop, done = 0;
	int rc = 0;

	if (!drivers || !plan || !res || conns == 0 || window == 0)
		return DML_EINVAL;
	th = dml_xcalloc(conns, sizeof(*th));
	/* Every connection's window should turn over once while counted. */
	bench_window_init(&counted, plan, (uint64_t)window * conns);
	for (unsigned i = 0; i < conns; i++) {
		th[i].drv = &drivers[i];
		th[i].window = window;
		th[i].counted = &counted;
		bench_lat_init(&th[i].lat);
		th[i].started =
			pthread_create(&th[i].tid, NULL, bench_thread_main, &th[i]) == 0;
		if (!th[i].started)
			th[i].rc = DML_EIO;
	}
	bench_lat_init(&all);
	for (unsigned i = 0; i < conns; i++) {
		if (th[i].started)
			pthread_join(th[i].tid, NULL);
		if (th[i].rc && !rc)
			rc = th[i].rc;
		done += th[i].done;
		bench_lat_append(&all, &th[i].lat);
		bench_lat_destroy(&th[i].lat);
	}
	stop = dml_now_ns();
	end = atomic_load(&counted.end_ns);
	if (stop > end)
		stop = end;
	memset(res, 0, sizeof(*res));
	res->requests = done;
	if (stop > counted.begin_ns)
		res->seconds = (double)(stop - counted.begin_ns) / 1e9;
	if (res->seconds > 0) {
		res->rps = (double)done / res->seconds;
		res->gbps = res->rps * (double)value_bytes / 1e9;
	}
	res->p50_us = bench_lat_quantile_us(&all, 0.50);
	res->p99_us = bench_lat_quantile_us(&all, 0.99);
	bench_lat_destroy(&all);
	free(th);
	if (rc == 0 && bench_interrupted())
		rc = DML_ECLOSED;
	return rc;
}

/* ---- options --------------------------------------------------------- */

enum bench_op { BENCH_PUSH = 0, BENCH_PULL = 1 };
enum bench_kind { BENCH_DENSE = 0, BENCH_SPARSE = 1 };

static const char *const bench_op_names[] = { "push", "pull" };
static const char *const bench_kind_names[] = { "dense", "sparse" };

struct bench_list {
	uint64_t v[BENCH_MAX_LIST];
	size_t n;
};

/* --baseline, in the order of bench_baseline_names. */
enum bench_baseline { BENCH_BASELINE_YES, BENCH_BASELINE_NO, BENCH_BASELINE_ONLY,
		      BENCH_NBASELINE };

static const char *const bench_baseline_names[] = { "yes", "no", "only" };
static const char *const bench_no_yes[] = { "no", "yes" };

struct bench_opts {
	const char *server;
	double seconds, warmup;
	struct bench_list sizes, conns, windows;
	unsigned ops; /* bit (1 << enum bench_op) */
	int dense, sparse;
	int csv, quick, keep;
	int baseline; /* enum bench_baseline */
	int verbose;  /* each -v logs one level more */
	/* --durability: the [store] modes to run, in order; none given: a
	 * server without a [store] section. */
	int durability[3]; /* enum dml_durability */
	size_t ndurability;
	uint64_t rounds;   /* --durability: measurements per case and mode */
	uint64_t batch_ms; /* [store] batch_ms; 0: the server's default */
};

/* The list options, in the order of bench_list_specs. */
enum bench_list_id { BENCH_SIZES, BENCH_CONNS, BENCH_WINDOWS, BENCH_NLISTS };

static const struct bench_list_spec {
	const char *opt;
	int sizes; /* K/M/G suffixes allowed, and a multiple of 4 bytes */
	uint64_t min, max;
	const char *want;
} bench_list_specs[BENCH_NLISTS] = {
	[BENCH_SIZES] = { "--sizes", 1, 4, BENCH_MAX_SIZE,
			  "multiples of 4 bytes up to 256M, e.g. 4K,1M" },
	[BENCH_CONNS] = { "--conns", 0, 1, BENCH_MAX_CONNS, "1 to 64" },
	[BENCH_WINDOWS] = { "--windows", 0, 1, BENCH_MAX_WINDOW, "1 to 4096" },
};

/* --durability's default --sizes and --rounds. */
#define BENCH_DURABILITY_SIZES "4K,64K"
#define BENCH_DURABILITY_ROUNDS 3

/* Defaults; --quick swaps in the second set for whatever was not given. */
static const struct bench_defaults {
	double seconds, warmup;
	const char *lists[BENCH_NLISTS];
} bench_full = { 1.0, 0.2, { "4K,64K,1M,16M", "1,2,4", "1,8,32" } },
  bench_quick = { 0.3, 0.1, { "4K,1M", "1", "1,8" } };

static struct bench_list *bench_opts_list(struct bench_opts *o, enum bench_list_id id)
{
	switch (id) {
	case BENCH_SIZES:
		return &o->sizes;
	case BENCH_CONNS:
		return &o->conns;
	default:
		return &o->windows;
	}
}

static void bench_pushpull_usage(FILE *out)
{
	fprintf(out,
		"dml-bench pushpull [options]: push/pull throughput and latency\n"
		"against one dml-server it starts itself, next to a raw-TCP baseline\n"
		"measured in the same run (same bytes, connections and window).\n"
		"\n"
		"  --server PATH     dml-server to run (default: $DML_SERVER, else\n"
		"                    ../server/dml-server or dml-server next to this\n"
		"                    program)\n"
		"  --seconds X       counted time per measurement (default %.1f);\n"
		"                    longer (up to %dx) until every window turned over\n"
		"  --warmup X        uncounted warm-up before it (default %.1f)\n"
		"  --sizes LIST      dense request sizes, K/M suffixes (default %s)\n"
		"  --conns LIST      client connections, one thread each (default %s)\n"
		"  --windows LIST    requests in flight per connection (default %s)\n"
		"  --ops LIST        push,pull (default both)\n"
		"  --dense yes|no    dense requests (default yes)\n"
		"  --sparse yes|no   sparse requests of %d keys x 1 and x 64 floats\n"
		"                    (default yes)\n"
		"  --quick           short subset for smoke tests (%s; %s conns;\n"
		"                    windows %s; %.1f s); explicit options still win\n"
		"  --baseline yes|no|only  measure raw TCP too (default), not at all,\n"
		"                    or alone without starting a server\n"
		"  --baseline-only   the same as --baseline only\n"
		"  --durability LIST run against a server with a [store] of each of\n"
		"                    these modes in turn (sync, batch, none), and\n"
		"                    compare their push rates (batch >= 0.7 x none);\n"
		"                    --sizes defaults to " BENCH_DURABILITY_SIZES " then;\n"
		"                    the servers run side by side and take turns\n"
		"  --rounds N        with --durability: measure each case N times per\n"
		"                    mode and keep the median (default %d)\n"
		"  --batch-ms MS     with --durability: the batch server's batch_ms\n"
		"                    (default: dml-server's own)\n"
		"  --csv             machine-readable output\n"
		"  --keep            keep the server's directory (config, log)\n"
		"  -v, --verbose     log libdml's informational messages; twice: debug,\n"
		"                    for the server too\n"
		"  -h, --help        this text\n"
		"\n"
		"GB/s counts value bytes only (1 GB = 1e9 bytes); latency is submit to\n"
		"completion of each request; ratio = dml / raw-TCP requests per\n"
		"second.\n"
		"Exit status: 0 when it ran (even if a target failed), 1 on an error,\n"
		"2 on bad usage, 130 when interrupted.\n",
		bench_full.seconds, BENCH_MAX_STRETCH, bench_full.warmup,
		bench_full.lists[BENCH_SIZES], bench_full.lists[BENCH_CONNS],
		bench_full.lists[BENCH_WINDOWS], BENCH_SPARSE_KEYS,
		bench_quick.lists[BENCH_SIZES], bench_quick.lists[BENCH_CONNS],
		bench_quick.lists[BENCH_WINDOWS], bench_quick.seconds, BENCH_DURABILITY_ROUNDS);
}

/* Call item() on each comma-separated element of s; empty elements are bad. */
static int bench_split(const char *s, int (*item)(const char *tok, void *arg), void *arg)
{
	char *copy = dml_xstrdup(s), *save = NULL, *tok;
	int rc = 0, n = 0;

	for (tok = strtok_r(copy, ",", &save); tok && rc == 0;
	     tok = strtok_r(NULL, ",", &save), n++)
		rc = item(tok, arg);
	/* strtok_r skips empty fields: count commas to catch "1,,2" and "1,". */
	if (rc == 0) {
		int commas = 0;

		for (const char *p = s; *p; p++)
			commas += *p == ',';
		if (n == 0 || commas != n - 1)
			rc = DML_EINVAL;
	}
	free(copy);
	return rc;
}

struct bench_list_parse {
	struct bench_list *list;
	const struct bench_list_spec *spec;
};

static int bench_list_item(const char *tok, void *arg)
{
	struct bench_list_parse *p = arg;
	const struct bench_list_spec *sp = p->spec;
	uint64_t v;
	int rc;

	if (p->list->n == BENCH_MAX_LIST)
		return DML_ERANGE;
	rc = sp->sizes ? dml_parse_size(tok, sp->min, sp->max, &v)
		       : dml_parse_u64(tok, sp->min, sp->max, &v);
	if (rc == 0 && sp->sizes && v % sizeof(float) != 0)
		rc = DML_EINVAL;
	if (rc == 0)
		p->list->v[p->list->n++] = v;
	return rc;
}

static int bench_list_parse(struct bench_opts *o, enum bench_list_id id, const char *s)
{
	struct bench_list_parse p = { bench_opts_list(o, id), &bench_list_specs[id] };

	p.list->n = 0;
	return bench_split(s, bench_list_item, &p);
}

/* *out = the index of s in names[0..n). */
static int bench_choice(const char *s, const char *const *names, size_t n, int *out)
{
	for (size_t i = 0; i < n; i++) {
		if (strcmp(s, names[i]) == 0) {
			*out = (int)i;
			return 0;
		}
	}
	return DML_EINVAL;
}

static int bench_op_item(const char *tok, void *arg)
{
	unsigned *ops = arg;
	int op;

	if (bench_choice(tok, bench_op_names, DML_ARRAY_LEN(bench_op_names), &op))
		return DML_EINVAL;
	*ops |= 1u << op;
	return 0;
}

static int bench_durability_item(const char *tok, void *arg)
{
	struct bench_opts *o = arg;
	int mode;

	if (bench_choice(tok, dml_durability_names, 3, &mode))
		return -1;
	for (size_t i = 0; i < o->ndurability; i++)
		if (o->durability[i] == mode)
			return -1;
	o->durability[o->ndurability++] = mode;
	return 0;
}

static int bench_opt_error(const char *opt, const char *value, const char *want)
{
	return bench_usage_error("pushpull", opt, value, want);
}

/* Fill in what the command line left unset. Returns 0 or an exit status. */
static int bench_opts_finish(struct bench_opts *o)
{
	const struct bench_defaults *d = o->quick ? &bench_quick : &bench_full;

	if (o->seconds < 0)
		o->seconds = d->seconds;
	if (o->warmup < 0)
		o->warmup = d->warmup;
	/* Every push stays in the log (no checkpoints yet): megabyte pushes
	 * would write gigabytes a second to disk. */
	if (o->ndurability && o->sizes.n == 0)
		bench_list_parse(o, BENCH_SIZES, BENCH_DURABILITY_SIZES);
	if (o->rounds == 0)
		o->rounds = o->ndurability ? BENCH_DURABILITY_ROUNDS : 1;
	if ((o->rounds > 1 || o->batch_ms) && !o->ndurability) {
		dml_err("pushpull: --rounds and --batch-ms go with --durability");
		return BENCH_EXIT_USAGE;
	}
	/* A given list is never empty; the defaults always parse. */
	for (int id = 0; id < BENCH_NLISTS; id++) {
		if (bench_opts_list(o, (enum bench_list_id)id)->n == 0)
			bench_list_parse(o, (enum bench_list_id)id, d->lists[id]);
	}
	if (o->ops == 0)
		o->ops = 1u << BENCH_PUSH | 1u << BENCH_PULL;
	if (!o->dense && !o->sparse) {
		dml_err("pushpull: --dense no and --sparse no leave nothing to measure");
		return BENCH_EXIT_USAGE;
	}
	if (o->ndurability && o->baseline == BENCH_BASELINE_ONLY) {
		dml_err("pushpull: --durability needs a server; --baseline only starts none");
		return BENCH_EXIT_USAGE;
	}
	return 0;
}

/* Returns 0, or the exit status to end with (0 after --help). */
static int bench_opts_parse(int argc, char **argv, struct bench_opts *o, int *help)
{
	/* O_SIZES, O_CONNS and O_WINDOWS follow the order of enum bench_list_id. */
	enum { O_SERVER = 256, O_SECONDS, O_WARMUP, O_SIZES, O_CONNS, O_WINDOWS, O_OPS,
	       O_DENSE, O_SPARSE, O_QUICK, O_CSV, O_BASELINE, O_BASELINE_ONLY,
	       O_KEEP, O_DURABILITY, O_ROUNDS, O_BATCH_MS };
	static const struct option longopts[] = {
		{ "server", required_argument, NULL, O_SERVER },
		{ "seconds", required_argument, NULL, O_SECONDS },
		{ "warmup", required_argument, NULL, O_WARMUP },
		{ "sizes", required_argument, NULL, O_SIZES },
		{ "conns", required_argument, NULL, O_CONNS },
		{ "windows", required_argument, NULL, O_WINDOWS },
		{ "ops", required_argument, NULL, O_OPS },
		{ "dense", required_argument, NULL, O_DENSE },
		{ "sparse", required_argument, NULL, O_SPARSE },
		{ "quick", no_argument, NULL, O_QUICK },
		{ "csv", no_argument, NULL, O_CSV },
		{ "keep", no_argument, NULL, O_KEEP },
		{ "baseline", required_argument, NULL, O_BASELINE },
		{ "baseline-only", no_argument, NULL, O_BASELINE_ONLY },
		{ "durability", required_argument, NULL, O_DURABILITY },
		{ "rounds", required_argument, NULL, O_ROUNDS },
		{ "batch-ms", required_argument, NULL, O_BATCH_MS },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc;

	memset(o, 0, sizeof(*o));
	o->seconds = o->warmup = -1; /* unset */
	o->dense = o->sparse = 1;
	bench_getopt_reset(help);
	while ((c = bench_getopt(argc, argv, longopts, &o->verbose, help)) != -1) {
		const char *a = optarg;

		switch (c) {
		case O_SERVER:
			o->server = a;
			break;
		case O_SECONDS:
			if (dml_parse_double(a, 0.01, 3600, &o->seconds))
				return bench_opt_error("--seconds", a, "0.01 to 3600");
			break;
		case O_WARMUP:
			if (dml_parse_double(a, 0, 600, &o->warmup))
				return bench_opt_error("--warmup", a, "0 to 600");
			break;
		case O_SIZES:
		case O_CONNS:
		case O_WINDOWS: {
			const struct bench_list_spec *sp = &bench_list_specs[c - O_SIZES];

			if (bench_list_parse(o, (enum bench_list_id)(c - O_SIZES), a))
				return bench_opt_error(sp->opt, a, sp->want);
			break;
		}
		case O_OPS:
			o->ops = 0;
			if (bench_split(a, bench_op_item, &o->ops))
				return bench_opt_error("--ops", a, "push and/or pull");
			break;
		case O_DENSE:
			if (bench_choice(a, bench_no_yes, 2, &o->dense))
				return bench_opt_error("--dense", a, "yes or no");
			break;
		case O_SPARSE:
			if (bench_choice(a, bench_no_yes, 2, &o->sparse))
				return bench_opt_error("--sparse", a, "yes or no");
			break;
		case O_QUICK:
			o->quick = 1;
			break;
		case O_KEEP:
			o->keep = 1;
			break;
		case O_CSV:
			o->csv = 1;
			break;
		case O_BASELINE:
			if (bench_choice(a, bench_baseline_names, BENCH_NBASELINE,
					 &o->baseline))
				return bench_opt_error("--baseline", a,
						       "yes, no or only");
			break;
		case O_BASELINE_ONLY:
			o->baseline = BENCH_BASELINE_ONLY;
			break;
		case O_DURABILITY:
			o->ndurability = 0;
			if (bench_split(a, bench_durability_item, o))
				return bench_opt_error("--durability", a,
						       "sync, batch and/or none, each once");
			break;
		case O_ROUNDS:
			if (dml_parse_u64(a, 1, 99, &o->rounds))
				return bench_opt_error("--rounds", a, "1 to 99");
			break;
		case O_BATCH_MS:
			if (dml_parse_u64(a, 1, 60000, &o->batch_ms))
				return bench_opt_error("--batch-ms", a, "1 to 60000");
			break;
		default:
			return BENCH_EXIT_USAGE;
		}
	}
	rc = bench_getopt_end("pushpull", argc, argv, *help);
	return rc || *help ? rc : bench_opts_finish(o);
}

/* ---- configurations -------------------------------------------------- */

struct bench_case {
	enum bench_op op;
	enum bench_kind kind;
	uint32_t table, width;
	uint64_t nkeys;    /* dense: the whole table; sparse: keys per request */
	unsigned pool;     /* sparse: index into bench_sparse and the key pools */
	unsigned conns, window;
	struct bench_result dml, tcp;
	int have_dml, have_tcp;
};

static uint64_t bench_case_value_bytes(const struct bench_case *bc)
{
	return bc->nkeys * bc->width * sizeof(float);
}

/* The raw-TCP traffic with the same bytes on the wire as this request. */
static void bench_case_raw_shape(const struct bench_case *bc, struct bench_raw_shape *s)
{
	uint64_t keys = bc->kind == BENCH_SPARSE ? bc->nkeys * sizeof(uint64_t) : 0;
	uint64_t vals = bench_case_value_bytes(bc);

	s->req_bytes = (uint32_t)(bc->op == BENCH_PUSH ? keys + vals : keys);
	s->reply_bytes = (uint32_t)(bc->op == BENCH_PUSH ? BENCH_ACK_BYTES : vals);
}

static void bench_size_label(uint64_t bytes, char *buf, size_t len)
{
	if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
		snprintf(buf, len, "%" PRIu64 "M", bytes >> 20);
	else if (bytes >= 1024 && bytes % 1024 == 0)
		snprintf(buf, len, "%" PRIu64 "K", bytes >> 10);
	else
		snprintf(buf, len, "%" PRIu64, bytes);
}

static void bench_case_label(const struct bench_case *bc, char *buf, size_t len)
{
	if (bc->kind == BENCH_DENSE)
		bench_size_label(bench_case_value_bytes(bc), buf, len);
	else
		snprintf(buf, len, "%" PRIu64 "x%" PRIu32, bc->nkeys, bc->width);
}

/* Append one request shape at every connection count and window. */
static void bench_cases_add(const struct bench_opts *o, const struct bench_case *shape,
			    struct bench_case *cases, size_t *n)
{
	for (size_t c = 0; c < o->conns.n; c++) {
		for (size_t w = 0; w < o->windows.n; w++) {
			struct bench_case *bc = &cases[(*n)++];

			*bc = *shape;
			bc->conns = (unsigned)o->conns.v[c];
			bc->window = (unsigned)o->windows.v[w];
		}
	}
}

static size_t bench_cases_build(const struct bench_opts *o, struct bench_case **out)
{
	size_t per_op = (o->dense ? o->sizes.n : 0) + (o->sparse ? BENCH_NSPARSE : 0);
	size_t max = 2 * per_op * o->conns.n * o->windows.n, n = 0;
	struct bench_case *cases = dml_xcalloc(max, sizeof(*cases));

	for (unsigned op = BENCH_PUSH; op <= BENCH_PULL; op++) {
		struct bench_case shape = { .op = (enum bench_op)op, .width = 1 };

		if (!(o->ops & (1u << op)))
			continue;
		shape.kind = BENCH_DENSE;
		for (size_t i = 0; o->dense && i < o->sizes.n; i++) {
			shape.table = BENCH_DENSE_TABLE0 + (uint32_t)i;
			shape.nkeys = o->sizes.v[i] / sizeof(float);
			bench_cases_add(o, &shape, cases, &n);
		}
		shape.kind = BENCH_SPARSE;
		shape.nkeys = BENCH_SPARSE_KEYS;
		for (unsigned i = 0; o->sparse && i < BENCH_NSPARSE; i++) {
			shape.table = bench_sparse[i].table;
			shape.width = bench_sparse[i].width;
			shape.pool = i;
			bench_cases_add(o, &shape, cases, &n);
		}
	}
	*out = cases;
	return n;
}

static uint64_t bench_list_max(const struct bench_list *l)
{
	uint64_t m = 0;

	for (size_t i = 0; i < l->n; i++)
		m = l->v[i] > m ? l->v[i] : m;
	return m;
}

/* The largest frame payload any request of this run carries, with slack. */
static uint64_t bench_max_payload(const struct bench_opts *o)
{
	uint64_t m = bench_list_max(&o->sizes);
	uint64_t sparse = BENCH_SPARSE_KEYS *
			  (sizeof(uint64_t) + bench_sparse_max_width() * sizeof(float));

	return (m > sparse ? m : sparse) + (64u << 10);
}

/* ---- the server process ---------------------------------------------- */

static void bench_conf_table(FILE *f, uint32_t id, const char *kind, uint32_t width,
			     const char *size_key, uint64_t size)
{
	fprintf(f, "\n[table]\nid = %" PRIu32 "\nkind = %s\nwidth = %" PRIu32 "\n"
		"%s = %" PRIu64 "\ninit = zeros\noptimizer = add\n",
		id, kind, width, size_key, size);
}

static int bench_server_write_conf(const struct bench_server *s,
				   const struct bench_opts *o)
{
	char secret[PATH_MAX], port[PATH_MAX];
	FILE *f = bench_server_conf_open(s, secret, port, sizeof(port));

	if (!f)
		return DML_EIO;
	fprintf(f, "[server]\nlisten = 127.0.0.1:0\nport_file = %s\nnode_id = 1\n"
		"cluster = dml\nsecret_file = %s\nshard = 0/1\nlog_level = %s\n"
		"\n[limits]\nmax_payload = %" PRIu64 "\n"
		"\n[job]\nstaleness = -1\nworkers = 0\n",
		port, secret, o->verbose >= 2 ? "debug" : "info", bench_max_payload(o));
	if (s->durability >= 0)
		/* No checkpoints yet: the log keeps every push, so leave room
		 * (address space; the disk holds only what is written). */
		fprintf(f, "\n[store]\npath = %s/store\ndurability = %s\nmap_size = 64G\n",
			s->dir, dml_durability_names[s->durability]);
	if (s->durability == DML_DURABILITY_BATCH && o->batch_ms)
		fprintf(f, "batch_ms = %" PRIu64 "\n", o->batch_ms);
	for (size_t i = 0; o->dense && i < o->sizes.n; i++)
		bench_conf_table(f, BENCH_DENSE_TABLE0 + (uint32_t)i, "dense", 1, "keys",
				 o->sizes.v[i] / sizeof(float));
	for (size_t i = 0; o->sparse && i < BENCH_NSPARSE; i++)
		bench_conf_table(f, bench_sparse[i].table, "sparse",
				 bench_sparse[i].width, "capacity",
				 1ull << bench_sparse[i].universe_log2);
	return bench_server_conf_close(s, f);
}

static int bench_server_start(struct bench_server *s, const char *exe,
			      const struct bench_opts *o)
{
	int rc = bench_server_prepare(s);

	if (rc == 0)
		rc = bench_server_write_conf(s, o);
	return rc ? rc : bench_server_launch(s, exe);
}

/* ---- libdml connections ---------------------------------------------- */

struct bench_conn {
	dml_opts_t *opts;
	dml_t *d;
	float *vals;       /* push source and pull destination, nvals floats */
	size_t nvals;
	uint64_t *pool[BENCH_NSPARSE]; /* BENCH_KEY_BATCHES sets of keys each */
	size_t batch;
	dml_handle_t *handles;        /* one per window slot */
	const struct bench_case *cur; /* what submit() sends now */
};

/* splitmix64: a fixed, fast sequence; the keys need not be unpredictable. */
static uint64_t bench_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/*
 * BENCH_KEY_BATCHES sets of BENCH_SPARSE_KEYS distinct keys, each set drawn
 * uniformly from [0, universe) by a partial Fisher-Yates shuffle.
 */
static int bench_keys_generate(uint32_t universe, uint64_t seed, uint64_t **out)
{
	uint32_t *perm = malloc(universe * sizeof(*perm));
	uint64_t *keys = malloc(BENCH_KEY_BATCHES * BENCH_SPARSE_KEYS * sizeof(*keys));

	if (!perm || !keys || universe < BENCH_SPARSE_KEYS) {
		free(perm);
		free(keys);
		return DML_ENOMEM;
	}
	for (uint32_t i = 0; i < universe; i++)
		perm[i] = i;
	for (size_t b = 0; b < BENCH_KEY_BATCHES; b++) {
		for (uint32_t j = 0; j < BENCH_SPARSE_KEYS; j++) {
			unsigned __int128 r = bench_rand(&seed);
			uint32_t k = j + (uint32_t)((r * (universe - j)) >> 64);
			uint32_t t = perm[j];

			perm[j] = perm[k];
			perm[k] = t;
			keys[b * BENCH_SPARSE_KEYS + j] = perm[j];
		}
	}
	free(perm);
	*out = keys;
	return 0;
}

static int bench_conn_open(struct bench_conn *c, unsigned index,
			   const struct bench_server *s, const struct bench_opts *o)
{
	char servers[32], secret[PATH_MAX], id[16], payload[32];
	/* Reconnect briefly and fail a request stuck for a minute: a
	 * benchmark should report a broken server, not wait for it. */
	const char *const opts[][2] = {
		{ "servers", servers },
		{ "secret_file", secret },
		{ "worker_id", id },
		{ "role", "worker" },
		{ "max_payload", payload },
		{ "request_timeout_ms", "60000" },
		{ "reconnect_timeout_ms", "5000" },
	};
	uint64_t dense_max = bench_list_max(&o->sizes) / sizeof(float);
	uint64_t sparse_max = BENCH_SPARSE_KEYS * bench_sparse_max_width();
	int rc;

	memset(c, 0, sizeof(*c));
	snprintf(servers, sizeof(servers), "127.0.0.1:%u", (unsigned)s->port);
	snprintf(id, sizeof(id), "%u", index + 1);
	snprintf(payload, sizeof(payload), "%" PRIu64, bench_max_payload(o));
	if (bench_server_file(s, "secret", secret, sizeof(secret)))
		return DML_EINVAL;
	c->nvals = dense_max > sparse_max ? dense_max : sparse_max;
	c->vals = malloc(c->nvals * sizeof(*c->vals));
	if (!c->vals)
		return DML_ENOMEM;
	c->handles = dml_xcalloc(bench_list_max(&o->windows), sizeof(*c->handles));
	for (size_t i = 0; o->sparse && i < BENCH_NSPARSE; i++) {
		rc = bench_keys_generate(1u << bench_sparse[i].universe_log2,
					 index * BENCH_NSPARSE + i + 1, &c->pool[i]);
		if (rc)
			return rc;
	}
	rc = bench_dml_opts_new(opts, DML_ARRAY_LEN(opts), &c->opts);
	if (rc == 0) {
		rc = dml_connect(c->opts, &c->d);
		if (rc)
			dml_err("connection %u to %s: %s", index + 1, servers,
				dml_strerror(rc));
	}
	return rc;
}

static void bench_conn_close(struct bench_conn *c)
{
	if (c->d)
		dml_close(c->d);
	dml_opts_free(c->opts);
	for (size_t i = 0; i < BENCH_NSPARSE; i++)
		free(c->pool[i]);
	free(c->handles);
	free(c->vals);
	memset(c, 0, sizeof(*c));
}

/* Does the server hold the tables this run needs, as configured? */
static int bench_conn_check_tables(struct bench_conn *c, const struct bench_opts *o)
{
	for (size_t i = 0; o->dense && i < o->sizes.n; i++) {
		uint32_t id = BENCH_DENSE_TABLE0 + (uint32_t)i, w = 0;
		uint64_t keys = 0;

		if (dml_table_width(c->d, id, &w) || dml_table_size(c->d, id, &keys) ||
		    w != 1 || keys != o->sizes.v[i] / sizeof(float)) {
			dml_err("server table %" PRIu32 ": width %" PRIu32 ", %" PRIu64
				" keys; expected width 1, %" PRIu64 " keys", id, w, keys,
				o->sizes.v[i] / sizeof(float));
			return DML_ECONF;
		}
	}
	for (size_t i = 0; o->sparse && i < BENCH_NSPARSE; i++) {
		uint32_t w = 0;

		if (dml_table_width(c->d, bench_sparse[i].table, &w) ||
		    w != bench_sparse[i].width) {
			dml_err("server table %" PRIu32 ": width %" PRIu32
				", expected %" PRIu32, bench_sparse[i].table, w,
				bench_sparse[i].width);
			return DML_ECONF;
		}
	}
	return 0;
}

static int bench_dml_fail(struct bench_conn *c, const char *what, int rc)
{
	const char *detail = dml_error_detail(c->d);

	dml_err("%s %s table %" PRIu32 ": %s%s%s", what, bench_op_names[c->cur->op],
		c->cur->table, dml_strerror(rc), *detail ? ": " : "", detail);
	return rc;
}

static int bench_dml_submit(void *ctx, unsigned slot)
{
	struct bench_conn *c = ctx;
	const struct bench_case *bc = c->cur;
	dml_handle_t *h = &c->handles[slot];
	int push = bc->op == BENCH_PUSH, rc;

	if (bc->kind == BENCH_DENSE) {
		rc = push ? dml_push_range(c->d, bc->table, 0, bc->nkeys, c->vals, h)
			  : dml_pull_range(c->d, bc->table, 0, bc->nkeys, c->vals, h);
	} else {
		const uint64_t *keys = c->pool[bc->pool] + c->batch * BENCH_SPARSE_KEYS;

		c->batch = (c->batch + 1) % BENCH_KEY_BATCHES;
		rc = push ? dml_push(c->d, bc->table, keys, bc->nkeys, c->vals, h)
			  : dml_pull(c->d, bc->table, keys, bc->nkeys, c->vals, h);
	}
	return rc ? bench_dml_fail(c, "submit", rc) : 0;
}

static int bench_dml_complete(void *ctx, unsigned slot)
{
	struct bench_conn *c = ctx;
	int rc = dml_wait(c->d, c->handles[slot]);

	c->handles[slot] = 0;
	return rc ? bench_dml_fail(c, "wait for", rc) : 0;
}

/*
 * One measurement through libdml. All requests of a connection share one
 * value buffer, as the raw baseline's client does: pulls overwrite it, which
 * is harmless since nobody reads it, and it keeps 16 MiB x 32 in flight
 * from needing half a gigabyte per connection.
 */
static int bench_case_run_dml(struct bench_case *bc, struct bench_conn *conns,
			      size_t nconns, const struct bench_plan *plan)
{
	struct bench_driver *drv = dml_xcalloc(bc->conns, sizeof(*drv));
	int rc;

	for (unsigned i = 0; i < bc->conns; i++) {
		struct bench_conn *c = &conns[i];

		c->cur = bc;
		c->batch = 0;
		if (bc->op == BENCH_PUSH) {
			for (size_t j = 0; j < c->nvals; j++)
				c->vals[j] = 1.0f / 1024;
		}
		drv[i] = (struct bench_driver){ c, bench_dml_submit,
						bench_dml_complete };
	}
	rc = bench_run_drivers(drv, bc->conns, bc->window, plan,
			       bench_case_value_bytes(bc), &bc->dml);
	bc->have_dml = rc == 0;
	free(drv);
	/* Let the idle connections answer whatever the server sent meanwhile. */
	for (size_t i = 0; i < nconns; i++)
		dml_progress(conns[i].d, 0);
	return rc;
}

static int bench_case_run_raw(struct bench_case *bc, const struct bench_plan *plan)
{
	struct bench_raw_shape shape;
	int rc;

	bench_case_raw_shape(bc, &shape);
	rc = bench_raw_run(&shape, bc->conns, bc->window, plan,
			   bench_case_value_bytes(bc), &bc->tcp);
	bc->have_tcp = rc == 0;
	return rc;
}

/* ---- report ---------------------------------------------------------- */

static void bench_print_header(const struct bench_opts *o)
{
	if (o->csv) {
		printf("op,kind,size,value_bytes,conns,window,gbps,rps,p50_us,p99_us,"
		       "ratio,tcp_gbps,tcp_rps,tcp_p50_us,tcp_p99_us\n");
	} else if (o->baseline == BENCH_BASELINE_ONLY) {
		printf("%-4s %-6s %-8s %5s %6s %9s %11s %10s %10s\n", "op", "kind",
		       "size", "conns", "window", "tcp_GB/s", "tcp_req/s",
		       "tcp_p50_us", "tcp_p99_us");
	} else {
		printf("%-4s %-6s %-8s %5s %6s %8s %11s %9s %9s %6s %9s %10s\n", "op",
		       "kind", "size", "conns", "window", "GB/s", "req/s", "p50_us",
		       "p99_us", "ratio", "tcp_GB/s", "tcp_p50_us");
	}
	fflush(stdout);
}

static void bench_csv_result(const struct bench_result *r, int have)
{
	if (have)
		printf("%.4f,%.1f,%.1f,%.1f", r->gbps, r->rps, r->p50_us, r->p99_us);
	else
		printf(",,,");
}

static void bench_print_row(const struct bench_case *bc, const struct bench_opts *o)
{
	const struct bench_result *d = &bc->dml, *t = &bc->tcp;
	double ratio = bc->have_dml && bc->have_tcp && t->rps > 0 ? d->rps / t->rps : 0;
	const char *op = bench_op_names[bc->op], *kind = bench_kind_names[bc->kind];
	char label[32];

	bench_case_label(bc, label, sizeof(label));
	if (o->csv) {
		printf("%s,%s,%s,%" PRIu64 ",%u,%u,", op, kind, label,
		       bench_case_value_bytes(bc), bc->conns, bc->window);
		bench_csv_result(d, bc->have_dml);
		if (ratio > 0)
			printf(",%.3f,", ratio);
		else
			printf(",,");
		bench_csv_result(t, bc->have_tcp);
		printf("\n");
	} else {
		printf("%-4s %-6s %-8s %5u %6u ", op, kind, label, bc->conns, bc->window);
		if (o->baseline == BENCH_BASELINE_ONLY)
			printf("%9.3f %11.0f %10.1f %10.1f\n", t->gbps, t->rps, t->p50_us,
			       t->p99_us);
		else if (bc->have_tcp)
			printf("%8.3f %11.0f %9.1f %9.1f %6.2f %9.3f %10.1f\n", d->gbps,
			       d->rps, d->p50_us, d->p99_us, ratio, t->gbps, t->p50_us);
		else
			printf("%8.3f %11.0f %9.1f %9.1f %6s %9s %10s\n", d->gbps, d->rps,
			       d->p50_us, d->p99_us, "-", "-", "-");
	}
	fflush(stdout);
}

enum bench_metric { BENCH_RATIO, BENCH_P50, BENCH_RPS };

/* The issue's targets; each applies to every measured case it matches. */
static const struct bench_target {
	const char *name;
	enum bench_kind kind;
	int op;                 /* an enum bench_op, or -1 for both */
	uint64_t min_bytes, max_bytes; /* value bytes per request */
	uint32_t width;
	unsigned window;        /* always one connection */
	enum bench_metric metric;
	double limit;
	int at_least;
} bench_targets[] = {
	{ "dense >= 1 MiB vs raw TCP", BENCH_DENSE, -1, 1u << 20, UINT64_MAX, 1, 8,
	  BENCH_RATIO, 0.9, 1 },
	{ "dense 4 KiB latency", BENCH_DENSE, -1, 4096, 4096, 1, 1, BENCH_P50, 40, 0 },
	{ "sparse 1000x1 push rate", BENCH_SPARSE, BENCH_PUSH, 0, UINT64_MAX, 1, 8,
	  BENCH_RPS, 45000, 1 },
};

static int bench_target_matches(const struct bench_target *t,
				const struct bench_case *bc)
{
	uint64_t vb = bench_case_value_bytes(bc);

	return bc->kind == t->kind && (t->op < 0 || (int)bc->op == t->op) &&
	       vb >= t->min_bytes && vb <= t->max_bytes && bc->width == t->width &&
	       bc->window == t->window && bc->conns == 1;
}

/* "0.93 x raw TCP (target >= 0.90 x)" and the like. */
static void bench_target_describe(const struct bench_target *tg, double v, char *buf,
				  size_t len)
{
	const char *cmp = tg->at_least ? ">=" : "<=";

	switch (tg->metric) {
	case BENCH_RATIO:
		snprintf(buf, len, "%.2f x raw TCP (target %s %.2f x)", v, cmp,
			 tg->limit);
		break;
	case BENCH_P50:
		snprintf(buf, len, "p50 %.1f us (target %s %.0f us)", v, cmp, tg->limit);
		break;
	case BENCH_RPS:
		snprintf(buf, len, "%.0f requests/s (target %s %.0f)", v, cmp,
			 tg->limit);
		break;
	}
}

static double bench_target_value(const struct bench_target *tg,
				 const struct bench_case *bc)
{
	switch (tg->metric) {
	case BENCH_RATIO:
		return bc->tcp.rps > 0 ? bc->dml.rps / bc->tcp.rps : 0;
	case BENCH_P50:
		return bc->dml.p50_us;
	case BENCH_RPS:
		break;
	}
	return bc->dml.rps;
}

static void bench_print_targets(const struct bench_case *cases, size_t n,
				const struct bench_opts *o)
{
	const char *pre = o->csv ? "# " : "";

	printf("%s\n", o->csv ? "#" : "");
	for (size_t t = 0; t < DML_ARRAY_LEN(bench_targets); t++) {
		const struct bench_target *tg = &bench_targets[t];
		int seen = 0;

		for (size_t i = 0; i < n; i++) {
			const struct bench_case *bc = &cases[i];
			char label[32], what[128];
			double v;
			int pass;

			if (!bench_target_matches(tg, bc) || !bc->have_dml ||
			    (tg->metric == BENCH_RATIO && !bc->have_tcp))
				continue;
			seen = 1;
			v = bench_target_value(tg, bc);
			pass = tg->at_least ? v >= tg->limit : v <= tg->limit;
			bench_case_label(bc, label, sizeof(label));
			bench_target_describe(tg, v, what, sizeof(what));
			printf("%s%s %s %s %s conns=1 window=%u: %s\n", pre,
			       pass ? "PASS" : "FAIL", bench_op_names[bc->op],
			       bench_kind_names[bc->kind], label, bc->window, what);
		}
		if (!seen)
			printf("%sSKIP %s: not measured in this run\n", pre, tg->name);
	}
	fflush(stdout);
}

/* ---- pushpull -------------------------------------------------------- */

/* Measure every case (raw TCP too when run_raw), print the rows and targets. */
static int bench_run_cases(struct bench_case *cases, size_t n, struct bench_conn *conns,
			   size_t nconns, const struct bench_opts *o, int run_raw)
{
	struct bench_plan plan = { o->warmup, o->seconds };
	int rc = 0;

	bench_print_header(o);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (run_raw && o->baseline != BENCH_BASELINE_NO)
			rc = bench_case_run_raw(&cases[i], &plan);
		if (rc == 0 && o->baseline != BENCH_BASELINE_ONLY)
			rc = bench_case_run_dml(&cases[i], conns, nconns, &plan);
		if (rc == 0)
			bench_print_row(&cases[i], o);
	}
	if (rc == 0 && o->baseline != BENCH_BASELINE_ONLY)
		bench_print_targets(cases, n, o);
	return rc;
}

/* The rows and targets of cases measured already. */
static void bench_print_cases(const struct bench_case *cases, size_t n,
			      const struct bench_opts *o)
{
	bench_print_header(o);
	for (size_t i = 0; i < n; i++)
		bench_print_row(&cases[i], o);
	bench_print_targets(cases, n, o);
}

/* runs: the times each case is measured against a server (all servers). */
static void bench_print_preface(const struct bench_opts *o, const struct bench_server *s,
				const char *exe, size_t ncases, size_t runs)
{
	const char *pre = o->csv ? "# " : "";
	double total = (double)ncases * (double)(runs + (o->baseline == BENCH_BASELINE_YES)) *
		       (o->seconds + o->warmup);

	if (o->baseline == BENCH_BASELINE_ONLY)
		printf("%sdml-bench pushpull: raw-TCP baseline only\n", pre);
	else
		printf("%sdml-bench pushpull: %s (pid %d, port %u), %s\n", pre, exe,
		       (int)s->pid, (unsigned)s->port,
		       s->durability < 0 ? "no [store]" :
		       s->durability == DML_DURABILITY_SYNC ? "[store] durability = sync" :
		       s->durability == DML_DURABILITY_BATCH ? (o->batch_ms ?
		       "[store] durability = batch, batch_ms as given" :
		       "[store] durability = batch") :
		       "[store] durability = none");
	printf("%s%zu configurations, %.2f s each after %.2f s warm-up, about %.0f s\n",
	       pre, ncases, o->seconds, o->warmup, total);
	printf("%sGB/s: value bytes only (1 GB = 1e9 B); latency: submit to completion; "
	       "ratio: dml / raw TCP req/s\n", pre);
	fflush(stdout);
}

/* One server (with [store] durability, or none when -1) and its connections. */
struct bench_rig {
	struct bench_server srv;
	struct bench_conn *conns;
	size_t nconns;
};

static int bench_rig_up(struct bench_rig *r, const struct bench_opts *o, int durability,
			const char *exe)
{
	int rc;

	memset(r, 0, sizeof(*r));
	r->srv.durability = durability;
	rc = bench_server_start(&r->srv, exe, o);
	if (rc == 0) {
		r->nconns = bench_list_max(&o->conns);
		r->conns = dml_xcalloc(r->nconns, sizeof(*r->conns));
		for (size_t i = 0; i < r->nconns && rc == 0; i++)
			rc = bench_conn_open(&r->conns[i], (unsigned)i, &r->srv, o);
		if (rc == 0)
			rc = bench_conn_check_tables(&r->conns[0], o);
	}
	return rc;
}

/* Close the connections, stop the server (its log tail after a failure). */
static void bench_rig_down(struct bench_rig *r, const struct bench_opts *o, int failed)
{
	for (size_t i = 0; i < r->nconns; i++)
		bench_conn_close(&r->conns[i]);
	free(r->conns);
	r->conns = NULL;
	r->nconns = 0;
	if (failed && !bench_interrupted() && r->srv.pid > 0)
		bench_server_log_tail(&r->srv);
	bench_server_stop(&r->srv);
	if (o->keep && r->srv.have_dir)
		dml_warn("kept %s", r->srv.dir);
	else
		bench_server_remove_dir(&r->srv);
}

/* One server: measure every case (raw TCP too when run_raw), then stop it. */
static int bench_pushpull_serve(const struct bench_opts *o, const char *exe,
				struct bench_case *cases, size_t ncases)
{
	struct bench_rig rig;
	int rc = bench_rig_up(&rig, o, -1, exe);

	if (rc == 0) {
		bench_print_preface(o, &rig.srv, exe, ncases, 1);
		rc = bench_run_cases(cases, ncases, rig.conns, rig.nconns, o, 1);
		if (rc && bench_interrupted())
			dml_warn("interrupted; stopping");
	}
	bench_rig_down(&rig, o, rc != 0);
	return rc;
}

static int bench_result_rps_cmp(const void *a, const void *b)
{
	const struct bench_result *x = a, *y = b;

	return (x->rps > y->rps) - (x->rps < y->rps);
}

/*
 * --durability: a server of each mode, side by side. Every case is
 * measured o->rounds times on each, the modes taking turns (each going
 * first in turn), and each mode keeps its median: a machine whose speed
 * drifts during the run (a neighbour, the disk's writeback) then weighs
 * on every mode alike instead of on whichever ran at the time.
 */
static int bench_durability_run(const struct bench_opts *o, const char *exe,
				struct bench_case *const *runs, size_t ncases)
{
	struct bench_plan plan = { o->warmup, o->seconds };
	const size_t nm = o->ndurability, nr = (size_t)o->rounds;
	struct bench_rig rigs[3];
	struct bench_result *got = dml_xcalloc(nm * ncases * nr, sizeof(*got));
	size_t up = 0;
	int rc = 0;

	for (; up < nm && rc == 0; up++) {
		rc = bench_rig_up(&rigs[up], o, o->durability[up], exe);
		if (rc == 0)
			bench_print_preface(o, &rigs[up].srv, exe, ncases, nm * nr);
	}
	for (size_t r = 0; r < nr && rc == 0; r++) {
		for (size_t i = 0; i < ncases && rc == 0; i++) {
			if (r == 0 && o->baseline != BENCH_BASELINE_NO)
				rc = bench_case_run_raw(&runs[0][i], &plan);
			for (size_t k = 0; k < nm && rc == 0; k++) {
				size_t m = (k + r + i) % nm;

				rc = bench_case_run_dml(&runs[m][i], rigs[m].conns, rigs[m].nconns,
							&plan);
				got[(m * ncases + i) * nr + r] = runs[m][i].dml;
			}
		}
	}
	for (size_t m = 0; m < nm && rc == 0; m++) {
		printf("%s\n%s[store] durability = %s: the median of %zu\n", o->csv ? "# " : "",
		       o->csv ? "# " : "", dml_durability_names[o->durability[m]], nr);
		for (size_t i = 0; i < ncases; i++) {
			struct bench_result *v = &got[(m * ncases + i) * nr];

			qsort(v, nr, sizeof(*v), bench_result_rps_cmp);
			runs[m][i].dml = v[nr / 2];
			runs[m][i].tcp = runs[0][i].tcp;
			runs[m][i].have_tcp = runs[0][i].have_tcp;
		}
		bench_print_cases(runs[m], ncases, o);
	}
	if (rc && bench_interrupted())
		dml_warn("interrupted; stopping");
	while (up-- > 0)
		bench_rig_down(&rigs[up], o, rc != 0);
	free(got);
	return rc;
}

/* The least push rate a batch-durability server must keep, next to none. */
#define BENCH_BATCH_VS_NONE 0.7

/* Push rates of the --durability runs next to each other, and the target. */
static void bench_print_durability(struct bench_case *const *runs, const struct bench_opts *o,
				   size_t ncases)
{
	const char *pre = o->csv ? "# " : "";
	int none = -1, batch = -1;

	for (size_t m = 0; m < o->ndurability; m++) {
		none = o->durability[m] == DML_DURABILITY_NONE ? (int)m : none;
		batch = o->durability[m] == DML_DURABILITY_BATCH ? (int)m : batch;
	}
	printf("%s\n%spush req/s by durability (ratio to none):\n", pre, pre);
	for (size_t i = 0; i < ncases; i++) {
		const struct bench_case *bc = &runs[0][i];
		char label[32];

		if (bc->op != BENCH_PUSH)
			continue;
		bench_case_label(bc, label, sizeof(label));
		printf("%s%-6s %-8s conns=%u window=%-4u", pre, bench_kind_names[bc->kind],
		       label, bc->conns, bc->window);
		for (size_t m = 0; m < o->ndurability; m++) {
			double v = runs[m][i].dml.rps;

			printf("  %s %9.0f", dml_durability_names[o->durability[m]], v);
			if (none >= 0 && (int)m != none && runs[none][i].dml.rps > 0)
				printf(" (%.2f x)", v / runs[none][i].dml.rps);
		}
		printf("\n");
	}
	if (none < 0 || batch < 0) {
		printf("%sSKIP batch >= %.1f x none: needs --durability with both\n", pre,
		       BENCH_BATCH_VS_NONE);
		return;
	}
	for (size_t i = 0; i < ncases; i++) {
		const struct bench_case *bc = &runs[0][i];
		double r = runs[none][i].dml.rps > 0 ?
			   runs[batch][i].dml.rps / runs[none][i].dml.rps : 0;
		char label[32];

		if (bc->op != BENCH_PUSH)
			continue;
		bench_case_label(bc, label, sizeof(label));
		printf("%s%s push %s %s conns=%u window=%u: batch %.2f x none (needs >= %.1f)\n",
		       pre, r >= BENCH_BATCH_VS_NONE ? "PASS" : "FAIL",
		       bench_kind_names[bc->kind], label, bc->conns, bc->window, r,
		       BENCH_BATCH_VS_NONE);
	}
	fflush(stdout);
}

static int bench_pushpull_main(int argc, char **argv)
{
	struct bench_opts o;
	struct bench_case *cases = NULL, *runs[3] = { NULL, NULL, NULL };
	char exe[PATH_MAX] = "";
	size_t ncases;
	int help, rc;

	rc = bench_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_pushpull_usage, o.verbose))
		return rc;
	ncases = bench_cases_build(&o, &cases);
	if (o.baseline == BENCH_BASELINE_ONLY) {
		bench_print_preface(&o, NULL, exe, ncases, 0);
		rc = bench_run_cases(cases, ncases, NULL, 0, &o, 1);
		goto out;
	}
	if (bench_server_find(o.server, exe, sizeof(exe))) {
		dml_err("cannot find dml-server: use --server or DML_SERVER");
		rc = DML_ENOTFOUND;
		goto out;
	}
	if (!o.ndurability) {
		rc = bench_pushpull_serve(&o, exe, cases, ncases);
		goto out;
	}
	for (size_t m = 0; m < o.ndurability; m++) {
		runs[m] = dml_xcalloc(ncases, sizeof(*cases));
		memcpy(runs[m], cases, ncases * sizeof(*cases));
	}
	rc = bench_durability_run(&o, exe, runs, ncases);
	if (rc == 0)
		bench_print_durability(runs, &o, ncases);
out:
	for (size_t m = 0; m < 3; m++)
		free(runs[m]);
	free(cases);
	return bench_exit_status(rc);
}

/* ---- subcommands ----------------------------------------------------- */

static const struct bench_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);
	void (*usage)(FILE *out);
} bench_cmds[] = {
	{ "pushpull", "push/pull throughput and latency against one dml-server, "
		      "next to raw TCP", bench_pushpull_main, bench_pushpull_usage },
	{ "train", "time to a target accuracy, single process and local cluster, "
		   "next to PyTorch", bench_train_main, bench_train_usage },
	{ "gen-clicks", "write click-like libsvm data with a known best AUC",
	  bench_gen_clicks_main, bench_gen_clicks_usage },
	{ "sparse", "sparse_lr on click-like data at scale on the local cluster: "
		    "examples/s, AUC next to the true model's", bench_sparse_main,
	  bench_sparse_usage },
	{ "recovery", "a crashed dml-server's time to serve its logged state again",
	  bench_recovery_main, bench_recovery_usage },
	{ "hetero", "time to accuracy on unequal workers, with and without placement "
		    "by measured speed", bench_hetero_main, bench_hetero_usage },
	{ "assign", "the scheduler's placement for 10,000 simulated workers",
	  bench_assign_main, bench_assign_usage },
};

static void bench_usage(FILE *out)
{
	fprintf(out, "usage: dml-bench COMMAND [options]\n"
		     "       dml-bench COMMAND --help\n\ncommands:\n");
	for (size_t i = 0; i < DML_ARRAY_LEN(bench_cmds); i++)
		fprintf(out, "  %-10s %s\n", bench_cmds[i].name, bench_cmds[i].summary);
	for (size_t i = 0; i < DML_ARRAY_LEN(bench_cmds); i++) {
		fprintf(out, "\n");
		bench_cmds[i].usage(out);
	}
}

int main(int argc, char **argv)
{
	dml_log_set_ident("dml-bench");
	dml_blas_kernels_choose(argv);
	if (argc < 2) {
		bench_usage(stderr);
		return BENCH_EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		bench_usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < DML_ARRAY_LEN(bench_cmds); i++) {
		if (strcmp(argv[1], bench_cmds[i].name) == 0)
			return bench_cmds[i].run(argc - 1, argv + 1);
	}
	dml_err("unknown command '%s' (see dml-bench --help)", argv[1]);
	return BENCH_EXIT_USAGE;
}
