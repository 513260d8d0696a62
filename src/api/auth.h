/*
 * auth.h: the shared-secret check of --auth-token-file (docs/protocol.md,
 * "Beyond the dialects"). Pure functions of their arguments, for api.c, the
 * unit tests and the fuzzers.
 *
 * Accepted Authorization header values (scheme names case-insensitive, one
 * or more spaces after the scheme, surrounding spaces and tabs ignored):
 *   Bearer TOKEN
 *   Basic base64(USER ":" TOKEN)   any USER, including empty, so that a
 *                                  client given http://:TOKEN@host:port works
 * Anything else is refused: no header, another scheme, bad base64, no colon,
 * credentials over AUTH_MAX_CREDENTIALS bytes.
 *
 * The token is compared in time that depends only on the token's length,
 * never on how many leading bytes of a guess are right.
 */
#ifndef HF_API_AUTH_H
#define HF_API_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#define AUTH_MAX_CREDENTIALS 4096

/* The WWW-Authenticate value of a 401. */
#define AUTH_CHALLENGE "Bearer realm=\"hf3fs-metad\", Basic realm=\"hf3fs-metad\""

typedef enum auth_result {
    AUTH_OK = 0,
    AUTH_MISSING,   /* no Authorization header */
    AUTH_MALFORMED, /* a scheme other than Bearer or Basic, or undecodable credentials */
    AUTH_WRONG,     /* well formed, wrong token */
} auth_result;

/* The secret an Authorization header value (NULL: absent) carries: the
 * Bearer token (pointing into header) or the Basic password (decoded into
 * buf, cap >= AUTH_MAX_CREDENTIALS bytes). AUTH_OK with *secret and
 * *secret_len set, or AUTH_MISSING / AUTH_MALFORMED. */
auth_result auth_secret(const char *header, char *buf, size_t cap, const char **secret,
                        size_t *secret_len);

/* Check an Authorization header value (NULL: absent) against token[0..len-1]
 * (len > 0). */
auth_result auth_check(const char *token, size_t token_len, const char *header);

/* Equal in time independent of where they differ: depends on expected_len only. */
bool auth_same_secret(const char *given, size_t given_len, const char *expected,
                      size_t expected_len);

#endif
