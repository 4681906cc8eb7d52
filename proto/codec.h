/*
 * Gradient and value codecs: how a tensor of floats is put on a link that is
 * slower than the work at either end (a zone's link to another zone, say).
 *
 *   none          4 bytes a value: the floats as they are (little-endian)
 *   fp16          2 bytes: IEEE half precision, rounded to nearest even;
 *                 beyond +-65504 saturated, not infinite
 *   bf16          2 bytes: the float's upper half, rounded to nearest even
 *   int8          1 byte plus a float scale per block of 256 values:
 *                 round(x / scale), scale = max |x| of the block / 127
 *   topk:F        the ceil(F n) values of largest magnitude (at least one),
 *                 as a count and then (index, value) pairs, indices rising;
 *                 every other value reads as 0
 *   topk16:F      the same values, about 3 bytes a pair instead of 8: a
 *                 count, then per pair the index's gap past the previous one
 *                 (index - previous - 1, the first's index itself) as a
 *                 LEB128 varint (1 byte below 128) and the value in fp16
 *
 * The lossy codecs take an optional residual (error feedback): what a sender
 * did not send of one tensor is added to its next, so that over many pushes
 * nothing is lost but delayed. Encoding reads x + residual and leaves in
 * residual exactly the part that the encoding does not carry.
 *
 * Decoding checks the whole encoding against the count it must hold before
 * it writes a value: a short or long buffer, a count or index out of range,
 * indices out of order, or a scale or value that is not finite is an error
 * (DML_ESHAPE), never a read past the buffer. No codec allocates but the topk
 * encoders (a scratch array of about 1.25 F n floats, at most n).
 */
#ifndef DML_CODEC_H
#define DML_CODEC_H

#include <stddef.h>
#include <stdint.h>

enum dml_codec_kind {
	DML_CODEC_NONE = 0,
	DML_CODEC_FP16 = 1,
	DML_CODEC_BF16 = 2,
	DML_CODEC_INT8 = 3,
	DML_CODEC_TOPK = 4,
	DML_CODEC_TOPK16 = 5,
};

/** Values per int8 block, each with a float scale of its own. */
#define DML_CODEC_INT8_BLOCK 256u

/** A codec and its parameter. */
struct dml_codec {
	enum dml_codec_kind kind;
	float topk_fraction;  /* topk, topk16: the share of values sent, (0, 1] */
};

/** Whether the codec sends only some of the values (topk, topk16). */
static inline int dml_codec_sparse(enum dml_codec_kind kind)
{
	return kind == DML_CODEC_TOPK || kind == DML_CODEC_TOPK16;
}

/**
 * Parse "none", "fp16", "bf16", "int8", "topk:F" or "topk16:F" (0 < F <= 1)
 * into c.
 * 0, or DML_EINVAL with the reason in err (errlen bytes, may be 0).
 */
int dml_codec_parse(const char *s, struct dml_codec *c, char *err, size_t errlen);

/**
 * The codec's name as dml_codec_parse reads it, in buf (at least 32
 * bytes); returns buf.
 */
const char *dml_codec_format(const struct dml_codec *c, char *buf, size_t len);

/** Whether the codec loses precision (and so may keep a residual). */
int dml_codec_lossy(const struct dml_codec *c);

/** The most bytes an encoding of n values takes; 0 when n is too large. */
size_t dml_codec_bound(const struct dml_codec *c, size_t n);

/**
 * Encode the n values of x (plus residual, where not NULL) into out, which
 * holds cap bytes (dml_codec_bound(c, n) are always enough); the bytes
 * written go to *len. With a residual, it is left holding what the encoding
 * does not carry (x + residual - decoded). x and residual must not be the
 * same array. Every codec but topk16 writes exactly the bound's bytes.
 * 0, DML_EINVAL (bad arguments, cap too small; for topk and topk16, a
 * value that is not finite: it has no rank) or DML_ENOMEM (their scratch).
 */
int dml_codec_encode(const struct dml_codec *c, const float *x, size_t n,
		     float *residual, void *out, size_t cap, size_t *len);

/**
 * Decode len bytes of in, the encoding of n values, into out (n floats).
 * 0, or DML_ESHAPE when the bytes are not such an encoding (see the top of
 * this header); out is then left unspecified. DML_EINVAL for bad arguments.
 */
int dml_codec_decode(const struct dml_codec *c, const void *in, size_t len,
		     size_t n, float *out);

/**
 * Add the decoding of len bytes of in (n values) to out: out[i] += value,
 * for topk and topk16 only at the indices sent (a value not sent adds
 * nothing, not even +0 to a -0). The bytes are checked whole first: on an
 * error out is as it was. 0, DML_ESHAPE, DML_EINVAL or DML_ENOMEM.
 */
int dml_codec_decode_add(const struct dml_codec *c, const void *in, size_t len,
			 size_t n, float *out);

/**
 * Whether len bytes can be an encoding of n values by codec kind, checked
 * from the sizes alone (topk: any count from 0 to n; topk16: 4 to 4 + 7 n
 * bytes). Frame checks use it before the payload is read; dml_codec_decode
 * checks the bytes themselves.
 */
int dml_codec_len_ok(enum dml_codec_kind kind, size_t n, size_t len);

/** The float nearest to half-precision bits h (exact: every half is a float). */
float dml_half_to_float(uint16_t h);

/** Half-precision bits of f, rounded to nearest even, saturated at +-65504. */
uint16_t dml_float_to_half(float f);

#endif
