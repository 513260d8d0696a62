/*
 * clock.c: see clock.h.
 */
#include "util/clock.h"

#include <time.h>

static struct timespec read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

int64_t hf_clock_wall_ms(void)
{
    struct timespec ts = read_clock(CLOCK_REALTIME);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t hf_clock_mono_ns(void)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t hf_clock_mono_us(void)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t hf_clock_mono_ms(void)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint64_t hf_clock_mono_coarse_s(void)
{
    return (uint64_t)read_clock(CLOCK_MONOTONIC_COARSE).tv_sec;
}
