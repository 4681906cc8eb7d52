/*
 * The one logger. DML_LOG checks the level before formatting anything, so a
 * debug line costs a comparison when debug is off. One sink: stderr by
 * default (journald picks it up under systemd); tests may redirect it.
 */
#ifndef DML_LOG_H
#define DML_LOG_H

#include <stdarg.h>

enum dml_log_level {
	DML_LOG_ERROR = 0,
	DML_LOG_WARN = 1,
	DML_LOG_INFO = 2,
	DML_LOG_DEBUG = 3
};

extern int dml_log_level_current;

typedef void (*dml_log_sink_fn)(int level, const char *line, void *arg);

/** Set the lowest level that is printed. */
void dml_log_set_level(int level);
/** Parse "error", "warn", "info" or "debug"; 0 or DML_EINVAL. */
int dml_log_parse_level(const char *name, int *level);
/** Name printed in front of every line, e.g. "dml-server[3]". */
void dml_log_set_ident(const char *ident);
/** Replace the sink; NULL restores stderr. */
void dml_log_set_sink(dml_log_sink_fn fn, void *arg);

void dml_log_emit(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define DML_LOG(level, ...)                                   \
	do {                                                  \
		if ((level) <= dml_log_level_current)         \
			dml_log_emit((level), __VA_ARGS__);   \
	} while (0)

#define dml_err(...) DML_LOG(DML_LOG_ERROR, __VA_ARGS__)
#define dml_warn(...) DML_LOG(DML_LOG_WARN, __VA_ARGS__)
#define dml_info(...) DML_LOG(DML_LOG_INFO, __VA_ARGS__)
#define dml_debug(...) DML_LOG(DML_LOG_DEBUG, __VA_ARGS__)

#endif
