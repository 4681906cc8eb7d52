/*
 * dml-sched core (see sched.h): membership over the connection layer, and
 * the dispatch of every request (the job side is in sched_job_*.c).
 *
 * A node (server, worker, aggregator) authenticates, then must REGISTER
 * before anything else (except asking for a shard map: libdml does that on
 * a worker-role connection of its own that never registers); from then on
 * its session owns the node's entry in the table, heartbeats keep it alive,
 * and closing the connection makes it suspect. A control client (dmlctl)
 * may list nodes and jobs, submit and control jobs, but not register. When
 * a node registers again from a new connection, the newer connection owns
 * the entry and the older one is closed; when the failure detector declares
 * a connected node dead, its connection is closed so that the node
 * registers afresh.
 *
 * Must never: block the loop, let a request change a node other than the
 * one its connection authenticated as, answer a PROGRESS with an ERROR (the
 * link would register again), or let one bad peer cost more than its own
 * connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
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
#include "sched/nodes.h"
#include "proto/peers.h"
#include "sched/sched.h"
#include "sched/sched_internal.h"
#include "proto/util.h"

#define SHUTDOWN_GRACE_S 3
#define TICK_MIN_MS 10
#define TICK_MAX_MS 100

uint64_t dml_sched_now_ms(void)
{
	return dml_now_ns() / 1000000u;
}

static uint64_t now_ms(void)
{
	return dml_sched_now_ms();
}

/* ---- node state changes ------------------------------------------------- */

/* "server 2 at 10.0.0.5:7001" or "worker 7". */
static void node_name(const struct dml_node *n, char *buf, size_t len)
{
	snprintf(buf, len, "%s %u%s%s", dml_node_role_name(n->role), n->node_id,
		 n->address[0] ? " at " : "", n->address);
}

struct session *dml_sched_owner(struct dml_sched *s, uint32_t role, uint32_t node_id)
{
	for (struct dml_peer *p = s->peers.head; p; p = p->next) {
		struct session *ss = (struct session *)p;

		if (ss->registered && ss->role == role && ss->node_id == node_id)
			return ss;
	}
	return NULL;
}

/* Give up a node's connection: it stops owning the node, is told why, closes. */
static void drop_owner(struct session *ss, int code, const char *why)
{
	ss->registered = 0;
	(void)dml_conn_send_error(ss->peer.conn, 0, code, why);
	dml_conn_close(ss->peer.conn, 0);
}

/* The one log line per transition; a node declared dead loses its connection. */
static void on_node_change(const struct dml_node *n, Dml__NodeState old, void *arg)
{
	struct dml_sched *s = arg;
	struct session *owner;
	char name[DML_NODE_ADDRESS_MAX + 64];

	node_name(n, name, sizeof(name));
	/* Queued: the jobs react from the loop, after this change is done. */
	dml_sched_jobs_node_changed(s, n, old);
	/* A restart needs who registered and who died, not the flaps between. */
	if ((n->state == DML__NODE_STATE__ALIVE && n->changed_ms == n->registered_ms) ||
	    n->state == DML__NODE_STATE__DEAD)
		dml_sched_state_node(s, n);
	/* Only a registration makes a node ALIVE at its registration time (a
	 * heartbeat revives a SUSPECT node, which needs time to pass). */
	if (n->state == DML__NODE_STATE__ALIVE && n->changed_ms == n->registered_ms) {
		dml_info("%s: %s -> alive: %s; shard %u/%u, zone '%s', device '%s', %u cores, "
			 "%llu MiB, incarnation %llu", name,
			 old == DML__NODE_STATE__NODE_UNKNOWN ? "new" : dml_node_state_name(old),
			 n->reason, n->shard_index, n->shard_count, n->zone, n->profile.device,
			 n->profile.cores, (unsigned long long)(n->profile.memory_bytes >> 20),
			 (unsigned long long)n->incarnation);
		return;
	}
	/* Failures are warnings; coming back, or leaving cleanly, is not. */
	DML_LOG(n->state == DML__NODE_STATE__ALIVE || strcmp(n->reason, "left") == 0
			? DML_LOG_INFO : DML_LOG_WARN,
		"%s: %s -> %s: %s", name, dml_node_state_name(old),
		dml_node_state_name(n->state), n->reason);
	if (n->state == DML__NODE_STATE__DEAD &&
	    (owner = dml_sched_owner(s, n->role, n->node_id)) != NULL) {
		char why[DML_NODE_REASON_MAX + 64];

		snprintf(why, sizeof(why), "declared dead (%s); register again", n->reason);
		drop_owner(owner, DML_ETIMEDOUT, why);
	}
}

/* ---- replies ------------------------------------------------------------ */

void dml_sched_reply_error(struct session *ss, uint64_t request_id, int code,
			   const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	dml_conn_error_vformat(ss->peer.conn, request_id, msg, sizeof(msg), fmt, ap);
	va_end(ap);
	(void)dml_conn_send_error(ss->peer.conn, request_id, code, msg);
}

void dml_sched_reply_plain(struct session *ss, Dml__MsgType type, uint64_t request_id)
{
	(void)dml_conn_send_plain(ss->peer.conn, type, request_id);
}

int dml_sched_send(struct session *ss, Dml__Meta *m, size_t *size)
{
	size_t len;

	m->sender = ss->sched->conf->node_id;
	len = dml__meta__get_packed_size(m);
	if (size)
		*size = len;
	/* Peers apply the same kind of limit to what they read. */
	if (len > ss->sched->conf->max_meta)
		return DML_EFRAME_META;
	return dml_conn_send(ss->peer.conn, m, NULL, 0, DML_SEND_COPY);
}

/* ---- request handlers --------------------------------------------------- */

static int is_control(const struct session *ss)
{
	return ss->role == DML__ROLE__CONTROL;
}

static void handle_register(struct session *ss, const Dml__Meta *m)
{
	struct dml_sched *s = ss->sched;
	Dml__NodeInfo info;
	Dml__Meta r = DML__META__INIT;
	struct session *old;
	char why[160];
	int rc;

	if (is_control(ss)) {
		dml_sched_reply_error(ss, m->request_id, DML_EROLE,
				      "control clients may not register");
		return;
	}
	info = *m->node;
	if (info.role != ss->role || info.node_id != ss->node_id) {
		dml_sched_reply_error(ss, m->request_id,
				      info.role != ss->role ? DML_EROLE : DML_EINVAL,
				      "register as %s %u on a connection authenticated as "
				      "%s %u",
				      dml_node_role_name(info.role), info.node_id,
				      dml_node_role_name(ss->role), ss->node_id);
		return;
	}
	if (info.incarnation == 0)
		info.incarnation = ss->incarnation;
	if ((rc = dml_node_info_check(&info, why, sizeof(why))) != 0) {
		dml_warn("peer %s: %s %u: registration refused: %s", dml_conn_peer(ss->peer.conn),
			 dml_node_role_name(ss->role), ss->node_id, why);
		dml_sched_reply_error(ss, m->request_id, rc, "registration refused: %s", why);
		return;
	}
	old = dml_sched_owner(s, ss->role, ss->node_id);
	if (old && old != ss && old->incarnation != info.incarnation) {
		const struct dml_node *n = dml_nodes_find(s->nodes, ss->role, ss->node_id);

		/* Another process still holds this id: two nodes configured with
		 * the same id must not take turns evicting each other. */
		if (n && n->state != DML__NODE_STATE__DEAD) {
			dml_warn("peer %s: %s %u: registration refused: the id is held by a "
				 "live process at %s", dml_conn_peer(ss->peer.conn),
				 dml_node_role_name(ss->role), ss->node_id, dml_conn_peer(old->peer.conn));
			dml_sched_reply_error(ss, m->request_id, DML_ECONF,
					      "%s %u is already registered by another live "
					      "process", dml_node_role_name(ss->role),
					      ss->node_id);
			return;
		}
	}
	if (old && old != ss) {
		dml_warn("%s %u registered again from %s; closing its older connection from %s",
			 dml_node_role_name(ss->role), ss->node_id, dml_conn_peer(ss->peer.conn),
			 dml_conn_peer(old->peer.conn));
		drop_owner(old, DML_ESTATE, "replaced by a newer registration of this node");
	}
	rc = dml_nodes_register(s->nodes, &info, now_ms(), NULL);
	if (rc) {
		/* The check above passed, so this is a bug in nodes.c. */
		dml_sched_reply_error(ss, m->request_id, rc, "registration failed: %s",
				      dml_strerror(rc));
		return;
	}
	ss->registered = 1;
	r.type = DML__MSG_TYPE__REGISTER_REPLY;
	r.request_id = m->request_id;
	r.heartbeat_interval_ms = s->conf->heartbeat_interval_ms;
	(void)dml_sched_send(ss, &r, NULL);
}

static void handle_heartbeat(struct session *ss, const Dml__Meta *m)
{
	int rc;

	if (ss->registered) {
		rc = dml_nodes_heartbeat(ss->sched->nodes, ss->role, ss->node_id, now_ms());
		if (rc == 0 && ss->role == DML__ROLE__AGGREGATOR && m->node &&
		    m->node->aggregator)
			(void)dml_nodes_set_aggregator(ss->sched->nodes, ss->node_id,
						       m->node->aggregator);
		if (rc) {
			dml_sched_reply_error(ss, m->request_id, DML_ESTATE,
					      "not alive here: register again");
			return;
		}
	}
	dml_sched_reply_plain(ss, DML__MSG_TYPE__HEARTBEAT, m->request_id);
}

void dml_sched_node_info(const struct dml_node *n, uint64_t now, Dml__NodeInfo *info,
			 Dml__Profile *p, Dml__AggregatorStats *a)
{
	dml__node_info__init(info);
	dml__profile__init(p);
	info->role = n->role;
	info->node_id = n->node_id;
	info->zone = (char *)n->zone;
	info->address = (char *)n->address;
	info->state = n->state;
	info->reason = (char *)n->reason;
	info->last_heartbeat_ms = now > n->last_heartbeat_ms ? now - n->last_heartbeat_ms : 0;
	info->shard_index = n->shard_index;
	info->shard_count = n->shard_count;
	info->incarnation = n->incarnation;
	p->device = (char *)n->profile.device;
	p->cores = n->profile.cores;
	p->memory_bytes = n->profile.memory_bytes;
	p->gflops = n->profile.gflops;
	p->examples_per_s = n->profile.examples_per_s;
	p->link_mbps = n->profile.link_mbps;
	info->profile = p;
	if (a && n->agg_reported) {
		*a = n->agg;
		info->aggregator = a;
	}
}

static void handle_nodes(struct session *ss, const Dml__Meta *req)
{
	struct dml_sched *s = ss->sched;
	size_t n = dml_nodes_count(s->nodes), size;
	int rc;
	Dml__NodeInfo *infos = dml_xcalloc(n + 1, sizeof(*infos));
	Dml__NodeInfo **ptrs = dml_xcalloc(n + 1, sizeof(*ptrs));
	Dml__Profile *profiles = dml_xcalloc(n + 1, sizeof(*profiles));
	Dml__AggregatorStats *aggs = dml_xcalloc(n + 1, sizeof(*aggs));
	Dml__Meta m = DML__META__INIT;
	uint64_t now = now_ms();

	for (size_t i = 0; i < n; i++) {
		dml_sched_node_info(dml_nodes_at(s->nodes, i), now, &infos[i], &profiles[i],
				    &aggs[i]);
		ptrs[i] = &infos[i];
	}
	m.type = DML__MSG_TYPE__NODES_REPLY;
	m.request_id = req->request_id;
	m.n_nodes = n;
	m.nodes = ptrs;
	rc = dml_sched_send(ss, &m, &size);
	if (rc == DML_EFRAME_META)
		dml_sched_reply_error(ss, req->request_id, DML_EFRAME_META,
				      "%zu nodes need %zu bytes of metadata, over max_meta "
				      "(%llu)", n, size,
				      (unsigned long long)s->conf->max_meta);
	free(infos);
	free(ptrs);
	free(profiles);
	free(aggs);
}

static void handle_bye(struct session *ss, const Dml__Meta *m)
{
	if (ss->registered) {
		/* Released first, so that the node's death does not close the
		 * connection before the ACK is sent. */
		ss->registered = 0;
		(void)dml_nodes_leave(ss->sched->nodes, ss->role, ss->node_id, now_ms());
	}
	dml_sched_reply_plain(ss, DML__MSG_TYPE__ACK, m->request_id);
}

static enum sched_req request_kind(int type)
{
	switch (type) {
	case DML__MSG_TYPE__REGISTER: return SREQ_REGISTER;
	case DML__MSG_TYPE__HEARTBEAT: return SREQ_HEARTBEAT;
	case DML__MSG_TYPE__NODES: return SREQ_NODES;
	case DML__MSG_TYPE__BYE: return SREQ_BYE;
	case DML__MSG_TYPE__SUBMIT: return SREQ_SUBMIT;
	case DML__MSG_TYPE__JOBS: return SREQ_JOBS;
	case DML__MSG_TYPE__JOB_CONTROL: return SREQ_JOB_CONTROL;
	case DML__MSG_TYPE__SHARDMAP: return SREQ_SHARDMAP;
	case DML__MSG_TYPE__PROGRESS: return SREQ_PROGRESS;
	case DML__MSG_TYPE__ACK: return SREQ_ACK;
	case DML__MSG_TYPE__ERROR: return SREQ_ERROR;
	default: return SREQ_OTHER;
	}
}

/* Frames any authenticated peer may send, registered or not. */
static int handle_unregistered(struct session *ss, const Dml__Meta *m)
{
	switch (m->type) {
	case DML__MSG_TYPE__REGISTER:
		handle_register(ss, m);
		return 1;
	case DML__MSG_TYPE__SHARDMAP:
		dml_sched_handle_shardmap(ss, m);
		return 1;
	case DML__MSG_TYPE__PROGRESS:
		if (ss->registered) {
			dml_sched_handle_progress(ss, m);
		} else {
			/* Never an ERROR: it would make a link register again. */
			dml_debug("peer %s: progress from an unregistered %s ignored",
				  dml_conn_peer(ss->peer.conn), dml_node_role_name(ss->role));
		}
		return 1;
	default:
		return 0;
	}
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct session *ss = arg;

	ss->sched->st.requests[request_kind(m->type)]++;
	if (handle_unregistered(ss, m))
		return 0;
	if (!ss->registered && !is_control(ss)) {
		dml_sched_reply_error(ss, m->request_id, DML_ESTATE,
				      "register before sending %s",
				      dml_msg_type_name(m->type));
		return 0;
	}
	switch (m->type) {
	case DML__MSG_TYPE__HEARTBEAT:
		handle_heartbeat(ss, m);
		return 0;
	case DML__MSG_TYPE__NODES:
		handle_nodes(ss, m);
		return 0;
	case DML__MSG_TYPE__BYE:
		handle_bye(ss, m);
		return 0;
	case DML__MSG_TYPE__SUBMIT:
		dml_sched_handle_submit(ss, m);
		return 0;
	case DML__MSG_TYPE__JOBS:
		dml_sched_handle_jobs(ss, m);
		return 0;
	case DML__MSG_TYPE__JOB_CONTROL:
		dml_sched_handle_job_control(ss, m);
		return 0;
	case DML__MSG_TYPE__STRAGGLER:
		if (ss->registered)
			dml_sched_handle_straggler(ss, m);
		return 0;
	case DML__MSG_TYPE__ACK:
	case DML__MSG_TYPE__ERROR:
		/* Replies to what the scheduler sent; a control client sends none. */
		if (ss->registered)
			dml_sched_handle_reply(ss, m);
		return 0;
	default:
		/* Data requests, replies and handshakes have no business here. */
		dml_warn("peer %s: the scheduler does not serve %s; closing connection",
			 dml_conn_peer(c), dml_msg_type_name(m->type));
		dml_sched_reply_error(ss, m->request_id, DML_ESTATE,
				      "the scheduler does not serve %s",
				      dml_msg_type_name(m->type));
		dml_conn_close(c, DML_ESTATE);
		return 0;
	}
}

/* ---- sessions ----------------------------------------------------------- */

static int on_hello(struct dml_conn *c, const Dml__Handshake *hello, Dml__Handshake *welcome,
		    void *arg)
{
	struct session *ss = arg;

	switch (hello->role) {
	case DML__ROLE__SERVER:
	case DML__ROLE__WORKER:
	case DML__ROLE__AGGREGATOR:
	case DML__ROLE__CONTROL:
		break;
	default:
		dml_warn("peer %s: role %s may not connect to the scheduler", dml_conn_peer(c),
			 dml_node_role_name(hello->role));
		return DML_EROLE;
	}
	ss->role = hello->role;
	ss->node_id = hello->node_id;
	ss->incarnation = hello->incarnation;
	dml_debug("peer %s: %s %u authenticated", dml_conn_peer(c),
		  dml_node_role_name(hello->role), hello->node_id);
	return 0;
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct session *ss = arg;
	struct dml_sched *s = ss->sched;

	/* On a clean stop the nodes did not fail: leave them as they were. */
	if (ss->registered && !s->peers.stopping)
		(void)dml_nodes_disconnect(s->nodes, ss->role, ss->node_id, now_ms());
	dml_sched_ckpt_forget(s, ss);
	dml_peers_remove(&s->peers, &ss->peer);
	free(ss);
}

static const struct dml_conn_ops sched_ops = {
	.on_hello = on_hello,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr,
		      int addrlen, void *arg)
{
	struct dml_sched *s = arg;
	struct session *ss;

	ss = dml_xcalloc(1, sizeof(*ss));
	ss->sched = s;
	if (dml_peers_accept(&s->peers, fd, &ss->peer, &s->conn_conf, &sched_ops, ss) != 0)
		free(ss);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_sched *s = arg;

	dml_nodes_tick(s->nodes, now_ms(), NULL);
	dml_sched_jobs_tick(s);
}


/* ---- lifecycle ---------------------------------------------------------- */


static int start_listening(struct dml_sched *s)
{
	const struct dml_sched_conf *c = s->conf;

	return dml_listen_serve(s->base, c->listen, c->port_file, c->local_socket, accept_cb, s, &s->listener,
				&s->port, " (heartbeat every %u ms, suspect after %u ms, dead "
				"after %u ms)", c->heartbeat_interval_ms, c->suspect_after_ms,
				c->dead_after_ms);
}

int dml_sched_new(const struct dml_sched_conf *conf, struct event_base *base,
		  struct dml_sched **out)
{
	struct dml_sched *s;
	struct timeval tick = { 0, 0 };
	uint32_t tick_ms;
	int rc;

	if (!conf || !base || !out)
		return DML_EINVAL;
	s = dml_xcalloc(1, sizeof(*s));
	s->conf = conf;
	s->base = base;
	dml_peers_init(&s->peers, base, conf->max_connections);
	s->peers.max_preauth = conf->max_preauth;
	*out = s;
	rc = dml_nodes_new(conf->suspect_after_ms, conf->dead_after_ms, on_node_change, s,
			   &s->nodes);
	if (rc)
		return rc;
	rc = dml_conn_conf_daemon(&s->conn_conf, DML__ROLE__SCHEDULER, conf->node_id,
				  conf->cluster, conf->handshake_timeout_ms, conf->secret_file,
				  &s->secret, &s->secret_len);
	if (rc)
		return rc;
	s->conn_conf.limits.max_meta = (uint32_t)conf->max_meta;
	/* Nothing the scheduler serves carries a payload. */
	s->conn_conf.limits.max_payload = 0;
	s->conn_conf.tcp_only = !conf->local_socket;
	if ((rc = dml_random_bytes(&s->conn_conf.incarnation,
				   sizeof(s->conn_conf.incarnation))) != 0)
		return rc;
	if ((rc = dml_sched_jobs_init(s)) != 0)
		return rc;
	if ((rc = dml_sched_state_open(s)) != 0)
		return rc;
	/* Before the port file: a ready scheduler serves its metrics too. */
	if ((rc = dml_sched_metrics_init(s)) != 0)
		return rc;
	/* A tenth of suspect_after_ms: a state change is at most that late. */
	tick_ms = conf->suspect_after_ms / 10;
	tick_ms = tick_ms < TICK_MIN_MS ? TICK_MIN_MS : tick_ms > TICK_MAX_MS ? TICK_MAX_MS
									: tick_ms;
	tick.tv_usec = (suseconds_t)tick_ms * 1000;
	s->tick = event_new(base, -1, EV_PERSIST, tick_cb, s);
	event_add(s->tick, &tick);
	return start_listening(s);
}

void dml_sched_shutdown(struct dml_sched *s)
{
	if (s->peers.stopping)
		return;
	if (s->listener) {
		dml_listener_free(s->listener);
		s->listener = NULL;
	}
	if (s->tick)
		event_del(s->tick);
	dml_metrics_http_stop(s->metrics);
	dml_peers_shutdown(&s->peers, SHUTDOWN_GRACE_S);
}

void dml_sched_free(struct dml_sched *s)
{
	if (!s)
		return;
	/* Connections the grace period could not close are dropped now. */
	dml_peers_destroy(&s->peers);
	if (s->listener)
		dml_listener_free(s->listener);
	if (s->tick)
		event_free(s->tick);
	dml_sched_state_close(s);
	dml_sched_jobs_free(s);
	dml_metrics_free(s->metrics);
	dml_nodes_free(s->nodes);
	dml_secret_free(s->secret, s->secret_len);
	free(s);
}

int dml_sched_failed(const struct dml_sched *s)
{
	return s && dml_sched_state_failed(s);
}

uint16_t dml_sched_port(const struct dml_sched *s)
{
	return s->port;
}
