// SPDX-License-Identifier: Apache-2.0
/*
 * Encoding and decoding of the streaming replication protocol's CopyData
 * messages. See replmsg.h for the wire format. No I/O.
 */
#include "replmsg.h"

#include <errno.h>

uint64_t replmsg_get_u64(const char *p)
{
        const unsigned char *u = (const unsigned char *)p;
        uint64_t v = 0;

        for (int i = 0; i < 8; i++)
                v = v << 8 | u[i];
        return v;
}

static void put_u64(char *p, uint64_t v)
{
        for (int i = 7; i >= 0; i--) {
                p[i] = (char)(v & 0xff);
                v >>= 8;
        }
}

int replmsg_parse(const char *buf, size_t len, struct replmsg *ret_msg)
{
        struct replmsg m = {0};

        if (len < 1)
                return -EBADMSG;
        switch (buf[0]) {
        case 'w':
                if (len < REPLMSG_XLOGDATA_HDR)
                        return -EBADMSG;
                m.kind = REPLMSG_XLOGDATA;
                m.data_start = replmsg_get_u64(buf + 1);
                m.wal_end = replmsg_get_u64(buf + 9);
                m.send_time_us = (int64_t)replmsg_get_u64(buf + 17);
                m.data = buf + REPLMSG_XLOGDATA_HDR;
                m.data_len = len - REPLMSG_XLOGDATA_HDR;
                break;
        case 'k':
                if (len < REPLMSG_KEEPALIVE_LEN)
                        return -EBADMSG;
                m.kind = REPLMSG_KEEPALIVE;
                m.wal_end = replmsg_get_u64(buf + 1);
                m.send_time_us = (int64_t)replmsg_get_u64(buf + 9);
                m.reply_requested = buf[17] != 0;
                break;
        default:
                return -EBADMSG;
        }
        *ret_msg = m;
        return 0;
}

size_t replmsg_status_update(char buf[REPLMSG_STATUS_LEN], uint64_t write_lsn, uint64_t flush_lsn,
                             uint64_t apply_lsn, int64_t now_us, int reply_requested)
{
        /* Unsigned arithmetic: wraps instead of overflowing for any clock value. */
        uint64_t pg_now = (uint64_t)now_us - (uint64_t)REPLMSG_PG_EPOCH_OFFSET_S * 1000000u;

        buf[0] = 'r';
        put_u64(buf + 1, write_lsn);
        put_u64(buf + 9, flush_lsn);
        put_u64(buf + 17, apply_lsn);
        put_u64(buf + 25, pg_now);
        buf[33] = reply_requested ? 1 : 0;
        return REPLMSG_STATUS_LEN;
}
