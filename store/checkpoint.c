/*
 * checkpoint.c - a store's checkpoint (see store.h): chunks of rows in the
 * "ckpt" database under 8-byte big-endian chunk numbers, written in one
 * write transaction that also empties the log.
 *
 * A chunk, little-endian:
 *
 *	u32 table, u8 dense, u64 begin, u64 n, u32 row_floats,
 *	u64 keys[n] (sparse only), f32 rows[n * row_floats]
 *
 * Must never: leave a half-written checkpoint visible (it is one
 * transaction), trust a count read back before checking it against the
 * chunk's size, or hand out pointers into LMDB's map (chunks are copied
 * into the store's aligned scratch first).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dml_error.h"
#include "store_internal.h"
#include "util.h"

enum { CK_TABLE = 0, CK_DENSE = 4, CK_BEGIN = 5, CK_N = 13, CK_ROWF = 21, CK_HDR = 25 };

const char store_ckpt_version_key[] = "ckpt_version";

int dml_store_checkpoint_begin(struct dml_store *s, uint64_t version, char *err,
			       size_t errlen)
{
	int rc;

	store_err_clear(err, errlen);
	if (!s || s->ckpt_txn)
		return DML_EINVAL;
	if (s->n)
		return dml_fail(DML_EINVAL, err, errlen, "%s: checkpoint: %zu logged pushes "
				"not committed", s->path, s->n);
	rc = mdb_txn_begin(s->env, NULL, 0, &s->ckpt_txn);
	if (!rc)
		rc = mdb_drop(s->ckpt_txn, s->ckpt, 0);
	if (rc) {
		if (s->ckpt_txn)
			mdb_txn_abort(s->ckpt_txn);
		s->ckpt_txn = NULL;
		return store_commit_fail(s, rc, err, errlen);
	}
	s->ckpt_chunks = 0;
	s->ckpt_version = version;
	return 0;
}

uint64_t dml_store_checkpoint_version(struct dml_store *s)
{
	return store_meta_u64(s, store_ckpt_version_key);
}

/* Bytes of a chunk of n rows; 0 when it would not fit in a size_t. */
static size_t chunk_bytes(int dense, uint64_t n, uint32_t row_floats)
{
	uint64_t per = (dense ? 0 : 8) + (uint64_t)row_floats * 4;

	if (row_floats == 0 || (per && n > (SIZE_MAX - CK_HDR) / per))
		return 0;
	return CK_HDR + (size_t)(n * per);
}

int dml_store_checkpoint_add(struct dml_store *s, const struct dml_ckpt_rows *r, char *err,
			     size_t errlen)
{
	size_t bytes = r ? chunk_bytes(r->dense, r->n, r->row_floats) : 0;
	uint8_t kb[8], *p;
	MDB_val k = { .mv_size = sizeof(kb), .mv_data = kb }, v = { .mv_size = bytes };
	int rc;

	store_err_clear(err, errlen);
	if (!s || !s->ckpt_txn || !bytes || (!r->dense && r->n && !r->keys))
		return DML_EINVAL;
	store_put_be64(kb, ++s->ckpt_chunks);
	rc = mdb_put(s->ckpt_txn, s->ckpt, &k, &v, MDB_APPEND | MDB_RESERVE);
	if (rc) {
		dml_store_checkpoint_end(s, 0, NULL, 0);
		return store_commit_fail(s, rc, err, errlen);
	}
	p = v.mv_data;
	dml_store_le32(p + CK_TABLE, r->table);
	p[CK_DENSE] = r->dense ? 1 : 0;
	store_put_le64(p + CK_BEGIN, r->dense ? r->begin : 0);
	store_put_le64(p + CK_N, r->n);
	dml_store_le32(p + CK_ROWF, r->row_floats);
	p += CK_HDR;
	if (!r->dense) {
		memcpy(p, r->keys, r->n * 8);
		p += r->n * 8;
	}
	memcpy(p, r->rows, r->n * r->row_floats * sizeof(float));
	return 0;
}

int dml_store_checkpoint_end(struct dml_store *s, int commit, char *err, size_t errlen)
{
	MDB_txn *txn;
	int rc;

	store_err_clear(err, errlen);
	if (!s || !s->ckpt_txn)
		return DML_EINVAL;
	txn = s->ckpt_txn;
	s->ckpt_txn = NULL;
	if (!commit) {
		mdb_txn_abort(txn);
		return 0;
	}
	/* The rows hold every committed push now. */
	rc = mdb_drop(txn, s->log, 0);
	if (!rc) {
		MDB_val k = { .mv_size = strlen(store_ckpt_version_key),
			      .mv_data = (void *)store_ckpt_version_key };
		uint8_t b[8];
		MDB_val v = { .mv_size = sizeof(b), .mv_data = b };

		store_put_le64(b, s->ckpt_version);
		rc = mdb_put(txn, s->meta, &k, &v, 0);
	}
	if (rc) {
		mdb_txn_abort(txn);
		return store_commit_fail(s, rc, err, errlen);
	}
	rc = mdb_txn_commit(txn);
	return rc ? store_commit_fail(s, rc, err, errlen) : 0;
}

struct each_ctx {
	int (*fn)(const struct dml_ckpt_rows *r, void *arg);
	void *arg;
};

static int bad_chunk(const struct dml_store *s, uint64_t n, const char *why, char *err,
		     size_t errlen)
{
	return dml_fail(DML_ECONF, err, errlen, "%s: checkpoint chunk %" PRIu64 ": %s", s->path,
			n, why);
}

static int each_one(struct dml_store *s, const MDB_val *k, const MDB_val *v, void *ctx,
		    char *err, size_t errlen)
{
	struct each_ctx *ec = ctx;
	const uint8_t *p = v->mv_data;
	struct dml_ckpt_rows r = { 0 };
	uint64_t no = k->mv_size == 8 ? store_get_be64(k->mv_data) : 0;
	size_t body;

	if (k->mv_size != 8)
		return bad_chunk(s, 0, "key is not 8 bytes", err, errlen);
	if (v->mv_size < CK_HDR)
		return bad_chunk(s, no, "shorter than its header", err, errlen);
	r.table = dml_load_le32(p + CK_TABLE);
	r.dense = p[CK_DENSE];
	r.begin = dml_load_le64(p + CK_BEGIN);
	r.n = dml_load_le64(p + CK_N);
	r.row_floats = dml_load_le32(p + CK_ROWF);
	if (r.dense > 1 || chunk_bytes(r.dense, r.n, r.row_floats) != v->mv_size ||
	    (r.dense && r.begin + r.n < r.begin))
		return bad_chunk(s, no, "its counts do not match its size", err, errlen);
	body = v->mv_size - CK_HDR;
	if (store_scratch_reserve(s, body ? body : 1) != 0)
		return dml_fail(DML_ENOMEM, err, errlen, "%s: checkpoint chunk %" PRIu64
				": out of memory", s->path, no);
	memcpy(s->scratch, p + CK_HDR, body);
	r.keys = r.dense ? NULL : s->scratch;
	r.rows = (const float *)((const uint8_t *)s->scratch + (r.dense ? 0 : r.n * 8));
	return ec->fn(&r, ec->arg);
}

int dml_store_checkpoint_each(struct dml_store *s,
			      int (*fn)(const struct dml_ckpt_rows *r, void *arg), void *arg,
			      char *err, size_t errlen)
{
	struct each_ctx ctx = { fn, arg };

	store_err_clear(err, errlen);
	if (!s || !fn)
		return DML_EINVAL;
	return store_walk(s, s->ckpt, "checkpoint", each_one, &ctx, err, errlen);
}
