/*
 * store_dedupe.c - the push-dedupe state of a server's store: for each
 * (worker, incarnation) the highest push sequence the log holds, so that a
 * restarted server drops a resend it logged before (see store.h).
 *
 * "dedupe" maps 12 bytes, the worker id (u32) and the incarnation (u64),
 * both big-endian so that one worker's entries lie together, to the seq
 * (u64) and the log number of the record that last raised it (u64), both
 * little-endian, and the value's checksum (store_sum.c). Incarnations are
 * random numbers: their order says nothing of which process came last, so
 * every incarnation keeps its own entry and the oldest written ones go,
 * STORE_DEDUPE_KEEP kept per worker.
 *
 * Must never: let one incarnation's entry stand for another's.
 */
#include <inttypes.h>
#include <lmdb.h>
#include <string.h>

#include "proto/dml_error.h"
#include "store/store.h"
#include "store/store_internal.h"
#include "proto/util.h"

#define KEY_LEN 12
#define WORKER_LEN 4
#define VAL_LEN 16

/* The log number an entry was written under (0 for one too short to say:
 * the first to go; the walk at open refuses such a store anyway). */
static uint64_t entry_stamp(const MDB_val *v)
{
	return v->mv_size >= VAL_LEN ? dml_load_le64((const uint8_t *)v->mv_data + 8) : 0;
}

/*
 * Make room for one more entry of worker: with STORE_DEDUPE_KEEP already,
 * delete the one written longest ago.
 */
static int make_room(struct dml_store *s, MDB_txn *txn, uint32_t worker, char *err,
		     size_t errlen)
{
	uint8_t prefix[WORKER_LEN], oldest[KEY_LEN];
	MDB_val k = { .mv_size = sizeof(prefix), .mv_data = prefix }, v;
	MDB_cursor *cur;
	uint64_t oldest_stamp = UINT64_MAX;
	size_t oldest_len = 0, n = 0;
	int rc;

	store_put_be32(prefix, worker);
	if ((rc = mdb_cursor_open(txn, s->dedupe, &cur)) != 0)
		return store_commit_fail(s, rc, err, errlen);
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size < WORKER_LEN || memcmp(k.mv_data, prefix, sizeof(prefix)))
			break;
		n++;
		if (entry_stamp(&v) < oldest_stamp && k.mv_size <= sizeof(oldest)) {
			oldest_stamp = entry_stamp(&v);
			oldest_len = k.mv_size;
			memcpy(oldest, k.mv_data, k.mv_size);
		}
	}
	mdb_cursor_close(cur);
	if (rc && rc != MDB_NOTFOUND)
		return store_commit_fail(s, rc, err, errlen);
	if (n < STORE_DEDUPE_KEEP || !oldest_len)
		return 0;
	k.mv_size = oldest_len;
	k.mv_data = oldest;
	rc = mdb_del(txn, s->dedupe, &k, NULL);
	return rc ? store_commit_fail(s, rc, err, errlen) : 0;
}

int store_dedupe_update(struct dml_store *s, MDB_txn *txn, uint32_t worker,
			uint64_t incarnation, uint64_t seq, uint64_t lsn, char *err,
			size_t errlen)
{
	uint8_t kb[KEY_LEN], vb[VAL_LEN];
	MDB_val k = { .mv_size = sizeof(kb), .mv_data = kb }, v;
	int rc;

	store_put_be32(kb, worker);
	store_put_be64(kb + 4, incarnation);
	rc = store_sum_get(txn, s->dedupe, &k, &v);
	if (rc == MDB_CORRUPTED)
		return store_bad_sum(s, "dedupe", &k, err, errlen);
	if (rc && rc != MDB_NOTFOUND)
		return store_commit_fail(s, rc, err, errlen);
	if (!rc && v.mv_size != VAL_LEN)
		return dml_fail(DML_EIO, err, errlen, "%s: commit: dedupe entry for worker %" PRIu32
				": %zu bytes, want %d", s->path, worker, v.mv_size, VAL_LEN);
	if (!rc && seq <= dml_load_le64(v.mv_data))
		return 0;
	if (rc == MDB_NOTFOUND && (rc = make_room(s, txn, worker, err, errlen)) != 0)
		return rc;
	store_put_le64(vb, seq);
	store_put_le64(vb + 8, lsn);
	rc = store_sum_put(txn, s->dedupe, &k, vb, sizeof(vb), 0);
	return rc ? store_commit_fail(s, rc, err, errlen) : 0;
}

struct dedupe_ctx {
	int (*fn)(uint32_t worker, uint64_t incarnation, uint64_t seq, void *arg);
	void *arg;
};

static int dedupe_one(struct dml_store *s, const MDB_val *k, const MDB_val *v, void *ctx,
		      char *err, size_t errlen)
{
	const uint8_t *kp = k->mv_data, *vp = v->mv_data;
	struct dedupe_ctx *dc = ctx;
	uint32_t worker;

	if (k->mv_size != KEY_LEN)
		return dml_fail(DML_ECONF, err, errlen, "%s: dedupe key of %zu bytes, want %d",
				s->path, k->mv_size, KEY_LEN);
	worker = store_get_be32(kp);
	if (v->mv_size != VAL_LEN)
		return dml_fail(DML_ECONF, err, errlen, "%s: dedupe entry for worker %" PRIu32
				": %zu bytes, want %d", s->path, worker, v->mv_size, VAL_LEN);
	return dc->fn(worker, store_get_be64(kp + 4), dml_load_le64(vp), dc->arg);
}

int dml_store_dedupe_each(struct dml_store *s,
			  int (*fn)(uint32_t worker, uint64_t incarnation, uint64_t seq,
				    void *arg),
			  void *arg, char *err, size_t errlen)
{
	struct dedupe_ctx ctx = { fn, arg };

	store_err_clear(err, errlen);
	if (!s || !fn)
		return DML_EINVAL;
	return store_walk(s, s->dedupe, "dedupe", dedupe_one, &ctx, err, errlen);
}
