/*
 * dmlctl submit: send a job file to the scheduler and, with --wait, follow
 * the job to its end (one progress line on a terminal, a line per change
 * otherwise), reconnecting when the scheduler goes away for a while; with
 * --curve, draw what the polls saw as an SVG chart (curve_svg.h).
 *
 * Must never: wait longer than WAIT_PATIENCE_MS for a scheduler that is
 * gone, or copy bytes a peer sent to the terminal unescaped.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "tools/curve_svg.h"
#include "proto/dml_error.h"
#include "tools/dmlctl.h"
#include "proto/job_spec.h"
#include "proto/util.h"

/* submit --wait: how long the scheduler may stay unreachable before giving up. */
#define WAIT_PATIENCE_MS 15000
/* submit --curve: at most this many points are kept; beyond, every other
 * one is dropped and the polls are sampled half as often. */
#define CURVE_MAX_POINTS 2048

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
 * Poll the job every CTL_WAIT_POLL_MS until it ends. On a terminal one progress
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
			ctl_session_sleep(s, CTL_WAIT_POLL_MS);
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

			ctl_fmt_progress(st, CTL_PROGRESS_BAR, line, sizeof(line));
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
		ctl_session_sleep(s, CTL_WAIT_POLL_MS);
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

int ctl_cmd_submit(struct ctl *ctl, int argc, char **argv)
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

