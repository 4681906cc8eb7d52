# worker/: libdml (the client library, public header dml.h) and examples.
lib_LTLIBRARIES += worker/libdml.la
worker_libdml_la_SOURCES = worker/client.c worker/client_parts.c worker/client_codec.c \
	worker/client_aggregator.c worker/client_link.c worker/client_connect.c \
	worker/client_opts.c worker/client_map.c
noinst_HEADERS += worker/client_internal.h worker/client_conf.h
worker_libdml_la_LIBADD = shard/libdmlshard.la proto/libdmlproto.la -lm
include_HEADERS += worker/dml.h proto/dml_error.h

bin_PROGRAMS += worker/dml-example-lsq
worker_dml_example_lsq_SOURCES = worker/example_lsq.c
worker_dml_example_lsq_LDADD = worker/libdml.la

# The training apps, their data readers, the compute backends, the
# in-process parameter store and model files: one library for dml-worker,
# dml-bench, dmlctl and the tests. Static, so that the CUDA object (built by
# nvcc, below) can join it.
noinst_LIBRARIES += worker/libdmlapps.a
worker_libdmlapps_a_SOURCES = worker/apps.c worker/app_util.c worker/app_base.c worker/walk.c \
	worker/app_lsq.c worker/app_mlp.c \
	worker/backend.c worker/backend_cpu.c worker/blas_kernels.c worker/data_idx.c worker/local_store.c \
	worker/model_file.c worker/profile.c worker/app_sparse_lr.c worker/data_libsvm.c \
	worker/data_text.c worker/data_triplets.c \
	worker/data_synth_clicks.c worker/app_mf.c worker/data_synth_ratings.c
worker_libdmlapps_a_CFLAGS = $(AM_CFLAGS) $(ZLIB_CFLAGS)
noinst_HEADERS += worker/app.h worker/app_base.h worker/app_util.h worker/walk.h worker/backend.h worker/blas_kernels.h worker/data_idx.h worker/local_store.h \
	worker/model_file.h worker/profile.h worker/data_libsvm.h worker/data_text.h \
	worker/data_triplets.h worker/data_synth_clicks.h \
	worker/data_synth_ratings.h
EXTRA_DIST += worker/backend_cuda.cu
# What links libdmlapps.a links too (after it).
APPS_LIBS = worker/libdmlapps.a proto/libdmljobspec.la store/libdmltable.la \
	proto/libdmlproto.la $(OPENBLAS_LIBS) $(ZLIB_LIBS) -lm
if HAVE_CUDA
worker_libdmlapps_a_LIBADD = worker/backend_cuda.o
APPS_LIBS += $(CUDA_LIBS) -lstdc++
# sm_80 (A100) and sm_90 (H100) machine code, and compute_90 PTX that newer
# GPUs compile when loading.
NVCC_FLAGS = -std=c++17 -O2 -gencode arch=compute_80,code=sm_80 \
	-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
	-Xcompiler -Wall,-Wextra,-Werror
worker/backend_cuda.o: worker/backend_cuda.cu worker/backend.h config.h
	$(AM_V_GEN)$(NVCC) $(NVCC_FLAGS) -I$(top_srcdir) -I$(top_builddir) -c $(top_srcdir)/worker/backend_cuda.cu -o $@
CLEANFILES += worker/backend_cuda.o
endif

# dml-worker: runs jobs the scheduler assigns (apps behind worker/app.h).
bin_PROGRAMS += worker/dml-worker
worker_dml_worker_SOURCES = worker/worker_main.c worker/worker.c worker/worker_run.c \
	worker/worker_trainer.c worker/worker_conf.c \
	worker/cpu_limit.c worker/cpu_limit.h
worker_dml_worker_LDADD = worker/libdmlapps.a worker/libdml.la proto/libdmlschedlink.la \
	proto/libdmldaemon.la $(APPS_LIBS) -lpthread
noinst_HEADERS += worker/worker.h worker/worker_internal.h worker/worker_conf.h
EXTRA_DIST += conf/worker.conf conf/jobs/mlp.conf conf/jobs/softmax.conf conf/jobs/sparse_lr.conf \
	conf/jobs/mf.conf

# Manual pages: dml-worker(8), and libdml(3) for worker/dml.h.
dist_man_MANS += worker/dml-worker.8 worker/libdml.3
