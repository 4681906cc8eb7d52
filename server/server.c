/*
 * dml-server core (see server.h): sessions (handshake, worker joins, close,
 * eviction), the tick, and the server's life cycle. Requests are handled in
 * requests.c, replies and parked pulls in replies.c, the config file's
 * tables in tables.c.
 *
 * Must never: block the event loop, or let one bad peer cost more than its
 * own connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/listener.h>
#include <event2/util.h>

#include "proto/auth.h"
#include "proto/conn.h"
#include "proto/dml_error.h"
#include "proto/listen.h"
#include "proto/log.h"
#include "server/row_snapshot.h"
#include "server/server_internal.h"
#include "shard/shardmap.h"
#include "server/ssp.h"
#include "store/table.h"
#include "proto/util.h"

#define TICK_MS 100
#define SHUTDOWN_GRACE_S 3

/* ---- sessions ----------------------------------------------------------- */

static const char *role_name(uint32_t role)
{
	switch (role) {
	case DML__ROLE__WORKER: return "worker";
	case DML__ROLE__CONTROL: return "control";
	case DML__ROLE__AGGREGATOR: return "aggregator";
	case DML__ROLE__SERVER: return "server";
	default: return "peer";
	}
}

/*
 * A worker takes its place in the clock set. One the set does not know yet
 * starts at the clock its HELLO names, so a server that joins a running job
 * (or a new job's set) does not hold everybody's pulls back to clock 0.
 */
static void worker_join(struct session *ss, const Dml__Handshake *hello)
{
	struct dml_ssp *ssp = &ss->srv->ssp;
	struct dml_ssp_worker *w = dml_ssp_find(ssp, hello->node_id);
	int known = w != NULL;

	if (w && w->incarnation != hello->incarnation)
		dml_server_store_keep_seq(ss->srv, w);
	w = dml_ssp_join(ssp, hello->node_id, hello->incarnation);

	if (!known && hello->clock > 0)
		w->clock = hello->clock;
	ss->worker = 1;
	ss->widx = (size_t)(w - ssp->workers);
	dml_server_store_join(ss->srv, w);
	/* Workers back after a restart, past the clock whose step the log
	 * lacks: the step before any of them reads. */
	dml_server_step_clock(ss->srv);
}

void dml_server_clock_reset(struct dml_server *s, int64_t staleness, uint32_t workers)
{
	dml_ssp_destroy(&s->ssp);
	dml_ssp_init(&s->ssp, staleness, workers);
	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;
		const Dml__Handshake *h = dml_conn_peer_hello(x->conn);

		if (!ss->worker)
			continue;
		ss->worker = 0;
		if (h && h->job == s->job.id)
			worker_join(ss, h);
	}
}

/* What WELCOME offers: every codec, in pushes and in pull replies. */
static Dml__DType server_codecs[] = { DML__DTYPE__F32, DML__DTYPE__F16, DML__DTYPE__INT8,
				      DML__DTYPE__BF16, DML__DTYPE__TOPK,
				      DML__DTYPE__TOPK16 };

static int on_hello(struct dml_conn *c, const Dml__Handshake *hello, Dml__Handshake *welcome,
		    void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;

	switch (hello->role) {
	case DML__ROLE__WORKER:
	case DML__ROLE__CONTROL:
	case DML__ROLE__AGGREGATOR:
	case DML__ROLE__SERVER:    /* a peer sending rows (MIGRATE) */
		break;
	default:
		return DML_EROLE;
	}
	if (s->job_mode && hello->job > s->job.id && hello->role != DML__ROLE__SERVER) {
		/* Restarted, or new to a running job: the job's map is not
		 * installed and its log not replayed yet. The client tries
		 * again; nothing it sends may reach an empty clock set. */
		dml_info("peer %s: %s %u of job %u refused: the job is not on this server "
			 "yet", dml_conn_peer(c), role_name(hello->role), hello->node_id,
			 hello->job);
		return DML_EAGAIN;
	}
	ss->role = hello->role;
	ss->node_id = hello->node_id;
	if (hello->role == DML__ROLE__WORKER)
		worker_join(ss, hello);
	welcome->n_tables = s->nwinfos;
	welcome->tables = s->winfos;
	welcome->shard_index = s->shard_index;
	welcome->shard_count = s->shard_count;
	welcome->map_version = s->job.version;
	welcome->zone = s->conf->zone;
	welcome->n_codecs = DML_ARRAY_LEN(server_codecs);
	welcome->codecs = server_codecs;
	/* It takes the workers' clocks an aggregator delivers (forwarded.c). */
	welcome->relays_clocks = hello->role == DML__ROLE__AGGREGATOR;
	dml_info("peer %s: %s %u joined", dml_conn_peer(c), role_name(hello->role),
		 hello->node_id);
	return 0;
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct session *ss = arg;
	struct dml_server *s = ss->srv;
	struct dml_ssp_worker *w = dml_server_session_worker(ss);

	if (err && err != DML_ECONN && err != DML_ECLOSED)
		s->st.bad_frames++;
	s->st.bytes_in += dml_conn_bytes_in(c);
	s->st.bytes_out += dml_conn_bytes_out(c);
	dml_server_drop_held(s, ss, 0, NULL);
	dml_server_store_forget(s, ss);
	dml_server_cut_forget(s, ss);
	if (w)
		dml_ssp_disconnect(&s->ssp, w, dml_now_ns());
	dml_peers_remove(&s->peers, &ss->peer);
	free(ss);
}

static const struct dml_conn_ops server_ops = {
	.on_hello = on_hello,
	.on_frame = dml_server_on_frame,
	.on_close = on_close,
};

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr,
		      int addrlen, void *arg)
{
	struct dml_server *s = arg;
	struct session *ss;

	ss = dml_xcalloc(1, sizeof(*ss));
	ss->srv = s;
	if (dml_peers_accept(&s->peers, fd, &ss->peer, &s->conn_conf, s->ops, ss) != 0)
		free(ss);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_server *s = arg;

	dml_server_job_tick(s);
	dml_server_cut_tick(s);
	dml_server_straggler_tick(s);
	if (dml_ssp_reap(&s->ssp, dml_now_ns(), (uint64_t)s->dead_after_ms * 1000000ull)) {
		dml_info("a worker left the clock set; slowest clock is now %llu",
			 (unsigned long long)dml_ssp_min_clock(&s->ssp));
		dml_server_release_held(s);
	}
	dml_server_workers_expire(s);
	dml_server_budget_tick(s);
}

void dml_server_evict(struct dml_server *s, uint32_t worker)
{
	struct dml_ssp_worker *w = dml_ssp_find(&s->ssp, worker);
	unsigned closed = 0;

	/* A hung worker keeps its connections open, so the reaper never
	 * counts it gone: close them, and it rejoins by reconnecting. */
	for (struct dml_peer *x = s->peers.head; x; x = x->next) {
		struct session *ss = (struct session *)x;

		if (!ss->worker || ss->node_id != worker)
			continue;
		dml_server_drop_held(s, ss, 0, NULL);
		dml_conn_abort(x->conn, DML_ECLOSED);
		closed++;
	}
	if (!w) {
		if (dml_ssp_evict(&s->ssp, worker))
			dml_info("job %u: the scheduler lost worker %u before it joined here: "
				 "the clock set goes on without it", s->job.id, worker);
		else
			dml_info("job %u: the scheduler lost worker %u, not in the clock set "
				 "here (%u connections closed)", s->job.id, worker, closed);
		dml_server_release_held(s);
		return;
	}
	if (!w->live) {
		dml_info("job %u: the scheduler lost worker %u, not in the clock set here "
			 "(%u connections closed)", s->job.id, worker, closed);
		return;
	}
	dml_ssp_evict(&s->ssp, worker);
	dml_info("job %u: the scheduler lost worker %u at clock %llu: dropped from the clock "
		 "set, %u connections closed; slowest clock is now %llu", s->job.id, worker,
		 (unsigned long long)w->clock, closed,
		 (unsigned long long)dml_ssp_min_clock(&s->ssp));
	dml_server_release_held(s);
}

/* ---- lifecycle ---------------------------------------------------------- */

static int start_listening(struct dml_server *s)
{
	const struct dml_server_conf *c = s->conf;

	if (s->job_mode)
		return dml_listen_serve(s->base, c->listen, c->port_file, c->local_socket, accept_cb, s,
					&s->listener, &s->port,
					"; tables will come from the scheduler");
	return dml_listen_serve(s->base, c->listen, c->port_file, c->local_socket, accept_cb, s, &s->listener,
				&s->port, " (shard %u/%u, staleness %lld, %u workers expected)",
				c->shard_index, c->shard_count, (long long)c->staleness,
				c->workers);
}

int dml_server_new(const struct dml_server_conf *conf, struct event_base *base,
		   struct dml_server **out)
{
	struct dml_server *s = dml_xcalloc(1, sizeof(*s));
	struct timeval tick = { 0, TICK_MS * 1000 };
	int rc;

	s->conf = conf;
	s->base = base;
	s->ops = &server_ops;
	s->job_mode = conf->scheduler[0] && conf->ntables == 0;
	s->dead_after_ms = conf->dead_after_ms;
	s->stale_scaling = conf->stale_scaling;
	s->bsp_step = conf->bsp_step;
	s->allow_nonfinite = conf->allow_nonfinite;
	dml_ssp_init(&s->ssp, conf->staleness, conf->workers);
	dml_peers_init(&s->peers, base, conf->max_connections);
	s->peers.max_preauth = conf->max_preauth;
	*out = s;
	rc = dml_conn_conf_daemon(&s->conn_conf, DML__ROLE__SERVER, conf->node_id, conf->cluster,
				  conf->handshake_timeout_ms, conf->secret_file, &s->secret,
				  &s->secret_len);
	if (rc)
		return rc;
	s->conn_conf.limits.max_meta = (uint32_t)conf->max_meta;
	s->conn_conf.limits.max_payload = (uint32_t)conf->max_payload;
	s->conn_conf.limits.max_keys = (uint32_t)conf->max_keys;
	s->conn_conf.tcp_only = !conf->local_socket;
	dml_server_budget_tick(s);
	if (conf->ntables == 0 && !s->job_mode) {
		dml_err("no [table] section and no scheduler: nothing to serve");
		return DML_ECONF;
	}
	if (s->job_mode)
		dml_server_welcome_rebuild(s);
	else if ((rc = dml_server_build_tables(s)) != 0)
		return rc;
	if ((rc = dml_server_store_open(s)) != 0)
		return rc;
	if ((rc = dml_server_metrics_init(s)) != 0)
		return rc;
	s->tick = event_new(base, -1, EV_PERSIST, tick_cb, s);
	event_add(s->tick, &tick);
	if ((rc = start_listening(s)) != 0)
		return rc;
	return dml_server_sched_start(s);
}

void dml_server_shutdown(struct dml_server *s)
{
	if (s->peers.stopping)
		return;
	/* What was applied is logged and acknowledged before anyone is told
	 * to go. */
	dml_server_store_flush(s);
	if (s->listener) {
		dml_listener_free(s->listener);
		s->listener = NULL;
	}
	dml_metrics_http_stop(s->metrics);
	dml_server_sched_stop(s);
	dml_server_job_stop(s);
	dml_server_drop_held(s, NULL, DML_ECLOSED, "server is shutting down");
	dml_peers_shutdown(&s->peers, SHUTDOWN_GRACE_S);
}

void dml_server_free(struct dml_server *s)
{
	if (!s)
		return;
	dml_server_sched_free(s);
	dml_server_job_free(s);
	/* Connections the grace period could not close are dropped now. */
	dml_peers_destroy(&s->peers);
	dml_server_drop_held(s, NULL, 0, NULL);
	if (s->listener)
		dml_listener_free(s->listener);
	if (s->tick)
		event_free(s->tick);
	dml_server_store_free(s);
	dml_server_cut_free(s);
	dml_server_tables_free(s);
	free(s->winfo);
	free(s->winfos);
	free(s->scratch);
	free(s->coded);
	dml_server_delta_drop(s);
	dml_metrics_free(s->metrics);
	dml_ssp_destroy(&s->ssp);
	dml_secret_free(s->secret, s->secret_len);
	free(s);
}

uint16_t dml_server_port(const struct dml_server *s)
{
	return s->port;
}

int dml_server_failed(const struct dml_server *s)
{
	return s && s->store_failed;
}
