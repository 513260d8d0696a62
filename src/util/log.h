/*
 * log.h: the process's one stderr logger.
 *
 * One line per message: "2024-05-01T12:00:00.123Z warn: text". Each line is
 * written with a single write(2), so lines of concurrent threads never
 * interleave. Messages above the level set with log_set_level() are dropped
 * before formatting. Thread-safe. Used by every layer of the server (main,
 * http, api, store, wal); the level is set once by main. Beside it, hf_errf:
 * a message for the caller instead of the log.
 */
#ifndef HF_UTIL_LOG_H
#define HF_UTIL_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum log_level {
    LOG_ERROR = 0,
    LOG_WARN,
    LOG_INFO,
    LOG_DEBUG,
} log_level;

void log_set_level(log_level level);
bool log_enabled(log_level level);
/* "error", "warn", "info", "debug" -> 0 and *level, else -1. */
int log_parse_level(const char *name, log_level *level);
const char *log_level_name(log_level level);

void log_msg(log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void log_vmsg(log_level level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* A line tagged `tag` instead of a level, written whatever the level (the
 * access log, which has its own flag). */
void log_line(const char *tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A message into the caller's buffer err[errlen] (the err, errlen pairs of
 * the parsers and loaders, which log nothing themselves); returns -1, for
 * `return hf_errf(err, errlen, ...)`. */
int hf_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
