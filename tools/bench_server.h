/*
 * A dml-server process that a dml-bench subcommand runs for itself: a
 * private directory with a fresh secret, the config the subcommand writes
 * there (server.conf, naming the port file "port"), the process in its own
 * process group with its log in server.log, and its end: SIGTERM (SIGKILL
 * if it hangs) or, for the recovery benchmark, SIGKILL at once.
 *
 * Must never leave the process running or the directory behind once the
 * caller stopped and removed them, and never signal a pid it did not start.
 */
#ifndef DML_BENCH_SERVER_H
#define DML_BENCH_SERVER_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

struct bench_server {
	char dir[PATH_MAX];
	int have_dir;
	int durability;  /* pushpull: an enum dml_durability, or -1: no [store] */
	pid_t pid;
	uint16_t port;
	int tail_shown;  /* the log tail is printed once at most */
};

/** The dml-server to run: opt, else $DML_SERVER, else one next to this program. */
int bench_server_find(const char *opt, char *out, size_t len);

/** buf = the server's directory / name. 0 or DML_EINVAL (too long). */
int bench_server_file(const struct bench_server *s, const char *name, char *buf, size_t len);

/**
 * Open the directory's server.conf for writing, with the paths a config
 * names (len bytes each): the secret file and the port file. NULL (logged)
 * on failure.
 */
FILE *bench_server_conf_open(const struct bench_server *s, char *secret, char *port,
			     size_t len);

/** Close what bench_server_conf_open gave: 0 or DML_EIO (logged). */
int bench_server_conf_close(const struct bench_server *s, FILE *f);

/** Make the private directory and its secret file (the config's secret_file). */
int bench_server_prepare(struct bench_server *s);

/**
 * Start exe on the directory's server.conf and wait for its port file
 * (s->port). On failure the log tail is shown.
 */
int bench_server_launch(struct bench_server *s, const char *exe);

/** SIGTERM and reap the server (SIGKILL if it hangs); say if it failed. */
void bench_server_stop(struct bench_server *s);

/** SIGKILL the server and reap it: a crash. */
void bench_server_kill(struct bench_server *s);

/** Show the last lines of the server's log, once. */
void bench_server_log_tail(struct bench_server *s);

/** Remove the directory and what is in it. */
void bench_server_remove_dir(struct bench_server *s);

#endif
