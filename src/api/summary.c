/*
 * summary.c: the periodic summary line of the log (api_log_summary): what
 * moved since the last one, summed over every pool of the store, e.g.
 *     in the last 60 s: 12 evictions, 2 refused confirmations (not_reserved 2)
 * and nothing when nothing moved. The first call only takes the figures.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"
#include "util/log.h"
#include "util/xalloc.h"

/* What the summary counts, summed over every pool. */
typedef struct summary_figures {
    uint64_t evictions, expired;
    uint64_t refused_confirms[CORE_REFUSE_COUNT];
    uint64_t refused_releases[CORE_REFUSE_COUNT];
} summary_figures;

struct api__summary {
    bool primed;
    summary_figures last;
    struct timespec last_time; /* monotonic */
};

api__summary *api__summary_new(void)
{
    return hf_xcalloc(1, sizeof(api__summary));
}

void api__summary_free(api__summary *summary)
{
    free(summary);
}

static void add_pool_figures(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *s)
{
    summary_figures *f = ctx;
    f->evictions += s->evictions;
    f->expired += s->expired_reservations;
    for (int i = 0; i < CORE_REFUSE_COUNT; i++) {
        f->refused_confirms[i] += s->refused_confirms[i];
        f->refused_releases[i] += s->refused_releases[i];
    }
}

/* Counters only grow, except when /clear forgets pools: then count from 0. */
static uint64_t moved(uint64_t now, uint64_t before)
{
    return now >= before ? now - before : now;
}

/* " (not_reserved 3, other_key 1)" for the reasons that moved. */
static uint64_t put_reasons(char *text, size_t size, const uint64_t *now, const uint64_t *before)
{
    uint64_t total = 0;
    size_t n = 0;
    for (int i = 0; i < CORE_REFUSE_COUNT; i++) {
        uint64_t d = moved(now[i], before[i]);
        if (!d)
            continue;
        total += d;
        int w = snprintf(text + n, size - n, "%s%s %" PRIu64, n ? ", " : " (",
                         api__refusal_names[i], d);
        if (w > 0 && (size_t)w < size - n)
            n += (size_t)w;
    }
    if (n && n + 2 <= size)
        memcpy(text + n, ")", 2);
    else if (!n && size)
        text[0] = '\0';
    return total;
}

void api__summary_log(api__summary *summary, store_t *store)
{
    summary_figures now = {0};
    if (store->ops->stats(store, add_pool_figures, &now) != STORE_OK)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    summary_figures before = summary->last;
    double seconds = (double)(t.tv_sec - summary->last_time.tv_sec) +
                     (double)(t.tv_nsec - summary->last_time.tv_nsec) / 1e9;
    bool primed = summary->primed;
    summary->primed = true;
    summary->last = now;
    summary->last_time = t;
    if (!primed)
        return;
    char confirms[160], releases[160];
    uint64_t evictions = moved(now.evictions, before.evictions);
    uint64_t expired = moved(now.expired, before.expired);
    uint64_t refused_c = put_reasons(confirms, sizeof confirms, now.refused_confirms,
                                     before.refused_confirms);
    uint64_t refused_r = put_reasons(releases, sizeof releases, now.refused_releases,
                                     before.refused_releases);
    if (!evictions && !expired && !refused_c && !refused_r)
        return;
    /* Only what moved: "12 evictions, 2 refused confirmations (not_reserved 2)". */
    char line[512];
    size_t n = 0;
    const struct {
        uint64_t count;
        const char *what, *reasons;
    } parts[] = {
        {evictions, "evictions", ""},
        {expired, "expired reservations", ""},
        {refused_c, "refused confirmations", confirms},
        {refused_r, "refused releases", releases},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!parts[i].count)
            continue;
        int w = snprintf(line + n, sizeof line - n, "%s%" PRIu64 " %s%s", n ? ", " : "",
                         parts[i].count, parts[i].what, parts[i].reasons);
        if (w > 0 && (size_t)w < sizeof line - n)
            n += (size_t)w;
    }
    /* Refused confirmations mean written KV that was thrown away: worth a warning. */
    log_msg(refused_c ? LOG_WARN : LOG_INFO, "in the last %.0f s: %s", seconds, line);
}
