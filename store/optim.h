/*
 * Server-side optimizer kernels: turn a pushed gradient into an update of one
 * row of parameters (or, where no per-row step counter is involved, of a
 * contiguous run of rows at once). The formulas are those of enum
 * dml_optim_kind in table_spec.h; weight decay is added to the gradient
 * (g' = g + wd * w) by every kind except DML_OPT_ADD, which is w += g.
 *
 * Pure arithmetic on buffers the caller owns: no allocation, no I/O, no
 * logging. The kernels trust their arguments (the table checked them), so a
 * conf must pass dml_optim_validate() before it is used here.
 */
#ifndef DML_OPTIM_H
#define DML_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "store/table.h"

/**
 * Floats of optimizer state kept per parameter value: 0 for SGD and ADD,
 * 1 for MOMENTUM (velocity) and ADAGRAD (sum of squares), 2 for ADAM (m, v).
 */
size_t dml_optim_state_floats(const struct dml_optim_conf *c);

/**
 * Non-zero when the conf keeps a step counter per row (ADAM, for bias
 * correction; any kind but ADD with lr_decay > 0, for the decay). Such a kind must be applied one row at a time, since each row
 * has its own counter; the others may be applied to a run of rows at once.
 */
int dml_optim_uses_step(const struct dml_optim_conf *c);

/**
 * Apply gradient g to the n values w as a push of weight 1 (see
 * dml_optim_apply_weighted). state holds
 * dml_optim_state_floats(c) consecutive blocks of n floats (for ADAM: m
 * first, then v); it may be NULL when that count is 0. step is the row's step
 * counter, incremented (saturating) when dml_optim_uses_step(c), and
 * ignored (may be NULL) otherwise. w, state and g must not overlap.
 */
void dml_optim_apply(const struct dml_optim_conf *c, float *w, float *state,
		     uint32_t *step, const float *g, size_t n);

/**
 * As dml_optim_apply, for a push of the given weight: how many batches of
 * the job's batch_size g sums over (each divided by batch_size), > 0 and
 * finite. ADD, SGD and MOMENTUM apply g as it is, which already carries
 * that many batches. ADAM and ADAGRAD divide their step by the size of
 * recent gradients, so a sum over more examples would not move further:
 * they take the push as weight steps of its mean gradient g / weight. ADAM
 * decays m and v by beta^weight and mixes in the mean gradient by
 * 1 - beta^weight, then steps weight times as far; ADAGRAD adds weight
 * times the mean's square and steps weight times as far. Workers given
 * unequal batches of one clock so move the model as far per example as
 * workers given equal ones. The step counter still counts pushes. Weight 1
 * is exactly dml_optim_apply.
 */
void dml_optim_apply_weighted(const struct dml_optim_conf *c, float *w, float *state,
			      uint32_t *step, const float *g, size_t n, float weight);

/**
 * Apply n gradient rows of width floats (row i at g + i * width) to rows of
 * row-major arrays: rows[i] selects row rows[i] of values (width floats a
 * row), of state (width * dml_optim_state_floats(c) floats a row, laid out as
 * for dml_optim_apply; NULL if that count is 0) and of steps (NULL unless
 * dml_optim_uses_step(c)). Rows may repeat; they are applied in order,
 * each as a push of weight weight (dml_optim_apply_weighted).
 */
void dml_optim_apply_rows(const struct dml_optim_conf *c, float *values, float *state,
			  uint32_t *steps, size_t width, const uint64_t *rows, size_t n,
			  const float *g, float weight);

#endif
