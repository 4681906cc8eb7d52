/*
 * dml-server's checkpoints (see server_store.c): the batch committed, the
 * rows snapshotted copy-on-write (row_snapshot.c) while pushes go on, and
 * the copy written by the writer thread, which then trims the log; a
 * job-wide checkpoint's part (ckpt_cut.c) goes the same way, listed under
 * its clock.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/ckpt_writer.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/row_snapshot.h"
#include "server/server_store_internal.h"
#include "proto/util.h"

/* Job-wide checkpoints a server keeps beyond the job's checkpoint_keep. */
#define CKPT_ORPHANS_KEPT 8

/* ---- checkpoints ----------------------------------------------------------- */

/* A checkpoint whose rows are being copied (row_snapshot.c). */
struct pending_ckpt {
	struct dml_server *s;
	struct dml_ckpt_info info;
	uint64_t tag;
	void *map;                 /* info.map's bytes: the job's map, packed */
};

/* A map as the store keeps it (malloc'ed), or NULL for none. */
void *dml_server_store_map_pack(const Dml__ShardMap *map, size_t *len)
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
		dml_server_store_commit_after_trim(s);
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
	dml_server_store_commit_now(s);
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
	p->map = dml_server_store_map_pack(s->job.map, &p->info.map_len);
	p->info.map = p->map;
	p->info.keep = keep;
	rc = dml_server_snap_begin(s, snap_done, p);
	if (rc) {
		free(p);
		return dml_fail(rc, err, errlen, "cannot begin a snapshot: %s", dml_strerror(rc));
	}
	return 0;
}

void dml_server_store_checkpoint_now(struct dml_server *s)
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
	dml_server_store_checkpoint_now(s);
}

/* What the writer thread did. */
void dml_server_store_written_cb(evutil_socket_t fd, short what, void *arg)
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
	dml_server_store_commit_after_trim(s);
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
