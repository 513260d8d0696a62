/*
 * link.h: the Redis engine's connections (store/redis/redis.h), apart from
 * its operations: a few shared, pipelined connections to one Redis
 * (redis://, unix://) or to each primary of a Redis Cluster
 * (redis-cluster://), there beside a pool of routing handles of
 * src/cluster/cluster.h; the up/down state, the monitor thread,
 * --redis-wait, and the figures of all that. It knows no HF3FS.* command:
 * it sends what it is given and says what became of it.
 *
 * One Redis. The front end keeps --redis-connections connections (pipes)
 * to it, shared by every calling thread; a call goes to the pipe with the
 * fewest commands outstanding. Its commands, formatted in RESP before it
 * takes the pipe's lock, join the connection's queue; replies come back in
 * the order the commands went out (RESP), so they are matched to the
 * callers by position in the connection's flight list. There is no I/O
 * thread: the callers themselves take two roles. Whoever finds the queue
 * non-empty, nobody writing and nothing in flight becomes the writer: it
 * moves the whole queue into the flight list and sends it in one write.
 * While that batch is in flight, new calls queue behind it; whoever finds
 * commands in flight and nobody reading becomes the reader: it waits for
 * the socket until the earliest deadline in flight, hands each reply to its
 * caller (waking it), and, once the batch's last reply is in, writes what
 * queued meanwhile as the next batch; else it leaves the role to the first
 * caller still waiting for one. So a batch holds what arrived during the
 * last one's round trip: a lone call writes and reads its own commands on
 * its own thread at once, with no hand-off, and under load the batches grow
 * with it (Redis reads many commands per system call, and one write and one
 * read serve many calls). A caller whose answers are in returns; roles are
 * handed on by whoever leaves one. A caller on a fiber (the server's
 * requests: util/fiber.h) parks where a thread would sleep: waiting for its
 * replies, for a role, for room, and the reader's wait for the socket,
 * which is then its loop's epoll; its loop serves other requests meanwhile,
 * whose commands join the next batch. A routing handle's round trips
 * (over a cluster: redirects, retries, failovers, the commands to every
 * primary), whose I/O blocks, run on a thread of their own meanwhile
 * (hf_fiber_offload), and so does opening a pipe's connection (connect,
 * AUTH, SELECT): one caller opens it, without the pipe's lock, and the
 * callers that come meanwhile wait for its outcome. So a slow or dead node
 * delays only the calls that go to it.
 *
 * Each call has a deadline, its start plus --redis-timeout (plus
 * --redis-wait-timeout under --redis-wait, since a WAIT ahead of it on the
 * connection holds it). A deadline passed, a write or read that fails, EOF
 * or a reply nobody awaited break the connection: every command in flight
 * on it ends as sent (a change STORE_EUNCERTAIN, a read STORE_EUNAVAILABLE,
 * with their replies dropped), every command still queued as not sent
 * (STORE_EUNAVAILABLE), and Redis is marked down. Other pipes are untouched.
 *
 * At most --redis-max-in-flight commands are queued or in flight per pipe
 * (a call larger than the bound alone goes in when the pipe is empty): past
 * it a caller waits for room until its deadline, then is refused
 * (STORE_EUNAVAILABLE), at once if Redis is marked down meanwhile.
 *
 * Under --redis-wait a batch that holds a change is followed by one WAIT:
 * it covers every change written before it on the connection, so each
 * change of the batch gets its outcome from that one reply (fewer replicas
 * than asked: STORE_EUNCERTAIN).
 *
 * --redis-wait. Given (wait_replicas N), every change on every primary
 * waits for N replicas. Without it (wait_auto), each primary's from what
 * it has: a primary's changes wait for one replica (WAIT 1) from the first
 * look that finds one in sync (at open, then by the monitor every second)
 * for as long as it stays the primary, a primary not looked at yet (met
 * since the last look) is waited on, and a primary without one is not
 * waited on and is said so: the log at open and at each change,
 * redis_link_unreplicated, the figures. A primary that loses its only
 * replica stays waited on (its changes answer STORE_EUNCERTAIN, and health
 * says reads-only, until one is in sync again): that is when acknowledged
 * work can be lost, a primary cut off with some front ends while its
 * replica is promoted on the other side. A node seen as a replica (a
 * cluster's map), or another primary named by the sentinels, is judged
 * afresh; so is every primary when the front end starts again. health.c
 * holds the rule.
 *
 * Down and up: any I/O failure marks Redis down: every later call is
 * refused at once until the monitor reconnects (0.1 s doubling to 2 s) and
 * its probe passes; connections from before are then retired (the calls in
 * flight on them finish, new ones open a new connection). While up, the
 * monitor probes every second on a connection of its own. Before commands
 * go out on a connection with nothing in flight, a poll() checks that Redis
 * has not closed it (restarted, stopped), so that they go out on a new
 * connection (or are refused, nothing sent, if none can be opened) rather
 * than into a dead socket.
 *
 * Redis Sentinel (redis-sentinel://sentinels/NAME): one Redis, as above,
 * whose address the sentinels give (sentinel.c). Open and the monitor ask
 * them in turn, the last that answered first, SENTINEL
 * GET-MASTER-ADDR-BY-NAME NAME, with the link's credentials (a sentinel
 * without a password accepts them); the probe adds ROLE, which must say
 * master. While up the monitor also asks the sentinels every second: a
 * ROLE not master, another primary named, or a change answered READONLY
 * mark Redis down; while down each attempt (0.1 s doubling to 0.5 s) asks
 * them first and connects to the primary they name, so connections opened
 * once it is up again go there.
 *
 * A Redis Cluster. The same pipes, --redis-connections of them to each
 * primary, chosen by a slot map taken from a routing handle of
 * src/cluster/cluster.h (at open, by the monitor every second, and after a
 * redirect). A call's commands are grouped by the primary of their slot;
 * each group goes on a pipe of its node and every group is written before
 * the call waits for any reply, so the nodes work at once. Under
 * --redis-wait each node's batch gets its one WAIT. What the pipes cannot
 * settle goes through a routing handle, borrowed from a pool (each has its
 * own connections and slot map, so threads never share one), which knows
 * MOVED, ASK, TRYAGAIN, CLUSTERDOWN and failovers: a command redirected or
 * told to retry (it ran nowhere), one whose slot has no primary in the map
 * or whose node's connection failed in the last moments (a pause of 10 ms
 * doubling to 1 s), one refused or not sent, and a read whose answer was
 * lost; a change sent and not answered is STORE_EUNCERTAIN, as anywhere.
 * On a handle, a batch makes one round trip per node; for a change under
 * --redis-wait each command is followed by a WAIT on its node; a batch
 * that was redirected may have run elsewhere than its WAITs went, so a
 * WAIT then goes to every primary. Calls are never refused as a whole: a
 * node that is down costs its own slots' calls the command timeout, the
 * other slots keep serving. The monitor probes every primary every second
 * (every 200 ms while one fails) and checks that every slot is served; it
 * only tells (health, figures).
 *
 * The probe (options): one or two commands, pipelined, that every new
 * connection sends first (after AUTH and SELECT): the pipes', the
 * monitor's and, over a cluster, each routing handle's to each node (its
 * hello, cluster.h); its checker judges the replies. A connection whose
 * probe fails carries no command: for the one Redis that is Redis down
 * (every call refused), for a cluster node its slots' commands refused
 * (STORE_EUNAVAILABLE) until a later connection passes. The monitor sends
 * it again every second. Open fails with the checker's code; later
 * failures mark Redis down (one Redis) or the cluster degraded, with the
 * checker's sentence as the reason.
 *
 * Outcomes of a command (redis_cmd.code): STORE_OK with its reply (which
 * may be an error reply: the caller judges it), STORE_EUNAVAILABLE (not
 * sent, or a read whose answer was lost: nothing changed), or, for a
 * change, STORE_EUNCERTAIN (sent and its answer lost, or fewer replicas
 * than --redis-wait acknowledged it: it may have taken effect).
 *
 * The code: link.c (the URL, open and close, the calls, one Redis's
 * monitor), health.c (the default's rule, the look at the replicas, health
 * and figures), pipe.c (the pipes), route.c (a Redis Cluster);
 * link_internal.h is what they share.
 */
#ifndef HF_STORE_REDIS_LINK_H
#define HF_STORE_REDIS_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "store/store.h"

typedef struct redis_link redis_link;

/* Judges the replies to the probe's commands (one each, none NULL) from
 * the node at addr; ctx is the options' probe_ctx. STORE_OK, or a STORE_E*
 * code with a sentence in err. Called on any thread. */
typedef int (*redis_probe_check)(void *ctx, redisReply *const *replies, const char *addr, char *err,
                                 size_t errlen);

#define REDIS_PROBE_MAX 2 /* commands of the probe */
typedef struct redis_probe_cmd {
    int argc; /* at most 4 arguments */
    const char *argv[4];
} redis_probe_cmd;

typedef struct redis_link_options {
    const char *url;            /* as store_redis_options.url */
    const char *password;       /* replaces the URL's password if set */
    int64_t connect_timeout_ms; /* > 0 */
    int64_t command_timeout_ms; /* > 0 */
    unsigned wait_replicas;     /* > 0: WAIT for that many replicas after a change */
    bool wait_auto;             /* instead: the default's rule ("--redis-wait") */
    int64_t wait_timeout_ms;    /* > 0 */
    unsigned connections;       /* per node: connections shared by all callers (0: 1) */
    size_t max_in_flight;       /* commands queued or in flight per connection (0: 256) */
    int probe_n;                /* the probe: 1 or 2 commands */
    redis_probe_cmd probe[REDIS_PROBE_MAX];
    redis_probe_check probe_check;
    void *probe_ctx;
} redis_link_options;

/* One command. In: argv (borrowed during the call) and, over a cluster,
 * where it goes: slot (of its key) or, with slot -1, node (an index of
 * redis_link_primaries). Out: reply (the caller frees it) and code. */
typedef struct redis_cmd {
    int argc;
    const char **argv;
    const size_t *argvlen;
    int slot;
    int node;
    redisReply *reply;
    int code;
    char addr[128]; /* redis_link_on_primaries: the node's address */
} redis_cmd;

/*
 * Parse the URL, connect (one Redis: one connection; a cluster: one
 * handle and its slot map) and pass the probe. STORE_OK and *out, or
 * STORE_ECONFIG (malformed URL), STORE_EUNREACHABLE, STORE_EAUTH,
 * STORE_EUNAVAILABLE (Redis answered but refused), or the probe checker's
 * code, with a sentence in err.
 */
int redis_link_open(const redis_link_options *opt, redis_link **out, char *err, size_t errlen);
void redis_link_close(redis_link *l);

bool redis_link_is_cluster(const redis_link *l);
/* "host:port", "unix:/path" or "cluster seeds" for messages. */
const char *redis_link_where(redis_link *l, char *buf, size_t len);
/* The primaries that serve slots in a cluster's map (a handle's, as it is
 * now; 0 if none is known), or 1 for one Redis. */
uint32_t redis_link_primaries(redis_link *l);
/* The cluster slot of a key (routing; on one Redis the slot is ignored). */
int redis_link_slot(const void *key, size_t len);

/* Run n commands (the outcomes above); change: they may change state. */
void redis_link_exec(redis_link *l, redis_cmd *cmds, size_t n, bool change);
/* The same command once on the one Redis or on every primary of a
 * cluster's map, at once: *n commands with their outcomes and each node's
 * address (free them with redis_cmds_free). *n is 0 when no primary is
 * known (over a cluster). */
redis_cmd *redis_link_on_primaries(redis_link *l, int argc, const char **argv,
                                   const size_t *argvlen, bool change, size_t *n);
/* Free the replies of n commands, then the array. */
void redis_cmds_free(redis_cmd *cmds, size_t n);

/* The primaries without a replica in sync as the monitor last saw them:
 * how many, and the first max of their addresses into names. */
size_t redis_link_unreplicated(redis_link *l, char (*names)[STORE_NODE_NAME], size_t max);

/* An error reply judged by the caller, counted with the link's errors
 * (unknown: an outcome unknown too). */
void redis_link_count_error(redis_link *l, bool unknown);

/* store_ops.health: what a client meets, and why unless serving.
 *   down        one Redis marked down (every call is refused), or a cluster
 *               none of whose primaries answers;
 *   reads_only  a cluster degraded but some primary answers (the slots
 *               without one fail reads and changes); the monitor (every
 *               second) saw a primary with fewer replicas in sync (INFO
 *               replication, state=online) than its changes wait for
 *               (--redis-wait N, or 1 where the default waits); or the
 *               latest change that failed while Redis answered (a WAIT
 *               short of N replicas, a write refused: MISCONF, READONLY,
 *               NOREPLICAS, OOM, MASTERDOWN) is under 10 s old
 *               (LINK_CHANGE_FAILED_HOLD_US) and no change was applied and
 *               acknowledged since;
 *   serving     otherwise. */
store_mode redis_link_health(redis_link *l, char *reason, size_t len);
/* store_ops.metrics: the link's families and the "store" member. */
void redis_link_metrics(redis_link *l, const store_emitter *e);

#endif
