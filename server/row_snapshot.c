/*
 * Copy-on-write snapshots of the rows a server holds, for its checkpoints.
 * Copying a 100 MB shard at once would stop pushes for tens of
 * milliseconds; instead the snapshot only notes, per table, how many rows
 * there were when it began, and copies them a chunk at a time: from a
 * zero-delay timer (at most SNAP_STEP_NS a turn of the event loop, so
 * pushes are served in between) and, when a push or an import is about to
 * change a chunk not copied yet, that chunk first (dml_table_watch_writes).
 * Every chunk is therefore copied as it was when the snapshot began. Once
 * all are, the copy goes to done() and the snapshot ends.
 *
 * Only the rows the server serves go in: dense keys in its ranges, sparse
 * keys whose hash is in them. Rows a sparse table creates later sit past
 * the rows noted and are left out.
 *
 * Must never: let a row change before its chunk was copied, copy a chunk
 * twice, or keep watching a table after the snapshot ended (tables must be
 * settled, dml_server_snap_finish, before they are freed).
 */
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/row_snapshot.h"
#include "server/server_internal.h"
#include "shard/shardmap.h"
#include "proto/util.h"

/* A chunk (a record of the checkpoint): this many rows, this many bytes. */
#define SNAP_CHUNK_ROWS 4096u
#define SNAP_CHUNK_BYTES (256u << 10)
/* What one turn of the timer copies at most: so long, or so much. */
#define SNAP_STEP_NS 500000ull
#define SNAP_STEP_BYTES (256u << 10)

struct snap_table {
	struct server_snap *snap;
	struct table_entry *te;
	uint64_t nrows;            /* when the snapshot began: the rows it holds */
	struct key_ranges served;  /* and the keys served then */
	uint64_t chunk_rows;
	uint64_t nchunks;
	uint64_t *copied;          /* a bit per chunk */
};

struct server_snap {
	struct dml_server *s;
	struct dml_ckpt_snapshot *sn;
	struct snap_table *tables;
	size_t ntables;
	size_t at_table;           /* where the timer goes on */
	uint64_t at_chunk;
	uint64_t left;             /* chunks not copied yet */
	int rc;                    /* the first copy that failed */
	struct event *step;
	server_snap_done_fn done;
	void *arg;
	struct server_snap_figures fig;
};

static int key_served(const struct snap_table *st, uint64_t key)
{
	uint64_t at = st->te->info.dense ? key : dml_shard_key_hash(key);

	for (size_t j = 0; j < st->served.n; j++)
		if (at >= st->served.r[j].begin && at < st->served.r[j].end)
			return 1;
	return 0;
}

/* Chunk c of st into the snapshot: the served rows, a record per run. */
static int copy_chunk(struct snap_table *st, uint64_t c)
{
	struct server_snap *sp = st->snap;
	const struct table_entry *te = st->te;
	uint64_t r0 = c * st->chunk_rows;
	uint64_t r1 = st->nrows - r0 > st->chunk_rows ? r0 + st->chunk_rows : st->nrows;
	uint32_t rf = (uint32_t)dml_table_row_floats(te->table);
	size_t n = (size_t)(r1 - r0), kept = 0;
	uint64_t *keys = dml_xmalloc(n * sizeof(*keys));
	float *rows = dml_xmalloc(n * rf * sizeof(float));
	int rc;

	st->copied[c >> 6] |= 1ull << (c & 63);
	sp->left--;
	sp->fig.bytes += n * rf * sizeof(float);
	dml_ckpt_snapshot_keep(sp->sn, keys);
	dml_ckpt_snapshot_keep(sp->sn, rows);
	rc = dml_table_export_rows(te->table, r0, r1, keys, rows);
	for (size_t i = 0; i < n && !rc; i++) {
		if (!key_served(st, keys[i]))
			continue;
		if (kept != i) {
			keys[kept] = keys[i];
			memcpy(rows + kept * rf, rows + i * rf, rf * sizeof(float));
		}
		kept++;
	}
	if (rc) {
		sp->rc = sp->rc ? sp->rc : rc;
		return rc;
	}
	/* Dense: keys in a run are consecutive, so a record names the first. */
	for (size_t b = 0; b < kept;) {
		size_t e = b + 1;
		struct dml_ckpt_rows r = { te->info.id, te->info.dense, keys[b], NULL, 0, rf,
					   rows + b * rf };

		while (te->info.dense && e < kept && keys[e] == keys[e - 1] + 1)
			e++;
		if (!te->info.dense) {
			e = kept;
			r.begin = 0;
			r.keys = keys;
		}
		r.n = e - b;
		dml_ckpt_snapshot_add(sp->sn, &r);
		b = e;
	}
	return 0;
}

static int chunk_copied(const struct snap_table *st, uint64_t c)
{
	return (st->copied[c >> 6] >> (c & 63)) & 1;
}

/* A table is about to change rows [r0, r1): copy their chunks first. */
static void before_write(void *arg, uint64_t r0, uint64_t r1)
{
	struct snap_table *st = arg;
	uint64_t t0;

	if (r0 >= st->nrows)
		return;
	if (r1 > st->nrows)
		r1 = st->nrows;
	t0 = dml_now_ns();
	for (uint64_t c = r0 / st->chunk_rows; c <= (r1 - 1) / st->chunk_rows; c++) {
		if (!chunk_copied(st, c)) {
			copy_chunk(st, c);
			st->snap->fig.ahead_chunks++;
		}
	}
	t0 = dml_now_ns() - t0;
	st->snap->fig.ahead_ns += t0;
	if (t0 > st->snap->fig.wait_max_ns)
		st->snap->fig.wait_max_ns = t0;
	/* The timer ends the snapshot: not from inside the table's write. */
	if (st->snap->left == 0)
		event_active(st->snap->step, EV_TIMEOUT, 0);
}

static void end(struct server_snap *sp)
{
	struct dml_ckpt_snapshot *sn = sp->sn;

	for (size_t i = 0; i < sp->ntables; i++) {
		dml_table_watch_writes(sp->tables[i].te->table, NULL, NULL);
		dml_server_ranges_clear(&sp->tables[i].served);
		free(sp->tables[i].copied);
	}
	free(sp->tables);
	event_free(sp->step);
	sp->fig.span_ns = dml_now_ns() - sp->fig.span_ns;
	sp->fig.rows = dml_ckpt_snapshot_rows(sn);
	sp->s->snap = NULL;
	sp->done(sp->arg, sp->rc ? NULL : sn, sp->rc, &sp->fig);
	if (sp->rc)
		dml_ckpt_snapshot_free(sn);
	free(sp);
}

/* Copy chunks in order, a turn's worth (all: !turn); false when none are left. */
static int copy_some(struct server_snap *sp, int turn)
{
	uint64_t t0 = dml_now_ns(), bytes0 = sp->fig.bytes;

	while (sp->left && sp->at_table < sp->ntables) {
		struct snap_table *st = &sp->tables[sp->at_table];

		if (sp->at_chunk >= st->nchunks) {
			sp->at_table++;
			sp->at_chunk = 0;
			continue;
		}
		if (!chunk_copied(st, sp->at_chunk))
			copy_chunk(st, sp->at_chunk);
		sp->at_chunk++;
		if (turn && (sp->fig.bytes - bytes0 >= SNAP_STEP_BYTES ||
			     dml_now_ns() - t0 >= SNAP_STEP_NS))
			break;
	}
	t0 = dml_now_ns() - t0;
	sp->fig.wait_max_ns = t0 > sp->fig.wait_max_ns ? t0 : sp->fig.wait_max_ns;
	sp->fig.timer_ns += t0;
	return sp->left != 0;
}

static void step_cb(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct server_snap *sp = arg;

	(void)fd;
	(void)what;
	if (copy_some(sp, 1))
		event_add(sp->step, &now);
	else
		end(sp);
}

int dml_server_snap_begin(struct dml_server *s, server_snap_done_fn done, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct server_snap *sp;

	dml_server_snap_finish(s);
	sp = dml_xcalloc(1, sizeof(*sp));
	sp->s = s;
	sp->done = done;
	sp->arg = arg;
	sp->fig.span_ns = dml_now_ns();
	sp->step = evtimer_new(s->base, step_cb, sp);
	if (!sp->step) {
		free(sp);
		return DML_ENOMEM;
	}
	sp->sn = dml_ckpt_snapshot_new();
	sp->tables = dml_xcalloc(s->ntables ? s->ntables : 1, sizeof(*sp->tables));
	sp->ntables = s->ntables;
	for (size_t i = 0; i < s->ntables; i++) {
		struct snap_table *st = &sp->tables[i];

		st->snap = sp;
		st->te = &s->tables[i];
		st->nrows = dml_table_rows(st->te->table);
		st->chunk_rows = SNAP_CHUNK_BYTES / sizeof(float) /
				 dml_table_row_floats(st->te->table);
		if (st->chunk_rows > SNAP_CHUNK_ROWS)
			st->chunk_rows = SNAP_CHUNK_ROWS;
		if (st->chunk_rows == 0)
			st->chunk_rows = 1;
		st->nchunks = (st->nrows + st->chunk_rows - 1) / st->chunk_rows;
		st->copied = dml_xcalloc(st->nchunks / 64 + 1, sizeof(*st->copied));
		for (size_t j = 0; j < st->te->served.n; j++)
			dml_server_ranges_add(&st->served, st->te->served.r[j].begin,
					      st->te->served.r[j].end);
		sp->left += st->nchunks;
		dml_table_watch_writes(st->te->table, before_write, st);
	}
	s->snap = sp;
	event_add(sp->step, &now);
	return 0;
}

void dml_server_snap_finish(struct dml_server *s)
{
	if (!s->snap)
		return;
	copy_some(s->snap, 0);
	end(s->snap);
}
