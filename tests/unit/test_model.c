/*
 * test_model.c: a store engine against a deliberately simple reference model.
 *
 * Long random sequences of every operation (allocate in both modes,
 * confirm with right and wrong pages, release, exists, lookup, delete, pool
 * clear, clear all, completeness reads, initialization) run on several ranks
 * and two namespaces with tiny pools, short leases and a clock that jumps,
 * so that exhaustion, eviction and lease expiry happen all the time.
 *
 * The model is arrays and linear scans: each page has a state, a key, a
 * deadline, a use count and a demotion number; each pool a clock hand.
 * Eviction follows core.h "Recency" to the letter: the most recently
 * demoted evictable page, else the clock (the hand takes the first owned
 * evictable page whose count is 0 and lowers the count of every other owned
 * page it passes; a full turn without an evictable page takes nothing, and
 * the allocation then sweeps no more). The free page
 * the engine picks is not specified by the contract, so the model accepts
 * any page it holds FREE; everything else (hits, -1, which page is evicted,
 * refusals, presence, completeness) must match exactly. After every step
 * the engine's invariant check runs, every pool's size and key count are
 * compared and, when the engine can show its pages, the whole page table.
 *
 * The engine under test is driven only through store_t (store->ops) on a
 * fake clock (the global `now`), so that the same model checks every
 * engine: HF3FS_TEST_ENGINE names it (tests/engines.h; default: the
 * embedded engine).
 *
 * Stripes (HF3FS_TEST_STRIPES=S over Redis: docs/redis-module.md
 * "Stripes"): a pool's page p belongs to stripe p % S, a key to stripe
 * wire_stripe_of(key, S), and each stripe is a core of its own: free
 * pages, eviction and its clock hand are per stripe (the model keeps
 * global page numbers and one hand per stripe). An all-or-nothing
 * allocation that one stripe cannot serve is undone on the others after
 * they ran it (core_cancel): their evictions stay, their reservations
 * are free again, their hits' write leases end.
 */
#include <stdlib.h>

#include "check.h"
#include "core/core.h"
#include "engines.h"
#include "randops.h"
#include "wire/wire.h"

enum { NNS = 2, NRANKS = 3, MAXP = 6, NKEYS = 14, STEPS = 200000, MAXS = 8 };

static const hf_slice NS[NNS] = {HF_SLICE_LIT("kv"), HF_SLICE_LIT("ns2")};
static const int64_t RESERVE_MS = 1000, LEASE_MS = 500, WRITE_LEASE_MS = 700, GRACE_MS = 300;

static char key_names[NKEYS][96];
static hf_slice key_slices[NKEYS];

typedef struct mpage {
    core_page_state state;
    int key;
    int64_t deadline; /* reservation end, lease end (read or write), drain end */
    int use;          /* use count, 0..CORE_USE_MAX */
    int64_t demoted;  /* 0, or the demotion's number (the highest goes first) */
    int writers;      /* write lease (docs/protocol.md "Leases"): writers not done, */
    int64_t wend;     /* until wend; none once wend <= now */
} mpage;

typedef struct mpool {
    bool exists;
    int num_pages;
    int hand[MAXS]; /* per stripe, a local page */
    mpage pages[MAXP];
} mpool;

static int S = 1; /* the engine's stripes per namespace */

static int stripe_pages(const mpool *p, int st)
{
    return (int)wire_stripe_pages((uint64_t)p->num_pages,
                                  (wire_stripe){(uint32_t)S, (uint32_t)st, WIRE_PLACE_WINDOW});
}

static mpool model[NNS][NRANKS];
static int64_t demote_seq = 0, now;
static bool m_evict;

/* What the run exercised: a run that never evicted or never ran dry would
 * prove little, so the tests assert these are all non-zero. */
static struct {
    long evictions, no_page, hits, refusals, drains, expiries, write_leases;
    long demoted_taken, clock_taken, clock_turns_without; /* which rule of "Recency" took it */
    long rollbacks; /* all-or-nothing allocations undone on stripes that served them */
} seen;
static test_engine engine;
static randops_rng rng = {88172645463325252ull};

static int pick(int n)
{
    return randops_pick(&rng, n);
}

/* ------------------------------------------------------------ the model */

static void m_expire(mpool *p)
{
    for (int i = 0; i < p->num_pages; i++) {
        mpage *pg = &p->pages[i];
        if ((pg->state == CORE_PAGE_RESERVED || pg->state == CORE_PAGE_DRAINING) &&
            pg->deadline <= now) {
            seen.expiries += pg->state == CORE_PAGE_RESERVED;
            pg->state = CORE_PAGE_FREE;
        }
    }
}

static int m_owned(const mpool *p, int key)
{
    for (int i = 0; i < p->num_pages; i++)
        if (p->pages[i].state == CORE_PAGE_OWNED && p->pages[i].key == key)
            return i;
    return -1;
}

/* A use: the count goes up by one (at most CORE_USE_MAX); no longer demoted. */
static void m_touch(mpool *p, int page)
{
    if (p->pages[page].use < CORE_USE_MAX)
        p->pages[page].use++;
    p->pages[page].demoted = 0;
}

static void m_lease(mpool *p, int page)
{
    if (now + LEASE_MS > p->pages[page].deadline)
        p->pages[page].deadline = now + LEASE_MS;
    m_touch(p, page);
}

static bool m_evictable(const mpool *p, int page, const bool *protected)
{
    const mpage *pg = &p->pages[page];
    return pg->state == CORE_PAGE_OWNED && pg->deadline <= now && !protected[page];
}

/* The page of stripe st that eviction takes (core.h "Recency"), or -1;
 * *exhausted is set when a clock sweep found nothing (the call sweeps no
 * more). */
static int m_victim(mpool *p, int st, const bool *protected, bool *exhausted)
{
    int best = -1, owned = 0, n = stripe_pages(p, st);
    for (int l = 0; l < n; l++) {
        int i = l * S + st;
        owned += p->pages[i].state == CORE_PAGE_OWNED;
        if (p->pages[i].state == CORE_PAGE_OWNED && p->pages[i].demoted &&
            m_evictable(p, i, protected) &&
            (best < 0 || p->pages[i].demoted > p->pages[best].demoted))
            best = i;
    }
    seen.demoted_taken += best >= 0;
    if (best >= 0 || owned == 0 || *exhausted)
        return best;
    /* the clock: a full turn without an evictable page takes nothing */
    bool seen_evictable = false;
    for (int steps = 0;; steps++) {
        if (steps > 0 && steps % n == 0 && !seen_evictable) {
            *exhausted = true;
            seen.clock_turns_without++;
            return -1;
        }
        int page = p->hand[st] * S + st;
        p->hand[st] = (p->hand[st] + 1) % n;
        mpage *pg = &p->pages[page];
        if (pg->state != CORE_PAGE_OWNED)
            continue;
        if (m_evictable(p, page, protected)) {
            seen_evictable = true;
            if (pg->use == 0) {
                seen.clock_taken++;
                return page;
            }
        }
        if (pg->use > 0)
            pg->use--;
    }
}

static int m_free_count(const mpool *p, int st)
{
    int n = 0;
    for (int i = st; i < p->num_pages; i += S)
        n += p->pages[i].state == CORE_PAGE_FREE;
    return n;
}

static void m_demote_others(int ns, int rank, int key)
{
    for (int r = 0; r < NRANKS; r++) {
        mpool *o = &model[ns][r];
        if (r == rank || !o->exists)
            continue;
        int page = m_owned(o, key);
        if (page >= 0 && o->pages[page].deadline <= now)
            o->pages[page].demoted = ++demote_seq;
    }
}

/* One more writer of a hit of a vLLM allocation that got all its pages. */
static void m_write_lease(mpool *p, int page)
{
    mpage *pg = &p->pages[page];
    pg->writers = (pg->wend > now ? pg->writers : 0) + 1;
    if (now + WRITE_LEASE_MS > pg->wend)
        pg->wend = now + WRITE_LEASE_MS;
    if (pg->wend > pg->deadline)
        pg->deadline = pg->wend;
    seen.write_leases++;
}

/* A writer of the owned page confirmed it; the last one leaves at most a
 * read lease from now. */
static void m_write_done(mpool *p, int page)
{
    mpage *pg = &p->pages[page];
    if (pg->wend <= now || pg->writers == 0 || --pg->writers > 0)
        return;
    pg->wend = 0;
    if (now + LEASE_MS < pg->deadline)
        pg->deadline = now + LEASE_MS;
}

static void m_disown(mpool *p, int page)
{
    mpage *pg = &p->pages[page];
    pg->writers = 0;
    pg->wend = 0;
    pg->use = 0;
    pg->demoted = 0;
    pg->state = pg->deadline > now ? CORE_PAGE_DRAINING : CORE_PAGE_FREE;
    seen.drains += pg->state == CORE_PAGE_DRAINING;
    pg->key = -1;
}

/* ----------------------------------- the driver: the engine under test */

/* A pool of the engine: (namespace, rank). */
typedef struct pool_ref {
    hf_slice ns;
    uint32_t rank;
} pool_ref;

static pool_ref pool_of(int ns, int rank)
{
    return (pool_ref){NS[ns], (uint32_t)rank};
}

/* The engine's clock: the model's. */
static int64_t model_now_ms(void *ctx)
{
    return now;
}

static void expect_ok(int rc, const char *op)
{
    if (rc != STORE_OK)
        TEST_FAIL("%s answered %d (%s)", op, rc, store_strerror(rc));
}

/* The figures the engine reports for each pool of the model's namespaces. */
typedef struct engine_pools {
    bool exists[NNS][NRANKS];
    core_pool_stats stats[NNS][NRANKS];
} engine_pools;

static void note_pool(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *stats)
{
    engine_pools *pools = ctx;
    for (int i = 0; i < NNS; i++) {
        if (hf_slice_eq(ns, NS[i]) && rank < NRANKS) {
            pools->exists[i][rank] = true;
            pools->stats[i][rank] = *stats;
        }
    }
}

static void engine_pools_read(engine_pools *pools)
{
    memset(pools, 0, sizeof *pools);
    expect_ok(engine.store->ops->stats(engine.store, note_pool, pools), "stats");
}

/* Refusals the engine counted in a pool so far (confirmations and releases). */
static uint64_t refusals_of(pool_ref pool)
{
    engine_pools pools;
    engine_pools_read(&pools);
    for (int i = 0; i < NNS; i++) {
        if (!hf_slice_eq(pool.ns, NS[i]) || !pools.exists[i][pool.rank])
            continue;
        uint64_t n = 0;
        for (int r = 0; r < CORE_REFUSE_COUNT; r++)
            n += pools.stats[i][pool.rank].refused_confirms[r] +
                 pools.stats[i][pool.rank].refused_releases[r];
        return n;
    }
    return 0;
}

static void e_allocate(pool_ref pool, const hf_slice *keys, size_t n, core_alloc_mode mode,
                       int64_t *pages, bool *existed)
{
    expect_ok(engine.store->ops->allocate(engine.store, pool.ns, pool.rank, keys, n, mode, pages,
                                          existed),
              "allocate");
}

/* *refused: how many confirmations and releases of the call were refused. */
static void e_confirm(pool_ref pool, const hf_slice *keys, const int64_t *pages, size_t n,
                      const int64_t *release, size_t nrel, size_t *refused)
{
    uint64_t before = refusals_of(pool);
    expect_ok(
        engine.store->ops->confirm(engine.store, pool.ns, pool.rank, keys, pages, n, release, nrel),
        "confirm");
    *refused = (size_t)(refusals_of(pool) - before);
}

static void e_exists(pool_ref pool, const hf_slice *keys, size_t n, bool *present)
{
    expect_ok(engine.store->ops->exists(engine.store, pool.ns, pool.rank, keys, n, present),
              "exists");
}

static void e_lookup(pool_ref pool, const hf_slice *keys, size_t n, int64_t *pages)
{
    expect_ok(engine.store->ops->lookup(engine.store, pool.ns, pool.rank, keys, n, pages),
              "lookup");
}

static void e_delete(pool_ref pool, const hf_slice *keys, size_t n)
{
    expect_ok(engine.store->ops->delete_keys(engine.store, pool.ns, pool.rank, keys, n),
              "delete_keys");
}

static void e_pool_clear(pool_ref pool)
{
    expect_ok(engine.store->ops->clear_pool(engine.store, pool.ns, pool.rank), "clear_pool");
}

static void e_clear_all(void)
{
    expect_ok(engine.store->ops->clear_all(engine.store), "clear_all");
}

static void e_complete_exists(hf_slice ns, const hf_slice *keys, size_t n, bool *present)
{
    expect_ok(engine.store->ops->complete_exists(engine.store, ns, keys, n, present),
              "complete_exists");
}

static int e_complete_locations(hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                                int64_t *pages)
{
    return engine.store->ops->complete_locations(engine.store, ns, rank, keys, n, pages);
}

/* 1 if the pool was created, 0 if it existed, else the engine's error. */
static int e_pool_init(hf_slice ns, uint32_t rank, uint64_t num_pages, uint64_t *existing)
{
    bool created = false;
    int rc = engine.store->ops->init_pool(engine.store, ns, rank, num_pages, &created, existing);
    return rc != STORE_OK ? rc : created;
}

/* ------------------------------------------------------- the comparison */

static void compare_all(long step)
{
    char err[256];
    if (engine.store->ops->check(engine.store, err, sizeof err) != 0)
        TEST_FAIL("step %ld: invariant broken: %s", step, err);
    engine_pools pools;
    engine_pools_read(&pools);
    for (int ns = 0; ns < NNS; ns++) {
        for (int r = 0; r < NRANKS; r++) {
            mpool *m = &model[ns][r];
            if (!m->exists) {
                if (pools.exists[ns][r])
                    TEST_FAIL("step %ld: pool %d/%d exists in the engine only", step, ns, r);
                continue;
            }
            if (!pools.exists[ns][r])
                TEST_FAIL("step %ld: pool %d/%d missing in the engine", step, ns, r);
            m_expire(m);
            uint64_t owned = 0;
            for (int i = 0; i < m->num_pages; i++)
                owned += m->pages[i].state == CORE_PAGE_OWNED;
            if (pools.stats[ns][r].num_pages != (uint64_t)m->num_pages ||
                pools.stats[ns][r].owned != owned)
                TEST_FAIL("step %ld: pool %d/%d: engine %" PRIu64 " pages %" PRIu64 " keys, "
                          "model %d pages %" PRIu64 " keys",
                          step, ns, r, pools.stats[ns][r].num_pages, pools.stats[ns][r].owned,
                          m->num_pages, owned);
            if (!engine.page)
                continue;
            for (int i = 0; i < m->num_pages; i++) {
                hf_slice key;
                char buf[CORE_KEY_TEXT_MAX];
                core_page_state st = engine.page(&engine, NS[ns], (uint32_t)r, (uint64_t)i, now,
                                                 &key, buf);
                if (st != m->pages[i].state)
                    TEST_FAIL("step %ld: pool %d/%d page %d: engine state %d, model %d", step, ns,
                              r, i, st, m->pages[i].state);
                if ((st == CORE_PAGE_OWNED || st == CORE_PAGE_RESERVED) &&
                    !hf_slice_eq(key, key_slices[m->pages[i].key]))
                    TEST_FAIL("step %ld: pool %d/%d page %d holds another key", step, ns, r, i);
            }
        }
    }
}

/* ------------------------------------------------------- the operations */

/* One stripe's part of an allocation (the keys of `keys` in stripe st), as
 * its core runs it; *give: whether its new keys got pages (all or nothing:
 * all of them could). */
static void m_allocate_stripe(long step, int ns, int rank, mpool *m, int st, const int *keys,
                              const int64_t *pages, const bool *existed, int n,
                              core_alloc_mode mode, bool *give_out)
{
    bool protected[MAXP] = {false};
    int expect[5], first[5], need = 0;
    bool mine[5];
    for (int i = 0; i < n; i++) {
        mine[i] = (S == 1 ? 0 : (int)wire_stripe_of(key_slices[keys[i]], (uint32_t)S)) == st;
        first[i] = i;
        for (int j = 0; j < i; j++)
            if (keys[j] == keys[i]) {
                first[i] = j;
                break;
            }
        if (first[i] != i || !mine[i])
            continue;
        expect[i] = m_owned(m, keys[i]);
        if (expect[i] >= 0) {
            m_touch(m, expect[i]);
            protected[expect[i]] = true;
        } else {
            need++;
        }
    }
    bool give = true;
    if (mode == CORE_ALLOC_ALL_OR_NOTHING) {
        int avail = m_free_count(m, st);
        for (int i = st; i < m->num_pages && m_evict; i += S)
            avail += m->pages[i].state == CORE_PAGE_OWNED && m->pages[i].deadline <= now &&
                     !protected[i];
        give = avail >= need;
    }
    *give_out = give;
    bool lease_hits = mode == CORE_ALLOC_ALL_OR_NOTHING && give, exhausted = false;
    for (int i = 0; i < n; i++) {
        if (!mine[i])
            continue;
        if (first[i] != i) {
            if (pages[i] != pages[first[i]] || existed[i] != existed[first[i]])
                TEST_FAIL("step %ld: repeated key answered differently", step);
            continue;
        }
        if (expect[i] >= 0) {
            seen.hits++;
            if (lease_hits)
                m_write_lease(m, expect[i]);
            if (pages[i] != expect[i] || !existed[i])
                TEST_FAIL("step %ld: hit key %d: core page %lld, model %d", step, keys[i],
                          (long long)pages[i], expect[i]);
            continue;
        }
        if (existed[i])
            TEST_FAIL("step %ld: new key reported as existing", step);
        int page = -1;
        if (give && m_free_count(m, st) > 0 && pages[i] < 0 && S > 1 &&
            mode == CORE_ALLOC_ALL_OR_NOTHING) {
            /* taken, then given back by core_cancel (op_allocate checks
             * that another stripe failed): which FREE page is not said */
            for (page = st; m->pages[page].state != CORE_PAGE_FREE; page += S)
                ;
        } else if (give && m_free_count(m, st) > 0) {
            page = (int)pages[i];
            if (page < 0 || page >= m->num_pages || page % S != st ||
                m->pages[page].state != CORE_PAGE_FREE)
                TEST_FAIL("step %ld: core handed out page %d, which the model holds in state %d",
                          step, page,
                          page >= 0 && page < m->num_pages ? (int)m->pages[page].state : -1);
        } else if (give && m_evict) {
            page = m_victim(m, st, protected, &exhausted);
            if (page >= 0) {
                seen.evictions++;
                m_demote_others(ns, rank, m->pages[page].key);
                m->pages[page].key = -1;
            }
        }
        seen.no_page += page < 0;
        if (pages[i] != page && !(mode == CORE_ALLOC_ALL_OR_NOTHING && S > 1 && pages[i] == -1))
            TEST_FAIL("step %ld: new key %d: core page %lld, model %d (mode %d)", step, keys[i],
                      (long long)pages[i], page, mode);
        if (page >= 0)
            m->pages[page] = (mpage){CORE_PAGE_RESERVED, keys[i], now + RESERVE_MS, 0, 0, 0, 0};
    }
}

static void op_allocate(long step, int ns, int rank, mpool *m, pool_ref pool)
{
    int n = 1 + pick(5);
    int keys[5];
    hf_slice slices[5];
    int64_t pages[5];
    bool existed[5];
    core_alloc_mode mode = pick(2) ? CORE_ALLOC_PARTIAL : CORE_ALLOC_ALL_OR_NOTHING;
    for (int i = 0; i < n; i++) {
        keys[i] = pick(NKEYS);
        slices[i] = key_slices[keys[i]];
    }
    e_allocate(pool, slices, (size_t)n, mode, pages, existed);

    m_expire(m);
    /* Each stripe as its core runs it; the engine's answer holds -1 for
     * every new key if one stripe could not serve all of its own. */
    bool give[MAXS], all = true;
    mpool before = *m;
    for (int st = 0; st < S; st++) {
        m_allocate_stripe(step, ns, rank, m, st, keys, pages, existed, n, mode, &give[st]);
        all = all && give[st];
    }
    if (mode != CORE_ALLOC_ALL_OR_NOTHING || S == 1)
        return;
    for (int i = 0; i < n; i++)
        if (!existed[i] && (pages[i] >= 0) != all)
            TEST_FAIL("step %ld: new key %d: core page %lld, though %s", step, keys[i],
                      (long long)pages[i],
                      all ? "every stripe could serve" : "one stripe could not");
    if (all)
        return;
    for (int st = 0; st < S; st++)
        seen.rollbacks += give[st];
    /* core_cancel on the stripes that served: their reservations free
     * again, their hits' write leases ended. */
    for (int i = 0; i < m->num_pages; i++) {
        mpage *pg = &m->pages[i];
        if (!give[i % S])
            continue;
        if (pg->state == CORE_PAGE_RESERVED && before.pages[i].state != CORE_PAGE_RESERVED)
            *pg = (mpage){CORE_PAGE_FREE, -1, 0, 0, 0, 0, 0};
    }
    for (int i = 0; i < n; i++) {
        bool dup = false;
        for (int j = 0; j < i; j++)
            dup = dup || keys[j] == keys[i];
        if (!dup && existed[i] && pages[i] >= 0 && give[pages[i] % S])
            m_write_done(m, (int)pages[i]);
    }
}

static void op_confirm(long step, mpool *m, pool_ref pool)
{
    int n = 1 + pick(3), nrel = pick(3);
    int keys[4];
    hf_slice slices[4];
    int64_t pages[4], release[3];
    m_expire(m);
    for (int i = 0; i < n; i++) {
        keys[i] = pick(NKEYS);
        pages[i] = pick(m->num_pages + 2) - 1;
        /* mostly confirm a real reservation (sometimes with the wrong key) */
        int p = pick(m->num_pages);
        for (int tries = 0; tries < MAXP && m->pages[p].state != CORE_PAGE_RESERVED; tries++)
            p = (p + 1) % m->num_pages;
        if (pick(4) && m->pages[p].state == CORE_PAGE_RESERVED) {
            pages[i] = p;
            if (pick(8))
                keys[i] = m->pages[p].key;
        }
        slices[i] = key_slices[keys[i]];
    }
    for (int i = 0; i < nrel; i++)
        release[i] = pick(m->num_pages + 2) - 1;
    size_t refused = 0, expect_refused = 0;
    e_confirm(pool, slices, pages, (size_t)n, release, (size_t)nrel, &refused);

    for (int i = 0; i < n; i++) {
        int64_t p = pages[i];
        if (p < 0 || p >= m->num_pages) {
            expect_refused++;
            continue;
        }
        mpage *pg = &m->pages[p];
        if (pg->state == CORE_PAGE_OWNED && pg->key == keys[i]) {
            m_write_done(m, (int)p);
            m_touch(m, (int)p);
        } else if (pg->state == CORE_PAGE_RESERVED && pg->key == keys[i]) {
            int owned = m_owned(m, keys[i]);
            if (owned >= 0) {
                pg->state = CORE_PAGE_FREE;
                m_touch(m, owned);
            } else {
                *pg = (mpage){CORE_PAGE_OWNED, keys[i], 0, CORE_USE_INSERT, 0, 0, 0};
            }
        } else {
            expect_refused++;
        }
    }
    for (int i = 0; i < nrel; i++) {
        int64_t p = release[i];
        if (p >= 0 && p < m->num_pages && m->pages[p].state == CORE_PAGE_RESERVED)
            m->pages[p] = (mpage){CORE_PAGE_DRAINING, -1, now + GRACE_MS, 0, 0, 0, 0};
        else
            expect_refused++;
    }
    seen.refusals += (long)expect_refused;
    if (refused != expect_refused)
        TEST_FAIL("step %ld: confirm refused %zu, model %zu", step, refused, expect_refused);
}

static void op_read(long step, mpool *m, pool_ref pool, bool as_exists)
{
    int n = 1 + pick(4);
    hf_slice slices[4];
    int keys[4];
    int64_t pages[4];
    bool present[4];
    for (int i = 0; i < n; i++) {
        keys[i] = pick(NKEYS);
        slices[i] = key_slices[keys[i]];
    }
    if (as_exists)
        e_exists(pool, slices, (size_t)n, present);
    else
        e_lookup(pool, slices, (size_t)n, pages);
    m_expire(m);
    for (int i = 0; i < n; i++) {
        int page = m_owned(m, keys[i]);
        if (page >= 0)
            m_lease(m, page);
        if (as_exists ? present[i] != (page >= 0) : pages[i] != page)
            TEST_FAIL("step %ld: read of key %d disagrees (model page %d)", step, keys[i], page);
    }
}

static void op_delete(int ns, int rank, mpool *m, pool_ref pool)
{
    int n = 1 + pick(3);
    hf_slice slices[3];
    int keys[3];
    for (int i = 0; i < n; i++) {
        keys[i] = pick(NKEYS);
        slices[i] = key_slices[keys[i]];
    }
    e_delete(pool, slices, (size_t)n);
    m_expire(m);
    for (int i = 0; i < n; i++) {
        int page = m_owned(m, keys[i]);
        if (page < 0)
            continue;
        m_disown(m, page);
        m_demote_others(ns, rank, keys[i]);
    }
}

static void op_clear_pool(mpool *m, pool_ref pool)
{
    e_pool_clear(pool);
    m_expire(m);
    for (int i = 0; i < m->num_pages; i++) {
        if (m->pages[i].state == CORE_PAGE_OWNED)
            m_disown(m, i);
        else if (m->pages[i].state == CORE_PAGE_RESERVED)
            m->pages[i].state = CORE_PAGE_FREE;
    }
}

/* vLLM completeness: every existing pool of the namespace owns the key. */
static void op_complete(long step, int ns, int rank)
{
    int n = 1 + pick(3);
    hf_slice slices[3];
    int keys[3];
    int64_t pages[3];
    bool present[3];
    bool locations = model[ns][rank].exists && pick(2);
    for (int i = 0; i < n; i++) {
        keys[i] = pick(NKEYS);
        slices[i] = key_slices[keys[i]];
    }
    if (locations)
        CHECK_EQ(e_complete_locations(NS[ns], (uint32_t)rank, slices, (size_t)n, pages), 0);
    else
        e_complete_exists(NS[ns], slices, (size_t)n, present);
    int npools = 0;
    for (int r = 0; r < NRANKS; r++)
        if (model[ns][r].exists) {
            m_expire(&model[ns][r]);
            npools++;
        }
    for (int i = 0; i < n; i++) {
        bool complete = npools > 0;
        for (int r = 0; r < NRANKS; r++)
            if (model[ns][r].exists && m_owned(&model[ns][r], keys[i]) < 0)
                complete = false;
        int64_t expect = -1;
        if (complete) {
            for (int r = 0; r < NRANKS; r++)
                if (model[ns][r].exists)
                    m_lease(&model[ns][r], m_owned(&model[ns][r], keys[i]));
            if (locations)
                expect = m_owned(&model[ns][rank], keys[i]);
        }
        if (locations ? pages[i] != expect : present[i] != complete)
            TEST_FAIL("step %ld: completeness of key %d disagrees", step, keys[i]);
    }
}

static void op_init(int ns, int rank)
{
    int size = 1 + pick(MAXP);
    uint64_t existing = 0;
    int rc = e_pool_init(NS[ns], (uint32_t)rank, (uint64_t)size, &existing);
    mpool *m = &model[ns][rank];
    if (m->exists) {
        CHECK_EQ(rc, 0);
        CHECK_EQ(existing, m->num_pages);
        return;
    }
    CHECK_EQ(rc, 1);
    memset(m, 0, sizeof *m);
    m->exists = true;
    m->num_pages = size;
    for (int i = 0; i < size; i++)
        m->pages[i].key = -1;
}

static void step_once(long step)
{
    now += pick(10) < 7 ? pick(60) : pick(700);
    int ns = pick(NNS), rank = pick(NRANKS);
    mpool *m = &model[ns][rank];
    pool_ref pool = pool_of(ns, rank);
    int op = pick(100);
    if (op < 3 || !m->exists) {
        op_init(ns, rank);
        return;
    }
    if (op < 25)
        op_allocate(step, ns, rank, m, pool);
    else if (op < 60)
        op_confirm(step, m, pool);
    else if (op < 75)
        op_read(step, m, pool, pick(2));
    else if (op < 84)
        op_delete(ns, rank, m, pool);
    else if (op < 85)
        op_clear_pool(m, pool);
    else if (op < 97)
        op_complete(step, ns, rank);
    else if (op == 97 && pick(50) == 0) {
        e_clear_all();
        memset(model, 0, sizeof model);
    } else {
        op_read(step, m, pool, true);
    }
}

static void run_model(bool evict, uint64_t seed)
{
    core_config cfg = {.reservation_ms = RESERVE_MS,
                       .read_lease_ms = LEASE_MS,
                       .write_lease_ms = WRITE_LEASE_MS,
                       .release_grace_ms = GRACE_MS,
                       .evict = evict,
                       .max_pages = 1000,
                       .max_ranks = NRANKS,
                       .hash_seed = seed};
    store_clock clock = {model_now_ms, NULL};
    char err[256];
    if (test_engine_open(&engine, test_engine_name(), &cfg, &clock, err, sizeof err) != 0)
        TEST_FAIL("%s", err);
    m_evict = evict;
    const char *stripes = getenv("HF3FS_TEST_STRIPES");
    S = strcmp(engine.name, "mem") != 0 && stripes && *stripes ? atoi(stripes) : 1;
    if (S < 1 || S > MAXS)
        TEST_FAIL("HF3FS_TEST_STRIPES=%s: 1 to %d", stripes, MAXS);
    memset(&seen, 0, sizeof seen);
    memset(model, 0, sizeof model);
    rng.s = seed;
    now = 1000000;
    /* engines over the network run fewer steps; the thresholds scale */
    long steps = engine.steps ? engine.steps : STEPS, k = steps / 200;
    for (long step = 0; step < steps; step++) {
        step_once(step);
        compare_all(step);
    }
    printf("  %s: %ld steps, %d stripe(s)\n", engine.name, steps, S);
    test_engine_close(&engine);
    printf("  seen: %ld evictions, %ld keys without a page, %ld hits, %ld refusals, "
           "%ld drains, %ld expired reservations, %ld write leases\n",
           seen.evictions, seen.no_page, seen.hits, seen.refusals, seen.drains, seen.expiries,
           seen.write_leases);
    CHECK(evict ? seen.evictions > k : seen.evictions == 0);
    CHECK(seen.no_page > k && seen.hits > k && seen.refusals > k);
    CHECK(seen.drains > 3 * k / 100 && seen.expiries > k && seen.write_leases > k);
    printf("  recency: %ld demoted pages taken, %ld by the clock, %ld clock turns without one; "
           "%ld stripe rollbacks\n",
           seen.demoted_taken, seen.clock_taken, seen.clock_turns_without, seen.rollbacks);
    CHECK(S == 1 ? seen.rollbacks == 0 : seen.rollbacks > k);
    CHECK(evict ? seen.demoted_taken > k / 10 && seen.clock_taken > k &&
                      seen.clock_turns_without > k / 10
                : seen.demoted_taken + seen.clock_taken == 0);
}

TEST(random_operations_with_clock_eviction_match_the_reference_model)
{
    run_model(true, 0x9e3779b97f4a7c15ull);
}

TEST(random_operations_without_eviction_match_the_reference_model)
{
    run_model(false, 0x2545f4914f6cdd1dull);
}

TEST(random_operations_with_another_seed_match_the_reference_model)
{
    run_model(true, 0xda942042e4dd58b5ull);
}

int main(int argc, char **argv)
{
    TEST_SELECT(argc, argv);
    randops_keys(key_names, key_slices, NKEYS);
    printf("engine under test: %s\n", test_engine_name());
    RUN(random_operations_with_clock_eviction_match_the_reference_model);
    RUN(random_operations_without_eviction_match_the_reference_model);
    RUN(random_operations_with_another_seed_match_the_reference_model);
    if (engine.store)
        test_engine_close(&engine);
    return TEST_SUMMARY();
}
