/*
 * Parameter tables (see table.h). Both kinds keep rows in the same row-major
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

#include "dml_error.h"
#include "optim.h"
#include "table.h"
#include "util.h"

#define TABLE_MAX_WIDTH 65536u
#define TABLE_ALIGN 64u
#define TABLE_HUGE_PAGE ((size_t)2 << 20)
#define TABLE_HUGE_MIN ((size_t)4 << 20)
#define TABLE_GROUP 8u             /* keys per pipeline stage */
#define TABLE_RANGE_BATCH 256u     /* rows per call on per-row optimizers */
#define TABLE_PREFETCH_LINES 8u    /* per row; wider rows stream anyway */
#define TABLE_MIN_ROWS 16u
#define TABLE_MIN_SLOTS 32u
#define TABLE_MAX_SLOTS ((uint64_t)1 << 58)
#define GOLDEN_GAMMA 0x9e3779b97f4a7c15ull
#define TABLE_CHANGES_ROWS 4096u   /* rows a dml_table_changes call hands out */

const char *const dml_table_kind_names[] = { "dense", "sparse", NULL };
const char *const dml_init_kind_names[] = { "zeros", "uniform", "normal", NULL };
const char *const dml_optim_kind_names[] = { "sgd", "momentum", "adagrad", "adam",
					     "add", NULL };
const char *const dml_stale_scaling_names[] = { "off", "inverse", NULL };
const char *const dml_bsp_step_names[] = { "clock", "push", NULL };

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

/*
 * count * size bytes, or NULL if that overflows or cannot be had. Big
 * arrays are aligned to and backed by huge pages where the kernel allows:
 * random key lookups into tens of MB otherwise miss the TLB on nearly every
 * access, and the page walk stalls even a prefetch.
 */
static void *aligned_array(uint64_t count, size_t size)
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

/*
 * Initial values of a row: a splitmix64 stream seeded from (seed, key), one
 * output per index, so a value depends on (seed, key, index) only.
 */
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

static void mark_rows(struct dml_table *t, uint64_t r0, uint64_t r1)
{
	for (; t->dirty && r0 < r1 && (r0 & 63); r0++)
		mark_row(t, r0);
	for (; t->dirty && r0 + 64 <= r1; r0 += 64)
		t->dirty[r0 >> 6] = ~0ull;
	for (; t->dirty && r0 < r1; r0++)
		mark_row(t, r0);
}

/* A zeroed bitmap of rows bits (at least one word), or NULL. */
static uint64_t *bitmap_new(uint64_t rows)
{
	return calloc(rows / 64 + 1, sizeof(uint64_t));
}

static void init_row(const struct dml_table *t, uint64_t key, float *v)
{
	const float s = t->conf.init_scale;
	uint64_t base = mix64(mix64(key) ^ t->conf.seed);

	if (t->conf.init == DML_INIT_ZEROS || s == 0.0f) {
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
static void row_reset(const struct dml_table *t, uint64_t row, uint64_t key)
{
	float *st = row_state(t, row);
	uint32_t *step = row_step(t, row);

	init_row(t, key, row_values(t, row));
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
	t->values = aligned_array(n * t->width, sizeof(float));
	t->pin = calloc(1, sizeof(*t->pin));
	if (!t->values || !t->pin)
		return DML_ENOMEM;
	t->pin->data = t->values;
	if (t->state_width) {
		if (n > SIZE_MAX / t->state_width / sizeof(float))
			return DML_ENOMEM;
		t->state = aligned_array(n * t->state_width, sizeof(float));
		if (!t->state)
			return DML_ENOMEM;
		memset(t->state, 0, n * t->state_width * sizeof(float));
	}
	if (t->uses_step) {
		t->steps = aligned_array(n, sizeof(uint32_t));
		if (!t->steps)
			return DML_ENOMEM;
		memset(t->steps, 0, n * sizeof(uint32_t));
	}
	if (t->conf.init == DML_INIT_ZEROS)
		memset(t->values, 0, n * t->width * sizeof(float));
	else
		for (uint64_t r = 0; r < n; r++)
			init_row(t, t->conf.key_begin + r, row_values(t, r));
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
	 * aligned_array checks each byte count */
	if (cap > SIZE_MAX / sizeof(float) / (t->width + t->state_width))
		return DML_ENOMEM;
	if (t->dirty) {
		uint64_t *dirty = bitmap_new(cap);

		if (!dirty)
			return DML_ENOMEM;
		memcpy(dirty, t->dirty, (old / 64 + 1) * sizeof(uint64_t));
		free(t->dirty);
		t->dirty = dirty;
	}
	values = aligned_array(cap * t->width, sizeof(float));
	keys = aligned_array(cap, sizeof(uint64_t));
	if (t->state_width)
		state = aligned_array(cap * t->state_width, sizeof(float));
	if (t->uses_step)
		steps = aligned_array(cap, sizeof(uint32_t));
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
static struct table_slot *slots_alloc(uint64_t nslots)
{
	struct table_slot *slots;

	if (nslots > SIZE_MAX / sizeof(*slots))
		return NULL;
	slots = aligned_array(nslots, sizeof(*slots));
	if (slots)
		memset(slots, 0, (size_t)nslots * sizeof(*slots));
	return slots;
}

/* Make the empty hash slots (of nslots) the table's and insert every row. */
static void sparse_fill_slots(struct dml_table *t, struct table_slot *slots,
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
	struct table_slot *slots = slots_alloc(nslots);

	if (!slots)
		return DML_ENOMEM;
	sparse_fill_slots(t, slots, nslots);
	return 0;
}

/* Room for n more rows in storage and hash, so a batch never grows. */
static int sparse_reserve(struct dml_table *t, uint64_t n)
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
	return sparse_reserve(t, hint);
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
static int range_check(const struct dml_table *t, uint64_t begin, uint64_t end,
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
static int dense_writable(struct dml_table *t)
{
	struct dml_table_pin *old = t->pin, *fresh;
	uint64_t floats = t->nrows * t->width;

	if (!old || old->pins == 0 || floats == 0)
		return 0;
	fresh = calloc(1, sizeof(*fresh));
	if (fresh)
		fresh->data = aligned_array(floats, sizeof(float));
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
	int rc = range_check(t, begin, end, values);

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
	int rc = range_check(t, begin, end, grad);

	if (rc == 0 && !dml_push_weight_ok(weight))
		rc = DML_EINVAL;
	if (rc || begin == end)
		return rc;
	if ((rc = dense_writable(t)) != 0)
		return rc;
	oc = &t->conf.optim;
	r = begin - t->conf.key_begin;
	last = end - t->conf.key_begin;
	will_write(t, r, last);
	mark_rows(t, r, last);
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
	int rc = range_check(t, begin, end, out);

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
			row_reset(t, row, key);
			slots[i].key = key;
			slots[i].row1 = row + 1;
			return row;
		}
		if (slots[i].key == key)
			return slots[i].row1 - 1;
	}
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
	for (size_t i = 0; i < n; i++) {
		hashes[i] = mix64(keys[i]);
		__builtin_prefetch(&t->slots[hashes[i] & t->slot_mask], 1, 3);
	}
}

/* Stage 2: find the rows of n keys and prefetch them; sparse, a push
 * (create) makes missing rows, a pull finds NO_ROW for them. */
static inline void stage_rows(struct dml_table *t, const uint64_t *keys, size_t n,
			      const uint64_t *hashes, uint64_t *rows, int create)
{
	for (size_t i = 0; i < n; i++) {
		if (!t->slots)
			rows[i] = keys[i] - t->conf.key_begin;
		else if (create)
			rows[i] = sparse_row(t, keys[i], hashes[i]);
		else if ((rows[i] = sparse_find(t, keys[i], hashes[i])) == NO_ROW)
			continue;
		prefetch_row(t, rows[i]);
	}
}

/* Stage 3: apply n gradient rows, or copy n rows out (a missing one's
 * initial values). */
static inline void stage_use(struct dml_table *t, const uint64_t *keys, const uint64_t *rows,
			     size_t n, const float *grad, float weight, float *out)
{
	if (grad) {
		for (size_t i = 0; t->before_write && i < n; i++)
			will_write(t, rows[i], rows[i] + 1);
		dml_optim_apply_rows(&t->conf.optim, t->values, t->state, t->steps,
				     t->width, rows, n, grad, weight);
		for (size_t i = 0; t->dirty && i < n; i++)
			mark_row(t, rows[i]);
		return;
	}
	for (size_t i = 0; i < n; i++, out += t->width) {
		if (rows[i] == NO_ROW)
			init_row(t, keys[i], out);
		else
			memcpy(out, row_values(t, rows[i]), t->width * sizeof(float));
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
		rc = sparse_reserve(t, n);
		if (rc)
			return rc;
	} else if (n > TABLE_MAX_SLOTS) {
		return DML_ENOMEM;   /* no table holds that many: a bogus count */
	}
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

static int keys_check(const struct dml_table *t, const uint64_t *keys, size_t n,
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
	int rc = keys_check(t, keys, n, grad);

	if (rc == 0 && !dml_push_weight_ok(weight))
		rc = DML_EINVAL;
	if (rc || n == 0)
		return rc;
	if (t->conf.kind == DML_TABLE_DENSE && (rc = dense_writable(t)) != 0)
		return rc;
	return keys_batch(t, keys, n, grad, weight, NULL);
}

int dml_table_pull_keys(struct dml_table *t, const uint64_t *keys, size_t n, float *out)
{
	int rc = keys_check(t, keys, n, out);

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

/* ---- moving rows between tables ----------------------------------------- */

size_t dml_table_row_floats(const struct dml_table *t)
{
	return t ? t->width + t->state_width + (t->uses_step ? 1 : 0) : 0;
}

/* Row `row` in the export layout: values, state, then ADAM's step bits. */
static void row_get(const struct dml_table *t, uint64_t row, float *out)
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

/* The inverse of row_get. */
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
	int rc = range_check(t, begin, end, out);
	size_t rf;

	if (rc)
		return rc;
	rf = dml_table_row_floats(t);
	for (uint64_t k = begin; k < end; k++, out += rf)
		row_get(t, k - t->conf.key_begin, out);
	return 0;
}

int dml_table_import_range(struct dml_table *t, uint64_t begin, uint64_t end,
			   const float *rows)
{
	int rc = range_check(t, begin, end, rows);
	size_t rf;

	if (rc || begin == end)
		return rc;
	if ((rc = dense_writable(t)) != 0)
		return rc;
	rf = dml_table_row_floats(t);
	will_write(t, begin - t->conf.key_begin, end - t->conf.key_begin);
	for (uint64_t k = begin; k < end; k++, rows += rf)
		row_put(t, k - t->conf.key_begin, rows);
	mark_rows(t, begin - t->conf.key_begin, end - t->conf.key_begin);
	return 0;
}

int dml_table_import_keys(struct dml_table *t, const uint64_t *keys, size_t n,
			  const float *rows)
{
	int rc = keys_check(t, keys, n, rows);
	size_t rf;

	if (rc || n == 0)
		return rc;
	rf = dml_table_row_floats(t);
	if (t->conf.kind == DML_TABLE_DENSE) {
		for (size_t i = 0; i < n; i++)
			if (keys[i] < t->conf.key_begin || keys[i] >= t->conf.key_end)
				return DML_ERANGE;
		if ((rc = dense_writable(t)) != 0)
			return rc;
		for (size_t i = 0; i < n; i++) {
			uint64_t row = keys[i] - t->conf.key_begin;

			will_write(t, row, row + 1);
			row_put(t, row, rows + i * rf);
			mark_row(t, row);
		}
		return 0;
	}
	if ((rc = sparse_reserve(t, n)) != 0)
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
		row_get(t, sel[i].row, *rows + i * rf);
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
	if ((slots = slots_alloc(nslots)) == NULL)
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
	sparse_fill_slots(t, slots, nslots);
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
	if (t->dirty && pin && (dirty = bitmap_new(n)) == NULL) {
		free(pin);
		return DML_ENOMEM;
	}
	if (n) {
		values = aligned_array(n * t->width, sizeof(float));
		if (t->state_width)
			state = aligned_array(n * t->state_width, sizeof(float));
		if (t->uses_step)
			steps = aligned_array(n, sizeof(uint32_t));
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
		mark_rows(t, 0, n);
	}
	for (uint64_t r = 0; r < n; r++)
		if (begin + r < lo || begin + r >= hi)
			row_reset(t, r, begin + r);
	return 0;
}

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
		row_get(t, r, rows);
	}
	return 0;
}

/* ---- changed rows ------------------------------------------------------------ */

int dml_table_track_changes(struct dml_table *t)
{
	if (!t)
		return DML_EINVAL;
	if (!t->dirty && (t->dirty = bitmap_new(t->row_cap)) == NULL)
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
			row_get(t, row, rows + n * rf);
			keys[n++] = dense ? t->conf.key_begin + row : t->keys[row];
		}
	}
	if (n && !rc)
		rc = fn(arg, dense ? NULL : keys, dense ? t->conf.key_begin + begin : 0, n, rows);
	free(rows);
	free(keys);
	return rc;
}
