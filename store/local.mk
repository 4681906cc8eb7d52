# store/: durable state in LMDB: a server's (the gradient log, the push-dedupe
# state and checkpoints) in LMDB. Not server/libdmlstore.la, which holds
# the parameter tables: this one is the log, hence its name.
noinst_LTLIBRARIES += store/libdmlstorelog.la
store_libdmlstorelog_la_SOURCES = store/store.c store/store_open.c store/store_util.c \
	store/store_dedupe.c store/store_syncer.c store/checkpoint.c store/ckpt_writer.c \
	store/sched_store.c store/store_meta.c store/store_sum.c store/store_check.c \
	store/manifest.c
store_libdmlstorelog_la_CFLAGS = $(AM_CFLAGS)
store_libdmlstorelog_la_LIBADD = $(LMDB_LIBS) -lpthread
noinst_HEADERS += store/store.h store/store_internal.h store/sched_store.h store/ckpt_writer.h
