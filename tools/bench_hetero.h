/*
 * dml-bench hetero (bench_hetero.c): time to a target accuracy on a fleet
 * of unequal workers, with and without placement by measured speed, and a
 * job whose worker slows down part way. Declared here for bench.c's
 * command table.
 *
 * Nothing declared here may start a cluster by itself: only
 * bench_hetero_main() does, and it stops what it started.
 */
#ifndef DML_BENCH_HETERO_H
#define DML_BENCH_HETERO_H

#include <stdio.h>

/**
 * `dml-bench hetero [options]`: argv[0] is "hetero". Returns the exit
 * status: 0 when it ran (whether or not a target was met), 1 on an error,
 * 2 on bad usage, 130 when interrupted.
 */
int bench_hetero_main(int argc, char **argv);

/** The usage text of `dml-bench hetero`. */
void bench_hetero_usage(FILE *out);

#endif
