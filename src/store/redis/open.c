/*
 * open.c: store_redis_open: the link to Redis (link.h) with its probe,
 * MODULE LIST and HF3FS.VERSION on every new connection, which must show
 * a module this front end can speak to (redis.h); what each node's module
 * is and speaks, for /v1/stats and /metrics.
 */
#include "store/redis/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fiber.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* The value of field `name` in one module's entry of MODULE LIST (a flat
 * list of names and values), or NULL. */
static const redisReply *module_field(const redisReply *m, const char *name)
{
    if (m->type != REDIS_REPLY_ARRAY)
        return NULL;
    size_t n = strlen(name);
    for (size_t i = 0; i + 1 < m->elements; i += 2) {
        const redisReply *k = m->element[i];
        if ((k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) && k->len == n &&
            memcmp(k->str, name, n) == 0)
            return m->element[i + 1];
    }
    return NULL;
}

#define WIRE_STR_(x) #x
#define WIRE_STR(x) WIRE_STR_(x)

#define LOAD_HOWTO                                                                                 \
    "start it with `redis-server --loadmodule /path/to/hf3fs_metad_redis.so` or add "              \
    "`loadmodule /path/to/hf3fs_metad_redis.so` to redis.conf (the .so is built by `make` "        \
    "next to hf3fs-metad)"

/* An unsigned number in a reply (integer, or a string of digits), or -1. */
static long long reply_uint(const redisReply *e)
{
    long long v = e ? redis__int_of(e) : -1;
    return v >= 0 && v <= 65535 ? v : -1;
}

/* A [lo, hi] pair of HF3FS.VERSION; false if it is not one. */
static bool reply_range(const redisReply *e, unsigned *lo, unsigned *hi)
{
    if (!e || e->type != REDIS_REPLY_ARRAY || e->elements != 2)
        return false;
    long long a = reply_uint(e->element[0]), b = reply_uint(e->element[1]);
    if (a < 0 || b < a)
        return false;
    *lo = (unsigned)a;
    *hi = (unsigned)b;
    return true;
}

/* The node's entry of the table, added if new (seen_lock held). */
static module_seen *seen_of(store_redis *r, const char *addr)
{
    for (size_t i = 0; i < r->nseen; i++)
        if (strcmp(r->seen[i].addr, addr) == 0)
            return &r->seen[i];
    r->seen = hf_xreallocarray(r->seen, r->nseen + 1, sizeof *r->seen);
    module_seen *m = &r->seen[r->nseen++];
    memset(m, 0, sizeof *m);
    snprintf(m->addr, sizeof m->addr, "%s", addr);
    return m;
}

/*
 * The probe's checker (link.h): MODULE LIST shows the module with a
 * baseline ("ver") this front end speaks, and HF3FS.VERSION (absent from a
 * module of before it: that module speaks its baseline only) gives the
 * command sets it speaks: this front end speaks the highest both do
 * (wire_version_agree), or refuses the node. What it learned is the
 * node's entry of r->seen.
 */
static int module_check(void *ctx, redisReply *const *rep, const char *addr, char *err,
                        size_t errlen)
{
    store_redis *r = ctx;
    if (rep[0]->type == REDIS_REPLY_ERROR) {
        bool perm = strncmp(rep[0]->str, "NOPERM", 6) == 0 ||
                    strncmp(rep[0]->str, "NOAUTH", 6) == 0;
        snprintf(err, errlen, "Redis at %s: MODULE LIST: %s%s", addr, rep[0]->str,
                 perm ? " (the user must be allowed MODULE LIST and HF3FS.VERSION: the front end "
                        "checks the hf3fs-metad module with them)"
                      : "");
        return perm ? STORE_EAUTH : STORE_EUNAVAILABLE;
    }
    if (rep[0]->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "Redis at %s: MODULE LIST: unexpected reply", addr);
        return STORE_EUNAVAILABLE;
    }
    long long base = -2;
    for (size_t i = 0; i < rep[0]->elements && base == -2; i++) {
        const redisReply *name = module_field(rep[0]->element[i], "name");
        if (name && name->type == REDIS_REPLY_STRING && name->len == strlen(HF3FS_MODULE_NAME) &&
            memcmp(name->str, HF3FS_MODULE_NAME, name->len) == 0)
            base = reply_uint(module_field(rep[0]->element[i], "ver"));
    }
    if (base == -2) {
        snprintf(err, errlen,
                 "Redis at %s has not loaded the hf3fs-metad module (%s, command sets %d to %d): "
                 "%s",
                 addr, HF3FS_MODULE_NAME, HF3FS_MODULE_VERSION, HF3FS_WIRE_HIGHEST, LOAD_HOWTO);
        return STORE_ENOMODULE;
    }
    module_seen m = {.lowest = (unsigned)(base < 0 ? 0 : base)};
    m.highest = m.lowest;
    const redisReply *v = rep[1];
    if (v->type == REDIS_REPLY_ARRAY) { /* a flat list of names and values */
        const redisReply *rel = module_field(v, "release"), *caps = module_field(v, "capabilities");
        if (rel && (rel->type == REDIS_REPLY_STRING || rel->type == REDIS_REPLY_STATUS))
            snprintf(m.release, sizeof m.release, "%.*s", (int)rel->len, rel->str);
        if (!reply_range(module_field(v, "commands"), &m.lowest, &m.highest))
            m.highest = m.lowest;
        reply_range(module_field(v, "encoding"), &m.enc_lo, &m.enc_hi);
        for (size_t i = 0; caps && caps->type == REDIS_REPLY_ARRAY && i < caps->elements; i++)
            if (caps->element[i]->type == REDIS_REPLY_STRING ||
                caps->element[i]->type == REDIS_REPLY_STATUS)
                m.caps |= wire_cap_of(caps->element[i]->str, caps->element[i]->len);
    }
    /* else an error (unknown command): a module of before HF3FS.VERSION,
     * which speaks its baseline only */
    m.agreed = base < 0 ? 0
                        : wire_version_agree(m.lowest, m.highest, HF3FS_MODULE_VERSION,
                                             HF3FS_WIRE_HIGHEST);
    hf_mutex_lock(&r->seen_lock);
    module_seen *e = seen_of(r, addr);
    snprintf(m.addr, sizeof m.addr, "%s", e->addr);
    *e = m;
    /* what every node met can do, read lock-free by the calls (all_can) */
    unsigned all = ~0u;
    for (size_t i = 0; i < r->nseen; i++)
        all &= r->seen[i].agreed ? r->seen[i].caps : 0u;
    atomic_store_explicit(&r->all_caps, all, memory_order_relaxed);
    hf_mutex_unlock(&r->seen_lock);
    if (m.agreed)
        return STORE_OK;
    snprintf(err, errlen,
             "Redis at %s has the hf3fs-metad module (%s) of release %s speaking command sets %u "
             "to %u, and this front end speaks %d to %d: it sends that node nothing (load the "
             "hf3fs_metad_redis.so of a release one version apart from this hf3fs-metad: %s)",
             addr, HF3FS_MODULE_NAME, m.release[0] ? m.release : "unknown", m.lowest, m.highest,
             HF3FS_MODULE_VERSION, HF3FS_WIRE_HIGHEST, LOAD_HOWTO);
    return STORE_ENOMODULE;
}

bool redis__all_can(store_redis *r, unsigned cap)
{
    return (atomic_load_explicit(&r->all_caps, memory_order_relaxed) & cap) == cap;
}

void redis__modules_metrics(store_redis *r, const store_emitter *e)
{
    hf_mutex_lock(&r->seen_lock);
    size_t n = r->nseen;
    module_seen *seen = hf_xmemdup(r->seen, n, sizeof *seen);
    hf_mutex_unlock(&r->seen_lock);
    store_emit_family(e, "hf3fs_metad_store_module_info", STORE_METRIC_GAUGE,
                      "The hf3fs-metad module of each Redis node as its last probe saw it: "
                      "release, the command sets it speaks, the one this front end speaks to it "
                      "(0: none, the node gets no command), value encoding; always 1.");
    for (size_t i = 0; i < n; i++) {
        char lo[12], hi[12], ag[12], enc[12];
        snprintf(lo, sizeof lo, "%u", seen[i].lowest);
        snprintf(hi, sizeof hi, "%u", seen[i].highest);
        snprintf(ag, sizeof ag, "%u", seen[i].agreed);
        snprintf(enc, sizeof enc, "%u", seen[i].enc_hi);
        store_label l[6] = {
            {"node", seen[i].addr}, {"release", seen[i].release[0] ? seen[i].release : "unknown"},
            {"lowest", lo},         {"highest", hi},
            {"speaking", ag},       {"value_encoding", seen[i].enc_hi ? enc : "unknown"}};
        store_emit_sample(e, l, 6, store_int(1));
    }
    store_emit_object(e, "redis_modules");
    for (size_t i = 0; i < n; i++) {
        const module_seen *m = &seen[i];
        store_emit_object(e, m->addr);
        if (m->release[0])
            store_emit_string(e, "release", m->release, strlen(m->release));
        else
            store_emit_null(e, "release");
        store_emit_number(e, "lowest", store_int(m->lowest));
        store_emit_number(e, "highest", store_int(m->highest));
        store_emit_number(e, "speaking", store_int(m->agreed));
        if (m->enc_hi)
            store_emit_number(e, "value_encoding", store_int(m->enc_hi));
        else
            store_emit_null(e, "value_encoding");
        store_emit_object(e, "capabilities");
#define CAP_MEMBER(id, bit, name) store_emit_bool(e, name, (m->caps & (bit)) != 0);
        HF3FS_CAPS(CAP_MEMBER)
#undef CAP_MEMBER
        store_emit_end(e);
        store_emit_end(e);
    }
    store_emit_end(e);
    free(seen);
}

int store_redis_open(const core_config *config, const store_redis_options *options, store_t **out,
                     char *err, size_t errlen)
{
    store_redis *r = hf_xcalloc(1, sizeof *r);
    r->base.ops = &redis__ops;
    r->cfg = *config;
    if (r->cfg.max_pages == 0 || r->cfg.max_pages > CORE_MAX_PAGES_LIMIT)
        r->cfg.max_pages = CORE_MAX_PAGES_LIMIT;
    r->cfglen = wire_cfg_format(&r->cfg, r->cfgs, sizeof r->cfgs);
    r->stripes = options->stripes;
    if (r->stripes > WIRE_MAX_STRIPES) {
        snprintf(err, errlen, "--stripes must be 1 to %d", WIRE_MAX_STRIPES);
        free(r);
        return STORE_ECONFIG;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->seen_lock, NULL);
    if (options->clock) {
        r->has_clock = true;
        r->clock = *options->clock;
    }
    redis_link_options lo = {
        .url = options->url,
        .password = options->password,
        .connect_timeout_ms = options->connect_timeout_ms > 0 ? options->connect_timeout_ms : 1000,
        .command_timeout_ms = options->command_timeout_ms > 0 ? options->command_timeout_ms : 2000,
        .wait_replicas = options->wait_replicas,
        .wait_auto = options->wait_auto,
        .connections = options->connections,
        .max_in_flight = options->max_in_flight,
        .probe_n = 2,
        .probe = {{2, {"MODULE", "LIST"}},
                  {4,
                   {"HF3FS.VERSION", HF3FS_VERSION, WIRE_STR(HF3FS_MODULE_VERSION),
                    WIRE_STR(HF3FS_WIRE_HIGHEST)}}},
        .probe_check = module_check,
        .probe_ctx = r,
    };
    lo.wait_timeout_ms = options->wait_timeout_ms > 0 ? options->wait_timeout_ms
                                                      : lo.command_timeout_ms;
    int rc = redis_link_open(&lo, &r->link, err, errlen);
    if (rc != STORE_OK) {
        pthread_mutex_destroy(&r->lock);
        pthread_mutex_destroy(&r->seen_lock);
        free(r->seen);
        free(r);
        return rc;
    }
    redis__settle_start(r);
    *out = &r->base;
    return STORE_OK;
}
