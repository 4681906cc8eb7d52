/*
 * A remap, table by table (see job.c): a newer map of the same job gives
 * away every range this server served that the map gives to another server
 * (its rows leave the table as parcels, migrate.c) and makes pending every
 * range it gains, until MIGRATE frames cover it. Rows still in undelivered
 * parcels of an older remap count as this server's own: they are routed
 * again, or imported back. The SHARDMAP is ACKed when nothing is pending.
 *
 * Must never: serve a key after its rows were given away, or ACK a SHARDMAP
 * before every gained range arrived.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/conn.h"
#include "proto/dml_error.h"
#include "server/job_internal.h"
#include "proto/sched_link.h"
#include "proto/log.h"
#include "shard/mapplan.h"
#include "store/optim.h"
#include "shard/shardmap.h"
#include "store/table.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* ---- a remap, table by table ----------------------------------------------- */

/* What a remap does, for the log line and the parcels it makes. */
struct remap {
	struct dml_server *s;
	const Dml__ShardMap *old, *map;
	uint32_t me;
	struct line give, take;
	int failed;                /* a table operation failed (logged) */
};

static void remap_fail(struct remap *rm, const struct table_entry *te, const char *what,
		       int rc)
{
	dml_err("job %u: map v%llu: table %u: %s: %s", rm->s->job.id,
		(unsigned long long)rm->map->version, te->info.id, what, dml_strerror(rc));
	rm->failed = rc;
}

static void log_give(struct remap *rm, const Dml__TableInfo *info, uint64_t begin,
		     uint64_t end, uint32_t owner)
{
	if (!dml_server_line_item(&rm->give))
		return;
	dml_server_line_range(&rm->give, rm->give.items > 1 ? ", " : "giving ", info, begin, end);
	dml_server_line_add(&rm->give, " of table %u to server %u", info->id, owner);
}

/* Queue dense rows [begin, end) of te for owner, in parcels. */
static void give_dense(struct remap *rm, struct table_entry *te, uint64_t begin,
		       uint64_t end, uint32_t owner)
{
	size_t rf = dml_table_row_floats(te->table);
	size_t per = dml_server_parcel_rows(rm->s, rf, 1);
	struct mig_peer *p = dml_server_peer_get(rm->s, owner);

	for (uint64_t b = begin; b < end; b += per) {
		uint64_t e = end - b > per ? b + per : end;
		struct parcel *q = dml_server_parcel_new(te->info.id, 1, b, e, NULL, NULL, 0, rf);
		int rc;

		q->nrows = (size_t)(e - b);
		q->rows = dml_xmalloc(q->nrows * rf * sizeof(float));
		rc = dml_table_export_range(te->table, b, e, q->rows);
		if (rc) {
			remap_fail(rm, te, "export", rc);
			dml_server_parcel_free(q);
			return;
		}
		dml_server_peer_enqueue(p, q);
	}
}

/* Queue sorted sparse rows (hashes in [begin, end)) for owner, in parcels
 * that each complete a hash range; rows of one hash stay together. */
static void give_sorted(struct remap *rm, uint32_t table, uint64_t begin, uint64_t end,
			const uint64_t *keys, const float *rows, size_t n, size_t rf,
			uint32_t owner)
{
	struct mig_peer *p = dml_server_peer_get(rm->s, owner);
	size_t per = dml_server_parcel_rows(rm->s, rf, 0), i = 0;
	uint64_t b = begin;

	do {
		size_t j = n - i > per ? i + per : n;
		uint64_t e;

		while (j < n && j > i &&
		       dml_shard_key_hash(keys[j]) == dml_shard_key_hash(keys[j - 1]))
			j++;
		e = j < n ? dml_shard_key_hash(keys[j]) : end;
		dml_server_peer_enqueue(p, dml_server_parcel_new(table, 0, b, e, keys + i, rows + i * rf,
							       j - i, rf));
		b = e;
		i = j;
	} while (i < n);
}

static void give_sparse(struct remap *rm, struct table_entry *te, uint64_t begin,
			uint64_t end, uint32_t owner)
{
	size_t rf = dml_table_row_floats(te->table), n = 0;
	uint64_t *keys;
	float *rows;
	int rc;

	rc = dml_table_export_hashed(te->table, dml_shard_key_hash, begin, end, &keys, &rows,
				     &n);
	if (rc == 0)
		rc = dml_table_remove_hashed(te->table, dml_shard_key_hash, begin, end, NULL);
	if (rc)
		remap_fail(rm, te, "export", rc);
	else
		give_sorted(rm, te->info.id, begin, end, keys, rows, n, rf, owner);
	free(keys);
	free(rows);
}

/* Give away every piece of what te serves that the new map gives another
 * server. */
static void remap_give(struct remap *rm, struct table_entry *te)
{
	const Dml__ShardMap *map = rm->map;

	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		struct key_ranges piece = { 0 }, window = { 0 };

		if (r->table != te->info.id || r->server == rm->me)
			continue;
		dml_server_ranges_add(&window, r->begin, r->end);
		for (size_t j = 0; j < te->served.n; j++)
			dml_server_ranges_add(&piece, te->served.r[j].begin, te->served.r[j].end);
		dml_server_ranges_intersect(&piece, &window);
		for (size_t j = 0; j < piece.n; j++) {
			uint64_t b = piece.r[j].begin, e = piece.r[j].end;

			if (te->info.dense)
				give_dense(rm, te, b, e, r->server);
			else
				give_sparse(rm, te, b, e, r->server);
			dml_server_ranges_sub(&te->served, b, e);
			log_give(rm, &te->info, b, e, r->server);
		}
		dml_server_ranges_clear(&piece);
		dml_server_ranges_clear(&window);
	}
}

/* Index of the first sorted sparse row of q whose hash is >= h. */
static size_t parcel_find(const struct parcel *q, uint64_t h)
{
	size_t lo = 0, hi = q->nrows;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (dml_shard_key_hash(q->keys[mid]) < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* A parcel that was not delivered when a newer map came: each piece goes
 * to its owner under the new map, ours back into the table. */
static void remap_route_back(struct remap *rm, struct table_entry *te, struct parcel *q)
{
	const Dml__ShardMap *map = rm->map;

	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];
		uint64_t b = r->begin > q->begin ? r->begin : q->begin;
		uint64_t e = r->end < q->end ? r->end : q->end;
		size_t first, n;
		int rc;

		if (r->table != q->table || b >= e)
			continue;
		if (q->dense) {
			first = (size_t)(b - q->begin);
			n = (size_t)(e - b);
		} else {
			first = parcel_find(q, b);
			n = parcel_find(q, e) - first;
		}
		if (r->server != rm->me) {
			dml_server_peer_enqueue(dml_server_peer_get(rm->s, r->server),
						dml_server_parcel_new(q->table, q->dense, b, e,
						q->dense ? NULL : q->keys + first,
						q->rows + first * q->row_floats, n,
						q->row_floats));
			log_give(rm, &te->info, b, e, r->server);
			continue;
		}
		rc = q->dense ? dml_table_import_range(te->table, b, e,
						       q->rows + first * q->row_floats)
			      : dml_table_import_keys(te->table, q->keys + first, n,
						      q->rows + first * q->row_floats);
		if (rc) {
			remap_fail(rm, te, "taking rows back", rc);
			continue;
		}
		dml_server_ranges_add(&te->served, b, e);
	}
}

/* Who held [begin, end) under the old map: the owner of its first key. */
static uint32_t old_owner(const struct remap *rm, uint32_t table, uint64_t begin)
{
	for (size_t i = 0; rm->old && i < rm->old->n_ranges; i++) {
		const Dml__ShardRange *r = rm->old->ranges[i];

		if (r->table == table && r->begin <= begin && begin < r->end)
			return r->server;
	}
	return 0;
}

/*
 * What the new map gives this server and it neither serves nor awaits:
 * pending, split where the old owner changes, unless nobody held it (a
 * range no old server had starts fresh so nothing waits forever).
 */
static void remap_gain(struct remap *rm, struct table_entry *te,
		       const struct key_ranges *mine)
{
	struct key_ranges gain = { 0 };

	for (size_t i = 0; i < mine->n; i++)
		dml_server_ranges_add(&gain, mine->r[i].begin, mine->r[i].end);
	for (size_t i = 0; i < te->served.n; i++)
		dml_server_ranges_sub(&gain, te->served.r[i].begin, te->served.r[i].end);
	for (size_t i = 0; i < te->pending.n; i++)
		dml_server_ranges_sub(&gain, te->pending.r[i].begin, te->pending.r[i].end);
	for (size_t i = 0; i < gain.n; i++) {
		uint64_t b = gain.r[i].begin;

		while (b < gain.r[i].end) {
			uint32_t from = old_owner(rm, te->info.id, b);
			uint64_t e = gain.r[i].end;

			/* The piece ends where the old owner's range does. */
			for (size_t j = 0; rm->old && j < rm->old->n_ranges; j++) {
				const Dml__ShardRange *r = rm->old->ranges[j];

				if (r->table == te->info.id && r->begin > b && r->begin < e)
					e = r->begin;
			}
			if (from && from != rm->me && dml_server_map_server(rm->old, from)) {
				dml_server_ranges_add(&te->pending, b, e);
				if (dml_server_line_item(&rm->take)) {
					dml_server_line_range(&rm->take, rm->take.items > 1 ? ", "
							      : "receiving ", &te->info, b, e);
					dml_server_line_add(&rm->take, " of table %u from server %u",
							    te->info.id, from);
				}
			} else {
				dml_server_ranges_add(&te->served, b, e);
				if (dml_server_line_item(&rm->take)) {
					dml_server_line_range(&rm->take, rm->take.items > 1 ? ", "
							      : "receiving ", &te->info, b, e);
					dml_server_line_add(&rm->take, " of table %u fresh (no server held "
							    "them)", te->info.id);
				}
			}
			b = e;
		}
	}
	dml_server_ranges_clear(&gain);
}

static void remap_table(struct remap *rm, struct table_entry *te, struct parcel **back)
{
	struct key_ranges mine = { 0 };
	struct parcel **pp = back;
	int rc;

	dml_server_map_ranges(rm->map, te->info.id, rm->me, &mine);
	remap_give(rm, te);
	dml_server_ranges_intersect(&te->served, &mine);
	dml_server_ranges_intersect(&te->pending, &mine);
	if (te->info.dense) {
		/* One contiguous range per server (the map was checked). */
		uint64_t b = mine.n ? mine.r[0].begin : 0, e = mine.n ? mine.r[0].end : 0;

		if ((rc = dml_table_set_range(te->table, b, e)) != 0)
			remap_fail(rm, te, "resize", rc);
	}
	while (*pp) {
		struct parcel *q = *pp;

		if (q->table != te->info.id) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		remap_route_back(rm, te, q);
		dml_server_parcel_free(q);
	}
	remap_gain(rm, te, &mine);
	dml_server_ranges_clear(&mine);
}

int dml_server_gains_pending(const struct dml_server *s)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].pending.n)
			return 1;
	return 0;
}

/* After every change: ACK the map once nothing is pending, and log the end
 * of the remap once every row given away has been delivered too. */
void dml_server_job_progress(struct dml_server *s)
{
	if (!s->job.remapping || dml_server_gains_pending(s))
		return;
	if (s->job.ack_due) {
		s->job.ack_due = 0;
		dml_server_map_ack(s, s->job.ack_id);
	}
	if (s->job.peers)
		return;
	s->job.remapping = 0;
	dml_info("job %u: map v%llu complete in %llu ms (moved %llu rows)", s->job.id,
		 (unsigned long long)s->job.version,
		 (unsigned long long)((dml_now_ns() - s->job.started_ns) / 1000000u),
		 (unsigned long long)(s->job.rows_in + s->job.rows_out));
	dml_server_store_remapped(s);
}

/* Hold copies of spec and map (the caller disposed of the old map). */
void dml_server_job_set_map(struct dml_server *s, const Dml__JobSpec *spec,
			    const Dml__ShardMap *map)
{
	if (s->job.spec)
		dml__job_spec__free_unpacked(s->job.spec, NULL);
	s->job.spec = dml_server_spec_copy(spec);
	s->job.map = dml_server_map_copy(map);
	s->job.id = map->job;
	s->job.version = map->version;
	s->shard_index = 0;
	s->shard_count = (uint32_t)map->n_servers;
	for (size_t i = 0; i < map->n_servers; i++)
		if (map->servers[i]->node_id == s->conf->node_id)
			s->shard_index = (uint32_t)i;
	dml_server_welcome_rebuild(s);
}

void dml_server_remap(struct dml_server *s, const Dml__Meta *m)
{
	struct remap rm = { 0 };
	Dml__ShardMap *old = s->job.map;
	struct parcel *back = NULL;

	rm.s = s;
	rm.me = s->conf->node_id;
	rm.old = old;
	/* Rows about to leave carry every push acknowledged for them. */
	dml_server_step_reset(s);
	/* Undelivered rows of an older remap are ours again until re-planned. */
	dml_server_peers_take_back(s, &back);
	s->job.map = NULL;
	dml_server_job_set_map(s, m->job_spec, m->shard_map);
	rm.map = s->job.map;
	s->job.started_ns = dml_now_ns();
	s->job.rows_in = s->job.rows_out = 0;
	for (size_t i = 0; i < s->ntables; i++)
		remap_table(&rm, &s->tables[i], &back);
	/* Parcels of tables the job does not have cannot exist (same tables). */
	while (back) {
		struct parcel *q = back;

		back = q->next;
		dml_server_parcel_free(q);
	}
	if (old)
		dml__shard_map__free_unpacked(old, NULL);
	dml_server_held_recheck(s);
	dml_info("job %u: map v%llu: %s%s%s", s->job.id, (unsigned long long)s->job.version,
		 rm.give.items ? dml_server_line_text(&rm.give) : "giving nothing",
		 "; ", rm.take.items ? dml_server_line_text(&rm.take) : "receiving nothing");
	s->job.remapping = 1;
	s->job.last_rows_ns = s->job.started_ns;
	s->job.ack_id = m->request_id;
	s->job.ack_due = 1;
	if (rm.failed) {
		/* Logged where it failed; the scheduler hears of it too. */
		s->job.ack_due = 0;
		dml_server_map_error(s, m->request_id, rm.failed, "job %u: map v%llu: %s", s->job.id,
				     (unsigned long long)s->job.version, dml_strerror(rm.failed));
	}
	for (struct mig_peer *p = s->job.peers; p; p = p->next)
		dml_server_peer_connect(p);
	dml_server_job_progress(s);
}
