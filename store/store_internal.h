/*
 * What store.c and checkpoint.c share of a store: its state and the
 * helpers for LMDB's errors, byte order and walks over a database. Not for
 * anything outside store/.
 */
#ifndef DML_STORE_INTERNAL_H
#define DML_STORE_INTERNAL_H

#include <lmdb.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* What a store holds, as its "meta" database says ("kind"). */
enum store_kind {
	STORE_SERVER = 1,          /* a server's gradient log and checkpoints */
	STORE_SCHED = 2,           /* dml-sched's jobs and nodes (sched_store.h) */
};

struct dml_store {
	char *path;
	MDB_env *env;
	enum store_kind kind;
	MDB_dbi meta, log, dedupe, ckpt, snaps; /* STORE_SERVER */
	MDB_dbi jobs, nodes;       /* STORE_SCHED */
	MDB_txn *txn;              /* STORE_SCHED: the changes not committed yet */
	uint64_t next_lsn;         /* the key the next committed record gets */
	/* The batch: encoded records end to end, offs[i] where record i starts. */
	uint8_t *buf;
	size_t len, cap;
	size_t *offs;
	size_t n, offs_cap;
	int lock_fd;               /* holds the directory's "owner" lock; -1: none */
	MDB_txn *ckpt_txn;         /* the checkpoint being written, or NULL */
	uint64_t ckpt_id;          /* its id (keys of "ckpt" begin with it) */
	uint64_t ckpt_chunks;      /* chunks it has */
	uint64_t ckpt_bytes;       /* and their bytes */
	uint64_t ckpt_version;     /* its map version */
	uint64_t ckpt_next_clock;  /* one past the highest clock of its pushes */
	uint64_t ckpt_clock;       /* the clock it is listed under, 0: none */
	uint32_t ckpt_keep;        /* listed ones to keep, this one included */
	/* Replay hands out keys and values from this aligned copy. */
	void *scratch;
	size_t scratch_cap;
};

void store_put_le64(uint8_t *p, uint64_t v);
void store_put_be64(uint8_t *p, uint64_t v);
uint64_t store_get_be64(const uint8_t *p);
void store_put_be32(uint8_t *p, uint32_t v);
uint32_t store_get_be32(const uint8_t *p);

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

/** "meta"'s keys of the newest checkpoint: map version, id, next clock (checkpoint.c). */
extern const char store_ckpt_version_key[];
extern const char store_ckpt_id_key[];
extern const char store_ckpt_next_clock_key[];

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

#endif
