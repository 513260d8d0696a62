/*
 * batch.c: a batch of the cluster client, cluster_exec() ("Batches" and
 * "Redirects and retries" in cluster.h): each command routed by its slot,
 * rounds (round.c) until every command has its outcome: an answer, a
 * redirect followed at once, a retry after a pause, or a failure; the
 * deadline fails what is left with the error that kept it.
 */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

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
    return cluster__node_intern(c, hp.host, hp.host_len, hp.port);
}

static void request_finish(request *rq, cluster_cmd *cmd, int error)
{
    /* a request ends once, with its reply only when it succeeded */
    HF_ASSERT(!rq->done && (error != CLUSTER_OK || rq->reply));
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
            cluster__set_error(c, "%s: unparsable redirect: %.*s", nd->addr, (int)r->len, r->str);
            request_finish(rq, cmd, CLUSTER_EPROTO);
            return false;
        }
        if (++rq->redirects > CLUSTER_MAX_REDIRECTS) {
            cluster__set_error(c, "%s: %d redirects for slot %d, the last: %.*s", nd->addr,
                               rq->redirects, rq->slot, (int)r->len, r->str);
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
    cluster__set_error(c, "%s: %.*s", nd->addr, (int)r->len, r->str);
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
        cluster__set_error(c, "slot %d is served by no node", rq->slot);
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
            cluster__set_error(c, "command %zu: bad arguments", i);
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
            cluster__map_refresh(c, deadline);
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
            cluster__round_run(c, c->requests, n, deadline);
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
            hf_sleep_ms((wake < deadline ? wake : deadline) - now);
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
