/*
 * admin.c: the Redis engine's calls over every namespace: stats and check
 * ask every primary for the namespaces it holds (HF3FS.NAMESPACES), then
 * every stripe of each (stripes.c, "EVERY NAMESPACE"); stats sums each
 * pool's figures over its stripes and adds the prefix counters this front
 * end keeps. And the tests' dump of a pool's pages (store_redis_pages).
 */
#include "store/redis/internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fiber.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* A namespace's prefix counters (core.h core_prefix_count). A stripe sees
 * only its share of a request's keys, and a request's leading run is not a
 * sum of its stripes' figures, so the front end, which holds the whole
 * answer, counts: these are this front end's requests (volatile, like the
 * embedded engine's, and dropped by clear_all as there). */
typedef struct prefix_row {
    struct prefix_row *next;
    reuse_prefix c;
    size_t len;
    char name[];
} prefix_row;

/* ns's row of the prefix counters, or NULL. Under r->lock. */
static prefix_row *prefix_find(store_redis *r, hf_slice ns)
{
    HF_ASSERT(hf_mutex_held(&r->lock));
    prefix_row *row = r->prefix;
    while (row && !(row->len == ns.len && memcmp(row->name, ns.ptr, ns.len) == 0))
        row = row->next;
    return row;
}

void redis__prefix_count(store_redis *r, hf_slice ns, const bool *present, size_t n)
{
    HF_ASSERT((ns.ptr || ns.len == 0) && (present || n == 0));
    hf_mutex_lock(&r->lock);
    prefix_row *row = prefix_find(r, ns);
    if (!row) {
        row = hf_xcalloc(1, sizeof *row + ns.len + 1);
        row->len = ns.len;
        if (ns.len)
            memcpy(row->name, ns.ptr, ns.len);
        row->next = r->prefix;
        r->prefix = row;
    }
    reuse_prefix_count(&row->c, present, n);
    hf_mutex_unlock(&r->lock);
}

void redis__prefix_free(prefix_row *row)
{
    while (row) {
        prefix_row *next = row->next;
        free(row);
        row = next;
    }
}

/* A namespace some node holds. */
typedef struct ns_name {
    char *p;
    size_t len;
} ns_name;

static int ns_cmp(const void *x, const void *y)
{
    const ns_name *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->p, b->p, n) : 0;
    return c ? c : a->len < b->len ? -1 : a->len > b->len;
}

static void names_free(ns_name *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].p);
    free(v);
}

/* Every namespace that a node holds (HF3FS.NAMESPACES on every primary),
 * in byte order, each once. STORE_OK and *out (names_free) or a code. */
static int namespaces(store_redis *r, ns_name **out, size_t *nout)
{
    *out = NULL;
    *nout = 0;
    const char *argv[1] = {"HF3FS.NAMESPACES"};
    size_t lens[1] = {16};
    size_t n;
    redis_cmd *cmds = redis_link_on_primaries(r->link, 1, argv, lens, false, &n);
    int code = redis__judge_all(r, cmds, n);
    size_t total = 0;
    for (size_t i = 0; code == STORE_OK && i < n; i++) {
        if (cmds[i].reply->type != REDIS_REPLY_ARRAY)
            code = redis__malformed(r, NULL, "HF3FS.NAMESPACES");
        else
            total += cmds[i].reply->elements;
    }
    ns_name *v = NULL;
    size_t m = 0;
    if (code == STORE_OK) {
        v = hf_xcalloc(total ? total : 1, sizeof *v);
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < cmds[i].reply->elements; j++) {
                const redisReply *e = cmds[i].reply->element[j];
                if (e->type != REDIS_REPLY_STRING)
                    continue;
                v[m].p = hf_xmalloc(e->len + 1);
                memcpy(v[m].p, e->str, e->len);
                v[m].len = e->len;
                m++;
            }
        qsort(v, m, sizeof *v, ns_cmp);
        size_t k = 0; /* a value met twice (a slot moving): once */
        for (size_t i = 0; i < m; i++) {
            if (k > 0 && ns_cmp(&v[k - 1], &v[i]) == 0) {
                free(v[i].p);
                continue;
            }
            v[k++] = v[i];
        }
        m = k;
    }
    redis_cmds_free(cmds, n);
    if (code != STORE_OK)
        return code;
    *out = v;
    *nout = m;
    return STORE_OK;
}

/* An HF3FS.STATS row: the rank, the figures and the refusals (core.h lists
 * both), the estimator's sampled blocks and hits per scale: every scale
 * with WIRE_STATS_FINE, else the coarse curve's (core/reuse.h). */
enum {
    STATS_EST = 1 + CORE_POOL_FIGURE_COUNT + 2 * CORE_REFUSE_COUNT + 1, /* the first scale's */
    STATS_FIELDS = STATS_EST + REUSE_SCALES,
    STATS_COARSE_FIELDS = STATS_EST + REUSE_COARSE,
};

/* One pool's row of HF3FS.STATS as numbers (v[0] the rank), a coarse row's
 * scales at their places among every scale's (the others 0); -1 if
 * malformed. */
static int stats_values(const redisReply *row, int64_t *v, bool *coarse)
{
    if (row->type != REDIS_REPLY_ARRAY ||
        (row->elements != STATS_FIELDS && row->elements != STATS_COARSE_FIELDS))
        return -1;
    *coarse = row->elements == STATS_COARSE_FIELDS;
    for (size_t j = 0, e = 0; j < STATS_FIELDS; j++) {
        if (j >= STATS_EST && !reuse_scale_in(*coarse, (int)(j - STATS_EST))) {
            v[j] = 0;
            continue;
        }
        if (row->element[e]->type != REDIS_REPLY_INTEGER)
            return -1;
        v[j] = row->element[e++]->integer;
    }
    return 0;
}

static void stats_of(const int64_t *v, bool coarse, core_pool_stats *st)
{
    size_t k = 1;
#define READ_FIGURE(field, ...) st->field = (uint64_t)v[k++];
    CORE_POOL_FIGURES(READ_FIGURE, CORE_POOL_NO_ALIAS)
#undef READ_FIGURE
#define READ_REFUSALS(field, ...)                                                                  \
    for (int j = 0; j < CORE_REFUSE_COUNT; j++)                                                    \
        st->field[j] = (uint64_t)v[k++];
    CORE_POOL_REFUSALS(READ_REFUSALS)
#undef READ_REFUSALS
    st->est_blocks = (uint64_t)v[k++];
    st->est_coarse = coarse;
    for (int j = 0; j < REUSE_SCALES; j++, k++)
        st->est_hits[j] = reuse_scale_in(coarse, j) ? (uint64_t)v[k] : 0;
}

/* A pool's figures summed over the stripes of its namespace: coarse if
 * one stripe's row was (its node's module lacks "fine-curve"). */
typedef struct pool_sum {
    int64_t v[STATS_FIELDS]; /* v[0]: the rank */
    bool coarse;
} pool_sum;

static int sum_cmp(const void *x, const void *y)
{
    const pool_sum *a = x, *b = y;
    return a->v[0] < b->v[0] ? -1 : a->v[0] > b->v[0];
}

/* Every namespace's layout (NULL: its anchor is gone) and one command per
 * stripe of each, CMD key [now] [word], all at once: b's commands in
 * namespace then stripe order. */
static int per_stripe(store_redis *r, const char *cmd, bool with_now, const char *word,
                      const ns_name *v, size_t n, const layout **Ls, batch *b, bool judged)
{
    int code = STORE_OK;
    size_t total = 0;
    for (size_t i = 0; i < n && code == STORE_OK; i++) {
        code = redis__layout_of(r, (hf_slice){v[i].p, v[i].len}, false, &Ls[i]);
        total += Ls[i] ? Ls[i]->count : 0;
    }
    redis__batch_init(b, total);
    if (code != STORE_OK)
        return code;
    for (size_t i = 0; i < n; i++)
        for (uint32_t j = 0; Ls[i] && j < Ls[i]->count; j++) {
            args *a = &b->as[b->m];
            b->stripe[b->m++] = j;
            redis__args_cmd_key(a, cmd, Ls[i]->key[j], Ls[i]->keylen[j], Ls[i]->slot[j]);
            if (with_now)
                redis__args_int(a, redis__now_of(r));
            if (word)
                redis__args_str(a, word);
        }
    if (judged) {
        redis__batch_run(r, b, false);
    } else {
        for (size_t k = 0; k < b->m; k++)
            b->cmds[k] = redis__cmd_of(&b->as[k]);
        redis_link_exec(r->link, b->cmds, b->m, false);
    }
    return STORE_OK;
}

/* Every pool's figures, summed over its stripes: by namespace (byte
 * order), then rank. A namespace or a stripe that went away meanwhile (a
 * clear) has no pools. */
int redis__stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    HF_ASSERT(fn);
    store_redis *r = R(s);
    ns_name *v;
    size_t n;
    int code = namespaces(r, &v, &n);
    if (code != STORE_OK)
        return code;
    const layout **Ls = hf_xcalloc(n ? n : 1, sizeof *Ls);
    batch b;
    /* the whole curve only where every node met can send it (a node
     * without the capability would refuse the argument) */
    const char *fine = redis__all_can(r, WIRE_CAP_FINE_CURVE) ? WIRE_STATS_FINE : NULL;
    code = per_stripe(r, "HF3FS.STATS", true, fine, v, n, Ls, &b, true);
    size_t k = 0;
    pool_sum *sums = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < n && code == STORE_OK; i++) {
        size_t nsum = 0;
        for (uint32_t j = 0; Ls[i] && j < Ls[i]->count && code == STORE_OK; j++, k++) {
            if (b.codes[k] == STORE_ENOPOOL)
                continue;
            if (b.codes[k] != STORE_OK) {
                code = b.codes[k] == STORE_EINVAL || b.codes[k] == RESTRIPE ? STORE_EUNAVAILABLE
                                                                            : b.codes[k];
                break;
            }
            const redisReply *rep = b.reps[k];
            if (rep->type != REDIS_REPLY_ARRAY) {
                code = redis__malformed(r, NULL, "HF3FS.STATS");
                break;
            }
            for (size_t e = 0; e < rep->elements; e++) {
                int64_t row[STATS_FIELDS];
                bool coarse;
                if (stats_values(rep->element[e], row, &coarse) != 0) {
                    code = redis__malformed(r, NULL, "HF3FS.STATS");
                    break;
                }
                size_t at = 0;
                while (at < nsum && sums[at].v[0] != row[0])
                    at++;
                if (at == nsum) {
                    if (nsum == cap) {
                        cap = cap ? 2 * cap : 8;
                        sums = hf_xreallocarray(sums, cap, sizeof *sums);
                    }
                    memset(&sums[nsum++], 0, sizeof *sums);
                    sums[at].v[0] = row[0];
                }
                for (size_t f = 1; f < STATS_FIELDS; f++)
                    sums[at].v[f] += row[f];
                sums[at].coarse |= coarse;
            }
        }
        if (code != STORE_OK)
            break;
        if (nsum > 1) /* sums is NULL until a first row: qsort wants a valid pointer */
            qsort(sums, nsum, sizeof *sums, sum_cmp);
        for (size_t j = 0; j < nsum; j++) {
            core_pool_stats st;
            memset(&st, 0, sizeof st);
            stats_of(sums[j].v, sums[j].coarse, &st);
            if (j == 0) { /* the namespace's figures go with its first pool */
                hf_slice name = {v[i].p, v[i].len};
                hf_mutex_lock(&r->lock);
                const prefix_row *row = prefix_find(r, name);
                if (row) {
                    st.prefix_requests = row->c.requests;
                    st.prefix_blocks = row->c.blocks;
                    st.prefix_hits = row->c.hit_blocks;
                }
                hf_mutex_unlock(&r->lock);
            }
            fn(ctx, (hf_slice){v[i].p, v[i].len}, (uint32_t)sums[j].v[0], &st);
        }
    }
    free(sums);
    redis__batch_free(&b);
    free(Ls);
    names_free(v, n);
    return code;
}

/* 0, or -1 with what is wrong (the first value whose check fails), or
 * STORE_EUNAVAILABLE / STORE_EUNCERTAIN when Redis could not be asked. */
int redis__check(store_t *s, char *err, size_t errlen)
{
    HF_ASSERT(err && errlen > 0);
    store_redis *r = R(s);
    ns_name *v;
    size_t n;
    int code = namespaces(r, &v, &n);
    if (code != STORE_OK) {
        snprintf(err, errlen, "Redis: %s", store_describe(s, code));
        return STORE_EUNAVAILABLE;
    }
    const layout **Ls = hf_xcalloc(n ? n : 1, sizeof *Ls);
    batch b;
    code = per_stripe(r, "HF3FS.CHECK", false, NULL, v, n, Ls, &b, false);
    int bad = 0;
    if (code != STORE_OK) {
        snprintf(err, errlen, "Redis: %s", store_describe(s, code));
        bad = STORE_EUNAVAILABLE;
    }
    size_t k = 0;
    for (size_t i = 0; i < n && bad == 0; i++)
        for (uint32_t j = 0; Ls[i] && j < Ls[i]->count && bad == 0; j++, k++) {
            redis_cmd *c = &b.cmds[k];
            if (c->code != STORE_OK) {
                snprintf(err, errlen, "Redis: %s", store_describe(s, c->code));
                bad = STORE_EUNAVAILABLE;
            } else if (c->reply->type == REDIS_REPLY_ERROR && !redis__starts(c->reply, "ENOPOOL")) {
                if (redis__refused_before_running(c->reply)) {
                    snprintf(err, errlen, "Redis refused the check: %s", c->reply->str);
                    bad = STORE_EUNAVAILABLE;
                } else {
                    snprintf(err, errlen, "namespace '%.*s' stripe %" PRIu32 " of %" PRIu32 ": %s",
                             (int)(v[i].len > 100 ? 100 : v[i].len), v[i].p, j, Ls[i]->count,
                             c->reply->str);
                    bad = -1;
                }
            }
        }
    redis__batch_free(&b);
    free(Ls);
    names_free(v, n);
    return bad;
}

int store_redis_pages(store_t *s, hf_slice ns, uint32_t rank, store_redis_page *pages,
                      size_t npages)
{
    HF_ASSERT(pages || npages == 0);
    store_redis *r = R(s);
    const layout *L;
    int rc = redis__layout_present(r, ns, false, &L);
    if (rc != STORE_OK)
        return rc == NO_NAMESPACE ? STORE_ENOPOOL : rc;
    memset(pages, 0, npages * sizeof *pages);
    batch b;
    redis__batch_init(&b, L->count);
    for (uint32_t i = 0; i < L->count; i++) {
        args *a = &b.as[b.m];
        b.stripe[b.m++] = i;
        redis__args_cmd_key(a, "HF3FS.PAGES", L->key[i], L->keylen[i], L->slot[i]);
        redis__args_int(a, redis__now_of(r));
        redis__args_int(a, rank);
        redis__args_int(a, 0);
        redis__args_int(
            a, (int64_t)wire_stripe_pages(npages, (wire_stripe){.count = L->count, .index = i}));
    }
    redis__batch_run(r, &b, false);
    rc = redis__batch_outcome(&b, false, true);
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        const redisReply *rep = b.reps[k];
        if (rep->type != REDIS_REPLY_ARRAY) {
            rc = redis__malformed(r, NULL, "HF3FS.PAGES");
            break;
        }
        for (size_t l = 0; l < rep->elements && rc == STORE_OK; l++) {
            size_t at = l * L->count + b.stripe[k];
            const redisReply *e = rep->element[l];
            if (at >= npages)
                break;
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 3) {
                rc = redis__malformed(r, NULL, "HF3FS.PAGES");
                break;
            }
            store_redis_page *p = &pages[at];
            p->state = (int)redis__int_of(e->element[0]);
            p->deadline = redis__int_of(e->element[1]);
            if (e->element[2]->type == REDIS_REPLY_STRING) {
                p->key_len = e->element[2]->len < sizeof p->key - 1 ? e->element[2]->len
                                                                    : sizeof p->key - 1;
                memcpy(p->key, e->element[2]->str, p->key_len);
            }
            p->key[p->key_len] = '\0';
        }
    }
    redis__batch_free(&b);
    return rc;
}
