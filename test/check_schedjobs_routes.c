/*
 * check_schedjobs: the zone aggregator each worker's assignment routes it
 * through. Stand-in servers, workers and aggregators register with zones;
 * what each worker's ASSIGN carries, what dmlctl shows, and how the routes
 * follow aggregators and workers that come and go.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_schedjobs.h"
#include "test/harness.h"
#include "test/json.h"
#include "proto/util.h"

#define AGG(id) "127.0.0.1:" #id
#define SRV DML__ROLE__SERVER
#define WRK DML__ROLE__WORKER
#define AGR DML__ROLE__AGGREGATOR

/* A stand-in node a test brings up: role, id and zone. */
struct zoned_node {
	uint32_t role, id;
	const char *zone;
};

/* The worker's next ASSIGN of this version (older ones skipped), acked. */
static void expect_route(struct peer *w, uint64_t version, const char *aggregator)
{
	Dml__Meta *m;

	while ((m = peer_take(w, DML__MSG_TYPE__ASSIGN, 0, WAIT_MS)) != NULL &&
	       m->assignment->version < version)
		take_free(m);
	ck_assert_msg(m != NULL, "worker %u got no assignment v%llu", w->node_id,
		      (unsigned long long)version);
	ck_assert_uint_eq(m->assignment->version, version);
	ck_assert_int_eq(m->assignment->state, DML__JOB_STATE__RUNNING);
	ck_assert_msg(strcmp(m->assignment->aggregator, aggregator) == 0,
		      "worker %u v%llu routes through '%s', not '%s'", w->node_id,
		      (unsigned long long)version, m->assignment->aggregator, aggregator);
	peer_ack(w, m);
	take_free(m);
}

/*
 * Start the scheduler, bring nodes[i] up as p[i] in this order (p[0] the
 * one server), run a job on every worker, and check that worker wk[i]'s
 * first assignment routes it through first[i]. Returns the job's id.
 */
static uint32_t zoned_start(struct sched *t, const struct zoned_node *nodes, size_t n,
			    struct peer **p, struct peer **wk, const char *const *first,
			    size_t nwk)
{
	uint32_t id;
	Dml__Meta *m;

	sched_up(t, NULL);
	for (size_t i = 0; i < n; i++)
		p[i] = node_up_zone(&t->net, nodes[i].role, nodes[i].id, nodes[i].zone);
	id = submit(t->ctl, "zones", "");
	m = expect_map(p[0], id, 1, 1);
	peer_ack(p[0], m);
	take_free(m);
	for (size_t i = 0; i < nwk; i++)
		expect_route(wk[i], 1, first[i]);
	return id;
}

static uint64_t job_version(struct peer *ctl, uint32_t id)
{
	Dml__Meta *r = job_status(ctl, id);
	uint64_t v = r->jobs[0]->assignment_version;

	take_free(r);
	return v;
}

/* The job's newest event holds needle. */
static void newest_event_says(struct peer *ctl, uint32_t id, const char *needle)
{
	Dml__Meta *r = job_status(ctl, id);
	const Dml__JobStatus *st = r->jobs[0];

	ck_assert_uint_gt(st->n_events, 0);
	ck_assert_msg(strstr(st->events[st->n_events - 1], needle) != NULL,
		      "newest event '%s' does not say '%s'", st->events[st->n_events - 1],
		      needle);
	take_free(r);
}

static void leave(struct peer *p)
{
	Dml__Meta bye = DML__META__INIT, *r;

	bye.type = DML__MSG_TYPE__BYE;
	r = peer_request(p, &bye);
	ck_assert_int_eq(r->type, DML__MSG_TYPE__ACK);
	take_free(r);
}

/* `dmlctl [--json] ARGS...` against the scheduler; its output in out. */
static void dmlctl_ok(struct sched *t, const char *const *args, struct dml_test_output *out)
{
	ck_assert_int_eq(dml_test_dmlctl(t->env, dml_test_server_port(t->proc), NULL, args,
					 out), 0);
	ck_assert_msg(out->status == 0, "dmlctl %s: %s", args[0], out->err);
}

/* What `dmlctl --json status JOB` says worker's aggregator is. */
static void json_route_is(const struct jval *job, uint32_t worker, const char *aggregator)
{
	const struct jval *ws = json_get(job, "workers");

	for (size_t i = 0; ws && i < ws->n; i++) {
		if (jnum(&ws->items[i], "worker") != worker)
			continue;
		ck_assert_str_eq(jstr(&ws->items[i], "aggregator"), aggregator);
		return;
	}
	ck_abort_msg("worker %u not in the status", worker);
}

/*
 * Workers in zones A and B (and one of no zone), an aggregator in each:
 * each worker routes through its zone's, the one of no zone directly; the
 * routes follow the B aggregator leaving, a new one coming and its
 * connection closing, each as one new assignment version; and once B has
 * no live worker, the job no longer spans zones and A goes direct too.
 */
START_TEST(test_routes_follow_zones)
{
	static const char *const nodes_args[] = { "--json", "nodes", NULL };
	static const char *const json_args[] = { "--json", "status", "1", NULL };
	static const char *const table_args[] = { "status", "1", NULL };
	struct sched t;
	struct peer *p[9] = { NULL };
	struct peer **wk = p + 1, **agg = p + 6; /* server 1, workers 1..5, aggs 1..3 */
	static const struct zoned_node nodes[] = {
		{ SRV, 1, "A" }, { WRK, 1, "A" }, { WRK, 2, "A" }, { WRK, 3, "B" },
		{ WRK, 4, "B" }, { WRK, 5, "" }, { AGR, 1, "A" }, { AGR, 2, "B" },
	};
	const char *const first[5] = { AGG(30001), AGG(30001), AGG(30002), AGG(30002), "" };
	struct dml_test_output out;
	struct jval doc;
	int seen = 0;
	uint32_t id;

	id = zoned_start(&t, nodes, DML_ARRAY_LEN(nodes), p, wk, first, 5);

	/* dmlctl lists the aggregators and each worker's route */
	dmlctl_ok(&t, nodes_args, &out);
	ck_assert_int_eq(json_parse(out.out, &doc), 0);
	for (size_t i = 0; i < json_get(&doc, "nodes")->n; i++) {
		const struct jval *n = &json_get(&doc, "nodes")->items[i];

		if (strcmp(jstr(n, "role"), "aggregator") != 0)
			continue;
		seen++;
		ck_assert_str_eq(jstr(n, "zone"), jnum(n, "id") == 1 ? "A" : "B");
		ck_assert_str_eq(jstr(n, "address"), jnum(n, "id") == 1 ? AGG(30001)
									 : AGG(30002));
	}
	ck_assert_int_eq(seen, 2);
	json_free(&doc);
	dml_test_output_free(&out);
	dmlctl_ok(&t, json_args, &out);
	ck_assert_int_eq(json_parse(out.out, &doc), 0);
	for (uint32_t i = 0; i < 5; i++)
		json_route_is(&doc, i + 1, first[i]);
	json_free(&doc);
	dml_test_output_free(&out);
	dmlctl_ok(&t, table_args, &out);
	ck_assert_msg(strstr(out.out, " AGGREGATOR ") && strstr(out.out, "  " AGG(30002) "  "),
		      "status:\n%s", out.out);
	dml_test_output_free(&out);

	/* B's aggregator leaves (dead): B goes direct, A stays */
	leave(agg[1]);
	for (int i = 0; i < 5; i++)
		expect_route(wk[i], 2, i < 2 ? AGG(30001) : "");
	newest_event_says(t.ctl, id, "zone aggregator routes changed for 2 workers: "
			  "0 through an aggregator, 2 direct");
	/* another registers in B: B goes through it */
	agg[2] = node_up_zone(&t.net, DML__ROLE__AGGREGATOR, 3, "B");
	for (int i = 0; i < 5; i++)
		expect_route(wk[i], 3, i < 2 ? AGG(30001) : i < 4 ? AGG(30003) : "");
	/* its connection closes: B goes direct again at once */
	peer_free(agg[2]);
	agg[2] = NULL;
	for (int i = 0; i < 5; i++)
		expect_route(wk[i], 4, i < 2 ? AGG(30001) : "");

	/* B's workers leave: one named zone left, so A goes direct too */
	leave(wk[2]);
	leave(wk[3]);
	expect_route(wk[0], job_version(t.ctl, id), "");
	expect_route(wk[1], job_version(t.ctl, id), "");
	sched_down(&t, p, 9);
}
END_TEST

/*
 * A job whose workers are all in zone A (and one of no zone, which names
 * no other zone): nobody routes through an aggregator, and an aggregator
 * registering changes no route, so no new version goes out.
 */
START_TEST(test_routes_one_zone_direct)
{
	static const struct zoned_node nodes[] = {
		{ SRV, 1, "A" }, { WRK, 1, "A" }, { WRK, 2, "A" }, { WRK, 3, "" },
		{ AGR, 1, "A" }, { AGR, 2, "B" },
	};
	struct sched t;
	struct peer *p[7] = { NULL };
	struct peer **wk = p + 1, **agg = p + 4; /* server 1, workers 1..3, aggs 1..3 */
	const char *const first[3] = { "", "", "" };
	Dml__Meta *r;
	uint32_t id;

	id = zoned_start(&t, nodes, DML_ARRAY_LEN(nodes), p, wk, first, 3);
	agg[2] = node_up_zone(&t.net, AGR, 3, "A");
	r = job_status(t.ctl, id);
	ck_assert_uint_eq(r->jobs[0]->assignment_version, 1);
	for (size_t i = 0; i < r->jobs[0]->n_workers; i++)
		ck_assert_str_eq(r->jobs[0]->workers[i]->aggregator, "");
	take_free(r);
	for (int i = 0; i < 3; i++)
		ck_assert_ptr_null(peer_take(wk[i], DML__MSG_TYPE__ASSIGN, 0, 0));
	sched_down(&t, p, 7);
}
END_TEST

/*
 * Zone B's three workers over its two aggregators, registered out of
 * order: by node id, workers 2 and 4 go through aggregator 5 and worker 3
 * through 7; when 5 leaves, all three go through 7.
 */
START_TEST(test_routes_spread_over_a_zone)
{
	static const struct zoned_node nodes[] = {
		{ SRV, 1, "A" }, { AGR, 7, "B" }, { AGR, 5, "B" }, { AGR, 6, "A" },
		{ WRK, 1, "A" }, { WRK, 2, "B" }, { WRK, 3, "B" }, { WRK, 4, "B" },
	};
	struct sched t;
	struct peer *p[8] = { NULL };
	struct peer **agg = p + 1, **wk = p + 4; /* server 1, aggs 7, 5, 6, workers 1..4 */
	const char *const first[4] = { AGG(30006), AGG(30005), AGG(30007), AGG(30005) };
	Dml__Meta *r;
	uint32_t id;

	id = zoned_start(&t, nodes, DML_ARRAY_LEN(nodes), p, wk, first, 4);
	r = job_status(t.ctl, id);
	for (size_t i = 0; i < r->jobs[0]->n_workers; i++) {
		const Dml__WorkerStatus *ws = r->jobs[0]->workers[i];

		ck_assert_str_eq(ws->aggregator, first[ws->worker - 1]);
	}
	take_free(r);

	leave(agg[1]);
	for (int i = 0; i < 4; i++)
		expect_route(wk[i], 2, i ? AGG(30007) : AGG(30006));
	newest_event_says(t.ctl, id, "zone aggregator routes changed for 2 workers: "
			  "2 through an aggregator, 0 direct");
	sched_down(&t, p, 8);
}
END_TEST

void check_schedjobs_add_routes(TCase *tc)
{
	tcase_add_test(tc, test_routes_follow_zones);
	tcase_add_test(tc, test_routes_one_zone_direct);
	tcase_add_test(tc, test_routes_spread_over_a_zone);
}
