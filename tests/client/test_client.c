/*
 * test_client.c: tests of libhf3fsmeta, in three parts.
 *
 *   unit   the byte-fed HTTP reader, the JSON reader and writer, URL and
 *          argument checks (internal headers of lib/, linked statically);
 *   fake   the transport against scripted servers run in a thread of this
 *          program: auth headers, chunked and one-byte-at-a-time answers,
 *          keep-alive, retries and their limits, timeouts, early answers;
 *   live   every call of both dialects against a real hf3fs-metad, whose URL
 *          is given with --url (these are skipped without it).
 *
 * usage: test_client [--url URL] [--idle] [NAME-SUBSTRING...]
 *   --idle  run only the test that needs a server started with
 *           --idle-timeout 1 (it waits for the server to close the idle
 *           connection).
 * Prints "PASS name" / "FAIL name: why" per test and "N passed, N failed";
 * exits 0 only if all passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "hf3fs_meta.h"
#include "http_reader.h"
#include "json.h"

/* ======================================================================= */
/* The little framework                                                     */

static int n_passed, n_failed;
static char failure[2048];
static const char *live_url;

/* The first failure of a test is kept, and the test goes to its clean-up
 * (every test ends with a `done:` label). CHECK, CHECK_EQ: tests/unit/checks.h. */
#define FAIL_AT(...)                                                                               \
    do {                                                                                           \
        if (!failure[0]) {                                                                         \
            int at_ = snprintf(failure, sizeof failure, "line %d: ", __LINE__);                    \
            snprintf(failure + at_, sizeof failure - (size_t)at_, __VA_ARGS__);                    \
        }                                                                                          \
        goto done;                                                                                 \
    } while (0)

#define TEST_FAIL(...) FAIL_AT(__VA_ARGS__)
#include "../unit/checks.h"

/* rc of a library call on client c (may be NULL) must equal want. */
#define CHECK_RC(c, expr, want)                                                                    \
    do {                                                                                           \
        int rc_ = (expr), want_ = (want);                                                          \
        if (rc_ != want_)                                                                          \
            FAIL_AT("%s returned %d (%s), expected %d (%s); last error: %s", #expr, rc_,           \
                    hf3fs_meta_strerror(rc_), want_, hf3fs_meta_strerror(want_),                   \
                    (c) ? hf3fs_meta_last_error(c) : "-");                                         \
    } while (0)

#define CHECK_STR(got, want)                                                                       \
    do {                                                                                           \
        const char *g_ = (got), *w_ = (want);                                                      \
        if (!g_ || strcmp(g_, w_) != 0)                                                            \
            FAIL_AT("%s is \"%s\", expected \"%s\"", #got, g_ ? g_ : "(null)", w_);                \
    } while (0)

enum kind { UNIT, FAKE, LIVE, IDLE };

typedef struct test {
    const char *name;
    void (*fn)(void);
    enum kind kind;
} test;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ======================================================================= */
/* A scripted fake server                                                   */

enum fake_action {
    ANSWER,          /* read a request, write the answer, keep the connection */
    ANSWER_CLOSE,    /* read a request, write the answer, close */
    ANSWER_BYTEWISE, /* read a request, write the answer a byte at a time */
    ANSWER_EARLY,    /* read only the request head, answer, close (lingering) */
    DROP,            /* read a request, close without an answer */
    SILENT,          /* read a request, never answer (until the test ends) */
};

typedef struct fake_step {
    enum fake_action action;
    const char *answer;
} fake_step;

#define FAKE_MAX_REQUESTS 16

typedef struct fake_server {
    int listen_fd;
    int port;
    pthread_t thread;
    const fake_step *steps;
    int n_steps;
    atomic_int n_requests;
    atomic_int n_connections;
    atomic_bool stop;
    char heads[FAKE_MAX_REQUESTS][4096]; /* request heads, as received */
    size_t body_len[FAKE_MAX_REQUESTS];
} fake_server;

static bool wait_readable(fake_server *s, int fd, int ms)
{
    double end = now_s() + ms / 1000.0;
    while (!atomic_load(&s->stop) && now_s() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) > 0)
            return true;
    }
    return false;
}

/* Read one request head (and its body unless head_only); false on EOF. */
static bool read_request(fake_server *s, int fd, bool head_only)
{
    char head[4096];
    size_t len = 0;
    int slot = atomic_load(&s->n_requests);
    while (len < sizeof head - 1) {
        if (!wait_readable(s, fd, 5000))
            return false;
        ssize_t n = recv(fd, head + len, 1, 0); /* byte by byte: never read past the head */
        if (n <= 0)
            return false;
        len++;
        if (len >= 4 && memcmp(head + len - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    head[len] = '\0';
    size_t body = 0;
    const char *cl = strcasestr(head, "\r\nContent-Length:");
    if (cl)
        body = (size_t)strtoul(cl + 17, NULL, 10);
    if (slot < FAKE_MAX_REQUESTS) {
        memcpy(s->heads[slot], head, len + 1);
        s->body_len[slot] = body;
    }
    atomic_fetch_add(&s->n_requests, 1);
    if (head_only)
        return true;
    char buf[65536];
    while (body > 0) {
        if (!wait_readable(s, fd, 5000))
            return false;
        ssize_t n = recv(fd, buf, body < sizeof buf ? body : sizeof buf, 0);
        if (n <= 0)
            return false;
        body -= (size_t)n;
    }
    return true;
}

static void write_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0)
            return;
        p += n;
        len -= (size_t)n;
    }
}

static void *fake_main(void *arg)
{
    fake_server *s = arg;
    int step = 0;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->listen_fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(s->listen_fd, NULL, NULL);
        if (fd < 0)
            continue;
        atomic_fetch_add(&s->n_connections, 1);
        bool open = true;
        while (open && step < s->n_steps && !atomic_load(&s->stop)) {
            const fake_step *st = &s->steps[step];
            if (!read_request(s, fd, st->action == ANSWER_EARLY)) {
                open = false;
                break;
            }
            step++;
            switch (st->action) {
            case ANSWER: write_all(fd, st->answer, strlen(st->answer)); break;
            case ANSWER_CLOSE:
                write_all(fd, st->answer, strlen(st->answer));
                open = false;
                break;
            case ANSWER_BYTEWISE:
                for (const char *c = st->answer; *c; c++) {
                    write_all(fd, c, 1);
                    sleep_ms(1);
                }
                break;
            case ANSWER_EARLY: {
                write_all(fd, st->answer, strlen(st->answer));
                shutdown(fd, SHUT_WR);
                char sink[65536];
                while (wait_readable(s, fd, 2000) && recv(fd, sink, sizeof sink, 0) > 0) {}
                open = false;
                break;
            }
            case DROP: open = false; break;
            case SILENT:
                while (!atomic_load(&s->stop))
                    sleep_ms(10);
                open = false;
                break;
            }
        }
        /* Past the script: hold the connection until the client closes it. */
        while (open && !atomic_load(&s->stop)) {
            char sink[4096];
            if (wait_readable(s, fd, 50)) {
                if (recv(fd, sink, sizeof sink, 0) <= 0)
                    break;
            }
        }
        close(fd);
    }
    return NULL;
}

static int listen_local(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static fake_server *fake_start(const fake_step *steps, int n_steps)
{
    fake_server *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->steps = steps;
    s->n_steps = n_steps;
    s->listen_fd = listen_local(&s->port);
    if (s->listen_fd < 0 || pthread_create(&s->thread, NULL, fake_main, s) != 0) {
        if (s->listen_fd >= 0)
            close(s->listen_fd);
        free(s);
        return NULL;
    }
    return s;
}

static void fake_stop(fake_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->listen_fd);
    free(s);
}

static void fake_url(const fake_server *s, const char *userinfo, char *out, size_t len)
{
    snprintf(out, len, "http://%s%s127.0.0.1:%d", userinfo ? userinfo : "", userinfo ? "@" : "",
             s->port);
}

/* A client of the fake server with quick retries. */
static hf3fs_meta_client *fake_client(const fake_server *s, const char *userinfo)
{
    char url[256];
    hf3fs_meta_client *c = NULL;
    fake_url(s, userinfo, url, sizeof url);
    if (hf3fs_meta_open(url, &c) != 0)
        return NULL;
    hf3fs_meta_set_retries(c, 3, 1);
    hf3fs_meta_set_timeouts(c, 2000, 5000);
    return c;
}

/* A port nobody listens on (bound to port 0, then closed). */
static int dead_port(void)
{
    int port = 0;
    int fd = listen_local(&port);
    if (fd >= 0)
        close(fd);
    return port;
}

#define HEALTH_OK                                                                                  \
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "                        \
    "15\r\n\r\n{\"status\":\"ok\"}"
#define STEPS(...)                                                                                 \
    ((const fake_step[]){__VA_ARGS__}),                                                            \
        (int)(sizeof((const fake_step[]){__VA_ARGS__}) / sizeof(fake_step))

/* ======================================================================= */
/* Unit: the HTTP reader                                                    */

/* Feed text to a fresh reader in pieces of `step` bytes; the final result. */
static int feed_in_steps(hf3fs_meta__http_reader *r, const char *text, size_t len, size_t step,
                         size_t max_body)
{
    memset(r, 0, sizeof *r);
    hf3fs_meta__http_reader_init(r, max_body, false);
    int rc = HF3FS_META__HTTP_MORE;
    for (size_t i = 0; i < len && rc == HF3FS_META__HTTP_MORE; i += step) {
        size_t n = len - i < step ? len - i : step, used = 0;
        rc = hf3fs_meta__http_feed(r, text + i, n, &used);
    }
    return rc;
}

static void test_http_reader_content_length_answer_fed_byte_by_byte(void)
{
    const char *a = "HTTP/1.1 200 OK\r\ncontent-LENGTH: 5\r\nX-Other: y\r\n\r\nhello";
    hf3fs_meta__http_reader r;
    for (size_t step = 1; step <= strlen(a); step++) {
        int rc = feed_in_steps(&r, a, strlen(a), step, 1024);
        if (rc != HF3FS_META__HTTP_DONE || r.status != 200 || r.body.len != 5 ||
            memcmp(r.body.data, "hello", 5) != 0 || !r.keep_alive) {
            hf3fs_meta__http_reader_free(&r);
            FAIL_AT("step %zu: rc %d status %d body %zu", step, rc, r.status, r.body.len);
        }
        hf3fs_meta__http_reader_free(&r);
    }
done:;
}

static void test_http_reader_decodes_chunked_answer_with_extensions_and_trailers(void)
{
    const char *a = "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"
                    "4;ext=1\r\n{\"a\"\r\n"
                    "A\r\n:[1,2,3,4]\r\n"
                    "1\r\n}\r\n"
                    "0\r\nX-Trailer: z\r\n\r\n";
    hf3fs_meta__http_reader r;
    for (size_t step = 1; step <= 7; step++) {
        int rc = feed_in_steps(&r, a, strlen(a), step, 1024);
        bool ok = rc == HF3FS_META__HTTP_DONE && r.body.len == 15 &&
                  memcmp(r.body.data, "{\"a\":[1,2,3,4]}", 15) == 0;
        hf3fs_meta__http_reader_free(&r);
        if (!ok)
            FAIL_AT("step %zu: rc %d", step, rc);
    }
done:;
}

static void test_http_reader_204_has_no_body_even_without_length(void)
{
    const char *a = "HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n";
    hf3fs_meta__http_reader r;
    int rc = feed_in_steps(&r, a, strlen(a), 1, 1024);
    bool ok = rc == HF3FS_META__HTTP_DONE && r.status == 204 && r.body.len == 0 && r.keep_alive;
    hf3fs_meta__http_reader_free(&r);
    CHECK(ok);
done:;
}

static void test_http_reader_skips_interim_100_continue(void)
{
    const char *a =
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
    hf3fs_meta__http_reader r;
    int rc = feed_in_steps(&r, a, strlen(a), 3, 1024);
    bool ok = rc == HF3FS_META__HTTP_DONE && r.status == 201 && r.body.len == 2;
    hf3fs_meta__http_reader_free(&r);
    CHECK(ok);
done:;
}

static void test_http_reader_body_until_close_completes_at_eof(void)
{
    const char *a = "HTTP/1.1 200 OK\r\n\r\n{\"x\":1}";
    hf3fs_meta__http_reader r;
    int rc = feed_in_steps(&r, a, strlen(a), 4, 1024);
    int eof = rc == HF3FS_META__HTTP_MORE ? hf3fs_meta__http_eof(&r) : rc;
    bool ok = eof == HF3FS_META__HTTP_DONE && r.body.len == 7 && !r.keep_alive;
    hf3fs_meta__http_reader_free(&r);
    CHECK(ok);
done:;
}

static void test_http_reader_keep_alive_rules_of_1_0_and_close(void)
{
    struct {
        const char *answer;
        bool keep;
    } cases[] = {
        {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", true},
        {"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 0\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", false},
        {"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hf3fs_meta__http_reader r;
        int rc = feed_in_steps(&r, cases[i].answer, strlen(cases[i].answer), 100, 1024);
        bool keep = r.keep_alive;
        hf3fs_meta__http_reader_free(&r);
        if (rc != HF3FS_META__HTTP_DONE || keep != cases[i].keep)
            FAIL_AT("case %zu: rc %d keep_alive %d", i, rc, keep);
    }
done:;
}

static void test_http_reader_refuses_malformed_answers(void)
{
    const char *bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 2x0 OK\r\n\r\n",
        "garbage\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nBad Header: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
        "HTTP/1.1 101 Switching Protocols\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hf3fs_meta__http_reader r;
        int rc = feed_in_steps(&r, bad[i], strlen(bad[i]), 1, 1024);
        hf3fs_meta__http_reader_free(&r);
        if (rc != HF3FS_META_EPROTO)
            FAIL_AT("case %zu (%.40s): rc %d, expected EPROTO", i, bad[i], rc);
    }
done:;
}

static void test_http_reader_enforces_line_head_and_body_limits(void)
{
    hf3fs_meta__http_reader r;
    char *big = malloc(HF3FS_META__HTTP_MAX_HEAD + 200);
    int rc;
    CHECK(big);
    /* one header line over the line limit */
    int n = snprintf(big, 100, "HTTP/1.1 200 OK\r\nX: ");
    memset(big + n, 'a', HF3FS_META__HTTP_MAX_LINE + 10);
    strcpy(big + n + HF3FS_META__HTTP_MAX_LINE + 10, "\r\n\r\n");
    rc = feed_in_steps(&r, big, strlen(big), 4096, 1024);
    hf3fs_meta__http_reader_free(&r);
    if (rc != HF3FS_META_EPROTO) {
        free(big);
        FAIL_AT("long line: rc %d", rc);
    }
    /* many short headers over the head limit */
    size_t len = (size_t)snprintf(big, 100, "HTTP/1.1 200 OK\r\n");
    while (len < HF3FS_META__HTTP_MAX_HEAD + 50)
        len += (size_t)snprintf(big + len, 20, "X-Y: 0123456789\r\n");
    rc = feed_in_steps(&r, big, len, 4096, 1024);
    hf3fs_meta__http_reader_free(&r);
    free(big);
    if (rc != HF3FS_META_EPROTO)
        FAIL_AT("big head: rc %d", rc);
    /* a declared body over the limit, and a chunked one */
    const char *a = "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n";
    rc = feed_in_steps(&r, a, strlen(a), 100, 1024);
    hf3fs_meta__http_reader_free(&r);
    CHECK_RC(NULL, rc, HF3FS_META_ETOOBIG);
    a = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n300\r\n";
    rc = feed_in_steps(&r, a, strlen(a), 100, 512);
    hf3fs_meta__http_reader_free(&r);
    CHECK_RC(NULL, rc, HF3FS_META_ETOOBIG);
    /* the connection ending in the middle is an error, not an answer */
    a = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    rc = feed_in_steps(&r, a, strlen(a), 100, 1024);
    if (rc == HF3FS_META__HTTP_MORE)
        rc = hf3fs_meta__http_eof(&r);
    hf3fs_meta__http_reader_free(&r);
    CHECK_RC(NULL, rc, HF3FS_META_EPROTO);
done:;
}

static void test_http_reader_stops_at_the_end_of_the_answer(void)
{
    const char *a = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n";
    hf3fs_meta__http_reader r;
    memset(&r, 0, sizeof r);
    hf3fs_meta__http_reader_init(&r, 1024, false);
    size_t used = 0;
    int rc = hf3fs_meta__http_feed(&r, a, strlen(a), &used);
    hf3fs_meta__http_reader_free(&r);
    CHECK_RC(NULL, rc, HF3FS_META__HTTP_DONE);
    CHECK_EQ(used, strlen("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"));
done:;
}

/* ======================================================================= */
/* Unit: JSON                                                               */

static int parse(hf3fs_meta__json_doc *doc, const char *text)
{
    return hf3fs_meta__json_parse(doc, text, strlen(text), HF3FS_META__JSON_DEFAULT_DEPTH);
}

static void test_json_reader_navigates_objects_arrays_and_scalars(void)
{
    hf3fs_meta__json_doc d;
    const char *text = " {\"a\": [1, -2, null, true, false, \"x\\u00e9\\ud83d\\ude00\"],"
                       " \"b\": {\"c\": [[], {}]}, \"n\": 9223372036854775807,"
                       " \"m\": -9223372036854775808, \"big\": 9223372036854775808, \"f\": 1.5e3} ";
    int rc = parse(&d, text);
    int64_t v = 0;
    size_t len = 0;
    if (rc)
        FAIL_AT("parse: %d %s at %zu", rc, d.error, d.error_offset);
    uint32_t a = hf3fs_meta__json_get(&d, 0, "a");
    CHECK(a != HF3FS_META__JSON_NONE && d.nodes[a].type == HF3FS_META__JSON_ARRAY);
    CHECK_EQ(d.nodes[a].count, 6);
    uint32_t e = hf3fs_meta__json_first(&d, a);
    CHECK(hf3fs_meta__json_int(&d, e, &v) == 0 && v == 1);
    e = hf3fs_meta__json_next(&d, a, e);
    CHECK(hf3fs_meta__json_int(&d, e, &v) == 0 && v == -2);
    e = hf3fs_meta__json_next(&d, a, e);
    CHECK(d.nodes[e].type == HF3FS_META__JSON_NULL);
    e = hf3fs_meta__json_next(&d, a, hf3fs_meta__json_next(&d, a, hf3fs_meta__json_next(&d, a, e)));
    const char *s = hf3fs_meta__json_string(&d, e, &len);
    CHECK(s && len == 7 && memcmp(s, "x\xc3\xa9\xf0\x9f\x98\x80", 7) == 0);
    CHECK(hf3fs_meta__json_next(&d, a, e) == HF3FS_META__JSON_NONE);
    uint32_t b = hf3fs_meta__json_get(&d, 0, "b");
    uint32_t cc = hf3fs_meta__json_get(&d, b, "c");
    CHECK(cc != HF3FS_META__JSON_NONE && d.nodes[cc].count == 2);
    CHECK(hf3fs_meta__json_int(&d, hf3fs_meta__json_get(&d, 0, "n"), &v) == 0 && v == INT64_MAX);
    CHECK(hf3fs_meta__json_int(&d, hf3fs_meta__json_get(&d, 0, "m"), &v) == 0 && v == INT64_MIN);
    CHECK(hf3fs_meta__json_int(&d, hf3fs_meta__json_get(&d, 0, "big"), &v) != 0);
    CHECK(hf3fs_meta__json_int(&d, hf3fs_meta__json_get(&d, 0, "f"), &v) != 0);
    CHECK(hf3fs_meta__json_get(&d, 0, "missing") == HF3FS_META__JSON_NONE);
done:
    hf3fs_meta__json_free(&d);
}

static void test_json_reader_is_strict(void)
{
    const char *bad[] = {
        "",
        " ",
        "[1,]",
        "{\"a\":1,}",
        "01",
        "[01]",
        "1.",
        ".5",
        "-",
        "NaN",
        "[1 2]",
        "{\"a\" 1}",
        "{1:2}",
        "\"\\x\"",
        "\"a\x01\"",
        "\"\xff\"",
        "\"\xc0\xaf\"",
        "\"\xed\xa0\x80\"",
        "\"\\ud800\"",
        "\"\\udc00\"",
        "\"\\ud800\\u0041\"",
        "[1] x",
        "tru",
        "[",
        "{",
        "]",
        "{\"a\":}",
        "[1,,2]",
        "\"abc",
        "{\"a\":1}}",
        "// c\n1",
        "1e",
        "+1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hf3fs_meta__json_doc d;
        int rc = parse(&d, bad[i]);
        hf3fs_meta__json_free(&d);
        if (rc != HF3FS_META_EPROTO)
            FAIL_AT("case %zu (%s) parsed (rc %d)", i, bad[i], rc);
    }
done:;
}

static void test_json_reader_depth_limit_holds_against_deep_nesting(void)
{
    size_t n = 200000;
    char *deep = malloc(2 * n + 1);
    hf3fs_meta__json_doc d;
    memset(&d, 0, sizeof d);
    CHECK(deep);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = '\0';
    int rc = hf3fs_meta__json_parse(&d, deep, 2 * n, 32);
    hf3fs_meta__json_free(&d);
    /* exactly at the limit is fine, one more is refused */
    int at_limit = hf3fs_meta__json_parse(&d, deep + n - 32, 64, 32);
    hf3fs_meta__json_free(&d);
    int over = hf3fs_meta__json_parse(&d, deep + n - 33, 66, 32);
    hf3fs_meta__json_free(&d);
    free(deep);
    CHECK_RC(NULL, rc, HF3FS_META_EPROTO);
    CHECK_RC(NULL, at_limit, 0);
    CHECK_RC(NULL, over, HF3FS_META_EPROTO);
done:;
}

static void test_json_writer_escapes_and_round_trips(void)
{
    hf3fs_meta__buf b;
    hf3fs_meta__jw w;
    hf3fs_meta__json_doc d;
    memset(&d, 0, sizeof d);
    hf3fs_meta__buf_init(&b, 1 << 20);
    hf3fs_meta__jw_init(&w, &b);
    const char key[] = "q\"b\\s/\n\r\t\b\f\x01\x1f\xc3\xa9";
    hf3fs_meta__jw_object_begin(&w);
    hf3fs_meta__jw_key(&w, "k");
    hf3fs_meta__jw_string(&w, key, sizeof key - 1);
    hf3fs_meta__jw_key(&w, "n");
    hf3fs_meta__jw_array_begin(&w);
    hf3fs_meta__jw_int(&w, INT64_MIN);
    hf3fs_meta__jw_int(&w, 0);
    hf3fs_meta__jw_bool(&w, true);
    hf3fs_meta__jw_array_end(&w);
    hf3fs_meta__jw_object_end(&w);
    CHECK_RC(NULL, hf3fs_meta__jw_error(&w), 0);
    CHECK_STR(b.data, "{\"k\":\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f\xc3\xa9\","
                      "\"n\":[-9223372036854775808,0,true]}");
    CHECK_RC(NULL, hf3fs_meta__json_parse(&d, b.data, b.len, 8), 0);
    CHECK(hf3fs_meta__json_string_eq(&d, hf3fs_meta__json_get(&d, 0, "k"), key, sizeof key - 1));
    /* invalid UTF-8 is refused, not sent */
    hf3fs_meta__buf_reset(&b);
    hf3fs_meta__jw_init(&w, &b);
    hf3fs_meta__jw_array_begin(&w);
    hf3fs_meta__jw_cstring(&w, "bad \xff key");
    hf3fs_meta__jw_array_end(&w);
    CHECK_RC(NULL, hf3fs_meta__jw_error(&w), HF3FS_META_EINVAL);
done:
    hf3fs_meta__json_free(&d);
    hf3fs_meta__buf_free(&b);
}

/* ======================================================================= */
/* Unit: public API without a server                                        */

static void test_open_refuses_invalid_urls(void)
{
    const char *bad[] = {
        "https://127.0.0.1:1", "127.0.0.1:18000",      "http://",
        "http://:80",          "http://host:0",        "http://host:65536",
        "http://host:12a",     "http://host:",         "http://host?x=1",
        "http://host#f",       "http://user@host:1",   "http://[::1:1",
        "http://[::1]x",       "http://:a%zzb@host:1", "http://ho st:1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hf3fs_meta_client *c = (hf3fs_meta_client *)&c;
        int rc = hf3fs_meta_open(bad[i], &c);
        if (rc != HF3FS_META_EINVAL || c != NULL) {
            hf3fs_meta_close(rc == 0 ? c : NULL);
            FAIL_AT("%s: rc %d", bad[i], rc);
        }
    }
    const char *good[] = {"http://127.0.0.1:18000", "HTTP://localhost", "http://[::1]:8080/",
                          "http://:tok@h:1", "http://u:t%40x@h:1/base/path"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        hf3fs_meta_client *c = NULL;
        int rc = hf3fs_meta_open(good[i], &c);
        hf3fs_meta_close(c);
        if (rc != 0)
            FAIL_AT("%s: rc %d", good[i], rc);
    }
    CHECK_RC(NULL, hf3fs_meta_open(NULL, NULL), HF3FS_META_EINVAL);
done:;
}

static void test_strerror_names_every_code(void)
{
    int codes[] = {HF3FS_META_SUCCESS,  HF3FS_META_EINVAL,    HF3FS_META_ENOMEM,
                   HF3FS_META_ECONNECT, HF3FS_META_ETIMEDOUT, HF3FS_META_EPROTO,
                   HF3FS_META_EREFUSED, HF3FS_META_ENOTINIT,  HF3FS_META_EUNAUTH,
                   HF3FS_META_ESERVER,  HF3FS_META_ETOOBIG};
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        const char *t = hf3fs_meta_strerror(codes[i]);
        if (!t || !*t || strstr(t, "unknown"))
            FAIL_AT("code %d has no text", codes[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(t, hf3fs_meta_strerror(codes[j])) == 0)
                FAIL_AT("codes %d and %d share a text", codes[i], codes[j]);
        if (codes[i] != 0 && (codes[i] > -31400 || codes[i] < -31409))
            FAIL_AT("code %d outside the library's range", codes[i]);
    }
    CHECK(strstr(hf3fs_meta_strerror(-1), "unknown") != NULL);
    CHECK(strstr(hf3fs_meta_strerror(12345), "unknown") != NULL);
    CHECK_STR(hf3fs_meta_version(), HF3FS_META_VERSION_STRING);
done:;
}

static void test_invalid_arguments_fail_before_anything_is_sent(void)
{
    /* A dead port: any attempt to send would be ECONNECT, not EINVAL. */
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", dead_port());
    hf3fs_meta_client *c = NULL;
    const char *keys[] = {"a", NULL};
    const char *bad_utf8[] = {"ok", "\xc3"};
    int64_t pages[2];
    bool flags[2];
    CHECK_RC(NULL, hf3fs_meta_open(url, &c), 0);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(NULL, 0, 1), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, -1, 1), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 2, pages), HF3FS_META_EINVAL);
    CHECK(strstr(hf3fs_meta_last_error(c), "keys[1]") != NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, NULL, 1, pages), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, NULL), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, bad_utf8, 2, flags), HF3FS_META_EINVAL);
    CHECK(strstr(hf3fs_meta_last_error(c), "UTF-8") != NULL);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, keys, NULL, 1, NULL, 0), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, NULL, NULL, 0, NULL, 3), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_sglang_init(c, 0, "\xff", 4), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_sglang_exists(c, -2, NULL, keys, 1, flags), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_stats(c, NULL, NULL), HF3FS_META_EINVAL);
    int status;
    CHECK_RC(c, hf3fs_meta_request(c, "get", "/health", NULL, 0, &status, NULL, NULL),
             HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_request(c, "GET", "health", NULL, 0, &status, NULL, NULL),
             HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_request(c, "GET", "/a b", NULL, 0, &status, NULL, NULL),
             HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_set_timeouts(c, 0, 10), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_set_retries(c, -1, 10), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_set_retries(c, 1, 0), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_set_bearer_token(c, ""), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_set_bearer_token(c, "has space"), HF3FS_META_EINVAL);
    CHECK_RC(c, hf3fs_meta_set_max_answer(c, 10), HF3FS_META_EINVAL);
    CHECK_STR(hf3fs_meta_last_error(NULL), "no client");
    CHECK_EQ(hf3fs_meta_last_status(NULL), 0);
done:
    hf3fs_meta_close(c);
}

static void test_stats_parse_decodes_pools_and_refuses_bad_documents(void)
{
    const char *text = "{\"pools\": [{\"namespace\": \"kv\", \"rank\": 1, \"num_pages\": 8,"
                       " \"free\": 5, \"reserved\": 1, \"owned\": 2, \"draining\": 0, \"keys\": 2,"
                       " \"touched\": 3, \"hits\": 4, \"misses\": 6, \"evictions\": 7, \"x\": [1]},"
                       " {\"namespace\": \"n\\u00e9\", \"rank\": 0}], \"other\": true}";
    hf3fs_meta_pool_stats *p = NULL;
    size_t n = 0;
    CHECK_RC(NULL, hf3fs_meta_stats_parse(text, strlen(text), &p, &n), 0);
    CHECK_EQ(n, 2);
    CHECK_STR(p[0].ns, "kv");
    CHECK(p[0].rank == 1 && p[0].num_pages == 8 && p[0].free == 5 && p[0].reserved == 1 &&
          p[0].owned == 2 && p[0].draining == 0 && p[0].keys == 2 && p[0].touched == 3 &&
          p[0].hits == 4 && p[0].misses == 6 && p[0].evictions == 7);
    CHECK_STR(p[1].ns, "n\xc3\xa9");
    CHECK(p[1].rank == 0 && p[1].num_pages == -1 && p[1].evictions == -1);
    hf3fs_meta_free(p);
    p = NULL;
    const char *empty = "{\"pools\":[]}";
    CHECK_RC(NULL, hf3fs_meta_stats_parse(empty, strlen(empty), &p, &n), 0);
    CHECK(n == 0 && p == NULL);
    const char *bad[] = {"[]",
                         "{}",
                         "{\"pools\":{}}",
                         "{\"pools\":[{\"rank\":0}]}",
                         "{\"pools\":[{\"namespace\":\"kv\"}]}",
                         "{\"pools\":[{\"namespace\":\"kv\",\"rank\":0,\"free\":1.5}]}",
                         "{"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = hf3fs_meta_stats_parse(bad[i], strlen(bad[i]), &p, &n);
        if (rc != HF3FS_META_EPROTO || p != NULL)
            FAIL_AT("case %s: rc %d", bad[i], rc);
    }
done:;
}

/* ======================================================================= */
/* Fake servers: the transport                                              */

static void test_basic_auth_from_url_user_info_is_sent(void)
{
    fake_server *s = fake_start(STEPS({ANSWER, HEALTH_OK}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL, *d = NULL;
    CHECK(s);
    c = fake_client(s, ":s3cret");
    d = fake_client(s, "user:t%40k");
    CHECK(c && d);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    hf3fs_meta_close(c); /* the fake server serves one connection at a time */
    c = NULL;
    CHECK_RC(d, hf3fs_meta_health(d), 0);
    /* base64(":s3cret") and base64("user:t@k") */
    CHECK(strstr(s->heads[0], "\r\nAuthorization: Basic OnMzY3JldA==\r\n") != NULL);
    CHECK(strstr(s->heads[1], "\r\nAuthorization: Basic dXNlcjp0QGs=\r\n") != NULL);
done:
    hf3fs_meta_close(c);
    hf3fs_meta_close(d);
    fake_stop(s);
}

static void test_bearer_token_is_sent_and_replaces_basic_auth(void)
{
    fake_server *s = fake_start(
        STEPS({ANSWER, HEALTH_OK}, {ANSWER, HEALTH_OK}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, ":urltoken");
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_set_bearer_token(c, "abc.DEF-123"), 0);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_RC(c, hf3fs_meta_set_bearer_token(c, NULL), 0);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK(strstr(s->heads[0], "\r\nAuthorization: Bearer abc.DEF-123\r\n") != NULL);
    CHECK(strstr(s->heads[0], "Basic") == NULL);
    CHECK(strstr(s->heads[1], "\r\nAuthorization: Basic OnVybHRva2Vu\r\n") != NULL);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_request_has_host_length_type_and_base_path(void)
{
    fake_server *s = fake_start(STEPS({ANSWER, "HTTP/1.1 204 No Content\r\n\r\n"}));
    hf3fs_meta_client *c = NULL;
    char url[128];
    CHECK(s);
    snprintf(url, sizeof url, "http://127.0.0.1:%d/meta/", s->port);
    CHECK_RC(NULL, hf3fs_meta_open(url, &c), 0);
    const char *keys[] = {"k"};
    int64_t pages[] = {3};
    CHECK_RC(c, hf3fs_meta_sglang_confirm_write(c, 2, "ns", keys, pages, 1, NULL, 0), 0);
    const char *h = s->heads[0];
    CHECK(strncmp(h, "POST /meta/2/confirm_write HTTP/1.1\r\n", 37) == 0);
    char host[64];
    snprintf(host, sizeof host, "\r\nHost: 127.0.0.1:%d\r\n", s->port);
    CHECK(strstr(h, host) != NULL);
    CHECK(strstr(h, "\r\nContent-Type: application/json\r\n") != NULL);
    CHECK(strstr(h, "Authorization") == NULL);
    /* {"namespace":"ns","written_keys_to_confirm":[["k",3]],"pages_to_release":[]} */
    CHECK_EQ(s->body_len[0], 76);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_chunked_answer_is_decoded(void)
{
    fake_server *s = fake_start(STEPS(
        {ANSWER,
         "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: application/json\r\n\r\n"
         "7\r\n{\"exist\r\n"
         "b;x=y\r\ns\": [true, \r\n"
         "7\r\nfalse]}\r\n"
         "0\r\n\r\n"},
        {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    const char *keys[] = {"a", "b"};
    bool exists[2];
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 2, exists), 0);
    CHECK(exists[0] && !exists[1]);
    CHECK_RC(c, hf3fs_meta_health(c), 0); /* the connection is still in step */
    CHECK_EQ(atomic_load(&s->n_connections), 1);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_answer_arriving_one_byte_at_a_time_is_read_whole(void)
{
    fake_server *s = fake_start(
        STEPS({ANSWER_BYTEWISE, "HTTP/1.1 200 OK\r\nContent-Length: 37\r\n\r\n"
                                "{\"rank\":0,\"results\":[[\"k\",5]]}       "}));
    hf3fs_meta_client *c = NULL;
    const char *keys[] = {"k"};
    int64_t pages[1] = {-7};
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), 0);
    CHECK_EQ(pages[0], 5);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_keep_alive_connection_is_reused(void)
{
    fake_server *s = fake_start(
        STEPS({ANSWER, HEALTH_OK}, {ANSWER, HEALTH_OK}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    for (int i = 0; i < 3; i++)
        CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_EQ(atomic_load(&s->n_connections), 1);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_connection_close_answer_then_new_connection(void)
{
    fake_server *s = fake_start(STEPS(
        {ANSWER_CLOSE,
         "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"},
        {ANSWER_CLOSE, "HTTP/1.0 200 OK\r\n\r\n{\"status\":\"ok\"}"}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_RC(c, hf3fs_meta_health(c), 0); /* HTTP/1.0 body ending with the connection */
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_EQ(atomic_load(&s->n_connections), 3);
    CHECK_EQ(atomic_load(&s->n_requests), 3);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_idle_connection_closed_by_server_is_replaced(void)
{
    /* The server closes after answering, without saying so. */
    fake_server *s = fake_start(STEPS({ANSWER_CLOSE, HEALTH_OK}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_set_retries(c, 0, 1), 0); /* must work without a retry */
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    sleep_ms(50);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_EQ(atomic_load(&s->n_connections), 2);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_connection_lost_before_answer_is_retried(void)
{
    fake_server *s = fake_start(STEPS({DROP, NULL}, {DROP, NULL}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_EQ(atomic_load(&s->n_requests), 3);
    CHECK_STR(hf3fs_meta_last_error(c), "");
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

#define ALLOC_K5 "HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n{\"rank\":0,\"results\":[[\"k\",5]]}"

static void test_allocation_is_retried_after_a_lost_connection_by_default(void)
{
    fake_server *s = fake_start(STEPS({DROP, NULL}, {ANSWER, ALLOC_K5}));
    hf3fs_meta_client *c = NULL;
    const char *keys[] = {"k"};
    int64_t pages[1];
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), 0);
    CHECK_EQ(pages[0], 5);
    CHECK_EQ(atomic_load(&s->n_requests), 2);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_allocation_is_not_repeated_when_retry_allocate_is_off(void)
{
    fake_server *s = fake_start(STEPS({DROP, NULL}, {ANSWER, ALLOC_K5}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    const char *keys[] = {"k"};
    int64_t pages[1];
    bool existed[1];
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_set_retry_allocate(c, 0), 0);
    CHECK_RC(c, hf3fs_meta_sglang_reserve_and_allocate(c, 0, NULL, keys, 1, existed, pages),
             HF3FS_META_ECONNECT);
    CHECK_EQ(atomic_load(&s->n_requests), 1);
    /* idempotent calls are still retried */
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), 0);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_http_error_answer_is_never_retried(void)
{
    fake_server *s = fake_start(
        STEPS({ANSWER, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                       "Content-Length: 24\r\n\r\n{\"detail\":\"overloaded!\"}"},
              {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_health(c), HF3FS_META_ESERVER);
    CHECK_EQ(atomic_load(&s->n_requests), 1);
    CHECK_EQ(hf3fs_meta_last_status(c), 503);
    CHECK_STR(hf3fs_meta_last_detail(c), "overloaded!");
    CHECK_STR(hf3fs_meta_last_error(c), "GET /health: HTTP 503: overloaded!");
    CHECK_RC(c, hf3fs_meta_health(c), 0); /* and the connection is still good */
    CHECK_EQ(atomic_load(&s->n_connections), 1);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_retries_are_bounded(void)
{
    fake_server *s = fake_start(STEPS({DROP, NULL}, {DROP, NULL}, {DROP, NULL}, {DROP, NULL},
                                      {DROP, NULL}, {DROP, NULL}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_set_retries(c, 2, 1), 0);
    CHECK_RC(c, hf3fs_meta_health(c), HF3FS_META_ECONNECT);
    CHECK_EQ(atomic_load(&s->n_requests), 3);
    CHECK(strstr(hf3fs_meta_last_error(c), "after 3 attempts") != NULL);
    CHECK_EQ(hf3fs_meta_last_status(c), 0);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_backoff_doubles_between_retries(void)
{
    int port = dead_port();
    char url[64];
    hf3fs_meta_client *c = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    CHECK_RC(NULL, hf3fs_meta_open(url, &c), 0);
    CHECK_RC(c, hf3fs_meta_set_retries(c, 3, 40), 0);
    double t0 = now_s();
    CHECK_RC(c, hf3fs_meta_health(c), HF3FS_META_ECONNECT);
    double took = now_s() - t0;
    /* pauses of 40, 80, 160 ms less at most 25% jitter: >= 0.21 s */
    if (took < 0.2 || took > 2.0)
        FAIL_AT("3 retries from 40 ms took %.3f s", took);
    CHECK(strstr(hf3fs_meta_last_error(c), "after 4 attempts") != NULL);
done:
    hf3fs_meta_close(c);
}

static void test_server_down_is_a_connection_error(void)
{
    char url[64];
    hf3fs_meta_client *c = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d", dead_port());
    CHECK_RC(NULL, hf3fs_meta_open(url, &c), 0);
    CHECK_RC(c, hf3fs_meta_set_retries(c, 1, 1), 0);
    const char *keys[] = {"k"};
    bool exists[1];
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), HF3FS_META_ECONNECT);
    CHECK(strstr(hf3fs_meta_last_error(c), "Connection refused") != NULL);
    CHECK_EQ(hf3fs_meta_last_status(c), 0);
done:
    hf3fs_meta_close(c);
}

static void test_request_timeout_against_a_server_that_never_answers(void)
{
    fake_server *s = fake_start(STEPS({SILENT, NULL}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_set_timeouts(c, 1000, 300), 0);
    double t0 = now_s();
    CHECK_RC(c, hf3fs_meta_health(c), HF3FS_META_ETIMEDOUT);
    double took = now_s() - t0;
    if (took < 0.29 || took > 1.5)
        FAIL_AT("a 300 ms timeout took %.3f s", took);
    /* The fake server's thread counts the request when it has read it: on a
     * loaded machine that may come after the client gave up. A retry would
     * have been sent before the call returned, so once the one request is
     * counted, a second would be too within a moment. */
    for (int i = 0; i < 500 && atomic_load(&s->n_requests) == 0; i++)
        sleep_ms(10);
    sleep_ms(50);
    CHECK_EQ(atomic_load(&s->n_requests), 1); /* a timeout is not retried */
    CHECK(strstr(hf3fs_meta_last_error(c), "300 ms") != NULL);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_early_answer_while_sending_a_large_body_is_read(void)
{
    /* The server answers 413 after the head and stops reading: the client must
     * report that answer, not a broken pipe. */
    fake_server *s = fake_start(
        STEPS({ANSWER_EARLY,
               "HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\nContent-Length: 32\r\n\r\n"
               "{\"detail\":\"body over 8388608 B\"}"}));
    hf3fs_meta_client *c = NULL;
    size_t n = 400000;
    const char **keys = malloc(n * sizeof *keys);
    bool *exists = malloc(n * sizeof *exists);
    const char *key = "0123456789abcdef0123456789abcdef0123456789abcdef";
    CHECK(s && keys && exists);
    for (size_t i = 0; i < n; i++)
        keys[i] = key;
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, n, exists), HF3FS_META_EREFUSED);
    CHECK_EQ(hf3fs_meta_last_status(c), 413);
    CHECK_STR(hf3fs_meta_last_detail(c), "body over 8388608 B");
    CHECK_EQ(atomic_load(&s->n_requests), 1);
done:
    free(keys);
    free(exists);
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_malformed_answers_are_protocol_errors(void)
{
    fake_server *s = fake_start(STEPS(
        {ANSWER_CLOSE, "ICY 200 OK\r\n\r\n"},
        {ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"},
        {ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n{\"exists\":[true]"},
        {ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n{\"exists\":[1,0]"},
        {ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 23\r\n\r\n{\"exists\":[true,false]}"},
        {ANSWER,
         "HTTP/1.1 200 OK\r\nContent-Length: 30\r\n\r\n{\"rank\":0,\"results\":[[\"x\",5]]}"},
        {ANSWER,
         "HTTP/1.1 200 OK\r\nContent-Length: 31\r\n\r\n{\"rank\":0,\"results\":[[\"k\",-2]]}"},
        {ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\n{\"indices\":[[\"yes\",5]]}    "},
        {ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{\"a\":\"b\"}"}));
    hf3fs_meta_client *c = NULL;
    const char *keys[] = {"k", "l", "m"};
    bool exists[3];
    int64_t pages[3];
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), HF3FS_META_EPROTO); /* not HTTP */
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), HF3FS_META_EPROTO); /* not JSON */
    CHECK(strstr(hf3fs_meta_last_error(c), "not JSON") != NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), HF3FS_META_EPROTO); /* cut JSON */
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 2, exists),
             HF3FS_META_EPROTO); /* not bools */
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 3, exists), HF3FS_META_EPROTO); /* 2 for 3 */
    CHECK(strstr(hf3fs_meta_last_error(c), "2 entries for 3 keys") != NULL);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), HF3FS_META_EPROTO); /* key */
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), HF3FS_META_EPROTO); /* -2 */
    CHECK_RC(c, hf3fs_meta_sglang_reserve_and_allocate(c, 0, NULL, keys, 1, NULL, pages),
             HF3FS_META_EPROTO);
    CHECK_RC(c, hf3fs_meta_health(c), HF3FS_META_EPROTO);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_answer_over_the_size_limit_is_refused(void)
{
    fake_server *s = fake_start(
        STEPS({ANSWER, "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"}, {ANSWER, HEALTH_OK}));
    hf3fs_meta_client *c = NULL;
    char *json = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_set_max_answer(c, 1024), 0);
    CHECK_RC(c, hf3fs_meta_stats(c, &json, NULL), HF3FS_META_ETOOBIG);
    CHECK(json == NULL);
    CHECK_RC(c, hf3fs_meta_health(c), 0); /* on a new connection */
    CHECK_EQ(atomic_load(&s->n_connections), 2);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

static void test_status_codes_map_to_error_codes(void)
{
    fake_server *s = fake_start(STEPS(
        {ANSWER,
         "HTTP/1.1 401 Unauthorized\r\nContent-Length: 27\r\n\r\n{\"detail\":\"Not authorized\"}"},
        {ANSWER, "HTTP/1.1 404 Not Found\r\nContent-Length: 22\r\n\r\n{\"detail\":\"Not Found\"}"},
        {ANSWER, "HTTP/1.1 404 Not Found\r\nContent-Length: 38\r\n\r\n{\"detail\":\"Rank 3 not "
                 "initialized\"}   "},
        {ANSWER, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"},
        {ANSWER, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops"},
        {ANSWER, "HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n"}));
    hf3fs_meta_client *c = NULL;
    CHECK(s);
    c = fake_client(s, NULL);
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), HF3FS_META_EUNAUTH);
    CHECK_STR(hf3fs_meta_last_detail(c), "Not authorized");
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), HF3FS_META_EREFUSED);
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), HF3FS_META_ENOTINIT);
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), HF3FS_META_EREFUSED);
    CHECK_STR(hf3fs_meta_last_detail(c), "");
    CHECK_STR(hf3fs_meta_last_error(c), "POST /clear: HTTP 400: (no detail)");
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), HF3FS_META_ESERVER);
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), HF3FS_META_ESERVER);
    CHECK(strstr(hf3fs_meta_last_error(c), "unexpected HTTP status 302") != NULL);
done:
    hf3fs_meta_close(c);
    fake_stop(s);
}

/* ======================================================================= */
/* Live: against hf3fs-metad                                                */

/* A client of the live server, with every pool forgotten. */
static hf3fs_meta_client *live_client(void)
{
    hf3fs_meta_client *c = NULL;
    if (hf3fs_meta_open(live_url, &c) != 0)
        return NULL;
    if (hf3fs_meta_vllm_clear(c) != 0) {
        snprintf(failure, sizeof failure, "POST /clear failed: %s", hf3fs_meta_last_error(c));
        hf3fs_meta_close(c);
        return NULL;
    }
    return c;
}

/* The pool (ns, rank) of the live server's stats, or false. */
static bool live_pool(hf3fs_meta_client *c, const char *ns, int rank, hf3fs_meta_pool_stats *out)
{
    char *json = NULL;
    size_t len = 0, n = 0;
    hf3fs_meta_pool_stats *pools = NULL;
    bool found = false;
    if (hf3fs_meta_stats(c, &json, &len) != 0 || hf3fs_meta_stats_parse(json, len, &pools, &n) != 0)
        n = 0;
    for (size_t i = 0; i < n; i++)
        if (strcmp(pools[i].ns, ns) == 0 && pools[i].rank == rank) {
            *out = pools[i];
            out->ns = NULL; /* points into pools */
            found = true;
        }
    hf3fs_meta_free(json);
    hf3fs_meta_free(pools);
    return found;
}

static void test_live_health_answers_ok(void)
{
    hf3fs_meta_client *c = NULL;
    CHECK_RC(NULL, hf3fs_meta_open(live_url, &c), 0);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    CHECK_EQ(hf3fs_meta_last_status(c), 200);
    CHECK_STR(hf3fs_meta_last_error(c), "");
done:
    hf3fs_meta_close(c);
}

static void test_live_vllm_worker_flow_on_two_ranks_with_completeness(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"aaaa0001", "aaaa0002", "aaaa0003"};
    int64_t p0[3], p1[3], loc[3], again[3];
    bool exists[3];
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_scheduler(c), 0);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 16), 0);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 1, 16), 0);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 1, 16), 0); /* idempotent */
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 3, p0), 0);
    CHECK(p0[0] >= 0 && p0[1] >= 0 && p0[2] >= 0 && p0[0] != p0[1] && p0[1] != p0[2] &&
          p0[0] != p0[2] && p0[0] < 16 && p0[1] < 16 && p0[2] < 16);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, keys, p0, 3, NULL, 0), 0);
    /* rank 1 has not written them yet: not complete */
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 3, exists), 0);
    CHECK(!exists[0] && !exists[1] && !exists[2]);
    CHECK_RC(c, hf3fs_meta_vllm_get_locations(c, 0, keys, 3, loc), 0);
    CHECK(loc[0] == -1 && loc[1] == -1 && loc[2] == -1);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 1, keys, 2, p1), 0);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 1, keys, p1, 2, NULL, 0), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 3, exists), 0);
    CHECK(exists[0] && exists[1] && !exists[2]);
    CHECK_RC(c, hf3fs_meta_vllm_get_locations(c, 0, keys, 3, loc), 0);
    CHECK(loc[0] == p0[0] && loc[1] == p0[1] && loc[2] == -1);
    CHECK_RC(c, hf3fs_meta_vllm_get_locations(c, 1, keys, 2, loc), 0);
    CHECK(loc[0] == p1[0] && loc[1] == p1[1]);
    /* a hit answers the key's own page */
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 3, again), 0);
    CHECK(again[0] == p0[0] && again[1] == p0[1] && again[2] == p0[2]);
    /* zero keys is a valid (empty) request */
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, NULL, 0, NULL), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, NULL, 0, NULL), 0);
done:
    hf3fs_meta_close(c);
}

static void test_live_vllm_allocation_is_all_or_nothing(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"b1", "b2", "b3"};
    int64_t pages[3];
    hf3fs_meta_pool_stats st;
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 2), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 3, pages), 0);
    CHECK(pages[0] == -1 && pages[1] == -1 && pages[2] == -1);
    CHECK(live_pool(c, "kv", 0, &st));
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.free, 2);
done:
    hf3fs_meta_close(c);
}

static void test_live_vllm_confirm_releases_unused_reserved_pages(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"c1", "c2"};
    int64_t pages[2];
    hf3fs_meta_pool_stats st;
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 8), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 2, pages), 0);
    CHECK(live_pool(c, "kv", 0, &st) && st.reserved == 2);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, keys, pages, 1, &pages[1], 1), 0);
    CHECK(live_pool(c, "kv", 0, &st));
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.owned, 1);
    CHECK_EQ(st.free, 6);
    CHECK_EQ(st.draining, 1); /* the released page, for the release grace */
    CHECK_EQ(st.keys, 1);
    /* a release alone, and a confirmation that matches no reservation: harmless */
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, NULL, NULL, 0, &pages[1], 1), 0);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, &keys[1], &pages[1], 1, NULL, 0), 0);
    CHECK(live_pool(c, "kv", 0, &st) && st.owned == 1 && st.free + st.draining == 7);
done:
    hf3fs_meta_close(c);
}

static void test_live_vllm_invalid_initialization_gives_the_detail_text(void)
{
    hf3fs_meta_client *c = live_client();
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 0), HF3FS_META_EREFUSED);
    CHECK_EQ(hf3fs_meta_last_status(c), 400);
    CHECK_STR(hf3fs_meta_last_detail(c), "Invalid initialization parameters");
    CHECK(strstr(hf3fs_meta_last_error(c), "HTTP 400: Invalid initialization parameters") != NULL);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, -5), HF3FS_META_EREFUSED);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 4), 0); /* and the client goes on */
done:
    hf3fs_meta_close(c);
}

static void test_live_vllm_uninitialized_rank_is_not_initialized(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"d1"};
    int64_t pages[1];
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 7, keys, 1, pages), HF3FS_META_ENOTINIT);
    CHECK_EQ(hf3fs_meta_last_status(c), 404);
    CHECK_STR(hf3fs_meta_last_detail(c), "Rank 7 not initialized");
    CHECK_RC(c, hf3fs_meta_vllm_get_locations(c, 7, keys, 1, pages), HF3FS_META_ENOTINIT);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 7, keys, pages, 0, NULL, 0), HF3FS_META_ENOTINIT);
done:
    hf3fs_meta_close(c);
}

static void test_live_vllm_clear_forgets_every_pool(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"e1"};
    int64_t pages[1];
    bool exists[1];
    hf3fs_meta_pool_stats st;
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 4), 0);
    CHECK_RC(c, hf3fs_meta_sglang_init(c, 0, "other", 4), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), 0);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, keys, pages, 1, NULL, 0), 0);
    CHECK_RC(c, hf3fs_meta_vllm_clear(c), 0);
    CHECK(!live_pool(c, "kv", 0, &st));
    CHECK(!live_pool(c, "other", 0, &st));
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), 0);
    CHECK(!exists[0]);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 1, pages), HF3FS_META_ENOTINIT);
done:
    hf3fs_meta_close(c);
}

static void test_live_sglang_flow_in_a_namespace(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"s1", "s2"};
    int64_t pages[2], again[2], idx[2];
    bool existed[2], exists[2];
    hf3fs_meta_pool_stats st;
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_sglang_init(c, 3, "llama", 8), 0);
    CHECK_RC(c, hf3fs_meta_sglang_init(c, 3, "llama", 8), 0);
    CHECK_RC(c, hf3fs_meta_sglang_reserve_and_allocate(c, 3, "llama", keys, 2, existed, pages), 0);
    CHECK(!existed[0] && !existed[1] && pages[0] >= 0 && pages[1] >= 0 && pages[0] != pages[1]);
    CHECK_RC(c, hf3fs_meta_sglang_confirm_write(c, 3, "llama", keys, pages, 2, NULL, 0), 0);
    CHECK_RC(c, hf3fs_meta_sglang_exists(c, 3, "llama", keys, 2, exists), 0);
    CHECK(exists[0] && exists[1]);
    CHECK_RC(c, hf3fs_meta_sglang_reserve_and_allocate(c, 3, "llama", keys, 2, existed, again), 0);
    CHECK(existed[0] && existed[1] && again[0] == pages[0] && again[1] == pages[1]);
    CHECK_RC(c, hf3fs_meta_sglang_get_page_indices(c, 3, "llama", keys, 2, idx), 0);
    CHECK(idx[0] == pages[0] && idx[1] == pages[1]);
    CHECK_RC(c, hf3fs_meta_sglang_delete_keys(c, 3, "llama", keys, 1), 0);
    CHECK_RC(c, hf3fs_meta_sglang_get_page_indices(c, 3, "llama", keys, 2, idx), 0);
    CHECK(idx[0] == -1 && idx[1] == pages[1]);
    CHECK(live_pool(c, "llama", 3, &st) && st.keys == 1 && st.num_pages == 8);
    CHECK_RC(c, hf3fs_meta_sglang_clear(c, 3, "llama"), 0);
    CHECK_RC(c, hf3fs_meta_sglang_exists(c, 3, "llama", keys, 2, exists), 0);
    CHECK(!exists[0] && !exists[1]);
    /* s2 was just read (exists): its page drains until the read lease ends */
    CHECK(live_pool(c, "llama", 3, &st) && st.free + st.draining == 8 && st.keys == 0 &&
          st.owned == 0);
    /* the vLLM namespace was never touched */
    CHECK(!live_pool(c, "kv", 3, &st));
done:
    hf3fs_meta_close(c);
}

static void test_live_sglang_default_namespace_is_the_vllm_one(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"t1"};
    int64_t pages[1], loc[1];
    bool exists[1];
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_sglang_init(c, 0, NULL, 4), 0);
    CHECK_RC(c, hf3fs_meta_sglang_reserve_and_allocate(c, 0, NULL, keys, 1, NULL, pages), 0);
    CHECK_RC(c, hf3fs_meta_sglang_confirm_write(c, 0, NULL, keys, pages, 1, NULL, 0), 0);
    /* the same pool seen through the vLLM dialect */
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), 0);
    CHECK(exists[0]);
    CHECK_RC(c, hf3fs_meta_vllm_get_locations(c, 0, keys, 1, loc), 0);
    CHECK_EQ(loc[0], pages[0]);
done:
    hf3fs_meta_close(c);
}

static void test_live_sglang_partial_allocation_and_release(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"u1", "u2", "u3"};
    int64_t pages[3];
    bool existed[3];
    hf3fs_meta_pool_stats st;
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_sglang_init(c, 0, "p", 2), 0);
    CHECK_RC(c, hf3fs_meta_sglang_reserve_and_allocate(c, 0, "p", keys, 3, existed, pages), 0);
    CHECK(pages[0] >= 0 && pages[1] >= 0 && pages[2] == -1);
    CHECK_RC(c, hf3fs_meta_sglang_confirm_write(c, 0, "p", keys, pages, 1, &pages[1], 1), 0);
    CHECK(live_pool(c, "p", 0, &st) && st.owned == 1 && st.reserved == 0 &&
          st.free + st.draining == 1);
done:
    hf3fs_meta_close(c);
}

static void test_live_sglang_uninitialized_pool_is_not_initialized(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"v1"};
    bool exists[1];
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_sglang_exists(c, 5, "nope", keys, 1, exists), HF3FS_META_ENOTINIT);
    CHECK_STR(hf3fs_meta_last_detail(c),
              "Rank 5 namespace 'nope' not initialized. Please call /5/initialize first.");
    CHECK_RC(c, hf3fs_meta_sglang_clear(c, 5, "nope"), HF3FS_META_ENOTINIT);
    CHECK_RC(c, hf3fs_meta_sglang_delete_keys(c, 5, "nope", keys, 1), HF3FS_META_ENOTINIT);
done:
    hf3fs_meta_close(c);
}

static void test_live_keys_with_quotes_escapes_and_unicode_round_trip(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"quote\"back\\slash", "tab\tnew\nline\x01",
                          "caf\xc3\xa9-\xf0\x9f\x98\x80", "/path?like=url&x", " "};
    int64_t pages[5], loc[5];
    bool exists[5];
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 8), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, 5, pages), 0);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, keys, pages, 5, NULL, 0), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 5, exists), 0);
    for (int i = 0; i < 5; i++)
        if (!exists[i])
            FAIL_AT("key %d does not exist after confirm", i);
    CHECK_RC(c, hf3fs_meta_vllm_get_locations(c, 0, keys, 5, loc), 0);
    CHECK(memcmp(loc, pages, sizeof pages) == 0);
done:
    hf3fs_meta_close(c);
}

static void test_live_large_batch_of_keys(void)
{
    hf3fs_meta_client *c = live_client();
    size_t n = 20000;
    char(*text)[40] = malloc(n * sizeof *text);
    const char **keys = malloc(n * sizeof *keys);
    int64_t *pages = malloc(n * sizeof *pages);
    bool *exists = malloc(n * sizeof *exists);
    CHECK(c && text && keys && pages && exists);
    for (size_t i = 0; i < n; i++) {
        snprintf(text[i], sizeof text[i], "%032zx", i * 2654435761u);
        keys[i] = text[i];
    }
    /* twice the keys' pages: over a cluster a pool this large is striped
     * (docs/many-nodes.md "Choosing S"), and n keys do not hash evenly
     * enough to fill each stripe's n / S pages exactly */
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 2 * (int64_t)n), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 0, keys, n, pages), 0);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 0, keys, pages, n, NULL, 0), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, n, exists), 0);
    for (size_t i = 0; i < n; i++)
        if (!exists[i] || pages[i] < 0)
            FAIL_AT("key %zu: page %lld exists %d", i, (long long)pages[i], exists[i]);
done:
    free(text);
    free(keys);
    free(pages);
    free(exists);
    hf3fs_meta_close(c);
}

static void test_live_stats_raw_json_and_parsed_pools(void)
{
    hf3fs_meta_client *c = live_client();
    char *json = NULL;
    size_t len = 0, n = 0;
    hf3fs_meta_pool_stats *pools = NULL;
    const char *keys[] = {"w1", "w2"};
    int64_t pages[2];
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 2, 10), 0);
    CHECK_RC(c, hf3fs_meta_vllm_batch_allocate(c, 2, keys, 2, pages), 0);
    CHECK_RC(c, hf3fs_meta_vllm_confirm_write(c, 2, keys, pages, 1, NULL, 0), 0);
    CHECK_RC(c, hf3fs_meta_stats(c, &json, &len), 0);
    CHECK(json && len == strlen(json) && json[0] == '{' && strstr(json, "\"pools\""));
    CHECK_RC(NULL, hf3fs_meta_stats_parse(json, len, &pools, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_STR(pools[0].ns, "kv");
    CHECK(pools[0].rank == 2 && pools[0].num_pages == 10 && pools[0].free == 8 &&
          pools[0].reserved == 1 && pools[0].owned == 1 && pools[0].keys == 1);
    CHECK(pools[0].hits >= 0 && pools[0].misses >= 0 && pools[0].evictions == 0);
done:
    hf3fs_meta_free(json);
    hf3fs_meta_free(pools);
    hf3fs_meta_close(c);
}

static void test_live_raw_request_returns_any_status_with_body(void)
{
    hf3fs_meta_client *c = live_client();
    int status = 0;
    char *body = NULL;
    size_t len = 0;
    CHECK(c);
    CHECK_RC(c, hf3fs_meta_request(c, "GET", "/no/such/route", NULL, 0, &status, &body, &len), 0);
    CHECK_EQ(status, 404);
    CHECK_STR(hf3fs_meta_last_detail(c), "Not Found");
    CHECK(body && strstr(body, "Not Found"));
    hf3fs_meta_free(body);
    body = NULL;
    const char *init = "{\"role\":\"worker\",\"num_pages\":3}";
    CHECK_RC(c,
             hf3fs_meta_request(c, "POST", "/rank/4/initialize", init, strlen(init), &status, &body,
                                &len),
             0);
    CHECK_EQ(status, 200);
    CHECK_STR(body, "{\"message\":\"Rank 4 initialized with 3 pages\"}");
    hf3fs_meta_free(body);
    body = NULL;
    CHECK_RC(c, hf3fs_meta_request(c, "POST", "/keys/batch_exists", "{bad", 4, &status, NULL, NULL),
             0);
    CHECK_EQ(status, 400);
    CHECK(*hf3fs_meta_last_detail(c));
    CHECK_RC(c, hf3fs_meta_request(c, "GET", "/metrics", NULL, 0, &status, &body, &len), 0);
    CHECK_EQ(status, 200);
    CHECK(len > 0 && strlen(body) == len);
done:
    hf3fs_meta_free(body);
    hf3fs_meta_close(c);
}

static void test_live_many_requests_share_one_connection(void)
{
    hf3fs_meta_client *c = live_client();
    const char *keys[] = {"x1"};
    bool exists[1];
    CHECK(c);
    for (int i = 0; i < 500; i++)
        CHECK_RC(c, hf3fs_meta_vllm_batch_exists(c, keys, 1, exists), 0);
done:
    hf3fs_meta_close(c);
}

static void test_idle_server_timeout_is_survived_without_error(void)
{
    /* The server (started with --idle-timeout 1) closes the idle connection;
     * the next call must notice and reconnect, with retries off. */
    hf3fs_meta_client *c = NULL;
    CHECK_RC(NULL, hf3fs_meta_open(live_url, &c), 0);
    CHECK_RC(c, hf3fs_meta_set_retries(c, 0, 1), 0);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    sleep_ms(2500);
    CHECK_RC(c, hf3fs_meta_health(c), 0);
    sleep_ms(2500);
    CHECK_RC(c, hf3fs_meta_vllm_init_worker(c, 0, 4), 0);
done:
    hf3fs_meta_close(c);
}

/* ======================================================================= */

#define T(name, kind)                                                                              \
    {                                                                                              \
#name, test_##name, kind                                                                   \
    }

static const test tests[] = {
    T(http_reader_content_length_answer_fed_byte_by_byte, UNIT),
    T(http_reader_decodes_chunked_answer_with_extensions_and_trailers, UNIT),
    T(http_reader_204_has_no_body_even_without_length, UNIT),
    T(http_reader_skips_interim_100_continue, UNIT),
    T(http_reader_body_until_close_completes_at_eof, UNIT),
    T(http_reader_keep_alive_rules_of_1_0_and_close, UNIT),
    T(http_reader_refuses_malformed_answers, UNIT),
    T(http_reader_enforces_line_head_and_body_limits, UNIT),
    T(http_reader_stops_at_the_end_of_the_answer, UNIT),
    T(json_reader_navigates_objects_arrays_and_scalars, UNIT),
    T(json_reader_is_strict, UNIT),
    T(json_reader_depth_limit_holds_against_deep_nesting, UNIT),
    T(json_writer_escapes_and_round_trips, UNIT),
    T(open_refuses_invalid_urls, UNIT),
    T(strerror_names_every_code, UNIT),
    T(invalid_arguments_fail_before_anything_is_sent, UNIT),
    T(stats_parse_decodes_pools_and_refuses_bad_documents, UNIT),
    T(basic_auth_from_url_user_info_is_sent, FAKE),
    T(bearer_token_is_sent_and_replaces_basic_auth, FAKE),
    T(request_has_host_length_type_and_base_path, FAKE),
    T(chunked_answer_is_decoded, FAKE),
    T(answer_arriving_one_byte_at_a_time_is_read_whole, FAKE),
    T(keep_alive_connection_is_reused, FAKE),
    T(connection_close_answer_then_new_connection, FAKE),
    T(idle_connection_closed_by_server_is_replaced, FAKE),
    T(connection_lost_before_answer_is_retried, FAKE),
    T(allocation_is_retried_after_a_lost_connection_by_default, FAKE),
    T(allocation_is_not_repeated_when_retry_allocate_is_off, FAKE),
    T(http_error_answer_is_never_retried, FAKE),
    T(retries_are_bounded, FAKE),
    T(backoff_doubles_between_retries, FAKE),
    T(server_down_is_a_connection_error, FAKE),
    T(request_timeout_against_a_server_that_never_answers, FAKE),
    T(early_answer_while_sending_a_large_body_is_read, FAKE),
    T(malformed_answers_are_protocol_errors, FAKE),
    T(answer_over_the_size_limit_is_refused, FAKE),
    T(status_codes_map_to_error_codes, FAKE),
    T(live_health_answers_ok, LIVE),
    T(live_vllm_worker_flow_on_two_ranks_with_completeness, LIVE),
    T(live_vllm_allocation_is_all_or_nothing, LIVE),
    T(live_vllm_confirm_releases_unused_reserved_pages, LIVE),
    T(live_vllm_invalid_initialization_gives_the_detail_text, LIVE),
    T(live_vllm_uninitialized_rank_is_not_initialized, LIVE),
    T(live_vllm_clear_forgets_every_pool, LIVE),
    T(live_sglang_flow_in_a_namespace, LIVE),
    T(live_sglang_default_namespace_is_the_vllm_one, LIVE),
    T(live_sglang_partial_allocation_and_release, LIVE),
    T(live_sglang_uninitialized_pool_is_not_initialized, LIVE),
    T(live_keys_with_quotes_escapes_and_unicode_round_trip, LIVE),
    T(live_large_batch_of_keys, LIVE),
    T(live_stats_raw_json_and_parsed_pools, LIVE),
    T(live_raw_request_returns_any_status_with_body, LIVE),
    T(live_many_requests_share_one_connection, LIVE),
    T(idle_server_timeout_is_survived_without_error, IDLE),
};

int main(int argc, char **argv)
{
    bool idle = false;
    const char *wanted[64];
    int n_wanted = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--url") == 0 && i + 1 < argc)
            live_url = argv[++i];
        else if (strcmp(argv[i], "--idle") == 0)
            idle = true;
        else if (n_wanted < 64)
            wanted[n_wanted++] = argv[i];
    }
    int skipped = 0;
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        const test *t = &tests[i];
        bool match = n_wanted == 0;
        for (int k = 0; k < n_wanted; k++)
            match = match || strstr(t->name, wanted[k]) != NULL;
        if (!match || (idle != (t->kind == IDLE)))
            continue;
        if ((t->kind == LIVE || t->kind == IDLE) && !live_url) {
            printf("SKIP %s: no --url of a live server\n", t->name);
            skipped++;
            continue;
        }
        failure[0] = '\0';
        double t0 = now_s();
        t->fn();
        if (failure[0]) {
            n_failed++;
            printf("FAIL %s (%.2fs): %s\n", t->name, now_s() - t0, failure);
        } else {
            n_passed++;
            printf("PASS %s (%.2fs)\n", t->name, now_s() - t0);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed", n_passed, n_failed);
    if (skipped)
        printf(", %d skipped", skipped);
    printf("\n");
    return n_failed == 0 && n_passed > 0 ? 0 : 1;
}
