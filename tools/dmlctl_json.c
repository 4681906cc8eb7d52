/*
 * dmlctl's JSON: a small writer (struct ctl_json in dmlctl.h) and the
 * scheduler's answers as JSON objects: the nodes, a job's spec, status,
 * workers and checkpoints, and a shard map.
 *
 * Must never: copy a byte a peer sent unescaped (strings are escaped and
 * bad UTF-8 becomes U+FFFD), or print nan or inf (they become null).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/dmlctl.h"
#include "proto/job_spec.h"
#include "proto/table_spec.h"
#include "proto/util.h"

/* ---- JSON ---------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (NUL-terminated), or 0. */
static size_t utf8_len(const unsigned char *s)
{
	uint32_t cp;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	/* A NUL fails the continuation test, so this never reads past the end. */
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* A JSON string: quotes, backslashes and controls escaped, bad UTF-8 as U+FFFD. */
static void json_string(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', out);
	while (*p) {
		size_t n = utf8_len(p);

		if (n == 0) {
			fputs("\\ufffd", out);
			p++;
			continue;
		}
		if (n > 1) {
			fwrite(p, 1, n, out);
			p += n;
			continue;
		}
		switch (*p) {
		case '"': fputs("\\\"", out); break;
		case '\\': fputs("\\\\", out); break;
		case '\n': fputs("\\n", out); break;
		case '\r': fputs("\\r", out); break;
		case '\t': fputs("\\t", out); break;
		case '\b': fputs("\\b", out); break;
		case '\f': fputs("\\f", out); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(out, "\\u%04x", *p);
			else
				fputc(*p, out);
		}
		p++;
	}
	fputc('"', out);
}

static void json_key(struct ctl_json *j, const char *key)
{
	if (j->more)
		fputc(',', j->out);
	if (key) {
		json_string(j->out, key);
		fputc(':', j->out);
	}
	j->more = 1;
}

void ctl_json_open(struct ctl_json *j, const char *key, char bracket)
{
	json_key(j, key);
	fputc(bracket, j->out);
	j->more = 0;
}

void ctl_json_close(struct ctl_json *j, char bracket)
{
	fputc(bracket, j->out);
	j->more = 1;
}

void ctl_json_str(struct ctl_json *j, const char *key, const char *v)
{
	json_key(j, key);
	json_string(j->out, v);
}

void ctl_json_u64(struct ctl_json *j, const char *key, uint64_t v)
{
	json_key(j, key);
	fprintf(j->out, "%llu", (unsigned long long)v);
}

static void json_i64(struct ctl_json *j, const char *key, int64_t v)
{
	json_key(j, key);
	fprintf(j->out, "%lld", (long long)v);
}

void ctl_json_num(struct ctl_json *j, const char *key, double v)
{
	json_key(j, key);
	if (isfinite(v))
		fprintf(j->out, "%.15g", v);
	else
		fputs("null", j->out);
}

static void json_bool(struct ctl_json *j, const char *key, int v)
{
	json_key(j, key);
	fputs(v ? "true" : "false", j->out);
}

static void json_null(struct ctl_json *j, const char *key)
{
	json_key(j, key);
	fputs("null", j->out);
}

/* ---- nodes ------------------------------------------------------------------------- */

static void json_profile(struct ctl_json *j, const char *key, const Dml__Profile *p)
{
	if (!p) {
		json_null(j, key);
		return;
	}
	ctl_json_open(j, key, '{');
	ctl_json_str(j, "device", p->device);
	ctl_json_u64(j, "cores", p->cores);
	ctl_json_u64(j, "memory_bytes", p->memory_bytes);
	ctl_json_num(j, "gflops", p->gflops);
	ctl_json_num(j, "examples_per_s", p->examples_per_s);
	ctl_json_num(j, "link_mbps", p->link_mbps);
	ctl_json_close(j, '}');
}

/* An aggregator's counters (AggregatorStats), null when it sent none. */
static void json_aggregator(struct ctl_json *j, const char *key,
			    const Dml__AggregatorStats *a)
{
	if (!a) {
		json_null(j, key);
		return;
	}
	ctl_json_open(j, key, '{');
	ctl_json_u64(j, "pushes_in", a->pushes_in);
	ctl_json_u64(j, "pushes_forwarded", a->pushes_forwarded);
	ctl_json_u64(j, "pulls_in", a->pulls_in);
	ctl_json_u64(j, "pulls_forwarded", a->pulls_forwarded);
	ctl_json_u64(j, "value_bytes", a->value_bytes);
	ctl_json_u64(j, "sent_bytes", a->sent_bytes);
	ctl_json_u64(j, "bytes_in", a->bytes_in);
	ctl_json_u64(j, "bytes_out", a->bytes_out);
	ctl_json_close(j, '}');
}

void ctl_print_nodes_json(FILE *out, const Dml__Meta *r)
{
	struct ctl_json j = { out, 0 };

	ctl_json_open(&j, NULL, '{');
	ctl_json_open(&j, "nodes", '[');
	for (size_t i = 0; i < r->n_nodes; i++) {
		const Dml__NodeInfo *n = r->nodes[i];
		char shard[32];

		ctl_json_open(&j, NULL, '{');
		ctl_json_str(&j, "role", ctl_role_name(n->role));
		ctl_json_u64(&j, "id", n->node_id);
		ctl_json_str(&j, "zone", n->zone);
		ctl_json_str(&j, "address", n->address);
		ctl_json_str(&j, "state", ctl_node_state_name(n->state));
		ctl_json_u64(&j, "last_heartbeat_ms", n->last_heartbeat_ms);
		ctl_json_str(&j, "reason", n->reason);
		if (n->shard_count) {
			snprintf(shard, sizeof(shard), "%u/%u", n->shard_index,
				 n->shard_count);
			ctl_json_str(&j, "shard", shard);
		} else {
			json_null(&j, "shard");
		}
		json_profile(&j, "profile", n->profile);
		json_aggregator(&j, "aggregator", n->aggregator);
		ctl_json_close(&j, '}');
	}
	ctl_json_close(&j, ']');
	ctl_json_close(&j, '}');
	fputc('\n', out);
}


/* ---- jobs as JSON ------------------------------------------------------------------ */


/* Each link class's codecs, defaults resolved (dml-job(5), "Codecs"). */
static void json_table_codecs(struct ctl_json *j, const Dml__TableSpec *t)
{
	static const char *const keys[2][2] = {
		{ "codec", "pull_codec" }, { "codec_cross_zone", "pull_codec_cross_zone" },
	};
	char name[32];

	for (int cross = 0; cross <= 1; cross++) {
		struct dml_link_codecs lc;

		if (dml_table_spec_codecs(t, cross, &lc, NULL, 0))
			continue;
		ctl_json_str(j, keys[cross][0], dml_codec_format(&lc.push, name, sizeof(name)));
		ctl_json_str(j, keys[cross][1], dml_codec_format(&lc.pull, name, sizeof(name)));
	}
}

static void json_table_spec(struct ctl_json *j, const Dml__TableSpec *t)
{
	ctl_json_open(j, NULL, '{');
	ctl_json_u64(j, "id", t->id);
	json_bool(j, "dense", t->dense);
	ctl_json_u64(j, "width", t->width);
	ctl_json_u64(j, "keys", t->keys);
	ctl_json_u64(j, "capacity", t->capacity);
	ctl_json_str(j, "init", t->init);
	ctl_json_num(j, "init_scale", t->init_scale);
	ctl_json_u64(j, "seed", t->seed);
	ctl_json_str(j, "optimizer", t->optimizer);
	ctl_json_num(j, "lr", t->lr);
	ctl_json_num(j, "weight_decay", t->weight_decay);
	ctl_json_num(j, "momentum", t->momentum);
	ctl_json_num(j, "beta1", t->beta1);
	ctl_json_num(j, "beta2", t->beta2);
	ctl_json_num(j, "epsilon", t->epsilon);
	ctl_json_num(j, "lr_decay", t->lr_decay);
	json_table_codecs(j, t);
	ctl_json_close(j, '}');
}

static void json_job_spec(struct ctl_json *j, const char *key, const Dml__JobSpec *sp)
{
	if (!sp) {
		json_null(j, key);
		return;
	}
	ctl_json_open(j, key, '{');
	ctl_json_str(j, "name", sp->name);
	ctl_json_str(j, "app", sp->app);
	ctl_json_str(j, "data", sp->data);
	ctl_json_str(j, "test_data", sp->test_data);
	ctl_json_open(j, "tables", '[');
	for (size_t i = 0; i < sp->n_tables; i++)
		json_table_spec(j, sp->tables[i]);
	ctl_json_close(j, ']');
	json_i64(j, "staleness", sp->staleness);
	ctl_json_u64(j, "batch_size", sp->batch_size);
	ctl_json_u64(j, "max_clocks", sp->max_clocks);
	ctl_json_num(j, "max_epochs", sp->max_epochs);
	ctl_json_num(j, "target", sp->target);
	ctl_json_str(j, "metric", sp->metric);
	ctl_json_u64(j, "workers", sp->workers);
	ctl_json_open(j, "worker_ids", '[');
	for (size_t i = 0; i < sp->n_worker_ids; i++)
		ctl_json_u64(j, NULL, sp->worker_ids[i]);
	ctl_json_close(j, ']');
	ctl_json_u64(j, "partitions", sp->partitions);
	ctl_json_u64(j, "examples", sp->examples);
	ctl_json_u64(j, "dim", sp->dim);
	ctl_json_str(j, "hidden", sp->hidden);
	ctl_json_u64(j, "eval_every", sp->eval_every);
	ctl_json_u64(j, "dead_after_ms", sp->dead_after_ms);
	ctl_json_num(j, "min_rate", sp->min_rate);
	ctl_json_u64(j, "seed", sp->seed);
	ctl_json_close(j, '}');
}

/* "links": a LinkTraffic, all zeros when absent. */
static void json_links(struct ctl_json *j, const Dml__LinkTraffic *lt)
{
	static const Dml__LinkTraffic none = DML__LINK_TRAFFIC__INIT;

	if (!lt)
		lt = &none;
	ctl_json_open(j, "links", '{');
	ctl_json_u64(j, "within_zone_float_bytes", lt->within_zone_float_bytes);
	ctl_json_u64(j, "within_zone_sent_bytes", lt->within_zone_sent_bytes);
	ctl_json_u64(j, "cross_zone_float_bytes", lt->cross_zone_float_bytes);
	ctl_json_u64(j, "cross_zone_sent_bytes", lt->cross_zone_sent_bytes);
	ctl_json_open(j, "residual_norms", '[');
	for (size_t i = 0; i < lt->n_residual_tables && i < lt->n_residual_norms; i++) {
		ctl_json_open(j, NULL, '{');
		ctl_json_u64(j, "table", lt->residual_tables[i]);
		ctl_json_num(j, "norm", lt->residual_norms[i]);
		ctl_json_close(j, '}');
	}
	ctl_json_close(j, ']');
	ctl_json_close(j, '}');
}

static void json_worker_status(struct ctl_json *j, const Dml__WorkerStatus *w)
{
	ctl_json_open(j, NULL, '{');
	ctl_json_u64(j, "worker", w->worker);
	ctl_json_str(j, "state", ctl_node_state_name(w->state));
	ctl_json_u64(j, "clock", w->clock);
	ctl_json_u64(j, "examples", w->examples);
	ctl_json_num(j, "examples_per_s", w->examples_per_s);
	ctl_json_num(j, "loss", w->loss);
	ctl_json_u64(j, "partitions", w->partitions);
	ctl_json_str(j, "reason", w->reason);
	ctl_json_num(j, "compute_s", w->compute_s);
	ctl_json_num(j, "wait_s", w->wait_s);
	ctl_json_num(j, "held_s", w->held_s);
	ctl_json_num(j, "cpu_s", w->cpu_s);
	ctl_json_num(j, "cores", w->cores);
	ctl_json_num(j, "link_bps", w->link_bps);
	ctl_json_num(j, "rate", w->rate);
	ctl_json_u64(j, "batch_size", w->batch_size);
	ctl_json_num(j, "speed", w->speed);
	ctl_json_str(j, "zone", w->zone);
	ctl_json_str(j, "aggregator", w->aggregator);
	json_links(j, w->links);
	ctl_json_close(j, '}');
}

void ctl_json_checkpoints(struct ctl_json *j, const Dml__JobStatus *st)
{
	ctl_json_open(j, "checkpoints", '[');
	for (size_t i = 0; i < st->n_checkpoints; i++) {
		ctl_json_open(j, NULL, '{');
		ctl_json_u64(j, "clock", st->checkpoints[i]->clock);
		ctl_json_u64(j, "bytes", st->checkpoints[i]->bytes);
		ctl_json_u64(j, "age_ms", st->checkpoints[i]->age_ms);
		ctl_json_close(j, '}');
	}
	ctl_json_close(j, ']');
	ctl_json_str(j, "checkpoint_state", st->checkpoint_state);
}

void ctl_json_job_status(struct ctl_json *j, const char *key, const Dml__JobStatus *st)
{
	ctl_json_open(j, key, '{');
	ctl_json_u64(j, "id", st->id);
	ctl_json_str(j, "name", st->name);
	ctl_json_str(j, "state", dml_job_state_name(st->state));
	ctl_json_str(j, "reason", st->reason);
	json_job_spec(j, "spec", st->spec);
	ctl_json_u64(j, "clock", st->clock);
	ctl_json_u64(j, "examples", st->examples);
	ctl_json_u64(j, "data_examples", st->data_examples);
	ctl_json_num(j, "epochs_min", st->epochs_min);
	ctl_json_num(j, "epochs_max", st->epochs_max);
	ctl_json_num(j, "examples_per_s", st->examples_per_s);
	ctl_json_num(j, "loss", st->loss);
	ctl_json_num(j, "metric", st->has_metric ? st->metric : NAN);
	json_bool(j, "has_metric", st->has_metric);
	ctl_json_open(j, "workers", '[');
	for (size_t i = 0; i < st->n_workers; i++)
		json_worker_status(j, st->workers[i]);
	ctl_json_close(j, ']');
	json_links(j, st->links);
	ctl_json_open(j, "zones", '[');
	for (size_t i = 0; i < st->n_zones; i++) {
		ctl_json_open(j, NULL, '{');
		ctl_json_str(j, "zone", st->zones[i]->zone);
		ctl_json_u64(j, "workers", st->zones[i]->workers);
		ctl_json_num(j, "examples_per_s", st->zones[i]->examples_per_s);
		ctl_json_close(j, '}');
	}
	ctl_json_close(j, ']');
	ctl_json_open(j, "aggregators", '[');
	for (size_t i = 0; i < st->n_aggregators; i++) {
		const Dml__NodeInfo *n = st->aggregators[i];

		ctl_json_open(j, NULL, '{');
		ctl_json_u64(j, "id", n->node_id);
		ctl_json_str(j, "zone", n->zone);
		ctl_json_str(j, "address", n->address);
		json_aggregator(j, "counters", n->aggregator);
		ctl_json_close(j, '}');
	}
	ctl_json_close(j, ']');
	ctl_json_u64(j, "age_ms", st->age_ms);
	ctl_json_u64(j, "run_ms", st->run_ms);
	ctl_json_u64(j, "shard_map_version", st->shard_map_version);
	ctl_json_u64(j, "assignment_version", st->assignment_version);
	ctl_json_checkpoints(j, st);
	ctl_json_open(j, "events", '[');
	for (size_t i = 0; i < st->n_events; i++)
		ctl_json_str(j, NULL, st->events[i]);
	ctl_json_close(j, ']');
	ctl_json_close(j, '}');
}

void ctl_json_shard_map(struct ctl_json *j, const char *key, const Dml__ShardMap *map)
{
	ctl_json_open(j, key, '{');
	ctl_json_u64(j, "job", map->job);
	ctl_json_u64(j, "version", map->version);
	ctl_json_open(j, "servers", '[');
	for (size_t i = 0; i < map->n_servers; i++) {
		ctl_json_open(j, NULL, '{');
		ctl_json_u64(j, "node_id", map->servers[i]->node_id);
		ctl_json_str(j, "address", map->servers[i]->address);
		ctl_json_close(j, '}');
	}
	ctl_json_close(j, ']');
	ctl_json_open(j, "ranges", '[');
	for (size_t i = 0; i < map->n_ranges; i++) {
		const Dml__ShardRange *r = map->ranges[i];

		ctl_json_open(j, NULL, '{');
		ctl_json_u64(j, "table", r->table);
		ctl_json_u64(j, "begin", r->begin);
		ctl_json_u64(j, "end", r->end);
		ctl_json_u64(j, "server", r->server);
		ctl_json_close(j, '}');
	}
	ctl_json_close(j, ']');
	ctl_json_close(j, '}');
}

