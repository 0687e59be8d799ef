// SPDX-License-Identifier: Apache-2.0
/* See strbuf.h. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "strbuf.h"

void strbuf_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;
        size_t n;

        if (!errlen)
                return;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        n = strlen(err);
        while (n > 0 && err[n - 1] == '\n')
                err[--n] = '\0';
}

void strbuf_append(char *buf, size_t size, size_t *o, const char *fmt, ...)
{
        va_list ap;
        int n;

        if (!size || *o >= size)
                return;
        va_start(ap, fmt);
        n = vsnprintf(buf + *o, size - *o, fmt, ap);
        va_end(ap);
        if (n > 0)
                *o += (size_t)n;
        if (*o >= size)
                *o = size - 1;
}
