# store/: the parameter tables, and durable state in LMDB.

# The parameter tables and their optimizers: in memory, no I/O; dml-server,
# the worker's in-process store, the tests and benchmarks link them.
noinst_LTLIBRARIES += store/libdmltable.la
store_libdmltable_la_SOURCES = store/table.c store/table_push.c store/table_move.c \
	store/optim.c
store_libdmltable_la_LIBADD = -lm
# sqrtf without errno lets the adagrad and adam loops vectorise.
store_libdmltable_la_CFLAGS = $(AM_CFLAGS) -fno-math-errno
noinst_HEADERS += store/table.h store/table_internal.h store/optim.h

# A server's durable state (the gradient log, the push-dedupe state and
# checkpoints) in LMDB: the log, hence its name.
noinst_LTLIBRARIES += store/libdmlstorelog.la
store_libdmlstorelog_la_SOURCES = store/store.c store/store_open.c store/store_util.c \
	store/store_dedupe.c store/store_syncer.c store/checkpoint.c store/ckpt_writer.c \
	store/sched_store.c store/store_meta.c store/store_sum.c store/store_check.c \
	store/manifest.c
store_libdmlstorelog_la_CFLAGS = $(AM_CFLAGS)
store_libdmlstorelog_la_LIBADD = $(LMDB_LIBS) -lpthread
noinst_HEADERS += store/store.h store/store_internal.h store/sched_store.h store/ckpt_writer.h
