/*
 * Moving rows between parameter tables (see table.h): export and import of
 * dense ranges, of sparse keys and of the sparse rows whose key hash lies in
 * a range, and a dense table's change of range. Rows are copied verbatim in
 * the export layout, so a moved row continues exactly where it stopped.
 *
 * This file must never do I/O or log; an import or a move that fails
 * changes nothing.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "store/table.h"
#include "store/table_internal.h"

/* ---- moving rows between tables ----------------------------------------- */

size_t dml_table_row_floats(const struct dml_table *t)
{
	return t ? t->width + t->state_width + (t->uses_step ? 1 : 0) : 0;
}

/* Row `row` in the export layout: values, state, then ADAM's step bits. */
void dml_table_row_get(const struct dml_table *t, uint64_t row, float *out)
{
	memcpy(out, row_values(t, row), t->width * sizeof(float));
	out += t->width;
	if (t->state_width) {
		memcpy(out, row_state(t, row), t->state_width * sizeof(float));
		out += t->state_width;
	}
	if (t->steps)
		memcpy(out, row_step(t, row), sizeof(uint32_t));
}

/* The inverse of dml_table_row_get. */
static void row_put(struct dml_table *t, uint64_t row, const float *in)
{
	memcpy(row_values(t, row), in, t->width * sizeof(float));
	in += t->width;
	if (t->state_width) {
		memcpy(row_state(t, row), in, t->state_width * sizeof(float));
		in += t->state_width;
	}
	if (t->steps)
		memcpy(row_step(t, row), in, sizeof(uint32_t));
}

int dml_table_export_range(const struct dml_table *t, uint64_t begin, uint64_t end,
			   float *out)
{
	int rc = dml_table_range_check(t, begin, end, out);
	size_t rf;

	if (rc)
		return rc;
	rf = dml_table_row_floats(t);
	for (uint64_t k = begin; k < end; k++, out += rf)
		dml_table_row_get(t, k - t->conf.key_begin, out);
	return 0;
}

int dml_table_import_range(struct dml_table *t, uint64_t begin, uint64_t end,
			   const float *rows)
{
	int rc = dml_table_range_check(t, begin, end, rows);
	size_t rf;

	if (rc || begin == end)
		return rc;
	if ((rc = dml_table_dense_writable(t)) != 0)
		return rc;
	rf = dml_table_row_floats(t);
	will_write(t, begin - t->conf.key_begin, end - t->conf.key_begin);
	for (uint64_t k = begin; k < end; k++, rows += rf)
		row_put(t, k - t->conf.key_begin, rows);
	dml_table_mark_rows(t, begin - t->conf.key_begin, end - t->conf.key_begin);
	return 0;
}

int dml_table_import_keys(struct dml_table *t, const uint64_t *keys, size_t n,
			  const float *rows)
{
	int rc = dml_table_keys_check(t, keys, n, rows);
	size_t rf;

	if (rc || n == 0)
		return rc;
	rf = dml_table_row_floats(t);
	if (t->conf.kind == DML_TABLE_DENSE) {
		for (size_t i = 0; i < n; i++)
			if (keys[i] < t->conf.key_begin || keys[i] >= t->conf.key_end)
				return DML_ERANGE;
		if ((rc = dml_table_dense_writable(t)) != 0)
			return rc;
		for (size_t i = 0; i < n; i++) {
			uint64_t row = keys[i] - t->conf.key_begin;

			will_write(t, row, row + 1);
			row_put(t, row, rows + i * rf);
			mark_row(t, row);
		}
		return 0;
	}
	if ((rc = dml_table_sparse_reserve(t, n)) != 0)
		return rc;
	for (size_t i = 0; i < n; i++) {
		uint64_t row = sparse_row(t, keys[i], mix64(keys[i]));

		will_write(t, row, row + 1);
		row_put(t, row, rows + i * rf);
		mark_row(t, row);
	}
	return 0;
}

static int hashed_check(const struct dml_table *t, dml_table_hash_fn hash, uint64_t lo,
			uint64_t hi)
{
	if (!t || t->conf.kind != DML_TABLE_SPARSE || !hash || lo > hi)
		return DML_EINVAL;
	return 0;
}

static inline int hash_in(dml_table_hash_fn hash, uint64_t key, uint64_t lo, uint64_t hi)
{
	uint64_t h = hash(key);

	return h >= lo && h < hi;
}

struct hashed_row {
	uint64_t hash, key, row;
};

static int hashed_row_cmp(const void *a, const void *b)
{
	const struct hashed_row *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

int dml_table_export_hashed(const struct dml_table *t, dml_table_hash_fn hash, uint64_t lo,
			    uint64_t hi, uint64_t **keys, float **rows, size_t *n)
{
	struct hashed_row *sel;
	size_t count = 0, j = 0, rf;
	int rc = hashed_check(t, hash, lo, hi);

	if (rc || !keys || !rows || !n)
		return rc ? rc : DML_EINVAL;
	*keys = NULL;
	*rows = NULL;
	*n = 0;
	for (uint64_t r = 0; r < t->nrows; r++)
		count += (size_t)hash_in(hash, t->keys[r], lo, hi);
	if (count == 0)
		return 0;
	rf = dml_table_row_floats(t);
	if (count > SIZE_MAX / sizeof(*sel) || count > SIZE_MAX / sizeof(float) / rf)
		return DML_ENOMEM;
	sel = malloc(count * sizeof(*sel));
	*keys = malloc(count * sizeof(uint64_t));
	*rows = malloc(count * rf * sizeof(float));
	if (!sel || !*keys || !*rows) {
		free(sel);
		free(*keys);
		free(*rows);
		*keys = NULL;
		*rows = NULL;
		return DML_ENOMEM;
	}
	for (uint64_t r = 0; r < t->nrows; r++) {
		uint64_t h = hash(t->keys[r]);

		if (h >= lo && h < hi)
			sel[j++] = (struct hashed_row){ h, t->keys[r], r };
	}
	qsort(sel, count, sizeof(*sel), hashed_row_cmp);
	for (size_t i = 0; i < count; i++) {
		(*keys)[i] = sel[i].key;
		dml_table_row_get(t, sel[i].row, *rows + i * rf);
	}
	free(sel);
	*n = count;
	return 0;
}

/* Row `from` moves to row `to` (a lower index whose row is gone). */
static void row_move(struct dml_table *t, uint64_t to, uint64_t from)
{
	memcpy(row_values(t, to), row_values(t, from), t->width * sizeof(float));
	if (t->state)
		memcpy(row_state(t, to), row_state(t, from), t->state_width * sizeof(float));
	if (t->steps)
		t->steps[to] = t->steps[from];
	t->keys[to] = t->keys[from];
	if (t->dirty) {
		t->dirty[to >> 6] &= ~(1ull << (to & 63));
		if (t->dirty[from >> 6] & (1ull << (from & 63)))
			mark_row(t, to);
	}
}

int dml_table_remove_hashed(struct dml_table *t, dml_table_hash_fn hash, uint64_t lo,
			    uint64_t hi, size_t *removed)
{
	struct table_slot *slots;
	uint64_t nslots, kept = 0;
	int rc = hashed_check(t, hash, lo, hi);

	if (rc)
		return rc;
	if (removed)
		*removed = 0;
	for (uint64_t r = 0; r < t->nrows; r++)
		kept += (uint64_t)!hash_in(hash, t->keys[r], lo, hi);
	if (kept == t->nrows)
		return 0;
	/* The new hash first: past this point nothing can fail. */
	nslots = t->slot_mask + 1;
	if ((slots = dml_table_slots_alloc(nslots)) == NULL)
		return DML_ENOMEM;
	if (removed)
		*removed = (size_t)(t->nrows - kept);
	/* Rows move to other indices. */
	will_write(t, 0, t->nrows);
	kept = 0;
	for (uint64_t r = 0; r < t->nrows; r++) {
		if (hash_in(hash, t->keys[r], lo, hi))
			continue;
		if (kept != r)
			row_move(t, kept, r);
		kept++;
	}
	/* The rows past the kept ones left: so do their changes. */
	for (uint64_t r = kept; t->dirty && r < t->nrows; r++)
		t->dirty[r >> 6] &= ~(1ull << (r & 63));
	t->nrows = kept;
	dml_table_sparse_fill_slots(t, slots, nslots);
	return 0;
}

int dml_table_set_range(struct dml_table *t, uint64_t begin, uint64_t end)
{
	struct dml_table_pin *pin;
	uint64_t *dirty = NULL;
	float *values = NULL, *state = NULL;
	uint32_t *steps = NULL;
	uint64_t n, lo, hi;

	if (!t || t->conf.kind != DML_TABLE_DENSE || begin > end)
		return DML_EINVAL;
	n = end - begin;
	if (n > SIZE_MAX / sizeof(float) / (t->width + t->state_width))
		return DML_ENOMEM;
	pin = calloc(1, sizeof(*pin));
	/* Every row counts as changed: they sit at other indices now. */
	if (t->dirty && pin && (dirty = dml_table_bitmap_new(n)) == NULL) {
		free(pin);
		return DML_ENOMEM;
	}
	if (n) {
		values = dml_table_aligned_array(n * t->width, sizeof(float));
		if (t->state_width)
			state = dml_table_aligned_array(n * t->state_width, sizeof(float));
		if (t->uses_step)
			steps = dml_table_aligned_array(n, sizeof(uint32_t));
	}
	if (!pin ||
	    (n && (!values || (t->state_width && !state) || (t->uses_step && !steps)))) {
		free(pin);
		free(values);
		free(state);
		free(steps);
		free(dirty);
		return DML_ENOMEM;
	}
	will_write(t, 0, t->nrows);
	lo = begin > t->conf.key_begin ? begin : t->conf.key_begin;
	hi = end < t->conf.key_end ? end : t->conf.key_end;
	if (lo < hi) {
		uint64_t from = lo - t->conf.key_begin, to = lo - begin, k = hi - lo;

		memcpy(values + to * t->width, row_values(t, from), k * t->width * sizeof(float));
		if (state)
			memcpy(state + to * t->state_width, row_state(t, from),
			       k * t->state_width * sizeof(float));
		if (steps)
			memcpy(steps + to, row_step(t, from), k * sizeof(uint32_t));
	}
	/* The old values stay with a reply still being sent from them. */
	if (t->pin->pins > 0) {
		t->pin->retired = 1;
	} else {
		free(t->values);
		free(t->pin);
	}
	free(t->state);
	free(t->steps);
	pin->data = values;
	t->pin = pin;
	t->values = values;
	t->state = state;
	t->steps = steps;
	t->nrows = t->row_cap = n;
	t->conf.key_begin = begin;
	t->conf.key_end = end;
	if (dirty) {
		free(t->dirty);
		t->dirty = dirty;
		dml_table_mark_rows(t, 0, n);
	}
	for (uint64_t r = 0; r < n; r++)
		if (begin + r < lo || begin + r >= hi)
			dml_table_row_reset(t, r, begin + r);
	return 0;
}
