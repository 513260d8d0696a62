/*
 * fuzz_client.c: the client library's readers of server answers (lib/): the
 * byte-fed HTTP response reader and the JSON reader. An engine links this
 * library; whatever a server (or anything on its port) sends must never
 * crash it.
 *
 * Input: byte 0 picks the cut (bits 1..7 seed the piece sizes) and whether
 * the request was HEAD (bit 0); the rest is what the "server" sends.
 *
 * Oracles:
 *   - the reader gives the same outcome (result, status, body, keep-alive,
 *     bytes used) whether the answer comes in one piece or in pieces of
 *     1..16 bytes: feeding is split-invariant;
 *   - a body the reader accepts is within its max_body;
 *   - when the body is JSON the reader accepts, its node layout is sound
 *     (every subtree ends within its parent's, counts match the children,
 *     strings are valid UTF-8) and every accessor stays in bounds.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "hf3fs_meta.h"
#include "http_reader.h"
#include "json.h"

#define MAX_BODY 65536

typedef struct outcome {
    int result;
    int status;
    bool keep_alive;
    size_t used;
    size_t body_len;
    char *body;
} outcome;

/* Feed data in pieces (sizes from seed; 0: one piece), then EOF if needed. */
static void feed(const uint8_t *data, size_t size, bool head, unsigned seed, outcome *out)
{
    hf3fs_meta__http_reader r;
    memset(&r, 0, sizeof r);
    hf3fs_meta__http_reader_init(&r, MAX_BODY, head);
    size_t off = 0;
    int rc = HF3FS_META__HTTP_MORE;
    uint32_t x = seed * 2654435761u + 1;
    while (off < size) {
        size_t piece = size - off;
        if (seed) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            size_t want = 1 + x % 16;
            if (want < piece)
                piece = want;
        }
        /* An exact-size copy of the piece: ASan sees any over-read. */
        char *copy = malloc(piece);
        memcpy(copy, data + off, piece);
        size_t used = 0;
        rc = hf3fs_meta__http_feed(&r, copy, piece, &used);
        free(copy);
        if (used > piece)
            fuzz_fail("the reader used %zu bytes of a piece of %zu", used, piece);
        off += used;
        if (rc != HF3FS_META__HTTP_MORE)
            break;
        if (used != piece)
            fuzz_fail("the reader wants more but left %zu bytes of its piece", piece - used);
    }
    if (rc == HF3FS_META__HTTP_MORE)
        rc = hf3fs_meta__http_eof(&r);
    out->result = rc;
    out->used = off;
    out->status = rc == HF3FS_META__HTTP_DONE ? r.status : 0;
    out->keep_alive = rc == HF3FS_META__HTTP_DONE && r.keep_alive;
    out->body_len = rc == HF3FS_META__HTTP_DONE ? r.body.len : 0;
    out->body = NULL;
    if (out->body_len) {
        if (out->body_len > MAX_BODY)
            fuzz_fail("a body of %zu bytes past max_body %d", out->body_len, MAX_BODY);
        out->body = malloc(out->body_len);
        memcpy(out->body, r.body.data, out->body_len);
    }
    hf3fs_meta__http_reader_free(&r);
}

static void check_json(const char *text, size_t len)
{
    hf3fs_meta__json_doc doc;
    memset(&doc, 0, sizeof doc);
    if (hf3fs_meta__json_parse(&doc, text, len, HF3FS_META__JSON_DEFAULT_DEPTH) != 0) {
        hf3fs_meta__json_free(&doc);
        return;
    }
    if (doc.n_nodes == 0 || doc.nodes[0].end != doc.n_nodes)
        fuzz_fail("the root does not span the %u nodes", doc.n_nodes);
    for (uint32_t i = 0; i < doc.n_nodes; i++) {
        const hf3fs_meta__json_node *n = hf3fs_meta__json_at(&doc, i);
        if (n->end <= i || n->end > doc.n_nodes)
            fuzz_fail("node %u ends at %u (of %u)", i, n->end, doc.n_nodes);
        if (n->type == HF3FS_META__JSON_STRING) {
            size_t slen;
            const char *s = hf3fs_meta__json_string(&doc, i, &slen);
            if (!s || !hf3fs_meta__utf8_valid(s, slen) || s[slen] != '\0')
                fuzz_fail("string node %u is not NUL-terminated valid UTF-8", i);
        }
        if (n->type == HF3FS_META__JSON_NUMBER) {
            int64_t v;
            (void)hf3fs_meta__json_int(&doc, i, &v);
        }
        if (n->type == HF3FS_META__JSON_ARRAY || n->type == HF3FS_META__JSON_OBJECT) {
            uint32_t count = 0;
            for (uint32_t c = hf3fs_meta__json_first(&doc, i); c != HF3FS_META__JSON_NONE;
                 c = hf3fs_meta__json_next(
                     &doc, i, n->type == HF3FS_META__JSON_OBJECT ? doc.nodes[c].end : c)) {
                if (c <= i || c >= n->end)
                    fuzz_fail("child %u of node %u is outside it", c, i);
                if (++count > n->count)
                    break;
            }
            if (count != n->count)
                fuzz_fail("node %u says %u children, walking finds %u", i, n->count, count);
            (void)hf3fs_meta__json_get(&doc, i, "detail");
        }
    }
    hf3fs_meta__json_free(&doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool head = data[0] & 1;
    unsigned seed = data[0] >> 1 | 1;
    outcome whole, pieces;
    feed(data + 1, size - 1, head, 0, &whole);
    feed(data + 1, size - 1, head, seed, &pieces);
    if (whole.result != pieces.result || whole.status != pieces.status ||
        whole.keep_alive != pieces.keep_alive || whole.used != pieces.used ||
        whole.body_len != pieces.body_len ||
        (whole.body_len && memcmp(whole.body, pieces.body, whole.body_len) != 0))
        fuzz_fail("one piece: result %d status %d keep-alive %d used %zu body %zu; in pieces: "
                  "result %d status %d keep-alive %d used %zu body %zu",
                  whole.result, whole.status, whole.keep_alive, whole.used, whole.body_len,
                  pieces.result, pieces.status, pieces.keep_alive, pieces.used, pieces.body_len);
    if (whole.body_len)
        check_json(whole.body, whole.body_len);
    else
        check_json((const char *)data + 1, size - 1);
    free(whole.body);
    free(pieces.body);
    return 0;
}
