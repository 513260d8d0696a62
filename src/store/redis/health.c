/*
 * health.c: what the link to Redis (link.h) tells, and the rule it tells
 * of: the default of --redis-wait decided for each primary from what it
 * has now (link.h "--redis-wait"), the monitors' look at the replicas
 * (INFO replication, at open and every second), the health that follows
 * (redis_link_health), the primaries without a replica (/health, a gauge)
 * and the link's figures (a cluster's own are route.c's).
 *
 * The rule is node_waits, and nothing else decides it: a primary's changes
 * wait for one replica once a look finds one in sync, and go on waiting
 * for as long as it stays the primary, even when the replica goes; a
 * primary not looked at yet (one met since the last look, within a
 * second) is waited on, since what it has is not known. A change
 * on a primary whose replica just vanished is exactly when acknowledged
 * work can be lost: a primary cut off from the cluster with the front ends
 * on its side hears from its replica no more, and that replica is promoted
 * on the other side; what the primary acknowledged alone vanishes when the
 * cut heals. Waiting still, such a change answers 507 (outcome unknown),
 * which never claims what may be lost. A replica taken away on purpose is
 * let go by starting the front end again (it judges afresh), or with an
 * explicit --redis-wait. A node the cluster's map shows as a replica, and
 * over Sentinel a primary the sentinels replaced, lose their state: a
 * promoted replica is a new primary, judged by what it has.
 */
#include "store/redis/link_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/log.h"
#include "util/xalloc.h"

static const uint64_t rtt_bounds_us[RTT_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000,
};

/* ------------------------------------------------------------- the rule */

/* Under the default: whether a primary's changes wait for a replica, from
 * what the looks saw of it: seen_sync, its replicas in sync at the last
 * look plus one (0: not looked at as a primary yet), and had_replica,
 * whether a look found one in sync since it was judged afresh. */
static bool node_waits(int seen_sync, bool had_replica)
{
    return seen_sync != 1 || had_replica;
}

unsigned link__wait_count(const redis_link *r)
{
    return r->opt.wait_auto ? 1 : r->opt.wait_replicas;
}

unsigned link__node_wait(redis_link *r, node_link *nl)
{
    if (!r->opt.wait_auto)
        return r->opt.wait_replicas;
    bool waits = node_waits(atomic_load(&nl->seen_sync), atomic_load(&nl->had_replica));
    return waits ? link__wait_count(r) : 0;
}

unsigned link__wait_at(redis_link *r, conn *c, int slot, int node)
{
    if (!r->opt.wait_auto)
        return r->opt.wait_replicas;
    node_link *nl = link__cl_node_link(r, c, slot, node, false);
    return nl ? link__node_wait(r, nl) : link__wait_count(r); /* not known: waited on */
}

/* ------------------------------------------------------------- the look */

/* Replicas in sync in INFO replication's text: a line
 * "slaveN:ip=...,state=online,..." once its first sync is done (before, a
 * WAIT would not count it); -1 for a reply that is not that text. */
static int in_sync_of(const redisReply *rep)
{
    if (!rep || rep->type != REDIS_REPLY_STRING)
        return -1;
    int n = 0;
    for (const char *p = rep->str; (p = strstr(p, ",state=online,")) != NULL; p++)
        n++;
    return n;
}

/* A node that is no primary now: judged afresh if it is one again. */
static void forget(node_link *nl)
{
    atomic_store(&nl->had_replica, false);
    atomic_store(&nl->seen_sync, 0);
}

/* Under the default, what changed for the primary at addr (before: its
 * replicas in sync at the last look, -1 if none; was, waits: whether its
 * changes waited, and do now): logged. At open (first) only the primaries
 * without a replica have a line of their own. */
static void tell(const char *addr, int before, int now, bool was, bool waits, bool first)
{
    if (waits && !was && !first)
        log_msg(LOG_INFO,
                "Redis primary %s has a replica in sync: its changes wait for one (WAIT 1) "
                "from now on",
                addr);
    else if (now == 0 && before != 0 && waits)
        log_msg(LOG_WARN,
                "Redis primary %s lost its replica: its changes answer 507 (outcome unknown) "
                "until one is in sync again, since a partition could lose what it "
                "acknowledged alone (a front end started again judges afresh)",
                addr);
    else if (now == 0 && before != 0)
        log_msg(LOG_WARN,
                "Redis primary %s has no replica: its changes are not waited on, so no other "
                "node has them and losing this one can lose acknowledged work (they wait for "
                "one once a replica is in sync)",
                addr);
}

/* The rule applied to the primary nl at addr, looked at now (in_sync -1:
 * its INFO failed, which says nothing), into fig. */
static void judge(redis_link *r, node_link *nl, const char *addr, int in_sync, bool first,
                  primary_fig *fig)
{
    int seen = atomic_load(&nl->seen_sync);
    if (in_sync >= 0) {
        bool had = atomic_load(&nl->had_replica);
        bool was = node_waits(seen, had);
        had = had || in_sync > 0;
        /* in this order: a reader between the two sees the old decision or
         * the new one */
        atomic_store(&nl->had_replica, had);
        atomic_store(&nl->seen_sync, in_sync + 1);
        if (r->opt.wait_auto)
            tell(addr, seen - 1, in_sync, was, node_waits(in_sync + 1, had), first);
    }
    fig->in_sync = in_sync >= 0 ? in_sync : seen - 1;
    fig->want = link__node_wait(r, nl);
}

/* Over a cluster, whether the map of the handle c shows the node at addr
 * as a replica. */
static bool a_replica(conn *c, const char *addr)
{
    for (size_t i = 0; i < cluster_node_count(c->cl); i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(c->cl, i, &ns);
        if (strcmp(ns.addr, addr) == 0)
            return ns.replica;
    }
    return false;
}

/* health: a primary with fewer replicas in sync than its changes wait
 * for, with why, or none. */
static void judge_health(redis_link *r, const primary_fig *figs, size_t m)
{
    for (size_t i = 0; i < m; i++) {
        const primary_fig *f = &figs[i];
        if (f->in_sync < 0 || (unsigned)f->in_sync >= f->want)
            continue;
        hf_mutex_lock(&r->lock);
        if (r->opt.wait_auto)
            snprintf(r->repl_reason, sizeof r->repl_reason,
                     "Redis primary %.120s lost its replica: its changes answer 507 until one "
                     "is in sync again",
                     f->addr);
        else
            snprintf(r->repl_reason, sizeof r->repl_reason,
                     "Redis at %.120s has %d of the %u replicas in sync that --redis-wait "
                     "asks for: changes answer 507",
                     f->addr, f->in_sync, f->want);
        hf_mutex_unlock(&r->lock);
        atomic_store(&r->repl_short, true);
        return;
    }
    atomic_store(&r->repl_short, false);
}

void link__replicas_seen(redis_link *r, conn *c, const redis_cmd *looks, size_t m)
{
    if (m == 0)
        return; /* no primary known: nothing learned */
    bool first = !r->looked;
    r->looked = true;
    primary_fig *figs = hf_xcalloc(m, sizeof *figs);
    for (size_t i = 0; i < m; i++) { /* a primary the pipes do not know yet: waited on */
        snprintf(figs[i].addr, sizeof figs[i].addr, "%s", looks[i].addr);
        figs[i].in_sync = in_sync_of(looks[i].reply);
        figs[i].want = link__wait_count(r);
    }
    if (!c) {
        HF_ASSERT(m == 1);
        if (strcmp(r->one_seen, looks[0].addr) != 0) { /* another primary (Sentinel) */
            forget(r->one);
            snprintf(r->one_seen, sizeof r->one_seen, "%s", looks[0].addr);
        }
        judge(r, r->one, looks[0].addr, figs[0].in_sync, first, &figs[0]);
    } else {
        hf_rwlock_rdlock(&r->map_lock);
        for (size_t j = 0; j < r->nnodes; j++) {
            node_link *nl = r->nodes[j];
            size_t i = 0;
            while (i < m && strcmp(looks[i].addr, nl->addr) != 0)
                i++;
            if (i < m)
                judge(r, nl, nl->addr, figs[i].in_sync, first, &figs[i]);
            else if (a_replica(c, nl->addr))
                forget(nl);
        }
        hf_rwlock_unlock(&r->map_lock);
    }
    size_t with = 0;
    for (size_t i = 0; i < m; i++)
        with += figs[i].in_sync > 0;
    if (first && r->opt.wait_auto)
        log_msg(LOG_INFO,
                "redis-wait (the default): a primary's changes wait for one replica (WAIT 1) "
                "once it has one in sync; %zu of %zu primaries have one now (--redis-wait N: "
                "N on every primary)",
                with, m);
    judge_health(r, figs, m);
    hf_mutex_lock(&r->lock);
    free(r->prims);
    r->prims = figs;
    r->nprims = m;
    hf_mutex_unlock(&r->lock);
}

void link__look_one(redis_link *r, redisContext *ctx)
{
    redis_cmd look = {.reply = redisCommand(ctx, "INFO replication")};
    char host[256];
    int port;
    if (r->sentinel) { /* its address alone, not redis_link_where's sentence */
        link__sentinel_primary(r, host, sizeof host, &port);
        snprintf(look.addr, sizeof look.addr, "%.100s:%d", host, port);
    } else {
        redis_link_where(r, look.addr, sizeof look.addr);
    }
    link__replicas_seen(r, NULL, &look, 1);
    if (look.reply)
        freeReplyObject(look.reply);
}

/* ------------------------------------------- a WAIT refused by a demotion */

/* The value of INFO's field name ("name:value" at a line's start), copied
 * into out; false if absent. */
static bool info_field(const char *text, const char *name, char *out, size_t len)
{
    size_t n = strlen(name);
    for (const char *p = text; p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ':') {
            snprintf(out, len, "%.*s", (int)strcspn(p + n + 1, "\r\n"), p + n + 1);
            return true;
        }
    return false;
}

/* What INFO replication says of a node asked after its WAIT was refused. */
typedef enum { DEMOTED_WAIT, DEMOTED_KEPT, DEMOTED_LOST } demoted_seen;

static demoted_seen demoted_look(redisContext *ctx, char *saw, size_t len)
{
    redisReply *rep = redisCommand(ctx, "INFO replication");
    demoted_seen seen = DEMOTED_WAIT;
    char role[16] = "?", link[16] = "?", second[32] = "?";
    if (rep && rep->type == REDIS_REPLY_STRING) {
        info_field(rep->str, "role", role, sizeof role);
        info_field(rep->str, "master_link_status", link, sizeof link);
        info_field(rep->str, "second_repl_offset", second, sizeof second);
    }
    snprintf(saw, len, "role %s, master_link_status %s, second_repl_offset %s", role, link, second);
    if (!rep || rep->type != REDIS_REPLY_STRING || strcmp(role, "slave") != 0) {
        /* the connection failed, or it is still a primary (its WAIT failed
         * for another reason): nothing more to learn */
        seen = DEMOTED_LOST;
    } else if (strcmp(link, "up") == 0) {
        /* synced with its new primary: a partial resync kept its history
         * (second_repl_offset: where it continued), a full one replaced it
         * (-1) */
        seen = strtoll(second, NULL, 10) > 0 ? DEMOTED_KEPT : DEMOTED_LOST;
    }
    if (rep)
        freeReplyObject(rep);
    return seen;
}

bool link__demoted_kept(redis_link *r, const node_link *nl, unsigned want)
{
    if (want != 1) /* the demoted node is one replica of its new primary: no more */
        return false;
    int code;
    char err[512];
    redisContext *ctx = link__connect_one(r, nl, &code, err, sizeof err);
    if (!ctx)
        return false;
    int64_t until = hf_clock_mono_us() +
                    (r->opt.wait_timeout_ms + r->opt.command_timeout_ms) * 1000;
    demoted_seen seen;
    char saw[160];
    while ((seen = demoted_look(ctx, saw, sizeof saw)) == DEMOTED_WAIT &&
           hf_clock_mono_us() < until)
        hf_sleep_ms(20);
    redisFree(ctx);
    char where[128];
    snprintf(where, sizeof where, "%s", nl->host ? nl->addr : "Redis");
    if (seen == DEMOTED_KEPT)
        log_msg(LOG_WARN,
                "Redis: %s became a replica while a change's WAIT was pending, and continued "
                "from its new primary's history (partial resync): the change is on both, so it "
                "is acknowledged",
                where);
    else
        log_msg(LOG_WARN,
                "Redis: %s refused a change's WAIT, and did not show it kept the change (%s): "
                "its outcome is unknown",
                where, saw);
    return seen == DEMOTED_KEPT;
}

size_t redis_link_unreplicated(redis_link *l, char (*names)[STORE_NODE_NAME], size_t max)
{
    size_t n = 0;
    hf_mutex_lock(&l->lock);
    for (size_t i = 0; i < l->nprims; i++)
        if (l->prims[i].in_sync == 0) {
            if (n < max)
                snprintf(names[n], STORE_NODE_NAME, "%s", l->prims[i].addr);
            n++;
        }
    hf_mutex_unlock(&l->lock);
    return n;
}

/* ----------------------------------------------------- health, figures */

store_mode redis_link_health(redis_link *r, char *reason, size_t len)
{
    if (len)
        reason[0] = '\0';
    char w[300];
    if (!atomic_load(&r->up_flag)) {
        /* one Redis: every call is refused; a cluster: down if not one
         * primary answers, else the slots of those that answer serve */
        store_mode mode = r->cluster && !atomic_load(&r->none_answer) ? STORE_READS_ONLY
                                                                      : STORE_DOWN;
        hf_mutex_lock(&r->lock);
        snprintf(reason, len, "Redis at %s is unavailable: %s", redis_link_where(r, w, sizeof w),
                 r->reason[0] ? r->reason : "not reached yet");
        hf_mutex_unlock(&r->lock);
        return mode;
    }
    if (atomic_load(&r->repl_short)) {
        hf_mutex_lock(&r->lock);
        snprintf(reason, len, "%s", r->repl_reason);
        hf_mutex_unlock(&r->lock);
        return STORE_READS_ONLY;
    }
    int64_t bad = atomic_load(&r->change_bad_us), ok = atomic_load(&r->change_ok_us);
    if (bad != 0 && bad > ok && hf_clock_mono_us() - bad < LINK_CHANGE_FAILED_HOLD_US) {
        hf_mutex_lock(&r->lock);
        snprintf(reason, len, "%s", r->change_reason);
        hf_mutex_unlock(&r->lock);
        return STORE_READS_ONLY;
    }
    return STORE_SERVING;
}

void link__count_rtt(redis_link *r, int64_t us)
{
    unsigned i = 0;
    while (i < RTT_BUCKETS - 1 && (uint64_t)us > rtt_bounds_us[i])
        i++;
    atomic_fetch_add(&r->rtt_buckets[i], 1);
    atomic_fetch_add(&r->rtt_sum_us, (uint64_t)us);
}

/* The primaries of the last look: the gauge, and in the "store" member
 * (written under the lock, which only the look takes besides). */
static void primaries_metrics(redis_link *r, const store_emitter *e)
{
    hf_mutex_lock(&r->lock);
    size_t unreplicated = 0;
    unsigned most = r->opt.wait_auto ? 0 : r->opt.wait_replicas;
    for (size_t i = 0; i < r->nprims; i++) {
        unreplicated += r->prims[i].in_sync == 0;
        most = r->prims[i].want > most ? r->prims[i].want : most;
    }
    store_emit_metric(e, "hf3fs_metad_store_unreplicated_primaries", STORE_METRIC_GAUGE,
                      "Redis primaries without a replica in sync as this front end last saw "
                      "them (every second): under the default --redis-wait their changes are "
                      "not waited on, or answer 507 if they had a replica; GET /health names "
                      "them.",
                      store_int(unreplicated));
    /* --redis-wait N, or under the default 1 if a primary's changes wait */
    store_emit_number(e, "wait_replicas", store_int(most));
    store_emit_bool(e, "wait_default", r->opt.wait_auto);
    store_emit_object(e, "primaries");
    for (size_t i = 0; i < r->nprims; i++) {
        const primary_fig *f = &r->prims[i];
        store_emit_object(e, f->addr);
        if (f->in_sync >= 0)
            store_emit_number(e, "replicas_in_sync", store_int((uint64_t)f->in_sync));
        else
            store_emit_null(e, "replicas_in_sync");
        store_emit_number(e, "changes_wait_for", store_int(f->want));
        store_emit_end(e);
    }
    store_emit_end(e);
    hf_mutex_unlock(&r->lock);
}

void redis_link_metrics(redis_link *r, const store_emitter *e)
{
    bool up = atomic_load(&r->up_flag);
    uint64_t counts[RTT_BUCKETS];
    for (unsigned i = 0; i < RTT_BUCKETS; i++)
        counts[i] = atomic_load(&r->rtt_buckets[i]);
    uint64_t calls = atomic_load(&r->calls), errors = atomic_load(&r->errors),
             unknown = atomic_load(&r->unknown), reconnects = atomic_load(&r->reconnects),
             refused = atomic_load(&r->refused_down);
    /* The families the operators' rules and dashboard use; the other
     * figures are in /v1/stats. */
    store_emit_metric(e, "hf3fs_metad_store_up", STORE_METRIC_GAUGE,
                      "1 while the shared store (Redis) answers, 0 while this front end "
                      "cannot reach it or it refuses calls (see GET /health).",
                      store_int(up));
    store_emit_family(e, "hf3fs_metad_store_round_trip_seconds", STORE_METRIC_HISTOGRAM,
                      "Time of one round trip to Redis as this front end sees it (one "
                      "command, or a batch, with its WAIT under --redis-wait).");
    store_histogram h = {
        .nbuckets = RTT_BUCKETS,
        .bounds = rtt_bounds_us,
        .counts = counts,
        .sum = atomic_load(&r->rtt_sum_us),
        .decimals = 6,
    };
    store_emit_histogram(e, NULL, 0, &h);
    store_emit_metric(e, "hf3fs_metad_store_errors_total", STORE_METRIC_COUNTER,
                      "Store calls that failed: Redis unreachable, down, timed out, refusing "
                      "the call or answering an error (calls, outcomes unknown and reconnects "
                      "are in /v1/stats, member store).",
                      store_int(errors));

    char w[300], reason[512];
    redis_link_where(r, w, sizeof w);
    hf_mutex_lock(&r->lock);
    snprintf(reason, sizeof reason, "%s", r->reason);
    hf_mutex_unlock(&r->lock);
    store_emit_null(e, "persistence"); /* Redis's own: its appendonly settings */
    store_emit_object(e, "store");
    if (r->cluster)
        store_emit_string(e, "engine", "redis-cluster", 13);
    else if (r->sentinel)
        store_emit_string(e, "engine", "redis-sentinel", 14);
    else
        store_emit_string(e, "engine", "redis", 5);
    store_emit_string(e, "address", w, strlen(w));
    store_emit_bool(e, "up", up);
    if (up || !reason[0])
        store_emit_null(e, "down_because");
    else
        store_emit_string(e, "down_because", reason, strlen(reason));
    store_emit_number(e, "calls", store_int(calls));
    store_emit_number(e, "errors", store_int(errors));
    store_emit_number(e, "outcome_unknown", store_int(unknown));
    store_emit_number(e, "refused_while_down", store_int(refused));
    store_emit_number(e, "reconnects", store_int(reconnects));
    primaries_metrics(r, e);
    store_emit_number(e, "connections", store_int(r->opt.connections ? r->opt.connections : 1));
    store_emit_number(e, "max_in_flight", store_int(r->opt.max_in_flight));
    store_emit_number(e, "writes", store_int(atomic_load(&r->writes)));
    store_emit_number(e, "waited_for_room", store_int(atomic_load(&r->waited_for_room)));
    store_emit_number(e, "refused_busy", store_int(atomic_load(&r->refused_busy)));
    if (r->cluster)
        link__cl_metrics(r, e);
    if (r->sentinel) {
        store_emit_number(e, "primary_switches", store_int(atomic_load(&r->switches)));
        store_emit_number(e, "sentinel_asks", store_int(atomic_load(&r->sentinel_asks)));
    }
    store_emit_end(e);
}
