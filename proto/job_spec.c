/*
 * Job specs (see job_spec.h): the rules that the job file's validators and
 * the spec check share, the name lists (apps, metrics, rebalance, batch
 * split, job states), and a spec's copy and free.
 *
 * Per-field rules live in small "why" functions shared by the option
 * table's validators (job_file.c, so a file gets "file:line: key: reason")
 * and by dml_job_spec_check (job_spec_check.c, so a spec from the wire gets
 * the same reason, with the key and the table named).
 *
 * Must never: log or exit; every string is bounded printable ASCII before
 * it can reach a log line or a table.
 */
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/dml_error.h"
#include "proto/frame.h"
#include "proto/job_spec.h"
#include "proto/job_spec_internal.h"
#include "proto/util.h"

const char *const dml_rebalance_names[] = { "auto", "off", NULL };
const char *const dml_batch_split_names[] = { "auto", "equal", "rate", NULL };

/* The apps that dml-worker of this build runs. */
const char *const job_apps[] = { "lsq", "mlp", "sparse_lr", "mf", NULL };
static const char *const job_metrics[] = { "loss", "accuracy", "auc", "rmse", NULL };

/* ---- rules shared by the file's validators and the spec check -------- */

/* protobuf-c leaves unset strings as "", a hand-built message may hold NULL. */
const char *str_or_empty(const char *s)
{
	return s ? s : "";
}

static int is_name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '-';
}

int name_why(const char *name, char *why, size_t whylen)
{
	size_t n = strlen(name);

	if (n == 0)
		return fail(why, whylen, "is empty");
	if (n > DML_JOB_NAME_MAX)
		return fail(why, whylen, "is %zu characters long, at most %d allowed", n,
			       DML_JOB_NAME_MAX);
	for (size_t i = 0; i < n; i++) {
		if (!is_name_char(name[i]))
			return fail(why, whylen, "'%s': only letters, digits, '_', '.' "
				       "and '-' are allowed", name);
	}
	return 0;
}

/* Bounded printable ASCII: these strings reach log lines and dmlctl tables. */
int text_why(const char *s, size_t max, char *why, size_t whylen)
{
	size_t n = strlen(s);

	if (n > max)
		return fail(why, whylen, "is %zu bytes long, at most %zu allowed", n, max);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c > 0x7e)
			return fail(why, whylen, "holds a byte 0x%02x that is not "
				       "printable ASCII", c);
	}
	return 0;
}

int name_in(const char *s, const char *const *names)
{
	for (size_t i = 0; names[i]; i++) {
		if (strcmp(s, names[i]) == 0)
			return 1;
	}
	return 0;
}

/* "a, b, c" into buf. */
void names_join(const char *const *names, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; names[i] && n < len; i++) {
		int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", names[i]);

		if (w < 0)
			break;
		n += (size_t)w;
	}
}

int metric_why(const char *m, char *why, size_t whylen)
{
	char list[64];

	if (!*m || name_in(m, job_metrics))
		return 0;
	names_join(job_metrics, list, sizeof(list));
	return fail(why, whylen, "'%s' is not one of %s (or empty)", m, list);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Node ids: none 0, none twice (checked on a sorted copy: the list may be
 * long when it comes over the wire). */
int ids_why(const uint32_t *ids, size_t n, char *why, size_t whylen)
{
	uint32_t *s;
	int rc = 0;

	if (n > JOB_WORKER_IDS_MAX)
		return fail(why, whylen, "%zu ids, at most %u allowed", n,
			       JOB_WORKER_IDS_MAX);
	if (n == 0)
		return 0;
	s = dml_xmalloc(n * sizeof(*s));
	memcpy(s, ids, n * sizeof(*s));
	qsort(s, n, sizeof(*s), u32_cmp);
	if (s[0] == 0)
		rc = fail(why, whylen, "0 is not a node id");
	for (size_t i = 1; !rc && i < n; i++) {
		if (s[i] == s[i - 1])
			rc = fail(why, whylen, "%" PRIu32 " appears twice", s[i]);
	}
	free(s);
	return rc;
}

/*
 * "3, 7,12" into a new array of ids (*ids NULL for an empty list). Empty
 * items and anything but decimal u32 are refused; the ids themselves are
 * checked by ids_why().
 */
int ids_parse(const char *text, uint32_t **ids, size_t *n, char *why,
	      size_t whylen)
{
	size_t cap = 1, k = 0;
	const char *p = text;
	uint32_t *v;

	*ids = NULL;
	*n = 0;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!*p)
		return 0;
	for (const char *c = text; *c; c++)
		cap += *c == ',';
	if (cap > JOB_WORKER_IDS_MAX)
		return fail(why, whylen, "%zu ids, at most %u allowed", cap,
			       JOB_WORKER_IDS_MAX);
	v = dml_xmalloc(cap * sizeof(*v));
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		char item[32];
		uint64_t id;

		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 0 || len >= sizeof(item)) {
			free(v);
			return fail(why, whylen, "'%s' is not a comma list of node ids",
				       text);
		}
		memcpy(item, p, len);
		item[len] = '\0';
		if (dml_parse_u64(item, 0, UINT32_MAX, &id)) {
			free(v);
			return fail(why, whylen, "'%s' is not a node id", item);
		}
		v[k++] = (uint32_t)id;
		if (!end)
			break;
		p = end + 1;
	}
	*ids = v;
	*n = k;
	return 0;
}

/* In [0, 1): momentum and the adam decay rates. */
int below_one_why(double v, char *why, size_t whylen)
{
	if (v >= 0 && v < 1)
		return 0;
	return fail(why, whylen, "%g is not in [0, 1)", v);
}

int dml_job_app_known(const char *app)
{
	return app && name_in(app, job_apps);
}

Dml__JobSpec *dml_job_spec_copy(const Dml__JobSpec *spec)
{
	Dml__JobSpec empty = DML__JOB_SPEC__INIT;
	Dml__JobSpec *copy;

	if (!spec)
		spec = &empty;
	copy = dml_msg_copy(&spec->base);
	/* Our own encoding always decodes: only memory can fail, and control
	 * structures treat that as fatal (util.h). */
	if (!copy)
		abort();
	return copy;
}

void dml_job_spec_free(Dml__JobSpec *spec)
{
	if (spec)
		dml__job_spec__free_unpacked(spec, NULL);
}

const char *dml_job_state_name(int state)
{
	static const char *const names[] = {
		[DML__JOB_STATE__PENDING] = "pending", [DML__JOB_STATE__RUNNING] = "running",
		[DML__JOB_STATE__PAUSED] = "paused", [DML__JOB_STATE__DONE] = "done",
		[DML__JOB_STATE__FAILED] = "failed", [DML__JOB_STATE__STOPPED] = "stopped",
	};

	if (state < 0 || (size_t)state >= DML_ARRAY_LEN(names) || !names[state])
		return "unknown";
	return names[state];
}
