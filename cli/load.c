/*
 * load.c: a load generator shaped like a vLLM deployment.
 *
 * Each client thread is one engine instance with its own connection. It
 * loops over prompts of K blocks (--keys-per-request). A block's key is a
 * 32-hex-digit hash chained over the prompt's blocks, as vLLM's block hashes
 * are, so prompts with the same system prompt share their first blocks:
 *   - 70% of prompts start with one of 64 system prompts chosen with a Zipf
 *     (s = 1.1) popularity, covering 25% .. 75% of the prompt; the rest of
 *     the prompt is new;
 *   - 20% repeat one of the thread's 64 most recent prompts whole (a
 *     multi-turn conversation or a retried request);
 *   - 10% are entirely new.
 * Per prompt: the scheduler calls batch_exists on the K keys and takes the
 * leading run of hits (prefix caching only reuses a prefix); then for each of
 * the two worker ranks 0 and 1, get_locations of the hits (the read path) and
 * batch_allocate + confirm_write of the rest (the write path).
 * With --dialect sglang the same flow uses exists on rank 0,
 * get_page_indices, reserve_and_allocate_page_indices and confirm_write in
 * --namespace.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

#define N_SYSTEM_PROMPTS 64
#define HISTORY 64
#define N_RANKS 2
#define KEY_LEN 32

typedef struct counters {
    atomic_uint_fast64_t requests; /* HTTP requests answered */
    atomic_uint_fast64_t prompts;
    atomic_uint_fast64_t keys_checked;   /* keys asked to batch_exists */
    atomic_uint_fast64_t keys_hit;       /* leading keys found */
    atomic_uint_fast64_t keys_allocated; /* pages reserved and confirmed */
    atomic_uint_fast64_t alloc_failed;   /* keys that got -1 */
    atomic_uint_fast64_t errors;
    atomic_uint_fast64_t latency_us; /* sum over requests */
    atomic_uint_fast64_t max_latency_us;
} counters;

typedef struct worker {
    const cli *o;
    int index;
    pthread_t thread;
    double deadline;
    counters *total;
    const double *zipf_cdf;
    atomic_int *first_error; /* first library error code seen (0: none) */
    char first_message[512];
} worker;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finalizer */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint64_t next_random(uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15ull;
    return mix64(*state);
}

static double uniform(uint64_t *state)
{
    return (double)(next_random(state) >> 11) / 9007199254740992.0;
}

static int zipf_pick(const double *cdf, uint64_t *rng)
{
    double u = uniform(rng);
    int lo = 0, hi = N_SYSTEM_PROMPTS - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

typedef struct prompt {
    uint64_t system; /* 0: no system prompt, else 1 + its index */
    uint64_t user;   /* the seed of the rest */
} prompt;

/* The K chained keys of a prompt. */
static void prompt_keys(const prompt *p, int k, char (*keys)[KEY_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    int shared = 0;
    if (p->system)
        shared = k / 4 + (int)(mix64(p->system) % (uint64_t)(k / 2 + 1));
    uint64_t chain_a = 0x6866336673ull, chain_b = 0x6d657461ull;
    for (int i = 0; i < k; i++) {
        uint64_t block = i < shared ? mix64(p->system * 1000003u + (uint64_t)i)
                                    : mix64(p->user ^ ((uint64_t)i << 40));
        chain_a = mix64(chain_a ^ block);
        chain_b = mix64(chain_b + block + chain_a);
        for (int j = 0; j < 16; j++) {
            keys[i][j] = hex[(chain_a >> (60 - 4 * j)) & 15];
            keys[i][16 + j] = hex[(chain_b >> (60 - 4 * j)) & 15];
        }
        keys[i][KEY_LEN] = '\0';
    }
}

static void note_request(worker *w, double started)
{
    uint64_t us = (uint64_t)((now_s() - started) * 1e6);
    atomic_fetch_add_explicit(&w->total->requests, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->total->latency_us, us, memory_order_relaxed);
    uint64_t max = atomic_load_explicit(&w->total->max_latency_us, memory_order_relaxed);
    while (us > max &&
           !atomic_compare_exchange_weak_explicit(&w->total->max_latency_us, &max, us,
                                                  memory_order_relaxed, memory_order_relaxed)) {}
}

static void note_error(worker *w, hf3fs_meta_client *c, int rc)
{
    atomic_fetch_add_explicit(&w->total->errors, 1, memory_order_relaxed);
    int none = 0;
    if (atomic_compare_exchange_strong(w->first_error, &none, rc))
        snprintf(w->first_message, sizeof w->first_message, "%s", hf3fs_meta_last_error(c));
}

/* One prompt: scheduler lookup, then reads and writes on every rank. */
static int run_prompt(worker *w, hf3fs_meta_client *c, const char *const *keys, int k, bool *exists,
                      int64_t *pages, const char **todo_keys, int64_t *todo_pages)
{
    const cli *o = w->o;
    bool sg = o->dialect == DIALECT_SGLANG;
    double t = now_s();
    int rc = sg ? hf3fs_meta_sglang_exists(c, 0, o->ns, keys, (size_t)k, exists)
                : hf3fs_meta_vllm_batch_exists(c, keys, (size_t)k, exists);
    if (rc)
        return rc;
    note_request(w, t);
    int hit = 0;
    while (hit < k && exists[hit])
        hit++;
    atomic_fetch_add_explicit(&w->total->keys_checked, (uint64_t)k, memory_order_relaxed);
    atomic_fetch_add_explicit(&w->total->keys_hit, (uint64_t)hit, memory_order_relaxed);
    for (int rank = 0; rank < N_RANKS; rank++) {
        if (hit > 0) {
            t = now_s();
            rc = sg ? hf3fs_meta_sglang_get_page_indices(c, rank, o->ns, keys, (size_t)hit, pages)
                    : hf3fs_meta_vllm_get_locations(c, rank, keys, (size_t)hit, pages);
            if (rc)
                return rc;
            note_request(w, t);
        }
        if (hit == k)
            continue;
        size_t n = (size_t)(k - hit);
        t = now_s();
        rc = sg ? hf3fs_meta_sglang_reserve_and_allocate(c, rank, o->ns, keys + hit, n, NULL, pages)
                : hf3fs_meta_vllm_batch_allocate(c, rank, keys + hit, n, pages);
        if (rc)
            return rc;
        note_request(w, t);
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (pages[i] < 0)
                continue;
            todo_keys[m] = keys[hit + (int)i];
            todo_pages[m] = pages[i];
            m++;
        }
        atomic_fetch_add_explicit(&w->total->alloc_failed, n - m, memory_order_relaxed);
        if (m == 0)
            continue;
        /* (the KV blocks would be written to the file here) */
        t = now_s();
        rc = sg ? hf3fs_meta_sglang_confirm_write(c, rank, o->ns, todo_keys, todo_pages, m, NULL, 0)
                : hf3fs_meta_vllm_confirm_write(c, rank, todo_keys, todo_pages, m, NULL, 0);
        if (rc)
            return rc;
        note_request(w, t);
        atomic_fetch_add_explicit(&w->total->keys_allocated, m, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&w->total->prompts, 1, memory_order_relaxed);
    return 0;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    const cli *o = w->o;
    int k = o->keys_per_request;
    hf3fs_meta_client *c = NULL;
    char(*key_text)[KEY_LEN + 1] = malloc((size_t)k * sizeof *key_text);
    const char **keys = malloc((size_t)k * sizeof *keys);
    const char **todo_keys = malloc((size_t)k * sizeof *todo_keys);
    bool *exists = malloc((size_t)k * sizeof *exists);
    int64_t *pages = malloc((size_t)k * sizeof *pages);
    int64_t *todo_pages = malloc((size_t)k * sizeof *todo_pages);
    prompt history[HISTORY];
    int n_history = 0;
    uint64_t rng = mix64((uint64_t)w->index * 7919u + (uint64_t)time(NULL) + (uint64_t)getpid());
    if (!key_text || !keys || !todo_keys || !exists || !pages || !todo_pages ||
        hf3fs_meta_open(o->url, &c) != 0) {
        int none = 0;
        atomic_compare_exchange_strong(w->first_error, &none, HF3FS_META_ENOMEM);
        goto out;
    }
    if (o->token)
        hf3fs_meta_set_bearer_token(c, o->token);
    hf3fs_meta_set_timeouts(c, 5000, o->timeout_ms);
    for (int i = 0; i < k; i++)
        keys[i] = key_text[i];
    while (now_s() < w->deadline) {
        prompt p;
        double u = uniform(&rng);
        if (u < 0.2 && n_history > 0) {
            p = history[next_random(&rng) % (uint64_t)n_history];
        } else {
            p.system = u < 0.9 ? 1 + (uint64_t)zipf_pick(w->zipf_cdf, &rng) : 0;
            p.user = next_random(&rng);
            history[n_history < HISTORY ? n_history++ : (int)(next_random(&rng) % HISTORY)] = p;
        }
        prompt_keys(&p, k, key_text);
        int rc = run_prompt(w, c, keys, k, exists, pages, todo_keys, todo_pages);
        if (rc) {
            note_error(w, c, rc);
            if (rc == HF3FS_META_ECONNECT || rc == HF3FS_META_ETIMEDOUT) {
                struct timespec ts = {0, 100 * 1000000L}; /* do not spin on a dead server */
                nanosleep(&ts, NULL);
            }
        }
    }
out:
    hf3fs_meta_close(c);
    free(key_text);
    free(keys);
    free(todo_keys);
    free(exists);
    free(pages);
    free(todo_pages);
    return NULL;
}

static uint64_t get(atomic_uint_fast64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void progress(const cli *o, counters *t, double elapsed, bool final, bool tty)
{
    double e = elapsed > 0 ? elapsed : 1e-9;
    uint64_t checked = get(&t->keys_checked);
    fprintf(stderr,
            "%s[%5.1fs] requests %llu (%.0f/s)  prompts %.0f/s  keys allocated %.0f/s"
            "  hit %.1f%%  errors %llu%s",
            tty ? "\r" : "", elapsed, (unsigned long long)get(&t->requests),
            (double)get(&t->requests) / e, (double)get(&t->prompts) / e,
            (double)get(&t->keys_allocated) / e,
            checked ? 100.0 * (double)get(&t->keys_hit) / (double)checked : 0.0,
            (unsigned long long)get(&t->errors), tty && !final ? "   " : "\n");
    fflush(stderr);
}

static void summary(const cli *o, counters *t, double elapsed)
{
    double e = elapsed > 0 ? elapsed : 1e-9;
    uint64_t requests = get(&t->requests), checked = get(&t->keys_checked);
    double mean_ms = requests ? (double)get(&t->latency_us) / (double)requests / 1000.0 : 0.0;
    double hit = checked ? 100.0 * (double)get(&t->keys_hit) / (double)checked : 0.0;
    if (o->json) {
        printf("{\"dialect\":\"%s\",\"clients\":%d,\"keys_per_request\":%d,\"duration_s\":%.3f,"
               "\"requests\":%llu,\"requests_per_s\":%.1f,\"prompts\":%llu,\"prompts_per_s\":%.1f,"
               "\"keys_checked\":%llu,\"keys_checked_per_s\":%.1f,\"keys_hit\":%llu,"
               "\"hit_rate\":%.4f,\"keys_allocated\":%llu,\"keys_allocated_per_s\":%.1f,"
               "\"alloc_failed\":%llu,\"errors\":%llu,\"mean_latency_ms\":%.3f,"
               "\"max_latency_ms\":%.3f}\n",
               o->dialect == DIALECT_SGLANG ? "sglang" : "vllm", o->clients, o->keys_per_request,
               elapsed, (unsigned long long)requests, (double)requests / e,
               (unsigned long long)get(&t->prompts), (double)get(&t->prompts) / e,
               (unsigned long long)checked, (double)checked / e,
               (unsigned long long)get(&t->keys_hit), hit / 100.0,
               (unsigned long long)get(&t->keys_allocated), (double)get(&t->keys_allocated) / e,
               (unsigned long long)get(&t->alloc_failed), (unsigned long long)get(&t->errors),
               mean_ms, (double)get(&t->max_latency_us) / 1000.0);
        return;
    }
    printf("load: %d clients, %d keys per request, %s dialect, %.1f s against %s\n", o->clients,
           o->keys_per_request, o->dialect == DIALECT_SGLANG ? "SGLang" : "vLLM", elapsed, o->url);
    printf("  requests        %12llu  %10.1f /s   latency mean %.3f ms, max %.3f ms\n",
           (unsigned long long)requests, (double)requests / e, mean_ms,
           (double)get(&t->max_latency_us) / 1000.0);
    printf("  prompts         %12llu  %10.1f /s\n", (unsigned long long)get(&t->prompts),
           (double)get(&t->prompts) / e);
    printf("  keys checked    %12llu  %10.1f /s   (scheduler batch_exists)\n",
           (unsigned long long)checked, (double)checked / e);
    printf("  keys hit        %12llu  %10.1f %%    (leading prefix found)\n",
           (unsigned long long)get(&t->keys_hit), hit);
    printf("  keys allocated  %12llu  %10.1f /s   (reserved and confirmed, all ranks)\n",
           (unsigned long long)get(&t->keys_allocated), (double)get(&t->keys_allocated) / e);
    printf("  alloc failed    %12llu\n", (unsigned long long)get(&t->alloc_failed));
    printf("  errors          %12llu\n", (unsigned long long)get(&t->errors));
}

/* An existing pool keeps its size: say so if it is not the asked one. */
static void warn_small_pools(const cli *o, hf3fs_meta_client *c, int64_t pages)
{
    char *json = NULL;
    size_t len = 0, n = 0;
    hf3fs_meta_pool_stats *pools = NULL;
    const char *ns = o->dialect == DIALECT_SGLANG && o->ns ? o->ns : "kv";
    if (hf3fs_meta_stats(c, &json, &len) == 0 &&
        hf3fs_meta_stats_parse(json, len, &pools, &n) == 0) {
        for (size_t i = 0; i < n; i++)
            if (strcmp(pools[i].ns, ns) == 0 && pools[i].rank < N_RANKS &&
                pools[i].num_pages != pages)
                fprintf(stderr,
                        "%s: load: note: pool %s/%lld already existed with %lld pages (not %lld)\n",
                        o->prog, ns, (long long)pools[i].rank, (long long)pools[i].num_pages,
                        (long long)pages);
    }
    hf3fs_meta_free(json);
    hf3fs_meta_free(pools);
}

int cmd_load(cli *o)
{
    if (o->n_args)
        return cli_usage_error(o, "takes no arguments (got %s)", o->args[0]);
    int64_t pages = o->pages == -1 ? 65536 : o->pages;
    if (pages <= 0)
        return cli_usage_error(o, "--pages must be > 0");
    hf3fs_meta_client *c;
    int rc = cli_connect(o, &c);
    if (rc)
        return rc;
    for (int rank = 0; rank < N_RANKS && rc == 0; rank++)
        rc = o->dialect == DIALECT_SGLANG ? hf3fs_meta_sglang_init(c, rank, o->ns, pages)
                                          : hf3fs_meta_vllm_init_worker(c, rank, pages);
    if (rc) {
        rc = cli_fail(o, c, rc);
        hf3fs_meta_close(c);
        return rc;
    }
    warn_small_pools(o, c, pages);
    hf3fs_meta_close(c);

    double cdf[N_SYSTEM_PROMPTS], sum = 0;
    for (int i = 0; i < N_SYSTEM_PROMPTS; i++)
        sum += 1.0 / pow(i + 1, 1.1);
    double acc = 0;
    for (int i = 0; i < N_SYSTEM_PROMPTS; i++) {
        acc += 1.0 / pow(i + 1, 1.1) / sum;
        cdf[i] = acc;
    }
    cdf[N_SYSTEM_PROMPTS - 1] = 1.0;

    counters total;
    memset(&total, 0, sizeof total);
    atomic_int first_error = 0;
    worker *workers = calloc((size_t)o->clients, sizeof *workers);
    if (!workers)
        return cli_fail(o, NULL, HF3FS_META_ENOMEM);
    double start = now_s();
    int started = 0;
    for (int i = 0; i < o->clients; i++) {
        worker *w = &workers[i];
        w->o = o;
        w->index = i;
        w->deadline = start + o->duration;
        w->total = &total;
        w->zipf_cdf = cdf;
        w->first_error = &first_error;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
            break;
        started++;
    }
    bool tty = isatty(STDERR_FILENO);
    double next = start + 1.0;
    while (now_s() < start + o->duration) {
        double left = start + o->duration - now_s();
        double step = next - now_s();
        if (step > left)
            step = left;
        if (step > 0) {
            struct timespec ts = {(time_t)step, (long)((step - (double)(time_t)step) * 1e9)};
            nanosleep(&ts, NULL);
        }
        if (now_s() >= next) {
            progress(o, &total, now_s() - start, false, tty);
            next += 1.0;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(workers[i].thread, NULL);
    double elapsed = now_s() - start;
    if (tty)
        progress(o, &total, elapsed, true, tty); /* end the line being rewritten */
    summary(o, &total, elapsed);
    rc = CLI_OK;
    int err = atomic_load(&first_error);
    if (started < o->clients) {
        fprintf(stderr, "%s: load: could only start %d of %d client threads\n", o->prog, started,
                o->clients);
        rc = CLI_SERVER;
    } else if (err) {
        for (int i = 0; i < o->clients; i++)
            if (workers[i].first_message[0]) {
                fprintf(stderr, "%s: load: first error: %s\n", o->prog, workers[i].first_message);
                break;
            }
        rc = cli_exit_code(err);
    }
    free(workers);
    return rc;
}
