/*
 * durability_load.c: the load of bench/durability.py (keep-alive HTTP/1.1
 * clients on 127.0.0.1, one thread each).
 *
 *   durability_load PORT cycle CLIENTS SECONDS
 *       each client repeats SGLang reserve_and_allocate (1 new key) +
 *       confirm_write on namespace "bench" rank (client % 8), which must be
 *       initialized; prints "cycles N seconds S rate R"
 *   durability_load PORT load NKEYS [RANK]
 *       vLLM: initialize RANK (default 0) of "kv" and make NKEYS keys (64
 *       hex) owned there, 1,000 a request; prints "keys N seconds S"
 *   durability_load PORT exists ROUNDS
 *       vLLM batch_exists of 128 of those keys, ROUNDS times; prints
 *       "requests N seconds S"
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    fprintf(stderr, "durability_load: %s: %s\n", what, strerror(errno));
    exit(1);
}

typedef struct conn {
    int fd;
    char buf[1 << 20];
    size_t len;
} conn;

static void conn_open(conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("connect");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->len = 0;
}

/* POST body to path; returns the status, the body in c->buf (NUL-terminated). */
static int post(conn *c, const char *path, const char *body)
{
    static __thread char *req;
    static __thread size_t cap;
    size_t blen = strlen(body), need = blen + strlen(path) + 200;
    if (need > cap) {
        cap = need * 2;
        req = realloc(req, cap);
    }
    int n = snprintf(req, cap,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     path, blen, body);
    for (int off = 0; off < n;) {
        ssize_t k = write(c->fd, req + off, (size_t)(n - off));
        if (k <= 0)
            die("write");
        off += (int)k;
    }
    c->len = 0;
    char *end;
    for (;;) {
        ssize_t k = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
        if (k <= 0)
            die("read");
        c->len += (size_t)k;
        c->buf[c->len] = '\0';
        if ((end = strstr(c->buf, "\r\n\r\n")) != NULL)
            break;
    }
    int status = atoi(c->buf + 9);
    char *cl = strcasestr(c->buf, "content-length:");
    size_t body_len = cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0;
    size_t head = (size_t)(end + 4 - c->buf);
    while (c->len < head + body_len) {
        ssize_t k = read(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len);
        if (k <= 0)
            die("read body");
        c->len += (size_t)k;
    }
    memmove(c->buf, c->buf + head, body_len);
    c->buf[body_len] = '\0';
    return status;
}

static void key_of(uint64_t i, char out[65])
{
    uint64_t x = i * 0x9E3779B97F4A7C15ull + 12345;
    for (int w = 0; w < 4; w++) {
        x ^= x >> 31;
        x *= 0xD6E8FEB86659FD93ull;
        x ^= x >> 29;
        snprintf(out + 16 * w, 17, "%016" PRIx64, x);
    }
}

/* ---- cycle ---- */

typedef struct cycler {
    int id;
    double until;
    uint64_t cycles;
} cycler;

static void *cycle_main(void *arg)
{
    cycler *cy = arg;
    conn *c = malloc(sizeof *c);
    conn_open(c);
    char path_alloc[64], path_confirm[64], body[256], key[65];
    snprintf(path_alloc, sizeof path_alloc, "/%d/reserve_and_allocate_page_indices", cy->id % 8);
    snprintf(path_confirm, sizeof path_confirm, "/%d/confirm_write", cy->id % 8);
    uint64_t n = 0;
    while (now_s() < cy->until) {
        key_of(((uint64_t)cy->id << 40) + n + ((uint64_t)getpid() << 20), key);
        snprintf(body, sizeof body, "{\"keys\":[[\"%s\",\"\"]],\"namespace\":\"bench\"}", key);
        if (post(c, path_alloc, body) != 200) {
            fprintf(stderr, "allocate: %s\n", c->buf);
            exit(1);
        }
        char *comma = strchr(c->buf, ',');
        long page = comma ? strtol(comma + 1, NULL, 10) : -1;
        snprintf(body, sizeof body,
                 "{\"written_keys_to_confirm\":[[\"%s\",%ld]],\"namespace\":\"bench\"}", key, page);
        if (post(c, path_confirm, body) != 204) {
            fprintf(stderr, "confirm: %s\n", c->buf);
            exit(1);
        }
        n++;
    }
    cy->cycles = n;
    close(c->fd);
    free(c);
    return NULL;
}

static void run_cycle(int clients, double seconds)
{
    pthread_t t[256];
    cycler cy[256];
    double t0 = now_s();
    for (int i = 0; i < clients; i++) {
        cy[i] = (cycler){i, t0 + seconds, 0};
        pthread_create(&t[i], NULL, cycle_main, &cy[i]);
    }
    uint64_t total = 0;
    for (int i = 0; i < clients; i++) {
        pthread_join(t[i], NULL);
        total += cy[i].cycles;
    }
    double dt = now_s() - t0;
    printf("cycles %" PRIu64 " seconds %.3f rate %.1f\n", total, dt, (double)total / dt);
}

/* ---- load and exists ---- */

static void run_load(uint64_t nkeys, int rank)
{
    static conn c;
    conn_open(&c);
    char init[128], path[64];
    snprintf(init, sizeof init, "{\"role\":\"worker\",\"num_pages\":%" PRIu64 "}", nkeys + 1000);
    snprintf(path, sizeof path, "/rank/%d/initialize", rank);
    if (post(&c, path, init) != 200)
        die("initialize");
    size_t cap = 1000 * 80 + 100;
    char *body = malloc(cap * 2), key[65];
    long *pages = malloc(1000 * sizeof *pages);
    double t0 = now_s();
    for (uint64_t base = 0; base < nkeys; base += 1000) {
        uint64_t n = nkeys - base < 1000 ? nkeys - base : 1000;
        size_t len = (size_t)snprintf(body, cap, "{\"rank\":%d,\"keys\":[", rank);
        for (uint64_t i = 0; i < n; i++) {
            key_of(base + i, key);
            len += (size_t)snprintf(body + len, cap - len, "%s\"%s\"", i ? "," : "", key);
        }
        snprintf(body + len, cap - len, "]}");
        if (post(&c, "/keys/batch_allocate", body) != 200)
            die("batch_allocate");
        /* results: [["key",page],...] */
        char *p = c.buf;
        for (uint64_t i = 0; i < n; i++) {
            p = strstr(p, "\",");
            pages[i] = strtol(p + 2, &p, 10);
        }
        len = (size_t)snprintf(body, cap * 2, "{\"rank\":%d,\"confirmations\":[", rank);
        for (uint64_t i = 0; i < n; i++) {
            key_of(base + i, key);
            len += (size_t)snprintf(body + len, cap * 2 - len, "%s[\"%s\",%ld]", i ? "," : "", key,
                                    pages[i]);
        }
        snprintf(body + len, cap * 2 - len, "]}");
        if (post(&c, "/keys/confirm_write", body) != 204)
            die("confirm_write");
    }
    printf("keys %" PRIu64 " seconds %.3f\n", nkeys, now_s() - t0);
    free(body);
    free(pages);
    close(c.fd);
}

static void run_exists(uint64_t rounds)
{
    static conn c;
    conn_open(&c);
    char body[128 * 70 + 64], key[65];
    double t0 = now_s();
    for (uint64_t r = 0; r < rounds; r++) {
        size_t len = (size_t)snprintf(body, sizeof body, "{\"keys\":[");
        for (int i = 0; i < 128; i++) {
            key_of((r * 128 + (uint64_t)i) % 100000, key);
            len += (size_t)snprintf(body + len, sizeof body - len, "%s\"%s\"", i ? "," : "", key);
        }
        snprintf(body + len, sizeof body - len, "]}");
        if (post(&c, "/keys/batch_exists", body) != 200)
            die("batch_exists");
    }
    printf("requests %" PRIu64 " seconds %.3f\n", rounds, now_s() - t0);
    close(c.fd);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: durability_load PORT cycle CLIENTS SECONDS | load NKEYS | "
                        "exists ROUNDS\n");
        return 2;
    }
    port = atoi(argv[1]);
    if (!strcmp(argv[2], "cycle") && argc == 5)
        run_cycle(atoi(argv[3]), atof(argv[4]));
    else if (!strcmp(argv[2], "load"))
        run_load(strtoull(argv[3], NULL, 10), argc > 4 ? atoi(argv[4]) : 0);
    else if (!strcmp(argv[2], "exists"))
        run_exists(strtoull(argv[3], NULL, 10));
    else
        return 2;
    return 0;
}
