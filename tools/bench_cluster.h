/*
 * dml-bench's local cluster, shared by the subcommands that train on one
 * (train in bench_train.c, sparse in bench_sparse.c, and hetero and zones
 * through bench_train_cluster_run()): helper programs run to their end
 * with their output kept, values read from `dmlctl --json` answers, the
 * build and source trees, the workers' thread count, and a cluster of
 * tools/dml-local in a private directory (its workers under CPU quotas or
 * over zones, if asked): up, one job submitted and polled, the zone
 * links' byte counts, then stopped and taken down.
 *
 * Must never leave a cluster running or its directory behind: whoever
 * calls bench_cluster_up() calls bench_cluster_down() on every path,
 * errors and interruptions (bench_interrupted()) included. Nothing here
 * installs signal handlers (bench_cmd_begin() does).
 */
#ifndef DML_BENCH_CLUSTER_H
#define DML_BENCH_CLUSTER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/*
 * How often a watch asks `dmlctl status`. Each dmlctl run costs a process
 * start and a handshake: with five a second, copying and polling took 7%
 * of a core from a 2-core cluster, with two 3%. Workers report to the
 * scheduler every 200 ms.
 */
#define BENCH_CLUSTER_POLL_MS 500
/* How long a submitted job may take to start training. */
#define BENCH_CLUSTER_START_S 60
/* Output of a helper program kept for its error message or its JSON. */
#define BENCH_CLUSTER_OUT_MAX (64u << 10)

/**
 * Run argv[0] (a path) to its end, its stdout and stderr together into out
 * (NUL-terminated; what does not fit in len - 1 bytes is dropped). Returns
 * 0 when it exited 0, DML_EIO otherwise (*why says how it ended).
 */
int bench_exec(const char *const *argv, char *out, size_t len, char *why, size_t whylen);

/** bench_exec(); on failure log the command, how it ended and its output. */
int bench_exec_logged(const char *const *argv, char *out, size_t len);

/**
 * The value of key in the outermost object of a JSON text (a number, a
 * literal, or a string without its quotes; escapes are kept as written).
 * Returns 0 or DML_ENOTFOUND.
 */
int bench_json_get(const char *json, const char *key, char *out, size_t len);

/**
 * The build tree into out: realpath(opt) when opt (--build) is given, else
 * the one this program runs from (BUILD/tools/dml-bench). Returns 0 or
 * DML_ENOTFOUND (logged).
 */
int bench_build_find(const char *opt, char *out, size_t len);

/**
 * The source tree of a build tree: abs_top_srcdir of its Makefile, or two
 * levels up for a build inside the source tree (tools/quickstart's
 * build/release). Returns 0, or DML_ENOTFOUND with out = "".
 */
int bench_src_find(const char *build, char *out, size_t len);

/**
 * threads = N of the workers' template conf/local/worker.conf of the source
 * tree src (0 there: the online cores), 1 when it says nothing.
 */
unsigned bench_cluster_worker_threads(const char *src);

/* Workers whose figures a poll keeps, the first in the job's order. */
#define BENCH_POLL_WORKERS 8

/** One worker of a status answer. */
struct bench_poll_worker {
	uint32_t id;
	int alive;
	uint64_t clock;
	double compute_s;        /* seconds computing training steps, so far */
	double wait_s, held_s;   /* seconds waiting; of them, held for others */
	double cpu_s, cores;     /* its steps' CPU seconds; the cores it may use */
	double speed;            /* examples per second of its own work (smoothed) */
	uint32_t batch;          /* examples per clock it is given */
	uint32_t partitions;
};

/** One `dmlctl --json status JOB` answer. */
struct bench_poll {
	uint64_t ns;             /* when it arrived (dml_now_ns) */
	uint64_t examples, run_ms;
	uint64_t data_examples;  /* the training set's size; 0 when not known */
	double rate;             /* the job's examples_per_s; NaN when absent */
	char state[16];
	double metric;           /* NaN when the job has evaluated nothing yet */
	uint64_t assignment;     /* the assignment version */
	struct bench_poll_worker w[BENCH_POLL_WORKERS];
	unsigned nw;
};

/** A local cluster of tools/dml-local running one job. */
struct bench_cluster {
	char run[PATH_MAX];      /* dml-local's directory, made by us */
	char dml_local[PATH_MAX], dmlctl[PATH_MAX];
	const char *cpus;        /* dml-local up --cpus LIST, or NULL; set before up */
	/* dml-local up --zones LIST --wan RATE (replacing the workers asked
	 * for), or NULL; set before up */
	const char *zones, *wan;
	int aggregators;         /* with zones: dml-local up --aggregators */
	char sched[320], secret[PATH_MAX];
	int have_run, up, ended;
	uint32_t job;            /* 0 until submitted */
	char refused[256];       /* why dmlctl submit refused the job; "" if not */
	char job_arg[16];
	struct bench_poll *polls; /* every answer, in order */
	size_t npolls;
	unsigned poll_fails;     /* status polls failed in a row */
	char *out;               /* BENCH_CLUSTER_OUT_MAX bytes of helper output */
};

/** Start k empty (nothing running); bench_cluster_free() empties it. */
void bench_cluster_init(struct bench_cluster *k);

/** Free the polls and the buffer; the cluster must be down. */
void bench_cluster_free(struct bench_cluster *k);

/**
 * Make a private directory $TMPDIR/PREFIX.XXXXXX and run `dml-local up`
 * there (src's tools/dml-local, build's binaries) with the servers and
 * workers asked for; then point DML_SCHEDULER and DML_SECRET_FILE of this
 * process at it (k->sched, k->secret). Returns 0, DML_EINVAL, DML_EIO,
 * DML_ECONN (it did not come up: logged), DML_ECONF or DML_ENOMEM.
 * bench_cluster_down() is due whatever it returns.
 */
int bench_cluster_up(struct bench_cluster *k, const char *prefix, const char *src,
		     const char *build, unsigned servers, unsigned workers);

/**
 * Change worker `worker`'s (1, 2, ...) CPU quota to cores while it runs,
 * through tools/fleet.sh's fleet_set on the cgroup dml-local up made for
 * it (k->cpus must have been set). 0 or DML_EIO (logged).
 */
int bench_cluster_set_cpus(struct bench_cluster *k, unsigned worker, const char *cores);

/**
 * `dmlctl --json submit FILE`: k->job and k->job_arg. 0 or DML_EIO (logged);
 * when the job file or the scheduler refused the job, also k->refused.
 */
int bench_cluster_submit(struct bench_cluster *k, const char *job_file);

/**
 * Whether this machine can make dml-local's links and zones (root and
 * iproute2: tools/fleet.sh's fleet_link_check, from the source tree src).
 * 0, or DML_EINVAL with why it cannot in why.
 */
int bench_cluster_links_check(const char *src, char *why, size_t len);

/**
 * The bytes the zone links of a cluster up with k->zones carried so far,
 * both ways and every link together (`dml-local links`, tc's counts).
 * 0 or DML_EIO (logged).
 */
int bench_cluster_link_bytes(struct bench_cluster *k, uint64_t *bytes);

/**
 * Ask the scheduler how the job is doing and append the answer to k->polls
 * (*out points at it until the next poll). 0 or DML_EIO (logged).
 */
int bench_cluster_poll(struct bench_cluster *k, struct bench_poll **out);

/**
 * A poll in a watch: a failure is forgiven until a few fail in a row (then
 * *out = NULL and 0). Sets k->ended once the job is in a final state;
 * DML_EIO (logged) when that state is not "done".
 */
int bench_cluster_watch_poll(struct bench_cluster *k, struct bench_poll **out);

/** Is this job state a final one (done, failed, stopped)? */
int bench_cluster_state_final(const char *state);

/**
 * Examples/s between the first poll with examples and the last one still
 * running; NaN with fewer than two such polls.
 */
double bench_cluster_rate(const struct bench_cluster *k);

/** On a failure: what each daemon logged last (before the logs go). */
void bench_cluster_log_tails(const struct bench_cluster *k);

/**
 * Stop the job unless it ended, take the cluster down, remove its directory
 * (keep: leave it and say where). Safe to call at any point, and again.
 */
void bench_cluster_down(struct bench_cluster *k, int keep);

#endif
