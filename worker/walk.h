/*
 * How an app walks its training records: pass after pass over each data
 * partition it holds, each pass of a partition in an order of its own, and
 * how many records of each partition have been taken in this job.
 *
 * The order of a partition's records depends only on the job's key, the
 * partition and the pass, and a partition's count goes on from where its
 * previous holder stopped (the scheduler carries it in the assignment), so
 * a partition that moves between workers mid-pass is neither restarted nor
 * skipped: the new holder takes exactly the records the old one had not.
 * A batch takes from the partition furthest behind first, so every held
 * partition moves at the same pace and a batch mixes them all.
 *
 * Must never: take a record of a partition twice in one pass, or forget
 * how far a partition went while the walk knows it (a partition let go and
 * held again goes on from the furthest count it has seen).
 */
#ifndef DML_WORKER_WALK_H
#define DML_WORKER_WALK_H

#include <stddef.h>
#include <stdint.h>

/* A partition the walk knows: held now or once in this job. */
struct dml_walk_part {
	uint32_t part;
	int held;
	uint64_t begin, n;        /* its records, [begin, begin + n), when held */
	uint64_t slot;            /* records of the held partitions before it */
	uint64_t taken;           /* records taken from it in this job, every pass */
};

struct dml_walk {
	uint64_t key;             /* set once by the app, from the job seed */
	struct dml_walk_part *parts; /* by partition number */
	size_t nparts, parts_cap;
	uint64_t total;           /* records of the held partitions */
	uint64_t *batch;          /* dml_walk_batch's records, */
	uint64_t *slots;          /* and their places among the held records */
	size_t batch_cap;
	uint64_t *next;           /* taken counts after the batch, per part */
	size_t *heap;             /* held parts with records, furthest behind first */
	size_t scratch_cap;
	int pending;              /* a batch not yet advanced over */
};

/**
 * Walk the partitions parts (any order, duplicates ignored) of n records
 * split into num_partitions (dml_partition_range) from now on, each
 * from the count the walk knows for it (0 for one it never saw). Returns
 * 0, or DML_EINVAL ("partition 9 of 8 does not exist") / DML_ENOMEM with
 * err = "app APP: " and the reason; the walk is unchanged on failure.
 */
int dml_walk_set(struct dml_walk *w, const char *app, uint64_t n, const uint32_t *parts,
		 size_t nparts, uint32_t num_partitions, char *err, size_t errlen);

/**
 * Learn that taken[k] records of partition parts[k] were taken in this job
 * (by any worker): a held partition or one held later goes on from the
 * larger of this and what the walk knew. 0 or DML_ENOMEM.
 */
int dml_walk_note(struct dml_walk *w, const uint32_t *parts, const uint64_t *taken, size_t n);

/**
 * The next rows records (w->batch; their places among the held records in
 * w->slots), not yet taken: the app calls dml_walk_advance once it trained
 * on them (a set or note in between drops the batch). NULL when out of
 * memory. rows must be 0 when no record is held.
 */
const uint64_t *dml_walk_batch(struct dml_walk *w, size_t rows);

/** Count the last batch's records as taken. */
void dml_walk_advance(struct dml_walk *w);

/** How many partitions are held now. */
size_t dml_walk_held(const struct dml_walk *w);

/** The held partitions and their taken counts (dml_walk_held() each). */
void dml_walk_positions(const struct dml_walk *w, uint32_t *parts, uint64_t *taken);

/** The taken count of partition part (0 when the walk never knew it). */
uint64_t dml_walk_taken(const struct dml_walk *w, uint32_t part);

/** Free and zero everything but the key. */
void dml_walk_clear(struct dml_walk *w);

#endif
