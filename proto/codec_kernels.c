/*
 * The per-value loops of the fp16, bf16 and int8 codecs (codec.h). They run
 * over every value a compressed link carries, so each is a plain loop gcc
 * vectorises (built again for AVX2, DML_VECTOR_CLONES), and fp16 uses the
 * CPU's conversion instructions (F16C) where it has them. The scalar and the
 * vector forms give the same bits: both round to nearest even and saturate
 * the same way, and no multiply and add is fused.
 *
 * Nothing here checks lengths: codec.c did, before calling.
 */
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/codec_internal.h"
#include "proto/finite.h"
#include "proto/util.h"
#include "proto/vector_clones.h"

#if defined(__x86_64__) && defined(HAVE_TARGET_CLONES)
#include <immintrin.h>
#define CODEC_F16C 1
#endif

/* The largest half, 65504, and the bits of the largest bfloat16. */
#define HALF_MAX 65504.0f
#define BF16_MAX_BITS 0x7f7fu

static inline uint32_t float_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float bits_float(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* v[i] = x[i] + r[i], or x[i] alone without a residual. */
static inline float codec_value(const float *x, const float *r, size_t i)
{
	return r ? x[i] + r[i] : x[i];
}

/* ---- fp16 -------------------------------------------------------------- */

uint16_t dml_float_to_half(float f)
{
	uint32_t x = float_bits(f), sign = (x >> 16) & 0x8000u, h, rem, tie;

	x &= 0x7fffffffu;
	if (x > 0x7f800000u)
		return (uint16_t)(sign | 0x7e00u);          /* NaN stays NaN */
	if (x >= 0x477fe000u)
		return (uint16_t)(sign | 0x7bffu);          /* 65504 and beyond */
	if (x >= 0x38800000u) {                              /* a normal half */
		x -= 0x38000000u;                            /* exponent 127 -> 15 */
		h = x >> 13;
		rem = x & 0x1fffu;
		tie = 0x1000u;
	} else if (x > 0x33000000u) {                        /* a subnormal half */
		unsigned shift = 126u - (x >> 23);           /* 14 .. 24 */
		uint32_t mant = (x & 0x7fffffu) | 0x800000u;

		h = mant >> shift;
		rem = mant & ((1u << shift) - 1u);
		tie = 1u << (shift - 1u);
	} else {
		return (uint16_t)sign;                       /* 2^-25 or less: 0 */
	}
	if (rem > tie || (rem == tie && (h & 1u)))
		h++;                                         /* may carry: right */
	return (uint16_t)(sign | h);
}

float dml_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;

	if (e == 0x1fu)
		return bits_float(sign | 0x7f800000u | (m << 13));
	if (e == 0) {
		float f = (float)m * 0x1p-24f;               /* exact */

		return sign ? -f : f;
	}
	return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

#ifdef CODEC_F16C
static int have_f16c(void)
{
	static int known = -1;

	if (known < 0)
		known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
	return known;
}

/* Eight values at a time; the clamp makes the conversion saturate. */
__attribute__((target("avx2,f16c"))) static size_t
fp16_encode_f16c(const float *x, size_t n, float *r, uint8_t *out)
{
	const __m256 hi = _mm256_set1_ps(HALF_MAX), lo = _mm256_set1_ps(-HALF_MAX);
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		__m256 v = _mm256_loadu_ps(x + i);
		__m128i h;

		if (r)
			v = _mm256_add_ps(v, _mm256_loadu_ps(r + i));
		h = _mm256_cvtps_ph(_mm256_max_ps(_mm256_min_ps(v, hi), lo),
				    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		_mm_storeu_si128((__m128i *)(void *)(out + 2 * i), h);
		if (r)
			_mm256_storeu_ps(r + i, _mm256_sub_ps(v, _mm256_cvtph_ps(h)));
	}
	return i;
}

__attribute__((target("avx2,f16c"))) static size_t
fp16_decode_f16c(const uint8_t *in, size_t n, float *out)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(in + 2 * i))));
	return i;
}
#endif

void codec_fp16_encode(const float *x, size_t n, float *r, uint8_t *out)
{
	size_t i = 0;

#ifdef CODEC_F16C
	if (have_f16c())
		i = fp16_encode_f16c(x, n, r, out);
#endif
	for (; i < n; i++) {
		float v = codec_value(x, r, i);
		uint16_t h = dml_float_to_half(v);

		dml_store_le16(out + 2 * i, h);
		if (r)
			r[i] = v - dml_half_to_float(h);
	}
}

int codec_fp16_decode(const uint8_t *in, size_t n, float *out)
{
	uint16_t bad = 0;
	size_t i = 0;

	/* An all-ones exponent is an infinity or a NaN: refused. */
	for (size_t j = 0; j < n; j++)
		bad |= (uint16_t)((dml_load_le16(in + 2 * j) & 0x7c00u) == 0x7c00u);
	if (bad)
		return -1;
#ifdef CODEC_F16C
	if (have_f16c())
		i = fp16_decode_f16c(in, n, out);
#endif
	for (; i < n; i++)
		out[i] = dml_half_to_float(dml_load_le16(in + 2 * i));
	return 0;
}

/* ---- bf16 -------------------------------------------------------------- */

static inline uint16_t float_to_bf16(float f)
{
	uint32_t x = float_bits(f), mag = x & 0x7fffffffu;

	if (mag > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40u);       /* NaN stays NaN */
	if (mag >= 0x7f7f8000u)                              /* would round to inf */
		return (uint16_t)(((x >> 16) & 0x8000u) | BF16_MAX_BITS);
	return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static inline float bf16_float(uint16_t b)
{
	return bits_float((uint32_t)b << 16);
}

/* Two loops, with a residual and without: a test of r inside one would
 * keep it from vectorising. */
DML_VECTOR_CLONES
void codec_bf16_encode(const float *x, size_t n, float *r, uint8_t *out)
{
	if (!r) {
		for (size_t i = 0; i < n; i++)
			dml_store_le16(out + 2 * i, float_to_bf16(x[i]));
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float v = x[i] + r[i];
		uint16_t b = float_to_bf16(v);

		dml_store_le16(out + 2 * i, b);
		r[i] = v - bf16_float(b);
	}
}

DML_VECTOR_CLONES
int codec_bf16_decode(const uint8_t *in, size_t n, float *out)
{
	uint16_t bad = 0;

	for (size_t i = 0; i < n; i++) {
		uint16_t b = dml_load_le16(in + 2 * i);

		bad |= (uint16_t)((b & 0x7f80u) == 0x7f80u);
		out[i] = bf16_float(b);
	}
	return bad ? -1 : 0;
}

/* ---- int8 -------------------------------------------------------------- */

/*
 * A block whose largest magnitude is under this is sent as zeros (its
 * residual keeps it): 127 / max would overflow a float.
 */
#define INT8_TINY 0x1p-119f

/* The largest magnitude of a block, compared as bits: for floats that are
 * not NaN the order is the same, and an integer maximum vectorises (signed:
 * the magnitudes' bits are below 2^31, and SSE4.1 and AVX2 have a signed
 * maximum). A NaN or an infinity comes out above FLT_MAX. Inlined, so that
 * each clone of the encoder has its own. */
static inline __attribute__((always_inline)) float
block_max_abs(const float *x, const float *r, size_t n)
{
	int32_t m = 0;

	if (r)
		for (size_t i = 0; i < n; i++) {
			int32_t a = (int32_t)(float_bits(x[i] + r[i]) & 0x7fffffffu);

			m = a > m ? a : m;
		}
	else
		for (size_t i = 0; i < n; i++) {
			int32_t a = (int32_t)(float_bits(x[i]) & 0x7fffffffu);

			m = a > m ? a : m;
		}
	return bits_float((uint32_t)m);
}

/* round(v * inv) within +-127, half away from zero. Clamped before the
 * conversion, a NaN included (to -127): converting one out of range is
 * undefined. */
static inline int8_t int8_level(float v, float inv)
{
	float s = v * inv;

	s = s >= -127.0f ? s : -127.0f;
	s = s <= 127.0f ? s : 127.0f;
	return (int8_t)(int)(s + (s < 0.0f ? -0.5f : 0.5f));
}

DML_VECTOR_CLONES
void codec_int8_encode(const float *x, size_t n, float *r, uint8_t *out)
{
	for (size_t b = 0; b < n; b += DML_CODEC_INT8_BLOCK) {
		size_t len = n - b < DML_CODEC_INT8_BLOCK ? n - b : DML_CODEC_INT8_BLOCK;
		const float *xb = x + b;
		float *rb = r ? r + b : NULL;
		float max = block_max_abs(xb, rb, len);
		float scale = 0.0f, inv = 0.0f;
		int8_t *q = (int8_t *)(out + CODEC_SCALE_BYTES);

		if (max >= INT8_TINY && max <= FLT_MAX) {
			scale = max / 127.0f;
			inv = 127.0f / max;
			/* Near FLT_MAX the quotient rounds up and 127 x scale
			 * would overflow: one step down keeps it finite. */
			if (!(127.0f * scale <= FLT_MAX))
				scale = bits_float(float_bits(scale) - 1u);
		}
		dml_store_le32(out, float_bits(scale));
		if (rb) {
			for (size_t i = 0; i < len; i++) {
				float v = xb[i] + rb[i];
				int8_t k = int8_level(v, inv);

				q[i] = k;
				rb[i] = v - (float)k * scale;
			}
		} else {
			for (size_t i = 0; i < len; i++)
				q[i] = int8_level(xb[i], inv);
		}
		out += CODEC_SCALE_BYTES + len;
	}
}

DML_VECTOR_CLONES
int codec_int8_decode(const uint8_t *in, size_t n, float *out)
{
	for (size_t b = 0; b < n; b += DML_CODEC_INT8_BLOCK) {
		size_t len = n - b < DML_CODEC_INT8_BLOCK ? n - b : DML_CODEC_INT8_BLOCK;
		float scale = bits_float(dml_load_le32(in));
		const int8_t *q = (const int8_t *)(in + CODEC_SCALE_BYTES);
		int bad = 0;

		/* What an encoder makes: scale >= 0 with 127 x scale finite and
		 * |q| <= 127, so every product is finite. */
		if (!(scale >= 0.0f && 127.0f * scale <= FLT_MAX))
			return -1;
		for (size_t i = 0; i < len; i++) {
			bad |= q[i] == -128;
			out[b + i] = (float)q[i] * scale;
		}
		if (bad)
			return -1;
		in += CODEC_SCALE_BYTES + len;
	}
	return 0;
}
