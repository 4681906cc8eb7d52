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

#include <stdio.h>

/**
 * `dml-bench train [options]`: argv[0] is "train". Returns the exit status:
 * 0 when it ran (whether or not a target was met), 1 on an error, 2 on bad
 * usage, 130 when interrupted.
 */
int bench_train_main(int argc, char **argv);

/** The usage text of `dml-bench train`. */
void bench_train_usage(FILE *out);

#endif
