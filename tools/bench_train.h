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
};

/**
 * Run cfg's job on a local cluster of tools/dml-local, copying and scoring
 * its model as `dml-bench train` does, and take the cluster down. 0 or an
 * error (logged); fig->polls is the caller's to free in both cases.
 */
int bench_train_cluster_run(const struct bench_train_cfg *cfg, struct bench_train_fig *fig);

#endif
