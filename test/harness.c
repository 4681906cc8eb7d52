/*
 * harness.c - loopback cluster harness for integration tests (see harness.h):
 * environments, their cleanup and child processes. Daemons are started in
 * harness_daemon.c; raw sockets, the proxy and HTTP are in harness_net.c.
 *
 * Starts real daemons as child processes in a private temporary directory
 * and cleans up after them. It must never leave a process or a directory
 * behind, whatever way the test ends: children carry PR_SET_PDEATHSIG, an
 * atexit handler cleans up after an exit(), and a guardian process after an
 * _exit() or a SIGKILL (how Check ends failed and timed-out tests). It never
 * asserts: it reports through return codes and prints logs on failure.
 */
#define _GNU_SOURCE
#include "test/harness.h"
#include "test/harness_internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/util.h"

/* How much of a log is printed when something fails. */
#define LOG_TAIL_BYTES 8192

/* Environments not yet freed, for the atexit handler. */
static struct dml_test_env *live_envs;
static int atexit_registered;

char *harness_str_printf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	s = dml_xmalloc((size_t)n + 1);
	va_start(ap, fmt);
	vsnprintf(s, (size_t)n + 1, fmt, ap);
	va_end(ap);
	return s;
}

void harness_sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int64_t harness_ms_left(uint64_t deadline_ns)
{
	uint64_t now = dml_now_ns();

	return now >= deadline_ns ? 0 : (int64_t)((deadline_ns - now) / 1000000u);
}

uint64_t harness_deadline_after(int timeout_ms)
{
	return dml_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000u;
}

static void procs_add(struct dml_test_env *env, pid_t pid)
{
	if (env->nprocs == env->capprocs) {
		env->capprocs = env->capprocs ? env->capprocs * 2 : 8;
		env->procs =
			dml_xrealloc(env->procs, env->capprocs * sizeof(*env->procs));
	}
	env->procs[env->nprocs++] = pid;
}

void harness_procs_forget(struct dml_test_env *env, pid_t pid)
{
	size_t i;

	for (i = 0; i < env->nprocs; i++) {
		if (env->procs[i] == pid) {
			env->procs[i] = env->procs[--env->nprocs];
			return;
		}
	}
}

/*
 * Wait for pid up to timeout_ms. 1 and *status when it exited, 0 if it is
 * still running.
 */
int harness_reap_within(pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = harness_deadline_after(timeout_ms);
	pid_t r;

	for (;;) {
		r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 1;
		if (r < 0 && errno != EINTR) {
			*status = 0; /* not our child any more: nothing to wait for */
			return 1;
		}
		if (harness_ms_left(deadline) == 0)
			return 0;
		harness_sleep_ms(POLL_STEP_MS);
	}
}

void harness_kill_and_reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

void harness_describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
	else
		snprintf(buf, len, "wait status 0x%x", status);
}

int dml_test_file_read(const char *path, char **text)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0, n;

	*text = NULL;
	if (!f)
		return DML_EIO;
	do {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 8192;
			buf = dml_xrealloc(buf, cap + 1);
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	fclose(f);
	buf[len] = '\0';
	*text = buf;
	return 0;
}

void harness_print_file_tail(const char *title, const char *path)
{
	char *text;
	size_t len;
	const char *start;

	if (dml_test_file_read(path, &text) != 0) {
		fprintf(stderr, "---- %s: cannot read %s ----\n", title, path);
		return;
	}
	len = strlen(text);
	start = len > LOG_TAIL_BYTES ? text + len - LOG_TAIL_BYTES : text;
	fprintf(stderr, "---- %s (%s)%s ----\n%s%s---- end of %s ----\n", title, path,
		start != text ? ", last part" : "", start,
		len && text[len - 1] != '\n' ? "\n" : "", title);
	free(text);
}

/* rm -rf, without following links. */
static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	if (remove(path) != 0)
		fprintf(stderr, "harness: remove %s: %s\n", path, strerror(errno));
	return 0;
}

static void env_cleanup(struct dml_test_env *env)
{
	struct dml_test_server *s, *next;
	struct dml_test_proxy *p, *pnext;
	size_t i;

	for (p = env->proxies; p; p = pnext) {
		pnext = p->next;
		close(p->ctl);
		free(p);
	}
	env->proxies = NULL;
	for (i = 0; i < env->nprocs; i++)
		harness_kill_and_reap(env->procs[i]);
	env->nprocs = 0;
	for (s = env->servers; s; s = next) {
		next = s->next;
		free(s->conf_path);
		free(s->log_path);
		free(s->port_path);
		free(s);
	}
	env->servers = NULL;
	if (env->dir)
		nftw(env->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void env_unregister(struct dml_test_env *env)
{
	struct dml_test_env **p;

	for (p = &live_envs; *p; p = &(*p)->next) {
		if (*p == env) {
			*p = env->next;
			return;
		}
	}
}

/* Print the tail of every log in dir, in name order. */
static void print_dir_logs(const char *dir)
{
	struct dirent **names;
	char *path;
	size_t len;
	int n, i;

	n = scandir(dir, &names, NULL, alphasort);
	for (i = 0; i < n; i++) {
		len = strlen(names[i]->d_name);
		if (len > 4 && strcmp(names[i]->d_name + len - 4, ".log") == 0) {
			path = harness_str_printf("%s/%s", dir, names[i]->d_name);
			harness_print_file_tail(names[i]->d_name, path);
			free(path);
		}
		free(names[i]);
	}
	if (n >= 0)
		free(names);
}

/*
 * Check ends a failed test with _exit() and a timed-out one with SIGKILL
 * (and then kills its process group), so neither atexit nor the test can
 * clean up. The guardian, in a process group of its own, waits for the end
 * of a pipe only the test holds; if the directory still exists then, the
 * test did not finish: it prints the logs and removes the directory.
 */
static int guardian_start(struct dml_test_env *env)
{
	int p[2];
	char c;
	ssize_t n;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) != 0)
		return DML_EIO;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return DML_EIO;
	}
	if (pid == 0) {
		setpgid(0, 0);
		if (p[0] != 3)
			dup2(p[0], 3);
		close_range(4, ~0u, 0);
		do
			n = read(3, &c, 1);
		while (n > 0 || (n < 0 && errno == EINTR));
		if (access(env->dir, F_OK) == 0) {
			fprintf(stderr,
				"harness: the test died before cleaning up; "
				"logs of %s follow\n",
				env->dir);
			print_dir_logs(env->dir);
			nftw(env->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
		}
		_exit(0);
	}
	close(p[0]);
	env->guardian = pid;
	env->guardian_fd = p[1];
	return 0;
}

/* After a clean teardown: the guardian finds nothing to do and exits. */
static void guardian_stop(struct dml_test_env *env)
{
	int st;

	if (env->guardian <= 0)
		return;
	close(env->guardian_fd);
	while (waitpid(env->guardian, &st, 0) < 0 && errno == EINTR)
		;
	env->guardian = 0;
}

/* A test that exits with an environment still live has failed: show why. */
static void cleanup_at_exit(void)
{
	struct dml_test_env *env, *next;

	for (env = live_envs; env; env = next) {
		next = env->next;
		if (env->owner != getpid())
			continue;
		fprintf(stderr,
			"harness: test ended without dml_test_env_free; "
			"logs of %s follow\n",
			env->dir);
		print_dir_logs(env->dir);
		env_cleanup(env);
		guardian_stop(env);
	}
}

int harness_write_file(const char *path, const char *text, unsigned mode)
{
	size_t len = strlen(text), off = 0;
	ssize_t n;
	int fd, rc = 0;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		fprintf(stderr, "harness: open %s: %s\n", path, strerror(errno));
		return DML_EIO;
	}
	/* The umask must not decide: tests depend on the exact mode. */
	if (fchmod(fd, (mode_t)mode) != 0)
		rc = DML_EIO;
	while (rc == 0 && off < len) {
		n = write(fd, text + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = DML_EIO;
		else
			off += (size_t)n;
	}
	if (close(fd) != 0)
		rc = DML_EIO;
	if (rc)
		fprintf(stderr, "harness: write %s: %s\n", path, strerror(errno));
	return rc;
}

int dml_test_env_new(struct dml_test_env **out)
{
	struct dml_test_env *env;
	const char *tmp = getenv("TMPDIR");
	uint8_t raw[32];
	char hex[2 * sizeof(raw) + 2];
	size_t i;
	int rc;

	*out = NULL;
	if (!tmp || !*tmp)
		tmp = P_tmpdir;
	env = dml_xcalloc(1, sizeof(*env));
	env->owner = getpid();
	env->dir = harness_str_printf("%s/dml-test-XXXXXX", tmp);
	if (!mkdtemp(env->dir)) {
		fprintf(stderr, "harness: mkdtemp %s: %s\n", env->dir, strerror(errno));
		free(env->dir);
		free(env);
		return DML_EIO;
	}
	env->next = live_envs;
	live_envs = env;
	if (!atexit_registered) {
		atexit(cleanup_at_exit);
		atexit_registered = 1;
	}
	rc = guardian_start(env);
	if (rc == 0)
		rc = dml_random_bytes(raw, sizeof(raw));
	for (i = 0; rc == 0 && i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	if (rc == 0) {
		strcat(hex, "\n");
		env->secret = harness_str_printf("%s/secret", env->dir);
		rc = harness_write_file(env->secret, hex, 0600);
	}
	if (rc) {
		dml_test_env_free(env);
		return rc;
	}
	*out = env;
	return 0;
}

void dml_test_env_free(struct dml_test_env *env)
{
	if (!env)
		return;
	env_unregister(env);
	if (env->owner == getpid()) {
		env_cleanup(env);
		guardian_stop(env);
	}
	free(env->procs);
	free(env->secret);
	free(env->dir);
	free(env);
}

const char *dml_test_env_dir(const struct dml_test_env *env)
{
	return env->dir;
}

const char *dml_test_env_secret(const struct dml_test_env *env)
{
	return env->secret;
}

int dml_test_env_write(struct dml_test_env *env, const char *name, const char *text,
		       unsigned mode, char **path)
{
	char *full = harness_str_printf("%s/%s", env->dir, name);
	int rc = harness_write_file(full, text, mode);

	if (path && rc == 0)
		*path = full;
	else
		free(full);
	return rc;
}

void dml_test_bin(const char *rel, char **path)
{
	const char *dir = getenv("DML_BUILDDIR");

	*path = harness_str_printf("%s/%s", dir && *dir ? dir : ".", rel);
}

/* In a new child: die with the parent, even when it is SIGKILLed. */
static int child_bind_to_parent(pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	return getppid() == parent ? 0 : -1;
}

int dml_test_fork(struct dml_test_env *env, pid_t *pid)
{
	pid_t parent = getpid(), child;

	fflush(NULL);
	child = fork();
	if (child < 0) {
		fprintf(stderr, "harness: fork: %s\n", strerror(errno));
		return DML_EIO;
	}
	if (child == 0 && child_bind_to_parent(parent) != 0)
		_exit(127);
	if (child > 0)
		procs_add(env, child);
	*pid = child;
	return 0;
}

/*
 * Start argv with stdout appended to out_path and stderr to err_path (the
 * same file when they are equal). The child dies with the test.
 */
int harness_spawn_to(struct dml_test_env *env, char *const argv[], const char *out_path,
		    const char *err_path, pid_t *pid)
{
	sigset_t all;
	pid_t child;
	int fd, rc;

	rc = dml_test_fork(env, &child);
	if (rc)
		return rc;
	if (child == 0) {
		fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd < 0)
			_exit(127);
		dup2(fd, STDOUT_FILENO);
		if (strcmp(out_path, err_path) != 0) {
			fd = open(err_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
			if (fd < 0)
				_exit(127);
		}
		dup2(fd, STDERR_FILENO);
		fd = open("/dev/null", O_RDONLY);
		if (fd >= 0)
			dup2(fd, STDIN_FILENO);
		/* Sockets of the test must not live on in its children. */
		close_range(3, ~0u, 0);
		sigemptyset(&all);
		sigprocmask(SIG_SETMASK, &all, NULL);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		execv(argv[0], argv);
		dprintf(STDERR_FILENO, "harness: exec %s: %s\n", argv[0],
			strerror(errno));
		_exit(127);
	}
	*pid = child;
	return 0;
}

int dml_test_proc_spawn(struct dml_test_env *env, char *const argv[],
			const char *log_name, pid_t *pid)
{
	char *log_path = harness_str_printf("%s/%s", env->dir, log_name);
	int rc = harness_spawn_to(env, argv, log_path, log_path, pid);

	free(log_path);
	return rc;
}

int dml_test_proc_wait(struct dml_test_env *env, pid_t pid, int timeout_ms, int *status)
{
	int st = 0;

	if (!harness_reap_within(pid, timeout_ms, &st)) {
		fprintf(stderr, "harness: process %d still running after %d ms: killed\n",
			(int)pid, timeout_ms);
		harness_kill_and_reap(pid);
		harness_procs_forget(env, pid);
		return DML_ETIMEDOUT;
	}
	harness_procs_forget(env, pid);
	if (status)
		*status = st;
	return 0;
}
