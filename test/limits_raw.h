/*
 * limits_raw.h - a blocking raw client and scraping helpers shared by the
 * limits tests. Every function asserts (Check) on what must not fail.
 */
#ifndef DML_TEST_LIMITS_RAW_H
#define DML_TEST_LIMITS_RAW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/dml.pb-c.h"
#include "test/harness.h"

#define WAIT_MS 10000
#define W 2                       /* width of the dense test table */
#define TABLE "[table]\nid = 0\nkind = dense\nwidth = 2\nkeys = 16\noptimizer = add\n"
#define BUDGET_KEYS (4u << 20)   /* a 16 MiB dense table of width 1 */

struct raw {
	int fd;
	uint64_t next_id;
};

/* The reply to one request: what the tests look at. */
struct answer {
	int type;
	int code;                  /* ERROR */
	char message[256];
	float values[W];           /* PULL_REPLY, first values */
};

/** Authenticate as worker node_id on the connected socket fd. */
void raw_open_fd(struct dml_test_env *env, int fd, uint32_t node_id, uint64_t incarnation,
		 struct raw *r);
/** Connect and authenticate as worker node_id. */
void raw_open(struct dml_test_env *env, uint16_t port, uint32_t node_id,
	      uint64_t incarnation, struct raw *r);
/** Send m with a fresh request id, returned; the answer is read later. */
uint64_t raw_request(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len);
/** Wait for the frame answering request id (skipping others). */
void raw_answer(struct raw *r, uint64_t id, struct answer *a);
/** Send m and wait for its answer. */
void raw_call(struct raw *r, Dml__Meta *m, const void *payload, uint32_t len,
	      struct answer *a);
/** Push g (W floats) to key of dense table 0 with seq. */
void raw_push(struct raw *r, uint64_t key, uint64_t seq, const float *g, struct answer *a);
/** The row (W floats) of key of dense table 0. */
void raw_pull(struct raw *r, uint64_t key, float *out);
void expect_ack(const struct answer *a, const char *what);
void expect_row(struct raw *r, uint64_t key, float a, float b, const char *when);

/** Occurrences of needle in the server's log from byte from on. */
int log_count(const struct dml_test_server *s, size_t from, const char *needle);
/** A libdml worker pushes to and pulls from table 0: the server serves. */
void client_round(struct dml_test_env *env, struct dml_test_server *srv, uint32_t id);
/**
 * A metrics listener on a free port: its port file in env's folder goes to
 * port_file, the [server] lines that ask for it to extra.
 */
void metrics_conf(struct dml_test_env *env, char *port_file, size_t port_len, char *extra,
		  size_t extra_len);
/** The metrics page of the server whose metrics port file is given (malloc'ed). */
char *metrics_of(struct dml_test_env *env, const char *port_file);
/** The value of an unlabelled metric, -1 when absent. */
double metric_value(struct dml_test_env *env, const char *port_file, const char *name);
/** Wait (30 s at most) for an unlabelled metric to reach want. */
void wait_metric_at_least(struct dml_test_env *env, const char *port_file, const char *name,
			  double want);
/** Resident kilobytes of a process. */
long rss_kb(pid_t pid);
/** A socket to 127.0.0.1:port with a small receive buffer. */
int slow_reader(uint16_t port);
/** A pull of all BUDGET_KEYS of a width-1 dense table 0; its request id. */
uint64_t whole_table_pull(struct raw *r);

#endif
