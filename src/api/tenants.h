/*
 * tenants.h: the tenants of --auth-token-file, and the namespaces each sees
 * (docs/operations.md, "Tokens and tenants"). Pure functions of their
 * arguments, for api.c, main.c, the unit tests and the fuzzers.
 *
 * The file: one line per token, "TOKEN [TENANT [pages=N]]"; blank lines and
 * lines whose first non-blank character is '#' are ignored; words are
 * separated by spaces or tabs; lines end in LF (a CR before it is dropped).
 *   TOKEN   1..1024 printable ASCII characters but space (a token may not
 *           begin with '#'); each token at most once in the file
 *   TENANT  [a-z0-9_-]{1,64}, or "*" (the operator: it may read /metrics,
 *           /v1/stats and the debug routes of every tenant, nothing else);
 *           absent: "default"
 *   pages=N the tenant's quota: its pools together have at most N pages
 *           (N a decimal in 0..2^63; not for "*"). The lines of one tenant
 *           name no quota or all the same one.
 * Anything else makes the whole file invalid, with a sentence saying which
 * line and why.
 *
 * Namespaces. The tenant "default" (also every request when there is no
 * token file) uses the namespaces its requests name, unchanged, so existing
 * data stays where it was. Every other tenant T stores namespace NS as the
 * bytes TENANT_NS_BYTE T TENANT_NS_BYTE NS: a namespace of its own that no
 * request can name, since namespaces beginning with TENANT_NS_BYTE are
 * refused (api.c). Every engine gets the isolation without knowing about
 * it; over Redis the tenant is part of the value's key.
 *
 * Lookup: a hash table of the tokens with a random seed; the token found by
 * the hash is compared in constant time (auth_same_secret).
 */
#ifndef HF_API_TENANTS_H
#define HF_API_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/slice.h"

#define TENANT_NS_BYTE '\x01'
#define TENANT_NAME_MAX 64
#define TENANT_TOKEN_MAX 1024
#define TENANT_NO_QUOTA UINT64_MAX
/* The largest token file read. */
#define TENANT_FILE_MAX (1024 * 1024)

typedef struct tenant {
    hf_slice name;        /* NUL-terminated too */
    bool operator_;       /* the tenant "*" */
    uint64_t quota_pages; /* TENANT_NO_QUOTA: none */
    hf_slice prefix;      /* of its store namespaces: empty for "default" */
    /* its requests running at once (api.c, --tenant-max-in-flight); NULL
     * for the operator and tenant_default */
    struct tenant_room *room;
} tenant;

/* The tenant of every request when there is no token file. */
extern const tenant tenant_default;

typedef struct tenant_table tenant_table;

/* Parse a token file's text[0..len). 0 and *out (free with
 * tenant_table_free), or -1 with a sentence in err. seed: the hash's (any
 * value; random in the server). Aborts on out-of-memory. */
int tenant_table_parse(const char *text, size_t len, uint64_t seed, tenant_table **out, char *err,
                       size_t errlen);
/* Zeroes the tokens, then frees. NULL is fine. */
void tenant_table_free(tenant_table *t);

/* The tenant whose token is secret[0..len), or NULL. */
const tenant *tenant_table_find(const tenant_table *t, const char *secret, size_t len);
/* Tenants other than the operator. */
size_t tenant_table_tenants(const tenant_table *t);
/* Tokens, and tenants including the operator, for the log line. */
size_t tenant_table_tokens(const tenant_table *t);
size_t tenant_table_names(const tenant_table *t);

/* Split a store namespace into its tenant's name ("default" when it has no
 * prefix) and the namespace that tenant's requests name. */
void tenant_split(hf_slice store_ns, hf_slice *name, hf_slice *ns);

#endif
