/*
 * clock.h: the process's clock readings, in one place.
 *
 * The server clock (util/steady.h: anchored to the wall clock at the first
 * reading, then advancing at CLOCK_BOOTTIME's rate, never stepping) for
 * every lease deadline. Wall clock (CLOCK_REALTIME) for what only labels a
 * moment: log lines, start and snapshot times. Monotonic clock
 * (CLOCK_MONOTONIC) for durations and timeouts. Nothing in src/core reads a
 * clock: its callers pass `now`.
 */
#ifndef HF_UTIL_CLOCK_H
#define HF_UTIL_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* Milliseconds since the Unix epoch. */
int64_t hf_clock_wall_ms(void);

/*
 * The server clock, milliseconds since the Unix epoch: the process's one
 * hf_steady over CLOCK_REALTIME and CLOCK_BOOTTIME (which, unlike
 * CLOCK_MONOTONIC, counts the time the machine was suspended: a lease
 * handed out before a suspend has run its course after it, as the
 * clients' own timers have). Started at the first call; a step of the
 * wall clock is logged once as a warning. Thread-safe, no lock.
 */
int64_t hf_clock_server_ms(void);
/* The same clock, for its figures (hf_steady_steps, _offset_us, _check). */
struct hf_steady *hf_clock_server(void);

/* Monotonic time since an arbitrary origin. */
uint64_t hf_clock_mono_ns(void);
int64_t hf_clock_mono_us(void);
int64_t hf_clock_mono_ms(void);
/* Whole seconds from the coarse monotonic clock (cheap; for idle timeouts). */
uint64_t hf_clock_mono_coarse_s(void);
/* Milliseconds from the same coarse clock (a few milliseconds behind the
 * monotonic clock; as cheap): the HTTP loops' activity and deadlines. */
uint64_t hf_clock_mono_coarse_ms(void);

/* Condition variables whose timed waits run on CLOCK_MONOTONIC, so that a
 * step of the wall clock moves no wait's end: every timed wait in src/ is
 * one of these (`make lint` checks). */
void hf_cond_init_mono(pthread_cond_t *cv);
/* Wait on cv (mu held) until hf_clock_mono_us() reaches until_us, or a
 * wake-up; at once if it has already. */
void hf_cond_wait_until_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us);

/* Sleep the calling thread ms milliseconds (none if ms <= 0), resumed
 * after a signal. A fiber offloads it (util/fiber.h hf_fiber_offload). */
void hf_sleep_ms(int64_t ms);

#endif
