/*
 * sglang.c: the SGLang dialect (docs/protocol.md "The SGLang dialect"): one pool
 * (rank, namespace) per call, the namespace sent only when the caller gives
 * one. The body and answer plumbing is dialect.h's.
 */
#include <stdio.h>

#include "dialect.h"

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

/* A call over keys (hf3fs_meta__keys_call) to "/{rank}/{op}". */
static int keys_call(hf3fs_meta_client *c, int rank, const char *ns, const char *op,
                     const char *const *keys, size_t n, const char *answer,
                     hf3fs_meta__keys_out kind, void *out)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, op, path, sizeof path, &w);
    return rc ? rc : hf3fs_meta__keys_call(c, &w, path, keys, n, answer, kind, out);
}

/* A call on the pool itself to "/{rank}/{op}": "num_pages" if given. */
static int pool_call(hf3fs_meta_client *c, int rank, const char *ns, const char *op,
                     const int64_t *num_pages)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, op, path, sizeof path, &w);
    if (rc)
        return rc;
    if (num_pages) {
        hf3fs_meta__jw_key(&w, "num_pages");
        hf3fs_meta__jw_int(&w, *num_pages);
    }
    hf3fs_meta__jw_object_end(&w);
    return hf3fs_meta__post(c, path, &w, HF3FS_META__IDEMPOTENT, NULL);
}

int hf3fs_meta_sglang_init(hf3fs_meta_client *c, int rank, const char *ns, int64_t num_pages)
{
    return pool_call(c, rank, ns, "initialize", &num_pages);
}

int hf3fs_meta_sglang_exists(hf3fs_meta_client *c, int rank, const char *ns,
                             const char *const *keys, size_t n, bool *exists_out)
{
    return keys_call(c, rank, ns, "exists", keys, n, "exists", HF3FS_META__OUT_BOOLS, exists_out);
}

int hf3fs_meta_sglang_reserve_and_allocate(hf3fs_meta_client *c, int rank, const char *ns,
                                           const char *const *keys, size_t n, bool *existed_out,
                                           int64_t *pages_out)
{
    char path[80];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "reserve_and_allocate_page_indices", path, sizeof path, &w);
    const hf3fs_meta__alloc_answer a = {"indices", false, existed_out, pages_out};
    return rc ? rc : hf3fs_meta__alloc_call(c, &w, path, keys, n, &a);
}

int hf3fs_meta_sglang_confirm_write(hf3fs_meta_client *c, int rank, const char *ns,
                                    const char *const *keys, const int64_t *pages, size_t n,
                                    const int64_t *release, size_t n_release)
{
    char path[64];
    hf3fs_meta__jw w;
    int rc = start(c, rank, ns, "confirm_write", path, sizeof path, &w);
    return rc ? rc
              : hf3fs_meta__confirm_call(c, &w, path, "written_keys_to_confirm", keys, pages, n,
                                         release, n_release);
}

int hf3fs_meta_sglang_delete_keys(hf3fs_meta_client *c, int rank, const char *ns,
                                  const char *const *keys, size_t n)
{
    return keys_call(c, rank, ns, "delete_keys", keys, n, NULL, HF3FS_META__OUT_NONE, NULL);
}

int hf3fs_meta_sglang_clear(hf3fs_meta_client *c, int rank, const char *ns)
{
    return pool_call(c, rank, ns, "clear", NULL);
}

int hf3fs_meta_sglang_get_page_indices(hf3fs_meta_client *c, int rank, const char *ns,
                                       const char *const *keys, size_t n, int64_t *pages_out)
{
    return keys_call(c, rank, ns, "get_page_indices", keys, n, "indices", HF3FS_META__OUT_PAGES,
                     pages_out);
}
