/*
 * dmlctl: the operator's command line for a dml cluster. It talks to
 * dml-sched as a CONTROL peer (dmlctl_session.c: one connection per run
 * carrying one request and its reply at a time) and prints the answers
 * (dmlctl_print.c). This file holds the command table, the global options
 * and main(); the commands live in dmlctl_submit.c (submit, --wait,
 * --curve), dmlctl_jobs.c (status, job control, shardmap, top),
 * dmlctl_export.c and dmlctl_ckpt.c. The commands that watch (submit
 * --wait, top) poll over that connection and connect again when it breaks.
 *
 * Exit status: 0 success; 1 the operation failed: the scheduler could not be
 * reached or refused the secret (the message names the address), refused the
 * request (no such job, a job already done), or the job waited for ended
 * FAILED or STOPPED; 2 bad usage, an unknown command or a bad job file; 130
 * interrupted while waiting for a job.
 *
 * Must never: wait longer than its timeout for one answer, exit 0 without
 * having printed the whole answer, or copy bytes a peer sent to the terminal
 * or into JSON without escaping them.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "tools/dmlctl.h"
#include "proto/log.h"
#include "proto/util.h"

#define DEFAULT_SCHEDULER "127.0.0.1:7000"
#define DEFAULT_SECRET_FILE "/etc/dml/secret"
#define DEFAULT_CLUSTER "dml"

/* Command options beyond the global ones, and which command takes them. */
enum { TAKES_WAIT = 1, TAKES_ONCE = 2 };

struct command {
	const char *name;
	const char *args;
	const char *help;
	int (*run)(struct ctl *ctl, int argc, char **argv);
	unsigned takes;             /* TAKES_... */
};

/* ---- commands ------------------------------------------------------------------ */

int ctl_parse_job_id(const char *cmd, const char *s, uint32_t *id)
{
	uint64_t v;

	if (dml_parse_u64(s, 1, UINT32_MAX, &v) != 0) {
		fprintf(stderr, "dmlctl: %s: '%s' is not a job id (a number that dmlctl "
			"status lists)\n", cmd, s);
		return EXIT_USAGE;
	}
	*id = (uint32_t)v;
	return EXIT_OK;
}

int ctl_too_many(const char *cmd, const char *arg)
{
	fprintf(stderr, "dmlctl: %s: unexpected argument '%s' (dmlctl --help)\n", cmd, arg);
	return EXIT_USAGE;
}

static int cmd_nodes(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	struct ctl_session s;
	int rc;

	if (argc > 0) {
		fprintf(stderr, "dmlctl: nodes takes no arguments (got '%s')\n", argv[0]);
		return EXIT_USAGE;
	}
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	req.type = DML__MSG_TYPE__NODES;
	rc = ctl_session_ask(&s, &req, DML__MSG_TYPE__NODES_REPLY, &reply, stderr);
	if (rc == EXIT_OK) {
		if (ctl->json)
			ctl_print_nodes_json(stdout, reply);
		else
			ctl_print_nodes_table(stdout, reply);
		dml__meta__free_unpacked(reply, NULL);
	}
	ctl_session_close(&s);
	return rc;
}

static const struct command commands[] = {
	{ "nodes", "", "list the nodes: state, last heartbeat, why it last changed",
	  cmd_nodes, 0 },
	{ "submit", "JOB.conf [--wait]",
	  "submit a training job; --wait follows it to its end", ctl_cmd_submit, TAKES_WAIT },
	{ "status", "[JOB]", "list the jobs, or one job in detail", ctl_cmd_status, 0 },
	{ "stop", "JOB", "stop a job", ctl_cmd_stop, 0 },
	{ "pause", "JOB", "pause a job at the next clock boundary", ctl_cmd_pause, 0 },
	{ "resume", "JOB", "resume a paused job", ctl_cmd_resume, 0 },
	{ "rebalance", "JOB", "split the job's partitions (and batches, when they follow "
	  "speeds) anew by the workers' measured rates", ctl_cmd_rebalance, 0 },
	{ "top", "[--once]", "live view of the nodes and the running job's traffic and "
	  "workers", ctl_cmd_top, TAKES_ONCE },
	{ "shardmap", "[JOB]", "which server holds which keys (default: the active job)",
	  ctl_cmd_shardmap, 0 },
	{ "export", "JOB FILE", "write the job's trained tables to a model file",
	  ctl_cmd_export, 0 },
	{ "checkpoint", "JOB [delete CLOCK]",
	  "take a job-wide checkpoint and wait for it, or delete one", ctl_cmd_checkpoint, 0 },
	{ "checkpoints", "JOB", "list the job's checkpoints", ctl_cmd_checkpoints, 0 },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < DML_ARRAY_LEN(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmlctl [-s HOST:PORT] [--secret FILE] [--cluster NAME] [--json] "
		"COMMAND [ARGS]\n"
		"       dmlctl --help\n\n"
		"Talks to dml-sched, the cluster's scheduler.\n\n"
		"Commands:\n");
	for (size_t i = 0; i < DML_ARRAY_LEN(commands); i++)
		fprintf(out, "  %-11s %-18s %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(out,
		"\nOptions:\n"
		"  -s, --scheduler HOST:PORT  scheduler address (default: $DML_SCHEDULER, "
		"else %s)\n"
		"  --secret FILE              cluster secret (default: $DML_SECRET_FILE, "
		"else %s)\n"
		"  --cluster NAME             cluster name (default: %s)\n"
		"  --json                     print one JSON object instead of a table\n"
		"  --wait                     submit: poll every %d ms until the job ends\n"
		"  --curve FILE.svg           submit --wait: draw the loss and the metric\n"
		"                             as the job went, into FILE.svg at its end\n"
		"  --once                     top: print one screen and exit (also when\n"
		"                             the output is not a terminal)\n"
		"  -v, --verbose              log the connection's progress to stderr\n"
		"  -h, --help                 this text\n\n"
		"Exit status: 0 success; 1 the operation failed: the scheduler could not be\n"
		"reached (within %d s) or refused the secret or the request (e.g. no such\n"
		"job), or the job submit --wait followed ended failed or stopped; 2 bad\n"
		"usage, an unknown command or a bad job file (printed as file:line:\n"
		"message); 130 interrupted while waiting (the job goes on).\n",
		DEFAULT_SCHEDULER, DEFAULT_SECRET_FILE, DEFAULT_CLUSTER, CTL_WAIT_POLL_MS,
		CTL_TIMEOUT_MS / 1000);
}

static const char *env_or(const char *name, const char *def, int *from_env)
{
	const char *v = getenv(name);

	*from_env = v && *v;
	return *from_env ? v : def;
}

int main(int argc, char **argv)
{
	enum { OPT_SECRET = 256, OPT_CLUSTER, OPT_JSON, OPT_WAIT, OPT_ONCE, OPT_CURVE };
	static const struct option longopts[] = {
		{ "scheduler", required_argument, NULL, 's' },
		{ "secret", required_argument, NULL, OPT_SECRET },
		{ "cluster", required_argument, NULL, OPT_CLUSTER },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "wait", no_argument, NULL, OPT_WAIT },
		{ "once", no_argument, NULL, OPT_ONCE },
		{ "curve", required_argument, NULL, OPT_CURVE },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct ctl ctl = { 0 };
	const struct command *cmd;
	int opt, from_env, rc;

	dml_log_set_ident("dmlctl");
	/* The connection layer's warnings would repeat what ctl_session_report() says. */
	dml_log_set_level(DML_LOG_ERROR);
	ctl.addr = env_or("DML_SCHEDULER", DEFAULT_SCHEDULER, &from_env);
	ctl.addr_source = from_env ? "$DML_SCHEDULER" : "the default";
	ctl.secret_file = env_or("DML_SECRET_FILE", DEFAULT_SECRET_FILE, &from_env);
	ctl.cluster = DEFAULT_CLUSTER;
	/* Options may come after the command too: "dmlctl submit job.conf --wait". */
	while ((opt = getopt_long(argc, argv, "s:vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			ctl.addr = optarg;
			ctl.addr_source = "-s";
			break;
		case OPT_SECRET: ctl.secret_file = optarg; break;
		case OPT_CLUSTER: ctl.cluster = optarg; break;
		case OPT_JSON: ctl.json = 1; break;
		case OPT_WAIT: ctl.wait = 1; break;
		case OPT_ONCE: ctl.once = 1; break;
		case OPT_CURVE: ctl.curve = optarg; break;
		case 'v': dml_log_set_level(DML_LOG_DEBUG); break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			fprintf(stderr, "dmlctl: try 'dmlctl --help'\n");
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = find_command(argv[optind]);
	if (!cmd) {
		fprintf(stderr, "dmlctl: unknown command '%s' (dmlctl --help lists them)\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	if ((ctl.wait && !(cmd->takes & TAKES_WAIT)) ||
	    (ctl.once && !(cmd->takes & TAKES_ONCE))) {
		fprintf(stderr, "dmlctl: %s does not take %s\n", cmd->name,
			ctl.wait ? "--wait (only submit does)" : "--once (only top does)");
		return EXIT_USAGE;
	}
	if (ctl.curve && (!ctl.wait || !*ctl.curve)) {
		fprintf(stderr, "dmlctl: --curve FILE.svg goes with submit --wait (the curve "
			"is drawn from what --wait sees)\n");
		return EXIT_USAGE;
	}
	if (dml_parse_hostport(ctl.addr, ctl.host, sizeof(ctl.host), &ctl.port, 0) != 0) {
		fprintf(stderr, "dmlctl: scheduler address '%s' (from %s) is not HOST:PORT\n",
			ctl.addr, ctl.addr_source);
		return EXIT_USAGE;
	}
	if (!*ctl.cluster) {
		fprintf(stderr, "dmlctl: --cluster needs a name\n");
		return EXIT_USAGE;
	}
	/* A reader that goes away must turn into a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	rc = cmd->run(&ctl, argc - optind - 1, argv + optind + 1);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "dmlctl: cannot write the output\n");
		rc = EXIT_FAIL;
	}
	libevent_global_shutdown();
	return rc;
}

