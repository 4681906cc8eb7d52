/*
 * The life of a dml daemon, shared by dml-server and dml-sched: options
 * (-c FILE, --print-config, --help), the config through its option table,
 * logging, SIGPIPE ignored, SIGTERM/SIGINT starting a clean stop, systemd
 * READY=1 once the daemon serves and STOPPING=1 when it stops, the loop.
 *
 * Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on bad usage,
 * a bad configuration or a refused secret.
 */
#ifndef DML_DAEMON_H
#define DML_DAEMON_H

#include <stddef.h>

#include <event2/event.h>

#include "proto/conf.h"

struct dml_daemon {
	const char *name;                      /* "dml-server": log ident, usage */
	const char *description;               /* a line or two for --help */
	const char *example;                   /* "conf/server.conf" */
	const struct dml_conf_schema *schema;
	size_t conf_size;                      /* sizeof the config struct */
	size_t log_level_offset;               /* offsetof its int log_level */
	/* Build and start serving; *state is passed to the two below. */
	int (*start)(const void *conf, struct event_base *base, void **state);
	void (*shutdown)(void *state);         /* begin a clean stop */
	void (*free)(void *state);             /* after the loop; NULL-safe */
	/* Optional, after the loop: non-zero if the daemon stopped on a
	 * failure of its own (the exit status is then 1). */
	int (*failed)(void *state);
};

/** Run the daemon described by d; returns the exit status. */
int dml_daemon_main(int argc, char **argv, const struct dml_daemon *d);

#endif
