/*
 * store_sum.c - the checksum every value a store writes carries: CRC32C
 * (Castagnoli) of the key and the value, 4 bytes little-endian after the
 * value. SSE4.2's crc32 instruction where the CPU has it, a table where
 * not; both give the same sums.
 *
 * Must never: hand a value on whose sum does not match, or count the sum
 * in the value's size.
 */
#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "store/store_internal.h"
#include "proto/util.h"

static uint32_t table[256];
static int have_hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int j = 0; j < 8; j++)
			c = c & 1 ? c >> 1 ^ 0x82f63b78u : c >> 1;
		table[i] = c;
	}
#if defined(__x86_64__)
	__builtin_cpu_init();
	have_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
	have_hw = 0;
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;

	for (; n && ((uintptr_t)p & 7); n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
	}
	for (; n; n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	return (uint32_t)c64;
}
#endif

uint32_t store_crc32c(uint32_t crc, const void *data, size_t n)
{
	const uint8_t *p = data;
	uint32_t c = ~crc;

	pthread_once(&once, init);
#if defined(__x86_64__)
	if (have_hw)
		return ~crc_hw(c, p, n);
#endif
	while (n--)
		c = table[(c ^ *p++) & 0xff] ^ c >> 8;
	return ~c;
}

static uint32_t sum_of(const MDB_val *k, const void *v, size_t len)
{
	return store_crc32c(store_crc32c(0, k->mv_data, k->mv_size), v, len);
}

int store_sum_put(MDB_txn *txn, MDB_dbi dbi, const MDB_val *k, const void *data, size_t len,
		  unsigned flags)
{
	MDB_val key = *k, v = { .mv_size = len + STORE_SUM };
	uint8_t *p;
	int rc = mdb_put(txn, dbi, &key, &v, flags | MDB_RESERVE);

	if (rc)
		return rc;
	p = v.mv_data;
	if (len)
		memcpy(p, data, len);
	dml_store_le32(p + len, sum_of(k, p, len));
	return 0;
}

void store_sum_seal(const MDB_val *k, void *data, size_t len)
{
	dml_store_le32((uint8_t *)data + len, sum_of(k, data, len));
}

int store_sum_check(const MDB_val *k, MDB_val *v)
{
	const uint8_t *p = v->mv_data;

	if (v->mv_size < STORE_SUM)
		return -1;
	if (dml_load_le32(p + v->mv_size - STORE_SUM) != sum_of(k, p, v->mv_size - STORE_SUM))
		return -1;
	v->mv_size -= STORE_SUM;
	return 0;
}

int store_sum_get(MDB_txn *txn, MDB_dbi dbi, const MDB_val *k, MDB_val *v)
{
	MDB_val key = *k;
	int rc = mdb_get(txn, dbi, &key, v);

	if (rc)
		return rc;
	return store_sum_check(k, v) ? MDB_CORRUPTED : 0;
}
