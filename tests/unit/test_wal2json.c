// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the wal2json format-version 2 decoder (wal2json.c) on lines
 * captured from a real PostgreSQL 15 with wal2json 2.5 (tests/data/).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit_check.h"
#include "lsn.h"
#include "wal2json.h"

#ifndef TEST_DATA_DIR
#define TEST_DATA_DIR "tests/data"
#endif

static char lines[64][4096];
static int nlines;

static void load(const char *name)
{
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", TEST_DATA_DIR, name);
        f = fopen(path, "r");
        CHECK(f != NULL);
        if (!f)
                return;
        nlines = 0;
        while (nlines < 64 && fgets(lines[nlines], sizeof(lines[0]), f)) {
                lines[nlines][strcspn(lines[nlines], "\n")] = '\0';
                nlines++;
        }
        fclose(f);
}

static const struct w2j_value *col(const struct w2j_record *r, const char *name)
{
        for (size_t i = 0; i < r->ncolumns; i++)
                if (strcmp(r->columns[i].name, name) == 0)
                        return &r->columns[i].value;
        return NULL;
}

static int decode_line(struct w2j_decoder *d, const char *s, struct w2j_record *r)
{
        return w2j_decode(d, s, strlen(s), r);
}

static void test_captured(void)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct w2j_record r;
        int inserts = 0, begins = 0, commits = 0, others = 0;

        load("wal2json-v2.jsonl");
        CHECK(nlines > 20);
        for (int i = 0; i < nlines; i++) {
                int ret = decode_line(d, lines[i], &r);

                CHECK_INT(ret, 0);
                if (ret)
                        fprintf(stderr, "line %d: %s\n", i + 1, lines[i]);
                begins += r.action == W2J_BEGIN;
                commits += r.action == W2J_COMMIT;
                inserts += r.action == W2J_INSERT;
                others += r.action > W2J_INSERT;
        }
        CHECK_INT(begins, commits);
        CHECK_INT(inserts, 5);
        CHECK_INT(others, 3);  /* U, D, M */

        /* order 103: the B line. */
        CHECK_INT(decode_line(d, lines[10], &r), 0);
        CHECK_INT(r.action, W2J_BEGIN);
        CHECK_INT(r.xid, 729);
        CHECK_INT(r.lsn, 0x1551438);
        CHECK_INT(r.next_lsn, 0x1551468);
        CHECK_STR(r.timestamp, "2026-11-30 04:07:34.336545+00");
        CHECK_INT(r.commit_time_us, INT64_C(1796011654336545));

        CHECK_INT(decode_line(d, lines[11], &r), 0);
        CHECK_INT(r.action, W2J_INSERT);
        CHECK_STR(r.schema, "public");
        CHECK_STR(r.table, "outbox");
        CHECK_INT(r.ncolumns, 6);
        CHECK_STR(col(&r, "work_id")->ptr, "order-103-ack");
        CHECK_STR(col(&r, "kind")->ptr, "order_received");
        CHECK_STR(col(&r, "payload")->ptr,
                  "{\"total\": \"29.00\", \"message\": \"Order received; payment still pending\", "
                  "\"order_id\": 103, \"customer_id\": 1}");
        /* Numbers keep their text: numeric 29.00 is not 29. */
        CHECK_STR(col(&r, "amount")->ptr, "29.00");
        CHECK(col(&r, "amount")->was_number);
        CHECK_STR(col(&r, "order_id")->ptr, "103");

        /* bigint max and an 80-digit numeric, byte-exact; escapes and UTF-8 in jsonb. */
        CHECK_INT(decode_line(d, lines[14], &r), 0);
        CHECK_STR(col(&r, "order_id")->ptr, "9223372036854775807");
        CHECK_STR(col(&r, "amount")->ptr, "12345678901234567890123456789012345678901234567890123456"
                                          "789012345678901234567890");
        CHECK_STR(col(&r, "payload")->ptr, "{\"a\": \"q\\\"b\\\\c\\u0001 é 😀\"}");

        /* Quoted table names come unescaped. */
        CHECK_INT(decode_line(d, lines[15], &r), 0);
        CHECK_STR(r.table, "Foo bar");
        CHECK_INT(decode_line(d, lines[16], &r), 0);
        CHECK_STR(r.schema, "My.Schema");
        CHECK_STR(r.table, "we\"ird");
        /* The literal six characters \u0000 inside jsonb text. */
        CHECK_STR(col(&r, "payload")->ptr, "{\"lit\": \"\\\\u0000\"}");
        w2j_decoder_free(d);
}

static void test_types(void)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct w2j_record r;

        load("wal2json-v2-types.jsonl");
        CHECK_INT(nlines, 2);
        CHECK_INT(decode_line(d, lines[0], &r), 0);
        CHECK(col(&r, "f")->is_null);  /* wal2json 2.5 writes NaN as null */
        CHECK_STR(col(&r, "b")->ptr, "true");
        CHECK_STR(col(&r, "ba")->ptr, "00ff");
        CHECK_STR(col(&r, "j")->ptr, "[1, 2.50, {\"a\":null}]");
        CHECK_STR(col(&r, "t")->ptr, "tab\there \"q\" back\\slash nl\n end");
        CHECK_INT(decode_line(d, lines[1], &r), 0);
        CHECK_STR(col(&r, "f")->ptr, "1.5e+300");
        CHECK_STR(col(&r, "r")->ptr, "3.25");
        CHECK_STR(col(&r, "n")->ptr, "-0.000001");
        CHECK_STR(col(&r, "j")->ptr, "null");
        CHECK_STR(col(&r, "t")->ptr, "");
        CHECK(!col(&r, "t")->is_null);
        CHECK(col(&r, "b")->is_null);
        w2j_decoder_free(d);
}

static void test_invalid(void)
{
        static const char *const bad[] = {
                "",
                "{",
                "[]",
                "\"B\"",
                "{\"xid\":1}",                                             /* no action */
                "{\"action\":\"BB\"}",
                "{\"action\":1}",
                "{\"action\":\"B\",\"xid\":\"1\",\"nextlsn\":\"0/1\"}",    /* xid must be a number */
                "{\"action\":\"B\",\"xid\":-1,\"nextlsn\":\"0/1\"}",
                "{\"action\":\"B\",\"xid\":4294967296,\"nextlsn\":\"0/1\"}",
                "{\"action\":\"B\",\"xid\":1}",                           /* B without nextlsn */
                "{\"action\":\"B\",\"xid\":1,\"nextlsn\":\"0-1\"}",
                "{\"action\":\"B\",\"xid\":1,\"nextlsn\":\"0/1\",\"timestamp\":\"yesterday\"}",
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\"}",  /* no columns */
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\"}]}",
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"type\":\"text\",\"value\":[1]}]}",
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"type\":\"text\",\"value\":\"x\\u0000y\"}]}",
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"type\":\"text\",\"value\":01}]}",
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"type\":\"text\",\"value\":1.}]}",
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"type\":\"text\",\"value\":\"tab\there\"}]}",
                "{\"action\":\"I\",\"schema\":1,\"table\":\"t\",\"columns\":[]}",
                "{\"action\":\"C\",\"xid\":1,\"nextlsn\":\"0/1\"} x",       /* trailing garbage */
                "{\"action\":\"C\",\"xid\":1,\"nextlsn\":\"0/1\"",
                /* wal2json has shipped unescaped quotes in type names */
                "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\",\"columns\":[{\"name\":\"a\",\"type\":\"\"my type\"\",\"value\":1}]}",
        };
        struct w2j_decoder *d = w2j_decoder_new();
        struct w2j_record r;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                int ret = decode_line(d, bad[i], &r);

                CHECK_INT(ret, -EBADMSG);
                if (ret != -EBADMSG)
                        fprintf(stderr, "accepted: %s\n", bad[i]);
        }
        /* Not NUL-terminated: the length bounds the parse. */
        CHECK_INT(w2j_decode(d, "{\"action\":\"M\"}garbage", 14, &r), 0);
        CHECK_INT(r.action, W2J_MESSAGE);
        /* Case-sensitive keys. */
        CHECK_INT(decode_line(d, "{\"Action\":\"B\"}", &r), -EBADMSG);
        /* Regression: a non-transactional logical message has null xid and timestamp. */
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"xid\":null,\"timestamp\":null,"
                              "\"lsn\":\"0/A48AED8\",\"transactional\":false,\"prefix\":\"app\","
                              "\"content\":\"hello\"}", &r), 0);
        CHECK_INT(r.action, W2J_MESSAGE);
        CHECK_INT(r.xid, 0);
        CHECK(r.timestamp == NULL);
        /* Regression: binary content arrives raw (0xff) or with \u0000; it must decode. */
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"xid\":7,\"lsn\":\"0/1\",\"transactional\":true,"
                              "\"prefix\":\"p\",\"content\":\"\xff\xfe\\u0000\x01\"}", &r), 0);
        CHECK_INT(r.action, W2J_MESSAGE);
        /* A value that is not UTF-8 (only a non-UTF8 server could send it) is kept as is. */
        CHECK_INT(decode_line(d, "{\"action\":\"I\",\"schema\":\"public\",\"table\":\"t\","
                              "\"columns\":[{\"name\":\"a\",\"type\":\"text\",\"value\":\"\xff" "1\"}]}",
                              &r), 0);
        CHECK_STR(r.columns[0].value.ptr, "\xff" "1");
        CHECK(!r.columns[0].value.was_number);
        /* Unknown actions decode, to be counted and skipped by the caller. */
        CHECK_INT(decode_line(d, "{\"action\":\"Z\"}", &r), 0);
        CHECK_INT(r.action, W2J_UNKNOWN);
        w2j_decoder_free(d);
}

/*
 * Members are found by name in one pass (wal2json.c, members()), whatever
 * their order, and a repeated one is read where it first stands, as
 * cJSON_GetObjectItemCaseSensitive() reads it: a line that repeats "action"
 * or "value" decodes as its first says, never the last.
 */
static void test_member_order(void)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct w2j_record r;

        /* wal2json's order reversed, "type" and "typeoid" both given. */
        CHECK_INT(decode_line(d, "{\"columns\":[{\"value\":\"x\",\"typeoid\":25,\"type\":\"text\","
                              "\"name\":\"a\"}],\"table\":\"t\",\"schema\":\"s\",\"timestamp\":"
                              "\"2026-12-03 07:12:42.47389+00\",\"lsn\":\"0/2A\",\"xid\":7,\"action\":\"I\"}",
                              &r), 0);
        CHECK_INT(r.action, W2J_INSERT);
        CHECK_INT(r.xid, 7);
        CHECK(r.lsn == 0x2A);
        CHECK_STR(r.schema, "s");
        CHECK_STR(r.table, "t");
        CHECK_INT(r.ncolumns, 1);
        CHECK_STR(r.columns[0].name, "a");
        CHECK_STR(r.columns[0].type, "text");
        CHECK_INT(r.columns[0].typeoid, 25);
        CHECK_STR(r.columns[0].value.ptr, "x");
        /* Repeated: the first stands. */
        CHECK_INT(decode_line(d, "{\"action\":\"I\",\"action\":\"D\",\"schema\":\"s\",\"table\":\"t\","
                              "\"columns\":[{\"name\":\"a\",\"typeoid\":25,\"value\":\"first\","
                              "\"value\":\"second\",\"name\":\"b\"}]}", &r), 0);
        CHECK_INT(r.action, W2J_INSERT);
        CHECK_STR(r.columns[0].name, "a");
        CHECK_STR(r.columns[0].value.ptr, "first");
        /* A name that only begins like a member's is not it. */
        CHECK_INT(decode_line(d, "{\"actions\":\"B\",\"act\":\"B\"}", &r), -EBADMSG);
        CHECK_INT(decode_line(d, "{\"action\":\"I\",\"schema\":\"s\",\"table\":\"t\",\"columns\":"
                              "[{\"name\":\"a\",\"typeoids\":25,\"value\":\"x\"}]}", &r), -EBADMSG);
        w2j_decoder_free(d);
}

/* Logical messages, captured by tests/unit/capture_messages.py from PostgreSQL 15 and wal2json 2.5. */
static void test_messages(void)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct w2j_record r;
        char a[LSN_STRLEN];
        int messages = 0, i = 0;

        load("wal2json-v2-messages.jsonl");
        CHECK_INT(nlines, 21);
        for (int k = 0; k < nlines; k++) {
                CHECK_INT(decode_line(d, lines[k], &r), 0);
                messages += r.action == W2J_MESSAGE;
                if (r.action != W2J_MESSAGE) {
                        CHECK(r.prefix == NULL && r.content == NULL && !r.transactional);
                        continue;
                }
                CHECK(r.prefix != NULL && r.content != NULL);
                CHECK(!r.suspect);
                CHECK(r.schema == NULL && r.table == NULL && r.ncolumns == 0);
        }
        CHECK_INT(messages, 7);

        /* outbox_emit() alone in its transaction: B, M, C; the message at the commit's LSN */
        CHECK_INT(decode_line(d, lines[i + 1], &r), 0);
        CHECK_INT(r.action, W2J_MESSAGE);
        CHECK(r.transactional);
        CHECK_INT(r.xid, 735);
        CHECK_STR(lsn_format(r.lsn, a), "0/192B8C0");
        CHECK_STR(r.timestamp, "2026-12-01 06:40:38.886151+00");
        CHECK_STR(r.prefix, "outbox");
        CHECK_STR(r.content, "{\"columns\": {\"kind\": \"order_received\", \"headers\": null, "
                  "\"payload\": \"{\\\"total\\\": \\\"29.00\\\", \\\"message\\\": "
                  "\\\"Order received; payment still pending\\\", \\\"order_id\\\": 103, "
                  "\\\"customer_id\\\": 1}\", \"work_id\": \"order-103-ack\", \"entity_id\": null}, "
                  "\"version\": 1}");
        CHECK_INT(r.content_len, strlen(r.content));
        i += 3;
        /* a row, a message, a row in one transaction: in WAL order, between B and C */
        CHECK_INT(decode_line(d, lines[i + 2], &r), 0);
        CHECK_INT(r.action, W2J_MESSAGE);
        CHECK_INT(r.xid, 736);
        CHECK(strstr(r.content, "\"entity_id\": \"order-103\"") != NULL);
        CHECK(strstr(r.content, "tab\\\\there \\\\\\\"q\\\\\\\" \xc3\xa9") != NULL);
        CHECK_INT(decode_line(d, lines[i + 1], &r), 0);
        CHECK_INT(r.action, W2J_INSERT);
        CHECK_INT(decode_line(d, lines[i + 3], &r), 0);
        CHECK_INT(r.action, W2J_INSERT);
        i += 5;
        /* non-transactional: alone, xid and timestamp null */
        CHECK_INT(decode_line(d, lines[i], &r), 0);
        CHECK_INT(r.action, W2J_MESSAGE);
        CHECK(!r.transactional);
        CHECK_INT(r.xid, 0);
        CHECK(r.timestamp == NULL);
        CHECK_STR(lsn_format(r.lsn, a), "0/192BC88");
        CHECK_STR(r.prefix, "outbox");
        i += 1;
        /* bytea content that is not UTF-8 arrives raw, and decodes */
        CHECK_INT(decode_line(d, lines[i + 1], &r), 0);
        CHECK_STR(r.content, "{\"a\":1}\xff");
        CHECK_INT(r.content_len, 8);
        CHECK(!r.suspect);
        i += 3;
        /* bytea content with a NUL: wal2json cut it there, and the line does not tell */
        CHECK_INT(decode_line(d, lines[i + 1], &r), 0);
        CHECK_STR(r.content, "{}");
        i += 3;
        /* control characters arrive escaped, and are unescaped */
        CHECK_INT(decode_line(d, lines[i + 1], &r), 0);
        CHECK_STR(r.content, "ctl\x01 nl\n end");
        CHECK(!r.suspect);
        i += 3;
        /* another application's prefix */
        CHECK_INT(decode_line(d, lines[i + 1], &r), 0);
        CHECK_STR(r.prefix, "other-app");
        CHECK_STR(r.content, "hello");
        CHECK(r.transactional);
        i += 3;
        CHECK_INT(i, nlines);  /* the rolled-back transaction left nothing */

        /* a NUL or raw control character that wal2json never writes: decoded, marked suspect */
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"xid\":7,\"lsn\":\"0/1\",\"transactional\":true,"
                              "\"prefix\":\"outbox\",\"content\":\"{}\\u0000{\"}", &r), 0);
        CHECK(r.suspect);
        CHECK_INT(r.content_len, 2);
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"xid\":7,\"lsn\":\"0/1\",\"transactional\":true,"
                              "\"prefix\":\"outbox\",\"content\":\"a\x01\"}", &r), 0);
        CHECK(r.suspect);
        /* fields of the wrong type */
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"transactional\":\"true\",\"prefix\":\"p\","
                              "\"content\":\"c\"}", &r), -EBADMSG);
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"transactional\":true,\"prefix\":1,"
                              "\"content\":\"c\"}", &r), -EBADMSG);
        CHECK_INT(decode_line(d, "{\"action\":\"M\",\"transactional\":true,\"prefix\":\"p\","
                              "\"content\":null}", &r), -EBADMSG);
        /* fields missing: decoded, for the caller to judge */
        CHECK_INT(decode_line(d, "{\"action\":\"M\"}", &r), 0);
        CHECK(!r.transactional && r.prefix == NULL && r.content == NULL && r.content_len == 0);
        w2j_decoder_free(d);
}

static void test_timestamp(void)
{
        int64_t us = 0;

        CHECK_INT(w2j_parse_timestamp("1970-01-01 00:00:00+00", 22, &us), 0);
        CHECK_INT(us, 0);
        CHECK_INT(w2j_parse_timestamp("2000-01-01 00:00:00.5+00", 24, &us), 0);
        CHECK_INT(us, INT64_C(946684800500000));
        CHECK_INT(w2j_parse_timestamp("2000-01-01 05:30:00+05:30", 25, &us), 0);
        CHECK_INT(us, INT64_C(946684800000000));
        CHECK_INT(w2j_parse_timestamp("1999-12-31 21:00:00-03", 22, &us), 0);
        CHECK_INT(us, INT64_C(946684800000000));
        CHECK_INT(w2j_parse_timestamp("2024-02-29 12:00:00.123456789+00", 32, &us), 0);
        CHECK_INT(us % 1000000, 123456);
        CHECK_INT(w2j_parse_timestamp("2024-02-29 12:00:00", 19, &us), -EINVAL);
        CHECK_INT(w2j_parse_timestamp("2024-13-01 12:00:00+00", 22, &us), -EINVAL);
        CHECK_INT(w2j_parse_timestamp("2024-01-01 12:00:00.+00", 23, &us), -EINVAL);
}

static void test_escape_table_name(void)
{
        char buf[64];

        CHECK_INT(w2j_escape_table_name("outbox", buf, sizeof(buf)), 6);
        CHECK_STR(buf, "outbox");
        CHECK(w2j_escape_table_name("Foo bar", buf, sizeof(buf)) > 0);
        CHECK_STR(buf, "Foo\\ bar");
        CHECK(w2j_escape_table_name("My.Schema", buf, sizeof(buf)) > 0);
        CHECK_STR(buf, "My\\.Schema");
        CHECK(w2j_escape_table_name("a,b*c'd\\e\"f", buf, sizeof(buf)) > 0);
        CHECK_STR(buf, "a\\,b\\*c\\'d\\\\e\\\"f");
        CHECK(w2j_escape_table_name("é", buf, sizeof(buf)) > 0);
        CHECK_STR(buf, "é");
        CHECK_INT(w2j_escape_table_name("a b", buf, 4), -ENOSPC);
        /* Exactly the documented size: the name and its terminator. */
        CHECK_INT(w2j_escape_table_name("abc", buf, 4), 3);
        CHECK_INT(w2j_escape_table_name("a b", buf, 5), 4);
}

static void test_value_from_text(void)
{
        struct w2j_value v;

        w2j_value_from_text(16, "t", 1, false, &v);
        CHECK_STR(v.ptr, "true");
        CHECK_INT(v.len, 4);
        w2j_value_from_text(16, "f", 1, false, &v);
        CHECK_STR(v.ptr, "false");
        w2j_value_from_text(17, "\\x4142", 6, false, &v);
        CHECK_STR(v.ptr, "4142");
        CHECK_INT(v.len, 4);
        w2j_value_from_text(1700, "29.00", 5, false, &v);
        CHECK_STR(v.ptr, "29.00");
        CHECK_INT(v.was_number, 1);
        CHECK_INT(v.is_null, 0);
        w2j_value_from_text(1700, "NaN", 3, false, &v);
        CHECK_INT(v.is_null, 1);
        w2j_value_from_text(701, "-Infinity", 9, false, &v);
        CHECK_INT(v.is_null, 1);
        /* text, jsonb, and a domain over bool (its own OID): as PostgreSQL printed them */
        w2j_value_from_text(3802, "{\"a\": 1}", 8, false, &v);
        CHECK_STR(v.ptr, "{\"a\": 1}");
        CHECK_INT(v.was_number, 0);
        w2j_value_from_text(90001, "t", 1, false, &v);
        CHECK_STR(v.ptr, "t");
        w2j_value_from_text(25, NULL, 0, true, &v);
        CHECK_INT(v.is_null, 1);
        CHECK(v.ptr == NULL);
}

int main(void)
{
        test_captured();
        test_types();
        test_invalid();
        test_member_order();
        test_messages();
        test_timestamp();
        test_escape_table_name();
        test_value_from_text();
        return check_summary();
}
