/*
 * dml-sched's side of job-wide checkpoints (dml.proto's CHECKPOINT): rows
 * on every server of the active job holding every push of the clocks
 * before one clock C and none of the later ones.
 *
 * A round asks every server of the newest map to prepare: each answers
 * the lowest clock it can still cut at and from then on holds the pushes
 * of that clock and later. C is the highest answer, so no server has
 * applied a push of C or later; every server is asked to cut at C, and
 * answers once its rows are on disk, after which the job lists the
 * checkpoint (jobs.h keeps the newest checkpoint_keep, and the servers are
 * told to delete the ones it forgets). A round starts on `dmlctl checkpoint JOB`,
 * every checkpoint_every clocks of the job's slowest worker, or every
 * checkpoint_every_s seconds. A server that refuses, the map changing,
 * the job ending or ROUND_TIMEOUT_MS passing end a round as failed, with
 * the reason in the job's status; servers drop a prepare that no cut
 * follows, so pushes never stay held. An operator's request is answered
 * when a round started after it ends: one under way when it came (say a
 * periodic one, cut before it asked) does not count, and the next starts
 * as soon as that one ends.
 *
 * Must never: cut below a clock a server answered (it may have applied
 * pushes of it), list a checkpoint before every server ACKed its cut, or
 * run two rounds at once.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "sched/sched_internal.h"

#define ROUND_TIMEOUT_MS 60000
/* After a failed round the next periodic one waits this long, doubled
 * for each failure in a row up to RETRY_MAX_MS (a server without a store
 * fails every round: its log gets a line every few minutes, not seconds). */
#define RETRY_AFTER_MS 5000
#define RETRY_MAX_MS 300000

/* CHECKPOINT to one server; 0, or DML_ECONN when it is not registered. */
static int send_one(struct dml_sched *s, struct dml_job *job, struct sched_map_server *ms,
		    uint64_t clock, int drop)
{
	struct session *ss = dml_sched_owner(s, DML__ROLE__SERVER, ms->node_id);
	Dml__Meta m = DML__META__INIT;

	if (!ss)
		return DML_ECONN;
	m.type = DML__MSG_TYPE__CHECKPOINT;
	m.request_id = ++s->next_request;
	m.job = job->id;
	m.clock = clock;
	m.drop = drop;
	if (dml_sched_send(ss, &m, NULL) != 0)
		return DML_ECONN;
	if (!drop) {
		ms->ckpt_request = m.request_id;
		ms->ckpt_clock = 0;
		ms->ckpt_bytes = 0;
	}
	return 0;
}

/*
 * Ask every server of the map, also past one it cannot reach (deletes are
 * best effort); the first it could not reach is named in err.
 */
static int send_all(struct dml_sched *s, struct dml_job *job, uint64_t clock, int drop,
		    char *err, size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; i < s->act.nservers; i++) {
		if (send_one(s, job, &s->act.servers[i], clock, drop) != 0 && !rc) {
			snprintf(err, errlen, "server %" PRIu32 " is not registered",
				 s->act.servers[i].node_id);
			rc = DML_ESTATE;
		}
	}
	return rc;
}

/* Every server of the map is registered: 1; else err names one that is not. */
static int all_registered(struct dml_sched *s, char *err, size_t errlen)
{
	for (size_t i = 0; i < s->act.nservers; i++) {
		if (!dml_sched_owner(s, DML__ROLE__SERVER, s->act.servers[i].node_id)) {
			snprintf(err, errlen, "server %" PRIu32 " is not registered",
				 s->act.servers[i].node_id);
			return 0;
		}
	}
	return 1;
}

static void round_fail(struct dml_sched *s, struct dml_job *job, uint64_t now,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void serve_waiters(struct dml_sched *s, struct dml_job *job, uint64_t now);

static void round_fail(struct dml_sched *s, struct dml_job *job, uint64_t now,
		       const char *fmt, ...)
{
	struct sched_ckpt *c = &s->act.ckpt;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->failed, sizeof(c->failed), fmt, ap);
	va_end(ap);
	dml_warn("job %" PRIu32 " (%s): checkpoint failed: %s", job->id, dml_job_name(job),
		 c->failed);
	/* Servers that wrote their part delete it; one still waiting stops. */
	if (c->phase == CKPT_CUTTING) {
		char ignored[128];

		(void)send_all(s, job, c->clock, 1, ignored, sizeof(ignored));
	}
	c->phase = CKPT_IDLE;
	c->failed_ms = now;
	c->failures++;
	for (size_t i = 0; i < s->act.nservers; i++)
		s->act.servers[i].ckpt_request = 0;
	serve_waiters(s, job, now);
}

int dml_sched_ckpt_start(struct dml_sched *s, struct dml_job *job, const char *why,
			 uint64_t now, char *err, size_t errlen)
{
	struct sched_ckpt *c = &s->act.ckpt;
	int rc;

	if (job && job->state == DML__JOB_STATE__PAUSED) {
		/* Its workers stopped at clocks of their own (SSP): the clocks
		 * before the cut are complete only once they go on. */
		snprintf(err, errlen, "job %" PRIu32 " is paused: a checkpoint waits for every "
			 "worker to pass its clock; resume it first", job->id);
		return DML_ESTATE;
	}
	if (!job || s->act.job != job->id || job->state != DML__JOB_STATE__RUNNING) {
		snprintf(err, errlen, "job %" PRIu32 " is not running: only a running job takes "
			 "checkpoints", job ? job->id : 0);
		return DML_ESTATE;
	}
	if (c->phase != CKPT_IDLE) {
		snprintf(err, errlen, "job %" PRIu32 ": a checkpoint is being taken", job->id);
		return DML_ESTATE;
	}
	if (!s->act.assigned || s->act.reason[0]) {
		snprintf(err, errlen, "job %" PRIu32 ": its tables are being installed or moved",
			 job->id);
		return DML_ESTATE;
	}
	/* None is asked unless all are: a prepare holds pushes for a while. */
	if (!all_registered(s, err, errlen))
		return DML_ESTATE;
	rc = send_all(s, job, 0, 0, err, errlen);
	if (rc) {
		for (size_t i = 0; i < s->act.nservers; i++)
			s->act.servers[i].ckpt_request = 0;
		return rc;
	}
	c->phase = CKPT_PREPARING;
	c->clock = 0;
	c->started_ms = now;
	c->failed[0] = '\0';
	dml_info("job %" PRIu32 " (%s): checkpoint (%s): preparing on %zu servers", job->id,
		 dml_job_name(job), why, s->act.nservers);
	return 0;
}

/* Answer one waiter: the round that ended (c->failed says whether it did). */
static void answer(struct dml_sched *s, const struct sched_ckpt_waiter *w,
		   const struct dml_job *job)
{
	const struct sched_ckpt *c = &s->act.ckpt;
	Dml__Meta m = DML__META__INIT;

	if (c->failed[0]) {
		dml_sched_reply_error(w->ss, w->request_id, DML_ESTATE,
				      "checkpoint of job %" PRIu32 " failed: %s", job->id,
				      c->failed);
		return;
	}
	m.type = DML__MSG_TYPE__ACK;
	m.request_id = w->request_id;
	m.job = job->id;
	m.clock = c->clock;
	m.bytes = c->bytes;
	(void)dml_sched_send(w->ss, &m, NULL);
}

/* Keep the waiters keep() says to keep, in order; the others go. */
static void waiters_filter(struct dml_sched *s, int (*keep)(struct sched_ckpt_waiter *w,
							    void *arg), void *arg)
{
	size_t kept = 0;

	for (size_t i = 0; i < s->nckpt_waiters; i++)
		if (keep(&s->ckpt_waiters[i], arg))
			s->ckpt_waiters[kept++] = s->ckpt_waiters[i];
	s->nckpt_waiters = kept;
}

struct serve_arg {
	struct dml_sched *s;
	const struct dml_job *job;
	const char *not_started;   /* the queued round's failure to start, or NULL */
	int queued;
};

/* The round ended: its waiters hear how; count those queued behind it. */
static int serve_ended(struct sched_ckpt_waiter *w, void *arg)
{
	struct serve_arg *a = arg;

	if (w->job != a->job->id)
		return 1;
	if (w->next) {
		a->queued = 1;
		return 1;
	}
	answer(a->s, w, a->job);
	return 0;
}

/* The queued round started (they wait for it) or could not start (told why). */
static int serve_queued(struct sched_ckpt_waiter *w, void *arg)
{
	struct serve_arg *a = arg;

	if (w->job != a->job->id)
		return 1;
	if (!a->not_started) {
		w->next = 0;
		return 1;
	}
	dml_sched_reply_error(w->ss, w->request_id, DML_ESTATE, "checkpoint of job %" PRIu32
			      " not taken: %s", a->job->id, a->not_started);
	return 0;
}

static void serve_waiters(struct dml_sched *s, struct dml_job *job, uint64_t now)
{
	struct serve_arg a = { s, job, NULL, 0 };
	char err[DML_JOB_REASON_MAX + 1];

	waiters_filter(s, serve_ended, &a);
	if (!a.queued)
		return;
	if (dml_sched_ckpt_start(s, job, "operator", now, err, sizeof(err)) != 0)
		a.not_started = err;
	waiters_filter(s, serve_queued, &a);
}

void dml_sched_ckpt_ask(struct dml_sched *s, struct session *ss, struct dml_job *job,
			const Dml__Meta *m, uint64_t now)
{
	struct sched_ckpt_waiter *w;
	char err[DML_JOB_REASON_MAX + 1];
	int under_way = s->act.job == job->id && s->act.ckpt.phase != CKPT_IDLE &&
			job->state == DML__JOB_STATE__RUNNING;
	int rc;

	w = realloc(s->ckpt_waiters, (s->nckpt_waiters + 1) * sizeof(*w));
	if (!w) {
		dml_sched_reply_error(ss, m->request_id, DML_ENOMEM, "out of memory");
		return;
	}
	s->ckpt_waiters = w;
	w += s->nckpt_waiters;
	*w = (struct sched_ckpt_waiter){ ss, m->request_id, job->id, under_way };
	if (under_way) {
		s->nckpt_waiters++;
		dml_info("job %" PRIu32 " (%s): checkpoint (operator): starts when the one "
			 "being taken ends", job->id, dml_job_name(job));
		return;
	}
	rc = dml_sched_ckpt_start(s, job, "operator", now, err, sizeof(err));
	if (rc) {
		dml_sched_reply_error(ss, m->request_id, rc, "%s", err);
		return;
	}
	s->nckpt_waiters++;
}

static int other_session(struct sched_ckpt_waiter *w, void *arg)
{
	return w->ss != arg;
}

void dml_sched_ckpt_forget(struct dml_sched *s, struct session *ss)
{
	waiters_filter(s, other_session, ss);
}

int dml_sched_ckpt_drop(struct dml_sched *s, struct dml_job *job, uint64_t clock,
			uint64_t now, char *err, size_t errlen)
{
	if (!job || s->act.job != job->id) {
		snprintf(err, errlen, "job %" PRIu32 " is not running: its checkpoints go with its "
			 "servers' tables when the next job starts", job ? job->id : 0);
		return DML_ESTATE;
	}
	if (dml_jobs_checkpoint_drop(job, clock) != 0) {
		snprintf(err, errlen, "job %" PRIu32 " has no checkpoint at clock %" PRIu64,
			 job->id, clock);
		return DML_ENOTFOUND;
	}
	/* A server not registered now keeps its copy; nothing lists it. */
	(void)send_all(s, job, clock, 1, err, errlen);
	err[0] = '\0';
	return 0;
}

/* Every server answered the round's request: 1. */
static int all_answered(const struct dml_sched *s)
{
	for (size_t i = 0; i < s->act.nservers; i++)
		if (s->act.servers[i].ckpt_request)
			return 0;
	return 1;
}

static void cut(struct dml_sched *s, struct dml_job *job, uint64_t now)
{
	struct sched_ckpt *c = &s->act.ckpt;
	char err[128];

	c->clock = 0;
	for (size_t i = 0; i < s->act.nservers; i++)
		if (s->act.servers[i].ckpt_clock > c->clock)
			c->clock = s->act.servers[i].ckpt_clock;
	/* Cutting already: a failure tells every server to let go of it. */
	c->phase = CKPT_CUTTING;
	if (send_all(s, job, c->clock, 0, err, sizeof(err)) != 0)
		round_fail(s, job, now, "cut at clock %" PRIu64 ": %s", c->clock, err);
}

static void done(struct dml_sched *s, struct dml_job *job, uint64_t now)
{
	struct sched_ckpt *c = &s->act.ckpt;
	size_t keep = dml_job_checkpoint_keep(job), listed = 0;
	uint64_t bytes = 0;
	char ignored[128];

	for (size_t i = 0; i < s->act.nservers; i++)
		bytes += s->act.servers[i].ckpt_bytes;
	for (size_t i = 0; i < job->nckpts; i++)
		listed += job->ckpts[i].clock == c->clock;
	/* The servers forget what the job forgets: the oldest past keep. The
	 * job's list decides, so that a delete racing a round cannot leave the
	 * servers keeping other clocks than it lists. */
	for (size_t i = 0; !listed && i < job->nckpts && job->nckpts - i + 1 > keep; i++)
		(void)send_all(s, job, job->ckpts[i].clock, 1, ignored, sizeof(ignored));
	dml_jobs_checkpoint_done(job, c->clock, bytes, now);
	c->failures = 0;
	c->failed_ms = 0;
	dml_info("job %" PRIu32 " (%s): checkpoint at clock %" PRIu64 ": %.1f MB on %zu "
		 "servers in %" PRIu64 " ms", job->id, dml_job_name(job), c->clock,
		 (double)bytes / 1e6, s->act.nservers, now - c->started_ms);
	c->phase = CKPT_IDLE;
	c->bytes = bytes;
	serve_waiters(s, job, now);
}

int dml_sched_ckpt_reply(struct dml_sched *s, struct sched_map_server *ms,
			 const Dml__Meta *m, uint64_t now)
{
	struct dml_job *job = dml_jobs_find(s->jobs, s->act.job);
	struct sched_ckpt *c = &s->act.ckpt;

	if (!job || c->phase == CKPT_IDLE || !ms->ckpt_request ||
	    ms->ckpt_request != m->request_id)
		return 0;
	ms->ckpt_request = 0;
	if (m->type != DML__MSG_TYPE__ACK) {
		round_fail(s, job, now, "server %" PRIu32 ": %.120s", ms->node_id,
			   m->error && m->error->message ? m->error->message : "refused");
		return 1;
	}
	if (c->phase == CKPT_CUTTING && m->clock != c->clock) {
		round_fail(s, job, now, "server %" PRIu32 " cut at clock %" PRIu64 ", not %"
			   PRIu64, ms->node_id, m->clock, c->clock);
		return 1;
	}
	ms->ckpt_clock = m->clock;
	ms->ckpt_bytes = m->bytes;
	if (!all_answered(s))
		return 1;
	if (c->phase == CKPT_PREPARING)
		cut(s, job, now);
	else
		done(s, job, now);
	return 1;
}

void dml_sched_ckpt_abandon(struct dml_sched *s, struct dml_job *job, const char *why,
			    uint64_t now)
{
	if (job && s->act.job == job->id && s->act.ckpt.phase != CKPT_IDLE)
		round_fail(s, job, now, "%s", why);
}

static uint64_t retry_after(unsigned failures)
{
	uint64_t ms = RETRY_AFTER_MS;

	for (unsigned i = 1; i < failures && ms < RETRY_MAX_MS; i++)
		ms *= 2;
	return ms < RETRY_MAX_MS ? ms : RETRY_MAX_MS;
}

/* Why a periodic checkpoint is due ("every 100 clocks"), or NULL. */
static const char *due(const struct dml_job *job, uint64_t now, char *why, size_t len)
{
	uint64_t every = job->spec->checkpoint_every;
	uint64_t every_ms = (uint64_t)job->spec->checkpoint_every_s * 1000;
	const struct dml_job_checkpoint *last = job->nckpts ? &job->ckpts[job->nckpts - 1]
							    : NULL;

	if (every && dml_job_clock(job) >= (last ? last->clock : 0) + every) {
		snprintf(why, len, "every %" PRIu64 " clocks", every);
		return why;
	}
	if (every_ms && now >= (last ? last->done_ms : job->started_ms) + every_ms) {
		snprintf(why, len, "every %" PRIu32 " s", job->spec->checkpoint_every_s);
		return why;
	}
	return NULL;
}

void dml_sched_ckpt_tick(struct dml_sched *s, struct dml_job *job, uint64_t now)
{
	struct sched_ckpt *c = &s->act.ckpt;
	char why[64], err[DML_JOB_REASON_MAX + 1];

	if (c->phase != CKPT_IDLE) {
		if (now - c->started_ms >= ROUND_TIMEOUT_MS)
			round_fail(s, job, now, "no answer from every server within %d ms",
				   ROUND_TIMEOUT_MS);
		return;
	}
	if (job->state != DML__JOB_STATE__RUNNING ||
	    (c->failed_ms && now - c->failed_ms < retry_after(c->failures)) ||
	    !due(job, now, why, sizeof(why)))
		return;
	if (dml_sched_ckpt_start(s, job, why, now, err, sizeof(err)) != 0)
		dml_debug("job %" PRIu32 ": checkpoint not started: %s", job->id, err);
}

const char *dml_sched_ckpt_state(struct dml_sched *s, char *buf, size_t len)
{
	const struct sched_ckpt *c = &s->act.ckpt;
	size_t waiting = 0;

	for (size_t i = 0; i < s->act.nservers; i++)
		waiting += s->act.servers[i].ckpt_request != 0;
	if (c->phase == CKPT_PREPARING)
		snprintf(buf, len, "preparing: %zu of %zu servers to answer", waiting,
			 s->act.nservers);
	else if (c->phase == CKPT_CUTTING)
		snprintf(buf, len, "cutting at clock %" PRIu64 ": %zu of %zu servers writing",
			 c->clock, waiting, s->act.nservers);
	else if (c->failed[0])
		snprintf(buf, len, "failed: %s", c->failed);
	else
		buf[0] = '\0';
	return buf;
}
