/*
 * Shard maps: which server holds which keys of each table.
 *
 * Dense tables are split into contiguous key ranges. Sparse tables are split
 * into ranges of a 32-bit key hash (dml_shard_key_hash), so that skewed key
 * ids (small integers, Zipf-distributed features) still spread evenly. A map
 * is assembled from what each server reports (its TableInfo ranges) and then
 * checked: every table fully covered, no overlap, same width everywhere.
 *
 * Pure functions, no I/O; safe to use from any thread on distinct maps.
 */
#ifndef DML_SHARDMAP_H
#define DML_SHARDMAP_H

#include <stddef.h>
#include <stdint.h>

/** Sparse tables partition this hash space. */
#define DML_SHARD_HASH_SPACE (UINT64_C(1) << 32)

/** The hash that places a sparse key: top 32 bits of a 64-bit mix. */
uint64_t dml_shard_key_hash(uint64_t key);

/**
 * Even split of [0, space) into count parts: part index gets
 * [*begin, *end). Sizes differ by at most one.
 */
void dml_shard_even_range(uint64_t space, uint32_t index, uint32_t count,
			  uint64_t *begin, uint64_t *end);

struct dml_shard_range {
	uint64_t begin, end;   /* keys (dense) or hashes (sparse) */
	uint32_t server;       /* index into the server list */
};

struct dml_shard_table {
	uint32_t id;
	int dense;
	uint32_t width;
	uint64_t keys;         /* dense key space; 0 for sparse */
	size_t nranges;
	struct dml_shard_range *ranges; /* sorted by begin once finished */
};

struct dml_shard_map {
	uint64_t version;
	uint32_t nservers;
	size_t ntables;
	struct dml_shard_table *tables;
};

/** Start an empty map for nservers servers. */
void dml_shard_map_init(struct dml_shard_map *m, uint32_t nservers);
/** Free what the map holds; the struct may be reused after init. */
void dml_shard_map_destroy(struct dml_shard_map *m);

/**
 * Record that server holds [begin, end) of a table. DML_ECONF (with a reason
 * in err) if the table's kind, width or key space disagrees with an earlier
 * report, DML_EINVAL for an empty range or a server out of bounds.
 */
int dml_shard_map_add(struct dml_shard_map *m, uint32_t server, uint32_t table, int dense,
		      uint32_t width, uint64_t keys, uint64_t begin, uint64_t end,
		      char *err, size_t errlen);

/** Sort and check coverage: DML_ECONF with the gap or overlap in err. */
int dml_shard_map_finish(struct dml_shard_map *m, char *err, size_t errlen);

/** The table with this id, or NULL. */
const struct dml_shard_table *dml_shard_map_table(const struct dml_shard_map *m,
						  uint32_t table);

/** The range that holds a dense key or a sparse key's hash. */
const struct dml_shard_range *dml_shard_route(const struct dml_shard_table *t,
					      uint64_t key);

#endif
