/*
 * dml-bench assign (bench_assign.c): the scheduler's placement for a large
 * fleet of simulated workers, through its job table. Declared here for
 * bench.c's command table.
 */
#ifndef DML_BENCH_ASSIGN_H
#define DML_BENCH_ASSIGN_H

#include <stdio.h>

/**
 * `dml-bench assign [options]`: argv[0] is "assign". Returns the exit
 * status: 0 when it ran (whatever the times), 1 on an error or a plan that
 * is not whole, 2 on bad usage.
 */
int bench_assign_main(int argc, char **argv);

/** The usage text of `dml-bench assign`. */
void bench_assign_usage(FILE *out);

#endif
