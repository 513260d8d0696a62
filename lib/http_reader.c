/* http_reader.c: see http_reader.h for what is accepted and the limits. */
#include "http_reader.h"

#include <string.h>
#include <strings.h>

#include "hf3fs_meta.h"

enum {
    ST_STATUS,      /* status line */
    ST_HEADER,      /* header lines until the empty one */
    ST_BODY_LENGTH, /* `remaining` bytes of body */
    ST_BODY_CLOSE,  /* body until the connection ends */
    ST_CHUNK_SIZE,  /* a chunk size line */
    ST_CHUNK_DATA,  /* `remaining` bytes of chunk */
    ST_CHUNK_END,   /* the CRLF after a chunk */
    ST_TRAILER,     /* trailer lines until the empty one */
    ST_DONE,
    ST_ERROR,
};

void hf3fs_meta__http_reader_init(hf3fs_meta__http_reader *r, size_t max_body, bool head_request)
{
    hf3fs_meta__buf body = r->body; /* keep its memory across answers */
    memset(r, 0, offsetof(hf3fs_meta__http_reader, line));
    r->body = body;
    r->body.max = max_body;
    hf3fs_meta__buf_reset(&r->body);
    r->head_request = head_request;
    r->state = ST_STATUS;
    r->line_len = 0;
    r->got_bytes = false;
    r->result = 0;
    r->error = NULL;
}

void hf3fs_meta__http_reader_free(hf3fs_meta__http_reader *r)
{
    hf3fs_meta__buf_free(&r->body);
}

static int fail(hf3fs_meta__http_reader *r, int code, const char *why)
{
    r->state = ST_ERROR;
    r->result = code; /* remembered for repeated calls */
    r->error = why;
    return code;
}

/* Reset the head for the next answer after an interim 1xx one. */
static void start_next_head(hf3fs_meta__http_reader *r)
{
    r->status = 0;
    r->chunked = r->conn_close = r->conn_keep_alive = r->has_length = false;
    r->content_length = 0;
    r->state = ST_STATUS;
}

static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int parse_status_line(hf3fs_meta__http_reader *r, const char *s, size_t len)
{
    if (len < 12 || memcmp(s, "HTTP/1.", 7) != 0 || (s[7] != '0' && s[7] != '1') || s[8] != ' ')
        return fail(r, HF3FS_META_EPROTO, "not an HTTP/1.x status line");
    for (int i = 9; i < 12; i++)
        if (s[i] < '0' || s[i] > '9')
            return fail(r, HF3FS_META_EPROTO, "bad status code");
    if (len > 12 && s[12] != ' ')
        return fail(r, HF3FS_META_EPROTO, "bad status line");
    r->minor_version = s[7] - '0';
    r->status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    if (r->status < 100)
        return fail(r, HF3FS_META_EPROTO, "bad status code");
    r->state = ST_HEADER;
    return 0;
}

/* The next item of the comma-separated list v[0..len) from *at on, without
 * the blanks around it: tok[0..*tlen); false when none is left. */
static bool list_next(const char *v, size_t len, size_t *at, const char **tok, size_t *tlen)
{
    size_t i = *at;
    while (i < len && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
        i++;
    if (i >= len)
        return false;
    size_t start = i;
    while (i < len && v[i] != ',')
        i++;
    size_t end = i;
    while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
        end--;
    *at = i;
    *tok = v + start;
    *tlen = end - start;
    return true;
}

/* Is tok[0..tlen) word (any case)? */
static bool token_is(const char *tok, size_t tlen, const char *word)
{
    return tlen == strlen(word) && strncasecmp(tok, word, tlen) == 0;
}

/* Does the comma-separated list value[0..len-1] contain token (any case)? */
static bool list_has(const char *value, size_t len, const char *token)
{
    size_t at = 0, tlen;
    const char *tok;
    while (list_next(value, len, &at, &tok, &tlen))
        if (token_is(tok, tlen, token))
            return true;
    return false;
}

static int parse_transfer_encoding(hf3fs_meta__http_reader *r, const char *v, size_t len)
{
    /* Only chunked and identity are supported; chunked must come last. */
    size_t at = 0, tlen;
    const char *tok;
    bool last_chunked = false;
    while (list_next(v, len, &at, &tok, &tlen)) {
        if (token_is(tok, tlen, "chunked"))
            last_chunked = true;
        else if (token_is(tok, tlen, "identity"))
            last_chunked = false;
        else
            return fail(r, HF3FS_META_EPROTO, "unsupported transfer coding");
    }
    if (!last_chunked)
        return fail(r, HF3FS_META_EPROTO, "transfer coding does not end in chunked");
    r->chunked = true;
    return 0;
}

static int parse_content_length(hf3fs_meta__http_reader *r, const char *v, size_t len)
{
    if (len == 0 || len > 19)
        return fail(r, HF3FS_META_EPROTO, "bad Content-Length");
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return fail(r, HF3FS_META_EPROTO, "bad Content-Length");
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    if (r->has_length && n != r->content_length)
        return fail(r, HF3FS_META_EPROTO, "conflicting Content-Length headers");
    r->has_length = true;
    r->content_length = n;
    return 0;
}

static int parse_header_line(hf3fs_meta__http_reader *r, const char *s, size_t len)
{
    if (s[0] == ' ' || s[0] == '\t')
        return fail(r, HF3FS_META_EPROTO, "obsolete header line folding");
    size_t colon = 0;
    while (colon < len && is_tchar((unsigned char)s[colon]))
        colon++;
    if (colon == 0 || colon >= len || s[colon] != ':')
        return fail(r, HF3FS_META_EPROTO, "bad header line");
    size_t vs = colon + 1, ve = len;
    while (vs < ve && (s[vs] == ' ' || s[vs] == '\t'))
        vs++;
    while (ve > vs && (s[ve - 1] == ' ' || s[ve - 1] == '\t'))
        ve--;
    for (size_t i = vs; i < ve; i++)
        if ((unsigned char)s[i] < 0x20 && s[i] != '\t')
            return fail(r, HF3FS_META_EPROTO, "control character in header value");
    const char *v = s + vs;
    size_t vlen = ve - vs;
    if (colon == 14 && strncasecmp(s, "content-length", 14) == 0)
        return parse_content_length(r, v, vlen);
    if (colon == 17 && strncasecmp(s, "transfer-encoding", 17) == 0)
        return parse_transfer_encoding(r, v, vlen);
    if (colon == 10 && strncasecmp(s, "connection", 10) == 0) {
        if (list_has(v, vlen, "close"))
            r->conn_close = true;
        if (list_has(v, vlen, "keep-alive"))
            r->conn_keep_alive = true;
    }
    return 0;
}

static int finish(hf3fs_meta__http_reader *r)
{
    r->state = ST_DONE;
    return HF3FS_META__HTTP_DONE;
}

/* The empty line after the headers: decide how the body is framed. */
static int end_of_head(hf3fs_meta__http_reader *r)
{
    if (r->status == 101)
        return fail(r, HF3FS_META_EPROTO, "unexpected protocol switch (101)");
    if (r->status < 200) {
        start_next_head(r); /* interim answer: the real one follows */
        return 0;
    }
    r->keep_alive = r->minor_version == 1 ? !r->conn_close : (r->conn_keep_alive && !r->conn_close);
    if (r->head_request || r->status == 204 || r->status == 304)
        return finish(r);
    if (r->chunked) {
        r->state = ST_CHUNK_SIZE;
        return 0;
    }
    if (r->has_length) {
        if (r->content_length > r->body.max)
            return fail(r, HF3FS_META_ETOOBIG, "answer body larger than the client's limit");
        if (hf3fs_meta__buf_reserve(&r->body, (size_t)r->content_length) != 0)
            return fail(r, hf3fs_meta__buf_error(&r->body), "out of memory for the answer body");
        r->remaining = r->content_length;
        if (r->remaining == 0)
            return finish(r);
        r->state = ST_BODY_LENGTH;
        return 0;
    }
    r->keep_alive = false;
    r->state = ST_BODY_CLOSE;
    return 0;
}

static int parse_chunk_size(hf3fs_meta__http_reader *r, const char *s, size_t len)
{
    uint64_t n = 0;
    size_t i = 0;
    for (; i < len; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            break;
        if (i >= 15)
            return fail(r, HF3FS_META_EPROTO, "chunk size too large");
        n = n * 16 + d;
    }
    if (i == 0)
        return fail(r, HF3FS_META_EPROTO, "bad chunk size");
    while (i < len && (s[i] == ' ' || s[i] == '\t'))
        i++;
    if (i < len && s[i] != ';')
        return fail(r, HF3FS_META_EPROTO, "bad chunk size");
    if (n == 0) {
        r->state = ST_TRAILER;
        return 0;
    }
    if (n > r->body.max - r->body.len)
        return fail(r, HF3FS_META_ETOOBIG, "answer body larger than the client's limit");
    r->remaining = n;
    r->state = ST_CHUNK_DATA;
    return 0;
}

/* One complete line (without its CR LF) in the current state. */
static int on_line(hf3fs_meta__http_reader *r, const char *s, size_t len)
{
    switch (r->state) {
    case ST_STATUS: return parse_status_line(r, s, len);
    case ST_HEADER: return len == 0 ? end_of_head(r) : parse_header_line(r, s, len);
    case ST_CHUNK_SIZE: return parse_chunk_size(r, s, len);
    case ST_CHUNK_END:
        if (len != 0)
            return fail(r, HF3FS_META_EPROTO, "chunk not followed by CRLF");
        r->state = ST_CHUNK_SIZE;
        return 0;
    case ST_TRAILER: return len == 0 ? finish(r) : 0;
    default: return fail(r, HF3FS_META_EPROTO, "internal: line in a body state");
    }
}

static bool line_state(int state)
{
    return state == ST_STATUS || state == ST_HEADER || state == ST_CHUNK_SIZE ||
           state == ST_CHUNK_END || state == ST_TRAILER;
}

int hf3fs_meta__http_feed(hf3fs_meta__http_reader *r, const char *bytes, size_t len, size_t *used)
{
    size_t i = 0;
    int rc = HF3FS_META__HTTP_MORE;
    if (len)
        r->got_bytes = true;
    while (i < len && r->state != ST_DONE && r->state != ST_ERROR) {
        if (line_state(r->state)) {
            const char *nl = memchr(bytes + i, '\n', len - i);
            size_t take = nl ? (size_t)(nl - (bytes + i)) : len - i;
            bool in_head = r->state == ST_STATUS || r->state == ST_HEADER;
            if (r->line_len + take > sizeof r->line - 1) {
                fail(r, HF3FS_META_EPROTO, "answer line too long");
                break;
            }
            if (in_head && r->head_bytes + take + 1 > HF3FS_META__HTTP_MAX_HEAD) {
                fail(r, HF3FS_META_EPROTO, "answer headers too large");
                break;
            }
            memcpy(r->line + r->line_len, bytes + i, take);
            r->line_len += take;
            if (in_head)
                r->head_bytes += take + (nl ? 1 : 0);
            i += take;
            if (!nl)
                break;
            i++; /* the LF */
            size_t n = r->line_len;
            if (n && r->line[n - 1] == '\r')
                n--;
            if (memchr(r->line, '\r', n) || memchr(r->line, '\0', n)) {
                fail(r, HF3FS_META_EPROTO, "stray CR or NUL in answer line");
                break;
            }
            r->line_len = 0;
            rc = on_line(r, r->line, n);
            if (rc < 0)
                break;
            continue;
        }
        size_t take = len - i;
        if (r->state != ST_BODY_CLOSE && take > r->remaining)
            take = (size_t)r->remaining;
        hf3fs_meta__buf_append(&r->body, bytes + i, take);
        if (hf3fs_meta__buf_error(&r->body)) {
            int code = hf3fs_meta__buf_error(&r->body);
            fail(r, code,
                 code == HF3FS_META_ETOOBIG ? "answer body larger than the client's limit"
                                            : "out of memory for the answer body");
            break;
        }
        i += take;
        if (r->state == ST_BODY_CLOSE)
            continue;
        r->remaining -= take;
        if (r->remaining == 0) {
            if (r->state == ST_BODY_LENGTH)
                finish(r);
            else
                r->state = ST_CHUNK_END;
        }
    }
    if (used)
        *used = i;
    if (r->state == ST_DONE)
        return HF3FS_META__HTTP_DONE;
    if (r->state == ST_ERROR)
        return r->result;
    return HF3FS_META__HTTP_MORE;
}

int hf3fs_meta__http_eof(hf3fs_meta__http_reader *r)
{
    if (r->state == ST_DONE)
        return HF3FS_META__HTTP_DONE;
    if (r->state == ST_ERROR)
        return r->result;
    if (r->state == ST_BODY_CLOSE) {
        r->keep_alive = false;
        return finish(r);
    }
    return fail(r, HF3FS_META_EPROTO,
                r->got_bytes ? "connection closed in the middle of an answer"
                             : "connection closed without an answer");
}
