/*
 * Parameter tables held by a server: dense (keys key_begin..key_end-1 in one
 * contiguous array) or sparse (uint64 keys in an open-addressing hash, rows
 * created on first touch), each with an initializer and a server-side
 * optimizer that turns pushed gradients into updates.
 *
 * Pure in-memory data structure: no I/O, single-threaded (the server's event
 * loop owns it). Row initial values depend only on (seed, key), so a row
 * created on first touch gets the same values whatever the order of requests.
 */
#ifndef DML_TABLE_H
#define DML_TABLE_H

#include <stddef.h>
#include <stdint.h>

enum dml_table_kind { DML_TABLE_DENSE = 0, DML_TABLE_SPARSE = 1 };
enum dml_init_kind { DML_INIT_ZEROS = 0, DML_INIT_UNIFORM = 1, DML_INIT_NORMAL = 2 };
enum dml_optim_kind {
	DML_OPT_SGD = 0,      /* w -= lr * (g + wd * w) */
	DML_OPT_MOMENTUM = 1, /* v = m * v + g + wd * w; w -= lr * v */
	DML_OPT_ADAGRAD = 2,  /* h += g^2; w -= lr * g / (sqrt(h) + eps) */
	DML_OPT_ADAM = 3,     /* per-key step count for bias correction */
	DML_OPT_ADD = 4       /* w += g: accumulate (exactness tests, counters) */
};

struct dml_optim_conf {
	enum dml_optim_kind kind;
	float lr;
	float weight_decay;
	float momentum;
	float beta1, beta2, eps;
};

struct dml_table_conf {
	uint32_t id;
	uint32_t width;             /* floats per key, >= 1 */
	enum dml_table_kind kind;
	uint64_t key_begin;         /* dense: first key this table holds */
	uint64_t key_end;           /* dense: one past the last key */
	uint64_t capacity_hint;     /* sparse: expected rows (0 = small) */
	enum dml_init_kind init;
	float init_scale;           /* uniform: [-s, s]; normal: stddev s */
	uint64_t seed;
	struct dml_optim_conf optim;
};

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
/** Copy the rows of n keys into out (n * width floats); creates missing rows. */
int dml_table_pull_keys(struct dml_table *t, const uint64_t *keys, size_t n, float *out);

/**
 * Visit every row (for checkpoints and tests): fn(key, values, arg); a
 * non-zero return stops the walk and is returned.
 */
int dml_table_foreach(const struct dml_table *t,
		      int (*fn)(uint64_t key, const float *values, void *arg), void *arg);

/** Parse names ("dense", "zeros", "sgd", ...) used by config and tools. */
extern const char *const dml_table_kind_names[];  /* NULL-terminated */
extern const char *const dml_init_kind_names[];
extern const char *const dml_optim_kind_names[];

#endif
