/*
 * sglang.c: the SGLang dialect (docs/protocol.md "The SGLang dialect"): one pool
 * (rank, namespace) per call, the namespace sent only when the caller gives
 * one.
 */
#include <stdio.h>

#include "client.h"

/* Common start: checks, the path "/{rank}/{op}", the body with its namespace. */
static int start(hf3fs_meta_client *c, int rank, const char *ns, const char *op, char *path,
                 size_t path_len, hf3fs_meta__jw *w)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (rc = hf3fs_meta__check_rank(c, rank)) != 0)
        return rc;
    snprintf(path, path_len, "/%d/%s", rank, op);
    hf3fs_meta__body_begin(c, w);
    if (ns) {
        hf3fs_meta__jw_key(w, "namespace");
        hf3fs_meta__jw_cstring(w, ns);
    }
    return 0;
}

int hf3fs_meta_sglang_init(hf3fs_meta_client *c, int rank, const char *ns, int64_t num_pages)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "initialize", path, sizeof path, &w);
    if (rc)
        return rc;
    hf3fs_meta__jw_key(&w, "num_pages");
    hf3fs_meta__jw_int(&w, num_pages);
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_sglang_exists(hf3fs_meta_client *c, int rank, const char *ns,
                             const char *const *keys, size_t n, bool *exists_out)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "exists", path, sizeof path, &w);
    if (rc || (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, exists_out, n, "exists_out")) != 0)
        return rc;
    hf3fs_meta__write_keys(&w, "keys", keys, n, false);
    hf3fs_meta__jw_object_end(&w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, &doc);
    if (rc == 0)
        rc = hf3fs_meta__read_bools(c, &doc, "exists", n, exists_out);
    hf3fs_meta__json_free(&doc);
    return rc;
}

int hf3fs_meta_sglang_reserve_and_allocate(hf3fs_meta_client *c, int rank, const char *ns,
                                           const char *const *keys, size_t n, bool *existed_out,
                                           int64_t *pages_out)
{
    char path[80];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "reserve_and_allocate_page_indices", path, sizeof path, &w);
    if (rc || (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, pages_out, n, "pages_out")) != 0)
        return rc;
    hf3fs_meta__write_keys(&w, "keys", keys, n, true);
    hf3fs_meta__jw_object_end(&w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, path, &w, HF3FS_META__ALLOCATION, &doc);
    uint32_t indices;
    if (rc == 0)
        rc = hf3fs_meta__answer_array(c, &doc, "indices", n, &indices);
    /* Every item is [existed, page]. */
    uint32_t item = rc == 0 ? hf3fs_meta__json_first(&doc, indices) : HF3FS_META__JSON_NONE;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const hf3fs_meta__json_node *it = hf3fs_meta__json_at(&doc, item);
        uint8_t t = it->count == 2 ? doc.nodes[item + 1].type : HF3FS_META__JSON_NULL;
        if (it->type != HF3FS_META__JSON_ARRAY || it->count != 2 ||
            (t != HF3FS_META__JSON_TRUE && t != HF3FS_META__JSON_FALSE)) {
            rc = hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                       "answer \"indices\"[%zu] is not [existed, page]", i);
            break;
        }
        if (existed_out)
            existed_out[i] = t == HF3FS_META__JSON_TRUE;
        rc = hf3fs_meta__answer_page(c, &doc, item + 2, false, "indices", i, &pages_out[i]);
        item = hf3fs_meta__json_next(&doc, indices, item);
    }
    hf3fs_meta__json_free(&doc);
    return rc;
}

int hf3fs_meta_sglang_confirm_write(hf3fs_meta_client *c, int rank, const char *ns,
                                    const char *const *keys, const int64_t *pages, size_t n,
                                    const int64_t *release, size_t n_release)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "confirm_write", path, sizeof path, &w);
    if (rc || (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, pages, n, "pages")) != 0 ||
        (rc = hf3fs_meta__check_array(c, release, n_release, "release")) != 0)
        return rc;
    hf3fs_meta__write_confirmations(&w, "written_keys_to_confirm", keys, pages, n);
    hf3fs_meta__write_pages(&w, "pages_to_release", release, n_release);
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_sglang_delete_keys(hf3fs_meta_client *c, int rank, const char *ns,
                                  const char *const *keys, size_t n)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "delete_keys", path, sizeof path, &w);
    if (rc || (rc = hf3fs_meta__check_keys(c, keys, n)) != 0)
        return rc;
    hf3fs_meta__write_keys(&w, "keys", keys, n, false);
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_sglang_clear(hf3fs_meta_client *c, int rank, const char *ns)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "clear", path, sizeof path, &w);
    if (rc)
        return rc;
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_sglang_get_page_indices(hf3fs_meta_client *c, int rank, const char *ns,
                                       const char *const *keys, size_t n, int64_t *pages_out)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "get_page_indices", path, sizeof path, &w);
    if (rc || (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, pages_out, n, "pages_out")) != 0)
        return rc;
    hf3fs_meta__write_keys(&w, "keys", keys, n, false);
    hf3fs_meta__jw_object_end(&w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, &doc);
    if (rc == 0)
        rc = hf3fs_meta__read_pages(c, &doc, "indices", n, pages_out);
    hf3fs_meta__json_free(&doc);
    return rc;
}
