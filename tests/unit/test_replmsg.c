// SPDX-License-Identifier: Apache-2.0
/* Unit tests of the streaming replication message encoding (replmsg.c). */
#include <errno.h>

#include "unit_check.h"
#include "replmsg.h"

static void test_xlogdata(void)
{
        /* 'w', dataStart 0/1551298, walEnd 0/1551468, sendTime 1, then "{}" */
        const char msg[] = "w\0\0\0\0\x01\x55\x12\x98\0\0\0\0\x01\x55\x14\x68\0\0\0\0\0\0\0\x01{}";
        struct replmsg m;

        CHECK_INT(replmsg_parse(msg, sizeof(msg) - 1, &m), 0);
        CHECK_INT(m.kind, REPLMSG_XLOGDATA);
        CHECK_INT(m.data_start, 0x1551298);
        CHECK_INT(m.wal_end, 0x1551468);
        CHECK_INT(m.send_time_us, 1);
        CHECK_INT(m.data_len, 2);
        CHECK(memcmp(m.data, "{}", 2) == 0);
        /* Truncated header. */
        CHECK_INT(replmsg_parse(msg, REPLMSG_XLOGDATA_HDR - 1, &m), -EBADMSG);
        /* Empty data is legal. */
        CHECK_INT(replmsg_parse(msg, REPLMSG_XLOGDATA_HDR, &m), 0);
        CHECK_INT(m.data_len, 0);
}

static void test_keepalive(void)
{
        const char msg[] = "k\0\0\0\x01\0\0\0\x10\0\0\0\0\0\0\0\x02\x01";
        struct replmsg m = {0};

        CHECK_INT(replmsg_parse(msg, sizeof(msg) - 1, &m), 0);
        CHECK_INT(m.kind, REPLMSG_KEEPALIVE);
        CHECK_INT(m.wal_end, 0x100000010ULL);
        CHECK_INT(m.send_time_us, 2);
        CHECK_INT(m.reply_requested, 1);
        CHECK_INT(replmsg_parse(msg, sizeof(msg) - 2, &m), -EBADMSG);
        CHECK_INT(replmsg_parse("x", 1, &m), -EBADMSG);
        CHECK_INT(replmsg_parse("", 0, &m), -EBADMSG);
}

static void test_status_update(void)
{
        char buf[REPLMSG_STATUS_LEN];
        /* 2000-01-01 00:00:01 UTC as Unix µs. */
        int64_t now = (REPLMSG_PG_EPOCH_OFFSET_S + 1) * 1000000;

        CHECK_INT(replmsg_status_update(buf, 0x1000000AAULL, 0x2BBULL, 0x3CCULL, now, 1), 34);
        CHECK_INT(buf[0], 'r');
        CHECK_INT(replmsg_get_u64(buf + 1), 0x1000000AAULL);
        CHECK_INT(replmsg_get_u64(buf + 9), 0x2BB);
        CHECK_INT(replmsg_get_u64(buf + 17), 0x3CC);
        CHECK_INT(replmsg_get_u64(buf + 25), 1000000);
        CHECK_INT(buf[33], 1);
}

int main(void)
{
        test_xlogdata();
        test_keepalive();
        test_status_update();
        return check_summary();
}
