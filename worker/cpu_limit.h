/*
 * The CPU a worker may use, in cores: the quota of its cgroup (v2 cpu.max,
 * or v1 cpu.cfs_quota_us over cpu.cfs_period_us, the tightest along its
 * path), as a container's CPU limit sets it, else the online CPUs.
 *
 * Why a worker wants it: under a quota a process runs at full speed until
 * its budget for the period is spent, then stands still, so a step that
 * fits in the budget looks as fast as on an unlimited machine. What a
 * worker can sustain is its CPU time per step over the cores it may use;
 * the scheduler takes the longer of that and the step's wall time.
 *
 * Must never: fail on a host without cgroups or with a layout it does not
 * know (it answers the online CPUs), or read outside the files named.
 */
#ifndef DML_WORKER_CPU_LIMIT_H
#define DML_WORKER_CPU_LIMIT_H

/** The cores this process may use now (> 0). */
double dml_cpu_limit_cores(void);

/**
 * The same from a /proc/PID/cgroup text at proc_cgroup and a cgroup tree
 * mounted at root (tests point both at a scratch tree); online: the value
 * when no quota applies.
 */
double dml_cpu_limit_cores_at(const char *proc_cgroup, const char *root, double online);

#endif
