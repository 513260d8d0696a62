/* output.c: JSON strings on output, keys and pages on input. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void cli_free_keys(char **keys, size_t n)
{
    if (!keys)
        return;
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

static int push(char ***keys, size_t *n, size_t *cap, const char *s, size_t len)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        char **k = realloc(*keys, c * sizeof *k);
        if (!k)
            return -1;
        *keys = k;
        *cap = c;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    (*keys)[(*n)++] = copy;
    return 0;
}

int cli_read_keys(const cli *o, char ***keys_out, size_t *n_out)
{
    char **keys = NULL;
    size_t n = 0, cap = 0;
    *keys_out = NULL;
    *n_out = 0;
    if (o->n_args > 0) {
        for (int i = 0; i < o->n_args; i++)
            if (push(&keys, &n, &cap, o->args[i], strlen(o->args[i])) != 0)
                goto nomem;
    } else {
        char *line = NULL;
        size_t line_cap = 0;
        ssize_t len;
        while ((len = getline(&line, &line_cap, stdin)) >= 0) {
            while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
                len--;
            if (len == 0)
                continue; /* keys are never empty */
            if (push(&keys, &n, &cap, line, (size_t)len) != 0) {
                free(line);
                goto nomem;
            }
        }
        free(line);
    }
    *keys_out = keys;
    *n_out = n;
    return 0;
nomem:
    cli_free_keys(keys, n);
    fprintf(stderr, "%s: out of memory\n", o->prog);
    return CLI_SERVER;
}

bool cli_parse_page(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return false;
    *out = v;
    return true;
}
