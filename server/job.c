/*
 * The job a dml-server serves when its tables come from the scheduler: shard
 * maps (SHARDMAP from dml-sched), a new job's tables, and the job's life
 * cycle. A remap is planned in remap.c, its rows move in migrate.c (MIGRATE).
 *
 * A new job replaces every table by the job's, holding the ranges the map
 * gives this server; initial values depend only on (seed, key), so nothing
 * has to move and map v1 is ACKed at once. A first map of version 2 or more
 * means this server joins a running job: its ranges are pending (below)
 * until the servers that held them have sent them. A newer map of the same job
 * is a remap: every range this server served that the map gives to another
 * server stops being served at once and its rows (values and optimizer
 * state) leave the table as parcels, one MIGRATE frame each, queued to the
 * new owner's connection; a parcel is freed when the owner ACKs it, and
 * resent on a new connection (with backoff) until then. Every range the map
 * gives this server that it does not hold is pending: not served (requests
 * touching it get DML_ERANGE) until MIGRATE frames have covered all of it.
 * The SHARDMAP is ACKed when nothing is pending any more.
 *
 * A map arriving while the previous remap is still under way is planned
 * from what this server holds at that moment: rows still in undelivered
 * parcels count as its own (they are routed again, or imported back), and
 * pending ranges the newer map gives elsewhere are forgotten (whoever holds
 * their rows sends them to the new owner). Every MIGRATE names the map
 * version it was planned for, and a receiver takes only frames of the
 * version it installs, so rows planned for an older map are never installed
 * under a newer one; the sender retries until both sides agree.
 *
 * Each server is given one contiguous range of each dense table, so a dense
 * table is reallocated to the new range (dml_table_set_range) and the
 * arriving rows are written into it; sparse tables export and remove the
 * rows whose key hash left, and import the ones that arrive.
 *
 * Must never: apply a frame of a map version other than the one being
 * installed, serve a key before its rows arrived or after they were given
 * away, ACK a SHARDMAP before every gained range arrived, trust a map, a
 * range or a row count a peer sent without checking it, or block the loop
 * (connections to peers are made and retried from it).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "server/job_internal.h"
#include "proto/sched_link.h"
#include "proto/log.h"
#include "shard/mapplan.h"
#include "store/optim.h"
#include "shard/shardmap.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* Pending ranges that see no rows for this long are reported (again). */
#define STALL_WARN_S 10

/* ---- specs and maps --------------------------------------------------------- */

const Dml__ShardServer *dml_server_map_server(const Dml__ShardMap *map, uint32_t node_id)
{
	for (size_t i = 0; map && i < map->n_servers; i++)
		if (map->servers[i]->node_id == node_id)
			return map->servers[i];
	return NULL;
}

/* The ranges of a table that a map gives one server. */
void dml_server_map_ranges(const Dml__ShardMap *map, uint32_t table, uint32_t server,
			   struct key_ranges *out)
{
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];

		if (r->table == table && r->server == server)
			dml_server_ranges_add(out, r->begin, r->end);
	}
}

/* A dense table is in one piece on each server: the table is reallocated
 * to that range when it moves. */
static int map_check_dense(const Dml__TableSpec *ts, const Dml__ShardMap *map, char *err,
			   size_t errlen)
{
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < map->n_servers; i++) {
		struct key_ranges kr = { 0 };

		dml_server_map_ranges(map, ts->id, map->servers[i]->node_id, &kr);
		if (kr.n > 1) {
			snprintf(err, errlen, "dense table %u is in %zu pieces on server %u",
				 ts->id, kr.n, map->servers[i]->node_id);
			rc = DML_EINVAL;
		}
		dml_server_ranges_clear(&kr);
	}
	return rc;
}

/*
 * Everything a SHARDMAP says, checked before anything changes: the map
 * covers the spec's tables exactly (shard/mapplan.h), and what this server
 * needs beyond that holds too.
 */
static int map_check(const Dml__JobSpec *spec, const Dml__ShardMap *map, char *err,
		     size_t errlen)
{
	struct dml_table_conf tc;
	int rc;

	if (map->job == 0 || map->version == 0) {
		snprintf(err, errlen, "job %u, version %llu: neither may be 0", map->job,
			 (unsigned long long)map->version);
		return DML_EINVAL;
	}
	if (dml_mapplan_check(map, spec, err, errlen) != 0)
		return DML_EINVAL;
	for (size_t i = 0; i < spec->n_tables; i++) {
		if ((rc = dml_table_conf_from_spec(spec->tables[i], &tc, err, errlen)) != 0)
			return rc;
		if (spec->tables[i]->dense &&
		    (rc = map_check_dense(spec->tables[i], map, err, errlen)) != 0)
			return rc;
	}
	return 0;
}

/* A later map of the same job must describe the same tables. */
static int spec_same_tables(const Dml__JobSpec *a, const Dml__JobSpec *b)
{
	if (a->n_tables != b->n_tables)
		return 0;
	for (size_t i = 0; i < a->n_tables; i++) {
		const Dml__TableSpec *x = a->tables[i], *y = b->tables[i];

		if (x->id != y->id || x->dense != y->dense || x->width != y->width ||
		    x->keys != y->keys || strcmp(x->optimizer, y->optimizer) != 0)
			return 0;
	}
	return 1;
}

Dml__JobSpec *dml_server_spec_copy(const Dml__JobSpec *spec)
{
	Dml__JobSpec *c = dml_msg_copy(&spec->base);

	if (!c)
		abort();   /* only memory can fail, fatal as in util.h */
	return c;
}

Dml__ShardMap *dml_server_map_copy(const Dml__ShardMap *map)
{
	Dml__ShardMap *c = dml_msg_copy(&map->base);

	if (!c)
		abort();   /* only memory can fail, fatal as in util.h */
	return c;
}

/* ---- answers to the scheduler ---------------------------------------------- */

void dml_server_map_ack(struct dml_server *s, uint64_t request_id)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__ACK;
	m.request_id = request_id;
	m.job = s->job.id;
	/* Not registered now: the scheduler sends the map again once we are,
	 * and it is ACKed then. */
	if (dml_sched_link_send(s->sched, &m) != 0)
		dml_debug("job %u: ACK of map v%llu not sent; the scheduler will ask again",
			  s->job.id, (unsigned long long)s->job.version);
}

void dml_server_map_error(struct dml_server *s, uint64_t request_id, int code,
			  const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	dml_server_sched_verror(s, request_id, code, "shard map", fmt, ap);
	va_end(ap);
}

/* ---- a new job ----------------------------------------------------------------- */

/* Free tables built by tables_build (not installed). */
static void tables_discard(struct table_entry *tables, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dml_table_free(tables[i].table);
		dml_server_ranges_clear(&tables[i].served);
	}
	free(tables);
}

/* The job's tables, holding what the map gives this server. */
static int tables_build(struct dml_server *s, const Dml__JobSpec *spec,
			const Dml__ShardMap *map, struct table_entry **out, struct line *l)
{
	struct table_entry *tables = dml_xcalloc(spec->n_tables, sizeof(*tables));
	int rc = 0;

	for (size_t i = 0; i < spec->n_tables && rc == 0; i++) {
		const Dml__TableSpec *ts = spec->tables[i];
		struct table_entry *te = &tables[i];
		struct dml_table_conf tc;
		char err[256];
		uint64_t share = 0;

		(void)dml_table_conf_from_spec(ts, &tc, err, sizeof(err)); /* checked with the map */
		dml_server_map_ranges(map, ts->id, s->conf->node_id, &te->served);
		for (size_t j = 0; j < te->served.n; j++)
			share += te->served.r[j].end - te->served.r[j].begin;
		if (ts->dense) {
			/* A table needs a range to be made; one with nothing here
			 * shrinks to no rows at once. */
			tc.key_begin = te->served.n ? te->served.r[0].begin : 0;
			tc.key_end = te->served.n ? te->served.r[0].end : 1;
		} else {
			tc.capacity_hint = (uint64_t)((double)ts->capacity * (double)share /
						      (double)DML_SHARD_HASH_SPACE);
		}
		rc = dml_table_new(&tc, &te->table);
		if (rc == 0 && ts->dense && !te->served.n)
			rc = dml_table_set_range(te->table, 0, 0);
		if (rc) {
			dml_err("job %u: table %u: %s", map->job, ts->id, dml_strerror(rc));
			break;
		}
		dml__table_info__init(&te->info);
		te->info.id = ts->id;
		te->info.dense = ts->dense;
		te->info.width = ts->width;
		te->info.keys = ts->keys;
		if (!te->served.n && dml_server_line_item(l))
			dml_server_line_add(l, "%stable %u nothing", l->items > 1 ? ", " : "", ts->id);
		for (size_t j = 0; j < te->served.n; j++) {
			if (!dml_server_line_item(l))
				continue;
			dml_server_line_add(l, "%stable %u", l->items > 1 ? ", " : "", ts->id);
			dml_server_line_range(l, " ", &te->info, te->served.r[j].begin, te->served.r[j].end);
		}
	}
	if (rc) {
		tables_discard(tables, spec->n_tables);
		return rc;
	}
	*out = tables;
	return 0;
}

/*
 * Resuming a move: the tables take the ranges of the older map base too, so
 * that the log replays into them (a dense table spans both of its ranges).
 */
static int tables_widen(struct dml_server *s, const Dml__JobSpec *spec,
			const Dml__ShardMap *base, struct table_entry *tables)
{
	int rc = 0;

	for (size_t i = 0; i < spec->n_tables && rc == 0; i++) {
		struct table_entry *te = &tables[i];

		dml_server_map_ranges(base, te->info.id, s->conf->node_id, &te->served);
		if (te->info.dense && te->served.n)
			rc = dml_table_set_range(te->table, te->served.r[0].begin,
						 te->served.r[te->served.n - 1].end);
	}
	return rc;
}

/*
 * The log replayed into widened tables: each holds the ranges of base, and
 * those of the newer map whose rows had moved in. Then the move goes on as
 * a remap from base: what base gave this server and the newer map does not
 * leaves again (an owner that has it already acknowledges it unapplied),
 * and what has not arrived is pending.
 */
static void resume_move(struct dml_server *s, const Dml__Meta *m, const Dml__ShardMap *base)
{
	for (size_t i = 0; i < s->ntables; i++) {
		struct table_entry *te = &s->tables[i];
		struct key_ranges mine = { 0 };

		dml_server_ranges_clear(&te->served);
		dml_server_map_ranges(base, te->info.id, s->conf->node_id, &te->served);
		dml_server_map_ranges(m->shard_map, te->info.id, s->conf->node_id, &mine);
		for (size_t j = 0; j < te->moved_in.n; j++)
			if (dml_server_ranges_cover(&mine, te->moved_in.r[j].begin,
						    te->moved_in.r[j].end))
				dml_server_ranges_add(&te->served, te->moved_in.r[j].begin,
						      te->moved_in.r[j].end);
		dml_server_ranges_clear(&te->moved_in);
		dml_server_ranges_clear(&mine);
	}
	dml_info("job %u: resuming the move from map v%llu to v%llu: the store holds this "
		 "server's rows of v%llu and those that had moved in", base->job,
		 (unsigned long long)base->version, (unsigned long long)m->shard_map->version,
		 (unsigned long long)base->version);
	dml__shard_map__free_unpacked(s->job.map, NULL);
	s->job.map = NULL;
	dml_server_job_set_map(s, m->job_spec, base);
	dml_server_remap(s, m);
}

/* A new job's map; base: the older map to resume a move from, or NULL. */
static void install_from(struct dml_server *s, const Dml__Meta *m, const Dml__ShardMap *base)
{
	const Dml__JobSpec *spec = m->job_spec;
	const Dml__ShardMap *map = m->shard_map;
	struct table_entry *tables;
	struct line l = { 0 };
	enum store_recovered recovered = STORE_RECOVERED_NONE;
	char why[64];
	int rc;

	rc = tables_build(s, spec, map, &tables, &l);
	if (rc == 0 && base && (rc = tables_widen(s, spec, base, tables)) != 0)
		tables_discard(tables, spec->n_tables);
	if (rc) {
		dml_server_map_error(s, m->request_id, rc, "job %u: cannot make its tables: %s", map->job,
				     dml_strerror(rc));
		return;
	}
	if (s->job.id)
		dml_info("job %u: replaced by job %u", s->job.id, map->job);
	snprintf(why, sizeof(why), "job %u was replaced on this server", s->job.id);
	dml_server_held_fail_all(s, DML_ESTATE, why);
	dml_server_delta_drop(s);
	dml_server_peers_take_back(s, NULL);
	dml_server_tables_free(s);
	s->tables = tables;
	s->ntables = spec->n_tables;
	if (s->job.map)
		dml__shard_map__free_unpacked(s->job.map, NULL);
	s->job.map = NULL;
	dml_server_job_set_map(s, spec, map);
	s->job.remapping = 0;
	s->job.ack_due = 0;
	s->dead_after_ms = spec->dead_after_ms ? spec->dead_after_ms : s->conf->dead_after_ms;
	s->stale_scaling = spec->stale_scaling == DML_STALE_INVERSE ? DML_STALE_INVERSE :
			   DML_STALE_OFF;
	s->bsp_step = spec->bsp_step == DML_BSP_STEP_PUSH ? DML_BSP_STEP_PUSH :
		      DML_BSP_STEP_CLOCK;
	s->allow_nonfinite = spec->allow_nonfinite;
	dml_server_cut_reset(s);
	/* The log first: the workers that join the clock set below get their
	 * push sequences from it. */
	rc = dml_server_store_job(s, map, base != NULL, &recovered);
	if (rc) {
		dml_server_map_error(s, m->request_id, rc, "job %u: its gradient log: %s", map->job,
				     dml_strerror(rc));
		return;
	}
	dml_server_clock_reset(s, spec->staleness, spec->workers);
	if (recovered == STORE_RECOVERED_RESUME) {
		resume_move(s, m, base);
		return;
	}
	for (size_t i = 0; recovered != STORE_RECOVERED_MOVED_IN && i < s->ntables; i++)
		dml_server_ranges_clear(&s->tables[i].moved_in);
	if (map->version > 1 && recovered != STORE_RECOVERED_ALL) {
		/* Joining a running job: other servers hold these rows and send
		 * them (they planned the move from the previous map), but for
		 * those that had moved in before a restart: the log held them. */
		for (size_t i = 0; i < s->ntables; i++) {
			struct table_entry *te = &s->tables[i];

			te->pending = te->served;
			memset(&te->served, 0, sizeof(te->served));
			for (size_t j = 0; j < te->moved_in.n; j++) {
				const struct key_range *k = &te->moved_in.r[j];

				if (!dml_server_ranges_cover(&te->pending, k->begin, k->end))
					continue;
				dml_server_ranges_sub(&te->pending, k->begin, k->end);
				dml_server_ranges_add(&te->served, k->begin, k->end);
			}
			dml_server_ranges_clear(&te->moved_in);
		}
		dml_info("job %u: joining at map v%llu: waiting for %s%s (staleness %lld, %u "
			 "workers expected)", map->job, (unsigned long long)map->version,
			 dml_server_line_text(&l), recovered == STORE_RECOVERED_MOVED_IN ?
			 ", but for the rows that had moved in before the restart (the log "
			 "held them)" : "", (long long)spec->staleness, spec->workers);
		s->job.remapping = 1;
		s->job.started_ns = s->job.last_rows_ns = dml_now_ns();
		s->job.rows_in = s->job.rows_out = 0;
		s->job.ack_id = m->request_id;
		s->job.ack_due = 1;
		dml_server_job_progress(s);
		return;
	}
	dml_info("job %u: installed map v%llu: %s (staleness %lld, %u workers expected)",
		 map->job, (unsigned long long)map->version, dml_server_line_text(&l),
		 (long long)spec->staleness, spec->workers);
	dml_server_map_ack(s, m->request_id);
}

static void install_new(struct dml_server *s, const Dml__Meta *m)
{
	Dml__ShardMap *base = dml_server_store_resume_map(s, m->shard_map);

	install_from(s, m, base);
	if (base)
		dml__shard_map__free_unpacked(base, NULL);
}

/* ---- frames from the scheduler and from peers --------------------------------- */

void dml_server_job_on_sched(struct dml_sched_link *l, const Dml__Meta *m, void *arg)
{
	struct dml_server *s = arg;
	const Dml__ShardMap *map = m->shard_map;
	char err[256] = "";
	int rc;

	if (m->type == DML__MSG_TYPE__CHECKPOINT) {
		dml_server_cut_on_sched(s, m);
		return;
	}
	if (m->type == DML__MSG_TYPE__EVICT) {
		if (m->job == s->job.id && m->job != 0)
			dml_server_evict(s, m->worker);
		else
			dml_debug("scheduler: evicting worker %u of job %u, not held here (job "
				  "%u)", m->worker, m->job, s->job.id);
		return;
	}
	if (m->type != DML__MSG_TYPE__SHARDMAP) {
		dml_debug("scheduler: ignoring a %s frame", dml_msg_type_name((int)m->type));
		return;
	}
	if (!s->job_mode) {
		dml_server_map_error(s, m->request_id, DML_ECONF, "this server serves the tables of its "
				     "config file; remove its [table] sections to take jobs from the "
				     "scheduler");
		return;
	}
	if (!map || !m->job_spec) {
		dml_server_map_error(s, m->request_id, DML_EINVAL, "SHARDMAP without shard_map and "
				     "job_spec");
		return;
	}
	if ((m->job && m->job != map->job) ||
	    (rc = map_check(m->job_spec, map, err, sizeof(err))) != 0) {
		dml_server_map_error(s, m->request_id, DML_EINVAL, "job %u: shard map v%llu: %s", map->job,
				     (unsigned long long)map->version,
				     err[0] ? err : "the frame's job and the map's differ");
		return;
	}
	if (map->job != s->job.id) {
		install_new(s, m);
	} else if (!spec_same_tables(s->job.spec, m->job_spec)) {
		dml_server_map_error(s, m->request_id, DML_EINVAL, "job %u: map v%llu describes other "
				     "tables than v%llu", map->job, (unsigned long long)map->version,
				     (unsigned long long)s->job.version);
	} else if (map->version > s->job.version) {
		dml_server_remap(s, m);
	} else if (map->version == s->job.version && s->job.remapping && dml_server_gains_pending(s)) {
		/* Sent again (the scheduler reconnected): ACK when complete. */
		s->job.ack_id = m->request_id;
		s->job.ack_due = 1;
	} else {
		dml_debug("job %u: map v%llu already installed (v%llu here)", map->job,
			  (unsigned long long)map->version, (unsigned long long)s->job.version);
		dml_server_map_ack(s, m->request_id);
	}
}

/* ---- life cycle ------------------------------------------------------------------ */

void dml_server_job_tick(struct dml_server *s)
{
	struct line l = { 0 };
	uint64_t now = dml_now_ns();

	if (!s->job.remapping || !dml_server_gains_pending(s) ||
	    now - s->job.last_rows_ns < (uint64_t)STALL_WARN_S * 1000000000u)
		return;
	s->job.last_rows_ns = now;
	for (size_t i = 0; i < s->ntables; i++) {
		const struct table_entry *te = &s->tables[i];

		for (size_t j = 0; j < te->pending.n; j++) {
			if (!dml_server_line_item(&l))
				continue;
			dml_server_line_range(&l, l.items > 1 ? ", " : "", &te->info, te->pending.r[j].begin,
					      te->pending.r[j].end);
			dml_server_line_add(&l, " of table %u", te->info.id);
		}
	}
	dml_warn("job %u: map v%llu: no rows arrived for %d s; still waiting for %s (rows "
		 "live only on the server that held them: if it restarted, they are lost)",
		 s->job.id, (unsigned long long)s->job.version, STALL_WARN_S, dml_server_line_text(&l));
}

void dml_server_job_stop(struct dml_server *s)
{
	for (struct mig_peer *p = s->job.peers; p; p = p->next) {
		size_t rows = 0;

		for (struct parcel *q = p->head; q; q = q->next)
			rows += q->nrows;
		if (p->head)
			dml_warn("job %u: stopping with %zu rows for server %u not delivered",
				 s->job.id, rows, p->node_id);
		evtimer_del(p->timer);
		if (p->conn) {
			dml_conn_set_arg(p->conn, NULL);
			dml_conn_abort(p->conn, DML_ECLOSED);
			p->conn = NULL;
		}
	}
}

void dml_server_job_free(struct dml_server *s)
{
	dml_server_peers_take_back(s, NULL);
	if (s->job.spec)
		dml__job_spec__free_unpacked(s->job.spec, NULL);
	if (s->job.map)
		dml__shard_map__free_unpacked(s->job.map, NULL);
	s->job.spec = NULL;
	s->job.map = NULL;
}
