/*
 * checkpoint.c - a server store's checkpoints (see store.h), in a store of
 * their own (kind STORE_CKPT) at PATH/ckpt: chunks of rows in the "ckpt"
 * database under 16-byte big-endian keys (checkpoint id, chunk number), so
 * one checkpoint's chunks lie together and a new one, with the highest id
 * yet, is appended at the end. "meta" names the run, the newest complete
 * checkpoint ("ckpt_id", the one a restart loads), its map version, the
 * clock past its pushes ("ckpt_next_clock") and the last log record it
 * holds ("ckpt_lsn"); "snaps" lists the ones kept under a clock (job-wide
 * checkpoints) by 8-byte big-endian clock:
 *
 *	u64 id, u64 bytes, u64 map version, u64 unix ms written
 *
 * A chunk, little-endian:
 *
 *	u32 table, u8 dense, u64 begin, u64 n, u32 row_floats, 7 zero bytes,
 *	u64 keys[n] (sparse only), f32 rows[n * row_floats]
 *
 * and, as every value of a store, its CRC32C (store_sum.c). The header
 * takes 32 bytes so that the keys and rows of a chunk LMDB keeps on pages
 * of its own lie 8-byte aligned in the map, where a restart reads them.
 *
 * A checkpoint is written in one write transaction that, at its end,
 * names it newest, lists it under its clock, and deletes what nothing
 * needs any more: the previous newest when no clock lists it, and the
 * listed ones past the newest keep. Then the log records it holds are
 * deleted from the log's environment, in a transaction of their own.
 *
 * Must never: leave a half-written checkpoint visible (it is one
 * transaction), delete the chunks of the newest checkpoint (a restart
 * needs them even when no clock lists it any more), trust a count read
 * back before checking it against the chunk's size, or hand out a chunk
 * before its sum is checked or with its rows misaligned (one whose rows
 * lie aligned in the map is checked and handed out there, for the call;
 * another is summed as it is copied into the store's aligned scratch).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto/dml_error.h"
#include "store/store_internal.h"
#include "proto/util.h"

enum { CK_TABLE = 0, CK_DENSE = 4, CK_BEGIN = 5, CK_N = 13, CK_ROWF = 21, CK_PAD = 25, CK_HDR = 32 };
enum { SN_ID = 0, SN_BYTES = 8, SN_VERSION = 16, SN_MS = 24, SN_SIZE = 32 };

static const char version_key[] = "ckpt_version";
static const char id_key[] = "ckpt_id";
static const char next_clock_key[] = "ckpt_next_clock";
static const char lsn_key[] = "ckpt_lsn";
static const char map_key[] = "ckpt_map";
/* In the log's meta: the last LSN a truncation removed (see log_truncated_mark). */
static const char truncated_key[] = "log_truncated";

/* ---- the environment ------------------------------------------------------- */

static int drop_meta(struct dml_store *c, MDB_txn *txn, const char *key)
{
	MDB_val k = { .mv_size = strlen(key), .mv_data = (void *)key };
	int rc = mdb_del(txn, c->meta, &k, NULL);

	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Drop every checkpoint of c and name run. */
static int reset(struct dml_store *c, uint64_t run, char *err, size_t errlen)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(c->env, NULL, 0, &txn);

	if (rc)
		return store_commit_fail(c, rc, err, errlen);
	if ((rc = mdb_drop(txn, c->ckpt, 0)) != 0 || (rc = mdb_drop(txn, c->snaps, 0)) != 0 ||
	    (rc = drop_meta(c, txn, version_key)) != 0 || (rc = drop_meta(c, txn, id_key)) != 0 ||
	    (rc = drop_meta(c, txn, next_clock_key)) != 0 ||
	    (rc = drop_meta(c, txn, lsn_key)) != 0 || (rc = drop_meta(c, txn, map_key)) != 0 ||
	    (rc = store_meta_put_u64(c, txn, store_run_key, run)) != 0) {
		mdb_txn_abort(txn);
		return store_commit_fail(c, rc, err, errlen);
	}
	rc = mdb_txn_commit(txn);
	return rc ? store_commit_fail(c, rc, err, errlen) : 0;
}

int store_ckpt_open(struct dml_store *s, uint64_t map_size, uint32_t node_id, char *err,
		    size_t errlen)
{
	char path[4096];
	uint64_t run = store_meta_u64(s, store_run_key);
	int rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/ckpt", s->path) >= sizeof(path))
		return dml_fail(DML_EINVAL, err, errlen, "%s: path too long", s->path);
	rc = store_manifest_ckpt_load(s, err, errlen);
	if (rc)
		return rc;
	/* Always synced: a checkpoint's end deletes log records. */
	rc = store_open(path, map_size, 0, STORE_CKPT, node_id, &s->ck, err, errlen);
	if (!rc)
		rc = store_manifest_check(s, err, errlen);
	if (!rc && store_meta_u64(s->ck, store_run_key) != run)
		rc = reset(s->ck, run, err, errlen);
	return rc ? rc : store_manifest_save(s, err, errlen);
}

uint64_t store_ckpt_id(struct dml_store *s)
{
	return s->ck ? store_meta_u64(s->ck, id_key) : 0;
}

int store_ckpt_start_run(struct dml_store *s, uint64_t run, char *err, size_t errlen)
{
	return reset(s->ck, run, err, errlen);
}

uint64_t store_ckpt_lsn(struct dml_store *s)
{
	return store_meta_u64(s->ck, lsn_key);
}

/* Delete the log records up to lsn (a checkpoint holds them). */
/*
 * LMDB hands a writer only the pages freed by transactions before the one
 * just committed (it keeps the last snapshot whole), so the batch right after
 * a truncation could not use the pages it freed, and a full map grew again
 * (server/store_commit.c). This small commit after the truncation lets the
 * next batch have them. Best effort: a failure leaves the pages for later.
 */
static void log_truncated_mark(struct dml_store *s, uint64_t lsn)
{
	MDB_txn *txn;

	if (mdb_txn_begin(s->env, NULL, 0, &txn) != 0)
		return;
	if (store_meta_put_u64(s, txn, truncated_key, lsn) != 0)
		mdb_txn_abort(txn);
	else
		(void)mdb_txn_commit(txn); /* frees txn, failed or not */
}

static int log_truncate(struct dml_store *s, uint64_t lsn, char *err, size_t errlen)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int rc = mdb_txn_begin(s->env, NULL, 0, &txn);

	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	rc = mdb_cursor_open(txn, s->log, &cur);
	while (!rc && !(rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST)) && k.mv_size == 8 &&
	       store_get_be64(k.mv_data) <= lsn)
		rc = mdb_cursor_del(cur, 0);
	if (!rc || rc == MDB_NOTFOUND)
		rc = mdb_txn_commit(txn);
	else
		mdb_txn_abort(txn);
	if (rc)
		return store_commit_fail(s, rc, err, errlen);
	log_truncated_mark(s, lsn);
	return 0;
}

/* Delete every chunk of checkpoint id. */
static int chunks_delete(struct dml_store *s, MDB_txn *txn, uint64_t id)
{
	uint8_t kb[16] = { 0 };
	MDB_val k, v;
	MDB_cursor *c = NULL;
	int rc = mdb_cursor_open(txn, s->ckpt, &c);

	store_put_be64(kb, id);
	while (!rc) {
		k = (MDB_val){ .mv_size = sizeof(kb), .mv_data = kb };
		rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
		if (rc || k.mv_size != 16 || store_get_be64(k.mv_data) != id)
			break;
		rc = mdb_cursor_del(c, 0);
	}
	if (!rc || rc == MDB_NOTFOUND)
		rc = 0;
	if (c)
		mdb_cursor_close(c);
	return rc;
}

/* *listed: whether a clock lists checkpoint id. 0 or LMDB's error. */
static int snap_lists(struct dml_store *s, MDB_txn *txn, uint64_t id, int *listed)
{
	MDB_cursor *c;
	MDB_val k, v;
	int rc = mdb_cursor_open(txn, s->snaps, &c);

	*listed = 0;
	if (rc)
		return rc;
	for (rc = mdb_cursor_get(c, &k, &v, MDB_FIRST); !rc && !*listed;
	     rc = mdb_cursor_get(c, &k, &v, MDB_NEXT))
		*listed = !store_sum_check(&k, &v) && v.mv_size == SN_SIZE &&
			  dml_load_le64(v.mv_data) == id;
	mdb_cursor_close(c);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Delete checkpoint id unless it is the newest or a clock still lists it. */
static int release(struct dml_store *s, MDB_txn *txn, uint64_t id, uint64_t newest)
{
	int listed, rc;

	if (!id || id == newest)
		return 0;
	rc = snap_lists(s, txn, id, &listed);
	return rc || listed ? rc : chunks_delete(s, txn, id);
}

/* Unlist the checkpoint of clock k (an entry of "snaps") and release it. */
static int unlist(struct dml_store *s, MDB_txn *txn, MDB_val *k, uint64_t newest)
{
	MDB_val v;
	uint64_t id;
	int rc = store_sum_get(txn, s->snaps, k, &v);

	if (rc)
		return rc;
	id = v.mv_size == SN_SIZE ? dml_load_le64(v.mv_data) : 0;
	rc = mdb_del(txn, s->snaps, k, NULL);
	return rc ? rc : release(s, txn, id, newest);
}

/* List the checkpoint begun under its clock; unlist the oldest past keep. */
static int list(struct dml_store *s, MDB_txn *txn, uint64_t id)
{
	uint8_t kb[8], vb[SN_SIZE];
	MDB_val k = { .mv_size = sizeof(kb), .mv_data = kb }, v;
	MDB_stat st;
	int rc;

	store_put_be64(kb, s->info.clock);
	if (mdb_get(txn, s->snaps, &k, &v) == 0 && (rc = unlist(s, txn, &k, id)) != 0)
		return rc;
	store_put_le64(vb + SN_ID, id);
	store_put_le64(vb + SN_BYTES, s->ckpt_bytes);
	store_put_le64(vb + SN_VERSION, s->info.version);
	store_put_le64(vb + SN_MS, (uint64_t)time(NULL) * 1000);
	rc = store_sum_put(txn, s->snaps, &k, vb, sizeof(vb), 0);
	while (!rc && !(rc = mdb_stat(txn, s->snaps, &st)) && st.ms_entries > s->info.keep) {
		MDB_cursor *c;
		MDB_val first, fv;
		uint8_t fb[8];

		rc = mdb_cursor_open(txn, s->snaps, &c);
		if (rc)
			break;
		rc = mdb_cursor_get(c, &first, &fv, MDB_FIRST);
		if (!rc && first.mv_size == 8)
			memcpy(fb, first.mv_data, 8);
		mdb_cursor_close(c);
		if (rc)
			break;
		first = (MDB_val){ .mv_size = sizeof(fb), .mv_data = fb };
		rc = unlist(s, txn, &first, id);
	}
	return rc;
}

/* ---- writing --------------------------------------------------------------- */

int dml_store_checkpoint_begin(struct dml_store *s, const struct dml_ckpt_info *info,
			       char *err, size_t errlen)
{
	struct dml_store *c = s ? s->ck : NULL;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int rc;

	store_err_clear(err, errlen);
	if (!c || c->ckpt_txn || !info || (info->clock && !info->keep))
		return DML_EINVAL;
	rc = mdb_txn_begin(c->env, NULL, 0, &c->ckpt_txn);
	if (!rc)
		rc = mdb_cursor_open(c->ckpt_txn, c->ckpt, &cur);
	if (!rc) {
		/* One past the highest id there: appends go at the end. */
		rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
		c->ckpt_id = !rc && k.mv_size == 16 ? store_get_be64(k.mv_data) + 1 : 1;
		rc = rc == MDB_NOTFOUND ? 0 : rc;
		mdb_cursor_close(cur);
	}
	if (rc) {
		if (c->ckpt_txn)
			mdb_txn_abort(c->ckpt_txn);
		c->ckpt_txn = NULL;
		return store_commit_fail(c, rc, err, errlen);
	}
	c->info = *info;
	/* Listed at clock: it holds the pushes of every clock before. */
	if (c->info.next_clock < c->info.clock)
		c->info.next_clock = c->info.clock;
	c->ckpt_chunks = 0;
	c->ckpt_bytes = 0;
	return 0;
}

int dml_store_base_map(struct dml_store *s, void **out, size_t *len)
{
	int rc;

	if (!s || !out || !len)
		return DML_EINVAL;
	/* A checkpoint's rows are of its map; the log's records after it too. */
	rc = store_meta_u64(s->ck, id_key) ? store_meta_get_bytes(s->ck, map_key, out, len)
					   : store_meta_get_bytes(s, store_log_map_key, out, len);
	return rc == 0 || rc == DML_ENOMEM ? rc : DML_EIO;
}

uint64_t dml_store_checkpoint_version(struct dml_store *s)
{
	return s ? store_meta_u64(s->ck, version_key) : 0;
}

uint64_t dml_store_checkpoint_next_clock(struct dml_store *s)
{
	return s ? store_meta_u64(s->ck, next_clock_key) : 0;
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
	struct dml_store *c = s ? s->ck : NULL;
	size_t bytes = r ? chunk_bytes(r->dense, r->n, r->row_floats) : 0;
	uint8_t kb[16], *p;
	MDB_val k = { .mv_size = sizeof(kb), .mv_data = kb }, v = { .mv_size = bytes + STORE_SUM };
	int rc;

	store_err_clear(err, errlen);
	if (!c || !c->ckpt_txn || !bytes || (!r->dense && r->n && !r->keys))
		return DML_EINVAL;
	store_put_be64(kb, c->ckpt_id);
	store_put_be64(kb + 8, ++c->ckpt_chunks);
	rc = mdb_put(c->ckpt_txn, c->ckpt, &k, &v, MDB_APPEND | MDB_RESERVE);
	if (rc) {
		dml_store_checkpoint_end(s, 0, NULL, 0);
		return store_commit_fail(c, rc, err, errlen);
	}
	c->ckpt_bytes += bytes;
	p = v.mv_data;
	dml_store_le32(p + CK_TABLE, r->table);
	p[CK_DENSE] = r->dense ? 1 : 0;
	store_put_le64(p + CK_BEGIN, r->dense ? r->begin : 0);
	store_put_le64(p + CK_N, r->n);
	dml_store_le32(p + CK_ROWF, r->row_floats);
	memset(p + CK_PAD, 0, CK_HDR - CK_PAD);
	p += CK_HDR;
	if (!r->dense) {
		memcpy(p, r->keys, r->n * 8);
		p += r->n * 8;
	}
	memcpy(p, r->rows, r->n * r->row_floats * sizeof(float));
	store_sum_seal(&k, v.mv_data, bytes);
	return 0;
}

uint64_t dml_store_checkpoint_bytes(const struct dml_store *s)
{
	return s && s->ck->ckpt_txn ? s->ck->ckpt_bytes : 0;
}

int dml_store_checkpoint_end(struct dml_store *s, int commit, char *err, size_t errlen)
{
	struct dml_store *c = s ? s->ck : NULL;
	MDB_txn *txn;
	uint64_t prev;
	int rc;

	store_err_clear(err, errlen);
	if (!c || !c->ckpt_txn)
		return DML_EINVAL;
	txn = c->ckpt_txn;
	c->ckpt_txn = NULL;
	if (!commit) {
		mdb_txn_abort(txn);
		return 0;
	}
	rc = store_meta_get_u64(c, txn, id_key, &prev);
	if (!rc)
		rc = store_meta_put_u64(c, txn, id_key, c->ckpt_id);
	if (!rc)
		rc = store_meta_put_u64(c, txn, version_key, c->info.version);
	if (!rc)
		rc = store_meta_put_u64(c, txn, next_clock_key, c->info.next_clock);
	if (!rc)
		rc = store_meta_put_u64(c, txn, lsn_key, c->info.lsn);
	if (!rc)
		rc = store_meta_put_bytes(c, txn, map_key, c->info.map, c->info.map_len);
	if (!rc && c->info.clock)
		rc = list(c, txn, c->ckpt_id);
	if (!rc)
		rc = release(c, txn, prev, c->ckpt_id);
	if (rc) {
		mdb_txn_abort(txn);
		return store_commit_fail(c, rc, err, errlen);
	}
	rc = mdb_txn_commit(txn);
	if (rc)
		return store_commit_fail(c, rc, err, errlen);
	/* The manifest names it before the log goes: a ckpt/ put back from
	 * before it is refused rather than read with records missing. */
	rc = store_manifest_write(s, &(struct store_manifest){ .id = s->mf.id, .run = s->mf.run,
				  .ckpt = c->ckpt_id, .ckpt_lsn = c->info.lsn,
				  .last = s->mf.last > c->info.lsn ? s->mf.last : c->info.lsn },
				  err, errlen);
	/* The rows hold these records now; a replay skips any left behind. */
	return rc ? rc : log_truncate(s, c->info.lsn, err, errlen);
}

/* ---- the checkpoints listed ------------------------------------------------- */

int dml_store_snapshot_drop(struct dml_store *s, uint64_t clock, char *err, size_t errlen)
{
	struct dml_store *c = s ? s->ck : NULL;
	uint8_t kb[8];
	MDB_val k = { .mv_size = sizeof(kb), .mv_data = kb };
	uint64_t newest;
	MDB_txn *txn;
	int rc;

	store_err_clear(err, errlen);
	if (!c || c->ckpt_txn)
		return DML_EINVAL;
	store_put_be64(kb, clock);
	rc = mdb_txn_begin(c->env, NULL, 0, &txn);
	if (rc)
		return store_commit_fail(c, rc, err, errlen);
	rc = store_meta_get_u64(c, txn, id_key, &newest);
	if (!rc)
		rc = unlist(c, txn, &k, newest);
	if (rc == MDB_NOTFOUND) {
		mdb_txn_abort(txn);
		return dml_fail(DML_ENOTFOUND, err, errlen, "%s: no checkpoint at clock %" PRIu64,
				c->path, clock);
	}
	if (!rc)
		rc = mdb_txn_commit(txn);
	else
		mdb_txn_abort(txn);
	return rc ? store_commit_fail(c, rc, err, errlen) : 0;
}

struct list_ctx {
	struct dml_store_snap *snaps;
	size_t n, cap;
};

static int list_one(struct dml_store *s, const MDB_val *k, const MDB_val *v, void *ctx,
		    char *err, size_t errlen)
{
	struct list_ctx *lc = ctx;
	struct dml_store_snap *sn;
	const uint8_t *p = v->mv_data;

	if (k->mv_size != 8 || v->mv_size != SN_SIZE)
		return dml_fail(DML_ECONF, err, errlen, "%s: checkpoint list: an entry of %zu "
				"bytes, not %d", s->path, v->mv_size, SN_SIZE);
	if (lc->n == lc->cap) {
		lc->cap = lc->cap ? 2 * lc->cap : 8;
		lc->snaps = dml_xrealloc(lc->snaps, lc->cap * sizeof(*lc->snaps));
	}
	sn = &lc->snaps[lc->n++];
	sn->clock = store_get_be64(k->mv_data);
	sn->id = dml_load_le64(p + SN_ID);
	sn->bytes = dml_load_le64(p + SN_BYTES);
	sn->version = dml_load_le64(p + SN_VERSION);
	sn->unix_ms = dml_load_le64(p + SN_MS);
	return 0;
}

int dml_store_snapshots(struct dml_store *s, struct dml_store_snap **out, size_t *n,
			char *err, size_t errlen)
{
	struct list_ctx lc = { 0 };
	int rc;

	store_err_clear(err, errlen);
	*out = NULL;
	*n = 0;
	if (!s)
		return DML_EINVAL;
	rc = store_walk(s->ck, s->ck->snaps, "checkpoint list", list_one, &lc, err, errlen);
	if (rc) {
		free(lc.snaps);
		return rc;
	}
	*out = lc.snaps;
	*n = lc.n;
	return 0;
}

/* ---- reading ------------------------------------------------------------- */

struct each_ctx {
	uint64_t id;
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
	uint64_t no;

	if (k->mv_size != 16)
		return bad_chunk(s, 0, "key is not 16 bytes", err, errlen);
	if (store_get_be64(k->mv_data) != ec->id)
		return STORE_WALK_END;
	no = store_get_be64((const uint8_t *)k->mv_data + 8);
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
	/* v's keys and rows are aligned (store_walk_aligned). */
	r.keys = r.dense ? NULL : (const uint64_t *)(p + CK_HDR);
	r.rows = (const float *)(p + CK_HDR + (r.dense ? 0 : r.n * 8));
	return ec->fn(&r, ec->arg);
}

/* The chunks of checkpoint id, in order. */
static int each_of(struct dml_store *s, uint64_t id,
		   int (*fn)(const struct dml_ckpt_rows *r, void *arg), void *arg, char *err,
		   size_t errlen)
{
	struct each_ctx ctx = { id, fn, arg };
	uint8_t kb[16] = { 0 };
	MDB_val from = { .mv_size = sizeof(kb), .mv_data = kb };

	if (!id)
		return 0;
	store_put_be64(kb, id);
	return store_walk_aligned(s->ck, s->ck->ckpt, &from, CK_HDR, "checkpoint", each_one, &ctx,
			       err, errlen);
}

int dml_store_checkpoint_each(struct dml_store *s,
			      int (*fn)(const struct dml_ckpt_rows *r, void *arg), void *arg,
			      char *err, size_t errlen)
{
	store_err_clear(err, errlen);
	if (!s || !fn)
		return DML_EINVAL;
	return each_of(s, store_meta_u64(s->ck, id_key), fn, arg, err, errlen);
}

int dml_store_snapshot_each(struct dml_store *s, uint64_t clock,
			    int (*fn)(const struct dml_ckpt_rows *r, void *arg), void *arg,
			    char *err, size_t errlen)
{
	struct dml_store_snap *snaps;
	size_t n;
	uint64_t id = 0;
	int rc;

	store_err_clear(err, errlen);
	if (!s || !fn)
		return DML_EINVAL;
	rc = dml_store_snapshots(s, &snaps, &n, err, errlen);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++)
		if (snaps[i].clock == clock)
			id = snaps[i].id;
	free(snaps);
	if (!id)
		return dml_fail(DML_ENOTFOUND, err, errlen, "%s: no checkpoint at clock %" PRIu64,
				s->path, clock);
	return each_of(s, id, fn, arg, err, errlen);
}
