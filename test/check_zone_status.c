/*
 * A job's traffic and zones in dmlctl status, end to end: dml-sched, a
 * dml-server in zone A and dml-workers 1 (zone A) and 2 (zone B) as real
 * processes on 127.0.0.1, an lsq job with the default codecs (none within
 * a zone, fp16 both ways across zones), watched with `dmlctl status`.
 *
 *   - worker 2's values went across zones, at half their floats' bytes
 *     sent, and none within; worker 1's within its zone as floats, none
 *     across; the job's figures are their sums;
 *   - worker 2's fp16 pushes left a residual (norm above 0), worker 1's
 *     uncoded ones none, and the job's norm of table 0 is above 0;
 *   - the job lists zones A and B with a worker each and their rates;
 *   - the human status says it in lines of its own.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/cluster.h"
#include "test/harness.h"
#include "test/json.h"
#include "proto/util.h"

/* The residual norm of table 0 in links' residual_norms, or -1. */
static double residual_0(const struct jval *links)
{
	const struct jval *list = json_get(links, "residual_norms");

	for (size_t i = 0; list && i < list->n; i++)
		if (jnum(&list->items[i], "table") == 0)
			return jnum(&list->items[i], "norm");
	return -1;
}

/* Poll job 1's status into doc until it is done. */
static void wait_done(struct cluster *c, struct jval *doc)
{
	for (int waited = 0; waited < CLUSTER_WAIT_MS; waited += CLUSTER_POLL_MS) {
		cluster_job_status(c, "1", doc);
		if (strcmp(jstr(doc, "state"), "done") == 0)
			return;
		ck_assert_msg(strcmp(jstr(doc, "state"), "failed") != 0 &&
			      strcmp(jstr(doc, "state"), "stopped") != 0, "job 1 %s: %s",
			      jstr(doc, "state"), jstr(doc, "reason"));
		json_free(doc);
		cluster_sleep_ms(CLUSTER_POLL_MS);
	}
	ck_abort_msg("job 1 not done in time");
}

/* A zone's entry in the job's zones, or NULL. */
static const struct jval *zone_of(const struct jval *job, const char *zone)
{
	const struct jval *zs = json_get(job, "zones");

	for (size_t i = 0; zs && i < zs->n; i++)
		if (strcmp(jstr(&zs->items[i], "zone"), zone) == 0)
			return &zs->items[i];
	return NULL;
}

START_TEST(test_status_shows_link_classes_residuals_and_zones)
{
	const struct cluster_zones zones = { .servers = "A", .workers = { NULL, "A", "B" } };
	const char *const args[] = { "status", "1", NULL };
	const struct jval *worker1, *worker2, *w1, *w2, *all, *za, *zb;
	struct dml_test_output out;
	struct cluster c;
	struct jval doc;
	char *job;

	cluster_up_zones(&c, 1, 2, &zones);
	job = cluster_write_lsq_job(&c, "zones.conf",
				    "[job]\nname = zones\napp = lsq\ndata = synthetic\n"
				    "staleness = 0\nbatch_size = 16\nmax_clocks = 40\n"
				    "examples = 1000\ndim = 64\n");
	ck_assert_uint_eq(cluster_submit(&c, job), 1);
	wait_done(&c, &doc);
	worker1 = cluster_job_worker(&doc, 1);
	worker2 = cluster_job_worker(&doc, 2);
	ck_assert(worker1 && worker2);
	ck_assert_str_eq(jstr(worker1, "zone"), "A");
	ck_assert_str_eq(jstr(worker2, "zone"), "B");
	w1 = json_get(worker1, "links");
	w2 = json_get(worker2, "links");
	all = json_get(&doc, "links");
	ck_assert(w1 && w2 && all);
	/* 40 clocks of pushes and pulls of 64 floats each at least */
	ck_assert_msg(jnum(w2, "cross_zone_float_bytes") >= 40 * 2 * 64 * 4, "%g",
		      jnum(w2, "cross_zone_float_bytes"));
	ck_assert(jnum(w2, "cross_zone_sent_bytes") * 2 == jnum(w2, "cross_zone_float_bytes"));
	ck_assert(jnum(w2, "within_zone_float_bytes") == 0);
	ck_assert(jnum(w1, "within_zone_float_bytes") >= 40 * 2 * 64 * 4);
	ck_assert(jnum(w1, "within_zone_sent_bytes") == jnum(w1, "within_zone_float_bytes"));
	ck_assert(jnum(w1, "cross_zone_float_bytes") == 0);
	ck_assert(jnum(all, "cross_zone_float_bytes") == jnum(w2, "cross_zone_float_bytes"));
	ck_assert(jnum(all, "within_zone_sent_bytes") == jnum(w1, "within_zone_sent_bytes"));
	ck_assert_msg(residual_0(w2) > 0, "worker 2's residual %g", residual_0(w2));
	ck_assert(residual_0(w1) == 0);
	ck_assert(residual_0(all) > 0);
	za = zone_of(&doc, "A");
	zb = zone_of(&doc, "B");
	ck_assert(za && zb && json_get(&doc, "zones")->n == 2);
	ck_assert(jnum(za, "workers") == 1 && jnum(zb, "workers") == 1);
	ck_assert(jnum(za, "examples_per_s") == jnum(worker1, "examples_per_s"));
	ck_assert(jnum(zb, "examples_per_s") == jnum(worker2, "examples_per_s"));
	json_free(&doc);

	ck_assert_int_eq(dml_test_dmlctl(c.env, c.port, NULL, args, &out), 0);
	ck_assert_msg(out.status == 0 && strstr(out.out, "\n  across zones: ") &&
		      strstr(out.out, " sent (2.00x)\n") &&
		      strstr(out.out, "\n  residual L2:  table 0 ") &&
		      strstr(out.out, "\n  zones:        A 1 worker ") &&
		      strstr(out.out, "; B 1 worker "), "status:\n%s", out.out);
	dml_test_output_free(&out);
	free(job);
	cluster_down(&c);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = { test_status_shows_link_classes_residuals_and_zones };

	return cluster_suite_run("zone_status", tests, DML_ARRAY_LEN(tests));
}
