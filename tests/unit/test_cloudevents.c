// SPDX-License-Identifier: Apache-2.0
/* Unit tests of the CloudEvents attribute text (cloudevents.c). */
#include "unit_check.h"
#include "cloudevents.h"

static void test_time(void)
{
        char buf[64];

        CHECK_STR(ce_format_time(INT64_C(1764475654336545), buf, sizeof(buf)),
                  "2025-11-30T04:07:34.336545Z");
        CHECK_STR(ce_format_time(0, buf, sizeof(buf)), "1970-01-01T00:00:00.000000Z");
        /* before the epoch: the fraction stays positive */
        CHECK_STR(ce_format_time(-1, buf, sizeof(buf)), "1969-12-31T23:59:59.999999Z");
        CHECK_STR(ce_format_time(-1000000, buf, sizeof(buf)), "1969-12-31T23:59:59.000000Z");
}

static void test_source(void)
{
        char buf[256], t[256];

        ce_format_source("7412345678901234567", "shop", "public", "outbox", buf, sizeof(buf));
        CHECK_STR(buf, "postgresql://7412345678901234567/shop/public.outbox");
        CHECK_STR(ce_table_of_source(buf, t, sizeof(t)), "table \"public\".\"outbox\"");
        /* dots and spaces in names are encoded, so the separator stays unambiguous */
        ce_format_source("1", "my.db", "a.b", "Foo bar", buf, sizeof(buf));
        CHECK_STR(buf, "postgresql://1/my.db/a%2Eb.Foo%20bar");
        CHECK_STR(ce_table_of_source(buf, t, sizeof(t)), "table \"a.b\".\"Foo bar\"");
        CHECK_STR(ce_table_of_source("nonsense", t, sizeof(t)), "an unknown table");
        /* truncation never overruns */
        CHECK_INT(ce_format_source("1", "db", "s", "t", buf, 10) < 10, 1);
        CHECK_INT(strlen(buf) < 10, 1);
}

static void test_record_headers(void)
{
        struct w2j_value id = {"w-1", 3, false, false}, type = {"order.created", 13, false, false};
        struct record_header extra[] = {{"tenant", "acme", 4}, {"trace", "t1", 2}};
        struct outbox_row row = {.id = &id, .key = &id, .payload = &id, .type = &type,
                                 .headers = extra, .nheaders = 2};
        struct producer_header h[16];
        static const char *const relay_order[] = {"ce_specversion", "ce_id", "ce_type", "ce_source",
                                                  "ce_time", "content-type", "ce_pglsn", "ce_pgxid",
                                                  "tenant", "trace"};
        size_t n;

        n = ce_record_headers(&row, "src", "2026-12-01T00:00:00.000000Z", "0/16B3748", "740", h, 16);
        CHECK_INT(n, 10);
        for (size_t i = 0; i < n && i < 10; i++)
                CHECK_STR(h[i].name, relay_order[i]);
        CHECK_INT(h[1].len, 3);
        CHECK_INT(memcmp(h[6].value, "0/16B3748", 9), 0);
        /* a redrive: no LSN, no xid, no time; a row without a type column */
        row.type = NULL;
        n = ce_record_headers(&row, "src", NULL, NULL, NULL, h, 16);
        CHECK_INT(n, 6);
        CHECK_STR(h[2].name, "ce_source");
        CHECK_STR(h[3].name, "content-type");
        CHECK_STR(h[4].name, "tenant");
        /* a tombstone carries no content-type: there is no data to describe */
        struct w2j_value null = {NULL, 0, true, false};

        row.payload = &null;
        n = ce_record_headers(&row, "src", NULL, NULL, NULL, h, 16);
        CHECK_INT(n, 5);
        CHECK_STR(h[2].name, "ce_source");
        CHECK_STR(h[3].name, "tenant");
        row.payload = &id;
        /* too few: nothing written past @cap */
        CHECK_INT(ce_record_headers(&row, "src", NULL, NULL, NULL, h, CE_HEADERS_MAX + 1), 0);
}

static void test_message_source(void)
{
        char buf[256], t[256];

        CHECK_INT(ce_format_message_source("7412345678901234567", "shop", "outbox", buf, sizeof(buf)),
                  strlen("postgresql://7412345678901234567/shop/message/outbox"));
        CHECK_STR(buf, "postgresql://7412345678901234567/shop/message/outbox");
        CHECK_STR(ce_table_of_source(buf, t, sizeof(t)), "logical message prefix \"outbox\"");
        /* the prefix stays one segment: '/' and ':' are encoded, '.' is not */
        ce_format_message_source("1", "my db", "com.shop:v1/out", buf, sizeof(buf));
        CHECK_STR(buf, "postgresql://1/my%20db/message/com.shop%3Av1%2Fout");
        CHECK_STR(ce_table_of_source(buf, t, sizeof(t)), "logical message prefix \"com.shop:v1/out\"");
        /* a table named "message.x" keeps the table form, and is read back as a table */
        ce_format_source("1", "shop", "message", "x", buf, sizeof(buf));
        CHECK_STR(buf, "postgresql://1/shop/message.x");
        CHECK_STR(ce_table_of_source(buf, t, sizeof(t)), "table \"message\".\"x\"");
        /* a database named "message" does not make a table's source a message's */
        ce_format_source("1", "message", "public", "outbox", buf, sizeof(buf));
        CHECK_STR(ce_table_of_source(buf, t, sizeof(t)), "table \"public\".\"outbox\"");
        /* truncation never overruns */
        CHECK_INT(ce_format_message_source("1", "db", "prefix", buf, 20) < 20, 1);
        CHECK_INT(strlen(buf) < 20, 1);
        ce_table_of_source("postgresql://1/shop/message/outbox", t, 12);
        CHECK_INT(strlen(t) < 12, 1);
}

int main(void)
{
        test_time();
        test_source();
        test_record_headers();
        test_message_source();
        return check_summary();
}
