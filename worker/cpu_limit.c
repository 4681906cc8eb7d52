/*
 * The CPU limit of this process from its cgroups (see cpu_limit.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/cpu_limit.h"

/* A quota in cores from two numbers (quota, period); 0 for none. */
static double cores_of(long long quota, long long period)
{
	return quota > 0 && period > 0 ? (double)quota / (double)period : 0;
}

static int read_ll(const char *dir, const char *name, long long *v)
{
	char path[PATH_MAX];
	FILE *f;
	int ok;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path) ||
	    !(f = fopen(path, "r")))
		return 0;
	ok = fscanf(f, "%lld", v) == 1;
	fclose(f);
	return ok;
}

/* cgroup v1: cpu.cfs_quota_us over cpu.cfs_period_us (-1: none). */
static double quota_v1(const char *dir)
{
	long long q, p;

	return read_ll(dir, "cpu.cfs_quota_us", &q) && read_ll(dir, "cpu.cfs_period_us", &p)
		       ? cores_of(q, p) : 0;
}

/* cgroup v2: cpu.max, "QUOTA PERIOD" or "max PERIOD". */
static double quota_v2(const char *dir)
{
	char path[PATH_MAX], quota[32];
	long long q, p;
	FILE *f;
	int n;

	if (snprintf(path, sizeof(path), "%s/cpu.max", dir) >= (int)sizeof(path) ||
	    !(f = fopen(path, "r")))
		return 0;
	n = fscanf(f, "%31s %lld", quota, &p);
	fclose(f);
	if (n != 2 || strcmp(quota, "max") == 0 || sscanf(quota, "%lld", &q) != 1)
		return 0;
	return cores_of(q, p);
}

/* The tightest quota of base/path and of its ancestors down to base. */
static double tightest(const char *base, const char *path, double (*quota)(const char *))
{
	char dir[PATH_MAX];
	size_t floor = strlen(base);
	double best = 0;

	if (snprintf(dir, sizeof(dir), "%s%s", base, path) >= (int)sizeof(dir))
		return 0;
	for (;;) {
		double v = quota(dir);
		char *cut;

		if (v > 0 && (best == 0 || v < best))
			best = v;
		cut = strrchr(dir, '/');
		if (!cut || (size_t)(cut - dir) < floor)
			break;
		*cut = '\0';
	}
	return best;
}

/* Whether a v1 hierarchy's controller list ("cpu,cpuacct") has cpu. */
static int has_cpu(const char *ctrls)
{
	size_t len = strlen(ctrls);

	for (const char *p = ctrls; p < ctrls + len; p += strcspn(p, ",") + 1)
		if (strncmp(p, "cpu", 3) == 0 && (p[3] == ',' || p[3] == '\0'))
			return 1;
	return 0;
}

double dml_cpu_limit_cores_at(const char *proc_cgroup, const char *root, double online)
{
	char line[PATH_MAX + 128], base[PATH_MAX];
	double best = 0;
	FILE *f = fopen(proc_cgroup, "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *ctrls = strchr(line, ':'), *path;
		double v = 0;

		if (!ctrls || !(path = strchr(ctrls + 1, ':')))
			continue;
		*ctrls++ = '\0';
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		if (path[0] != '/')
			continue;
		if (strcmp(line, "0") == 0 && ctrls[0] == '\0')
			v = tightest(root, path, quota_v2);
		else if (has_cpu(ctrls) &&
			 snprintf(base, sizeof(base), "%s/%s", root, ctrls) < (int)sizeof(base))
			v = tightest(base, path, quota_v1);
		if (v > 0 && (best == 0 || v < best))
			best = v;
	}
	if (f)
		fclose(f);
	return best > 0 && best < online ? best : online;
}

double dml_cpu_limit_cores(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return dml_cpu_limit_cores_at("/proc/self/cgroup", "/sys/fs/cgroup",
				      n > 0 ? (double)n : 1);
}
