/*
 * raw_frame.h - whole dml frames over a blocking socket, for the tests
 * that speak the protocol by hand (check_remap, the limits tests). Each
 * call asserts (Check) that the frame went or came whole within 10 s.
 */
#ifndef DML_TEST_RAW_FRAME_H
#define DML_TEST_RAW_FRAME_H

#include <stdint.h>

#include "proto/dml.pb-c.h"
#include "test/harness.h"

/** One whole frame from fd; *payload (malloc'ed, NULL when none) gets its payload. */
Dml__Meta *raw_frame_read(int fd, uint8_t **payload);
/** Send m with len bytes of payload on fd. */
void raw_frame_send(int fd, Dml__Meta *m, const void *payload, uint32_t len);

/**
 * Authenticate on the connected socket fd (the environment's secret,
 * cluster "dml") as (role, node_id, incarnation), naming job and clock;
 * returns the WELCOME (free it with dml_meta_free).
 */
Dml__Meta *raw_frame_handshake(struct dml_test_env *env, int fd, uint32_t role,
			       uint32_t node_id, uint64_t incarnation, uint32_t job,
			       uint64_t clock);

/**
 * raw_frame_handshake with a prelude: prelude(fd, the CHALLENGE's
 * handshake, arg) runs between reading the CHALLENGE and sending the HELLO
 * (a same-host client passing its ring, proto/shm_ring.h).
 */
Dml__Meta *raw_frame_handshake_prelude(struct dml_test_env *env, int fd, uint32_t role,
				       uint32_t node_id, uint64_t incarnation, uint32_t job,
				       uint64_t clock,
				       void (*prelude)(int fd, const Dml__Handshake *challenge,
						       void *arg),
				       void *arg);

/**
 * The acceptor's side on fd, an accepted connection: CHALLENGE, the peer's
 * HELLO (its proof checked), WELCOME as (role, node_id) of cluster "dml",
 * offering every dtype (as a dml-server does). Returns the HELLO (free it with dml_meta_free).
 */
Dml__Meta *raw_frame_accept(struct dml_test_env *env, int fd, uint32_t role,
			    uint32_t node_id);

#endif
