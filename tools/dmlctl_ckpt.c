/*
 * dmlctl's job-wide checkpoints: `checkpoint JOB` takes one and waits for
 * it, `checkpoint JOB delete CLOCK` deletes one, `checkpoints JOB` lists
 * them. The scheduler coordinates; every server of the job writes its rows
 * to its own store (dml-sched's sched_ckpt.c, dml-server's ckpt_cut.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "tools/dmlctl.h"
#include "proto/util.h"

/* How long `checkpoint JOB` waits: a round under way when it asks, then its
 * own, each within the scheduler's round limit (60 s). */
#define CKPT_WAIT_MS 130000

static void print_done(const struct ctl *ctl, uint32_t id, uint64_t clock, uint64_t bytes)
{
	if (ctl->json)
		printf("{\"job\":%" PRIu32 ",\"clock\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n", id,
		       clock, bytes);
	else
		printf("job %" PRIu32 ": checkpoint at clock %" PRIu64 " (%.1f MB)\n", id, clock,
		       (double)bytes / 1e6);
}

/* The scheduler answers once a round started after the request ended. */
static int take(struct ctl_session *s, uint32_t id)
{
	Dml__Meta req = DML__META__INIT, *reply;
	int rc;

	req.type = DML__MSG_TYPE__JOB_CONTROL;
	req.job = id;
	req.action = DML__JOB_ACTION__CHECKPOINT_NOW;
	s->answer_ms = CKPT_WAIT_MS;
	ctl_session_watch_interrupts(s);
	rc = ctl_session_ask(s, &req, DML__MSG_TYPE__ACK, &reply, stderr);
	if (rc != EXIT_OK)
		return rc;
	print_done(s->ctl, id, reply->clock, reply->bytes);
	dml__meta__free_unpacked(reply, NULL);
	return EXIT_OK;
}

static int parse_clock(const char *arg, uint64_t *clock)
{
	char *end;
	unsigned long long v;

	if (arg[0] < '0' || arg[0] > '9' || (v = strtoull(arg, &end, 10), *end) || !v) {
		fprintf(stderr, "dmlctl: checkpoint delete: '%s' is not a clock (a positive "
			"number, as dmlctl checkpoints JOB lists them)\n", arg);
		return EXIT_USAGE;
	}
	*clock = v;
	return EXIT_OK;
}

int ctl_cmd_checkpoint(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_session s;
	uint64_t clock = 0;
	uint32_t id;
	int rc;

	if (argc < 1) {
		fprintf(stderr, "dmlctl: checkpoint needs a job id: dmlctl checkpoint JOB "
			"[delete CLOCK]\n");
		return EXIT_USAGE;
	}
	if ((rc = ctl_parse_job_id("checkpoint", argv[0], &id)) != EXIT_OK)
		return rc;
	if (argc > 1 && strcmp(argv[1], "delete") != 0)
		return ctl_too_many("checkpoint", argv[1]);
	if (argc == 2) {
		fprintf(stderr, "dmlctl: checkpoint delete needs a clock: dmlctl checkpoint JOB "
			"delete CLOCK\n");
		return EXIT_USAGE;
	}
	if (argc > 3)
		return ctl_too_many("checkpoint", argv[3]);
	if (argc == 3 && (rc = parse_clock(argv[2], &clock)) != EXIT_OK)
		return rc;
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	if (!clock) {
		rc = take(&s, id);
	} else {
		rc = ctl_ask_job_control(&s, id, DML__JOB_ACTION__CHECKPOINT_DROP, clock);
		if (rc == EXIT_OK && ctl->json)
			printf("{\"job\":%" PRIu32 ",\"deleted\":%" PRIu64 "}\n", id, clock);
		else if (rc == EXIT_OK)
			printf("job %" PRIu32 ": checkpoint at clock %" PRIu64 " deleted\n", id,
			       clock);
	}
	ctl_session_close(&s);
	return rc;
}

static void print_list(const struct ctl *ctl, const Dml__JobStatus *st)
{
	struct ctl_json j = { stdout, 0 };
	char text[256];

	if (ctl->json) {
		ctl_json_open(&j, NULL, '{');
		ctl_json_u64(&j, "job", st->id);
		ctl_json_checkpoints(&j, st);
		ctl_json_close(&j, '}');
		fputc('\n', stdout);
		return;
	}
	if (!st->n_checkpoints)
		printf("job %" PRIu32 " has no checkpoints (dmlctl checkpoint %" PRIu32
		       " takes one; checkpoint_every in the job file, periodic ones)\n", st->id,
		       st->id);
	else
		printf("%10s %10s %10s\n", "CLOCK", "SIZE", "AGE");
	for (size_t i = 0; i < st->n_checkpoints; i++)
		printf("%10" PRIu64 " %8.1fMB %9.1fs\n", st->checkpoints[i]->clock,
		       (double)st->checkpoints[i]->bytes / 1e6,
		       (double)st->checkpoints[i]->age_ms / 1e3);
	if (st->checkpoint_state[0])
		printf("checkpoint %s\n", ctl_clean(st->checkpoint_state, text, sizeof(text)));
}

int ctl_cmd_checkpoints(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_session s;
	Dml__Meta *reply;
	uint32_t id;
	int rc;

	if (argc < 1) {
		fprintf(stderr, "dmlctl: checkpoints needs a job id: dmlctl checkpoints JOB\n");
		return EXIT_USAGE;
	}
	if (argc > 1)
		return ctl_too_many("checkpoints", argv[1]);
	if ((rc = ctl_parse_job_id("checkpoints", argv[0], &id)) != EXIT_OK)
		return rc;
	if (ctl_session_open(ctl, &s) != 0)
		return EXIT_FAIL;
	rc = ctl_ask_jobs(&s, id, &reply, stderr);
	if (rc == EXIT_OK) {
		print_list(ctl, ctl_find_job(reply, id));
		dml__meta__free_unpacked(reply, NULL);
	}
	ctl_session_close(&s);
	return rc;
}
