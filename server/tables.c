/*
 * The tables a dml-server holds when its config file names them (each split
 * evenly by "shard = i/n"), the table list its WELCOME carries, and the
 * buffer that pull replies and scaled pushes are assembled in.
 *
 * Must never: serve a key outside the range the config gives this server.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "server/row_snapshot.h"
#include "server/server_internal.h"
#include "shard/shardmap.h"
#include "store/table.h"
#include "proto/util.h"

/* ---- tables ------------------------------------------------------------- */

struct table_entry *dml_server_find_table(struct dml_server *s, uint32_t id)
{
	for (size_t i = 0; i < s->ntables; i++)
		if (s->tables[i].info.id == id)
			return &s->tables[i];
	return NULL;
}

/* A [table] section as the table storage wants it. */
static void table_conf_from(const struct dml_server_table_conf *tc, uint64_t begin,
			    uint64_t end, struct dml_table_conf *t)
{
	int dense = tc->kind == DML_TABLE_DENSE;

	memset(t, 0, sizeof(*t));
	t->id = tc->id;
	t->width = tc->width;
	t->kind = (enum dml_table_kind)tc->kind;
	t->key_begin = dense ? begin : 0;
	t->key_end = dense ? end : 0;
	t->capacity_hint = tc->capacity;
	t->init = (enum dml_init_kind)tc->init;
	t->init_scale = (float)tc->init_scale;
	t->seed = tc->seed;
	t->optim.kind = (enum dml_optim_kind)tc->optimizer;
	t->optim.lr = (float)tc->lr;
	t->optim.weight_decay = (float)tc->weight_decay;
	t->optim.momentum = (float)tc->momentum;
	t->optim.beta1 = (float)tc->beta1;
	t->optim.beta2 = (float)tc->beta2;
	t->optim.eps = (float)tc->epsilon;
	t->optim.lr_decay = (float)tc->lr_decay;
}

/* The config file's tables: each split evenly by "shard = i/n". */
int dml_server_build_tables(struct dml_server *s)
{
	const struct dml_server_conf *c = s->conf;

	s->tables = dml_xcalloc(c->ntables, sizeof(*s->tables));
	for (size_t i = 0; i < c->ntables; i++) {
		const struct dml_server_table_conf *tc = &c->tables[i];
		struct table_entry *te = &s->tables[i];
		struct dml_table_conf t;
		int dense = tc->kind == DML_TABLE_DENSE, rc;
		uint64_t begin, end;

		dml_shard_even_range(dense ? tc->keys : DML_SHARD_HASH_SPACE, c->shard_index,
				     c->shard_count, &begin, &end);
		table_conf_from(tc, begin, end, &t);
		rc = dml_table_new(&t, &te->table);
		if (rc) {
			dml_err("table %u: %s", tc->id, dml_strerror(rc));
			return rc;
		}
		s->ntables++;
		dml__table_info__init(&te->info);
		te->info.id = tc->id;
		te->info.dense = dense;
		te->info.width = tc->width;
		te->info.keys = dense ? tc->keys : 0;
		dml_server_ranges_add(&te->served, begin, end);
		dml_info("table %u: %s, width %u, %s %llu..%llu", tc->id,
			 dense ? "dense" : "sparse", tc->width, dense ? "keys" : "key hashes",
			 (unsigned long long)begin, (unsigned long long)end);
	}
	s->shard_index = c->shard_index;
	s->shard_count = c->shard_count;
	dml_server_welcome_rebuild(s);
	return 0;
}

void dml_server_tables_free(struct dml_server *s)
{
	/* A snapshot watches them. */
	dml_server_snap_finish(s);
	for (size_t i = 0; i < s->ntables; i++) {
		dml_table_free(s->tables[i].table);
		dml_server_ranges_clear(&s->tables[i].served);
		dml_server_ranges_clear(&s->tables[i].pending);
		dml_server_ranges_clear(&s->tables[i].moved_in);
		dml_server_step_free(&s->tables[i]);
	}
	free(s->tables);
	s->tables = NULL;
	s->ntables = 0;
	s->step_min_clock = 0;
}

/* Append one TableInfo for [begin, end) of te. */
static void welcome_add(struct dml_server *s, const struct table_entry *te, uint64_t begin,
			uint64_t end, size_t *cap)
{
	Dml__TableInfo *t;

	if (s->nwinfos == *cap) {
		*cap = *cap ? *cap * 2 : 8;
		s->winfo = dml_xrealloc(s->winfo, *cap * sizeof(*s->winfo));
	}
	t = &s->winfo[s->nwinfos++];
	*t = te->info;
	t->key_begin = begin;
	t->key_end = end;
}

void dml_server_welcome_rebuild(struct dml_server *s)
{
	const Dml__ShardMap *map = s->job.map;
	size_t cap = 0;

	free(s->winfo);
	free(s->winfos);
	s->winfo = NULL;
	s->winfos = NULL;
	s->nwinfos = 0;
	for (size_t i = 0; i < s->ntables; i++) {
		const struct table_entry *te = &s->tables[i];

		if (!s->job_mode) {
			for (size_t j = 0; j < te->served.n; j++)
				welcome_add(s, te, te->served.r[j].begin, te->served.r[j].end,
					    &cap);
			continue;
		}
		for (size_t j = 0; map && j < map->n_ranges; j++) {
			const Dml__ShardRange *r = map->ranges[j];

			if (r->table == te->info.id && r->server == s->conf->node_id)
				welcome_add(s, te, r->begin, r->end, &cap);
		}
	}
	/* Pointers last: the array above may have moved while it grew. */
	s->winfos = dml_xcalloc(s->nwinfos ? s->nwinfos : 1, sizeof(*s->winfos));
	for (size_t i = 0; i < s->nwinfos; i++)
		s->winfos[i] = &s->winfo[i];
}

float *dml_server_scratch(struct dml_server *s, uint64_t floats)
{
	if (floats > s->scratch_cap) {
		float *p = malloc(floats * sizeof(float));

		if (!p)
			return NULL;
		free(s->scratch);
		s->scratch = p;
		s->scratch_cap = floats;
	}
	return s->scratch;
}
