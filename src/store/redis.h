/*
 * redis.h: the Redis engine: the state lives in one Redis (7.0, Debian's
 * redis-server), and any number of hf3fs-metad front ends serve it.
 *
 * Its figures (store_ops.metrics): hf3fs_metad_store_up,
 * hf3fs_metad_store_round_trip_seconds and hf3fs_metad_store_errors_total;
 * in /v1/stats the member "store" (address, up, why down, calls, errors,
 * outcomes unknown, calls refused while down, reconnects).
 *
 * Every store call is one run of one Lua script (src/store/redis.lua,
 * loaded once, called by its SHA1, loaded again after NOSCRIPT): one atomic
 * step in Redis, with Redis's clock (TIME) for every deadline, so front ends
 * whose clocks disagree still agree on every lease. The same call sequence
 * gives the same answers as the embedded engine (tests/unit/test_model.c).
 *
 * Over a Redis Cluster (redis-cluster://seeds) each call goes, through
 * src/store/cluster.c, to the primary that serves its pool's slot (one hash
 * tag per pool). Every script run touches one slot, so what spans pools
 * runs pool by pool: completeness reads read every pool's index at once and
 * then record the uses of the keys that still own the page read; an
 * eviction or a delete demotes the key in the other ranks right after; an
 * initialization registers its pool after creating it; stats, check and
 * clear_all go pool by pool. Answer by answer this is still the reference
 * model (HF3FS_TEST_ENGINE=redis-cluster). Each script also names a key
 * that never exists, so that Redis refuses it (TRYAGAIN, retried) while its
 * pool's slot is migrating rather than run it on a pool half moved.
 *
 * Faults. A call that cannot reach Redis answers STORE_EUNAVAILABLE at once
 * (Redis known down) or within the command timeout; a change whose reply was
 * lost after it was sent (timeout, broken connection, a script error) may
 * have been applied: STORE_EUNCERTAIN (the API answers 507, which the stock
 * clients do not retry). A monitor thread pings Redis every second, and
 * while it is down tries again with backoff (0.1 s doubling to 2 s); health()
 * says why it is down.
 */
#ifndef HF_STORE_REDIS_H
#define HF_STORE_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

typedef struct store_redis_options {
    /* redis://[user:password@]host[:port][/db], unix:///path/redis.sock or
     * redis-cluster://[user:password@]host:port[,host:port...] (seed nodes;
     * user and password %-decoded; default port 6379, db 0). */
    const char *url;
    const char *password;         /* if set, replaces the URL's password (--redis-password-file) */
    int64_t connect_timeout_ms;   /* 0: 1000 */
    int64_t command_timeout_ms;   /* 0: 2000 */
    unsigned wait_replicas;       /* > 0: WAIT for that many replicas after every change */
    int64_t wait_timeout_ms;      /* the WAIT's timeout (0: the command timeout) */
    size_t use_log_bound;         /* bytes of a pool's use log before a read applies it (0: 32K) */
    /* Tests: the clock of every call (milliseconds), passed to the script;
     * NULL (the server): Redis's TIME, the one clock of every front end. */
    const store_clock *clock;
} store_redis_options;

/*
 * Connect (bounded by the connect timeout), authenticate, select the db and
 * load the script. STORE_OK and *out, or STORE_ECONFIG (a malformed URL),
 * STORE_EUNREACHABLE (cannot connect: unknown host, refused, timeout),
 * STORE_EAUTH (wrong user or password, or one is needed), STORE_EUNAVAILABLE
 * (Redis answered but refused, e.g. loading), with a sentence in err.
 */
int store_redis_open(const core_config *config, const store_redis_options *options,
                     store_t **out, char *err, size_t errlen);

/* Tests: the state of every page of a pool (after expiry), as core_page_get
 * gives it. keys[i] receives the key (truncated to 127 bytes, NUL-ended).
 * STORE_OK, STORE_ENOPOOL, or an error. */
typedef struct store_redis_page {
    int state; /* core_page_state */
    int64_t deadline;
    size_t key_len;
    char key[128];
} store_redis_page;
int store_redis_pages(store_t *s, hf_slice ns, uint32_t rank, store_redis_page *pages,
                      size_t npages);

/* Tests: how many confirmations and releases the calling thread's last
 * confirm refused. */
size_t store_redis_last_refused(void);

#endif
