/*
 * randops.h: random operations on a core, and the text of its durable state,
 * for the unit tests that run a core at random and compare it with another
 * (test_replay.c: the event log replayed; test_wal.c: the log recovered;
 * test_follow.c: a core followed live).
 *
 * randops_step() runs one operation drawn from a randops_rng (an xorshift64
 * state, a value: a copy of it draws the same numbers again, so that two
 * cores can be given the same operation) over a randops_space (namespaces,
 * ranks, keys) in the proportions of a randops_mix: each test keeps its own
 * mix, and its seed draws the same operations as before the generator was
 * shared. randops_record() keeps a core's events (with copies of their
 * strings) in a randops_events. randops_text_state()
 * renders core_walk_state as text, one event a line, so that two states
 * compare with memcmp and print readably when they differ
 * (randops_text_differ).
 */
#ifndef HF_TEST_RANDOPS_H
#define HF_TEST_RANDOPS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* The core that test_replay.c and test_follow.c run the operations on:
 * leases short enough that the steps' clock lets them run out. */
#define RANDOPS_CORE_CONFIG                                                                        \
    {                                                                                              \
        .reservation_ms = 900, .read_lease_ms = 400, .evict = true, .max_pages = 1000,             \
        .max_ranks = 4, .hash_seed = 7, .write_lease_ms = 700, .release_grace_ms = 300             \
    }

/* An xorshift64 generator (every random test here draws from one). */
typedef struct randops_rng {
    uint64_t s;
} randops_rng;

static inline uint64_t randops_next(randops_rng *rng)
{
    rng->s ^= rng->s << 13;
    rng->s ^= rng->s >> 7;
    rng->s ^= rng->s << 17;
    return rng->s;
}

/* A number in [0, n). */
static inline int randops_pick(randops_rng *rng, int n)
{
    return (int)(randops_next(rng) % (uint64_t)n);
}

/* n keys into names[] and keys[]: the first three long (two of 64 hex
 * digits, 70 'L': the packed and the long encodings of a key), then
 * "key-3", "key-4", ... */
static inline void randops_keys(char (*names)[96], hf_slice *keys, int n)
{
    /* every form a key takes in the core (core_internal.h "Key records"):
     * inline, 64 hex packed, external, and `<32|64 hex><suffix>` packed
     * (util/hexkey.h), with the shapes at their bounds */
    static const char *const A = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    static const char *const B = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    for (int i = 0; i < n; i++) {
        switch (i) {
        case 0: snprintf(names[i], 96, "%s", A); break;
        case 1: snprintf(names[i], 96, "%s", B); break;
        case 2: memset(names[i], 'L', 70), names[i][70] = 0; break;
        case 3: snprintf(names[i], 96, "%s-k", A); break; /* SGLang MHA page_first */
        case 5: snprintf(names[i], 96, "%s-v", A); break;
        case 6: snprintf(names[i], 96, "%.32s-k", B); break;  /* 32 hex + suffix */
        case 7: snprintf(names[i], 96, "%s_mamba", B); break; /* an extra pool's */
        case 9: snprintf(names[i], 96, "%sa", A); break;      /* 65 hex: suffix "a" */
        case 10: snprintf(names[i], 96, "%.63s-k", B); break; /* 63 hex: external */
        case 11:
            snprintf(names[i], 96, "%s-k",
                     "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF");
            break;                                                       /* uppercase: external */
        case 12: snprintf(names[i], 96, "%.48s", B); break;              /* 32 hex + a hex suffix */
        case 13: snprintf(names[i], 96, "%s_0123456789abcde", A); break; /* suffix of 16 */
        case 14: snprintf(names[i], 96, "%s_0123456789abcdef", A); break; /* 17: external */
        default: snprintf(names[i], 96, "key-%d", i); break;
        }
        keys[i] = hf_slice_from_cstr(names[i]);
    }
}

#define RANDOPS_MAX_BATCH 6
#define RANDOPS_MAX_KEYS 24

/* What one operation is drawn over: a namespace of ns[0, nns), a rank in
 * [0, ranks), 1 to max_batch (<= RANDOPS_MAX_BATCH) keys of keys[0, nkeys),
 * the key strings in names[]. */
typedef struct randops_space {
    const hf_slice *ns;
    int nns, ranks, max_batch, nkeys;
    char names[RANDOPS_MAX_KEYS][96];
    hf_slice keys[RANDOPS_MAX_KEYS];
} randops_space;

/* The space of test_replay and test_follow: namespaces "kv" and "other",
 * ranks 0-2, 1-4 keys a call of the first nkeys of randops_keys. */
static inline void randops_space_init(randops_space *s, int nkeys)
{
    static const hf_slice ns[2] = {HF_SLICE_LIT("kv"), HF_SLICE_LIT("other")};
    *s = (randops_space){.ns = ns, .nns = 2, .ranks = 3, .max_batch = 4, .nkeys = nkeys};
    randops_keys(s->names, s->keys, nkeys);
}

/* The operations: a draw of 100 picks the first, in this order, whose
 * cumulated weight (randops_mix's writes and reads) exceeds it (the weights
 * add up to at most 100; the rest is RANDOPS_CLEAR_ALL). */
enum {
    RANDOPS_ALLOCATE, /* then confirm most pages, release some */
    RANDOPS_LOOKUP,
    RANDOPS_EXISTS,
    RANDOPS_DELETE,
    RANDOPS_POOL_CLEAR,
    RANDOPS_POOL_EXPIRE,
    RANDOPS_COMPLETE_EXISTS,
    RANDOPS_COMPLETE_LOCATIONS,
    RANDOPS_CLEAR_ALL,
    RANDOPS_OPS
};

/* The answers of one step (randops_step's out[]): each key's page (or
 * flag, for the existence reads), then each allocated key's flag, the pages
 * confirm refused and what core_complete_locations returned. */
enum {
    RANDOPS_OUT_FLAGS = RANDOPS_MAX_BATCH,
    RANDOPS_OUT_REFUSED = 2 * RANDOPS_MAX_BATCH,
    RANDOPS_OUT_RESULT,
    RANDOPS_OUT_LEN
};

/* The proportions of the operations. */
typedef struct randops_mix {
    /* A new pool's pages: pages + [0, span); an existing pool initialized
     * again one time in reinit_one_in. */
    struct {
        int pages, span, reinit_one_in;
    } pools;
    /* The weights, out of 100, of the writes and of the reads. */
    struct {
        int allocate, delete, pool_clear, pool_expire;
    } writes;
    struct {
        int lookup, exists, complete_exists, complete_locations;
    } reads;
    /* One time in how many (0: never): of the draws left for
     * RANDOPS_CLEAR_ALL, all cleared; each allocated page released, else
     * confirmed with a wrong page, else left reserved (unconfirmed); the
     * whole confirmation skipped. */
    struct {
        int clear_all, release, wrong_page, unconfirmed, skip_confirm;
    } one_in;
} randops_mix;

/* The weight of op in mix: 0 for a write when reads_only. */
static inline int randops_weight(const randops_mix *mix, int op, bool reads_only)
{
    switch (op) {
    case RANDOPS_LOOKUP: return mix->reads.lookup;
    case RANDOPS_EXISTS: return mix->reads.exists;
    case RANDOPS_COMPLETE_EXISTS: return mix->reads.complete_exists;
    case RANDOPS_COMPLETE_LOCATIONS: return mix->reads.complete_locations;
    case RANDOPS_ALLOCATE: return reads_only ? 0 : mix->writes.allocate;
    case RANDOPS_DELETE: return reads_only ? 0 : mix->writes.delete;
    case RANDOPS_POOL_CLEAR: return reads_only ? 0 : mix->writes.pool_clear;
    case RANDOPS_POOL_EXPIRE: return reads_only ? 0 : mix->writes.pool_expire;
    default: return 0;
    }
}

/* True one time in n (n == 0: never), drawing a number only for n > 0. */
static inline bool randops_one_in(randops_rng *rng, int n)
{
    return n > 0 && randops_pick(rng, n) == 0;
}

/* The operation a draw picks: over every operation, or (reads_only) over the
 * reads only (lookup, exists and the completeness reads), in their mix's
 * proportions. */
static inline int randops_op(const randops_mix *mix, randops_rng *rng, bool reads_only)
{
    int total = 100;
    if (reads_only) {
        total = 0;
        for (int op = 0; op < RANDOPS_CLEAR_ALL; op++)
            total += randops_weight(mix, op, true);
    }
    int draw = randops_pick(rng, total);
    for (int op = 0; op < RANDOPS_CLEAR_ALL; op++) {
        int weight = randops_weight(mix, op, reads_only);
        if (draw < weight)
            return op;
        draw -= weight;
    }
    return RANDOPS_CLEAR_ALL;
}

/* Allocate the batch, then confirm, release or leave each page as the mix
 * says. */
static inline void randops_allocate(core_pool_t *pool, const randops_mix *mix, randops_rng *rng,
                                    const hf_slice *batch, int n, int64_t now, int64_t *out)
{
    int64_t pages[RANDOPS_MAX_BATCH], cp[RANDOPS_MAX_BATCH], release[RANDOPS_MAX_BATCH];
    bool flags[RANDOPS_MAX_BATCH];
    hf_slice ck[RANDOPS_MAX_BATCH];
    size_t nrel = 0, nconf = 0, refused = 0;
    core_allocate(pool, batch, (size_t)n,
                  randops_pick(rng, 2) ? CORE_ALLOC_PARTIAL : CORE_ALLOC_ALL_OR_NOTHING, now, pages,
                  flags);
    for (int i = 0; i < n; i++) {
        out[i] = pages[i];
        out[RANDOPS_OUT_FLAGS + i] = flags[i];
        if (pages[i] < 0)
            continue;
        if (randops_one_in(rng, mix->one_in.release)) {
            release[nrel++] = pages[i];
        } else if (randops_one_in(rng, mix->one_in.wrong_page)) {
            ck[nconf] = batch[i]; /* refused */
            cp[nconf++] = pages[i] + 1;
        } else if (!randops_one_in(rng, mix->one_in.unconfirmed)) {
            ck[nconf] = batch[i];
            cp[nconf++] = pages[i];
        }
    }
    if (!randops_one_in(rng, mix->one_in.skip_confirm))
        core_confirm(pool, ck, cp, nconf, release, nrel, now, &refused);
    out[RANDOPS_OUT_REFUSED] = (int64_t)refused;
}

/* One random operation, as the store would run it; its answers go to out[]
 * (RANDOPS_OUT_LEN numbers, zero where none; NULL: not kept). A pool not
 * there yet is created. */
static inline void randops_step(core_t *core, const randops_space *space, const randops_mix *mix,
                                randops_rng *rng, int64_t now, bool reads_only, int64_t *out)
{
    int64_t ignored[RANDOPS_OUT_LEN];
    if (!out)
        out = ignored;
    memset(out, 0, RANDOPS_OUT_LEN * sizeof *out);
    hf_slice ns = space->ns[randops_pick(rng, space->nns)];
    uint32_t rank = (uint32_t)randops_pick(rng, space->ranks);
    core_pool_t *pool = core_pool_find(core, ns, rank);
    if (!pool || randops_one_in(rng, mix->pools.reinit_one_in)) {
        core_pool_init(core, ns, rank,
                       (uint64_t)(mix->pools.pages + randops_pick(rng, mix->pools.span)), NULL);
        return;
    }
    hf_slice batch[RANDOPS_MAX_BATCH];
    int64_t pages[RANDOPS_MAX_BATCH];
    bool flags[RANDOPS_MAX_BATCH];
    int n = 1 + randops_pick(rng, space->max_batch);
    for (int i = 0; i < n; i++)
        batch[i] = space->keys[randops_pick(rng, space->nkeys)];
    switch (randops_op(mix, rng, reads_only)) {
    case RANDOPS_ALLOCATE: randops_allocate(pool, mix, rng, batch, n, now, out); break;
    case RANDOPS_LOOKUP:
        core_lookup(pool, batch, (size_t)n, now, pages);
        memcpy(out, pages, (size_t)n * sizeof *pages);
        break;
    case RANDOPS_EXISTS:
        core_exists(pool, batch, (size_t)n, now, flags);
        for (int i = 0; i < n; i++)
            out[i] = flags[i];
        break;
    case RANDOPS_DELETE: core_delete(pool, batch, (size_t)n, now); break;
    case RANDOPS_POOL_CLEAR: core_pool_clear(pool, now); break;
    case RANDOPS_POOL_EXPIRE: core_pool_expire(pool, now); break;
    case RANDOPS_COMPLETE_EXISTS:
        core_complete_exists(core, ns, batch, (size_t)n, now, flags);
        for (int i = 0; i < n; i++)
            out[i] = flags[i];
        break;
    case RANDOPS_COMPLETE_LOCATIONS:
        out[RANDOPS_OUT_RESULT] = core_complete_locations(core, ns, rank, batch, (size_t)n, now,
                                                          pages);
        memcpy(out, pages, (size_t)n * sizeof *pages);
        break;
    default:
        if (randops_one_in(rng, mix->one_in.clear_all))
            core_clear_all(core);
        break;
    }
}

/* ------------------------------------------------------ recorded events */

/* An event with copies of its strings (an observer's point into the core). */
typedef struct randops_event {
    core_event ev;
    char *ns;
    char *key;
} randops_event;

typedef struct randops_events {
    randops_event *items;
    size_t len, cap;
} randops_events;

/* A core observer: a copy of ev added to the randops_events ctx. */
static inline void randops_record(void *ctx, const core_event *ev)
{
    randops_events *log = ctx;
    if (log->len == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 1024;
        log->items = realloc(log->items, log->cap * sizeof *log->items);
    }
    randops_event *r = &log->items[log->len++];
    r->ev = *ev;
    r->ns = malloc(ev->ns.len + 1);
    memcpy(r->ns, ev->ns.ptr, ev->ns.len);
    r->key = malloc(ev->key.len + 1);
    memcpy(r->key, ev->key.ptr, ev->key.len);
    r->ev.ns = (hf_slice){r->ns, ev->ns.len};
    r->ev.key = (hf_slice){r->key, ev->key.len};
}

static inline void randops_events_free(randops_events *log)
{
    for (size_t i = 0; i < log->len; i++) {
        free(log->items[i].ns);
        free(log->items[i].key);
    }
    free(log->items);
    memset(log, 0, sizeof *log);
}

/* ------------------------------------------------------ state as text */

typedef struct randops_text {
    char *buf; /* NUL-terminated */
    size_t len, cap;
} randops_text;

static inline void randops_text_add(randops_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->buf = realloc(t->buf, t->cap);
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = 0;
}

/* A core_walk_state observer: one line a durable event. */
static inline void randops_text_event(void *ctx, const core_event *ev)
{
    char line[1200];
    int n = snprintf(line, sizeof line, "%d %.*s %u %llu %.*s %lld\n", ev->type, (int)ev->ns.len,
                     ev->ns.ptr, ev->rank, (unsigned long long)ev->page, (int)ev->key.len,
                     ev->key.ptr, (long long)ev->deadline);
    randops_text_add(ctx, line, (size_t)n);
}

/* The durable state of core, a line an event (free with free(t.buf)). */
static inline randops_text randops_text_state(const core_t *core)
{
    randops_text t = {NULL, 0, 0};
    randops_text_add(&t, "", 0);
    core_walk_state(core, randops_text_event, &t);
    return t;
}

static inline bool randops_text_same(const randops_text *a, const randops_text *b)
{
    return a->len == b->len && memcmp(a->buf, b->buf, a->len) == 0;
}

/* Whether two states' texts differ; if they do, both are printed (their
 * first 3,000 bytes) under their names. Frees both texts. */
static inline bool randops_text_differ(randops_text a, randops_text b, const char *name_a,
                                       const char *name_b)
{
    bool same = randops_text_same(&a, &b);
    if (!same)
        printf("  %s:\n%.3000s\n  %s:\n%.3000s\n", name_a, a.buf, name_b, b.buf);
    free(a.buf);
    free(b.buf);
    return !same;
}

#endif
