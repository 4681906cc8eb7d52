/*
 * check_aggregator.h - the fixture and raw-frame helpers of the aggregator
 * tests (check_aggregator_util.c). Every helper asserts (Check).
 */
#ifndef DML_TEST_CHECK_AGGREGATOR_H
#define DML_TEST_CHECK_AGGREGATOR_H

#include <check.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"
#include "test/harness.h"

#define KEYS 8
#define TABLE 1
#define WAIT_MS 10000
/* How long a reply that must not come is waited for. */
#define SILENCE_MS 400

enum owner_kind {
	OWNER_DIRECT,     /* a dml-server the aggregator dials */
	OWNER_PROXIED,    /* the same behind the harness's proxy */
	OWNER_FAKE        /* a socket the test answers for, as a server */
};

struct fixture {
	struct dml_test_env *env;
	struct dml_test_server *owner, *agg;
	struct dml_test_proxy *proxy;
	char owner_addr[32];        /* as the aggregator's servers name it */
	uint16_t agg_metrics;
	int fake_lfd, fake;         /* OWNER_FAKE: its listener and connection */
	/* a real owner: each worker's own connection to it (the owner
	 * applies a forwarded push only for workers that joined it) */
	int joined[4];
};


/** The owner, then a dml-aggregator (its metrics served) with agg_extra. */
void fixture_start(struct fixture *f, enum owner_kind kind, const char *agg_extra);
/** Stop the aggregator (it must exit 0) and free the environment. */
void fixture_end(struct fixture *f);
/** OWNER_FAKE: accept the aggregator's connection and answer its handshake. */
void fake_owner_accept(struct fixture *f);
/** Wait until the aggregator's metric reads want. */
void wait_agg_metric(struct fixture *f, const char *name, double want);
/** A raw worker connection to the aggregator, incarnation 1000 + id (ids 1
 * to 3); with a real owner, the worker joins it too, as libdml does. */
int worker_connect(struct fixture *f, uint32_t id);
/** The owner restarted: every worker that joined it joins again. */
void workers_rejoin(struct fixture *f);
/** m: a request of the whole dense range of table 1. */
void dense_meta(Dml__Meta *m, Dml__MsgType type, uint64_t rid, uint64_t clock,
		const char *owner);
/** A PUSH of the whole range at clock 1, KEYS floats. */
void send_push(int fd, uint64_t rid, uint64_t seq, const char *owner, const float *v);
/** A CLOCK for the owner (as libdml sends it through an aggregator). */
void send_clock(int fd, uint64_t clock, const char *owner);
/** The real owner's clock of worker id (STATS). */
uint64_t owner_clock(struct fixture *f, uint32_t id);
/** Wait until the real owner's clock of worker id reads want. */
void wait_owner_clock(struct fixture *f, uint32_t id, uint64_t want);
/** The next frame: an ACK of rid (code 0) or an ERROR of rid with code. */
void expect_reply(int fd, uint64_t rid, int code);
/** Nothing arrives for SILENCE_MS. */
void expect_silence(int fd);
/** A HEARTBEAT comes back: the connection still serves. */
void expect_alive(int fd, uint64_t rid);
/** The real owner's STATS push and pull counters. */
void owner_stats(struct fixture *f, uint64_t *pushes, uint64_t *pulls);
void wait_owner_pushes(struct fixture *f, uint64_t want);
/** PULL of the whole range at clock in dtype; the reply's values into out. */
void pull_values(int fd, uint64_t rid, uint64_t clock, const char *owner,
		 Dml__DType dtype, float *out);
void owner_values(struct fixture *f, float *out);
/** v[k] = scale (k + 1). */
void fill(float *v, float scale);
/** sgd, lr 1, from zeros: got[k] = -scale (k + 1). */
void expect_values(const float *got, float scale);
void expect_owner_sum(struct fixture *f, float scale);

/** The tests against a fake owner (check_aggregator_fake.c). */
void add_fake_owner_tests(TCase *tc);

#endif
