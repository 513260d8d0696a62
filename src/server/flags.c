/*
 * flags.c: hf3fs-metad's flags as one table (as Redis's config.c keeps its
 * directives): each row names a flag, the field of server_options it sets,
 * how its value is read and within which bounds, its default and its help.
 * The defaults are the rows' default values read by the same code as the
 * command line's, before it; getopt's option list, --help and the parsing
 * are made from the rows. A help text is lines split by '\n', "{}" standing
 * for the default.
 */
#include "server/options.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "core/core.h"
#include "wire/wire.h"

typedef enum flag_kind {
    FLAG_COUNT,   /* an integer in min..max (uint64_t) */
    FLAG_BYTES,   /* the same, with a K/M/G (binary) suffix allowed */
    FLAG_SECONDS, /* seconds, decimals allowed, in min..max (double) */
    FLAG_TEXT,    /* the value as given (const char *) */
    FLAG_SWITCH,  /* no value: true (bool) */
    FLAG_OTHER,   /* read by the row's own function */
} flag_kind;

typedef struct flag_row {
    const char *name;
    const char *value; /* the value's name in --help; NULL: a switch */
    flag_kind kind;
    size_t field; /* offsetof(server_options, ...) */
    double min, max;
    const char *dflt; /* read into the field before the command line; NULL: zero */
    const char *help; /* NULL: not in --help (a flag kept for old units) */
    /* FLAG_OTHER: read arg into o; given: from the command line, not the
     * default */
    void (*read)(server_options *o, const char *flag, const char *arg, bool given);
} flag_row;

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

/* ---- the flags read by functions of their own ---- */

static void read_eviction(server_options *o, const char *flag, const char *arg, bool given)
{
    /* "lru": the flag's value before the rule was named for what it is */
    if (strcmp(arg, "clock") != 0 && strcmp(arg, "lru") != 0 && strcmp(arg, "none") != 0)
        bad_flag(flag, arg, "clock or none");
    o->evict = strcmp(arg, "none") != 0;
}

static void read_data_dir(server_options *o, const char *flag, const char *arg, bool given)
{
    o->data_dir = arg;
    o->data_dir_given = given;
}

static void read_import_sglang(server_options *o, const char *flag, const char *arg, bool given)
{
    if (access(arg, R_OK) != 0)
        bad_flag(flag, arg, "a readable file");
    o->import_sglang = arg;
    o->import_again_refused = true;
}

static void read_fsync(server_options *o, const char *flag, const char *arg, bool given)
{
    if (wal_parse_fsync(arg, &o->fsync) != 0)
        bad_flag(flag, arg, "always, everysec or no");
}

static void read_log_level(server_options *o, const char *flag, const char *arg, bool given)
{
    if (log_parse_level(arg, &o->log_level) != 0)
        bad_flag(flag, arg, "error, warn, info or debug");
}

static void read_store(server_options *o, const char *flag, const char *arg, bool given)
{
    if (strncmp(arg, "redis://", 8) != 0 && strncmp(arg, "unix://", 7) != 0 &&
        strncmp(arg, "redis-cluster://", 16) != 0 && strncmp(arg, "redis-sentinel://", 17) != 0)
        bad_flag(flag, arg,
                 "redis://[user:password@]host:port[/db], "
                 "redis-cluster://[user:password@]host:port[,host:port...], "
                 "redis-sentinel://[user:password@]host:port[,host:port...]/NAME or "
                 "unix:///path");
    o->store = arg;
}

static void read_write_lease(server_options *o, const char *flag, const char *arg, bool given)
{
    o->write_lease_s = parse_seconds(flag, arg, 0, 1e9);
    o->write_lease_given = true;
}

static void read_redis_wait(server_options *o, const char *flag, const char *arg, bool given)
{
    o->redis_wait = parse_count(flag, arg, 0, 1000, false);
    o->redis_wait_given = true;
}

static void read_save_interval(server_options *o, const char *flag, const char *arg, bool given)
{
    o->save_interval_s = parse_seconds(flag, arg, 0, 1e9);
    o->save_interval_given = given;
}

static void read_hit_ratio_target(server_options *o, const char *flag, const char *arg, bool given)
{
    errno = 0;
    char *end;
    double t = strtod(arg, &end);
    if (errno || end == arg || *end || !(t >= 0 && t <= 1))
        bad_flag(flag, arg, "a ratio in 0..1");
    o->hit_ratio_target = t;
    o->hit_ratio_target_given = true;
}

static void read_redis_use_log_bytes(server_options *o, const char *flag, const char *arg,
                                     bool given)
{
    /* A flag of an engine that logged uses to Redis; the module keeps
     * recency volatile and logs none: accepted, so that existing units
     * still start, and ignored. */
    parse_count(flag, arg, 64, 64u << 20, true);
    fprintf(stderr, "hf3fs-metad: --redis-use-log-bytes is deprecated and ignored: the "
                    "hf3fs-metad Redis module logs no uses\n");
}

/* ---- the table ---- */

#define AT(f) offsetof(server_options, f)
#define COUNT(f, lo, hi) .kind = FLAG_COUNT, .field = AT(f), .min = (lo), .max = (hi)
#define BYTES(f, lo, hi) .kind = FLAG_BYTES, .field = AT(f), .min = (lo), .max = (hi)
#define SECONDS(f, lo, hi) .kind = FLAG_SECONDS, .field = AT(f), .min = (lo), .max = (hi)
#define TEXT(f) .kind = FLAG_TEXT, .field = AT(f)
#define SWITCH(f) .kind = FLAG_SWITCH, .field = AT(f)
#define OTHER(fn) .kind = FLAG_OTHER, .read = (fn)

/* In --help's order. */
static const flag_row flags[] = {
    {"host", "ADDR", TEXT(host), .dflt = "127.0.0.1", .help = "address to listen on (default {})"},
    {"port", "N", COUNT(port, 0, 65535), .dflt = "18000",
     .help = "TCP port, 0 picks a free one (default {})"},
    {"threads", "N", COUNT(threads, 1, 1024),
     .help = "HTTP event-loop threads (default: one per CPU it may\n"
             "run on; at least 16 with --fsync always; at most\n"
             "--max-connections)"},
    {"max-connections", "N", COUNT(max_connections, 1, 1000000), .dflt = "1024",
     .help = "open connections at most (default {})"},
    {"idle-timeout", "SECONDS", COUNT(idle_timeout_s, 0, 86400 * 365), .dflt = "60",
     .help = "close a connection idle this long, 0 never (default {})"},
    {"header-timeout", "SECONDS", COUNT(header_timeout_s, 0, 86400), .dflt = "10",
     .help = "a request's line and headers must arrive within this of\n"
             "its first byte (of the connection's opening for its\n"
             "first request), else 408; 0 never (default {})"},
    {"body-timeout", "SECONDS", COUNT(body_timeout_s, 0, 86400), .dflt = "10",
     .help = "a body must arrive within this of its headers, plus a\n"
             "second per --body-min-rate bytes, else 408; 0 never\n"
             "(default {})"},
    {"body-min-rate", "N", BYTES(body_min_rate, 0, 1 << 30), .dflt = "4K",
     .help = "body bytes a second that extend --body-timeout by one\n"
             "second, K/M suffixes allowed; 0 no extension (default {})"},
    {"max-body-bytes", "N", BYTES(max_body_bytes, 64, 1 << 30), .dflt = "8M",
     .help = "largest request body, K/M/G suffixes allowed (default {})"},
    {"max-header-bytes", "N", BYTES(max_header_bytes, 4096, 16 << 20), .dflt = "32K",
     .help = "request line + headers of one request (default {})"},
    {"max-keys", "N", COUNT(max_keys, 1, 1 << 24), .dflt = "65536",
     .help = "items of any list in one request (default {})"},
    {"max-key-bytes", "N", BYTES(max_key_bytes, 1, 1 << 20), .dflt = "1024",
     .help = "longest key or namespace (default {})"},
    {"max-ranks", "N", COUNT(max_ranks, 1, 1 << 24), .dflt = "1024",
     .help = "ranks are 0..N-1 (default {})"},
    /* the default is the bound (checked below the table) */
    {"max-pages", "N", COUNT(max_pages, 1, CORE_MAX_PAGES_LIMIT), .dflt = "4294967294",
     .help = "largest num_pages of a pool (default {})"},
    {"reservation-timeout", "SECS", SECONDS(reservation_timeout_s, 0.001, 1e9), .dflt = "600",
     .help = "reservation lease, decimals allowed (default {})"},
    {"read-lease", "SECS", SECONDS(read_lease_s, 0, 1e9), .dflt = "5",
     .help = "read lease, decimals allowed, 0 none (default {})"},
    {"write-lease", "SECS", OTHER(read_write_lease),
     .help = "longest protection of a vLLM allocation hit that is\n"
             "being rewritten (its confirmation ends it sooner);\n"
             "0 none (default: the reservation timeout)"},
    {"release-grace", "SECS", SECONDS(release_grace_s, 0, 1e9), .dflt = "10",
     .help = "a released page is reused only after this long, so a\n"
             "retried release cannot free another writer's page;\n"
             "0 none (default {})"},
    {"eviction", "clock|none", OTHER(read_eviction), .dflt = "clock",
     .help = "when full, evict keys not used recently, by the core's\n"
             "CLOCK rule (docs/eviction.md); none: never (default\n"
             "{}; lru is accepted as another name for clock)"},
    {"debug-api", NULL, SWITCH(debug_api),
     .help = "serve GET /v1/check (walks every pool; for tests)"},
    {"hit-ratio-target", "RATIO", OTHER(read_hit_ratio_target),
     .help = "the sizing advice's prefix-hit ratio, 0 to 1 (default:\n"
             "1 point below the estimate at 4x; docs/sizing.md)"},
    {"data-dir", "DIR", OTHER(read_data_dir), .dflt = "./hf3fs-metad-data",
     .help = "keep the state (write-ahead log and snapshots) in DIR\n"
             "(default {})"},
    {"persistence-path", "PATH", TEXT(persistence_path),
     .help = "a directory: the same as --data-dir (the existing\n"
             "servers' flag); a file: SGLang's state file, imported at\n"
             "the first start into the data directory PATH.hf3fs-metad\n"
             "(or --data-dir) and left as it is; a later start, whose\n"
             "state is not empty, does not import it again"},
    {"import-sglang", "FILE", OTHER(read_import_sglang),
     .help = "import SGLang's state file FILE at start into an empty\n"
             "state (any engine); a state that holds a pool is refused\n"
             "unless it records the import of this same file"},
    {"in-memory", NULL, SWITCH(in_memory),
     .help = "keep nothing on disk: a restart forgets every pool"},
    {"fsync", "always|everysec|no", OTHER(read_fsync), .dflt = "always",
     .help = "always: a change is acknowledged once synced to disk\n"
             "(group commit); everysec: once written, synced every\n"
             "second; no: once written (default {})"},
    {"save-interval", "SECONDS", OTHER(read_save_interval), .dflt = "60",
     .help = "snapshot this often if anything changed, 0 never\n"
             "(default {})"},
    {"snapshot-log-bytes", "N", BYTES(snapshot_log_bytes, 0, 1ull << 40), .dflt = "64M",
     .help = "snapshot once the log grew by N bytes, K/M/G allowed,\n"
             "0 never (default {})"},
    {"salvage", NULL, SWITCH(salvage),
     .help = "start despite damage before the log's tail: keep every\n"
             "valid record, set the damaged files aside"},
    {"log-level", "LEVEL", OTHER(read_log_level), .dflt = "info",
     .help = "error|warn|info|debug (default {})"},
    {"auth-token-file", "PATH", TEXT(auth_token_file),
     .help = "require one of this file's tokens on every route but\n"
             "/health, as 'Authorization: Bearer TOKEN' or HTTP Basic\n"
             "auth with the token as password; lines TOKEN [TENANT\n"
             "[pages=N]] give each tenant its own namespaces; SIGHUP\n"
             "rereads it (default: no auth)"},
    {"tenant-max-in-flight", "N", COUNT(tenant_max_in_flight, 0, 1 << 20), .dflt = "32",
     .help = "with two tenants or more, each tenant's requests\n"
             "running at once; the next wait in line, 503 after\n"
             "10 s; 0 no bound (default {})"},
    {"access-log", NULL, SWITCH(access_log), .help = "log one line per request (default off)"},
    {"log-summary-interval", "SECS", SECONDS(log_summary_interval_s, 0, 86400 * 365), .dflt = "60",
     .help = "log evictions, expired reservations and refusals at\n"
             "most this often, when they moved; 0 never (default {})"},
    {"store", "URL", OTHER(read_store),
     .help = "keep the state in Redis, shared by every front end:\n"
             "redis://[user:password@]host:port[/db],\n"
             "redis-cluster://[user:password@]host:port[,host:port...]\n"
             "(seed nodes of a Redis Cluster),\n"
             "redis-sentinel://[user:password@]host:port[,host:port...]\n"
             "/NAME[/db] (Redis Sentinels, asked for primary NAME) or\n"
             "unix:///path/redis.sock (default: the embedded engine;\n"
             "--data-dir, --fsync... then do not apply). Redis must\n"
             "have loaded the hf3fs-metad module: redis-server\n"
             "... --loadmodule /path/to/hf3fs_metad_redis.so"},
    {"redis-password-file", "PATH", TEXT(redis_password_file),
     .help = "Redis password from this file (replaces the URL's)"},
    {"redis-connect-timeout", "SECS", SECONDS(redis_connect_timeout_s, 0.001, 3600), .dflt = "1",
     .help = "connecting to Redis, at most (default {})"},
    {"redis-timeout", "SECS", SECONDS(redis_timeout_s, 0.001, 3600), .dflt = "2",
     .help = "one Redis call, at most; then 503, or 507 for a change\n"
             "whose outcome is unknown (default {})"},
    {"redis-wait", "N", OTHER(read_redis_wait),
     .help = "acknowledge a change once N replicas have it (WAIT);\n"
             "0: once the primary applied it (default: 1 on each\n"
             "primary from when it has a replica in sync, else 0)"},
    {"redis-wait-timeout", "SECS", SECONDS(redis_wait_timeout_s, 0.001, 3600), .dflt = "1",
     .help = "how long WAIT waits for them (default {})"},
    {"redis-connections", "N", COUNT(redis_connections, 1, 64), .dflt = "1",
     .help = "connections to Redis (to each primary of a cluster),\n"
             "shared by every request: the commands of concurrent\n"
             "requests go out together (1-64, default {})"},
    {"redis-max-in-flight", "N", COUNT(redis_max_in_flight, 1, 1 << 20), .dflt = "256",
     .help = "commands queued or awaiting Redis per connection; past\n"
             "it a request waits, then answers 503 (default {})"},
    {"stripes", "N", COUNT(stripes, 1, 256),
     .help = "Redis values per namespace this front end creates,\n"
             "1-256 (default 1; redis-cluster://: by the first pool's\n"
             "size and the primaries); a namespace keeps the count\n"
             "it was created with"},
    {"redis-use-log-bytes", "N", OTHER(read_redis_use_log_bytes)},
};
#define NFLAGS (sizeof flags / sizeof flags[0])
_Static_assert(CORE_MAX_PAGES_LIMIT == 4294967294ull, "--max-pages' default is the limit");

/* Two flags of getopt's own after the table's: their ids. */
enum { FLAG_HELP = (int)NFLAGS, FLAG_VERSION };

static void read_flag(server_options *o, const flag_row *f, const char *arg, bool given)
{
    char *at = (char *)o + f->field;
    switch (f->kind) {
    case FLAG_COUNT:
    case FLAG_BYTES: {
        uint64_t v = parse_count(f->name, arg, (uint64_t)f->min, (uint64_t)f->max,
                                 f->kind == FLAG_BYTES);
        memcpy(at, &v, sizeof v);
        break;
    }
    case FLAG_SECONDS: {
        double v = parse_seconds(f->name, arg, f->min, f->max);
        memcpy(at, &v, sizeof v);
        break;
    }
    case FLAG_TEXT: memcpy(at, &arg, sizeof arg); break;
    case FLAG_SWITCH: {
        bool v = true;
        memcpy(at, &v, sizeof v);
        break;
    }
    case FLAG_OTHER: f->read(o, f->name, arg, given); break;
    }
}

/* One help text's lines: the first after the flag, the others indented
 * below it; "{}" is the default. */
static void print_help(FILE *out, const flag_row *f)
{
    char head[64];
    snprintf(head, sizeof head, "  --%s%s%s", f->name, f->value ? " " : "",
             f->value ? f->value : "");
    fprintf(out, "%-29s ", head);
    for (const char *p = f->help; *p; p++) {
        if (p[0] == '{' && p[1] == '}') {
            fputs(f->dflt ? f->dflt : "", out);
            p++;
        } else if (*p == '\n') {
            fprintf(out, "\n%30s", "");
        } else {
            fputc(*p, out);
        }
    }
    fputc('\n', out);
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: hf3fs-metad [FLAGS]\n"
                 "KV-cache page metadata server for 3FS: serves the vLLM and SGLang dialects.\n"
                 "\n");
    for (size_t i = 0; i < NFLAGS; i++)
        if (flags[i].help)
            print_help(out, &flags[i]);
    fprintf(out,
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
            "state is not empty): nothing imported.\n");
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

void options_parse(int argc, char **argv, server_options *o)
{
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < NFLAGS; i++)
        if (flags[i].dflt)
            read_flag(o, &flags[i], flags[i].dflt, false);
    struct option options[NFLAGS + 3];
    for (size_t i = 0; i < NFLAGS; i++)
        options[i] = (struct option){
            flags[i].name, flags[i].value ? required_argument : no_argument, NULL, (int)i};
    options[NFLAGS] = (struct option){"help", no_argument, NULL, FLAG_HELP};
    options[NFLAGS + 1] = (struct option){"version", no_argument, NULL, FLAG_VERSION};
    options[NFLAGS + 2] = (struct option){NULL, 0, NULL, 0};
    int id;
    opterr = 0;
    while ((id = getopt_long(argc, argv, "", options, NULL)) != -1) {
        if (id == FLAG_HELP) {
            usage(stdout);
            exit(0);
        }
        if (id == FLAG_VERSION) {
            print_version();
            exit(0);
        }
        if (id == '?' || id == ':' || id < 0 || (size_t)id >= NFLAGS) {
            const char *what = optopt ? "needs a value" : "is not a flag of hf3fs-metad";
            fprintf(stderr, "hf3fs-metad: %s %s\n", argv[optind - 1], what);
            fprintf(stderr, "Try 'hf3fs-metad --help'.\n");
            exit(EXIT_USAGE);
        }
        read_flag(o, &flags[id], optarg, true);
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
         * sync: the threads bound the group (docs/durability.md, "Costs"). */
        if (!o->store && !o->in_memory && o->fsync == WAL_FSYNC_ALWAYS && o->threads < 16)
            o->threads = 16;
    }
    resolve_persistence_path(o);
    /* Every thread needs a share of the connections. */
    if (o->threads > o->max_connections)
        o->threads = o->max_connections;
}

double options_write_lease_s(const server_options *o)
{
    return o->write_lease_given ? o->write_lease_s : o->reservation_timeout_s;
}
