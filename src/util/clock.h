/*
 * clock.h: the process's clock readings, in one place.
 *
 * Wall clock (CLOCK_REALTIME) for what must keep its meaning across a
 * restart or between machines: lease deadlines of the embedded engine,
 * start and snapshot times. Monotonic clock (CLOCK_MONOTONIC) for durations
 * and timeouts. Nothing in src/core reads a clock: its callers pass `now`.
 */
#ifndef HF_UTIL_CLOCK_H
#define HF_UTIL_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch. */
int64_t hf_clock_wall_ms(void);

/* Monotonic time since an arbitrary origin. */
uint64_t hf_clock_mono_ns(void);
int64_t hf_clock_mono_us(void);
int64_t hf_clock_mono_ms(void);
/* Whole seconds from the coarse monotonic clock (cheap; for idle timeouts). */
uint64_t hf_clock_mono_coarse_s(void);

#endif
