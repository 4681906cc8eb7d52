/*
 * What the files of check_remap share: the job spec and maps a test
 * installs, its servers, a blocking raw client, the model the servers must
 * agree with, and the steps every test starts with (check_remap_util.c);
 * each file's tests are added to the suite in check_remap.c.
 */
#ifndef DML_CHECK_REMAP_H
#define DML_CHECK_REMAP_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/dml.h"
#include "proto/dml.pb-c.h"
#include "test/fake_sched.h"
#include "test/harness.h"
#include "shard/shardmap.h"

#define TEST_TIMEOUT_S 90
#define WAIT_MS 10000
#define JOB 7
#define DKEYS 500          /* dense table 0 */
#define DW 2
#define NSPARSE 400        /* keys used of sparse table 1 */
#define SW 3
#define LR 0.1f
#define MOMENTUM 0.9f
#define H DML_SHARD_HASH_SPACE
#define TOL 1e-4

struct range_def {
	uint32_t table;
	uint64_t begin, end;
	uint32_t server;
};

/* A job spec and one map, in storage the test owns. */
struct job {
	Dml__TableSpec t[2];
	Dml__TableSpec *tp[2];
	Dml__JobSpec spec;
	Dml__ShardServer sv[4];
	Dml__ShardServer *svp[4];
	Dml__ShardRange r[8];
	Dml__ShardRange *rp[8];
	Dml__ShardMap map;
	char addr[4][300];         /* of servers 1..3 (index = node id) */
};

struct raw {
	int fd;
	uint64_t next_id;
	uint64_t map_version;      /* from WELCOME */
	uint32_t shard_index, shard_count, ntables;
};

/* The reply to one request: what the tests look at. */
struct answer {
	int type;
	int code;                  /* ERROR */
	char message[256];
	uint64_t map_version;
	float values[16];          /* PULL_REPLY, first values */
	Dml__Stats *stats;         /* STATS_REPLY, owned */
};

struct model {
	float dw[DKEYS * DW], dv[DKEYS * DW];
	float sw[NSPARSE * SW], sv[NSPARSE * SW];
	uint64_t keys[NSPARSE];
};

/* ---- check_remap_util.c ---- */

void job_init(struct job *j, uint32_t id);

void job_map(struct job *j, uint64_t version, const uint32_t *servers, size_t ns,
	     const struct range_def *ranges, size_t nr);

/* Send the map to every listed server at once, then collect the answers. */
void install_all(struct dml_fake_sched *f, struct job *j, const uint32_t *ids,
		 size_t n, int expect);

/* store: a [store] section, or NULL. */
struct dml_test_server *server_up(struct dml_test_env *env, struct dml_fake_sched *f,
				  uint32_t id, const char *tables, const char *store,
				  char *addr, size_t addrlen);

struct dml_test_server *start_server(struct dml_test_env *env,
				     struct dml_fake_sched *f, uint32_t id,
				     const char *tables, char *addr, size_t addrlen);

void expect_log(const struct dml_test_server *s, const char *needle);

/* libdml, standalone, on the servers in map order, for job `job`; the
 * options live as long as the connection (see dml.h). */
dml_t *client(struct dml_test_env *env, struct dml_test_server *const *servers,
	      size_t n, uint32_t worker, uint32_t job, dml_opts_t **o);

void raw_send(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len);

/* Connect and authenticate as (role, node_id), naming job and clock. */
void raw_open(struct dml_test_env *env, uint16_t port, uint32_t role,
	      uint32_t node_id, uint64_t incarnation, uint32_t job, uint64_t clock,
	      struct raw *r);

void raw_close(struct raw *r);

/* Wait for the frame answering request id (skipping others). */
void raw_answer(struct raw *r, uint64_t id, struct answer *a);

/* Send m and wait for its answer. */
void raw_call(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len,
	      struct answer *a);

void answer_free(struct answer *a);

/* A dense push of one key of table 0 (width DW), of weight (0: none sent). */
void raw_push_key_weighted(struct raw *r, uint32_t job, uint64_t key, uint64_t seq,
			   const float *g, float weight, struct answer *a);

void raw_push_key(struct raw *r, uint32_t job, uint64_t key, uint64_t seq,
		  const float *g, struct answer *a);

/* A dense pull of one key of table 0 at clock; its request id. */
uint64_t raw_pull_send(struct raw *r, uint32_t job, uint64_t key, uint64_t clock);

void raw_pull_key(struct raw *r, uint32_t job, uint64_t key, struct answer *a);

float grad_of(uint64_t key, unsigned j, int step);

/* Momentum as the server applies it (table.h): v = m v + g; w -= lr v. */
void ref_step(float *w, float *v, const float *g, size_t n);

void grads(const struct model *md, int step, float *dg, float *sg);

/* One step pushed through d and applied to the model. */
void step(dml_t *d, struct model *md, int n);

void pull_all(dml_t *d, const struct model *md, float *dw, float *sw);

void assert_close(const float *got, const float *want, size_t n, const char *what);

/* Step n of the model, then every value must be the reference's. */
void step_matches(dml_t *d, struct model *md, int n, float *pd, float *ps,
		  const char *when);

/*
 * Keys from salt, the model's first values, and its first two steps on the
 * servers listed; then pd and ps (if not NULL) get the values.
 */
void first_steps(struct dml_test_env *env, struct dml_test_server *const *s, size_t n,
		 struct model *md, uint64_t salt, float *pd, float *ps);

/*
 * A new client on the servers listed finds the values wd and ws bit for
 * bit (pd and ps: room for them), and step n then matches the reference.
 */
void kept_then_step(struct dml_test_env *env, struct dml_test_server *const *s,
		    size_t ns, struct model *md, const float *wd, const float *ws,
		    float *pd, float *ps, int n, const char *when);

/* Stop the servers (cleanly), the scheduler and the environment. */
void all_down(struct dml_test_server **s, int n, struct dml_fake_sched *f,
	      struct dml_test_env *env);

/* Servers 1 and 2, then 1, 2 and 3 with other shares. */
extern const struct range_def v1_ranges[];
extern const struct range_def v2_ranges[];
/* A map with all of both tables on server 1. */
extern const struct range_def one_ranges[];

/* ---- check_remap_frames.c ---- */

/** Many frames per move, a newer map midway, parked pulls. */
void check_remap_frames_tests(TCase *tc);

/* ---- check_remap_faults.c ---- */

/** A hung worker evicted, servers restarted mid-move. */
void check_remap_faults_tests(TCase *tc);

#endif
