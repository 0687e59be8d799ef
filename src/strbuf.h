/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Formatting into fixed-size caller buffers: the error texts every module
 * fills (char *err, size_t errlen) and the SQL and messages built piece by
 * piece. Truncates, never overflows, always NUL-terminates a buffer of at
 * least one byte. Knows nothing of the relay.
 */
#ifndef RELAY_STRBUF_H
#define RELAY_STRBUF_H

#include <stddef.h>

/*
 * strbuf_err() - printf into @err (@errlen bytes, truncated), then drop
 * trailing newlines (libpq's messages end in one). @err is the caller's.
 */
void strbuf_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * strbuf_append() - printf into @buf (@size bytes) at offset *@o, truncating
 * at the end of @buf; *@o moves past what was written (at most @size - 1).
 * Nothing happens once *@o has reached @size - 1. @buf is the caller's.
 */
void strbuf_append(char *buf, size_t size, size_t *o, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

#endif
