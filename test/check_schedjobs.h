/*
 * What the files of check_schedjobs share: the in-process peers
 * (schedjobs_peer.c) and the requests made through them, the scheduler
 * under test (check_schedjobs.c), and each file's list of tests.
 */
#ifndef DML_TEST_CHECK_SCHEDJOBS_H
#define DML_TEST_CHECK_SCHEDJOBS_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "proto/conn.h"
#include "proto/dml.pb-c.h"
#include "test/harness.h"

#define WAIT_MS 10000
#define INBOX_MAX 64

struct net {
	struct event_base *base;
	struct event *wake;        /* keeps loop turns short */
	uint8_t *secret;
	size_t secret_len;
	uint16_t port;
};

struct peer {
	struct net *net;
	struct dml_conn *conn;
	uint32_t role, node_id;
	int ready, closed;
	uint64_t next_id;
	Dml__Meta *inbox[INBOX_MAX];
	size_t n;
};

struct sched {
	struct dml_test_env *env;
	struct dml_test_server *proc;
	struct net net;
	struct peer *ctl;
	char *metrics_port_file;
};

/* ---- check_schedjobs.c ------------------------------------------------ */

void sched_up(struct sched *t, const char *extra);
void sched_down(struct sched *t, struct peer **peers, size_t n);
void sched_log_wait(struct sched *t, const char *needle);

/* ---- schedjobs_peer.c ------------------------------------------------- */

void net_init(struct net *net, struct dml_test_env *env, uint16_t port);
void net_destroy(struct net *net);
uint64_t now_ms(void);
void net_run(struct net *net, int ms);
struct peer *peer_connect(struct net *net, uint32_t role, uint32_t node_id);
void peer_free(struct peer *p);
Dml__Meta *peer_take(struct peer *p, int type, uint64_t request_id, int ms);
void peer_send(struct peer *p, Dml__Meta *m);
Dml__Meta *peer_request(struct peer *p, Dml__Meta *m);
void assert_error(Dml__Meta *r, int code, const char *needle);
struct peer *node_up(struct net *net, uint32_t role, uint32_t id);
/** Register in zone; a SERVER at 127.0.0.1:20000+id, an AGGREGATOR at 30000+id. */
struct peer *node_up_zone(struct net *net, uint32_t role, uint32_t id, const char *zone);
void peer_ack(struct peer *p, const Dml__Meta *req);
void take_free(Dml__Meta *m);
uint32_t submit(struct peer *ctl, const char *name, const char *extra);
Dml__Meta *job_status(struct peer *ctl, uint32_t job);
void wait_reason(struct peer *ctl, uint32_t job, int state, const char *reason);
void wait_node_state(struct peer *ctl, uint32_t role, uint32_t id, int state);
Dml__Meta *control(struct peer *ctl, uint32_t job, Dml__JobAction action);
void control_ok(struct peer *ctl, uint32_t job, Dml__JobAction action);
Dml__Meta *shardmap_ask(struct peer *p, uint32_t job);
void progress(struct peer *w, uint32_t job, uint64_t clock, int finished);
void progress_walked(struct peer *w, uint32_t job, const uint32_t *parts, size_t n,
		     const uint32_t *gone, size_t ngone);
int has_part(const uint32_t *parts, size_t n, uint32_t q);
Dml__Meta *expect_map(struct peer *srv, uint32_t job, uint64_t version,
		      size_t nservers);
Dml__Meta *expect_assign(struct peer *w, Dml__JobState state, size_t parts);

/* ---- check_schedjobs_workers.c ---------------------------------------- */

void peer_refuse(struct peer *p, const Dml__Meta *req, int code, const char *why);

/* ---- each file's tests -------------------------------------------------- */

void check_schedjobs_add_workers(TCase *tc);
void check_schedjobs_add_ckpt(TCase *tc);
void check_schedjobs_add_routes(TCase *tc);

#endif
