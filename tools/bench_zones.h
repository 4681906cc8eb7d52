/*
 * dml-bench zones (bench_zones.c): one job on a fleet spread over two
 * emulated zones joined by a slow link, with the routings and cross-zone
 * codecs the zones design offers, next to the same fleet in one zone.
 * Declared here for bench.c's command table.
 *
 * Nothing declared here may start a cluster by itself: only
 * bench_zones_main() does, and it stops what it started.
 */
#ifndef DML_BENCH_ZONES_H
#define DML_BENCH_ZONES_H

#include <stdio.h>

/**
 * `dml-bench zones [options]`: argv[0] is "zones". Returns the exit status:
 * 0 when it ran (whether or not a target was met) or was skipped (no root
 * or no iproute2), 1 on an error, 2 on bad usage, 130 when interrupted.
 */
int bench_zones_main(int argc, char **argv);

/** The usage text of `dml-bench zones`. */
void bench_zones_usage(FILE *out);

#endif
