/*
 * dml-bench train (bench_train.c): time to a target accuracy of one job,
 * single-process and on the local cluster, next to the PyTorch
 * figures. Declared here for bench.c's command table.
 *
 * Nothing declared here may start a cluster or touch the network by
 * itself: only bench_train_main() does, and it stops what it started.
 */
#ifndef DML_BENCH_TRAIN_H
#define DML_BENCH_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tools/bench_cluster.h"

/**
 * `dml-bench train [options]`: argv[0] is "train". Returns the exit status:
 * 0 when it ran (whether or not a target was met), 1 on an error, 2 on bad
 * usage, 130 when interrupted.
 */
int bench_train_main(int argc, char **argv);

/** The usage text of `dml-bench train`. */
void bench_train_usage(FILE *out);

/** One job on a fresh local cluster, as `dml-bench train` runs it. */
struct bench_train_cfg {
	const char *build;       /* the build tree; NULL: this program's */
	const char *job;         /* the job file; it must evaluate accuracy */
	const char *cpus;        /* dml-local up --cpus LIST, or NULL */
	/* dml-local up --zones LIST --wan RATE (then workers is ignored), or
	 * NULL: every node on this host */
	const char *zones, *wan;
	int aggregators;         /* with zones: dml-local up --aggregators */
	unsigned servers, workers;
	double target;           /* test accuracy to reach */
	double max_seconds;      /* of training at most */
	int keep;                /* keep the cluster's directory */
	/* after slow_after_s of training, worker slow_worker's (1, 2, ...)
	 * CPU quota becomes slow_cpus cores (NULL: never) */
	double slow_after_s;
	unsigned slow_worker;
	const char *slow_cpus;
	/* the target is met when the mean accuracy of the copies within the
	 * last smooth_epochs epochs reaches it (0: one copy's) */
	double smooth_epochs;
};

/** What one run measured. */
struct bench_train_fig {
	int reached;             /* a copy of the model reached the target */
	double t_target;         /* seconds of training to it (NaN: never) */
	double ep_target;        /* epochs by then */
	double final_acc;        /* the last copy's accuracy */
	double rate;             /* examples/s while running */
	double trained_s, epochs;
	uint64_t t0_ns;          /* time zero of training (dml_now_ns) */
	struct bench_poll *polls; /* every status answer; the caller frees it */
	size_t npolls;
	/* with zones: the bytes the zone links carried both ways from the
	 * submission to the end of the watch, and the examples trained then
	 * (NaN, 0 without zones) */
	double link_bytes;
	uint64_t link_examples;
	char refused[256];       /* why the job was refused; "" when it was not */
};

/**
 * Run cfg's job on a local cluster of tools/dml-local, copying and scoring
 * its model as `dml-bench train` does, and take the cluster down. 0 or an
 * error (logged); fig->polls is the caller's to free in both cases.
 */
int bench_train_cluster_run(const struct bench_train_cfg *cfg, struct bench_train_fig *fig);

/**
 * Seconds from time zero (the first update of the model) until each of the
 * run's `workers` workers trained: the slowest machine's start, loading the
 * data, which no placement or routing shortens and a long job does not
 * notice. NaN when no status shows every worker past its first clock.
 */
double bench_train_start_s(const struct bench_train_fig *fig, unsigned workers);

/**
 * Seconds of training to the target, counted from bench_train_start_s()
 * (from time zero when that is unknown); NaN when it was not reached.
 */
double bench_train_time(const struct bench_train_fig *fig, unsigned workers);

#endif
