/*
 * Pushes and pulls of parameter tables (see table.h, table.c): dense ranges,
 * the pins that let a reply be sent from a dense table's values, and key
 * batches, the hot path: a software pipeline hashes each key and prefetches
 * its slot, probes a few keys later (creating missing rows) and prefetches
 * the row, and applies the gradient a few keys later still, so the cache
 * misses of many keys are in flight at once.
 *
 * This file must never do I/O, log, or abort on a request; a push that
 * fails changes nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "store/optim.h"
#include "store/table.h"
#include "store/table_internal.h"
#include "proto/util.h"

#define TABLE_GROUP 8u             /* keys per pipeline stage */
#define TABLE_RANGE_BATCH 256u     /* rows per call on per-row optimizers */
#define TABLE_PREFETCH_LINES 8u    /* per row; wider rows stream anyway */

int dml_table_range_check(const struct dml_table *t, uint64_t begin, uint64_t end,
			  const void *buf)
{
	if (!t || t->conf.kind != DML_TABLE_DENSE || begin > end ||
	    (begin < end && !buf))
		return DML_EINVAL;
	if (begin < t->conf.key_begin || end > t->conf.key_end)
		return DML_ERANGE;
	return 0;
}

/*
 * Before a dense table's values change: if a reply still being sent is
 * pinned to them, move the table to a copy and leave the old memory to the
 * pins, so every reply stays the snapshot it was when it was made.
 */
int dml_table_dense_writable(struct dml_table *t)
{
	struct dml_table_pin *old = t->pin, *fresh;
	uint64_t floats = t->nrows * t->width;

	if (!old || old->pins == 0 || floats == 0)
		return 0;
	fresh = calloc(1, sizeof(*fresh));
	if (fresh)
		fresh->data = dml_table_aligned_array(floats, sizeof(float));
	if (!fresh || !fresh->data) {
		free(fresh);
		return DML_ENOMEM;
	}
	memcpy(fresh->data, t->values, floats * sizeof(float));
	old->retired = 1;
	t->pin = fresh;
	t->values = fresh->data;
	return 0;
}

int dml_table_pin_range(struct dml_table *t, uint64_t begin, uint64_t end,
			const float **values, struct dml_table_pin **pin)
{
	int rc = dml_table_range_check(t, begin, end, values);

	if (rc)
		return rc;
	if (!pin)
		return DML_EINVAL;
	*values = row_values(t, begin - t->conf.key_begin);
	t->pin->pins++;
	*pin = t->pin;
	return 0;
}

void dml_table_unpin(struct dml_table_pin *pin)
{
	if (pin && --pin->pins == 0 && pin->retired) {
		free(pin->data);
		free(pin);
	}
}

uint64_t dml_table_value_bytes(const struct dml_table *t)
{
	return t->nrows * t->width * sizeof(float);
}

int dml_table_push_range(struct dml_table *t, uint64_t begin, uint64_t end,
			 const float *grad)
{
	return dml_table_push_range_weighted(t, begin, end, grad, 1.0f);
}

int dml_table_push_range_weighted(struct dml_table *t, uint64_t begin, uint64_t end,
				  const float *grad, float weight)
{
	const struct dml_optim_conf *oc;
	uint64_t r, last;
	int rc = dml_table_range_check(t, begin, end, grad);

	if (rc == 0 && !dml_push_weight_ok(weight))
		rc = DML_EINVAL;
	if (rc || begin == end)
		return rc;
	if ((rc = dml_table_dense_writable(t)) != 0)
		return rc;
	oc = &t->conf.optim;
	r = begin - t->conf.key_begin;
	last = end - t->conf.key_begin;
	will_write(t, r, last);
	dml_table_mark_rows(t, r, last);
	if (!t->uses_step && t->state_width <= t->width) {
		/* One pass over the whole slice: with at most one state float per
		 * value, the slice's state is one block lined up with its values. */
		dml_optim_apply_weighted(oc, row_values(t, r), row_state(t, r), NULL, grad,
					 (last - r) * t->width, weight);
		return 0;
	}
	/* Row by row, each with its own step counter; batches of row indices
	 * let the optimizer reuse the constants of rows on the same step. */
	while (r < last) {
		uint64_t rows[TABLE_RANGE_BATCH];
		size_t n = 0;

		while (n < TABLE_RANGE_BATCH && r < last)
			rows[n++] = r++;
		dml_optim_apply_rows(oc, t->values, t->state, t->steps, t->width, rows, n,
				     grad, weight);
		grad += n * t->width;
	}
	return 0;
}

int dml_table_pull_range(struct dml_table *t, uint64_t begin, uint64_t end, float *out)
{
	int rc = dml_table_range_check(t, begin, end, out);

	if (rc || begin == end)
		return rc;
	memcpy(out, row_values(t, begin - t->conf.key_begin),
	       (end - begin) * t->width * sizeof(float));
	return 0;
}

/* Prefetch for writing the cache lines of [p, p + bytes), up to a limit;
 * rows need not start on a line, so lines count from p rounded down. */
static inline void prefetch_lines(const void *p, size_t bytes)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)63;
	uintptr_t end = (uintptr_t)p + bytes;

	for (unsigned l = 0; a < end && l < TABLE_PREFETCH_LINES; l++, a += 64)
		__builtin_prefetch((const void *)a, 1, 3);
}

static inline void prefetch_row(const struct dml_table *t, uint64_t row)
{
	prefetch_lines(row_values(t, row), t->width * sizeof(float));
	if (t->state)
		prefetch_lines(row_state(t, row), t->state_width * sizeof(float));
	if (t->steps)
		__builtin_prefetch(row_step(t, row), 1, 3);
}

/* What sparse_find answers for a key without a row. */
#define NO_ROW UINT64_MAX

/* Row of key, or NO_ROW: a pull must not create rows (a peer could fill
 * the table with them). */
static inline uint64_t sparse_find(const struct dml_table *t, uint64_t key, uint64_t hash)
{
	const struct table_slot *slots = t->slots;
	uint64_t mask = t->slot_mask;

	for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
		if (slots[i].row1 == 0)
			return NO_ROW;
		if (slots[i].key == key)
			return slots[i].row1 - 1;
	}
}

/* Keys in group g of a batch of n. */
static inline size_t group_len(size_t n, size_t g)
{
	return n - g * TABLE_GROUP < TABLE_GROUP ? n - g * TABLE_GROUP : TABLE_GROUP;
}

/* Stage 1 of the pipeline: hash n keys and prefetch their slots. */
static inline void stage_hash(const struct dml_table *t, const uint64_t *keys,
			      size_t n, uint64_t *hashes)
{
	/* Locals: the stores to hashes[] could alias t's fields. */
	const struct table_slot *slots = t->slots;
	const uint64_t mask = t->slot_mask;

	for (size_t i = 0; i < n; i++) {
		uint64_t h = mix64(keys[i]);

		hashes[i] = h;
		__builtin_prefetch(&slots[h & mask], 1, 3);
	}
}

/* Stage 2: find the rows of n keys and prefetch them; sparse, a push
 * (create) makes missing rows, a pull finds NO_ROW for them. */
static inline void stage_rows(struct dml_table *t, const uint64_t *keys, size_t n,
			      const uint64_t *hashes, uint64_t *rows, int create)
{
	if (!t->slots) {
		const uint64_t begin = t->conf.key_begin;

		for (size_t i = 0; i < n; i++) {
			rows[i] = keys[i] - begin;
			prefetch_row(t, rows[i]);
		}
	} else if (create) {
		for (size_t i = 0; i < n; i++) {
			rows[i] = sparse_row(t, keys[i], hashes[i]);
			prefetch_row(t, rows[i]);
		}
	} else {
		for (size_t i = 0; i < n; i++) {
			uint64_t row = sparse_find(t, keys[i], hashes[i]);

			rows[i] = row;
			if (row != NO_ROW)
				prefetch_row(t, row);
		}
	}
}

/* Stage 3: apply n gradient rows, or copy n rows out (a missing one's
 * initial values). */
static inline void stage_use(struct dml_table *t, const uint64_t *keys, const uint64_t *rows,
			     size_t n, const float *grad, float weight, float *out)
{
	const int zeros = inits_zero(t);
	const size_t w = t->width;

	if (grad) {
		for (size_t i = 0; t->before_write && i < n; i++)
			will_write(t, rows[i], rows[i] + 1);
		dml_optim_apply_rows(&t->conf.optim, t->values, t->state, t->steps,
				     t->width, rows, n, grad, weight);
		for (size_t i = 0; t->dirty && i < n; i++)
			mark_row(t, rows[i]);
		return;
	}
	for (size_t i = 0; i < n; i++, out += w) {
		if (rows[i] != NO_ROW) {
			if (w == 1)   /* a call per key would cost more than the key */
				out[0] = row_values(t, rows[i])[0];
			else
				memcpy(out, row_values(t, rows[i]), w * sizeof(float));
		} else if (!zeros) {
			dml_table_init_row(t, keys[i], out);
		} else if (w > 1) {
			memset(out, 0, w * sizeof(float));
		}   /* else width 1: keys_batch zeroed it */
	}
}

/*
 * Shared by push and pull of keys: check (dense) or reserve (sparse) for the
 * whole batch first, so an error leaves the table as it was. Then a software
 * pipeline over groups of TABLE_GROUP keys: group g is hashed and its slots
 * prefetched while group g - 1 is probed and its rows prefetched and group
 * g - 2 is applied, so each access has had time to arrive when it is used.
 */
static int keys_batch(struct dml_table *t, const uint64_t *keys, size_t n,
		      const float *grad, float weight, float *out)
{
	uint64_t hashes[3][TABLE_GROUP], rows[3][TABLE_GROUP];
	const size_t w = t->width, groups = (n + TABLE_GROUP - 1) / TABLE_GROUP;
	int rc;

	if (t->conf.kind == DML_TABLE_DENSE) {
		for (size_t i = 0; i < n; i++)
			if (keys[i] < t->conf.key_begin || keys[i] >= t->conf.key_end)
				return DML_ERANGE;
	} else if (grad) {
		rc = dml_table_sparse_reserve(t, n);
		if (rc)
			return rc;
	} else if (n > TABLE_MAX_SLOTS) {
		return DML_ENOMEM;   /* no table holds that many: a bogus count */
	}
	/* Keys never pushed to a table of width 1 that starts at zero (the
	 * common case of a fresh sparse model) read zeros: one memset for the
	 * batch, not a call per key. Wider rows are zeroed one by one, so rows
	 * that exist are not written twice. */
	if (!grad && t->slots && w == 1 && inits_zero(t))
		memset(out, 0, n * sizeof(float));
	for (size_t g = 0; g < groups + 2; g++) {
		if (g < groups && t->slots)
			stage_hash(t, keys + g * TABLE_GROUP, group_len(n, g),
				   hashes[g % 3]);
		if (g >= 1 && g - 1 < groups)
			stage_rows(t, keys + (g - 1) * TABLE_GROUP, group_len(n, g - 1),
				   hashes[(g - 1) % 3], rows[(g - 1) % 3], grad != NULL);
		if (g >= 2) {
			size_t first = (g - 2) * TABLE_GROUP;

			stage_use(t, keys + first, rows[(g - 2) % 3], group_len(n, g - 2),
				  grad ? grad + first * w : NULL, weight,
				  grad ? NULL : out + first * w);
		}
	}
	return 0;
}

int dml_table_keys_check(const struct dml_table *t, const uint64_t *keys, size_t n,
			 const void *buf)
{
	if (!t || (n > 0 && (!keys || !buf)) || n > SIZE_MAX / t->width)
		return DML_EINVAL;
	return 0;
}

int dml_table_push_keys(struct dml_table *t, const uint64_t *keys, size_t n,
			const float *grad)
{
	return dml_table_push_keys_weighted(t, keys, n, grad, 1.0f);
}

int dml_table_push_keys_weighted(struct dml_table *t, const uint64_t *keys, size_t n,
				 const float *grad, float weight)
{
	int rc = dml_table_keys_check(t, keys, n, grad);

	if (rc == 0 && !dml_push_weight_ok(weight))
		rc = DML_EINVAL;
	if (rc || n == 0)
		return rc;
	if (t->conf.kind == DML_TABLE_DENSE && (rc = dml_table_dense_writable(t)) != 0)
		return rc;
	return keys_batch(t, keys, n, grad, weight, NULL);
}

int dml_table_pull_keys(struct dml_table *t, const uint64_t *keys, size_t n, float *out)
{
	int rc = dml_table_keys_check(t, keys, n, out);

	if (rc || n == 0)
		return rc;
	return keys_batch(t, keys, n, NULL, 1.0f, out);
}

int dml_table_foreach(const struct dml_table *t,
		      int (*fn)(uint64_t key, const float *values, void *arg), void *arg)
{
	if (!t || !fn)
		return DML_EINVAL;
	for (uint64_t r = 0; r < t->nrows; r++) {
		uint64_t key = t->keys ? t->keys[r] : t->conf.key_begin + r;
		int rc = fn(key, row_values(t, r), arg);

		if (rc)
			return rc;
	}
	return 0;
}
