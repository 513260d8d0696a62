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
    char dir[4096] = "";
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
    snprintf(redis_test_module_path, sizeof redis_test_module_path, "%s/hf3fs_metad_redis.so",
             dir);
    if (redis_test_module_path[0] != '/') { /* redis-server runs in its own --dir */
        char cwd[2048];
        if (getcwd(cwd, sizeof cwd)) {
            char rel[4096];
            snprintf(rel, sizeof rel, "%s", redis_test_module_path);
            snprintf(redis_test_module_path, sizeof redis_test_module_path, "%s/%s", cwd, rel);
        }
    }
    return access(redis_test_module_path, R_OK) == 0 ? redis_test_module_path : NULL;
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
    pid_t pid = fork();
    if (pid == 0) {
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
