/*
 * dml-server's replies: ERROR and ACK frames, pull replies (sent from the
 * table's pinned values where that saves a copy), and the pulls parked until
 * the clocks allow them, answered or failed from here.
 *
 * Must never: block the event loop (a pull that is too early is parked, not
 * waited for), or answer a parked pull whose keys stopped being served here
 * with anything but DML_ERANGE.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/codec.h"
#include "proto/conn.h"
#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "server/server_internal.h"
#include "server/ssp.h"
#include "store/table.h"
#include "proto/util.h"

/* ---- replies ------------------------------------------------------------ */

void dml_server_reply_error(struct session *ss, uint64_t request_id, int code,
			    const char *fmt, ...)
{
	Dml__Meta m = DML__META__INIT;
	Dml__Error e = DML__ERROR__INIT;
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	dml_conn_error_vformat(ss->peer.conn, request_id, msg, sizeof(msg), fmt, ap);
	va_end(ap);
	m.type = DML__MSG_TYPE__ERROR;
	m.request_id = request_id;
	m.sender = ss->srv->conf->node_id;
	/* The client compares it with its map to know whether to fetch a newer one. */
	if (code == DML_ERANGE)
		m.map_version = ss->srv->job.version;
	e.code = code;
	e.message = msg;
	m.error = &e;
	(void)dml_conn_send(ss->peer.conn, &m, NULL, 0, DML_SEND_COPY);
	/* A refused push's payload buffer goes too, whatever its size. */
	dml_conn_trim(ss->peer.conn);
}

void dml_server_reply_ack(struct session *ss, uint64_t request_id)
{
	(void)dml_conn_send_plain(ss->peer.conn, DML__MSG_TYPE__ACK, request_id);
}

/*
 * Pin the table for a reply when the reply is at least a quarter of the
 * table: a push under the pin then copies at most four times what copying
 * the reply would have cost, and a pull-heavy load copies nothing.
 */
static int pin_worthy(const struct table_entry *te, uint64_t floats)
{
	return floats * sizeof(float) * 4 >= dml_table_value_bytes(te->table);
}

static void release_pin(const void *data, size_t len, void *token)
{
	dml_table_unpin(token);
}

uint8_t *dml_server_coded(struct dml_server *s, size_t need)
{
	if (need > s->coded_cap) {
		uint8_t *p = malloc(need);

		if (!p)
			return NULL;
		free(s->coded);
		s->coded = p;
		s->coded_cap = need;
	}
	return s->coded;
}

/*
 * Put the reply's values in the codec the pull asked for (a new buffer of
 * the server's); 0, or an error already answered.
 */
static int reply_encode(struct session *ss, const struct held_pull *h, const float *values,
			uint64_t floats, const void **out, size_t *len)
{
	struct dml_server *s = ss->srv;
	struct dml_codec c;
	size_t need;
	int rc;

	/* The frame check let only codecs that carry every value through. */
	(void)dml_dtype_codec(h->dtype, &c);
	need = dml_codec_bound(&c, floats);
	if (!dml_server_coded(s, need)) {
		dml_server_reply_error(ss, h->request_id, DML_ENOMEM,
				       "no memory for a %zu-byte reply", need);
		return DML_ENOMEM;
	}
	rc = dml_codec_encode(&c, values, floats, NULL, s->coded, s->coded_cap, len);
	if (rc) {
		dml_server_reply_error(ss, h->request_id, rc, "pull from table %u: %s",
				       h->te->info.id, dml_strerror(rc));
		return rc;
	}
	*out = s->coded;
	s->st.coded_wire[1] += *len;
	s->st.coded_floats[1] += floats * sizeof(float);
	return 0;
}

void dml_server_answer_pull(const struct held_pull *h, uint64_t held_ns)
{
	struct session *ss = h->sess;
	struct dml_server *s = ss->srv;
	struct table_entry *te = h->te;
	uint32_t w = te->info.width;
	uint64_t floats = (h->dense ? h->end - h->begin : h->nkeys) * w;
	Dml__Meta m = DML__META__INIT;
	struct dml_table_pin *pin = NULL;
	const float *values = NULL;
	const void *bytes;
	size_t len;
	float *out;
	int rc;

	int delta = h->delta.kind != DML_CODEC_NONE;

	if (h->dense && pin_worthy(te, floats) && h->dtype == DML__DTYPE__F32 && !delta) {
		/* Sent from the table itself, pinned (see table.h): a reply
		 * stays a snapshot without a copy unless a push comes first. */
		rc = dml_table_pin_range(te->table, h->begin, h->end, &values, &pin);
	} else if (h->dense) {
		/* Small slice of a big table, or one to encode: copying it
		 * beats the table copy a push under a pin would make.
		 * dml_conn_send copies what the socket does not take at once. */
		rc = dml_table_pin_range(te->table, h->begin, h->end, &values, &pin);
		if (rc == 0 && h->dtype == DML__DTYPE__F32 && !delta) {
			dml_table_unpin(pin);
			pin = NULL;
		}
	} else if ((out = dml_server_scratch(s, floats)) == NULL) {
		dml_server_reply_error(ss, h->request_id, DML_ENOMEM,
				       "no memory for a %llu-float reply",
				       (unsigned long long)floats);
		return;
	} else {
		rc = dml_table_pull_keys(te->table, h->keys, h->nkeys, out);
		values = out;
	}
	if (rc) {
		dml_server_reply_error(ss, h->request_id, rc, "pull from table %u: %s",
				       te->info.id, dml_strerror(rc));
		return;
	}
	bytes = values;
	len = floats * sizeof(float);
	m.dtype = h->dtype;
	if (delta)
		dml_server_delta_reply(ss, h, values, floats, &m, &bytes, &len);
	else if (h->dtype != DML__DTYPE__F32)
		rc = reply_encode(ss, h, values, floats, &bytes, &len);
	if (pin && (delta || h->dtype != DML__DTYPE__F32)) {
		/* A full delta reply sends the values: copied by dml_conn_send. */
		dml_table_unpin(pin);
		pin = NULL;
	}
	if (rc)
		return;
	m.type = DML__MSG_TYPE__PULL_REPLY;
	m.request_id = h->request_id;
	m.sender = s->conf->node_id;
	m.table = te->info.id;
	m.value_width = w;
	m.dense = h->dense;
	m.key_begin = h->begin;
	m.key_end = h->end;
	m.num_keys = h->dense ? 0 : h->nkeys;
	m.min_clock = dml_ssp_min_clock(&s->ssp);
	m.held_us = held_ns / 1000;
	s->st.pulls++;
	if (pin)
		rc = dml_conn_send_pinned(ss->peer.conn, &m, values, len, release_pin, pin);
	else
		rc = dml_conn_send(ss->peer.conn, &m, bytes, len, DML_SEND_COPY);
	if (rc)
		dml_warn("peer %s: reply not sent: %s", dml_conn_peer(ss->peer.conn), dml_strerror(rc));
}

/* Take the step of a clock every worker ended, then answer every parked
 * pull the clocks now allow; a checkpoint may be due. */
void dml_server_release_held(struct dml_server *s)
{
	struct held_pull **pp = &s->held;

	dml_server_step_clock(s);
	while (*pp) {
		struct held_pull *h = *pp;

		if (!dml_ssp_ready(&s->ssp, h->clock)) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		dml_histogram_observe_since(s->held_wait, h->received_ns);
		dml_server_answer_pull(h, dml_now_ns() - h->received_ns);
		dml_histogram_observe_since(s->pull_latency, h->received_ns);
		free(h->keys);
		free(h);
	}
	dml_server_cut_check(s);
}

/* Drop the parked pulls of ss (NULL: all), answering them with code unless 0. */
void dml_server_drop_held(struct dml_server *s, struct session *ss, int code, const char *why)
{
	struct held_pull **pp = &s->held;

	while (*pp) {
		struct held_pull *h = *pp;

		if (ss && h->sess != ss) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		if (code)
			dml_server_reply_error(h->sess, h->request_id, code, "%s", why);
		free(h->keys);
		free(h);
	}
}

void dml_server_held_fail_all(struct dml_server *s, int code, const char *why)
{
	dml_server_drop_held(s, NULL, code, why);
}

void dml_server_held_recheck(struct dml_server *s)
{
	struct held_pull **pp = &s->held;

	while (*pp) {
		struct held_pull *h = *pp;

		if (dml_server_serves(h->te, h->dense, h->begin, h->end, h->keys,
				      h->nkeys) == 0) {
			pp = &h->next;
			continue;
		}
		*pp = h->next;
		dml_server_reply_error(h->sess, h->request_id, DML_ERANGE,
				       "keys of table %u moved to another server (map v%llu)",
				       h->te->info.id, (unsigned long long)s->job.version);
		free(h->keys);
		free(h);
	}
}
