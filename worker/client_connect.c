/*
 * libdml's connect and close (client_internal.h): installing a shard map,
 * from the servers' handshakes or from dml-sched, connecting to the
 * scheduler and to every server within connect_timeout_ms, and freeing it
 * all.
 *
 * Must never: leave a half-built handle behind a failed dml_connect.
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "proto/auth.h"
#include "worker/client_internal.h"
#include "proto/conn.h"
#include "worker/dml.h"
#include "proto/log.h"
#include "shard/shardmap.h"
#include "proto/util.h"

/* ---- shard maps ------------------------------------------------------------ */

static struct link *link_find(struct dml *d, uint32_t node_id)
{
	for (uint32_t i = 0; i < d->nlinks; i++)
		if (d->links[i]->node_id == node_id)
			return d->links[i];
	return NULL;
}

/* The link to a server of a new map: the one we have, or a new one. */
static struct link *map_link(struct dml *d, const struct dml_client_server *s)
{
	struct link *l = link_find(d, s->node_id);

	if (!l) {
		l = dml_client_link_add(d, s->host, s->port);
		l->node_id = s->node_id;
		/* Given up on after reconnect_timeout_ms if it never answers. */
		l->lost_since_ns = dml_now_ns();
		dml_client_link_connect(l);
		return l;
	}
	if (strcmp(l->host, s->host) != 0 || l->port != s->port) {
		/* Moved: the next connection goes to the new address. */
		dml_info("server %u moved from %s:%u to %s:%u", s->node_id, l->host, l->port,
			 s->host, s->port);
		snprintf(l->host, sizeof(l->host), "%s", s->host);
		l->port = s->port;
	}
	if (l->failed) {
		/* Back in a newer map: worth another try. */
		l->failed = 0;
		l->fatal = 0;
		l->lost_since_ns = dml_now_ns();
		l->retry_at_ns = 0;
	}
	return l;
}

/* Route by a newer map from now on. Takes m's shard map; m keeps its servers. */
static void map_install(struct dml *d, struct dml_client_map *m)
{
	struct link **route = dml_xcalloc(m->nservers, sizeof(*route));

	if (d->conf.job == 0) {
		/* "The running job": pin the one the scheduler named. */
		d->conf.job = m->job;
		d->cc.job = m->job;
		dml_client_sched_set_job(d->sched, m->job);
	}
	for (uint32_t i = 0; i < d->nlinks; i++)
		d->links[i]->retired = 1;
	for (uint32_t i = 0; i < m->nservers; i++) {
		route[i] = map_link(d, &m->servers[i]);
		route[i]->retired = 0;
	}
	free(d->route);
	d->route = route;
	d->nroute = m->nservers;
	dml_shard_map_destroy(&d->map);
	d->map = m->shard;
	memset(&m->shard, 0, sizeof(m->shard));
	dml_client_codecs_install(d, &m->codecs);
	dml_client_sched_pace_reset(d->sched);
	dml_info("job %u: shard map v%llu, %u servers", d->conf.job,
		 (unsigned long long)d->map.version, d->nroute);
}

/* A fetch ended (client_map.c calls this). */
static void on_map(void *arg, int rc, struct dml_client_map *m, const char *why)
{
	struct dml *d = arg;

	if (rc) {
		/* Said once per reason, not at every paced retry. */
		if (!d->connecting && strncmp(d->map_why, why, sizeof(d->map_why) - 1) != 0)
			dml_warn("shard map: %s", why);
		d->map_rc = rc;
		snprintf(d->map_why, sizeof(d->map_why), "%s", why);
		if (d->parked.head)
			dml_client_sched_fetch(d->sched);
		return;
	}
	d->map_rc = 0;
	if (m->shard.version > d->map.version)
		map_install(d, m);
	dml_client_map_destroy(m);
	dml_client_parked_release(d);
}

/* ---- connect / close ------------------------------------------------------ */

static int parse_servers(struct dml *d)
{
	char *list = dml_xstrdup(d->conf.servers), *save = NULL, *tok;
	int rc = 0;

	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char host[256];
		uint16_t port;

		while (*tok == ' ')
			tok++;
		if (d->nlinks >= DML_CLIENT_MAX_SERVERS) {
			rc = DML_EINVAL;
			break;
		}
		if (dml_parse_hostport(tok, host, sizeof(host), &port, 0) != 0) {
			snprintf(d->detail, sizeof(d->detail),
				 "servers: '%.200s' is not host:port", tok);
			rc = DML_EINVAL;
			break;
		}
		(void)dml_client_link_add(d, host, port);
	}
	free(list);
	if (rc == 0 && d->nlinks == 0) {
		snprintf(d->detail, sizeof(d->detail), "servers: no server given");
		rc = DML_EINVAL;
	}
	/* Shard i is the i-th server listed. */
	d->nroute = d->nlinks;
	d->route = dml_xcalloc(d->nlinks ? d->nlinks : 1, sizeof(*d->route));
	memcpy(d->route, d->links, d->nlinks * sizeof(*d->route));
	return rc;
}

/* Standalone mode: the map is what the servers reported at handshake. */
static int build_map(struct dml *d)
{
	char err[256] = "";
	int rc = 0;

	dml_shard_map_init(&d->map, d->nlinks);
	for (uint32_t i = 0; i < d->nlinks && rc == 0; i++) {
		for (size_t j = 0; j < d->links[i]->ntables && rc == 0; j++) {
			const Dml__TableInfo *t = d->links[i]->tables[j];

			rc = dml_shard_map_add(&d->map, i, t->id, t->dense, t->width, t->keys,
					       t->key_begin, t->key_end, err, sizeof(err));
		}
	}
	if (rc == 0)
		rc = dml_shard_map_finish(&d->map, err, sizeof(err));
	if (rc) {
		snprintf(d->detail, sizeof(d->detail), "shard map: %s", err[0] ? err
			 : dml_strerror(rc));
		return DML_ECONF;
	}
	return 0;
}

/* dml_connect's deadline passed without a map: why, and the code to return. */
static int sched_timeout(struct dml *d, int not_found)
{
	const char *last = dml_client_sched_last_error(d->sched);
	int reached = dml_client_sched_ever_ready(d->sched);

	if (not_found) {
		snprintf(d->detail, sizeof(d->detail), "%.440s (no shard map within %u ms)",
			 d->map_why, d->conf.connect_timeout_ms);
		return DML_ENOTFOUND;
	}
	snprintf(d->detail, sizeof(d->detail), "%s: %s within %u ms%s%s",
		 dml_client_sched_name(d->sched),
		 reached ? "no shard map" : "could not connect", d->conf.connect_timeout_ms,
		 last[0] ? ": " : "", last);
	return reached ? DML_ETIMEDOUT : DML_ECONN;
}

/* Scheduler mode: ask for the map until it comes or the deadline passes. */
static int connect_sched(struct dml *d, uint64_t deadline)
{
	int rc = dml_client_sched_new(d->base, &d->cc, d->conf.scheduler, d->conf.job, on_map,
				      d, &d->sched), not_found = 0;

	if (rc) {
		snprintf(d->detail, sizeof(d->detail), "scheduler: '%.200s' is not host:port",
			 d->conf.scheduler);
		return rc;
	}
	dml_client_sched_fetch(d->sched);
	while (d->map.version == 0) {
		/* "No map yet" may change while we wait: ask again, paced. */
		if (d->map_rc == DML_ENOTFOUND) {
			d->map_rc = 0;
			not_found = 1;
			dml_client_sched_fetch(d->sched);
		} else if (d->map_rc) {
			snprintf(d->detail, sizeof(d->detail), "%s", d->map_why);
			return d->map_rc;
		}
		if (dml_now_ns() > deadline)
			return sched_timeout(d, not_found);
		event_base_loop(d->base, EVLOOP_ONCE);
	}
	return 0;
}

/* Every server of the map connected and authenticated, or an error. */
static int connect_links(struct dml *d, uint64_t deadline)
{
	int rc = 0;

	for (;;) {
		uint32_t ready = 0;

		for (uint32_t i = 0; i < d->nroute; i++) {
			ready += d->route[i]->ready;
			if (d->route[i]->fatal && !rc)
				rc = d->route[i]->fatal;
		}
		if (rc || ready == d->nroute)
			break;
		if (dml_now_ns() > deadline) {
			rc = DML_ETIMEDOUT;
			break;
		}
		event_base_loop(d->base, EVLOOP_ONCE);
		/* Keep retrying refused connections until the deadline. */
		for (uint32_t i = 0; i < d->nroute; i++) {
			struct link *l = d->route[i];

			if (!l->conn && !l->fatal && dml_now_ns() >= l->retry_at_ns)
				dml_client_link_connect(l);
		}
	}
	for (uint32_t i = 0; i < d->nroute && rc; i++) {
		const struct link *l = d->route[i];

		if (!l->ready)
			dml_err("server %s:%u: %s", l->host, l->port,
				dml_strerror(l->fatal ? l->fatal : rc));
	}
	return rc;
}

void dml_client_free_all(struct dml *d)
{
	struct dml_client_sched *s = d->sched;

	/* No housekeeping from here on: it would reconnect what is being closed. */
	if (d->tick)
		event_del(d->tick);
	/* No part left for a late reply or a map to find. */
	for (uint32_t i = 0; i < d->nlinks; i++)
		dml_client_link_fail_all(d->links[i], DML_ECLOSED);
	if (d->agg)
		dml_client_link_fail_all(d->agg, DML_ECLOSED);
	while (d->parked.head)
		dml_client_part_finish(d, d->parked.head, DML_ECLOSED);
	dml_client_sched_free(s);
	d->sched = NULL;
	for (uint32_t i = 0; i < d->nlinks; i++)
		if (d->links[i]->conn)
			dml_conn_abort(d->links[i]->conn, DML_ECLOSED);
	if (d->agg && d->agg->conn)
		dml_conn_abort(d->agg->conn, DML_ECLOSED);
	/* Let the loop run the deferred teardown of every connection. */
	for (int i = 0; i < 100; i++) {
		int open = d->agg && d->agg->conn;

		for (uint32_t j = 0; j < d->nlinks; j++)
			open += d->links[j]->conn != NULL;
		if (!open)
			break;
		event_base_loop(d->base, EVLOOP_NONBLOCK);
	}
	for (uint32_t i = 0; i < d->nlinks; i++)
		dml_client_link_free(d->links[i]);
	dml_client_agg_free(d);
	for (size_t i = 0; i < d->nbuckets; i++) {
		while (d->reqs[i]) {
			struct request *r = d->reqs[i];

			d->reqs[i] = r->hnext;
			free(r);
		}
	}
	free(d->reqs);
	free(d->parts);
	free(d->links);
	free(d->route);
	dml_shard_map_destroy(&d->map);
	dml_client_codecs_free(&d->codecs);
	if (d->tick)
		event_free(d->tick);
	if (d->loop && --d->loop->refs == 0) {
		event_base_free(d->loop->base);
		free(d->loop);
	}
	dml_secret_free(d->secret, d->secret_len);
	dml_conf_free(&dml_client_conf_schema, &d->conf);
	free(d);
}

/*
 * A broken connection must not kill the program: libevent's writes can raise
 * SIGPIPE. Only a default disposition is changed; a handler the application
 * installed is left alone.
 */
static void ignore_sigpipe(void)
{
	struct sigaction sa;

	if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
		signal(SIGPIPE, SIG_IGN);
}

/* Every string option duplicated: the handle outlives the options. */
static void copy_conf(struct dml_client_conf *dst, const struct dml_client_conf *src)
{
	const struct dml_conf_schema *sc = &dml_client_conf_schema;

	*dst = *src;
	for (size_t i = 0; i < sc->noptions; i++) {
		const struct dml_conf_option *o = &sc->options[i];
		char **field = (char **)((char *)dst + o->offset);

		if (o->type == DML_CONF_STRING || o->type == DML_CONF_HOSTPORT)
			*field = dml_xstrdup(*field ? *field : (o->def ? o->def : ""));
	}
}

/* Share's event loop, or a new one when share is NULL. */
static int client_loop(struct dml *d, struct dml *share)
{
	if (share) {
		d->loop = share->loop;
	} else {
		struct event_base *base = event_base_new();

		if (!base)
			return DML_ENOMEM;
		d->loop = dml_xcalloc(1, sizeof(*d->loop));
		d->loop->base = base;
	}
	d->loop->refs++;
	d->base = d->loop->base;
	return 0;
}

/* Options, secret, event loop and connection identity; no network yet. */
static int client_setup(struct dml *d, struct dml *share)
{
	struct timeval tick = { 0, TICK_MS * 1000 };
	int rc;

	if (d->conf.role == 0 && d->conf.worker_id == 0) {
		snprintf(d->detail, sizeof(d->detail), "worker_id is required for role worker");
		return DML_EINVAL;
	}
	if (d->conf.scheduler[0] && d->conf.servers[0]) {
		snprintf(d->detail, sizeof(d->detail),
			 "servers and scheduler exclude each other");
		return DML_EINVAL;
	}
	if (!d->conf.scheduler[0] && (rc = parse_servers(d)) != 0)
		return rc;
	if ((rc = dml_secret_load(d->conf.secret_file, &d->secret, &d->secret_len)) != 0) {
		snprintf(d->detail, sizeof(d->detail), "secret_file: %s", dml_strerror(rc));
		return rc;
	}
	ignore_sigpipe();
	if ((rc = client_loop(d, share)) != 0)
		return rc;
	dml_conn_conf_default(&d->cc);
	d->cc.limits.max_payload = (uint32_t)d->conf.max_payload;
	d->cc.limits.max_meta = (uint32_t)d->conf.max_meta;
	d->cc.secret = d->secret;
	d->cc.secret_len = d->secret_len;
	d->cc.cluster = d->conf.cluster;
	d->cc.role = d->conf.role == 0 ? DML__ROLE__WORKER : DML__ROLE__CONTROL;
	d->cc.node_id = d->conf.worker_id;
	d->cc.tcp_only = !d->conf.local_socket;
	d->cc.job = d->conf.job;
	d->cc.handshake_timeout_ms = d->conf.connect_timeout_ms;
	d->cc.incarnation = d->conf.incarnation;
	while (d->cc.incarnation == 0)
		if (dml_random_bytes(&d->cc.incarnation, sizeof(d->cc.incarnation)) != 0)
			return DML_EIO;
	d->tick = event_new(d->base, -1, EV_PERSIST, dml_client_tick_cb, d);
	event_add(d->tick, &tick);
	d->clock = d->conf.clock;
	d->clock_sent = d->clock;
	return 0;
}

int dml_connect_shared(const dml_opts_t *opts, dml_t *share, dml_t **out)
{
	struct dml *d;
	uint64_t deadline;
	int rc;

	if (!opts || !out)
		return DML_EINVAL;
	*out = NULL;
	d = dml_xcalloc(1, sizeof(*d));
	copy_conf(&d->conf, &opts->conf);
	d->nbuckets = 64;
	d->reqs = dml_xcalloc(d->nbuckets, sizeof(*d->reqs));
	d->parts = dml_xcalloc(d->nbuckets, sizeof(*d->parts));
	d->connecting = 1;
	rc = client_setup(d, share);
	deadline = dml_now_ns() + d->conf.connect_timeout_ms * 1000000ull;
	/* The aggregator is not waited for: parts go straight until it is up. */
	if (rc == 0)
		rc = dml_client_agg_setup(d);
	if (rc == 0 && d->conf.scheduler[0])
		rc = connect_sched(d, deadline);
	else if (rc == 0)
		for (uint32_t i = 0; i < d->nlinks; i++)
			dml_client_link_connect(d->links[i]);
	if (rc == 0)
		rc = connect_links(d, deadline);
	if (rc == 0 && !d->sched)
		rc = build_map(d);
	if (rc) {
		/* The handle goes with the failure: the log keeps the reason. */
		if (d->detail[0])
			dml_err("dml_connect: %s", d->detail);
		dml_client_free_all(d);
		return rc;
	}
	d->connecting = 0;
	*out = d;
	return 0;
}

int dml_connect(const dml_opts_t *opts, dml_t **out)
{
	return dml_connect_shared(opts, NULL, out);
}
