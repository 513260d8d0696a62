/*
 * test_fiber.c: fibers and their scheduler (util/fiber.h), driven as an
 * HTTP loop drives them: an epoll set, a wake descriptor, spawn, events,
 * run_ready. Real threads wake fibers from outside; real sockets are
 * waited on. The deadlines are tens of milliseconds at most. Also a
 * tenant's room (api/room.h), the wait line built on parks, as the API's
 * fibers use it.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "api/room.h"
#include "check.h"
#include "util/clock.h"
#include "util/fiber.h"

/* ---- a loop: an epoll set with a wake descriptor ---- */

typedef struct test_loop {
    int epfd, wake_fd;
    int wakes; /* the wake hook's calls */
    hf_sched *s;
    int sv[2]; /* a socket pair for fd waits (loop_open_socketpair), or -1 */
} test_loop;

static void on_wake(void *ctx)
{
    test_loop *l = ctx;
    __atomic_add_fetch(&l->wakes, 1, __ATOMIC_SEQ_CST);
    uint64_t one = 1;
    if (write(l->wake_fd, &one, sizeof one) != sizeof one)
        abort();
}

static void loop_open(test_loop *l)
{
    l->epfd = epoll_create1(0);
    l->wake_fd = eventfd(0, EFD_NONBLOCK);
    l->wakes = 0;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = l};
    CHECK_EQ(epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake_fd, &ev), 0);
    l->s = hf_sched_new(l->epfd, on_wake, l);
    l->sv[0] = l->sv[1] = -1;
}

/* A loop and a non-blocking socket pair for its fibers' fd waits. */
static void loop_open_socketpair(test_loop *l)
{
    loop_open(l);
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, l->sv), 0);
}

static void loop_close(test_loop *l)
{
    hf_sched_free(l->s);
    close(l->epfd);
    close(l->wake_fd);
    for (int i = 0; i < 2; i++)
        if (l->sv[i] >= 0)
            close(l->sv[i]);
}

/* One pass of the loop: wait (at most the scheduler's timeout, bounded by
 * max_ms), take the events, run what is runnable. The number of events. */
static int loop_once(test_loop *l, int max_ms)
{
    struct epoll_event evs[8];
    int n = epoll_wait(l->epfd, evs, 8, hf_sched_timeout_ms(l->s, max_ms));
    for (int i = 0; i < n; i++) {
        if (evs[i].data.ptr == l) {
            uint64_t v;
            if (read(l->wake_fd, &v, sizeof v) < 0) {}
        } else if (!hf_sched_event(l->s, evs[i].data.ptr)) {
            abort(); /* nothing else is in the set */
        }
    }
    hf_sched_run_ready(l->s);
    return n;
}

/* Runs the loop until no fiber is alive, for at most 5 s. */
static void loop_drain(test_loop *l)
{
    int64_t until = hf_clock_mono_us() + 5000000;
    while (hf_sched_live(l->s) > 0 && hf_clock_mono_us() < until)
        loop_once(l, 100);
    CHECK_EQ(hf_sched_live(l->s), 0);
}

/* ---- what the fibers do ---- */

typedef struct shared {
    pthread_mutex_t mu;
    hf_park park;
    hf_fiber_mutex held; /* the fiber mutex the lock jobs take */
    bool flag;
    int order[8];
    int norder;
} shared;

static void shared_init(shared *sh)
{
    pthread_mutex_init(&sh->mu, NULL);
    hf_park_init(&sh->park);
    hf_fiber_mutex_init(&sh->held);
    sh->flag = false;
    sh->norder = 0;
}

static void shared_free(shared *sh)
{
    hf_fiber_mutex_destroy(&sh->held);
    hf_park_destroy(&sh->park);
    pthread_mutex_destroy(&sh->mu);
}

static void note(shared *sh, int what)
{
    sh->order[sh->norder++] = what;
}

/* The fibers noted exactly these, in this order. */
#define CHECK_ORDER(sh, ...)                                                                       \
    do {                                                                                           \
        const int want_[] = {__VA_ARGS__};                                                         \
        CHECK_EQ((sh)->norder, (int)(sizeof want_ / sizeof want_[0]));                             \
        for (int i_ = 0; i_ < (sh)->norder; i_++)                                                  \
            CHECK_EQ((sh)->order[i_], want_[i_]);                                                  \
    } while (0)

/* Waits for the flag (as a pipe's caller waits for its replies). */
static void wait_for_flag(void *arg)
{
    shared *sh = arg;
    note(sh, 1);
    pthread_mutex_lock(&sh->mu);
    while (!sh->flag)
        hf_park_wait(&sh->park, &sh->mu, hf_clock_mono_us() + 5000000);
    pthread_mutex_unlock(&sh->mu);
    note(sh, 3);
}

static void set_flag(void *arg)
{
    shared *sh = arg;
    pthread_mutex_lock(&sh->mu);
    sh->flag = true;
    hf_park_wake(&sh->park);
    pthread_mutex_unlock(&sh->mu);
    note(sh, 2);
}

static void just_note(void *arg)
{
    note(arg, hf_fiber_active() ? 7 : -7);
}

TEST(fiber_that_never_waits_returns_at_spawn_on_a_fiber)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    CHECK_EQ(hf_fiber_active(), false);
    CHECK_EQ(hf_sched_spawn(l.s, just_note, &sh), true);
    CHECK_EQ(hf_sched_live(l.s), 0);
    CHECK_ORDER(&sh, 7); /* it ran on a fiber */
    CHECK_EQ(hf_fiber_active(), false);
    shared_free(&sh);
    loop_close(&l);
}

TEST(parked_fiber_goes_on_when_another_fiber_of_its_loop_wakes_it)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    CHECK_EQ(hf_sched_spawn(l.s, wait_for_flag, &sh), false); /* parked */
    CHECK_EQ(hf_sched_live(l.s), 1);
    CHECK_EQ(hf_sched_spawn(l.s, set_flag, &sh), true);
    CHECK_EQ(l.wakes, 0); /* the same thread: no wake-up of the loop */
    hf_sched_run_ready(l.s);
    CHECK_EQ(hf_sched_live(l.s), 0);
    CHECK_ORDER(&sh, 1, 2, 3);
    shared_free(&sh);
    loop_close(&l);
}

TEST(fiber_woken_by_a_fiber_spawned_after_run_ready_keeps_the_loop_awake)
{
    /* as a loop's flush pass spawns a request after its run_ready: the
     * wake-up it makes is on the ready list, and the loop must not sleep */
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    CHECK_EQ(hf_sched_spawn(l.s, wait_for_flag, &sh), false);
    hf_sched_run_ready(l.s);
    CHECK_EQ(hf_sched_spawn(l.s, set_flag, &sh), true);
    CHECK_EQ(hf_sched_timeout_ms(l.s, 1000), 0);
    CHECK_EQ(hf_sched_timeout_ms(l.s, -1), 0);
    loop_once(&l, 1000);
    CHECK_EQ(hf_sched_live(l.s), 0);
    CHECK_EQ(sh.order[2], 3);
    shared_free(&sh);
    loop_close(&l);
}

static void *set_flag_later(void *arg)
{
    usleep(20000);
    shared *sh = arg;
    pthread_mutex_lock(&sh->mu);
    sh->flag = true;
    hf_park_wake(&sh->park);
    pthread_mutex_unlock(&sh->mu);
    return NULL;
}

TEST(parked_fiber_woken_from_another_thread_wakes_its_loop_and_goes_on)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    CHECK_EQ(hf_sched_spawn(l.s, wait_for_flag, &sh), false);
    pthread_t t;
    pthread_create(&t, NULL, set_flag_later, &sh);
    /* the loop sleeps in epoll_wait without a bound of its own: only the
     * wake hook ends the sleep before the fiber's 5 s deadline */
    int64_t t0 = hf_clock_mono_us();
    loop_drain(&l);
    pthread_join(t, NULL);
    CHECK_INT(hf_clock_mono_us() - t0, <, 2000000);
    CHECK_EQ(l.wakes, 1);
    CHECK_EQ(sh.norder, 2);
    CHECK_EQ(sh.order[1], 3);
    shared_free(&sh);
    loop_close(&l);
}

static void park_until_deadline(void *arg)
{
    shared *sh = arg;
    pthread_mutex_lock(&sh->mu);
    hf_park_wait(&sh->park, &sh->mu, hf_clock_mono_us() + 30000);
    pthread_mutex_unlock(&sh->mu);
    note(sh, 9);
}

TEST(park_deadline_bounds_the_loop_sleep_and_resumes_the_fiber)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    int64_t t0 = hf_clock_mono_us();
    CHECK_EQ(hf_sched_spawn(l.s, park_until_deadline, &sh), false);
    int ms = hf_sched_timeout_ms(l.s, -1);
    CHECK_IN(ms, 1, 30);
    CHECK_EQ(hf_sched_timeout_ms(l.s, 5), 5); /* the loop's own bound when sooner */
    loop_drain(&l);
    CHECK_INT(hf_clock_mono_us() - t0, >=, 30000);
    CHECK_ORDER(&sh, 9);
    CHECK_EQ(l.wakes, 0);
    shared_free(&sh);
    loop_close(&l);
}

/* ---- fd waits ---- */

typedef struct fd_job {
    int fd;
    int64_t until_us;
    int result;
    bool done;
} fd_job;

static void wait_readable(void *arg)
{
    fd_job *j = arg;
    j->result = hf_wait_fd(j->fd, POLLIN, j->until_us);
    j->done = true;
}

TEST(fd_wait_parks_the_fiber_until_the_socket_is_readable)
{
    test_loop l;
    loop_open_socketpair(&l);
    fd_job j = {.fd = l.sv[0], .until_us = hf_clock_mono_us() + 5000000};
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &j), false);
    CHECK_EQ(loop_once(&l, 10), 0); /* nothing to read: still parked */
    CHECK_EQ(j.done, false);
    CHECK_EQ(write(l.sv[1], "x", 1), 1);
    CHECK_EQ(loop_once(&l, 1000), 1); /* the socket's event, taken by the scheduler */
    CHECK_EQ(j.done, true);
    CHECK_INT(j.result, >, 0);
    /* a second wait on the same socket (armed again, not added twice) */
    char c;
    CHECK_EQ(read(l.sv[0], &c, 1), 1);
    j.done = false;
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &j), false);
    CHECK_EQ(write(l.sv[1], "y", 1), 1);
    loop_drain(&l);
    CHECK_INT(j.result, >, 0);
    loop_close(&l);
}

TEST(fd_wait_past_its_deadline_returns_0_and_leaves_the_epoll_set)
{
    test_loop l;
    loop_open_socketpair(&l);
    fd_job j = {.fd = l.sv[0], .until_us = hf_clock_mono_us() + 20000};
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &j), false);
    loop_drain(&l);
    CHECK_EQ(j.result, 0);
    CHECK_EQ(write(l.sv[1], "x", 1), 1);
    struct epoll_event ev;
    CHECK_EQ(epoll_wait(l.epfd, &ev, 1, 20), 0); /* no stale event for the ended wait */
    loop_close(&l);
}

TEST(fd_wait_on_a_socket_another_fiber_waits_on_sets_no_timer_and_wakes_with_its_event)
{
    test_loop l;
    loop_open_socketpair(&l);
    int64_t far = hf_clock_mono_us() + 5000000;
    fd_job a = {.fd = l.sv[0], .until_us = far}, b = {.fd = l.sv[0], .until_us = far};
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &a), false);
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &b), false); /* shares a's registration */
    CHECK_INT(hf_sched_timeout_ms(l.s, -1), >, 1000);        /* their deadlines only */
    CHECK_EQ(loop_once(&l, 10), 0);
    CHECK_EQ(a.done || b.done, false);
    CHECK_EQ(write(l.sv[1], "x", 1), 1);
    CHECK_EQ(loop_once(&l, 1000), 1); /* one event, both go on */
    CHECK_EQ(a.done && b.done, true);
    CHECK_INT(a.result, >, 0);
    CHECK_INT(b.result, >, 0);
    char c;
    CHECK_EQ(read(l.sv[0], &c, 1), 1);
    /* the first leaves at its deadline: the second goes on waiting, on a
     * registration of its own, and wakes with the next byte */
    a = (fd_job){.fd = l.sv[0], .until_us = hf_clock_mono_us() + 20000};
    b = (fd_job){.fd = l.sv[0], .until_us = far};
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &a), false);
    CHECK_EQ(hf_sched_spawn(l.s, wait_readable, &b), false);
    int64_t until = hf_clock_mono_us() + 5000000;
    while (!a.done && hf_clock_mono_us() < until)
        loop_once(&l, 100);
    CHECK_EQ(a.result, 0);
    CHECK_EQ(b.done, false);
    CHECK_INT(hf_sched_timeout_ms(l.s, -1), >, 1000);
    CHECK_EQ(write(l.sv[1], "y", 1), 1);
    CHECK_EQ(loop_once(&l, 1000), 1);
    CHECK_EQ(b.done, true);
    CHECK_INT(b.result, >, 0);
    loop_close(&l);
}

TEST(fd_wait_off_a_fiber_polls)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    CHECK_EQ(hf_wait_fd(sv[0], POLLIN, hf_clock_mono_us() + 10000), 0);
    CHECK_EQ(write(sv[1], "x", 1), 1);
    CHECK_EQ(hf_wait_fd(sv[0], POLLIN, hf_clock_mono_us() + 10000), 1);
    close(sv[0]);
    close(sv[1]);
}

/* ---- off a fiber; locks; many at once ---- */

TEST(park_off_a_fiber_sleeps_on_its_condition_variable_until_woken)
{
    shared sh;
    shared_init(&sh);
    pthread_t t;
    pthread_create(&t, NULL, set_flag_later, &sh);
    int64_t t0 = hf_clock_mono_us();
    pthread_mutex_lock(&sh.mu);
    while (!sh.flag)
        hf_park_wait(&sh.park, &sh.mu, hf_clock_mono_us() + 5000000);
    pthread_mutex_unlock(&sh.mu);
    pthread_join(t, NULL);
    CHECK_INT(hf_clock_mono_us() - t0, <, 2000000);
    shared_free(&sh);
}

typedef struct lock_job {
    shared *sh;
    int id;
} lock_job;

/* Takes the mutex, then parks holding it until the deadline. */
static void lock_and_park(void *arg)
{
    lock_job *j = arg;
    hf_fiber_lock(&j->sh->held);
    note(j->sh, j->id);
    pthread_mutex_lock(&j->sh->mu);
    hf_park_wait(&j->sh->park, &j->sh->mu, hf_clock_mono_us() + 20000);
    pthread_mutex_unlock(&j->sh->mu);
    note(j->sh, j->id + 10);
    hf_fiber_unlock(&j->sh->held);
}

static void lock_then_note(void *arg)
{
    lock_job *j = arg;
    hf_fiber_lock(&j->sh->held);
    note(j->sh, j->id);
    hf_fiber_unlock(&j->sh->held);
}

TEST(fiber_lock_parks_while_a_parked_fiber_of_the_same_loop_holds_the_mutex)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    lock_job a = {&sh, 1}, b = {&sh, 2};
    CHECK_EQ(hf_sched_spawn(l.s, lock_and_park, &a), false);
    CHECK_EQ(hf_sched_spawn(l.s, lock_then_note, &b), false); /* would block the thread */
    loop_drain(&l);
    CHECK_ORDER(&sh, 1, 11, 2);
    shared_free(&sh);
    loop_close(&l);
}

/* Takes the mutex, then parks holding it until sh->flag is set. */
static void lock_and_wait_for_flag(void *arg)
{
    lock_job *j = arg;
    hf_fiber_lock(&j->sh->held);
    note(j->sh, j->id);
    pthread_mutex_lock(&j->sh->mu);
    while (!j->sh->flag)
        hf_park_wait(&j->sh->park, &j->sh->mu, INT64_MAX);
    pthread_mutex_unlock(&j->sh->mu);
    hf_fiber_unlock(&j->sh->held);
}

TEST(fiber_lock_waiters_park_without_a_timer_and_take_the_mutex_in_line_when_it_is_let_go)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    lock_job a = {&sh, 1}, b = {&sh, 2}, c = {&sh, 3};
    CHECK_EQ(hf_sched_spawn(l.s, lock_and_wait_for_flag, &a), false);
    CHECK_EQ(hf_sched_spawn(l.s, lock_then_note, &b), false);
    CHECK_EQ(hf_sched_spawn(l.s, lock_then_note, &c), false);
    /* nothing to look at again: the loop may sleep until woken */
    CHECK_EQ(hf_sched_timeout_ms(l.s, -1), -1);
    CHECK_EQ(loop_once(&l, 20), 0);
    CHECK_EQ(sh.norder, 1);
    CHECK_EQ(hf_sched_spawn(l.s, set_flag, &sh), true); /* notes 2 */
    hf_sched_run_ready(l.s);                            /* a lets go; b, then c, take it in turn */
    CHECK_EQ(hf_sched_live(l.s), 0);
    CHECK_ORDER(&sh, 1, 2, 2, 3);
    shared_free(&sh);
    loop_close(&l);
}

/* ---- wait lists ---- */

typedef struct list_job {
    pthread_mutex_t *mu;
    hf_wait_list *list;
    int *go; /* under mu */
    int64_t until_us;
    bool saw_go, done;
} list_job;

static void wait_on_list(void *arg)
{
    list_job *j = arg;
    pthread_mutex_lock(j->mu);
    while (!*j->go && hf_clock_mono_us() < j->until_us)
        hf_wait_list_wait(j->list, j->mu, j->until_us);
    j->saw_go = *j->go != 0;
    pthread_mutex_unlock(j->mu);
    j->done = true;
}

static void *wait_on_list_thread(void *arg)
{
    wait_on_list(arg);
    return NULL;
}

TEST(wait_list_wakes_every_fiber_and_thread_in_it_at_once_and_lets_a_deadline_leave)
{
    test_loop l;
    loop_open(&l);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    hf_wait_list list = HF_WAIT_LIST_INIT;
    int go = 0;
    int64_t far = hf_clock_mono_us() + 5000000;
    list_job early = {&mu, &list, &go, hf_clock_mono_us() + 20000, false, false};
    list_job fibers[3], thread_job = {&mu, &list, &go, far, false, false};
    CHECK_EQ(hf_sched_spawn(l.s, wait_on_list, &early), false);
    for (int i = 0; i < 3; i++) {
        fibers[i] = (list_job){&mu, &list, &go, far, false, false};
        CHECK_EQ(hf_sched_spawn(l.s, wait_on_list, &fibers[i]), false);
    }
    pthread_t t;
    pthread_create(&t, NULL, wait_on_list_thread, &thread_job);
    /* the only timer is the early one's deadline: no polling */
    CHECK_IN(hf_sched_timeout_ms(l.s, -1), 0, 20);
    int64_t until = hf_clock_mono_us() + 5000000;
    while (!early.done && hf_clock_mono_us() < until)
        loop_once(&l, 100);
    CHECK_EQ(early.saw_go, false);                    /* left at its deadline */
    CHECK_INT(hf_sched_timeout_ms(l.s, -1), >, 1000); /* the others' 5 s deadlines, no nap */
    /* the thread, started 20 ms ago, waits in the list too (else it sees go
     * at once); were it not woken it would sleep until its deadline, 5 s */
    int64_t t0 = hf_clock_mono_us();
    pthread_mutex_lock(&mu);
    go = 1;
    hf_wait_list_wake_all(&list);
    CHECK_EQ(hf_wait_list_empty(&list), true);
    pthread_mutex_unlock(&mu);
    hf_sched_run_ready(l.s);
    CHECK_EQ(hf_sched_live(l.s), 0);
    pthread_join(t, NULL);
    CHECK_INT(hf_clock_mono_us() - t0, <, 2000000);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(fibers[i].saw_go, true);
    CHECK_EQ(thread_job.saw_go, true);
    loop_close(&l);
}

typedef struct offload_job {
    pthread_t ran_on;
    int64_t took_us;
} offload_job;

static void block_20ms(void *arg)
{
    offload_job *j = arg;
    j->ran_on = pthread_self();
    usleep(20000);
}

static void offload_then_note(void *arg)
{
    shared *sh = arg;
    offload_job j = {0};
    int64_t t0 = hf_clock_mono_us();
    hf_fiber_offload(block_20ms, &j);
    j.took_us = hf_clock_mono_us() - t0;
    note(sh, pthread_equal(j.ran_on, pthread_self()) ? -1 : 1);
    note(sh, j.took_us >= 20000 ? 1 : -1);
}

TEST(offloaded_blocking_call_runs_on_another_thread_while_the_loop_serves_others)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    CHECK_EQ(hf_sched_spawn(l.s, offload_then_note, &sh), false); /* parked, not blocked */
    CHECK_EQ(hf_sched_spawn(l.s, just_note, &sh), true);          /* the loop goes on */
    CHECK_EQ(sh.order[0], 7);
    loop_drain(&l);
    CHECK_EQ(sh.norder, 3);
    CHECK_EQ(sh.order[1], 1); /* on a thread of its own */
    CHECK_EQ(sh.order[2], 1); /* and the fiber waited for it */
    offload_job j = {0};
    hf_fiber_offload(block_20ms, &j); /* off a fiber: here */
    CHECK_EQ(pthread_equal(j.ran_on, pthread_self()) != 0, true);
    shared_free(&sh);
    loop_close(&l);
}

typedef struct pool_job {
    int *running, *most; /* offloads running at once, and the most seen */
    bool done;
} pool_job;

static void block_20ms_counted(void *arg)
{
    pool_job *j = arg;
    int now = __atomic_add_fetch(j->running, 1, __ATOMIC_SEQ_CST);
    int most = __atomic_load_n(j->most, __ATOMIC_SEQ_CST);
    while (now > most && !__atomic_compare_exchange_n(j->most, &most, now, false, __ATOMIC_SEQ_CST,
                                                      __ATOMIC_SEQ_CST)) {}
    usleep(20000);
    __atomic_sub_fetch(j->running, 1, __ATOMIC_SEQ_CST);
}

static void offload_counted(void *arg)
{
    pool_job *j = arg;
    hf_fiber_offload(block_20ms_counted, j);
    j->done = true;
}

#define OVER_THE_BOUND (HF_OFFLOAD_THREADS + 8)

TEST(offloads_past_the_pool_bound_wait_in_line_and_all_run_on_at_most_that_many_threads)
{
    test_loop l;
    loop_open(&l);
    int running = 0, most = 0;
    pool_job jobs[OVER_THE_BOUND];
    for (int i = 0; i < OVER_THE_BOUND; i++) {
        jobs[i] = (pool_job){&running, &most, false};
        CHECK_EQ(hf_sched_spawn(l.s, offload_counted, &jobs[i]), false);
    }
    loop_drain(&l);
    for (int i = 0; i < OVER_THE_BOUND; i++)
        CHECK_EQ(jobs[i].done, true);
    CHECK_IN(most, 1, HF_OFFLOAD_THREADS);
    unsigned threads, idle;
    hf_offload_threads(&threads, &idle);
    CHECK_IN(threads, 1u, (unsigned)HF_OFFLOAD_THREADS);
    /* the threads stay for the next calls: one more starts none */
    pool_job again = {&running, &most, false};
    CHECK_EQ(hf_sched_spawn(l.s, offload_counted, &again), false);
    loop_drain(&l);
    unsigned after, idle_after;
    hf_offload_threads(&after, &idle_after);
    CHECK_EQ(after, threads);
    loop_close(&l);
}

/* ---- no lock held when parking (this file is built with HF_ASSERTS) ---- */

static pthread_mutex_t other_lock = PTHREAD_MUTEX_INITIALIZER;

/* Parks with the handed mutex taken through hf_mutex_lock: allowed. */
static void park_holding_the_handed_mutex(void *arg)
{
    shared *sh = arg;
    hf_mutex_lock(&sh->mu);
    while (!sh->flag)
        hf_park_wait(&sh->park, &sh->mu, hf_clock_mono_us() + 5000000);
    hf_mutex_unlock(&sh->mu);
}

/* Parks holding another lock taken through hf_mutex_lock: ends the process. */
static void park_holding_another_lock(void *arg)
{
    hf_mutex_lock(&other_lock);
    park_holding_the_handed_mutex(arg);
    hf_mutex_unlock(&other_lock);
}

/* The exit status of a child that runs fn on a fiber until it is done. */
static int status_of(void (*fn)(void *arg))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY); /* its fatal message is expected */
        dup2(null, 2);
        test_loop l;
        loop_open(&l);
        shared sh;
        shared_init(&sh);
        if (hf_sched_spawn(l.s, fn, &sh))
            _exit(3); /* it was to park */
        set_flag(&sh);
        loop_drain(&l);
        _exit(0);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    return status;
}

TEST(fiber_parking_holding_a_noted_lock_other_than_the_handed_mutex_ends_the_process)
{
    int ok = status_of(park_holding_the_handed_mutex);
    CHECK_EQ(WIFEXITED(ok) && WEXITSTATUS(ok) == 0, true);
    int bad = status_of(park_holding_another_lock);
    CHECK_EQ(WIFSIGNALED(bad) && WTERMSIG(bad) == SIGABRT, true);
}

#define MANY 200

typedef struct many_job {
    pthread_mutex_t *mu;
    hf_park park;
    bool go;
    int id;
    int seen; /* the id read back from the fiber's own stack after parking */
} many_job;

static void park_with_locals(void *arg)
{
    many_job *j = arg;
    volatile int mine[64];
    for (int i = 0; i < 64; i++)
        mine[i] = j->id * 64 + i;
    pthread_mutex_lock(j->mu);
    while (!j->go)
        hf_park_wait(&j->park, j->mu, hf_clock_mono_us() + 5000000);
    pthread_mutex_unlock(j->mu);
    int ok = 1;
    for (int i = 0; i < 64; i++)
        ok &= mine[i] == j->id * 64 + i;
    j->seen = ok ? j->id : -1;
}

TEST(many_fibers_parked_at_once_resume_in_any_order_with_their_own_stacks)
{
    test_loop l;
    loop_open(&l);
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    many_job *jobs = calloc(MANY, sizeof *jobs);
    for (int i = 0; i < MANY; i++) {
        jobs[i] = (many_job){.mu = &mu, .id = i, .seen = -2};
        hf_park_init(&jobs[i].park);
        CHECK_EQ(hf_sched_spawn(l.s, park_with_locals, &jobs[i]), false);
    }
    CHECK_EQ(hf_sched_live(l.s), MANY);
    for (int i = MANY - 1; i >= 0; i -= 2) { /* the odd ones, last first */
        pthread_mutex_lock(&mu);
        jobs[i].go = true;
        hf_park_wake(&jobs[i].park);
        pthread_mutex_unlock(&mu);
    }
    hf_sched_run_ready(l.s);
    CHECK_EQ(hf_sched_live(l.s), MANY / 2);
    for (int i = 0; i < MANY; i += 2) {
        pthread_mutex_lock(&mu);
        jobs[i].go = true;
        hf_park_wake(&jobs[i].park);
        pthread_mutex_unlock(&mu);
    }
    loop_drain(&l);
    for (int i = 0; i < MANY; i++) {
        CHECK_EQ(jobs[i].seen, i);
        hf_park_destroy(&jobs[i].park);
    }
    free(jobs);
    loop_close(&l);
}

/* ---- a tenant's room: a line of fibers waiting for places ---- */

typedef struct room_job {
    tenant_room *room;
    shared *sh;
    int id;
    int64_t until_us;
    bool hold; /* keep the place until sh->flag is set */
    bool taken, waited, done;
} room_job;

static void room_visit(void *arg)
{
    room_job *j = arg;
    j->taken = tenant_room_enter(j->room, 1, j->until_us, &j->waited);
    if (j->taken) {
        note(j->sh, j->id);
        pthread_mutex_lock(&j->sh->mu);
        while (j->hold && !j->sh->flag)
            hf_park_wait(&j->sh->park, &j->sh->mu, hf_clock_mono_us() + 5000000);
        pthread_mutex_unlock(&j->sh->mu);
        tenant_room_leave(j->room);
    }
    j->done = true;
}

TEST(room_hands_each_place_given_back_to_the_first_fiber_in_line)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    tenant_room *room = tenant_room_new();
    int64_t far = hf_clock_mono_us() + 5000000;
    room_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (room_job){.room = room, .sh = &sh, .id = i + 1, .until_us = far, .hold = i == 0};
        hf_sched_spawn(l.s, room_visit, &jobs[i]);
    }
    /* the first holds the only place; the three others wait in line */
    CHECK_EQ(sh.norder, 1);
    CHECK_EQ(tenant_room_taken(room), 1u);
    CHECK_EQ(jobs[0].waited, false);
    set_flag(&sh); /* (notes 2 as the setter) */
    loop_drain(&l);
    CHECK_EQ(sh.norder, 5);
    CHECK_EQ(sh.order[0], 1);
    CHECK_EQ(sh.order[1], 2); /* set_flag's note */
    for (int i = 1; i < 4; i++) {
        CHECK_EQ(sh.order[i + 1], i + 1); /* in the order they came */
        CHECK_EQ(jobs[i].waited, true);
        CHECK_EQ(jobs[i].taken, true);
    }
    CHECK_EQ(tenant_room_taken(room), 0u);
    tenant_room_free(room);
    shared_free(&sh);
    loop_close(&l);
}

TEST(room_waiter_past_its_deadline_gives_up_and_leaves_the_line)
{
    test_loop l;
    loop_open(&l);
    shared sh;
    shared_init(&sh);
    tenant_room *room = tenant_room_new();
    bool waited;
    /* this thread takes the only place, off any fiber */
    CHECK_EQ(tenant_room_enter(room, 1, hf_clock_mono_us(), &waited), true);
    CHECK_EQ(waited, false);
    room_job early = {.room = room, .sh = &sh, .id = 5, .until_us = hf_clock_mono_us() + 20000};
    room_job late = {.room = room, .sh = &sh, .id = 6, .until_us = hf_clock_mono_us() + 5000000};
    hf_sched_spawn(l.s, room_visit, &early);
    hf_sched_spawn(l.s, room_visit, &late);
    int64_t until = hf_clock_mono_us() + 5000000;
    while (!early.done && hf_clock_mono_us() < until)
        loop_once(&l, 100);
    CHECK_EQ(early.done, true);
    CHECK_EQ(early.taken, false); /* gave up at its deadline */
    CHECK_EQ(early.waited, true);
    CHECK_EQ(late.done, false);
    tenant_room_leave(room); /* the place goes to the one still in line */
    loop_drain(&l);
    CHECK_EQ(late.taken, true);
    CHECK_EQ(late.waited, true);
    CHECK_ORDER(&sh, 6);
    CHECK_EQ(tenant_room_taken(room), 0u);
    tenant_room_free(room);
    shared_free(&sh);
    loop_close(&l);
}

int main(int argc, char **argv)
{
    TEST_SELECT(argc, argv);
    RUN(fiber_that_never_waits_returns_at_spawn_on_a_fiber);
    RUN(parked_fiber_goes_on_when_another_fiber_of_its_loop_wakes_it);
    RUN(fiber_woken_by_a_fiber_spawned_after_run_ready_keeps_the_loop_awake);
    RUN(parked_fiber_woken_from_another_thread_wakes_its_loop_and_goes_on);
    RUN(park_deadline_bounds_the_loop_sleep_and_resumes_the_fiber);
    RUN(fd_wait_parks_the_fiber_until_the_socket_is_readable);
    RUN(fd_wait_past_its_deadline_returns_0_and_leaves_the_epoll_set);
    RUN(fd_wait_on_a_socket_another_fiber_waits_on_sets_no_timer_and_wakes_with_its_event);
    RUN(fd_wait_off_a_fiber_polls);
    RUN(park_off_a_fiber_sleeps_on_its_condition_variable_until_woken);
    RUN(fiber_lock_parks_while_a_parked_fiber_of_the_same_loop_holds_the_mutex);
    RUN(fiber_lock_waiters_park_without_a_timer_and_take_the_mutex_in_line_when_it_is_let_go);
    RUN(wait_list_wakes_every_fiber_and_thread_in_it_at_once_and_lets_a_deadline_leave);
    RUN(offloaded_blocking_call_runs_on_another_thread_while_the_loop_serves_others);
    RUN(offloads_past_the_pool_bound_wait_in_line_and_all_run_on_at_most_that_many_threads);
    RUN(fiber_parking_holding_a_noted_lock_other_than_the_handed_mutex_ends_the_process);
    RUN(many_fibers_parked_at_once_resume_in_any_order_with_their_own_stacks);
    RUN(room_hands_each_place_given_back_to_the_first_fiber_in_line);
    RUN(room_waiter_past_its_deadline_gives_up_and_leaves_the_line);
    return TEST_SUMMARY();
}
