/*
 * http.c: libmicrohttpd glue. See http.h for what it promises.
 *
 * State. Each TCP connection gets one http_conn (created and freed by MHD's
 * connection notifications): the body buffer and the api_response (answer
 * buffer and request arena) live there and are reused by every request of
 * the connection. MHD serves one request of a connection at a time, so the
 * answer buffer is handed to MHD without a copy (MHD_RESPMEM_PERSISTENT):
 * it is not touched again until the request-completed notification, which
 * comes after the answer went out. That notification gives back memory
 * above what a typical request needs (BODY_KEEP, and api_response_trim).
 *
 * Per request the only allocations are MHD's response object and its
 * Content-Type header; the 204 and 413 responses are built once and shared
 * (MHD counts their references under a lock).
 *
 * Request flow in the access handler (MHD calls it at least twice):
 *   1st call: headers known. Content-Length above the limit: queue 413 now
 *             (MHD then sends no 100 Continue, drops the body and closes).
 *             Otherwise note the length, to size the buffer as bytes come.
 *   upload calls: append, or, once past the limit, count and drop.
 *   last call: 413 if the body overflowed, else api_handle() and the answer.
 *
 * Connections are counted for /metrics (api_count_connection): opened and
 * closed from MHD's connection notifications, refused at the limit from
 * on_accept, and from MHD's "Server reached connection limit" message
 * should its own (out of reach) limit ever act.
 *
 * Access log (--access-log): one line per answer, after it is queued:
 *   access: 127.0.0.1:40212 "POST /keys/batch_allocate HTTP/1.1" 200 1234 0.000213
 * (client, method, path with bytes outside printable ASCII as \xHH, version,
 * status, body bytes, seconds since the headers were read).
 */
#include "http/http.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "server/log.h"
#include "util/xalloc.h"

#define BODY_FIRST (4u * 1024)  /* first body buffer */
#define BODY_KEEP (64u * 1024)  /* body buffer kept between requests */

struct http_server {
    struct MHD_Daemon *daemon;
    api_t *api;
    http_config config;
    struct MHD_Response *no_content; /* shared 204 */
    struct MHD_Response *too_large;  /* shared 413 with Connection: close */
    char too_large_body[128];
    uint16_t port;
    atomic_bool serving; /* MHD messages before this are start-up errors */
    atomic_uint open_connections; /* for the accept policy (on_accept) */
};

typedef struct http_conn {
    http_server *server;
    char *body;
    size_t body_len, body_cap;
    size_t declared; /* Content-Length, or 0 when unknown (chunked) */
    size_t dropped;  /* bytes received past the limit */
    bool too_large;
    uint64_t started_ns; /* when the headers were read (access log only) */
    api_response resp;
} http_conn;

/* ---- connections ---- */

static http_conn *conn_new(http_server *server)
{
    http_conn *conn = hf_xcalloc(1, sizeof *conn);
    conn->server = server;
    api_response_init(&conn->resp, server->api);
    return conn;
}

static void conn_free(http_conn *conn)
{
    if (!conn)
        return;
    api_response_free(&conn->resp);
    free(conn->body);
    free(conn);
}

static void on_connection(void *cls, struct MHD_Connection *connection, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    http_server *server = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = conn_new(server);
        atomic_fetch_add(&server->open_connections, 1);
        api_count_connection(server->api, API_CONNECTION_OPENED);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_free(*socket_context);
        *socket_context = NULL;
        atomic_fetch_sub(&server->open_connections, 1);
        api_count_connection(server->api, API_CONNECTION_CLOSED);
    }
}

/*
 * The connection limit. At its own limit MHD stops accepting, which leaves
 * further clients connected in the listen backlog with no answer until a
 * slot frees (a hang, not a refusal). So MHD's limit is set out of reach
 * (start_daemon) and this policy enforces ours: past max_connections a new
 * connection is accepted and closed at once, and the client sees it closed.
 * Threads accepting at the same moment may each let one through: the count
 * can pass the limit by at most threads - 1, briefly.
 */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    http_server *server = cls;
    if (atomic_load(&server->open_connections) < server->config.max_connections)
        return MHD_YES;
    api_count_connection(server->api, API_CONNECTION_REFUSED);
    return MHD_NO;
}

/* The answer went out (or the connection died): give back big buffers. */
static void on_completed(void *cls, struct MHD_Connection *connection, void **req_cls,
                         enum MHD_RequestTerminationCode code)
{
    http_conn *conn = *req_cls;
    *req_cls = NULL;
    if (!conn)
        return;
    if (conn->body_cap > BODY_KEEP) {
        free(conn->body);
        conn->body = NULL;
        conn->body_cap = 0;
    }
    conn->body_len = 0;
    api_response_trim(&conn->resp);
}

/* ---- the body ---- */

/*
 * The buffer doubles as bytes arrive, up to the declared length (so a body
 * with Content-Length ends in a buffer of exactly its size) or the limit.
 * Memory follows what was received, not what a client claims it will send.
 */
static void body_append(http_conn *conn, const char *data, size_t size)
{
    size_t need = conn->body_len + size;
    if (need > conn->body_cap) {
        size_t ceiling = conn->server->config.max_body_bytes;
        if (conn->declared && conn->declared < ceiling)
            ceiling = conn->declared;
        size_t cap = conn->body_cap ? conn->body_cap : BODY_FIRST;
        while (cap < need)
            cap *= 2;
        if (cap > ceiling)
            cap = ceiling > need ? ceiling : need;
        conn->body = hf_xrealloc(conn->body, cap);
        conn->body_cap = cap;
    }
    memcpy(conn->body + conn->body_len, data, size);
    conn->body_len = need;
}

/* Content-Length, when the body is not chunked. */
static bool declared_length(struct MHD_Connection *connection, uint64_t *length)
{
    const char *te = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (te || !cl || *cl < '0' || *cl > '9')
        return false;
    errno = 0;
    char *end;
    unsigned long long value = strtoull(cl, &end, 10);
    if (errno == ERANGE)
        value = ULLONG_MAX; /* MHD refuses it anyway; treat as too large */
    *length = value;
    return true;
}

/*
 * "Expect: 100-continue" on a request without a body (no Transfer-Encoding,
 * no or a zero Content-Length): libmicrohttpd 0.9.75 sends 100 Continue,
 * then refuses the final answer (MHD_queue_response fails) and closes the
 * connection without one. Such a request is answered on the first call
 * instead (MHD then closes the connection after the answer, as it does
 * for any early answer to an Expect request).
 */
static bool expects_continue_without_body(struct MHD_Connection *connection)
{
    uint64_t length;
    if (!MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT) ||
        MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                    MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return false;
    if (!MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH))
        return true;
    return declared_length(connection, &length) && length == 0;
}

/* ---- answers ---- */

static enum MHD_Result answer_too_large(http_server *server, struct MHD_Connection *connection)
{
    api_count_http_answer(server->api, MHD_HTTP_CONTENT_TOO_LARGE);
    return MHD_queue_response(connection, MHD_HTTP_CONTENT_TOO_LARGE, server->too_large);
}

static enum MHD_Result answer(http_server *server, struct MHD_Connection *connection,
                              const api_response *resp)
{
    if (resp->status == MHD_HTTP_NO_CONTENT)
        return MHD_queue_response(connection, MHD_HTTP_NO_CONTENT, server->no_content);
    struct MHD_Response *response =
        MHD_create_response_from_buffer(resp->body.len, resp->body.ptr, MHD_RESPMEM_PERSISTENT);
    if (!response)
        return MHD_NO;
    enum MHD_Result ok = MHD_YES;
    if (resp->content_type)
        ok = MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
    if (ok == MHD_YES && resp->www_authenticate)
        ok = MHD_add_response_header(response, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                     resp->www_authenticate);
    if (ok == MHD_YES)
        ok = MHD_queue_response(connection, (unsigned)resp->status, response);
    MHD_destroy_response(response);
    return ok;
}

/* ---- the access log ---- */

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* "host:port" or "[v6]:port" of the client; "-" if unknown. */
static void client_address(struct MHD_Connection *connection, char *out, size_t len)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char host[64], port[16];
    const struct sockaddr *addr = info ? info->client_addr : NULL;
    socklen_t addrlen = addr && addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                            : sizeof(struct sockaddr_in);
    if (!addr || getnameinfo(addr, addrlen, host, sizeof host, port, sizeof port,
                             NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, len, "-");
        return;
    }
    bool v6 = addr->sa_family == AF_INET6;
    snprintf(out, len, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

/* The path for a log line: at most 256 bytes, printable ASCII but for '"'
 * and '\\', everything else as \xHH (a decoded path may hold newlines). */
static void loggable_path(const char *url, char *out, size_t len)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)url; *p && n + 5 < len; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\')
            out[n++] = (char)*p;
        else
            n += (size_t)snprintf(out + n, len - n, "\\x%02x", *p);
        if (n >= 256 && p[1]) {
            n += (size_t)snprintf(out + n, len - n, "...");
            break;
        }
    }
    out[n] = '\0';
}

static void log_access(const http_conn *conn, struct MHD_Connection *connection,
                       const char *method, const char *url, const char *version, int status,
                       size_t bytes)
{
    char client[96], path[300], meth[24];
    client_address(connection, client, sizeof client);
    loggable_path(url, path, sizeof path);
    loggable_path(method, meth, sizeof meth);
    uint64_t ns = monotonic_ns() - conn->started_ns;
    log_line("access", "%s \"%s %s %s\" %d %zu %" PRIu64 ".%06" PRIu64, client, meth, path,
             version, status, bytes, ns / 1000000000u, ns % 1000000000u / 1000u);
}

/* ---- the access handler ---- */

static enum MHD_Result request_started(http_server *server, struct MHD_Connection *connection,
                                       void **req_cls)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    http_conn *conn = info ? info->socket_context : NULL;
    if (!conn)
        return MHD_NO;
    conn->body_len = 0;
    conn->declared = 0;
    conn->dropped = 0;
    conn->too_large = false;
    if (server->config.access_log)
        conn->started_ns = monotonic_ns();
    *req_cls = conn;
    uint64_t length;
    if (!declared_length(connection, &length))
        return MHD_YES;
    if (length > server->config.max_body_bytes) {
        conn->too_large = true; /* answered now: MHD drops the body */
        return answer_too_large(server, connection);
    }
    conn->declared = (size_t)length;
    return MHD_YES;
}

/* Body bytes read and dropped past the limit before the connection is cut. */
#define DROP_LIMIT (64u * 1024 * 1024)

static enum MHD_Result take_upload(http_conn *conn, const char *data, size_t size)
{
    size_t max = conn->server->config.max_body_bytes;
    if (!conn->too_large && size <= max - conn->body_len) {
        body_append(conn, data, size);
        return MHD_YES;
    }
    if (!conn->too_large) {
        conn->too_large = true;
        conn->dropped = conn->body_len;
        conn->body_len = 0;
    }
    conn->dropped += size;
    if (conn->dropped - max > DROP_LIMIT) {
        /* An endless upload: stop reading it; the connection is cut. Below
         * this, the rest of a chunked body is read and dropped so that the
         * client gets its 413 (MHD cannot answer in the middle of a body). */
        log_msg(LOG_DEBUG, "dropping a connection that sent over %zu body bytes",
                max + (size_t)DROP_LIMIT);
        return MHD_NO;
    }
    return MHD_YES;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *connection, const char *url,
                                 const char *method, const char *version, const char *upload_data,
                                 size_t *upload_data_size, void **req_cls)
{
    http_server *server = cls;
    http_conn *conn = *req_cls;
    if (!conn) {
        enum MHD_Result ok = request_started(server, connection, req_cls);
        conn = *req_cls;
        if (server->config.access_log && conn && conn->too_large)
            log_access(conn, connection, method, url, version, MHD_HTTP_CONTENT_TOO_LARGE,
                       strlen(server->too_large_body));
        if (ok != MHD_YES || !conn || conn->too_large ||
            !expects_continue_without_body(connection))
            return ok;
        /* answer now (expects_continue_without_body) */
    }
    if (*upload_data_size) {
        enum MHD_Result ok = take_upload(conn, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return ok;
    }
    if (conn->too_large) {
        enum MHD_Result ok = answer_too_large(server, connection);
        if (server->config.access_log)
            log_access(conn, connection, method, url, version, MHD_HTTP_CONTENT_TOO_LARGE,
                       strlen(server->too_large_body));
        return ok;
    }
    const char *authorization = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
                                                            MHD_HTTP_HEADER_AUTHORIZATION);
    api_handle(server->api, method, hf_slice_from_cstr(url), authorization, conn->body,
               conn->body_len, &conn->resp);
    enum MHD_Result ok = answer(server, connection, &conn->resp);
    if (server->config.access_log)
        log_access(conn, connection, method, url, version, conn->resp.status,
                   conn->resp.status == MHD_HTTP_NO_CONTENT ? 0 : conn->resp.body.len);
    return ok;
}

/* MHD's own messages: errors while starting, debug noise once serving
 * (they are mostly about clients that misbehave). */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    http_server *server = cls;
    if (strncmp(fmt, "Server reached connection limit", 31) == 0) {
        api_count_connection(server->api, API_CONNECTION_REFUSED);
        log_msg(LOG_DEBUG, "http: refused a connection: --max-connections %u are open",
                server->config.max_connections);
        return;
    }
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    line[strcspn(line, "\n")] = '\0';
    log_msg(atomic_load(&server->serving) ? LOG_DEBUG : LOG_ERROR, "http: %s", line);
}

/* ---- start and stop ---- */

static int build_shared_responses(http_server *server)
{
    server->no_content = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    int n = snprintf(server->too_large_body, sizeof server->too_large_body,
                     "{\"detail\":\"Request body too large: the limit is %zu bytes\"}",
                     server->config.max_body_bytes);
    server->too_large = MHD_create_response_from_buffer((size_t)n, server->too_large_body,
                                                        MHD_RESPMEM_PERSISTENT);
    if (!server->no_content || !server->too_large)
        return -1;
    if (MHD_add_response_header(server->too_large, MHD_HTTP_HEADER_CONTENT_TYPE,
                                "application/json") != MHD_YES ||
        MHD_add_response_header(server->too_large, MHD_HTTP_HEADER_CONNECTION, "close") != MHD_YES)
        return -1;
    return 0;
}

static void free_server(http_server *server)
{
    if (server->no_content)
        MHD_destroy_response(server->no_content);
    if (server->too_large)
        MHD_destroy_response(server->too_large);
    free(server);
}

static int resolve(const http_config *config, struct sockaddr_storage *addr, char *err,
                   size_t errlen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *found = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)config->port);
    int rc = getaddrinfo(config->host, port, &hints, &found);
    if (rc != 0 || !found) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", config->host, gai_strerror(rc));
        if (found)
            freeaddrinfo(found);
        return -1;
    }
    memcpy(addr, found->ai_addr, found->ai_addrlen);
    freeaddrinfo(found);
    return 0;
}

static struct MHD_Daemon *start_daemon(http_server *server, const struct sockaddr_storage *addr)
{
    const http_config *c = &server->config;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* MHD splits its limit between the threads of the pool: give each one
     * room for all of ours, so that only on_accept refuses. */
    uintptr_t mhd_limit = ((uintptr_t)c->max_connections + 1) * (c->threads > 1 ? c->threads : 1);
    struct MHD_OptionItem options[] = {
        {MHD_OPTION_SOCK_ADDR, 0, (void *)addr},
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)mhd_limit, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)c->idle_timeout_s, NULL},
        {MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)c->max_header_bytes, NULL},
        /* a pool of 1 is no pool: leave the option out */
        {c->threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END,
         (intptr_t)c->threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    /* The logger goes first, so that MHD's messages about the rest use it. */
    return MHD_start_daemon(flags, c->port, on_accept, server, on_access, server,
                            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, server,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, server,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, server,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

http_server *http_start(const http_config *config, api_t *api, char *err, size_t errlen)
{
    http_server *server = hf_xcalloc(1, sizeof *server);
    server->api = api;
    server->config = *config;
    atomic_init(&server->serving, false);
    atomic_init(&server->open_connections, 0);
    struct sockaddr_storage addr;
    if (resolve(config, &addr, err, errlen) != 0) {
        free_server(server);
        return NULL;
    }
    if (build_shared_responses(server) != 0) {
        snprintf(err, errlen, "cannot build the shared HTTP responses");
        free_server(server);
        return NULL;
    }
    server->daemon = start_daemon(server, &addr);
    if (!server->daemon) {
        snprintf(err, errlen, "cannot listen on %s port %u (in use, or not an address of this "
                 "host?)", config->host, (unsigned)config->port);
        free_server(server);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(server->daemon,
                                                           MHD_DAEMON_INFO_BIND_PORT);
    server->port = info && info->port ? info->port : config->port;
    atomic_store(&server->serving, true);
    return server;
}

uint16_t http_bound_port(const http_server *server)
{
    return server->port;
}

void http_stop(http_server *server)
{
    if (!server)
        return;
    MHD_stop_daemon(server->daemon);
    free_server(server);
}
