/*
 * What a forwarded push carries to its owner: the keys of a sparse entry,
 * then the sum of its contributions in the codec the workers named
 * (Meta.forward_codec, the job's push codec for the link between them and
 * the owner), where the owner takes it; floats otherwise.
 *
 * A lossy codec keeps error feedback here, at the edge of the zone: the
 * residual of an owner's (job, table) per key is added to the next sum of
 * those keys and left holding what the encoding did not carry. The payload
 * is encoded once, when its entry first goes, and kept until the owner
 * answers: a resend after a lost connection or DML_EAGAIN carries the same
 * bytes, which the owner applies once or drops by its contributors, so
 * the residual never assumes more or less than the owner holds. An answer
 * that leaves the sum unapplied (a split, a relayed error) puts the residual
 * back as it was before the encoding: the workers' values go again, in a
 * push of their own or to another owner, and carry that part themselves.
 *
 * Must never: encode values that are not finite (they would stay in the
 * residual for good: such a sum goes as floats and the owner decides), or
 * change a residual while an encoding built on it is still unanswered
 * (one forwarded push per owner at a time keeps that).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/frame.h"
#include "proto/residual.h"
#include "proto/util.h"
#include "server/aggregator_internal.h"

/* One owner's residuals of a (job, table) of one width. */
struct agg_residual {
	struct agg_residual *next;
	uint32_t job, table, width;
	struct dml_residual *r;
};

static struct dml_residual *residual_of(struct agg_owner *o, const struct agg_entry *e)
{
	struct agg_residual *x;

	for (x = o->residuals; x; x = x->next)
		if (x->job == e->job && x->table == e->table && x->width == e->width)
			return x->r;
	x = dml_xcalloc(1, sizeof(*x));
	x->job = e->job;
	x->table = e->table;
	x->width = e->width;
	x->r = dml_residual_new(e->width, 0);
	x->next = o->residuals;
	o->residuals = x;
	return x->r;
}

/* The residual's old rows are no longer needed to undo the encoding. */
static void forget_undo(struct agg_entry *e)
{
	free(e->undo);
	free(e->at);
	e->undo = NULL;
	e->at = NULL;
	e->residual = NULL;
}

static size_t entry_keys(const struct agg_entry *e)
{
	return e->dense ? (size_t)(e->key_end - e->key_begin) : e->num_keys;
}

/* The codec e goes in: its workers', where the owner takes it. topk's
 * encoder refuses values that are not finite itself (floats then go). */
static struct dml_codec entry_codec(const struct agg_owner *o, const struct agg_entry *e,
				    const float *sum)
{
	struct dml_codec none = { .kind = DML_CODEC_NONE };

	if (e->codec.kind == DML_CODEC_NONE ||
	    !(o->codecs & (1u << dml_codec_dtype(e->codec.kind))) ||
	    (!dml_codec_sparse(e->codec.kind) && !dml_values_finite(sum, e->nvalues)))
		return none;
	return e->codec;
}

/* e's contributions summed into sum. */
static void entry_sum(const struct agg_entry *e, float *sum)
{
	memcpy(sum, e->c[0].values, e->nvalues * sizeof(float));
	for (size_t i = 1; i < e->nc; i++)
		dml_values_add(sum, e->c[i].values, e->nvalues);
}

/*
 * Encode sum into e's payload after key_bytes, with the residual (c is
 * lossy). The sum itself serves as the encoder's residual (the residual's
 * rows are its input: the same floats, added the other way round), so it
 * ends up holding the leftover, and on an error it is no longer the sum.
 */
static int encode_sum(struct agg_owner *o, struct agg_entry *e, const struct dml_codec *c,
		      float *sum, size_t key_bytes, size_t cap)
{
	size_t nkeys = entry_keys(e), len = 0;
	struct dml_residual *r = residual_of(o, e);
	int rc;

	e->at = dml_xmalloc((nkeys ? nkeys : 1) * sizeof(*e->at));
	e->undo = dml_residual_take(r, e->keys, e->key_begin, nkeys, e->at);
	rc = dml_codec_encode(c, e->undo, e->nvalues, sum, e->payload + key_bytes,
			      cap - key_bytes, &len);
	if (rc == 0) {
		dml_residual_give(r, e->at, nkeys, sum);
		e->residual = r;
	} else {
		dml_residual_give(r, e->at, nkeys, e->undo);   /* as it was */
		forget_undo(e);
	}
	if (rc == 0) {
		e->payload_len = key_bytes + len;
		e->dtype = dml_codec_dtype(c->kind);
	}
	return rc;
}

int agg_entry_encode(struct agg_owner *o, struct agg_entry *e)
{
	size_t key_bytes = e->dense ? 0 : (size_t)e->num_keys * sizeof(uint64_t);
	size_t floats = e->nvalues * sizeof(float), cap = key_bytes + floats;
	float *sum;
	struct dml_codec c;

	if (e->payload)
		return 0;
	sum = malloc(floats ? floats : 1);
	if (!sum)
		return DML_ENOMEM;
	entry_sum(e, sum);
	c = entry_codec(o, e, sum);
	if (c.kind != DML_CODEC_NONE && key_bytes + dml_codec_bound(&c, e->nvalues) > cap)
		cap = key_bytes + dml_codec_bound(&c, e->nvalues);
	/* Room for floats too: topk's scratch may fail, and floats then go. */
	e->payload = malloc(cap ? cap : 1);
	if (!e->payload) {
		free(sum);
		return DML_ENOMEM;
	}
	if (key_bytes)
		memcpy(e->payload, e->keys, key_bytes);
	if (c.kind == DML_CODEC_NONE || encode_sum(o, e, &c, sum, key_bytes, cap) != 0) {
		if (c.kind != DML_CODEC_NONE)
			entry_sum(e, sum);      /* the encoder used it */
		memcpy(e->payload + key_bytes, sum, floats);
		e->payload_len = key_bytes + floats;
		e->dtype = DML__DTYPE__F32;
	}
	free(sum);
	o->agg->st.forward_value_bytes += floats;
	o->agg->st.forward_sent_bytes += e->payload_len - key_bytes;
	return 0;
}

void agg_entry_unencode(struct agg_entry *e)
{
	if (e->residual) {
		/* Back to what it held before: the encoding's leftover out. */
		size_t nkeys = entry_keys(e);
		size_t *at = dml_xmalloc((nkeys ? nkeys : 1) * sizeof(*at));

		free(dml_residual_take(e->residual, e->keys, e->key_begin, nkeys, at));
		dml_residual_give(e->residual, at, nkeys, e->undo);
		free(at);
	}
	agg_entry_payload_free(e);
}

void agg_entry_payload_free(struct agg_entry *e)
{
	forget_undo(e);
	free(e->payload);
	e->payload = NULL;
	e->payload_len = 0;
}

/* Whether (job, table) has a residual at an owner before o, or before x in o. */
static int pair_seen(const struct dml_agg *a, const struct agg_owner *o,
		     const struct agg_residual *x)
{
	for (const struct agg_owner *p = a->owners; p <= o; p++)
		for (const struct agg_residual *y = p->residuals; y && y != x; y = y->next)
			if (y->job == x->job && y->table == x->table)
				return 1;
	return 0;
}

void agg_residuals_collect(struct dml_metrics_scrape *sc, void *arg)
{
	const struct dml_agg *a = arg;

	for (size_t i = 0; i < a->nowners; i++)
		for (const struct agg_residual *x = a->owners[i].residuals; x; x = x->next) {
			double sq = 0;
			char label[32];

			if (pair_seen(a, &a->owners[i], x))
				continue;
			for (size_t j = i; j < a->nowners; j++)
				for (const struct agg_residual *y = a->owners[j].residuals; y;
				     y = y->next)
					if (y->job == x->job && y->table == x->table) {
						double n = dml_residual_l2(y->r);

						sq += n * n;
					}
			snprintf(label, sizeof(label), "%u/%u", x->job, x->table);
			dml_metrics_emit(sc, label, sqrt(sq));
		}
}

void agg_residuals_free(struct agg_owner *o)
{
	while (o->residuals) {
		struct agg_residual *x = o->residuals;

		o->residuals = x->next;
		dml_residual_free(x->r);
		free(x);
	}
}
