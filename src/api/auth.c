/*
 * auth.c: see auth.h.
 */
#include "api/auth.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

bool auth_same_secret(const char *given, size_t given_len, const char *expected,
                      size_t expected_len)
{
    /* volatile: the compiler may not turn the loop into an early exit. */
    volatile unsigned char diff = given_len != expected_len;
    for (size_t i = 0; i < expected_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)expected[i]);
    }
    return diff == 0;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* The value of a base64 character, or -1 (standard alphabet, RFC 4648). */
static int base64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decode src[0..len-1] (padding optional) into out; -1 if not base64. */
static long base64_decode(const char *src, size_t len, unsigned char *out, size_t cap)
{
    while (len && src[len - 1] == '=')
        len--;
    if (len % 4 == 1)
        return -1;
    size_t n = 0;
    uint32_t acc = 0;
    unsigned bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = base64_value((unsigned char)src[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -1;
            out[n++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)n;
}

/* The password of Basic credentials, decoded into buf (cap bytes). */
static auth_result basic_password(const char *cred, size_t len, char *buf, size_t cap,
                                  const char **secret, size_t *secret_len)
{
    long n = base64_decode(cred, len, (unsigned char *)buf, cap);
    if (n < 0)
        return AUTH_MALFORMED;
    const char *colon = memchr(buf, ':', (size_t)n);
    if (!colon)
        return AUTH_MALFORMED;
    *secret = colon + 1;
    *secret_len = (size_t)n - (size_t)(colon + 1 - buf);
    return AUTH_OK;
}

auth_result auth_secret(const char *header, char *buf, size_t cap, const char **secret,
                        size_t *secret_len)
{
    if (!header)
        return AUTH_MISSING;
    const char *p = header;
    while (is_space(*p))
        p++;
    size_t scheme_len = strcspn(p, " \t");
    const char *cred = p + scheme_len;
    if (!is_space(*cred))
        return AUTH_MALFORMED; /* a scheme without credentials */
    while (is_space(*cred))
        cred++;
    size_t len = strlen(cred);
    while (len && is_space(cred[len - 1]))
        len--;
    if (len == 0 || len > AUTH_MAX_CREDENTIALS * 4 / 3 + 4)
        return AUTH_MALFORMED;
    if (scheme_len == 6 && strncasecmp(p, "Bearer", 6) == 0) {
        *secret = cred;
        *secret_len = len;
        return AUTH_OK;
    }
    if (scheme_len == 5 && strncasecmp(p, "Basic", 5) == 0)
        return basic_password(cred, len, buf, cap, secret, secret_len);
    return AUTH_MALFORMED;
}

auth_result auth_check(const char *token, size_t token_len, const char *header)
{
    char buf[AUTH_MAX_CREDENTIALS];
    const char *secret;
    size_t len;
    auth_result result = auth_secret(header, buf, sizeof buf, &secret, &len);
    if (result != AUTH_OK)
        return result;
    return auth_same_secret(secret, len, token, token_len) ? AUTH_OK : AUTH_WRONG;
}
