/*
 * dml-bench pushpull: push/pull throughput and latency against one real
 * dml-server it starts itself, next to a raw-TCP baseline measured in the
 * same run (bench_pushpull.c and the files it names).
 */
#ifndef DML_BENCH_PUSHPULL_H
#define DML_BENCH_PUSHPULL_H

#include <stdio.h>

/** `dml-bench pushpull ARGS`. Returns the exit status. */
int bench_pushpull_main(int argc, char **argv);

/** The usage text of `dml-bench pushpull`. */
void bench_pushpull_usage(FILE *out);

#endif
