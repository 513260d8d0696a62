/*
 * test_steady.c: the server clock that never steps (util/steady.h), over
 * sources the tests move: a wall clock that steps and a monotonic clock
 * that does not.
 */
#include <pthread.h>
#include <stdlib.h>

#include "check.h"
#include "util/steady.h"

/* The clock under test over its sources. */
typedef struct fake_time {
    hf_steady c;
    int64_t wall_us, mono_us;
    int64_t steps_seen, last_step_us;
} fake_time;

static int64_t fake_wall(void *ctx)
{
    return ((fake_time *)ctx)->wall_us;
}

static int64_t fake_mono(void *ctx)
{
    return ((fake_time *)ctx)->mono_us;
}

static void fake_on_step(void *ctx, int64_t step_us)
{
    fake_time *t = ctx;
    t->steps_seen++;
    t->last_step_us = step_us;
}

#define EPOCH_US INT64_C(1800000000000000) /* a wall clock in 2027 */

/* A clock started at EPOCH_US (the tests run one at a time). */
static fake_time *start(void)
{
    static fake_time the;
    the = (fake_time){.wall_us = EPOCH_US, .mono_us = 5000000};
    hf_steady_source src = {fake_wall, fake_mono, &the, fake_on_step};
    hf_steady_init(&the.c, &src);
    return &the;
}

/* Both clocks advance by us; the clock is read every 100 ms meanwhile. */
static int64_t advance(fake_time *t, int64_t us)
{
    int64_t now = 0;
    for (int64_t done = 0; done < us;) {
        int64_t d = us - done < 100000 ? us - done : 100000;
        t->wall_us += d;
        t->mono_us += d;
        done += d;
        now = hf_steady_now_us(&t->c);
    }
    return now;
}

TEST(starts_at_the_wall_clock_and_follows_it_while_it_does_not_step)
{
    fake_time *t = start();
    CHECK_EQ(hf_steady_now_us(&t->c), EPOCH_US);
    CHECK_EQ(hf_steady_now_ms(&t->c), EPOCH_US / 1000);
    CHECK_EQ(advance(t, 60000000), EPOCH_US + 60000000);
    CHECK_EQ(hf_steady_steps(&t->c), 0);
    CHECK_EQ(hf_steady_offset_us(&t->c), 0);
}

/* A lease handed out just before a 700 s step forward still has its whole
 * length of real time: the step is absorbed, counted once, reported with
 * its size. */
TEST(a_forward_step_of_the_wall_clock_is_absorbed_and_counted_once)
{
    fake_time *t = start();
    advance(t, 3000000);
    int64_t before = hf_steady_now_us(&t->c);
    t->wall_us += 700000000; /* the step */
    int64_t after = advance(t, 10000000);
    /* 10 s of real time: the clock moved 10 s, give or take the 1% slew */
    CHECK_IN(after - before, 10000000, 10100000);
    CHECK_EQ(hf_steady_steps(&t->c), 1);
    CHECK_EQ(t->steps_seen, 1);
    CHECK_IN(t->last_step_us, 699900000, 700100000);
    CHECK_INT(hf_steady_offset_us(&t->c), >, 699000000);
}

TEST(a_backward_step_is_absorbed_too_and_the_clock_never_runs_backward)
{
    fake_time *t = start();
    advance(t, 2000000);
    int64_t last = hf_steady_now_us(&t->c);
    t->wall_us -= 700000000;
    for (int i = 0; i < 200; i++) {
        t->wall_us += 50000;
        t->mono_us += 50000;
        int64_t now = hf_steady_now_us(&t->c);
        CHECK_IN(now, last + 49500, last + 50500); /* 50 ms of real time, give or take 1% */
        last = now;
    }
    CHECK_EQ(hf_steady_steps(&t->c), 1);
    CHECK_INT(t->last_step_us, <=, -699900000);
    CHECK_INT(hf_steady_offset_us(&t->c), <, -699000000);
}

/* The slew brings the clock back to the wall clock at 1% of elapsed time:
 * 700 s in 70,000 s, and no faster, so that a lease of length L lasts
 * between 0.99 L and 1.01 L; then it runs at the wall clock's rate again. */
TEST(after_a_step_the_clock_returns_to_the_wall_clock_at_one_percent)
{
    fake_time *t = start();
    t->wall_us += 700000000;
    int64_t before = hf_steady_now_us(&t->c);
    for (int i = 0; i < 69000; i++) { /* 69,000 s */
        int64_t now = advance(t, 1000000);
        CHECK_IN(now - before, 1000000, 1010000);
        before = now;
    }
    int64_t left = t->wall_us - hf_steady_now_us(&t->c);
    CHECK_IN(left, 9000000, 11000000); /* 700 s - 1% of 69,000 s: 10 s, not sooner */
    advance(t, 1200000000);
    CHECK_EQ(t->wall_us - hf_steady_now_us(&t->c), 0);
    CHECK_EQ(hf_steady_offset_us(&t->c), 0);
    CHECK_EQ(hf_steady_steps(&t->c), 1);
}

/* NTP's own slew (up to 500 ppm) and a late check are not steps. */
TEST(a_drifting_wall_clock_is_followed_without_counting_a_step)
{
    fake_time *t = start();
    for (int i = 0; i < 3600; i++) {
        t->mono_us += 1000000;
        t->wall_us += 1000500; /* 500 ppm fast */
        hf_steady_now_us(&t->c);
    }
    t->mono_us += 30000000; /* nobody read the clock for 30 s */
    t->wall_us += 30015000;
    hf_steady_now_us(&t->c);
    CHECK_EQ(hf_steady_steps(&t->c), 0);
    CHECK_INT(t->wall_us - hf_steady_now_us(&t->c), <, 20000);
}

/* A check made while nobody reads the clock for an hour does not overshoot:
 * the correction of a segment is bounded by the offset it aims at. */
TEST(an_idle_hour_after_a_step_does_not_overshoot_the_wall_clock)
{
    fake_time *t = start();
    t->wall_us += 5000000; /* 5 s forward */
    advance(t, 2000000);
    t->wall_us += 3600000000;
    t->mono_us += 3600000000;
    CHECK_EQ(hf_steady_now_us(&t->c), t->wall_us);
    CHECK_EQ(hf_steady_steps(&t->c), 1);
}

TEST(hf_steady_check_compares_at_once_whether_or_not_a_check_is_due)
{
    fake_time *t = start();
    t->wall_us += 2000000;
    t->mono_us += 1000;
    hf_steady_check(&t->c);
    CHECK_EQ(hf_steady_steps(&t->c), 1);
    CHECK_EQ(hf_steady_offset_us(&t->c), 2000000 - 1000);
}

/* Readers on several threads beside the checker: every thread sees its own
 * readings in order. */
typedef struct reader_arg {
    hf_steady *c;
    int bad;
} reader_arg;

static _Atomic int64_t shared_mono;

static int64_t shared_wall(void *ctx)
{
    (void)ctx;
    return EPOCH_US + atomic_load(&shared_mono) * 2; /* keeps stepping */
}

static int64_t shared_mono_us(void *ctx)
{
    (void)ctx;
    return atomic_fetch_add(&shared_mono, 1000);
}

static void *reader(void *p)
{
    reader_arg *a = p;
    int64_t last = INT64_MIN;
    for (int i = 0; i < 200000; i++) {
        int64_t now = hf_steady_now_us(a->c);
        if (now < last)
            a->bad++;
        last = now;
    }
    return NULL;
}

TEST(concurrent_readers_each_see_a_clock_that_never_runs_backward)
{
    hf_steady c;
    hf_steady_source src = {shared_wall, shared_mono_us, NULL, NULL};
    hf_steady_init(&c, &src);
    pthread_t th[4];
    reader_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (reader_arg){&c, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, reader, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(args[i].bad, 0);
    CHECK_INT(hf_steady_steps(&c), >, 0);
}

int main(int argc, char **argv)
{
    TEST_SELECT(argc, argv);
    RUN(starts_at_the_wall_clock_and_follows_it_while_it_does_not_step);
    RUN(a_forward_step_of_the_wall_clock_is_absorbed_and_counted_once);
    RUN(a_backward_step_is_absorbed_too_and_the_clock_never_runs_backward);
    RUN(after_a_step_the_clock_returns_to_the_wall_clock_at_one_percent);
    RUN(a_drifting_wall_clock_is_followed_without_counting_a_step);
    RUN(an_idle_hour_after_a_step_does_not_overshoot_the_wall_clock);
    RUN(hf_steady_check_compares_at_once_whether_or_not_a_check_is_due);
    RUN(concurrent_readers_each_see_a_clock_that_never_runs_backward);
    return TEST_SUMMARY();
}
