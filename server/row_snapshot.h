/*
 * Copy-on-write snapshots of a server's rows for its checkpoints
 * (row_snapshot.c): pushes go on while the rows are copied.
 */
#ifndef DML_SERVER_SNAP_H
#define DML_SERVER_SNAP_H

#include <stdint.h>

#include "store/ckpt_writer.h"

struct dml_server;

/* What a snapshot cost the event loop. */
struct server_snap_figures {
	uint64_t rows;             /* copied */
	uint64_t bytes;            /* copied, of rows served or not */
	uint64_t span_ns;          /* from begin to the last chunk */
	uint64_t timer_ns;         /* copying between pushes */
	uint64_t wait_max_ns;      /* the longest copy at a time: a turn, or ahead of a write */
	uint64_t ahead_ns;         /* copying a chunk ahead of a write to it */
	uint64_t ahead_chunks;     /* chunks copied so */
};

/*
 * The copy: sn (taken over) once complete, or NULL with rc (DML_E...) when
 * a chunk could not be copied.
 */
typedef void (*server_snap_done_fn)(void *arg, struct dml_ckpt_snapshot *sn, int rc,
				    const struct server_snap_figures *fig);

/**
 * Snapshot the rows s serves now; done() hears of the copy from the event
 * loop. A snapshot still being copied is finished first. 0 or DML_ENOMEM.
 */
int dml_server_snap_begin(struct dml_server *s, server_snap_done_fn done, void *arg);

/** Copy what is left of the snapshot now (before tables change shape or go). */
void dml_server_snap_finish(struct dml_server *s);

#endif
