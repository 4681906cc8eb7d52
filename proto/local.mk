# proto/: wire schema, framing, auth, config parser, logging and the
# connection layer shared by every daemon and the client library.
noinst_LTLIBRARIES += proto/libdmlproto.la
proto_libdmlproto_la_SOURCES = \
	proto/error.c proto/log.c proto/util.c proto/frame.c proto/auth.c \
	proto/conf.c proto/conf_value.c proto/conf_print.c proto/conf_check.c \
	proto/conn.c proto/conn_send.c proto/conn_recv.c proto/conn_handshake.c \
	proto/conn_ring.c proto/shm_ring.c proto/listen.c proto/local.c proto/peers.c proto/metrics.c proto/table_spec.c \
	proto/finite.c proto/codec.c proto/residual.c
nodist_proto_libdmlproto_la_SOURCES = proto/dml.pb-c.c proto/dml.pb-c.h
proto_libdmlproto_la_LIBADD = proto/libdmlcodec.la $(LIBEVENT_LIBS) $(PROTOBUF_C_LIBS) \
	$(CRYPTO_LIBS) -lm
# The codecs' per-value loops, apart for their flags: gcc -O2 vectorises
# only loops that need no scalar remainder (a tensor's length is anything),
# and a float select only when comparisons are taken not to trap (no trap
# is ever enabled; results are the same).
noinst_LTLIBRARIES += proto/libdmlcodec.la
proto_libdmlcodec_la_SOURCES = proto/codec_kernels.c
proto_libdmlcodec_la_CFLAGS = $(AM_CFLAGS) -fvect-cost-model=dynamic -fno-trapping-math
noinst_HEADERS += proto/log.h proto/util.h proto/vector_clones.h proto/frame.h \
	proto/auth.h proto/conf.h proto/conf_internal.h proto/conn.h proto/conn_internal.h \
	proto/listen.h proto/local.h proto/peers.h proto/metrics.h \
	proto/table_spec.h proto/finite.h proto/codec.h proto/codec_internal.h \
	proto/residual.h proto/shm_ring.h
EXTRA_DIST += proto/dml.proto

# protoc-c writes next to the .proto's relative path; run it from srcdir.
proto/dml.pb-c.c proto/dml.pb-c.h: $(top_srcdir)/proto/dml.proto
	$(AM_V_GEN)$(MKDIR_P) proto && \
	$(PROTOC_C) --proto_path=$(top_srcdir)/proto --c_out=proto $(top_srcdir)/proto/dml.proto
BUILT_SOURCES += proto/dml.pb-c.c proto/dml.pb-c.h
CLEANFILES += proto/dml.pb-c.c proto/dml.pb-c.h

# The daemon life cycle (options, signals, systemd readiness): daemons only,
# so libdml does not depend on libsystemd.
noinst_LTLIBRARIES += proto/libdmldaemon.la
proto_libdmldaemon_la_SOURCES = proto/daemon.c
proto_libdmldaemon_la_CFLAGS = $(AM_CFLAGS) $(SYSTEMD_CFLAGS)
proto_libdmldaemon_la_LIBADD = $(SYSTEMD_LIBS)
noinst_HEADERS += proto/daemon.h

# The scheduler link: how dml-server and dml-worker register with dml-sched
# (the client side; dml-sched itself never links it).
noinst_LTLIBRARIES += proto/libdmlschedlink.la
proto_libdmlschedlink_la_SOURCES = proto/sched_link.c
noinst_HEADERS += proto/sched_link.h

# Job files and specs: read by dmlctl, checked by dml-sched, run by dml-worker.
noinst_LTLIBRARIES += proto/libdmljobspec.la
proto_libdmljobspec_la_SOURCES = proto/job_spec.c proto/job_file.c proto/job_spec_check.c
noinst_HEADERS += proto/job_spec.h proto/job_spec_internal.h

# Manual pages of the files every program reads: dml.conf(5) (the daemons'
# and libdml's keys) and dml-job(5) (job files), their keys written from the
# option tables by tools/dml-mankeys.
nodist_man_MANS += proto/dml.conf.5 proto/dml-job.5
EXTRA_DIST += proto/dml.conf.5.in proto/dml-job.5.in
CLEANFILES += proto/dml.conf.5 proto/dml-job.5
proto/dml.conf.5: proto/dml.conf.5.in tools/dml-mankeys$(EXEEXT)
	$(DML_MAN_GEN)
proto/dml-job.5: proto/dml-job.5.in tools/dml-mankeys$(EXEEXT)
	$(DML_MAN_GEN)
