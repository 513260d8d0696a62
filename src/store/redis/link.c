/*
 * link.c: the link to Redis (link.h): the URL, a connection opened and
 * probed, up and down, the monitor of one Redis, the calls, open and
 * close. The default of --redis-wait, health and the figures are
 * health.c's, the pipes pipe.c's, the Redis Cluster side route.c's;
 * link_internal.h is what they share.
 */
#include "store/redis/link_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/hostport.h"
#include "util/log.h"
#include "util/xalloc.h"

static struct timeval tv_of_ms(int64_t ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};
}

/* ---------------------------------------------------------------- URL */

char *link__dup_n(const char *p, size_t n)
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
        r->unix_path = link__dup_n(path, strlen(path));
        return STORE_OK;
    }
    bool cluster = strncmp(url, "redis-cluster://", 16) == 0;
    bool sentinel = strncmp(url, "redis-sentinel://", 17) == 0;
    if (strncmp(url, "redis://", 8) != 0 && !cluster && !sentinel) {
        snprintf(err, errlen,
                 "--store %s: expected redis://[user:password@]host:port[/db], "
                 "redis-cluster://[user:password@]host:port[,host:port...], "
                 "redis-sentinel://[user:password@]host:port[,host:port...]/PRIMARYNAME[/db] or "
                 "unix:///path/redis.sock",
                 url);
        return STORE_ECONFIG;
    }
    const char *p = url + (cluster ? 16 : sentinel ? 17 : 8);
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
    if (sentinel)
        return link__sentinel_parse(r, p, url, err, errlen);
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
        r->seeds = link__dup_n(p, strlen(p));
        return STORE_OK;
    }
    const char *end = p + strcspn(p, "/");
    hf_hostport hp;
    int rc = hf_hostport_parse(p, (size_t)(end - p), 0, &hp);
    if (rc != HF_HOSTPORT_OK) {
        snprintf(err, errlen, "--store %s: %s", url, hf_hostport_strerror(rc));
        return STORE_ECONFIG;
    }
    r->host = link__dup_n(hp.host, hp.host_len);
    r->port = hp.port ? hp.port : 6379;
    return link__parse_db(r, end, url, err, errlen);
}

int link__parse_db(redis_link *r, const char *p, const char *url, char *err, size_t errlen)
{
    if (*p != '/' || !p[1])
        return STORE_OK;
    char *stop;
    long db = strtol(p + 1, &stop, 10);
    if (*stop || db < 0 || db > 1000000) {
        snprintf(err, errlen, "--store %s: the database must be a number", url);
        return STORE_ECONFIG;
    }
    r->db = (int)db;
    return STORE_OK;
}

/* -------------------------------------------------------- connections */

const char *redis_link_where(redis_link *r, char *buf, size_t len)
{
    if (r->cluster) {
        snprintf(buf, len, "cluster %s", r->seeds);
    } else if (r->sentinel) {
        char host[256];
        int port;
        link__sentinel_primary(r, host, sizeof host, &port);
        if (host[0])
            snprintf(buf, len, "%s:%d (the primary of %s)", host, port, r->master_name);
        else
            snprintf(buf, len, "the primary of %s (the sentinels named none yet)", r->master_name);
    } else if (r->unix_path)
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

static int probe_one(redis_link *r, redisContext *c, const char *w, char *err, size_t errlen);

/* A new connection to the one Redis (nl NULL or without a host) or to the
 * cluster node nl: connected, authenticated, db selected (one Redis), the
 * probe passed. NULL, *code and err. */
redisContext *link__connect_one(redis_link *r, const node_link *nl, int *code, char *err,
                                size_t errlen)
{
    struct timeval ct = tv_of_ms(r->opt.connect_timeout_ms);
    bool node = nl && nl->host;
    char primary[256];
    int port = node ? nl->port : r->port;
    const char *host = node ? nl->host : r->host;
    if (!node && r->sentinel) { /* the primary the sentinels named last */
        link__sentinel_primary(r, primary, sizeof primary, &port);
        host = primary;
    }
    redisContext *c = !node && r->unix_path ? redisConnectUnixWithTimeout(r->unix_path, ct)
                                            : redisConnectWithTimeout(host, port, ct);
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
    if (node) { /* a cluster has database 0 only */
        *code = probe_one(r, c, w, err, errlen);
        if (*code != STORE_OK)
            goto fail;
        return c;
    }
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
    rep = NULL;
    *code = probe_one(r, c, w, err, errlen);
    if (*code != STORE_OK)
        goto fail;
    return c;
fail:
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return NULL;
}

/* The probe's commands, pipelined, on one connection to the node at w:
 * STORE_OK, or a code and why (err). */
static int probe_one(redis_link *r, redisContext *c, const char *w, char *err, size_t errlen)
{
    redisReply *reps[REDIS_PROBE_MAX] = {NULL};
    int n = r->opt.probe_n, got = 0, rc;
    bool sent = true;
    for (int i = 0; i < n && sent; i++)
        sent = redisAppendCommandArgv(c, r->opt.probe[i].argc, r->opt.probe[i].argv,
                                      r->probe_lens[i]) == REDIS_OK;
    while (sent && got < n && redisGetReply(c, (void **)&reps[got]) == REDIS_OK && reps[got])
        got++;
    if (got < n) {
        snprintf(err, errlen, "Redis at %s: %s: %s", w, r->opt.probe[got].argv[0],
                 c->errstr[0] ? c->errstr : "I/O error");
        rc = STORE_EUNREACHABLE;
    } else {
        rc = r->opt.probe_check(r->opt.probe_ctx, reps, w, err, errlen);
    }
    for (int i = 0; i < got; i++)
        freeReplyObject(reps[i]);
    if (rc == STORE_OK && r->sentinel) /* changes go to a primary only */
        rc = link__sentinel_role(r, c, w, err, errlen);
    return rc;
}

void link__mark_down(redis_link *r, const char *why)
{
    HF_ASSERT(why);
    hf_mutex_lock(&r->lock);
    /* up and its lock-free copy agree under the lock: they change together */
    HF_ASSERT(r->up == atomic_load(&r->up_flag));
    if (r->up) {
        r->up = false;
        atomic_store(&r->up_flag, false);
        r->gen++;
        snprintf(r->reason, sizeof r->reason, "%s", why);
        log_msg(LOG_WARN, "Redis unavailable: %s; refusing calls until it answers again", why);
        pthread_cond_signal(&r->wake);
        HF_ASSERT(!atomic_load(&r->up_flag) && r->reason[0] == why[0]);
    }
    hf_mutex_unlock(&r->lock);
}

/* The monitors' pause (r->lock held): wait_ms, or less if woken. */
void link__monitor_wait(redis_link *r, int64_t wait_ms)
{
    HF_ASSERT(hf_mutex_held(&r->lock) && wait_ms >= 0);
    hf_cond_wait_until_us(&r->wake, &r->lock, hf_clock_mono_us() + wait_ms * 1000);
}

/* Over redis-sentinel://, while up: whether the sentinels name another
 * primary than the one followed (then why, in err). A sentinel that cannot
 * be asked says nothing: the primary answered the probe and ROLE. */
static bool sentinels_moved(redis_link *r, char *err, size_t errlen)
{
    char host[256], cur[256], why[512];
    int port, cur_port;
    if (link__sentinel_ask(r, host, sizeof host, &port, why, sizeof why) != STORE_OK)
        return false;
    link__sentinel_primary(r, cur, sizeof cur, &cur_port);
    if (strcmp(host, cur) == 0 && port == cur_port)
        return false;
    snprintf(err, errlen, "the sentinels name %.200s:%d the primary of %.100s now, not %.100s:%d",
             host, port, r->master_name, cur, cur_port);
    return true;
}

/* The monitor of one Redis: probe every second while up, reconnect with
 * backoff while down (up again once the probe passes). Over
 * redis-sentinel://, each attempt while down first asks the sentinels for
 * the primary (and connects to the one they name), the probe includes
 * ROLE, and every second while up the sentinels are asked whether they
 * name another primary (then down, and the next attempt follows it). */
static void *monitor_main(void *arg)
{
    redis_link *r = arg;
    redisContext *ctx = NULL;
    /* while down: 0.1 s doubling to 2 s; over Sentinel to 0.5 s (asking
     * the sentinels is cheap, and a new primary is followed that soon) */
    int64_t backoff_max = r->sentinel ? 500 : 2000;
    int64_t backoff_ms = 100;
    bool switched = false; /* over Sentinel: a new primary named since it went down */
    hf_mutex_lock(&r->lock);
    while (!r->stopping) {
        int64_t wait_ms = r->up ? 1000 : backoff_ms;
        link__monitor_wait(r, wait_ms);
        if (r->stopping)
            break;
        bool was_up = r->up;
        hf_mutex_unlock(&r->lock);

        char err[512] = "";
        int code = 0;
        bool ok = false, named = true, asked = false;
        if (!was_up && ctx) { /* a connection from before the failure */
            redisFree(ctx);
            ctx = NULL;
        }
        if (!ctx && r->sentinel) {
            char host[256];
            int port;
            named = link__sentinel_ask(r, host, sizeof host, &port, err, sizeof err) == STORE_OK;
            asked = true;
            if (named && link__sentinel_follow(r, host, port))
                switched = true;
        }
        bool fresh = !ctx;
        if (named && !ctx)
            ctx = link__connect_one(r, NULL, &code, err, sizeof err);
        if (ctx) { /* a new connection passed the probe in link__connect_one */
            char w[300];
            ok = fresh ||
                 probe_one(r, ctx, redis_link_where(r, w, sizeof w), err, sizeof err) == STORE_OK;
            if (ok && was_up && r->sentinel && !asked && sentinels_moved(r, err, sizeof err))
                ok = false;
            if (!ok) {
                redisFree(ctx);
                ctx = NULL;
            }
        }
        if (ok)
            link__look_one(r, ctx);
        if (ok) {
            backoff_ms = 100;
            if (!was_up) {
                char w[300];
                hf_mutex_lock(&r->lock);
                /* down to up: only the monitor brings it up, and it saw it down */
                HF_ASSERT(!r->up && !atomic_load(&r->up_flag));
                r->up = true;
                atomic_store(&r->up_flag, true);
                r->reason[0] = '\0';
                hf_mutex_unlock(&r->lock);
                atomic_fetch_add(&r->reconnects, 1);
                if (switched) {
                    /* what the old primary refused says nothing of this one */
                    atomic_store(&r->change_bad_us, 0);
                    atomic_fetch_add(&r->switches, 1);
                    switched = false;
                }
                log_msg(LOG_INFO, "Redis answers again: serving (Redis at %s)",
                        redis_link_where(r, w, sizeof w));
            }
        } else {
            if (r->sentinel && named && !was_up) {
                size_t used = strlen(err);
                snprintf(err + used, sizeof err - used,
                         "; the sentinels still name it the primary of %.100s (asked again "
                         "every %.1f s)",
                         r->master_name, (double)backoff_max / 1000);
            }
            if (was_up)
                link__mark_down(r, err);
            else if (backoff_ms < backoff_max)
                backoff_ms = backoff_ms * 2 > backoff_max ? backoff_max : backoff_ms * 2;
            hf_mutex_lock(&r->lock);
            if (!r->up)
                snprintf(r->reason, sizeof r->reason, "%s", err);
            hf_mutex_unlock(&r->lock);
        }
        hf_mutex_lock(&r->lock);
    }
    hf_mutex_unlock(&r->lock);
    if (ctx)
        redisFree(ctx);
    return NULL;
}

/* ---------------------------------------------------------------- calls */

int64_t link__wait_ms(const redis_link *r)
{
    return r->opt.wait_timeout_ms;
}

void link__wait_cmd(const redis_link *r, wait_cmd *w)
{
    w->want = link__wait_count(r);
    int a = snprintf(w->n, sizeof w->n, "%u", w->want);
    int b = snprintf(w->ms, sizeof w->ms, "%lld", (long long)link__wait_ms(r));
    w->argv[0] = "WAIT";
    w->argv[1] = w->n;
    w->argv[2] = w->ms;
    w->lens[0] = 4;
    w->lens[1] = (size_t)a;
    w->lens[2] = (size_t)b;
}

/* A change that failed while Redis answered: the mode is reads-only for a
 * while (redis_link_health). */
static void change_failed(redis_link *r, const char *why)
{
    hf_mutex_lock(&r->lock);
    snprintf(r->change_reason, sizeof r->change_reason, "%s", why);
    hf_mutex_unlock(&r->lock);
    atomic_store(&r->change_bad_us, hf_clock_mono_us());
}

/* A change applied, but fewer replicas than the want its WAIT asked for
 * acknowledged it. */
void link__wait_short(redis_link *r, long long acked, unsigned want)
{
    char why[256];
    snprintf(why, sizeof why,
             "a change was applied but only %lld of the %u replicas it waits for "
             "(--redis-wait) acknowledged it within --redis-wait-timeout: changes answer 507",
             acked < 0 ? 0 : acked, want);
    change_failed(r, why);
    atomic_fetch_add(&r->errors, 1);
    atomic_fetch_add(&r->unknown, 1);
    log_msg(LOG_ERROR,
            "Redis: a change was applied but only %lld of %u replicas "
            "acknowledged it within the timeout",
            acked, want);
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

/* Errors with which Redis refuses a write it would serve a read for. */
static bool refuses_writes(const redisReply *rep)
{
    static const char *const codes[] = {"MISCONF", "READONLY", "NOREPLICAS", "OOM", "MASTERDOWN"};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (strncmp(rep->str, codes[i], strlen(codes[i])) == 0)
            return true;
    return false;
}

/* What became of n changes, for redis_link_health: one refused by Redis
 * (a failed change), else one applied and acknowledged (the latest good
 * one). A short WAIT is counted where it is seen (link__wait_short). */
static void note_changes(redis_link *l, const redis_cmd *cmds, size_t n)
{
    bool applied = false;
    for (size_t i = 0; i < n; i++) {
        const redisReply *rep = cmds[i].reply;
        if (cmds[i].code != STORE_OK || !rep)
            continue;
        if (rep->type != REDIS_REPLY_ERROR) {
            applied = true;
        } else if (refuses_writes(rep)) {
            char why[256];
            snprintf(why, sizeof why, "Redis refuses writes: %.200s", rep->str);
            change_failed(l, why);
            if (l->sentinel && strncmp(rep->str, "READONLY", 8) == 0) {
                /* the primary followed became a replica: ask the sentinels */
                snprintf(why, sizeof why,
                         "Redis answered READONLY: it is a replica now, and the sentinels "
                         "are asked for the primary of %.100s",
                         l->master_name);
                link__mark_down(l, why);
            }
            return;
        }
    }
    if (applied)
        atomic_store(&l->change_ok_us, hf_clock_mono_us());
}

void redis_link_exec(redis_link *l, redis_cmd *cmds, size_t n, bool change)
{
    for (size_t i = 0; i < n; i++) {
        cmds[i].reply = NULL;
        cmds[i].code = STORE_EUNAVAILABLE;
    }
    if (n == 0)
        return;
    atomic_fetch_add(&l->calls, n);
    if (l->cluster && !atomic_load(&l->up_flag) && atomic_load(&l->none_answer)) {
        /* not one primary passed the monitor's last look (every 200 ms
         * while down): refused at once, as over one Redis, rather than
         * each command spending --redis-connect-timeout on a node that
         * does not answer (a front end cut off from the cluster) */
        atomic_fetch_add(&l->refused_down, 1);
        return;
    }
    if (!l->cluster)
        link__one_exec(l, cmds, n, change);
    else
        link__cl_fast_exec(l, cmds, n, change);
    if (change)
        note_changes(l, cmds, n);
}

typedef struct on_primaries_job {
    redis_link *l;
    int argc;
    const char **argv;
    const size_t *argvlen;
    bool change;
    size_t *n;
    redis_cmd *cmds;
} on_primaries_job;

/* Over a cluster, through a routing handle, whose I/O blocks: off the
 * loop (hf_fiber_offload). */
static void on_primaries(void *arg)
{
    on_primaries_job *j = arg;
    *j->n = 0;
    conn *c = link__cl_borrow(j->l);
    if (!c) {
        atomic_fetch_add(&j->l->errors, 1);
        j->cmds = hf_xcalloc(1, sizeof(redis_cmd));
        return;
    }
    j->cmds = link__cl_primaries(c, j->argc, j->argv, j->argvlen, j->n);
    atomic_fetch_add(&j->l->calls, *j->n);
    link__cl_exec(j->l, c, j->cmds, *j->n, j->change);
    link__cl_give_back(j->l, c);
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
    on_primaries_job j = {l, argc, argv, argvlen, change, n, NULL};
    hf_fiber_offload(on_primaries, &j);
    return j.cmds;
}

uint32_t redis_link_primaries(redis_link *l)
{
    if (!l->cluster)
        return 1;
    conn *c = link__cl_borrow(l);
    if (!c)
        return 0;
    uint32_t n = 0;
    for (size_t i = 0; i < cluster_node_count(c->cl); i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (ns.primary)
            n++;
    }
    link__cl_give_back(l, c);
    return n;
}

/* ------------------------------------------------------- open, close */

static void link_free(redis_link *r)
{
    link__node_free(r->one);
    for (size_t i = 0; i < r->nnodes; i++)
        link__node_free(r->nodes[i]);
    free(r->nodes);
    pthread_rwlock_destroy(&r->map_lock);
    while (r->idle) {
        conn *c = r->idle;
        r->idle = c->next;
        if (c->cl) {
            link__cl_free(c);
        } else {
            redisFree(c->ctx);
            free(c);
        }
    }
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->addr_lock);
    pthread_cond_destroy(&r->wake);
    link__sentinel_free(r);
    free(r->seeds);
    free(r->figs);
    free(r->prims);
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
    hf_mutex_lock(&r->lock);
    HF_ASSERT(!r->stopping); /* closed once */
    r->stopping = true;
    pthread_cond_signal(&r->wake);
    hf_mutex_unlock(&r->lock);
    if (r->monitoring)
        pthread_join(r->monitor, NULL);
    link_free(r);
}

int redis_link_open(const redis_link_options *opt, redis_link **out, char *err, size_t errlen)
{
    redis_link *r = hf_xcalloc(1, sizeof *r);
    r->opt = *opt;
    r->opt.url = NULL;
    r->opt.password = NULL;
    HF_ASSERT(opt->probe_n >= 1 && opt->probe_n <= REDIS_PROBE_MAX);
    for (int k = 0; k < r->opt.probe_n; k++)
        for (int i = 0; i < r->opt.probe[k].argc && i < 4; i++)
            r->probe_lens[k][i] = strlen(r->opt.probe[k].argv[i]);
    if (!r->opt.max_in_flight)
        r->opt.max_in_flight = 256;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->addr_lock, NULL);
    hf_cond_init_mono(&r->wake);
    pthread_rwlock_init(&r->map_lock, NULL);
    memset(r->slot_node, 0xff, sizeof r->slot_node);
    int rc = parse_url(r, opt->url, err, errlen);
    if (rc == STORE_OK && opt->password) {
        free(r->password);
        r->password = link__dup_n(opt->password, strlen(opt->password));
    }
    if (rc == STORE_OK && r->cluster) {
        r->copt = (cluster_options){
            .seeds = r->seeds,
            .user = r->user,
            .password = r->password,
            .connect_timeout_ms = (int)r->opt.connect_timeout_ms,
            .command_timeout_ms = (int)r->opt.command_timeout_ms,
            .hello_n = r->opt.probe_n,
            .hello_check = r->opt.probe_check,
            .hello_ctx = r->opt.probe_ctx,
        };
        for (int k = 0; k < r->opt.probe_n; k++) {
            r->copt.hello_argc[k] = r->opt.probe[k].argc;
            r->copt.hello_argv[k] = r->opt.probe[k].argv;
            r->copt.hello_argvlen[k] = r->probe_lens[k];
        }
        char why[400];
        conn *cc = link__cl_open(r, &rc, why, sizeof why);
        if (cc) {
            rc = link__cl_open_probe(r, cc, why, sizeof why);
            if (rc == STORE_OK) {
                link__cl_fold(r, cc);
                link__cl_map_take(r, cc->cl);
                link__cl_look(r, cc); /* the default's first judgement */
                cc->next = r->idle;
                r->idle = cc;
            } else {
                link__cl_free(cc);
            }
        }
        if (rc != STORE_OK)
            snprintf(err, errlen, "Redis Cluster %s: %s", r->seeds, why);
    } else if (rc == STORE_OK) {
        r->one = link__node_new(r, NULL, 0, 0, "");
        if (r->sentinel) {
            char host[256], why[900];
            int port;
            rc = link__sentinel_ask(r, host, sizeof host, &port, why, sizeof why);
            if (rc == STORE_OK)
                link__sentinel_follow(r, host, port);
            else
                snprintf(err, errlen, "Redis Sentinel: no sentinel named the primary of %s: %s",
                         r->master_name, why);
        }
        /* a new connection passes the probe (and, over Sentinel, ROLE) in
         * link__connect_one */
        redisContext *c = rc == STORE_OK ? link__connect_one(r, NULL, &rc, err, errlen) : NULL;
        if (c) {
            link__look_one(r, c); /* the default's first judgement, before any call */
            redisFree(c);
        }
    }
    if (rc != STORE_OK) {
        link_free(r);
        return rc;
    }
    r->up = true;
    atomic_store(&r->up_flag, true);
    r->monitoring = pthread_create(&r->monitor, NULL,
                                   r->cluster ? link__cl_monitor_main : monitor_main, r) == 0;
    *out = r;
    return STORE_OK;
}
