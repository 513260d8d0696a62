/*
 * test_ops.c: the operations side of the api without HTTP: the token check
 * of --auth-token-file, /health's 503 when the store refuses changes, an
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
#include "check.h"
#include "store/mem.h"
#include "util/log.h"
#include "wal/wal.h"

static const char TOKEN[] = "s3cr3t-Token_42";

static auth_result check_header(const char *header)
{
    return auth_check(TOKEN, strlen(TOKEN), header);
}

TEST(bearer_token_is_accepted_only_when_it_is_exactly_the_token)
{
    CHECK_EQ(check_header("Bearer s3cr3t-Token_42"), AUTH_OK);
    CHECK_EQ(check_header("bearer s3cr3t-Token_42"), AUTH_OK);
    CHECK_EQ(check_header("  BEARER   s3cr3t-Token_42  "), AUTH_OK);
    CHECK_EQ(check_header("Bearer s3cr3t-Token_4"), AUTH_WRONG);
    CHECK_EQ(check_header("Bearer s3cr3t-Token_42x"), AUTH_WRONG);
    CHECK_EQ(check_header("Bearer S3CR3T-TOKEN_42"), AUTH_WRONG);
    CHECK_EQ(check_header("Bearer x"), AUTH_WRONG);
}

TEST(basic_auth_is_accepted_with_the_token_as_password_and_any_user)
{
    /* ":s3cr3t-Token_42", as a client given http://:TOKEN@host sends it */
    CHECK_EQ(check_header("Basic OnMzY3IzdC1Ub2tlbl80Mg=="), AUTH_OK);
    CHECK_EQ(check_header("Basic OnMzY3IzdC1Ub2tlbl80Mg"), AUTH_OK); /* unpadded */
    /* "vllm:s3cr3t-Token_42" */
    CHECK_EQ(check_header("basic dmxsbTpzM2NyM3QtVG9rZW5fNDI="), AUTH_OK);
    /* "s3cr3t-Token_42:" : the token as user name is not the password */
    CHECK_EQ(check_header("Basic czNjcjN0LVRva2VuXzQyOg=="), AUTH_WRONG);
    /* ":wrong" */
    CHECK_EQ(check_header("Basic Ondyb25n"), AUTH_WRONG);
}

TEST(malformed_or_missing_credentials_are_refused)
{
    CHECK_EQ(check_header(NULL), AUTH_MISSING);
    CHECK_EQ(check_header(""), AUTH_MALFORMED);
    CHECK_EQ(check_header("Bearer"), AUTH_MALFORMED);
    CHECK_EQ(check_header("Bearer "), AUTH_MALFORMED);
    CHECK_EQ(check_header("s3cr3t-Token_42"), AUTH_MALFORMED);
    CHECK_EQ(check_header("Token s3cr3t-Token_42"), AUTH_MALFORMED);
    CHECK_EQ(check_header("Digest username=\"x\""), AUTH_MALFORMED);
    CHECK_EQ(check_header("Basic !!!!"), AUTH_MALFORMED);
    CHECK_EQ(check_header("Basic czNjcjN0"), AUTH_MALFORMED); /* "s3cr3t": no colon */
    CHECK_EQ(check_header("Basic A"), AUTH_MALFORMED);
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

static bool refusing;

static int stand_in_health(store_t *s, char *reason, size_t len)
{
    if (!refusing)
        return STORE_OK;
    snprintf(reason, len, "the log failed: No space left on device");
    return STORE_EUNAVAILABLE;
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
    store_histogram h = {.nbuckets = 4, .bounds = bounds_us, .counts = counts,
                         .sum = 80 + 3000 + 5000000, .decimals = 6};
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
    return (core_config){
        .reservation_ms = 600000,
        .read_lease_ms = 5000,
        .evict_lru = true,
        .max_pages = 1000000,
        .max_ranks = 64,
        .hash_seed = 7,
    };
}

static api_config test_api_config(const char *token)
{
    return (api_config){
        .limits = {.max_ranks = 64, .max_pages = 1000000, .max_keys = 1000,
                   .max_key_bytes = 256, .max_body_bytes = 1 << 20},
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
    f->store = store_mem_new(&core, &store_wall_clock);
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

TEST(health_answers_503_with_the_reason_while_the_store_refuses_changes)
{
    fixture f;
    fixture_open(&f, NULL, true);
    refusing = false;
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 200);
    CHECK(strcmp(body_of(&f), "{\"status\":\"ok\"}") == 0);
    refusing = true;
    CHECK_EQ(request(&f, "GET", "/health", NULL, NULL), 503);
    const char *body = body_of(&f);
    CHECK(strstr(body, "\"status\":\"unavailable\"") != NULL);
    CHECK(strstr(body, "\"detail\":\"The server cannot accept changes: the log failed: No "
                       "space left on device\"") != NULL);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\nhf3fs_metad_accepting_changes 0\n") != NULL);
    CHECK_EQ(request(&f, "GET", "/v1/stats", NULL, NULL), 200);
    CHECK(strstr(body_of(&f), "\"accepting_changes\":false,\"unavailable_reason\":") != NULL);
    refusing = false;
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
    refusing = false;
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
    CHECK(strstr(body_of(&f), "\"refused\":0},\"engine\":{\"round_trips\":123456,"
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
    CHECK_EQ(store_mem_open(&core, &store_wall_clock, &log, &f.store, err, sizeof err), STORE_OK);
    api_config config = test_api_config(NULL);
    f.api = api_new(f.store, &config);
    api_response_init(&f.resp, f.api);
    CHECK_EQ(request(&f, "POST", "/rank/0/initialize", NULL,
                     "{\"role\":\"worker\",\"num_pages\":8}"), 200);
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
    CHECK_EQ(request(&f, "POST", "/rank/0/initialize", NULL,
                     "{\"role\":\"worker\",\"num_pages\":8}"), 200);
    CHECK_EQ(request(&f, "GET", "/metrics", NULL, NULL), 200);
    const char *m = body_of(&f);
    CHECK(strstr(m, "\nhf3fs_metad_persistence_enabled 0\n") != NULL);
    CHECK(strstr(m, "hf3fs_metad_log_bytes_total") == NULL);
    CHECK(strstr(m, "\nhf3fs_metad_pool_pages{namespace=\"kv\",rank=\"0\",state=\"free\"} 8\n"));
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
                     "{\"role\":\"worker\",\"num_pages\":8}"), 401);
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
    snprintf(want, sizeof want, "hf3fs_metad_request_duration_seconds_count{route=\"/health\","
             "status=\"200\"} %d\n", THREADS * REQUESTS_PER_THREAD);
    CHECK(strstr(body_of(&f), want) != NULL);
    fixture_close(&f);
}

int main(void)
{
    RUN(bearer_token_is_accepted_only_when_it_is_exactly_the_token);
    RUN(basic_auth_is_accepted_with_the_token_as_password_and_any_user);
    RUN(malformed_or_missing_credentials_are_refused);
    RUN(secret_comparison_depends_on_every_byte_and_the_length);
    RUN(health_answers_503_with_the_reason_while_the_store_refuses_changes);
    RUN(metrics_and_stats_show_every_kind_of_figure_an_engine_reports);
    RUN(the_embedded_engine_with_a_log_reports_its_log_and_snapshot_figures);
    RUN(metrics_without_persistence_say_so_and_pass_promtool);
    RUN(with_a_token_every_route_but_health_answers_401_with_a_challenge);
    RUN(request_counters_lose_nothing_under_concurrent_threads);
    return TEST_SUMMARY();
}
