/*
 * json.h: the request decoder and the answer writer of the api layer.
 *
 * Decoding. json_parse() reads one JSON text with yajl's callback (SAX) API
 * (after a fast scanner for plain text that drives the same callbacks and
 * leaves everything else, errors included, to yajl: see json.c) and builds a
 * read-only tree of 16-byte json_node records in the arena of a json_doc. There is no per-node malloc and no recursion: the tree is built
 * with an explicit stack, each finished container's children are copied once
 * into one contiguous array, and freeing is dropping the arena. Promises:
 *   - nesting deeper than limits.max_depth, or more than limits.max_nodes
 *     values in all, is an error found while parsing (a 1,000,000-deep
 *     "[[[[..." stops at depth max_depth+1 after max_depth+1 bytes);
 *   - strings are copied into the arena, NUL-terminated after len bytes
 *     (they may contain NUL bytes from \u0000) and are valid UTF-8 (yajl
 *     checks it);
 *   - integers are int64 (outside that range is an error), numbers with a
 *     fraction or an exponent are doubles, a separate type; true, false and
 *     null are three types;
 *   - an object with a repeated key keeps every member; json_get() answers
 *     the last one (last one wins);
 *   - any error leaves a one-line description for a 400 answer.
 * Lifetime: every node, string and json_doc_alloc() block lives until the
 * next json_parse(), json_doc_reset() or json_doc_free() of its doc. A doc is
 * not thread-safe; reuse one per connection to keep allocations rare.
 *
 * Writing. json_buf is a growable text buffer with a maximum size. Writes
 * past the maximum are dropped and set `overflow`, which the caller checks
 * once at the end. json_put_str() escapes '"', '\\' and every control
 * character, and replaces each byte that is not part of valid UTF-8 with
 * \ufffd, so the output is always valid JSON and valid UTF-8 whatever bytes
 * it is given.
 */
#ifndef HF_API_JSON_H
#define HF_API_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "util/buf.h"
#include "util/slice.h"

typedef enum json_type {
    JSON_NULL = 0,
    JSON_FALSE,
    JSON_TRUE,
    JSON_INT,
    JSON_DOUBLE,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

/*
 * One value. ARRAY: items[0..len-1]. OBJECT: items[0..2*len-1] alternate
 * key (a JSON_STRING node) and value, in input order.
 */
typedef struct json_node {
    uint32_t type; /* json_type */
    uint32_t len;  /* STRING: bytes; ARRAY: items; OBJECT: members */
    union {
        int64_t i;
        double d;
        const char *str;
        const struct json_node *items;
    } u;
} json_node;

typedef struct json_limits {
    uint32_t max_depth; /* containers open at once; at most JSON_MAX_DEPTH */
    size_t max_nodes;   /* values in the whole text, keys included */
} json_limits;

#define JSON_MAX_DEPTH 64

typedef struct json_chunk json_chunk;

/* A parsed document and the arena it lives in. Fields are private. */
typedef struct json_doc {
    json_limits limits;
    json_chunk *chunks; /* newest first; the arena allocates from the head */
    size_t chunk_used;
    json_node *stack; /* values whose container is still open */
    size_t stack_len, stack_cap;
    size_t open[JSON_MAX_DEPTH]; /* stack index of each open container */
    uint32_t depth;
    size_t nodes;
    const char *cancel_reason; /* why a callback stopped the parse */
} json_doc;

void json_doc_init(json_doc *doc, const json_limits *limits);
void json_doc_free(json_doc *doc);
/* Forget the document; keeps a small arena chunk for the next one. */
void json_doc_reset(json_doc *doc);

/*
 * Parse text[0..len-1] (the doc is reset first). On success returns 0 and
 * *root. On failure returns -1 and writes a description into err.
 */
int json_parse(json_doc *doc, const char *text, size_t len, const json_node **root, char *err,
               size_t errlen);

/* Scratch memory with the document's lifetime, aligned for any scalar type.
 * Aborts on out-of-memory (util/xalloc.h). */
void *json_doc_alloc(json_doc *doc, size_t size);

/* The value of the last member named `name`, or NULL (also when obj is not an
 * object). Linear in the members. */
const json_node *json_get(const json_node *obj, const char *name);

static inline hf_slice json_slice(const json_node *str)
{
    return (hf_slice){str->u.str, str->len};
}

/* "a string", "an integer", ...: for error messages. */
const char *json_type_name(const json_node *node);

/* ---- writer ---- */

/* The server's buffer (util/buf.h): `overflow` says a write was dropped
 * because of the maximum. */
typedef hf_buf json_buf;

static inline void json_buf_init(json_buf *buf, size_t max)
{
    hf_buf_init(buf, max);
}

static inline void json_buf_free(json_buf *buf)
{
    hf_buf_free(buf);
}

/* Empty the buffer; memory above keep_bytes is given back. */
static inline void json_buf_reset(json_buf *buf, size_t keep_bytes)
{
    hf_buf_reset(buf, keep_bytes);
}

/* Inline, so that a literal's copy is a few moves. */
static inline void json_put_raw(json_buf *buf, const char *text, size_t len)
{
    if (!hf_buf_reserve(buf, len))
        return;
    if (len)
        memcpy(buf->ptr + buf->len, text, len);
    buf->len += len;
}
/* lit must be a string literal (the "" "" makes anything else a compile error). */
#define json_put_lit(buf, lit) json_put_raw((buf), "" lit "", sizeof(lit) - 1)
static inline void json_put_char(json_buf *buf, char c)
{
    if (!hf_buf_reserve(buf, 1))
        return;
    buf->ptr[buf->len++] = c;
}
/* A quoted, escaped string (see the header comment). */
void json_put_str(json_buf *buf, const char *text, size_t len);
void json_put_int(json_buf *buf, int64_t value);
void json_put_uint(json_buf *buf, uint64_t value);
void json_put_bool(json_buf *buf, bool value);
/* "name": (quoted name, a colon); name is trusted ASCII */
void json_put_key(json_buf *buf, const char *name);

#endif
