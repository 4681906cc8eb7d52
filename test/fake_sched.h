/*
 * A scripted stand-in for dml-sched, for tests of what servers and libdml
 * do with shard maps before and apart from the real scheduler's job logic.
 *
 * It runs its own libevent loop in a thread of the test process, listens on
 * 127.0.0.1 (a kernel-chosen port), authenticates peers with the test's
 * secret, and answers only what a server or libdml needs: REGISTER (with a
 * 200 ms heartbeat interval), HEARTBEAT, BYE, and SHARDMAP requests (with
 * the map the test set). The test pushes SHARDMAP (or CHECKPOINT) to a
 * registered server and waits for its answer. The end-to-end tests use
 * the real dml-sched; this is for the server's and the client library's
 * own tests.
 */
#ifndef DML_TEST_FAKE_SCHED_H
#define DML_TEST_FAKE_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"

struct dml_fake_sched;

/** Start listening and serving in a thread. 0, DML_ESECRET or DML_EIO. */
int dml_fake_sched_start(const char *secret_file, struct dml_fake_sched **out);

/** The port it listens on. */
uint16_t dml_fake_sched_port(const struct dml_fake_sched *f);

/**
 * What SHARDMAP requests get from now on (both copied); NULL map: they get
 * ERROR DML_ENOTFOUND "no shard map yet".
 */
void dml_fake_sched_set_map(struct dml_fake_sched *f, const Dml__JobSpec *spec,
			    const Dml__ShardMap *map);

/** SHARDMAP requests answered so far. */
unsigned dml_fake_sched_map_requests(struct dml_fake_sched *f);

/**
 * Wait until a node with this role and id is registered; its advertised
 * address goes to addr. 0 or DML_ETIMEDOUT.
 */
int dml_fake_sched_wait_registered(struct dml_fake_sched *f, uint32_t role,
				   uint32_t node_id, int timeout_ms, char *addr,
				   size_t addrlen);

/**
 * Send SHARDMAP {job_spec, shard_map} to registered server `server` and wait
 * for its answer: 0 for ACK, the ERROR's code (its message in err), or
 * DML_ETIMEDOUT / DML_ENOTFOUND (not registered).
 */
int dml_fake_sched_install(struct dml_fake_sched *f, uint32_t server,
			   const Dml__JobSpec *spec, const Dml__ShardMap *map,
			   int timeout_ms, char *err, size_t errlen);

/** Start an install without waiting; collect it with dml_fake_sched_install_wait. */
int dml_fake_sched_install_begin(struct dml_fake_sched *f, uint32_t server,
				 const Dml__JobSpec *spec, const Dml__ShardMap *map);
int dml_fake_sched_install_wait(struct dml_fake_sched *f, uint32_t server, int timeout_ms,
				char *err, size_t errlen);

/**
 * Send CHECKPOINT {job, clock, drop} to registered server `server` (clock
 * 0: prepare; > 0: cut there, or delete with drop); collect its answer
 * with _wait: 0 for ACK (its clock and bytes), the ERROR's code (its
 * message in err), DML_ETIMEDOUT or DML_ENOTFOUND.
 */
int dml_fake_sched_checkpoint_begin(struct dml_fake_sched *f, uint32_t server, uint32_t job,
				    uint64_t clock, int drop);
int dml_fake_sched_checkpoint_wait(struct dml_fake_sched *f, uint32_t server, int timeout_ms,
				   uint64_t *clock, uint64_t *bytes, char *err, size_t errlen);

/**
 * Send EVICT {job, worker} to registered server `server` (no answer comes;
 * the next request to that server may replace it before it is sent, so
 * wait for its effect first). 0 or DML_ENOTFOUND.
 */
int dml_fake_sched_evict(struct dml_fake_sched *f, uint32_t server, uint32_t job,
			 uint32_t worker);

/**
 * Wait until server `server` has sent more than `seen` STRAGGLER frames;
 * the last one's worker, clock and held_us. 0 or DML_ETIMEDOUT.
 */
int dml_fake_sched_straggler_wait(struct dml_fake_sched *f, uint32_t server, unsigned seen,
				  int timeout_ms, uint32_t *worker, uint64_t *clock,
				  uint64_t *held_us);

/** STRAGGLER frames server `server` has sent so far. */
unsigned dml_fake_sched_stragglers(struct dml_fake_sched *f, uint32_t server);

/** Stop the thread, close everything, free. NULL is fine. */
void dml_fake_sched_stop(struct dml_fake_sched *f);

#endif
