/*
 * store.c - the gradient log and the push-dedupe state of one server in an
 * LMDB environment (see store.h).
 *
 * Three named databases: "meta" ("format", "kind" and "node", u32
 * little-endian; "run", u64), "log" (8-byte big-endian log sequence
 * numbers from 1, so that LMDB's byte order is numeric order and appends go
 * at the end, to one encoded record each) and "dedupe" (store_dedupe.c). The
 * checkpoints are a store of their own in PATH/ckpt (checkpoint.c).
 *
 * A log record, little-endian, without a version of its own (the "meta"
 * format covers it):
 *
 *	u32 job, u32 table, u32 worker, u64 incarnation, u64 seq, u64 clock,
 *	u8 flags (1: dense, 2: rows, 4: moved, 8: weighted, 16: deferred to
 *	its clock's step, 32: a step), u64 begin,
 *	u64 end, u32 nkeys, u32 width,
 *	f32 weight (weighted pushes only: a weight other than 1),
 *	u64 keys[nkeys] (sparse only; nkeys is 0 when dense),
 *	f32 values[(dense ? end - begin : nkeys) * width],
 *	and, as every value of a store, u32 CRC32C of key and record (store_sum.c)
 *
 * A step record (flag 32 alone with dense: no rows, no keys, width 1, no
 * values) marks where a server applied the deferred pushes before it as
 * one optimizer step per table; it carries no worker sequence.
 *
 * Must never: trust a length read from the file before checking it against
 * the size LMDB gave, hand out a pointer into the map (LMDB's values are
 * not aligned and die with their transaction), or leave part of a batch in
 * the log.
 */
#define _GNU_SOURCE /* asprintf */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "proto/util.h"

/* Keys and values are copied as they lie in memory. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "store.c writes the host's floats and keys as little-endian"
#endif

/* Free space under which a failed write is put down to a full disk. */
#define STORE_LOW_SPACE (16u << 20)

const char *const dml_durability_names[] = { "sync", "batch", "none", NULL };

/* Offsets of a record's header fields. */
enum {
	REC_JOB = 0,
	REC_TABLE = 4,
	REC_WORKER = 8,
	REC_INCARNATION = 12,      /* moved rows: the map version */
	REC_SEQ = 20,
	REC_CLOCK = 28,
	REC_DENSE = 36,            /* flags: REC_F_DENSE, REC_F_ROWS, REC_F_MOVED */
	REC_BEGIN = 37,            /* dense, or moved rows: the range */
	REC_END = 45,
	REC_NKEYS = 53,
	REC_WIDTH = 57,
	REC_HDR = 61,
};

enum {
	REC_F_DENSE = 1, REC_F_ROWS = 2, REC_F_MOVED = 4, REC_F_WEIGHT = 8, REC_F_DEFER = 16,
	REC_F_STEP = 32,
};
#define REC_FLAGS (REC_F_DENSE | REC_F_ROWS | REC_F_MOVED | REC_F_WEIGHT | REC_F_DEFER | \
		   REC_F_STEP)

/* A push of a weight other than 1 carries it after the header (so a log of
 * unweighted pushes reads as it did before weights). */
static int rec_weighted(const struct dml_log_rec *r)
{
	return !r->rows && r->weight != 0.0f && r->weight != 1.0f;
}

#define SCRATCH_MIN 64


/* ---- byte order ---------------------------------------------------------- */

void store_put_le64(uint8_t *p, uint64_t v)
{
	dml_store_le32(p, (uint32_t)v);
	dml_store_le32(p + 4, (uint32_t)(v >> 32));
}

void store_put_be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

uint64_t store_get_be64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

void store_put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

uint32_t store_get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* ---- errors -------------------------------------------------------------- */

void store_err_clear(char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = '\0';
}

/* Codes that say the file is not what LMDB (or dml) wrote, not that I/O failed. */
static int lmdb_damaged(int rc)
{
	return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
	       rc == MDB_PANIC || rc == MDB_INCOMPATIBLE || rc == MDB_PAGE_NOTFOUND;
}

/* An LMDB failure while doing what (may be ""), as a dml code and err. */
int store_lmdb_fail(const struct dml_store *s, int rc, const char *what, char *err,
		     size_t errlen)
{
	if (lmdb_damaged(rc))
		return dml_fail(DML_ECONF, err, errlen,
				"%s/data.mdb: not a dml store or damaged: %s", s->path,
				mdb_strerror(rc));
	if (rc == ENOSPC || rc == EIO || rc == EDQUOT) {
		/* A full disk often surfaces as EIO from a later write or sync. */
		struct statvfs fs;

		if (statvfs(s->path, &fs) == 0 &&
		    (uint64_t)fs.f_bavail * fs.f_frsize < STORE_LOW_SPACE)
			return dml_fail(DML_EIO, err, errlen, "%s: %s%sno space left on the file "
					"system (%" PRIu64 " KiB free; LMDB said: %s)", s->path,
					what, *what ? ": " : "",
					(uint64_t)fs.f_bavail * fs.f_frsize / 1024, mdb_strerror(rc));
	}
	return dml_fail(rc == ENOMEM ? DML_ENOMEM : DML_EIO, err, errlen, "%s: %s%s%s",
			s->path, what, *what ? ": " : "", mdb_strerror(rc));
}

/* "PATH: log record N: reason" */
static int bad_rec(const struct dml_store *s, uint64_t lsn, char *err, size_t errlen,
		   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int bad_rec(const struct dml_store *s, uint64_t lsn, char *err, size_t errlen,
		   const char *fmt, ...)
{
	char why[160];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return dml_fail(DML_ECONF, err, errlen, "%s: log record %" PRIu64 ": %s", s->path, lsn,
			why);
}

/* n bytes as the config would write it: 64M, 1G, 128K; the largest exact unit. */
static void human_size(uint64_t n, char *buf, size_t len)
{
	static const char units[] = "KMG";
	int u = 0;

	while (u < 3 && n >= 1024 && n % 1024 == 0) {
		n /= 1024;
		u++;
	}
	if (u)
		snprintf(buf, len, "%" PRIu64 "%c", n, units[u - 1]);
	else
		snprintf(buf, len, "%" PRIu64, n);
}

/* ---- record layout --------------------------------------------------------- */

/*
 * The byte sizes of a record's keys and values, or why no record can have
 * these fields. Shared by the encoder and the decoder so that append refuses
 * exactly what replay would.
 */
static const char *rec_layout(int dense, uint64_t begin, uint64_t end, uint32_t nkeys,
			      uint32_t width, size_t *keybytes, size_t *valbytes)
{
	uint64_t count;
	size_t n, total;

	if (width == 0)
		return "width 0";
	if (dense && begin > end)
		return "dense range with begin > end";
	if (dense && nkeys)
		return "dense record with keys";
	count = dense ? end - begin : nkeys;
	if (__builtin_mul_overflow(count, (uint64_t)width, &n) ||
	    __builtin_mul_overflow(n, sizeof(float), valbytes))
		return "value count overflows";
	*keybytes = dense ? 0 : (size_t)nkeys * sizeof(uint64_t);
	if (__builtin_add_overflow(*keybytes, *valbytes, &total) ||
	    __builtin_add_overflow(total, (size_t)REC_HDR, &total))
		return "record size overflows";
	return NULL;
}

static void rec_encode(const struct dml_log_rec *r, size_t keybytes, size_t valbytes,
		       uint8_t *p)
{
	size_t hdr = REC_HDR;

	dml_store_le32(p + REC_JOB, r->job);
	dml_store_le32(p + REC_TABLE, r->table);
	dml_store_le32(p + REC_WORKER, r->worker);
	store_put_le64(p + REC_INCARNATION, r->moved ? r->version : r->incarnation);
	store_put_le64(p + REC_SEQ, r->seq);
	store_put_le64(p + REC_CLOCK, r->clock);
	p[REC_DENSE] = (r->dense ? REC_F_DENSE : 0) | (r->rows ? REC_F_ROWS : 0) |
		       (r->moved ? REC_F_ROWS | REC_F_MOVED : 0) |
		       (rec_weighted(r) ? REC_F_WEIGHT : 0) |
		       (r->deferred && !r->rows ? REC_F_DEFER : 0) | (r->step ? REC_F_STEP : 0);
	store_put_le64(p + REC_BEGIN, r->dense || r->moved ? r->begin : 0);
	store_put_le64(p + REC_END, r->dense || r->moved ? r->end : 0);
	dml_store_le32(p + REC_NKEYS, r->dense ? 0 : r->nkeys);
	dml_store_le32(p + REC_WIDTH, r->width);
	if (rec_weighted(r)) {
		memcpy(p + hdr, &r->weight, sizeof(float));
		hdr += sizeof(float);
	}
	if (keybytes)
		memcpy(p + hdr, r->keys, keybytes);
	if (valbytes)
		memcpy(p + hdr + keybytes, r->values, valbytes);
}

/* The header's fields into r; arrays are placed by rec_decode. */
static void rec_header(const uint8_t *p, struct dml_log_rec *r)
{
	memset(r, 0, sizeof(*r));
	r->job = dml_load_le32(p + REC_JOB);
	r->table = dml_load_le32(p + REC_TABLE);
	r->worker = dml_load_le32(p + REC_WORKER);
	r->incarnation = dml_load_le64(p + REC_INCARNATION);
	r->seq = dml_load_le64(p + REC_SEQ);
	r->clock = dml_load_le64(p + REC_CLOCK);
	r->dense = p[REC_DENSE] & REC_F_DENSE;
	r->rows = (p[REC_DENSE] & REC_F_ROWS) != 0;
	r->moved = (p[REC_DENSE] & REC_F_MOVED) != 0;
	r->deferred = (p[REC_DENSE] & REC_F_DEFER) != 0;
	r->step = (p[REC_DENSE] & REC_F_STEP) != 0;
	if (r->moved) {
		r->version = r->incarnation;
		r->incarnation = 0;
	}
	r->begin = dml_load_le64(p + REC_BEGIN);
	r->end = dml_load_le64(p + REC_END);
	r->nkeys = dml_load_le32(p + REC_NKEYS);
	r->width = dml_load_le32(p + REC_WIDTH);
}

int store_scratch_reserve(struct dml_store *s, size_t n)
{
	void *p;

	if (n < SCRATCH_MIN)
		n = SCRATCH_MIN;
	if (n <= s->scratch_cap)
		return 0;
	p = realloc(s->scratch, n);
	if (!p)
		return DML_ENOMEM;
	s->scratch = p;
	s->scratch_cap = n;
	return 0;
}

/* Record lsn (LMDB's value v) into r, its arrays copied to s->scratch. */
static int rec_decode(struct dml_store *s, uint64_t lsn, const MDB_val *v,
		      struct dml_log_rec *r, char *err, size_t errlen)
{
	const uint8_t *p = v->mv_data;
	size_t keybytes, valbytes, hdr = REC_HDR;
	const char *why;

	if (v->mv_size < REC_HDR)
		return bad_rec(s, lsn, err, errlen, "%zu bytes, shorter than a header (%d)",
			       v->mv_size, REC_HDR);
	rec_header(p, r);
	if ((p[REC_DENSE] & ~REC_FLAGS) || (r->moved && !r->rows) ||
	    ((p[REC_DENSE] & (REC_F_WEIGHT | REC_F_DEFER)) && r->rows) ||
	    (r->step && (p[REC_DENSE] != (REC_F_STEP | REC_F_DENSE) || r->begin != r->end ||
			 r->seq)))
		return bad_rec(s, lsn, err, errlen, "flags %d", p[REC_DENSE]);
	if (p[REC_DENSE] & REC_F_WEIGHT) {
		if (v->mv_size < REC_HDR + sizeof(float))
			return bad_rec(s, lsn, err, errlen, "%zu bytes, shorter than a "
				       "weighted header", v->mv_size);
		memcpy(&r->weight, p + REC_HDR, sizeof(float));
		if (!dml_push_weight_ok(r->weight))
			return bad_rec(s, lsn, err, errlen, "weight %g", (double)r->weight);
		hdr += sizeof(float);
	}
	if (r->moved && r->begin >= r->end)
		return bad_rec(s, lsn, err, errlen, "moved rows of an empty range");
	why = rec_layout(r->dense, r->begin, r->end, r->nkeys, r->width, &keybytes, &valbytes);
	if (why)
		return bad_rec(s, lsn, err, errlen, "%s", why);
	if (v->mv_size - hdr != keybytes + valbytes)
		return bad_rec(s, lsn, err, errlen, "%zu bytes, its header says %zu", v->mv_size,
			       hdr + keybytes + valbytes);
	if (store_scratch_reserve(s, keybytes + valbytes))
		return dml_fail(DML_ENOMEM, err, errlen, "%s: log record %" PRIu64
				": out of memory", s->path, lsn);
	memcpy(s->scratch, p + hdr, keybytes + valbytes);
	r->keys = r->dense ? NULL : s->scratch;
	/* Never NULL, so that fn may memcpy zero values from it. */
	r->values = (const void *)((const uint8_t *)s->scratch + keybytes);
	return 0;
}

/* ---- open and close -------------------------------------------------------- */

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

/* ---- the batch ------------------------------------------------------------- */

/*
 * p with room for need elements of elem bytes (*cap counts them), growing
 * twofold from least; NULL when out of memory (p is left as it was). need
 * is never 0.
 */
static void *grow(void *p, size_t *cap, size_t need, size_t elem, size_t least)
{
	size_t n = *cap ? *cap : least, bytes;

	if (need <= *cap)
		return p;
	while (n < need)
		n = n > SIZE_MAX / 2 ? need : n * 2;
	if (__builtin_mul_overflow(n, elem, &bytes))
		return NULL;
	p = realloc(p, bytes);
	if (p)
		*cap = n;
	return p;
}

int dml_store_append(struct dml_store *s, const struct dml_log_rec *r)
{
	size_t keybytes, valbytes, size, *offs;
	uint8_t *buf;

	if (!s || !r)
		return DML_EINVAL;
	if (rec_layout(r->dense, r->begin, r->end, r->dense ? 0 : r->nkeys, r->width, &keybytes,
		       &valbytes))
		return DML_EINVAL;
	if ((keybytes && !r->keys) || (valbytes && !r->values))
		return DML_EINVAL;
	if (rec_weighted(r) && !dml_push_weight_ok(r->weight))
		return DML_EINVAL;
	if (r->step && (r->rows || r->deferred || r->moved || !r->dense || r->begin != r->end ||
			r->seq))
		return DML_EINVAL;
	size = REC_HDR + (rec_weighted(r) ? sizeof(float) : 0) + keybytes + valbytes;
	if (size > SIZE_MAX - s->len)
		return DML_ENOMEM;
	offs = grow(s->offs, &s->offs_cap, s->n + 1, sizeof(*s->offs), 64);
	if (!offs)
		return DML_ENOMEM;
	s->offs = offs;
	buf = grow(s->buf, &s->cap, s->len + size, 1, 4096);
	if (!buf)
		return DML_ENOMEM;
	s->buf = buf;
	rec_encode(r, keybytes, valbytes, s->buf + s->len);
	s->offs[s->n++] = s->len;
	s->len += size;
	return 0;
}

size_t dml_store_pending(const struct dml_store *s, size_t *bytes)
{
	if (bytes)
		*bytes = s ? s->len : 0;
	return s ? s->n : 0;
}

/* ---- commit ---------------------------------------------------------------- */

int store_commit_fail(const struct dml_store *s, int rc, char *err, size_t errlen)
{
	MDB_envinfo info;
	char size[32];

	if (rc != MDB_MAP_FULL)
		return store_lmdb_fail(s, rc, "commit", err, errlen);
	if (mdb_env_info(s->env, &info) != 0)
		info.me_mapsize = 0;
	human_size(info.me_mapsize, size, sizeof(size));
	return dml_fail(DML_EFULL, err, errlen,
			"%s: the map is full (map_size %s): raise [store] map_size", s->path, size);
}

/* Batch record i under its log number, and its dedupe state. */
static int commit_one(struct dml_store *s, MDB_txn *txn, size_t i, char *err, size_t errlen)
{
	uint8_t *p = s->buf + s->offs[i];
	size_t end = i + 1 < s->n ? s->offs[i + 1] : s->len;
	uint8_t kb[8];
	MDB_val k = { .mv_size = sizeof(kb), .mv_data = kb };
	int rc;

	store_put_be64(kb, s->next_lsn + i);
	rc = store_sum_put(txn, s->log, &k, p, end - s->offs[i], MDB_APPEND);
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	/* Rows records carry a sequence only when they record one; steps none. */
	if ((p[REC_DENSE] & (REC_F_ROWS | REC_F_STEP)) && !dml_load_le64(p + REC_SEQ))
		return 0;
	return store_dedupe_update(s, txn, dml_load_le32(p + REC_WORKER),
				   dml_load_le64(p + REC_INCARNATION), dml_load_le64(p + REC_SEQ),
				   s->next_lsn + i, err, errlen);
}

int dml_store_commit(struct dml_store *s, char *err, size_t errlen)
{
	MDB_txn *txn;
	int rc;

	store_err_clear(err, errlen);
	if (!s)
		return DML_EINVAL;
	if ((rc = store_syncer_error(s)) != 0)
		return store_lmdb_fail(s, rc, "flushing an earlier commit", err, errlen);
	if (!s->n)
		return 0;
	rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	for (size_t i = 0; i < s->n && !rc; i++)
		rc = commit_one(s, txn, i, err, errlen);
	if (rc) {
		mdb_txn_abort(txn);
		return rc;
	}
	/* mdb_txn_commit frees txn whatever it returns. */
	rc = mdb_txn_commit(txn);
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	store_syncer_kick(s);
	s->next_lsn += s->n;
	s->n = 0;
	s->len = 0;
	return 0;
}

/* ---- runs ------------------------------------------------------------------ */

const char store_run_key[] = "run";

static const char log_version_key[] = "log_version";
const char store_log_map_key[] = "log_map";

uint64_t dml_store_run(struct dml_store *s)
{
	return store_meta_u64(s, store_run_key);
}

uint64_t dml_store_log_version(struct dml_store *s)
{
	return s ? store_meta_u64(s, log_version_key) : 0;
}

int dml_store_start_run(struct dml_store *s, uint64_t run, uint64_t version,
			const void *map, size_t map_len, char *err, size_t errlen)
{
	MDB_txn *txn;
	int rc;

	store_err_clear(err, errlen);
	if (!s)
		return DML_EINVAL;
	/* The manifest of the new run first: an open after a crash that cut
	 * this short takes the log of the run before as it is. */
	rc = store_manifest_write(s, &(struct store_manifest){ .id = s->mf.id, .run = run }, err,
				  errlen);
	if (rc)
		return rc;
	rc = mdb_txn_begin(s->env, NULL, 0, &txn);
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	if ((rc = mdb_drop(txn, s->log, 0)) != 0 || (rc = mdb_drop(txn, s->dedupe, 0)) != 0 ||
	    (rc = store_meta_put_u64(s, txn, store_run_key, run)) != 0 ||
	    (rc = store_meta_put_u64(s, txn, log_version_key, version)) != 0 ||
	    (rc = store_meta_put_bytes(s, txn, store_log_map_key, map, map_len)) != 0) {
		mdb_txn_abort(txn);
		return store_commit_fail(s, rc, err, errlen);
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	s->next_lsn = 1;
	s->n = 0;
	s->len = 0;
	/* The log's run comes first: checkpoints of another run are dropped
	 * at the next open if this does not get through. */
	return store_ckpt_start_run(s, run, err, errlen);
}

uint64_t dml_store_log_last(const struct dml_store *s)
{
	return s ? s->next_lsn - 1 : 0;
}

/* ---- reading --------------------------------------------------------------- */

int store_walk_from(struct dml_store *s, MDB_dbi dbi, const MDB_val *from, const char *what,
		    store_walk_fn one, void *ctx, char *err, size_t errlen)
{
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_val k = { 0 }, v;
	MDB_cursor_op op = MDB_FIRST;
	int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);

	if (rc)
		return store_lmdb_fail(s, rc, what, err, errlen);
	rc = mdb_cursor_open(txn, dbi, &c);
	if (rc) {
		mdb_txn_abort(txn);
		return store_lmdb_fail(s, rc, what, err, errlen);
	}
	if (from) {
		k = *from;
		op = MDB_SET_RANGE;
	}
	for (;;) {
		int mrc = mdb_cursor_get(c, &k, &v, op);

		op = MDB_NEXT;
		if (mrc) {
			rc = mrc == MDB_NOTFOUND ? 0 : store_lmdb_fail(s, mrc, what, err, errlen);
			break;
		}
		if (store_sum_check(&k, &v)) {
			rc = store_bad_sum(s, what, &k, err, errlen);
			break;
		}
		rc = one(s, &k, &v, ctx, err, errlen);
		if (rc)
			break;
	}
	mdb_cursor_close(c);
	mdb_txn_abort(txn);
	return rc == STORE_WALK_END ? 0 : rc;
}

int store_walk(struct dml_store *s, MDB_dbi dbi, const char *what, store_walk_fn one,
	       void *ctx, char *err, size_t errlen)
{
	return store_walk_from(s, dbi, NULL, what, one, ctx, err, errlen);
}

struct replay_ctx {
	int (*fn)(const struct dml_log_rec *r, void *arg);
	void *arg;
};

static int replay_one(struct dml_store *s, const MDB_val *k, const MDB_val *v, void *ctx,
		      char *err, size_t errlen)
{
	struct replay_ctx *rx = ctx;
	struct dml_log_rec r;
	int ret;

	if (k->mv_size != 8)
		return dml_fail(DML_ECONF, err, errlen, "%s: log key of %zu bytes, want 8",
				s->path, k->mv_size);
	ret = rec_decode(s, store_get_be64(k->mv_data), v, &r, err, errlen);
	return ret ? ret : rx->fn(&r, rx->arg);
}

int dml_store_replay(struct dml_store *s, int (*fn)(const struct dml_log_rec *r, void *arg),
		     void *arg, char *err, size_t errlen)
{
	struct replay_ctx ctx = { fn, arg };
	uint8_t kb[8];
	MDB_val from = { .mv_size = sizeof(kb), .mv_data = kb };

	store_err_clear(err, errlen);
	if (!s || !fn)
		return DML_EINVAL;
	/* The newest checkpoint holds the records up to its lsn. */
	store_put_be64(kb, store_ckpt_lsn(s) + 1);
	return store_walk_from(s, s->log, &from, "replay", replay_one, &ctx, err, errlen);
}

int dml_store_log_space(struct dml_store *s, uint64_t *used, uint64_t *map_size)
{
	MDB_envinfo info;
	MDB_txn *txn;
	MDB_stat st;
	int rc;

	*used = *map_size = 0;
	if (!s || s->kind != STORE_SERVER)
		return DML_EINVAL;
	if ((rc = mdb_env_info(s->env, &info)) != 0 ||
	    (rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn)) != 0)
		return store_lmdb_fail(s, rc, "", NULL, 0);
	rc = mdb_stat(txn, s->log, &st);
	mdb_txn_abort(txn);
	if (rc)
		return store_lmdb_fail(s, rc, "", NULL, 0);
	*used = (uint64_t)(st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages) *
		st.ms_psize;
	*map_size = info.me_mapsize;
	return 0;
}

int dml_store_grow(struct dml_store *s, uint64_t bytes, char *err, size_t errlen)
{
	MDB_envinfo info;
	int rc;

	store_err_clear(err, errlen);
	if (!s || s->kind != STORE_SERVER)
		return DML_EINVAL;
	if ((rc = mdb_env_info(s->env, &info)) != 0 ||
	    (rc = mdb_env_set_mapsize(s->env, info.me_mapsize + (size_t)bytes)) != 0)
		return store_lmdb_fail(s, rc, "growing the map", err, errlen);
	return 0;
}

uint64_t dml_store_log_count(struct dml_store *s)
{
	MDB_txn *txn;
	MDB_stat st;

	if (!s || mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (mdb_stat(txn, s->log, &st) != 0)
		st.ms_entries = 0;
	mdb_txn_abort(txn);
	return st.ms_entries;
}
