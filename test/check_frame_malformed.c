/*
 * Tests of proto/frame.c on malformed frames (see check_frame.c): every
 * class is refused with its own code, limits are checked from the header
 * before anything is decoded, and counts inside a message must agree.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_frame.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/util.h"

START_TEST(test_bad_magic)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h;
	uint8_t buf[DML_FRAME_HEADER_LEN];

	dml_frame_limits_default(&lim);
	dml_frame_header_encode(buf, 10, 0);
	memcpy(buf, "GET ", 4);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_MAGIC);
}
END_TEST

START_TEST(test_bad_version)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h;
	uint8_t buf[DML_FRAME_HEADER_LEN];

	dml_frame_limits_default(&lim);
	dml_frame_header_encode(buf, 10, 0);
	dml_store_le16(buf + 4, DML_PROTOCOL_VERSION + 1);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_VERSION);
	dml_store_le16(buf + 4, 0);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_VERSION);
}
END_TEST

START_TEST(test_reserved_flags)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h;
	uint8_t buf[DML_FRAME_HEADER_LEN];

	dml_frame_limits_default(&lim);
	dml_frame_header_encode(buf, 10, 0);
	dml_store_le16(buf + 6, 0x8000);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_FLAGS);
	dml_store_le16(buf + 6, 1);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_FLAGS);
}
END_TEST

START_TEST(test_meta_len_limits)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h;
	uint8_t buf[DML_FRAME_HEADER_LEN];

	dml_frame_limits_default(&lim);
	dml_frame_header_encode(buf, 0, 0);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_META);
	dml_frame_header_encode(buf, lim.max_meta + 1, 0);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_META);
	dml_frame_header_encode(buf, UINT32_MAX, 0);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_META);
}
END_TEST

START_TEST(test_payload_limit)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h;
	uint8_t buf[DML_FRAME_HEADER_LEN];

	dml_frame_limits_default(&lim);
	dml_frame_header_encode(buf, 10, lim.max_payload + 1);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_PAYLOAD);
	dml_frame_header_encode(buf, 10, UINT32_MAX);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), DML_EFRAME_PAYLOAD);
}
END_TEST

/* A bad header is refused from its 16 bytes, before the rest arrives. */
START_TEST(test_header_checked_early)
{
	struct dml_frame_limits lim;
	uint8_t buf[DML_FRAME_HEADER_LEN + 4];
	struct dml_frame f;
	size_t flen = 0;

	dml_frame_limits_default(&lim);
	dml_frame_header_encode(buf, 100, lim.max_payload + 1);
	ck_assert_int_eq(dml_frame_parse(buf, 15, &lim, &f, &flen), DML_FRAME_INCOMPLETE);
	ck_assert_int_eq(dml_frame_parse(buf, 16, &lim, &f, &flen), DML_EFRAME_PAYLOAD);
	dml_frame_header_encode(buf, 100, 0);
	buf[0] = 'X';
	ck_assert_int_eq(dml_frame_parse(buf, 16, &lim, &f, &flen), DML_EFRAME_MAGIC);
	dml_frame_header_encode(buf, 100, 0);
	ck_assert_int_eq(dml_frame_parse(buf, 20, &lim, &f, &flen), DML_FRAME_INCOMPLETE);
	ck_assert_ptr_null(f.meta);
}
END_TEST

START_TEST(test_truncated)
{
	enum { N = 2, W = 2 };
	uint8_t payload[N * 8 + N * W * 4];
	struct dml_frame_limits lim;
	struct dml_frame f;
	struct built b;
	size_t flen = 0;
	Dml__Meta m;

	dml_frame_limits_default(&lim);
	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.num_keys = N;
	fill_keys(payload, N, 5);
	fill_values(payload + N * 8, N * W, 1.0f);
	b = build_frame(&m, payload, sizeof(payload));

	/* The stream ends inside the header. */
	ck_assert_int_eq(dml_frame_parse(b.buf, 9, &lim, &f, &flen),
			 DML_FRAME_INCOMPLETE);
	ck_assert_int_eq(dml_frame_eof(9), DML_EFRAME_TRUNC);
	/* ... or inside the payload. */
	ck_assert_int_eq(dml_frame_parse(b.buf, b.len - 3, &lim, &f, &flen),
			 DML_FRAME_INCOMPLETE);
	ck_assert_int_eq(dml_frame_eof(b.len - 3), DML_EFRAME_TRUNC);
	/* Between frames nothing is pending. */
	ck_assert_int_eq(dml_frame_eof(0), 0);
	built_free(&b);
}
END_TEST

START_TEST(test_length_mismatch)
{
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, 1);
	m.num_keys = 2;
	m.payload_bytes = 8;
	b = build_raw(&m, 12);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_LENGTH);
	built_free(&b);

	/* A control message claiming a payload its header does not carry. */
	meta_data(&m, DML__MSG_TYPE__HEARTBEAT, 0);
	m.payload_bytes = 4;
	b = build_raw(&m, 0);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_LENGTH);
	built_free(&b);
}
END_TEST

START_TEST(test_protobuf_garbage)
{
	/* An unterminated varint tag; a length-delimited field past the end. */
	static const uint8_t junk1[] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t junk2[] = { 0x82, 0x01, 0x7f, 0x08 };
	/* Wire type 3 (start group) is not valid in proto3. */
	static const uint8_t junk3[] = { 0x0b, 0x08, 0x01 };
	struct built b;

	b = build_meta_bytes(junk1, sizeof(junk1));
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_DECODE);
	built_free(&b);
	b = build_meta_bytes(junk2, sizeof(junk2));
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_DECODE);
	built_free(&b);
	b = build_meta_bytes(junk3, sizeof(junk3));
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_DECODE);
	built_free(&b);
}
END_TEST

START_TEST(test_missing_submessage)
{
	static const Dml__MsgType types[] = {
		DML__MSG_TYPE__CHALLENGE, DML__MSG_TYPE__HELLO, DML__MSG_TYPE__WELCOME,
		DML__MSG_TYPE__ERROR,
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(types); i++) {
		struct built b;
		Dml__Meta m;

		meta_data(&m, types[i], 0);
		b = build_frame(&m, NULL, 0);
		ck_assert_int_eq(parse_default(&b), DML_EFRAME_DECODE);
		built_free(&b);
	}
}
END_TEST

START_TEST(test_unknown_type)
{
	static const int types[] = { 0, 31, 99, -1 };

	for (size_t i = 0; i < DML_ARRAY_LEN(types); i++) {
		struct built b;
		Dml__Meta m;

		meta_data(&m, (Dml__MsgType)types[i], 0);
		b = build_raw(&m, 0);
		ck_assert_int_eq(parse_default(&b), DML_EFRAME_TYPE);
		built_free(&b);
	}
	ck_assert_str_eq(dml_msg_type_name(0), "unknown");
	ck_assert_str_eq(dml_msg_type_name(31), "unknown");
	ck_assert_str_eq(dml_msg_type_name(DML__MSG_TYPE__EVICT), "evict");
	ck_assert_str_eq(dml_msg_type_name(DML__MSG_TYPE__STRAGGLER), "straggler");
	ck_assert_str_eq(dml_msg_type_name(-3), "unknown");
}
END_TEST

START_TEST(test_sparse_count_mismatch)
{
	enum { N = 3, W = 2 };
	struct built b;
	Dml__Meta m;

	/* PUSH: keys and values, one value short. */
	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.num_keys = N;
	m.payload_bytes = N * 8 + N * W * 4 - 4;
	b = build_raw(&m, (uint32_t)m.payload_bytes);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* PULL: values where only keys belong. */
	meta_data(&m, DML__MSG_TYPE__PULL, W);
	m.num_keys = N;
	m.payload_bytes = N * 8 + N * W * 4;
	b = build_raw(&m, (uint32_t)m.payload_bytes);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* PULL_REPLY: one value too many. */
	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, W);
	m.num_keys = N;
	m.payload_bytes = N * W * 4 + 4;
	b = build_raw(&m, (uint32_t)m.payload_bytes);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* Zero width. */
	meta_data(&m, DML__MSG_TYPE__PUSH, 0);
	m.num_keys = N;
	m.payload_bytes = N * 8;
	b = build_raw(&m, (uint32_t)m.payload_bytes);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* A control message with a payload. */
	meta_data(&m, DML__MSG_TYPE__ACK, 0);
	m.payload_bytes = 8;
	b = build_raw(&m, 8);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
}
END_TEST

START_TEST(test_dense_count_mismatch)
{
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PUSH, 1);
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = 4;
	m.payload_bytes = 12;
	b = build_raw(&m, 12);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* A dense PULL carries no payload. */
	meta_data(&m, DML__MSG_TYPE__PULL, 1);
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = 4;
	m.payload_bytes = 16;
	b = build_raw(&m, 16);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* Dense requests name no keys individually. */
	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, 1);
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = 4;
	m.num_keys = 4;
	m.payload_bytes = 16;
	b = build_raw(&m, 16);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);

	/* Empty and inverted ranges. */
	meta_data(&m, DML__MSG_TYPE__PULL, 1);
	m.dense = 1;
	m.key_begin = 9;
	m.key_end = 9;
	b = build_raw(&m, 0);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
	m.key_end = 3;
	b = build_raw(&m, 0);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
}
END_TEST

START_TEST(test_too_many_keys)
{
	struct dml_frame_limits lim;
	uint8_t keys[5 * 8];
	struct built b;
	Dml__Meta m;

	dml_frame_limits_default(&lim);
	lim.max_keys = 4;
	meta_data(&m, DML__MSG_TYPE__PULL, 1);
	m.num_keys = 5;
	fill_keys(keys, 5, 0);
	b = build_frame(&m, keys, sizeof(keys));
	ck_assert_int_eq(parse_with(&b, &lim), DML_EFRAME_KEYS);
	lim.max_keys = 5;
	ck_assert_int_eq(parse_with(&b, &lim), 0);
	built_free(&b);

	/* Far over the default limit; the payload claim is never trusted. */
	dml_frame_limits_default(&lim);
	meta_data(&m, DML__MSG_TYPE__PULL, 1);
	m.num_keys = lim.max_keys + 1;
	m.payload_bytes = 8;
	b = build_raw(&m, 8);
	ck_assert_int_eq(parse_with(&b, &lim), DML_EFRAME_KEYS);
	built_free(&b);
}
END_TEST

START_TEST(test_zero_keys)
{
	static const Dml__MsgType types[] = {
		DML__MSG_TYPE__PUSH, DML__MSG_TYPE__PULL, DML__MSG_TYPE__PULL_REPLY,
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(types); i++) {
		struct built b;
		Dml__Meta m;

		meta_data(&m, types[i], 4);
		b = build_raw(&m, 0);
		ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
		built_free(&b);
	}
}
END_TEST

/*
 * Scans (dml.proto): a PULL naming a hash range and carrying nothing; its
 * reply with num_keys keys then their values, none at all allowed; anything
 * else with scan set, or counts that disagree, refused.
 */
START_TEST(test_scan_frames)
{
	struct dml_frame_limits lim;
	uint8_t payload[3 * (8 + 2 * 4)];
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PULL, 2);
	m.scan = 1;
	m.key_begin = 100;
	m.key_end = 1u << 20;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert(f.meta->scan && f.meta->key_end == 1u << 20 && f.meta->num_keys == 0);
	dml_frame_release(&f);
	built_free(&b);
	/* The reply: three rows, keys then values; and none. */
	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, 2);
	m.scan = 1;
	m.num_keys = 3;
	fill_keys(payload, 3, 5);
	fill_values(payload + 24, 6, 1.5f);
	b = build_frame(&m, payload, sizeof(payload));
	parse_ok(&b, &f);
	ck_assert_uint_eq(f.hdr.payload_len, sizeof(payload));
	dml_frame_release(&f);
	built_free(&b);
	m.num_keys = 0;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	dml_frame_release(&f);
	built_free(&b);
	/* Keys without their values. */
	m.num_keys = 3;
	b = build_frame(&m, payload, 24);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
	/* More rows than the reader takes. */
	dml_frame_limits_default(&lim);
	lim.max_keys = 2;
	b = build_frame(&m, payload, sizeof(payload));
	ck_assert_int_eq(parse_with(&b, &lim), DML_EFRAME_KEYS);
	built_free(&b);
	/* A scan with keys, of a dense range, of a backwards range, or a push. */
	meta_data(&m, DML__MSG_TYPE__PULL, 2);
	m.scan = 1;
	m.num_keys = 3;
	b = build_frame(&m, payload, 24);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
	m.num_keys = 0;
	m.dense = 1;
	m.key_end = 10;
	b = build_frame(&m, NULL, 0);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
	m.dense = 0;
	m.key_begin = 11;
	b = build_frame(&m, NULL, 0);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
	meta_data(&m, DML__MSG_TYPE__PUSH, 2);
	m.scan = 1;
	m.num_keys = 3;
	b = build_frame(&m, payload, sizeof(payload));
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	built_free(&b);
}
END_TEST

START_TEST(test_dense_overflow)
{
	struct built b;
	uint64_t count;
	Dml__Meta m;

	/* (2^64 - 1) * 3 values do not fit in 64 bits. */
	meta_data(&m, DML__MSG_TYPE__PUSH, 3);
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = UINT64_MAX;
	m.payload_bytes = 12;
	b = build_raw(&m, 12);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	ck_assert_int_eq(dml_meta_value_count(&m, &count), DML_EFRAME_COUNT);
	built_free(&b);

	/* The count fits, its size in bytes does not; wrapping would give 4. */
	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, 1);
	m.dense = 1;
	m.key_begin = 1;
	m.key_end = (1ull << 62) + 2;
	m.payload_bytes = 4;
	b = build_raw(&m, 4);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_COUNT);
	ck_assert_int_eq(dml_meta_value_count(&m, &count), 0);
	ck_assert_uint_eq(count, (1ull << 62) + 1);
	built_free(&b);

	/* A sparse count is at most (2^32 - 1)^2, which always fits. */
	meta_data(&m, DML__MSG_TYPE__PUSH, UINT32_MAX);
	m.num_keys = 4;
	ck_assert_int_eq(dml_meta_value_count(&m, &count), 0);
	ck_assert_uint_eq(count, 4ull * UINT32_MAX);
}
END_TEST

START_TEST(test_pull_reply_over_limit)
{
	struct dml_frame_limits lim;
	uint8_t keys[4 * 8];
	struct built b;
	Dml__Meta m;

	dml_frame_limits_default(&lim);
	/* 2^26 values of 4 bytes is exactly the limit; one more key is over. */
	meta_data(&m, DML__MSG_TYPE__PULL, 1);
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = lim.max_payload / 4;
	b = build_frame(&m, NULL, 0);
	ck_assert_int_eq(parse_with(&b, &lim), 0);
	built_free(&b);
	m.key_end++;
	b = build_frame(&m, NULL, 0);
	ck_assert_int_eq(parse_with(&b, &lim), DML_EFRAME_PAYLOAD);
	built_free(&b);

	/* The same bound holds for a sparse pull's reply. */
	meta_data(&m, DML__MSG_TYPE__PULL, 1u << 30);
	m.num_keys = 4;
	fill_keys(keys, 4, 0);
	b = build_frame(&m, keys, sizeof(keys));
	ck_assert_int_eq(parse_with(&b, &lim), DML_EFRAME_PAYLOAD);
	built_free(&b);
}
END_TEST

/*
 * Which dtypes a data frame may carry, and the payload each asks for: a
 * sparse request of one key of width 1 (8 key bytes, then the values), a
 * reply of its one value, a dense MIGRATE of one key.
 */
START_TEST(test_dtypes)
{
	static const struct {
		Dml__MsgType type;
		int dtype;
		int scan;
		uint32_t values_len;    /* payload after the key, if any */
		int want;
	} cases[] = {
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__F32, 0, 4, 0 },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__F16, 0, 2, 0 },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__F16, 0, 4, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__BF16, 0, 2, 0 },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__INT8, 0, 1 + 4, 0 },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__INT8, 0, 1, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK, 0, 4 + 8, 0 },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK, 0, 4, 0 },            /* none sent */
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK, 0, 4 + 16, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK, 0, 3, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK, 0, 4 + 7, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK16, 0, 4 + 3, 0 },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK16, 0, 4 + 7, 0 },   /* a 5-byte gap */
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK16, 0, 4 + 14, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, DML__DTYPE__TOPK16, 0, 3, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PUSH, 6, 0, 4, DML_ESHAPE },
		{ DML__MSG_TYPE__PUSH, -1, 0, 4, DML_ESHAPE },
		{ DML__MSG_TYPE__PULL, DML__DTYPE__F16, 0, 0, 0 },
		{ DML__MSG_TYPE__PULL, DML__DTYPE__INT8, 0, 0, 0 },
		{ DML__MSG_TYPE__PULL, DML__DTYPE__TOPK, 0, 0, DML_ESHAPE },
		{ DML__MSG_TYPE__PULL, DML__DTYPE__TOPK16, 0, 0, DML_ESHAPE },
		{ DML__MSG_TYPE__PULL, DML__DTYPE__F16, 1, 0, DML_ESHAPE },
		{ DML__MSG_TYPE__PULL_REPLY, DML__DTYPE__F16, 0, 2, 0 },
		{ DML__MSG_TYPE__PULL_REPLY, DML__DTYPE__F16, 0, 4, DML_EFRAME_COUNT },
		{ DML__MSG_TYPE__PULL_REPLY, DML__DTYPE__TOPK, 0, 4 + 8, DML_ESHAPE },
		{ DML__MSG_TYPE__PULL_REPLY, DML__DTYPE__TOPK16, 0, 4 + 3, DML_ESHAPE },
		{ DML__MSG_TYPE__MIGRATE, DML__DTYPE__F16, 0, 2, DML_ESHAPE },
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		uint8_t payload[8 + 32];
		uint32_t len = cases[i].values_len;
		struct built b;
		Dml__Meta m;

		memset(payload, 0, sizeof(payload));
		dml_store_le32(payload + 8, 1);     /* a topk count of 1 */
		meta_data(&m, cases[i].type, 1);
		m.dtype = (Dml__DType)cases[i].dtype;
		if (cases[i].scan) {
			m.scan = 1;
		} else if (cases[i].type == DML__MSG_TYPE__MIGRATE) {
			m.dense = 1;
			m.key_end = 1;
		} else {
			m.num_keys = 1;
			if (cases[i].type != DML__MSG_TYPE__PULL_REPLY)
				len += 8;
		}
		b = build_frame(&m, cases[i].type == DML__MSG_TYPE__PULL_REPLY ? payload + 8
									    : payload, len);
		ck_assert_msg(parse_default(&b) == cases[i].want, "case %zu: %d, want %d", i,
			      parse_default(&b), cases[i].want);
		built_free(&b);
	}
}
END_TEST

/* Meta.contributors, Meta.owner and Meta.forward_codec: where they may
 * appear, how many, how long, which codecs; an aggregator's CLOCK names
 * workers and clocks, no sequence numbers. */
START_TEST(test_forward_fields)
{
	static const struct {
		Dml__MsgType type;
		size_t n;               /* contributors */
		uint32_t worker, seq;   /* the last one's */
		size_t owner_len;
		int want;
		const char *codec;      /* Meta.forward_codec */
		uint64_t clock;         /* every contributor's */
	} cases[] = {
		{ DML__MSG_TYPE__PUSH, 1, 1, 1, 0, 0, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, 2, 2, 9, 0, 0, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, DML_MAX_CONTRIBUTORS, 5, 5, 0, 0, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, DML_MAX_CONTRIBUTORS + 1, 5, 5, 0, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, 2, 0, 9, 0, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, 2, 2, 0, 0, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PULL, 1, 1, 1, 0, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__MIGRATE, 1, 1, 1, 0, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, 14, 0, NULL, 0 },
		{ DML__MSG_TYPE__PULL, 0, 0, 0, DML_MAX_OWNER_LEN, 0, NULL, 0 },
		{ DML__MSG_TYPE__PULL, 0, 0, 0, DML_MAX_OWNER_LEN + 1, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, DML_MAX_OWNER_LEN + 1, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PULL_REPLY, 0, 0, 0, 14, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__MIGRATE, 0, 0, 0, 14, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, 14, 0, "topk:0.01", 0 },
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, 14, 0, "", 0 },
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, 14, DML_EFRAME_DECODE, "gzip", 0 },
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, 14, DML_EFRAME_DECODE,
		  "topk:0.0100000000000000000000000", 0 },   /* 32 bytes */
		{ DML__MSG_TYPE__PUSH, 0, 0, 0, 0, DML_EFRAME_DECODE, "fp16", 0 },
		{ DML__MSG_TYPE__PULL, 0, 0, 0, 14, 0, "topk:0.05", 0 },
		{ DML__MSG_TYPE__PULL, 0, 0, 0, 0, DML_EFRAME_DECODE, "fp16", 0 },
		{ DML__MSG_TYPE__PULL_REPLY, 0, 0, 0, 0, DML_EFRAME_DECODE, "fp16", 0 },
		{ DML__MSG_TYPE__PUSH, 2, 2, 9, 0, 0, NULL, 7 },
		{ DML__MSG_TYPE__CLOCK, 2, 2, 0, 0, 0, NULL, 7 },
		{ DML__MSG_TYPE__CLOCK, 1, 1, 3, 0, DML_EFRAME_DECODE, NULL, 7 },
		{ DML__MSG_TYPE__CLOCK, 1, 1, 0, 0, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__CLOCK, 1, 0, 0, 0, DML_EFRAME_DECODE, NULL, 7 },
		{ DML__MSG_TYPE__CLOCK, 0, 0, 0, 14, 0, NULL, 0 },
		{ DML__MSG_TYPE__CLOCK, 0, 0, 0, DML_MAX_OWNER_LEN + 1, DML_EFRAME_DECODE, NULL, 0 },
		{ DML__MSG_TYPE__CLOCK, 0, 0, 0, 14, DML_EFRAME_DECODE, "fp16", 0 },
	};
	struct dml_frame_limits lim;

	/* 4096 contributors with random incarnations need more than 64 KiB of Meta. */
	dml_frame_limits_default(&lim);
	lim.max_meta = 1u << 20;
	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		size_t n = cases[i].n;
		Dml__Contributor *c = dml_xcalloc(n ? n : 1, sizeof(*c));
		Dml__Contributor **cp = dml_xcalloc(n ? n : 1, sizeof(*cp));
		char owner[DML_MAX_OWNER_LEN + 2];
		uint8_t payload[8 + 4] = { 0 };
		struct built b;
		Dml__Meta m;
		int rc;

		for (size_t j = 0; j < n; j++) {
			dml__contributor__init(&c[j]);
			c[j].worker = (uint32_t)j + 1;
			c[j].incarnation = 0x9e3779b97f4a7c15ull * (j + 1);
			c[j].seq = cases[i].type == DML__MSG_TYPE__CLOCK ? 0 : j + 1;
			c[j].clock = cases[i].clock;
			cp[j] = &c[j];
		}
		if (n) {
			c[n - 1].worker = cases[i].worker;
			c[n - 1].seq = cases[i].seq;
		}
		memset(owner, 'h', cases[i].owner_len);
		owner[cases[i].owner_len] = '\0';
		meta_data(&m, cases[i].type, 1);
		m.n_contributors = n;
		m.contributors = cp;
		m.owner = owner;
		m.forward_codec = (char *)cases[i].codec;
		if (cases[i].type == DML__MSG_TYPE__CLOCK) {
			m.clock = 3;
			b = build_frame(&m, NULL, 0);
		} else if (cases[i].type == DML__MSG_TYPE__MIGRATE) {
			m.dense = 1;
			m.key_end = 1;
			b = build_frame(&m, payload, 4);
		} else if (cases[i].type == DML__MSG_TYPE__PULL_REPLY) {
			m.num_keys = 1;
			b = build_frame(&m, payload + 8, 4);           /* the value */
		} else {
			m.num_keys = 1;
			b = build_frame(&m, payload, cases[i].type == DML__MSG_TYPE__PULL ? 8 : 12);
		}
		rc = parse_with(&b, &lim);
		ck_assert_msg(rc == cases[i].want, "case %zu: %d, want %d", i, rc, cases[i].want);
		built_free(&b);
		free(c);
		free(cp);
	}
}
END_TEST

/* Meta.pace, Meta.delta_codec, Meta.held_version and Meta.delta: where. */
START_TEST(test_pace_and_delta_fields)
{
	static const struct {
		Dml__MsgType type;
		uint32_t pace;
		const char *delta_codec;
		uint64_t held;
		int delta, want;
	} cases[] = {
		{ DML__MSG_TYPE__PUSH, DML_PACE_CLOCKED, NULL, 0, 0, 0 },
		{ DML__MSG_TYPE__PUSH, DML_PACE_ASYNC + 1, NULL, 0, 0, DML_EFRAME_DECODE },
		{ DML__MSG_TYPE__PULL, DML_PACE_ASYNC, NULL, 0, 0, DML_EFRAME_DECODE },
		{ DML__MSG_TYPE__PULL, 0, "topk:0.05", 5, 0, 0 },
		{ DML__MSG_TYPE__PULL, 0, "int8", 0, 0, 0 },
		{ DML__MSG_TYPE__PULL, 0, "none", 0, 0, DML_EFRAME_DECODE },
		{ DML__MSG_TYPE__PULL, 0, NULL, 5, 0, DML_EFRAME_DECODE },
		{ DML__MSG_TYPE__PUSH, 0, "fp16", 0, 0, DML_EFRAME_DECODE },
		{ DML__MSG_TYPE__PULL_REPLY, 0, NULL, 5, 1, 0 },
		{ DML__MSG_TYPE__PUSH, 0, NULL, 0, 1, DML_EFRAME_DECODE },
	};
	float value = 1;

	for (size_t i = 0; i < DML_ARRAY_LEN(cases); i++) {
		struct built b;
		Dml__Meta m;
		int rc;

		meta_data(&m, cases[i].type, 1);
		m.dense = 1;
		m.key_end = 1;
		m.pace = cases[i].pace;
		m.delta_codec = (char *)cases[i].delta_codec;
		m.held_version = cases[i].held;
		m.delta = cases[i].delta;
		b = build_frame(&m, &value, cases[i].type == DML__MSG_TYPE__PULL ? 0 : 4);
		rc = parse_default(&b);
		ck_assert_msg(rc == cases[i].want, "case %zu: %d, want %d", i, rc, cases[i].want);
		built_free(&b);
	}
}
END_TEST

/* The tests of malformed frames, in the order the suite runs them. */
void frame_tests_malformed(TCase *tc)
{
	tcase_add_test(tc, test_bad_magic);
	tcase_add_test(tc, test_bad_version);
	tcase_add_test(tc, test_reserved_flags);
	tcase_add_test(tc, test_meta_len_limits);
	tcase_add_test(tc, test_payload_limit);
	tcase_add_test(tc, test_header_checked_early);
	tcase_add_test(tc, test_truncated);
	tcase_add_test(tc, test_length_mismatch);
	tcase_add_test(tc, test_protobuf_garbage);
	tcase_add_test(tc, test_missing_submessage);
	tcase_add_test(tc, test_unknown_type);
	tcase_add_test(tc, test_sparse_count_mismatch);
	tcase_add_test(tc, test_dense_count_mismatch);
	tcase_add_test(tc, test_too_many_keys);
	tcase_add_test(tc, test_zero_keys);
	tcase_add_test(tc, test_dense_overflow);
	tcase_add_test(tc, test_scan_frames);
	tcase_add_test(tc, test_pull_reply_over_limit);
	tcase_add_test(tc, test_dtypes);
	tcase_add_test(tc, test_forward_fields);
	tcase_add_test(tc, test_pace_and_delta_fields);
}
