// SPDX-License-Identifier: Apache-2.0
/*
 * Line-at-a-time logging to stderr or a log file, as text or JSON lines.
 * Knows nothing of PostgreSQL or Kafka.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOG_MSG_MAX 4096

/* Read by librdkafka's threads while the main thread may change them. */
static _Atomic int min_level = LOG_LEVEL_INFO;
static _Atomic int format = LOG_FORMAT_TEXT;
static _Atomic bool to_file;
static int saved_stderr = -1;  /* the original stderr, once a log file replaced it */

static const char *const level_names[] = {"debug", "info", "warning", "error"};

void log_set_level(enum log_level level)
{
        min_level = level;
}

int log_enabled(enum log_level level)
{
        return (int)level >= min_level;
}

int log_level_parse(const char *name, enum log_level *ret)
{
        for (int i = LOG_LEVEL_DEBUG; i <= LOG_LEVEL_ERROR; i++) {
                if (strcmp(name, level_names[i]) == 0) {
                        *ret = (enum log_level)i;
                        return 0;
                }
        }
        return -EINVAL;
}

void log_set_format(enum log_format f)
{
        format = f;
}

int log_open(const char *path)
{
        int fd;

        if (!path) {
                if (saved_stderr >= 0 && dup2(saved_stderr, STDERR_FILENO) < 0)
                        return -errno;
                to_file = false;
                return 0;
        }
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);
        if (fd < 0)
                return -errno;
        if (fd == STDERR_FILENO) {
                /*
                 * Started with stderr closed: the file took its number, which
                 * is the goal. Closing it after dup2() onto itself would leave
                 * number 2 to the next socket, and the log would go there.
                 */
                if (fcntl(fd, F_SETFD, 0) < 0) {
                        int r = -errno;

                        close(fd);
                        return r;
                }
                to_file = true;
                return 0;
        }
        if (saved_stderr < 0) {
                saved_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
                if (saved_stderr < 0) {
                        int r = -errno;

                        close(fd);
                        return r;
                }
        }
        if (dup2(fd, STDERR_FILENO) < 0) {
                int r = -errno;

                close(fd);
                return r;
        }
        close(fd);
        to_file = true;
        return 0;
}

/* "2026-01-02T03:04:05.678Z" into @buf (at least 32 bytes); returns its length. */
static int format_time(char *buf, size_t size)
{
        struct timespec ts;
        struct tm tm;
        int n;

        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        n = (int)strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
        return n + snprintf(buf + n, size - (size_t)n, ".%03dZ", (int)(ts.tv_nsec / 1000000));
}

/*
 * Length of the well-formed UTF-8 sequence at @s (at most @n bytes), 0 if
 * there is none: the table of well-formed byte sequences in the Unicode
 * Standard, chapter 3.9 (no overlong forms, no surrogates, at most U+10FFFF).
 */
static size_t utf8_len(const unsigned char *s, size_t n)
{
        unsigned char c = s[0], lo = 0x80, hi = 0xbf;
        size_t len;

        if (c < 0x80)
                return 1;
        if (c >= 0xc2 && c <= 0xdf)
                len = 2;
        else if (c >= 0xe0 && c <= 0xef)
                len = 3;
        else if (c >= 0xf0 && c <= 0xf4)
                len = 4;
        else
                return 0;
        if (c == 0xe0)
                lo = 0xa0;
        else if (c == 0xed)
                hi = 0x9f;
        else if (c == 0xf0)
                lo = 0x90;
        else if (c == 0xf4)
                hi = 0x8f;
        if (n < len || s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < len; i++)
                if (s[i] < 0x80 || s[i] > 0xbf)
                        return 0;
        return len;
}

/*
 * Append @s (@n bytes) to @out for a text line; @out has room for 4 * @n
 * bytes. Line breaks and other control bytes (tab excepted) are escaped as
 * \n, \r and \xNN: a message is one line, and data in it (a work ID, a
 * table name, a multi-line libpq error) cannot start a line of its own.
 */
static size_t text_escape(char *out, const char *s, size_t n)
{
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;

        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];

                if ((c >= 0x20 && c != 0x7f) || c == '\t') {
                        out[o++] = (char)c;
                } else if (c == '\n' || c == '\r') {
                        out[o++] = '\\';
                        out[o++] = c == '\n' ? 'n' : 'r';
                } else {
                        memcpy(out + o, "\\x", 2);
                        out[o + 2] = hex[c >> 4];
                        out[o + 3] = hex[c & 15];
                        o += 4;
                }
        }
        return o;
}

/* Append @s (@n bytes) to @out as a JSON string body; @out has room for 6 * @n bytes. */
static size_t json_escape(char *out, const char *s, size_t n)
{
        static const char hex[] = "0123456789abcdef";
        const unsigned char *p = (const unsigned char *)s;
        size_t o = 0, i = 0;

        while (i < n) {
                unsigned char c = p[i];
                size_t len;

                if (c == '"' || c == '\\') {
                        out[o++] = '\\';
                        out[o++] = (char)c;
                        i++;
                } else if (c < 0x20 || c == 0x7f) {
                        const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;

                        if (esc) {
                                memcpy(out + o, esc, 2);
                                o += 2;
                        } else {
                                memcpy(out + o, "\\u00", 4);
                                out[o + 4] = hex[c >> 4];
                                out[o + 5] = hex[c & 15];
                                o += 6;
                        }
                        i++;
                } else if ((len = utf8_len(p + i, n - i)) > 0) {
                        memcpy(out + o, p + i, len);
                        o += len;
                        i += len;
                } else {
                        memcpy(out + o, "\\ufffd", 6);
                        o += 6;
                        i++;
                }
        }
        return o;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
        char msg[LOG_MSG_MAX + 1], line[LOG_MSG_MAX * 6 + 128], ts[40];
        size_t n;
        int m;
        va_list ap;

        if ((int)level < min_level)
                return;
        va_start(ap, fmt);
        m = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (m < 0)
                m = 0;
        if ((size_t)m >= sizeof(msg)) {
                m = LOG_MSG_MAX;
                memcpy(msg + m - 3, "...", 3);
        }
        if (format == LOG_FORMAT_JSON) {
                format_time(ts, sizeof(ts));
                n = (size_t)snprintf(line, sizeof(line), "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"",
                                     ts, level_names[level]);
                n += json_escape(line + n, msg, (size_t)m);
                memcpy(line + n, "\"}\n", 3);
                n += 3;
        } else {
                n = 0;
                if (to_file) {
                        n = (size_t)format_time(line, sizeof(line));
                        line[n++] = ' ';
                }
                n += (size_t)snprintf(line + n, sizeof(line) - n, "outbox-relay: %s: ", level_names[level]);
                n += text_escape(line + n, msg, (size_t)m);
                line[n++] = '\n';
        }
        /* One write so lines from several threads stay whole; errors ignored. */
        if (write(STDERR_FILENO, line, n) < 0)
                return;
}
