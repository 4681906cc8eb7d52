/*
 * A daemon's set of accepted connections (see peers.h). Must never free a
 * connection itself: teardown always goes through the connection layer, so
 * the owner's on_close runs for every peer exactly once.
 */
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/log.h"
#include "proto/peers.h"

void dml_peers_init(struct dml_peers *ps, struct event_base *base, size_t max)
{
	ps->base = base;
	ps->max = max;
	ps->max_preauth = DML_PEERS_PREAUTH_DEFAULT;
	ps->preauth_dropped = 0;
	ps->count = 0;
	ps->head = NULL;
	ps->grace = NULL;
	ps->stopping = 0;
}

/*
 * Count the connections still in their handshake and close the oldest of
 * them when there are max_preauth of them, or when the set is full. New
 * peers go to the head, so the oldest is the last one found. A closing
 * connection is on its way out and counts as neither. One walk of at most
 * max peers per accepted connection: cheap next to the handshake itself.
 */
static size_t make_room(struct dml_peers *ps)
{
	struct dml_peer *oldest = NULL;
	size_t preauth = 0, closing = 0;

	for (struct dml_peer *p = ps->head; p; p = p->next) {
		enum dml_conn_state st = dml_conn_state(p->conn);

		if (st == DML_CONN_CLOSING) {
			closing++;
		} else if (st != DML_CONN_READY) {
			preauth++;
			oldest = p;
		}
	}
	if (!oldest || (preauth < ps->max_preauth && ps->count - closing < ps->max))
		return closing;
	ps->preauth_dropped++;
	/* Logged at 1, 2, 4, 8... drops: a flood would fill the log otherwise. */
	if ((ps->preauth_dropped & (ps->preauth_dropped - 1)) == 0)
		dml_warn("peer %s: closed unauthenticated to make room (%zu peers in their "
			 "handshake; %llu closed so far)", dml_conn_peer(oldest->conn), preauth,
			 (unsigned long long)ps->preauth_dropped);
	dml_conn_abort(oldest->conn, DML_ETIMEDOUT);
	return closing + 1;
}

int dml_peers_accept(struct dml_peers *ps, int fd, struct dml_peer *p,
		     const struct dml_conn_conf *conf, const struct dml_conn_ops *ops,
		     void *arg)
{
	size_t closing = ps->stopping ? 0 : make_room(ps);
	int rc;

	/* Peers closing (the one just dropped among them) are not counted:
	 * their teardown runs from the loop, soon. */
	if (ps->stopping || ps->count - closing >= ps->max) {
		dml_warn("refusing a connection: %s", ps->stopping ? "shutting down"
				 : "max_connections reached");
		close(fd);
		return ps->stopping ? DML_ECLOSED : DML_ECONN;
	}
	rc = dml_conn_accept(ps->base, fd, conf, ops, arg, &p->conn);
	if (rc)
		return rc;
	p->prev = NULL;
	p->next = ps->head;
	if (ps->head)
		ps->head->prev = p;
	ps->head = p;
	ps->count++;
	return 0;
}

void dml_peers_remove(struct dml_peers *ps, struct dml_peer *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		ps->head = p->next;
	if (p->next)
		p->next->prev = p->prev;
	ps->count--;
	ps->ring_bytes_closed += dml_conn_ring_bytes(p->conn);
	if (ps->stopping && ps->count == 0)
		event_base_loopexit(ps->base, NULL);
}

static void grace_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_peers *ps = arg;

	dml_warn("%zu connection(s) still open after the grace period; stopping anyway",
		 ps->count);
	event_base_loopexit(ps->base, NULL);
}

void dml_peers_shutdown(struct dml_peers *ps, int grace_s)
{
	struct timeval grace = { grace_s, 0 };

	if (ps->stopping)
		return;
	ps->stopping = 1;
	dml_info("stopping: %zu connection(s) to close", ps->count);
	for (struct dml_peer *p = ps->head; p; p = p->next)
		dml_conn_close(p->conn, 0);
	ps->grace = evtimer_new(ps->base, grace_cb, ps);
	evtimer_add(ps->grace, &grace);
	if (ps->count == 0)
		event_base_loopexit(ps->base, NULL);
}

void dml_peers_destroy(struct dml_peers *ps)
{
	ps->stopping = 1;
	for (struct dml_peer *p = ps->head; p; p = p->next)
		dml_conn_abort(p->conn, DML_ECLOSED);
	/* Teardown is deferred to the loop: turn it until every peer is gone. */
	for (int i = 0; i < 100 && ps->head; i++)
		event_base_loop(ps->base, EVLOOP_NONBLOCK);
	if (ps->grace)
		event_free(ps->grace);
	ps->grace = NULL;
}

double dml_peers_metric_count(void *ps)
{
	const struct dml_peers *peers = ps;

	return (double)peers->count;
}

double dml_peers_metric_ring_bytes(void *ps)
{
	const struct dml_peers *peers = ps;
	uint64_t n = peers->ring_bytes_closed;

	for (const struct dml_peer *p = peers->head; p; p = p->next)
		n += dml_conn_ring_bytes(p->conn);
	return (double)n;
}

double dml_peers_metric_local(void *ps)
{
	const struct dml_peers *peers = ps;
	size_t n = 0;

	for (const struct dml_peer *p = peers->head; p; p = p->next)
		n += (size_t)dml_conn_is_local(p->conn);
	return (double)n;
}
