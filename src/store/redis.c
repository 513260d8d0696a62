/*
 * redis.c: the Redis engine's operations (redis.h): each store call as one
 * HF3FS.* command of the module (docs/redis-module.md), its arguments and
 * answers in the encodings of src/module/wire.h; the connections, health
 * and figures are store/redis_conn.c's.
 */
#include "store/redis.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "module/wire.h"
#include "store/redis_conn.h"
#include "util/log.h"
#include "util/xalloc.h"

typedef struct store_redis {
    store_t base;
    core_config cfg;
    char cfgs[160]; /* wire_cfg_format(cfg) */
    size_t cfglen;
    bool has_clock;
    store_clock clock;
    redis_link *link;
} store_redis;

static store_redis *R(store_t *s)
{
    return (store_redis *)s;
}

/* ----------------------------------------------------------- arguments */

/* The arguments of one command, built in one growing arena (offsets, so
 * that growing it never leaves a pointer dangling). */
typedef struct args {
    int slot; /* the cluster slot of its key, or -1 */
    size_t n, cap;
    size_t *off, *len;
    const char **argv; /* filled by args_argv */
    char *buf;
    size_t used, bufcap;
} args;

static char *args_room(args *a, size_t len)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->off = hf_xreallocarray(a->off, a->cap, sizeof *a->off);
        a->len = hf_xreallocarray(a->len, a->cap, sizeof *a->len);
    }
    if (a->used + len > a->bufcap) {
        while (a->used + len > a->bufcap)
            a->bufcap = a->bufcap ? a->bufcap * 2 : 512;
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
    if (len)
        memcpy(args_room(a, len), p, len);
    else
        args_room(a, 0);
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

static void args_keys(args *a, const hf_slice *keys, size_t n)
{
    hf_buf b = {0};
    wire_keys_append(&b, keys, n);
    args_add(a, b.ptr, b.len);
    hf_buf_free(&b);
}

static void args_pages(args *a, const int64_t *v, size_t n)
{
    hf_buf b = {0};
    wire_i64_append(&b, v, n);
    args_add(a, b.ptr, b.len);
    hf_buf_free(&b);
}

static void args_free(args *a)
{
    free(a->off);
    free(a->len);
    free(a->argv);
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* CMD key: the namespace's value key (its slot routes the command). */
static void args_cmd(args *a, const char *cmd, hf_slice ns)
{
    memset(a, 0, sizeof *a);
    args_str(a, cmd);
    size_t klen = WIRE_VALUE_KEY_LEN(ns.len);
    char *k = args_room(a, klen);
    wire_value_key(ns, k, klen);
    a->slot = redis_link_slot(k, klen);
}

static int64_t now_of(const store_redis *r)
{
    return r->has_clock ? r->clock.now_ms(r->clock.ctx) : 0;
}

/* CMD key now cfg: what every operation on a namespace starts with. */
static void args_begin(store_redis *r, args *a, const char *cmd, hf_slice ns)
{
    args_cmd(a, cmd, ns);
    args_int(a, now_of(r));
    args_add(a, r->cfgs, r->cfglen);
}

static redis_cmd cmd_of(args *a)
{
    a->argv = hf_xreallocarray(a->argv, a->n ? a->n : 1, sizeof *a->argv);
    for (size_t i = 0; i < a->n; i++)
        a->argv[i] = a->buf + a->off[i];
    return (redis_cmd){.argc = (int)a->n, .argv = a->argv, .argvlen = a->len, .slot = a->slot,
                       .node = -1};
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
    static const char *const codes[] = {
        "BUSY",   "LOADING", "OOM",         "READONLY", "MASTERDOWN", "NOAUTH",
        "NOPERM", "MISCONF", "NOREPLICAS",  "CLUSTERDOWN", "TRYAGAIN", "MOVED",
        "ASK",    "CROSSSLOT", "WRONGTYPE", "ERR unknown command",
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (starts(rep, codes[i]))
            return true;
    return false;
}

/*
 * The code of a command's outcome: STORE_OK (*out keeps the reply, which is
 * not an error), or the code (reply freed): the link's (unavailable, outcome
 * unknown), the module's refusals (-ENOPOOL, -EINVAL), Redis's refusals
 * before running (-OOM, -LOADING...: unavailable), or any other error: the
 * module answers an error only for a call it did not run (a malformed
 * argument: a bug here), so nothing changed either.
 */
static int judge(store_redis *r, redis_cmd *c, redisReply **out)
{
    *out = NULL;
    if (c->code != STORE_OK)
        return c->code;
    redisReply *rep = c->reply;
    c->reply = NULL;
    if (rep->type != REDIS_REPLY_ERROR) {
        *out = rep;
        return STORE_OK;
    }
    int code = STORE_EUNAVAILABLE;
    if (starts(rep, "ENOPOOL")) {
        code = STORE_ENOPOOL;
    } else if (starts(rep, "EEXIST")) {
        code = STORE_EEXIST;
    } else if (starts(rep, "EINVAL")) {
        code = STORE_EINVAL;
    } else if (refused_before_running(rep)) {
        redis_link_count_error(r->link, false);
        log_msg(LOG_WARN, "Redis refused a call: %s", rep->str);
    } else {
        redis_link_count_error(r->link, false);
        log_msg(LOG_ERROR, "Redis answered an error: %s", rep->str);
    }
    freeReplyObject(rep);
    return code;
}

/* Run the command of a (freed): STORE_OK and *out (not an error reply), or
 * the code. */
static int call(store_redis *r, args *a, bool change, redisReply **out)
{
    redis_cmd c = cmd_of(a);
    redis_link_exec(r->link, &c, 1, change);
    int code = judge(r, &c, out);
    args_free(a);
    return code;
}

static int malformed(store_redis *r, redisReply *rep, const char *what)
{
    log_msg(LOG_ERROR, "Redis: malformed reply to %s (type %d)", what, rep ? rep->type : -1);
    redis_link_count_error(r->link, false);
    if (rep)
        freeReplyObject(rep);
    return STORE_EUNAVAILABLE;
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

static bool is_bulk(const redisReply *e, size_t len)
{
    return e->type == REDIS_REPLY_STRING && e->len == len;
}

static void decode_pages(const char *p, size_t n, int64_t *pages)
{
    for (size_t i = 0; i < n; i++)
        pages[i] = wire_i64_at(p, i);
}

static void decode_flags(const char *p, size_t n, bool *flags)
{
    for (size_t i = 0; i < n; i++)
        flags[i] = p[i] != 0;
}

/* ---------------------------------------------------------------- ops */

static int rd_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                        bool *created, uint64_t *existing_pages)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.INIT", ns);
    args_add(&a, ns.ptr, ns.len);
    args_int(&a, rank);
    args_int(&a, (int64_t)num_pages);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2)
        return malformed(r, rep, "HF3FS.INIT");
    if (created)
        *created = int_of(rep->element[0]) == 1;
    if (existing_pages)
        *existing_pages = (uint64_t)int_of(rep->element[1]);
    freeReplyObject(rep);
    return STORE_OK;
}

static int rd_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                       core_alloc_mode mode, int64_t *pages, bool *existed)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.ALLOC", ns);
    args_int(&a, rank);
    args_str(&a, mode == CORE_ALLOC_ALL_OR_NOTHING ? "1" : "0");
    args_keys(&a, keys, n);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        !is_bulk(rep->element[0], 8 * n) || !is_bulk(rep->element[1], n))
        return malformed(r, rep, "HF3FS.ALLOC");
    decode_pages(rep->element[0]->str, n, pages);
    if (existed)
        decode_flags(rep->element[1]->str, n, existed);
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
    args_begin(r, &a, "HF3FS.CONFIRM", ns);
    args_int(&a, rank);
    args_keys(&a, keys, n);
    args_pages(&a, pages, n);
    args_pages(&a, release, nrel);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->type != REDIS_REPLY_INTEGER)
        return malformed(r, rep, "HF3FS.CONFIRM");
    last_refused = (size_t)rep->integer;
    freeReplyObject(rep);
    return STORE_OK;
}

/* A read whose answer is one bulk string of `width` bytes per key: a flag
 * list (width 1, into present) or a page list (width 8, into pages). */
static int read_list(store_redis *r, args *a, const char *what, size_t n, bool *present,
                     int64_t *pages)
{
    redisReply *rep;
    int rc = call(r, a, false, &rep);
    if (rc != STORE_OK)
        return rc;
    if (!is_bulk(rep, (pages ? 8 : 1) * n))
        return malformed(r, rep, what);
    if (pages)
        decode_pages(rep->str, n, pages);
    else
        decode_flags(rep->str, n, present);
    freeReplyObject(rep);
    return STORE_OK;
}

static int rd_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     bool *present)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.EXISTS", ns);
    args_int(&a, rank);
    args_keys(&a, keys, n);
    return read_list(r, &a, "HF3FS.EXISTS", n, present, NULL);
}

static int rd_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     int64_t *pages)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.LOOKUP", ns);
    args_int(&a, rank);
    args_keys(&a, keys, n);
    return read_list(r, &a, "HF3FS.LOOKUP", n, NULL, pages);
}

static int rd_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                              bool *present)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.CEXISTS", ns);
    args_keys(&a, keys, n);
    return read_list(r, &a, "HF3FS.CEXISTS", n, present, NULL);
}

static int rd_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                 size_t n, int64_t *pages)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.CLOC", ns);
    args_int(&a, rank);
    args_keys(&a, keys, n);
    return read_list(r, &a, "HF3FS.CLOC", n, NULL, pages);
}

/* A change whose answer carries nothing more than success. */
static int call_change(store_redis *r, args *a)
{
    redisReply *rep;
    int rc = call(r, a, true, &rep);
    if (rc == STORE_OK)
        freeReplyObject(rep);
    return rc;
}

static int rd_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.DELETE", ns);
    args_int(&a, rank);
    args_keys(&a, keys, n);
    return call_change(r, &a);
}

static int rd_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.CLEARPOOL", ns);
    args_int(&a, rank);
    return call_change(r, &a);
}

/* The outcome of a command sent to every primary: STORE_OK if each one
 * answered without error (no primary at all: unavailable). */
static int judge_all(store_redis *r, redis_cmd *cmds, size_t n)
{
    int code = n ? STORE_OK : STORE_EUNAVAILABLE;
    for (size_t i = 0; i < n; i++) {
        redisReply *rep;
        int rc = judge(r, &cmds[i], &rep);
        if (rc == STORE_OK)
            cmds[i].reply = rep; /* given back to the command */
        else if (code == STORE_OK || rc == STORE_EUNCERTAIN)
            code = rc == STORE_ENOPOOL || rc == STORE_EINVAL ? STORE_EUNAVAILABLE : rc;
    }
    return code;
}

static int rd_clear_all(store_t *s)
{
    store_redis *r = R(s);
    const char *argv[1] = {"HF3FS.CLEARALL"};
    size_t lens[1] = {14};
    size_t n;
    redis_cmd *cmds = redis_link_on_primaries(r->link, 1, argv, lens, true, &n);
    int code = judge_all(r, cmds, n);
    redis_cmds_free(cmds, n);
    return code;
}

/* A namespace some node holds. */
typedef struct ns_name {
    char *p;
    size_t len;
} ns_name;

static int ns_cmp(const void *x, const void *y)
{
    const ns_name *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->p, b->p, n) : 0;
    return c ? c : a->len < b->len ? -1 : a->len > b->len;
}

static void names_free(ns_name *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].p);
    free(v);
}

/* Every namespace that a node holds (HF3FS.NAMESPACES on every primary),
 * in byte order, each once. STORE_OK and *out (names_free) or a code. */
static int namespaces(store_redis *r, ns_name **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    const char *argv[1] = {"HF3FS.NAMESPACES"};
    size_t lens[1] = {16};
    size_t n;
    redis_cmd *cmds = redis_link_on_primaries(r->link, 1, argv, lens, false, &n);
    int code = judge_all(r, cmds, n);
    size_t total = 0;
    for (size_t i = 0; code == STORE_OK && i < n; i++) {
        if (cmds[i].reply->type != REDIS_REPLY_ARRAY)
            code = malformed(r, NULL, "HF3FS.NAMESPACES");
        else
            total += cmds[i].reply->elements;
    }
    ns_name *v = NULL;
    size_t m = 0;
    if (code == STORE_OK) {
        v = hf_xcalloc(total ? total : 1, sizeof *v);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < cmds[i].reply->elements; j++) {
                const redisReply *e = cmds[i].reply->element[j];
                if (e->type != REDIS_REPLY_STRING)
                    continue;
                v[m].p = hf_xmalloc(e->len + 1);
                memcpy(v[m].p, e->str, e->len);
                v[m].len = e->len;
                m++;
            }
        qsort(v, m, sizeof *v, ns_cmp);
        size_t k = 0; /* a value met twice (a slot moving): once */
        for (size_t i = 0; i < m; i++) {
            if (k > 0 && ns_cmp(&v[k - 1], &v[i]) == 0) {
                free(v[i].p);
                continue;
            }
            v[k++] = v[i];
        }
        m = k;
    }
    redis_cmds_free(cmds, n);
    if (code != STORE_OK)
        return code;
    *out = v;
    *nout = m;
    return STORE_OK;
}

/* One command per namespace (HF3FS.STATS key now, HF3FS.CHECK key), all at
 * once; cmds[i] and as[i] per namespace (the caller frees both). */
static void per_namespace(store_redis *r, const char *cmd, bool with_now, const ns_name *v,
                          size_t n, args **as_out, redis_cmd **cmds_out)
{
    args *as = hf_xcalloc(n ? n : 1, sizeof *as);
    redis_cmd *cmds = hf_xcalloc(n ? n : 1, sizeof *cmds);
    for (size_t i = 0; i < n; i++) {
        args_cmd(&as[i], cmd, (hf_slice){v[i].p, v[i].len});
        if (with_now)
            args_int(&as[i], now_of(r));
        cmds[i] = cmd_of(&as[i]);
    }
    redis_link_exec(r->link, cmds, n, false);
    *as_out = as;
    *cmds_out = cmds;
}

static void per_namespace_free(args *as, redis_cmd *cmds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        args_free(&as[i]);
    free(as);
    redis_cmds_free(cmds, n);
}

enum { STATS_FIELDS = 19 + 2 * CORE_REFUSE_COUNT };

/* One pool's row of HF3FS.STATS; -1 if malformed. */
static int stats_row(const redisReply *row, uint32_t *rank, core_pool_stats *st)
{
    if (row->type != REDIS_REPLY_ARRAY || row->elements != STATS_FIELDS)
        return -1;
    int64_t v[STATS_FIELDS];
    for (size_t j = 0; j < STATS_FIELDS; j++) {
        if (row->element[j]->type != REDIS_REPLY_INTEGER)
            return -1;
        v[j] = row->element[j]->integer;
    }
    *rank = (uint32_t)v[0];
    uint64_t *dst[] = {
        &st->num_pages,    &st->free,          &st->reserved,
        &st->owned,        &st->draining,      &st->write_leased,
        &st->touched,      &st->hits,          &st->misses,
        &st->reservations, &st->confirmations, &st->releases,
        &st->evictions,    &st->expired_reservations, &st->duplicate_confirmations,
        &st->write_leases, &st->write_leases_ended,   &st->write_leases_expired,
    };
    size_t k = 1;
    for (size_t j = 0; j < sizeof dst / sizeof dst[0]; j++)
        *dst[j] = (uint64_t)v[k++];
    for (int j = 0; j < CORE_REFUSE_COUNT; j++)
        st->refused_confirms[j] = (uint64_t)v[k++];
    for (int j = 0; j < CORE_REFUSE_COUNT; j++)
        st->refused_releases[j] = (uint64_t)v[k++];
    return 0;
}

typedef struct stat_row {
    uint32_t rank;
    const redisReply *row;
} stat_row;

static int row_cmp(const void *x, const void *y)
{
    const stat_row *a = x, *b = y;
    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* Every pool's figures: by namespace (byte order), then rank. A namespace
 * that went away meanwhile (a clear) has no pools. */
static int rd_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    store_redis *r = R(s);
    ns_name *v;
    size_t n;
    int code = namespaces(r, &v, &n);
    if (code != STORE_OK)
        return code;
    args *as;
    redis_cmd *cmds;
    per_namespace(r, "HF3FS.STATS", true, v, n, &as, &cmds);
    redisReply **reps = hf_xcalloc(n ? n : 1, sizeof *reps);
    for (size_t i = 0; i < n; i++) {
        int rc = judge(r, &cmds[i], &reps[i]);
        if (rc != STORE_OK && rc != STORE_ENOPOOL && code == STORE_OK)
            code = rc == STORE_EINVAL ? STORE_EUNAVAILABLE : rc;
        if (rc == STORE_OK && reps[i]->type != REDIS_REPLY_ARRAY && code == STORE_OK)
            code = malformed(r, NULL, "HF3FS.STATS");
    }
    for (size_t i = 0; code == STORE_OK && i < n; i++) {
        if (!reps[i])
            continue;
        size_t m = reps[i]->elements;
        stat_row *rows = hf_xcalloc(m ? m : 1, sizeof *rows);
        core_pool_stats st;
        for (size_t j = 0; j < m && code == STORE_OK; j++) {
            rows[j].row = reps[i]->element[j];
            if (stats_row(rows[j].row, &rows[j].rank, &st) != 0)
                code = malformed(r, NULL, "HF3FS.STATS");
        }
        if (code == STORE_OK) {
            qsort(rows, m, sizeof *rows, row_cmp);
            for (size_t j = 0; j < m; j++) {
                memset(&st, 0, sizeof st);
                stats_row(rows[j].row, &rows[j].rank, &st);
                fn(ctx, (hf_slice){v[i].p, v[i].len}, rows[j].rank, &st);
            }
        }
        free(rows);
    }
    for (size_t i = 0; i < n; i++)
        if (reps[i])
            freeReplyObject(reps[i]);
    free(reps);
    per_namespace_free(as, cmds, n);
    names_free(v, n);
    return code;
}

/* 0, or -1 with what is wrong (the first namespace whose check fails), or
 * STORE_EUNAVAILABLE / STORE_EUNCERTAIN when Redis could not be asked. */
static int rd_check(store_t *s, char *err, size_t errlen)
{
    store_redis *r = R(s);
    ns_name *v;
    size_t n;
    int code = namespaces(r, &v, &n);
    if (code != STORE_OK) {
        snprintf(err, errlen, "Redis: %s", store_describe(s, code));
        return STORE_EUNAVAILABLE;
    }
    args *as;
    redis_cmd *cmds;
    per_namespace(r, "HF3FS.CHECK", false, v, n, &as, &cmds);
    int bad = 0;
    for (size_t i = 0; i < n && bad == 0; i++) {
        redis_cmd *c = &cmds[i];
        if (c->code != STORE_OK) {
            snprintf(err, errlen, "Redis: %s", store_describe(s, c->code));
            bad = STORE_EUNAVAILABLE;
        } else if (c->reply->type == REDIS_REPLY_ERROR && !starts(c->reply, "ENOPOOL")) {
            if (refused_before_running(c->reply)) {
                snprintf(err, errlen, "Redis refused the check: %s", c->reply->str);
                bad = STORE_EUNAVAILABLE;
            } else {
                snprintf(err, errlen, "namespace '%.*s': %s", (int)(v[i].len > 100 ? 100 : v[i].len),
                         v[i].p, c->reply->str);
                bad = -1;
            }
        }
    }
    per_namespace_free(as, cmds, n);
    names_free(v, n);
    return bad;
}

int store_redis_pages(store_t *s, hf_slice ns, uint32_t rank, store_redis_page *pages,
                      size_t npages)
{
    store_redis *r = R(s);
    args a;
    args_cmd(&a, "HF3FS.PAGES", ns);
    args_int(&a, now_of(r));
    args_int(&a, rank);
    args_int(&a, 0);
    args_int(&a, (int64_t)npages);
    redisReply *rep;
    int rc = call(r, &a, false, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->type != REDIS_REPLY_ARRAY)
        return malformed(r, rep, "HF3FS.PAGES");
    for (size_t i = 0; i < npages; i++) {
        store_redis_page *p = &pages[i];
        memset(p, 0, sizeof *p);
        if (i >= rep->elements)
            continue;
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 3)
            return malformed(r, rep, "HF3FS.PAGES");
        p->state = (int)int_of(e->element[0]);
        p->deadline = int_of(e->element[1]);
        if (e->element[2]->type == REDIS_REPLY_STRING) {
            p->key_len = e->element[2]->len < sizeof p->key - 1 ? e->element[2]->len
                                                                : sizeof p->key - 1;
            memcpy(p->key, e->element[2]->str, p->key_len);
        }
        p->key[p->key_len] = '\0';
    }
    freeReplyObject(rep);
    return STORE_OK;
}

/* ------------------------------------------------------ the rest of ops */

static int rd_health(store_t *s, char *reason, size_t len)
{
    return redis_link_health(R(s)->link, reason, len);
}

static int rd_metrics(store_t *s, const store_emitter *e)
{
    redis_link_metrics(R(s)->link, e);
    return STORE_OK;
}

static void rd_destroy(store_t *s)
{
    store_redis *r = R(s);
    redis_link_close(r->link);
    free(r);
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

/* HF3FS.IMPORT key now cfg ns rank num_pages keys pages: the whole pool in
 * one command (the module runs import_pool_build). */
static int rd_import_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                          const hf_slice *keys, const int64_t *pages, size_t n)
{
    store_redis *r = R(s);
    args a;
    args_begin(r, &a, "HF3FS.IMPORT", ns);
    args_add(&a, ns.ptr, ns.len);
    args_int(&a, rank);
    args_int(&a, (int64_t)num_pages);
    args_keys(&a, keys, n);
    args_pages(&a, pages, n);
    redisReply *rep;
    int rc = call(r, &a, true, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->type != REDIS_REPLY_INTEGER)
        return malformed(r, rep, "HF3FS.IMPORT");
    freeReplyObject(rep);
    return STORE_OK;
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
    .import_pool = rd_import_pool,
};

/* ------------------------------------------------------------ the module */

/* The value of field `name` in one module's entry of MODULE LIST (a flat
 * list of names and values), or NULL. */
static const redisReply *module_field(const redisReply *m, const char *name)
{
    if (m->type != REDIS_REPLY_ARRAY)
        return NULL;
    size_t n = strlen(name);
    for (size_t i = 0; i + 1 < m->elements; i += 2) {
        const redisReply *k = m->element[i];
        if ((k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) && k->len == n &&
            memcmp(k->str, name, n) == 0)
            return m->element[i + 1];
    }
    return NULL;
}

#define LOAD_HOWTO                                                                             \
    "start it with `redis-server --loadmodule /path/to/hf3fs_metad_redis.so` or add "          \
    "`loadmodule /path/to/hf3fs_metad_redis.so` to redis.conf (the .so is built by `make` "     \
    "next to hf3fs-metad)"

/* The probe's checker (redis_conn.h): MODULE LIST shows the module, of
 * exactly this front end's version. */
static int module_check(const redisReply *rep, const char *addr, char *err, size_t errlen)
{
    if (rep->type == REDIS_REPLY_ERROR) {
        bool perm = strncmp(rep->str, "NOPERM", 6) == 0 || strncmp(rep->str, "NOAUTH", 6) == 0;
        snprintf(err, errlen, "Redis at %s: MODULE LIST: %s%s", addr, rep->str,
                 perm ? " (the user must be allowed MODULE LIST: the front end checks the "
                        "hf3fs-metad module with it)"
                      : "");
        return perm ? STORE_EAUTH : STORE_EUNAVAILABLE;
    }
    if (rep->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "Redis at %s: MODULE LIST: unexpected reply", addr);
        return STORE_EUNAVAILABLE;
    }
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *name = module_field(rep->element[i], "name");
        if (!name || name->type != REDIS_REPLY_STRING ||
            name->len != strlen(HF3FS_MODULE_NAME) ||
            memcmp(name->str, HF3FS_MODULE_NAME, name->len) != 0)
            continue;
        const redisReply *ver = module_field(rep->element[i], "ver");
        long long v = ver ? int_of(ver) : -1;
        if (v == HF3FS_MODULE_VERSION)
            return STORE_OK;
        snprintf(err, errlen,
                 "Redis at %s has the hf3fs-metad module (%s) of version %lld loaded, and this "
                 "front end needs version %d: load the hf3fs_metad_redis.so built with this "
                 "hf3fs-metad (%s)",
                 addr, HF3FS_MODULE_NAME, v, HF3FS_MODULE_VERSION, LOAD_HOWTO);
        return STORE_ENOMODULE;
    }
    snprintf(err, errlen,
             "Redis at %s has not loaded the hf3fs-metad module (%s version %d): %s", addr,
             HF3FS_MODULE_NAME, HF3FS_MODULE_VERSION, LOAD_HOWTO);
    return STORE_ENOMODULE;
}

int store_redis_open(const core_config *config, const store_redis_options *options,
                     store_t **out, char *err, size_t errlen)
{
    store_redis *r = hf_xcalloc(1, sizeof *r);
    r->base.ops = &redis_ops;
    r->cfg = *config;
    if (r->cfg.max_pages == 0 || r->cfg.max_pages > CORE_MAX_PAGES_LIMIT)
        r->cfg.max_pages = CORE_MAX_PAGES_LIMIT;
    r->cfglen = wire_cfg_format(&r->cfg, r->cfgs, sizeof r->cfgs);
    if (options->clock) {
        r->has_clock = true;
        r->clock = *options->clock;
    }
    redis_link_options lo = {
        .url = options->url,
        .password = options->password,
        .connect_timeout_ms = options->connect_timeout_ms > 0 ? options->connect_timeout_ms : 1000,
        .command_timeout_ms = options->command_timeout_ms > 0 ? options->command_timeout_ms : 2000,
        .wait_replicas = options->wait_replicas,
        .probe_argc = 2,
        .probe_argv = {"MODULE", "LIST"},
        .probe_check = module_check,
    };
    lo.wait_timeout_ms = options->wait_timeout_ms > 0 ? options->wait_timeout_ms
                                                      : lo.command_timeout_ms;
    int rc = redis_link_open(&lo, &r->link, err, errlen);
    if (rc != STORE_OK) {
        free(r);
        return rc;
    }
    *out = &r->base;
    return STORE_OK;
}
