/*
 * cluster.h - a whole cluster for end-to-end tests, on top of harness.h:
 * dml-sched, dml-servers that take their tables from it and dml-workers
 * from config files, as real processes on 127.0.0.1, driven through dmlctl
 * the way an operator drives them.
 *
 * Every function asserts (Check) what it needs: a cluster that cannot
 * start fails the test that asked for it. Nothing here stops a process it
 * did not start, and cluster_down() checks that every one of them exits
 * cleanly.
 */
#ifndef DML_TEST_CLUSTER_H
#define DML_TEST_CLUSTER_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "test/harness.h"
#include "test/json.h"

#define CLUSTER_MAX_SERVERS 3
#define CLUSTER_MAX_WORKERS 4
/** How long one cluster test may run; waits below give up well before. */
#define CLUSTER_TEST_TIMEOUT_S 180
/** How long a wait for the cluster polls, and how often. */
#define CLUSTER_WAIT_MS 60000
#define CLUSTER_POLL_MS 100

/** Where the nodes of a cluster are (cluster_up_zones); NULL: no zone. */
struct cluster_zones {
	const char *servers;                          /* every server's */
	const char *workers[CLUSTER_MAX_WORKERS + 1]; /* by node id */
};

struct cluster {
	struct dml_test_env *env;
	struct dml_test_server *sched;
	struct dml_test_server *servers[CLUSTER_MAX_SERVERS];
	size_t nservers;
	pid_t workers[CLUSTER_MAX_WORKERS + 1]; /* by node id; 0: not running */
	uint16_t port;                          /* the scheduler's */
	const char *server_conf;                /* appended to each server's config */
	struct cluster_zones zones;             /* borrowed strings */
};

/** Sleep ms milliseconds, signals notwithstanding. */
void cluster_sleep_ms(int ms);

/**
 * Start dml-sched (fast heartbeats: dead after 1 s; its state in a store,
 * on a port pinned for restarts), nservers servers and workers
 * 1..nworkers, and wait until every worker is alive.
 */
void cluster_up(struct cluster *c, size_t nservers, uint32_t nworkers);

/**
 * cluster_up with server_conf (e.g. a [limits] or [store] section) in every
 * server's config, where @DIR@ stands for the environment's folder and
 * @NODE@ for the server's node id.
 */
void cluster_up_conf(struct cluster *c, size_t nservers, uint32_t nworkers,
		     const char *server_conf);

/**
 * cluster_up with each node in its zone (zones and its strings borrowed
 * for the cluster's life; servers added later join the same zone).
 */
void cluster_up_zones(struct cluster *c, size_t nservers, uint32_t nworkers,
		      const struct cluster_zones *zones);

/** SIGTERM every worker and check its clean exit, then stop the daemons. */
void cluster_down(struct cluster *c);

/** cluster_down's stops alone: the folder (stores, logs) stays until cluster_free. */
void cluster_stop(struct cluster *c);
void cluster_free(struct cluster *c);

/** Start one more dml-server (node id: its index + 1) under the scheduler. */
void cluster_add_server(struct cluster *c);

/** Start dml-worker node id (1..CLUSTER_MAX_WORKERS), one thread. */
void cluster_start_worker(struct cluster *c, uint32_t id);

/**
 * dmlctl --json ARGS... (at most 6, NULL-terminated), which must exit 0 and
 * print one JSON value into doc (json_free() it). Returns 0, or -1 after
 * printing what dmlctl said.
 */
int cluster_dmlctl_json(struct cluster *c, const char *const *args, struct jval *doc);

/** The entry for (role, id) in the nodes of `dmlctl --json nodes`, or NULL. */
const struct jval *cluster_node(const struct jval *doc, const char *role, uint32_t id);

/** Worker id's entry in the workers of a job's `dmlctl --json status`, or NULL. */
const struct jval *cluster_job_worker(const struct jval *job, uint32_t id);

/** Wait until every worker 1..n is alive at the scheduler. */
void cluster_wait_workers(struct cluster *c, uint32_t n);

/** `dmlctl submit FILE`: the job's id. */
uint32_t cluster_submit(struct cluster *c, const char *path);

/** Run `dmlctl submit FILE --wait` in the background (output: submit.log). */
pid_t cluster_submit_wait(struct cluster *c, const char *path);

/**
 * The main of a cluster test program: the n tests as suite `name`, one
 * test case "cluster" with CLUSTER_TEST_TIMEOUT_S, run by dml_check_run();
 * DML_TEST_ONLY=test_name in the environment runs that test alone.
 * Returns the program's exit status.
 */
int cluster_suite_run(const char *name, const TTest *const *tests, size_t n);

/** `dmlctl --json status JOB` into doc (json_free() it); the job object is doc itself. */
void cluster_job_status(struct cluster *c, const char *job, struct jval *doc);

/** Poll the job until its clock reaches at least clock; fails if it ends first. */
void cluster_wait_job_clock(struct cluster *c, const char *job, double clock);

/**
 * Write job file name into the environment's folder: job_section (the
 * [job] section) and table 0, dense, 64 keys of width 1, sgd with lr
 * 0.05 (what lsq with dim = 64 needs). Returns its path (free() it).
 */
char *cluster_write_lsq_job(struct cluster *c, const char *name, const char *job_section);

#endif
