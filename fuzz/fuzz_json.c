/*
 * fuzz_json.c: the JSON decoder and writer of src/api/json.h.
 *
 * Input: byte 0 sets the limits (max_depth 1..32, max_nodes 1..4096 or
 * unlimited); the rest is the JSON text.
 *
 * Oracles:
 *   1. Differential: json_parse() accepts exactly what an independent
 *      reference accepts (yajl's callback parser, written here with its own
 *      strict UTF-8 check, depth count and value count), and the tree it
 *      builds lists the same values in the same order. The reference is
 *      yajl, which json.c uses today; if json.c gets its own parser, this
 *      keeps it to the same language.
 *   2. The tree is sound: strings NUL-terminated after len bytes, object
 *      keys are strings, json_get() finds the last member of a name.
 *   3. Round trip: the tree written back with json_put_* parses to the same
 *      tree.
 *   4. The writer: json_put_str() of the raw input bytes is always a valid
 *      JSON string of valid UTF-8, equal to the input when the input is
 *      valid UTF-8; a json_buf never grows past its maximum.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yajl/yajl_parse.h>

#include "api/json.h"
#include "fuzz_common.h"
#include "util/xalloc.h"

/* ---- canonical event strings ---- */

typedef struct canon {
    uint8_t *p;
    size_t len, cap;
} canon;

static void canon_add(canon *c, const void *data, size_t len)
{
    if (c->len + len > c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        while (cap < c->len + len)
            cap *= 2;
        c->p = hf_xrealloc(c->p, cap);
        c->cap = cap;
    }
    if (len)
        memcpy(c->p + c->len, data, len);
    c->len += len;
}

static void canon_tag(canon *c, char tag, const void *data, size_t len)
{
    canon_add(c, &tag, 1);
    if (tag == 's' || tag == 'k') {
        uint32_t n = (uint32_t)len;
        canon_add(c, &n, sizeof n);
    }
    canon_add(c, data, len);
}

/* ---- the reference: yajl callbacks with their own checks ---- */

typedef struct reference {
    canon out;
    uint32_t depth, max_depth;
    size_t nodes, max_nodes;
    bool limit_hit;
} reference;

/* Strict UTF-8 by decoding code points (RFC 3629): no overlong forms, no
 * surrogates, nothing above U+10FFFF. */
static bool utf8_strict(const uint8_t *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint32_t c = s[i];
        size_t n;
        uint32_t min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 2, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 3, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 4, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        if (len - i < n)
            return false;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            c = c << 6 | (s[i + k] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        i += n;
    }
    return true;
}

static int ref_value(reference *r)
{
    if (++r->nodes > r->max_nodes) {
        r->limit_hit = true;
        return 0;
    }
    return 1;
}

static int ref_null(void *ctx)
{
    reference *r = ctx;
    canon_tag(&r->out, 'n', NULL, 0);
    return ref_value(r);
}

static int ref_boolean(void *ctx, int value)
{
    reference *r = ctx;
    canon_tag(&r->out, value ? 't' : 'f', NULL, 0);
    return ref_value(r);
}

static int ref_integer(void *ctx, long long value)
{
    reference *r = ctx;
    int64_t v = value;
    canon_tag(&r->out, 'i', &v, sizeof v);
    return ref_value(r);
}

static int ref_double(void *ctx, double value)
{
    reference *r = ctx;
    canon_tag(&r->out, 'd', &value, sizeof value);
    return ref_value(r);
}

static int ref_text(reference *r, char tag, const unsigned char *text, size_t len)
{
    if (!utf8_strict(text, len))
        return 0;
    canon_tag(&r->out, tag, text, len);
    return ref_value(r);
}

static int ref_string(void *ctx, const unsigned char *text, size_t len)
{
    return ref_text(ctx, 's', text, len);
}

static int ref_key(void *ctx, const unsigned char *text, size_t len)
{
    return ref_text(ctx, 'k', text, len);
}

static int ref_open(reference *r, char tag)
{
    if (++r->depth > r->max_depth) {
        r->limit_hit = true;
        return 0;
    }
    canon_tag(&r->out, tag, NULL, 0);
    return ref_value(r);
}

static int ref_close(reference *r, char tag)
{
    r->depth--;
    canon_tag(&r->out, tag, NULL, 0);
    return 1;
}

static int ref_start_map(void *ctx)
{
    return ref_open(ctx, '{');
}
static int ref_end_map(void *ctx)
{
    return ref_close(ctx, '}');
}
static int ref_start_array(void *ctx)
{
    return ref_open(ctx, '[');
}
static int ref_end_array(void *ctx)
{
    return ref_close(ctx, ']');
}

static const yajl_callbacks ref_callbacks = {
    .yajl_null = ref_null,
    .yajl_boolean = ref_boolean,
    .yajl_integer = ref_integer,
    .yajl_double = ref_double,
    .yajl_string = ref_string,
    .yajl_start_map = ref_start_map,
    .yajl_map_key = ref_key,
    .yajl_end_map = ref_end_map,
    .yajl_start_array = ref_start_array,
    .yajl_end_array = ref_end_array,
};

static bool ref_parse(reference *r, const uint8_t *text, size_t len)
{
    yajl_handle yajl = yajl_alloc(&ref_callbacks, NULL, r);
    if (!yajl)
        abort();
    yajl_status status = yajl_parse(yajl, text, len);
    if (status == yajl_status_ok)
        status = yajl_complete_parse(yajl);
    yajl_free(yajl);
    return status == yajl_status_ok;
}

/* ---- the tree under test ---- */

static void tree_canon(const json_node *node, canon *out, uint32_t depth)
{
    if (depth > JSON_MAX_DEPTH)
        fuzz_fail("tree deeper than JSON_MAX_DEPTH");
    switch ((json_type)node->type) {
    case JSON_NULL: canon_tag(out, 'n', NULL, 0); return;
    case JSON_TRUE: canon_tag(out, 't', NULL, 0); return;
    case JSON_FALSE: canon_tag(out, 'f', NULL, 0); return;
    case JSON_INT: canon_tag(out, 'i', &node->u.i, sizeof node->u.i); return;
    case JSON_DOUBLE: canon_tag(out, 'd', &node->u.d, sizeof node->u.d); return;
    case JSON_STRING:
        if (node->u.str[node->len] != '\0')
            fuzz_fail("string not NUL-terminated after its length");
        canon_tag(out, 's', node->u.str, node->len);
        return;
    case JSON_ARRAY:
        canon_tag(out, '[', NULL, 0);
        for (uint32_t i = 0; i < node->len; i++)
            tree_canon(&node->u.items[i], out, depth + 1);
        canon_tag(out, ']', NULL, 0);
        return;
    case JSON_OBJECT:
        canon_tag(out, '{', NULL, 0);
        for (uint32_t i = 0; i < node->len; i++) {
            const json_node *key = &node->u.items[2 * i];
            if (key->type != JSON_STRING)
                fuzz_fail("object member %u has a key that is not a string", i);
            canon_tag(out, 'k', key->u.str, key->len);
            tree_canon(key + 1, out, depth + 1);
        }
        canon_tag(out, '}', NULL, 0);
        return;
    }
    fuzz_fail("node of unknown type %u", (unsigned)node->type);
}

/* json_get() answers the last member of a name (names without NUL bytes). */
static void check_get(const json_node *obj)
{
    for (uint32_t i = 0; i < obj->len && i < 64; i++) {
        const json_node *key = &obj->u.items[2 * i];
        if (memchr(key->u.str, '\0', key->len))
            continue;
        const json_node *last = NULL;
        for (uint32_t j = 0; j < obj->len; j++)
            if (hf_slice_eq(json_slice(&obj->u.items[2 * j]), json_slice(key)))
                last = &obj->u.items[2 * j + 1];
        if (json_get(obj, key->u.str) != last)
            fuzz_fail("json_get(\"%s\") does not answer the last member of that name", key->u.str);
    }
}

static void write_tree(const json_node *node, json_buf *out)
{
    switch ((json_type)node->type) {
    case JSON_NULL: json_put_lit(out, "null"); return;
    case JSON_TRUE: json_put_bool(out, true); return;
    case JSON_FALSE: json_put_bool(out, false); return;
    case JSON_INT: json_put_int(out, node->u.i); return;
    case JSON_DOUBLE: {
        char text[40];
        int n = snprintf(text, sizeof text, "%.17g", node->u.d);
        json_put_raw(out, text, (size_t)n);
        if (!strpbrk(text, ".eEn")) /* keep it a double: "1" would read back as an integer */
            json_put_lit(out, ".0");
        return;
    }
    case JSON_STRING: json_put_str(out, node->u.str, node->len); return;
    case JSON_ARRAY:
        json_put_char(out, '[');
        for (uint32_t i = 0; i < node->len; i++) {
            if (i)
                json_put_char(out, ',');
            write_tree(&node->u.items[i], out);
        }
        json_put_char(out, ']');
        return;
    case JSON_OBJECT:
        json_put_char(out, '{');
        for (uint32_t i = 0; i < node->len; i++) {
            if (i)
                json_put_char(out, ',');
            json_put_str(out, node->u.items[2 * i].u.str, node->u.items[2 * i].len);
            json_put_char(out, ':');
            write_tree(&node->u.items[2 * i + 1], out);
        }
        json_put_char(out, '}');
        return;
    }
}

static void check_objects(const json_node *node)
{
    if (node->type == JSON_OBJECT)
        check_get(node);
    if (node->type == JSON_OBJECT || node->type == JSON_ARRAY) {
        uint32_t n = node->type == JSON_OBJECT ? 2 * node->len : node->len;
        for (uint32_t i = 0; i < n; i++)
            check_objects(&node->u.items[i]);
    }
}

/* ---- the writer alone ---- */

static void check_put_str(const uint8_t *data, size_t size, uint8_t limit_byte)
{
    json_buf buf;
    json_buf_init(&buf, 1u << 24);
    json_put_char(&buf, '[');
    json_put_str(&buf, (const char *)data, size);
    json_put_char(&buf, ']');
    json_limits limits = {.max_depth = 2, .max_nodes = 4};
    json_doc doc;
    json_doc_init(&doc, &limits);
    const json_node *root;
    char err[256];
    if (json_parse(&doc, buf.ptr, buf.len, &root, err, sizeof err) != 0)
        fuzz_fail("json_put_str wrote something that does not parse: %s", err);
    const json_node *str = &root->u.items[0];
    if (root->len != 1 || str->type != JSON_STRING)
        fuzz_fail("json_put_str did not write one string");
    if (utf8_strict(data, size) &&
        !hf_slice_eq(json_slice(str), (hf_slice){(const char *)data, size}))
        fuzz_fail("json_put_str of valid UTF-8 does not read back unchanged");
    json_doc_free(&doc);

    /* A small maximum: writes past it are dropped and flagged (never cut
     * silently); without the flag the buffer holds exactly what an
     * unbounded one holds. (json_put_str may flag a string that would just
     * fit: it reserves the worst case of its escapes.) */
    size_t max = limit_byte % 64;
    json_buf small, full;
    json_buf_init(&small, max);
    json_buf_init(&full, 1u << 24);
    json_buf *both[2] = {&small, &full};
    for (int i = 0; i < 2; i++) {
        json_put_str(both[i], (const char *)data, size);
        json_put_int(both[i], INT64_MIN);
        json_put_uint(both[i], UINT64_MAX);
    }
    if (small.len > max)
        fuzz_fail("json_buf grew to %zu bytes past its maximum %zu", small.len, max);
    if (full.len > max && !small.overflow)
        fuzz_fail("json_buf took %zu bytes into a maximum of %zu without flagging overflow",
                  full.len, max);
    if (!small.overflow && (small.len != full.len || memcmp(small.ptr, full.ptr, full.len) != 0))
        fuzz_fail("json_buf below its maximum differs from an unbounded one");
    json_buf_free(&small);
    json_buf_free(&full);
    json_buf_free(&buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    const uint8_t *text = data + 1;
    size_t len = size - 1;
    json_limits limits = {
        .max_depth = 1 + mode % 32,
        .max_nodes = mode & 0x80 ? (size_t)-1 : 1 + (size_t)(mode >> 2) * 128,
    };
    /* An exact-size copy, so that ASan sees any over-read. */
    char *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, text, len);

    json_doc doc;
    json_doc_init(&doc, &limits);
    const json_node *root = NULL;
    char err[256];
    err[0] = '\0';
    bool ours = json_parse(&doc, copy, len, &root, err, sizeof err) == 0;

    reference ref = {.max_depth = limits.max_depth, .max_nodes = limits.max_nodes};
    bool theirs = ref_parse(&ref, (const uint8_t *)copy, len);
    if (ours != theirs)
        fuzz_fail("json_parse %s what the reference %s (%s)", ours ? "accepts" : "refuses",
                  theirs ? "accepts" : "refuses", ours ? "" : err);
    if (!ours && (!err[0] || strlen(err) >= sizeof err))
        fuzz_fail("json_parse failed without a description");

    if (ours) {
        canon tree = {0};
        tree_canon(root, &tree, 0);
        if (tree.len != ref.out.len || memcmp(tree.p, ref.out.p, tree.len) != 0)
            fuzz_fail("json_parse's tree differs from the reference's values");
        check_objects(root);

        json_buf out;
        json_buf_init(&out, 1u << 26);
        write_tree(root, &out);
        json_limits unlimited = {.max_depth = JSON_MAX_DEPTH, .max_nodes = (size_t)-1};
        json_doc again;
        json_doc_init(&again, &unlimited);
        const json_node *root2;
        if (json_parse(&again, out.ptr, out.len, &root2, err, sizeof err) != 0)
            fuzz_fail("the tree written back does not parse: %s: %.*s", err, (int)out.len, out.ptr);
        canon tree2 = {0};
        tree_canon(root2, &tree2, 0);
        if (tree2.len != tree.len || memcmp(tree2.p, tree.p, tree.len) != 0)
            fuzz_fail("the tree written back reads as another tree: %.*s", (int)out.len, out.ptr);
        free(tree.p);
        free(tree2.p);
        json_doc_free(&again);
        json_buf_free(&out);
    }
    free(ref.out.p);
    json_doc_free(&doc);

    check_put_str((const uint8_t *)copy, len, mode);
    free(copy);
    return 0;
}
