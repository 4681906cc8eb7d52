/*
 * raw_frame.c - whole dml frames over a blocking socket (see raw_frame.h).
 */
#include <check.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/auth.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "test/harness.h"
#include "test/raw_frame.h"
#include "proto/util.h"

#define FRAME_WAIT_MS 10000

static int read_full(int fd, void *buf, size_t n)
{
	uint8_t *p = buf;

	while (n > 0) {
		struct pollfd pfd = { fd, POLLIN, 0 };
		ssize_t k;

		if (poll(&pfd, 1, FRAME_WAIT_MS) <= 0)
			return DML_ETIMEDOUT;
		k = read(fd, p, n);
		if (k <= 0)
			return DML_ECONN;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

Dml__Meta *raw_frame_read(int fd, uint8_t **payload)
{
	struct dml_frame_limits lim;
	struct dml_frame_header hdr;
	uint8_t head[DML_FRAME_HEADER_LEN], *meta;
	Dml__Meta *m = NULL;

	dml_frame_limits_default(&lim);
	ck_assert_int_eq(read_full(fd, head, sizeof(head)), 0);
	ck_assert_int_eq(dml_frame_header_decode(head, &lim, &hdr), 0);
	meta = dml_xmalloc(hdr.meta_len);
	ck_assert_int_eq(read_full(fd, meta, hdr.meta_len), 0);
	ck_assert_int_eq(dml_frame_meta_decode(meta, hdr.meta_len, &hdr, &lim, &m), 0);
	free(meta);
	*payload = NULL;
	if (hdr.payload_len) {
		*payload = dml_xmalloc(hdr.payload_len);
		ck_assert_int_eq(read_full(fd, *payload, hdr.payload_len), 0);
	}
	return m;
}

void raw_frame_send(int fd, Dml__Meta *m, const void *payload, uint32_t len)
{
	size_t cap = dml_frame_head_size(m) + len, n;
	uint8_t *buf = dml_xmalloc(cap);

	n = dml_frame_encode_head(m, len, buf, cap);
	ck_assert_uint_gt(n, 0);
	if (len)
		memcpy(buf + n, payload, len);
	ck_assert_int_eq(dml_test_raw_send(fd, buf, n + len), 0);
	free(buf);
}

/* A handshake frame of this end: role, node_id, cluster "dml", nonce, proof. */
static void send_handshake(int fd, Dml__MsgType type, Dml__Handshake *hs, uint32_t role,
			   uint32_t node_id, const uint8_t *nonce, const uint8_t *proof)
{
	Dml__Meta m = DML__META__INIT;

	hs->role = role;
	hs->node_id = node_id;
	hs->protocol_version = DML_PROTOCOL_VERSION;
	hs->cluster = (char *)"dml";
	hs->nonce.data = (uint8_t *)nonce;
	hs->nonce.len = DML_NONCE_LEN;
	if (proof) {
		hs->proof.data = (uint8_t *)proof;
		hs->proof.len = DML_PROOF_LEN;
	}
	m.type = type;
	m.sender = node_id;
	m.handshake = hs;
	raw_frame_send(fd, &m, NULL, 0);
}

Dml__Meta *raw_frame_handshake(struct dml_test_env *env, int fd, uint32_t role,
			       uint32_t node_id, uint64_t incarnation, uint32_t job,
			       uint64_t clock)
{
	return raw_frame_handshake_prelude(env, fd, role, node_id, incarnation, job, clock,
					   NULL, NULL);
}

Dml__Meta *raw_frame_handshake_prelude(struct dml_test_env *env, int fd, uint32_t role,
				       uint32_t node_id, uint64_t incarnation, uint32_t job,
				       uint64_t clock,
				       void (*prelude)(int fd, const Dml__Handshake *challenge,
						       void *arg),
				       void *arg)
{
	Dml__Handshake hs = DML__HANDSHAKE__INIT;
	Dml__Meta *ch, *w;
	uint8_t nonce[DML_NONCE_LEN], proof[DML_PROOF_LEN], *secret, *pl;
	size_t secret_len;

	ck_assert_int_eq(dml_secret_load(dml_test_env_secret(env), &secret, &secret_len), 0);
	ch = raw_frame_read(fd, &pl);
	ck_assert_int_eq(ch->type, DML__MSG_TYPE__CHALLENGE);
	ck_assert_uint_eq(ch->handshake->nonce.len, DML_NONCE_LEN);
	ck_assert_int_eq(dml_random_bytes(nonce, sizeof(nonce)), 0);
	dml_auth_proof(secret, secret_len, DML_AUTH_CLIENT, ch->handshake->nonce.data, nonce,
		       role, node_id, "dml", proof);
	hs.incarnation = incarnation;
	hs.job = job;
	hs.clock = clock;
	if (prelude)
		prelude(fd, ch->handshake, arg);
	send_handshake(fd, DML__MSG_TYPE__HELLO, &hs, role, node_id, nonce, proof);
	w = raw_frame_read(fd, &pl);
	ck_assert_int_eq(w->type, DML__MSG_TYPE__WELCOME);
	dml_meta_free(ch);
	dml_secret_free(secret, secret_len);
	return w;
}

static Dml__DType every_dtype[] = { DML__DTYPE__F32, DML__DTYPE__F16, DML__DTYPE__INT8,
				    DML__DTYPE__BF16, DML__DTYPE__TOPK,
				    DML__DTYPE__TOPK16 };

Dml__Meta *raw_frame_accept(struct dml_test_env *env, int fd, uint32_t role,
			    uint32_t node_id)
{
	Dml__Handshake ch = DML__HANDSHAKE__INIT, wel = DML__HANDSHAKE__INIT;
	uint8_t nonce[DML_NONCE_LEN], proof[DML_PROOF_LEN], *secret, *pl;
	const Dml__Handshake *h;
	size_t secret_len;
	Dml__Meta *hello;

	ck_assert_int_eq(dml_secret_load(dml_test_env_secret(env), &secret, &secret_len), 0);
	ck_assert_int_eq(dml_random_bytes(nonce, sizeof(nonce)), 0);
	send_handshake(fd, DML__MSG_TYPE__CHALLENGE, &ch, role, node_id, nonce, NULL);
	hello = raw_frame_read(fd, &pl);
	ck_assert_int_eq(hello->type, DML__MSG_TYPE__HELLO);
	h = hello->handshake;
	ck_assert_uint_eq(h->nonce.len, DML_NONCE_LEN);
	ck_assert_int_eq(dml_auth_verify(secret, secret_len, DML_AUTH_CLIENT, nonce,
					 h->nonce.data, h->role, h->node_id, h->cluster,
					 h->proof.data, h->proof.len), 0);
	dml_auth_proof(secret, secret_len, DML_AUTH_SERVER, h->nonce.data, nonce, h->role,
		       h->node_id, h->cluster, proof);
	wel.codecs = every_dtype;
	wel.n_codecs = sizeof(every_dtype) / sizeof(every_dtype[0]);
	send_handshake(fd, DML__MSG_TYPE__WELCOME, &wel, role, node_id, nonce, proof);
	dml_secret_free(secret, secret_len);
	return hello;
}
