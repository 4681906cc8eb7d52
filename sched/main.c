/*
 * dml-sched entry point: options, config, signals, readiness, the loop.
 * Exit status: 0 after a clean stop, 1 on a runtime failure, 2 on bad usage
 * or configuration.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "config.h"
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "dml_error.h"
#include "log.h"
#include "sched.h"
#include "sched_conf.h"

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dml-sched -c FILE [--print-config]\n"
		"       dml-sched --help\n\n"
		"Keeps the dml cluster's membership: nodes register and heartbeat,\n"
		"and each is alive, suspect or dead (see `dmlctl nodes`).\n\n"
		"  -c, --config FILE   configuration file (see conf/sched.conf)\n"
		"  --print-config      print the effective configuration and exit\n"
		"  -h, --help          this text, then every configuration option\n\n");
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	dml_info("received %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
#ifdef HAVE_SYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
	dml_sched_shutdown(arg);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "print-config", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct dml_sched_conf conf;
	struct dml_sched *sched = NULL;
	struct event_base *base;
	struct event *sigterm, *sigint;
	const char *path = NULL;
	char err[512];
	int print = 0, opt, rc;

	dml_log_set_ident("dml-sched");
	while ((opt = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 'p': print = 1; break;
		case 'h':
			usage(stdout);
			dml_conf_print_help(&dml_sched_conf_schema, stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!path || optind != argc) {
		usage(stderr);
		return 2;
	}
	memset(&conf, 0, sizeof(conf));
	rc = dml_conf_load(&dml_sched_conf_schema, path, &conf, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "dml-sched: %s\n", err);
		dml_conf_free(&dml_sched_conf_schema, &conf);
		return 2;
	}
	if (print) {
		dml_conf_print(&dml_sched_conf_schema, &conf, stdout);
		dml_conf_free(&dml_sched_conf_schema, &conf);
		return 0;
	}
	dml_log_set_level(conf.log_level);
	signal(SIGPIPE, SIG_IGN);

	base = event_base_new();
	if (!base) {
		dml_err("cannot create the event loop");
		dml_conf_free(&dml_sched_conf_schema, &conf);
		return 1;
	}
	rc = dml_sched_new(&conf, base, &sched);
	if (rc) {
		dml_err("not starting: %s", dml_strerror(rc));
		dml_sched_free(sched);
		event_base_free(base);
		dml_conf_free(&dml_sched_conf_schema, &conf);
		return rc == DML_ESECRET || rc == DML_ECONF ? 2 : 1;
	}
	sigterm = evsignal_new(base, SIGTERM, on_signal, sched);
	sigint = evsignal_new(base, SIGINT, on_signal, sched);
	event_add(sigterm, NULL);
	event_add(sigint, NULL);
#ifdef HAVE_SYSTEMD
	sd_notify(0, "READY=1");
#endif
	rc = event_base_dispatch(base);
	dml_info("stopped");
	event_free(sigterm);
	event_free(sigint);
	dml_sched_free(sched);
	event_base_free(base);
	dml_conf_free(&dml_sched_conf_schema, &conf);
	libevent_global_shutdown();
	return rc < 0 ? 1 : 0;
}
