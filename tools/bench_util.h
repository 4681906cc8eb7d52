/*
 * dml-bench helpers that its subcommands share, pushpull
 * (bench_pushpull.c), train (bench_train.c) and the others: exit statuses,
 * usage errors and the start of a subcommand (its options are parsed by
 * the tables of bench_opt.h), interruption by signals, the machine's cores and load, paths, the
 * program's own build directory, private temporary directories, how a
 * child process ended, daemon logs shown through the logger, and libdml
 * options set from a table.
 *
 * Nothing declared here may start a process, a server or a connection: the
 * subcommands do that themselves and stop what they started.
 */
#ifndef DML_BENCH_UTIL_H
#define DML_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "worker/dml.h"

/* Exit statuses of every subcommand. */
#define BENCH_EXIT_ERROR 1
#define BENCH_EXIT_USAGE 2
#define BENCH_EXIT_INTERRUPTED 130

/**
 * SIGINT, SIGTERM and SIGHUP set the flag that bench_interrupted() (bench.h)
 * reads; a second one also sends SIGTERM to the child named by
 * bench_signals_child(). SIGPIPE is ignored.
 */
void bench_signals_install(void);

/** The child process to stop on a second signal; 0 for none. */
void bench_signals_child(pid_t pid);

/**
 * Log "CMD: bad OPT 'VALUE': WANT" and a pointer to `dml-bench CMD --help`.
 * Returns BENCH_EXIT_USAGE.
 */
int bench_usage_error(const char *cmd, const char *opt, const char *value,
		      const char *want);

/**
 * After a subcommand parsed its options into parse_rc and help: print its
 * usage to stdout for --help, or else set the log level (warnings, and one
 * level more per -v) and install the signal handlers. Returns non-zero when
 * the subcommand should end now with parse_rc as its exit status.
 */
int bench_cmd_begin(int parse_rc, int help, void (*usage)(FILE *out), int verbose);

/** The online CPU cores; 1 when unknown. */
unsigned bench_cores(void);

/** The load averages of /proc/loadavg as "1.00 0.50 0.25", or "unknown". */
void bench_loadavg(char *buf, size_t len);

/** v formatted by fmt into buf, or "-" when v is NaN (not measured). */
void bench_cell(char *buf, size_t len, const char *fmt, double v);

/**
 * A target's line of a report: "  WHAT  VALUE  PASS" when v is at most goal
 * (at_least: at least goal), FAIL when not, "not measured" when v is NaN.
 */
void bench_goal(const char *what, double v, double goal, const char *fmt, int at_least);

/** The exit status for a subcommand's result rc (0 or a DML_E... code). */
int bench_exit_status(int rc);

/** out = "DIR/NAME". Returns 0, or DML_EINVAL when it does not fit in len. */
int bench_path(char *out, size_t len, const char *dir, const char *name);

/** Cut path at its last slash: its directory. DML_ENOTFOUND at the root. */
int bench_dirname(char *path);

/**
 * The directory this program runs from, a libtool build's .libs left out
 * (there it is the build tree's tools/). Returns 0 or DML_ENOTFOUND.
 */
int bench_exe_dir(char *out, size_t len);

/**
 * Make a private directory $TMPDIR/PREFIX.XXXXXX (P_tmpdir without TMPDIR)
 * and write its name into dir. Returns 0, DML_EINVAL (the name does not fit
 * in len) or DML_EIO (logged).
 */
int bench_tmpdir_make(const char *prefix, char *dir, size_t len);

/** Remove dir and everything below it; what cannot be removed is logged. */
void bench_tmpdir_remove(const char *dir);

/** How a child ended, from waitpid()'s status: "exit status 3" and the like. */
void bench_exit_reason(int status, char *buf, size_t len);

/** Log each line of text (cut up in place) as an error, as "  | LINE". */
void bench_log_lines(char *text);

/**
 * Log the line title, then the last `max` bytes of the file at path through
 * bench_log_lines(). Nothing when the file cannot be opened.
 */
void bench_log_tail(const char *path, size_t max, const char *title);

/**
 * New libdml options set from n key/value pairs; a value libdml refuses is
 * logged. Returns 0 or dml_opts_set()'s code; *out is to be freed with
 * dml_opts_free() either way.
 */
int bench_dml_opts_new(const char *const (*kv)[2], size_t n, dml_opts_t **out);

#endif
