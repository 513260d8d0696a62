/*
 * settle.c: allocations whose outcome is unknown, settled once their node
 * answers again (docs/redis-module.md, "Settling an outcome unknown").
 *
 * Every HF3FS.ALLOC carries an id, unique to this front end's call (a
 * random 63-bit base drawn at open, plus a counter). When a stripe's ALLOC
 * may have taken effect while no client was given its pages (its answer
 * lost, WAIT short of replicas, or the HF3FS.CANCEL that was to undo it
 * failed), ops.c queues (layout, stripe, rank, id) here. A thread of this
 * store sends HF3FS.SETTLE <stripe key> now cfg rank id for every queued
 * item, all at once, every SETTLE_PERIOD_MS while the queue is not empty:
 * the module frees the reservations that allocation made and that nothing
 * moved since (its ledger), and answers how many. An item leaves the queue
 * when SETTLE is answered and acknowledged (STORE_OK), when its pool or
 * namespace is gone (nothing left to free), or after the reservation lease
 * (what is left has expired anyway); while the node does not answer, or
 * WAIT is short of replicas (the SETTLE applied but not acknowledged; sent
 * again, it frees nothing more), it stays and is sent again.
 *
 * Safety: the client of such an allocation was answered 507 (or -1 for
 * every new key), so it holds none of its pages; the ledger names only the
 * reservations the allocation itself made and that were neither confirmed,
 * released nor expired since, so no page that a client was told about, and
 * none confirmed, is freed. SETTLE is idempotent: sending it again frees
 * nothing more.
 */
#include "store/redis/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "util/fiber.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/log.h"
#include "util/xalloc.h"

/* How often the queue is sent while it is not empty. */
#define SETTLE_PERIOD_MS 200
/* Items sent in one round at most (the rest in the next rounds). */
#define SETTLE_BATCH 1024
/* Items queued at most: past it a new one is not queued (its reservations
 * then end with their lease), with a warning. */
#define SETTLE_QUEUE_MAX 65536

typedef struct settle_item {
    const layout *L; /* cached or retired: valid until destroy */
    uint32_t stripe;
    uint32_t rank;
    int64_t id;
    int64_t give_up_ms; /* monotonic */
} settle_item;

struct settle_queue {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t thread;
    bool stop;
    settle_item *items;
    size_t n, cap;
    uint64_t id_base;
    _Atomic uint64_t id_next;
    /* figures, under lock */
    uint64_t settled, pages_freed, dropped;
};

int64_t redis__alloc_id(store_redis *r)
{
    uint64_t id = (r->settle->id_base + r->settle->id_next++) & (uint64_t)INT64_MAX;
    return id ? (int64_t)id : 1;
}

void redis__settle_later(store_redis *r, const layout *L, uint32_t stripe, uint32_t rank,
                         int64_t id)
{
    settle_queue *q = r->settle;
    HF_ASSERT(stripe < L->count && id >= 0);
    if (id == 0) /* sent without an id (a node without "settle"): ends with its lease */
        return;
    hf_mutex_lock(&q->lock);
    if (q->n == SETTLE_QUEUE_MAX) {
        if (q->dropped++ == 0)
            log_msg(LOG_WARN,
                    "Redis: %d allocations with an outcome unknown wait to be settled; "
                    "those that come meanwhile are not (their reservations end with their "
                    "lease; counted in /v1/stats, settle.dropped)",
                    SETTLE_QUEUE_MAX);
        hf_mutex_unlock(&q->lock);
        return;
    }
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        q->items = hf_xreallocarray(q->items, q->cap, sizeof *q->items);
    }
    int64_t lease = r->cfg.reservation_ms > 0 ? r->cfg.reservation_ms : 600000;
    q->items[q->n++] = (settle_item){L, stripe, rank, id, hf_clock_mono_ms() + lease};
    pthread_cond_signal(&q->wake);
    hf_mutex_unlock(&q->lock);
}

/* One round: SETTLE for (at most SETTLE_BATCH of) the items queued, all at
 * once; the items settled, gone or past their lease leave the queue. */
static void settle_round(store_redis *r)
{
    settle_queue *q = r->settle;
    hf_mutex_lock(&q->lock);
    size_t m = q->n < SETTLE_BATCH ? q->n : SETTLE_BATCH;
    settle_item *mine = hf_xmalloc((m ? m : 1) * sizeof *mine);
    memcpy(mine, q->items, m * sizeof *mine);
    hf_mutex_unlock(&q->lock);
    if (m == 0) {
        free(mine);
        return;
    }
    batch b;
    redis__batch_init(&b, m);
    for (size_t k = 0; k < m; k++) {
        args *a = redis__batch_add(r, &b, "HF3FS.SETTLE", mine[k].L, mine[k].stripe);
        redis__args_int(a, mine[k].rank);
        redis__args_int(a, mine[k].id);
    }
    redis__batch_run(r, &b, true);
    int64_t now = hf_clock_mono_ms();
    bool *done = hf_xcalloc(m, sizeof *done);
    uint64_t settled = 0, freed = 0;
    for (size_t k = 0; k < m; k++) {
        int c = b.codes[k];
        if (c == STORE_OK && b.reps[k]->type == REDIS_REPLY_INTEGER) {
            done[k] = true;
            settled++;
            freed += (uint64_t)(b.reps[k]->integer > 0 ? b.reps[k]->integer : 0);
        } else {
            /* the pool or the namespace gone, its reservations too; or
             * past the lease: expired by now */
            done[k] = c == STORE_ENOPOOL || c == RESTRIPE || c == STORE_EINVAL ||
                      now >= mine[k].give_up_ms;
        }
    }
    redis__batch_free(&b);
    if (freed)
        log_msg(LOG_INFO,
                "Redis: %" PRIu64 " allocation(s) answered 507 settled: %" PRIu64
                " reservation(s) that no client was given freed",
                settled, freed);
    /* only this thread removes items, and others only append: the first m
     * are still those sent */
    hf_mutex_lock(&q->lock);
    HF_ASSERT(q->n >= m);
    size_t w = 0;
    for (size_t i = 0; i < q->n; i++) {
        HF_ASSERT(i >= m || q->items[i].id == mine[i].id);
        if (i >= m || !done[i])
            q->items[w++] = q->items[i];
    }
    q->n = w;
    q->settled += settled;
    q->pages_freed += freed;
    hf_mutex_unlock(&q->lock);
    free(done);
    free(mine);
}

static void *settle_thread(void *arg)
{
    store_redis *r = arg;
    settle_queue *q = r->settle;
    hf_mutex_lock(&q->lock);
    while (!q->stop) {
        if (q->n == 0) {
            pthread_cond_wait(&q->wake, &q->lock);
            continue;
        }
        /* a short pause first: the node that just failed a call is
         * rarely back at once */
        int64_t until = hf_clock_mono_us() + (int64_t)SETTLE_PERIOD_MS * 1000;
        while (!q->stop && hf_clock_mono_us() < until)
            hf_cond_wait_until_us(&q->wake, &q->lock, until);
        if (q->stop)
            break;
        hf_mutex_unlock(&q->lock);
        settle_round(r);
        hf_mutex_lock(&q->lock);
    }
    hf_mutex_unlock(&q->lock);
    return NULL;
}

void redis__settle_start(store_redis *r)
{
    settle_queue *q = hf_xcalloc(1, sizeof *q);
    pthread_mutex_init(&q->lock, NULL);
    hf_cond_init_mono(&q->wake);
    if (getrandom(&q->id_base, sizeof q->id_base, 0) != sizeof q->id_base)
        q->id_base = (uint64_t)hf_clock_mono_ms() * 0x9e3779b97f4a7c15ull ^ (uintptr_t)q;
    r->settle = q;
    if (pthread_create(&q->thread, NULL, settle_thread, r) != 0) {
        log_msg(LOG_ERROR, "cannot start a thread: aborting");
        abort();
    }
}

void redis__settle_stop(store_redis *r)
{
    settle_queue *q = r->settle;
    if (!q)
        return;
    hf_mutex_lock(&q->lock);
    q->stop = true;
    pthread_cond_signal(&q->wake);
    hf_mutex_unlock(&q->lock);
    pthread_join(q->thread, NULL);
    pthread_cond_destroy(&q->wake);
    pthread_mutex_destroy(&q->lock);
    free(q->items);
    free(q);
    r->settle = NULL;
}

/* The member "settle" of /v1/stats. */
void redis__settle_metrics(store_redis *r, const store_emitter *e)
{
    settle_queue *q = r->settle;
    hf_mutex_lock(&q->lock);
    uint64_t pending = q->n, settled = q->settled, pages = q->pages_freed, dropped = q->dropped;
    hf_mutex_unlock(&q->lock);
    store_emit_object(e, "settle");
    store_emit_number(e, "pending", store_int(pending));
    store_emit_number(e, "settled", store_int(settled));
    store_emit_number(e, "reservations_freed", store_int(pages));
    store_emit_number(e, "dropped", store_int(dropped));
    store_emit_end(e);
}
