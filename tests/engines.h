/*
 * engines.h: the store engines that the engine-neutral checks run against,
 * chosen by name, so that one reference model (tests/unit/test_model.c) and
 * one sequence fuzzer (fuzz/fuzz_sequence.c) check every engine answer by
 * answer instead of being copied per engine.
 *
 *   HF3FS_TEST_ENGINE=mem   (the default) the embedded engine, in memory
 *   HF3FS_TEST_ENGINE=redis the Redis engine over the redis-server at
 *                           $HF3FS_TEST_REDIS_URL, or over one of its own
 *                           (tests/redis_test.h), emptied at each open; the
 *                           server has loaded the hf3fs-metad module
 *                           (redis_test_module())
 *   HF3FS_TEST_ENGINE=redis-cluster
 *                           the Redis engine over the Redis Cluster at
 *                           $HF3FS_TEST_REDIS_URL (redis-cluster://...), or
 *                           over one of its own (3 primaries + 3 replicas,
 *                           tests/integration/redis_cluster.py), emptied at
 *                           each open
 *
 * Every engine runs on the caller's fake clock (store_clock), so that
 * leases expire exactly when the test says. An engine is added here once:
 * a case in test_engine_open(), with whatever it needs from the environment
 * (a server address...), and its page reader if it can offer one.
 *
 * Header-only (static functions) so that the unit tests and the fuzzers,
 * which are built by different rules, share it without a library.
 */
#ifndef HF_TESTS_ENGINES_H
#define HF_TESTS_ENGINES_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "redis_test.h"
#include "store/mem.h"
#include "store/redis/redis.h"
#include "store/store.h"

typedef struct test_engine test_engine;

struct test_engine {
    const char *name;
    store_t *store;
    /*
     * Optional (NULL: the engine cannot show its pages; tests then compare
     * answers and per-pool figures only). The state of page `page` of the
     * pool (ns, rank) as of `now` (expired reservations and ended drains
     * read FREE), and its key (OWNED and RESERVED; it points into keybuf or
     * into the engine, valid until its next operation). The pool exists.
     */
    core_page_state (*page)(test_engine *e, hf_slice ns, uint32_t rank, uint64_t page, int64_t now,
                            hf_slice *key, char keybuf[CORE_KEY_TEXT_MAX]);
    /* The embedded engine's core, for checks of the embedded engine only
     * (its log codec); NULL for every other engine. */
    core_t *core;
    /* How many steps a long random test should run on this engine (each
     * step of an engine over the network costs a few round trips); 0: the
     * test's own count. */
    long steps;
    /* The Redis engine's page table of one pool, read once per pool and step
     * (page 0 reads it). */
    store_redis_page cache[8];
};

/* The engine named by HF3FS_TEST_ENGINE, "mem" if unset or empty. */
static inline const char *test_engine_name(void)
{
    const char *name = getenv("HF3FS_TEST_ENGINE");
    return name && *name ? name : "mem";
}

static inline core_page_state test_engine_mem_page(test_engine *e, hf_slice ns, uint32_t rank,
                                                   uint64_t page, int64_t now, hf_slice *key,
                                                   char keybuf[CORE_KEY_TEXT_MAX])
{
    core_pool_t *pool = core_pool_find(e->core, ns, rank);
    core_pool_expire(pool, now);
    return core_page_get(pool, page, key, keybuf, NULL);
}

static inline core_page_state test_engine_redis_page(test_engine *e, hf_slice ns, uint32_t rank,
                                                     uint64_t page, int64_t now, hf_slice *key,
                                                     char keybuf[CORE_KEY_TEXT_MAX])
{
    (void)now; /* the engine runs on the test's clock already */
    const size_t cap = sizeof e->cache / sizeof e->cache[0];
    if (page == 0) {
        /* A read: asked again while Redis is slow (a loaded machine); never
         * compared as if every page were free. */
        int rc = STORE_EUNAVAILABLE;
        for (int attempt = 0; attempt < 10 && rc != STORE_OK && rc != STORE_ENOPOOL; attempt++)
            rc = store_redis_pages(e->store, ns, rank, e->cache, cap);
        if (rc != STORE_OK) {
            fprintf(stderr, "the pages of a pool could not be read from Redis: %s\n",
                    store_strerror(rc));
            exit(1);
        }
    }
    if (page >= cap) {
        *key = (hf_slice){"", 0};
        return CORE_PAGE_FREE;
    }
    (void)keybuf;
    const store_redis_page *p = &e->cache[page];
    *key = (hf_slice){p->key, p->key_len};
    return (core_page_state)p->state;
}

/* A local cluster for this process: tests/integration/redis_cluster.py
 * started with a pipe as its stdin, which it watches: when this process
 * exits, the pipe closes and the launcher stops every node. */
static char test_cluster_url[4096];

static inline const char *test_cluster_start(void)
{
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0)
        return NULL;
    pid_t pid = fork();
    if (pid < 0)
        return NULL;
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[1]);
        close(out[0]);
        const char *py = getenv("PYTHON");
        if (!py || !*py)
            py = "/usr/bin/python3";
        const char *module = redis_test_module();
        if (module) /* the launcher's nodes load the same .so */
            setenv("HF3FS_REDIS_MODULE", module, 1);
        execl(py, py, "tests/integration/redis_cluster.py", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    fcntl(in[1], F_SETFD, FD_CLOEXEC); /* held open until this process exits */
    FILE *f = fdopen(out[0], "r");
    if (!f || !fgets(test_cluster_url, sizeof test_cluster_url, f))
        return NULL;
    test_cluster_url[strcspn(test_cluster_url, "\n")] = '\0';
    return strncmp(test_cluster_url, "redis-cluster://", 16) == 0 ? test_cluster_url : NULL;
}

static inline void test_engine_close(test_engine *e)
{
    if (e->store)
        e->store->ops->destroy(e->store);
    memset(e, 0, sizeof *e);
}

/*
 * A new, empty store of the engine `name` with `config` on `clock` (copied;
 * its ctx must outlive the store). 0, or -1 with why in err (an unknown
 * name, an engine that cannot be opened).
 */
static inline int test_engine_open(test_engine *e, const char *name, const core_config *config,
                                   const store_clock *clock, char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    e->name = name;
    if (strcmp(name, "mem") == 0) {
        e->store = store_mem_new(config, clock);
        e->core = store_mem_core(e->store);
        e->page = test_engine_mem_page;
        return 0;
    }
    bool cluster = strcmp(name, "redis-cluster") == 0;
    if (strcmp(name, "redis") == 0 || cluster) {
        const char *url = getenv("HF3FS_TEST_REDIS_URL");
        if ((!url || !*url) && cluster)
            url = test_cluster_url[0] ? test_cluster_url : test_cluster_start();
        else if (!url || !*url)
            url = redis_test_url[0] ? redis_test_url : redis_test_start();
        if (!url) {
            snprintf(err, errlen,
                     "HF3FS_TEST_ENGINE=%s: no redis-server could be started "
                     "(is it installed? make deps)",
                     name);
            return -1;
        }
        /* Redis shares the 2 cores with every suite running at once: a
         * command timeout that a loaded machine does not reach */
        store_redis_options o = {.url = url, .clock = clock, .command_timeout_ms = 10000};
        /* HF3FS_TEST_STRIPES: the stripes of the namespaces the tests create */
        const char *stripes = getenv("HF3FS_TEST_STRIPES");
        if (stripes && *stripes)
            o.stripes = (uint32_t)strtoul(stripes, NULL, 10);
        /* the clock's ctx outlives the store; the options are copied */
        int rc = store_redis_open(config, &o, &e->store, err, errlen);
        if (rc != STORE_OK)
            return -1;
        if (e->store->ops->clear_all(e->store) != STORE_OK) {
            snprintf(err, errlen, "HF3FS_TEST_ENGINE=%s: clearing %.100s failed", name, url);
            test_engine_close(e);
            return -1;
        }
        e->page = test_engine_redis_page;
        /* a step over the cluster fans out over its primaries; a sanitized
         * build runs each step several times slower: fewer steps there, so
         * that `make test` keeps its 10 minutes (the normal build runs two
         * seeds over both engines) */
        e->steps = strcmp(name, "redis-cluster") == 0 ? 12000 : 20000;
#if defined(__SANITIZE_ADDRESS__)
        e->steps = 8000;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
        e->steps = 8000;
#endif
#endif
        return 0;
    }
    snprintf(err, errlen, "HF3FS_TEST_ENGINE=%s: no such engine (known: mem, redis, redis-cluster)",
             name);
    return -1;
}


#endif
