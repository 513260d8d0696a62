/*
 * fuzz_http.c: the HTTP layer (src/http/: our event loops and
 * http-parser) on raw bytes from a socket.
 *
 * One server runs in the fuzzing process for the whole run (127.0.0.1, a
 * port the system picks, one thread, small limits so that the 413 and 431
 * paths are near: bodies of at most 1 KiB, 4 KiB of headers). Each input is
 * sent on a new connection followed by "GET /health" with "Connection:
 * close" (so that a connection left between requests ends at once; after an
 * unfinished request it is more garbage), then the sending side is shut
 * down; the target reads until the server closes.
 *
 * Input: byte 0 bit 0 chooses how the bytes go out (all at once, or in
 * pieces of 1..64 bytes whose sizes come from bits 1..7); the rest is sent.
 *
 * Oracles:
 *   - the server closes the connection within READ_TIMEOUT_MS of the
 *     half-close (it sees the end of the input at once);
 *   - everything the server sends is a sequence of whole, valid HTTP/1.1
 *     answers (read with the client library's reader), none of them a 5xx
 *     but 505, and nothing follows an answer that says "Connection: close";
 *   - every 64 inputs, and after any input that took over a second, a new
 *     connection still gets GET /health -> 200, and the store's invariant
 *     checker passes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "store/mem.h"
#include "hf3fs_meta.h"
#include "http/http.h"
#include "http_reader.h"
#include "util/clock.h"

#define READ_TIMEOUT_MS 3000
#define MAX_ANSWER (1u << 20)

static store_t *store;
static api_t *api;
static http_server *server;
static uint16_t port;

static void start_server(void)
{
    fuzz_quiet();
    signal(SIGPIPE, SIG_IGN);
    core_config core = fuzz_core_config();
    core.reservation_ms = 600000;
    store = store_mem_new(&core, &store_server_clock);
    api_config config = fuzz_api_config();
    config.limits.max_body_bytes = 1024;
    api = api_new(store, &config);
    http_config http = {.host = "127.0.0.1",
                        .port = 0,
                        .threads = 1,
                        .max_connections = 64,
                        .idle_timeout_s = 2,
                        .max_body_bytes = 1024,
                        .max_header_bytes = 4096};
    char err[256];
    server = http_start(&http, api, err, sizeof err);
    if (!server)
        fuzz_fail("http_start: %s", err);
    port = http_bound_port(server);
    bool created;
    uint64_t existing;
    store->ops->init_pool(store, HF_SLICE_LIT("kv"), 0, 8, &created, &existing);
}

static int connect_server(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        fuzz_fail("cannot connect to the server: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Send everything (the server may close early: that is allowed). */
static void send_all(int fd, const uint8_t *p, size_t n, unsigned cut)
{
    uint32_t x = cut * 2654435761u + 7;
    while (n > 0) {
        size_t piece = n;
        if (cut) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            size_t want = 1 + x % 64;
            piece = want < n ? want : n;
        }
        ssize_t sent = send(fd, p, piece, MSG_NOSIGNAL);
        if (sent <= 0)
            return;
        p += sent, n -= (size_t)sent;
    }
}

/* Read until the server closes (true) or READ_TIMEOUT_MS pass (false). */
static bool read_all(int fd, char *buf, size_t cap, size_t *len)
{
    *len = 0;
    int64_t deadline = hf_clock_mono_ms() + READ_TIMEOUT_MS;
    for (;;) {
        int64_t left = deadline - hf_clock_mono_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
            return false;
        ssize_t got = recv(fd, buf + *len, cap - *len, 0);
        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return true;
        if (got < 0)
            return false;
        *len += (size_t)got;
        if (*len == cap)
            return true; /* enough to judge */
    }
}

/*
 * Nothing but "100 Continue" interim answers: allowed at the end of what the
 * server sent, for a request whose body the input did not complete (the
 * server then closes at the end of the input without a final answer).
 */
static bool only_continues(const char *p, size_t n)
{
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    size_t k = sizeof cont - 1;
    if (n == 0 || n % k)
        return false;
    for (size_t i = 0; i < n; i += k)
        if (memcmp(p + i, cont, k) != 0)
            return false;
    return true;
}

/* The bytes must be whole HTTP answers, none a 5xx. */
static void check_answers(const char *buf, size_t len, bool head)
{
    hf3fs_meta__http_reader r;
    memset(&r, 0, sizeof r);
    size_t off = 0;
    while (off < len) {
        hf3fs_meta__http_reader_init(&r, MAX_ANSWER, head);
        size_t used = 0;
        int rc = hf3fs_meta__http_feed(&r, buf + off, len - off, &used);
        if (rc == HF3FS_META__HTTP_MORE)
            rc = hf3fs_meta__http_eof(&r);
        if (rc != HF3FS_META__HTTP_DONE && only_continues(buf + off, len - off))
            break; /* the 100 Continue of a request left unfinished */
        if (rc != HF3FS_META__HTTP_DONE)
            fuzz_fail("the server sent something that is not a whole HTTP answer (%s) at byte "
                      "%zu: %.*s",
                      r.error ? r.error : "?", off, (int)(len - off > 300 ? 300 : len - off),
                      buf + off);
        if (r.status >= 500 && r.status != 505)
            fuzz_fail("the server answered %d: %.*s", r.status, (int)(len > 300 ? 300 : len), buf);
        off += used ? used : len - off;
        if (r.conn_close && off < len)
            fuzz_fail("%zu bytes after an answer with Connection: close: %.*s", len - off,
                      (int)(len - off > 300 ? 300 : len - off), buf + off);
    }
    hf3fs_meta__http_reader_free(&r);
}

static void check_alive(void)
{
    static const char health[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int fd = connect_server();
    send_all(fd, (const uint8_t *)health, sizeof health - 1, 0);
    static char buf[4096];
    size_t len;
    if (!read_all(fd, buf, sizeof buf, &len) || len < 12 || memcmp(buf + 9, "200", 3) != 0)
        fuzz_fail("GET /health after the input: %.*s", (int)len, buf);
    close(fd);
    fuzz_check_store(store, "an HTTP input");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static unsigned inputs;
    static char *buf;
    if (!server) {
        start_server();
        buf = malloc(MAX_ANSWER);
    }
    if (size == 0)
        return 0;
    unsigned cut = data[0] & 1 ? (data[0] >> 1) + 1 : 0;
    int64_t t0 = hf_clock_mono_ms();
    int fd = connect_server();
    static const char last[] = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    send_all(fd, data + 1, size - 1, cut);
    send_all(fd, (const uint8_t *)last, sizeof last - 1, 0);
    shutdown(fd, SHUT_WR);
    size_t len;
    if (!read_all(fd, buf, MAX_ANSWER, &len))
        fuzz_fail("the server did not close the connection within %d ms of the end of the "
                  "input (%zu bytes of answers)",
                  READ_TIMEOUT_MS, len);
    close(fd);
    /* An answer to HEAD has no body whatever its headers say: answers to a
     * mix of requests cannot be framed without knowing which was HEAD. */
    if (!memmem(data + 1, size - 1, "HEAD", 4))
        check_answers(buf, len, false);
    if (++inputs % 64 == 0 || hf_clock_mono_ms() - t0 > 1000)
        check_alive();
    return 0;
}
