/* json.c: see json.h for the promises of the writer and the reader. */
#include "json.h"

#include <stdlib.h>
#include <string.h>

#include "hf3fs_meta.h"
#include "util/utf8.h"

/* ======================================================================= */
/* UTF-8                                                                    */

bool hf3fs_meta__utf8_valid(const char *s, size_t len)
{
    return hf_utf8_valid(s, len);
}

/* ======================================================================= */
/* Writer                                                                   */

void hf3fs_meta__jw_init(hf3fs_meta__jw *w, hf3fs_meta__buf *out)
{
    memset(w, 0, sizeof *w);
    w->out = out;
}

int hf3fs_meta__jw_error(const hf3fs_meta__jw *w)
{
    return w->error ? w->error : hf3fs_meta__buf_error(w->out);
}

/* Put the comma (if any) that precedes a value or a key. */
static void jw_before_item(hf3fs_meta__jw *w, bool is_key)
{
    if (w->after_key) {
        if (is_key)
            w->error = w->error ? w->error : HF3FS_META_EINVAL;
        w->after_key = false;
        return;
    }
    if (w->depth == 0)
        return;
    if (is_key != w->is_object[w->depth]) /* a key in an array, a bare value in an object */
        w->error = w->error ? w->error : HF3FS_META_EINVAL;
    if (w->has_items[w->depth])
        hf3fs_meta__buf_putc(w->out, ',');
    w->has_items[w->depth] = true;
}

static void jw_open(hf3fs_meta__jw *w, char ch, bool object)
{
    jw_before_item(w, false);
    if (w->depth >= HF3FS_META__JW_MAX_DEPTH) {
        w->error = w->error ? w->error : HF3FS_META_EINVAL;
        return;
    }
    w->depth++;
    w->has_items[w->depth] = false;
    w->is_object[w->depth] = object;
    hf3fs_meta__buf_putc(w->out, ch);
}

static void jw_close(hf3fs_meta__jw *w, char ch, bool object)
{
    if (w->depth == 0 || w->is_object[w->depth] != object || w->after_key) {
        w->error = w->error ? w->error : HF3FS_META_EINVAL;
        return;
    }
    w->depth--;
    hf3fs_meta__buf_putc(w->out, ch);
}

void hf3fs_meta__jw_object_begin(hf3fs_meta__jw *w)
{
    jw_open(w, '{', true);
}
void hf3fs_meta__jw_object_end(hf3fs_meta__jw *w)
{
    jw_close(w, '}', true);
}
void hf3fs_meta__jw_array_begin(hf3fs_meta__jw *w)
{
    jw_open(w, '[', false);
}
void hf3fs_meta__jw_array_end(hf3fs_meta__jw *w)
{
    jw_close(w, ']', false);
}

static void jw_quoted(hf3fs_meta__jw *w, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    if (!hf3fs_meta__utf8_valid(s, len)) {
        w->error = w->error ? w->error : HF3FS_META_EINVAL;
        return;
    }
    hf3fs_meta__buf *b = w->out;
    if (hf3fs_meta__buf_reserve(b, len + 2) != 0)
        return;
    hf3fs_meta__buf_putc(b, '"');
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        hf3fs_meta__buf_append(b, s + run, i - run);
        run = i + 1;
        char esc[7] = {'\\', 0};
        size_t n = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            n = 6;
        }
        hf3fs_meta__buf_append(b, esc, n);
    }
    hf3fs_meta__buf_append(b, s + run, len - run);
    hf3fs_meta__buf_putc(b, '"');
}

void hf3fs_meta__jw_key(hf3fs_meta__jw *w, const char *name)
{
    jw_before_item(w, true);
    jw_quoted(w, name, strlen(name));
    hf3fs_meta__buf_putc(w->out, ':');
    w->after_key = true;
}

void hf3fs_meta__jw_string(hf3fs_meta__jw *w, const char *s, size_t len)
{
    jw_before_item(w, false);
    jw_quoted(w, s, len);
}

void hf3fs_meta__jw_cstring(hf3fs_meta__jw *w, const char *s)
{
    if (!s) {
        w->error = w->error ? w->error : HF3FS_META_EINVAL;
        return;
    }
    hf3fs_meta__jw_string(w, s, strlen(s));
}

void hf3fs_meta__jw_int(hf3fs_meta__jw *w, int64_t v)
{
    jw_before_item(w, false);
    hf3fs_meta__buf_put_i64(w->out, v);
}

void hf3fs_meta__jw_bool(hf3fs_meta__jw *w, bool v)
{
    jw_before_item(w, false);
    hf3fs_meta__buf_puts(w->out, v ? "true" : "false");
}

/* ======================================================================= */
/* Reader                                                                   */

typedef struct parser {
    hf3fs_meta__json_doc *doc;
    const char *p; /* input */
    size_t len;
    size_t pos;
    uint32_t str_len; /* bytes used in doc->strings */
} parser;

static int fail(parser *ps, const char *why)
{
    ps->doc->error = why;
    ps->doc->error_offset = ps->pos;
    return HF3FS_META_EPROTO;
}

static void skip_ws(parser *ps)
{
    while (ps->pos < ps->len) {
        char c = ps->p[ps->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            break;
        ps->pos++;
    }
}

/* Append a node; its index in *idx. */
static int add_node(parser *ps, uint8_t type, uint32_t *idx)
{
    hf3fs_meta__json_doc *doc = ps->doc;
    if (doc->n_nodes == doc->cap_nodes) {
        /* At most one node per input byte (+1), so this cannot overflow. */
        uint32_t cap = doc->cap_nodes ? doc->cap_nodes * 2 : 64;
        if (cap > ps->len + 1)
            cap = (uint32_t)ps->len + 1;
        if (cap <= doc->n_nodes)
            return fail(ps, "more values than input bytes");
        hf3fs_meta__json_node *nodes = realloc(doc->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return HF3FS_META_ENOMEM;
        doc->nodes = nodes;
        doc->cap_nodes = cap;
    }
    *idx = doc->n_nodes++;
    hf3fs_meta__json_node *n = &doc->nodes[*idx];
    memset(n, 0, sizeof *n);
    n->type = type;
    n->end = *idx + 1;
    return 0;
}

static int hex4(parser *ps, uint32_t *out)
{
    if (ps->len - ps->pos < 4)
        return fail(ps, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[ps->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return fail(ps, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

static void put_utf8(parser *ps, uint32_t cp)
{
    char *o = ps->doc->strings + ps->str_len;
    uint32_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    ps->str_len += n;
}

/* A string; ps->pos is at the opening quote. An escape decodes to at most as
 * many bytes as it takes in the input, so doc->strings (input length + 1
 * bytes) always has room. */
static int parse_string(parser *ps)
{
    uint32_t idx;
    int rc = add_node(ps, HF3FS_META__JSON_STRING, &idx);
    if (rc)
        return rc;
    uint32_t start = ps->str_len;
    ps->pos++;
    for (;;) {
        if (ps->pos >= ps->len)
            return fail(ps, "unterminated string");
        unsigned char c = (unsigned char)ps->p[ps->pos];
        if (c == '"') {
            ps->pos++;
            break;
        }
        if (c < 0x20)
            return fail(ps, "control character in string");
        if (c != '\\') {
            size_t k = hf_utf8_seq_len((const unsigned char *)ps->p + ps->pos, ps->len - ps->pos);
            if (!k)
                return fail(ps, "invalid UTF-8 in string");
            memcpy(ps->doc->strings + ps->str_len, ps->p + ps->pos, k);
            ps->str_len += (uint32_t)k;
            ps->pos += k;
            continue;
        }
        ps->pos++;
        if (ps->pos >= ps->len)
            return fail(ps, "unterminated escape");
        char e = ps->p[ps->pos++];
        char plain = 0;
        switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
            uint32_t cp;
            if ((rc = hex4(ps, &cp)) != 0)
                return rc;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return fail(ps, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                uint32_t lo;
                if (ps->len - ps->pos < 2 || ps->p[ps->pos] != '\\' || ps->p[ps->pos + 1] != 'u')
                    return fail(ps, "lone high surrogate in \\u escape");
                ps->pos += 2;
                if ((rc = hex4(ps, &lo)) != 0)
                    return rc;
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return fail(ps, "high surrogate without low surrogate");
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(ps, cp);
            continue;
        }
        default: return fail(ps, "unknown escape in string");
        }
        ps->doc->strings[ps->str_len++] = plain;
    }
    ps->doc->strings[ps->str_len++] = '\0';
    hf3fs_meta__json_node *n = &ps->doc->nodes[idx];
    n->off = start;
    n->len = ps->str_len - 1 - start;
    return 0;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int parse_number(parser *ps)
{
    size_t start = ps->pos;
    bool integer = true;
    if (ps->p[ps->pos] == '-')
        ps->pos++;
    if (ps->pos >= ps->len || !is_digit(ps->p[ps->pos]))
        return fail(ps, "bad number");
    if (ps->p[ps->pos] == '0') {
        ps->pos++;
        if (ps->pos < ps->len && is_digit(ps->p[ps->pos]))
            return fail(ps, "leading zero in number");
    } else {
        while (ps->pos < ps->len && is_digit(ps->p[ps->pos]))
            ps->pos++;
    }
    if (ps->pos < ps->len && ps->p[ps->pos] == '.') {
        integer = false;
        ps->pos++;
        if (ps->pos >= ps->len || !is_digit(ps->p[ps->pos]))
            return fail(ps, "bad fraction in number");
        while (ps->pos < ps->len && is_digit(ps->p[ps->pos]))
            ps->pos++;
    }
    if (ps->pos < ps->len && (ps->p[ps->pos] == 'e' || ps->p[ps->pos] == 'E')) {
        integer = false;
        ps->pos++;
        if (ps->pos < ps->len && (ps->p[ps->pos] == '+' || ps->p[ps->pos] == '-'))
            ps->pos++;
        if (ps->pos >= ps->len || !is_digit(ps->p[ps->pos]))
            return fail(ps, "bad exponent in number");
        while (ps->pos < ps->len && is_digit(ps->p[ps->pos]))
            ps->pos++;
    }
    uint32_t idx;
    int rc = add_node(ps, HF3FS_META__JSON_NUMBER, &idx);
    if (rc)
        return rc;
    hf3fs_meta__json_node *n = &ps->doc->nodes[idx];
    n->is_integer = integer;
    n->off = (uint32_t)start;
    n->len = (uint32_t)(ps->pos - start);
    return 0;
}

static int parse_literal(parser *ps, const char *word, uint8_t type)
{
    size_t n = strlen(word);
    if (ps->len - ps->pos < n || memcmp(ps->p + ps->pos, word, n) != 0)
        return fail(ps, "unexpected character");
    ps->pos += n;
    uint32_t idx;
    return add_node(ps, type, &idx);
}

/*
 * The iterative parse. `stack` holds the open containers; after every
 * complete value the loop looks at the innermost open container to decide
 * what may come next. States:
 *   VALUE   a value must come (top level, after ':' or after ',' in an array)
 *   KEY     a member key must come (after ',' in an object)
 *   FIRST   just after '[' or '{': a value/key or the closing bracket
 *   AFTER   a value just ended: ',' or the closing bracket (or the end)
 */
enum { ST_VALUE, ST_KEY, ST_FIRST, ST_AFTER };

int hf3fs_meta__json_parse(hf3fs_meta__json_doc *doc, const char *text, size_t len,
                           unsigned max_depth)
{
    memset(doc, 0, sizeof *doc);
    doc->input = text;
    parser ps = {.doc = doc, .p = text, .len = len};
    if (len >= UINT32_MAX - 1)
        return fail(&ps, "document too large");
    if (max_depth < 1 || max_depth > 1024)
        max_depth = HF3FS_META__JSON_DEFAULT_DEPTH;
    doc->strings = malloc(len + 1);
    uint32_t *stack = malloc(max_depth * sizeof *stack);
    int rc = 0;
    if (!doc->strings || !stack) {
        rc = HF3FS_META_ENOMEM;
        goto out;
    }
    unsigned depth = 0;
    int state = ST_VALUE;
    for (;;) {
        skip_ws(&ps);
        if (state == ST_AFTER) {
            if (depth == 0) {
                if (ps.pos != len)
                    rc = fail(&ps, "trailing characters after the document");
                goto out;
            }
            uint32_t top = stack[depth - 1];
            bool object = doc->nodes[top].type == HF3FS_META__JSON_OBJECT;
            if (ps.pos >= len) {
                rc = fail(&ps, "unterminated array or object");
                goto out;
            }
            char c = text[ps.pos++];
            if (c == ',') {
                state = object ? ST_KEY : ST_VALUE;
            } else if (c == (object ? '}' : ']')) {
                doc->nodes[top].end = doc->n_nodes;
                depth--;
            } else {
                ps.pos--;
                rc = fail(&ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
                goto out;
            }
            continue;
        }
        if (ps.pos >= len) {
            rc = fail(&ps, "unexpected end of document");
            goto out;
        }
        char c = text[ps.pos];
        bool in_object = depth > 0 && doc->nodes[stack[depth - 1]].type == HF3FS_META__JSON_OBJECT;
        if (state == ST_FIRST && (c == ']' || c == '}')) {
            if (c != (in_object ? '}' : ']')) {
                rc = fail(&ps, "mismatched bracket");
                goto out;
            }
            ps.pos++;
            doc->nodes[stack[depth - 1]].end = doc->n_nodes;
            depth--;
            state = ST_AFTER;
            continue;
        }
        if (state == ST_KEY || (state == ST_FIRST && in_object)) {
            /* A member: "key" ':' and then its value. */
            if (c != '"') {
                rc = fail(&ps, "expected a string key");
                goto out;
            }
            doc->nodes[stack[depth - 1]].count++;
            if ((rc = parse_string(&ps)) != 0)
                goto out;
            skip_ws(&ps);
            if (ps.pos >= len || text[ps.pos] != ':') {
                rc = fail(&ps, "expected ':' after key");
                goto out;
            }
            ps.pos++;
            state = ST_VALUE;
            continue;
        }
        /* A value (an array element counts here; a member value was counted
         * with its key). */
        if (state == ST_FIRST || (state == ST_VALUE && depth > 0 && !in_object))
            doc->nodes[stack[depth - 1]].count++;
        state = ST_AFTER;
        if (c == '{' || c == '[') {
            if (depth >= max_depth) {
                rc = fail(&ps, "nesting too deep");
                goto out;
            }
            uint32_t idx;
            if ((rc = add_node(&ps, c == '{' ? HF3FS_META__JSON_OBJECT : HF3FS_META__JSON_ARRAY,
                               &idx)) != 0)
                goto out;
            ps.pos++;
            stack[depth++] = idx;
            state = ST_FIRST;
            continue;
        }
        if (c == '"')
            rc = parse_string(&ps);
        else if (c == '-' || is_digit(c))
            rc = parse_number(&ps);
        else if (c == 't')
            rc = parse_literal(&ps, "true", HF3FS_META__JSON_TRUE);
        else if (c == 'f')
            rc = parse_literal(&ps, "false", HF3FS_META__JSON_FALSE);
        else if (c == 'n')
            rc = parse_literal(&ps, "null", HF3FS_META__JSON_NULL);
        else
            rc = fail(&ps, "unexpected character");
        if (rc)
            goto out;
    }
out:
    free(stack);
    return rc;
}

void hf3fs_meta__json_free(hf3fs_meta__json_doc *doc)
{
    free(doc->nodes);
    free(doc->strings);
    memset(doc, 0, sizeof *doc);
}

uint32_t hf3fs_meta__json_first(const hf3fs_meta__json_doc *doc, uint32_t i)
{
    if (i >= doc->n_nodes)
        return HF3FS_META__JSON_NONE;
    const hf3fs_meta__json_node *n = &doc->nodes[i];
    if ((n->type != HF3FS_META__JSON_ARRAY && n->type != HF3FS_META__JSON_OBJECT) || !n->count)
        return HF3FS_META__JSON_NONE;
    return i + 1;
}

uint32_t hf3fs_meta__json_next(const hf3fs_meta__json_doc *doc, uint32_t parent, uint32_t i)
{
    uint32_t next = doc->nodes[i].end;
    return next < doc->nodes[parent].end ? next : HF3FS_META__JSON_NONE;
}

uint32_t hf3fs_meta__json_get(const hf3fs_meta__json_doc *doc, uint32_t i, const char *name)
{
    if (i >= doc->n_nodes || doc->nodes[i].type != HF3FS_META__JSON_OBJECT)
        return HF3FS_META__JSON_NONE;
    size_t len = strlen(name);
    uint32_t k = i + 1;
    for (uint32_t m = 0; m < doc->nodes[i].count; m++) {
        uint32_t v = k + 1;
        if (hf3fs_meta__json_string_eq(doc, k, name, len))
            return v;
        k = doc->nodes[v].end;
    }
    return HF3FS_META__JSON_NONE;
}

int hf3fs_meta__json_int(const hf3fs_meta__json_doc *doc, uint32_t i, int64_t *out)
{
    if (i >= doc->n_nodes)
        return -1;
    const hf3fs_meta__json_node *n = &doc->nodes[i];
    if (n->type != HF3FS_META__JSON_NUMBER || !n->is_integer)
        return -1;
    const char *s = doc->input + n->off;
    size_t len = n->len, pos = 0;
    bool negative = s[0] == '-';
    if (negative)
        pos++;
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    for (; pos < len; pos++) {
        uint64_t d = (uint64_t)(s[pos] - '0');
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

bool hf3fs_meta__json_string_eq(const hf3fs_meta__json_doc *doc, uint32_t i, const char *s,
                                size_t len)
{
    if (i >= doc->n_nodes)
        return false;
    const hf3fs_meta__json_node *n = &doc->nodes[i];
    return n->type == HF3FS_META__JSON_STRING && n->len == len &&
           memcmp(doc->strings + n->off, s, len) == 0;
}

const char *hf3fs_meta__json_string(const hf3fs_meta__json_doc *doc, uint32_t i, size_t *len)
{
    if (i >= doc->n_nodes || doc->nodes[i].type != HF3FS_META__JSON_STRING)
        return NULL;
    if (len)
        *len = doc->nodes[i].len;
    return doc->strings + doc->nodes[i].off;
}
