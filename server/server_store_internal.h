/*
 * What the three files of dml-server's gradient log share (server_store.c:
 * recovery and life cycle; store_commit.c: group commits and their ACKs;
 * store_ckpt.c: checkpoints). Nothing outside them includes it.
 */
#ifndef DML_SERVER_STORE_INTERNAL_H
#define DML_SERVER_STORE_INTERNAL_H

#include <event2/event.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server_internal.h"
#include "store/store.h"
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

/* store_commit.c */

/** Commit the batch and send the ACKs that waited for it (and checkpoint
 * when due); a failed commit stops the server. */
void dml_server_store_commit_now(struct dml_server *s);
/** Commit a batch that did not fit, once the checkpoint it waited for is done. */
void dml_server_store_commit_after_trim(struct dml_server *s);
/** Batch: make the tables track the rows that change. 0 or DML_ENOMEM. */
int dml_server_store_track_changes(struct dml_server *s);
/** Event callbacks: the end of a turn of the loop (sync), every batch_ms (batch). */
void dml_server_store_commit_cb(evutil_socket_t fd, short what, void *arg);
void dml_server_store_timer_cb(evutil_socket_t fd, short what, void *arg);

/* store_ckpt.c */

/** A map as the store keeps it (malloc'ed), or NULL for none. */
void *dml_server_store_map_pack(const Dml__ShardMap *map, size_t *len);
/** Take a checkpoint (not listed under a clock) of every row held. */
void dml_server_store_checkpoint_now(struct dml_server *s);
/** Event callback: what the checkpoint writer thread did. */
void dml_server_store_written_cb(evutil_socket_t fd, short what, void *arg);

#endif
