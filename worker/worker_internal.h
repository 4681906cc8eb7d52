/*
 * dml-worker internals shared by its source files: the state the loop side
 * (worker.c) and the trainer thread (worker_trainer.c, worker_run.c) share
 * under one mutex, the assignment as the worker keeps it, and one job run
 * as the trainer holds it.
 */
#ifndef DML_WORKER_INTERNAL_H
#define DML_WORKER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "worker/app.h"
#include "proto/conn.h"
#include "worker/dml.h"
#include "proto/dml.pb-c.h"
#include "proto/job_spec.h"
#include "proto/sched_link.h"
#include "proto/metrics.h"
#include "worker/worker.h"

#define TICK_MS 100
/* PROGRESS at most this often, and at every REPORT_EVERY_CLOCKS-th clock. */
#define REPORT_EVERY_MS 200
#define REPORT_EVERY_CLOCKS 10
/* Reports waiting for the timer (or for the scheduler to come back). */
#define REPORT_QUEUE 16
/* examples_per_s is measured over the last second, from this many clocks. */
#define RATE_SAMPLES 64
#define RATE_WINDOW_NS UINT64_C(1000000000)
/* While paused, the trainer lets libdml answer its servers this often. */
#define PAUSE_POLL_MS 500
#define REASON_MAX 320
/* How long the last frames to the scheduler get to leave when stopping. */
#define LEAVE_FLUSH_MS 100
/* How long a stop waits for the clock boundary before it interrupts the
 * trainer's waits: a pull may wait on workers that never come. */
#define STOP_GRACE_MS 3000

/* ---- state shared by the loop and the trainer ---------------------------- */

/* One assignment, as the worker keeps it. */
struct assign {
	uint32_t job;
	uint64_t version;
	int state;                /* Dml__JobState */
	uint32_t *parts;
	uint64_t *pos;            /* parallel to parts: records of each taken in this
				   * job before (NULL: not carried) */
	size_t nparts;
	uint32_t num_partitions;
	uint64_t start_clock;
	uint32_t batch;           /* examples per clock; 0: the spec's batch_size */
	/* the zone aggregator (host:port) to route through, "" for straight to
	 * the servers (and for one too long to be a host name and a port) */
	char aggregator[262];
};

/*
 * Partitions of one job and a position of each: those the trainer walked at
 * its latest report, or those it let go of since the last report sent, with
 * where it stopped (the scheduler hands them on from there).
 */
struct part_list {
	uint32_t job;
	uint32_t *parts;
	uint64_t *pos;
	size_t n, cap;
};

struct report {
	Dml__Progress p;          /* its pointers point nowhere until it is sent */
	char error[REASON_MAX];
	Dml__LinkTraffic links;   /* p.links, its lists pointing into: */
	uint32_t res_tables[DML_JOB_TABLES_MAX];
	double res_norms[DML_JOB_TABLES_MAX];
	int final;                /* finished or failed: never replaced */
};

/* What the metrics show: the trainer's figures. */
struct status {
	uint32_t job;
	uint64_t assignment;
	uint64_t clock;
	uint64_t examples_total;  /* since the process started */
	double examples_per_s;
	double loss;
	double compute_s, wait_s; /* since the process started */
};

struct shared {
	pthread_mutex_t mu;
	pthread_cond_t cv;        /* the trainer waits on it */
	Dml__JobSpec *spec;       /* of the latest ASSIGN */
	struct assign as;
	uint64_t generation;      /* ASSIGNs that began another job; 0: none yet */
	uint64_t seq;             /* ASSIGNs stored */
	int stopping;
	uint64_t stopping_ns;     /* when stopping was asked for */
	int trainer_done;
	dml_t *active;            /* the trainer's libdml handle, for dml_interrupt */
	uint32_t running;         /* job the trainer runs now, 0 when idle */
	struct report queue[REPORT_QUEUE];
	size_t nqueue;
	struct part_list held, released; /* go with the reports of their job */
	struct status st;
};

enum metric_field {
	MF_CLOCK, MF_EXAMPLES, MF_RATE, MF_LOSS, MF_COMPUTE, MF_WAIT, MF_JOB, MF_ASSIGNMENT,
	MF_COUNT
};

struct metric_arg {
	struct dml_worker *w;
	enum metric_field field;
};

struct dml_worker {
	const struct dml_worker_conf *conf;
	struct event_base *base;
	struct dml_app_env env;
	uint8_t *secret;
	size_t secret_len;
	struct dml_conn_conf conn_conf;
	struct dml_sched_link *link;
	struct event *tick;
	struct dml_metrics *metrics;
	struct metric_arg margs[MF_COUNT];
	pthread_t trainer;
	int trainer_started;
	int left;                 /* loop side: the link was stopped */
	struct shared sh;
};

/* ---- one job run, as the trainer holds it -------------------------------- */

/* examples/s over the last second, from (time, examples) at each clock. */
struct rate {
	uint64_t t[RATE_SAMPLES];
	uint64_t ex[RATE_SAMPLES];
	size_t n;                 /* samples ever added */
};

/* How a job run ended. */
enum run_end {
	RUN_ON,                   /* not ended */
	RUN_FINISHED,             /* reached max_clocks */
	RUN_FAILED,
	RUN_ENDED,                /* the scheduler said DONE, STOPPED or FAILED */
	RUN_REPLACED,             /* another job was assigned */
	RUN_STOPPING              /* the daemon stops */
};

/* One job, as the trainer runs it; only the trainer thread touches it. */
struct run {
	struct dml_worker *w;
	Dml__JobSpec *spec;
	struct assign as;
	uint64_t generation, seq;
	const struct dml_app *app;
	void *state;
	dml_opts_t *opts;
	dml_t *d;
	struct dml_app_io io;
	uint32_t eval_every;
	uint64_t clock;
	uint64_t examples;        /* in this job */
	double loss;              /* latest step's, NaN before */
	double metric;
	int has_metric;
	uint64_t compute_ns, wait_ns;
	uint64_t held_ns;         /* of wait_ns: pulls held for other workers' clocks */
	uint64_t cpu_ns;          /* CPU time of its steps, every thread */
	uint64_t bytes;           /* its steps moved to and from the servers */
	double cores;             /* the CPU it may use (cpu_limit.h), when last read */
	uint64_t started_ns, last_report_ns;
	struct rate rate;
	int paused;
	uint64_t paused_ns;
	char err[REASON_MAX - 32];
};

/* Why a report is made: every clock, or an event that must be sent. */
enum report_kind {
	REPORT_CLOCK,             /* sent when due (time, or every 10th clock) */
	REPORT_NOW,               /* paused or ended by the scheduler */
	REPORT_FINISHED,          /* reached max_clocks */
	REPORT_FAILED             /* r->err says why */
};

/* worker.c: assignments, partition lists and the report queue. */
void assign_clear(struct assign *a);
void assign_copy(struct assign *dst, const struct assign *src);
void assign_from_msg(struct assign *dst, const Dml__Assignment *a);
int assign_has_part(const struct assign *a, uint32_t p);
int assign_same_parts(const struct assign *a, const struct assign *b);
int state_is_end(int state);
void part_list_clear(struct part_list *l);
void part_list_room(struct part_list *l, uint32_t job, size_t n);
void queue_report_locked(struct shared *sh, const struct report *r);

/* worker_run.c: one job run. */
void rate_add(struct rate *r, uint64_t now, uint64_t examples);
double seconds(uint64_t ns);
void run_fail(struct run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void run_report(struct run *r, enum report_kind kind, uint64_t step_examples,
		double step_compute, double step_wait);
void run_take_locked(struct run *r, struct dml_worker *w);
int run_open(struct run *r);
void run_close(struct run *r);
uint64_t run_examples_held(const struct run *r);
int run_follow(struct run *r, const struct assign *next);

/* worker_trainer.c: the trainer thread; arg is the struct dml_worker. */
void *trainer_main(void *arg);

#endif
