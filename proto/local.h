/*
 * The same-host transport: beside its TCP port, every daemon listens on a
 * Linux abstract-namespace Unix stream socket named after the address and
 * port it serves: "dml/127.0.0.1:7001", "dml/[::1]:7001", and for a
 * wildcard bind (0.0.0.0, [::]) a star in place of the address. A process
 * dialing an address of its own machine tries the address's name, then the
 * star's, and falls back to TCP when nothing listens on either.
 *
 * Why abstract: no file to create, clean up or give permissions, and the
 * name lives in the network namespace, like the TCP port it stands for: a
 * process in another namespace never reaches it and dials TCP instead.
 * Anyone who can reach the TCP port can reach the name; the handshake
 * (auth.h) runs over it unchanged.
 *
 * The sockets keep the kernel's default buffers (net.core.wmem_default,
 * 208 KiB): measured against them in interleaved rounds, 4 MiB send
 * buffers made 1 MiB pulls at window 8 slower than loopback TCP, and 1 MiB
 * ones halved the gain on 16 MiB pushes; the data in flight no longer
 * stays in cache between the sender's copy and the receiver's. 1 MiB did
 * help replies a little larger than the default (a sparse pull of 1000
 * rows of 64 floats: 0.7-0.8 x TCP with the default, 0.9-1.2 x with it).
 * Payloads of 64 KiB and more skip the socket altogether: conn_ring.c
 * sends them through shared memory (shm_ring.h).
 */
#ifndef DML_LOCAL_H
#define DML_LOCAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/listener.h>

/** What a Unix peer's name (dml_conn_peer) starts with. */
#define DML_LOCAL_PEER_PREFIX "unix:"

/**
 * Listen on the Unix name of bound (the TCP listener's own address, port
 * included), accepts going to cb(arg). NULL when the name cannot be taken
 * (logged as a warning: the daemon still serves over TCP).
 */
struct evconnlistener *dml_local_listen(struct event_base *base, const struct sockaddr *bound,
					evconnlistener_cb cb, void *arg);

/**
 * A connected, non-blocking Unix socket to the daemon serving sa (an
 * address resolved for dialing) when sa is an address of this machine and
 * a daemon listens on its name or on the wildcard name of its port; else
 * -1 and the caller dials TCP.
 */
int dml_local_connect(const struct sockaddr *sa);

/**
 * When fd is a Unix socket, write its peer's name for logs to buf
 * ("unix:127.0.0.1:7001" dialing, "unix:pid=1234" accepting) and return 1;
 * 0 for any other socket (buf untouched).
 */
int dml_local_describe(int fd, char *buf, size_t len);

#endif
