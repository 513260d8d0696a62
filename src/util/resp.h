/*
 * resp.h: a Redis command in RESP, an array of bulk strings, as hiredis's
 * redisAppendCommandArgv writes it, for both Redis clients
 * (store/redis/pipe.c, cluster/round.c) to hand to redisAppendFormattedCommand. hiredis grows an
 * sds string by a formatted append for each argument; this sizes the command
 * once and writes it in one pass. A striped front end writes one command per
 * stripe of every call (docs/redis-module.md "Stripes").
 */
#ifndef HF_RESP_H
#define HF_RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/buf.h"
#include "util/fmt.h"

/* Appends *argc\r\n then $len\r\narg\r\n for each argument; false (nothing
 * appended) if b's maximum does not allow it (hf_buf_reserve). */
static inline bool hf_resp_command(hf_buf *b, int argc, const char *const *argv,
                                   const size_t *argvlen)
{
    size_t total = 1 + HF_UINT_DIGITS + 2;
    for (int i = 0; i < argc; i++)
        total += 1 + HF_UINT_DIGITS + 2 + argvlen[i] + 2;
    if (!hf_buf_reserve(b, total) || !b->ptr) /* total > 0: ptr is set (for the analyzer) */
        return false;
    char *p = b->ptr + b->len;
    *p++ = '*';
    p = hf_put_uint(p, (uint64_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    for (int i = 0; i < argc; i++) {
        *p++ = '$';
        p = hf_put_uint(p, argvlen[i]);
        *p++ = '\r';
        *p++ = '\n';
        if (argvlen[i])
            memcpy(p, argv[i], argvlen[i]);
        p += argvlen[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    b->len = (size_t)(p - b->ptr);
    return true;
}

#endif
