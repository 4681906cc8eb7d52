/*
 * The scheduler's job table: every job submitted, its state and the reason
 * for it, which workers run it and which data partitions each holds, and
 * what they last reported.
 *
 * A pure state machine like nodes.h: no I/O, no clock, no logging. Every
 * call takes the time (ms, one monotonic clock chosen by the caller); every
 * change the caller must act on is returned (a changed assignment to send
 * to the workers, a state change to log) and described in the job's event
 * list, so tests drive it with a fake clock and the daemon does the I/O.
 *
 *   submit ---------------------------------------------------> PENDING
 *   PENDING --- start (enough workers) ------------------------> RUNNING
 *   RUNNING --- pause ----> PAUSED --- resume -----------------> RUNNING
 *   RUNNING, PAUSED --- stop condition met --------------------> DONE
 *   PENDING, RUNNING, PAUSED --- a worker reports an error, or
 *                               dml_jobs_fail -----------------> FAILED
 *   PENDING, RUNNING, PAUSED --- stop -------------------------> STOPPED
 *
 * One job is active (RUNNING or PAUSED) at a time; later submissions wait
 * as PENDING, oldest first. Data partitions go to workers in proportion to
 * their rate through shard/assign.h; when a worker is lost its partitions
 * go to the live ones, when one (re)joins it gets a share back, each time
 * moving as few partitions as possible and bumping the assignment version.
 *
 * Must never: trust a spec or a progress report (specs are checked with
 * dml_job_spec_check, numbers from reports are clamped to sane values), or
 * leave a partition of a running job unowned while a live worker exists.
 */
#ifndef DML_SCHED_JOBS_H
#define DML_SCHED_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/dml.pb-c.h"
#include "proto/job_spec.h"

#define DML_JOB_REASON_MAX 191
#define DML_JOB_EVENTS 16          /* newest events kept per job */
#define DML_JOB_PARTS_PER_WORKER 8 /* partitions per worker when the spec says 0 */
#define DML_JOB_CHECKPOINT_KEEP 3  /* checkpoints kept when the spec says 0 */

/** A registered, alive worker that could run a job. */
struct dml_job_candidate {
	uint32_t node_id;
	double rate;               /* its measured examples/s; 0 = unknown */
};

/** One worker of a job. Read-only outside the job table (job_*.c). */
struct dml_job_worker {
	uint32_t node_id;
	int live;                  /* taking part now */
	double rate;               /* profile rate, then the smoothed examples/s it
				    * reports: the weight of its partitions */
	double speed;              /* profile rate, then the smoothed examples per
				    * second of its own work (computing and its own
				    * communication): the weight of its batch and
				    * partitions when batches follow rates */
	uint32_t batch;            /* examples per clock it is given */
	uint64_t npart;            /* partitions it holds now */
	uint64_t clock;            /* from its reports */
	uint64_t examples;
	double examples_per_s, loss, compute_s, wait_s;
	double held_s;             /* of wait_s: pulls held for other workers */
	double cpu_s, cores;       /* its steps' CPU seconds; the cores it may use */
	double link_bps;           /* smoothed bytes per second of its own
				    * communication (0: not measured yet) */
	/* values it pushed and pulled, [within its zone, across zones][as
	 * floats, as sent], and per table of the spec (in the spec's order)
	 * its error-feedback residual's L2 norm: as its latest report says */
	uint64_t link_bytes[2][2];
	double residual[DML_JOB_TABLES_MAX];
	int finished;              /* reported its stop condition met */
	uint64_t last_report_ms;
	char reason[DML_JOB_REASON_MAX + 1]; /* why it last gained or lost work */
};

/** A complete job-wide checkpoint (dml.proto's Checkpoint). */
struct dml_job_checkpoint {
	uint64_t clock;
	uint64_t done_ms;
	uint64_t bytes;
};

/** One job. Read-only outside the job table (job_*.c). */
struct dml_job {
	uint32_t id;               /* 1, 2, ... in submission order */
	Dml__JobSpec *spec;        /* owned copy */
	Dml__JobState state;
	char reason[DML_JOB_REASON_MAX + 1];
	uint64_t submitted_ms, started_ms, changed_ms, finished_ms;
	uint64_t run_ms;           /* time RUNNING, up to changed_ms */
	uint64_t assignment_version; /* 0 until started */
	uint64_t num_partitions;
	uint32_t *owner;           /* num_partitions entries: index into workers[],
				    * or DML_ASSIGN_NONE */
	struct dml_job_worker *workers;
	size_t nworkers;
	uint64_t data_examples;    /* training set size, from the reports */
	double metric;             /* latest evaluation, valid if has_metric */
	int has_metric;
	char events[DML_JOB_EVENTS][DML_JOB_REASON_MAX + 1]; /* ring */
	size_t nevents;            /* events ever recorded */
	struct dml_job_checkpoint *ckpts; /* complete checkpoints, oldest first */
	size_t nckpts;
};

struct dml_jobs;

int dml_jobs_new(struct dml_jobs **out);
void dml_jobs_free(struct dml_jobs *jobs);

/**
 * Add a job as PENDING ("waiting to start"). The spec is checked (DML_EINVAL,
 * reason in err) and copied. *id gets the new id.
 */
int dml_jobs_submit(struct dml_jobs *jobs, const Dml__JobSpec *spec, uint64_t now,
		    uint32_t *id, char *err, size_t errlen);

size_t dml_jobs_count(const struct dml_jobs *jobs);
/** Jobs in submission order, i < count. */
struct dml_job *dml_jobs_at(struct dml_jobs *jobs, size_t i);
struct dml_job *dml_jobs_find(struct dml_jobs *jobs, uint32_t id);
/** The RUNNING or PAUSED job, or NULL. */
struct dml_job *dml_jobs_active(struct dml_jobs *jobs);
/** The oldest PENDING job when none is active, else NULL. */
struct dml_job *dml_jobs_next(struct dml_jobs *jobs);

/**
 * Try to start a PENDING job on the given alive workers: worker_ids must all
 * be there, or `workers` of them (lowest ids first), or all of them when the
 * spec says 0. On success the job is RUNNING with assignment version 1 and
 * partitions split by rate; returns 0. When it cannot start yet it stays
 * PENDING, its reason says what it waits for ("waiting for 3 workers, 1
 * alive"), and DML_ESTATE is returned. DML_EINVAL if not PENDING.
 */
int dml_jobs_start(struct dml_job *job, const struct dml_job_candidate *cand, size_t n,
		   uint64_t now);

/**
 * BSP/SSP: a server says its pulls waited waited_ms for this worker, at
 * clock, while it had no pull of its own waiting. A live worker whose wait
 * passes the hold and STRAGGLE_CLOCKS of its own clock time is set aside
 * as stalled (its partitions go to the others; it stays a member and
 * tries again once it reports). Returns 1 when the worker is set aside,
 * now or before (the servers must drop its clock: it holds them), 0
 * otherwise: the wait is not long enough for it, it has not made a clock
 * yet (it may be loading its data), it is not a live worker, or the job
 * is asynchronous or not running.
 */
int dml_jobs_worker_straggles(struct dml_job *job, uint32_t node_id, uint64_t clock,
			      uint64_t waited_ms, uint64_t now);

/**
 * A worker of the job died or left (reason: "no heartbeat for 812 ms"):
 * its partitions go to the live workers. Returns 1 when the assignment
 * changed (send it to every live worker), 0 when nothing changed (not a
 * live worker of this job, or the job is not active). With no live worker
 * left the partitions wait unowned and the reason says so.
 */
int dml_jobs_worker_lost(struct dml_job *job, uint32_t node_id, const char *reason,
			 uint64_t now);

/**
 * An alive worker not currently taking part in the active job: one that
 * was in it rejoins (at the job's clock, see dml_job_assignment); another
 * is recruited when the spec allows (workers = 0, or fewer live workers
 * than asked for, and not excluded by worker_ids). Either way it gets its
 * share of the partitions. Returns 1 when the assignment changed, 0 when
 * the worker is not wanted.
 */
int dml_jobs_worker_available(struct dml_job *job, const struct dml_job_candidate *c,
			      uint64_t now);

/**
 * What each worker's assignment carries from outside the job table changed
 * (dml-sched's zone aggregator routes): the assignment version is bumped,
 * so that every live worker is sent its assignment again, and why goes to
 * the job's events. Nothing else changes. A job not active is left alone.
 */
void dml_jobs_reroute(struct dml_job *job, const char *why);

/**
 * A PROGRESS report from a worker of the job. Updates its figures and the
 * job's, and applies the stop conditions: a report with an error fails the
 * job; a metric that reaches target, examples reaching max_epochs passes
 * over the data, or every live worker at max_clocks (or finished) makes it
 * DONE. Returns 1 when the job's state changed, 0 otherwise, DML_ENOTFOUND
 * when the sender is not a worker of the job.
 */
int dml_jobs_progress(struct dml_job *job, uint32_t node_id, const Dml__Progress *p,
		      uint64_t now);

/**
 * An operator's STOP, PAUSE or RESUME. Returns 0; DML_ENOTFOUND for no such
 * job; DML_ESTATE (with err "job 3 is done") when the action does not apply;
 * DML_EINVAL for an unknown action.
 */
int dml_jobs_control(struct dml_jobs *jobs, uint32_t id, int action, uint64_t now,
		     char *err, size_t errlen);

/** Fail a job that is not finished yet, with the reason. */
void dml_jobs_fail(struct dml_job *job, const char *reason, uint64_t now);

/** Set a PENDING job's reason ("installing tables on 2 servers"). */
void dml_jobs_set_reason(struct dml_job *job, const char *reason, uint64_t now);

/**
 * A job-wide checkpoint at clock is complete (bytes of rows on all
 * servers): listed, newest last; the oldest beyond the spec's
 * checkpoint_keep are forgotten (the servers drop theirs themselves), and
 * an event says so. A clock already listed is not listed twice.
 */
void dml_jobs_checkpoint_done(struct dml_job *job, uint64_t clock, uint64_t bytes,
			      uint64_t now);

/** Forget the checkpoint at clock: 0, or DML_ENOTFOUND. */
int dml_jobs_checkpoint_drop(struct dml_job *job, uint64_t clock);

/** Forget every checkpoint: job next started on the servers, which dropped them. */
void dml_jobs_checkpoints_clear(struct dml_job *job, uint32_t next);

/** The job's name as its file gave it ("" when it has none). */
const char *dml_job_name(const struct dml_job *job);

/** How many checkpoints the job keeps (its spec's checkpoint_keep, or the default). */
uint32_t dml_job_checkpoint_keep(const struct dml_job *job);

/** The worker entry for a node id, or NULL. */
struct dml_job_worker *dml_job_worker(struct dml_job *job, uint32_t node_id);

/** The slowest live worker's clock (0 before any report). */
uint64_t dml_job_clock(const struct dml_job *job);

/** 1 for DONE, FAILED and STOPPED. */
int dml_job_finished(const struct dml_job *job);

/**
 * What one worker is to do now: fills a (Dml__Assignment, already
 * initialised by the caller) with the job, version, state, batch size,
 * start_clock (the job's clock) and the partitions the worker is to walk
 * with their positions (malloc'ed: dml_job_assignment_clear frees them). A
 * partition planned for it that another live worker still walks is left
 * out until that one lets go of it (handover.h). A worker that is not a
 * live member gets an empty list and the job's state.
 */
void dml_job_assignment(struct dml_job *job, uint32_t node_id, Dml__Assignment *a);

/** Free what dml_job_assignment allocated in a, and empty its lists. */
void dml_job_assignment_clear(Dml__Assignment *a);

/**
 * A JobStatus for JOBS_REPLY, allocated as one tree; free it with
 * dml_job_status_free. Workers' state is ALIVE for live members and DEAD
 * otherwise (the caller may refine it from the node table).
 */
Dml__JobStatus *dml_job_status(const struct dml_job *job, uint64_t now);
void dml_job_status_free(Dml__JobStatus *st);

/*
 * Saving and restoring (dml-sched's state store): a record holds what
 * restore needs to rebuild the job as it was, but times: those a restart
 * cannot carry (monotonic ms) come back as ages at the restore's now.
 */

/**
 * The job as a record (map, wire_workers and installed_version are the
 * caller's to fill). Free with dml_job_record_free, which frees nothing the
 * caller put in.
 */
Dml__JobRecord *dml_job_record(const struct dml_job *job, uint64_t now);
void dml_job_record_free(Dml__JobRecord *r);

/** Append an event line to job's history (the newest DML_JOB_EVENTS are kept). */
void dml_job_event(struct dml_job *job, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/**
 * Append the job a record describes; records must come in id order, with
 * none missing. Every field is checked (DML_EINVAL, err says what is
 * wrong; the spec as dml_job_spec_check would). Its workers' reports look
 * fresh (last_report_ms = now).
 */
int dml_jobs_restore(struct dml_jobs *jobs, const Dml__JobRecord *r, uint64_t now,
		     char *err, size_t errlen);

#endif
