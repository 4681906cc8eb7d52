/*
 * Handing a job's data partitions from worker to worker so that an epoch's
 * examples are neither repeated nor skipped: where each partition's walk
 * stands (records of it taken in this job, from the reports of the worker
 * walking it), and which worker walks it now.
 *
 * When a new plan gives a partition to another worker, the new owner gets
 * it only once the worker walking it let go of it (its report lists the
 * partition as released, with where it stopped), and goes on from there. A
 * holder that is no longer live lets go at once, from its last report; one
 * that does not let go within the hold (it stalled, or its report was
 * lost) is passed over, at the cost of the records it walked since its
 * last report.
 *
 * A pure state machine like jobs.h: worker indexes are the job's, times are
 * the caller's ms.
 *
 * Must never: give a partition to a worker while another live worker walks
 * it (before the hold runs out), or let a position go down.
 */
#ifndef DML_SCHED_HANDOVER_H
#define DML_SCHED_HANDOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"

struct dml_handover {
	uint64_t npart;
	uint64_t *pos;            /* per partition: records of it taken in this job */
	uint32_t *holder;         /* per partition: the worker walking it, or
				   * DML_ASSIGN_NONE */
	uint64_t *waits;          /* per partition: 1 + when its owner began to wait
				   * for its holder (0: it does not wait) */
	uint64_t waiting;         /* partitions whose owner waits */
	uint64_t oldest;          /* at most the oldest of waits (0: none waits) */
};

/** Start h for npart partitions: none held, every position 0. */
void dml_handover_init(struct dml_handover *h, uint64_t npart);

void dml_handover_free(struct dml_handover *h);

/**
 * A new plan, owner[p] per partition (a worker index or DML_ASSIGN_NONE):
 * a partition held by no live worker (live[w], nworkers of them) goes to
 * its owner now; one a live worker walks waits for it to let go.
 */
void dml_handover_plan(struct dml_handover *h, const uint32_t *owner, const bool *live,
		       size_t nworkers, uint64_t now);

/**
 * Worker w's report p: the positions of the partitions it walks, and those
 * it let go of. Returns 1 when a partition it let go of went to another
 * worker (whose assignment now lists it), else 0.
 */
int dml_handover_report(struct dml_handover *h, const uint32_t *owner, uint32_t w,
			const Dml__Progress *p);

/**
 * Give every partition that has waited hold_ms or longer to its owner
 * anyway (each counts from when a plan first made it wait). Returns how
 * many went.
 */
uint64_t dml_handover_expire(struct dml_handover *h, const uint32_t *owner, uint64_t now,
			     uint64_t hold_ms);

/**
 * Passes over the data of the partition furthest behind (*min) and furthest
 * ahead (*max), for a training set of n records; 0 and 0 when n is 0.
 */
void dml_handover_epochs(const struct dml_handover *h, uint64_t n, double *min, double *max);

#endif
