/*
 * open.c: store_redis_open: the link to Redis (link.h) with its probe,
 * MODULE LIST, which must show the module of exactly this front end's
 * version (redis.h).
 */
#include "store/redis/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xalloc.h"
#include "util/log.h"
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

#define LOAD_HOWTO                                                                                 \
    "start it with `redis-server --loadmodule /path/to/hf3fs_metad_redis.so` or add "              \
    "`loadmodule /path/to/hf3fs_metad_redis.so` to redis.conf (the .so is built by `make` "        \
    "next to hf3fs-metad)"

/* The probe's checker (link.h): MODULE LIST shows the module, of
 * exactly this front end's version. */
static int module_check(const redisReply *rep, const char *addr, char *err, size_t errlen)
{
    if (rep->type == REDIS_REPLY_ERROR) {
        bool perm = strncmp(rep->str, "NOPERM", 6) == 0 || strncmp(rep->str, "NOAUTH", 6) == 0;
        snprintf(err, errlen, "Redis at %s: MODULE LIST: %s%s", addr, rep->str,
                 perm ? " (the user must be allowed MODULE LIST: the front end checks the "
                        "hf3fs-metad module with it)"
                      : "");
        return perm ? STORE_EAUTH : STORE_EUNAVAILABLE;
    }
    if (rep->type != REDIS_REPLY_ARRAY) {
        snprintf(err, errlen, "Redis at %s: MODULE LIST: unexpected reply", addr);
        return STORE_EUNAVAILABLE;
    }
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *name = module_field(rep->element[i], "name");
        if (!name || name->type != REDIS_REPLY_STRING || name->len != strlen(HF3FS_MODULE_NAME) ||
            memcmp(name->str, HF3FS_MODULE_NAME, name->len) != 0)
            continue;
        const redisReply *ver = module_field(rep->element[i], "ver");
        long long v = ver ? redis__int_of(ver) : -1;
        if (v == HF3FS_MODULE_VERSION)
            return STORE_OK;
        snprintf(err, errlen,
                 "Redis at %s has the hf3fs-metad module (%s) of version %lld loaded, and this "
                 "front end needs version %d: load the hf3fs_metad_redis.so built with this "
                 "hf3fs-metad (%s)",
                 addr, HF3FS_MODULE_NAME, v, HF3FS_MODULE_VERSION, LOAD_HOWTO);
        return STORE_ENOMODULE;
    }
    snprintf(err, errlen, "Redis at %s has not loaded the hf3fs-metad module (%s version %d): %s",
             addr, HF3FS_MODULE_NAME, HF3FS_MODULE_VERSION, LOAD_HOWTO);
    return STORE_ENOMODULE;
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
        .connections = options->connections,
        .max_in_flight = options->max_in_flight,
        .probe_argc = 2,
        .probe_argv = {"MODULE", "LIST"},
        .probe_check = module_check,
    };
    lo.wait_timeout_ms = options->wait_timeout_ms > 0 ? options->wait_timeout_ms
                                                      : lo.command_timeout_ms;
    int rc = redis_link_open(&lo, &r->link, err, errlen);
    if (rc != STORE_OK) {
        pthread_mutex_destroy(&r->lock);
        free(r);
        return rc;
    }
    if (options->wait_auto) {
        char why[300];
        bool all = redis_link_replicated(r->link, why, sizeof why);
        redis_link_set_wait(r->link, all);
        if (all)
            log_msg(LOG_INFO, "redis-wait 1 (the default): every primary has a connected "
                              "replica, so a change is acknowledged once one has it too "
                              "(--redis-wait 0 turns it off)");
        else
            log_msg(LOG_INFO,
                    "redis-wait 0 (the default): %s, so a change is acknowledged "
                    "once its primary applied it",
                    why);
    }
    redis__settle_start(r);
    *out = &r->base;
    return STORE_OK;
}
