/*
 * dml-bench helpers shared by its subcommands (see bench_util.h): usage
 * errors and exit statuses, the interruption flag its signal handlers
 * set, the machine's cores and load, paths and private temporary
 * directories, and the logging of what a child left behind.
 *
 * Nothing here may start a process or touch the network: a second signal
 * may stop the child a subcommand named, and that is all.
 */
#define _GNU_SOURCE /* nftw */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools/bench.h"
#include "tools/bench_util.h"
#include "proto/log.h"
#include "proto/util.h"

/* ---- interruption ---------------------------------------------------- */

static atomic_int bench_stop;
/* The child to stop at once if a second signal arrives. */
static volatile sig_atomic_t bench_child_pid;

static void bench_on_signal(int sig)
{
	pid_t pid = bench_child_pid;

	/* First signal: finish the requests in flight and clean up. A second
	 * one also stops the child so that nothing can keep us waiting. */
	if (atomic_exchange(&bench_stop, 1) && pid > 0)
		kill(pid, SIGTERM);
}

int bench_interrupted(void)
{
	return atomic_load(&bench_stop);
}

void bench_signals_child(pid_t pid)
{
	bench_child_pid = pid;
}

void bench_signals_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = bench_on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* ---- usage and exit statuses ------------------------------------------ */

int bench_usage_error(const char *cmd, const char *opt, const char *value,
		      const char *want)
{
	dml_err("%s: bad %s '%s': %s (see dml-bench %s --help)", cmd, opt, value, want,
		cmd);
	return BENCH_EXIT_USAGE;
}

int bench_cmd_begin(int parse_rc, int help, void (*usage)(FILE *out), int verbose)
{
	if (parse_rc || help) {
		if (help)
			usage(stdout);
		return 1;
	}
	dml_log_set_level(DML_LOG_WARN + verbose);
	bench_signals_install();
	return 0;
}

void bench_cell(char *buf, size_t len, const char *fmt, double v)
{
	if (isnan(v))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, fmt, v);
}

void bench_goal(const char *what, double v, double goal, const char *fmt, int at_least)
{
	char got[32];

	bench_cell(got, sizeof(got), fmt, v);
	printf("  %-52s %10s  %s\n", what, got, isnan(v) ? "not measured" :
	       (at_least ? v >= goal : v <= goal) ? "PASS" : "FAIL");
}

int bench_exit_status(int rc)
{
	if (rc == 0)
		return 0;
	return bench_interrupted() ? BENCH_EXIT_INTERRUPTED : BENCH_EXIT_ERROR;
}

/* ---- the machine ------------------------------------------------------ */

unsigned bench_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned)n : 1;
}

void bench_loadavg(char *buf, size_t len)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double a = 0, b = 0, c = 0;

	if (f && fscanf(f, "%lf %lf %lf", &a, &b, &c) == 3)
		snprintf(buf, len, "%.2f %.2f %.2f", a, b, c);
	else
		snprintf(buf, len, "unknown");
	if (f)
		fclose(f);
}

/* ---- paths and directories ------------------------------------------- */

int bench_path(char *out, size_t len, const char *dir, const char *name)
{
	int n = snprintf(out, len, "%s/%s", dir, name);

	return n > 0 && (size_t)n < len ? 0 : DML_EINVAL;
}

int bench_dirname(char *path)
{
	char *slash = strrchr(path, '/');

	if (!slash || slash == path)
		return DML_ENOTFOUND;
	*slash = '\0';
	return 0;
}

int bench_exe_dir(char *out, size_t len)
{
	char exe[PATH_MAX];
	const char *last;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int m;

	if (n <= 0)
		return DML_ENOTFOUND;
	exe[n] = '\0';
	if (bench_dirname(exe))
		return DML_ENOTFOUND;
	/* In a build tree libtool runs the real program from tools/.libs. */
	last = strrchr(exe, '/');
	if (last && strcmp(last, "/.libs") == 0 && bench_dirname(exe))
		return DML_ENOTFOUND;
	m = snprintf(out, len, "%s", exe);
	return m > 0 && (size_t)m < len ? 0 : DML_ENOTFOUND;
}

int bench_tmpdir_make(const char *prefix, char *dir, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	int n;

	if (!tmp || !*tmp)
		tmp = P_tmpdir;
	n = snprintf(dir, len, "%s/%s.XXXXXX", tmp, prefix);
	if (n <= 0 || (size_t)n >= len)
		return DML_EINVAL;
	if (!mkdtemp(dir)) {
		dml_err("mkdtemp in %s: %s", tmp, strerror(errno));
		return DML_EIO;
	}
	return 0;
}

static int bench_rm_entry(const char *path, const struct stat *st, int flag,
			  struct FTW *ftw)
{
	if (remove(path))
		dml_warn("cannot remove %s: %s", path, strerror(errno));
	return 0;
}

void bench_tmpdir_remove(const char *dir)
{
	nftw(dir, bench_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- children and their logs ----------------------------------------- */

void bench_exit_reason(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "status %#x", status);
}

void bench_log_lines(char *text)
{
	char *line, *save = NULL;

	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		dml_err("  | %s", line);
}

void bench_log_tail(const char *path, size_t max, const char *title)
{
	FILE *f = fopen(path, "r");
	char *buf;
	size_t n;

	if (!f)
		return;
	buf = dml_xmalloc(max + 1);
	if (fseek(f, -(long)max, SEEK_END))
		rewind(f);
	n = fread(buf, 1, max, f);
	fclose(f);
	buf[n] = '\0';
	dml_err("%s", title);
	bench_log_lines(buf);
	free(buf);
}

/* ---- libdml ------------------------------------------------------------ */

int bench_dml_opts_new(const char *const (*kv)[2], size_t n, dml_opts_t **out)
{
	int rc = dml_opts_new(out);

	for (size_t i = 0; rc == 0 && i < n; i++) {
		rc = dml_opts_set(*out, kv[i][0], kv[i][1]);
		if (rc)
			dml_err("libdml option %s=%s: %s", kv[i][0], kv[i][1],
				dml_strerror(rc));
	}
	return rc;
}
