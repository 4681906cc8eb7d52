/*
 * dml-sched's store (sched_store.h): two databases of a STORE_SCHED
 * environment, written through one write transaction that stays open
 * between commits (the scheduler's loop is its only writer). Every value
 * carries its CRC32C (store_sum.c), checked as it is read.
 */
#include <inttypes.h>
#include <stdio.h>

#include "proto/dml_error.h"
#include "store/sched_store.h"
#include "store/store_internal.h"
#include "proto/util.h"

int dml_sched_store_open(const char *path, uint64_t map_size, struct dml_store **out,
			 char *err, size_t errlen)
{
	return store_open(path, map_size, 0, STORE_SCHED, 0, out, err, errlen);
}

static MDB_dbi db_of(const struct dml_store *s, enum dml_sched_db db)
{
	return db == DML_SCHED_DB_JOBS ? s->jobs : s->nodes;
}

int dml_sched_store_put(struct dml_store *s, enum dml_sched_db db, uint64_t key,
			const void *val, size_t len, char *err, size_t errlen)
{
	uint8_t kb[8];
	MDB_val k = { sizeof(kb), kb };
	int rc;

	store_err_clear(err, errlen);
	if (!s || s->kind != STORE_SCHED || (db != DML_SCHED_DB_JOBS && db != DML_SCHED_DB_NODES))
		return dml_fail(DML_EINVAL, err, errlen, "not a scheduler's store");
	if (!s->txn && (rc = mdb_txn_begin(s->env, NULL, 0, &s->txn)) != 0) {
		s->txn = NULL;
		return store_lmdb_fail(s, rc, "write", err, errlen);
	}
	store_put_be64(kb, key);
	rc = store_sum_put(s->txn, db_of(s, db), &k, val, len, 0);
	if (rc) {
		/* LMDB leaves a transaction that failed a put unusable. */
		mdb_txn_abort(s->txn);
		s->txn = NULL;
		return store_commit_fail(s, rc, err, errlen);
	}
	return 0;
}

int dml_sched_store_dirty(const struct dml_store *s)
{
	return s && s->txn != NULL;
}

int dml_sched_store_commit(struct dml_store *s, char *err, size_t errlen)
{
	uint64_t n;
	int rc;

	store_err_clear(err, errlen);
	if (!s || !s->txn)
		return 0;
	/* The commits counted, in the manifest too: a data.mdb put back from
	 * before them is refused. */
	rc = store_meta_get_u64(s, s->txn, store_commits_key, &n);
	if (!rc)
		rc = store_meta_put_u64(s, s->txn, store_commits_key, n + 1);
	if (rc) {
		mdb_txn_abort(s->txn);
		s->txn = NULL;
		return store_commit_fail(s, rc, err, errlen);
	}
	rc = mdb_txn_commit(s->txn);
	s->txn = NULL;
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	return store_manifest_save(s, err, errlen);
}

struct each_ctx {
	int (*fn)(uint64_t key, const void *val, size_t len, void *arg);
	void *arg;
	const char *what;
};

static int each_one(struct dml_store *s, const MDB_val *k, const MDB_val *v, void *ctx,
		    char *err, size_t errlen)
{
	struct each_ctx *e = ctx;

	if (k->mv_size != 8)
		return dml_fail(DML_ECONF, err, errlen, "%s: a %s key of %zu bytes, want 8",
				s->path, e->what, k->mv_size);
	return e->fn(store_get_be64(k->mv_data), v->mv_data, v->mv_size, e->arg);
}

int dml_sched_store_each(struct dml_store *s, enum dml_sched_db db,
			 int (*fn)(uint64_t key, const void *val, size_t len, void *arg),
			 void *arg, char *err, size_t errlen)
{
	struct each_ctx e = { fn, arg, db == DML_SCHED_DB_JOBS ? "job" : "node" };

	store_err_clear(err, errlen);
	if (!s || s->kind != STORE_SCHED || !fn)
		return dml_fail(DML_EINVAL, err, errlen, "not a scheduler's store");
	return store_walk(s, db_of(s, db), e.what, each_one, &e, err, errlen);
}
