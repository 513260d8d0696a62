/*
 * command.c: the module's commands (module_internal.h): their shared
 * arguments and replies, and each one's body, run_<name>, which
 * cmd_dispatch (module.c) runs once the key is open and the arguments
 * parsed.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "module/module_internal.h"
#include "module/redismodule_api.h"
#include "util/hf_assert.h"
#include "util/steady.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* ---- commands: shared parts ---- */


/* Open argv[1] (mode: READ for reads, CHANGE for changes). 0, or -1 after
 * replying WRONGTYPE. */
int cmd_open_mode(cmd *c, RedisModuleCtx *ctx, RedisModuleString **argv, int mode)
{
    *c = (cmd){.ctx = ctx, .argv = argv};
    c->key = rm_OpenKey(ctx, argv[1], mode);
    int t = rm_KeyType(c->key);
    if (t == REDISMODULE_KEYTYPE_EMPTY)
        return 0;
    if (t != REDISMODULE_KEYTYPE_MODULE || rm_ModuleTypeGetType(c->key) != hf_type) {
        rm_CloseKey(c->key);
        c->key = NULL;
        rm_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return -1;
    }
    c->v = rm_ModuleTypeGetValue(c->key);
    return 0;
}

static int cmd_open(cmd *c, RedisModuleCtx *ctx, RedisModuleString **argv)
{
    return cmd_open_mode(c, ctx, argv, CHANGE);
}

/* The observer of a command's core: the event collected for HF3FS.APPLY,
 * and the page it moves out of the ledger. */
static void observe_event(void *ctx, const core_event *ev)
{
    cmd *c = ctx;
    collect_event(&c->events, ev);
    ledger_touch(c->v, ev);
}

/* Start observing the value's core (before the core call). */
void cmd_observe(cmd *c)
{
    /* a command's own effects are a primary's: on a replica the stream
     * brings HF3FS.APPLY, which propagates itself verbatim */
    HF_ASSERT(!(rm_GetContextFlags(c->ctx) & REDISMODULE_CTX_FLAGS_REPLICATED));
    HF_ASSERT(c->events.len == 0);
    core_set_observer(c->v->core, observe_event, c);
}

/* Stop observing; propagate the events, if any, as HF3FS.APPLY; free the
 * arguments; close. */
void cmd_close(cmd *c)
{
    if (c->v) {
        core_set_observer(c->v->core, NULL, NULL);
        if (c->events.len)
            rm_Replicate(c->ctx, "HF3FS.APPLY", "sbblll", c->argv[1], c->v->ns, c->v->ns_len,
                         (const char *)c->events.ptr, c->events.len, (long long)c->v->st.count,
                         (long long)c->v->st.index, (long long)c->v->st.placement);
        /* after the APPLY that made the reservations (one MULTI/EXEC);
         * only where every replica knows HF3FS.NOTE (settle_replicate) */
        if (c->noted.len && settle_replicate)
            rm_Replicate(c->ctx, "HF3FS.NOTE", "sllb", c->argv[1], (long long)c->rank,
                         (long long)c->id, (const char *)c->noted.ptr, c->noted.len);
    }
    hf_buf_free(&c->events);
    hf_buf_free(&c->noted);
    hf_xfree(c->keys);
    hf_xfree(c->pages[0]);
    hf_xfree(c->pages[1]);
    if (c->key)
        rm_CloseKey(c->key);
}

int reply_err(RedisModuleCtx *ctx, const char *msg)
{
    rm_ReplyWithError(ctx, msg);
    return REDISMODULE_OK;
}

static int reply_enopool(RedisModuleCtx *ctx)
{
    return reply_err(ctx, "ENOPOOL pool not initialized");
}

/* Argument parsers: 0, or -1 after replying the error. */

static int arg_i64(RedisModuleCtx *ctx, RedisModuleString *a, const char *what, int64_t min,
                   int64_t max, int64_t *out)
{
    long long ll;
    char msg[160];
    if (rm_StringToLongLong(a, &ll) != REDISMODULE_OK) {
        snprintf(msg, sizeof msg, "ERR %s is not an integer", what);
        rm_ReplyWithError(ctx, msg);
        return -1;
    }
    if (ll < min || ll > max) {
        snprintf(msg, sizeof msg, "EINVAL %s out of range", what);
        rm_ReplyWithError(ctx, msg);
        return -1;
    }
    *out = ll;
    return 0;
}

static int arg_now(RedisModuleCtx *ctx, RedisModuleString *a, int64_t *now)
{
    if (arg_i64(ctx, a, "now", 0, INT64_MAX / 4, now) != 0)
        return -1;
    if (*now == 0)
        *now = hf_steady_now_ms(&module_clock);
    return 0;
}

static int arg_rank(RedisModuleCtx *ctx, RedisModuleString *a, uint32_t *rank)
{
    int64_t r;
    if (arg_i64(ctx, a, "rank", 0, UINT32_MAX, &r) != 0)
        return -1;
    *rank = (uint32_t)r;
    return 0;
}

/* An allocation's id: an integer > 0. */
static int arg_id(RedisModuleCtx *ctx, RedisModuleString *a, int64_t *id)
{
    return arg_i64(ctx, a, "id", 1, INT64_MAX, id);
}

static hf_slice arg_bytes(RedisModuleString *a)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    return (hf_slice){p, len};
}

/* The value caught up with a rebuild at `now` ("Reads across a rebuild"). */
static void cmd_catch_up(cmd *c, int64_t now)
{
    if (c->v && c->v->epoch != rebuilt_epoch) {
        core_recovered(c->v->core, now);
        c->v->epoch = rebuilt_epoch;
    }
    HF_ASSERT(!c->v || c->v->epoch == rebuilt_epoch);
}

/* cfg applied to the value's core (its hash seed kept), and the value
 * caught up with a rebuild at `now`; without a value, into *out only. The
 * stripe the caller names (*st_out) must be the value's: else -ESTRIPES
 * <the value's count>, so that a front end that took the namespace for
 * another count learns the real one before anything is done. */
static int arg_cfg(cmd *c, RedisModuleString *a, int64_t now, core_config *out, wire_stripe *st_out)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    core_config cfg = c->v ? *core_get_config(c->v->core) : default_config();
    /* A front end sends the same seven fields with every command (commands
     * run one at a time, on Redis's main thread). */
    static wire_cfg_cache last;
    wire_cfg w;
    if (wire_cfg_read_cached(&last, p, len, &w) != 0) {
        rm_ReplyWithError(c->ctx, "ERR malformed cfg (reservation_ms,read_lease_ms,"
                                  "write_lease_ms,release_grace_ms,evict,max_pages,max_ranks"
                                  "[,stripes,stripe])");
        return -1;
    }
    wire_cfg_apply(&w, &cfg);
    wire_stripe st = w.st;
    if (c->v && (st.count != c->v->st.count || st.index != c->v->st.index ||
                 st.placement != c->v->st.placement)) {
        char msg[120];
        snprintf(msg, sizeof msg,
                 "ESTRIPES %" PRIu32 " the value is stripe %" PRIu32 " of %" PRIu32, c->v->st.count,
                 c->v->st.index, c->v->st.count);
        rm_ReplyWithError(c->ctx, msg);
        return -1;
    }
    *st_out = st;
    if (cfg.max_pages > CORE_MAX_PAGES_LIMIT)
        cfg.max_pages = CORE_MAX_PAGES_LIMIT;
    if (cfg.max_ranks > CORE_MAX_RANKS_LIMIT)
        cfg.max_ranks = CORE_MAX_RANKS_LIMIT;
    if (c->v)
        core_set_config(c->v->core, &cfg);
    cmd_catch_up(c, now);
    *out = cfg;
    return 0;
}

/* A key list of either form (wire.h): *keys (hf_xfree it; a packed
 * list's text follows the slices in the same block) and *n. Empty keys are
 * refused. */
static int arg_keys(RedisModuleCtx *ctx, RedisModuleString *a, hf_slice **keys, size_t *n)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    int64_t count = wire_keys_count(p, len);
    if (count < 0) {
        rm_ReplyWithError(ctx, "ERR malformed key list");
        return -1;
    }
    size_t slices = (size_t)(count ? count : 1) * sizeof(hf_slice);
    hf_slice *k = hf_xmalloc(slices + wire_keys_text_len(p, len));
    wire_keys_decode(p, len, k, (char *)k + slices);
    for (int64_t i = 0; i < count; i++)
        if (k[i].len == 0) {
            hf_xfree(k);
            rm_ReplyWithError(ctx, "ERR empty key in key list");
            return -1;
        }
    *keys = k;
    *n = (size_t)count;
    return 0;
}

/* A page list: *pages (hf_xfree it) and *n. */
static int arg_pages(RedisModuleCtx *ctx, RedisModuleString *a, int64_t **pages, size_t *n)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    if (len % 8) {
        rm_ReplyWithError(ctx, "ERR malformed page list");
        return -1;
    }
    size_t count = len / 8;
    int64_t *v = hf_xmalloc((count ? count : 1) * sizeof *v);
    for (size_t i = 0; i < count; i++)
        v[i] = wire_i64_at(p, i);
    *pages = v;
    *n = count;
    return 0;
}

static void reply_pages(RedisModuleCtx *ctx, const int64_t *pages, size_t n)
{
    hf_buf b = {0};
    wire_i64_append(&b, pages, n);
    rm_ReplyWithStringBuffer(ctx, b.ptr ? (const char *)b.ptr : "", b.len);
    hf_buf_free(&b);
}

static void reply_flags(RedisModuleCtx *ctx, const bool *flags, size_t n)
{
    char *b = hf_xmalloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        b[i] = flags[i] ? 1 : 0;
    rm_ReplyWithStringBuffer(ctx, b, n);
    hf_xfree(b);
}

/* The pool of a command: the value's (ns, rank), or NULL after replying
 * ENOPOOL. */
static core_pool_t *cmd_pool(cmd *c, uint32_t rank)
{
    core_pool_t *pool = c->v ? core_pool_find(c->v->core, value_ns(c->v), rank) : NULL;
    if (!pool)
        reply_enopool(c->ctx);
    return pool;
}

/* The arguments `args` of a command, argv[first] on, each parsed into its
 * field of c; 0, or -1 after an error reply. */
int cmd_args(cmd *c, const cmd_arg *args, int first)
{
    static const char *const names[] = {
        [A_NUM_PAGES] = "num_pages", [A_FIRST] = "first", [A_COUNT] = "count"};
    RedisModuleCtx *ctx = c->ctx;
    size_t nums = 0, pages = 0, bytes = 0;
    for (int i = 0; i < CMD_MAX_ARGS && args[i] != A_END; i++) {
        RedisModuleString *a = c->argv[first + i];
        long long m;
        int rc = 0;
        switch (args[i]) {
        case A_END: break;
        case A_NOW: rc = arg_now(ctx, a, &c->now); break;
        case A_CFG: rc = arg_cfg(c, a, c->now, &c->cfg, &c->st); break;
        case A_NS: c->ns = arg_bytes(a); break;
        case A_RANK: rc = arg_rank(ctx, a, &c->rank); break;
        case A_POOL:
            rc = arg_rank(ctx, a, &c->rank) != 0 || !(c->pool = cmd_pool(c, c->rank)) ? -1 : 0;
            break;
        case A_MODE:
            if (rm_StringToLongLong(a, &m) != REDISMODULE_OK || (m != 0 && m != 1)) {
                reply_err(ctx, "ERR mode is 0 (partial) or 1 (all or nothing)");
                rc = -1;
            } else {
                c->mode = m;
            }
            break;
        case A_NUM_PAGES:
        case A_FIRST:
        case A_COUNT: rc = arg_i64(ctx, a, names[args[i]], 0, INT64_MAX, &c->num[nums++]); break;
        case A_KEYS: rc = arg_keys(ctx, a, &c->keys, &c->n); break;
        case A_PAGES:
            rc = arg_pages(ctx, a, &c->pages[pages], &c->np[pages]);
            pages++;
            break;
        case A_BYTES: c->bytes[bytes++] = arg_bytes(a); break;
        case A_ID: rc = arg_id(ctx, a, &c->id); break;
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* ---- commands ---- */

/* The command's value for its namespace (c->ns) under its key: the open
 * one, which must hold the namespace, or a new one (not yet set in the
 * key: cmd_keep_value) if the key is the namespace's own. 0, or -1 after
 * an error reply. */
static int cmd_value_of_ns(cmd *c)
{
    if (c->v) {
        if (!hf_slice_eq(c->ns, value_ns(c->v)))
            return reply_err(c->ctx, "ERR the value holds another namespace"), -1;
        return 0;
    }
    hf_slice key = arg_bytes(c->argv[1]);
    char want[128];
    size_t cap = WIRE_STRIPE_KEY_MAX(c->ns.len);
    char *w = cap <= sizeof want ? want : hf_xmalloc(cap);
    size_t wlen = wire_stripe_key(c->ns, c->st, w, cap);
    int ok = wlen == key.len && memcmp(w, key.ptr, key.len) == 0;
    if (w != want)
        hf_xfree(w);
    if (!ok)
        return reply_err(c->ctx, "ERR the key is not the namespace's stripe's (wire_stripe_key)"),
               -1;
    c->v = value_new(c->ns, &c->cfg, c->st);
    if (!c->v)
        return reply_err(c->ctx, "OOM cannot create the value"), -1;
    return 0;
}

/* After the core call on a value that cmd_value_of_ns made (fresh): set in
 * the key if the call succeeded (ok), dropped otherwise. */
static void cmd_keep_value(cmd *c, bool fresh, bool ok)
{
    if (!fresh)
        return;
    if (ok) {
        rm_ModuleTypeSetValue(c->key, hf_type, c->v);
        return;
    }
    /* a refused first call changed nothing: no event is lost with the value */
    HF_ASSERT(c->events.len == 0);
    core_set_observer(c->v->core, NULL, NULL);
    value_free(c->v);
    c->v = NULL;
}

/* HF3FS.INIT key now cfg ns rank num_pages */
void run_init(cmd *c)
{
    bool fresh = c->v == NULL;
    if (cmd_value_of_ns(c) != 0)
        return;
    cmd_observe(c);
    uint64_t existing = (uint64_t)c->num[0];
    int rc = core_pool_init(c->v->core, c->ns, c->rank, (uint64_t)c->num[0], &existing);
    cmd_keep_value(c, fresh, rc >= 0);
    if (rc < 0) {
        reply_err(c->ctx, "EINVAL num_pages or rank above the configured limits");
        return;
    }
    rm_ReplyWithArray(c->ctx, 2);
    rm_ReplyWithLongLong(c->ctx, rc == 1);
    rm_ReplyWithLongLong(c->ctx, (long long)existing);
}

/* HF3FS.ALLOC key now cfg rank mode keys [id]: with an id, the pages it
 * reserves go into the ledger, and to the replicas as HF3FS.NOTE. */
void run_alloc(cmd *c)
{
    size_t n = c->n;
    if (c->argc == 8 && arg_id(c->ctx, c->argv[7], &c->id) != 0)
        return;
    int64_t *pages = hf_xmalloc((n ? n : 1) * sizeof *pages);
    bool *existed = hf_xmalloc(n ? n : 1);
    core_allocate(c->pool, c->keys, n, c->mode ? CORE_ALLOC_ALL_OR_NOTHING : CORE_ALLOC_PARTIAL,
                  c->now, pages, existed);
    for (size_t i = 0; c->id && i < n; i++) {
        /* a repeated key answers its first page again: noted once */
        if (existed[i] || pages[i] < 0 || ledger_holds(c->v, c->rank, (uint64_t)pages[i]))
            continue;
        /* the page's RESERVE, just now, removed any older item */
        HF_ASSERT(core_page_get(c->pool, (uint64_t)pages[i], NULL, NULL, NULL) ==
                  CORE_PAGE_RESERVED);
        ledger_add(c->v, c->rank, (uint64_t)pages[i], c->id);
        wire_i64_append(&c->noted, &pages[i], 1);
    }
    rm_ReplyWithArray(c->ctx, 2);
    reply_pages(c->ctx, pages, n);
    reply_flags(c->ctx, existed, n);
    hf_xfree(pages);
    hf_xfree(existed);
}

/* HF3FS.IMPORT key now cfg ns rank num_pages keys pages: the pool built
 * whole (core_pool_import), refused (EEXIST) if it exists. */
void run_import(cmd *c)
{
    if (c->np[0] != c->n) {
        reply_err(c->ctx, "ERR as many pages as keys");
        return;
    }
    bool fresh = c->v == NULL;
    if (cmd_value_of_ns(c) != 0)
        return;
    cmd_observe(c);
    int rc = core_pool_import(c->v->core, c->ns, c->rank, (uint64_t)c->num[0], c->keys, c->pages[0],
                              c->n, c->now);
    cmd_keep_value(c, fresh, rc == 0);
    if (rc != 0) {
        reply_err(c->ctx, rc == CORE_EEXIST ? "EEXIST the pool exists"
                                            : "EINVAL num_pages, rank, keys or pages refused");
        return;
    }
    rm_ReplyWithLongLong(c->ctx, (long long)c->n);
}

/* HF3FS.CONFIRM key now cfg rank keys pages release */
void run_confirm(cmd *c)
{
    if (c->np[0] != c->n) {
        reply_err(c->ctx, "ERR as many pages as keys");
        return;
    }
    size_t refused = 0;
    core_confirm(c->pool, c->keys, c->pages[0], c->n, c->pages[1], c->np[1], c->now, &refused);
    rm_ReplyWithLongLong(c->ctx, (long long)refused);
}

/* HF3FS.CANCEL key now cfg rank keys pages existed: core_cancel of an
 * ALLOC's answer that no client saw (existed: a flag list). */
void run_cancel(cmd *c)
{
    size_t n = c->n;
    if (c->np[0] != n || c->bytes[0].len != n) {
        reply_err(c->ctx, "ERR as many pages and flags as keys");
        return;
    }
    bool *existed = hf_xmalloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        existed[i] = c->bytes[0].ptr[i] != 0;
    core_cancel(c->pool, c->keys, c->pages[0], existed, n, c->now);
    rm_ReplyWithSimpleString(c->ctx, "OK");
    hf_xfree(existed);
}

/* HF3FS.SETTLE key now cfg rank id: the reservations that the allocation
 * `id` made in the pool and that nothing moved since (the ledger) are FREE
 * at once, as core_cancel frees what no client saw: the front end that
 * sent it answered that allocation 507 and gave its pages to nobody.
 * Answers how many it freed; again, 0. */
void run_settle(cmd *c)
{
    uint64_t *pages;
    size_t n = ledger_pages_of(c->v, c->rank, c->id, &pages), freed = 0;
    for (size_t i = 0; i < n; i++) {
        char keybuf[CORE_KEY_TEXT_MAX];
        hf_slice key = {"", 0};
        core_page_state s = core_page_get(c->pool, pages[i], &key, keybuf, NULL);
        /* the ledger follows every event: its page is still that reservation */
        HF_ASSERT(s == CORE_PAGE_RESERVED);
        if (s != CORE_PAGE_RESERVED)
            continue;
        int64_t page = (int64_t)pages[i];
        bool hit = false;
        core_cancel(c->pool, &key, &page, &hit, 1, c->now);
        freed += core_page_get(c->pool, pages[i], NULL, NULL, NULL) == CORE_PAGE_FREE;
    }
    hf_xfree(pages);
    /* each page left the ledger: freed, or expired just before */
    HF_ASSERT(ledger_pages_of(c->v, c->rank, c->id, &pages) == 0);
    rm_ReplyWithLongLong(c->ctx, (long long)freed);
}

/* HF3FS.NOTE key rank id pages: on a replica (or from the AOF), the pages
 * that the primary's ALLOC `id` reserved, right after the HF3FS.APPLY that
 * reserved them: into this node's ledger. Propagated verbatim. */
void run_note(cmd *c)
{
    core_pool_t *pool = c->v ? core_pool_find(c->v->core, value_ns(c->v), c->rank) : NULL;
    for (size_t i = 0; pool && i < c->np[0]; i++) {
        int64_t p = c->pages[0][i];
        if (p >= 0 && core_page_get(pool, (uint64_t)p, NULL, NULL, NULL) == CORE_PAGE_RESERVED &&
            !ledger_holds(c->v, c->rank, (uint64_t)p))
            ledger_add(c->v, c->rank, (uint64_t)p, c->id);
    }
    c->v = NULL; /* nothing collected: the command goes on as it came */
    rm_ReplicateVerbatim(c->ctx);
    rm_ReplyWithSimpleString(c->ctx, "OK");
}

/* HF3FS.STRIPES key: [count, placement], the stripe count and the
 * placement the value records (its namespace's); [0, 0] without a value. */
void run_stripes(cmd *c)
{
    rm_ReplyWithArray(c->ctx, 2);
    rm_ReplyWithLongLong(c->ctx, c->v ? (long long)c->v->st.count : 0);
    rm_ReplyWithLongLong(c->ctx, c->v ? (long long)c->v->st.placement : 0);
}

/* HF3FS.EXISTS / LOOKUP / DELETE / CLOC key now cfg rank keys */
void run_exists(cmd *c)
{
    bool *flags = hf_xmalloc(c->n ? c->n : 1);
    core_exists(c->pool, c->keys, c->n, c->now, flags);
    reply_flags(c->ctx, flags, c->n);
    hf_xfree(flags);
}

void run_lookup(cmd *c)
{
    int64_t *pages = hf_xmalloc((c->n ? c->n : 1) * sizeof *pages);
    core_lookup(c->pool, c->keys, c->n, c->now, pages);
    reply_pages(c->ctx, pages, c->n);
    hf_xfree(pages);
}

void run_delete(cmd *c)
{
    core_delete(c->pool, c->keys, c->n, c->now);
    rm_ReplyWithSimpleString(c->ctx, "OK");
}

void run_cloc(cmd *c)
{
    int64_t *pages = hf_xmalloc((c->n ? c->n : 1) * sizeof *pages);
    if (core_complete_locations(c->v->core, value_ns(c->v), c->rank, c->keys, c->n, c->now, pages) <
        0)
        reply_enopool(c->ctx);
    else
        reply_pages(c->ctx, pages, c->n);
    hf_xfree(pages);
}

/* HF3FS.CLEARPOOL key now cfg rank */
void run_clearpool(cmd *c)
{
    core_pool_clear(c->pool, c->now);
    rm_ReplyWithSimpleString(c->ctx, "OK");
}

/* HF3FS.CEXISTS key now cfg keys */
void run_cexists(cmd *c)
{
    if (!c->v && c->st.index > 0) { /* a stripe missing: the caller checks its count */
        reply_enopool(c->ctx);
        return;
    }
    bool *present = hf_xcalloc(c->n ? c->n : 1, 1);
    if (c->v)
        core_complete_exists(c->v->core, value_ns(c->v), c->keys, c->n, c->now, present);
    reply_flags(c->ctx, present, c->n);
    hf_xfree(present);
}

/* HF3FS.STATS key now [FINE]: the estimate at the coarse curve's scales,
 * or with FINE (the capability "fine-curve", wire.h) at every scale. */
typedef struct stats_list {
    uint32_t *ranks;
    core_pool_stats *st;
    size_t n, cap;
} stats_list;

static void collect_stats(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *st)
{
    stats_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->ranks = hf_xreallocarray(l->ranks, l->cap, sizeof *l->ranks);
        l->st = hf_xreallocarray(l->st, l->cap, sizeof *l->st);
    }
    l->ranks[l->n] = rank;
    l->st[l->n++] = *st;
}

int cmd_stats(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 3 && argc != 4)
        return rm_WrongArity(ctx);
    hf_slice word = argc == 4 ? arg_bytes(argv[3]) : (hf_slice){NULL, 0};
    bool fine = argc == 4;
    if (fine && (word.len != strlen(WIRE_STATS_FINE) ||
                 strncasecmp(word.ptr, WIRE_STATS_FINE, word.len) != 0))
        return reply_err(ctx, "ERR HF3FS.STATS key now [" WIRE_STATS_FINE "]");
    cmd c;
    if (cmd_open(&c, ctx, argv) != 0)
        return REDISMODULE_OK;
    int64_t now;
    if (arg_now(ctx, argv[2], &now) != 0)
        goto out;
    if (!c.v) {
        reply_enopool(ctx);
        goto out;
    }
    stats_list l = {0};
    core_foreach_pool(c.v->core, now, collect_stats, &l);
    rm_ReplyWithArray(ctx, (long)l.n);
    for (size_t i = 0; i < l.n; i++) {
        const core_pool_stats *s = &l.st[i];
        /* rank, the figures and refusals (core.h lists both), the estimator */
        rm_ReplyWithArray(ctx, 1L + CORE_POOL_FIGURE_COUNT + 2L * CORE_REFUSE_COUNT + 1 +
                                   (fine ? REUSE_SCALES : REUSE_COARSE));
        rm_ReplyWithLongLong(ctx, (long long)l.ranks[i]);
#define REPLY_FIGURE(field, ...) rm_ReplyWithLongLong(ctx, (long long)s->field);
        CORE_POOL_FIGURES(REPLY_FIGURE, CORE_POOL_NO_ALIAS)
#undef REPLY_FIGURE
#define REPLY_REFUSALS(field, ...)                                                                 \
    for (size_t k = 0; k < CORE_REFUSE_COUNT; k++)                                                 \
        rm_ReplyWithLongLong(ctx, (long long)s->field[k]);
        CORE_POOL_REFUSALS(REPLY_REFUSALS)
#undef REPLY_REFUSALS
        /* the estimator of this stripe's keys (its prefix counters stay 0:
         * a stripe sees a part of each request; the front end counts) */
        rm_ReplyWithLongLong(ctx, (long long)s->est_blocks);
        for (int k = 0; k < REUSE_SCALES; k++)
            if (reuse_scale_in(!fine, k))
                rm_ReplyWithLongLong(ctx, (long long)s->est_hits[k]);
    }
    hf_xfree(l.ranks);
    hf_xfree(l.st);
out:
    cmd_close(&c);
    return REDISMODULE_OK;
}

/* HF3FS.CHECK key */
void run_check(cmd *c)
{
    if (!c->v) {
        reply_enopool(c->ctx);
        return;
    }
    char err[400] = "ERR core_check: ";
    size_t pre = strlen(err);
    if (core_check(c->v->core, err + pre, sizeof err - pre) == 0) {
        rm_ReplyWithSimpleString(c->ctx, "OK");
    } else {
        for (char *q = err; *q; q++)
            if (*q == '\r' || *q == '\n')
                *q = ' ';
        rm_ReplyWithError(c->ctx, err);
    }
}

/* HF3FS.PAGES key now rank first count: the pool expired at now, then
 * [state, deadline, key] for pages first .. first+count-1 (clamped to the
 * pool). */
void run_pages(cmd *c)
{
    core_pool_t *pool = cmd_pool(c, c->rank);
    if (!pool)
        return;
    uint64_t first = (uint64_t)c->num[0], count = (uint64_t)c->num[1];
    core_pool_expire(pool, c->now);
    core_pool_stats st;
    core_pool_get_stats(pool, c->now, &st);
    uint64_t end = first >= st.num_pages          ? first
                   : count > st.num_pages - first ? st.num_pages
                                                  : first + count;
    rm_ReplyWithArray(c->ctx, (long)(end - first));
    for (uint64_t p = first; p < end; p++) {
        hf_slice key = {"", 0};
        char keybuf[CORE_KEY_TEXT_MAX];
        int64_t deadline = 0;
        core_page_state s = core_page_get(pool, p, &key, keybuf, &deadline);
        rm_ReplyWithArray(c->ctx, 3);
        rm_ReplyWithLongLong(c->ctx, (long long)s);
        rm_ReplyWithLongLong(c->ctx, (long long)deadline);
        rm_ReplyWithStringBuffer(c->ctx, key.len ? key.ptr : "", key.len);
    }
}

/* HF3FS.APPLY key ns events: the effects of a command of the primary. */
void run_apply(cmd *c)
{
    hf_slice ev = c->bytes[0];
    bool fresh = c->v == NULL;
    if (fresh) {
        core_config cfg = default_config();
        c->v = value_new(c->ns, &cfg, c->st);
    } else if (!hf_slice_eq(c->ns, value_ns(c->v))) {
        c->v = NULL; /* not ours to propagate */
        reply_err(c->ctx, "ERR HF3FS.APPLY: the value holds another namespace");
        return;
    }
    hf_value *v = c->v;
    c->v = NULL; /* the events are propagated verbatim below, not collected */
    size_t pos = 0, count = 0;
    core_event e;
    int rc;
    while ((rc = wire_event_next(ev.ptr, ev.len, &pos, c->ns, &e)) == 1) {
        if (e.type == CORE_EV_CLEAR_ALL || core_apply_live(v->core, &e) != 0) {
            rc = -2;
            break;
        }
        ledger_touch(v, &e);
        count++;
    }
    if (rc < 0) {
        hf_slice k = arg_bytes(c->argv[1]);
        rm_Log(c->ctx, "warning",
               "hf3fsmeta: HF3FS.APPLY on %.*s: event %zu %s; this node no longer follows its "
               "primary exactly (resynchronize it)",
               (int)k.len, k.ptr, count, rc == -1 ? "is malformed" : "does not fit the state");
    }
    if (fresh && count == 0) {
        value_free(v);
    } else {
        if (fresh)
            rm_ModuleTypeSetValue(c->key, hf_type, v);
        rm_ReplicateVerbatim(c->ctx);
    }
    if (rc < 0)
        reply_err(c->ctx, "ERR HF3FS.APPLY: events do not fit the value");
    else
        rm_ReplyWithSimpleString(c->ctx, "OK");
}

/* HF3FS.REBUILD key ns events freeorder: a value as aof_rewrite wrote it. */
void run_rebuild(cmd *c)
{
    c->v = NULL;
    hf_slice ev = c->bytes[0], order = c->bytes[1];
    char err[200];
    hf_value *v = value_from_snapshot(c->ns, c->st, false, ev.ptr, ev.len, order.ptr, order.len,
                                      err, sizeof err);
    if (!v) {
        rm_Log(c->ctx, "warning", "hf3fsmeta: HF3FS.REBUILD: %s", err);
        reply_err(c->ctx, "ERR HF3FS.REBUILD: the value is damaged");
    } else {
        rm_ModuleTypeSetValue(c->key, hf_type, v);
        rm_ReplyWithSimpleString(c->ctx, "OK");
    }
}

/* The values of this node's selected database, for the keyless commands. */
typedef struct scan_list {
    hf_buf names; /* key list encoding of the key names */
    hf_buf nss;   /* key list encoding of their namespaces */
    size_t n;
} scan_list;

static void scan_value(RedisModuleCtx *ctx, RedisModuleString *keyname, RedisModuleKey *key,
                       void *privdata)
{
    scan_list *l = privdata;
    if (!key || rm_KeyType(key) != REDISMODULE_KEYTYPE_MODULE ||
        rm_ModuleTypeGetType(key) != hf_type)
        return;
    hf_value *v = rm_ModuleTypeGetValue(key);
    hf_slice name = arg_bytes(keyname), ns = value_ns(v);
    wire_keys_append(&l->names, &name, 1);
    wire_keys_append(&l->nss, &ns, 1);
    l->n++;
}

static void scan_values(RedisModuleCtx *ctx, scan_list *l)
{
    *l = (scan_list){{0}, {0}, 0};
    RedisModuleScanCursor *cur = rm_ScanCursorCreate();
    while (rm_Scan(ctx, cur, scan_value, l))
        ;
    rm_ScanCursorDestroy(cur);
}

/* HF3FS.NAMESPACES: the namespaces of the values this node holds. */
void run_namespaces(cmd *c)
{
    scan_list l;
    scan_values(c->ctx, &l);
    hf_slice *ns = hf_xmalloc((l.n ? l.n : 1) * sizeof *ns);
    wire_keys_decode((const char *)l.nss.ptr, l.nss.len, ns, NULL); /* general */
    rm_ReplyWithArray(c->ctx, (long)l.n);
    for (size_t i = 0; i < l.n; i++)
        rm_ReplyWithStringBuffer(c->ctx, ns[i].len ? ns[i].ptr : "", ns[i].len);
    hf_xfree(ns);
    hf_buf_free(&l.names);
    hf_buf_free(&l.nss);
}

/* HF3FS.CLEARALL: delete every value of this node; DEL of each propagates. */
void run_clearall(cmd *c)
{
    RedisModuleCtx *ctx = c->ctx;
    scan_list l;
    scan_values(ctx, &l);
    hf_slice *names = hf_xmalloc((l.n ? l.n : 1) * sizeof *names);
    wire_keys_decode((const char *)l.names.ptr, l.names.len, names, NULL); /* general */
    long long deleted = 0;
    for (size_t i = 0; i < l.n; i++) {
        RedisModuleString *name = rm_CreateString(ctx, names[i].ptr, names[i].len);
        RedisModuleKey *key = rm_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
        if (rm_KeyType(key) == REDISMODULE_KEYTYPE_MODULE && rm_ModuleTypeGetType(key) == hf_type &&
            rm_DeleteKey(key) == REDISMODULE_OK) {
            rm_Replicate(ctx, "DEL", "s", name);
            deleted++;
        }
        rm_CloseKey(key);
        rm_FreeString(ctx, name);
    }
    hf_xfree(names);
    hf_buf_free(&l.names);
    hf_buf_free(&l.nss);
    rm_ReplyWithLongLong(ctx, deleted);
}
