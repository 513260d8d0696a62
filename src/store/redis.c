/*
 * redis.c: the Redis engine (redis.h): the store calls as runs of
 * src/store/redis.lua over pooled hiredis connections, the connection's
 * health and its figures.
 *
 * Connections. A call borrows an idle connection (or opens one), sends one
 * EVALSHA (followed, for a change under --redis-wait, by a WAIT in the same
 * round trip) and gives the connection back. A connection that failed is
 * closed. Before a change is sent on a connection that sat idle, a poll()
 * checks that Redis has not closed it (Redis restarted or stopped), so that
 * such a change is refused as unavailable (503) rather than sent into a
 * dead socket and answered "outcome unknown".
 *
 * Up and down. Any I/O failure marks Redis down: every later call is
 * refused at once until the monitor thread reconnects (with backoff) and
 * marks it up again; idle connections from before are then dropped (their
 * generation is old). While up, the monitor pings every second, so that
 * hf3fs_metad_store_up and /health follow Redis without traffic.
 */
#include "store/redis.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "redis_lua.h"
#include "cluster/cluster.h"
#include "util/log.h"
#include "util/xalloc.h"

#define RTT_BUCKETS 13
static const uint64_t rtt_bounds_us[RTT_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000,
};

typedef struct conn {
    redisContext *ctx;
    /* over a Redis Cluster: a routing handle instead of ctx, and the
     * figures of its nodes already added to the engine's */
    cluster_t *cl;
    cluster_node_stats *seen;
    size_t nseen;
    cluster_stats seen_totals;
    uint64_t gen;
    int64_t idle_since_ms;
    struct conn *next;
} conn;

typedef struct store_redis {
    store_t base;
    core_config cfg;
    store_redis_options opt;
    /* the parsed URL */
    char *host, *unix_path, *user, *password;
    int port, db;
    char sha[41];
    /* redis-cluster://: the seed nodes, routed by cluster.c */
    bool cluster;
    char *seeds;
    cluster_options copt;

    pthread_mutex_t lock;
    conn *idle;
    uint64_t gen;          /* bumped when Redis goes down: older connections are dropped */
    bool up;
    char reason[512];      /* why it is down */
    pthread_cond_t wake;
    bool stopping;
    pthread_t monitor;

    /* figures */
    atomic_uint_fast64_t calls, errors, unknown, reconnects, refused_down;
    atomic_uint_fast64_t rtt_buckets[RTT_BUCKETS];
    atomic_uint_fast64_t rtt_sum_us;
    atomic_bool up_flag;
    /* over a cluster (under lock): each node's figures summed over the
     * routing handles, and the handles' totals */
    struct node_fig *figs;
    size_t nfigs;
    uint64_t cl_refreshes, cl_refresh_failures, cl_rounds;
    atomic_uint_fast64_t cl_noscript, cl_rewaits;
} store_redis;

typedef struct node_fig {
    cluster_node_stats s; /* counters summed; flags and slots as the monitor saw them */
} node_fig;

static store_redis *R(store_t *s)
{
    return (store_redis *)s;
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static struct timeval tv_of_ms(int64_t ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};
}

/* ---------------------------------------------------------------- URL */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

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
        int hi = i + 1 < n ? hexval(p[i + 1]) : -1;
        int lo = i + 2 < n ? hexval(p[i + 2]) : -1;
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

static int parse_url(store_redis *r, const char *url, char *err, size_t errlen)
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
            snprintf(err, errlen, "--store %s: a cluster address is "
                     "redis-cluster://[user:password@]host:port[,host:port...] (no database: "
                     "a cluster has only 0)", url);
            return STORE_ECONFIG;
        }
        r->cluster = true;
        r->seeds = dup_n(p, strlen(p));
        return STORE_OK;
    }
    const char *end = p + strcspn(p, "/");
    const char *hend = end;
    r->port = 6379;
    if (*p == '[') { /* [ipv6]:port */
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (!close) {
            snprintf(err, errlen, "--store %s: unclosed [ in the host", url);
            return STORE_ECONFIG;
        }
        r->host = dup_n(p + 1, (size_t)(close - p - 1));
        hend = close + 1;
    } else {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        hend = colon ? colon : end;
        r->host = dup_n(p, (size_t)(hend - p));
    }
    if (hend < end && *hend == ':') {
        char *stop;
        long port = strtol(hend + 1, &stop, 10);
        if (stop != end || port <= 0 || port > 65535) {
            snprintf(err, errlen, "--store %s: the port must be 1..65535", url);
            return STORE_ECONFIG;
        }
        r->port = (int)port;
    } else if (hend != end) {
        snprintf(err, errlen, "--store %s: malformed host:port", url);
        return STORE_ECONFIG;
    }
    if (!r->host[0]) {
        snprintf(err, errlen, "--store %s: no host", url);
        return STORE_ECONFIG;
    }
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

static const char *where(const store_redis *r, char *buf, size_t len)
{
    if (r->cluster)
        snprintf(buf, len, "cluster %s", r->seeds);
    else if (r->unix_path)
        snprintf(buf, len, "unix:%s", r->unix_path);
    else
        snprintf(buf, len, "%s:%d", r->host, r->port);
    return buf;
}

/* The SHA1 of the script (SCRIPT LOAD); 0 or a STORE_E* code. */
static int load_script(store_redis *r, redisContext *c, char *err, size_t errlen)
{
    redisReply *rep = redisCommand(c, "SCRIPT LOAD %s", redis_lua);
    if (!rep) {
        snprintf(err, errlen, "SCRIPT LOAD: %s", c->errstr);
        return STORE_EUNREACHABLE;
    }
    int rc = STORE_OK;
    if (rep->type == REDIS_REPLY_STRING && rep->len == 40) {
        pthread_mutex_lock(&r->lock);
        memcpy(r->sha, rep->str, 40);
        r->sha[40] = '\0';
        pthread_mutex_unlock(&r->lock);
    } else {
        snprintf(err, errlen, "SCRIPT LOAD refused: %.*s", rep->type == REDIS_REPLY_ERROR ? (int)rep->len : 0,
                 rep->type == REDIS_REPLY_ERROR ? rep->str : "");
        rc = STORE_EUNAVAILABLE;
    }
    freeReplyObject(rep);
    return rc;
}

/* A new connection: connected, authenticated, db selected. NULL and err. */
static redisContext *connect_one(store_redis *r, int *code, char *err, size_t errlen)
{
    struct timeval ct = tv_of_ms(r->opt.connect_timeout_ms);
    redisContext *c = r->unix_path ? redisConnectUnixWithTimeout(r->unix_path, ct)
                                   : redisConnectWithTimeout(r->host, r->port, ct);
    char w[300];
    if (!c || c->err) {
        snprintf(err, errlen, "cannot connect to Redis at %s: %s", where(r, w, sizeof w),
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
            snprintf(err, errlen, "Redis at %s refused the credentials: %s", where(r, w, sizeof w),
                     io ? c->errstr : rep->str);
            *code = io ? STORE_EUNREACHABLE : STORE_EAUTH;
            goto fail;
        }
        freeReplyObject(rep);
    }
    rep = redisCommand(c, "SELECT %d", r->db);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        bool io = !rep;
        const char *why = io ? c->errstr : rep->str;
        bool auth = !io && (strncmp(why, "NOAUTH", 6) == 0 || strncmp(why, "WRONGPASS", 9) == 0 ||
                            strncmp(why, "NOPERM", 6) == 0);
        snprintf(err, errlen, "Redis at %s: SELECT %d: %s%s", where(r, w, sizeof w), r->db, why,
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

static void mark_down(store_redis *r, const char *why)
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

/* An idle connection that Redis closed meanwhile reads as readable (EOF). */
static bool conn_dead(const conn *c)
{
    struct pollfd p = {.fd = c->ctx->fd, .events = POLLIN};
    return poll(&p, 1, 0) != 0;
}

/* Borrow a connection, or NULL with *code (Redis down or unreachable). */
static conn *borrow(store_redis *r, int *code)
{
    pthread_mutex_lock(&r->lock);
    if (!r->up) {
        pthread_mutex_unlock(&r->lock);
        atomic_fetch_add(&r->refused_down, 1);
        *code = STORE_EUNAVAILABLE;
        return NULL;
    }
    uint64_t gen = r->gen;
    conn *c;
    while ((c = r->idle) != NULL) {
        r->idle = c->next;
        if (c->gen == gen && !conn_dead(c))
            break;
        redisFree(c->ctx);
        free(c);
    }
    pthread_mutex_unlock(&r->lock);
    if (c)
        return c;
    char err[512];
    redisContext *ctx = connect_one(r, code, err, sizeof err);
    if (!ctx) {
        mark_down(r, err);
        *code = STORE_EUNAVAILABLE;
        return NULL;
    }
    c = hf_xcalloc(1, sizeof *c);
    c->ctx = ctx;
    c->gen = gen;
    return c;
}

static void give_back(store_redis *r, conn *c, bool ok)
{
    if (!ok) {
        redisFree(c->ctx);
        free(c);
        return;
    }
    pthread_mutex_lock(&r->lock);
    if (c->gen == r->gen) {
        c->next = r->idle;
        r->idle = c;
        c = NULL;
    }
    pthread_mutex_unlock(&r->lock);
    if (c) {
        redisFree(c->ctx);
        free(c);
    }
}

/* The monitors' pause (r->lock held): wait_ms, or less if woken. */
static void monitor_wait(store_redis *r, int64_t wait_ms)
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

/* The monitor: ping every second while up, reconnect with backoff while down. */
static void *monitor_main(void *arg)
{
    store_redis *r = arg;
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
            ctx = connect_one(r, &code, err, sizeof err);
        if (ctx) {
            redisReply *rep = redisCommand(ctx, "PING");
            ok = rep && rep->type != REDIS_REPLY_ERROR;
            if (!ok)
                snprintf(err, sizeof err, "PING: %s", rep ? rep->str : ctx->errstr);
            if (rep)
                freeReplyObject(rep);
            /* Redis restarted without our script: load it before saying up. */
            if (ok && !was_up && load_script(r, ctx, err, sizeof err) != STORE_OK)
                ok = false;
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

/* ----------------------------------------------------------- arguments */

/* The arguments of one EVALSHA, built in one growing arena (offsets, so
 * that growing it never leaves a pointer dangling). */
typedef struct args {
    int slot; /* the cluster slot of its key (its pool's), or -1 */
    size_t n, cap;
    size_t *off, *len;
    char *buf;
    size_t used, bufcap;
} args;

static char *args_room(args *a, size_t len)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 32;
        a->off = hf_xreallocarray(a->off, a->cap, sizeof *a->off);
        a->len = hf_xreallocarray(a->len, a->cap, sizeof *a->len);
    }
    if (a->used + len > a->bufcap) {
        while (a->used + len > a->bufcap)
            a->bufcap = a->bufcap ? a->bufcap * 2 : 1024;
        a->buf = hf_xrealloc(a->buf, a->bufcap);
    }
    a->off[a->n] = a->used;
    a->len[a->n] = len;
    a->n++;
    a->used += len;
    return a->buf + a->used - len;
}

static void args_add(args *a, const void *p, size_t len)
{
    memcpy(args_room(a, len), p, len);
}

static void args_str(args *a, const char *s)
{
    args_add(a, s, strlen(s));
}

static void args_int(args *a, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
    args_add(a, tmp, (size_t)n);
}

static const char hexd[] = "0123456789abcdef";

static void args_hex(args *a, hf_slice s)
{
    char *p = args_room(a, s.len * 2);
    for (size_t i = 0; i < s.len; i++) {
        p[2 * i] = hexd[(unsigned char)s.ptr[i] >> 4];
        p[2 * i + 1] = hexd[(unsigned char)s.ptr[i] & 15];
    }
}

/* A key as its index field: "\0" + 32 packed bytes for 64 lowercase hex
 * characters (as the embedded engine packs them), else "\1" + the bytes. */
static void args_key(args *a, hf_slice key)
{
    if (key.len == 64) {
        uint8_t packed[32];
        bool hex = true;
        for (size_t i = 0; i < 32 && hex; i++) {
            int hi = key.ptr[2 * i], lo = key.ptr[2 * i + 1];
            int h = (hi >= '0' && hi <= '9') ? hi - '0' : (hi >= 'a' && hi <= 'f') ? hi - 'a' + 10 : -1;
            int l = (lo >= '0' && lo <= '9') ? lo - '0' : (lo >= 'a' && lo <= 'f') ? lo - 'a' + 10 : -1;
            if (h < 0 || l < 0)
                hex = false;
            else
                packed[i] = (uint8_t)(h << 4 | l);
        }
        if (hex) {
            char *p = args_room(a, 33);
            p[0] = '\0';
            memcpy(p + 1, packed, 32);
            return;
        }
    }
    char *p = args_room(a, key.len + 1);
    p[0] = '\1';
    memcpy(p + 1, key.ptr, key.len);
}

/* Decode an index field back into the key text; returns its length. */
static size_t field_to_key(const char *f, size_t len, char *out, size_t cap)
{
    if (len == 33 && f[0] == '\0') {
        size_t n = 0;
        for (size_t i = 0; i < 32 && n + 2 <= cap; i++) {
            out[n++] = hexd[(unsigned char)f[1 + i] >> 4];
            out[n++] = hexd[(unsigned char)f[1 + i] & 15];
        }
        return n;
    }
    size_t n = len > 0 ? len - 1 : 0;
    if (n > cap)
        n = cap;
    memcpy(out, f + 1, n);
    return n;
}

static void args_free(args *a)
{
    free(a->off);
    free(a->len);
    free(a->buf);
}

static void args_header(store_redis *r, args *a, const char *op)
{
    args_str(a, op);
    if (r->opt.clock)
        args_int(a, r->opt.clock->now_ms(r->opt.clock->ctx));
    else
        args_add(a, "", 0);
    args_int(a, r->cfg.reservation_ms);
    args_int(a, r->cfg.read_lease_ms);
    args_str(a, r->cfg.evict_lru ? "1" : "0");
    args_int(a, r->cfg.write_lease_ms);
    args_int(a, r->cfg.release_grace_ms);
    args_int(a, (int64_t)r->opt.use_log_bound);
    args_str(a, r->cluster ? "1" : "0");
}

static void args_sha(store_redis *r, args *a)
{
    memset(a, 0, sizeof *a);
    a->slot = -1;
    args_str(a, "EVALSHA");
    pthread_mutex_lock(&r->lock);
    args_add(a, r->sha, 40);
    pthread_mutex_unlock(&r->lock);
}

/* EVALSHA sha 0 op now reservation lease evict wlease grace bound cluster:
 * an op over every pool (one Redis only) */
static void args_begin(store_redis *r, args *a, const char *op)
{
    args_sha(r, a);
    args_str(a, "0");
    args_header(r, a, op);
}

/* A pool's key name: "hfm:{nsx:rank}:" + suffix. */
static void args_pool_key(args *a, hf_slice ns, uint32_t rank, const char *suffix)
{
    char tail[32];
    int tn = snprintf(tail, sizeof tail, ":%" PRIu32 "}:%s", rank, suffix);
    char *p = args_room(a, 5 + ns.len * 2 + (size_t)tn);
    memcpy(p, "hfm:{", 5);
    for (size_t i = 0; i < ns.len; i++) {
        p[5 + 2 * i] = hexd[(unsigned char)ns.ptr[i] >> 4];
        p[5 + 2 * i + 1] = hexd[(unsigned char)ns.ptr[i] & 15];
    }
    memcpy(p + 5 + ns.len * 2, tail, (size_t)tn);
}

/* The slot of the last argument added (a key). */
static int args_last_slot(const args *a)
{
    return cluster_key_slot(a->buf + a->off[a->n - 1], a->len[a->n - 1]);
}

static void args_pool(args *a, hf_slice ns, uint32_t rank);

/*
 * EVALSHA sha 2 hfm:{nsx:rank}:m hfm:{nsx:rank}:guard op ... nsx rank: an op
 * on one pool. It names the pool's :m key, so that a Redis Cluster routes
 * it, and :guard, a key that never exists: while the pool's slot migrates
 * (resharding), Redis runs a script only where all its named keys are, so
 * with a key that is nowhere the run is refused (ASK, then TRYAGAIN, which
 * cluster.c retries within the timeout) until the slot has moved whole; a
 * run never sees a pool whose keys are half here, half there.
 */
static void args_begin_pool(store_redis *r, args *a, const char *op, hf_slice ns, uint32_t rank)
{
    args_sha(r, a);
    args_str(a, "2");
    args_pool_key(a, ns, rank, "m");
    a->slot = args_last_slot(a);
    args_pool_key(a, ns, rank, "guard");
    args_header(r, a, op);
    args_pool(a, ns, rank);
}

/* ---------------------------------------------------------------- calls */

static bool starts(const redisReply *rep, const char *prefix)
{
    size_t n = strlen(prefix);
    return rep->type == REDIS_REPLY_ERROR && rep->len >= n && memcmp(rep->str, prefix, n) == 0;
}

/* Errors with which Redis refuses a command before running it. */
static bool refused_before_running(const redisReply *rep)
{
    static const char *const codes[] = {"NOSCRIPT", "BUSY",  "LOADING",  "OOM",   "READONLY",
                                        "MASTERDOWN", "NOAUTH", "NOPERM", "MISCONF", "NOREPLICAS",
                                        "CLUSTERDOWN", "TRYAGAIN"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (starts(rep, codes[i]))
            return true;
    return false;
}

static int64_t wait_ms(const store_redis *r)
{
    return r->opt.wait_timeout_ms ? r->opt.wait_timeout_ms : r->opt.command_timeout_ms;
}

/* A change applied, but fewer replicas than --redis-wait acknowledged it. */
static void wait_short(store_redis *r, long long acked)
{
    atomic_fetch_add(&r->errors, 1);
    atomic_fetch_add(&r->unknown, 1);
    log_msg(LOG_ERROR, "Redis: a change was applied but only %lld of %u replicas "
            "acknowledged it within the timeout", acked, r->opt.wait_replicas);
}

static void count_rtt(store_redis *r, int64_t us)
{
    unsigned i = 0;
    while (i < RTT_BUCKETS - 1 && (uint64_t)us > rtt_bounds_us[i])
        i++;
    atomic_fetch_add(&r->rtt_buckets[i], 1);
    atomic_fetch_add(&r->rtt_sum_us, (uint64_t)us);
}

/*
 * The checks of a script's reply: STORE_OK (rep kept), else the code of the
 * call (rep freed): an error reply (refused before running: unavailable;
 * a script error: for a change, outcome unknown), a malformed reply, or
 * STORE_ENOPOOL when the script said so.
 */
static int script_reply(store_redis *r, redisReply *rep, bool change)
{
    int code = STORE_OK;
    if (rep->type == REDIS_REPLY_ERROR) {
        atomic_fetch_add(&r->errors, 1);
        if (refused_before_running(rep)) {
            log_msg(LOG_WARN, "Redis refused a call: %s", rep->str);
            code = STORE_EUNAVAILABLE;
        } else {
            log_msg(LOG_ERROR, "Redis script error: %s", rep->str);
            code = change ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
            if (change)
                atomic_fetch_add(&r->unknown, 1);
        }
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
               rep->element[0]->type != REDIS_REPLY_INTEGER) {
        atomic_fetch_add(&r->errors, 1);
        log_msg(LOG_ERROR, "Redis: unexpected reply of type %d to the script", rep->type);
        code = change ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
    } else if (rep->element[0]->integer == 1) {
        code = STORE_ENOPOOL;
    }
    if (code != STORE_OK)
        freeReplyObject(rep);
    return code;
}

static int cl_call(store_redis *r, args *as, size_t n, bool change, redisReply **reps,
                   int *codes);

/*
 * Run the script with a's arguments. STORE_OK and *out (the reply's array,
 * status element checked: STORE_ENOPOOL when the script said so), or
 * STORE_EUNAVAILABLE (nothing was applied), or, for a change, STORE_EUNCERTAIN
 * (it was sent and its outcome is unknown).
 */
static int call(store_redis *r, args *a, bool change, redisReply **out)
{
    *out = NULL;
    if (r->cluster) {
        int code;
        cl_call(r, a, 1, change, out, &code);
        return code;
    }
    const char **argv = hf_xreallocarray(NULL, a->n, sizeof *argv);
    for (size_t i = 0; i < a->n; i++)
        argv[i] = a->buf + a->off[i];
    int code = STORE_OK;
    atomic_fetch_add(&r->calls, 1);
    for (int attempt = 0; attempt < 2; attempt++) {
        conn *c = borrow(r, &code);
        if (!c) {
            atomic_fetch_add(&r->errors, 1);
            break;
        }
        bool wait = change && r->opt.wait_replicas > 0;
        int64_t t0 = mono_us();
        redisAppendCommandArgv(c->ctx, (int)a->n, argv, a->len);
        if (wait)
            redisAppendCommand(c->ctx, "WAIT %u %lld", r->opt.wait_replicas,
                               (long long)wait_ms(r));
        void *v = NULL, *w = NULL;
        int rc = redisGetReply(c->ctx, &v);
        if (rc == REDIS_OK && wait)
            rc = redisGetReply(c->ctx, &w);
        count_rtt(r, mono_us() - t0);
        redisReply *rep = v, *wrep = w;
        if (rc != REDIS_OK) {
            char why[300];
            snprintf(why, sizeof why, "%s", c->ctx->errstr[0] ? c->ctx->errstr : "I/O error");
            give_back(r, c, false);
            if (rep)
                freeReplyObject(rep);
            atomic_fetch_add(&r->errors, 1);
            mark_down(r, why);
            if (change) {
                atomic_fetch_add(&r->unknown, 1);
                log_msg(LOG_ERROR, "Redis: %s after a change was sent: its outcome is unknown",
                        why);
                code = STORE_EUNCERTAIN;
            } else {
                code = STORE_EUNAVAILABLE;
            }
            break;
        }
        give_back(r, c, true);
        if (wrep) {
            long long acked = wrep->type == REDIS_REPLY_INTEGER ? wrep->integer : -1;
            freeReplyObject(wrep);
            if (rep->type != REDIS_REPLY_ERROR && acked < (long long)r->opt.wait_replicas) {
                wait_short(r, acked);
                freeReplyObject(rep);
                code = STORE_EUNCERTAIN;
                break;
            }
        }
        if (starts(rep, "NOSCRIPT") && attempt == 0) {
            freeReplyObject(rep);
            conn *lc = borrow(r, &code);
            if (!lc)
                break;
            char err[300];
            int lrc = load_script(r, lc->ctx, err, sizeof err);
            give_back(r, lc, lrc == STORE_OK);
            if (lrc != STORE_OK) {
                mark_down(r, err);
                code = STORE_EUNAVAILABLE;
                break;
            }
            argv[1] = r->sha; /* the same script: the same SHA1 */
            continue;
        }
        code = script_reply(r, rep, change);
        if (code == STORE_OK)
            *out = rep;
        break;
    }
    free(argv);
    args_free(a);
    return code;
}

static int64_t int_of(const redisReply *e)
{
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    if (e->type == REDIS_REPLY_STRING) {
        char tmp[32];
        size_t n = e->len < sizeof tmp - 1 ? e->len : sizeof tmp - 1;
        memcpy(tmp, e->str, n);
        tmp[n] = '\0';
        return strtoll(tmp, NULL, 10);
    }
    return -1;
}

/* The reply's element i if it is an array of n elements, else NULL. */
/* Element i of the reply if it is an array (of n elements), else NULL. */
static const redisReply *list_at(const redisReply *rep, size_t i)
{
    if (rep->elements <= i || rep->element[i]->type != REDIS_REPLY_ARRAY)
        return NULL;
    return rep->element[i];
}

static const redisReply *array_at(const redisReply *rep, size_t i, size_t n)
{
    const redisReply *e = list_at(rep, i);
    return e && e->elements == n ? e : NULL;
}

static int malformed(redisReply *rep)
{
    log_msg(LOG_ERROR, "Redis: malformed reply to the script");
    freeReplyObject(rep);
    return STORE_EUNAVAILABLE;
}

/* Free the replies of a batch (NULL where none came); not the array. */
static void replies_free(redisReply **reps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (reps[i])
            freeReplyObject(reps[i]);
}

/* ------------------------------------------------------ Redis Cluster */

/*
 * Over a Redis Cluster (redis-cluster://) a "connection" is a routing
 * handle of cluster.c: its own connection to each node it uses, its own
 * slot map. A call borrows an idle handle (or opens one), runs its batch
 * and gives it back; so the front end's threads never share a handle, and
 * a handle's map refreshes itself on MOVED, a broken node or CLUSTERDOWN.
 * Calls are never refused from here: a node that is down costs its own
 * slots' calls the command timeout (cluster.c retries until a replica is
 * promoted or the timeout passes), the other slots keep serving.
 */

/* What a handle's nodes did since it was last folded, added to the
 * engine's per-node figures (by address: handles number nodes alike only
 * by chance); the node's flags and slots as this handle sees them. */
static void cl_fold(store_redis *r, conn *c)
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

static conn *cl_open(store_redis *r, int *code, char *err, size_t errlen)
{
    cluster_t *cl;
    int rc = cluster_open(&r->copt, &cl, err, errlen);
    if (rc != CLUSTER_OK) {
        *code = rc == CLUSTER_EAUTH                          ? STORE_EAUTH
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

static conn *cl_borrow(store_redis *r)
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

static void cl_give_back(store_redis *r, conn *c)
{
    cl_fold(r, c);
    pthread_mutex_lock(&r->lock);
    c->next = r->idle;
    r->idle = c;
    pthread_mutex_unlock(&r->lock);
}

static bool is_evalsha(const cluster_cmd *c)
{
    return c->argc > 1 && c->argvlen[0] == 7 && memcmp(c->argv[0], "EVALSHA", 7) == 0;
}

/* After a redirected batch: WAIT on every primary (the changes ran on the
 * nodes the redirects named, maybe not where their WAITs went). */
static bool cl_wait_all(store_redis *r, conn *c)
{
    atomic_fetch_add(&r->cl_rewaits, 1);
    char wn[16], wt[24];
    snprintf(wn, sizeof wn, "%u", r->opt.wait_replicas);
    snprintf(wt, sizeof wt, "%lld", (long long)wait_ms(r));
    const char *argv[3] = {"WAIT", wn, wt};
    size_t lens[3] = {4, strlen(wn), strlen(wt)};
    size_t n = cluster_node_count(c->cl);
    cluster_cmd *cmds = hf_xcalloc(n ? n : 1, sizeof *cmds);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (!ns.primary)
            continue;
        cmds[m++] = (cluster_cmd){.argc = 3, .argv = argv, .argvlen = lens, .slot = -1,
                                  .node = (int)i, .flags = CLUSTER_CMD_IDEMPOTENT};
    }
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
    return ok;
}

/*
 * Run n commands at once over the cluster (one round trip per node, the
 * nodes in parallel), each to the node of its slot. An EVALSHA answered
 * NOSCRIPT (a node that never saw the script: new, or a promoted replica)
 * is sent again as EVAL to the same slot, which loads it there. For a change
 * under --redis-wait each command is followed by a WAIT in the same round
 * trip on its node; when the batch was redirected or retried, its WAITs may
 * have gone elsewhere than its commands, so a WAIT then goes to every
 * primary. reps[i] and codes[i]: the reply (error replies included) with
 * STORE_OK, or NULL and STORE_EUNAVAILABLE (not applied) or, for a change,
 * STORE_EUNCERTAIN (sent, outcome unknown).
 */
static void cl_exec(store_redis *r, cluster_cmd *cmds, size_t n, bool change, redisReply **reps,
                    int *codes)
{
    for (size_t i = 0; i < n; i++) {
        reps[i] = NULL;
        codes[i] = STORE_EUNAVAILABLE;
    }
    if (n == 0)
        return;
    conn *c = cl_borrow(r);
    if (!c) {
        atomic_fetch_add(&r->errors, n);
        return;
    }
    bool wait = change && r->opt.wait_replicas > 0;
    char wn[16], wt[24];
    snprintf(wn, sizeof wn, "%u", r->opt.wait_replicas);
    snprintf(wt, sizeof wt, "%lld", (long long)wait_ms(r));
    const char *wargv[3] = {"WAIT", wn, wt};
    size_t wlens[3] = {4, strlen(wn), strlen(wt)};
    size_t *todo = hf_xreallocarray(NULL, n ? n : 1, sizeof *todo);
    cluster_cmd *batch = hf_xcalloc(2 * (n ? n : 1), sizeof *batch);
    const char **evargv = NULL; /* the EVAL forms, n * argc at most */
    size_t *evlens = NULL, evused = 0, evcap = 0;
    size_t ntodo = n;
    bool rewait = false;
    for (size_t i = 0; i < n; i++) {
        todo[i] = i;
        evcap += (size_t)cmds[i].argc;
    }
    for (int attempt = 0; attempt < 2 && ntodo > 0; attempt++) {
        size_t m = 0;
        for (size_t k = 0; k < ntodo; k++) {
            cluster_cmd *b = &batch[m++];
            *b = cmds[todo[k]];
            b->flags = change ? 0 : CLUSTER_CMD_IDEMPOTENT;
            b->reply = NULL;
            b->error = 0;
            if (wait)
                batch[m++] = (cluster_cmd){.argc = 3, .argv = wargv, .argvlen = wlens,
                                           .slot = b->slot, .node = b->node,
                                           .flags = CLUSTER_CMD_IDEMPOTENT};
        }
        cluster_stats before, after;
        cluster_get_stats(c->cl, &before);
        int64_t t0 = mono_us();
        cluster_exec(c->cl, batch, m);
        count_rtt(r, mono_us() - t0);
        cluster_get_stats(c->cl, &after);
        bool redirected = after.rounds - before.rounds > 1;
        size_t nretry = 0;
        m = 0;
        for (size_t k = 0; k < ntodo; k++) {
            size_t i = todo[k];
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
                codes[i] = change && sent ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
                if (codes[i] == STORE_EUNCERTAIN) {
                    atomic_fetch_add(&r->unknown, 1);
                    log_msg(LOG_ERROR, "Redis Cluster: %s after a change was sent: its outcome "
                            "is unknown", cluster_last_error(c->cl));
                } else {
                    log_msg(LOG_WARN, "Redis Cluster: %s (%s)", cluster_strerror(b->error),
                            cluster_last_error(c->cl));
                }
                continue;
            }
            if (attempt == 0 && is_evalsha(&cmds[i]) && starts(b->reply, "NOSCRIPT")) {
                freeReplyObject(b->reply);
                size_t argc = (size_t)cmds[i].argc;
                if (!evargv) { /* room for every command's EVAL form */
                    evargv = hf_xreallocarray(NULL, evcap, sizeof *evargv);
                    evlens = hf_xreallocarray(NULL, evcap, sizeof *evlens);
                }
                memcpy(evargv + evused, cmds[i].argv, argc * sizeof *evargv);
                memcpy(evlens + evused, cmds[i].argvlen, argc * sizeof *evlens);
                evargv[evused] = "EVAL";
                evlens[evused] = 4;
                evargv[evused + 1] = redis_lua;
                evlens[evused + 1] = sizeof redis_lua - 1;
                cmds[i].argv = evargv + evused;
                cmds[i].argvlen = evlens + evused;
                evused += argc;
                atomic_fetch_add(&r->cl_noscript, 1);
                todo[nretry++] = i;
                continue;
            }
            if (wait && !redirected && b->reply->type != REDIS_REPLY_ERROR &&
                acked < (long long)r->opt.wait_replicas) {
                wait_short(r, acked);
                freeReplyObject(b->reply);
                codes[i] = STORE_EUNCERTAIN;
                continue;
            }
            if (wait && redirected)
                rewait = true;
            reps[i] = b->reply;
            codes[i] = STORE_OK;
        }
        ntodo = nretry;
    }
    if (rewait && !cl_wait_all(r, c)) {
        for (size_t i = 0; i < n; i++)
            if (reps[i] && reps[i]->type != REDIS_REPLY_ERROR) {
                wait_short(r, -1);
                freeReplyObject(reps[i]);
                reps[i] = NULL;
                codes[i] = STORE_EUNCERTAIN;
            }
    }
    cl_give_back(r, c);
    free(todo);
    free(batch);
    free(evargv);
    free(evlens);
}

/*
 * Run n argument lists at once (cl_exec), each to its slot (as[i].slot),
 * and free them. script: each is a run of the script, whose reply is
 * checked as call() does (script_reply); else a plain command, of which an
 * error reply fails the call.
 */
static void cl_run(store_redis *r, args *as, size_t n, bool change, bool script,
                   redisReply **reps, int *codes)
{
    atomic_fetch_add(&r->calls, n);
    cluster_cmd *cmds = hf_xcalloc(n ? n : 1, sizeof *cmds);
    const char ***argvs = hf_xcalloc(n ? n : 1, sizeof *argvs);
    for (size_t i = 0; i < n; i++) {
        argvs[i] = hf_xreallocarray(NULL, as[i].n, sizeof **argvs);
        for (size_t j = 0; j < as[i].n; j++)
            argvs[i][j] = as[i].buf + as[i].off[j];
        cmds[i] = (cluster_cmd){.argc = (int)as[i].n, .argv = argvs[i], .argvlen = as[i].len,
                                .slot = as[i].slot >= 0 ? as[i].slot : 0};
    }
    cl_exec(r, cmds, n, change, reps, codes);
    for (size_t i = 0; i < n; i++) {
        if (codes[i] == STORE_OK) {
            if (script) {
                codes[i] = script_reply(r, reps[i], change);
            } else if (reps[i]->type == REDIS_REPLY_ERROR) {
                atomic_fetch_add(&r->errors, 1);
                log_msg(LOG_WARN, "Redis Cluster refused a command: %s", reps[i]->str);
                codes[i] = change ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
                freeReplyObject(reps[i]);
            }
            if (codes[i] != STORE_OK)
                reps[i] = NULL;
        }
        free(argvs[i]);
        args_free(&as[i]);
    }
    free(argvs);
    free(cmds);
}

static int cl_call(store_redis *r, args *as, size_t n, bool change, redisReply **reps, int *codes)
{
    cl_run(r, as, n, change, true, reps, codes);
    for (size_t i = 0; i < n; i++)
        if (codes[i] != STORE_OK)
            return codes[i];
    return STORE_OK;
}

/* The first failure of n answers (all replies freed then), or STORE_OK. */
static int cl_first_error(redisReply **reps, const int *codes, size_t n)
{
    int code = STORE_OK;
    for (size_t i = 0; i < n; i++)
        if (codes[i] != STORE_OK && code == STORE_OK)
            code = codes[i];
    if (code != STORE_OK)
        for (size_t i = 0; i < n; i++)
            if (reps[i]) {
                freeReplyObject(reps[i]);
                reps[i] = NULL;
            }
    return code;
}

static void args_raw(args *a, const char *cmd)
{
    memset(a, 0, sizeof *a);
    a->slot = -1;
    args_str(a, cmd);
}

/* hfm:ns:{nsx}: the registry of a namespace's pools (rank -> num_pages). */
static void args_ns_key(args *a, hf_slice ns)
{
    args_str(a, "hfm:ns:{");
    args_hex(a, ns);
    args_str(a, "}");
    /* one argument: join the three */
    size_t first = a->n - 3;
    a->len[first] += a->len[first + 1] + a->len[first + 2];
    a->n -= 2;
    a->slot = args_last_slot(a);
}

/* ---------------------------------------------------------------- ops */

static void args_pool(args *a, hf_slice ns, uint32_t rank)
{
    args_hex(a, ns);
    args_int(a, rank);
}

static int unhex(const char *p, size_t len, char *out);

/* ------------------------------------------------ cross-pool work, cluster */

/* Over a cluster: one command whose answer is a list. STORE_OK and *rep
 * (caller frees), or a code (nothing to free). */
static int cl_list(store_redis *r, args *a, redisReply **rep)
{
    int code;
    cl_run(r, a, 1, false, false, rep, &code);
    if (code != STORE_OK)
        return code;
    if ((*rep)->type != REDIS_REPLY_ARRAY)
        return malformed(*rep);
    return STORE_OK;
}

/* Over a cluster: the ranks of ns that its registry lists, as Redis keeps
 * them (HKEYS order). STORE_OK and *ranks (caller frees) or a code. */
static int cl_ranks(store_redis *r, hf_slice ns, uint32_t **ranks, size_t *nranks)
{
    *ranks = NULL;
    *nranks = 0;
    args a;
    args_raw(&a, "HKEYS");
    args_ns_key(&a, ns);
    redisReply *rep;
    int code = cl_list(r, &a, &rep);
    if (code != STORE_OK)
        return code;
    *ranks = hf_xreallocarray(NULL, rep->elements ? rep->elements : 1, sizeof **ranks);
    for (size_t i = 0; i < rep->elements; i++)
        (*ranks)[i] = (uint32_t)int_of(rep->element[i]);
    *nranks = rep->elements;
    freeReplyObject(rep);
    return STORE_OK;
}

/* A pool the registry lists. */
typedef struct cl_pool {
    char *ns;
    size_t ns_len;
    uint32_t rank;
} cl_pool;

static int cl_pool_cmp(const void *x, const void *y)
{
    const cl_pool *a = x, *b = y;
    size_t n = a->ns_len < b->ns_len ? a->ns_len : b->ns_len;
    int c = memcmp(a->ns, b->ns, n);
    if (c == 0)
        c = a->ns_len < b->ns_len ? -1 : a->ns_len > b->ns_len;
    if (c == 0)
        c = a->rank < b->rank ? -1 : a->rank > b->rank;
    return c;
}

static void cl_pools_free(cl_pool *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(p[i].ns);
    free(p);
}

/*
 * Over a cluster: every pool that the registry lists (hfm:nss, then each
 * namespace's hfm:ns:{nsx}, all of those at once), by namespace then rank
 * (the order of the one-Redis stats: hex order is byte order). With nss:
 * the namespaces too (*nss of *nns, each ns_len bytes, rank 0).
 */
static int cl_pools(store_redis *r, cl_pool **out, size_t *nout, cl_pool **nss, size_t *nns)
{
    *out = NULL;
    *nout = 0;
    args a;
    args_raw(&a, "SMEMBERS");
    args_str(&a, "hfm:nss");
    a.slot = args_last_slot(&a);
    redisReply *rep;
    int code = cl_list(r, &a, &rep);
    if (code != STORE_OK)
        return code;
    size_t n = rep->elements;
    cl_pool *ns = hf_xcalloc(n ? n : 1, sizeof *ns);
    args *as = hf_xcalloc(n ? n : 1, sizeof *as);
    for (size_t i = 0; i < n; i++) {
        const redisReply *e = rep->element[i];
        ns[i].ns = hf_xmalloc(e->len / 2 + 1);
        ns[i].ns_len = e->type == REDIS_REPLY_STRING ? e->len / 2 : 0;
        unhex(e->str, ns[i].ns_len * 2, ns[i].ns);
        args_raw(&as[i], "HKEYS");
        args_ns_key(&as[i], (hf_slice){ns[i].ns, ns[i].ns_len});
    }
    freeReplyObject(rep);
    redisReply **reps = hf_xcalloc(n ? n : 1, sizeof *reps);
    int *codes = hf_xcalloc(n ? n : 1, sizeof *codes);
    cl_run(r, as, n, false, false, reps, codes);
    code = cl_first_error(reps, codes, n);
    size_t total = 0;
    for (size_t i = 0; code == STORE_OK && i < n; i++) {
        if (reps[i]->type != REDIS_REPLY_ARRAY)
            code = STORE_EUNAVAILABLE;
        else
            total += reps[i]->elements;
    }
    cl_pool *pools = NULL;
    size_t np = 0;
    if (code == STORE_OK) {
        pools = hf_xcalloc(total ? total : 1, sizeof *pools);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < reps[i]->elements; j++) {
                cl_pool *p = &pools[np++];
                p->ns = dup_n(ns[i].ns, ns[i].ns_len);
                p->ns_len = ns[i].ns_len;
                p->rank = (uint32_t)int_of(reps[i]->element[j]);
            }
        qsort(pools, np, sizeof *pools, cl_pool_cmp);
    }
    replies_free(reps, n);
    free(reps);
    free(codes);
    free(as);
    if (code == STORE_OK && nss) {
        qsort(ns, n, sizeof *ns, cl_pool_cmp);
        *nss = ns;
        *nns = n;
    } else {
        cl_pools_free(ns, n);
    }
    if (code != STORE_OK) {
        log_msg(LOG_ERROR, "Redis Cluster: the registry of pools could not be read");
        return code;
    }
    *out = pools;
    *nout = np;
    return STORE_OK;
}

/* Run the script op on every pool at once (a change: logs applied,
 * leases expired). reps[i] per pool, or the first failure (none kept). */
static int cl_each_pool(store_redis *r, const char *op, const cl_pool *pools, size_t n,
                        redisReply **reps)
{
    args *as = hf_xcalloc(n ? n : 1, sizeof *as);
    int *codes = hf_xcalloc(n ? n : 1, sizeof *codes);
    for (size_t i = 0; i < n; i++)
        args_begin_pool(r, &as[i], op, (hf_slice){pools[i].ns, pools[i].ns_len}, pools[i].rank);
    cl_run(r, as, n, true, true, reps, codes);
    int code = cl_first_error(reps, codes, n);
    free(as);
    free(codes);
    return code;
}

/* Over a cluster, after a change of the pool (ns, rank) whose run returned
 * the keys that left it (left: their index fields, in order): in the other
 * ranks of ns those keys go to the eviction end (op demote), as the
 * one-Redis run does inside itself. A failure here is logged and counted:
 * the change itself stands (a demotion only orders eviction). */
static void cl_demote(store_redis *r, hf_slice ns, uint32_t rank, const redisReply *left)
{
    if (!left || left->type != REDIS_REPLY_ARRAY || left->elements == 0)
        return;
    uint32_t *ranks;
    size_t nr;
    if (cl_ranks(r, ns, &ranks, &nr) != STORE_OK) {
        log_msg(LOG_WARN, "Redis Cluster: keys left a pool, their other ranks not demoted");
        return;
    }
    args *as = hf_xcalloc(nr ? nr : 1, sizeof *as);
    size_t m = 0;
    for (size_t j = 0; j < nr; j++) {
        if (ranks[j] == rank)
            continue;
        args_begin_pool(r, &as[m], "demote", ns, ranks[j]);
        for (size_t i = 0; i < left->elements; i++)
            args_add(&as[m], left->element[i]->str, left->element[i]->len);
        m++;
    }
    redisReply **reps = hf_xcalloc(m ? m : 1, sizeof *reps);
    int *codes = hf_xcalloc(m ? m : 1, sizeof *codes);
    cl_run(r, as, m, true, true, reps, codes);
    if (cl_first_error(reps, codes, m) != STORE_OK)
        log_msg(LOG_WARN, "Redis Cluster: keys left a pool, their other ranks not demoted");
    replies_free(reps, m);
    free(reps);
    free(codes);
    free(as);
    free(ranks);
}

/*
 * Over a cluster: completeness over every pool of ns, in two runs per pool
 * (each pool's runs at once): read each pool's index (HMGET), then for the
 * keys found in every pool record the uses (op use, which also counts the
 * misses). The use run records a key's use only if the key still owns the
 * page read (a change may run between the two), and says which did; a key
 * is answered complete only if it still did in every pool, so every page
 * answered is leased, as in the one-run read.
 */
static int cl_complete(store_redis *r, hf_slice ns, int64_t rank, const hf_slice *keys, size_t n,
                       int64_t *pages, bool *present)
{
    uint32_t *ranks;
    size_t nr;
    int code = cl_ranks(r, ns, &ranks, &nr);
    if (code != STORE_OK)
        return code;
    size_t target = nr;
    for (size_t j = 0; rank >= 0 && j < nr; j++)
        if (ranks[j] == (uint32_t)rank)
            target = j;
    if (rank >= 0 && target == nr) {
        free(ranks);
        return STORE_ENOPOOL;
    }
    for (size_t i = 0; i < n; i++) {
        if (pages)
            pages[i] = -1;
        if (present)
            present[i] = false;
    }
    if (nr == 0 || n == 0) {
        free(ranks);
        return STORE_OK;
    }
    args *as = hf_xcalloc(nr, sizeof *as);
    redisReply **reps = hf_xcalloc(nr, sizeof *reps), **ureps = hf_xcalloc(nr, sizeof *ureps);
    int *codes = hf_xcalloc(nr, sizeof *codes);
    bool *complete = hf_xcalloc(n, sizeof *complete);
    for (size_t j = 0; j < nr; j++) {
        args_raw(&as[j], "HMGET");
        args_pool_key(&as[j], ns, ranks[j], "k");
        as[j].slot = args_last_slot(&as[j]);
        for (size_t i = 0; i < n; i++)
            args_key(&as[j], keys[i]);
    }
    cl_run(r, as, nr, false, false, reps, codes);
    code = cl_first_error(reps, codes, nr);
    for (size_t j = 0; code == STORE_OK && j < nr; j++)
        if (reps[j]->type != REDIS_REPLY_ARRAY || reps[j]->elements != n)
            code = STORE_EUNAVAILABLE;
    size_t ncomplete = 0;
    if (code == STORE_OK) {
        for (size_t i = 0; i < n; i++) {
            complete[i] = true;
            for (size_t j = 0; j < nr && complete[i]; j++)
                complete[i] = reps[j]->element[i]->type == REDIS_REPLY_STRING;
            ncomplete += complete[i];
        }
        for (size_t j = 0; j < nr; j++) {
            args_begin_pool(r, &as[j], "use", ns, ranks[j]);
            args_int(&as[j], (int64_t)(n - ncomplete));
            for (size_t i = 0; i < n; i++)
                if (complete[i]) {
                    args_key(&as[j], keys[i]);
                    args_add(&as[j], reps[j]->element[i]->str, reps[j]->element[i]->len);
                }
        }
        cl_run(r, as, nr, false, true, ureps, codes);
        code = cl_first_error(ureps, codes, nr);
    }
    if (code == STORE_OK) {
        for (size_t j = 0; j < nr; j++) {
            const redisReply *still = list_at(ureps[j], 1);
            size_t k = 0;
            for (size_t i = 0; i < n; i++)
                if (complete[i]) {
                    if (!still || k >= still->elements || int_of(still->element[k]) != 1)
                        complete[i] = false;
                    k++;
                }
        }
        for (size_t i = 0; i < n; i++) {
            if (present)
                present[i] = complete[i];
            if (pages && complete[i])
                pages[i] = int_of(reps[target]->element[i]);
        }
    }
    for (size_t j = 0; j < nr; j++) {
        if (reps[j])
            freeReplyObject(reps[j]);
        if (ureps[j])
            freeReplyObject(ureps[j]);
    }
    free(as);
    free(reps);
    free(ureps);
    free(codes);
    free(complete);
    free(ranks);
    return code;
}

/* Over a cluster: after a pool's init, its registration (idempotent: also
 * when it existed, so that a registration lost to a crash is made again). */
static int cl_register(store_redis *r, hf_slice ns, uint32_t rank, uint64_t num_pages)
{
    args as[2];
    args_raw(&as[0], "HSET");
    args_ns_key(&as[0], ns);
    args_int(&as[0], rank);
    args_int(&as[0], (int64_t)num_pages);
    args_raw(&as[1], "SADD");
    args_str(&as[1], "hfm:nss");
    as[1].slot = args_last_slot(&as[1]);
    args_hex(&as[1], ns);
    redisReply *reps[2];
    int codes[2];
    cl_run(r, as, 2, true, false, reps, codes);
    int code = cl_first_error(reps, codes, 2);
    replies_free(reps, 2);
    return code;
}

/* Over a cluster: clear_all pool by pool (op drop), then the registry. */
static int cl_clear_all(store_redis *r)
{
    cl_pool *pools, *nss;
    size_t np, nns;
    int code = cl_pools(r, &pools, &np, &nss, &nns);
    if (code != STORE_OK)
        return code;
    redisReply **reps = hf_xcalloc(np + nns + 1, sizeof *reps);
    code = cl_each_pool(r, "drop", pools, np, reps);
    replies_free(reps, np);
    if (code == STORE_OK) {
        args *as = hf_xcalloc(nns + 1, sizeof *as);
        int *codes = hf_xcalloc(nns + 1, sizeof *codes);
        for (size_t i = 0; i < nns; i++) {
            args_raw(&as[i], "UNLINK");
            args_ns_key(&as[i], (hf_slice){nss[i].ns, nss[i].ns_len});
        }
        args_raw(&as[nns], "SREM");
        args_str(&as[nns], "hfm:nss");
        as[nns].slot = args_last_slot(&as[nns]);
        for (size_t i = 0; i < nns; i++)
            args_hex(&as[nns], (hf_slice){nss[i].ns, nss[i].ns_len});
        size_t m = nns + (nns > 0);
        cl_run(r, as, m, true, false, reps, codes);
        code = cl_first_error(reps, codes, m);
        replies_free(reps, m);
        if (nns == 0)
            args_free(&as[0]);
        free(as);
        free(codes);
    }
    free(reps);
    cl_pools_free(pools, np);
    cl_pools_free(nss, nns);
    return code;
}

static int rd_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                        bool *created, uint64_t *existing_pages)
{
    store_redis *r = R(s);
    if (num_pages > r->cfg.max_pages || rank >= r->cfg.max_ranks)
        return STORE_EINVAL;
    args a;
    args_begin_pool(r, &a, "init", ns, rank);
    args_int(&a, (int64_t)num_pages);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->elements < 3)
        return malformed(rep);
    bool made = int_of(rep->element[1]) == 1;
    uint64_t pages = (uint64_t)int_of(rep->element[2]);
    freeReplyObject(rep);
    if (r->cluster && (rc = cl_register(r, ns, rank, pages)) != STORE_OK)
        return rc;
    if (created)
        *created = made;
    if (existing_pages)
        *existing_pages = pages;
    return STORE_OK;
}

static int rd_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                       core_alloc_mode mode, int64_t *pages, bool *existed)
{
    store_redis *r = R(s);
    args a;
    args_begin_pool(r, &a, "allocate", ns, rank);
    args_str(&a, mode == CORE_ALLOC_ALL_OR_NOTHING ? "1" : "0");
    for (size_t i = 0; i < n; i++)
        args_key(&a, keys[i]);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    const redisReply *p = array_at(rep, 1, n), *e = array_at(rep, 2, n);
    if (!p || !e)
        return malformed(rep);
    for (size_t i = 0; i < n; i++) {
        pages[i] = int_of(p->element[i]);
        if (existed)
            existed[i] = int_of(e->element[i]) == 1;
    }
    if (r->cluster)
        cl_demote(r, ns, rank, list_at(rep, 3));
    freeReplyObject(rep);
    return STORE_OK;
}

static _Thread_local size_t last_refused;

size_t store_redis_last_refused(void)
{
    return last_refused;
}

static int rd_confirm(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                      const int64_t *pages, size_t n, const int64_t *release, size_t nrel)
{
    store_redis *r = R(s);
    args a;
    args_begin_pool(r, &a, "confirm", ns, rank);
    args_int(&a, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        args_key(&a, keys[i]);
        args_int(&a, pages[i]);
    }
    for (size_t i = 0; i < nrel; i++)
        args_int(&a, release[i]);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    last_refused = rep->elements >= 2 ? (size_t)int_of(rep->element[1]) : 0;
    freeReplyObject(rep);
    return STORE_OK;
}

/* Runs a read-only op whose reply's element 1 holds one entry per key, nil
 * for a key not there: pages[i] = its page or -1, present[i] = not nil
 * (either may be NULL). */
static int call_pages(store_redis *r, args *a, size_t n, int64_t *pages, bool *present)
{
    redisReply *rep;
    int rc = call(r, a, false, &rep);
    if (rc != STORE_OK)
        return rc;
    const redisReply *v = n ? array_at(rep, 1, n) : NULL;
    if (n && !v)
        return malformed(rep);
    for (size_t i = 0; i < n; i++) {
        bool nil = v->element[i]->type == REDIS_REPLY_NIL;
        if (pages)
            pages[i] = nil ? -1 : int_of(v->element[i]);
        if (present)
            present[i] = !nil;
    }
    freeReplyObject(rep);
    return STORE_OK;
}

/* exists / lookup in one pool. */
static int rd_read(store_redis *r, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                   int64_t *pages, bool *present)
{
    args a;
    args_begin_pool(r, &a, "read", ns, rank);
    for (size_t i = 0; i < n; i++)
        args_key(&a, keys[i]);
    return call_pages(r, &a, n, pages, present);
}

static int rd_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     bool *present)
{
    return rd_read(R(s), ns, rank, keys, n, NULL, present);
}

static int rd_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     int64_t *pages)
{
    return rd_read(R(s), ns, rank, keys, n, pages, NULL);
}

/* A change whose reply carries nothing more than success. */
static int call_change(store_redis *r, args *a)
{
    redisReply *rep;
    int rc = call(r, a, true, &rep);
    if (rc == STORE_OK)
        freeReplyObject(rep);
    return rc;
}

static int rd_simple(store_redis *r, const char *op, hf_slice ns, uint32_t rank,
                     const hf_slice *keys, size_t n)
{
    args a;
    args_begin_pool(r, &a, op, ns, rank);
    for (size_t i = 0; i < n; i++)
        args_key(&a, keys[i]);
    if (!r->cluster)
        return call_change(r, &a);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc == STORE_OK) {
        cl_demote(r, ns, rank, list_at(rep, 1)); /* delete: the keys that left */
        freeReplyObject(rep);
    }
    return rc;
}

static int rd_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    return rd_simple(R(s), "delete", ns, rank, keys, n);
}

static int rd_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    return rd_simple(R(s), "clear_pool", ns, rank, NULL, 0);
}

static int rd_clear_all(store_t *s)
{
    store_redis *r = R(s);
    if (r->cluster)
        return cl_clear_all(r);
    args a;
    args_begin(r, &a, "clear_all");
    return call_change(r, &a);
}

/* Completeness over every pool of ns: pages[i] = the page in `rank` or -1,
 * present[i] = in every pool (either may be NULL; rank -1: no pages). */
static int rd_complete(store_redis *r, hf_slice ns, int64_t rank, const hf_slice *keys, size_t n,
                       int64_t *pages, bool *present)
{
    if (r->cluster)
        return cl_complete(r, ns, rank, keys, n, pages, present);
    args a;
    args_begin(r, &a, "complete");
    args_hex(&a, ns);
    args_int(&a, rank);
    for (size_t i = 0; i < n; i++)
        args_key(&a, keys[i]);
    return call_pages(r, &a, n, pages, present);
}

static int rd_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                              bool *present)
{
    return rd_complete(R(s), ns, -1, keys, n, NULL, present);
}

static int rd_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                 size_t n, int64_t *pages)
{
    return rd_complete(R(s), ns, rank, keys, n, pages, NULL);
}

static int unhex(const char *p, size_t len, char *out)
{
    for (size_t i = 0; i + 1 < len; i += 2) {
        int h = hexval(p[i]), l = hexval(p[i + 1]);
        if (h < 0 || l < 0)
            return -1;
        out[i / 2] = (char)(h * 16 + l);
    }
    return 0;
}

enum { NCOUNTERS = 19 };

/* One pool's stats row (op stats, op pool_stats) to fn; -1 if malformed. */
static int stats_row(const redisReply *row, store_stats_visitor fn, void *ctx)
{
    if (row->type != REDIS_REPLY_ARRAY || row->elements != 8 + NCOUNTERS ||
        row->element[0]->type != REDIS_REPLY_STRING)
        return -1;
    char *name = hf_xmalloc(row->element[0]->len / 2 + 1);
    unhex(row->element[0]->str, row->element[0]->len, name);
    int64_t v[8 + NCOUNTERS];
    for (size_t j = 1; j < 8 + NCOUNTERS; j++)
        v[j] = int_of(row->element[j]);
    core_pool_stats st = {0};
    st.num_pages = (uint64_t)v[2];
    st.touched = (uint64_t)v[3];
    st.owned = (uint64_t)v[4];
    st.reserved = (uint64_t)v[5];
    st.draining = (uint64_t)v[6];
    st.write_leased = (uint64_t)v[7];
    st.free = st.num_pages - st.owned - st.reserved - st.draining;
    const int64_t *c = v + 8;
    st.hits = (uint64_t)c[0];
    st.misses = (uint64_t)c[1];
    st.reservations = (uint64_t)c[2];
    st.confirmations = (uint64_t)c[3];
    st.releases = (uint64_t)c[4];
    st.evictions = (uint64_t)c[5];
    st.expired_reservations = (uint64_t)c[6];
    st.duplicate_confirmations = (uint64_t)c[7];
    for (int k = 0; k < CORE_REFUSE_COUNT; k++) {
        st.refused_confirms[k] = (uint64_t)c[8 + k];
        st.refused_releases[k] = (uint64_t)c[12 + k];
    }
    st.write_leases = (uint64_t)c[16];
    st.write_leases_ended = (uint64_t)c[17];
    st.write_leases_expired = (uint64_t)c[18];
    fn(ctx, (hf_slice){name, row->element[0]->len / 2}, (uint32_t)v[1], &st);
    free(name);
    return 0;
}

/* Over a cluster: op pool_stats on every pool the registry lists, at once. */
static int cl_stats(store_redis *r, store_stats_visitor fn, void *ctx)
{
    cl_pool *pools;
    size_t np;
    int code = cl_pools(r, &pools, &np, NULL, NULL);
    if (code != STORE_OK)
        return code;
    redisReply **reps = hf_xcalloc(np ? np : 1, sizeof *reps);
    code = cl_each_pool(r, "pool_stats", pools, np, reps);
    for (size_t i = 0; i < np; i++) {
        if (!reps[i])
            continue;
        if (code == STORE_OK && reps[i]->elements >= 2 && stats_row(reps[i]->element[1], fn, ctx) != 0)
            code = STORE_EUNAVAILABLE;
        freeReplyObject(reps[i]);
    }
    free(reps);
    cl_pools_free(pools, np);
    return code;
}

static int rd_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    store_redis *r = R(s);
    if (r->cluster)
        return cl_stats(r, fn, ctx);
    args a;
    args_begin(r, &a, "stats");
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    const redisReply *rows = list_at(rep, 1);
    if (!rows)
        return malformed(rep);
    for (size_t i = 0; i < rows->elements; i++)
        if (stats_row(rows->element[i], fn, ctx) != 0)
            return malformed(rep);
    freeReplyObject(rep);
    return STORE_OK;
}

/* A check's verdict (element 1: "" or what is wrong) into err; -1 if bad. */
static int check_verdict(const redisReply *rep, char *err, size_t errlen)
{
    if (rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING &&
        rep->element[1]->len > 0) {
        snprintf(err, errlen, "%.*s", (int)rep->element[1]->len, rep->element[1]->str);
        return -1;
    }
    return 0;
}

static int rd_check(store_t *s, char *err, size_t errlen)
{
    store_redis *r = R(s);
    if (r->cluster) {
        cl_pool *pools;
        size_t np;
        int rc = cl_pools(r, &pools, &np, NULL, NULL);
        redisReply **reps = hf_xcalloc(np ? np : 1, sizeof *reps);
        if (rc == STORE_OK)
            rc = cl_each_pool(r, "pool_check", pools, np, reps);
        int bad = 0;
        if (rc != STORE_OK) {
            snprintf(err, errlen, "Redis Cluster: %s", store_strerror(rc));
            bad = -1;
        }
        for (size_t i = 0; i < np; i++) {
            if (reps[i] && bad == 0)
                bad = check_verdict(reps[i], err, errlen);
            if (reps[i])
                freeReplyObject(reps[i]);
        }
        free(reps);
        if (rc == STORE_OK)
            cl_pools_free(pools, np);
        return bad;
    }
    args a;
    args_begin(r, &a, "check");
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "Redis: %s", store_strerror(rc));
        return -1;
    }
    int bad = check_verdict(rep, err, errlen);
    freeReplyObject(rep);
    return bad;
}

int store_redis_pages(store_t *s, hf_slice ns, uint32_t rank, store_redis_page *pages,
                      size_t npages)
{
    store_redis *r = R(s);
    args a;
    args_begin_pool(r, &a, "pages", ns, rank);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    const redisReply *list = list_at(rep, 1);
    if (!list)
        return malformed(rep);
    for (size_t i = 0; i < npages; i++) {
        store_redis_page *p = &pages[i];
        memset(p, 0, sizeof *p);
        if (i >= list->elements)
            continue;
        const redisReply *e = list->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 3)
            return malformed(rep);
        p->state = (int)int_of(e->element[0]);
        p->deadline = int_of(e->element[2]);
        if (e->element[1]->type == REDIS_REPLY_STRING && e->element[1]->len > 0)
            p->key_len = field_to_key(e->element[1]->str, e->element[1]->len, p->key,
                                      sizeof p->key - 1);
        p->key[p->key_len] = '\0';
    }
    freeReplyObject(rep);
    return STORE_OK;
}

/* ------------------------------------------- cluster: start, monitor, figures */

/* One command for every primary of the handle's map, sent at once; the
 * commands (caller frees them and their replies), *m of them. */
static cluster_cmd *cl_to_primaries(conn *c, int argc, const char **argv, const size_t *lens,
                                    unsigned flags, size_t *m)
{
    size_t n = cluster_node_count(c->cl);
    cluster_cmd *cmds = hf_xcalloc(n ? n : 1, sizeof *cmds);
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (ns.primary)
            cmds[(*m)++] = (cluster_cmd){.argc = argc, .argv = argv, .argvlen = lens,
                                         .slot = -1, .node = (int)i, .flags = flags};
    }
    cluster_exec(c->cl, cmds, *m);
    return cmds;
}

/* SCRIPT LOAD on every primary of the handle's map (the SHA1 is the
 * script's, the same everywhere). 0 or a STORE_E* code with err. */
static int cl_load_script(store_redis *r, conn *c, char *err, size_t errlen)
{
    const char *argv[3] = {"SCRIPT", "LOAD", redis_lua};
    size_t lens[3] = {6, 4, sizeof redis_lua - 1};
    size_t m;
    cluster_cmd *cmds = cl_to_primaries(c, 3, argv, lens, 0, &m);
    int rc = m ? STORE_OK : STORE_EUNAVAILABLE;
    if (!m)
        snprintf(err, errlen, "Redis Cluster %s: no primary serves a slot", r->seeds);
    for (size_t i = 0; i < m; i++) {
        redisReply *rep = cmds[i].reply;
        if (rc == STORE_OK && rep && rep->type == REDIS_REPLY_STRING && rep->len == 40) {
            pthread_mutex_lock(&r->lock);
            memcpy(r->sha, rep->str, 40);
            r->sha[40] = '\0';
            pthread_mutex_unlock(&r->lock);
        } else if (rc == STORE_OK) {
            cluster_node_stats ns;
            cluster_get_node_stats(c->cl, (size_t)cmds[i].node, &ns);
            snprintf(err, errlen, "Redis Cluster node %s: SCRIPT LOAD: %s", ns.addr,
                     !rep ? cluster_last_error(c->cl)
                     : rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
            rc = rep ? STORE_EUNAVAILABLE : STORE_EUNREACHABLE;
        }
        if (rep)
            freeReplyObject(rep);
    }
    free(cmds);
    return rc;
}

/* The monitor's look at the cluster: every primary answers PING and every
 * slot has a primary. true, or false with why. */
static bool cl_probe(store_redis *r, conn *c, char *err, size_t errlen)
{
    const char *argv[1] = {"PING"};
    size_t lens[1] = {4};
    size_t m;
    cluster_cmd *cmds = cl_to_primaries(c, 1, argv, lens, CLUSTER_CMD_IDEMPOTENT, &m);
    bool ok = true;
    for (size_t i = 0; i < m; i++) {
        redisReply *rep = cmds[i].reply;
        if (ok && (!rep || rep->type == REDIS_REPLY_ERROR)) {
            cluster_node_stats ns;
            cluster_get_node_stats(c->cl, (size_t)cmds[i].node, &ns);
            snprintf(err, errlen, "node %s: %s", ns.addr,
                     rep ? rep->str : cluster_last_error(c->cl));
            ok = false;
        }
        if (rep)
            freeReplyObject(rep);
    }
    free(cmds);
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
    store_redis *r = arg;
    conn *m = NULL;
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        int64_t wait_ms = r->up ? 1000 : 200;
        monitor_wait(r, wait_ms);
        if (r->stopping)
            break;
        pthread_mutex_unlock(&r->lock);
        char err[512] = "";
        int code;
        if (!m)
            m = cl_open(r, &code, err, sizeof err);
        bool ok = m && cl_probe(r, m, err, sizeof err);
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

static void cl_metrics(store_redis *r, const store_emitter *e)
{
    pthread_mutex_lock(&r->lock);
    size_t n = r->nfigs;
    node_fig *figs = hf_xreallocarray(NULL, n ? n : 1, sizeof *figs);
    if (n)
        memcpy(figs, r->figs, n * sizeof *figs);
    uint64_t refreshes = r->cl_refreshes, failures = r->cl_refresh_failures,
             rounds = r->cl_rounds;
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
    store_emit_number(e, "noscript_reloads", store_int(atomic_load(&r->cl_noscript)));
    store_emit_number(e, "waits_on_every_primary", store_int(atomic_load(&r->cl_rewaits)));
    store_emit_object(e, "nodes");
    for (size_t i = 0; i < n; i++) {
        const cluster_node_stats *s = &figs[i].s;
        store_emit_object(e, s->addr);
        store_emit_string(e, "role", s->primary ? "primary" : s->replica ? "replica" : "none",
                          s->primary ? 7 : s->replica ? 7 : 4);
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

static int rd_health(store_t *s, char *reason, size_t len)
{
    store_redis *r = R(s);
    if (atomic_load(&r->up_flag)) {
        if (len)
            reason[0] = '\0';
        return STORE_OK;
    }
    pthread_mutex_lock(&r->lock);
    char w[300];
    snprintf(reason, len, "Redis at %s is unavailable: %s", where(r, w, sizeof w),
             r->reason[0] ? r->reason : "not reached yet");
    pthread_mutex_unlock(&r->lock);
    return STORE_EUNAVAILABLE;
}

static void rd_destroy(store_t *s)
{
    store_redis *r = R(s);
    pthread_mutex_lock(&r->lock);
    r->stopping = true;
    pthread_cond_signal(&r->wake);
    pthread_mutex_unlock(&r->lock);
    pthread_join(r->monitor, NULL);
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
    free(r->seeds);
    free(r->figs);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->wake);
    free(r->host);
    free(r->unix_path);
    free(r->user);
    if (r->password) {
        explicit_bzero(r->password, strlen(r->password));
        free(r->password);
    }
    free(r);
}

/* The engine's figures: /metrics families and the "store" member of /v1/stats. */
static int rd_metrics(store_t *s, const store_emitter *e)
{
    store_redis *r = R(s);
    bool up = atomic_load(&r->up_flag);
    uint64_t counts[RTT_BUCKETS];
    for (unsigned i = 0; i < RTT_BUCKETS; i++)
        counts[i] = atomic_load(&r->rtt_buckets[i]);
    uint64_t calls = atomic_load(&r->calls), errors = atomic_load(&r->errors),
             unknown = atomic_load(&r->unknown), reconnects = atomic_load(&r->reconnects),
             refused = atomic_load(&r->refused_down);
    const store_metric_type counter = STORE_METRIC_COUNTER;
    /* Three families, the ones the operators' rules and dashboard use; the
     * other figures are in /v1/stats. */
    store_emit_metric(e, "hf3fs_metad_store_up", STORE_METRIC_GAUGE,
                      "1 while the shared store (Redis) answers, 0 while this front end "
                      "cannot reach it or it refuses calls (see GET /health).",
                      store_int(up));
    store_emit_family(e, "hf3fs_metad_store_round_trip_seconds", STORE_METRIC_HISTOGRAM,
                      "Time of one call to Redis as this front end sees it (one script run, "
                      "with its WAIT under --redis-wait).");
    store_histogram h = {
        .nbuckets = RTT_BUCKETS,
        .bounds = rtt_bounds_us,
        .counts = counts,
        .sum = atomic_load(&r->rtt_sum_us),
        .decimals = 6,
    };
    store_emit_histogram(e, NULL, 0, &h);
    store_emit_metric(e, "hf3fs_metad_store_errors_total", counter,
                      "Store calls that failed: Redis unreachable, down, timed out, refusing "
                      "the call or answering an error (calls, outcomes unknown and reconnects "
                      "are in /v1/stats, member store).",
                      store_int(errors));

    char w[300], reason[512];
    where(r, w, sizeof w);
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
    if (r->cluster)
        cl_metrics(r, e);
    store_emit_end(e);
    return STORE_OK;
}

static const char *rd_describe(store_t *s, int err)
{
    (void)s;
    switch (err) {
    case STORE_EUNAVAILABLE:
        return "Redis cannot be reached or refused the call (see GET /health for why); nothing "
               "was changed, so the request may be sent again";
    case STORE_EUNCERTAIN:
        return "the change was sent to Redis but its answer was lost (a timeout or a broken "
               "connection), or fewer replicas than --redis-wait confirmed it: it may have taken "
               "effect; check the state before repeating it";
    default: return NULL;
    }
}

static const struct store_ops redis_ops = {
    .init_pool = rd_init_pool,
    .allocate = rd_allocate,
    .confirm = rd_confirm,
    .exists = rd_exists,
    .lookup = rd_lookup,
    .delete_keys = rd_delete_keys,
    .clear_pool = rd_clear_pool,
    .clear_all = rd_clear_all,
    .complete_exists = rd_complete_exists,
    .complete_locations = rd_complete_locations,
    .stats = rd_stats,
    .check = rd_check,
    .destroy = rd_destroy,
    .health = rd_health,
    .metrics = rd_metrics,
    .describe = rd_describe,
};

int store_redis_open(const core_config *config, const store_redis_options *options,
                     store_t **out, char *err, size_t errlen)
{
    store_redis *r = hf_xcalloc(1, sizeof *r);
    r->base.ops = &redis_ops;
    r->cfg = *config;
    if (r->cfg.max_pages == 0 || r->cfg.max_pages > CORE_MAX_PAGES_LIMIT)
        r->cfg.max_pages = CORE_MAX_PAGES_LIMIT;
    r->opt = *options;
    r->opt.url = NULL;
    r->opt.password = NULL;
    if (r->opt.connect_timeout_ms <= 0)
        r->opt.connect_timeout_ms = 1000;
    if (r->opt.command_timeout_ms <= 0)
        r->opt.command_timeout_ms = 2000;
    if (r->opt.use_log_bound == 0)
        r->opt.use_log_bound = 32768;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->wake, NULL);
    int rc = parse_url(r, options->url, err, errlen);
    if (rc == STORE_OK && options->password) {
        free(r->password);
        r->password = dup_n(options->password, strlen(options->password));
    }
    redisContext *c = NULL;
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
            rc = cl_load_script(r, cc, why, sizeof why);
            if (rc == STORE_OK) {
                cl_fold(r, cc);
                cc->next = r->idle;
                r->idle = cc;
            } else {
                cl_free(cc);
            }
        }
        if (rc != STORE_OK)
            snprintf(err, errlen, "Redis Cluster %s: %s", r->seeds, why);
    } else if (rc == STORE_OK) {
        c = connect_one(r, &rc, err, errlen);
    }
    if (c) {
        rc = load_script(r, c, err, errlen);
        redisFree(c);
    }
    if (rc != STORE_OK) {
        r->monitor = pthread_self();
        pthread_mutex_destroy(&r->lock);
        pthread_cond_destroy(&r->wake);
        free(r->host);
        free(r->unix_path);
        free(r->user);
        free(r->password);
        free(r->seeds);
        free(r->figs);
        free(r);
        return rc;
    }
    r->up = true;
    atomic_store(&r->up_flag, true);
    pthread_create(&r->monitor, NULL, r->cluster ? cl_monitor_main : monitor_main, r);
    *out = &r->base;
    return STORE_OK;
}
