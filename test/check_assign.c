/*
 * Unit tests of the heterogeneity-aware assigner: proportional partition
 * counts and their rounding, minimal-movement reassignment, key ranges by
 * capacity (tiny and huge spaces), the rebalance hysteresis and the load
 * spread. Small cases are checked against brute force.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/assign.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "shard/shardmap.h"
#include "proto/util.h"

#define assert_einval(call) ck_assert_int_eq((call), DML_EINVAL)

/* Deterministic generator so failures reproduce. */
static uint64_t rng_state;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Uniform in [0, 1). */
static double rng_unit(void)
{
	return (double)(rng_next() >> 11) / 9007199254740992.0;
}

static void check_counts(uint64_t npart, const double *rates, const bool *live, uint32_t n,
			 const uint64_t *expect)
{
	uint64_t got[16];

	ck_assert_uint_le(n, 16);
	ck_assert_int_eq(dml_assign_partition_counts(npart, rates, live, n, got), 0);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == expect[i], "npart %llu worker %u: got %llu, want %llu",
			      (unsigned long long)npart, i, (unsigned long long)got[i],
			      (unsigned long long)expect[i]);
}

START_TEST(counts_proportional_to_rate)
{
	check_counts(90, (double[]){ 1, 1, 0.25 }, NULL, 3, (uint64_t[]){ 40, 40, 10 });
	check_counts(100, (double[]){ 1, 2, 3, 4 }, NULL, 4, (uint64_t[]){ 10, 20, 30, 40 });
	/* Scale does not matter, only ratios. */
	check_counts(90, (double[]){ 4e9, 4e9, 1e9 }, NULL, 3, (uint64_t[]){ 40, 40, 10 });
	check_counts(90, (double[]){ 4e-300, 4e-300, 1e-300 }, NULL, 3,
		     (uint64_t[]){ 40, 40, 10 });
}
END_TEST

START_TEST(counts_largest_remainder_and_ties)
{
	/* Quotas 14.29, 28.57, 57.14: the one spare unit goes to .57. */
	check_counts(100, (double[]){ 1, 2, 4 }, NULL, 3, (uint64_t[]){ 14, 29, 57 });
	/* Quotas 2.86, 2.86, 4.29: two spare units to the two .86. */
	check_counts(10, (double[]){ 1, 1, 1.5 }, NULL, 3, (uint64_t[]){ 3, 3, 4 });
	/* Equal remainders: lower index first. */
	check_counts(10, (double[]){ 1, 1, 1 }, NULL, 3, (uint64_t[]){ 4, 3, 3 });
	check_counts(2, (double[]){ 1, 1, 1 }, NULL, 3, (uint64_t[]){ 1, 1, 0 });
	check_counts(1, (double[]){ 5, 5, 5, 5 }, NULL, 4, (uint64_t[]){ 1, 0, 0, 0 });
	/* Quotas .75, 1.5, 2.25, 1.5: worker 0 first, then 1 wins its tie with 3. */
	check_counts(6, (double[]){ 1, 2, 3, 2 }, NULL, 4, (uint64_t[]){ 1, 2, 2, 1 });
}
END_TEST

START_TEST(counts_one_worker)
{
	check_counts(1, (double[]){ 3.5 }, NULL, 1, (uint64_t[]){ 1 });
	check_counts(1000003, (double[]){ 3.5 }, NULL, 1, (uint64_t[]){ 1000003 });
	check_counts(7, (double[]){ 0 }, NULL, 1, (uint64_t[]){ 7 });
	check_counts(UINT64_MAX, (double[]){ 1 }, NULL, 1, (uint64_t[]){ UINT64_MAX });
}
END_TEST

START_TEST(counts_zero_rate_and_dead_workers)
{
	bool live[] = { true, false, true, true };

	check_counts(10, (double[]){ 2, 0, 2 }, NULL, 3, (uint64_t[]){ 5, 0, 5 });
	check_counts(10, (double[]){ 1, 1, 1, 0 }, live, 4, (uint64_t[]){ 5, 0, 5, 0 });
	/* A dead worker's rate is ignored, whatever it is. */
	check_counts(10, (double[]){ 1, NAN, 1, 0 }, live, 4, (uint64_t[]){ 5, 0, 5, 0 });
	check_counts(10, (double[]){ 1, -1, 1, 0 }, live, 4, (uint64_t[]){ 5, 0, 5, 0 });
	/* A worker far slower than the rest still has a quota, just under 1. */
	check_counts(10, (double[]){ 1, 1, 1e-300 }, NULL, 3, (uint64_t[]){ 5, 5, 0 });
}
END_TEST

START_TEST(counts_all_zero_split_evenly)
{
	bool live[] = { true, false, true, true };

	check_counts(10, (double[]){ 0, 0, 0 }, NULL, 3, (uint64_t[]){ 4, 3, 3 });
	check_counts(10, (double[]){ 0, 9, 0, 0 }, live, 4, (uint64_t[]){ 4, 0, 3, 3 });
	check_counts(2, (double[]){ 0, 0, 0, 0 }, live, 4, (uint64_t[]){ 1, 0, 1, 0 });
}
END_TEST

START_TEST(counts_reject_bad_input)
{
	bool none_live[] = { false, false };
	double ok[] = { 1, 1 };
	uint64_t c[2];

	assert_einval(dml_assign_partition_counts(10, ok, none_live, 2, c));
	assert_einval(dml_assign_partition_counts(10, (double[]){ 0, 0 }, none_live, 2, c));
	assert_einval(dml_assign_partition_counts(0, ok, NULL, 2, c));
	assert_einval(dml_assign_partition_counts(10, ok, NULL, 0, c));
	assert_einval(dml_assign_partition_counts(10, NULL, NULL, 2, c));
	assert_einval(dml_assign_partition_counts(10, ok, NULL, 2, NULL));
	assert_einval(dml_assign_partition_counts(10, (double[]){ 1, -0.5 }, NULL, 2, c));
	assert_einval(dml_assign_partition_counts(10, (double[]){ 1, NAN }, NULL, 2, c));
	assert_einval(dml_assign_partition_counts(10, (double[]){ INFINITY, 1 }, NULL, 2, c));
}
END_TEST

/* dml_assign_batch_sizes(total, rates, live, n, cap) must give expect. */
static void check_batches(uint64_t total, const double *rates, const bool *live, uint32_t n,
			  uint64_t cap, const uint64_t *expect)
{
	uint64_t got[16];

	ck_assert_uint_le(n, 16);
	ck_assert_int_eq(dml_assign_batch_sizes(total, rates, live, n, cap, got), 0);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_msg(got[i] == expect[i], "total %llu cap %llu worker %u: got %llu, "
			      "want %llu", (unsigned long long)total, (unsigned long long)cap,
			      i, (unsigned long long)got[i], (unsigned long long)expect[i]);
}

START_TEST(batches_proportional_to_compute_rate)
{
	bool live[] = { true, false, true };

	/* The fleet: 0.6, 0.6 and 0.15 of a core, batch 64 each. */
	check_batches(192, (double[]){ 0.6, 0.6, 0.15 }, NULL, 3, 256,
		      (uint64_t[]){ 86, 85, 21 });
	check_batches(100, (double[]){ 1, 2, 3, 4 }, NULL, 4, 400,
		      (uint64_t[]){ 10, 20, 30, 40 });
	/* Equal rates, or none measured: batch_size each, as before. */
	check_batches(192, (double[]){ 5, 5, 5 }, NULL, 3, 256, (uint64_t[]){ 64, 64, 64 });
	check_batches(192, (double[]){ 0, 0, 0 }, NULL, 3, 256, (uint64_t[]){ 64, 64, 64 });
	/* The dead get nothing, whatever their rate says. */
	check_batches(128, (double[]){ 1, NAN, 3 }, live, 3, 256, (uint64_t[]){ 32, 0, 96 });
}
END_TEST

START_TEST(batches_at_least_one_and_capped)
{
	/* A worker at (almost) zero rate still takes one example a clock. */
	check_batches(192, (double[]){ 1, 1, 1e-300 }, NULL, 3, 256,
		      (uint64_t[]){ 96, 95, 1 });
	check_batches(3, (double[]){ 1, 0, 0 }, NULL, 3, 8, (uint64_t[]){ 1, 1, 1 });
	/* One worker far faster than the rest is held at the cap; what it
	 * cannot take goes to the others by their rates. */
	check_batches(256, (double[]){ 100, 1, 1, 2 }, NULL, 4, 128,
		      (uint64_t[]){ 128, 32, 32, 64 });
	/* Caps that bind in turn: 60 at first wants 3 x 60 but only cap. */
	check_batches(100, (double[]){ 8, 4, 1, 1 }, NULL, 4, 40,
		      (uint64_t[]){ 40, 40, 10, 10 });
	/* Everyone capped: the sum falls short of total. */
	check_batches(100, (double[]){ 1, 2 }, NULL, 2, 10, (uint64_t[]){ 10, 10 });
}
END_TEST

START_TEST(batches_reject_bad_input)
{
	double ok[] = { 1, 1 };
	uint64_t c[2];

	assert_einval(dml_assign_batch_sizes(0, ok, NULL, 2, 8, c));
	assert_einval(dml_assign_batch_sizes(1, ok, NULL, 2, 8, c));
	assert_einval(dml_assign_batch_sizes(8, ok, NULL, 2, 0, c));
	assert_einval(dml_assign_batch_sizes(8, ok, NULL, 0, 8, c));
	assert_einval(dml_assign_batch_sizes(8, NULL, NULL, 2, 8, c));
	assert_einval(dml_assign_batch_sizes(8, ok, NULL, 2, 8, NULL));
	assert_einval(dml_assign_batch_sizes(8, (double[]){ 1, NAN }, NULL, 2, 8, c));
	assert_einval(dml_assign_batch_sizes(8, ok, (bool[]){ false, false }, 2, 8, c));
}
END_TEST

/*
 * Brute force: the smallest sum((c - quota)^2) over every split of total into
 * n parts, each part >= lo (where its weight is > 0) and 0 where weight is 0.
 */
static long double best_cost(uint64_t total, const double *w, uint32_t n, uint64_t lo,
			     uint32_t i, uint64_t left, long double cost, long double wsum)
{
	long double best = INFINITY;

	if (i == n)
		return left == 0 ? cost : INFINITY;
	for (uint64_t c = w[i] > 0 ? lo : 0; c <= (w[i] > 0 ? left : 0); c++) {
		long double q = (long double)total * w[i] / wsum, d = c - q;
		long double r = best_cost(total, w, n, lo, i + 1, left - c, cost + d * d, wsum);

		if (r < best)
			best = r;
	}
	return best;
}

static long double cost_of(uint64_t total, const double *w, uint32_t n, const uint64_t *c)
{
	long double wsum = 0, cost = 0;

	for (uint32_t i = 0; i < n; i++)
		wsum += w[i];
	for (uint32_t i = 0; i < n; i++) {
		long double d = c[i] - (long double)total * w[i] / wsum;

		cost += d * d;
	}
	return cost;
}

/* Sizes per server from key ranges, checking they tile [0, space) in order. */
static void range_sizes(uint64_t space, const struct dml_shard_range *r, uint32_t nr,
			uint32_t nservers, uint64_t *size)
{
	uint64_t next = 0;

	for (uint32_t j = 0; j < nservers; j++)
		size[j] = 0;
	for (uint32_t k = 0; k < nr; k++) {
		ck_assert_uint_eq(r[k].begin, next);
		ck_assert_uint_gt(r[k].end, r[k].begin);
		ck_assert_uint_lt(r[k].server, nservers);
		ck_assert_uint_eq(size[r[k].server], 0);
		if (k > 0)
			ck_assert_uint_gt(r[k].server, r[k - 1].server);
		size[r[k].server] = r[k].end - r[k].begin;
		next = r[k].end;
	}
	ck_assert_uint_eq(next, space);
}

static const double pool[] = { 1, 2, 3, 0.5, 1e-6, 7, 0.3333 };

START_TEST(counts_match_brute_force)
{
	rng_state = 0x9e3779b97f4a7c15u;
	for (int trial = 0; trial < 400; trial++) {
		uint32_t n = 1 + rng_next() % 4;
		uint64_t npart = 1 + rng_next() % 9, c[4], sum = 0;
		double w[4], wsum = 0;

		for (uint32_t i = 0; i < n; i++) {
			w[i] = rng_next() % 4 ? pool[rng_next() % DML_ARRAY_LEN(pool)] : 0;
			wsum += w[i];
		}
		if (wsum == 0) {
			w[0] = 1;
			wsum = 1;
		}
		ck_assert_int_eq(dml_assign_partition_counts(npart, w, NULL, n, c), 0);
		for (uint32_t i = 0; i < n; i++) {
			if (w[i] == 0)
				ck_assert_uint_eq(c[i], 0);
			sum += c[i];
		}
		ck_assert_uint_eq(sum, npart);
		ck_assert(cost_of(npart, w, n, c) <=
			  best_cost(npart, w, n, 0, 0, npart, 0, wsum) + 1e-9L);
	}
}
END_TEST

START_TEST(key_ranges_match_brute_force)
{
	rng_state = 0x243f6a8885a308d3u;
	for (int trial = 0; trial < 400; trial++) {
		uint32_t n = 1 + rng_next() % 4, nr;
		uint64_t space = 1 + rng_next() % 9, size[4];
		double w[4], wsum = 0;
		struct dml_shard_range r[4];

		for (uint32_t i = 0; i < n; i++) {
			w[i] = pool[rng_next() % DML_ARRAY_LEN(pool)];
			wsum += w[i];
		}
		ck_assert_int_eq(dml_assign_key_ranges(space, w, n, r, &nr), 0);
		range_sizes(space, r, nr, n, size);
		if (space >= n) {
			ck_assert_uint_eq(nr, n);
			ck_assert(cost_of(space, w, n, size) <=
				  best_cost(space, w, n, 1, 0, space, 0, wsum) + 1e-9L);
		} else {
			ck_assert_uint_le(nr, space);
			ck_assert(cost_of(space, w, n, size) <=
				  best_cost(space, w, n, 0, 0, space, 0, wsum) + 1e-9L);
		}
	}
}
END_TEST

static uint64_t count_moved(uint64_t npart, const uint32_t *prev, const uint32_t *owner)
{
	uint64_t moved = 0;

	for (uint64_t p = 0; p < npart; p++)
		moved += prev[p] != owner[p];
	return moved;
}

/* What no assignment with these counts can beat: npart - sum min(c_i, held_i). */
static uint64_t min_moves(uint64_t npart, const uint32_t *prev, const uint64_t *counts,
			  uint32_t n)
{
	uint64_t *held = calloc(n, sizeof(*held)), kept = 0;

	ck_assert_ptr_nonnull(held);
	for (uint64_t p = 0; p < npart; p++)
		if (prev[p] != DML_ASSIGN_NONE)
			held[prev[p]]++;
	for (uint32_t i = 0; i < n; i++)
		kept += counts[i] < held[i] ? counts[i] : held[i];
	free(held);
	return npart - kept;
}

/* Each worker holds exactly counts[i] partitions; returns the number of runs. */
static uint64_t check_owner(uint64_t npart, const uint32_t *owner, const uint64_t *counts,
			    uint32_t n)
{
	uint64_t *tally = calloc(n, sizeof(*tally)), runs = 0, bad = 0;

	/* Each ck_assert costs a message to the parent: one per check, not per item. */
	ck_assert_ptr_nonnull(tally);
	for (uint64_t p = 0; p < npart; p++) {
		if (owner[p] >= n) {
			bad++;
			continue;
		}
		tally[owner[p]]++;
		runs += p == 0 || owner[p] != owner[p - 1];
	}
	ck_assert_uint_eq(bad, 0);
	for (uint32_t i = 0; i < n; i++)
		bad += tally[i] != counts[i];
	ck_assert_uint_eq(bad, 0);
	free(tally);
	return runs;
}

START_TEST(assign_fresh_is_contiguous_blocks)
{
	uint64_t counts[] = { 3, 0, 4, 2 };
	uint32_t owner[9], want[] = { 0, 0, 0, 2, 2, 2, 2, 3, 3 };

	ck_assert_int_eq(dml_assign_partitions(9, counts, 4, NULL, owner), 0);
	for (int p = 0; p < 9; p++)
		ck_assert_uint_eq(owner[p], want[p]);
	ck_assert_uint_eq(check_owner(9, owner, counts, 4), 3);
}
END_TEST

START_TEST(assign_moves_only_the_surplus)
{
	/* 30/30/30 blocks, rates measured as 1, 1, 0.25: counts 40/40/10. */
	uint64_t counts[3];
	uint32_t prev[90], owner[90];

	ck_assert_int_eq(dml_assign_partition_counts(90, (double[]){ 1, 1, 0.25 }, NULL, 3,
						      counts), 0);
	for (int p = 0; p < 90; p++)
		prev[p] = p / 30;
	ck_assert_int_eq(dml_assign_partitions(90, counts, 3, prev, owner), 0);
	check_owner(90, owner, counts, 3);
	ck_assert_uint_eq(count_moved(90, prev, owner), 20);
	ck_assert_uint_eq(min_moves(90, prev, counts, 3), 20);
	/* Worker 2 gives up the end next to worker 1, which grows into it. */
	for (int p = 0; p < 30; p++)
		ck_assert_uint_eq(owner[p], 0);
	for (int p = 30; p < 70; p++)
		ck_assert_uint_eq(owner[p], 1);
	for (int p = 70; p < 80; p++)
		ck_assert_uint_eq(owner[p], 0);
	for (int p = 80; p < 90; p++)
		ck_assert_uint_eq(owner[p], 2);
	/* Same counts again: nothing moves. */
	memcpy(prev, owner, sizeof(prev));
	ck_assert_int_eq(dml_assign_partitions(90, counts, 3, prev, owner), 0);
	ck_assert_uint_eq(count_moved(90, prev, owner), 0);
}
END_TEST

START_TEST(assign_dead_worker_and_unowned_partitions)
{
	/* Worker 1 died holding [4, 8); partitions 10, 11 were never held. */
	uint32_t prev[12] = { 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, DML_ASSIGN_NONE,
			      DML_ASSIGN_NONE };
	uint32_t owner[12];
	uint64_t counts[3];
	bool live[] = { true, false, true };

	ck_assert_int_eq(dml_assign_partition_counts(12, (double[]){ 1, 1, 1 }, live, 3,
						      counts), 0);
	ck_assert_uint_eq(counts[0], 6);
	ck_assert_uint_eq(counts[1], 0);
	ck_assert_uint_eq(counts[2], 6);
	ck_assert_int_eq(dml_assign_partitions(12, counts, 3, prev, owner), 0);
	check_owner(12, owner, counts, 3);
	ck_assert_uint_eq(count_moved(12, prev, owner), 6);
	ck_assert_uint_eq(min_moves(12, prev, counts, 3), 6);
	/* Both survivors grow into the gap from their own side: two runs. */
	ck_assert_uint_eq(check_owner(12, owner, counts, 3), 2);
}
END_TEST

START_TEST(assign_random_previous_moves_minimum)
{
	enum { P = 500, W = 7 };
	uint32_t prev[P], owner[P];

	rng_state = 0x13198a2e03707344u;
	for (int trial = 0; trial < 200; trial++) {
		double rates[W];
		uint64_t counts[W];
		bool scattered = trial % 2;

		for (int i = 0; i < W; i++)
			rates[i] = rng_next() % 5 ? rng_unit() * 10 : 0;
		for (int p = 0; p < P; p++) {
			if (rng_next() % 10 == 0)
				prev[p] = DML_ASSIGN_NONE;
			else
				prev[p] = scattered ? (uint32_t)(rng_next() % W)
						    : (uint32_t)(p * W / P);
		}
		ck_assert_int_eq(dml_assign_partition_counts(P, rates, NULL, W, counts), 0);
		ck_assert_int_eq(dml_assign_partitions(P, counts, W, prev, owner), 0);
		check_owner(P, owner, counts, W);
		ck_assert_uint_eq(count_moved(P, prev, owner), min_moves(P, prev, counts, W));
	}
}
END_TEST

START_TEST(assign_reject_bad_input)
{
	uint64_t counts[] = { 2, 2 };
	uint32_t prev[4] = { 0, 1, 2, 0 }, owner[4];

	assert_einval(dml_assign_partitions(4, counts, 2, prev, owner));
	assert_einval(dml_assign_partitions(5, counts, 2, NULL, owner));
	assert_einval(dml_assign_partitions(3, counts, 2, NULL, owner));
	assert_einval(dml_assign_partitions(4, (uint64_t[]){ UINT64_MAX, 5 }, 2, NULL, owner));
	assert_einval(dml_assign_partitions(0, counts, 2, NULL, owner));
	assert_einval(dml_assign_partitions(4, counts, 0, NULL, owner));
	assert_einval(dml_assign_partitions(4, counts, 2, NULL, NULL));
	prev[2] = 1;
	assert_einval(dml_assign_partitions(4, counts, 2, prev, prev));
	ck_assert_int_eq(dml_assign_partitions(4, counts, 2, prev, owner), 0);
}
END_TEST

START_TEST(assign_10k_workers_1m_partitions)
{
	enum { W = 10000 };
	const uint64_t P = 1000000;
	double *rates = malloc(W * sizeof(*rates));
	uint64_t *counts = malloc(W * sizeof(*counts)), sum = 0, t0, t1, t2;
	uint32_t *prev = malloc(P * sizeof(*prev)), *owner = malloc(P * sizeof(*owner));
	bool *live = malloc(W * sizeof(*live));

	ck_assert(rates && counts && prev && owner && live);
	rng_state = 0xa4093822299f31d0u;
	for (int i = 0; i < W; i++) {
		rates[i] = 100 + rng_unit() * 900;
		live[i] = true;
	}
	t0 = dml_now_ns();
	ck_assert_int_eq(dml_assign_partition_counts(P, rates, live, W, counts), 0);
	ck_assert_int_eq(dml_assign_partitions(P, counts, W, NULL, prev), 0);
	t1 = dml_now_ns();
	for (int i = 0; i < W; i++)
		sum += counts[i];
	ck_assert_uint_eq(sum, P);
	ck_assert_uint_eq(check_owner(P, prev, counts, W), W);
	/* Re-measure: every rate drifts by up to 20%, one worker in 100 dies. */
	for (int i = 0; i < W; i++) {
		rates[i] *= 0.8 + 0.4 * rng_unit();
		live[i] = rng_next() % 100 != 0;
	}
	t2 = dml_now_ns();
	ck_assert_int_eq(dml_assign_partition_counts(P, rates, live, W, counts), 0);
	ck_assert_int_eq(dml_assign_partitions(P, counts, W, prev, owner), 0);
	t2 = dml_now_ns() - t2;
	check_owner(P, owner, counts, W);
	ck_assert_uint_eq(count_moved(P, prev, owner), min_moves(P, prev, counts, W));
	printf("assign: %d workers, %llu partitions: fresh plan %.1f ms, rebalance %.1f ms, "
	       "%llu partitions moved, %llu runs\n", W, (unsigned long long)P, (t1 - t0) / 1e6,
	       t2 / 1e6, (unsigned long long)count_moved(P, prev, owner),
	       (unsigned long long)check_owner(P, owner, counts, W));
	free(rates);
	free(counts);
	free(prev);
	free(owner);
	free(live);
}
END_TEST

static void check_ranges(uint64_t space, const double *w, uint32_t n, const uint64_t *expect)
{
	struct dml_shard_range r[8];
	uint64_t size[8];
	uint32_t nr;

	ck_assert_uint_le(n, 8);
	ck_assert_int_eq(dml_assign_key_ranges(space, w, n, r, &nr), 0);
	range_sizes(space, r, nr, n, size);
	for (uint32_t j = 0; j < n; j++)
		ck_assert_msg(size[j] == expect[j], "space %llu server %u: got %llu, want %llu",
			      (unsigned long long)space, j, (unsigned long long)size[j],
			      (unsigned long long)expect[j]);
}

START_TEST(key_ranges_small_spaces)
{
	/* As many keys as servers: one each, however unequal the weights. */
	check_ranges(4, (double[]){ 1e-6, 1, 1, 1 }, 4, (uint64_t[]){ 1, 1, 1, 1 });
	check_ranges(4, (double[]){ 1, 1e-6, 1e-6, 1e-6 }, 4, (uint64_t[]){ 1, 1, 1, 1 });
	/* One more: the largest remainder, lowest index on a tie. */
	check_ranges(5, (double[]){ 1, 1, 1, 1 }, 4, (uint64_t[]){ 2, 1, 1, 1 });
	check_ranges(5, (double[]){ 1e-6, 1, 1, 1 }, 4, (uint64_t[]){ 1, 2, 1, 1 });
	check_ranges(5, (double[]){ 1, 1, 1, 3 }, 4, (uint64_t[]){ 1, 1, 1, 2 });
	/* Fewer keys than servers: some servers get no range. */
	check_ranges(2, (double[]){ 1, 1, 1, 1 }, 4, (uint64_t[]){ 1, 1, 0, 0 });
	check_ranges(1, (double[]){ 1, 5, 1 }, 3, (uint64_t[]){ 0, 1, 0 });
	check_ranges(1, (double[]){ 2.5 }, 1, (uint64_t[]){ 1 });
}
END_TEST

START_TEST(key_ranges_very_unequal_weights)
{
	/* Quota of the small one is 2e-6: raised to one key, taken from the big. */
	check_ranges(2, (double[]){ 1e-6, 1 }, 2, (uint64_t[]){ 1, 1 });
	check_ranges(1000000, (double[]){ 1e-6, 1 }, 2, (uint64_t[]){ 1, 999999 });
	check_ranges(1000000, (double[]){ 1, 1e-6 }, 2, (uint64_t[]){ 999999, 1 });
	/* Five tiny servers, one big: each tiny one still gets a key. */
	check_ranges(6, (double[]){ 1e-6, 1e-6, 1, 1e-6, 1e-6, 1e-6 }, 6,
		     (uint64_t[]){ 1, 1, 1, 1, 1, 1 });
	check_ranges(10, (double[]){ 1e-6, 1e-6, 1, 1e-6, 1e-6, 1e-6 }, 6,
		     (uint64_t[]){ 1, 1, 5, 1, 1, 1 });
	/* Two big ones pay for the tiny ones' keys: one each, then a tie. */
	check_ranges(10, (double[]){ 1, 1, 1e-6, 1e-6, 1e-6, 1e-6 }, 6,
		     (uint64_t[]){ 3, 3, 1, 1, 1, 1 });
	check_ranges(8, (double[]){ 1, 1, 1e-6, 1e-6, 1e-6 }, 5, (uint64_t[]){ 3, 2, 1, 1, 1 });
	/* 1e12 keys: 1e6 keys for the small one, within rounding. */
	check_ranges(1000000000000u + 1000000u, (double[]){ 1e-6, 1 }, 2,
		     (uint64_t[]){ 1000000, 1000000000000u });
	check_ranges(DML_SHARD_HASH_SPACE, (double[]){ 1e-300, 1 }, 2,
		     (uint64_t[]){ 1, DML_SHARD_HASH_SPACE - 1 });
}
END_TEST

/*
 * Huge spaces: exact coverage, and each size within the bound assign.h
 * promises, 1 + space * (n + 1) / 2^64, of its exact quota (plus 1 for the
 * error of the long double reference itself).
 */
static void check_huge(uint64_t space, const double *w, uint32_t n)
{
	struct dml_shard_range r[8];
	uint64_t size[8], sum = 0;
	long double wsum = 0, tol = 2 + ldexpl((long double)space * (n + 1), -64);
	uint32_t nr;

	ck_assert_int_eq(dml_assign_key_ranges(space, w, n, r, &nr), 0);
	ck_assert_uint_eq(nr, n);
	range_sizes(space, r, nr, n, size);
	for (uint32_t j = 0; j < n; j++)
		wsum += w[j];
	for (uint32_t j = 0; j < n; j++) {
		long double q = (long double)space * w[j] / wsum;

		ck_assert_msg(fabsl(size[j] - q) <= tol, "space %llu server %u: %llu vs %Lf",
			      (unsigned long long)space, j, (unsigned long long)size[j], q);
		ck_assert_uint_le(size[j], space - sum);
		sum += size[j];
	}
	ck_assert_uint_eq(sum, space);
}

START_TEST(key_ranges_huge_spaces)
{
	const uint64_t big = UINT64_C(1) << 62;

	check_huge(big, (double[]){ 1, 2, 3 }, 3);
	check_huge(big, (double[]){ 1e-6, 1 }, 2);
	check_huge(big, (double[]){ 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8 }, 8);
	check_huge(UINT64_MAX, (double[]){ 1, 1, 1 }, 3);
	check_huge(UINT64_MAX, (double[]){ 3, 1e-9, 7.25 }, 3);
	check_huge(DML_SHARD_HASH_SPACE, (double[]){ 64e9, 16e9, 32e9 }, 3);
	check_huge(DML_SHARD_HASH_SPACE, (double[]){ 1, 1, 1, 1, 1, 1, 1 }, 7);
}
END_TEST

START_TEST(key_ranges_equal_weights_match_even_split)
{
	uint64_t spaces[] = { 5, 1000003, DML_SHARD_HASH_SPACE, UINT64_C(1) << 62 };
	double w[5] = { 2, 2, 2, 2, 2 };
	struct dml_shard_range r[5];

	for (size_t s = 0; s < DML_ARRAY_LEN(spaces); s++) {
		for (uint32_t n = 1; n <= 5; n++) {
			uint32_t nr;

			ck_assert_int_eq(dml_assign_key_ranges(spaces[s], w, n, r, &nr), 0);
			ck_assert_uint_eq(nr, n);
			for (uint32_t j = 0; j < n; j++) {
				uint64_t b, e;

				dml_shard_even_range(spaces[s], j, n, &b, &e);
				ck_assert_uint_eq(r[j].begin, b);
				ck_assert_uint_eq(r[j].end, e);
				ck_assert_uint_eq(r[j].server, j);
			}
		}
	}
}
END_TEST

START_TEST(key_ranges_build_a_valid_shard_map)
{
	struct dml_shard_map m;
	struct dml_shard_range r[3];
	double w[] = { 4, 1, 2 };
	uint32_t nr;
	char err[128];

	dml_shard_map_init(&m, 3);
	ck_assert_int_eq(dml_assign_key_ranges(1000, w, 3, r, &nr), 0);
	for (uint32_t k = 0; k < nr; k++)
		ck_assert_int_eq(dml_shard_map_add(&m, r[k].server, 1, 1, 4, 1000, r[k].begin,
						   r[k].end, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_assign_key_ranges(DML_SHARD_HASH_SPACE, w, 3, r, &nr), 0);
	for (uint32_t k = 0; k < nr; k++)
		ck_assert_int_eq(dml_shard_map_add(&m, r[k].server, 2, 0, 8, 0, r[k].begin,
						   r[k].end, err, sizeof(err)), 0);
	ck_assert_int_eq(dml_shard_map_finish(&m, err, sizeof(err)), 0);
	/* Quotas 571.4, 142.9, 285.7: sizes 571, 143, 286. */
	ck_assert_uint_eq(dml_shard_route(dml_shard_map_table(&m, 1), 570)->server, 0);
	ck_assert_uint_eq(dml_shard_route(dml_shard_map_table(&m, 1), 571)->server, 1);
	ck_assert_uint_eq(dml_shard_route(dml_shard_map_table(&m, 1), 713)->server, 1);
	ck_assert_uint_eq(dml_shard_route(dml_shard_map_table(&m, 1), 714)->server, 2);
	dml_shard_map_destroy(&m);
}
END_TEST

START_TEST(key_ranges_reject_bad_input)
{
	struct dml_shard_range r[2];
	uint32_t nr;

	assert_einval(dml_assign_key_ranges(0, (double[]){ 1, 1 }, 2, r, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ 1, 1 }, 0, r, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ 1, 0 }, 2, r, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ 1, -1 }, 2, r, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ NAN, 1 }, 2, r, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ 1, INFINITY }, 2, r, &nr));
	assert_einval(dml_assign_key_ranges(10, NULL, 2, r, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ 1, 1 }, 2, NULL, &nr));
	assert_einval(dml_assign_key_ranges(10, (double[]){ 1, 1 }, 2, r, NULL));
}
END_TEST

START_TEST(rebalance_hysteresis)
{
	uint64_t ideal[] = { 8, 8, 0 };
	double dev;
	int yes;

	/* Loads 9/8 and 7/8 around a mean of 1: deviation exactly 0.125. */
	ck_assert_int_eq(dml_assign_load_deviation((uint64_t[]){ 9, 7, 0 }, ideal, 3, &dev), 0);
	ck_assert(dev == 0.125);
	ck_assert_int_eq(dml_assign_should_rebalance((uint64_t[]){ 9, 7, 0 }, ideal, 3, 0.125,
						     &yes), 0);
	ck_assert_int_eq(yes, 0);
	ck_assert_int_eq(dml_assign_should_rebalance((uint64_t[]){ 9, 7, 0 }, ideal, 3, 0.12,
						     &yes), 0);
	ck_assert_int_eq(yes, 1);
	/* At the ideal nothing is off, whatever the threshold. */
	ck_assert_int_eq(dml_assign_should_rebalance(ideal, ideal, 3, 0, &yes), 0);
	ck_assert_int_eq(yes, 0);
	/* Scale-free: loads 2, 2, 1 (mean 5/3): max deviation is 0.4. */
	ck_assert_int_eq(dml_assign_load_deviation((uint64_t[]){ 80, 80, 10 },
						   (uint64_t[]){ 40, 40, 10 }, 3, &dev), 0);
	ck_assert(fabs(dev - 0.4) < 1e-12);
	/* 30/30/30 against 40/40/10: loads .75 .75 3, mean 1.5, deviation 1. */
	ck_assert_int_eq(dml_assign_load_deviation((uint64_t[]){ 30, 30, 30 },
						   (uint64_t[]){ 40, 40, 10 }, 3, &dev), 0);
	ck_assert(fabs(dev - 1.0) < 1e-12);
	/* A dead worker still holding partitions: always rebalance. */
	ck_assert_int_eq(dml_assign_load_deviation((uint64_t[]){ 8, 8, 1 }, ideal, 3, &dev), 0);
	ck_assert(isinf(dev));
	ck_assert_int_eq(dml_assign_should_rebalance((uint64_t[]){ 8, 8, 1 }, ideal, 3, 1e300,
						     &yes), 0);
	ck_assert_int_eq(yes, 1);
	/* Nothing held at all. */
	ck_assert_int_eq(dml_assign_load_deviation((uint64_t[]){ 0, 0, 0 }, ideal, 3, &dev), 0);
	ck_assert(isinf(dev));
	/* Bad input. */
	assert_einval(dml_assign_load_deviation(ideal, (uint64_t[]){ 0, 0, 0 }, 3, &dev));
	assert_einval(dml_assign_load_deviation(ideal, ideal, 0, &dev));
	assert_einval(dml_assign_load_deviation(ideal, ideal, 3, NULL));
	assert_einval(dml_assign_should_rebalance(ideal, ideal, 3, -0.1, &yes));
	assert_einval(dml_assign_should_rebalance(ideal, ideal, 3, NAN, &yes));
	assert_einval(dml_assign_should_rebalance(ideal, ideal, 3, 0.1, NULL));
	assert_einval(dml_assign_should_rebalance(NULL, ideal, 3, 0.1, &yes));
}
END_TEST

START_TEST(load_spread_formula)
{
	double s;

	/* (11 - 9) / (2 * 10) = 10%. */
	ck_assert_int_eq(dml_assign_load_spread((double[]){ 9, 10, 11 }, 3, &s), 0);
	ck_assert(fabs(s - 10) < 1e-9);
	/* (4 - 1) / (2 * 2) = 75%. */
	ck_assert_int_eq(dml_assign_load_spread((double[]){ 1, 1, 2, 4 }, 4, &s), 0);
	ck_assert(fabs(s - 75) < 1e-9);
	ck_assert_int_eq(dml_assign_load_spread((double[]){ 3, 3 }, 2, &s), 0);
	ck_assert(s == 0);
	ck_assert_int_eq(dml_assign_load_spread((double[]){ 0, 0 }, 2, &s), 0);
	ck_assert(s == 0);
	ck_assert_int_eq(dml_assign_load_spread((double[]){ 7 }, 1, &s), 0);
	ck_assert(s == 0);
	/* Huge but finite times do not overflow: (1.5 - 0.5) / (2 * 1) = 50%. */
	ck_assert_int_eq(dml_assign_load_spread((double[]){ 1.5e308, 0.5e308 }, 2, &s), 0);
	ck_assert(fabs(s - 50) < 1e-9);
	assert_einval(dml_assign_load_spread((double[]){ 1, -1 }, 2, &s));
	assert_einval(dml_assign_load_spread((double[]){ 1, NAN }, 2, &s));
	assert_einval(dml_assign_load_spread((double[]){ INFINITY }, 1, &s));
	assert_einval(dml_assign_load_spread((double[]){ 1 }, 0, &s));
	assert_einval(dml_assign_load_spread(NULL, 1, &s));
	assert_einval(dml_assign_load_spread((double[]){ 1 }, 1, NULL));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("assign");
	TCase *counts = tcase_create("counts"), *assign = tcase_create("assign");
	TCase *ranges = tcase_create("key_ranges"), *load = tcase_create("load");

	tcase_add_test(counts, counts_proportional_to_rate);
	tcase_add_test(counts, counts_largest_remainder_and_ties);
	tcase_add_test(counts, counts_one_worker);
	tcase_add_test(counts, counts_zero_rate_and_dead_workers);
	tcase_add_test(counts, counts_all_zero_split_evenly);
	tcase_add_test(counts, counts_reject_bad_input);
	tcase_add_test(counts, counts_match_brute_force);
	tcase_add_test(counts, batches_proportional_to_compute_rate);
	tcase_add_test(counts, batches_at_least_one_and_capped);
	tcase_add_test(counts, batches_reject_bad_input);
	tcase_add_test(assign, assign_fresh_is_contiguous_blocks);
	tcase_add_test(assign, assign_moves_only_the_surplus);
	tcase_add_test(assign, assign_dead_worker_and_unowned_partitions);
	tcase_add_test(assign, assign_random_previous_moves_minimum);
	tcase_add_test(assign, assign_reject_bad_input);
	tcase_add_test(assign, assign_10k_workers_1m_partitions);
	/* The big plan's time is printed, never asserted: room for slow machines. */
	tcase_set_timeout(assign, 30);
	tcase_add_test(ranges, key_ranges_small_spaces);
	tcase_add_test(ranges, key_ranges_very_unequal_weights);
	tcase_add_test(ranges, key_ranges_huge_spaces);
	tcase_add_test(ranges, key_ranges_equal_weights_match_even_split);
	tcase_add_test(ranges, key_ranges_build_a_valid_shard_map);
	tcase_add_test(ranges, key_ranges_reject_bad_input);
	tcase_add_test(ranges, key_ranges_match_brute_force);
	tcase_add_test(load, rebalance_hysteresis);
	tcase_add_test(load, load_spread_formula);
	suite_add_tcase(s, counts);
	suite_add_tcase(s, assign);
	suite_add_tcase(s, ranges);
	suite_add_tcase(s, load);
	return dml_check_run(s);
}
