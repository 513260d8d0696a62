/*
 * fiber_offload.c: the offload pool (hf_fiber_offload, fiber.h): a call
 * that would block the loop's thread runs on one of at most
 * HF_OFFLOAD_THREADS threads, started when none is idle and ending after
 * HF_OFFLOAD_IDLE_MS idle, while its fiber is parked.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/clock.h"
#include "util/fiber.h"

typedef struct offload_job {
    void (*fn)(void *arg);
    void *arg;
    hf_park park; /* the fiber waiting for it (under pool.mu) */
    bool done;    /* under pool.mu */
    struct offload_job *next;
} offload_job;

/* One for the process: the loops' fibers share it. */
static struct {
    pthread_once_t once;
    pthread_mutex_t mu;
    pthread_cond_t work;       /* a job queued, for an idle thread (CLOCK_MONOTONIC) */
    offload_job *first, *last; /* queued, not taken yet */
    unsigned threads, idle;
} pool = {.once = PTHREAD_ONCE_INIT, .mu = PTHREAD_MUTEX_INITIALIZER};

static void pool_init(void)
{
    hf_cond_init_mono(&pool.work);
}

static void *offload_main(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        if (!pool.first) {
            int64_t until = hf_clock_mono_us() + HF_OFFLOAD_IDLE_MS * 1000;
            pool.idle++;
            while (!pool.first && hf_clock_mono_us() < until)
                hf_cond_wait_until_us(&pool.work, &pool.mu, until);
            pool.idle--;
            if (!pool.first)
                break; /* idle for HF_OFFLOAD_IDLE_MS */
        }
        offload_job *j = pool.first;
        pool.first = j->next;
        if (!pool.first)
            pool.last = NULL;
        pthread_mutex_unlock(&pool.mu);
        j->fn(j->arg);
        pthread_mutex_lock(&pool.mu);
        j->done = true;
        hf_park_wake(&j->park); /* past this, under pool.mu, j is not touched */
    }
    pool.threads--;
    pthread_mutex_unlock(&pool.mu);
    return NULL;
}

void hf_offload_threads(unsigned *threads, unsigned *idle)
{
    pthread_once(&pool.once, pool_init);
    pthread_mutex_lock(&pool.mu);
    *threads = pool.threads;
    *idle = pool.idle;
    pthread_mutex_unlock(&pool.mu);
}

void hf_fiber_offload(void (*fn)(void *arg), void *arg)
{
    if (!hf_fiber_active()) {
        fn(arg);
        return;
    }
    pthread_once(&pool.once, pool_init);
    offload_job j = {.fn = fn, .arg = arg};
    hf_park_init(&j.park);
    pthread_mutex_lock(&pool.mu);
    if (pool.last)
        pool.last->next = &j;
    else
        pool.first = &j;
    pool.last = &j;
    /* a thread for it if none is idle to take it (the idle ones may all
     * be woken for jobs queued before it: then those take them in turn) */
    if (pool.idle == 0 && pool.threads < HF_OFFLOAD_THREADS) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, offload_main, NULL) == 0)
            pool.threads++;
        pthread_attr_destroy(&attr);
    } else if (pool.idle > 0) {
        pthread_cond_signal(&pool.work);
    }
    if (pool.threads == 0) { /* no thread to be had: here, blocking the loop */
        pool.first = pool.last = NULL;
        pthread_mutex_unlock(&pool.mu);
        hf_park_destroy(&j.park);
        fn(arg);
        return;
    }
    while (!j.done)
        hf_park_wait(&j.park, &pool.mu, INT64_MAX);
    pthread_mutex_unlock(&pool.mu);
    hf_park_destroy(&j.park);
}
