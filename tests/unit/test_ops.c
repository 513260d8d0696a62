/*
 * test_ops.c: the operations side of the api without HTTP: the token check
 * of --auth-token-file, the token file's tenants (parsing, lookup, what
 * each tenant sees, the operator, quotas, a reload), /health's 503 when the store refuses changes, an
 * engine's own figures in /metrics and /v1/stats (through a store whose
 * health and metrics ops are stand-ins, and through the embedded engine
 * with a real log in a temporary directory), and the request counters
 * under concurrent threads.
 *
 * When promtool is on PATH, the /metrics texts are also piped through
 * `promtool check metrics`.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/auth.h"
#include "api/tenants.h"
#include "check.h"
#include "store/mem.h"
#include "util/log.h"
#include "wal/wal.h"

static const char TOKEN[] = "s3cr3t-Token_42";

static auth_result check_header(const char *header)
{
    return auth_check(TOKEN, strlen(TOKEN), header);
}

/* Each header of a table through auth_check: its expected outcome. */
typedef struct auth_case {
    const char *header;
    auth_result want;
} auth_case;

static void check_headers(const auth_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CHECK_EQ(check_header(cases[i].header), cases[i].want);
}

TEST(bearer_token_is_accepted_only_when_it_is_exactly_the_token)
{
    static const auth_case cases[] = {
        {"Bearer s3cr3t-Token_42", AUTH_OK},
        {"bearer s3cr3t-Token_42", AUTH_OK},
        {"  BEARER   s3cr3t-Token_42  ", AUTH_OK},
        {"Bearer s3cr3t-Token_4", AUTH_WRONG},
        {"Bearer s3cr3t-Token_42x", AUTH_WRONG},
        {"Bearer S3CR3T-TOKEN_42", AUTH_WRONG},
        {"Bearer x", AUTH_WRONG},
    };
    check_headers(cases, sizeof cases / sizeof cases[0]);
}

TEST(basic_auth_is_accepted_with_the_token_as_password_and_any_user)
{
    static const auth_case cases[] = {
        /* ":s3cr3t-Token_42", as a client given http://:TOKEN@host sends it */
        {"Basic OnMzY3IzdC1Ub2tlbl80Mg==", AUTH_OK},
        {"Basic OnMzY3IzdC1Ub2tlbl80Mg", AUTH_OK}, /* unpadded */
        /* "vllm:s3cr3t-Token_42" */
        {"basic dmxsbTpzM2NyM3QtVG9rZW5fNDI=", AUTH_OK},
        /* "s3cr3t-Token_42:" : the token as user name is not the password */
        {"Basic czNjcjN0LVRva2VuXzQyOg==", AUTH_WRONG},
        /* ":wrong" */
        {"Basic Ondyb25n", AUTH_WRONG},
    };
    check_headers(cases, sizeof cases / sizeof cases[0]);
}

TEST(malformed_or_missing_credentials_are_refused)
{
    static const auth_case cases[] = {
        {NULL, AUTH_MISSING},
        {"", AUTH_MALFORMED},
        {"Bearer", AUTH_MALFORMED},
        {"Bearer ", AUTH_MALFORMED},
        {"s3cr3t-Token_42", AUTH_MALFORMED},
        {"Token s3cr3t-Token_42", AUTH_MALFORMED},
        {"Digest username=\"x\"", AUTH_MALFORMED},
        {"Basic !!!!", AUTH_MALFORMED},
        {"Basic czNjcjN0", AUTH_MALFORMED}, /* "s3cr3t": no colon */
        {"Basic A", AUTH_MALFORMED},
    };
    check_headers(cases, sizeof cases / sizeof cases[0]);
    char huge[AUTH_MAX_CREDENTIALS * 2 + 16];
    memcpy(huge, "Basic ", 6);
    memset(huge + 6, 'A', sizeof huge - 7);
    huge[sizeof huge - 1] = '\0';
    CHECK_EQ(check_header(huge), AUTH_MALFORMED);
}

TEST(secret_comparison_depends_on_every_byte_and_the_length)
{
    CHECK(auth_same_secret("abc", 3, "abc", 3));
    CHECK(!auth_same_secret("abd", 3, "abc", 3));
    CHECK(!auth_same_secret("ab", 2, "abc", 3));
    CHECK(!auth_same_secret("abcd", 4, "abc", 3));
    CHECK(!auth_same_secret("", 0, "abc", 3));
    CHECK(!auth_same_secret("a\0c", 3, "abc", 3));
}

/* ---- the api with stand-in store ops ---- */

static store_mode stand_in_mode;

static store_mode stand_in_health(store_t *s, char *reason, size_t len)
{
    if (stand_in_mode == STORE_READS_ONLY)
        snprintf(reason, len, "the log failed: No space left on device");
    else if (stand_in_mode == STORE_DOWN)
        snprintf(reason, len, "Redis at x:1 is unavailable: refused");
    return stand_in_mode;
}

/* Figures of every kind an engine may report, with labels to escape. */
static int stand_in_metrics(store_t *s, const store_emitter *e)
{
    store_emit_metric(e, "hf3fs_metad_engine_round_trips_total", STORE_METRIC_COUNTER,
                      "Round trips to the engine's server.", store_int(123456));
    store_emit_family(e, "hf3fs_metad_engine_connected", STORE_METRIC_GAUGE,
                      "1 per server the engine is connected to.");
    store_label node[] = {{"node", "a\"b\\c\nd"}, {"role", "primary"}};
    store_emit_sample(e, node, 2, store_int(1));
    store_emit_family(e, "hf3fs_metad_engine_call_duration_seconds", STORE_METRIC_HISTOGRAM,
                      "Time one call took.");
    static const uint64_t bounds_us[] = {50, 100, 5000};
    uint64_t counts[] = {0, 1, 1, 1}; /* 80 us, 3 ms, 5 s */
    store_histogram h = {.nbuckets = 4,
                         .bounds = bounds_us,
                         .counts = counts,
                         .sum = 80 + 3000 + 5000000,
                         .decimals = 6};
    store_label call[] = {{"call", "allocate"}};
    store_emit_histogram(e, call, 1, &h);
    store_emit_histogram(e, NULL, 0, &h);
    store_emit_metric(e, "hf3fs_metad_engine_age_seconds", STORE_METRIC_GAUGE,
                      "Seconds since the engine connected.", (store_number){30012, 3});
    store_emit_object(e, "engine");
    store_emit_number(e, "round_trips", store_int(123456));
    store_emit_number(e, "age_seconds", (store_number){30012, 3});
    store_emit_bool(e, "connected", true);
    store_emit_string(e, "address", "host:6379", 9);
    store_emit_object(e, "last_error");
    store_emit_null(e, "text");
    store_emit_end(e);
    store_emit_end(e);
    store_emit_null(e, "replica");
    return STORE_OK;
}

static core_config test_core_config(void)
{
    return core_config_default(1000000, 64, 7);
}

static api_config test_api_config(const char *token)
{
    return (api_config){
        .limits = {.max_ranks = 64,
                   .max_pages = 1000000,
                   .max_keys = 1000,
                   .max_key_bytes = 256,
                   .max_body_bytes = 1 << 20},
        .auth_token = token,
        .auth_token_len = token ? strlen(token) : 0,
    };
}

typedef struct fixture {
    store_t *store;
    struct store_ops ops; /* the in-memory engine's, with stand-ins */
    api_t *api;
    api_response resp;
} fixture;

static void fixture_open(fixture *f, const char *token, bool stand_ins)
{
    core_config core = test_core_config();
    f->store = store_mem_new(&core, &store_server_clock);
    if (stand_ins) {
        f->ops = *f->store->ops;
        f->ops.health = stand_in_health;
        f->ops.metrics = stand_in_metrics;
        f->store->ops = &f->ops;
    }
    api_config config = test_api_config(token);
    f->api = api_new(f->store, &config);
    api_response_init(&f->resp, f->api);
}

static void fixture_close(fixture *f)
{
    api_response_free(&f->resp);
    api_free(f->api);
    f->store->ops->destroy(f->store);
}

static const char *body_of(fixture *f)
{
    /* The answer buffer has room for a NUL only if we ask; copy instead. */
    static char text[1 << 16];
    size_t n = f->resp.body.len < sizeof text - 1 ? f->resp.body.len : sizeof text - 1;
    memcpy(text, f->resp.body.ptr, n);
    text[n] = '\0';
    return text;
}

static int request(fixture *f, const char *method, const char *path, const char *auth,
                   const char *body)
{
    api_handle(f->api, method, hf_slice_from_cstr(path), auth, body, body ? strlen(body) : 0,
               &f->resp);
    return f->resp.status;
}

TEST(health_tells_serving_reads_only_and_down_with_the_reason_and_the_serving_gauge)
{
    fixture f;
    fixture_open(&f, NULL, true);
    stand_in_mode = STORE_SERVING;
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 200);
    CHECK(strcmp(body_of(&f), "{\"status\":\"ok\"}") == 0);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_accepting_changes 1\n") != NULL);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_serving{mode=\"serving\"} 1\n") != NULL);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_serving{mode=\"reads_only\"} 0\n") != NULL);
    /* reads only: 200, so that a load balancer keeps routing the reads */
    stand_in_mode = STORE_READS_ONLY;
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 200);
    const char *body = body_of(&f);
    CHECK(strstr(body, "\"status\":\"reads_only\"") != NULL);
    CHECK(strstr(body, "\"detail\":\"The server serves reads but cannot accept changes: the "
                       "log failed: No space left on device\"") != NULL);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_accepting_changes 0\n") != NULL);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_serving{mode=\"serving\"} 0\n") != NULL);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_serving{mode=\"reads_only\"} 1\n") != NULL);
    CHECK_EQ(request(&f, "GET", "/v1/stats", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\"accepting_changes\":false,\"unavailable_reason\":") != NULL);
    CHECK(strstr(body_of(&f), "\"mode\":\"reads_only\"") != NULL);
    /* down: 503 */
    stand_in_mode = STORE_DOWN;
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 503);
    body = body_of(&f);
    CHECK(strstr(body, "\"status\":\"unavailable\"") != NULL);
    CHECK(strstr(body, "\"detail\":\"The server cannot serve requests: Redis at x:1 is "
                       "unavailable: refused\"") != NULL);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_serving{mode=\"down\"} 1\n") != NULL);
    stand_in_mode = STORE_SERVING;
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 200);
    fixture_close(&f);
}

/* 0 if promtool accepts the text, 1 if it complains, -1 if it is not installed. */
static int promtool_check(const char *text, size_t len)
{
    if (system("command -v promtool >/dev/null 2>&1") != 0)
        return -1;
    FILE *p = popen("promtool check metrics >/dev/null", "w");
    if (!p)
        return -1;
    fwrite(text, 1, len, p);
    int rc = pclose(p);
    return rc == 0 ? 0 : 1;
}

TEST(metrics_and_stats_show_every_kind_of_figure_an_engine_reports)
{
    fixture f;
    fixture_open(&f, NULL, true);
    stand_in_mode = STORE_SERVING;
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    const char *m = body_of(&f);
    CHECK(strstr(m, "\n# TYPE hf3fs_metad_engine_round_trips_total counter\n"
                    "hf3fs_metad_engine_round_trips_total 123456\n") != NULL);
    CHECK(strstr(m, "\nhf3fs_metad_engine_connected{node=\"a\\\"b\\\\c\\nd\","
                    "role=\"primary\"} 1\n") != NULL);
    CHECK(strstr(m, "\n# TYPE hf3fs_metad_engine_call_duration_seconds histogram\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_bucket{call=\"allocate\","
                    "le=\"0.000050\"} 0\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_bucket{le=\"0.000100\"} 1\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_bucket{le=\"0.005000\"} 2\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_bucket{le=\"+Inf\"} 3\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_sum{call=\"allocate\"} "
                    "5.003080\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_sum 5.003080\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_call_duration_seconds_count 3\n"));
    CHECK(strstr(m, "\nhf3fs_metad_engine_age_seconds 30.012\n"));
    int rc = promtool_check(f.resp.body.ptr, f.resp.body.len);
    if (rc < 0)
        printf("  (promtool not installed: the text format was not checked by it)\n");
    CHECK_EQ(rc <= 0, 1);
    CHECK_EQ(request(&f, "GET", "/v1/stats", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\"refused\":0,\"shed\":0,\"timed_out\":0},"
                              "\"engine\":{\"round_trips\":123456,"
                              "\"age_seconds\":30.012,\"connected\":true,"
                              "\"address\":\"host:6379\",\"last_error\":{\"text\":null}},"
                              "\"replica\":null},\"pools\":[") != NULL);
    fixture_close(&f);
}

TEST(the_embedded_engine_with_a_log_reports_its_log_and_snapshot_figures)
{
    char dir[] = "/tmp/hf3fs-test-ops-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char data[sizeof dir + 8];
    snprintf(data, sizeof data, "%s/data", dir);
    core_config core = test_core_config();
    wal_options log = {.dir = data, .fsync = WAL_FSYNC_ALWAYS, .quiet = true};
    fixture f;
    char err[512];
    log_set_level(LOG_WARN); /* no start-up and snapshot lines */
    CHECK_EQ(store_mem_open(&core, &store_server_clock, &log, &f.store, err, sizeof err), STORE_OK);
    api_config config = test_api_config(NULL);
    f.api = api_new(f.store, &config);
    api_response_init(&f.resp, f.api);
    CHECK_EQ(
        request(&f, "POST", "/rank/0/initialize", NULL, "{\"role\":\"worker\",\"num_pages\":8}"),
        200);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    const char *m = body_of(&f);
    CHECK(strstr(m, "\nhf3fs_metad_persistence_enabled 1\n") != NULL);
    const char *bytes = strstr(m, "\nhf3fs_metad_log_bytes_total ");
    CHECK(bytes != NULL && atol(bytes + strlen("\nhf3fs_metad_log_bytes_total ")) > 0);
    const char *syncs = strstr(m, "\nhf3fs_metad_log_syncs_total ");
    CHECK(syncs != NULL);
    long nsyncs = syncs ? atol(syncs + strlen("\nhf3fs_metad_log_syncs_total ")) : -1;
    CHECK(nsyncs >= 1); /* fsync always: the initialization was synced */
    char want[128];
    snprintf(want, sizeof want, "\nhf3fs_metad_log_sync_duration_seconds_bucket{le=\"+Inf\"} %ld\n",
             nsyncs);
    CHECK(strstr(m, want) != NULL);
    CHECK(strstr(m, "\nhf3fs_metad_log_sync_duration_seconds_bucket{le=\"0.000050\"} ") != NULL);
    CHECK(strstr(m, "\nhf3fs_metad_log_failures_total 0\n") != NULL);
    CHECK(strstr(m, "\n# TYPE hf3fs_metad_snapshot_bytes gauge\n") != NULL);
    CHECK_EQ(promtool_check(f.resp.body.ptr, f.resp.body.len) <= 0, 1);
    CHECK_EQ(request(&f, "GET", "/v1/stats", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\"persistence\":{\"log_bytes\":") != NULL);
    CHECK(strstr(body_of(&f), "\"refusing_changes\":false}},\"pools\":[") != NULL);
    fixture_close(&f);
    char rm[128];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    CHECK_EQ(system(rm), 0);
    log_set_level(LOG_INFO);
}

TEST(metrics_without_persistence_say_so_and_pass_promtool)
{
    fixture f;
    fixture_open(&f, NULL, false);
    CHECK_EQ(
        request(&f, "POST", "/rank/0/initialize", NULL, "{\"role\":\"worker\",\"num_pages\":8}"),
        200);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    const char *m = body_of(&f);
    CHECK(strstr(m, "\nhf3fs_metad_persistence_enabled 0\n") != NULL);
    CHECK(strstr(m, "hf3fs_metad_log_bytes_total") == NULL);
    CHECK(strstr(m, "\nhf3fs_metad_pool_pages{tenant=\"default\",namespace=\"kv\",rank=\"0\",state="
                    "\"free\"} 8\n"));
    CHECK_EQ(promtool_check(f.resp.body.ptr, f.resp.body.len) <= 0, 1);
    CHECK_EQ(request(&f, "GET", "/v1/stats", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\"persistence\":null") != NULL);
    fixture_close(&f);
}

TEST(with_a_token_every_route_but_health_answers_401_with_a_challenge)
{
    fixture f;
    fixture_open(&f, TOKEN, false);
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 200);
    CHECK(f.resp.www_authenticate == NULL);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 401);
    CHECK(f.resp.www_authenticate && strstr(f.resp.www_authenticate, "Bearer"));
    CHECK(strstr(body_of(&f), "{\"detail\":\"Not authenticated") == body_of(&f));
    CHECK_EQ(request(&f, "GET", "/no/such/route", "Bearer nope", NULL), 401);
    CHECK(strcmp(body_of(&f), "{\"detail\":\"Invalid authentication credentials\"}") == 0);
    CHECK_EQ(request(&f, "POST", "/rank/0/initialize", "Bearer nope",
                     "{\"role\":\"worker\",\"num_pages\":8}"),
             401);
    CHECK_EQ(request(&f, "GET", "/v1/stats", NULL, NULL), 401);
    CHECK_EQ(request(&f, "GET", "/v1/stats", "Bearer s3cr3t-Token_42", NULL), 200);
    CHECK(strstr(body_of(&f), "\"pools\":[]") != NULL); /* the refused init changed nothing */
    CHECK(f.resp.www_authenticate == NULL);
    CHECK_EQ(request(&f, "GET", "/no/such/route", "Bearer s3cr3t-Token_42", NULL), 404);
    CHECK_EQ(request(&f, "GET", "/metrics", "Basic OnMzY3IzdC1Ub2tlbl80Mg==", NULL), 200);
    CHECK(strstr(body_of(&f), "hf3fs_metad_requests_total{route=\"/metrics\",status=\"401\"} 1\n"));
    fixture_close(&f);
}

/* ---- counters under threads ---- */

#define THREADS 8
#define REQUESTS_PER_THREAD 2000

static void *hammer(void *arg)
{
    fixture *shared = arg;
    api_response resp;
    api_response_init(&resp, shared->api);
    for (int i = 0; i < REQUESTS_PER_THREAD; i++)
        api_handle(shared->api, "GET", HF_SLICE_LIT("/health"), NULL, NULL, 0, &resp);
    api_response_free(&resp);
    return NULL;
}

/* ---- tenants ---- */

static int parse(const char *text, tenant_table **t, char *err, size_t errlen)
{
    return tenant_table_parse(text, strlen(text), 7, t, err, errlen);
}

static const char *tenant_of(const tenant_table *t, const char *token)
{
    const tenant *x = tenant_table_find(t, token, strlen(token));
    return x ? x->name.ptr : NULL;
}

TEST(token_file_lines_name_tenants_and_a_lone_token_is_the_default_tenant)
{
    tenant_table *t;
    char err[256];
    CHECK_EQ(parse("# tokens\n\nt-default\r\n  t-a1 acme pages=100\nt-a2\tacme\n"
                   "t-b beta-2_x\nt-op *\nt-d2 default\n",
                   &t, err, sizeof err),
             0);
    CHECK(strcmp(tenant_of(t, "t-default"), "default") == 0);
    CHECK(strcmp(tenant_of(t, "t-d2"), "default") == 0);
    CHECK(strcmp(tenant_of(t, "t-a1"), "acme") == 0);
    CHECK(strcmp(tenant_of(t, "t-a2"), "acme") == 0);
    CHECK(strcmp(tenant_of(t, "t-b"), "beta-2_x") == 0);
    CHECK(tenant_table_find(t, "t-op", 4)->operator_);
    CHECK(tenant_of(t, "t-a") == NULL && tenant_of(t, "t-a12") == NULL);
    CHECK(tenant_of(t, "# tokens") == NULL && tenant_of(t, "acme") == NULL);
    CHECK_EQ(tenant_table_find(t, "t-a2", 4)->quota_pages, 100);
    CHECK_EQ(tenant_table_find(t, "t-b", 3)->quota_pages, TENANT_NO_QUOTA);
    CHECK_EQ(tenant_table_find(t, "t-default", 9)->prefix.len, 0);
    CHECK(hf_slice_eq(tenant_table_find(t, "t-b", 3)->prefix, HF_SLICE_LIT("\x01"
                                                                           "beta-2_x\x01")));
    CHECK_EQ(tenant_table_tokens(t), 6);
    CHECK_EQ(tenant_table_tenants(t), 3);
    tenant_table_free(t);
}

TEST(a_malformed_token_file_is_refused_whole_with_the_line_and_why)
{
    static const struct {
        const char *text, *words;
    } bad[] = {
        {"", "no token"},
        {"\n# only a comment\n", "no token"},
        {"ok\nt Acme\n", "line 2: tenant 'Acme'"},
        {"t a.b", "tenant 'a.b'"},
        {"t a pages=x", "pages=N"},
        {"t a pages=-1", "pages=N"},
        {"t a pages=5 more", "4 words"},
        {"t * pages=5", "operator"},
        {"t1 a pages=5\nt2 a pages=6", "line 2: tenant 'a' was given another quota"},
        {"t a\nt b", "line 2: the token is listed twice"},
        {"t\x7f a", "printable ASCII"},
        {"t 0123456789012345678901234567890123456789012345678901234567890123456789", "tenant"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tenant_table *t = (tenant_table *)1;
        char err[256] = "";
        CHECK_EQ(parse(bad[i].text, &t, err, sizeof err), -1);
        CHECK(t == NULL);
        if (!strstr(err, bad[i].words))
            fprintf(stderr, "  %s: %s\n", bad[i].text, err);
        CHECK(strstr(err, bad[i].words) != NULL);
    }
}

TEST(a_store_namespace_splits_into_its_tenant_and_the_tenants_namespace)
{
    hf_slice name, ns;
    tenant_split(HF_SLICE_LIT("kv"), &name, &ns);
    CHECK(hf_slice_eq(name, HF_SLICE_LIT("default")) && hf_slice_eq(ns, HF_SLICE_LIT("kv")));
    tenant_split(HF_SLICE_LIT("\x01"
                              "acme\x01"
                              "kv"),
                 &name, &ns);
    CHECK(hf_slice_eq(name, HF_SLICE_LIT("acme")) && hf_slice_eq(ns, HF_SLICE_LIT("kv")));
    tenant_split(HF_SLICE_LIT("\x01"
                              "acme\x01\x01"
                              "x"),
                 &name, &ns);
    CHECK(hf_slice_eq(name, HF_SLICE_LIT("acme")) && hf_slice_eq(ns, HF_SLICE_LIT("\x01x")));
}

#define TENANTS "tok-a acme pages=20\ntok-b beta\ntok-op *\n"

TEST(two_tenants_see_only_their_own_keys_pools_and_metrics)
{
    fixture f;
    fixture_open(&f, TENANTS, false);
    const char *a = "Bearer tok-a", *b = "Bearer tok-b", *op = "Bearer tok-op";
    const char *init = "{\"role\":\"worker\",\"num_pages\":8}";
    CHECK_EQ(request(&f, "POST", "/rank/0/initialize", a, init), 200);
    CHECK_EQ(request(&f, "POST", "/keys/batch_allocate", a, "{\"rank\":0,\"keys\":[\"k\"]}"), 200);
    CHECK_EQ(
        request(&f, "POST", "/keys/confirm_write", a, "{\"rank\":0,\"confirmations\":[[\"k\",0]]}"),
        204);
    CHECK_EQ(request(&f, "POST", "/keys/batch_exists", a, "{\"keys\":[\"k\"]}"), 200);
    CHECK(strcmp(body_of(&f), "{\"exists\":[true]}") == 0);
    CHECK_EQ(request(&f, "POST", "/keys/batch_exists", b, "{\"keys\":[\"k\"]}"), 200);
    CHECK(strcmp(body_of(&f), "{\"exists\":[false]}") == 0);
    CHECK_EQ(request(&f, "POST", "/0/exists", b, "{\"keys\":[\"k\"]}"), 404);
    CHECK_EQ(request(&f, "GET", "/v1/stats", b, NULL), 200);
    CHECK(strstr(body_of(&f), "\"pools\":[]") != NULL);
    CHECK_EQ(request(&f, "GET", "/v1/stats", a, NULL), 200);
    CHECK(strstr(body_of(&f), "{\"tenant\":\"acme\",\"namespace\":\"kv\",\"rank\":0,") != NULL);
    CHECK_EQ(request(&f, "GET", "/metrics", op, NULL), 200);
    CHECK(strstr(body_of(&f), "hf3fs_metad_pool_keys{tenant=\"acme\",namespace=\"kv\","
                              "rank=\"0\"} 1\n") != NULL);
    CHECK(strcmp(f.resp.tenant, "*") == 0);
    CHECK_EQ(request(&f, "POST", "/keys/batch_exists", op, "{\"keys\":[\"k\"]}"), 403);
    CHECK_EQ(request(&f, "POST", "/clear", op, NULL), 403);
    /* b's /clear leaves a's key */
    CHECK_EQ(request(&f, "POST", "/clear", b, NULL), 204);
    CHECK_EQ(request(&f, "POST", "/keys/batch_exists", a, "{\"keys\":[\"k\"]}"), 200);
    CHECK(strcmp(body_of(&f), "{\"exists\":[true]}") == 0);
    CHECK(strcmp(f.resp.tenant, "acme") == 0);
    /* no namespace may begin with the tenants' byte */
    CHECK_EQ(request(&f, "POST", "/0/initialize", b,
                     "{\"num_pages\":4,\"namespace\":\"\\u0001acme\\u0001kv\"}"),
             400);
    fixture_close(&f);
}

TEST(a_quota_refuses_the_initialize_that_would_pass_it_and_changes_nothing)
{
    fixture f;
    fixture_open(&f, TENANTS, false);
    const char *a = "Bearer tok-a";
    CHECK_EQ(request(&f, "POST", "/rank/0/initialize", a, "{\"role\":\"worker\",\"num_pages\":12}"),
             200);
    CHECK_EQ(request(&f, "POST", "/rank/1/initialize", a, "{\"role\":\"worker\",\"num_pages\":12}"),
             400);
    CHECK(strstr(body_of(&f), "\"detail\":\"Invalid initialization parameters\"") != NULL);
    CHECK(strstr(body_of(&f), "quota of 20 pages") != NULL);
    CHECK_EQ(request(&f, "POST", "/1/initialize", a, "{\"num_pages\":9,\"namespace\":\"s\"}"), 400);
    CHECK(strstr(body_of(&f), "quota of 20 pages") != NULL);
    CHECK_EQ(request(&f, "POST", "/rank/0/initialize", a, "{\"role\":\"worker\",\"num_pages\":12}"),
             200); /* exists: no more pages */
    CHECK_EQ(request(&f, "POST", "/1/initialize", a, "{\"num_pages\":8,\"namespace\":\"s\"}"), 204);
    CHECK_EQ(request(&f, "GET", "/v1/stats", a, NULL), 200);
    CHECK(strstr(body_of(&f), "\"rank\":1,\"num_pages\":8,") != NULL);
    CHECK(strstr(body_of(&f), "\"num_pages\":9") == NULL);
    fixture_close(&f);
}

TEST(a_reload_puts_new_tokens_in_force_and_a_bad_file_keeps_the_old)
{
    fixture f;
    fixture_open(&f, TENANTS, false);
    char err[256];
    CHECK_EQ(request(&f, "GET", "/v1/stats", "Bearer tok-b", NULL), 200);
    CHECK_EQ(api_reload_tokens(f.api, "tok-a acme\ntok-c beta\n", 22, err, sizeof err), 0);
    CHECK_EQ(request(&f, "GET", "/v1/stats", "Bearer tok-b", NULL), 401);
    CHECK_EQ(request(&f, "GET", "/v1/stats", "Bearer tok-c", NULL), 200);
    CHECK_EQ(api_reload_tokens(f.api, "tok-d Bad!\n", 11, err, sizeof err), -1);
    CHECK(strstr(err, "line 1") != NULL);
    CHECK_EQ(request(&f, "GET", "/v1/stats", "Bearer tok-c", NULL), 200);
    CHECK_EQ(request(&f, "GET", "/v1/stats", "Bearer tok-d", NULL), 401);
    fixture_close(&f);
}

TEST(request_counters_lose_nothing_under_concurrent_threads)
{
    fixture f;
    fixture_open(&f, NULL, false);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_create(&threads[i], NULL, hammer, &f), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    char want[160];
    snprintf(want, sizeof want, "hf3fs_metad_requests_total{route=\"/health\",status=\"200\"} %d\n",
             THREADS * REQUESTS_PER_THREAD);
    CHECK(strstr(body_of(&f), want) != NULL);
    snprintf(want, sizeof want,
             "hf3fs_metad_request_duration_seconds_count{route=\"/health\","
             "status=\"200\"} %d\n",
             THREADS * REQUESTS_PER_THREAD);
    CHECK(strstr(body_of(&f), want) != NULL);
    fixture_close(&f);
}

int main(void)
{
    RUN(bearer_token_is_accepted_only_when_it_is_exactly_the_token);
    RUN(basic_auth_is_accepted_with_the_token_as_password_and_any_user);
    RUN(malformed_or_missing_credentials_are_refused);
    RUN(secret_comparison_depends_on_every_byte_and_the_length);
    RUN(health_tells_serving_reads_only_and_down_with_the_reason_and_the_serving_gauge);
    RUN(metrics_and_stats_show_every_kind_of_figure_an_engine_reports);
    RUN(the_embedded_engine_with_a_log_reports_its_log_and_snapshot_figures);
    RUN(metrics_without_persistence_say_so_and_pass_promtool);
    RUN(with_a_token_every_route_but_health_answers_401_with_a_challenge);
    RUN(token_file_lines_name_tenants_and_a_lone_token_is_the_default_tenant);
    RUN(a_malformed_token_file_is_refused_whole_with_the_line_and_why);
    RUN(a_store_namespace_splits_into_its_tenant_and_the_tenants_namespace);
    RUN(two_tenants_see_only_their_own_keys_pools_and_metrics);
    RUN(a_quota_refuses_the_initialize_that_would_pass_it_and_changes_nothing);
    RUN(a_reload_puts_new_tokens_in_force_and_a_bad_file_keeps_the_old);
    RUN(request_counters_lose_nothing_under_concurrent_threads);
    return TEST_SUMMARY();
}
