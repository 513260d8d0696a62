/*
 * http.c: the HTTP/1.x front: event loops of our own on epoll, each serving
 * its connections (conn.c: a connection, its requests parsed by
 * http-parser, Debian's libhttp-parser, the parser Node.js used for a
 * decade). See http.h for what it promises; http_internal.h holds what the
 * two files share.
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
 * Connections are counted for /metrics (api_count_connection): opened and
 * closed here, shed, timed out, and refused when accepted past
 * max_connections with nothing to shed (then closed at once, so that the
 * client sees it closed instead of hanging in the listen backlog). Threads
 * accepting at the same moment may each let one through: the count can
 * pass the limit by at most threads - 1, briefly.
 */
#include "http/http_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fd.h"
#include "util/log.h"
#include "util/xalloc.h"

/* ---- accepting ---- */

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
        http__conn_open(lp, fds[i]);
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
        http__conn_open(lp, fd);
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
    conn *between = lp->active.head; /* least recently active first */
    while (between && (between->busy || between->waiting))
        between = between->act.next;
    conn *late = lp->requests.head;
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
    http__conn_close(victim);
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
                hf_close_fd(fd);
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
    conn *c = lp->active.head;
    while (c && now - c->active_ms / 1000u >= first) {
        conn *next = c->act.next;
        /* a busy conn is not idle: its request runs (within the store's
         * timeouts), and its answer resets the clock */
        if (!c->busy && (c->lingering || (idle && now - c->active_ms / 1000u >= idle)))
            http__conn_close(c);
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
    for (conn *c = lp->requests.head, *next; c && c->began_ms + soonest <= now_ms; c = next) {
        next = c->req.next;
        HF_ASSERT(c->waiting && !c->busy && !c->closing);
        if (now_ms < request_deadline_ms(c, cfg))
            continue;
        api_count_connection(lp->server->api, API_CONNECTION_TIMED_OUT);
        if (!c->request_bytes) { /* nothing sent: nothing to answer */
            http__conn_close(c);
            continue;
        }
        http__refuse(c, 408,
                     c->headers_ms ? "Request timeout: the body must arrive within "
                                     "--body-timeout seconds of the headers, plus one second "
                                     "per --body-min-rate bytes received"
                                   : "Request timeout: the request line and headers must "
                                     "arrive within --header-timeout seconds");
    }
}

/* Send the answers queued in this pass (queue_flush). */
static void send_queued(loop *lp)
{
    while (lp->flush_head) {
        conn *c = lp->flush_head;
        lp->flush_head = c->flush_next;
        c->flush_queued = false;
        http__flush(c);
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
        int timeout = lp->active.head ? 1000 : -1;
        if (lp->sched)
            timeout = hf_sched_timeout_ms(lp->sched, timeout);
        int n = epoll_wait(lp->epfd, events, MAX_EVENTS, timeout);
        bool acceptable = false;
        for (int i = 0; i < n; i++) {
            void *ptr = events[i].data.ptr;
            if (ptr == server) {
                acceptable = true; /* after the batch's reads, below */
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
                    http__unwatch(c); /* its fiber's end takes it up again */
                else if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    http__on_readable(c);
                else if (events[i].events & EPOLLOUT)
                    http__flush(c);
            }
        }
        /* Accepting comes after the batch's reads: at the connection limit
         * it may shed the oldest incomplete request, and a client whose
         * whole request is already waiting in its socket should have it
         * read (and so be no longer incomplete) first. */
        if (acceptable)
            on_acceptable(lp);
        if (lp->sched)
            hf_sched_run_ready(lp->sched);
        /* the answers first: a conn whose parked request just ended has
         * been silent while it waited, and the idle sweep must not close
         * it with its answer unsent */
        send_queued(lp);
        uint64_t now = hf_clock_mono_coarse_s();
        if (now != lp->swept_s) {
            lp->swept_s = now;
            sweep(lp, now);
            sweep_requests(lp, hf_clock_mono_coarse_ms());
            send_queued(lp); /* the 408s */
        }
    }
    /* conn_close unlinks c, so next is the new head: taken before the free,
     * the analyzer need not know that a head has no prev */
    for (conn *c = lp->active.head, *next; c; c = next) {
        next = c->act.next;
        http__conn_close(c);
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
    HF_ASSERT(!lp->active.head && !lp->active.tail && lp->listed == 0);
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
        hf_close_fd(fd);
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
    lp->active.link = offsetof(conn, act);
    lp->requests.link = offsetof(conn, req);
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
    HF_ASSERT(!lp->active.head && lp->listed == 0); /* its thread closed every conn */
    for (size_t i = 0; i < lp->inbox_len; i++) {    /* given while stopping */
        close(lp->inbox[i]);
        http__count_closed(lp);
    }
    HF_ASSERT(atomic_load(&lp->nconns) == 0); /* every conn given to it is closed */
    free(lp->inbox);
    pthread_mutex_destroy(&lp->inbox_lock);
    hf_close_fd(lp->epfd);
    hf_close_fd(lp->wake_fd);
    hf_close_fd(lp->spare_fd);
}

static void free_server(http_server *server)
{
    for (unsigned i = 0; i < server->nloops; i++)
        loop_free(&server->loops[i]);
    HF_ASSERT(atomic_load(&server->open_connections) == 0);
    free(server->loops);
    hf_close_fd(server->listen_fd);
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
