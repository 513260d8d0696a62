/*
 * http_reader.h: a byte-fed HTTP/1.x response parser with no I/O in it
 * (in the manner of hiredis's read.h): the transport feeds it whatever bytes
 * it received, in pieces of any size down to one byte, and asks whether an
 * answer is complete.
 *
 * What it accepts (RFC 9112, as a client needs it):
 *   - a status line "HTTP/1.0" or "HTTP/1.1", a three-digit status, an
 *     optional reason; lines end in CRLF (a bare LF is tolerated);
 *   - header fields "name: value"; names compared case-insensitively; no
 *     white space before the colon and no obsolete line folding;
 *   - interim 1xx answers (100 Continue ...) are skipped, 101 is refused;
 *   - the body: none for 1xx, 204 and 304 (and for answers to HEAD);
 *     otherwise chunked when the last transfer coding is "chunked" (only
 *     "chunked" and "identity" are understood; chunk extensions and trailers
 *     are skipped), else Content-Length (repeated values must agree), else
 *     everything up to the end of the connection.
 * Limits: a line (status, header, chunk size, trailer) of at most
 * HF3FS_META__HTTP_MAX_LINE bytes, at most HF3FS_META__HTTP_MAX_HEAD bytes of
 * status line and headers together, and a body of at most max_body bytes
 * (HF3FS_META_ETOOBIG beyond; the other violations are HF3FS_META_EPROTO
 * with a static reason in `error`).
 *
 * It also tells whether the connection may carry another request afterwards
 * (keep_alive): HTTP/1.1 unless "Connection: close", HTTP/1.0 only with
 * "Connection: keep-alive", never when the body ended with the connection.
 */
#ifndef HF3FS_META_LIB_HTTP_READER_H
#define HF3FS_META_LIB_HTTP_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define HF3FS_META__HTTP_MAX_LINE 8192
#define HF3FS_META__HTTP_MAX_HEAD 65536

/* hf3fs_meta__http_feed results besides the negative error codes */
#define HF3FS_META__HTTP_MORE 0 /* need more bytes */
#define HF3FS_META__HTTP_DONE 1 /* a complete answer */

typedef struct hf3fs_meta__http_reader {
    int state;
    /* the answer */
    int status;
    int minor_version; /* 0 or 1 */
    bool keep_alive;
    hf3fs_meta__buf body;
    /* framing */
    bool head_request;
    bool chunked;
    bool conn_close;
    bool conn_keep_alive;
    bool has_length;
    uint64_t content_length;
    uint64_t remaining; /* of the body or of the current chunk */
    size_t head_bytes;  /* status line and headers so far */
    size_t line_len;
    char line[HF3FS_META__HTTP_MAX_LINE];
    bool got_bytes;    /* at least one byte was fed */
    int result;        /* the error code after a failure */
    const char *error; /* static reason after a failure */
} hf3fs_meta__http_reader;

/* Prepare for a new answer. The reader must be zeroed before its first init
 * (it keeps its body buffer's memory across answers). max_body bounds the body; head_request: the
 * request was HEAD (no body follows whatever the headers say). */
void hf3fs_meta__http_reader_init(hf3fs_meta__http_reader *r, size_t max_body, bool head_request);
void hf3fs_meta__http_reader_free(hf3fs_meta__http_reader *r);

/* Feed len bytes. *used receives how many were consumed (all of them unless
 * the answer completed before their end: the rest belongs to whatever
 * follows). Returns HTTP_MORE, HTTP_DONE, or a negative HF3FS_META_E* code;
 * after DONE or an error, feeding again returns the same result. */
int hf3fs_meta__http_feed(hf3fs_meta__http_reader *r, const char *bytes, size_t len, size_t *used);

/* The connection ended. Returns HTTP_DONE if that completes the answer (a
 * body delimited by the end of the connection), else HF3FS_META_EPROTO
 * ("connection closed in the middle of an answer"), or the earlier result. */
int hf3fs_meta__http_eof(hf3fs_meta__http_reader *r);

#endif
