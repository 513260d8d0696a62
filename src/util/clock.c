/*
 * clock.c: see clock.h.
 */
#include "util/clock.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "util/log.h"
#include "util/steady.h"

static struct timespec read_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts;
}

static int64_t us_of(clockid_t id)
{
    struct timespec ts = read_clock(id);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
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
    return us_of(CLOCK_MONOTONIC);
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

uint64_t hf_clock_mono_coarse_ms(void)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC_COARSE);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void hf_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void hf_cond_wait_until_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us)
{
    struct timespec ts = read_clock(CLOCK_MONOTONIC);
    int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    if (until_us <= now)
        return;
    int64_t ns = (int64_t)ts.tv_nsec + (until_us - now) * 1000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(cv, mu, &ts);
}

static int64_t wall_us(void *ctx)
{
    (void)ctx;
    return us_of(CLOCK_REALTIME);
}

static int64_t boot_us(void *ctx)
{
    (void)ctx;
    return us_of(CLOCK_BOOTTIME);
}

static void log_step(void *ctx, int64_t step_us)
{
    (void)ctx;
    log_msg(LOG_WARN, "the wall clock stepped by %+.1f s; leases are unaffected",
            (double)step_us / 1e6);
}

static hf_steady server_clock;
static pthread_once_t server_once = PTHREAD_ONCE_INIT;

static void server_start(void)
{
    hf_steady_source src = {wall_us, boot_us, NULL, log_step};
    hf_steady_init(&server_clock, &src);
}

hf_steady *hf_clock_server(void)
{
    pthread_once(&server_once, server_start);
    return &server_clock;
}

int64_t hf_clock_server_ms(void)
{
    return hf_steady_now_ms(hf_clock_server());
}

void hf_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}
