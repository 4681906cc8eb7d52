/*
 * What the files of check_store share: the store's directory, opening and
 * committing that must work, the records the tests write and read back,
 * raw LMDB access to write what the store never would, and each file's
 * tests.
 */
#ifndef DML_CHECK_STORE_H
#define DML_CHECK_STORE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define MAP (1u << 20)

/* The test's temporary folder: the store's directory. */
const char *dir(void);
struct dml_store *open_ok(uint32_t node, uint64_t map_size);
void commit_ok(struct dml_store *s);

/* Sparse records' keys, and the values every record carries (values_init). */
extern const uint64_t sparse_keys[4];
extern float values[64];
void values_init(void);
/* A record that is dense for even n, sparse for odd n, its fields from n. */
struct dml_log_rec rec_n(uint32_t n);
void same_rec(const struct dml_log_rec *a, const struct dml_log_rec *b);
void append_n(struct dml_store *s, uint32_t n);
/* Replay expects records first, first + 1, ... and counts them. */
struct expect {
	uint32_t first, seen, stop_at;
};

/* dml_store_replay's fn for a struct expect: 7 once stop_at were seen. */
int expect_fn(const struct dml_log_rec *r, void *arg);
/* Replay expects records first, first + 1, ... and count of them. */
void replay_expect(struct dml_store *s, uint32_t first, uint32_t count);

/* Raw LMDB: db in the log's environment; "ckpt/NAME" in the checkpoints'. */
void raw_put(const char *db, const void *key, size_t klen, const void *val, size_t vlen);
size_t raw_get(const char *db, const void *key, size_t klen, void *buf, size_t cap);
void lsn_key(uint8_t k[8], uint64_t lsn);
size_t raw_count(const char *db);

/* The tests of check_store_log.c and check_store_ckpt.c, added to tc. */
void check_store_log_tests(TCase *tc);
void check_store_ckpt_tests(TCase *tc);

#endif
