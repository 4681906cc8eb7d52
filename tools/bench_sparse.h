/*
 * dml-bench sparse (bench_sparse.c): the sparse_lr app at scale on the
 * local cluster, synthetic clicks (worker/data_synth_clicks.h) hashed into
 * 2^B keys, with the examples/s and the test AUC it reaches next to the
 * AUC of the hidden true model on the same records. Declared here for
 * bench.c's command table.
 *
 * Nothing declared here may start a cluster or touch the network by
 * itself: only bench_sparse_main() does, and it stops what it started.
 */
#ifndef DML_BENCH_SPARSE_H
#define DML_BENCH_SPARSE_H

#include <stdio.h>

/**
 * `dml-bench sparse [options]`: argv[0] is "sparse". Returns the exit
 * status: 0 when it ran (whatever AUC it reached), 1 on an error, 2 on bad
 * usage, 130 when interrupted.
 */
int bench_sparse_main(int argc, char **argv);

/** The usage text of `dml-bench sparse`. */
void bench_sparse_usage(FILE *out);

#endif
