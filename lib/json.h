/*
 * json.h: the client's own small JSON, both ways (RFC 8259, UTF-8 only).
 *
 * WRITER. hf3fs_meta__jw appends compact JSON to a buffer (buf.h), placing
 * commas itself. Strings are checked to be valid UTF-8 and escaped (", \ and
 * control characters). Errors are sticky: hf3fs_meta__jw_error() after the
 * last call gives 0, HF3FS_META_EINVAL (invalid UTF-8, nesting deeper than
 * HF3FS_META__JW_MAX_DEPTH, a key outside an object) or the buffer's error.
 *
 * READER. hf3fs_meta__json_parse() decodes one document into a flat array of
 * nodes in document order (a container is followed by its children), without
 * recursion: open containers are kept on a fixed stack of max_depth entries,
 * so no input can exhaust the C stack. It is strict: exactly one value with
 * optional white space around it, no comments, no trailing commas, no leading
 * zeros, no NaN, no control characters or invalid UTF-8 in strings, no lone
 * surrogates in \u escapes. Memory is bounded by the input: at most one node
 * per input byte and decoded strings no longer than the input. Errors:
 * HF3FS_META_EPROTO (with a static reason and the byte offset) or
 * HF3FS_META_ENOMEM.
 *
 * Layout of the nodes: every node has `end`, the index just past its subtree,
 * so the next sibling of node i is nodes[i].end. An array's elements start at
 * i + 1; an object's members are (key, value) node pairs starting at i + 1,
 * the key being a STRING node whose end is its value's index. Strings point
 * into the document's own decoded copy (and may contain NUL bytes: use len);
 * numbers point at their text in the caller's input, which must therefore
 * outlive the document.
 */
#ifndef HF3FS_META_LIB_JSON_H
#define HF3FS_META_LIB_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

/* ---- writer ---- */

#define HF3FS_META__JW_MAX_DEPTH 16

typedef struct hf3fs_meta__jw {
    hf3fs_meta__buf *out;
    int error;
    unsigned depth;
    bool after_key;                               /* the next value follows "key": */
    bool has_items[HF3FS_META__JW_MAX_DEPTH + 1]; /* per open container */
    bool is_object[HF3FS_META__JW_MAX_DEPTH + 1];
} hf3fs_meta__jw;

void hf3fs_meta__jw_init(hf3fs_meta__jw *w, hf3fs_meta__buf *out);
void hf3fs_meta__jw_object_begin(hf3fs_meta__jw *w);
void hf3fs_meta__jw_object_end(hf3fs_meta__jw *w);
void hf3fs_meta__jw_array_begin(hf3fs_meta__jw *w);
void hf3fs_meta__jw_array_end(hf3fs_meta__jw *w);
void hf3fs_meta__jw_key(hf3fs_meta__jw *w, const char *name);
void hf3fs_meta__jw_string(hf3fs_meta__jw *w, const char *s, size_t len);
void hf3fs_meta__jw_cstring(hf3fs_meta__jw *w, const char *s); /* NULL: EINVAL */
void hf3fs_meta__jw_int(hf3fs_meta__jw *w, int64_t v);
void hf3fs_meta__jw_bool(hf3fs_meta__jw *w, bool v);
int hf3fs_meta__jw_error(const hf3fs_meta__jw *w);

/* True if s[0..len-1] is valid UTF-8 (no overlongs, surrogates, > U+10FFFF). */
bool hf3fs_meta__utf8_valid(const char *s, size_t len);

/* ---- reader ---- */

#define HF3FS_META__JSON_NONE UINT32_MAX
#define HF3FS_META__JSON_DEFAULT_DEPTH 32

enum hf3fs_meta__json_type {
    HF3FS_META__JSON_NULL,
    HF3FS_META__JSON_FALSE,
    HF3FS_META__JSON_TRUE,
    HF3FS_META__JSON_NUMBER,
    HF3FS_META__JSON_STRING,
    HF3FS_META__JSON_ARRAY,
    HF3FS_META__JSON_OBJECT,
};

typedef struct hf3fs_meta__json_node {
    uint8_t type;
    uint8_t is_integer; /* NUMBER without fraction or exponent */
    uint32_t end;       /* index just past this node's subtree */
    uint32_t count;     /* ARRAY: elements; OBJECT: members */
    uint32_t off;       /* STRING: in doc->strings; NUMBER: in the input */
    uint32_t len;
} hf3fs_meta__json_node;

typedef struct hf3fs_meta__json_doc {
    hf3fs_meta__json_node *nodes;
    uint32_t n_nodes;
    uint32_t cap_nodes;
    char *strings;       /* decoded string bytes */
    const char *input;   /* the parsed text (borrowed) */
    const char *error;   /* static reason after EPROTO */
    size_t error_offset; /* byte offset of the error in the input */
} hf3fs_meta__json_doc;

/* Parse text[0..len-1]; max_depth >= 1 bounds the nesting. On success the
 * root is node 0. The doc must be released with hf3fs_meta__json_free, also
 * after an error. Inputs over 4 GiB - 1 are refused (EPROTO). */
int hf3fs_meta__json_parse(hf3fs_meta__json_doc *doc, const char *text, size_t len,
                           unsigned max_depth);
void hf3fs_meta__json_free(hf3fs_meta__json_doc *doc);

static inline const hf3fs_meta__json_node *hf3fs_meta__json_at(const hf3fs_meta__json_doc *doc,
                                                               uint32_t i)
{
    return &doc->nodes[i];
}
/* The first element of an array (or first key of an object), or NONE. */
uint32_t hf3fs_meta__json_first(const hf3fs_meta__json_doc *doc, uint32_t i);
/* The sibling after element i (pass a value index inside objects), or NONE
 * past the last one of its container `parent`. */
uint32_t hf3fs_meta__json_next(const hf3fs_meta__json_doc *doc, uint32_t parent, uint32_t i);
/* The value of member `name` of object i (the first if repeated), or NONE
 * (also when i is not an object). */
uint32_t hf3fs_meta__json_get(const hf3fs_meta__json_doc *doc, uint32_t i, const char *name);
/* The integer at i: 0, or -1 if it is not an integer number fitting int64. */
int hf3fs_meta__json_int(const hf3fs_meta__json_doc *doc, uint32_t i, int64_t *out);
/* True if node i is a STRING equal to s[0..len-1]. */
bool hf3fs_meta__json_string_eq(const hf3fs_meta__json_doc *doc, uint32_t i, const char *s,
                                size_t len);
/* The bytes of STRING i (NUL-terminated in the doc), or NULL. */
const char *hf3fs_meta__json_string(const hf3fs_meta__json_doc *doc, uint32_t i, size_t *len);

#endif
