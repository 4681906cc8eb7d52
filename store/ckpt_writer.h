/*
 * A thread that writes a server's checkpoints (store.h) while the event
 * loop goes on: the loop copies the rows it holds into a snapshot (a
 * piece at a time, between pushes), hands it over, and hears of the result through a
 * file descriptor it watches. Deleting a listed checkpoint goes through
 * the same queue, so that the loop never waits for a write transaction of
 * the checkpoints' environment.
 *
 * Jobs run one at a time in the order given. Must never: touch the store's
 * log side (only checkpoint begin/add/end and snapshot_drop run on the
 * thread), drop a result, or leave the thread running past stop.
 */
#ifndef DML_STORE_CKPT_WRITER_H
#define DML_STORE_CKPT_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/** Rows copied out of the tables, in chunks, owned. */
struct dml_ckpt_snapshot;

struct dml_ckpt_snapshot *dml_ckpt_snapshot_new(void);

/**
 * Add a chunk of rows (copied: the descriptor); its keys and rows must lie
 * in memory given to dml_ckpt_snapshot_keep.
 */
void dml_ckpt_snapshot_add(struct dml_ckpt_snapshot *sn, const struct dml_ckpt_rows *r);

/** Memory (malloc'd) the snapshot frees with itself. */
void dml_ckpt_snapshot_keep(struct dml_ckpt_snapshot *sn, void *block);

/** Rows in the snapshot. */
uint64_t dml_ckpt_snapshot_rows(const struct dml_ckpt_snapshot *sn);

void dml_ckpt_snapshot_free(struct dml_ckpt_snapshot *sn);

struct dml_ckpt_writer;

/** What a job came to. */
struct dml_ckpt_result {
	int drop;                  /* a delete, else a write */
	uint64_t tag;              /* as given */
	uint64_t clock;            /* the write's info.clock, the delete's clock */
	int rc;                    /* 0 or a DML_E... code, err saying why */
	char err[512];
	uint64_t bytes, rows;      /* written */
	double ms;                 /* the write's time on the thread */
};

/** Start the thread for store s. 0, DML_EIO or DML_ENOMEM. */
int dml_ckpt_writer_start(struct dml_store *s, struct dml_ckpt_writer **out);

/** Readable when results wait (read them with dml_ckpt_writer_result). */
int dml_ckpt_writer_fd(const struct dml_ckpt_writer *w);

/** Write sn (taken over) as a checkpoint described by info. */
void dml_ckpt_writer_write(struct dml_ckpt_writer *w, struct dml_ckpt_snapshot *sn,
			   const struct dml_ckpt_info *info, uint64_t tag);

/** Delete the checkpoint listed under clock. */
void dml_ckpt_writer_drop(struct dml_ckpt_writer *w, uint64_t clock, uint64_t tag);

/** Writes queued or running. */
size_t dml_ckpt_writer_writes(struct dml_ckpt_writer *w);

/** The next result: 1 with *out filled, 0 when none waits. */
int dml_ckpt_writer_result(struct dml_ckpt_writer *w, struct dml_ckpt_result *out);

/** Wait until every job given so far is done (their results wait). */
void dml_ckpt_writer_drain(struct dml_ckpt_writer *w);

/** Finish the jobs given, stop the thread, free (results not read are lost). */
void dml_ckpt_writer_stop(struct dml_ckpt_writer *w);

#endif
