/*
 * fiber_wait.c: the waits of fiber.h built on hf_park_wait/hf_park_wake
 * (fiber.c): wait lists (many waiters of one condition, woken all at once)
 * and the fiber mutex (held across parks, handed to the first in line).
 */
#include <stdbool.h>
#include <stdint.h>

#include "util/fiber.h"
#include "util/hf_assert.h"

struct hf_wait_entry {
    hf_park park;
    hf_wait_entry *next, *prev;
    bool listed; /* in the list (under the caller's mutex) */
};

/* e (on its waiter's stack, until it leaves) joins l first (mu held). */
static void join_list(hf_wait_list *l, hf_wait_entry *e)
{
    e->next = l->first;
    e->prev = NULL;
    e->listed = true;
    if (l->first)
        l->first->prev = e;
    l->first = e;
}

void hf_wait_list_wait(hf_wait_list *l, pthread_mutex_t *mu, int64_t until_us)
{
    hf_wait_entry e;
    hf_park_init(&e.park);
    join_list(l, &e);
    hf_park_wait(&e.park, mu, until_us);
    if (e.listed) { /* the deadline, or a spurious wake-up: leave the list */
        if (e.prev)
            e.prev->next = e.next;
        else
            l->first = e.next;
        if (e.next)
            e.next->prev = e.prev;
    }
    hf_park_destroy(&e.park);
}

void hf_wait_list_wake_all(hf_wait_list *l)
{
    while (l->first) {
        hf_wait_entry *e = l->first;
        l->first = e->next;
        e->listed = false;
        hf_park_wake(&e->park);
    }
}

bool hf_wait_list_empty(const hf_wait_list *l)
{
    return l->first == NULL;
}

/* ---- the fiber mutex ---- */

struct hf_fiber_mutex_waiter {
    hf_park park;
    hf_fiber_mutex_waiter *next;
    bool granted; /* the mutex was handed to it */
};

void hf_fiber_mutex_init(hf_fiber_mutex *m)
{
    pthread_mutex_init(&m->mu, NULL);
    m->held = false;
    m->first = m->last = NULL;
}

void hf_fiber_mutex_destroy(hf_fiber_mutex *m)
{
    HF_ASSERT(!m->held && !m->first);
    pthread_mutex_destroy(&m->mu);
}

/* w (on its waiter's stack, until it is handed the mutex) joins the end
 * of m's line (m->mu held). */
static void join_line(hf_fiber_mutex *m, hf_fiber_mutex_waiter *w)
{
    w->next = NULL;
    w->granted = false;
    if (m->last)
        m->last->next = w;
    else
        m->first = w;
    m->last = w;
}

void hf_fiber_lock(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    if (!m->held) {
        m->held = true;
        pthread_mutex_unlock(&m->mu);
        return;
    }
    hf_fiber_mutex_waiter w;
    hf_park_init(&w.park);
    join_line(m, &w);
    while (!w.granted)
        hf_park_wait(&w.park, &m->mu, INT64_MAX);
    pthread_mutex_unlock(&m->mu);
    hf_park_destroy(&w.park);
}

void hf_fiber_unlock(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    HF_ASSERT(m->held);
    hf_fiber_mutex_waiter *w = m->first;
    if (w) { /* to the first in line: held stays */
        m->first = w->next;
        if (!m->first)
            m->last = NULL;
        w->granted = true;
        hf_park_wake(&w->park);
    } else {
        m->held = false;
    }
    pthread_mutex_unlock(&m->mu);
}
