/*
 * The finite-value check of pushed gradients (server_admit.c) and of
 * decoded tensors (codec.c): a pure function, so tests and benchmarks link
 * it without a daemon.
 */
#ifndef DML_FINITE_H
#define DML_FINITE_H

#include <stddef.h>

/** 1 when none of v[0..n) (float-aligned) is a NaN or an infinity, else 0. */
int dml_values_finite(const float *v, size_t n);

#endif
