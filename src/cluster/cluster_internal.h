/*
 * cluster_internal.h: what the files of the cluster client (cluster.h)
 * share: a request of a batch and its outcome in a round, a known node, the
 * handle. Not for use outside src/cluster.
 *
 *   cluster.c  the handle: the known nodes, the slot map and its refresh,
 *              open, close and figures
 *   batch.c    a batch (cluster_exec): routing each command by its slot,
 *              then sorting the outcomes of a round: answers, redirects,
 *              retries after a pause, failures
 *   round.c    the connections (connect, AUTH, back-off of a node that
 *              failed), the hello, and one round: the ready requests'
 *              pipelines written and their replies read, all nodes at once;
 *              its head comment says how a round runs
 */
#ifndef HF_CLUSTER_CLUSTER_INTERNAL_H
#define HF_CLUSTER_CLUSTER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "util/buf.h"
#include "util/hostport.h"

#define DEFAULT_TIMEOUT_MS 1000
#define PAUSE_MIN_MS 10 /* between retries of TRYAGAIN, CLUSTERDOWN, unreachable */
#define PAUSE_MAX_MS 200
#define DOWN_MIN_MS 10 /* before reconnecting to a node that failed */
#define DOWN_MAX_MS 1000
#define REFRESH_MIN_MS 50 /* between two map refreshes */
#define REFRESH_MAX_MS 1000
#define MAX_NODES 4096 /* known nodes; more means a confused cluster */

/* What happened to a request in a round. */
enum outcome {
    OUT_NONE = 0, /* not sent this round */
    OUT_REPLY,    /* answered: request.reply */
    OUT_UNSENT,   /* no byte of it went out: safe to send again */
    OUT_LOST,     /* sent, then the connection failed: it may have run */
    OUT_TIMEOUT,  /* no reply before the deadline: it may have run */
    OUT_AUTH,     /* the node refused our AUTH */
    OUT_NOMEM,
    OUT_PROTO,   /* the node's byte stream could not be parsed */
    OUT_REFUSED, /* not sent: the node failed the hello */
};

/* A request that may go on a connection that has not passed the hello:
 * the map refresh's CLUSTER SLOTS and the hello itself (request.flags,
 * beside the CLUSTER_CMD_* flags). */
#define REQ_BEFORE_HELLO 0x80000000u

/* A command of a batch (or the refresh's CLUSTER SLOTS) and its progress. */
typedef struct request {
    int argc;
    const char **argv;
    const size_t *argvlen;
    int slot;    /* -1: raw, sent to `node` as is */
    int node;    /* where it goes this round */
    bool asking; /* ASK redirect: precede by ASKING, this round only */
    bool ready;  /* to be sent in the next round */
    bool done;
    unsigned flags;
    int redirects;
    int error; /* the code it fails with if the deadline passes now */
    enum outcome outcome;
    redisReply *reply;
} request;

/* A reply a node owes us this round, in pipeline order. */
enum expect_kind { EXP_AUTH, EXP_ASKING, EXP_REQUEST };
typedef struct expect {
    enum expect_kind kind;
    size_t request;
    size_t start; /* offset of its command's first byte in the node's pipeline */
} expect;

typedef struct node {
    char *host;
    int port;
    char addr[128];
    redisContext *ctx; /* NULL: not connected */
    bool fresh;        /* new connection: AUTH not sent yet */
    bool greeted;      /* its connection passed the hello (or there is none) */
    bool refused;      /* its last hello failed: why says why */
    int refused_code;  /* hello_check's verdict then */
    bool connecting;   /* connect() not yet known to have succeeded */
    int64_t connect_deadline;
    bool primary, replica;
    uint32_t slots;
    bool down;
    int64_t down_until;
    int down_wait_ms;
    char why[256]; /* why it is down */
    /* This round: its expected replies are expects[first, end), the next to
     * come is expects[next]; `written` bytes of its pipeline went out. */
    size_t first, end, next;
    size_t written;
    uint64_t requests, moved, ask, retries, errors, connects;
} node;

struct cluster {
    char *user, *password;
    cluster_options hello; /* its hello_* fields */
    int connect_timeout_ms, command_timeout_ms;
    node *nodes;
    size_t nnodes, node_cap;
    int16_t slot_map[CLUSTER_SLOTS]; /* node index or -1 */
    bool want_refresh;
    int64_t refresh_not_before;
    int refresh_wait_ms;
    size_t refresh_next; /* the node asked first at the next refresh */
    request *requests;
    size_t request_cap;
    expect *expects;
    hf_buf fmt; /* pipeline_append's command, formatted */
    size_t expect_cap;
    cluster_stats stats;
    char error[256];
};

/* How a node's address is written, in the seeds and in MOVED/ASK: the port
 * is required, an IPv6 address may go bare. */
#define NODE_ADDR (HF_HOSTPORT_NEED_PORT | HF_HOSTPORT_BARE_V6)

static inline int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* cluster.c: c->error, printf-style. */
__attribute__((format(printf, 2, 3))) void cluster__set_error(cluster_t *c, const char *fmt, ...);

/* cluster.c: the index of the known node host:port, added if new; -1 past
 * MAX_NODES. */
int cluster__node_intern(cluster_t *c, const char *host, size_t hostlen, int port);

/* cluster.c: load the slot map from the first known node that answers
 * (CLUSTER_OK or an error code), and set the next refresh's earliest time. */
int cluster__map_refresh(cluster_t *c, int64_t deadline);

/* round.c: close the node's connection, if any. */
void cluster__node_disconnect(node *nd);

/* round.c: send every ready request to its node and collect the replies,
 * all nodes at once, until each node answered all, failed, or the deadline
 * passed; each ready request ends with an outcome. No hello: for the hello
 * itself and the map refresh's CLUSTER SLOTS. */
void cluster__round_exchange(cluster_t *c, request *reqs, size_t n, int64_t deadline);

/* round.c: one round of a batch: the hello where it is due, then the
 * requests (cluster__round_exchange). */
void cluster__round_run(cluster_t *c, request *reqs, size_t n, int64_t deadline);

#endif
