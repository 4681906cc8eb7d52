# worker/: libdml (the client library, public header dml.h) and examples.
lib_LTLIBRARIES += worker/libdml.la
worker_libdml_la_SOURCES = worker/client.c worker/client_opts.c worker/client_map.c
noinst_HEADERS += worker/client_internal.h
worker_libdml_la_LIBADD = shard/libdmlshard.la proto/libdmlproto.la
include_HEADERS += worker/dml.h proto/dml_error.h

bin_PROGRAMS += worker/dml-example-lsq
worker_dml_example_lsq_SOURCES = worker/example_lsq.c
worker_dml_example_lsq_LDADD = worker/libdml.la

# dml-worker: runs jobs the scheduler assigns (apps behind worker/app.h).
bin_PROGRAMS += worker/dml-worker
worker_dml_worker_SOURCES = worker/worker_main.c worker/worker.c worker/worker_conf.c \
	worker/app_lsq.c worker/profile.c
worker_dml_worker_LDADD = worker/libdml.la sched/libdmlschedlink.la sched/libdmljobconf.la \
	server/libdmlstore.la proto/libdmldaemon.la proto/libdmlproto.la $(OPENBLAS_LIBS) \
	-lpthread -lm
noinst_HEADERS += worker/worker.h worker/worker_conf.h worker/app.h worker/profile.h
EXTRA_DIST += conf/worker.conf
