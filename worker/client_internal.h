/*
 * libdml internals shared by its source files (not installed): the options,
 * the handle and its requests, parts and server links (client.c: the
 * public request calls; client_parts.c: bookkeeping, sending, routing;
 * client_link.c: connection events and housekeeping; client_connect.c:
 * connect and close; client_aggregator.c: the zone aggregator link, the
 * path each part takes and the CLOCKs held for it), and the interface to
 * the shard maps it routes by when a scheduler hands them out
 * (client_map.c).
 */
#ifndef DML_CLIENT_INTERNAL_H
#define DML_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include <event2/event.h>

#include "worker/client_conf.h"
#include "proto/conf.h"
#include "proto/conn.h"
#include "worker/dml.h"
#include "proto/dml.pb-c.h"
#include "proto/table_spec.h"
#include "shard/shardmap.h"

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
	int local_socket;         /* dial this host's daemons over Unix sockets */
	char *zone;               /* where this client is: picks codecs per link */
	/* standalone: each table's codecs, [within a zone, across zones] */
	char *codec[2], *pull_codec[2];
	char *aggregator;         /* host:port of the zone aggregator, "" for none */
	uint32_t aggregator_timeout_ms; /* down this long with parts: fall back */
};

struct dml_opts {
	struct dml_client_conf conf;
};

/* ---- the handle, its requests, parts and server links ------------------- */

#define TICK_MS 50
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 2000
#define CLOSE_WAIT_MS 10000
/* Without request_timeout_ms, a part the servers keep refusing (DML_ERANGE)
 * while the map does not change fails after this long. */
#define BOUNCE_LIMIT_MS 30000
/* A request sent this often without an answer, each time losing its
 * connection, is what breaks the connection: fail it instead of looping. */
#define MAX_SENDS 5
/* How long dml_close waits for its BYEs after dml_interrupt. */
#define CLOSE_INTERRUPTED_MS 1000
/* Requests are checked against their deadlines at most this often: the
 * check walks every part in flight, and a wait runs housekeeping per event. */
#define EXPIRE_EVERY_NS 1000000ull

enum part_kind { PART_PUSH, PART_PULL, PART_BYE };

struct request;
struct part;

struct part_list {
	struct part *head, *tail;
};

struct part {
	struct part *prev, *next;      /* its list: a link's in-flight list, or parked */
	struct part *hnext;            /* wire-id hash chain (only while on a link) */
	struct request *req;
	struct link *link;             /* NULL while parked */
	struct link *owner;            /* on the aggregator link: its owner's link */
	enum part_kind kind;
	uint64_t wire_id;
	uint64_t seq;
	float weight;                  /* push: Meta.weight, 0 for 1 */
	unsigned sends;                /* times written to a connection */
	uint32_t table, width;
	int dense;
	uint64_t begin, end;
	uint32_t nkeys;
	const uint64_t *keys;          /* borrowed from the caller, or keys_own */
	const float *vals;             /* push: borrowed, or vals_own */
	float *out;                    /* pull: destination of row 0 */
	uint32_t *pos;                 /* pull: caller row of each reply row */
	uint64_t *keys_own;
	float *vals_own;
	uint8_t *coded;                /* push: its values as sent, once encoded */
	size_t coded_len;
	Dml__DType dtype;              /* push: of coded; pull: the reply's */
	uint64_t map_version;          /* of the map it was routed by */
	uint64_t bounced_ns;           /* first DML_ERANGE answer; 0 if none */
	int waited;                    /* parked through one fetch already */
	int clock_held;                /* an aggregator push: holds the CLOCK past epoch */
	uint64_t epoch;                /* the clock it was issued at */
};

struct request {
	struct request *hnext;
	dml_handle_t id;
	unsigned parts_left;
	int result;
	int pull;
	uint64_t min_clock;
	uint64_t held_ns;              /* the longest a server held a part */
	uint64_t deadline_ns;
};

struct link {
	struct dml *d;
	uint32_t index;                /* standalone: position in the servers list */
	uint32_t node_id;              /* with a scheduler: the server's node id */
	char host[256];
	uint16_t port;
	struct dml_conn *conn;
	int ready;
	int failed;                    /* gave up: requests to it fail */
	int fatal;                     /* handshake refused: do not retry */
	int retired;                   /* not in the current map: close once idle */
	int closing;                   /* retired and idle: close under way */
	uint64_t next_seq;
	uint64_t lost_since_ns;
	uint64_t retry_at_ns;
	uint32_t backoff_ms;
	struct part_list q;
	Dml__TableInfo **tables;       /* standalone: copied from WELCOME */
	size_t ntables;
	int cross_zone;                /* its WELCOME named a zone other than ours */
	uint32_t codecs;               /* bit (1 << dtype): the server takes it */
	int aggregator;                /* the zone aggregator's link, not a server's */
	int relays_clocks;             /* aggregator: its WELCOME said it takes CLOCKs */
	/* an owner's parts in flight per path (ordering rule 1: a part goes
	 * the way the owner's unanswered ones went) */
	uint32_t via_aggregator, direct;
};

/* Aggregator pushes in flight that were issued at one clock: a CLOCK past
 * it waits for them (ordering rule 4). */
struct clock_hold {
	uint64_t clock;
	uint32_t pushes;
};

/* How one table's values travel, and what its lossy pushes did not send. */
struct client_table_codec {
	uint32_t table, width;
	int dense;
	uint64_t keys;
	struct dml_link_codecs link[2];  /* [0] within a zone, [1] across zones */
	struct dml_residual *res;        /* NULL until a lossy push */
};

struct client_codecs {
	struct client_table_codec *t;
	uint32_t n;
	uint32_t pace;                   /* the job's Meta.pace (DML_PACE_*) */
};

/* An event loop and the handles on it (dml_connect_shared). */
struct dml_loop {
	struct event_base *base;
	unsigned refs;
};

struct dml {
	struct dml_client_conf conf;
	struct dml_loop *loop;
	struct event_base *base;       /* loop->base */
	struct event *tick;
	struct dml_conn_conf cc;
	uint8_t *secret;
	size_t secret_len;
	struct link **links;           /* every open link, retired ones too */
	uint32_t nlinks;
	struct dml_shard_map map;      /* version 0 in standalone mode */
	struct link **route;           /* map server index -> link */
	uint32_t nroute;

	struct dml_client_sched *sched; /* NULL in standalone mode */
	struct part_list parked;       /* refused with DML_ERANGE, waiting for a map */
	int connecting;                /* inside dml_connect */
	int map_rc;                    /* the last fetch's error, for dml_connect */
	char map_why[512];

	uint64_t clock;
	uint64_t clock_sent;           /* the clock the servers were told */
	struct clock_hold *holds;      /* oldest first; empty without an aggregator */
	uint32_t nholds, holds_cap;
	struct link *agg;              /* the zone aggregator; NULL for none */
	float push_weight;             /* of pushes from now on; 0 for 1 */
	uint64_t last_min_clock;
	uint64_t held_ns;              /* pulls waited for, held by their servers */
	uint64_t bytes_closed;         /* moved over connections closed since */
	struct client_codecs codecs;   /* per table, from the job spec */
	/* values pushed and pulled, [within a zone, across zones][as floats,
	 * as sent]: a push counts at each server it is routed to, a pull at
	 * its reply (dml_link_bytes) */
	uint64_t value_bytes[2][2];
	uint64_t next_handle, next_wire;
	uint64_t expire_at_ns;         /* the next deadline check (EXPIRE_EVERY_NS) */
	struct request **reqs;         /* handle hash */
	struct part **parts;           /* wire-id hash */
	size_t nbuckets;               /* power of two, shared by both */
	size_t nreqs;
	int sticky_error;              /* first error of a handle-less request */
	atomic_int interrupted;        /* dml_interrupt: waits return DML_EINTR */
	char detail[512];
};

/* The values a push carries or a pull asks for: rows times width. */
static inline size_t dml_client_part_values(const struct part *p)
{
	return (size_t)(p->dense ? p->end - p->begin : p->nkeys) * p->width;
}

/* client_parts.c: requests and parts, sending and routing. */
struct request *dml_client_find_request(struct dml *d, dml_handle_t id);
struct request *dml_client_request_new(struct dml *d, int pull);
void dml_client_request_unlink(struct dml *d, struct request *r);
void dml_client_request_free(struct dml *d, struct request *r);
struct part *dml_client_find_part(struct dml *d, uint64_t wire_id);
void dml_client_part_finish(struct dml *d, struct part *p, int rc);
int dml_client_part_send(struct dml *d, struct part *p);
void dml_client_send_clock(struct link *l);
/* CLOCK (d->clock_sent) for owner link l, through the aggregator's link. */
void dml_client_send_clock_via(struct dml *d, struct link *l);
int dml_client_part_submit(struct dml *d, struct part *p, struct link *l);
const struct dml_shard_table *dml_client_lookup_table(struct dml *d, uint32_t table);
struct part *dml_client_part_new(struct dml *d, enum part_kind kind,
				 const struct dml_shard_table *t);
int dml_client_part_route(struct dml *d, struct part *p);
void dml_client_part_bounce(struct dml *d, struct part *p);
void dml_client_parked_release(struct dml *d);
/* A split pull's reply rows (in its order, any alignment) to the caller's
 * rows they stand for (p->pos). */
void dml_client_pull_scatter(const struct part *p, const void *rows);
/* Move a part in flight, as it is (wire id, seq), to the tail of link to. */
void dml_client_part_relink(struct part *p, struct link *to);

/* client_link.c: server links, connection events, housekeeping. */
void dml_client_link_fail_all(struct link *l, int rc);
void dml_client_link_connect(struct link *l);
struct link *dml_client_link_add(struct dml *d, const char *host, uint16_t port);
void dml_client_link_free(struct link *l);
void dml_client_housekeeping(struct dml *d);
void dml_client_run_until(struct dml *d, int (*done)(struct dml *, void *), void *arg,
			  uint64_t deadline_ns);
int dml_client_request_done(struct dml *d, void *arg);
int dml_client_nothing_in_flight(struct dml *d, void *arg);
void dml_client_tick_cb(evutil_socket_t fd, short what, void *arg);

/* client_codec.c: codecs per table and link, error-feedback residuals. */
int dml_client_codecs_from_spec(const Dml__JobSpec *spec, struct client_codecs *out,
				char *err, size_t errlen);
void dml_client_codecs_install(struct dml *d, struct client_codecs *next);
void dml_client_codecs_free(struct client_codecs *cs);
/* Values that went over l: floats of them, sent bytes as they travelled. */
void dml_client_count_values(struct dml *d, const struct link *l, size_t floats,
			     size_t sent);
/* The L2 norm of the table's residual; 0 when it has none. */
double dml_client_residual_norm(const struct dml *d, uint32_t table);
/* At a part's first send: a push's values encoded (p->coded, with the
 * residual updated) when its link's codec is lossy; a pull's reply dtype. */
int dml_client_part_encode(struct dml *d, struct part *p);
/* Back to floats before a part goes to another server (vals_own). */
int dml_client_part_uncode(struct part *p);
/* Would p travel over link l in the dtype it has now (F32 if not coded)? */
int dml_client_part_codec_fits(struct dml *d, const struct part *p, const struct link *l);
/* A push or pull through the aggregator: the codec it is to send the zone's
 * sum in, or pull in (its owner's link class), formatted in buf; NULL for
 * floats. */
const char *dml_client_forward_codec(struct dml *d, const struct part *p, char *buf,
				     size_t len);
/* A PULL_REPLY in p's reply codec into p's output; DML_ESHAPE if bad. */
int dml_client_reply_decode(struct part *p, const Dml__Meta *m, const uint8_t *payload,
			    size_t len);

/* client_aggregator.c: the zone aggregator link and the CLOCK ordering. */
int dml_client_agg_setup(struct dml *d);
void dml_client_agg_free(struct dml *d);
/* The link a part for owner link l goes on: l, or the aggregator's. */
struct link *dml_client_path(struct dml *d, struct link *l, enum part_kind kind);
/* A part went on a link (p->link and p->owner set) / left it. */
void dml_client_path_enter(struct dml *d, struct part *p);
void dml_client_path_leave(struct dml *d, struct part *p);
int dml_client_agg_welcome(struct link *l, const Dml__Handshake *w);
void dml_client_agg_housekeeping(struct dml *d, uint64_t now);
/* The clock owner link l may hear straight: d->clock_sent, or the clock
 * before the aggregator pushes still unanswered while l has parts there. */
uint64_t dml_client_clock_straight(const struct link *l);
/* Tell the servers of the map the clock they may hear now: d->clock, or
 * earlier while aggregator pushes from before it are unanswered and the
 * aggregator cannot carry the CLOCK behind them. */
int dml_client_clock_announce(struct dml *d);
/* The aggregator's link is ready again: the clock goes behind the parts
 * it resent, for the owners they are for. */
void dml_client_agg_clock_resend(struct dml *d);

/* client_connect.c: connect and close. */
void dml_client_free_all(struct dml *d);

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
	struct client_codecs codecs;   /* per table of the job spec */
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
