/*
 * The walk over an app's training records, partition by partition (walk.h).
 *
 * Must never: take a record twice in a pass of its partition, or let a
 * partition's taken count go down.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "worker/app.h"
#include "worker/app_util.h"
#include "shard/assign.h"
#include "proto/dml_error.h"
#include "worker/walk.h"

#define PASS_MIX UINT64_C(0x9e3779b97f4a7c15)

static int part_cmp(const void *x, const void *y)
{
	uint32_t a = ((const struct dml_walk_part *)x)->part;
	uint32_t b = ((const struct dml_walk_part *)y)->part;

	return a < b ? -1 : a > b;
}

static struct dml_walk_part *part_find(const struct dml_walk *w, uint32_t part)
{
	struct dml_walk_part key = { .part = part };

	if (!w->nparts)
		return NULL;
	return bsearch(&key, w->parts, w->nparts, sizeof(key), part_cmp);
}

/*
 * A permutation of [0, n) keyed by key: a 4-round Feistel network on the
 * smallest even number of bits that holds n, walking the cycle until it
 * lands below n (fewer than 4 rounds of walking on average).
 */
static uint64_t permute(uint64_t key, uint64_t n, uint64_t x)
{
	unsigned half = 1;
	uint64_t mask;

	while (half < 32 && (UINT64_C(1) << (2 * half)) < n)
		half++;
	mask = (UINT64_C(1) << half) - 1;
	do {
		uint64_t l = x >> half, r = x & mask;

		for (uint64_t round = 0; round < 4; round++) {
			uint64_t t = l ^ (dml_rng_mix64(r ^ key ^ (round << 56)) & mask);

			l = r;
			r = t;
		}
		x = l << half | r;
	} while (x >= n);
	return x;
}

/* The record of partition p taken at count taken: its pass's order. */
static uint64_t part_record(const struct dml_walk *w, const struct dml_walk_part *p,
			    uint64_t taken)
{
	uint64_t pass = taken / p->n;
	uint64_t key = dml_rng_mix64(w->key ^ dml_rng_mix64((uint64_t)p->part + 1) ^
				     pass * PASS_MIX);

	return permute(key, p->n, taken % p->n);
}

/* Make room for at least n known partitions and a batch's scratch of each. */
static int parts_reserve(struct dml_walk *w, size_t n)
{
	uint64_t *next;
	size_t *heap;

	if (dml_app_reserve((void **)&w->parts, &w->parts_cap, n, sizeof(*w->parts)))
		return DML_ENOMEM;
	if (w->scratch_cap >= w->parts_cap)
		return 0;
	if (!(next = realloc(w->next, w->parts_cap * sizeof(*next))))
		return DML_ENOMEM;
	w->next = next;
	if (!(heap = realloc(w->heap, w->parts_cap * sizeof(*heap))))
		return DML_ENOMEM;
	w->heap = heap;
	w->scratch_cap = w->parts_cap;
	return 0;
}

/*
 * The entry of part: found among the first sorted ones by search, among
 * those added since by a scan, or added at the end (room reserved by the
 * caller) with nothing taken.
 */
static struct dml_walk_part *part_get(struct dml_walk *w, uint32_t part, size_t sorted)
{
	struct dml_walk_part key = { .part = part }, *p = NULL;

	if (sorted)
		p = bsearch(&key, w->parts, sorted, sizeof(key), part_cmp);
	for (size_t j = sorted; !p && j < w->nparts; j++)
		if (w->parts[j].part == part)
			p = &w->parts[j];
	if (!p) {
		p = &w->parts[w->nparts++];
		*p = key;
	}
	return p;
}

int dml_walk_note(struct dml_walk *w, const uint32_t *parts, const uint64_t *taken, size_t n)
{
	size_t sorted = w->nparts;

	if (parts_reserve(w, sorted + n))
		return DML_ENOMEM;
	w->pending = 0;
	for (size_t k = 0; k < n; k++) {
		struct dml_walk_part *p = part_get(w, parts[k], sorted);

		if (taken[k] > p->taken)
			p->taken = taken[k];
	}
	qsort(w->parts, w->nparts, sizeof(*w->parts), part_cmp);
	return 0;
}

int dml_walk_set(struct dml_walk *w, const char *app, uint64_t n, const uint32_t *parts,
		 size_t nparts, uint32_t num_partitions, char *err, size_t errlen)
{
	size_t known = w->nparts;
	uint64_t total = 0;

	for (size_t i = 0; i < nparts; i++)
		if (parts[i] >= num_partitions)
			return dml_app_fail(err, errlen, DML_EINVAL, app, "partition %" PRIu32
					    " of %" PRIu32 " does not exist", parts[i],
					    num_partitions);
	/* every partition known first, so that nothing below can fail */
	if (parts_reserve(w, known + nparts))
		return dml_app_fail(err, errlen, DML_ENOMEM, app,
				    "out of memory for %zu partitions", nparts);
	w->pending = 0;
	for (size_t i = 0; i < w->nparts; i++)
		w->parts[i].held = 0;
	for (size_t i = 0; i < nparts; i++)
		part_get(w, parts[i], known)->held = 1;
	qsort(w->parts, w->nparts, sizeof(*w->parts), part_cmp);
	for (size_t i = 0; i < w->nparts; i++) {
		struct dml_walk_part *p = &w->parts[i];
		uint64_t e;

		if (!p->held)
			continue;
		dml_partition_range(n, num_partitions, p->part, &p->begin, &e);
		p->n = e - p->begin;
		p->slot = total;
		total += p->n;
	}
	w->total = total;
	return 0;
}

/* Is held partition a further behind than b (and so taken from first)? */
static int behind(const struct dml_walk *w, size_t a, size_t b)
{
	/* (next_a + 1) / n_a < (next_b + 1) / n_b, exactly */
	unsigned __int128 x = (unsigned __int128)(w->next[a] + 1) * w->parts[b].n;
	unsigned __int128 y = (unsigned __int128)(w->next[b] + 1) * w->parts[a].n;

	return x < y || (x == y && a < b);
}

static void heap_down(struct dml_walk *w, size_t len, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, m = i, t;

		if (l < len && behind(w, w->heap[l], w->heap[m]))
			m = l;
		if (l + 1 < len && behind(w, w->heap[l + 1], w->heap[m]))
			m = l + 1;
		if (m == i)
			return;
		t = w->heap[i];
		w->heap[i] = w->heap[m];
		w->heap[m] = t;
		i = m;
	}
}

/* Room for rows records and their slots. */
static int batch_reserve(struct dml_walk *w, size_t rows)
{
	size_t cap = rows + rows / 2;
	uint64_t *v;

	if (rows <= w->batch_cap)
		return 0;
	if (rows > SIZE_MAX / 2 / sizeof(*v))
		return DML_ENOMEM;
	if (!(v = realloc(w->batch, cap * sizeof(*v))))
		return DML_ENOMEM;
	w->batch = v;
	if (!(v = realloc(w->slots, cap * sizeof(*v))))
		return DML_ENOMEM;
	w->slots = v;
	w->batch_cap = cap;
	return 0;
}

const uint64_t *dml_walk_batch(struct dml_walk *w, size_t rows)
{
	size_t len = 0;

	if (batch_reserve(w, rows ? rows : 1))
		return NULL;
	w->pending = 1;
	for (size_t i = 0; i < w->nparts; i++) {
		w->next[i] = w->parts[i].taken;
		if (w->parts[i].held && w->parts[i].n)
			w->heap[len++] = i;
	}
	if (!len)
		return w->batch;
	for (size_t i = len / 2; i-- > 0;)
		heap_down(w, len, i);
	for (size_t k = 0; k < rows; k++) {
		size_t i = w->heap[0];
		const struct dml_walk_part *p = &w->parts[i];
		uint64_t at = part_record(w, p, w->next[i]++);

		w->batch[k] = p->begin + at;
		w->slots[k] = p->slot + at;
		heap_down(w, len, 0);
	}
	return w->batch;
}

void dml_walk_advance(struct dml_walk *w)
{
	if (!w->pending)
		return;
	w->pending = 0;
	for (size_t i = 0; i < w->nparts; i++)
		w->parts[i].taken = w->next[i];
}

size_t dml_walk_held(const struct dml_walk *w)
{
	size_t n = 0;

	for (size_t i = 0; i < w->nparts; i++)
		n += w->parts[i].held != 0;
	return n;
}

void dml_walk_positions(const struct dml_walk *w, uint32_t *parts, uint64_t *taken)
{
	size_t k = 0;

	for (size_t i = 0; i < w->nparts; i++) {
		if (!w->parts[i].held)
			continue;
		parts[k] = w->parts[i].part;
		taken[k++] = w->parts[i].taken;
	}
}

uint64_t dml_walk_taken(const struct dml_walk *w, uint32_t part)
{
	const struct dml_walk_part *p = part_find(w, part);

	return p ? p->taken : 0;
}

void dml_walk_clear(struct dml_walk *w)
{
	uint64_t key = w->key;

	free(w->parts);
	free(w->batch);
	free(w->slots);
	free(w->next);
	free(w->heap);
	memset(w, 0, sizeof(*w));
	w->key = key;
}
