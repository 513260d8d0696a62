/*
 * room.c: see room.h. The line is a FIFO of waiters on their own stacks,
 * each with a park (util/fiber.h) that wakes a fiber or a thread alike; a
 * place given back is handed to the first waiter directly (taken stays the
 * same), so a newcomer cannot overtake the line.
 */
#include "api/room.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/clock.h"
#include "util/fiber.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

typedef struct waiter {
    hf_park park;
    struct waiter *next;
    bool granted; /* a place was handed to it */
} waiter;

struct tenant_room {
    pthread_mutex_t mu;
    unsigned taken;
    waiter *first, *last;
};

tenant_room *tenant_room_new(void)
{
    tenant_room *r = hf_xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    return r;
}

void tenant_room_free(tenant_room *r)
{
    if (!r)
        return;
    HF_ASSERT(!r->first); /* nobody waits in a room being freed */
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* w (on its caller's stack, until it leaves) joins the end of the line
 * (mu held). */
static void join_line(tenant_room *r, waiter *w)
{
    if (r->last)
        r->last->next = w;
    else
        r->first = w;
    r->last = w;
}

/* w leaves the line (mu held), wherever it stands. */
static void unlink_waiter(tenant_room *r, waiter *w)
{
    waiter **at = &r->first, *prev = NULL;
    while (*at && *at != w) {
        prev = *at;
        at = &(*at)->next;
    }
    HF_ASSERT(*at == w);
    *at = w->next;
    if (r->last == w)
        r->last = prev;
}

bool tenant_room_enter(tenant_room *r, unsigned places, int64_t until_us, bool *waited)
{
    hf_mutex_lock(&r->mu);
    *waited = false;
    if (r->taken < places && !r->first) {
        r->taken++;
        hf_mutex_unlock(&r->mu);
        return true;
    }
    *waited = true;
    waiter w = {.next = NULL, .granted = false};
    hf_park_init(&w.park);
    join_line(r, &w);
    while (!w.granted && hf_clock_mono_us() < until_us)
        hf_park_wait(&w.park, &r->mu, until_us);
    if (!w.granted)
        unlink_waiter(r, &w);
    bool taken = w.granted;
    hf_mutex_unlock(&r->mu);
    hf_park_destroy(&w.park);
    return taken;
}

void tenant_room_leave(tenant_room *r)
{
    hf_mutex_lock(&r->mu);
    HF_ASSERT(r->taken > 0);
    waiter *w = r->first;
    if (w) { /* the place goes to the first in line: taken stays */
        r->first = w->next;
        if (!r->first)
            r->last = NULL;
        w->granted = true;
        hf_park_wake(&w->park);
    } else {
        r->taken--;
    }
    hf_mutex_unlock(&r->mu);
}

unsigned tenant_room_taken(tenant_room *r)
{
    hf_mutex_lock(&r->mu);
    unsigned n = r->taken;
    hf_mutex_unlock(&r->mu);
    return n;
}
