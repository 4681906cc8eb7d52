/*
 * dml-bench pushpull's options: the command line into struct bench_opts
 * (bench_pushpull_internal.h), the defaults and what --quick and
 * --durability change of them, and the usage text.
 *
 * Nothing here starts a server or measures: bad usage ends the command
 * with BENCH_EXIT_USAGE before anything runs.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/bench_opt.h"
#include "tools/bench_pushpull.h"
#include "tools/bench_pushpull_internal.h"
#include "tools/bench_util.h"
#include "proto/log.h"
#include "store/store.h"
#include "proto/util.h"

const char *const bench_op_names[] = { "push", "pull" };
const char *const bench_kind_names[] = { "dense", "sparse" };
const char *const bench_transport_names[] = { "tcp", "unix" };

static const char *const bench_baseline_names[] = { "yes", "no", "only" };
static const char *const bench_no_yes[] = { "no", "yes" };

/* --durability's default --sizes and --rounds. */
#define BENCH_DURABILITY_SIZES "4K,64K"
#define BENCH_DURABILITY_ROUNDS 3

/* Defaults as text, parsed as the options are; --quick swaps in the
 * second set for whatever was not given. */
#define BENCH_FULL_SECONDS "1.0"
#define BENCH_FULL_WARMUP "0.2"
#define BENCH_FULL_SIZES "4K,64K,256K,1M,16M"
#define BENCH_FULL_CONNS "1,2,4"
#define BENCH_FULL_WINDOWS "1,8,32"
#define BENCH_QUICK_SECONDS "0.3"
#define BENCH_QUICK_WARMUP "0.1"
#define BENCH_QUICK_SIZES "4K,1M"
#define BENCH_QUICK_CONNS "1"
#define BENCH_QUICK_WINDOWS "1,8"

/* The options, in --help's order; the list options in the order of
 * struct bench_defaults' lists. */
enum bench_pushpull_opt {
	P_SERVER, P_SECONDS, P_WARMUP, P_SIZES, P_CONNS, P_WINDOWS, P_THREADS, P_OPS,
	P_TRANSPORT, P_DENSE, P_SPARSE, P_QUICK, P_BASELINE, P_BASELINE_ONLY, P_DURABILITY,
	P_ROUNDS,
	P_BATCH_MS, P_CSV, P_KEEP, P_VERBOSE, P_HELP, P_NOPTS
};
#define BENCH_NLISTS 3

static const struct bench_defaults {
	const char *seconds, *warmup;
	const char *lists[BENCH_NLISTS];
} bench_full = { BENCH_FULL_SECONDS, BENCH_FULL_WARMUP,
		 { BENCH_FULL_SIZES, BENCH_FULL_CONNS, BENCH_FULL_WINDOWS } },
  bench_quick = { BENCH_QUICK_SECONDS, BENCH_QUICK_WARMUP,
		  { BENCH_QUICK_SIZES, BENCH_QUICK_CONNS, BENCH_QUICK_WINDOWS } };

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

static int bench_transport_item(const char *tok, void *arg)
{
	unsigned *transports = arg;
	int t;

	if (bench_choice(tok, bench_transport_names, BENCH_NTRANSPORT, &t))
		return DML_EINVAL;
	*transports |= 1u << t;
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

static int bench_opt_ops(const char *cmd, const struct bench_opt *opt, const char *a,
			 void *arg)
{
	struct bench_opts *o = arg;

	o->ops = 0;
	return bench_split(a, bench_op_item, &o->ops) ? bench_opt_error(cmd, opt, a, NULL) : 0;
}

static int bench_opt_transport(const char *cmd, const struct bench_opt *opt,
			       const char *a, void *arg)
{
	struct bench_opts *o = arg;

	o->transports = 0;
	return bench_split(a, bench_transport_item, &o->transports)
		       ? bench_opt_error(cmd, opt, a, NULL) : 0;
}

static int bench_opt_durability(const char *cmd, const struct bench_opt *opt,
				const char *a, void *arg)
{
	struct bench_opts *o = arg;

	o->ndurability = 0;
	return bench_split(a, bench_durability_item, o) ? bench_opt_error(cmd, opt, a, NULL) : 0;
}

/* An int field: the index of a in the names --dense and --sparse take. */
static int bench_opt_yes_no(const char *cmd, const struct bench_opt *opt, const char *a,
			    void *o)
{
	int *field = (int *)((char *)o + opt->offset);

	return bench_choice(a, bench_no_yes, 2, field) ? bench_opt_error(cmd, opt, a, NULL) : 0;
}

static int bench_opt_baseline(const char *cmd, const struct bench_opt *opt, const char *a,
			      void *arg)
{
	struct bench_opts *o = arg;

	if (bench_choice(a, bench_baseline_names, BENCH_NBASELINE, &o->baseline))
		return bench_opt_error(cmd, opt, a, NULL);
	return 0;
}

static int bench_opt_baseline_only(const char *cmd, const struct bench_opt *opt,
				   const char *a, void *arg)
{
	struct bench_opts *o = arg;

	o->baseline = BENCH_BASELINE_ONLY;
	return 0;
}

#define P_FIELD(f) offsetof(struct bench_opts, f)

static const struct bench_opt pushpull_opt_rows[P_NOPTS] = {
	[P_SERVER] = { .name = "server", .arg = "PATH", .parse = bench_opt_string,
		.offset = P_FIELD(server),
		.help = "dml-server to run (default: $DML_SERVER, else\n"
		        "../server/dml-server or dml-server next to this\nprogram)" },
	[P_SECONDS] = { .name = "seconds", .arg = "X", .parse = bench_opt_double,
		.offset = P_FIELD(seconds), .min = 0.01, .max = 3600,
		.want = "0.01 to 3600",
		.help = "counted time per measurement (default " BENCH_FULL_SECONDS ");\n"
		        "longer (up to " BENCH_STR(BENCH_MAX_STRETCH) "x) until every window "
		        "turned over" },
	[P_WARMUP] = { .name = "warmup", .arg = "X", .parse = bench_opt_double,
		.offset = P_FIELD(warmup), .max = 600, .want = "0 to 600",
		.help = "uncounted warm-up before it (default " BENCH_FULL_WARMUP ")" },
	[P_SIZES] = { .name = "sizes", .arg = "LIST", .parse = bench_opt_sizes,
		.offset = P_FIELD(sizes), .min = 4, .max = BENCH_MAX_SIZE,
		.want = "multiples of 4 bytes up to 256M, e.g. 4K,1M",
		.help = "dense request sizes, K/M suffixes (default " BENCH_FULL_SIZES ")" },
	[P_CONNS] = { .name = "conns", .arg = "LIST", .parse = bench_opt_counts,
		.offset = P_FIELD(conns), .min = 1, .max = BENCH_MAX_CONNS,
		.want = "1 to " BENCH_STR(BENCH_MAX_CONNS),
		.help = "client connections (default " BENCH_FULL_CONNS ")" },
	[P_WINDOWS] = { .name = "windows", .arg = "LIST", .parse = bench_opt_counts,
		.offset = P_FIELD(windows), .min = 1, .max = BENCH_MAX_WINDOW,
		.want = "1 to 4096",
		.help = "requests in flight per connection (default " BENCH_FULL_WINDOWS ")" },
	[P_THREADS] = { .name = "threads", .arg = "N", .parse = bench_opt_unsigned,
		.offset = P_FIELD(threads), .max = BENCH_MAX_CONNS,
		.want = "0 to " BENCH_STR(BENCH_MAX_CONNS),
		.help = "client threads driving the connections, dealt\n"
		        "round robin, each on one event loop (default 1;\n"
		        "0: one per connection); raw TCP uses as many" },
	[P_OPS] = { .name = "ops", .arg = "LIST", .parse = bench_opt_ops,
		.want = "push and/or pull", .help = "push,pull (default both)" },
	[P_TRANSPORT] = { .name = "transport", .arg = "LIST", .parse = bench_opt_transport,
		.want = "tcp and/or unix",
		.help = "tcp,unix (default both): loopback TCP, and the\n"
		        "server's Unix socket (local_socket); the raw\n"
		        "baseline runs over each too" },
	[P_DENSE] = { .name = "dense", .arg = "yes|no", .parse = bench_opt_yes_no,
		.offset = P_FIELD(dense), .want = "yes or no",
		.help = "dense requests (default yes)" },
	[P_SPARSE] = { .name = "sparse", .arg = "yes|no", .parse = bench_opt_yes_no,
		.offset = P_FIELD(sparse), .want = "yes or no",
		.help = "sparse requests of " BENCH_STR(BENCH_SPARSE_KEYS) " keys x 1 and x 64 "
		        "floats\n(default yes)" },
	[P_QUICK] = { .name = "quick", .parse = bench_opt_flag, .offset = P_FIELD(quick),
		.help = "short subset for smoke tests (" BENCH_QUICK_SIZES "; " BENCH_QUICK_CONNS
		        " conns;\nwindows " BENCH_QUICK_WINDOWS "; " BENCH_QUICK_SECONDS
		        " s); explicit options still win" },
	[P_BASELINE] = { .name = "baseline", .arg = "yes|no|only",
		.parse = bench_opt_baseline, .want = "yes, no or only",
		.help = "measure raw sockets too (default), not at all,\n"
		        "or alone without starting a server" },
	[P_BASELINE_ONLY] = { .name = "baseline-only", .parse = bench_opt_baseline_only,
		.help = "the same as --baseline only" },
	[P_DURABILITY] = { .name = "durability", .arg = "LIST",
		.parse = bench_opt_durability, .want = "sync, batch and/or none, each once",
		.help = "run against a server with a [store] of each of\n"
		        "these modes in turn (sync, batch, none), and\n"
		        "compare their push rates (batch >= 0.7 x none);\n"
		        "--sizes defaults to " BENCH_DURABILITY_SIZES " then;\n"
		        "the servers run side by side and take turns" },
	[P_ROUNDS] = { .name = "rounds", .arg = "N", .parse = bench_opt_u64,
		.offset = P_FIELD(rounds), .min = 1, .max = 99, .want = "1 to 99",
		.help = "measure each case N times, the cases (and with\n"
		        "--durability the modes) taking turns, and keep\n"
		        "the median; raw TCP once (default 1, with\n"
		        "--durability " BENCH_STR(BENCH_DURABILITY_ROUNDS) ")" },
	[P_BATCH_MS] = { .name = "batch-ms", .arg = "MS", .parse = bench_opt_u64,
		.offset = P_FIELD(batch_ms), .min = 1, .max = 60000, .want = "1 to 60000",
		.help = "with --durability: the batch server's batch_ms\n"
		        "(default: dml-server's own)" },
	[P_CSV] = { .name = "csv", .parse = bench_opt_flag, .offset = P_FIELD(csv),
		.help = "machine-readable output" },
	[P_KEEP] = { .name = "keep", .parse = bench_opt_flag, .offset = P_FIELD(keep),
		.help = "keep the server's directory (config, log)" },
	[P_VERBOSE] = BENCH_OPT_VERBOSE(P_FIELD(verbose),
					"log libdml's informational messages; twice: debug,\n"
					"for the server too"),
	[P_HELP] = BENCH_OPT_HELP,
};

static const struct bench_opts_table pushpull_table = {
	"pushpull", pushpull_opt_rows, P_NOPTS, 20
};

void bench_pushpull_usage(FILE *out)
{
	fprintf(out,
		"dml-bench pushpull [options]: push/pull throughput and latency\n"
		"against one dml-server it starts itself, next to a raw-socket baseline\n"
		"measured in the same run (same bytes, connections, window and\n"
		"transport).\n"
		"\n");
	bench_opts_help(&pushpull_table, out);
	fprintf(out,
		"\n"
		"GB/s counts value bytes only (1 GB = 1e9 bytes); latency is submit to\n"
		"completion of each request; ratio = dml / raw-socket requests per\n"
		"second over the same transport (via: tcp or unix).\n"
		"Exit status: 0 when it ran (even if a target failed), 1 on an error,\n"
		"2 on bad usage, 130 when interrupted.\n");
}

/* Fill in what the command line left unset. Returns 0 or an exit status. */
static int bench_opts_finish(struct bench_opts *o)
{
	const struct bench_defaults *d = o->quick ? &bench_quick : &bench_full;
	const char *cmd = pushpull_table.cmd;

	/* The defaults always parse. */
	if (o->seconds < 0)
		bench_opt_double(cmd, &pushpull_opt_rows[P_SECONDS], d->seconds, o);
	if (o->warmup < 0)
		bench_opt_double(cmd, &pushpull_opt_rows[P_WARMUP], d->warmup, o);
	/* Every push stays in the log (no checkpoints yet): megabyte pushes
	 * would write gigabytes a second to disk. */
	if (o->ndurability && o->sizes.n == 0)
		bench_opt_sizes(cmd, &pushpull_opt_rows[P_SIZES], BENCH_DURABILITY_SIZES, o);
	if (o->rounds == 0)
		o->rounds = o->ndurability ? BENCH_DURABILITY_ROUNDS : 1;
	if (o->batch_ms && !o->ndurability) {
		dml_err("pushpull: --batch-ms goes with --durability");
		return BENCH_EXIT_USAGE;
	}
	/* A given list is never empty. */
	for (int id = 0; id < BENCH_NLISTS; id++) {
		const struct bench_opt *opt = &pushpull_opt_rows[P_SIZES + id];

		if (((struct bench_list *)((char *)o + opt->offset))->n == 0)
			opt->parse(cmd, opt, d->lists[id], o);
	}
	if (o->ops == 0)
		o->ops = 1u << BENCH_PUSH | 1u << BENCH_PULL;
	if (o->transports == 0)
		o->transports = 1u << BENCH_TCP | 1u << BENCH_UNIX;
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

int bench_pushpull_opts_parse(int argc, char **argv, struct bench_opts *o, int *help)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->seconds = o->warmup = -1; /* unset */
	o->dense = o->sparse = 1;
	o->threads = 1;
	rc = bench_opts_parse(&pushpull_table, argc, argv, o, help);
	return rc || *help ? rc : bench_opts_finish(o);
}
