/*
 * What every daemon does to become reachable: listen on host:port (port 0
 * picks a free one) and tell others the bound port through a port file.
 */
#ifndef DML_LISTEN_H
#define DML_LISTEN_H

#include <stdint.h>

#include <event2/event.h>
#include <event2/listener.h>

/* A listening socket (opaque): libevent's listener plus its back-off. */
struct dml_listener;

/* Accepts pause this long when the process is out of file descriptors. */
#define DML_LISTEN_BACKOFF_MS 250

/**
 * Listen on hostport ("host:port") with accepts going to cb(arg) (cb's
 * listener argument is libevent's, for nothing but identity). On success
 * *out is the listener (free with dml_listener_free) and *bound_port the
 * port actually bound. DML_ECONF for a bad address, DML_EIO when it cannot
 * be resolved or bound (logged with the cause).
 *
 * When accept() fails for want of file descriptors or memory (EMFILE,
 * ENFILE, ENOBUFS, ENOMEM) the listener stops accepting for
 * DML_LISTEN_BACKOFF_MS and then tries again, rather than spinning on a
 * socket that stays readable; accept failures are logged at most once a
 * second, with the count of those not logged.
 */
int dml_listen_tcp(struct event_base *base, const char *hostport, evconnlistener_cb cb,
		   void *arg, struct dml_listener **out, uint16_t *bound_port);

/**
 * Give lev, a listener another owns (evhttp's), the same back-off and
 * logging when accept() fails. Free the guard with dml_listener_free
 * before its owner frees lev.
 */
struct dml_listener *dml_listener_guard(struct event_base *base, struct evconnlistener *lev);

/** Stop listening and free l (NULL is fine); lev only if dml_listen_tcp made it. */
void dml_listener_free(struct dml_listener *l);

/**
 * Write the port and a newline to path through a temporary file renamed
 * into place, so a reader never sees a partial number. 0, DML_EINVAL (path
 * too long) or DML_EIO (logged).
 */
int dml_write_port_file(const char *path, uint16_t port);

/**
 * What a daemon does to start serving: dml_listen_tcp() on hostport, with
 * local the abstract Unix socket of the bound address beside it (local.h;
 * accepts from either go to cb, and a name that cannot be taken is a
 * warning, not an error), the one line that says so ("listening on
 * HOST:PORT, port N [and its Unix socket]" and the daemon's own words from
 * fmt), then the bound port written to port_file unless it is empty. 0, or
 * dml_listen_tcp()'s and dml_write_port_file()'s errors.
 */
int dml_listen_serve(struct event_base *base, const char *hostport, const char *port_file,
		     int local, evconnlistener_cb cb, void *arg, struct dml_listener **out,
		     uint16_t *bound_port, const char *fmt, ...)
	__attribute__((format(printf, 9, 10)));

#endif
