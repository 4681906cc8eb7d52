/*
 * What codec.c (names, sizes, dispatch, topk) and codec_kernels.c (the
 * per-value loops of fp16, bf16 and int8) share. Each kernel encodes or
 * decodes a whole tensor; the checks of length and count are codec.c's,
 * done before a kernel runs.
 */
#ifndef DML_CODEC_INTERNAL_H
#define DML_CODEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Every codec's bytes are little-endian, as every dml frame's; the float
 * values of none and topk are copied as the host holds them.
 */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "dml frames are little-endian");

/* Bytes of an int8 block's scale. */
#define CODEC_SCALE_BYTES 4u

/*
 * Encoded bytes may sit at any address (a frame's payload): they are read
 * and written a byte at a time (dml_load_le16 and its kin), never through a
 * wider pointer.
 *
 * Encoders read v[i] = x[i] (+ r[i] when r is not NULL) and, with r, leave
 * r[i] = v[i] - decoded[i]. Decoders return 0, or -1 when a value or scale
 * is not acceptable (not finite, out of range); lengths were checked.
 */
void codec_fp16_encode(const float *x, size_t n, float *r, uint8_t *out);
int codec_fp16_decode(const uint8_t *in, size_t n, float *out);
void codec_bf16_encode(const float *x, size_t n, float *r, uint8_t *out);
int codec_bf16_decode(const uint8_t *in, size_t n, float *out);
void codec_int8_encode(const float *x, size_t n, float *r, uint8_t *out);
int codec_int8_decode(const uint8_t *in, size_t n, float *out);

#endif
