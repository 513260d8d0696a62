/*
 * round.c: the connections of the cluster client and one round of a batch
 * (cluster_internal.h says which file holds what; cluster.h the rules).
 *
 * A batch runs in rounds. A round takes the requests that are ready, groups
 * them by node, appends each group to its node's hiredis output buffer
 * (AUTH first on a new connection, ASKING before an ASK-redirected command),
 * then one poll loop writes every buffer and reads every reply of every node
 * until all have answered, failed or the deadline passed. Each expected reply
 * remembers where its command starts in the node's pipeline, so when a
 * connection fails we know which commands certainly did not go out (their
 * first byte was never written) and may be resent anywhere. After the round,
 * cluster_exec() (batch.c) sorts the outcomes: answers, redirects (resent at once),
 * retryable errors (resent after a pause) and failures.
 *
 * Contexts are hiredis non-blocking contexts (redisConnectNonBlock): we do
 * the I/O with redisBufferWrite/redisBufferRead and take replies with
 * redisGetReplyFromReader, so hiredis never blocks and never polls itself.
 *
 * A node has at most one connection, opened on first use; one that cannot
 * be opened or breaks marks the node down (node_mark_down: reconnects wait,
 * doubling) and asks for a map refresh. With a hello set, a new connection
 * carries the hello in a round of its own (round_greet) before any command.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/resp.h"
#include "util/xalloc.h"

/* ---- connections ---- */

void cluster__node_disconnect(node *nd)
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
    /* the back-off doubles within its bounds; a node that answers
     * starts it again from the least (round_deliver) */
    HF_ASSERT(nd->down_wait_ms >= DOWN_MIN_MS && nd->down_wait_ms <= DOWN_MAX_MS);
    nd->down = true;
    nd->down_until = now + nd->down_wait_ms;
    nd->down_wait_ms = min_int(2 * nd->down_wait_ms, DOWN_MAX_MS);
    cluster__node_disconnect(nd);
    HF_ASSERT(!nd->ctx && !nd->greeted);
    c->want_refresh = true;
}

/* Open the node's connection if it has none. False (with c->error) when it
 * is down or the connection cannot even be started. */
static bool node_connect(cluster_t *c, node *nd, int64_t now)
{
    if (nd->ctx)
        return true;
    if (nd->down && now < nd->down_until) {
        cluster__set_error(c, "%s is down, reconnecting in %lld ms (%s)", nd->addr,
                           (long long)(nd->down_until - now), nd->why);
        return false;
    }
    redisContext *ctx = redisConnectNonBlock(nd->host, nd->port);
    if (!ctx || ctx->err) {
        cluster__set_error(c, "%s: %s", nd->addr, ctx ? ctx->errstr : "out of memory");
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
    cluster__set_error(c, "%s: %s", nd->addr,
                       nd->ctx && nd->ctx->errstr[0] ? nd->ctx->errstr : "connection failed");
    round_fail_node(c, nd, reqs, sent);
    node_mark_down(c, nd, now);
}

/* Take one reply owed by the node. False when the node's round is over. */
static bool round_deliver(cluster_t *c, node *nd, request *reqs, redisReply *r, int64_t now)
{
    /* a reply comes only where one is owed, and answers a request once
     * (queued as UNSENT by round_build) */
    HF_ASSERT(nd->next >= nd->first && nd->next < nd->end);
    expect *x = &c->expects[nd->next++];
    HF_ASSERT(x->kind != EXP_REQUEST || reqs[x->request].outcome == OUT_UNSENT);
    nd->down = false; /* it answers */
    nd->down_wait_ms = DOWN_MIN_MS;
    switch (x->kind) {
    case EXP_AUTH:
        if (r->type == REDIS_REPLY_ERROR) {
            cluster__set_error(c, "%s: AUTH refused: %.*s", nd->addr, (int)r->len, r->str);
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
                cluster__set_error(c, "%s: out of memory", nd->addr);
                rq->outcome = OUT_NOMEM;
            }
        }
        if (!ok && nd->ctx) { /* a pipeline that lacks a command is never sent */
            cluster__node_disconnect(nd);
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
void cluster__round_exchange(cluster_t *c, request *reqs, size_t n, int64_t deadline)
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
                cluster__set_error(c, "%s: connect timed out", nd->addr);
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
                cluster__set_error(c, "%s: no reply within %d ms", nd->addr, c->command_timeout_ms);
                round_fail_node(c, nd, reqs, OUT_TIMEOUT);
                nd->errors++;
                cluster__node_disconnect(nd); /* the pipeline's position is lost */
                c->want_refresh = true;
            }
            break;
        }
        int ready = poll(fds, nfds, (int)(wake - now));
        if (ready < 0 && errno != EINTR) {
            cluster__set_error(c, "poll: %s", strerror(errno));
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
    cluster__round_exchange(c, hs, m, deadline);
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
                cluster__set_error(c, "%s", why);
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
void cluster__round_run(cluster_t *c, request *reqs, size_t n, int64_t deadline)
{
    if (c->hello.hello_n)
        round_greet(c, reqs, n, deadline);
    cluster__round_exchange(c, reqs, n, deadline);
}
