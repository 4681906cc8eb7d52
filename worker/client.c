/*
 * libdml: the worker-side client (see dml.h for the contract).
 *
 * A user request is split by shard into parts, one per server. Each part has
 * its own wire request id and, for pushes, a per-server sequence number. A
 * part stays on its server link's in-flight list, in send order, until its
 * reply arrives; when a connection breaks, the link reconnects with backoff
 * and resends the whole list in order (the server acknowledges, but does not
 * re-apply, pushes it has already seen). The user's handle completes when all
 * of its parts have.
 *
 * Must never: modify a caller's push buffer, write a pull's output after the
 * request failed or was waited, spin while waiting (the event loop sleeps in
 * epoll until a reply, a timer or a reconnect is due), or keep a part that no
 * handle can reach.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "auth.h"
#include "client_internal.h"
#include "conn.h"
#include "dml.h"
#include "log.h"
#include "shardmap.h"
#include "util.h"

#define TICK_MS 50
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 2000
#define CLOSE_WAIT_MS 10000
#define MAX_SERVERS 4096
/* A request sent this often without an answer, each time losing its
 * connection, is what breaks the connection: fail it instead of looping. */
#define MAX_SENDS 5

enum part_kind { PART_PUSH, PART_PULL, PART_BYE };

struct request;

struct part {
	struct part *prev, *next;      /* the link's in-flight list, send order */
	struct part *hnext;            /* wire-id hash chain */
	struct request *req;
	struct link *link;
	enum part_kind kind;
	uint64_t wire_id;
	uint64_t seq;
	unsigned sends;                /* times written to a connection */
	uint32_t table, width;
	int dense;
	uint64_t begin, end;
	uint32_t nkeys;
	const uint64_t *keys;          /* borrowed from the caller, or keys_own */
	const float *vals;             /* push: borrowed, or vals_own */
	float *out;                    /* pull: destination of row 0 */
	uint32_t *pos;                 /* pull: caller row of each reply row */
	uint64_t *keys_own;
	float *vals_own;
};

struct request {
	struct request *hnext;
	dml_handle_t id;
	unsigned parts_left;
	int result;
	int pull;
	uint64_t min_clock;
	uint64_t deadline_ns;
};

struct link {
	struct dml *d;
	uint32_t index;
	char host[256];
	uint16_t port;
	struct dml_conn *conn;
	int ready;
	int failed;                    /* gave up: requests to it fail */
	int fatal;                     /* handshake refused: do not retry */
	uint64_t next_seq;
	uint64_t lost_since_ns;
	uint64_t retry_at_ns;
	uint32_t backoff_ms;
	struct part *head, *tail;
	Dml__TableInfo **tables;       /* copied from WELCOME */
	size_t ntables;
};

struct dml {
	struct dml_client_conf conf;
	struct event_base *base;
	struct event *tick;
	struct dml_conn_conf cc;
	uint8_t *secret;
	size_t secret_len;
	struct link *links;
	uint32_t nlinks;
	struct dml_shard_map map;

	uint64_t clock;
	uint64_t last_min_clock;
	uint64_t next_handle, next_wire;
	struct request **reqs;         /* handle hash */
	struct part **parts;           /* wire-id hash */
	size_t nbuckets;               /* power of two, shared by both */
	size_t nreqs;
	int sticky_error;              /* first error of a handle-less request */
	char detail[512];
};

/* ---- bookkeeping ------------------------------------------------------- */

static void grow_buckets(struct dml *d)
{
	size_t n = d->nbuckets * 2;
	struct request **reqs = dml_xcalloc(n, sizeof(*reqs));
	struct part **parts = dml_xcalloc(n, sizeof(*parts));

	for (size_t i = 0; i < d->nbuckets; i++) {
		while (d->reqs[i]) {
			struct request *r = d->reqs[i];

			d->reqs[i] = r->hnext;
			r->hnext = reqs[r->id & (n - 1)];
			reqs[r->id & (n - 1)] = r;
		}
		while (d->parts[i]) {
			struct part *p = d->parts[i];

			d->parts[i] = p->hnext;
			p->hnext = parts[p->wire_id & (n - 1)];
			parts[p->wire_id & (n - 1)] = p;
		}
	}
	free(d->reqs);
	free(d->parts);
	d->reqs = reqs;
	d->parts = parts;
	d->nbuckets = n;
}

static struct request *find_request(struct dml *d, dml_handle_t id)
{
	struct request *r = d->reqs[id & (d->nbuckets - 1)];

	while (r && r->id != id)
		r = r->hnext;
	return r;
}

static struct request *request_new(struct dml *d, int pull)
{
	struct request *r = dml_xcalloc(1, sizeof(*r));
	size_t b;

	if (d->nreqs >= d->nbuckets)
		grow_buckets(d);
	r->id = ++d->next_handle;
	r->pull = pull;
	r->min_clock = UINT64_MAX;
	if (d->conf.request_timeout_ms)
		r->deadline_ns = dml_now_ns() + d->conf.request_timeout_ms * 1000000ull;
	b = r->id & (d->nbuckets - 1);
	r->hnext = d->reqs[b];
	d->reqs[b] = r;
	d->nreqs++;
	return r;
}

static void request_unlink(struct dml *d, struct request *r)
{
	struct request **pp = &d->reqs[r->id & (d->nbuckets - 1)];

	while (*pp != r)
		pp = &(*pp)->hnext;
	*pp = r->hnext;
	d->nreqs--;
}

static void request_free(struct dml *d, struct request *r)
{
	request_unlink(d, r);
	free(r);
}

static struct part *find_part(struct dml *d, uint64_t wire_id)
{
	struct part *p = d->parts[wire_id & (d->nbuckets - 1)];

	while (p && p->wire_id != wire_id)
		p = p->hnext;
	return p;
}

static void part_unlink(struct dml *d, struct part *p)
{
	struct link *l = p->link;
	struct part **pp = &d->parts[p->wire_id & (d->nbuckets - 1)];

	while (*pp != p)
		pp = &(*pp)->hnext;
	*pp = p->hnext;
	if (p->prev)
		p->prev->next = p->next;
	else
		l->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	else
		l->tail = p->prev;
}

static void part_discard(struct part *p)
{
	free(p->keys_own);
	free(p->vals_own);
	free(p->pos);
	free(p);
}

/* A part is done (rc 0) or failed; the request completes with its last part. */
static void part_finish(struct dml *d, struct part *p, int rc)
{
	struct request *r = p->req;

	part_unlink(d, p);
	if (rc && r->result == 0)
		r->result = rc;
	r->parts_left--;
	part_discard(p);
	if (r->parts_left == 0 && r->id == 0) {
		/* Nobody holds a handle: keep the first error for dml_wait_all. */
		if (r->result && !d->sticky_error)
			d->sticky_error = r->result;
		free(r);
	}
}

/* ---- sending ------------------------------------------------------------ */

static int part_send(struct dml *d, struct part *p)
{
	Dml__Meta m = DML__META__INIT;
	struct iovec iov[2];
	int n = 0;

	p->sends++;
	m.request_id = p->wire_id;
	m.sender = d->conf.worker_id;
	m.job = d->conf.job;
	m.table = p->table;
	m.value_width = p->width;
	m.dense = p->dense;
	m.key_begin = p->begin;
	m.key_end = p->end;
	m.num_keys = p->dense ? 0 : p->nkeys;
	m.clock = d->clock;
	switch (p->kind) {
	case PART_PUSH:
		m.type = DML__MSG_TYPE__PUSH;
		m.seq = p->seq;
		if (!p->dense) {
			iov[n].iov_base = (void *)p->keys;
			iov[n++].iov_len = p->nkeys * sizeof(uint64_t);
		}
		iov[n].iov_base = (void *)p->vals;
		iov[n++].iov_len = (p->dense ? p->end - p->begin : p->nkeys) * p->width *
				   sizeof(float);
		break;
	case PART_PULL:
		m.type = DML__MSG_TYPE__PULL;
		if (!p->dense) {
			iov[n].iov_base = (void *)p->keys;
			iov[n++].iov_len = p->nkeys * sizeof(uint64_t);
		}
		break;
	case PART_BYE:
		m.type = DML__MSG_TYPE__BYE;
		break;
	}
	return dml_conn_sendv(p->link->conn, &m, iov, n, DML_SEND_REF);
}

static void send_clock(struct link *l)
{
	Dml__Meta m = DML__META__INIT;

	if (l->d->conf.role != 0 || l->d->clock == 0)
		return;
	m.type = DML__MSG_TYPE__CLOCK;
	m.sender = l->d->conf.worker_id;
	m.job = l->d->conf.job;
	m.clock = l->d->clock;
	(void)dml_conn_send(l->conn, &m, NULL, 0, DML_SEND_COPY);
}

/*
 * Queue a part on its link; sent now if the link is up, else on reconnect.
 * On failure the part is freed.
 */
static int part_submit(struct dml *d, struct request *r, struct part *p)
{
	struct link *l = p->link;
	size_t b;
	int rc;

	if (l->failed) {
		part_discard(p);
		return DML_ECONN;
	}
	p->req = r;
	p->wire_id = ++d->next_wire;
	if (p->kind == PART_PUSH)
		p->seq = ++l->next_seq;
	if (d->nreqs >= d->nbuckets)
		grow_buckets(d);
	b = p->wire_id & (d->nbuckets - 1);
	p->hnext = d->parts[b];
	d->parts[b] = p;
	p->prev = l->tail;
	if (l->tail)
		l->tail->next = p;
	else
		l->head = p;
	l->tail = p;
	r->parts_left++;
	if (l->ready && (rc = part_send(d, p)) != 0) {
		r->parts_left--;
		part_unlink(d, p);
		part_discard(p);
		return rc;
	}
	return 0;
}

/* ---- connection events --------------------------------------------------- */

static void link_connect(struct link *l);

static void link_fail_all(struct link *l, int rc)
{
	while (l->head)
		part_finish(l->d, l->head, rc);
}

static int on_welcome(struct dml_conn *c, const Dml__Handshake *w, void *arg)
{
	struct link *l = arg;

	if (w->shard_count != l->d->nlinks || w->shard_index != l->index) {
		snprintf(l->d->detail, sizeof(l->d->detail),
			 "server %.64s:%u is shard %u/%u but is listed at position %u of %u",
			 l->host, l->port, w->shard_index, w->shard_count, l->index, l->d->nlinks);
		dml_err("%s", l->d->detail);
		l->fatal = DML_ECONF;
		return DML_ECONF;
	}
	for (size_t i = 0; i < l->ntables; i++)
		free(l->tables[i]);
	free(l->tables);
	l->ntables = w->n_tables;
	l->tables = dml_xcalloc(w->n_tables ? w->n_tables : 1, sizeof(*l->tables));
	for (size_t i = 0; i < w->n_tables; i++) {
		l->tables[i] = dml_xmalloc(sizeof(Dml__TableInfo));
		*l->tables[i] = *w->tables[i];
		l->tables[i]->base.unknown_fields = NULL;
		l->tables[i]->base.n_unknown_fields = 0;
	}
	return 0;
}

static void on_ready(struct dml_conn *c, void *arg)
{
	struct link *l = arg;

	l->ready = 1;
	l->backoff_ms = 0;
	l->lost_since_ns = 0;
	/* Resend everything unanswered, in order, then where our clock is. */
	for (struct part *p = l->head; p; ) {
		struct part *next = p->next;
		int rc = part_send(l->d, p);

		if (rc)
			part_finish(l->d, p, rc);
		p = next;
	}
	send_clock(l);
}

static void *payload_dest(struct dml_conn *c, const Dml__Meta *m, void *arg)
{
	struct link *l = arg;
	struct part *p;

	if (m->type != DML__MSG_TYPE__PULL_REPLY)
		return NULL;
	p = find_part(l->d, m->request_id);
	if (!p || p->link != l || p->kind != PART_PULL || p->pos)
		return NULL;
	if (m->payload_bytes != (uint64_t)(p->dense ? p->end - p->begin : p->nkeys) *
				p->width * sizeof(float))
		return NULL;
	return p->out;
}

static int on_frame(struct dml_conn *c, const Dml__Meta *m, const uint8_t *payload,
		    size_t len, void *arg)
{
	struct link *l = arg;
	struct dml *d = l->d;
	struct part *p = find_part(d, m->request_id);

	if (m->type == DML__MSG_TYPE__HEARTBEAT)
		return 0;
	if (!p || p->link != l) {
		if (m->type == DML__MSG_TYPE__ERROR && m->request_id == 0) {
			snprintf(d->detail, sizeof(d->detail), "%s", m->error->message);
			return 0;
		}
		dml_debug("server %s:%u: reply to unknown request %llu", l->host, l->port,
			  (unsigned long long)m->request_id);
		return 0;
	}
	switch (m->type) {
	case DML__MSG_TYPE__ACK:
		if (p->kind == PART_PULL)
			return DML_ESTATE;
		part_finish(d, p, 0);
		return 0;
	case DML__MSG_TYPE__ERROR:
		snprintf(d->detail, sizeof(d->detail), "server %.64s:%u: %s", l->host, l->port,
			 m->error->message);
		part_finish(d, p, m->error->code < 0 && m->error->code > DML_ERR_MIN
					  ? m->error->code : DML_EIO);
		return 0;
	case DML__MSG_TYPE__PULL_REPLY: {
		uint64_t rows = p->dense ? p->end - p->begin : p->nkeys;
		size_t row_bytes = p->width * sizeof(float);

		if (p->kind != PART_PULL || len != rows * row_bytes)
			return DML_EFRAME_COUNT;
		if (p->pos) {
			for (uint64_t i = 0; i < rows; i++)
				memcpy(p->out + (size_t)p->pos[i] * p->width,
				       payload + i * row_bytes, row_bytes);
		} else if (payload != (const uint8_t *)p->out) {
			memcpy(p->out, payload, len);
		}
		if (m->min_clock < p->req->min_clock)
			p->req->min_clock = m->min_clock;
		part_finish(d, p, 0);
		return 0;
	}
	default:
		return DML_ESTATE;
	}
}

static void on_close(struct dml_conn *c, int err, void *arg)
{
	struct link *l = arg;

	if (l->conn != c)
		return;
	l->conn = NULL;
	l->ready = 0;
	/* Leaving needs no answer from a server that is gone; and a request that
	 * keeps losing its connection is failed rather than sent forever. */
	for (struct part *p = l->head; p; ) {
		struct part *next = p->next;

		if (p->kind == PART_BYE)
			part_finish(l->d, p, 0);
		else if (p->sends >= MAX_SENDS)
			part_finish(l->d, p, err ? err : DML_ECONN);
		p = next;
	}
	if (err == DML_EAUTH || err == DML_ECLUSTER || err == DML_EROLE || err == DML_ECONF ||
	    err == DML_EFRAME_VERSION)
		l->fatal = err;
	if (!l->lost_since_ns)
		l->lost_since_ns = dml_now_ns();
	l->backoff_ms = l->backoff_ms ? l->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (l->backoff_ms > BACKOFF_MAX_MS)
		l->backoff_ms = BACKOFF_MAX_MS;
	l->retry_at_ns = dml_now_ns() + l->backoff_ms * 1000000ull;
	dml_debug("server %s:%u: connection closed (%s)", l->host, l->port,
		  err ? dml_strerror(err) : "clean");
}

static const struct dml_conn_ops client_ops = {
	.on_welcome = on_welcome,
	.on_ready = on_ready,
	.payload_dest = payload_dest,
	.on_frame = on_frame,
	.on_close = on_close,
};

static void link_connect(struct link *l)
{
	struct dml *d = l->d;

	if (dml_conn_connect(d->base, l->host, l->port, &d->cc, &client_ops, l, &l->conn)) {
		l->conn = NULL;
		l->retry_at_ns = dml_now_ns() + BACKOFF_MAX_MS * 1000000ull;
	}
}

/* Reconnects that are due, links given up on, requests past their deadline. */
static void housekeeping(struct dml *d)
{
	uint64_t now = dml_now_ns();

	for (uint32_t i = 0; i < d->nlinks; i++) {
		struct link *l = &d->links[i];

		if (l->conn || l->failed)
			continue;
		if (l->fatal || (l->lost_since_ns &&
				 now - l->lost_since_ns > d->conf.reconnect_timeout_ms * 1000000ull)) {
			l->failed = 1;
			dml_err("server %s:%u: giving up: %s", l->host, l->port,
				l->fatal ? dml_strerror(l->fatal) : "unreachable");
			link_fail_all(l, l->fatal ? l->fatal : DML_ECONN);
			continue;
		}
		if (now >= l->retry_at_ns)
			link_connect(l);
	}
	if (!d->conf.request_timeout_ms)
		return;
	for (uint32_t i = 0; i < d->nlinks; i++) {
		for (struct part *p = d->links[i].head; p; ) {
			struct part *next = p->next;

			if (p->req->deadline_ns && now > p->req->deadline_ns)
				part_finish(d, p, DML_ETIMEDOUT);
			p = next;
		}
	}
}

static int parts_in_flight(const struct dml *d)
{
	for (uint32_t i = 0; i < d->nlinks; i++)
		if (d->links[i].head)
			return 1;
	return 0;
}

/*
 * Run the loop until done() holds or deadline_ns (0 = none) passes. Before
 * sleeping it polls for up to spin_us: a reply usually comes within
 * microseconds, and waking a process that sleeps in epoll costs both ends
 * (in a VM, the waker pays for an inter-processor interrupt) far more than a
 * short poll on a core the caller is not using for anything else.
 */
static void run_until(struct dml *d, int (*done)(struct dml *, void *), void *arg,
		      uint64_t deadline_ns)
{
	uint64_t spin_until = d->conf.spin_us ? dml_now_ns() + d->conf.spin_us * 1000ull : 0;

	for (;;) {
		housekeeping(d);
		if (done(d, arg) || (deadline_ns && dml_now_ns() >= deadline_ns))
			return;
		if (spin_until && dml_now_ns() < spin_until)
			event_base_loop(d->base, EVLOOP_NONBLOCK);
		else
			event_base_loop(d->base, EVLOOP_ONCE);
	}
}

static int request_done(struct dml *d, void *arg)
{
	return ((struct request *)arg)->parts_left == 0;
}

static int nothing_in_flight(struct dml *d, void *arg)
{
	return !parts_in_flight(d);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
	housekeeping(arg);
}

/* ---- connect / close ------------------------------------------------------ */

static int parse_servers(struct dml *d)
{
	char *list = dml_xstrdup(d->conf.servers), *save = NULL, *tok;
	int rc = 0;

	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		struct link *l;

		while (*tok == ' ')
			tok++;
		if (d->nlinks >= MAX_SERVERS) {
			rc = DML_EINVAL;
			break;
		}
		d->links = dml_xrealloc(d->links, (d->nlinks + 1) * sizeof(*d->links));
		l = &d->links[d->nlinks];
		memset(l, 0, sizeof(*l));
		if (dml_parse_hostport(tok, l->host, sizeof(l->host), &l->port, 0) != 0) {
			snprintf(d->detail, sizeof(d->detail), "servers: '%s' is not host:port", tok);
			rc = DML_EINVAL;
			break;
		}
		l->d = d;
		l->index = d->nlinks++;
	}
	free(list);
	if (rc == 0 && d->nlinks == 0) {
		snprintf(d->detail, sizeof(d->detail), "servers: no server given");
		rc = DML_EINVAL;
	}
	return rc;
}

static int build_map(struct dml *d)
{
	char err[256] = "";
	int rc = 0;

	dml_shard_map_init(&d->map, d->nlinks);
	for (uint32_t i = 0; i < d->nlinks && rc == 0; i++) {
		for (size_t j = 0; j < d->links[i].ntables && rc == 0; j++) {
			const Dml__TableInfo *t = d->links[i].tables[j];

			rc = dml_shard_map_add(&d->map, i, t->id, t->dense, t->width, t->keys,
					       t->key_begin, t->key_end, err, sizeof(err));
		}
	}
	if (rc == 0)
		rc = dml_shard_map_finish(&d->map, err, sizeof(err));
	if (rc) {
		snprintf(d->detail, sizeof(d->detail), "shard map: %s", err[0] ? err
			 : dml_strerror(rc));
		dml_err("%s", d->detail);
		return DML_ECONF;
	}
	return 0;
}

static void dml_free_all(struct dml *d)
{
	for (uint32_t i = 0; i < d->nlinks; i++) {
		struct link *l = &d->links[i];

		link_fail_all(l, DML_ECLOSED);
		if (l->conn)
			dml_conn_abort(l->conn, DML_ECLOSED);
	}
	/* Let the loop run the deferred teardown of every connection. */
	for (int i = 0; i < 100; i++) {
		int open = 0;

		for (uint32_t j = 0; j < d->nlinks; j++)
			open += d->links[j].conn != NULL;
		if (!open)
			break;
		event_base_loop(d->base, EVLOOP_NONBLOCK);
	}
	for (uint32_t i = 0; i < d->nlinks; i++) {
		for (size_t j = 0; j < d->links[i].ntables; j++)
			free(d->links[i].tables[j]);
		free(d->links[i].tables);
	}
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
	dml_shard_map_destroy(&d->map);
	if (d->tick)
		event_free(d->tick);
	if (d->base)
		event_base_free(d->base);
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

static void copy_conf(struct dml_client_conf *dst, const struct dml_client_conf *src)
{
	*dst = *src;
	dst->servers = dml_xstrdup(src->servers ? src->servers : "");
	dst->secret_file = dml_xstrdup(src->secret_file ? src->secret_file : "");
	dst->cluster = dml_xstrdup(src->cluster ? src->cluster : "dml");
}

int dml_connect(const dml_opts_t *opts, dml_t **out)
{
	struct timeval tick = { 0, TICK_MS * 1000 };
	struct dml *d;
	uint64_t deadline;
	int rc = 0;

	if (!opts || !out)
		return DML_EINVAL;
	*out = NULL;
	d = dml_xcalloc(1, sizeof(*d));
	copy_conf(&d->conf, &opts->conf);
	d->nbuckets = 64;
	d->reqs = dml_xcalloc(d->nbuckets, sizeof(*d->reqs));
	d->parts = dml_xcalloc(d->nbuckets, sizeof(*d->parts));
	if (d->conf.role == 0 && d->conf.worker_id == 0) {
		dml_err("worker_id is required for role worker");
		dml_free_all(d);
		return DML_EINVAL;
	}
	if ((rc = parse_servers(d)) != 0) {
		dml_err("%s", d->detail);
		dml_free_all(d);
		return rc;
	}
	if ((rc = dml_secret_load(d->conf.secret_file, &d->secret, &d->secret_len)) != 0) {
		dml_free_all(d);
		return rc;
	}
	ignore_sigpipe();
	d->base = event_base_new();
	if (!d->base) {
		dml_free_all(d);
		return DML_ENOMEM;
	}
	dml_conn_conf_default(&d->cc);
	d->cc.limits.max_payload = (uint32_t)d->conf.max_payload;
	d->cc.secret = d->secret;
	d->cc.secret_len = d->secret_len;
	d->cc.cluster = d->conf.cluster;
	d->cc.role = d->conf.role == 0 ? DML__ROLE__WORKER : DML__ROLE__CONTROL;
	d->cc.node_id = d->conf.worker_id;
	d->cc.job = d->conf.job;
	d->cc.handshake_timeout_ms = d->conf.connect_timeout_ms;
	if (dml_random_bytes(&d->cc.incarnation, sizeof(d->cc.incarnation)) != 0) {
		dml_free_all(d);
		return DML_EIO;
	}
	d->tick = event_new(d->base, -1, EV_PERSIST, tick_cb, d);
	event_add(d->tick, &tick);

	deadline = dml_now_ns() + d->conf.connect_timeout_ms * 1000000ull;
	for (uint32_t i = 0; i < d->nlinks; i++)
		link_connect(&d->links[i]);
	for (;;) {
		uint32_t ready = 0;

		for (uint32_t i = 0; i < d->nlinks; i++) {
			ready += d->links[i].ready;
			if (d->links[i].fatal && !rc)
				rc = d->links[i].fatal;
		}
		if (rc || ready == d->nlinks)
			break;
		if (dml_now_ns() > deadline) {
			rc = DML_ETIMEDOUT;
			break;
		}
		event_base_loop(d->base, EVLOOP_ONCE);
		/* Keep retrying refused connections until the deadline. */
		for (uint32_t i = 0; i < d->nlinks; i++)
			if (!d->links[i].conn && !d->links[i].fatal &&
			    dml_now_ns() >= d->links[i].retry_at_ns)
				link_connect(&d->links[i]);
	}
	if (rc == 0)
		rc = build_map(d);
	if (rc) {
		for (uint32_t i = 0; i < d->nlinks; i++)
			if (!d->links[i].ready)
				dml_err("server %s:%u: %s", d->links[i].host, d->links[i].port,
					dml_strerror(d->links[i].fatal ? d->links[i].fatal : rc));
		dml_free_all(d);
		return rc;
	}
	*out = d;
	return 0;
}

/* ---- requests ------------------------------------------------------------- */

static const struct dml_shard_table *lookup_table(struct dml *d, uint32_t table)
{
	return dml_shard_map_table(&d->map, table);
}

static struct part *part_new(struct dml *d, enum part_kind kind,
			     const struct dml_shard_table *t, uint32_t server)
{
	struct part *p = dml_xcalloc(1, sizeof(*p));

	p->kind = kind;
	p->link = &d->links[server];
	p->table = t->id;
	p->width = t->width;
	p->dense = 1;   /* key-list requests clear it */
	return p;
}

/* Either hand the handle to the caller or make the request fire-and-forget. */
static int request_done_submitting(struct dml *d, struct request *r, int rc,
				   dml_handle_t *h)
{
	if (rc == 0 && h) {
		*h = r->id;
		return 0;
	}
	/*
	 * No handle for the caller (none wanted, or the submit failed): parts
	 * already sent finish later and free the request then. After a failed
	 * submit their own errors still surface in dml_wait_all, not this one.
	 */
	if (h)
		*h = 0;
	request_unlink(d, r);
	r->id = 0;
	r->result = 0;
	if (r->parts_left == 0)
		free(r);
	return rc;
}

static int submit_range(struct dml *d, enum part_kind kind, uint32_t table, uint64_t begin,
			uint64_t end, const float *vals, float *out, dml_handle_t *h)
{
	const struct dml_shard_table *t = lookup_table(d, table);
	struct request *r;
	int rc = 0;

	if (h)
		*h = 0;
	if (!t)
		return DML_ENOTFOUND;
	if (!t->dense)
		return DML_EINVAL;
	if (begin >= end || end > t->keys)
		return DML_ERANGE;
	r = request_new(d, kind == PART_PULL);
	for (size_t i = 0; i < t->nranges && rc == 0; i++) {
		const struct dml_shard_range *sr = &t->ranges[i];
		uint64_t b = begin > sr->begin ? begin : sr->begin;
		uint64_t e = end < sr->end ? end : sr->end;
		struct part *p;

		if (b >= e)
			continue;
		p = part_new(d, kind, t, sr->server);
		p->begin = b;
		p->end = e;
		if (vals)
			p->vals = vals + (b - begin) * t->width;
		if (out)
			p->out = out + (b - begin) * t->width;
		rc = part_submit(d, r, p);
	}
	return request_done_submitting(d, r, rc, h);
}

/* The whole key list goes to one server, straight from the caller's buffers. */
static int submit_whole(struct dml *d, struct request *r, enum part_kind kind,
			const struct dml_shard_table *t, uint32_t server, const uint64_t *keys,
			size_t n, const float *vals, float *out)
{
	struct part *p = part_new(d, kind, t, server);

	p->dense = 0;
	p->keys = keys;
	p->nkeys = (uint32_t)n;
	p->vals = vals;
	p->out = out;
	return part_submit(d, r, p);
}

static int submit_keys(struct dml *d, enum part_kind kind, uint32_t table,
		       const uint64_t *keys, size_t n, const float *vals, float *out,
		       dml_handle_t *h)
{
	const struct dml_shard_table *t = lookup_table(d, table);
	uint32_t *server, *count;
	struct part **parts;
	struct request *r;
	uint32_t used = 0, only = 0;
	int rc = 0;

	if (h)
		*h = 0;
	if (!t)
		return DML_ENOTFOUND;
	if (n == 0 || n > UINT32_MAX || !keys)
		return DML_EINVAL;
	if (t->nranges == 1) {
		/* One server holds the whole table: nothing to route or copy. */
		r = request_new(d, kind == PART_PULL);
		return request_done_submitting(d, r, submit_whole(d, r, kind, t, t->ranges[0].server,
								  keys, n, vals, out), h);
	}
	server = malloc(n * sizeof(*server));
	count = dml_xcalloc(d->nlinks, sizeof(*count));
	if (!server) {
		free(count);
		return DML_ENOMEM;
	}
	for (size_t i = 0; i < n; i++) {
		const struct dml_shard_range *sr = dml_shard_route(t, keys[i]);

		if (!sr) {
			free(server);
			free(count);
			return DML_ERANGE;
		}
		server[i] = sr->server;
		if (count[sr->server]++ == 0) {
			used++;
			only = sr->server;
		}
	}
	r = request_new(d, kind == PART_PULL);
	if (used == 1) {
		/* All keys in one shard: no copies either. */
		rc = submit_whole(d, r, kind, t, only, keys, n, vals, out);
		free(server);
		free(count);
		return request_done_submitting(d, r, rc, h);
	}
	parts = dml_xcalloc(d->nlinks, sizeof(*parts));
	for (uint32_t s = 0; s < d->nlinks; s++) {
		if (!count[s])
			continue;
		parts[s] = part_new(d, kind, t, s);
		parts[s]->dense = 0;
		parts[s]->keys_own = dml_xmalloc(count[s] * sizeof(uint64_t));
		parts[s]->keys = parts[s]->keys_own;
		if (vals) {
			parts[s]->vals_own = dml_xmalloc((size_t)count[s] * t->width * sizeof(float));
			parts[s]->vals = parts[s]->vals_own;
		}
		if (out) {
			parts[s]->pos = dml_xmalloc(count[s] * sizeof(uint32_t));
			parts[s]->out = out;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct part *p = parts[server[i]];
		uint32_t k = p->nkeys++;

		p->keys_own[k] = keys[i];
		if (vals)
			memcpy(p->vals_own + (size_t)k * t->width, vals + i * t->width,
			       t->width * sizeof(float));
		if (out)
			p->pos[k] = (uint32_t)i;
	}
	for (uint32_t s = 0; s < d->nlinks; s++) {
		if (!parts[s])
			continue;
		if (rc == 0)
			rc = part_submit(d, r, parts[s]);
		else
			part_discard(parts[s]);
	}
	free(parts);
	free(server);
	free(count);
	return request_done_submitting(d, r, rc, h);
}

int dml_push(dml_t *d, uint32_t table, const uint64_t *keys, size_t n, const float *vals,
	     dml_handle_t *h)
{
	if (!d || !vals)
		return DML_EINVAL;
	return submit_keys(d, PART_PUSH, table, keys, n, vals, NULL, h);
}

int dml_pull(dml_t *d, uint32_t table, const uint64_t *keys, size_t n, float *out,
	     dml_handle_t *h)
{
	if (!d || !out || !h)
		return DML_EINVAL;
	return submit_keys(d, PART_PULL, table, keys, n, NULL, out, h);
}

int dml_push_range(dml_t *d, uint32_t table, uint64_t begin, uint64_t end,
		   const float *vals, dml_handle_t *h)
{
	if (!d || !vals)
		return DML_EINVAL;
	return submit_range(d, PART_PUSH, table, begin, end, vals, NULL, h);
}

int dml_pull_range(dml_t *d, uint32_t table, uint64_t begin, uint64_t end, float *out,
		   dml_handle_t *h)
{
	if (!d || !out || !h)
		return DML_EINVAL;
	return submit_range(d, PART_PULL, table, begin, end, NULL, out, h);
}

int dml_test(dml_t *d, dml_handle_t h, int *done)
{
	struct request *r;

	if (!d || !done)
		return DML_EINVAL;
	r = find_request(d, h);
	if (!r)
		return DML_ENOTFOUND;
	*done = r->parts_left == 0;
	return 0;
}

int dml_wait(dml_t *d, dml_handle_t h)
{
	struct request *r;
	int rc;

	if (!d)
		return DML_EINVAL;
	if (h == 0)
		return 0;
	r = find_request(d, h);
	if (!r)
		return DML_ENOTFOUND;
	run_until(d, request_done, r, 0);
	rc = r->result;
	if (r->pull && rc == 0)
		d->last_min_clock = r->min_clock;
	request_free(d, r);
	return rc;
}

int dml_wait_all(dml_t *d)
{
	int rc;

	if (!d)
		return DML_EINVAL;
	run_until(d, nothing_in_flight, NULL, 0);
	rc = d->sticky_error;
	d->sticky_error = 0;
	/* Requests with handles are done now; their results stay for dml_wait. */
	for (size_t i = 0; i < d->nbuckets && rc == 0; i++)
		for (struct request *r = d->reqs[i]; r && rc == 0; r = r->hnext)
			rc = r->result;
	return rc;
}

int dml_clock(dml_t *d)
{
	int rc = 0;

	if (!d)
		return DML_EINVAL;
	if (d->conf.role != 0)
		return DML_EROLE;
	d->clock++;
	for (uint32_t i = 0; i < d->nlinks; i++) {
		struct link *l = &d->links[i];

		if (l->failed)
			rc = DML_ECONN;
		else if (l->ready)
			send_clock(l);
	}
	return rc;
}

uint64_t dml_current_clock(const dml_t *d)
{
	return d ? d->clock : 0;
}

uint64_t dml_last_pull_min_clock(const dml_t *d)
{
	return d ? d->last_min_clock : 0;
}

int dml_progress(dml_t *d, int timeout_ms)
{
	struct timeval tv;

	if (!d || timeout_ms < 0)
		return DML_EINVAL;
	housekeeping(d);
	if (timeout_ms == 0)
		return event_base_loop(d->base, EVLOOP_NONBLOCK) < 0 ? DML_EIO : 0;
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	event_base_loopexit(d->base, &tv);
	return event_base_loop(d->base, 0) < 0 ? DML_EIO : 0;
}

const char *dml_error_detail(const dml_t *d)
{
	return d ? d->detail : "";
}

int dml_table_width(dml_t *d, uint32_t table, uint32_t *width)
{
	const struct dml_shard_table *t;

	if (!d || !width)
		return DML_EINVAL;
	t = lookup_table(d, table);
	if (!t)
		return DML_ENOTFOUND;
	*width = t->width;
	return 0;
}

int dml_table_size(dml_t *d, uint32_t table, uint64_t *keys)
{
	const struct dml_shard_table *t;

	if (!d || !keys)
		return DML_EINVAL;
	t = lookup_table(d, table);
	if (!t)
		return DML_ENOTFOUND;
	*keys = t->dense ? t->keys : 0;
	return 0;
}

void dml_close(dml_t *d)
{
	uint64_t deadline;
	struct request *r;
	uint32_t ms;

	if (!d)
		return;
	ms = d->conf.request_timeout_ms ? d->conf.request_timeout_ms : CLOSE_WAIT_MS;
	deadline = dml_now_ns() + ms * 1000000ull;
	/* Pushes in flight first, then tell every server we leave. */
	run_until(d, nothing_in_flight, NULL, deadline);
	if (d->conf.role == 0) {
		r = request_new(d, 0);
		for (uint32_t i = 0; i < d->nlinks; i++) {
			struct link *l = &d->links[i];

			if (l->ready && !l->failed) {
				struct part *p = dml_xcalloc(1, sizeof(*p));

				p->kind = PART_BYE;
				p->link = l;
				(void)part_submit(d, r, p);
			}
		}
		run_until(d, request_done, r, deadline);
	}
	dml_free_all(d);
}
