/*
 * loadgen.c: the benchmark's own HTTP load generator and data loader, for
 * what wrk cannot express (answers that decide the next request).
 *
 *   loadgen load   PORT N [RANKS] [PAGES] [KEYCHARS] [vllm|sglang [NAMESPACE]]
 *       initialize ranks 0..RANKS-1 (default 2) with PAGES pages (default
 *       1,000,000) and make keys 0..N-1 complete: allocate + confirm on every
 *       rank, in batches of 1024 (one connection), in the vLLM dialect
 *       (default) or the SGLang one (namespace NAMESPACE, default none: "kv").
 *   loadgen bodies KIND N COUNT BATCH
 *       print COUNT requests as "PATH<TAB>BODY" lines, each with BATCH keys
 *       drawn at random from 0..N-1 (for the wrk scripts). KIND: exists,
 *       locations, sg-exists, sg-indices. Ranks alternate 0, 1. With
 *       NAMESPACES (SGLang kinds), the bodies name "namespace": ns0, ns1, ...
 *       in turn, and every (namespace, rank 0/1) comes up alike.
 *   loadgen save   PORT SECONDS CONNS [BATCH] [RANKS]
 *       scenario 4: each connection takes BATCH fresh keys, then for every
 *       rank allocates them and confirms them with the pages it was given.
 *       One allocate + confirm on one rank is a pair.
 *   loadgen sg-save PORT SECONDS CONNS [BATCH] [RANKS] [NAMESPACES]
 *       the same in the SGLang dialect (reserve_and_allocate_page_indices +
 *       confirm_write); with NAMESPACES, each job (BATCH keys on every
 *       rank) is in one of ns0..ns<NAMESPACES-1>, in turn.
 *   loadgen mixed  PORT SECONDS CONNS N [RANKS]
 *       scenario 6, shaped like an engine step: a prompt is a shared prefix
 *       (16..64 blocks of one of N/64 "documents", the documents' popularity
 *       skewed) followed by 1..64 fresh blocks. The scheduler asks
 *       batch_exists for all of them; then every rank's worker loads the
 *       leading hits (get_locations) and saves the rest (batch_allocate +
 *       confirm_write with the pages it got).
 *   loadgen hmget-load REDISPORT N
 *       the baseline of bench/run's Redis CPU figure: fill two hashes of a
 *       plain Redis, hf3fs-bench:{hmget}:0 and :1 (one per rank), with the
 *       keys 0..N-1 as 32-byte fields (a 32-hex key as it is, a 64-hex one packed), "1"
 *       each.
 *   loadgen hmget REDISPORT SECONDS CONNS N [BATCH]
 *       on CONNS connections, each with one read in flight: BATCH (128)
 *       keys drawn at random from 0..N-1, and the two HMGETs of them (one
 *       per hash, i.e. per rank) sent together in one write, as a client
 *       asking both ranks would; a read is answered when both replies are
 *       in. No warm-up: every read answered in the interval is counted, so
 *       that a /proc CPU delta of the Redis around the run divides by all
 *       of them. An answer with a missing field is an error.
 *
 * With $HF3FS_AUTHORIZATION set, every request carries it as its
 * Authorization header (bench/read_cost.py --only auth).
 *
 * Keys: key(i) of bench/keys.h, in the shape of the KEYCHARS environment
 * variable (32: vLLM's MD5 hex; 64, the default: SGLang's SHA-256 hex; 66:
 * SGLang's "<64 hex>-k"/"-v" pairs), the same in every subcommand; load's
 * KEYCHARS argument overrides it. With 66, `bodies` draws whole pages (a
 * "-k" key and its "-v" in turn), and `load N` makes N keys, N/2 pages.
 * Requests use the stock Python clients' JSON
 * spacing ({"keys": ["...", "..."]}). Latency is per HTTP request, from the
 * first byte sent to the last byte received, in a 1 us histogram.
 *
 * load-style subcommands print one line:
 *   requests=R seconds=S rps=X pairs_per_s=Y keys_per_s=Z p50_us=A p99_us=B errors=E
 *   answered=T answered_pairs=P
 * where requests and pairs count the measured interval (after a warm-up of
 * 0.5 s in runs over 2 s) and answered / answered_pairs every answer of the
 * run, warm-up included (to divide a CPU delta measured around the whole
 * run).
 * and exit 1 if any answer was unexpected (status, or an unparseable body).
 */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "keys.h"

#define MAX_BATCH 1024
#define HIST_US 200000 /* 1 us buckets up to 200 ms; beyond counts as 200 ms */
#define FRESH_BASE (1ull << 40)

static int key_chars = 64;
static const char *authorization; /* $HF3FS_AUTHORIZATION, or NULL */
/* the SGLang dialect's "namespace" member of every body (NULL: none, i.e. kv) */
static const char *sg_ns = NULL;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loadgen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

/* key(i): key_chars bytes in its shape (keys.h), no NUL. */
static void key_text(uint64_t i, char *out)
{
    bench_key_text(i, key_chars, out);
}

static uint64_t rng_state = 0x1234567;

static uint64_t rnd(void)
{
    rng_state = bench_splitmix(rng_state);
    return rng_state;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- growable text ---- */

typedef struct text {
    char *ptr;
    size_t len, cap;
} text;

static void text_need(text *t, size_t extra)
{
    if (t->len + extra <= t->cap)
        return;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < t->len + extra)
        cap *= 2;
    t->ptr = realloc(t->ptr, cap);
    if (!t->ptr)
        die("out of memory");
    t->cap = cap;
}

static void text_put(text *t, const char *s, size_t n)
{
    text_need(t, n);
    memcpy(t->ptr + t->len, s, n);
    t->len += n;
}

static void text_printf(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char buf[256];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    text_put(t, buf, (size_t)n);
}

static void text_key(text *t, uint64_t i)
{
    text_need(t, (size_t)key_chars + 2);
    t->ptr[t->len++] = '"';
    key_text(i, t->ptr + t->len);
    t->len += (size_t)key_chars;
    t->ptr[t->len++] = '"';
}

/* ["k1", "k2", ...] */
static void text_key_list(text *t, const uint64_t *ids, size_t n)
{
    text_put(t, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i)
            text_put(t, ", ", 2);
        text_key(t, ids[i]);
    }
    text_put(t, "]", 1);
}

/* ---- request bodies ---- */

/* `"namespace": "..", ` when sg_ns is set (namespaces are plain names here) */
static void text_sg_ns(text *t)
{
    if (sg_ns)
        text_printf(t, "\"namespace\": \"%s\", ", sg_ns);
}


static void body_keys(text *t, const uint64_t *ids, size_t n)
{
    text_put(t, "{\"keys\": ", 9);
    text_key_list(t, ids, n);
    text_put(t, "}", 1);
}

static void body_sg_keys(text *t, const uint64_t *ids, size_t n)
{
    text_put(t, "{", 1);
    text_sg_ns(t);
    text_put(t, "\"keys\": ", 8);
    text_key_list(t, ids, n);
    text_put(t, "}", 1);
}

static void body_rank_keys(text *t, unsigned rank, const uint64_t *ids, size_t n)
{
    text_printf(t, "{\"rank\": %u, \"keys\": ", rank);
    text_key_list(t, ids, n);
    text_put(t, "}", 1);
}

/* batch_allocate items as the vLLM client sends them: [key, prefix_key]. */
static void body_allocate(text *t, unsigned rank, const uint64_t *ids, size_t n)
{
    text_printf(t, "{\"rank\": %u, \"keys\": [", rank);
    for (size_t i = 0; i < n; i++) {
        text_put(t, i ? ", [" : "[", i ? 3 : 1);
        text_key(t, ids[i]);
        text_put(t, ", null]", 7);
    }
    text_put(t, "]}", 2);
}

static void body_confirm(text *t, unsigned rank, const uint64_t *ids, const int64_t *pages,
                         size_t n)
{
    text_printf(t, "{\"rank\": %u, \"confirmations\": [", rank);
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        if (pages[i] < 0)
            continue;
        text_put(t, first ? "[" : ", [", first ? 1 : 3);
        first = false;
        text_key(t, ids[i]);
        text_printf(t, ", %lld]", (long long)pages[i]);
    }
    text_put(t, "], \"pages_to_release\": []}", 26);
}

static void body_sg_allocate(text *t, const uint64_t *ids, size_t n)
{
    text_put(t, "{", 1);
    text_sg_ns(t);
    text_put(t, "\"keys\": [", 9);
    for (size_t i = 0; i < n; i++) {
        text_put(t, i ? ", [" : "[", i ? 3 : 1);
        text_key(t, ids[i]);
        text_put(t, ", null]", 7);
    }
    text_put(t, "]}", 2);
}

static void body_sg_confirm(text *t, const uint64_t *ids, const int64_t *pages, size_t n)
{
    text_put(t, "{", 1);
    text_sg_ns(t);
    text_put(t, "\"written_keys_to_confirm\": [", 28);
    for (size_t i = 0; i < n; i++) {
        text_put(t, i ? ", [" : "[", i ? 3 : 1);
        text_key(t, ids[i]);
        text_printf(t, ", %lld]", (long long)pages[i]);
    }
    text_put(t, "], \"pages_to_release\": []}", 26);
}

/* ---- answers ---- */

static const char *skip_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* Pages of {"results": [["key", page], ...]} (vLLM) or {"indices": [[existed,
 * page], ...]} (SGLang), in order, spaces allowed; -1 on a bad body. */
static int parse_results(const char *body, size_t len, int64_t *pages, size_t n)
{
    const char *end = body + len;
    const char *p = memmem(body, len, "\"results\"", 9);
    if (!p)
        p = memmem(body, len, "\"indices\"", 9);
    if (!p)
        return -1;
    p = memchr(p, '[', (size_t)(end - p));
    if (!p)
        return -1;
    p++;
    for (size_t i = 0; i < n; i++) {
        p = skip_space(p, end);
        if (p < end && *p == ',')
            p = skip_space(p + 1, end);
        if (p >= end || *p != '[')
            return -1;
        p = memchr(p, ',', (size_t)(end - p)); /* keys are hex: no commas inside */
        if (!p)
            return -1;
        p = skip_space(p + 1, end);
        char *stop;
        pages[i] = strtoll(p, &stop, 10);
        if (stop == p)
            return -1;
        p = skip_space(stop, end);
        if (p >= end || *p != ']')
            return -1;
        p++;
    }
    return 0;
}

/* Leading trues of {"exists":[true,false,...]}; -1 on a bad body. */
static long leading_true(const char *body, size_t len, size_t n)
{
    const char *end = body + len;
    const char *p = memmem(body, len, "\"exists\"", 8);
    p = p ? memchr(p, '[', (size_t)(end - p)) : NULL;
    if (!p)
        return -1;
    p++;
    long h = 0;
    for (size_t i = 0; i < n; i++) {
        p = skip_space(p, end);
        if (p < end && *p == ',')
            p = skip_space(p + 1, end);
        if (end - p < 5 || strncmp(p, "true", 4) != 0)
            return end - p >= 5 && strncmp(p, "false", 5) == 0 ? h : -1;
        h++;
        p += 4;
    }
    return h;
}

/* ---- connections and the event loop ---- */

enum op { OP_EXISTS, OP_LOCATIONS, OP_ALLOCATE, OP_CONFIRM };

typedef struct conn {
    int fd;
    text out, in;
    size_t sent;
    double started;
    /* the job */
    uint64_t ids[MAX_BATCH];
    int64_t pages[MAX_BATCH];
    size_t n, hits;
    unsigned rank;
    enum op op;
    uint64_t fresh; /* next fresh key id of this connection */
    unsigned ns;    /* sg-save: the namespace of the job (ns<ns>) */
    uint64_t jobs;
} conn;

typedef struct run {
    int port;
    unsigned ranks;
    size_t batch;
    size_t nkeys;
    unsigned namespaces; /* sg-save: 0 for none (kv); else ns0..ns<namespaces-1> */
    uint64_t requests, errors, pairs, keys;
    uint64_t answered, answered_pairs; /* warm-up included */
    uint32_t *hist;
    bool measuring;
} run;

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        die("connect to 127.0.0.1:%d: %s", port, strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void start_request(conn *c, const char *path, const text *body)
{
    c->out.len = 0;
    text_printf(&c->out,
                "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                "application/json\r\nContent-Length: %zu\r\n",
                path, body->len);
    if (authorization) {
        text_put(&c->out, "Authorization: ", 15);
        text_put(&c->out, authorization, strlen(authorization));
        text_put(&c->out, "\r\n", 2);
    }
    text_put(&c->out, "\r\n", 2);
    text_put(&c->out, body->ptr, body->len);
    c->sent = 0;
    c->in.len = 0;
    c->started = now_s();
}

/* A whole answer in c->in: 1 with status and body; 0 if more bytes are needed. */
static int parse_answer(conn *c, int *status, const char **body, size_t *body_len)
{
    char *head_end = memmem(c->in.ptr, c->in.len, "\r\n\r\n", 4);
    if (!head_end)
        return 0;
    if (c->in.len < 12 || strncmp(c->in.ptr, "HTTP/1.", 7) != 0)
        die("bad answer: %.40s", c->in.ptr);
    *status = atoi(c->in.ptr + 9);
    size_t length = 0;
    for (char *line = memchr(c->in.ptr, '\n', (size_t)(head_end - c->in.ptr));
         line && line < head_end; line = memchr(line + 1, '\n', (size_t)(head_end - line))) {
        if (strncasecmp(line + 1, "Content-Length:", 15) == 0)
            length = strtoull(line + 16, NULL, 10);
    }
    size_t head = (size_t)(head_end + 4 - c->in.ptr);
    if (c->in.len < head + length)
        return 0;
    *body = c->in.ptr + head;
    *body_len = length;
    return 1;
}

static void record(run *r, conn *c)
{
    r->answered++;
    if (!r->measuring)
        return;
    double us = (now_s() - c->started) * 1e6;
    size_t b = us < 0 ? 0 : us >= HIST_US ? HIST_US - 1 : (size_t)us;
    r->hist[b]++;
    r->requests++;
}

static uint64_t percentile(const run *r, double pct)
{
    uint64_t want = (uint64_t)((double)r->requests * pct / 100.0), seen = 0;
    for (size_t b = 0; b < HIST_US; b++) {
        seen += r->hist[b];
        if (seen > want)
            return b;
    }
    return HIST_US;
}

/* ---- scenario 4: save ---- */

static bool sg_save; /* save in the SGLang dialect (sg-save) */
static char sg_ns_buf[32];

static void save_send_allocate(conn *c)
{
    text body = {0};
    if (sg_save) {
        char path[64];
        body_sg_allocate(&body, c->ids, c->n);
        snprintf(path, sizeof path, "/%u/reserve_and_allocate_page_indices", c->rank);
        start_request(c, path, &body);
    } else {
        body_allocate(&body, c->rank, c->ids, c->n);
        start_request(c, "/keys/batch_allocate", &body);
    }
    c->op = OP_ALLOCATE;
    free(body.ptr);
}

/* sg_ns for connection c's job (sg-save with namespaces) */
static void set_job_ns(const run *r, const conn *c)
{
    if (!sg_save || !r->namespaces) {
        sg_ns = NULL;
        return;
    }
    snprintf(sg_ns_buf, sizeof sg_ns_buf, "ns%u", c->ns);
    sg_ns = sg_ns_buf;
}

static void save_new_job(run *r, conn *c)
{
    c->n = r->batch;
    for (size_t i = 0; i < c->n; i++)
        c->ids[i] = c->fresh++;
    c->rank = 0;
    /* the namespaces in turn, each connection starting at its own */
    if (r->namespaces)
        c->ns = (unsigned)((c->jobs++ + (uint64_t)c->fd) % r->namespaces);
    set_job_ns(r, c);
    save_send_allocate(c);
}

static void confirm_pages(run *r, conn *c)
{
    text body = {0};
    set_job_ns(r, c);
    if (sg_save) {
        char path[64];
        body_sg_confirm(&body, c->ids, c->pages, c->n);
        snprintf(path, sizeof path, "/%u/confirm_write", c->rank);
        start_request(c, path, &body);
        c->op = OP_CONFIRM;
        free(body.ptr);
        return;
    }
    body_confirm(&body, c->rank, c->ids, c->pages, c->n);
    start_request(c, "/keys/confirm_write", &body);
    c->op = OP_CONFIRM;
    free(body.ptr);
}

static int save_answer(run *r, conn *c, int status, const char *body, size_t len)
{
    if (c->op == OP_ALLOCATE) {
        if (status != 200 || parse_results(body, len, c->pages, c->n) != 0)
            return -1;
        confirm_pages(r, c);
        return 0;
    }
    if (status != 204)
        return -1;
    r->answered_pairs++;
    if (r->measuring) {
        r->pairs++;
        r->keys += c->n;
    }
    if (++c->rank < r->ranks) {
        set_job_ns(r, c);
        save_send_allocate(c);
    } else
        save_new_job(r, c);
    return 0;
}

/* ---- scenario 6: mixed ---- */

/* A document drawn with a skew: density ~ 1/x over [1, docs+1), so the
 * first documents (system prompts, popular contexts) come up most. */
static size_t draw_document(size_t docs)
{
    double u = (double)(rnd() >> 11) / 9007199254740992.0;
    size_t d = (size_t)exp(u * log((double)docs + 1.0)) - 1;
    return d < docs ? d : docs - 1;
}

static void mixed_new_job(run *r, conn *c)
{
    size_t docs = r->nkeys / 64 ? r->nkeys / 64 : 1;
    size_t doc = draw_document(docs);
    size_t prefix = 16 + rnd() % 49;
    size_t suffix = 1 + rnd() % 64;
    c->n = 0;
    for (size_t i = 0; i < prefix && doc * 64 + i < r->nkeys; i++)
        c->ids[c->n++] = doc * 64 + i;
    for (size_t i = 0; i < suffix; i++)
        c->ids[c->n++] = c->fresh++;
    text body = {0};
    body_keys(&body, c->ids, c->n);
    start_request(c, "/keys/batch_exists", &body);
    c->op = OP_EXISTS;
    c->rank = 0;
    free(body.ptr);
}

/* The worker part of rank c->rank: load the hits, then save the rest. */
static void mixed_worker_step(run *r, conn *c)
{
    text body = {0};
    if (c->op == OP_EXISTS || c->op == OP_CONFIRM) {
        if (c->op == OP_CONFIRM && ++c->rank >= r->ranks) {
            mixed_new_job(r, c);
            return;
        }
        if (c->hits > 0) {
            body_rank_keys(&body, c->rank, c->ids, c->hits);
            start_request(c, "/keys/get_locations", &body);
            c->op = OP_LOCATIONS;
            free(body.ptr);
            return;
        }
    }
    if (c->hits == c->n) { /* nothing to save: next rank */
        c->op = OP_CONFIRM;
        mixed_worker_step(r, c);
        return;
    }
    body_allocate(&body, c->rank, c->ids + c->hits, c->n - c->hits);
    start_request(c, "/keys/batch_allocate", &body);
    c->op = OP_ALLOCATE;
    free(body.ptr);
}

static int mixed_answer(run *r, conn *c, int status, const char *body, size_t len)
{
    size_t keys = 0;
    switch (c->op) {
    case OP_EXISTS: {
        long h = status == 200 ? leading_true(body, len, c->n) : -1;
        if (h < 0)
            return -1;
        c->hits = (size_t)h;
        keys = c->n;
        mixed_worker_step(r, c);
        break;
    }
    case OP_LOCATIONS:
        if (status != 200 || !memmem(body, len, "\"locations\":[", 13))
            return -1;
        keys = c->hits;
        c->op = OP_LOCATIONS;
        mixed_worker_step(r, c);
        break;
    case OP_ALLOCATE: {
        size_t n = c->n - c->hits;
        if (status != 200 || parse_results(body, len, c->pages + c->hits, n) != 0)
            return -1;
        keys = n;
        text b = {0};
        body_confirm(&b, c->rank, c->ids + c->hits, c->pages + c->hits, n);
        start_request(c, "/keys/confirm_write", &b);
        c->op = OP_CONFIRM;
        free(b.ptr);
        break;
    }
    case OP_CONFIRM:
        if (status != 204)
            return -1;
        keys = c->n - c->hits;
        mixed_worker_step(r, c);
        break;
    }
    if (r->measuring)
        r->keys += keys;
    return 0;
}

/* ---- the loop ---- */

typedef int (*answer_fn)(run *r, conn *c, int status, const char *body, size_t len);
typedef void (*job_fn)(run *r, conn *c);

static void drive(run *r, size_t nconns, double seconds, job_fn first, answer_fn on_answer)
{
    int ep = epoll_create1(0);
    conn *conns = calloc(nconns, sizeof *conns);
    if (ep < 0 || !conns)
        die("setup failed");
    /* Fresh keys must be fresh in every run, also against a server that
     * kept the keys of earlier runs (bench/run reuses one server for all its
     * runs of a scenario): each run draws its own range from the clock. With
     * a fixed range, later runs asked for keys that were already complete,
     * which measures the hit path, not the save path. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t run_base = bench_splitmix(
        ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ ((uint64_t)getpid() << 32));
    for (size_t i = 0; i < nconns; i++) {
        conn *c = &conns[i];
        c->fd = connect_to(r->port);
        c->fresh = FRESH_BASE * (i + 1) + ((rnd() ^ run_base) & 0xffffffffull) * 4096;
        first(r, c);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    double t0 = now_s(), warm = t0 + (seconds > 2 ? 0.5 : 0.0), stop = warm + seconds;
    double measured_from = 0;
    struct epoll_event events[64];
    for (;;) {
        double t = now_s();
        if (!r->measuring && t >= warm) {
            r->measuring = true;
            measured_from = t;
        }
        if (t >= stop)
            break;
        int n = epoll_wait(ep, events, 64, 100);
        for (int e = 0; e < n; e++) {
            conn *c = events[e].data.ptr;
            if (c->sent < c->out.len) {
                ssize_t w = send(c->fd, c->out.ptr + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
                if (w < 0 && errno != EAGAIN)
                    die("send: %s", strerror(errno));
                if (w > 0)
                    c->sent += (size_t)w;
                struct epoll_event ev = {
                    .events = c->sent < c->out.len ? EPOLLIN | EPOLLOUT : EPOLLIN, .data.ptr = c};
                epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
            }
            if (!(events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                continue;
            text_need(&c->in, 65536);
            ssize_t got = recv(c->fd, c->in.ptr + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
            if (got == 0)
                die("the server closed a connection");
            if (got < 0) {
                if (errno == EAGAIN)
                    continue;
                die("recv: %s", strerror(errno));
            }
            c->in.len += (size_t)got;
            int status;
            const char *body;
            size_t len;
            if (!parse_answer(c, &status, &body, &len))
                continue;
            record(r, c);
            if (on_answer(r, c, status, body, len) != 0) {
                if (r->errors++ < 3)
                    fprintf(stderr, "loadgen: unexpected answer %d: %.200s\n", status, body);
                first(r, c);
            }
            struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
            epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
        }
    }
    double elapsed = now_s() - measured_from;
    printf("requests=%llu seconds=%.2f rps=%.0f pairs_per_s=%.0f keys_per_s=%.0f p50_us=%llu "
           "p99_us=%llu errors=%llu answered=%llu answered_pairs=%llu\n",
           (unsigned long long)r->requests, elapsed, (double)r->requests / elapsed,
           (double)r->pairs / elapsed, (double)r->keys / elapsed,
           (unsigned long long)percentile(r, 50), (unsigned long long)percentile(r, 99),
           (unsigned long long)r->errors, (unsigned long long)r->answered,
           (unsigned long long)r->answered_pairs);
    for (size_t i = 0; i < nconns; i++) {
        close(conns[i].fd);
        free(conns[i].out.ptr);
        free(conns[i].in.ptr);
    }
    free(conns);
    close(ep);
}

/* ---- blocking round trips (the loader) ---- */

static int round_trip(conn *c, const char *path, const text *body, const char **answer,
                      size_t *answer_len)
{
    start_request(c, path, body);
    while (c->sent < c->out.len) {
        ssize_t w = send(c->fd, c->out.ptr + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
        if (w <= 0)
            die("send: %s", strerror(errno));
        c->sent += (size_t)w;
    }
    int status;
    for (;;) {
        text_need(&c->in, 65536);
        ssize_t got = recv(c->fd, c->in.ptr + c->in.len, c->in.cap - c->in.len, 0);
        if (got <= 0)
            die("recv: %s", got ? strerror(errno) : "connection closed");
        c->in.len += (size_t)got;
        if (parse_answer(c, &status, answer, answer_len))
            return status;
    }
}

static int cmd_load(int argc, char **argv)
{
    if (argc < 4)
        die("usage: loadgen load PORT N [RANKS] [PAGES] [KEYCHARS] [vllm|sglang [NAMESPACE]]");
    int port = atoi(argv[2]);
    size_t n = strtoull(argv[3], NULL, 10);
    unsigned ranks = argc > 4 ? (unsigned)atoi(argv[4]) : 2;
    unsigned long long pages = argc > 5 ? strtoull(argv[5], NULL, 10) : 1000000;
    if (argc > 6)
        key_chars = atoi(argv[6]);
    if (!bench_key_shape_ok(key_chars))
        die("KEYCHARS must be 32, 64 or 66");
    bool sglang = argc > 7 && strcmp(argv[7], "sglang") == 0;
    if (sglang && argc > 8)
        sg_ns = argv[8];
    conn c = {0};
    c.fd = connect_to(port);
    text body = {0};
    const char *answer;
    size_t len;
    for (unsigned r = 0; r < ranks; r++) {
        body.len = 0;
        text_put(&body, "{", 1);
        if (sglang)
            text_sg_ns(&body);
        text_printf(&body, "\"role\": \"worker\", \"num_pages\": %llu}", pages);
        char path[64];
        snprintf(path, sizeof path, sglang ? "/%u/initialize" : "/rank/%u/initialize", r);
        if (round_trip(&c, path, &body, &answer, &len) != (sglang ? 204 : 200))
            die("initialize rank %u failed: %.200s", r, answer);
    }
    double t0 = now_s();
    for (size_t done = 0; done < n; done += MAX_BATCH) {
        c.n = n - done < MAX_BATCH ? n - done : MAX_BATCH;
        for (size_t i = 0; i < c.n; i++)
            c.ids[i] = done + i;
        for (unsigned r = 0; r < ranks; r++) {
            char path[96];
            body.len = 0;
            if (sglang) {
                body_sg_allocate(&body, c.ids, c.n);
                snprintf(path, sizeof path, "/%u/reserve_and_allocate_page_indices", r);
            } else {
                body_allocate(&body, r, c.ids, c.n);
                snprintf(path, sizeof path, "/keys/batch_allocate");
            }
            if (round_trip(&c, path, &body, &answer, &len) != 200 ||
                parse_results(answer, len, c.pages, c.n) != 0)
                die("batch_allocate failed: %.200s", answer);
            for (size_t i = 0; i < c.n; i++)
                if (c.pages[i] < 0)
                    die("the pool is full after %zu keys", done + i);
            body.len = 0;
            if (sglang) {
                body_sg_confirm(&body, c.ids, c.pages, c.n);
                snprintf(path, sizeof path, "/%u/confirm_write", r);
            } else {
                body_confirm(&body, r, c.ids, c.pages, c.n);
                snprintf(path, sizeof path, "/keys/confirm_write");
            }
            if (round_trip(&c, path, &body, &answer, &len) != 204)
                die("confirm_write failed: %.200s", answer);
        }
    }
    fprintf(stderr, "loadgen: %zu complete keys on %u ranks in %.2f s\n", n, ranks, now_s() - t0);
    close(c.fd);
    free(body.ptr);
    free(c.out.ptr);
    free(c.in.ptr);
    return 0;
}

static int cmd_bodies(int argc, char **argv)
{
    if (argc < 6)
        die("usage: loadgen bodies KIND N COUNT BATCH [NAMESPACES]");
    const char *kind = argv[2];
    size_t n = strtoull(argv[3], NULL, 10), count = strtoull(argv[4], NULL, 10);
    size_t batch = strtoull(argv[5], NULL, 10);
    unsigned namespaces = argc > 6 ? (unsigned)atoi(argv[6]) : 0;
    char ns[32];
    if (batch == 0 || batch > MAX_BATCH || n == 0)
        die("BATCH must be 1..%d and N positive", MAX_BATCH);
    uint64_t *ids = calloc(batch, sizeof *ids);
    text line = {0};
    for (size_t b = 0; b < count; b++) {
        unsigned rank = (unsigned)(b & 1);
        if (namespaces) { /* SGLang kinds: every (namespace, rank) in turn */
            snprintf(ns, sizeof ns, "ns%u", (unsigned)(b % namespaces));
            sg_ns = ns;
            rank = (unsigned)((b / namespaces) & 1);
        }
        for (size_t i = 0; i < batch; i++) /* 66: a page's -k, then its -v */
            ids[i] = key_chars == 66 && (i & 1) ? ids[i - 1] | 1
                     : key_chars == 66          ? (rnd() % n) & ~1ull
                                                : rnd() % n;
        line.len = 0;
        if (strcmp(kind, "exists") == 0) {
            text_put(&line, "/keys/batch_exists\t", 19);
            body_keys(&line, ids, batch);
        } else if (strcmp(kind, "locations") == 0) {
            text_put(&line, "/keys/get_locations\t", 20);
            body_rank_keys(&line, rank, ids, batch);
        } else if (strcmp(kind, "sg-exists") == 0) {
            text_printf(&line, "/%u/exists\t", rank);
            body_sg_keys(&line, ids, batch);
        } else if (strcmp(kind, "sg-indices") == 0) {
            text_printf(&line, "/%u/get_page_indices\t", rank);
            body_sg_keys(&line, ids, batch);
        } else {
            die("unknown kind %s", kind);
        }
        text_put(&line, "\n", 1);
        fwrite(line.ptr, 1, line.len, stdout);
    }
    free(ids);
    free(line.ptr);
    return 0;
}

/* ---- the bare-HMGET baseline (plain Redis, RESP) ---- */

static const char *const hmget_hash[2] = {"hf3fs-bench:{hmget}:0", "hf3fs-bench:{hmget}:1"};

static int hexval(char c)
{
    return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* key(i) as a 32-byte field: a 32-hex key's text, a 64-hex key's characters
 * packed (66: refused by main) */
static void key_field(uint64_t i, unsigned char out[32])
{
    char hex[BENCH_KEY_MAX];
    key_text(i, hex);
    if (key_chars == 32) {
        memcpy(out, hex, 32);
        return;
    }
    for (int b = 0; b < 32; b++)
        out[b] = (unsigned char)(hexval(hex[2 * b]) << 4 | hexval(hex[2 * b + 1]));
}

static void resp_arg(text *t, const void *p, size_t n)
{
    text_printf(t, "$%zu\r\n", n);
    text_put(t, p, n);
    text_put(t, "\r\n", 2);
}

/* HMGET hash field(ids[0]) ... field(ids[n-1]), or HSET hash field 1 ... */
static void resp_hash_cmd(text *t, bool set, unsigned h, const uint64_t *ids, size_t n)
{
    text_printf(t, "*%zu\r\n", 2 + n * (set ? 2 : 1));
    resp_arg(t, set ? "HSET" : "HMGET", set ? 4 : 5);
    resp_arg(t, hmget_hash[h], strlen(hmget_hash[h]));
    for (size_t i = 0; i < n; i++) {
        unsigned char f[32];
        key_field(ids[i], f);
        resp_arg(t, f, 32);
        if (set)
            resp_arg(t, "1", 1);
    }
}

/* Past one whole RESP reply at p (NULL: incomplete); *bad is set for an
 * error reply or a nil / a value other than "1" inside an array. */
static const char *resp_skip(const char *p, const char *end, bool *bad)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl)
        return NULL;
    long v = strtol(p + 1, NULL, 10);
    switch (*p) {
    case '+':
    case ':': return nl + 1;
    case '-': *bad = true; return nl + 1;
    case '$':
        if (v < 0) {
            *bad = true;
            return nl + 1;
        }
        if (end - (nl + 1) < v + 2)
            return NULL;
        if (v != 1 || nl[1] != '1')
            *bad = true;
        return nl + 1 + v + 2;
    case '*':
        p = nl + 1;
        for (long i = 0; i < v; i++) {
            if (p >= end || !(p = resp_skip(p, end, bad)))
                return NULL;
        }
        return p;
    default: die("bad Redis reply: %.40s", p);
    }
    return NULL;
}

/* send t whole on a blocking fd, then read `replies` replies; errors counted */
static size_t resp_round_trip(int fd, const text *t, text *in, int replies)
{
    for (size_t sent = 0; sent < t->len;) {
        ssize_t w = send(fd, t->ptr + sent, t->len - sent, MSG_NOSIGNAL);
        if (w <= 0)
            die("send: %s", strerror(errno));
        sent += (size_t)w;
    }
    in->len = 0;
    size_t bad_replies = 0;
    const char *p = NULL;
    int done = 0;
    size_t at = 0;
    while (done < replies) {
        bool bad = false;
        if (in->len > at && (p = resp_skip(in->ptr + at, in->ptr + in->len, &bad))) {
            at = (size_t)(p - in->ptr);
            done++;
            bad_replies += bad;
            continue;
        }
        text_need(in, 65536);
        ssize_t got = recv(fd, in->ptr + in->len, in->cap - in->len, 0);
        if (got <= 0)
            die("recv: %s", got ? strerror(errno) : "connection closed");
        in->len += (size_t)got;
    }
    return bad_replies;
}

static int cmd_hmget_load(int argc, char **argv)
{
    if (argc < 4)
        die("usage: loadgen hmget-load REDISPORT N");
    int fd = connect_to(atoi(argv[2]));
    size_t n = strtoull(argv[3], NULL, 10);
    text out = {0}, in = {0};
    uint64_t ids[1000];
    for (size_t done = 0; done < n; done += 1000) {
        size_t k = n - done < 1000 ? n - done : 1000;
        for (size_t i = 0; i < k; i++)
            ids[i] = done + i;
        out.len = 0;
        resp_hash_cmd(&out, true, 0, ids, k);
        resp_hash_cmd(&out, true, 1, ids, k);
        if (resp_round_trip(fd, &out, &in, 2))
            die("HSET failed: %.200s", in.ptr);
    }
    close(fd);
    free(out.ptr);
    free(in.ptr);
    return 0;
}

typedef struct hconn {
    int fd;
    text out, in;
    size_t sent, at;
    int replies;
    bool bad;
    double started;
} hconn;

/* one read: the same keys asked of both hashes, both commands in one send */
static void hmget_start(hconn *c, uint64_t *ids, size_t batch, size_t nkeys)
{
    for (size_t k = 0; k < batch; k++)
        ids[k] = rnd() % nkeys;
    c->out.len = 0;
    resp_hash_cmd(&c->out, false, 0, ids, batch);
    resp_hash_cmd(&c->out, false, 1, ids, batch);
    c->sent = 0;
    c->in.len = c->at = 0;
    c->replies = 0;
    c->bad = false;
    c->started = now_s();
    while (c->sent < c->out.len) {
        ssize_t w = send(c->fd, c->out.ptr + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
        if (w <= 0)
            die("send: %s", strerror(errno));
        c->sent += (size_t)w;
    }
}

static int cmd_hmget(int argc, char **argv)
{
    if (argc < 6)
        die("usage: loadgen hmget REDISPORT SECONDS CONNS N [BATCH]");
    int port = atoi(argv[2]);
    double seconds = atof(argv[3]);
    size_t nconns = strtoull(argv[4], NULL, 10), nkeys = strtoull(argv[5], NULL, 10);
    size_t batch = argc > 6 ? strtoull(argv[6], NULL, 10) : 128;
    if (batch == 0 || batch > MAX_BATCH || nkeys == 0 || nconns == 0)
        die("BATCH must be 1..%d, N and CONNS positive", MAX_BATCH);
    hconn *cs = calloc(nconns, sizeof *cs);
    uint32_t *hist = calloc(HIST_US, sizeof *hist);
    uint64_t *ids = calloc(batch, sizeof *ids);
    uint64_t reads = 0, errors = 0;
    int ep = epoll_create1(0);
    for (size_t i = 0; i < nconns; i++) {
        cs[i].fd = connect_to(port);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &cs[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
    }
    double t0 = now_s(), stop = t0 + seconds;
    for (size_t i = 0; i < nconns; i++)
        hmget_start(&cs[i], ids, batch, nkeys);
    struct epoll_event events[64];
    while (now_s() < stop) {
        int n = epoll_wait(ep, events, 64, 100);
        for (int e = 0; e < n; e++) {
            hconn *c = events[e].data.ptr;
            text_need(&c->in, 65536);
            ssize_t got = recv(c->fd, c->in.ptr + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
            if (got == 0)
                die("Redis closed a connection");
            if (got < 0) {
                if (errno == EAGAIN)
                    continue;
                die("recv: %s", strerror(errno));
            }
            c->in.len += (size_t)got;
            const char *p;
            while (c->replies < 2 &&
                   (p = resp_skip(c->in.ptr + c->at, c->in.ptr + c->in.len, &c->bad))) {
                c->at = (size_t)(p - c->in.ptr);
                c->replies++;
            }
            if (c->replies < 2)
                continue;
            double us = (now_s() - c->started) * 1e6;
            hist[us < 0 ? 0 : us >= HIST_US ? HIST_US - 1 : (size_t)us]++;
            reads++;
            errors += c->bad;
            hmget_start(c, ids, batch, nkeys);
        }
    }
    double elapsed = now_s() - t0;
    uint64_t p50 = HIST_US, p99 = HIST_US, seen = 0;
    for (size_t b = 0; b < HIST_US; b++) {
        seen += hist[b];
        if (p50 == HIST_US && seen > reads / 2)
            p50 = b;
        if (p99 == HIST_US && seen > reads * 99 / 100)
            p99 = b;
    }
    printf("requests=%llu seconds=%.2f rps=%.0f hmgets_per_s=%.0f p50_us=%llu p99_us=%llu "
           "errors=%llu answered=%llu\n",
           (unsigned long long)reads, elapsed, (double)reads / elapsed,
           2.0 * (double)reads / elapsed, (unsigned long long)p50, (unsigned long long)p99,
           (unsigned long long)errors, (unsigned long long)reads);
    for (size_t i = 0; i < nconns; i++) {
        close(cs[i].fd);
        free(cs[i].out.ptr);
        free(cs[i].in.ptr);
    }
    free(cs);
    free(hist);
    free(ids);
    close(ep);
    return errors ? 1 : 0;
}

int main(int argc, char **argv)
{
    authorization = getenv("HF3FS_AUTHORIZATION");
    if (argc < 2)
        die("usage: loadgen load|bodies|save|mixed|hmget-load|hmget ...");
    key_chars = bench_key_chars_env(64);
    if (!key_chars)
        die("KEYCHARS must be 32, 64 or 66");
    if (key_chars == 66 && strncmp(argv[1], "hmget", 5) == 0)
        die("the HMGET baseline takes KEYCHARS 32 or 64");
    uint32_t *hist = calloc(HIST_US, sizeof *hist);
    run r = {.ranks = 2, .batch = 128, .hist = hist};
    int rc = 0;
    if (strcmp(argv[1], "load") == 0) {
        rc = cmd_load(argc, argv);
    } else if (strcmp(argv[1], "bodies") == 0) {
        rc = cmd_bodies(argc, argv);
    } else if (strcmp(argv[1], "hmget-load") == 0) {
        rc = cmd_hmget_load(argc, argv);
    } else if (strcmp(argv[1], "hmget") == 0) {
        rc = cmd_hmget(argc, argv);
    } else if (strcmp(argv[1], "save") == 0 || strcmp(argv[1], "sg-save") == 0) {
        if (argc < 5)
            die("usage: loadgen save|sg-save PORT SECONDS CONNS [BATCH] [RANKS] [NAMESPACES]");
        r.port = atoi(argv[2]);
        r.batch = argc > 5 ? strtoull(argv[5], NULL, 10) : 128;
        r.ranks = argc > 6 ? (unsigned)atoi(argv[6]) : 2;
        sg_save = strcmp(argv[1], "sg-save") == 0;
        r.namespaces = sg_save && argc > 7 ? (unsigned)atoi(argv[7]) : 0;
        if (r.batch == 0 || r.batch > MAX_BATCH)
            die("BATCH must be 1..%d", MAX_BATCH);
        drive(&r, strtoull(argv[4], NULL, 10), atof(argv[3]), save_new_job, save_answer);
        rc = r.errors ? 1 : 0;
    } else if (strcmp(argv[1], "mixed") == 0) {
        if (argc < 6)
            die("usage: loadgen mixed PORT SECONDS CONNS N [RANKS]");
        r.port = atoi(argv[2]);
        r.nkeys = strtoull(argv[5], NULL, 10);
        r.ranks = argc > 6 ? (unsigned)atoi(argv[6]) : 2;
        drive(&r, strtoull(argv[4], NULL, 10), atof(argv[3]), mixed_new_job, mixed_answer);
        rc = r.errors ? 1 : 0;
    } else {
        die("unknown subcommand %s", argv[1]);
    }
    free(hist);
    return rc;
}
