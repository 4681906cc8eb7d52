# proto/: wire schema, framing, auth, config parser, logging and the
# connection layer shared by every daemon and the client library.
noinst_LTLIBRARIES += proto/libdmlproto.la
proto_libdmlproto_la_SOURCES = \
	proto/error.c proto/log.c proto/util.c proto/frame.c proto/auth.c \
	proto/conf.c proto/conn.c proto/listen.c proto/peers.c proto/metrics.c
nodist_proto_libdmlproto_la_SOURCES = proto/dml.pb-c.c proto/dml.pb-c.h
proto_libdmlproto_la_LIBADD = $(LIBEVENT_LIBS) $(PROTOBUF_C_LIBS) $(CRYPTO_LIBS) -lm
noinst_HEADERS += proto/log.h proto/util.h proto/frame.h \
	proto/auth.h proto/conf.h proto/conn.h proto/listen.h proto/peers.h proto/metrics.h
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
