/*
 * redis.c: the Redis engine's operations (redis.h): each store call as one
 * HF3FS.* command of the module (docs/redis-module.md), its arguments and
 * answers in the encodings of src/wire/wire.h; the connections, health
 * and figures are store/redis_conn.c's.
 */
#include "store/redis.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/redis_conn.h"
#include "util/fmt.h"
#include "util/log.h"
#include "util/xalloc.h"
#include "wire/wire.h"

typedef struct store_redis {
    store_t base;
    core_config cfg;
    char cfgs[160]; /* wire_cfg_format(cfg) */
    size_t cfglen;
    bool has_clock;
    store_clock clock;
    redis_link *link;
    uint32_t stripes;          /* of the namespaces it creates (options.stripes; 0: stripes_for) */
    pthread_mutex_t lock;      /* layouts, retired */
    struct layout *layouts;    /* every namespace's, once known */
    struct layout *retired;    /* stale ones, freed at destroy */
    struct prefix_row *prefix; /* this front end's prefix counters (under lock) */
} store_redis;

/* Outcomes of a call beside the STORE_* codes, never returned by an op. */
enum {
    RESTRIPE = -100,     /* a stripe says the layout is stale (-ESTRIPES) */
    NO_NAMESPACE = -299, /* the namespace has no value (the end of the store's range) */
};

static store_redis *R(store_t *s)
{
    return (store_redis *)s;
}

/* ----------------------------------------------------------- arguments */

/* The arguments of one command, built in one growing arena (offsets, so
 * that growing it never leaves a pointer dangling). off, len and argv share
 * one allocation of cap entries each: a command takes two allocations (that
 * and buf), whatever its arguments (an hf_grow of each array cost 23K more
 * instructions per 128-key read at 16 stripes, 206K against 183K). */
typedef struct args {
    int slot; /* the cluster slot of its key, or -1 */
    size_t n, cap;
    size_t *off, *len;
    const char **argv; /* filled by cmd_of */
    char *buf;
    size_t used, bufcap;
} args;

enum { ARGS_FIRST = 8, ARGS_FIRST_BYTES = 2048 };

static char *args_room(args *a, size_t len)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : ARGS_FIRST, old = a->cap;
        size_t entry = 2 * sizeof(size_t) + sizeof(const char *);
        char *block = hf_xreallocarray(a->off, cap, entry);
        /* len moves up from old to cap entries after off (argv is filled
         * later, by cmd_of) */
        memmove(block + cap * sizeof(size_t), block + old * sizeof(size_t), a->n * sizeof(size_t));
        a->off = (size_t *)(void *)block;
        a->len = (size_t *)(void *)(block + cap * sizeof(size_t));
        a->argv = (const char **)(void *)(block + 2 * cap * sizeof(size_t));
        a->cap = cap;
    }
    if (a->used + len > a->bufcap) {
        while (a->used + len > a->bufcap)
            a->bufcap = a->bufcap ? a->bufcap * 2 : ARGS_FIRST_BYTES;
        a->buf = hf_xrealloc(a->buf, a->bufcap);
    }
    a->off[a->n] = a->used;
    a->len[a->n] = len;
    a->n++;
    a->used += len;
    return a->buf + a->used - len;
}

/* The last argument is `len` bytes long (at most what args_room gave it). */
static void args_trim(args *a, size_t len)
{
    a->used -= a->len[a->n - 1] - len;
    a->len[a->n - 1] = len;
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
    char tmp[1 + HF_UINT_DIGITS], *p = tmp;
    if (v < 0)
        *p++ = '-';
    p = hf_put_uint(p, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    args_add(a, tmp, (size_t)(p - tmp));
}

static void args_keys(args *a, const hf_slice *keys, size_t n)
{
    wire_keys_put(args_room(a, wire_keys_len(keys, n)), keys, n);
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
    free(a->off); /* with len and argv */
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* CMD key: a value's key (its slot routes the command). */
static void args_cmd_key(args *a, const char *cmd, const char *key, size_t klen, int slot)
{
    memset(a, 0, sizeof *a);
    args_str(a, cmd);
    args_add(a, key, klen);
    a->slot = slot;
}

/* CMD key for the anchor (stripe 0) of ns. */
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

static redis_cmd cmd_of(args *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->argv[i] = a->buf + a->off[i];
    return (redis_cmd){
        .argc = (int)a->n, .argv = a->argv, .argvlen = a->len, .slot = a->slot, .node = -1};
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
        "BUSY",       "LOADING",     "OOM",       "READONLY",
        "MASTERDOWN", "NOAUTH",      "NOPERM",    "MISCONF",
        "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN",  "MOVED",
        "ASK",        "CROSSSLOT",   "WRONGTYPE", "ERR unknown command",
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
    } else if (starts(rep, "ESTRIPES")) {
        code = RESTRIPE;
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

/* ------------------------------------------------------------- stripes */

/*
 * Where a namespace's values are (wire.h "Stripes"): its stripe count, as
 * its anchor records it, and each stripe's key and slot. Cached per
 * namespace once asked (HF3FS.STRIPES on the anchor) or created; a cached
 * layout never changes: a stale one (the namespace cleared and created
 * again with another count by another front end) is replaced, and kept
 * until destroy, since a call may still be using it.
 */
typedef struct layout {
    struct layout *next;
    char *ns;
    size_t nslen;
    uint32_t count;
    char **key;
    size_t *keylen;
    int *slot;
} layout;

static layout *layout_new(hf_slice ns, uint32_t count)
{
    layout *L = hf_xcalloc(1, sizeof *L);
    L->ns = hf_xmalloc(ns.len + 1);
    if (ns.len)
        memcpy(L->ns, ns.ptr, ns.len);
    L->nslen = ns.len;
    L->count = count;
    L->key = hf_xcalloc(count, sizeof *L->key);
    L->keylen = hf_xcalloc(count, sizeof *L->keylen);
    L->slot = hf_xcalloc(count, sizeof *L->slot);
    size_t cap = WIRE_STRIPE_KEY_MAX(ns.len);
    for (uint32_t i = 0; i < count; i++) {
        L->key[i] = hf_xmalloc(cap);
        L->keylen[i] = wire_stripe_key(ns, (wire_stripe){count, i}, L->key[i], cap);
        L->slot[i] = redis_link_slot(L->key[i], L->keylen[i]);
    }
    return L;
}

static void layouts_free(layout *L)
{
    while (L) {
        layout *next = L->next;
        for (uint32_t i = 0; i < L->count; i++)
            free(L->key[i]);
        free(L->key);
        free(L->keylen);
        free(L->slot);
        free(L->ns);
        free(L);
        L = next;
    }
}

static bool layout_is(const layout *L, hf_slice ns)
{
    return L->nslen == ns.len && (ns.len == 0 || memcmp(L->ns, ns.ptr, ns.len) == 0);
}

static const layout *layout_cached(store_redis *r, hf_slice ns)
{
    pthread_mutex_lock(&r->lock);
    layout *L = r->layouts;
    while (L && !layout_is(L, ns))
        L = L->next;
    pthread_mutex_unlock(&r->lock);
    return L;
}

/* Cache ns as a namespace of `count` stripes (the anchor's word). */
static const layout *layout_put(store_redis *r, hf_slice ns, uint32_t count)
{
    pthread_mutex_lock(&r->lock);
    layout **at = &r->layouts;
    while (*at && !layout_is(*at, ns))
        at = &(*at)->next;
    layout *L = *at;
    if (L && L->count == count) {
        pthread_mutex_unlock(&r->lock);
        return L;
    }
    if (L) { /* stale: retired, not freed */
        *at = L->next;
        L->next = r->retired;
        r->retired = L;
    }
    L = layout_new(ns, count);
    L->next = r->layouts;
    r->layouts = L;
    pthread_mutex_unlock(&r->lock);
    if (r->stripes && count != r->stripes)
        log_msg(LOG_WARN,
                "namespace '%.*s' has %" PRIu32 " stripe(s), recorded when it was created: "
                "this front end uses them (its --stripes %" PRIu32 " applies to the namespaces "
                "it creates)",
                (int)(ns.len > 100 ? 100 : ns.len), ns.ptr, count, r->stripes);
    return L;
}

/* Forget every cached layout (after a clear of everything). */
static void layouts_forget(store_redis *r)
{
    pthread_mutex_lock(&r->lock);
    while (r->layouts) {
        layout *L = r->layouts;
        r->layouts = L->next;
        L->next = r->retired;
        r->retired = L;
    }
    pthread_mutex_unlock(&r->lock);
}

/* The stripe count ns's anchor records (0: no anchor, so no namespace). */
static int ask_stripes(store_redis *r, hf_slice ns, uint32_t *count)
{
    args a;
    args_cmd(&a, "HF3FS.STRIPES", ns);
    redisReply *rep;
    int rc = call(r, &a, false, &rep);
    if (rc != STORE_OK)
        return rc;
    if (rep->type != REDIS_REPLY_INTEGER || rep->integer < 0 || rep->integer > WIRE_MAX_STRIPES)
        return malformed(r, rep, "HF3FS.STRIPES");
    *count = (uint32_t)rep->integer;
    freeReplyObject(rep);
    return STORE_OK;
}

/* The layout of ns, cached or (fresh, or not cached) asked: STORE_OK and
 * *out (NULL: the namespace has no value), or a code. */
static int layout_of(store_redis *r, hf_slice ns, bool fresh, const layout **out)
{
    *out = fresh ? NULL : layout_cached(r, ns);
    if (*out)
        return STORE_OK;
    uint32_t count;
    int rc = ask_stripes(r, ns, &count);
    if (rc == STORE_OK && count)
        *out = layout_put(r, ns, count);
    return rc;
}

/* A call's keys grouped by stripe: stripe i's are pos/keys[start[i] ..
 * start[i + 1]), pos[j] their places in the call, in the call's order. */
typedef struct split {
    size_t *start; /* count + 1 */
    size_t *pos;
    hf_slice *keys;
} split;

/* Group keys[0..n) by of[i] (count groups), keeping the call's order in each. */
static void split_by(split *sp, uint32_t count, const hf_slice *keys, size_t n, const uint32_t *of)
{
    sp->start = hf_xcalloc((size_t)count + 1, sizeof *sp->start);
    sp->pos = hf_xmalloc((n ? n : 1) * sizeof *sp->pos);
    sp->keys = hf_xmalloc((n ? n : 1) * sizeof *sp->keys);
    for (size_t i = 0; i < n; i++)
        sp->start[of[i] + 1]++;
    for (uint32_t i = 0; i < count; i++)
        sp->start[i + 1] += sp->start[i];
    size_t *fill = hf_xmalloc((size_t)count * sizeof *fill);
    memcpy(fill, sp->start, (size_t)count * sizeof *fill);
    for (size_t i = 0; i < n; i++) {
        size_t j = fill[of[i]]++;
        sp->pos[j] = i;
        sp->keys[j] = keys[i];
    }
    free(fill);
}

/* By the keys' stripes. */
static void split_keys(split *sp, uint32_t count, const hf_slice *keys, size_t n)
{
    uint32_t *of = hf_xcalloc(n ? n : 1, sizeof *of);
    if (count > 1)
        wire_stripes_of(keys, n, count, of);
    split_by(sp, count, keys, n, of);
    free(of);
}

/* Confirmations, by the stripe of their pages (confirm_stripe). */
static uint32_t confirm_stripe(hf_slice key, int64_t page, uint32_t count);

static void split_confirm(split *sp, uint32_t count, const hf_slice *keys, const int64_t *pages,
                          size_t n)
{
    uint32_t *of = hf_xcalloc(n ? n : 1, sizeof *of);
    for (size_t i = 0; count > 1 && i < n; i++)
        of[i] = confirm_stripe(keys[i], pages[i], count);
    split_by(sp, count, keys, n, of);
    free(of);
}

static void split_free(split *sp)
{
    free(sp->start);
    free(sp->pos);
    free(sp->keys);
}

/* Page numbers: local page l of stripe i of S is page l * S + i. */
static int64_t page_global(int64_t local, const layout *L, uint32_t i)
{
    return local < 0 ? -1 : local * (int64_t)L->count + (int64_t)i;
}

/* The local page of `page` in stripe i, or -1 (refused there as out of
 * range) if it is not one of stripe i's. */
static int64_t page_local(int64_t page, const layout *L, uint32_t i)
{
    if (page < 0 || (uint64_t)page % L->count != i)
        return -1;
    return page / (int64_t)L->count;
}

/* The commands of one call: one per stripe it touches, all sent at once. */
typedef struct batch {
    size_t m;
    uint32_t *stripe;
    args *as;
    redis_cmd *cmds;
    redisReply **reps; /* batch_run: the replies judged STORE_OK */
    int *codes;
} batch;

static void batch_init(batch *b, size_t cap)
{
    cap = cap ? cap : 1;
    b->m = 0;
    b->stripe = hf_xcalloc(cap, sizeof *b->stripe);
    b->as = hf_xcalloc(cap, sizeof *b->as);
    b->cmds = hf_xcalloc(cap, sizeof *b->cmds);
    b->reps = hf_xcalloc(cap, sizeof *b->reps);
    b->codes = hf_xcalloc(cap, sizeof *b->codes);
}

/* CMD key now cfg for stripe i of L: the next command of b. */
static args *batch_add(store_redis *r, batch *b, const char *cmd, const layout *L, uint32_t i)
{
    args *a = &b->as[b->m];
    b->stripe[b->m++] = i;
    args_cmd_key(a, cmd, L->key[i], L->keylen[i], L->slot[i]);
    args_int(a, now_of(r));
    char *cfg = args_room(a, r->cfglen + 2 * (1 + HF_UINT_DIGITS)), *p = cfg + r->cfglen;
    memcpy(cfg, r->cfgs, r->cfglen); /* wire_cfg_parse's 9-field form: cfg,count,stripe */
    *p++ = ',';
    p = hf_put_uint(p, L->count);
    *p++ = ',';
    p = hf_put_uint(p, i);
    args_trim(a, (size_t)(p - cfg));
    return a;
}

/* Send every command of b at once, then judge each. */
static void batch_run(store_redis *r, batch *b, bool change)
{
    for (size_t k = 0; k < b->m; k++)
        b->cmds[k] = cmd_of(&b->as[k]);
    redis_link_exec(r->link, b->cmds, b->m, change);
    for (size_t k = 0; k < b->m; k++)
        b->codes[k] = judge(r, &b->cmds[k], &b->reps[k]);
}

static void batch_free(batch *b)
{
    for (size_t k = 0; k < b->m; k++) {
        args_free(&b->as[k]);
        if (b->reps[k])
            freeReplyObject(b->reps[k]);
    }
    redis_cmds_free(b->cmds, b->m);
    free(b->stripe);
    free(b->as);
    free(b->reps);
    free(b->codes);
}

/*
 * The outcome of a batch: STORE_OK if every command's. Else, if none took
 * effect: RESTRIPE when a stripe says the layout is stale (-ESTRIPES, or
 * a stripe other than the anchor has no value, unless `last` or the
 * anchor answered in the same batch, which checks the count: ENOPOOL
 * there may mean a layout of another count), or the first failure. A
 * change that took effect on some stripes and found no pool on the others
 * (a clear or an initialization running meanwhile) is STORE_ENOPOOL; one
 * that took effect on some and failed otherwise on others has an unknown
 * outcome as a whole: STORE_EUNCERTAIN.
 */
/* Whether the anchor answered in b, so checked the layout's count. */
static bool batch_vouched(const batch *b)
{
    for (size_t k = 0; k < b->m; k++)
        if (b->stripe[k] == 0 && (b->codes[k] == STORE_OK || b->codes[k] == STORE_ENOPOOL))
            return true;
    return false;
}

static int batch_outcome(const batch *b, bool change, bool last)
{
    size_t ok = 0;
    int first = STORE_OK;
    bool restripe = false, uncertain = false, only_nopool = true;
    bool vouched = last || batch_vouched(b);
    for (size_t k = 0; k < b->m; k++) {
        int c = b->codes[k];
        if (c == STORE_OK) {
            ok++;
            continue;
        }
        if (c == RESTRIPE || (c == STORE_ENOPOOL && b->stripe[k] > 0 && !vouched))
            restripe = true;
        if (c == STORE_EUNCERTAIN)
            uncertain = true;
        if (c != STORE_ENOPOOL)
            only_nopool = false;
        if (first == STORE_OK || first == RESTRIPE)
            first = c == RESTRIPE ? RESTRIPE : c;
    }
    if (ok == b->m)
        return STORE_OK;
    if (change && ok > 0 && only_nopool)
        return STORE_ENOPOOL; /* the rest of the pool is being cleared or created */
    if (change && (uncertain || ok > 0))
        return STORE_EUNCERTAIN;
    if (restripe)
        return RESTRIPE;
    return first == RESTRIPE ? STORE_EUNAVAILABLE : first;
}

/* An operation on one layout; `last`: the layout was just asked (ENOPOOL
 * anywhere is ENOPOOL). */
typedef int (*striped_fn)(store_redis *r, const layout *L, void *ctx, bool last);

/* Run fn on ns's layout; once more on the anchor's word if it was stale.
 * NO_NAMESPACE: ns has no value. */
static int run_striped(store_redis *r, hf_slice ns, striped_fn fn, void *ctx)
{
    const layout *L;
    int rc = layout_of(r, ns, false, &L);
    if (rc != STORE_OK)
        return rc;
    if (!L)
        return NO_NAMESPACE;
    rc = fn(r, L, ctx, false);
    if (rc != RESTRIPE)
        return rc;
    rc = layout_of(r, ns, true, &L);
    if (rc != STORE_OK)
        return rc;
    if (!L)
        return NO_NAMESPACE;
    rc = fn(r, L, ctx, true);
    return rc == RESTRIPE ? STORE_EUNAVAILABLE : rc;
}

/* The stripe count of a namespace that a pool of num_pages pages creates:
 * --stripes if given, else by the pool's size and the primaries over a
 * cluster (docs/many-nodes.md "Choosing S"), 1 over one Redis. Only a
 * guess until the anchor takes it: a namespace another front end created
 * meanwhile keeps its own count (-ESTRIPES, then HF3FS.STRIPES). */
static uint32_t stripes_for(store_redis *r, uint64_t num_pages)
{
    if (r->stripes)
        return r->stripes;
    if (!redis_link_is_cluster(r->link))
        return 1;
    return wire_stripes_for(num_pages, redis_link_primaries(r->link));
}

/* ---------------------------------------------------------------- ops */

typedef struct init_call {
    uint32_t rank;
    uint64_t num_pages;
    bool created;
    uint64_t existing;
    uint32_t stripes; /* of the namespace */
} init_call;

/* INIT on the stripes [from, to) of L. */
static int init_on(store_redis *r, const layout *L, init_call *c, uint32_t from, uint32_t to,
                   bool last)
{
    batch b;
    batch_init(&b, to - from);
    for (uint32_t i = from; i < to; i++) {
        args *a = batch_add(r, &b, "HF3FS.INIT", L, i);
        args_add(a, L->ns, L->nslen);
        args_int(a, c->rank);
        args_int(a, (int64_t)wire_stripe_pages(c->num_pages, (wire_stripe){L->count, i}));
    }
    batch_run(r, &b, true);
    int rc = batch_outcome(&b, true, last);
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        const redisReply *rep = b.reps[k];
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
            rc = malformed(r, NULL, "HF3FS.INIT");
            break;
        }
        if (b.stripe[k] == 0)
            c->created = int_of(rep->element[0]) == 1;
        c->existing += (uint64_t)int_of(rep->element[1]);
    }
    batch_free(&b);
    return rc;
}

static int init_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    init_call *c = ctx;
    c->existing = 0;
    c->stripes = L->count;
    return init_on(r, L, c, 0, L->count, last);
}

static int rd_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages, bool *created,
                        uint64_t *existing_pages)
{
    store_redis *r = R(s);
    if (num_pages > r->cfg.max_pages || rank >= r->cfg.max_ranks)
        return STORE_EINVAL;
    init_call c = {rank, num_pages, false, 0, 1};
    int rc = run_striped(r, ns, init_fn, &c);
    if (rc == NO_NAMESPACE) {
        /* A new namespace: its anchor first, which records our count (or
         * tells the count another front end gave it meanwhile), then the
         * other stripes. */
        uint32_t guess = stripes_for(r, num_pages);
        layout *mine = layout_new(ns, guess);
        rc = init_on(r, mine, &c, 0, 1, true);
        layouts_free(mine);
        bool made = rc == STORE_OK && c.created;
        if (made)
            log_msg(LOG_INFO,
                    "namespace '%.*s' created with %" PRIu32 " stripe(s) (%s) by rank %" PRIu32
                    "'s pool of %" PRIu64 " pages",
                    (int)(ns.len > 100 ? 100 : ns.len), ns.ptr, guess,
                    r->stripes ? "--stripes" : "by pool size", rank, num_pages);
        if (rc == RESTRIPE || rc == STORE_OK)
            rc = run_striped(r, ns, init_fn, &c);
        c.created = c.created || made;
        if (rc == NO_NAMESPACE) /* cleared meanwhile */
            rc = STORE_EUNAVAILABLE;
    }
    if (rc != STORE_OK)
        return rc;
    if (c.created && num_pages < c.stripes)
        log_msg(LOG_WARN,
                "pool '%.*s' rank %" PRIu32 ": %" PRIu64 " pages for %" PRIu32 " stripes: the "
                "keys of %" PRIu64 " stripes can never get a page (docs/redis-module.md, "
                "\"Stripes\")",
                (int)(ns.len > 100 ? 100 : ns.len), ns.ptr, rank, num_pages, c.stripes,
                (uint64_t)c.stripes - num_pages);
    if (created)
        *created = c.created;
    if (existing_pages)
        *existing_pages = c.existing;
    return STORE_OK;
}

typedef struct keys_call {
    uint32_t rank;
    const hf_slice *keys;
    size_t n;
    core_alloc_mode mode;
    int64_t *pages;
    bool *existed;
    bool *present;
    const int64_t *in_pages; /* confirm */
    const int64_t *release;
    size_t nrel;
    size_t refused;
} keys_call;

/* One command per stripe that has keys of the call (or, all: every
 * stripe), CMD key now cfg [rank] keys. */
static void batch_keys(store_redis *r, batch *b, const char *cmd, const layout *L, const split *sp,
                       bool with_rank, uint32_t rank, bool all)
{
    batch_init(b, L->count);
    for (uint32_t i = 0; i < L->count; i++) {
        size_t from = sp->start[i], m = sp->start[i + 1] - from;
        if (m == 0 && !all)
            continue;
        args *a = batch_add(r, b, cmd, L, i);
        if (with_rank)
            args_int(a, rank);
        args_keys(a, sp->keys + from, m);
    }
}

static int alloc_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    keys_call *c = ctx;
    split sp;
    split_keys(&sp, L->count, c->keys, c->n);
    batch b;
    batch_init(&b, L->count);
    for (uint32_t i = 0; i < L->count; i++) {
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        if (m == 0)
            continue;
        args *a = batch_add(r, &b, "HF3FS.ALLOC", L, i);
        args_int(a, c->rank);
        args_str(a, c->mode == CORE_ALLOC_ALL_OR_NOTHING ? "1" : "0");
        args_keys(a, sp.keys + from, m);
    }
    batch_run(r, &b, true);
    size_t ok = 0;
    bool uncertain = false, short_of_pages = false;
    for (size_t k = 0; k < b.m; k++) {
        uint32_t i = b.stripe[k];
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        const redisReply *rep = b.reps[k];
        if (b.codes[k] == STORE_OK &&
            (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
             !is_bulk(rep->element[0], 8 * m) || !is_bulk(rep->element[1], m))) {
            /* malformed: outcome unknown on that stripe */
            freeReplyObject(b.reps[k]);
            b.reps[k] = NULL;
            malformed(r, NULL, "HF3FS.ALLOC");
            b.codes[k] = STORE_EUNCERTAIN;
        }
        if (b.codes[k] == STORE_EUNCERTAIN)
            uncertain = true;
        if (b.codes[k] != STORE_OK)
            continue;
        ok++;
        for (size_t j = 0; j < m; j++) {
            int64_t local = wire_i64_at(rep->element[0]->str, j);
            bool hit = rep->element[1]->str[j] != 0;
            c->pages[sp.pos[from + j]] = page_global(local, L, i);
            if (c->existed)
                c->existed[sp.pos[from + j]] = hit;
            if (local < 0 && !hit)
                short_of_pages = true;
        }
    }
    bool all_or_nothing = c->mode == CORE_ALLOC_ALL_OR_NOTHING && L->count > 1;
    int rc = batch_outcome(&b, true, last);
    if (ok > 0 && (ok < b.m || (all_or_nothing && short_of_pages))) {
        /* Roll back what the stripes that answered gave: no client saw it. */
        batch u;
        batch_init(&u, b.m);
        for (size_t k = 0; k < b.m; k++) {
            if (b.codes[k] != STORE_OK)
                continue;
            uint32_t i = b.stripe[k];
            size_t from = sp.start[i], m = sp.start[i + 1] - from;
            args *a = batch_add(r, &u, "HF3FS.CANCEL", L, i);
            args_int(a, c->rank);
            args_keys(a, sp.keys + from, m);
            args_add(a, b.reps[k]->element[0]->str, 8 * m);
            args_add(a, b.reps[k]->element[1]->str, m);
        }
        batch_run(r, &u, true);
        if (batch_outcome(&u, true, true) != STORE_OK) {
            log_msg(LOG_WARN,
                    "Redis: an allocation over %" PRIu32 " stripes could not be "
                    "rolled back on every stripe: its reservations there expire with the "
                    "reservation lease",
                    L->count);
            uncertain = true;
        }
        batch_free(&u);
        if (ok == b.m) { /* every stripe answered, one was short of pages: all -1 */
            for (size_t j = 0; j < c->n; j++)
                if (!c->existed || !c->existed[j])
                    c->pages[j] = -1;
            rc = STORE_OK;
        } else if (!uncertain) { /* nothing left anywhere: as if refused */
            rc = STORE_EUNAVAILABLE;
            for (size_t k = 0; k < b.m; k++)
                if (b.codes[k] == RESTRIPE || (b.codes[k] == STORE_ENOPOOL && !last))
                    rc = RESTRIPE;
            if (rc != RESTRIPE)
                for (size_t k = 0; k < b.m; k++)
                    if (b.codes[k] == STORE_ENOPOOL)
                        rc = STORE_ENOPOOL;
        }
    }
    batch_free(&b);
    split_free(&sp);
    return rc;
}

static int no_pool(int rc)
{
    return rc == NO_NAMESPACE ? STORE_ENOPOOL : rc;
}

static int rd_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                       core_alloc_mode mode, int64_t *pages, bool *existed)
{
    bool *hits = existed ? existed : hf_xmalloc(n ? n : 1);
    keys_call c = {
        .rank = rank, .keys = keys, .n = n, .mode = mode, .pages = pages, .existed = hits};
    int rc = no_pool(run_striped(R(s), ns, alloc_fn, &c));
    if (hits != existed)
        free(hits);
    return rc;
}

static _Thread_local size_t last_refused;

size_t store_redis_last_refused(void)
{
    return last_refused;
}

/* The stripe a confirmation goes to: its page's (a reservation of the key
 * can only be there, and any other stripe's core judges the item as the
 * one core of a single value would: another key's page, or no
 * reservation), or, for a negative page, the key's (refused there as out
 * of range). */
static uint32_t confirm_stripe(hf_slice key, int64_t page, uint32_t count)
{
    return page >= 0 ? (uint32_t)((uint64_t)page % count) : wire_stripe_of(key, count);
}

static int confirm_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    keys_call *c = ctx;
    split sp;
    split_confirm(&sp, L->count, c->keys, c->in_pages, c->n);
    /* The releases by stripe: page p is stripe p % S's (a page that is no
     * stripe's, negative, goes to the anchor as -1: refused there). */
    size_t *rstart = hf_xcalloc((size_t)L->count + 1, sizeof *rstart);
    int64_t *rel = hf_xmalloc((c->nrel ? c->nrel : 1) * sizeof *rel);
    for (size_t j = 0; j < c->nrel; j++)
        rstart[(c->release[j] < 0 ? 0 : (uint64_t)c->release[j] % L->count) + 1]++;
    for (uint32_t i = 0; i < L->count; i++)
        rstart[i + 1] += rstart[i];
    size_t *fill = hf_xmalloc((size_t)L->count * sizeof *fill);
    memcpy(fill, rstart, (size_t)L->count * sizeof *fill);
    for (size_t j = 0; j < c->nrel; j++) {
        uint32_t i = c->release[j] < 0 ? 0 : (uint32_t)((uint64_t)c->release[j] % L->count);
        rel[fill[i]++] = page_local(c->release[j], L, i);
    }
    free(fill);
    batch b;
    batch_init(&b, L->count);
    int64_t *local = hf_xmalloc((c->n ? c->n : 1) * sizeof *local);
    for (uint32_t i = 0; i < L->count; i++) {
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        size_t rfrom = rstart[i], rm = rstart[i + 1] - rfrom;
        if (m == 0 && rm == 0)
            continue;
        for (size_t j = 0; j < m; j++)
            local[from + j] = page_local(c->in_pages[sp.pos[from + j]], L, i);
        args *a = batch_add(r, &b, "HF3FS.CONFIRM", L, i);
        args_int(a, c->rank);
        args_keys(a, sp.keys + from, m);
        args_pages(a, local + from, m);
        args_pages(a, rel + rfrom, rm);
    }
    batch_run(r, &b, true);
    int rc = batch_outcome(&b, true, last);
    c->refused = 0;
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        if (b.reps[k]->type != REDIS_REPLY_INTEGER) {
            rc = malformed(r, NULL, "HF3FS.CONFIRM");
            break;
        }
        c->refused += (size_t)b.reps[k]->integer;
    }
    batch_free(&b);
    free(local);
    free(rel);
    free(rstart);
    split_free(&sp);
    return rc;
}

static int rd_confirm(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                      const int64_t *pages, size_t n, const int64_t *release, size_t nrel)
{
    keys_call c = {
        .rank = rank, .keys = keys, .n = n, .in_pages = pages, .release = release, .nrel = nrel};
    int rc = no_pool(run_striped(R(s), ns, confirm_fn, &c));
    if (rc == STORE_OK)
        last_refused = c.refused;
    return rc;
}

/* A read whose answer is, per stripe, one bulk string of 1 (flags, into
 * present) or 8 (pages, into pages) bytes per key. CEXISTS (no rank) of a
 * stripe that has no value answers all false for its keys, once the
 * layout is known to be right. */
typedef struct read_call {
    keys_call k;
    const char *cmd;
    bool with_rank;
} read_call;

static int read_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    read_call *c = ctx;
    split sp;
    split_keys(&sp, L->count, c->k.keys, c->k.n);
    batch b;
    batch_keys(r, &b, c->cmd, L, &sp, c->with_rank, c->k.rank, false);
    batch_run(r, &b, false);
    if (!c->with_rank && (last || batch_vouched(&b)))
        for (size_t k = 0; k < b.m; k++)
            if (b.codes[k] == STORE_ENOPOOL)
                b.codes[k] = STORE_OK; /* reps[k] NULL: no value, all false */
    int rc = batch_outcome(&b, false, last);
    size_t width = c->k.pages ? 8 : 1;
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        uint32_t i = b.stripe[k];
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        const redisReply *rep = b.reps[k];
        if (rep && !is_bulk(rep, width * m)) {
            rc = malformed(r, NULL, c->cmd);
            break;
        }
        /* Exactly one of pages and present is given (by the caller of the
         * store op: LOOKUP and CLOC pages, EXISTS and CEXISTS present). rep
         * is NULL only for CEXISTS's ENOPOOL above (with_rank false, so
         * present): a STORE_OK rc means every code is STORE_OK, so judge
         * gave every other reply. The analyzer follows neither. */
        for (size_t j = 0; j < m; j++) {
            size_t at = sp.pos[from + j];
            if (c->k.pages)
                // NOLINTNEXTLINE(clang-analyzer-core.NullDereference): rep set with pages (above)
                c->k.pages[at] = page_global(wire_i64_at(rep->str, j), L, i);
            else
                // NOLINTNEXTLINE(clang-analyzer-core.NullDereference): present set (above)
                c->k.present[at] = rep && rep->str[j] != 0;
        }
    }
    batch_free(&b);
    split_free(&sp);
    return rc;
}

/* A namespace's prefix counters (core.h core_prefix_count). A stripe sees
 * only its share of a request's keys, and a request's leading run is not a
 * sum of its stripes' figures, so the front end, which holds the whole
 * answer, counts: these are this front end's requests (volatile, like the
 * embedded engine's, and dropped by clear_all as there). */
typedef struct prefix_row {
    struct prefix_row *next;
    reuse_prefix c;
    size_t len;
    char name[];
} prefix_row;

static prefix_row *prefix_find(prefix_row *row, hf_slice ns)
{
    while (row && !(row->len == ns.len && memcmp(row->name, ns.ptr, ns.len) == 0))
        row = row->next;
    return row;
}

static void prefix_count(store_redis *r, hf_slice ns, const bool *present, size_t n)
{
    pthread_mutex_lock(&r->lock);
    prefix_row *row = prefix_find(r->prefix, ns);
    if (!row) {
        row = hf_xcalloc(1, sizeof *row + ns.len + 1);
        row->len = ns.len;
        if (ns.len)
            memcpy(row->name, ns.ptr, ns.len);
        row->next = r->prefix;
        r->prefix = row;
    }
    reuse_prefix_count(&row->c, present, n);
    pthread_mutex_unlock(&r->lock);
}

static void prefix_free(prefix_row *row)
{
    while (row) {
        prefix_row *next = row->next;
        free(row);
        row = next;
    }
}

static int rd_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     bool *present)
{
    read_call c = {{.rank = rank, .keys = keys, .n = n, .present = present}, "HF3FS.EXISTS", true};
    int rc = no_pool(run_striped(R(s), ns, read_fn, &c));
    if (rc == STORE_OK)
        prefix_count(R(s), ns, present, n);
    return rc;
}

static int rd_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     int64_t *pages)
{
    read_call c = {{.rank = rank, .keys = keys, .n = n, .pages = pages}, "HF3FS.LOOKUP", true};
    return no_pool(run_striped(R(s), ns, read_fn, &c));
}

static int rd_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                              bool *present)
{
    read_call c = {{.keys = keys, .n = n, .present = present}, "HF3FS.CEXISTS", false};
    int rc = run_striped(R(s), ns, read_fn, &c);
    if (rc == NO_NAMESPACE) { /* no pool: nothing is complete (and nothing counted) */
        for (size_t i = 0; i < n; i++)
            present[i] = false;
        rc = STORE_OK;
    } else if (rc == STORE_OK) {
        prefix_count(R(s), ns, present, n);
    }
    return rc;
}

static int rd_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                 size_t n, int64_t *pages)
{
    read_call c = {{.rank = rank, .keys = keys, .n = n, .pages = pages}, "HF3FS.CLOC", true};
    return no_pool(run_striped(R(s), ns, read_fn, &c));
}

static int delete_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    keys_call *c = ctx;
    split sp;
    split_keys(&sp, L->count, c->keys, c->n);
    batch b;
    batch_keys(r, &b, "HF3FS.DELETE", L, &sp, true, c->rank, false);
    batch_run(r, &b, true);
    int rc = batch_outcome(&b, true, last);
    batch_free(&b);
    split_free(&sp);
    return rc;
}

static int rd_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    keys_call c = {.rank = rank, .keys = keys, .n = n};
    return no_pool(run_striped(R(s), ns, delete_fn, &c));
}

static int clear_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    const uint32_t *rank = ctx;
    batch b;
    batch_init(&b, L->count);
    for (uint32_t i = 0; i < L->count; i++)
        args_int(batch_add(r, &b, "HF3FS.CLEARPOOL", L, i), *rank);
    batch_run(r, &b, true);
    int rc = batch_outcome(&b, true, last);
    batch_free(&b);
    return rc;
}

static int rd_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    return no_pool(run_striped(R(s), ns, clear_fn, &rank));
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
            code = rc == STORE_ENOPOOL || rc == STORE_EINVAL || rc == RESTRIPE ? STORE_EUNAVAILABLE
                                                                               : rc;
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
    layouts_forget(r);
    pthread_mutex_lock(&r->lock);
    prefix_free(r->prefix);
    r->prefix = NULL;
    pthread_mutex_unlock(&r->lock);
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

/* An HF3FS.STATS row: the rank, the figures and the refusals (core.h lists
 * both), the estimator's sampled blocks and hits per scale. */
enum { STATS_FIELDS = 1 + CORE_POOL_FIGURE_COUNT + 2 * CORE_REFUSE_COUNT + 1 + REUSE_SCALES };

/* One pool's row of HF3FS.STATS as numbers (v[0] the rank); -1 if
 * malformed. */
static int stats_values(const redisReply *row, int64_t *v)
{
    if (row->type != REDIS_REPLY_ARRAY || row->elements != STATS_FIELDS)
        return -1;
    for (size_t j = 0; j < STATS_FIELDS; j++) {
        if (row->element[j]->type != REDIS_REPLY_INTEGER)
            return -1;
        v[j] = row->element[j]->integer;
    }
    return 0;
}

static void stats_of(const int64_t *v, core_pool_stats *st)
{
    size_t k = 1;
#define READ_FIGURE(field, ...) st->field = (uint64_t)v[k++];
    CORE_POOL_FIGURES(READ_FIGURE, CORE_POOL_NO_ALIAS)
#undef READ_FIGURE
#define READ_REFUSALS(field, ...)                                                                  \
    for (int j = 0; j < CORE_REFUSE_COUNT; j++)                                                    \
        st->field[j] = (uint64_t)v[k++];
    CORE_POOL_REFUSALS(READ_REFUSALS)
#undef READ_REFUSALS
    st->est_blocks = (uint64_t)v[k++];
    for (int j = 0; j < REUSE_SCALES; j++)
        st->est_hits[j] = (uint64_t)v[k++];
}

/* A pool's figures summed over the stripes of its namespace. */
typedef struct pool_sum {
    int64_t v[STATS_FIELDS]; /* v[0]: the rank */
} pool_sum;

static int sum_cmp(const void *x, const void *y)
{
    const pool_sum *a = x, *b = y;
    return a->v[0] < b->v[0] ? -1 : a->v[0] > b->v[0];
}

/* Every namespace's layout (NULL: its anchor is gone) and one command per
 * stripe of each, CMD key [now], all at once: b's commands in namespace
 * then stripe order. */
static int per_stripe(store_redis *r, const char *cmd, bool with_now, const ns_name *v, size_t n,
                      const layout **Ls, batch *b, bool judged)
{
    int code = STORE_OK;
    size_t total = 0;
    for (size_t i = 0; i < n && code == STORE_OK; i++) {
        code = layout_of(r, (hf_slice){v[i].p, v[i].len}, false, &Ls[i]);
        total += Ls[i] ? Ls[i]->count : 0;
    }
    batch_init(b, total);
    if (code != STORE_OK)
        return code;
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; Ls[i] && j < Ls[i]->count; j++) {
            args *a = &b->as[b->m];
            b->stripe[b->m++] = j;
            args_cmd_key(a, cmd, Ls[i]->key[j], Ls[i]->keylen[j], Ls[i]->slot[j]);
            if (with_now)
                args_int(a, now_of(r));
        }
    if (judged) {
        batch_run(r, b, false);
    } else {
        for (size_t k = 0; k < b->m; k++)
            b->cmds[k] = cmd_of(&b->as[k]);
        redis_link_exec(r->link, b->cmds, b->m, false);
    }
    return STORE_OK;
}

/* Every pool's figures, summed over its stripes: by namespace (byte
 * order), then rank. A namespace or a stripe that went away meanwhile (a
 * clear) has no pools. */
static int rd_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    store_redis *r = R(s);
    ns_name *v;
    size_t n;
    int code = namespaces(r, &v, &n);
    if (code != STORE_OK)
        return code;
    const layout **Ls = hf_xcalloc(n ? n : 1, sizeof *Ls);
    batch b;
    code = per_stripe(r, "HF3FS.STATS", true, v, n, Ls, &b, true);
    size_t k = 0;
    pool_sum *sums = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n && code == STORE_OK; i++) {
        size_t nsum = 0;
        for (uint32_t j = 0; Ls[i] && j < Ls[i]->count && code == STORE_OK; j++, k++) {
            if (b.codes[k] == STORE_ENOPOOL)
                continue;
            if (b.codes[k] != STORE_OK) {
                code = b.codes[k] == STORE_EINVAL || b.codes[k] == RESTRIPE ? STORE_EUNAVAILABLE
                                                                            : b.codes[k];
                break;
            }
            const redisReply *rep = b.reps[k];
            if (rep->type != REDIS_REPLY_ARRAY) {
                code = malformed(r, NULL, "HF3FS.STATS");
                break;
            }
            for (size_t e = 0; e < rep->elements; e++) {
                int64_t row[STATS_FIELDS];
                if (stats_values(rep->element[e], row) != 0) {
                    code = malformed(r, NULL, "HF3FS.STATS");
                    break;
                }
                size_t at = 0;
                while (at < nsum && sums[at].v[0] != row[0])
                    at++;
                if (at == nsum) {
                    if (nsum == cap) {
                        cap = cap ? 2 * cap : 8;
                        sums = hf_xreallocarray(sums, cap, sizeof *sums);
                    }
                    memset(&sums[nsum++], 0, sizeof *sums);
                    sums[at].v[0] = row[0];
                }
                for (size_t f = 1; f < STATS_FIELDS; f++)
                    sums[at].v[f] += row[f];
            }
        }
        if (code != STORE_OK)
            break;
        if (nsum > 1) /* sums is NULL until a first row: qsort wants a valid pointer */
            qsort(sums, nsum, sizeof *sums, sum_cmp);
        for (size_t j = 0; j < nsum; j++) {
            core_pool_stats st;
            memset(&st, 0, sizeof st);
            stats_of(sums[j].v, &st);
            if (j == 0) { /* the namespace's figures go with its first pool */
                hf_slice name = {v[i].p, v[i].len};
                pthread_mutex_lock(&r->lock);
                const prefix_row *row = prefix_find(r->prefix, name);
                if (row) {
                    st.prefix_requests = row->c.requests;
                    st.prefix_blocks = row->c.blocks;
                    st.prefix_hits = row->c.hit_blocks;
                }
                pthread_mutex_unlock(&r->lock);
            }
            fn(ctx, (hf_slice){v[i].p, v[i].len}, (uint32_t)sums[j].v[0], &st);
        }
    }
    free(sums);
    batch_free(&b);
    free(Ls);
    names_free(v, n);
    return code;
}

/* 0, or -1 with what is wrong (the first value whose check fails), or
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
    const layout **Ls = hf_xcalloc(n ? n : 1, sizeof *Ls);
    batch b;
    code = per_stripe(r, "HF3FS.CHECK", false, v, n, Ls, &b, false);
    int bad = 0;
    if (code != STORE_OK) {
        snprintf(err, errlen, "Redis: %s", store_describe(s, code));
        bad = STORE_EUNAVAILABLE;
    }
    size_t k = 0;
    for (size_t i = 0; i < n && bad == 0; i++)
        for (uint32_t j = 0; Ls[i] && j < Ls[i]->count && bad == 0; j++, k++) {
            redis_cmd *c = &b.cmds[k];
            if (c->code != STORE_OK) {
                snprintf(err, errlen, "Redis: %s", store_describe(s, c->code));
                bad = STORE_EUNAVAILABLE;
            } else if (c->reply->type == REDIS_REPLY_ERROR && !starts(c->reply, "ENOPOOL")) {
                if (refused_before_running(c->reply)) {
                    snprintf(err, errlen, "Redis refused the check: %s", c->reply->str);
                    bad = STORE_EUNAVAILABLE;
                } else {
                    snprintf(err, errlen, "namespace '%.*s' stripe %" PRIu32 " of %" PRIu32 ": %s",
                             (int)(v[i].len > 100 ? 100 : v[i].len), v[i].p, j, Ls[i]->count,
                             c->reply->str);
                    bad = -1;
                }
            }
        }
    batch_free(&b);
    free(Ls);
    names_free(v, n);
    return bad;
}

int store_redis_pages(store_t *s, hf_slice ns, uint32_t rank, store_redis_page *pages,
                      size_t npages)
{
    store_redis *r = R(s);
    const layout *L;
    int rc = layout_of(r, ns, false, &L);
    if (rc != STORE_OK)
        return rc;
    if (!L)
        return STORE_ENOPOOL;
    memset(pages, 0, npages * sizeof *pages);
    batch b;
    batch_init(&b, L->count);
    for (uint32_t i = 0; i < L->count; i++) {
        args *a = &b.as[b.m];
        b.stripe[b.m++] = i;
        args_cmd_key(a, "HF3FS.PAGES", L->key[i], L->keylen[i], L->slot[i]);
        args_int(a, now_of(r));
        args_int(a, rank);
        args_int(a, 0);
        args_int(a, (int64_t)wire_stripe_pages(npages, (wire_stripe){L->count, i}));
    }
    batch_run(r, &b, false);
    rc = batch_outcome(&b, false, true);
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        const redisReply *rep = b.reps[k];
        if (rep->type != REDIS_REPLY_ARRAY) {
            rc = malformed(r, NULL, "HF3FS.PAGES");
            break;
        }
        for (size_t l = 0; l < rep->elements && rc == STORE_OK; l++) {
            size_t at = l * L->count + b.stripe[k];
            const redisReply *e = rep->element[l];
            if (at >= npages)
                break;
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 3) {
                rc = malformed(r, NULL, "HF3FS.PAGES");
                break;
            }
            store_redis_page *p = &pages[at];
            p->state = (int)int_of(e->element[0]);
            p->deadline = int_of(e->element[1]);
            if (e->element[2]->type == REDIS_REPLY_STRING) {
                p->key_len = e->element[2]->len < sizeof p->key - 1 ? e->element[2]->len
                                                                    : sizeof p->key - 1;
                memcpy(p->key, e->element[2]->str, p->key_len);
            }
            p->key[p->key_len] = '\0';
        }
    }
    batch_free(&b);
    return rc;
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
    layouts_free(r->layouts);
    layouts_free(r->retired);
    prefix_free(r->prefix);
    pthread_mutex_destroy(&r->lock);
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
 * one command (the module runs core_pool_import). */
/* An imported namespace has one stripe, whatever --stripes says: SGLang
 * placed its keys on pages without regard to stripes (docs/operations.md,
 * "Switching from SGLang's server"). A namespace that exists with another
 * count is a pool that exists. */
static int rd_import_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                          const hf_slice *keys, const int64_t *pages, size_t n)
{
    store_redis *r = R(s);
    layout *one = layout_new(ns, 1);
    batch b;
    batch_init(&b, 1);
    args *a = batch_add(r, &b, "HF3FS.IMPORT", one, 0);
    args_add(a, ns.ptr, ns.len);
    args_int(a, rank);
    args_int(a, (int64_t)num_pages);
    args_keys(a, keys, n);
    args_pages(a, pages, n);
    batch_run(r, &b, true);
    int rc = b.codes[0] == RESTRIPE ? STORE_EEXIST : b.codes[0];
    if (rc == STORE_OK && b.reps[0]->type != REDIS_REPLY_INTEGER)
        rc = malformed(r, NULL, "HF3FS.IMPORT");
    batch_free(&b);
    layouts_free(one);
    return rc;
}

/* The import's record (store.h import_mark_get): a string key of its own
 * beside the module's values, GET and SET as one command each. */
#define IMPORT_MARK_KEY "hf3fs:imported"

static int mark_cmd(store_redis *r, const char *op, const char *text, bool change, redisReply **out)
{
    const char *argv[3] = {op, IMPORT_MARK_KEY, text};
    size_t lens[3] = {strlen(op), sizeof IMPORT_MARK_KEY - 1, text ? strlen(text) : 0};
    redis_cmd c = {.argc = text ? 3 : 2, .argv = argv, .argvlen = lens, .node = -1};
    c.slot = redis_link_slot(IMPORT_MARK_KEY, sizeof IMPORT_MARK_KEY - 1);
    redis_link_exec(r->link, &c, 1, change);
    return judge(r, &c, out);
}

static int rd_import_mark_get(store_t *s, char *out, size_t cap)
{
    redisReply *rep;
    int rc = mark_cmd(R(s), "GET", NULL, false, &rep);
    out[0] = 0;
    if (rc != STORE_OK)
        return rc;
    size_t len = 0;
    if (rep->type == REDIS_REPLY_STRING) {
        len = rep->len < cap ? rep->len : cap - 1;
        memcpy(out, rep->str, len);
        out[len] = 0;
    } else if (rep->type != REDIS_REPLY_NIL) {
        rc = malformed(R(s), NULL, "GET " IMPORT_MARK_KEY);
    }
    freeReplyObject(rep);
    return rc != STORE_OK ? rc : (int)len;
}

static int rd_import_mark_set(store_t *s, const char *text)
{
    redisReply *rep;
    int rc = mark_cmd(R(s), "SET", text, true, &rep);
    if (rc == STORE_OK)
        freeReplyObject(rep);
    return rc;
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
    .import_mark_get = rd_import_mark_get,
    .import_mark_set = rd_import_mark_set,
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

#define LOAD_HOWTO                                                                                 \
    "start it with `redis-server --loadmodule /path/to/hf3fs_metad_redis.so` or add "              \
    "`loadmodule /path/to/hf3fs_metad_redis.so` to redis.conf (the .so is built by `make` "        \
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
        if (!name || name->type != REDIS_REPLY_STRING || name->len != strlen(HF3FS_MODULE_NAME) ||
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
    snprintf(err, errlen, "Redis at %s has not loaded the hf3fs-metad module (%s version %d): %s",
             addr, HF3FS_MODULE_NAME, HF3FS_MODULE_VERSION, LOAD_HOWTO);
    return STORE_ENOMODULE;
}

int store_redis_open(const core_config *config, const store_redis_options *options, store_t **out,
                     char *err, size_t errlen)
{
    store_redis *r = hf_xcalloc(1, sizeof *r);
    r->base.ops = &redis_ops;
    r->cfg = *config;
    if (r->cfg.max_pages == 0 || r->cfg.max_pages > CORE_MAX_PAGES_LIMIT)
        r->cfg.max_pages = CORE_MAX_PAGES_LIMIT;
    r->cfglen = wire_cfg_format(&r->cfg, r->cfgs, sizeof r->cfgs);
    r->stripes = options->stripes;
    if (r->stripes > WIRE_MAX_STRIPES) {
        snprintf(err, errlen, "--stripes must be 1 to %d", WIRE_MAX_STRIPES);
        free(r);
        return STORE_ECONFIG;
    }
    pthread_mutex_init(&r->lock, NULL);
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
        .connections = options->connections,
        .max_in_flight = options->max_in_flight,
        .probe_argc = 2,
        .probe_argv = {"MODULE", "LIST"},
        .probe_check = module_check,
    };
    lo.wait_timeout_ms = options->wait_timeout_ms > 0 ? options->wait_timeout_ms
                                                      : lo.command_timeout_ms;
    int rc = redis_link_open(&lo, &r->link, err, errlen);
    if (rc != STORE_OK) {
        pthread_mutex_destroy(&r->lock);
        free(r);
        return rc;
    }
    *out = &r->base;
    return STORE_OK;
}
