/*
 * command.c: one command of the Redis engine: its arguments, built in one
 * arena (internal.h, `args`), its call through the link (link.h), and the
 * judgment of its reply into the STORE_* code that the operations answer.
 */
#include "store/redis/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/fmt.h"
#include "util/log.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* ----------------------------------------------------------- arguments */

enum { ARGS_FIRST = 8, ARGS_FIRST_BYTES = 2048 };

/* Room for a next argument of len bytes, to be written at the pointer
 * returned. */
char *redis__args_room(args *a, size_t len)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : ARGS_FIRST, old = a->cap;
        size_t entry = 2 * sizeof(size_t) + sizeof(const char *);
        char *block = hf_xreallocarray(a->off, cap, entry);
        /* len moves up from old to cap entries after off (argv is filled
         * later, by cmd_of) */
        memmove(block + cap * sizeof(size_t), block + old * sizeof(size_t), a->n * sizeof(size_t));
        a->off = (size_t *)(void *)block;
        a->len = (size_t *)(void *)(block + cap * sizeof(size_t));
        a->argv = (const char **)(void *)(block + 2 * cap * sizeof(size_t));
        a->cap = cap;
    }
    if (a->used + len > a->bufcap) {
        while (a->used + len > a->bufcap)
            a->bufcap = a->bufcap ? a->bufcap * 2 : ARGS_FIRST_BYTES;
        a->buf = hf_xrealloc(a->buf, a->bufcap);
    }
    a->off[a->n] = a->used;
    a->len[a->n] = len;
    a->n++;
    a->used += len;
    return a->buf + a->used - len;
}

/* The last argument is `len` bytes long (at most what args_room gave it). */
void redis__args_trim(args *a, size_t len)
{
    a->used -= a->len[a->n - 1] - len;
    a->len[a->n - 1] = len;
}

void redis__args_add(args *a, const void *p, size_t len)
{
    if (len)
        memcpy(redis__args_room(a, len), p, len);
    else
        redis__args_room(a, 0);
}

void redis__args_str(args *a, const char *s)
{
    redis__args_add(a, s, strlen(s));
}

void redis__args_int(args *a, int64_t v)
{
    char tmp[1 + HF_UINT_DIGITS], *p = tmp;
    if (v < 0)
        *p++ = '-';
    p = hf_put_uint(p, v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v);
    redis__args_add(a, tmp, (size_t)(p - tmp));
}

void redis__args_keys(args *a, const hf_slice *keys, size_t n)
{
    /* packed when they are hex digests: shorter than the room */
    redis__args_trim(a, wire_keys_put(redis__args_room(a, wire_keys_len(keys, n)), keys, n));
}

void redis__args_pages(args *a, const int64_t *v, size_t n)
{
    hf_buf b = {0};
    wire_i64_append(&b, v, n);
    redis__args_add(a, b.ptr, b.len);
    hf_buf_free(&b);
}

void redis__args_free(args *a)
{
    free(a->off); /* with len and argv */
    free(a->buf);
    memset(a, 0, sizeof *a);
}

/* CMD key: a value's key (its slot routes the command). */
void redis__args_cmd_key(args *a, const char *cmd, const char *key, size_t klen, int slot)
{
    memset(a, 0, sizeof *a);
    redis__args_str(a, cmd);
    redis__args_add(a, key, klen);
    a->slot = slot;
}

/* CMD key for the anchor (stripe 0) of ns. */
void redis__args_cmd(args *a, const char *cmd, hf_slice ns)
{
    memset(a, 0, sizeof *a);
    redis__args_str(a, cmd);
    size_t klen = WIRE_VALUE_KEY_LEN(ns.len);
    char *k = redis__args_room(a, klen);
    wire_value_key(ns, k, klen);
    a->slot = redis_link_slot(k, klen);
}

/* The `now` every command carries: the test clock's, or 0 (Redis's). */
int64_t redis__now_of(const store_redis *r)
{
    return r->has_clock ? r->clock.now_ms(r->clock.ctx) : 0;
}

/* The command of a's arguments, which a keeps (free a after the call). */
redis_cmd redis__cmd_of(args *a)
{
    for (size_t i = 0; i < a->n; i++)
        a->argv[i] = a->buf + a->off[i];
    return (redis_cmd){
        .argc = (int)a->n, .argv = a->argv, .argvlen = a->len, .slot = a->slot, .node = -1};
}

/* ---------------------------------------------------------------- calls */

/* Whether rep is an error that begins with prefix. */
bool redis__starts(const redisReply *rep, const char *prefix)
{
    size_t n = strlen(prefix);
    return rep->type == REDIS_REPLY_ERROR && rep->len >= n && memcmp(rep->str, prefix, n) == 0;
}

/* Errors with which Redis refuses a command before running it. */
bool redis__refused_before_running(const redisReply *rep)
{
    static const char *const codes[] = {
        "BUSY",       "LOADING",     "OOM",       "READONLY",
        "MASTERDOWN", "NOAUTH",      "NOPERM",    "MISCONF",
        "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN",  "MOVED",
        "ASK",        "CROSSSLOT",   "WRONGTYPE", "ERR unknown command",
    };
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        if (redis__starts(rep, codes[i]))
            return true;
    return false;
}

/*
 * The code of a command's outcome: STORE_OK (*out keeps the reply, which is
 * not an error), or the code (reply freed): the link's (unavailable, outcome
 * unknown), the module's refusals (-ENOPOOL, -EINVAL, -EEXIST; -ESTRIPES is
 * RESTRIPE), Redis's refusals before running (-OOM, -LOADING...:
 * unavailable), or any other error: the module answers an error only for a
 * call it did not run (a malformed argument: a bug here), so nothing
 * changed either.
 */
int redis__judge(store_redis *r, redis_cmd *c, redisReply **out)
{
    *out = NULL;
    if (c->code != STORE_OK)
        return c->code;
    redisReply *rep = c->reply;
    c->reply = NULL;
    if (rep->type != REDIS_REPLY_ERROR) {
        *out = rep;
        return STORE_OK;
    }
    int code = STORE_EUNAVAILABLE;
    if (redis__starts(rep, "ENOPOOL")) {
        code = STORE_ENOPOOL;
    } else if (redis__starts(rep, "ESTRIPES")) {
        code = RESTRIPE;
    } else if (redis__starts(rep, "EEXIST")) {
        code = STORE_EEXIST;
    } else if (redis__starts(rep, "EINVAL")) {
        code = STORE_EINVAL;
    } else if (redis__refused_before_running(rep)) {
        redis_link_count_error(r->link, false);
        log_msg(LOG_WARN, "Redis refused a call: %s", rep->str);
    } else {
        redis_link_count_error(r->link, false);
        log_msg(LOG_ERROR, "Redis answered an error: %s", rep->str);
    }
    freeReplyObject(rep);
    return code;
}

/* Run the command of a (freed): STORE_OK and *out (not an error reply), or
 * the code. */
int redis__call(store_redis *r, args *a, bool change, redisReply **out)
{
    redis_cmd c = redis__cmd_of(a);
    redis_link_exec(r->link, &c, 1, change);
    int code = redis__judge(r, &c, out);
    redis__args_free(a);
    return code;
}

/* A reply that is not what the command answers: logged, counted, freed (if
 * given); STORE_EUNAVAILABLE. */
int redis__malformed(store_redis *r, redisReply *rep, const char *what)
{
    log_msg(LOG_ERROR, "Redis: malformed reply to %s (type %d)", what, rep ? rep->type : -1);
    redis_link_count_error(r->link, false);
    if (rep)
        freeReplyObject(rep);
    return STORE_EUNAVAILABLE;
}

/* An integer reply, or the number a string reply spells; else -1. */
int64_t redis__int_of(const redisReply *e)
{
    if (e->type == REDIS_REPLY_INTEGER)
        return e->integer;
    if (e->type == REDIS_REPLY_STRING) {
        char tmp[32];
        size_t n = e->len < sizeof tmp - 1 ? e->len : sizeof tmp - 1;
        memcpy(tmp, e->str, n);
        tmp[n] = '\0';
        return strtoll(tmp, NULL, 10);
    }
    return -1;
}

/* The outcome of a command sent to every primary: STORE_OK if each one
 * answered without error (no primary at all: unavailable). The replies
 * judged STORE_OK stay in their commands. */
int redis__judge_all(store_redis *r, redis_cmd *cmds, size_t n)
{
    int code = n ? STORE_OK : STORE_EUNAVAILABLE;
    for (size_t i = 0; i < n; i++) {
        redisReply *rep;
        int rc = redis__judge(r, &cmds[i], &rep);
        if (rc == STORE_OK)
            cmds[i].reply = rep; /* given back to the command */
        else if (code == STORE_OK || rc == STORE_EUNCERTAIN)
            code = rc == STORE_ENOPOOL || rc == STORE_EINVAL || rc == RESTRIPE ? STORE_EUNAVAILABLE
                                                                               : rc;
    }
    return code;
}
