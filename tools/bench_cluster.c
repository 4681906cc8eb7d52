/*
 * dml-bench's local cluster (see bench_cluster.h): helper programs run to
 * their end, `dmlctl --json` answers read, the build and source trees
 * found, and one job run on a cluster of tools/dml-local that lives in a
 * private directory.
 *
 * Must never leave a cluster running or its directory behind once
 * bench_cluster_down() ran, nor signal a process it did not start (it
 * only waits for its own children; dml-local stops the daemons).
 */
#define _GNU_SOURCE /* pipe2 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench_cluster.h"
#include "tools/bench_util.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

/* Status polls that may fail in a row before the watch is given up. */
#define CLUSTER_POLL_TRIES 3
/* Bytes of each daemon's log shown when a cluster run fails. */
#define CLUSTER_LOG_TAIL 1536

/* ---- helper programs ------------------------------------------------- */

/* In the child: run argv with stdout and stderr into fd. Only returns by _exit. */
static void cluster_exec_child(const char *const *argv, int fd)
{
	int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	sigset_t none;

	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (nullfd < 0 || dup2(nullfd, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0 ||
	    dup2(fd, STDERR_FILENO) < 0)
		_exit(127);
	execv(argv[0], (char *const *)argv);
	dprintf(STDERR_FILENO, "cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

int bench_exec(const char *const *argv, char *out, size_t len, char *why, size_t whylen)
{
	int fds[2], status = 0;
	size_t n = 0;
	pid_t pid;

	out[0] = '\0';
	snprintf(why, whylen, "not run");
	if (pipe2(fds, O_CLOEXEC)) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		return DML_EIO;
	}
	pid = fork();
	if (pid == 0)
		cluster_exec_child(argv, fds[1]);
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		snprintf(why, whylen, "fork: %s", strerror(errno));
		return DML_EIO;
	}
	for (;;) {
		char buf[4096];
		ssize_t r = read(fds[0], buf, sizeof(buf));
		size_t take;

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		take = (size_t)r < len - 1 - n ? (size_t)r : len - 1 - n;
		memcpy(out + n, buf, take);
		n += take;
	}
	out[n] = '\0';
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			snprintf(why, whylen, "waitpid: %s", strerror(errno));
			return DML_EIO;
		}
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	bench_exit_reason(status, why, whylen);
	return DML_EIO;
}

/* Log a helper's failure: its command, how it ended, what it printed. */
static void cluster_exec_report(const char *const *argv, const char *why, char *out)
{
	char cmd[512] = "";
	size_t n = 0;

	/* snprintf counts what did not fit too: n past the end stops the loop. */
	for (size_t i = 0; argv[i] && n < sizeof(cmd); i++)
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n, "%s%s", i ? " " : "",
				      argv[i]);
	dml_err("%s: %s", cmd, why);
	bench_log_lines(out);
}

int bench_exec_logged(const char *const *argv, char *out, size_t len)
{
	char why[128];
	int rc = bench_exec(argv, out, len, why, sizeof(why));

	if (rc)
		cluster_exec_report(argv, why, out);
	return rc;
}

int bench_json_get(const char *json, const char *key, char *out, size_t len)
{
	size_t klen = strlen(key);
	int depth = 0;

	for (const char *p = json; *p; p++) {
		const char *s, *v, *e;

		if (*p == '{' || *p == '[') {
			depth++;
			continue;
		}
		if (*p == '}' || *p == ']') {
			depth--;
			continue;
		}
		if (*p != '"')
			continue;
		s = ++p;
		while (*p && *p != '"')
			p += p[0] == '\\' && p[1] ? 2 : 1;
		if (!*p)
			break;
		if (depth != 1 || (size_t)(p - s) != klen || memcmp(s, key, klen) != 0)
			continue;
		for (v = p + 1; *v == ' '; v++)
			;
		if (*v++ != ':')
			continue; /* a string value that happens to read like the key */
		while (*v == ' ')
			v++;
		if (*v == '"') {
			for (e = ++v; *e && *e != '"'; e += e[0] == '\\' && e[1] ? 2 : 1)
				;
		} else {
			e = v + strcspn(v, ",}] \n");
		}
		snprintf(out, len, "%.*s", (int)(e - v), v);
		return 0;
	}
	return DML_ENOTFOUND;
}

/* ---- where things are ------------------------------------------------ */

int bench_build_find(const char *opt, char *out, size_t len)
{
	if (opt) {
		/* realpath() writes up to PATH_MAX bytes. */
		char abs[PATH_MAX];

		if (!realpath(opt, abs)) {
			dml_err("--build %s: %s", opt, strerror(errno));
			return DML_ENOTFOUND;
		}
		if ((size_t)snprintf(out, len, "%s", abs) >= len)
			return DML_ENOTFOUND;
		return 0;
	}
	/* This program is BUILD/tools/dml-bench. */
	if (bench_exe_dir(out, len) || bench_dirname(out)) {
		dml_err("cannot tell which build tree this dml-bench is in: "
			"give --build");
		return DML_ENOTFOUND;
	}
	return 0;
}

int bench_src_find(const char *build, char *out, size_t len)
{
	/* automake writes abs_top_srcdir into every Makefile it makes */
	static const char key[] = "abs_top_srcdir = ";
	char path[PATH_MAX], line[PATH_MAX + 64], probe[PATH_MAX], abs[PATH_MAX];
	FILE *f;
	int found = 0;

	if (bench_path(path, sizeof(path), build, "Makefile") == 0 &&
	    (f = fopen(path, "r")) != NULL) {
		while (!found && fgets(line, sizeof(line), f)) {
			const char *v = line + sizeof(key) - 1;
			size_t n = strcspn(v, "\r\n");

			if (strncmp(line, key, sizeof(key) - 1) != 0 || n == 0 ||
			    n >= len)
				continue;
			memcpy(out, v, n);
			out[n] = '\0';
			found = 1;
		}
		fclose(f);
	}
	if (!found && bench_path(path, sizeof(path), build, "../..") == 0 &&
	    realpath(path, abs) && strlen(abs) < len &&
	    bench_path(probe, sizeof(probe), abs, "tools/dml-local") == 0 &&
	    access(probe, X_OK) == 0) {
		memcpy(out, abs, strlen(abs) + 1);
		found = 1;
	}
	if (!found)
		out[0] = '\0';
	return found ? 0 : DML_ENOTFOUND;
}

unsigned bench_cluster_worker_threads(const char *src)
{
	char path[PATH_MAX], line[256];
	unsigned threads = 1;
	FILE *f;

	if (bench_path(path, sizeof(path), src, "conf/local/worker.conf") ||
	    !(f = fopen(path, "r")))
		return threads;
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *v;
		uint64_t n;

		p += strspn(p, " \t");
		if (strncmp(p, "threads", 7) != 0)
			continue;
		v = p + 7 + strspn(p + 7, " \t");
		if (*v != '=')
			continue;
		v++;
		v += strspn(v, " \t");
		v[strcspn(v, " \t\r\n#")] = '\0';
		if (dml_parse_u64(v, 0, 4096, &n) == 0)
			threads = n ? (unsigned)n : bench_cores();
	}
	fclose(f);
	return threads;
}

/* ---- the cluster ------------------------------------------------------- */

void bench_cluster_init(struct bench_cluster *k)
{
	memset(k, 0, sizeof(*k));
	k->out = dml_xmalloc(BENCH_CLUSTER_OUT_MAX);
	k->out[0] = '\0';
}

void bench_cluster_free(struct bench_cluster *k)
{
	free(k->polls);
	free(k->out);
	k->polls = NULL;
	k->npolls = 0;
	k->out = NULL;
}

int bench_cluster_state_final(const char *state)
{
	return strcmp(state, "done") == 0 || strcmp(state, "failed") == 0 ||
	       strcmp(state, "stopped") == 0;
}

/* A value of RUN/env as dml-local writes it (bash %q: backslash escapes). */
static int cluster_env_value(const char *in, char *out, size_t len)
{
	size_t n = 0;

	if (in[0] == '$' || in[0] == '\'' || in[0] == '"')
		return DML_EINVAL;
	for (const char *p = in; *p && *p != '\n'; p++) {
		if (*p == '\\' && p[1])
			p++;
		if (n + 1 >= len)
			return DML_EINVAL;
		out[n++] = *p;
	}
	out[n] = '\0';
	return n ? 0 : DML_EINVAL;
}

/* DML_SCHEDULER and DML_SECRET_FILE from RUN/env, into our environment too. */
static int cluster_env_load(struct bench_cluster *k)
{
	char path[PATH_MAX], line[PATH_MAX + 64];
	int have = 0;
	FILE *f;

	if (bench_path(path, sizeof(path), k->run, "env") || !(f = fopen(path, "r"))) {
		dml_err("%s/env: %s", k->run, strerror(errno));
		return DML_EIO;
	}
	while (fgets(line, sizeof(line), f)) {
		static const char sched[] = "export DML_SCHEDULER=";
		static const char secret[] = "export DML_SECRET_FILE=";

		if (strncmp(line, sched, sizeof(sched) - 1) == 0 &&
		    cluster_env_value(line + sizeof(sched) - 1, k->sched,
				      sizeof(k->sched)) == 0)
			have |= 1;
		else if (strncmp(line, secret, sizeof(secret) - 1) == 0 &&
			 cluster_env_value(line + sizeof(secret) - 1, k->secret,
					   sizeof(k->secret)) == 0)
			have |= 2;
	}
	fclose(f);
	if (have != 3) {
		dml_err("%s: no DML_SCHEDULER and DML_SECRET_FILE in it", path);
		return DML_ECONF;
	}
	if (setenv("DML_SCHEDULER", k->sched, 1) ||
	    setenv("DML_SECRET_FILE", k->secret, 1))
		return DML_ENOMEM;
	return 0;
}

int bench_cluster_up(struct bench_cluster *k, const char *prefix, const char *src,
		     const char *build, unsigned servers, unsigned workers)
{
	char nservers[16], nworkers[16];
	const char *argv[20] = { k->dml_local, "up", "--dir", k->run, "--servers", nservers,
				 "--build", build };
	size_t n = 8;
	int rc;

	if (bench_path(k->dml_local, sizeof(k->dml_local), src, "tools/dml-local") ||
	    bench_path(k->dmlctl, sizeof(k->dmlctl), build, "tools/dmlctl"))
		return DML_EINVAL;
	rc = bench_tmpdir_make(prefix, k->run, sizeof(k->run));
	if (rc)
		return rc;
	k->have_run = 1;
	snprintf(nservers, sizeof(nservers), "%u", servers);
	snprintf(nworkers, sizeof(nworkers), "%u", workers);
	if (k->zones) {
		argv[n++] = "--zones";
		argv[n++] = k->zones;
		argv[n++] = "--wan";
		argv[n++] = k->wan;
		if (k->aggregators)
			argv[n++] = "--aggregators";
	} else {
		argv[n++] = "--workers";
		argv[n++] = nworkers;
	}
	if (k->cpus) {
		argv[n++] = "--cpus";
		argv[n++] = k->cpus;
	}
	/* Down is due even when up failed half way (it stops what it started). */
	k->up = 1;
	if (bench_exec_logged(argv, k->out, BENCH_CLUSTER_OUT_MAX))
		return DML_ECONN;
	return cluster_env_load(k);
}

/* Run SCRIPT with bash after sourcing tools/fleet.sh of dir tools. */
static int cluster_fleet_exec(const char *tools, int tools_len, const char *script,
			      char *out, size_t len, char *why, size_t whylen)
{
	char cmd[PATH_MAX * 2 + 256];
	const char *argv[] = { "/bin/bash", "-c", cmd, NULL };
	int n = snprintf(cmd, sizeof(cmd), ". '%.*s/fleet.sh' && %s", tools_len, tools,
			 script);

	if (n < 0 || (size_t)n >= sizeof(cmd)) {
		snprintf(why, whylen, "command too long");
		return DML_EINVAL;
	}
	return bench_exec(argv, out, len, why, whylen);
}

int bench_cluster_set_cpus(struct bench_cluster *k, unsigned worker, const char *cores)
{
	char script[PATH_MAX + 256], why[128];
	/* fleet.sh lies next to dml-local, in the source tree's tools/ */
	int tools = (int)(strrchr(k->dml_local, '/') - k->dml_local);
	int n = snprintf(script, sizeof(script),
			 "ctl=$(fleet_controller) && "
			 "fleet_set \"${ctl#* }/$(cat '%s/cgroup')/worker%u\" '%s'",
			 k->run, worker, cores);

	if (n < 0 || (size_t)n >= sizeof(script))
		return DML_EINVAL;
	if (cluster_fleet_exec(k->dml_local, tools, script, k->out, BENCH_CLUSTER_OUT_MAX,
			       why, sizeof(why)) == 0)
		return 0;
	dml_err("setting worker %u's quota to %s cores: %s", worker, cores, why);
	bench_log_lines(k->out);
	return DML_EIO;
}

int bench_cluster_links_check(const char *src, char *why, size_t len)
{
	char tools[PATH_MAX], how[128];

	if (bench_path(tools, sizeof(tools), src, "tools")) {
		snprintf(why, len, "source tree path too long");
		return DML_EINVAL;
	}
	if (cluster_fleet_exec(tools, (int)strlen(tools), "fleet_link_check", why, len, how,
			       sizeof(how)) == 0)
		return 0;
	why[strcspn(why, "\n")] = '\0';
	if (!why[0])
		snprintf(why, len, "fleet_link_check: %s", how);
	return DML_EINVAL;
}

int bench_cluster_link_bytes(struct bench_cluster *k, uint64_t *bytes)
{
	const char *argv[] = { k->dml_local, "links", "--dir", k->run, NULL };
	unsigned links = 0;
	char *save = NULL;

	*bytes = 0;
	if (bench_exec_logged(argv, k->out, BENCH_CLUSTER_OUT_MAX))
		return DML_EIO;
	/* "A B BYTES_AB BYTES_BA" a link */
	for (char *line = strtok_r(k->out, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char a[64], b[64];
		uint64_t ab, ba;

		if (sscanf(line, "%63s %63s %" SCNu64 " %" SCNu64, a, b, &ab, &ba) != 4) {
			dml_err("dml-local links: unexpected line: %s", line);
			return DML_EIO;
		}
		*bytes += ab + ba;
		links++;
	}
	if (!links) {
		dml_err("dml-local links: no zone link in %s", k->run);
		return DML_EIO;
	}
	return 0;
}

int bench_cluster_submit(struct bench_cluster *k, const char *job_file)
{
	const char *argv[] = { k->dmlctl, "--json", "submit", job_file, NULL };
	char id[32], why[128];
	uint64_t v;

	k->refused[0] = '\0';
	if (bench_exec(argv, k->out, BENCH_CLUSTER_OUT_MAX, why, sizeof(why))) {
		/* dmlctl exits 2 when the job file or the scheduler refused it */
		if (strcmp(why, "exit status 2") == 0)
			snprintf(k->refused, sizeof(k->refused), "%.*s",
				 (int)strcspn(k->out, "\n"), k->out);
		dml_err("dmlctl submit %s: %s", job_file, why);
		bench_log_lines(k->out);
		return DML_EIO;
	}
	if (bench_json_get(k->out, "job", id, sizeof(id)) ||
	    dml_parse_u64(id, 1, UINT32_MAX, &v)) {
		dml_err("dmlctl submit: no job id in its answer: %.200s", k->out);
		return DML_EIO;
	}
	k->job = (uint32_t)v;
	snprintf(k->job_arg, sizeof(k->job_arg), "%" PRIu32, k->job);
	return 0;
}

/* A number of the answer, or NaN when absent or not a number. */
static double cluster_json_num(const char *json, const char *key)
{
	char v[64];
	double d = NAN;

	if (bench_json_get(json, key, v, sizeof(v)) == 0 &&
	    dml_parse_double(v, -1e300, 1e300, &d) != 0)
		d = NAN;
	return d;
}

/* The first BENCH_POLL_WORKERS objects of the answer's "workers" list. */
static void cluster_poll_workers(const char *json, struct bench_poll *p)
{
	/* the list, not the spec's "workers": N */
	const char *at = strstr(json, "\"workers\":[");
	int depth = 0;

	if (!at || !(at = strchr(at, '[')))
		return;
	for (const char *c = at + 1; *c && depth >= 0 && p->nw < BENCH_POLL_WORKERS; c++) {
		struct bench_poll_worker *w = &p->w[p->nw];
		char v[64];
		uint64_t u;

		if (*c == '"') {   /* skip strings: a reason may hold brackets */
			for (c++; *c && *c != '"'; c += c[0] == '\\' && c[1] ? 2 : 1)
				;
			if (!*c)
				return;
			continue;
		}
		if (*c == '[' || (*c == '{' && depth > 0)) {
			depth++;
			continue;
		}
		if (*c == ']' || *c == '}') {
			depth--;
			continue;
		}
		if (*c != '{')
			continue;
		depth++;
		memset(w, 0, sizeof(*w));
		if (bench_json_get(c, "worker", v, sizeof(v)) || dml_parse_u64(v, 1, UINT32_MAX, &u))
			return;
		w->id = (uint32_t)u;
		w->alive = bench_json_get(c, "state", v, sizeof(v)) == 0 &&
			   strcmp(v, "alive") == 0;
		if (bench_json_get(c, "clock", v, sizeof(v)) == 0)
			dml_parse_u64(v, 0, UINT64_MAX, &w->clock);
		w->compute_s = cluster_json_num(c, "compute_s");
		w->wait_s = cluster_json_num(c, "wait_s");
		w->held_s = cluster_json_num(c, "held_s");
		w->cpu_s = cluster_json_num(c, "cpu_s");
		w->cores = cluster_json_num(c, "cores");
		w->speed = cluster_json_num(c, "speed");
		if (bench_json_get(c, "batch_size", v, sizeof(v)) == 0 &&
		    dml_parse_u64(v, 0, UINT32_MAX, &u) == 0)
			w->batch = (uint32_t)u;
		if (bench_json_get(c, "partitions", v, sizeof(v)) == 0 &&
		    dml_parse_u64(v, 0, UINT32_MAX, &u) == 0)
			w->partitions = (uint32_t)u;
		p->nw++;
	}
}

int bench_cluster_poll(struct bench_cluster *k, struct bench_poll **out)
{
	const char *argv[] = { k->dmlctl, "--json", "status", k->job_arg, NULL };
	struct bench_poll p;
	char v[64];

	memset(&p, 0, sizeof(p));
	if (bench_exec_logged(argv, k->out, BENCH_CLUSTER_OUT_MAX))
		return DML_EIO;
	p.ns = dml_now_ns();
	if (bench_json_get(k->out, "state", p.state, sizeof(p.state)) ||
	    bench_json_get(k->out, "examples", v, sizeof(v)) ||
	    dml_parse_u64(v, 0, UINT64_MAX, &p.examples) ||
	    bench_json_get(k->out, "run_ms", v, sizeof(v)) ||
	    dml_parse_u64(v, 0, UINT64_MAX, &p.run_ms)) {
		dml_err("dmlctl status %s: unexpected answer: %.200s", k->job_arg,
			k->out);
		return DML_EIO;
	}
	if (bench_json_get(k->out, "data_examples", v, sizeof(v)) ||
	    dml_parse_u64(v, 0, UINT64_MAX, &p.data_examples))
		p.data_examples = 0;
	p.rate = cluster_json_num(k->out, "examples_per_s");
	if (bench_json_get(k->out, "assignment_version", v, sizeof(v)) ||
	    dml_parse_u64(v, 0, UINT64_MAX, &p.assignment))
		p.assignment = 0;
	cluster_poll_workers(k->out, &p);
	p.metric = NAN;
	if (bench_json_get(k->out, "has_metric", v, sizeof(v)) == 0 &&
	    strcmp(v, "true") == 0)
		p.metric = cluster_json_num(k->out, "metric");
	k->polls = dml_xrealloc(k->polls, (k->npolls + 1) * sizeof(*k->polls));
	k->polls[k->npolls] = p;
	*out = &k->polls[k->npolls++];
	return 0;
}

int bench_cluster_watch_poll(struct bench_cluster *k, struct bench_poll **out)
{
	struct bench_poll *p;
	int rc = bench_cluster_poll(k, &p);

	*out = NULL;
	if (rc)
		return ++k->poll_fails < CLUSTER_POLL_TRIES ? 0 : rc;
	k->poll_fails = 0;
	*out = p;
	if (bench_cluster_state_final(p->state)) {
		k->ended = 1;
		if (strcmp(p->state, "done") != 0) {
			dml_err("job %s ended %s", k->job_arg, p->state);
			return DML_EIO;
		}
	}
	return 0;
}

double bench_cluster_rate(const struct bench_cluster *k)
{
	const struct bench_poll *a = NULL, *b = NULL;

	for (size_t i = 0; i < k->npolls; i++) {
		const struct bench_poll *p = &k->polls[i];

		if (p->examples == 0 || strcmp(p->state, "running") != 0)
			continue;
		if (!a)
			a = p;
		b = p;
	}
	if (!a || b->ns <= a->ns)
		return NAN;
	return (double)(b->examples - a->examples) / ((double)(b->ns - a->ns) / 1e9);
}

/* The last lines of one daemon's log, through the logger. */
static void cluster_log_tail(const char *dir, const char *name)
{
	char path[PATH_MAX], title[NAME_MAX + 32];

	if (bench_path(path, sizeof(path), dir, name))
		return;
	snprintf(title, sizeof(title), "---- %s (its end) ----", name);
	bench_log_tail(path, CLUSTER_LOG_TAIL, title);
}

void bench_cluster_log_tails(const struct bench_cluster *k)
{
	struct dirent **names = NULL;
	int n = k->have_run ? scandir(k->run, &names, NULL, alphasort) : -1;

	for (int i = 0; i < n; i++) {
		size_t len = strlen(names[i]->d_name);

		if (len > 4 && strcmp(names[i]->d_name + len - 4, ".log") == 0)
			cluster_log_tail(k->run, names[i]->d_name);
		free(names[i]);
	}
	free(names);
}

void bench_cluster_down(struct bench_cluster *k, int keep)
{
	if (k->job && !k->ended) {
		const char *argv[] = { k->dmlctl, "stop", k->job_arg, NULL };

		/* Once is enough: a second down finds it stopped. */
		k->ended = 1;
		bench_exec_logged(argv, k->out, BENCH_CLUSTER_OUT_MAX);
	}
	if (k->up) {
		const char *argv[] = { k->dml_local, "down", "--dir", k->run, NULL };

		k->up = 0;
		bench_exec_logged(argv, k->out, BENCH_CLUSTER_OUT_MAX);
	}
	if (k->have_run && keep)
		dml_warn("kept %s", k->run);
	else if (k->have_run)
		bench_tmpdir_remove(k->run);
	k->have_run = 0;
}
