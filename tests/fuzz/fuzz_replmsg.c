// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the replication protocol messages (src/replmsg.c). The
 * whole input is parsed as one CopyData payload and the result compared with
 * the layout in replmsg.h, field by field. The same bytes, read as the fields
 * of a standby status update, are encoded and read back: a round trip.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "replmsg.h"

/* Big-endian, written out independently of replmsg_get_u64(). */
static uint64_t be64(const uint8_t *p)
{
        return (uint64_t)p[0] << 56 | (uint64_t)p[1] << 48 | (uint64_t)p[2] << 40 |
               (uint64_t)p[3] << 32 | (uint64_t)p[4] << 24 | (uint64_t)p[5] << 16 |
               (uint64_t)p[6] << 8 | (uint64_t)p[7];
}

static void check_parse(const uint8_t *data, size_t size)
{
        const char *buf = (const char *)data;
        struct replmsg m, untouched;
        bool want_ok;
        int r;

        memset(&m, 0xa5, sizeof(m));
        memcpy(&untouched, &m, sizeof(m));
        r = replmsg_parse(buf, size, &m);
        want_ok = size >= 1 && ((data[0] == 'w' && size >= REPLMSG_XLOGDATA_HDR) ||
                                (data[0] == 'k' && size >= REPLMSG_KEEPALIVE_LEN));
        if (!want_ok) {
                FUZZ_CHECK(r == -EBADMSG);
                FUZZ_CHECK(memcmp(&m, &untouched, sizeof(m)) == 0);
                return;
        }
        FUZZ_CHECK(r == 0);
        if (data[0] == 'w') {
                unsigned sum = 0;

                FUZZ_CHECK(m.kind == REPLMSG_XLOGDATA);
                FUZZ_CHECK(m.data_start == be64(data + 1));
                FUZZ_CHECK(m.wal_end == be64(data + 9));
                FUZZ_CHECK((uint64_t)m.send_time_us == be64(data + 17));
                /* The payload is borrowed from the input: same bytes, nothing past the end. */
                FUZZ_CHECK(m.data == buf + REPLMSG_XLOGDATA_HDR);
                FUZZ_CHECK(m.data_len == size - REPLMSG_XLOGDATA_HDR);
                for (size_t i = 0; i < m.data_len; i++)
                        sum += (unsigned char)m.data[i];
                (void)sum;
        } else {
                FUZZ_CHECK(m.kind == REPLMSG_KEEPALIVE);
                FUZZ_CHECK(m.wal_end == be64(data + 1));
                FUZZ_CHECK((uint64_t)m.send_time_us == be64(data + 9));
                FUZZ_CHECK(m.reply_requested == (data[17] != 0));
        }
        FUZZ_CHECK(replmsg_get_u64(buf + 1) == be64(data + 1));
}

static void check_status_update(const uint8_t *data, size_t size)
{
        uint8_t f[4 * 8 + 1] = {0};
        uint64_t write_lsn, flush_lsn, apply_lsn, pg_epoch_us;
        int64_t now_us;
        char *buf;

        memcpy(f, data, size < sizeof(f) ? size : sizeof(f));
        write_lsn = be64(f);
        flush_lsn = be64(f + 8);
        apply_lsn = be64(f + 16);
        now_us = (int64_t)be64(f + 24);
        pg_epoch_us = (uint64_t)REPLMSG_PG_EPOCH_OFFSET_S * 1000000;
        /*
         * Microseconds since 1970 as a clock gives them: the subtraction of
         * the 2000 epoch is signed, so times within 30 years of INT64_MIN
         * (292,000 years before 1970) would overflow; see the fuzzing report.
         */
        if (now_us < INT64_MIN + (int64_t)pg_epoch_us)
                now_us += (int64_t)pg_epoch_us;
        /* Exactly REPLMSG_STATUS_LEN bytes on the heap: a longer write is seen. */
        buf = malloc(REPLMSG_STATUS_LEN);
        FUZZ_CHECK(buf != NULL);
        FUZZ_CHECK(replmsg_status_update(buf, write_lsn, flush_lsn, apply_lsn, now_us, f[32]) ==
                   REPLMSG_STATUS_LEN);
        FUZZ_CHECK(buf[0] == 'r');
        FUZZ_CHECK(be64((uint8_t *)buf + 1) == write_lsn);
        FUZZ_CHECK(be64((uint8_t *)buf + 9) == flush_lsn);
        FUZZ_CHECK(be64((uint8_t *)buf + 17) == apply_lsn);
        FUZZ_CHECK(be64((uint8_t *)buf + 25) == (uint64_t)now_us - pg_epoch_us);
        FUZZ_CHECK(buf[33] == (f[32] ? 1 : 0));
        FUZZ_CHECK(replmsg_get_u64(buf + 9) == flush_lsn);
        free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        check_parse(data, size);
        check_status_update(data, size);
        return 0;
}
