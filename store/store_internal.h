/*
 * What the files of store/ share of a store: its state and the helpers
 * for LMDB's errors, byte order and walks over a database (store_util.c).
 * Not for anything outside store/.
 */
#ifndef DML_STORE_INTERNAL_H
#define DML_STORE_INTERNAL_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

/* What a store holds, as its "meta" database says ("kind"). */
enum store_kind {
	STORE_SERVER = 1,          /* a server's gradient log */
	STORE_SCHED = 2,           /* dml-sched's jobs and nodes (sched_store.h) */
	STORE_CKPT = 3,            /* a server's checkpoints: PATH/ckpt of its store */
};

/* What PATH/manifest says (manifest.c). */
struct store_manifest {
	uint64_t id;               /* the store's, in every environment's "meta" too */
	uint64_t gen;              /* manifests written */
	uint64_t run;
	uint64_t ckpt, ckpt_lsn;   /* the newest checkpoint and its last log record */
	uint64_t last;             /* log records written (scheduler: commits), at least */
};

struct dml_store {
	char *path;
	MDB_env *env;
	enum store_kind kind;
	MDB_dbi meta, log, dedupe; /* STORE_SERVER */
	MDB_dbi ckpt, snaps;       /* STORE_CKPT */
	MDB_dbi jobs, nodes;       /* STORE_SCHED */
	/* STORE_SERVER: its checkpoints, in an environment of their own so
	 * that writing one (on another thread) never waits for the log's
	 * commits, nor they for it. */
	struct dml_store *ck;
	MDB_txn *txn;              /* STORE_SCHED: the changes not committed yet */
	uint64_t next_lsn;         /* the key the next committed record gets */
	/* The batch: encoded records end to end, offs[i] where record i starts. */
	uint8_t *buf;
	size_t len, cap;
	size_t *offs;
	size_t n, offs_cap;
	int lock_fd;               /* holds the directory's "owner" lock; -1: none */
	struct store_syncer *syncer; /* STORE_SERVER without sync commits: flushes them */
	/* STORE_CKPT: the checkpoint being written. */
	MDB_txn *ckpt_txn;         /* NULL: none */
	struct dml_ckpt_info info; /* what it is */
	uint64_t ckpt_id;          /* its id (keys of "ckpt" begin with it) */
	uint64_t ckpt_chunks;      /* chunks it has */
	uint64_t ckpt_bytes;       /* and their bytes */
	/* STORE_SERVER, STORE_SCHED: PATH/manifest; mf_ok: the store opened,
	 * a close writes it (a server's). */
	struct store_manifest mf;
	int mf_found, mf_ok;
	/* Replay hands out keys and values from this aligned copy. */
	void *scratch;
	size_t scratch_cap;
};

void store_put_le64(uint8_t *p, uint64_t v);
void store_put_be64(uint8_t *p, uint64_t v);
uint64_t store_get_be64(const uint8_t *p);
void store_put_be32(uint8_t *p, uint32_t v);
uint32_t store_get_be32(const uint8_t *p);

/*
 * Every value a store writes ends in STORE_SUM bytes: the CRC32C of its key
 * and the value before them (store_sum.c).
 */
#define STORE_SUM 4

/** CRC32C of n bytes at data, continuing crc (0 to start). */
uint32_t store_crc32c(uint32_t crc, const void *data, size_t n);

/**
 * store_crc32c of n bytes at src, copying them to dst (not overlapping):
 * each block copied right after it is summed, from the cache.
 */
uint32_t store_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n);

/* The ways store_crc32c can sum: a table, the crc32 instruction, folding. */
enum { STORE_SUM_TABLE, STORE_SUM_CRC32, STORE_SUM_FOLD };

/**
 * For tests: sum the way impl (STORE_SUM_*) or the fastest below it this
 * CPU has, from now on (not while another thread sums); the way used
 * before.
 */
int store_sum_impl(int impl);

/** mdb_put of k and len bytes at data (NULL when len is 0), sealed with their sum. */
int store_sum_put(MDB_txn *txn, MDB_dbi dbi, const MDB_val *k, const void *data, size_t len,
		  unsigned flags);

/** Write the sum of k and len bytes at data into the STORE_SUM bytes after them. */
void store_sum_seal(const MDB_val *k, void *data, size_t len);

/** Check v's sum against k and drop it from v's size: 0, or -1 when it does not match. */
int store_sum_check(const MDB_val *k, MDB_val *v);

/**
 * store_sum_check, copying v's bytes but the sum to dst as they are summed
 * (they are read from memory once): 0 and v the copy, or -1 (dst holds
 * what was read).
 */
int store_sum_copy(const MDB_val *k, MDB_val *v, void *dst);

/** mdb_get with store_sum_check; MDB_CORRUPTED when the sum does not match. */
int store_sum_get(MDB_txn *txn, MDB_dbi dbi, const MDB_val *k, MDB_val *v);

/** "PATH/data.mdb: what: the value of key K does not match its checksum" (DML_ECONF). */
int store_bad_sum(const struct dml_store *s, const char *what, const MDB_val *k, char *err,
		  size_t errlen);

/**
 * DIR/data.mdb's size against its meta pages: 0 (also for no file, *size
 * 0), or DML_ECONF (err names the file and what is wrong). *last_pg: the
 * last page the newest meta page says is used. store_check.c.
 */
int store_file_check(const char *dir, uint64_t *size, uint64_t *last_pg, char *err,
		     size_t errlen);

/**
 * Walk the environment at dir read-only in a child process: every named
 * database's entries in order, their sums and counts, the free list. 0, or
 * DML_ECONF naming the file and the damage (a signal in the child too), or
 * DML_EIO. store_check.c.
 */
int store_verify(const char *dir, uint64_t last_pg, char *err, size_t errlen);

/**
 * Before s's environment is opened: its manifest read (a server's or a
 * scheduler's store; one saying data.mdb holds what is missing refused),
 * then store_file_check and store_verify of s->path.
 */
int store_files_check(struct dml_store *s, char *err, size_t errlen);

/* ---- manifest.c ---- */

/** "meta"'s key of a scheduler's store's commits. */
extern const char store_commits_key[];

/** s->mf from PATH/manifest; refused when it names a data.mdb that is missing or empty. */
int store_manifest_load(struct dml_store *s, char *err, size_t errlen);

/** A server's PATH/ckpt/data.mdb missing or empty while the manifest names a checkpoint: refused. */
int store_manifest_ckpt_load(struct dml_store *s, char *err, size_t errlen);

/**
 * The opened environments against the manifest (a store without one: a new
 * store gets its id, one holding anything is refused). 0 or DML_ECONF (err
 * names the file and what disagrees), DML_EIO.
 */
int store_manifest_check(struct dml_store *s, char *err, size_t errlen);

/** Write the manifest of what s holds now (synced first). 0 or DML_EIO. */
int store_manifest_save(struct dml_store *s, char *err, size_t errlen);

/** Write manifest m (generation one more). 0 or DML_EIO. */
int store_manifest_write(struct dml_store *s, const struct store_manifest *m, char *err,
			 size_t errlen);

/** The id of the newest checkpoint of server store s; 0: none. checkpoint.c. */
uint64_t store_ckpt_id(struct dml_store *s);

/** err = "" (when there is room). */
void store_err_clear(char *err, size_t errlen);

/** An LMDB failure while doing what (may be ""), as a dml code and err. */
int store_lmdb_fail(const struct dml_store *s, int rc, const char *what, char *err,
		    size_t errlen);

/** A failed write transaction: a full map says how to fix it. */
int store_commit_fail(const struct dml_store *s, int rc, char *err, size_t errlen);

/**
 * Open (making the directory if missing) the store of kind at path, and
 * lock it for this process. node_id: the server's id (STORE_SERVER). See
 * dml_store_open for the rest.
 */
int store_open(const char *path, uint64_t map_size, int nosync, enum store_kind kind,
	       uint32_t node_id, struct dml_store **out, char *err, size_t errlen);

/** "meta"'s key of the run (both environments of a server's store). */
extern const char store_run_key[];

/**
 * Open the checkpoints of server store s (PATH/ckpt), and drop them when
 * they are of another run than s's log (a new run's start was cut short
 * between the two). checkpoint.c.
 */
int store_ckpt_open(struct dml_store *s, uint64_t map_size, uint32_t node_id, char *err,
		    size_t errlen);

/** Drop every checkpoint of s and name run, in one transaction. checkpoint.c. */
int store_ckpt_start_run(struct dml_store *s, uint64_t run, char *err, size_t errlen);

/** The last log record the newest checkpoint holds (replay skips it and those before). */
uint64_t store_ckpt_lsn(struct dml_store *s);

/** The u64 (little-endian) under key in "meta" within txn; 0 when there is none. */
int store_meta_get_u64(struct dml_store *s, MDB_txn *txn, const char *key, uint64_t *out);
int store_meta_put_u64(struct dml_store *s, MDB_txn *txn, const char *key, uint64_t value);
/* meta[key] = len bytes, or deleted when bytes is NULL. */
int store_meta_put_bytes(struct dml_store *s, MDB_txn *txn, const char *key,
			 const void *bytes, size_t len);
/* A malloc'ed copy of meta[key] (NULL, 0: none). 0, DML_ENOMEM or an LMDB code. */
int store_meta_get_bytes(struct dml_store *s, const char *key, void **out, size_t *len);
extern const char store_log_map_key[];

/** The u64 (little-endian) under key in "meta"; 0 when there is none. */
uint64_t store_meta_u64(struct dml_store *s, const char *key);

/** Room for n bytes in s->scratch (aligned for any value). 0 or DML_ENOMEM. */
int store_scratch_reserve(struct dml_store *s, size_t n);

/* What store_walk calls for each entry of a database. */
typedef int (*store_walk_fn)(struct dml_store *s, const MDB_val *k, const MDB_val *v, void *ctx,
		       char *err, size_t errlen);

/* What a store_walk_fn returns to end the walk early, as a success. */
#define STORE_WALK_END 1

/**
 * Call one for every entry of dbi in key order, in one read transaction;
 * one's non-zero return ends the walk and is returned (STORE_WALK_END: 0).
 */
int store_walk(struct dml_store *s, MDB_dbi dbi, const char *what, store_walk_fn one,
	       void *ctx, char *err, size_t errlen);

/** store_walk from the first key at or after *from. */
int store_walk_from(struct dml_store *s, MDB_dbi dbi, const MDB_val *from, const char *what,
		    store_walk_fn one, void *ctx, char *err, size_t errlen);

/**
 * store_walk_from handing one each value with its byte hdr 8-byte aligned:
 * in the map when it lies so there (a value on pages of its own does when
 * hdr is a multiple of 8), else as a copy in s->scratch, its sum checked
 * as it is copied (the map is read once). Either lives for the call.
 */
int store_walk_aligned(struct dml_store *s, MDB_dbi dbi, const MDB_val *from, size_t hdr,
		    const char *what, store_walk_fn one, void *ctx, char *err, size_t errlen);

/**
 * Within txn: the newest push of (worker, incarnation) is seq, logged
 * under lsn, unless the entry holds a later one. store_dedupe.c.
 */
int store_dedupe_update(struct dml_store *s, MDB_txn *txn, uint32_t worker,
			uint64_t incarnation, uint64_t seq, uint64_t lsn, char *err,
			size_t errlen);
/**
 * The flusher of a log that commits with MDB_NOSYNC (store_syncer.c):
 * start it (0 or an errno), have it flush after a commit, read the first
 * flush that failed (an errno, 0: none), stop it after a last flush.
 */
int store_syncer_start(struct dml_store *s);
void store_syncer_kick(struct dml_store *s);
int store_syncer_error(struct dml_store *s);
void store_syncer_stop(struct dml_store *s);
#endif
