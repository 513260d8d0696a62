/* stats.c: the per-pool table of GET /v1/stats, once (stats) or refreshed in
 * place (watch), and its namespaces' sizing advice (advise). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static int by_pool(const void *a, const void *b)
{
    const hf3fs_meta_pool_stats *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    if (c)
        return c;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static void print_count(FILE *f, int width, int64_t v)
{
    if (v < 0)
        fprintf(f, " %*s", width, "-");
    else
        fprintf(f, " %*lld", width, (long long)v);
}

static void print_table(FILE *f, hf3fs_meta_pool_stats *pools, size_t n)
{
    if (n > 1)
        qsort(pools, n, sizeof *pools, by_pool);
    fprintf(f, "%-16s %6s %12s %7s %12s %10s %7s %10s\n", "NAMESPACE", "RANK", "PAGES", "USED%",
            "KEYS", "RESERVED", "HIT%", "EVICTIONS");
    for (size_t i = 0; i < n; i++) {
        const hf3fs_meta_pool_stats *p = &pools[i];
        char used[16] = "-", hit[16] = "-";
        if (p->num_pages > 0 && p->free >= 0)
            snprintf(used, sizeof used, "%.1f%%",
                     100.0 * (double)(p->num_pages - p->free) / (double)p->num_pages);
        if (p->hits >= 0 && p->misses >= 0 && p->hits + p->misses > 0)
            snprintf(hit, sizeof hit, "%.1f%%",
                     100.0 * (double)p->hits / (double)(p->hits + p->misses));
        fprintf(f, "%-16s %6lld", p->ns, (long long)p->rank);
        print_count(f, 12, p->num_pages);
        fprintf(f, " %7s", used);
        print_count(f, 12, p->keys);
        print_count(f, 10, p->reserved);
        fprintf(f, " %7s", hit);
        print_count(f, 10, p->evictions);
        fputc('\n', f);
    }
    if (n == 0)
        fprintf(f, "(no pools: nothing initialized yet)\n");
}

/* A view of GET /v1/stats' text: decodes it and prints it (banner first
 * when given); an exit code. */
typedef int (*stats_view)(const cli *o, const char *json, size_t len, const char *banner);

static int parse_failed(const cli *o, int rc)
{
    fprintf(stderr, "%s: %s: GET /v1/stats: %s\n", o->prog, o->command, hf3fs_meta_strerror(rc));
    return cli_exit_code(rc);
}

static int view_pools(const cli *o, const char *json, size_t len, const char *banner)
{
    hf3fs_meta_pool_stats *pools = NULL;
    size_t n = 0;
    int rc = hf3fs_meta_stats_parse(json, len, &pools, &n);
    if (rc)
        return parse_failed(o, rc);
    if (banner)
        printf("%s\n\n", banner);
    print_table(stdout, pools, n);
    hf3fs_meta_free(pools);
    return CLI_OK;
}

/* Fetch the stats; with --json print them raw, else as the view shows them. */
static int show(const cli *o, hf3fs_meta_client *c, const char *banner, stats_view view)
{
    char *json = NULL;
    size_t len = 0;
    int rc = hf3fs_meta_stats(c, &json, &len);
    if (rc)
        return cli_fail(o, c, rc);
    if (o->json) {
        /* one document per line, whatever white space the server used */
        for (size_t i = 0; i < len; i++)
            if (json[i] == '\n' || json[i] == '\r')
                json[i] = ' ';
        printf("%s\n", json);
    } else {
        rc = view(o, json, len, banner);
    }
    hf3fs_meta_free(json);
    return rc;
}

/* One GET /v1/stats shown by view: a command that takes no arguments. */
static int show_once(cli *o, stats_view view)
{
    hf3fs_meta_client *c;
    int rc = cli_no_arguments(o);
    if (rc || (rc = cli_connect(o, &c)) != 0)
        return rc;
    rc = show(o, c, NULL, view);
    hf3fs_meta_close(c);
    return rc;
}

int cmd_stats(cli *o)
{
    return show_once(o, view_pools);
}

static void sleep_seconds(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

int cmd_watch(cli *o)
{
    hf3fs_meta_client *c;
    int rc = cli_no_arguments(o);
    if (rc || (rc = cli_connect(o, &c)) != 0)
        return rc;
    bool tty = isatty(STDOUT_FILENO) && !o->json;
    for (long i = 1; o->count == 0 || i <= o->count; i++) {
        char banner[512], when[32];
        time_t now = time(NULL);
        struct tm tm;
        strftime(when, sizeof when, "%H:%M:%S", localtime_r(&now, &tm));
        if (o->count)
            snprintf(banner, sizeof banner, "%s  every %gs  refresh %ld/%ld  %s", o->url,
                     o->interval, i, o->count, when);
        else
            snprintf(banner, sizeof banner, "%s  every %gs  refresh %ld  %s", o->url, o->interval,
                     i, when);
        if (tty)
            printf("\033[H\033[2J"); /* home and clear: refresh in place */
        else if (i > 1 && !o->json)
            printf("\n");
        rc = show(o, c, o->json ? NULL : banner, view_pools);
        fflush(stdout);
        if (rc)
            break;
        if (o->count == 0 || i < o->count)
            sleep_seconds(o->interval);
    }
    hf3fs_meta_close(c);
    return rc;
}

/* Bytes as B, KiB, MiB, GiB, TiB or PiB. */
static void format_bytes(char *buf, size_t len, double b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (b >= 1024 && u < 5) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

static void print_advice(FILE *f, const hf3fs_meta_ns_advice *a, size_t n, int64_t page_bytes)
{
    size_t coarse = 0;
    fprintf(f, "%-16s %10s %7s %7s %10s", "NAMESPACE", "PAGES", "HIT", "TARGET", "ADVISED");
    if (page_bytes)
        fprintf(f, " %12s", "BYTES");
    fprintf(f, " %9s %10s %9s\n", "DOUBLE", "HALF-FREES", "HALF");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%-16s", a[i].ns);
        print_count(f, 10, a[i].pages_now);
        if (!a[i].known) {
            fprintf(f, "  (no sampled read yet: no advice)\n");
            continue;
        }
        char advised[32], bytes[32];
        snprintf(advised, sizeof advised, "%s%s%lld", a[i].coarse ? "~" : "",
                 a[i].reached ? "" : ">", (long long)a[i].pages);
        coarse += a[i].coarse != 0;
        fprintf(f, " %6.1f%% %6.1f%% %10s", (double)a[i].hit_ratio_now / 1e4,
                (double)a[i].target / 1e4, advised);
        if (page_bytes) {
            format_bytes(bytes, sizeof bytes, (double)a[i].pages * (double)page_bytes);
            fprintf(f, " %12s", bytes);
        }
        fprintf(f, " %+7.1fpt %10lld %+7.1fpt\n", (double)a[i].doubling_gain / 1e4,
                (long long)a[i].halving_frees, -(double)a[i].halving_cost / 1e4);
    }
    if (n == 0)
        fprintf(f, "(no namespaces: nothing read yet)\n");
    if (coarse)
        fprintf(f, "~: coarse, from 5 sizes (a Redis node's module lacks the capability "
                   "fine-curve; docs/sizing.md)\n");
}

static int view_advice(const cli *o, const char *json, size_t len, const char *banner)
{
    hf3fs_meta_ns_advice *a = NULL;
    size_t n = 0;
    int rc = hf3fs_meta_advice_parse(json, len, &a, &n);
    if (rc)
        return parse_failed(o, rc);
    print_advice(stdout, a, n, o->page_bytes);
    hf3fs_meta_free(a);
    return CLI_OK;
}

int cmd_advise(cli *o)
{
    return show_once(o, view_advice);
}
