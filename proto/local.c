/*
 * The same-host transport (see local.h): abstract Unix socket names derived
 * from TCP addresses, the listener beside a daemon's TCP one, and the dial
 * that prefers it.
 *
 * Must never: make a daemon fail to start or a dial fail for want of the
 * Unix path (TCP is always there behind it), nor reach a daemon other than
 * the one TCP would reach for the same address.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/util.h>

#include "proto/local.h"
#include "proto/log.h"

#define LOCAL_NAME_PREFIX "dml/"

static int is_any_addr(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static int is_loopback_addr(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	return sa->sa_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

static uint16_t addr_port(const struct sockaddr *sa)
{
	return ntohs(sa->sa_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					       : ((const struct sockaddr_in *)sa)->sin_port);
}

static int same_host_addr(const struct sockaddr *a, const struct sockaddr *b)
{
	if (!a || !b || a->sa_family != b->sa_family)
		return 0;
	if (a->sa_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	return a->sa_family == AF_INET6 &&
	       memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
}

/* Is sa an address of this machine (in this network namespace)? */
static int is_this_host(const struct sockaddr *sa)
{
	struct ifaddrs *all, *i;
	int found = 0;

	if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)
		return 0;
	if (is_loopback_addr(sa) || is_any_addr(sa))
		return 1;
	if (getifaddrs(&all) != 0)
		return 0;
	for (i = all; i && !found; i = i->ifa_next)
		found = same_host_addr(i->ifa_addr, sa);
	freeifaddrs(all);
	return found;
}

/*
 * The abstract name standing for sa's address and port, or for its port on
 * every address (wildcard, or sa is itself a wildcard address). *len is
 * the address length to bind or connect with: an abstract name is exactly
 * its bytes, with no terminating NUL.
 */
static void local_name(const struct sockaddr *sa, int wildcard, struct sockaddr_un *sun,
		       socklen_t *len)
{
	char host[INET6_ADDRSTRLEN] = "*";
	const void *bin = sa->sa_family == AF_INET6
				  ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
				  : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
	int n;

	if (!wildcard && !is_any_addr(sa))
		evutil_inet_ntop(sa->sa_family, bin, host, sizeof(host));
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	n = snprintf(sun->sun_path + 1, sizeof(sun->sun_path) - 1,
		     sa->sa_family == AF_INET6 && host[0] != '*' ? LOCAL_NAME_PREFIX "[%s]:%u"
								  : LOCAL_NAME_PREFIX "%s:%u",
		     host, addr_port(sa));
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

struct evconnlistener *dml_local_listen(struct event_base *base, const struct sockaddr *bound,
					evconnlistener_cb cb, void *arg)
{
	struct evconnlistener *lev;
	struct sockaddr_un sun;
	socklen_t len;

	local_name(bound, 0, &sun, &len);
	lev = evconnlistener_new_bind(base, cb, arg, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC,
				      512, (struct sockaddr *)&sun, (int)len);
	if (!lev)
		dml_warn("listen on Unix socket @%s: %s; serving over TCP only", sun.sun_path + 1,
			 strerror(errno));
	return lev;
}

/* A connected socket to the name, or -1 (nothing listens, or its backlog is full). */
static int local_dial(const struct sockaddr_un *sun, socklen_t len)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	/* A Unix connect completes at once or fails at once (EAGAIN when
	 * the backlog is full): never EINPROGRESS. */
	if (connect(fd, (const struct sockaddr *)sun, len) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

int dml_local_connect(const struct sockaddr *sa)
{
	struct sockaddr_un sun;
	socklen_t len;
	int fd;

	if (!is_this_host(sa))
		return -1;
	local_name(sa, 0, &sun, &len);
	fd = local_dial(&sun, len);
	if (fd < 0 && !is_any_addr(sa)) {
		local_name(sa, 1, &sun, &len);
		fd = local_dial(&sun, len);
	}
	return fd;
}

int dml_local_describe(int fd, char *buf, size_t len)
{
	struct sockaddr_un sun;
	socklen_t sl = sizeof(sun);
	struct ucred cred;
	socklen_t cl = sizeof(cred);

	if (getpeername(fd, (struct sockaddr *)&sun, &sl) != 0 || sun.sun_family != AF_UNIX)
		return 0;
	/* The dialing side sees the daemon's name; the accepting side an
	 * unnamed socket, told apart by the process behind it. */
	if (sl > offsetof(struct sockaddr_un, sun_path) + 1 + strlen(LOCAL_NAME_PREFIX))
		snprintf(buf, len, DML_LOCAL_PEER_PREFIX "%.*s",
			 (int)(sl - offsetof(struct sockaddr_un, sun_path) - 1 -
			       strlen(LOCAL_NAME_PREFIX)),
			 sun.sun_path + 1 + strlen(LOCAL_NAME_PREFIX));
	else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0)
		snprintf(buf, len, DML_LOCAL_PEER_PREFIX "pid=%ld", (long)cred.pid);
	else
		snprintf(buf, len, DML_LOCAL_PEER_PREFIX "?");
	return 1;
}
