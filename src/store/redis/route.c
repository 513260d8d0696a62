/*
 * route.c: the link over a Redis Cluster (link.h "A Redis Cluster"): the
 * pool of routing handles of src/cluster/cluster.h and their figures, the
 * slot map the pipes are chosen by, the fast path (each command on a pipe
 * of its slot's primary, what the pipes cannot settle through a handle),
 * the cluster's probe and monitor.
 */
#include "store/redis/link_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "util/clock.h"
#include "util/hostport.h"
#include "util/log.h"
#include "util/xalloc.h"
#include "util/hf_assert.h"

/* ------------------------------------------------------ Redis Cluster */

/* What a handle's nodes did since it was last folded, added to the
 * link's per-node figures (by address: handles number nodes alike only
 * by chance); the node's flags and slots as this handle sees them. */
void link__cl_fold(redis_link *r, conn *c)
{
    size_t n = cluster_node_count(c->cl);
    if (n > c->nseen) {
        c->seen = hf_xreallocarray(c->seen, n, sizeof *c->seen);
        memset(c->seen + c->nseen, 0, (n - c->nseen) * sizeof *c->seen);
        c->nseen = n;
    }
    cluster_stats t;
    cluster_get_stats(c->cl, &t);
    hf_mutex_lock(&r->lock);
    r->cl_refreshes += t.refreshes - c->seen_totals.refreshes;
    r->cl_refresh_failures += t.refresh_failures - c->seen_totals.refresh_failures;
    r->cl_rounds += t.rounds - c->seen_totals.rounds;
    c->seen_totals = t;
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        node_fig *f = NULL;
        for (size_t j = 0; j < r->nfigs && !f; j++)
            if (strcmp(r->figs[j].s.addr, ns.addr) == 0)
                f = &r->figs[j];
        if (!f) {
            r->figs = hf_xreallocarray(r->figs, r->nfigs + 1, sizeof *r->figs);
            f = &r->figs[r->nfigs++];
            memset(f, 0, sizeof *f);
            memcpy(f->s.addr, ns.addr, sizeof ns.addr);
        }
        const cluster_node_stats *o = &c->seen[i];
        f->s.requests += ns.requests - o->requests;
        f->s.moved += ns.moved - o->moved;
        f->s.ask += ns.ask - o->ask;
        f->s.retries += ns.retries - o->retries;
        f->s.errors += ns.errors - o->errors;
        f->s.connects += ns.connects - o->connects;
        f->s.primary = ns.primary;
        f->s.replica = ns.replica;
        f->s.down = ns.down;
        f->s.slots = ns.slots;
        c->seen[i] = ns;
    }
    hf_mutex_unlock(&r->lock);
}

conn *link__cl_open(redis_link *r, int *code, char *err, size_t errlen)
{
    cluster_t *cl;
    int rc = cluster_open(&r->copt, &cl, err, errlen);
    if (rc != CLUSTER_OK) {
        *code = rc == CLUSTER_EAUTH                            ? STORE_EAUTH
                : rc == CLUSTER_EINVAL || rc == CLUSTER_EPROTO ? STORE_ECONFIG
                                                               : STORE_EUNREACHABLE;
        return NULL;
    }
    conn *c = hf_xcalloc(1, sizeof *c);
    c->cl = cl;
    return c;
}

void link__cl_free(conn *c)
{
    cluster_close(c->cl);
    free(c->seen);
    free(c);
}

conn *link__cl_borrow(redis_link *r)
{
    hf_mutex_lock(&r->lock);
    conn *c = r->idle;
    if (c)
        r->idle = c->next;
    hf_mutex_unlock(&r->lock);
    if (c)
        return c;
    char err[512];
    int code;
    c = link__cl_open(r, &code, err, sizeof err);
    if (!c)
        log_msg(LOG_WARN, "Redis Cluster: %s", err);
    return c;
}

void link__cl_give_back(redis_link *r, conn *c)
{
    link__cl_fold(r, c);
    hf_mutex_lock(&r->lock);
    c->next = r->idle;
    r->idle = c;
    hf_mutex_unlock(&r->lock);
}

/* The primaries of the handle's map, as commands of argv to each (*m). */
redis_cmd *link__cl_primaries(conn *c, int argc, const char **argv, const size_t *lens, size_t *m)
{
    size_t n = cluster_node_count(c->cl);
    redis_cmd *cmds = hf_xcalloc(n ? n : 1, sizeof *cmds);
    *m = 0;
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (!ns.primary)
            continue;
        redis_cmd *d = &cmds[(*m)++];
        *d = (redis_cmd){.argc = argc,
                         .argv = argv,
                         .argvlen = lens,
                         .slot = -1,
                         .node = (int)i,
                         .code = STORE_EUNAVAILABLE};
        snprintf(d->addr, sizeof d->addr, "%s", ns.addr);
    }
    return cmds;
}

static uint16_t node_find(const redis_link *r, const char *addr);
static uint16_t node_index(redis_link *r, const char *addr);

node_link *link__cl_node_link(redis_link *r, conn *c, int slot, int node, bool add)
{
    int k = slot >= 0 ? cluster_slot_node(c->cl, slot) : node;
    if (k < 0 || (size_t)k >= cluster_node_count(c->cl))
        return NULL;
    cluster_node_stats ns;
    cluster_get_node_stats(c->cl, (size_t)k, &ns);
    if (add)
        hf_rwlock_wrlock(&r->map_lock);
    else
        hf_rwlock_rdlock(&r->map_lock);
    uint16_t i = add ? node_index(r, ns.addr) : node_find(r, ns.addr);
    node_link *nl = i == NO_NODE ? NULL : r->nodes[i];
    hf_rwlock_unlock(&r->map_lock);
    return nl;
}

/* The answers of link__demoted_kept within one call, one per node asked. */
typedef struct refusals {
    struct refusal {
        const node_link *nl;
        bool kept;
    } * seen;
    size_t n;
} refusals;

/* Whether the changes on the handle's node for slot (or node) whose WAIT it
 * refused are kept (link__demoted_kept), asked once per node of a call. */
static bool refused_kept(redis_link *r, conn *c, int slot, int node, unsigned want, refusals *f)
{
    node_link *nl = link__cl_node_link(r, c, slot, node, true);
    if (!nl)
        return false;
    for (size_t i = 0; i < f->n; i++)
        if (f->seen[i].nl == nl)
            return f->seen[i].kept;
    f->seen = hf_xreallocarray(f->seen, f->n + 1, sizeof *f->seen);
    f->seen[f->n] = (struct refusal){nl, link__demoted_kept(r, nl, want)};
    return f->seen[f->n++].kept;
}

/* After a redirected batch: WAIT on every primary whose changes wait (the
 * changes ran on the nodes the redirects named, maybe not where their
 * WAITs went). A node that refuses it (a primary of the handle's map that
 * turned replica since) has kept what it applied if link__demoted_kept
 * says so. */
static bool cl_wait_all(redis_link *r, conn *c)
{
    atomic_fetch_add(&r->cl_rewaits, 1);
    wait_cmd wc;
    link__wait_cmd(r, &wc);
    size_t m, k = 0;
    redis_cmd *p = link__cl_primaries(c, 3, wc.argv, wc.lens, &m);
    cluster_cmd *cmds = hf_xcalloc(m ? m : 1, sizeof *cmds);
    for (size_t i = 0; i < m; i++)
        if (link__wait_at(r, c, -1, p[i].node) > 0)
            cmds[k++] = (cluster_cmd){.argc = 3,
                                      .argv = wc.argv,
                                      .argvlen = wc.lens,
                                      .slot = -1,
                                      .node = p[i].node,
                                      .flags = CLUSTER_CMD_IDEMPOTENT};
    cluster_exec(c->cl, cmds, k);
    refusals f = {0};
    bool ok = true;
    for (size_t i = 0; i < k; i++) {
        const redisReply *rep = cmds[i].reply;
        if (rep && rep->type == REDIS_REPLY_ERROR)
            ok = ok && refused_kept(r, c, -1, cmds[i].node, wc.want, &f);
        else if (!rep || rep->type != REDIS_REPLY_INTEGER || rep->integer < (long long)wc.want)
            ok = false;
        if (cmds[i].reply)
            freeReplyObject(cmds[i].reply);
    }
    free(f.seen);
    free(cmds);
    free(p);
    return ok;
}

/*
 * Run n commands at once on the handle c (one round trip per node, the
 * nodes in parallel), each to the node of its slot (or its node). For a
 * change on a primary whose changes wait (--redis-wait) each command is
 * followed by a WAIT in the same round trip on its node; when the batch
 * was redirected or retried, its WAITs may have gone elsewhere than its
 * commands, so a WAIT then goes to every such primary.
 */
void link__cl_exec(redis_link *r, conn *c, redis_cmd *cmds, size_t n, bool change)
{
    wait_cmd wc;
    link__wait_cmd(r, &wc);
    cluster_cmd *batch = hf_xcalloc(2 * (n ? n : 1), sizeof *batch);
    bool *waits = hf_xcalloc(n ? n : 1, sizeof *waits);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        batch[m++] = (cluster_cmd){.argc = cmds[i].argc,
                                   .argv = cmds[i].argv,
                                   .argvlen = cmds[i].argvlen,
                                   .slot = cmds[i].slot,
                                   .node = cmds[i].node,
                                   .flags = change ? 0 : CLUSTER_CMD_IDEMPOTENT};
        waits[i] = change && link__wait_at(r, c, cmds[i].slot, cmds[i].node) > 0;
        if (waits[i])
            batch[m++] = (cluster_cmd){.argc = 3,
                                       .argv = wc.argv,
                                       .argvlen = wc.lens,
                                       .slot = cmds[i].slot,
                                       .node = cmds[i].node,
                                       .flags = CLUSTER_CMD_IDEMPOTENT};
    }
    cluster_stats before, after;
    cluster_get_stats(c->cl, &before);
    int64_t t0 = hf_clock_mono_us();
    cluster_exec(c->cl, batch, m);
    link__count_rtt(r, hf_clock_mono_us() - t0);
    cluster_get_stats(c->cl, &after);
    bool redirected = after.rounds - before.rounds > 1;
    bool rewait = false;
    refusals f = {0};
    m = 0;
    for (size_t i = 0; i < n; i++) {
        cluster_cmd *b = &batch[m++];
        cluster_cmd *w = waits[i] ? &batch[m++] : NULL;
        long long acked = -1;
        bool refused = false;
        if (w && w->reply) {
            if (w->reply->type == REDIS_REPLY_INTEGER)
                acked = w->reply->integer;
            refused = w->reply->type == REDIS_REPLY_ERROR;
            freeReplyObject(w->reply);
        }
        if (!b->reply) {
            bool sent = b->error == CLUSTER_ETIMEOUT || b->error == CLUSTER_ECONN;
            atomic_fetch_add(&r->errors, 1);
            cmds[i].code = change && sent ? STORE_EUNCERTAIN : STORE_EUNAVAILABLE;
            if (cmds[i].code == STORE_EUNCERTAIN) {
                atomic_fetch_add(&r->unknown, 1);
                log_msg(LOG_ERROR,
                        "Redis Cluster: %s after a change was sent: its outcome "
                        "is unknown",
                        cluster_last_error(c->cl));
            } else {
                log_msg(LOG_WARN, "Redis Cluster: %s (%s)", cluster_strerror(b->error),
                        cluster_last_error(c->cl));
            }
            continue;
        }
        if (w && !redirected && b->reply->type != REDIS_REPLY_ERROR && acked < (long long)wc.want &&
            !(refused && refused_kept(r, c, cmds[i].slot, cmds[i].node, wc.want, &f))) {
            link__wait_short(r, acked, wc.want);
            freeReplyObject(b->reply);
            cmds[i].code = STORE_EUNCERTAIN;
            continue;
        }
        if (change && wc.want > 0 && redirected)
            rewait = true;
        cmds[i].reply = b->reply;
        cmds[i].code = STORE_OK;
    }
    if (rewait && !cl_wait_all(r, c)) {
        for (size_t i = 0; i < n; i++)
            if (cmds[i].reply && cmds[i].reply->type != REDIS_REPLY_ERROR) {
                link__wait_short(r, -1, wc.want);
                freeReplyObject(cmds[i].reply);
                cmds[i].reply = NULL;
                cmds[i].code = STORE_EUNCERTAIN;
            }
    }
    free(f.seen);
    free(waits);
    free(batch);
}

/* The node_link of a primary's address, added at first sight (map_lock
 * held for writing); NO_NODE if the address does not parse. */
static uint16_t node_find(const redis_link *r, const char *addr)
{
    for (size_t i = 0; i < r->nnodes; i++)
        if (strcmp(r->nodes[i]->addr, addr) == 0)
            return (uint16_t)i;
    return NO_NODE;
}

static uint16_t node_index(redis_link *r, const char *addr)
{
    uint16_t found = node_find(r, addr);
    if (found != NO_NODE)
        return found;
    hf_hostport hp;
    if (r->nnodes >= NO_NODE ||
        hf_hostport_parse(addr, strlen(addr), HF_HOSTPORT_NEED_PORT | HF_HOSTPORT_BARE_V6, &hp) !=
            HF_HOSTPORT_OK)
        return NO_NODE;
    r->nodes = hf_xreallocarray(r->nodes, r->nnodes + 1, sizeof *r->nodes);
    r->nodes[r->nnodes] = link__node_new(r, hp.host, hp.host_len, hp.port, addr);
    return (uint16_t)r->nnodes++;
}

/* A routing handle's slot map, taken for the pipes: each slot to the
 * node_link of its primary. */
void link__cl_map_take(redis_link *r, cluster_t *cl)
{
    size_t n = cluster_node_count(cl);
    uint16_t *of = hf_xcalloc(n ? n : 1, sizeof *of);
    hf_rwlock_wrlock(&r->map_lock);
    for (size_t i = 0; i < n; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(cl, i, &ns);
        of[i] = ns.primary ? node_index(r, ns.addr) : NO_NODE;
    }
    hf_rwlock_unlock(&r->map_lock);
    uint16_t *map = hf_xmalloc(sizeof r->slot_node);
    for (int s = 0; s < CLUSTER_SLOTS; s++) {
        int k = cluster_slot_node(cl, s);
        map[s] = k < 0 || (size_t)k >= n ? NO_NODE : of[k];
    }
    hf_rwlock_wrlock(&r->map_lock);
    memcpy(r->slot_node, map, sizeof r->slot_node);
    r->map_us = hf_clock_mono_us();
    atomic_store(&r->map_stale, false);
    hf_rwlock_unlock(&r->map_lock);
    free(map);
    free(of);
}

/* A reply that says the command ran nowhere (cluster_reply_kind_of), so a
 * routing handle should carry it; counts the node's redirects. */
static bool for_the_handles(node_link *nl, const redisReply *rep)
{
    cluster_reply_kind kind = cluster_reply_kind_of(rep);
    if (kind == CLUSTER_REPLY_MOVED)
        atomic_fetch_add(&nl->moved, 1);
    else if (kind == CLUSTER_REPLY_ASK)
        atomic_fetch_add(&nl->ask, 1);
    return kind != CLUSTER_REPLY_ANSWER;
}

typedef struct slow_job {
    redis_link *r;
    redis_cmd *sub;
    size_t m;
    bool change;
} slow_job;

/* sub through a routing handle, the map taken anew from it when stale. Its
 * I/O blocks (and over a failover retries and waits): off the loop. */
static void slow_on_handle(void *arg)
{
    slow_job *j = arg;
    redis_link *r = j->r;
    conn *c = link__cl_borrow(r);
    if (c) {
        link__cl_exec(r, c, j->sub, j->m, j->change);
        hf_rwlock_rdlock(&r->map_lock);
        bool take = atomic_load(&r->map_stale) && hf_clock_mono_us() - r->map_us > 10000;
        hf_rwlock_unlock(&r->map_lock);
        if (take)
            link__cl_map_take(r, c->cl);
        link__cl_give_back(r, c);
    } else {
        atomic_fetch_add(&r->errors, j->m);
    }
}

/* The commands of cmds marked in slow, through a routing handle (link__cl_exec);
 * the map taken anew from it when stale. */
static void cl_slow_exec(redis_link *r, redis_cmd *cmds, const bool *slow, size_t m, size_t n,
                         bool change)
{
    redis_cmd *sub = hf_xcalloc(m, sizeof *sub);
    for (size_t i = 0, k = 0; i < n; i++)
        if (slow[i])
            sub[k++] = (redis_cmd){.argc = cmds[i].argc,
                                   .argv = cmds[i].argv,
                                   .argvlen = cmds[i].argvlen,
                                   .slot = cmds[i].slot,
                                   .node = cmds[i].node,
                                   .code = STORE_EUNAVAILABLE};
    atomic_fetch_add(&r->cl_by_handles, m);
    slow_job job = {r, sub, m, change};
    hf_fiber_offload(slow_on_handle, &job);
    for (size_t i = 0, k = 0; i < n; i++)
        if (slow[i]) {
            cmds[i].reply = sub[k].reply;
            cmds[i].code = sub[k].code;
            k++;
        }
    free(sub);
}

/*
 * Over a cluster (link.h "A Redis Cluster"): each command on a pipe
 * of the primary that the map gives its slot, every node's share written
 * before any reply is awaited, so that the nodes work at once and the
 * calls of every thread share writes and reads. A routing handle carries
 * what the pipes cannot settle: a command whose slot has no primary in
 * the map or whose node is in its pause; one refused or not sent; a read
 * whose answer was lost; one redirected (MOVED, ASK) or told to retry
 * (TRYAGAIN, CLUSTERDOWN, LOADING), which ran nowhere. A change sent and
 * not answered is STORE_EUNCERTAIN here, as in link__cl_exec.
 */
/* The commands of one call that go to one node's pipes. */
typedef struct group {
    node_link *nl;
    size_t start, n; /* its commands: sub[start .. start + n) */
    waiter w;
    bool queued;
} group;

void link__cl_fast_exec(redis_link *r, redis_cmd *cmds, size_t n, bool change)
{
    group *gs = hf_xcalloc(n, sizeof *gs); /* at most one group per command */
    redis_cmd *sub = hf_xmalloc(n * sizeof *sub);
    size_t *at = hf_xmalloc(n * sizeof *at); /* cmds[i]'s group */
    bool *slow = hf_xcalloc(n, sizeof *slow);
    size_t g = 0;
    hf_rwlock_rdlock(&r->map_lock);
    for (size_t i = 0; i < n; i++) {
        uint16_t k = cmds[i].slot >= 0 && cmds[i].slot < CLUSTER_SLOTS ? r->slot_node[cmds[i].slot]
                                                                       : NO_NODE;
        node_link *nl = k == NO_NODE ? NULL : r->nodes[k];
        if (!nl || link__node_refusing(r, nl)) {
            slow[i] = true;
            continue;
        }
        size_t j = 0;
        while (j < g && gs[j].nl != nl)
            j++;
        if (j == g)
            gs[g++].nl = nl;
        at[i] = j;
        gs[j].n++;
    }
    hf_rwlock_unlock(&r->map_lock);

    /* each group's commands side by side in sub, back[k] the command of sub[k] */
    for (size_t j = 0, off = 0; j < g; j++) {
        gs[j].start = off;
        off += gs[j].n;
        gs[j].n = 0;
    }
    size_t *back = hf_xmalloc(n * sizeof *back);
    for (size_t i = 0; i < n; i++) {
        if (slow[i])
            continue;
        group *gr = &gs[at[i]];
        size_t k = gr->start + gr->n++;
        back[k] = i;
        sub[k] = (redis_cmd){.argc = cmds[i].argc,
                             .argv = cmds[i].argv,
                             .argvlen = cmds[i].argvlen,
                             .slot = cmds[i].slot,
                             .node = cmds[i].node,
                             .code = STORE_EUNAVAILABLE};
    }
    int64_t t0 = hf_clock_mono_us();
    for (size_t j = 0; j < g; j++) {
        link__waiter_init(r, &gs[j].w, sub + gs[j].start, gs[j].n, change, t0);
        gs[j].queued = link__pipe_submit(r, gs[j].nl, &gs[j].w, 0);
    }
    size_t settled = 0, nslow = 0;
    for (size_t j = 0; j < g; j++) {
        if (gs[j].queued)
            link__pipe_await(r, &gs[j].w);
        link__waiter_free(&gs[j].w);
        for (size_t k = gs[j].start; k < gs[j].start + gs[j].n; k++) {
            redis_cmd *d = &sub[k];
            size_t i = back[k];
            if (d->code == STORE_EUNAVAILABLE || for_the_handles(gs[j].nl, d->reply)) {
                if (d->reply)
                    freeReplyObject(d->reply);
                if (d->code != STORE_EUNAVAILABLE) /* redirected: the map is behind */
                    atomic_store(&r->map_stale, true);
                slow[i] = true;
                continue;
            }
            cmds[i].reply = d->reply;
            cmds[i].code = d->code;
            settled++;
        }
    }
    for (size_t i = 0; i < n; i++)
        nslow += slow[i];
    HF_ASSERT(settled + nslow == n); /* each command settled once, here or by a handle */
    atomic_fetch_add(&r->cl_pipelined, settled);
    if (nslow)
        cl_slow_exec(r, cmds, slow, nslow, n, change);
    free(back);
    free(slow);
    free(at);
    free(sub);
    free(gs);
}

/* A command (argv) on every primary of the handle's map, outside the
 * figures: the commands with their replies (*m of them; redis_cmds_free). */
static redis_cmd *cl_on_all(conn *c, int argc, const char **argv, const size_t *lens, size_t *m)
{
    redis_cmd *cmds = link__cl_primaries(c, argc, argv, lens, m);
    cluster_cmd *batch = hf_xcalloc(*m ? *m : 1, sizeof *batch);
    for (size_t i = 0; i < *m; i++)
        batch[i] = (cluster_cmd){.argc = cmds[i].argc,
                                 .argv = cmds[i].argv,
                                 .argvlen = cmds[i].argvlen,
                                 .slot = -1,
                                 .node = cmds[i].node,
                                 .flags = CLUSTER_CMD_IDEMPOTENT};
    cluster_exec(c->cl, batch, *m);
    for (size_t i = 0; i < *m; i++) {
        cmds[i].reply = batch[i].reply;
        cmds[i].code = batch[i].reply ? STORE_OK : STORE_EUNAVAILABLE;
    }
    free(batch);
    return cmds;
}

/* The probe on every primary of the handle's map, its commands one
 * cl_on_all each: the commands of the first with every reply, or NULL when
 * a primary gave none, the first such in *failed (its address) and why. */
static redis_cmd *cl_probe_all(redis_link *r, conn *c, size_t *m, char *err, size_t errlen)
{
    redis_cmd *each[REDIS_PROBE_MAX] = {NULL};
    size_t mk[REDIS_PROBE_MAX] = {0};
    for (int k = 0; k < r->opt.probe_n; k++)
        each[k] = cl_on_all(c, r->opt.probe[k].argc, r->opt.probe[k].argv, r->probe_lens[k],
                            &mk[k]);
    *m = mk[0];
    redis_cmd *out = each[0];
    /* Each command went out over the map as it stood then: a refresh in
     * between (a failover, a slot move) can name other primaries, or the
     * same in another order. Replies are paired only over one map; over
     * two, this look fails and the next one (within a second) pairs them. */
    bool one_map = true;
    for (int k = 1; k < r->opt.probe_n && one_map; k++) {
        one_map = mk[k] == *m && (out || !each[k]);
        for (size_t i = 0; i < *m && one_map && out && each[k]; i++)
            one_map = each[k][i].node == out[i].node;
    }
    for (size_t i = 0; i < *m && out; i++) {
        redisReply *reps[REDIS_PROBE_MAX] = {NULL};
        bool all = one_map;
        for (int k = 0; k < r->opt.probe_n && one_map; k++) {
            reps[k] = each[k] ? each[k][i].reply : NULL;
            all = all && reps[k];
        }
        char why[512] = "";
        if (!one_map) {
            snprintf(why, sizeof why, "the slot map changed while the nodes were probed");
            out[i].code = STORE_EUNAVAILABLE;
        } else if (!all) {
            cluster_node_stats ns;
            cluster_get_node_stats(c->cl, (size_t)out[i].node, &ns);
            /* refused by the hello: the checker's sentence and code */
            if (ns.refused[0])
                snprintf(why, sizeof why, "%s", ns.refused);
            else
                snprintf(why, sizeof why, "node %s: %s", out[i].addr, cluster_last_error(c->cl));
            out[i].code = ns.refused[0] ? ns.refused_code : STORE_EUNREACHABLE;
        } else {
            out[i].code = r->opt.probe_check(r->opt.probe_ctx, reps, out[i].addr, why, sizeof why);
        }
        if (out[i].code != STORE_OK && !err[0]) /* the first failure says why */
            snprintf(err, errlen, "%s", why);
    }
    for (int k = 1; k < r->opt.probe_n; k++)
        redis_cmds_free(each[k], mk[k]);
    return out;
}

/* The look at every primary's replicas (health.c; a primary whose INFO
 * failed says nothing). */
void link__cl_look(redis_link *r, conn *c)
{
    const char *argv[2] = {"INFO", "replication"};
    size_t lens[2] = {4, 11}, m;
    redis_cmd *cmds = cl_on_all(c, 2, argv, lens, &m);
    link__replicas_seen(r, c, cmds, m);
    redis_cmds_free(cmds, m);
}

/* The monitor's look at the cluster: every primary passes the probe and
 * every slot has a primary. true, or false with why; none_answer: not one
 * primary passes. */
static bool cl_probe(redis_link *r, conn *c, char *err, size_t errlen)
{
    size_t m, passed = 0;
    char why[512] = "";
    redis_cmd *cmds = cl_probe_all(r, c, &m, why, sizeof why);
    bool ok = true;
    for (size_t i = 0; i < m; i++) {
        bool pass = cmds[i].code == STORE_OK;
        if (pass)
            passed++;
        else if (ok) /* the first failure says why */
            snprintf(err, errlen, "%s", why);
        ok = ok && pass;
    }
    atomic_store(&r->none_answer, passed == 0);
    redis_cmds_free(cmds, m);
    int uncovered = -1;
    for (int s = 0; s < CLUSTER_SLOTS && uncovered < 0; s++)
        if (cluster_slot_node(c->cl, s) < 0)
            uncovered = s;
    if (ok && uncovered >= 0) {
        snprintf(err, errlen, "slot %d is served by no primary", uncovered);
        ok = false;
    }
    link__cl_fold(r, c);
    return ok;
}

/* Over a cluster the monitor only tells (health, store_up): every second
 * while all is well, every 200 ms while not; calls never wait for it. */
void *link__cl_monitor_main(void *arg)
{
    redis_link *r = arg;
    conn *m = NULL;
    hf_mutex_lock(&r->lock);
    while (!r->stopping) {
        int64_t pause_ms = r->up ? 1000 : 200;
        link__monitor_wait(r, pause_ms);
        if (r->stopping)
            break;
        hf_mutex_unlock(&r->lock);
        char err[512] = "";
        int code;
        if (!m)
            m = link__cl_open(r, &code, err, sizeof err);
        bool ok = m && cl_probe(r, m, err, sizeof err);
        if (!m)
            atomic_store(&r->none_answer, true);
        if (ok)
            link__cl_look(r, m);
        if (m)
            link__cl_map_take(r, m->cl);
        hf_mutex_lock(&r->lock);
        if (ok && !r->up) {
            r->reason[0] = '\0';
            log_msg(LOG_INFO, "Redis Cluster: every slot served, every primary answers");
        } else if (!ok) {
            if (r->up)
                log_msg(LOG_WARN, "Redis Cluster degraded: %s", err);
            snprintf(r->reason, sizeof r->reason, "%s", err);
        }
        if (ok != r->up)
            atomic_fetch_add(&r->reconnects, ok);
        r->up = ok;
        atomic_store(&r->up_flag, ok);
    }
    hf_mutex_unlock(&r->lock);
    if (m)
        link__cl_free(m);
    return NULL;
}

/* ------------------------------------------------------------ figures */

void link__cl_metrics(redis_link *r, const store_emitter *e)
{
    hf_mutex_lock(&r->lock);
    size_t n = r->nfigs;
    node_fig *figs = hf_xmemdup(r->figs, n, sizeof *figs);
    uint64_t refreshes = r->cl_refreshes, failures = r->cl_refresh_failures, rounds = r->cl_rounds;
    hf_mutex_unlock(&r->lock);
    /* the pipes' part of each node's figures: the commands they wrote and
     * the redirects they met (whose commands a routing handle then carried) */
    hf_rwlock_rdlock(&r->map_lock);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < r->nnodes; j++)
            if (strcmp(r->nodes[j]->addr, figs[i].s.addr) == 0) {
                figs[i].s.requests += atomic_load(&r->nodes[j]->sent);
                figs[i].s.moved += atomic_load(&r->nodes[j]->moved);
                figs[i].s.ask += atomic_load(&r->nodes[j]->ask);
            }
    hf_rwlock_unlock(&r->map_lock);
    const store_metric_type counter = STORE_METRIC_COUNTER, gauge = STORE_METRIC_GAUGE;
    store_emit_metric(e, "hf3fs_metad_store_cluster_nodes", gauge,
                      "Redis Cluster nodes known to this front end (primaries and replicas, "
                      "also those that left the map).",
                      store_int(n));
    store_emit_metric(e, "hf3fs_metad_store_cluster_map_refreshes_total", counter,
                      "Redis Cluster slot maps loaded (CLUSTER SLOTS), by every routing handle.",
                      store_int(refreshes));
    store_emit_family(e, "hf3fs_metad_store_cluster_node_slots", gauge,
                      "Slots a Redis Cluster node serves in the latest map seen (0: a replica "
                      "or a node that left).");
    for (size_t i = 0; i < n; i++) {
        store_label l = {"node", figs[i].s.addr};
        store_emit_sample(e, &l, 1, store_int(figs[i].s.slots));
    }
    store_emit_family(e, "hf3fs_metad_store_cluster_redirects_total", counter,
                      "MOVED and ASK answers of a Redis Cluster node (kind moved or ask).");
    for (size_t i = 0; i < n; i++) {
        store_label l[2] = {{"node", figs[i].s.addr}, {"kind", "moved"}};
        store_emit_sample(e, l, 2, store_int(figs[i].s.moved));
        l[1].value = "ask";
        store_emit_sample(e, l, 2, store_int(figs[i].s.ask));
    }
    store_emit_family(e, "hf3fs_metad_store_cluster_node_errors_total", counter,
                      "Connections to a Redis Cluster node refused, broken or timed out.");
    for (size_t i = 0; i < n; i++) {
        store_label l = {"node", figs[i].s.addr};
        store_emit_sample(e, &l, 1, store_int(figs[i].s.errors));
    }

    store_emit_object(e, "cluster");
    store_emit_number(e, "nodes_known", store_int(n));
    store_emit_number(e, "map_refreshes", store_int(refreshes));
    store_emit_number(e, "map_refresh_failures", store_int(failures));
    store_emit_number(e, "rounds", store_int(rounds));
    store_emit_number(e, "waits_on_every_primary", store_int(atomic_load(&r->cl_rewaits)));
    store_emit_number(e, "commands_pipelined", store_int(atomic_load(&r->cl_pipelined)));
    store_emit_number(e, "commands_by_routing_handles", store_int(atomic_load(&r->cl_by_handles)));
    store_emit_object(e, "nodes");
    for (size_t i = 0; i < n; i++) {
        const cluster_node_stats *s = &figs[i].s;
        store_emit_object(e, s->addr);
        store_emit_string(e, "role",
                          s->primary   ? "primary"
                          : s->replica ? "replica"
                                       : "none",
                          s->primary   ? 7
                          : s->replica ? 7
                                       : 4);
        store_emit_bool(e, "down", s->down);
        store_emit_number(e, "slots", store_int(s->slots));
        store_emit_number(e, "requests", store_int(s->requests));
        store_emit_number(e, "moved", store_int(s->moved));
        store_emit_number(e, "ask", store_int(s->ask));
        store_emit_number(e, "retries", store_int(s->retries));
        store_emit_number(e, "errors", store_int(s->errors));
        store_emit_number(e, "connects", store_int(s->connects));
        store_emit_end(e);
    }
    store_emit_end(e);
    store_emit_end(e);
    free(figs);
}

/* --------------------------------------------------------------- open */

/* Over a cluster at open: the probe on every primary of the first handle. */
int link__cl_open_probe(redis_link *r, conn *c, char *err, size_t errlen)
{
    size_t m;
    char why[512] = "";
    redis_cmd *cmds = cl_probe_all(r, c, &m, why, sizeof why);
    int rc = m ? STORE_OK : STORE_EUNAVAILABLE;
    if (!m)
        snprintf(err, errlen, "no primary serves a slot");
    for (size_t i = 0; i < m && rc == STORE_OK; i++)
        rc = cmds[i].code;
    if (rc != STORE_OK && m)
        snprintf(err, errlen, "%s", why);
    redis_cmds_free(cmds, m);
    return rc;
}
