/*
 * Unit tests for proto/auth.c: the handshake proofs match the layout auth.h
 * documents, any change to what they cover makes them fail, and the secret
 * file loader refuses every file an operator should not be using.
 *
 * Secret files live in a private directory made with mkdtemp for each test
 * case and removed afterwards; these tests must never touch any other file.
 */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "proto/auth.h"
#include "test/check_run.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

static const uint8_t secret[] = "correct horse battery staple";
#define SECRET_LEN (sizeof(secret) - 1)

static uint8_t ns[DML_NONCE_LEN], nc[DML_NONCE_LEN];

static void nonces_init(void)
{
	for (int i = 0; i < DML_NONCE_LEN; i++) {
		ns[i] = (uint8_t)(0x10 + i);
		nc[i] = (uint8_t)(0xc0 ^ i);
	}
}

/* The client's proof for worker 7 in cluster "prod". */
static void proof_ref(uint8_t out[DML_PROOF_LEN])
{
	dml_auth_proof(secret, SECRET_LEN, DML_AUTH_CLIENT, ns, nc, 1, 7, "prod", out);
}

static int verify_client(const uint8_t *n1, const uint8_t *n2, uint32_t role,
			 uint32_t node_id, const char *cluster, const uint8_t *proof,
			 size_t len)
{
	return dml_auth_verify(secret, SECRET_LEN, DML_AUTH_CLIENT, n1, n2, role, node_id,
			       cluster, proof, len);
}

START_TEST(test_proof_verifies)
{
	uint8_t p[DML_PROOF_LEN], again[DML_PROOF_LEN];

	nonces_init();
	proof_ref(p);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, sizeof(p)), 0);
	proof_ref(again);
	ck_assert_mem_eq(p, again, sizeof(p));
}
END_TEST

/* The proof is HMAC-SHA256 over exactly the bytes auth.h lists. */
START_TEST(test_proof_layout)
{
	uint8_t msg[10 + 2 * DML_NONCE_LEN + 8 + 5], *q = msg;
	uint8_t expect[EVP_MAX_MD_SIZE], p[DML_PROOF_LEN];
	unsigned int elen = 0;

	nonces_init();
	memcpy(q, "dml-server", 10);
	q += 10;
	memcpy(q, nc, DML_NONCE_LEN);
	q += DML_NONCE_LEN;
	memcpy(q, ns, DML_NONCE_LEN);
	q += DML_NONCE_LEN;
	memcpy(q, "\x04\x03\x02\x01\x2a\x00\x00\x00", 8);
	q += 8;
	memcpy(q, "prod", 5); /* with its NUL */
	q += 5;
	ck_assert_uint_eq((size_t)(q - msg), sizeof(msg));
	ck_assert_ptr_nonnull(HMAC(EVP_sha256(), secret, (int)SECRET_LEN, msg,
				   sizeof(msg), expect, &elen));
	ck_assert_uint_eq(elen, DML_PROOF_LEN);
	dml_auth_proof(secret, SECRET_LEN, DML_AUTH_SERVER, nc, ns, 0x01020304u, 42,
		       "prod", p);
	ck_assert_mem_eq(p, expect, DML_PROOF_LEN);
}
END_TEST

START_TEST(test_flipped_proof)
{
	uint8_t p[DML_PROOF_LEN];

	nonces_init();
	for (int bit = 0; bit < DML_PROOF_LEN * 8; bit += 37) {
		proof_ref(p);
		p[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, sizeof(p)),
				 DML_EAUTH);
	}
}
END_TEST

START_TEST(test_flipped_nonce)
{
	uint8_t p[DML_PROOF_LEN];

	nonces_init();
	proof_ref(p);
	ns[31] ^= 0x80;
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, sizeof(p)), DML_EAUTH);
	ns[31] ^= 0x80;
	nc[0] ^= 0x01;
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, sizeof(p)), DML_EAUTH);
	nc[0] ^= 0x01;
	/* Swapped nonces are a different message too. */
	ck_assert_int_eq(verify_client(nc, ns, 1, 7, "prod", p, sizeof(p)), DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, sizeof(p)), 0);
}
END_TEST

START_TEST(test_flipped_identity)
{
	uint8_t p[DML_PROOF_LEN];

	nonces_init();
	proof_ref(p);
	ck_assert_int_eq(verify_client(ns, nc, 1 ^ 2, 7, "prod", p, sizeof(p)),
			 DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1 | (1u << 31), 7, "prod", p, sizeof(p)),
			 DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7 ^ 1, "prod", p, sizeof(p)),
			 DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7 ^ (1u << 20), "prod", p, sizeof(p)),
			 DML_EAUTH);
}
END_TEST

START_TEST(test_flipped_cluster)
{
	uint8_t p[DML_PROOF_LEN];

	nonces_init();
	proof_ref(p);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prof", p, sizeof(p)), DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "pro", p, sizeof(p)), DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prodx", p, sizeof(p)), DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "", p, sizeof(p)), DML_EAUTH);
}
END_TEST

START_TEST(test_wrong_secret)
{
	static const uint8_t other[] = "correct horse battery stapler";
	uint8_t p[DML_PROOF_LEN];

	nonces_init();
	proof_ref(p);
	ck_assert_int_eq(dml_auth_verify(other, sizeof(other) - 1, DML_AUTH_CLIENT, ns,
					 nc, 1, 7, "prod", p, sizeof(p)),
			 DML_EAUTH);
	ck_assert_int_eq(dml_auth_verify(secret, SECRET_LEN - 1, DML_AUTH_CLIENT, ns, nc,
					 1, 7, "prod", p, sizeof(p)),
			 DML_EAUTH);
	/* An empty secret never authenticates anybody. */
	ck_assert_int_eq(dml_auth_verify(secret, 0, DML_AUTH_CLIENT, ns, nc, 1, 7, "prod",
					 p, sizeof(p)),
			 DML_EAUTH);
}
END_TEST

/* A client proof replayed as the server's must not pass, and vice versa. */
START_TEST(test_sides_differ)
{
	uint8_t pc[DML_PROOF_LEN], ps[DML_PROOF_LEN];

	nonces_init();
	dml_auth_proof(secret, SECRET_LEN, DML_AUTH_CLIENT, ns, nc, 1, 7, "prod", pc);
	dml_auth_proof(secret, SECRET_LEN, DML_AUTH_SERVER, ns, nc, 1, 7, "prod", ps);
	ck_assert_mem_ne(pc, ps, DML_PROOF_LEN);
	ck_assert_int_eq(dml_auth_verify(secret, SECRET_LEN, DML_AUTH_SERVER, ns, nc, 1,
					 7, "prod", pc, sizeof(pc)),
			 DML_EAUTH);
	ck_assert_int_eq(dml_auth_verify(secret, SECRET_LEN, DML_AUTH_SERVER, ns, nc, 1,
					 7, "prod", ps, sizeof(ps)),
			 0);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", ps, sizeof(ps)), DML_EAUTH);
}
END_TEST

START_TEST(test_wrong_length)
{
	uint8_t p[DML_PROOF_LEN + 1];

	nonces_init();
	proof_ref(p);
	p[DML_PROOF_LEN] = 0;
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, DML_PROOF_LEN), 0);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, DML_PROOF_LEN - 1),
			 DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, DML_PROOF_LEN + 1),
			 DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", p, 0), DML_EAUTH);
	ck_assert_int_eq(verify_client(ns, nc, 1, 7, "prod", NULL, DML_PROOF_LEN),
			 DML_EAUTH);
}
END_TEST

/* One private directory per test case, made and removed by the parent. */
static char tmp_dir[PATH_MAX];

static void tmp_setup(void)
{
	const char *base = getenv("TMPDIR");

	if (!base || !*base)
		base = "/tmp";
	snprintf(tmp_dir, sizeof(tmp_dir), "%s/check_auth.XXXXXX", base);
	ck_assert_ptr_nonnull(mkdtemp(tmp_dir));
}

/* tmp_dir/name, in a buffer that the next call reuses. */
static const char *tmp_path(const char *name)
{
	static char path[PATH_MAX];
	int n = snprintf(path, sizeof(path), "%s/%s", tmp_dir, name);

	ck_assert(n > 0 && (size_t)n < sizeof(path));
	return path;
}

static void tmp_teardown(void)
{
	const char *path;
	struct dirent *de;
	DIR *d = opendir(tmp_dir);

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		path = tmp_path(de->d_name);
		if (unlink(path) < 0)
			rmdir(path);
	}
	closedir(d);
	rmdir(tmp_dir);
}

/* Writes len bytes to a new file name under tmp_dir with the given mode. */
static const char *write_file(const char *name, const void *data, size_t len,
			      mode_t mode)
{
	const char *path = tmp_path(name);
	int fd;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	return path;
}

/* Collects error lines so a test can check what the operator is told. */
static char log_buf[4096];

static void log_capture(int level, const char *line, void *arg)
{
	size_t used = strlen(log_buf);

	snprintf(log_buf + used, sizeof(log_buf) - used, "%s\n", line);
}

static void log_setup(void)
{
	log_buf[0] = '\0';
	dml_log_set_sink(log_capture, NULL);
}

static void expect_refused(const char *path, const char *cause)
{
	uint8_t *s = (uint8_t *)1;
	size_t len = 99;

	log_setup();
	ck_assert_int_eq(dml_secret_load(path, &s, &len), DML_ESECRET);
	ck_assert_ptr_null(s);
	ck_assert_uint_eq(len, 0);
	ck_assert_msg(strstr(log_buf, path), "log does not name the file: %s", log_buf);
	ck_assert_msg(strstr(log_buf, cause), "log lacks \"%s\": %s", cause, log_buf);
	dml_log_set_sink(NULL, NULL);
}

static void expect_loaded(const char *path, const char *want)
{
	uint8_t *s = NULL;
	size_t len = 0;

	ck_assert_int_eq(dml_secret_load(path, &s, &len), 0);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(len, strlen(want));
	ck_assert_mem_eq(s, want, len);
	dml_secret_free(s, len);
}

START_TEST(test_secret_load)
{
	expect_loaded(write_file("a", "s3cret\n", 7, 0600), "s3cret");
	expect_loaded(write_file("b", "s3cret", 6, 0600), "s3cret");
	expect_loaded(write_file("c", "s3cret\r\n", 8, 0400), "s3cret");
	/* Only one newline is stripped: the rest is part of the secret. */
	expect_loaded(write_file("d", "ab\n\n", 4, 0600), "ab\n");
	expect_loaded(write_file("e", " x y ", 5, 0600), " x y ");
	dml_secret_free(NULL, 0);
}
END_TEST

START_TEST(test_secret_group_readable)
{
	const char *why = "readable or writable by group or others; chmod 600 it";

	expect_refused(write_file("g644", "s3cret\n", 7, 0644), why);
	expect_refused(write_file("g640", "s3cret\n", 7, 0640), why);
	expect_refused(write_file("g620", "s3cret\n", 7, 0620), why);
	expect_refused(write_file("g602", "s3cret\n", 7, 0602), why);
	expect_refused(write_file("g601", "s3cret\n", 7, 0601), why);
}
END_TEST

START_TEST(test_secret_missing)
{
	expect_refused(tmp_path("no-such-file"), "No such file");
}
END_TEST

START_TEST(test_secret_empty)
{
	expect_refused(write_file("empty", "", 0, 0600), "empty");
	expect_refused(write_file("nl", "\n", 1, 0600), "empty");
	expect_refused(write_file("crnl", "\r\n", 2, 0600), "empty");
}
END_TEST

START_TEST(test_secret_size)
{
	char *big = dml_xmalloc(DML_SECRET_MAX + 2);
	char *want = dml_xmalloc(DML_SECRET_MAX + 1);

	memset(big, 'k', DML_SECRET_MAX + 2);
	memset(want, 'k', DML_SECRET_MAX);
	want[DML_SECRET_MAX] = '\0';
	/* Exactly the limit loads, with or without its newline. */
	expect_loaded(write_file("max", big, DML_SECRET_MAX, 0600), want);
	big[DML_SECRET_MAX] = '\n';
	expect_loaded(write_file("maxnl", big, DML_SECRET_MAX + 1, 0600), want);
	/* One byte more does not. */
	big[DML_SECRET_MAX] = 'k';
	expect_refused(write_file("over", big, DML_SECRET_MAX + 1, 0600), "larger than");
	big[DML_SECRET_MAX + 1] = '\n';
	expect_refused(write_file("overnl", big, DML_SECRET_MAX + 2, 0600),
		       "larger than");
	free(big);
	free(want);
}
END_TEST

START_TEST(test_secret_not_regular)
{
	const char *path = tmp_path("dir");

	ck_assert_int_eq(mkdir(path, 0700), 0);
	expect_refused(path, "not a regular file");
}
END_TEST

static Suite *auth_suite(void)
{
	Suite *s = suite_create("auth");
	TCase *proof = tcase_create("proof");
	TCase *file = tcase_create("secret_file");

	tcase_add_test(proof, test_proof_verifies);
	tcase_add_test(proof, test_proof_layout);
	tcase_add_test(proof, test_flipped_proof);
	tcase_add_test(proof, test_flipped_nonce);
	tcase_add_test(proof, test_flipped_identity);
	tcase_add_test(proof, test_flipped_cluster);
	tcase_add_test(proof, test_wrong_secret);
	tcase_add_test(proof, test_sides_differ);
	tcase_add_test(proof, test_wrong_length);
	suite_add_tcase(s, proof);

	tcase_add_unchecked_fixture(file, tmp_setup, tmp_teardown);
	tcase_add_test(file, test_secret_load);
	tcase_add_test(file, test_secret_group_readable);
	tcase_add_test(file, test_secret_missing);
	tcase_add_test(file, test_secret_empty);
	tcase_add_test(file, test_secret_size);
	tcase_add_test(file, test_secret_not_regular);
	suite_add_tcase(s, file);
	return s;
}

int main(void)
{
	return dml_check_run(auth_suite());
}
