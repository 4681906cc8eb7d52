# sched/: dml-sched (membership, heartbeats, node states) and the link that
# servers and workers use to register with it.
noinst_LTLIBRARIES += sched/libdmlschedlink.la
sched_libdmlschedlink_la_SOURCES = sched/link.c
noinst_HEADERS += sched/link.h sched/nodes.h sched/sched.h sched/sched_conf.h \
	sched/sched_internal.h

# Job files and specs: read by dmlctl, checked by dml-sched, run by dml-worker.
noinst_LTLIBRARIES += sched/libdmljobconf.la
sched_libdmljobconf_la_SOURCES = sched/job_conf.c
noinst_HEADERS += sched/job_conf.h sched/jobs.h sched/handover.h
EXTRA_DIST += conf/jobs/lsq.conf

# The job table and its placement, a pure state machine: dml-sched runs it,
# check_jobs and dml-bench assign drive it without daemons.
noinst_LTLIBRARIES += sched/libdmljobs.la
sched_libdmljobs_la_SOURCES = sched/jobs.c sched/handover.c

bin_PROGRAMS += sched/dml-sched
sched_dml_sched_SOURCES = sched/main.c sched/sched.c sched/nodes.c sched/sched_conf.c \
	sched/sched_jobs.c sched/sched_metrics.c sched/sched_state.c sched/sched_ckpt.c \
	sched/sched_evict.c
sched_dml_sched_LDADD = sched/libdmljobs.la sched/libdmljobconf.la server/libdmlstore.la shard/libdmlshard.la \
	store/libdmlstorelog.la \
	proto/libdmldaemon.la proto/libdmlproto.la

dist_man_MANS += sched/dml-sched.8
