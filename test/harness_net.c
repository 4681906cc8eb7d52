/*
 * harness_net.c - the sockets of the loopback cluster harness (see
 * harness.h): raw connections that send hand-made frames, libdml clients
 * pointed at the harness's servers, the fault-injecting proxy, port files
 * and plain HTTP requests. Never asserts: it reports through return codes.
 */
#define _GNU_SOURCE
#include "test/harness.h"
#include "test/harness_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/util.h"

int dml_test_raw_connect(uint16_t port, int *fd)
{
	struct sockaddr_in sa;
	int s;

	*fd = -1;
	s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return DML_ECONN;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons(port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		fprintf(stderr, "harness: connect 127.0.0.1:%u: %s\n", port,
			strerror(errno));
		close(s);
		return DML_ECONN;
	}
	*fd = s;
	return 0;
}

int dml_test_raw_send(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			return 0;
		if (n <= 0) {
			fprintf(stderr, "harness: send: %s\n", strerror(errno));
			return DML_EIO;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read exactly len bytes (NULL buf: discard them) within the deadline. */
static int raw_read_exact(int fd, uint8_t *buf, size_t len, uint64_t deadline_ns)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	uint8_t scratch[4096];
	size_t want;
	ssize_t n;
	int64_t left;

	while (len > 0) {
		left = harness_ms_left(deadline_ns);
		if (left == 0)
			return DML_ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		want = buf || len < sizeof(scratch) ? len : sizeof(scratch);
		n = recv(fd, buf ? buf : scratch, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return DML_ECONN;
		if (buf)
			buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int dml_test_raw_skip_frame(int fd, int timeout_ms)
{
	uint64_t deadline = harness_deadline_after(timeout_ms);
	uint8_t raw[DML_FRAME_HEADER_LEN];
	struct dml_frame_limits lim;
	struct dml_frame_header hdr;
	int rc;

	dml_frame_limits_default(&lim);
	rc = raw_read_exact(fd, raw, sizeof(raw), deadline);
	if (rc == 0)
		rc = dml_frame_header_decode(raw, &lim, &hdr);
	if (rc == 0)
		rc = raw_read_exact(fd, NULL, (size_t)hdr.meta_len + hdr.payload_len,
				    deadline);
	return rc;
}

int dml_test_raw_wait_closed(int fd, int timeout_ms)
{
	uint64_t deadline = harness_deadline_after(timeout_ms);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char scratch[4096];
	ssize_t n;
	int64_t left;

	for (;;) {
		left = harness_ms_left(deadline);
		if (left == 0)
			return DML_ETIMEDOUT;
		if (poll(&pfd, 1, (int)left) <= 0)
			continue;
		n = recv(fd, scratch, sizeof(scratch), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return 0;
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return 0;
	}
}

int dml_test_client_opts_ports(struct dml_test_env *env, const uint16_t *ports, size_t n,
			       uint32_t worker_id, dml_opts_t **out)
{
	dml_opts_t *o;
	char *list = dml_xstrdup(""), *next;
	char id[16];
	size_t i;
	int rc;

	*out = NULL;
	for (i = 0; i < n; i++) {
		next = harness_str_printf("%s%s127.0.0.1:%u", list, i ? "," : "",
				  (unsigned)ports[i]);
		free(list);
		list = next;
	}
	rc = dml_opts_new(&o);
	if (rc) {
		free(list);
		return rc;
	}
	snprintf(id, sizeof(id), "%u", worker_id);
	rc = dml_opts_set(o, "servers", list);
	if (rc == 0)
		rc = dml_opts_set(o, "secret_file", env->secret);
	if (rc == 0)
		rc = dml_opts_set(o, "cluster", "dml");
	if (rc == 0 && worker_id)
		rc = dml_opts_set(o, "worker_id", id);
	if (rc == 0)
		rc = dml_opts_set(o, "role", worker_id ? "worker" : "control");
	free(list);
	if (rc) {
		fprintf(stderr, "harness: client options: %s\n", dml_strerror(rc));
		dml_opts_free(o);
		return rc;
	}
	*out = o;
	return 0;
}

int dml_test_client_opts(struct dml_test_env *env, struct dml_test_server *const *servers,
			 size_t n, uint32_t worker_id, dml_opts_t **out)
{
	uint16_t *ports = dml_xcalloc(n ? n : 1, sizeof(*ports));
	size_t i;
	int rc;

	for (i = 0; i < n; i++)
		ports[i] = servers[i]->port;
	rc = dml_test_client_opts_ports(env, ports, n, worker_id, out);
	free(ports);
	return rc;
}

int dml_test_client_new(struct dml_test_env *env, struct dml_test_server *const *servers,
			size_t n, uint32_t worker_id, dml_t **out)
{
	dml_opts_t *o;
	int rc;

	*out = NULL;
	rc = dml_test_client_opts(env, servers, n, worker_id, &o);
	if (rc)
		return rc;
	rc = dml_connect(o, out);
	dml_opts_free(o);
	return rc;
}

/* ---- fault-injecting proxy ------------------------------------------------ */

#define PROXY_MAX_PAIRS 64
#define PROXY_CMD_HOLD 'h'
#define PROXY_CMD_CUT 'c'
#define PROXY_CMD_PASS 'p'

/* One relayed connection: a to the client, b to the server. */
struct proxy_pair {
	int a, b;
};

static int write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* A listening socket on 127.0.0.1 with a kernel-chosen port. */
static int listen_loopback(uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    listen(fd, 64) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

/* Close with an RST: unsent data is dropped, the peer sees a reset. */
static void close_reset(int fd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static int relay(int from, int to)
{
	static uint8_t buf[65536];
	ssize_t n = recv(from, buf, sizeof(buf), MSG_DONTWAIT);

	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return 0;
	if (n <= 0)
		return -1;
	return write_all(to, buf, (size_t)n);
}

int dml_test_raw_listen(uint16_t *port)
{
	return listen_loopback(port);
}

static void proxy_accept(int lfd, uint16_t target, struct proxy_pair *pairs,
			 size_t *npairs)
{
	int a = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), b;

	if (a < 0)
		return;
	if (*npairs == PROXY_MAX_PAIRS || dml_test_raw_connect(target, &b) != 0) {
		close_reset(a);
		return;
	}
	pairs[*npairs].a = a;
	pairs[*npairs].b = b;
	(*npairs)++;
}

/* The proxy process: relay until the test closes the control socket. */
static void __attribute__((noreturn)) proxy_main(int ctl, uint16_t target)
{
	static struct proxy_pair pairs[PROXY_MAX_PAIRS];
	static struct pollfd pfd[2 + 2 * PROXY_MAX_PAIRS];
	size_t npairs = 0, i, n;
	uint16_t port;
	uint8_t cmd, count;
	int lfd, hold = 0;

	lfd = listen_loopback(&port);
	if (lfd < 0 || write_all(ctl, &port, sizeof(port)) != 0)
		_exit(1);
	for (;;) {
		n = 0;
		pfd[n++] = (struct pollfd){ .fd = ctl, .events = POLLIN };
		pfd[n++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (i = 0; i < npairs; i++) {
			pfd[n++] = (struct pollfd){ .fd = pairs[i].a, .events = POLLIN };
			pfd[n++] = (struct pollfd){ .fd = pairs[i].b,
						    .events = hold ? 0 : POLLIN };
		}
		if (poll(pfd, n, -1) < 0)
			continue;
		if (pfd[0].revents) {
			if (read_full(ctl, &cmd, 1) != 0)
				_exit(0);
			count = (uint8_t)npairs;
			if (cmd == PROXY_CMD_CUT) {
				for (i = 0; i < npairs; i++) {
					close_reset(pairs[i].a);
					close_reset(pairs[i].b);
				}
				npairs = 0;
				hold = 0;
			} else {
				hold = cmd == PROXY_CMD_HOLD;
			}
			if (write_all(ctl, &count, 1) != 0)
				_exit(0);
			continue;
		}
		/* Only the pairs this poll saw; downwards, so that removing pair i
		 * leaves the ones still to visit in place. */
		for (i = (n - 2) / 2; i-- > 0;) {
			int ok = 0;

			if (pfd[2 + 2 * i].revents)
				ok |= relay(pairs[i].a, pairs[i].b);
			if (ok == 0 && pfd[3 + 2 * i].revents)
				ok |= relay(pairs[i].b, pairs[i].a);
			if (ok != 0) {
				close(pairs[i].a);
				close(pairs[i].b);
				pairs[i] = pairs[--npairs];
			}
		}
		if (pfd[1].revents)
			proxy_accept(lfd, target, pairs, &npairs);
	}
}

int dml_test_proxy_start(struct dml_test_env *env, uint16_t target_port,
			 struct dml_test_proxy **out)
{
	struct dml_test_proxy *p;
	int sv[2], rc;
	pid_t pid;

	*out = NULL;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return DML_EIO;
	rc = dml_test_fork(env, &pid);
	if (rc) {
		close(sv[0]);
		close(sv[1]);
		return rc;
	}
	if (pid == 0) {
		close(sv[0]);
		proxy_main(sv[1], target_port);
	}
	close(sv[1]);
	p = dml_xcalloc(1, sizeof(*p));
	p->pid = pid;
	p->ctl = sv[0];
	p->next = env->proxies;
	env->proxies = p;
	if (read_full(p->ctl, &p->port, sizeof(p->port)) != 0) {
		fprintf(stderr, "harness: proxy did not start\n");
		return DML_EIO;
	}
	*out = p;
	return 0;
}

uint16_t dml_test_proxy_port(const struct dml_test_proxy *p)
{
	return p->port;
}

static int proxy_command(struct dml_test_proxy *p, uint8_t cmd, int *count)
{
	uint8_t n;

	if (write_all(p->ctl, &cmd, 1) != 0 || read_full(p->ctl, &n, 1) != 0) {
		fprintf(stderr, "harness: proxy on port %u is gone\n", p->port);
		return DML_EIO;
	}
	if (count)
		*count = n;
	return 0;
}

int dml_test_proxy_hold(struct dml_test_proxy *p)
{
	return proxy_command(p, PROXY_CMD_HOLD, NULL);
}

int dml_test_proxy_pass(struct dml_test_proxy *p)
{
	return proxy_command(p, PROXY_CMD_PASS, NULL);
}

int dml_test_proxy_cut(struct dml_test_proxy *p, int *count)
{
	return proxy_command(p, PROXY_CMD_CUT, count);
}

/* ---- port files and HTTP ------------------------------------------------ */

int dml_test_port_file_read(const char *path, uint16_t *port)
{
	return harness_read_port(path, port) == 0 ? 0 : DML_EIO;
}

/* Read until EOF or the deadline into a growing NUL-terminated buffer. */
static int read_to_eof(int fd, uint64_t deadline_ns, char **out, size_t *outlen)
{
	size_t cap = 4096, len = 0;
	char *buf = dml_xmalloc(cap);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };

	for (;;) {
		int64_t left = harness_ms_left(deadline_ns);
		ssize_t n;

		if (left == 0) {
			free(buf);
			return DML_ETIMEDOUT;
		}
		if (poll(&pfd, 1, (int)(left < 100 ? left : 100)) <= 0)
			continue;
		if (len + 1 >= cap)
			buf = dml_xrealloc(buf, cap *= 2);
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != ECONNRESET) {
			free(buf);
			return DML_ECONN;
		}
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

int dml_test_http_request(uint16_t port, const char *method, const char *path,
			  int timeout_ms, int *status, char **body)
{
	uint64_t deadline = harness_deadline_after(timeout_ms);
	char *req = harness_str_printf("%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
	char *reply = NULL, *sep;
	size_t len;
	int fd, minor, rc;

	rc = dml_test_raw_connect(port, &fd);
	if (rc == 0) {
		rc = write_all(fd, req, strlen(req)) == 0 ? 0 : DML_ECONN;
		if (rc == 0)
			rc = read_to_eof(fd, deadline, &reply, &len);
		close(fd);
	}
	free(req);
	if (rc)
		return rc;
	sep = strstr(reply, "\r\n\r\n");
	if (!sep || sscanf(reply, "HTTP/1.%d %d ", &minor, status) != 2) {
		fprintf(stderr, "harness: not an HTTP reply: %.200s\n", reply);
		free(reply);
		return DML_EINVAL;
	}
	if (body)
		*body = dml_xstrdup(sep + 4);
	free(reply);
	return 0;
}

int dml_test_metric(uint16_t port, const char *name, int timeout_ms, double *value)
{
	char *body = NULL, *p, needle[128];
	int status = 0, rc = dml_test_http_request(port, "GET", "/metrics", timeout_ms, &status,
						   &body);

	if (rc == 0 && status != 200)
		rc = DML_EIO;
	if (rc == 0) {
		snprintf(needle, sizeof(needle), "\n%s ", name);
		if ((p = strstr(body, needle)) != NULL)
			*value = strtod(p + strlen(needle), NULL);
		else
			rc = DML_ENOTFOUND;
	}
	free(body);
	return rc;
}
