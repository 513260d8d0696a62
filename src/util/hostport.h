/*
 * hostport.h: the pieces of a network address that every parser of one
 * shares: "host:port" (--store's redis:// URL, the seed nodes and MOVED/ASK
 * targets of a Redis Cluster, the client library's http:// URL) and the hex
 * digits of a %XX escape. Header-only and on the C library alone: lib/
 * includes it too (by its path: the client library sees no other server
 * header).
 *
 * hf_hostport_parse reads s[0..len): "host", "host:port", "[v6]" or
 * "[v6]:port". The port is decimal digits only, 1..65535 (leading zeros
 * allowed). Nothing is copied: the result points into s. The first error
 * found, in this order:
 *   HF_HOSTPORT_EBRACKET  "[" without "]"
 *   HF_HOSTPORT_ESYNTAX   something other than ":port" after "[v6]"
 *   HF_HOSTPORT_EPORT     a port that is not 1..65535 (or empty, or none
 *                         under HF_HOSTPORT_NEED_PORT)
 *   HF_HOSTPORT_EHOST     an empty host (unless HF_HOSTPORT_EMPTY_HOST)
 */
#ifndef HF_UTIL_HOSTPORT_H
#define HF_UTIL_HOSTPORT_H

#include <stddef.h>
#include <string.h>

/* The parser's codes: -501..-599, a range of their own (docs/architecture.md
 * "Errors and memory"); hf_hostport_strerror names one. */
enum {
    HF_HOSTPORT_OK = 0,
    HF_HOSTPORT_EFIRST = -501,
    HF_HOSTPORT_EBRACKET = -501,
    HF_HOSTPORT_ESYNTAX = -502,
    HF_HOSTPORT_EPORT = -503,
    HF_HOSTPORT_EHOST = -504,
    HF_HOSTPORT_ELAST = -599,
};

/* Flags of hf_hostport_parse. */
enum {
    HF_HOSTPORT_NEED_PORT = 1u << 0,  /* "host" alone is an error */
    HF_HOSTPORT_EMPTY_HOST = 1u << 1, /* ":port" is accepted (the caller knows the host) */
    /* Without brackets the port follows the last colon, so that an IPv6
     * address may go bare ("::1:7000"), as Redis Cluster writes its nodes;
     * else the first colon ends the host. */
    HF_HOSTPORT_BARE_V6 = 1u << 2,
};

typedef struct hf_hostport {
    const char *host; /* without its brackets */
    size_t host_len;
    const char *port_text; /* the port's digits as written; NULL if no port */
    size_t port_len;
    int port; /* 1..65535; 0 if no port */
} hf_hostport;

/* The value of a hex digit, or -1. */
static inline int hf_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A sentence for an HF_HOSTPORT_E* code (and for HF_HOSTPORT_OK); never NULL. */
static inline const char *hf_hostport_strerror(int err)
{
    switch (err) {
    case HF_HOSTPORT_OK: return "a valid host:port";
    case HF_HOSTPORT_EBRACKET: return "unclosed [ in the host";
    case HF_HOSTPORT_ESYNTAX: return "malformed host:port";
    case HF_HOSTPORT_EPORT: return "the port must be 1..65535";
    case HF_HOSTPORT_EHOST: return "no host";
    default: return "unknown host:port error";
    }
}

static inline int hf_hostport_parse(const char *s, size_t len, unsigned flags, hf_hostport *out)
{
    const char *end = s + len, *colon = NULL;
    *out = (hf_hostport){s, len, NULL, 0, 0};
    if (len && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close)
            return HF_HOSTPORT_EBRACKET;
        out->host = s + 1;
        out->host_len = (size_t)(close - s - 1);
        if (close + 1 < end && close[1] != ':')
            return HF_HOSTPORT_ESYNTAX;
        colon = close + 1 < end ? close + 1 : NULL;
    } else {
        for (const char *p = s; p < end && (!colon || (flags & HF_HOSTPORT_BARE_V6)); p++)
            if (*p == ':')
                colon = p;
        out->host_len = colon ? (size_t)(colon - s) : len;
    }
    if (colon) {
        long port = 0;
        for (const char *d = colon + 1; d < end; d++) {
            if (*d < '0' || *d > '9' || port > 65535)
                return HF_HOSTPORT_EPORT;
            port = port * 10 + (*d - '0');
        }
        if (port < 1 || port > 65535)
            return HF_HOSTPORT_EPORT;
        out->port_text = colon + 1;
        out->port_len = (size_t)(end - colon - 1);
        out->port = (int)port;
    } else if (flags & HF_HOSTPORT_NEED_PORT) {
        return HF_HOSTPORT_EPORT;
    }
    if (out->host_len == 0 && !(flags & HF_HOSTPORT_EMPTY_HOST))
        return HF_HOSTPORT_EHOST;
    return HF_HOSTPORT_OK;
}

#endif
