/*
 * store_util.c - what every file of store/ uses: byte order, LMDB's errors
 * as dml codes and messages, the scratch copy values are handed out from,
 * and walks over a database with each value's sum checked.
 *
 * Must never: call a damaged file an I/O error (it is refused as what it
 * is, naming the file), or hand a walk's callback a value whose sum does
 * not match.
 */
#include <errno.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/statvfs.h>

#include "proto/dml_error.h"
#include "store/store_internal.h"
#include "proto/util.h"

/* Free space under which a failed write is put down to a full disk. */
#define STORE_LOW_SPACE (16u << 20)

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

/* ---- the scratch copy ------------------------------------------------------ */

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

/* ---- walks ----------------------------------------------------------------- */

/*
 * The walks: each value's sum checked in the map, or (align) with its byte
 * hdr 8-byte aligned: checked in place where the map has it so, else
 * checked as it is copied to s->scratch, placed so.
 */
static int walk(struct dml_store *s, MDB_dbi dbi, const MDB_val *from, int align, size_t hdr,
		const char *what, store_walk_fn one, void *ctx, char *err, size_t errlen)
{
	MDB_txn *txn;
	MDB_cursor *c;
	MDB_val k = { 0 }, v;
	MDB_cursor_op op = MDB_FIRST;
	size_t pad = (8 - hdr % 8) % 8;
	int copy, rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);

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
		copy = align && ((uintptr_t)v.mv_data + hdr) % 8 != 0;
		if (copy && store_scratch_reserve(s, pad + v.mv_size) != 0) {
			rc = dml_fail(DML_ENOMEM, err, errlen, "%s: %s: out of memory", s->path,
				      what);
			break;
		}
		if (copy ? store_sum_copy(&k, &v, (uint8_t *)s->scratch + pad)
			 : store_sum_check(&k, &v)) {
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

int store_walk_from(struct dml_store *s, MDB_dbi dbi, const MDB_val *from, const char *what,
		    store_walk_fn one, void *ctx, char *err, size_t errlen)
{
	return walk(s, dbi, from, 0, 0, what, one, ctx, err, errlen);
}

int store_walk_aligned(struct dml_store *s, MDB_dbi dbi, const MDB_val *from, size_t hdr,
		    const char *what, store_walk_fn one, void *ctx, char *err, size_t errlen)
{
	return walk(s, dbi, from, 1, hdr, what, one, ctx, err, errlen);
}

int store_walk(struct dml_store *s, MDB_dbi dbi, const char *what, store_walk_fn one,
	       void *ctx, char *err, size_t errlen)
{
	return store_walk_from(s, dbi, NULL, what, one, ctx, err, errlen);
}
