/*
 * main.c: hf3fs-meta's options, help texts and dispatch.
 *
 * Options may come before or after the command (GNU getopt permutes them);
 * "--" ends them. Each command accepts the global options and its own.
 */
#include <errno.h>
#include <getopt.h> /* struct option, as a table of names */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum opt_id {
    OPT_URL = 1,
    OPT_TOKEN,
    OPT_DIALECT,
    OPT_NAMESPACE,
    OPT_RANK,
    OPT_JSON,
    OPT_TIMEOUT,
    OPT_HELP,
    OPT_VERSION,
    OPT_PAGES,
    OPT_SCHEDULER,
    OPT_RELEASE,
    OPT_INTERVAL,
    OPT_COUNT,
    OPT_DURATION,
    OPT_CLIENTS,
    OPT_KEYS_PER_REQUEST,
    OPT_PAGE_BYTES,
    OPT_MAX,
};

#define BIT(o) (1u << (o))
#define GLOBAL_OPTS                                                                                \
    (BIT(OPT_URL) | BIT(OPT_TOKEN) | BIT(OPT_DIALECT) | BIT(OPT_NAMESPACE) | BIT(OPT_RANK) |       \
     BIT(OPT_JSON) | BIT(OPT_TIMEOUT) | BIT(OPT_HELP) | BIT(OPT_VERSION))

static const struct option long_options[] = {
    {"url", required_argument, NULL, OPT_URL},
    {"token", required_argument, NULL, OPT_TOKEN},
    {"dialect", required_argument, NULL, OPT_DIALECT},
    {"namespace", required_argument, NULL, OPT_NAMESPACE},
    {"rank", required_argument, NULL, OPT_RANK},
    {"json", no_argument, NULL, OPT_JSON},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"help", no_argument, NULL, OPT_HELP},
    {"version", no_argument, NULL, OPT_VERSION},
    {"pages", required_argument, NULL, OPT_PAGES},
    {"scheduler", no_argument, NULL, OPT_SCHEDULER},
    {"release", required_argument, NULL, OPT_RELEASE},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"count", required_argument, NULL, OPT_COUNT},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"clients", required_argument, NULL, OPT_CLIENTS},
    {"keys-per-request", required_argument, NULL, OPT_KEYS_PER_REQUEST},
    {"page-bytes", required_argument, NULL, OPT_PAGE_BYTES},
    {NULL, 0, NULL, 0},
};

typedef struct command {
    const char *name;
    int (*run)(cli *o);
    unsigned options; /* besides the global ones */
    const char *usage;
    const char *help;
} command;

static const command commands[] = {
    {"init", cmd_init, BIT(OPT_PAGES) | BIT(OPT_SCHEDULER), "init --pages N | init --scheduler",
     "Initialize the pool of --rank (and --namespace with SGLang) with N pages.\n"
     "Idempotent: an existing pool keeps its state and size. With the vLLM dialect,\n"
     "--scheduler registers a scheduler instead (creates nothing).\n"},
    {"alloc", cmd_alloc, 0, "alloc KEY... (or keys on stdin)",
     "Reserve a page for each key on --rank. Prints \"KEY<TAB>PAGE\" per key (SGLang adds\n"
     "\"hit\" or \"new\"); -1 means no page. Pages that are not hits must be confirmed\n"
     "(hf3fs-meta confirm reads this output) or released. vLLM: all or nothing for new\n"
     "pages; SGLang: partial. Exit 1 if any key got no page.\n"},
    {"confirm", cmd_confirm, BIT(OPT_RELEASE), "confirm KEY=PAGE... [--release P,P...]",
     "Confirm that each KEY was written to PAGE on --rank (pairs from the arguments,\n"
     "or \"KEY PAGE\" / \"KEY=PAGE\" lines on stdin, extra columns ignored), and release\n"
     "the reserved pages of --release. Confirmations that match no reservation are\n"
     "ignored by the server.\n"},
    {"release", cmd_release, 0, "release PAGE... (or pages on stdin)",
     "Give back reserved pages of --rank that were not written. Pages that are not\n"
     "reserved are left as they are.\n"},
    {"exists", cmd_exists, 0, "exists KEY... (or keys on stdin)",
     "Which keys exist: vLLM, complete on every initialized rank; SGLang, owned by the\n"
     "pool of --rank. Prints \"KEY<TAB>yes|no\". Exit 1 unless all exist.\n"},
    {"locate", cmd_locate, 0, "locate KEY... (or keys on stdin)",
     "The page of each key on --rank (vLLM get_locations: complete keys only; SGLang\n"
     "get_page_indices). Prints \"KEY<TAB>PAGE\", \"-\" for none. Exit 1 unless all found.\n"},
    {"delete", cmd_delete, 0, "delete KEY... (or keys on stdin)",
     "Delete keys from the pool of --rank and free their pages (SGLang dialect only:\n"
     "the vLLM dialect has no delete).\n"},
    {"clear", cmd_clear, 0, "clear",
     "vLLM: forget EVERY pool and key of the server (workers must initialize again).\n"
     "SGLang: free every page of the pool of --rank and --namespace.\n"},
    {"stats", cmd_stats, 0, "stats",
     "Per-pool table: namespace, rank, pages, used %, keys, reserved pages, hit rate,\n"
     "evictions. --json prints the server's GET /v1/stats answer as it is.\n"},
    {"advise", cmd_advise, BIT(OPT_PAGE_BYTES), "advise [--page-bytes B]",
     "Per namespace, the server's sizing advice (docs/sizing.md): pages per rank now,\n"
     "the estimated prefix-hit ratio now, the target (the server's --hit-ratio-target),\n"
     "the smallest pages per rank that reach it, what doubling the pool gains and what\n"
     "halving it frees and costs (ratios in points). With --page-bytes B (one rank's KV\n"
     "block in bytes, which only the engine knows) also the advised bytes per rank.\n"
     "--json prints the server's GET /v1/stats answer as it is.\n"},
    {"watch", cmd_watch, BIT(OPT_INTERVAL) | BIT(OPT_COUNT), "watch [--interval S] [--count N]",
     "The stats table refreshed in place every S seconds (default 2); stops after N\n"
     "refreshes with --count (default: until interrupted). --json prints one stats\n"
     "document per line instead.\n"},
    {"load", cmd_load,
     BIT(OPT_DURATION) | BIT(OPT_CLIENTS) | BIT(OPT_KEYS_PER_REQUEST) | BIT(OPT_PAGES),
     "load [--duration S] [--clients N] [--keys-per-request K] [--pages N]",
     "A load generator shaped like a vLLM deployment: N client threads (default 4),\n"
     "each one engine instance with its own connection. Per prompt of K blocks\n"
     "(default 32): the scheduler asks batch_exists for the prefix keys, then the\n"
     "workers of ranks 0 and 1 look up the hits and allocate + confirm the rest.\n"
     "Prompts share system-prompt prefixes (Zipf popularity) and some repeat whole\n"
     "(multi-turn), so the server sees hits, misses and, once the pools of --pages\n"
     "pages (default 65536, initialized first) fill, evictions. Runs S seconds\n"
     "(default 10) with a progress line on stderr, then prints requests/s and key\n"
     "rates. With --dialect sglang the same flow uses the SGLang calls.\n"},
    {"health", cmd_health, 0, "health",
     "GET /health: exit 0 when the server answers {\"status\": \"ok\"}.\n"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void print_help(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [OPTIONS] COMMAND [ARGS]\n"
            "\n"
            "Talk to hf3fs-metad, the KV-cache page metadata server (release %s, library %s).\n"
            "\n"
            "Commands:\n",
            prog, HF3FS_VERSION, hf3fs_meta_version());
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].usage);
    fprintf(
        f, "\n"
           "Options (before or after the command):\n"
           "  --url URL          server (default $HF3FS_META_URL, else " CLI_DEFAULT_URL ");\n"
           "                     http://:TOKEN@host:port sends HTTP Basic auth\n"
           "  --token TOKEN      send \"Authorization: Bearer TOKEN\" (default $HF3FS_META_TOKEN)\n"
           "  --dialect D        vllm (default) or sglang\n"
           "  --namespace NS     SGLang pool namespace (default: the server's, \"kv\")\n"
           "  --rank R           worker rank (default 0)\n"
           "  --json             machine-readable output on stdout\n"
           "  --timeout MS       request timeout in milliseconds (default 30000)\n"
           "  --help             this text; COMMAND --help for a command\n"
           "  --version          print the release and the client library's version\n"
           "\n"
           "Keys come from the arguments, or from stdin (one per line) when there are none.\n"
           "\n"
           "Exit codes: 0 ok; 1 a negative answer (not all keys exist, no page);\n"
           "2 usage; 3 connection or timeout; 4 refused by the server (4xx: bad\n"
           "request, not initialized, unauthorized); 5 server error (5xx) or a\n"
           "malformed answer.\n");
}

static void print_command_help(FILE *f, const char *prog, const command *cmd)
{
    fprintf(f,
            "usage: %s [OPTIONS] %s\n\n%s\nSee %s --help for the global options and exit codes.\n",
            prog, cmd->usage, cmd->help, prog);
}

int cli_exit_code(int rc)
{
    switch (rc) {
    case 0: return CLI_OK;
    case HF3FS_META_EINVAL: return CLI_USAGE;
    case HF3FS_META_ECONNECT:
    case HF3FS_META_ETIMEDOUT: return CLI_CONNECT;
    case HF3FS_META_EREFUSED:
    case HF3FS_META_ENOTINIT:
    case HF3FS_META_EUNAUTH: return CLI_REFUSED;
    default: return CLI_SERVER;
    }
}

int cli_fail(const cli *o, hf3fs_meta_client *c, int rc)
{
    const char *msg = c && *hf3fs_meta_last_error(c) ? hf3fs_meta_last_error(c)
                                                     : hf3fs_meta_strerror(rc);
    fprintf(stderr, "%s: %s: %s\n", o->prog, o->command ? o->command : "error", msg);
    if (o->json) {
        printf("{\"error\":");
        cli_json_string(stdout, msg);
        printf(",\"code\":");
        cli_json_string(stdout, hf3fs_meta_strerror(rc));
        printf(",\"http_status\":%d}\n", c ? hf3fs_meta_last_status(c) : 0);
    }
    return cli_exit_code(rc);
}

int cli_usage_error(const cli *o, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", o->prog);
    if (o->command)
        fprintf(stderr, "%s: ", o->command);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (o->command)
        fprintf(stderr, "\n(see %s %s --help)\n", o->prog, o->command);
    else
        fprintf(stderr, "\n(see %s --help)\n", o->prog);
    return CLI_USAGE;
}

int cli_no_arguments(const cli *o)
{
    if (o->n_args)
        return cli_usage_error(o, "takes no arguments (got %s)", o->args[0]);
    return 0;
}

int cli_connect(const cli *o, hf3fs_meta_client **out)
{
    int rc = hf3fs_meta_open(o->url, out);
    if (rc) {
        if (rc == HF3FS_META_EINVAL)
            return cli_usage_error(o, "invalid URL %s (want http://[:TOKEN@]host:port)", o->url);
        return cli_fail(o, NULL, rc);
    }
    if (o->token && hf3fs_meta_set_bearer_token(*out, o->token) != 0) {
        hf3fs_meta_close(*out);
        *out = NULL;
        return cli_usage_error(o, "invalid token (printable ASCII without spaces)");
    }
    hf3fs_meta_set_timeouts(*out, 5000, o->timeout_ms);
    return 0;
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_seconds(const char *s, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > max)
        return false;
    *out = v;
    return true;
}

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

/* One option's value into o; a usage error code or 0. */
static int apply_option(cli *o, int id, const char *arg)
{
    long v;
    switch (id) {
    case OPT_URL: o->url = arg; break;
    case OPT_TOKEN: o->token = arg; break;
    case OPT_DIALECT:
        if (strcmp(arg, "vllm") == 0)
            o->dialect = DIALECT_VLLM;
        else if (strcmp(arg, "sglang") == 0)
            o->dialect = DIALECT_SGLANG;
        else
            return cli_usage_error(o, "--dialect must be vllm or sglang, not %s", arg);
        break;
    case OPT_NAMESPACE: o->ns = arg; break;
    case OPT_RANK:
        if (!parse_long(arg, 0, 1L << 30, &v))
            return cli_usage_error(o, "--rank must be an integer >= 0, not %s", arg);
        o->rank = (int)v;
        break;
    case OPT_JSON: o->json = true; break;
    case OPT_TIMEOUT:
        if (!parse_long(arg, 1, 3600 * 1000L, &v))
            return cli_usage_error(o, "--timeout must be milliseconds > 0, not %s", arg);
        o->timeout_ms = (int)v;
        break;
    case OPT_PAGES: {
        char *end;
        errno = 0;
        long long p = strtoll(arg, &end, 10);
        if (errno || end == arg || *end)
            return cli_usage_error(o, "--pages must be an integer, not %s", arg);
        o->pages = p;
        break;
    }
    case OPT_SCHEDULER: o->scheduler = true; break;
    case OPT_RELEASE: o->release = arg; break;
    case OPT_INTERVAL:
        if (!parse_seconds(arg, 86400, &o->interval))
            return cli_usage_error(o, "--interval must be seconds > 0, not %s", arg);
        break;
    case OPT_COUNT:
        if (!parse_long(arg, 1, 1L << 40, &o->count))
            return cli_usage_error(o, "--count must be an integer >= 1, not %s", arg);
        break;
    case OPT_DURATION:
        if (!parse_seconds(arg, 86400, &o->duration))
            return cli_usage_error(o, "--duration must be seconds > 0, not %s", arg);
        break;
    case OPT_CLIENTS:
        if (!parse_long(arg, 1, 1024, &v))
            return cli_usage_error(o, "--clients must be 1 .. 1024, not %s", arg);
        o->clients = (int)v;
        break;
    case OPT_KEYS_PER_REQUEST:
        if (!parse_long(arg, 1, 100000, &v))
            return cli_usage_error(o, "--keys-per-request must be 1 .. 100000, not %s", arg);
        o->keys_per_request = (int)v;
        break;
    case OPT_PAGE_BYTES: {
        char *end;
        errno = 0;
        long long b = strtoll(arg, &end, 10);
        if (errno || end == arg || *end || b < 1)
            return cli_usage_error(o, "--page-bytes must be an integer >= 1, not %s", arg);
        o->page_bytes = b;
        break;
    }
    default: break;
    }
    return 0;
}

int main(int argc, char **argv)
{
    cli o;
    memset(&o, 0, sizeof o);
    o.prog = "hf3fs-meta";
    o.url = getenv("HF3FS_META_URL");
    if (!o.url || !*o.url)
        o.url = CLI_DEFAULT_URL;
    o.token = getenv("HF3FS_META_TOKEN");
    if (o.token && !*o.token)
        o.token = NULL;
    o.timeout_ms = 30000;
    o.pages = -1;
    o.interval = 2.0;
    o.duration = 10.0;
    o.clients = 4;
    o.keys_per_request = 32;

    /* One pass over the words: options (anywhere, "--name value" or
     * "--name=value"), the command (the first other word) and its
     * arguments; after "--" every word is an argument. */
    unsigned given = 0;
    struct {
        int id;
        const char *arg;
    } seen[64];
    int n_seen = 0, n_args = 0;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args)
        return CLI_SERVER;
    bool only_args = false;
    int rc = CLI_OK;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_args && strcmp(a, "--") == 0) {
            only_args = true;
            continue;
        }
        if (!only_args && (strcmp(a, "-h") == 0 || (a[0] == '-' && a[1] == '-'))) {
            int id = OPT_HELP;
            const char *val = NULL;
            if (a[1] == '-') {
                const char *eq = strchr(a + 2, '=');
                size_t nlen = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
                const struct option *lo = NULL;
                for (const struct option *p = long_options; p->name; p++)
                    if (strlen(p->name) == nlen && strncmp(p->name, a + 2, nlen) == 0)
                        lo = p;
                if (!lo) {
                    rc = cli_usage_error(&o, "unknown option %s", a);
                    goto out;
                }
                if (lo->has_arg == required_argument) {
                    if (eq) {
                        val = eq + 1;
                    } else if (i + 1 < argc) {
                        val = argv[++i];
                    } else {
                        rc = cli_usage_error(&o, "option %s needs a value", a);
                        goto out;
                    }
                } else if (eq) {
                    rc = cli_usage_error(&o, "option --%s takes no value", lo->name);
                    goto out;
                }
                id = lo->val;
            }
            given |= BIT(id);
            if (n_seen == (int)(sizeof seen / sizeof seen[0])) {
                rc = cli_usage_error(&o, "too many options");
                goto out;
            }
            seen[n_seen].id = id;
            seen[n_seen].arg = val;
            n_seen++;
            continue;
        }
        if (!only_args && a[0] == '-' && a[1] && !o.command) {
            rc = cli_usage_error(&o, "unknown option %s", a);
            goto out;
        }
        if (!o.command)
            o.command = a;
        else
            args[n_args++] = argv[i];
    }
    o.args = args;
    o.n_args = n_args;

    const command *cmd = o.command ? find_command(o.command) : NULL;
    if (given & BIT(OPT_VERSION)) {
        /* HF3FS_VERSION: the release, from the file VERSION (the Makefile) */
        printf("hf3fs-meta %s\n"
               "libhf3fsmeta %s (the C API of include/hf3fs_meta.h)\n"
               "speaks: the vLLM and SGLang HTTP dialects of hf3fs-metad (docs/protocol.md)\n",
               HF3FS_VERSION, hf3fs_meta_version());
        goto out;
    }
    if (!o.command) {
        if (given & BIT(OPT_HELP))
            print_help(stdout, o.prog);
        else
            rc = cli_usage_error(&o, "no command");
        goto out;
    }
    if (!cmd) {
        const char *name = o.command;
        o.command = NULL;
        rc = cli_usage_error(&o, "unknown command %s", name);
        goto out;
    }
    if (given & BIT(OPT_HELP)) {
        print_command_help(stdout, o.prog, cmd);
        goto out;
    }
    unsigned extra = given & ~(GLOBAL_OPTS | cmd->options);
    for (int id = 1; id < OPT_MAX; id++) {
        if (extra & BIT(id)) {
            for (const struct option *p = long_options; p->name; p++)
                if (p->val == id) {
                    rc = cli_usage_error(&o, "option --%s does not apply to %s", p->name,
                                         cmd->name);
                    goto out;
                }
        }
    }
    for (int i = 0; i < n_seen; i++)
        if ((rc = apply_option(&o, seen[i].id, seen[i].arg)) != 0)
            goto out;
    rc = cmd->run(&o);
out:
    free(args);
    return rc;
}
