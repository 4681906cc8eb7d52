/*
 * Shard map plans (see mapplan.h): building a job's ShardMap over weighted
 * servers, and checking one that came from the wire.
 *
 * The map is one heap tree of plain allocations that dml_mapplan_free()
 * walks; it is never handed to protobuf-c's free_unpacked. Must never do
 * I/O, keep global state, or read past a count a peer sent.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shard/assign.h"
#include "proto/dml_error.h"
#include "shard/mapplan.h"
#include "shard/shardmap.h"
#include "proto/util.h"

/* Writes the reason into err; returns DML_ECONF. */
#define fail(err, errlen, ...) dml_fail(DML_ECONF, err, errlen, __VA_ARGS__)

uint64_t dml_mapplan_table_space(const Dml__TableSpec *t)
{
	return t->dense ? t->keys : DML_SHARD_HASH_SPACE;
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorted copy of ids; 1 when one is 0 or given twice. */
static int sorted_ids(uint32_t *ids, size_t n)
{
	qsort(ids, n, sizeof(*ids), u32_cmp);
	for (size_t i = 0; i < n; i++)
		if (ids[i] == 0 || (i > 0 && ids[i] == ids[i - 1]))
			return 1;
	return 0;
}

/* The spec's table ids are unique (callers need it before trusting a map). */
static int table_ids_unique(const Dml__JobSpec *spec)
{
	uint32_t *ids = dml_xmalloc((spec->n_tables + 1) * sizeof(*ids));
	int dup = 0;

	for (size_t i = 0; i < spec->n_tables; i++)
		ids[i] = spec->tables[i]->id;
	qsort(ids, spec->n_tables, sizeof(*ids), u32_cmp);
	for (size_t i = 1; i < spec->n_tables; i++)
		dup |= ids[i] == ids[i - 1];
	free(ids);
	return !dup;
}

/* ---- building ------------------------------------------------------------ */

static int server_cmp(const void *a, const void *b)
{
	const struct dml_mapplan_server *x = a, *y = b;

	return x->node_id < y->node_id ? -1 : x->node_id > y->node_id;
}

/* srv is sorted by node id. */
static int build_check(const Dml__JobSpec *spec, const struct dml_mapplan_server *srv,
		       uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (srv[i].node_id == 0 || (i > 0 && srv[i].node_id == srv[i - 1].node_id) ||
		    !srv[i].address || !srv[i].address[0] || !isfinite(srv[i].weight) ||
		    srv[i].weight <= 0)
			return DML_EINVAL;
	}
	if (spec->n_tables == 0)
		return DML_EINVAL;
	for (size_t i = 0; i < spec->n_tables; i++)
		if (!spec->tables[i] || dml_mapplan_table_space(spec->tables[i]) == 0)
			return DML_EINVAL;
	return table_ids_unique(spec) ? 0 : DML_EINVAL;
}

/* Append table t's ranges over the sorted servers to map. */
static int build_table(Dml__ShardMap *map, const Dml__TableSpec *t,
		       const struct dml_mapplan_server *srv, uint32_t n, double *weights,
		       struct dml_shard_range *ranges)
{
	uint32_t nranges;
	int rc;

	for (uint32_t j = 0; j < n; j++)
		weights[j] = srv[j].weight;
	rc = dml_assign_key_ranges(dml_mapplan_table_space(t), weights, n, ranges, &nranges);
	if (rc)
		return rc;
	for (uint32_t k = 0; k < nranges; k++) {
		Dml__ShardRange *r = dml_xmalloc(sizeof(*r));

		dml__shard_range__init(r);
		r->table = t->id;
		r->begin = ranges[k].begin;
		r->end = ranges[k].end;
		r->server = srv[ranges[k].server].node_id;
		map->ranges[map->n_ranges++] = r;
	}
	return 0;
}

int dml_mapplan_build(const Dml__JobSpec *spec, uint32_t job, uint64_t version,
		      const struct dml_mapplan_server *servers, size_t nservers,
		      Dml__ShardMap **out)
{
	struct dml_mapplan_server *srv;
	struct dml_shard_range *ranges;
	Dml__ShardMap *map;
	double *weights;
	uint32_t n;
	int rc = 0;

	if (!out)
		return DML_EINVAL;
	*out = NULL;
	if (!spec || !servers || nservers == 0 || nservers >= UINT32_MAX)
		return DML_EINVAL;
	n = (uint32_t)nservers;
	srv = dml_xmalloc(n * sizeof(*srv));
	memcpy(srv, servers, n * sizeof(*srv));
	qsort(srv, n, sizeof(*srv), server_cmp);
	if ((rc = build_check(spec, srv, n)) != 0) {
		free(srv);
		return rc;
	}
	map = dml_xmalloc(sizeof(*map));
	dml__shard_map__init(map);
	map->job = job;
	map->version = version;
	map->servers = dml_xcalloc(n, sizeof(*map->servers));
	for (uint32_t j = 0; j < n; j++) {
		Dml__ShardServer *s = dml_xmalloc(sizeof(*s));

		dml__shard_server__init(s);
		s->node_id = srv[j].node_id;
		s->address = dml_xstrdup(srv[j].address);
		map->servers[map->n_servers++] = s;
	}
	/* At most one range per server per table. */
	map->ranges = dml_xcalloc(spec->n_tables * n, sizeof(*map->ranges));
	weights = dml_xmalloc(n * sizeof(*weights));
	ranges = dml_xmalloc(n * sizeof(*ranges));
	for (size_t i = 0; i < spec->n_tables && rc == 0; i++)
		rc = build_table(map, spec->tables[i], srv, n, weights, ranges);
	free(ranges);
	free(weights);
	free(srv);
	if (rc) {
		dml_mapplan_free(map);
		return rc;
	}
	*out = map;
	return 0;
}

Dml__ShardMap *dml_mapplan_copy(const Dml__ShardMap *from)
{
	Dml__ShardMap *map = dml_xmalloc(sizeof(*map));

	dml__shard_map__init(map);
	map->job = from->job;
	map->version = from->version;
	map->run = from->run;
	map->servers = dml_xcalloc(from->n_servers + 1, sizeof(*map->servers));
	map->ranges = dml_xcalloc(from->n_ranges + 1, sizeof(*map->ranges));
	for (size_t i = 0; i < from->n_servers; i++) {
		Dml__ShardServer *s = dml_xmalloc(sizeof(*s));

		dml__shard_server__init(s);
		s->node_id = from->servers[i]->node_id;
		s->address = dml_xstrdup(from->servers[i]->address ?
					 from->servers[i]->address : "");
		map->servers[map->n_servers++] = s;
	}
	for (size_t i = 0; i < from->n_ranges; i++) {
		Dml__ShardRange *r = dml_xmalloc(sizeof(*r));

		dml__shard_range__init(r);
		r->table = from->ranges[i]->table;
		r->begin = from->ranges[i]->begin;
		r->end = from->ranges[i]->end;
		r->server = from->ranges[i]->server;
		map->ranges[map->n_ranges++] = r;
	}
	return map;
}

void dml_mapplan_free(Dml__ShardMap *map)
{
	if (!map)
		return;
	for (size_t i = 0; i < map->n_servers; i++) {
		if (map->servers[i])
			free(map->servers[i]->address);
		free(map->servers[i]);
	}
	for (size_t i = 0; i < map->n_ranges; i++)
		free(map->ranges[i]);
	free(map->servers);
	free(map->ranges);
	free(map);
}

/* ---- checking ------------------------------------------------------------ */

static int range_ptr_cmp(const void *a, const void *b)
{
	const Dml__ShardRange *x = *(const Dml__ShardRange *const *)a;
	const Dml__ShardRange *y = *(const Dml__ShardRange *const *)b;

	return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static const Dml__TableSpec *spec_table(const Dml__JobSpec *spec, uint32_t id)
{
	for (size_t i = 0; i < spec->n_tables; i++)
		if (spec->tables[i]->id == id)
			return spec->tables[i];
	return NULL;
}

static int check_servers(const Dml__ShardMap *map, uint32_t *ids, char *err, size_t errlen)
{
	char host[256];
	uint16_t port;

	for (size_t i = 0; i < map->n_servers; i++) {
		const Dml__ShardServer *s = map->servers[i];

		if (!s)
			return fail(err, errlen, "server entry %zu is empty", i);
		if (!s->address ||
		    dml_parse_hostport(s->address, host, sizeof(host), &port, 0))
			return fail(err, errlen, "server %u: address is not host:port",
				    s->node_id);
		ids[i] = s->node_id;
	}
	if (sorted_ids(ids, map->n_servers))
		return fail(err, errlen, "a server is listed twice or with node id 0");
	return 0;
}

/* Every range is well-formed and belongs to a known table and server. */
static int check_ranges(const Dml__ShardMap *map, const Dml__JobSpec *spec,
			const uint32_t *ids, char *err, size_t errlen)
{
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		const Dml__TableSpec *t;

		if (!r)
			return fail(err, errlen, "range entry %zu is empty", i);
		if (!(t = spec_table(spec, r->table)))
			return fail(err, errlen, "range for table %u, which the job does not "
				    "have", r->table);
		if (!bsearch(&r->server, ids, map->n_servers, sizeof(*ids), u32_cmp))
			return fail(err, errlen, "table %u: range on server %u, which the map "
				    "does not list", r->table, r->server);
		if (r->begin >= r->end || r->end > dml_mapplan_table_space(t))
			return fail(err, errlen, "table %u: range %llu..%llu is empty or "
				    "outside 0..%llu", r->table, (unsigned long long)r->begin,
				    (unsigned long long)r->end,
				    (unsigned long long)dml_mapplan_table_space(t));
	}
	return 0;
}

/* The ranges of table t, sorted, tile its space. */
static int check_cover(const Dml__ShardMap *map, const Dml__TableSpec *t,
		       const Dml__ShardRange **sel, char *err, size_t errlen)
{
	uint64_t space = dml_mapplan_table_space(t), next = 0;
	size_t n = 0;

	for (size_t i = 0; i < map->n_ranges; i++)
		if (map->ranges[i]->table == t->id)
			sel[n++] = map->ranges[i];
	if (n == 0)
		return fail(err, errlen, "table %u has no range", t->id);
	qsort(sel, n, sizeof(*sel), range_ptr_cmp);
	for (size_t i = 0; i < n; i++) {
		if (sel[i]->begin != next)
			return fail(err, errlen, "table %u: %s at %llu (server %u starts "
				    "there)", t->id, sel[i]->begin > next ? "gap" : "overlap",
				    (unsigned long long)next, sel[i]->server);
		next = sel[i]->end;
	}
	if (next != space)
		return fail(err, errlen, "table %u: keys %llu..%llu held by no server", t->id,
			    (unsigned long long)next, (unsigned long long)space);
	return 0;
}

int dml_mapplan_check(const Dml__ShardMap *map, const Dml__JobSpec *spec, char *err,
		      size_t errlen)
{
	const Dml__ShardRange **sel;
	uint32_t *ids;
	int rc;

	if (!map || !spec)
		return DML_EINVAL;
	if (spec->n_tables == 0)
		return fail(err, errlen, "the job has no table");
	for (size_t i = 0; i < spec->n_tables; i++) {
		if (!spec->tables[i])
			return fail(err, errlen, "table entry %zu of the job is empty", i);
		if (dml_mapplan_table_space(spec->tables[i]) == 0)
			return fail(err, errlen, "table %u: dense with 0 keys",
				    spec->tables[i]->id);
	}
	if (!table_ids_unique(spec))
		return fail(err, errlen, "the job lists a table id twice");
	ids = dml_xmalloc((map->n_servers + 1) * sizeof(*ids));
	sel = dml_xmalloc((map->n_ranges + 1) * sizeof(*sel));
	rc = check_servers(map, ids, err, errlen);
	if (rc == 0)
		rc = check_ranges(map, spec, ids, err, errlen);
	for (size_t i = 0; i < spec->n_tables && rc == 0; i++)
		rc = check_cover(map, spec->tables[i], sel, err, errlen);
	free(sel);
	free(ids);
	return rc;
}
