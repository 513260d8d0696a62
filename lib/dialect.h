/*
 * dialect.h: the request and answer plumbing the dialects (vllm.c,
 * sglang.c) share, over client.h. A call over keys, once the dialect has
 * begun its body (hf3fs_meta__body_begin and its own members), checks the
 * keys and the caller's output array, ends the body with the keys, posts
 * it and reads the answer's array, one entry per key, into that output.
 */
#ifndef HF3FS_META_LIB_DIALECT_H
#define HF3FS_META_LIB_DIALECT_H

#include <string.h>

#include "client.h"

/* What a call over keys reads into the caller's array `out`: nothing,
 * bools (exists_out) or pages (pages_out). */
typedef enum hf3fs_meta__keys_out {
    HF3FS_META__OUT_NONE,
    HF3FS_META__OUT_BOOLS,
    HF3FS_META__OUT_PAGES,
} hf3fs_meta__keys_out;

/* A call over keys that reads no item pairs: "keys": [k0, ...] posted to
 * path (idempotent), the answer's array `answer` read into out (kind). */
static inline int hf3fs_meta__keys_call(hf3fs_meta_client *c, hf3fs_meta__jw *w, const char *path,
                                        const char *const *keys, size_t n, const char *answer,
                                        hf3fs_meta__keys_out kind, void *out)
{
    int rc = hf3fs_meta__check_keys(c, keys, n);
    if (rc == 0 && kind != HF3FS_META__OUT_NONE)
        rc = hf3fs_meta__check_array(c, out, n,
                                     kind == HF3FS_META__OUT_BOOLS ? "exists_out" : "pages_out");
    if (rc)
        return rc;
    hf3fs_meta__write_keys(w, "keys", keys, n, false);
    hf3fs_meta__jw_object_end(w);
    if (kind == HF3FS_META__OUT_NONE)
        return hf3fs_meta__post(c, path, w, HF3FS_META__IDEMPOTENT, NULL);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, path, w, HF3FS_META__IDEMPOTENT, &doc);
    if (rc == 0)
        rc = kind == HF3FS_META__OUT_BOOLS ? hf3fs_meta__read_bools(c, &doc, answer, n, out)
                                           : hf3fs_meta__read_pages(c, &doc, answer, n, out);
    hf3fs_meta__json_free(&doc);
    return rc;
}

/* What an allocation's answer holds: the array `name`, one item per key,
 * [key, page] for the key asked at that position (keyed: vLLM) or
 * [existed, page] (SGLang). */
typedef struct hf3fs_meta__alloc_answer {
    const char *name;
    bool keyed;
    bool *existed_out; /* may be NULL */
    int64_t *pages_out;
} hf3fs_meta__alloc_answer;

/* Item i (node `item`) of an allocation's answer into the caller's arrays. */
static inline int hf3fs_meta__alloc_item(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc,
                                         uint32_t item, const char *key, size_t i,
                                         const hf3fs_meta__alloc_answer *a)
{
    const hf3fs_meta__json_node *it = hf3fs_meta__json_at(doc, item);
    if (a->keyed) {
        if (it->type != HF3FS_META__JSON_ARRAY || it->count != 2 ||
            !hf3fs_meta__json_string_eq(doc, item + 1, key, strlen(key)))
            return hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                         "answer \"%s\"[%zu] is not [key, page] for key %zu",
                                         a->name, i, i);
        return hf3fs_meta__answer_page(c, doc, doc->nodes[item + 1].end, false, a->name, i,
                                       &a->pages_out[i]);
    }
    uint8_t t = it->count == 2 ? doc->nodes[item + 1].type : HF3FS_META__JSON_NULL;
    if (it->type != HF3FS_META__JSON_ARRAY || it->count != 2 ||
        (t != HF3FS_META__JSON_TRUE && t != HF3FS_META__JSON_FALSE))
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                     "answer \"%s\"[%zu] is not [existed, page]", a->name, i);
    if (a->existed_out)
        a->existed_out[i] = t == HF3FS_META__JSON_TRUE;
    return hf3fs_meta__answer_page(c, doc, item + 2, false, a->name, i, &a->pages_out[i]);
}

/* An allocation over keys: "keys": [[k0, ""], ...] posted to path (an
 * allocation: see the retry rules), each item of the answer (exactly n)
 * read in order. */
static inline int hf3fs_meta__alloc_call(hf3fs_meta_client *c, hf3fs_meta__jw *w, const char *path,
                                         const char *const *keys, size_t n,
                                         const hf3fs_meta__alloc_answer *a)
{
    int rc = hf3fs_meta__check_keys(c, keys, n);
    if (rc || (rc = hf3fs_meta__check_array(c, a->pages_out, n, "pages_out")) != 0)
        return rc;
    hf3fs_meta__write_keys(w, "keys", keys, n, true);
    hf3fs_meta__jw_object_end(w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, path, w, HF3FS_META__ALLOCATION, &doc);
    uint32_t array;
    if (rc == 0)
        rc = hf3fs_meta__answer_array(c, &doc, a->name, n, &array);
    uint32_t item = rc == 0 ? hf3fs_meta__json_first(&doc, array) : HF3FS_META__JSON_NONE;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = hf3fs_meta__alloc_item(c, &doc, item, keys[i], i, a);
        item = hf3fs_meta__json_next(&doc, array, item);
    }
    hf3fs_meta__json_free(&doc);
    return rc;
}

/* Confirmations and releases: "<name>": [[k0, p0], ...] and
 * "pages_to_release": [...] posted to path (idempotent). */
static inline int hf3fs_meta__confirm_call(hf3fs_meta_client *c, hf3fs_meta__jw *w,
                                           const char *path, const char *name,
                                           const char *const *keys, const int64_t *pages, size_t n,
                                           const int64_t *release, size_t n_release)
{
    int rc = hf3fs_meta__check_keys(c, keys, n);
    if (rc || (rc = hf3fs_meta__check_array(c, pages, n, "pages")) != 0 ||
        (rc = hf3fs_meta__check_array(c, release, n_release, "release")) != 0)
        return rc;
    hf3fs_meta__write_confirmations(w, name, keys, pages, n);
    hf3fs_meta__write_pages(w, "pages_to_release", release, n_release);
    hf3fs_meta__jw_object_end(w);
    return hf3fs_meta__post(c, path, w, HF3FS_META__IDEMPOTENT, NULL);
}

#endif
