/*
 * store_sum.c - the checksum every value a store writes carries: CRC32C
 * (Castagnoli) of the key and the value, 4 bytes little-endian after the
 * value. SSE4.2's crc32 instruction where the CPU has it, a table where
 * not; both give the same sums. The instruction takes three cycles and
 * starts one a cycle, so a long input is summed as three streams side by
 * side, their sums joined by tables that shift a sum over a stream's
 * length of zeros. Where the CPU has VPCLMULQDQ (carry-less multiplies on
 * 512-bit registers), whole 64-byte blocks are folded four registers at a
 * time instead, several times faster, and the 128 bits left summed with
 * the crc32 instruction. A value that is copied out (a checkpoint's chunk)
 * is summed and copied a block at a time, so that memory is read once.
 *
 * Must never: hand a value on whose sum does not match, or count the sum
 * in the value's size.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "store/store_internal.h"
#include "proto/util.h"

/* The lengths of the three streams: long ones for long inputs, short
 * ones for what is left (a log record of a few KiB). */
#define SUM_LONG 8192
#define SUM_SHORT 256
/* What store_crc32c_copy sums before it copies it: three long streams. */
#define SUM_COPY_BLOCK (3 * SUM_LONG)

static uint32_t table[256];
/* shift_long[k][b]: byte k of a sum being b, that byte's part of the sum
 * after SUM_LONG zero bytes more; shift_short: after SUM_SHORT. */
static uint32_t shift_long[4][256], shift_short[4][256];
/* The fastest way this CPU has (STORE_SUM_*), and the one used (tests may
 * lower it). */
static int have, use;
/* fold_k[i]: the constants that carry 128 bits fold_bits[i] bits further,
 * x^(d - 32) and x^(d + 32) mod P (d = fold_bits[i]), bit-reflected and
 * shifted left once, as carry-less multiplies of reflected values need. */
enum { FOLD_128, FOLD_256, FOLD_384, FOLD_512, FOLD_1024, FOLD_1536, FOLD_2048, FOLD_N };
static const unsigned fold_bits[FOLD_N] = { 128, 256, 384, 512, 1024, 1536, 2048 };
static uint64_t fold_k[FOLD_N][2];
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* The sum register c through the linear map whose columns (the images of
 * its 32 bits) are m. */
static uint32_t times(const uint32_t m[32], uint32_t c)
{
	uint32_t r = 0;

	for (int i = 0; c; i++, c >>= 1)
		if (c & 1)
			r ^= m[i];
	return r;
}

/* The tables of the shift of a sum register over n (a power of two) zero
 * bytes: the map of one zero byte squared until it covers n; each entry
 * the image of its byte's bits. */
static void shift_init(uint32_t t[4][256], size_t n)
{
	uint32_t m[32], sq[32];

	for (int i = 0; i < 32; i++)
		m[i] = table[(1u << i) & 0xff] ^ (1u << i) >> 8;
	for (; n > 1; n >>= 1) {
		for (int i = 0; i < 32; i++)
			sq[i] = times(m, m[i]);
		memcpy(m, sq, sizeof(m));
	}
	for (int k = 0; k < 4; k++)
		for (uint32_t b = 0; b < 256; b++)
			t[k][b] = times(m, b << 8 * k);
}

static uint32_t shift(const uint32_t t[4][256], uint32_t c)
{
	return t[0][c & 0xff] ^ t[1][c >> 8 & 0xff] ^ t[2][c >> 16 & 0xff] ^ t[3][c >> 24];
}

/* x^n mod P, bit-reflected and shifted left once (33 bits). */
static uint64_t fold_const(unsigned n)
{
	uint64_t r = 1;
	uint32_t ref = 0;

	for (unsigned i = 0; i < n; i++) {
		r <<= 1;
		if (r >> 32)
			r ^= 0x11edc6f41ull;
	}
	for (int i = 0; i < 32; i++)
		if (r >> i & 1)
			ref |= 1u << (31 - i);
	return (uint64_t)ref << 1;
}

static void init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int j = 0; j < 8; j++)
			c = c & 1 ? c >> 1 ^ 0x82f63b78u : c >> 1;
		table[i] = c;
	}
	shift_init(shift_long, SUM_LONG);
	shift_init(shift_short, SUM_SHORT);
	for (int i = 0; i < FOLD_N; i++) {
		fold_k[i][0] = fold_const(fold_bits[i] - 32);
		fold_k[i][1] = fold_const(fold_bits[i] + 32);
	}
	have = STORE_SUM_TABLE;
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		have = STORE_SUM_CRC32;
	if (have && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq"))
		have = STORE_SUM_FOLD;
#endif
	use = have;
}

int store_sum_impl(int impl)
{
	int was;

	pthread_once(&once, init);
	was = use;
	use = impl < have ? impl : have;
	return was;
}

#if defined(__x86_64__)
static inline uint64_t load64(const uint8_t *p)
{
	uint64_t w;

	memcpy(&w, p, 8);
	return w;
}

/* Sum 3 * len bytes at *p as three streams of len (a multiple of 8) and
 * join them: c after them; *p moved past. */
__attribute__((target("sse4.2")))
static inline uint64_t crc_hw3(uint64_t c, const uint8_t **p, size_t len,
			       const uint32_t t[4][256])
{
	const uint8_t *a = *p, *end = a + len;
	uint64_t c1 = 0, c2 = 0;

	for (; a < end; a += 8) {
		c = __builtin_ia32_crc32di(c, load64(a));
		c1 = __builtin_ia32_crc32di(c1, load64(a + len));
		c2 = __builtin_ia32_crc32di(c2, load64(a + 2 * len));
	}
	c = shift(t, (uint32_t)c) ^ c1;
	c = shift(t, (uint32_t)c) ^ c2;
	*p = a + 2 * len;
	return c;
}

#define FOLD_TARGET "sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq"

__attribute__((target(FOLD_TARGET)))
static inline __m128i fold_key(int i)
{
	return _mm_set_epi64x((long long)fold_k[i][1], (long long)fold_k[i][0]);
}

/* Each 128-bit lane of a carried k's distance further (k: fold_key's, in every lane). */
__attribute__((target(FOLD_TARGET)))
static inline __m512i fold(__m512i a, __m512i k)
{
	return _mm512_xor_si512(_mm512_clmulepi64_epi128(a, k, 0x01),
				_mm512_clmulepi64_epi128(a, k, 0x10));
}

__attribute__((target(FOLD_TARGET)))
static inline __m128i fold128(__m128i a, int i)
{
	__m128i k = fold_key(i);

	return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x01), _mm_clmulepi64_si128(a, k, 0x10));
}

/*
 * The sum register c after n bytes at p (n a multiple of 64, at least
 * 256): the register XORed into the first bytes, four 512-bit registers
 * folded 256 bytes at a time, then into one and one 128-bit lane, whose
 * 16 bytes the crc32 instruction sums from 0.
 */
__attribute__((target(FOLD_TARGET)))
static uint32_t crc_fold(uint32_t c, const uint8_t *p, size_t n)
{
	__m512i k4 = _mm512_broadcast_i32x4(fold_key(FOLD_2048));
	__m512i k1 = _mm512_broadcast_i32x4(fold_key(FOLD_512));
	__m512i a0 = _mm512_loadu_si512(p), a1 = _mm512_loadu_si512(p + 64);
	__m512i a2 = _mm512_loadu_si512(p + 128), a3 = _mm512_loadu_si512(p + 192);
	__m512i a;
	__m128i x;
	uint64_t c64;

	a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)c)));
	for (p += 256, n -= 256; n >= 256; p += 256, n -= 256) {
		a0 = _mm512_xor_si512(fold(a0, k4), _mm512_loadu_si512(p));
		a1 = _mm512_xor_si512(fold(a1, k4), _mm512_loadu_si512(p + 64));
		a2 = _mm512_xor_si512(fold(a2, k4), _mm512_loadu_si512(p + 128));
		a3 = _mm512_xor_si512(fold(a3, k4), _mm512_loadu_si512(p + 192));
	}
	a = _mm512_xor_si512(
		_mm512_xor_si512(fold(a0, _mm512_broadcast_i32x4(fold_key(FOLD_1536))),
				 fold(a1, _mm512_broadcast_i32x4(fold_key(FOLD_1024)))),
		_mm512_xor_si512(fold(a2, k1), a3));
	for (; n; p += 64, n -= 64)
		a = _mm512_xor_si512(fold(a, k1), _mm512_loadu_si512(p));
	x = _mm_xor_si128(_mm_xor_si128(fold128(_mm512_extracti32x4_epi32(a, 0), FOLD_384),
					fold128(_mm512_extracti32x4_epi32(a, 1), FOLD_256)),
			  _mm_xor_si128(fold128(_mm512_extracti32x4_epi32(a, 2), FOLD_128),
					_mm512_extracti32x4_epi32(a, 3)));
	c64 = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(x));
	return (uint32_t)_mm_crc32_u64(c64, (uint64_t)_mm_extract_epi64(x, 1));
}

__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;

	if (use == STORE_SUM_FOLD && n >= 256) {
		size_t whole = n & ~(size_t)63;

		c64 = crc_fold(c, p, whole);
		p += whole;
		n -= whole;
	}

	for (; n && ((uintptr_t)p & 7); n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	for (; n >= 3 * SUM_LONG; n -= 3 * SUM_LONG)
		c64 = crc_hw3(c64, &p, SUM_LONG, shift_long);
	for (; n >= 3 * SUM_SHORT; n -= 3 * SUM_SHORT)
		c64 = crc_hw3(c64, &p, SUM_SHORT, shift_short);
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
	if (use >= STORE_SUM_CRC32)
		return ~crc_hw(c, p, n);
#endif
	while (n--)
		c = table[(c ^ *p++) & 0xff] ^ c >> 8;
	return ~c;
}

uint32_t store_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t n)
{
	const uint8_t *p = src;
	uint8_t *d = dst;

	/* A block summed is still in the first-level cache when it is copied:
	 * the value is read from memory once. */
	for (size_t b; n; n -= b, p += b, d += b) {
		b = n < SUM_COPY_BLOCK ? n : SUM_COPY_BLOCK;
		crc = store_crc32c(crc, p, b);
		memcpy(d, p, b);
	}
	return crc;
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

int store_sum_copy(const MDB_val *k, MDB_val *v, void *dst)
{
	const uint8_t *p = v->mv_data;
	size_t len;

	if (v->mv_size < STORE_SUM)
		return -1;
	len = v->mv_size - STORE_SUM;
	if (dml_load_le32(p + len) !=
	    store_crc32c_copy(store_crc32c(0, k->mv_data, k->mv_size), dst, p, len))
		return -1;
	v->mv_data = dst;
	v->mv_size = len;
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
