# server/: dml-server. Its parameter tables are store/libdmltable.la.
noinst_HEADERS += server/server.h server/ssp.h \
	server/server_conf.h server/server_internal.h server/row_snapshot.h server/job_internal.h \
	server/server_store_internal.h

bin_PROGRAMS += server/dml-server
server_dml_server_SOURCES = server/main.c server/server.c server/requests.c server/replies.c server/pull_delta.c \
	server/tables.c server/ssp.c server/server_conf.c \
	server/server_metrics.c server/server_sched.c server/job.c server/remap.c server/migrate.c \
	server/key_ranges.c server/server_store.c server/store_commit.c server/store_ckpt.c \
	server/ckpt_cut.c server/row_snapshot.c server/server_straggler.c server/bsp_step.c \
	server/server_admit.c server/server_expire.c server/server_budget.c \
	server/forwarded.c
server_dml_server_LDADD = store/libdmltable.la store/libdmlstorelog.la shard/libdmlshard.la \
	proto/libdmlschedlink.la proto/libdmldaemon.la proto/libdmlproto.la

dist_man_MANS += server/dml-server.8

# dml-aggregator: a zone's pushes summed and pulls cached on their way to the
# owning servers. It holds no tables: proto/ only.
noinst_HEADERS += server/aggregator_internal.h server/aggregator_conf.h
bin_PROGRAMS += server/dml-aggregator
server_dml_aggregator_SOURCES = server/aggregator_main.c server/aggregator.c \
	server/aggregator_conf.c server/aggregator_codec.c server/aggregator_queue.c server/aggregator_upstream.c \
	server/aggregator_pull.c server/aggregator_clocks.c server/aggregator_metrics.c \
	server/aggregator_sched.c
server_dml_aggregator_LDADD = proto/libdmlschedlink.la proto/libdmldaemon.la proto/libdmlproto.la


dist_man_MANS += server/dml-aggregator.8
EXTRA_DIST += conf/aggregator.conf conf/systemd/dml-aggregator@.service
