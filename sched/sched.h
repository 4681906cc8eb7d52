/*
 * dml-sched's core: the listener, one session per connection, membership
 * (REGISTER, HEARTBEAT, NODES, BYE, and the timer that moves nodes whose
 * heartbeats stopped to suspect and dead, nodes.h), jobs (SUBMIT, JOBS,
 * JOB_CONTROL, SHARDMAP, PROGRESS; shard maps sent to servers and
 * assignments to workers, jobs.h) and the Prometheus endpoint. Runs on one
 * libevent loop, which owns the node and job tables, so no locks are needed.
 */
#ifndef DML_SCHED_H
#define DML_SCHED_H

#include <stdint.h>

#include <event2/event.h>

#include "sched/sched_conf.h"

struct dml_sched;

/**
 * Load the secret, listen, start the failure detector and write the port
 * file, after the metrics endpoint (when metrics_listen is set) serves.
 * The conf and base must outlive the scheduler. On failure *out may still
 * be set: free it with dml_sched_free(). Returns DML_ESECRET, DML_ECONF
 * (listen or metrics_listen is not host:port), DML_EINVAL (timeouts the
 * node table refuses), DML_ENOMEM or DML_EIO (cannot listen or write a port
 * file); the log says which.
 */
int dml_sched_new(const struct dml_sched_conf *conf, struct event_base *base,
		  struct dml_sched **out);

/**
 * Begin a clean stop: stop accepting, flush and close every connection; the
 * loop exits when the last one is gone (at most a few seconds).
 */
void dml_sched_shutdown(struct dml_sched *s);

/** Free everything; call after the loop returned. NULL is fine. */
void dml_sched_free(struct dml_sched *s);

/** 1 when the scheduler stopped because its state could not be saved. */
int dml_sched_failed(const struct dml_sched *s);

/** The port actually bound (useful with port 0). */
uint16_t dml_sched_port(const struct dml_sched *s);

#endif
