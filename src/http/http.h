/*
 * http.h: the HTTP/1.x front of the server (epoll loops + http-parser),
 * feeding api_handle().
 *
 * Promises (docs/protocol.md, "HTTP" and "Errors for every route"):
 *   - HTTP/1.1 keep-alive and pipelining, HTTP/1.0, Content-Length and
 *     chunked request bodies, Expect: 100-continue;
 *   - a body longer than max_body_bytes is 413 {"detail": ...}: at once,
 *     before any 100 Continue, when Content-Length says so; after the upload
 *     when a chunked body grows past the limit (the excess is read and
 *     dropped, at most another 64 MiB of it, after which the connection
 *     is cut). A 413 always closes the connection;
 *   - the request line and headers may take max_header_bytes; past it the
 *     answer is 414 (still in the request line) or 431 (headers), JSON,
 *     and the connection closes; so do 400 (unparseable request) and 505
 *     (an HTTP version other than 1.0 and 1.1);
 *   - a connection idle (no bytes either way) for idle_timeout_s seconds is
 *     closed, whether between requests or in the middle of one;
 *   - a request that misses its deadline (header_timeout_s,
 *     body_timeout_s, body_min_rate) is answered 408 and its connection
 *     closed (a connection that sent nothing is closed without an answer);
 *   - at most max_connections are open at once: a connection accepted past
 *     it sheds the one of its loop furthest from being served (see http.c,
 *     "Shedding"), or is closed at once if every one is being served.
 * Threads: `threads` event loops (epoll), each serving its share of the
 * connections; a request runs to completion on its loop's thread (with
 * fibers, on a fiber of it, parked while it waits on the store).
 */
#ifndef HF_HTTP_H
#define HF_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"

typedef struct http_config {
    const char *host; /* numeric address or name; resolved once at start */
    uint16_t port;    /* 0: the system picks one (see http_bound_port) */
    unsigned threads;
    unsigned max_connections;
    unsigned idle_timeout_s; /* 0: never */
    /* A request must arrive in time (0: no deadline): its request line and
     * headers within header_timeout_s of its first byte (of the connection's
     * opening for its first request); its body within body_timeout_s of the
     * headers' end, plus a second for every body_min_rate bytes received
     * (0: no extension). Missed: 408, and the connection closes. */
    unsigned header_timeout_s;
    unsigned body_timeout_s;
    size_t body_min_rate;
    size_t max_body_bytes;
    size_t max_header_bytes; /* request line + headers, per connection */
    bool access_log;         /* one log line per answer (see http.c) */
    /* each request on a fiber of its loop (util/fiber.h): a request that
     * waits on its store parks, and the loop serves others meanwhile */
    bool fibers;
} http_config;

typedef struct http_server http_server;

/* Listen and serve on background threads. NULL with a message in err if the
 * address cannot be resolved or bound. The api must outlive the server. */
http_server *http_start(const http_config *config, api_t *api, char *err, size_t errlen);
uint16_t http_bound_port(const http_server *server);
/* Stop accepting, close every connection, join the threads, free. */
void http_stop(http_server *server);

#endif
