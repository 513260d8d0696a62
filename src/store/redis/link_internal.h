/*
 * link_internal.h: what the files of the link to Redis (link.h) share. Not
 * for use outside src/store/redis; the engine's operations know link.h
 * only.
 *
 *   link.h       what the link promises; its head comment is the
 *                specification
 *   link.c       the URL, a connection opened and probed, up and down, the
 *                monitor of one Redis, the calls, open and close
 *   health.c     the rule of the default --redis-wait (what a change on
 *                each primary waits for), the monitors' look at the
 *                replicas, health and figures
 *   pipe.c       the pipes: a node's shared, pipelined connections, the
 *                writer and reader roles, the bound, the calls of one Redis
 *   route.c      a Redis Cluster: the routing handles, the slot map the
 *                pipes are chosen by, the fast path, the cluster's probe,
 *                monitor and figures
 */
#ifndef HF_STORE_REDIS_LINK_INTERNAL_H
#define HF_STORE_REDIS_LINK_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "cluster/cluster.h"
#include "store/redis/link.h"
#include "util/buf.h"
#include "util/fiber.h"

/* How long a change that failed while Redis answered (a short WAIT, a write
 * refused) keeps the mode reads-only unless a later change is applied and
 * acknowledged: the monitors cannot see every cause (a replica too slow for
 * --redis-wait-timeout, a primary that refuses writes). */
#define LINK_CHANGE_FAILED_HOLD_US (10 * 1000000)

/* The round trip histogram: its buckets (their bounds are link.c's). */
#define RTT_BUCKETS 13

typedef struct conn {
    redisContext *ctx;
    /* over a Redis Cluster: a routing handle instead of ctx, and the
     * figures of its nodes already added to the link's */
    cluster_t *cl;
    cluster_node_stats *seen;
    size_t nseen;
    cluster_stats seen_totals;
    uint64_t gen;
    struct conn *next;
} conn;

typedef struct waiter waiter;
typedef struct pconn pconn; /* a pipe's connection: pipe.c's */
typedef struct node_link node_link;
struct pipe; /* pipe.c's */

#define NO_NODE UINT16_MAX

/* A node spoken to over pipes: the one Redis, or a cluster primary. */
struct node_link {
    char *host; /* a cluster node's; NULL: the link's one Redis */
    int port;
    char addr[128];
    struct pipe *pipes;
    size_t npipes;
    atomic_size_t next_pipe;
    /* a cluster node whose connection failed: its commands go through the
     * routing handles until then (monotonic us); the pause doubles */
    atomic_int_fast64_t down_until_us, backoff_ms;
    /* figures: commands written, MOVED and ASK answers */
    atomic_uint_fast64_t sent, moved, ask;
    /* health.c, the default --redis-wait's rule: whether a look found a
     * replica in sync since it was judged afresh; its replicas in sync at
     * the last look, plus one (0: not looked at as a primary yet) */
    atomic_bool had_replica;
    atomic_int seen_sync;
};

/* A sentinel of redis-sentinel:// (sentinel.c). */
typedef struct link_sentinel {
    char host[256];
    int port;
} link_sentinel;

typedef struct node_fig {
    cluster_node_stats s; /* counters summed; flags and slots as the monitor saw them */
} node_fig;

/* A primary as the monitor's last look at the replicas saw it (health.c). */
typedef struct primary_fig {
    char addr[128];
    int in_sync;   /* replicas in sync (state=online); -1: not known */
    unsigned want; /* the replicas its changes wait for now */
} primary_fig;

struct redis_link {
    redis_link_options opt;
    size_t probe_lens[REDIS_PROBE_MAX][4];
    /* the parsed URL */
    char *host, *unix_path, *user, *password;
    int port, db;
    /* redis-cluster://: the seed nodes, routed by src/cluster */
    bool cluster;
    char *seeds;
    cluster_options copt;
    /* redis-sentinel://: the sentinels, the primary's name, the one asked
     * first (the last that answered) and its kept connection (open's and
     * the monitor's alone); the primary they named last, which every
     * connection to the one Redis goes to (under addr_lock) */
    bool sentinel;
    link_sentinel *sentinels;
    size_t nsentinels, sentinel_first, sentinel_ctx_of;
    char *master_name;
    redisContext *sentinel_ctx;
    pthread_mutex_t addr_lock;
    char primary_host[256];
    int primary_port;
    atomic_uint_fast64_t sentinel_asks, switches;

    pthread_mutex_t lock;
    conn *idle;     /* over a cluster: routing handles */
    node_link *one; /* one Redis: its pipes */
    /* over a cluster: the primaries' pipes (never freed before close) and
     * the slot map they are chosen by, taken from a routing handle */
    pthread_rwlock_t map_lock;
    node_link **nodes;
    size_t nnodes;
    uint16_t slot_node[CLUSTER_SLOTS]; /* an index of nodes, or NO_NODE */
    int64_t map_us;                    /* when it was taken (monotonic) */
    atomic_bool map_stale;             /* a command was redirected or a pipe failed */
    uint64_t gen; /* bumped when Redis goes down: older connections are dropped */
    bool up;
    char reason[512]; /* why it is down */
    pthread_cond_t wake;
    bool stopping;
    bool monitoring;
    pthread_t monitor;

    /* figures */
    atomic_uint_fast64_t calls, errors, unknown, reconnects, refused_down;
    atomic_uint_fast64_t writes, waited_for_room, refused_busy;
    atomic_uint_fast64_t rtt_buckets[RTT_BUCKETS];
    atomic_uint_fast64_t rtt_sum_us;
    atomic_bool up_flag;
    /* what a client meets while up (redis_link_health): */
    atomic_bool repl_short;  /* the monitor saw a primary with fewer replicas in sync */
    atomic_bool none_answer; /* over a cluster, degraded: not one primary answers */
    /* the latest change applied and acknowledged, and the latest one that
     * failed while Redis answered (a WAIT short, a write refused), monotonic
     * us; the reasons under lock */
    atomic_int_fast64_t change_ok_us, change_bad_us;
    char repl_reason[256], change_reason[256];
    /* the monitor's last look at the replicas (health.c): each primary
     * (under lock); the monitor's own: over one Redis the address its
     * decision was made for, and whether a look was made yet */
    primary_fig *prims;
    size_t nprims;
    char one_seen[128];
    bool looked;
    /* over a cluster (under lock): each node's figures summed over the
     * routing handles, and the handles' totals */
    node_fig *figs;
    size_t nfigs;
    uint64_t cl_refreshes, cl_refresh_failures, cl_rounds;
    atomic_uint_fast64_t cl_rewaits, cl_pipelined, cl_by_handles;
};

/*
 * A caller's commands on a pipe (link.h "One Redis"), on its stack; or,
 * with is_wait, the WAIT that follows a batch of changes (allocated by the
 * writer, no thread of its own). Fields under the pipe's lock.
 */
struct waiter {
    redis_cmd *cmds;
    size_t n;
    bool change;
    bool covered; /* a change whose outcome waits for its batch's WAIT */
    bool is_wait;
    unsigned want;     /* is_wait: the replicas it asks for; else those of its refused WAIT */
    bool wait_refused; /* a change of it applied, its WAIT refused (pipe.c settle_refused) */
    bool done;
    bool parked;          /* its caller sleeps in link__pipe_await, free to take a role */
    size_t got;           /* replies received */
    int64_t t0_us;        /* when the call began (round trip figures) */
    int64_t until_us;     /* its deadline: past it, the connection is broken */
    hf_buf out;           /* its commands in RESP, formatted before it queues */
    hf_park park;         /* its caller's sleep: a thread's, or a fiber's (util/fiber.h) */
    waiter *next;         /* in its connection's queue or flight list */
    waiter *covers;       /* is_wait: the changes it covers */
    waiter *next_covered; /* in a WAIT's covers */
    pconn *c;
    struct pipe *p; /* the pipe it was queued on */
};

/* ------------------------------------------------------------ link.c */

char *link__dup_n(const char *p, size_t n);
/* The URL's "/db" at p, if any (a "/" and digits, 0 to 1,000,000), into
 * r->db; STORE_OK, or STORE_ECONFIG with err naming the URL. */
int link__parse_db(redis_link *r, const char *p, const char *url, char *err, size_t errlen);
/* A new connection to the one Redis (nl NULL or without a host) or to the
 * cluster node nl: connected, authenticated, db selected (one Redis). NULL,
 * *code and err. */
redisContext *link__connect_one(redis_link *r, const node_link *nl, int *code, char *err,
                                size_t errlen);
/* Redis marked down (one Redis): calls refused until the monitor's probe
 * passes again. */
void link__mark_down(redis_link *r, const char *why);
/* The monitors' pause (r->lock held): wait_ms, or less if woken. */
void link__monitor_wait(redis_link *r, int64_t wait_ms);
/* --redis-wait-timeout, the WAIT's argument. */
int64_t link__wait_ms(const redis_link *r);
/* The command "WAIT <link__wait_count> <link__wait_ms>" that follows a
 * change on a primary whose changes wait; argv and lens point into the
 * struct itself, so it is filled where it is used (link__wait_cmd). */
typedef struct wait_cmd {
    unsigned want;
    char n[16], ms[24];
    const char *argv[3];
    size_t lens[3];
} wait_cmd;
void link__wait_cmd(const redis_link *r, wait_cmd *w);
/* A change applied, but fewer replicas than the want its WAIT asked for
 * acknowledged it. */
void link__wait_short(redis_link *r, long long acked, unsigned want);
/* One round trip into the figures. */
void link__count_rtt(redis_link *r, int64_t us);

/* ---------------------------------------------------------- health.c */

/* The replicas a WAIT asks for on a primary whose changes wait:
 * --redis-wait N, or the default's 1; 0: no change waits. */
unsigned link__wait_count(const redis_link *r);
/* The replicas a change on nl waits for now: link__wait_count, or 0 (no
 * WAIT). */
unsigned link__node_wait(redis_link *r, node_link *nl);
/* Over a cluster, on the routing handle c: the replicas a change waits for
 * on the node of slot (or, slot -1, the handle's node), as
 * link__node_wait (link__wait_count for a node the link has not mapped). */
unsigned link__wait_at(redis_link *r, conn *c, int slot, int node);
/* The monitors' look at the replicas: INFO replication of every primary
 * (looks[i].reply, NULL or not a string if it failed; looks[i].addr) of
 * one Redis (c NULL) or of the map of the routing handle c, judged by the
 * default's rule, into health and the figures. */
void link__replicas_seen(redis_link *r, conn *c, const redis_cmd *looks, size_t m);
/* One Redis: the look on the monitor's connection ctx. */
void link__look_one(redis_link *r, redisContext *ctx);

/* A WAIT under --redis-wait answered with an error after the changes it
 * covered applied on nl: Redis refuses a pending WAIT when its node stops
 * being a primary (-UNBLOCKED), as a CLUSTER FAILOVER does to the old
 * primary. Whether those changes are kept, acknowledged: nl, asked on a
 * connection of its own (blocking: a fiber offloads it) until it has
 * synced with its new primary, continued from its own history (a partial
 * resync: the new primary holds everything nl applied, and nl is its
 * replica) within --redis-wait-timeout plus --redis-command-timeout. Only
 * for want 1; false when not (a full resync, a node still primary, no
 * answer): the outcome stays unknown. */
bool link__demoted_kept(redis_link *r, const node_link *nl, unsigned want);

/* -------------------------------------------------------- sentinel.c */

/* p: "host:port[,host:port...]/NAME[/db]", after redis-sentinel:// and the
 * credentials (url for messages): the sentinels, the name, the db. */
int link__sentinel_parse(redis_link *r, const char *p, const char *url, char *err, size_t errlen);
/* The sentinels asked in turn (the last that answered first) for the
 * primary's address: STORE_OK, or STORE_EUNREACHABLE and each one's why. */
int link__sentinel_ask(redis_link *r, char *host, size_t hostlen, int *port, char *err,
                       size_t errlen);
/* host:port becomes the primary the link's connections go to; true if it
 * replaced another (a switch; logged). */
bool link__sentinel_follow(redis_link *r, const char *host, int port);
/* The primary the link follows now ("" and 0 before the first). */
void link__sentinel_primary(redis_link *r, char *host, size_t hostlen, int *port);
/* ROLE on c, the node at addr: STORE_OK if it is a primary, else
 * STORE_EUNREACHABLE and why. */
int link__sentinel_role(redis_link *r, redisContext *c, const char *addr, char *err, size_t errlen);
void link__sentinel_free(redis_link *r);

/* ------------------------------------------------------------ pipe.c */

/* A node spoken to over pipes: host NULL for the one Redis. */
node_link *link__node_new(redis_link *r, const char *host, size_t hostlen, int port,
                          const char *addr);
void link__node_free(node_link *nl);
/* Whether calls to nl are refused now: the one Redis marked down, a
 * cluster node in its pause. */
bool link__node_refusing(redis_link *r, node_link *nl);
/* A caller's n commands as a waiter for its node (not queued yet). */
void link__waiter_init(redis_link *r, waiter *w, redis_cmd *cmds, size_t n, bool change,
                       int64_t t0_us);
void link__waiter_free(waiter *w);
/* w queued on a pipe of nl and written if nobody writes there. false:
 * refused, nothing sent. */
bool link__pipe_submit(redis_link *r, node_link *nl, waiter *w, uint64_t gen);
/* Until w is answered, taking the reader's or writer's role when free. */
void link__pipe_await(redis_link *r, waiter *w);
/* One Redis: n commands on a pipe, their replies matched in order. */
void link__one_exec(redis_link *r, redis_cmd *cmds, size_t n, bool change);

/* ----------------------------------------------------------- route.c */

/* The node_link of the routing handle c's node that serves slot (or, slot
 * < 0, its node `node`): the one the pipes use; NULL when the handle has no
 * such node, or (add false) the link has not mapped it. add: a node not
 * mapped yet is added (the map's write lock), as link__cl_map_take does. */
node_link *link__cl_node_link(redis_link *r, conn *c, int slot, int node, bool add);

/* A routing handle (conn with cl), opened, borrowed from the pool, given
 * back (its figures folded into the link's), freed. */
conn *link__cl_open(redis_link *r, int *code, char *err, size_t errlen);
void link__cl_free(conn *c);
conn *link__cl_borrow(redis_link *r);
void link__cl_give_back(redis_link *r, conn *c);
/* What a handle's nodes did since it was last folded, into the link's
 * figures. */
void link__cl_fold(redis_link *r, conn *c);
/* The primaries of the handle's map, as commands of argv to each (*m). */
redis_cmd *link__cl_primaries(conn *c, int argc, const char **argv, const size_t *lens, size_t *m);
/* n commands at once on the handle c. */
void link__cl_exec(redis_link *r, conn *c, redis_cmd *cmds, size_t n, bool change);
/* A routing handle's slot map, taken for the pipes. */
void link__cl_map_take(redis_link *r, cluster_t *cl);
/* n commands over a cluster: on the pipes, through a handle what they
 * cannot settle. */
void link__cl_fast_exec(redis_link *r, redis_cmd *cmds, size_t n, bool change);
/* At open: the probe on every primary of the first handle. */
int link__cl_open_probe(redis_link *r, conn *c, char *err, size_t errlen);
/* The look at every primary's replicas on the handle c (health.c's
 * link__replicas_seen). */
void link__cl_look(redis_link *r, conn *c);
/* The monitor thread over a cluster. */
void *link__cl_monitor_main(void *arg);
/* A cluster's own figures (inside the "store" member). */
void link__cl_metrics(redis_link *r, const store_emitter *e);

#endif
