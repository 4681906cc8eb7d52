/*
 * Logger implementation: formats one line and hands it to the sink. Lines go
 * out whole (one write per line) so concurrent processes do not interleave.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proto/dml_error.h"
#include "proto/log.h"

int dml_log_level_current = DML_LOG_INFO;

static char log_ident[64] = "dml";
static dml_log_sink_fn log_sink;
static void *log_sink_arg;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

void dml_log_set_level(int level)
{
	if (level < DML_LOG_ERROR)
		level = DML_LOG_ERROR;
	if (level > DML_LOG_DEBUG)
		level = DML_LOG_DEBUG;
	dml_log_level_current = level;
}

int dml_log_parse_level(const char *name, int *level)
{
	for (int i = 0; i <= DML_LOG_DEBUG; i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*level = i;
			return 0;
		}
	}
	return DML_EINVAL;
}

void dml_log_set_ident(const char *ident)
{
	snprintf(log_ident, sizeof(log_ident), "%s", ident);
}

void dml_log_set_sink(dml_log_sink_fn fn, void *arg)
{
	log_sink = fn;
	log_sink_arg = arg;
}

void dml_log_emit(int level, const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	if (level < DML_LOG_ERROR || level > DML_LOG_DEBUG)
		level = DML_LOG_ERROR;
	n = snprintf(line, sizeof(line), "%s: %s: ", log_ident, level_names[level]);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	line[n] = '\0';
	if (log_sink) {
		log_sink(level, line, log_sink_arg);
		return;
	}
	/* One write per line; a short write to stderr is not worth retrying. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
