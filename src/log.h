/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Logging to stderr, one line per event, in the style of PostgreSQL's client
 * tools: "outbox-relay: level: message". Lower-case messages, quoted names, no
 * trailing period. Only the orchestrator and main log; leaf modules return
 * errors and let their caller log once.
 */
#ifndef RELAY_LOG_H
#define RELAY_LOG_H

enum log_level {
        LOG_LEVEL_DEBUG = 0,
        LOG_LEVEL_INFO = 1,
        LOG_LEVEL_WARNING = 2,
        LOG_LEVEL_ERROR = 3,
};

/*
 * log_set_level() - set the lowest level written; LOG_LEVEL_INFO by default.
 * Runtime, not compile time, so --verbose works on any build.
 */
void log_set_level(enum log_level level);

/* log_enabled() - true if messages of @level are written (to skip formatting). */
int log_enabled(enum log_level level);

/*
 * log_msg() - write one line "outbox-relay: <level>: <message>\n" to stderr
 * with a single write(2), so concurrent lines from librdkafka threads do not
 * interleave. Messages longer than 4096 bytes are truncated with "...".
 */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) do { if (log_enabled(LOG_LEVEL_DEBUG)) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__); } while (0)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LEVEL_WARNING, __VA_ARGS__)
#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
