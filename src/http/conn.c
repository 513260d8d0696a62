/*
 * conn.c: a connection of the HTTP front (http.c runs the loops that serve
 * it): reading, parsing with http-parser, answering, sending, and the lists
 * its loop keeps it on (activity, and the request list of "Deadlines" in
 * http.c).
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
 * Answers: "HTTP/1.1 <status> <reason>", Date (formatted once a second per
 * loop), Content-Type and Content-Length (none for 204),
 * WWW-Authenticate for a 401, "Connection: close" when the connection ends
 * after it, "Connection: keep-alive" to an HTTP/1.0 client that asked for it.
 * A HEAD request gets the headers of its GET answer without the body.
 *
 * Access log (--access-log): one line per answer, after it is queued:
 *   access: 127.0.0.1:40212 "POST /keys/batch_allocate HTTP/1.1" 200 1234 0.000213
 * (client, method, path with bytes outside printable ASCII as \xHH, version,
 * status, body bytes, seconds since the request began), and with
 * --auth-token-file " tenant=NAME" (the token's tenant, "-" for none).
 */
#include "http/http_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fmt.h"
#include "util/hostport.h"
#include "util/log.h"
#include "util/xalloc.h"

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

static conn_link *link_of(const conn_list *l, conn *c)
{
    return (conn_link *)(void *)((char *)c + l->link);
}

/* c leaves l. */
static void list_unlink(conn_list *l, conn *c)
{
    conn_link *k = link_of(l, c);
    /* c is on l: its neighbours point back at it */
    HF_ASSERT(k->prev ? link_of(l, k->prev)->next == c : l->head == c);
    HF_ASSERT(k->next ? link_of(l, k->next)->prev == c : l->tail == c);
    if (k->prev)
        link_of(l, k->prev)->next = k->next;
    else
        l->head = k->next;
    if (k->next)
        link_of(l, k->next)->prev = k->prev;
    else
        l->tail = k->prev;
    k->prev = k->next = NULL;
}

/* c, on no list of l's kind, joins the end of l. */
static void list_append(conn_list *l, conn *c)
{
    conn_link *k = link_of(l, c);
    HF_ASSERT(!k->prev && !k->next && l->head != c);
    k->prev = l->tail;
    k->next = NULL;
    if (l->tail)
        link_of(l, l->tail)->next = c;
    else
        l->head = c;
    l->tail = c;
}

/* The activity list: a connection joins it when it opens, moves to its
 * end at each exchange of bytes, and leaves it when it closes; so it stays
 * ordered by activity (sweep stops at the first conn that is not idle). */
static void active_append(loop *lp, conn *c)
{
    HF_ASSERT(!lp->active.tail || lp->active.tail->active_ms <= c->active_ms);
    lp->listed++;
    list_append(&lp->active, c);
}

static void active_unlink(loop *lp, conn *c)
{
    HF_ASSERT(lp->listed > 0);
    lp->listed--;
    list_unlink(&lp->active, c);
}

static void touch(conn *c)
{
    c->active_ms = hf_clock_mono_coarse_ms();
    if (c->loop->active.tail != c) {
        active_unlink(c->loop, c);
        active_append(c->loop, c);
    }
}

/* The request list: a connection joins it when it opens and when a
 * request begins, and leaves it when its request is complete, refused or
 * timed out, or when it closes. Times are read on the loop's thread from
 * one monotonic clock, so appending keeps the list in order. */
static void wait_for_request(conn *c, uint64_t now_ms)
{
    loop *lp = c->loop;
    HF_ASSERT(!c->waiting);
    HF_ASSERT(!lp->requests.tail || lp->requests.tail->began_ms <= now_ms);
    c->waiting = true;
    c->request_bytes = false;
    c->began_ms = now_ms;
    c->headers_ms = 0;
    list_append(&lp->requests, c);
}

static void request_done(conn *c)
{
    if (!c->waiting)
        return;
    list_unlink(&c->loop->requests, c);
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
void http__unwatch(conn *c)
{
    if (c->unwatched)
        return;
    epoll_ctl(c->loop->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    c->unwatched = true;
    c->events = 0;
}

/* A connection given to lp is gone: the counts and /metrics. */
void http__count_closed(loop *lp)
{
    atomic_fetch_sub(&lp->nconns, 1);
    atomic_fetch_sub(&lp->server->open_connections, 1);
    api_count_connection(lp->server->api, API_CONNECTION_CLOSED);
}

void http__conn_close(conn *c)
{
    loop *lp = c->loop;
    HF_ASSERT(on_loop_thread(lp)); /* a conn is its loop's alone */
    if (c->busy) {                 /* its fiber holds it: closed when the fiber ends */
        c->doomed = true;
        http__unwatch(c);
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
    active_unlink(lp, c);
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
    http__count_closed(lp);
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
        if (url[i] == '%' && i + 2 < end && (hi = hf_hex_digit(url[i + 1])) >= 0 &&
            (lo = hf_hex_digit(url[i + 2])) >= 0) {
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
            http__conn_close(c);
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
bool http__flush(conn *c)
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
            http__conn_close(c); /* the client is gone */
            return false;
        }
    }
    c->out_sent = 0;
    hf_buf_reset(&c->out, OUT_KEEP);
    if (c->peer_done) {
        http__conn_close(c);
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
            http__conn_close(c);
            return false;
        }
        return http__flush(c);
    }
    watch(c, wanted(c));
    return true;
}

void http__on_readable(conn *c)
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
                http__conn_close(c);
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
            http__conn_close(c);
            return;
        }
        if ((size_t)n < sizeof lp->readbuf || c->pending || c->closing || c->busy)
            break;
    }
    queue_flush(c);
}

/* ---- opening ---- */

/* A connection this loop was given (counted as open already). */
void http__conn_open(loop *lp, int fd)
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
        http__count_closed(lp);
        return;
    }
    c->events = EPOLLIN;
    c->active_ms = hf_clock_mono_coarse_ms();
    active_append(lp, c);
    wait_for_request(c, hf_clock_mono_coarse_ms());
    HF_ASSERT(counts_agree(lp));
}

/* An answer of this layer that ends the connection (408, ...), sent with
 * the loop's batch. */
void http__refuse(conn *c, int status, const char *detail)
{
    queue_refusal(c, status, detail);
    queue_flush(c);
}
