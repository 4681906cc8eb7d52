/*
 * libdml's codecs on the wire (client_internal.h): which codec each table's
 * pushes and pull replies take over a link, the encoding of a push when it
 * is first sent, the decoding of a reply, and the residuals of error
 * feedback.
 *
 * A link is cross-zone when this client and the server both name a zone
 * and the names differ; the job's table keys (table_spec.h) pick the codec
 * for each class, and a server that does not offer it in its WELCOME gets
 * floats. A push is encoded once, at its first send, and its resends carry
 * the same bytes: a server drops a resend by its sequence number, so what
 * it applied and what the residual assumes it applied never differ.
 *
 * Error feedback: a lossy push adds the residual of its rows to its values
 * and leaves in the residual what the encoding did not carry, so that the
 * sum of everything sent plus the residual is the sum of everything pushed
 * (to rounding). Residuals are per table and key, live as long as the
 * handle (a reconnect keeps them) and go with dml_close. A push that
 * bounces to another server is turned back into the values it was to
 * send, which keeps that sum.
 *
 * Must never: encode values that are not finite (they would stay in the
 * residual for good: such a push goes as floats and the server decides),
 * or let a reply in a codec the pull did not ask for through.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "proto/residual.h"
#include "proto/util.h"
#include "worker/client_internal.h"

/* ---- which codec ---------------------------------------------------------- */

void dml_client_codecs_free(struct client_codecs *cs)
{
	for (uint32_t i = 0; i < cs->n; i++)
		dml_residual_free(cs->t[i].res);
	free(cs->t);
	cs->t = NULL;
	cs->n = 0;
}

int dml_client_codecs_from_spec(const Dml__JobSpec *spec, struct client_codecs *out,
				char *err, size_t errlen)
{
	out->n = (uint32_t)spec->n_tables;
	out->pace = spec->staleness < 0 ? DML_PACE_ASYNC : DML_PACE_CLOCKED;
	out->t = dml_xcalloc(out->n ? out->n : 1, sizeof(*out->t));
	for (uint32_t i = 0; i < out->n; i++) {
		const Dml__TableSpec *ts = spec->tables[i];
		struct client_table_codec *tc = &out->t[i];

		tc->table = ts->id;
		tc->width = ts->width;
		tc->dense = ts->dense;
		tc->keys = ts->keys;
		for (int cross = 0; cross <= 1; cross++)
			if (dml_table_spec_codecs(ts, cross, &tc->link[cross], err, errlen)) {
				dml_client_codecs_free(out);
				return DML_ECONF;
			}
	}
	return 0;
}

void dml_client_codecs_install(struct dml *d, struct client_codecs *next)
{
	/* A table that keeps its shape keeps its residual. */
	for (uint32_t i = 0; i < next->n; i++) {
		struct client_table_codec *tc = &next->t[i];

		for (uint32_t j = 0; j < d->codecs.n; j++) {
			struct client_table_codec *old = &d->codecs.t[j];

			if (old->table == tc->table && old->width == tc->width &&
			    old->dense == tc->dense && old->keys == tc->keys) {
				tc->res = old->res;
				old->res = NULL;
			}
		}
	}
	dml_client_codecs_free(&d->codecs);
	d->codecs = *next;
	memset(next, 0, sizeof(*next));
}

/* The table's entry; without a job spec (standalone) made from the options. */
static struct client_table_codec *table_codec(struct dml *d, const struct part *p)
{
	const struct dml_shard_table *t;
	struct client_table_codec *tc;
	Dml__TableSpec ts = DML__TABLE_SPEC__INIT;

	for (uint32_t i = 0; i < d->codecs.n; i++)
		if (d->codecs.t[i].table == p->table)
			return &d->codecs.t[i];
	t = dml_client_lookup_table(d, p->table);
	if (!t)
		return NULL;
	d->codecs.t = dml_xrealloc(d->codecs.t, (d->codecs.n + 1) * sizeof(*tc));
	tc = &d->codecs.t[d->codecs.n++];
	memset(tc, 0, sizeof(*tc));
	tc->table = t->id;
	tc->width = t->width;
	tc->dense = t->dense;
	tc->keys = t->keys;
	ts.id = t->id;
	ts.codec = d->conf.codec[0];
	ts.codec_cross_zone = d->conf.codec[1];
	ts.pull_codec = d->conf.pull_codec[0];
	ts.pull_codec_cross_zone = d->conf.pull_codec[1];
	for (int cross = 0; cross <= 1; cross++)  /* the options were checked */
		(void)dml_table_spec_codecs(&ts, cross, &tc->link[cross], NULL, 0);
	return tc;
}

void dml_client_count_values(struct dml *d, const struct link *l, size_t floats,
			     size_t sent)
{
	uint64_t *b = d->value_bytes[l->cross_zone];

	b[0] += floats * sizeof(float);
	b[1] += sent;
}

/* The job's codec for p's kind on a link of l's class, NULL without one. */
static const struct dml_codec *class_codec(struct client_table_codec *tc, const struct part *p,
					   const struct link *l)
{
	if (!tc || tc->width != p->width)
		return NULL;
	return p->kind == PART_PUSH ? &tc->link[l->cross_zone].push
				    : &tc->link[l->cross_zone].pull;
}

/*
 * The codec for p sent over link l, none where l's peer does not take it.
 * Through the aggregator, the owner's class codec goes along in
 * Meta.forward_codec (dml_client_forward_codec): the aggregator sums a
 * zone's pushes and codes the sum, or pulls in it, for what crosses. A
 * topk pull codec means delta pulls, which only an aggregator makes: a pull
 * that goes straight asks fp16.
 */
static struct dml_codec part_codec(struct dml *d, const struct part *p, const struct link *l,
				   struct client_table_codec **tcp)
{
	struct client_table_codec *tc = table_codec(d, p);
	const struct dml_codec *cc = class_codec(tc, p, l);
	struct dml_codec c = { .kind = DML_CODEC_NONE };

	*tcp = tc;
	if (cc)
		c = *cc;
	if (p->kind == PART_PULL && dml_codec_sparse(c.kind))
		c.kind = DML_CODEC_FP16;
	if (!(l->codecs & (1u << dml_codec_dtype(c.kind))))
		c.kind = DML_CODEC_NONE;
	return c;
}

double dml_client_residual_norm(const struct dml *d, uint32_t table)
{
	for (uint32_t i = 0; i < d->codecs.n; i++)
		if (d->codecs.t[i].table == table && d->codecs.t[i].res)
			return dml_residual_l2(d->codecs.t[i].res);
	return 0;
}

/* ---- pushes ---------------------------------------------------------------- */

static int encode_push(struct part *p, size_t n, const struct dml_codec *c,
		       struct client_table_codec *tc)
{
	size_t cap = dml_codec_bound(c, n), len = 0;
	float *res, *tmp = NULL;
	size_t *at = NULL;
	int rc;

	if (!dml_values_finite(p->vals, n))
		return 0;
	for (uint32_t i = 0; i < p->nkeys && tc->dense; i++)
		if (p->keys[i] >= tc->keys)
			return 0;       /* the server refuses it: no residual for it */
	if (!tc->res)
		tc->res = dml_residual_new(tc->width, tc->dense ? tc->keys : 0);
	if (p->dense) {
		res = dml_residual_slice(tc->res, p->begin);
	} else {
		/* A key pushed twice takes its residual once; both leftovers go back. */
		at = dml_xmalloc(p->nkeys * sizeof(*at));
		res = tmp = dml_residual_take(tc->res, p->keys, 0, p->nkeys, at);
	}
	p->coded = dml_xmalloc(cap ? cap : 1);
	rc = dml_codec_encode(c, p->vals, n, res, p->coded, cap, &len);
	if (at)
		dml_residual_give(tc->res, at, p->nkeys, tmp);
	free(at);
	free(tmp);
	if (rc) {
		free(p->coded);
		p->coded = NULL;
		return rc;
	}
	p->coded_len = len;
	p->dtype = dml_codec_dtype(c->kind);
	return 0;
}

int dml_client_part_encode(struct dml *d, struct part *p)
{
	size_t n = dml_client_part_values(p);
	struct client_table_codec *tc;
	struct dml_codec c;
	int rc;

	if (p->kind == PART_BYE || p->coded)
		return 0;
	c = part_codec(d, p, p->link, &tc);
	if (p->kind == PART_PULL) {
		p->dtype = dml_codec_dtype(c.kind);
		return 0;
	}
	if (c.kind != DML_CODEC_NONE && (rc = encode_push(p, n, &c, tc)) != 0)
		return rc;
	dml_client_count_values(d, p->link, n, p->coded ? p->coded_len : n * sizeof(float));
	return 0;
}

int dml_client_part_uncode(struct part *p)
{
	size_t n = dml_client_part_values(p);
	struct dml_codec c;
	float *vals;

	if (p->kind == PART_PULL)
		p->dtype = DML__DTYPE__F32;
	if (!p->coded)
		return 0;
	vals = dml_xmalloc((n ? n : 1) * sizeof(float));
	(void)dml_dtype_codec(p->dtype, &c);
	if (dml_codec_decode(&c, p->coded, p->coded_len, n, vals) != 0) {
		free(vals);    /* our own encoding: cannot happen */
		return DML_EIO;
	}
	free(p->vals_own);
	p->vals_own = vals;
	p->vals = vals;
	free(p->coded);
	p->coded = NULL;
	p->coded_len = 0;
	p->dtype = DML__DTYPE__F32;
	return 0;
}

int dml_client_part_codec_fits(struct dml *d, const struct part *p, const struct link *l)
{
	struct client_table_codec *tc;
	struct dml_codec c = part_codec(d, p, l, &tc);
	Dml__DType now = p->kind == PART_PULL || p->coded ? p->dtype : DML__DTYPE__F32;

	return p->kind == PART_BYE || dml_codec_dtype(c.kind) == now;
}

const char *dml_client_forward_codec(struct dml *d, const struct part *p, char *buf,
				     size_t len)
{
	const struct dml_codec *c;

	if (p->kind == PART_BYE || !p->owner)
		return NULL;
	c = class_codec(table_codec(d, p), p, p->owner);
	if (!c || c->kind == DML_CODEC_NONE ||
	    !(p->owner->codecs & (1u << dml_codec_dtype(c->kind))))
		return NULL;
	return dml_codec_format(c, buf, len);
}

/* ---- pull replies ---------------------------------------------------------- */

int dml_client_reply_decode(struct part *p, const Dml__Meta *m, const uint8_t *payload,
			    size_t len)
{
	size_t n = dml_client_part_values(p);
	struct dml_codec c;
	float *out = p->out;
	int rc;

	if (m->dtype != p->dtype)
		return DML_ESHAPE;
	(void)dml_dtype_codec(m->dtype, &c);
	if (p->pos)
		out = dml_xmalloc((n ? n : 1) * sizeof(float));
	rc = dml_codec_decode(&c, payload, len, n, out);
	if (rc == 0 && p->pos)
		dml_client_pull_scatter(p, out);
	if (p->pos)
		free(out);
	return rc ? DML_ESHAPE : 0;
}
