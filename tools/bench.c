/*
 * dml-bench: benchmarks that print figures, one subcommand each. This file
 * holds the table of subcommands and main(): pushpull (bench_pushpull.c),
 * train (bench_train.c), gen-clicks (bench_clicks.c), sparse
 * (bench_sparse.c), recovery (bench_recovery.c), hetero (bench_hetero.c),
 * zones (bench_zones.c), assign (bench_assign.c) and codec (bench_codec.c).
 *
 * Each subcommand stops whatever it started (servers, clusters, threads)
 * before it returns; its exit status says whether it ran, not whether a
 * target was met.
 */
#include <stdio.h>
#include <string.h>

#include "tools/bench_assign.h"
#include "tools/bench_clicks.h"
#include "tools/bench_codec.h"
#include "tools/bench_hetero.h"
#include "tools/bench_pushpull.h"
#include "tools/bench_recovery.h"
#include "tools/bench_sparse.h"
#include "tools/bench_train.h"
#include "tools/bench_util.h"
#include "tools/bench_zones.h"
#include "worker/blas_kernels.h"
#include "proto/log.h"
#include "proto/util.h"

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
	{ "zones", "cross-zone bytes and time to accuracy on a fleet over emulated "
		   "zones", bench_zones_main, bench_zones_usage },
	{ "assign", "the scheduler's placement for 10,000 simulated workers",
	  bench_assign_main, bench_assign_usage },
	{ "codec", "the gradient codecs' encode and decode GB/s next to memcpy, and "
		   "top-k selection", bench_codec_main, bench_codec_usage },
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
