/*
 * manifest.c - PATH/manifest: what a store held when it was last written,
 * kept outside the environments it describes, so that a data.mdb or a
 * ckpt/ that went missing, was emptied, or was put back from an older copy
 * is told apart from a new store and refused instead of being read as one.
 *
 * 68 bytes, little-endian: "DMLMAN01", u32 kind, u32 0, u64 store id,
 * u64 generation (one more at every write), u64 run, u64 newest
 * checkpoint id, u64 the last log record it holds, u64 the last log record
 * written (a scheduler's store: its commits), u32 CRC32C of the 64 before.
 * Written whole to PATH/manifest.tmp, synced, renamed over PATH/manifest,
 * and the directory synced.
 *
 * When: a server's store at open (after the checks), before a new run's
 * log is started, after a checkpoint's end and before the log records it
 * holds are deleted, and at close; a scheduler's at open and after every
 * commit. So the environments may be ahead of the manifest (a crash in
 * between) but never behind it, which is what the checks below rely on.
 *
 * Must never: accept an environment behind the manifest, or write a
 * manifest that the environments it describes are behind of.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "store/store_internal.h"
#include "proto/util.h"

enum {
	MF_MAGIC = 0, MF_KIND = 8, MF_ID = 16, MF_GEN = 24, MF_RUN = 32, MF_CKPT = 40,
	MF_CKPT_LSN = 48, MF_LAST = 56, MF_SUM = 64, MF_SIZE = 68,
};
static const char magic[8] = "DMLMAN01";
static const char id_key[] = "store_id";
const char store_commits_key[] = "commits";

static int mf_path(const struct dml_store *s, const char *name, char *buf, size_t len)
{
	return (size_t)snprintf(buf, len, "%s/%s", s->path, name) >= len ? -1 : 0;
}

/* As store_open.c says it, for the same refusal from either file. */
static const char *kind_name(uint32_t kind)
{
	return kind == STORE_SERVER ? "a server's gradient log" :
	       kind == STORE_SCHED ? "a scheduler's state" : "a store of an unknown kind";
}

/* s->mf from PATH/manifest (s->mf_found 0: there is none). */
static int mf_read(struct dml_store *s, char *err, size_t errlen)
{
	char path[4096];
	uint8_t b[MF_SIZE + 1];
	ssize_t n;
	int fd;

	s->mf_found = 0;
	memset(&s->mf, 0, sizeof(s->mf));
	if (mf_path(s, "manifest", path, sizeof(path)))
		return dml_fail(DML_EINVAL, err, errlen, "%s: path too long", s->path);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : dml_fail(DML_EIO, err, errlen, "%s: %s", path,
						      strerror(errno));
	n = read(fd, b, sizeof(b));
	close(fd);
	if (n < 0)
		return dml_fail(DML_EIO, err, errlen, "%s: %s", path, strerror(errno));
	if (n != MF_SIZE || memcmp(b, magic, sizeof(magic)) ||
	    dml_load_le32(b + MF_SUM) != store_crc32c(0, b, MF_SUM))
		return dml_fail(DML_ECONF, err, errlen, "%s: damaged: %zd bytes that are not a "
				"manifest whose checksum matches", path, n);
	if (dml_load_le32(b + MF_KIND) != (uint32_t)s->kind)
		return dml_fail(DML_ECONF, err, errlen, "%s: holds %s, not %s (another daemon's "
				"data directory?)", s->path, kind_name(dml_load_le32(b + MF_KIND)),
				kind_name((uint32_t)s->kind));
	s->mf.id = dml_load_le64(b + MF_ID);
	s->mf.gen = dml_load_le64(b + MF_GEN);
	s->mf.run = dml_load_le64(b + MF_RUN);
	s->mf.ckpt = dml_load_le64(b + MF_CKPT);
	s->mf.ckpt_lsn = dml_load_le64(b + MF_CKPT_LSN);
	s->mf.last = dml_load_le64(b + MF_LAST);
	s->mf_found = 1;
	return 0;
}

int store_manifest_write(struct dml_store *s, const struct store_manifest *m, char *err,
			 size_t errlen)
{
	char path[4096], tmp[4096];
	uint8_t b[MF_SIZE] = { 0 };
	int fd, ok;

	if (mf_path(s, "manifest", path, sizeof(path)) || mf_path(s, "manifest.tmp", tmp, sizeof(tmp)))
		return dml_fail(DML_EINVAL, err, errlen, "%s: path too long", s->path);
	memcpy(b, magic, sizeof(magic));
	dml_store_le32(b + MF_KIND, (uint32_t)s->kind);
	store_put_le64(b + MF_ID, m->id);
	store_put_le64(b + MF_GEN, s->mf.gen + 1);
	store_put_le64(b + MF_RUN, m->run);
	store_put_le64(b + MF_CKPT, m->ckpt);
	store_put_le64(b + MF_CKPT_LSN, m->ckpt_lsn);
	store_put_le64(b + MF_LAST, m->last);
	dml_store_le32(b + MF_SUM, store_crc32c(0, b, MF_SUM));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return dml_fail(DML_EIO, err, errlen, "%s: %s", tmp, strerror(errno));
	ok = write(fd, b, sizeof(b)) == (ssize_t)sizeof(b) && fsync(fd) == 0;
	if (close(fd) != 0)
		ok = 0;
	if (!ok || rename(tmp, path) != 0)
		return dml_fail(DML_EIO, err, errlen, "%s: %s", tmp, strerror(errno));
	fd = open(s->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) != 0) {
		if (fd >= 0)
			close(fd);
		return dml_fail(DML_EIO, err, errlen, "%s: sync: %s", s->path, strerror(errno));
	}
	close(fd);
	s->mf = *m;
	s->mf.gen++;
	s->mf_found = 1;
	return 0;
}

/* data.mdb in dir: missing or empty. */
static int env_absent(const char *dir)
{
	char path[4096];
	struct stat st;

	if ((size_t)snprintf(path, sizeof(path), "%s/data.mdb", dir) >= sizeof(path))
		return 0;
	return stat(path, &st) != 0 || st.st_size == 0;
}

int store_manifest_load(struct dml_store *s, char *err, size_t errlen)
{
	int rc;

	if (s->kind == STORE_CKPT)
		return 0;
	rc = mf_read(s, err, errlen);
	if (rc || !s->mf_found || !env_absent(s->path))
		return rc;
	return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: missing or empty, but %s/manifest "
			"says the store holds %s %" PRIu64, s->path, s->path,
			s->kind == STORE_SCHED ? "commits up to" : "log records up to",
			s->mf.last);
}

int store_manifest_ckpt_load(struct dml_store *s, char *err, size_t errlen)
{
	char dir[4096];

	if (!s->mf_found || !s->mf.ckpt)
		return 0;
	if ((size_t)snprintf(dir, sizeof(dir), "%s/ckpt", s->path) >= sizeof(dir) ||
	    !env_absent(dir))
		return 0;
	return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: missing or empty, but %s/manifest "
			"names its checkpoint %" PRIu64, dir, s->path, s->mf.ckpt);
}

/* env's meta "store_id" = id, in a transaction of its own. */
static int put_id(struct dml_store *e, uint64_t id, char *err, size_t errlen)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(e->env, NULL, 0, &txn);

	if (!rc && (rc = store_meta_put_u64(e, txn, id_key, id)) != 0)
		mdb_txn_abort(txn);
	else if (!rc)
		rc = mdb_txn_commit(txn);
	return rc ? store_commit_fail(e, rc, err, errlen) : 0;
}

static uint64_t new_id(void)
{
	uint64_t id = 0;

	if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id) || !id)
		id = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid() ^ 1;
	return id;
}

/* Entries in dbi of e; 0 also when LMDB cannot say. */
static uint64_t entries(struct dml_store *e, MDB_dbi dbi)
{
	MDB_txn *txn;
	MDB_stat st = { 0 };

	if (mdb_txn_begin(e->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (mdb_stat(txn, dbi, &st) != 0)
		st.ms_entries = 0;
	mdb_txn_abort(txn);
	return st.ms_entries;
}

/* The first log record's number; 0: the log is empty. */
static uint64_t log_first(struct dml_store *s)
{
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_val k, v;
	uint64_t first = 0;

	if (mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (mdb_cursor_open(txn, s->log, &c) == 0) {
		if (mdb_cursor_get(c, &k, &v, MDB_FIRST) == 0 && k.mv_size == 8)
			first = store_get_be64(k.mv_data);
		mdb_cursor_close(c);
	}
	mdb_txn_abort(txn);
	return first;
}

/* The store's id in environment e against the manifest's; a new one gets it. */
static int id_check(struct dml_store *s, struct dml_store *e, int may_be_new, char *err,
		    size_t errlen)
{
	uint64_t id = store_meta_u64(e, id_key);

	if (id == s->mf.id)
		return 0;
	if (id)
		return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: of store %016" PRIx64 ", but "
				"%s/manifest names store %016" PRIx64 " (files of two stores?)",
				e->path, id, s->path, s->mf.id);
	if (may_be_new)
		return put_id(e, s->mf.id, err, errlen);
	return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: emptied or replaced: it is not "
			"store %016" PRIx64 " that %s/manifest names", e->path, s->mf.id, s->path);
}

/* A store with no manifest: a new one (nothing in it) gets an id, else refused. */
static int first_manifest(struct dml_store *s, char *err, size_t errlen)
{
	uint64_t id = store_meta_u64(s, id_key);
	int empty = s->kind == STORE_SCHED ?
		    entries(s, s->jobs) + entries(s, s->nodes) == 0 :
		    s->next_lsn == 1 && !store_ckpt_id(s);
	int rc;

	if (!empty)
		return dml_fail(DML_ECONF, err, errlen, "%s/manifest: missing, and the store holds "
				"%s", s->path, s->kind == STORE_SCHED ? "jobs or nodes" :
				"log records or a checkpoint");
	s->mf.id = id ? id : new_id();
	rc = id ? 0 : put_id(s, s->mf.id, err, errlen);
	if (!rc && s->ck)
		rc = put_id(s->ck, s->mf.id, err, errlen);
	return rc;
}

int store_manifest_check(struct dml_store *s, char *err, size_t errlen)
{
	uint64_t run, crun, ckpt, ckpt_lsn, first, last;
	int rc, fresh_run;

	if (!s->mf_found)
		return first_manifest(s, err, errlen);
	rc = id_check(s, s, 0, err, errlen);
	if (rc)
		return rc;
	if (s->kind == STORE_SCHED) {
		last = store_meta_u64(s, store_commits_key);
		if (last < s->mf.last)
			return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: older than %s/manifest:"
					" %" PRIu64 " commits, it says %" PRIu64 " (an older copy?)",
					s->path, s->path, last, s->mf.last);
		if (last > s->mf.last + 1)
			return dml_fail(DML_ECONF, err, errlen, "%s/manifest: older than its "
					"data.mdb: %" PRIu64 " commits, data.mdb has %" PRIu64,
					s->path, s->mf.last, last);
		return 0;
	}
	/* A new run writes its manifest first: a log of the run before is what
	 * a start cut short leaves. */
	run = store_meta_u64(s, store_run_key);
	fresh_run = !s->mf.ckpt && !s->mf.last;
	if (run != s->mf.run && !fresh_run)
		return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: a log of run %" PRIu64 ", but "
				"%s/manifest says run %" PRIu64 " (an older copy?)", s->path, run,
				s->path, s->mf.run);
	rc = id_check(s, s->ck, !s->mf.ckpt, err, errlen);
	if (rc)
		return rc;
	crun = store_meta_u64(s->ck, store_run_key);
	ckpt = crun == run ? store_ckpt_id(s) : 0;
	ckpt_lsn = crun == run ? store_ckpt_lsn(s) : 0;
	if (s->mf.ckpt && (crun != s->mf.run || ckpt < s->mf.ckpt))
		return dml_fail(DML_ECONF, err, errlen, "%s/ckpt/data.mdb: older than %s/manifest: "
				"checkpoint %" PRIu64 " of run %" PRIu64 ", it names checkpoint %"
				PRIu64 " of run %" PRIu64 " (an older copy?)", s->path, s->path,
				ckpt, crun, s->mf.ckpt, s->mf.run);
	first = log_first(s);
	if (first && first > ckpt_lsn + 1)
		return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: the log begins at record %"
				PRIu64 " but the checkpoint in %s/ckpt ends at record %" PRIu64
				": the records between are missing (an older checkpoint?)", s->path,
				first, s->path, ckpt_lsn);
	last = s->next_lsn - 1 > ckpt_lsn ? s->next_lsn - 1 : ckpt_lsn;
	if (run == s->mf.run && last < s->mf.last)
		return dml_fail(DML_ECONF, err, errlen, "%s/data.mdb: older than %s/manifest: the "
				"log ends at record %" PRIu64 ", it says %" PRIu64 " were written "
				"(an older copy?)", s->path, s->path, last, s->mf.last);
	return 0;
}

int store_manifest_save(struct dml_store *s, char *err, size_t errlen)
{
	struct store_manifest m = s->mf;
	int rc;

	/* What the manifest says must be on disk first (nosync stores too). */
	rc = mdb_env_sync(s->env, 1);
	if (rc)
		return store_lmdb_fail(s, rc, "sync", err, errlen);
	if (s->kind == STORE_SCHED) {
		m.last = store_meta_u64(s, store_commits_key);
	} else {
		m.run = store_meta_u64(s, store_run_key);
		m.ckpt = store_ckpt_id(s);
		m.ckpt_lsn = store_ckpt_lsn(s);
		m.last = s->next_lsn - 1 > m.ckpt_lsn ? s->next_lsn - 1 : m.ckpt_lsn;
	}
	return store_manifest_write(s, &m, err, errlen);
}
