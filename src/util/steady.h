/*
 * steady.h: a server clock that never steps.
 *
 * Every lease of the state is a deadline on one clock, in milliseconds
 * since the Unix epoch, so that deadlines written to the log, the snapshot,
 * the RDB and the replication stream keep their meaning across a restart
 * and between nodes. The wall clock itself cannot serve: it steps (an NTP
 * step, a VM paused and migrated, `date -s`), and one step forward past a
 * lease would end every lease at once, handing pages still being written
 * or read to other keys. An hf_steady is anchored to the wall clock when it
 * starts and then advances at the rate of a source that never steps:
 *
 *     now = base + (mono - mono_base) + correction
 *
 * The correction slews toward the wall clock's offset at HF_STEADY_SLEW_PPM
 * (1%) of elapsed time, never faster: a lease of length L runs between
 * 0.99 L and 1.01 L of real time, a step is absorbed, never applied, and
 * the clock still comes back to the wall clock (a 700 s step in 70,000 s),
 * so that deadlines compare across a restart and across nodes.
 *
 * Checks. At the first reading HF_STEADY_CHECK_US or more after the last
 * check (of the monotonic source), or at hf_steady_check(), the clock reads
 * the wall clock once: it re-aims the correction at the wall clock's
 * offset (a new segment, continuous with the last one, so `now` never
 * jumps), records the offset, and counts a step when the wall clock moved
 * more than HF_STEADY_STEP_US apart from the monotonic source since the
 * previous check (on_step is called once per step, with its size).
 *
 * Threads: any number of readers run beside one checker. The segment's
 * parameters sit behind a sequence counter (a reader retries if a check
 * rewrote them meanwhile); one reader at a time takes a due check (a
 * flag), the others read on. No lock, no allocation.
 */
#ifndef HF_UTIL_STEADY_H
#define HF_UTIL_STEADY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define HF_STEADY_SLEW_PPM 10000   /* 1%: the correction's largest rate */
#define HF_STEADY_CHECK_US 1000000 /* compare with the wall clock every 1 s */
#define HF_STEADY_STEP_US 1000000  /* a move of more than 1 s is a step */

/* Where an hf_steady reads time. wall_us: the wall clock (microseconds
 * since the Unix epoch), which may step; mono_us: a source that never
 * steps (microseconds since any origin). Tests give sources they move. */
typedef struct hf_steady_source {
    int64_t (*wall_us)(void *ctx);
    int64_t (*mono_us)(void *ctx);
    void *ctx;
    /* Called by the checker once per step, with the step (wall clock
     * minus monotonic source, microseconds); may be NULL. */
    void (*on_step)(void *ctx, int64_t step_us);
} hf_steady_source;

typedef struct hf_steady {
    hf_steady_source src;
    /* The segment: now = base + d + min(d * PPM / 10^6, |slew|) signed as
     * slew, where d = mono - mono_base. Odd seq: a check is rewriting it. */
    _Atomic uint32_t seq;
    _Atomic int64_t base_us, mono_base_us, slew_us;
    _Atomic int64_t next_check_us; /* mono: the next reading at or after it checks */
    atomic_flag checking;
    /* The checker's own, published for hf_steady_steps/_offset_us. */
    int64_t last_wall_us, last_mono_us;
    _Atomic int64_t offset_us; /* wall clock minus this clock, at the last check */
    _Atomic uint64_t steps;
} hf_steady;

/* Anchor the clock at the wall clock now. `src` is copied. */
void hf_steady_init(hf_steady *c, const hf_steady_source *src);

/* The clock, microseconds / milliseconds since the Unix epoch (checks if due). */
int64_t hf_steady_now_us(hf_steady *c);
int64_t hf_steady_now_ms(hf_steady *c);

/* Compare with the wall clock now, whether or not a check is due (for a
 * scrape of the figures below); a no-op while another thread checks. */
void hf_steady_check(hf_steady *c);

/* Steps of the wall clock seen so far. */
uint64_t hf_steady_steps(const hf_steady *c);
/* The wall clock minus this clock at the last check, microseconds: what the
 * slew still has to absorb. */
int64_t hf_steady_offset_us(const hf_steady *c);

#endif
