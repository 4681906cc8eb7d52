/*
 * The heterogeneity-aware assigner (see assign.h): proportional splits of
 * partitions and key ranges, minimal-movement reassignment, and the load
 * measures behind rebalancing decisions.
 * Must never do I/O, log, keep global state, or let a bad rate or weight
 * from a peer's profile reach an assert: inputs are checked at the door.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "shard/assign.h"
#include "proto/dml_error.h"
#include "proto/util.h"

#ifndef __SIZEOF_INT128__
#error "the assigner needs 128-bit integers for exact quotas"
#endif

typedef unsigned __int128 u128;
typedef __int128 i128;

/* Weights are scaled to integers of at most 2^WEIGHT_BITS. */
#define WEIGHT_BITS 63

/*
 * round(w / wmax * 2^63), at least 1 for w > 0, computed exactly from the
 * binary representations so the plan does not depend on the platform's
 * floating point. Requires 0 <= w <= wmax, both finite, wmax > 0.
 */
static uint64_t weight_units(double w, double wmax)
{
	int ew, em, shift;
	uint64_t mw, mm;
	u128 q;

	if (w == 0)
		return 0;
	/* w = mw * 2^(ew-53) and wmax = mm * 2^(em-53), mw and mm exact integers. */
	mw = (uint64_t)ldexp(frexp(w, &ew), 53);
	mm = (uint64_t)ldexp(frexp(wmax, &em), 53);
	shift = WEIGHT_BITS + ew - em;
	/* Below zero the scaled weight is under one unit: clamp up to one. */
	if (shift < 0)
		return 1;
	/* mw < 2^53 and shift <= 63: fits in 116 bits; w <= wmax keeps q <= 2^63. */
	q = (((u128)mw << shift) + mm / 2) / mm;
	return q ? (uint64_t)q : 1;
}

/* An entry's distance below its quota, scaled by sum(u): quota*U - c*U. */
struct cand {
	i128 below;
	uint32_t index;
};

/* Largest "below" first; ties to the lower index. */
static int cand_cmp_most_below(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->below != y->below)
		return x->below > y->below ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* In the removal heap, x comes out before y: further above quota, or tied
 * and with the higher index (ties favour lower indices). */
static bool cand_before(const struct cand *x, const struct cand *y)
{
	if (x->below != y->below)
		return x->below < y->below;
	return x->index > y->index;
}

static void heap_sift_down(struct cand *h, size_t n, size_t i)
{
	for (;;) {
		size_t best = i, l = 2 * i + 1, r = l + 1;
		struct cand t;

		if (l < n && cand_before(&h[l], &h[best]))
			best = l;
		if (r < n && cand_before(&h[r], &h[best]))
			best = r;
		if (best == i)
			return;
		t = h[i];
		h[i] = h[best];
		h[best] = t;
		i = best;
	}
}

/*
 * Largest-remainder apportionment of total units over n integer weights u
 * (entries with u == 0 get nothing), every entry with u > 0 getting at least
 * lo. Minimises sum((c - quota)^2) under that bound: start from
 * max(lo, floor(quota)), then either hand the missing units to the largest
 * remainders (fewer than n, so one each suffices) or take the excess units
 * from whoever is furthest above quota, one at a time. Caller guarantees
 * some u > 0 and lo * (entries with u > 0) <= total.
 */
static void apportion(uint64_t total, const uint64_t *u, uint32_t n, uint64_t lo,
		      uint64_t *out)
{
	struct cand *c = dml_xmalloc((size_t)n * sizeof(*c));
	u128 usum = 0, csum = 0;
	size_t nc = 0;

	for (uint32_t i = 0; i < n; i++)
		usum += u[i];
	for (uint32_t i = 0; i < n; i++) {
		u128 num, q;

		out[i] = 0;
		if (!u[i])
			continue;
		/* total < 2^64 and u <= 2^63: num < 2^127 fits signed too. */
		num = (u128)total * u[i];
		q = num / usum;
		if (q < lo)
			q = lo;
		out[i] = (uint64_t)q;
		csum += q;
		c[nc].below = (i128)num - (i128)(q * usum);
		c[nc].index = i;
		nc++;
	}
	if (csum < total) {
		u128 missing = total - csum;

		assert(missing <= nc);
		qsort(c, nc, sizeof(*c), cand_cmp_most_below);
		for (size_t k = 0; k < missing; k++)
			out[c[k].index]++;
	} else if (csum > total) {
		u128 excess = csum - total;
		size_t nh = 0;

		for (size_t k = 0; k < nc; k++)
			if (out[c[k].index] > lo)
				c[nh++] = c[k];
		for (size_t k = nh / 2; k-- > 0;)
			heap_sift_down(c, nh, k);
		while (excess--) {
			assert(nh > 0);
			out[c[0].index]--;
			c[0].below += (i128)usum;
			if (out[c[0].index] == lo)
				c[0] = c[--nh];
			heap_sift_down(c, nh, 0);
		}
	}
	free(c);
}

static bool finite_nonneg(double x)
{
	return isfinite(x) && x >= 0;
}

/*
 * The integer weights of the live workers' rates (0 for the dead); NULL
 * after DML_EINVAL: a live rate that is not finite and >= 0, or none live.
 * A rate of 0 counts as 1 unit when every live rate is 0 (an equal split).
 */
static uint64_t *live_units(const double *rates, const bool *live, uint32_t n,
			    uint32_t *nlive)
{
	double rmax = 0;
	uint64_t *u;

	*nlive = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (live && !live[i])
			continue;
		if (!finite_nonneg(rates[i]))
			return NULL;
		if (rates[i] > rmax)
			rmax = rates[i];
		(*nlive)++;
	}
	if (!*nlive)
		return NULL;
	u = dml_xmalloc((size_t)n * sizeof(*u));
	for (uint32_t i = 0; i < n; i++) {
		if (live && !live[i])
			u[i] = 0;
		else
			u[i] = rmax > 0 ? weight_units(rates[i], rmax) : 1;
	}
	return u;
}

int dml_assign_partition_counts(uint64_t npart, const double *rates, const bool *live,
				uint32_t nworkers, uint64_t *counts)
{
	uint32_t nlive;
	uint64_t *u;

	if (!npart || !nworkers || !rates || !counts)
		return DML_EINVAL;
	if (!(u = live_units(rates, live, nworkers, &nlive)))
		return DML_EINVAL;
	apportion(npart, u, nworkers, 0, counts);
	free(u);
	return 0;
}

int dml_assign_batch_sizes(uint64_t total, const double *rates, const bool *live,
			   uint32_t nworkers, uint64_t cap, uint64_t *sizes)
{
	uint32_t nlive, nfree;
	uint64_t *u, *split;

	if (!total || !nworkers || !rates || !sizes || !cap)
		return DML_EINVAL;
	if (!(u = live_units(rates, live, nworkers, &nlive)))
		return DML_EINVAL;
	if (total < nlive) {
		free(u);
		return DML_EINVAL;
	}
	/* a live worker at rate 0 still takes the least batch, 1 */
	for (uint32_t i = 0; i < nworkers; i++)
		if ((!live || live[i]) && !u[i])
			u[i] = 1;
	/*
	 * Water-filling: split what is left over the workers not capped yet;
	 * whoever gets more than cap is held at cap and the rest split again.
	 * A capped worker had more than cap, so what is left still gives
	 * every other worker at least 1.
	 */
	split = dml_xmalloc((size_t)nworkers * sizeof(*split));
	for (uint32_t i = 0; i < nworkers; i++)
		sizes[i] = 0;
	for (nfree = nlive; nfree > 0;) {
		uint32_t capped = 0;

		apportion(total, u, nworkers, 1, split);
		for (uint32_t i = 0; i < nworkers; i++) {
			if (u[i] && split[i] > cap) {
				sizes[i] = cap;
				total -= cap;
				u[i] = 0;
				capped++;
			}
		}
		if (!capped) {
			for (uint32_t i = 0; i < nworkers; i++)
				if (u[i])
					sizes[i] = split[i];
			break;
		}
		nfree -= capped;
	}
	free(split);
	free(u);
	return 0;
}

/* A maximal run of partitions that one surplus worker held. */
struct run {
	uint64_t start, len;
	uint32_t worker;
};

/* By worker; within a worker, longest first, then leftmost. */
static int run_cmp(const void *a, const void *b)
{
	const struct run *x = a, *y = b;

	if (x->worker != y->worker)
		return x->worker < y->worker ? -1 : 1;
	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

static bool short_worker(const uint32_t *prev, uint64_t p, const uint64_t *need)
{
	return prev[p] != DML_ASSIGN_NONE && need[prev[p]] > 0;
}

/*
 * Keep previous partitions in owner[]: all of them for a worker that does
 * not shrink, and for a shrinking one its longest runs up to its new count.
 * A run kept in part gives up the end that borders a worker that needs
 * more, so that worker can grow into it contiguously.
 */
static int keep_previous(uint64_t npart, const uint64_t *counts, const uint32_t *prev,
			 const uint64_t *held, const uint64_t *need, uint32_t *owner)
{
	struct run *runs;
	size_t nruns = 0, k = 0;
	uint32_t cur = DML_ASSIGN_NONE;
	uint64_t budget = 0;

	for (uint64_t p = 0; p < npart; p++) {
		uint32_t w = prev[p];

		if (w == DML_ASSIGN_NONE)
			continue;
		if (held[w] <= counts[w])
			owner[p] = w;
		else if (p == 0 || prev[p - 1] != w)
			nruns++;
	}
	if (!nruns)
		return 0;
	runs = malloc(nruns * sizeof(*runs));
	if (!runs)
		return DML_ENOMEM;
	for (uint64_t p = 0; p < npart; p++) {
		uint32_t w = prev[p];

		if (w == DML_ASSIGN_NONE || held[w] <= counts[w])
			continue;
		if (p == 0 || prev[p - 1] != w) {
			runs[k].start = p;
			runs[k].len = 0;
			runs[k].worker = w;
			k++;
		}
		runs[k - 1].len++;
	}
	qsort(runs, nruns, sizeof(*runs), run_cmp);
	for (k = 0; k < nruns; k++) {
		struct run *r = &runs[k];
		uint64_t first = r->start, m;

		if (r->worker != cur) {
			cur = r->worker;
			budget = counts[cur];
		}
		m = r->len < budget ? r->len : budget;
		if (!m)
			continue;
		if (m < r->len) {
			bool left = r->start > 0 && short_worker(prev, r->start - 1, need);
			uint64_t after = r->start + r->len;
			bool right = after < npart && short_worker(prev, after, need);

			if (left && !right)
				first = after - m;
		}
		for (uint64_t p = first; p < first + m; p++)
			owner[p] = cur;
		budget -= m;
	}
	free(runs);
	return 0;
}

static void give(uint32_t *owner, uint64_t from, uint64_t n, uint32_t w, uint64_t *need)
{
	for (uint64_t p = from; p < from + n; p++)
		owner[p] = w;
	need[w] -= n;
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/*
 * Hand every free partition (owner NONE) to a worker that needs more. The
 * needs add up to the number of free partitions, so the cursor never runs
 * past the last worker.
 */
static void fill_free(uint64_t npart, uint32_t nworkers, uint64_t *need, uint32_t *owner)
{
	uint32_t cursor = 0;
	uint64_t p = 0;

	while (p < npart) {
		uint64_t a = p, b = p, end, n;

		if (owner[p] != DML_ASSIGN_NONE) {
			p++;
			continue;
		}
		while (b < npart && owner[b] == DML_ASSIGN_NONE)
			b++;
		end = b;
		/* Grow the neighbours first: their runs stay contiguous. */
		if (a > 0 && (n = min_u64(need[owner[a - 1]], b - a)) > 0) {
			give(owner, a, n, owner[a - 1], need);
			a += n;
		}
		if (b < npart && (n = min_u64(need[owner[b]], b - a)) > 0) {
			give(owner, b - n, n, owner[b], need);
			b -= n;
		}
		while (a < b) {
			while (!need[cursor]) {
				cursor++;
				assert(cursor < nworkers);
			}
			n = min_u64(need[cursor], b - a);
			give(owner, a, n, cursor, need);
			a += n;
		}
		p = end;
	}
}

int dml_assign_partitions(uint64_t npart, const uint64_t *counts, uint32_t nworkers,
			  const uint32_t *prev, uint32_t *owner)
{
	uint64_t *held, *need, sum = 0;
	int rc = 0;

	if (!npart || !nworkers || nworkers == DML_ASSIGN_NONE || !counts || !owner ||
	    owner == prev)
		return DML_EINVAL;
	for (uint32_t i = 0; i < nworkers; i++) {
		if (counts[i] > npart - sum)
			return DML_EINVAL;
		sum += counts[i];
	}
	if (sum != npart)
		return DML_EINVAL;
	if (prev)
		for (uint64_t p = 0; p < npart; p++)
			if (prev[p] != DML_ASSIGN_NONE && prev[p] >= nworkers)
				return DML_EINVAL;
	held = dml_xcalloc(nworkers, sizeof(*held));
	need = dml_xmalloc((size_t)nworkers * sizeof(*need));
	for (uint64_t p = 0; p < npart; p++) {
		owner[p] = DML_ASSIGN_NONE;
		if (prev && prev[p] != DML_ASSIGN_NONE)
			held[prev[p]]++;
	}
	for (uint32_t i = 0; i < nworkers; i++)
		need[i] = counts[i] - min_u64(counts[i], held[i]);
	if (prev)
		rc = keep_previous(npart, counts, prev, held, need, owner);
	if (!rc)
		fill_free(npart, nworkers, need, owner);
	free(held);
	free(need);
	return rc;
}

int dml_assign_load_deviation(const uint64_t *current, const uint64_t *ideal, uint32_t n,
			      double *deviation)
{
	double sum = 0, mean, dev = 0;
	uint32_t k = 0;
	bool stranded = false;

	if (!current || !ideal || !n || !deviation)
		return DML_EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!ideal[i]) {
			stranded |= current[i] > 0;
			continue;
		}
		sum += (double)current[i] / (double)ideal[i];
		k++;
	}
	if (!k)
		return DML_EINVAL;
	mean = sum / k;
	if (stranded || mean == 0) {
		*deviation = HUGE_VAL;
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		double d;

		if (!ideal[i])
			continue;
		d = fabs((double)current[i] / (double)ideal[i] / mean - 1);
		if (d > dev)
			dev = d;
	}
	*deviation = dev;
	return 0;
}

int dml_assign_should_rebalance(const uint64_t *current, const uint64_t *ideal, uint32_t n,
				double threshold, int *rebalance)
{
	double dev;
	int rc;

	if (!finite_nonneg(threshold) || !rebalance)
		return DML_EINVAL;
	rc = dml_assign_load_deviation(current, ideal, n, &dev);
	if (rc)
		return rc;
	*rebalance = dev > threshold;
	return 0;
}

int dml_assign_key_ranges(uint64_t space, const double *weights, uint32_t nservers,
			  struct dml_shard_range *ranges, uint32_t *nranges)
{
	double wmax = 0;
	uint64_t *u, *size, begin = 0;
	uint32_t k = 0;

	if (!space || !weights || !nservers || !ranges || !nranges)
		return DML_EINVAL;
	for (uint32_t j = 0; j < nservers; j++) {
		if (!finite_nonneg(weights[j]) || weights[j] == 0)
			return DML_EINVAL;
		if (weights[j] > wmax)
			wmax = weights[j];
	}
	u = dml_xmalloc((size_t)nservers * sizeof(*u));
	size = dml_xmalloc((size_t)nservers * sizeof(*size));
	for (uint32_t j = 0; j < nservers; j++)
		u[j] = weight_units(weights[j], wmax);
	apportion(space, u, nservers, space >= nservers ? 1 : 0, size);
	for (uint32_t j = 0; j < nservers; j++) {
		if (!size[j])
			continue;
		ranges[k].begin = begin;
		ranges[k].end = begin + size[j];
		ranges[k].server = j;
		begin = ranges[k].end;
		k++;
	}
	*nranges = k;
	free(u);
	free(size);
	return 0;
}

int dml_assign_load_spread(const double *times, uint32_t n, double *spread_pct)
{
	double lo, hi, sum = 0;

	if (!times || !n || !spread_pct)
		return DML_EINVAL;
	lo = hi = times[0];
	for (uint32_t i = 0; i < n; i++) {
		if (!finite_nonneg(times[i]))
			return DML_EINVAL;
		if (times[i] < lo)
			lo = times[i];
		if (times[i] > hi)
			hi = times[i];
	}
	if (hi == 0) {
		*spread_pct = 0;
		return 0;
	}
	/* Scaled by the maximum so that huge times cannot overflow the sum. */
	for (uint32_t i = 0; i < n; i++)
		sum += times[i] / hi;
	*spread_pct = (1 - lo / hi) / (2 * (sum / n)) * 100;
	return 0;
}
