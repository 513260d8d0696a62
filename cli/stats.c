/* stats.c: the per-pool table of GET /v1/stats, once (stats) or refreshed in
 * place (watch). */
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

/* Fetch the stats; with --json print them raw, else as the table. */
static int show(const cli *o, hf3fs_meta_client *c, const char *banner)
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
        hf3fs_meta_free(json);
        return CLI_OK;
    }
    hf3fs_meta_pool_stats *pools = NULL;
    size_t n = 0;
    rc = hf3fs_meta_stats_parse(json, len, &pools, &n);
    hf3fs_meta_free(json);
    if (rc) {
        fprintf(stderr, "%s: %s: GET /v1/stats: %s\n", o->prog, o->command,
                hf3fs_meta_strerror(rc));
        return cli_exit_code(rc);
    }
    if (banner)
        printf("%s\n\n", banner);
    print_table(stdout, pools, n);
    hf3fs_meta_free(pools);
    return CLI_OK;
}

int cmd_stats(cli *o)
{
    hf3fs_meta_client *c;
    int rc = cli_no_arguments(o);
    if (rc || (rc = cli_connect(o, &c)) != 0)
        return rc;
    rc = show(o, c, NULL);
    hf3fs_meta_close(c);
    return rc;
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
        rc = show(o, c, o->json ? NULL : banner);
        fflush(stdout);
        if (rc)
            break;
        if (o->count == 0 || i < o->count)
            sleep_seconds(o->interval);
    }
    hf3fs_meta_close(c);
    return rc;
}
