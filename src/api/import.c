/*
 * import.c: reading SGLang's state file and importing it through a store
 * (import.h). The file is parsed whole by the api layer's JSON reader
 * (json.h, yajl underneath): one tree, every string and number checked,
 * before anything is imported.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/import.h"
#include "api/json.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/xalloc.h"

typedef struct import_priv {
    char *text;
    json_doc doc;
    hf_slice *keys; /* every pool's keys, pool after pool */
    int64_t *pages; /* their pages */
} import_priv;

static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        hf_errf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = hf_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = hf_xrealloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        hf_errf(err, errlen, "%s: cannot be read", path);
        hf_xfree(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* "rank" or "rank:namespace" (SGLang's GlobalMetadataState keys). */
static int parse_pool_name(hf_slice name, uint64_t max_ranks, uint32_t *rank, hf_slice *ns)
{
    const char *colon = memchr(name.ptr, ':', name.len);
    size_t digits = colon ? (size_t)(colon - name.ptr) : name.len;
    if (digits == 0 || digits > 10)
        return -1;
    uint64_t r = 0;
    for (size_t i = 0; i < digits; i++) {
        if (name.ptr[i] < '0' || name.ptr[i] > '9')
            return -1;
        r = r * 10 + (uint64_t)(name.ptr[i] - '0');
    }
    if (r >= max_ranks)
        return -1;
    *rank = (uint32_t)r;
    *ns = colon ? (hf_slice){colon + 1, name.len - digits - 1} : HF_SLICE_LIT("kv");
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A key for a message: at most 80 bytes of it, unprintable bytes as '?'. */
static const char *shown(hf_slice k, char buf[84])
{
    size_t n = k.len < 80 ? k.len : 80;
    for (size_t i = 0; i < n; i++)
        buf[i] = k.ptr[i] >= 0x20 && k.ptr[i] < 0x7f ? k.ptr[i] : '?';
    memcpy(buf + n, k.len > 80 ? "..." : "", k.len > 80 ? 4 : 1);
    return buf;
}

/* One pool's members into p (its keys and pages into keys/pages). */
static int read_pool(const json_node *name, const json_node *v, const import_limits *lim,
                     import_pool *p, hf_slice *keys, int64_t *pages, char *err, size_t errlen)
{
    const char *pn = name->u.str;
    if (parse_pool_name(json_slice(name), lim->max_ranks, &p->rank, &p->ns) != 0) {
        hf_errf(err, errlen,
                "pool \"%s\": not \"rank\" or \"rank:namespace\" with a rank below "
                "--max-ranks %" PRIu64,
                pn, lim->max_ranks);
        return -1;
    }
    if (p->ns.len > lim->max_key_bytes) {
        hf_errf(err, errlen, "pool \"%s\": the namespace is longer than --max-key-bytes", pn);
        return -1;
    }
    const json_node *np = json_get(v, "num_pages"), *fp = json_get(v, "free_pages"),
                    *kti = json_get(v, "key_to_index");
    if (v->type != JSON_OBJECT || !np || np->type != JSON_INT || !fp || fp->type != JSON_ARRAY ||
        !kti || kti->type != JSON_ARRAY) {
        hf_errf(err, errlen,
                "pool \"%s\": not an object with num_pages (an integer), free_pages "
                "and key_to_index (lists)",
                pn);
        return -1;
    }
    if (np->u.i < 0 || (uint64_t)np->u.i > lim->max_pages) {
        hf_errf(err, errlen,
                "pool \"%s\": num_pages %" PRId64 " is not in 0..%" PRIu64 " (--max-pages)", pn,
                np->u.i, lim->max_pages);
        return -1;
    }
    p->num_pages = (uint64_t)np->u.i;
    p->nkeys = kti->len;
    p->keys = keys;
    p->pages = pages;
    for (uint32_t i = 0; i < kti->len; i++) {
        const json_node *it = &kti->u.items[i];
        if (it->type != JSON_ARRAY || it->len != 2 || it->u.items[0].type != JSON_STRING ||
            it->u.items[1].type != JSON_INT || it->u.items[0].len == 0) {
            hf_errf(err, errlen,
                    "pool \"%s\": key_to_index item %" PRIu32 " is not [key, page] "
                    "with a non-empty key",
                    pn, i);
            return -1;
        }
        keys[i] = json_slice(&it->u.items[0]);
        pages[i] = it->u.items[1].u.i;
        char kb[84];
        if (keys[i].len > lim->max_key_bytes) {
            hf_errf(err, errlen, "pool \"%s\": key \"%s\" is longer than --max-key-bytes %" PRIu64,
                    pn, shown(keys[i], kb), lim->max_key_bytes);
            return -1;
        }
        if (pages[i] < 0 || (uint64_t)pages[i] >= p->num_pages) {
            hf_errf(err, errlen,
                    "pool \"%s\": key \"%s\" is at page %" PRId64 ", out of range "
                    "(num_pages %" PRIu64 ")",
                    pn, shown(keys[i], kb), pages[i], p->num_pages);
            return -1;
        }
    }
    int64_t *fl = hf_xmalloc((fp->len ? fp->len : 1) * sizeof *fl);
    for (uint32_t i = 0; i < fp->len; i++) {
        const json_node *it = &fp->u.items[i];
        if (it->type != JSON_INT || it->u.i < 0 || (uint64_t)it->u.i >= p->num_pages) {
            hf_errf(err, errlen,
                    "pool \"%s\": free_pages item %" PRIu32 " is not a page in "
                    "0..%" PRIu64,
                    pn, i, p->num_pages ? p->num_pages - 1 : 0);
            hf_xfree(fl);
            return -1;
        }
        fl[i] = it->u.i;
    }
    size_t n = p->nkeys, a, b;
    size_t *order = hf_xmalloc((n ? n : 1) * sizeof *order);
    int rc = 0;
    char k1[84], k2[84];
    if (core_repeated_page(pages, n, order, &a, &b)) {
        hf_errf(err, errlen,
                "pool \"%s\": page %" PRId64 " is owned twice (keys \"%s\" and "
                "\"%s\")",
                pn, pages[a], shown(keys[a], k1), shown(keys[b], k2));
        rc = -1;
    }
    /* Listed free pages that are owned, and the distinct free ones. */
    qsort(fl, fp->len, sizeof *fl, cmp_i64);
    uint64_t distinct_free = 0;
    size_t o = 0;
    for (uint32_t i = 0; i < fp->len && rc == 0; i++) {
        if (i > 0 && fl[i] == fl[i - 1])
            continue;
        while (o < n && pages[order[o]] < fl[i])
            o++;
        if (o < n && pages[order[o]] == fl[i])
            p->owned_and_free++;
        else
            distinct_free++;
    }
    p->listed_free = fp->len;
    p->in_flight = p->num_pages - n - distinct_free;
    if (rc == 0 && core_repeated_key(keys, n, order, &a, &b)) {
        hf_errf(err, errlen, "pool \"%s\": key \"%s\" is listed twice (items %zu and %zu)", pn,
                shown(keys[a], k1), a, b);
        rc = -1;
    }
    hf_xfree(order);
    hf_xfree(fl);
    return rc;
}

/* The record of the file's bytes (import.h). */
static void mark_of(const char *text, size_t len, char out[IMPORT_MARK_MAX])
{
    snprintf(out, IMPORT_MARK_MAX, "%zu bytes, FNV-1a 64 %016" PRIx64, len,
             hf_fnv1a(HF_FNV_OFFSET, text, len));
}

int import_already_done(store_t *s, const char *path, char *err, size_t errlen)
{
    if (!s->ops->import_mark_get)
        return 0;
    char have[IMPORT_MARK_MAX + 1], mark[IMPORT_MARK_MAX];
    int rc = s->ops->import_mark_get(s, have, sizeof have);
    if (rc < 0) {
        hf_errf(err, errlen, "cannot read what was imported: %s", store_describe(s, rc));
        return -1;
    }
    if (rc == 0)
        return 0;
    size_t len = 0;
    char *text = read_file(path, &len, err, errlen);
    if (!text)
        return -1;
    mark_of(text, len, mark);
    hf_xfree(text);
    return strcmp(have, mark) == 0;
}

int import_sglang_read(const char *path, const import_limits *limits, import_state *out, char *err,
                       size_t errlen)
{
    *out = (import_state){0};
    char why[512];
    size_t len = 0;
    char *text = read_file(path, &len, err, errlen);
    if (!text)
        return -1;
    mark_of(text, len, out->mark);
    import_priv *pv = hf_xcalloc(1, sizeof *pv);
    pv->text = text;
    out->priv = pv;
    json_doc_init(&pv->doc, &(json_limits){.max_depth = 8, .max_nodes = SIZE_MAX});
    const json_node *root;
    if (json_parse(&pv->doc, text, len, &root, why, sizeof why) != 0) {
        hf_errf(err, errlen, "%s: not JSON: %s", path, why);
        goto bad;
    }
    if (root->type != JSON_OBJECT) {
        hf_errf(err, errlen, "%s: not SGLang's state (a JSON object of pools)", path);
        goto bad;
    }
    size_t total = 0;
    for (uint32_t i = 0; i < root->len; i++) {
        const json_node *kti = json_get(&root->u.items[2 * i + 1], "key_to_index");
        total += kti && kti->type == JSON_ARRAY ? kti->len : 0;
    }
    pv->keys = hf_xmalloc((total ? total : 1) * sizeof *pv->keys);
    pv->pages = hf_xmalloc((total ? total : 1) * sizeof *pv->pages);
    out->pools = hf_xcalloc(root->len ? root->len : 1, sizeof *out->pools);
    size_t at = 0;
    for (uint32_t i = 0; i < root->len; i++) {
        import_pool *p = &out->pools[i];
        if (read_pool(&root->u.items[2 * i], &root->u.items[2 * i + 1], limits, p, pv->keys + at,
                      pv->pages + at, why, sizeof why) != 0) {
            hf_errf(err, errlen, "%s: %s", path, why);
            goto bad;
        }
        at += p->nkeys;
        out->npools++;
        for (size_t j = 0; j < i; j++)
            if (out->pools[j].rank == p->rank && hf_slice_eq(out->pools[j].ns, p->ns)) {
                hf_errf(err, errlen, "%s: pool \"%s\" is listed twice", path,
                        root->u.items[2 * i].u.str);
                goto bad;
            }
    }
    return 0;
bad:
    import_state_free(out);
    return -1;
}

void import_state_free(import_state *st)
{
    import_priv *pv = st->priv;
    if (pv) {
        json_doc_free(&pv->doc);
        hf_xfree(pv->text);
        hf_xfree(pv->keys);
        hf_xfree(pv->pages);
        hf_xfree(pv);
    }
    hf_xfree(st->pools);
    *st = (import_state){0};
}

static void count_pool(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *stats)
{
    (void)ns;
    (void)rank;
    (void)stats;
    (*(size_t *)ctx)++;
}

int import_target_pools(store_t *s)
{
    size_t pools = 0;
    int rc = s->ops->stats(s, count_pool, &pools);
    return rc != STORE_OK ? rc : pools > 0;
}

int import_sglang_apply(store_t *s, const import_state *st, const char *path, char *err,
                        size_t errlen)
{
    if (!s->ops->import_pool) {
        hf_errf(err, errlen, "this store cannot import");
        return -1;
    }
    int has = import_target_pools(s);
    if (has != 0) {
        if (has == 1)
            hf_errf(err, errlen,
                    "refused to import %s: the target state is not empty (it holds "
                    "pools already); nothing was imported",
                    path);
        else
            hf_errf(err, errlen, "cannot look at the target state: %s", store_describe(s, has));
        return -1;
    }
    uint64_t keys = 0, pages = 0;
    for (size_t i = 0; i < st->npools; i++) {
        const import_pool *p = &st->pools[i];
        int rc = s->ops->import_pool(s, p->ns, p->rank, p->num_pages, p->keys, p->pages, p->nkeys);
        if (rc != STORE_OK) {
            hf_errf(err, errlen,
                    "importing %s: pool %" PRIu32 ":%.*s failed: %s (%zu of %zu "
                    "pools were imported before it)",
                    path, p->rank, (int)p->ns.len, p->ns.ptr,
                    rc == STORE_EEXIST ? "it exists already (made meanwhile by another process)"
                                       : store_describe(s, rc),
                    i, st->npools);
            return -1;
        }
        keys += p->nkeys;
        pages += p->num_pages;
        log_msg(LOG_INFO,
                "imported pool rank %" PRIu32 " namespace '%.*s' from %s: %" PRIu64
                " pages, %zu keys owned, %" PRIu64 " free (%" PRIu64
                " in SGLang's free list, %" PRIu64
                " reserved for writes in flight, now free; %" PRIu64 " both owned and "
                "listed free, kept owned)",
                p->rank, (int)p->ns.len, p->ns.ptr, path, p->num_pages, p->nkeys,
                p->num_pages - p->nkeys, p->listed_free - p->owned_and_free, p->in_flight,
                p->owned_and_free);
    }
    log_msg(LOG_INFO,
            "imported SGLang's state %s: %zu pools, %" PRIu64 " keys, %" PRIu64
            " pages; the file is left as it was",
            path, st->npools, keys, pages);
    int rc = s->ops->import_mark_set ? s->ops->import_mark_set(s, st->mark) : STORE_OK;
    if (rc != STORE_OK)
        log_msg(LOG_WARN,
                "%s was imported but the state could not record it (%s): a start with "
                "--import-sglang %s will find the state not empty and refuse",
                path, store_describe(s, rc), path);
    return 0;
}
