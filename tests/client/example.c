/*
 * example.c: the example of libhf3fsmeta in docs/client.md, kept compiling
 * and running by the tests (tests/integration/test_client_lib.py).
 *
 * A vLLM worker of rank 0: initialize the pool, get pages for two KV blocks,
 * (write them to the file,) confirm them, and check that the scheduler now
 * sees them.
 *
 *     cc -o example example.c -lhf3fsmeta
 *     ./example http://127.0.0.1:18000
 */
#include <stdio.h>

#include "hf3fs_meta.h"

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "http://127.0.0.1:18000";
    const char *keys[] = {"9f2c4e1ab03d5c7e8f9a0b1c2d3e4f50", "0a1b2c3d4e5f60718293a4b5c6d7e8f9"};
    int64_t pages[2];
    bool exists[2];
    hf3fs_meta_client *c;

    int rc = hf3fs_meta_open(url, &c);
    if (rc != 0) {
        fprintf(stderr, "bad URL %s: %s\n", url, hf3fs_meta_strerror(rc));
        return 1;
    }
    if ((rc = hf3fs_meta_vllm_init_worker(c, 0, 1024)) != 0 ||
        (rc = hf3fs_meta_vllm_batch_allocate(c, 0, keys, 2, pages)) != 0)
        goto fail;
    for (int i = 0; i < 2; i++) {
        if (pages[i] < 0) {
            fprintf(stderr, "no page for %s\n", keys[i]);
            hf3fs_meta_close(c);
            return 1;
        }
        /* ... write KV block i to page pages[i] of rank 0's file ... */
    }
    if ((rc = hf3fs_meta_vllm_confirm_write(c, 0, keys, pages, 2, NULL, 0)) != 0 ||
        (rc = hf3fs_meta_vllm_batch_exists(c, keys, 2, exists)) != 0)
        goto fail;
    for (int i = 0; i < 2; i++)
        printf("%s: page %lld, exists %s\n", keys[i], (long long)pages[i],
               exists[i] ? "yes" : "no");
    hf3fs_meta_close(c);
    return 0;

fail:
    /* e.g. "POST /keys/batch_allocate: HTTP 404: Rank 0 not initialized" */
    fprintf(stderr, "%s (%s)\n", hf3fs_meta_last_error(c), hf3fs_meta_strerror(rc));
    hf3fs_meta_close(c);
    return 1;
}
