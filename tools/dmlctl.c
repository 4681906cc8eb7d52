/*
 * dmlctl: the operator's command line for a dml cluster. It talks to
 * dml-sched as a CONTROL peer (dmlctl_session.c: one connection per run
 * carrying one request and its reply at a time) and prints the answers
 * (dmlctl_print.c). The commands that watch (submit --wait, top) poll over
 * that connection and connect again when it breaks; submit --wait --curve
 * also draws the job's course as an SVG chart (curve_svg.h). export
 * (dmlctl_export.c) reads a job's tables from its servers into a model file.
 *
 * Exit status: 0 success; 1 the operation failed: the scheduler could not be
 * reached or refused the secret (the message names the address), refused the
 * request (no such job, a job already done), or the job waited for ended
 * FAILED or STOPPED; 2 bad usage, an unknown command or a bad job file; 130
 * interrupted while waiting for a job.
 *
 * Must never: wait longer than its timeout for one answer, exit 0 without
 * having printed the whole answer, or copy bytes a peer sent to the terminal
 * or into JSON without escaping them.
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "curve_svg.h"
#include "dml_error.h"
#include "dmlctl.h"
#include "job_spec.h"
#include "log.h"
#include "util.h"

#define DEFAULT_SCHEDULER "127.0.0.1:7000"
#define DEFAULT_SECRET_FILE "/etc/dml/secret"
#define DEFAULT_CLUSTER "dml"
#define WAIT_POLL_MS 500
/* submit --wait: how long the scheduler may stay unreachable before giving up. */
#define WAIT_PATIENCE_MS 15000
#define TOP_REFRESH_MS 1000
#define PROGRESS_BAR 20
/* submit --curve: at most this many points are kept; beyond, every other
 * one is dropped and the polls are sampled half as often. */
#define CURVE_MAX_POINTS 2048

/* Command options beyond the global ones, and which command takes them. */
enum { TAKES_WAIT = 1, TAKES_ONCE = 2 };

struct command {
	const char *name;
	const char *args;
	const char *help;
	int (*run)(struct ctl *ctl, int argc, char **argv);
	unsigned takes;             /* TAKES_... */
};

/* ---- commands ------------------------------------------------------------------ */

int ctl_parse_job_id(const char *cmd, const char *s, uint32_t *id)
{
	uint64_t v;

	if (dml_parse_u64(s, 1, UINT32_MAX, &v) != 0) {
		fprintf(stderr, "dmlctl: %s: '%s' is not a job id (a number that dmlctl "
			"status lists)\n", cmd, s);
		return EXIT_USAGE;
	}
	*id = (uint32_t)v;
	return EXIT_OK;
}

int ctl_too_many(const char *cmd, const char *arg)
{
	fprintf(stderr, "dmlctl: %s: unexpected argument '%s' (dmlctl --help)\n", cmd, arg);
	return EXIT_USAGE;
}

static int cmd_nodes(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	struct ctl_session s;
	int rc;

	if (argc > 0) {
		fprintf(stderr, "dmlctl: nodes takes no arguments (got '%s')\n", argv[0]);
		return EXIT_USAGE;
	}
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	req.type = DML__MSG_TYPE__NODES;
	rc = ctl_session_ask(&s, &req, DML__MSG_TYPE__NODES_REPLY, &reply, stderr);
	if (rc == EXIT_OK) {
		if (ctl->json)
			ctl_print_nodes_json(stdout, reply);
		else
			ctl_print_nodes_table(stdout, reply);
		dml__meta__free_unpacked(reply, NULL);
	}
	ctl_session_close(&s);
	return rc;
}

/* ---- submit --wait --curve ------------------------------------------------------ */

/* Where the job was at one poll; NaN where nothing is known. */
struct curve_point {
	double seconds, examples, epoch, loss, metric;
};

/* The job's course as submit --wait saw it, and what the chart's text needs. */
struct curve_log {
	struct curve_point *p;
	size_t n;
	unsigned stride;            /* record every stride-th change */
	unsigned changes;           /* changes seen */
	struct curve_point last;    /* the latest poll's, recorded or not */
	int have_last;
	uint32_t id;
	int epochs_known, metric_seen;
	char name[64], app[64], metric[64];
};

static int same_point(const struct curve_point *a, const struct curve_point *b)
{
	/* NaN == NaN here: "still no metric" is no change. */
	return a->examples == b->examples &&
	       (a->metric == b->metric || (isnan(a->metric) && isnan(b->metric))) &&
	       (a->loss == b->loss || (isnan(a->loss) && isnan(b->loss)));
}

static void curve_append(struct curve_log *log, const struct curve_point *pt)
{
	if (log->n == CURVE_MAX_POINTS) {
		size_t k = 0;

		for (size_t i = 0; i < log->n; i += 2)
			log->p[k++] = log->p[i];
		log->n = k;
		log->stride *= 2;
	}
	log->p[log->n++] = *pt;
}

/* Record one poll's status: a point when it changed (sampled by stride). */
static void curve_note(struct curve_log *log, const Dml__JobStatus *st)
{
	struct curve_point pt;

	if (!log->p) {
		/* One more than the limit, for the final point. */
		log->p = dml_xcalloc(CURVE_MAX_POINTS + 1, sizeof(*log->p));
		log->stride = 1;
	}
	pt.seconds = (double)st->run_ms / 1000.0;
	pt.examples = (double)st->examples;
	pt.epoch = ctl_job_epochs(st);
	pt.loss = ctl_trained(st->examples, st->loss);
	pt.metric = st->has_metric ? st->metric : NAN;
	log->id = st->id;
	log->epochs_known = isfinite(pt.epoch);
	log->metric_seen |= st->has_metric;
	ctl_clean(st->name, log->name, sizeof(log->name));
	ctl_clean(st->spec ? st->spec->app : "", log->app, sizeof(log->app));
	ctl_metric_name(st->spec, log->metric, sizeof(log->metric));
	if (log->have_last && same_point(&pt, &log->last))
		return;
	log->last = pt;
	log->have_last = 1;
	if (log->changes++ % log->stride == 0)
		curve_append(log, &pt);
}

/* The latest poll's point, when thinning left it out: the chart ends there. */
static void curve_finish(struct curve_log *log)
{
	if (log->have_last && (log->n == 0 || !same_point(&log->p[log->n - 1], &log->last)))
		log->p[log->n++] = log->last;
}

/* Loss on the left, the metric on the right, against epochs when the data
 * size is known, else examples, else run time. Returns an exit status. */
static int curve_write(const struct ctl *ctl, struct curve_log *log)
{
	struct dml_curve_series series[2] = { { .name = "loss", .axis = DML_CURVE_LEFT },
					      { .name = log->metric,
						.axis = DML_CURVE_RIGHT } };
	struct dml_curve c = { 0 };
	char title[192], err[512];
	int by_examples, rc;

	curve_finish(log);
	by_examples = log->n && log->p[log->n - 1].examples > 0;
	for (size_t i = 0; i < log->n; i++) {
		const struct curve_point *pt = &log->p[i];
		double x = log->epochs_known ? pt->epoch
			   : by_examples ? pt->examples : pt->seconds;

		dml_curve_series_add(&series[0], x, pt->loss);
		if (log->metric_seen)
			dml_curve_series_add(&series[1], x, pt->metric);
	}
	snprintf(title, sizeof(title), "job %u: %s (%s)", log->id, log->name, log->app);
	c.title = log->n ? title : "no status of the job was received";
	c.x.label = log->epochs_known ? "epoch" : by_examples ? "examples" : "run time (s)";
	c.y[DML_CURVE_LEFT].label = "training loss";
	c.y[DML_CURVE_RIGHT].label = log->metric;
	if (strcmp(log->metric, "accuracy") == 0) {
		c.y[DML_CURVE_RIGHT].fixed = 1;
		c.y[DML_CURVE_RIGHT].max = 1;
	}
	c.series = series;
	c.nseries = log->metric_seen ? 2 : 1;
	rc = dml_curve_svg_write(ctl->curve, &c, err, sizeof(err));
	if (rc)
		fprintf(stderr, "dmlctl: cannot write the training curve: %s\n", err);
	else if (!ctl->json)
		printf("training curve: %s (%zu point%s)\n", ctl->curve, log->n,
		       log->n == 1 ? "" : "s");
	dml_curve_series_destroy(&series[0]);
	dml_curve_series_destroy(&series[1]);
	free(log->p);
	log->p = NULL;
	return rc ? EXIT_FAIL : EXIT_OK;
}

static int terminal_width(void)
{
	struct winsize ws;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
		return ws.ws_col;
	return 80;
}

/*
 * Poll the job every WAIT_POLL_MS until it ends. On a terminal one progress
 * line is redrawn in place; otherwise a line is printed whenever the state
 * or the tenth of the way changes (the whole epoch, for a job whose only
 * limit is a metric target). Each status goes to log (NULL: none). The exit
 * status follows the end state.
 */
static int follow_job(struct ctl_session *s, uint32_t id, struct curve_log *log)
{
	const struct ctl *ctl = s->ctl;
	int tty = !ctl->json && isatty(STDOUT_FILENO);
	int last_state = -1, last_step = -2, rc;
	uint64_t last_ok = dml_now_ns() / 1000000;
	char line[512];

	ctl_session_watch_interrupts(s);
	for (;;) {
		Dml__Meta req = DML__META__INIT, *reply = NULL;
		const Dml__JobStatus *st;
		uint64_t now;

		req.type = DML__MSG_TYPE__JOBS;
		req.job = id;
		rc = ctl_session_call(s, &req, &reply);
		now = dml_now_ns() / 1000000;
		if (s->interrupted) {
			if (reply)
				dml__meta__free_unpacked(reply, NULL);
			break;
		}
		if (rc != 0 && !s->refused) {
			/* The scheduler may be restarting: give it a while. */
			if (now - last_ok > WAIT_PATIENCE_MS) {
				if (tty)
					fputc('\n', stdout);
				fflush(stdout);
				ctl_session_report(s, stderr);
				return EXIT_FAIL;
			}
			ctl_session_sleep(s, WAIT_POLL_MS);
			if (s->interrupted)
				break;
			continue;
		}
		if (rc != 0 || reply->type != DML__MSG_TYPE__JOBS_REPLY ||
		    !(st = ctl_find_job(reply, id))) {
			if (tty)
				fputc('\n', stdout);
			fflush(stdout);
			if (rc != 0)
				ctl_session_report(s, stderr);
			else if (reply->type != DML__MSG_TYPE__JOBS_REPLY)
				fprintf(stderr, "dmlctl: the scheduler at %s answered "
					"jobs with a %s frame\n", ctl->addr,
					dml_msg_type_name((int)reply->type));
			else
				fprintf(stderr, "dmlctl: no job %u (the scheduler "
					"forgot it: restarted?)\n", id);
			if (reply)
				dml__meta__free_unpacked(reply, NULL);
			return EXIT_FAIL;
		}
		last_ok = now;
		if (log)
			curve_note(log, st);
		if (ctl_job_ended(st->state)) {
			if (ctl->json) {
				struct ctl_json j = { stdout, 0 };

				ctl_json_open(&j, NULL, '{');
				ctl_json_u64(&j, "job", id);
				ctl_json_job_status(&j, "status", st);
				ctl_json_close(&j, '}');
				fputc('\n', stdout);
			} else {
				if (tty)
					fputs("\r\033[K", stdout);
				ctl_print_job_end(stdout, st);
			}
			rc = st->state == DML__JOB_STATE__DONE ? EXIT_OK : EXIT_FAIL;
			dml__meta__free_unpacked(reply, NULL);
			return rc;
		}
		if (tty) {
			int width = terminal_width();

			ctl_fmt_progress(st, PROGRESS_BAR, line, sizeof(line));
			if ((int)strlen(line) >= width)
				line[width - 1] = '\0';
			printf("\r%s\033[K", line);
			fflush(stdout);
		} else if (!ctl->json) {
			double f = ctl_job_fraction(st), e = ctl_job_epochs(st);
			int step = f >= 0 ? (int)(f * 10) : isfinite(e) ? (int)fmin(e, 1e9) : -1;

			if ((int)st->state != last_state || step != last_step) {
				ctl_fmt_progress(st, 0, line, sizeof(line));
				printf("%s\n", line);
				fflush(stdout);
			}
			last_state = (int)st->state;
			last_step = step;
		}
		dml__meta__free_unpacked(reply, NULL);
		ctl_session_sleep(s, WAIT_POLL_MS);
		if (s->interrupted)
			break;
	}
	if (tty)
		fputc('\n', stdout);
	fflush(stdout);
	fprintf(stderr, "dmlctl: stopped waiting; job %u goes on (dmlctl stop %u "
		"stops it)\n", id, id);
	return EXIT_INTERRUPTED;
}

/* follow_job(), then the curve of what it saw (whatever way it ended). */
static int wait_job(struct ctl_session *s, uint32_t id)
{
	struct curve_log log = { 0 };
	int rc, crc;

	if (!s->ctl->curve)
		return follow_job(s, id, NULL);
	rc = follow_job(s, id, &log);
	crc = curve_write(s->ctl, &log);
	return rc == EXIT_OK ? crc : rc;
}

static int cmd_submit(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	Dml__JobSpec *spec = NULL;
	struct ctl_session s;
	char err[512];
	uint32_t id;
	int rc;

	if (argc < 1) {
		fprintf(stderr, "dmlctl: submit needs a job file: dmlctl submit JOB.conf "
			"[--wait [--curve FILE.svg]]\n");
		return EXIT_USAGE;
	}
	if (argc > 1)
		return ctl_too_many("submit", argv[1]);
	err[0] = '\0';
	rc = dml_job_file_load(argv[0], &spec, err, sizeof(err));
	if (rc != 0) {
		/* "file:line: message" as the parser wrote it; "file: reason" when
		 * the file cannot be read. */
		if (rc == DML_ECONF && err[0])
			fprintf(stderr, "%s\n", err);
		else
			fprintf(stderr, "dmlctl: submit: %s\n", err[0] ? err : dml_strerror(rc));
		dml_job_spec_free(spec);
		return EXIT_USAGE;
	}
	if (ctl_session_open(ctl, &s) != 0) {
		dml_job_spec_free(spec);
		return EXIT_FAIL;
	}
	req.type = DML__MSG_TYPE__SUBMIT;
	req.job_spec = spec;
	rc = ctl_session_ask(&s, &req, DML__MSG_TYPE__SUBMIT_REPLY, &reply, stderr);
	/* The scheduler's own check of the spec failed: a bad job file too. */
	if (rc == EXIT_FAIL && s.refused && s.err == DML_EINVAL)
		rc = EXIT_USAGE;
	if (rc == EXIT_OK) {
		id = reply->job;
		dml__meta__free_unpacked(reply, NULL);
		if (!ctl->json || !ctl->wait) {
			char a[128];

			if (ctl->json)
				printf("{\"job\":%u}\n", id);
			else
				printf("submitted job %u (%s)\n", id,
				       ctl_clean(spec->name, a, sizeof(a)));
			fflush(stdout);
		}
		if (ctl->wait)
			rc = wait_job(&s, id);
	}
	ctl_session_close(&s);
	dml_job_spec_free(spec);
	return rc;
}

static int cmd_status(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta *reply;
	struct ctl_session s;
	uint32_t id = 0;
	int rc;

	if (argc > 1)
		return ctl_too_many("status", argv[1]);
	if (argc == 1 && (rc = ctl_parse_job_id("status", argv[0], &id)) != EXIT_OK)
		return rc;
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	rc = ctl_ask_jobs(&s, id, &reply, stderr);
	if (rc == EXIT_OK) {
		const Dml__JobStatus *st = id ? ctl_find_job(reply, id) : NULL;
		struct ctl_json j = { stdout, 0 };

		if (ctl->json && st) {
			ctl_json_job_status(&j, NULL, st);
			fputc('\n', stdout);
		} else if (ctl->json) {
			ctl_json_open(&j, NULL, '{');
			ctl_json_open(&j, "jobs", '[');
			for (size_t i = 0; i < reply->n_jobs; i++)
				ctl_json_job_status(&j, NULL, reply->jobs[i]);
			ctl_json_close(&j, ']');
			ctl_json_close(&j, '}');
			fputc('\n', stdout);
		} else if (st) {
			ctl_print_job_detail(stdout, st);
		} else if (reply->n_jobs == 0) {
			printf("no jobs (dmlctl submit JOB.conf adds one)\n");
		} else {
			ctl_print_jobs_table(stdout, reply);
		}
		dml__meta__free_unpacked(reply, NULL);
	}
	ctl_session_close(&s);
	return rc;
}

static int job_control(struct ctl *ctl, const char *cmd, int action, const char *done,
		       int argc, char **argv)
{
	struct ctl_session s;
	uint32_t id;
	int rc;

	if (argc < 1) {
		fprintf(stderr, "dmlctl: %s needs a job id: dmlctl %s JOB\n", cmd, cmd);
		return EXIT_USAGE;
	}
	if (argc > 1)
		return ctl_too_many(cmd, argv[1]);
	if ((rc = ctl_parse_job_id(cmd, argv[0], &id)) != EXIT_OK)
		return rc;
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	rc = ctl_ask_job_control(&s, id, action, 0);
	if (rc == EXIT_OK && ctl->json)
		printf("{\"job\":%u,\"action\":\"%s\"}\n", id, ctl_action_name(action));
	else if (rc == EXIT_OK)
		printf("job %u: %s\n", id, done);
	ctl_session_close(&s);
	return rc;
}

static int cmd_stop(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "stop", DML__JOB_ACTION__STOP, "stopped", argc, argv);
}

static int cmd_pause(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "pause", DML__JOB_ACTION__PAUSE, "paused", argc, argv);
}

static int cmd_resume(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "resume", DML__JOB_ACTION__RESUME, "resumed", argc, argv);
}

static int cmd_rebalance(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "rebalance", DML__JOB_ACTION__REBALANCE,
			   "partitions split anew by the workers' measured rates", argc, argv);
}

static int cmd_shardmap(struct ctl *ctl, int argc, char **argv)
{
	Dml__Meta req = DML__META__INIT, *reply;
	struct ctl_session s;
	uint32_t id = 0;
	int rc;

	if (argc > 1)
		return ctl_too_many("shardmap", argv[1]);
	if (argc == 1 && (rc = ctl_parse_job_id("shardmap", argv[0], &id)) != EXIT_OK)
		return rc;
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	req.type = DML__MSG_TYPE__SHARDMAP;
	req.job = id;
	rc = ctl_session_ask(&s, &req, DML__MSG_TYPE__SHARDMAP_REPLY, &reply, stderr);
	if (rc == EXIT_OK && !reply->shard_map) {
		fprintf(stderr, "dmlctl: the scheduler's answer holds no shard map\n");
		rc = EXIT_FAIL;
	} else if (rc == EXIT_OK && ctl->json) {
		struct ctl_json j = { stdout, 0 };

		ctl_json_shard_map(&j, NULL, reply->shard_map);
		fputc('\n', stdout);
	} else if (rc == EXIT_OK) {
		ctl_print_shard_map(stdout, reply->shard_map, reply->job_spec);
	}
	if (reply)
		dml__meta__free_unpacked(reply, NULL);
	ctl_session_close(&s);
	return rc;
}

/*
 * One screen of top into out: the nodes, then the active job and its
 * workers. Failures are written to err; the exit status is returned.
 */
static int top_frame(struct ctl_session *s, FILE *out, FILE *err)
{
	Dml__Meta req = DML__META__INIT, *nodes, *jobs;
	const Dml__JobStatus *active = NULL;
	size_t pending = 0, ended = 0;
	char now[64], line[512];
	time_t t = time(NULL);
	struct tm tm;
	int rc;

	strftime(now, sizeof(now), "%H:%M:%S", localtime_r(&t, &tm));
	fprintf(out, "dml top: scheduler %s at %s\n\n", s->ctl->addr, now);
	req.type = DML__MSG_TYPE__NODES;
	rc = ctl_session_ask(s, &req, DML__MSG_TYPE__NODES_REPLY, &nodes, err);
	if (rc != EXIT_OK)
		return rc;
	ctl_print_nodes_table(out, nodes);
	dml__meta__free_unpacked(nodes, NULL);
	fputc('\n', out);

	rc = ctl_ask_jobs(s, 0, &jobs, out);
	if (rc == EXIT_INTERRUPTED)
		return rc;
	if (rc != EXIT_OK)
		/* A scheduler without jobs still has nodes worth watching. */
		return EXIT_OK;
	for (size_t i = 0; i < jobs->n_jobs; i++) {
		int st = jobs->jobs[i]->state;

		if (st == DML__JOB_STATE__RUNNING || st == DML__JOB_STATE__PAUSED)
			active = jobs->jobs[i];
		else if (st == DML__JOB_STATE__PENDING)
			pending++;
		else if (ctl_job_ended(st))
			ended++;
	}
	if (active) {
		ctl_fmt_progress(active, PROGRESS_BAR, line, sizeof(line));
		fprintf(out, "%s\n", line);
		ctl_print_workers_table(out, active, "  ");
		if (pending)
			fprintf(out, "%zu more job%s pending\n", pending,
				pending == 1 ? "" : "s");
	} else {
		fprintf(out, "no active job (%zu pending, %zu finished)\n", pending, ended);
	}
	dml__meta__free_unpacked(jobs, NULL);
	return EXIT_OK;
}

static int cmd_top(struct ctl *ctl, int argc, char **argv)
{
	int live = !ctl->once && isatty(STDOUT_FILENO), rc;
	struct ctl_session s;

	if (argc > 0)
		return ctl_too_many("top", argv[0]);
	if (ctl->json) {
		fprintf(stderr, "dmlctl: top has no --json; use dmlctl --json nodes and "
			"dmlctl --json status\n");
		return EXIT_USAGE;
	}
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	if (!live) {
		rc = top_frame(&s, stdout, stderr);
		ctl_session_close(&s);
		return rc;
	}
	ctl_session_watch_interrupts(&s);
	for (;;) {
		char *frame = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&frame, &len);

		if (!f) {
			fprintf(stderr, "dmlctl: out of memory\n");
			rc = EXIT_FAIL;
			break;
		}
		/* A scheduler that went away is shown on the screen, and tried again. */
		rc = top_frame(&s, f, f);
		fclose(f);
		if (rc != EXIT_INTERRUPTED) {
			fputs("\033[H\033[2J", stdout);
			fwrite(frame, 1, len, stdout);
			fputs("\n(Ctrl-C quits)\n", stdout);
			fflush(stdout);
		}
		free(frame);
		if (rc == EXIT_INTERRUPTED)
			break;
		ctl_session_sleep(&s, TOP_REFRESH_MS);
		if (s.interrupted)
			break;
	}
	ctl_session_close(&s);
	return rc == EXIT_FAIL ? EXIT_FAIL : EXIT_OK;
}

static const struct command commands[] = {
	{ "nodes", "", "list the nodes: state, last heartbeat, why it last changed",
	  cmd_nodes, 0 },
	{ "submit", "JOB.conf [--wait]",
	  "submit a training job; --wait follows it to its end", cmd_submit, TAKES_WAIT },
	{ "status", "[JOB]", "list the jobs, or one job in detail", cmd_status, 0 },
	{ "stop", "JOB", "stop a job", cmd_stop, 0 },
	{ "pause", "JOB", "pause a job at the next clock boundary", cmd_pause, 0 },
	{ "resume", "JOB", "resume a paused job", cmd_resume, 0 },
	{ "rebalance", "JOB", "split the job's partitions (and batches, when they follow "
	  "speeds) anew by the workers' measured rates", cmd_rebalance, 0 },
	{ "top", "[--once]", "live view of the nodes and the running job's workers",
	  cmd_top, TAKES_ONCE },
	{ "shardmap", "[JOB]", "which server holds which keys (default: the active job)",
	  cmd_shardmap, 0 },
	{ "export", "JOB FILE", "write the job's trained tables to a model file",
	  ctl_cmd_export, 0 },
	{ "checkpoint", "JOB [delete CLOCK]",
	  "take a job-wide checkpoint and wait for it, or delete one", ctl_cmd_checkpoint, 0 },
	{ "checkpoints", "JOB", "list the job's checkpoints", ctl_cmd_checkpoints, 0 },
};

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < DML_ARRAY_LEN(commands); i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dmlctl [-s HOST:PORT] [--secret FILE] [--cluster NAME] [--json] "
		"COMMAND [ARGS]\n"
		"       dmlctl --help\n\n"
		"Talks to dml-sched, the cluster's scheduler.\n\n"
		"Commands:\n");
	for (size_t i = 0; i < DML_ARRAY_LEN(commands); i++)
		fprintf(out, "  %-11s %-18s %s\n", commands[i].name, commands[i].args,
			commands[i].help);
	fprintf(out,
		"\nOptions:\n"
		"  -s, --scheduler HOST:PORT  scheduler address (default: $DML_SCHEDULER, "
		"else %s)\n"
		"  --secret FILE              cluster secret (default: $DML_SECRET_FILE, "
		"else %s)\n"
		"  --cluster NAME             cluster name (default: %s)\n"
		"  --json                     print one JSON object instead of a table\n"
		"  --wait                     submit: poll every %d ms until the job ends\n"
		"  --curve FILE.svg           submit --wait: draw the loss and the metric\n"
		"                             as the job went, into FILE.svg at its end\n"
		"  --once                     top: print one screen and exit (also when\n"
		"                             the output is not a terminal)\n"
		"  -v, --verbose              log the connection's progress to stderr\n"
		"  -h, --help                 this text\n\n"
		"Exit status: 0 success; 1 the operation failed: the scheduler could not be\n"
		"reached (within %d s) or refused the secret or the request (e.g. no such\n"
		"job), or the job submit --wait followed ended failed or stopped; 2 bad\n"
		"usage, an unknown command or a bad job file (printed as file:line:\n"
		"message); 130 interrupted while waiting (the job goes on).\n",
		DEFAULT_SCHEDULER, DEFAULT_SECRET_FILE, DEFAULT_CLUSTER, WAIT_POLL_MS,
		CTL_TIMEOUT_MS / 1000);
}

static const char *env_or(const char *name, const char *def, int *from_env)
{
	const char *v = getenv(name);

	*from_env = v && *v;
	return *from_env ? v : def;
}

int main(int argc, char **argv)
{
	enum { OPT_SECRET = 256, OPT_CLUSTER, OPT_JSON, OPT_WAIT, OPT_ONCE, OPT_CURVE };
	static const struct option longopts[] = {
		{ "scheduler", required_argument, NULL, 's' },
		{ "secret", required_argument, NULL, OPT_SECRET },
		{ "cluster", required_argument, NULL, OPT_CLUSTER },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "wait", no_argument, NULL, OPT_WAIT },
		{ "once", no_argument, NULL, OPT_ONCE },
		{ "curve", required_argument, NULL, OPT_CURVE },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct ctl ctl = { 0 };
	const struct command *cmd;
	int opt, from_env, rc;

	dml_log_set_ident("dmlctl");
	/* The connection layer's warnings would repeat what ctl_session_report() says. */
	dml_log_set_level(DML_LOG_ERROR);
	ctl.addr = env_or("DML_SCHEDULER", DEFAULT_SCHEDULER, &from_env);
	ctl.addr_source = from_env ? "$DML_SCHEDULER" : "the default";
	ctl.secret_file = env_or("DML_SECRET_FILE", DEFAULT_SECRET_FILE, &from_env);
	ctl.cluster = DEFAULT_CLUSTER;
	/* Options may come after the command too: "dmlctl submit job.conf --wait". */
	while ((opt = getopt_long(argc, argv, "s:vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 's':
			ctl.addr = optarg;
			ctl.addr_source = "-s";
			break;
		case OPT_SECRET: ctl.secret_file = optarg; break;
		case OPT_CLUSTER: ctl.cluster = optarg; break;
		case OPT_JSON: ctl.json = 1; break;
		case OPT_WAIT: ctl.wait = 1; break;
		case OPT_ONCE: ctl.once = 1; break;
		case OPT_CURVE: ctl.curve = optarg; break;
		case 'v': dml_log_set_level(DML_LOG_DEBUG); break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			fprintf(stderr, "dmlctl: try 'dmlctl --help'\n");
			return EXIT_USAGE;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	cmd = find_command(argv[optind]);
	if (!cmd) {
		fprintf(stderr, "dmlctl: unknown command '%s' (dmlctl --help lists them)\n",
			argv[optind]);
		return EXIT_USAGE;
	}
	if ((ctl.wait && !(cmd->takes & TAKES_WAIT)) ||
	    (ctl.once && !(cmd->takes & TAKES_ONCE))) {
		fprintf(stderr, "dmlctl: %s does not take %s\n", cmd->name,
			ctl.wait ? "--wait (only submit does)" : "--once (only top does)");
		return EXIT_USAGE;
	}
	if (ctl.curve && (!ctl.wait || !*ctl.curve)) {
		fprintf(stderr, "dmlctl: --curve FILE.svg goes with submit --wait (the curve "
			"is drawn from what --wait sees)\n");
		return EXIT_USAGE;
	}
	if (dml_parse_hostport(ctl.addr, ctl.host, sizeof(ctl.host), &ctl.port, 0) != 0) {
		fprintf(stderr, "dmlctl: scheduler address '%s' (from %s) is not HOST:PORT\n",
			ctl.addr, ctl.addr_source);
		return EXIT_USAGE;
	}
	if (!*ctl.cluster) {
		fprintf(stderr, "dmlctl: --cluster needs a name\n");
		return EXIT_USAGE;
	}
	/* A reader that goes away must turn into a write error, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	rc = cmd->run(&ctl, argc - optind - 1, argv + optind + 1);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "dmlctl: cannot write the output\n");
		rc = EXIT_FAIL;
	}
	libevent_global_shutdown();
	return rc;
}

