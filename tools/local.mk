# tools/: dml-bench and the operator scripts.
bin_PROGRAMS += tools/dml-bench
tools_dml_bench_SOURCES = tools/bench.c tools/bench_raw.c tools/bench.h
tools_dml_bench_LDADD = worker/libdml.la proto/libdmlproto.la
bin_PROGRAMS += tools/dmlctl
tools_dmlctl_SOURCES = tools/dmlctl.c
tools_dmlctl_LDADD = sched/libdmljobconf.la server/libdmlstore.la proto/libdmlproto.la
dist_noinst_SCRIPTS += tools/check tools/quickstart tools/deps.sh tools/dml-local
