/*
 * Clock set bookkeeping (see ssp.h). Workers are few (tens to thousands) and
 * the minimum is recomputed on demand by a linear scan: simpler than a heap
 * and cheap next to the network work each clock costs.
 */
#include <stdlib.h>
#include <string.h>

#include "server/ssp.h"
#include "proto/util.h"

void dml_ssp_init(struct dml_ssp *s, int64_t staleness, uint32_t expected)
{
	memset(s, 0, sizeof(*s));
	s->staleness = staleness;
	s->expected = expected;
}

void dml_ssp_destroy(struct dml_ssp *s)
{
	free(s->workers);
	memset(s, 0, sizeof(*s));
}

struct dml_ssp_worker *dml_ssp_find(struct dml_ssp *s, uint32_t id)
{
	for (size_t i = 0; i < s->nworkers; i++)
		if (s->workers[i].id == id)
			return &s->workers[i];
	return NULL;
}

struct dml_ssp_worker *dml_ssp_join(struct dml_ssp *s, uint32_t id, uint64_t incarnation)
{
	struct dml_ssp_worker *w = dml_ssp_find(s, id);

	if (!w) {
		/* Until the expected set is complete everyone starts at 0; later a
		 * joiner starts at the slowest clock instead of holding all back. */
		uint64_t start = dml_ssp_joined(s) >= s->expected ? dml_ssp_min_clock(s) : 0;

		s->workers = dml_xrealloc(s->workers, (s->nworkers + 1) * sizeof(*w));
		w = &s->workers[s->nworkers++];
		memset(w, 0, sizeof(*w));
		w->id = id;
		w->incarnation = incarnation;
		w->clock = start;
		w->live = 1;
	}
	if (w->incarnation != incarnation) {
		w->incarnation = incarnation;
		w->last_seq = 0;
		w->logged_seq = 0;
	}
	if (!w->live) {
		uint64_t min = dml_ssp_min_clock(s); /* of the others: w is not live */

		if (w->clock < min)
			w->clock = min;
		w->live = 1;
	}
	w->connections++;
	return w;
}

void dml_ssp_disconnect(struct dml_ssp *s, struct dml_ssp_worker *w, uint64_t now_ns)
{
	if (w->connections > 0)
		w->connections--;
	if (w->connections == 0)
		w->gone_since_ns = now_ns;
}

int dml_ssp_reap(struct dml_ssp *s, uint64_t now_ns, uint64_t dead_after_ns)
{
	int changed = 0;

	for (size_t i = 0; i < s->nworkers; i++) {
		struct dml_ssp_worker *w = &s->workers[i];

		if (w->live && w->connections == 0 && now_ns - w->gone_since_ns >= dead_after_ns) {
			w->live = 0;
			changed = 1;
		}
	}
	return changed;
}

void dml_ssp_leave(struct dml_ssp *s, struct dml_ssp_worker *w)
{
	w->live = 0;
}

struct dml_ssp_worker *dml_ssp_evict(struct dml_ssp *s, uint32_t id)
{
	struct dml_ssp_worker *w = dml_ssp_find(s, id);

	if (w) {
		w->live = 0;
		return w;
	}
	if (dml_ssp_joined(s) >= s->expected)
		return NULL;
	/* Never joined here: it takes its place in the set as gone, or the
	 * others would wait for the expected count forever. */
	s->workers = dml_xrealloc(s->workers, (s->nworkers + 1) * sizeof(*w));
	w = &s->workers[s->nworkers++];
	memset(w, 0, sizeof(*w));
	w->id = id;
	return w;
}

void dml_ssp_set_clock(struct dml_ssp *s, struct dml_ssp_worker *w, uint64_t clock)
{
	if (clock > w->clock)
		w->clock = clock;
}

uint64_t dml_ssp_min_clock(const struct dml_ssp *s)
{
	uint64_t min = UINT64_MAX;

	for (size_t i = 0; i < s->nworkers; i++)
		if (s->workers[i].live && s->workers[i].clock < min)
			min = s->workers[i].clock;
	return min == UINT64_MAX ? 0 : min;
}

uint64_t dml_ssp_max_clock(const struct dml_ssp *s)
{
	uint64_t max = 0;

	for (size_t i = 0; i < s->nworkers; i++)
		if (s->workers[i].live && s->workers[i].clock > max)
			max = s->workers[i].clock;
	return max;
}

int dml_ssp_ready(const struct dml_ssp *s, uint64_t clock)
{
	uint64_t bound;

	if (s->staleness < 0 || clock <= (uint64_t)s->staleness)
		return 1;
	bound = clock - (uint64_t)s->staleness;
	if (dml_ssp_joined(s) < s->expected)
		return 0;
	return dml_ssp_min_clock(s) >= bound;
}

size_t dml_ssp_joined(const struct dml_ssp *s)
{
	return s->nworkers + s->forgotten;
}

size_t dml_ssp_forget(struct dml_ssp *s, uint64_t now_ns, uint64_t after_ns,
		      int (*keep)(const struct dml_ssp_worker *w, void *arg),
		      void (*moved)(size_t from, size_t to, void *arg), void *arg)
{
	size_t gone = 0, i = 0;

	while (i < s->nworkers) {
		struct dml_ssp_worker *w = &s->workers[i];

		if (w->live || w->connections > 0 || now_ns - w->gone_since_ns < after_ns ||
		    (keep && keep(w, arg))) {
			i++;
			continue;
		}
		s->nworkers--;
		s->forgotten++;
		gone++;
		if (i != s->nworkers) {
			*w = s->workers[s->nworkers];
			if (moved)
				moved(s->nworkers, i, arg);
		}
	}
	return gone;
}
