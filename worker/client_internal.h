/*
 * libdml internals shared by its source files (not installed): the options,
 * and the interface between the request machinery (client.c) and the shard
 * maps it routes by when a scheduler hands them out (client_map.c).
 */
#ifndef DML_CLIENT_INTERNAL_H
#define DML_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "conf.h"
#include "conn.h"
#include "dml.pb-c.h"
#include "shardmap.h"

/* The most servers one client talks to. */
#define DML_CLIENT_MAX_SERVERS 4096

struct dml_client_conf {
	char *servers;
	char *scheduler;
	char *secret_file;
	char *cluster;
	uint32_t worker_id;
	int role;                 /* 0 worker, 1 control */
	uint32_t job;
	uint64_t clock;
	uint64_t incarnation;     /* 0: a random one */
	uint32_t connect_timeout_ms;
	uint32_t reconnect_timeout_ms;
	uint32_t request_timeout_ms;
	uint64_t max_payload;
	uint64_t max_meta;
	uint32_t spin_us;
};

struct dml_opts {
	struct dml_client_conf conf;
};

extern const struct dml_conf_schema dml_client_conf_schema;

/* ---- shard maps from a scheduler (client_map.c) --------------------------- */

/** A server of a map, where clients dial it. */
struct dml_client_server {
	uint32_t node_id;
	char host[256];
	uint16_t port;
};

/**
 * A checked shard map as libdml routes by: shard.version is the map's
 * version and each range's server is an index into servers.
 */
struct dml_client_map {
	uint32_t job;
	struct dml_shard_map shard;
	struct dml_client_server *servers;
	uint32_t nservers;
};

/**
 * Check a map and its job's spec from the wire and build the routing form.
 * Checked: version >= 1; 1..DML_CLIENT_MAX_SERVERS servers with distinct
 * non-zero node ids and host:port addresses; tables with distinct ids,
 * width >= 1, dense ones with keys >= 1; every range names a table of the
 * spec and a listed server, and each table's ranges cover its key space
 * (dense) or hash space (sparse) exactly once. Returns 0 or DML_ECONF with
 * a one-line reason in err; out is left empty on failure.
 */
int dml_client_map_from_wire(const Dml__ShardMap *wire, const Dml__JobSpec *spec,
			     struct dml_client_map *out, char *err, size_t errlen);
/** Free what a map holds (safe on a zeroed or moved-from map). */
void dml_client_map_destroy(struct dml_client_map *m);

/** The connection to dml-sched that map fetches go over. */
struct dml_client_sched;

/**
 * A fetch ended: rc 0 with a checked map (the callee owns its contents and
 * destroys them), or an error with a reason: the scheduler's ERROR code and
 * message, DML_ECONF for a map that fails the checks, or the handshake's
 * code when the scheduler refused this client (auth, cluster). A lost or
 * refused connection is not reported here: the fetch stays pending and the
 * connection is retried with backoff.
 */
typedef void (*dml_client_map_fn)(void *arg, int rc, struct dml_client_map *map,
				  const char *why);

/**
 * Make the scheduler connection (it connects when a fetch is first wanted).
 * cc is copied; its pointers stay borrowed. job 0 asks for the active job.
 * 0 or DML_EINVAL (address not host:port).
 */
int dml_client_sched_new(struct event_base *base, const struct dml_conn_conf *cc,
			 const char *hostport, uint32_t job, dml_client_map_fn fn, void *arg,
			 struct dml_client_sched **out);
/** Ask for the maps of this job from now on. */
void dml_client_sched_set_job(struct dml_client_sched *s, uint32_t job);
/**
 * Want a fetch. Nothing happens while one is pending or in flight.
 * Otherwise the first fetch goes at once and each one after it waits a
 * backoff that doubles from 20 ms to 500 ms, until the pace is reset.
 */
void dml_client_sched_fetch(struct dml_client_sched *s);
/** Next fetch at once again (a newer map arrived). */
void dml_client_sched_pace_reset(struct dml_client_sched *s);
/** "scheduler host:port", and why the connection last failed ("" if never). */
const char *dml_client_sched_name(const struct dml_client_sched *s);
const char *dml_client_sched_last_error(const struct dml_client_sched *s);
/** Has a connection ever reached the handshake's end? */
int dml_client_sched_ever_ready(const struct dml_client_sched *s);
/** Close the connection, run its teardown on the loop and free. NULL is fine. */
void dml_client_sched_free(struct dml_client_sched *s);

#endif
