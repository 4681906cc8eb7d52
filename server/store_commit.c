/*
 * dml-server's group commits (see server_store.c): the batch of records
 * the turn's pushes, steps and moved rows appended, committed once per
 * turn of the loop (sync) or every batch_ms (batch, with the rows that
 * changed), and the ACKs that wait for it; what happens when a batch does
 * not fit in the map.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/ckpt_writer.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/server_store_internal.h"
#include "proto/util.h"

/* ---- committing ----------------------------------------------------------- */

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

/* A record of a worker's push sequence only (no rows), for the dedupe state. */
static void seq_record(const struct dml_server *s, uint32_t worker, uint64_t incarnation,
		       uint64_t seq, uint64_t clock, struct dml_log_rec *r)
{
	*r = (struct dml_log_rec){ 0 };
	r->job = s->job.id;
	r->worker = worker;
	r->incarnation = incarnation;
	r->seq = seq;
	r->clock = clock;
	r->rows = r->dense = 1;
	r->width = 1;
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
		struct dml_log_rec r;

		if (w->last_seq == w->logged_seq)
			continue;
		seq_record(s, w->id, w->incarnation, w->last_seq, c.clock, &r);
		rc = dml_store_append(s->store->store, &r);
		if (!rc)
			w->logged_seq = w->last_seq;
	}
	return rc;
}

/* Batch: the tables track the rows that change, which each commit logs. */
int dml_server_store_track_changes(struct dml_server *s)
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

void dml_server_store_commit_now(struct dml_server *s)
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
		dml_server_store_checkpoint_now(s);
}

/* A batch that did not fit, once the checkpoint it waited for trimmed the
 * log (or failed: the map grows instead). */
void dml_server_store_commit_after_trim(struct dml_server *s)
{
	struct server_store *st = s->store;

	if (st->full_wait && !s->snap && !dml_ckpt_writer_writes(st->writer)) {
		st->full_wait = 0;
		dml_server_store_commit_now(s);
	}
}

void dml_server_store_commit_cb(evutil_socket_t fd, short what, void *arg)
{
	dml_server_store_commit_now(arg);
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
	/* An aggregator's sum: logged under its first contributor's push, and
	 * the others' sequences beside it, in this same commit. */
	if (m->n_contributors) {
		r.worker = m->contributors[0]->worker;
		r.incarnation = m->contributors[0]->incarnation;
		r.seq = m->contributors[0]->seq;
	}
	if (append(ss->srv, &r, "a push") != 0)
		return;
	for (size_t i = 1; i < m->n_contributors; i++) {
		const Dml__Contributor *c = m->contributors[i];

		seq_record(ss->srv, c->worker, c->incarnation, c->seq, m->clock, &r);
		if (append(ss->srv, &r, "a forwarded push's sequences") != 0)
			return;
	}
	defer_ack(ss->srv, ss, m->request_id);
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
		dml_server_store_checkpoint_now(s);
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

void dml_server_store_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_server *s = arg;

	/* Batch: what changed since the last tick (maybe nothing). */
	if (!s->store_failed)
		dml_server_store_commit_now(s);
}
