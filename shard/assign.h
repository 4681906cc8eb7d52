/*
 * The heterogeneity-aware assigner: how much work and how much of the key
 * space each machine gets, from what the machines measured. Data partitions
 * go to workers in proportion to their compute rate (moving as few as
 * possible when the rates change), key ranges go to servers in proportion to
 * their capacity, and two small measures tell the scheduler when a plan has
 * drifted far enough to be worth redoing and how uneven a clock was.
 *
 * Pure functions: no I/O, no logging, no global state; safe from any thread.
 * They allocate only temporary scratch, freed before they return; every
 * output goes into arrays the caller allocated. They must never trust their
 * inputs (rates and capacities come from peers' profiles): every entry point
 * checks its arguments and answers DML_EINVAL rather than asserting.
 *
 * Rounding. Both splits use the largest-remainder method on exact integer
 * arithmetic: each weight is first scaled, exactly, to an integer
 * u = round(w / max(w) * 2^63) (at least 1 for any w > 0), then the quota of
 * entry i out of a total T is T * u_i / sum(u), computed in 128 bits, so
 * floors and remainders are exact and every platform computes the same plan.
 * Each entry gets the floor of its quota, and the units left over go one each
 * to the largest remainders, ties to the lower index. Where a lower bound
 * applies (key ranges: at least one key each), the result minimises
 * sum((c_i - quota_i)^2) under that bound, ties again favouring lower indices.
 * The scaling moves a quota from its exact value T * w_i / sum(w) by less
 * than T * (n + 1) / 2^64 for n entries: nothing below 2^60, a few keys
 * for a 2^62 key space, so every size is within 1 + T * (n + 1) / 2^64 of
 * its exact quota (outside the lower bound).
 */
#ifndef DML_ASSIGN_H
#define DML_ASSIGN_H

#include <stdbool.h>
#include <stdint.h>

#include "shard/shardmap.h"

/** A partition that nobody holds, in a previous assignment. */
#define DML_ASSIGN_NONE UINT32_MAX

/**
 * Record range [*begin, *end) of data partition p of n records split into
 * parts partitions: [p*n/parts, (p+1)*n/parts), exact for any 64-bit n.
 * Needs p < parts (so parts >= 1).
 */
static inline void dml_partition_range(uint64_t n, uint32_t parts, uint32_t p,
				       uint64_t *begin, uint64_t *end)
{
	*begin = (uint64_t)((unsigned __int128)n * p / parts);
	*end = (uint64_t)((unsigned __int128)n * (p + 1) / parts);
}

/**
 * How many of npart equal data partitions each of nworkers workers should
 * process, in proportion to its measured rate.
 *
 * @param npart    number of partitions, at least 1
 * @param rates    nworkers measured rates (examples/s), finite and >= 0; the
 *                 rates of dead workers are ignored and may be anything
 * @param live     nworkers flags, false for a dead worker; NULL: all live
 * @param nworkers number of workers, at least 1
 * @param counts   out: nworkers counts, summing to exactly npart. counts[i]
 *                 is the largest-remainder rounding of npart * r_i / sum(r)
 *                 over live workers; dead and zero-rate workers get 0. If
 *                 every live rate is 0, the partitions are split evenly over
 *                 the live workers (the first npart % nlive get one more).
 * @return 0, or DML_EINVAL for a null pointer, npart or nworkers 0, a live
 *         rate that is negative, NaN or infinite, or no live worker.
 */
int dml_assign_partition_counts(uint64_t npart, const double *rates, const bool *live,
				uint32_t nworkers, uint64_t *counts);

/**
 * Per-worker batch sizes for a clock (LB-BSP): a global batch of total
 * examples split in proportion to the workers' compute rates, so that every
 * worker's step takes about as long.
 *
 * The split is the largest-remainder rounding of dml_assign_partition_counts
 * with two bounds: every live worker gets at least 1 example, and none more
 * than cap (its buffers must hold the batch); what a capped worker cannot
 * take goes to the others in proportion to their rates, so the sizes sum to
 * total unless every live worker is capped (then to cap x live workers).
 *
 * @param total    global batch, at least the number of live workers
 * @param rates    as for dml_assign_partition_counts (0 for all: equal split)
 * @param live     nworkers flags, false for a dead worker; NULL: all live
 * @param nworkers number of workers, at least 1
 * @param cap      largest batch of one worker, at least 1
 * @param sizes    out: nworkers sizes; dead workers get 0
 * @return 0, or DML_EINVAL as dml_assign_partition_counts, or for cap 0 or
 *         total below the number of live workers.
 */
int dml_assign_batch_sizes(uint64_t total, const double *rates, const bool *live,
			   uint32_t nworkers, uint64_t cap, uint64_t *sizes);

/**
 * Which partitions each worker gets, given how many (from
 * dml_assign_partition_counts) and who held what before.
 *
 * Movement is minimal: worker i keeps min(counts[i], partitions it held) of
 * its previous partitions, so exactly npart - sum_i min(counts[i], held_i)
 * partitions change owner (a partition nobody held counts as moved), which
 * no assignment with these counts can beat. A worker with a surplus keeps
 * its longest previous runs, and gives up the end of a run that borders a
 * worker that needs more; freed partitions go first to the worker that
 * holds the partition next to them, then, in index order, to the
 * lowest-indexed worker that still needs some. Without a previous
 * assignment, worker 0 gets the first counts[0] partitions, worker 1 the
 * next counts[1], and so on: one contiguous block each.
 *
 * @param npart    number of partitions, at least 1
 * @param counts   nworkers counts summing to exactly npart
 * @param nworkers number of workers, 1 to DML_ASSIGN_NONE - 1
 * @param prev     npart previous owners (worker index or DML_ASSIGN_NONE),
 *                 or NULL for a fresh assignment; not modified
 * @param owner    out: npart owners; must not be the prev array
 * @return 0; DML_EINVAL for a null pointer, a zero size, counts that do not
 *         sum to npart, a previous owner out of range, or owner == prev;
 *         DML_ENOMEM if scratch for the previous runs cannot be allocated.
 */
int dml_assign_partitions(uint64_t npart, const uint64_t *counts, uint32_t nworkers,
			  const uint32_t *prev, uint32_t *owner);

/**
 * How far the current counts are from the ideal ones, as load imbalance.
 *
 * The ideal counts are proportional to the workers' rates, so the load
 * (time per clock) of worker i is proportional to L_i = current[i] /
 * ideal[i]. Over the K workers with ideal[i] > 0, with m = (1/K) sum L_i:
 *
 *     deviation = max_i |L_i / m - 1|
 *
 * 0 means perfectly balanced; 0.1 means some worker is 10% away from the
 * mean load. It is HUGE_VAL (infinite) when a worker whose ideal count is 0
 * (dead or zero rate) still holds partitions, or when nobody holds any.
 * Using ideal counts rather than raw rates means that adopting the ideal
 * counts always brings the deviation to 0, so rounding alone can never keep
 * a rebalance going forever.
 *
 * @return 0, or DML_EINVAL for a null pointer, n 0 or no ideal count > 0.
 */
int dml_assign_load_deviation(const uint64_t *current, const uint64_t *ideal, uint32_t n,
			      double *deviation);

/**
 * Hysteresis for rebalancing: *rebalance is set to 1 when the deviation of
 * dml_assign_load_deviation() is strictly greater than threshold (e.g. 0.1
 * for 10%), else to 0.
 *
 * @return 0, or DML_EINVAL as dml_assign_load_deviation() or for a threshold
 *         that is negative, NaN or infinite.
 */
int dml_assign_should_rebalance(const uint64_t *current, const uint64_t *ideal, uint32_t n,
				double threshold, int *rebalance);

/**
 * Split [0, space) into contiguous ranges, one per server in server order,
 * in proportion to capacity weights (memory, bandwidth, ...).
 *
 * Pass the table's key count for a dense table or DML_SHARD_HASH_SPACE for a
 * sparse one. Range sizes sum to exactly space; size j is the
 * largest-remainder rounding of space * w_j / sum(w), and when space >=
 * nservers every server gets at least one key (taken from the servers most
 * above their quota). When space < nservers, some servers get nothing and
 * have no range. Each output range suits dml_shard_map_add().
 *
 * @param space    size of the key or hash space, at least 1
 * @param weights  nservers weights, finite and > 0
 * @param nservers number of servers, at least 1
 * @param ranges   out: room for nservers ranges; the first *nranges are
 *                 filled, sorted by begin, covering [0, space) exactly
 * @param nranges  out: number of ranges written (nservers when space >=
 *                 nservers)
 * @return 0, or DML_EINVAL for a null pointer, space or nservers 0, or a
 *         weight that is not finite and > 0.
 */
int dml_assign_key_ranges(uint64_t space, const double *weights, uint32_t nservers,
			  struct dml_shard_range *ranges, uint32_t *nranges);

/**
 * A worker's seconds at its own work from its cumulative figures: its
 * steps' computing, and its waits less what the servers held its pulls for
 * other workers' clocks (what is left is its own communication).
 */
static inline double dml_work_s(double compute_s, double wait_s, double held_s)
{
	return compute_s + (held_s < wait_s ? wait_s - held_s : 0);
}

/**
 * How long a worker was busy over a stretch in which it worked work_s
 * (dml_work_s) and used cpu_s of CPU time with cores to use (0: not
 * known): the longer of the two. Under a CPU quota a step that fits in the
 * period's budget runs at full speed and the wait for other workers lets
 * the budget refill, so wall time alone shows a quota'd worker as fast as
 * an unlimited one; its CPU time over its cores is what its work costs.
 */
static inline double dml_busy_s(double work_s, double cpu_s, double cores)
{
	return cores > 0 && cpu_s / cores > work_s ? cpu_s / cores : work_s;
}

/**
 * Load spread of one clock, for reports: with times[i] the compute time of
 * worker i in that clock,
 *
 *     spread = (max - min) / (2 * mean) * 100
 *
 * so that every time lies within mean ± spread% when the extremes are
 * symmetric around the mean ("± 5%"). 0 when all times are equal or all 0.
 *
 * @return 0, or DML_EINVAL for a null pointer, n 0 or a time that is
 *         negative, NaN or infinite.
 */
int dml_assign_load_spread(const double *times, uint32_t n, double *spread_pct);

#endif
