/*
 * cluster.h: routing Redis commands over a Redis Cluster, on hiredis 0.14.
 *
 * Debian 12 ships no cluster client for hiredis 0.14; this module is one,
 * small enough to read. It is what `redis-cli -c` and the Redis Cluster
 * specification do, plus batches that ask several nodes at once.
 *
 * Nodes and the slot map
 *   cluster_open() takes seed nodes "host:port[,host:port...]" and loads the
 *   slot map with CLUSTER SLOTS from the first seed that answers: for each of
 *   the 16384 slots, the primary that serves it (or none). Every seed and
 *   every node the map names, primary or replica, is a "known node", listed
 *   by cluster_node_count()/cluster_get_node_stats() with a stable index; known
 *   nodes are never forgotten (their counters stay), a node that leaves the
 *   map only loses its connection. A node has at most one connection, opened
 *   on first use (non-blocking, connect_timeout_ms; AUTH first when a
 *   password is set, AUTH user password when a user is set too).
 *
 * Hello
 *   With options.hello set, a new connection carries no command until it
 *   passed the hello: its commands (one or two, pipelined after AUTH) in a
 *   round of their own, their replies judged by hello_check. A node whose
 *   hello fails is down with the check's sentence (cluster_node_stats.
 *   refused) and every command for it fails at once with CLUSTER_EREFUSED
 *   (nothing sent) until its reconnect wait is over and a new connection
 *   passes. Only the map refresh's CLUSTER SLOTS goes on a connection that
 *   has not passed it (the map is Redis's, whatever the node's module).
 *
 * Slots
 *   cluster_key_slot() is Redis's: CRC16 (XMODEM) of the key, mod 16384; if
 *   the key has a '{' followed later by a '}' with at least one byte between
 *   the first '{' and the first '}' after it, only those bytes are hashed
 *   (the hash tag). So "{pool}a" and "{pool}b" share a slot.
 *
 * Batches (cluster_exec)
 *   Each command names the slot of its key (or a node, see cluster_cmd). The
 *   commands of a batch are grouped by the node that serves their slot; each
 *   group is written to its node as one pipeline, and all nodes are written
 *   and read at once (non-blocking sockets, one poll loop): one round trip
 *   per node, in parallel. Replies are returned in request order. Commands of
 *   one node run in the order given; there is no order between nodes.
 *
 * Redirects and retries
 *   A batch has one deadline, command_timeout_ms after cluster_exec() starts.
 *   - MOVED slot host:port: the map entry of that slot becomes host:port and
 *     the command is resent there at once; a full map refresh is asked for.
 *   - ASK slot host:port: the command is resent to host:port preceded by
 *     ASKING, for this command only; the map does not change.
 *   - TRYAGAIN, CLUSTERDOWN, LOADING, or a slot no node serves: resent after
 *     a pause (10 ms, doubling up to 200 ms) until the deadline, then
 *     CLUSTER_ETRYAGAIN or CLUSTER_EDOWN with Redis's last words.
 *   - More than CLUSTER_MAX_REDIRECTS redirects for one command:
 *     CLUSTER_EREDIRECT.
 *   - A connection that cannot be opened, or breaks: the node is marked
 *     down (reconnects wait 10 ms, doubling up to 1 s, reset by a success)
 *     and a map refresh is asked for. A command of which no byte went out is
 *     resent (after the pause, to the node its slot maps to by then) until
 *     the deadline, then CLUSTER_EUNREACHABLE. A command that may have
 *     reached the node and got no answer may have run: it is not resent
 *     (CLUSTER_ECONN), unless flagged CLUSTER_CMD_IDEMPOTENT.
 *   - The deadline passes with a reply outstanding: CLUSTER_ETIMEOUT (the
 *     command may have run); that node's connection is closed and a map
 *     refresh is asked for.
 *   Every other reply, error replies included (NOSCRIPT, WRONGTYPE, a
 *   script's error), is the command's answer.
 *
 * Map refresh, with backoff
 *   A refresh asks CLUSTER SLOTS of the known nodes in turn until one
 *   answers: those not down first, starting after the one that answered
 *   last time, then the down ones whose reconnect wait is over. It runs
 *   when one was asked for and the backoff allows: a refresh waits 50 ms
 *   after the previous one, doubling up to 1 s while refreshes keep being
 *   needed; a batch answered without redirect or node error resets the wait
 *   to 50 ms. So after a failover the promoted replica is found within about
 *   1 s of its promotion, with no help from the caller.
 *
 * Threads: a cluster_t is used by one thread at a time (cluster_get_node_stats
 * included). A server opens one per thread, or guards one with a lock;
 * handles share nothing. The process must ignore SIGPIPE (hiredis writes
 * with write(2)).
 *
 * Errors: 0 or a negative CLUSTER_E* code (-401..-499; the ranges of the
 * modules: docs/architecture.md); cluster_strerror() names a code,
 * cluster_last_error() tells the last failure of the handle (which node,
 * what happened).
 */
#ifndef HF_CLUSTER_CLUSTER_H
#define HF_CLUSTER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/hiredis.h>

enum {
    CLUSTER_OK = 0,
    CLUSTER_EINVAL = -401,       /* bad seeds or arguments */
    CLUSTER_EUNREACHABLE = -402, /* no connection to the node in time; the command was not sent */
    CLUSTER_ETIMEOUT = -403,     /* sent, no reply before the deadline: it may have run */
    CLUSTER_ECONN = -404,        /* sent, then the connection broke: it may have run */
    CLUSTER_EDOWN = -405, /* CLUSTERDOWN, or the slot is served by no node, until the deadline */
    CLUSTER_ETRYAGAIN = -406, /* TRYAGAIN or LOADING until the deadline */
    CLUSTER_EREDIRECT = -407, /* more than CLUSTER_MAX_REDIRECTS MOVED/ASK for one command */
    CLUSTER_EAUTH = -408,     /* AUTH refused, or the node demands one */
    CLUSTER_EPROTO = -409,    /* not a cluster node, or an answer that cannot be parsed */
    CLUSTER_ENOMEM = -410,    /* hiredis could not allocate */
    CLUSTER_EREFUSED = -411,  /* the node failed the hello: the command was not sent */
};

#define CLUSTER_SLOTS 16384
#define CLUSTER_MAX_REDIRECTS 16

typedef struct cluster cluster_t;

typedef struct cluster_options {
    const char *seeds;      /* "host:port[,host:port...]"; "[v6addr]:port" too */
    const char *user;       /* ACL user, or NULL for AUTH with the password alone */
    const char *password;   /* NULL: no AUTH */
    int connect_timeout_ms; /* per connection attempt; <= 0: 1000 */
    int command_timeout_ms; /* per cluster_exec(), retries included; <= 0: 1000 */
    /* The hello ("Hello" above): hello_n commands (0: none, at most
     * CLUSTER_HELLO_MAX), borrowed for the handle's life; hello_check
     * judges their replies (none NULL) from the node at addr: 0, or
     * non-zero with a sentence in why. */
    int hello_n;
    int hello_argc[2];
    const char *const *hello_argv[2];
    const size_t *hello_argvlen[2];
    int (*hello_check)(void *ctx, redisReply *const *replies, const char *addr, char *why,
                       size_t len);
    void *hello_ctx;
} cluster_options;
#define CLUSTER_HELLO_MAX 2

/* Open a handle and load the slot map. 0, or a negative code with a sentence
 * in err (e.g. "127.0.0.1:7000: Connection refused"; "not a cluster"). */
int cluster_open(const cluster_options *opt, cluster_t **out, char *err, size_t errlen);
/* Close every connection and free the handle. NULL is a no-op. */
void cluster_close(cluster_t *c);

/* The slot of a key (hash tag rule above). */
int cluster_key_slot(const void *key, size_t len);

/* A command may be resent after its connection broke with the command
 * outstanding (reads, or writes that are safe to apply twice). */
#define CLUSTER_CMD_IDEMPOTENT 0x1

typedef struct cluster_cmd {
    /* In: the command, borrowed until cluster_exec() returns. */
    int argc;
    const char **argv;
    const size_t *argvlen;
    int slot;       /* the slot of its key (cluster_key_slot), or -1: to `node` */
    int node;       /* with slot -1: a known node's index; sent there as is, never
                   * redirected or retried (SCRIPT LOAD, INFO, FLUSHALL...) */
    unsigned flags; /* CLUSTER_CMD_* */
    /* Out: the reply (error replies included) with error 0, or NULL and a
     * negative error. The caller owns the reply: freeReplyObject(). */
    redisReply *reply;
    int error;
} cluster_cmd;

/*
 * Run n commands (the batch rules above). Returns 0 when every command got
 * a reply (which may be an error reply), else the error of the first
 * command that got none; each command's own outcome is in its reply/error.
 */
int cluster_exec(cluster_t *c, cluster_cmd *cmds, size_t n);

/* One command routed by the slot of `key`: the reply (caller frees it), or
 * NULL with the code in *error. A convenience over cluster_exec(). */
redisReply *cluster_command(cluster_t *c, const void *key, size_t keylen, int argc,
                            const char **argv, const size_t *argvlen, int *error);

/*
 * What a reply says of its command ("Redirects and retries" above): an
 * answer (any reply but the errors below), or, from its error's first word,
 * MOVED, ASK, TRYAGAIN or LOADING (busy: ask again), CLUSTERDOWN. Every
 * kind but CLUSTER_REPLY_ANSWER means the command ran nowhere.
 */
typedef enum cluster_reply_kind {
    CLUSTER_REPLY_ANSWER = 0,
    CLUSTER_REPLY_MOVED,
    CLUSTER_REPLY_ASK,
    CLUSTER_REPLY_BUSY,
    CLUSTER_REPLY_DOWN,
} cluster_reply_kind;
cluster_reply_kind cluster_reply_kind_of(const redisReply *r);

const char *cluster_strerror(int err);

/*
 * Whether the text of a Redis error reply refuses the connection's
 * credentials or rights (NOAUTH, WRONGPASS, NOPERM): what asking again, or
 * asking another node, cannot mend. The one Redis of store/redis/link.c
 * judges its SELECT by it too.
 */
static inline bool cluster_error_is_auth(const char *text)
{
    return strncmp(text, "NOAUTH", 6) == 0 || strncmp(text, "WRONGPASS", 9) == 0 ||
           strncmp(text, "NOPERM", 6) == 0;
}
/* The last failure of this handle, as a sentence naming the node; "" if none.
 * Valid until the next call on the handle. */
const char *cluster_last_error(const cluster_t *c);

/* The figures of a known node, for /metrics and /v1/stats. */
typedef struct cluster_node_stats {
    char addr[128];    /* "host:port" */
    bool primary;      /* serves slots in the current map */
    bool replica;      /* a replica in the current map */
    bool connected;    /* has an open connection now */
    bool down;         /* its last connection attempt or connection failed */
    uint32_t slots;    /* slots it serves in the current map */
    uint64_t requests; /* commands sent to it (CLUSTER SLOTS included; not AUTH or ASKING) */
    uint64_t moved;    /* MOVED answers it gave */
    uint64_t ask;      /* ASK answers it gave */
    uint64_t retries;  /* TRYAGAIN, CLUSTERDOWN and LOADING answers it gave */
    uint64_t errors;   /* connections refused, broken or timed out */
    uint64_t connects; /* connections opened */
    char refused[256]; /* why its last hello failed, while it is refused; "" */
    int refused_code;  /* what hello_check returned then (0 when not refused) */
} cluster_node_stats;

typedef struct cluster_stats {
    uint64_t refreshes;        /* slot maps loaded (cluster_open's included) */
    uint64_t refresh_failures; /* refreshes that found no node able to answer */
    uint64_t rounds;           /* network rounds: one per pass of a batch (a batch
                                * without redirect or retry is one round) */
    size_t nodes;              /* known nodes */
} cluster_stats;

size_t cluster_node_count(const cluster_t *c);
/* Index i < cluster_node_count(). */
void cluster_get_node_stats(const cluster_t *c, size_t i, cluster_node_stats *out);
void cluster_get_stats(const cluster_t *c, cluster_stats *out);
/* The known node that the map gives for slot, or -1 when none serves it. */
int cluster_slot_node(const cluster_t *c, int slot);

#endif
