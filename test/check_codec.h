/*
 * Helpers shared by the codec tests (check_codec.c, check_codec_trip.c,
 * check_codec_hostile.c): codecs by name, random tensors, and encodings and
 * decodings held in buffers of exactly their size, so that a read past one
 * is caught by the sanitizers.
 */
#ifndef DML_CHECK_CODEC_H
#define DML_CHECK_CODEC_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"

/** Every codec the tests run, lossy or not. */
extern const char *const codec_names[];
extern const size_t codec_nnames;

/** The sizes of tensor each codec is tried on. */
extern const size_t codec_sizes[];
extern const size_t codec_nsizes;

/** The codec named s; the test fails when it does not parse. */
struct dml_codec codec_of(const char *s);

/** A uniform double in [0, 1) from the state *rng. */
double codec_uniform(uint64_t *rng);

/** n values of a normal distribution times scale. */
void codec_fill_normal(float *x, size_t n, double scale, uint64_t *rng);

/**
 * Encode x (with residual, may be NULL) into a buffer of exactly the bytes
 * written, which the caller frees; *len gets their count. Checks that the
 * encoding succeeds and fits dml_codec_bound().
 */
uint8_t *codec_encode_exact(const struct dml_codec *c, const float *x, size_t n,
			    float *residual, size_t *len);

/** A copy of len bytes of p in a buffer of exactly len bytes (1 when 0). */
uint8_t *codec_copy(const void *p, size_t len);

/**
 * n floats (at least one) filled with NaN bytes, so that a value a decoder
 * did not write shows as NaN.
 */
float *codec_poisoned(size_t n);

/**
 * Decode len bytes of in into a poisoned array of n floats, which the
 * caller frees; checks that it succeeds and that every value is finite.
 */
float *codec_decode_ok(const struct dml_codec *c, const uint8_t *in, size_t len, size_t n);

/** Little-endian integer of w bytes (1 to 8) at p, and its store. */
uint64_t codec_get_le(const uint8_t *p, size_t w);
void codec_put_le(uint8_t *p, size_t w, uint64_t v);

/* The test cases of each file, added to the suite by check_codec.c. */
TCase *codec_trip_tcase(void);
TCase *codec_feedback_tcase(void);
TCase *codec_hostile_tcase(void);

#endif
