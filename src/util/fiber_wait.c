/*
 * fiber_wait.c: the waits of fiber.h built on hf_park_wait/hf_park_wake
 * (fiber.c): wait lists (many waiters of one condition, woken all at once),
 * lines (waiters handed something over in turn) and the fiber mutex on a
 * line.
 */
#include <stdbool.h>
#include <stdint.h>

#include "util/clock.h"
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

/* ---- lines ---- */

struct hf_line_waiter {
    hf_park park;
    hf_line_waiter *next;
    bool granted; /* handed over */
};

/* w leaves the line (its deadline came first), wherever it stands. */
static void leave_line(hf_line *l, hf_line_waiter *w)
{
    hf_line_waiter **at = &l->first, *prev = NULL;
    while (*at && *at != w) {
        prev = *at;
        at = &(*at)->next;
    }
    HF_ASSERT(*at == w);
    *at = w->next;
    if (l->last == w)
        l->last = prev;
}

/* w (on its waiter's stack, until it leaves) joins the end of l. */
static void join_line(hf_line *l, hf_line_waiter *w)
{
    if (l->last)
        l->last->next = w;
    else
        l->first = w;
    l->last = w;
}

bool hf_line_wait(hf_line *l, pthread_mutex_t *mu, int64_t until_us)
{
    hf_line_waiter w = {.next = NULL, .granted = false};
    hf_park_init(&w.park);
    join_line(l, &w);
    while (!w.granted && hf_clock_mono_us() < until_us)
        hf_park_wait(&w.park, mu, until_us);
    if (!w.granted)
        leave_line(l, &w);
    hf_park_destroy(&w.park);
    return w.granted;
}

bool hf_line_hand(hf_line *l)
{
    hf_line_waiter *w = l->first;
    if (!w)
        return false;
    l->first = w->next;
    if (!l->first)
        l->last = NULL;
    w->granted = true;
    hf_park_wake(&w->park);
    return true;
}

/* ---- the fiber mutex ---- */

void hf_fiber_mutex_init(hf_fiber_mutex *m)
{
    pthread_mutex_init(&m->mu, NULL);
    m->held = false;
    m->line = (hf_line){NULL, NULL};
}

void hf_fiber_mutex_destroy(hf_fiber_mutex *m)
{
    HF_ASSERT(!m->held && hf_line_empty(&m->line));
    pthread_mutex_destroy(&m->mu);
}

void hf_fiber_lock(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    if (m->held) /* until hf_fiber_unlock hands it over: held stays true */
        (void)hf_line_wait(&m->line, &m->mu, INT64_MAX);
    m->held = true;
    pthread_mutex_unlock(&m->mu);
}

void hf_fiber_unlock(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    HF_ASSERT(m->held);
    if (!hf_line_hand(&m->line)) /* else to the first in line: held stays */
        m->held = false;
    pthread_mutex_unlock(&m->mu);
}
