/*
 * dml-sched entry point: the daemon's description for dml_daemon_main.
 */
#include <stddef.h>

#include "proto/daemon.h"
#include "sched/sched.h"
#include "sched/sched_conf.h"

static int start(const void *conf, struct event_base *base, void **state)
{
	return dml_sched_new(conf, base, (struct dml_sched **)state);
}

static void shutdown_sched(void *state)
{
	dml_sched_shutdown(state);
}

static int sched_failed(void *state)
{
	return dml_sched_failed(state);
}

static void free_sched(void *state)
{
	dml_sched_free(state);
}

int main(int argc, char **argv)
{
	static const struct dml_daemon d = {
		.name = "dml-sched",
		.description = "Runs the dml cluster: nodes register and heartbeat (alive, suspect\n"
			       "or dead, see `dmlctl nodes`); jobs are submitted with dmlctl, get\n"
			       "their shard map on the servers and their data partitions on the\n"
			       "workers, and move work when nodes die or join.",
		.example = "conf/sched.conf",
		.schema = &dml_sched_conf_schema,
		.conf_size = sizeof(struct dml_sched_conf),
		.log_level_offset = offsetof(struct dml_sched_conf, log_level),
		.start = start,
		.shutdown = shutdown_sched,
		.free = free_sched,
		.failed = sched_failed,
	};

	return dml_daemon_main(argc, argv, &d);
}
