/*
 * harness.h - loopback cluster harness for integration tests.
 *
 * A test makes one environment (a private temporary directory holding a
 * 0600 cluster secret, configs, port files and one log per process), starts
 * real dml-server and dml-sched processes on 127.0.0.1 with kernel-chosen
 * ports, drives them through libdml, raw sockets, a fault-injecting proxy or
 * programs such as dmlctl whose output it captures, and stops them, checking
 * how they exit. Everything a test starts dies with it:
 * children get SIGKILL when the test process dies. A test that ends before
 * dml_test_env_free() has failed: an atexit handler (after exit()) or a
 * guardian process (after the _exit() or SIGKILL with which Check ends
 * failed and timed-out tests) prints every log and removes the directory.
 *
 * Only the process that made an environment cleans it up, so forked worker
 * children may use it freely; they must leave with _exit().
 *
 * The harness never decides that a test failed: functions return 0 or a
 * negative DML_E... code (after printing what went wrong) and the test
 * asserts on that.
 */
#ifndef DML_TEST_HARNESS_H
#define DML_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "worker/dml.h"

/** Default time a server gets to write its port file or to exit. */
#define DML_TEST_START_TIMEOUT_MS 15000
#define DML_TEST_STOP_TIMEOUT_MS 10000

struct dml_test_env;
struct dml_test_server;

/** What goes into a generated dml-server config. Zeroed fields get defaults. */
struct dml_test_server_conf {
	uint32_t node_id;        /* 0: 1 + shard_index */
	uint32_t shard_index;    /* "shard = index/count" */
	uint32_t shard_count;    /* 0: 1 */
	int64_t staleness;       /* the [job] bound: 0 BSP, -1 async */
	uint32_t workers;        /* [job] workers */
	uint32_t dead_after_ms;  /* [job] dead_after_ms; 0: the server's default */
	const char *cluster;     /* NULL: "dml" */
	const char *log_level;   /* NULL: "info" */
	const char *secret_file; /* NULL: the environment's secret */
	const char *tables;      /* one or more [table] sections, as config text */
	const char *extra;       /* appended verbatim (e.g. a [limits] section) */
	const char *server_extra; /* appended to [server] (e.g. metrics_listen) */
	const char *job_extra;   /* appended to [job] (e.g. stale_scaling) */
};

/**
 * Make an environment: a fresh mkdtemp directory under $TMPDIR (or P_tmpdir)
 * with a random secret file of mode 0600, and its cleanup at exit.
 * Returns 0 or DML_EIO.
 */
int dml_test_env_new(struct dml_test_env **out);

/**
 * Kill every process still running (SIGKILL), free all servers and remove
 * the directory. NULL is fine. Call it at the end of a test that passed.
 */
void dml_test_env_free(struct dml_test_env *env);

/** The environment's directory and secret file; live until env_free. */
const char *dml_test_env_dir(const struct dml_test_env *env);
const char *dml_test_env_secret(const struct dml_test_env *env);

/**
 * Write text to the file `name` inside the directory with the given mode.
 * *path (optional) gets a malloc'ed copy of the full path. 0 or DML_EIO.
 */
int dml_test_env_write(struct dml_test_env *env, const char *name, const char *text,
		       unsigned mode, char **path);

/**
 * The path of a built program, relative to $DML_BUILDDIR (or "." when it is
 * unset), e.g. "server/dml-server". *path is malloc'ed.
 */
void dml_test_bin(const char *rel, char **path);

/**
 * Render a server config for conf (listen on port 0, port_file, the
 * environment's secret). *text is malloc'ed; *port_file (optional) gets the
 * malloc'ed port file path the config names.
 */
void dml_test_server_conf_text(struct dml_test_env *env,
			       const struct dml_test_server_conf *conf, char **text,
			       char **port_file);

/**
 * Write a config for conf, start dml-server on it with stderr to its own log
 * file, and wait for the port file (DML_TEST_START_TIMEOUT_MS). On failure
 * the log tail is printed and the process killed. The server is owned by the
 * environment. Returns 0, DML_EIO (could not start, or exited early) or
 * DML_ETIMEDOUT.
 */
int dml_test_server_start(struct dml_test_env *env,
			  const struct dml_test_server_conf *conf,
			  struct dml_test_server **out);

/**
 * dml_test_server_start() with conf's server_extra replaced by extra (NULL:
 * none) and a metrics endpoint on 127.0.0.1, its port to *metrics_port.
 */
int dml_test_server_start_metered(struct dml_test_env *env,
				  const struct dml_test_server_conf *conf, const char *extra,
				  struct dml_test_server **out, uint16_t *metrics_port);

/** Port the server listens on. */
uint16_t dml_test_server_port(const struct dml_test_server *s);
/** Path of the server's log file. */
const char *dml_test_server_log(const struct dml_test_server *s);
/** The process id while it runs (to read /proc), else 0. */
pid_t dml_test_server_pid(const struct dml_test_server *s);
/** 1 while the process is running, 0 once it exited (it is reaped). */
int dml_test_server_alive(struct dml_test_server *s);
/** Print the last part of the server's log to stderr. */
void dml_test_server_print_log(const struct dml_test_server *s);

/**
 * SIGTERM the server and wait up to timeout_ms for it to exit. Returns 0 if
 * it exited with status 0; otherwise prints its log and returns DML_EIO (bad
 * status) or DML_ETIMEDOUT (after SIGKILL).
 */
int dml_test_server_stop(struct dml_test_server *s, int timeout_ms);

/** SIGKILL the server and reap it. */
void dml_test_server_kill(struct dml_test_server *s);

/** Current size of the server's log, as a starting point for log_wait. */
size_t dml_test_server_log_size(const struct dml_test_server *s);

/**
 * Wait up to timeout_ms for the server's log, from byte `from` on, to
 * contain one of the NULL-terminated needles. Returns the index of the
 * first needle found, or -1 (and prints the log) on timeout.
 */
int dml_test_server_log_wait(const struct dml_test_server *s, size_t from,
			     const char *const *needles, int timeout_ms);

/**
 * Start a program (argv[0] is its path) with stdout and stderr appended to
 * the file `log_name` in the directory. The process dies with the test.
 * Returns 0 or DML_EIO.
 */
int dml_test_proc_spawn(struct dml_test_env *env, char *const argv[],
			const char *log_name, pid_t *pid);

/**
 * Wait up to timeout_ms for a process from dml_test_proc_spawn() and give
 * its waitpid status. On timeout it is killed and DML_ETIMEDOUT returned.
 */
int dml_test_proc_wait(struct dml_test_env *env, pid_t pid, int timeout_ms, int *status);

/**
 * fork() a worker child that dies with the test and is killed by the
 * cleanup. Returns 0 in both processes (*pid is 0 in the child, which must
 * leave with _exit()) or DML_EIO.
 */
int dml_test_fork(struct dml_test_env *env, pid_t *pid);

/** Read a whole file into a malloc'ed NUL-terminated string. 0 or DML_EIO. */
int dml_test_file_read(const char *path, char **text);

/** Connect a plain TCP socket to 127.0.0.1:port. 0 or DML_ECONN. */
int dml_test_raw_connect(uint16_t port, int *fd);

/**
 * A listening TCP socket on 127.0.0.1 with a kernel-chosen port (to
 * *port), for a test that plays a server itself. The fd, or -1.
 */
int dml_test_raw_listen(uint16_t *port);

/** Send all of buf (a peer that already closed is not an error). 0 or DML_EIO. */
int dml_test_raw_send(int fd, const void *buf, size_t len);

/**
 * Read one whole frame (header, metadata and payload, as the header says)
 * and discard it, e.g. the CHALLENGE a server sends first. Returns 0,
 * DML_ECONN (closed first), DML_ETIMEDOUT or the header's decoding error.
 */
int dml_test_raw_skip_frame(int fd, int timeout_ms);

/**
 * Read and discard until the peer closes (or resets) the connection.
 * Returns 0 once it did, DML_ETIMEDOUT if it stays open for timeout_ms.
 */
int dml_test_raw_wait_closed(int fd, int timeout_ms);

/**
 * Client options for the given servers (in shard order), this environment's
 * secret and cluster "dml". worker_id 0 makes a control client (role
 * "control"), otherwise a worker. The caller may set more options and frees
 * them with dml_opts_free(). Returns 0 or the dml_opts_set() error.
 */
int dml_test_client_opts(struct dml_test_env *env, struct dml_test_server *const *servers,
			 size_t n, uint32_t worker_id, dml_opts_t **out);

/** dml_test_client_opts() then dml_connect(); returns dml_connect's code. */
int dml_test_client_new(struct dml_test_env *env, struct dml_test_server *const *servers,
			size_t n, uint32_t worker_id, dml_t **out);

/** dml_test_client_opts() for servers given by port (e.g. proxies). */
int dml_test_client_opts_ports(struct dml_test_env *env, const uint16_t *ports, size_t n,
			       uint32_t worker_id, dml_opts_t **out);

/*
 * A fault-injecting TCP proxy in front of one server, run by a child
 * process: clients connect to its port, it relays bytes both ways. Owned by
 * the environment.
 */
struct dml_test_proxy;

/** Start a proxy to 127.0.0.1:target_port. 0 or DML_EIO. */
int dml_test_proxy_start(struct dml_test_env *env, uint16_t target_port,
			 struct dml_test_proxy **out);

/** The port clients should connect to. */
uint16_t dml_test_proxy_port(const struct dml_test_proxy *p);

/**
 * Stop passing bytes from the server to clients: replies wait inside the
 * proxy (requests still go through). Returns once the proxy obeys.
 */
int dml_test_proxy_hold(struct dml_test_proxy *p);

/** Pass bytes from the server to clients again, what was held first. */
int dml_test_proxy_pass(struct dml_test_proxy *p);

/**
 * Reset (RST) every connection through the proxy, both sides; whatever the
 * server sent that a client did not get yet is lost, as in a network
 * failure. New connections are relayed normally again. *count (optional)
 * gets how many connections were cut. 0 or DML_EIO.
 */
int dml_test_proxy_cut(struct dml_test_proxy *p, int *count);

/** Read a port file a server wrote (decimal and a newline). 0 or DML_EIO. */
int dml_test_port_file_read(const char *path, uint16_t *port);

/**
 * One HTTP/1.0 request over a plain socket to 127.0.0.1:port, e.g.
 * ("GET", "/metrics"), reading the reply until the server closes. *status
 * gets the status code; *body (optional) the body, malloc'ed and
 * NUL-terminated. Returns 0, DML_ECONN, DML_ETIMEDOUT or DML_EINVAL (the
 * reply is not HTTP).
 */
int dml_test_http_request(uint16_t port, const char *method, const char *path,
			  int timeout_ms, int *status, char **body);

/**
 * The value of an unlabelled metric on the metrics page at port, into
 * *value. 0, DML_ENOTFOUND (no such line), DML_EIO (a status but 200) or
 * what dml_test_http_request returns.
 */
int dml_test_metric(uint16_t port, const char *name, int timeout_ms, double *value);

/** What goes into a generated dml-aggregator config. */
struct dml_test_agg_conf {
	uint32_t node_id;        /* 0: 1 */
	const char *servers;     /* the owners, "127.0.0.1:PORT,..." (required) */
	const char *log_level;   /* NULL: "info" */
	const char *agg_extra;   /* appended to [aggregator] (e.g. window_ms) */
	const char *extra;       /* appended verbatim (e.g. a [limits] section) */
};

/**
 * Write a config ([aggregator] on 127.0.0.1 port 0, port_file, cluster
 * "dml", the environment's secret), start server/dml-aggregator on it and
 * wait for its port file, as dml_test_server_start() does; the handle works
 * with every dml_test_server_ function. Returns 0, DML_EIO or
 * DML_ETIMEDOUT.
 */
int dml_test_aggregator_start(struct dml_test_env *env, const struct dml_test_agg_conf *conf,
			      struct dml_test_server **out);

/* ---- dml-sched, restarts and dmlctl ------------------------------------- */

/** Most a dmlctl run may take (it gives up by itself after 5 s). */
#define DML_TEST_DMLCTL_TIMEOUT_MS 15000

/** What goes into a generated dml-sched config. Zeroed fields get defaults. */
struct dml_test_sched_conf {
	uint16_t port;                  /* 0: a kernel-chosen port */
	uint32_t heartbeat_interval_ms; /* 0: the scheduler's default */
	uint32_t suspect_after_ms;      /* 0: the scheduler's default */
	uint32_t dead_after_ms;         /* 0: the scheduler's default */
	const char *log_level;          /* NULL: "info" */
	const char *secret_file;        /* NULL: the environment's secret */
	const char *extra;              /* appended verbatim (e.g. a [limits] section) */
};

/**
 * Write a config ([sched] on 127.0.0.1, port_file, cluster "dml", the
 * environment's secret), start sched/dml-sched on it and wait for its port
 * file, as dml_test_server_start() does. The scheduler is handled like a
 * server: dml_test_server_port(), _log(), _alive(), _stop(), _kill(),
 * _log_wait() and _restart() work on the handle, which the environment owns.
 * Returns 0, DML_EIO or DML_ETIMEDOUT.
 */
int dml_test_sched_start(struct dml_test_env *env, const struct dml_test_sched_conf *conf,
			 struct dml_test_server **out);

/**
 * Start a daemon that was stopped or killed again, on the same config file,
 * appending to the same log, and wait for its new port file. One that
 * listens on port 0 gets a new port. Returns 0, DML_EIO (still running, or
 * could not start) or DML_ETIMEDOUT.
 */
int dml_test_server_restart(struct dml_test_server *s);

/**
 * Make a started server listen on the port it has now in every restart:
 * its config's "listen = 127.0.0.1:0" becomes that port, so clients that
 * knew it find it again. Returns 0 or DML_EIO.
 */
int dml_test_server_pin_port(struct dml_test_server *s);

/**
 * Send sig to a running daemon (SIGSTOP and SIGCONT to pause and resume it).
 * Returns 0, or DML_EIO when it is not running.
 */
int dml_test_server_signal(struct dml_test_server *s, int sig);

/**
 * "scheduler = 127.0.0.1:PORT\n" for a started scheduler, to put in a
 * server's server_extra. malloc'ed.
 */
char *dml_test_scheduler_line(const struct dml_test_server *sched);

/** What a program printed and how it ended. */
struct dml_test_output {
	char *out;   /* stdout, NUL-terminated, malloc'ed */
	char *err;   /* stderr, NUL-terminated, malloc'ed */
	int status;  /* exit status, or -1 if it did not exit normally */
};

/**
 * Run a program (argv[0] is its path) to its end with stdout and stderr
 * captured apart, waiting at most timeout_ms (then it is killed). res is
 * always filled (empty strings for what could not be read); release it with
 * dml_test_output_free(). Returns 0, DML_EIO (could not start) or
 * DML_ETIMEDOUT.
 */
int dml_test_run(struct dml_test_env *env, char *const argv[], int timeout_ms,
		 struct dml_test_output *res);

/** Free what dml_test_run() filled in; safe twice. */
void dml_test_output_free(struct dml_test_output *res);

/**
 * Run tools/dmlctl -s 127.0.0.1:sched_port --secret FILE, then args
 * (NULL-terminated, e.g. {"--json", "nodes", NULL}), with dml_test_run()
 * and DML_TEST_DMLCTL_TIMEOUT_MS. secret_file NULL: the environment's.
 */
int dml_test_dmlctl(struct dml_test_env *env, uint16_t sched_port, const char *secret_file,
		    const char *const *args, struct dml_test_output *res);

#endif
