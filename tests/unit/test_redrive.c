// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of redrive's pure parts (redrive.c): the time syntax, the
 * rewriting of SQL text into wal2json's values, the headers of a redriven
 * row and of a redriven dead letter, and which options go together.
 */
#include <errno.h>
#include <stdint.h>

#include "unit_check.h"
#include "config.h"
#include "redrive.h"

static void test_parse_time(void)
{
        int64_t us = 42;

        CHECK_INT(redrive_parse_time("2025-11-30T04:07:34.336545Z", &us), 0);
        CHECK_INT(us, INT64_C(1764475654336545));
        /* PostgreSQL's ISO output with the pinned UTC time zone: the same instant */
        CHECK_INT(redrive_parse_time("2025-11-30 04:07:34.336545+00", &us), 0);
        CHECK_INT(us, INT64_C(1764475654336545));
        /* offsets move the instant the other way */
        CHECK_INT(redrive_parse_time("2025-11-30T06:07:34.336545+02:00", &us), 0);
        CHECK_INT(us, INT64_C(1764475654336545));
        CHECK_INT(redrive_parse_time("2025-11-29T23:37:34.336545-0430", &us), 0);
        CHECK_INT(us, INT64_C(1764475654336545));
        /* seconds and fraction optional; fraction cut after microseconds */
        CHECK_INT(redrive_parse_time("1970-01-01T00:01Z", &us), 0);
        CHECK_INT(us, 60000000);
        CHECK_INT(redrive_parse_time("1970-01-01t00:00:01.1234567z", &us), 0);
        CHECK_INT(us, 1123456);
        CHECK_INT(redrive_parse_time("2024-02-29T00:00:00Z", &us), 0);
        CHECK_INT(us, INT64_C(1709164800000000));
        CHECK_INT(redrive_parse_time("1969-12-31T23:59:59Z", &us), 0);
        CHECK_INT(us, -1000000);
        /* refused, and *ret untouched */
        us = 7;
        CHECK_INT(redrive_parse_time("2025-11-30T04:07:34", &us), -EINVAL);    /* no offset */
        CHECK_INT(redrive_parse_time("2025-11-30", &us), -EINVAL);
        CHECK_INT(redrive_parse_time("2025-02-29T00:00:00Z", &us), -EINVAL);   /* not a leap year */
        CHECK_INT(redrive_parse_time("2025-13-01T00:00:00Z", &us), -EINVAL);
        CHECK_INT(redrive_parse_time("2025-11-30T24:00:00Z", &us), -EINVAL);
        CHECK_INT(redrive_parse_time("2025-11-30T04:07:34.Z", &us), -EINVAL);
        CHECK_INT(redrive_parse_time("2025-11-30T04:07:34Z ", &us), -EINVAL);
        CHECK_INT(redrive_parse_time("yesterday", &us), -EINVAL);
        CHECK_INT(redrive_parse_time("", &us), -EINVAL);
        CHECK_INT(us, 7);
}

static const struct producer_header extra[2] = {
        {"outbox_relay_redrive_reason", "topic fixed", 11},
        {"outbox_relay_redrive_by", "ops@host", 8},
};

static void test_row_headers(void)
{
        struct w2j_value id = {"order-103-ack", 13, false, false}, type = {"order_received", 14,
                                                                           false, false};
        struct record_header own[1] = {{"traceparent", "00-ab-cd-01", 11}};
        struct outbox_row row = {.id = &id, .key = &id, .payload = &id, .type = &type, .headers = own,
                                 .nheaders = 1};
        struct producer_header h[16];
        size_t n;

        n = redrive_row_headers(&row, "postgresql://1/shop/public.outbox",
                                "2025-11-30T04:07:34.336545Z", extra, 2, h, 16);
        CHECK_INT(n, 9);
        CHECK_STR(h[0].name, "ce_specversion");
        CHECK_STR(h[1].name, "ce_id");
        CHECK_INT(h[1].len, 13);
        CHECK_STR(h[2].name, "ce_type");
        CHECK_STR(h[3].name, "ce_source");
        CHECK_STR(h[4].name, "ce_time");
        CHECK_STR(h[5].name, "content-type");
        CHECK_STR(h[6].name, "traceparent");
        CHECK_STR(h[7].name, "outbox_relay_redrive_reason");
        CHECK_STR(h[8].name, "outbox_relay_redrive_by");
        /* no commit time known, no type column: those are left out */
        row.type = NULL;
        n = redrive_row_headers(&row, "s", NULL, extra, 2, h, 16);
        CHECK_INT(n, 7);
        CHECK_STR(h[2].name, "ce_source");
        CHECK_STR(h[3].name, "content-type");
        for (size_t i = 0; i < n; i++)
                CHECK(strcmp(h[i].name, "ce_pglsn") != 0 && strcmp(h[i].name, "ce_pgxid") != 0);
        /* too small */
        CHECK_INT(redrive_row_headers(&row, "s", NULL, extra, 2, h, 5), 0);
}

static void test_dead_letter_headers(void)
{
        struct producer_header in[] = {
                {"ce_specversion", "1.0", 3},
                {"ce_id", "w-1", 3},
                {"x-tenant", "acme", 4},
                {"outbox_relay_error", "topic missing", 13},
                {"outbox_relay_error_code", "UNKNOWN_TOPIC_OR_PART", 21},
                {"outbox_relay_topic", "outbox.order_received", 21},
        };
        struct producer_header h[16];
        char err[256];
        const char *topic = NULL;
        size_t tlen = 0;
        int n;

        n = redrive_dead_letter_headers(in, 6, extra, 2, h, 16, &topic, &tlen, err, sizeof(err));
        CHECK_INT(n, 5);
        CHECK_STR(h[0].name, "ce_specversion");
        CHECK_STR(h[1].name, "ce_id");
        CHECK_STR(h[2].name, "x-tenant");
        CHECK_STR(h[3].name, "outbox_relay_redrive_reason");
        CHECK_STR(h[4].name, "outbox_relay_redrive_by");
        CHECK_INT(tlen, 21);
        CHECK(topic && strncmp(topic, "outbox.order_received", tlen) == 0);
        /* a fault of the row itself would come back */
        in[4] = (struct producer_header){"outbox_relay_error_code", "NULL_VALUE", 10};
        CHECK_INT(redrive_dead_letter_headers(in, 6, extra, 2, h, 16, &topic, &tlen, err,
                                              sizeof(err)), -EPERM);
        CHECK(strstr(err, "NULL_VALUE") != NULL);
        in[4] = (struct producer_header){"outbox_relay_error_code", "MSG_SIZE_TOO_LARGE", 18};
        CHECK_INT(redrive_dead_letter_headers(in, 6, extra, 2, h, 16, &topic, &tlen, err,
                                              sizeof(err)), 5);
        /* no intended topic */
        in[5] = (struct producer_header){"outbox_relay_topic", "", 0};
        CHECK_INT(redrive_dead_letter_headers(in, 6, extra, 2, h, 16, &topic, &tlen, err,
                                              sizeof(err)), -ENOENT);
        CHECK_INT(redrive_dead_letter_headers(in, 5, extra, 2, h, 16, &topic, &tlen, err,
                                              sizeof(err)), -ENOENT);
        in[5] = (struct producer_header){"outbox_relay_topic", "t", 1};
        CHECK_INT(redrive_dead_letter_headers(in, 6, extra, 2, h, 3, &topic, &tlen, err,
                                              sizeof(err)), -E2BIG);
}

static int parse(struct relay_config *c, int argc, char **argv)
{
        char err[512];

        return config_parse(argc, argv, c, err, sizeof(err));
}

static void test_usage(void)
{
        struct relay_config c;
        char buf[512];
        char *ok[] = {"x", "--reason=fixed", "--work-id=a", "--work-id", "b"};
        char *window[] = {"x", "--reason=r", "--since=2026-01-02T00:00:00Z", "--until=2026-01-01T00:00:00Z"};
        char *blank[] = {"x", "--reason=  ", "--work-id=a"};
        char *none[] = {"x", "--reason=r", "--kind=k"};
        char *empty_id[] = {"x", "--reason=r", "--work-id="};

        CHECK_INT(parse(&c, 5, ok), 0);
        CHECK_INT(c.nwork_ids, 2);
        CHECK_STR(c.work_ids[1], "b");
        CHECK_STR(c.time_column, "created_at");
        CHECK_INT(c.dedup_horizon_ms, INT64_C(604800000));
        CHECK_INT(c.max_records, 10000);
        CHECK(redrive_usage_error(&c, true, buf, sizeof(buf)) == NULL);
        /* other commands take none of it */
        CHECK(redrive_usage_error(&c, false, buf, sizeof(buf)) != NULL);
        CHECK(strstr(buf, "--work-id") != NULL);
        config_free(&c);
        CHECK_INT(parse(&c, 4, window), 0);
        CHECK(redrive_usage_error(&c, true, buf, sizeof(buf)) != NULL);
        CHECK(strstr(buf, "later") != NULL);
        config_free(&c);
        CHECK_INT(parse(&c, 3, blank), 0);
        CHECK(redrive_usage_error(&c, true, buf, sizeof(buf)) != NULL);
        CHECK(strstr(buf, "--reason") != NULL);
        config_free(&c);
        CHECK_INT(parse(&c, 3, none), 0);
        CHECK(redrive_usage_error(&c, true, buf, sizeof(buf)) != NULL);
        CHECK(strstr(buf, "selection") != NULL);
        config_free(&c);
        CHECK_INT(parse(&c, 3, empty_id), -EINVAL);
}

int main(void)
{
        test_parse_time();
        test_row_headers();
        test_dead_letter_headers();
        test_usage();
        return check_summary();
}
