/*
 * client.c: the client handle (URL, settings, messages) and the helpers every
 * operation uses to build a request body and to check an answer. The
 * connection itself is in transport.c.
 */
#include "client.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* The server's parser of host:port (header-only, libc only), through
 * -iquote src like every header of src/util lib/ uses (mk/client.mk). */
#include "util/hostport.h"

const char *hf3fs_meta_version(void)
{
    return HF3FS_META_VERSION_STRING;
}

const char *hf3fs_meta_strerror(int code)
{
    switch (code) {
    case HF3FS_META_SUCCESS: return "success";
    case HF3FS_META_EINVAL: return "invalid argument";
    case HF3FS_META_ENOMEM: return "out of memory";
    case HF3FS_META_ECONNECT: return "cannot connect to the server, or connection lost";
    case HF3FS_META_ETIMEDOUT: return "timed out";
    case HF3FS_META_EPROTO: return "malformed answer from the server";
    case HF3FS_META_EREFUSED: return "request refused by the server (HTTP 4xx)";
    case HF3FS_META_ENOTINIT: return "pool not initialized (HTTP 404)";
    case HF3FS_META_EUNAUTH: return "unauthorized (HTTP 401)";
    case HF3FS_META_ESERVER: return "server error (HTTP 5xx)";
    case HF3FS_META_ETOOBIG: return "answer larger than the client's limit";
    default: return "unknown hf3fs_meta error code";
    }
}

/* ======================================================================= */
/* Messages                                                                 */

int hf3fs_meta__set_error(hf3fs_meta_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof c->last_error, fmt, ap);
    va_end(ap);
    return code;
}

int hf3fs_meta__begin(hf3fs_meta_client *c)
{
    if (!c)
        return HF3FS_META_EINVAL;
    c->last_error[0] = '\0';
    c->last_detail[0] = '\0';
    c->last_status = 0;
    return 0;
}

const char *hf3fs_meta_last_error(const hf3fs_meta_client *c)
{
    return c ? c->last_error : "no client";
}

const char *hf3fs_meta_last_detail(const hf3fs_meta_client *c)
{
    return c ? c->last_detail : "";
}

int hf3fs_meta_last_status(const hf3fs_meta_client *c)
{
    return c ? c->last_status : 0;
}

void hf3fs_meta_free(void *ptr)
{
    free(ptr);
}

/* ======================================================================= */
/* URL                                                                      */

/* s[0..len-1] with %XX decoded, in a new string; NULL for a bad escape or no
 * memory (*bad tells which). */
static char *percent_decode(const char *s, size_t len, bool *bad)
{
    char *out = malloc(len + 1);
    size_t o = 0;
    *bad = false;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i++) {
        if (s[i] != '%') {
            out[o++] = s[i];
            continue;
        }
        /* "%XX" with two hex digits; %00 would cut the string: refused */
        if (i + 2 >= len || hf_hex_digit(s[i + 1]) < 0 || hf_hex_digit(s[i + 2]) < 0 ||
            (hf_hex_digit(s[i + 1]) == 0 && hf_hex_digit(s[i + 2]) == 0)) {
            free(out);
            *bad = true;
            return NULL;
        }
        out[o++] = (char)(hf_hex_digit(s[i + 1]) * 16 + hf_hex_digit(s[i + 2]));
        i += 2;
    }
    out[o] = '\0';
    return out;
}

static char *base64(const unsigned char *in, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    size_t o = 0;
    if (!out)
        return NULL;
    /* NOLINTBEGIN(clang-analyzer-*): every in[] read is below len; the
     * analyzer's "index out of bounds" takes i + 1 < len for false */
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        out[o++] = tbl[(v >> 18) & 63];
        out[o++] = tbl[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    /* NOLINTEND(clang-analyzer-*) */
    out[o] = '\0';
    return out;
}

static char *copy_range(const char *s, size_t len)
{
    char *out = malloc(len + 1);
    if (out) {
        memcpy(out, s, len);
        out[len] = '\0';
    }
    return out;
}

/* "Basic base64(user:token)" from the decoded user info. */
static int make_basic_auth(hf3fs_meta_client *c, const char *info, size_t len)
{
    bool bad;
    char *plain = percent_decode(info, len, &bad);
    if (!plain)
        return bad ? HF3FS_META_EINVAL : HF3FS_META_ENOMEM;
    char *b64 = base64((const unsigned char *)plain, strlen(plain));
    size_t plain_len = strlen(plain);
    memset(plain, 0, plain_len); /* do not leave the token lying around */
    free(plain);
    if (!b64)
        return HF3FS_META_ENOMEM;
    size_t n = strlen(b64) + sizeof "Basic ";
    c->basic_auth = malloc(n);
    if (!c->basic_auth) {
        free(b64);
        return HF3FS_META_ENOMEM;
    }
    snprintf(c->basic_auth, n, "Basic %s", b64);
    free(b64);
    return 0;
}

/* http://[userinfo@]host[:port][/path] */
static int parse_url(hf3fs_meta_client *c, const char *url)
{
    if (strncasecmp(url, "http://", 7) != 0)
        return HF3FS_META_EINVAL;
    const char *auth = url + 7;
    const char *end = auth + strcspn(auth, "/?#");
    if (*end == '?' || *end == '#')
        return HF3FS_META_EINVAL;
    const char *at = NULL;
    for (const char *p = auth; p < end; p++)
        if (*p == '@')
            at = p; /* the last '@' ends the user info */
    const char *hostport = auth;
    if (at) {
        const char *info = auth;
        size_t info_len = (size_t)(at - auth);
        if (!memchr(info, ':', info_len))
            return HF3FS_META_EINVAL; /* user without a token: nothing to send */
        int rc = make_basic_auth(c, info, info_len);
        if (rc)
            return rc;
        hostport = at + 1;
    }
    size_t hp_len = (size_t)(end - hostport);
    hf_hostport hp;
    if (hf_hostport_parse(hostport, hp_len, 0, &hp) != HF_HOSTPORT_OK)
        return HF3FS_META_EINVAL;
    const char *host = hp.host;
    size_t host_len = hp.host_len;
    for (size_t i = 0; i < host_len; i++)
        if ((unsigned char)host[i] <= ' ' || host[i] == '%' || host[i] == '@')
            return HF3FS_META_EINVAL;
    size_t path_len = strlen(end);
    while (path_len && end[path_len - 1] == '/')
        path_len--;
    for (size_t i = 0; i < path_len; i++)
        if ((unsigned char)end[i] <= ' ' || (unsigned char)end[i] >= 0x7f)
            return HF3FS_META_EINVAL;
    c->host = copy_range(host, host_len);
    c->port = hp.port_text ? copy_range(hp.port_text, hp.port_len) : copy_range("80", 2);
    c->host_header = copy_range(hostport, hp_len);
    c->base_path = copy_range(end, path_len);
    if (!c->host || !c->port || !c->host_header || !c->base_path)
        return HF3FS_META_ENOMEM;
    return 0;
}

int hf3fs_meta_open(const char *url, hf3fs_meta_client **out)
{
    if (out)
        *out = NULL;
    if (!url || !out)
        return HF3FS_META_EINVAL;
    hf3fs_meta_client *c = calloc(1, sizeof *c);
    if (!c)
        return HF3FS_META_ENOMEM;
    c->fd = -1;
    c->connect_timeout_ms = HF3FS_META__DEFAULT_CONNECT_MS;
    c->request_timeout_ms = HF3FS_META__DEFAULT_REQUEST_MS;
    c->max_retries = HF3FS_META__DEFAULT_RETRIES;
    c->backoff_ms = HF3FS_META__DEFAULT_BACKOFF_MS;
    c->retry_allocate = true;
    c->max_answer = HF3FS_META__DEFAULT_MAX_ANSWER;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->rng = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)(uintptr_t)c ^ (uint64_t)getpid() ^ 1;
    hf3fs_meta__buf_init(&c->body, HF3FS_META__MAX_REQUEST);
    hf3fs_meta__buf_init(&c->request, HF3FS_META__MAX_REQUEST + 4096);
    hf3fs_meta__buf_init(&c->reader.body, c->max_answer);
    int rc = parse_url(c, url);
    if (rc) {
        hf3fs_meta_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

static void free_secret(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        free(s);
    }
}

void hf3fs_meta_close(hf3fs_meta_client *c)
{
    if (!c)
        return;
    hf3fs_meta__disconnect(c);
    free(c->host);
    free(c->port);
    free(c->host_header);
    free(c->base_path);
    free_secret(c->basic_auth);
    free_secret(c->bearer_auth);
    hf3fs_meta__buf_free(&c->body);
    hf3fs_meta__buf_free(&c->request);
    hf3fs_meta__http_reader_free(&c->reader);
    free(c);
}

/* ======================================================================= */
/* Settings                                                                 */

int hf3fs_meta_set_timeouts(hf3fs_meta_client *c, int connect_ms, int request_ms)
{
    if (!c || connect_ms <= 0 || request_ms <= 0)
        return HF3FS_META_EINVAL;
    c->connect_timeout_ms = connect_ms;
    c->request_timeout_ms = request_ms;
    return 0;
}

int hf3fs_meta_set_retries(hf3fs_meta_client *c, int max_retries, int backoff_ms)
{
    if (!c || max_retries < 0 || max_retries > 100 || backoff_ms < 1 || backoff_ms > 60000)
        return HF3FS_META_EINVAL;
    c->max_retries = max_retries;
    c->backoff_ms = backoff_ms;
    return 0;
}

int hf3fs_meta_set_retry_allocate(hf3fs_meta_client *c, int on)
{
    if (!c)
        return HF3FS_META_EINVAL;
    c->retry_allocate = on != 0;
    return 0;
}

int hf3fs_meta_set_bearer_token(hf3fs_meta_client *c, const char *token)
{
    if (!c)
        return HF3FS_META_EINVAL;
    if (!token) {
        free_secret(c->bearer_auth);
        c->bearer_auth = NULL;
        return 0;
    }
    if (!*token)
        return HF3FS_META_EINVAL;
    for (const char *p = token; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
            return HF3FS_META_EINVAL;
    size_t n = strlen(token) + sizeof "Bearer ";
    char *auth = malloc(n);
    if (!auth)
        return HF3FS_META_ENOMEM;
    snprintf(auth, n, "Bearer %s", token);
    free_secret(c->bearer_auth);
    c->bearer_auth = auth;
    return 0;
}

int hf3fs_meta_set_max_answer(hf3fs_meta_client *c, size_t bytes)
{
    if (!c || bytes < 1024)
        return HF3FS_META_EINVAL;
    c->max_answer = bytes;
    return 0;
}

/* ======================================================================= */
/* Helpers of the operations                                                */

static void copy_detail(hf3fs_meta_client *c)
{
    hf3fs_meta__json_doc doc;
    memset(&doc, 0, sizeof doc); /* freed below even when nothing was parsed */
    const hf3fs_meta__buf *body = &c->reader.body;
    if (body->len && hf3fs_meta__json_parse(&doc, body->data, body->len, 8) == 0) {
        size_t len;
        const char *detail = hf3fs_meta__json_string(&doc, hf3fs_meta__json_get(&doc, 0, "detail"),
                                                     &len);
        if (detail)
            snprintf(c->last_detail, sizeof c->last_detail, "%s", detail);
    }
    hf3fs_meta__json_free(&doc);
}

int hf3fs_meta__check_status(hf3fs_meta_client *c, const char *what)
{
    int status = c->reader.status;
    if (status >= 200 && status < 300)
        return 0;
    copy_detail(c);
    const char *detail = c->last_detail[0] ? c->last_detail : "(no detail)";
    int code;
    if (status == 401)
        code = HF3FS_META_EUNAUTH;
    else if (status == 404 && strstr(c->last_detail, "not initialized"))
        code = HF3FS_META_ENOTINIT;
    else if (status >= 400 && status < 500)
        code = HF3FS_META_EREFUSED;
    else
        code = HF3FS_META_ESERVER;
    if (status < 400)
        return hf3fs_meta__set_error(c, code, "%s: unexpected HTTP status %d", what, status);
    return hf3fs_meta__set_error(c, code, "%s: HTTP %d: %s", what, status, detail);
}

void hf3fs_meta__body_begin(hf3fs_meta_client *c, hf3fs_meta__jw *w)
{
    hf3fs_meta__buf_reset(&c->body);
    hf3fs_meta__jw_init(w, &c->body);
    hf3fs_meta__jw_object_begin(w);
}

int hf3fs_meta__post(hf3fs_meta_client *c, const char *path, const hf3fs_meta__jw *w,
                     hf3fs_meta__retry_rule rule, hf3fs_meta__json_doc *doc)
{
    if (doc)
        memset(doc, 0, sizeof *doc);
    int rc = hf3fs_meta__jw_error(w);
    if (rc == HF3FS_META_EINVAL)
        return hf3fs_meta__set_error(c, rc, "POST %s: a key or namespace is not valid UTF-8", path);
    if (rc)
        return hf3fs_meta__set_error(c, rc, "POST %s: cannot build the request body: %s", path,
                                     hf3fs_meta_strerror(rc));
    rc = hf3fs_meta__call(c, "POST", path, c->body.data, c->body.len, rule);
    if (rc)
        return rc;
    char what[160];
    snprintf(what, sizeof what, "POST %s", path);
    if ((rc = hf3fs_meta__check_status(c, what)) != 0 || !doc)
        return rc;
    const hf3fs_meta__buf *body = &c->reader.body;
    rc = hf3fs_meta__json_parse(doc, body->data ? body->data : "", body->len,
                                HF3FS_META__JSON_DEFAULT_DEPTH);
    if (rc == HF3FS_META_ENOMEM)
        return hf3fs_meta__set_error(c, rc, "%s: out of memory decoding the answer", what);
    if (rc)
        return hf3fs_meta__set_error(c, rc, "%s: answer is not JSON: %s at byte %zu", what,
                                     doc->error, doc->error_offset);
    if (doc->nodes[0].type != HF3FS_META__JSON_OBJECT)
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO, "%s: answer is not a JSON object", what);
    return 0;
}

int hf3fs_meta__check_rank(hf3fs_meta_client *c, int rank)
{
    if (rank < 0)
        return hf3fs_meta__set_error(c, HF3FS_META_EINVAL, "negative rank %d", rank);
    return 0;
}

int hf3fs_meta__check_array(hf3fs_meta_client *c, const void *array, size_t n, const char *name)
{
    if (n && !array)
        return hf3fs_meta__set_error(c, HF3FS_META_EINVAL, "%s is NULL with %zu elements", name, n);
    return 0;
}

int hf3fs_meta__check_keys(hf3fs_meta_client *c, const char *const *keys, size_t n)
{
    int rc = hf3fs_meta__check_array(c, keys, n, "keys");
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (!keys[i])
            return hf3fs_meta__set_error(c, HF3FS_META_EINVAL, "keys[%zu] is NULL", i);
    return 0;
}

void hf3fs_meta__write_keys(hf3fs_meta__jw *w, const char *name, const char *const *keys, size_t n,
                            bool pairs)
{
    hf3fs_meta__jw_key(w, name);
    hf3fs_meta__jw_array_begin(w);
    for (size_t i = 0; i < n; i++) {
        if (pairs)
            hf3fs_meta__jw_array_begin(w);
        hf3fs_meta__jw_cstring(w, keys[i]);
        if (pairs) {
            hf3fs_meta__jw_string(w, "", 0);
            hf3fs_meta__jw_array_end(w);
        }
    }
    hf3fs_meta__jw_array_end(w);
}

void hf3fs_meta__write_confirmations(hf3fs_meta__jw *w, const char *name, const char *const *keys,
                                     const int64_t *pages, size_t n)
{
    hf3fs_meta__jw_key(w, name);
    hf3fs_meta__jw_array_begin(w);
    for (size_t i = 0; i < n; i++) {
        hf3fs_meta__jw_array_begin(w);
        hf3fs_meta__jw_cstring(w, keys[i]);
        hf3fs_meta__jw_int(w, pages[i]);
        hf3fs_meta__jw_array_end(w);
    }
    hf3fs_meta__jw_array_end(w);
}

void hf3fs_meta__write_pages(hf3fs_meta__jw *w, const char *name, const int64_t *pages, size_t n)
{
    hf3fs_meta__jw_key(w, name);
    hf3fs_meta__jw_array_begin(w);
    for (size_t i = 0; i < n; i++)
        hf3fs_meta__jw_int(w, pages[i]);
    hf3fs_meta__jw_array_end(w);
}

int hf3fs_meta__answer_array(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc,
                             const char *name, size_t n, uint32_t *array_out)
{
    uint32_t a = hf3fs_meta__json_get(doc, 0, name);
    if (a == HF3FS_META__JSON_NONE || doc->nodes[a].type != HF3FS_META__JSON_ARRAY)
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO, "answer has no \"%s\" array", name);
    if (doc->nodes[a].count != n)
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                     "answer \"%s\" has %u entries for %zu keys", name,
                                     (unsigned)doc->nodes[a].count, n);
    *array_out = a;
    return 0;
}

int hf3fs_meta__answer_page(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, uint32_t i,
                            bool null_ok, const char *what, size_t index, int64_t *page_out)
{
    if (null_ok && doc->nodes[i].type == HF3FS_META__JSON_NULL) {
        *page_out = -1;
        return 0;
    }
    int64_t page;
    if (hf3fs_meta__json_int(doc, i, &page) != 0 || page < -1)
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO,
                                     "answer \"%s\"[%zu] is not a page number%s", what, index,
                                     null_ok ? " or null" : "");
    *page_out = page;
    return 0;
}

/* A boolean from node i. */
static int answer_bool(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, uint32_t i,
                       const char *what, size_t index, bool *out)
{
    uint8_t type = doc->nodes[i].type;
    if (type != HF3FS_META__JSON_TRUE && type != HF3FS_META__JSON_FALSE)
        return hf3fs_meta__set_error(c, HF3FS_META_EPROTO, "answer \"%s\"[%zu] is not a boolean",
                                     what, index);
    *out = type == HF3FS_META__JSON_TRUE;
    return 0;
}

/* The n items of the answer's array `name` into bools[] or, bools NULL,
 * into pages[] (a page or null each). */
static int read_items(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, const char *name,
                      size_t n, bool *bools, int64_t *pages)
{
    uint32_t array = 0; /* set when rc is 0 */
    int rc = hf3fs_meta__answer_array(c, doc, name, n, &array);
    uint32_t item = rc == 0 ? hf3fs_meta__json_first(doc, array) : HF3FS_META__JSON_NONE;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = bools ? answer_bool(c, doc, item, name, i, &bools[i])
                   : hf3fs_meta__answer_page(c, doc, item, true, name, i, &pages[i]);
        item = hf3fs_meta__json_next(doc, array, item);
    }
    return rc;
}

int hf3fs_meta__read_bools(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, const char *name,
                           size_t n, bool *out)
{
    return read_items(c, doc, name, n, out, NULL);
}

int hf3fs_meta__read_pages(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, const char *name,
                           size_t n, int64_t *out)
{
    return read_items(c, doc, name, n, NULL, out);
}
