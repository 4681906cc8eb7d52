/*
 * dml-bench pushpull's options: the command line into struct bench_opts
 * (bench_pushpull_internal.h), the defaults and what --quick and
 * --durability change of them, and the usage text.
 *
 * Nothing here starts a server or measures: bad usage ends the command
 * with BENCH_EXIT_USAGE before anything runs.
 */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_pushpull.h"
#include "bench_pushpull_internal.h"
#include "bench_util.h"
#include "log.h"
#include "store.h"
#include "util.h"

const char *const bench_op_names[] = { "push", "pull" };
const char *const bench_kind_names[] = { "dense", "sparse" };

static const char *const bench_baseline_names[] = { "yes", "no", "only" };
static const char *const bench_no_yes[] = { "no", "yes" };

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

void bench_pushpull_usage(FILE *out)
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
int bench_pushpull_opts_parse(int argc, char **argv, struct bench_opts *o, int *help)
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

