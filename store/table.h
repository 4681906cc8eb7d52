/*
 * Parameter tables, as a server holds them (and a worker's in-process
 * store): dense (keys key_begin..key_end-1 in one contiguous array) or
 * sparse (uint64 keys in an open-addressing hash, rows created on first
 * touch), each with an initializer and a server-side optimizer that turns
 * pushed gradients into updates. What a table is made from (struct
 * dml_table_conf) and the names of its kinds are in proto/table_spec.h.
 *
 * Pure in-memory data structure: no I/O, single-threaded (the server's event
 * loop owns it). Row initial values depend only on (seed, key), so a row
 * created on first touch gets the same values whatever the order of requests.
 * Rows (values and optimizer state) can be exported from one table and
 * imported into another, for shards that move between servers.
 */
#ifndef DML_TABLE_H
#define DML_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "proto/table_spec.h"

struct dml_table;

/** Create a table. DML_EINVAL for a bad conf, DML_ENOMEM for no memory. */
int dml_table_new(const struct dml_table_conf *conf, struct dml_table **out);
/** Free a table; NULL is fine. */
void dml_table_free(struct dml_table *t);

const struct dml_table_conf *dml_table_conf(const struct dml_table *t);
/** Rows currently held (dense: the range size). */
uint64_t dml_table_rows(const struct dml_table *t);
/** Bytes of memory held for values and optimizer state. */
uint64_t dml_table_bytes(const struct dml_table *t);

/**
 * Apply gradients for the dense range [begin, end): grad holds
 * (end - begin) * width floats. DML_ERANGE outside the table's range,
 * DML_EINVAL on a sparse table, DML_ENOMEM if the values are pinned and
 * cannot be copied (nothing applied).
 */
int dml_table_push_range(struct dml_table *t, uint64_t begin, uint64_t end,
			 const float *grad);
/**
 * As dml_table_push_range, for a push of the given weight (how many
 * batch_size batches grad sums over; see dml_optim_apply_weighted).
 * DML_EINVAL also unless 0 < weight < inf.
 */
int dml_table_push_range_weighted(struct dml_table *t, uint64_t begin, uint64_t end,
				  const float *grad, float weight);
/** Copy the values of [begin, end) into out. Errors as above. */
int dml_table_pull_range(struct dml_table *t, uint64_t begin, uint64_t end, float *out);

/** A pin on a dense table's values; see dml_table_pin_range(). */
struct dml_table_pin;

/**
 * Dense tables: point *values at the stored values of [begin, end) and pin
 * them, so a reply can be sent from the table without copying it first and
 * still be a snapshot: while any pin is held, the next push first moves the
 * table's values to a fresh copy (at most one copy per push, and none when
 * no reply is in flight), leaving the pinned memory unchanged. Release with
 * dml_table_unpin(), also after dml_table_free() (the memory goes with its
 * last pin). Errors as dml_table_pull_range.
 */
int dml_table_pin_range(struct dml_table *t, uint64_t begin, uint64_t end,
			const float **values, struct dml_table_pin **pin);
/** Drop a pin; NULL is fine. */
void dml_table_unpin(struct dml_table_pin *pin);
/** Bytes of one dense table's values (what a push under a pin copies). */
uint64_t dml_table_value_bytes(const struct dml_table *t);

/**
 * Apply gradients for n keys: grad holds n * width floats, row i for keys[i].
 * Keys may repeat; every occurrence is applied. Dense tables: DML_ERANGE if a
 * key is outside the range (nothing applied). Sparse: missing rows are
 * created first. DML_ENOMEM if the hash cannot grow (nothing applied).
 */
int dml_table_push_keys(struct dml_table *t, const uint64_t *keys, size_t n,
			const float *grad);
/** As dml_table_push_keys, for a push of the given weight (as above). */
int dml_table_push_keys_weighted(struct dml_table *t, const uint64_t *keys, size_t n,
				 const float *grad, float weight);
/**
 * Copy the rows of n keys into out (n * width floats). A sparse table's
 * missing row is not created: out gets the initial values a first push
 * would start from (init depends only on seed and key). DML_ERANGE (dense,
 * a key outside the range), DML_ENOMEM (n past any table's size).
 */
int dml_table_pull_keys(struct dml_table *t, const uint64_t *keys, size_t n, float *out);

/**
 * Visit every row (for checkpoints and tests): fn(key, values, arg); a
 * non-zero return stops the walk and is returned.
 */
int dml_table_foreach(const struct dml_table *t,
		      int (*fn)(uint64_t key, const float *values, void *arg), void *arg);

/*
 * Moving rows between tables (a shard changing server). An exported row is
 * dml_table_row_floats() floats: the row's width values, then its optimizer
 * state (width * dml_optim_state_floats() floats, laid out as the optimizer
 * keeps it: for ADAM all of m, then all of v), then, for ADAM only, one more
 * float slot holding the bits of the row's uint32 step counter (copied, never
 * used as a number). Two tables built from the same conf read each other's
 * rows; rows are copied verbatim, so a moved row continues exactly where it
 * stopped.
 */

/** Floats per exported row (see above); 0 for NULL. */
size_t dml_table_row_floats(const struct dml_table *t);

/**
 * Dense: copy the rows of keys [begin, end) into out ((end - begin) *
 * dml_table_row_floats() floats). DML_EINVAL on a sparse table or begin >
 * end, DML_ERANGE outside the table's range.
 */
int dml_table_export_range(const struct dml_table *t, uint64_t begin, uint64_t end,
			   float *out);

/**
 * Dense: overwrite the rows of keys [begin, end) with exported rows. Errors
 * as dml_table_export_range, DML_ENOMEM as a push under a pin (nothing
 * changed).
 */
int dml_table_import_range(struct dml_table *t, uint64_t begin, uint64_t end,
			   const float *rows);

/**
 * Set the rows of n keys from exported rows (row i for keys[i]); sparse
 * tables create the missing rows, dense ones refuse a key outside their range
 * with DML_ERANGE. Nothing changes on an error (DML_ENOMEM, DML_EINVAL).
 */
int dml_table_import_keys(struct dml_table *t, const uint64_t *keys, size_t n,
			  const float *rows);

/** The hash that places a sparse key (the server passes dml_shard_key_hash). */
typedef uint64_t (*dml_table_hash_fn)(uint64_t key);

/**
 * Sparse: export the rows whose hash(key) lies in [lo, hi), in increasing
 * order of hash (then key). *keys (*n keys) and *rows (*n *
 * dml_table_row_floats() floats) are malloc'ed for the caller to free; both
 * NULL when *n is 0. The table is not changed. DML_EINVAL (dense table, NULL
 * argument, lo > hi) or DML_ENOMEM.
 */
int dml_table_export_hashed(const struct dml_table *t, dml_table_hash_fn hash, uint64_t lo,
			    uint64_t hi, uint64_t **keys, float **rows, size_t *n);

/**
 * Sparse: remove the rows whose hash(key) lies in [lo, hi) (after they were
 * exported); *removed (optional) gets how many. A removed key touched again
 * is a fresh row. DML_EINVAL as above, DML_ENOMEM (nothing removed).
 */
int dml_table_remove_hashed(struct dml_table *t, dml_table_hash_fn hash, uint64_t lo,
			    uint64_t hi, size_t *removed);

/**
 * Dense: hold keys [begin, end) from now on (begin == end: no rows). Rows of
 * keys in both the old and the new range keep their values and state; the
 * others start fresh (initial values, zero state), to be overwritten with
 * dml_table_import_range() when they come from another table. Replies
 * pinned to the old values keep them. DML_EINVAL (sparse, begin > end) or
 * DML_ENOMEM (nothing changed).
 */
int dml_table_set_range(struct dml_table *t, uint64_t begin, uint64_t end);

/*
 * Rows by index: 0 .. dml_table_rows() - 1. A dense row's index is its key
 * minus the first key held; a sparse row keeps its index until
 * dml_table_remove_hashed() moves it, and new keys take the next ones.
 */

/** Told that rows [r0, r1) are about to change: their old values still read. */
typedef void (*dml_table_write_fn)(void *arg, uint64_t r0, uint64_t r1);

/**
 * Call fn before every change to rows (pushes, imports, moves by
 * dml_table_remove_hashed() and dml_table_set_range(), which tell of all
 * rows); NULL stops. Rows a sparse table creates are told of too.
 */
void dml_table_watch_writes(struct dml_table *t, dml_table_write_fn fn, void *arg);

/**
 * Rows [r0, r1) by index: keys[] gets each one's key, rows the rows in the
 * export layout. DML_EINVAL (a range past the rows, NULL buffers).
 */
int dml_table_export_rows(const struct dml_table *t, uint64_t r0, uint64_t r1,
			  uint64_t *keys, float *rows);

/*
 * Changed rows: a table may track which rows pushes and imports changed,
 * so that a log can write each once per commit instead of every push.
 */

/** Rows handed out: dense keys begin..begin+n-1 (keys NULL), sparse keys[]. */
typedef int (*dml_table_rows_fn)(void *arg, const uint64_t *keys, uint64_t begin, size_t n,
				 const float *rows);

/** Track the rows that change from now on. 0, DML_EINVAL or DML_ENOMEM. */
int dml_table_track_changes(struct dml_table *t);

/** 1 when t tracks the rows that change. */
int dml_table_tracks_changes(const struct dml_table *t);

/**
 * Hand every row changed since the last call (or since tracking began) to
 * fn, in the export layout of dml_table_row_floats() floats a row, in row
 * order, at most 4096 rows a call (dense: one call per run of consecutive
 * keys), and forget them. A row that changes while a call runs is not
 * handed out. fn's non-zero return stops the walk and is returned (rows
 * not handed out yet are forgotten too: the caller then stops). DML_EINVAL
 * (not tracked) or DML_ENOMEM.
 */
int dml_table_changes(struct dml_table *t, dml_table_rows_fn fn, void *arg);

#endif
