/*
 * json.c: yajl callbacks -> json_node tree in an arena; the bounded writer.
 *
 * Tree building. Every value yajl reports is pushed on doc->stack as a
 * json_node (a container is pushed when it opens, with its position saved in
 * doc->open[]). When a container closes, the values above it on the stack are
 * its children: they are copied once into a contiguous arena array, the
 * container node points at it, and the stack is cut back to the container.
 * Each node is therefore copied exactly once (stack -> arena), whatever the
 * shape of the text: linear time, no quadratic re-copying. The root is the
 * one value left on the stack at the end.
 *
 * Arena. Chunks of 16 KiB doubling up to 1 MiB, a request larger than half a
 * chunk gets its own chunk (linked behind the head, so the head keeps
 * serving small requests). Reset keeps one chunk of at most 64 KiB: a
 * connection that serves the usual 9 KB bodies allocates nothing per request
 * here once warm.
 */
#include "api/json.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "util/fmt.h"
#include "util/utf8.h"
#include "util/xalloc.h"

#define CHUNK_MIN (16u * 1024)
#define CHUNK_MAX (1024u * 1024)
#define CHUNK_KEEP (64u * 1024)
#define STACK_KEEP 4096u /* nodes kept on the parse stack across resets */

/* Why a callback stopped the parse (compared by content in describe_cancel). */
#define CANCEL_DEPTH "depth"
#define CANCEL_NODES "nodes"

struct json_chunk {
    json_chunk *next;
    size_t size; /* usable bytes in data */
    max_align_t data[];
};

/* ---- arena ---- */

static json_chunk *chunk_new(size_t size)
{
    json_chunk *chunk = hf_xmalloc(sizeof *chunk + size);
    chunk->size = size;
    chunk->next = NULL;
    return chunk;
}

static void *arena_grow(json_doc *doc, size_t size)
{
    size_t want = doc->chunks ? doc->chunks->size * 2 : CHUNK_MIN;
    if (want > CHUNK_MAX)
        want = CHUNK_MAX;
    if (doc->chunks && size > want / 2) {
        /* A big block: its own chunk, behind the head. */
        json_chunk *big = chunk_new(size);
        big->next = doc->chunks->next;
        doc->chunks->next = big;
        return big->data;
    }
    json_chunk *chunk = chunk_new(size > want ? size : want);
    chunk->next = doc->chunks;
    doc->chunks = chunk;
    doc->chunk_used = size;
    return chunk->data;
}

static void *arena_alloc(json_doc *doc, size_t size, size_t align)
{
    json_chunk *head = doc->chunks;
    if (head) {
        size_t at = (doc->chunk_used + align - 1) & ~(align - 1);
        if (at <= head->size && size <= head->size - at) {
            doc->chunk_used = at + size;
            return (char *)head->data + at;
        }
    }
    return arena_grow(doc, size);
}

void *json_doc_alloc(json_doc *doc, size_t size)
{
    return arena_alloc(doc, size ? size : 1, alignof(max_align_t));
}

/* ---- document ---- */

void json_doc_init(json_doc *doc, const json_limits *limits)
{
    memset(doc, 0, sizeof *doc);
    doc->limits = *limits;
    if (doc->limits.max_depth > JSON_MAX_DEPTH)
        doc->limits.max_depth = JSON_MAX_DEPTH;
}

void json_doc_reset(json_doc *doc)
{
    json_chunk *keep = NULL;
    json_chunk *chunk = doc->chunks;
    while (chunk) {
        json_chunk *next = chunk->next;
        if (!keep && chunk->size <= CHUNK_KEEP) {
            keep = chunk;
            keep->next = NULL;
        } else {
            free(chunk);
        }
        chunk = next;
    }
    doc->chunks = keep;
    doc->chunk_used = 0;
    if (doc->stack_cap > STACK_KEEP) {
        free(doc->stack);
        doc->stack = NULL;
        doc->stack_cap = 0;
    }
    doc->stack_len = 0;
    doc->depth = 0;
    doc->nodes = 0;
    doc->cancel_reason = NULL;
}

void json_doc_free(json_doc *doc)
{
    json_doc_reset(doc);
    free(doc->chunks);
    free(doc->stack);
    doc->chunks = NULL;
    doc->stack = NULL;
    doc->stack_cap = 0;
}

/* ---- yajl callbacks ---- */

static int cancel(json_doc *doc, const char *reason)
{
    doc->cancel_reason = reason;
    return 0;
}

static int push_grow(json_doc *doc, json_node node)
{
    if (doc->nodes >= doc->limits.max_nodes)
        return cancel(doc, CANCEL_NODES);
    doc->nodes++;
    doc->stack = hf_grow(doc->stack, &doc->stack_cap, doc->stack_len + 1, sizeof *doc->stack);
    doc->stack[doc->stack_len++] = node;
    return 1;
}

/* One node more; inline where the stack has room (every value of a
 * request passes here), push_grow otherwise. */
static inline int push(json_doc *doc, json_node node)
{
    if (doc->nodes >= doc->limits.max_nodes || doc->stack_len >= doc->stack_cap)
        return push_grow(doc, node);
    doc->nodes++;
    doc->stack[doc->stack_len++] = node;
    return 1;
}

static int on_null(void *ctx)
{
    return push(ctx, (json_node){.type = JSON_NULL});
}

static int on_boolean(void *ctx, int value)
{
    return push(ctx, (json_node){.type = value ? JSON_TRUE : JSON_FALSE});
}

static int on_integer(void *ctx, long long value)
{
    return push(ctx, (json_node){.type = JSON_INT, .u.i = value});
}

static int on_double(void *ctx, double value)
{
    return push(ctx, (json_node){.type = JSON_DOUBLE, .u.d = value});
}

/* A string node, copied into the arena (yajl's pointer is only valid during
 * the callback); `ascii`: the scanner saw only printable ASCII (no need to
 * check its UTF-8 again). */
static int push_string(json_doc *doc, const unsigned char *text, size_t len, bool ascii)
{
    if (len > UINT32_MAX)
        return cancel(doc, "string too long");
    /* Strict UTF-8 (util/utf8.h): a key that is not valid UTF-8 could not
     * be echoed back unchanged, so it is refused like any other malformed
     * JSON. */
    if (!ascii && !hf_utf8_valid(text, len))
        return cancel(doc, "string is not valid UTF-8");
    char *copy = arena_alloc(doc, len + 1, 1);
    if (len)
        memcpy(copy, text, len);
    copy[len] = '\0';
    return push(doc, (json_node){.type = JSON_STRING, .len = (uint32_t)len, .u.str = copy});
}

static int on_string(void *ctx, const unsigned char *text, size_t len)
{
    return push_string(ctx, text, len, false);
}

static int open_container(json_doc *doc, json_type type)
{
    if (doc->depth >= doc->limits.max_depth)
        return cancel(doc, CANCEL_DEPTH);
    if (!push(doc, (json_node){.type = type}))
        return 0;
    doc->open[doc->depth++] = doc->stack_len - 1;
    return 1;
}

static int close_container(json_doc *doc)
{
    size_t at = doc->open[--doc->depth];
    size_t n = doc->stack_len - at - 1;
    json_node *container = &doc->stack[at];
    if (n > UINT32_MAX)
        return cancel(doc, "container too large");
    if (n) {
        json_node *items = arena_alloc(doc, n * sizeof *items, alignof(json_node));
        memcpy(items, container + 1, n * sizeof *items);
        container->u.items = items;
    }
    /* yajl reports an object as key, value, key, value... */
    container->len = (uint32_t)(container->type == JSON_OBJECT ? n / 2 : n);
    doc->stack_len = at + 1;
    return 1;
}

static int on_start_map(void *ctx)
{
    return open_container(ctx, JSON_OBJECT);
}

static int on_start_array(void *ctx)
{
    return open_container(ctx, JSON_ARRAY);
}

static int on_end(void *ctx)
{
    return close_container(ctx);
}

static const yajl_callbacks callbacks = {
    .yajl_null = on_null,
    .yajl_boolean = on_boolean,
    .yajl_integer = on_integer,
    .yajl_double = on_double,
    .yajl_string = on_string,
    .yajl_start_map = on_start_map,
    .yajl_map_key = on_string,
    .yajl_end_map = on_end,
    .yajl_start_array = on_start_array,
    .yajl_end_array = on_end,
};

static void describe_cancel(const json_doc *doc, size_t offset, char *err, size_t errlen)
{
    const char *reason = doc->cancel_reason;
    if (strcmp(reason, CANCEL_DEPTH) == 0)
        snprintf(err, errlen, "Invalid JSON body: nested deeper than %u levels (at byte %zu)",
                 doc->limits.max_depth, offset);
    else if (strcmp(reason, CANCEL_NODES) == 0)
        snprintf(err, errlen, "Invalid JSON body: more than %zu values (at byte %zu)",
                 doc->limits.max_nodes, offset);
    else
        snprintf(err, errlen, "Invalid JSON body: %s (at byte %zu)", reason, offset);
}

/* yajl says "lexical error: invalid char in json text.\n"; keep
 * "invalid char in json text". */
static void describe_yajl_error(yajl_handle yajl, const char *text, size_t len, size_t offset,
                                char *err, size_t errlen)
{
    unsigned char *message = yajl_get_error(yajl, 0, (const unsigned char *)text, len);
    const char *reason = message ? (const char *)message : "invalid JSON";
    const char *colon = strstr(reason, ": ");
    if (colon)
        reason = colon + 2;
    size_t reason_len = strcspn(reason, "\n");
    if (reason_len && reason[reason_len - 1] == '.')
        reason_len--;
    snprintf(err, errlen, "Invalid JSON body: %.*s (at byte %zu)", (int)reason_len, reason, offset);
    if (message)
        yajl_free_error(yajl, message);
}

/*
 * The fast path. Request bodies are almost always plain: objects, arrays,
 * ASCII strings without escapes, small integers, null, true, false. This
 * scanner reads exactly that subset of JSON and drives the same callbacks
 * that yajl would, in the same order, so the tree (and every limit check,
 * which lives in the callbacks) is the same. At the first byte outside the
 * subset, or when a callback refuses, it gives up (-1) and json_parse()
 * parses the text again with yajl from a reset document: everything that is
 * not plain, and every error with its message, is yajl's. What it accepts:
 *   value   = object | array | string | integer | true | false | null
 *   string  = '"' bytes 0x20..0x7e except '"' and '\\' '"'
 *   integer = ['-'] ('0' | [1-9][0-9]*), at most 18 digits (no overflow)
 * with JSON whitespace between tokens and nothing after the value. Anything
 * else (escapes, UTF-8, fractions, exponents, a leading zero, a dangling
 * comma, trailing bytes) is left to yajl. The engines' bodies (9 KB for 128
 * keys) are plain, so they never pay for yajl's generality.
 */
static const unsigned char *skip_space(const unsigned char *p, const unsigned char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

#ifdef __SSE2__
/* Bytes that end a plain string's fast scan: '"', '\\', controls (< 0x20),
 * DEL and everything >= 0x80 (as signed bytes, those are < 0x20 too). Index
 * of the first in 16 bytes, or 16. */
static inline unsigned special16(const unsigned char *p)
{
    __m128i w = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i quote = _mm_cmpeq_epi8(w, _mm_set1_epi8('"'));
    __m128i backslash = _mm_cmpeq_epi8(w, _mm_set1_epi8('\\'));
    __m128i control = _mm_cmplt_epi8(w, _mm_set1_epi8(0x20));
    __m128i del = _mm_cmpeq_epi8(w, _mm_set1_epi8(0x7f));
    __m128i special = _mm_or_si128(_mm_or_si128(quote, backslash), _mm_or_si128(control, del));
    unsigned mask = (unsigned)_mm_movemask_epi8(special);
    return mask ? (unsigned)__builtin_ctz(mask) : 16;
}
#else
/* No byte of the 8 at p ends a plain string's fast scan. */
static bool string8(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t quote = w ^ ('"' * ones), backslash = w ^ ('\\' * ones), del = w ^ (0x7f * ones);
    uint64_t special = ((w - 0x20 * ones) & ~w) | ((quote - ones) & ~quote) |
                       ((backslash - ones) & ~backslash) | ((del - ones) & ~del) | w;
    return (special & highs) == 0;
}
#endif

/* A plain string at p (which is '"'): its bytes to the callback; the byte
 * after the closing quote, or NULL to give up. */
static const unsigned char *fast_string(json_doc *doc, const unsigned char *p,
                                        const unsigned char *end)
{
    const unsigned char *start = ++p;
#ifdef __SSE2__
    while (end - p >= 16) {
        unsigned at = special16(p);
        p += at;
        if (at < 16)
            break;
    }
#else
    while (end - p >= 8 && string8(p))
        p += 8;
#endif
    while (p < end && *p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\')
        p++;
    if (p >= end || *p != '"')
        return NULL;
    return push_string(doc, start, (size_t)(p - start), true) ? p + 1 : NULL;
}

static const unsigned char *fast_scalar(json_doc *doc, const unsigned char *p,
                                        const unsigned char *end)
{
    size_t avail = (size_t)(end - p);
    if (*p == '"')
        return fast_string(doc, p, end);
    if (avail >= 4 && memcmp(p, "true", 4) == 0)
        return on_boolean(doc, 1) ? p + 4 : NULL;
    if (avail >= 5 && memcmp(p, "false", 5) == 0)
        return on_boolean(doc, 0) ? p + 5 : NULL;
    if (avail >= 4 && memcmp(p, "null", 4) == 0)
        return on_null(doc) ? p + 4 : NULL;
    bool negative = *p == '-';
    if (negative)
        p++;
    const unsigned char *digits = p;
    long long value = 0;
    while (p < end && *p >= '0' && *p <= '9' && p - digits < 18)
        value = value * 10 + (*p++ - '0');
    if (p == digits || (p < end && *p >= '0' && *p <= '9') || (*digits == '0' && p - digits > 1))
        return NULL; /* not a number, too long, or a leading zero */
    return on_integer(doc, negative ? -value : value) ? p : NULL;
}

static int fast_parse(json_doc *doc, const unsigned char *p, size_t len)
{
    const unsigned char *end = p + len;
    bool in_object[JSON_MAX_DEPTH];
    int depth = 0;
    enum { VALUE, AFTER_VALUE, KEY } want = VALUE;
    p = skip_space(p, end);
    for (;;) {
        if (p >= end && !(want == AFTER_VALUE && depth == 0))
            return -1;
        if (want == KEY) {
            if (*p != '"' || !(p = fast_string(doc, p, end)))
                return -1;
            p = skip_space(p, end);
            if (p >= end || *p != ':')
                return -1;
            p = skip_space(p + 1, end);
            want = VALUE;
        } else if (want == VALUE) {
            if (*p == '{' || *p == '[') {
                bool object = *p == '{';
                if (depth >= JSON_MAX_DEPTH || !(object ? on_start_map(doc) : on_start_array(doc)))
                    return -1;
                in_object[depth++] = object;
                p = skip_space(p + 1, end);
                if (p < end && *p == (object ? '}' : ']')) {
                    if (!on_end(doc))
                        return -1;
                    depth--;
                    p++;
                    want = AFTER_VALUE;
                } else {
                    want = object ? KEY : VALUE;
                }
                continue;
            }
            if (!(p = fast_scalar(doc, p, end)))
                return -1;
            want = AFTER_VALUE;
        } else {
            p = skip_space(p, end);
            if (depth == 0)
                return p == end ? 0 : -1;
            if (p >= end)
                return -1;
            if (*p == ',') {
                p = skip_space(p + 1, end);
                want = in_object[depth - 1] ? KEY : VALUE;
            } else if (*p == (in_object[depth - 1] ? '}' : ']')) {
                if (!on_end(doc))
                    return -1;
                depth--;
                p++;
            } else {
                return -1;
            }
        }
    }
}

/* yajl allocates through util/xalloc.h, its handle and buffers alike: out of
 * memory aborts there, the server's one place for it, and yajl_alloc never
 * answers NULL. */
static void *yajl_xmalloc(void *ctx, size_t size)
{
    return hf_xmalloc(size);
}
static void *yajl_xrealloc(void *ctx, void *ptr, size_t size)
{
    return hf_xrealloc(ptr, size);
}
static void yajl_xfree(void *ctx, void *ptr)
{
    hf_xfree(ptr);
}
static yajl_alloc_funcs yajl_xalloc = {yajl_xmalloc, yajl_xrealloc, yajl_xfree, NULL};

int json_parse(json_doc *doc, const char *text, size_t len, const json_node **root, char *err,
               size_t errlen)
{
    json_doc_reset(doc);
    if (text && fast_parse(doc, (const unsigned char *)text, len) == 0) {
        json_node *top = arena_alloc(doc, sizeof *top, alignof(json_node));
        *top = doc->stack[0];
        *root = top;
        return 0;
    }
    json_doc_reset(doc);
    yajl_handle yajl = yajl_alloc(&callbacks, &yajl_xalloc, doc); /* never NULL: see yajl_xalloc */
    const unsigned char *bytes = (const unsigned char *)(text ? text : "");
    yajl_status status = yajl_parse(yajl, bytes, len);
    size_t offset = yajl_get_bytes_consumed(yajl);
    if (status == yajl_status_ok) {
        status = yajl_complete_parse(yajl);
        offset = len;
    }
    if (status != yajl_status_ok) {
        if (doc->cancel_reason)
            describe_cancel(doc, offset, err, errlen);
        else
            describe_yajl_error(yajl, text, len, offset, err, errlen);
        yajl_free(yajl);
        return -1;
    }
    yajl_free(yajl);
    json_node *top = arena_alloc(doc, sizeof *top, alignof(json_node));
    *top = doc->stack[0];
    *root = top;
    return 0;
}

const json_node *json_get(const json_node *obj, const char *name)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    size_t name_len = strlen(name);
    for (size_t i = obj->len; i-- > 0;) {
        const json_node *key = &obj->u.items[2 * i];
        if (key->len == name_len && memcmp(key->u.str, name, name_len) == 0)
            return key + 1;
    }
    return NULL;
}

const char *json_type_name(const json_node *node)
{
    switch ((json_type)node->type) {
    case JSON_NULL: return "null";
    case JSON_FALSE:
    case JSON_TRUE: return "a boolean";
    case JSON_INT: return "an integer";
    case JSON_DOUBLE: return "a non-integer number";
    case JSON_STRING: return "a string";
    case JSON_ARRAY: return "a list";
    case JSON_OBJECT: return "an object";
    }
    return "an unknown value";
}

/* ---- writer ---- */

static char *put_escape(char *out, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    *out++ = '\\';
    switch (c) {
    case '"': *out++ = '"'; return out;
    case '\\': *out++ = '\\'; return out;
    case '\b': *out++ = 'b'; return out;
    case '\f': *out++ = 'f'; return out;
    case '\n': *out++ = 'n'; return out;
    case '\r': *out++ = 'r'; return out;
    case '\t': *out++ = 't'; return out;
    default: break;
    }
    memcpy(out, "u00", 3);
    out[3] = hex[c >> 4];
    out[4] = hex[c & 15];
    return out + 5;
}

static bool is_plain(unsigned char c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

/* Whether the 8 bytes at s are all plain (SWAR): answers echo every key,
 * so this loop runs over most bytes of a large answer. */
static bool plain8(const unsigned char *s)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t w;
    memcpy(&w, s, 8);
    uint64_t quote = w ^ ('"' * ones), backslash = w ^ ('\\' * ones);
    uint64_t special = ((w - 0x20 * ones) & ~w)            /* a byte < 0x20 */
                       | ((quote - ones) & ~quote)         /* a '"' */
                       | ((backslash - ones) & ~backslash) /* a '\\' */
                       | w;                                /* a byte >= 0x80 */
    return (special & highs) == 0;
}

void json_put_str(json_buf *buf, const char *text, size_t len)
{
    /* Worst case: every byte becomes a 6-byte escape. */
    if (len > (SIZE_MAX - 2) / 6 || !hf_buf_reserve(buf, 6 * len + 2)) {
        buf->overflow = true;
        return;
    }
    const unsigned char *s = (const unsigned char *)text;
    const unsigned char *end = s + len;
    char *out = buf->ptr + buf->len;
    *out++ = '"';
    while (s < end) {
        const unsigned char *run = s;
        while (end - s >= 8 && plain8(s))
            s += 8;
        while (s < end && is_plain(*s))
            s++;
        memcpy(out, run, (size_t)(s - run));
        out += s - run;
        if (s == end)
            break;
        if (*s < 0x80) {
            out = put_escape(out, *s++);
            continue;
        }
        size_t n = hf_utf8_seq_len(s, (size_t)(end - s));
        if (n) {
            memcpy(out, s, n);
            out += n;
            s += n;
        } else {
            memcpy(out, "\\ufffd", 6);
            out += 6;
            s++;
        }
    }
    *out++ = '"';
    buf->len = (size_t)(out - buf->ptr);
}

void json_put_uint(json_buf *buf, uint64_t value)
{
    char digits[HF_UINT_DIGITS];
    size_t len = (size_t)(hf_put_uint(digits, value) - digits); /* digits written before use */
    json_put_raw(buf, digits, len);
}

void json_put_int(json_buf *buf, int64_t value)
{
    if (value < 0) {
        json_put_char(buf, '-');
        json_put_uint(buf, (uint64_t)0 - (uint64_t)value);
        return;
    }
    json_put_uint(buf, (uint64_t)value);
}

void json_put_bool(json_buf *buf, bool value)
{
    if (value)
        json_put_lit(buf, "true");
    else
        json_put_lit(buf, "false");
}

void json_put_key(json_buf *buf, const char *name)
{
    json_put_char(buf, '"');
    json_put_raw(buf, name, strlen(name));
    json_put_lit(buf, "\":");
}
