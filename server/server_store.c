/*
 * dml-server's gradient log (store/store.h): with durability = sync every
 * applied push is appended to the store's batch, and its ACK waits in a
 * queue until the batch is committed, which happens once per turn of the
 * event loop (every push that arrived in that turn in one transaction), so
 * an acknowledged push is on disk. With batch the ACK goes at once and
 * every batch_ms a commit logs each row the window's pushes changed, once,
 * with each worker's push sequence (the tables track the changed rows): a
 * crash loses at most that window. none keeps no log.
 *
 * On start the log is replayed into the config's tables, and each worker's
 * highest logged push sequence comes back, so that a push the worker sends
 * again after a crash (it was committed but its ACK was lost) is
 * acknowledged without being applied twice. A server that takes its tables
 * from dml-sched does the same when the scheduler installs a job's first
 * map on it again after a restart: the store remembers the run of the job
 * its log belongs to (a new run starts an empty log). Rows that move in
 * are logged with the range they cover and acknowledged after the commit.
 * The store keeps the map its rows are of (the log's first, each
 * checkpoint's), so a server that joined at a version replays its log at
 * it, and one that died in the middle of a move rebuilds the rows of the
 * older map and resumes the move (migrate.c).
 *
 * Under BSP with bsp_step = clock (bsp_step.c) a push to a dense table
 * is logged and acknowledged as it arrives but applied at its clock's
 * step: the log marks it deferred and each step appends a step record,
 * so a replay sums the same pushes and applies them at the same points;
 * those logged after the last step wait for the next one again. A
 * checkpoint is never taken while pushes wait: its rows would lack what
 * the log it replaces holds. With batch the rows logged are the applied
 * ones, so a crash also loses the pushes of the clock under way.
 *
 * Must never: send a sync ACK before the commit that holds its push
 * returned, keep serving after a failed commit (the tables would hold
 * pushes the log lacks: the server stops instead, and a restart replays
 * what is on disk while workers resend the rest), or replay a record into
 * a range the server does not hold.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dml_error.h"
#include "log.h"
#include "server_internal.h"
#include "shardmap.h"
#include "ckpt_writer.h"
#include "row_snapshot.h"
#include "store.h"
#include "util.h"

/* An ACK that waits for the commit of its push. */
struct deferred_ack {
	struct session *ss;        /* NULL once its connection closed */
	uint64_t request_id;
};

/* A worker's push sequence as the log left it. */
struct restored_seq {
	uint32_t worker;
	uint64_t incarnation, seq;
};

struct server_store {
	struct dml_store *store;
	enum dml_durability mode;
	struct event *commit_ev;   /* sync: commit once this turn of the loop ends */
	struct event *timer;       /* batch: commit every batch_ms */
	struct deferred_ack *acks;
	size_t nacks, acks_cap;
	struct restored_seq *seqs;
	size_t nseqs;
	uint64_t logged;           /* bytes logged since the last checkpoint, replayed
				    * ones too: a server restarted often still
				    * checkpoints */
	struct dml_ckpt_writer *writer; /* writes checkpoints on a thread */
	struct event *written_ev;  /* its results */
	int full_wait;             /* the batch did not fit: it waits for the
				    * checkpoint being written to trim the log */
	int full_trim;             /* the map grew: checkpoint at once */
};

/* Job-wide checkpoints a server keeps beyond the job's checkpoint_keep. */
#define CKPT_ORPHANS_KEPT 8

/* ---- committing ----------------------------------------------------------- */

static void checkpoint_now(struct dml_server *s);

/*
 * Whether the log has grown to a checkpoint. Not while rows move (the
 * ranges held are not settled), nor while one is being written (the next
 * commit asks again), nor while pushes wait for their BSP step (the step
 * asks again).
 */
static int checkpoint_due(const struct dml_server *s)
{
	const struct server_store *st = s->store;
	uint64_t used, map_size;

	if (s->job.remapping || s->snap || dml_ckpt_writer_writes(st->writer) ||
	    dml_server_step_pending(s) || st->full_wait)
		return 0;
	if (st->full_trim ||
	    (s->conf->checkpoint_log && st->logged >= s->conf->checkpoint_log))
		return 1;
	/* Whatever checkpoint_log says, a log half its map's size is trimmed
	 * before it fills the map and stops the server. Its pages are looked
	 * at (a read transaction) only once a sixteenth of the map was logged:
	 * records take at most about twice their bytes in pages, so a log that
	 * could be near half the map has logged that much, and a commit of a
	 * busy server with a large map does not pay for the look. */
	return st->logged >= s->conf->store_map_size / 16 &&
	       dml_store_log_space(st->store, &used, &map_size) == 0 && used > map_size / 2;
}

/* ---- batch: the rows that changed, not the pushes ------------------------------ */

struct rows_ctx {
	struct dml_server *s;
	const struct table_entry *te;
	uint64_t clock;
};

static int log_rows(void *arg, const uint64_t *keys, uint64_t begin, size_t n,
		    const float *rows)
{
	const struct rows_ctx *c = arg;
	struct dml_log_rec r = { 0 };

	r.job = c->s->job.id;
	r.table = c->te->info.id;
	r.clock = c->clock;
	r.rows = 1;
	r.width = (uint32_t)dml_table_row_floats(c->te->table);
	r.values = rows;
	if (keys) {
		r.nkeys = (uint32_t)n;
		r.keys = keys;
	} else {
		r.dense = 1;
		r.begin = begin;
		r.end = begin + n;
	}
	return dml_store_append(c->s->store->store, &r);
}

/*
 * Batch: every row changed since the last commit, once, and each worker's
 * push sequence where it moved, into the batch. A window of hot rows costs
 * their size once instead of every push's.
 */
static int log_changes(struct dml_server *s)
{
	uint64_t next = dml_server_cut_next_clock(s);
	struct rows_ctx c = { s, NULL, next ? next - 1 : 0 };
	int rc = 0;

	for (size_t i = 0; i < s->ntables && !rc; i++) {
		c.te = &s->tables[i];
		/* A job's new tables track from their install on. */
		if (dml_table_tracks_changes(c.te->table))
			rc = dml_table_changes(c.te->table, log_rows, &c);
	}
	for (size_t i = 0; i < s->ssp.nworkers && !rc; i++) {
		struct dml_ssp_worker *w = &s->ssp.workers[i];
		struct dml_log_rec r = { 0 };

		if (w->last_seq == w->logged_seq)
			continue;
		/* No rows: a record of the worker's sequence for the dedupe state. */
		r.job = s->job.id;
		r.worker = w->id;
		r.incarnation = w->incarnation;
		r.seq = w->last_seq;
		r.clock = c.clock;
		r.rows = r.dense = 1;
		r.width = 1;
		rc = dml_store_append(s->store->store, &r);
		if (!rc)
			w->logged_seq = w->last_seq;
	}
	return rc;
}

/* Batch: the tables track the rows that change, which each commit logs. */
static int track_changes(struct dml_server *s)
{
	int rc = 0;

	if (!s->store || s->store->mode != DML_DURABILITY_BATCH)
		return 0;
	for (size_t i = 0; i < s->ntables && !rc; i++)
		rc = dml_table_track_changes(s->tables[i].table);
	if (rc)
		dml_err("store: no memory to track the rows that change: %s", dml_strerror(rc));
	return rc;
}

/*
 * The batch did not fit in the map (DML_EFULL). Its pushes are in the rows
 * but not in the log, so no checkpoint may be taken before it commits: the
 * checkpoint would hold them, and their resends after a crash would be
 * applied again. A checkpoint being copied or written trims the log when
 * it ends: the batch waits for that (written_cb commits again), its ACKs
 * with it. With none under way the map grows by what the batch needs, the
 * batch commits, and the checkpoint that follows at once trims the log;
 * LMDB reuses the freed pages, so the map grows no further while
 * checkpoints keep up (but the commit right after a trim cannot use the
 * pages it freed: LMDB keeps the last snapshot). Past half of map_size
 * over it (or two such batches, if more) the server gives up as before. 0 (committed), DML_EAGAIN
 * (waits) or the failure, with err.
 */
static int commit_full(struct dml_server *s, char *err, size_t errlen)
{
	struct server_store *st = s->store;
	uint64_t used, map, step, over = s->conf->store_map_size / 2;
	size_t bytes = 0;
	int rc;

	if (s->snap || dml_ckpt_writer_writes(st->writer)) {
		if (!st->full_wait)
			dml_warn("store %s: the map is full: %zu records wait for the checkpoint "
				 "being written to trim the log", s->conf->store_path,
				 dml_store_pending(st->store, NULL));
		st->full_wait = 1;
		return DML_EAGAIN;
	}
	/* The records' pages, and the tree pages a commit copies. */
	dml_store_pending(st->store, &bytes);
	step = ((uint64_t)bytes + bytes / 4 + (256u << 10) + 0xffff) & ~(uint64_t)0xffff;
	if (over < 2 * step)
		over = 2 * step;
	if (dml_store_log_space(st->store, &used, &map) != 0 ||
	    map + step > s->conf->store_map_size + over)
		return DML_EFULL; /* err: the store's "raise [store] map_size" */
	if ((rc = dml_store_grow(st->store, step, err, errlen)) != 0)
		return rc;
	dml_warn("store %s: the map is full: grown to %.1f MiB to commit %zu records; a "
		 "checkpoint trims the log now", s->conf->store_path,
		 (double)(map + step) / (1 << 20), dml_store_pending(st->store, NULL));
	st->full_trim = 1;
	return dml_store_commit(st->store, err, errlen);
}

static void commit_now(struct dml_server *s)
{
	struct server_store *st = s->store;
	char err[512];
	size_t bytes = 0;
	int rc = 0;

	/* written_cb commits again once the log is trimmed. */
	if (st->full_wait)
		return;
	if (st->mode == DML_DURABILITY_BATCH && (rc = log_changes(s)) != 0)
		snprintf(err, sizeof(err), "cannot log the rows that changed: %s",
			 dml_strerror(rc));
	dml_store_pending(st->store, &bytes);
	if (!rc)
		rc = dml_store_commit(st->store, err, sizeof(err));
	if (rc == DML_EFULL)
		rc = commit_full(s, err, sizeof(err));
	if (rc == DML_EAGAIN)
		return;
	if (rc) {
		/* The tables hold pushes the log lacks: acknowledging anything
		 * more would break the promise. A restart replays the log and
		 * the workers resend what was not acknowledged. */
		dml_err("store: %s; stopping so that no push is acknowledged unlogged", err);
		s->store_failed = 1;
		event_base_loopbreak(s->base);
		return;
	}
	for (size_t i = 0; i < st->nacks; i++)
		if (st->acks[i].ss)
			dml_server_reply_ack(st->acks[i].ss, st->acks[i].request_id);
	st->nacks = 0;
	st->logged += bytes;
	if (checkpoint_due(s))
		checkpoint_now(s);
}

/* A batch that did not fit, once the checkpoint it waited for trimmed the
 * log (or failed: the map grows instead). */
static void commit_after_trim(struct dml_server *s)
{
	struct server_store *st = s->store;

	if (st->full_wait && !s->snap && !dml_ckpt_writer_writes(st->writer)) {
		st->full_wait = 0;
		commit_now(s);
	}
}

/* ---- checkpoints ----------------------------------------------------------- */

/* A checkpoint whose rows are being copied (row_snapshot.c). */
struct pending_ckpt {
	struct dml_server *s;
	struct dml_ckpt_info info;
	uint64_t tag;
	void *map;                 /* info.map's bytes: the job's map, packed */
};

/* A map as the store keeps it (malloc'ed), or NULL for none. */
static void *map_pack(const Dml__ShardMap *map, size_t *len)
{
	void *buf;

	*len = 0;
	if (!map)
		return NULL;
	*len = dml__shard_map__get_packed_size(map);
	buf = dml_xmalloc(*len ? *len : 1);
	dml__shard_map__pack(map, buf);
	return buf;
}

static void snap_done(void *arg, struct dml_ckpt_snapshot *sn, int rc,
		      const struct server_snap_figures *fig)
{
	struct pending_ckpt *p = arg;
	struct dml_server *s = p->s;

	if (!sn) {
		dml_warn("store %s: checkpoint not taken (the previous one and the log stay): "
			 "cannot copy the rows: %s", s->conf->store_path, dml_strerror(rc));
		if (p->tag)
			dml_server_cut_written(s, p->tag, p->info.clock, rc, 0,
					       "cannot copy the rows");
		free(p->map);
		free(p);
		commit_after_trim(s);
		return;
	}
	/* The writer reads the map's bytes until the snapshot goes. */
	if (p->map)
		dml_ckpt_snapshot_keep(sn, p->map);
	dml_info("store %s: checkpoint: %" PRIu64 " rows copied in %.1f ms over %.1f ms "
		 "while pushes went on (the longest they waited: %.2f ms; %" PRIu64 " chunks "
		 "copied ahead of a push); writing them on the writer thread",
		 s->conf->store_path, fig->rows, (double)(fig->timer_ns + fig->ahead_ns) / 1e6,
		 (double)fig->span_ns / 1e6, (double)fig->wait_max_ns / 1e6, fig->ahead_chunks);
	dml_ckpt_writer_write(s->store->writer, sn, &p->info, p->tag);
	free(p);
}

/*
 * Commit the batch, snapshot every row held and have the writer thread
 * write the copy: a checkpoint listed under clock (keeping keep) unless
 * clock is 0. Pushes go on while the rows are copied; tag comes back with
 * the result.
 */
static int checkpoint_queue(struct dml_server *s, uint64_t clock, uint32_t keep, uint64_t tag,
			    char *err, size_t errlen)
{
	struct server_store *st = s->store;
	struct pending_ckpt *p;
	int rc, trim;

	/* Logged pushes the rows lack would leave the log with it. */
	if (dml_server_step_pending(s))
		return dml_fail(DML_ESTATE, err, errlen, "pushes wait for their clock's step");
	/* The rows hold pushes the batch has not logged yet; and the commit
	 * must not queue a checkpoint of its own. */
	st->logged = 0;
	trim = st->full_trim;
	st->full_trim = 0;
	commit_now(s);
	if (s->store_failed)
		return dml_fail(DML_EIO, err, errlen, "the gradient log's commit failed");
	if (st->full_wait) {
		st->full_trim = trim;
		return dml_fail(DML_EAGAIN, err, errlen,
				"the gradient log is full until the checkpoint under way trims it");
	}
	p = dml_xcalloc(1, sizeof(*p));
	p->s = s;
	p->tag = tag;
	p->info.version = s->job.version;
	p->info.next_clock = dml_server_cut_next_clock(s);
	p->info.lsn = dml_store_log_last(st->store);
	p->info.clock = clock;
	p->map = map_pack(s->job.map, &p->info.map_len);
	p->info.map = p->map;
	p->info.keep = keep;
	rc = dml_server_snap_begin(s, snap_done, p);
	if (rc) {
		free(p);
		return dml_fail(rc, err, errlen, "cannot begin a snapshot: %s", dml_strerror(rc));
	}
	return 0;
}

static void checkpoint_now(struct dml_server *s)
{
	char err[512] = "";

	if (checkpoint_queue(s, 0, 0, 0, err, sizeof(err)) != 0)
		dml_warn("store %s: checkpoint not taken (the previous one and the log stay): "
			 "%s", s->conf->store_path, err);
}

void dml_server_store_remapped(struct dml_server *s)
{
	/* A server that joined at this version logged every row that moved
	 * in: its log describes the rows it holds. Another's log began at an
	 * older map, whose ranges it no longer holds: a checkpoint of this
	 * version does. */
	if (!s->store || s->store_failed ||
	    dml_store_log_version(s->store->store) == s->job.version)
		return;
	checkpoint_now(s);
}

/* What the writer thread did. */
static void written_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_server *s = arg;
	struct dml_ckpt_result r;

	while (dml_ckpt_writer_result(s->store->writer, &r)) {
		if (r.drop) {
			dml_server_cut_dropped(s, r.tag, r.clock, r.rc, r.err);
			continue;
		}
		if (r.rc)
			dml_warn("store %s: checkpoint failed (the previous one and the log stay): "
				 "%s", s->conf->store_path, r.err);
		else
			dml_info("store %s: checkpoint of %" PRIu64 " rows (%.1f MB) written in "
				 "%.1f ms", s->conf->store_path, r.rows, (double)r.bytes / 1e6,
				 r.ms);
		if (r.tag)
			dml_server_cut_written(s, r.tag, r.clock, r.rc, r.bytes, r.err);
	}
	commit_after_trim(s);
}

int dml_server_store_keeps(const struct dml_server *s)
{
	return s->store && s->store->store && !s->store_failed;
}

int dml_server_store_snapshot(struct dml_server *s, uint64_t clock, uint64_t tag, char *err,
			      size_t errlen)
{
	const Dml__JobSpec *spec = s->job.spec;
	/* dml-sched deletes the ones the job forgets; past these, the parts of
	 * failed rounds whose delete never arrived go too. */
	uint32_t keep = (spec && spec->checkpoint_keep ? spec->checkpoint_keep : 3) +
			CKPT_ORPHANS_KEPT;

	if (!dml_server_store_keeps(s))
		return dml_fail(DML_ECONF, err, errlen, "no store ([store] path)");
	return checkpoint_queue(s, clock, keep, tag, err, errlen);
}

int dml_server_store_snapshot_drop(struct dml_server *s, uint64_t clock, uint64_t tag,
				   char *err, size_t errlen)
{
	if (!dml_server_store_keeps(s))
		return dml_fail(DML_ECONF, err, errlen, "no store ([store] path)");
	dml_ckpt_writer_drop(s->store->writer, clock, tag);
	return 0;
}

static void commit_cb(evutil_socket_t fd, short what, void *arg)
{
	commit_now(arg);
}

/* Queue the ACK of request_id until the next commit. */
static void defer_ack(struct dml_server *s, struct session *ss, uint64_t request_id)
{
	struct server_store *st = s->store;

	if (st->nacks == st->acks_cap) {
		st->acks_cap = st->acks_cap ? 2 * st->acks_cap : 64;
		st->acks = dml_xrealloc(st->acks, st->acks_cap * sizeof(*st->acks));
	}
	st->acks[st->nacks++] = (struct deferred_ack){ ss, request_id };
	if (st->nacks == 1)
		event_active(st->commit_ev, EV_TIMEOUT, 0);
}

/* A frame's keys and values (PUSH, MIGRATE) as a record of the job's log. */
static void rec_of_frame(const struct dml_server *s, const Dml__Meta *m,
			 const uint8_t *payload, struct dml_log_rec *r)
{
	r->job = s->job.id;
	r->table = m->table;
	r->dense = m->dense;
	r->begin = m->key_begin;
	r->end = m->key_end;
	r->nkeys = m->dense ? 0 : m->num_keys;
	r->keys = m->dense ? NULL : (const uint64_t *)payload;
	r->width = m->value_width;
	r->values = (const float *)(m->dense ? payload : payload + m->num_keys * 8ull);
}

/* Into the batch; no memory stops the server. 0 or -1. */
static int append(struct dml_server *s, const struct dml_log_rec *r, const char *what)
{
	if (dml_store_append(s->store->store, r) != 0) {
		dml_err("store: no memory to log %s; stopping", what);
		s->store_failed = 1;
		event_base_loopbreak(s->base);
		return -1;
	}
	return 0;
}

/* Into the batch, its ACK after the commit. */
static void append_then_ack(struct session *ss, const struct dml_log_rec *r,
			    uint64_t request_id, const char *what)
{
	if (append(ss->srv, r, what) == 0)
		defer_ack(ss->srv, ss, request_id);
}

void dml_server_store_pushed(struct session *ss, const Dml__Meta *m, const uint8_t *payload,
			     uint32_t worker, uint64_t incarnation, int deferred)
{
	struct server_store *st = ss->srv->store;
	struct dml_log_rec r = { 0 };

	/* Batch: the commit logs the rows this push changed, with its sequence. */
	if (!st || st->mode != DML_DURABILITY_SYNC) {
		dml_server_reply_ack(ss, m->request_id);
		return;
	}
	rec_of_frame(ss->srv, m, payload, &r);
	r.worker = worker;
	r.incarnation = incarnation;
	r.seq = m->seq;
	r.clock = m->clock;
	r.weight = dml_push_weight_of(m);
	r.deferred = deferred;
	append_then_ack(ss, &r, m->request_id, "a push");
}

void dml_server_store_stepped(struct dml_server *s)
{
	struct server_store *st = s->store;
	struct dml_log_rec r = { 0 };

	if (!st || s->store_failed)
		return;
	if (st->mode == DML_DURABILITY_SYNC) {
		r.job = s->job.id;
		r.clock = s->step_min_clock;
		r.dense = 1;
		r.width = 1;
		r.step = 1;
		if (append(s, &r, "a step") != 0)
			return;
		/* on disk with this turn's pushes, not only with the next one's */
		event_active(st->commit_ev, EV_TIMEOUT, 0);
	}
	if (checkpoint_due(s))
		checkpoint_now(s);
}

void dml_server_store_moved(struct session *ss, const Dml__Meta *m, const uint8_t *payload)
{
	struct server_store *st = ss->srv->store;
	struct dml_log_rec r = { 0 };

	/* With no log (none) nothing outlives a crash anyway. */
	if (!st || st->mode == DML_DURABILITY_NONE) {
		dml_server_reply_ack(ss, m->request_id);
		return;
	}
	rec_of_frame(ss->srv, m, payload, &r);
	r.rows = r.moved = 1;
	r.version = m->map_version;
	/* Batch mode too: a sender drops what was acknowledged. */
	append_then_ack(ss, &r, m->request_id, "the rows that moved in");
}

void dml_server_store_duplicate(struct session *ss, uint64_t request_id)
{
	struct server_store *st = ss->srv->store;
	size_t pending = 0;

	/* The original may still wait for its commit: so does this ACK. */
	if (st && st->mode != DML_DURABILITY_NONE &&
	    (st->nacks || dml_store_pending(st->store, &pending)))
		defer_ack(ss->srv, ss, request_id);
	else
		dml_server_reply_ack(ss, request_id);
}

void dml_server_store_forget(struct dml_server *s, struct session *ss)
{
	struct server_store *st = s->store;

	if (!st)
		return;
	for (size_t i = 0; i < st->nacks; i++)
		if (st->acks[i].ss == ss)
			st->acks[i].ss = NULL;
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_server *s = arg;

	/* Batch: what changed since the last tick (maybe nothing). */
	if (!s->store_failed)
		commit_now(s);
}

/* ---- recovery ------------------------------------------------------------- */

static struct table_entry *table_of(struct dml_server *s, uint32_t id)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].info.id == id)
			return &s->tables[i];
	return NULL;
}

struct replay {
	struct dml_server *s;
	uint64_t n, skipped, rows, bytes;
	char *err;
	size_t errlen;
};

/* About what r takes in the log: its header, keys and values. */
static uint64_t log_rec_bytes(const struct dml_log_rec *r)
{
	uint64_t rows = r->dense ? r->end - r->begin : r->nkeys;

	return 64 + (uint64_t)r->nkeys * 8 + rows * r->width * sizeof(float);
}

static int replay_one(const struct dml_log_rec *r, void *arg)
{
	struct replay *rp = arg;
	struct table_entry *te = table_of(rp->s, r->table);
	float weight = r->weight != 0.0f ? r->weight : 1.0f;
	int rc;

	rp->n++;
	rp->bytes += log_rec_bytes(r);
	if (r->job != rp->s->job.id) {
		rp->skipped++;
		return 0;
	}
	/* A worker's push sequence only: the dedupe state holds it. */
	if (r->rows && !r->moved && (r->dense ? r->begin == r->end : r->nkeys == 0))
		return 0;
	/* A BSP step: the deferred pushes since the last one, as it took them.
	 * The slowest clock it was taken at is where the workers come back:
	 * the pushes logged after it wait for that clock to end again. */
	if (r->step) {
		if ((rc = dml_server_step_apply(rp->s)) != 0)
			snprintf(rp->err, rp->errlen, "log record %" PRIu64 " (a step): %s",
				 rp->n, dml_strerror(rc));
		rp->s->step_min_clock = r->clock;
		return rc;
	}
	/* Rows that moved in cover their whole range, keys or none. */
	if (te && r->moved && r->version == rp->s->job.version)
		dml_server_ranges_add(&te->moved_in, r->begin, r->end);
	if (!te || (r->rows ? dml_table_row_floats(te->table) : te->info.width) != r->width ||
	    (r->dense && !te->info.dense) ||
	    dml_server_serves(te, r->dense, r->begin, r->end, r->keys, r->nkeys) != 0) {
		snprintf(rp->err, rp->errlen, "log record %" PRIu64 " (table %u, worker %u, seq "
			 "%" PRIu64 ") does not fit this server's tables: was the config's "
			 "[table] or shard changed?", rp->n, r->table, r->worker, r->seq);
		return DML_ECONF;
	}
	if (r->rows)
		rc = r->dense ? dml_table_import_range(te->table, r->begin, r->end, r->values)
			      : dml_table_import_keys(te->table, r->keys, r->nkeys, r->values);
	else if (r->deferred && r->dense)
		rc = dml_server_step_add(te, r->begin, r->end, r->values, weight);
	else
		rc = r->dense ? dml_table_push_range_weighted(te->table, r->begin, r->end,
							      r->values, weight)
			      : dml_table_push_keys_weighted(te->table, r->keys, r->nkeys,
							     r->values, weight);
	if (rc)
		snprintf(rp->err, rp->errlen, "log record %" PRIu64 ": %s", rp->n,
			 dml_strerror(rc));
	else
		dml_server_cut_applied(rp->s, r->clock);
	return rc;
}

/* A chunk of the checkpoint back into its table, which must hold its rows. */
static int load_chunk(const struct dml_ckpt_rows *r, void *arg)
{
	struct replay *rp = arg;
	struct table_entry *te = table_of(rp->s, r->table);
	int rc;

	if (!te || r->dense != te->info.dense ||
	    r->row_floats != dml_table_row_floats(te->table) ||
	    (r->dense && dml_server_serves(te, 1, r->begin, r->begin + r->n, NULL, 0) != 0) ||
	    (!r->dense && dml_server_serves(te, 0, 0, 0, r->keys, r->n) != 0)) {
		snprintf(rp->err, rp->errlen, "a checkpoint of table %u does not fit this "
			 "server's tables: was the config's [table] or shard changed?", r->table);
		return DML_ECONF;
	}
	rc = r->dense ? dml_table_import_range(te->table, r->begin, r->begin + r->n, r->rows)
		      : dml_table_import_keys(te->table, r->keys, r->n, r->rows);
	if (rc)
		snprintf(rp->err, rp->errlen, "checkpoint of table %u: %s", r->table,
			 dml_strerror(rc));
	rp->rows += r->n;
	return rc;
}

static int restore_seq(uint32_t worker, uint64_t incarnation, uint64_t seq, void *arg)
{
	struct server_store *st = arg;

	st->seqs = dml_xrealloc(st->seqs, (st->nseqs + 1) * sizeof(*st->seqs));
	st->seqs[st->nseqs++] = (struct restored_seq){ worker, incarnation, seq };
	return 0;
}

void dml_server_store_keep_seq(struct dml_server *s, const struct dml_ssp_worker *w)
{
	struct server_store *st = s->store;

	if (!st || !w->last_seq)
		return;
	for (size_t i = 0; i < st->nseqs; i++)
		if (st->seqs[i].worker == w->id && st->seqs[i].incarnation == w->incarnation) {
			if (w->last_seq > st->seqs[i].seq)
				st->seqs[i].seq = w->last_seq;
			return;
		}
	restore_seq(w->id, w->incarnation, w->last_seq, st);
}

void dml_server_store_join(struct dml_server *s, struct dml_ssp_worker *w)
{
	struct server_store *st = s->store;

	if (!st)
		return;
	for (size_t i = 0; i < st->nseqs; i++)
		if (st->seqs[i].worker == w->id && st->seqs[i].incarnation == w->incarnation &&
		    st->seqs[i].seq > w->last_seq)
			w->last_seq = st->seqs[i].seq;
}

static int recover(struct dml_server *s, const char *path)
{
	struct server_store *st = s->store;
	struct replay rp = { s, 0, 0, 0, 0, NULL, 0 };
	char err[512] = "";
	uint64_t t0 = dml_now_ns();
	int rc;

	rp.err = err;
	rp.errlen = sizeof(err);
	/* A checkpoint at the next job-wide cut must be above what the rows hold. */
	if (dml_store_checkpoint_next_clock(st->store))
		dml_server_cut_applied(s, dml_store_checkpoint_next_clock(st->store) - 1);
	rc = dml_store_checkpoint_each(st->store, load_chunk, &rp, err, sizeof(err));
	if (!rc)
		rc = dml_store_replay(st->store, replay_one, &rp, err, sizeof(err));
	if (!rc)
		rc = dml_store_dedupe_each(st->store, restore_seq, st, err, sizeof(err));
	if (rc) {
		dml_err("store %s: %s", path, err[0] ? err : dml_strerror(rc));
		return rc;
	}
	dml_info("store %s: recovered to clock %" PRIu64 ": replayed %" PRIu64 " pushes after "
		 "a checkpoint of %" PRIu64 " rows in %.1f ms (%" PRIu64 " of other jobs "
		 "skipped), push sequences of %zu workers", path, dml_server_cut_next_clock(s),
		 rp.n - rp.skipped, rp.rows,
		 (double)(dml_now_ns() - t0) / 1e6, rp.skipped, st->nseqs);
	/* The log replayed counts towards the next checkpoint, which the
	 * first commit takes if it is due already (commit_soon). */
	st->logged = rp.bytes;
	return 0;
}

/* Commit (and checkpoint, when due) once this turn of the loop ends. */
static void commit_soon(struct dml_server *s)
{
	struct server_store *st = s->store;

	if (st->commit_ev && (st->logged || st->nacks))
		event_active(st->commit_ev, EV_TIMEOUT, 0);
}

/* ---- life cycle ------------------------------------------------------------ */

int dml_server_store_open(struct dml_server *s)
{
	const struct dml_server_conf *c = s->conf;
	struct server_store *st;
	char err[512] = "";
	int rc;

	if (!c->store_path[0] || c->durability == DML_DURABILITY_NONE) {
		dml_warn("no gradient log ([store] path empty or durability none): a restart "
			 "of this server loses its tables");
		return 0;
	}
	/* LMDB mallocs a transaction's dirty pages (a large record's overflow
	 * pages in one block) and frees them after the commit. Past glibc's
	 * mmap threshold every such block is mapped and unmapped again, and
	 * faulting its fresh pages in costs more than copying the record:
	 * keep blocks of up to 32 MiB in the heap, and the heap's top. */
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	st = dml_xcalloc(1, sizeof(*st));
	st->mode = (enum dml_durability)c->durability;
	s->store = st;
	rc = dml_store_open(c->store_path, c->store_map_size,
			    st->mode != DML_DURABILITY_SYNC, c->node_id, &st->store, err,
			    sizeof(err));
	if (rc) {
		dml_err("%s", err);
		return rc;
	}
	rc = dml_ckpt_writer_start(st->store, &st->writer);
	if (rc) {
		dml_err("store %s: cannot start the checkpoint writer: %s", c->store_path,
			dml_strerror(rc));
		return rc;
	}
	st->written_ev = event_new(s->base, dml_ckpt_writer_fd(st->writer), EV_READ | EV_PERSIST,
				   written_cb, s);
	event_add(st->written_ev, NULL);
	/* A job's tables come with its map (dml_server_store_job). */
	if (!s->job_mode && ((rc = recover(s, c->store_path)) != 0 ||
			     (rc = track_changes(s)) != 0))
		return rc;
	st->commit_ev = event_new(s->base, -1, 0, commit_cb, s);
	commit_soon(s);
	if (st->mode == DML_DURABILITY_BATCH) {
		struct timeval tv = { c->batch_ms / 1000, (long)(c->batch_ms % 1000) * 1000 };

		st->timer = event_new(s->base, -1, EV_PERSIST, timer_cb, s);
		event_add(st->timer, &tv);
	}
	return 0;
}

/*
 * What the store of map's run holds of map as it is: every row of its ranges
 * (its first version, or a checkpoint of it), the rows that moved in (the
 * log began at it: the server joined there), or nothing here (NONE: the rows
 * of a later version are in a checkpoint of it, taken once its moves were
 * done, or nowhere here).
 */
static enum store_recovered store_describes(struct dml_store *store, const Dml__ShardMap *map)
{
	uint64_t cv = dml_store_checkpoint_version(store);

	if ((map->version == 1 && cv <= 1) || cv == map->version)
		return STORE_RECOVERED_ALL;
	if (cv < map->version && dml_store_log_version(store) == map->version)
		return STORE_RECOVERED_MOVED_IN;
	return STORE_RECOVERED_NONE;
}

Dml__ShardMap *dml_server_store_resume_map(struct dml_server *s, const Dml__ShardMap *map)
{
	struct server_store *st = s->store;
	Dml__ShardMap *base;
	size_t len;
	void *buf;

	if (!st || !map->run || map->version < 2 || dml_store_run(st->store) != map->run ||
	    store_describes(st->store, map) != STORE_RECOVERED_NONE)
		return NULL;
	if (dml_store_base_map(st->store, &buf, &len) != 0 || !buf)
		return NULL;
	base = dml__shard_map__unpack(NULL, len, buf);
	free(buf);
	if (base && (base->job != map->job || base->run != map->run ||
		     base->version >= map->version)) {
		dml__shard_map__free_unpacked(base, NULL);
		base = NULL;
	}
	return base;
}

int dml_server_store_job(struct dml_server *s, const Dml__ShardMap *map, int resume,
			 enum store_recovered *recovered)
{
	struct server_store *st = s->store;
	const char *path = s->conf->store_path;
	char err[512] = "";
	enum store_recovered how;
	size_t map_len;
	void *packed;
	int rc;

	*recovered = STORE_RECOVERED_NONE;
	if (!st)
		return 0;
	/* What is written now is of the tables being replaced. */
	dml_ckpt_writer_drain(st->writer);
	if (map->run && dml_store_run(st->store) == map->run) {
		how = resume ? STORE_RECOVERED_RESUME : store_describes(st->store, map);
		if (how != STORE_RECOVERED_NONE) {
			free(st->seqs);
			st->seqs = NULL;
			st->nseqs = 0;
			rc = recover(s, path);
			if (rc == 0) {
				*recovered = how;
				commit_soon(s);
			}
			return rc ? rc : track_changes(s);
		}
		dml_warn("store %s: job %u is at map v%llu, the store's checkpoint at v%llu and "
			 "its log began at v%llu: not replayed; waiting for the rows from their "
			 "owners", path, map->job, (unsigned long long)map->version,
			 (unsigned long long)dml_store_checkpoint_version(st->store),
			 (unsigned long long)dml_store_log_version(st->store));
		return track_changes(s);
	}
	/* Commit what the previous job left waiting before its log goes. */
	commit_now(s);
	if (s->store_failed)
		return DML_EIO;
	packed = map_pack(map, &map_len);
	rc = dml_store_start_run(st->store, map->run, map->version, packed, map_len, err,
				 sizeof(err));
	free(packed);
	if (rc)
		dml_err("store: %s", err);
	return rc ? rc : track_changes(s);
}

void dml_server_store_flush(struct dml_server *s)
{
	if (!s->store || !s->store->store || s->store_failed)
		return;
	/* Batch logs rows, and pushes waiting for their BSP step are in none:
	 * the step goes first. Sync has them in the log, and a restart waits
	 * for their clock to end as this server would have. */
	if (s->store->mode == DML_DURABILITY_BATCH)
		dml_server_step_flush(s);
	commit_now(s);
}

void dml_server_store_free(struct dml_server *s)
{
	struct server_store *st = s->store;

	if (!st)
		return;
	if (st->commit_ev)
		event_free(st->commit_ev);
	if (st->timer)
		event_free(st->timer);
	if (st->written_ev)
		event_free(st->written_ev);
	/* Finishes what it was given: a cut's checkpoint on disk stays listed. */
	dml_server_snap_finish(s);
	dml_ckpt_writer_stop(st->writer);
	dml_store_close(st->store);
	free(st->acks);
	free(st->seqs);
	free(st);
	s->store = NULL;
}
