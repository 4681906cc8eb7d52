/*
 * dml-bench gen-clicks (bench_clicks.c): writes the click-like synthetic
 * data of worker/data_synth_clicks.h as libsvm text, gzipped when the file
 * name ends in .gz, and prints the hidden true model's AUC on what it wrote
 * and how fast it wrote. Declared here for bench.c's command table.
 *
 * Nothing declared here may start a process or touch the network.
 */
#ifndef DML_BENCH_CLICKS_H
#define DML_BENCH_CLICKS_H

#include <stdio.h>

/**
 * `dml-bench gen-clicks [options]`: argv[0] is "gen-clicks". Returns the
 * exit status: 0 when written, 1 on an error, 2 on bad usage, 130 when
 * interrupted (the partial file is removed).
 */
int bench_gen_clicks_main(int argc, char **argv);

/** The usage text of `dml-bench gen-clicks`. */
void bench_gen_clicks_usage(FILE *out);

#endif
