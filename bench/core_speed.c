/*
 * core_speed.c: time per key of the core's batch operations, without HTTP or
 * JSON, on the state of the benchmark (2 ranks, N complete 64-hex keys).
 *
 *   build/bench/core_speed [N] [ROUNDS] [RANKS]   (default 100000, 2000, 2)
 *
 * RANKS is the TP size: every key is complete on that many ranks, so
 * batch_exists and get_locations cost what they cost at that TP size.
 *
 * Prints ns per key for: batch_exists (completeness over both ranks),
 * get_locations, and allocate + confirm of fresh keys on one rank, each over
 * ROUNDS batches of 128 keys drawn at random (like the HTTP scenarios). The
 * keys of a batch are copied into one buffer before the clock starts, as the
 * server has them in its request arena (just parsed, so in cache). Each
 * figure is the median over the batches (a shared machine preempts or
 * slows some of them; the median ignores those).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"

#define BATCH 128

static uint64_t rng = 42;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_ns(double *times, size_t n)
{
    qsort(times, n, sizeof *times, by_value);
    return n ? times[n / 2] : 0;
}

static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void key_text(uint64_t i, char out[64])
{
    static const char hex[] = "0123456789abcdef";
    uint64_t v = i * 0x9e3779b97f4a7c15ull + 1;
    for (int c = 0; c < 64; c++) {
        v ^= v >> 29;
        v *= 0xbf58476d1ce4e5b9ull;
        out[c] = hex[(v >> 33) & 15];
    }
    /* distinct keys: the first 16 characters are i in hex */
    for (int c = 0; c < 16; c++)
        out[c] = hex[(i >> (60 - 4 * c)) & 15];
}

/* BATCH random keys of names[0..n-1], copied into one buffer. */
static void draw_batch(char (*names)[64], size_t n, hf_slice *keys)
{
    static char batch[BATCH][64];
    for (size_t i = 0; i < BATCH; i++) {
        memcpy(batch[i], names[next_random() % n], 64);
        keys[i] = (hf_slice){batch[i], 64};
    }
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;
    size_t rounds = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000;
    uint32_t ranks = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 2;
    if (ranks == 0)
        ranks = 1;
    core_config cfg = {.reservation_ms = 600000,
                       .read_lease_ms = 5000,
                       .evict = true,
                       .max_pages = CORE_MAX_PAGES_LIMIT,
                       .max_ranks = 1024,
                       .hash_seed = 7};
    core_t *core = core_new(&cfg);
    hf_slice ns = HF_SLICE_LIT("kv");
    size_t pages_per_rank = n + rounds * BATCH + 1;
    char(*names)[64] = malloc(n * sizeof *names);
    static char fresh[BATCH][64];
    hf_slice keys[BATCH];
    int64_t pages[BATCH];
    bool present[BATCH];
    for (uint32_t r = 0; r < ranks; r++)
        core_pool_init(core, ns, r, pages_per_rank, NULL);
    for (size_t i = 0; i < n; i++)
        key_text(i, names[i]);
    int64_t now = 1000;
    for (size_t done = 0; done < n; done += BATCH) {
        size_t b = n - done < BATCH ? n - done : BATCH;
        for (size_t i = 0; i < b; i++)
            keys[i] = (hf_slice){names[done + i], 64};
        for (uint32_t r = 0; r < ranks; r++) {
            core_pool_t *pool = core_pool_find(core, ns, r);
            core_allocate(pool, keys, b, CORE_ALLOC_ALL_OR_NOTHING, now, pages, NULL);
            core_confirm(pool, keys, pages, b, NULL, 0, now, NULL);
        }
    }

    double *times[3];
    for (int k = 0; k < 3; k++)
        times[k] = calloc(rounds ? rounds : 1, sizeof(double));
    double t;
    size_t hits = 0;
    for (size_t round = 0; round < rounds; round++) {
        draw_batch(names, n, keys);
        t = now_ns();
        core_complete_exists(core, ns, keys, BATCH, now, present);
        times[0][round] = now_ns() - t;
        for (size_t i = 0; i < BATCH; i++)
            hits += present[i];
    }
    for (size_t round = 0; round < rounds; round++) {
        draw_batch(names, n, keys);
        t = now_ns();
        core_complete_locations(core, ns, (uint32_t)(round % ranks), keys, BATCH, now, pages);
        times[1][round] = now_ns() - t;
    }
    for (size_t round = 0; round < rounds; round++) {
        for (size_t i = 0; i < BATCH; i++) {
            key_text(n + round * BATCH + i, fresh[i]);
            keys[i] = (hf_slice){fresh[i], 64};
        }
        core_pool_t *pool = core_pool_find(core, ns, (uint32_t)(round % ranks));
        t = now_ns();
        core_allocate(pool, keys, BATCH, CORE_ALLOC_ALL_OR_NOTHING, now, pages, NULL);
        core_confirm(pool, keys, pages, BATCH, NULL, 0, now, NULL);
        times[2][round] = now_ns() - t;
    }
    double per = BATCH;
    double exists_ns = median_ns(times[0], rounds), locations_ns = median_ns(times[1], rounds);
    double save_ns = median_ns(times[2], rounds);
    printf("core, %zu complete keys on %u ranks, batches of %d:\n", n, ranks, BATCH);
    printf("  batch_exists      %.0f ns per key (%zu of %zu present)\n", exists_ns / per, hits,
           rounds * BATCH);
    printf("  get_locations     %.0f ns per key\n", locations_ns / per);
    printf("  allocate+confirm  %.0f ns per key (one rank)\n", save_ns / per);
    core_free(core);
    free(names);
    for (int k = 0; k < 3; k++)
        free(times[k]);
    return 0;
}
