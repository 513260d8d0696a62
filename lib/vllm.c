/*
 * vllm.c: the vLLM dialect (docs/protocol.md "The vLLM dialect"). Each call builds
 * the body, posts it, and checks the answer's shape before writing the
 * caller's output arrays.
 */
#include <stdio.h>
#include <string.h>

#include "client.h"

int hf3fs_meta_vllm_init_worker(hf3fs_meta_client *c, int rank, int64_t num_pages)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (rc = hf3fs_meta__check_rank(c, rank)) != 0)
        return rc;
    hf3fs_meta__jw w;
    hf3fs_meta__body_begin(c, &w);
    hf3fs_meta__jw_key(&w, "role");
    hf3fs_meta__jw_cstring(&w, "worker");
    hf3fs_meta__jw_key(&w, "num_pages");
    hf3fs_meta__jw_int(&w, num_pages);
    hf3fs_meta__jw_object_end(&w);
    char path[48];
    snprintf(path, sizeof path, "/rank/%d/initialize", rank);
    return hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_vllm_init_scheduler(hf3fs_meta_client *c)
{
    int rc = hf3fs_meta__begin(c);
    if (rc)
        return rc;
    hf3fs_meta__jw w;
    hf3fs_meta__body_begin(c, &w);
    hf3fs_meta__jw_key(&w, "role");
    hf3fs_meta__jw_cstring(&w, "scheduler");
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, "/rank/0/initialize", &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_vllm_batch_allocate(hf3fs_meta_client *c, int rank, const char *const *keys,
                                   size_t n, int64_t *pages_out)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (rc = hf3fs_meta__check_rank(c, rank)) != 0 ||
        (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, pages_out, n, "pages_out")) != 0)
        return rc;
    hf3fs_meta__jw w;
    hf3fs_meta__body_begin(c, &w);
    hf3fs_meta__jw_key(&w, "rank");
    hf3fs_meta__jw_int(&w, rank);
    hf3fs_meta__write_keys(&w, "keys", keys, n, true);
    hf3fs_meta__jw_object_end(&w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, "/keys/batch_allocate", &w, HF3FS_META__ALLOCATION, &doc);
    uint32_t results;
    if (rc == 0)
        rc = hf3fs_meta__answer_array(c, &doc, "results", n, &results);
    /* Every item must be [key, page] for the key asked at that position. */
    uint32_t item = rc == 0 ? hf3fs_meta__json_first(&doc, results) : HF3FS_META__JSON_NONE;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const hf3fs_meta__json_node *it = hf3fs_meta__json_at(&doc, item);
        if (it->type != HF3FS_META__JSON_ARRAY || it->count != 2 ||
            !hf3fs_meta__json_string_eq(&doc, item + 1, keys[i], strlen(keys[i])))
            rc = hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                       "answer \"results\"[%zu] is not [key, page] for key %zu", i,
                                       i);
        else
            rc = hf3fs_meta__answer_page(c, &doc, doc.nodes[item + 1].end, false, "results", i,
                                         &pages_out[i]);
        item = hf3fs_meta__json_next(&doc, results, item);
    }
    hf3fs_meta__json_free(&doc);
    return rc;
}

int hf3fs_meta_vllm_confirm_write(hf3fs_meta_client *c, int rank, const char *const *keys,
                                  const int64_t *pages, size_t n, const int64_t *release,
                                  size_t n_release)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (rc = hf3fs_meta__check_rank(c, rank)) != 0 ||
        (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, pages, n, "pages")) != 0 ||
        (rc = hf3fs_meta__check_array(c, release, n_release, "release")) != 0)
        return rc;
    hf3fs_meta__jw w;
    hf3fs_meta__body_begin(c, &w);
    hf3fs_meta__jw_key(&w, "rank");
    hf3fs_meta__jw_int(&w, rank);
    hf3fs_meta__write_confirmations(&w, "confirmations", keys, pages, n);
    hf3fs_meta__write_pages(&w, "pages_to_release", release, n_release);
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, "/keys/confirm_write", &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_vllm_batch_exists(hf3fs_meta_client *c, const char *const *keys, size_t n,
                                 bool *exists_out)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, exists_out, n, "exists_out")) != 0)
        return rc;
    hf3fs_meta__jw w;
    hf3fs_meta__body_begin(c, &w);
    hf3fs_meta__write_keys(&w, "keys", keys, n, false);
    hf3fs_meta__jw_object_end(&w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, "/keys/batch_exists", &w, HF3FS_META__IDEMPOTENT, &doc);
    if (rc == 0)
        rc = hf3fs_meta__read_bools(c, &doc, "exists", n, exists_out);
    hf3fs_meta__json_free(&doc);
    return rc;
}

int hf3fs_meta_vllm_get_locations(hf3fs_meta_client *c, int rank, const char *const *keys,
                                  size_t n, int64_t *pages_out)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (rc = hf3fs_meta__check_rank(c, rank)) != 0 ||
        (rc = hf3fs_meta__check_keys(c, keys, n)) != 0 ||
        (rc = hf3fs_meta__check_array(c, pages_out, n, "pages_out")) != 0)
        return rc;
    hf3fs_meta__jw w;
    hf3fs_meta__body_begin(c, &w);
    hf3fs_meta__jw_key(&w, "rank");
    hf3fs_meta__jw_int(&w, rank);
    hf3fs_meta__write_keys(&w, "keys", keys, n, false);
    hf3fs_meta__jw_object_end(&w);
    hf3fs_meta__json_doc doc;
    rc = hf3fs_meta__post(c, "/keys/get_locations", &w, HF3FS_META__IDEMPOTENT, &doc);
    if (rc == 0)
        rc = hf3fs_meta__read_pages(c, &doc, "locations", n, pages_out);
    hf3fs_meta__json_free(&doc);
    return rc;
}

int hf3fs_meta_vllm_clear(hf3fs_meta_client *c)
{
    int rc = hf3fs_meta__begin(c);
    if (rc)
        return rc;
    rc = hf3fs_meta__call(c, "POST", "/clear", NULL, 0, HF3FS_META__IDEMPOTENT);
    return rc ? rc : hf3fs_meta__check_status(c, "POST /clear");
}
