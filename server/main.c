/*
 * dml-server entry point: the daemon's description for dml_daemon_main.
 */
#include <stddef.h>

#include "proto/daemon.h"
#include "server/server.h"
#include "server/server_conf.h"

static int start(const void *conf, struct event_base *base, void **state)
{
	return dml_server_new(conf, base, (struct dml_server **)state);
}

static void shutdown_server(void *state)
{
	dml_server_shutdown(state);
}

static void free_server(void *state)
{
	dml_server_free(state);
}

static int server_failed(void *state)
{
	return dml_server_failed(state);
}

int main(int argc, char **argv)
{
	static const struct dml_daemon d = {
		.name = "dml-server",
		.description = "Serves shards of parameter tables to dml workers.",
		.example = "conf/server.conf",
		.schema = &dml_server_conf_schema,
		.conf_size = sizeof(struct dml_server_conf),
		.log_level_offset = offsetof(struct dml_server_conf, log_level),
		.start = start,
		.shutdown = shutdown_server,
		.free = free_server,
		.failed = server_failed,
	};

	return dml_daemon_main(argc, argv, &d);
}
