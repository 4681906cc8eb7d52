/*
 * dml_daemon_main (see daemon.h). Must never start serving on a config
 * that did not parse completely, or report READY before the daemon listens.
 */
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "proto/daemon.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

struct running {
	const struct dml_daemon *d;
	void *state;
};

static void usage(const struct dml_daemon *d, FILE *out)
{
	fprintf(out,
		"usage: %s -c FILE [--print-config]\n"
		"       %s --help\n\n"
		"%s\n\n"
		"  -c, --config FILE   configuration file (see %s)\n"
		"  --print-config      print the effective configuration and exit\n"
		"  -h, --help          this text, then every configuration option\n\n",
		d->name, d->name, d->description, d->example);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct running *r = arg;

	dml_info("received %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
#ifdef HAVE_SYSTEMD
	sd_notify(0, "STOPPING=1");
#endif
	r->d->shutdown(r->state);
}

/* Serve until stopped; returns the exit status. */
/*
 * A dense table's frames are hundreds of KiB to MiBs, allocated and freed
 * many times a second (a push's floats, a zone's sum, a reply's copy).
 * glibc maps each one above its mmap threshold afresh and gives a freed
 * heap top back, so every such buffer faulted its pages in and had them
 * zeroed again: a tenth of a zone aggregator's time went to page faults.
 * Buffers up to 32 MiB stay in the heap, and up to 128 MiB of it free.
 */
static void keep_buffers(void)
{
	(void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
	(void)mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

static int serve(const struct dml_daemon *d, const void *conf)
{
	struct running r = { d, NULL };
	struct event_base *base = event_base_new();
	struct event *sigterm, *sigint;
	int rc;

	if (!base) {
		dml_err("cannot create the event loop");
		return 1;
	}
	keep_buffers();
	rc = d->start(conf, base, &r.state);
	if (rc) {
		dml_err("not starting: %s", dml_strerror(rc));
		d->free(r.state);
		event_base_free(base);
		return rc == DML_ESECRET || rc == DML_ECONF ? 2 : 1;
	}
	sigterm = evsignal_new(base, SIGTERM, on_signal, &r);
	sigint = evsignal_new(base, SIGINT, on_signal, &r);
	event_add(sigterm, NULL);
	event_add(sigint, NULL);
#ifdef HAVE_SYSTEMD
	sd_notify(0, "READY=1");
#endif
	rc = event_base_dispatch(base);
	if (rc == 0 && d->failed && d->failed(r.state))
		rc = -1;
	dml_info(rc < 0 ? "stopped on a failure" : "stopped");
	event_free(sigterm);
	event_free(sigint);
	d->free(r.state);
	event_base_free(base);
	return rc < 0 ? 1 : 0;
}

int dml_daemon_main(int argc, char **argv, const struct dml_daemon *d)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "print-config", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	const char *path = NULL;
	char err[512];
	void *conf;
	int print = 0, opt, rc;

	dml_log_set_ident(d->name);
	while ((opt = getopt_long(argc, argv, "c:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 'p': print = 1; break;
		case 'h':
			usage(d, stdout);
			dml_conf_print_help(d->schema, stdout);
			return 0;
		default:
			usage(d, stderr);
			return 2;
		}
	}
	if (!path || optind != argc) {
		usage(d, stderr);
		return 2;
	}
	conf = dml_xcalloc(1, d->conf_size);
	rc = dml_conf_load(d->schema, path, conf, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "%s: %s\n", d->name, err);
		rc = 2;
	} else if (print) {
		dml_conf_print(d->schema, conf, stdout);
	} else {
		int level;

		memcpy(&level, (const char *)conf + d->log_level_offset, sizeof(level));
		dml_log_set_level(level);
		signal(SIGPIPE, SIG_IGN);
		rc = serve(d, conf);
		libevent_global_shutdown();
	}
	dml_conf_free(d->schema, conf);
	free(conf);
	return rc;
}
