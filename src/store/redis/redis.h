/*
 * redis.h: the Redis engine: the state lives in Redis (7.0, Debian's
 * redis-server) with the hf3fs-metad module loaded (build/hf3fs_metad_redis.so,
 * docs/redis-module.md), and any number of hf3fs-metad front ends serve it.
 *
 * The module is src/core inside Redis. A namespace is S values, its stripes
 * (docs/redis-module.md "Stripes"; S recorded in its stripe-0 value, the
 * anchor, by the front end that created it, options.stripes or by the
 * size of the pool that created it): stripe i
 * holds the keys wire_stripe_of(key, S) == i of every rank and page p of
 * every pool with p % S == i (as its local page p / S). Every store call
 * is one HF3FS.* command per stripe it touches, sent at once, each one
 * atomic step in Redis that runs one core call; the answers are merged in
 * the call's order, page numbers mapped. Completeness, cross-rank demotion
 * and eviction are the core's, per stripe; this engine encodes, fans out,
 * maps and merges, and keeps no rule of its own but one: an
 * all-or-nothing allocation that a stripe could not serve is undone on
 * the others (HF3FS.CANCEL) before the all -1 answer. Deadlines come from
 * Redis's clock (the engine sends now = 0), so front ends whose clocks
 * disagree still agree on every lease; a test's clock (options.clock) is
 * sent instead. The same call sequence gives the same answers as the
 * embedded engine per stripe (tests/unit/test_model.c). stats, check and
 * clear_all ask every node that holds values (HF3FS.NAMESPACES,
 * HF3FS.CLEARALL), then each stripe of each namespace.
 *
 * Over a Redis Cluster (redis-cluster://seeds) each stripe lives on the
 * shard of its slot, the stripes of a namespace evenly spaced over the
 * slots: one namespace's load spreads over the shards. Each command goes
 * to the primary of its slot through src/cluster (MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN, failovers). A value moves whole with its slot (MIGRATE
 * carries the module's type).
 *
 * Every new connection (at open, the pipes', the monitor's, each routing
 * handle's to each node) first asks MODULE LIST and HF3FS.VERSION: the
 * module "hf3fsmeta" must speak a command set this front end speaks
 * (wire.h "Versions"; a module without HF3FS.VERSION speaks its MODULE
 * LIST "ver" only); otherwise STORE_ENOMODULE at open, with a sentence that
 * says how to load it, and later that node gets no command (one Redis:
 * down; a cluster node: its slots' calls refused). What each node's module
 * is and speaks: /v1/stats "redis_modules", hf3fs_metad_store_module_info.
 *
 * Faults (link.h). A call that cannot reach Redis is refused
 * (STORE_EUNAVAILABLE) at once (Redis known down) or within the command
 * timeout; so is one that Redis refuses before running it (LOADING, BUSY,
 * OOM under maxmemory, READONLY...). A change whose reply was lost after it
 * was sent (timeout, broken connection), or that fewer replicas than
 * --redis-wait acknowledged, may have taken effect: STORE_EUNCERTAIN. A
 * monitor thread probes Redis (MODULE LIST) every second, and while it is
 * down tries again with backoff (0.1 s doubling to 2 s); health() says why.
 *
 * Its figures (store_ops.metrics): hf3fs_metad_store_up,
 * hf3fs_metad_store_round_trip_seconds and hf3fs_metad_store_errors_total;
 * in /v1/stats the member "store" (address, up, why down, calls, errors,
 * outcomes unknown, calls refused while down, reconnects; over a cluster
 * its nodes).
 */
#ifndef HF_STORE_REDIS_REDIS_H
#define HF_STORE_REDIS_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

typedef struct store_redis_options {
    /* redis://[user:password@]host[:port][/db], unix:///path/redis.sock,
     * redis-sentinel://[user:password@]host[:port][,host[:port]...]/NAME[/db]
     * (sentinels, default port 26379, asked for the primary NAME: link.h
     * "Redis Sentinel") or
     * redis-cluster://[user:password@]host:port[,host:port...] (seed nodes;
     * user and password %-decoded; default port 6379, db 0). */
    const char *url;
    const char *password;       /* if set, replaces the URL's password (--redis-password-file) */
    int64_t connect_timeout_ms; /* 0: 1000 */
    int64_t command_timeout_ms; /* 0: 2000 */
    unsigned wait_replicas;     /* > 0: WAIT for that many replicas after every change */
    /* instead of wait_replicas: each primary's changes wait for one
     * replica once it has one in sync (link.h "--redis-wait"); a primary
     * without one is logged, and named by store_ops.unreplicated */
    bool wait_auto;
    int64_t wait_timeout_ms; /* the WAIT's timeout (0: the command timeout) */
    /* One Redis: connections shared by every calling thread, commands of
     * concurrent calls pipelined on them (0: 1); commands queued or in
     * flight per connection, past which a call waits, then is refused
     * (0: 256). A Redis Cluster ignores both. */
    unsigned connections;
    size_t max_in_flight;
    /* Tests: the clock of every call (milliseconds), sent with each command;
     * NULL (the server): Redis's own clock, the one clock of every front end. */
    const store_clock *clock;
    /* The stripe count of the namespaces this front end creates,
     * 1..WIRE_MAX_STRIPES (256); 0: 1 over one Redis, over a cluster by the
     * creating pool's size and the primaries (wire_stripes_for,
     * docs/many-nodes.md "Choosing S"). A namespace keeps the count it was
     * created with (docs/redis-module.md "Stripes"). */
    uint32_t stripes;
} store_redis_options;

/*
 * Connect (bounded by the connect timeout), authenticate, select the db and
 * check the module. STORE_OK and *out, or STORE_ECONFIG (a malformed URL),
 * STORE_EUNREACHABLE (cannot connect: unknown host, refused, timeout),
 * STORE_EAUTH (wrong user or password, or one is needed), STORE_ENOMODULE
 * (the module is not loaded, or another version of it), STORE_EUNAVAILABLE
 * (Redis answered but refused, e.g. loading), with a sentence in err.
 */
int store_redis_open(const core_config *config, const store_redis_options *options, store_t **out,
                     char *err, size_t errlen);

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
