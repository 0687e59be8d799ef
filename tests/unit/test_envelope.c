// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the logical message envelope (envelope.c): the envelopes
 * outbox_emit() wrote, as captured from PostgreSQL 15 with wal2json 2.5
 * (tests/data/wal2json-v2-messages.jsonl), read back into the row
 * record_extract() maps; and every way an envelope can be refused.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit_check.h"
#include "envelope.h"
#include "record.h"
#include "wal2json.h"

#ifndef TEST_DATA_DIR
#define TEST_DATA_DIR "tests/data"
#endif

static char lines[32][4096];
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
        while (nlines < 32 && fgets(lines[nlines], sizeof(lines[0]), f)) {
                lines[nlines][strcspn(lines[nlines], "\n")] = '\0';
                nlines++;
        }
        fclose(f);
}

static const struct w2j_column *col(const struct w2j_record *r, const char *name)
{
        for (size_t i = 0; i < r->ncolumns; i++)
                if (strcmp(r->columns[i].name, name) == 0)
                        return &r->columns[i];
        return NULL;
}

/* A transactional M record with @content (NUL-terminated). */
static struct w2j_record message(const char *content)
{
        return (struct w2j_record){
                .action = W2J_MESSAGE, .action_code = 'M', .xid = 7, .lsn = 0x1000,
                .transactional = true, .prefix = "outbox", .content = content,
                .content_len = content ? strlen(content) : 0,
        };
}

/* The kit's mapping: the relay's defaults. */
static struct record_spec *kit_spec(void)
{
        struct record_spec *spec = NULL;
        char err[256];

        CHECK_INT(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &spec, err,
                                  sizeof(err)), 0);
        if (spec)
                CHECK_INT(record_spec_set_headers_column(spec, "headers"), 0);
        return spec;
}

static void test_captured(void)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct record_spec *spec = kit_spec();
        struct envelope env = {0};
        struct w2j_record m, row;
        struct outbox_row out;
        char err[512];

        load("wal2json-v2-messages.jsonl");
        CHECK_INT(nlines, 21);

        /* outbox_emit('order-103-ack', 'order_received', ORDER) */
        CHECK_INT(w2j_decode(d, lines[1], strlen(lines[1]), &m), 0);
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), 0);
        CHECK_INT(row.action, W2J_MESSAGE);
        CHECK_INT(row.xid, m.xid);
        CHECK(row.lsn == m.lsn);
        CHECK_STR(row.prefix, "outbox");
        CHECK_INT(row.ncolumns, 5);
        CHECK_STR(col(&row, "work_id")->value.ptr, "order-103-ack");
        CHECK_INT(col(&row, "work_id")->typeoid, 25);
        CHECK_STR(col(&row, "kind")->value.ptr, "order_received");
        /* the jsonb's text, as a table row's payload column would hold it */
        CHECK_STR(col(&row, "payload")->value.ptr, "{\"total\": \"29.00\", \"message\": \"Order "
                  "received; payment still pending\", \"order_id\": 103, \"customer_id\": 1}");
        CHECK_INT(col(&row, "payload")->typeoid, 114);
        CHECK(col(&row, "entity_id")->value.is_null);
        CHECK(col(&row, "entity_id")->value.ptr == NULL);
        CHECK(col(&row, "headers")->value.is_null);
        CHECK_INT(record_extract(spec, &row, &out, err, sizeof(err)), 0);
        CHECK_STR(out.topic, "outbox.order_received");
        CHECK_STR(out.key->ptr, "order-103-ack");
        CHECK_STR(out.type->ptr, "order_received");
        CHECK_INT(out.nheaders, 0);
        envelope_clear(&env);

        /* outbox_emit('msg-2', 'k', ..., 'order-103', '{"traceparent": ...}'): escapes survive */
        CHECK_INT(w2j_decode(d, lines[5], strlen(lines[5]), &m), 0);
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), 0);
        CHECK_STR(col(&row, "payload")->value.ptr,
                  "{\"n\": 2, \"s\": \"tab\\there \\\"q\\\" \xc3\xa9\"}");
        CHECK_STR(col(&row, "entity_id")->value.ptr, "order-103");
        CHECK_INT(record_extract(spec, &row, &out, err, sizeof(err)), 0);
        CHECK_INT(out.nheaders, 1);
        CHECK_STR(out.headers[0].name, "traceparent");
        CHECK_STR(out.headers[0].value, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");

        /* the same envelope under --key-column entity_id: the key a row would get */
        record_spec_free(spec);
        CHECK_INT(record_spec_new("work_id", "entity_id", "payload", "kind", "t.${kind}", &spec, err,
                                  sizeof(err)), 0);
        CHECK_INT(record_extract(spec, &row, &out, err, sizeof(err)), 0);
        CHECK_STR(out.key->ptr, "order-103");
        CHECK_STR(out.topic, "t.k");

        /* bytea content that is not UTF-8: refused, with the offset of the first bad byte */
        CHECK_INT(w2j_decode(d, lines[10], strlen(lines[10]), &m), 0);
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "not UTF-8 text (byte 0xFF at offset 7)") != NULL);
        /* bytea content cut at a NUL by wal2json: "{}" is JSON, but no envelope */
        CHECK_INT(w2j_decode(d, lines[13], strlen(lines[13]), &m), 0);
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "\"version\" is missing") != NULL);
        /* text that is not JSON */
        CHECK_INT(w2j_decode(d, lines[16], strlen(lines[16]), &m), 0);
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "not valid JSON") != NULL);

        envelope_clear(&env);
        record_spec_free(spec);
        w2j_decoder_free(d);
}

static void expect_refused(const char *content, int want, const char *words)
{
        struct envelope env = {0};
        struct w2j_record m = message(content), row;
        char err[512] = "";
        int r = envelope_parse(&env, &m, "payload", &row, err, sizeof(err));

        CHECK_INT(r, want);
        if (r != want || !strstr(err, words))
                fprintf(stderr, "content %.80s: %d \"%s\", want %d and \"%s\"\n", content, r, err,
                        want, words);
        CHECK(strstr(err, words) != NULL);
        envelope_clear(&env);
}

#define ENV(cols) "{\"version\": 1, \"columns\": {" cols "}}"

static void test_refused(void)
{
        struct envelope env = {0};
        struct w2j_record m, row;
        char err[512], many[4096], *big;
        size_t o;

        expect_refused("[1]", -EBADMSG, "is an array, not an object");
        expect_refused("\"x\"", -EBADMSG, "is a string, not an object");
        expect_refused("{\"version\": 1}", -EBADMSG, "\"columns\" is missing");
        expect_refused("{\"version\": 1, \"columns\": []}", -EBADMSG, "\"columns\" is an array");
        expect_refused("{\"columns\": {}}", -EBADMSG, "\"version\" is missing");
        expect_refused("{\"version\": 2, \"columns\": {}}", -EBADMSG, "\"version\" is another number");
        expect_refused("{\"version\": 1.5, \"columns\": {}}", -EBADMSG, "another number");
        expect_refused("{\"version\": \"1\", \"columns\": {}}", -EBADMSG, "\"version\" is a string");
        expect_refused("{\"version\": 1, \"version\": 1, \"columns\": {}}", -EBADMSG,
                       "\"version\" twice");
        expect_refused("{\"version\": 1, \"columns\": {}, \"extra\": 1}", -EBADMSG,
                       "a member \"extra\"");
        expect_refused(ENV("\"work_id\": 103"), -EBADMSG, "column \"work_id\" holds a number");
        expect_refused(ENV("\"flag\": true"), -EBADMSG, "holds a boolean");
        expect_refused(ENV("\"payload\": {\"a\": 1}"), -EBADMSG, "holds an object");
        expect_refused(ENV("\"a\": \"1\", \"a\": \"2\""), -EBADMSG, "names column \"a\" twice");
        expect_refused(ENV("\"\": \"1\""), -EBADMSG, "column name of 0 bytes");
        expect_refused(ENV("\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\": \"1\""),
                       -EBADMSG, "column name of 64 bytes");
        expect_refused(ENV("\"work_id\": \"a\\u0000b\""), -EBADMSG, "\\u0000");
        expect_refused(ENV("\"work_id\": \"\\ud800\""), -EBADMSG, "lone surrogate");
        /* PostgreSQL's grammar, not cJSON's leniency */
        expect_refused(ENV("\"work_id\": \"a\tb\""), -EBADMSG, "not valid JSON");
        expect_refused("{\"version\": 1, \"columns\": {},}", -EBADMSG, "not valid JSON");
        expect_refused(ENV("") " x", -EBADMSG, "not valid JSON");
        expect_refused("", -EBADMSG, "not valid JSON");
        expect_refused("\xc0\xaf", -EBADMSG, "byte 0xC0 at offset 0");  /* overlong '/' */
        expect_refused("{\"a\": \"\xed\xa0\x80\"}", -EBADMSG, "offset 7");  /* a surrogate */
        expect_refused("\xf4\x90\x80\x80", -EBADMSG, "0xF4");               /* above U+10FFFF */
        expect_refused("{\xe2\x82", -EBADMSG, "offset 1");                  /* cut short */
        /* the payload column's text must be JSON; other columns' needs not */
        expect_refused(ENV("\"payload\": \"{oops\""), -EILSEQ,
                       "payload column \"payload\" does not hold valid JSON");
        expect_refused(ENV("\"payload\": \"\""), -EILSEQ, "does not hold valid JSON");
        /* ... and the row is there all the same, to be named and dead-lettered */
        m = message(ENV("\"work_id\": \"w\", \"payload\": \"[1,]\", \"kind\": \"k\""));
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), -EILSEQ);
        CHECK_INT(row.ncolumns, 3);
        CHECK_STR(col(&row, "work_id")->value.ptr, "w");
        CHECK_STR(col(&row, "payload")->value.ptr, "[1,]");
        CHECK_INT(col(&row, "payload")->typeoid, 25);
        m = message(ENV("\"kind\": \"{oops\", \"payload\": \"[1, 2.50]\""));
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), 0);
        CHECK_STR(col(&row, "payload")->value.ptr, "[1, 2.50]");
        CHECK_INT(col(&row, "kind")->typeoid, 25);
        /* another payload column: checked by name */
        CHECK_INT(envelope_parse(&env, &m, "kind", &row, err, sizeof(err)), -EILSEQ);
        /* a NULL payload is record_extract()'s business (an error, or a tombstone) */
        m = message(ENV("\"payload\": null"));
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), 0);
        CHECK(col(&row, "payload")->value.is_null);
        /* no columns at all: a row record_extract() finds nothing in */
        m = message(ENV(""));
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), 0);
        CHECK_INT(row.ncolumns, 0);

        /* at most ENVELOPE_COLUMNS_MAX columns */
        o = (size_t)snprintf(many, sizeof(many), "{\"version\": 1, \"columns\": {");
        for (int i = 0; i < ENVELOPE_COLUMNS_MAX; i++)
                o += (size_t)snprintf(many + o, sizeof(many) - o, "%s\"c%d\": \"v\"", i ? ", " : "", i);
        snprintf(many + o, sizeof(many) - o, "}}");
        m = message(many);
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), 0);
        CHECK_INT(row.ncolumns, ENVELOPE_COLUMNS_MAX);
        snprintf(many + o, sizeof(many) - o, ", \"one_more\": null}}");
        expect_refused(many, -EBADMSG, "more than 64 columns");

        /* at most ENVELOPE_MAX_BYTES, counted before anything is parsed */
        big = malloc(ENVELOPE_MAX_BYTES + 2);
        CHECK(big != NULL);
        if (big) {
                memset(big, ' ', ENVELOPE_MAX_BYTES + 1);
                big[ENVELOPE_MAX_BYTES + 1] = '\0';
                expect_refused(big, -E2BIG, "more than the 16777216");
                big[ENVELOPE_MAX_BYTES] = '\0';
                expect_refused(big, -EBADMSG, "not valid JSON");  /* at the bound: read */
                free(big);
        }

        /* no content, or a line wal2json never writes */
        expect_refused(NULL, -EBADMSG, "no content");
        m = message(ENV("\"work_id\": \"a\""));
        m.suspect = true;
        CHECK_INT(envelope_parse(&env, &m, "payload", &row, err, sizeof(err)), -EBADMSG);
        CHECK(strstr(err, "cut short") != NULL);
        envelope_clear(&env);
        envelope_clear(&env);  /* twice is harmless */
}

static void test_utf8(void)
{
        size_t at = 99;

        CHECK(envelope_valid_utf8("", 0, &at));
        CHECK(envelope_valid_utf8("plain \xc3\xa9 \xe7\xba\xa2 \xf0\x9f\x8d\xb5", 17, NULL));
        CHECK(!envelope_valid_utf8("ab\x80", 3, &at));
        CHECK_INT(at, 2);
        CHECK(!envelope_valid_utf8("\xe0\x80\xaf", 3, &at));  /* overlong */
        CHECK_INT(at, 0);
        CHECK(!envelope_valid_utf8("x\xf0\x9f\x8d", 4, &at));  /* cut short */
        CHECK_INT(at, 1);
        CHECK(envelope_valid_utf8("\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7, NULL));  /* U+FFFF, U+10FFFF */
        CHECK(!envelope_valid_utf8("\xff", 1, NULL));
}

int main(void)
{
        test_captured();
        test_refused();
        test_utf8();
        return check_summary();
}
