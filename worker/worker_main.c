/*
 * dml-worker entry point: the daemon's description for dml_daemon_main.
 */
#include <stddef.h>

#include "daemon.h"
#include "worker.h"
#include "worker_conf.h"

static int start(const void *conf, struct event_base *base, void **state)
{
	return dml_worker_new(conf, base, (struct dml_worker **)state);
}

static void shutdown_worker(void *state)
{
	dml_worker_shutdown(state);
}

static void free_worker(void *state)
{
	dml_worker_free(state);
}

int main(int argc, char **argv)
{
	static const struct dml_daemon d = {
		.name = "dml-worker",
		.description = "Runs the training jobs that dml-sched assigns to it: pulls\n"
			       "parameters, computes gradients on its data partitions and\n"
			       "pushes them.",
		.example = "conf/worker.conf",
		.schema = &dml_worker_conf_schema,
		.conf_size = sizeof(struct dml_worker_conf),
		.log_level_offset = offsetof(struct dml_worker_conf, log_level),
		.start = start,
		.shutdown = shutdown_worker,
		.free = free_worker,
	};

	return dml_daemon_main(argc, argv, &d);
}
