/*
 * What the files of dml-sched share and nobody else sees: the scheduler's
 * struct, its sessions, the job side's state (sched_job_*.c) and its counters
 * (sched_metrics.c). Not installed; nothing outside sched/ includes it.
 *
 * Everything here lives on the scheduler's one event loop: no locks. The
 * node table (nodes.h) and the job table (jobs.h) are pure state machines;
 * the I/O they call for (REGISTER_REPLY, SHARDMAP, ASSIGN, ...) is done by
 * sched.c and sched_job_*.c.
 */
#ifndef DML_SCHED_INTERNAL_H
#define DML_SCHED_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "proto/conn.h"
#include "proto/dml.pb-c.h"
#include "sched/jobs.h"
#include "proto/metrics.h"
#include "sched/nodes.h"
#include "proto/peers.h"
#include "sched/sched.h"

struct session {
	struct dml_peer peer;      /* first: the set's list walks sessions */
	struct dml_sched *sched;
	uint32_t role;             /* authenticated in the handshake */
	uint32_t node_id;
	uint64_t incarnation;
	int registered;            /* this connection owns (role, node_id) */
};

/* Requests counted by type (metrics name them in this order). */
enum sched_req {
	SREQ_REGISTER, SREQ_HEARTBEAT, SREQ_NODES, SREQ_BYE, SREQ_SUBMIT, SREQ_JOBS,
	SREQ_JOB_CONTROL, SREQ_SHARDMAP, SREQ_PROGRESS, SREQ_ACK, SREQ_ERROR, SREQ_OTHER,
	SREQ_KINDS
};

struct sched_stats {
	uint64_t requests[SREQ_KINDS];
	uint64_t assign_sent;      /* ASSIGN frames sent to workers */
	uint64_t shardmap_sent;    /* SHARDMAP frames sent to servers */
};

/* A node state change the job side must act on, queued by the node table's
 * callback and handled from the loop (the callback may not call back into
 * the table, and a registration's reply must go out before an ASSIGN). */
struct sched_node_event {
	uint32_t role, node_id;
	int dead;                  /* 1: declared dead or left; 0: (re)registered */
	char reason[DML_NODE_REASON_MAX + 1];
};

/* What of a job its saved record reflects (sched_state.c). */
struct sched_job_mark {
	Dml__JobState state;
	uint64_t assignment, map, installed;
	size_t events;
};

/* The scheduler's side of one job of the job table. */
struct sched_job {
	uint32_t id;
	Dml__ShardMap *map;        /* newest map (mapplan.h), NULL before start */
	uint64_t run;              /* every map's run (dml.proto), 0 before start */
	uint32_t wire_workers;     /* JobSpec.workers sent to servers and workers */
	Dml__JobState logged_state; /* what the log last said */
	char logged_reason[DML_JOB_REASON_MAX + 1];
	size_t logged_events;
	struct sched_job_mark saved; /* what the state store has */
	uint64_t saved_ms;
	int figures_dirty;         /* reports came in since it was saved */
	char wait_reason[DML_JOB_REASON_MAX + 1]; /* a server of its map is down */
};

/* One server of the active job's newest map and its installation. */
struct sched_map_server {
	uint32_t node_id;
	uint64_t request_id;       /* of the SHARDMAP last sent, 0: none sent */
	uint64_t sent_version;     /* version that request carried */
	uint64_t acked_version;    /* newest version it acknowledged, 0: none */
	uint64_t ckpt_request;     /* CHECKPOINT of the round awaiting its answer */
	uint64_t ckpt_clock;       /* its answer: the clock (prepare) ... */
	uint64_t ckpt_bytes;       /* ... and the bytes written (cut) */
};

/* A job-wide checkpoint being taken (sched_ckpt.c). */
enum sched_ckpt_phase {
	CKPT_IDLE,
	CKPT_PREPARING,            /* asked every server for its lowest cut */
	CKPT_CUTTING,              /* asked every server to cut at clock */
};

struct sched_ckpt {
	enum sched_ckpt_phase phase;
	uint64_t clock;            /* CUTTING: where; IDLE: the last round's */
	uint64_t bytes;            /* the last complete round's rows */
	uint64_t started_ms, failed_ms;
	unsigned failures;         /* rounds failed in a row */
	char failed[DML_JOB_REASON_MAX + 1]; /* why the last round failed, or "" */
};

/* A `dmlctl checkpoint JOB` waiting for the round that serves it: the one
 * being taken (next 0) or, when one was under way as it asked, the next. */
struct sched_ckpt_waiter {
	struct session *ss;
	uint64_t request_id;
	uint32_t job;
	int next;
};

/* The RUNNING or PAUSED job: where its tables stand and what its workers got. */
struct sched_active {
	uint32_t job;              /* 0: none */
	uint64_t first_request;    /* request ids above this are the job's */
	struct sched_map_server *servers; /* one per server of the newest map */
	size_t nservers;
	uint64_t sent_ms;          /* when the newest map was sent */
	uint64_t installed_version; /* newest map version every server ACKed */
	int assigned;              /* the tables were installed once and the
				    * workers got their first ASSIGN */
	Dml__JobState sent_state;  /* what the last ASSIGN round said */
	uint64_t sent_version;
	char reason[DML_JOB_REASON_MAX + 1]; /* "installing tables ..." or "" */
	struct sched_ckpt ckpt;
};

/* A zone aggregator that routes name (sched_routes.c). */
struct sched_route_agg {
	uint32_t node_id;
	char zone[DML_NODE_ZONE_MAX + 1];
	char address[DML_NODE_ADDRESS_MAX + 1];
};

/* Which aggregator each worker of the active job routes through. */
struct sched_routes {
	uint32_t job;              /* worked out for this job; 0: none yet */
	uint64_t version;          /* at this assignment version of it */
	size_t nworkers;           /* over this many of its workers */
	uint32_t *via;             /* by worker index: an index into aggs, or
				    * UINT32_MAX for straight to the servers */
	struct sched_route_agg *aggs; /* the usable ones, by (zone, node id) */
	size_t naggs;
	int stale;                 /* an aggregator or a worker changed since */
};

/* A server that refused a shard map: left out of maps until it restarts. */
struct sched_refusal {
	uint32_t node_id;
	uint64_t incarnation;
};

struct sched_role_arg {
	struct dml_sched *sched;
	uint32_t role;
};

/* What a per-worker metric of the active job shows (sched_metrics.c). */
enum sched_worker_figure {
	SWF_RATE, SWF_SPEED, SWF_BATCH, SWF_PARTITIONS, SWF_LINK, SWF_COUNT
};

struct sched_worker_arg {
	struct dml_sched *sched;
	enum sched_worker_figure figure;
};

struct dml_sched {
	const struct dml_sched_conf *conf;
	struct event_base *base;
	struct dml_listener *listener;
	uint16_t port;
	struct dml_conn_conf conn_conf;
	uint8_t *secret;
	size_t secret_len;
	struct dml_nodes *nodes;
	struct dml_peers peers;    /* struct session each */
	struct event *tick;
	/* jobs (sched_job_*.c) */
	struct dml_jobs *jobs;
	struct sched_job *xjobs;   /* by job id - 1 */
	size_t nxjobs, capxjobs;
	struct sched_active act;
	struct sched_routes routes; /* sched_routes.c */
	struct sched_node_event *events;
	size_t nevents, capevents;
	struct event *kick;        /* handles the queued node events */
	struct sched_refusal *refused;
	size_t nrefused;
	uint64_t next_request;     /* ids of the frames the scheduler sends */
	struct sched_ckpt_waiter *ckpt_waiters; /* sched_ckpt.c */
	size_t nckpt_waiters;
	/* metrics (sched_metrics.c) */
	struct sched_stats st;
	struct dml_metrics *metrics;
	struct sched_role_arg role_args[3];
	struct sched_worker_arg worker_args[SWF_COUNT];
	/* state store (sched_state.c) */
	struct dml_store *state;   /* NULL: none ([store] path empty) */
	struct event *state_ev;    /* commits what this turn of the loop staged */
	int state_failed;
};

/* ---- sched.c -------------------------------------------------------------- */

/** Monotonic milliseconds, the clock of the node and job tables. */
uint64_t dml_sched_now_ms(void);

/**
 * The node as NODES_REPLY lists it (last_heartbeat_ms as an age at now);
 * info and p borrow n's strings; an aggregator's counters go in a (NULL:
 * left out).
 */
void dml_sched_node_info(const struct dml_node *n, uint64_t now, Dml__NodeInfo *info,
			 Dml__Profile *p, Dml__AggregatorStats *a);

/** The session that owns the registered node (role, node_id), or NULL. */
struct session *dml_sched_owner(struct dml_sched *s, uint32_t role, uint32_t node_id);

/** Answer request_id with ERROR{code, message}; logged at debug level. */
void dml_sched_reply_error(struct session *ss, uint64_t request_id, int code,
			   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/** A reply with nothing but its type (ACK, HEARTBEAT echo). */
void dml_sched_reply_plain(struct session *ss, Dml__MsgType type, uint64_t request_id);

/**
 * Send m (no payload) on ss with the scheduler's node id as sender, if its
 * metadata fits max_meta. Returns 0, DML_EFRAME_META (too big; nothing
 * sent; *size, optional, gets the size) or the connection's error.
 */
int dml_sched_send(struct session *ss, Dml__Meta *m, size_t *size);

/* ---- sched_job_io.c, sched_job_run.c, sched_job_rpc.c: the job side ---- */

/** Create the job table and the loop's kick event. 0 or DML_ENOMEM. */
int dml_sched_jobs_init(struct dml_sched *s);

/** Free the job side; the loop must no longer run it. */
void dml_sched_jobs_free(struct dml_sched *s);

/** From the node table's callback: queue what the jobs must react to. */
void dml_sched_jobs_node_changed(struct dml_sched *s, const struct dml_node *n,
				 Dml__NodeState old);

/** Every tick: start a pending job when possible, update waiting reasons. */
void dml_sched_jobs_tick(struct dml_sched *s);

/*
 * Requests of the job side; each answers (or, for PROGRESS and replies,
 * deliberately does not) and never closes the connection.
 */
void dml_sched_handle_submit(struct session *ss, const Dml__Meta *m);
void dml_sched_handle_jobs(struct session *ss, const Dml__Meta *m);
void dml_sched_handle_job_control(struct session *ss, const Dml__Meta *m);
void dml_sched_handle_shardmap(struct session *ss, const Dml__Meta *m);
void dml_sched_handle_progress(struct session *ss, const Dml__Meta *m);

/** STRAGGLER from a server: maybe set the worker aside and evict it. */
void dml_sched_handle_straggler(struct session *ss, const Dml__Meta *m);
/** ACK or ERROR from a registered server or worker: a reply to our frame. */
void dml_sched_handle_reply(struct session *ss, const Dml__Meta *m);

/** The job the scheduler side keeps for id, or NULL. */
struct sched_job *dml_sched_job(struct dml_sched *s, uint32_t id);

/** A new, zeroed entry for job id (ids come in increasing order). */
struct sched_job *dml_sched_job_add(struct dml_sched *s, uint32_t id);

/* ---- sched_routes.c: zone aggregators the workers route through -------- */

/**
 * Work out the routes of the active job again if an aggregator or a worker
 * changed (routes.stale) or the job's workers or assignment version did;
 * when workers already sent the current version would route differently,
 * bump the version (an event says so) so that they all hear it.
 */
void dml_sched_routes_sync(struct dml_sched *s, struct dml_job *job);

/**
 * The aggregator (host:port) worker routes through in job, "" for
 * straight to the servers (always for a worker not live, or a job not
 * active). Valid until the next dml_sched_routes_sync; may bump the job's
 * assignment version (as dml_sched_routes_sync), so call it before
 * reading the version.
 */
const char *dml_sched_route(struct dml_sched *s, struct dml_job *job, uint32_t worker);

void dml_sched_routes_free(struct dml_sched *s);

/* ---- sched_evict.c: servers stop waiting for a lost worker ------------- */

/**
 * Worker of the active job was lost, or set aside as stalled (what: "lost",
 * "stalled", for the log): under BSP and SSP, tell every server of its map
 * to drop the worker's clock and close its connections.
 */
void dml_sched_evict(struct dml_sched *s, const struct dml_job *job, uint32_t worker,
		     const char *what);

/** Server (re)registered: tell it again of the job's workers not live. */
void dml_sched_evict_again(struct dml_sched *s, const struct dml_job *job, uint32_t server);

/* ---- sched_ckpt.c: job-wide checkpoints -------------------------------- */

/**
 * Take a checkpoint of the active job now (why: "operator", "every 100
 * clocks"). 0, or DML_ESTATE with err saying why not (no map installed, a
 * server not registered, one being taken).
 */
int dml_sched_ckpt_start(struct dml_sched *s, struct dml_job *job, const char *why,
			 uint64_t now, char *err, size_t errlen);

/**
 * `dmlctl checkpoint JOB` (request m on ss): answered once a round started
 * after it ends, with ACK{clock, bytes} or an ERROR saying why it failed.
 * A round under way when it asks is not its: the next one starts as that
 * one ends.
 */
void dml_sched_ckpt_ask(struct dml_sched *s, struct session *ss, struct dml_job *job,
			const Dml__Meta *m, uint64_t now);

/** A connection closed: forget the checkpoints it waited for. */
void dml_sched_ckpt_forget(struct dml_sched *s, struct session *ss);

/** Delete the active job's checkpoint at clock on its servers. 0 or an error (err). */
int dml_sched_ckpt_drop(struct dml_sched *s, struct dml_job *job, uint64_t clock,
			uint64_t now, char *err, size_t errlen);

/** A server's answer: 1 when it answered the round's CHECKPOINT. */
int dml_sched_ckpt_reply(struct dml_sched *s, struct sched_map_server *ms,
			 const Dml__Meta *m, uint64_t now);

/** Every sync of the active job: checkpoints due, rounds that take too long. */
void dml_sched_ckpt_tick(struct dml_sched *s, struct dml_job *job, uint64_t now);

/** The round cannot go on (the map changed, the job ended): say why. */
void dml_sched_ckpt_abandon(struct dml_sched *s, struct dml_job *job, const char *why,
			    uint64_t now);

/** What JobStatus.checkpoint_state says of the active job ("" when idle). */
const char *dml_sched_ckpt_state(struct dml_sched *s, char *buf, size_t len);

/* ---- sched_state.c ------------------------------------------------------ */

/**
 * Open the [store] and take back the nodes and jobs it holds (before the
 * scheduler listens). 0; DML_ECONF, DML_EIO (logged, with the file and the
 * record); 0 with a warning when no path is set.
 */
int dml_sched_state_open(struct dml_sched *s);

/** Commit what is staged and close the store. */
void dml_sched_state_close(struct dml_sched *s);

/** Save a node (it registered or died) with this turn's commit. */
void dml_sched_state_node(struct dml_sched *s, const struct dml_node *n);

/** Save the jobs that changed, and the figures of those due. */
void dml_sched_state_jobs(struct dml_sched *s, uint64_t now);

/** A job's figures changed (a PROGRESS report). */
void dml_sched_state_figures(struct dml_sched *s, uint32_t job);

/** 1 once a commit failed (the scheduler stops; exit status 1). */
int dml_sched_state_failed(const struct dml_sched *s);

/* ---- sched_metrics.c ---------------------------------------------------- */

/**
 * Create the registry, register every metric and, when metrics_listen is
 * set, serve it (writing metrics_port_file). DML_EINVAL if a metric was
 * refused, DML_ECONF or DML_EIO when the endpoint cannot start.
 */
int dml_sched_metrics_init(struct dml_sched *s);

#endif
