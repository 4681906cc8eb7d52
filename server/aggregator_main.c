/*
 * dml-aggregator entry point: the daemon's description for dml_daemon_main.
 */
#include <stddef.h>

#include "proto/daemon.h"
#include "server/aggregator_internal.h"

static int start(const void *conf, struct event_base *base, void **state)
{
	return dml_agg_new(conf, base, (struct dml_agg **)state);
}

static void shutdown_agg(void *state)
{
	dml_agg_shutdown(state);
}

static void free_agg(void *state)
{
	dml_agg_free(state);
}

int main(int argc, char **argv)
{
	static const struct dml_daemon d = {
		.name = "dml-aggregator",
		.description = "Sums a zone's pushes and serves its pulls for the owning "
			       "dml-servers.",
		.example = "conf/aggregator.conf",
		.schema = &dml_agg_conf_schema,
		.conf_size = sizeof(struct dml_agg_conf),
		.log_level_offset = offsetof(struct dml_agg_conf, log_level),
		.start = start,
		.shutdown = shutdown_agg,
		.free = free_agg,
	};

	return dml_daemon_main(argc, argv, &d);
}
