/*
 * Push admission: what a worker's push must pass before handle_push lets
 * it reach a table. Two rules live here.
 *
 * The sequence window. Pushes carry (worker, seq) so that a resend after a
 * reconnect is applied once: a seq at or below the worker's last_seq is a
 * resend, acknowledged and not applied. That makes one huge seq poisonous:
 * after seq 2^64-1 every later push would be "acknowledged, not applied".
 * So a push may move last_seq forward by at most DML_SEQ_WINDOW; a jump
 * further is refused (an error reply, nothing applied, last_seq unchanged).
 * The window bounds how many pushes a client can have numbered and not yet
 * applied here; libdml numbers a push when it queues it for a server and
 * keeps no fixed cap on them, so the bound is a generous fixed one, far
 * above any real pipeline.
 * The base: a worker whose last_seq is 0 has no applied push here to
 * measure from. That is a fresh worker (it starts at seq 1), a restarted
 * worker (a new incarnation resets last_seq), or a worker new to this
 * server although not to its own numbering (a new server, a server after a
 * remap, a server restarted without a store). Its first push, whatever its
 * seq, is the base. A restarted server does not reopen that door for
 * workers it knew: their last_seq comes back from the store.
 *
 * Finite values. A NaN or an infinity in a gradient spreads through the
 * optimizer into the row for good, so pushes carrying one are refused
 * unless the job sets allow_nonfinite. The scan is one branch-free pass the
 * compiler vectorises, far cheaper than the optimizer that follows.
 *
 * Coded values. A push whose dtype is a codec's (fp16, int8, topk...) is
 * decoded into the server's scratch buffer, keys first as they came, and
 * goes on as a push of floats: the table, the log and a replay see only
 * floats. The decoders check every count and refuse values that are not
 * finite, so a bad encoding costs its push (DML_ESHAPE), not the link.
 *
 * Must never: apply, log or acknowledge a push, or change a worker's state.
 */
#include <inttypes.h>

#include "proto/codec.h"
#include "proto/dml_error.h"
#include "proto/finite.h"
#include "proto/frame.h"
#include "proto/log.h"
#include "server/server_internal.h"

#include <string.h>

int dml_server_seq_check(const struct dml_ssp_worker *w, uint64_t seq)
{
	if (!w || seq == 0)
		return DML_SEQ_NEW;
	if (seq <= w->last_seq)
		return DML_SEQ_RESEND;
	if (w->last_seq != 0 && seq - w->last_seq > DML_SEQ_WINDOW)
		return DML_SEQ_JUMP;
	return DML_SEQ_NEW;
}

void dml_server_push_sizes(const Dml__Meta *m, uint64_t *keybytes, uint64_t *n)
{
	*keybytes = m->dense ? 0 : m->num_keys * 8ull;
	*n = (m->dense ? m->key_end - m->key_begin : m->num_keys) * (uint64_t)m->value_width;
}

/* One more push refused for why, logged at the 1st, 2nd, 4th, 8th...: a
 * broken worker may push many. */
static void refused(struct session *ss, const Dml__Meta *m, uint64_t *count, const char *why)
{
	uint64_t n = ++*count;

	if ((n & (n - 1)) == 0)
		dml_warn("peer %s: push to table %u refused: %s (%" PRIu64 " such pushes "
			 "refused)", dml_conn_peer(ss->peer.conn), m->table, why, n);
}

int dml_server_push_admit(struct session *ss, const Dml__Meta *m, const uint8_t *payload)
{
	struct dml_server *s = ss->srv;
	uint64_t n, keybytes;

	if (s->allow_nonfinite)
		return 1;
	dml_server_push_sizes(m, &keybytes, &n);
	if (dml_values_finite((const float *)(payload + keybytes), (size_t)n))
		return 1;
	refused(ss, m, &s->st.nonfinite, "NaN or infinite values");
	dml_server_reply_error(ss, m->request_id, DML_EINVAL, "push to table %u: NaN or "
			       "infinite values refused (job key allow_nonfinite = true allows "
			       "them)", m->table);
	return 0;
}

const uint8_t *dml_server_push_decode(struct session *ss, const Dml__Meta *m,
				      const uint8_t *payload)
{
	struct dml_server *s = ss->srv;
	struct dml_codec c;
	uint64_t keybytes, n;
	float *out;
	int rc;

	if (m->dtype == DML__DTYPE__F32)
		return payload;
	(void)dml_dtype_codec(m->dtype, &c);  /* the frame check knew it */
	dml_server_push_sizes(m, &keybytes, &n);
	out = dml_server_scratch(s, keybytes / sizeof(float) + n);
	if (!out) {
		dml_server_reply_error(ss, m->request_id, DML_ENOMEM, "push to table %u: no "
				       "memory to decode it", m->table);
		return NULL;
	}
	memcpy(out, payload, keybytes);
	rc = dml_codec_decode(&c, payload + keybytes, m->payload_bytes - keybytes, n,
			      out + keybytes / sizeof(float));
	if (rc == 0) {
		s->st.coded_wire[0] += m->payload_bytes - keybytes;
		s->st.coded_floats[0] += n * sizeof(float);
		return (const uint8_t *)out;
	}
	refused(ss, m, &s->st.bad_codings, "not a valid encoding");
	dml_server_reply_error(ss, m->request_id, DML_ESHAPE, "push to table %u: its values "
			       "are not a valid %s encoding of %" PRIu64 " values (a count or "
			       "index out of range, or a value that is not finite)", m->table,
			       dml_codec_format(&c, (char[32]){ 0 }, 32), n);
	return NULL;
}
