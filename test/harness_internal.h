/*
 * harness_internal.h - what the files of the test harness share (harness.c:
 * environments and processes; harness_daemon.c; harness_net.c): the
 * harness's structs and its small helpers. Tests include harness.h only.
 */
#ifndef DML_TEST_HARNESS_INTERNAL_H
#define DML_TEST_HARNESS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "test/harness.h"

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

/* A string built as by printf; never NULL (allocation failure is fatal). */
char *harness_str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sleeps ms milliseconds, resuming after signals. */
void harness_sleep_ms(int ms);

/* Milliseconds until deadline_ns (dml_now_ns() clock), 0 once past it. */
int64_t harness_ms_left(uint64_t deadline_ns);

/* The dml_now_ns() time timeout_ms from now. */
uint64_t harness_deadline_after(int timeout_ms);

/* Drops pid from env's children not yet reaped. */
void harness_procs_forget(struct dml_test_env *env, pid_t pid);

/* Wait for pid up to timeout_ms. 1 and *status when it exited, 0 if it is
 * still running. */
int harness_reap_within(pid_t pid, int timeout_ms, int *status);

/* SIGKILL to pid, then reaps it. */
void harness_kill_and_reap(pid_t pid);

/* How a child ended, for messages: "exit status 1", "killed by signal 9"... */
void harness_describe_status(int status, char *buf, size_t len);

/* Prints the end of the file at path to stderr under title. */
void harness_print_file_tail(const char *title, const char *path);

/* Writes text to the file at path (created or truncated) with exactly the
 * given mode: 0 or DML_EIO. */
int harness_write_file(const char *path, const char *text, unsigned mode);

/*
 * Start argv with stdout appended to out_path and stderr to err_path (the
 * same file when they are equal). The child dies with the test.
 */
int harness_spawn_to(struct dml_test_env *env, char *const argv[], const char *out_path,
		     const char *err_path, pid_t *pid);

/* The port, once the server wrote its port file completely. */
int harness_read_port(const char *path, uint16_t *port);

#endif /* DML_TEST_HARNESS_INTERNAL_H */
