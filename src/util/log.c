/*
 * log.c: see log.h. Lines longer than LINE_MAX_BYTES are cut with "...".
 */
#include "util/log.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 2048

static atomic_int current_level = LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void log_set_level(log_level level)
{
    atomic_store_explicit(&current_level, (int)level, memory_order_relaxed);
}

bool log_enabled(log_level level)
{
    return (int)level <= atomic_load_explicit(&current_level, memory_order_relaxed);
}

int log_parse_level(const char *name, log_level *level)
{
    for (int i = LOG_ERROR; i <= LOG_DEBUG; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *level = (log_level)i;
            return 0;
        }
    }
    return -1;
}

const char *log_level_name(log_level level)
{
    return (unsigned)level <= LOG_DEBUG ? level_names[level] : "?";
}

static size_t put_timestamp(char *line, size_t size)
{
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(line, size, "%Y-%m-%dT%H:%M:%S", &tm);
    int more = snprintf(line + n, size - n, ".%03ldZ ", now.tv_nsec / 1000000);
    return n + (more > 0 ? (size_t)more : 0);
}

__attribute__((format(printf, 2, 0))) static void write_line(const char *tag, const char *fmt,
                                                             va_list ap)
{
    char line[LINE_MAX_BYTES];
    size_t n = put_timestamp(line, sizeof line);
    n += (size_t)snprintf(line + n, sizeof line - n, "%s: ", tag);
    int text = vsnprintf(line + n, sizeof line - n, fmt, ap);
    if (text < 0)
        text = 0;
    if ((size_t)text >= sizeof line - n - 1) {
        n = sizeof line - 5;
        memcpy(line + n, "...", 3);
        n += 3;
    } else {
        n += (size_t)text;
    }
    line[n++] = '\n';
    /* One write per line; a short write to stderr is not worth a retry loop. */
    ssize_t ignored = write(STDERR_FILENO, line, n);
    (void)ignored;
}

void log_vmsg(log_level level, const char *fmt, va_list ap)
{
    if (log_enabled(level))
        write_line(log_level_name(level), fmt, ap);
}

void log_line(const char *tag, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    write_line(tag, fmt, ap);
    va_end(ap);
}

void log_msg(log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vmsg(level, fmt, ap);
    va_end(ap);
}

int hf_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
