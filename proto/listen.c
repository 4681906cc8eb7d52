/*
 * Listening sockets and port files (see listen.h). Must never leave a
 * half-written port file behind: readers take its appearance as "ready";
 * never spin on accept() while the process is out of file descriptors, nor
 * log more than a line a second about it.
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/util.h>

#include "proto/dml_error.h"
#include "proto/listen.h"
#include "proto/local.h"
#include "proto/log.h"
#include "proto/util.h"

struct dml_listener {
	struct evconnlistener *lev;
	struct evconnlistener *local; /* the Unix socket beside it (local.h), or NULL */
	int owns_lev;              /* 0: another's (evhttp's), not freed here */
	struct dml_listener *next; /* every listener, for error_cb to find */
	struct event *resume;      /* re-enables accepting after a back-off */
	evconnlistener_cb cb;
	void *arg;
	uint64_t logged_ns;        /* last accept failure logged */
	uint64_t unlogged;         /* failures since, not logged */
};

/*
 * libevent hands the error callback the accept callback's argument, which
 * for a listener evhttp took over is evhttp's: error_cb finds its
 * dml_listener by the libevent listener instead. The daemons make and free
 * listeners on their loop's thread only.
 */
static struct dml_listener *listeners;

static void listeners_add(struct dml_listener *l)
{
	l->next = listeners;
	listeners = l;
}

static void listeners_remove(struct dml_listener *l)
{
	for (struct dml_listener **pp = &listeners; *pp; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			return;
		}
}

static struct dml_listener *listener_of(struct evconnlistener *lev)
{
	struct dml_listener *l = listeners;

	while (l && l->lev != lev && l->local != lev)
		l = l->next;
	return l;
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	struct dml_listener *l = arg;

	l->cb(lev, fd, sa, salen, l->arg);
}

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct dml_listener *l = arg;

	evconnlistener_enable(l->lev);
	if (l->local)
		evconnlistener_enable(l->local);
}

/*
 * accept() failed with something other than "try again". Out of
 * descriptors, the pending connection stays queued and the socket stays
 * readable: accepting again at once would spin, so pause instead.
 */
static void error_cb(struct evconnlistener *lev, void *arg)
{
	struct dml_listener *l = listener_of(lev);
	int err = EVUTIL_SOCKET_ERROR();
	int starved = err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
	uint64_t now = dml_now_ns();

	(void)arg;
	if (!l)
		return;
	if (starved) {
		struct timeval tv = { 0, DML_LISTEN_BACKOFF_MS * 1000 };

		evconnlistener_disable(lev);
		evtimer_add(l->resume, &tv);
	}
	if (l->logged_ns && now - l->logged_ns < 1000000000ull) {
		l->unlogged++;
		return;
	}
	if (starved)
		dml_warn("accept: %s; not accepting for %d ms (%llu more failures since the "
			 "last such line)", strerror(err), DML_LISTEN_BACKOFF_MS,
			 (unsigned long long)l->unlogged);
	else
		dml_warn("accept: %s (%llu more failures since the last such line)",
			 strerror(err), (unsigned long long)l->unlogged);
	l->logged_ns = now;
	l->unlogged = 0;
}

void dml_listener_free(struct dml_listener *l)
{
	if (!l)
		return;
	listeners_remove(l);
	if (l->local)
		evconnlistener_free(l->local);
	if (l->owns_lev)
		evconnlistener_free(l->lev);
	event_free(l->resume);
	free(l);
}

struct dml_listener *dml_listener_guard(struct event_base *base, struct evconnlistener *lev)
{
	struct dml_listener *l = dml_xcalloc(1, sizeof(*l));

	l->lev = lev;
	l->resume = evtimer_new(base, resume_cb, l);
	listeners_add(l);
	evconnlistener_set_error_cb(lev, error_cb);
	return l;
}

int dml_listen_tcp(struct event_base *base, const char *hostport, evconnlistener_cb cb,
		   void *arg, struct dml_listener **out, uint16_t *bound_port)
{
	struct dml_listener *l;
	struct evutil_addrinfo hints = { 0 }, *res = NULL;
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);
	char host[256], portstr[8];
	uint16_t port;

	if (dml_parse_hostport(hostport, host, sizeof(host), &port, 1) != 0)
		return DML_ECONF;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(portstr, sizeof(portstr), "%u", port);
	if (evutil_getaddrinfo(host, portstr, &hints, &res) != 0 || !res) {
		dml_err("listen %s: cannot resolve %s", hostport, host);
		return DML_EIO;
	}
	l = dml_xcalloc(1, sizeof(*l));
	l->cb = cb;
	l->arg = arg;
	l->owns_lev = 1;
	l->lev = evconnlistener_new_bind(base, accept_cb, l,
					 LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
					 LEV_OPT_CLOSE_ON_EXEC, 512, res->ai_addr,
					 (int)res->ai_addrlen);
	evutil_freeaddrinfo(res);
	if (!l->lev) {
		dml_err("listen %s: %s", hostport, strerror(errno));
		free(l);
		return DML_EIO;
	}
	l->resume = evtimer_new(base, resume_cb, l);
	listeners_add(l);
	evconnlistener_set_error_cb(l->lev, error_cb);
	*out = l;
	*bound_port = port;
	if (getsockname(evconnlistener_get_fd(l->lev), (struct sockaddr *)&sa, &sl) == 0)
		*bound_port = ntohs(sa.ss_family == AF_INET6
					    ? ((struct sockaddr_in6 *)&sa)->sin6_port
					    : ((struct sockaddr_in *)&sa)->sin_port);
	return 0;
}

int dml_write_port_file(const char *path, uint16_t port)
{
	char tmp[4096], text[16];
	int fd, n, ok;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return DML_EINVAL;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		dml_err("port_file %s: %s", tmp, strerror(errno));
		return DML_EIO;
	}
	n = snprintf(text, sizeof(text), "%u\n", port);
	ok = write(fd, text, (size_t)n) == n;
	ok = close(fd) == 0 && ok;
	if (!ok || rename(tmp, path) != 0) {
		dml_err("port_file %s: %s", path, strerror(errno));
		unlink(tmp);
		return DML_EIO;
	}
	return 0;
}

/* Listen on the Unix name of l's address too; *said is what the log line adds. */
static void listen_local(struct event_base *base, struct dml_listener *l, char *said,
			 size_t len)
{
	struct sockaddr_storage sa;
	socklen_t sl = sizeof(sa);

	if (getsockname(evconnlistener_get_fd(l->lev), (struct sockaddr *)&sa, &sl) != 0)
		return;
	l->local = dml_local_listen(base, (struct sockaddr *)&sa, accept_cb, l);
	if (!l->local)
		return;
	evconnlistener_set_error_cb(l->local, error_cb);
	snprintf(said, len, " and its Unix socket");
}

int dml_listen_serve(struct event_base *base, const char *hostport, const char *port_file,
		     int local, evconnlistener_cb cb, void *arg, struct dml_listener **out,
		     uint16_t *bound_port, const char *fmt, ...)
{
	char more[256], unix_too[32] = "";
	va_list ap;
	int rc = dml_listen_tcp(base, hostport, cb, arg, out, bound_port);

	if (rc)
		return rc;
	if (local)
		listen_local(base, *out, unix_too, sizeof(unix_too));
	va_start(ap, fmt);
	vsnprintf(more, sizeof(more), fmt, ap);
	va_end(ap);
	dml_info("listening on %s, port %u%s%s", hostport, *bound_port, unix_too, more);
	if (port_file[0])
		return dml_write_port_file(port_file, *bound_port);
	return 0;
}
