/*
 * store_open.c - opening and closing a store (a server's log, its
 * checkpoints, a scheduler's state): its directory made and locked for this
 * process, its files checked before LMDB maps them, its databases opened
 * (made for a new store) and its "meta" checked against what the caller
 * expects: format, kind and node.
 *
 * Must never: let two processes (or two opens in one) use one store, map
 * a file that failed its checks, or take over a store of another format,
 * kind or node.
 */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "proto/util.h"

static int make_dir(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(path, 0700) != 0 && errno != EEXIST)
		return dml_fail(DML_EIO, err, errlen, "%s: %s", path, strerror(errno));
	if (stat(path, &st) != 0)
		return dml_fail(DML_EIO, err, errlen, "%s: %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return dml_fail(DML_EIO, err, errlen, "%s: not a directory", path);
	return 0;
}

/*
 * One process at a time: LMDB lets two open an environment, and two
 * servers (or two opens in one process, which LMDB forbids) would then
 * interleave two logs and two dedupe states. An flock on PATH/owner is
 * released by the kernel when its holder dies, so a crash leaves no stale
 * lock behind.
 */
static int lock_owner(struct dml_store *s, char *err, size_t errlen)
{
	char *p = NULL;

	if (asprintf(&p, "%s/owner", s->path) < 0)
		return DML_ENOMEM;
	s->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	free(p);
	if (s->lock_fd < 0)
		return dml_fail(DML_EIO, err, errlen, "%s/owner: %s", s->path, strerror(errno));
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0)
		return dml_fail(errno == EWOULDBLOCK ? DML_ECONF : DML_EIO, err, errlen,
				"%s: %s", s->path, errno == EWOULDBLOCK ?
				"in use by another process (another daemon with the same "
				"[store] path?)" : strerror(errno));
	return 0;
}

static int env_open(struct dml_store *s, uint64_t map_size, int nosync, char *err,
		    size_t errlen)
{
	/* NOTLS: a replay callback may read the store again (log_count) on its thread. */
	unsigned flags = MDB_NOTLS | (nosync ? MDB_NOSYNC : 0);
	int rc = mdb_env_create(&s->env);

	if (rc) {
		s->env = NULL;
		return store_lmdb_fail(s, rc, "", err, errlen);
	}
	rc = mdb_env_set_maxdbs(s->env, 4);
	/* 0 keeps LMDB's default for a new file, the file's own size for an old one. */
	if (!rc && map_size)
		rc = mdb_env_set_mapsize(s->env, (size_t)map_size);
	if (!rc)
		rc = mdb_env_open(s->env, s->path, flags, 0600);
	return rc ? store_lmdb_fail(s, rc, "", err, errlen) : 0;
}

static const char *kind_name(uint32_t kind)
{
	return kind == STORE_SERVER ? "a server's gradient log" :
	       kind == STORE_SCHED ? "a scheduler's state" :
	       kind == STORE_CKPT ? "a server's checkpoints" : "a store of an unknown kind";
}

static int meta_mismatch(const struct dml_store *s, const char *name, uint32_t have,
			 uint32_t want, char *err, size_t errlen)
{
	if (!strcmp(name, "format"))
		return dml_fail(DML_ECONF, err, errlen, "%s: store format %" PRIu32
				", this build reads %" PRIu32, s->path, have, want);
	if (!strcmp(name, "kind"))
		return dml_fail(DML_ECONF, err, errlen, "%s: holds %s, not %s (another "
				"daemon's data directory?)", s->path, kind_name(have),
				kind_name(want));
	return dml_fail(DML_ECONF, err, errlen, "%s: the store of server %" PRIu32
			", this is server %" PRIu32 " (another server's data directory?)",
			s->path, have, want);
}

/* meta[name] must be want; a new store gets it. */
static int meta_check(struct dml_store *s, MDB_txn *txn, const char *name, uint32_t want,
		      char *err, size_t errlen)
{
	MDB_val k = { .mv_size = strlen(name), .mv_data = (void *)name }, v;
	uint8_t b[4];
	int rc = store_sum_get(txn, s->meta, &k, &v);

	if (rc == MDB_NOTFOUND) {
		dml_store_le32(b, want);
		v.mv_size = sizeof(b);
		v.mv_data = b;
		rc = store_sum_put(txn, s->meta, &k, b, sizeof(b), 0);
	}
	if (rc)
		return store_lmdb_fail(s, rc, "open", err, errlen);
	if (v.mv_size != 4)
		return dml_fail(DML_ECONF, err, errlen, "%s: meta \"%s\" of %zu bytes, want 4",
				s->path, name, v.mv_size);
	if (dml_load_le32(v.mv_data) != want)
		return meta_mismatch(s, name, dml_load_le32(v.mv_data), want, err, errlen);
	return 0;
}

/* next_lsn = the last logged key + 1 (1 for an empty log). */
static int find_next_lsn(struct dml_store *s, MDB_txn *txn, char *err, size_t errlen)
{
	MDB_cursor *c;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn, s->log, &c);

	if (rc)
		return store_lmdb_fail(s, rc, "open", err, errlen);
	rc = mdb_cursor_get(c, &k, &v, MDB_LAST);
	mdb_cursor_close(c);
	if (rc == MDB_NOTFOUND) {
		s->next_lsn = 1;
		return 0;
	}
	if (rc)
		return store_lmdb_fail(s, rc, "open", err, errlen);
	if (k.mv_size != 8 || store_get_be64(k.mv_data) == UINT64_MAX)
		return dml_fail(DML_ECONF, err, errlen,
				"%s: the last log key is not a record number", s->path);
	s->next_lsn = store_get_be64(k.mv_data) + 1;
	return 0;
}

static int dbi_open(struct dml_store *s, MDB_txn *txn, const char *name, MDB_dbi *dbi,
		    char *err, size_t errlen)
{
	int rc = mdb_dbi_open(txn, name, MDB_CREATE, dbi);

	return rc ? store_lmdb_fail(s, rc, "open", err, errlen) : 0;
}

/*
 * A store made before stores named their kind is a server's. The
 * scheduler never takes one over: a server's has a "node" in its meta.
 */
static int kind_check(struct dml_store *s, MDB_txn *txn, char *err, size_t errlen)
{
	MDB_val k = { .mv_size = 4, .mv_data = (void *)"kind" }, v;
	MDB_val nk = { .mv_size = 4, .mv_data = (void *)"node" };

	if (mdb_get(txn, s->meta, &k, &v) == MDB_NOTFOUND &&
	    mdb_get(txn, s->meta, &nk, &v) == 0 && s->kind != STORE_SERVER)
		return meta_mismatch(s, "kind", STORE_SERVER, s->kind, err, errlen);
	return meta_check(s, txn, "kind", s->kind, err, errlen);
}

static int dbs_check(struct dml_store *s, MDB_txn *txn, uint32_t node_id, char *err,
		     size_t errlen)
{
	int rc = dbi_open(s, txn, "meta", &s->meta, err, errlen);

	if (!rc)
		rc = meta_check(s, txn, "format", DML_STORE_FORMAT, err, errlen);
	if (!rc)
		rc = kind_check(s, txn, err, errlen);
	if (rc)
		return rc;
	if (s->kind == STORE_SCHED) {
		rc = dbi_open(s, txn, "jobs", &s->jobs, err, errlen);
		return rc ? rc : dbi_open(s, txn, "nodes", &s->nodes, err, errlen);
	}
	rc = meta_check(s, txn, "node", node_id, err, errlen);
	if (!rc && s->kind == STORE_CKPT) {
		rc = dbi_open(s, txn, "ckpt", &s->ckpt, err, errlen);
		return rc ? rc : dbi_open(s, txn, "snaps", &s->snaps, err, errlen);
	}
	if (!rc)
		rc = dbi_open(s, txn, "log", &s->log, err, errlen);
	if (!rc)
		rc = dbi_open(s, txn, "dedupe", &s->dedupe, err, errlen);
	if (!rc)
		rc = find_next_lsn(s, txn, err, errlen);
	return rc;
}

/* The databases, opened (and for a new store, made) in one write transaction. */
static int dbs_open(struct dml_store *s, uint32_t node_id, char *err, size_t errlen)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, 0, &txn);

	if (rc)
		return store_lmdb_fail(s, rc, "open", err, errlen);
	rc = dbs_check(s, txn, node_id, err, errlen);
	if (rc) {
		mdb_txn_abort(txn);
		return rc;
	}
	rc = mdb_txn_commit(txn);
	return rc ? store_lmdb_fail(s, rc, "open", err, errlen) : 0;
}

int dml_store_open(const char *path, uint64_t map_size, int nosync, uint32_t node_id,
		   struct dml_store **out, char *err, size_t errlen)
{
	return store_open(path, map_size, nosync, STORE_SERVER, node_id, out, err, errlen);
}

int store_open(const char *path, uint64_t map_size, int nosync, enum store_kind kind,
	       uint32_t node_id, struct dml_store **out, char *err, size_t errlen)
{
	struct dml_store *s;
	int rc;

	store_err_clear(err, errlen);
	if (out)
		*out = NULL;
	if (!path || !*path || !out)
		return dml_fail(DML_EINVAL, err, errlen, "store: no path");
	if ((size_t)map_size != map_size)
		return dml_fail(DML_EINVAL, err, errlen, "%s: map_size over the address space",
				path);
	rc = make_dir(path, err, errlen);
	if (rc)
		return rc;
	s = dml_xcalloc(1, sizeof(*s));
	s->path = dml_xstrdup(path);
	s->kind = kind;
	s->lock_fd = -1;
	/* The checkpoints' environment lies within the log's, under its lock. */
	rc = kind == STORE_CKPT ? 0 : lock_owner(s, err, errlen);
	if (!rc)
		rc = store_files_check(s, err, errlen);
	if (!rc)
		rc = env_open(s, map_size, nosync, err, errlen);
	if (!rc)
		rc = dbs_open(s, node_id, err, errlen);
	if (!rc && kind == STORE_SERVER)
		rc = store_ckpt_open(s, map_size, node_id, err, errlen);
	if (!rc && kind == STORE_SCHED && !(rc = store_manifest_check(s, err, errlen)))
		rc = store_manifest_save(s, err, errlen);
	if (rc) {
		dml_store_close(s);
		return rc;
	}
	/* Records the newest checkpoint holds may be gone from the log: the
	 * next one must come after them, or a replay would skip it. */
	if (kind == STORE_SERVER && s->next_lsn <= store_ckpt_lsn(s))
		s->next_lsn = store_ckpt_lsn(s) + 1;
	if (kind == STORE_SERVER && nosync && (rc = store_syncer_start(s)) != 0) {
		dml_store_close(s);
		return dml_fail(DML_EIO, err, errlen, "%s: cannot start the log's flusher: %s",
				path, strerror(rc));
	}
	s->mf_ok = 1;
	*out = s;
	return 0;
}

void dml_store_close(struct dml_store *s)
{
	if (!s)
		return;
	/* The last commits flushed first: the manifest must not run ahead. */
	store_syncer_stop(s);
	/* The records written: a log put back from before them is refused. */
	if (s->mf_ok && s->kind == STORE_SERVER)
		store_manifest_save(s, NULL, 0);
	dml_store_close(s->ck);
	if (s->ckpt_txn)
		mdb_txn_abort(s->ckpt_txn);
	if (s->txn)
		mdb_txn_abort(s->txn);
	if (s->env)
		mdb_env_close(s->env);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free(s->buf);
	free(s->offs);
	free(s->scratch);
	free(s->path);
	free(s);
}
