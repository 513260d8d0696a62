/*
 * fiber.c: fibers, their scheduler, parking and fd waits (fiber.h). The
 * switch and a fiber's stack are in fiber_switch.c, wait lists and the
 * fiber mutex in fiber_wait.c, the offload pool in fiber_offload.c
 * (fiber_internal.h).
 *
 * A fiber's state is under its scheduler's mutex, because another thread
 * may wake it (hf_park_wake from a thread that read its Redis reply):
 *   RUNNING  on the loop's thread now (spawned or resumed)
 *   PARKED   switched out, waiting for a wake, its fd or its deadline
 *   READY    on the ready list, to be resumed by hf_sched_run_ready
 *   IDLE     returned from its function; kept for the next spawn
 * Only the loop's thread switches: a wake from another thread puts the
 * fiber on the ready list and wakes the loop (the owner's wake hook).
 *
 * An fd wait arms the descriptor in the loop's epoll set with EPOLLONESHOT
 * and the fiber itself as data.ptr (its first member is a tag that tells it
 * from the loop's own pointers): the event readies the fiber and disarms
 * the descriptor; a deadline that passes first removes it from the set. A
 * second fiber that waits on the same descriptor (one epoll registration
 * per descriptor) is a guest of the first's registration, which it widens
 * to its own events: the event readies both, as does the host's leaving,
 * and each looks at the descriptor with poll() for its own events.
 */
#include "util/fiber.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fiber_internal.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

#define KEEP_IDLE 64 /* idle fibers kept for the next spawns; more are freed */
#define FIBER_TAG 0x46494245u

enum fiber_state { F_IDLE, F_RUNNING, F_PARKED, F_READY };

struct hf_fiber {
    uint32_t tag; /* first: an epoll event's data.ptr is the fiber */
    hf_sched *s;
    fiber_ctx ctx;
    fiber_stack stack;
    void (*fn)(void *arg);
    void *arg;
    enum fiber_state state; /* under s->mu */
    int64_t until_us;       /* PARKED: its deadline (INT64_MAX: none) */
    int wait_fd;            /* waited on (the loop's thread): its own registration or a host's */
    bool fd_ready;          /* its registration's event came (under s->mu) */
    uint32_t fd_events;     /* its registration's: its own events and its guests' */
    hf_fiber *fd_host;      /* a guest: the fiber whose registration it shares */
    hf_fiber *fd_guests;    /* a host: the fibers sharing its registration */
    hf_fiber *fd_next;      /* on its host's guest list */
    size_t alive_at;        /* index in s->alive */
    hf_fiber *next;         /* on the ready list or the idle list */
    void *asan_fake;        /* AddressSanitizer's fake stack, saved across a switch */
    void *tsan_fiber;       /* ThreadSanitizer's context */
};

struct hf_sched {
    int epfd;
    void (*wake)(void *ctx);
    void *wake_ctx;
    pthread_mutex_t mu;
    hf_fiber *ready;      /* under mu */
    hf_fiber **ready_end; /* the last ready fiber's next, or &ready (under mu) */
    hf_fiber **alive;     /* started and not returned (the loop's thread) */
    size_t nalive, cap;
    hf_fiber *idle;
    size_t nidle;
    fiber_ctx main;
    const void *main_bottom; /* the loop's stack, for AddressSanitizer */
    size_t main_size;
    void *main_fake;
    void *tsan_main;
};

static _Thread_local hf_fiber *tls_current;
static _Thread_local hf_sched *tls_sched;

/* The locks the thread holds through the wrappers of fiber.h, as noted by
 * callers built with HF_ASSERTS (most recent last). */
#define HELD_MAX 8
static _Thread_local const void *tls_held[HELD_MAX];
static _Thread_local unsigned tls_nheld;

void hf__lock_noted(const void *lock, bool taken)
{
    if (taken) {
        if (tls_nheld == HELD_MAX) {
            fprintf(stderr, "hf3fs-metad: fatal: more than %d locks held at once\n", HELD_MAX);
            abort();
        }
        tls_held[tls_nheld++] = lock;
        return;
    }
    for (unsigned i = tls_nheld; i-- > 0;)
        if (tls_held[i] == lock) {
            memmove(&tls_held[i], &tls_held[i + 1], (tls_nheld - i - 1) * sizeof *tls_held);
            tls_nheld--;
            return;
        }
    fprintf(stderr, "hf3fs-metad: fatal: a lock let go that was not taken through hf_mutex_lock "
                    "or hf_rwlock_*\n");
    abort();
}

/* Whether mu was noted as held (then it is not any more): a fiber parks
 * with it released. */
/* Only callers built with HF_ASSERTS note their locks: elsewhere no lock
 * is ever noted, and the checks cost a thread-local load. */
__attribute__((noreturn, cold)) static void locks_held_at(const char *what)
{
    fprintf(stderr,
            "hf3fs-metad: fatal: %s holding %u lock(s) taken through hf_mutex_lock or "
            "hf_rwlock_* (util/fiber.h: no lock held when parking)\n",
            what, tls_nheld);
    abort();
}

static bool lock_forget(const void *mu)
{
    for (unsigned i = tls_nheld; i-- > 0;)
        if (tls_held[i] == mu) {
            hf__lock_noted(mu, false);
            return true;
        }
    return false;
}

bool hf_fiber_active(void)
{
    return tls_current != NULL;
}

/* ---- switching ---- */

/* On a fiber's stack, just switched to from the loop. */
static void arrived(hf_fiber *f, void *fake)
{
#if FIBER_ASAN
    __sanitizer_finish_switch_fiber(fake, &f->s->main_bottom, &f->s->main_size);
#else
    (void)f;
    (void)fake;
#endif
}

/* From the fiber f back to its loop; returns when f is resumed. */
static void to_loop(hf_fiber *f)
{
    hf_sched *s = f->s;
#if FIBER_ASAN
    __sanitizer_start_switch_fiber(&f->asan_fake, s->main_bottom, s->main_size);
#endif
#if FIBER_TSAN
    __tsan_switch_to_fiber(s->tsan_main, 0);
#endif
    SWITCH(&f->ctx, &s->main);
    arrived(f, f->asan_fake);
}

/* From the loop to f, until it parks or returns. */
static void to_fiber(hf_sched *s, hf_fiber *f)
{
    HF_ASSERT(!tls_current && tls_sched == s);
    if (tls_nheld != 0) /* a fiber taking it would block the loop's thread */
        locks_held_at("the loop switches to a fiber");
    tls_current = f;
#if FIBER_ASAN
    __sanitizer_start_switch_fiber(&s->main_fake, f->stack.map + sysconf(_SC_PAGESIZE),
                                   f->stack.map_size - (size_t)sysconf(_SC_PAGESIZE));
#endif
#if FIBER_TSAN
    __tsan_switch_to_fiber(f->tsan_fiber, 0);
#endif
    SWITCH(&s->main, &f->ctx);
#if FIBER_ASAN
    __sanitizer_finish_switch_fiber(s->main_fake, NULL, NULL);
#endif
    tls_current = NULL;
}

/* A fiber's life: each spawn's function, then idle until the next. */
static void fiber_main(void)
{
    hf_fiber *f = tls_current;
    arrived(f, NULL);
    for (;;) {
        f->fn(f->arg);
        pthread_mutex_lock(&f->s->mu);
        f->state = F_IDLE;
        pthread_mutex_unlock(&f->s->mu);
        to_loop(f);
    }
}

static hf_fiber *fiber_new(hf_sched *s)
{
    hf_fiber *f = hf_xcalloc(1, sizeof *f);
    f->tag = FIBER_TAG;
    f->s = s;
    f->wait_fd = -1;
    hf__fiber_stack_new(&f->stack, &f->ctx, fiber_main);
#if FIBER_TSAN
    f->tsan_fiber = __tsan_create_fiber(0);
#endif
    return f;
}

static void fiber_free(hf_fiber *f)
{
#if FIBER_TSAN
    __tsan_destroy_fiber(f->tsan_fiber);
#endif
    hf__fiber_stack_free(&f->stack);
    free(f);
}

/* ---- the scheduler ---- */

hf_sched *hf_sched_new(int epfd, void (*wake)(void *ctx), void *ctx)
{
    hf_sched *s = hf_xcalloc(1, sizeof *s);
    s->epfd = epfd;
    s->wake = wake;
    s->wake_ctx = ctx;
    s->ready_end = &s->ready;
    pthread_mutex_init(&s->mu, NULL);
#if FIBER_TSAN
    s->tsan_main = __tsan_get_current_fiber();
#endif
    tls_sched = s;
    return s;
}

void hf_sched_free(hf_sched *s)
{
    if (!s)
        return;
    HF_ASSERT(s->nalive == 0 && !s->ready);
    while (s->idle) {
        hf_fiber *f = s->idle;
        s->idle = f->next;
        fiber_free(f);
    }
    free(s->alive);
    pthread_mutex_destroy(&s->mu);
    if (tls_sched == s)
        tls_sched = NULL;
    free(s);
}

size_t hf_sched_live(const hf_sched *s)
{
    return s->nalive;
}

/* After a switch back to the loop: f parked, or returned (then idle, or
 * freed). Whether it returned. */
static bool settle(hf_sched *s, hf_fiber *f)
{
    pthread_mutex_lock(&s->mu); /* another thread may be readying it */
    bool returned = f->state == F_IDLE;
    pthread_mutex_unlock(&s->mu);
    if (!returned)
        return false;
    HF_ASSERT(s->alive[f->alive_at] == f);
    s->alive[f->alive_at] = s->alive[--s->nalive];
    s->alive[f->alive_at]->alive_at = f->alive_at;
    if (s->nidle >= KEEP_IDLE) {
        fiber_free(f);
        return true;
    }
    f->next = s->idle;
    s->idle = f;
    s->nidle++;
    return true;
}

bool hf_sched_spawn(hf_sched *s, void (*fn)(void *arg), void *arg)
{
    HF_ASSERT(!tls_current);
    hf_fiber *f = s->idle;
    if (f) {
        s->idle = f->next;
        s->nidle--;
    } else {
        f = fiber_new(s);
    }
    f->fn = fn;
    f->arg = arg;
    pthread_mutex_lock(&s->mu);
    f->state = F_RUNNING;
    f->next = NULL;
    pthread_mutex_unlock(&s->mu);
    s->alive = hf_grow(s->alive, &s->cap, s->nalive + 1, sizeof *s->alive);
    f->alive_at = s->nalive;
    s->alive[s->nalive++] = f;
    to_fiber(s, f);
    return settle(s, f);
}

/* f runnable (s->mu held): true if it was parked, and is queued now. */
static bool make_ready(hf_sched *s, hf_fiber *f)
{
    if (f->state != F_PARKED)
        return false;
    f->state = F_READY;
    f->next = NULL;
    *s->ready_end = f;
    s->ready_end = &f->next;
    return true;
}

static void release_guests(hf_sched *s, hf_fiber *host);

bool hf_sched_event(hf_sched *s, void *ptr)
{
    hf_fiber *f = ptr;
    if (!f || f->tag != FIBER_TAG || f->s != s)
        return false;
    pthread_mutex_lock(&s->mu);
    if (f->state == F_PARKED && f->wait_fd >= 0 && !f->fd_host) { /* else a stale event */
        f->fd_ready = true;
        make_ready(s, f);
        release_guests(s, f);
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

void hf_sched_run_ready(hf_sched *s)
{
    HF_ASSERT(!tls_current && tls_sched == s);
    for (;;) {
        int64_t now = hf_clock_mono_us();
        pthread_mutex_lock(&s->mu);
        for (size_t i = 0; i < s->nalive; i++) {
            hf_fiber *f = s->alive[i];
            if (f->state == F_PARKED && f->until_us <= now)
                make_ready(s, f);
        }
        hf_fiber *list = s->ready;
        s->ready = NULL;
        s->ready_end = &s->ready;
        pthread_mutex_unlock(&s->mu);
        if (!list)
            return;
        while (list) {
            hf_fiber *f = list;
            list = f->next;
            pthread_mutex_lock(&s->mu);
            f->state = F_RUNNING;
            pthread_mutex_unlock(&s->mu);
            to_fiber(s, f);
            (void)settle(s, f);
        }
    }
}

int hf_sched_timeout_ms(hf_sched *s, int dflt)
{
    pthread_mutex_lock(&s->mu);
    bool ready = s->ready != NULL;
    pthread_mutex_unlock(&s->mu);
    if (ready)
        return 0;
    int64_t until = INT64_MAX;
    for (size_t i = 0; i < s->nalive; i++)
        if (s->alive[i]->until_us < until)
            until = s->alive[i]->until_us;
    if (until == INT64_MAX)
        return dflt;
    int64_t left = (until - hf_clock_mono_us() + 999) / 1000;
    if (left < 0)
        left = 0;
    if (dflt >= 0 && left > dflt)
        return dflt;
    return left > INT32_MAX ? INT32_MAX : (int)left;
}

/* ---- waiting ---- */

/* The running fiber leaves until readied (mu, if any, released meanwhile;
 * the caller takes it again). Whether mu was noted as held through
 * hf_mutex_lock (assert build): the caller notes it again. */
static bool park(hf_fiber *f, int64_t until_us, pthread_mutex_t *mu)
{
    bool noted = mu && lock_forget(mu);
    if (tls_nheld != 0)
        locks_held_at("a fiber parks");
    hf_sched *s = f->s;
    pthread_mutex_lock(&s->mu);
    f->state = F_PARKED;
    f->until_us = until_us;
    pthread_mutex_unlock(&s->mu);
    if (mu)
        pthread_mutex_unlock(mu);
    to_loop(f);
    f->until_us = INT64_MAX;
    return noted;
}

void hf_park_init(hf_park *k)
{
    hf_cond_init_mono(&k->cv);
    k->fiber = NULL;
}

void hf_park_destroy(hf_park *k)
{
    pthread_cond_destroy(&k->cv);
}

void hf_park_wait(hf_park *k, pthread_mutex_t *mu, int64_t until_us)
{
    hf_fiber *f = tls_current;
    if (!f) {
        hf_cond_wait_until_us(&k->cv, mu, until_us);
        return;
    }
    k->fiber = f;
    bool noted = park(f, until_us, mu);
    pthread_mutex_lock(mu);
    if (noted)
        hf__lock_noted(mu, true);
    if (k->fiber == f)
        k->fiber = NULL;
}

void hf_park_wake(hf_park *k)
{
    hf_fiber *f = k->fiber;
    if (!f) {
        pthread_cond_signal(&k->cv);
        return;
    }
    k->fiber = NULL;
    hf_sched *s = f->s;
    pthread_mutex_lock(&s->mu);
    bool was_empty = s->ready == NULL;
    bool queued = make_ready(s, f);
    pthread_mutex_unlock(&s->mu);
    if (queued && was_empty && tls_sched != s)
        s->wake(s->wake_ctx);
}

/* ---- wait lists ---- */

/* ---- fd waits ---- */

static int poll_until(int fd, short events, int64_t until_us)
{
    for (;;) {
        int64_t left_ms = (until_us - hf_clock_mono_us() + 999) / 1000;
        struct pollfd pf = {.fd = fd, .events = events};
        int r = poll(&pf, 1, left_ms <= 0 ? 0 : left_ms > INT32_MAX ? INT32_MAX : (int)left_ms);
        if (r < 0 && errno == EINTR)
            continue;
        return r;
    }
}

/* The fiber of s whose registration in the epoll set holds fd now (its
 * host), if any. */
static hf_fiber *fd_host(const hf_sched *s, int fd)
{
    for (size_t i = 0; i < s->nalive; i++) {
        hf_fiber *g = s->alive[i];
        if (g->wait_fd == fd && !g->fd_host)
            return g;
    }
    return NULL;
}

/* The guests of host's registration are readied to look at the fd again
 * (s->mu held): its event came, or it left first. */
static void release_guests(hf_sched *s, hf_fiber *host)
{
    while (host->fd_guests) {
        hf_fiber *g = host->fd_guests;
        host->fd_guests = g->fd_next;
        g->fd_host = NULL;
        g->fd_next = NULL;
        make_ready(s, g);
    }
}

/* A guest leaves its host's list (its deadline came first). */
static void leave_host(hf_fiber *f)
{
    hf_fiber **at = &f->fd_host->fd_guests;
    while (*at != f)
        at = &(*at)->fd_next;
    *at = f->fd_next;
    f->fd_next = NULL;
    f->fd_host = NULL;
}

int hf_wait_fd(int fd, short events, int64_t until_us)
{
    hf_fiber *f = tls_current;
    if (!f)
        return poll_until(fd, events, until_us);
    hf_sched *s = f->s;
    uint32_t want = EPOLLONESHOT | (events & POLLIN ? EPOLLIN : 0u) |
                    (events & POLLOUT ? EPOLLOUT : 0u);
    for (;;) {
        hf_fiber *host = fd_host(s, fd);
        bool exact = false; /* woken by an event for exactly its own events */
        if (host) {
            /* another fiber of this loop waits on fd (a reader and a writer
             * of one connection): its registration covers this one's events
             * too, and its event or its leaving readies this one */
            struct epoll_event ev = {.events = host->fd_events | want, .data.ptr = host};
            if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
                return poll_until(fd, events, until_us); /* cannot be: host's is in */
            host->fd_events = ev.events;
            f->wait_fd = fd;
            f->fd_host = host;
            f->fd_next = host->fd_guests;
            host->fd_guests = f;
            (void)park(f, until_us, NULL);
            if (f->fd_host)
                leave_host(f);
            f->wait_fd = -1;
        } else {
            struct epoll_event ev = {.events = want, .data.ptr = f};
            if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 &&
                !(errno == ENOENT && epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) == 0))
                /* epoll refuses fd (a regular file, always ready): poll it */
                return poll_until(fd, events, until_us);
            f->fd_events = want;
            f->wait_fd = fd;
            f->fd_ready = false;
            (void)park(f, until_us, NULL);
            f->wait_fd = -1;
            if (f->fd_guests) { /* guests join and leave on this thread only */
                pthread_mutex_lock(&s->mu);
                release_guests(s, f);
                pthread_mutex_unlock(&s->mu);
            }
            if (!f->fd_ready) /* the deadline came first */
                epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
            exact = f->fd_ready && f->fd_events == want;
        }
        if (exact)
            return 1;
        /* an event for a guest's events, this one's deadline, or its host
         * gone: look */
        int r = poll_until(fd, events, 0);
        if (r != 0 || hf_clock_mono_us() >= until_us)
            return r;
    }
}
