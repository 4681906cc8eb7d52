# tools/: dml-bench and the operator scripts.
bin_PROGRAMS += tools/dml-bench
tools_dml_bench_SOURCES = tools/bench.c tools/bench_drive.c tools/bench.h tools/bench_raw.c \
	tools/bench_opt.c tools/bench_opt.h \
	tools/bench_pushpull.c tools/bench_pushpull.h tools/bench_pushpull_internal.h \
	tools/bench_pushpull_opts.c tools/bench_pushpull_print.c tools/bench_train.c \
	tools/bench_train.h tools/bench_train_internal.h tools/bench_train_eval.c \
	tools/bench_train_runs.c tools/bench_train_report.c tools/bench_train_torch.c \
	tools/bench_util.c tools/bench_util.h \
	tools/bench_clicks.c tools/bench_clicks.h tools/bench_cluster.c tools/bench_cluster.h \
	tools/bench_sparse.c tools/bench_sparse.h tools/bench_server.c tools/bench_server.h \
	tools/bench_recovery.c tools/bench_recovery.h tools/bench_hetero.c \
	tools/bench_hetero.h tools/bench_assign.c tools/bench_assign.h tools/bench_codec.c \
	tools/bench_codec.h tools/bench_jobfile.c tools/bench_jobfile.h \
	tools/bench_zones.c tools/bench_zones.h tools/curve_svg.c tools/curve_svg.h
# dml-bench train finds the PyTorch script in the source tree, else here.
tools_dml_bench_CPPFLAGS = $(AM_CPPFLAGS) -DDML_PKGDATADIR='"$(pkgdatadir)"'
dist_pkgdata_DATA = tools/bench_torch.py
tools_dml_bench_LDADD = sched/libdmljobs.la worker/libdml.la store/libdmlstorelog.la shard/libdmlshard.la \
	$(APPS_LIBS) -lpthread
bin_PROGRAMS += tools/dmlctl
tools_dmlctl_SOURCES = tools/dmlctl.c tools/dmlctl.h tools/dmlctl_submit.c tools/dmlctl_jobs.c \
	tools/dmlctl_session.c tools/dmlctl_links.c \
	tools/dmlctl_print.c tools/dmlctl_json.c tools/dmlctl_export.c tools/dmlctl_ckpt.c tools/curve_svg.c tools/curve_svg.h
tools_dmlctl_LDADD = worker/libdml.la $(APPS_LIBS)
dist_noinst_SCRIPTS += tools/check tools/quickstart tools/deps.sh tools/dml-local
# Sourced by dml-local, test/check_fleet.sh, test/check_links.sh and
# test/check_zones.sh; netns.sh (dml-local's links and zones) by dml-local.
EXTRA_DIST += tools/fleet.sh tools/netns.sh

# dml-mankeys writes the option tables into the manual pages at build time
# (proto/conf_man.c), so that their key sections never drift from the
# parsers. The daemons' tables are linked as their daemons compile them.
noinst_PROGRAMS += tools/dml-mankeys
tools_dml_mankeys_SOURCES = tools/mankeys.c proto/conf_man.c proto/conf_man.h \
	server/server_conf.c server/aggregator_conf.c sched/sched_conf.c worker/worker_conf.c
tools_dml_mankeys_LDADD = worker/libdml.la store/libdmlstorelog.la $(APPS_LIBS)
# The recipe of a page made from PAGE.in: each "@KEYS name@" line becomes
# that option table.
DML_MAN_GEN = $(AM_V_GEN)$(MKDIR_P) $(@D) && tools/dml-mankeys$(EXEEXT) $< >$@.tmp && \
	mv $@.tmp $@

# Manual pages: dmlctl(1) and dml-bench(1).
dist_man_MANS += tools/dmlctl.1 tools/dml-bench.1
