/*
 * commands.c: the commands that map to one library call each: init, alloc,
 * confirm, release, exists, locate, delete, clear, health. Each prints a
 * line per key (or a JSON object with --json) and returns its exit code.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static bool sglang(const cli *o)
{
    return o->dialect == DIALECT_SGLANG;
}

/* Keys of the command (arguments or stdin); a usage error if there are none. */
static int get_keys(const cli *o, char ***keys, size_t *n)
{
    int rc = cli_read_keys(o, keys, n);
    if (rc)
        return rc;
    if (*n == 0)
        return cli_usage_error(o, "no keys (give them as arguments or one per line on stdin)");
    return 0;
}

static void print_ok(const cli *o, const char *text)
{
    if (o->json)
        printf("{\"ok\":true}\n");
    else if (text)
        printf("%s\n", text);
}

/* What a command sends and what it gets back. */
typedef struct request {
    const char *const *keys;
    size_t n;
    int64_t *pages; /* n: the answer's, or those confirmed */
    bool *flags;    /* n: the answer's */
    const int64_t *release;
    size_t n_release;
} request;

/* A command: its library call, and how it prints the answer. */
typedef struct command_spec {
    int (*call)(const cli *o, hf3fs_meta_client *c, request *r);
    /* The answer per key, after the key: the rest of its line, or its JSON
     * fields (in an object with the list `list`, after "rank" if
     * list_rank); false if negative (exit 1). */
    bool (*key_result)(const cli *o, int64_t page, bool flag);
    const char *list;
    bool list_rank;
    /* Or the answer whole (without key_result). */
    void (*answer)(const cli *o, const request *r);
} command_spec;

/* The answer of a command with key_result; its exit code. */
static int print_key_results(const cli *o, const command_spec *s, const request *r)
{
    bool all = true;
    if (o->json) {
        printf("{");
        if (s->list_rank)
            printf("\"rank\":%d,", o->rank);
        printf("\"%s\":[", s->list);
    }
    for (size_t i = 0; i < r->n; i++) {
        if (o->json) {
            printf("%s{\"key\":", i ? "," : "");
            cli_json_string(stdout, r->keys[i]);
        } else {
            printf("%s\t", r->keys[i]);
        }
        bool ok = s->key_result(o, r->pages[i], r->flags[i]);
        all = all && ok;
        printf(o->json ? "}" : "\n");
    }
    if (o->json)
        printf("],\"all\":%s}\n", all ? "true" : "false");
    return all ? CLI_OK : CLI_NEGATIVE;
}

/* Connect, make the call, print its answer (or why it failed); the exit
 * code. */
static int run(const cli *o, const command_spec *s, request *r)
{
    hf3fs_meta_client *c;
    int rc = cli_connect(o, &c);
    if (rc)
        return rc;
    rc = s->call(o, c, r);
    if (rc) {
        rc = cli_fail(o, c, rc);
    } else if (s->key_result) {
        rc = print_key_results(o, s, r);
    } else {
        s->answer(o, r);
    }
    hf3fs_meta_close(c);
    return rc;
}

/* run() over the keys of the command (arguments or stdin). */
static int run_keys(const cli *o, const command_spec *s)
{
    char **keys;
    size_t n;
    int rc = get_keys(o, &keys, &n);
    if (rc)
        return rc;
    int64_t *pages = calloc(n, sizeof *pages);
    bool *flags = calloc(n, sizeof *flags);
    if (!pages || !flags) {
        rc = cli_fail(o, NULL, HF3FS_META_ENOMEM);
    } else {
        request r = {(const char *const *)keys, n, pages, flags, NULL, 0};
        rc = run(o, s, &r);
    }
    free(pages);
    free(flags);
    cli_free_keys(keys, n);
    return rc;
}

/* ---- init ---- */

static int init_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    if (o->scheduler)
        return hf3fs_meta_vllm_init_scheduler(c);
    if (sglang(o))
        return hf3fs_meta_sglang_init(c, o->rank, o->ns, o->pages);
    return hf3fs_meta_vllm_init_worker(c, o->rank, o->pages);
}

static void init_answer(const cli *o, const request *r)
{
    if (o->json) {
        if (o->scheduler) {
            printf("{\"ok\":true,\"role\":\"scheduler\"}\n");
        } else {
            printf("{\"ok\":true,\"namespace\":");
            cli_json_string(stdout, o->ns ? o->ns : "kv");
            printf(",\"rank\":%d,\"num_pages\":%lld}\n", o->rank, (long long)o->pages);
        }
    } else if (o->scheduler) {
        printf("scheduler registered\n");
    } else {
        printf("pool %s/%d initialized (%lld pages asked; an existing pool keeps its size)\n",
               o->ns ? o->ns : "kv", o->rank, (long long)o->pages);
    }
}

int cmd_init(cli *o)
{
    int rc = cli_no_arguments(o);
    if (rc)
        return rc;
    if (o->scheduler && sglang(o))
        return cli_usage_error(o, "--scheduler is a vLLM dialect role");
    if (o->scheduler && o->pages != -1)
        return cli_usage_error(o, "--scheduler takes no --pages");
    if (!o->scheduler && o->pages == -1)
        return cli_usage_error(o, "needs --pages N (or --scheduler with the vLLM dialect)");
    static const command_spec spec = {.call = init_call, .answer = init_answer};
    return run(o, &spec, &(request){0});
}

/* ---- alloc, exists, locate, delete: keys ---- */

static int alloc_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    if (sglang(o))
        return hf3fs_meta_sglang_reserve_and_allocate(c, o->rank, o->ns, r->keys, r->n, r->flags,
                                                      r->pages);
    return hf3fs_meta_vllm_batch_allocate(c, o->rank, r->keys, r->n, r->pages);
}

static bool alloc_result(const cli *o, int64_t page, bool existed)
{
    if (o->json) {
        printf(",\"page\":%lld", (long long)page);
        if (sglang(o))
            printf(",\"existed\":%s", existed ? "true" : "false");
    } else if (sglang(o)) {
        printf("%lld\t%s", (long long)page, page < 0 ? "none" : existed ? "hit" : "new");
    } else {
        printf("%lld", (long long)page);
    }
    return page >= 0;
}

int cmd_alloc(cli *o)
{
    static const command_spec spec = {
        .call = alloc_call, .key_result = alloc_result, .list = "results", .list_rank = true};
    return run_keys(o, &spec);
}

static int exists_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    if (sglang(o))
        return hf3fs_meta_sglang_exists(c, o->rank, o->ns, r->keys, r->n, r->flags);
    return hf3fs_meta_vllm_batch_exists(c, r->keys, r->n, r->flags);
}

static bool exists_result(const cli *o, int64_t page, bool exists)
{
    if (o->json)
        printf(",\"exists\":%s", exists ? "true" : "false");
    else
        printf("%s", exists ? "yes" : "no");
    return exists;
}

int cmd_exists(cli *o)
{
    static const command_spec spec = {
        .call = exists_call, .key_result = exists_result, .list = "exists"};
    return run_keys(o, &spec);
}

static int locate_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    if (sglang(o))
        return hf3fs_meta_sglang_get_page_indices(c, o->rank, o->ns, r->keys, r->n, r->pages);
    return hf3fs_meta_vllm_get_locations(c, o->rank, r->keys, r->n, r->pages);
}

static bool locate_result(const cli *o, int64_t page, bool flag)
{
    if (page >= 0)
        printf(o->json ? ",\"page\":%lld" : "%lld", (long long)page);
    else
        printf(o->json ? ",\"page\":null" : "-");
    return page >= 0;
}

int cmd_locate(cli *o)
{
    static const command_spec spec = {
        .call = locate_call, .key_result = locate_result, .list = "locations", .list_rank = true};
    return run_keys(o, &spec);
}

static int delete_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    return hf3fs_meta_sglang_delete_keys(c, o->rank, o->ns, r->keys, r->n);
}

static void delete_answer(const cli *o, const request *r)
{
    if (o->json)
        printf("{\"ok\":true,\"deleted\":%zu}\n", r->n);
    else
        printf("sent %zu deletion%s for rank %d\n", r->n, r->n == 1 ? "" : "s", o->rank);
}

int cmd_delete(cli *o)
{
    if (!sglang(o))
        return cli_usage_error(o, "delete is an SGLang dialect operation (use --dialect sglang)");
    static const command_spec spec = {.call = delete_call, .answer = delete_answer};
    return run_keys(o, &spec);
}

/* ---- confirm, release ---- */

/* "KEY=PAGE" (at the last '='), or on stdin also "KEY PAGE [more columns]"
 * (whitespace-separated, as alloc prints it). */
static bool split_pair(char *s, bool from_stdin, char **key, int64_t *page)
{
    char *sp = from_stdin ? strpbrk(s, " \t") : NULL;
    char *value;
    if (sp) {
        *sp = '\0';
        value = sp + 1;
        value += strspn(value, " \t");
        value[strcspn(value, " \t")] = '\0';
    } else {
        char *eq = strrchr(s, '=');
        if (!eq)
            return false;
        *eq = '\0';
        value = eq + 1;
    }
    *key = s;
    return *s && cli_parse_page(value, page);
}

/* "P,P,P" into a new array. */
static int parse_page_list(const cli *o, const char *list, int64_t **pages, size_t *n)
{
    *pages = NULL;
    *n = 0;
    if (!list)
        return 0;
    size_t cap = 1;
    for (const char *p = list; *p; p++)
        cap += *p == ',';
    int64_t *out = malloc(cap * sizeof *out);
    char *copy = strdup(list);
    if (!out || !copy) {
        free(out);
        free(copy);
        return cli_fail(o, NULL, HF3FS_META_ENOMEM);
    }
    size_t k = 0;
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (!cli_parse_page(tok, &out[k])) {
            free(out);
            free(copy);
            return cli_usage_error(o, "--release: not a page number: %s", tok);
        }
        k++;
    }
    free(copy);
    *pages = out;
    *n = k;
    return 0;
}

static int confirm_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    if (sglang(o))
        return hf3fs_meta_sglang_confirm_write(c, o->rank, o->ns, r->keys, r->pages, r->n,
                                               r->release, r->n_release);
    return hf3fs_meta_vllm_confirm_write(c, o->rank, r->keys, r->pages, r->n, r->release,
                                         r->n_release);
}

static void confirm_answer(const cli *o, const request *r)
{
    size_t n = r->n, n_release = r->n_release;
    if (o->json)
        printf("{\"ok\":true,\"confirmed\":%zu,\"released\":%zu}\n", n, n_release);
    else
        printf("sent %zu confirmation%s and %zu release%s for rank %d\n", n, n == 1 ? "" : "s",
               n_release, n_release == 1 ? "" : "s", o->rank);
}

int cmd_confirm(cli *o)
{
    char **lines;
    size_t n;
    int64_t *release = NULL, *pages = NULL;
    size_t n_release = 0;
    const char **keys = NULL;
    int rc = parse_page_list(o, o->release, &release, &n_release);
    if (rc)
        return rc;
    /* With --release and no pair arguments, stdin is not read. */
    if (o->n_args == 0 && o->release) {
        lines = NULL;
        n = 0;
    } else if ((rc = cli_read_keys(o, &lines, &n)) != 0) {
        free(release);
        return rc;
    }
    if (n == 0 && n_release == 0) {
        rc = cli_usage_error(o, "nothing to confirm (KEY=PAGE arguments, \"KEY PAGE\" lines on"
                                " stdin, or --release)");
        goto out;
    }
    keys = calloc(n + 1, sizeof *keys);
    pages = calloc(n + 1, sizeof *pages);
    if (!keys || !pages) {
        rc = cli_fail(o, NULL, HF3FS_META_ENOMEM);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        char *key;
        char shown[80];
        snprintf(shown, sizeof shown, "%s", lines[i]);
        if (!split_pair(lines[i], o->n_args == 0, &key, &pages[i])) {
            rc = cli_usage_error(o, "not KEY=PAGE or \"KEY PAGE\": %s", shown);
            goto out;
        }
        keys[i] = key;
    }
    static const command_spec spec = {.call = confirm_call, .answer = confirm_answer};
    rc = run(o, &spec, &(request){keys, n, pages, NULL, release, n_release});
out:
    free(keys);
    free(pages);
    free(release);
    cli_free_keys(lines, n);
    return rc;
}

static void release_answer(const cli *o, const request *r)
{
    size_t n = r->n_release;
    if (o->json)
        printf("{\"ok\":true,\"released\":%zu}\n", n);
    else
        printf("sent %zu release%s for rank %d\n", n, n == 1 ? "" : "s", o->rank);
}

int cmd_release(cli *o)
{
    char **words;
    size_t n;
    int rc = cli_read_keys(o, &words, &n);
    if (rc)
        return rc;
    int64_t *pages = calloc(n + 1, sizeof *pages);
    if (!pages) {
        rc = cli_fail(o, NULL, HF3FS_META_ENOMEM);
        goto out;
    }
    if (n == 0) {
        rc = cli_usage_error(o, "no pages to release");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!cli_parse_page(words[i], &pages[i])) {
            rc = cli_usage_error(o, "not a page number: %s", words[i]);
            goto out;
        }
    }
    static const command_spec spec = {.call = confirm_call, .answer = release_answer};
    rc = run(o, &spec, &(request){NULL, 0, NULL, NULL, pages, n});
out:
    free(pages);
    cli_free_keys(words, n);
    return rc;
}

/* ---- clear, health ---- */

static int clear_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    return sglang(o) ? hf3fs_meta_sglang_clear(c, o->rank, o->ns) : hf3fs_meta_vllm_clear(c);
}

static void clear_answer(const cli *o, const request *r)
{
    char text[160];
    if (sglang(o))
        snprintf(text, sizeof text, "pool %s/%d cleared", o->ns ? o->ns : "kv", o->rank);
    else
        snprintf(text, sizeof text, "every pool cleared");
    print_ok(o, text);
}

int cmd_clear(cli *o)
{
    static const command_spec spec = {.call = clear_call, .answer = clear_answer};
    int rc = cli_no_arguments(o);
    return rc ? rc : run(o, &spec, &(request){0});
}

static int health_call(const cli *o, hf3fs_meta_client *c, request *r)
{
    return hf3fs_meta_health(c);
}

static void health_answer(const cli *o, const request *r)
{
    printf(o->json ? "{\"status\":\"ok\"}\n" : "ok\n");
}

int cmd_health(cli *o)
{
    static const command_spec spec = {.call = health_call, .answer = health_answer};
    int rc = cli_no_arguments(o);
    return rc ? rc : run(o, &spec, &(request){0});
}
