/*
 * Small helpers every daemon uses: allocation of control structures (fatal on
 * failure, per STYLE: big tensor buffers use plain malloc and return
 * DML_ENOMEM instead), monotonic time, little-endian loads and stores, and
 * strict number parsing for configuration and command lines.
 */
#ifndef DML_UTIL_H
#define DML_UTIL_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

void *dml_xmalloc(size_t n);
void *dml_xcalloc(size_t count, size_t size);
void *dml_xrealloc(void *p, size_t n);
char *dml_xstrdup(const char *s);

/**
 * A push's weight (Meta.weight): how many batch_size batches its gradient
 * sums over. Every layer that takes one (libdml, the server, its tables,
 * the gradient log) accepts exactly the positive finite numbers.
 */
static inline int dml_push_weight_ok(float weight)
{
	return weight > 0.0f && weight <= FLT_MAX; /* false for NaN and inf */
}

/** Monotonic clock in nanoseconds. */
uint64_t dml_now_ns(void);

/** Fill buf with n cryptographically random bytes; 0 or DML_EIO. */
int dml_random_bytes(void *buf, size_t n);

/*
 * Strict parsing: the whole string must be a number in [min, max]; no
 * leading junk, no trailing junk, no silent wrap. 0 or DML_EINVAL / DML_ERANGE.
 */
int dml_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int dml_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);
int dml_parse_double(const char *s, double min, double max, double *out);
/** Sizes accept a K, M or G suffix (powers of 1024). */
int dml_parse_size(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/** "host:port" into its parts; the port must be 1..65535 (0 if allow_zero). */
int dml_parse_hostport(const char *s, char *host, size_t hostlen, uint16_t *port,
		       int allow_zero);

static inline void dml_store_le32(void *p, uint32_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}

static inline uint32_t dml_load_le32(const void *p)
{
	const uint8_t *b = p;
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
	       (uint32_t)b[3] << 24;
}

static inline void dml_store_le16(void *p, uint16_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
}

static inline uint16_t dml_load_le16(const void *p)
{
	const uint8_t *b = p;
	return (uint16_t)(b[0] | b[1] << 8);
}

/* x86-64 and aarch64 are little-endian; payload keys are read in place. */
static inline uint64_t dml_load_le64(const void *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

#define DML_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/**
 * Write a formatted reason into err (when err and errlen are set) and
 * return code: the one-line way for checks that explain what they refuse.
 */
int dml_fail(int code, char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
