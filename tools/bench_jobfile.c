/*
 * dml-bench's job files (see bench_jobfile.h): a job file copied line by
 * line with some keys of its [job] or [table] sections replaced.
 *
 * Must never change a line it was not asked to: comments, other sections
 * and other keys go through as they are.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "tools/bench_jobfile.h"
#include "proto/dml_error.h"
#include "proto/log.h"

void bench_job_key_set(struct bench_job_key *kv, size_t *n, const char *section,
		       const char *key, const char *fmt, ...)
{
	struct bench_job_key *k = &kv[(*n)++];
	va_list ap;
	int len;

	k->section = section;
	k->key = key;
	va_start(ap, fmt);
	len = vsnprintf(k->val, sizeof(k->val), fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= sizeof(k->val))
		dml_err("job key %s: value cut to '%s'", key, k->val);
}

/* The key of a "key = value" line, its length; 0 for anything else. */
static size_t line_key(const char *line, const char **key)
{
	while (*line == ' ' || *line == '\t')
		line++;
	*key = line;
	if (*line == '#' || *line == '[' || *line == '\n' || !*line)
		return 0;
	return strcspn(line, " \t=");
}

/* The section a "[name]" header opens; "" for anything else. */
static void line_section(const char *key, char *out, size_t len)
{
	size_t n = key[0] == '[' ? strcspn(key + 1, "]") : 0;

	out[0] = '\0';
	if (n && key[1 + n] == ']' && n < len)
		snprintf(out, len, "%.*s", (int)n, key + 1);
}

int bench_job_write(const char *src, const char *dir, const char *name,
		    const struct bench_job_key *kv, size_t n, char *out, size_t outlen)
{
	char line[4096], section[32] = "";
	int rc = 0;
	FILE *in, *f;

	if (snprintf(out, outlen, "%s/%s.conf", dir, name) >= (int)outlen)
		return DML_EINVAL;
	if (!(in = fopen(src, "r"))) {
		dml_err("%s: %s", src, strerror(errno));
		return DML_EIO;
	}
	if (!(f = fopen(out, "w"))) {
		dml_err("%s: %s", out, strerror(errno));
		fclose(in);
		return DML_EIO;
	}
	while (fgets(line, sizeof(line), in)) {
		const char *key;
		size_t klen = line_key(line, &key);
		int skip = 0;

		if (key[0] == '[')
			line_section(key, section, sizeof(section));
		for (size_t i = 0; klen && i < n; i++)
			skip |= strcmp(kv[i].section, section) == 0 &&
				strlen(kv[i].key) == klen && memcmp(kv[i].key, key, klen) == 0;
		if (!skip)
			fputs(line, f);
		for (size_t i = 0; key[0] == '[' && i < n; i++)
			if (strcmp(kv[i].section, section) == 0)
				fprintf(f, "%s = %s\n", kv[i].key, kv[i].val);
	}
	if (ferror(in) || fclose(f) != 0) {
		dml_err("writing %s from %s failed", out, src);
		rc = DML_EIO;
	}
	fclose(in);
	return rc;
}
