/*
 * tenants.c: see tenants.h.
 */
#include "api/tenants.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/auth.h"
#include "api/room.h"
#include "util/hash.h"
#include "util/hf_assert.h"
#include "util/log.h"
#include "util/xalloc.h"

const tenant tenant_default = {
    .name = HF_SLICE_LIT("default"),
    .operator_ = false,
    .quota_pages = TENANT_NO_QUOTA,
    .prefix = {"", 0},
};

/*
 * Two open-addressing tables of ids (index + 1; 0 is empty) with linear
 * probing, at most half full: tokens (ids into tokens[]) and tenant names
 * (ids into tenants[], used while parsing).
 */
struct tenant_table {
    uint64_t seed;
    size_t ntokens, ntenants;
    size_t nclients;   /* tenants other than the operator */
    hf_slice *tokens;  /* each its own allocation */
    uint32_t *owners;  /* tokens[i] belongs to tenants[owners[i]] */
    tenant *tenants;   /* names and prefixes each their own allocation */
    bool *quota_named; /* while parsing: a line named the tenant's quota */
    hf_slice *names;   /* while parsing: tenants[i].name */
    uint32_t *token_slots, *name_slots;
    size_t mask;
};

static uint64_t hash_of(uint64_t seed, const char *p, size_t len)
{
    return hf_fmix64(hf_fnv1a(seed ^ HF_FNV_OFFSET, p, len));
}

/* The slot of key in slots (keys[id - 1] are the entries): where it is, or
 * the empty slot where it would go. Keys are compared in constant time. */
static uint32_t *probe(const tenant_table *t, uint32_t *slots, const hf_slice *keys, const char *p,
                       size_t len)
{
    size_t i = (size_t)hash_of(t->seed, p, len) & t->mask;
    for (;; i = (i + 1) & t->mask) {
        uint32_t id = slots[i];
        if (id == 0 || auth_same_secret(p, len, keys[id - 1].ptr, keys[id - 1].len))
            return &slots[i];
    }
}

static hf_slice copy_slice(const char *p, size_t len)
{
    char *s = hf_xmalloc(len + 1);
    memcpy(s, p, len);
    s[len] = '\0';
    return (hf_slice){s, len};
}

void tenant_table_free(tenant_table *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->ntokens; i++) {
        explicit_bzero((char *)t->tokens[i].ptr, t->tokens[i].len);
        free((char *)t->tokens[i].ptr);
    }
    for (size_t i = 0; i < t->ntenants; i++) {
        free((char *)t->tenants[i].name.ptr);
        free((char *)t->tenants[i].prefix.ptr);
        tenant_room_free(t->tenants[i].room);
    }
    free(t->tokens);
    free(t->owners);
    free(t->tenants);
    free(t->quota_named);
    free(t->names);
    free(t->token_slots);
    free(t->name_slots);
    free(t);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static bool valid_name(const char *p, size_t len)
{
    if (len == 1 && p[0] == '*')
        return true;
    if (len == 0 || len > TENANT_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* "pages=N", N in 0..2^63. */
static bool parse_quota(const char *p, size_t len, uint64_t *pages)
{
    if (len <= 6 || len > 6 + 19 || memcmp(p, "pages=", 6) != 0)
        return false;
    uint64_t v = 0;
    for (size_t i = 6; i < len; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (UINT64_C(1) << 63))
        return false;
    *pages = v;
    return true;
}

/* The tenant named name[0..len), added if new; its index. */
static uint32_t tenant_index(tenant_table *t, const char *name, size_t len)
{
    HF_ASSERT(t->names && valid_name(name, len)); /* while parsing, a checked name */
    uint32_t *slot = probe(t, t->name_slots, t->names, name, len);
    if (*slot)
        return *slot - 1;
    HF_ASSERT(2 * (t->ntenants + 1) <= t->mask + 1); /* the table stays at most half full */
    tenant *x = &t->tenants[t->ntenants];
    x->name = copy_slice(name, len);
    t->names[t->ntenants] = x->name;
    x->operator_ = len == 1 && name[0] == '*';
    x->quota_pages = TENANT_NO_QUOTA;
    x->room = x->operator_ ? NULL : tenant_room_new();
    bool plain = x->operator_ || hf_slice_eq(x->name, tenant_default.name);
    char *prefix = hf_xmalloc(len + 3);
    prefix[0] = TENANT_NS_BYTE;
    memcpy(prefix + 1, name, len);
    prefix[len + 1] = TENANT_NS_BYTE;
    prefix[len + 2] = '\0';
    x->prefix = (hf_slice){prefix, plain ? 0 : len + 2};
    *slot = (uint32_t)++t->ntenants;
    return *slot - 1;
}

/* One line's words (at most 4 looked at); their count. */
static size_t split_words(const char *p, const char *end, hf_slice *words, size_t max)
{
    size_t n = 0;
    while (p < end) {
        while (p < end && is_blank(*p))
            p++;
        if (p == end)
            break;
        const char *start = p;
        while (p < end && !is_blank(*p))
            p++;
        if (n < max)
            words[n] = (hf_slice){start, (size_t)(p - start)};
        n++;
    }
    return n;
}

/* Add one line's words; 0 or -1 with err. */
static int add_line(tenant_table *t, const hf_slice *w, size_t nwords, size_t line, char *err,
                    size_t errlen)
{
    HF_ASSERT(t->quota_named && nwords >= 1 && w[0].len > 0); /* while parsing, a word */
    if (nwords > 3)
        return hf_errf(err, errlen, "line %zu has %zu words; a line is TOKEN [TENANT [pages=N]]",
                       line, nwords);
    if (w[0].len > TENANT_TOKEN_MAX)
        return hf_errf(err, errlen, "line %zu: the token is over %d bytes", line, TENANT_TOKEN_MAX);
    for (size_t i = 0; i < w[0].len; i++)
        if (w[0].ptr[i] <= ' ' || w[0].ptr[i] > '~')
            return hf_errf(err, errlen,
                           "line %zu: the token holds a control character or a "
                           "non-ASCII byte; a token is one word of printable ASCII",
                           line);
    hf_slice name = nwords > 1 ? w[1] : tenant_default.name;
    if (!valid_name(name.ptr, name.len))
        return hf_errf(err, errlen,
                       "line %zu: tenant '%.*s' is not a name of 1 to %d characters "
                       "a-z 0-9 _ -, nor *",
                       line, (int)(name.len > 80 ? 80 : name.len), name.ptr, TENANT_NAME_MAX);
    uint64_t quota = TENANT_NO_QUOTA;
    if (nwords > 2 && !parse_quota(w[2].ptr, w[2].len, &quota))
        return hf_errf(err, errlen, "line %zu: '%.*s' is not pages=N (N a whole number of pages)",
                       line, (int)(w[2].len > 80 ? 80 : w[2].len), w[2].ptr);
    uint32_t *slot = probe(t, t->token_slots, t->tokens, w[0].ptr, w[0].len);
    if (*slot)
        return hf_errf(err, errlen, "line %zu: the token is listed twice", line);
    uint32_t owner = tenant_index(t, name.ptr, name.len);
    tenant *x = &t->tenants[owner];
    if (nwords > 2) {
        if (x->operator_)
            return hf_errf(err, errlen, "line %zu: the operator * has no pages to bound", line);
        if (t->quota_named[owner] && x->quota_pages != quota)
            return hf_errf(err, errlen, "line %zu: tenant '%s' was given another quota before",
                           line, x->name.ptr);
        t->quota_named[owner] = true;
        x->quota_pages = quota;
        HF_ASSERT(!x->operator_ && x->room); /* a quota is a tenant's, never the operator's */
    }
    HF_ASSERT(2 * (t->ntokens + 1) <= t->mask + 1);
    t->tokens[t->ntokens] = copy_slice(w[0].ptr, w[0].len);
    t->owners[t->ntokens] = owner;
    *slot = (uint32_t)++t->ntokens;
    return 0;
}

int tenant_table_parse(const char *text, size_t len, uint64_t seed, tenant_table **out, char *err,
                       size_t errlen)
{
    *out = NULL;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    tenant_table *t = hf_xcalloc(1, sizeof *t);
    t->seed = seed;
    size_t slots = 4;
    while (slots < 2 * lines)
        slots *= 2;
    t->mask = slots - 1;
    t->tokens = hf_xcalloc(lines, sizeof *t->tokens);
    t->owners = hf_xcalloc(lines, sizeof *t->owners);
    t->tenants = hf_xcalloc(lines, sizeof *t->tenants);
    t->quota_named = hf_xcalloc(lines, sizeof *t->quota_named);
    t->names = hf_xcalloc(lines, sizeof *t->names);
    t->token_slots = hf_xcalloc(slots, sizeof *t->token_slots);
    t->name_slots = hf_xcalloc(slots, sizeof *t->name_slots);
    const char *p = text, *end = text + len;
    for (size_t line = 1; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        if (stop > p && stop[-1] == '\r')
            stop--;
        hf_slice words[4];
        size_t n = split_words(p, stop, words, 4);
        if (n > 0 && words[0].ptr[0] != '#' && add_line(t, words, n, line, err, errlen) != 0) {
            tenant_table_free(t);
            return -1;
        }
        p = nl ? nl + 1 : end;
    }
    if (t->ntokens == 0) {
        tenant_table_free(t);
        return hf_errf(err, errlen,
                       "holds no token (it is empty, or only blank lines and "
                       "comments)");
    }
    for (size_t i = 0; i < t->ntenants; i++)
        t->nclients += !t->tenants[i].operator_;
    free(t->name_slots);
    free(t->names);
    free(t->quota_named);
    t->name_slots = NULL;
    t->names = NULL;
    t->quota_named = NULL;
    *out = t;
    return 0;
}

const tenant *tenant_table_find(const tenant_table *t, const char *secret, size_t len)
{
    HF_ASSERT(!t->names && t->ntokens > 0); /* a table parsed whole */
    uint32_t id = *probe(t, t->token_slots, t->tokens, secret, len);
    return id ? &t->tenants[t->owners[id - 1]] : NULL;
}

size_t tenant_table_tenants(const tenant_table *t)
{
    return t->nclients;
}

size_t tenant_table_tokens(const tenant_table *t)
{
    return t->ntokens;
}

size_t tenant_table_names(const tenant_table *t)
{
    return t->ntenants;
}

void tenant_split(hf_slice store_ns, hf_slice *name, hf_slice *ns)
{
    const char *end;
    if (store_ns.len < 3 || store_ns.ptr[0] != TENANT_NS_BYTE ||
        !(end = memchr(store_ns.ptr + 1, TENANT_NS_BYTE, store_ns.len - 1))) {
        *name = tenant_default.name;
        *ns = store_ns;
        return;
    }
    *name = (hf_slice){store_ns.ptr + 1, (size_t)(end - store_ns.ptr - 1)};
    *ns = (hf_slice){end + 1, store_ns.len - (size_t)(end + 1 - store_ns.ptr)};
}
