/*
 * dml-mankeys: assembles a manual page at build time (not installed).
 *
 *   dml-mankeys PAGE.in > PAGE
 *
 * copies PAGE.in and replaces each line "@KEYS name@" with the option table
 * of that name written as man(7) text (conf_man.h): server, sched and worker
 * for the daemons' files, client for libdml's options, job for job files.
 * The pages' configuration sections so come from the tables the parsers use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/client_conf.h"
#include "proto/conf_man.h"
#include "proto/job_spec.h"
#include "sched/sched_conf.h"
#include "server/aggregator_conf.h"
#include "server/server_conf.h"
#include "worker/worker_conf.h"

static const struct {
	const char *name;
	const struct dml_conf_schema *schema;
} tables[] = {
	{ "server", &dml_server_conf_schema },
	{ "sched", &dml_sched_conf_schema },
	{ "aggregator", &dml_agg_conf_schema },
	{ "worker", &dml_worker_conf_schema },
	{ "client", &dml_client_conf_schema },
	{ "job", &dml_job_conf_schema },
};

static const struct dml_conf_schema *table_named(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
		if (strlen(tables[i].name) == len && strncmp(tables[i].name, name, len) == 0)
			return tables[i].schema;
	return NULL;
}

int main(int argc, char **argv)
{
	char line[4096];
	unsigned lineno = 0;
	FILE *in;

	if (argc != 2) {
		fprintf(stderr, "usage: dml-mankeys PAGE.in > PAGE\n");
		return 2;
	}
	in = fopen(argv[1], "r");
	if (!in) {
		perror(argv[1]);
		return 1;
	}
	while (fgets(line, sizeof(line), in)) {
		size_t n = strlen(line);
		const struct dml_conf_schema *s;

		lineno++;
		if (strncmp(line, "@KEYS ", 6) != 0) {
			fputs(line, stdout);
			continue;
		}
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '@'))
			n--;
		s = n > 6 ? table_named(line + 6, n - 6) : NULL;
		if (!s) {
			fprintf(stderr, "%s:%u: no option table %.*s\n", argv[1], lineno,
				(int)(n > 6 ? n - 6 : 0), line + 6);
			fclose(in);
			return 1;
		}
		if (dml_conf_print_man(s, stdout) != 0) {
			fprintf(stderr, "%s:%u: the table %s cannot be written\n", argv[1],
				lineno, line + 6);
			fclose(in);
			return 1;
		}
	}
	if (ferror(in) || fclose(in) != 0 || fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "dml-mankeys: %s: read or write failed\n", argv[1]);
		return 1;
	}
	return 0;
}
