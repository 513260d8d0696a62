/*
 * redis_test.h: a real redis-server for a unit test, on a free port of
 * 127.0.0.1 in a temporary directory, killed at exit.
 *
 *   const char *url = redis_test_start();   // "redis://127.0.0.1:PORT", or NULL
 *   ...
 *   redis_test_stop();
 *
 * $HF3FS_REDIS_SERVER names the binary (default redis-server on PATH).
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
               "--logfile", "", (char *)NULL);
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
