/*
 * Listening sockets and port files (see listen.h). Must never leave a
 * half-written port file behind: readers take its appearance as "ready".
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/util.h>

#include "dml_error.h"
#include "listen.h"
#include "log.h"
#include "util.h"

int dml_listen_tcp(struct event_base *base, const char *hostport, evconnlistener_cb cb,
		   void *arg, struct evconnlistener **out, uint16_t *bound_port)
{
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
	*out = evconnlistener_new_bind(base, cb, arg,
				       LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
				       LEV_OPT_CLOSE_ON_EXEC, 512, res->ai_addr,
				       (int)res->ai_addrlen);
	evutil_freeaddrinfo(res);
	if (!*out) {
		dml_err("listen %s: %s", hostport, strerror(errno));
		return DML_EIO;
	}
	*bound_port = port;
	if (getsockname(evconnlistener_get_fd(*out), (struct sockaddr *)&sa, &sl) == 0)
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
