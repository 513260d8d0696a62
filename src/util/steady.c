/*
 * steady.c: see steady.h.
 */
#include "util/steady.h"

#define LOAD(field) atomic_load_explicit(&(field), memory_order_relaxed)
#define STORE(field, v) atomic_store_explicit(&(field), (v), memory_order_relaxed)

/* The segment's clock at mono `m`. */
static int64_t segment_at(int64_t base, int64_t mono_base, int64_t slew, int64_t m)
{
    int64_t d = m - mono_base;
    if (d <= 0 || slew == 0)
        return base + d;
    int64_t most = d / (1000000 / HF_STEADY_SLEW_PPM);
    int64_t corr = slew > 0 ? (slew < most ? slew : most) : (-slew < most ? slew : -most);
    return base + d + corr;
}

/* The sequence counter and the segment's fields are read and written in
 * the one total order of sequentially consistent atomics (no fences, which
 * ThreadSanitizer cannot follow): a reader that saw the same even count
 * before and after its reads saw no write in between. On x86 such loads
 * are plain loads; only the checker's stores cost more. */
static int64_t read_at(hf_steady *c, int64_t m)
{
    for (;;) {
        uint32_t s1 = atomic_load(&c->seq);
        if (s1 & 1u)
            continue;
        int64_t base = atomic_load(&c->base_us), mono_base = atomic_load(&c->mono_base_us);
        int64_t slew = atomic_load(&c->slew_us);
        if (atomic_load(&c->seq) == s1)
            return segment_at(base, mono_base, slew, m);
    }
}

/* A new segment from (base, m) aiming at the wall clock's offset `slew`. */
static void write_segment(hf_steady *c, int64_t base, int64_t m, int64_t slew)
{
    uint32_t s = LOAD(c->seq);
    atomic_store(&c->seq, s + 1u);
    atomic_store(&c->base_us, base);
    atomic_store(&c->mono_base_us, m);
    atomic_store(&c->slew_us, slew);
    atomic_store(&c->seq, s + 2u);
}

void hf_steady_init(hf_steady *c, const hf_steady_source *src)
{
    c->src = *src;
    int64_t m = src->mono_us(src->ctx);
    int64_t wall = src->wall_us(src->ctx);
    atomic_init(&c->seq, 0u);
    atomic_init(&c->base_us, wall);
    atomic_init(&c->mono_base_us, m);
    atomic_init(&c->slew_us, 0);
    atomic_init(&c->next_check_us, m + HF_STEADY_CHECK_US);
    atomic_flag_clear(&c->checking);
    c->last_wall_us = wall;
    c->last_mono_us = m;
    atomic_init(&c->offset_us, 0);
    atomic_init(&c->steps, 0u);
}

/* The check of steady.h; `due`: only if no other check ran since it fell due. */
static void check(hf_steady *c, bool due)
{
    if (atomic_flag_test_and_set_explicit(&c->checking, memory_order_acquire))
        return;
    int64_t m = c->src.mono_us(c->src.ctx);
    if (!due || m >= LOAD(c->next_check_us)) {
        int64_t now = read_at(c, m);
        int64_t wall = c->src.wall_us(c->src.ctx);
        int64_t step = (wall - c->last_wall_us) - (m - c->last_mono_us);
        if (step > HF_STEADY_STEP_US || step < -HF_STEADY_STEP_US) {
            atomic_fetch_add_explicit(&c->steps, 1u, memory_order_relaxed);
            if (c->src.on_step)
                c->src.on_step(c->src.ctx, step);
        }
        c->last_wall_us = wall;
        c->last_mono_us = m;
        STORE(c->offset_us, wall - now);
        write_segment(c, now, m, wall - now);
        STORE(c->next_check_us, m + HF_STEADY_CHECK_US);
    }
    atomic_flag_clear_explicit(&c->checking, memory_order_release);
}

int64_t hf_steady_now_us(hf_steady *c)
{
    int64_t m = c->src.mono_us(c->src.ctx);
    if (m >= LOAD(c->next_check_us)) {
        check(c, true);
        m = c->src.mono_us(c->src.ctx);
    }
    return read_at(c, m);
}

int64_t hf_steady_now_ms(hf_steady *c)
{
    return hf_steady_now_us(c) / 1000;
}

void hf_steady_check(hf_steady *c)
{
    check(c, false);
}

uint64_t hf_steady_steps(const hf_steady *c)
{
    return atomic_load_explicit(&c->steps, memory_order_relaxed);
}

int64_t hf_steady_offset_us(const hf_steady *c)
{
    return atomic_load_explicit(&c->offset_us, memory_order_relaxed);
}
