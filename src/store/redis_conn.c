/*
 * redis_conn.c: the Redis engine's connections (redis_conn.h): the URL, the
 * pipes (shared, pipelined connections) to one Redis or the pool of routing
 * handles over a cluster, the monitors, --redis-wait and the figures.
 */
#include "store/redis_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "util/clock.h"
#include "util/hostport.h"
#include "util/log.h"
#include "util/resp.h"
#include "util/xalloc.h"

#define RTT_BUCKETS 13
static const uint64_t rtt_bounds_us[RTT_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000,
};

typedef struct conn {
    redisContext *ctx;
    /* over a Redis Cluster: a routing handle instead of ctx, and the
     * figures of its nodes already added to the link's */
    cluster_t *cl;
    cluster_node_stats *seen;
    size_t nseen;
    cluster_stats seen_totals;
    uint64_t gen;
    struct conn *next;
} conn;

typedef struct waiter waiter;
typedef struct pconn pconn;
typedef struct node_link node_link;
struct pipe;

#define NO_NODE UINT16_MAX

/* A node spoken to over pipes: the one Redis, or a cluster primary. */
struct node_link {
    char *host; /* a cluster node's; NULL: the link's one Redis */
    int port;
    char addr[128];
    struct pipe *pipes;
    size_t npipes;
    atomic_size_t next_pipe;
    /* a cluster node whose connection failed: its commands go through the
     * routing handles until then (monotonic us); the pause doubles */
    atomic_int_fast64_t down_until_us, backoff_ms;
    /* figures: commands written, MOVED and ASK answers */
    atomic_uint_fast64_t sent, moved, ask;
};

typedef struct node_fig {
    cluster_node_stats s; /* counters summed; flags and slots as the monitor saw them */
} node_fig;

struct redis_link {
    redis_link_options opt;
    size_t probe_lens[4];
    /* the parsed URL */
    char *host, *unix_path, *user, *password;
    int port, db;
    /* redis-cluster://: the seed nodes, routed by src/cluster */
    bool cluster;
    char *seeds;
    cluster_options copt;

    pthread_mutex_t lock;
    conn *idle;     /* over a cluster: routing handles */
    node_link *one; /* one Redis: its pipes */
    /* over a cluster: the primaries' pipes (never freed before close) and
     * the slot map they are chosen by, taken from a routing handle */
    pthread_rwlock_t map_lock;
    node_link **nodes;
    size_t nnodes;
    uint16_t slot_node[CLUSTER_SLOTS]; /* an index of nodes, or NO_NODE */
    int64_t map_us;                    /* when it was taken (monotonic) */
    atomic_bool map_stale;             /* a command was redirected or a pipe failed */
    uint64_t gen; /* bumped when Redis goes down: older connections are dropped */
    bool up;
    char reason[512]; /* why it is down */
    pthread_cond_t wake;
    bool stopping;
    bool monitoring;
    pthread_t monitor;

    /* figures */
    atomic_uint_fast64_t calls, errors, unknown, reconnects, refused_down;
    atomic_uint_fast64_t writes, waited_for_room, refused_busy;
    atomic_uint_fast64_t rtt_buckets[RTT_BUCKETS];
    atomic_uint_fast64_t rtt_sum_us;
    atomic_bool up_flag;
    /* over a cluster (under lock): each node's figures summed over the
     * routing handles, and the handles' totals */
    node_fig *figs;
    size_t nfigs;
    uint64_t cl_refreshes, cl_refresh_failures, cl_rounds;
    atomic_uint_fast64_t cl_rewaits, cl_pipelined, cl_by_handles;
};

static struct timeval tv_of_ms(int64_t ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};
}

/* ---------------------------------------------------------------- URL */

static char *dup_n(const char *p, size_t n)
{
    char *out = hf_xmalloc(n + 1);
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

/* A %-decoded copy of [p, p + n), or NULL if an escape is malformed. */
static char *pct_decode(const char *p, size_t n)
{
    char *out = hf_xmalloc(n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            out[j++] = p[i];
            continue;
        }
        int hi = i + 1 < n ? hf_hex_digit(p[i + 1]) : -1;
        int lo = i + 2 < n ? hf_hex_digit(p[i + 2]) : -1;
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    out[j] = '\0';
    return out;
}

static int parse_url(redis_link *r, const char *url, char *err, size_t errlen)
{
    if (!url || !*url) {
        snprintf(err, errlen, "--store: empty address");
        return STORE_ECONFIG;
    }
    if (strncmp(url, "unix://", 7) == 0) {
        const char *path = url + 7;
        if (path[0] != '/') {
            snprintf(err, errlen, "--store %s: a unix socket address is unix:///absolute/path",
                     url);
            return STORE_ECONFIG;
        }
        r->unix_path = dup_n(path, strlen(path));
        return STORE_OK;
    }
    bool cluster = strncmp(url, "redis-cluster://", 16) == 0;
    if (strncmp(url, "redis://", 8) != 0 && !cluster) {
        snprintf(err, errlen,
                 "--store %s: expected redis://[user:password@]host:port[/db], "
                 "redis-cluster://[user:password@]host:port[,host:port...] or "
                 "unix:///path/redis.sock",
                 url);
        return STORE_ECONFIG;
    }
    const char *p = url + (cluster ? 16 : 8);
    const char *at = strrchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            if (colon > p)
                r->user = pct_decode(p, (size_t)(colon - p));
            r->password = pct_decode(colon + 1, (size_t)(at - colon - 1));
            if ((colon > p && !r->user) || !r->password) {
                snprintf(err, errlen, "--store: malformed %%-escape in the user or password");
                return STORE_ECONFIG;
            }
        } else {
            /* redis://password@host, as redis-cli -u accepts */
            r->password = pct_decode(p, (size_t)(at - p));
            if (!r->password) {
                snprintf(err, errlen, "--store: malformed %%-escape in the password");
                return STORE_ECONFIG;
            }
        }
        p = at + 1;
    }
    if (cluster) {
        if (!*p || strchr(p, '/')) {
            snprintf(err, errlen,
                     "--store %s: a cluster address is "
                     "redis-cluster://[user:password@]host:port[,host:port...] (no database: "
                     "a cluster has only 0)",
                     url);
            return STORE_ECONFIG;
        }
        r->cluster = true;
        r->seeds = dup_n(p, strlen(p));
        return STORE_OK;
    }
    const char *end = p + strcspn(p, "/");
    hf_hostport hp;
    int rc = hf_hostport_parse(p, (size_t)(end - p), 0, &hp);
    if (rc != HF_HOSTPORT_OK) {
        snprintf(err, errlen, "--store %s: %s", url, hf_hostport_strerror(rc));
        return STORE_ECONFIG;
    }
    r->host = dup_n(hp.host, hp.host_len);
    r->port = hp.port ? hp.port : 6379;
    if (*end == '/' && end[1]) {
        char *stop;
        long db = strtol(end + 1, &stop, 10);
        if (*stop || db < 0 || db > 1000000) {
            snprintf(err, errlen, "--store %s: the database must be a number", url);
            return STORE_ECONFIG;
        }
        r->db = (int)db;
    }
    return STORE_OK;
}

/* -------------------------------------------------------- connections */

const char *redis_link_where(const redis_link *r, char *buf, size_t len)
{
    if (r->cluster)
        snprintf(buf, len, "cluster %s", r->seeds);
    else if (r->unix_path)
        snprintf(buf, len, "unix:%s", r->unix_path);
    else
        snprintf(buf, len, "%s:%d", r->host, r->port);
    return buf;
}

bool redis_link_is_cluster(const redis_link *l)
{
    return l->cluster;
}

int redis_link_slot(const void *key, size_t len)
{
    return cluster_key_slot(key, len);
}

/* A new connection to the one Redis (nl NULL or without a host) or to the
 * cluster node nl: connected, authenticated, db selected (one Redis). NULL
 * and err. */
static redisContext *connect_one(redis_link *r, const node_link *nl, int *code, char *err,
                                 size_t errlen)
{
    struct timeval ct = tv_of_ms(r->opt.connect_timeout_ms);
    bool node = nl && nl->host;
    redisContext *c = node           ? redisConnectWithTimeout(nl->host, nl->port, ct)
                      : r->unix_path ? redisConnectUnixWithTimeout(r->unix_path, ct)
                                     : redisConnectWithTimeout(r->host, r->port, ct);
    char w[300];
    if (node)
        snprintf(w, sizeof w, "%s", nl->addr);
    else
        redis_link_where(r, w, sizeof w);
    if (!c || c->err) {
        snprintf(err, errlen, "cannot connect to Redis at %s: %s", w,
                 c ? c->errstr : "out of memory");
        *code = STORE_EUNREACHABLE;
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv_of_ms(r->opt.command_timeout_ms));
    redisReply *rep = NULL;
    if (r->password) {
        if (r->user)
            rep = redisCommand(c, "AUTH %s %s", r->user, r->password);
        else
            rep = redisCommand(c, "AUTH %s", r->password);
        if (!rep || rep->type == REDIS_REPLY_ERROR) {
            bool io = !rep;
            snprintf(err, errlen, "Redis at %s refused the credentials: %s", w,
                     io ? c->errstr : rep->str);
            *code = io ? STORE_EUNREACHABLE : STORE_EAUTH;
            goto fail;
        }
        freeReplyObject(rep);
        rep = NULL;
    }
    if (node) /* a cluster has database 0 only */
        return c;
    rep = redisCommand(c, "SELECT %d", r->db);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        bool io = !rep;
        const char *why = io ? c->errstr : rep->str;
        bool auth = !io && cluster_error_is_auth(why);
        snprintf(err, errlen, "Redis at %s: SELECT %d: %s%s", w, r->db, why,
                 auth ? " (a password is needed: redis://:PASSWORD@host:port or "
                        "--redis-password-file)"
                      : "");
        *code = io ? STORE_EUNREACHABLE : auth ? STORE_EAUTH : STORE_EUNAVAILABLE;
        goto fail;
    }
    freeReplyObject(rep);
    return c;
fail:
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return NULL;
}

/* The probe on one connection: STORE_OK, or a code and why (err). */
static int probe_one(redis_link *r, redisContext *c, char *err, size_t errlen)
{
    redisReply *rep = redisCommandArgv(c, r->opt.probe_argc, r->opt.probe_argv, r->probe_lens);
    char w[300];
    redis_link_where(r, w, sizeof w);
    if (!rep) {
        snprintf(err, errlen, "Redis at %s: %s: %s", w, r->opt.probe_argv[0],
                 c->errstr[0] ? c->errstr : "I/O error");
        return STORE_EUNREACHABLE;
    }
    int rc = r->opt.probe_check(rep, w, err, errlen);
    freeReplyObject(rep);
    return rc;
}

static void mark_down(redis_link *r, const char *why)
{
    pthread_mutex_lock(&r->lock);
    if (r->up) {
        r->up = false;
        atomic_store(&r->up_flag, false);
        r->gen++;
        snprintf(r->reason, sizeof r->reason, "%s", why);
        log_msg(LOG_WARN, "Redis unavailable: %s; refusing calls until it answers again", why);
        pthread_cond_signal(&r->wake);
    }
    pthread_mutex_unlock(&r->lock);
}

/* The monitors' pause (r->lock held): wait_ms, or less if woken. */
static void monitor_wait(redis_link *r, int64_t wait_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&r->wake, &r->lock, &until);
}

/* The monitor of one Redis: probe every second while up, reconnect with
 * backoff while down (up again once the probe passes). */
static void *monitor_main(void *arg)
{
    redis_link *r = arg;
    redisContext *ctx = NULL;
    int64_t backoff_ms = 100;
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        int64_t wait_ms = r->up ? 1000 : backoff_ms;
        monitor_wait(r, wait_ms);
        if (r->stopping)
            break;
        bool was_up = r->up;
        pthread_mutex_unlock(&r->lock);

        char err[512] = "";
        int code = 0;
        bool ok = false;
        if (!was_up && ctx) { /* a connection from before the failure */
            redisFree(ctx);
            ctx = NULL;
        }
        if (!ctx)
            ctx = connect_one(r, NULL, &code, err, sizeof err);
        if (ctx) {
            ok = probe_one(r, ctx, err, sizeof err) == STORE_OK;
            if (!ok) {
                redisFree(ctx);
                ctx = NULL;
            }
        }
        if (ok) {
            backoff_ms = 100;
            if (!was_up) {
                pthread_mutex_lock(&r->lock);
                r->up = true;
                atomic_store(&r->up_flag, true);
                r->reason[0] = '\0';
                pthread_mutex_unlock(&r->lock);
                atomic_fetch_add(&r->reconnects, 1);
                log_msg(LOG_INFO, "Redis answers again: serving");
            }
        } else {
            if (was_up)
                mark_down(r, err);
            else if (backoff_ms < 2000)
                backoff_ms = backoff_ms * 2 > 2000 ? 2000 : backoff_ms * 2;
            pthread_mutex_lock(&r->lock);
            if (!r->up)
                snprintf(r->reason, sizeof r->reason, "%s", err);
            pthread_mutex_unlock(&r->lock);
        }
        pthread_mutex_lock(&r->lock);
    }
    pthread_mutex_unlock(&r->lock);
    if (ctx)
        redisFree(ctx);
    return NULL;
}

/* ---------------------------------------------------------------- calls */

static int64_t wait_ms(const redis_link *r)
{
    return r->opt.wait_timeout_ms;
}

/* A change applied, but fewer replicas than --redis-wait acknowledged it. */
static void wait_short(redis_link *r, long long acked)
{
    atomic_fetch_add(&r->errors, 1);
    atomic_fetch_add(&r->unknown, 1);
    log_msg(LOG_ERROR,
            "Redis: a change was applied but only %lld of %u replicas "
            "acknowledged it within the timeout",
            acked, r->opt.wait_replicas);
}

static void count_rtt(redis_link *r, int64_t us)
{
    unsigned i = 0;
    while (i < RTT_BUCKETS - 1 && (uint64_t)us > rtt_bounds_us[i])
        i++;
    atomic_fetch_add(&r->rtt_buckets[i], 1);
    atomic_fetch_add(&r->rtt_sum_us, (uint64_t)us);
}

void redis_link_count_error(redis_link *l, bool unknown)
{
    atomic_fetch_add(&l->errors, 1);
    if (unknown)
        atomic_fetch_add(&l->unknown, 1);
}

void redis_cmds_free(redis_cmd *cmds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cmds[i].reply)
            freeReplyObject(cmds[i].reply);
    free(cmds);
}

/* ------------------------------------------------------------ the pipes */

/*
 * A caller's commands on a pipe (redis_conn.h "One Redis"), on its stack; or,
 * with is_wait, the WAIT that follows a batch of changes (allocated by the
 * writer, no thread of its own). Fields under the pipe's lock.
 */
struct waiter {
    redis_cmd *cmds;
    size_t n;
    bool change;
    bool covered; /* a change whose outcome waits for its batch's WAIT */
    bool is_wait;
    bool done;
    bool parked;      /* its caller sleeps in pipe_await, free to take a role */
    size_t got;       /* replies received */
    int64_t t0_us;    /* when the call began (round trip figures) */
    int64_t until_us; /* its deadline: past it, the connection is broken */
    hf_buf out;       /* its commands in RESP, formatted before it queues */
    pthread_cond_t cv;
    waiter *next;         /* in its connection's queue or flight list */
    waiter *covers;       /* is_wait: the changes it covers */
    waiter *next_covered; /* in a WAIT's covers */
    pconn *c;
    struct pipe *p; /* the pipe it was queued on */
};

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
    pthread_cond_t room;
    node_link *nl;
    pconn *c;    /* NULL until a caller connects */
    size_t cmds; /* commands admitted and not answered (the bound) */
    unsigned room_waiters;
    atomic_size_t load; /* cmds, read without the lock to choose a pipe */
};


/* Guard on a waiter's sleep: roles are handed on explicitly; this only
 * bounds what a missed wake-up would cost. */
#define ROLE_GUARD_US 200000

static void cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us)
{
    int64_t now = hf_clock_mono_us();
    if (until_us <= now)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = (int64_t)ts.tv_nsec + (until_us - now) * 1000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(cv, mu, &ts);
}

static void cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static node_link *node_new(redis_link *r, const char *host, size_t hostlen, int port,
                           const char *addr)
{
    node_link *nl = hf_xcalloc(1, sizeof *nl);
    if (host) {
        nl->host = dup_n(host, hostlen);
        nl->port = port;
    }
    snprintf(nl->addr, sizeof nl->addr, "%s", addr);
    nl->npipes = r->opt.connections ? r->opt.connections : 1;
    nl->pipes = hf_xcalloc(nl->npipes, sizeof *nl->pipes);
    for (size_t i = 0; i < nl->npipes; i++) {
        pthread_mutex_init(&nl->pipes[i].mu, NULL);
        cond_init_mono(&nl->pipes[i].room);
        nl->pipes[i].nl = nl;
    }
    return nl;
}

static void pconn_maybe_free(pconn *c)
{
    if (!(c->broken || c->retired) || c->users || c->queue || c->flight)
        return;
    redisFree(c->ctx);
    hf_buf_free(&c->wbuf);
    free(c);
}

static void node_free(node_link *nl)
{
    if (!nl)
        return;
    for (size_t i = 0; i < nl->npipes; i++) {
        struct pipe *p = &nl->pipes[i];
        if (p->c) { /* no caller is left: nothing queued, in flight or holding a role */
            p->c->retired = true;
            pconn_maybe_free(p->c);
        }
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->room);
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
        mark_down(r, why);
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
static bool node_refusing(redis_link *r, node_link *nl)
{
    if (!nl->host)
        return !atomic_load(&r->up_flag);
    int64_t until = atomic_load(&nl->down_until_us);
    return until && hf_clock_mono_us() < until;
}

/* A caller's call answered (pipe lock held): its figures, its wake-up, room. */
static void finish(redis_link *r, struct pipe *p, waiter *w)
{
    w->done = true;
    p->cmds -= w->n;
    atomic_store(&p->load, p->cmds);
    count_rtt(r, hf_clock_mono_us() - w->t0_us);
    if (p->room_waiters)
        pthread_cond_broadcast(&p->room);
    pthread_cond_signal(&w->cv);
}

/* A caller's commands on a connection that failed: not sent (nothing
 * changed) or sent (a change's outcome unknown). Counted as errors where
 * that is their outcome: a cluster node's others go to a routing handle
 * (cl_fast_exec), which counts them if they fail there. */
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
    shutdown(c->ctx->fd, SHUT_RDWR); /* a role holder in poll() or send() returns */
    node_failed(r, p->nl, why);
    /* freed by the caller, a role holder, once it is done with it */
}

/* The outcome of a change under --redis-wait once its batch's WAIT answered. */
static void finish_waited(redis_link *r, struct pipe *p, waiter *w, long long acked)
{
    for (size_t i = 0; i < w->n; i++) {
        if (w->cmds[i].reply->type != REDIS_REPLY_ERROR &&
            acked < (long long)r->opt.wait_replicas) {
            wait_short(r, acked);
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
        freeReplyObject(reply);
        c->flight = h->next;
        while (h->covers) {
            waiter *x = h->covers;
            h->covers = x->next_covered;
            finish_waited(r, p, x, acked);
        }
        free(h);
    } else {
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
 * sleeps in pipe_await, free to take a role; NULL if none. */
static waiter *parked_of(waiter *w)
{
    if (!w->is_wait)
        return w->parked ? w : NULL;
    for (waiter *x = w->covers; x; x = x->next_covered)
        if (x->parked)
            return x;
    return NULL;
}

/* Hand the free roles on (pipe lock held): the first sleeping caller in
 * flight reads. (The writer empties the queue before it leaves, so the
 * queue needs nobody.) A caller busy elsewhere (its call's commands on
 * another node) takes a role when it comes back to this pipe. */
static void wake_roles(pconn *c)
{
    if (c->broken || c->reading)
        return;
    for (waiter *w = c->flight; w; w = w->next) {
        waiter *x = parked_of(w);
        if (x) {
            pthread_cond_signal(&x->cv);
            return;
        }
    }
}

/* The writer (pipe lock held on entry and exit): the whole queue, and one
 * WAIT after it if it holds a change under --redis-wait, in one send; again
 * while callers queued more meanwhile. */
static void write_queue(redis_link *r, struct pipe *p, pconn *c)
{
    c->writing = true;
    c->users++;
    while (c->queue && !c->broken) {
        waiter *batch = c->queue;
        c->queue = c->queue_tail = NULL;
        waiter *mark = NULL;
        c->wbuf.len = 0;
        int64_t until = INT64_MAX;
        size_t ncmds = 0;
        for (waiter *w = batch; w; w = w->next) {
            hf_buf_append(&c->wbuf, w->out.ptr, w->out.len);
            ncmds += w->n;
            if (w->until_us < until)
                until = w->until_us;
            if (w->change && r->opt.wait_replicas > 0) {
                if (!mark) {
                    mark = hf_xcalloc(1, sizeof *mark);
                    mark->is_wait = true;
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
            char nrep[24], tmo[24];
            int a = snprintf(nrep, sizeof nrep, "%u", r->opt.wait_replicas);
            int b = snprintf(tmo, sizeof tmo, "%lld", (long long)wait_ms(r));
            const char *argv[3] = {"WAIT", nrep, tmo};
            size_t lens[3] = {4, (size_t)a, (size_t)b};
            hf_resp_command(&c->wbuf, 3, argv, lens);
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
        atomic_fetch_add(&r->writes, 1);
        atomic_fetch_add(&p->nl->sent, ncmds);
        pthread_mutex_unlock(&p->mu);

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
            int64_t left_ms = (until - hf_clock_mono_us()) / 1000;
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (left_ms <= 0 ||
                poll(&pf, 1, (int)(left_ms > INT32_MAX ? INT32_MAX : left_ms)) == 0) {
                why = "Resource temporarily unavailable"; /* hiredis's words for a timeout */
                break;
            }
        }

        pthread_mutex_lock(&p->mu);
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
    c->reading = true;
    c->users++;
    int64_t until = INT64_MAX;
    for (waiter *w = c->flight; w; w = w->next)
        if (w->until_us < until)
            until = w->until_us;
    pthread_mutex_unlock(&p->mu);

    const char *why = NULL;
    redisReply **got = NULL;
    size_t ngot = 0, cap = 0;
    int fd = c->ctx->fd;
    for (;;) {
        int64_t left_ms = (until - hf_clock_mono_us() + 999) / 1000;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        int pr = left_ms > 0 ? poll(&pf, 1, (int)(left_ms > INT32_MAX ? INT32_MAX : left_ms)) : 0;
        if (pr < 0 && errno == EINTR)
            continue;
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

    pthread_mutex_lock(&p->mu);
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
    wake_roles(c);
    pconn_maybe_free(c);
}

/* An idle connection that Redis closed meanwhile reads as readable (EOF). */
static bool conn_dead(const pconn *c)
{
    struct pollfd p = {.fd = c->ctx->fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

/* The pipe's connection for a new call (pipe lock held): the current one,
 * or a new one instead of one from before Redis went down or one Redis
 * closed while it sat idle. NULL: the node unreachable (node_failed). */
static pconn *pipe_conn(redis_link *r, struct pipe *p, uint64_t gen)
{
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
    char err[512];
    int code;
    redisContext *ctx = connect_one(r, p->nl, &code, err, sizeof err);
    if (!ctx) {
        node_failed(r, p->nl, err);
        return NULL;
    }
    if (p->nl->host) {
        atomic_store(&p->nl->backoff_ms, 0);
        atomic_store(&p->nl->down_until_us, 0);
    }
    int fl = fcntl(ctx->fd, F_GETFL);
    fcntl(ctx->fd, F_SETFL, fl | O_NONBLOCK);
    c = hf_xcalloc(1, sizeof *c);
    c->ctx = ctx;
    c->gen = gen;
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
        if (node_refusing(r, p->nl)) {
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
        p->room_waiters++;
        cond_wait_until(&p->room, &p->mu, until);
        p->room_waiters--;
    }
    return true;
}

/* A caller's n commands as a waiter for its node (not queued yet). */
static void waiter_init(redis_link *r, waiter *w, redis_cmd *cmds, size_t n, bool change,
                        int64_t t0_us)
{
    *w = (waiter){.cmds = cmds, .n = n, .change = change, .t0_us = t0_us};
    w->until_us = t0_us + r->opt.command_timeout_ms * 1000;
    if (r->opt.wait_replicas > 0) /* a WAIT pipelined ahead may hold it that long */
        w->until_us += r->opt.wait_timeout_ms * 1000;
    for (size_t i = 0; i < n; i++)
        hf_resp_command(&w->out, cmds[i].argc, cmds[i].argv, cmds[i].argvlen);
    cond_init_mono(&w->cv);
}

static void waiter_free(waiter *w)
{
    hf_buf_free(&w->out);
    pthread_cond_destroy(&w->cv);
}

/* w's commands queued on a pipe of its node and, if nobody writes there,
 * written at once (so that a call's commands are out on all their nodes
 * before it waits for any). false: refused, nothing sent (the commands
 * keep STORE_EUNAVAILABLE). */
static bool pipe_submit(redis_link *r, node_link *nl, waiter *w, uint64_t gen)
{
    struct pipe *p = pick_pipe(nl);
    pthread_mutex_lock(&p->mu);
    bool waited = false;
    if (!admit(r, p, w->n, w->t0_us + r->opt.command_timeout_ms * 1000, &waited))
        goto refused;
    if (!nl->host && (waited || !p->c)) { /* Redis may have gone down: refuse, not reconnect */
        pthread_mutex_lock(&r->lock);
        bool up = r->up;
        gen = r->gen;
        pthread_mutex_unlock(&r->lock);
        if (!up) {
            atomic_fetch_add(&r->refused_down, 1);
            goto refused;
        }
    }
    pconn *c = pipe_conn(r, p, gen);
    if (!c)
        goto refused;
    p->cmds += w->n;
    atomic_store(&p->load, p->cmds);
    w->c = c;
    w->p = p;
    if (c->queue_tail)
        c->queue_tail->next = w;
    else
        c->queue = w;
    c->queue_tail = w;
    if (!c->writing)
        write_queue(r, p, c);
    pthread_mutex_unlock(&p->mu);
    return true;
refused:
    pthread_mutex_unlock(&p->mu);
    if (!nl->host) /* a cluster node's go to a routing handle */
        atomic_fetch_add(&r->errors, w->n);
    return false;
}

/* Until w is answered: read (or write) when that role is free, else sleep
 * until handed one or answered. */
static void pipe_await(redis_link *r, waiter *w)
{
    struct pipe *p = w->p;
    pthread_mutex_lock(&p->mu);
    while (!w->done) {
        pconn *c = w->c; /* not freed while it holds an unanswered waiter */
        if (!c->broken && !c->writing && c->queue) {
            write_queue(r, p, c);
        } else if (!c->broken && !c->reading && c->flight) {
            read_replies(r, p, c);
        } else {
            w->parked = true;
            cond_wait_until(&w->cv, &p->mu, hf_clock_mono_us() + ROLE_GUARD_US);
            w->parked = false;
        }
    }
    /* done: w->c may be gone (freed by whoever broke it); roles were handed
     * on by whoever answered this call */
    pthread_mutex_unlock(&p->mu);
}

/* One Redis: the n commands queued on a pipe, written with whatever else
 * is queued there, their replies matched in order. */
static void one_exec(redis_link *r, redis_cmd *cmds, size_t n, bool change)
{
    pthread_mutex_lock(&r->lock);
    bool up = r->up;
    uint64_t gen = r->gen;
    pthread_mutex_unlock(&r->lock);
    if (!up) {
        atomic_fetch_add(&r->refused_down, 1);
        atomic_fetch_add(&r->errors, n);
        return;
    }
    waiter w;
    waiter_init(r, &w, cmds, n, change, hf_clock_mono_us());
    if (pipe_submit(r, r->one, &w, gen))
        pipe_await(r, &w);
    waiter_free(&w);
}

/* ------------------------------------------------------ Redis Cluster */

/* What a handle's nodes did since it was last folded, added to the
 * link's per-node figures (by address: handles number nodes alike only
 * by chance); the node's flags and slots as this handle sees them. */
static void cl_fold(redis_link *r, conn *c)
{
    size_t n = cluster_node_count(c->cl);
    if (n > c->nseen) {
        c->seen = hf_xreallocarray(c->seen, n, sizeof *c->seen);
        memset(c->seen + c->nseen, 0, (n - c->nseen) * sizeof *c->seen);
        c->nseen = n;
    }
    cluster_stats t;
    cluster_get_stats(c->cl, &t);
    pthread_mutex_lock(&r->lock);
    r->cl_refreshes += t.refreshes - c->seen_totals.refreshes;
    r->cl_refresh_failures += t.refresh_failures - c->seen_totals.refresh_failures;
    r->cl_rounds += t.rounds - c->seen_totals.rounds;
    c->seen_totals = t;
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        node_fig *f = NULL;
        for (size_t j = 0; j < r->nfigs && !f; j++)
            if (strcmp(r->figs[j].s.addr, ns.addr) == 0)
                f = &r->figs[j];
        if (!f) {
            r->figs = hf_xreallocarray(r->figs, r->nfigs + 1, sizeof *r->figs);
            f = &r->figs[r->nfigs++];
            memset(f, 0, sizeof *f);
            memcpy(f->s.addr, ns.addr, sizeof ns.addr);
        }
        const cluster_node_stats *o = &c->seen[i];
        f->s.requests += ns.requests - o->requests;
        f->s.moved += ns.moved - o->moved;
        f->s.ask += ns.ask - o->ask;
        f->s.retries += ns.retries - o->retries;
        f->s.errors += ns.errors - o->errors;
        f->s.connects += ns.connects - o->connects;
        f->s.primary = ns.primary;
        f->s.replica = ns.replica;
        f->s.down = ns.down;
        f->s.slots = ns.slots;
        c->seen[i] = ns;
    }
    pthread_mutex_unlock(&r->lock);
}

static conn *cl_open(redis_link *r, int *code, char *err, size_t errlen)
{
    cluster_t *cl;
    int rc = cluster_open(&r->copt, &cl, err, errlen);
    if (rc != CLUSTER_OK) {
        *code = rc == CLUSTER_EAUTH                            ? STORE_EAUTH
                : rc == CLUSTER_EINVAL || rc == CLUSTER_EPROTO ? STORE_ECONFIG
                                                               : STORE_EUNREACHABLE;
        return NULL;
    }
    conn *c = hf_xcalloc(1, sizeof *c);
    c->cl = cl;
    return c;
}

static void cl_free(conn *c)
{
    cluster_close(c->cl);
    free(c->seen);
    free(c);
}

static conn *cl_borrow(redis_link *r)
{
    pthread_mutex_lock(&r->lock);
    conn *c = r->idle;
    if (c)
        r->idle = c->next;
    pthread_mutex_unlock(&r->lock);
    if (c)
        return c;
    char err[512];
    int code;
    c = cl_open(r, &code, err, sizeof err);
    if (!c)
        log_msg(LOG_WARN, "Redis Cluster: %s", err);
    return c;
}

static void cl_give_back(redis_link *r, conn *c)
{
    cl_fold(r, c);
    pthread_mutex_lock(&r->lock);
    c->next = r->idle;
    r->idle = c;
    pthread_mutex_unlock(&r->lock);
}

/* The primaries of the handle's map, as commands of argv to each (*m). */
static redis_cmd *cl_primaries(conn *c, int argc, const char **argv, const size_t *lens, size_t *m)
{
    size_t n = cluster_node_count(c->cl);
    redis_cmd *cmds = hf_xcalloc(n ? n : 1, sizeof *cmds);
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (!ns.primary)
            continue;
        redis_cmd *d = &cmds[(*m)++];
        *d = (redis_cmd){.argc = argc,
                         .argv = argv,
                         .argvlen = lens,
                         .slot = -1,
                         .node = (int)i,
                         .code = STORE_EUNAVAILABLE};
        snprintf(d->addr, sizeof d->addr, "%s", ns.addr);
    }
    return cmds;
}

/* After a redirected batch: WAIT on every primary (the changes ran on the
 * nodes the redirects named, maybe not where their WAITs went). */
static bool cl_wait_all(redis_link *r, conn *c)
{
    atomic_fetch_add(&r->cl_rewaits, 1);
    char wn[16], wt[24];
    snprintf(wn, sizeof wn, "%u", r->opt.wait_replicas);
    snprintf(wt, sizeof wt, "%lld", (long long)wait_ms(r));
    const char *argv[3] = {"WAIT", wn, wt};
    size_t lens[3] = {4, strlen(wn), strlen(wt)};
    size_t m;
    redis_cmd *p = cl_primaries(c, 3, argv, lens, &m);
    cluster_cmd *cmds = hf_xcalloc(m ? m : 1, sizeof *cmds);
    for (size_t i = 0; i < m; i++)
        cmds[i] = (cluster_cmd){.argc = 3,
                                .argv = argv,
                                .argvlen = lens,
                                .slot = -1,
                                .node = p[i].node,
                                .flags = CLUSTER_CMD_IDEMPOTENT};
    cluster_exec(c->cl, cmds, m);
    bool ok = true;
    for (size_t i = 0; i < m; i++) {
        if (!cmds[i].reply || cmds[i].reply->type != REDIS_REPLY_INTEGER ||
            cmds[i].reply->integer < (long long)r->opt.wait_replicas)
            ok = false;
        if (cmds[i].reply)
            freeReplyObject(cmds[i].reply);
    }
    free(cmds);
    free(p);
    return ok;
}

/*
 * Run n commands at once on the handle c (one round trip per node, the
 * nodes in parallel), each to the node of its slot (or its node). For a
 * change under --redis-wait each command is followed by a WAIT in the same
 * round trip on its node; when the batch was redirected or retried, its
 * WAITs may have gone elsewhere than its commands, so a WAIT then goes to
 * every primary.
 */
static void cl_exec(redis_link *r, conn *c, redis_cmd *cmds, size_t n, bool change)
{
    bool wait = change && r->opt.wait_replicas > 0;
    char wn[16], wt[24];
    snprintf(wn, sizeof wn, "%u", r->opt.wait_replicas);
    snprintf(wt, sizeof wt, "%lld", (long long)wait_ms(r));
    const char *wargv[3] = {"WAIT", wn, wt};
    size_t wlens[3] = {4, strlen(wn), strlen(wt)};
    cluster_cmd *batch = hf_xcalloc(2 * (n ? n : 1), sizeof *batch);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        batch[m++] = (cluster_cmd){.argc = cmds[i].argc,
                                   .argv = cmds[i].argv,
                                   .argvlen = cmds[i].argvlen,
                                   .slot = cmds[i].slot,
                                   .node = cmds[i].node,
                                   .flags = change ? 0 : CLUSTER_CMD_IDEMPOTENT};
        if (wait)
            batch[m++] = (cluster_cmd){.argc = 3,
                                       .argv = wargv,
                                       .argvlen = wlens,
                                       .slot = cmds[i].slot,
                                       .node = cmds[i].node,
                                       .flags = CLUSTER_CMD_IDEMPOTENT};
    }
    cluster_stats before, after;
    cluster_get_stats(c->cl, &before);
    int64_t t0 = hf_clock_mono_us();
    cluster_exec(c->cl, batch, m);
    count_rtt(r, hf_clock_mono_us() - t0);
    cluster_get_stats(c->cl, &after);
    bool redirected = after.rounds - before.rounds > 1;
    bool rewait = false;
    m = 0;
    for (size_t i = 0; i < n; i++) {
        cluster_cmd *b = &batch[m++];
        cluster_cmd *w = wait ? &batch[m++] : NULL;
        long long acked = -1;
        if (w && w->reply) {
            if (w->reply->type == REDIS_REPLY_INTEGER)
                acked = w->reply->integer;
            freeReplyObject(w->reply);
        }
        if (!b->reply) {
            bool sent = b->error == CLUSTER_ETIMEOUT || b->error == CLUSTER_ECONN;
            atomic_fetch_add(&r->errors, 1);
            cmds[i].code = change && sent ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
            if (cmds[i].code == STORE_EUNCERTAIN) {
                atomic_fetch_add(&r->unknown, 1);
                log_msg(LOG_ERROR,
                        "Redis Cluster: %s after a change was sent: its outcome "
                        "is unknown",
                        cluster_last_error(c->cl));
            } else {
                log_msg(LOG_WARN, "Redis Cluster: %s (%s)", cluster_strerror(b->error),
                        cluster_last_error(c->cl));
            }
            continue;
        }
        if (wait && !redirected && b->reply->type != REDIS_REPLY_ERROR &&
            acked < (long long)r->opt.wait_replicas) {
            wait_short(r, acked);
            freeReplyObject(b->reply);
            cmds[i].code = STORE_EUNCERTAIN;
            continue;
        }
        if (wait && redirected)
            rewait = true;
        cmds[i].reply = b->reply;
        cmds[i].code = STORE_OK;
    }
    if (rewait && !cl_wait_all(r, c)) {
        for (size_t i = 0; i < n; i++)
            if (cmds[i].reply && cmds[i].reply->type != REDIS_REPLY_ERROR) {
                wait_short(r, -1);
                freeReplyObject(cmds[i].reply);
                cmds[i].reply = NULL;
                cmds[i].code = STORE_EUNCERTAIN;
            }
    }
    free(batch);
}

/* The node_link of a primary's address, added at first sight (map_lock
 * held for writing); NO_NODE if the address does not parse. */
static uint16_t node_index(redis_link *r, const char *addr)
{
    for (size_t i = 0; i < r->nnodes; i++)
        if (strcmp(r->nodes[i]->addr, addr) == 0)
            return (uint16_t)i;
    hf_hostport hp;
    if (r->nnodes >= NO_NODE ||
        hf_hostport_parse(addr, strlen(addr), HF_HOSTPORT_NEED_PORT | HF_HOSTPORT_BARE_V6, &hp) !=
            HF_HOSTPORT_OK)
        return NO_NODE;
    r->nodes = hf_xreallocarray(r->nodes, r->nnodes + 1, sizeof *r->nodes);
    r->nodes[r->nnodes] = node_new(r, hp.host, hp.host_len, hp.port, addr);
    return (uint16_t)r->nnodes++;
}

/* A routing handle's slot map, taken for the pipes: each slot to the
 * node_link of its primary. */
static void cl_map_take(redis_link *r, cluster_t *cl)
{
    size_t n = cluster_node_count(cl);
    uint16_t *of = hf_xcalloc(n ? n : 1, sizeof *of);
    pthread_rwlock_wrlock(&r->map_lock);
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(cl, i, &ns);
        of[i] = ns.primary ? node_index(r, ns.addr) : NO_NODE;
    }
    pthread_rwlock_unlock(&r->map_lock);
    uint16_t *map = hf_xmalloc(sizeof r->slot_node);
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        int k = cluster_slot_node(cl, s);
        map[s] = k < 0 || (size_t)k >= n ? NO_NODE : of[k];
    }
    pthread_rwlock_wrlock(&r->map_lock);
    memcpy(r->slot_node, map, sizeof r->slot_node);
    r->map_us = hf_clock_mono_us();
    atomic_store(&r->map_stale, false);
    pthread_rwlock_unlock(&r->map_lock);
    free(map);
    free(of);
}

/* A reply that says the command ran nowhere and a routing handle should
 * carry it (redirected, or to be retried); counts the node's redirects. */
static bool for_the_handles(node_link *nl, const redisReply *rep)
{
    if (!rep || rep->type != REDIS_REPLY_ERROR)
        return false;
    if (strncmp(rep->str, "MOVED ", 6) == 0) {
        atomic_fetch_add(&nl->moved, 1);
        return true;
    }
    if (strncmp(rep->str, "ASK ", 4) == 0) {
        atomic_fetch_add(&nl->ask, 1);
        return true;
    }
    return strncmp(rep->str, "TRYAGAIN", 8) == 0 || strncmp(rep->str, "CLUSTERDOWN", 11) == 0 ||
           strncmp(rep->str, "LOADING", 7) == 0;
}

/* The commands of cmds marked in slow, through a routing handle (cl_exec);
 * the map taken anew from it when stale. */
static void cl_slow_exec(redis_link *r, redis_cmd *cmds, const bool *slow, size_t m, size_t n,
                         bool change)
{
    redis_cmd *sub = hf_xcalloc(m, sizeof *sub);
    for (size_t i = 0, k = 0; i < n; i++)
        if (slow[i])
            sub[k++] = (redis_cmd){.argc = cmds[i].argc,
                                   .argv = cmds[i].argv,
                                   .argvlen = cmds[i].argvlen,
                                   .slot = cmds[i].slot,
                                   .node = cmds[i].node,
                                   .code = STORE_EUNAVAILABLE};
    atomic_fetch_add(&r->cl_by_handles, m);
    conn *c = cl_borrow(r);
    if (c) {
        cl_exec(r, c, sub, m, change);
        pthread_rwlock_rdlock(&r->map_lock);
        bool take = atomic_load(&r->map_stale) && hf_clock_mono_us() - r->map_us > 10000;
        pthread_rwlock_unlock(&r->map_lock);
        if (take)
            cl_map_take(r, c->cl);
        cl_give_back(r, c);
    } else {
        atomic_fetch_add(&r->errors, m);
    }
    for (size_t i = 0, k = 0; i < n; i++)
        if (slow[i]) {
            cmds[i].reply = sub[k].reply;
            cmds[i].code = sub[k].code;
            k++;
        }
    free(sub);
}

/*
 * Over a cluster (redis_conn.h "A Redis Cluster"): each command on a pipe
 * of the primary that the map gives its slot, every node's share written
 * before any reply is awaited, so that the nodes work at once and the
 * calls of every thread share writes and reads. A routing handle carries
 * what the pipes cannot settle: a command whose slot has no primary in
 * the map or whose node is in its pause; one refused or not sent; a read
 * whose answer was lost; one redirected (MOVED, ASK) or told to retry
 * (TRYAGAIN, CLUSTERDOWN, LOADING), which ran nowhere. A change sent and
 * not answered is STORE_EUNCERTAIN here, as in cl_exec.
 */
static void cl_fast_exec(redis_link *r, redis_cmd *cmds, size_t n, bool change)
{
    node_link **gn = hf_xmalloc(n * sizeof *gn); /* the nodes, one group each */
    size_t *gc = hf_xcalloc(n + 1, sizeof *gc);  /* commands per group, then offsets */
    size_t *gof = hf_xmalloc(n * sizeof *gof);   /* each command's group, or n: slow */
    bool *slow = hf_xcalloc(n, sizeof *slow);
    size_t g = 0, nslow = 0;
    pthread_rwlock_rdlock(&r->map_lock);
    for (size_t i = 0; i < n; i++) {
        uint16_t k = cmds[i].slot >= 0 && cmds[i].slot < CLUSTER_SLOTS ? r->slot_node[cmds[i].slot]
                                                                       : NO_NODE;
        node_link *nl = k == NO_NODE ? NULL : r->nodes[k];
        if (!nl || node_refusing(r, nl)) {
            gof[i] = n;
            continue;
        }
        size_t j = 0;
        while (j < g && gn[j] != nl)
            j++;
        if (j == g)
            gn[g++] = nl;
        gof[i] = j;
        gc[j]++;
    }
    pthread_rwlock_unlock(&r->map_lock);

    /* each group's commands side by side in sub, from gc[j] on */
    redis_cmd *sub = hf_xmalloc((n ? n : 1) * sizeof *sub);
    size_t *idx = hf_xmalloc((n ? n : 1) * sizeof *idx);
    for (size_t j = 0, off = 0; j <= g; j++) {
        size_t c = gc[j];
        gc[j] = off;
        off += c;
    }
    size_t *fill = hf_xmalloc((g ? g : 1) * sizeof *fill);
    memcpy(fill, gc, (g ? g : 1) * sizeof *fill);
    for (size_t i = 0; i < n; i++) {
        if (gof[i] == n)
            continue;
        size_t k = fill[gof[i]]++;
        idx[k] = i;
        sub[k] = (redis_cmd){.argc = cmds[i].argc,
                             .argv = cmds[i].argv,
                             .argvlen = cmds[i].argvlen,
                             .slot = cmds[i].slot,
                             .node = cmds[i].node,
                             .code = STORE_EUNAVAILABLE};
    }
    waiter *ws = hf_xmalloc((g ? g : 1) * sizeof *ws);
    bool *queued = hf_xmalloc((g ? g : 1) * sizeof *queued);
    int64_t t0 = hf_clock_mono_us();
    for (size_t j = 0; j < g; j++) {
        waiter_init(r, &ws[j], sub + gc[j], gc[j + 1] - gc[j], change, t0);
        queued[j] = pipe_submit(r, gn[j], &ws[j], 0);
    }
    for (size_t j = 0; j < g; j++) {
        if (queued[j])
            pipe_await(r, &ws[j]);
        waiter_free(&ws[j]);
    }
    size_t settled = 0;
    for (size_t j = 0; j < g; j++)
        for (size_t k = gc[j]; k < gc[j + 1]; k++) {
            redis_cmd *d = &sub[k];
            size_t i = idx[k];
            if (d->code == STORE_EUNAVAILABLE || for_the_handles(gn[j], d->reply)) {
                if (d->reply)
                    freeReplyObject(d->reply);
                if (d->code != STORE_EUNAVAILABLE) /* redirected: the map is behind */
                    atomic_store(&r->map_stale, true);
                slow[i] = true;
                continue;
            }
            cmds[i].reply = d->reply;
            cmds[i].code = d->code;
            settled++;
        }
    for (size_t i = 0; i < n; i++)
        if (gof[i] == n)
            slow[i] = true;
    for (size_t i = 0; i < n; i++)
        nslow += slow[i];
    atomic_fetch_add(&r->cl_pipelined, settled);
    if (nslow)
        cl_slow_exec(r, cmds, slow, nslow, n, change);
    free(queued);
    free(ws);
    free(fill);
    free(idx);
    free(sub);
    free(slow);
    free(gof);
    free(gc);
    free(gn);
}

/* The probe on every primary of the handle's map, outside the figures:
 * the commands with their replies (*m of them; redis_cmds_free). */
static redis_cmd *cl_probe_all(redis_link *r, conn *c, size_t *m)
{
    redis_cmd *cmds = cl_primaries(c, r->opt.probe_argc, r->opt.probe_argv, r->probe_lens, m);
    cluster_cmd *batch = hf_xcalloc(*m ? *m : 1, sizeof *batch);
    for (size_t i = 0; i < *m; i++)
        batch[i] = (cluster_cmd){.argc = cmds[i].argc,
                                 .argv = cmds[i].argv,
                                 .argvlen = cmds[i].argvlen,
                                 .slot = -1,
                                 .node = cmds[i].node,
                                 .flags = CLUSTER_CMD_IDEMPOTENT};
    cluster_exec(c->cl, batch, *m);
    for (size_t i = 0; i < *m; i++) {
        cmds[i].reply = batch[i].reply;
        cmds[i].code = batch[i].reply ? STORE_OK : STORE_EUNAVAILABLE;
    }
    free(batch);
    return cmds;
}

/* The monitor's look at the cluster: every primary passes the probe and
 * every slot has a primary. true, or false with why. */
static bool cl_probe(redis_link *r, conn *c, char *err, size_t errlen)
{
    size_t m;
    redis_cmd *cmds = cl_probe_all(r, c, &m);
    bool ok = true;
    for (size_t i = 0; i < m && ok; i++) {
        if (!cmds[i].reply) {
            snprintf(err, errlen, "node %s: %s", cmds[i].addr, cluster_last_error(c->cl));
            ok = false;
        } else if (r->opt.probe_check(cmds[i].reply, cmds[i].addr, err, errlen) != STORE_OK) {
            ok = false;
        }
    }
    redis_cmds_free(cmds, m);
    int uncovered = -1;
    for (int s = 0; s < CLUSTER_SLOTS && uncovered < 0; s++)
        if (cluster_slot_node(c->cl, s) < 0)
            uncovered = s;
    if (ok && uncovered >= 0) {
        snprintf(err, errlen, "slot %d is served by no primary", uncovered);
        ok = false;
    }
    cl_fold(r, c);
    return ok;
}

/* Over a cluster the monitor only tells (health, store_up): every second
 * while all is well, every 200 ms while not; calls never wait for it. */
static void *cl_monitor_main(void *arg)
{
    redis_link *r = arg;
    conn *m = NULL;
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        int64_t pause_ms = r->up ? 1000 : 200;
        monitor_wait(r, pause_ms);
        if (r->stopping)
            break;
        pthread_mutex_unlock(&r->lock);
        char err[512] = "";
        int code;
        if (!m)
            m = cl_open(r, &code, err, sizeof err);
        bool ok = m && cl_probe(r, m, err, sizeof err);
        if (m)
            cl_map_take(r, m->cl);
        pthread_mutex_lock(&r->lock);
        if (ok && !r->up) {
            r->reason[0] = '\0';
            log_msg(LOG_INFO, "Redis Cluster: every slot served, every primary answers");
        } else if (!ok) {
            if (r->up)
                log_msg(LOG_WARN, "Redis Cluster degraded: %s", err);
            snprintf(r->reason, sizeof r->reason, "%s", err);
        }
        if (ok != r->up)
            atomic_fetch_add(&r->reconnects, ok);
        r->up = ok;
        atomic_store(&r->up_flag, ok);
    }
    pthread_mutex_unlock(&r->lock);
    if (m)
        cl_free(m);
    return NULL;
}

/* ------------------------------------------------------------- calls */

void redis_link_exec(redis_link *l, redis_cmd *cmds, size_t n, bool change)
{
    for (size_t i = 0; i < n; i++) {
        cmds[i].reply = NULL;
        cmds[i].code = STORE_EUNAVAILABLE;
    }
    if (n == 0)
        return;
    atomic_fetch_add(&l->calls, n);
    if (!l->cluster) {
        one_exec(l, cmds, n, change);
        return;
    }
    cl_fast_exec(l, cmds, n, change);
}

redis_cmd *redis_link_on_primaries(redis_link *l, int argc, const char **argv,
                                   const size_t *argvlen, bool change, size_t *n)
{
    if (!l->cluster) {
        redis_cmd *cmds = hf_xcalloc(1, sizeof *cmds);
        *cmds = (redis_cmd){.argc = argc, .argv = argv, .argvlen = argvlen, .slot = -1};
        redis_link_where(l, cmds->addr, sizeof cmds->addr);
        *n = 1;
        redis_link_exec(l, cmds, 1, change);
        return cmds;
    }
    *n = 0;
    conn *c = cl_borrow(l);
    if (!c) {
        atomic_fetch_add(&l->errors, 1);
        return hf_xcalloc(1, sizeof(redis_cmd));
    }
    redis_cmd *cmds = cl_primaries(c, argc, argv, argvlen, n);
    atomic_fetch_add(&l->calls, *n);
    cl_exec(l, c, cmds, *n, change);
    cl_give_back(l, c);
    return cmds;
}

bool redis_link_replicated(redis_link *l, char *why, size_t len)
{
    const char *argv[2] = {"INFO", "replication"};
    size_t lens[2] = {4, 11};
    size_t n;
    redis_cmd *cmds = redis_link_on_primaries(l, 2, argv, lens, false, &n);
    bool all = n > 0;
    if (!n)
        snprintf(why, len, "no primary is known");
    for (size_t i = 0; i < n && all; i++) {
        const redisReply *rep = cmds[i].reply;
        const char *f = rep && rep->type == REDIS_REPLY_STRING
                            ? strstr(rep->str, "connected_slaves:")
                            : NULL;
        if (!f || atoi(f + 17) < 1) {
            snprintf(why, len, "%s has no connected replica", cmds[i].addr);
            all = false;
        }
    }
    redis_cmds_free(cmds, n);
    return all;
}

void redis_link_set_wait(redis_link *l, unsigned replicas)
{
    l->opt.wait_replicas = replicas;
}

uint32_t redis_link_primaries(redis_link *l)
{
    if (!l->cluster)
        return 1;
    conn *c = cl_borrow(l);
    if (!c)
        return 0;
    uint32_t n = 0;
    for (size_t i = 0; i < cluster_node_count(c->cl); i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (ns.primary)
            n++;
    }
    cl_give_back(l, c);
    return n;
}

/* ----------------------------------------------------- health, figures */

int redis_link_health(redis_link *r, char *reason, size_t len)
{
    if (atomic_load(&r->up_flag)) {
        if (len)
            reason[0] = '\0';
        return STORE_OK;
    }
    pthread_mutex_lock(&r->lock);
    char w[300];
    snprintf(reason, len, "Redis at %s is unavailable: %s", redis_link_where(r, w, sizeof w),
             r->reason[0] ? r->reason : "not reached yet");
    pthread_mutex_unlock(&r->lock);
    return STORE_EUNAVAILABLE;
}

static void cl_metrics(redis_link *r, const store_emitter *e)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->nfigs;
    node_fig *figs = hf_xreallocarray(NULL, n ? n : 1, sizeof *figs);
    if (n)
        memcpy(figs, r->figs, n * sizeof *figs);
    uint64_t refreshes = r->cl_refreshes, failures = r->cl_refresh_failures, rounds = r->cl_rounds;
    pthread_mutex_unlock(&r->lock);
    const store_metric_type counter = STORE_METRIC_COUNTER, gauge = STORE_METRIC_GAUGE;
    store_emit_metric(e, "hf3fs_metad_store_cluster_nodes", gauge,
                      "Redis Cluster nodes known to this front end (primaries and replicas, "
                      "also those that left the map).",
                      store_int(n));
    store_emit_metric(e, "hf3fs_metad_store_cluster_map_refreshes_total", counter,
                      "Redis Cluster slot maps loaded (CLUSTER SLOTS), by every routing handle.",
                      store_int(refreshes));
    store_emit_family(e, "hf3fs_metad_store_cluster_node_slots", gauge,
                      "Slots a Redis Cluster node serves in the latest map seen (0: a replica "
                      "or a node that left).");
    for (size_t i = 0; i < n; i++) {
        store_label l = {"node", figs[i].s.addr};
        store_emit_sample(e, &l, 1, store_int(figs[i].s.slots));
    }
    store_emit_family(e, "hf3fs_metad_store_cluster_redirects_total", counter,
                      "MOVED and ASK answers of a Redis Cluster node (kind moved or ask).");
    for (size_t i = 0; i < n; i++) {
        store_label l[2] = {{"node", figs[i].s.addr}, {"kind", "moved"}};
        store_emit_sample(e, l, 2, store_int(figs[i].s.moved));
        l[1].value = "ask";
        store_emit_sample(e, l, 2, store_int(figs[i].s.ask));
    }
    store_emit_family(e, "hf3fs_metad_store_cluster_node_errors_total", counter,
                      "Connections to a Redis Cluster node refused, broken or timed out.");
    for (size_t i = 0; i < n; i++) {
        store_label l = {"node", figs[i].s.addr};
        store_emit_sample(e, &l, 1, store_int(figs[i].s.errors));
    }

    store_emit_object(e, "cluster");
    store_emit_number(e, "nodes_known", store_int(n));
    store_emit_number(e, "map_refreshes", store_int(refreshes));
    store_emit_number(e, "map_refresh_failures", store_int(failures));
    store_emit_number(e, "rounds", store_int(rounds));
    store_emit_number(e, "waits_on_every_primary", store_int(atomic_load(&r->cl_rewaits)));
    store_emit_number(e, "commands_pipelined", store_int(atomic_load(&r->cl_pipelined)));
    store_emit_number(e, "commands_by_routing_handles", store_int(atomic_load(&r->cl_by_handles)));
    store_emit_object(e, "nodes");
    for (size_t i = 0; i < n; i++) {
        const cluster_node_stats *s = &figs[i].s;
        store_emit_object(e, s->addr);
        store_emit_string(e, "role",
                          s->primary   ? "primary"
                          : s->replica ? "replica"
                                       : "none",
                          s->primary   ? 7
                          : s->replica ? 7
                                       : 4);
        store_emit_bool(e, "down", s->down);
        store_emit_number(e, "slots", store_int(s->slots));
        store_emit_number(e, "requests", store_int(s->requests));
        store_emit_number(e, "moved", store_int(s->moved));
        store_emit_number(e, "ask", store_int(s->ask));
        store_emit_number(e, "retries", store_int(s->retries));
        store_emit_number(e, "errors", store_int(s->errors));
        store_emit_number(e, "connects", store_int(s->connects));
        store_emit_end(e);
    }
    store_emit_end(e);
    store_emit_end(e);
    free(figs);
}

void redis_link_metrics(redis_link *r, const store_emitter *e)
{
    bool up = atomic_load(&r->up_flag);
    uint64_t counts[RTT_BUCKETS];
    for (unsigned i = 0; i < RTT_BUCKETS; i++)
        counts[i] = atomic_load(&r->rtt_buckets[i]);
    uint64_t calls = atomic_load(&r->calls), errors = atomic_load(&r->errors),
             unknown = atomic_load(&r->unknown), reconnects = atomic_load(&r->reconnects),
             refused = atomic_load(&r->refused_down);
    /* Three families, the ones the operators' rules and dashboard use; the
     * other figures are in /v1/stats. */
    store_emit_metric(e, "hf3fs_metad_store_up", STORE_METRIC_GAUGE,
                      "1 while the shared store (Redis) answers, 0 while this front end "
                      "cannot reach it or it refuses calls (see GET /health).",
                      store_int(up));
    store_emit_family(e, "hf3fs_metad_store_round_trip_seconds", STORE_METRIC_HISTOGRAM,
                      "Time of one round trip to Redis as this front end sees it (one "
                      "command, or a batch, with its WAIT under --redis-wait).");
    store_histogram h = {
        .nbuckets = RTT_BUCKETS,
        .bounds = rtt_bounds_us,
        .counts = counts,
        .sum = atomic_load(&r->rtt_sum_us),
        .decimals = 6,
    };
    store_emit_histogram(e, NULL, 0, &h);
    store_emit_metric(e, "hf3fs_metad_store_errors_total", STORE_METRIC_COUNTER,
                      "Store calls that failed: Redis unreachable, down, timed out, refusing "
                      "the call or answering an error (calls, outcomes unknown and reconnects "
                      "are in /v1/stats, member store).",
                      store_int(errors));

    char w[300], reason[512];
    redis_link_where(r, w, sizeof w);
    pthread_mutex_lock(&r->lock);
    snprintf(reason, sizeof reason, "%s", r->reason);
    pthread_mutex_unlock(&r->lock);
    store_emit_null(e, "persistence"); /* Redis's own: its appendonly settings */
    store_emit_object(e, "store");
    if (r->cluster)
        store_emit_string(e, "engine", "redis-cluster", 13);
    else
        store_emit_string(e, "engine", "redis", 5);
    store_emit_string(e, "address", w, strlen(w));
    store_emit_bool(e, "up", up);
    if (up || !reason[0])
        store_emit_null(e, "down_because");
    else
        store_emit_string(e, "down_because", reason, strlen(reason));
    store_emit_number(e, "calls", store_int(calls));
    store_emit_number(e, "errors", store_int(errors));
    store_emit_number(e, "outcome_unknown", store_int(unknown));
    store_emit_number(e, "refused_while_down", store_int(refused));
    store_emit_number(e, "reconnects", store_int(reconnects));
    store_emit_number(e, "wait_replicas", store_int(r->opt.wait_replicas));
    store_emit_number(e, "connections", store_int(r->opt.connections ? r->opt.connections : 1));
    store_emit_number(e, "max_in_flight", store_int(r->opt.max_in_flight));
    store_emit_number(e, "writes", store_int(atomic_load(&r->writes)));
    store_emit_number(e, "waited_for_room", store_int(atomic_load(&r->waited_for_room)));
    store_emit_number(e, "refused_busy", store_int(atomic_load(&r->refused_busy)));
    if (r->cluster)
        cl_metrics(r, e);
    store_emit_end(e);
}

/* ------------------------------------------------------- open, close */

static void link_free(redis_link *r)
{
    node_free(r->one);
    for (size_t i = 0; i < r->nnodes; i++)
        node_free(r->nodes[i]);
    free(r->nodes);
    pthread_rwlock_destroy(&r->map_lock);
    while (r->idle) {
        conn *c = r->idle;
        r->idle = c->next;
        if (c->cl) {
            cl_free(c);
        } else {
            redisFree(c->ctx);
            free(c);
        }
    }
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->wake);
    free(r->seeds);
    free(r->figs);
    free(r->host);
    free(r->unix_path);
    free(r->user);
    if (r->password) {
        explicit_bzero(r->password, strlen(r->password));
        free(r->password);
    }
    free(r);
}

void redis_link_close(redis_link *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    if (r->monitoring)
        pthread_join(r->monitor, NULL);
    link_free(r);
}

/* Over a cluster at open: the probe on every primary of the first handle. */
static int cl_open_probe(redis_link *r, conn *c, char *err, size_t errlen)
{
    size_t m;
    redis_cmd *cmds = cl_probe_all(r, c, &m);
    int rc = m ? STORE_OK : STORE_EUNAVAILABLE;
    if (!m)
        snprintf(err, errlen, "no primary serves a slot");
    for (size_t i = 0; i < m && rc == STORE_OK; i++) {
        if (!cmds[i].reply) {
            snprintf(err, errlen, "node %s: %s", cmds[i].addr, cluster_last_error(c->cl));
            rc = STORE_EUNREACHABLE;
        } else {
            rc = r->opt.probe_check(cmds[i].reply, cmds[i].addr, err, errlen);
        }
    }
    redis_cmds_free(cmds, m);
    return rc;
}

int redis_link_open(const redis_link_options *opt, redis_link **out, char *err, size_t errlen)
{
    redis_link *r = hf_xcalloc(1, sizeof *r);
    r->opt = *opt;
    r->opt.url = NULL;
    r->opt.password = NULL;
    for (int i = 0; i < r->opt.probe_argc && i < 4; i++)
        r->probe_lens[i] = strlen(r->opt.probe_argv[i]);
    if (!r->opt.max_in_flight)
        r->opt.max_in_flight = 256;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    pthread_rwlock_init(&r->map_lock, NULL);
    memset(r->slot_node, 0xff, sizeof r->slot_node);
    int rc = parse_url(r, opt->url, err, errlen);
    if (rc == STORE_OK && opt->password) {
        free(r->password);
        r->password = dup_n(opt->password, strlen(opt->password));
    }
    if (rc == STORE_OK && r->cluster) {
        r->copt = (cluster_options){
            .seeds = r->seeds,
            .user = r->user,
            .password = r->password,
            .connect_timeout_ms = (int)r->opt.connect_timeout_ms,
            .command_timeout_ms = (int)r->opt.command_timeout_ms,
        };
        char why[400];
        conn *cc = cl_open(r, &rc, why, sizeof why);
        if (cc) {
            rc = cl_open_probe(r, cc, why, sizeof why);
            if (rc == STORE_OK) {
                cl_fold(r, cc);
                cl_map_take(r, cc->cl);
                cc->next = r->idle;
                r->idle = cc;
            } else {
                cl_free(cc);
            }
        }
        if (rc != STORE_OK)
            snprintf(err, errlen, "Redis Cluster %s: %s", r->seeds, why);
    } else if (rc == STORE_OK) {
        r->one = node_new(r, NULL, 0, 0, "");
        redisContext *c = connect_one(r, NULL, &rc, err, errlen);
        if (c) {
            rc = probe_one(r, c, err, errlen);
            redisFree(c);
        }
    }
    if (rc != STORE_OK) {
        link_free(r);
        return rc;
    }
    r->up = true;
    atomic_store(&r->up_flag, true);
    r->monitoring = pthread_create(&r->monitor, NULL, r->cluster ? cl_monitor_main : monitor_main,
                                   r) == 0;
    *out = r;
    return STORE_OK;
}
