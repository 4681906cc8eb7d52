/*
 * Shard map assembly, checking and routing (see shardmap.h).
 * Must never do I/O or keep global state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "shard/shardmap.h"
#include "proto/util.h"

uint64_t dml_shard_key_hash(uint64_t key)
{
	/* splitmix64's finalizer: every input bit affects the top bits. */
	key ^= key >> 30;
	key *= UINT64_C(0xbf58476d1ce4e5b9);
	key ^= key >> 27;
	key *= UINT64_C(0x94d049bb133111eb);
	key ^= key >> 31;
	return key >> 32;
}

void dml_shard_even_range(uint64_t space, uint32_t index, uint32_t count,
			  uint64_t *begin, uint64_t *end)
{
	uint64_t base = space / count, extra = space % count;

	*begin = index * base + (index < extra ? index : extra);
	*end = *begin + base + (index < extra ? 1 : 0);
}

void dml_shard_map_init(struct dml_shard_map *m, uint32_t nservers)
{
	memset(m, 0, sizeof(*m));
	m->nservers = nservers;
}

void dml_shard_map_destroy(struct dml_shard_map *m)
{
	for (size_t i = 0; i < m->ntables; i++)
		free(m->tables[i].ranges);
	free(m->tables);
	memset(m, 0, sizeof(*m));
}

static struct dml_shard_table *find_table(const struct dml_shard_map *m, uint32_t id)
{
	for (size_t i = 0; i < m->ntables; i++)
		if (m->tables[i].id == id)
			return &m->tables[i];
	return NULL;
}

const struct dml_shard_table *dml_shard_map_table(const struct dml_shard_map *m,
						  uint32_t table)
{
	return find_table(m, table);
}

int dml_shard_map_add(struct dml_shard_map *m, uint32_t server, uint32_t table, int dense,
		      uint32_t width, uint64_t keys, uint64_t begin, uint64_t end,
		      char *err, size_t errlen)
{
	struct dml_shard_table *t = find_table(m, table);
	struct dml_shard_range *r;

	if (server >= m->nservers || begin >= end || width == 0)
		return DML_EINVAL;
	if (!t) {
		m->tables = dml_xrealloc(m->tables, (m->ntables + 1) * sizeof(*m->tables));
		t = &m->tables[m->ntables++];
		memset(t, 0, sizeof(*t));
		t->id = table;
		t->dense = dense;
		t->width = width;
		t->keys = keys;
	} else if (t->dense != !!dense || t->width != width || t->keys != keys) {
		snprintf(err, errlen, "table %u: server %u reports %s width %u keys %llu, "
			 "others %s width %u keys %llu", table, server,
			 dense ? "dense" : "sparse", width, (unsigned long long)keys,
			 t->dense ? "dense" : "sparse", t->width, (unsigned long long)t->keys);
		return DML_ECONF;
	}
	t->ranges = dml_xrealloc(t->ranges, (t->nranges + 1) * sizeof(*t->ranges));
	r = &t->ranges[t->nranges++];
	r->begin = begin;
	r->end = end;
	r->server = server;
	return 0;
}

static int range_cmp(const void *a, const void *b)
{
	const struct dml_shard_range *x = a, *y = b;

	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

int dml_shard_map_finish(struct dml_shard_map *m, char *err, size_t errlen)
{
	for (size_t i = 0; i < m->ntables; i++) {
		struct dml_shard_table *t = &m->tables[i];
		uint64_t space = t->dense ? t->keys : DML_SHARD_HASH_SPACE, next = 0;

		qsort(t->ranges, t->nranges, sizeof(*t->ranges), range_cmp);
		for (size_t j = 0; j < t->nranges; j++) {
			if (t->ranges[j].begin != next) {
				snprintf(err, errlen, "table %u: %s at %llu (server %u starts there)",
					 t->id, t->ranges[j].begin > next ? "gap" : "overlap",
					 (unsigned long long)next, t->ranges[j].server);
				return DML_ECONF;
			}
			next = t->ranges[j].end;
		}
		if (next != space) {
			snprintf(err, errlen, "table %u: keys %llu..%llu held by no server",
				 t->id, (unsigned long long)next, (unsigned long long)space);
			return DML_ECONF;
		}
	}
	return 0;
}

const struct dml_shard_range *dml_shard_route(const struct dml_shard_table *t, uint64_t key)
{
	uint64_t pos = t->dense ? key : dml_shard_key_hash(key);
	size_t lo = 0, hi = t->nranges;

	/* Few servers per table: a binary search over sorted ranges. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pos < t->ranges[mid].begin)
			hi = mid;
		else if (pos >= t->ranges[mid].end)
			lo = mid + 1;
		else
			return &t->ranges[mid];
	}
	return NULL;
}
