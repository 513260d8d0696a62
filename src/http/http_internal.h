/*
 * http_internal.h: what http.c (the loops) and conn.c (a connection) share:
 * the server, its loops and their connections. Not for any other file.
 */
#ifndef HF_HTTP_INTERNAL_H
#define HF_HTTP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <http_parser.h>

#include "http/http.h"
#include "util/buf.h"
#include "util/fiber.h"
#include "util/hf_assert.h"

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

/* A conn's place on one of its loop's lists (conn_list). */
typedef struct conn_link {
    struct conn *prev, *next;
} conn_link;

/* A list of a loop's conns, in the order they joined, through one of their
 * links: `link` is its offset in struct conn. */
typedef struct conn_list {
    struct conn *head, *tail;
    size_t link;
} conn_list;

typedef struct conn {
    uint32_t tag;
    loop *loop;
    int fd;
    conn_link act;           /* the loop's list, least recently active first */
    struct conn *flush_next; /* the loop's answers to send after this batch */
    /* the loop's request list: waiting for a request to complete, in the
     * order the requests began (see "Deadlines") */
    conn_link req;
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
    conn_list active;   /* conns by activity (conn.act) */
    size_t listed;      /* conns on it: those opened here and not closed */
    conn_list requests; /* the request list, oldest request first (conn.req) */
    conn *flush_head;   /* conns with answers to send once the batch is handled */
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


/* A loop's conns, list and counts are its thread's alone. */
HF_ASSERT_HELPER static inline bool on_loop_thread(const loop *lp)
{
    return pthread_equal(lp->owner, pthread_self());
}


/* ---- conn.c ---- */

/* Open a connection this loop was given (counted as open already). */
void http__conn_open(loop *lp, int fd);
/* Close it now, or when its parked request ends (busy). */
void http__conn_close(conn *c);
/* Its socket is readable (or hung up): read, parse, answer. */
void http__on_readable(conn *c);
/* Send what is queued and move on (see conn.c); false: it was closed. */
bool http__flush(conn *c);
/* Out of the epoll set while its request is parked (see conn.busy). */
void http__unwatch(conn *c);
/* A connection given to lp is gone: the counts and /metrics. */
void http__count_closed(loop *lp);
/* Queue an answer of this layer that ends the connection (408, ...), to be
 * sent with the loop's batch. */
void http__refuse(conn *c, int status, const char *detail);

#endif
