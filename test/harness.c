/*
 * harness.c - loopback cluster harness for integration tests (see harness.h).
 *
 * Starts real daemons as child processes in a private temporary directory
 * and cleans up after them. It must never leave a process or a directory
 * behind, whatever way the test ends: children carry PR_SET_PDEATHSIG, an
 * atexit handler cleans up after an exit(), and a guardian process after an
 * _exit() or a SIGKILL (how Check ends failed and timed-out tests). It never
 * asserts: it reports through return codes and prints logs on failure.
 */
#define _GNU_SOURCE
#include "harness.h"

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

#include "frame.h"
#include "util.h"

/* How much of a log is printed when something fails. */
#define LOG_TAIL_BYTES 8192
#define POLL_STEP_MS 5

/* A daemon started on a config file: a dml-server, or the dml-sched. */
struct dml_test_server {
	struct dml_test_env *env;
	const char *kind;  /* "server" or "scheduler", for messages */
	const char *bin;   /* relative to the build directory */
	pid_t pid;
	int running;
	uint16_t port;
	uint32_t node_id;
	char *conf_path;
	char *log_path;
	char *port_path;
	struct dml_test_server *next;
};

struct dml_test_proxy {
	struct dml_test_proxy *next;
	pid_t pid;
	int ctl; /* our end of the control socket pair */
	uint16_t port;
};

struct dml_test_env {
	char *dir;
	char *secret;
	pid_t owner;     /* only this process cleans up */
	pid_t guardian;  /* cleans up if the owner dies first */
	int guardian_fd; /* its end of the pipe the guardian watches */
	unsigned seq;    /* makes file names unique */
	pid_t *procs;    /* children not yet reaped */
	size_t nprocs, capprocs;
	struct dml_test_server *servers;
	struct dml_test_proxy *proxies;
	struct dml_test_env *next;
};

/* Environments not yet freed, for the atexit handler. */
static struct dml_test_env *live_envs;
static int atexit_registered;

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *str_printf(const char *fmt, ...)
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

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static int64_t ms_left(uint64_t deadline_ns)
{
	uint64_t now = dml_now_ns();

	return now >= deadline_ns ? 0 : (int64_t)((deadline_ns - now) / 1000000u);
}

static uint64_t deadline_after(int timeout_ms)
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

static void procs_forget(struct dml_test_env *env, pid_t pid)
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
static int reap_within(pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = deadline_after(timeout_ms);
	pid_t r;

	for (;;) {
		r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 1;
		if (r < 0 && errno != EINTR) {
			*status = 0; /* not our child any more: nothing to wait for */
			return 1;
		}
		if (ms_left(deadline) == 0)
			return 0;
		sleep_ms(POLL_STEP_MS);
	}
}

static void kill_and_reap(pid_t pid)
{
	int st;

	kill(pid, SIGKILL);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
}

static void describe_status(int status, char *buf, size_t len)
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

static void print_file_tail(const char *title, const char *path)
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
		kill_and_reap(env->procs[i]);
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
			path = str_printf("%s/%s", dir, names[i]->d_name);
			print_file_tail(names[i]->d_name, path);
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

static int write_file(const char *path, const char *text, unsigned mode)
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
	env->dir = str_printf("%s/dml-test-XXXXXX", tmp);
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
		env->secret = str_printf("%s/secret", env->dir);
		rc = write_file(env->secret, hex, 0600);
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
	char *full = str_printf("%s/%s", env->dir, name);
	int rc = write_file(full, text, mode);

	if (path && rc == 0)
		*path = full;
	else
		free(full);
	return rc;
}

void dml_test_bin(const char *rel, char **path)
{
	const char *dir = getenv("DML_BUILDDIR");

	*path = str_printf("%s/%s", dir && *dir ? dir : ".", rel);
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
static int spawn_to(struct dml_test_env *env, char *const argv[], const char *out_path,
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
	char *log_path = str_printf("%s/%s", env->dir, log_name);
	int rc = spawn_to(env, argv, log_path, log_path, pid);

	free(log_path);
	return rc;
}

int dml_test_proc_wait(struct dml_test_env *env, pid_t pid, int timeout_ms, int *status)
{
	int st = 0;

	if (!reap_within(pid, timeout_ms, &st)) {
		fprintf(stderr, "harness: process %d still running after %d ms: killed\n",
			(int)pid, timeout_ms);
		kill_and_reap(pid);
		procs_forget(env, pid);
		return DML_ETIMEDOUT;
	}
	procs_forget(env, pid);
	if (status)
		*status = st;
	return 0;
}

static uint32_t conf_node_id(const struct dml_test_server_conf *conf)
{
	return conf->node_id ? conf->node_id : 1 + conf->shard_index;
}

void dml_test_server_conf_text(struct dml_test_env *env,
			       const struct dml_test_server_conf *conf, char **text,
			       char **port_file)
{
	unsigned k = env->seq++;
	char *port_path = str_printf("%s/server-%u.port", env->dir, k);
	uint32_t count = conf->shard_count ? conf->shard_count : 1;
	char dead_after[48] = "";

	if (conf->dead_after_ms)
		snprintf(dead_after, sizeof(dead_after), "dead_after_ms = %u\n",
			 conf->dead_after_ms);

	*text = str_printf(
		"# written by the test harness\n"
		"[server]\n"
		"listen = 127.0.0.1:0\n"
		"port_file = %s\n"
		"node_id = %u\n"
		"cluster = %s\n"
		"secret_file = %s\n"
		"shard = %u/%u\n"
		"log_level = %s\n"
		"%s"
		"\n[job]\n"
		"staleness = %lld\n"
		"workers = %u\n"
		"%s%s"
		"\n%s\n%s",
		port_path, conf_node_id(conf), conf->cluster ? conf->cluster : "dml",
		conf->secret_file ? conf->secret_file : env->secret, conf->shard_index,
		count, conf->log_level ? conf->log_level : "info",
		conf->server_extra ? conf->server_extra : "", (long long)conf->staleness,
		conf->workers, dead_after, conf->job_extra ? conf->job_extra : "",
		conf->tables ? conf->tables : "", conf->extra ? conf->extra : "");
	if (port_file)
		*port_file = port_path;
	else
		free(port_path);
}

/* The port, once the server wrote its port file completely. */
static int read_port(const char *path, uint16_t *port)
{
	char *text, *nl;
	uint64_t v;
	int rc;

	if (dml_test_file_read(path, &text) != 0)
		return DML_EIO;
	nl = strchr(text, '\n');
	rc = DML_EINVAL;
	if (nl) {
		*nl = '\0';
		rc = dml_parse_u64(text, 1, 65535, &v);
		if (rc == 0)
			*port = (uint16_t)v;
	}
	free(text);
	return rc;
}

static int server_wait_ready(struct dml_test_server *s, int timeout_ms)
{
	uint64_t deadline = deadline_after(timeout_ms);
	char why[64];
	int st;

	for (;;) {
		if (read_port(s->port_path, &s->port) == 0)
			return 0;
		if (reap_within(s->pid, 0, &st)) {
			s->running = 0;
			procs_forget(s->env, s->pid);
			describe_status(st, why, sizeof(why));
			fprintf(stderr,
				"harness: %s node %u ended before listening (%s)\n",
				s->kind, s->node_id, why);
			dml_test_server_print_log(s);
			return DML_EIO;
		}
		if (ms_left(deadline) == 0) {
			fprintf(stderr,
				"harness: %s node %u wrote no port file in %d ms\n",
				s->kind, s->node_id, timeout_ms);
			dml_test_server_print_log(s);
			dml_test_server_kill(s);
			return DML_ETIMEDOUT;
		}
		sleep_ms(POLL_STEP_MS);
	}
}

/* Run the daemon on its config (its log appended to) and wait for its port. */
static int daemon_launch(struct dml_test_server *s)
{
	char *argv[4], *bin;
	int rc;

	dml_test_bin(s->bin, &bin);
	argv[0] = bin;
	argv[1] = (char *)"-c";
	argv[2] = s->conf_path;
	argv[3] = NULL;
	rc = spawn_to(s->env, argv, s->log_path, s->log_path, &s->pid);
	free(bin);
	if (rc)
		return rc;
	s->running = 1;
	return server_wait_ready(s, DML_TEST_START_TIMEOUT_MS);
}

/*
 * Start a daemon of the given kind on config text whose port file is
 * port_path (taken over). Files are named "<prefix>-<k>.conf" and ".log".
 */
static int daemon_start(struct dml_test_env *env, const char *kind, const char *bin,
			const char *prefix, unsigned k, uint32_t node_id, char *text,
			char *port_path, struct dml_test_server **out)
{
	struct dml_test_server *s = dml_xcalloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	s->env = env;
	s->kind = kind;
	s->bin = bin;
	s->node_id = node_id;
	s->port_path = port_path;
	s->conf_path = str_printf("%s/%s-%u.conf", env->dir, prefix, k);
	s->log_path = str_printf("%s/%s-%u.log", env->dir, prefix, k);
	/* Owned by the environment from here on, whatever happens next. */
	s->next = env->servers;
	env->servers = s;

	rc = write_file(s->conf_path, text, 0600);
	if (rc == 0)
		rc = daemon_launch(s);
	if (rc)
		return rc;
	*out = s;
	return 0;
}

int dml_test_server_start(struct dml_test_env *env,
			  const struct dml_test_server_conf *conf,
			  struct dml_test_server **out)
{
	unsigned k = env->seq; /* conf_text numbers the port file with it */
	char *text, *port_path;
	int rc;

	dml_test_server_conf_text(env, conf, &text, &port_path);
	rc = daemon_start(env, "server", "server/dml-server", "server", k,
			  conf_node_id(conf), text, port_path, out);
	free(text);
	return rc;
}

uint16_t dml_test_server_port(const struct dml_test_server *s)
{
	return s->port;
}

const char *dml_test_server_log(const struct dml_test_server *s)
{
	return s->log_path;
}

pid_t dml_test_server_pid(const struct dml_test_server *s)
{
	return s->running ? s->pid : 0;
}

int dml_test_server_alive(struct dml_test_server *s)
{
	int st;

	if (s->running && reap_within(s->pid, 0, &st)) {
		s->running = 0;
		procs_forget(s->env, s->pid);
	}
	return s->running;
}

void dml_test_server_print_log(const struct dml_test_server *s)
{
	char title[64];

	snprintf(title, sizeof(title), "log of %s node %u", s->kind, s->node_id);
	print_file_tail(title, s->log_path);
}

int dml_test_server_stop(struct dml_test_server *s, int timeout_ms)
{
	char why[64];
	int st = 0;

	if (!s->running) {
		fprintf(stderr, "harness: %s node %u was not running\n", s->kind, s->node_id);
		return DML_EIO;
	}
	kill(s->pid, SIGTERM);
	if (!reap_within(s->pid, timeout_ms, &st)) {
		fprintf(stderr, "harness: %s node %u ignored SIGTERM for %d ms\n",
			s->kind, s->node_id, timeout_ms);
		dml_test_server_print_log(s);
		dml_test_server_kill(s);
		return DML_ETIMEDOUT;
	}
	s->running = 0;
	procs_forget(s->env, s->pid);
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	describe_status(st, why, sizeof(why));
	fprintf(stderr, "harness: %s node %u stopped with %s\n", s->kind, s->node_id, why);
	dml_test_server_print_log(s);
	return DML_EIO;
}

void dml_test_server_kill(struct dml_test_server *s)
{
	if (!s->running)
		return;
	kill_and_reap(s->pid);
	s->running = 0;
	procs_forget(s->env, s->pid);
}

size_t dml_test_server_log_size(const struct dml_test_server *s)
{
	struct stat st;

	return stat(s->log_path, &st) == 0 ? (size_t)st.st_size : 0;
}

int dml_test_server_log_wait(const struct dml_test_server *s, size_t from,
			     const char *const *needles, int timeout_ms)
{
	uint64_t deadline = deadline_after(timeout_ms);
	char *text;
	size_t i;

	for (;;) {
		if (dml_test_file_read(s->log_path, &text) == 0) {
			const char *part = strlen(text) >= from ? text + from : "";

			for (i = 0; needles[i]; i++) {
				if (strstr(part, needles[i])) {
					free(text);
					return (int)i;
				}
			}
			free(text);
		}
		if (ms_left(deadline) == 0)
			break;
		sleep_ms(20);
	}
	fprintf(stderr, "harness: %s node %u logged none of:", s->kind, s->node_id);
	for (i = 0; needles[i]; i++)
		fprintf(stderr, " \"%s\"", needles[i]);
	fprintf(stderr, "\n");
	dml_test_server_print_log(s);
	return -1;
}

int dml_test_raw_connect(uint16_t port, int *fd)
{
	struct sockaddr_in sa;
	int s;

	*fd = -1;
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return DML_ECONN;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "harness: connect 127.0.0.1:%u: %s\n", port,
			strerror(errno));
		close(s);
		return DML_ECONN;
	}
	*fd = s;
	return 0;
}

int dml_test_raw_send(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			return 0;
		if (n <= 0) {
			fprintf(stderr, "harness: send: %s\n", strerror(errno));
			return DML_EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly len bytes (NULL buf: discard them) within the deadline. */
static int raw_read_exact(int fd, uint8_t *buf, size_t len, uint64_t deadline_ns)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t scratch[4096];
	size_t want;
	ssize_t n;
	int64_t left;

	while (len > 0) {
		left = ms_left(deadline_ns);
		if (left == 0)
			return DML_ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		want = buf || len < sizeof(scratch) ? len : sizeof(scratch);
		n = recv(fd, buf ? buf : scratch, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return DML_ECONN;
		if (buf)
			buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int dml_test_raw_skip_frame(int fd, int timeout_ms)
{
	uint64_t deadline = deadline_after(timeout_ms);
	uint8_t raw[DML_FRAME_HEADER_LEN];
	struct dml_frame_limits lim;
	struct dml_frame_header hdr;
	int rc;

	dml_frame_limits_default(&lim);
	rc = raw_read_exact(fd, raw, sizeof(raw), deadline);
	if (rc == 0)
		rc = dml_frame_header_decode(raw, &lim, &hdr);
	if (rc == 0)
		rc = raw_read_exact(fd, NULL, (size_t)hdr.meta_len + hdr.payload_len,
				    deadline);
	return rc;
}

int dml_test_raw_wait_closed(int fd, int timeout_ms)
{
	uint64_t deadline = deadline_after(timeout_ms);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char scratch[4096];
	ssize_t n;
	int64_t left;

	for (;;) {
		left = ms_left(deadline);
		if (left == 0)
			return DML_ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		n = recv(fd, scratch, sizeof(scratch), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 0;
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return 0;
	}
}

int dml_test_client_opts_ports(struct dml_test_env *env, const uint16_t *ports, size_t n,
			       uint32_t worker_id, dml_opts_t **out)
{
	dml_opts_t *o;
	char *list = dml_xstrdup(""), *next;
	char id[16];
	size_t i;
	int rc;

	*out = NULL;
	for (i = 0; i < n; i++) {
		next = str_printf("%s%s127.0.0.1:%u", list, i ? "," : "",
				  (unsigned)ports[i]);
		free(list);
		list = next;
	}
	rc = dml_opts_new(&o);
	if (rc) {
		free(list);
		return rc;
	}
	snprintf(id, sizeof(id), "%u", worker_id);
	rc = dml_opts_set(o, "servers", list);
	if (rc == 0)
		rc = dml_opts_set(o, "secret_file", env->secret);
	if (rc == 0)
		rc = dml_opts_set(o, "cluster", "dml");
	if (rc == 0 && worker_id)
		rc = dml_opts_set(o, "worker_id", id);
	if (rc == 0)
		rc = dml_opts_set(o, "role", worker_id ? "worker" : "control");
	free(list);
	if (rc) {
		fprintf(stderr, "harness: client options: %s\n", dml_strerror(rc));
		dml_opts_free(o);
		return rc;
	}
	*out = o;
	return 0;
}

int dml_test_client_opts(struct dml_test_env *env, struct dml_test_server *const *servers,
			 size_t n, uint32_t worker_id, dml_opts_t **out)
{
	uint16_t *ports = dml_xcalloc(n ? n : 1, sizeof(*ports));
	size_t i;
	int rc;

	for (i = 0; i < n; i++)
		ports[i] = servers[i]->port;
	rc = dml_test_client_opts_ports(env, ports, n, worker_id, out);
	free(ports);
	return rc;
}

int dml_test_client_new(struct dml_test_env *env, struct dml_test_server *const *servers,
			size_t n, uint32_t worker_id, dml_t **out)
{
	dml_opts_t *o;
	int rc;

	*out = NULL;
	rc = dml_test_client_opts(env, servers, n, worker_id, &o);
	if (rc)
		return rc;
	rc = dml_connect(o, out);
	dml_opts_free(o);
	return rc;
}

/* ---- fault-injecting proxy ------------------------------------------------ */

#define PROXY_MAX_PAIRS 64
#define PROXY_CMD_HOLD 'h'
#define PROXY_CMD_CUT 'c'

/* One relayed connection: a to the client, b to the server. */
struct proxy_pair {
	int a, b;
};

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A listening socket on 127.0.0.1 with a kernel-chosen port. */
static int listen_loopback(uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, 64) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Close with an RST: unsent data is dropped, the peer sees a reset. */
static void close_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static int relay(int from, int to)
{
	static uint8_t buf[65536];
	ssize_t n = recv(from, buf, sizeof(buf), MSG_DONTWAIT);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n <= 0)
		return -1;
	return write_all(to, buf, (size_t)n);
}

static void proxy_accept(int lfd, uint16_t target, struct proxy_pair *pairs,
			 size_t *npairs)
{
	int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), b;

	if (a < 0)
		return;
	if (*npairs == PROXY_MAX_PAIRS || dml_test_raw_connect(target, &b) != 0) {
		close_reset(a);
		return;
	}
	pairs[*npairs].a = a;
	pairs[*npairs].b = b;
	(*npairs)++;
}

/* The proxy process: relay until the test closes the control socket. */
static void __attribute__((noreturn)) proxy_main(int ctl, uint16_t target)
{
	static struct proxy_pair pairs[PROXY_MAX_PAIRS];
	static struct pollfd pfd[2 + 2 * PROXY_MAX_PAIRS];
	size_t npairs = 0, i, n;
	uint16_t port;
	uint8_t cmd, count;
	int lfd, hold = 0;

	lfd = listen_loopback(&port);
	if (lfd < 0 || write_all(ctl, &port, sizeof(port)) != 0)
		_exit(1);
	for (;;) {
		n = 0;
		pfd[n++] = (struct pollfd){ .fd = ctl, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (i = 0; i < npairs; i++) {
			pfd[n++] = (struct pollfd){ .fd = pairs[i].a, .events = POLLIN };
			pfd[n++] = (struct pollfd){ .fd = pairs[i].b,
						    .events = hold ? 0 : POLLIN };
		}
		if (poll(pfd, n, -1) < 0)
			continue;
		if (pfd[0].revents) {
			if (read_full(ctl, &cmd, 1) != 0)
				_exit(0);
			count = (uint8_t)npairs;
			if (cmd == PROXY_CMD_CUT) {
				for (i = 0; i < npairs; i++) {
					close_reset(pairs[i].a);
					close_reset(pairs[i].b);
				}
				npairs = 0;
				hold = 0;
			} else {
				hold = 1;
			}
			if (write_all(ctl, &count, 1) != 0)
				_exit(0);
			continue;
		}
		/* Only the pairs this poll saw; downwards, so that removing pair i
		 * leaves the ones still to visit in place. */
		for (i = (n - 2) / 2; i-- > 0;) {
			int ok = 0;

			if (pfd[2 + 2 * i].revents)
				ok |= relay(pairs[i].a, pairs[i].b);
			if (ok == 0 && pfd[3 + 2 * i].revents)
				ok |= relay(pairs[i].b, pairs[i].a);
			if (ok != 0) {
				close(pairs[i].a);
				close(pairs[i].b);
				pairs[i] = pairs[--npairs];
			}
		}
		if (pfd[1].revents)
			proxy_accept(lfd, target, pairs, &npairs);
	}
}

int dml_test_proxy_start(struct dml_test_env *env, uint16_t target_port,
			 struct dml_test_proxy **out)
{
	struct dml_test_proxy *p;
	int sv[2], rc;
	pid_t pid;

	*out = NULL;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return DML_EIO;
	rc = dml_test_fork(env, &pid);
	if (rc) {
		close(sv[0]);
		close(sv[1]);
		return rc;
	}
	if (pid == 0) {
		close(sv[0]);
		proxy_main(sv[1], target_port);
	}
	close(sv[1]);
	p = dml_xcalloc(1, sizeof(*p));
	p->pid = pid;
	p->ctl = sv[0];
	p->next = env->proxies;
	env->proxies = p;
	if (read_full(p->ctl, &p->port, sizeof(p->port)) != 0) {
		fprintf(stderr, "harness: proxy did not start\n");
		return DML_EIO;
	}
	*out = p;
	return 0;
}

uint16_t dml_test_proxy_port(const struct dml_test_proxy *p)
{
	return p->port;
}

static int proxy_command(struct dml_test_proxy *p, uint8_t cmd, int *count)
{
	uint8_t n;

	if (write_all(p->ctl, &cmd, 1) != 0 || read_full(p->ctl, &n, 1) != 0) {
		fprintf(stderr, "harness: proxy on port %u is gone\n", p->port);
		return DML_EIO;
	}
	if (count)
		*count = n;
	return 0;
}

int dml_test_proxy_hold(struct dml_test_proxy *p)
{
	return proxy_command(p, PROXY_CMD_HOLD, NULL);
}

int dml_test_proxy_cut(struct dml_test_proxy *p, int *count)
{
	return proxy_command(p, PROXY_CMD_CUT, count);
}

/* ---- port files and HTTP ------------------------------------------------ */

int dml_test_port_file_read(const char *path, uint16_t *port)
{
	return read_port(path, port) == 0 ? 0 : DML_EIO;
}

/* Read until EOF or the deadline into a growing NUL-terminated buffer. */
static int read_to_eof(int fd, uint64_t deadline_ns, char **out, size_t *outlen)
{
	size_t cap = 4096, len = 0;
	char *buf = dml_xmalloc(cap);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	for (;;) {
		int64_t left = ms_left(deadline_ns);
		ssize_t n;

		if (left == 0) {
			free(buf);
			return DML_ETIMEDOUT;
		}
		if (poll(&pfd, 1, (int)(left < 100 ? left : 100)) <= 0)
			continue;
		if (len + 1 >= cap)
			buf = dml_xrealloc(buf, cap *= 2);
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != ECONNRESET) {
			free(buf);
			return DML_ECONN;
		}
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

int dml_test_http_request(uint16_t port, const char *method, const char *path,
			  int timeout_ms, int *status, char **body)
{
	uint64_t deadline = deadline_after(timeout_ms);
	char *req = str_printf("%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
	char *reply = NULL, *sep;
	size_t len;
	int fd, minor, rc;

	rc = dml_test_raw_connect(port, &fd);
	if (rc == 0) {
		rc = write_all(fd, req, strlen(req)) == 0 ? 0 : DML_ECONN;
		if (rc == 0)
			rc = read_to_eof(fd, deadline, &reply, &len);
		close(fd);
	}
	free(req);
	if (rc)
		return rc;
	sep = strstr(reply, "\r\n\r\n");
	if (!sep || sscanf(reply, "HTTP/1.%d %d ", &minor, status) != 2) {
		fprintf(stderr, "harness: not an HTTP reply: %.200s\n", reply);
		free(reply);
		return DML_EINVAL;
	}
	if (body)
		*body = dml_xstrdup(sep + 4);
	free(reply);
	return 0;
}

/* ---- dml-sched, restarts and dmlctl --------------------------------------- */

int dml_test_sched_start(struct dml_test_env *env, const struct dml_test_sched_conf *conf,
			 struct dml_test_server **out)
{
	unsigned k = env->seq++;
	char *port_path = str_printf("%s/sched-%u.port", env->dir, k);
	char timing[160] = "";
	size_t n = 0;
	char *text;
	int rc;

	/* Zero keeps the scheduler's own default. */
	if (conf->heartbeat_interval_ms)
		n += (size_t)snprintf(timing + n, sizeof(timing) - n,
				      "heartbeat_interval_ms = %u\n", conf->heartbeat_interval_ms);
	if (conf->suspect_after_ms)
		n += (size_t)snprintf(timing + n, sizeof(timing) - n,
				      "suspect_after_ms = %u\n", conf->suspect_after_ms);
	if (conf->dead_after_ms)
		snprintf(timing + n, sizeof(timing) - n, "dead_after_ms = %u\n",
			 conf->dead_after_ms);
	text = str_printf("# written by the test harness\n"
			  "[sched]\n"
			  "listen = 127.0.0.1:%u\n"
			  "port_file = %s\n"
			  "cluster = dml\n"
			  "secret_file = %s\n"
			  "log_level = %s\n"
			  "%s"
			  "\n%s",
			  (unsigned)conf->port, port_path,
			  conf->secret_file ? conf->secret_file : env->secret,
			  conf->log_level ? conf->log_level : "info", timing,
			  conf->extra ? conf->extra : "");
	rc = daemon_start(env, "scheduler", "sched/dml-sched", "sched", k, 1, text, port_path,
			  out);
	free(text);
	return rc;
}

int dml_test_server_restart(struct dml_test_server *s)
{
	if (dml_test_server_alive(s)) {
		fprintf(stderr, "harness: %s node %u is still running\n", s->kind, s->node_id);
		return DML_EIO;
	}
	/* The old port file would make the new process look ready at once. */
	if (unlink(s->port_path) != 0 && errno != ENOENT) {
		fprintf(stderr, "harness: unlink %s: %s\n", s->port_path, strerror(errno));
		return DML_EIO;
	}
	return daemon_launch(s);
}

int dml_test_server_pin_port(struct dml_test_server *s)
{
	static const char from[] = "listen = 127.0.0.1:0\n";
	char *text, *at, *out;
	FILE *f;
	int rc = DML_EIO;

	if (dml_test_file_read(s->conf_path, &text) != 0)
		return DML_EIO;
	if ((at = strstr(text, from)) != NULL) {
		*at = '\0';
		out = str_printf("%slisten = 127.0.0.1:%u\n%s", text, (unsigned)s->port,
				 at + strlen(from));
		if ((f = fopen(s->conf_path, "w")) != NULL) {
			if (fputs(out, f) >= 0)
				rc = 0;
			if (fclose(f) != 0)
				rc = DML_EIO;
		}
		free(out);
	}
	if (rc)
		fprintf(stderr, "harness: cannot pin the port of %s node %u in %s\n", s->kind,
			s->node_id, s->conf_path);
	free(text);
	return rc;
}

int dml_test_server_signal(struct dml_test_server *s, int sig)
{
	if (!s->running || kill(s->pid, sig) != 0) {
		fprintf(stderr, "harness: %s node %u: cannot send signal %d\n", s->kind,
			s->node_id, sig);
		return DML_EIO;
	}
	return 0;
}

char *dml_test_scheduler_line(const struct dml_test_server *sched)
{
	return str_printf("scheduler = 127.0.0.1:%u\n", (unsigned)sched->port);
}

int dml_test_run(struct dml_test_env *env, char *const argv[], int timeout_ms,
		 struct dml_test_output *res)
{
	unsigned k = env->seq++;
	char *out_path = str_printf("%s/run-%u.stdout", env->dir, k);
	char *err_path = str_printf("%s/run-%u.stderr", env->dir, k);
	pid_t pid;
	int st = 0, rc;

	memset(res, 0, sizeof(*res));
	res->status = -1;
	rc = spawn_to(env, argv, out_path, err_path, &pid);
	if (rc == 0)
		rc = dml_test_proc_wait(env, pid, timeout_ms, &st);
	if (rc == 0 && WIFEXITED(st))
		res->status = WEXITSTATUS(st);
	/* A program that printed nothing never created its files. */
	if (dml_test_file_read(out_path, &res->out) != 0)
		res->out = dml_xstrdup("");
	if (dml_test_file_read(err_path, &res->err) != 0)
		res->err = dml_xstrdup("");
	unlink(out_path);
	unlink(err_path);
	free(out_path);
	free(err_path);
	return rc;
}

void dml_test_output_free(struct dml_test_output *res)
{
	free(res->out);
	free(res->err);
	res->out = res->err = NULL;
}

int dml_test_dmlctl(struct dml_test_env *env, uint16_t sched_port, const char *secret_file,
		    const char *const *args, struct dml_test_output *res)
{
	size_t nargs = 0, i = 0;
	char **argv, *bin, *addr = str_printf("127.0.0.1:%u", (unsigned)sched_port);
	int rc;

	while (args && args[nargs])
		nargs++;
	argv = dml_xcalloc(nargs + 6, sizeof(*argv));
	dml_test_bin("tools/dmlctl", &bin);
	argv[i++] = bin;
	argv[i++] = (char *)"-s";
	argv[i++] = addr;
	argv[i++] = (char *)"--secret";
	argv[i++] = (char *)(secret_file ? secret_file : env->secret);
	for (size_t j = 0; j < nargs; j++)
		argv[i++] = (char *)args[j];
	rc = dml_test_run(env, argv, DML_TEST_DMLCTL_TIMEOUT_MS, res);
	free(argv);
	free(bin);
	free(addr);
	return rc;
}
