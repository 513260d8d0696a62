/*
 * pipe.c: the pipes (link.h "One Redis"): a node's shared, pipelined
 * connections, the writer and reader roles its callers take on them, the
 * bound on commands in flight, the one WAIT after a batch of changes, a
 * connection broken and its callers answered; and the calls of one Redis.
 */
#include "store/redis/link_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/resp.h"
#include "util/xalloc.h"
#include "util/hf_assert.h"

/* ------------------------------------------------------------ the pipes */

/* One connection, shared by every caller of its pipe. */
struct pconn {
    redisContext *ctx; /* its fd (non-blocking) and reply reader; hiredis I/O unused */
    uint64_t gen;
    bool broken;  /* failed: its waiters answered; freed once no role holder uses it */
    bool retired; /* Redis went down and up since it opened: no new caller */
    bool writing, reading;
    unsigned users;               /* role holders working outside the lock */
    waiter *queue, *queue_tail;   /* not written yet */
    waiter *flight, *flight_tail; /* written, replies awaited, in order */
    hf_buf wbuf;                  /* the writer's batch */
};

struct pipe {
    pthread_mutex_t mu;
    hf_wait_list room; /* callers waiting for room under the bound, or for an opening */
    node_link *nl;
    pconn *c;           /* NULL until a caller connects */
    size_t cmds;        /* commands admitted and not answered (the bound) */
    bool opening;       /* a caller opens c, without the lock */
    uint64_t openings;  /* openings ended, to tell a waiter its own has */
    atomic_size_t load; /* cmds, read without the lock to choose a pipe */
};


/* Guard on a waiter's sleep: roles are handed on explicitly; this only
 * bounds what a missed wake-up would cost. */
#define ROLE_GUARD_US 200000

node_link *link__node_new(redis_link *r, const char *host, size_t hostlen, int port,
                          const char *addr)
{
    node_link *nl = hf_xcalloc(1, sizeof *nl);
    if (host) {
        nl->host = link__dup_n(host, hostlen);
        nl->port = port;
    }
    snprintf(nl->addr, sizeof nl->addr, "%s", addr);
    nl->npipes = r->opt.connections ? r->opt.connections : 1;
    nl->pipes = hf_xcalloc(nl->npipes, sizeof *nl->pipes);
    for (size_t i = 0; i < nl->npipes; i++) {
        pthread_mutex_init(&nl->pipes[i].mu, NULL);
        nl->pipes[i].room = HF_WAIT_LIST_INIT;
        nl->pipes[i].nl = nl;
    }
    return nl;
}

static void pconn_maybe_free(pconn *c)
{
    HF_ASSERT(c && c->ctx);
    if (!(c->broken || c->retired) || c->users || c->queue || c->flight)
        return;
    redisFree(c->ctx);
    hf_buf_free(&c->wbuf);
    free(c);
}

void link__node_free(node_link *nl)
{
    if (!nl)
        return;
    for (size_t i = 0; i < nl->npipes; i++) {
        struct pipe *p = &nl->pipes[i];
        if (p->c) { /* no caller is left: nothing queued, in flight or holding a role */
            p->c->retired = true;
            pconn_maybe_free(p->c);
        }
        HF_ASSERT(hf_wait_list_empty(&p->room));
        pthread_mutex_destroy(&p->mu);
    }
    free(nl->pipes);
    free(nl->host);
    free(nl);
}

/* A connection of nl could not be opened or failed: the one Redis is
 * marked down; a cluster node's commands take the routing handles for a
 * pause (10 ms, doubling to 1 s) and the slot map is taken anew. */
static void node_failed(redis_link *r, node_link *nl, const char *why)
{
    if (!nl->host) {
        link__mark_down(r, why);
        return;
    }
    int64_t b = atomic_load(&nl->backoff_ms);
    b = b ? (b * 2 > 1000 ? 1000 : b * 2) : 10;
    atomic_store(&nl->backoff_ms, b);
    int64_t was = atomic_exchange(&nl->down_until_us, hf_clock_mono_us() + b * 1000);
    atomic_store(&r->map_stale, true);
    if (!was)
        log_msg(LOG_WARN,
                "Redis Cluster node %s: %s; its slots' commands go through the routing "
                "handles until it answers again",
                nl->addr, why);
}

/* Whether calls to nl are refused now: the one Redis marked down, a
 * cluster node in its pause. */
bool link__node_refusing(redis_link *r, node_link *nl)
{
    if (!nl->host)
        return !atomic_load(&r->up_flag);
    int64_t until = atomic_load(&nl->down_until_us);
    return until && hf_clock_mono_us() < until;
}

/* n admitted commands answered or withdrawn (pipe lock held): room under
 * the bound for the callers waiting for it. */
static void give_back(struct pipe *p, size_t n)
{
    HF_ASSERT(p->cmds >= n);
    p->cmds -= n;
    atomic_store(&p->load, p->cmds);
    hf_wait_list_wake_all(&p->room);
}

/* A caller's call answered (pipe lock held): its figures, its wake-up, room. */
static void finish(redis_link *r, struct pipe *p, waiter *w)
{
    HF_ASSERT(!w->done && !w->is_wait);
    w->done = true;
    link__count_rtt(r, hf_clock_mono_us() - w->t0_us);
    give_back(p, w->n);
    hf_park_wake(&w->park);
}

/* A caller's commands on a connection that failed: not sent (nothing
 * changed) or sent (a change's outcome unknown). Counted as errors where
 * that is their outcome: a cluster node's others go to a routing handle
 * (link__cl_fast_exec), which counts them if they fail there. */
static void fail_waiter(redis_link *r, struct pipe *p, waiter *w, bool sent, const char *why)
{
    bool final = !p->nl->host || (w->change && sent);
    for (size_t i = 0; i < w->n; i++) {
        if (w->cmds[i].reply) { /* answered, but its WAIT was lost */
            freeReplyObject(w->cmds[i].reply);
            w->cmds[i].reply = NULL;
        }
        if (final)
            atomic_fetch_add(&r->errors, 1);
        if (w->change && sent) {
            atomic_fetch_add(&r->unknown, 1);
            log_msg(LOG_ERROR, "Redis: %s after a change was sent: its outcome is unknown", why);
            w->cmds[i].code = STORE_EUNCERTAIN;
        }
    }
    finish(r, p, w);
}

static void fail_entry(redis_link *r, struct pipe *p, waiter *w, const char *why)
{
    if (!w->is_wait) {
        fail_waiter(r, p, w, true, why);
        return;
    }
    while (w->covers) { /* those still in flight were failed before it */
        waiter *x = w->covers;
        w->covers = x->next_covered;
        if (!x->done)
            fail_waiter(r, p, x, true, why);
    }
    // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): a WAIT, write_queue's; a caller's is not is_wait
    free(w);
}

/* The connection failed (pipe lock held): every command in flight on it
 * ends as sent, every one queued as not sent; its node is marked failed. */
static void break_conn(redis_link *r, struct pipe *p, pconn *c, const char *why)
{
    if (c->broken)
        return;
    c->broken = true;
    if (p->c == c)
        p->c = NULL;
    while (c->flight) {
        waiter *w = c->flight;
        c->flight = w->next;
        fail_entry(r, p, w, why);
    }
    c->flight_tail = NULL;
    while (c->queue) {
        waiter *w = c->queue;
        c->queue = w->next;
        fail_waiter(r, p, w, false, why);
    }
    c->queue_tail = NULL;
    HF_ASSERT(!c->flight && !c->queue && p->c != c);
    shutdown(c->ctx->fd, SHUT_RDWR); /* a role holder in poll() or send() returns */
    node_failed(r, p->nl, why);
    /* freed by the caller, a role holder, once it is done with it */
}

/* The outcome of a change under --redis-wait once its batch's WAIT (for
 * want replicas) answered; refused: with an error, after which a change
 * applied keeps its reply until link__pipe_await asks what became of it
 * (link__demoted_kept). */
static void finish_waited(redis_link *r, struct pipe *p, waiter *w, long long acked, unsigned want,
                          bool refused)
{
    for (size_t i = 0; i < w->n; i++) {
        bool short_of = w->cmds[i].reply->type != REDIS_REPLY_ERROR && acked < (long long)want;
        if (short_of && refused) {
            w->cmds[i].code = STORE_EUNCERTAIN;
            w->want = want;
            w->wait_refused = true;
            continue;
        }
        if (short_of) {
            link__wait_short(r, acked, want);
            freeReplyObject(w->cmds[i].reply);
            w->cmds[i].reply = NULL;
            w->cmds[i].code = STORE_EUNCERTAIN;
            continue;
        }
        w->cmds[i].code = STORE_OK;
    }
    finish(r, p, w);
}

/* One reply, matched in order to the head of the flight list (pipe lock
 * held). false: a reply nothing awaited (a protocol fault). */
static bool dispatch(redis_link *r, struct pipe *p, pconn *c, redisReply *reply)
{
    waiter *h = c->flight;
    if (!h) {
        freeReplyObject(reply);
        return false;
    }
    if (h->is_wait) {
        long long acked = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
        bool refused = reply->type == REDIS_REPLY_ERROR;
        freeReplyObject(reply);
        c->flight = h->next;
        while (h->covers) {
            waiter *x = h->covers;
            h->covers = x->next_covered;
            finish_waited(r, p, x, acked, h->want, refused);
        }
        free(h);
        if (refused) {
            /* Redis closes a connection after refusing its WAIT: what is
             * queued goes elsewhere as not sent, rather than on it */
            if (!c->flight)
                c->flight_tail = NULL;
            break_conn(r, p, c, "Redis refused a WAIT, and closes the connection after that");
            return true;
        }
    } else {
        HF_ASSERT(h->got < h->n && !h->done);
        h->cmds[h->got++].reply = reply;
        if (h->got < h->n)
            return true;
        c->flight = h->next;
        if (!h->covered) {
            for (size_t i = 0; i < h->n; i++)
                h->cmds[i].code = STORE_OK;
            finish(r, p, h);
        }
    }
    if (!c->flight)
        c->flight_tail = NULL;
    return true;
}

/* The first caller of entry w (a WAIT's: of the changes it covers) that
 * sleeps in link__pipe_await, free to take a role; NULL if none. */
static waiter *parked_of(waiter *w)
{
    if (!w->is_wait)
        return w->parked ? w : NULL;
    for (waiter *x = w->covers; x; x = x->next_covered)
        if (x->parked)
            return x;
    return NULL;
}

/* Whether the queue may be written now: nobody writes and nothing is in
 * flight. While a batch is in flight, calls queue behind it, and whoever
 * takes its last reply writes them as the next batch (link.h "One Redis"). */
static bool may_write(const pconn *c)
{
    return !c->broken && !c->writing && c->queue && !c->flight;
}

/* Hand the free roles on (pipe lock held): the first sleeping caller in
 * the queue writes, or in flight reads. A caller busy elsewhere (its call's
 * commands on another node) takes a role when it comes back to this pipe. */
static void wake_roles(pconn *c)
{
    if (may_write(c)) {
        for (waiter *w = c->queue; w; w = w->next)
            if (w->parked) {
                hf_park_wake(&w->park);
                return;
            }
        return;
    }
    if (c->broken || c->reading)
        return;
    for (waiter *w = c->flight; w; w = w->next) {
        waiter *x = parked_of(w);
        if (x) {
            hf_park_wake(&x->park);
            return;
        }
    }
}

/* The writer (pipe lock held on entry and exit; may_write): the whole
 * queue, and one WAIT after it if it holds a change under --redis-wait, in
 * one send; again if its replies are all in and callers queued more
 * meanwhile. */
static void write_queue(redis_link *r, struct pipe *p, pconn *c)
{
    HF_ASSERT(may_write(c) && !c->reading);
    c->writing = true;
    c->users++;
    while (c->queue && !c->broken && !c->flight) {
        waiter *batch = c->queue;
        c->queue = c->queue_tail = NULL;
        waiter *mark = NULL;
        c->wbuf.len = 0;
        int64_t until = INT64_MAX;
        size_t ncmds = 0;
        unsigned want = link__node_wait(r, p->nl);
        for (waiter *w = batch; w; w = w->next) {
            hf_buf_append(&c->wbuf, w->out.ptr, w->out.len);
            ncmds += w->n;
            if (w->until_us < until)
                until = w->until_us;
            if (w->change && want > 0) {
                if (!mark) {
                    mark = hf_xcalloc(1, sizeof *mark);
                    mark->is_wait = true;
                    mark->want = want;
                    mark->until_us = hf_clock_mono_us() + r->opt.command_timeout_ms * 1000 +
                                     r->opt.wait_timeout_ms * 1000;
                }
                w->covered = true;
                w->next_covered = mark->covers;
                mark->covers = w;
            }
            w->c = c;
        }
        if (mark) {
            wait_cmd wc;
            link__wait_cmd(r, &wc);
            hf_resp_command(&c->wbuf, 3, wc.argv, wc.lens);
        }
        /* into the flight list before a byte goes out: replies may come at once */
        waiter *last = batch;
        while (last->next)
            last = last->next;
        if (mark)
            last->next = mark;
        if (c->flight_tail)
            c->flight_tail->next = batch;
        else
            c->flight = batch;
        c->flight_tail = mark ? mark : last;
        HF_ASSERT(c->flight && !c->queue && !c->flight_tail->next);
        atomic_fetch_add(&r->writes, 1);
        atomic_fetch_add(&p->nl->sent, ncmds);
        hf_mutex_unlock(&p->mu);

        const char *why = NULL;
        size_t off = 0;
        int fd = c->ctx->fd;
        while (off < c->wbuf.len) {
            ssize_t k = send(fd, c->wbuf.ptr + off, c->wbuf.len - off, MSG_NOSIGNAL);
            if (k > 0) {
                off += (size_t)k;
                continue;
            }
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                why = strerror(errno);
                break;
            }
            if (hf_clock_mono_us() >= until || hf_wait_fd(fd, POLLOUT, until) == 0) {
                why = "Resource temporarily unavailable"; /* hiredis's words for a timeout */
                break;
            }
        }

        hf_mutex_lock(&p->mu);
        if (why && !c->broken)
            break_conn(r, p, c, why);
    }
    c->writing = false;
    c->users--;
    wake_roles(c);
    pconn_maybe_free(c);
}
/* The reader (pipe lock held on entry and exit): waits for replies until
 * the earliest deadline in flight, then matches what came to its callers. */
static void read_replies(redis_link *r, struct pipe *p, pconn *c)
{
    HF_ASSERT(!c->broken && !c->reading && c->flight);
    c->reading = true;
    c->users++;
    int64_t until = INT64_MAX;
    for (waiter *w = c->flight; w; w = w->next)
        if (w->until_us < until)
            until = w->until_us;
    hf_mutex_unlock(&p->mu);

    const char *why = NULL;
    redisReply **got = NULL;
    size_t ngot = 0, cap = 0;
    int fd = c->ctx->fd;
    for (;;) {
        int pr = hf_clock_mono_us() < until ? hf_wait_fd(fd, POLLIN, until) : 0;
        if (pr == 0) {
            why = "Resource temporarily unavailable"; /* a timeout, in hiredis's words */
            break;
        }
        char buf[16384];
        ssize_t k = read(fd, buf, sizeof buf);
        if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            continue;
        if (k <= 0) {
            why = k == 0 ? "Server closed the connection" : strerror(errno);
            break;
        }
        if (redisReaderFeed(c->ctx->reader, buf, (size_t)k) != REDIS_OK) {
            why = "Protocol error";
            break;
        }
        void *rep = NULL;
        while (redisReaderGetReply(c->ctx->reader, &rep) == REDIS_OK && rep) {
            if (ngot == cap) {
                cap = cap ? cap * 2 : 16;
                got = hf_xreallocarray(got, cap, sizeof *got);
            }
            got[ngot++] = rep;
            rep = NULL;
        }
        if (c->ctx->reader->err) {
            why = "Protocol error";
            break;
        }
        if (ngot)
            break;
    }

    hf_mutex_lock(&p->mu);
    c->reading = false;
    c->users--;
    size_t i = 0;
    for (; i < ngot && !c->broken; i++)
        if (!dispatch(r, p, c, got[i])) {
            why = "a reply no command awaited";
            i++;
            break;
        }
    for (; i < ngot; i++)
        freeReplyObject(got[i]);
    free(got);
    if (why && !c->broken)
        break_conn(r, p, c, why);
    if (may_write(c)) { /* the batch is answered: the calls queued behind it go */
        write_queue(r, p, c);
        return;
    }
    wake_roles(c);
    pconn_maybe_free(c);
}

/* An idle connection that Redis closed meanwhile reads as readable (EOF). */
static bool conn_dead(const pconn *c)
{
    struct pollfd p = {.fd = c->ctx->fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

/* A new connection, opened on an offload thread when the caller is a
 * fiber (hf_fiber_offload): connecting, AUTH and SELECT block for up to
 * their timeouts. */
typedef struct open_job {
    redis_link *r;
    node_link *nl;
    redisContext *ctx;
    char err[512];
} open_job;

static void open_on(void *arg)
{
    open_job *j = arg;
    int code;
    j->ctx = link__connect_one(j->r, j->nl, &code, j->err, sizeof j->err);
}

/* The pipe's connection for a new call (pipe lock held; released while
 * one is opened): the current one, or a new one instead of one from before
 * Redis went down or one Redis closed while it sat idle. One caller opens
 * it, without the lock, while its loop serves others; the callers that
 * come meanwhile wait for that opening and take its outcome. NULL: the
 * node unreachable (node_failed). */
static pconn *pipe_conn(redis_link *r, struct pipe *p, uint64_t gen)
{
    HF_ASSERT(hf_mutex_held(&p->mu));
    pconn *c = p->c;
    if (c && c->gen != gen) {
        c->retired = true;
        p->c = NULL;
        pconn_maybe_free(c);
        c = NULL;
    }
    if (c && !c->users && !c->queue && !c->flight && conn_dead(c)) {
        c->retired = true;
        p->c = NULL;
        pconn_maybe_free(c);
        c = NULL;
    }
    if (c)
        return c;
    if (p->opening) {
        uint64_t seen = p->openings;
        int64_t until = hf_clock_mono_us() +
                        (r->opt.connect_timeout_ms + 2 * r->opt.command_timeout_ms) * 1000;
        while (p->openings == seen && hf_clock_mono_us() < until)
            hf_wait_list_wait(&p->room, &p->mu, until);
        return p->openings != seen ? p->c : NULL;
    }
    p->opening = true;
    hf_mutex_unlock(&p->mu);
    open_job j = {.r = r, .nl = p->nl};
    hf_fiber_offload(open_on, &j);
    hf_mutex_lock(&p->mu);
    p->opening = false;
    p->openings++;
    hf_wait_list_wake_all(&p->room);
    if (!j.ctx) {
        node_failed(r, p->nl, j.err);
        return NULL;
    }
    if (p->nl->host) {
        atomic_store(&p->nl->backoff_ms, 0);
        atomic_store(&p->nl->down_until_us, 0);
    }
    int fl = fcntl(j.ctx->fd, F_GETFL);
    fcntl(j.ctx->fd, F_SETFL, fl | O_NONBLOCK);
    c = hf_xcalloc(1, sizeof *c);
    c->ctx = j.ctx;
    c->gen = gen;
    HF_ASSERT(!p->c); /* nobody else opens one meanwhile */
    p->c = c;
    return c;
}

/* The node's pipe with the fewest commands in flight, the next in turn on
 * a tie. */
static struct pipe *pick_pipe(node_link *nl)
{
    size_t start = atomic_fetch_add(&nl->next_pipe, 1) % nl->npipes, best = start;
    size_t load = atomic_load(&nl->pipes[start].load);
    for (size_t k = 1; k < nl->npipes && load; k++) {
        size_t i = (start + k) % nl->npipes;
        size_t l = atomic_load(&nl->pipes[i].load);
        if (l < load) {
            load = l;
            best = i;
        }
    }
    return &nl->pipes[best];
}

/* Admission under the bound (pipe lock held): true once the n commands
 * fit, false (counted) if the node is refused meanwhile or the deadline
 * passed first; a cluster node's, false at once when they do not fit. */
static bool admit(redis_link *r, struct pipe *p, size_t n, int64_t until, bool *waited)
{
    while (p->cmds > 0 && p->cmds + n > r->opt.max_in_flight) {
        if (p->nl->host) { /* a cluster node's: a routing handle takes them at once */
            atomic_fetch_add(&r->refused_busy, 1);
            return false;
        }
        if (link__node_refusing(r, p->nl)) {
            atomic_fetch_add(&r->refused_down, 1);
            return false;
        }
        if (hf_clock_mono_us() >= until) {
            atomic_fetch_add(&r->refused_busy, 1);
            return false;
        }
        if (!*waited)
            atomic_fetch_add(&r->waited_for_room, 1);
        *waited = true;
        hf_wait_list_wait(&p->room, &p->mu, until);
    }
    return true;
}

/* A caller's n commands as a waiter for its node (not queued yet). */
void link__waiter_init(redis_link *r, waiter *w, redis_cmd *cmds, size_t n, bool change,
                       int64_t t0_us)
{
    *w = (waiter){.cmds = cmds, .n = n, .change = change, .t0_us = t0_us};
    w->until_us = t0_us + r->opt.command_timeout_ms * 1000;
    for (size_t i = 0; i < n; i++)
        hf_resp_command(&w->out, cmds[i].argc, cmds[i].argv, cmds[i].argvlen);
    hf_park_init(&w->park);
}

void link__waiter_free(waiter *w)
{
    hf_buf_free(&w->out);
    hf_park_destroy(&w->park);
}

/* w's commands queued on a pipe of its node and, if nobody writes there,
 * written at once (so that a call's commands are out on all their nodes
 * before it waits for any). false: refused, nothing sent (the commands
 * keep STORE_EUNAVAILABLE). */
bool link__pipe_submit(redis_link *r, node_link *nl, waiter *w, uint64_t gen)
{
    struct pipe *p = pick_pipe(nl);
    hf_mutex_lock(&p->mu);
    bool waited = false;
    if (!admit(r, p, w->n, w->t0_us + r->opt.command_timeout_ms * 1000, &waited))
        goto refused;
    if (link__node_wait(r, nl) > 0) /* a WAIT pipelined ahead may hold it that long */
        w->until_us += r->opt.wait_timeout_ms * 1000;
    if (!nl->host && (waited || !p->c)) { /* Redis may have gone down: refuse, not reconnect */
        hf_mutex_lock(&r->lock);
        bool up = r->up;
        gen = r->gen;
        hf_mutex_unlock(&r->lock);
        if (!up) {
            atomic_fetch_add(&r->refused_down, 1);
            goto refused;
        }
    }
    p->cmds += w->n; /* admitted: counted before pipe_conn may let the lock go */
    atomic_store(&p->load, p->cmds);
    pconn *c = pipe_conn(r, p, gen);
    if (!c) {
        give_back(p, w->n);
        goto refused;
    }
    w->c = c;
    w->p = p;
    if (c->queue_tail)
        c->queue_tail->next = w;
    else
        c->queue = w;
    c->queue_tail = w;
    if (may_write(c))
        write_queue(r, p, c);
    hf_mutex_unlock(&p->mu);
    return true;
refused:
    hf_mutex_unlock(&p->mu);
    if (!nl->host) /* a cluster node's go to a routing handle */
        atomic_fetch_add(&r->errors, w->n);
    return false;
}

typedef struct refused_job {
    redis_link *r;
    const node_link *nl;
    unsigned want;
    bool kept;
} refused_job;

static void refused_on(void *arg)
{
    refused_job *j = arg;
    j->kept = link__demoted_kept(j->r, j->nl, j->want);
}

/* w's changes applied whose WAIT was refused (finish_waited): acknowledged
 * if their node kept them as it became a replica, else outcome unknown. */
static void settle_refused(redis_link *r, waiter *w)
{
    refused_job j = {.r = r, .nl = w->p->nl, .want = w->want};
    hf_fiber_offload(refused_on, &j);
    for (size_t i = 0; i < w->n; i++) {
        redis_cmd *d = &w->cmds[i];
        if (d->code != STORE_EUNCERTAIN || !d->reply)
            continue;
        if (j.kept) {
            d->code = STORE_OK;
            continue;
        }
        link__wait_short(r, -1, w->want);
        freeReplyObject(d->reply);
        d->reply = NULL;
    }
    w->wait_refused = false;
}

/* Until w is answered: read (or write) when that role is free, else sleep
 * until handed one or answered. */
void link__pipe_await(redis_link *r, waiter *w)
{
    struct pipe *p = w->p;
    hf_mutex_lock(&p->mu);
    while (!w->done) {
        /* not freed while it holds an unanswered waiter (pconn_maybe_free:
         * nothing queued or in flight on it), which w is */
        pconn *c = w->c;
        // NOLINTNEXTLINE(clang-analyzer-unix.Malloc): c holds w, unanswered (above)
        if (may_write(c)) {
            write_queue(r, p, c);
        } else if (!c->broken && !c->reading && c->flight) {
            read_replies(r, p, c);
        } else {
            w->parked = true;
            hf_park_wait(&w->park, &p->mu, hf_clock_mono_us() + ROLE_GUARD_US);
            w->parked = false;
        }
    }
    /* done: w->c may be gone (freed by whoever broke it); roles were handed
     * on by whoever answered this call */
    hf_mutex_unlock(&p->mu);
    if (w->wait_refused)
        settle_refused(r, w);
}

/* One Redis: the n commands queued on a pipe, written with whatever else
 * is queued there, their replies matched in order. */
void link__one_exec(redis_link *r, redis_cmd *cmds, size_t n, bool change)
{
    hf_mutex_lock(&r->lock);
    bool up = r->up;
    uint64_t gen = r->gen;
    hf_mutex_unlock(&r->lock);
    if (!up) {
        atomic_fetch_add(&r->refused_down, 1);
        atomic_fetch_add(&r->errors, n);
        return;
    }
    waiter w;
    link__waiter_init(r, &w, cmds, n, change, hf_clock_mono_us());
    if (link__pipe_submit(r, r->one, &w, gen))
        link__pipe_await(r, &w);
    link__waiter_free(&w);
}
