# worker/: libdml (the client library, public header dml.h) and examples.
lib_LTLIBRARIES += worker/libdml.la
worker_libdml_la_SOURCES = worker/client.c worker/client_opts.c
noinst_HEADERS += worker/client_internal.h
worker_libdml_la_LIBADD = shard/libdmlshard.la proto/libdmlproto.la
include_HEADERS += worker/dml.h proto/dml_error.h

bin_PROGRAMS += worker/dml-example-lsq
worker_dml_example_lsq_SOURCES = worker/example_lsq.c
worker_dml_example_lsq_LDADD = worker/libdml.la
