/*
 * dml-bench recovery: how long a crashed dml-server takes to serve again
 * with its full state. It starts a server whose [store] logs with
 * durability sync, holding one dense table of --model-mb megabytes
 * (initialised from its seed, so every value is set), has a worker push
 * --pushes gradients of 4 KiB into it (a checkpoint of every row is
 * written each time the log holds 16 MB), reads the whole model back as the
 * reference, SIGKILLs the server and starts it again on the same store. It
 * prints the time from the new process's start to its port file (written
 * once the log is replayed: from then on it serves pulls with full state)
 * and to a whole-model pull answered, what the server says it replayed,
 * what the checkpoints during the pushes cost (the copy, and the longest a
 * push waited for a piece of it; the write on the server's writer thread),
 * the store's size on disk, and whether the model came back bit for bit;
 * then PASS or FAIL for the targets (serving within 1 s; no push waiting
 * more than 5 ms for a checkpoint).
 *
 * Must never leave the server running or its directory behind (unless
 * --keep), nor call a model recovered that differs in any bit.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "worker/app_util.h"
#include "tools/bench.h"
#include "tools/bench_opt.h"
#include "tools/bench_recovery.h"
#include "tools/bench_server.h"
#include "tools/bench_util.h"
#include "worker/dml.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

#define REC_WIDTH 256          /* floats a key: a push of 4 keys is 4 KiB */
#define REC_PUSH_KEYS 4
#define REC_WINDOW 32
#define REC_CHUNK_KEYS 16384   /* 16 MiB a pull */
#define REC_TARGET_S 1.0
/* A checkpoint every 16 MB of log: the crash finds one of the whole model
 * and the pushes logged since it, as a server that ran a while would. */
#define REC_CHECKPOINT_LOG "16M"

struct recovery_opts {
	uint64_t model_mb, pushes;
	const char *server;
	int keep, verbose;
};

#define R_FIELD(f) offsetof(struct recovery_opts, f)

static const struct bench_opt recovery_opt_rows[] = {
	{ .name = "model-mb", .arg = "N", .parse = bench_opt_u64, .offset = R_FIELD(model_mb),
	  .min = 1, .max = 4096, .help = "the table's size in MB (default 100)" },
	{ .name = "pushes", .arg = "N", .parse = bench_opt_u64, .offset = R_FIELD(pushes),
	  .min = 1, .max = 10000000,
	  .help = "pushes of 4 KiB logged before the crash (default\n10000)" },
	{ .name = "server", .arg = "PATH", .parse = bench_opt_string, .offset = R_FIELD(server),
	  .help = "dml-server to run (default: $DML_SERVER, else one\n"
		  "next to this program)" },
	{ .name = "keep", .parse = bench_opt_flag, .offset = R_FIELD(keep),
	  .help = "keep the server's directory (config, log, store)" },
	BENCH_OPT_VERBOSE(R_FIELD(verbose),
			  "log libdml's informational messages; twice: debug"),
	BENCH_OPT_HELP,
};

static const struct bench_opts_table recovery_table = {
	"recovery", recovery_opt_rows, DML_ARRAY_LEN(recovery_opt_rows), 20
};

void bench_recovery_usage(FILE *out)
{
	fprintf(out,
		"dml-bench recovery [options]: a dml-server with a gradient log\n"
		"([store], durability sync) holding one dense table is SIGKILLed after\n"
		"a worker's pushes (a checkpoint every 16 MB of log) and started again\n"
		"on its store; prints the time\n"
		"from the new process's start to serving with full state and to a\n"
		"whole-model pull, and checks the model came back bit for bit.\n"
		"\n");
	bench_opts_help(&recovery_table, out);
	fprintf(out,
		"\n"
		"Target: serving again within %.0f s. Exit status: 0 when it ran (even\n"
		"if the target failed), 1 on an error or a model that differs, 2 on\n"
		"bad usage, 130 when interrupted.\n", REC_TARGET_S);
}

static int recovery_opts_parse(int argc, char **argv, struct recovery_opts *o, int *help)
{
	memset(o, 0, sizeof(*o));
	o->model_mb = 100;
	o->pushes = 10000;
	return bench_opts_parse(&recovery_table, argc, argv, o, help);
}

static uint64_t model_keys(const struct recovery_opts *o)
{
	return o->model_mb * 1000000 / (REC_WIDTH * sizeof(float));
}

static int write_conf(struct bench_server *s, const struct recovery_opts *o)
{
	char secret[PATH_MAX], port[PATH_MAX];
	FILE *f = bench_server_conf_open(s, secret, port, sizeof(port));

	if (!f)
		return DML_EIO;
	fprintf(f, "[server]\nlisten = 127.0.0.1:0\nport_file = %s\nnode_id = 1\n"
		"secret_file = %s\nlog_level = %s\n\n[limits]\nmax_payload = 64M\n\n"
		"[job]\nstaleness = -1\n\n[store]\npath = %s/store\ndurability = sync\n"
		"map_size = 64G\ncheckpoint_log = %s\n\n[table]\nid = 0\nkind = dense\nwidth = %d\nkeys = %" PRIu64
		"\ninit = uniform\ninit_scale = 0.1\noptimizer = sgd\nlr = 0.01\n",
		port, secret, o->verbose >= 2 ? "debug" : "info", s->dir, REC_CHECKPOINT_LOG,
		REC_WIDTH, model_keys(o));
	return bench_server_conf_close(s, f);
}

static int client_open(const struct bench_server *s, const char *role, dml_t **d)
{
	char servers[32], secret[PATH_MAX];
	const char *const kv[][2] = {
		{ "servers", servers },
		{ "secret_file", secret },
		{ "role", role },
		{ "worker_id", strcmp(role, "worker") == 0 ? "1" : "0" },
		{ "max_payload", "64M" },
		{ "request_timeout_ms", "60000" },
	};
	dml_opts_t *o;
	int rc;

	snprintf(servers, sizeof(servers), "127.0.0.1:%u", (unsigned)s->port);
	if (bench_server_file(s, "secret", secret, sizeof(secret)))
		return DML_EINVAL;
	rc = bench_dml_opts_new(kv, DML_ARRAY_LEN(kv), &o);
	if (rc == 0)
		rc = dml_connect(o, d);
	dml_opts_free(o);
	if (rc)
		dml_err("recovery: connecting to %s: %s", servers, dml_strerror(rc));
	return rc;
}

/* The pushes: REC_WINDOW in flight, small values from a fixed sequence. */
static int push_all(dml_t *d, const struct recovery_opts *o)
{
	static float vals[REC_WINDOW][REC_PUSH_KEYS * REC_WIDTH];
	dml_handle_t h[REC_WINDOW] = { 0 };
	uint64_t keys = model_keys(o), state = 1;
	int rc = 0;

	for (uint64_t i = 0; i < o->pushes + REC_WINDOW && rc == 0; i++) {
		size_t slot = i % REC_WINDOW;
		uint64_t begin;

		if (h[slot] && (rc = dml_wait(d, h[slot])) != 0)
			break;
		h[slot] = 0;
		if (i >= o->pushes || bench_interrupted())
			continue;
		begin = dml_rng_next(&state) % (keys - REC_PUSH_KEYS + 1);
		for (size_t k = 0; k < REC_PUSH_KEYS * REC_WIDTH; k++)
			vals[slot][k] = (float)(dml_rng_next(&state) >> 40) / 16777216.0f - 0.5f;
		rc = dml_push_range(d, 0, begin, begin + REC_PUSH_KEYS, vals[slot], &h[slot]);
	}
	if (rc)
		dml_err("recovery: push: %s (%s)", dml_strerror(rc), dml_error_detail(d));
	return rc ? rc : bench_interrupted() ? DML_ECLOSED : 0;
}

static int pull_all(dml_t *d, uint64_t keys, float *out)
{
	for (uint64_t k = 0; k < keys; k += REC_CHUNK_KEYS) {
		uint64_t end = keys - k > REC_CHUNK_KEYS ? k + REC_CHUNK_KEYS : keys;
		dml_handle_t h;
		int rc = dml_pull_range(d, 0, k, end, out + k * REC_WIDTH, &h);

		if (rc == 0)
			rc = dml_wait(d, h);
		if (rc) {
			dml_err("recovery: pull: %s (%s)", dml_strerror(rc), dml_error_detail(d));
			return rc;
		}
	}
	return 0;
}

/* The server log's recovery line, for the report. */
static void print_recovered_line(const struct bench_server *s)
{
	char path[PATH_MAX], line[1024], last[1024] = "";
	FILE *f;

	if (bench_server_file(s, "server.log", path, sizeof(path)) || !(f = fopen(path, "r")))
		return;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "recovered to clock"))
			snprintf(last, sizeof(last), "%s", line);
	fclose(f);
	if (last[0])
		printf("  server says   %s", strstr(last, "recovered to clock"));
}

/* The log's and the checkpoints' data files. */
/* min and max of the ms after needle in the server's log lines; how many. */
static int log_ms_range(const struct bench_server *s, const char *needle, double *lo,
			double *hi)
{
	char path[PATH_MAX], line[1024];
	const char *at;
	double ms;
	int n = 0;
	FILE *f;

	if (bench_server_file(s, "server.log", path, sizeof(path)) || !(f = fopen(path, "r")))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!(at = strstr(line, needle)) || sscanf(at + strlen(needle), "%lf", &ms) != 1)
			continue;
		*lo = n == 0 || ms < *lo ? ms : *lo;
		*hi = n == 0 || ms > *hi ? ms : *hi;
		n++;
	}
	fclose(f);
	return n;
}

/* The longest a push may wait for a checkpoint's copy: "a few milliseconds". */
#define REC_PAUSE_MS 5.0

/*
 * What the checkpoints during the pushes cost: the rows are copied a piece
 * at a time between pushes (or just before a push changes them), so pushes
 * wait for a piece, not for the whole copy.
 */
static void print_checkpoints(const struct bench_server *s)
{
	double clo = 0, chi = 0, plo = 0, phi = 0, wlo = 0, whi = 0;
	int n = log_ms_range(s, "rows copied in ", &clo, &chi);

	if (!n || !log_ms_range(s, "the longest they waited: ", &plo, &phi) ||
	    !log_ms_range(s, ") written in ", &wlo, &whi))
		return;
	printf("  checkpoints   %d during the pushes: rows copied in %.1f to %.1f ms while "
	       "pushes went on, the longest a push waited %.2f to %.2f ms; written in %.0f "
	       "to %.0f ms on the writer thread\n", n, clo, chi, plo, phi, wlo, whi);
	printf("%s checkpoint pauses: the longest %.2f ms (target <= %.0f ms)\n",
	       phi <= REC_PAUSE_MS ? "PASS" : "FAIL", phi, REC_PAUSE_MS);
}

static double store_mb(const struct bench_server *s)
{
	static const char *const files[] = { "store/data.mdb", "store/ckpt/data.mdb" };
	char path[PATH_MAX];
	struct stat st;
	double mb = 0;

	for (size_t i = 0; i < DML_ARRAY_LEN(files); i++)
		if (!bench_server_file(s, files[i], path, sizeof(path)) && !stat(path, &st))
			mb += (double)st.st_blocks * 512 / 1e6;
	return mb;
}

static int run(struct bench_server *s, const char *exe, const struct recovery_opts *o)
{
	uint64_t keys = model_keys(o), t0, t1, t2;
	size_t floats = (size_t)keys * REC_WIDTH;
	float *ref = malloc(floats * sizeof(float)), *got = malloc(floats * sizeof(float));
	double serving, pulled;
	dml_t *d = NULL;
	int rc;

	if (!ref || !got) {
		free(ref);
		free(got);
		return DML_ENOMEM;
	}
	printf("dml-bench recovery: %s, table of %" PRIu64 " keys x %d floats (%.1f MB), "
	       "%" PRIu64 " pushes of %zu KiB, durability sync\n", exe, keys, REC_WIDTH,
	       (double)floats * 4 / 1e6, o->pushes,
	       REC_PUSH_KEYS * REC_WIDTH * sizeof(float) / 1024);
	rc = client_open(s, "worker", &d);
	if (rc == 0)
		rc = push_all(d, o);
	if (rc == 0)
		rc = pull_all(d, keys, ref);
	dml_close(d);
	d = NULL;
	if (rc)
		goto out;
	bench_server_kill(s);
	printf("  crash         SIGKILL after every push was acknowledged; store %.1f MB "
	       "on disk\n", store_mb(s));
	t0 = dml_now_ns();
	if ((rc = bench_server_launch(s, exe)) != 0)
		goto out;
	t1 = dml_now_ns();
	if ((rc = client_open(s, "control", &d)) == 0)
		rc = pull_all(d, keys, got);
	t2 = dml_now_ns();
	dml_close(d);
	if (rc)
		goto out;
	serving = (double)(t1 - t0) / 1e9;
	pulled = (double)(t2 - t0) / 1e9;
	print_checkpoints(s);
	print_recovered_line(s);
	printf("  serving       %.3f s from the new process's start (port file, written "
	       "after the replay)\n", serving);
	printf("  whole model   %.3f s from the start, pulled by a new client\n", pulled);
	if (memcmp(ref, got, floats * sizeof(float)) != 0) {
		printf("  model         DIFFERS from what the server held before the crash\n");
		rc = DML_EIO;
		goto out;
	}
	printf("  model         the same, bit for bit\n");
	printf("%s serving with full state within %.0f s of the restart: %.3f s\n",
	       serving <= REC_TARGET_S ? "PASS" : "FAIL", REC_TARGET_S, serving);
out:
	free(ref);
	free(got);
	return rc;
}

int bench_recovery_main(int argc, char **argv)
{
	struct recovery_opts o;
	struct bench_server s = { .pid = 0, .durability = -1 };
	char exe[PATH_MAX];
	int help, rc;

	rc = recovery_opts_parse(argc, argv, &o, &help);
	if (bench_cmd_begin(rc, help, bench_recovery_usage, o.verbose))
		return rc;
	if (bench_server_find(o.server, exe, sizeof(exe))) {
		dml_err("recovery: cannot find dml-server: use --server or DML_SERVER");
		return bench_exit_status(DML_ENOTFOUND);
	}
	rc = bench_server_prepare(&s);
	if (rc == 0)
		rc = write_conf(&s, &o);
	if (rc == 0)
		rc = bench_server_launch(&s, exe);
	if (rc == 0)
		rc = run(&s, exe, &o);
	if (rc && !bench_interrupted() && s.pid > 0)
		bench_server_log_tail(&s);
	bench_server_stop(&s);
	if (o.keep && s.have_dir)
		dml_warn("kept %s", s.dir);
	else
		bench_server_remove_dir(&s);
	return bench_exit_status(rc);
}
