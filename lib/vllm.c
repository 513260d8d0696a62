/*
 * vllm.c: the vLLM dialect (docs/protocol.md "The vLLM dialect"). Each call builds
 * the body, posts it, and checks the answer's shape before writing the
 * caller's output arrays (dialect.h).
 */
#include <stdio.h>

#include "dialect.h"

/* How a call uses its rank: not at all, in the path only, or also as the
 * body's "rank". */
enum rank_use { NO_RANK, RANK_IN_PATH, RANK_IN_BODY };

/* Common start: the checks (the rank's unless NO_RANK), the body begun. */
static int start(hf3fs_meta_client *c, enum rank_use use, int rank, hf3fs_meta__jw *w)
{
    int rc = hf3fs_meta__begin(c);
    if (rc || (use != NO_RANK && (rc = hf3fs_meta__check_rank(c, rank)) != 0))
        return rc;
    hf3fs_meta__body_begin(c, w);
    if (use == RANK_IN_BODY) {
        hf3fs_meta__jw_key(w, "rank");
        hf3fs_meta__jw_int(w, rank);
    }
    return 0;
}

/* A call over keys (hf3fs_meta__keys_call) to path. */
static int keys_call(hf3fs_meta_client *c, enum rank_use use, int rank, const char *path,
                     const char *const *keys, size_t n, const char *answer,
                     hf3fs_meta__keys_out kind, void *out)
{
    hf3fs_meta__jw w;
    int rc = start(c, use, rank, &w);
    return rc ? rc : hf3fs_meta__keys_call(c, &w, path, keys, n, answer, kind, out);
}

int hf3fs_meta_vllm_init_worker(hf3fs_meta_client *c, int rank, int64_t num_pages)
{
    hf3fs_meta__jw w;
    int rc = start(c, RANK_IN_PATH, rank, &w);
    if (rc)
        return rc;
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
    hf3fs_meta__jw w;
    int rc = start(c, NO_RANK, 0, &w);
    if (rc)
        return rc;
    hf3fs_meta__jw_key(&w, "role");
    hf3fs_meta__jw_cstring(&w, "scheduler");
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, "/rank/0/initialize", &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_vllm_batch_allocate(hf3fs_meta_client *c, int rank, const char *const *keys,
                                   size_t n, int64_t *pages_out)
{
    hf3fs_meta__jw w;
    int rc = start(c, RANK_IN_BODY, rank, &w);
    const hf3fs_meta__alloc_answer a = {"results", true, NULL, pages_out};
    return rc ? rc : hf3fs_meta__alloc_call(c, &w, "/keys/batch_allocate", keys, n, &a);
}

int hf3fs_meta_vllm_confirm_write(hf3fs_meta_client *c, int rank, const char *const *keys,
                                  const int64_t *pages, size_t n, const int64_t *release,
                                  size_t n_release)
{
    hf3fs_meta__jw w;
    int rc = start(c, RANK_IN_BODY, rank, &w);
    return rc ? rc
              : hf3fs_meta__confirm_call(c, &w, "/keys/confirm_write", "confirmations", keys, pages,
                                         n, release, n_release);
}

int hf3fs_meta_vllm_batch_exists(hf3fs_meta_client *c, const char *const *keys, size_t n,
                                 bool *exists_out)
{
    return keys_call(c, NO_RANK, 0, "/keys/batch_exists", keys, n, "exists", HF3FS_META__OUT_BOOLS,
                     exists_out);
}

int hf3fs_meta_vllm_get_locations(hf3fs_meta_client *c, int rank, const char *const *keys, size_t n,
                                  int64_t *pages_out)
{
    return keys_call(c, RANK_IN_BODY, rank, "/keys/get_locations", keys, n, "locations",
                     HF3FS_META__OUT_PAGES, pages_out);
}

int hf3fs_meta_vllm_clear(hf3fs_meta_client *c)
{
    int rc = hf3fs_meta__begin(c);
    if (rc)
        return rc;
    rc = hf3fs_meta__call(c, "POST", "/clear", NULL, 0, HF3FS_META__IDEMPOTENT);
    return rc ? rc : hf3fs_meta__check_status(c, "POST /clear");
}
