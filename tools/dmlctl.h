/*
 * dmlctl internals shared by its source files: the global options (struct
 * ctl) and exit statuses, the session with the scheduler
 * (dmlctl_session.c), the printers of its answers (dmlctl_print.c,
 * dmlctl_json.c), the argument helpers of the commands (dmlctl.c) and the
 * commands, which live in files of their own (dmlctl_submit.c,
 * dmlctl_jobs.c, dmlctl_export.c, dmlctl_ckpt.c).
 *
 * Nothing declared here is a library for other programs: these functions
 * print what went wrong themselves, to the stream they are given, and
 * return an exit status (EXIT_...) where the comment says so. None of them
 * may copy a byte a peer sent to a terminal or into JSON unescaped.
 */
#ifndef DML_DMLCTL_H
#define DML_DMLCTL_H

#include <stdint.h>
#include <stdio.h>

#include "proto/dml.pb-c.h"
#include "proto/conn.h"

/** How long one connection attempt or one answer may take. */
#define CTL_TIMEOUT_MS 5000
/** submit --wait polls the job this often. */
#define CTL_WAIT_POLL_MS 500
/** Characters of the progress bar in submit --wait's line and top. */
#define CTL_PROGRESS_BAR 20

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/** The global options, as main() parsed them. */
struct ctl {
	const char *addr;           /* scheduler as given */
	const char *addr_source;    /* "-s", "$DML_SCHEDULER" or "default" */
	char host[256];
	uint16_t port;
	const char *secret_file;
	const char *cluster;
	int json;
	int wait;                   /* submit --wait */
	int once;                   /* top --once */
	const char *curve;          /* submit --wait --curve FILE.svg; NULL: none */
};

/* ---- the session: one connection, one request at a time (dmlctl_session.c) ---- */

/**
 * One connection at a time, to the scheduler (or, for a scan, a server);
 * the fields are the session's.
 */
struct ctl_session {
	const struct ctl *ctl;
	char host[256];             /* the peer: the scheduler unless opened _at */
	uint16_t port;
	uint32_t peer_role;         /* what the peer must say it is */
	struct event_base *base;
	struct event *timer;        /* bounds the operation in progress */
	struct event *nap;          /* ctl_session_sleep */
	struct event *sigint;       /* NULL unless watching */
	uint8_t *secret;
	size_t secret_len;
	struct dml_conn_conf cc;
	struct dml_conn *conn;      /* NULL when not connected */
	uint64_t last_id;
	int answer_ms;              /* how long a request waits; 0: CTL_TIMEOUT_MS */
	/* The latest connection. */
	int ready;                  /* its handshake succeeded */
	int wrong_role;             /* the peer is some other daemon */
	int closed;                 /* on_close ran */
	int close_err;
	/* The operation in progress: connecting, one request, or a nap. */
	uint64_t want;              /* request id awaited; 0: none */
	int last_type;              /* message type of the latest request */
	Dml__Meta *reply;           /* deep copy of the answer */
	uint8_t *payload;           /* and of its payload (NULL: none) */
	size_t payload_len;
	int refused;                /* the scheduler answered with ERROR */
	int timed_out;
	int napping;
	int interrupted;            /* SIGINT while watching; sticky */
	int err;
	char detail[256];           /* the scheduler's error message */
};

/**
 * Load the secret and make the event loop; nothing is connected yet.
 * Prints why it failed to stderr; returns 0, DML_ESECRET or DML_ENOMEM.
 */
int ctl_session_open(const struct ctl *ctl, struct ctl_session *s);

/**
 * As ctl_session_open, for the daemon of the given role at address
 * (host:port), with limits that take a whole scan of a table. Prints why it
 * failed; returns 0, DML_EINVAL (a bad address), DML_ESECRET or DML_ENOMEM.
 */
int ctl_session_open_at(const struct ctl *ctl, const char *address, uint32_t role,
			struct ctl_session *s);

/** The payload of the last answer (the caller frees it); NULL when none. */
uint8_t *ctl_session_take_payload(struct ctl_session *s, size_t *len);
/** Close the connection (flushing what was sent) and free everything. */
void ctl_session_close(struct ctl_session *s);
/** From now on SIGINT ends the loop and sets s->interrupted. */
void ctl_session_watch_interrupts(struct ctl_session *s);
/**
 * Send req (type set by the caller) and wait for the answer to it, at most
 * s->answer_ms (default CTL_TIMEOUT_MS), connecting first when needed. A connection from an earlier
 * request that turns out to be broken is replaced once. On success *reply
 * is a copy to free with dml__meta__free_unpacked(). Nothing is printed:
 * ctl_session_report() says what went wrong. Returns 0 or a DML_E... code.
 */
int ctl_session_call(struct ctl_session *s, Dml__Meta *req, Dml__Meta **reply);
/** Let the loop run for ms (the connection stays served), or until SIGINT. */
void ctl_session_sleep(struct ctl_session *s, int ms);
/** The failure of the latest connect or call, as one line to out. */
void ctl_session_report(const struct ctl_session *s, FILE *out);
/**
 * ctl_session_call() expecting an answer of type want. On failure the
 * reason is printed to out and the exit status returned; EXIT_OK with
 * *reply to free.
 */
int ctl_session_ask(struct ctl_session *s, Dml__Meta *req, Dml__MsgType want,
		    Dml__Meta **reply, FILE *out);
/**
 * JOBS for one job (id) or all (0); on EXIT_OK *reply holds at least the
 * job asked for. Failures are printed to out; returns an exit status.
 */
int ctl_ask_jobs(struct ctl_session *s, uint32_t id, Dml__Meta **reply, FILE *out);
/**
 * JOB_CONTROL action for job id (clock: CHECKPOINT_DROP's), expecting its
 * ACK. Failures are printed to stderr; returns an exit status.
 */
int ctl_ask_job_control(struct ctl_session *s, uint32_t id, int action, uint64_t clock);
/** The job id in a JOBS_REPLY, or NULL. */
const Dml__JobStatus *ctl_find_job(const Dml__Meta *r, uint32_t id);

/* ---- printing (dmlctl_print.c, JSON in dmlctl_json.c) ----------------------- */

/**
 * A compact JSON writer: each call writes one member (key given) or array
 * element (key NULL), with the comma the previous one needs. Strings are
 * escaped and bytes that are not UTF-8 become U+FFFD.
 */
struct ctl_json {
	FILE *out;
	int more;                   /* the next value needs a comma first */
};

void ctl_json_open(struct ctl_json *j, const char *key, char bracket);
void ctl_json_close(struct ctl_json *j, char bracket);
void ctl_json_str(struct ctl_json *j, const char *key, const char *v);
void ctl_json_u64(struct ctl_json *j, const char *key, uint64_t v);
/** JSON has no inf or nan: they become null. */
void ctl_json_num(struct ctl_json *j, const char *key, double v);
void ctl_json_job_status(struct ctl_json *j, const char *key, const Dml__JobStatus *st);
/** The members "checkpoints" (clock, bytes, age_ms each) and "checkpoint_state". */
void ctl_json_checkpoints(struct ctl_json *j, const Dml__JobStatus *st);
void ctl_json_shard_map(struct ctl_json *j, const char *key, const Dml__ShardMap *map);

void ctl_print_nodes_json(FILE *out, const Dml__Meta *r);
void ctl_print_nodes_table(FILE *out, const Dml__Meta *r);
void ctl_print_jobs_table(FILE *out, const Dml__Meta *r);
void ctl_print_workers_table(FILE *out, const Dml__JobStatus *st, const char *indent);
/** `status JOB`: state and reason, spec, progress, workers, events. */
void ctl_print_job_detail(FILE *out, const Dml__JobStatus *st);
/** The job's end: state and reason, where it got, how long it ran. */
void ctl_print_job_end(FILE *out, const Dml__JobStatus *st);
void ctl_print_shard_map(FILE *out, const Dml__ShardMap *map, const Dml__JobSpec *sp);
/**
 * One line of a job's progress into buf: state, position (with a bar of
 * bar_width characters, 0: none), epoch, rate, loss, metric; the reason
 * while not running.
 */
void ctl_fmt_progress(const Dml__JobStatus *st, int bar_width, char *buf, size_t len);
/** A rate: "41,235" (thousands grouped) from 1000 on, else three digits. */
void ctl_fmt_rate(double v, char *buf, size_t len);
/**
 * A job's traffic and zones (dmlctl_links.c), a line each after indent:
 * the values its workers pushed and pulled within a zone and across zones,
 * as floats and as sent, with the ratio; its residual norm per table; and
 * the examples/s of each zone when a worker's node names one.
 */
void ctl_print_job_links(FILE *out, const Dml__JobStatus *st, const char *indent);

const char *ctl_action_name(int action);
/** A node's role (worker, server, ...) as a word. */
const char *ctl_role_name(uint32_t role);
/** A node's state (alive, suspect, dead) as a word. */
const char *ctl_node_state_name(uint32_t state);
/** DONE, FAILED or STOPPED. */
int ctl_job_ended(int state);
/** v once examples were trained on (a rate or a loss means nothing before), else NaN. */
double ctl_trained(uint64_t examples, double v);
/** Passes over the data so far, or NaN when the data size is unknown. */
double ctl_job_epochs(const Dml__JobStatus *st);
/**
 * How far a job is towards its nearest stop condition, 0..1, or -1 when no
 * condition says (a metric target alone).
 */
double ctl_job_fraction(const Dml__JobStatus *st);
/** What the job's evaluations measure, cleaned into buf: "accuracy", "loss" or "eval". */
const char *ctl_metric_name(const Dml__JobSpec *sp, char *buf, size_t len);
/** What a peer sent, made harmless for a terminal, into buf (truncated). */
const char *ctl_clean(const char *s, char *buf, size_t len);

/* ---- commands (dmlctl.c and the files named above) ----------------------------- */

/** A job id argument; prints the usage error. EXIT_OK or EXIT_USAGE. */
int ctl_parse_job_id(const char *cmd, const char *s, uint32_t *id);
/** Prints the error for an extra argument; returns EXIT_USAGE. */
int ctl_too_many(const char *cmd, const char *arg);

/**
 * dmlctl submit JOB.conf [--wait [--curve FILE.svg]] (dmlctl_submit.c).
 * Returns an exit status.
 */
int ctl_cmd_submit(struct ctl *ctl, int argc, char **argv);

/*
 * The job commands (dmlctl_jobs.c); each returns an exit status. status
 * [JOB]: the jobs, or one in detail; stop, pause, resume and rebalance JOB;
 * shardmap [JOB]: which server holds which keys; top [--once]: the live view.
 */
int ctl_cmd_status(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_stop(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_pause(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_resume(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_rebalance(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_shardmap(struct ctl *ctl, int argc, char **argv);
int ctl_cmd_top(struct ctl *ctl, int argc, char **argv);

/**
 * dmlctl export JOB FILE: the job's tables, pulled from its servers, into a
 * model file (worker/model_file.h). Returns an exit status.
 */
int ctl_cmd_export(struct ctl *ctl, int argc, char **argv);

/** dmlctl checkpoint JOB [delete CLOCK] (dmlctl_ckpt.c). Returns an exit status. */
int ctl_cmd_checkpoint(struct ctl *ctl, int argc, char **argv);
/** dmlctl checkpoints JOB: the job's checkpoints. Returns an exit status. */
int ctl_cmd_checkpoints(struct ctl *ctl, int argc, char **argv);

#endif
