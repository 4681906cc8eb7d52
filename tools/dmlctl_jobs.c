/*
 * dmlctl's commands on the jobs the scheduler runs: status (the list or one
 * job in detail), stop, pause, resume and rebalance, shardmap, and top's
 * live view of the nodes and the active job's workers.
 *
 * Must never: wait longer than the session's timeout for one answer, or
 * copy bytes a peer sent to the terminal unescaped (the printers escape).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools/dmlctl.h"
#include "proto/job_spec.h"
#include "proto/util.h"

#define TOP_REFRESH_MS 1000

int ctl_cmd_status(struct ctl *ctl, int argc, char **argv)
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

int ctl_cmd_stop(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "stop", DML__JOB_ACTION__STOP, "stopped", argc, argv);
}

int ctl_cmd_pause(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "pause", DML__JOB_ACTION__PAUSE, "paused", argc, argv);
}

int ctl_cmd_resume(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "resume", DML__JOB_ACTION__RESUME, "resumed", argc, argv);
}

int ctl_cmd_rebalance(struct ctl *ctl, int argc, char **argv)
{
	return job_control(ctl, "rebalance", DML__JOB_ACTION__REBALANCE,
			   "partitions split anew by the workers' measured rates", argc, argv);
}

int ctl_cmd_shardmap(struct ctl *ctl, int argc, char **argv)
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
		ctl_fmt_progress(active, CTL_PROGRESS_BAR, line, sizeof(line));
		fprintf(out, "%s\n", line);
		ctl_print_job_links(out, active, "  ");
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

int ctl_cmd_top(struct ctl *ctl, int argc, char **argv)
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

