/*
 * dml-server's core: the listener, one session per connection, and the
 * handlers for push, pull, clock, heartbeat, bye and stats. Runs on one
 * libevent loop; the loop owns every table, so no locks are needed.
 */
#ifndef DML_SERVER_H
#define DML_SERVER_H

#include <stdint.h>

#include <event2/event.h>

#include "server/server_conf.h"

struct dml_server;

/**
 * Build tables, load the secret, listen, write the port file. The conf must
 * outlive the server. Returns DML_ESECRET, DML_EIO (cannot listen or write
 * the port file), DML_EINVAL (a table the storage refuses) or DML_ENOMEM;
 * the log says which.
 */
int dml_server_new(const struct dml_server_conf *conf, struct event_base *base,
		   struct dml_server **out);

/**
 * Begin a clean stop: stop accepting, fail held pulls, flush and close every
 * connection; the loop exits when the last one is gone (at most a few s).
 */
void dml_server_shutdown(struct dml_server *s);

/** Free everything; call after the loop returned. NULL is fine. */
void dml_server_free(struct dml_server *s);

/** The port actually bound (useful with port 0). */
uint16_t dml_server_port(const struct dml_server *s);

/** Non-zero when the server stopped because its gradient log failed. */
int dml_server_failed(const struct dml_server *s);

#endif
