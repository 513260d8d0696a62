/*
 * cluster.c: the routing of cluster.h. The rules are in the header; this file
 * says how.
 *
 * A batch runs in rounds. A round takes the requests that are ready, groups
 * them by node, appends each group to its node's hiredis output buffer
 * (AUTH first on a new connection, ASKING before an ASK-redirected command),
 * then one poll loop writes every buffer and reads every reply of every node
 * until all have answered, failed or the deadline passed. Each expected reply
 * remembers where its command starts in the node's pipeline, so when a
 * connection fails we know which commands certainly did not go out (their
 * first byte was never written) and may be resent anywhere. After the round,
 * cluster_exec() sorts the outcomes: answers, redirects (resent at once),
 * retryable errors (resent after a pause) and failures.
 *
 * Contexts are hiredis non-blocking contexts (redisConnectNonBlock): we do
 * the I/O with redisBufferWrite/redisBufferRead and take replies with
 * redisGetReplyFromReader, so hiredis never blocks and never polls itself.
 */
#include "cluster/cluster.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/hostport.h"
#include "util/resp.h"
#include "util/slot.h"
#include "util/xalloc.h"

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

static void sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

__attribute__((format(printf, 2, 3))) static void set_error(cluster_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof(c->error), fmt, ap);
    va_end(ap);
}

/* ---- slots ---- */

int cluster_key_slot(const void *key, size_t len)
{
    return hf_key_slot(key, len);
}

/* ---- nodes ---- */

/* How a node's address is written, in the seeds and in MOVED/ASK: the port
 * is required, an IPv6 address may go bare. */
#define NODE_ADDR (HF_HOSTPORT_NEED_PORT | HF_HOSTPORT_BARE_V6)

/* The index of the known node host:port, added if new; -1 past MAX_NODES. */
static int node_intern(cluster_t *c, const char *host, size_t hostlen, int port)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strlen(c->nodes[i].host) == hostlen &&
            memcmp(c->nodes[i].host, host, hostlen) == 0)
            return (int)i;
    if (c->nnodes >= MAX_NODES)
        return -1;
    if (c->nnodes == c->node_cap) {
        c->node_cap = c->node_cap ? 2 * c->node_cap : 8;
        c->nodes = hf_xreallocarray(c->nodes, c->node_cap, sizeof(node));
    }
    node *nd = &c->nodes[c->nnodes];
    memset(nd, 0, sizeof(*nd));
    nd->host = hf_xmalloc(hostlen + 1);
    memcpy(nd->host, host, hostlen);
    nd->host[hostlen] = '\0';
    nd->port = port;
    nd->down_wait_ms = DOWN_MIN_MS;
    snprintf(nd->addr, sizeof(nd->addr), strchr(nd->host, ':') ? "[%s]:%d" : "%s:%d", nd->host,
             port);
    return (int)c->nnodes++;
}

static void node_disconnect(node *nd)
{
    if (nd->ctx)
        redisFree(nd->ctx);
    nd->ctx = NULL;
    nd->fresh = false;
    nd->greeted = false;
    nd->connecting = false;
}

/* The node failed to connect or its connection broke (c->error says how):
 * reconnects wait. */
static void node_mark_down(cluster_t *c, node *nd, int64_t now)
{
    snprintf(nd->why, sizeof(nd->why), "%s", c->error);
    nd->errors++;
    nd->down = true;
    nd->down_until = now + nd->down_wait_ms;
    nd->down_wait_ms = min_int(2 * nd->down_wait_ms, DOWN_MAX_MS);
    node_disconnect(nd);
    c->want_refresh = true;
}

/* Open the node's connection if it has none. False (with c->error) when it
 * is down or the connection cannot even be started. */
static bool node_connect(cluster_t *c, node *nd, int64_t now)
{
    if (nd->ctx)
        return true;
    if (nd->down && now < nd->down_until) {
        set_error(c, "%s is down, reconnecting in %lld ms (%s)", nd->addr,
                  (long long)(nd->down_until - now), nd->why);
        return false;
    }
    redisContext *ctx = redisConnectNonBlock(nd->host, nd->port);
    if (!ctx || ctx->err) {
        set_error(c, "%s: %s", nd->addr, ctx ? ctx->errstr : "out of memory");
        if (ctx)
            redisFree(ctx);
        node_mark_down(c, nd, now);
        return false;
    }
    redisEnableKeepAlive(ctx); /* idle connections to a vanished host fail in the background */
    nd->ctx = ctx;
    nd->fresh = true;
    nd->connecting = true;
    nd->connect_deadline = now + c->connect_timeout_ms;
    nd->connects++;
    return true;
}

/* ---- one round ---- */

static expect *expect_push(cluster_t *c, size_t *n)
{
    if (*n == c->expect_cap) {
        c->expect_cap = c->expect_cap ? 2 * c->expect_cap : 64;
        c->expects = hf_xreallocarray(c->expects, c->expect_cap, sizeof(expect));
    }
    return &c->expects[(*n)++];
}

/* Append a command to the node's pipeline and expect its reply. */
static bool pipeline_append(cluster_t *c, node *nd, size_t *nexp, enum expect_kind kind, size_t req,
                            int argc, const char **argv, const size_t *argvlen)
{
    size_t start = sdslen(nd->ctx->obuf);
    c->fmt.len = 0;
    hf_resp_command(&c->fmt, argc, argv, argvlen);
    if (redisAppendFormattedCommand(nd->ctx, c->fmt.ptr, c->fmt.len) != REDIS_OK)
        return false;
    expect *e = expect_push(c, nexp);
    e->kind = kind;
    e->request = req;
    e->start = start;
    if (kind == EXP_REQUEST)
        nd->requests++;
    return true;
}

/* The node's round ends early: each command still owed is UNSENT if none of
 * its bytes went out, else `sent` (LOST, TIMEOUT, AUTH...). */
static void round_fail_node(cluster_t *c, node *nd, request *reqs, enum outcome sent)
{
    for (size_t e = nd->next; e < nd->end; e++) {
        expect *x = &c->expects[e];
        if (x->kind == EXP_REQUEST)
            reqs[x->request].outcome = x->start >= nd->written ? OUT_UNSENT : sent;
    }
    nd->next = nd->end;
}

/* A connection failed (refused, broken, unparsable): the node is down. */
static void round_node_error(cluster_t *c, node *nd, request *reqs, enum outcome sent, int64_t now)
{
    set_error(c, "%s: %s", nd->addr,
              nd->ctx && nd->ctx->errstr[0] ? nd->ctx->errstr : "connection failed");
    round_fail_node(c, nd, reqs, sent);
    node_mark_down(c, nd, now);
}

/* Take one reply owed by the node. False when the node's round is over. */
static bool round_deliver(cluster_t *c, node *nd, request *reqs, redisReply *r, int64_t now)
{
    expect *x = &c->expects[nd->next++];
    nd->down = false; /* it answers */
    nd->down_wait_ms = DOWN_MIN_MS;
    switch (x->kind) {
    case EXP_AUTH:
        if (r->type == REDIS_REPLY_ERROR) {
            set_error(c, "%s: AUTH refused: %.*s", nd->addr, (int)r->len, r->str);
            freeReplyObject(r);
            round_fail_node(c, nd, reqs, OUT_AUTH);
            node_mark_down(c, nd, now);
            return false;
        }
        freeReplyObject(r);
        break;
    case EXP_ASKING:
        freeReplyObject(r); /* if ASKING failed, the command's own reply says so */
        break;
    case EXP_REQUEST:
        reqs[x->request].reply = r;
        reqs[x->request].outcome = OUT_REPLY;
        break;
    }
    return nd->next < nd->end;
}

/* Whether the request may not go to nd yet: a hello is set and nd's
 * connection has not passed it (round_greet). */
static bool before_hello(const cluster_t *c, const node *nd, const request *rq)
{
    return c->hello.hello_n && !(nd->ctx && nd->greeted) && !(rq->flags & REQ_BEFORE_HELLO);
}

/* Build the pipelines of the ready requests, node by node. */
static void round_build(cluster_t *c, request *reqs, size_t n, int64_t now)
{
    size_t nexp = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        node *nd = &c->nodes[i];
        nd->first = nd->end = nd->next = nexp;
        nd->written = 0;
        bool any = false;
        for (size_t r = 0; r < n; r++) {
            request *rq = &reqs[r];
            if (!rq->ready || rq->node != (int)i)
                continue;
            if (before_hello(c, nd, rq)) /* the hello did not pass (round_greet) */
                rq->outcome = nd->refused ? OUT_REFUSED : OUT_UNSENT;
            else
                any = true;
        }
        if (!any)
            continue;
        bool ok = node_connect(c, nd, now);
        if (ok && nd->fresh && c->password) {
            const char *argv[3] = {"AUTH", c->user, c->password};
            size_t argvlen[3] = {4, c->user ? strlen(c->user) : 0, strlen(c->password)};
            if (!c->user)
                argv[1] = c->password, argvlen[1] = argvlen[2];
            ok = pipeline_append(c, nd, &nexp, EXP_AUTH, 0, c->user ? 3 : 2, argv, argvlen);
        }
        nd->fresh = false;
        for (size_t r = 0; r < n; r++) {
            request *rq = &reqs[r];
            if (!rq->ready || rq->node != (int)i || before_hello(c, nd, rq))
                continue;
            rq->outcome = OUT_UNSENT;
            if (!ok)
                continue;
            static const char *asking[1] = {"ASKING"};
            static const size_t asking_len[1] = {6};
            /* no command but the hello and CLUSTER SLOTS before the hello passed */
            HF_ASSERT(!c->hello.hello_n || nd->greeted || (rq->flags & REQ_BEFORE_HELLO));
            if (rq->asking)
                ok = pipeline_append(c, nd, &nexp, EXP_ASKING, r, 1, asking, asking_len);
            if (ok)
                ok = pipeline_append(c, nd, &nexp, EXP_REQUEST, r, rq->argc, rq->argv, rq->argvlen);
            if (!ok) {
                set_error(c, "%s: out of memory", nd->addr);
                rq->outcome = OUT_NOMEM;
            }
        }
        if (!ok && nd->ctx) { /* a pipeline that lacks a command is never sent */
            node_disconnect(nd);
            nexp = nd->first;
        }
        nd->end = nexp;
    }
}

/* Write what the node has to write; read and take what it answered.
 * revents is poll's verdict on its socket. */
static void round_io(cluster_t *c, node *nd, request *reqs, short revents, int64_t now)
{
    redisContext *ctx = nd->ctx;
    if ((revents & (POLLOUT | POLLERR | POLLHUP)) && sdslen(ctx->obuf) > 0) {
        size_t before = sdslen(ctx->obuf);
        int done;
        if (redisBufferWrite(ctx, &done) != REDIS_OK) {
            round_node_error(c, nd, reqs, OUT_LOST, now);
            return;
        }
        nd->written += before - sdslen(ctx->obuf);
        if (before != sdslen(ctx->obuf))
            nd->connecting = false;
    }
    if (!(revents & (POLLIN | POLLERR | POLLHUP)))
        return;
    if (redisBufferRead(ctx) != REDIS_OK) {
        round_node_error(c, nd, reqs, OUT_LOST, now);
        return;
    }
    for (;;) {
        void *reply = NULL;
        if (redisGetReplyFromReader(ctx, &reply) != REDIS_OK) {
            round_node_error(c, nd, reqs, OUT_PROTO, now);
            return;
        }
        if (!reply || !round_deliver(c, nd, reqs, reply, now))
            return;
    }
}

/*
 * Send every ready request to its node and collect the replies, all nodes at
 * once, until each node answered all, failed, or the deadline passed. Each
 * ready request ends with an outcome.
 */
static void round_exchange(cluster_t *c, request *reqs, size_t n, int64_t deadline)
{
    int64_t now = hf_clock_mono_ms();
    round_build(c, reqs, n, now);
    struct pollfd *fds = hf_xcalloc(c->nnodes, sizeof(*fds));
    int *owner = hf_xcalloc(c->nnodes, sizeof(*owner));
    for (;;) {
        nfds_t nfds = 0;
        int64_t wake = deadline;
        for (size_t i = 0; i < c->nnodes; i++) {
            node *nd = &c->nodes[i];
            if (nd->next == nd->end)
                continue;
            if (nd->connecting && now >= nd->connect_deadline) {
                set_error(c, "%s: connect timed out", nd->addr);
                round_fail_node(c, nd, reqs, OUT_LOST);
                node_mark_down(c, nd, now);
                continue;
            }
            if (nd->connecting && nd->connect_deadline < wake)
                wake = nd->connect_deadline;
            fds[nfds].fd = nd->ctx->fd;
            fds[nfds].events = (short)(POLLIN | (sdslen(nd->ctx->obuf) ? POLLOUT : 0));
            fds[nfds].revents = 0;
            owner[nfds++] = (int)i;
        }
        if (nfds == 0)
            break;
        if (now >= deadline) {
            for (nfds_t f = 0; f < nfds; f++) {
                node *nd = &c->nodes[owner[f]];
                set_error(c, "%s: no reply within %d ms", nd->addr, c->command_timeout_ms);
                round_fail_node(c, nd, reqs, OUT_TIMEOUT);
                nd->errors++;
                node_disconnect(nd); /* the pipeline's position is lost */
                c->want_refresh = true;
            }
            break;
        }
        int ready = poll(fds, nfds, (int)(wake - now));
        if (ready < 0 && errno != EINTR) {
            set_error(c, "poll: %s", strerror(errno));
            deadline = now; /* fail what is owed at the next pass */
        }
        for (nfds_t f = 0; ready > 0 && f < nfds; f++)
            if (fds[f].revents)
                round_io(c, &c->nodes[owner[f]], reqs, fds[f].revents, hf_clock_mono_ms());
        now = hf_clock_mono_ms();
    }
    free(fds);
    free(owner);
}

/* The hello ("Hello", cluster.h) on each node that a ready request goes
 * to and whose connection has not passed it, every such node at once:
 * passed, the node is greeted; judged wrong, it is refused and down (its
 * reconnect wait); no answer, the round's failure already marked it. */
static void round_greet(cluster_t *c, request *reqs, size_t n, int64_t deadline)
{
    const int h = c->hello.hello_n;
    size_t m = 0;
    request *hs = NULL;
    for (size_t i = 0; i < c->nnodes; i++) {
        node *nd = &c->nodes[i];
        bool want = false;
        for (size_t r = 0; r < n && !want; r++)
            want = reqs[r].ready && reqs[r].node == (int)i && before_hello(c, nd, &reqs[r]);
        if (!want || (nd->refused && nd->down && hf_clock_mono_ms() < nd->down_until))
            continue;
        hs = hf_xreallocarray(hs, m + (size_t)h, sizeof *hs);
        for (int k = 0; k < h; k++)
            hs[m++] = (request){.argc = c->hello.hello_argc[k],
                                .argv = (const char **)c->hello.hello_argv[k],
                                .argvlen = c->hello.hello_argvlen[k],
                                .slot = -1,
                                .node = (int)i,
                                .ready = true,
                                .flags = REQ_BEFORE_HELLO};
    }
    if (!m)
        return;
    round_exchange(c, hs, m, deadline);
    for (size_t j = 0; j < m; j += (size_t)h) {
        node *nd = &c->nodes[hs[j].node];
        redisReply *reps[CLUSTER_HELLO_MAX] = {NULL};
        bool all = true;
        for (int k = 0; k < h; k++) {
            all = all && hs[j + (size_t)k].outcome == OUT_REPLY;
            reps[k] = hs[j + (size_t)k].reply;
        }
        if (all && nd->ctx) {
            char why[256] = "";
            int verdict = c->hello.hello_check(c->hello.hello_ctx, reps, nd->addr, why, sizeof why);
            if (verdict == 0) {
                nd->greeted = true;
                nd->refused = false;
            } else {
                set_error(c, "%s", why);
                nd->refused = true;
                nd->refused_code = verdict;
                node_mark_down(c, nd, hf_clock_mono_ms());
            }
        }
        for (int k = 0; k < h; k++)
            if (reps[k])
                freeReplyObject(reps[k]);
    }
    free(hs);
}

/* One round: the hello where it is due, then the requests. */
static void round_run(cluster_t *c, request *reqs, size_t n, int64_t deadline)
{
    if (c->hello.hello_n)
        round_greet(c, reqs, n, deadline);
    round_exchange(c, reqs, n, deadline);
}

/* ---- the slot map ---- */

/* A node entry of CLUSTER SLOTS: [host, port, id, ...]. */
static bool slots_node_valid(const redisReply *e)
{
    return e->type == REDIS_REPLY_ARRAY && e->elements >= 2 &&
           e->element[0]->type == REDIS_REPLY_STRING &&
           e->element[1]->type == REDIS_REPLY_INTEGER && e->element[1]->integer >= 1 &&
           e->element[1]->integer <= 65535;
}

/* A CLUSTER SLOTS reply: [[first slot, last slot, primary, replica...]...]. */
static bool slots_reply_valid(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return false;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *range = r->element[i];
        if (range->type != REDIS_REPLY_ARRAY || range->elements < 3 ||
            range->element[0]->type != REDIS_REPLY_INTEGER ||
            range->element[1]->type != REDIS_REPLY_INTEGER || range->element[0]->integer < 0 ||
            range->element[1]->integer >= CLUSTER_SLOTS ||
            range->element[0]->integer > range->element[1]->integer)
            return false;
        for (size_t k = 2; k < range->elements; k++)
            if (!slots_node_valid(range->element[k]))
                return false;
    }
    return true;
}

/* The known node of a valid entry; an empty or "?" host (Redis does not
 * know its own address) is the host of the node that answered. */
static int slots_node(cluster_t *c, size_t from, const redisReply *e)
{
    const char *host = e->element[0]->str;
    size_t hostlen = e->element[0]->len;
    if (hostlen == 0 || (hostlen == 1 && host[0] == '?')) {
        host = c->nodes[from].host; /* its own allocation: stays put if nodes grow */
        hostlen = strlen(host);
    }
    return node_intern(c, host, hostlen, (int)e->element[1]->integer);
}

/* Install the map of a CLUSTER SLOTS reply given by node `from`. */
static int map_apply(cluster_t *c, size_t from, const redisReply *r)
{
    int16_t map[CLUSTER_SLOTS];
    if (!slots_reply_valid(r))
        return -1;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        map[s] = -1;
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i].replica = false;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *range = r->element[i];
        int primary = slots_node(c, from, range->element[2]);
        if (primary < 0)
            return -1;
        for (long long s = range->element[0]->integer; s <= range->element[1]->integer; s++)
            map[s] = (int16_t)primary;
        for (size_t k = 3; k < range->elements; k++) {
            int replica = slots_node(c, from, range->element[k]);
            if (replica < 0)
                return -1;
            c->nodes[replica].replica = true;
        }
    }
    memcpy(c->slot_map, map, sizeof(map));
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i].slots = 0;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        if (map[s] >= 0)
            c->nodes[map[s]].slots++;
    for (size_t i = 0; i < c->nnodes; i++) {
        node *nd = &c->nodes[i];
        nd->primary = nd->slots > 0;
        if (nd->primary)
            nd->replica = false;
        if (!nd->primary && !nd->replica)
            node_disconnect(nd); /* left the cluster, or a seed under another name */
    }
    return 0;
}

/* Why a CLUSTER SLOTS error reply is not worth asking another node. */
static int refresh_refusal(const redisReply *r)
{
    if (r->type != REDIS_REPLY_ERROR)
        return CLUSTER_EPROTO;
    if (cluster_error_is_auth(r->str))
        return CLUSTER_EAUTH;
    return CLUSTER_EPROTO; /* e.g. "ERR This instance has cluster support disabled" */
}

/*
 * Load the slot map from the first known node that answers: the nodes not
 * down first, starting at refresh_next, then the down ones. Sets the next
 * refresh's earliest time (backoff).
 */
static int map_refresh(cluster_t *c, int64_t deadline)
{
    static const char *argv[2] = {"CLUSTER", "SLOTS"};
    static const size_t argvlen[2] = {7, 5};
    int64_t now = hf_clock_mono_ms();
    if (now >= deadline) /* no time to ask: the refresh stays due */
        return CLUSTER_ETIMEOUT;
    c->want_refresh = false;
    c->refresh_not_before = now + c->refresh_wait_ms;
    c->refresh_wait_ms = min_int(2 * c->refresh_wait_ms, REFRESH_MAX_MS);
    int err = CLUSTER_EUNREACHABLE;
    size_t count = c->nnodes; /* nodes learnt meanwhile wait for the next refresh */
    size_t asked = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t k = 0; k < count && hf_clock_mono_ms() < deadline; k++) {
            size_t i = (c->refresh_next + k) % count;
            const node *nd = &c->nodes[i];
            if (nd->down != (pass == 1) || (nd->down && hf_clock_mono_ms() < nd->down_until))
                continue;
            asked++;
            request rq = {.argc = 2,
                          .argv = argv,
                          .argvlen = argvlen,
                          .slot = -1,
                          .node = (int)i,
                          .ready = true,
                          .flags = REQ_BEFORE_HELLO};
            round_exchange(c, &rq, 1, deadline);
            if (rq.outcome == OUT_AUTH) {
                err = CLUSTER_EAUTH;
                goto failed;
            }
            if (rq.outcome != OUT_REPLY)
                continue;
            if (map_apply(c, i, rq.reply) == 0) {
                freeReplyObject(rq.reply);
                c->stats.refreshes++;
                c->refresh_next = (i + 1) % count;
                return CLUSTER_OK;
            }
            err = refresh_refusal(rq.reply);
            if (rq.reply->type == REDIS_REPLY_ERROR)
                set_error(c, "%s: CLUSTER SLOTS: %s", c->nodes[i].addr, rq.reply->str);
            else
                set_error(c, "%s: CLUSTER SLOTS: unexpected answer", c->nodes[i].addr);
            freeReplyObject(rq.reply);
            if (err == CLUSTER_EAUTH)
                goto failed;
        }
    }
    if (asked == 0)
        set_error(c, "every known node is down (%s: %s)", c->nodes[0].addr, c->nodes[0].why);
failed:
    c->stats.refresh_failures++;
    c->want_refresh = true;
    return err;
}

/* ---- batches ---- */

static bool reply_is(const redisReply *r, const char *prefix)
{
    size_t n = strlen(prefix);
    return r->len >= n && memcmp(r->str, prefix, n) == 0 && (r->len == n || r->str[n] == ' ');
}

cluster_reply_kind cluster_reply_kind_of(const redisReply *r)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return CLUSTER_REPLY_ANSWER;
    if (reply_is(r, "MOVED"))
        return CLUSTER_REPLY_MOVED;
    if (reply_is(r, "ASK"))
        return CLUSTER_REPLY_ASK;
    if (reply_is(r, "TRYAGAIN") || reply_is(r, "LOADING"))
        return CLUSTER_REPLY_BUSY;
    if (reply_is(r, "CLUSTERDOWN"))
        return CLUSTER_REPLY_DOWN;
    return CLUSTER_REPLY_ANSWER;
}

/* "MOVED|ASK <slot> <host>:<port>" -> the target node (interned); -1 if bad.
 * An empty host means the host of the node that answered. */
static int redirect_target(cluster_t *c, size_t from, const redisReply *r)
{
    const char *sp = memchr(r->str, ' ', r->len);
    const char *end = r->str + r->len;
    sp = sp ? memchr(sp + 1, ' ', (size_t)(end - sp - 1)) : NULL;
    if (!sp)
        return -1;
    hf_hostport hp;
    if (hf_hostport_parse(sp + 1, (size_t)(end - sp - 1), NODE_ADDR | HF_HOSTPORT_EMPTY_HOST,
                          &hp) != 0)
        return -1;
    if (hp.host_len == 0) { /* its own allocation: stays put if nodes grow */
        hp.host = c->nodes[from].host;
        hp.host_len = strlen(hp.host);
    }
    return node_intern(c, hp.host, hp.host_len, hp.port);
}

static void request_finish(request *rq, cluster_cmd *cmd, int error)
{
    rq->done = true;
    cmd->error = error;
    cmd->reply = NULL;
    if (error == CLUSTER_OK) {
        cmd->reply = rq->reply;
        rq->reply = NULL;
    } else if (rq->reply) {
        freeReplyObject(rq->reply);
        rq->reply = NULL;
    }
}

/*
 * Sort the outcome of one request after a round. Returns whether it waits
 * for a pause before its next try; marks trouble (a redirect, a retry or a
 * failure) in *trouble.
 */
static bool request_settle(cluster_t *c, request *rq, cluster_cmd *cmd, bool *trouble)
{
    size_t from = (size_t)rq->node;
    node *nd = &c->nodes[from]; /* until a node is interned: nodes may move */
    enum outcome out = rq->outcome;
    rq->outcome = OUT_NONE;
    rq->asking = false;
    bool raw = rq->slot < 0;
    if (out != OUT_REPLY)
        *trouble = true;
    switch (out) {
    case OUT_NONE: return false;
    case OUT_UNSENT:
        rq->error = CLUSTER_EUNREACHABLE;
        if (raw)
            request_finish(rq, cmd, rq->error);
        return !raw;
    case OUT_LOST:
        rq->error = CLUSTER_ECONN;
        if (raw || !(rq->flags & CLUSTER_CMD_IDEMPOTENT))
            request_finish(rq, cmd, rq->error);
        return !rq->done;
    case OUT_TIMEOUT: request_finish(rq, cmd, CLUSTER_ETIMEOUT); return false;
    case OUT_AUTH: request_finish(rq, cmd, CLUSTER_EAUTH); return false;
    case OUT_NOMEM: request_finish(rq, cmd, CLUSTER_ENOMEM); return false;
    case OUT_PROTO: request_finish(rq, cmd, CLUSTER_EPROTO); return false;
    case OUT_REFUSED: request_finish(rq, cmd, CLUSTER_EREFUSED); return false;
    case OUT_REPLY: break;
    }
    redisReply *r = rq->reply;
    cluster_reply_kind kind = raw ? CLUSTER_REPLY_ANSWER : cluster_reply_kind_of(r);
    if (kind == CLUSTER_REPLY_ANSWER) { /* an answer, if an error one */
        request_finish(rq, cmd, CLUSTER_OK);
        return false;
    }
    bool moved = kind == CLUSTER_REPLY_MOVED, ask = kind == CLUSTER_REPLY_ASK;
    if (moved || ask) {
        *trouble = true;
        if (moved)
            nd->moved++;
        else
            nd->ask++;
        int target = redirect_target(c, from, r);
        nd = &c->nodes[from];
        if (target < 0) {
            set_error(c, "%s: unparsable redirect: %.*s", nd->addr, (int)r->len, r->str);
            request_finish(rq, cmd, CLUSTER_EPROTO);
            return false;
        }
        if (++rq->redirects > CLUSTER_MAX_REDIRECTS) {
            set_error(c, "%s: %d redirects for slot %d, the last: %.*s", nd->addr, rq->redirects,
                      rq->slot, (int)r->len, r->str);
            request_finish(rq, cmd, CLUSTER_EREDIRECT);
            return false;
        }
        freeReplyObject(r);
        rq->reply = NULL;
        if (moved) {
            c->slot_map[rq->slot] = (int16_t)target;
            c->want_refresh = true;
        }
        rq->asking = ask;
        rq->node = target;
        return false;
    }
    *trouble = true; /* TRYAGAIN, LOADING or CLUSTERDOWN: again after a pause */
    nd->retries++;
    rq->error = kind == CLUSTER_REPLY_BUSY ? CLUSTER_ETRYAGAIN : CLUSTER_EDOWN;
    set_error(c, "%s: %.*s", nd->addr, (int)r->len, r->str);
    freeReplyObject(r);
    rq->reply = NULL;
    return true;
}

/* Point the request at the node that serves its slot, unless an ASK
 * redirect or a raw node chose. False when no node serves the slot. */
static bool request_route(cluster_t *c, request *rq)
{
    if (rq->slot < 0 || rq->asking)
        return true;
    int target = c->slot_map[rq->slot];
    if (target < 0) {
        rq->error = CLUSTER_EDOWN;
        set_error(c, "slot %d is served by no node", rq->slot);
        c->want_refresh = true;
        return false;
    }
    rq->node = target;
    return true;
}

/* Validate the batch and load it into c->requests. */
static void batch_load(cluster_t *c, cluster_cmd *cmds, size_t n)
{
    if (n > c->request_cap) {
        c->request_cap = n;
        c->requests = hf_xreallocarray(c->requests, n, sizeof(request));
    }
    for (size_t i = 0; i < n; i++) {
        cluster_cmd *cmd = &cmds[i];
        request *rq = &c->requests[i];
        memset(rq, 0, sizeof(*rq));
        rq->argc = cmd->argc;
        rq->argv = cmd->argv;
        rq->argvlen = cmd->argvlen;
        rq->slot = cmd->slot;
        rq->node = cmd->slot < 0 ? cmd->node : -1;
        rq->flags = cmd->flags & ~REQ_BEFORE_HELLO;
        rq->error = CLUSTER_ETIMEOUT;
        cmd->reply = NULL;
        cmd->error = CLUSTER_OK;
        bool valid = cmd->argc > 0 && cmd->argv && cmd->slot < CLUSTER_SLOTS &&
                     (cmd->slot >= 0 || (cmd->node >= 0 && (size_t)cmd->node < c->nnodes));
        if (!valid) {
            set_error(c, "command %zu: bad arguments", i);
            request_finish(rq, cmd, CLUSTER_EINVAL);
        }
    }
}

int cluster_exec(cluster_t *c, cluster_cmd *cmds, size_t n)
{
    int64_t deadline = hf_clock_mono_ms() + c->command_timeout_ms;
    int pause = PAUSE_MIN_MS;
    bool trouble = false;
    batch_load(c, cmds, n);
    for (;;) {
        if (c->want_refresh && hf_clock_mono_ms() >= c->refresh_not_before)
            map_refresh(c, deadline);
        size_t pending = 0, ready = 0;
        for (size_t i = 0; i < n; i++) {
            request *rq = &c->requests[i];
            if (rq->done)
                continue;
            pending++;
            rq->ready = request_route(c, rq);
            ready += rq->ready;
        }
        if (pending == 0)
            break;
        int64_t now = hf_clock_mono_ms();
        if (now >= deadline) { /* each fails with the error that kept it */
            for (size_t i = 0; i < n; i++)
                if (!c->requests[i].done)
                    request_finish(&c->requests[i], &cmds[i], c->requests[i].error);
            break;
        }
        if (ready) {
            c->stats.rounds++;
            round_run(c, c->requests, n, deadline);
        }
        bool wait = ready < pending;
        for (size_t i = 0; i < n; i++) {
            request *rq = &c->requests[i];
            if (rq->ready && !rq->done)
                wait |= request_settle(c, rq, &cmds[i], &trouble);
            rq->ready = false;
        }
        trouble |= wait;
        if (wait) { /* until the pause ends, or a refresh is due */
            now = hf_clock_mono_ms();
            int64_t wake = now + pause;
            if (c->want_refresh && c->refresh_not_before > now && c->refresh_not_before < wake)
                wake = c->refresh_not_before;
            sleep_ms((wake < deadline ? wake : deadline) - now);
            pause = min_int(2 * pause, PAUSE_MAX_MS);
        }
    }
    if (!trouble)
        c->refresh_wait_ms = REFRESH_MIN_MS;
    for (size_t i = 0; i < n; i++)
        if (cmds[i].error != CLUSTER_OK)
            return cmds[i].error;
    return CLUSTER_OK;
}

redisReply *cluster_command(cluster_t *c, const void *key, size_t keylen, int argc,
                            const char **argv, const size_t *argvlen, int *error)
{
    cluster_cmd cmd = {
        .argc = argc, .argv = argv, .argvlen = argvlen, .slot = cluster_key_slot(key, keylen)};
    *error = cluster_exec(c, &cmd, 1);
    return cmd.reply;
}

/* ---- open, close, figures ---- */

static char *dup_or_null(const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    return memcpy(hf_xmalloc(n), s, n);
}

static int parse_seeds(cluster_t *c, const char *seeds)
{
    const char *p = seeds;
    while (p && *p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        hf_hostport hp;
        if (hf_hostport_parse(p, len, NODE_ADDR, &hp) != 0 ||
            node_intern(c, hp.host, hp.host_len, hp.port) < 0)
            return -1;
        p = comma ? comma + 1 : NULL;
    }
    return c->nnodes ? 0 : -1;
}

int cluster_open(const cluster_options *opt, cluster_t **out, char *err, size_t errlen)
{
    *out = NULL;
    cluster_t *c = hf_xcalloc(1, sizeof(*c));
    c->user = dup_or_null(opt->user);
    c->password = dup_or_null(opt->password);
    HF_ASSERT(opt->hello_n >= 0 && opt->hello_n <= CLUSTER_HELLO_MAX &&
              (!opt->hello_n || opt->hello_check));
    c->hello = *opt;
    c->connect_timeout_ms = opt->connect_timeout_ms > 0 ? opt->connect_timeout_ms
                                                        : DEFAULT_TIMEOUT_MS;
    c->command_timeout_ms = opt->command_timeout_ms > 0 ? opt->command_timeout_ms
                                                        : DEFAULT_TIMEOUT_MS;
    c->refresh_wait_ms = REFRESH_MIN_MS;
    for (int s = 0; s < CLUSTER_SLOTS; s++)
        c->slot_map[s] = -1;
    int rc = CLUSTER_EINVAL;
    if (!opt->seeds || parse_seeds(c, opt->seeds) != 0)
        set_error(c, "bad seed nodes \"%s\" (want host:port[,host:port...])",
                  opt->seeds ? opt->seeds : "");
    else
        rc = map_refresh(c, hf_clock_mono_ms() + c->command_timeout_ms);
    if (rc != CLUSTER_OK) {
        snprintf(err, errlen, "%s", c->error);
        cluster_close(c);
        return rc;
    }
    c->refresh_wait_ms = REFRESH_MIN_MS;
    c->refresh_not_before = 0;
    *out = c;
    return CLUSTER_OK;
}

void cluster_close(cluster_t *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nnodes; i++) {
        node_disconnect(&c->nodes[i]);
        free(c->nodes[i].host);
    }
    free(c->nodes);
    free(c->requests);
    free(c->expects);
    hf_buf_free(&c->fmt);
    free(c->user);
    free(c->password);
    free(c);
}

const char *cluster_strerror(int err)
{
    switch (err) {
    case CLUSTER_OK: return "ok";
    case CLUSTER_EINVAL: return "invalid argument";
    case CLUSTER_EUNREACHABLE: return "node unreachable";
    case CLUSTER_ETIMEOUT: return "timed out";
    case CLUSTER_ECONN: return "connection lost";
    case CLUSTER_EDOWN: return "cluster down";
    case CLUSTER_ETRYAGAIN: return "try again";
    case CLUSTER_EREDIRECT: return "too many redirects";
    case CLUSTER_EAUTH: return "authentication failed";
    case CLUSTER_EPROTO: return "protocol error";
    case CLUSTER_ENOMEM: return "out of memory";
    case CLUSTER_EREFUSED: return "the node failed the hello";
    default: return "unknown error";
    }
}

const char *cluster_last_error(const cluster_t *c)
{
    return c->error;
}

size_t cluster_node_count(const cluster_t *c)
{
    return c->nnodes;
}

void cluster_get_node_stats(const cluster_t *c, size_t i, cluster_node_stats *out)
{
    const node *nd = &c->nodes[i];
    memset(out, 0, sizeof(*out));
    snprintf(out->addr, sizeof(out->addr), "%s", nd->addr);
    out->primary = nd->primary;
    out->replica = nd->replica;
    out->connected = nd->ctx != NULL;
    out->down = nd->down;
    out->slots = nd->slots;
    out->requests = nd->requests;
    out->moved = nd->moved;
    out->ask = nd->ask;
    out->retries = nd->retries;
    out->errors = nd->errors;
    out->connects = nd->connects;
    if (nd->refused) {
        snprintf(out->refused, sizeof(out->refused), "%s", nd->why);
        out->refused_code = nd->refused_code;
    }
}

void cluster_get_stats(const cluster_t *c, cluster_stats *out)
{
    *out = c->stats;
    out->nodes = c->nnodes;
}

int cluster_slot_node(const cluster_t *c, int slot)
{
    return slot >= 0 && slot < CLUSTER_SLOTS ? c->slot_map[slot] : -1;
}
