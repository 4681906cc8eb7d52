/*
 * A server's durable state in LMDB: the gradient log (every applied push,
 * or the rows a window of pushes changed, in order) and the push-dedupe
 * state that goes with it, in one LMDB environment (a directory holding
 * data.mdb and lock.mdb) per server; its checkpoints in another below it.
 *
 * Records are appended to an in-memory batch and written together by
 * dml_store_commit in one write transaction (group commit): the server
 * acknowledges pushes after the commit returned (durability = sync), or
 * acknowledges at once and commits the rows they changed on a timer
 * (batch), or keeps no store (none). Each record's (worker, incarnation,
 * seq) updates the dedupe state in the same transaction, so the log and
 * the dedupe state never disagree.
 * On start the server replays the log into its tables and takes the dedupe
 * state back, so a push is in the tables exactly once after any crash.
 *
 * The environment holds a "meta" database with the store format version and
 * the node id of the server it belongs to; a store of another format or
 * another server is refused, as is a file LMDB cannot read or a store
 * another process (or another open in this one) holds, each with the path
 * and the reason. Never serves garbage: a record that does not decode
 * stops the replay with its position.
 *
 * Must never: acknowledge (return from commit with 0) before LMDB's commit
 * returned, leave a partial batch in the log (one transaction), or abort on
 * any content of the files.
 */
#ifndef DML_STORE_STORE_H
#define DML_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The format this build writes and reads (the "meta" database says). 3:
 * checkpoints under ids, some listed under a clock, in PATH/ckpt. 4: every
 * value ends in its CRC32C, and PATH/manifest says what the store holds.
 * 5: a checkpoint chunk's header takes 32 bytes (its rows lie aligned).
 */
#define DML_STORE_FORMAT 5

enum dml_durability {
	DML_DURABILITY_SYNC,      /* acknowledge after the batch is on disk */
	DML_DURABILITY_BATCH,     /* commit every batch_ms; acknowledge at once */
	DML_DURABILITY_NONE,      /* no log */
};

/** Names of the modes, in enum order, NULL-terminated: "sync", "batch", "none". */
extern const char *const dml_durability_names[];

struct dml_store;

/** One applied push, as logged. Pointers are borrowed for the call. */
struct dml_log_rec {
	uint32_t job, table, worker;
	uint64_t incarnation, seq, clock;
	int dense;                /* keys are the range [begin, end) */
	int rows;                 /* values are whole rows to put back (width: a
				   * row's floats), not a push; with no keys, it
				   * only records the worker's sequence */
	uint64_t begin, end;
	uint32_t nkeys;           /* sparse: keys[0..nkeys-1] */
	const uint64_t *keys;
	uint32_t width;           /* values per key */
	const float *values;      /* (dense ? end - begin : nkeys) * width */
	float weight;             /* a push's Meta.weight; 0 means 1 */
	/* rows that arrived from another server (MIGRATE) while map version
	 * `version` was installed, the whole of [begin, end) of the table's
	 * key space (dense keys; sparse key hashes, the rows by keys[]) */
	int moved;
	uint64_t version;
	/* a push applied at the step of its clock (BSP, bsp_step = clock): with
	 * the other deferred pushes before the next step record, as one
	 * optimizer step per table */
	int deferred;
	/* a step: every deferred push before it was applied here (dense, an
	 * empty range, width 1, no rows, no worker sequence) */
	int step;
};

/**
 * Open (creating the directory and the environment if missing) the store at
 * path for server node_id, with map_size bytes of address space (the most
 * the data may grow to; it may be raised between runs). nosync: LMDB does
 * not fsync at commit (durability batch and none). Returns 0; DML_EIO
 * (cannot create or open: err says "PATH: reason"); DML_ECONF (a store of
 * another format or another server, or a damaged file: err says which file
 * and what); DML_ENOMEM; DML_EINVAL (no path). *out is NULL on failure.
 * One process opens a store once at a time (LMDB's rule).
 */
int dml_store_open(const char *path, uint64_t map_size, int nosync, uint32_t node_id,
		   struct dml_store **out, char *err, size_t errlen);

/** Close the store (an uncommitted batch is dropped); NULL is fine. */
void dml_store_close(struct dml_store *s);

/**
 * Append r to the batch in memory (r's arrays are copied). 0, DML_ENOMEM, or
 * DML_EINVAL for a record replay would refuse (width 0, a dense range with
 * begin > end, a NULL array that should hold data, sizes that overflow).
 * A dense record is logged with nkeys 0.
 */
int dml_store_append(struct dml_store *s, const struct dml_log_rec *r);

/** Records in the batch, and their encoded bytes. */
size_t dml_store_pending(const struct dml_store *s, size_t *bytes);

/**
 * Write the batch to the log in one transaction and empty it. Returns 0
 * (also for an empty batch); DML_ENOMEM; DML_EFULL when the batch does
 * not fit in the map (err: "PATH: the map is full (map_size 64M): raise
 * [store] map_size"); DML_EIO with LMDB's reason. On failure nothing of
 * the batch is in the log, and the batch is kept.
 */
int dml_store_commit(struct dml_store *s, char *err, size_t errlen);

/**
 * Call fn for every logged record in order after those the newest
 * checkpoint holds (fn's non-zero return stops the replay and is returned). Returns 0; DML_ECONF when a record does not
 * decode (err: "PATH: log record N: reason"); DML_EIO.
 */
int dml_store_replay(struct dml_store *s, int (*fn)(const struct dml_log_rec *r, void *arg),
		     void *arg, char *err, size_t errlen);

/**
 * The run (dml.proto's ShardMap.run) whose pushes the log holds; 0 for a
 * store that names none (a server with [table] sections).
 */
uint64_t dml_store_run(struct dml_store *s);

/**
 * Start the log of another run, at map version `version` (map: that map,
 * packed, or NULL): drop every record, the dedupe state, the batch and the
 * checkpoints, and name run. 0, or DML_EIO with err naming
 * the path and the cause (the log's part is one transaction, the
 * checkpoints' another: a crash between leaves checkpoints of the old run,
 * which the next open drops).
 */
int dml_store_start_run(struct dml_store *s, uint64_t run, uint64_t version,
			const void *map, size_t map_len, char *err, size_t errlen);

/**
 * The shard map (packed) the stored rows start from: the newest
 * checkpoint's, else the one the log began at (start_run's). *out is
 * malloc'ed for the caller, NULL (with 0) when none was stored.
 * 0 or DML_EIO.
 */
int dml_store_base_map(struct dml_store *s, void **out, size_t *len);

/**
 * The map version the run's log began at (start_run's version): rows that
 * moved in after it are logged (dml_log_rec.moved); 0 when none was named.
 */
uint64_t dml_store_log_version(struct dml_store *s);

/*
 * Checkpoints: every row the server holds, with its optimizer state,
 * written in chunks into an LMDB environment of their own (PATH/ckpt), so
 * that a thread may write one while the log commits on: its end makes it
 * the newest (the one a restart loads), then deletes the log records it
 * holds. A crash in the middle leaves the previous checkpoint and the
 * whole log; a crash after its end but before the records went leaves
 * records a replay skips (the checkpoint names the last one it holds). A
 * server recovers by loading the newest checkpoint, then replaying the
 * log after it. A checkpoint may also be listed under a clock (a
 * job-wide checkpoint): the newest `keep` listed ones stay until deleted,
 * the others go once something newer replaces them.
 *
 * Threads: begin, add and end of one checkpoint, and snapshot_drop, may run
 * on one thread other than the log's, one call at a time; nothing else
 * may. The batch must be committed before the rows are taken.
 */

/** What a checkpoint holds. */
struct dml_ckpt_info {
	uint64_t version;          /* shard map version of its rows (0: [table] sections) */
	uint64_t next_clock;       /* one past the highest clock of a push they hold */
	uint64_t lsn;              /* the last log record they hold (dml_store_log_last) */
	uint64_t clock;            /* listed under this clock; 0: not listed */
	uint32_t keep;             /* listed ones kept, the newest (>= 1 when listed) */
	const void *map;           /* the shard map its rows are of (packed), or NULL; */
	size_t map_len;            /* it must stay valid until the end */
};

/**
 * The last record committed to the log: with the batch committed, what
 * rows taken now hold. Log thread only.
 */
uint64_t dml_store_log_last(const struct dml_store *s);

/**
 * Begin a checkpoint (info: see above; a listed one replaces one listed
 * at its clock). 0, DML_EINVAL (one is begun, or a listed one with keep
 * 0) or DML_EIO (err).
 */
int dml_store_checkpoint_begin(struct dml_store *s, const struct dml_ckpt_info *info,
			       char *err, size_t errlen);

/** The map version of the newest checkpoint; 0 when there is none (or it was 0). */
uint64_t dml_store_checkpoint_version(struct dml_store *s);

/** The newest checkpoint's next_clock (its clock when listed, if higher); 0: none. */
uint64_t dml_store_checkpoint_next_clock(struct dml_store *s);

/** A chunk of a checkpoint's rows. Pointers are borrowed for the call. */
struct dml_ckpt_rows {
	uint32_t table;
	int dense;                /* keys begin .. begin + n - 1, else keys[] */
	uint64_t begin;
	const uint64_t *keys;
	uint64_t n;
	uint32_t row_floats;      /* floats a row: values and optimizer state */
	const float *rows;        /* n * row_floats */
};

/** Add a chunk of rows to the checkpoint begun. 0, DML_EINVAL or DML_EIO (err). */
int dml_store_checkpoint_add(struct dml_store *s, const struct dml_ckpt_rows *r, char *err,
			     size_t errlen);

/** Bytes the checkpoint begun holds so far. */
uint64_t dml_store_checkpoint_bytes(const struct dml_store *s);

/**
 * Commit the checkpoint (commit != 0): it becomes the newest and the log
 * records it holds are deleted; or abandon it. 0 or DML_EIO (err; the
 * previous checkpoint and the log stay).
 */
int dml_store_checkpoint_end(struct dml_store *s, int commit, char *err, size_t errlen);

/**
 * Call fn for every chunk of the newest checkpoint, in the order they
 * were added (fn's non-zero return stops and is returned). 0 when there
 * is none; DML_ECONF for a chunk that does not decode (err: "PATH:
 * checkpoint chunk N: reason"); DML_EIO.
 */
int dml_store_checkpoint_each(struct dml_store *s,
			      int (*fn)(const struct dml_ckpt_rows *r, void *arg), void *arg,
			      char *err, size_t errlen);

/** A checkpoint listed under a clock. */
struct dml_store_snap {
	uint64_t clock;
	uint64_t id;              /* the store's own name for it */
	uint64_t bytes;           /* its chunks' */
	uint64_t version;         /* the map version of its rows */
	uint64_t unix_ms;         /* when it was written */
};

/**
 * The listed checkpoints, oldest clock first, into a malloc'd array
 * (free() it). 0, DML_ECONF (an entry that does not decode) or DML_EIO.
 */
int dml_store_snapshots(struct dml_store *s, struct dml_store_snap **out, size_t *n,
			char *err, size_t errlen);

/** dml_store_checkpoint_each for the checkpoint listed under clock; DML_ENOTFOUND. */
int dml_store_snapshot_each(struct dml_store *s, uint64_t clock,
			    int (*fn)(const struct dml_ckpt_rows *r, void *arg), void *arg,
			    char *err, size_t errlen);

/**
 * Unlist the checkpoint of clock and delete it, unless it is the newest
 * (a restart still loads that one). 0, DML_ENOTFOUND (err) or DML_EIO.
 */
int dml_store_snapshot_drop(struct dml_store *s, uint64_t clock, char *err, size_t errlen);

/**
 * The bytes of the pages the log's committed records take, and the map's
 * size: how close the log is to filling its map (freed pages that LMDB
 * will reuse do not count). 0, DML_EINVAL or DML_EIO.
 */
int dml_store_log_space(struct dml_store *s, uint64_t *used, uint64_t *map_size);

/**
 * Grow the map by bytes (a multiple of the page size), so that a batch
 * that did not fit (DML_EFULL) commits. No transaction may be open on the
 * store's environment in this process meanwhile: not while the checkpoint
 * writer writes. 0 or DML_EINVAL / DML_EIO (err).
 */
int dml_store_grow(struct dml_store *s, uint64_t bytes, char *err, size_t errlen);

/** Records in the log (committed ones); 0 also when LMDB cannot say. */
uint64_t dml_store_log_count(struct dml_store *s);

/**
 * Call fn for every worker's dedupe state: the highest seq logged for each
 * (worker, incarnation), for the STORE_DEDUPE_KEEP incarnations of each
 * worker written last, whatever their numbers' order. Returns 0, fn's
 * non-zero return, or DML_ECONF/DML_EIO as dml_store_replay.
 */
/* Incarnations of one worker whose sequences a store keeps. A worker's
 * process that restarted more often than this since its oldest pushes
 * were logged cannot send those again: it is long gone. */
#define STORE_DEDUPE_KEEP 8

int dml_store_dedupe_each(struct dml_store *s,
			  int (*fn)(uint32_t worker, uint64_t incarnation, uint64_t seq,
				    void *arg),
			  void *arg, char *err, size_t errlen);

#endif
