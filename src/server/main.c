/*
 * main.c: hf3fs-metad's flags, start-up and shutdown.
 *
 * Start-up: parse and validate every flag (a bad value, or an unusable
 * --auth-token-file or --redis-password-file, is a message and exit code 2),
 * then open the store the flags name:
 *   --store URL    the Redis engine (store/redis/redis.h); Redis unreachable or
 *                  refusing the credentials: exit code 5;
 *   --in-memory    the embedded engine with nothing on disk (store/mem.h);
 *   otherwise      the embedded engine over its data directory (wal/wal.h):
 *                  recovery runs here; a log damaged before its tail is exit
 *                  code 3 (unless --salvage), a foreign, locked or unreadable
 *                  directory exit code 4.
 * Then the api and the HTTP server (a port that cannot be bound: exit code
 * 1), and log lines with every effective setting and the address.
 *
 * SIGINT, SIGTERM and SIGHUP are blocked before any thread starts (the
 * server's threads inherit the mask) and taken with sigtimedwait(), so no
 * code runs in a signal handler; meanwhile the main thread logs the summary
 * line every --log-summary-interval, and at SIGHUP rereads
 * --auth-token-file (api_reload_tokens: connections stay; a file it cannot
 * use is refused with an error line and the tokens in force stay). Shutdown stops the HTTP server (closing every
 * connection), then frees the api and the store (the embedded engine writes
 * its final snapshot): exit code 0 with nothing leaked.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

#include "api/api.h"
#include "api/import.h"
#include "api/tenants.h"
#include "core/core.h"
#include "http/http.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/steady.h"
#include "store/mem.h"
#include "store/redis/redis.h"
#include "wal/wal.h"
#include "wire/wire.h"

#define EXIT_USAGE 2
#define EXIT_DAMAGED 3  /* the log is damaged before its tail (see --salvage) */
#define EXIT_DATA_DIR 4 /* the data directory is foreign, locked or unreadable */
#define EXIT_STORE 5    /* --store: the shared store cannot be reached or refused us */
#define EXIT_NOMODULE 6 /* --store: Redis has not loaded the hf3fs-metad module (of this version) */
#define EXIT_IMPORT 7   /* SGLang's state file was refused: nothing was imported */

#define REDIS_WAIT_AUTO UINT64_MAX

typedef struct server_options {
    const char *host;
    uint64_t port;
    uint64_t threads; /* 0: one per CPU */
    uint64_t max_body_bytes;
    uint64_t max_header_bytes;
    uint64_t max_keys;
    uint64_t max_key_bytes;
    uint64_t max_ranks;
    uint64_t max_pages;
    uint64_t max_connections;
    uint64_t idle_timeout_s;
    uint64_t header_timeout_s;
    uint64_t body_timeout_s;
    uint64_t body_min_rate;
    uint64_t tenant_max_in_flight;
    double reservation_timeout_s;
    double read_lease_s;
    double write_lease_s; /* < 0: the reservation timeout */
    double release_grace_s;
    bool evict;
    bool debug_api;
    const char *persistence_path;
    double save_interval_s;
    bool save_interval_given;
    bool in_memory;
    const char *data_dir;
    bool data_dir_given;
    const char *import_sglang; /* --import-sglang FILE, or --persistence-path FILE */
    bool import_again_refused; /* --import-sglang: a non-empty state refuses it */
    wal_fsync_policy fsync;
    uint64_t snapshot_log_bytes;
    bool salvage;
    log_level log_level;
    const char *auth_token_file;
    bool access_log;
    double log_summary_interval_s; /* 0: no summary lines */
    const char *store;             /* NULL: the embedded engine */
    const char *redis_password_file;
    double redis_connect_timeout_s;
    double redis_timeout_s;
    uint64_t redis_wait; /* REDIS_WAIT_AUTO: 1 where every primary has a replica */
    uint64_t stripes;    /* 0: the store's default (store_redis_options.stripes) */
    double redis_wait_timeout_s;
    uint64_t redis_connections;
    uint64_t redis_max_in_flight;
} server_options;

static const server_options defaults = {
    .host = "127.0.0.1",
    .port = 18000,
    .threads = 0,
    .max_body_bytes = 8u << 20,
    .max_header_bytes = 32u << 10,
    .max_keys = 65536,
    .max_key_bytes = 1024,
    .max_ranks = 1024,
    .max_pages = CORE_MAX_PAGES_LIMIT,
    .max_connections = 1024,
    .idle_timeout_s = 60,
    .header_timeout_s = 10,
    .body_timeout_s = 10,
    .body_min_rate = 4096,
    .tenant_max_in_flight = 32,
    .reservation_timeout_s = 600,
    .read_lease_s = 5,
    .write_lease_s = -1,
    .release_grace_s = 10,
    .evict = true,
    .save_interval_s = 60,
    .data_dir = "./hf3fs-metad-data",
    .fsync = WAL_FSYNC_ALWAYS,
    .snapshot_log_bytes = 64u << 20,
    .log_level = LOG_INFO,
    .log_summary_interval_s = 60,
    .redis_connect_timeout_s = 1,
    .redis_timeout_s = 2,
    .redis_wait = REDIS_WAIT_AUTO,
    .redis_wait_timeout_s = 1,
    .redis_connections = 1,
    .redis_max_in_flight = 256,
};

enum {
    OPT_HOST = 256,
    OPT_PORT,
    OPT_THREADS,
    OPT_MAX_BODY,
    OPT_MAX_HEADER,
    OPT_MAX_KEYS,
    OPT_MAX_KEY_BYTES,
    OPT_MAX_RANKS,
    OPT_MAX_PAGES,
    OPT_MAX_CONNECTIONS,
    OPT_IDLE_TIMEOUT,
    OPT_HEADER_TIMEOUT,
    OPT_BODY_TIMEOUT,
    OPT_BODY_MIN_RATE,
    OPT_TENANT_MAX_IN_FLIGHT,
    OPT_RESERVATION_TIMEOUT,
    OPT_READ_LEASE,
    OPT_EVICTION,
    OPT_DEBUG_API,
    OPT_PERSISTENCE_PATH,
    OPT_SAVE_INTERVAL,
    OPT_IN_MEMORY,
    OPT_LOG_LEVEL,
    OPT_AUTH_TOKEN_FILE,
    OPT_ACCESS_LOG,
    OPT_LOG_SUMMARY_INTERVAL,
    OPT_DATA_DIR,
    OPT_FSYNC,
    OPT_SNAPSHOT_LOG_BYTES,
    OPT_SALVAGE,
    OPT_WRITE_LEASE,
    OPT_RELEASE_GRACE,
    OPT_STORE,
    OPT_REDIS_PASSWORD_FILE,
    OPT_REDIS_CONNECT_TIMEOUT,
    OPT_REDIS_TIMEOUT,
    OPT_REDIS_WAIT,
    OPT_REDIS_WAIT_TIMEOUT,
    OPT_REDIS_CONNECTIONS,
    OPT_REDIS_MAX_IN_FLIGHT,
    OPT_STRIPES,
    OPT_REDIS_USE_LOG_BYTES,
    OPT_IMPORT_SGLANG,
    OPT_HELP,
    OPT_VERSION,
};

static const struct option long_options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, OPT_PORT},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"max-body-bytes", required_argument, NULL, OPT_MAX_BODY},
    {"max-header-bytes", required_argument, NULL, OPT_MAX_HEADER},
    {"max-keys", required_argument, NULL, OPT_MAX_KEYS},
    {"max-key-bytes", required_argument, NULL, OPT_MAX_KEY_BYTES},
    {"max-ranks", required_argument, NULL, OPT_MAX_RANKS},
    {"max-pages", required_argument, NULL, OPT_MAX_PAGES},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
    {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
    {"header-timeout", required_argument, NULL, OPT_HEADER_TIMEOUT},
    {"body-timeout", required_argument, NULL, OPT_BODY_TIMEOUT},
    {"body-min-rate", required_argument, NULL, OPT_BODY_MIN_RATE},
    {"tenant-max-in-flight", required_argument, NULL, OPT_TENANT_MAX_IN_FLIGHT},
    {"reservation-timeout", required_argument, NULL, OPT_RESERVATION_TIMEOUT},
    {"read-lease", required_argument, NULL, OPT_READ_LEASE},
    {"write-lease", required_argument, NULL, OPT_WRITE_LEASE},
    {"release-grace", required_argument, NULL, OPT_RELEASE_GRACE},
    {"eviction", required_argument, NULL, OPT_EVICTION},
    {"debug-api", no_argument, NULL, OPT_DEBUG_API},
    {"persistence-path", required_argument, NULL, OPT_PERSISTENCE_PATH},
    {"save-interval", required_argument, NULL, OPT_SAVE_INTERVAL},
    {"in-memory", no_argument, NULL, OPT_IN_MEMORY},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"auth-token-file", required_argument, NULL, OPT_AUTH_TOKEN_FILE},
    {"access-log", no_argument, NULL, OPT_ACCESS_LOG},
    {"log-summary-interval", required_argument, NULL, OPT_LOG_SUMMARY_INTERVAL},
    {"data-dir", required_argument, NULL, OPT_DATA_DIR},
    {"import-sglang", required_argument, NULL, OPT_IMPORT_SGLANG},
    {"fsync", required_argument, NULL, OPT_FSYNC},
    {"snapshot-log-bytes", required_argument, NULL, OPT_SNAPSHOT_LOG_BYTES},
    {"salvage", no_argument, NULL, OPT_SALVAGE},
    {"store", required_argument, NULL, OPT_STORE},
    {"redis-password-file", required_argument, NULL, OPT_REDIS_PASSWORD_FILE},
    {"redis-connect-timeout", required_argument, NULL, OPT_REDIS_CONNECT_TIMEOUT},
    {"redis-timeout", required_argument, NULL, OPT_REDIS_TIMEOUT},
    {"redis-wait", required_argument, NULL, OPT_REDIS_WAIT},
    {"redis-wait-timeout", required_argument, NULL, OPT_REDIS_WAIT_TIMEOUT},
    {"redis-connections", required_argument, NULL, OPT_REDIS_CONNECTIONS},
    {"redis-max-in-flight", required_argument, NULL, OPT_REDIS_MAX_IN_FLIGHT},
    {"stripes", required_argument, NULL, OPT_STRIPES},
    {"redis-use-log-bytes", required_argument, NULL, OPT_REDIS_USE_LOG_BYTES},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fprintf(
        out,
        "Usage: hf3fs-metad [FLAGS]\n"
        "KV-cache page metadata server for 3FS: serves the vLLM and SGLang dialects.\n"
        "\n"
        "  --host ADDR                 address to listen on (default 127.0.0.1)\n"
        "  --port N                    TCP port, 0 picks a free one (default 18000)\n"
        "  --threads N                 HTTP event-loop threads (default: one per CPU it may\n"
        "                              run on; at least 16 with --fsync always; at most\n"
        "                              --max-connections)\n"
        "  --max-connections N         open connections at most (default 1024)\n"
        "  --idle-timeout SECONDS      close a connection idle this long, 0 never (default 60)\n"
        "  --header-timeout SECONDS    a request's line and headers must arrive within this of\n"
        "                              its first byte (of the connection's opening for its\n"
        "                              first request), else 408; 0 never (default 10)\n"
        "  --body-timeout SECONDS      a body must arrive within this of its headers, plus a\n"
        "                              second per --body-min-rate bytes, else 408; 0 never\n"
        "                              (default 10)\n"
        "  --body-min-rate N           body bytes a second that extend --body-timeout by one\n"
        "                              second, K/M suffixes allowed; 0 no extension (default 4K)\n"
        "  --max-body-bytes N          largest request body, K/M/G suffixes allowed (default 8M)\n"
        "  --max-header-bytes N        request line + headers of one request (default 32K)\n"
        "  --max-keys N                items of any list in one request (default 65536)\n"
        "  --max-key-bytes N           longest key or namespace (default 1024)\n"
        "  --max-ranks N               ranks are 0..N-1 (default 1024)\n"
        "  --max-pages N               largest num_pages of a pool (default %llu)\n"
        "  --reservation-timeout SECS  reservation lease, decimals allowed (default 600)\n"
        "  --read-lease SECS           read lease, decimals allowed, 0 none (default 5)\n"
        "  --write-lease SECS          longest protection of a vLLM allocation hit that is\n"
        "                              being rewritten (its confirmation ends it sooner);\n"
        "                              0 none (default: the reservation timeout)\n"
        "  --release-grace SECS        a released page is reused only after this long, so a\n"
        "                              retried release cannot free another writer's page;\n"
        "                              0 none (default 10)\n"
        "  --eviction clock|none       when full, evict keys not used recently, by the core's\n"
        "                              CLOCK rule (docs/eviction.md); none: never (default\n"
        "                              clock; lru is accepted as another name for clock)\n"
        "  --debug-api                 serve GET /v1/check (walks every pool; for tests)\n"
        "  --data-dir DIR              keep the state (write-ahead log and snapshots) in DIR\n"
        "                              (default ./hf3fs-metad-data)\n"
        "  --persistence-path PATH     a directory: the same as --data-dir (the existing\n"
        "                              servers' flag); a file: SGLang's state file, imported at\n"
        "                              the first start into the data directory PATH.hf3fs-metad\n"
        "                              (or --data-dir) and left as it is; a later start, whose\n"
        "                              state is not empty, does not import it again\n"
        "  --import-sglang FILE        import SGLang's state file FILE at start into an empty\n"
        "                              state (any engine); a state that holds a pool is refused\n"
        "                              unless it records the import of this same file\n"
        "  --in-memory                 keep nothing on disk: a restart forgets every pool\n"
        "  --fsync always|everysec|no  always: a change is acknowledged once synced to disk\n"
        "                              (group commit); everysec: once written, synced every\n"
        "                              second; no: once written (default always)\n"
        "  --save-interval SECONDS     snapshot this often if anything changed, 0 never\n"
        "                              (default 60)\n"
        "  --snapshot-log-bytes N      snapshot once the log grew by N bytes, K/M/G allowed,\n"
        "                              0 never (default 64M)\n"
        "  --salvage                   start despite damage before the log's tail: keep every\n"
        "                              valid record, set the damaged files aside\n"
        "  --log-level LEVEL           error|warn|info|debug (default info)\n"
        "  --auth-token-file PATH      require one of this file's tokens on every route but\n"
        "                              /health, as 'Authorization: Bearer TOKEN' or HTTP Basic\n"
        "                              auth with the token as password; lines TOKEN [TENANT\n"
        "                              [pages=N]] give each tenant its own namespaces; SIGHUP\n"
        "                              rereads it (default: no auth)\n"
        "  --tenant-max-in-flight N    with two tenants or more, each tenant's requests\n"
        "                              running at once; the next wait in line, 503 after\n"
        "                              10 s; 0 no bound (default 32)\n"
        "  --access-log                log one line per request (default off)\n"
        "  --log-summary-interval SECS log evictions, expired reservations and refusals at\n"
        "                              most this often, when they moved; 0 never (default 60)\n"
        "  --store URL                 keep the state in Redis, shared by every front end:\n"
        "                              redis://[user:password@]host:port[/db],\n"
        "                              redis-cluster://[user:password@]host:port[,host:port...]\n"
        "                              (seed nodes of a Redis Cluster),\n"
        "                              redis-sentinel://[user:password@]host:port[,host:port...]\n"
        "                              /NAME[/db] (Redis Sentinels, asked for primary NAME) or\n"
        "                              unix:///path/redis.sock (default: the embedded engine;\n"
        "                              --data-dir, --fsync... then do not apply). Redis must\n"
        "                              have loaded the hf3fs-metad module: redis-server\n"
        "                              ... --loadmodule /path/to/hf3fs_metad_redis.so\n"
        "  --redis-password-file PATH  Redis password from this file (replaces the URL's)\n"
        "  --redis-connect-timeout SECS  connecting to Redis, at most (default 1)\n"
        "  --redis-timeout SECS        one Redis call, at most; then 503, or 507 for a change\n"
        "                              whose outcome is unknown (default 2)\n"
        "  --redis-wait N              acknowledge a change once N replicas have it (WAIT);\n"
        "                              0: once the primary applied it (default: 1 if every\n"
        "                              primary has a connected replica at start, else 0)\n"
        "  --redis-wait-timeout SECS   how long WAIT waits for them (default 1)\n"
        "  --redis-connections N       connections to Redis (to each primary of a cluster),\n"
        "                              shared by every request: the commands of concurrent\n"
        "                              requests go out together (1-64, default 1)\n"
        "  --redis-max-in-flight N     commands queued or awaiting Redis per connection; past\n"
        "                              it a request waits, then answers 503 (default 256)\n"
        "  --stripes N                 Redis values per namespace this front end creates,\n"
        "                              1-256 (default 1; redis-cluster://: by the first pool's\n"
        "                              size and the primaries); a namespace keeps the count\n"
        "                              it was created with\n"
        "  --help                      this text\n"
        "  --version                   the release, and the versions of the Redis module and\n"
        "                              of the data directory's files it speaks\n"
        "\n"
        "Exit status: 0 stopped by SIGTERM/SIGINT; 1 --host/--port cannot be listened on (the\n"
        "port in use, the host not this machine's) or the event loops cannot start; 2 a bad\n"
        "flag or --store address; 3 the log is damaged before its tail (see --salvage); 4 the\n"
        "data directory is foreign, locked or unreadable; 5 --store cannot be reached or\n"
        "refused the credentials; 6 --store's Redis has not loaded the hf3fs-metad module of\n"
        "this version; 7 SGLang's state file was refused (malformed, inconsistent, or the\n"
        "state is not empty): nothing imported.\n",
        (unsigned long long)CORE_MAX_PAGES_LIMIT);
}

static void bad_flag(const char *flag, const char *value, const char *expected)
{
    fprintf(stderr, "hf3fs-metad: --%s: '%s' is not %s\n", flag, value, expected);
    fprintf(stderr, "Try 'hf3fs-metad --help'.\n");
    exit(EXIT_USAGE);
}

/* A decimal integer in min..max, with an optional K/M/G (binary) suffix. */
static uint64_t parse_count(const char *flag, const char *value, uint64_t min, uint64_t max,
                            bool suffixes)
{
    char expected[96];
    snprintf(expected, sizeof expected, "an integer in %" PRIu64 "..%" PRIu64, min, max);
    if (value[0] < '0' || value[0] > '9')
        bad_flag(flag, value, expected);
    errno = 0;
    char *end;
    unsigned long long n = strtoull(value, &end, 10);
    unsigned shift = 0;
    if (suffixes && *end) {
        const char *units = "KMG";
        const char *unit = strchr(units, end[0] & ~0x20);
        if (unit && end[0] != '\0') {
            shift = 10 * (unsigned)(unit - units + 1);
            end++;
        }
    }
    if (errno || *end || n > (max >> shift) || (n << shift) < min)
        bad_flag(flag, value, expected);
    return (uint64_t)n << shift;
}

/* Seconds with decimals, in min..max. */
static double parse_seconds(const char *flag, const char *value, double min, double max)
{
    char expected[96];
    snprintf(expected, sizeof expected, "a number of seconds in %g..%g", min, max);
    errno = 0;
    char *end;
    double s = strtod(value, &end);
    if (errno || end == value || *end || !isfinite(s) || s < min || s > max)
        bad_flag(flag, value, expected);
    return s;
}

/* The name of the flag with this id (long_options is not in enum order). */
static const char *flag_name(int id)
{
    for (const struct option *opt = long_options; opt->name; opt++)
        if (opt->val == id)
            return opt->name;
    return "?";
}

static void parse_flag(server_options *o, int id, const char *arg)
{
    const char *flag = flag_name(id);
    switch (id) {
    case OPT_HOST: o->host = arg; break;
    case OPT_PORT: o->port = parse_count(flag, arg, 0, 65535, false); break;
    case OPT_THREADS: o->threads = parse_count(flag, arg, 1, 1024, false); break;
    case OPT_MAX_BODY: o->max_body_bytes = parse_count(flag, arg, 64, 1u << 30, true); break;
    case OPT_MAX_HEADER: o->max_header_bytes = parse_count(flag, arg, 4096, 16u << 20, true); break;
    case OPT_MAX_KEYS: o->max_keys = parse_count(flag, arg, 1, 1u << 24, false); break;
    case OPT_MAX_KEY_BYTES: o->max_key_bytes = parse_count(flag, arg, 1, 1u << 20, true); break;
    case OPT_MAX_RANKS: o->max_ranks = parse_count(flag, arg, 1, 1u << 24, false); break;
    case OPT_MAX_PAGES:
        o->max_pages = parse_count(flag, arg, 1, CORE_MAX_PAGES_LIMIT, false);
        break;
    case OPT_MAX_CONNECTIONS: o->max_connections = parse_count(flag, arg, 1, 1000000, false); break;
    case OPT_IDLE_TIMEOUT: o->idle_timeout_s = parse_count(flag, arg, 0, 86400 * 365, false); break;
    case OPT_HEADER_TIMEOUT: o->header_timeout_s = parse_count(flag, arg, 0, 86400, false); break;
    case OPT_BODY_TIMEOUT: o->body_timeout_s = parse_count(flag, arg, 0, 86400, false); break;
    case OPT_BODY_MIN_RATE: o->body_min_rate = parse_count(flag, arg, 0, 1ull << 30, true); break;
    case OPT_TENANT_MAX_IN_FLIGHT:
        o->tenant_max_in_flight = parse_count(flag, arg, 0, 1u << 20, false);
        break;
    case OPT_RESERVATION_TIMEOUT:
        o->reservation_timeout_s = parse_seconds(flag, arg, 0.001, 1e9);
        break;
    case OPT_READ_LEASE: o->read_lease_s = parse_seconds(flag, arg, 0, 1e9); break;
    case OPT_WRITE_LEASE: o->write_lease_s = parse_seconds(flag, arg, 0, 1e9); break;
    case OPT_RELEASE_GRACE: o->release_grace_s = parse_seconds(flag, arg, 0, 1e9); break;
    case OPT_EVICTION:
        /* "lru": the flag's value before the rule was named for what it is */
        if (strcmp(arg, "clock") != 0 && strcmp(arg, "lru") != 0 && strcmp(arg, "none") != 0)
            bad_flag(flag, arg, "clock or none");
        o->evict = strcmp(arg, "none") != 0;
        break;
    case OPT_DEBUG_API: o->debug_api = true; break;
    case OPT_PERSISTENCE_PATH: o->persistence_path = arg; break;
    case OPT_DATA_DIR:
        o->data_dir = arg;
        o->data_dir_given = true;
        break;
    case OPT_IMPORT_SGLANG:
        if (access(arg, R_OK) != 0)
            bad_flag(flag, arg, "a readable file");
        o->import_sglang = arg;
        o->import_again_refused = true;
        break;
    case OPT_FSYNC:
        if (wal_parse_fsync(arg, &o->fsync) != 0)
            bad_flag(flag, arg, "always, everysec or no");
        break;
    case OPT_SNAPSHOT_LOG_BYTES:
        o->snapshot_log_bytes = parse_count(flag, arg, 0, UINT64_C(1) << 40, true);
        break;
    case OPT_SALVAGE: o->salvage = true; break;
    case OPT_STORE:
        if (strncmp(arg, "redis://", 8) != 0 && strncmp(arg, "unix://", 7) != 0 &&
            strncmp(arg, "redis-cluster://", 16) != 0 && strncmp(arg, "redis-sentinel://", 17) != 0)
            bad_flag(flag, arg,
                     "redis://[user:password@]host:port[/db], "
                     "redis-cluster://[user:password@]host:port[,host:port...], "
                     "redis-sentinel://[user:password@]host:port[,host:port...]/NAME or "
                     "unix:///path");
        o->store = arg;
        break;
    case OPT_REDIS_PASSWORD_FILE: o->redis_password_file = arg; break;
    case OPT_REDIS_CONNECT_TIMEOUT:
        o->redis_connect_timeout_s = parse_seconds(flag, arg, 0.001, 3600);
        break;
    case OPT_REDIS_TIMEOUT: o->redis_timeout_s = parse_seconds(flag, arg, 0.001, 3600); break;
    case OPT_REDIS_WAIT: o->redis_wait = parse_count(flag, arg, 0, 1000, false); break;
    case OPT_STRIPES: o->stripes = parse_count(flag, arg, 1, 256, false); break;
    case OPT_REDIS_CONNECTIONS: o->redis_connections = parse_count(flag, arg, 1, 64, false); break;
    case OPT_REDIS_MAX_IN_FLIGHT:
        o->redis_max_in_flight = parse_count(flag, arg, 1, 1u << 20, false);
        break;
    case OPT_REDIS_WAIT_TIMEOUT:
        o->redis_wait_timeout_s = parse_seconds(flag, arg, 0.001, 3600);
        break;
    case OPT_REDIS_USE_LOG_BYTES:
        /* A flag of an engine that logged uses to Redis; the module keeps
         * recency volatile and logs none: accepted, so that existing units
         * still start, and ignored. */
        parse_count(flag, arg, 64, 64u << 20, true);
        fprintf(stderr, "hf3fs-metad: --redis-use-log-bytes is deprecated and ignored: the "
                        "hf3fs-metad Redis module logs no uses\n");
        break;
    case OPT_SAVE_INTERVAL:
        o->save_interval_s = parse_seconds(flag, arg, 0, 1e9);
        o->save_interval_given = true;
        break;
    case OPT_IN_MEMORY: o->in_memory = true; break;
    case OPT_LOG_LEVEL:
        if (log_parse_level(arg, &o->log_level) != 0)
            bad_flag(flag, arg, "error, warn, info or debug");
        break;
    case OPT_AUTH_TOKEN_FILE: o->auth_token_file = arg; break;
    case OPT_ACCESS_LOG: o->access_log = true; break;
    case OPT_LOG_SUMMARY_INTERVAL:
        o->log_summary_interval_s = parse_seconds(flag, arg, 0, 86400 * 365);
        break;
    default: break;
    }
}

/* --persistence-path: a directory (or nothing yet) is the data directory;
 * a regular file is SGLang's state, imported beside itself. */
static void resolve_persistence_path(server_options *o)
{
    struct stat st;
    const char *path = o->persistence_path;
    if (!path)
        return;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (!o->data_dir_given)
            o->data_dir = path;
        return;
    }
    if (o->import_sglang && strcmp(o->import_sglang, path) != 0) {
        fprintf(stderr,
                "hf3fs-metad: --persistence-path %s (SGLang's state file) and "
                "--import-sglang %s name two files to import\n",
                path, o->import_sglang);
        exit(EXIT_USAGE);
    }
    if (!o->import_sglang)
        o->import_sglang = path;
    if (!o->data_dir_given) {
        static char dir[4096];
        if (snprintf(dir, sizeof dir, "%s.hf3fs-metad", path) >= (int)sizeof dir)
            bad_flag("persistence-path", path, "a path short enough");
        o->data_dir = dir;
    }
}

/* --version: the release, then what it speaks (api.h, api_versions). */
static void print_version(void)
{
    api_versions v = api_get_versions();
    printf("hf3fs-metad %s\n"
           "redis module: %s version %u, values of encoding version %u (reads 1..%u)\n"
           "data directory: log and snapshots of format %u (reads %u..%u)\n",
           v.release, HF3FS_MODULE_NAME, v.module, v.value_encoding, v.value_encoding,
           v.data_format, v.data_format_oldest, v.data_format);
}

static void parse_options(int argc, char **argv, server_options *o)
{
    *o = defaults;
    int id;
    opterr = 0;
    while ((id = getopt_long(argc, argv, "", long_options, NULL)) != -1) {
        if (id == OPT_HELP) {
            usage(stdout);
            exit(0);
        }
        if (id == OPT_VERSION) {
            print_version();
            exit(0);
        }
        if (id == '?' || id == ':') {
            const char *what = optopt ? "needs a value" : "is not a flag of hf3fs-metad";
            fprintf(stderr, "hf3fs-metad: %s %s\n", argv[optind - 1], what);
            fprintf(stderr, "Try 'hf3fs-metad --help'.\n");
            exit(EXIT_USAGE);
        }
        parse_flag(o, id, optarg);
    }
    if (optind < argc) {
        fprintf(stderr, "hf3fs-metad: unexpected argument '%s'\nTry 'hf3fs-metad --help'.\n",
                argv[optind]);
        exit(EXIT_USAGE);
    }
    if (o->stripes && !o->store) {
        fprintf(stderr, "hf3fs-metad: --stripes applies to --store only (the embedded engine "
                        "keeps a namespace in one core)\nTry 'hf3fs-metad --help'.\n");
        exit(EXIT_USAGE);
    }
    if (o->threads == 0) {
        /* the CPUs this process may run on (taskset, cgroup cpusets), not
         * every CPU online: a loop more than the CPUs only adds switches */
        cpu_set_t set;
        long cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                : sysconf(_SC_NPROCESSORS_ONLN);
        o->threads = cpus < 1 ? 1 : cpus > 1024 ? 1024 : (uint64_t)cpus;
        /* Under fsync always a change holds its thread until its group
         * sync: the threads bound the group (bench/durability.py, 16
         * clients on 2 CPUs: 2 threads 614 cycles/s, 16 threads 2757). */
        if (!o->store && !o->in_memory && o->fsync == WAL_FSYNC_ALWAYS && o->threads < 16)
            o->threads = 16;
    }
    resolve_persistence_path(o);
    /* Every thread needs a share of the connections. */
    if (o->threads > o->max_connections)
        o->threads = o->max_connections;
}

/* ---- start-up ---- */

/* The --store URL for the log, its password replaced by "***". */
static const char *redact_url(const char *url)
{
    static char buf[512];
    const char *at = strrchr(url, '@');
    const char *scheme = strstr(url, "://");
    if (!at || !scheme || at < scheme)
        return url;
    const char *colon = memchr(scheme + 3, ':', (size_t)(at - scheme - 3));
    const char *cut = colon ? colon + 1 : scheme + 3;
    snprintf(buf, sizeof buf, "%.*s***%s", (int)(cut - url), url, at);
    return buf;
}

static uint64_t random_seed(void)
{
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (uint64_t)time(NULL) * UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)getpid();
    return seed;
}

/* Seconds (validated: 0..1e9) to whole milliseconds, rounded; no libm. */
static int64_t seconds_to_ms(double seconds)
{
    return (int64_t)(seconds * 1000.0 + 0.5);
}

static double write_lease_s(const server_options *o)
{
    return o->write_lease_s < 0 ? o->reservation_timeout_s : o->write_lease_s;
}

static core_config core_config_from(const server_options *o)
{
    return (core_config){
        .reservation_ms = seconds_to_ms(o->reservation_timeout_s),
        .read_lease_ms = seconds_to_ms(o->read_lease_s),
        .write_lease_ms = seconds_to_ms(write_lease_s(o)),
        .release_grace_ms = seconds_to_ms(o->release_grace_s),
        .evict = o->evict,
        .max_pages = o->max_pages,
        .max_ranks = (uint32_t)o->max_ranks,
        .hash_seed = random_seed(),
    };
}

static api_config api_config_from(const server_options *o)
{
    return (api_config){
        .limits =
            {
                .max_ranks = (uint32_t)o->max_ranks,
                .max_pages = o->max_pages,
                .max_keys = (size_t)o->max_keys,
                .max_key_bytes = (size_t)o->max_key_bytes,
                .max_body_bytes = (size_t)o->max_body_bytes,
            },
        .debug_api = o->debug_api,
        .tenant_max_in_flight = (unsigned)o->tenant_max_in_flight,
    };
}

static http_config http_config_from(const server_options *o)
{
    return (http_config){
        .host = o->host,
        .port = (uint16_t)o->port,
        .threads = (unsigned)o->threads,
        .max_connections = (unsigned)o->max_connections,
        .idle_timeout_s = (unsigned)o->idle_timeout_s,
        .header_timeout_s = (unsigned)o->header_timeout_s,
        .body_timeout_s = (unsigned)o->body_timeout_s,
        .body_min_rate = (size_t)o->body_min_rate,
        .max_body_bytes = (size_t)o->max_body_bytes,
        .max_header_bytes = (size_t)o->max_header_bytes,
        .access_log = o->access_log,
        /* a Redis call parks its request's fiber for the round trip */
        .fibers = o->store != NULL,
    };
}

/* ---- auth ---- */

#define TOKEN_MAX_BYTES 1024

static const char *token_flag = "auth-token-file";

static void bad_token_file(const char *path, const char *problem)
{
    fprintf(stderr, "hf3fs-metad: --%s: '%s' %s\n", token_flag, path, problem);
    exit(EXIT_USAGE);
}

/*
 * The bytes of a secret file of at most max bytes, into *text (malloc'd,
 * NUL-terminated; the caller zeroes and frees it): 0, or -1 with why in
 * err. A file other users may read or write gets a warning.
 */
static int read_secret_file(const char *path, size_t max, char **text, size_t *len, char *err,
                            size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "%s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "is not a regular file");
        return -1;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO))
        log_msg(LOG_WARN,
                "--%s '%s' is readable or writable by other users "
                "(mode %03o); chmod 600 it",
                token_flag, path, (unsigned)(st.st_mode & 0777));
    char *buf = malloc(max + 2);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "cannot be read: out of memory");
        return -1;
    }
    size_t n = 0;
    int failed = 0;
    while (n < max + 1) {
        ssize_t got = read(fd, buf + n, max + 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            failed = errno;
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (failed || n > max) {
        if (failed)
            snprintf(err, errlen, "%s", strerror(failed));
        else
            snprintf(err, errlen, "holds more than %zu bytes", max);
        explicit_bzero(buf, max + 2);
        free(buf);
        return -1;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
}

/*
 * The password of --redis-password-file: the file's bytes without trailing
 * newlines (CR or LF), which must leave 1..TOKEN_MAX_BYTES printable ASCII
 * characters without spaces. An unreadable, empty or odd file stops the
 * start. The caller frees *token.
 */
static void read_password_file(const char *path, char **token, size_t *len)
{
    char err[256];
    size_t n;
    if (read_secret_file(path, TOKEN_MAX_BYTES + 2, token, &n, err, sizeof err) != 0)
        bad_token_file(path, err);
    char *buf = *token;
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    if (n == 0)
        bad_token_file(path, "holds no token (it is empty)");
    if (n > TOKEN_MAX_BYTES)
        bad_token_file(path, "holds more than 1024 bytes; a token is one line");
    for (size_t i = 0; i < n; i++)
        if (buf[i] <= ' ' || buf[i] > '~')
            bad_token_file(path, "holds a space, a control character or a non-ASCII byte; "
                                 "a token is one word of printable ASCII");
    *len = n;
}

/*
 * The text of --auth-token-file (tenants.h: "TOKEN [TENANT [pages=N]]"
 * lines), read and checked: 0, or -1 with why in err. The caller zeroes and
 * frees *text.
 */
static int read_token_file(const char *path, char **text, size_t *len, char *err, size_t errlen)
{
    if (read_secret_file(path, TENANT_FILE_MAX, text, len, err, errlen) != 0)
        return -1;
    tenant_table *table;
    if (tenant_table_parse(*text, *len, 0, &table, err, errlen) != 0) {
        explicit_bzero(*text, *len);
        free(*text);
        *text = NULL;
        return -1;
    }
    log_msg(LOG_INFO, "--auth-token-file '%s': %zu tokens of %zu tenants%s", path,
            tenant_table_tokens(table), tenant_table_tenants(table),
            tenant_table_names(table) > tenant_table_tenants(table) ? " and the operator" : "");
    tenant_table_free(table);
    return 0;
}

/* SIGHUP: the token file again; refused (the tokens in force stay) if it
 * cannot be used. */
static void reload_token_file(api_t *api, const char *path)
{
    char err[512];
    char *text;
    size_t len;
    if (read_token_file(path, &text, &len, err, sizeof err) != 0) {
        log_msg(LOG_ERROR,
                "SIGHUP: --auth-token-file '%s' %s: refused, the tokens in force "
                "stay",
                path, err);
        return;
    }
    int rc = api_reload_tokens(api, text, len, err, sizeof err);
    explicit_bzero(text, len);
    free(text);
    if (rc != 0)
        log_msg(LOG_ERROR,
                "SIGHUP: --auth-token-file '%s' %s: refused, the tokens in force "
                "stay",
                path, err);
    else
        log_msg(LOG_INFO, "SIGHUP: --auth-token-file '%s' reread: its tokens are in force", path);
}

/* Whether every address `host` stands for is a loopback address. */
static bool host_is_loopback(const char *host)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *found = NULL;
    if (getaddrinfo(host, NULL, &hints, &found) != 0 || !found)
        return false;
    bool loopback = true;
    for (const struct addrinfo *a = found; a; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *in = (const void *)a->ai_addr;
            loopback &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *in6 = (const void *)a->ai_addr;
            const struct in6_addr *x = &in6->sin6_addr;
            loopback &= IN6_IS_ADDR_LOOPBACK(x) ||
                        (IN6_IS_ADDR_V4MAPPED(x) && x->s6_addr[12] == 127);
        } else {
            loopback = false;
        }
    }
    freeaddrinfo(found);
    return loopback;
}

static void log_settings(const server_options *o, uint16_t port)
{
    bool v6 = strchr(o->host, ':') != NULL;
    log_msg(LOG_INFO,
            "hf3fs-metad listening on http://%s%s%s:%u (threads %" PRIu64
            ", max-connections %" PRIu64 ", idle-timeout %" PRIu64 " s, header-timeout %" PRIu64
            " s, body-timeout %" PRIu64 " s, body-min-rate %" PRIu64
            ", tenant-max-in-flight %" PRIu64 ", max-body-bytes %" PRIu64
            ", max-header-bytes %" PRIu64 ", max-keys %" PRIu64 ", max-key-bytes %" PRIu64
            ", max-ranks %" PRIu64 ", max-pages %" PRIu64
            ", reservation-timeout %g s, read-lease %g s, write-lease %g s, "
            "release-grace %g s, eviction %s, "
            "debug-api %s, log-level %s, auth %s%s%s, access-log %s, log-summary-interval %g s, "
            "import-sglang %s)",
            v6 ? "[" : "", o->host, v6 ? "]" : "", (unsigned)port, o->threads, o->max_connections,
            o->idle_timeout_s, o->header_timeout_s, o->body_timeout_s, o->body_min_rate,
            o->tenant_max_in_flight, o->max_body_bytes, o->max_header_bytes, o->max_keys,
            o->max_key_bytes, o->max_ranks, o->max_pages, o->reservation_timeout_s, o->read_lease_s,
            write_lease_s(o), o->release_grace_s, o->evict ? "clock" : "none",
            o->debug_api ? "on" : "off", log_level_name(o->log_level),
            o->auth_token_file ? "on (auth-token-file " : "off",
            o->auth_token_file ? o->auth_token_file : "", o->auth_token_file ? ")" : "",
            o->access_log ? "on" : "off", o->log_summary_interval_s,
            o->import_sglang ? o->import_sglang : "none");
    if (o->store) {
        char stripes[24] = "1";
        if (o->stripes)
            snprintf(stripes, sizeof stripes, "%" PRIu64, o->stripes);
        else if (strncmp(o->store, "redis-cluster://", 16) == 0)
            snprintf(stripes, sizeof stripes, "by pool size");
        char wait[48] = "1 if every primary has a replica";
        if (o->redis_wait != REDIS_WAIT_AUTO)
            snprintf(wait, sizeof wait, "%" PRIu64, o->redis_wait);
        log_msg(LOG_INFO,
                "state is kept in Redis (store %s, redis-password-file %s, "
                "redis-connect-timeout %g s, redis-timeout %g s, redis-wait %s"
                ", redis-wait-timeout %g s, redis-connections %" PRIu64
                ", redis-max-in-flight %" PRIu64 ", stripes %s for the namespaces it creates): "
                "this process is a stateless front end; data-dir, "
                "fsync, save-interval, snapshot-log-bytes and salvage do not apply",
                redact_url(o->store), o->redis_password_file ? o->redis_password_file : "none",
                o->redis_connect_timeout_s, o->redis_timeout_s, wait, o->redis_wait_timeout_s,
                o->redis_connections, o->redis_max_in_flight, stripes);
        return;
    }
    log_msg(LOG_INFO, "store: the embedded engine (no --store; redis-password-file, "
                      "redis-connect-timeout, redis-timeout, redis-wait, redis-wait-timeout, "
                      "redis-connections, redis-max-in-flight and stripes "
                      "apply to --store only)");
    if (o->in_memory)
        log_msg(LOG_INFO, "state is kept in memory only (--in-memory): a restart forgets every "
                          "pool");
    else
        log_msg(LOG_INFO,
                "state is kept in %s (data-dir, fsync %s, save-interval %g s, "
                "snapshot-log-bytes %" PRIu64 ", salvage %s)",
                o->data_dir, wal_fsync_name(o->fsync), o->save_interval_s, o->snapshot_log_bytes,
                o->salvage ? "on" : "off");
}

/* The exit code of a store that could not be opened. */
static int exit_code_of(int store_error)
{
    switch (store_error) {
    case STORE_EDAMAGED: return EXIT_DAMAGED;
    case STORE_EUNREACHABLE:
    case STORE_EAUTH: return EXIT_STORE;
    case STORE_ECONFIG: return EXIT_USAGE;
    case STORE_ENOMODULE: return EXIT_NOMODULE;
    default: return EXIT_DATA_DIR; /* the data directory: foreign, locked, unreadable */
    }
}

/* The in-memory engine, or the engine with its log recovered from the data
 * directory (exits with a message if that fails). */
static store_t *open_store(const server_options *o, const core_config *core)
{
    if (o->store) {
        char *password = NULL;
        size_t password_len = 0;
        if (o->redis_password_file) {
            token_flag = "redis-password-file";
            read_password_file(o->redis_password_file, &password, &password_len);
        }
        store_redis_options ro = {
            .url = o->store,
            .password = password,
            .connect_timeout_ms = seconds_to_ms(o->redis_connect_timeout_s),
            .command_timeout_ms = seconds_to_ms(o->redis_timeout_s),
            .wait_replicas = o->redis_wait == REDIS_WAIT_AUTO ? 0 : (unsigned)o->redis_wait,
            .wait_auto = o->redis_wait == REDIS_WAIT_AUTO,
            .wait_timeout_ms = seconds_to_ms(o->redis_wait_timeout_s),
            .connections = (unsigned)o->redis_connections,
            .max_in_flight = (size_t)o->redis_max_in_flight,
            .stripes = (uint32_t)o->stripes,
        };
        store_t *store = NULL;
        char err[1024];
        int rc = store_redis_open(core, &ro, &store, err, sizeof err);
        if (password) {
            explicit_bzero(password, password_len);
            free(password);
        }
        if (rc == STORE_OK)
            return store;
        log_msg(LOG_ERROR, "--store: %s", err);
        exit(rc == STORE_EUNAVAILABLE ? EXIT_STORE : exit_code_of(rc));
    }
    if (o->in_memory)
        return store_mem_new(core, &store_server_clock);
    wal_options log = {
        .dir = o->data_dir,
        .fsync = o->fsync,
        .save_interval_ms = seconds_to_ms(o->save_interval_s),
        .snapshot_log_bytes = o->snapshot_log_bytes,
        .salvage = o->salvage,
    };
    store_t *store = NULL;
    char err[1024];
    err[0] = '\0';
    int rc = store_mem_open(core, &store_server_clock, &log, &store, err, sizeof err);
    if (rc == STORE_OK)
        return store;
    log_msg(LOG_ERROR, "%s", err[0] ? err : store_strerror(rc));
    exit(exit_code_of(rc));
}

/* Import SGLang's state file, if one was named, before anything is served
 * (exits with EXIT_IMPORT, nothing imported, if it is refused). */
static void import_at_start(const server_options *o, store_t *store)
{
    const char *path = o->import_sglang;
    if (!path)
        return;
    char err[1024];
    int has = import_target_pools(store);
    if (has < 0) {
        log_msg(LOG_ERROR, "cannot import %s: the state cannot be read: %s", path,
                store_describe(store, has));
        goto refused;
    }
    if (has) {
        int done = import_already_done(store, path, err, sizeof err);
        if (done < 0) {
            log_msg(LOG_ERROR, "cannot import %s: %s", path, err);
            goto refused;
        }
        if (done || !o->import_again_refused) {
            log_msg(LOG_INFO, "not importing %s: %s; the state stays as it is", path,
                    done ? "already imported (the same file) at an earlier start"
                         : "the state is not empty (imported at an earlier start)");
            return;
        }
    }
    import_limits lim = {o->max_pages, o->max_ranks, o->max_key_bytes};
    import_state st;
    if (import_sglang_read(path, &lim, &st, err, sizeof err) != 0) {
        log_msg(LOG_ERROR, "%s; nothing was imported", err);
        goto refused;
    }
    int rc = import_sglang_apply(store, &st, path, err, sizeof err);
    import_state_free(&st);
    if (rc == 0)
        return;
    log_msg(LOG_ERROR, "%s", err);
refused:
    store->ops->destroy(store);
    exit(EXIT_IMPORT);
}

/* Wait for SIGINT or SIGTERM; meanwhile log the summary line every
 * interval (its figures were first taken before the server answered),
 * reread the token file at each SIGHUP, and read the server clock every
 * second, so that it compares itself with the wall clock (a step is logged
 * within a second even when no request comes). */
static int wait_for_stop(const sigset_t *signals, api_t *api, const server_options *o)
{
    double interval_s = o->log_summary_interval_s;
    int64_t every_ms = seconds_to_ms(interval_s > 0 ? interval_s : 3600);
    int64_t next_summary = hf_clock_mono_ms() + every_ms;
    const struct timespec tick = {.tv_sec = HF_STEADY_CHECK_US / 1000000, .tv_nsec = 0};
    for (;;) {
        int sig = sigtimedwait(signals, NULL, &tick);
        if (sig == SIGHUP) {
            if (o->auth_token_file)
                reload_token_file(api, o->auth_token_file);
            else
                log_msg(LOG_INFO, "SIGHUP: no --auth-token-file to reread");
        } else if (sig > 0) {
            return sig;
        }
        (void)hf_clock_server_ms();
        int64_t now = hf_clock_mono_ms();
        if (now >= next_summary) {
            if (interval_s > 0)
                api_log_summary(api);
            next_summary = now + every_ms;
        }
    }
}

int main(int argc, char **argv)
{
    server_options options;
    parse_options(argc, argv, &options);
    log_set_level(options.log_level);
    api_versions version = api_get_versions();
    log_msg(LOG_INFO, "hf3fs-metad %s starting (Redis module version %u, data directory format %u)",
            version.release, version.module, version.data_format);

    /* Before any thread exists, so that every thread inherits the mask. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGINT);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Before anything starts: a bad token file stops the start at once. */
    api_config api_cfg = api_config_from(&options);
    char *token = NULL;
    if (options.auth_token_file) {
        char why[512];
        if (read_token_file(options.auth_token_file, &token, &api_cfg.auth_token_len, why,
                            sizeof why) != 0)
            bad_token_file(options.auth_token_file, why);
        api_cfg.auth_token = token;
    }
    core_config core = core_config_from(&options);
    (void)hf_clock_server(); /* anchored to the wall clock now, before any lease */
    store_t *store = open_store(&options, &core);
    import_at_start(&options, store);
    api_t *api = api_new(store, &api_cfg); /* keeps its own table of the tokens */
    if (token) {
        explicit_bzero(token, api_cfg.auth_token_len);
        free(token);
        api_cfg.auth_token = NULL;
    }
    http_config http_cfg = http_config_from(&options);
    char err[256];
    if (!options.auth_token_file && !host_is_loopback(options.host))
        log_msg(LOG_WARN,
                "--host %s is not a loopback address and there is no "
                "--auth-token-file: anyone who can reach this port can change or clear the "
                "cache's metadata",
                options.host);
    /* The summary's first figures, taken before any request can move them
     * (taken later, what came first would never be logged). */
    if (options.log_summary_interval_s > 0)
        api_log_summary(api);
    http_server *http = http_start(&http_cfg, api, err, sizeof err);
    if (!http) {
        log_msg(LOG_ERROR, "%s", err);
        api_free(api);
        store->ops->destroy(store);
        return 1;
    }
    log_settings(&options, http_bound_port(http));

    int sig = wait_for_stop(&signals, api, &options);
    log_msg(LOG_INFO, "%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    http_stop(http);
    api_free(api);
    store->ops->destroy(store);
    log_msg(LOG_INFO, "stopped");
    return 0;
}
