/*
 * Cluster authentication: loads the shared secret file and computes and
 * checks the HMAC-SHA256 proofs of the handshake (layout in auth.h).
 *
 * It must never leave secret bytes behind (every buffer that held the secret
 * is wiped before it is freed or goes out of scope), never compare a proof in
 * time that depends on its contents, and never accept a secret file that
 * someone other than its owner could read or change. Failure is closed: when
 * a proof cannot be computed, verification fails and a computed proof is
 * random bytes that match nothing.
 *
 * Choices the header leaves open:
 *  - The secret file may be a symlink (secret stores often mount them that
 *    way); the checks apply to the file it points to, via fstat on the open
 *    descriptor, so the checked file is the one that is read. It is opened
 *    non-blocking so a FIFO planted at the path cannot hang the daemon.
 *  - The size limit applies after the trailing newline ("\n" or "\r\n") is
 *    stripped, so a DML_SECRET_MAX-byte secret written by `echo` loads.
 *  - An empty secret or an unknown side never yields a valid proof.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "proto/auth.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

/* Room for the largest secret, an "\r\n" and one byte to detect more. */
#define SECRET_READ_MAX (DML_SECRET_MAX + 3)
#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

static int secret_refuse(const char *path, const char *cause)
{
	dml_err("secret file %s: %s", path, cause);
	return DML_ESECRET;
}

/* Read the whole descriptor into buf (up to cap bytes); -1 with errno set. */
static ssize_t read_all(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;

	while (got < cap) {
		ssize_t n = read(fd, buf + got, cap - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

static size_t strip_newline(const uint8_t *buf, size_t n)
{
	if (n > 0 && buf[n - 1] == '\n') {
		n--;
		if (n > 0 && buf[n - 1] == '\r')
			n--;
	}
	return n;
}

/* Checks the open file and reads it into buf; 0 with *len set, or DML_ESECRET. */
static int secret_read_fd(const char *path, int fd, uint8_t *buf, size_t *len)
{
	struct stat st;
	ssize_t got;

	if (fstat(fd, &st) < 0)
		return secret_refuse(path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return secret_refuse(path, "not a regular file");
	if (st.st_mode & 077)
		return secret_refuse(path, "readable or writable by group or others; "
					   "chmod 600 it");
	got = read_all(fd, buf, SECRET_READ_MAX);
	if (got < 0)
		return secret_refuse(path, strerror(errno));
	*len = strip_newline(buf, (size_t)got);
	if (*len == 0)
		return secret_refuse(path, "empty");
	if (*len > DML_SECRET_MAX)
		return secret_refuse(path,
				     "larger than " STRINGIFY(DML_SECRET_MAX) " bytes");
	return 0;
}

int dml_secret_load(const char *path, uint8_t **secret, size_t *len)
{
	uint8_t buf[SECRET_READ_MAX];
	size_t n = 0;
	int fd, rc;

	if (!path || !secret || !len)
		return DML_EINVAL;
	*secret = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return secret_refuse(path, strerror(errno));
	rc = secret_read_fd(path, fd, buf, &n);
	close(fd);
	if (rc == 0) {
		*secret = dml_xmalloc(n);
		memcpy(*secret, buf, n);
		*len = n;
	}
	OPENSSL_cleanse(buf, sizeof(buf));
	return rc;
}

void dml_secret_free(uint8_t *secret, size_t len)
{
	if (!secret)
		return;
	OPENSSL_cleanse(secret, len);
	free(secret);
}

static const char *side_label(enum dml_auth_side side)
{
	switch (side) {
	case DML_AUTH_CLIENT:
		return "dml-client";
	case DML_AUTH_SERVER:
		return "dml-server";
	}
	return NULL;
}

/* Feeds the proof's message, in auth.h's order, to an initialized MAC. */
static bool proof_update(EVP_MAC_CTX *ctx, const char *label, const uint8_t *nonce_first,
			 const uint8_t *nonce_second, uint32_t role, uint32_t node_id,
			 const char *cluster)
{
	uint8_t ints[8];

	dml_store_le32(ints, role);
	dml_store_le32(ints + 4, node_id);
	/* cluster goes in with its terminating NUL, as auth.h specifies. */
	return EVP_MAC_update(ctx, (const uint8_t *)label, strlen(label)) &&
	       EVP_MAC_update(ctx, nonce_first, DML_NONCE_LEN) &&
	       EVP_MAC_update(ctx, nonce_second, DML_NONCE_LEN) &&
	       EVP_MAC_update(ctx, ints, sizeof(ints)) &&
	       EVP_MAC_update(ctx, (const uint8_t *)cluster, strlen(cluster) + 1);
}

/* HMAC-SHA256 of the proof message; 0, or DML_EAUTH when it cannot be made. */
static int proof_compute(const uint8_t *secret, size_t secret_len,
			 enum dml_auth_side side, const uint8_t *nonce_first,
			 const uint8_t *nonce_second, uint32_t role, uint32_t node_id,
			 const char *cluster, uint8_t out[DML_PROOF_LEN])
{
	const char *label = side_label(side);
	OSSL_PARAM params[2];
	EVP_MAC_CTX *ctx = NULL;
	EVP_MAC *mac = NULL;
	size_t out_len = 0;
	int rc = DML_EAUTH;

	if (!secret || secret_len == 0 || !label || !nonce_first || !nonce_second ||
	    !cluster)
		return DML_EAUTH;
	params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
						     (char *)"SHA256", 0);
	params[1] = OSSL_PARAM_construct_end();
	mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (mac)
		ctx = EVP_MAC_CTX_new(mac);
	if (ctx && EVP_MAC_init(ctx, secret, secret_len, params) &&
	    proof_update(ctx, label, nonce_first, nonce_second, role, node_id, cluster) &&
	    EVP_MAC_final(ctx, out, &out_len, DML_PROOF_LEN) && out_len == DML_PROOF_LEN)
		rc = 0;
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	if (rc < 0)
		dml_err("auth: cannot compute HMAC-SHA256 proof");
	return rc;
}

void dml_auth_proof(const uint8_t *secret, size_t secret_len, enum dml_auth_side side,
		    const uint8_t *nonce_first, const uint8_t *nonce_second,
		    uint32_t role, uint32_t node_id, const char *cluster,
		    uint8_t out[DML_PROOF_LEN])
{
	if (proof_compute(secret, secret_len, side, nonce_first, nonce_second, role,
			  node_id, cluster, out) == 0)
		return;
	/* Fail closed: a random proof is rejected by any honest peer. */
	if (dml_random_bytes(out, DML_PROOF_LEN) < 0)
		memset(out, 0, DML_PROOF_LEN);
}

int dml_auth_verify(const uint8_t *secret, size_t secret_len, enum dml_auth_side side,
		    const uint8_t *nonce_first, const uint8_t *nonce_second,
		    uint32_t role, uint32_t node_id, const char *cluster,
		    const uint8_t *proof, size_t proof_len)
{
	uint8_t expect[DML_PROOF_LEN];
	int rc;

	if (!proof || proof_len != DML_PROOF_LEN)
		return DML_EAUTH;
	rc = proof_compute(secret, secret_len, side, nonce_first, nonce_second, role,
			   node_id, cluster, expect);
	if (rc == 0 && CRYPTO_memcmp(expect, proof, DML_PROOF_LEN) != 0)
		rc = DML_EAUTH;
	OPENSSL_cleanse(expect, sizeof(expect));
	return rc;
}
