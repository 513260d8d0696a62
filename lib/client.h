/*
 * client.h: what the operation files (vllm.c, sglang.c, admin.c) share with
 * the client core (client.c: the handle, URL, errors; transport.c: the
 * connection, one request/answer exchange, retries).
 *
 * An operation builds its JSON body in c->body with a writer, calls
 * hf3fs_meta__call(), and reads c->reader (status and body) until the next
 * call. Every function that fails has set the client's message (last_error)
 * and returns the code; hf3fs_meta__set_error() is the one place that does.
 */
#ifndef HF3FS_META_LIB_CLIENT_H
#define HF3FS_META_LIB_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "hf3fs_meta.h"
#include "http_reader.h"
#include "json.h"

#define HF3FS_META__MSG_MAX 1024
#define HF3FS_META__DEFAULT_CONNECT_MS 5000
#define HF3FS_META__DEFAULT_REQUEST_MS 30000
#define HF3FS_META__DEFAULT_RETRIES 3
#define HF3FS_META__DEFAULT_BACKOFF_MS 50
#define HF3FS_META__BACKOFF_CAP_MS 2000
#define HF3FS_META__DEFAULT_MAX_ANSWER (16u << 20)
#define HF3FS_META__MAX_REQUEST (256u << 20) /* a request body we refuse to build */

struct hf3fs_meta_client {
    /* from the URL */
    char *host;        /* for getaddrinfo: a name or an address, no brackets */
    char *port;        /* decimal */
    char *host_header; /* the URL's host[:port], as sent in Host: */
    char *base_path;   /* "" or "/prefix" (no trailing slash) */
    char *basic_auth;  /* "Basic <base64>" from the URL's user info, or NULL */
    char *bearer_auth; /* "Bearer <token>", or NULL; wins over basic_auth */
    /* settings */
    int connect_timeout_ms;
    int request_timeout_ms;
    int max_retries;
    int backoff_ms;
    bool retry_allocate;
    size_t max_answer;
    /* the connection */
    int fd;       /* -1 when closed */
    uint64_t rng; /* backoff jitter */
    /* per call */
    hf3fs_meta__buf body;    /* JSON body being built */
    hf3fs_meta__buf request; /* the request bytes (head and body) */
    hf3fs_meta__http_reader reader;
    int last_status;
    char last_error[HF3FS_META__MSG_MAX];
    char last_detail[HF3FS_META__MSG_MAX];
};

/* Whether a request may be repeated once it was fully sent (header RETRIES). */
typedef enum hf3fs_meta__retry_rule {
    HF3FS_META__IDEMPOTENT,
    HF3FS_META__ALLOCATION,
} hf3fs_meta__retry_rule;

/* Set last_error (printf format) and return code. */
int hf3fs_meta__set_error(hf3fs_meta_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Start an operation: clear the messages and the status. EINVAL for NULL c. */
int hf3fs_meta__begin(hf3fs_meta_client *c);

/* Send method path (after the base path) with body[0..len-1] (body NULL: no
 * body and no Content-Type) and read the answer into c->reader. 0 once an
 * answer arrived, whatever its status; else a transport error. */
int hf3fs_meta__call(hf3fs_meta_client *c, const char *method, const char *path, const char *body,
                     size_t len, hf3fs_meta__retry_rule rule);

/* 0 for a 2xx answer; for an error status set last_detail from the JSON
 * detail and return the code (EUNAUTH, ENOTINIT, EREFUSED, ESERVER). */
int hf3fs_meta__check_status(hf3fs_meta_client *c, const char *what);

/* POST the JSON in c->body (checking the writer w first: EINVAL for invalid
 * UTF-8) and require a 2xx. If doc is not NULL, also decode the answer into
 * it, which must be a JSON object (EPROTO otherwise); the caller frees doc
 * with hf3fs_meta__json_free in every case. */
int hf3fs_meta__post(hf3fs_meta_client *c, const char *path, const hf3fs_meta__jw *w,
                     hf3fs_meta__retry_rule rule, hf3fs_meta__json_doc *doc);

/* Start c->body as a JSON object. */
void hf3fs_meta__body_begin(hf3fs_meta_client *c, hf3fs_meta__jw *w);

/* Argument checks shared by the operations (set the message on failure). */
int hf3fs_meta__check_rank(hf3fs_meta_client *c, int rank);
int hf3fs_meta__check_keys(hf3fs_meta_client *c, const char *const *keys, size_t n);
int hf3fs_meta__check_array(hf3fs_meta_client *c, const void *array, size_t n, const char *name);

/* Write "name": [k0, k1...] or, with pairs, "name": [[k0, ""], ...]. */
void hf3fs_meta__write_keys(hf3fs_meta__jw *w, const char *name, const char *const *keys, size_t n,
                            bool pairs);
/* Write "name": [[k0, p0], ...]. */
void hf3fs_meta__write_confirmations(hf3fs_meta__jw *w, const char *name, const char *const *keys,
                                     const int64_t *pages, size_t n);
void hf3fs_meta__write_pages(hf3fs_meta__jw *w, const char *name, const int64_t *pages, size_t n);

/* The array member `name` of the root object, with exactly n elements; else
 * EPROTO (message names the field). */
int hf3fs_meta__answer_array(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc,
                             const char *name, size_t n, uint32_t *array_out);
/* A page from node i: an integer >= -1, or null (-1) if null_ok. */
int hf3fs_meta__answer_page(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, uint32_t i,
                            bool null_ok, const char *what, size_t index, int64_t *page_out);

/* {"name": [bool, ...]} and {"name": [page or null, ...]}, one
 * entry per key, into out[0..n-1]. */
int hf3fs_meta__read_bools(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, const char *name,
                           size_t n, bool *out);
int hf3fs_meta__read_pages(hf3fs_meta_client *c, const hf3fs_meta__json_doc *doc, const char *name,
                           size_t n, int64_t *out);

/* transport.c */
void hf3fs_meta__disconnect(hf3fs_meta_client *c);

#endif
