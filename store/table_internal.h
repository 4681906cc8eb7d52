/*
 * What the files of the parameter tables share (table.c: storage;
 * table_push.c: pushes and pulls; table_move.c: rows moving between
 * tables): the table's layout and the helpers they call in each other.
 * Only those files include it.
 */
#ifndef DML_TABLE_INTERNAL_H
#define DML_TABLE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "store/table.h"

#define TABLE_MAX_SLOTS ((uint64_t)1 << 58)

struct table_slot {
	uint64_t key;
	uint64_t row1;  /* row index + 1; 0 marks an empty slot */
};

/* Dense values, with the pins of replies still being sent from them. */
struct dml_table_pin {
	uint64_t pins;
	int retired;             /* the table moved on: free at the last unpin */
	float *data;
};

struct dml_table {
	struct dml_table_conf conf;
	size_t width;            /* floats per row */
	size_t state_width;      /* optimizer state floats per row */
	int uses_step;

	uint64_t nrows;
	uint64_t row_cap;        /* rows the arrays below can hold */
	float *values;           /* row_cap * width */
	float *state;            /* row_cap * state_width, NULL if none */
	uint32_t *steps;         /* row_cap, ADAM only */
	struct dml_table_pin *pin; /* dense: owner of values */

	/* Rows changed since dml_table_changes took them: a bit per row (row_cap
	 * bits), or NULL when changes are not tracked. */
	uint64_t *dirty;
	/* Told before rows change (a copy-on-write snapshot), or NULL. */
	dml_table_write_fn before_write;
	void *before_write_arg;

	/* Sparse only. */
	uint64_t *keys;          /* key of each row, in creation order */
	struct table_slot *slots;
	uint64_t slot_mask;      /* slot count - 1 */
	uint64_t grow_at;        /* more rows than this and the hash doubles */
};

/* splitmix64's finalizer: a bijection whose every output bit depends on
 * every input bit, so low bits index the hash well whatever the keys. */
static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Does every fresh row start at zero (zeros init, or a scale of 0)? */
static inline int inits_zero(const struct dml_table *t)
{
	return t->conf.init == DML_INIT_ZEROS || t->conf.init_scale == 0.0f;
}

static inline float *row_values(const struct dml_table *t, uint64_t row)
{
	return t->values + row * t->width;
}

static inline float *row_state(const struct dml_table *t, uint64_t row)
{
	return t->state ? t->state + row * t->state_width : NULL;
}

static inline uint32_t *row_step(const struct dml_table *t, uint64_t row)
{
	return t->steps ? t->steps + row : NULL;
}

static inline void mark_row(struct dml_table *t, uint64_t row)
{
	if (t->dirty)
		t->dirty[row >> 6] |= 1ull << (row & 63);
}

/* Rows [r0, r1) are about to change. */
static inline void will_write(struct dml_table *t, uint64_t r0, uint64_t r1)
{
	if (t->before_write && r0 < r1)
		t->before_write(t->before_write_arg, r0, r1);
}

/* ---- table.c ---- */

/** count * size bytes, aligned (huge pages for big arrays), or NULL. */
void *dml_table_aligned_array(uint64_t count, size_t size);

/** Mark rows [r0, r1) changed (when changes are tracked). */
void dml_table_mark_rows(struct dml_table *t, uint64_t r0, uint64_t r1);

/** A zeroed bitmap of rows bits (at least one word), or NULL. */
uint64_t *dml_table_bitmap_new(uint64_t rows);

/** The initial values of key's row into v (width floats). */
void dml_table_init_row(const struct dml_table *t, uint64_t key, float *v);

/** A fresh row: initial values, zero optimizer state, step 0. */
void dml_table_row_reset(const struct dml_table *t, uint64_t row, uint64_t key);

/** An empty hash of nslots slots, or NULL. */
struct table_slot *dml_table_slots_alloc(uint64_t nslots);

/** Make the empty hash slots (of nslots) the table's and insert every row. */
void dml_table_sparse_fill_slots(struct dml_table *t, struct table_slot *slots,
				 uint64_t nslots);

/** Room for n more rows in storage and hash, so a batch never grows. 0 or
 * DML_ENOMEM. */
int dml_table_sparse_reserve(struct dml_table *t, uint64_t n);

/* ---- table_push.c ---- */

/** DML_EINVAL for a sparse table or begin > end, DML_ERANGE outside. */
int dml_table_range_check(const struct dml_table *t, uint64_t begin, uint64_t end,
			  const void *buf);

/** Before a dense table's values change: move them to a copy if a reply is
 * pinned to them. 0 or DML_ENOMEM. */
int dml_table_dense_writable(struct dml_table *t);

/** DML_EINVAL for a key batch the table cannot take (NULL buffers, too
 * many keys). */
int dml_table_keys_check(const struct dml_table *t, const uint64_t *keys, size_t n,
			 const void *buf);

/* Row of key, creating it if it is missing; room was reserved. */
static inline uint64_t sparse_row(struct dml_table *t, uint64_t key, uint64_t hash)
{
	struct table_slot *slots = t->slots;
	uint64_t mask = t->slot_mask;
	uint64_t row;

	for (uint64_t i = hash & mask;; i = (i + 1) & mask) {
		if (slots[i].row1 == 0) {
			row = t->nrows++;
			t->keys[row] = key;
			dml_table_row_reset(t, row, key);
			slots[i].key = key;
			slots[i].row1 = row + 1;
			return row;
		}
		if (slots[i].key == key)
			return slots[i].row1 - 1;
	}
}

/* ---- table_move.c ---- */

/** Row `row` in the export layout: values, state, then ADAM's step bits. */
void dml_table_row_get(const struct dml_table *t, uint64_t row, float *out);

#endif
