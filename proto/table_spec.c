/*
 * Table specs (table_spec.h): the names of table kinds, initializers and
 * optimizers, the check of an optimizer's settings, and TableSpec to table
 * storage settings. Empty names mean the job file's defaults (zeros, sgd),
 * as a spec built by hand may leave them.
 *
 * Must never: index the name tables with a name they lack.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/table_spec.h"

const char *const dml_table_kind_names[] = { "dense", "sparse", NULL };
const char *const dml_init_kind_names[] = { "zeros", "uniform", "normal", NULL };
const char *const dml_optim_kind_names[] = { "sgd", "momentum", "adagrad", "adam",
					     "add", NULL };
const char *const dml_stale_scaling_names[] = { "off", "inverse", NULL };
const char *const dml_bsp_step_names[] = { "clock", "push", NULL };

static int in_unit_interval(float x)
{
	return x >= 0.0f && x < 1.0f; /* false for NaN */
}

static int positive_finite(float x)
{
	return x > 0.0f && isfinite(x);
}

int dml_optim_validate(const struct dml_optim_conf *c)
{
	if (!c)
		return DML_EINVAL;
	switch (c->kind) {
	case DML_OPT_ADD:
		return 0;
	case DML_OPT_SGD:
	case DML_OPT_MOMENTUM:
	case DML_OPT_ADAGRAD:
	case DML_OPT_ADAM:
		break;
	default:
		return DML_EINVAL;
	}
	if (!positive_finite(c->lr))
		return DML_EINVAL;
	if (!(c->weight_decay >= 0.0f && isfinite(c->weight_decay)))
		return DML_EINVAL;
	if (c->kind == DML_OPT_MOMENTUM && !in_unit_interval(c->momentum))
		return DML_EINVAL;
	if ((c->kind == DML_OPT_ADAGRAD || c->kind == DML_OPT_ADAM) &&
	    !positive_finite(c->eps))
		return DML_EINVAL;
	if (c->kind == DML_OPT_ADAM &&
	    !(in_unit_interval(c->beta1) && in_unit_interval(c->beta2)))
		return DML_EINVAL;
	if (!(c->lr_decay >= 0.0f && isfinite(c->lr_decay)))
		return DML_EINVAL;
	return 0;
}

static int name_index(const char *const *names, const char *name, const char *dflt)
{
	if (!name || !*name)
		name = dflt;
	for (int i = 0; names[i]; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

int dml_table_conf_from_spec(const Dml__TableSpec *ts, struct dml_table_conf *t, char *err,
			   size_t errlen)
{
	int init = name_index(dml_init_kind_names, ts->init, "zeros");
	int opt = name_index(dml_optim_kind_names, ts->optimizer, "sgd");

	memset(t, 0, sizeof(*t));
	if (init < 0 || opt < 0) {
		snprintf(err, errlen, "table %u: unknown %s '%s'", ts->id,
			 init < 0 ? "init" : "optimizer", init < 0 ? ts->init : ts->optimizer);
		return DML_EINVAL;
	}
	if (ts->width < 1) {
		snprintf(err, errlen, "table %u: width 0", ts->id);
		return DML_EINVAL;
	}
	if (ts->dense ? ts->keys == 0 : ts->keys != 0) {
		snprintf(err, errlen, "table %u: %s", ts->id, ts->dense ? "dense without keys"
			 : "keys given for a sparse table");
		return DML_EINVAL;
	}
	t->id = ts->id;
	t->width = ts->width;
	t->kind = ts->dense ? DML_TABLE_DENSE : DML_TABLE_SPARSE;
	t->init = (enum dml_init_kind)init;
	t->init_scale = (float)ts->init_scale;
	t->seed = ts->seed;
	t->optim.kind = (enum dml_optim_kind)opt;
	t->optim.lr = (float)ts->lr;
	t->optim.weight_decay = (float)ts->weight_decay;
	t->optim.momentum = (float)ts->momentum;
	t->optim.beta1 = (float)ts->beta1;
	t->optim.beta2 = (float)ts->beta2;
	t->optim.eps = (float)ts->epsilon;
	t->optim.lr_decay = (float)ts->lr_decay;
	if (!(t->init_scale >= 0.0f && t->init_scale < 1e30f) ||
	    dml_optim_validate(&t->optim) != 0) {
		snprintf(err, errlen, "table %u: initializer or optimizer settings out of range",
			 ts->id);
		return DML_EINVAL;
	}
	return 0;
}


/* Which values a codec key sets: pushes, or pull replies of one link class. */
enum codec_use { CODEC_PUSH, CODEC_PULL, CODEC_PULL_CROSS };

/*
 * One codec key: empty takes dflt. A pull reply carries every value, so a
 * pull codec may not be topk (or topk16), but across zones: there topk:F asks a zone
 * aggregator's delta pulls (dml.proto, Meta.delta_codec).
 */
static int spec_codec(const Dml__TableSpec *ts, const char *key, const char *value,
		      const char *dflt, enum codec_use use, struct dml_codec *out, char *err,
		      size_t errlen)
{
	char why[128];

	if (!value || !*value)
		value = dflt;
	if (dml_codec_parse(value, out, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "table %u: %s: %s", ts->id, key, why);
		return DML_EINVAL;
	}
	if (use == CODEC_PULL && dml_codec_sparse(out->kind)) {
		snprintf(err, errlen, "table %u: %s: %s drops values, a pull reply "
			 "carries them all (none, fp16, bf16 or int8; topk and topk16 only "
			 "across zones, as delta pulls)", ts->id, key,
			 out->kind == DML_CODEC_TOPK ? "topk" : "topk16");
		return DML_EINVAL;
	}
	return 0;
}

int dml_table_spec_codecs(const Dml__TableSpec *ts, int cross_zone,
			  struct dml_link_codecs *out, char *err, size_t errlen)
{
	if (cross_zone)
		return spec_codec(ts, "codec_cross_zone", ts->codec_cross_zone, "fp16",
				  CODEC_PUSH, &out->push, err, errlen) ||
		       spec_codec(ts, "pull_codec_cross_zone", ts->pull_codec_cross_zone,
				  "fp16", CODEC_PULL_CROSS, &out->pull, err, errlen) ? DML_EINVAL : 0;
	return spec_codec(ts, "codec", ts->codec, "none", CODEC_PUSH, &out->push, err,
			  errlen) ||
	       spec_codec(ts, "pull_codec", ts->pull_codec, "none", CODEC_PULL, &out->pull,
			  err, errlen) ? DML_EINVAL : 0;
}
