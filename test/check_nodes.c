/*
 * Unit tests of the scheduler's node table (sched/nodes.c) with a fake
 * clock: registration, the alive / suspect / dead state machine and its
 * reasons, re-registration, listing order, and the checks on what a node
 * reports about itself.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test/check_run.h"
#include "proto/dml_error.h"
#include "sched/nodes.h"

#define SUSPECT_MS 3000
#define DEAD_MS 10000
#define MAX_EVENTS 256

struct event_rec {
	uint32_t role, node_id;
	Dml__NodeState old, state;
	char reason[DML_NODE_REASON_MAX + 1];
};

struct recorder {
	struct event_rec ev[MAX_EVENTS];
	size_t n;
};

static void record(const struct dml_node *node, Dml__NodeState old, void *arg)
{
	struct recorder *r = arg;
	struct event_rec *e;

	ck_assert_uint_lt(r->n, MAX_EVENTS);
	e = &r->ev[r->n++];
	e->role = node->role;
	e->node_id = node->node_id;
	e->old = old;
	e->state = node->state;
	snprintf(e->reason, sizeof(e->reason), "%s", node->reason);
}

static const struct event_rec *last(const struct recorder *r)
{
	ck_assert_uint_gt(r->n, 0);
	return &r->ev[r->n - 1];
}

/* A registration as dml-server would send it; strings point into buf. */
struct reg {
	Dml__NodeInfo info;
	Dml__Profile profile;
	char zone[128], address[300], device[160];
};

static void reg_init(struct reg *g, uint32_t role, uint32_t id, uint64_t incarnation)
{
	dml__node_info__init(&g->info);
	dml__profile__init(&g->profile);
	snprintf(g->zone, sizeof(g->zone), "rack-a");
	snprintf(g->address, sizeof(g->address), "10.0.0.%u:7001", id);
	snprintf(g->device, sizeof(g->device), "cpu");
	g->info.role = role;
	g->info.node_id = id;
	g->info.zone = g->zone;
	g->info.address = g->address;
	g->info.incarnation = incarnation;
	g->info.shard_index = 0;
	g->info.shard_count = 1;
	g->profile.device = g->device;
	g->profile.cores = 8;
	g->profile.memory_bytes = 1ull << 34;
	g->profile.gflops = 120.5;
	g->info.profile = &g->profile;
}

static struct dml_nodes *table(struct recorder *r)
{
	struct dml_nodes *t = NULL;

	memset(r, 0, sizeof(*r));
	ck_assert_int_eq(dml_nodes_new(SUSPECT_MS, DEAD_MS, record, r, &t), 0);
	return t;
}

static void register_at(struct dml_nodes *t, uint32_t role, uint32_t id, uint64_t inc,
			uint64_t now)
{
	struct reg g;

	reg_init(&g, role, id, inc);
	ck_assert_int_eq(dml_nodes_register(t, &g.info, now, NULL), 0);
}

#define SERVER DML__ROLE__SERVER
#define WORKER DML__ROLE__WORKER
#define ALIVE DML__NODE_STATE__ALIVE
#define SUSPECT DML__NODE_STATE__SUSPECT
#define DEAD DML__NODE_STATE__DEAD

START_TEST(new_refuses_timeouts_out_of_order)
{
	struct dml_nodes *t = NULL;

	ck_assert_int_eq(dml_nodes_new(0, 10, NULL, NULL, &t), DML_EINVAL);
	ck_assert_int_eq(dml_nodes_new(10, 10, NULL, NULL, &t), DML_EINVAL);
	ck_assert_int_eq(dml_nodes_new(10, 5, NULL, NULL, &t), DML_EINVAL);
	ck_assert_int_eq(dml_nodes_new(10, 11, NULL, NULL, NULL), DML_EINVAL);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(dml_nodes_new(10, 11, NULL, NULL, &t), 0);
	ck_assert_uint_eq(dml_nodes_count(t), 0);
	ck_assert_ptr_null(dml_nodes_at(t, 0));
	dml_nodes_free(t);
	dml_nodes_free(NULL);
}
END_TEST

START_TEST(registration_copies_the_node_and_makes_it_alive)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n = NULL;
	struct reg g;

	reg_init(&g, SERVER, 2, 77);
	g.info.shard_index = 1;
	g.info.shard_count = 2;
	ck_assert_int_eq(dml_nodes_register(t, &g.info, 1000, &n), 0);
	/* Nothing may point into the message: scribble over it. */
	memset(g.zone, 'x', sizeof(g.zone) - 1);
	memset(g.address, 'x', sizeof(g.address) - 1);
	memset(g.device, 'x', sizeof(g.device) - 1);

	ck_assert_ptr_nonnull(n);
	ck_assert_ptr_eq(n, dml_nodes_find(t, SERVER, 2));
	ck_assert_ptr_null(dml_nodes_find(t, WORKER, 2));
	ck_assert_int_eq(n->state, ALIVE);
	ck_assert_str_eq(n->reason, "registered");
	ck_assert_str_eq(n->zone, "rack-a");
	ck_assert_str_eq(n->address, "10.0.0.2:7001");
	ck_assert_str_eq(n->profile.device, "cpu");
	ck_assert_uint_eq(n->profile.cores, 8);
	ck_assert_uint_eq(n->profile.memory_bytes, 1ull << 34);
	ck_assert_double_eq(n->profile.gflops, 120.5);
	ck_assert_uint_eq(n->shard_index, 1);
	ck_assert_uint_eq(n->shard_count, 2);
	ck_assert_uint_eq(n->incarnation, 77);
	ck_assert_int_eq(n->connected, 1);
	ck_assert_uint_eq(n->last_heartbeat_ms, 1000);
	ck_assert_uint_eq(n->registered_ms, 1000);

	ck_assert_uint_eq(r.n, 1);
	ck_assert_int_eq(r.ev[0].old, DML__NODE_STATE__NODE_UNKNOWN);
	ck_assert_int_eq(r.ev[0].state, ALIVE);
	ck_assert_uint_eq(r.ev[0].node_id, 2);
	ck_assert_str_eq(r.ev[0].reason, "registered");
	dml_nodes_free(t);
}
END_TEST

START_TEST(silence_makes_a_node_suspect_then_dead)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n;
	size_t changed = 99;

	register_at(t, SERVER, 1, 1, 1000);
	n = dml_nodes_find(t, SERVER, 1);
	dml_nodes_tick(t, 1000 + SUSPECT_MS - 1, &changed);
	ck_assert_uint_eq(changed, 0);
	ck_assert_int_eq(n->state, ALIVE);

	dml_nodes_tick(t, 1000 + 3012, &changed);
	ck_assert_uint_eq(changed, 1);
	ck_assert_int_eq(n->state, SUSPECT);
	ck_assert_str_eq(n->reason, "no heartbeat for 3012 ms");
	ck_assert_int_eq(last(&r)->old, ALIVE);
	ck_assert_int_eq(last(&r)->state, SUSPECT);
	ck_assert_uint_eq(n->changed_ms, 4012);

	/* Still suspect: no new transition, no new callback. */
	dml_nodes_tick(t, 1000 + DEAD_MS - 1, &changed);
	ck_assert_uint_eq(changed, 0);
	ck_assert_uint_eq(r.n, 2);

	dml_nodes_tick(t, 1000 + DEAD_MS, &changed);
	ck_assert_uint_eq(changed, 1);
	ck_assert_int_eq(n->state, DEAD);
	ck_assert_str_eq(n->reason, "no heartbeat for 10000 ms");
	ck_assert_int_eq(last(&r)->old, SUSPECT);
	ck_assert_int_eq(n->connected, 0);

	/* Dead stays dead, even if the node speaks again. */
	dml_nodes_tick(t, 1000 + 5 * DEAD_MS, &changed);
	ck_assert_uint_eq(changed, 0);
	ck_assert_int_eq(dml_nodes_heartbeat(t, SERVER, 1, 60000), DML_ESTATE);
	ck_assert_int_eq(n->state, DEAD);
	ck_assert_uint_eq(r.n, 3);
	dml_nodes_free(t);
}
END_TEST

START_TEST(heartbeats_keep_a_node_alive)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	uint64_t now;

	register_at(t, WORKER, 4, 1, 0);
	for (now = 100; now <= 60000; now += 100) {
		if (now % 1000 == 0)
			ck_assert_int_eq(dml_nodes_heartbeat(t, WORKER, 4, now), 0);
		dml_nodes_tick(t, now, NULL);
	}
	ck_assert_int_eq(dml_nodes_find(t, WORKER, 4)->state, ALIVE);
	ck_assert_uint_eq(dml_nodes_find(t, WORKER, 4)->last_heartbeat_ms, 60000);
	ck_assert_uint_eq(r.n, 1);
	dml_nodes_free(t);
}
END_TEST

START_TEST(a_heartbeat_revives_a_suspect_node)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n;

	register_at(t, SERVER, 3, 1, 0);
	n = dml_nodes_find(t, SERVER, 3);
	dml_nodes_tick(t, 4000, NULL);
	ck_assert_int_eq(n->state, SUSPECT);
	ck_assert_int_eq(dml_nodes_heartbeat(t, SERVER, 3, 4500), 0);
	ck_assert_int_eq(n->state, ALIVE);
	ck_assert_str_eq(n->reason, "heartbeat again after 4500 ms");
	ck_assert_int_eq(last(&r)->old, SUSPECT);
	ck_assert_int_eq(last(&r)->state, ALIVE);
	/* The clock restarts from that heartbeat. */
	dml_nodes_tick(t, 4500 + SUSPECT_MS - 1, NULL);
	ck_assert_int_eq(n->state, ALIVE);
	ck_assert_uint_eq(r.n, 3);
	dml_nodes_free(t);
}
END_TEST

START_TEST(a_closed_connection_is_suspect_at_once_then_dead)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n;

	register_at(t, SERVER, 1, 1, 0);
	n = dml_nodes_find(t, SERVER, 1);
	ck_assert_int_eq(dml_nodes_heartbeat(t, SERVER, 1, 500), 0);
	ck_assert_int_eq(dml_nodes_disconnect(t, SERVER, 1, 700), 0);
	ck_assert_int_eq(n->state, SUSPECT);
	ck_assert_str_eq(n->reason, "connection closed");
	ck_assert_int_eq(n->connected, 0);
	ck_assert_int_eq(last(&r)->old, ALIVE);
	/* Nobody heartbeats on a closed connection; the table refuses it. */
	ck_assert_int_eq(dml_nodes_heartbeat(t, SERVER, 1, 800), DML_ESTATE);
	ck_assert_int_eq(n->state, SUSPECT);
	ck_assert_uint_eq(n->last_heartbeat_ms, 500);
	/* Already suspect: passing suspect_after_ms changes nothing. */
	dml_nodes_tick(t, 500 + SUSPECT_MS, NULL);
	ck_assert_uint_eq(r.n, 2);
	dml_nodes_tick(t, 500 + DEAD_MS + 12, NULL);
	ck_assert_int_eq(n->state, DEAD);
	ck_assert_str_eq(n->reason, "connection closed, no heartbeat for 10012 ms");
	/* Closing a dead node's connection changes nothing. */
	ck_assert_int_eq(dml_nodes_disconnect(t, SERVER, 1, 20000), 0);
	ck_assert_int_eq(n->state, DEAD);
	ck_assert_uint_eq(r.n, 3);
	dml_nodes_free(t);
}
END_TEST

START_TEST(registering_again_brings_a_node_back)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n, *n2 = NULL;
	struct reg g;

	register_at(t, SERVER, 1, 111, 0);
	n = dml_nodes_find(t, SERVER, 1);
	dml_nodes_tick(t, DEAD_MS, NULL);
	ck_assert_int_eq(n->state, DEAD);

	/* Restarted process: new incarnation, moved to another port. */
	reg_init(&g, SERVER, 1, 222);
	snprintf(g.address, sizeof(g.address), "10.0.0.9:7100");
	ck_assert_int_eq(dml_nodes_register(t, &g.info, 20000, &n2), 0);
	ck_assert_ptr_eq(n2, n);
	ck_assert_uint_eq(dml_nodes_count(t), 1);
	ck_assert_int_eq(n->state, ALIVE);
	ck_assert_str_eq(n->reason, "re-registered (new incarnation)");
	ck_assert_str_eq(n->address, "10.0.0.9:7100");
	ck_assert_uint_eq(n->incarnation, 222);
	ck_assert_int_eq(n->connected, 1);
	ck_assert_int_eq(last(&r)->old, DEAD);
	ck_assert_int_eq(last(&r)->state, ALIVE);

	/* Same process after a lost connection. */
	ck_assert_int_eq(dml_nodes_disconnect(t, SERVER, 1, 21000), 0);
	ck_assert_int_eq(n->state, SUSPECT);
	register_at(t, SERVER, 1, 222, 21050);
	ck_assert_int_eq(n->state, ALIVE);
	ck_assert_str_eq(n->reason, "re-registered (reconnected)");
	ck_assert_int_eq(last(&r)->old, SUSPECT);
	ck_assert_uint_eq(n->last_heartbeat_ms, 21050);
	ck_assert_int_eq(dml_nodes_heartbeat(t, SERVER, 1, 21100), 0);

	/* Re-registering while alive is reported too. */
	register_at(t, SERVER, 1, 333, 22000);
	ck_assert_int_eq(last(&r)->old, ALIVE);
	ck_assert_str_eq(last(&r)->reason, "re-registered (new incarnation)");
	ck_assert_uint_eq(r.n, 6);
	dml_nodes_free(t);
}
END_TEST

/*
 * Nodes a restarted scheduler knew: back without a connection and without
 * a word to the callback; a live one must register within dead_after_ms
 * or die, a dead one stays dead; one already there is refused.
 */
START_TEST(restored_nodes_register_again_or_die)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n;
	struct reg g;

	reg_init(&g, WORKER, 4, 44);
	ck_assert_int_eq(dml_nodes_restore(t, &g.info, 1000), 0);
	reg_init(&g, WORKER, 5, 55);
	ck_assert_int_eq(dml_nodes_restore(t, &g.info, 1000), 0);
	reg_init(&g, SERVER, 1, 11);
	g.info.state = DEAD;
	g.info.reason = "left";
	ck_assert_int_eq(dml_nodes_restore(t, &g.info, 1000), 0);
	ck_assert_int_eq(dml_nodes_restore(t, &g.info, 1000), DML_EINVAL);
	ck_assert_uint_eq(r.n, 0);

	n = dml_nodes_find(t, WORKER, 4);
	ck_assert_int_eq(n->state, SUSPECT);
	ck_assert_int_eq(n->connected, 0);
	ck_assert_str_eq(n->reason, "not registered again since the scheduler restarted");
	ck_assert_str_eq(n->address, "10.0.0.4:7001");
	ck_assert_uint_eq(n->incarnation, 44);
	ck_assert_int_eq(dml_nodes_heartbeat(t, WORKER, 4, 1100), DML_ESTATE);
	n = dml_nodes_find(t, SERVER, 1);
	ck_assert_int_eq(n->state, DEAD);
	ck_assert_str_eq(n->reason, "left");

	/* Worker 4 is back in time; worker 5 is not. */
	register_at(t, WORKER, 4, 44, 1500);
	ck_assert_int_eq(last(&r)->state, ALIVE);
	ck_assert_str_eq(last(&r)->reason, "re-registered (reconnected)");
	ck_assert_int_eq(dml_nodes_heartbeat(t, WORKER, 4, 1000 + DEAD_MS - 1), 0);
	dml_nodes_tick(t, 1000 + DEAD_MS - 1, NULL);
	ck_assert_int_eq(dml_nodes_find(t, WORKER, 5)->state, SUSPECT);
	dml_nodes_tick(t, 1000 + DEAD_MS, NULL);
	ck_assert_int_eq(dml_nodes_find(t, WORKER, 5)->state, DEAD);
	ck_assert_uint_eq(last(&r)->node_id, 5);
	ck_assert_int_eq(last(&r)->old, SUSPECT);
	ck_assert_int_eq(dml_nodes_find(t, WORKER, 4)->state, ALIVE);
	ck_assert_int_eq(dml_nodes_find(t, SERVER, 1)->state, DEAD);
	dml_nodes_free(t);
}
END_TEST

START_TEST(leaving_is_dead_at_once)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n;

	register_at(t, WORKER, 9, 1, 0);
	n = dml_nodes_find(t, WORKER, 9);
	ck_assert_int_eq(dml_nodes_leave(t, WORKER, 9, 10), 0);
	ck_assert_int_eq(n->state, DEAD);
	ck_assert_str_eq(n->reason, "left");
	ck_assert_int_eq(n->connected, 0);
	ck_assert_int_eq(dml_nodes_leave(t, WORKER, 9, 20), 0);
	ck_assert_int_eq(dml_nodes_disconnect(t, WORKER, 9, 30), 0);
	dml_nodes_tick(t, 10 * DEAD_MS, NULL);
	ck_assert_str_eq(n->reason, "left");
	ck_assert_uint_eq(r.n, 2);
	dml_nodes_free(t);
}
END_TEST

START_TEST(a_late_tick_goes_straight_to_dead)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	size_t changed;

	register_at(t, SERVER, 1, 1, 0);
	dml_nodes_tick(t, DEAD_MS + 250, &changed);
	ck_assert_uint_eq(changed, 1);
	ck_assert_uint_eq(r.n, 2);
	ck_assert_int_eq(r.ev[1].old, ALIVE);
	ck_assert_int_eq(r.ev[1].state, DEAD);
	ck_assert_str_eq(r.ev[1].reason, "no heartbeat for 10250 ms");
	dml_nodes_free(t);
}
END_TEST

START_TEST(time_running_backwards_changes_nothing)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n;
	size_t changed;

	register_at(t, SERVER, 1, 1, 50000);
	n = dml_nodes_find(t, SERVER, 1);
	/* An unsigned underflow would read as an enormous silence. */
	dml_nodes_tick(t, 1000, &changed);
	ck_assert_uint_eq(changed, 0);
	ck_assert_int_eq(n->state, ALIVE);
	dml_nodes_tick(t, 40000, NULL);
	dml_nodes_tick(t, 51000, NULL);
	ck_assert_int_eq(n->state, ALIVE);
	dml_nodes_free(t);
}
END_TEST

START_TEST(listing_is_ordered_by_role_then_id_and_pointers_stay)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	static const struct { uint32_t role, id; } order[] = {
		{ DML__ROLE__WORKER, 2 }, { DML__ROLE__WORKER, 10 },
		{ DML__ROLE__SERVER, 1 }, { DML__ROLE__SERVER, 3 },
		{ DML__ROLE__AGGREGATOR, 1 },
	};
	const struct dml_node *first;

	register_at(t, DML__ROLE__SERVER, 3, 1, 0);
	register_at(t, DML__ROLE__WORKER, 10, 1, 0);
	register_at(t, DML__ROLE__AGGREGATOR, 1, 1, 0);
	register_at(t, DML__ROLE__SERVER, 1, 1, 0);
	register_at(t, DML__ROLE__WORKER, 2, 1, 0);
	ck_assert_uint_eq(dml_nodes_count(t), 5);
	for (size_t i = 0; i < 5; i++) {
		ck_assert_uint_eq(dml_nodes_at(t, i)->role, order[i].role);
		ck_assert_uint_eq(dml_nodes_at(t, i)->node_id, order[i].id);
	}
	ck_assert_ptr_null(dml_nodes_at(t, 5));

	/* Growing the table moves no node. */
	first = dml_nodes_at(t, 0);
	for (uint32_t id = 1000; id > 900; id--)
		register_at(t, DML__ROLE__WORKER, id, 1, 0);
	ck_assert_uint_eq(dml_nodes_count(t), 105);
	ck_assert_ptr_eq(dml_nodes_find(t, DML__ROLE__WORKER, 2), first);
	ck_assert_ptr_eq(dml_nodes_at(t, 0), first);
	for (size_t i = 1; i < dml_nodes_count(t); i++) {
		const struct dml_node *a = dml_nodes_at(t, i - 1), *b = dml_nodes_at(t, i);

		ck_assert(a->role < b->role ||
			  (a->role == b->role && a->node_id < b->node_id));
	}
	dml_nodes_free(t);
}
END_TEST

START_TEST(unknown_nodes_are_not_found)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);

	register_at(t, SERVER, 1, 1, 0);
	ck_assert_int_eq(dml_nodes_heartbeat(t, WORKER, 1, 10), DML_ENOTFOUND);
	ck_assert_int_eq(dml_nodes_heartbeat(t, SERVER, 2, 10), DML_ENOTFOUND);
	ck_assert_int_eq(dml_nodes_disconnect(t, SERVER, 2, 10), DML_ENOTFOUND);
	ck_assert_int_eq(dml_nodes_leave(t, SERVER, 2, 10), DML_ENOTFOUND);
	ck_assert_int_eq(dml_nodes_heartbeat(NULL, SERVER, 1, 10), DML_ENOTFOUND);
	ck_assert_ptr_null(dml_nodes_find(NULL, SERVER, 1));
	ck_assert_uint_eq(dml_nodes_count(NULL), 0);
	ck_assert_uint_eq(r.n, 1);
	dml_nodes_free(t);
}
END_TEST

/* One bad field per case; each must be refused with code and leave the
 * table untouched. */
static void expect_refused(struct dml_nodes *t, const struct reg *g, int code)
{
	const struct dml_node *before = dml_nodes_find(t, SERVER, 5);
	char why[160] = "";

	ck_assert_int_eq(dml_node_info_check(&g->info, why, sizeof(why)), code);
	ck_assert_uint_gt(strlen(why), 0);
	ck_assert_int_eq(dml_nodes_register(t, &g->info, 99, NULL), code);
	ck_assert_uint_eq(dml_nodes_count(t), 1);
	ck_assert_str_eq(before->address, "10.0.0.5:7001");
	ck_assert_uint_eq(before->registered_ms, 0);
}

START_TEST(bad_registrations_are_refused)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	struct reg g;

	register_at(t, SERVER, 5, 1, 0);
	ck_assert_int_eq(dml_node_info_check(NULL, NULL, 0), DML_EINVAL);

	reg_init(&g, DML__ROLE__CONTROL, 5, 1);
	expect_refused(t, &g, DML_EROLE);
	reg_init(&g, DML__ROLE__SCHEDULER, 5, 1);
	expect_refused(t, &g, DML_EROLE);
	reg_init(&g, DML__ROLE__ROLE_NONE, 5, 1);
	expect_refused(t, &g, DML_EROLE);
	reg_init(&g, 77, 5, 1);
	expect_refused(t, &g, DML_EROLE);

	reg_init(&g, SERVER, 0, 1);
	expect_refused(t, &g, DML_EINVAL);

	reg_init(&g, SERVER, 5, 2);
	memset(g.zone, 'z', DML_NODE_ZONE_MAX + 1);
	g.zone[DML_NODE_ZONE_MAX + 1] = '\0';
	expect_refused(t, &g, DML_EINVAL);
	reg_init(&g, SERVER, 5, 2);
	snprintf(g.zone, sizeof(g.zone), "rack\n2");
	expect_refused(t, &g, DML_EINVAL);
	reg_init(&g, SERVER, 5, 2);
	snprintf(g.zone, sizeof(g.zone), "r\xc3\xa9");
	expect_refused(t, &g, DML_EINVAL);

	reg_init(&g, SERVER, 5, 2);
	snprintf(g.address, sizeof(g.address), "10.0.0.5");
	expect_refused(t, &g, DML_EINVAL);
	snprintf(g.address, sizeof(g.address), "10.0.0.5:0");
	expect_refused(t, &g, DML_EINVAL);
	snprintf(g.address, sizeof(g.address), "10.0.0.5:70000");
	expect_refused(t, &g, DML_EINVAL);

	reg_init(&g, SERVER, 5, 2);
	g.info.shard_index = 2;
	g.info.shard_count = 2;
	expect_refused(t, &g, DML_EINVAL);
	g.info.shard_index = 1;
	g.info.shard_count = 0;
	expect_refused(t, &g, DML_EINVAL);

	reg_init(&g, SERVER, 5, 2);
	g.profile.gflops = NAN;
	expect_refused(t, &g, DML_EINVAL);
	g.profile.gflops = 0;
	g.profile.examples_per_s = -1;
	expect_refused(t, &g, DML_EINVAL);
	g.profile.examples_per_s = 0;
	g.profile.link_mbps = INFINITY;
	expect_refused(t, &g, DML_EINVAL);
	reg_init(&g, SERVER, 5, 2);
	memset(g.device, 'd', DML_NODE_DEVICE_MAX + 1);
	g.device[DML_NODE_DEVICE_MAX + 1] = '\0';
	expect_refused(t, &g, DML_EINVAL);
	ck_assert_uint_eq(r.n, 1);
	dml_nodes_free(t);
}
END_TEST

START_TEST(edge_registrations_are_accepted)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);
	const struct dml_node *n = NULL;
	struct reg g;

	/* Longest zone and device, no address, no shard, no profile, NULL
	 * strings as a hand-built message may have. */
	reg_init(&g, WORKER, 1, 1);
	memset(g.zone, 'z', DML_NODE_ZONE_MAX);
	g.zone[DML_NODE_ZONE_MAX] = '\0';
	g.address[0] = '\0';
	g.info.shard_count = 0;
	g.info.profile = NULL;
	ck_assert_int_eq(dml_nodes_register(t, &g.info, 5, &n), 0);
	ck_assert_uint_eq(strlen(n->zone), DML_NODE_ZONE_MAX);
	ck_assert_str_eq(n->address, "");
	ck_assert_str_eq(n->profile.device, "");
	ck_assert_uint_eq(n->profile.cores, 0);

	reg_init(&g, DML__ROLE__AGGREGATOR, 2, 1);
	g.info.zone = NULL;
	g.info.address = NULL;
	g.profile.device = NULL;
	ck_assert_int_eq(dml_nodes_register(t, &g.info, 5, &n), 0);
	ck_assert_str_eq(n->zone, "");
	ck_assert_str_eq(n->profile.device, "");

	reg_init(&g, SERVER, 3, 1);
	snprintf(g.address, sizeof(g.address), "db-7.example.org:65535");
	memset(g.device, 'd', DML_NODE_DEVICE_MAX);
	g.device[DML_NODE_DEVICE_MAX] = '\0';
	ck_assert_int_eq(dml_nodes_register(t, &g.info, 5, &n), 0);
	ck_assert_uint_eq(strlen(n->profile.device), DML_NODE_DEVICE_MAX);
	ck_assert_str_eq(n->address, "db-7.example.org:65535");
	ck_assert_uint_eq(dml_nodes_count(t), 3);
	dml_nodes_free(t);
}
END_TEST

START_TEST(states_are_counted_and_named)
{
	struct recorder r;
	struct dml_nodes *t = table(&r);

	register_at(t, SERVER, 1, 1, 0);
	register_at(t, SERVER, 2, 1, 0);
	register_at(t, WORKER, 1, 1, 0);
	ck_assert_int_eq(dml_nodes_disconnect(t, SERVER, 2, 10), 0);
	ck_assert_int_eq(dml_nodes_leave(t, WORKER, 1, 10), 0);
	ck_assert_uint_eq(dml_nodes_count_state(t, ALIVE), 1);
	ck_assert_uint_eq(dml_nodes_count_state(t, SUSPECT), 1);
	ck_assert_uint_eq(dml_nodes_count_state(t, DEAD), 1);
	ck_assert_str_eq(dml_node_state_name(ALIVE), "alive");
	ck_assert_str_eq(dml_node_state_name(SUSPECT), "suspect");
	ck_assert_str_eq(dml_node_state_name(DEAD), "dead");
	ck_assert_str_eq(dml_node_state_name(42), "unknown");
	ck_assert_str_eq(dml_node_role_name(SERVER), "server");
	ck_assert_str_eq(dml_node_role_name(WORKER), "worker");
	ck_assert_str_eq(dml_node_role_name(DML__ROLE__AGGREGATOR), "aggregator");
	ck_assert_str_eq(dml_node_role_name(DML__ROLE__CONTROL), "control");
	ck_assert_str_eq(dml_node_role_name(1234), "none");
	dml_nodes_free(t);
}
END_TEST

static Suite *nodes_suite(void)
{
	Suite *s = suite_create("nodes");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, new_refuses_timeouts_out_of_order);
	tcase_add_test(tc, registration_copies_the_node_and_makes_it_alive);
	tcase_add_test(tc, silence_makes_a_node_suspect_then_dead);
	tcase_add_test(tc, heartbeats_keep_a_node_alive);
	tcase_add_test(tc, a_heartbeat_revives_a_suspect_node);
	tcase_add_test(tc, a_closed_connection_is_suspect_at_once_then_dead);
	tcase_add_test(tc, registering_again_brings_a_node_back);
	tcase_add_test(tc, leaving_is_dead_at_once);
	tcase_add_test(tc, a_late_tick_goes_straight_to_dead);
	tcase_add_test(tc, time_running_backwards_changes_nothing);
	tcase_add_test(tc, listing_is_ordered_by_role_then_id_and_pointers_stay);
	tcase_add_test(tc, unknown_nodes_are_not_found);
	tcase_add_test(tc, bad_registrations_are_refused);
	tcase_add_test(tc, edge_registrations_are_accepted);
	tcase_add_test(tc, states_are_counted_and_named);
	tcase_add_test(tc, restored_nodes_register_again_or_die);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return dml_check_run(nodes_suite());
}
