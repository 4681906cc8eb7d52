# shard/: the key-space model (pure functions, no I/O).
noinst_LTLIBRARIES += shard/libdmlshard.la
shard_libdmlshard_la_SOURCES = shard/shardmap.c shard/assign.c shard/mapplan.c
noinst_HEADERS += shard/shardmap.h shard/assign.h shard/mapplan.h
