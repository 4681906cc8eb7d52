/*
 * The scheduler's node table and its state machine (see nodes.h).
 *
 * Nodes live in their own allocations, so a pointer handed out stays valid
 * while the table grows; an array of pointers, kept sorted by (role,
 * node_id), gives the listing order and binary search.
 *
 * Must never: do I/O, read a clock, store a string a node sent before it
 * passed dml_node_info_check(), or call on_change before the node holds its
 * new state.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "sched/nodes.h"
#include "proto/util.h"

struct dml_nodes {
	struct dml_node **nodes;   /* sorted by (role, node_id) */
	size_t n, cap;
	uint64_t suspect_after_ms, dead_after_ms;
	dml_nodes_change_fn on_change;
	void *arg;
};

int dml_nodes_new(uint64_t suspect_after_ms, uint64_t dead_after_ms,
		  dml_nodes_change_fn on_change, void *arg, struct dml_nodes **out)
{
	struct dml_nodes *t;

	if (!out || suspect_after_ms == 0 || dead_after_ms <= suspect_after_ms)
		return DML_EINVAL;
	t = dml_xcalloc(1, sizeof(*t));
	t->suspect_after_ms = suspect_after_ms;
	t->dead_after_ms = dead_after_ms;
	t->on_change = on_change;
	t->arg = arg;
	*out = t;
	return 0;
}

void dml_nodes_free(struct dml_nodes *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->nodes[i]);
	free(t->nodes);
	free(t);
}

/* ---- checking a registration ------------------------------------------- */

/* protobuf-c leaves unset strings as "", but a message built by hand may
 * hold NULL. */
static const char *str_or_empty(const char *s)
{
	return s ? s : "";
}

/* Printable ASCII only: these strings end up in log lines and tables. */
static int check_text(const char *s, size_t max)
{
	size_t len = 0;

	for (; s[len]; len++) {
		if (len >= max || (unsigned char)s[len] < 0x20 || (unsigned char)s[len] > 0x7e)
			return DML_EINVAL;
	}
	return 0;
}

static int check_rate(double v)
{
	return isfinite(v) && v >= 0 ? 0 : DML_EINVAL;
}

int dml_node_info_check(const Dml__NodeInfo *info, char *why, size_t whylen)
{
	const char *address;
	char host[256];
	uint16_t port;

	if (!info)
		return dml_fail(DML_EINVAL, why, whylen, "no node information");
	switch (info->role) {
	case DML__ROLE__WORKER:
	case DML__ROLE__SERVER:
	case DML__ROLE__AGGREGATOR:
		break;
	default:
		return dml_fail(DML_EROLE, why, whylen, "role %s cannot register",
				dml_node_role_name(info->role));
	}
	if (info->node_id == 0)
		return dml_fail(DML_EINVAL, why, whylen, "node_id 0 is not a node's id");
	if (check_text(str_or_empty(info->zone), DML_NODE_ZONE_MAX))
		return dml_fail(DML_EINVAL, why, whylen,
				"zone is longer than %d bytes or not printable ASCII",
				DML_NODE_ZONE_MAX);
	address = str_or_empty(info->address);
	if (check_text(address, DML_NODE_ADDRESS_MAX) ||
	    (address[0] && dml_parse_hostport(address, host, sizeof(host), &port, 0)))
		return dml_fail(DML_EINVAL, why, whylen,
				"address is neither empty nor host:port");
	if (info->shard_count ? info->shard_index >= info->shard_count : info->shard_index != 0)
		return dml_fail(DML_EINVAL, why, whylen, "shard %u/%u is not INDEX/COUNT with "
				"INDEX < COUNT", info->shard_index, info->shard_count);
	if (info->profile) {
		const Dml__Profile *p = info->profile;

		if (check_text(str_or_empty(p->device), DML_NODE_DEVICE_MAX))
			return dml_fail(DML_EINVAL, why, whylen, "profile device is longer "
					"than %d bytes or not printable ASCII",
					DML_NODE_DEVICE_MAX);
		if (check_rate(p->gflops) || check_rate(p->examples_per_s) ||
		    check_rate(p->link_mbps))
			return dml_fail(DML_EINVAL, why, whylen, "profile rates must be finite "
					"and >= 0");
	}
	return 0;
}

/* ---- lookup ------------------------------------------------------------- */

static int key_cmp(uint32_t role, uint32_t id, const struct dml_node *n)
{
	if (role != n->role)
		return role < n->role ? -1 : 1;
	if (id != n->node_id)
		return id < n->node_id ? -1 : 1;
	return 0;
}

/* Index of (role, id), or where it would be inserted; *found says which. */
static size_t search(const struct dml_nodes *t, uint32_t role, uint32_t id, int *found)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = key_cmp(role, id, t->nodes[mid]);

		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	*found = 0;
	return lo;
}

static struct dml_node *find(const struct dml_nodes *t, uint32_t role, uint32_t id)
{
	int found;
	size_t i = search(t, role, id, &found);

	return found ? t->nodes[i] : NULL;
}

const struct dml_node *dml_nodes_find(const struct dml_nodes *t, uint32_t role,
				      uint32_t node_id)
{
	return t ? find(t, role, node_id) : NULL;
}

size_t dml_nodes_count(const struct dml_nodes *t)
{
	return t ? t->n : 0;
}

const struct dml_node *dml_nodes_at(const struct dml_nodes *t, size_t i)
{
	return t && i < t->n ? t->nodes[i] : NULL;
}

size_t dml_nodes_count_state(const struct dml_nodes *t, Dml__NodeState state)
{
	size_t k = 0;

	for (size_t i = 0; t && i < t->n; i++)
		k += t->nodes[i]->state == state;
	return k;
}

/* ---- transitions -------------------------------------------------------- */

static uint64_t elapsed(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}

/* The one place a node changes state: sets the reason, then tells the owner. */
static void transition(struct dml_nodes *t, struct dml_node *n, Dml__NodeState to,
		       uint64_t now_ms, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static void transition(struct dml_nodes *t, struct dml_node *n, Dml__NodeState to,
		       uint64_t now_ms, const char *fmt, ...)
{
	Dml__NodeState old = n->state;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(n->reason, sizeof(n->reason), fmt, ap);
	va_end(ap);
	n->state = to;
	n->changed_ms = now_ms;
	if (to == DML__NODE_STATE__DEAD)
		n->connected = 0;
	if (t->on_change)
		t->on_change(n, old, t->arg);
}

static void copy_text(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", str_or_empty(src));
}

static struct dml_node *insert(struct dml_nodes *t, size_t at, uint32_t role, uint32_t id)
{
	struct dml_node *n = dml_xcalloc(1, sizeof(*n));

	if (t->n == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->nodes = dml_xrealloc(t->nodes, t->cap * sizeof(*t->nodes));
	}
	memmove(&t->nodes[at + 1], &t->nodes[at], (t->n - at) * sizeof(*t->nodes));
	t->nodes[at] = n;
	t->n++;
	n->role = role;
	n->node_id = id;
	n->state = DML__NODE_STATE__NODE_UNKNOWN;
	return n;
}

/* What a node says of itself, from a checked registration. */
static void describe(struct dml_node *n, const Dml__NodeInfo *info)
{
	copy_text(n->zone, sizeof(n->zone), info->zone);
	copy_text(n->address, sizeof(n->address), info->address);
	n->shard_index = info->shard_index;
	n->shard_count = info->shard_count;
	n->incarnation = info->incarnation;
	memset(&n->profile, 0, sizeof(n->profile));
	if (info->profile) {
		const Dml__Profile *p = info->profile;

		copy_text(n->profile.device, sizeof(n->profile.device), p->device);
		n->profile.cores = p->cores;
		n->profile.memory_bytes = p->memory_bytes;
		n->profile.gflops = p->gflops;
		n->profile.examples_per_s = p->examples_per_s;
		n->profile.link_mbps = p->link_mbps;
	}
}

/* Where info's node is or would go in t, once info passed the check. */
static int slot(const struct dml_nodes *t, const Dml__NodeInfo *info, size_t *at, int *found)
{
	int rc;

	if (!t)
		return DML_EINVAL;
	if ((rc = dml_node_info_check(info, NULL, 0)) != 0)
		return rc;
	*at = search(t, info->role, info->node_id, found);
	return 0;
}

int dml_nodes_restore(struct dml_nodes *t, const Dml__NodeInfo *info, uint64_t now_ms)
{
	struct dml_node *n;
	size_t at;
	int found, rc = slot(t, info, &at, &found);

	if (rc)
		return rc;
	if (found)
		return DML_EINVAL;
	n = insert(t, at, info->role, info->node_id);
	describe(n, info);
	n->last_heartbeat_ms = now_ms;
	n->changed_ms = now_ms;
	if (info->state == DML__NODE_STATE__DEAD) {
		n->state = DML__NODE_STATE__DEAD;
		copy_text(n->reason, sizeof(n->reason), info->reason);
	} else {
		n->state = DML__NODE_STATE__SUSPECT;
		copy_text(n->reason, sizeof(n->reason), "not registered again since the "
			  "scheduler restarted");
	}
	return 0;
}

int dml_nodes_register(struct dml_nodes *t, const Dml__NodeInfo *info, uint64_t now_ms,
		       const struct dml_node **out)
{
	struct dml_node *n;
	const char *reason;
	size_t at;
	int found, rc = slot(t, info, &at, &found);

	if (rc)
		return rc;
	if (!found) {
		n = insert(t, at, info->role, info->node_id);
		reason = "registered";
	} else {
		n = t->nodes[at];
		reason = n->incarnation != info->incarnation
				 ? "re-registered (new incarnation)"
				 : "re-registered (reconnected)";
	}
	describe(n, info);
	n->connected = 1;
	n->registered_ms = now_ms;
	n->last_heartbeat_ms = now_ms;
	transition(t, n, DML__NODE_STATE__ALIVE, now_ms, "%s", reason);
	if (out)
		*out = n;
	return 0;
}

int dml_nodes_heartbeat(struct dml_nodes *t, uint32_t role, uint32_t node_id,
			uint64_t now_ms)
{
	struct dml_node *n = t ? find(t, role, node_id) : NULL;
	uint64_t gap;

	if (!n)
		return DML_ENOTFOUND;
	if (n->state == DML__NODE_STATE__DEAD || !n->connected)
		return DML_ESTATE;
	gap = elapsed(now_ms, n->last_heartbeat_ms);
	n->last_heartbeat_ms = now_ms;
	if (n->state == DML__NODE_STATE__SUSPECT)
		transition(t, n, DML__NODE_STATE__ALIVE, now_ms,
			   "heartbeat again after %llu ms", (unsigned long long)gap);
	return 0;
}

int dml_nodes_set_aggregator(struct dml_nodes *t, uint32_t node_id,
			     const Dml__AggregatorStats *st)
{
	struct dml_node *n = t ? find(t, DML__ROLE__AGGREGATOR, node_id) : NULL;

	if (!n)
		return DML_ENOTFOUND;
	n->agg = *st;
	n->agg.base.n_unknown_fields = 0;      /* what it points to is the frame's */
	n->agg.base.unknown_fields = NULL;
	n->agg_reported = 1;
	return 0;
}

const struct dml_node *dml_nodes_aggregator_at(const struct dml_nodes *t,
					       const char *address)
{
	for (size_t i = 0; t && i < dml_nodes_count(t); i++) {
		const struct dml_node *n = dml_nodes_at(t, i);

		if (n->role == DML__ROLE__AGGREGATOR && strcmp(n->address, address) == 0)
			return n;
	}
	return NULL;
}

int dml_nodes_disconnect(struct dml_nodes *t, uint32_t role, uint32_t node_id,
			 uint64_t now_ms)
{
	struct dml_node *n = t ? find(t, role, node_id) : NULL;

	if (!n)
		return DML_ENOTFOUND;
	n->connected = 0;
	if (n->state != DML__NODE_STATE__DEAD)
		transition(t, n, DML__NODE_STATE__SUSPECT, now_ms, "connection closed");
	return 0;
}

int dml_nodes_leave(struct dml_nodes *t, uint32_t role, uint32_t node_id, uint64_t now_ms)
{
	struct dml_node *n = t ? find(t, role, node_id) : NULL;

	if (!n)
		return DML_ENOTFOUND;
	if (n->state != DML__NODE_STATE__DEAD)
		transition(t, n, DML__NODE_STATE__DEAD, now_ms, "left");
	return 0;
}

void dml_nodes_tick(struct dml_nodes *t, uint64_t now_ms, size_t *changed)
{
	size_t k = 0;

	for (size_t i = 0; t && i < t->n; i++) {
		struct dml_node *n = t->nodes[i];
		uint64_t quiet = elapsed(now_ms, n->last_heartbeat_ms);
		const char *prefix = n->connected ? "" : "connection closed, ";

		if (n->state == DML__NODE_STATE__DEAD)
			continue;
		if (quiet >= t->dead_after_ms) {
			transition(t, n, DML__NODE_STATE__DEAD, now_ms,
				   "%sno heartbeat for %llu ms", prefix,
				   (unsigned long long)quiet);
			k++;
		} else if (quiet >= t->suspect_after_ms &&
			   n->state == DML__NODE_STATE__ALIVE) {
			transition(t, n, DML__NODE_STATE__SUSPECT, now_ms,
				   "%sno heartbeat for %llu ms", prefix,
				   (unsigned long long)quiet);
			k++;
		}
	}
	if (changed)
		*changed = k;
}

/* ---- names -------------------------------------------------------------- */

const char *dml_node_state_name(int state)
{
	switch (state) {
	case DML__NODE_STATE__ALIVE: return "alive";
	case DML__NODE_STATE__SUSPECT: return "suspect";
	case DML__NODE_STATE__DEAD: return "dead";
	default: return "unknown";
	}
}

const char *dml_node_role_name(uint32_t role)
{
	switch (role) {
	case DML__ROLE__WORKER: return "worker";
	case DML__ROLE__SERVER: return "server";
	case DML__ROLE__AGGREGATOR: return "aggregator";
	case DML__ROLE__SCHEDULER: return "scheduler";
	case DML__ROLE__CONTROL: return "control";
	default: return "none";
	}
}
