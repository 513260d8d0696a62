/*
 * clock_store.h: a store engine for fuzzing: one core_t, no lock, and a
 * virtual clock that the fuzz input moves. Leases then expire exactly when
 * the input says, so every run of an input takes the same path (the
 * embedded engine reads the wall clock).
 */
#ifndef HF_FUZZ_CLOCK_STORE_H
#define HF_FUZZ_CLOCK_STORE_H

#include <stdint.h>

#include "store/store.h"

/* Returns the store (never NULL: aborts on out-of-memory). The clock starts
 * at `start` milliseconds. */
store_t *clock_store_new(const core_config *config, int64_t start);
void clock_store_advance(store_t *store, int64_t ms);
int64_t clock_store_now(store_t *store);
/* The core behind the store, to set an observer or walk its state. */
core_t *clock_store_core(store_t *store);

#endif
