/*
 * Cluster authentication: the shared secret file and the HMAC-SHA256
 * challenge-response of the handshake.
 *
 * Handshake: the accepting side sends CHALLENGE with a fresh nonce Ns; the
 * connecting side answers HELLO with its own nonce Nc and
 *   proof_c = HMAC(secret, "dml-client" | Ns | Nc | role | node_id | cluster);
 * the acceptor checks it and answers WELCOME with
 *   proof_s = HMAC(secret, "dml-server" | Nc | Ns | role | node_id | cluster)
 * (role and node_id are the client's), which the client checks. Both sides
 * thus prove knowledge of the secret without sending it, and a replayed HELLO
 * fails because Ns is new on every connection. Integers are 4 bytes
 * little-endian; cluster is its bytes followed by one 0 byte.
 */
#ifndef DML_AUTH_H
#define DML_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define DML_NONCE_LEN 32
#define DML_PROOF_LEN 32
#define DML_SECRET_MAX 4096

enum dml_auth_side { DML_AUTH_CLIENT = 0, DML_AUTH_SERVER = 1 };

/**
 * Load a secret file. Refuses (DML_ESECRET, logging the path and cause) a
 * missing or unreadable file, one readable or writable by group or others
 * (mode & 077), an empty one, or one over DML_SECRET_MAX bytes. One trailing
 * newline is stripped. *secret is malloc'ed; free with dml_secret_free().
 */
int dml_secret_load(const char *path, uint8_t **secret, size_t *len);

/** Wipe and free a secret from dml_secret_load(); NULL is fine. */
void dml_secret_free(uint8_t *secret, size_t len);

/**
 * Compute a proof. side DML_AUTH_CLIENT: nonce_first = Ns, nonce_second = Nc;
 * DML_AUTH_SERVER: nonce_first = Nc, nonce_second = Ns.
 */
void dml_auth_proof(const uint8_t *secret, size_t secret_len, enum dml_auth_side side,
		    const uint8_t *nonce_first, const uint8_t *nonce_second,
		    uint32_t role, uint32_t node_id, const char *cluster,
		    uint8_t out[DML_PROOF_LEN]);

/** Check a received proof in constant time: 0 or DML_EAUTH. */
int dml_auth_verify(const uint8_t *secret, size_t secret_len, enum dml_auth_side side,
		    const uint8_t *nonce_first, const uint8_t *nonce_second,
		    uint32_t role, uint32_t node_id, const char *cluster,
		    const uint8_t *proof, size_t proof_len);

#endif
