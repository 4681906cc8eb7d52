/*
 * Error-feedback residuals: what a sender's lossy encodings have not carried
 * yet, kept per key as rows of `width` floats, to be added to that key's
 * next push (proto/codec.h). libdml keeps one per table; a zone aggregator
 * one per (owner, job, table).
 *
 * Two layouts: with dense_keys > 0 a flat array of dense_keys rows indexed
 * by key (a dense table whose size the sender knows: a push's residual is a
 * slice of it, encoded in place); with 0 an open-addressing hash of key ->
 * row, rows made (zero) as keys first come.
 */
#ifndef DML_RESIDUAL_H
#define DML_RESIDUAL_H

#include <stddef.h>
#include <stdint.h>

struct dml_residual;

/** A residual of rows of width floats; dense_keys > 0: indexed by key. */
struct dml_residual *dml_residual_new(uint32_t width, uint64_t dense_keys);
void dml_residual_free(struct dml_residual *r);

/** Flat layout: the rows from key `begin` on, in place. NULL for a hash. */
float *dml_residual_slice(struct dml_residual *r, uint64_t begin);

/**
 * Take the rows of n keys out into a new array of n x width floats, in order
 * (keys NULL: the keys begin .. begin + n - 1), leaving them zero; at[i]
 * gets where key i's row lives for dml_residual_give. A key that comes twice
 * is taken once (later copies start from zero).
 */
float *dml_residual_take(struct dml_residual *r, const uint64_t *keys, uint64_t begin,
			 size_t n, size_t *at);

/** Add the n rows of rows back where dml_residual_take found them. */
void dml_residual_give(struct dml_residual *r, const size_t *at, size_t n,
		       const float *rows);

/** The L2 norm of every row. */
double dml_residual_l2(const struct dml_residual *r);

/** Floats held (rows x width), for memory accounting. */
size_t dml_residual_floats(const struct dml_residual *r);

#endif
