/*
 * store.c - the gradient log and the push-dedupe state of one server in an
 * LMDB environment (see store.h): its records' layout, the batch, its
 * commit, runs and replay. Opening and closing a store is store_open.c's,
 * the helpers all of store/ uses store_util.c's.
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
#include <inttypes.h>
#include <lmdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "proto/util.h"

/* Keys and values are copied as they lie in memory. */
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "store.c writes the host's floats and keys as little-endian"
#endif

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
