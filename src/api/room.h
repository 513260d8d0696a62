/*
 * room.h: a tenant's room, the places its requests take while they run
 * (--tenant-max-in-flight; docs/robustness.md, "Slow and greedy clients").
 *
 * A request takes a place before its store call and gives it back after.
 * With every place taken, the next request waits in line (parked on its
 * fiber over Redis; otherwise its thread waits) until one comes back, and a
 * place given back goes to the first in line; a wait that reaches its
 * deadline gives up. So one tenant's flood of requests waits on itself,
 * rather than ahead of every other tenant's requests at the store.
 * Thread-safe.
 */
#ifndef HF_API_ROOM_H
#define HF_API_ROOM_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tenant_room tenant_room;

tenant_room *tenant_room_new(void);
void tenant_room_free(tenant_room *r);
/* Take one of `places`, waiting until hf_clock_mono_us() reaches until_us
 * at most: true if taken (give it back with tenant_room_leave). *waited:
 * whether it had to wait. */
bool tenant_room_enter(tenant_room *r, unsigned places, int64_t until_us, bool *waited);
void tenant_room_leave(tenant_room *r);
/* Places taken now. */
unsigned tenant_room_taken(tenant_room *r);

#endif
