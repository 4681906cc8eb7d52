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

#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/server_store_internal.h"
#include "shard/shardmap.h"
#include "store/ckpt_writer.h"
#include "server/row_snapshot.h"
#include "store/store.h"
#include "proto/util.h"

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
				   dml_server_store_written_cb, s);
	event_add(st->written_ev, NULL);
	/* A job's tables come with its map (dml_server_store_job). */
	if (!s->job_mode && ((rc = recover(s, c->store_path)) != 0 ||
			     (rc = dml_server_store_track_changes(s)) != 0))
		return rc;
	st->commit_ev = event_new(s->base, -1, 0, dml_server_store_commit_cb, s);
	commit_soon(s);
	if (st->mode == DML_DURABILITY_BATCH) {
		struct timeval tv = { c->batch_ms / 1000, (long)(c->batch_ms % 1000) * 1000 };

		st->timer = event_new(s->base, -1, EV_PERSIST, dml_server_store_timer_cb, s);
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
			return rc ? rc : dml_server_store_track_changes(s);
		}
		dml_warn("store %s: job %u is at map v%llu, the store's checkpoint at v%llu and "
			 "its log began at v%llu: not replayed; waiting for the rows from their "
			 "owners", path, map->job, (unsigned long long)map->version,
			 (unsigned long long)dml_store_checkpoint_version(st->store),
			 (unsigned long long)dml_store_log_version(st->store));
		return dml_server_store_track_changes(s);
	}
	/* Commit what the previous job left waiting before its log goes. */
	dml_server_store_commit_now(s);
	if (s->store_failed)
		return DML_EIO;
	packed = dml_server_store_map_pack(map, &map_len);
	rc = dml_store_start_run(st->store, map->run, map->version, packed, map_len, err,
				 sizeof(err));
	free(packed);
	if (rc)
		dml_err("store: %s", err);
	return rc ? rc : dml_server_store_track_changes(s);
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
	dml_server_store_commit_now(s);
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
