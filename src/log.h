/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging, one line per event. Text lines in the style of PostgreSQL's
 * client tools, "outbox-relay: level: message" (prefixed with a UTC
 * timestamp when written to a log file), or JSON lines
 * {"ts":"2026-01-02T03:04:05.678Z","level":"info","msg":"..."}. Lower-case
 * messages, quoted names, no trailing period. Only the orchestrator and main
 * log; leaf modules return errors and let their caller log once.
 */
#ifndef RELAY_LOG_H
#define RELAY_LOG_H

enum log_level {
        LOG_LEVEL_DEBUG = 0,
        LOG_LEVEL_INFO = 1,
        LOG_LEVEL_WARNING = 2,
        LOG_LEVEL_ERROR = 3,
};

enum log_format {
        LOG_FORMAT_TEXT = 0,
        LOG_FORMAT_JSON = 1,
};

/*
 * log_set_level() - set the lowest level written; LOG_LEVEL_INFO by default.
 * Runtime, not compile time, so --verbose works on any build.
 */
void log_set_level(enum log_level level);

/* log_enabled() - true if messages of @level are written (to skip formatting). */
int log_enabled(enum log_level level);

/*
 * log_level_parse() - the level named @name ("debug", "info", "warning",
 * "error", as --log-level takes them) in @ret; -EINVAL for another name.
 */
int log_level_parse(const char *name, enum log_level *ret);

/* log_set_format() - text (the default) or JSON lines, from the next line on. */
void log_set_format(enum log_format format);

/*
 * log_open() - append the log to the file at @path from now on, created
 * with mode 0640 if missing; NULL: back to the original stderr. The file is
 * put on file descriptor 2 with dup2(2), so that lines from other threads
 * and anything else written to stderr land in it too, and reopening (after
 * a log rotation moved the file) never leaves a moment without a log.
 * Returns 0, or -errno from open(2) or dup2(2) with the log unchanged.
 */
int log_open(const char *path);

/*
 * log_msg() - write one line to the log with a single write(2), so
 * concurrent lines from librdkafka threads do not interleave. Messages
 * longer than 4096 bytes are truncated with "...". In JSON, the message is
 * escaped as RFC 8259 requires and bytes that are not UTF-8 become U+FFFD.
 */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) do { if (log_enabled(LOG_LEVEL_DEBUG)) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
