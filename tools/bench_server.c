/*
 * The dml-server process of a dml-bench subcommand (see bench_server.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/bench.h"
#include "tools/bench_server.h"
#include "tools/bench_util.h"
#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/util.h"

#define BENCH_PORT_WAIT_MS 10000
#define BENCH_STOP_WAIT_MS 10000
#define BENCH_LOG_TAIL 4096


int bench_server_file(const struct bench_server *s, const char *name, char *buf,
			     size_t len)
{
	return bench_path(buf, len, s->dir, name);
}

/* The dml-server to run: --server, $DML_SERVER, or one next to this program. */
int bench_server_find(const char *opt, char *out, size_t len)
{
	static const char *const rel[] = { "../server/dml-server", "dml-server" };
	const char *env = getenv("DML_SERVER");
	char dir[PATH_MAX];

	if (opt || (env && *env)) {
		snprintf(out, len, "%s", opt ? opt : env);
		return 0;
	}
	if (bench_exe_dir(dir, sizeof(dir)))
		return DML_ENOTFOUND;
	for (size_t i = 0; i < DML_ARRAY_LEN(rel); i++) {
		if (bench_path(out, len, dir, rel[i]) == 0 && access(out, X_OK) == 0)
			return 0;
	}
	return DML_ENOTFOUND;
}

static int bench_write_file(const char *path, const char *text)
{
	size_t len = strlen(text);
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int rc = 0;

	if (fd < 0) {
		dml_err("%s: %s", path, strerror(errno));
		return DML_EIO;
	}
	if (fchmod(fd, 0600) || write(fd, text, len) != (ssize_t)len) {
		dml_err("%s: %s", path, strerror(errno));
		rc = DML_EIO;
	}
	if (close(fd) && rc == 0)
		rc = DML_EIO;
	return rc;
}

static int bench_server_write_secret(const struct bench_server *s)
{
	uint8_t raw[32];
	char hex[2 * sizeof(raw) + 2], path[PATH_MAX];
	int rc;

	if (dml_random_bytes(raw, sizeof(raw)))
		return DML_EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(hex + 2 * i, 3, "%02x", raw[i]);
	strcat(hex, "\n");
	rc = bench_server_file(s, "secret", path, sizeof(path));
	return rc ? rc : bench_write_file(path, hex);
}



void bench_server_log_tail(struct bench_server *s)
{
	char path[PATH_MAX];

	if (s->tail_shown || bench_server_file(s, "server.log", path, sizeof(path)))
		return;
	s->tail_shown = 1;
	bench_log_tail(path, BENCH_LOG_TAIL, "last lines of the dml-server log:");
}

/* In the child: become the server. Only returns by _exit. */
static void bench_server_exec(const char *exe, const char *conf, int logfd, int nullfd,
			      pid_t parent)
{
	sigset_t none;

	/* Own process group: a terminal's ^C reaches dml-bench, which stops the
	 * server in order. If dml-bench dies, the kernel stops the server. */
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() != parent)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (dup2(nullfd, STDIN_FILENO) < 0 || dup2(logfd, STDOUT_FILENO) < 0 ||
	    dup2(logfd, STDERR_FILENO) < 0)
		_exit(127);
	execl(exe, exe, "-c", conf, (char *)NULL);
	dprintf(STDERR_FILENO, "dml-bench: cannot run %s: %s\n", exe, strerror(errno));
	_exit(127);
}

static int bench_server_spawn(struct bench_server *s, const char *exe)
{
	char conf[PATH_MAX], logp[PATH_MAX];
	pid_t parent = getpid(), pid;
	int logfd, nullfd;

	if (bench_server_file(s, "server.conf", conf, sizeof(conf)) ||
	    bench_server_file(s, "server.log", logp, sizeof(logp)))
		return DML_EINVAL;
	logfd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (logfd < 0 || nullfd < 0) {
		dml_err("cannot open the server log or /dev/null: %s", strerror(errno));
		if (logfd >= 0)
			close(logfd);
		if (nullfd >= 0)
			close(nullfd);
		return DML_EIO;
	}
	pid = fork();
	if (pid == 0)
		bench_server_exec(exe, conf, logfd, nullfd, parent);
	close(logfd);
	close(nullfd);
	if (pid < 0) {
		dml_err("fork: %s", strerror(errno));
		return DML_EIO;
	}
	s->pid = pid;
	bench_signals_child(pid);
	return 0;
}

static void bench_sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* 0 and s->port once the port file is there; the server may not have died. */
static int bench_server_wait_port(struct bench_server *s)
{
	char path[PATH_MAX], line[32], why[64];
	uint64_t deadline = dml_now_ns() + BENCH_PORT_WAIT_MS * 1000000ull, port;
	int status;

	if (bench_server_file(s, "port", path, sizeof(path)))
		return DML_EINVAL;
	while (dml_now_ns() < deadline) {
		FILE *f;

		if (bench_interrupted())
			return DML_ECLOSED;
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			s->pid = 0;
			bench_signals_child(0);
			bench_exit_reason(status, why, sizeof(why));
			dml_err("dml-server stopped before it was ready (%s)", why);
			bench_server_log_tail(s);
			return DML_ECONN;
		}
		f = fopen(path, "r");
		if (f) {
			int ok = fgets(line, sizeof(line), f) != NULL;

			fclose(f);
			line[strcspn(line, "\r\n")] = '\0';
			if (!ok || dml_parse_u64(line, 1, 65535, &port)) {
				dml_err("%s: not a port number", path);
				return DML_ECONF;
			}
			s->port = (uint16_t)port;
			return 0;
		}
		bench_sleep_ms(10);
	}
	dml_err("dml-server wrote no port file within %d s", BENCH_PORT_WAIT_MS / 1000);
	bench_server_log_tail(s);
	return DML_ETIMEDOUT;
}

/* SIGTERM and reap the server (SIGKILL if it hangs); complain if it failed. */
void bench_server_stop(struct bench_server *s)
{
	uint64_t deadline = dml_now_ns() + BENCH_STOP_WAIT_MS * 1000000ull;
	char why[64];
	int status = 0;
	pid_t got = 0;

	if (s->pid <= 0)
		return;
	bench_signals_child(0);
	kill(s->pid, SIGTERM);
	while (dml_now_ns() < deadline) {
		got = waitpid(s->pid, &status, WNOHANG);
		if (got != 0)
			break;
		bench_sleep_ms(10);
	}
	if (got == 0) {
		dml_err("dml-server did not stop on SIGTERM within %d s; killing it",
			BENCH_STOP_WAIT_MS / 1000);
		kill(s->pid, SIGKILL);
		got = waitpid(s->pid, &status, 0);
	}
	if (got == s->pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		bench_exit_reason(status, why, sizeof(why));
		dml_warn("dml-server ended with %s", why);
		bench_server_log_tail(s);
	}
	s->pid = 0;
}

void bench_server_remove_dir(struct bench_server *s)
{
	if (!s->have_dir)
		return;
	bench_tmpdir_remove(s->dir);
	s->have_dir = 0;
}



int bench_server_prepare(struct bench_server *s)
{
	int rc = bench_tmpdir_make("dml-bench", s->dir, sizeof(s->dir));

	if (rc)
		return rc;
	s->have_dir = 1;
	return bench_server_write_secret(s);
}

int bench_server_launch(struct bench_server *s, const char *exe)
{
	char port[PATH_MAX];
	int rc;

	/* A port file of an earlier run would make the new one look ready. */
	if (bench_server_file(s, "port", port, sizeof(port)) == 0)
		unlink(port);
	rc = bench_server_spawn(s, exe);
	return rc ? rc : bench_server_wait_port(s);
}

void bench_server_kill(struct bench_server *s)
{
	if (s->pid <= 0)
		return;
	bench_signals_child(0);
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
	s->pid = 0;
}

FILE *bench_server_conf_open(const struct bench_server *s, char *secret, char *port,
			     size_t len)
{
	char path[PATH_MAX];
	FILE *f;

	if (bench_server_file(s, "server.conf", path, sizeof(path)) ||
	    bench_server_file(s, "secret", secret, len) ||
	    bench_server_file(s, "port", port, len))
		return NULL;
	if (!(f = fopen(path, "w")))
		dml_err("%s: %s", path, strerror(errno));
	return f;
}

int bench_server_conf_close(const struct bench_server *s, FILE *f)
{
	int rc = ferror(f) ? DML_EIO : 0;

	if (fclose(f) || rc) {
		dml_err("%s/server.conf: write failed", s->dir);
		return DML_EIO;
	}
	return 0;
}
