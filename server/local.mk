# server/: dml-server. The storage and optimizer code is a library so unit
# tests and benchmarks link it without the daemon.
noinst_LTLIBRARIES += server/libdmlstore.la
server_libdmlstore_la_SOURCES = server/table.c server/optim.c server/table_spec.c \
	server/finite.c
server_libdmlstore_la_LIBADD = -lm
# sqrtf without errno lets the adagrad and adam loops vectorise.
server_libdmlstore_la_CFLAGS = $(AM_CFLAGS) -fno-math-errno
noinst_HEADERS += server/table.h server/table_spec.h server/optim.h server/server.h server/ssp.h \
	server/finite.h \
	server/server_conf.h server/server_internal.h server/server_snap.h

bin_PROGRAMS += server/dml-server
server_dml_server_SOURCES = server/main.c server/server.c server/ssp.c \
	server/server_conf.c \
	server/server_metrics.c server/server_sched.c server/server_job.c server/server_store.c \
	server/server_cut.c server/server_snap.c server/server_straggler.c server/server_step.c \
	server/server_admit.c server/server_expire.c server/server_budget.c
server_dml_server_LDADD = server/libdmlstore.la store/libdmlstorelog.la shard/libdmlshard.la \
	sched/libdmlschedlink.la proto/libdmldaemon.la proto/libdmlproto.la

dist_man_MANS += server/dml-server.8
