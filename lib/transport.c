/*
 * transport.c: one keep-alive connection, one request/answer exchange at a
 * time, and the retry rule of hf3fs_meta.h (RETRIES).
 *
 * The socket is non-blocking and every wait is a poll() bounded by the
 * attempt's deadline. While the request is being written the socket is also
 * watched for input: a server may answer (413, 400 ...) and close before it
 * read the whole request, and that answer is worth more than the EPIPE the
 * next write would get. Bytes received go to the byte-fed HTTP reader
 * (http_reader.h); nothing here knows HTTP syntax beyond writing the request.
 *
 * An attempt ends in one of these ways, which decide whether to retry:
 *   - an answer (complete, parsed): done, never retried whatever its status;
 *   - no connection (refused, unreachable, connect timeout, EAI_AGAIN):
 *     retried;
 *   - connection lost while writing, before any answer byte: retried;
 *   - connection lost after the request was written, before any answer byte:
 *     retried if the request is idempotent or allocations may be retried;
 *   - request timeout, or the connection lost in the middle of an answer, or a
 *     malformed answer: not retried.
 * After anything but a complete answer on a connection that may be kept, the
 * connection is closed: a late answer must never be read as the answer to
 * the next request.
 */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum retry_class { RETRY_NEVER, RETRY_ALWAYS, RETRY_IF_SAFE };

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *errno_text(int err, char *buf, size_t len)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
    return strerror_r(err, buf, len);
#else
    if (strerror_r(err, buf, len) != 0)
        snprintf(buf, len, "error %d", err);
    return buf;
#endif
}

void hf3fs_meta__disconnect(hf3fs_meta_client *c)
{
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
}

/* An idle kept-alive connection is dead if it is readable: the server closed
 * it (EOF), reset it, or sent bytes nobody asked for. */
static bool idle_connection_dead(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n;
    do {
        n = poll(&p, 1, 0);
    } while (n < 0 && errno == EINTR);
    return n != 0;
}

static int wait_fd(int fd, short events, int64_t deadline, short *revents)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0)
            return HF3FS_META_ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return HF3FS_META_ECONNECT;
        if (n == 0)
            continue; /* re-check the clock */
        *revents = p.revents;
        return 0;
    }
}

/* Connect to one address within the connect timeout. */
static int connect_one(hf3fs_meta_client *c, const struct addrinfo *ai, int *err)
{
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return HF3FS_META_ECONNECT;
    }
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS && errno != EINTR) {
            *err = errno;
            close(fd);
            return HF3FS_META_ECONNECT;
        }
        short revents = 0;
        rc = wait_fd(fd, POLLOUT, now_ms() + c->connect_timeout_ms, &revents);
        int so_error = 0;
        socklen_t len = sizeof so_error;
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0)
            so_error = errno;
        if (rc == 0 && so_error) {
            *err = so_error;
            rc = HF3FS_META_ECONNECT;
        }
        if (rc) {
            if (rc == HF3FS_META_ETIMEDOUT)
                *err = ETIMEDOUT;
            close(fd);
            return rc;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->fd = fd;
    return 0;
}

static int open_connection(hf3fs_meta_client *c, enum retry_class *retry)
{
    struct addrinfo hints, *list = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG | AI_NUMERICSERV;
    int gai = getaddrinfo(c->host, c->port, &hints, &list);
    if (gai != 0) {
        *retry = gai == EAI_AGAIN ? RETRY_ALWAYS : RETRY_NEVER;
        if (gai == EAI_MEMORY)
            return hf3fs_meta__set_error(c, HF3FS_META_ENOMEM, "resolving %s: out of memory",
                                         c->host);
        return hf3fs_meta__set_error(c, HF3FS_META_ECONNECT, "cannot resolve %s: %s", c->host,
                                     gai_strerror(gai));
    }
    int rc = HF3FS_META_ECONNECT, err = 0;
    for (const struct addrinfo *ai = list; ai; ai = ai->ai_next) {
        rc = connect_one(c, ai, &err);
        if (rc == 0)
            break;
    }
    freeaddrinfo(list);
    if (rc == 0)
        return 0;
    *retry = RETRY_ALWAYS;
    char text[128];
    if (rc == HF3FS_META_ETIMEDOUT)
        return hf3fs_meta__set_error(c, rc, "connect to %s timed out after %d ms", c->host_header,
                                     c->connect_timeout_ms);
    return hf3fs_meta__set_error(c, rc, "cannot connect to %s: %s", c->host_header,
                                 errno_text(err, text, sizeof text));
}

/* Write the request and read the answer on the open connection. */
static int exchange(hf3fs_meta_client *c, const char *method, const char *path,
                    enum retry_class *retry)
{
    const char *req = c->request.data;
    size_t req_len = c->request.len, sent = 0;
    bool write_failed = false;
    int64_t deadline = now_ms() + c->request_timeout_ms;
    char text[128];
    char in[16384];

    *retry = RETRY_NEVER;
    hf3fs_meta__http_reader_init(&c->reader, c->max_answer, strcmp(method, "HEAD") == 0);
    for (;;) {
        bool sending = sent < req_len && !write_failed;
        short revents = 0;
        int rc = wait_fd(c->fd, (short)(POLLIN | (sending ? POLLOUT : 0)), deadline, &revents);
        if (rc == HF3FS_META_ETIMEDOUT)
            return hf3fs_meta__set_error(c, rc, "%s %s: no complete answer within %d ms", method,
                                         path, c->request_timeout_ms);
        if (rc)
            return hf3fs_meta__set_error(c, rc, "%s %s: poll failed", method, path);
        if (sending && (revents & POLLOUT)) {
            ssize_t n = send(c->fd, req + sent, req_len - sent, MSG_NOSIGNAL);
            if (n > 0)
                sent += (size_t)n;
            else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                write_failed = true; /* read whatever answer there is, or the EOF */
        }
        if (!(revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        ssize_t n = recv(c->fd, in, sizeof in, 0);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            continue;
        int result;
        if (n > 0) {
            size_t used = 0;
            result = hf3fs_meta__http_feed(&c->reader, in, (size_t)n, &used);
            if (result == HF3FS_META__HTTP_DONE && used < (size_t)n)
                c->reader.keep_alive = false; /* bytes beyond the answer: do not trust them */
        } else if (n == 0 || c->reader.got_bytes) {
            int err = n < 0 ? errno : 0;
            bool had_bytes = c->reader.got_bytes;
            result = hf3fs_meta__http_eof(&c->reader);
            if (!had_bytes) {
                *retry = sent < req_len ? RETRY_ALWAYS : RETRY_IF_SAFE;
                return hf3fs_meta__set_error(c, HF3FS_META_ECONNECT,
                                             "%s %s: connection closed by %s before an answer%s%s",
                                             method, path, c->host_header, err ? ": " : "",
                                             err ? errno_text(err, text, sizeof text) : "");
            }
            if (result != HF3FS_META__HTTP_DONE)
                return hf3fs_meta__set_error(
                    c, HF3FS_META_ECONNECT,
                    "%s %s: connection lost in the middle of the answer%s%s", method, path,
                    err ? ": " : "", err ? errno_text(err, text, sizeof text) : "");
        } else {
            int err = errno;
            *retry = sent < req_len ? RETRY_ALWAYS : RETRY_IF_SAFE;
            return hf3fs_meta__set_error(
                c, HF3FS_META_ECONNECT, "%s %s: connection to %s lost before an answer: %s", method,
                path, c->host_header, errno_text(err, text, sizeof text));
        }
        if (result == HF3FS_META__HTTP_DONE) {
            if (sent < req_len)
                c->reader.keep_alive = false; /* the server did not read all of it */
            c->last_status = c->reader.status;
            return 0;
        }
        if (result < 0)
            return hf3fs_meta__set_error(c, result, "%s %s: bad answer: %s", method, path,
                                         c->reader.error ? c->reader.error : "?");
    }
}

static void build_request(hf3fs_meta_client *c, const char *method, const char *path,
                          const char *body, size_t len)
{
    hf3fs_meta__buf *r = &c->request;
    hf3fs_meta__buf_reset(r);
    hf3fs_meta__buf_puts(r, method);
    hf3fs_meta__buf_putc(r, ' ');
    hf3fs_meta__buf_puts(r, c->base_path);
    hf3fs_meta__buf_puts(r, path);
    hf3fs_meta__buf_puts(r, " HTTP/1.1\r\nHost: ");
    hf3fs_meta__buf_puts(r, c->host_header);
    hf3fs_meta__buf_puts(r, "\r\nUser-Agent: libhf3fsmeta/" HF3FS_META_VERSION_STRING
                            "\r\nAccept: application/json\r\n");
    const char *auth = c->bearer_auth ? c->bearer_auth : c->basic_auth;
    if (auth) {
        hf3fs_meta__buf_puts(r, "Authorization: ");
        hf3fs_meta__buf_puts(r, auth);
        hf3fs_meta__buf_puts(r, "\r\n");
    }
    if (body)
        hf3fs_meta__buf_puts(r, "Content-Type: application/json\r\n");
    if (body || strcmp(method, "GET") != 0) {
        hf3fs_meta__buf_puts(r, "Content-Length: ");
        hf3fs_meta__buf_put_i64(r, (int64_t)len);
        hf3fs_meta__buf_puts(r, "\r\n");
    }
    hf3fs_meta__buf_puts(r, "\r\n");
    if (body)
        hf3fs_meta__buf_append(r, body, len);
}

static void backoff_sleep(hf3fs_meta_client *c, int attempt)
{
    int cap = c->backoff_ms > HF3FS_META__BACKOFF_CAP_MS ? c->backoff_ms
                                                         : HF3FS_META__BACKOFF_CAP_MS;
    int64_t ms = c->backoff_ms;
    for (int i = 0; i < attempt && ms < cap; i++)
        ms *= 2;
    if (ms > cap)
        ms = cap;
    /* jitter: -25% .. +0%, so that many clients do not come back in step */
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    ms -= (int64_t)(c->rng % (uint64_t)(ms / 4 + 1));
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

int hf3fs_meta__call(hf3fs_meta_client *c, const char *method, const char *path, const char *body,
                     size_t len, hf3fs_meta__retry_rule rule)
{
    build_request(c, method, path, body, len);
    if (hf3fs_meta__buf_error(&c->request))
        return hf3fs_meta__set_error(c, hf3fs_meta__buf_error(&c->request),
                                     "%s %s: cannot build the request: %s", method, path,
                                     hf3fs_meta_strerror(hf3fs_meta__buf_error(&c->request)));
    int attempts = 0;
    for (;;) {
        enum retry_class retry = RETRY_NEVER;
        int rc;
        attempts++;
        if (c->fd >= 0 && idle_connection_dead(c->fd))
            hf3fs_meta__disconnect(c);
        rc = c->fd >= 0 ? 0 : open_connection(c, &retry);
        if (rc == 0) {
            rc = exchange(c, method, path, &retry);
            if (rc == 0) {
                if (!c->reader.keep_alive)
                    hf3fs_meta__disconnect(c);
                c->last_error[0] = '\0'; /* a retry succeeded: forget the lost attempts */
                return 0;
            }
            hf3fs_meta__disconnect(c);
        }
        bool may_retry = retry == RETRY_ALWAYS ||
                         (retry == RETRY_IF_SAFE &&
                          (rule == HF3FS_META__IDEMPOTENT || c->retry_allocate));
        if (!may_retry || attempts > c->max_retries) {
            if (attempts > 1) {
                size_t n = strlen(c->last_error);
                snprintf(c->last_error + n, sizeof c->last_error - n, " (after %d attempts)",
                         attempts);
            }
            return rc;
        }
        backoff_sleep(c, attempts - 1);
    }
}
