/*
 * cluster.c: the handle of the cluster client (cluster.h, whose head comment
 * is the specification): the known nodes, the slot map and its refresh
 * ("Map refresh, with backoff"), open, close and the figures. A batch runs
 * in batch.c, its rounds and the connections in round.c
 * (cluster_internal.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_internal.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/slot.h"
#include "util/xalloc.h"

void cluster__set_error(cluster_t *c, const char *fmt, ...)
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

int cluster__node_intern(cluster_t *c, const char *host, size_t hostlen, int port)
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
    return cluster__node_intern(c, host, hostlen, (int)e->element[1]->integer);
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
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        /* every slot served names a known node */
        HF_ASSERT(map[s] >= -1 && map[s] < (int)c->nnodes);
        if (map[s] >= 0)
            c->nodes[map[s]].slots++;
    }
    for (size_t i = 0; i < c->nnodes; i++) {
        node *nd = &c->nodes[i];
        nd->primary = nd->slots > 0;
        if (nd->primary)
            nd->replica = false;
        if (!nd->primary && !nd->replica)
            cluster__node_disconnect(nd); /* left the cluster, or a seed under another name */
        /* one role a node: a primary serves slots, a replica none */
        HF_ASSERT(!(nd->primary && nd->replica) && nd->primary == (nd->slots > 0));
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
int cluster__map_refresh(cluster_t *c, int64_t deadline)
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
            cluster__round_exchange(c, &rq, 1, deadline);
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
                cluster__set_error(c, "%s: CLUSTER SLOTS: %s", c->nodes[i].addr, rq.reply->str);
            else
                cluster__set_error(c, "%s: CLUSTER SLOTS: unexpected answer", c->nodes[i].addr);
            freeReplyObject(rq.reply);
            if (err == CLUSTER_EAUTH)
                goto failed;
        }
    }
    if (asked == 0)
        cluster__set_error(c, "every known node is down (%s: %s)", c->nodes[0].addr,
                           c->nodes[0].why);
failed:
    c->stats.refresh_failures++;
    c->want_refresh = true;
    return err;
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
            cluster__node_intern(c, hp.host, hp.host_len, hp.port) < 0)
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
        cluster__set_error(c, "bad seed nodes \"%s\" (want host:port[,host:port...])",
                           opt->seeds ? opt->seeds : "");
    else
        rc = cluster__map_refresh(c, hf_clock_mono_ms() + c->command_timeout_ms);
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
        cluster__node_disconnect(&c->nodes[i]);
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
