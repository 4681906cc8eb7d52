/*
 * Partitions handed from worker to worker at their walks' positions
 * (handover.h).
 */
#include <stdlib.h>
#include <string.h>

#include "shard/assign.h"
#include "sched/handover.h"
#include "proto/util.h"

void dml_handover_init(struct dml_handover *h, uint64_t npart)
{
	memset(h, 0, sizeof(*h));
	h->npart = npart;
	h->pos = dml_xcalloc(npart ? npart : 1, sizeof(*h->pos));
	h->holder = dml_xmalloc((npart ? npart : 1) * sizeof(*h->holder));
	h->waits = dml_xcalloc(npart ? npart : 1, sizeof(*h->waits));
	for (uint64_t p = 0; p < npart; p++)
		h->holder[p] = DML_ASSIGN_NONE;
}

void dml_handover_free(struct dml_handover *h)
{
	free(h->pos);
	free(h->holder);
	free(h->waits);
	memset(h, 0, sizeof(*h));
}

/* Partition p waits no more (it went to its owner). */
static void wait_end(struct dml_handover *h, uint64_t p)
{
	if (h->waits[p] && h->waiting)
		h->waiting--;
	h->waits[p] = 0;
	if (!h->waiting)
		h->oldest = 0;
}

void dml_handover_plan(struct dml_handover *h, const uint32_t *owner, const bool *live,
		       size_t nworkers, uint64_t now)
{
	h->waiting = h->oldest = 0;
	for (uint64_t p = 0; p < h->npart; p++) {
		uint32_t w = h->holder[p];

		if (w != owner[p] && (w == DML_ASSIGN_NONE || w >= nworkers || !live[w]))
			h->holder[p] = w = owner[p];
		if (w == owner[p]) {
			h->waits[p] = 0;
			continue;
		}
		/* a partition that waited before goes on waiting from then */
		if (!h->waits[p])
			h->waits[p] = now + 1;
		if (!h->oldest || h->waits[p] < h->oldest)
			h->oldest = h->waits[p];
		h->waiting++;
	}
}

/* Partition p of worker w at position pos, if w walks it: the position. */
static int position(struct dml_handover *h, uint32_t w, uint32_t p, uint64_t pos)
{
	if (p >= h->npart || h->holder[p] != w)
		return 0;
	if (pos > h->pos[p])
		h->pos[p] = pos;
	return 1;
}

int dml_handover_report(struct dml_handover *h, const uint32_t *owner, uint32_t w,
			const Dml__Progress *p)
{
	int moved = 0;

	if (p->n_positions == p->n_partitions)
		for (size_t k = 0; k < p->n_partitions; k++)
			position(h, w, p->partitions[k], p->positions[k]);
	if (p->n_released_positions != p->n_released)
		return 0;
	for (size_t k = 0; k < p->n_released; k++) {
		uint32_t q = p->released[k];

		if (!position(h, w, q, p->released_positions[k]))
			continue;
		/* one it let go of but owns again is listed for it again as it is */
		moved |= owner[q] != w && owner[q] != DML_ASSIGN_NONE;
		h->holder[q] = owner[q];
		wait_end(h, q);
	}
	return moved;
}

uint64_t dml_handover_expire(struct dml_handover *h, const uint32_t *owner, uint64_t now,
			     uint64_t hold_ms)
{
	uint64_t moved = 0, oldest = 0;

	/* oldest is at most the oldest wait left: a look that finds none due
	 * sets it right */
	if (!h->waiting || now + 1 - h->oldest < hold_ms)
		return 0;
	for (uint64_t p = 0; p < h->npart; p++) {
		if (!h->waits[p])
			continue;
		if (now + 1 - h->waits[p] < hold_ms) {
			oldest = !oldest || h->waits[p] < oldest ? h->waits[p] : oldest;
			continue;
		}
		h->holder[p] = owner[p];
		wait_end(h, p);
		moved++;
	}
	h->oldest = h->waiting ? oldest : 0;
	return moved;
}

void dml_handover_epochs(const struct dml_handover *h, uint64_t n, double *min, double *max)
{
	*min = *max = 0;
	if (!n || !h->npart || n < h->npart)
		return;
	for (uint64_t p = 0; p < h->npart; p++) {
		uint64_t b, e;
		double passes;

		dml_partition_range(n, (uint32_t)h->npart, (uint32_t)p, &b, &e);
		passes = (double)h->pos[p] / (double)(e - b);

		if (p == 0 || passes < *min)
			*min = passes;
		if (p == 0 || passes > *max)
			*max = passes;
	}
}
