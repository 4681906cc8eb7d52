/*
 * A job's TableSpec (dml.proto, from a job file or the wire) as the table
 * storage wants it: one conversion for every holder of a job's tables, the
 * server's job code and the worker's in-process store alike.
 *
 * Must never: accept names or values the storage would refuse later; the
 * key range is left for the caller to set.
 */
#ifndef DML_SERVER_TABLE_SPEC_H
#define DML_SERVER_TABLE_SPEC_H

#include <stddef.h>

#include "dml.pb-c.h"
#include "table.h"

/**
 * Fill t from ts, key range [0, 0). Returns 0, or DML_EINVAL with err
 * naming the table and the problem (unknown initializer or optimizer,
 * width 0, keys on a sparse table or none on a dense one, settings the
 * optimizer refuses).
 */
int dml_table_conf_from_spec(const Dml__TableSpec *ts, struct dml_table_conf *t, char *err,
			     size_t errlen);

#endif
