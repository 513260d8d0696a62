/*
 * commands.c: the commands that map to one library call each: init, alloc,
 * confirm, release, exists, locate, delete, clear, health. Each prints a
 * line per key (or a JSON object with --json) and returns its exit code.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static bool sglang(const cli *o) { return o->dialect == DIALECT_SGLANG; }

static int no_arguments(const cli *o)
{
    if (o->n_args)
        return cli_usage_error(o, "takes no arguments (got %s)", o->args[0]);
    return 0;
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

int cmd_init(cli *o)
{
    int rc = no_arguments(o);
    if (rc)
        return rc;
    if (o->scheduler && sglang(o))
        return cli_usage_error(o, "--scheduler is a vLLM dialect role");
    if (o->scheduler && o->pages != -1)
        return cli_usage_error(o, "--scheduler takes no --pages");
    if (!o->scheduler && o->pages == -1)
        return cli_usage_error(o, "needs --pages N (or --scheduler with the vLLM dialect)");
    hf3fs_meta_client *c;
    if ((rc = cli_connect(o, &c)) != 0)
        return rc;
    if (o->scheduler)
        rc = hf3fs_meta_vllm_init_scheduler(c);
    else if (sglang(o))
        rc = hf3fs_meta_sglang_init(c, o->rank, o->ns, o->pages);
    else
        rc = hf3fs_meta_vllm_init_worker(c, o->rank, o->pages);
    if (rc) {
        rc = cli_fail(o, c, rc);
    } else if (o->json) {
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
    hf3fs_meta_close(c);
    return rc;
}

int cmd_alloc(cli *o)
{
    char **keys;
    size_t n;
    int rc = get_keys(o, &keys, &n);
    if (rc)
        return rc;
    hf3fs_meta_client *c = NULL;
    int64_t *pages = malloc(n * sizeof *pages);
    bool *existed = calloc(n, sizeof *existed);
    if (!pages || !existed) {
        rc = cli_fail(o, NULL, HF3FS_META_ENOMEM);
        goto out;
    }
    if ((rc = cli_connect(o, &c)) != 0)
        goto out;
    if (sglang(o))
        rc = hf3fs_meta_sglang_reserve_and_allocate(c, o->rank, o->ns, (const char *const *)keys, n,
                                                    existed, pages);
    else
        rc = hf3fs_meta_vllm_batch_allocate(c, o->rank, (const char *const *)keys, n, pages);
    if (rc) {
        rc = cli_fail(o, c, rc);
        goto out;
    }
    bool all = true;
    if (o->json)
        printf("{\"rank\":%d,\"results\":[", o->rank);
    for (size_t i = 0; i < n; i++) {
        all = all && pages[i] >= 0;
        if (o->json) {
            printf("%s{\"key\":", i ? "," : "");
            cli_json_string(stdout, keys[i]);
            printf(",\"page\":%lld", (long long)pages[i]);
            if (sglang(o))
                printf(",\"existed\":%s", existed[i] ? "true" : "false");
            printf("}");
        } else if (sglang(o)) {
            printf("%s\t%lld\t%s\n", keys[i], (long long)pages[i],
                   pages[i] < 0 ? "none" : existed[i] ? "hit" : "new");
        } else {
            printf("%s\t%lld\n", keys[i], (long long)pages[i]);
        }
    }
    if (o->json)
        printf("],\"all\":%s}\n", all ? "true" : "false");
    rc = all ? CLI_OK : CLI_NEGATIVE;
out:
    hf3fs_meta_close(c);
    free(pages);
    free(existed);
    cli_free_keys(keys, n);
    return rc;
}

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
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
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

static int confirm_and_release(const cli *o, hf3fs_meta_client *c, const char *const *keys,
                               const int64_t *pages, size_t n, const int64_t *release,
                               size_t n_release)
{
    if (sglang(o))
        return hf3fs_meta_sglang_confirm_write(c, o->rank, o->ns, keys, pages, n, release,
                                               n_release);
    return hf3fs_meta_vllm_confirm_write(c, o->rank, keys, pages, n, release, n_release);
}

int cmd_confirm(cli *o)
{
    char **lines;
    size_t n;
    int64_t *release = NULL, *pages = NULL;
    size_t n_release = 0;
    const char **keys = NULL;
    hf3fs_meta_client *c = NULL;
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
    if ((rc = cli_connect(o, &c)) != 0)
        goto out;
    rc = confirm_and_release(o, c, keys, pages, n, release, n_release);
    if (rc) {
        rc = cli_fail(o, c, rc);
    } else if (o->json) {
        printf("{\"ok\":true,\"confirmed\":%zu,\"released\":%zu}\n", n, n_release);
    } else {
        printf("sent %zu confirmation%s and %zu release%s for rank %d\n", n, n == 1 ? "" : "s",
               n_release, n_release == 1 ? "" : "s", o->rank);
    }
out:
    hf3fs_meta_close(c);
    free(keys);
    free(pages);
    free(release);
    cli_free_keys(lines, n);
    return rc;
}

int cmd_release(cli *o)
{
    char **words;
    size_t n;
    int rc = cli_read_keys(o, &words, &n);
    if (rc)
        return rc;
    hf3fs_meta_client *c = NULL;
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
    if ((rc = cli_connect(o, &c)) != 0)
        goto out;
    rc = confirm_and_release(o, c, NULL, NULL, 0, pages, n);
    if (rc) {
        rc = cli_fail(o, c, rc);
    } else if (o->json) {
        printf("{\"ok\":true,\"released\":%zu}\n", n);
    } else {
        printf("sent %zu release%s for rank %d\n", n, n == 1 ? "" : "s", o->rank);
    }
out:
    hf3fs_meta_close(c);
    free(pages);
    cli_free_keys(words, n);
    return rc;
}

int cmd_exists(cli *o)
{
    char **keys;
    size_t n;
    int rc = get_keys(o, &keys, &n);
    if (rc)
        return rc;
    hf3fs_meta_client *c = NULL;
    bool *exists = calloc(n, sizeof *exists);
    if (!exists) {
        rc = cli_fail(o, NULL, HF3FS_META_ENOMEM);
        goto out;
    }
    if ((rc = cli_connect(o, &c)) != 0)
        goto out;
    if (sglang(o))
        rc = hf3fs_meta_sglang_exists(c, o->rank, o->ns, (const char *const *)keys, n, exists);
    else
        rc = hf3fs_meta_vllm_batch_exists(c, (const char *const *)keys, n, exists);
    if (rc) {
        rc = cli_fail(o, c, rc);
        goto out;
    }
    bool all = true;
    if (o->json)
        printf("{\"exists\":[");
    for (size_t i = 0; i < n; i++) {
        all = all && exists[i];
        if (o->json) {
            printf("%s{\"key\":", i ? "," : "");
            cli_json_string(stdout, keys[i]);
            printf(",\"exists\":%s}", exists[i] ? "true" : "false");
        } else {
            printf("%s\t%s\n", keys[i], exists[i] ? "yes" : "no");
        }
    }
    if (o->json)
        printf("],\"all\":%s}\n", all ? "true" : "false");
    rc = all ? CLI_OK : CLI_NEGATIVE;
out:
    hf3fs_meta_close(c);
    free(exists);
    cli_free_keys(keys, n);
    return rc;
}

int cmd_locate(cli *o)
{
    char **keys;
    size_t n;
    int rc = get_keys(o, &keys, &n);
    if (rc)
        return rc;
    hf3fs_meta_client *c = NULL;
    int64_t *pages = calloc(n, sizeof *pages);
    if (!pages) {
        rc = cli_fail(o, NULL, HF3FS_META_ENOMEM);
        goto out;
    }
    if ((rc = cli_connect(o, &c)) != 0)
        goto out;
    if (sglang(o))
        rc = hf3fs_meta_sglang_get_page_indices(c, o->rank, o->ns, (const char *const *)keys, n,
                                                pages);
    else
        rc = hf3fs_meta_vllm_get_locations(c, o->rank, (const char *const *)keys, n, pages);
    if (rc) {
        rc = cli_fail(o, c, rc);
        goto out;
    }
    bool all = true;
    if (o->json)
        printf("{\"rank\":%d,\"locations\":[", o->rank);
    for (size_t i = 0; i < n; i++) {
        all = all && pages[i] >= 0;
        if (o->json) {
            printf("%s{\"key\":", i ? "," : "");
            cli_json_string(stdout, keys[i]);
            if (pages[i] >= 0)
                printf(",\"page\":%lld}", (long long)pages[i]);
            else
                printf(",\"page\":null}");
        } else if (pages[i] >= 0) {
            printf("%s\t%lld\n", keys[i], (long long)pages[i]);
        } else {
            printf("%s\t-\n", keys[i]);
        }
    }
    if (o->json)
        printf("],\"all\":%s}\n", all ? "true" : "false");
    rc = all ? CLI_OK : CLI_NEGATIVE;
out:
    hf3fs_meta_close(c);
    free(pages);
    cli_free_keys(keys, n);
    return rc;
}

int cmd_delete(cli *o)
{
    if (!sglang(o))
        return cli_usage_error(o, "delete is an SGLang dialect operation (use --dialect sglang)");
    char **keys;
    size_t n;
    int rc = get_keys(o, &keys, &n);
    if (rc)
        return rc;
    hf3fs_meta_client *c = NULL;
    if ((rc = cli_connect(o, &c)) == 0) {
        rc = hf3fs_meta_sglang_delete_keys(c, o->rank, o->ns, (const char *const *)keys, n);
        if (rc)
            rc = cli_fail(o, c, rc);
        else if (o->json)
            printf("{\"ok\":true,\"deleted\":%zu}\n", n);
        else
            printf("sent %zu deletion%s for rank %d\n", n, n == 1 ? "" : "s", o->rank);
    }
    hf3fs_meta_close(c);
    cli_free_keys(keys, n);
    return rc;
}

int cmd_clear(cli *o)
{
    int rc = no_arguments(o);
    hf3fs_meta_client *c;
    if (rc || (rc = cli_connect(o, &c)) != 0)
        return rc;
    rc = sglang(o) ? hf3fs_meta_sglang_clear(c, o->rank, o->ns) : hf3fs_meta_vllm_clear(c);
    if (rc) {
        rc = cli_fail(o, c, rc);
    } else {
        char text[160];
        if (sglang(o))
            snprintf(text, sizeof text, "pool %s/%d cleared", o->ns ? o->ns : "kv", o->rank);
        else
            snprintf(text, sizeof text, "every pool cleared");
        print_ok(o, text);
    }
    hf3fs_meta_close(c);
    return rc;
}

int cmd_health(cli *o)
{
    int rc = no_arguments(o);
    hf3fs_meta_client *c;
    if (rc || (rc = cli_connect(o, &c)) != 0)
        return rc;
    rc = hf3fs_meta_health(c);
    if (rc)
        rc = cli_fail(o, c, rc);
    else if (o->json)
        printf("{\"status\":\"ok\"}\n");
    else
        printf("ok\n");
    hf3fs_meta_close(c);
    return rc;
}
