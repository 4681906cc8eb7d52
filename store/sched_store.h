/*
 * dml-sched's state in LMDB: one record per job and one per node, so that
 * a restarted scheduler goes on with the jobs it ran. The records are
 * opaque bytes here (sched/sched_state.c encodes them); this module keeps
 * them durable, in the same kind of environment as a server's store
 * (store.h): a directory with data.mdb, locked for one process, and a
 * "meta" database naming the format and the kind, so that neither daemon
 * takes the other's directory for its own.
 *
 * Changes are staged with dml_sched_store_put and written together by
 * dml_sched_store_commit in one synced transaction; a crash leaves the
 * state of the last commit.
 *
 * Must never: leave half a commit on disk, or abort on any content of the
 * files (a record that does not decode is the caller's to refuse).
 */
#ifndef DML_STORE_SCHED_STORE_H
#define DML_STORE_SCHED_STORE_H

#include <stddef.h>
#include <stdint.h>

struct dml_store;

/* The two collections, each keyed by a u64. */
enum dml_sched_db {
	DML_SCHED_DB_JOBS,         /* key: job id */
	DML_SCHED_DB_NODES,        /* key: role << 32 | node id */
};

/**
 * Open (creating the directory and the environment if missing) the
 * scheduler's store at path, with map_size bytes of address space.
 * Returns 0; DML_EIO (err: "PATH: reason"); DML_ECONF (another format, a
 * server's store, a damaged file, or in use by another process: err says
 * which); DML_EINVAL (no path). Close with dml_store_close (store.h).
 */
int dml_sched_store_open(const char *path, uint64_t map_size, struct dml_store **out,
			 char *err, size_t errlen);

/**
 * Stage key = (val, len) in db (replacing what it held). 0; DML_EFULL or DML_EIO (err
 * says why: a full map says to raise map_size); DML_EINVAL for a store
 * that is not a scheduler's. Nothing is durable before the commit.
 */
int dml_sched_store_put(struct dml_store *s, enum dml_sched_db db, uint64_t key,
			const void *val, size_t len, char *err, size_t errlen);

/** Changes staged and not committed: 1 or 0. */
int dml_sched_store_dirty(const struct dml_store *s);

/**
 * Write everything staged in one transaction, synced to disk. 0 (also with
 * nothing staged), DML_EFULL (the map is full: "raise [store] map_size") or
 * DML_EIO (err; either way the staged changes are dropped, and what the
 * store held before stays).
 */
int dml_sched_store_commit(struct dml_store *s, char *err, size_t errlen);

/**
 * Call fn for every committed record of db in key order (fn's non-zero
 * return stops the walk and is returned). val is valid during the call.
 * 0; DML_EIO (err).
 */
int dml_sched_store_each(struct dml_store *s, enum dml_sched_db db,
			 int (*fn)(uint64_t key, const void *val, size_t len, void *arg),
			 void *arg, char *err, size_t errlen);

#endif
