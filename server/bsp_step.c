/*
 * BSP steps (bsp_step = clock): under staleness 0 every worker computes a
 * clock's gradient from the same rows, so the pushes of one clock are one
 * step's worth of data. Applied one after the other, the later ones land
 * on rows the earlier ones already moved, and an optimizer with momentum
 * or adaptive rates (adam: the mlp app's) learns less per example from
 * three pushes a clock than from two. Here a push to a dense table is
 * summed into the table's step accumulator instead, with its weight, and
 * when the slowest live worker's clock moves on (every push of the clock
 * has arrived: a worker sends its pushes before its CLOCK on the same
 * connection) the sums are applied as one push each, of the summed
 * weight. A pull of the next clock waits for that same moment, so every
 * worker reads the model after the whole step, never part of it.
 *
 * Each push is logged and acknowledged as it arrives (durability sync), a
 * deferred one marked so (store.h); a step appends a step record, so a
 * replay sums the same pushes and applies them at the same points, and the
 * pushes logged after the last step wait again, in the accumulator, for
 * the next. Whatever must see every acknowledged push in the rows (a
 * remap, a new job, a checkpoint) takes a step first or finds none
 * waiting. Sparse tables are not deferred: a push touches some rows only,
 * and rows of one step would carry different weights.
 *
 * Must never: apply a deferred push twice or not at all, take a step
 * without logging it while a log is kept, or leave sums of rows that the
 * table no longer holds.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/server_internal.h"
#include "proto/util.h"

/* The pushes of one table since the last step. */
struct step_acc {
	uint64_t begin, end;       /* rows it can hold: the range served when made */
	uint32_t width;
	float *sum;                /* (end - begin) * width: the pushed values, summed */
	float *weight;             /* end - begin: the weights summed; 0: no push */
	uint64_t lo, hi;           /* the rows pushed to: [lo, hi), empty when lo == hi */
};

void dml_server_step_free(struct table_entry *te)
{
	if (!te->acc)
		return;
	free(te->acc->sum);
	free(te->acc->weight);
	free(te->acc);
	te->acc = NULL;
}

int dml_server_step_defers(const struct dml_server *s, const struct table_entry *te)
{
	return s->bsp_step == DML_BSP_STEP_CLOCK && s->ssp.staleness == 0 && te->info.dense;
}

/*
 * Make te's accumulator hold rows [begin, end) too: the first push sizes it
 * to the rows te serves (one range: a dense table's is); rows that arrive
 * later by a remap widen it, sums kept. 0 or DML_ENOMEM (it stays as it was).
 */
static int acc_cover(struct table_entry *te, uint64_t begin, uint64_t end)
{
	struct step_acc *a = te->acc, *n;
	uint64_t rows;

	if (a && begin >= a->begin && end <= a->end)
		return 0;
	if (!(n = calloc(1, sizeof(*n))))
		return DML_ENOMEM;
	n->begin = te->served.n ? te->served.r[0].begin : begin;
	n->end = te->served.n ? te->served.r[te->served.n - 1].end : end;
	if (a) {
		n->begin = a->begin < n->begin ? a->begin : n->begin;
		n->end = a->end > n->end ? a->end : n->end;
	}
	n->begin = begin < n->begin ? begin : n->begin;
	n->end = end > n->end ? end : n->end;
	n->width = te->info.width;
	rows = n->end - n->begin;
	n->sum = calloc(rows * n->width, sizeof(float));
	n->weight = calloc(rows, sizeof(float));
	if (!n->sum || !n->weight) {
		free(n->sum);
		free(n->weight);
		free(n);
		return DML_ENOMEM;
	}
	n->lo = n->hi = n->begin;
	if (a && a->lo != a->hi) {
		memcpy(n->sum + (a->lo - n->begin) * n->width, a->sum + (a->lo - a->begin) *
		       a->width, (size_t)(a->hi - a->lo) * a->width * sizeof(float));
		memcpy(n->weight + (a->lo - n->begin), a->weight + (a->lo - a->begin),
		       (size_t)(a->hi - a->lo) * sizeof(float));
		n->lo = a->lo;
		n->hi = a->hi;
	}
	dml_server_step_free(te);
	te->acc = n;
	return 0;
}

int dml_server_step_add(struct table_entry *te, uint64_t begin, uint64_t end,
			const float *vals, float weight)
{
	struct step_acc *a;
	float *sum;

	if (begin == end)
		return 0;
	if (acc_cover(te, begin, end) != 0)
		return DML_ENOMEM;
	a = te->acc;
	sum = a->sum + (begin - a->begin) * a->width;
	for (size_t i = 0, n = (size_t)(end - begin) * a->width; i < n; i++)
		sum[i] += vals[i];
	for (uint64_t r = begin; r < end; r++)
		a->weight[r - a->begin] += weight;
	if (a->lo == a->hi) {
		a->lo = begin;
		a->hi = end;
	} else {
		a->lo = begin < a->lo ? begin : a->lo;
		a->hi = end > a->hi ? end : a->hi;
	}
	return 0;
}

int dml_server_step_pending(const struct dml_server *s)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].acc && s->tables[i].acc->lo != s->tables[i].acc->hi)
			return 1;
	return 0;
}

/* Apply a's sums to te's table, each run of rows of one summed weight as one
 * push, and empty it. */
static int acc_apply(struct table_entry *te, struct step_acc *a)
{
	uint64_t r = a->lo;
	int rc = 0;

	while (r < a->hi && rc == 0) {
		float w = a->weight[r - a->begin];
		uint64_t e = r + 1;

		while (e < a->hi && a->weight[e - a->begin] == w)
			e++;
		/* rows no push touched in between wait for nothing */
		if (w > 0.0f)
			rc = dml_table_push_range_weighted(te->table, r, e,
							   a->sum + (r - a->begin) * a->width, w);
		r = e;
	}
	memset(a->sum + (a->lo - a->begin) * a->width, 0,
	       (size_t)(a->hi - a->lo) * a->width * sizeof(float));
	memset(a->weight + (a->lo - a->begin), 0, (size_t)(a->hi - a->lo) * sizeof(float));
	a->lo = a->hi = a->begin;
	return rc;
}

int dml_server_step_apply(struct dml_server *s)
{
	int rc = 0;

	for (size_t i = 0; i < s->ntables; i++) {
		struct table_entry *te = &s->tables[i];
		int r;

		if (!te->acc || te->acc->lo == te->acc->hi)
			continue;
		/* the others still take their step */
		if ((r = acc_apply(te, te->acc)) != 0 && rc == 0)
			rc = r;
	}
	return rc;
}

void dml_server_step_flush(struct dml_server *s)
{
	int rc;

	if (!dml_server_step_pending(s))
		return;
	if ((rc = dml_server_step_apply(s)) != 0) {
		/* Acknowledged pushes did not reach the rows: serving on would
		 * lose them. A restart replays them from the log. */
		dml_err("job %u: a clock's step could not be applied: %s; stopping so that no "
			"acknowledged push is lost", s->job.id, dml_strerror(rc));
		s->store_failed = 1;
		event_base_loopbreak(s->base);
		return;
	}
	s->st.steps++;
	dml_server_store_stepped(s);
}

void dml_server_step_reset(struct dml_server *s)
{
	dml_server_step_flush(s);
	for (size_t i = 0; i < s->ntables; i++)
		dml_server_step_free(&s->tables[i]);
}

void dml_server_step_clock(struct dml_server *s)
{
	uint64_t min = dml_ssp_min_clock(&s->ssp);

	/* Only a rise ends a clock: the slowest clock falls when a worker
	 * joins a set still short of its expected size (it starts at 0), and
	 * the pushes of the clock under way wait for it then. Nor does a set
	 * short of it (pulls wait for it too). */
	if (min <= s->step_min_clock || dml_ssp_joined(&s->ssp) < s->ssp.expected)
		return;
	s->step_min_clock = min;
	dml_server_step_flush(s);
}
