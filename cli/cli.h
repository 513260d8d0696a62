/*
 * cli.h: what the files of hf3fs-meta share. The tool is built on the public
 * library only (include/hf3fs_meta.h), as curl's src/ is built on lib/.
 *
 * Exit codes (documented in `hf3fs-meta --help`, relied on by scripts):
 *   0 ok; 1 a negative answer (not all keys exist, a key without a page, an
 *   allocation that got no page); 2 usage; 3 connection or timeout; 4 the
 *   server refused the request (4xx: bad request, not initialized,
 *   unauthorized); 5 server error (5xx) or a malformed answer.
 */
#ifndef HF3FS_META_CLI_H
#define HF3FS_META_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hf3fs_meta.h"

enum cli_exit {
    CLI_OK = 0,
    CLI_NEGATIVE = 1,
    CLI_USAGE = 2,
    CLI_CONNECT = 3,
    CLI_REFUSED = 4,
    CLI_SERVER = 5,
};

enum cli_dialect { DIALECT_VLLM, DIALECT_SGLANG };

#define CLI_DEFAULT_URL "http://127.0.0.1:18000"

typedef struct cli {
    /* global options */
    const char *url;
    const char *token;
    enum cli_dialect dialect;
    const char *ns; /* NULL: the server's default */
    int rank;
    bool json;
    int timeout_ms;
    /* command options */
    int64_t pages;
    bool scheduler;
    const char *release; /* comma-separated pages */
    double interval;
    long count;
    double duration;
    int clients;
    int keys_per_request;
    int64_t page_bytes; /* 0: not given */
    /* the command and its arguments */
    const char *command;
    char **args;
    int n_args;
    const char *prog;
} cli;

/* main.c */
int cli_exit_code(int rc);
/* Print "hf3fs-meta: CMD: message" to stderr (and {"error": ...} to stdout
 * with --json); return the exit code for rc. */
int cli_fail(const cli *o, hf3fs_meta_client *c, int rc);
int cli_usage_error(const cli *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A usage error if the command got arguments (it takes none); else 0. */
int cli_no_arguments(const cli *o);
/* Open a client with the URL, token and timeout of the options. */
int cli_connect(const cli *o, hf3fs_meta_client **out);

/* output.c */
void cli_json_string(FILE *f, const char *s);
/* Keys from the arguments, or from stdin (one per line) when there are none.
 * *keys_out is a malloc'd array of malloc'd strings (cli_free_keys). */
int cli_read_keys(const cli *o, char ***keys_out, size_t *n_out);
void cli_free_keys(char **keys, size_t n);
/* A page number (decimal, >= 0 unless allow_negative); false if invalid. */
bool cli_parse_page(const char *s, int64_t *out);

/* The commands, each `int cmd_<name>(cli *o)` returning its exit code:
 * commands.c (one library call each), stats.c (stats, watch, advise), load.c. */
/* one command a line */
// clang-format off
#define CLI_COMMANDS(X) \
    X(init)             \
    X(alloc)            \
    X(confirm)          \
    X(release)          \
    X(exists)           \
    X(locate)           \
    X(delete)           \
    X(clear)            \
    X(health)           \
    X(stats)            \
    X(watch)            \
    X(advise)           \
    X(load)
// clang-format on
#define CLI_DECLARE_COMMAND(name) int cmd_##name(cli *o);
CLI_COMMANDS(CLI_DECLARE_COMMAND)

#endif
