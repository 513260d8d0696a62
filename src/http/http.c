/*
 * http.c: the HTTP/1.x front: event loops of our own on epoll, requests
 * parsed by http-parser (Debian's libhttp-parser, the parser Node.js used
 * for a decade). See http.h for what it promises.
 *
 * Why not a server library. libmicrohttpd served here first; on 1-key
 * requests it cost more per request than nginx (it zeroes its
 * per-connection pool after every request, formats a Date with gmtime and
 * allocates a response object per answer). What is left here is the part a
 * library cannot make cheaper: one read, one parse and one api_handle per
 * request, the answers of a batch of events sent together, no allocation in
 * the steady state.
 *
 * Threads and loops. `threads` loops, each a thread with its own epoll set.
 * All of them watch the one listening socket (EPOLLEXCLUSIVE: the kernel
 * wakes one); the loop that accepts a connection gives it to the loop with
 * the fewest connections (give), which serves it until it closes. A
 * request runs to completion on its loop's thread (api_handle may wait for
 * the log's sync: that is why persistent servers run many loops, and why
 * connections must be spread over them for their waits to share a sync).
 *
 * With fibers (config.fibers: over Redis), api_handle runs on a fiber of
 * the loop (util/fiber.h). One that parks (waiting for Redis) leaves its
 * conn busy: the loop goes on with other conns and the fibers' fd waits,
 * and the conn parses and sends nothing until the fiber ends and queues
 * its answer (the rest of its input is held in pending meanwhile). An
 * event on a busy conn's socket takes it out of the epoll set until then;
 * a close waits for the fiber. A stopping loop closes its conns, then
 * lets its parked requests end (each within the store's timeouts).
 *
 * A connection (conn) holds: the parser's state, the request being read
 * (path, the two headers we use, the body), and the answers not sent yet
 * (out). Bytes are read into the loop's buffer and parsed at once; the
 * parser copies what a request needs into the conn, so nothing of the input
 * is kept between reads, except when a client pipelines faster than it
 * reads its answers: past OUT_HIGH (64 KiB) of unsent answers the conn
 * parses no further request, stops reading and keeps its unparsed input
 * (pending) until the answers drain, so that a client that does not read
 * costs at most that much work.
 *
 * Limits (the parser's, in the order they act):
 *   - request line and headers: counted as they are parsed (path, header
 *     names and values, 4 bytes of separators per header). Past
 *     max_header_bytes: 414 while still in the path, else 431.
 *   - HTTP versions other than 1.0 and 1.1: 505.
 *   - Content-Length above max_body_bytes: 413 at once, before any 100
 *     Continue and without reading the body. A chunked body that grows past
 *     it is read and dropped (at most DROP_LIMIT more bytes, then the
 *     connection is cut) and answered 413 at its end.
 *   - anything the parser refuses (bad method, bad chunk size, two
 *     Content-Lengths, Content-Length with chunked, ...): 400.
 *   Every one of these answers closes the connection: the answer is sent,
 *   the sending side shut down, and what the client still sends is read and
 *   dropped for up to LINGER_S seconds (so that the client sees the answer
 *   rather than a reset), then the socket is closed.
 *
 * Timeouts. Each loop keeps its connections on a list, least recently
 * active first (activity: bytes read or sent). Once a second it closes
 * those idle for idle_timeout_s (lingering ones after LINGER_S).
 *
 * Deadlines. Activity is not progress: a client that sends a byte every few
 * seconds is never idle. So a request must also arrive in time (as nginx's
 * client_header_timeout and Apache's mod_reqtimeout ask): its request line
 * and headers within header_timeout_s of its first byte (for a
 * connection's first request, of the connection's opening), its body within
 * body_timeout_s of the headers' end plus a second per body_min_rate bytes
 * received. Each loop keeps a second list, of its connections waiting for a
 * request to complete (the request list), in the order their requests
 * began: the once-a-second sweep walks it from the oldest and stops at the
 * first too young to be late. A late request is answered 408 and its
 * connection closes; a connection that never sent a byte is closed without
 * an answer.
 *
 * Shedding. A connection accepted while max_connections are open is not
 * refused if the accepting loop can shed one of its own: the one furthest
 * from being served, the older of (a) the request-list head, whose request
 * began longest ago and is still incomplete, and (b) the least recently
 * active connection between requests (idle on keep-alive, lingering, or
 * with answers its client does not read). A connection whose request is
 * being answered (parked on its fiber) is never shed. If the accepting loop
 * has none to shed, it admits the connection past the limit (by at most
 * one per loop) and asks the loop with the most connections to shed one of
 * its own when it wakes. So a client that sends whole requests gets in even
 * while others hold more connections than the table has; each shed
 * connection is counted.
 *
 * Answers: "HTTP/1.1 <status> <reason>", Date (formatted once a second per
 * loop), Content-Type and Content-Length (none for 204),
 * WWW-Authenticate for a 401, "Connection: close" when the connection ends
 * after it, "Connection: keep-alive" to an HTTP/1.0 client that asked for it.
 * A HEAD request gets the headers of its GET answer without the body.
 *
 * Connections are counted for /metrics (api_count_connection): opened and
 * closed here, shed, timed out, and refused when accepted past
 * max_connections with nothing to shed (then closed at once, so that the
 * client sees it closed instead of hanging in the listen backlog). Threads accepting at the same moment may each let one through:
 * the count can pass the limit by at most threads - 1, briefly.
 *
 * Access log (--access-log): one line per answer, after it is queued:
 *   access: 127.0.0.1:40212 "POST /keys/batch_allocate HTTP/1.1" 200 1234 0.000213
 * (client, method, path with bytes outside printable ASCII as \xHH, version,
 * status, body bytes, seconds since the request began), and with
 * --auth-token-file " tenant=NAME" (the token's tenant, "-" for none).
 */
#include "http/http.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/fiber.h"
#include "util/log.h"
#include "util/fmt.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

#define READ_CHUNK (64u * 1024)        /* the loop's read buffer */
#define BODY_KEEP (64u * 1024)         /* body buffer kept between requests */
#define OUT_KEEP (64u * 1024)          /* answer buffer kept once drained */
#define OUT_HIGH (64u * 1024)          /* unsent answer bytes past which no request is parsed */
#define DROP_LIMIT (64u * 1024 * 1024) /* body bytes dropped past the limit, then cut */
#define LINGER_S 2
#define ACCEPT_BURST 8 /* then the loop sees its connections close: dead ones free their slots */
#define MAX_EVENTS 64
#define FIELD_MAX 16 /* header names we look at are shorter */

typedef struct loop loop;

/* A conn's first member: tells it from a fiber's fd wait in an epoll event
 * (util/fiber.h). */
#define CONN_TAG 0x434f4e4eu

typedef struct conn {
    uint32_t tag;
    loop *loop;
    int fd;
    struct conn *prev, *next; /* the loop's list, least recently active first */
    struct conn *flush_next;  /* the loop's answers to send after this batch */
    /* the loop's request list: waiting for a request to complete, in the
     * order the requests began (see "Deadlines") */
    struct conn *rprev, *rnext;
    bool waiting;        /* on the request list */
    bool request_bytes;  /* a byte of the request it waits for has come */
    uint64_t began_ms;   /* the request's first byte; the connection's opening */
    uint64_t headers_ms; /* the headers' end; 0 while they are read */
    bool flush_queued;
    uint64_t active_ms; /* coarse monotonic milliseconds of the last bytes either way */
    uint32_t events;    /* what epoll watches now */
    http_parser parser;

    /* the request being read */
    hf_buf url; /* at most max_header_bytes */
    size_t header_bytes;
    char field[FIELD_MAX];
    size_t field_len;
    bool in_value;
    enum { H_OTHER, H_AUTHORIZATION, H_EXPECT } header;
    hf_buf auth; /* NUL-terminated; at most max_header_bytes + 1 */
    bool has_auth;
    bool has_host;
    char expect[16];
    size_t expect_len;
    hf_buf body;    /* at most max_body_bytes, or the declared length */
    size_t dropped; /* body bytes received past the limit */
    bool too_large;
    bool complete; /* a whole request is parsed: answer it */
    int refuse;    /* an answer that ends the connection: 413 early, 414, 431, 505 */
    uint64_t started_ns;

    /* answers */
    hf_buf out; /* no maximum: what is queued is bounded by OUT_HIGH */
    size_t out_sent;
    char *pending; /* input held while answers back up (OUT_HIGH) */
    size_t pending_len;
    bool closing;   /* no further requests: shut down our side once out is sent */
    bool lingering; /* out sent, our side shut down, reading to drop */
    bool peer_done; /* the client ended its side: close once out is sent */
    api_response resp;

    /* with fibers: a request's answer waits on its fiber (parked). Until it
     * ends, no input is parsed and nothing is sent; an event on the socket
     * takes it out of the epoll set (unwatched) until then; a close (doomed)
     * waits for it too. */
    bool busy;
    bool unwatched;
    bool doomed;
} conn;

struct loop {
    http_server *server;
    int epfd;
    int wake_fd;
    int spare_fd;           /* given up to accept-and-close when out of descriptors */
    atomic_uint nconns;     /* connections given to this loop and not closed yet */
    atomic_uint shed_asked; /* connections other loops admitted past the limit */
    pthread_mutex_t inbox_lock;
    int *inbox; /* accepted by another loop, to be opened here */
    size_t inbox_len, inbox_cap;
    pthread_t thread;
    pthread_t owner; /* the thread running the loop (for HF_ASSERT) */
    bool started;
    conn *head, *tail;
    size_t listed;       /* conns on the list: those opened here and not closed */
    conn *rhead, *rtail; /* the request list, oldest request first */
    conn *flush_head;    /* conns with answers to send once the batch is handled */
    uint64_t swept_s;
    time_t date_at;
    char date[40];
    hf_sched *sched; /* with fibers: the requests parked on this loop */
    char readbuf[READ_CHUNK];
};

struct http_server {
    api_t *api;
    http_config config;
    int listen_fd;
    uint16_t port;
    unsigned nloops;
    loop *loops;
    atomic_bool stopping;
    atomic_uint open_connections;
    int too_large_len;
    char too_large_body[128];
};

/* ---- time ---- */

static const char *http_date(loop *lp)
{
    time_t now = time(NULL);
    if (now != lp->date_at) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(lp->date, sizeof lp->date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        lp->date_at = now;
    }
    return lp->date;
}

/* ---- buffers ---- */

static void out_append(conn *c, const void *data, size_t len)
{
    hf_buf_append(&c->out, data, len);
}

/* ---- the connection list and epoll ---- */

/* A loop's conns, list and counts are its thread's alone. */
HF_ASSERT_HELPER static bool on_loop_thread(const loop *lp)
{
    return pthread_equal(lp->owner, pthread_self());
}

/* The connection counts agree: each listed conn was given to lp (nconns
 * counts those given, opened or not yet), and each given one is open for
 * the server. Read in this order, from lp's thread: nconns can only grow
 * meanwhile (only lp lowers it), and open_connections never counts fewer
 * than every loop's nconns (raised before them, lowered after). */
HF_ASSERT_HELPER static bool counts_agree(loop *lp)
{
    unsigned given = atomic_load(&lp->nconns);
    return lp->listed <= given && given <= atomic_load(&lp->server->open_connections);
}

static void list_unlink(loop *lp, conn *c)
{
    /* c is on lp's list: its neighbours point back at it */
    HF_ASSERT(c->prev ? c->prev->next == c : lp->head == c);
    HF_ASSERT(c->next ? c->next->prev == c : lp->tail == c);
    HF_ASSERT(lp->listed > 0);
    lp->listed--;
    if (c->prev)
        c->prev->next = c->next;
    else
        lp->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    else
        lp->tail = c->prev;
    c->prev = c->next = NULL;
}

static void list_append(loop *lp, conn *c)
{
    /* c is on no list, and the list stays ordered by activity (sweep stops
     * at the first conn that is not idle) */
    HF_ASSERT(!c->prev && !c->next && lp->head != c);
    HF_ASSERT(!lp->tail || lp->tail->active_ms <= c->active_ms);
    lp->listed++;
    c->prev = lp->tail;
    c->next = NULL;
    if (lp->tail)
        lp->tail->next = c;
    else
        lp->head = c;
    lp->tail = c;
}

static void touch(conn *c)
{
    c->active_ms = hf_clock_mono_coarse_ms();
    if (c->loop->tail != c) {
        list_unlink(c->loop, c);
        list_append(c->loop, c);
    }
}

/* The request list: a connection joins it when it opens and when a
 * request begins, and leaves it when its request is complete, refused or
 * timed out, or when it closes. Times are read on the loop's thread from
 * one monotonic clock, so appending keeps the list in order. */
static void wait_for_request(conn *c, uint64_t now_ms)
{
    loop *lp = c->loop;
    HF_ASSERT(!c->waiting && !c->rprev && !c->rnext);
    HF_ASSERT(!lp->rtail || lp->rtail->began_ms <= now_ms);
    c->waiting = true;
    c->request_bytes = false;
    c->began_ms = now_ms;
    c->headers_ms = 0;
    c->rprev = lp->rtail;
    if (lp->rtail)
        lp->rtail->rnext = c;
    else
        lp->rhead = c;
    lp->rtail = c;
}

static void request_done(conn *c)
{
    loop *lp = c->loop;
    if (!c->waiting)
        return;
    HF_ASSERT(c->rprev ? c->rprev->rnext == c : lp->rhead == c);
    HF_ASSERT(c->rnext ? c->rnext->rprev == c : lp->rtail == c);
    if (c->rprev)
        c->rprev->rnext = c->rnext;
    else
        lp->rhead = c->rnext;
    if (c->rnext)
        c->rnext->rprev = c->rprev;
    else
        lp->rtail = c->rprev;
    c->rprev = c->rnext = NULL;
    c->waiting = false;
}

static void watch(conn *c, uint32_t events)
{
    if (events == c->events && !c->unwatched)
        return;
    struct epoll_event ev = {.events = events, .data.ptr = c};
    if (epoll_ctl(c->loop->epfd, c->unwatched ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c->fd, &ev) == 0) {
        c->events = events;
        c->unwatched = false;
    }
}

/* Out of the epoll set while its request is parked (see conn.busy). */
static void unwatch(conn *c)
{
    if (c->unwatched)
        return;
    epoll_ctl(c->loop->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->unwatched = true;
    c->events = 0;
}

/* A connection given to lp is gone: the counts and /metrics. */
static void count_closed(loop *lp)
{
    atomic_fetch_sub(&lp->nconns, 1);
    atomic_fetch_sub(&lp->server->open_connections, 1);
    api_count_connection(lp->server->api, API_CONNECTION_CLOSED);
}

static void conn_close(conn *c)
{
    loop *lp = c->loop;
    HF_ASSERT(on_loop_thread(lp)); /* a conn is its loop's alone */
    if (c->busy) {                 /* its fiber holds it: closed when the fiber ends */
        c->doomed = true;
        unwatch(c);
        return;
    }
    HF_ASSERT(c->out_sent <= c->out.len && (c->pending != NULL) == (c->pending_len > 0));
    /* A conn whose answer was queued in this batch can still be closed by a
     * later read of the same batch (the client reset the connection): it
     * leaves the send list, or the sends after the batch would use it freed. */
    if (c->flush_queued) {
        conn **at = &lp->flush_head;
        while (*at != c)
            at = &(*at)->flush_next;
        *at = c->flush_next;
        c->flush_queued = false;
    }
    list_unlink(lp, c);
    request_done(c);
    /* Leave the epoll set before closing: close() alone removes the socket
     * from it only when no other descriptor refers to the socket, and the
     * log's snapshot child holds copies of every descriptor from its fork
     * until it closes them. Meanwhile the socket's events would still come,
     * carrying this conn's pointer after it is freed. */
    if (!c->unwatched)
        epoll_ctl(lp->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    api_response_free(&c->resp);
    hf_buf_free(&c->url);
    hf_buf_free(&c->auth);
    hf_buf_free(&c->body);
    hf_buf_free(&c->out);
    free(c->pending);
    free(c);
    count_closed(lp);
    HF_ASSERT(counts_agree(lp));
}

/* ---- the access log ---- */

/* "host:port" or "[v6]:port" of the client; "-" if unknown. */
static void client_address(int fd, char *out, size_t len)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss); /* getpeername fills it; the analyzer does not know */
    socklen_t sl = sizeof ss;
    char host[64], port[16];
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, len, "-");
        return;
    }
    bool v6 = ss.ss_family == AF_INET6;
    snprintf(out, len, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* At most 256 bytes, printable ASCII but for '"' and '\\', everything else
 * as \xHH (a decoded path may hold newlines). */
static void loggable(const char *s, size_t slen, char *out, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < slen && n + 5 < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, len - n, "\\x%02x", ch);
        if (n >= 256 && i + 1 < slen) {
            n += (size_t)snprintf(out + n, len - n, "...");
            break;
        }
    }
    out[n] = '\0';
}

/* tenant: the request's (api_response.tenant), or NULL (no auth, or an
 * answer of this layer's own). */
static void log_access(const conn *c, int status, size_t bytes, const char *tenant)
{
    char client[96], path[300];
    client_address(c->fd, client, sizeof client);
    loggable(c->url.ptr, c->url.len, path, sizeof path);
    uint64_t ns = hf_clock_mono_ns() - c->started_ns;
    log_line("access", "%s \"%s %s HTTP/%u.%u\" %d %zu %" PRIu64 ".%06" PRIu64 "%s%s", client,
             http_method_str((enum http_method)c->parser.method), path, c->parser.http_major,
             c->parser.http_minor, status, bytes, ns / 1000000000u, ns % 1000000000u / 1000u,
             tenant ? " tenant=" : "", tenant ? tenant : "");
}

/* ---- answers ---- */

static const char *reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
    }
}

static char *put(char *dst, const char *s)
{
    size_t n = strlen(s);
    memcpy(dst, s, n);
    return dst + n;
}

/* Queue one answer. `keep_alive_10`: an HTTP/1.0 client asked to keep the
 * connection. The body is left out for HEAD (`with_body` false). The head
 * is assembled by hand: snprintf parses its format at every call, a cost
 * that shows on 1-key requests. */
static void queue_answer(conn *c, int status, const char *content_type,
                         const char *www_authenticate, const char *body, size_t len, bool with_body,
                         bool keep_alive_10)
{
    if (status < 100 || status > 999)
        status = 500;
    size_t room = 160 + (content_type ? strlen(content_type) : 0) +
                  (www_authenticate ? strlen(www_authenticate) : 0);
    hf_buf_reserve(&c->out, room);
    char *start = c->out.ptr + c->out.len, *d = start;
    d = put(d, "HTTP/1.1 ");
    d = hf_put_uint(d, (uint64_t)status);
    *d++ = ' ';
    d = put(d, reason(status));
    d = put(d, "\r\nDate: ");
    d = put(d, http_date(c->loop));
    d = put(d, "\r\n");
    if (status != 204) {
        if (content_type) {
            d = put(d, "Content-Type: ");
            d = put(d, content_type);
            d = put(d, "\r\n");
        }
        d = put(d, "Content-Length: ");
        d = hf_put_uint(d, len);
        d = put(d, "\r\n");
    }
    if (www_authenticate) {
        d = put(d, "WWW-Authenticate: ");
        d = put(d, www_authenticate);
        d = put(d, "\r\n");
    }
    if (c->closing)
        d = put(d, "Connection: close\r\n");
    else if (keep_alive_10)
        d = put(d, "Connection: keep-alive\r\n");
    d = put(d, "\r\n");
    c->out.len += (size_t)(d - start);
    if (status != 204 && with_body && len)
        out_append(c, body, len);
}

/* An answer of the HTTP layer itself, {"detail": ...}; it ends the
 * connection. */
static void queue_refusal(conn *c, int status, const char *detail)
{
    http_server *server = c->loop->server;
    char body[192];
    const char *text = body;
    int len;
    if (status == 413) {
        text = server->too_large_body;
        len = server->too_large_len;
    } else {
        len = snprintf(body, sizeof body, "{\"detail\":\"%s\"}", detail);
    }
    c->closing = true;
    request_done(c);
    api_count_http_answer(server->api, status);
    queue_answer(c, status, "application/json", NULL, text, (size_t)len, true, false);
    if (server->config.access_log)
        log_access(c, status, (size_t)len, NULL);
}

static int hex_value(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)(ch | 0x20);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* The path without the query string, %XX decoded in place (as
 * libmicrohttpd did; a '%' not followed by two hex digits stays). */
static hf_slice decoded_path(conn *c)
{
    char *url = c->url.ptr;
    size_t end = 0;
    while (end < c->url.len && url[end] != '?' && url[end] != '#')
        end++;
    size_t n = 0;
    for (size_t i = 0; i < end; i++) {
        int hi, lo;
        if (url[i] == '%' && i + 2 < end && (hi = hex_value(url[i + 1])) >= 0 &&
            (lo = hex_value(url[i + 2])) >= 0) {
            url[n++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            url[n++] = url[i];
        }
    }
    c->url.len = n; /* the access log shows the decoded path */
    return (hf_slice){url, n};
}

static void queue_flush(conn *c)
{
    if (!c->flush_queued) { /* sent after the batch: see loop_run */
        c->flush_queued = true;
        c->flush_next = c->loop->flush_head;
        c->loop->flush_head = c;
    }
}

/* The api's answer to the request parsed. */
static void answer_api(conn *c)
{
    http_server *server = c->loop->server;
    const http_parser *p = &c->parser;
    bool keep_alive_10 = !c->closing && p->http_minor == 0;
    hf_slice path = decoded_path(c);
    api_handle(server->api, http_method_str((enum http_method)p->method), path,
               c->has_auth ? c->auth.ptr : NULL, c->body.ptr, c->body.len, &c->resp);
    const api_response *r = &c->resp;
    queue_answer(c, r->status, r->content_type, r->www_authenticate, r->body.ptr, r->body.len,
                 p->method != HTTP_HEAD, keep_alive_10);
    if (server->config.access_log)
        log_access(c, r->status, r->status == 204 ? 0 : r->body.len, r->tenant);
    api_response_trim(&c->resp);
    hf_buf_reset(&c->body, BODY_KEEP);
}

/* answer_api on a fiber: if it parked, the conn is busy until this ends. */
static void answer_on_fiber(void *arg)
{
    conn *c = arg;
    answer_api(c);
    if (c->busy) { /* it parked: the loop moved on, and takes the conn up again */
        c->busy = false;
        if (c->doomed)
            conn_close(c);
        else
            queue_flush(c);
    }
}

static void answer_request(conn *c)
{
    http_parser *p = &c->parser;
    if (!http_should_keep_alive(p))
        c->closing = true;
    if (c->too_large) {
        queue_refusal(c, 413, NULL);
    } else if (p->http_minor == 1 && !c->has_host) {
        queue_refusal(c, 400, "Bad request: an HTTP/1.1 request needs a Host header");
    } else if (c->loop->sched) {
        if (!hf_sched_spawn(c->loop->sched, answer_on_fiber, c))
            c->busy = true;
        return;
    } else {
        answer_api(c);
        return;
    }
    hf_buf_reset(&c->body, BODY_KEEP);
}

/* ---- the parser's callbacks ---- */

static bool over_header_limit(conn *c, size_t more)
{
    c->header_bytes += more;
    return c->header_bytes > c->loop->server->config.max_header_bytes;
}

static int on_message_begin(http_parser *p)
{
    conn *c = p->data;
    if (!c->waiting) /* a later request: its deadline runs from now */
        wait_for_request(c, hf_clock_mono_coarse_ms());
    c->request_bytes = true;
    c->url.len = 0;
    c->header_bytes = 0;
    c->field_len = 0;
    c->in_value = false;
    c->header = H_OTHER;
    c->has_auth = false;
    c->has_host = false;
    c->auth.len = 0;
    c->expect_len = 0;
    hf_buf_reset(&c->body, BODY_KEEP);
    c->dropped = 0;
    c->too_large = false;
    c->complete = false;
    if (c->loop->server->config.access_log)
        c->started_ns = hf_clock_mono_ns();
    return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (over_header_limit(c, len) || !hf_buf_append(&c->url, at, len)) {
        c->refuse = 414;
        return -1;
    }
    return 0;
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (over_header_limit(c, len + (c->in_value || !c->field_len ? 4 : 0))) {
        c->refuse = 431;
        return -1;
    }
    if (c->in_value) {
        c->in_value = false;
        c->field_len = 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (c->field_len < FIELD_MAX)
            c->field[c->field_len] = (char)(at[i] | 0x20);
        c->field_len++;
    }
    return 0;
}

static bool field_is(const conn *c, const char *name)
{
    size_t n = strlen(name);
    return c->field_len == n && memcmp(c->field, name, n) == 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    if (over_header_limit(c, len)) {
        c->refuse = 431;
        return -1;
    }
    if (!c->in_value) {
        c->in_value = true;
        c->header = H_OTHER;
        if (field_is(c, "authorization") && !c->has_auth) { /* the first one counts */
            c->header = H_AUTHORIZATION;
            c->has_auth = true;
            c->auth.len = 0;
        } else if (field_is(c, "host")) {
            c->has_host = true;
        } else if (field_is(c, "expect")) {
            c->header = H_EXPECT;
            c->expect_len = 0;
        }
    }
    if (c->header == H_AUTHORIZATION) {
        if (!hf_buf_reserve(&c->auth, len + 1)) { /* within the limit checked above */
            c->refuse = 431;
            return -1;
        }
        memcpy(c->auth.ptr + c->auth.len, at, len);
        c->auth.len += len;
        c->auth.ptr[c->auth.len] = '\0';
    } else if (c->header == H_EXPECT) {
        for (size_t i = 0; i < len; i++, c->expect_len++)
            if (c->expect_len < sizeof c->expect)
                c->expect[c->expect_len] = (char)(at[i] | 0x20);
    }
    return 0;
}

static int on_headers_complete(http_parser *p)
{
    conn *c = p->data;
    http_server *server = c->loop->server;
    if (p->http_major != 1 || p->http_minor > 1) {
        c->refuse = 505;
        http_parser_pause(p, 1);
        return 0;
    }
    c->headers_ms = hf_clock_mono_coarse_ms();
    bool chunked = p->flags & F_CHUNKED;
    bool has_length = !chunked && (p->flags & F_CONTENTLENGTH);
    if (has_length && p->content_length > server->config.max_body_bytes) {
        c->refuse = 413; /* now: no 100 Continue, the body is not read */
        http_parser_pause(p, 1);
        return 0;
    }
    /* The body's buffer doubles as bytes arrive, up to the declared length
     * (so that a body with Content-Length ends in a buffer of exactly its
     * size) or the limit: memory follows what was received, not what a
     * client announced. Past the limit, on_body drops it. */
    hf_buf_set_max(&c->body,
                   has_length ? (size_t)p->content_length : server->config.max_body_bytes);
    bool body_expected = chunked || (has_length && p->content_length > 0);
    if (body_expected && c->expect_len == 12 && memcmp(c->expect, "100-continue", 12) == 0 &&
        p->http_minor == 1) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        out_append(c, cont, sizeof cont - 1);
    }
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    size_t max = c->loop->server->config.max_body_bytes;
    if (!c->too_large && hf_buf_append(&c->body, at, len))
        return 0;
    if (!c->too_large) {
        c->too_large = true;
        c->dropped = c->body.len;
        c->body.len = 0;
    }
    c->dropped += len;
    if (c->dropped - max > DROP_LIMIT) {
        log_msg(LOG_DEBUG, "dropping a connection that sent over %zu body bytes",
                max + (size_t)DROP_LIMIT);
        return -1; /* an endless upload: cut */
    }
    return 0;
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    c->complete = true;
    request_done(c);
    http_parser_pause(p, 1);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- reading and writing ---- */

/* What epoll should watch: the answers' sending while some are unsent;
 * new input unless input is held (pending) or no request may follow. */
static uint32_t wanted(const conn *c)
{
    uint32_t events = c->out_sent < c->out.len ? EPOLLOUT : 0;
    if (c->lingering || (!c->pending && !c->closing && !c->peer_done))
        events |= EPOLLIN;
    return events;
}

/*
 * Parse and answer what arrived. Stops at the first answer that ends the
 * connection, or when unsent answers pass OUT_HIGH (the rest of the input
 * is then held in pending until they drain). false: the connection must be
 * cut without an answer.
 */
static bool feed(conn *c, const char *data, size_t len)
{
    while (len > 0 && !c->closing) {
        size_t n = http_parser_execute(&c->parser, &parser_settings, data, len);
        HF_ASSERT(n <= len);
        data += n;
        len -= n;
        enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
        if (e == HPE_PAUSED) {
            http_parser_pause(&c->parser, 0);
            if (c->refuse) { /* 413 (its own text) or 505 */
                queue_refusal(c, c->refuse,
                              c->refuse == 505 ? "HTTP version not supported: "
                                                 "only HTTP/1.0 and HTTP/1.1 are served"
                                               : NULL);
                return true;
            }
            if (c->complete) {
                c->complete = false;
                answer_request(c);
                if (!c->closing && len > 0 && (c->busy || c->out.len - c->out_sent > OUT_HIGH)) {
                    HF_ASSERT(!c->pending); /* held input is fed before more is read */
                    c->pending = hf_xmalloc(len);
                    memcpy(c->pending, data, len);
                    c->pending_len = len;
                    return true;
                }
            }
            continue;
        }
        if (e == HPE_OK)
            continue; /* n == len: all taken */
        if (e == HPE_CB_body)
            return false; /* an endless upload (on_body) */
        if (c->refuse == 414)
            queue_refusal(c, 414,
                          "Request line too long: the limit for the request line "
                          "and headers is --max-header-bytes");
        else if (c->refuse == 431 || e == HPE_HEADER_OVERFLOW)
            queue_refusal(c, 431,
                          "Request headers too large: the limit for the request line "
                          "and headers is --max-header-bytes");
        else {
            char detail[128];
            snprintf(detail, sizeof detail, "Bad request: %s", http_errno_description(e));
            queue_refusal(c, 400, detail);
        }
        return true;
    }
    return true;
}

/*
 * Send what is queued, then move on: close when the client has ended its
 * side, shut down our side and linger after a last answer, parse held
 * input once the answers drained. false: the connection was closed.
 */
static bool flush(conn *c)
{
    HF_ASSERT(on_loop_thread(c->loop));
    if (c->busy)
        return true; /* its answers go in order, after the parked one's */
    HF_ASSERT(c->out_sent <= c->out.len && (!c->lingering || c->closing));
    while (c->out_sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.ptr + c->out_sent, c->out.len - c->out_sent, MSG_NOSIGNAL);
        if (n > 0) {
            HF_ASSERT((size_t)n <= c->out.len - c->out_sent);
            c->out_sent += (size_t)n;
            touch(c);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            watch(c, wanted(c));
            return true;
        } else {
            conn_close(c); /* the client is gone */
            return false;
        }
    }
    c->out_sent = 0;
    hf_buf_reset(&c->out, OUT_KEEP);
    if (c->peer_done) {
        conn_close(c);
        return false;
    }
    if (c->closing && !c->lingering) {
        shutdown(c->fd, SHUT_WR);
        c->lingering = true; /* sweep closes it after LINGER_S at most */
    }
    if (c->pending && !c->closing) {
        char *held = c->pending;
        size_t held_len = c->pending_len;
        c->pending = NULL;
        c->pending_len = 0;
        bool ok = feed(c, held, held_len);
        free(held);
        if (!ok) {
            conn_close(c);
            return false;
        }
        return flush(c);
    }
    watch(c, wanted(c));
    return true;
}

static void on_readable(conn *c)
{
    loop *lp = c->loop;
    HF_ASSERT(on_loop_thread(lp));
    /* lingering only after the last answer; input held only while answers wait */
    HF_ASSERT(!c->lingering || c->closing);
    HF_ASSERT((c->pending != NULL) == (c->pending_len > 0) && c->out_sent <= c->out.len);
    for (int reads = 0; reads < 16; reads++) {
        ssize_t n = read(c->fd, lp->readbuf, sizeof lp->readbuf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) { /* the end of the client's side, or an error */
            if (c->lingering || c->out_sent == c->out.len || n < 0) {
                conn_close(c);
                return;
            }
            c->peer_done = true; /* send what is queued, then close */
            break;
        }
        if (c->lingering)
            continue; /* dropped; the linger time is not extended */
        touch(c);
        if (c->closing || c->pending)
            break; /* EPOLLIN is off then: woken by EPOLLHUP or EPOLLERR */
        if (!feed(c, lp->readbuf, (size_t)n)) {
            conn_close(c);
            return;
        }
        if ((size_t)n < sizeof lp->readbuf || c->pending || c->closing || c->busy)
            break;
    }
    queue_flush(c);
}

/* ---- accepting ---- */

/* A connection this loop was given (counted as open already). */
static void conn_open(loop *lp, int fd)
{
    http_server *server = lp->server;
    HF_ASSERT(on_loop_thread(lp));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = hf_xcalloc(1, sizeof *c);
    c->tag = CONN_TAG;
    c->loop = lp;
    c->fd = fd;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    api_response_init(&c->resp, server->api);
    hf_buf_init(&c->url, server->config.max_header_bytes);
    hf_buf_init(&c->auth, server->config.max_header_bytes + 1);
    hf_buf_init(&c->body, server->config.max_body_bytes);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        log_msg(LOG_WARN, "http: cannot watch a new connection: %s", strerror(errno));
        api_response_free(&c->resp);
        free(c);
        close(fd);
        count_closed(lp);
        return;
    }
    c->events = EPOLLIN;
    c->active_ms = hf_clock_mono_coarse_ms();
    list_append(lp, c);
    wait_for_request(c, hf_clock_mono_coarse_ms());
    HF_ASSERT(counts_agree(lp));
}

/* Open the connections other loops accepted for this one. */
static void take_inbox(loop *lp)
{
    pthread_mutex_lock(&lp->inbox_lock);
    int *fds = lp->inbox;
    size_t n = lp->inbox_len;
    lp->inbox = NULL;
    lp->inbox_len = lp->inbox_cap = 0;
    pthread_mutex_unlock(&lp->inbox_lock);
    for (size_t i = 0; i < n; i++)
        conn_open(lp, fds[i]);
    free(fds);
}

/* Wake lp out of epoll_wait (from any thread): its inbox, its fibers, a stop. */
static void wake_loop(void *arg)
{
    loop *lp = arg;
    uint64_t one = 1;
    if (write(lp->wake_fd, &one, sizeof one) < 0)
        log_msg(LOG_WARN, "http: cannot wake an event loop: %s", strerror(errno));
}

/*
 * A new connection goes to the loop with the fewest (this one on a tie), so
 * that requests that wait (for the log's sync, under --fsync always) wait
 * on different threads and share a sync, rather than queue on one.
 */
static void give(loop *lp, int fd)
{
    http_server *server = lp->server;
    loop *best = lp;
    unsigned least = atomic_load(&lp->nconns);
    for (unsigned i = 0; i < server->nloops && least > 0; i++) {
        unsigned n = atomic_load(&server->loops[i].nconns);
        if (n < least) {
            least = n;
            best = &server->loops[i];
        }
    }
    atomic_fetch_add(&best->nconns, 1);
    if (best == lp) {
        conn_open(lp, fd);
        return;
    }
    pthread_mutex_lock(&best->inbox_lock);
    best->inbox = hf_grow(best->inbox, &best->inbox_cap, best->inbox_len + 1, sizeof *best->inbox);
    best->inbox[best->inbox_len++] = fd;
    pthread_mutex_unlock(&best->inbox_lock);
    wake_loop(best);
}

/*
 * Close the connection of lp furthest from being served (see "Shedding"),
 * to admit a new one. false if every one is being served.
 */
static bool shed_one(loop *lp)
{
    HF_ASSERT(on_loop_thread(lp));
    conn *between = lp->head; /* least recently active first */
    while (between && (between->busy || between->waiting))
        between = between->next;
    conn *late = lp->rhead;
    HF_ASSERT(!late || !late->busy);
    conn *victim = between;
    /* the request list's head began waiting before the idle one was last
     * active (a tie goes to the idle one, which has nothing under way) */
    if (late && (!between || late->began_ms < between->active_ms))
        victim = late;
    if (!victim)
        return false;
    api_count_connection(lp->server->api, API_CONNECTION_SHED);
    log_msg(LOG_DEBUG, "http: at --max-connections: shed a connection %s",
            victim == late ? "whose request is the oldest incomplete one" : "between requests");
    conn_close(victim);
    return true;
}

/* Ask the loop with the most connections but lp to shed one (shed_asked,
 * handled when it wakes). false if no other loop has one. */
static bool ask_to_shed(loop *lp)
{
    http_server *server = lp->server;
    loop *most = NULL;
    unsigned n = 0;
    for (unsigned i = 0; i < server->nloops; i++) {
        unsigned k = atomic_load(&server->loops[i].nconns);
        if (&server->loops[i] != lp && k > n) {
            n = k;
            most = &server->loops[i];
        }
    }
    if (!most)
        return false;
    atomic_fetch_add(&most->shed_asked, 1);
    wake_loop(most);
    return true;
}

static void on_acceptable(loop *lp)
{
    http_server *server = lp->server;
    for (int i = 0; i < ACCEPT_BURST; i++) {
        int fd = accept4(server->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if ((errno == EMFILE || errno == ENFILE) && lp->spare_fd >= 0) {
                /* out of descriptors: take one off the backlog and close it,
                 * rather than leave it to wake every loop again at once */
                close(lp->spare_fd);
                fd = accept(server->listen_fd, NULL, NULL);
                if (fd >= 0)
                    close(fd);
                lp->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                log_msg(LOG_WARN, "http: out of file descriptors: refused a connection");
                api_count_connection(server->api, API_CONNECTION_REFUSED);
            }
            return;
        }
        unsigned now_open = atomic_load(&server->open_connections);
        if (now_open >= server->config.max_connections && !shed_one(lp) &&
            (now_open >= server->config.max_connections + server->nloops - 1 || !ask_to_shed(lp))) {
            close(fd);
            api_count_connection(server->api, API_CONNECTION_REFUSED);
            continue;
        }
        atomic_fetch_add(&server->open_connections, 1);
        api_count_connection(server->api, API_CONNECTION_OPENED);
        give(lp, fd);
    }
}

/* ---- the loop ---- */

static void sweep(loop *lp, uint64_t now)
{
    unsigned idle = lp->server->config.idle_timeout_s;
    uint64_t first = idle && idle < LINGER_S ? idle : LINGER_S;
    conn *c = lp->head;
    while (c && now - c->active_ms / 1000u >= first) {
        conn *next = c->next;
        /* a busy conn is not idle: its request runs (within the store's
         * timeouts), and its answer resets the clock */
        if (!c->busy && (c->lingering || (idle && now - c->active_ms / 1000u >= idle)))
            conn_close(c);
        c = next;
    }
}

/* When c's request is late: the headers' deadline, then the body's. */
static uint64_t request_deadline_ms(const conn *c, const http_config *cfg)
{
    if (!c->headers_ms)
        return cfg->header_timeout_s ? c->began_ms + cfg->header_timeout_s * 1000u : UINT64_MAX;
    if (!cfg->body_timeout_s)
        return UINT64_MAX;
    uint64_t got = c->too_large ? c->dropped : c->body.len;
    uint64_t grace = cfg->body_min_rate ? got * 1000u / cfg->body_min_rate : 0;
    return c->headers_ms + cfg->body_timeout_s * 1000u + grace;
}

/* Answer 408 to the requests past their deadline (see "Deadlines"). */
static void sweep_requests(loop *lp, uint64_t now_ms)
{
    const http_config *cfg = &lp->server->config;
    unsigned h = cfg->header_timeout_s, b = cfg->body_timeout_s;
    if (!h && !b)
        return;
    /* no deadline comes sooner after a request's beginning than this */
    uint64_t soonest = (uint64_t)(h && b ? (h < b ? h : b) : h ? h : b) * 1000u;
    for (conn *c = lp->rhead, *next; c && c->began_ms + soonest <= now_ms; c = next) {
        next = c->rnext;
        HF_ASSERT(c->waiting && !c->busy && !c->closing);
        if (now_ms < request_deadline_ms(c, cfg))
            continue;
        api_count_connection(lp->server->api, API_CONNECTION_TIMED_OUT);
        if (!c->request_bytes) { /* nothing sent: nothing to answer */
            conn_close(c);
            continue;
        }
        queue_refusal(c, 408,
                      c->headers_ms ? "Request timeout: the body must arrive within "
                                      "--body-timeout seconds of the headers, plus one second "
                                      "per --body-min-rate bytes received"
                                    : "Request timeout: the request line and headers must "
                                      "arrive within --header-timeout seconds");
        queue_flush(c);
    }
}

/*
 * One pass: handle a batch of events, then send the answers of the batch
 * (as Redis writes its replies before it sleeps again). Each send to a
 * client that sleeps wakes it, and on a VM the wake-up (an inter-processor
 * interrupt) costs the sender dearly: sending every answer at once when
 * the batch is done wakes a sleeping client once rather than once per
 * answer.
 *
 * A conn is freed only by the handler of its own event, by the sends after
 * the batch, or by sweep: a batch holds each conn's events once, and a conn
 * closed while queued for sending leaves the send list and the epoll set
 * (conn_close), so no pointer of the batch, of a later batch or of the send
 * list is to a freed conn.
 */
static void *loop_run(void *arg)
{
    loop *lp = arg;
    lp->owner = pthread_self();
    http_server *server = lp->server;
    if (server->config.fibers)
        lp->sched = hf_sched_new(lp->epfd, wake_loop, lp);
    struct epoll_event events[MAX_EVENTS];
    while (!atomic_load(&server->stopping)) {
        int timeout = lp->head ? 1000 : -1;
        if (lp->sched)
            timeout = hf_sched_timeout_ms(lp->sched, timeout);
        int n = epoll_wait(lp->epfd, events, MAX_EVENTS, timeout);
        for (int i = 0; i < n; i++) {
            void *ptr = events[i].data.ptr;
            if (ptr == server) {
                on_acceptable(lp);
            } else if (ptr == lp) {
                uint64_t v;
                if (read(lp->wake_fd, &v, sizeof v) < 0) { /* the flag says why */
                }
                take_inbox(lp);
                for (unsigned asked = atomic_exchange(&lp->shed_asked, 0); asked > 0; asked--)
                    if (!shed_one(lp))
                        break; /* every one is being served: the count stays over */
            } else if (lp->sched && hf_sched_event(lp->sched, ptr)) {
                /* a parked fiber's descriptor is ready: it runs below */
            } else {
                conn *c = ptr;
                if (c->busy)
                    unwatch(c); /* its fiber's end takes it up again */
                else if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_readable(c);
                else if (events[i].events & EPOLLOUT)
                    flush(c);
            }
        }
        if (lp->sched)
            hf_sched_run_ready(lp->sched);
        uint64_t now = hf_clock_mono_coarse_s();
        if (now != lp->swept_s) { /* before the sends: a 408 goes with them */
            lp->swept_s = now;
            sweep(lp, now);
            sweep_requests(lp, hf_clock_mono_coarse_ms());
        }
        while (lp->flush_head) {
            conn *c = lp->flush_head;
            lp->flush_head = c->flush_next;
            c->flush_queued = false;
            flush(c);
        }
    }
    /* conn_close unlinks c, so next is the new head: taken before the free,
     * the analyzer need not know that a head has no prev */
    for (conn *c = lp->head, *next; c; c = next) {
        next = c->next;
        conn_close(c);
    }
    /* A busy conn is closed when its request's fiber ends, each within
     * its store's timeouts: until then only the fibers' events are taken
     * (every conn has left the epoll set; the listening socket leaves it). */
    if (lp->sched && hf_sched_live(lp->sched) > 0) {
        epoll_ctl(lp->epfd, EPOLL_CTL_DEL, server->listen_fd, NULL);
        while (hf_sched_live(lp->sched) > 0) {
            int n = epoll_wait(lp->epfd, events, MAX_EVENTS, hf_sched_timeout_ms(lp->sched, 100));
            for (int i = 0; i < n; i++) {
                uint64_t v;
                if (events[i].data.ptr != lp)
                    hf_sched_event(lp->sched, events[i].data.ptr);
                else if (read(lp->wake_fd, &v, sizeof v) < 0) { /* the flag says why */
                }
            }
            hf_sched_run_ready(lp->sched);
        }
    }
    HF_ASSERT(!lp->head && !lp->tail && lp->listed == 0);
    hf_sched_free(lp->sched);
    lp->sched = NULL;
    return NULL;
}

/* ---- start and stop ---- */

static int listen_on(const http_config *config, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *found = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)config->port);
    int rc = getaddrinfo(config->host, port, &hints, &found);
    if (rc != 0 || !found) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", config->host, gai_strerror(rc));
        if (found)
            freeaddrinfo(found);
        return -1;
    }
    int fd = socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 4096) != 0) {
        snprintf(err, errlen,
                 "cannot listen on %s port %u (in use, or not an address of this "
                 "host?): %s",
                 config->host, (unsigned)config->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(found);
    return fd;
}

static uint16_t local_port(int fd)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss); /* getsockname fills it; the analyzer does not know */
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static int loop_init(http_server *server, loop *lp)
{
    lp->server = server;
    lp->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    lp->epfd = epoll_create1(EPOLL_CLOEXEC);
    lp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (lp->epfd < 0 || lp->wake_fd < 0)
        return -1;
    struct epoll_event wake = {.events = EPOLLIN, .data.ptr = lp};
    struct epoll_event accept_ev = {.events = EPOLLIN | EPOLLEXCLUSIVE, .data.ptr = server};
    if (epoll_ctl(lp->epfd, EPOLL_CTL_ADD, lp->wake_fd, &wake) != 0 ||
        epoll_ctl(lp->epfd, EPOLL_CTL_ADD, server->listen_fd, &accept_ev) != 0)
        return -1;
    return 0;
}

static void loop_free(loop *lp)
{
    HF_ASSERT(!lp->head && lp->listed == 0);     /* its thread closed every conn */
    for (size_t i = 0; i < lp->inbox_len; i++) { /* given while stopping */
        close(lp->inbox[i]);
        count_closed(lp);
    }
    HF_ASSERT(atomic_load(&lp->nconns) == 0); /* every conn given to it is closed */
    free(lp->inbox);
    pthread_mutex_destroy(&lp->inbox_lock);
    if (lp->epfd >= 0)
        close(lp->epfd);
    if (lp->wake_fd >= 0)
        close(lp->wake_fd);
    if (lp->spare_fd >= 0)
        close(lp->spare_fd);
}

static void free_server(http_server *server)
{
    for (unsigned i = 0; i < server->nloops; i++)
        loop_free(&server->loops[i]);
    HF_ASSERT(atomic_load(&server->open_connections) == 0);
    free(server->loops);
    if (server->listen_fd >= 0)
        close(server->listen_fd);
    free(server);
}

http_server *http_start(const http_config *config, api_t *api, char *err, size_t errlen)
{
    /* our own count (over_header_limit) acts first; the parser's must not */
    http_parser_set_max_header_size(UINT32_MAX / 2);

    http_server *server = hf_xcalloc(1, sizeof *server);
    server->api = api;
    server->config = *config;
    if (server->config.threads < 1)
        server->config.threads = 1;
    atomic_init(&server->stopping, false);
    atomic_init(&server->open_connections, 0);
    server->too_large_len = snprintf(server->too_large_body, sizeof server->too_large_body,
                                     "{\"detail\":\"Request body too large: the limit is %zu "
                                     "bytes\"}",
                                     config->max_body_bytes);
    server->listen_fd = listen_on(config, err, errlen);
    if (server->listen_fd < 0) {
        free_server(server);
        return NULL;
    }
    server->port = local_port(server->listen_fd);
    server->nloops = server->config.threads;
    server->loops = hf_xcalloc(server->nloops, sizeof *server->loops);
    for (unsigned i = 0; i < server->nloops; i++) {
        server->loops[i].server = server;
        server->loops[i].epfd = server->loops[i].wake_fd = server->loops[i].spare_fd = -1;
        atomic_init(&server->loops[i].nconns, 0);
        atomic_init(&server->loops[i].shed_asked, 0);
        pthread_mutex_init(&server->loops[i].inbox_lock, NULL);
    }
    for (unsigned i = 0; i < server->nloops; i++) {
        if (loop_init(server, &server->loops[i]) != 0) {
            snprintf(err, errlen, "cannot set up the event loops: %s", strerror(errno));
            free_server(server);
            return NULL;
        }
    }
    for (unsigned i = 0; i < server->nloops; i++) {
        int rc = pthread_create(&server->loops[i].thread, NULL, loop_run, &server->loops[i]);
        if (rc != 0) {
            snprintf(err, errlen, "cannot start the event loops: %s", strerror(rc));
            http_stop(server);
            return NULL;
        }
        server->loops[i].started = true;
    }
    return server;
}

uint16_t http_bound_port(const http_server *server)
{
    return server->port;
}

void http_stop(http_server *server)
{
    if (!server)
        return;
    atomic_store(&server->stopping, true);
    for (unsigned i = 0; i < server->nloops; i++)
        wake_loop(&server->loops[i]);
    for (unsigned i = 0; i < server->nloops; i++)
        if (server->loops[i].started)
            pthread_join(server->loops[i].thread, NULL);
    free_server(server);
}
