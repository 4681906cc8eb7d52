/*
 * dmlctl's job-wide checkpoints: `checkpoint JOB` takes one and waits for
 * it, `checkpoint JOB delete CLOCK` deletes one, `checkpoints JOB` lists
 * them. The scheduler coordinates; every server of the job writes its rows
 * to its own store (dml-sched.c's sched_ckpt.c, dml-server's server_cut.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dml_error.h"
#include "dmlctl.h"
#include "util.h"

/* How long `checkpoint JOB` waits: past the scheduler's own round limit. */
#define CKPT_WAIT_MS 90000
#define CKPT_POLL_MS 100

/* The job's newest checkpoint clock, 0 when none. */
static uint64_t newest(const Dml__JobStatus *st)
{
	return st->n_checkpoints ? st->checkpoints[st->n_checkpoints - 1]->clock : 0;
}

static void print_done(const struct ctl *ctl, uint32_t id, const Dml__Checkpoint *ck)
{
	if (ctl->json)
		printf("{\"job\":%" PRIu32 ",\"clock\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n", id,
		       ck->clock, ck->bytes);
	else
		printf("job %" PRIu32 ": checkpoint at clock %" PRIu64 " (%.1f MB)\n", id,
		       ck->clock, (double)ck->bytes / 1e6);
}

/* Poll until the round started ends: a new newest checkpoint, or its failure. */
static int wait_round(struct ctl_session *s, uint32_t id, uint64_t before)
{
	char text[256];

	for (int waited = 0; waited <= CKPT_WAIT_MS; waited += CKPT_POLL_MS) {
		Dml__Meta *reply;
		const Dml__JobStatus *st;
		int rc = ctl_ask_jobs(s, id, &reply, stderr);

		if (rc != EXIT_OK)
			return rc;
		st = ctl_find_job(reply, id);
		if (!strncmp(st->checkpoint_state, "failed: ", 8)) {
			fprintf(stderr, "dmlctl: checkpoint of job %" PRIu32 " %s\n", id,
				ctl_clean(st->checkpoint_state, text, sizeof(text)));
			dml__meta__free_unpacked(reply, NULL);
			return EXIT_FAIL;
		}
		if (!st->checkpoint_state[0] && newest(st) != before) {
			print_done(s->ctl, id, st->checkpoints[st->n_checkpoints - 1]);
			dml__meta__free_unpacked(reply, NULL);
			return EXIT_OK;
		}
		if (!st->checkpoint_state[0] && ctl_job_ended(st->state)) {
			fprintf(stderr, "dmlctl: job %" PRIu32 " ended before its checkpoint was "
				"complete\n", id);
			dml__meta__free_unpacked(reply, NULL);
			return EXIT_FAIL;
		}
		dml__meta__free_unpacked(reply, NULL);
		ctl_session_sleep(s, CKPT_POLL_MS);
		if (s->interrupted)
			return EXIT_INTERRUPTED;
	}
	fprintf(stderr, "dmlctl: checkpoint of job %" PRIu32 ": not complete after %d s "
		"(dmlctl status %" PRIu32 " says where it stands)\n", id, CKPT_WAIT_MS / 1000, id);
	return EXIT_FAIL;
}

static int take(struct ctl_session *s, uint32_t id)
{
	Dml__Meta *reply;
	uint64_t before;
	int rc = ctl_ask_jobs(s, id, &reply, stderr);

	if (rc != EXIT_OK)
		return rc;
	before = newest(ctl_find_job(reply, id));
	dml__meta__free_unpacked(reply, NULL);
	rc = ctl_ask_job_control(s, id, DML__JOB_ACTION__CHECKPOINT_NOW, 0);
	if (rc != EXIT_OK)
		return rc;
	ctl_session_watch_interrupts(s);
	return wait_round(s, id, before);
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
