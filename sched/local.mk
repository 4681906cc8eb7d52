# sched/: dml-sched (membership, heartbeats, node states) and the link that
# servers and workers use to register with it.
noinst_LTLIBRARIES += sched/libdmlschedlink.la
sched_libdmlschedlink_la_SOURCES = sched/link.c
noinst_HEADERS += sched/link.h sched/nodes.h sched/sched.h sched/sched_conf.h

bin_PROGRAMS += sched/dml-sched
sched_dml_sched_SOURCES = sched/main.c sched/sched.c sched/nodes.c sched/sched_conf.c
sched_dml_sched_LDADD = proto/libdmldaemon.la proto/libdmlproto.la
