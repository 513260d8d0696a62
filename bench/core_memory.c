/*
 * core_memory.c: resident memory of the core per owned (key, rank) entry,
 * per free page, and for a freshly created pool of 10^9 pages.
 *
 *   build/bench/core_memory [entries] [--no-pool] [--tp N]   (default 1000000, TP 1)
 *
 * --tp N: N ranks (pools of one namespace), every key saved in each, as a
 * TP-N engine does; the owned figure is then per (key, rank).
 *
 * Figures: per owned (key, rank) entry with keys of each engine's shape
 * (bench/keys.h: 32-hex, vLLM's MD5; 64-hex, SGLang's SHA-256; 66 bytes,
 * SGLang's "<64 hex>-k"/"-v" of an MHA model under page_first); per free
 * page once used (reserved, then released: its record stays, plus a slot on
 * the free stack; a page never handed out costs nothing); a fresh pool of
 * 10^9 pages (left out with --no-pool).
 *
 * It reads VmRSS from /proc/self/status before and after each phase; the
 * figure includes the page records, the key index and allocator overhead.
 * Each figure is taken in a child process of its own, so that memory freed
 * by one measurement (and kept by malloc) cannot hide the next one's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include "core/core.h"
#include "core/core_internal.h"
#include "keys.h"

static size_t core_pool_struct_bytes(void)
{
    return sizeof(core_pool_t);
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kib;
}

static unsigned tp = 1;

static void fill(core_t *core, size_t entries, int key_chars)
{
    enum { BATCH = 1024 };
    static char names[BATCH][BENCH_KEY_MAX];
    hf_slice keys[BATCH];
    int64_t pages[BATCH];
    for (size_t done = 0; done < entries; done += BATCH) {
        size_t n = entries - done < BATCH ? entries - done : BATCH;
        for (size_t i = 0; i < n; i++) {
            bench_key_text(done + i, key_chars, names[i]);
            keys[i] = (hf_slice){names[i], (size_t)key_chars};
        }
        for (unsigned r = 0; r < tp; r++) {
            core_pool_t *pool = core_pool_find(core, HF_SLICE_LIT("kv"), r);
            core_allocate(pool, keys, n, CORE_ALLOC_PARTIAL, 0, pages, NULL);
            core_confirm(pool, keys, pages, n, NULL, 0, 0, NULL);
        }
    }
}

/* The core every measurement runs: pools as large as the core allows. */
static const core_config CFG = {.reservation_ms = 600000,
                                .read_lease_ms = 5000,
                                .evict = true,
                                .max_pages = CORE_MAX_PAGES_LIMIT,
                                .max_ranks = 1024,
                                .hash_seed = 1};

static void measure(size_t entries, int key_chars)
{
    core_t *core = core_new(&CFG);
    long before = rss_kib();
    for (unsigned r = 0; r < tp; r++)
        core_pool_init(core, HF_SLICE_LIT("kv"), r, entries, NULL);
    fill(core, entries, key_chars);
    long after = rss_kib();
    core_pool_stats st;
    core_pool_get_stats(core_pool_find(core, HF_SLICE_LIT("kv"), 0), 0, &st);
    printf("%zu owned entries, %d-char keys, TP %u: %.1f bytes per (key, rank) (owned %llu per "
           "rank)\n",
           entries, key_chars, tp, (double)(after - before) * 1024.0 / (double)entries / tp,
           (unsigned long long)st.owned);
    core_free(core);
}

/* Reserve every page of an `entries`-page pool, then release them all. */
static void measure_free_pages(size_t entries)
{
    enum { BATCH = 1024 };
    static char names[BATCH][32];
    hf_slice keys[BATCH];
    int64_t *pages = calloc(entries ? entries : 1, sizeof *pages);
    core_t *core = core_new(&CFG);
    long before = rss_kib();
    core_pool_init(core, HF_SLICE_LIT("kv"), 0, entries, NULL);
    core_pool_t *pool = core_pool_find(core, HF_SLICE_LIT("kv"), 0);
    for (size_t done = 0; done < entries; done += BATCH) {
        size_t n = entries - done < BATCH ? entries - done : BATCH;
        for (size_t i = 0; i < n; i++) {
            bench_key_text(done + i, 32, names[i]);
            keys[i] = (hf_slice){names[i], 32};
        }
        core_allocate(pool, keys, n, CORE_ALLOC_PARTIAL, 0, pages + done, NULL);
    }
    core_confirm(pool, NULL, NULL, 0, pages, entries, 0, NULL);
    /* the pages array was allocated (and touched by calloc's first use) before */
    long after = rss_kib() - (long)(entries * sizeof *pages / 1024);
    core_pool_stats st;
    core_pool_get_stats(pool, 0, &st);
    printf("%zu free pages once used: %.1f bytes per page (free %llu); never used: 0 bytes\n",
           entries, (double)(after - before) * 1024.0 / (double)entries,
           (unsigned long long)st.free);
    core_free(core);
    free(pages);
}

static void in_child(void (*fn)(size_t, int), size_t entries, int key_chars)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        fn(entries, key_chars);
        fflush(stdout);
        _exit(0);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

static void measure_free(size_t entries, int unused)
{
    (void)unused;
    measure_free_pages(entries);
}

static void measure_pool(size_t unused_entries, int unused)
{
    (void)unused_entries;
    (void)unused;
    /* Warm up malloc and stdio first (a first fopen or malloc in the child
     * maps and touches pages that have nothing to do with the pool). */
    core_t *warm = core_new(&CFG);
    core_pool_init(warm, HF_SLICE_LIT("warm"), 0, 1, NULL);
    core_free(warm);
    (void)rss_kib();
    core_t *core = core_new(&CFG);
    long before = rss_kib();
    core_pool_init(core, HF_SLICE_LIT("kv"), 0, 1000000000ull, NULL);
    long after = rss_kib();
    printf("pool of 10^9 pages just created: %ld KiB (RSS granularity is 4 KiB pages; the pool "
           "record is %zu bytes)\n",
           after - before, core_pool_struct_bytes());
    core_free(core);
}

int main(int argc, char **argv)
{
    size_t entries = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000000;
    bool pool = true;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--no-pool") == 0)
            pool = false;
        else if (strcmp(argv[i], "--tp") == 0 && i + 1 < argc)
            tp = (unsigned)strtoul(argv[++i], NULL, 10);
    }
    if (tp == 0)
        tp = 1;
    in_child(measure, entries, 32);
    in_child(measure, entries, 64);
    in_child(measure, entries, 66);
    in_child(measure_free, entries, 0);
    if (pool)
        in_child(measure_pool, 0, 0);
    return 0;
}
