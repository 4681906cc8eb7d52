/*
 * What the files of check_table share: the tables and optimizer settings
 * the tests start from, and each file's tests, added to the suite's test
 * cases in check_table.c.
 */
#ifndef DML_CHECK_TABLE_H
#define DML_CHECK_TABLE_H

#include <check.h>
#include <stdint.h>

#include "store/optim.h"
#include "store/table.h"

#define TOL 1e-5

/* ---- check_table.c ---- */

/** Optimizer settings of a kind: lr 0.1, no weight decay, momentum 0.9. */
struct dml_optim_conf optim_conf(enum dml_optim_kind kind);

/** Table 1 of a kind and width: keys 0..999 (dense), zeros, seed 7. */
struct dml_table_conf table_conf(enum dml_table_kind kind, uint32_t width,
				 enum dml_optim_kind opt);

/** A table made from c (the test fails if it cannot be). */
struct dml_table *table_make(const struct dml_table_conf *c);

/** A key sequence that covers the whole 64-bit space, including 0. */
uint64_t key_of(uint64_t i);

/* ---- check_table_optim.c ---- */

/** The optimizer tests, in the order they run. */
void check_table_optim_tests(TCase *optim);

/* ---- check_table_rows.c ---- */

/** A dense ADD table of width 3 holding keys 100..199. */
struct dml_table *dense_add_table(void);

/** The tests of dense and sparse tables, in the order they run. */
void check_table_rows_tests(TCase *dense, TCase *sparse);

/* ---- check_table_move.c ---- */

/** The tests of rows moving between tables and of changed rows. */
void check_table_move_tests(TCase *move);

#endif
