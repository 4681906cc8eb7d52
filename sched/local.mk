# sched/: dml-sched (membership, heartbeats, node states, jobs).
noinst_HEADERS += sched/nodes.h sched/sched.h sched/sched_conf.h \
	sched/sched_internal.h sched/sched_job_internal.h sched/jobs.h sched/jobs_internal.h \
	sched/handover.h
EXTRA_DIST += conf/jobs/lsq.conf

# The job table and its placement, a pure state machine: dml-sched runs it,
# check_jobs and dml-bench assign drive it without daemons.
noinst_LTLIBRARIES += sched/libdmljobs.la
sched_libdmljobs_la_SOURCES = sched/job_table.c sched/job_place.c sched/job_state.c \
	sched/job_view.c sched/job_record.c sched/handover.c

bin_PROGRAMS += sched/dml-sched
sched_dml_sched_SOURCES = sched/main.c sched/sched.c sched/nodes.c sched/sched_conf.c \
	sched/sched_job_io.c sched/sched_job_run.c sched/sched_job_rpc.c sched/sched_metrics.c \
	sched/sched_state.c sched/sched_ckpt.c sched/sched_evict.c \
	sched/sched_routes.c
sched_dml_sched_LDADD = sched/libdmljobs.la proto/libdmljobspec.la shard/libdmlshard.la \
	store/libdmlstorelog.la \
	proto/libdmldaemon.la proto/libdmlproto.la

dist_man_MANS += sched/dml-sched.8
