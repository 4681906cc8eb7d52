/*
 * What every daemon does to become reachable: listen on host:port (port 0
 * picks a free one) and tell others the bound port through a port file.
 */
#ifndef DML_LISTEN_H
#define DML_LISTEN_H

#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

/**
 * Listen on hostport ("host:port") with accepts going to cb(arg). On
 * success *out is the listener (free with evconnlistener_free) and
 * *bound_port the port actually bound. DML_ECONF for a bad address,
 * DML_EIO when it cannot be resolved or bound (logged with the cause).
 */
int dml_listen_tcp(struct event_base *base, const char *hostport, evconnlistener_cb cb,
		   void *arg, struct evconnlistener **out, uint16_t *bound_port);

/**
 * Write the port and a newline to path through a temporary file renamed
 * into place, so a reader never sees a partial number. 0, DML_EINVAL (path
 * too long) or DML_EIO (logged).
 */
int dml_write_port_file(const char *path, uint16_t port);

#endif
