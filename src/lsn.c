// SPDX-License-Identifier: Apache-2.0
/*
 * pg_lsn text <-> uint64_t. Pure functions, no I/O.
 */
#include "lsn.h"

#include <errno.h>
#include <stdio.h>

char *lsn_format(uint64_t lsn, char buf[LSN_STRLEN])
{
        snprintf(buf, LSN_STRLEN, "%X/%X", (unsigned)(lsn >> 32), (unsigned)lsn);
        return buf;
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int lsn_parse(const char *text, size_t len, uint64_t *ret_lsn)
{
        uint64_t hi = 0, lo = 0;
        size_t i = 0, n;
        int v;

        for (n = 0; i < len && text[i] != '/'; i++, n++) {
                v = hexval(text[i]);
                if (v < 0 || n >= 8)
                        return -EINVAL;
                hi = hi << 4 | (uint64_t)v;
        }
        if (n == 0 || i >= len)
                return -EINVAL;
        for (i++, n = 0; i < len; i++, n++) {
                v = hexval(text[i]);
                if (v < 0 || n >= 8)
                        return -EINVAL;
                lo = lo << 4 | (uint64_t)v;
        }
        if (n == 0)
                return -EINVAL;
        *ret_lsn = hi << 32 | lo;
        return 0;
}
