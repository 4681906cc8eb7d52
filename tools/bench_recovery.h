/*
 * dml-bench recovery (bench_recovery.c): a dml-server with a gradient log
 * SIGKILLed after a worker's pushes and started again on its store; the
 * time to serving with full state, and the model checked bit for bit.
 * Declared here for bench.c's command table.
 */
#ifndef DML_BENCH_RECOVERY_H
#define DML_BENCH_RECOVERY_H

#include <stdio.h>

/**
 * `dml-bench recovery [options]`: argv[0] is "recovery". Returns the exit
 * status: 0 when it ran (whatever the time), 1 on an error or a model that
 * came back different, 2 on bad usage, 130 when interrupted.
 */
int bench_recovery_main(int argc, char **argv);

/** The usage text of `dml-bench recovery`. */
void bench_recovery_usage(FILE *out);

#endif
