/*
 * The job table's own declarations, shared by its files (job_table.c,
 * job_place.c, job_state.c, job_view.c, job_record.c): what the table
 * keeps about a job and a worker beyond the public structs of jobs.h, and
 * the helpers more than one of those files calls. Not for other modules:
 * they include jobs.h.
 */
#ifndef DML_SCHED_JOBS_INTERNAL_H
#define DML_SCHED_JOBS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sched/handover.h"
#include "sched/jobs.h"

#define RATE_ALPHA 0.3             /* weight of a new report in the rate average */
#define SPEED_SAMPLE_S 0.05        /* seconds of work a measure of speed spans */
#define REBALANCE_THRESHOLD 0.25   /* rebalance = auto: the default drift, */
#define REBALANCE_HOLD_MS 5000u    /* and how long it must last */
#define STALL_RETRY_HOLDS 4        /* a stalled worker tries again after this many holds */
#define STRAGGLE_CLOCKS 10         /* BSP/SSP: a wait of this many of a worker's own
				    * clocks (and the hold) is a stall, not slowness */
#define CHECK_ALWAYS_WORKERS 64    /* jobs this small look at their load at every report, */
#define CHECK_EVERY_MS 50          /* larger ones at most this often */
#define LIST_MAX 72                /* bytes of a number list inside an event line */
#define ERROR_TEXT_MAX 120         /* bytes of a worker's error text kept */
#define NO_WORKER SIZE_MAX

/* What the job table keeps about a worker beyond the public struct. */
struct worker_priv {
	int rate_measured;         /* rate is the average of its reports */
	int speed_measured;        /* speed is the average of its reports */
	/* its examples, work seconds and CPU seconds when speed was last
	 * measured */
	uint64_t mark_examples;
	double mark_work_s, mark_cpu_s;
	int last_move;             /* its batch's last change: -1, 0 (none) or 1 */
	/* min_rate: since when it has been below it (0: it is not), and since
	 * when it has been set aside as stalled (0: it is not) */
	uint64_t slow_since_ms, stalled_since_ms;
	int has_loss;              /* it reported a loss at least once */
	/* its link: bytes and seconds of its own communication when last
	 * measured, and whether link_bps averages measures */
	uint64_t mark_bytes;
	double mark_comm_s;
	int link_measured;
	uint64_t examples_raw;     /* examples in its latest report */
};

struct job_impl {
	struct dml_job job;        /* first: a struct dml_job * is a struct job_impl * */
	struct worker_priv *priv;  /* parallel to job.workers */
	size_t wcap;
	/* rebalance = auto: since when the load has drifted (0: it has not),
	 * and the assignment version that was in force then */
	uint64_t drift_since_ms;
	uint64_t drift_version;
	/* the last split weighed a live worker by its profile or a stand-in,
	 * not by what it measured in this job */
	int guessed;
	struct dml_handover ho;    /* where each partition's walk stands, and who
				    * walks it (from the first plan on) */
	uint64_t examples;         /* the workers' examples together */
	/* the partitions listed for each worker (it owns and walks them),
	 * grouped by worker from listed_at[i] to listed_at[i + 1], as of
	 * assignment version listed_version for listed_n workers */
	uint32_t *listed;
	uint64_t *listed_at;
	uint64_t listed_version;
	size_t listed_n;
	/* reports taken; the job's clock as looked up after report number
	 * clock_reports - 1 at assignment version clock_version
	 * (clock_reports 0: never looked up) */
	uint64_t reports, clock, clock_reports, clock_version;
	uint64_t checked_ms;       /* the load was last looked at (job_check_due) */
	/* node id -> worker index + 1 (0: empty), open addressing, at most
	 * half full: a report finds its worker without looking at the others */
	uint32_t *slot;
	size_t nslots;
};

struct dml_jobs {
	struct job_impl **v;
	size_t n, cap;
};

/* A list of numbers for an event line: "1, 2, 3", or "1, 2, ... and 97 more"
 * when it does not fit. */
struct num_list {
	char s[LIST_MAX];
	size_t n, shown, len;
};

static inline struct job_impl *impl(struct dml_job *job)
{
	return (struct job_impl *)job;
}

static inline const struct job_impl *impl_c(const struct dml_job *job)
{
	return (const struct job_impl *)job;
}

static inline uint64_t since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/* ---- job_table.c ------------------------------------------------------ */

void num_list_add(struct num_list *l, uint64_t v);
const char *num_list_str(struct num_list *l);
void text_set(char *dst, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void text_clean(char *dst, size_t len, const char *src);
double clamp_num(double v);
double rate_ok(double r);
int job_active(const struct dml_job *job);
size_t worker_index(const struct dml_job *job, uint32_t node_id);
size_t live_count(const struct dml_job *job);
void job_state_set(struct dml_job *job, Dml__JobState state, uint64_t now);
void job_running_reason(struct dml_job *job);
struct dml_job_worker *worker_add(struct dml_job *job, uint32_t node_id,
				  double rate, uint64_t clock);
void job_free(struct job_impl *ji);
void worker_links_set(const struct dml_job *job, struct dml_job_worker *w,
		      const Dml__LinkTraffic *lt);

/* ---- job_place.c ------------------------------------------------------ */

void job_reassign(struct dml_job *job, const char *cause, uint32_t subject,
		  struct num_list *gainers, uint64_t now);
double load_deviation(const struct dml_job *job);
uint64_t job_hold_ms(const struct dml_job *job);
int job_rebalance_auto(struct dml_job *job, uint64_t now);
void job_event_handed(struct dml_job *job, uint32_t node_id, const char *what,
		      uint64_t held, struct num_list *gainers);
void worker_set_aside(struct dml_job *job, size_t i, const char *reason,
		      const char *event, uint64_t now);
int job_stalls(struct dml_job *job, uint64_t now);

/* ---- job_state.c ------------------------------------------------------ */

uint64_t job_examples(const struct dml_job *job);
uint64_t job_data_examples(const struct dml_job *job);

/* ---- job_view.c ------------------------------------------------------- */

void checkpoint_add(struct dml_job *job, uint64_t clock, uint64_t bytes,
		    uint64_t done_ms);

#endif
