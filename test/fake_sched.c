/*
 * The scripted scheduler of fake_sched.h. The loop thread owns every
 * connection; the test thread only touches the shared fields under the
 * mutex, and the loop picks up what the test asked for on a 2 ms timer, so
 * no libevent call ever crosses threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <event2/listener.h>

#include "proto/auth.h"
#include "proto/conn.h"
#include "proto/dml_error.h"
#include "test/fake_sched.h"
#include "proto/job_spec.h"
#include "proto/listen.h"
#include "proto/util.h"

#define MAX_NODES 64
#define POLL_US 2000
#define MAX_CONNS 256

struct fnode {
	uint32_t role, node_id;
	char address[300];
	struct dml_conn *conn;     /* loop thread only */
	uint8_t *install;          /* packed SHARDMAP meta to send, or NULL */
	size_t install_len;
	uint64_t install_id;
	int install_done;          /* 1 once answered */
	int install_rc;
	char install_err[256];
	uint64_t answer_clock, answer_bytes; /* the ACK's clock and bytes */
	unsigned stragglers;       /* STRAGGLER frames received, and the last one's */
	uint32_t straggler_worker;
	uint64_t straggler_clock, straggler_us;
};

struct dml_fake_sched {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct event_base *base;
	struct dml_listener *listener;
	struct event *poll;
	uint16_t port;
	int stopping;
	struct dml_conn_conf cc;
	uint8_t *secret;
	size_t secret_len;
	Dml__JobSpec *spec;        /* owned unpacked copies */
	Dml__ShardMap *map;
	unsigned map_requests;
	uint64_t next_id;
	struct fnode nodes[MAX_NODES];
	size_t nnodes;
	struct dml_conn *conns[MAX_CONNS]; /* loop thread only */
};

static Dml__ShardMap *map_copy(const Dml__ShardMap *m)
{
	return dml_msg_copy(&m->base);
}

/* Caller holds the mutex. */
static struct fnode *node_find(struct dml_fake_sched *f, uint32_t role, uint32_t id)
{
	for (size_t i = 0; i < f->nnodes; i++)
		if (f->nodes[i].role == role && f->nodes[i].node_id == id)
			return &f->nodes[i];
	return NULL;
}

static void reply(struct dml_conn *c, Dml__MsgType type, uint64_t id)
{
	Dml__Meta m = DML__META__INIT;

	m.type = type;
	m.request_id = id;
	(void)dml_conn_send(c, &m, NULL, 0, DML_SEND_COPY);
}

static void on_shardmap_request(struct dml_fake_sched *f, struct dml_conn *c,
				const Dml__Meta *req)
{
	Dml__Meta m = DML__META__INIT;

	pthread_mutex_lock(&f->mu);
	f->map_requests++;
	if (!f->map) {
		pthread_mutex_unlock(&f->mu);
		(void)dml_conn_send_error(c, req->request_id, DML_ENOTFOUND, "no shard map yet");
		return;
	}
	m.type = DML__MSG_TYPE__SHARDMAP_REPLY;
	m.request_id = req->request_id;
	m.job = f->map->job;
	m.shard_map = f->map;
	m.job_spec = f->spec;
	(void)dml_conn_send(c, &m, NULL, 0, DML_SEND_COPY);
	pthread_mutex_unlock(&f->mu);
}

/* An ACK or ERROR answering an install. */
static void on_install_answer(struct dml_fake_sched *f, const Dml__Meta *m)
{
	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->nnodes; i++) {
		struct fnode *n = &f->nodes[i];

		if (n->install_id != m->request_id || n->install_done)
			continue;
		n->install_done = 1;
		n->install_rc = m->type == DML__MSG_TYPE__ACK ? 0 : m->error->code;
		n->answer_clock = m->clock;
		n->answer_bytes = m->bytes;
		snprintf(n->install_err, sizeof(n->install_err), "%s",
			 m->type == DML__MSG_TYPE__ERROR && m->error->message ? m->error->message
									      : "");
		pthread_cond_broadcast(&f->cv);
	}
	pthread_mutex_unlock(&f->mu);
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct dml_fake_sched *f = arg;
	const Dml__Handshake *h = dml_conn_peer_hello(c);
	struct fnode *n;
	Dml__Meta r = DML__META__INIT;

	switch (m->type) {
	case DML__MSG_TYPE__REGISTER:
		pthread_mutex_lock(&f->mu);
		n = node_find(f, h->role, h->node_id);
		if (!n && f->nnodes < MAX_NODES) {
			n = &f->nodes[f->nnodes++];
			n->role = h->role;
			n->node_id = h->node_id;
		}
		if (n) {
			n->conn = c;
			snprintf(n->address, sizeof(n->address), "%s",
				 m->node->address ? m->node->address : "");
			pthread_cond_broadcast(&f->cv);
		}
		pthread_mutex_unlock(&f->mu);
		r.type = DML__MSG_TYPE__REGISTER_REPLY;
		r.request_id = m->request_id;
		r.heartbeat_interval_ms = 200;
		(void)dml_conn_send(c, &r, NULL, 0, DML_SEND_COPY);
		return 0;
	case DML__MSG_TYPE__HEARTBEAT:
		reply(c, DML__MSG_TYPE__HEARTBEAT, m->request_id);
		return 0;
	case DML__MSG_TYPE__BYE:
		reply(c, DML__MSG_TYPE__ACK, m->request_id);
		return 0;
	case DML__MSG_TYPE__SHARDMAP:
		on_shardmap_request(f, c, m);
		return 0;
	case DML__MSG_TYPE__STRAGGLER:
		pthread_mutex_lock(&f->mu);
		if ((n = node_find(f, h->role, h->node_id)) != NULL) {
			n->stragglers++;
			n->straggler_worker = m->worker;
			n->straggler_clock = m->clock;
			n->straggler_us = m->held_us;
			pthread_cond_broadcast(&f->cv);
		}
		pthread_mutex_unlock(&f->mu);
		return 0;
	case DML__MSG_TYPE__ACK:
	case DML__MSG_TYPE__ERROR:
		on_install_answer(f, m);
		return 0;
	default:
		return 0;
	}
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct dml_fake_sched *f = arg;

	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->nnodes; i++)
		if (f->nodes[i].conn == c)
			f->nodes[i].conn = NULL;
	pthread_mutex_unlock(&f->mu);
	for (size_t i = 0; i < MAX_CONNS; i++)
		if (f->conns[i] == c)
			f->conns[i] = NULL;
}

static const struct dml_conn_ops fake_ops = {
	.on_frame = on_frame,
	.on_close = on_close,
};

static void accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *addr,
		      int addrlen, void *arg)
{
	struct dml_fake_sched *f = arg;
	struct dml_conn *c;

	if (dml_conn_accept(f->base, fd, &f->cc, &fake_ops, f, &c) != 0)
		return;
	for (size_t i = 0; i < MAX_CONNS; i++)
		if (!f->conns[i]) {
			f->conns[i] = c;
			return;
		}
	dml_conn_abort(c, DML_ECLOSED);
}

/* Send the installs the test asked for; stop when told. */
static void poll_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_fake_sched *f = arg;

	pthread_mutex_lock(&f->mu);
	if (f->stopping) {
		pthread_mutex_unlock(&f->mu);
		/* With the listener, the timer and every connection gone, the
		 * loop runs the deferred teardowns and returns by itself. */
		dml_listener_free(f->listener);
		f->listener = NULL;
		event_del(f->poll);
		for (size_t i = 0; i < MAX_CONNS; i++)
			if (f->conns[i])
				dml_conn_abort(f->conns[i], DML_ECLOSED);
		return;
	}
	for (size_t i = 0; i < f->nnodes; i++) {
		struct fnode *n = &f->nodes[i];
		Dml__Meta *m;

		if (!n->install || !n->conn)
			continue;
		m = dml__meta__unpack(NULL, n->install_len, n->install);
		if (m) {
			(void)dml_conn_send(n->conn, m, NULL, 0, DML_SEND_COPY);
			dml__meta__free_unpacked(m, NULL);
		}
		free(n->install);
		n->install = NULL;
	}
	pthread_mutex_unlock(&f->mu);
}

static void *loop_main(void *arg)
{
	struct dml_fake_sched *f = arg;

	event_base_dispatch(f->base);
	return NULL;
}

int dml_fake_sched_start(const char *secret_file, struct dml_fake_sched **out)
{
	struct dml_fake_sched *f = dml_xcalloc(1, sizeof(*f));
	struct timeval tv = { 0, POLL_US };
	int rc;

	*out = NULL;
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	rc = dml_secret_load(secret_file, &f->secret, &f->secret_len);
	if (rc) {
		free(f);
		return rc;
	}
	dml_conn_conf_default(&f->cc);
	f->cc.secret = f->secret;
	f->cc.secret_len = f->secret_len;
	f->cc.cluster = "dml";
	f->cc.role = DML__ROLE__SCHEDULER;
	f->cc.node_id = 1;
	f->cc.incarnation = 1;
	f->cc.limits.max_payload = 0;
	f->base = event_base_new();
	if (!f->base || dml_listen_tcp(f->base, "127.0.0.1:0", accept_cb, f, &f->listener,
				       &f->port) != 0) {
		dml_fake_sched_stop(f);
		return DML_EIO;
	}
	f->poll = event_new(f->base, -1, EV_PERSIST, poll_cb, f);
	event_add(f->poll, &tv);
	if (pthread_create(&f->thread, NULL, loop_main, f) != 0) {
		dml_fake_sched_stop(f);
		return DML_EIO;
	}
	*out = f;
	return 0;
}

uint16_t dml_fake_sched_port(const struct dml_fake_sched *f)
{
	return f->port;
}

void dml_fake_sched_set_map(struct dml_fake_sched *f, const Dml__JobSpec *spec,
			    const Dml__ShardMap *map)
{
	pthread_mutex_lock(&f->mu);
	if (f->spec)
		dml_job_spec_free(f->spec);
	if (f->map)
		dml__shard_map__free_unpacked(f->map, NULL);
	f->spec = map && spec ? dml_job_spec_copy(spec) : NULL;
	f->map = map && spec ? map_copy(map) : NULL;
	pthread_mutex_unlock(&f->mu);
}

unsigned dml_fake_sched_map_requests(struct dml_fake_sched *f)
{
	unsigned n;

	pthread_mutex_lock(&f->mu);
	n = f->map_requests;
	pthread_mutex_unlock(&f->mu);
	return n;
}

static void deadline_after(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int dml_fake_sched_wait_registered(struct dml_fake_sched *f, uint32_t role,
				   uint32_t node_id, int timeout_ms, char *addr,
				   size_t addrlen)
{
	struct timespec ts;
	struct fnode *n;
	int rc = 0;

	deadline_after(&ts, timeout_ms);
	pthread_mutex_lock(&f->mu);
	while (!((n = node_find(f, role, node_id)) && n->conn) && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	if (n && n->conn && addr)
		snprintf(addr, addrlen, "%s", n->address);
	rc = n && n->conn ? 0 : DML_ETIMEDOUT;
	pthread_mutex_unlock(&f->mu);
	return rc;
}

/* Queue request m (its request_id set here) for server; its answer is awaited
 * like an install's. */
static int request_begin(struct dml_fake_sched *f, uint32_t server, Dml__Meta *m)
{
	struct fnode *n;

	pthread_mutex_lock(&f->mu);
	n = node_find(f, DML__ROLE__SERVER, server);
	if (!n || !n->conn) {
		pthread_mutex_unlock(&f->mu);
		return DML_ENOTFOUND;
	}
	m->request_id = ++f->next_id;
	free(n->install);
	n->install_len = dml__meta__get_packed_size(m);
	n->install = dml_xmalloc(n->install_len + 1);
	dml__meta__pack(m, n->install);
	n->install_id = m->request_id;
	n->install_done = 0;
	pthread_mutex_unlock(&f->mu);
	return 0;
}

int dml_fake_sched_install_begin(struct dml_fake_sched *f, uint32_t server,
				 const Dml__JobSpec *spec, const Dml__ShardMap *map)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__SHARDMAP;
	m.job = map->job;
	m.job_spec = (Dml__JobSpec *)spec;
	m.shard_map = (Dml__ShardMap *)map;
	return request_begin(f, server, &m);
}

int dml_fake_sched_checkpoint_begin(struct dml_fake_sched *f, uint32_t server, uint32_t job,
				    uint64_t clock, int drop)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__CHECKPOINT;
	m.job = job;
	m.clock = clock;
	m.drop = drop;
	return request_begin(f, server, &m);
}

int dml_fake_sched_checkpoint_wait(struct dml_fake_sched *f, uint32_t server, int timeout_ms,
				   uint64_t *clock, uint64_t *bytes, char *err, size_t errlen)
{
	int rc = dml_fake_sched_install_wait(f, server, timeout_ms, err, errlen);
	struct fnode *n;

	pthread_mutex_lock(&f->mu);
	n = node_find(f, DML__ROLE__SERVER, server);
	*clock = n ? n->answer_clock : 0;
	*bytes = n ? n->answer_bytes : 0;
	pthread_mutex_unlock(&f->mu);
	return rc;
}

int dml_fake_sched_evict(struct dml_fake_sched *f, uint32_t server, uint32_t job,
			 uint32_t worker)
{
	Dml__Meta m = DML__META__INIT;

	m.type = DML__MSG_TYPE__EVICT;
	m.job = job;
	m.worker = worker;
	return request_begin(f, server, &m);
}

int dml_fake_sched_straggler_wait(struct dml_fake_sched *f, uint32_t server, unsigned seen,
				  int timeout_ms, uint32_t *worker, uint64_t *clock,
				  uint64_t *held_us)
{
	struct timespec ts;
	struct fnode *n;
	int rc = 0;

	deadline_after(&ts, timeout_ms);
	pthread_mutex_lock(&f->mu);
	while (!((n = node_find(f, DML__ROLE__SERVER, server)) && n->stragglers > seen) &&
	       rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	if (n && n->stragglers > seen) {
		*worker = n->straggler_worker;
		*clock = n->straggler_clock;
		*held_us = n->straggler_us;
		rc = 0;
	} else {
		rc = DML_ETIMEDOUT;
	}
	pthread_mutex_unlock(&f->mu);
	return rc;
}

unsigned dml_fake_sched_stragglers(struct dml_fake_sched *f, uint32_t server)
{
	struct fnode *n;
	unsigned count;

	pthread_mutex_lock(&f->mu);
	n = node_find(f, DML__ROLE__SERVER, server);
	count = n ? n->stragglers : 0;
	pthread_mutex_unlock(&f->mu);
	return count;
}

int dml_fake_sched_install_wait(struct dml_fake_sched *f, uint32_t server, int timeout_ms,
				char *err, size_t errlen)
{
	struct timespec ts;
	struct fnode *n;
	int rc = 0;

	deadline_after(&ts, timeout_ms);
	pthread_mutex_lock(&f->mu);
	n = node_find(f, DML__ROLE__SERVER, server);
	while (n && !n->install_done && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&f->cv, &f->mu, &ts);
	if (!n)
		rc = DML_ENOTFOUND;
	else if (!n->install_done)
		rc = DML_ETIMEDOUT;
	else
		rc = n->install_rc;
	if (err && errlen)
		snprintf(err, errlen, "%s", n && n->install_done ? n->install_err : "");
	pthread_mutex_unlock(&f->mu);
	return rc;
}

int dml_fake_sched_install(struct dml_fake_sched *f, uint32_t server,
			   const Dml__JobSpec *spec, const Dml__ShardMap *map,
			   int timeout_ms, char *err, size_t errlen)
{
	int rc = dml_fake_sched_install_begin(f, server, spec, map);

	return rc ? rc : dml_fake_sched_install_wait(f, server, timeout_ms, err, errlen);
}

void dml_fake_sched_stop(struct dml_fake_sched *f)
{
	if (!f)
		return;
	if (f->thread) {
		pthread_mutex_lock(&f->mu);
		f->stopping = 1;
		pthread_mutex_unlock(&f->mu);
		pthread_join(f->thread, NULL);
	}
	/* Connections still open are dropped with the base. */
	if (f->poll)
		event_free(f->poll);
	if (f->listener)
		dml_listener_free(f->listener);
	if (f->base)
		event_base_free(f->base);
	for (size_t i = 0; i < f->nnodes; i++)
		free(f->nodes[i].install);
	if (f->spec)
		dml_job_spec_free(f->spec);
	if (f->map)
		dml__shard_map__free_unpacked(f->map, NULL);
	dml_secret_free(f->secret, f->secret_len);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
}
