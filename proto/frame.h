/*
 * Framing: the fixed header, metadata decoding and per-type validation, and
 * deep copies of messages.
 *
 * Wire layout of one frame (all little-endian):
 *   offset 0  u32 magic        DML_FRAME_MAGIC ("DML1")
 *   offset 4  u16 version      DML_PROTOCOL_VERSION
 *   offset 6  u16 flags        0, or DML_FRAME_FLAG_RING where allowed
 *   offset 8  u32 meta_len     bytes of packed Dml__Meta that follow (>= 1)
 *   offset 12 u32 payload_len  raw payload bytes after the metadata
 *
 * Everything here is pure (no I/O, no libevent) so it can be unit-tested and
 * fuzzed. Every length a peer sends is checked against dml_frame_limits before
 * anything is allocated; nothing a peer sends can reach an assert.
 */
#ifndef DML_FRAME_H
#define DML_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "proto/codec.h"
#include "proto/dml.pb-c.h"

#define DML_FRAME_MAGIC 0x314c4d44u /* bytes 'D' 'M' 'L' '1' */
#define DML_PROTOCOL_VERSION 1
#define DML_FRAME_HEADER_LEN 16
/** Most workers' pushes one aggregator push may name (Meta.contributors). */
#define DML_MAX_CONTRIBUTORS 4096
/** Longest Meta.owner ("host:port") a frame may carry. */
#define DML_MAX_OWNER_LEN 255
/** Meta.pace: how a worker's job runs, as its pushes tell its aggregator. */
#define DML_PACE_UNKNOWN 0
#define DML_PACE_CLOCKED 1
#define DML_PACE_ASYNC 2
/** Longest Meta.forward_codec ("topk:F") a frame may carry. */
#define DML_MAX_CODEC_LEN 31
/*
 * Header flag: the payload is in the sender's shared-memory ring, not on
 * the wire (proto/shm_ring.h). Only a Unix connection whose handshake set
 * up rings allows it; the connection clears it before decoding, so
 * dml_frame_header_decode() refuses it like any other flag.
 */
#define DML_FRAME_FLAG_RING 1u
/** dml_frame_parse() result: a well-formed prefix, more bytes needed. */
#define DML_FRAME_INCOMPLETE 1

struct dml_frame_limits {
	uint32_t max_meta;    /* largest metadata message accepted */
	uint32_t max_payload; /* largest raw payload accepted */
	uint32_t max_keys;    /* most keys in one sparse request */
};

struct dml_frame_header {
	uint16_t version;
	uint16_t flags;
	uint32_t meta_len;
	uint32_t payload_len;
};

/** A decoded frame. meta is owned (dml_frame_release); payload is borrowed. */
struct dml_frame {
	struct dml_frame_header hdr;
	Dml__Meta *meta;
	const uint8_t *payload;
};

/** Defaults: 64 KiB metadata, 256 MiB payload, 1,048,576 keys. */
void dml_frame_limits_default(struct dml_frame_limits *lim);

/** Write a header for the given lengths into out[0..15]. */
void dml_frame_header_encode(uint8_t *out, uint32_t meta_len, uint32_t payload_len);

/**
 * Decode exactly DML_FRAME_HEADER_LEN bytes and check them against lim.
 * Returns 0, DML_EFRAME_MAGIC, DML_EFRAME_VERSION, DML_EFRAME_FLAGS,
 * DML_EFRAME_META (0 or over max_meta) or DML_EFRAME_PAYLOAD.
 */
int dml_frame_header_decode(const uint8_t *in, const struct dml_frame_limits *lim,
			    struct dml_frame_header *out);

/**
 * Unpack meta_len bytes of metadata and validate it against the header and
 * the limits (see dml.proto for the payload layouts). On success *out is a
 * new message to free with dml_meta_free(). Returns 0, DML_EFRAME_DECODE
 * (not a Meta, or a handshake message without its Handshake), DML_EFRAME_TYPE,
 * DML_EFRAME_LENGTH (meta.payload_bytes != hdr.payload_len),
 * DML_EFRAME_KEYS, DML_EFRAME_COUNT or DML_EFRAME_PAYLOAD (a dense pull whose
 * reply would exceed max_payload), DML_ESHAPE (a dtype
 * the message may not carry: see dml.proto).
 */
int dml_frame_meta_decode(const uint8_t *buf, size_t len,
			  const struct dml_frame_header *hdr,
			  const struct dml_frame_limits *lim, Dml__Meta **out);

/**
 * Parse one whole frame at the start of buf[0..len). Returns 0 and fills
 * *out and *frame_len when a complete, valid frame is there;
 * DML_FRAME_INCOMPLETE when the bytes so far are a valid prefix (the header
 * is checked as soon as its 16 bytes are present, before waiting for more);
 * or a negative error from the two functions above.
 */
int dml_frame_parse(const uint8_t *buf, size_t len, const struct dml_frame_limits *lim,
		    struct dml_frame *out, size_t *frame_len);

/** At end of stream: DML_EFRAME_TRUNC if bytes of a frame were pending. */
int dml_frame_eof(size_t pending);

/** Free what dml_frame_parse() allocated (the meta); safe on zeroed frames. */
void dml_frame_release(struct dml_frame *f);

/** Free a Meta from dml_frame_meta_decode(); NULL is fine. */
void dml_meta_free(Dml__Meta *m);

/**
 * A deep copy of any message of the schema (pass &msg->base), made through
 * its own encoding, so that the copy owns everything it points to; free it
 * as an unpacked message of its type (NULL allocator), e.g. dml_meta_free().
 * NULL when memory ran out.
 */
void *dml_msg_copy(const ProtobufCMessage *m);

/**
 * The codec a dtype names, ready to decode with: 0, or DML_ESHAPE for a
 * number that is none.
 */
int dml_dtype_codec(Dml__DType dtype, struct dml_codec *c);
/** The dtype of a codec (F32 for none). */
Dml__DType dml_codec_dtype(enum dml_codec_kind kind);
/** The dtypes a WELCOME offers (always F32), a bit per dtype number. */
uint32_t dml_welcome_codecs(const Dml__Handshake *welcome);

/**
 * Number of values (keys times width) a message carries or asks for:
 * sparse: num_keys * value_width; dense: (key_end - key_begin) * value_width.
 * DML_EFRAME_COUNT on overflow or an empty/inverted range.
 */
int dml_meta_value_count(const Dml__Meta *m, uint64_t *count);

/**
 * Serialize header + metadata for a frame whose payload is payload_len bytes
 * into out (capacity cap). Sets meta->payload_bytes. Returns the number of
 * bytes written (header + packed meta) or 0 if cap is too small.
 */
size_t dml_frame_encode_head(Dml__Meta *meta, uint32_t payload_len, uint8_t *out,
			     size_t cap);

/** Upper bound on dml_frame_encode_head()'s output for this meta. */
size_t dml_frame_head_size(const Dml__Meta *meta);

/** Short name of a message type for logs ("push", "pull", ...). */
const char *dml_msg_type_name(int type);

#endif
