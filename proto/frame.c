/*
 * Framing: encodes and decodes the fixed 16-byte header, unpacks the Meta
 * that follows it and checks every count a peer sends against the header,
 * the other fields and the configured limits (see frame.h and dml.proto).
 *
 * This file is pure: no I/O, no logging, no global state, so the connection
 * layer, the tests and the fuzz targets all drive the same code. It must never
 * trust a length before checking it, never let an arithmetic overflow pass,
 * never allocate more than a checked length, and never assert or abort on
 * anything that came off the wire. Every rejection has its own DML_EFRAME_...
 * code so a daemon can log precisely why it closed a connection.
 *
 * Choices the header leaves open, made as a production protocol would:
 *  - The header is checked in wire order: magic, version, flags, metadata
 *    length, payload length; the first failure is the one reported.
 *  - Meta fields are checked in this order: type, payload_bytes against the
 *    header, required submessage, dtype, then the per-type counts.
 *  - A sparse PULL whose reply (num_keys * value_width values) would exceed
 *    max_payload is refused with DML_EFRAME_PAYLOAD, like a dense one: a
 *    request whose answer could never be sent is a protocol error, not
 *    something to discover after gathering the values.
 *  - dml_meta_value_count() never returns a count of 0 on success: zero keys,
 *    a zero width or an empty range is DML_EFRAME_COUNT.
 *  - Submessages a type does not use (say a Handshake on a PUSH) are ignored.
 *  - Caller mistakes, not peer input, return DML_EINVAL: NULL arguments, or a
 *    dml_frame_meta_decode() len that differs from hdr->meta_len.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/util.h"

#define DML_F32_SIZE 4u
#define DML_KEY_SIZE 8u

void dml_frame_limits_default(struct dml_frame_limits *lim)
{
	lim->max_meta = 64u * 1024u;
	lim->max_payload = 256u * 1024u * 1024u;
	lim->max_keys = 1048576u;
}

void dml_frame_header_encode(uint8_t *out, uint32_t meta_len, uint32_t payload_len)
{
	dml_store_le32(out, DML_FRAME_MAGIC);
	dml_store_le16(out + 4, DML_PROTOCOL_VERSION);
	dml_store_le16(out + 6, 0);
	dml_store_le32(out + 8, meta_len);
	dml_store_le32(out + 12, payload_len);
}

int dml_frame_header_decode(const uint8_t *in, const struct dml_frame_limits *lim,
			    struct dml_frame_header *out)
{
	struct dml_frame_header h;

	if (!in || !lim || !out)
		return DML_EINVAL;
	if (dml_load_le32(in) != DML_FRAME_MAGIC)
		return DML_EFRAME_MAGIC;
	h.version = dml_load_le16(in + 4);
	h.flags = dml_load_le16(in + 6);
	h.meta_len = dml_load_le32(in + 8);
	h.payload_len = dml_load_le32(in + 12);
	if (h.version != DML_PROTOCOL_VERSION)
		return DML_EFRAME_VERSION;
	if (h.flags != 0)
		return DML_EFRAME_FLAGS;
	if (h.meta_len == 0 || h.meta_len > lim->max_meta)
		return DML_EFRAME_META;
	if (h.payload_len > lim->max_payload)
		return DML_EFRAME_PAYLOAD;
	*out = h;
	return 0;
}

/* a * b into *out; false when the product does not fit in 64 bits. */
static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
	return !__builtin_mul_overflow(a, b, out);
}

int dml_meta_value_count(const Dml__Meta *m, uint64_t *count)
{
	uint64_t keys;

	if (!m || !count)
		return DML_EINVAL;
	if (m->dense) {
		if (m->key_end <= m->key_begin)
			return DML_EFRAME_COUNT;
		keys = m->key_end - m->key_begin;
	} else {
		keys = m->num_keys;
	}
	if (keys == 0 || m->value_width == 0)
		return DML_EFRAME_COUNT;
	if (!mul_u64(keys, m->value_width, count))
		return DML_EFRAME_COUNT;
	return 0;
}

static bool type_is_known(int type)
{
	return type >= DML__MSG_TYPE__CHALLENGE && type <= DML__MSG_TYPE__STRAGGLER;
}

static bool type_is_data(int type)
{
	return type == DML__MSG_TYPE__PUSH || type == DML__MSG_TYPE__PULL ||
	       type == DML__MSG_TYPE__PULL_REPLY || type == DML__MSG_TYPE__MIGRATE;
}

static bool type_is_handshake(int type)
{
	return type == DML__MSG_TYPE__CHALLENGE || type == DML__MSG_TYPE__HELLO ||
	       type == DML__MSG_TYPE__WELCOME;
}

/*
 * A scan (dml.proto): a PULL names a hash range and carries nothing; its
 * reply carries num_keys keys, then their values. What the reply will need
 * is known only to the server, which keeps it within its max_payload.
 */
static int scan_payload_expected(const Dml__Meta *m, const struct dml_frame_limits *lim,
				 uint64_t *expected, uint64_t *reply_bytes)
{
	uint64_t row_bytes = DML_KEY_SIZE + (uint64_t)m->value_width * DML_F32_SIZE;

	*reply_bytes = 0;
	if (m->dense || m->key_begin > m->key_end)
		return DML_EFRAME_COUNT;
	if (m->type == DML__MSG_TYPE__PULL) {
		*expected = 0;
		return m->num_keys == 0 ? 0 : DML_EFRAME_COUNT;
	}
	if (m->type != DML__MSG_TYPE__PULL_REPLY)
		return DML_EFRAME_COUNT;
	if (m->num_keys > lim->max_keys)
		return DML_EFRAME_KEYS;
	return mul_u64(m->num_keys, row_bytes, expected) ? 0 : DML_EFRAME_COUNT;
}

/*
 * The payload a PUSH, PULL, PULL_REPLY or MIGRATE must carry, from its
 * counts. MIGRATE is laid out as a PUSH whose rows hold values and optimizer
 * state; a sparse one may carry no rows (a hash range that is empty).
 * Sets *reply_bytes to the size of the values the request names, which
 * bounds what a PULL's answer will need.
 */
static int data_payload_expected(const Dml__Meta *m, const struct dml_frame_header *hdr,
				 const struct dml_frame_limits *lim, uint64_t *expected,
				 uint64_t *reply_bytes)
{
	uint64_t count, key_bytes;
	int rc;

	if (m->value_width == 0)
		return DML_EFRAME_COUNT;
	if (m->scan)
		return scan_payload_expected(m, lim, expected, reply_bytes);
	if (m->type == DML__MSG_TYPE__MIGRATE && !m->dense && m->num_keys == 0) {
		*expected = *reply_bytes = 0;
		return 0;
	}
	if (m->dense) {
		if (m->num_keys != 0)
			return DML_EFRAME_COUNT;
	} else {
		if (m->num_keys == 0)
			return DML_EFRAME_COUNT;
		if (m->num_keys > lim->max_keys)
			return DML_EFRAME_KEYS;
	}
	rc = dml_meta_value_count(m, &count);
	if (rc < 0)
		return rc;
	if (!mul_u64(count, DML_F32_SIZE, reply_bytes))
		return DML_EFRAME_COUNT;
	key_bytes = m->dense ? 0 : (uint64_t)m->num_keys * DML_KEY_SIZE;

	switch (m->type) {
	case DML__MSG_TYPE__PUSH:
	case DML__MSG_TYPE__MIGRATE:
		if (__builtin_add_overflow(key_bytes, *reply_bytes, expected))
			return DML_EFRAME_COUNT;
		break;
	case DML__MSG_TYPE__PULL:
		*expected = key_bytes;
		break;
	default: /* PULL_REPLY */
		*expected = *reply_bytes;
		break;
	}
	if (m->dtype != DML__DTYPE__F32 && m->type != DML__MSG_TYPE__PULL) {
		/* Values in a codec's encoding: their length depends on it. */
		uint64_t have = hdr->payload_len;
		struct dml_codec c;

		*expected = have;
		if (m->type == DML__MSG_TYPE__PULL_REPLY)
			key_bytes = 0;       /* a reply carries values only */
		if (dml_dtype_codec(m->dtype, &c) != 0)
			return DML_ESHAPE;
		if (have < key_bytes || !dml_codec_len_ok(c.kind, count, have - key_bytes))
			return DML_EFRAME_COUNT;
	}
	return 0;
}

/* The codec of each dtype, by its number: both directions read it. */
static const enum dml_codec_kind dtype_kinds[] = {
	[DML__DTYPE__F32] = DML_CODEC_NONE, [DML__DTYPE__F16] = DML_CODEC_FP16,
	[DML__DTYPE__INT8] = DML_CODEC_INT8, [DML__DTYPE__BF16] = DML_CODEC_BF16,
	[DML__DTYPE__TOPK] = DML_CODEC_TOPK, [DML__DTYPE__TOPK16] = DML_CODEC_TOPK16,
};

uint32_t dml_welcome_codecs(const Dml__Handshake *welcome)
{
	uint32_t bits = 1u << DML__DTYPE__F32;

	for (size_t i = 0; i < welcome->n_codecs; i++)
		if ((unsigned)welcome->codecs[i] < 32)
			bits |= 1u << welcome->codecs[i];
	return bits;
}

int dml_dtype_codec(Dml__DType dtype, struct dml_codec *c)
{
	if ((unsigned)dtype >= DML_ARRAY_LEN(dtype_kinds))
		return DML_ESHAPE;
	/* A decoder reads topk's count from the bytes: any fraction will do. */
	*c = (struct dml_codec){ .kind = dtype_kinds[dtype], .topk_fraction = 1.0f };
	return 0;
}

Dml__DType dml_codec_dtype(enum dml_codec_kind kind)
{
	for (size_t t = 0; t < DML_ARRAY_LEN(dtype_kinds); t++)
		if (dtype_kinds[t] == kind)
			return (Dml__DType)t;
	return DML__DTYPE__F32;
}

/*
 * Which dtypes a data frame may carry: any codec on a PUSH; on a PULL (the
 * reply's) and a PULL_REPLY, one that sends every value (not topk), but for
 * the delta of a delta pull's reply; only F32 on a scan and a MIGRATE.
 */
static bool dtype_allowed(const Dml__Meta *m)
{
	struct dml_codec c;

	if (m->dtype == DML__DTYPE__F32)
		return true;
	if (dml_dtype_codec(m->dtype, &c) != 0 || m->scan)
		return false;
	switch (m->type) {
	case DML__MSG_TYPE__PUSH:
		return true;
	case DML__MSG_TYPE__PULL:
		return !dml_codec_sparse(c.kind);
	case DML__MSG_TYPE__PULL_REPLY:
		return !dml_codec_sparse(c.kind) || m->delta;
	default:
		return false;
	}
}

static int payload_check(const Dml__Meta *m, const struct dml_frame_header *hdr,
			 const struct dml_frame_limits *lim)
{
	uint64_t expected = 0, reply_bytes = 0;
	int rc;

	if (!type_is_data(m->type))
		return hdr->payload_len == 0 ? 0 : DML_EFRAME_COUNT;
	rc = data_payload_expected(m, hdr, lim, &expected, &reply_bytes);
	if (rc < 0)
		return rc;
	if (expected != hdr->payload_len)
		return DML_EFRAME_COUNT;
	if (m->type == DML__MSG_TYPE__PULL && reply_bytes > lim->max_payload)
		return DML_EFRAME_PAYLOAD;
	return 0;
}

/* An optional codec name: "" or what dml_codec_parse reads; lossy if asked. */
static bool codec_name_ok(const char *name, int lossy)
{
	struct dml_codec c;

	if (!name || !name[0])
		return true;
	return strlen(name) <= DML_MAX_CODEC_LEN && dml_codec_parse(name, &c, NULL, 0) == 0 &&
	       (!lossy || dml_codec_lossy(&c));
}

/*
 * Meta.contributors (an aggregator's summed push, or the clocks it
 * delivers) only on a PUSH, each naming a worker and a sequence number, or
 * a CLOCK, each naming a worker and a clock, no sequence number; at most
 * DML_MAX_CONTRIBUTORS; Meta.owner (a part or a clock routed through an
 * aggregator) only on PUSH, PULL and CLOCK, at most DML_MAX_OWNER_LEN bytes;
 * Meta.forward_codec only with Meta.owner, a codec dml_codec_parse reads;
 * Meta.delta_codec (lossy) and Meta.held_version only on a dense PULL asking
 * F32 (held_version also on a PULL_REPLY), Meta.delta only on a PULL_REPLY;
 * Meta.pace only on a PUSH, one of DML_PACE_*.
 */
static bool forward_fields_ok(const Dml__Meta *m)
{
	bool routed = m->type == DML__MSG_TYPE__PUSH || m->type == DML__MSG_TYPE__PULL;
	bool clock = m->type == DML__MSG_TYPE__CLOCK;

	if (m->n_contributors &&
	    ((!clock && m->type != DML__MSG_TYPE__PUSH) ||
	     m->n_contributors > DML_MAX_CONTRIBUTORS))
		return false;
	for (size_t i = 0; i < m->n_contributors; i++) {
		const Dml__Contributor *c = m->contributors[i];

		if (!c || !c->worker || (clock ? c->seq || !c->clock : !c->seq))
			return false;
	}
	if (!codec_name_ok(m->forward_codec, 0) || !codec_name_ok(m->delta_codec, 1))
		return false;
	if (m->forward_codec && m->forward_codec[0] && (!routed || !m->owner || !m->owner[0]))
		return false;
	if (m->delta_codec && m->delta_codec[0] &&
	    (m->type != DML__MSG_TYPE__PULL || !m->dense || m->scan ||
	     m->dtype != DML__DTYPE__F32))
		return false;
	if (m->pace > DML_PACE_ASYNC || (m->pace && m->type != DML__MSG_TYPE__PUSH))
		return false;
	if ((m->held_version && m->type != DML__MSG_TYPE__PULL_REPLY &&
	     !(m->delta_codec && m->delta_codec[0])) ||
	    (m->delta && m->type != DML__MSG_TYPE__PULL_REPLY))
		return false;
	return !m->owner || !m->owner[0] ||
	       ((routed || clock) && strlen(m->owner) <= DML_MAX_OWNER_LEN);
}

static int meta_check(const Dml__Meta *m, const struct dml_frame_header *hdr,
		      const struct dml_frame_limits *lim)
{
	/* protobuf-c stores any enum number it reads; range-check it here. */
	if (!type_is_known(m->type))
		return DML_EFRAME_TYPE;
	if (m->payload_bytes != hdr->payload_len)
		return DML_EFRAME_LENGTH;
	if (type_is_handshake(m->type) && !m->handshake)
		return DML_EFRAME_DECODE;
	if (m->type == DML__MSG_TYPE__ERROR && !m->error)
		return DML_EFRAME_DECODE;
	if (m->type == DML__MSG_TYPE__REGISTER && !m->node)
		return DML_EFRAME_DECODE;
	if ((m->type == DML__MSG_TYPE__SUBMIT && !m->job_spec) ||
	    (m->type == DML__MSG_TYPE__ASSIGN && (!m->job_spec || !m->assignment)) ||
	    (m->type == DML__MSG_TYPE__PROGRESS && !m->progress) ||
	    (m->type == DML__MSG_TYPE__SHARDMAP_REPLY && (!m->shard_map || !m->job_spec)))
		return DML_EFRAME_DECODE;
	if (!forward_fields_ok(m))
		return DML_EFRAME_DECODE;
	if (type_is_data(m->type) && !dtype_allowed(m))
		return DML_ESHAPE;
	return payload_check(m, hdr, lim);
}

int dml_frame_meta_decode(const uint8_t *buf, size_t len,
			  const struct dml_frame_header *hdr,
			  const struct dml_frame_limits *lim, Dml__Meta **out)
{
	Dml__Meta *m;
	int rc;

	if (!buf || !hdr || !lim || !out || len != hdr->meta_len)
		return DML_EINVAL;
	*out = NULL;
	/* The header check already bounded len by max_meta. */
	m = dml__meta__unpack(NULL, len, buf);
	if (!m)
		return DML_EFRAME_DECODE;
	rc = meta_check(m, hdr, lim);
	if (rc < 0) {
		dml_meta_free(m);
		return rc;
	}
	*out = m;
	return 0;
}

int dml_frame_parse(const uint8_t *buf, size_t len, const struct dml_frame_limits *lim,
		    struct dml_frame *out, size_t *frame_len)
{
	struct dml_frame_header hdr;
	uint64_t total;
	Dml__Meta *meta;
	int rc;

	if ((!buf && len > 0) || !lim || !out || !frame_len)
		return DML_EINVAL;
	memset(out, 0, sizeof(*out));
	if (len < DML_FRAME_HEADER_LEN)
		return DML_FRAME_INCOMPLETE;
	rc = dml_frame_header_decode(buf, lim, &hdr);
	if (rc < 0)
		return rc;
	/* Two u32 lengths plus 16 cannot overflow 64 bits. */
	total = (uint64_t)DML_FRAME_HEADER_LEN + hdr.meta_len + hdr.payload_len;
	if ((uint64_t)len < total)
		return DML_FRAME_INCOMPLETE;
	rc = dml_frame_meta_decode(buf + DML_FRAME_HEADER_LEN, hdr.meta_len, &hdr, lim,
				   &meta);
	if (rc < 0)
		return rc;
	out->hdr = hdr;
	out->meta = meta;
	out->payload = buf + DML_FRAME_HEADER_LEN + hdr.meta_len;
	*frame_len = (size_t)total;
	return 0;
}

int dml_frame_eof(size_t pending)
{
	return pending > 0 ? DML_EFRAME_TRUNC : 0;
}

void dml_meta_free(Dml__Meta *m)
{
	if (m)
		dml__meta__free_unpacked(m, NULL);
}

void *dml_msg_copy(const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = dml_xmalloc(len ? len : 1);
	ProtobufCMessage *copy;

	protobuf_c_message_pack(m, buf);
	copy = protobuf_c_message_unpack(m->descriptor, NULL, len, buf);
	free(buf);
	return copy;
}

void dml_frame_release(struct dml_frame *f)
{
	if (!f)
		return;
	dml_meta_free(f->meta);
	f->meta = NULL;
	f->payload = NULL;
}

size_t dml_frame_encode_head(Dml__Meta *meta, uint32_t payload_len, uint8_t *out,
			     size_t cap)
{
	size_t meta_len;

	if (!meta || !out)
		return 0;
	meta->payload_bytes = payload_len;
	meta_len = dml__meta__get_packed_size(meta);
	/*
	 * A Meta whose only field is a zero would pack to nothing, which the
	 * decoder refuses (meta_len 0); so would one too big for a u32.
	 */
	if (meta_len == 0 || meta_len > UINT32_MAX)
		return 0;
	if (cap < DML_FRAME_HEADER_LEN || cap - DML_FRAME_HEADER_LEN < meta_len)
		return 0;
	dml_frame_header_encode(out, (uint32_t)meta_len, payload_len);
	if (dml__meta__pack(meta, out + DML_FRAME_HEADER_LEN) != meta_len)
		return 0;
	return DML_FRAME_HEADER_LEN + meta_len;
}

size_t dml_frame_head_size(const Dml__Meta *meta)
{
	/* payload_bytes may grow to a u32: tag plus varint is under 10 bytes. */
	if (!meta)
		return DML_FRAME_HEADER_LEN;
	return DML_FRAME_HEADER_LEN + dml__meta__get_packed_size(meta) + 10;
}

static const char *const msg_type_names[] = {
	[DML__MSG_TYPE__CHALLENGE] = "challenge",
	[DML__MSG_TYPE__HELLO] = "hello",
	[DML__MSG_TYPE__WELCOME] = "welcome",
	[DML__MSG_TYPE__PUSH] = "push",
	[DML__MSG_TYPE__PULL] = "pull",
	[DML__MSG_TYPE__PULL_REPLY] = "pull_reply",
	[DML__MSG_TYPE__ACK] = "ack",
	[DML__MSG_TYPE__CLOCK] = "clock",
	[DML__MSG_TYPE__ERROR] = "error",
	[DML__MSG_TYPE__HEARTBEAT] = "heartbeat",
	[DML__MSG_TYPE__BYE] = "bye",
	[DML__MSG_TYPE__STATS] = "stats",
	[DML__MSG_TYPE__STATS_REPLY] = "stats_reply",
	[DML__MSG_TYPE__REGISTER] = "register",
	[DML__MSG_TYPE__REGISTER_REPLY] = "register_reply",
	[DML__MSG_TYPE__NODES] = "nodes",
	[DML__MSG_TYPE__NODES_REPLY] = "nodes_reply",
	[DML__MSG_TYPE__SUBMIT] = "submit",
	[DML__MSG_TYPE__SUBMIT_REPLY] = "submit_reply",
	[DML__MSG_TYPE__JOBS] = "jobs",
	[DML__MSG_TYPE__JOBS_REPLY] = "jobs_reply",
	[DML__MSG_TYPE__JOB_CONTROL] = "job_control",
	[DML__MSG_TYPE__ASSIGN] = "assign",
	[DML__MSG_TYPE__PROGRESS] = "progress",
	[DML__MSG_TYPE__SHARDMAP] = "shardmap",
	[DML__MSG_TYPE__SHARDMAP_REPLY] = "shardmap_reply",
	[DML__MSG_TYPE__MIGRATE] = "migrate",
	[DML__MSG_TYPE__CHECKPOINT] = "checkpoint",
	[DML__MSG_TYPE__EVICT] = "evict",
	[DML__MSG_TYPE__STRAGGLER] = "straggler",
};

const char *dml_msg_type_name(int type)
{
	if (!type_is_known(type) || !msg_type_names[type])
		return "unknown";
	return msg_type_names[type];
}
