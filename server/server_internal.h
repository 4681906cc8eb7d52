/*
 * What the files of dml-server share beyond server.h: the server's state,
 * the job it serves, and the helpers its files call in each other
 * (server.c: sessions; requests.c and replies.c: requests and replies;
 * job.c, remap.c and migrate.c: shard maps and moving rows; server_sched.c:
 * the scheduler link; server_metrics.c). Not installed; nothing outside
 * server/ includes it.
 */
#ifndef DML_SERVER_INTERNAL_H
#define DML_SERVER_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "proto/codec.h"
#include "proto/conn.h"
#include "proto/metrics.h"
#include "proto/peers.h"
#include "server/server.h"
#include "server/ssp.h"
#include "store/table.h"

struct dml_sched_link;
struct mig_peer;
struct step_acc;
struct server_cut;
struct server_store;

/* Half-open ranges of keys (dense tables) or key hashes (sparse tables). */
struct key_range {
	uint64_t begin, end;
};

/* A set of keys kept as sorted, disjoint, non-touching ranges. */
struct key_ranges {
	struct key_range *r;
	size_t n, cap;
};

struct table_entry {
	struct dml_table *table;   /* never NULL (a dense one may hold no rows) */
	Dml__TableInfo info;       /* id, kind, width, keys (metrics, WELCOME) */
	struct key_ranges served;  /* what requests may touch now */
	struct key_ranges pending; /* gained by a remap, rows not arrived yet */
	struct key_ranges moved_in; /* recovery: ranges whose moved rows the log held */
	struct step_acc *acc;      /* BSP: pushes waiting for their clock's step, or NULL */
};

struct session {
	struct dml_peer peer;      /* first: the set's list walks sessions */
	struct dml_server *srv;
	uint32_t role;
	uint32_t node_id;
	int worker;                /* counts in the clock set */
	size_t widx;               /* index into srv->ssp.workers */
	int budget_wait;           /* a pull held for the output budget */
	size_t out_seen;           /* output queued at the last tick */
	uint64_t out_since_ns;     /* when that queue last shrank (0: empty) */
};

/*
 * A pull that arrived before the staleness bound allowed it. te stays valid
 * while it is parked: a new job drops every parked pull before it replaces
 * the tables.
 */
struct held_pull {
	struct held_pull *next;
	struct session *sess;
	uint64_t received_ns;      /* for the latency and wait histograms */
	uint64_t request_id;
	uint64_t clock;
	uint32_t worker;           /* whose pull: the worker's, or the one an
				    * aggregator asks for (straggler reports) */
	struct table_entry *te;
	int dense;
	uint64_t begin, end;
	uint64_t *keys;
	uint32_t nkeys;
	Dml__DType dtype;          /* how the reply carries the values */
	struct dml_codec delta;    /* a delta pull's codec (pull_delta.c); NONE: not one */
	uint64_t base;             /* the version its puller holds */
};

/*
 * The job whose tables this server holds (job.c). Job 0 is the
 * tables of the config file, or none yet on a server that takes its tables
 * from the scheduler.
 */
struct server_job {
	uint32_t id;
	uint64_t version;          /* shard map version served or being installed */
	Dml__JobSpec *spec;        /* owned copies of the last map installed */
	Dml__ShardMap *map;
	uint64_t ack_id;           /* SHARDMAP to ACK once every gain arrived */
	int ack_due;
	uint64_t started_ns;       /* when the remap in progress began */
	uint64_t last_rows_ns;     /* when rows last arrived (or it began) */
	uint64_t rows_in, rows_out; /* rows moved by it so far */
	int remapping;             /* a remap's gains or parcels are outstanding */
	struct mig_peer *peers;    /* servers that rows given away go to */
};

/* Requests counted by type (metrics name them in this order). */
enum req_kind {
	REQ_PUSH, REQ_PULL, REQ_CLOCK, REQ_STATS, REQ_HEARTBEAT, REQ_BYE, REQ_KINDS
};

struct stats {
	uint64_t pushes, pulls, duplicates, held, bad_frames, bytes_in, bytes_out;
	uint64_t stale_scaled;     /* pushes applied scaled by their staleness */
	uint64_t deferred;         /* pushes held for their clock's step (BSP) */
	uint64_t steps;            /* BSP steps: a clock's pushes applied at once */
	uint64_t nonfinite;        /* pushes refused for NaN or infinite values */
	uint64_t bad_codings;      /* pushes refused for a bad codec encoding */
	/* values that travelled in a codec: [0] pushes in, [1] replies out;
	 * their bytes on the wire and as floats */
	uint64_t coded_wire[2], coded_floats[2];
	uint64_t seq_jumps;        /* pushes refused for a seq past the window */
	uint64_t pushes_forwarded; /* aggregators' summed pushes applied */
	uint64_t forwarded_contributors; /* the workers' pushes they held */
	uint64_t pushes_partial;   /* summed pushes refused: some pushes applied already */
	uint64_t budget_held;      /* pulls that waited for the output budget */
	uint64_t output_stalled;   /* connections closed for unread replies */
	uint64_t delta_pulls;      /* delta pulls answered with a delta */
	uint64_t delta_resyncs;    /* ... and with the values themselves */
	uint64_t requests[REQ_KINDS];
};

struct dml_server {
	const struct dml_server_conf *conf;
	struct event_base *base;
	struct dml_listener *listener;
	uint16_t port;
	struct dml_conn_conf conn_conf;
	uint8_t *secret;
	size_t secret_len;
	const struct dml_conn_ops *ops;

	struct table_entry *tables;
	size_t ntables;
	int job_mode;              /* tables come from the scheduler's maps */
	struct server_job job;
	uint32_t dead_after_ms;    /* the clock set's, from the job or the config */
	int stale_scaling;         /* enum dml_stale_scaling, from the job or the config */
	int bsp_step;              /* enum dml_bsp_step, from the job or the config */
	int allow_nonfinite;       /* NaN and infinite pushes applied, from the job or config */
	size_t out_share;          /* each connection's share of output_budget */
	int budget_waiting;        /* some pull may wait for the output budget */
	uint64_t step_min_clock;   /* the slowest clock when the last step was taken */
	/* What WELCOME reports: one TableInfo per range held, and where this
	 * server stands in the map. */
	Dml__TableInfo *winfo;
	Dml__TableInfo **winfos;
	size_t nwinfos;
	uint32_t shard_index, shard_count;

	struct dml_ssp ssp;
	struct dml_peers peers;    /* struct session each */
	struct held_pull *held;
	struct stats st;
	struct dml_metrics *metrics;
	struct dml_histogram *push_latency, *pull_latency, *held_wait;

	float *scratch;            /* pull replies (and scaled pushes) are assembled here */
	size_t scratch_cap;
	uint8_t *coded;            /* encoded pull replies */
	size_t coded_cap;
	struct {                   /* pull_delta.c: what delta pullers hold */
		struct pull_copy *copies;
		size_t ncopies;
		uint64_t next;     /* the last version given */
	} delta;
	struct event *tick;
	struct dml_sched_link *sched; /* registration with dml-sched, or NULL */
	struct server_store *store;   /* the gradient log, or NULL (server_store.c) */
	int store_failed;             /* a commit failed: the loop was stopped */
	struct server_cut *cut;       /* a job-wide checkpoint (ckpt_cut.c) */
	struct server_snap *snap;     /* rows being copied for one (row_snapshot.c) */
	/* server_straggler.c: the slowest clock, since when it stood still,
	 * and when the scheduler was last told who holds it (0: not yet) */
	struct {
		uint64_t clock, since_ns, told_ns;
	} strag;
};

/* ---- replies.c, requests.c, server.c ---- */

/** A PUSH's weight (Meta.weight, 0 meaning 1), checked positive and finite. */
static inline float dml_push_weight_of(const Dml__Meta *m)
{
	return m->weight != 0.0f ? m->weight : 1.0f;
}

/** Answer request_id with ERROR code; DML_ERANGE carries the map version. */
void dml_server_reply_error(struct session *ss, uint64_t request_id, int code,
			    const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/** Answer request_id with ACK. */
void dml_server_reply_ack(struct session *ss, uint64_t request_id);

/**
 * The scheduler lost worker (EVICT): close its connections and drop it
 * from the clock set, so that the others stop waiting for its clock. It
 * rejoins, at the slowest clock, when it connects again.
 */
void dml_server_evict(struct dml_server *s, uint32_t worker);

/* ---- server_admit.c ---- */

/* How far one push may move a worker's last_seq (see server_admit.c). */
#define DML_SEQ_WINDOW (1ull << 20)

/* DML_SEQ_REFUSED: refused and answered already (forwarded.c). */
enum { DML_SEQ_NEW, DML_SEQ_RESEND, DML_SEQ_JUMP, DML_SEQ_REFUSED };

/**
 * Where a push of seq from worker w (NULL: not a worker) stands:
 * DML_SEQ_NEW (apply it), DML_SEQ_RESEND (applied before: acknowledge
 * only) or DML_SEQ_JUMP (past the resend window: refuse it).
 */
int dml_server_seq_check(const struct dml_ssp_worker *w, uint64_t seq);

/**
 * The push's values are acceptable to this job (finite, or the job allows
 * otherwise): 1. Else the push was answered with an error and counted: 0.
 */
int dml_server_push_admit(struct session *ss, const Dml__Meta *m, const uint8_t *payload);
/** The bytes of a push's keys and its count of values (the frame checks
 * made sure they fit its payload). */
void dml_server_push_sizes(const Dml__Meta *m, uint64_t *keybytes, uint64_t *n);
/**
 * The push's payload with its values as floats: payload itself for F32,
 * else decoded into the scratch buffer (server_admit.c). NULL when the
 * encoding is bad or memory ran out, the error already answered.
 */
const uint8_t *dml_server_push_decode(struct session *ss, const Dml__Meta *m,
				      const uint8_t *payload);

/* ---- forwarded.c ---- */

/**
 * Where a PUSH naming contributors (or any PUSH of an aggregator) stands:
 * DML_SEQ_NEW (apply it once), DML_SEQ_RESEND (every push in it applied
 * before: acknowledge only) or DML_SEQ_REFUSED (answered with the error).
 * Changes no worker's state.
 */
int dml_server_forwarded_check(struct session *ss, const Dml__Meta *m);

/** A summed push dml_server_forwarded_check let in was applied: every
 * contributor's last_seq moves to its seq, and it is counted. */
void dml_server_forwarded_applied(struct dml_server *s, const Dml__Meta *m);

/**
 * The clocks an aggregator delivers (Contributor.clock) with a summed push
 * applied or acknowledged as a resend, or in a CLOCK of its own: each live
 * worker of the incarnation named moves to its clock, and pulls waiting
 * for them are answered.
 */
void dml_server_forwarded_clocks(struct dml_server *s, const Dml__Meta *m);

/* ---- server_budget.c ---- */

/**
 * A PULL m of ss would take the output queued for peers past output_budget:
 * 1 (on_frame holds it; dml_server_budget_tick hands it back), else 0.
 */
int dml_server_budget_holds(struct session *ss, const Dml__Meta *m);

/** Each tick: connections' shares of the budget, and held pulls handed back. */
void dml_server_budget_tick(struct dml_server *s);

/* ---- server_expire.c ---- */

/** Forget the workers gone for forget_worker_after_ms (see server_expire.c). */
void dml_server_workers_expire(struct dml_server *s);

/* ---- bsp_step.c ---- */

/** Whether a push to te waits for its clock's step (BSP, bsp_step = clock,
 * a dense table). */
int dml_server_step_defers(const struct dml_server *s, const struct table_entry *te);

/**
 * Add a dense push of [begin, end) (keys te serves) of the given weight to
 * te's step. 0 or DML_ENOMEM (nothing added).
 */
int dml_server_step_add(struct table_entry *te, uint64_t begin, uint64_t end,
			const float *vals, float weight);

/** Whether any push waits for a step. */
int dml_server_step_pending(const struct dml_server *s);

/** Apply every waiting push, each table's as one push of its summed weight,
 * logging nothing (a replay: the log has the step). 0 or the first error. */
int dml_server_step_apply(struct dml_server *s);

/** Take a step of whatever waits (nothing: nothing happens) and log it; a
 * failure stops the server (the log still has the pushes). */
void dml_server_step_flush(struct dml_server *s);

/** Take a step when the slowest clock moved since the last (dml_server_release_held). */
void dml_server_step_clock(struct dml_server *s);

/** Take a step and free the accumulators: the rows served are to change. */
void dml_server_step_reset(struct dml_server *s);

/** Free te's accumulator (its sums are dropped). */
void dml_server_step_free(struct table_entry *te);

/* ---- server_straggler.c ---- */

/** Every tick: tell the scheduler of a worker that holds parked pulls. */
void dml_server_straggler_tick(struct dml_server *s);

/* ---- tables.c ---- */

/** The entry of table id, or NULL. */
struct table_entry *dml_server_find_table(struct dml_server *s, uint32_t id);

/** Build the config file's tables, each split evenly by "shard = i/n". 0 or
 * the error of the table that could not be made. */
int dml_server_build_tables(struct dml_server *s);

/** Free every table entry (tables and range sets); ntables becomes 0. */
void dml_server_tables_free(struct dml_server *s);

/**
 * Rebuild what WELCOME reports from the tables (config mode: each table's
 * own range) or from the map (job mode: the ranges the map gives this
 * server, arrived or not).
 */
void dml_server_welcome_rebuild(struct dml_server *s);

/** The scratch buffer grown to hold floats floats; NULL when it cannot grow. */
float *dml_server_scratch(struct dml_server *s, uint64_t floats);

/* ---- replies.c ---- */

/** Answer pull h (its sess, request and table; next and clock are not
 * used) from its table; held_ns: how long it waited for the staleness
 * bound, which the reply says. */
void dml_server_answer_pull(const struct held_pull *h, uint64_t held_ns);

/** s->coded grown to need bytes at least (replies.c); NULL: no memory. */
uint8_t *dml_server_coded(struct dml_server *s, size_t need);

/* ---- pull_delta.c ---- */

struct pull_copy;

/**
 * The reply to a delta pull h (Meta.delta_codec) of values (floats of
 * them): a delta against the version the puller holds, else the values;
 * sets m's dtype, delta and base and the bytes to send (s->coded or values).
 */
void dml_server_delta_reply(struct session *ss, const struct held_pull *h,
			    const float *values, uint64_t floats, Dml__Meta *m,
			    const void **bytes, size_t *len);
/** Forget every puller's copy (a new job, or shutdown). */
void dml_server_delta_drop(struct dml_server *s);

/** Take the step of a clock every worker ended, then answer every parked
 * pull the clocks now allow; a checkpoint may be due. */
void dml_server_release_held(struct dml_server *s);

/** Drop the parked pulls of ss (NULL: all), answering them with code unless 0. */
void dml_server_drop_held(struct dml_server *s, struct session *ss, int code, const char *why);

/** Answer every parked pull with ERROR code and message why (a new job). */
void dml_server_held_fail_all(struct dml_server *s, int code, const char *why);

/** Answer DML_ERANGE (with the map version) to the parked pulls whose keys
 * this server no longer serves (after a remap). */
void dml_server_held_recheck(struct dml_server *s);

/* ---- requests.c ---- */

/** The clock-set worker of a worker session; NULL for other roles. */
struct dml_ssp_worker *dml_server_session_worker(struct session *ss);

/** A frame of a session (the connection's on_frame). */
int dml_server_on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
			size_t len, void *arg);

/* ---- server.c ---- */

/**
 * A new clock set (a new job): staleness and expected workers; the workers
 * connected for the current job (their HELLO named it) join it again.
 */
void dml_server_clock_reset(struct dml_server *s, int64_t staleness, uint32_t workers);

/* ---- server_store.c ---- */

/**
 * Open the store of the config ([store]) and replay its log into the
 * tables; nothing without a path or with durability none. 0 or the error
 * (logged, naming the store and the cause).
 */
int dml_server_store_open(struct dml_server *s);

/**
 * A push was applied: log it and acknowledge it when the durability mode
 * allows (sync: after the commit of this turn of the loop). A push naming
 * contributors (an aggregator's) is logged under the first one's worker,
 * incarnation and seq, with a sequence-only record for each other one.
 */
void dml_server_store_pushed(struct session *ss, const Dml__Meta *m, const uint8_t *payload,
			     uint32_t worker, uint64_t incarnation, int deferred);

/**
 * A BSP step applied the deferred pushes (bsp_step.c): log where, so
 * that a replay takes the same steps; a checkpoint the log's size calls
 * for is taken now, when no push waits for one.
 */
void dml_server_store_stepped(struct dml_server *s);

/**
 * Rows another server sent (MIGRATE) were installed: log them, with the
 * range they cover, and acknowledge them after the commit, so that the
 * sender frees them only once they are on disk here.
 */
void dml_server_store_moved(struct session *ss, const Dml__Meta *m, const uint8_t *payload);

/** A push already applied came again: acknowledge it once its first is logged. */
void dml_server_store_duplicate(struct session *ss, uint64_t request_id);

/** ss is closing: its waiting ACKs are dropped. */
void dml_server_store_forget(struct dml_server *s, struct session *ss);

/**
 * w's process is replaced by another incarnation: keep its push sequence,
 * should a resend of the old process (still alive) come after all.
 */
void dml_server_store_keep_seq(struct dml_server *s, const struct dml_ssp_worker *w);

/** A worker (re)joined the clock set: its push sequence as the log left it. */
void dml_server_store_join(struct dml_server *s, struct dml_ssp_worker *w);

/* What dml_server_store_job brought back. */
enum store_recovered {
	STORE_RECOVERED_NONE,      /* nothing: a new run, or the rows are elsewhere */
	STORE_RECOVERED_ALL,       /* every row of the map's ranges */
	STORE_RECOVERED_MOVED_IN,  /* joined at this version: the rows that had
				    * moved in, ranges in each table's moved_in */
	STORE_RECOVERED_RESUME,    /* the rows of an older map (and what moved in
				    * for this one): the move to resume */
};

/**
 * When the store holds this run's rows of an older map than map, with no
 * checkpoint of map (the server died in the middle of the move to it):
 * that older map, to rebuild the tables from and move on to map (free it
 * with dml__shard_map__free_unpacked(..., NULL)); else NULL.
 */
Dml__ShardMap *dml_server_store_resume_map(struct dml_server *s, const Dml__ShardMap *map);

/**
 * A job's map was installed on new tables: when the log is of this run of
 * the job and covers this map version (its first, the version of the
 * store's checkpoint, or the version the log began at when this server
 * joined the job), or when resume (the tables hold the ranges of the map
 * dml_server_store_resume_map gave too), load and replay it; else start
 * the log of this run. 0 or the error (logged).
 */
int dml_server_store_job(struct dml_server *s, const Dml__ShardMap *map, int resume,
			 enum store_recovered *recovered);

/** Every row of a remap moved: make the store describe the rows held now. */
void dml_server_store_remapped(struct dml_server *s);

/** Commit what is waiting and send its ACKs (a clean stop). */
void dml_server_store_flush(struct dml_server *s);

/** Close the store; after the loop. */
void dml_server_store_free(struct dml_server *s);

/* ---- key_ranges.c, job.c, migrate.c ---- */

/** Does the set hold all of [begin, end)? (1 for an empty range.) */
int dml_server_ranges_cover(const struct key_ranges *r, uint64_t begin, uint64_t end);
/** Add [begin, end) to the set (merging). */
void dml_server_ranges_add(struct key_ranges *r, uint64_t begin, uint64_t end);
/** Free the set's memory; it is empty afterwards. */
void dml_server_ranges_clear(struct key_ranges *r);

/**
 * 0 when te serves every key a request names now: the dense range [begin,
 * end), or n keys (hashed first on sparse tables); else DML_ERANGE.
 */
int dml_server_serves(const struct table_entry *te, int dense, uint64_t begin, uint64_t end,
		      const uint64_t *keys, size_t n);

/**
 * The scheduler link's frame handler (proto/sched_link.h): installs SHARDMAPs,
 * arg is the server.
 */
void dml_server_job_on_sched(struct dml_sched_link *l, const Dml__Meta *m, void *arg);

/** A MIGRATE frame from a peer: install its rows and answer it. */
void dml_server_job_migrate(struct session *ss, const Dml__Meta *m, const uint8_t *payload);

/** Every tick of the server: report pending ranges that no rows reach. */
void dml_server_job_tick(struct dml_server *s);

/** On shutdown: stop sending rows (logged if some were not delivered). */
void dml_server_job_stop(struct dml_server *s);

/** Free the job's maps and migrations; after the loop returned. */
void dml_server_job_free(struct dml_server *s);

/* ---- requests.c, server_metrics.c, server_sched.c ---- */

/** Bytes in and out over the server's life, open connections included. */
void dml_server_traffic(const struct dml_server *s, uint64_t *in, uint64_t *out);

/**
 * Create the registry, register every metric and, when metrics_listen is
 * set, serve it over HTTP (writing metrics_port_file). DML_EINVAL if a
 * metric is refused, DML_ECONF or DML_EIO for the endpoint.
 */
int dml_server_metrics_init(struct dml_server *s);

/**
 * When the config names a scheduler: describe this server (role, id, zone,
 * advertised address, shard, machine profile) and start registering with it
 * (server_sched.c). Call once listening, so the bound port is known. 0 when
 * standalone or started, DML_ECONF (unusable address) or DML_EIO.
 */
int dml_server_sched_start(struct dml_server *s);

/** Leave the scheduler (on shutdown); safe from callbacks and when standalone. */
void dml_server_sched_stop(struct dml_server *s);

/** Free the registration; after the loop returned. */
void dml_server_sched_free(struct dml_server *s);

/**
 * Answer the scheduler's request_id with ERROR code and the message, and
 * log it as "WHAT refused: message" (what: "shard map", "checkpoint").
 */
void dml_server_sched_error(struct dml_server *s, uint64_t request_id, int code,
			    const char *what, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
void dml_server_sched_verror(struct dml_server *s, uint64_t request_id, int code,
			     const char *what, const char *fmt, va_list ap)
	__attribute__((format(printf, 5, 0)));

/* ---- server_store.c: job-wide checkpoints ---- */

/** 1 when the server keeps a store that can take a checkpoint. */
int dml_server_store_keeps(const struct dml_server *s);

/**
 * Commit the batch, copy every row held and queue the copy as a checkpoint
 * listed under clock (the job's checkpoint_keep newest stay): 0, or an
 * error (err). dml_server_cut_written hears how the write ended, with tag.
 */
int dml_server_store_snapshot(struct dml_server *s, uint64_t clock, uint64_t tag, char *err,
			      size_t errlen);

/**
 * Queue the delete of the checkpoint listed under clock: 0 (then
 * dml_server_cut_dropped hears how it ended, with tag) or DML_ECONF.
 */
int dml_server_store_snapshot_drop(struct dml_server *s, uint64_t clock, uint64_t tag,
				   char *err, size_t errlen);

/* ---- ckpt_cut.c: job-wide checkpoints ---- */

/** The scheduler's CHECKPOINT: prepare, cut or delete (answered). */
void dml_server_cut_on_sched(struct dml_server *s, const Dml__Meta *m);

/**
 * 1 when a push must wait for the checkpoint being taken (its clock is at
 * or past the cut): the caller returns DML_CONN_HOLD, and the connection
 * is released, handing the push again, when it may go on.
 */
int dml_server_cut_holds(struct session *ss, const Dml__Meta *m);

/** A push of clock was applied (or replayed). */
void dml_server_cut_applied(struct dml_server *s, uint64_t clock);

/** One past the highest clock of a push applied (0: none). */
uint64_t dml_server_cut_next_clock(const struct dml_server *s);

/** Another job: no checkpoint in progress, no clock applied yet. */
void dml_server_cut_reset(struct dml_server *s);

/** The clocks moved: write the checkpoint once every live worker reached it. */
void dml_server_cut_check(struct dml_server *s);

/** The checkpoint of the cut request_id (clock) is on disk (rc 0) or failed: answer. */
void dml_server_cut_written(struct dml_server *s, uint64_t request_id, uint64_t clock, int rc,
			    uint64_t bytes, const char *err);

/** The delete of request_id (clock) ended: answer. */
void dml_server_cut_dropped(struct dml_server *s, uint64_t request_id, uint64_t clock, int rc,
			    const char *err);

/** Every tick: drop a prepare the scheduler did not follow with a cut. */
void dml_server_cut_tick(struct dml_server *s);

/** The session is closing: it holds nothing any more. */
void dml_server_cut_forget(struct dml_server *s, struct session *ss);

void dml_server_cut_free(struct dml_server *s);

#endif
