/*
 * fiber.h: fibers, so that an event loop serves many requests that wait on
 * a remote store at once, on one thread, without a thread per wait.
 *
 * Why. A request to the Redis engine waits a round trip for its replies.
 * On a thread of its own, each such wait is a sleep and a wake-up of that
 * thread (a futex, a task switch), and a front end can only have as many
 * requests waiting as it has threads. On a fiber, the loop runs the request
 * until it must wait, switches back to its events, and resumes the request
 * when its replies are in: the loop's thread never sleeps while it has
 * input, many requests' commands go to Redis in one write, and their
 * replies come back in one read.
 *
 * The scheduler (hf_sched) belongs to one thread, an event loop, and is
 * driven by it: hf_sched_spawn runs a function on a fiber at once, until it
 * returns or parks; the loop arms fd waits in its own epoll set (the
 * events whose data.ptr hf_sched_event recognizes), sleeps at most
 * hf_sched_timeout_ms, and runs hf_sched_run_ready after every batch of
 * events. A fiber never moves to another thread.
 *
 * Waiting (any code, on a fiber or not):
 *   - hf_park_wait / hf_park_wake: a condition variable for one waiter.
 *     On a fiber the waiter parks (its thread goes on with other work);
 *     elsewhere it sleeps on the condition variable. The waker must hold
 *     the same mutex as the waiter; it may run on any thread.
 *   - hf_wait_list: a line of waiters for a condition many wait on,
 *     woken all at once.
 *   - hf_line: a line of waiters handed something over in turn.
 *   - hf_fiber_mutex: a mutex that may be held across parks.
 *   - hf_wait_fd: poll() one descriptor, or park the fiber on the loop's
 *     epoll until the descriptor is ready.
 * None of them wakes a fiber on a timer to look again: a parked fiber
 * costs nothing until its wake-up or its deadline.
 * A fiber must hold no lock when it parks other than the mutex it hands to
 * hf_park_wait (which is released meanwhile; the assert build checks the
 * locks taken through hf_mutex_lock and hf_rwlock_*), and nothing run on an event
 * loop's thread may block the thread on something only another fiber of
 * the same loop can do: that fiber would never run again.
 *
 * Sanitizers: the switches are announced to AddressSanitizer and
 * ThreadSanitizer (their fiber interfaces), so that each fiber's stack is
 * its own for them.
 */
#ifndef HF_UTIL_FIBER_H
#define HF_UTIL_FIBER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hf_sched hf_sched;
typedef struct hf_fiber hf_fiber;

/* A scheduler for the calling thread's loop: fd waits are armed in epfd;
 * wake(ctx) is called (from any thread) when another thread makes a fiber
 * runnable, to wake the loop out of epoll_wait. */
hf_sched *hf_sched_new(int epfd, void (*wake)(void *ctx), void *ctx);
/* No fiber may be alive (hf_sched_live() == 0). */
void hf_sched_free(hf_sched *s);

/* Run fn(arg) on a fiber now. true: it returned; false: it parked, and
 * will go on in a later hf_sched_run_ready. Called on the loop's thread,
 * never from a fiber. */
bool hf_sched_spawn(hf_sched *s, void (*fn)(void *arg), void *arg);
/* Whether an epoll event's data.ptr is one of s's fd waits; if so, it is
 * taken (its fiber becomes runnable). */
bool hf_sched_event(hf_sched *s, void *ptr);
/* Run every runnable fiber: those whose fd is ready, whose park was woken,
 * whose deadline passed; again until none is left. */
void hf_sched_run_ready(hf_sched *s);
/* How long the loop may sleep: 0 if a fiber is runnable already (woken by
 * another fiber of the loop since the last hf_sched_run_ready), else the
 * time to the earliest deadline of a parked fiber in milliseconds (rounded
 * up), at most dflt (-1: no bound). */
int hf_sched_timeout_ms(hf_sched *s, int dflt);
/* Fibers started and not returned yet. */
size_t hf_sched_live(const hf_sched *s);

/* Whether the caller runs on a fiber. */
bool hf_fiber_active(void);

/* A condition variable for one waiter (see above). */
typedef struct hf_park {
    pthread_cond_t cv; /* a thread's sleep (CLOCK_MONOTONIC) */
    hf_fiber *fiber;   /* the fiber parked on it, if any (under the waiter's mutex) */
} hf_park;

void hf_park_init(hf_park *k);
void hf_park_destroy(hf_park *k);
/* mu held: release it and wait until woken or until hf_clock_mono_us()
 * reaches until_us (or spuriously), then hold it again. */
void hf_park_wait(hf_park *k, pthread_mutex_t *mu, int64_t until_us);
/* mu held (the waiter's): wake the waiter, if any. */
void hf_park_wake(hf_park *k);

/* A line of waiters for a condition that many wait on (room under a
 * bound, the outcome of a connection being opened), under the caller's
 * mutex: each waiter on its own stack with a park, so that a fiber parks
 * and a thread sleeps alike, and a wake-up reaches each of them at once. */
typedef struct hf_wait_entry hf_wait_entry;
typedef struct hf_wait_list {
    hf_wait_entry *first; /* under the caller's mutex */
} hf_wait_list;

#define HF_WAIT_LIST_INIT ((hf_wait_list){.first = NULL})
/* mu held: join l, release mu and wait until hf_wait_list_wake_all, until
 * until_us, or spuriously; then hold mu again, out of l. The caller looks
 * at its condition again. */
void hf_wait_list_wait(hf_wait_list *l, pthread_mutex_t *mu, int64_t until_us);
/* mu held (the waiters'): wake every waiter of l (each leaves it). */
void hf_wait_list_wake_all(hf_wait_list *l);
bool hf_wait_list_empty(const hf_wait_list *l);

/* A line of waiters for something handed over one at a time, in the order
 * they came (the fiber mutex below, a tenant's room in api/room.c), under
 * the caller's mutex: each waiter on its own stack with a park. Handing
 * over to the first directly, rather than waking it to try again, lets
 * nobody overtake the line. */
typedef struct hf_line_waiter hf_line_waiter;
typedef struct hf_line {
    hf_line_waiter *first, *last; /* under the caller's mutex */
} hf_line;

/* mu held: join the end of l, release mu and wait until handed over
 * (hf_line_hand) or until hf_clock_mono_us() reaches until_us; then hold
 * mu again. Whether it was handed over; if not, it has left the line. */
bool hf_line_wait(hf_line *l, pthread_mutex_t *mu, int64_t until_us);
/* mu held (the waiters'): hand over to the first in line, who leaves it;
 * false if nobody waits. */
bool hf_line_hand(hf_line *l);

static inline bool hf_line_empty(const hf_line *l)
{
    return l->first == NULL;
}

/* A mutex that may be held across waits that park (the quota lock across
 * store calls): a pthread mutex held by a parked fiber would block its
 * loop's thread when another fiber of the loop asked for it, and never be
 * let go. Its waiters, fibers or threads, wait on a line (hf_line): unlock
 * hands it to the first directly. */
typedef struct hf_fiber_mutex {
    pthread_mutex_t mu; /* guards what follows; never held across a wait */
    bool held;
    hf_line line;
} hf_fiber_mutex;

/* Whether some fiber or thread holds m (for HF_ASSERT). */
static inline bool hf_fiber_mutex_held(hf_fiber_mutex *m)
{
    pthread_mutex_lock(&m->mu);
    bool held = m->held;
    pthread_mutex_unlock(&m->mu);
    return held;
}

void hf_fiber_mutex_init(hf_fiber_mutex *m);
void hf_fiber_mutex_destroy(hf_fiber_mutex *m);
void hf_fiber_lock(hf_fiber_mutex *m);
void hf_fiber_unlock(hf_fiber_mutex *m);

/* Run fn(arg), which may block its thread (blocking I/O of a library, a
 * sleep): on a fiber, on a thread of a process-wide pool while the fiber
 * parks, so that its loop serves others meanwhile; elsewhere, here. The
 * pool starts a thread when a call finds none idle, up to
 * HF_OFFLOAD_THREADS; past that the calls wait in line (their fibers
 * parked) for the first thread free. A thread idle for
 * HF_OFFLOAD_IDLE_MS ends. The calls run must not wait for one another:
 * one waiting for a call behind it in the line would wait forever. */
#define HF_OFFLOAD_THREADS 32
#define HF_OFFLOAD_IDLE_MS 10000
void hf_fiber_offload(void (*fn)(void *arg), void *arg);
/* Threads of the pool now, and those idle (for tests and figures). */
void hf_offload_threads(unsigned *threads, unsigned *idle);

/* "No lock held when parking", checked in the assert build (HF_ASSERTS):
 * the locks taken through the wrappers below are noted per thread, and a
 * fiber that parks, or a loop that switches to a fiber, holding any of
 * them but the mutex handed to the wait that parks it (released while it
 * is parked) ends the process with a message. Locks taken with pthread_* directly are not seen: the store's
 * Redis engine (src/store/redis) and the tenants' rooms (api/room.c), the
 * code that runs on fibers and parks, take theirs through the wrappers.
 * hf_fiber_mutex, made to be held across parks, is not a lock here.
 * Elsewhere the wrappers are the pthread calls. */
void hf__lock_noted(const void *lock, bool taken);

/* The lock noted as taken or let go, in the assert build only. */
static inline void hf__lock_note(const void *lock, bool taken)
{
#ifdef HF_ASSERTS
    hf__lock_noted(lock, taken);
#else
    (void)lock;
    (void)taken;
#endif
}

/* Taking a lock: the pthread call, then the note. */
static inline void hf_mutex_lock(pthread_mutex_t *mu)
{
    pthread_mutex_lock(mu);
    hf__lock_note(mu, true);
}

static inline void hf_rwlock_rdlock(pthread_rwlock_t *l)
{
    pthread_rwlock_rdlock(l);
    hf__lock_note(l, true);
}

static inline void hf_rwlock_wrlock(pthread_rwlock_t *l)
{
    pthread_rwlock_wrlock(l);
    hf__lock_note(l, true);
}

/* Letting one go: the note, then the pthread call. */
static inline void hf_mutex_unlock(pthread_mutex_t *mu)
{
    hf__lock_note(mu, false);
    pthread_mutex_unlock(mu);
}

static inline void hf_rwlock_unlock(pthread_rwlock_t *l)
{
    hf__lock_note(l, false);
    pthread_rwlock_unlock(l);
}

/* Wait until fd is ready for events (POLLIN and/or POLLOUT) or until_us
 * (monotonic) passes. > 0: ready (or hung up, or failed: the next read or
 * write says which); 0: the deadline passed; < 0: poll() failed (errno). */
int hf_wait_fd(int fd, short events, int64_t until_us);

#endif
