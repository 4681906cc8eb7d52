/*
 * What the files of a server's job share (job.c: shard maps from the
 * scheduler and a new job's tables; remap.c: a remap, table by table;
 * migrate.c: rows moving between servers; key_ranges.c: range sets and the
 * log lines naming them), beyond server_internal.h. Not installed; only
 * those files include it.
 */
#ifndef DML_SERVER_JOB_INTERNAL_H
#define DML_SERVER_JOB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "server/server_internal.h"

/* A line built piece by piece, naming at most LOG_ITEMS ranges. */
struct line {
	char buf[2048];
	size_t len;
	unsigned items, dropped;
};

/* Rows given away, on their way to another server in one MIGRATE frame. */
struct parcel {
	struct parcel *next;
	uint32_t table;
	int dense;
	uint64_t begin, end;       /* keys or key hashes this frame completes */
	uint64_t *keys;            /* sparse: nrows keys, in increasing hash order */
	float *rows;               /* nrows rows of row_floats floats */
	size_t nrows, row_floats;
	uint64_t request_id;       /* its frame on the live connection; 0: not sent */
};

/* One server that rows go to, and the connection that carries them. */
struct mig_peer {
	struct mig_peer *next;
	struct dml_server *srv;
	uint32_t node_id;
	char address[300];
	char host[256];
	uint16_t port;
	struct dml_conn *conn;
	struct parcel *head;       /* in the order they are sent */
	unsigned in_flight;
	uint64_t next_id;
	struct event *timer;       /* next connection attempt */
	uint32_t backoff_ms;
	int logged_err;            /* the failure last logged, not logged again */
};

/* ---- key_ranges.c ---- */

/** Take [begin, end) out of the set. */
void dml_server_ranges_sub(struct key_ranges *r, uint64_t begin, uint64_t end);

/** Keep only what also lies in keep. */
void dml_server_ranges_intersect(struct key_ranges *r, const struct key_ranges *keep);

/** The keys (dense) or key hashes (sparse) a table's ranges divide. */
uint64_t dml_server_table_space(const Dml__TableInfo *info);

/** Add to the line (printf). */
void dml_server_line_add(struct line *l, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/** "keys 0..499" (dense) or "key hashes 0..2147483647": first and last, as
 * operators count them, after sep. */
void dml_server_line_range(struct line *l, const char *sep, const Dml__TableInfo *info,
			   uint64_t begin, uint64_t end);

/** Start one item of a list; 0 when the line already names enough. */
int dml_server_line_item(struct line *l);

/** The line, with "and N more" for the items it left out. */
const char *dml_server_line_text(struct line *l);

/* ---- job.c ---- */

/** The server node_id of map, or NULL (also for a NULL map). */
const Dml__ShardServer *dml_server_map_server(const Dml__ShardMap *map, uint32_t node_id);

/** The ranges of a table that a map gives one server. */
void dml_server_map_ranges(const Dml__ShardMap *map, uint32_t table, uint32_t server,
			   struct key_ranges *out);

/** Owned copies of a spec and a map (free_unpacked with a NULL allocator). */
Dml__JobSpec *dml_server_spec_copy(const Dml__JobSpec *spec);
Dml__ShardMap *dml_server_map_copy(const Dml__ShardMap *map);

/** ACK a SHARDMAP to the scheduler (if not registered now, it asks again). */
void dml_server_map_ack(struct dml_server *s, uint64_t request_id);

/** Answer a SHARDMAP with ERROR code and a message. */
void dml_server_map_error(struct dml_server *s, uint64_t request_id, int code,
			  const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- migrate.c ---- */

/** Free a parcel; NULL is fine. */
void dml_server_parcel_free(struct parcel *p);

/** A parcel holding copies of n rows (and, sparse, their keys). */
struct parcel *dml_server_parcel_new(uint32_t table, int dense, uint64_t begin, uint64_t end,
				     const uint64_t *keys, const float *rows, size_t n, size_t rf);

/** Rows per parcel: PARCEL_BYTES of them, and no more keys than a frame may
 * carry. */
size_t dml_server_parcel_rows(const struct dml_server *s, size_t rf, int dense);

/** Connect to the peer (now, or later after a failure). */
void dml_server_peer_connect(struct mig_peer *p);

/** The peer for node_id (its address from the current map), made if needed. */
struct mig_peer *dml_server_peer_get(struct dml_server *s, uint32_t node_id);

/** Queue a parcel to the peer. */
void dml_server_peer_enqueue(struct mig_peer *p, struct parcel *q);

/** Drop every peer, handing their undelivered parcels to *back (or freeing
 * them when back is NULL). */
void dml_server_peers_take_back(struct dml_server *s, struct parcel **back);

/* ---- remap.c ---- */

/** 1 while some range a map gave this server has not arrived. */
int dml_server_gains_pending(const struct dml_server *s);

/** After every change: ACK the map once nothing is pending, and log the end
 * of the remap once every row given away has been delivered too. */
void dml_server_job_progress(struct dml_server *s);

/** Hold copies of spec and map (the caller disposed of the old map). */
void dml_server_job_set_map(struct dml_server *s, const Dml__JobSpec *spec,
			    const Dml__ShardMap *map);

/** A newer map of the job served (m carries it): give away and wait for
 * rows as it says. */
void dml_server_remap(struct dml_server *s, const Dml__Meta *m);

#endif
