/*
 * Shard map plans: the wire ShardMap of a job, built by the scheduler and
 * checked by whoever receives one (servers, libdml).
 *
 * dml_mapplan_build() splits every table of a JobSpec over a list of
 * servers in proportion to their weights (dml_assign_key_ranges): a dense
 * table's keys [0, keys), a sparse table's hash space [0,
 * DML_SHARD_HASH_SPACE). Servers are listed, and ranges handed out, in
 * ascending node id, so every scheduler computes the same map from the same
 * inputs. dml_mapplan_check() is the other side: a map from the wire must
 * cover every table of the spec exactly once, with no gap, no overlap and
 * no range on a server it does not list.
 *
 * Pure functions: no I/O, no logging, no global state; nothing here knows
 * about the scheduler. Must never trust a map or spec it is given (both may
 * come from a peer): every count and bound is checked and answered with an
 * error code, never an assert.
 */
#ifndef DML_MAPPLAN_H
#define DML_MAPPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"

/** One server a plan may place ranges on. */
struct dml_mapplan_server {
	uint32_t node_id;          /* >= 1, unique in the list */
	const char *address;       /* host:port clients dial; copied */
	double weight;             /* capacity share: finite and > 0 */
};

/**
 * Build the shard map of a job: for each table of spec, in the spec's
 * order, the key (dense) or hash (sparse) space split over the servers by
 * weight. The map lists the servers sorted by node id and its ranges are
 * grouped by table, in ascending begin; ranges.server holds node ids. A
 * table smaller than the server list leaves some servers without a range
 * of it.
 *
 * @param spec     the job (its tables); not kept
 * @param job      the job id written into the map
 * @param version  the map version written into the map
 * @param servers  nservers servers in any order; not kept
 * @param out      a new map, to free with dml_mapplan_free()
 * @return 0; DML_EINVAL for a null pointer, no server, more than
 *         UINT32_MAX - 1 servers, a node id of 0 or given twice, an empty
 *         address, a weight that is not finite and > 0, a spec without
 *         tables, two tables with one id, or a dense table with 0 keys.
 */
int dml_mapplan_build(const Dml__JobSpec *spec, uint32_t job, uint64_t version,
		      const struct dml_mapplan_server *servers, size_t nservers,
		      Dml__ShardMap **out);

/** A copy of any map (one unpacked included) to free with dml_mapplan_free(). */
Dml__ShardMap *dml_mapplan_copy(const Dml__ShardMap *map);

/** Free a map from dml_mapplan_build(); NULL is fine. Not for unpacked maps. */
void dml_mapplan_free(Dml__ShardMap *map);

/**
 * Check a shard map against its job's spec: every server has a node id
 * other than 0, listed once, and a host:port address; every range names a
 * table of the spec and a listed server, with begin < end inside the
 * table's space; and the ranges of each table cover its whole space exactly
 * once. The job id and version are the caller's to compare.
 *
 * @param err  gets a one-line reason on failure ("table 2: gap at 40"),
 *             may be NULL when errlen is 0
 * @return 0, or DML_EINVAL (a null map or spec), or DML_ECONF with the
 *         reason in err.
 */
int dml_mapplan_check(const Dml__ShardMap *map, const Dml__JobSpec *spec, char *err,
		      size_t errlen);

/** The space a table's ranges cover: its keys (dense) or the hash space. */
uint64_t dml_mapplan_table_space(const Dml__TableSpec *t);

#endif
