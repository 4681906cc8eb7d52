/*
 * What a parameter table is, as every folder names it: its kinds,
 * initializers and optimizers with the names job files and tools use, the
 * settings a table is made from (struct dml_table_conf, for the tables of
 * store/table.h), the check of an optimizer's settings, and a job's
 * TableSpec (dml.proto, from a job file or the wire) as the table storage
 * wants it: one conversion for every holder of a job's tables, the
 * server's job code and the worker's in-process store alike.
 *
 * Must never: accept names or values the storage would refuse later; the
 * key range is left for the caller to set.
 */
#ifndef DML_PROTO_TABLE_SPEC_H
#define DML_PROTO_TABLE_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"
#include "proto/dml.pb-c.h"

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
	/* Inverse-time decay (0: none): a row's t-th update uses
	 * lr / (1 + lr_decay * (t - 1)), t counted per row like ADAM's step. */
	float lr_decay;
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

/** Parse names ("dense", "zeros", "sgd", ...) used by config and tools. */
extern const char *const dml_table_kind_names[];  /* NULL-terminated */
extern const char *const dml_init_kind_names[];
extern const char *const dml_optim_kind_names[];
/* How a stale push is applied (JobSpec.stale_scaling): off, or inverse
 * (DynSGD-style: tau clocks behind the newest worker, times 1 / (1 + tau)). */
extern const char *const dml_stale_scaling_names[];
enum dml_stale_scaling { DML_STALE_OFF, DML_STALE_INVERSE };

/* How a BSP clock's pushes are applied (JobSpec.bsp_step): summed into one
 * optimizer step when the clock ends, or each as a step of its own. */
extern const char *const dml_bsp_step_names[];
enum dml_bsp_step { DML_BSP_STEP_CLOCK, DML_BSP_STEP_PUSH };

/**
 * Check an optimizer conf. Only the fields a kind uses are checked:
 * lr > 0 and finite (every kind but ADD), 0 <= weight_decay < inf (every kind
 * but ADD), momentum in [0, 1) (MOMENTUM), eps > 0 and finite (ADAGRAD, ADAM),
 * beta1 and beta2 in [0, 1) (ADAM). 0 or DML_EINVAL (also for an unknown kind
 * or a NULL conf).
 */
int dml_optim_validate(const struct dml_optim_conf *c);

/**
 * Fill t from ts, key range [0, 0). Returns 0, or DML_EINVAL with err
 * naming the table and the problem (unknown initializer or optimizer,
 * width 0, keys on a sparse table or none on a dense one, settings the
 * optimizer refuses).
 */
int dml_table_conf_from_spec(const Dml__TableSpec *ts, struct dml_table_conf *t, char *err,
			     size_t errlen);

/*
 * How a table's pushes and pull replies travel over one link: the
 * TableSpec's codec keys for a link within a zone or between zones. An
 * empty key takes the default: none within a zone; fp16 both ways across
 * zones (half the bytes, values kept to about 3 significant digits, the
 * pushes' rounding carried to the next push by error feedback).
 */
struct dml_link_codecs {
	struct dml_codec push;
	struct dml_codec pull;      /* never topk: a reply carries every value */
};

/**
 * The codecs of ts over a link between zones (cross_zone) or within one.
 * 0, or DML_EINVAL with err naming the table, the key and the problem.
 */
int dml_table_spec_codecs(const Dml__TableSpec *ts, int cross_zone,
			  struct dml_link_codecs *out, char *err, size_t errlen);

#endif
