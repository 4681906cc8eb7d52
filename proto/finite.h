/*
 * The finite-value check of pushed gradients (server_admit.c) and of
 * decoded tensors (codec.c), and the vector add of a residual or a zone's
 * sum: pure functions, so tests and benchmarks link them without a daemon.
 */
#ifndef DML_FINITE_H
#define DML_FINITE_H

#include <stddef.h>

/** 1 when none of v[0..n) (float-aligned) is a NaN or an infinity, else 0. */
int dml_values_finite(const float *v, size_t n);

/** dst[i] += src[i] for i < n; the two arrays do not overlap. */
void dml_values_add(float *restrict dst, const float *restrict src, size_t n);

#endif
