/*
 * Tests of proto/frame.c on good frames (see check_frame.c): every message
 * type survives encode and parse, the header and type names round-trip,
 * heads decode directly, frames parse incrementally, and dml_msg_copy makes
 * deep copies.
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

/* The tests of good frames, in the order the suite runs them. */
void frame_tests_roundtrip(TCase *tc)
{
	tcase_add_test(tc, test_roundtrip_handshake);
	tcase_add_test(tc, test_roundtrip_sparse_push);
	tcase_add_test(tc, test_roundtrip_dense_push);
	tcase_add_test(tc, test_roundtrip_pull);
	tcase_add_test(tc, test_roundtrip_pull_reply);
	tcase_add_test(tc, test_roundtrip_control);
	tcase_add_test(tc, test_roundtrip_error);
	tcase_add_test(tc, test_roundtrip_stats_reply);
	tcase_add_test(tc, test_header_roundtrip);
	tcase_add_test(tc, test_type_names);
	tcase_add_test(tc, test_roundtrip_register_and_nodes);
	tcase_add_test(tc, test_meta_decode_direct);
	tcase_add_test(tc, test_encode_head_capacity);
	tcase_add_test(tc, test_incremental);
	tcase_add_test(tc, test_msg_copy);
}
