/*
 * main.c: hf3fs-metad's start-up and shutdown (its flags: flags.c).
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
#include "server/options.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/steady.h"
#include "store/mem.h"
#include "store/redis/redis.h"
#include "wal/wal.h"
#include "wire/wire.h"

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

static core_config core_config_from(const server_options *o)
{
    return (core_config){
        .reservation_ms = seconds_to_ms(o->reservation_timeout_s),
        .read_lease_ms = seconds_to_ms(o->read_lease_s),
        .write_lease_ms = seconds_to_ms(options_write_lease_s(o)),
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
        .hit_ratio_target = o->hit_ratio_target_given ? o->hit_ratio_target : -1,
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
    char target[32] = "the estimate at 4x less 1 point";
    if (o->hit_ratio_target_given)
        snprintf(target, sizeof target, "%g", o->hit_ratio_target);
    log_msg(LOG_INFO,
            "hf3fs-metad listening on http://%s%s%s:%u (threads %" PRIu64
            ", max-connections %" PRIu64 ", idle-timeout %" PRIu64 " s, header-timeout %" PRIu64
            " s, body-timeout %" PRIu64 " s, body-min-rate %" PRIu64
            ", tenant-max-in-flight %" PRIu64 ", max-body-bytes %" PRIu64
            ", max-header-bytes %" PRIu64 ", max-keys %" PRIu64 ", max-key-bytes %" PRIu64
            ", max-ranks %" PRIu64 ", max-pages %" PRIu64
            ", reservation-timeout %g s, read-lease %g s, write-lease %g s, "
            "release-grace %g s, eviction %s, "
            "debug-api %s, hit-ratio-target %s, log-level %s, auth %s%s%s, access-log %s, "
            "log-summary-interval %g s, import-sglang %s)",
            v6 ? "[" : "", o->host, v6 ? "]" : "", (unsigned)port, o->threads, o->max_connections,
            o->idle_timeout_s, o->header_timeout_s, o->body_timeout_s, o->body_min_rate,
            o->tenant_max_in_flight, o->max_body_bytes, o->max_header_bytes, o->max_keys,
            o->max_key_bytes, o->max_ranks, o->max_pages, o->reservation_timeout_s, o->read_lease_s,
            options_write_lease_s(o), o->release_grace_s, o->evict ? "clock" : "none",
            o->debug_api ? "on" : "off", target, log_level_name(o->log_level),
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
        char wait[48] = "1 on each primary with a replica";
        if (o->redis_wait_given)
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
            .wait_replicas = o->redis_wait_given ? (unsigned)o->redis_wait : 0,
            .wait_auto = !o->redis_wait_given,
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
    options_parse(argc, argv, &options);
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
