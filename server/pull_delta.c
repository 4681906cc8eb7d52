/*
 * Delta pulls (dml.proto, Meta.delta_codec): a puller that pulls the same
 * dense range again and again (a zone aggregator across a slow link) names
 * the version of the values it holds, and gets only the change since then,
 * in a lossy codec (topk:F for the most saving).
 *
 * The server keeps, per puller (role and node id), table and range, a copy
 * of exactly what that puller holds and its version. A pull naming that
 * version gets the difference between the table and the copy, encoded; the
 * copy then takes what the reply carries (decoded here as the puller will
 * decode it, added in the same way: both hold the same floats, bit for
 * bit). What a reply left out stays in the difference and goes with a later
 * one (error feedback for pulls). Any other version (0, a lost reply, a
 * restart on either side, an evicted copy) gets the values themselves as
 * floats, which the copy takes. Versions come from a counter seeded at
 * random, so a version from before a restart matches nothing.
 *
 * Must never: answer a delta against a version other than the one the
 * puller named, or let the copy differ from what the replies carried.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "proto/util.h"
#include "server/server_internal.h"

/* Copies kept at most; past it the least recently used goes. */
#define DELTA_COPIES_MAX 256

struct pull_copy {
	struct pull_copy *next;
	uint32_t role, node, table, width;
	uint64_t begin, end;
	uint64_t version;
	uint64_t used_ns;
	float *values;
};

static struct pull_copy *copy_find(struct dml_server *s, const struct session *ss,
				   const struct held_pull *h)
{
	for (struct pull_copy *c = s->delta.copies; c; c = c->next)
		if (c->role == ss->role && c->node == ss->node_id &&
		    c->table == h->te->info.id && c->width == h->te->info.width &&
		    c->begin == h->begin && c->end == h->end)
			return c;
	return NULL;
}

static void copy_unlink_free(struct dml_server *s, struct pull_copy *c)
{
	for (struct pull_copy **pp = &s->delta.copies; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	s->delta.ncopies--;
	free(c->values);
	free(c);
}

/* A copy for this puller and range, the oldest evicted if need be; NULL
 * when there is no memory (the reply then keeps no copy). */
static struct pull_copy *copy_new(struct dml_server *s, const struct session *ss,
				  const struct held_pull *h, uint64_t floats)
{
	struct pull_copy *c;

	if (s->delta.ncopies >= DELTA_COPIES_MAX) {
		struct pull_copy *old = s->delta.copies;

		for (c = s->delta.copies; c; c = c->next)
			if (c->used_ns < old->used_ns)
				old = c;
		copy_unlink_free(s, old);
	}
	c = calloc(1, sizeof(*c));
	if (!c || !(c->values = malloc(floats ? floats * sizeof(float) : 1))) {
		free(c);
		return NULL;
	}
	c->role = ss->role;
	c->node = ss->node_id;
	c->table = h->te->info.id;
	c->width = h->te->info.width;
	c->begin = h->begin;
	c->end = h->end;
	c->next = s->delta.copies;
	s->delta.copies = c;
	s->delta.ncopies++;
	return c;
}

static uint64_t next_version(struct dml_server *s)
{
	if (!s->delta.next && dml_random_bytes(&s->delta.next, sizeof(s->delta.next)) != 0)
		s->delta.next = dml_now_ns();
	if (++s->delta.next == 0)
		s->delta.next = 1;
	return s->delta.next;
}

/*
 * The change since c, in h's delta codec, into s->coded; the copy takes it
 * as the puller will (dml_codec_decode_add: a topk reply touches only the
 * values it carries). 0, or an error (no memory, a value that is not
 * finite, which topk's encoder refuses itself): a full reply.
 */
static int delta_encode(struct dml_server *s, const struct held_pull *h, struct pull_copy *c,
			const float *values, uint64_t floats, size_t *len)
{
	size_t need = dml_codec_bound(&h->delta, floats);
	float *d = dml_server_scratch(s, floats);

	if (!d || need == 0)
		return DML_ENOMEM;
	for (uint64_t i = 0; i < floats; i++)
		d[i] = values[i] - c->values[i];
	if (!dml_codec_sparse(h->delta.kind) && !dml_values_finite(d, floats))
		return DML_EINVAL;
	if (!dml_server_coded(s, need))
		return DML_ENOMEM;
	if (dml_codec_encode(&h->delta, d, floats, NULL, s->coded, s->coded_cap, len) != 0 ||
	    dml_codec_decode_add(&h->delta, s->coded, *len, floats, c->values) != 0)
		return DML_EINVAL;
	return 0;
}

void dml_server_delta_reply(struct session *ss, const struct held_pull *h,
			    const float *values, uint64_t floats, Dml__Meta *m,
			    const void **bytes, size_t *len)
{
	struct dml_server *s = ss->srv;
	struct pull_copy *c = copy_find(s, ss, h);
	size_t coded = 0;

	if (c && h->base && c->version == h->base &&
	    delta_encode(s, h, c, values, floats, &coded) == 0) {
		c->version = next_version(s);
		c->used_ns = dml_now_ns();
		m->delta = 1;
		m->dtype = dml_codec_dtype(h->delta.kind);
		m->held_version = c->version;
		*bytes = s->coded;
		*len = coded;
		s->st.delta_pulls++;
		s->st.coded_wire[1] += coded;
		s->st.coded_floats[1] += floats * sizeof(float);
		return;
	}
	/* The values themselves: the puller's copy starts again from them. */
	if (!c)
		c = copy_new(s, ss, h, floats);
	if (c) {
		memcpy(c->values, values, floats * sizeof(float));
		c->version = next_version(s);
		c->used_ns = dml_now_ns();
	}
	m->delta = 0;
	m->dtype = DML__DTYPE__F32;
	m->held_version = c ? c->version : 0;
	*bytes = values;
	*len = floats * sizeof(float);
	s->st.delta_resyncs++;
}

void dml_server_delta_drop(struct dml_server *s)
{
	while (s->delta.copies)
		copy_unlink_free(s, s->delta.copies);
}
