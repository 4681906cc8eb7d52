# test/: Check unit tests per module, and integration tests that start real
# daemons on 127.0.0.1 with free ports (see test/harness.h).
TEST_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(ZLIB_CFLAGS)
TEST_LIBS = $(CHECK_LIBS) $(ZLIB_LIBS)
noinst_HEADERS += test/check_run.h test/acks.h
# The harness every integration test links, in its own objects per program.
HARNESS_SOURCES = test/harness.c test/harness_daemon.c test/harness_net.c \
	test/harness.h test/harness_internal.h

check_PROGRAMS += test/check_frame test/check_auth test/check_conf \
	test/check_table test/check_shardmap test/check_ssp test/check_examples test/check_cluster \
	test/check_metrics
TESTS += test/check_frame test/check_auth test/check_conf \
	test/check_table test/check_shardmap test/check_ssp test/check_examples test/check_cluster \
	test/check_metrics

test_check_frame_SOURCES = test/check_frame.c test/check_frame_roundtrip.c \
	test/check_frame_malformed.c test/check_frame_fuzz.c test/check_frame_direct.c \
	test/check_frame.h
test_check_frame_CFLAGS = $(TEST_CFLAGS)
test_check_frame_LDADD = proto/libdmlproto.la $(TEST_LIBS)

test_check_auth_SOURCES = test/check_auth.c
test_check_auth_CFLAGS = $(TEST_CFLAGS)
test_check_auth_LDADD = proto/libdmlproto.la $(TEST_LIBS)

test_check_conf_SOURCES = test/check_conf.c test/check_conf_parse.c test/check_conf_files.c \
	test/check_conf_util.c test/check_conf.h
test_check_conf_CFLAGS = $(TEST_CFLAGS)
test_check_conf_LDADD = proto/libdmlproto.la $(TEST_LIBS)

test_check_table_SOURCES = test/check_table.c test/check_table.h test/check_table_optim.c \
	test/check_table_rows.c test/check_table_move.c
test_check_table_CFLAGS = $(TEST_CFLAGS)
test_check_table_LDADD = store/libdmltable.la proto/libdmlproto.la $(TEST_LIBS)

test_check_shardmap_SOURCES = test/check_shardmap.c
test_check_shardmap_CFLAGS = $(TEST_CFLAGS)
test_check_shardmap_LDADD = shard/libdmlshard.la proto/libdmlproto.la $(TEST_LIBS)

check_PROGRAMS += test/check_assign
TESTS += test/check_assign
test_check_assign_SOURCES = test/check_assign.c
test_check_assign_CFLAGS = $(TEST_CFLAGS)
test_check_assign_LDADD = shard/libdmlshard.la proto/libdmlproto.la $(TEST_LIBS)

test_check_ssp_SOURCES = test/check_ssp.c server/ssp.c
test_check_ssp_CFLAGS = $(TEST_CFLAGS)
test_check_ssp_LDADD = proto/libdmlproto.la $(TEST_LIBS)

test_check_metrics_SOURCES = test/check_metrics.c
test_check_metrics_CFLAGS = $(TEST_CFLAGS)
test_check_metrics_LDADD = proto/libdmlproto.la $(TEST_LIBS)

# The gradient codecs: names, half precision bit for bit, round trips within
# each codec's error, error feedback sums, hostile encodings refused.
check_PROGRAMS += test/check_codec
TESTS += test/check_codec
test_check_codec_SOURCES = test/check_codec.c test/check_codec_trip.c \
	test/check_codec_hostile.c test/check_codec.h
test_check_codec_CFLAGS = $(TEST_CFLAGS)
test_check_codec_LDADD = proto/libdmlproto.la $(TEST_LIBS) -lm

# Codecs on the wire: a server and libdml clients in different zones.
check_PROGRAMS += test/check_codec_link
TESTS += test/check_codec_link
test_check_codec_link_SOURCES = test/check_codec_link.c test/raw_frame.c test/raw_frame.h \
	$(HARNESS_SOURCES)
test_check_codec_link_CFLAGS = $(TEST_CFLAGS)
test_check_codec_link_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS) -lm

# dml-aggregator between raw worker frames and a real dml-server: sums,
# ACKs only after the owner's, refusals, an owner killed before its ACK,
# the window, the zone pull cache.
check_PROGRAMS += test/check_aggregator
TESTS += test/check_aggregator
test_check_aggregator_SOURCES = test/check_aggregator.c test/check_aggregator_util.c \
	test/check_aggregator_fake.c test/check_aggregator.h test/raw_frame.c test/raw_frame.h \
	$(HARNESS_SOURCES)
test_check_aggregator_CFLAGS = $(TEST_CFLAGS)
test_check_aggregator_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS) -lm

# The zone aggregator path in libdml: options, fallback, Meta.owner, CLOCK order.
check_PROGRAMS += test/check_agg_route
TESTS += test/check_agg_route
test_check_agg_route_SOURCES = test/check_agg_route.c $(HARNESS_SOURCES)
test_check_agg_route_CFLAGS = $(TEST_CFLAGS)
test_check_agg_route_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS) -lm

test_check_examples_SOURCES = test/check_examples.c server/server_conf.c \
	sched/sched_conf.c
test_check_examples_CFLAGS = $(TEST_CFLAGS)
test_check_examples_LDADD = worker/libdml.la store/libdmltable.la store/libdmlstorelog.la \
	proto/libdmlproto.la $(TEST_LIBS)

# Integration: real dml-server processes, real sockets.
test_check_cluster_SOURCES = test/check_cluster.c test/check_cluster_clock.c \
	test/check_cluster_delivery.c test/check_cluster_abuse.c test/check_cluster_regress.c \
	test/check_cluster_metrics.c test/check_cluster.h $(HARNESS_SOURCES)
test_check_cluster_CFLAGS = $(TEST_CFLAGS)
test_check_cluster_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# libdml's log sink (dml_set_log).
check_PROGRAMS += test/check_dml_log
TESTS += test/check_dml_log
test_check_dml_log_SOURCES = test/check_dml_log.c
test_check_dml_log_CFLAGS = $(TEST_CFLAGS)
test_check_dml_log_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: limits no peer can exhaust (idle handshakes, descriptors,
# non-finite gradients, push sequence jumps).
check_PROGRAMS += test/check_limits
TESTS += test/check_limits
test_check_limits_SOURCES = test/check_limits.c test/limits_raw.c test/limits_raw.h test/raw_frame.c test/raw_frame.h \
	$(HARNESS_SOURCES)
test_check_limits_CFLAGS = $(TEST_CFLAGS)
test_check_limits_LDADD = worker/libdml.la store/libdmltable.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: many connections with requests in flight (every ACK once,
# in order; a hostile frame refused on its own connection only).
check_PROGRAMS += test/check_many_conns
TESTS += test/check_many_conns
test_check_many_conns_SOURCES = test/check_many_conns.c test/limits_raw.c test/limits_raw.h \
	test/raw_frame.c test/raw_frame.h $(HARNESS_SOURCES)
test_check_many_conns_CFLAGS = $(TEST_CFLAGS)
test_check_many_conns_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: memory no peer can pin (refused buffers, sparse pulls,
# forgotten workers, the output budget).
check_PROGRAMS += test/check_memory
TESTS += test/check_memory
test_check_memory_SOURCES = test/check_memory.c test/limits_raw.c test/limits_raw.h test/raw_frame.c test/raw_frame.h \
	$(HARNESS_SOURCES)
test_check_memory_CFLAGS = $(TEST_CFLAGS)
test_check_memory_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# The gradient log against SIGKILL: exact sums after thirty crashes, clean
# stops, refused stores.
check_PROGRAMS += test/check_durability
TESTS += test/check_durability
test_check_durability_SOURCES = test/check_durability.c $(HARNESS_SOURCES)
test_check_durability_CFLAGS = $(TEST_CFLAGS)
test_check_durability_LDADD = worker/libdml.la store/libdmltable.la proto/libdmlproto.la $(TEST_LIBS)

# Exactly-once while worker processes (incarnations going up and down)
# and the server are SIGKILLed at random points.
# Aggregators' summed pushes at their owner: a server, libdml workers, raw frames.
check_PROGRAMS += test/check_forwarded
TESTS += test/check_forwarded
test_check_forwarded_SOURCES = test/check_forwarded.c test/raw_frame.c test/raw_frame.h \
	$(HARNESS_SOURCES)
test_check_forwarded_CFLAGS = $(TEST_CFLAGS)
test_check_forwarded_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)


check_PROGRAMS += test/check_exactly_once
TESTS += test/check_exactly_once
test_check_exactly_once_SOURCES = test/check_exactly_once.c $(HARNESS_SOURCES)
test_check_exactly_once_CFLAGS = $(TEST_CFLAGS)
test_check_exactly_once_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)
check_PROGRAMS += test/check_agg_exactly_once
TESTS += test/check_agg_exactly_once
test_check_agg_exactly_once_SOURCES = test/check_agg_exactly_once.c $(HARNESS_SOURCES)
test_check_agg_exactly_once_CFLAGS = $(TEST_CFLAGS)
test_check_agg_exactly_once_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# A server SIGKILLed and restarted forty times under pushes: the log stays
# bounded (replayed bytes count, half a map is trimmed) and it serves on.
check_PROGRAMS += test/check_restart_loop
TESTS += test/check_restart_loop
test_check_restart_loop_SOURCES = test/check_restart_loop.c $(HARNESS_SOURCES)
test_check_restart_loop_CFLAGS = $(TEST_CFLAGS)
test_check_restart_loop_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# conf/systemd/dml-server@.service checked with systemd-analyze (exit 77 = SKIP
# where systemd is not installed).
TESTS += test/check_units.sh
dist_noinst_SCRIPTS += test/check_units.sh

# Every include names its folder, and no folder reaches above or beside its
# layer (server/, sched/ and worker/ never include one another).
TESTS += test/check_layering.sh
dist_noinst_SCRIPTS += test/check_layering.sh

# dml-local --cpus: worker cgroups with CPU quotas (exit 77 = SKIP where the
# cgroups are not writable).
TESTS += test/check_fleet.sh
dist_noinst_SCRIPTS += test/check_fleet.sh

# dml-local --links: workers in network namespaces behind rate-limited veth
# pairs (exit 77 = SKIP without root and iproute2).
TESTS += test/check_links.sh
dist_noinst_SCRIPTS += test/check_links.sh

# dml-local --zones: a zone's workers in a namespace of their own behind a
# rate-limited link, their zone in dmlctl nodes, tc's counts in `links`
# (exit 77 = SKIP without root and iproute2).
TESTS += test/check_zones.sh
dist_noinst_SCRIPTS += test/check_zones.sh
TESTS += test/check_zone_aggregators.sh
dist_noinst_SCRIPTS += test/check_zone_aggregators.sh

# dml-bench zones in a tiny mode: every configuration's row, the targets,
# the flat routing's cross-zone bytes (exit 77 = SKIP without root,
# iproute2 or Fashion-MNIST).
TESTS += test/check_bench_zones.sh
dist_noinst_SCRIPTS += test/check_bench_zones.sh

# A hung worker (SIGSTOP) under BSP: lost, its clock dropped by the
# servers (EVICT), the job going on; back, it takes up at the job's clock.
TESTS += test/check_stall.sh
dist_noinst_SCRIPTS += test/check_stall.sh
# A worker lost before it joined the servers; a worker stopped while its
# pull waits on a server that answers nothing.
TESTS += test/check_lost_worker.sh
dist_noinst_SCRIPTS += test/check_lost_worker.sh
EXTRA_DIST += test/local_cluster.sh
EXTRA_DIST += conf/systemd/dml-server@.service conf/systemd/dml-sched.service \
	conf/systemd/dml-worker@.service conf/systemd/README conf/local/sched.conf \
	conf/local/server.conf conf/local/worker.conf conf/local/aggregator.conf

# The serial harness (kept so Check's summaries show) reads TESTS_ENVIRONMENT.
TESTS_ENVIRONMENT = env DML_BUILDDIR='$(abs_top_builddir)' DML_SRCDIR='$(abs_top_srcdir)'

# The scheduler's node table and its state machine, with a fake clock.
check_PROGRAMS += test/check_nodes
TESTS += test/check_nodes
test_check_nodes_SOURCES = test/check_nodes.c sched/nodes.c
test_check_nodes_CFLAGS = $(TEST_CFLAGS)
test_check_nodes_LDADD = proto/libdmlproto.la $(TEST_LIBS)

# Integration: dml-sched, dml-servers registering with it, dmlctl.
check_PROGRAMS += test/check_sched
TESTS += test/check_sched
test_check_sched_SOURCES = test/check_sched.c $(HARNESS_SOURCES) test/json.c \
	test/json.h
test_check_sched_CFLAGS = $(TEST_CFLAGS)
test_check_sched_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# The scheduler's job table and job files, with a fake clock.
check_PROGRAMS += test/check_jobs
TESTS += test/check_jobs
test_check_jobs_SOURCES = test/check_jobs.c test/check_jobs.h test/check_job_files.c \
	test/check_job_specs.c test/check_job_members.c test/check_job_progress.c \
	test/check_job_ops.c test/check_job_batches.c test/check_job_records.c
test_check_jobs_CFLAGS = $(TEST_CFLAGS)
test_check_jobs_LDADD = sched/libdmljobs.la proto/libdmljobspec.la shard/libdmlshard.la store/libdmltable.la \
	proto/libdmlproto.la $(TEST_LIBS)

# Shard maps planned over servers by capacity, and checked as received.
check_PROGRAMS += test/check_mapplan
TESTS += test/check_mapplan
test_check_mapplan_SOURCES = test/check_mapplan.c
test_check_mapplan_CFLAGS = $(TEST_CFLAGS)
test_check_mapplan_LDADD = shard/libdmlshard.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: dml-sched's job handling with real servers and in-process peers.
check_PROGRAMS += test/check_schedjobs
TESTS += test/check_schedjobs
test_check_schedjobs_SOURCES = test/check_schedjobs.c test/check_schedjobs.h \
	test/check_schedjobs_workers.c test/check_schedjobs_ckpt.c \
	test/check_schedjobs_routes.c test/schedjobs_peer.c test/json.c test/json.h \
	$(HARNESS_SOURCES)
test_check_schedjobs_CFLAGS = $(TEST_CFLAGS)
test_check_schedjobs_LDADD = proto/libdmljobspec.la store/libdmltable.la shard/libdmlshard.la \
	worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: servers taking shard maps from a (scripted) scheduler and
# moving rows between themselves.
check_PROGRAMS += test/check_remap
TESTS += test/check_remap
test_check_remap_SOURCES = test/check_remap.c test/check_remap.h test/check_remap_util.c \
	test/check_remap_frames.c test/check_remap_faults.c test/raw_frame.c test/raw_frame.h \
	test/fake_sched.c test/fake_sched.h $(HARNESS_SOURCES)
test_check_remap_CFLAGS = $(TEST_CFLAGS)
test_check_remap_LDADD = worker/libdml.la proto/libdmljobspec.la store/libdmltable.la \
	proto/libdmlproto.la $(TEST_LIBS) -lpthread

# Integration: job-wide checkpoints cut exactly on real servers (scripted scheduler).
check_PROGRAMS += test/check_cut
TESTS += test/check_cut
test_check_cut_SOURCES = test/check_cut.c test/fake_sched.c test/fake_sched.h \
	$(HARNESS_SOURCES)
test_check_cut_CFLAGS = $(TEST_CFLAGS)
test_check_cut_LDADD = worker/libdml.la proto/libdmljobspec.la store/libdmltable.la \
	store/libdmlstorelog.la proto/libdmlproto.la $(LMDB_LIBS) $(TEST_LIBS) -lpthread

# dml-worker: the lsq app, profiles, config, and the daemon with dml-sched.
check_PROGRAMS += test/check_worker
TESTS += test/check_worker
test_check_worker_SOURCES = test/check_worker.c test/check_worker_daemon.c test/check_worker.h \
	$(HARNESS_SOURCES) test/json.c test/json.h test/app_test.c test/app_test.h \
	worker/worker_conf.c worker/cpu_limit.c
test_check_worker_CFLAGS = $(TEST_CFLAGS)
test_check_worker_LDADD = worker/libdml.la $(APPS_LIBS) $(TEST_LIBS)

# End to end: dml-sched, servers and workers from config files, dmlctl.
check_PROGRAMS += test/check_e2e
TESTS += test/check_e2e
test_check_e2e_SOURCES = test/check_e2e.c test/cluster.c test/cluster.h $(HARNESS_SOURCES) \
	test/json.c test/json.h
test_check_e2e_CFLAGS = $(TEST_CFLAGS)
test_check_e2e_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: the same-host Unix socket beside a server's TCP port.
check_PROGRAMS += test/check_local
TESTS += test/check_local
test_check_local_SOURCES = test/check_local.c $(HARNESS_SOURCES)
test_check_local_CFLAGS = $(TEST_CFLAGS)
test_check_local_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

check_PROGRAMS += test/check_ring
TESTS += test/check_ring
test_check_ring_SOURCES = test/check_ring.c test/raw_frame.c test/raw_frame.h $(HARNESS_SOURCES)
test_check_ring_CFLAGS = $(TEST_CFLAGS)
test_check_ring_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# End to end: job-wide checkpoints taken, listed, kept and deleted.
check_PROGRAMS += test/check_checkpoints
TESTS += test/check_checkpoints
test_check_checkpoints_SOURCES = test/check_checkpoints.c test/cluster.c test/cluster.h \
	$(HARNESS_SOURCES) test/json.c test/json.h
test_check_checkpoints_CFLAGS = $(TEST_CFLAGS)
test_check_checkpoints_LDADD = worker/libdml.la store/libdmlstorelog.la proto/libdmlproto.la \
	$(LMDB_LIBS) $(TEST_LIBS)

# End to end: a job's link classes, residuals and zones in dmlctl status.
check_PROGRAMS += test/check_zone_status
TESTS += test/check_zone_status
test_check_zone_status_SOURCES = test/check_zone_status.c test/cluster.c test/cluster.h \
	$(HARNESS_SOURCES) test/json.c test/json.h
test_check_zone_status_CFLAGS = $(TEST_CFLAGS)
test_check_zone_status_LDADD = worker/libdml.la proto/libdmlproto.la $(TEST_LIBS)

# Integration: libdml's scheduler mode following shard maps (scripted scheduler).
check_PROGRAMS += test/check_follow
TESTS += test/check_follow
test_check_follow_SOURCES = test/check_follow.c test/check_follow_fixture.c \
	test/check_follow_sched.c test/check_follow.h test/fake_sched.c test/fake_sched.h \
	$(HARNESS_SOURCES)
test_check_follow_CFLAGS = $(TEST_CFLAGS)
test_check_follow_LDADD = worker/libdml.la proto/libdmljobspec.la store/libdmltable.la \
	proto/libdmlproto.la $(TEST_LIBS) -lpthread

# Data readers: IDX files (Fashion-MNIST), gzipped or not, fuzzed.
check_PROGRAMS += test/check_data
TESTS += test/check_data
test_check_data_SOURCES = test/check_data.c test/tmpdir.c test/tmpdir.h
test_check_data_CFLAGS = $(TEST_CFLAGS)
test_check_data_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# The mlp app and the cpu backend: ops against a double reference, gradients
# against finite differences, data, partitions, learning.
check_PROGRAMS += test/check_mlp
TESTS += test/check_mlp
test_check_mlp_SOURCES = test/check_mlp.c test/check_mlp_backend.c test/check_mlp_data.c \
	test/check_mlp_util.c test/check_mlp.h test/tmpdir.c test/tmpdir.h test/app_test.c \
	test/app_test.h
test_check_mlp_CFLAGS = $(TEST_CFLAGS)
test_check_mlp_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# The libsvm reader: parsing, gzip, every error, a fuzz loop.
check_PROGRAMS += test/check_libsvm
TESTS += test/check_libsvm
test_check_libsvm_SOURCES = test/check_libsvm.c test/tmpdir.c test/tmpdir.h test/fuzz.c \
	test/fuzz.h
test_check_libsvm_CFLAGS = $(TEST_CFLAGS)
test_check_libsvm_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# The rating-triplet reader: separators, header, gzip, every error, a fuzz
# loop.
check_PROGRAMS += test/check_triplets
TESTS += test/check_triplets
test_check_triplets_SOURCES = test/check_triplets.c test/tmpdir.c test/tmpdir.h test/fuzz.c \
	test/fuzz.h
test_check_triplets_CFLAGS = $(TEST_CFLAGS)
test_check_triplets_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# The sparse_lr app: gradients against finite differences, AUC, learning,
# specs it refuses, evaluation.
check_PROGRAMS += test/check_sparse_lr
TESTS += test/check_sparse_lr
test_check_sparse_lr_SOURCES = test/check_sparse_lr.c test/tmpdir.c test/tmpdir.h \
	test/app_test.c test/app_test.h
test_check_sparse_lr_CFLAGS = $(TEST_CFLAGS)
test_check_sparse_lr_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# The mf app and synthetic ratings: gradients of both tables against finite
# differences, evaluation, refusals, io failures, learning.
check_PROGRAMS += test/check_mf
TESTS += test/check_mf
test_check_mf_SOURCES = test/check_mf.c test/tmpdir.c test/tmpdir.h test/app_test.c \
	test/app_test.h
test_check_mf_CFLAGS = $(TEST_CFLAGS)
test_check_mf_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# Synthetic clicks and dml-bench gen-clicks: same records every time, their
# shape and skew, the hidden model's AUC, files that read back alike.
check_PROGRAMS += test/check_clicks
TESTS += test/check_clicks
test_check_clicks_SOURCES = test/check_clicks.c test/tmpdir.c test/tmpdir.h
test_check_clicks_CFLAGS = $(TEST_CFLAGS)
test_check_clicks_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# Backends: cuda against cpu for every op and a full mlp step (SKIP without
# a GPU), and the registry.
check_PROGRAMS += test/check_backend
TESTS += test/check_backend
test_check_backend_SOURCES = test/check_backend.c test/check_backend_ops.c test/check_backend.h \
	test/app_test.c test/app_test.h
test_check_backend_CFLAGS = $(TEST_CFLAGS)
test_check_backend_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# The in-process parameter store, model files (fuzzed) and dml-worker --eval.
check_PROGRAMS += test/check_model
TESTS += test/check_model
test_check_model_SOURCES = test/check_model.c test/check_model_file.c test/check_model.h \
	test/tmpdir.c test/tmpdir.h
test_check_model_CFLAGS = $(TEST_CFLAGS)
test_check_model_LDADD = $(APPS_LIBS) $(TEST_LIBS)

# dmlctl's SVG curve writer.
check_PROGRAMS += test/check_curve
TESTS += test/check_curve
test_check_curve_SOURCES = test/check_curve.c tools/curve_svg.c tools/curve_svg.h
test_check_curve_CFLAGS = $(TEST_CFLAGS)
test_check_curve_LDADD = proto/libdmlproto.la $(TEST_LIBS) -lm

# Integration: dmlctl export from a real cluster, read back.
check_PROGRAMS += test/check_export
TESTS += test/check_export
test_check_export_SOURCES = test/check_export.c test/cluster.c test/cluster.h $(HARNESS_SOURCES) \
	test/json.c test/json.h
test_check_export_CFLAGS = $(TEST_CFLAGS)
test_check_export_LDADD = worker/libdml.la $(APPS_LIBS) $(TEST_LIBS)

# The LMDB gradient log: round trips, reopen, dedupe state, refused stores
# (another server, another format, garbage), a full map, damaged records.
check_PROGRAMS += test/check_store
TESTS += test/check_store
test_check_store_SOURCES = test/check_store.c test/check_store_log.c \
	test/check_store_ckpt.c test/check_store.h test/tmpdir.c test/tmpdir.h
test_check_store_CFLAGS = $(TEST_CFLAGS)
test_check_store_LDADD = store/libdmlstorelog.la proto/libdmlproto.la $(LMDB_LIBS) $(TEST_LIBS)

# dml-sched's store: round trips in key order, only commits survive, a full
# map, and neither daemon opens the other's store.
check_PROGRAMS += test/check_store_refusals
TESTS += test/check_store_refusals
test_check_store_refusals_SOURCES = test/check_store_refusals.c $(HARNESS_SOURCES)
test_check_store_refusals_CFLAGS = $(TEST_CFLAGS)
test_check_store_refusals_LDADD = worker/libdml.la store/libdmltable.la proto/libdmlproto.la \
	$(TEST_LIBS)

check_PROGRAMS += test/check_store_damage
TESTS += test/check_store_damage
test_check_store_damage_SOURCES = test/check_store_damage.c test/tmpdir.c test/tmpdir.h
test_check_store_damage_CFLAGS = $(TEST_CFLAGS)
test_check_store_damage_LDADD = store/libdmlstorelog.la proto/libdmlproto.la $(LMDB_LIBS) \
	$(TEST_LIBS)

check_PROGRAMS += test/check_sched_store
TESTS += test/check_sched_store
test_check_sched_store_SOURCES = test/check_sched_store.c test/tmpdir.c test/tmpdir.h
test_check_sched_store_CFLAGS = $(TEST_CFLAGS)
test_check_sched_store_LDADD = store/libdmlstorelog.la proto/libdmlproto.la $(LMDB_LIBS) \
	$(TEST_LIBS)
