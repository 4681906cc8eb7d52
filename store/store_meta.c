/*
 * store_meta.c - the "meta" database of a store (store_internal.h): small
 * values under names, each with its checksum like every value.
 */
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "store/store_internal.h"
#include "proto/util.h"

int store_meta_get_u64(struct dml_store *s, MDB_txn *txn, const char *key, uint64_t *out)
{
	MDB_val k = { .mv_size = strlen(key), .mv_data = (void *)key }, v;
	int rc = store_sum_get(txn, s->meta, &k, &v);

	*out = 0;
	if (rc == MDB_NOTFOUND)
		return 0;
	if (!rc && v.mv_size == 8)
		*out = dml_load_le64(v.mv_data);
	return rc;
}

int store_meta_put_u64(struct dml_store *s, MDB_txn *txn, const char *key, uint64_t value)
{
	MDB_val k = { .mv_size = strlen(key), .mv_data = (void *)key };
	uint8_t b[8];

	store_put_le64(b, value);
	return store_sum_put(txn, s->meta, &k, b, sizeof(b), 0);
}

uint64_t store_meta_u64(struct dml_store *s, const char *key)
{
	uint64_t value = 0;
	MDB_txn *txn;

	if (!s || mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0)
		return 0;
	if (store_meta_get_u64(s, txn, key, &value) != 0)
		value = 0;
	mdb_txn_abort(txn);
	return value;
}

int store_meta_put_bytes(struct dml_store *s, MDB_txn *txn, const char *key,
			 const void *bytes, size_t len)
{
	MDB_val k = { .mv_size = strlen(key), .mv_data = (void *)key };
	int rc;

	if (bytes)
		return store_sum_put(txn, s->meta, &k, bytes, len, 0);
	rc = mdb_del(txn, s->meta, &k, NULL);
	return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_meta_get_bytes(struct dml_store *s, const char *key, void **out, size_t *len)
{
	MDB_val k = { .mv_size = strlen(key), .mv_data = (void *)key }, v;
	MDB_txn *txn;
	int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);

	*out = NULL;
	*len = 0;
	if (rc)
		return rc;
	rc = store_sum_get(txn, s->meta, &k, &v);
	if (rc == 0 && v.mv_size) {
		*out = malloc(v.mv_size);
		if (*out) {
			memcpy(*out, v.mv_data, v.mv_size);
			*len = v.mv_size;
		} else {
			rc = DML_ENOMEM;
		}
	}
	mdb_txn_abort(txn);
	return rc == MDB_NOTFOUND ? 0 : rc;
}
