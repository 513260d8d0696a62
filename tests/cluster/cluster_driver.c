/*
 * cluster_driver: the cluster routing (src/cluster/) at the command of a test script.
 *
 * tests/integration/test_redis_cluster.py starts a real cluster, runs this
 * program and talks to it one line at a time: a command on stdin, one JSON
 * line on stdout. Tokens are separated by spaces; inside a token, %XX is
 * the byte 0xXX (so keys may hold spaces or any byte).
 *
 *   open seeds=H:P,H:P [user=U] [password=P] [connect=MS] [timeout=MS]
 *                               -> {"ok":true} | ERROR
 *   close                       -> {"ok":true}
 *   slot [KEY]                  -> {"slot":N} (no KEY: the empty key)
 *   run KEY ARG...              -> RESULT    (routed by the slot of KEY)
 *   runi KEY ARG...             -> RESULT    (the same, CLUSTER_CMD_IDEMPOTENT)
 *   node INDEX ARG...           -> RESULT    (sent as is to known node INDEX)
 *   batch N, then N lines "KEY ARG..."
 *                               -> {"rc":CODE,"results":[RESULT...]} (one cluster_exec)
 *   slotnode SLOT               -> {"node":INDEX,"addr":"H:P"} (-1 and "" if none)
 *   stats                       -> {"refreshes":..,"refresh_failures":..,"rounds":..,
 *                                   "nodes":[{"addr":..,"primary":..,...}]}
 *   quit
 *
 * RESULT is {"reply":R} or ERROR; ERROR is {"error":CODE,"name":..,"detail":..}.
 * R: a bulk string is a JSON string (bytes >= 0x80 as \u0080..\u00ff), an
 * integer a number, nil null, an array a list, a status {"status":S}, an
 * error reply {"err":S}.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "util/hostport.h"

static cluster_t *cluster;

static void json_string(const char *s, size_t len)
{
    putchar('"');
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static void json_reply(const redisReply *r)
{
    switch (r->type) {
    case REDIS_REPLY_STRING: json_string(r->str, r->len); break;
    case REDIS_REPLY_INTEGER: printf("%lld", r->integer); break;
    case REDIS_REPLY_NIL: printf("null"); break;
    case REDIS_REPLY_STATUS:
        printf("{\"status\":");
        json_string(r->str, r->len);
        putchar('}');
        break;
    case REDIS_REPLY_ERROR:
        printf("{\"err\":");
        json_string(r->str, r->len);
        putchar('}');
        break;
    case REDIS_REPLY_ARRAY:
        putchar('[');
        for (size_t i = 0; i < r->elements; i++) {
            if (i)
                putchar(',');
            json_reply(r->element[i]);
        }
        putchar(']');
        break;
    default: printf("\"?\"");
    }
}

static void json_error(int code)
{
    const char *detail = cluster ? cluster_last_error(cluster) : "";
    printf("{\"error\":%d,\"name\":", code);
    json_string(cluster_strerror(code), strlen(cluster_strerror(code)));
    printf(",\"detail\":");
    json_string(detail, strlen(detail));
    putchar('}');
}

static void json_result(const cluster_cmd *cmd)
{
    if (cmd->error != CLUSTER_OK) {
        json_error(cmd->error);
        return;
    }
    printf("{\"reply\":");
    json_reply(cmd->reply);
    putchar('}');
}

/* A line split into tokens, %XX decoded in place. */
typedef struct tokens {
    char *line;
    size_t n;
    const char *argv[256];
    size_t len[256];
} tokens;

static void tokenize(char *line, tokens *t)
{
    t->n = 0;
    char *p = line;
    while (*p && t->n < 256) {
        while (*p == ' ' || *p == '\n' || *p == '\r')
            p++;
        if (!*p)
            break;
        char *out = p, *start = p;
        while (*p && *p != ' ' && *p != '\n' && *p != '\r') {
            if (p[0] == '%' && hf_hex_digit(p[1]) >= 0 && hf_hex_digit(p[2]) >= 0) {
                *out++ = (char)(hf_hex_digit(p[1]) * 16 + hf_hex_digit(p[2]));
                p += 3;
            } else {
                *out++ = *p++;
            }
        }
        bool end = !*p;
        if (!end)
            p++;
        t->argv[t->n] = start;
        t->len[t->n++] = (size_t)(out - start);
        *out = '\0';
        if (end)
            break;
    }
}

static const char *option(const tokens *t, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 1; i < t->n; i++)
        if (strncmp(t->argv[i], name, n) == 0 && t->argv[i][n] == '=')
            return t->argv[i] + n + 1;
    return NULL;
}

static void cmd_open(const tokens *t)
{
    cluster_close(cluster);
    cluster = NULL;
    const char *connect = option(t, "connect"), *timeout = option(t, "timeout");
    cluster_options opt = {
        .seeds = option(t, "seeds"),
        .user = option(t, "user"),
        .password = option(t, "password"),
        .connect_timeout_ms = connect ? atoi(connect) : 0,
        .command_timeout_ms = timeout ? atoi(timeout) : 0,
    };
    char err[256];
    int rc = cluster_open(&opt, &cluster, err, sizeof(err));
    if (rc == CLUSTER_OK) {
        printf("{\"ok\":true}");
        return;
    }
    printf("{\"error\":%d,\"name\":", rc);
    json_string(cluster_strerror(rc), strlen(cluster_strerror(rc)));
    printf(",\"detail\":");
    json_string(err, strlen(err));
    putchar('}');
}

/* run/runi/node: the command is t->argv[2...]. */
static void cmd_one(tokens *t, int slot, int node, unsigned flags)
{
    cluster_cmd cmd = {.argc = (int)t->n - 2,
                       .argv = t->argv + 2,
                       .argvlen = t->len + 2,
                       .slot = slot,
                       .node = node,
                       .flags = flags};
    cluster_exec(cluster, &cmd, 1);
    json_result(&cmd);
    freeReplyObject(cmd.reply);
}

static void cmd_batch(size_t n)
{
    tokens *lines = calloc(n ? n : 1, sizeof(tokens));
    cluster_cmd *cmds = calloc(n ? n : 1, sizeof(cluster_cmd));
    for (size_t i = 0; i < n; i++) {
        size_t cap = 0;
        if (getline(&lines[i].line, &cap, stdin) < 0)
            lines[i].line = strdup("");
        tokenize(lines[i].line, &lines[i]);
        cmds[i].argc = (int)lines[i].n - 1;
        cmds[i].argv = lines[i].argv + 1;
        cmds[i].argvlen = lines[i].len + 1;
        cmds[i].slot = lines[i].n ? cluster_key_slot(lines[i].argv[0], lines[i].len[0]) : 0;
    }
    int rc = cluster_exec(cluster, cmds, n);
    printf("{\"rc\":%d,\"results\":[", rc);
    for (size_t i = 0; i < n; i++) {
        if (i)
            putchar(',');
        json_result(&cmds[i]);
        freeReplyObject(cmds[i].reply);
        free(lines[i].line);
    }
    printf("]}");
    free(lines);
    free(cmds);
}

static void cmd_stats(void)
{
    cluster_stats st;
    cluster_get_stats(cluster, &st);
    printf("{\"refreshes\":%llu,\"refresh_failures\":%llu,\"rounds\":%llu,\"nodes\":[",
           (unsigned long long)st.refreshes, (unsigned long long)st.refresh_failures,
           (unsigned long long)st.rounds);
    for (size_t i = 0; i < st.nodes; i++) {
        cluster_node_stats ns;
        cluster_get_node_stats(cluster, i, &ns);
        printf("%s{\"addr\":", i ? "," : "");
        json_string(ns.addr, strlen(ns.addr));
        printf(",\"primary\":%s,\"replica\":%s,\"connected\":%s,\"down\":%s,\"slots\":%u,"
               "\"requests\":%llu,\"moved\":%llu,\"ask\":%llu,\"retries\":%llu,"
               "\"errors\":%llu,\"connects\":%llu}",
               ns.primary ? "true" : "false", ns.replica ? "true" : "false",
               ns.connected ? "true" : "false", ns.down ? "true" : "false", ns.slots,
               (unsigned long long)ns.requests, (unsigned long long)ns.moved,
               (unsigned long long)ns.ask, (unsigned long long)ns.retries,
               (unsigned long long)ns.errors, (unsigned long long)ns.connects);
    }
    printf("]}");
}

static void cmd_slotnode(int slot)
{
    int node = cluster_slot_node(cluster, slot);
    cluster_node_stats ns = {.addr = ""};
    if (node >= 0)
        cluster_get_node_stats(cluster, (size_t)node, &ns);
    printf("{\"node\":%d,\"addr\":", node);
    json_string(ns.addr, strlen(ns.addr));
    putchar('}');
}

/* One command line; false on quit or end of input. */
static bool dispatch(tokens *t)
{
    const char *verb = t->n ? t->argv[0] : "";
    bool need_cluster = strcmp(verb, "open") && strcmp(verb, "quit") && strcmp(verb, "close") &&
                        strcmp(verb, "slot");
    if (need_cluster && !cluster) {
        printf("{\"error\":0,\"name\":\"not open\",\"detail\":\"\"}");
    } else if (!strcmp(verb, "open")) {
        cmd_open(t);
    } else if (!strcmp(verb, "close")) {
        cluster_close(cluster);
        cluster = NULL;
        printf("{\"ok\":true}");
    } else if (!strcmp(verb, "slot") && t->n <= 2) { /* no KEY: the empty key */
        printf("{\"slot\":%d}",
               t->n == 2 ? cluster_key_slot(t->argv[1], t->len[1]) : cluster_key_slot("", 0));
    } else if ((!strcmp(verb, "run") || !strcmp(verb, "runi")) && t->n >= 3) {
        cmd_one(t, cluster_key_slot(t->argv[1], t->len[1]), -1,
                verb[3] == 'i' ? CLUSTER_CMD_IDEMPOTENT : 0);
    } else if (!strcmp(verb, "node") && t->n >= 3) {
        cmd_one(t, -1, atoi(t->argv[1]), 0);
    } else if (!strcmp(verb, "batch") && t->n == 2) {
        cmd_batch((size_t)strtoul(t->argv[1], NULL, 10));
    } else if (!strcmp(verb, "slotnode") && t->n == 2) {
        cmd_slotnode(atoi(t->argv[1]));
    } else if (!strcmp(verb, "stats")) {
        cmd_stats();
    } else if (!strcmp(verb, "quit")) {
        return false;
    } else {
        printf("{\"error\":0,\"name\":\"bad command\",\"detail\":\"\"}");
    }
    putchar('\n');
    fflush(stdout);
    return true;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    char *line = NULL;
    size_t cap = 0;
    tokens t;
    while (getline(&line, &cap, stdin) >= 0) {
        tokenize(line, &t);
        if (!dispatch(&t))
            break;
    }
    free(line);
    cluster_close(cluster);
    return 0;
}
