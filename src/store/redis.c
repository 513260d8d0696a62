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
#include "util/log.h"
#include "util/xalloc.h"

#define RTT_BUCKETS 13
static const uint64_t rtt_bounds_us[RTT_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000,
};

typedef struct conn {
    redisContext *ctx;
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
} store_redis;

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
    if (strncmp(url, "redis://", 8) != 0) {
        snprintf(err, errlen,
                 "--store %s: expected redis://[user:password@]host:port[/db] or "
                 "unix:///path/redis.sock",
                 url);
        return STORE_ECONFIG;
    }
    const char *p = url + 8;
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
    if (r->unix_path)
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

/* The monitor: ping every second while up, reconnect with backoff while down. */
static void *monitor_main(void *arg)
{
    store_redis *r = arg;
    redisContext *ctx = NULL;
    int64_t backoff_ms = 100;
    pthread_mutex_lock(&r->lock);
    while (!r->stopping) {
        int64_t wait_ms = r->up ? 1000 : backoff_ms;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += wait_ms / 1000;
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->wake, &r->lock, &until);
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

/* EVALSHA sha 0 op now reservation lease evict wlease grace bound */
static void args_begin(store_redis *r, args *a, const char *op)
{
    memset(a, 0, sizeof *a);
    args_str(a, "EVALSHA");
    pthread_mutex_lock(&r->lock);
    args_add(a, r->sha, 40);
    pthread_mutex_unlock(&r->lock);
    args_str(a, "0");
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

static void count_rtt(store_redis *r, int64_t us)
{
    unsigned i = 0;
    while (i < RTT_BUCKETS - 1 && (uint64_t)us > rtt_bounds_us[i])
        i++;
    atomic_fetch_add(&r->rtt_buckets[i], 1);
    atomic_fetch_add(&r->rtt_sum_us, (uint64_t)us);
}

/*
 * Run the script with a's arguments. STORE_OK and *out (the reply's array,
 * status element checked: STORE_ENOPOOL when the script said so), or
 * STORE_EUNAVAILABLE (nothing was applied), or, for a change, STORE_EUNCERTAIN
 * (it was sent and its outcome is unknown).
 */
static int call(store_redis *r, args *a, bool change, redisReply **out)
{
    *out = NULL;
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
                               (long long)(r->opt.wait_timeout_ms ? r->opt.wait_timeout_ms
                                                                  : r->opt.command_timeout_ms));
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
                atomic_fetch_add(&r->errors, 1);
                atomic_fetch_add(&r->unknown, 1);
                log_msg(LOG_ERROR, "Redis: a change was applied but only %lld of %u replicas "
                        "acknowledged it within the timeout", acked, r->opt.wait_replicas);
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
            freeReplyObject(rep);
            break;
        }
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
            rep->element[0]->type != REDIS_REPLY_INTEGER) {
            atomic_fetch_add(&r->errors, 1);
            log_msg(LOG_ERROR, "Redis: unexpected reply of type %d to the script", rep->type);
            freeReplyObject(rep);
            code = change ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
            break;
        }
        if (rep->element[0]->integer == 1) {
            freeReplyObject(rep);
            code = STORE_ENOPOOL;
            break;
        }
        *out = rep;
        code = STORE_OK;
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

/* ---------------------------------------------------------------- ops */

static void args_pool(args *a, hf_slice ns, uint32_t rank)
{
    args_hex(a, ns);
    args_int(a, rank);
}

static int rd_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                        bool *created, uint64_t *existing_pages)
{
    store_redis *r = R(s);
    if (num_pages > r->cfg.max_pages || rank >= r->cfg.max_ranks)
        return STORE_EINVAL;
    args a;
    args_begin(r, &a, "init");
    args_pool(&a, ns, rank);
    args_int(&a, (int64_t)num_pages);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->elements < 3)
        return malformed(rep);
    if (created)
        *created = int_of(rep->element[1]) == 1;
    if (existing_pages)
        *existing_pages = (uint64_t)int_of(rep->element[2]);
    freeReplyObject(rep);
    return STORE_OK;
}

static int rd_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                       core_alloc_mode mode, int64_t *pages, bool *existed)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "allocate");
    args_pool(&a, ns, rank);
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
    args_begin(r, &a, "confirm");
    args_pool(&a, ns, rank);
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
    args_begin(r, &a, "read");
    args_pool(&a, ns, rank);
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
    args_begin(r, &a, op);
    args_pool(&a, ns, rank);
    for (size_t i = 0; i < n; i++)
        args_key(&a, keys[i]);
    return call_change(r, &a);
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
    args a;
    args_begin(r, &a, "clear_all");
    return call_change(r, &a);
}

/* Completeness over every pool of ns: pages[i] = the page in `rank` or -1,
 * present[i] = in every pool (either may be NULL; rank -1: no pages). */
static int rd_complete(store_redis *r, hf_slice ns, int64_t rank, const hf_slice *keys, size_t n,
                       int64_t *pages, bool *present)
{
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

static int rd_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "stats");
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    const redisReply *rows = list_at(rep, 1);
    if (!rows)
        return malformed(rep);
    for (size_t i = 0; i < rows->elements; i++) {
        const redisReply *row = rows->element[i];
        if (row->type != REDIS_REPLY_ARRAY || row->elements != 8 + NCOUNTERS ||
            row->element[0]->type != REDIS_REPLY_STRING)
            return malformed(rep);
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
    }
    freeReplyObject(rep);
    return STORE_OK;
}

static int rd_check(store_t *s, char *err, size_t errlen)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "check");
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK) {
        snprintf(err, errlen, "Redis: %s", store_strerror(rc));
        return -1;
    }
    int bad = 0;
    if (rep->elements >= 2 && rep->element[1]->type == REDIS_REPLY_STRING &&
        rep->element[1]->len > 0) {
        snprintf(err, errlen, "%.*s", (int)rep->element[1]->len, rep->element[1]->str);
        bad = -1;
    }
    freeReplyObject(rep);
    return bad;
}

int store_redis_pages(store_t *s, hf_slice ns, uint32_t rank, store_redis_page *pages,
                      size_t npages)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "pages");
    args_pool(&a, ns, rank);
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
        redisFree(c->ctx);
        free(c);
    }
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
    if (rc == STORE_OK)
        c = connect_one(r, &rc, err, errlen);
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
        free(r);
        return rc;
    }
    r->up = true;
    atomic_store(&r->up_flag, true);
    pthread_create(&r->monitor, NULL, monitor_main, r);
    *out = &r->base;
    return STORE_OK;
}
