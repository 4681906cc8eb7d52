/*
 * Unit tests for proto/frame.c: every message type survives encode and parse,
 * every class of malformed frame is refused with its own code, a frame is
 * found exactly at its last byte, and random or mutated input never crashes
 * the parser or makes it answer outside its contract.
 *
 * These tests build frames by hand and must never depend on a network or on
 * another module. Leak-freedom of every error path is checked by running this
 * program in the sanitizer build (LeakSanitizer fails the forked test).
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "dml_error.h"
#include "frame.h"
#include "util.h"

/* A frame built by a test: head (header + meta) then payload, one buffer. */
struct built {
	uint8_t *buf;
	size_t len;
};

static void built_free(struct built *b)
{
	free(b->buf);
	b->buf = NULL;
	b->len = 0;
}

/* Encodes m as a real sender would, then appends the payload bytes. */
static struct built build_frame(Dml__Meta *m, const void *payload, uint32_t plen)
{
	size_t cap = dml_frame_head_size(m) + plen;
	struct built b = { dml_xmalloc(cap), 0 };
	size_t head = dml_frame_encode_head(m, plen, b.buf, cap);

	ck_assert_uint_gt(head, DML_FRAME_HEADER_LEN);
	ck_assert_uint_le(head + plen, cap);
	if (plen)
		memcpy(b.buf + head, payload, plen);
	b.len = head + plen;
	return b;
}

/*
 * Packs m exactly as it is (payload_bytes untouched) under a header that
 * claims hdr_plen payload bytes, followed by that many zero bytes: the way to
 * make the two lengths disagree, or counts and payload disagree.
 */
static struct built build_raw(const Dml__Meta *m, uint32_t hdr_plen)
{
	size_t mlen = dml__meta__get_packed_size(m);
	struct built b;

	b.len = DML_FRAME_HEADER_LEN + mlen + hdr_plen;
	b.buf = dml_xcalloc(1, b.len);
	dml_frame_header_encode(b.buf, (uint32_t)mlen, hdr_plen);
	dml__meta__pack(m, b.buf + DML_FRAME_HEADER_LEN);
	return b;
}

/* Header plus arbitrary metadata bytes, no payload. */
static struct built build_meta_bytes(const uint8_t *meta, size_t mlen)
{
	struct built b;

	b.len = DML_FRAME_HEADER_LEN + mlen;
	b.buf = dml_xmalloc(b.len);
	dml_frame_header_encode(b.buf, (uint32_t)mlen, 0);
	memcpy(b.buf + DML_FRAME_HEADER_LEN, meta, mlen);
	return b;
}

static int parse_with(const struct built *b, const struct dml_frame_limits *lim)
{
	struct dml_frame f;
	size_t flen = 0;
	int rc = dml_frame_parse(b->buf, b->len, lim, &f, &flen);

	if (rc == 0) {
		ck_assert_uint_eq(flen, b->len);
		dml_frame_release(&f);
	} else {
		ck_assert_ptr_null(f.meta);
	}
	return rc;
}

static int parse_default(const struct built *b)
{
	struct dml_frame_limits lim;

	dml_frame_limits_default(&lim);
	return parse_with(b, &lim);
}

/* Parses a frame that must be valid and whole; caller releases *f. */
static void parse_ok(const struct built *b, struct dml_frame *f)
{
	struct dml_frame_limits lim;
	size_t flen = 0;

	dml_frame_limits_default(&lim);
	ck_assert_int_eq(dml_frame_parse(b->buf, b->len, &lim, f, &flen), 0);
	ck_assert_uint_eq(flen, b->len);
	ck_assert_ptr_nonnull(f->meta);
	ck_assert_uint_eq(f->hdr.payload_len, f->meta->payload_bytes);
	ck_assert_ptr_eq(f->payload, b->buf + b->len - f->hdr.payload_len);
}

static void meta_data(Dml__Meta *m, Dml__MsgType type, uint32_t width)
{
	dml__meta__init(m);
	m->type = type;
	m->request_id = 0x1122334455667788ull;
	m->sender = 7;
	m->job = 3;
	m->table = 2;
	m->value_width = width;
}

/* n little-endian u64 keys starting at k0, spaced by 3. */
static void fill_keys(uint8_t *out, uint32_t n, uint64_t k0)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t k = k0 + 3ull * i;

		memcpy(out + 8ull * i, &k, sizeof(k));
	}
}

static void fill_values(uint8_t *out, size_t count, float base)
{
	for (size_t i = 0; i < count; i++) {
		float v = base + 0.5f * (float)i;

		memcpy(out + 4 * i, &v, sizeof(v));
	}
}

static const uint8_t nonce_a[32] = {
	1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
	17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
};

static void check_handshake_type(Dml__MsgType type)
{
	Dml__Meta m;
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	uint8_t proof[32];
	struct dml_frame f;
	struct built b;

	memset(proof, 0xa5, sizeof(proof));
	meta_data(&m, type, 0);
	hs.role = DML__ROLE__WORKER;
	hs.node_id = 42;
	hs.protocol_version = DML_PROTOCOL_VERSION;
	hs.cluster = (char *)"prod-eu";
	hs.nonce.data = (uint8_t *)nonce_a;
	hs.nonce.len = sizeof(nonce_a);
	hs.proof.data = proof;
	hs.proof.len = sizeof(proof);
	hs.incarnation = 0xdeadbeefcafeull;
	hs.job = 9;
	hs.zone = (char *)"rack-3";
	m.handshake = &hs;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert_int_eq(f.meta->type, type);
	ck_assert_ptr_nonnull(f.meta->handshake);
	ck_assert_int_eq(f.meta->handshake->role, DML__ROLE__WORKER);
	ck_assert_uint_eq(f.meta->handshake->node_id, 42);
	ck_assert_uint_eq(f.meta->handshake->protocol_version, DML_PROTOCOL_VERSION);
	ck_assert_str_eq(f.meta->handshake->cluster, "prod-eu");
	ck_assert_uint_eq(f.meta->handshake->nonce.len, 32);
	ck_assert_mem_eq(f.meta->handshake->nonce.data, nonce_a, 32);
	ck_assert_uint_eq(f.meta->handshake->proof.len, 32);
	ck_assert_mem_eq(f.meta->handshake->proof.data, proof, 32);
	ck_assert_uint_eq(f.meta->handshake->incarnation, 0xdeadbeefcafeull);
	ck_assert_uint_eq(f.meta->handshake->job, 9);
	ck_assert_str_eq(f.meta->handshake->zone, "rack-3");
	ck_assert_uint_eq(f.hdr.payload_len, 0);
	dml_frame_release(&f);
	ck_assert_ptr_null(f.meta);
	built_free(&b);
}

START_TEST(test_roundtrip_handshake)
{
	check_handshake_type(DML__MSG_TYPE__CHALLENGE);
	check_handshake_type(DML__MSG_TYPE__HELLO);
	check_handshake_type(DML__MSG_TYPE__WELCOME);
}
END_TEST

START_TEST(test_roundtrip_sparse_push)
{
	enum { N = 5, W = 3 };
	uint8_t payload[N * 8 + N * W * 4];
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.num_keys = N;
	m.seq = 77;
	m.clock = 12;
	fill_keys(payload, N, 1000);
	fill_values(payload + N * 8, N * W, -2.0f);
	b = build_frame(&m, payload, sizeof(payload));
	parse_ok(&b, &f);
	ck_assert_int_eq(f.meta->type, DML__MSG_TYPE__PUSH);
	ck_assert_uint_eq(f.meta->request_id, 0x1122334455667788ull);
	ck_assert_uint_eq(f.meta->sender, 7);
	ck_assert_uint_eq(f.meta->job, 3);
	ck_assert_uint_eq(f.meta->table, 2);
	ck_assert_uint_eq(f.meta->seq, 77);
	ck_assert_uint_eq(f.meta->clock, 12);
	ck_assert_uint_eq(f.meta->num_keys, N);
	ck_assert_uint_eq(f.meta->value_width, W);
	ck_assert(!f.meta->dense);
	ck_assert_uint_eq(f.hdr.payload_len, sizeof(payload));
	ck_assert_mem_eq(f.payload, payload, sizeof(payload));
	ck_assert_uint_eq(dml_load_le64(f.payload + 8 * 4), 1012);
	dml_frame_release(&f);
	built_free(&b);
}
END_TEST

START_TEST(test_roundtrip_dense_push)
{
	enum { BEGIN = 100, END = 104, W = 2 };
	uint8_t payload[(END - BEGIN) * W * 4];
	struct dml_frame f;
	struct built b;
	Dml__Meta m;
	float v;

	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.dense = 1;
	m.key_begin = BEGIN;
	m.key_end = END;
	m.seq = 1;
	fill_values(payload, (END - BEGIN) * W, 0.25f);
	b = build_frame(&m, payload, sizeof(payload));
	parse_ok(&b, &f);
	ck_assert(f.meta->dense);
	ck_assert_uint_eq(f.meta->key_begin, BEGIN);
	ck_assert_uint_eq(f.meta->key_end, END);
	ck_assert_uint_eq(f.meta->num_keys, 0);
	ck_assert_mem_eq(f.payload, payload, sizeof(payload));
	memcpy(&v, f.payload + 4 * 7, sizeof(v));
	ck_assert(v == 0.25f + 3.5f);
	dml_frame_release(&f);
	built_free(&b);
}
END_TEST

START_TEST(test_roundtrip_pull)
{
	enum { N = 4, W = 8 };
	uint8_t keys[N * 8];
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PULL, W);
	m.num_keys = N;
	m.clock = 5;
	fill_keys(keys, N, 1ull << 40);
	b = build_frame(&m, keys, sizeof(keys));
	parse_ok(&b, &f);
	ck_assert_int_eq(f.meta->type, DML__MSG_TYPE__PULL);
	ck_assert_uint_eq(f.meta->clock, 5);
	ck_assert_mem_eq(f.payload, keys, sizeof(keys));
	ck_assert_uint_eq(dml_load_le64(f.payload + 24), (1ull << 40) + 9);
	dml_frame_release(&f);
	built_free(&b);

	/* Dense: the range says it all, the payload is empty. */
	meta_data(&m, DML__MSG_TYPE__PULL, W);
	m.dense = 1;
	m.key_begin = 0;
	m.key_end = 1000;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert(f.meta->dense);
	ck_assert_uint_eq(f.meta->key_end, 1000);
	ck_assert_uint_eq(f.hdr.payload_len, 0);
	dml_frame_release(&f);
	built_free(&b);
}
END_TEST

START_TEST(test_roundtrip_pull_reply)
{
	enum { N = 3, W = 4 };
	uint8_t vals[N * W * 4];
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, W);
	m.num_keys = N;
	m.min_clock = 41;
	fill_values(vals, N * W, 9.0f);
	b = build_frame(&m, vals, sizeof(vals));
	parse_ok(&b, &f);
	ck_assert_int_eq(f.meta->type, DML__MSG_TYPE__PULL_REPLY);
	ck_assert_uint_eq(f.meta->min_clock, 41);
	ck_assert_mem_eq(f.payload, vals, sizeof(vals));
	dml_frame_release(&f);
	built_free(&b);

	meta_data(&m, DML__MSG_TYPE__PULL_REPLY, W);
	m.dense = 1;
	m.key_begin = 7;
	m.key_end = 7 + N;
	b = build_frame(&m, vals, sizeof(vals));
	parse_ok(&b, &f);
	ck_assert(f.meta->dense);
	ck_assert_mem_eq(f.payload, vals, sizeof(vals));
	dml_frame_release(&f);
	built_free(&b);
}
END_TEST

/* Types with no payload and no required submessage. */
START_TEST(test_roundtrip_control)
{
	static const Dml__MsgType types[] = {
		DML__MSG_TYPE__ACK, DML__MSG_TYPE__CLOCK, DML__MSG_TYPE__HEARTBEAT,
		DML__MSG_TYPE__BYE, DML__MSG_TYPE__STATS,
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(types); i++) {
		struct dml_frame f;
		struct built b;
		Dml__Meta m;

		meta_data(&m, types[i], 0);
		m.clock = 1000 + i;
		b = build_frame(&m, NULL, 0);
		parse_ok(&b, &f);
		ck_assert_int_eq(f.meta->type, types[i]);
		ck_assert_uint_eq(f.meta->clock, 1000 + i);
		ck_assert_uint_eq(f.meta->request_id, 0x1122334455667788ull);
		dml_frame_release(&f);
		built_free(&b);
	}
}
END_TEST

START_TEST(test_roundtrip_error)
{
	Dml__Error e = DML__ERROR__INIT;
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__ERROR, 0);
	e.code = DML_ERANGE;
	e.message = (char *)"key 99 outside [0, 50)";
	m.error = &e;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert_ptr_nonnull(f.meta->error);
	ck_assert_int_eq(f.meta->error->code, DML_ERANGE);
	ck_assert_str_eq(f.meta->error->message, "key 99 outside [0, 50)");
	dml_frame_release(&f);
	built_free(&b);
}
END_TEST

START_TEST(test_roundtrip_stats_reply)
{
	Dml__WorkerClock w0 = DML__WORKER_CLOCK__INIT, w1 = DML__WORKER_CLOCK__INIT;
	Dml__WorkerClock *ws[2] = { &w0, &w1 };
	Dml__Stats st = DML__STATS__INIT;
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__STATS_REPLY, 0);
	st.pushes = 1000;
	st.pulls = 2000;
	st.duplicate_pushes = 3;
	st.held_pulls = 4;
	st.bad_frames = 5;
	st.min_clock = 6;
	st.staleness = -1;
	st.bytes_in = 1ull << 35;
	st.bytes_out = 8;
	w0.worker = 1;
	w0.clock = 10;
	w0.live = 1;
	w1.worker = 2;
	w1.clock = 8;
	w1.live = 0;
	st.n_workers = 2;
	st.workers = ws;
	m.stats = &st;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert_ptr_nonnull(f.meta->stats);
	ck_assert_uint_eq(f.meta->stats->pushes, 1000);
	ck_assert_uint_eq(f.meta->stats->pulls, 2000);
	ck_assert_uint_eq(f.meta->stats->duplicate_pushes, 3);
	ck_assert_uint_eq(f.meta->stats->held_pulls, 4);
	ck_assert_uint_eq(f.meta->stats->bad_frames, 5);
	ck_assert_uint_eq(f.meta->stats->min_clock, 6);
	ck_assert_int_eq(f.meta->stats->staleness, -1);
	ck_assert_uint_eq(f.meta->stats->bytes_in, 1ull << 35);
	ck_assert_uint_eq(f.meta->stats->bytes_out, 8);
	ck_assert_uint_eq(f.meta->stats->n_workers, 2);
	ck_assert_uint_eq(f.meta->stats->workers[0]->worker, 1);
	ck_assert_uint_eq(f.meta->stats->workers[0]->clock, 10);
	ck_assert(f.meta->stats->workers[0]->live);
	ck_assert_uint_eq(f.meta->stats->workers[1]->clock, 8);
	ck_assert(!f.meta->stats->workers[1]->live);
	dml_frame_release(&f);
	built_free(&b);
}
END_TEST

START_TEST(test_header_roundtrip)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h;
	uint8_t buf[DML_FRAME_HEADER_LEN];
	static const uint8_t expect[DML_FRAME_HEADER_LEN] = {
		'D', 'M', 'L', '1', 1, 0, 0, 0, 0x34, 0x12, 0, 0, 0x78, 0x56, 0x34, 0x02,
	};

	dml_frame_limits_default(&lim);
	ck_assert_uint_eq(lim.max_meta, 65536);
	ck_assert_uint_eq(lim.max_payload, 268435456u);
	ck_assert_uint_eq(lim.max_keys, 1048576);
	dml_frame_header_encode(buf, 0x1234, 0x02345678);
	ck_assert_mem_eq(buf, expect, sizeof(expect));
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), 0);
	ck_assert_uint_eq(h.version, DML_PROTOCOL_VERSION);
	ck_assert_uint_eq(h.flags, 0);
	ck_assert_uint_eq(h.meta_len, 0x1234);
	ck_assert_uint_eq(h.payload_len, 0x02345678);

	/* Both limits are inclusive. */
	dml_frame_header_encode(buf, lim.max_meta, lim.max_payload);
	ck_assert_int_eq(dml_frame_header_decode(buf, &lim, &h), 0);
}
END_TEST

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

START_TEST(test_roundtrip_register_and_nodes)
{
	Dml__NodeInfo n = DML__NODE_INFO__INIT, *ns[1] = { &n };
	Dml__Profile pr = DML__PROFILE__INIT;
	struct dml_frame f;
	struct built b;
	Dml__Meta m;

	meta_data(&m, DML__MSG_TYPE__REGISTER, 0);
	n.role = DML__ROLE__SERVER;
	n.node_id = 3;
	n.zone = "eu-1";
	n.address = "10.0.0.3:7001";
	n.state = DML__NODE_STATE__ALIVE;
	n.shard_index = 1;
	n.shard_count = 2;
	pr.device = "cpu";
	pr.cores = 16;
	pr.memory_bytes = 1ull << 36;
	pr.gflops = 123.5;
	n.profile = &pr;
	m.node = &n;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert_ptr_nonnull(f.meta->node);
	ck_assert_uint_eq(f.meta->node->node_id, 3);
	ck_assert_str_eq(f.meta->node->zone, "eu-1");
	ck_assert_str_eq(f.meta->node->address, "10.0.0.3:7001");
	ck_assert_uint_eq(f.meta->node->shard_count, 2);
	ck_assert_uint_eq(f.meta->node->profile->memory_bytes, 1ull << 36);
	ck_assert(f.meta->node->profile->gflops == 123.5);
	dml_frame_release(&f);
	built_free(&b);

	/* A REGISTER must say who registers. */
	m.node = NULL;
	b = build_raw(&m, 0);
	ck_assert_int_eq(parse_default(&b), DML_EFRAME_DECODE);
	built_free(&b);

	meta_data(&m, DML__MSG_TYPE__NODES_REPLY, 0);
	m.n_nodes = 1;
	m.nodes = ns;
	b = build_frame(&m, NULL, 0);
	parse_ok(&b, &f);
	ck_assert_uint_eq(f.meta->n_nodes, 1);
	ck_assert_int_eq(f.meta->nodes[0]->state, DML__NODE_STATE__ALIVE);
	dml_frame_release(&f);
	built_free(&b);
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

START_TEST(test_type_names)
{
	static const char *const names[] = {
		"challenge", "hello", "welcome", "push", "pull", "pull_reply", "ack",
		"clock", "error", "heartbeat", "bye", "stats", "stats_reply",
		"register", "register_reply", "nodes", "nodes_reply",
	};

	for (int t = 1; t <= 17; t++)
		ck_assert_str_eq(dml_msg_type_name(t), names[t - 1]);
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

START_TEST(test_wrong_dtype)
{
	static const Dml__MsgType types[] = {
		DML__MSG_TYPE__PUSH, DML__MSG_TYPE__PULL, DML__MSG_TYPE__PULL_REPLY,
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(types); i++) {
		uint8_t payload[8 + 4];
		struct built b;
		Dml__Meta m;

		memset(payload, 0, sizeof(payload));
		meta_data(&m, types[i], 1);
		m.num_keys = 1;
		m.dtype = DML__DTYPE__F16;
		b = build_frame(&m, payload,
				types[i] == DML__MSG_TYPE__PUSH ? 12
				: types[i] == DML__MSG_TYPE__PULL ? 8 : 4);
		ck_assert_int_eq(parse_default(&b), DML_ESHAPE);
		built_free(&b);
	}
}
END_TEST

START_TEST(test_meta_decode_direct)
{
	struct dml_frame_limits lim;
	struct dml_frame_header h = { DML_PROTOCOL_VERSION, 0, 0, 0 };
	uint8_t buf[64];
	Dml__Meta m, *out = (Dml__Meta *)1;
	size_t n;

	dml_frame_limits_default(&lim);
	meta_data(&m, DML__MSG_TYPE__CLOCK, 0);
	m.clock = 3;
	n = dml__meta__pack(&m, buf);
	h.meta_len = (uint32_t)n;
	ck_assert_int_eq(dml_frame_meta_decode(buf, n, &h, &lim, &out), 0);
	ck_assert_uint_eq(out->clock, 3);
	dml_meta_free(out);
	dml_meta_free(NULL);
	/* On failure *out is cleared and nothing is left allocated. */
	h.payload_len = 4;
	out = (Dml__Meta *)1;
	ck_assert_int_eq(dml_frame_meta_decode(buf, n, &h, &lim, &out),
			 DML_EFRAME_LENGTH);
	ck_assert_ptr_null(out);
}
END_TEST

START_TEST(test_encode_head_capacity)
{
	Dml__Meta m;
	uint8_t buf[256];
	size_t need, got;

	meta_data(&m, DML__MSG_TYPE__PUSH, 1);
	m.num_keys = 1;
	m.payload_bytes = 0;
	need = dml_frame_head_size(&m);
	got = dml_frame_encode_head(&m, UINT32_MAX, buf, sizeof(buf));
	ck_assert_uint_gt(got, DML_FRAME_HEADER_LEN);
	ck_assert_uint_le(got, need);
	ck_assert_uint_eq(m.payload_bytes, UINT32_MAX);
	ck_assert_uint_eq(dml_load_le32(buf + 8), got - DML_FRAME_HEADER_LEN);
	ck_assert_uint_eq(dml_load_le32(buf + 12), UINT32_MAX);
	ck_assert_uint_eq(dml_frame_encode_head(&m, UINT32_MAX, buf, got - 1), 0);
	ck_assert_uint_eq(dml_frame_encode_head(&m, UINT32_MAX, buf, 10), 0);
	ck_assert_uint_eq(dml_frame_encode_head(&m, UINT32_MAX, buf, got), got);
}
END_TEST

/* Feeding a frame one byte at a time finds it exactly at its last byte. */
START_TEST(test_incremental)
{
	enum { N = 3, W = 2 };
	uint8_t payload[N * 8 + N * W * 4];
	struct dml_frame_limits lim;
	struct dml_frame f;
	struct built b;
	uint8_t *two;
	size_t flen;
	Dml__Meta m;

	dml_frame_limits_default(&lim);
	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.num_keys = N;
	fill_keys(payload, N, 17);
	fill_values(payload + N * 8, N * W, 3.0f);
	b = build_frame(&m, payload, sizeof(payload));
	for (size_t i = 0; i < b.len; i++) {
		flen = 0;
		ck_assert_int_eq(dml_frame_parse(b.buf, i, &lim, &f, &flen),
				 DML_FRAME_INCOMPLETE);
		ck_assert_uint_eq(flen, 0);
		ck_assert_ptr_null(f.meta);
	}
	ck_assert_int_eq(dml_frame_parse(b.buf, b.len, &lim, &f, &flen), 0);
	ck_assert_uint_eq(flen, b.len);
	dml_frame_release(&f);

	/* Two frames back to back: the first ends where it should. */
	two = dml_xmalloc(2 * b.len);
	memcpy(two, b.buf, b.len);
	memcpy(two + b.len, b.buf, b.len);
	ck_assert_int_eq(dml_frame_parse(two, 2 * b.len - 1, &lim, &f, &flen), 0);
	ck_assert_uint_eq(flen, b.len);
	ck_assert_mem_eq(f.payload, payload, sizeof(payload));
	dml_frame_release(&f);
	ck_assert_int_eq(dml_frame_parse(two + flen, b.len, &lim, &f, &flen), 0);
	dml_frame_release(&f);
	free(two);
	built_free(&b);
}
END_TEST

/* xorshift64*: a fixed seed makes every failure reproducible. */
static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dull;
}

static bool parse_code_defined(int rc)
{
	static const int codes[] = {
		0, DML_FRAME_INCOMPLETE, DML_EFRAME_MAGIC, DML_EFRAME_VERSION,
		DML_EFRAME_META, DML_EFRAME_PAYLOAD, DML_EFRAME_LENGTH, DML_EFRAME_DECODE,
		DML_EFRAME_TYPE, DML_EFRAME_COUNT, DML_EFRAME_KEYS, DML_EFRAME_FLAGS,
		DML_ESHAPE,
	};

	for (size_t i = 0; i < DML_ARRAY_LEN(codes); i++)
		if (rc == codes[i])
			return true;
	return false;
}

/* Parses buf[0..len) from an exact-size heap copy so ASan sees overreads. */
static void fuzz_one(const uint8_t *buf, size_t len, const struct dml_frame_limits *lim)
{
	uint8_t *copy = dml_xmalloc(len);
	struct dml_frame f;
	size_t flen = 0;
	int rc;

	memcpy(copy, buf, len);
	rc = dml_frame_parse(copy, len, lim, &f, &flen);
	ck_assert_msg(parse_code_defined(rc), "undefined parse result %d", rc);
	if (rc == 0) {
		ck_assert_uint_le(flen, len);
		ck_assert_ptr_nonnull(f.meta);
		dml_frame_release(&f);
	} else {
		ck_assert_ptr_null(f.meta);
	}
	free(copy);
}

START_TEST(test_fuzz_random)
{
	struct dml_frame_limits lim;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	uint8_t buf[200];

	dml_frame_limits_default(&lim);
	for (int it = 0; it < 20000; it++) {
		size_t len = rng_next(&seed) % (sizeof(buf) + 1);

		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)rng_next(&seed);
		/*
		 * Pure noise never gets past the magic; give most inputs a
		 * valid header whose lengths cover the noise so the metadata
		 * decoder and the count checks see it too.
		 */
		if (it % 4 != 0 && len >= DML_FRAME_HEADER_LEN + 1) {
			uint32_t rest = (uint32_t)(len - DML_FRAME_HEADER_LEN);
			uint32_t mlen = 1 + (uint32_t)(rng_next(&seed) % rest);

			dml_frame_header_encode(buf, mlen, rest - mlen);
		}
		fuzz_one(buf, len, &lim);
	}
}
END_TEST

START_TEST(test_fuzz_mutations)
{
	enum { N = 3, W = 2 };
	uint8_t payload[N * 8 + N * W * 4];
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	struct dml_frame_limits lim;
	uint64_t seed = 12345;
	struct built seeds[3];
	Dml__Meta m;

	dml_frame_limits_default(&lim);
	meta_data(&m, DML__MSG_TYPE__PUSH, W);
	m.num_keys = N;
	fill_keys(payload, N, 1);
	fill_values(payload + N * 8, N * W, 1.0f);
	seeds[0] = build_frame(&m, payload, sizeof(payload));
	meta_data(&m, DML__MSG_TYPE__PULL, W);
	m.dense = 1;
	m.key_end = 100;
	seeds[1] = build_frame(&m, NULL, 0);
	meta_data(&m, DML__MSG_TYPE__HELLO, 0);
	hs.cluster = (char *)"c";
	hs.nonce.data = (uint8_t *)nonce_a;
	hs.nonce.len = sizeof(nonce_a);
	m.handshake = &hs;
	seeds[2] = build_frame(&m, NULL, 0);

	for (int it = 0; it < 20000; it++) {
		const struct built *s = &seeds[it % 3];
		uint8_t buf[256];
		size_t len = s->len;
		int flips = 1 + (int)(rng_next(&seed) % 4);

		ck_assert_uint_le(len, sizeof(buf));
		memcpy(buf, s->buf, len);
		for (int k = 0; k < flips; k++) {
			/* Mostly after the magic, so the mutation is not just refused. */
			size_t at = 4 + rng_next(&seed) % (len - 4);

			if (rng_next(&seed) % 2)
				buf[at] ^= (uint8_t)(1u << (rng_next(&seed) % 8));
			else
				buf[at] = (uint8_t)rng_next(&seed);
		}
		if (rng_next(&seed) % 8 == 0)
			len = rng_next(&seed) % (len + 1);
		fuzz_one(buf, len, &lim);
	}
	for (size_t i = 0; i < DML_ARRAY_LEN(seeds); i++)
		built_free(&seeds[i]);
}
END_TEST

/* dml_msg_copy: a deep copy, of any message type, owning its strings. */
START_TEST(test_msg_copy)
{
	char text[] = "table 9 is not here", addr[] = "10.0.0.5:7001";
	Dml__Error err = DML__ERROR__INIT;
	Dml__NodeInfo n = DML__NODE_INFO__INIT, *nc;
	Dml__Meta m, *c;

	meta_data(&m, DML__MSG_TYPE__ERROR, 0);
	err.code = DML_ENOTFOUND;
	err.message = text;
	m.error = &err;
	c = dml_msg_copy(&m.base);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(c->type, DML__MSG_TYPE__ERROR);
	ck_assert_uint_eq(c->request_id, m.request_id);
	ck_assert_uint_eq(c->sender, 7);
	ck_assert(c->error && c->error != &err && c->error->message != text);
	text[0] = 'X';
	ck_assert_str_eq(c->error->message, "table 9 is not here");
	ck_assert_int_eq(c->error->code, DML_ENOTFOUND);
	dml_meta_free(c);

	n.role = DML__ROLE__SERVER;
	n.node_id = 12;
	n.address = addr;
	n.incarnation = 0x0102030405060708ull;
	nc = dml_msg_copy(&n.base);
	ck_assert_ptr_nonnull(nc);
	ck_assert_ptr_eq(nc->base.descriptor, &dml__node_info__descriptor);
	ck_assert(nc->role == DML__ROLE__SERVER && nc->node_id == 12 &&
		  nc->incarnation == n.incarnation);
	ck_assert(nc->address != addr);
	addr[0] = '9';
	ck_assert_str_eq(nc->address, "10.0.0.5:7001");
	dml__node_info__free_unpacked(nc, NULL);
}
END_TEST

static Suite *frame_suite(void)
{
	Suite *s = suite_create("frame");
	TCase *rt = tcase_create("roundtrip");
	TCase *bad = tcase_create("malformed");
	TCase *fz = tcase_create("fuzz");

	tcase_add_test(rt, test_roundtrip_handshake);
	tcase_add_test(rt, test_roundtrip_sparse_push);
	tcase_add_test(rt, test_roundtrip_dense_push);
	tcase_add_test(rt, test_roundtrip_pull);
	tcase_add_test(rt, test_roundtrip_pull_reply);
	tcase_add_test(rt, test_roundtrip_control);
	tcase_add_test(rt, test_roundtrip_error);
	tcase_add_test(rt, test_roundtrip_stats_reply);
	tcase_add_test(rt, test_header_roundtrip);
	tcase_add_test(rt, test_type_names);
	tcase_add_test(rt, test_roundtrip_register_and_nodes);
	tcase_add_test(rt, test_meta_decode_direct);
	tcase_add_test(rt, test_encode_head_capacity);
	tcase_add_test(rt, test_incremental);
	tcase_add_test(rt, test_msg_copy);
	suite_add_tcase(s, rt);

	tcase_add_test(bad, test_bad_magic);
	tcase_add_test(bad, test_bad_version);
	tcase_add_test(bad, test_reserved_flags);
	tcase_add_test(bad, test_meta_len_limits);
	tcase_add_test(bad, test_payload_limit);
	tcase_add_test(bad, test_header_checked_early);
	tcase_add_test(bad, test_truncated);
	tcase_add_test(bad, test_length_mismatch);
	tcase_add_test(bad, test_protobuf_garbage);
	tcase_add_test(bad, test_missing_submessage);
	tcase_add_test(bad, test_unknown_type);
	tcase_add_test(bad, test_sparse_count_mismatch);
	tcase_add_test(bad, test_dense_count_mismatch);
	tcase_add_test(bad, test_too_many_keys);
	tcase_add_test(bad, test_zero_keys);
	tcase_add_test(bad, test_dense_overflow);
	tcase_add_test(bad, test_scan_frames);
	tcase_add_test(bad, test_pull_reply_over_limit);
	tcase_add_test(bad, test_wrong_dtype);
	suite_add_tcase(s, bad);

	/* Sanitizer builds are slow; the fuzz loops need more than 4 s there. */
	tcase_set_timeout(fz, 120);
	tcase_add_test(fz, test_fuzz_random);
	tcase_add_test(fz, test_fuzz_mutations);
	suite_add_tcase(s, fz);
	return s;
}

int main(void)
{
	return dml_check_run(frame_suite());
}
