/*
 * dml-worker: the daemon that runs jobs. It registers with dml-sched
 * through the scheduler link (role WORKER, with its measured profile),
 * answers each ASSIGN with an ACK, and runs the assigned job's app in a
 * trainer thread through libdml: pull, compute, push, clock over its data
 * partitions, reporting PROGRESS to the scheduler. Between jobs it stays
 * registered and idle.
 *
 * Threads: the daemon's libevent loop (scheduler link, ASSIGN handler,
 * progress timer, metrics) and one trainer thread, which owns the libdml
 * connection and the app. They share the latest assignment and the reports
 * to send under one mutex; the trainer never touches the loop.
 */
#ifndef DML_WORKER_H
#define DML_WORKER_H

#include <event2/event.h>

#include "worker/worker_conf.h"

struct dml_worker;

/**
 * Build the worker on base: load the secret, measure the profile, start
 * the trainer thread, metrics and the scheduler link. *out is set even on
 * failure and must be freed with dml_worker_free(). conf must outlive the
 * worker. Returns 0, DML_ESECRET, DML_ECONF, DML_EIO or DML_ENOMEM.
 */
int dml_worker_new(const struct dml_worker_conf *conf, struct event_base *base,
		   struct dml_worker **out);

/**
 * Begin a clean stop: the trainer ends its job at the next clock boundary
 * (leaving the servers), then the worker says BYE to the scheduler and the
 * loop runs out. Safe more than once.
 */
void dml_worker_shutdown(struct dml_worker *w);

/** Join the trainer and free everything, after the loop returned; NULL is fine. */
void dml_worker_free(struct dml_worker *w);

#endif
