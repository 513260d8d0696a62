/*
 * room.c: see room.h. The line is an hf_line (util/fiber.h), whose waiters
 * are fibers or threads alike; a place given back is handed to the first
 * waiter directly (taken stays the same), so a newcomer cannot overtake the
 * line.
 */
#include "api/room.h"

#include <pthread.h>
#include <stdlib.h>

#include "util/fiber.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

struct tenant_room {
    pthread_mutex_t mu;
    unsigned taken;
    hf_line line; /* waiting for a place */
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
    HF_ASSERT(hf_line_empty(&r->line)); /* nobody waits in a room being freed */
    pthread_mutex_destroy(&r->mu);
    free(r);
}

bool tenant_room_enter(tenant_room *r, unsigned places, int64_t until_us, bool *waited)
{
    hf_mutex_lock(&r->mu);
    *waited = false;
    if (r->taken < places && hf_line_empty(&r->line)) {
        r->taken++;
        hf_mutex_unlock(&r->mu);
        return true;
    }
    *waited = true;
    bool taken = hf_line_wait(&r->line, &r->mu, until_us); /* handed over: taken stays */
    hf_mutex_unlock(&r->mu);
    return taken;
}

void tenant_room_leave(tenant_room *r)
{
    hf_mutex_lock(&r->mu);
    HF_ASSERT(r->taken > 0);
    if (!hf_line_hand(&r->line)) /* else the place goes to the first in line */
        r->taken--;
    hf_mutex_unlock(&r->mu);
}

unsigned tenant_room_taken(tenant_room *r)
{
    hf_mutex_lock(&r->mu);
    unsigned n = r->taken;
    hf_mutex_unlock(&r->mu);
    return n;
}
