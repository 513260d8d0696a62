/*
 * admin.c: GET /health, GET /v1/stats (raw and decoded), and the raw request
 * the CLI uses for anything else.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

int hf3fs_meta_health(hf3fs_meta_client *c)
{
    int rc = hf3fs_meta__begin(c);
    if (rc)
        return rc;
    rc = hf3fs_meta__call(c, "GET", "/health", NULL, 0, HF3FS_META__IDEMPOTENT);
    if (rc || (rc = hf3fs_meta__check_status(c, "GET /health")) != 0)
        return rc;
    hf3fs_meta__json_doc doc;
    const hf3fs_meta__buf *body = &c->reader.body;
    rc = hf3fs_meta__json_parse(&doc, body->data ? body->data : "", body->len, 8);
    if (rc == 0 &&
        !hf3fs_meta__json_string_eq(&doc, hf3fs_meta__json_get(&doc, 0, "status"), "ok", 2))
        rc = HF3FS_META_EPROTO;
    hf3fs_meta__json_free(&doc);
    if (rc == HF3FS_META_EPROTO)
        return hf3fs_meta__set_error(c, rc, "GET /health: answer is not {\"status\": \"ok\"}");
    if (rc)
        return hf3fs_meta__set_error(c, rc, "GET /health: %s", hf3fs_meta_strerror(rc));
    return 0;
}

int hf3fs_meta_stats(hf3fs_meta_client *c, char **json_out, size_t *len_out)
{
    if (json_out)
        *json_out = NULL;
    int rc = hf3fs_meta__begin(c);
    if (rc)
        return rc;
    if (!json_out)
        return hf3fs_meta__set_error(c, HF3FS_META_EINVAL, "json_out is NULL");
    rc = hf3fs_meta__call(c, "GET", "/v1/stats", NULL, 0, HF3FS_META__IDEMPOTENT);
    if (rc || (rc = hf3fs_meta__check_status(c, "GET /v1/stats")) != 0)
        return rc;
    hf3fs_meta__buf *body = &c->reader.body;
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__json_parse(&doc, body->data ? body->data : "", body->len,
                                HF3FS_META__JSON_DEFAULT_DEPTH);
    bool object = rc == 0 && doc.nodes[0].type == HF3FS_META__JSON_OBJECT;
    hf3fs_meta__json_free(&doc);
    if (rc == HF3FS_META_ENOMEM)
        return hf3fs_meta__set_error(c, rc, "GET /v1/stats: out of memory");
    if (!object)
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                     "GET /v1/stats: answer is not a JSON object");
    char *text = hf3fs_meta__buf_steal(body, len_out);
    if (!text)
        return hf3fs_meta__set_error(c, HF3FS_META_ENOMEM, "GET /v1/stats: out of memory");
    hf3fs_meta__buf_init(body, c->max_answer);
    *json_out = text;
    return 0;
}

/* The counters of hf3fs_meta_pool_stats, each decoded from the member of
 * the same name. The library sees only its public header: the server's list
 * of a pool's figures (src/core/core.h) is not its to include, and the
 * struct is a fixed part of its ABI, a subset of them. */
static const struct {
    const char *name;
    size_t offset;
} counters[] = {
#define COUNTER(field)                                                                             \
    {                                                                                              \
#field, offsetof(hf3fs_meta_pool_stats, field)                                             \
    }
    COUNTER(rank),  COUNTER(num_pages), COUNTER(free),      COUNTER(reserved),
    COUNTER(owned), COUNTER(draining),  COUNTER(keys),      COUNTER(touched),
    COUNTER(hits),  COUNTER(misses),    COUNTER(evictions),
#undef COUNTER
};

/* Fills one row from a member's object (its "namespace" already copied). */
typedef int (*row_fill)(const hf3fs_meta__json_doc *doc, uint32_t obj, void *row);

/* The array `member` of GET /v1/stats' text as rows of row_size bytes, in
 * one allocation (the rows, then their namespace strings, each row's const
 * char * at ns_offset), freed with hf3fs_meta_free(*rows_out). Every object
 * must have a string "namespace". */
static int parse_rows(const char *json, size_t len, const char *member, size_t row_size,
                      size_t ns_offset, row_fill fill, void **rows_out, size_t *n_out)
{
    if (rows_out)
        *rows_out = NULL;
    if (n_out)
        *n_out = 0;
    if (!json || !rows_out || !n_out)
        return HF3FS_META_EINVAL;
    hf3fs_meta__json_doc doc;
    int rc = hf3fs_meta__json_parse(&doc, json, len, HF3FS_META__JSON_DEFAULT_DEPTH);
    uint32_t list = rc == 0 ? hf3fs_meta__json_get(&doc, 0, member) : HF3FS_META__JSON_NONE;
    if (rc == 0 &&
        (list == HF3FS_META__JSON_NONE || doc.nodes[list].type != HF3FS_META__JSON_ARRAY))
        rc = HF3FS_META_EPROTO;
    size_t n = rc == 0 ? doc.nodes[list].count : 0, strings = 0;
    for (uint32_t p = rc == 0 ? hf3fs_meta__json_first(&doc, list) : HF3FS_META__JSON_NONE;
         p != HF3FS_META__JSON_NONE; p = hf3fs_meta__json_next(&doc, list, p)) {
        size_t ns_len;
        if (!hf3fs_meta__json_string(&doc, hf3fs_meta__json_get(&doc, p, "namespace"), &ns_len)) {
            rc = HF3FS_META_EPROTO;
            break;
        }
        strings += ns_len + 1;
    }
    char *out = NULL;
    if (rc == 0 && n) {
        out = calloc(1, n * row_size + strings);
        if (!out)
            rc = HF3FS_META_ENOMEM;
    }
    char *str = out ? out + n * row_size : NULL;
    size_t i = 0;
    for (uint32_t p = rc == 0 && n ? hf3fs_meta__json_first(&doc, list) : HF3FS_META__JSON_NONE;
         p != HF3FS_META__JSON_NONE && rc == 0; p = hf3fs_meta__json_next(&doc, list, p), i++) {
        size_t ns_len;
        const char *ns = hf3fs_meta__json_string(&doc, hf3fs_meta__json_get(&doc, p, "namespace"),
                                                 &ns_len);
        memcpy(str, ns, ns_len + 1);
        memcpy(out + i * row_size + ns_offset, &str, sizeof str);
        str += ns_len + 1;
        rc = fill(&doc, p, out + i * row_size);
    }
    hf3fs_meta__json_free(&doc);
    if (rc) {
        free(out);
        return rc;
    }
    *rows_out = out;
    *n_out = n;
    return 0;
}

static int pool_of(const hf3fs_meta__json_doc *doc, uint32_t obj, void *row)
{
    for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) {
        uint32_t v = hf3fs_meta__json_get(doc, obj, counters[k].name);
        int64_t *field = (int64_t *)((char *)row + counters[k].offset);
        *field = -1;
        if (v == HF3FS_META__JSON_NONE && k != 0)
            continue; /* optional counter */
        if (hf3fs_meta__json_int(doc, v, field) != 0)
            return HF3FS_META_EPROTO;
    }
    return 0;
}

int hf3fs_meta_stats_parse(const char *json, size_t len, hf3fs_meta_pool_stats **pools_out,
                           size_t *n_out)
{
    void *rows = NULL;
    int rc = parse_rows(json, len, "pools", sizeof **pools_out, offsetof(hf3fs_meta_pool_stats, ns),
                        pool_of, pools_out ? &rows : NULL, n_out);
    if (pools_out)
        *pools_out = rows;
    return rc;
}

static bool valid_method(const char *m)
{
    if (!*m || strlen(m) > 16)
        return false;
    for (; *m; m++)
        if (*m < 'A' || *m > 'Z')
            return false;
    return true;
}

static bool valid_path(const char *p)
{
    if (p[0] != '/')
        return false;
    for (; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            return false;
    return true;
}

int hf3fs_meta_request(hf3fs_meta_client *c, const char *method, const char *path, const char *body,
                       size_t body_len, int *status_out, char **body_out, size_t *len_out)
{
    if (body_out)
        *body_out = NULL;
    if (status_out)
        *status_out = 0;
    int rc = hf3fs_meta__begin(c);
    if (rc)
        return rc;
    if (!method || !path || !status_out || !valid_method(method) || !valid_path(path))
        return hf3fs_meta__set_error(c, HF3FS_META_EINVAL,
                                     "method must be upper-case letters and path must start with"
                                     " '/' and have no spaces or control characters");
    rc = hf3fs_meta__call(c, method, path, body, body_len,
                          strcmp(method, "GET") == 0 ? HF3FS_META__IDEMPOTENT
                                                     : HF3FS_META__ALLOCATION);
    if (rc)
        return rc;
    *status_out = c->reader.status;
    char what[96];
    snprintf(what, sizeof what, "%s %.60s", method, path);
    hf3fs_meta__check_status(c, what); /* sets the messages for error statuses */
    if (body_out) {
        char *text = hf3fs_meta__buf_steal(&c->reader.body, len_out);
        hf3fs_meta__buf_init(&c->reader.body, c->max_answer);
        if (!text) {
            *status_out = 0;
            return hf3fs_meta__set_error(c, HF3FS_META_ENOMEM, "%s: out of memory", what);
        }
        *body_out = text;
    }
    return 0;
}

/* A JSON number as millionths (the server writes ratios with 6 decimals). */
static int ppm_of(const hf3fs_meta__json_doc *doc, uint32_t v, int64_t *out)
{
    if (v == HF3FS_META__JSON_NONE || doc->nodes[v].type != HF3FS_META__JSON_NUMBER ||
        doc->nodes[v].len >= 32)
        return HF3FS_META_EPROTO;
    char text[32];
    memcpy(text, doc->input + doc->nodes[v].off, doc->nodes[v].len);
    text[doc->nodes[v].len] = '\0';
    double x = strtod(text, NULL) * 1e6;
    *out = (int64_t)(x < 0 ? x - 0.5 : x + 0.5);
    return 0;
}

static int advice_of(const hf3fs_meta__json_doc *doc, uint32_t a, hf3fs_meta_ns_advice *out)
{
    static const struct {
        const char *name;
        size_t offset;
        bool ratio;
    } fields[] = {
        {"pages", offsetof(hf3fs_meta_ns_advice, pages), false},
        {"target", offsetof(hf3fs_meta_ns_advice, target), true},
        {"hit_ratio_now", offsetof(hf3fs_meta_ns_advice, hit_ratio_now), true},
        {"doubling_gain", offsetof(hf3fs_meta_ns_advice, doubling_gain), true},
        {"halving_frees", offsetof(hf3fs_meta_ns_advice, halving_frees), false},
        {"halving_cost", offsetof(hf3fs_meta_ns_advice, halving_cost), true},
    };
    for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
        uint32_t v = hf3fs_meta__json_get(doc, a, fields[k].name);
        int64_t *field = (int64_t *)((char *)out + fields[k].offset);
        int rc = fields[k].ratio ? ppm_of(doc, v, field) : hf3fs_meta__json_int(doc, v, field);
        if (rc)
            return HF3FS_META_EPROTO;
    }
    static const struct {
        const char *name;
        size_t offset;
    } flags[] = {
        {"reached", offsetof(hf3fs_meta_ns_advice, reached)},
        {"coarse", offsetof(hf3fs_meta_ns_advice, coarse)},
    };
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++) {
        uint32_t r = hf3fs_meta__json_get(doc, a, flags[k].name);
        if (r == HF3FS_META__JSON_NONE || (doc->nodes[r].type != HF3FS_META__JSON_TRUE &&
                                           doc->nodes[r].type != HF3FS_META__JSON_FALSE))
            return HF3FS_META_EPROTO;
        *(int *)((char *)out + flags[k].offset) = doc->nodes[r].type == HF3FS_META__JSON_TRUE;
    }
    out->known = 1;
    return hf3fs_meta__json_int(doc, hf3fs_meta__json_get(doc, a, "pages_now"), &out->pages_now);
}

/* One namespace's advice, or only pages_now -1 and known 0 without one. */
static int ns_advice_of(const hf3fs_meta__json_doc *doc, uint32_t obj, void *row)
{
    hf3fs_meta_ns_advice *out = row;
    out->pages_now = -1;
    uint32_t a = hf3fs_meta__json_get(doc, obj, "advice");
    if (a != HF3FS_META__JSON_NONE && doc->nodes[a].type == HF3FS_META__JSON_OBJECT)
        return advice_of(doc, a, out);
    if (a != HF3FS_META__JSON_NONE && doc->nodes[a].type != HF3FS_META__JSON_NULL)
        return HF3FS_META_EPROTO;
    return 0;
}

int hf3fs_meta_advice_parse(const char *json, size_t len, hf3fs_meta_ns_advice **out_rows,
                            size_t *n_out)
{
    void *rows = NULL;
    int rc = parse_rows(json, len, "namespaces", sizeof **out_rows,
                        offsetof(hf3fs_meta_ns_advice, ns), ns_advice_of, out_rows ? &rows : NULL,
                        n_out);
    if (out_rows)
        *out_rows = rows;
    return rc;
}
