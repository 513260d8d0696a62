/*
 * sentinel.c: redis-sentinel:// (link.h "Redis Sentinel"): the sentinels
 * of the URL, asked in turn for the primary's address; the primary the
 * link follows, which its connections read; ROLE, which a named primary
 * must answer "master" to before it is used.
 *
 * The sentinels are asked by open and by the monitor thread only (one at a
 * time: the monitor starts after open), so the sentinel connection and the
 * order of asking need no lock; the primary's address is read by every
 * thread that opens a connection, under addr_lock.
 */
#include "store/redis/link_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fiber.h"
#include "util/hf_assert.h"
#include "util/hostport.h"
#include "util/log.h"
#include "util/xalloc.h"

#define SENTINEL_DEFAULT_PORT 26379

static struct timeval tv_ms(int64_t ms)
{
    return (struct timeval){.tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000};
}

int link__sentinel_parse(redis_link *r, const char *p, const char *url, char *err, size_t errlen)
{
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || !slash[1] || slash[1] == '/') {
        snprintf(err, errlen,
                 "--store %s: a Sentinel address is "
                 "redis-sentinel://[user:password@]host:port[,host:port...]/PRIMARYNAME[/db]",
                 url);
        return STORE_ECONFIG;
    }
    const char *name = slash + 1, *name_end = name + strcspn(name, "/");
    if (link__parse_db(r, name_end, url, err, errlen) != STORE_OK)
        return STORE_ECONFIG;
    size_t n = 1;
    for (const char *q = p; q < slash; q++)
        n += *q == ',';
    r->sentinels = hf_xcalloc(n, sizeof *r->sentinels);
    for (const char *q = p; q < slash;) {
        const char *end = memchr(q, ',', (size_t)(slash - q));
        if (!end)
            end = slash;
        hf_hostport hp;
        int rc = hf_hostport_parse(q, (size_t)(end - q), 0, &hp);
        if (rc != HF_HOSTPORT_OK || hp.host_len >= sizeof r->sentinels[0].host) {
            snprintf(err, errlen, "--store %s: sentinel %.*s: %s", url, (int)(end - q), q,
                     rc != HF_HOSTPORT_OK ? hf_hostport_strerror(rc) : "the host is too long");
            return STORE_ECONFIG;
        }
        link_sentinel *s = &r->sentinels[r->nsentinels++];
        memcpy(s->host, hp.host, hp.host_len);
        s->host[hp.host_len] = '\0';
        s->port = hp.port ? hp.port : SENTINEL_DEFAULT_PORT;
        q = end < slash ? end + 1 : slash;
    }
    HF_ASSERT(r->nsentinels > 0 && r->nsentinels <= n);
    r->master_name = link__dup_n(name, (size_t)(name_end - name));
    r->sentinel = true;
    return STORE_OK;
}

/* AUTH on a sentinel with the link's credentials; a sentinel without a
 * password says so, which is no refusal. NULL or why it refused. */
static const char *sentinel_auth(redis_link *r, redisContext *c, char *buf, size_t len)
{
    if (!r->password)
        return NULL;
    redisReply *rep = r->user ? redisCommand(c, "AUTH %s %s", r->user, r->password)
                              : redisCommand(c, "AUTH %s", r->password);
    const char *why = NULL;
    if (!rep) {
        snprintf(buf, len, "%.150s", c->errstr);
        why = buf;
    } else if (rep->type == REDIS_REPLY_ERROR && !strstr(rep->str, "without any password") &&
               !strstr(rep->str, "no password is set")) {
        snprintf(buf, len, "refused the credentials: %.150s", rep->str);
        why = buf;
    }
    if (rep)
        freeReplyObject(rep);
    return why;
}

/* SENTINEL GET-MASTER-ADDR-BY-NAME on sentinel i (its kept connection, or
 * a new one): STORE_OK and the address, else why (err). */
static int ask_one(redis_link *r, size_t i, char *host, size_t hostlen, int *port, char *err,
                   size_t errlen)
{
    const link_sentinel *s = &r->sentinels[i];
    redisContext *c = r->sentinel_ctx;
    if (c && r->sentinel_ctx_of != i) {
        redisFree(c);
        c = r->sentinel_ctx = NULL;
    }
    if (!c) {
        c = redisConnectWithTimeout(s->host, s->port, tv_ms(r->opt.connect_timeout_ms));
        if (!c || c->err) {
            snprintf(err, errlen, "sentinel %.100s:%d: cannot connect: %.100s", s->host, s->port,
                     c ? c->errstr : "out of memory");
            if (c)
                redisFree(c);
            return STORE_EUNREACHABLE;
        }
        redisSetTimeout(c, tv_ms(r->opt.command_timeout_ms));
        char buf[256];
        const char *why = sentinel_auth(r, c, buf, sizeof buf);
        if (why) {
            snprintf(err, errlen, "sentinel %.100s:%d: %.150s", s->host, s->port, why);
            redisFree(c);
            return STORE_EUNREACHABLE;
        }
    }
    redisReply *rep = redisCommand(c, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", r->master_name);
    int rc = STORE_EUNREACHABLE;
    if (!rep) {
        snprintf(err, errlen, "sentinel %.100s:%d: %.150s", s->host, s->port,
                 c->errstr[0] ? c->errstr : "I/O error");
    } else if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "sentinel %.100s:%d: %.150s", s->host, s->port, rep->str);
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
               rep->element[0]->type != REDIS_REPLY_STRING ||
               rep->element[1]->type != REDIS_REPLY_STRING) {
        snprintf(err, errlen, "sentinel %.100s:%d monitors no primary named %.100s", s->host,
                 s->port, r->master_name);
    } else {
        long p = strtol(rep->element[1]->str, NULL, 10);
        if (p <= 0 || p > 65535 || rep->element[0]->len >= hostlen) {
            snprintf(err, errlen, "sentinel %.100s:%d named a malformed address", s->host, s->port);
        } else {
            memcpy(host, rep->element[0]->str, rep->element[0]->len);
            host[rep->element[0]->len] = '\0';
            *port = (int)p;
            rc = STORE_OK;
        }
    }
    /* a sentinel that answered (an address or none) keeps its connection */
    bool keep = rep && rep->type != REDIS_REPLY_ERROR;
    if (rep)
        freeReplyObject(rep);
    if (keep) {
        r->sentinel_ctx = c; /* it answered: kept, and asked first next time */
        r->sentinel_ctx_of = i;
    } else {
        redisFree(c);
        r->sentinel_ctx = NULL;
    }
    return rc;
}

int link__sentinel_ask(redis_link *r, char *host, size_t hostlen, int *port, char *err,
                       size_t errlen)
{
    HF_ASSERT(r->sentinel && r->nsentinels > 0);
    atomic_fetch_add(&r->sentinel_asks, 1);
    size_t used = 0;
    if (errlen)
        err[0] = '\0';
    for (size_t k = 0; k < r->nsentinels; k++) {
        size_t i = (r->sentinel_first + k) % r->nsentinels;
        char why[300];
        if (ask_one(r, i, host, hostlen, port, why, sizeof why) == STORE_OK) {
            r->sentinel_first = i;
            return STORE_OK;
        }
        if (used < errlen) {
            int w = snprintf(err + used, errlen - used, "%s%s", used ? "; " : "", why);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (errlen && used == 0)
        snprintf(err, errlen, "no sentinel answered");
    return STORE_EUNREACHABLE;
}

bool link__sentinel_follow(redis_link *r, const char *host, int port)
{
    hf_mutex_lock(&r->addr_lock);
    bool moved = strcmp(r->primary_host, host) != 0 || r->primary_port != port;
    char was[300];
    snprintf(was, sizeof was, "%s:%d", r->primary_host, r->primary_port);
    bool first = r->primary_host[0] == '\0';
    if (moved) {
        snprintf(r->primary_host, sizeof r->primary_host, "%s", host);
        r->primary_port = port;
    }
    hf_mutex_unlock(&r->addr_lock);
    if (moved && first)
        log_msg(LOG_INFO, "the sentinels name %s:%d the primary of %s", host, port, r->master_name);
    else if (moved)
        log_msg(LOG_WARN, "the sentinels name %s:%d the primary of %s (it was %s): following it",
                host, port, r->master_name, was);
    return moved && !first;
}

void link__sentinel_primary(redis_link *r, char *host, size_t hostlen, int *port)
{
    hf_mutex_lock(&r->addr_lock);
    snprintf(host, hostlen, "%s", r->primary_host);
    *port = r->primary_port;
    hf_mutex_unlock(&r->addr_lock);
}

int link__sentinel_role(redis_link *r, redisContext *c, const char *addr, char *err, size_t errlen)
{
    redisReply *rep = redisCommand(c, "ROLE");
    int rc = STORE_OK;
    if (!rep) {
        snprintf(err, errlen, "Redis at %s: ROLE: %s", addr,
                 c->errstr[0] ? c->errstr : "I/O error");
        rc = STORE_EUNREACHABLE;
    } else if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 1 ||
               rep->element[0]->type != REDIS_REPLY_STRING ||
               strcmp(rep->element[0]->str, "master") != 0) {
        const char *role = rep->type == REDIS_REPLY_ERROR ? rep->str
                           : rep->type == REDIS_REPLY_ARRAY && rep->elements &&
                                   rep->element[0]->type == REDIS_REPLY_STRING
                               ? rep->element[0]->str
                               : "unexpected reply";
        snprintf(err, errlen,
                 "Redis at %s, which the sentinels name the primary of %s, is not a primary "
                 "(ROLE: %.100s): a failover is under way",
                 addr, r->master_name, role);
        rc = STORE_EUNREACHABLE;
    }
    if (rep)
        freeReplyObject(rep);
    return rc;
}

void link__sentinel_free(redis_link *r)
{
    if (r->sentinel_ctx)
        redisFree(r->sentinel_ctx);
    free(r->sentinels);
    free(r->master_name);
}
