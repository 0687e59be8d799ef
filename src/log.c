// SPDX-License-Identifier: Apache-2.0
/*
 * Line-at-a-time logging to stderr. Knows nothing of PostgreSQL or Kafka.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static enum log_level min_level = LOG_LEVEL_INFO;

static const char *const level_names[] = {"debug", "info", "warning", "error"};

void log_set_level(enum log_level level)
{
        min_level = level;
}

int log_enabled(enum log_level level)
{
        return level >= min_level;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
        char buf[4096 + 64];
        int n, m;
        va_list ap;

        if (level < min_level)
                return;
        n = snprintf(buf, sizeof(buf), "outbox-relay: %s: ", level_names[level]);
        va_start(ap, fmt);
        m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m < 0)
                m = 0;
        if ((size_t)(n + m) >= sizeof(buf) - 1) {
                n = (int)sizeof(buf) - 5;
                memcpy(buf + n, "...", 3);
                n += 3;
        } else {
                n += m;
        }
        buf[n++] = '\n';
        /* One write so lines from several threads stay whole; errors ignored. */
        if (write(STDERR_FILENO, buf, (size_t)n) < 0)
                return;
}
