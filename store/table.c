/*
 * Parameter tables (see table.h): their storage, made, grown and freed
 * here; pushes and pulls are in table_push.c, rows moving between tables
 * in table_move.c. Both kinds keep rows in the same row-major
 * storage: values (width floats per row), optimizer state (width * k floats
 * per row, see optim.h) and, for ADAM, a step counter per row. A dense table
 * holds exactly the rows of its key range, row = key - key_begin, so a range
 * is one contiguous slice. A sparse table appends rows in creation order and
 * finds them through an open-addressing hash (linear probing, power-of-two
 * capacity, load at most 0.7) whose slots hold the key and row + 1, 0 meaning
 * empty, so every uint64 key is usable.
 *
 * Key batches are the hot path: a software pipeline hashes each key and
 * prefetches its slot, probes a few keys later (creating missing rows) and
 * prefetches the row, and applies the gradient a few keys later still, so
 * the cache misses of many keys are in flight at once. Before a batch the
 * sparse table grows to hold every key of it as a new row, so nothing is
 * rehashed or moved mid-batch and a failed allocation leaves it untouched.
 *
 * This file must never do I/O, log, or abort on a request: the big buffers
 * come from plain allocation and failure is DML_ENOMEM.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "proto/dml_error.h"
#include "store/optim.h"
#include "store/table.h"
#include "store/table_internal.h"
#include "proto/util.h"

#define TABLE_MAX_WIDTH 65536u
#define TABLE_ALIGN 64u
#define TABLE_HUGE_PAGE ((size_t)2 << 20)
#define TABLE_HUGE_MIN ((size_t)4 << 20)
#define TABLE_MIN_ROWS 16u
#define TABLE_MIN_SLOTS 32u
#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ull
#define TABLE_CHANGES_ROWS 4096u   /* rows a dml_table_changes call hands out */

/*
 * count * size bytes, or NULL if that overflows or cannot be had. Big
 * arrays are aligned to and backed by huge pages where the kernel allows:
 * random key lookups into tens of MB otherwise miss the TLB on nearly every
 * access, and the page walk stalls even a prefetch.
 */
void *dml_table_aligned_array(uint64_t count, size_t size)
{
	size_t bytes, align = TABLE_ALIGN;
	void *p;

	if (count == 0 || count > SIZE_MAX / size)
		return NULL;
	bytes = (size_t)count * size;
	if (bytes >= TABLE_HUGE_MIN)
		align = TABLE_HUGE_PAGE;
	if (posix_memalign(&p, align, bytes) != 0)
		return NULL;
#ifdef MADV_HUGEPAGE
	if (align == TABLE_HUGE_PAGE)
		(void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
	return p;
}

/* Move bytes from old into fresh and free old; returns fresh. */
static void *array_move(void *old, void *fresh, size_t bytes)
{
	if (old)
		memcpy(fresh, old, bytes);
	free(old);
	return fresh;
}

void dml_table_mark_rows(struct dml_table *t, uint64_t r0, uint64_t r1)
{
	for (; t->dirty && r0 < r1 && (r0 & 63); r0++)
		mark_row(t, r0);
	for (; t->dirty && r0 + 64 <= r1; r0 += 64)
		t->dirty[r0 >> 6] = ~0ull;
	for (; t->dirty && r0 < r1; r0++)
		mark_row(t, r0);
}

/* A zeroed bitmap of rows bits (at least one word), or NULL. */
uint64_t *dml_table_bitmap_new(uint64_t rows)
{
	return calloc(rows / 64 + 1, sizeof(uint64_t));
}

/*
 * Initial values of a row: a splitmix64 stream seeded from (seed, key), one
 * output per index, so a value depends on (seed, key, index) only.
 */
void dml_table_init_row(const struct dml_table *t, uint64_t key, float *v)
{
	const float s = t->conf.init_scale;
	uint64_t base = mix64(mix64(key) ^ t->conf.seed);

	if (inits_zero(t)) {
		memset(v, 0, t->width * sizeof(*v));
		return;
	}
	for (size_t j = 0; j < t->width; j++) {
		uint64_t r = mix64(base + (j + 1) * GOLDEN_GAMMA);

		if (t->conf.init == DML_INIT_UNIFORM) {
			/* 24 random bits: 2u - 1 is exact in float, in [-1, 1) */
			float u = (float)(r >> 40) * 0x1p-24f;

			v[j] = s * (2.0f * u - 1.0f);
		} else {
			/* Box-Muller on the two halves; u1 in (0, 1] keeps log finite */
			double u1 = ((double)(r >> 32) + 1.0) * 0x1p-32;
			double u2 = (double)(r & 0xffffffffu) * 0x1p-32;
			double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);

			v[j] = (float)(s * z);
		}
	}
}

/* A fresh row: initial values, zero optimizer state, step 0. */
void dml_table_row_reset(const struct dml_table *t, uint64_t row, uint64_t key)
{
	float *st = row_state(t, row);
	uint32_t *step = row_step(t, row);

	dml_table_init_row(t, key, row_values(t, row));
	if (st)
		memset(st, 0, t->state_width * sizeof(*st));
	if (step)
		*step = 0;
}

static int conf_validate(const struct dml_table_conf *c)
{
	if (c->width < 1 || c->width > TABLE_MAX_WIDTH)
		return DML_EINVAL;
	if (c->kind != DML_TABLE_DENSE && c->kind != DML_TABLE_SPARSE)
		return DML_EINVAL;
	if (c->kind == DML_TABLE_DENSE && c->key_end <= c->key_begin)
		return DML_EINVAL;
	if (c->init != DML_INIT_ZEROS && c->init != DML_INIT_UNIFORM &&
	    c->init != DML_INIT_NORMAL)
		return DML_EINVAL;
	if (!(c->init_scale >= 0.0f && isfinite(c->init_scale)))
		return DML_EINVAL;
	return dml_optim_validate(&c->optim);
}

static int dense_alloc(struct dml_table *t)
{
	uint64_t n = t->conf.key_end - t->conf.key_begin;

	/* Sizes are checked as products of uint64 before any allocation. */
	if (n > SIZE_MAX / t->width / sizeof(float))
		return DML_ENOMEM;
	t->nrows = t->row_cap = n;
	t->values = dml_table_aligned_array(n * t->width, sizeof(float));
	t->pin = calloc(1, sizeof(*t->pin));
	if (!t->values || !t->pin)
		return DML_ENOMEM;
	t->pin->data = t->values;
	if (t->state_width) {
		if (n > SIZE_MAX / t->state_width / sizeof(float))
			return DML_ENOMEM;
		t->state = dml_table_aligned_array(n * t->state_width, sizeof(float));
		if (!t->state)
			return DML_ENOMEM;
		memset(t->state, 0, n * t->state_width * sizeof(float));
	}
	if (t->uses_step) {
		t->steps = dml_table_aligned_array(n, sizeof(uint32_t));
		if (!t->steps)
			return DML_ENOMEM;
		memset(t->steps, 0, n * sizeof(uint32_t));
	}
	if (inits_zero(t))
		memset(t->values, 0, n * t->width * sizeof(float));
	else
		for (uint64_t r = 0; r < n; r++)
			dml_table_init_row(t, t->conf.key_begin + r, row_values(t, r));
	return 0;
}

/* Make room for cap rows; on failure nothing changes. */
static int sparse_grow_rows(struct dml_table *t, uint64_t cap)
{
	const uint64_t old = t->row_cap;
	float *values, *state = NULL;
	uint64_t *keys;
	uint32_t *steps = NULL;

	/* cap * (width + state_width) floats fit, so no product below wraps;
	 * dml_table_aligned_array checks each byte count */
	if (cap > SIZE_MAX / sizeof(float) / (t->width + t->state_width))
		return DML_ENOMEM;
	if (t->dirty) {
		uint64_t *dirty = dml_table_bitmap_new(cap);

		if (!dirty)
			return DML_ENOMEM;
		memcpy(dirty, t->dirty, (old / 64 + 1) * sizeof(uint64_t));
		free(t->dirty);
		t->dirty = dirty;
	}
	values = dml_table_aligned_array(cap * t->width, sizeof(float));
	keys = dml_table_aligned_array(cap, sizeof(uint64_t));
	if (t->state_width)
		state = dml_table_aligned_array(cap * t->state_width, sizeof(float));
	if (t->uses_step)
		steps = dml_table_aligned_array(cap, sizeof(uint32_t));
	if (!values || !keys || (t->state_width && !state) || (t->uses_step && !steps)) {
		free(values);
		free(keys);
		free(state);
		free(steps);
		return DML_ENOMEM;
	}
	t->values = array_move(t->values, values, old * t->width * sizeof(float));
	t->keys = array_move(t->keys, keys, old * sizeof(uint64_t));
	if (state)
		t->state = array_move(t->state, state,
				      old * t->state_width * sizeof(float));
	if (steps)
		t->steps = array_move(t->steps, steps, old * sizeof(uint32_t));
	t->row_cap = cap;
	return 0;
}

static uint64_t load_limit(uint64_t slots)
{
	return slots / 10 * 7 + slots % 10 * 7 / 10;
}

/* An empty hash of nslots slots, or NULL. */
struct table_slot *dml_table_slots_alloc(uint64_t nslots)
{
	struct table_slot *slots;

	if (nslots > SIZE_MAX / sizeof(*slots))
		return NULL;
	slots = dml_table_aligned_array(nslots, sizeof(*slots));
	if (slots)
		memset(slots, 0, (size_t)nslots * sizeof(*slots));
	return slots;
}

/* Make the empty hash slots (of nslots) the table's and insert every row. */
void dml_table_sparse_fill_slots(struct dml_table *t, struct table_slot *slots,
				 uint64_t nslots)
{
	uint64_t mask = nslots - 1;

	for (uint64_t r = 0; r < t->nrows; r++) {
		uint64_t i = mix64(t->keys[r]) & mask;

		while (slots[i].row1)
			i = (i + 1) & mask;
		slots[i].key = t->keys[r];
		slots[i].row1 = r + 1;
	}
	free(t->slots);
	t->slots = slots;
	t->slot_mask = mask;
	t->grow_at = load_limit(nslots);
}

/* Replace the hash by one of nslots slots and re-insert every row. */
static int sparse_rehash(struct dml_table *t, uint64_t nslots)
{
	struct table_slot *slots = dml_table_slots_alloc(nslots);

	if (!slots)
		return DML_ENOMEM;
	dml_table_sparse_fill_slots(t, slots, nslots);
	return 0;
}

/* Room for n more rows in storage and hash, so a batch never grows. */
int dml_table_sparse_reserve(struct dml_table *t, uint64_t n)
{
	uint64_t need, nslots;
	int rc;

	if (n > UINT64_MAX - t->nrows)
		return DML_ENOMEM;
	need = t->nrows + n;
	if (need > t->row_cap) {
		/* doubling keeps appends amortised O(1) */
		uint64_t cap = t->row_cap <= UINT64_MAX / 2 ? t->row_cap * 2 : need;

		rc = sparse_grow_rows(t, cap > need ? cap : need);
		if (rc)
			return rc;
	}
	if (need <= t->grow_at && t->slots)
		return 0;
	nslots = t->slots ? t->slot_mask + 1 : TABLE_MIN_SLOTS;
	while (load_limit(nslots) < need) {
		if (nslots >= TABLE_MAX_SLOTS)
			return DML_ENOMEM;
		nslots *= 2;
	}
	return sparse_rehash(t, nslots);
}

static int sparse_alloc(struct dml_table *t)
{
	uint64_t hint = t->conf.capacity_hint;

	if (hint < TABLE_MIN_ROWS)
		hint = TABLE_MIN_ROWS;
	if (sparse_grow_rows(t, hint))
		return DML_ENOMEM;
	return dml_table_sparse_reserve(t, hint);
}

int dml_table_new(const struct dml_table_conf *conf, struct dml_table **out)
{
	struct dml_table *t;
	int rc;

	if (!conf || !out)
		return DML_EINVAL;
	rc = conf_validate(conf);
	if (rc)
		return rc;
	t = calloc(1, sizeof(*t));
	if (!t)
		return DML_ENOMEM;
	t->conf = *conf;
	t->width = conf->width;
	t->state_width = conf->width * dml_optim_state_floats(&conf->optim);
	t->uses_step = dml_optim_uses_step(&conf->optim);
	rc = conf->kind == DML_TABLE_DENSE ? dense_alloc(t) : sparse_alloc(t);
	if (rc) {
		dml_table_free(t);
		return rc;
	}
	*out = t;
	return 0;
}

void dml_table_free(struct dml_table *t)
{
	if (!t)
		return;
	if (t->pin && t->pin->pins > 0) {
		t->pin->retired = 1;     /* a reply still reads it */
	} else {
		free(t->values);
		free(t->pin);
	}
	free(t->state);
	free(t->steps);
	free(t->keys);
	free(t->slots);
	free(t->dirty);
	free(t);
}

const struct dml_table_conf *dml_table_conf(const struct dml_table *t)
{
	return &t->conf;
}

uint64_t dml_table_rows(const struct dml_table *t)
{
	return t->nrows;
}

uint64_t dml_table_bytes(const struct dml_table *t)
{
	uint64_t per_row = (t->width + t->state_width) * sizeof(float);

	if (t->steps)
		per_row += sizeof(uint32_t);
	if (t->keys)
		per_row += sizeof(uint64_t);
	return t->row_cap * per_row +
	       (t->slots ? (t->slot_mask + 1) * sizeof(struct table_slot) : 0);
}

/* DML_EINVAL for a sparse table or begin > end, DML_ERANGE outside. */

/* ---- rows by index ----------------------------------------------------------- */

void dml_table_watch_writes(struct dml_table *t, dml_table_write_fn fn, void *arg)
{
	t->before_write = fn;
	t->before_write_arg = arg;
}

int dml_table_export_rows(const struct dml_table *t, uint64_t r0, uint64_t r1,
			  uint64_t *keys, float *rows)
{
	const size_t rf = dml_table_row_floats(t);

	if (!t || r0 > r1 || r1 > t->nrows || (r0 < r1 && (!keys || !rows)))
		return DML_EINVAL;
	for (uint64_t r = r0; r < r1; r++, rows += rf) {
		*keys++ = t->conf.kind == DML_TABLE_DENSE ? t->conf.key_begin + r : t->keys[r];
		dml_table_row_get(t, r, rows);
	}
	return 0;
}

/* ---- changed rows ------------------------------------------------------------ */

int dml_table_track_changes(struct dml_table *t)
{
	if (!t)
		return DML_EINVAL;
	if (!t->dirty && (t->dirty = dml_table_bitmap_new(t->row_cap)) == NULL)
		return DML_ENOMEM;
	return 0;
}

int dml_table_tracks_changes(const struct dml_table *t)
{
	return t && t->dirty;
}

int dml_table_changes(struct dml_table *t, dml_table_rows_fn fn, void *arg)
{
	const size_t rf = dml_table_row_floats(t);
	const int dense = t->conf.kind == DML_TABLE_DENSE;
	float *rows;
	uint64_t *keys, begin = 0;
	size_t n = 0;
	int rc = 0;

	if (!t->dirty)
		return DML_EINVAL;
	rows = malloc(TABLE_CHANGES_ROWS * rf * sizeof(float));
	keys = malloc(TABLE_CHANGES_ROWS * sizeof(uint64_t));
	if (!rows || !keys) {
		free(rows);
		free(keys);
		return DML_ENOMEM;
	}
	for (uint64_t w = 0; w <= t->nrows / 64 && !rc; w++) {
		while (t->dirty[w] && !rc) {
			uint64_t row = w * 64 + (uint64_t)__builtin_ctzll(t->dirty[w]);

			t->dirty[w] &= t->dirty[w] - 1;
			if (row >= t->nrows)
				continue;
			/* Dense: one call per run of consecutive rows. */
			if (n && (n == TABLE_CHANGES_ROWS || (dense && row != begin + n))) {
				rc = fn(arg, dense ? NULL : keys, dense ? t->conf.key_begin + begin : 0,
					n, rows);
				n = 0;
			}
			if (!n)
				begin = row;
			dml_table_row_get(t, row, rows + n * rf);
			keys[n++] = dense ? t->conf.key_begin + row : t->keys[row];
		}
	}
	if (n && !rc)
		rc = fn(arg, dense ? NULL : keys, dense ? t->conf.key_begin + begin : 0, n, rows);
	free(rows);
	free(keys);
	return rc;
}
