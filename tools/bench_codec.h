/*
 * dml-bench codec (bench_codec.c): what the gradient codecs (proto/codec.h)
 * cost against memcpy in the same run. Declared here for bench.c's command
 * table.
 */
#ifndef DML_BENCH_CODEC_H
#define DML_BENCH_CODEC_H

#include <stdio.h>

/**
 * `dml-bench codec [options]`: argv[0] is "codec". Returns the exit status:
 * 0 when it ran (whatever the speeds), 1 on an error, 2 on bad usage, 130
 * when interrupted.
 */
int bench_codec_main(int argc, char **argv);

/** The usage text of `dml-bench codec`. */
void bench_codec_usage(FILE *out);

#endif
