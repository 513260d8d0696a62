/*
 * redis_test.h: a real redis-server for a unit test, on a free port of
 * 127.0.0.1 in a temporary directory, killed at exit.
 *
 *   const char *url = redis_test_start();   // "redis://127.0.0.1:PORT", or NULL
 *   ...
 *   redis_test_stop();
 *
 * $HF3FS_REDIS_SERVER names the binary (default redis-server on PATH). It
 * loads the hf3fs-metad module (redis_test_module(): $HF3FS_REDIS_MODULE,
 * else hf3fs_metad_redis.so next to $HF3FS_METAD_BIN, else in the build
 * directory of the test binary itself: build/tests/x -> build/).
 */
#ifndef HF_TEST_REDIS_H
#define HF_TEST_REDIS_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t redis_test_pid;
static char redis_test_dir[64];
static char redis_test_url[64];

static int redis_test_free_port(void)
{
    for (int tries = 0; tries < 50; tries++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
            close(fd);
            continue;
        }
        close(fd);
        int port = ntohs(a.sin_port);
        if (port + 10000 > 65535)
            continue;
        fd = socket(AF_INET, SOCK_STREAM, 0); /* the cluster bus port too */
        a.sin_port = htons((uint16_t)(port + 10000));
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok)
            return port;
    }
    return -1;
}

static char redis_test_module_path[4096];

/* The module's .so for the servers the tests start (see above), or NULL if
 * none is found. */
static const char *redis_test_module(void)
{
    const char *env = getenv("HF3FS_REDIS_MODULE");
    if (env && *env)
        return env;
    const char *bin = getenv("HF3FS_METAD_BIN");
    char dir[2048] = "";
    if (bin && *bin) {
        snprintf(dir, sizeof dir, "%s", bin);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    } else {
        /* build/tests/test_x or build/fuzz/fuzz_x: the module is in build/ */
        ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
        if (n <= 0)
            return NULL;
        dir[n] = '\0';
        for (int up = 0; up < 2; up++) {
            char *slash = strrchr(dir, '/');
            if (!slash)
                return NULL;
            *slash = '\0';
        }
    }
    snprintf(redis_test_module_path, sizeof redis_test_module_path, "%s/hf3fs_metad_redis.so", dir);
    if (redis_test_module_path[0] != '/') { /* redis-server runs in its own --dir */
        char *abs = realpath(redis_test_module_path, NULL);
        if (abs) {
            snprintf(redis_test_module_path, sizeof redis_test_module_path, "%s", abs);
            free(abs);
        }
    }
    return access(redis_test_module_path, R_OK) == 0 ? redis_test_module_path : NULL;
}

/* For a module built with -fsanitize=address: the ASan runtime that must be
 * preloaded into redis-server (the one this process runs with, from
 * /proc/self/maps), or NULL. */
static const char *redis_test_asan_runtime(const char *module)
{
    static char lib[4096];
    FILE *f = fopen(module, "rb");
    if (!f)
        return NULL;
    static char buf[1 << 16];
    size_t n, carry = 0;
    int asan = 0;
    while (!asan && (n = fread(buf + carry, 1, sizeof buf - carry, f)) > 0) {
        n += carry;
        for (size_t i = 0; i + 10 <= n && !asan; i++)
            asan = memcmp(buf + i, "libasan.so", 10) == 0;
        carry = n < 10 ? n : 10;
        memmove(buf, buf + n - carry, carry);
    }
    fclose(f);
    if (!asan)
        return NULL;
    f = fopen("/proc/self/maps", "r");
    if (!f)
        return NULL;
    char line[4096];
    const char *found = NULL;
    while (!found && fgets(line, sizeof line, f)) {
        char *path = strchr(line, '/');
        if (path && strstr(path, "/libasan.so")) {
            path[strcspn(path, "\n")] = '\0';
            snprintf(lib, sizeof lib, "%s", path);
            found = lib;
        }
    }
    fclose(f);
    return found;
}

static void redis_test_stop(void)
{
    if (redis_test_pid > 0) {
        kill(redis_test_pid, SIGKILL);
        waitpid(redis_test_pid, NULL, 0);
        redis_test_pid = 0;
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", redis_test_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", redis_test_dir);
    }
}

static const char *redis_test_start(void)
{
    const char *bin = getenv("HF3FS_REDIS_SERVER");
    if (!bin)
        bin = "redis-server";
    snprintf(redis_test_dir, sizeof redis_test_dir, "/tmp/hf3fs-redis-unit.XXXXXX");
    if (!mkdtemp(redis_test_dir))
        return NULL;
    int port = redis_test_free_port();
    if (port < 0)
        return NULL;
    const char *module = redis_test_module();
    if (!module) {
        fprintf(stderr, "redis_test: no hf3fs_metad_redis.so (build it: make; or set "
                        "HF3FS_REDIS_MODULE)\n");
        return NULL;
    }
    char portbuf[16];
    snprintf(portbuf, sizeof portbuf, "%d", port);
    const char *asan = redis_test_asan_runtime(module);
    pid_t pid = fork();
    if (pid == 0) {
        if (asan) {
            setenv("LD_PRELOAD", asan, 1);
            setenv("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1", 1);
        }
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execlp(bin, bin, "--port", portbuf, "--bind", "127.0.0.1", "--dir", redis_test_dir,
               "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
               "--logfile", "", "--loadmodule", module, (char *)NULL);
        _exit(127);
    }
    redis_test_pid = pid;
    atexit(redis_test_stop);
    for (int i = 0; i < 500; i++) {
        struct timeval tv = {1, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type == REDIS_REPLY_STATUS;
            if (r)
                freeReplyObject(r);
            redisFree(c);
            if (ok) {
                snprintf(redis_test_url, sizeof redis_test_url, "redis://127.0.0.1:%d", port);
                return redis_test_url;
            }
        } else if (c) {
            redisFree(c);
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            redis_test_pid = 0;
            return NULL;
        }
        struct timespec ms10 = {0, 10000000};
        nanosleep(&ms10, NULL);
    }
    return NULL;
}

#endif
