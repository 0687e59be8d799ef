// SPDX-License-Identifier: Apache-2.0
/* Unit tests of strbuf.c: truncation, termination and the offset. */
#include <string.h>

#include "unit_check.h"
#include "strbuf.h"

static void test_append(void)
{
        char buf[8];
        size_t o = 0;

        strbuf_append(buf, sizeof(buf), &o, "%s", "abc");
        CHECK_STR(buf, "abc");
        CHECK_INT(o, 3);
        strbuf_append(buf, sizeof(buf), &o, "%d", 1234);
        CHECK_STR(buf, "abc1234");
        CHECK_INT(o, 7);
        /* full: truncated, terminated, the offset stays at the last byte */
        strbuf_append(buf, sizeof(buf), &o, "xyz");
        CHECK_STR(buf, "abc1234");
        CHECK_INT(o, 7);
        o = 5;
        strbuf_append(buf, sizeof(buf), &o, "%s", "longer than the rest");
        CHECK_STR(buf, "abc12lo");
        CHECK_INT(o, 7);
        o = 0;
        strbuf_append(buf, 0, &o, "x");     /* no room at all: nothing written */
        CHECK_INT(o, 0);
}

static void test_err(void)
{
        char err[16];

        strbuf_err(err, sizeof(err), "%s\n\n", "server said");
        CHECK_STR(err, "server said");
        strbuf_err(err, sizeof(err), "%s", "a message longer than sixteen bytes");
        CHECK_STR(err, "a message longe");
        strbuf_err(err, sizeof(err), "%s", "");
        CHECK_STR(err, "");
        strbuf_err(err, 0, "%s", "not written");
        CHECK_STR(err, "");
}

int main(void)
{
        test_append();
        test_err();
        return check_summary();
}
